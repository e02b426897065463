#!/usr/bin/env python3
"""Builds the small random-weight checkpoints under tests/data/models/ with
transformers itself and records reference outputs computed in float32.

Run on a machine with torch + transformers (the GPU machine; CPU is fine):
    python3 tools/gen_golden_models.py tests/data/models

For each checkpoint NAME it writes NAME/ (config.json, generation_config.json,
model.safetensors or shards + index) and:
  NAME/golden.json  {"prompt": ids, "greedy": 24 ids, "tokens": prompt+greedy,
                     "vocab": V, "margins": top1-top2 logit gap per greedy step,
                     "taps": [layers whose residual output is in hidden.bin]}
  NAME/logits.bin   float32 LE [len(tokens)][V]: logits of every position of
                    prompt+greedy, from one fp32 forward over the whole sequence
  NAME/hidden.bin   float32 LE [len(taps)][len(tokens)][hidden]: HF
                    hidden_states[l+1] (residual stream after decoder layer l)
The greedy continuation is computed without a KV cache (full recompute per
step) in float32 from the saved (possibly bf16/f16) weights.
"""
import json, os, shutil, sys

import torch
from transformers import (AutoModelForCausalLM, LlamaConfig, Qwen2Config,
                          Qwen3Config)

N_GREEDY = 24
PROMPT_LEN = 12


def build(out, name, cfg, dtype, seed, shard=None, legacy_rope=False, taps=(), post_save=None):
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        # Spread the weights so logits have clear margins (greedy must not
        # hinge on the last bit); norms around 1 but not exactly 1.
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith("bias"):
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (1.5 / p.shape[-1] ** 0.5))
    model = model.to(dtype)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, safe_serialization=True, **kw)
    if legacy_rope:
        # Rewrite config.json the way transformers 4 wrote it: rope_theta at
        # top level, rope_scaling instead of rope_parameters.
        p = os.path.join(d, "config.json")
        c = json.load(open(p))
        rp = c.pop("rope_parameters", None) or {}
        c["rope_theta"] = rp.get("rope_theta", 10000.0)
        rs = {k: v for k, v in rp.items() if k != "rope_theta"}
        c["rope_scaling"] = None if rs.get("rope_type", "default") == "default" else rs
        if "dtype" in c:
            c["torch_dtype"] = c.pop("dtype")
        json.dump(c, open(p, "w"), indent=2)

    if post_save:
        post_save(d, cfg)  # e.g. rewrite the saved layout into the published one
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(0, cfg.vocab_size, (PROMPT_LEN,), generator=g).tolist()
    toks = list(prompt)
    margins = []
    with torch.no_grad():
        for _ in range(N_GREEDY):
            lg = ref(torch.tensor([toks])).logits[0, -1]
            top = torch.topk(lg, 2).values
            margins.append(float(top[0] - top[1]))
            toks.append(int(torch.argmax(lg)))
        outp = ref(torch.tensor([toks]), output_hidden_states=True)
    logits = outp.logits[0].float().contiguous()
    logits.numpy().astype("<f4").tofile(os.path.join(d, "logits.bin"))
    if taps:
        hs = torch.stack([outp.hidden_states[l + 1][0] for l in taps]).float().contiguous()
        hs.numpy().astype("<f4").tofile(os.path.join(d, "hidden.bin"))
    gold = {"prompt": prompt, "greedy": toks[PROMPT_LEN:], "tokens": toks,
            "vocab": cfg.vocab_size, "hidden": cfg.hidden_size,
            "margins": [round(m, 6) for m in margins], "taps": list(taps),
            "dtype": str(dtype).replace("torch.", "")}
    json.dump(gold, open(os.path.join(d, "golden.json"), "w"))
    print(f"{name}: files={sorted(os.listdir(d))} min margin={min(margins):.4f} "
          f"max|logit|={logits.abs().max():.3f}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/models"
    os.makedirs(out, exist_ok=True)
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=160,
                  num_hidden_layers=3, max_position_embeddings=256,
                  rms_norm_eps=1e-6)
    q3 = dict(common, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              tie_word_embeddings=True, bos_token_id=None, eos_token_id=[7, 9],
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    build(out, "qwen3-bf16", Qwen3Config(**q3), torch.bfloat16, 11, taps=(0, 1))
    build(out, "qwen3-f16-sharded", Qwen3Config(**q3), torch.float16, 12, shard="150KB")
    build(out, "qwen3-f32-untied", Qwen3Config(**dict(q3, tie_word_embeddings=False)),
          torch.float32, 13)
    q2 = dict(common, num_attention_heads=4, num_key_value_heads=2,
              tie_word_embeddings=False, eos_token_id=5,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    build(out, "qwen2-bf16-legacy", Qwen2Config(**q2), torch.bfloat16, 21, legacy_rope=True)
    ll = dict(common, num_attention_heads=4, num_key_value_heads=1,
              tie_word_embeddings=False, bos_token_id=1, eos_token_id=[2, 3],
              rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64})
    build(out, "llama3-bf16", LlamaConfig(**ll), torch.bfloat16, 31, taps=(1,))
    build(out, "llama3-f16-legacy", LlamaConfig(**dict(ll, tie_word_embeddings=True)),
          torch.float16, 32, legacy_rope=True)


if __name__ == "__main__":
    main()
