#!/usr/bin/env python3
"""Trains the target: a Qwen3 causal LM (tied embedding, q/k norm, GQA) on the
code corpus mixed with a chat-formatted function-completion task.

    python3 tools/train/target.py CORPUS_DIR TOKENIZER_DIR OUT_DIR --budget SECONDS [--seed 0]

Data: the train.txt files plus chat samples (common.chat_samples: the user
gives a documented function's signature and docstring, the assistant writes
the function; about --chat-frac of the code bytes), each document followed by
<|endoftext|>, in a seeded shuffled order, packed into --seq token windows;
the loss is on every token. AdamW (betas 0.9/0.95, weight decay 0.1 on
matrices), linear warm-up then cosine decay to 10%, bf16 autocast. The
number of steps is set from the measured step time so that training ends
inside --budget (which also covers data preparation and saving; the run saves
whatever it has when the time is up).

Writes OUT_DIR: model.safetensors + config.json (transformers save_pretrained
in bf16 when transformers is installed; else the same layout written here),
generation_config.json, and the tokenizer files copied from TOKENIZER_DIR.
With transformers it reloads OUT_DIR through AutoModelForCausalLM and checks
that its float32 logits equal this script's Qwen3 forward. --log FILE gets a
JSON summary (losses, held-out loss, sizes)."""
import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


T0 = time.time()


def pack(tok, docs, seq):
    ids = tok.encode_batch(docs)
    stream = []
    for d in ids:
        stream.extend(d)
        stream.append(tok.eot)
    t = torch.tensor(stream, dtype=torch.int32)
    n = (len(t) - 1) // seq
    return t, n


def windows(stream, idx, seq):
    """rows stream[i*seq : i*seq + seq + 1] for i in idx -> [len(idx), seq+1]"""
    off = idx[:, None].long() * seq + torch.arange(seq + 1)[None]
    return stream[off].long()


@torch.no_grad()
def eval_loss(model, stream, n, seq, dev, bs=64, max_rows=2048):
    model.eval()
    tot, cnt = 0.0, 0
    idx = torch.arange(min(n, max_rows))
    for i in range(0, len(idx), bs):
        w = windows(stream, idx[i:i + bs], seq).to(dev)
        with autocast(dev):
            lg = model(w[:, :-1])
        tot += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), w[:, 1:].reshape(-1), reduction="sum"))
        cnt += w[:, 1:].numel()
    model.train()
    return tot / max(1, cnt), cnt


def autocast(dev):
    if dev.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return C._null()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("tokdir")
    ap.add_argument("out")
    ap.add_argument("--budget", type=float, required=True, help="seconds for the whole script")
    ap.add_argument("--reserve", type=float, default=45.0, help="seconds kept for eval and saving")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--inter", type=int, default=768)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--chat-frac", type=float, default=0.2)
    ap.add_argument("--max-pos", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=0,
                    help="pin the number of steps (else set from the measured step time)")
    ap.add_argument("--max-docs", type=int, default=0, help="smoke tests: use only this many files")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--log", default=None)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False

    tok = C.Tok(a.tokdir)
    V = (tok.n + 127) // 128 * 128
    train_docs = C.read_docs(os.path.join(a.corpus, "train.txt"))
    held_docs = C.read_docs(os.path.join(a.corpus, "heldout.txt"))
    if a.max_docs:
        train_docs, held_docs = train_docs[:a.max_docs], held_docs[:max(2, a.max_docs // 20)]
    code_bytes = sum(len(d) for d in train_docs)
    chat = C.chat_samples(train_docs, a.chat_frac * code_bytes, workers=a.workers)
    held_chat = C.chat_samples(held_docs, 1e9, workers=a.workers)
    log(f"{len(train_docs)} train files ({code_bytes / 1e6:.1f} M chars), {len(chat)} chat samples "
        f"({sum(len(c[2]) for c in chat) / 1e6:.1f} M chars); held out {len(held_docs)} files, "
        f"{len(held_chat)} chat samples")
    docs = train_docs + [c[2] for c in chat]
    random.Random(a.seed).shuffle(docs)
    stream, n_seq = pack(tok, docs, a.seq)
    hstream, hn = pack(tok, held_docs, a.seq)
    hcstream, hcn = pack(tok, [c[2] for c in held_chat], a.seq)
    log(f"train tokens {len(stream):,} ({n_seq} windows of {a.seq}); held-out tokens {len(hstream):,} "
        f"code, {len(hcstream):,} chat; bytes/token {code_bytes / max(1, len(stream)):.2f}")

    cfg = C.qwen3_config(V, a.hidden, a.inter, a.layers, a.heads, a.kv_heads, a.head_dim, a.max_pos,
                         tok.eot, tok.im_end)
    model = C.Qwen3LM(cfg)
    model.init_weights(a.seed)
    model.to(dev)
    n_par = sum(p.numel() for p in model.parameters())
    log(f"model: {n_par:,} parameters ({2 * n_par / 1e6:.2f} MB in bf16), vocab {V} (tokenizer {tok.n})")

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    kw = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **kw)
    g = torch.Generator().manual_seed(a.seed)
    perm, pi, epoch = torch.randperm(n_seq, generator=g), 0, 0
    deadline = T0 + a.budget - a.reserve
    total, warm, step, losses = None, 100, 0, []
    if a.steps:
        total, warm = a.steps, min(100, max(1, a.steps // 20))
    t_measure = None
    t_train0 = time.time()
    model.train()
    while True:
        if total is not None and step >= total:
            break
        if time.time() > deadline:
            log(f"time budget reached at step {step}")
            break
        if pi + a.batch > n_seq:
            perm, pi, epoch = torch.randperm(n_seq, generator=g), 0, epoch + 1
        w = windows(stream, perm[pi:pi + a.batch], a.seq).to(dev, non_blocking=True)
        pi += a.batch
        T = total or 10 ** 9
        if step < warm:
            lr = a.lr * (step + 1) / warm
        else:
            lr = a.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, T - warm)))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        with autocast(dev):
            lg = model(w[:, :-1])
        loss = F.cross_entropy(lg.reshape(-1, V), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 10:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_measure = time.time()
        if not a.steps and (step == 40 or (total is None and step > 10 and time.time() - t_train0 > 60)):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            dt = (time.time() - t_measure) / (step - 10)
            total = step + int(max(0.0, deadline - time.time()) / dt * 0.97)
            warm = min(warm, max(1, total // 20))
            log(f"{dt * 1000:.1f} ms/step, {a.batch * a.seq / dt / 1e6:.2f} M tok/s -> {total} steps "
                f"({total * a.batch * a.seq / 1e6:.0f} M tokens, {total * a.batch / n_seq:.1f} epochs)")
        if step % 100 == 0 or step in (1, 10, 40):
            lv = float(loss)
            losses.append((step, round(lv, 4)))
            log(f"step {step} loss {lv:.4f} lr {lr:.2e} epoch {epoch}")
    train_s = time.time() - t_train0
    final_train = float(loss)

    hl, hcnt = eval_loss(model, hstream, hn, a.seq, dev)
    hcl, hccnt = eval_loss(model, hcstream, hcn, a.seq, dev)
    held_bytes = sum(len(d.encode()) for d in held_docs)
    bpb = hl * len(hstream) / math.log(2) / max(1, held_bytes)  # approximate (eot tokens included)
    log(f"held-out loss: code {hl:.4f} nats/token ({hcnt} tokens, ~{bpb:.3f} bits/byte), "
        f"chat {hcl:.4f} ({hccnt} tokens); last train loss {final_train:.4f}")

    status = save(model, cfg, a, tok)
    summary = {**status, "params": n_par, "vocab_size": V, "tokenizer_size": tok.n, "steps": step,
               "tokens_seen": step * a.batch * a.seq, "train_tokens": len(stream), "train_seconds": round(train_s, 1),
               "losses": losses, "final_train_loss": round(final_train, 4), "heldout_code_loss": round(hl, 4),
               "heldout_code_tokens": hcnt, "heldout_code_bits_per_byte": round(bpb, 4),
               "heldout_chat_loss": round(hcl, 4), "heldout_chat_tokens": hccnt, "chat_samples": len(chat),
               "train_files": len(train_docs), "seed": a.seed, "batch": a.batch, "seq": a.seq, "lr": a.lr,
               "out_bytes": C.dir_bytes(a.out), "total_seconds": round(time.time() - T0, 1)}
    log("summary", json.dumps(summary))
    if a.log:
        json.dump(summary, open(a.log, "w"), indent=1)


def save(model, cfg, a, tok):
    os.makedirs(a.out, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).cpu() for k, v in model.state_dict().items()}
    eos = [tok.im_end, tok.eot]
    try:
        import transformers
        from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    except ImportError:
        transformers = None
    status = {"saved_with": "transformers save_pretrained", "hf_logit_check": "not run"}
    if transformers is not None:
        try:
            hc = Qwen3Config(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                             intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
                             num_attention_heads=cfg["num_attention_heads"],
                             num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
                             tie_word_embeddings=True, bos_token_id=tok.eot, eos_token_id=tok.im_end,
                             pad_token_id=tok.eot, max_position_embeddings=cfg["max_position_embeddings"],
                             rms_norm_eps=1e-6, max_window_layers=cfg["num_hidden_layers"],
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
            hm = Qwen3ForCausalLM(hc)
            missing, unexpected = hm.load_state_dict(sd, strict=False)
            assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
            hm.tie_weights()
            hm = hm.to(torch.bfloat16)
            hm.generation_config = GenerationConfig(bos_token_id=tok.eot, eos_token_id=eos, pad_token_id=tok.eot)
            hm.save_pretrained(a.out, safe_serialization=True)
            saved = json.load(open(os.path.join(a.out, "config.json")))
            diff = {k: (cfg.get(k), saved.get(k)) for k in set(cfg) | set(saved) if cfg.get(k) != saved.get(k)}
            log("config.json vs the reference key set (ref, saved):", diff)
        except Exception as e:  # keep the weights whatever happens
            import traceback
            traceback.print_exc()
            log(f"WARNING: save_pretrained failed ({e!r}); writing the layout directly")
            transformers = None
            status["saved_with"] = f"direct writer (save_pretrained failed: {e!r})"
    if transformers is None:
        if status["saved_with"].startswith("transformers"):
            status["saved_with"] = "direct writer (no transformers)"
        C.save_st(os.path.join(a.out, "model.safetensors"), sd)
        json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
        json.dump({"bos_token_id": tok.eot, "eos_token_id": eos, "pad_token_id": tok.eot,
                   "transformers_version": "5.17.0"},
                  open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(a.tokdir, f)):
            shutil.copy(os.path.join(a.tokdir, f), os.path.join(a.out, f))
    # Reload what was saved; check our forward against transformers (fp32).
    W = C.load_st(os.path.join(a.out, "model.safetensors"))
    if "lm_head.weight" in W:
        log("WARNING: the tied checkpoint stores lm_head.weight")
    for k, v in sd.items():
        assert torch.equal(W[k], v), k
    ref = C.Qwen3LM(json.load(open(os.path.join(a.out, "config.json"))))
    ref.load_state_dict({k: v.float() for k, v in W.items() if k != "lm_head.weight"})
    ref.eval()
    ids = torch.randint(0, tok.n, (2, 96), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, hs = ref(ids, hidden=True)
    try:
        from transformers import AutoModelForCausalLM
        hf = AutoModelForCausalLM.from_pretrained(a.out, dtype=torch.float32).eval()
        with torch.no_grad():
            o = hf(ids, output_hidden_states=True)
        dl = float((o.logits.float() - mine).abs().max())
        dh = max(float((o.hidden_states[i].float() - hs[i]).abs().max()) for i in range(len(hs) - 1))
        ok = dl < 2e-3 and dh < 2e-3
        status["hf_logit_check"] = f"{'ok' if ok else 'FAILED'}: max|dlogit| {dl:.2e}, max|dhidden| {dh:.2e}"
        log(f"transformers AutoModelForCausalLM vs our Qwen3 forward (fp32): {status['hf_logit_check']} "
            f"(logit scale {float(mine.abs().max()):.1f})")
    except ImportError:
        pass
    except Exception as e:
        import traceback
        traceback.print_exc()
        status["hf_logit_check"] = f"FAILED to run: {e!r}"
        log("WARNING: transformers check could not run:", repr(e))
    log(f"saved {a.out}: {C.dir_bytes(a.out) / 1e6:.2f} MB")
    return status


if __name__ == "__main__":
    main()
