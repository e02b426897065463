#!/usr/bin/env python3
"""Reference outputs for the bundled model family (models/), from independent
implementations: the target through transformers (float32), the drafters
through the PyTorch reference in tools/gen_golden_drafters.py (written from
the drafter specification).

Run on a machine with torch + transformers + tokenizers:
    python3 tools/gen_bundled_golden.py models/dspark-coder-6m tests/data/bundled

Writes OUT/target/ {golden.json, logits.bin, hidden.bin} in the format of
tools/gen_golden_models.py (prompt = a code snippet tokenized with the
model's tokenizer, 16 greedy tokens computed without a KV cache, logits of
every position, hidden_states[l+1] of the drafters' tap layers), and
OUT/<kind>/ {golden.json, logits.bin, zlogits.bin (DSpark), ctx.bin} for each
drafter found beside the model (MODEL-dflash, MODEL-dspark) in the format of
tools/gen_golden_drafters.py, with R = 3 rounds and accepted counts
[0, 2, 3] (prescribed, whatever the target says).
"""
import json, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden_drafters as G  # noqa: E402

PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
N_GREEDY = 16
G.R = 3
G.ACCEPT = [0, 2, 3]


def write_f32(path, t):
    t.float().contiguous().numpy().astype("<f4").tofile(path)


def main():
    mdir, out = sys.argv[1], sys.argv[2]
    torch.set_grad_enabled(False)
    from tokenizers import Tokenizer
    prompt = Tokenizer.from_file(os.path.join(mdir, "tokenizer.json")).encode(PROMPT).ids
    tgt = G.HFTarget(mdir)
    ref = G.RefTarget(mdir)
    tcfg = json.load(open(os.path.join(mdir, "config.json")))
    name = os.path.basename(os.path.normpath(mdir))
    drafters = []
    for kind in ("dflash", "dspark"):
        d = os.path.join(os.path.dirname(os.path.normpath(mdir)), f"{name}-{kind}")
        if os.path.isfile(os.path.join(d, "config.json")):
            drafters.append((kind, d))
    taps = set()
    for _, d in drafters:
        c = json.load(open(os.path.join(d, "config.json")))
        taps |= set((c.get("dflash_config") or {}).get("target_layer_ids") or c.get("target_layer_ids") or [])
    taps = sorted(taps)

    toks, margins = list(prompt), []
    for _ in range(N_GREEDY):
        lg = tgt.forward(toks)[0][-1]
        margins.append(G.margin(lg)[0])
        toks.append(int(lg.argmax()))
    lg, hs = tgt.forward(toks)
    lg2, hs2 = ref.forward(toks)
    dl = float((lg - lg2).abs().max())
    print(f"target: HF vs reference max|dlogit| {dl:.2e}; greedy {toks[len(prompt):]}")
    assert dl < 1e-3
    td = os.path.join(out, "target")
    os.makedirs(td, exist_ok=True)
    write_f32(os.path.join(td, "logits.bin"), lg)
    if taps:
        write_f32(os.path.join(td, "hidden.bin"), torch.stack([hs[l + 1] for l in taps]))
    json.dump({"model": name, "prompt": prompt, "greedy": toks[len(prompt):], "tokens": toks, "taps": taps,
               "vocab": tcfg["vocab_size"], "hidden": tcfg["hidden_size"],
               "margins": [round(m, 6) for m in margins]}, open(os.path.join(td, "golden.json"), "w"))

    for kind, d in drafters:
        cfg = json.load(open(os.path.join(d, "config.json")))
        W = G.load_st(os.path.join(d, "model.safetensors"))
        dr = G.Drafter(cfg, W, ref.W)
        rounds, logits, zl, seq = G.run_schedule(tgt, dr, prompt)
        dd = os.path.join(out, kind)
        os.makedirs(dd, exist_ok=True)
        write_f32(os.path.join(dd, "logits.bin"), torch.stack(logits))
        if zl:
            write_f32(os.path.join(dd, "zlogits.bin"), torch.stack(zl))
        n = len(seq) - 1
        C = dr.context(G.features(tgt, seq[:n], dr.taps))
        write_f32(os.path.join(dd, "ctx.bin"), C)
        rows = [m for r in rounds for m in r["margins"]]
        json.dump({"drafter": os.path.basename(d), "prompt": prompt, "rounds": rounds, "vocab": tcfg["vocab_size"],
                   "block_size": dr.B, "kind": dr.kind, "markov_rank": dr.r, "margins_min": min(rows),
                   "final_seq": seq, "ctx_rows": n}, open(os.path.join(dd, "golden.json"), "w"))
        print(f"{kind}: drafts per round {[r['drafts'] for r in rounds]}; min margin {min(rows):.4f}")


if __name__ == "__main__":
    main()
