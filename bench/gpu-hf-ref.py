"""Second reference for the GPU benchmark: transformers' own greedy decode of
a checkpoint on the GPU (bf16 weights, its default cache), after a prompt
of CONTEXT random token ids. Prints one line: decode tok/s.
    python3 bench/gpu-hf-ref.py MODEL_DIR CONTEXT [NEW_TOKENS]"""
import sys
import time

import torch
from transformers import AutoModelForCausalLM

model_dir, ctx = sys.argv[1], int(sys.argv[2])
new = int(sys.argv[3]) if len(sys.argv) > 3 else 128
m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
g = torch.Generator().manual_seed(1)
ids = torch.randint(0, m.config.vocab_size, (1, ctx), generator=g).cuda()
kw = dict(do_sample=False, min_new_tokens=new, max_new_tokens=new, pad_token_id=0)
with torch.no_grad():
    m.generate(ids, **dict(kw, min_new_tokens=8, max_new_tokens=8))  # warm-up
    torch.cuda.synchronize()
    t0 = time.time()
    m.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    t_pre = time.time() - t0
    t0 = time.time()
    out = m.generate(ids, **kw)
    torch.cuda.synchronize()
    t = time.time() - t0
n = out.shape[1] - ctx
print(f"transformers {torch.__version__}: context {ctx}, {n} tokens, decode {(n - 1) / max(t - t_pre, 1e-9):.1f} tok/s")
