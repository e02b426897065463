"""Shared pieces of the training scripts: the tokenizer files, the chat
format, the function-completion task, a Qwen3 causal LM whose parameter names
and math are those of transformers' Qwen3ForCausalLM, and safetensors I/O.

Runs on torch 1.13 (CPU, for smoke tests) and torch 2.x (GPU)."""
import ast
import hashlib
import json
import math
import os
import struct
import textwrap

import torch
import torch.nn as nn
import torch.nn.functional as F

SEP = "\x1e"
EOT, IM_START, IM_END, THINK, END_THINK, MASK = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>")
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")

# Qwen-style chat template: one "<|im_start|>role\ncontent<|im_end|>\n" per
# message (a system message is just the first message), then the generation
# prompt "<|im_start|>assistant\n". render_chat below is the same in Python.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def render_chat(messages, add_generation_prompt=False):
    s = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return s + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def read_docs(path):
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    return [d for d in text.split(SEP) if d]


def h32(s):
    return int(hashlib.sha256(s.encode("utf-8")).hexdigest()[:8], 16)


# ----------------------------------------------------------------------------
# Tokenizer: the HF `tokenizers` library when present; a byte-level stand-in
# (ids 0..255 = bytes, then the special tokens) for smoke tests without it.

class Tok:
    def __init__(self, d):
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
        self.smoke = bool(cfg.get("smoke"))
        if self.smoke:
            self.specials = cfg["smoke_specials"]
            self.n = 256 + len(self.specials)
            self.ids = {s: 256 + i for i, s in enumerate(self.specials)}
        else:
            from tokenizers import Tokenizer
            self.t = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            self.n = self.t.get_vocab_size(with_added_tokens=True)
            self.ids = {s: self.t.token_to_id(s) for s in (EOT, IM_START, IM_END, THINK, END_THINK, MASK)}
        self.eot, self.im_start, self.im_end, self.mask = (self.ids[EOT], self.ids[IM_START],
                                                          self.ids[IM_END], self.ids[MASK])

    def encode_batch(self, texts):
        if not self.smoke:
            return [e.ids for e in self.t.encode_batch(texts, add_special_tokens=False)]
        out = []
        for t in texts:
            ids, i = [], 0
            while i < len(t):
                hit = next((s for s in self.specials if t.startswith(s, i)), None)
                if hit:
                    ids.append(self.ids[hit])
                    i += len(hit)
                else:
                    j = i
                    while j < len(t) and t[j] != "<":
                        j += 1
                    j = max(j, i + 1)
                    ids.extend(t[i:j].encode("utf-8"))
                    i = j
            out.append(ids)
        return out

    def decode(self, ids):
        if not self.smoke:
            return self.t.decode(list(ids), skip_special_tokens=False)
        inv = {v: k for k, v in self.ids.items()}
        b = bytearray()
        for i in ids:
            b.extend(inv[i].encode() if i in inv else bytes([i % 256]))
        return b.decode("utf-8", "replace")


# ----------------------------------------------------------------------------
# The function-completion chat task: the user gives a function's signature
# and docstring, the assistant writes the whole function.

PROMPTS = [
    "Write the body of this Python function.\n\n```python\n{head}\n```",
    "Implement the following Python function:\n\n```python\n{head}\n```",
    "Complete this function:\n\n```python\n{head}\n```",
]
SYSTEM = "You are a helpful assistant that writes Python code."


def functions_of(src, max_len=1400):
    """(head, full) for documented functions of a module: head = signature
    and docstring, full = the whole function, both dedented."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = src.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if len(node.body) < 2 or ast.get_docstring(node, clean=False) is None:
            continue
        doc_end = node.body[0].end_lineno
        if node.end_lineno is None or node.end_lineno - doc_end < 1:
            continue
        full = "\n".join(lines[node.lineno - 1:node.end_lineno])
        head = "\n".join(lines[node.lineno - 1:doc_end])
        if len(full) > max_len or len(head) > max_len // 2 or len(full) - len(head) < 20:
            continue
        full, head = textwrap.dedent(full), textwrap.dedent(head)
        if not full.startswith(("def ", "async def ")):
            continue
        out.append((head, full))
    return out


def chat_sample(head, full, with_answer=True):
    k = h32(head)
    msgs = []
    if k % 3 == 0:
        msgs.append({"role": "system", "content": SYSTEM})
    msgs.append({"role": "user", "content": PROMPTS[k % len(PROMPTS)].format(head=head)})
    if not with_answer:
        return render_chat(msgs, add_generation_prompt=True)
    msgs.append({"role": "assistant", "content": f"```python\n{full}\n```"})
    return render_chat(msgs)


def chat_samples(docs, max_bytes, workers=1):
    """Deterministic list of (head, full, text) chat samples from docs, up to
    max_bytes of text (functions in a fixed hash order)."""
    fs = []
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(workers) as ex:
            for r in ex.map(functions_of, docs, chunksize=16):
                fs.extend(r)
    else:
        for d in docs:
            fs.extend(functions_of(d))
    fs.sort(key=lambda hf: (h32(hf[1]), hf[1]))
    out, n, seen = [], 0, set()
    for head, full in fs:
        if full in seen:
            continue
        seen.add(full)
        s = chat_sample(head, full)
        out.append((head, full, s))
        n += len(s)
        if n >= max_bytes:
            break
    return out


# ----------------------------------------------------------------------------
# Qwen3 math

class RMSNorm(nn.Module):
    """Qwen3RMSNorm: fp32 statistics, cast back, times the weight."""

    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def rope_cos_sin(pos, d, theta, dtype):
    """pos: int tensor [...]; returns cos, sin [..., d] (fp32 math, cast)."""
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=pos.device).float() / d))
    ang = pos.float()[..., None] * inv
    ang = torch.cat([ang, ang], -1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x [..., T, D] with cos/sin broadcastable to it (NeoX rotate_half)."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attend(q, k, v, mask=None, causal=False):
    """q [B, nq, Tq, D], k/v [B, nkv, Tk, D] (q head j uses kv head j // g);
    mask: bool, True = may attend, broadcastable to [B, nq, Tq, Tk]."""
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    sc = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        Tq, Tk = q.shape[-2], k.shape[-2]
        cm = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
        mask = cm if mask is None else (mask & cm)
    if mask is not None:
        sc = sc.masked_fill(~mask, float("-inf"))
    p = torch.softmax(sc.float(), -1).to(v.dtype)
    return torch.matmul(p, v)


class Attn(nn.Module):
    def __init__(self, H, nq, nkv, D, eps):
        super().__init__()
        self.nq, self.nkv, self.D = nq, nkv, D
        self.q_proj = nn.Linear(H, nq * D, bias=False)
        self.k_proj = nn.Linear(H, nkv * D, bias=False)
        self.v_proj = nn.Linear(H, nkv * D, bias=False)
        self.o_proj = nn.Linear(nq * D, H, bias=False)
        self.q_norm = RMSNorm(D, eps)
        self.k_norm = RMSNorm(D, eps)

    def q(self, x, cos, sin):
        s = x.shape[:-1]
        q = self.q_norm(self.q_proj(x).view(*s, self.nq, self.D)).transpose(-2, -3)
        return apply_rope(q, cos.to(q.dtype), sin.to(q.dtype))

    def kv(self, x, cos, sin):
        """x [B, T, H] -> k, v [B, nkv, T, D] (k_norm, RoPE on k)."""
        s = x.shape[:-1]
        k = self.k_norm(self.k_proj(x).view(*s, self.nkv, self.D)).transpose(-2, -3)
        v = self.v_proj(x).view(*s, self.nkv, self.D).transpose(-2, -3)
        return apply_rope(k, cos.to(k.dtype), sin.to(k.dtype)), v


class MLP(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(c["hidden_size"], eps)
        self.self_attn = Attn(c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                              c["head_dim"], eps)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], eps)
        self.mlp = MLP(c["hidden_size"], c["intermediate_size"])


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


def rope_theta(c):
    rp = c.get("rope_parameters") or {}
    return float(rp.get("rope_theta", c.get("rope_theta", 1e6)))


class Qwen3LM(nn.Module):
    """Qwen3ForCausalLM with a tied lm_head (state_dict names as in
    transformers: model.embed_tokens.weight, model.layers.{i}..., model.norm.weight)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Backbone(c)
        self.theta = rope_theta(c)

    def init_weights(self, seed, std=0.02):
        g = torch.Generator().manual_seed(seed)
        L = self.c["num_hidden_layers"]
        for n, p in self.named_parameters():
            with torch.no_grad():
                if n.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    s = std / math.sqrt(2 * L) if n.endswith(("o_proj.weight", "down_proj.weight")) else std
                    p.copy_(torch.randn(p.shape, generator=g) * s)

    def forward(self, ids, pos0=0, cache=None, hidden=False, last_only=False):
        """ids [B, T]. cache: None, or a dict {"k": [L][B,nkv,Tmax,D], "v": ..}
        filled at pos0..pos0+T-1 (pos0 == 0 with any T, or T == 1).
        Returns logits (fp32) and, with hidden, the list of residual-stream
        outputs: hs[0] = embeddings, hs[l+1] = output of layer l."""
        m = self.model
        B, T = ids.shape
        x = m.embed_tokens(ids)
        pos = torch.arange(pos0, pos0 + T, device=ids.device)
        cos, sin = rope_cos_sin(pos, self.c["head_dim"], self.theta, torch.float32)
        hs = [x] if hidden else None
        for li, layer in enumerate(m.layers):
            a = layer.input_layernorm(x)
            q = layer.self_attn.q(a, cos, sin)
            k, v = layer.self_attn.kv(a, cos, sin)
            if cache is not None:
                cache["k"][li][:, :, pos0:pos0 + T] = k
                cache["v"][li][:, :, pos0:pos0 + T] = v
                if pos0 > 0:
                    assert T == 1
                    k = cache["k"][li][:, :, :pos0 + T]
                    v = cache["v"][li][:, :, :pos0 + T]
            o = attend(q.to(v.dtype), k.to(v.dtype), v, causal=(T > 1))
            o = o.transpose(1, 2).reshape(B, T, -1)
            x = x + layer.self_attn.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            if hidden:
                hs.append(x)
        h = m.norm(x if not last_only else x[:, -1:])
        logits = F.linear(h, m.embed_tokens.weight).float()
        return (logits, hs) if hidden else logits

    def new_cache(self, B, Tmax, dtype, device):
        c = self.c
        shp = (B, c["num_key_value_heads"], Tmax, c["head_dim"])
        L = c["num_hidden_layers"]
        return {"k": [torch.zeros(shp, dtype=dtype, device=device) for _ in range(L)],
                "v": [torch.zeros(shp, dtype=dtype, device=device) for _ in range(L)]}

    @torch.no_grad()
    def generate(self, prompts, n_new, dtype=torch.bfloat16):
        """Greedy continuation of equal-length prompts [B, P] -> [B, P + n_new]."""
        B, P = prompts.shape
        dev = prompts.device
        cache = self.new_cache(B, P + n_new, dtype, dev)
        out = torch.empty(B, P + n_new, dtype=prompts.dtype, device=dev)
        out[:, :P] = prompts
        ac = torch.autocast("cuda", dtype=dtype) if (prompts.is_cuda and dtype != torch.float32) else _null()
        with ac:
            lg = self.forward(prompts, 0, cache, last_only=True)
            for t in range(n_new):
                nxt = lg[:, -1].argmax(-1)
                out[:, P + t] = nxt
                if t + 1 < n_new:
                    lg = self.forward(nxt[:, None], P + t, cache)
        return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def qwen3_config(V, H, I, L, nq, nkv, D, max_pos, bos, eos):
    """config.json keys of a transformers 5 Qwen3 checkpoint (mirrors
    tests/data/drafters/target/config.json key for key)."""
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": bos, "dtype": "bfloat16", "eos_token_id": eos, "head_dim": D,
        "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02, "intermediate_size": I,
        "layer_types": ["full_attention"] * L, "max_position_embeddings": max_pos,
        "max_window_layers": L, "model_type": "qwen3", "num_attention_heads": nq,
        "num_hidden_layers": L, "num_key_value_heads": nkv, "pad_token_id": bos,
        "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "sliding_window": None, "tie_word_embeddings": True, "transformers_version": "5.17.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": V,
    }


# ----------------------------------------------------------------------------
# safetensors (the library when present, else a small writer/reader)

_DT = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16", torch.int64: "I64"}
_TD = {v: k for k, v in _DT.items()}


def save_st(path, tensors):
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path, metadata={"format": "pt"})
        return
    except ImportError:
        pass
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k in sorted(tensors):
        t = tensors[k]
        b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        hdr[k] = {"dtype": _DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, m in hdr.items():
        if k == "__metadata__":
            continue
        a, b = m["data_offsets"]
        dt = _TD[m["dtype"]]
        raw = bytearray(data[a:b])
        if dt == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[k] = t.reshape(m["shape"]).clone()
    return out


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(d) for f in fs)


def n_params(sd):
    return sum(v.numel() for v in sd.values())
