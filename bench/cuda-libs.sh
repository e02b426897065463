#!/bin/sh
# cuda-libs: prints the directory holding this machine's CUDA 13 cuBLAS
# (libcublas.so.13 / libcublasLt.so.13): the toolkit's, else a Python
# wheel's (nvidia-cublas, torch). The GPU benchmark scripts put it on
# LD_LIBRARY_PATH, since the packed binaries do not carry cuBLAS.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64; do
    [ -f "$d/libcublasLt.so.13" ] && { echo "$d"; exit 0; }
done
python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for pat in ("nvidia/**/libcublasLt.so.13*", "torch/lib/libcublasLt.so.13*"):
        hits = glob.glob(os.path.join(r, pat), recursive=True)
        if hits:
            print(os.path.dirname(hits[0]))
            raise SystemExit
PY
