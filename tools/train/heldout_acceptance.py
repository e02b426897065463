#!/usr/bin/env python3
"""Acceptance of the bundled drafters in the engine, on the corpus's held-out
files: for every held-out file of at least 160 tokens, its first 128 tokens
are the prompt and `dspark run` continues it greedily (up to 256 tokens,
stopping at end of sequence) in each mode; the stamp line gives the rounds.

    python3 tools/train/heldout_acceptance.py CORPUS DSPARK [--jobs N] [--out FILE] [--save-prompts FILE]

CORPUS is corpus.py's output folder (heldout.txt; run corpus.py on the
machine the corpus was built on: the held-out split is a rule on the files'
hashes, see models/corpus-manifest.json), DSPARK the engine binary. Run from
the repository root (the bundled models are read from models/). Needs the
`tokenizers` package. Prints, per mode, the generated tokens, the rounds,
tokens per round (generated / rounds over all files, and the mean of the
files' own ratios) and how many outputs equal the baseline's.
--save-prompts writes the prompts as comma-separated token ids, one per
line (bench/heldout-speed.sh times the modes on them on any machine).
"""
import argparse
import concurrent.futures as cf
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import SEP  # noqa: E402

MODES = [
    ("baseline", "baseline", []),
    ("lookup, cap 3", "lookup", ["--max-draft", "3"]),
    ("dflash, cap 15", "dflash", ["--drafter", "models/dspark-coder-6m-dflash", "--max-draft", "15"]),
    ("dspark, cap 7", "dspark", ["--drafter", "models/dspark-coder-6m-dspark", "--max-draft", "7"]),
    ("dspark, cap 4", "dspark", ["--drafter", "models/dspark-coder-6m-dspark", "--max-draft", "4"]),
]


def run_one(dspark, ids, mode, extra):
    cmd = [dspark, "run", "--model", "models/dspark-coder-6m", "--prompt-ids", ",".join(map(str, ids)), "-n", "256",
           "--mode", mode, "-t", "1", "--print-ids", "--device", "cpu"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    stamp = [l for l in r.stderr.splitlines() if l.startswith("stamp:")]
    if r.returncode != 0 or not stamp:
        raise RuntimeError(f"{' '.join(cmd[:8])} ... failed: {r.stderr[-300:]}")
    gen = int(re.search(r"generated (\d+) tok", stamp[-1]).group(1))
    hist = re.search(r"accepted drafts per round ([0-9: ]+)", stamp[-1])
    rounds = sum(int(x.split(":")[1]) for x in hist.group(1).split()) if hist else gen
    return r.stdout.strip(), gen, rounds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("dspark")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out")
    ap.add_argument("--save-prompts")
    a = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file("models/dspark-coder-6m/tokenizer.json")
    with open(os.path.join(a.corpus, "heldout.txt"), encoding="utf-8", newline="") as f:
        docs = [d for d in f.read().split(SEP) if d]
    prompts = [ids[:128] for ids in (tok.encode(d).ids for d in docs) if len(ids) >= 160]
    if a.save_prompts:
        with open(a.save_prompts, "w") as f:
            f.write("".join(",".join(map(str, p)) + "\n" for p in prompts))
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        futs = {(i, name): ex.submit(run_one, a.dspark, p, mode, extra)
                for i, p in enumerate(prompts) for name, mode, extra in MODES}
        res = {k: f.result() for k, f in futs.items()}
    lines = [f"held-out files {len(docs)}, prompts {len(prompts)} (files of at least 160 tokens: their first 128); "
             f"greedy, up to 256 tokens"]
    lines.append("| mode | tokens | rounds | tokens per round | mean of files (min-max) | equal to baseline |")
    lines.append("|---|---:|---:|---:|---|---:|")
    for name, _, _ in MODES:
        gen = sum(res[(i, name)][1] for i in range(len(prompts)))
        rnd = sum(res[(i, name)][2] for i in range(len(prompts)))
        per = [res[(i, name)][1] / res[(i, name)][2] for i in range(len(prompts))]
        same = sum(res[(i, name)][0] == res[(i, "baseline")][0] for i in range(len(prompts)))
        lines.append(f"| {name} | {gen} | {rnd} | {gen / rnd:.2f} | {sum(per) / len(per):.2f} "
                     f"({min(per):.2f}-{max(per):.2f}) | {same}/{len(prompts)} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    bad = [name for name, _, _ in MODES if any(res[(i, name)][0] != res[(i, "baseline")][0] for i in range(len(prompts)))]
    if bad:
        sys.exit(f"outputs differ from the baseline in: {', '.join(bad)}")


if __name__ == "__main__":
    main()
