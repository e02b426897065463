"""The drafters' inference forward exactly as the spec states it (DSpark
sections 1.3-1.6, DFlash 2.3), in float32 over plain weight dicts, written
apart from the batched training code in drafters.py so that each checks the
other (the same approach as tools/gen_golden_drafters.py).

One round from scratch: context rows C_t = RMSNorm(fc F_t, hidden_norm) for
the committed positions t < s, their K/V (k_norm, RoPE at t; no
input_layernorm) in every layer; the block [x_s, M, ..., M] at positions
s..s+B-1 attends to [context ; block] with no mask; h = norm(X). DFlash: rows
1..B-1 through the target's lm_head, row j drafting position s+j. DSpark:
U = lm_head(h), then the greedy Markov loop z_k = U_k + W2 W1[prev] with
prev = anchor then the previous draft, and c_k = sigmoid(w.[h_k; W1[prev]] + b)."""
import math

import torch
import torch.nn.functional as F


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    """x [T, heads, D]; NeoX rotate_half at integer positions pos [T]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    ang = torch.as_tensor(pos, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], -1)[:, None, :].to(x.device)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * ang.cos() + torch.cat([-x2, x1], -1) * ang.sin()


def attention(q, k, v):
    """No mask. q [Tq, nq, D], k/v [Tk, nkv, D]; q head j uses kv head j // g."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    sc = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    p = torch.softmax(sc, -1)
    return torch.einsum("hqk,khd->qhd", p, v).reshape(q.shape[0], -1)


def qkv(W, pre, x, pos, D, eps, theta):
    T = x.shape[0]
    q = (x @ W[pre + "self_attn.q_proj.weight"].T).view(T, -1, D)
    k = (x @ W[pre + "self_attn.k_proj.weight"].T).view(T, -1, D)
    v = (x @ W[pre + "self_attn.v_proj.weight"].T).view(T, -1, D)
    q = rope(rmsnorm(q, W[pre + "self_attn.q_norm.weight"], eps), pos, theta)
    k = rope(rmsnorm(k, W[pre + "self_attn.k_norm.weight"], eps), pos, theta)
    return q, k, v


def mlp(W, pre, x):
    return (F.silu(x @ W[pre + "mlp.gate_proj.weight"].T) * (x @ W[pre + "mlp.up_proj.weight"].T)) \
        @ W[pre + "mlp.down_proj.weight"].T


def draft_round(cfg, W, embed, head, feats, tokens, s):
    """One draft round at anchor position s (x_s = tokens[s]) with the target
    features feats [>= s, n_taps*H] of the committed positions 0..s-1.
    Returns dict(U [B, V] or DFlash logits [B-1, V], h, drafts, z, conf)."""
    dfc = cfg.get("dflash_config") or {}
    dflash = cfg["architectures"][0] == "DFlashDraftModel"
    mask_id = dfc.get("mask_token_id", cfg.get("mask_token_id"))
    B, eps, D = cfg["block_size"], cfg["rms_norm_eps"], cfg["head_dim"]
    rp = cfg.get("rope_parameters") or {}
    theta = float(rp.get("rope_theta", cfg.get("rope_theta", 1e6)))
    Cc = rmsnorm(feats[:s] @ W["fc.weight"].T, W["hidden_norm.weight"], eps)
    ctx_pos = list(range(s))
    blk_pos = list(range(s, s + B))
    x = embed[torch.tensor([int(tokens[s])] + [mask_id] * (B - 1))]
    for l in range(cfg["num_hidden_layers"]):
        pre = f"layers.{l}."
        _, kc, vc = qkv(W, pre, Cc, ctx_pos, D, eps, theta)
        q, kb, vb = qkv(W, pre, rmsnorm(x, W[pre + "input_layernorm.weight"], eps), blk_pos, D, eps, theta)
        a = attention(q, torch.cat([kc, kb]), torch.cat([vc, vb]))
        x = x + a @ W[pre + "self_attn.o_proj.weight"].T
        x = x + mlp(W, pre, rmsnorm(x, W[pre + "post_attention_layernorm.weight"], eps))
    h = rmsnorm(x, W["norm.weight"], eps)
    if dflash:
        lg = h[1:] @ head.T
        return dict(U=lg, h=h, drafts=[int(t) for t in lg.argmax(-1)], z=None, conf=[])
    U = h @ head.T
    r = cfg.get("markov_rank", 0)
    if not r:
        return dict(U=U, h=h, drafts=[int(t) for t in U.argmax(-1)], z=None, conf=[])
    W1, W2 = W["markov_head.markov_w1.weight"], W["markov_head.markov_w2.weight"]
    prev, drafts, zs, conf = int(tokens[s]), [], [], []
    for k in range(B):
        e = W1[prev]
        z = U[k] + W2 @ e
        if cfg.get("enable_confidence_head"):
            c = torch.sigmoid(W["confidence_head.proj.weight"][0] @ torch.cat([h[k], e])
                              + W["confidence_head.proj.bias"][0])
            conf.append(float(c))
        prev = int(z.argmax())
        drafts.append(prev)
        zs.append(z)
    return dict(U=U, h=h, drafts=drafts, z=torch.stack(zs), conf=conf)
