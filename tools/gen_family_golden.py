#!/usr/bin/env python3
"""Builds small random-weight checkpoints of the families beyond qwen3, qwen2
and llama with transformers itself, and records float32 references, in the
layout of tools/gen_golden_models.py (NAME/golden.json, logits.bin and
hidden.bin when taps are asked for; see that script):

  mistral-bf16       MistralForCausalLM, an explicit head_dim (32, not
                     hidden / heads = 16), no sliding window
  mistral-swa-bf16   the same with sliding_window 16 (prompt + greedy = 36
                     positions, so later rows see only their window)
  gemma3-bf16        Gemma3ForCausalLM (gemma3_text): sliding (window 16)
                     and global layers interleaved, the two rope bases, linear
                     rope scaling on the global layers, query_pre_attn_scalar
                     24, GELU-tanh MLP, final logit soft-capping
  qwen3moe-bf16      Qwen3MoeForCausalLM: 8 experts, top 2, norm_topk_prob,
                     layer 1 a dense MLP (mlp_only_layers); saved one matrix
                     per expert as the published checkpoints are (the fused
                     tensors transformers 5 writes are split; the reference
                     then loads that layout)

Run on a machine with torch + transformers (CPU is enough; seconds):
    python3 tools/gen_family_golden.py tests/data/models
It prints the transformers version; the references are computed with
from_pretrained(..., dtype=float32), so the rope frequencies are not rounded
to the checkpoint's dtype.
"""
import os, sys

import torch
import transformers
from transformers import MistralConfig, Qwen3MoeConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden_models import build  # noqa: E402

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
              max_position_embeddings=256, rms_norm_eps=1e-6)


def gemma3_config():
    from transformers import Gemma3TextConfig
    kw = dict(COMMON, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24, sliding_window=16,
              layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
              final_logit_softcapping=5.0, attn_logit_softcapping=None, tie_word_embeddings=True,
              bos_token_id=2, eos_token_id=[1, 106], pad_token_id=0)
    # transformers 5 keeps one rope dict per layer type; 4.x has rope_theta,
    # rope_local_base_freq and rope_scaling (the global layers')
    try:
        cfg = Gemma3TextConfig(**kw, rope_parameters={
            "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
        rp = getattr(cfg, "rope_parameters", None)
        if not (isinstance(rp, dict) and "sliding_attention" in rp):
            raise TypeError("no per-layer-type rope_parameters")
        return cfg
    except TypeError:
        return Gemma3TextConfig(**kw, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                rope_scaling={"rope_type": "linear", "factor": 2.0})


def per_expert_layout(d, cfg):
    """transformers 5 saves a mixture of experts as fused tensors
    (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]);
    the published checkpoints (and dspark) have one matrix per expert
    (mlp.experts.N.{gate,up,down}_proj.weight). Rewrites the former into the
    latter; a checkpoint already per expert is left alone."""
    from safetensors.torch import load_file, save_file
    p = os.path.join(d, "model.safetensors")
    sd = load_file(p)
    if not any(k.endswith(".mlp.experts.gate_up_proj") for k in sd):
        return
    E, I, H = cfg.num_experts, cfg.moe_intermediate_size, cfg.hidden_size
    out = {}
    for k, v in sd.items():
        if k.endswith(".mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            assert tuple(v.shape) == (E, 2 * I, H), (k, tuple(v.shape))
            for e in range(E):
                out[f"{base}{e}.gate_proj.weight"] = v[e, :I].contiguous()
                out[f"{base}{e}.up_proj.weight"] = v[e, I:].contiguous()
        elif k.endswith(".mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            assert tuple(v.shape) == (E, H, I), (k, tuple(v.shape))
            for e in range(E):
                out[f"{base}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v
    save_file(out, p, metadata={"format": "pt"})
    print(f"{os.path.basename(d)}: fused experts rewritten one matrix per expert")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/models"
    os.makedirs(out, exist_ok=True)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    mi = dict(COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
              bos_token_id=1, eos_token_id=2, sliding_window=None,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    build(out, "mistral-bf16", MistralConfig(**mi), torch.bfloat16, 41, taps=(1,))
    build(out, "mistral-swa-bf16", MistralConfig(**dict(mi, sliding_window=16)), torch.bfloat16, 42)
    build(out, "gemma3-bf16", gemma3_config(), torch.bfloat16, 51, taps=(1, 2))
    moe = dict(COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
               num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True,
               decoder_sparse_step=1, mlp_only_layers=[1], bos_token_id=None, eos_token_id=[7, 9],
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    build(out, "qwen3moe-bf16", Qwen3MoeConfig(**moe), torch.bfloat16, 61, taps=(0, 2),
          post_save=per_expert_layout)


if __name__ == "__main__":
    main()
