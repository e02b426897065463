#!/usr/bin/env python3
"""Converts a dense Qwen3 checkpoint in Hugging Face layout (bf16
model.safetensors + config.json + tokenizer.json) to GGUF, for benchmarking
the same weights in llama.cpp. Uses llama.cpp's gguf-py package as a library
(PYTHONPATH=LLAMA_CPP/gguf-py) and numpy; no torch needed.
    hf_to_gguf.py MODEL_DIR TOKENIZER_DIR OUT.gguf
Metadata follows what llama.cpp's own converter writes for qwen3."""
import json, struct, sys

import numpy as np
import gguf


def read_safetensors(path):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "BF16", f"{name}: only BF16 checkpoints are handled"
        b, e = t["data_offsets"]
        yield name, mm[base + b: base + e].view(np.uint16).reshape(t["shape"])


def main(model_dir, tok_dir, out):
    cfg = json.load(open(f"{model_dir}/config.json"))
    tok = json.load(open(f"{tok_dir}/tokenizer.json"))
    w = gguf.GGUFWriter(out, "qwen3")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    # vocabulary: BPE tokens padded to vocab_size with [PADn] fillers
    vocab = tok["model"]["vocab"]
    added = {t["id"]: t for t in tok["added_tokens"]}
    V = cfg["vocab_size"]
    inv = {i: s for s, i in vocab.items()}
    tokens, types = [], []
    for i in range(V):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in inv:
            tokens.append(inv[i]); types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]"); types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(151643)
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for name, data in read_safetensors(f"{model_dir}/model.safetensors"):
        if name in names:
            gname = names[name]
        else:
            parts = name.split(".")
            gname = f"blk.{parts[2]}." + per_layer[".".join(parts[3:])]
        if data.ndim == 1:  # norms in f32, as the official converter writes them
            f32 = (data.astype(np.uint32) << 16).view(np.float32)
            w.add_tensor(gname, f32)
        else:
            w.add_tensor(gname, np.ascontiguousarray(data), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
