#!/usr/bin/env python3
"""Trains a DFlash drafter (z-lab layout) and a DSpark drafter (DeepSpec
layout) against the frozen target, checks them, and measures acceptance.

    python3 tools/train/drafters.py CORPUS_DIR TARGET_DIR OUT_ROOT \\
        --train-dflash SECONDS --train-dspark SECONDS [--seed 0]

writes OUT_ROOT/<target name>-dflash/ and OUT_ROOT/<target name>-dspark/
(config.json + model.safetensors, bf16).

Data (self-distillation): prompts are windows of --prompt-len tokens of the
train files (as packed for the target) or chat prompts of the function task
(signature and docstring; the window's preceding tokens fill it to the same
length after an <|endoftext|>); the target continues each greedily for
--gen-len tokens (float32). Every training batch runs the frozen target over
its sequences once (float32): the features F_t = [hidden_states[l+1] for l in
taps] and the target's logits. Anchors p are drawn in the generated part,
--anchors per sequence; each anchor's block [x_p, mask x (B-1)] sits at
positions p..p+B-1 and attends (no mask inside the block) to the context K/V
of positions < p (C_t = RMSNorm(fc F_t), k_norm, RoPE at t) and to its own
rows: all anchors of a batch go through one attention with an explicit mask
over [context rows ; all block rows].

Losses: DSpark (drafters.md 1.7): row k predicts the token at p+k+1;
z_k = U_k + W2 W1[prev_k], prev_k the true token at p+k (the anchor for k=0);
0.1 CE + 0.9 TV(softmax z_k, target softmax) + 1.0 BCE(confidence(h_k,
W1[prev_k]), 1 - TV detached), weights exp(-k/4). DFlash: row j >= 1
predicts the token at p+j; 0.5 CE + 0.5 cross-entropy to the target's
distribution, weights exp(-(j-1)/7). The embedding (and lm_head) are the
target's tied embedding, frozen; DSpark stores byte-identical copies.
AdamW, warm-up then cosine decay, bf16 autocast; drafter layers start as
copies of the target's last layers. The step count follows from the measured
step time and the budget, unless --steps-dflash / --steps-dspark pin it.

Checks after training, from the saved files: reference.draft_round (the
inference forward of the spec: context cache of committed positions,
full-width block, greedy Markov loop) equals the training path's logits
(float32, allclose) at a few held-out anchors; then greedy speculative
decoding is simulated on held-out prompts (code windows and chat prompts)
against the target's greedy output: tokens per round (accepted + 1) for each
cap 1..block. --log FILE gets a JSON summary."""
import argparse
import copy
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
import reference as R  # noqa: E402

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def autocast(dev, on=True):
    if dev.type == "cuda" and on:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return C._null()


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------
# Model

class Drafter(nn.Module):
    """DFlash / DSpark drafter; parameter names are the checkpoint's tensor
    names (no "model." prefix). embed is the target's (frozen) embedding,
    used as input embedding and as lm_head."""

    def __init__(self, kind, tcfg, n_layers, taps, block, mask_id, markov_rank, embed):
        super().__init__()
        c = dict(tcfg)
        c["num_hidden_layers"] = n_layers
        self.c, self.kind, self.taps, self.B, self.mask_id = c, kind, list(taps), block, mask_id
        H, eps = c["hidden_size"], c["rms_norm_eps"]
        self.theta = C.rope_theta(c)
        self.fc = nn.Linear(len(taps) * H, H, bias=False)
        self.hidden_norm = C.RMSNorm(H, eps)
        self.layers = nn.ModuleList([C.Layer(c) for _ in range(n_layers)])
        self.norm = C.RMSNorm(H, eps)
        self.r = markov_rank if kind == "dspark" else 0
        if self.r:
            self.markov_head = nn.Module()
            self.markov_head.markov_w1 = nn.Embedding(c["vocab_size"], self.r)
            self.markov_head.markov_w2 = nn.Linear(self.r, c["vocab_size"], bias=False)
            self.confidence_head = nn.Module()
            self.confidence_head.proj = nn.Linear(H + self.r, 1)
        self.register_buffer("embed", embed, persistent=False)

    def init_from(self, target, seed):
        g = torch.Generator().manual_seed(seed)
        H = self.c["hidden_size"]
        tl = target.model.layers
        with torch.no_grad():
            for i, layer in enumerate(self.layers):  # copies of the target's last layers
                layer.load_state_dict(tl[len(tl) - len(self.layers) + i].state_dict())
            w = torch.randn(H, len(self.taps) * H, generator=g) * 0.02
            w[:, -H:] += torch.eye(H)  # start as the deepest tap
            self.fc.weight.copy_(w)
            if self.r:
                self.markov_head.markov_w1.weight.copy_(torch.randn(self.c["vocab_size"], self.r, generator=g))
                self.markov_head.markov_w2.weight.zero_()
                self.confidence_head.proj.weight.copy_(
                    torch.randn(1, H + self.r, generator=g) * 0.02)
                self.confidence_head.proj.bias.zero_()

    def context(self, feats):
        return self.hidden_norm(self.fc(feats))

    def backbone(self, Cc, blk_ids, anchors):
        """Cc [Bs, T, H] context rows at positions 0..T-1; blk_ids [Bs, A, B];
        anchors [Bs, A] (block a sits at anchors[:, a] + 0..B-1 and sees
        context rows t < anchors[:, a]). Returns h [Bs, A, B, H]."""
        Bs, T, H = Cc.shape
        A, B = blk_ids.shape[1], blk_ids.shape[2]
        dev = Cc.device
        x = F.embedding(blk_ids.reshape(Bs, A * B), self.embed).to(Cc.dtype)
        bpos = (anchors[:, :, None] + torch.arange(B, device=dev)).reshape(Bs, A * B)
        cos_b, sin_b = C.rope_cos_sin(bpos, self.c["head_dim"], self.theta, torch.float32)
        cos_b, sin_b = cos_b[:, None], sin_b[:, None]  # [Bs, 1, A*B, D]
        cos_c, sin_c = C.rope_cos_sin(torch.arange(T, device=dev), self.c["head_dim"], self.theta, torch.float32)
        ctx_ok = torch.arange(T, device=dev)[None, None, :] < anchors[:, :, None]  # [Bs, A, T]
        ctx_ok = ctx_ok.repeat_interleave(B, dim=1)  # [Bs, A*B, T]
        ab = torch.arange(A * B, device=dev) // B
        blk_ok = (ab[:, None] == ab[None, :])[None].expand(Bs, -1, -1)
        mask = torch.cat([ctx_ok, blk_ok], -1)[:, None]  # [Bs, 1, A*B, T + A*B]
        for layer in self.layers:
            at = layer.self_attn
            kc, vc = at.kv(Cc, cos_c, sin_c)  # context: no input_layernorm
            a = layer.input_layernorm(x)
            q = at.q(a, cos_b, sin_b)
            kb, vb = at.kv(a, cos_b, sin_b)
            k = torch.cat([kc.to(vb.dtype), kb.to(vb.dtype)], 2)
            v = torch.cat([vc.to(vb.dtype), vb], 2)
            o = C.attend(q.to(v.dtype), k, v, mask=mask)
            o = o.transpose(1, 2).reshape(Bs, A * B, -1)
            x = x + at.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x).reshape(Bs, A, B, H)

    def logits(self, h):
        return F.linear(h, self.embed.to(h.dtype)).float()

    def markov(self, U, prev):
        e = self.markov_head.markov_w1(prev)
        return U + self.markov_head.markov_w2(e).float(), e

    def confidence(self, h, e):
        return self.confidence_head.proj(torch.cat([h, e.to(h.dtype)], -1)).squeeze(-1).float()

    def save(self, d, tcfg, tgt_embed_bf16, extra):
        os.makedirs(d, exist_ok=True)
        # (DSpark's copies of the target's embedding and LM head are left out:
        # the engine takes the target's, as for DFlash; tgt_embed_bf16 is
        # what they would hold)
        sd = {k: v.detach().to(torch.bfloat16).cpu() for k, v in self.state_dict().items()}
        C.save_st(os.path.join(d, "model.safetensors"), sd)
        cfg = drafter_config(tcfg, self.kind, len(self.layers), self.taps, self.B, self.mask_id, self.r, extra)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        return sd, cfg


def drafter_config(tcfg, kind, n_layers, taps, block, mask_id, r, extra):
    """The target's config with the keys of the published layouts (as in
    tools/gen_golden_drafters.py and tests/data/drafters/*/config.json)."""
    c = copy.deepcopy(tcfg)
    c["num_target_layers"] = tcfg["num_hidden_layers"]
    c["num_hidden_layers"] = n_layers
    c["tie_word_embeddings"] = False
    c["layer_types"] = ["full_attention"] * n_layers
    c["max_window_layers"] = n_layers
    c["dtype"] = "bfloat16"
    if kind == "dflash":
        c["architectures"] = ["DFlashDraftModel"]
        c["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
        c["model_type"] = "qwen3"
        c["block_size"] = block
        c["dflash_config"] = {"mask_token_id": mask_id, "target_layer_ids": list(taps)}
    else:
        c["architectures"] = ["Qwen3DSparkModel"]
        c["block_size"] = block
        c["mask_token_id"] = mask_id
        c["target_layer_ids"] = list(taps)
        c["num_anchors"] = extra.get("num_anchors", 512)
        c["enable_confidence_head"] = r > 0
        c["confidence_head_with_markov"] = r > 0
        c["markov_rank"] = r
        c["markov_head_type"] = "vanilla"
    return c


# ----------------------------------------------------------------------------
# Target features

@torch.no_grad()
def target_pass(target, ids, taps, chunk=16):
    """ids [N, T] -> (features [N, T, n_taps*H], logits [N, T, V]) in fp32."""
    fs, ls = [], []
    for i in range(0, ids.shape[0], chunk):
        lg, hs = target(ids[i:i + chunk], hidden=True)
        fs.append(torch.cat([hs[l + 1] for l in taps], -1))
        ls.append(lg)
    return torch.cat(fs), torch.cat(ls)


# ----------------------------------------------------------------------------
# Losses

def sample_anchors(Bs, A, lo, hi, g, dev):
    """A distinct anchors per row, uniform in [lo, hi]."""
    n = hi - lo + 1
    A = min(A, n)
    r = torch.rand(Bs, n, generator=g).argsort(-1)[:, :A] + lo
    return r.sort(-1).values.to(dev)


def gather_rows(X, idx):
    """X [Bs, T, ...], idx [Bs, A, K] -> [Bs, A, K, ...]"""
    Bs = X.shape[0]
    b = torch.arange(Bs, device=X.device)[:, None, None]
    return X[b, idx]


def dspark_loss(m, tok, TL, Cc, anchors):
    B = m.B
    Bs, A = anchors.shape
    dev = tok.device
    kk = torch.arange(B, device=dev)
    blk = torch.full((Bs, A, B), m.mask_id, dtype=torch.long, device=dev)
    blk[:, :, 0] = torch.gather(tok, 1, anchors)
    h = m.backbone(Cc, blk, anchors)
    U = m.logits(h)
    pos = anchors[:, :, None] + kk  # row k: prev at p+k, target token at p+k+1
    prev = gather_rows(tok, pos)
    y = gather_rows(tok, pos + 1)
    z, e = m.markov(U, prev)
    logp = torch.log_softmax(z, -1)
    pt = torch.softmax(gather_rows(TL, pos), -1)
    ce = -logp.gather(-1, y[..., None]).squeeze(-1)
    tv = 0.5 * (logp.exp() - pt).abs().sum(-1)
    cl = m.confidence(h, e)
    bce = F.binary_cross_entropy_with_logits(cl, (1.0 - tv).detach().clamp(0, 1), reduction="none")
    w = torch.exp(-kk.float() / 4.0)
    w = w / w.sum()
    per = 0.1 * ce + 0.9 * tv + 1.0 * bce
    loss = (per * w).sum(-1).mean()
    with torch.no_grad():
        acc = (z.argmax(-1) == y).float().mean((0, 1))
        stats = {"ce": float((ce * w).sum(-1).mean()), "tv": float((tv * w).sum(-1).mean()),
                 "bce": float((bce * w).sum(-1).mean()), "acc": [round(float(x), 3) for x in acc]}
    return loss, stats


def dflash_loss(m, tok, TL, Cc, anchors):
    B = m.B
    Bs, A = anchors.shape
    dev = tok.device
    blk = torch.full((Bs, A, B), m.mask_id, dtype=torch.long, device=dev)
    blk[:, :, 0] = torch.gather(tok, 1, anchors)
    h = m.backbone(Cc, blk, anchors)[:, :, 1:]
    U = m.logits(h)
    jj = torch.arange(1, B, device=dev)
    pos = anchors[:, :, None] + jj  # row j drafts the token at p+j
    y = gather_rows(tok, pos)
    pt = torch.softmax(gather_rows(TL, pos - 1), -1)
    logp = torch.log_softmax(U, -1)
    ce = -logp.gather(-1, y[..., None]).squeeze(-1)
    soft = -(pt * logp).sum(-1)
    w = torch.exp(-(jj.float() - 1) / 7.0)
    w = w / w.sum()
    loss = ((0.5 * ce + 0.5 * soft) * w).sum(-1).mean()
    with torch.no_grad():
        acc = (U.argmax(-1) == y).float().mean((0, 1))
        stats = {"ce": float((ce * w).sum(-1).mean()), "acc": [round(float(x), 3) for x in acc]}
    return loss, stats


# ----------------------------------------------------------------------------
# Training

def train(kind, m, target, data, a, budget, dev, seed, steps=0):
    P, T = a.prompt_len, data.shape[1]
    hi = T - 1 - (m.B if kind == "dspark" else m.B - 1)
    A = a.anchors_dspark if kind == "dspark" else a.anchors_dflash
    params = [p for p in m.parameters() if p.requires_grad]
    decay = [p for n, p in m.named_parameters() if p.dim() == 2 and "markov_w1" not in n]
    other = [p for n, p in m.named_parameters() if not (p.dim() == 2 and "markov_w1" not in n)]
    kw = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), **kw)
    g = torch.Generator().manual_seed(seed)
    N = data.shape[0]
    perm, pi = torch.randperm(N, generator=g), 0
    t0 = time.time()
    deadline = t0 + budget
    total, warm, step, hist, tm = None, 100, 0, [], None
    if steps:
        total, warm = steps, min(100, max(1, steps // 20))
    lossf = dspark_loss if kind == "dspark" else dflash_loss
    m.train()
    while True:
        if (total is not None and step >= total) or time.time() > deadline:
            break
        if pi + a.batch > N:
            perm, pi = torch.randperm(N, generator=g), 0
        tok = data[perm[pi:pi + a.batch]].to(dev)
        pi += a.batch
        Tt = total or 10 ** 9
        lr = a.lr * (step + 1) / warm if step < warm else \
            a.lr * (0.05 + 0.475 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, Tt - warm)))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        Fe, TL = target_pass(target, tok, m.taps, chunk=tok.shape[0])
        anchors = sample_anchors(tok.shape[0], A, P, hi, g, dev)
        with autocast(dev):
            Cc = m.context(Fe)
            loss, st = lossf(m, tok, TL, Cc, anchors)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step == 5:
            sync(dev)
            tm = time.time()
        if not steps and total is None and step >= 25:
            sync(dev)
            dt = (time.time() - tm) / (step - 5)
            total = step + int(max(0.0, deadline - time.time()) / dt * 0.97)
            warm = min(warm, max(1, total // 20))
            log(f"{kind}: {dt * 1000:.1f} ms/step -> {total} steps")
        if step % 200 == 0 or step in (1, 25):
            st["step"], st["loss"], st["lr"] = step, round(float(loss), 4), lr
            hist.append(st)
            log(f"{kind} step {step} loss {float(loss):.4f} " + json.dumps({k: v for k, v in st.items()
                                                                            if k not in ('step', 'loss', 'lr')}))
    m.eval()
    log(f"{kind}: trained {step} steps in {time.time() - t0:.0f}s")
    return {"steps": step, "seconds": round(time.time() - t0, 1), "history": hist, "anchors": A,
            "batch": a.batch, "lr": a.lr}


# ----------------------------------------------------------------------------
# Data

def build_prompts(tok, docs, P, n, chat_frac, seed, workers):
    """n prompts of exactly P tokens: windows of the packed train stream, and
    chat prompts filled on the left with the stream before them."""
    rng = random.Random(seed)
    stream = []
    for ids in tok.encode_batch(docs):
        stream.extend(ids)
        stream.append(tok.eot)
    n_chat = int(n * chat_frac)
    fs = C.chat_samples(docs, 1e12, workers=workers)
    chats = [c for c in tok.encode_batch([C.chat_sample(h, f, with_answer=False) for h, f, _ in fs])
             if len(c) <= P - 1]
    rng.shuffle(chats)
    out = []
    for i in range(n):
        o = rng.randrange(0, len(stream) - P - 1)
        if i < n_chat and chats:
            c = chats[i % len(chats)]
            out.append(stream[o:o + P - 1 - len(c)] + [tok.eot] + c)
        else:
            out.append(stream[o:o + P])
    rng.shuffle(out)
    return torch.tensor(out, dtype=torch.long), len(stream), len(chats)


@torch.no_grad()
def generate_all(target, prompts, G, dev, bs):
    outs = []
    for i in range(0, prompts.shape[0], bs):
        outs.append(target.generate(prompts[i:i + bs].to(dev), G, dtype=torch.float32).cpu())
    return torch.cat(outs)


def heldout_sequences(tok, target, held, a, dev):
    """Greedy target continuations of held-out prompts: code (the first
    --eval-prompt tokens of held-out files) and chat (the function task's
    prompt alone), cut after the first end-of-text/turn token."""
    stops = {tok.eot, tok.im_end}
    enc = tok.encode_batch(held)
    code = [e[:a.eval_prompt] for e in enc if len(e) >= a.eval_prompt + 32][:a.eval_code]
    seqs = []
    if code:
        gen = generate_all(target, torch.tensor(code), a.eval_gen, dev, 64)
        seqs += [("code", a.eval_prompt, g.tolist()) for g in gen]
    fs = C.chat_samples(held, 1e12)
    chat = [c for c in tok.encode_batch([C.chat_sample(h, f, with_answer=False) for h, f, _ in fs])
            if len(c) <= 2 * a.eval_prompt][:a.eval_chat]
    for c in chat:
        gen = target.generate(torch.tensor([c], device=dev), a.eval_gen, dtype=torch.float32)[0].cpu()
        seqs.append(("chat", len(c), gen.tolist()))
    out = []
    for kind, P, s in seqs:
        n = len(s)
        for i in range(P, len(s)):
            if s[i] in stops:
                n = i + 1
                break
        if n - P >= 4:
            out.append((kind, P, s[:n]))
    return out


# ----------------------------------------------------------------------------
# Checks and acceptance

def load_drafter(d, target, dev):
    cfg = json.load(open(os.path.join(d, "config.json")))
    W = C.load_st(os.path.join(d, "model.safetensors"))
    kind = "dflash" if cfg["architectures"][0] == "DFlashDraftModel" else "dspark"
    dfc = cfg.get("dflash_config") or {}
    taps = dfc.get("target_layer_ids", cfg.get("target_layer_ids"))
    mask_id = dfc.get("mask_token_id", cfg.get("mask_token_id"))
    embed = W.get("embed_tokens.weight", target.model.embed_tokens.weight.detach().cpu()).float()
    m = Drafter(kind, target.c, cfg["num_hidden_layers"], taps, cfg["block_size"], mask_id,
                cfg.get("markov_rank", 0), embed)
    sd = {k: v.float() for k, v in W.items() if k not in ("embed_tokens.weight", "lm_head.weight")}
    m.load_state_dict(sd)
    return cfg, {k: v.float() for k, v in W.items()}, m.to(dev).eval()


@torch.no_grad()
def consistency_check(cfg, W, m, target, seq, P, dev):
    """reference.draft_round (spec inference) == the training path, fp32."""
    tok = torch.tensor([seq], device=dev)
    Fe, _ = target_pass(target, tok, m.taps)
    Cc = m.context(Fe)
    temb = target.model.embed_tokens.weight.detach().cpu().float()
    embed = W.get("embed_tokens.weight", temb).float()
    head = W.get("lm_head.weight", temb).float()
    worst = 0.0
    n = len(seq)
    hi = n - 1 - m.B
    for s in sorted({P, (P + hi) // 2, hi}):
        if s < P or s > hi:
            continue
        ref = R.draft_round(cfg, W, embed, head, Fe[0].cpu(), seq, s)
        anchors = torch.tensor([[s]], device=dev)
        blk = torch.full((1, 1, m.B), m.mask_id, dtype=torch.long, device=dev)
        blk[0, 0, 0] = seq[s]
        h = m.backbone(Cc, blk, anchors)[0, 0]
        if m.kind == "dflash":
            U = m.logits(h[1:])
            d = float((U.cpu() - ref["U"]).abs().max())
            assert torch.allclose(U.cpu(), ref["U"], rtol=1e-4, atol=1e-4), d
            assert U.argmax(-1).tolist() == ref["drafts"]
        else:
            U = m.logits(h)
            d = float((U.cpu() - ref["U"]).abs().max())
            assert torch.allclose(U.cpu(), ref["U"], rtol=1e-4, atol=1e-4), d
            prev = torch.tensor([seq[s]] + ref["drafts"][:-1], device=dev)
            z, e = m.markov(U, prev)
            c = torch.sigmoid(m.confidence(h, e))
            d = max(d, float((z.cpu() - ref["z"]).abs().max()))
            assert torch.allclose(z.cpu(), ref["z"], rtol=1e-4, atol=1e-4), d
            assert z.argmax(-1).tolist() == ref["drafts"]
            assert max(abs(float(x) - y) for x, y in zip(c, ref["conf"])) < 1e-4
        worst = max(worst, d)
    return worst


@torch.no_grad()
def accept_lengths(m, target, seq, P, dev, chunk=96):
    """For every anchor s of the generated part: m(s) = how many leading
    greedy drafts equal the target's greedy tokens; DSpark also returns the
    confidences. Context = target features of positions < s (fp32)."""
    n = len(seq)
    tok = torch.tensor([seq], device=dev)
    Fe, _ = target_pass(target, tok, m.taps)
    Cc = m.context(Fe)
    pad = torch.cat([tok[0], torch.full((m.B + 1,), -1, device=dev)])
    ms, confs = [], []
    for c0 in range(P, n - 1, chunk):
        S = torch.arange(c0, min(n - 1, c0 + chunk), device=dev)
        A = len(S)
        blk = torch.full((1, A, m.B), m.mask_id, dtype=torch.long, device=dev)
        blk[0, :, 0] = tok[0, S]
        h = m.backbone(Cc, blk, S[None])[0]
        if m.kind == "dflash":
            d = m.logits(h[:, 1:]).argmax(-1)  # [A, B-1], row j -> position s+j
            truth = pad[S[:, None] + torch.arange(1, m.B, device=dev)]
            cf = None
        else:
            U = m.logits(h)
            prev = tok[0, S]
            ds, cs = [], []
            for k in range(m.B):
                z, e = m.markov(U[:, k], prev)
                cs.append(torch.sigmoid(m.confidence(h[:, k], e)))
                prev = z.argmax(-1)
                ds.append(prev)
            d = torch.stack(ds, 1)
            cf = torch.stack(cs, 1)
            truth = pad[S[:, None] + torch.arange(1, m.B + 1, device=dev)]
        ok = (d == truth).long()
        ms.append(ok.cumprod(1).sum(1).cpu())
        if cf is not None:
            confs.append(cf.cpu())
    return torch.cat(ms), (torch.cat(confs) if confs else None)


def simulate(mlist, cap):
    """Greedy speculative decoding with a verify cap: rounds and tokens."""
    rounds = toks = 0
    for P, n, mm in mlist:
        s = P
        while s < n - 1:
            acc = min(int(mm[s - P]), cap)
            toks += min(acc + 1, n - 1 - s)
            s += acc + 1
            rounds += 1
    return toks / max(1, rounds)


def acceptance_report(m, target, seqs, dev):
    out = {}
    for kind in ("code", "chat", "all"):
        sel = [(P, s) for k, P, s in seqs if kind == "all" or k == kind]
        if not sel:
            continue
        mlist, conf_rows, m_rows = [], [], []
        for P, s in sel:
            mm, cf = accept_lengths(m, target, s, P, dev)
            mlist.append((P, len(s), mm))
            m_rows.append(mm)
            if cf is not None:
                conf_rows.append(cf)
        nd = m.B if m.kind == "dspark" else m.B - 1
        tpr = {cap: round(simulate(mlist, cap), 3) for cap in range(1, nd + 1)}
        allm = torch.cat(m_rows)
        # conditional acceptance per position: P(d_k ok | d_<k ok)
        cond = [round(float((allm > k).sum()) / max(1, float((allm >= k).sum())), 3) for k in range(nd)]
        r = {"sequences": len(sel), "generated_tokens": sum(len(s) - P for P, s in sel),
             "tokens_per_round_by_cap": tpr, "conditional_acceptance_by_position": cond}
        if conf_rows:
            cf = torch.cat(conf_rows)
            r["mean_confidence_by_position"] = [round(float(x), 3) for x in cf.mean(0)]
        out[kind] = r
    return out


# ----------------------------------------------------------------------------

def default_taps(n):
    if n <= 2:
        return [0]
    return sorted({round(i * (n - 2) / 2) for i in range(3)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("target")
    ap.add_argument("out_root")
    ap.add_argument("--train-dflash", type=float, required=True, help="seconds")
    ap.add_argument("--train-dspark", type=float, required=True, help="seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps-dflash", type=int, default=0, help="pin the step count (else from the time budget)")
    ap.add_argument("--steps-dspark", type=int, default=0, help="pin the step count (else from the time budget)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--taps", default=None, help="comma-separated target layer ids")
    ap.add_argument("--markov-rank", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=192)
    ap.add_argument("--gen-len", type=int, default=320)
    ap.add_argument("--n-seqs", type=int, default=24576)
    ap.add_argument("--chat-frac", type=float, default=0.3)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--train-docs", type=int, default=4000, help="train files used for prompts")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--anchors-dflash", type=int, default=64)
    ap.add_argument("--anchors-dspark", type=int, default=96)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-prompt", type=int, default=128)
    ap.add_argument("--eval-gen", type=int, default=256)
    ap.add_argument("--eval-code", type=int, default=24)
    ap.add_argument("--eval-chat", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--log", default=None)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False

    tok = C.Tok(a.target)
    tcfg = json.load(open(os.path.join(a.target, "config.json")))
    TW = C.load_st(os.path.join(a.target, "model.safetensors"))
    emb_bf16 = TW["model.embed_tokens.weight"]
    assert emb_bf16.dtype == torch.bfloat16
    docs = C.read_docs(os.path.join(a.corpus, "train.txt"))
    rng = random.Random(a.seed)
    docs = rng.sample(docs, min(len(docs), a.train_docs))
    prompts, n_stream, n_chat = build_prompts(tok, docs, a.prompt_len, a.n_seqs, a.chat_frac, a.seed, a.workers)
    log(f"prompts: {prompts.shape[0]} x {a.prompt_len} from {len(docs)} files ({n_stream:,} tokens, "
        f"{n_chat} chat prompts available)")
    target = C.Qwen3LM(tcfg)
    target.load_state_dict({k: v.float() for k, v in TW.items()})
    target.to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    NL = tcfg["num_hidden_layers"]
    taps = [int(x) for x in a.taps.split(",")] if a.taps else default_taps(NL)
    assert max(taps) < NL - 1, "tap layers must be below the target's last layer"
    name = os.path.basename(os.path.normpath(a.target))
    log(f"target {name}: {NL} layers, vocab {tcfg['vocab_size']}, taps {taps}, mask id {tok.mask}")

    data = generate_all(target, prompts, a.gen_len, dev, a.gen_batch)
    log(f"self-distilled data: {tuple(data.shape)}; sample: {tok.decode(data[0, a.prompt_len:a.prompt_len + 60].tolist())!r}")
    held = C.read_docs(os.path.join(a.corpus, "heldout.txt"))
    seqs = heldout_sequences(tok, target, held, a, dev)
    log(f"held-out sequences: {sum(k == 'code' for k, _, _ in seqs)} code, {sum(k == 'chat' for k, _, _ in seqs)} chat, "
        f"{sum(len(s) - P for _, P, s in seqs)} generated tokens")

    summary = {"taps": taps, "seed": a.seed, "layers": a.layers, "markov_rank": a.markov_rank,
               "self_distilled_sequences": int(data.shape[0]), "prompt_len": a.prompt_len, "gen_len": a.gen_len}
    embed = target.model.embed_tokens.weight.detach()
    for kind, B, budget in (("dflash", 16, a.train_dflash), ("dspark", 7, a.train_dspark)):
        if budget <= 0:
            continue
        torch.manual_seed(a.seed + (1 if kind == "dflash" else 2))
        m = Drafter(kind, tcfg, a.layers, taps, B, tok.mask, a.markov_rank, embed.clone())
        m.init_from(target, a.seed)
        m.to(dev)
        n_train = sum(p.numel() for p in m.parameters())
        info = train(kind, m, target, data, a, budget, dev, a.seed,
                     a.steps_dflash if kind == "dflash" else a.steps_dspark)
        d = os.path.join(a.out_root, f"{name}-{kind}")
        sd, cfg = m.save(d, tcfg, emb_bf16, {"num_anchors": info["anchors"]})
        assert "embed_tokens.weight" not in sd and "lm_head.weight" not in sd
        info["trainable_params"] = n_train
        info["checkpoint_params"] = C.n_params(sd)
        info["bytes"] = C.dir_bytes(d)
        # checks from the saved files
        cfg, W, ml = load_drafter(d, target, dev)
        worst, n_chk = 0.0, 0
        try:
            for _, P, s in seqs[:3] + seqs[-2:]:
                if len(s) - P > B + 2:
                    worst = max(worst, consistency_check(cfg, W, ml, target, s, P, dev))
                    n_chk += 1
            info["consistency"] = f"ok: {n_chk} sequences x 3 anchors, max|dlogit| {worst:.2e}"
        except AssertionError as e:
            import traceback
            traceback.print_exc()
            info["consistency"] = f"FAILED: {e!r}"
        log(f"{kind}: spec inference forward vs training path (fp32): {info['consistency']}")
        info["acceptance"] = acceptance_report(ml, target, seqs, dev)
        log(f"{kind}: acceptance " + json.dumps(info["acceptance"]))
        summary[kind] = info
    summary["total_seconds"] = round(time.time() - T0, 1)
    log("summary " + json.dumps({k: v for k, v in summary.items() if k not in ("dflash", "dspark")}))
    if a.log:
        json.dump(summary, open(a.log, "w"), indent=1)


if __name__ == "__main__":
    main()
