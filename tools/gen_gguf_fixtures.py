#!/usr/bin/env python3
"""Writes the GGUF fixtures of tests/test_gguf.c into tests/data/gguf/ with
llama.cpp's own writer (gguf-py's GGUFWriter), so the C reader is checked
against files the reference implementation produces.

    python3 tools/gen_gguf_fixtures.py /path/to/llama.cpp/gguf-py
    (or GGUF_PY=/path/to/llama.cpp/gguf-py python3 tools/gen_gguf_fixtures.py)

Files:
  types.gguf       every metadata value type, arrays of numbers, bools and
                   strings, one tensor of every ggml type the reader accepts
                   (bytes a fixed pattern the test recomputes), alignment 64
  split-0000N-of-00003.gguf  a split set, one tensor per part
  qwen3-tiny.gguf  tests/data/models/qwen3-bf16 as convert_hf_to_gguf.py
                   would write it (names, metadata), 2-D weights in F16 and
                   1-D ones in F32 (the converter's --outtype f16)
  llama3-tiny.gguf tests/data/models/llama3-bf16 likewise, q/k rows permuted
                   with the converter's rule, llama3 rope as rope_freqs.weight
"""
import json
import math
import os
import struct
import sys

import numpy as np


def gguf_module():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GGUF_PY")
    if not path:
        sys.exit("usage: gen_gguf_fixtures.py GGUF_PY_DIR (llama.cpp/gguf-py), or set GGUF_PY")
    sys.path.insert(0, path)
    import gguf  # noqa: E402

    return gguf


gguf = gguf_module()
GT = gguf.GGMLQuantizationType
VT = gguf.GGUFValueType
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "gguf")

# accepted tensor types, in the order of types.gguf's tensors
QTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


def pattern(n, seed):
    """The bytes the C test recomputes: (i * 7 + seed) & 255."""
    return ((np.arange(n, dtype=np.int64) * 7 + seed) & 255).astype(np.uint8)


def write(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gen_types():
    w = gguf.GGUFWriter(os.path.join(OUT, "types.gguf"), "test")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo GGUF")
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float64("t.f64", -2.25e100)
    w.add_string("t.empty", "")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -0.25])
    w.add_array("t.arr_str", ["a", "", "ccc"])
    w.add_array("t.arr_bool", [True, False])
    w.add_key_value("t.arr_u8", [1, 2, 255], VT.ARRAY, sub_type=VT.UINT8)
    w.add_key_value("t.arr_i64", [-1, 1 << 40], VT.ARRAY, sub_type=VT.INT64)
    w.add_key_value("t.arr_f64", [0.125], VT.ARRAY, sub_type=VT.FLOAT64)
    # float tensors: values i * 0.5 - 3 (exact in every float type)
    v = (np.arange(2 * 3, dtype=np.float32) * 0.5 - 3).reshape(2, 3)
    w.add_tensor("f32", v)
    w.add_tensor("f16", v.astype(np.float16))
    bf = (v.view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("bf16", bf, raw_dtype=GT.BF16)
    w.add_tensor("vec", np.arange(5, dtype=np.float32))
    w.add_tensor("cube", np.zeros((2, 3, 4), dtype=np.float32) + 1)
    for i, q in enumerate(QTYPES):
        t = GT[q]
        blk, sz = gguf.GGML_QUANT_SIZES[t]
        rows, nblk = 2, 2 if blk == 32 else 1
        b = pattern(rows * nblk * sz, i).reshape(rows, nblk * sz)
        w.add_tensor(q.lower(), b, raw_dtype=t)
    write(w)


def gen_split():
    w = gguf.GGUFWriter(os.path.join(OUT, "split.gguf"), "test", split_max_tensors=1)
    w.add_string("t.first", "part one")
    for i in range(3):
        w.add_tensor("t%d" % i, np.full(4, i, dtype=np.float32))
    write(w)


def read_safetensors(path):
    """name -> float32 array (BF16/F16/F32 safetensors)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = data[b:en]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        else:
            a = np.frombuffer(raw, dtype=np.float32).copy()
        out[name] = a.reshape(e["shape"])
    return out


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute (q and k rows: each head's
    two rotary halves interleaved)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    p = hf.split(".")
    assert p[0] == "model" and p[1] == "layers", hf
    return "blk.%s.%s.%s" % (p[2], HF_TO_GGUF[".".join(p[3:-1])], p[-1])


def gen_model(src, arch, out):
    d = os.path.join(ROOT, "tests", "data", "models", src)
    cfg = json.load(open(os.path.join(d, "config.json")))
    gen = json.load(open(os.path.join(d, "generation_config.json")))
    ts = read_safetensors(os.path.join(d, "model.safetensors"))
    w = gguf.GGUFWriter(os.path.join(OUT, out), arch)
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    # TextModel.set_gguf_parameters
    w.add_name(src)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if cfg.get("head_dim") is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if arch == "llama":  # LlamaModel.set_gguf_parameters
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim)
    # the special-token ids (gguf.SpecialVocab): eos from the generation
    # config's first id, the second as end-of-turn
    eos = gen.get("eos_token_id", cfg.get("eos_token_id"))
    eos = eos if isinstance(eos, list) else [eos]
    bos = gen.get("bos_token_id", cfg.get("bos_token_id"))
    w.add_tokenizer_model("gpt2")
    if bos is not None:
        w.add_bos_token_id(bos)
    w.add_eos_token_id(eos[0])
    if len(eos) > 1:
        w.add_eot_token_id(eos[1])
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if arch == "llama" and rp.get("rope_type") == "llama3":  # LlamaModel.generate_extra_tensors
        freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
        factor, lo, hi = rp.get("factor", 8.0), rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
        old = rp.get("original_max_position_embeddings", 8192)
        lo_wl, hi_wl = old / lo, old / hi
        fac = []
        for f in freqs:
            wl = 2 * math.pi / f
            if wl < hi_wl:
                fac.append(1)
            elif wl > lo_wl:
                fac.append(factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                fac.append(1 / ((1 - s) / factor + s))
        w.add_tensor("rope_freqs.weight", np.array(fac, dtype=np.float32))
    for hf in sorted(ts):
        a = ts[hf]
        if arch == "llama" and hf.endswith(("q_proj.weight", "q_proj.bias")):
            a = permute(a, nh, nh)
        if arch == "llama" and hf.endswith(("k_proj.weight", "k_proj.bias")):
            a = permute(a, nh, nkv)
        a = np.ascontiguousarray(a)
        w.add_tensor(gguf_name(hf), a.astype(np.float16) if a.ndim == 2 else a.astype(np.float32))
    write(w)


def main():
    os.makedirs(OUT, exist_ok=True)
    gen_types()
    gen_split()
    gen_model("qwen3-bf16", "qwen3", "qwen3-tiny.gguf")
    gen_model("llama3-bf16", "llama", "llama3-tiny.gguf")


if __name__ == "__main__":
    main()
