#!/usr/bin/env python3
"""Builds the quantized-checkpoint fixtures under tests/data/quant_models/
(MLX affine folders and GGUF files) and their reference outputs, with NumPy
only (plus llama.cpp's gguf-py, and its llama-quantize for the K types).

    PYTHONPATH=LLAMA_CPP/gguf-py python3 tools/gen_quant_models.py \\
        tests/data/models tests/data/quant_models \\
        [--llama-quantize LLAMA_CPP/build/bin/llama-quantize] [--work DIR]
    python3 tools/gen_quant_models.py --validate tests/data/models

Sources: the bf16 checkpoints of tests/data/models/ (qwen3-bf16, llama3-bf16,
qwen2-bf16-legacy) and "qwen3-256", a random Qwen3 checkpoint made here
(hidden 256, intermediate 512) whose rows are whole K-quant super-blocks; it
is written to --work only (not committed), as is its F16 GGUF, the input of
llama-quantize.

Each fixture gets golden.json + logits.bin in the format of
tests/data/models/*/ (tools/gen_golden_models.py), computed by a float64
NumPy forward of the model on the weights as the file itself holds them:
the GGUF is read back with gguf-py's GGUFReader and dequantized with
gguf-py's numpy dequantize; the MLX folder is read back (safetensors +
config.json) and dequantized as w = scale * q + bias per group, the module
being quantized iff NAME.scales is present (mlx-lm's load rule) with its
group_size/bits from the per-module entry of "quantization" if any.
--validate checks that forward against the transformers logits of the bf16
checkpoints.

MLX quantization follows mlx.core.quantize (affine) as its Metal kernel
computes it, in float32 per group of G elements along a row:
    w_min = min(w), w_max = max(0, max(w))       (the kernel starts max at 0)
    s = max((w_max - w_min) / (2^bits - 1), 1e-7)
    if |w_min| > |w_max|: edge = w_min  else: edge = w_max, s = -s
    q0 = round(edge / s)                          (round half away from zero)
    if q0 != 0: s = edge / q0, bias = edge  else: bias = 0
    q = clamp(round((w - bias) / s), 0, 2^bits - 1)
scales and biases are stored in the weight's dtype (bf16 here); the codes of
a row form one little-endian bit stream (element 0 in the lowest bits), held
as uint32 words, so 3/5/6-bit elements straddle bytes and words.
"""
import argparse, json, math, os, shutil, struct, subprocess, sys, tempfile

import numpy as np

N_GREEDY = 24
PROMPT_LEN = 12
MIN_MARGIN = 0.03
PROMPT_TRIES = 64

# ---------------------------------------------------------------- safetensors

ST_DT = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U32": np.uint32,
         "I32": np.int32, "U8": np.uint8, "F64": np.float64}


def st_read(path):
    """name -> (dtype string, numpy array of the raw element type)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in hdr.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            dt = np.dtype(ST_DT[info["dtype"]]).newbyteorder("<")
            out[name] = (info["dtype"], np.frombuffer(raw, dtype=dt).reshape(info["shape"]).copy())
    return out


def st_read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        out.update(st_read(os.path.join(d, fn)))
    return out


def st_write(path, tensors, metadata=None):
    """tensors: name -> (dtype string, array); written in sorted name order."""
    hdr, blobs, off = {}, [], 0
    if metadata:
        hdr["__metadata__"] = metadata
    for name in sorted(tensors):
        dt, a = tensors[name]
        b = np.ascontiguousarray(a).astype(np.dtype(ST_DT[dt]).newbyteorder("<"), copy=False).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def bf16_to_f32(u):
    return (u.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even, as torch/MLX do (no NaNs here)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def to_float(dt, a):
    if dt == "BF16":
        return bf16_to_f32(a)
    return a.astype(np.float32) if dt != "F64" else a


# ---------------------------------------------------------------- model config

class Cfg:
    def __init__(self, c):
        self.raw = c
        self.arch = c["model_type"]
        self.V = c["vocab_size"]
        self.H = c["hidden_size"]
        self.F = c["intermediate_size"]
        self.L = c["num_hidden_layers"]
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads") or self.nh
        self.hd = c.get("head_dim") or self.H // self.nh
        self.eps = c["rms_norm_eps"]
        self.tied = bool(c.get("tie_word_embeddings", False))
        rp = c.get("rope_parameters") or {}
        self.theta = float(rp.get("rope_theta", c.get("rope_theta", 10000.0)))
        rs = dict(rp) if rp else dict(c.get("rope_scaling") or {})
        rs.pop("rope_theta", None)
        if rs.get("rope_type", rs.get("type", "default")) == "default":
            rs = {}
        self.rope_scaling = rs
        self.qk_norm = self.arch == "qwen3"
        self.qkv_bias = self.arch == "qwen2" or bool(c.get("attention_bias", False))

    def inv_freq(self):
        """HF's default / llama3 inverse frequencies, float64."""
        inv = 1.0 / (self.theta ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd))
        rs = self.rope_scaling
        if not rs:
            return inv
        if rs.get("rope_type", rs.get("type")) != "llama3":
            raise ValueError(f"rope scaling {rs} not handled")
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        out = np.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * out / factor + smooth * out
        med = ~(wl < hi_wl) & ~(wl > lo_wl)
        return np.where(med, smoothed, out)


# ---------------------------------------------------------------- the forward

def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, inv, pos):
    """NeoX layout (rotate_half): x [T, heads, hd]."""
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def forward(cfg, W, tokens):
    """float64 logits [T, V]; W: HF tensor names -> float64 arrays."""
    T = len(tokens)
    pos = np.arange(T)
    inv = cfg.inv_freq()
    x = W["model.embed_tokens.weight"][np.asarray(tokens)]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    grp = cfg.nh // cfg.nkv
    for l in range(cfg.L):
        p = f"model.layers.{l}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], cfg.eps)
        q = h @ W[p + "self_attn.q_proj.weight"].T
        k = h @ W[p + "self_attn.k_proj.weight"].T
        v = h @ W[p + "self_attn.v_proj.weight"].T
        if cfg.qkv_bias:
            q = q + W[p + "self_attn.q_proj.bias"]
            k = k + W[p + "self_attn.k_proj.bias"]
            v = v + W[p + "self_attn.v_proj.bias"]
        q = q.reshape(T, cfg.nh, cfg.hd)
        k = k.reshape(T, cfg.nkv, cfg.hd)
        v = v.reshape(T, cfg.nkv, cfg.hd)
        if cfg.qk_norm:
            q = rmsnorm(q, W[p + "self_attn.q_norm.weight"], cfg.eps)
            k = rmsnorm(k, W[p + "self_attn.k_norm.weight"], cfg.eps)
        q, k = rope(q, inv, pos), rope(k, inv, pos)
        k = np.repeat(k, grp, axis=1)
        v = np.repeat(v, grp, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(cfg.hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, cfg.nh * cfg.hd)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, W["model.norm.weight"], cfg.eps)
    head = W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]
    return x @ head.T


def greedy(cfg, W, prompt):
    toks, margins = list(prompt), []
    for _ in range(N_GREEDY):
        lg = forward(cfg, W, toks)[-1]
        o = np.argsort(lg)[::-1]
        margins.append(float(lg[o[0]] - lg[o[1]]))
        toks.append(int(o[0]))
    return toks, margins


def golden(cfg, W, prompt, out_dir, note, seed):
    """Greedy continuation (full recompute per step) + logits of the whole
    sequence, written as golden.json / logits.bin. The source checkpoint's
    prompt is kept unless some greedy step's top-2 gap is under MIN_MARGIN;
    then seeded random prompts are tried and the one with the widest
    smallest gap is taken, so that an engine computing in fp32 (or with
    quantized activations) can be held to the exact greedy ids."""
    best = None
    rng = np.random.default_rng(seed)
    for i in range(PROMPT_TRIES):
        p = list(prompt) if i == 0 else rng.integers(0, cfg.V, PROMPT_LEN).tolist()
        toks, margins = greedy(cfg, W, p)
        if best is None or min(margins) > min(best[2]):
            best = (p, toks, margins)
        if min(margins) >= MIN_MARGIN:
            break
    prompt, toks, margins = best
    logits = forward(cfg, W, toks)
    # the greedy ids must be the argmax of the full-sequence rows too
    assert [int(i) for i in logits[len(prompt) - 1:-1].argmax(-1)] == toks[len(prompt):]
    logits.astype("<f4").tofile(os.path.join(out_dir, "logits.bin"))
    g = {"prompt": list(prompt), "greedy": toks[len(prompt):], "tokens": toks,
         "vocab": cfg.V, "hidden": cfg.H, "margins": [round(m, 6) for m in margins],
         "taps": [], "reference": note}
    json.dump(g, open(os.path.join(out_dir, "golden.json"), "w"))
    return min(margins), float(np.abs(logits).max())


# ---------------------------------------------------------------- HF checkpoints

def load_hf(d):
    cfg = Cfg(json.load(open(os.path.join(d, "config.json"))))
    W = {n: to_float(dt, a).astype(np.float64) for n, (dt, a) in st_read_dir(d).items()}
    return cfg, W


def make_qwen3_256(d, seed=256):
    """A random Qwen3 checkpoint (bf16) whose matmul rows are whole 256-wide
    K-quant super-blocks: hidden 256, 2 heads x 128, 1 KV head, intermediate
    512 (ffn_down rows hold two super-blocks), 2 layers, vocab 512, tied."""
    os.makedirs(d, exist_ok=True)
    c = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "bos_token_id": None,
         "dtype": "bfloat16", "eos_token_id": [7, 9], "head_dim": 128, "hidden_act": "silu",
         "hidden_size": 256, "intermediate_size": 512, "max_position_embeddings": 256,
         "model_type": "qwen3", "num_attention_heads": 2, "num_hidden_layers": 2,
         "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
         "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
         "tie_word_embeddings": True, "vocab_size": 512}
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"eos_token_id": [7, 9]}, open(os.path.join(d, "generation_config.json"), "w"), indent=2)
    cfg = Cfg(c)
    rng = np.random.default_rng(seed)
    shapes = {"model.embed_tokens.weight": (cfg.V, cfg.H), "model.norm.weight": (cfg.H,)}
    for l in range(cfg.L):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (cfg.H,),
                       p + "post_attention_layernorm.weight": (cfg.H,),
                       p + "self_attn.q_proj.weight": (cfg.nh * cfg.hd, cfg.H),
                       p + "self_attn.k_proj.weight": (cfg.nkv * cfg.hd, cfg.H),
                       p + "self_attn.v_proj.weight": (cfg.nkv * cfg.hd, cfg.H),
                       p + "self_attn.o_proj.weight": (cfg.H, cfg.nh * cfg.hd),
                       p + "self_attn.q_norm.weight": (cfg.hd,),
                       p + "self_attn.k_norm.weight": (cfg.hd,),
                       p + "mlp.gate_proj.weight": (cfg.F, cfg.H),
                       p + "mlp.up_proj.weight": (cfg.F, cfg.H),
                       p + "mlp.down_proj.weight": (cfg.H, cfg.F)})
    t = {}
    for n, s in shapes.items():
        if "norm" in n:
            w = 1.0 + 0.2 * rng.standard_normal(s)
        else:
            w = rng.standard_normal(s) * (1.5 / s[-1] ** 0.5)
        t[n] = ("BF16", f32_to_bf16(w.astype(np.float32)))
    st_write(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    prompt = np.random.default_rng(seed + 1).integers(0, cfg.V, PROMPT_LEN).tolist()
    return prompt


# ---------------------------------------------------------------- MLX affine

def round_away(x):
    """Metal's round(): half away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))


def mlx_quantize(w, group, bits):
    """w float32 [N, K] -> (packed uint32 [N, K*bits/32], scales f32, biases f32)
    with the scales/biases still unrounded (the caller stores them as bf16)."""
    N, K = w.shape
    assert K % group == 0 and (K * bits) % 32 == 0
    g = w.astype(np.float32).reshape(N, K // group, group)
    n_bins = np.float32((1 << bits) - 1)
    w_min = g.min(-1)
    w_max = np.maximum(g.max(-1), np.float32(0))
    scale = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7)).astype(np.float32)
    side = np.abs(w_min) > np.abs(w_max)
    scale = np.where(side, scale, -scale).astype(np.float32)
    edge = np.where(side, w_min, w_max).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q0 = round_away(edge / scale)
        at_zero = q0 == 0
        scale = np.where(at_zero, scale, edge / np.where(at_zero, 1, q0)).astype(np.float32)
    bias = np.where(at_zero, np.float32(0), edge).astype(np.float32)
    q = round_away((g - bias[..., None]) / scale[..., None])
    q = np.clip(q, 0, n_bins).astype(np.uint8).reshape(N, K)
    return mlx_pack(q, bits), scale, bias


def mlx_pack(q, bits):
    N, K = q.shape
    b = ((q[..., None] >> np.arange(bits, dtype=np.uint8)) & 1).reshape(N, K * bits)
    return np.packbits(b, axis=-1, bitorder="little").view("<u4").reshape(N, K * bits // 32)


def mlx_unpack(packed, bits, K):
    N = packed.shape[0]
    b = np.unpackbits(packed.astype("<u4").view(np.uint8), axis=-1, bitorder="little")
    b = b.reshape(N, -1)[:, :K * bits].reshape(N, K, bits).astype(np.uint32)
    return (b << np.arange(bits, dtype=np.uint32)).sum(-1)


def mlx_dequantize(packed, scales, biases, group, bits):
    """float64 w = scale * q + bias (scales/biases as stored)."""
    K = packed.shape[1] * 32 // bits
    q = mlx_unpack(packed, bits, K).astype(np.float64).reshape(packed.shape[0], K // group, group)
    return (q * scales[..., None] + biases[..., None]).reshape(packed.shape[0], K)


def quantizable(name):
    """Modules mlx-lm's nn.quantize turns into QuantizedLinear/Embedding."""
    return name.endswith(".weight") and ("_proj." in name or name.startswith("lm_head.")
                                         or name == "model.embed_tokens.weight")


def write_mlx(src, out, group, bits, overrides=None, keys=("quantization", "quantization_config"),
              mode=True):
    """An MLX folder as mlx-lm's convert writes it: modules whose input width
    is not a multiple of their group stay unquantized (mlx-lm's predicate),
    overrides: module path -> {"group_size", "bits"} or False."""
    overrides = overrides or {}
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    c = json.load(open(os.path.join(src, "config.json")))
    tensors = st_read_dir(src)
    dtype = {dt for n, (dt, a) in tensors.items()}
    assert dtype == {"BF16"}, dtype
    outt = {}
    for name, (dt, a) in tensors.items():
        mod = name[:-len(".weight")] if name.endswith(".weight") else None
        if mod is not None and quantizable(name):
            ov = overrides.get(mod, None)
            gs, bi = (group, bits) if ov is None else ((ov["group_size"], ov["bits"]) if ov else (None, None))
            if gs is not None and a.shape[-1] % gs == 0:
                packed, s, b = mlx_quantize(bf16_to_f32(a), gs, bi)
                outt[name] = ("U32", packed)
                outt[mod + ".scales"] = ("BF16", f32_to_bf16(s))
                outt[mod + ".biases"] = ("BF16", f32_to_bf16(b))
                continue
        outt[name] = (dt, a)
    st_write(os.path.join(out, "model.safetensors"), outt, {"format": "mlx"})
    total = sum(np.asarray(a).nbytes for _, a in outt.values())
    json.dump({"metadata": {"total_size": total},
               "weight_map": {n: "model.safetensors" for n in sorted(outt)}},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=4)
    q = {"group_size": group, "bits": bits}
    if mode:
        q["mode"] = "affine"
    q.update(overrides)
    for k in keys:
        c[k] = q
    c = {k: c[k] for k in sorted(c)}
    json.dump(c, open(os.path.join(out, "config.json"), "w"), indent=4)
    g = os.path.join(src, "generation_config.json")
    if os.path.exists(g):
        shutil.copy(g, out)


def read_mlx(d):
    """Read an MLX folder back the way mlx-lm loads it; float64 HF weights."""
    c = json.load(open(os.path.join(d, "config.json")))
    q = c.get("quantization") or c.get("quantization_config")
    t = st_read_dir(d)
    W, kinds = {}, {}
    for name, (dt, a) in t.items():
        if name.endswith((".scales", ".biases")):
            continue
        mod = name[:-len(".weight")] if name.endswith(".weight") else None
        if mod is not None and mod + ".scales" in t:
            ov = q.get(mod)
            assert ov is not False, mod
            gs, bits = (ov["group_size"], ov["bits"]) if isinstance(ov, dict) else (q["group_size"], q["bits"])
            assert dt == "U32"
            s = to_float(*t[mod + ".scales"]).astype(np.float64)
            b = to_float(*t[mod + ".biases"]).astype(np.float64)
            assert s.shape == b.shape and s.shape[1] * gs == a.shape[1] * 32 // bits, name
            W[name] = mlx_dequantize(a, s, b, gs, bits)
            kinds[name] = f"{bits}b/g{gs}"
        else:
            W[name] = to_float(dt, a).astype(np.float64)
            kinds[name] = dt
    return Cfg(c), W, kinds


# ---------------------------------------------------------------- GGUF

def gguf_mod():
    import gguf  # llama.cpp's gguf-py, on PYTHONPATH
    return gguf


ARCH = {"qwen3": "QWEN3", "qwen2": "QWEN2", "llama": "LLAMA"}


def permute(w, n_head):
    """convert_hf_to_gguf's LlamaModel.permute (HF NeoX halves -> GGML pairs)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute(w, n_head):
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(src, path, qtype_name, name):
    """A GGUF as convert_hf_to_gguf.py writes it with --outtype f16 / q8_0
    (and, with the same rules, q4_0/q4_1/q5_0/q5_1): 2-D weights in the type,
    1-D tensors and norms in F32, llama's q/k rows permuted, llama3 rope
    factors as rope_freqs.weight. Tokenizer: "none" (no tokenizer files)."""
    gguf = gguf_mod()
    c = json.load(open(os.path.join(src, "config.json")))
    cfg = Cfg(c)
    arch = getattr(gguf.MODEL_ARCH, ARCH[cfg.arch])
    qt = getattr(gguf.GGMLQuantizationType, qtype_name)
    ftype = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
             "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0, "Q5_1": gguf.LlamaFileType.MOSTLY_Q5_1}[qtype_name]
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[arch])
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    w.add_block_count(cfg.L)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(cfg.H)
    w.add_feed_forward_length(cfg.F)
    w.add_head_count(cfg.nh)
    w.add_head_count_kv(cfg.nkv)
    w.add_rope_freq_base(cfg.theta)
    w.add_layer_norm_rms_eps(cfg.eps)
    if c.get("head_dim") is not None:
        w.add_key_length(c["head_dim"])
        w.add_value_length(c["head_dim"])
    w.add_file_type(ftype)
    # LlamaModel writes these two; the "none" tokenizer needs the vocab size
    w.add_vocab_size(cfg.V)
    if cfg.arch == "llama":
        w.add_rope_dimension_count(cfg.hd)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model("none")

    tmap = gguf.get_tensor_name_map(arch, cfg.L)
    items = []
    if cfg.arch == "llama" and cfg.rope_scaling:
        # LlamaModel.generate_extra_tensors: 1/factor per frequency pair
        rs = cfg.rope_scaling
        freqs = 1.0 / (cfg.theta ** (np.arange(0, cfg.hd, 2, dtype=np.float32) / cfg.hd))
        lo_wl = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
        hi_wl = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
        f = []
        for fr in freqs:
            wl = 2 * math.pi / fr
            if wl < hi_wl:
                f.append(1)
            elif wl > lo_wl:
                f.append(rs["factor"])
            else:
                sm = (rs["original_max_position_embeddings"] / wl - rs["low_freq_factor"]) / \
                     (rs["high_freq_factor"] - rs["low_freq_factor"])
                f.append(1 / ((1 - sm) / rs["factor"] + sm))
        items.append((gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight",
                      np.array(f, dtype=np.float32)))
    for hf, (dt, a) in sorted(st_read_dir(src).items()):
        data = to_float(dt, a).astype(np.float32)
        if cfg.arch == "llama":
            if hf.endswith(("q_proj.weight", "q_proj.bias")):
                data = permute(data, cfg.nh)
            elif hf.endswith(("k_proj.weight", "k_proj.bias")):
                data = permute(data, cfg.nkv)
        new = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert new is not None, hf
        items.append((new, data))
    for new, data in items:
        t = qt
        if data.ndim <= 1 or new.endswith("_norm.weight"):
            t = gguf.GGMLQuantizationType.F32
        try:
            q = gguf.quants.quantize(data, t)
        except gguf.QuantError:
            t = gguf.GGMLQuantizationType.F16
            q = gguf.quants.quantize(data, t)
        w.add_tensor(new, q, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_gguf(path):
    """Read a GGUF back: its config (from the metadata) and float64 HF weights,
    each tensor dequantized by gguf-py; llama's q/k rows un-permuted."""
    gguf = gguf_mod()
    r = gguf.GGUFReader(path)
    kv = {}
    for f in r.fields.values():
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        v = f.parts[f.data[0]] if f.data else None
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            v = bytes(v).decode()
        elif v is not None:
            v = v.tolist()[0]
        kv[f.name] = v
    arch = kv["general.architecture"]
    A = lambda k, d=None: kv.get(f"{arch}.{k}", d)
    H, nh = A("embedding_length"), A("attention.head_count")
    c = {"model_type": arch, "vocab_size": A("vocab_size"), "hidden_size": H,
         "intermediate_size": A("feed_forward_length"), "num_hidden_layers": A("block_count"),
         "num_attention_heads": nh, "num_key_value_heads": A("attention.head_count_kv"),
         "head_dim": A("attention.key_length", H // nh),
         "rms_norm_eps": A("attention.layer_norm_rms_epsilon"),
         "rope_theta": A("rope.freq_base", 10000.0)}
    tmap = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()), c["num_hidden_layers"])
    types = {}
    W = {}
    rope_freqs = None
    for t in r.tensors:
        qt = gguf.GGMLQuantizationType(t.tensor_type)
        arr = gguf.quants.dequantize(np.asarray(t.data), qt).astype(np.float64)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        arr = arr.reshape(shape)
        if t.name == "rope_freqs.weight":
            rope_freqs = arr
            continue
        types[t.name] = qt.name
        W[t.name] = arr
    # GGUF name -> HF name (invert the mapping over the names this arch has)
    inv = {}
    L = c["num_hidden_layers"]
    hf_names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for l in range(L):
        for m in ("input_layernorm.weight", "post_attention_layernorm.weight",
                  "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                  "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                  "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"):
            hf_names.append(f"model.layers.{l}.{m}")
    for hf in hf_names:
        g = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is not None:
            inv[g] = hf
    HW = {}
    for g, a in W.items():
        hf = inv[g]
        if arch == "llama":
            if hf.endswith(("q_proj.weight", "q_proj.bias")):
                a = unpermute(a, nh)
            elif hf.endswith(("k_proj.weight", "k_proj.bias")):
                a = unpermute(a, c["num_key_value_heads"])
        HW[hf] = a
    c["tie_word_embeddings"] = "lm_head.weight" not in HW
    cfg = Cfg(c)
    if rope_freqs is not None:
        cfg.rope_factors = rope_freqs
    return cfg, HW, types, kv


def gguf_forward_cfg(cfg):
    """llama.cpp divides each frequency by rope_freqs; the reference uses that
    directly when the file carries them."""
    f = getattr(cfg, "rope_factors", None)
    if f is not None:
        base = 1.0 / (cfg.theta ** (np.arange(0, cfg.hd, 2, dtype=np.float64) / cfg.hd))
        cfg.inv_freq = lambda: base / f
    return cfg


def llama_quantize(exe, src, dst, ftype, pure):
    cmd = [exe] + (["--pure"] if pure else []) + [src, dst, ftype]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"llama-quantize failed: {' '.join(cmd)}")


# ---------------------------------------------------------------- driver

MLX_CASES = [
    # name, source, group, bits, overrides, config keys, with "mode"
    ("qwen3-mlx-4bit-g64", "qwen3-bf16", 64, 4, None, ("quantization",), False),
    ("qwen3-mlx-8bit-g32-mixed", "qwen3-bf16", 32, 8,
     {"model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 4},
      "model.layers.1.self_attn.q_proj": {"group_size": 64, "bits": 5},
      "model.embed_tokens": {"group_size": 64, "bits": 6},
      "model.layers.2.mlp.gate_proj": False},
     ("quantization", "quantization_config"), True),
    ("llama3-mlx-6bit-g32", "llama3-bf16", 32, 6, None, ("quantization_config",), True),
    ("qwen2-mlx-3bit-g32", "qwen2-bf16-legacy", 32, 3, None, ("quantization", "quantization_config"), True),
    ("qwen3-256-mlx-2bit-g128", "qwen3-256", 128, 2, None, ("quantization", "quantization_config"), True),
]

GGUF_CASES = [  # name, source, type (gguf-py quantize)
    ("qwen3-f16", "qwen3-bf16", "F16"),
    ("llama3-f16", "llama3-bf16", "F16"),
    ("qwen2-f16", "qwen2-bf16-legacy", "F16"),
    ("qwen3-q8_0", "qwen3-bf16", "Q8_0"),
    ("qwen3-q4_0", "qwen3-bf16", "Q4_0"),
    ("qwen3-q4_1", "qwen3-bf16", "Q4_1"),
    ("qwen3-q5_0", "qwen3-bf16", "Q5_0"),
    ("qwen3-q5_1", "qwen3-bf16", "Q5_1"),
    ("llama3-q8_0", "llama3-bf16", "Q8_0"),
    ("qwen2-q4_0", "qwen2-bf16-legacy", "Q4_0"),
]

KQUANT_CASES = [  # name, llama-quantize ftype, --pure, made without --all-k
    ("qwen3-256-q2_k", "Q2_K", True, True),
    ("qwen3-256-q3_k", "Q3_K_M", True, True),
    ("qwen3-256-q4_k", "Q4_K_S", True, False),   # Q4_K_M holds Q4_K tensors
    ("qwen3-256-q5_k", "Q5_K_S", True, True),
    ("qwen3-256-q6_k", "Q6_K", True, False),     # Q4_K_M holds Q6_K tensors
    ("qwen3-256-q4_k_m", "Q4_K_M", False, True),
]


def src_prompt(models, src, work):
    if src == "qwen3-256":
        return json.load(open(os.path.join(work, "qwen3-256", "prompt.json")))
    return json.load(open(os.path.join(models, src, "golden.json")))["prompt"]


def src_dir(models, src, work):
    return os.path.join(work, src) if src == "qwen3-256" else os.path.join(models, src)


def summarize(kinds):
    out = {}
    for v in kinds.values():
        out[v] = out.get(v, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in sorted(out.items()))


def validate(models):
    worst = 0.0
    for name in ("qwen3-bf16", "llama3-bf16", "qwen2-bf16-legacy", "qwen3-f32-untied",
                 "qwen3-f16-sharded", "llama3-f16-legacy"):
        d = os.path.join(models, name)
        if not os.path.isdir(d):
            continue
        cfg, W = load_hf(d)
        g = json.load(open(os.path.join(d, "golden.json")))
        ref = np.fromfile(os.path.join(d, "logits.bin"), dtype="<f4").reshape(len(g["tokens"]), g["vocab"])
        lg = forward(cfg, W, g["tokens"])
        err = float(np.abs(lg - ref).max())
        rel = err / float(np.abs(ref).max())
        ids_ok = [int(i) for i in lg[len(g["prompt"]) - 1:-1].argmax(-1)] == g["greedy"]
        print(f"validate {name}: max|numpy64 - transformers fp32| = {err:.3g} "
              f"(rel {rel:.3g}), greedy ids {'match' if ids_ok else 'DIFFER'}")
        worst = max(worst, err)
        if not ids_ok or err > 1e-3:
            raise SystemExit("validation failed")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", help="tests/data/models")
    ap.add_argument("out", nargs="?", help="tests/data/quant_models")
    ap.add_argument("--llama-quantize", help="llama.cpp's llama-quantize (for the K types)")
    ap.add_argument("--all-k", action="store_true",
                    help="also the pure Q4_K and Q6_K files (not committed: size)")
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    ap.add_argument("--validate", action="store_true", help="only check the NumPy forward")
    a = ap.parse_args()
    validate(a.models)
    if a.validate or not a.out:
        return
    os.makedirs(a.out, exist_ok=True)
    work = a.work or tempfile.mkdtemp(prefix="quantfix-")
    os.makedirs(work, exist_ok=True)
    prompt = make_qwen3_256(os.path.join(work, "qwen3-256"))
    json.dump(prompt, open(os.path.join(work, "qwen3-256", "prompt.json"), "w"))

    for name, src, gs, bits, ov, keys, mode in MLX_CASES:
        out = os.path.join(a.out, name)
        write_mlx(src_dir(a.models, src, work), out, gs, bits, ov, keys, mode)
        cfg, W, kinds = read_mlx(out)
        m, mx_ = golden(cfg, W, src_prompt(a.models, src, work), out,
                        "float64 NumPy forward on the weights dequantized from this folder "
                        "(w = scale * q + bias), tools/gen_quant_models.py", seed=sum(map(ord, name)))
        print(f"{name}: {summarize(kinds)}; min margin {m:.4f}, max|logit| {mx_:.2f}")

    def gguf_golden(path, src):
        cfg, W, types, _ = read_gguf(path)
        cfg = gguf_forward_cfg(cfg)
        d = os.path.dirname(path)
        m, mx_ = golden(cfg, W, src_prompt(a.models, src, work), d,
                        "float64 NumPy forward on the tensors of the .gguf dequantized by "
                        "gguf-py (gguf.quants.dequantize), tools/gen_quant_models.py",
                        seed=sum(map(ord, os.path.basename(d))))
        print(f"{os.path.basename(d)}: {summarize(types)}; min margin {m:.4f}, max|logit| {mx_:.2f}")

    for name, src, t in GGUF_CASES:
        path = os.path.join(a.out, name, "model.gguf")
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        os.makedirs(os.path.dirname(path))
        write_gguf(src_dir(a.models, src, work), path, t, src)
        gguf_golden(path, src)

    if a.llama_quantize:
        f16 = os.path.join(work, "qwen3-256-f16.gguf")
        write_gguf(os.path.join(work, "qwen3-256"), f16, "F16", "qwen3-256")
        for name, ftype, pure, default in KQUANT_CASES:
            if not (default or a.all_k):
                continue
            path = os.path.join(a.out, name, "model.gguf")
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            os.makedirs(os.path.dirname(path))
            llama_quantize(a.llama_quantize, f16, path, ftype, pure)
            gguf_golden(path, "qwen3-256")
    else:
        print("no --llama-quantize: K-type fixtures skipped")


if __name__ == "__main__":
    main()
