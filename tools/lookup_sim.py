#!/usr/bin/env python3
"""Simulates n-gram drafting on a model's own greedy outputs: how many tokens
per verify round prompt lookup (as src/spec/lookup.c drafts) and a static n-gram
table built from other outputs of the same model would give, and an
estimated speedup from a verify cost curve.

    tools/lookup_sim.py --dspark ./dspark --corpus /usr/lib/python3.11 \
        --store 1200 --out OUT_DIR [--costs 1,1.15,1.45,...]

It runs `dspark run --print-ids` (the bundled model unless $DSPARK_MODEL is
set) on --store prompts cut from the Python files under --corpus (half raw
windows of 200-1200 bytes, half chat turns giving a documented function's
signature and docstring), 256 greedy tokens each, and on `dspark bench`'s
four built-in prompts (128 tokens); it caches the ids in OUT_DIR and prints
the table. The context lookup searches is the prompt's text tokenized (for a
chat turn without the template's few marker tokens) plus the output so far.
Deterministic for a given corpus, model and binary."""
import argparse
import ast
import collections
import glob
import json
import os
import random
import subprocess

BENCH = [  # (text, through the chat template)
    ("I'm planning a one-week trip to Japan in April with a friend. We like food, easy hikes and quiet towns "
     "more than big cities, and our budget is moderate. Could you suggest an itinerary, how to get around, "
     "and a few things we should book in advance?", True),
    ("Write a Python function merge_intervals(intervals) that takes a list of [start, end] pairs of integers, "
     "merges every pair of overlapping or touching intervals, and returns the merged intervals sorted by start. "
     "It must not modify its input. Include type hints, a docstring and a few doctest examples, and state the "
     "time complexity.", True),
    ("A train leaves a station at 9:00 travelling at 80 km/h. A second train leaves the same station at 10:30 "
     "on a parallel track in the same direction at 120 km/h. At what time does the second train catch up with "
     "the first, and how far from the station are they then? Solve it step by step.", True),
    ('import os\n\n\ndef find_files(root, suffix):\n    """Return the paths of all files under root whose name '
     'ends with suffix."""\n    result = []\n    for dirpath, dirnames, filenames in os.walk(root):\n', False),
]


def generate(dspark, text, chat, n):
    args = [dspark, "run", "-t", "2", "-n", str(n), "--print-ids"]
    args += ["--chat", "--no-thinking", "--prompt", text] if chat else ["--prompt", text]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"dspark run failed: {p.stderr.strip()}")
    gen = [int(x) for x in p.stdout.strip().split(",") if x.strip()]
    model = os.environ.get("DSPARK_MODEL") or os.path.join(os.path.dirname(dspark), "models", "dspark-coder-6m")
    q = subprocess.run([dspark, "tokenize", "--model", model, "--", text], capture_output=True, text=True)
    if q.returncode:
        raise RuntimeError(f"dspark tokenize failed: {q.stderr.strip()}")
    return {"prompt": json.loads(q.stdout), "gen": gen}


def store_prompts(corpus, count, seed):
    rng = random.Random(seed)
    files = sorted(glob.glob(os.path.join(corpus, "**", "*.py"), recursive=True))
    rng.shuffle(files)
    out = []
    for f in files * 5:
        if len(out) >= count:
            break
        try:
            src = open(f, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        if len(src) < 2000:
            continue
        if rng.random() < 0.5:
            i = src.rfind("\n", 0, rng.randrange(0, len(src) - 1500)) + 1
            out.append((src[i:i + rng.randrange(200, 1200)], False))
            continue
        try:
            fns = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and ast.get_docstring(n)]
        except (SyntaxError, ValueError):
            continue
        if fns:
            fn = rng.choice(fns)
            sig = src.splitlines()[fn.lineno - 1].strip()
            out.append((f'{sig}\n    """{ast.get_docstring(fn)}"""', True))
    return out


def static_table(store, nmax):
    """context tuple (1..nmax ids) -> (most frequent next id, its share), from contexts seen twice or more"""
    counts = [collections.defaultdict(collections.Counter) for _ in range(nmax + 1)]
    for r in store:
        s = r["gen"]
        for i in range(len(s)):
            for n in range(1, min(nmax, i) + 1):
                counts[n][tuple(s[i - n:i])][s[i]] += 1
    tab = [{} for _ in range(nmax + 1)]
    for n in range(1, nmax + 1):
        for c, cnt in counts[n].items():
            tot = sum(cnt.values())
            if tot >= 2:
                t, k = cnt.most_common(1)[0]
                tab[n][c] = (t, k / tot)
    return tab


def lookup_propose(ctx, k, nmax=3):
    """src/spec/lookup.c: the ids after the most recent earlier occurrence of the longest suffix n-gram"""
    for g in range(nmax, 0, -1):
        if len(ctx) <= g:
            continue
        suf = ctx[-g:]
        for e in range(len(ctx) - 1, g - 1, -1):
            if ctx[e - g:e] == suf:
                return ctx[e:e + k]
    return []


def static_propose(ctx, k, tab):
    c, out = list(ctx), []
    for _ in range(k):
        nxt = None
        for n in range(len(tab) - 1, 0, -1):
            if len(c) >= n and tuple(c[-n:]) in tab[n]:
                nxt = tab[n][tuple(c[-n:])][0]
                break
        if nxt is None:
            break
        out.append(nxt)
        c.append(nxt)
    return out


def simulate(evals, propose, costs):
    toks = rounds = 0
    cost = 0.0
    for r in evals:
        ctx, gen, i = list(r["prompt"]), r["gen"], 0
        while i < len(gen):
            d = propose(ctx)[:len(costs) - 1]
            a = 0
            while a < len(d) and i + a < len(gen) and d[a] == gen[i + a]:
                a += 1
            step = min(a + 1, len(gen) - i)
            ctx += gen[i:i + step]
            i += step
            toks += step
            rounds += 1
            cost += costs[len(d)]
    return toks / rounds, toks / cost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dspark", default="./dspark")
    ap.add_argument("--corpus", required=True, help="a directory of Python files (e.g. the standard library)")
    ap.add_argument("--store", type=int, default=1200, help="completions the static table is built from")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nmax", type=int, default=4, help="longest context of the static table")
    ap.add_argument("--costs", default="1,1.15,1.45,1.54,1.9,2.0,2.25,2.33",
                    help="t(w)/t(1) for w = 1.. (default: bench/drafter-cost.sh on the bundled model, 2 threads)")
    ap.add_argument("--out", required=True, help="directory caching the generated ids")
    a = ap.parse_args()
    dspark = os.path.abspath(a.dspark)
    os.makedirs(a.out, exist_ok=True)
    costs = [float(x) for x in a.costs.split(",")]
    cache = {}
    for name, make in (("store", lambda: [generate(dspark, t, c, 256) for t, c in
                                          store_prompts(a.corpus, a.store, a.seed)]),
                       ("bench", lambda: [generate(dspark, t, c, 128) for t, c in BENCH])):
        path = os.path.join(a.out, f"{name}.json")
        if not os.path.exists(path):
            json.dump(make(), open(path, "w"))
        cache[name] = json.load(open(path))
    tab = static_table(cache["store"], a.nmax)
    print(f"static table: {sum(len(t) for t in tab)} contexts from {len(cache['store'])} completions "
          f"({sum(len(r['gen']) for r in cache['store'])} tokens)")
    print("| drafter | cap | tok/round | est. speedup |\n|---|---:|---:|---:|")
    for k in (1, 2, 3, len(costs) - 1):
        for name, prop in (("lookup", lambda ctx, k=k: lookup_propose(ctx, k)),
                           ("static n-gram", lambda ctx, k=k: static_propose(ctx, k, tab))):
            tpr, sp = simulate(cache["bench"], prop, costs)
            print(f"| {name} | {k} | {tpr:.2f} | {sp:.2f}x |")


if __name__ == "__main__":
    main()
