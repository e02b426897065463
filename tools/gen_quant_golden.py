#!/usr/bin/env python3
"""Writes the quantized-block fixtures of tests/test_quant.c into
tests/data/quant_blocks/ (or the directory given with --out).

GGUF block types: a few rows of random block bytes whose f16 scale fields
are overwritten with sane values, and their dequantization by gguf-py's
NumPy reference (gguf.quants.dequantize). gguf-py is found through
--gguf-py DIR or the GGUF_PY environment variable (llama.cpp's gguf-py
directory), else on the ordinary import path.

MLX affine: random weights quantized per group by the rule in MLX's
documentation of mx.quantize (beta = min, alpha = max of the group,
scale = (alpha - beta) / (2^bits - 1), q = round((w - beta) / scale),
w' = scale * q + beta), packed as one little-endian bit stream per row
(element e at bits [e*bits, (e+1)*bits), low bits of each byte first),
scales and biases stored in F32, F16 or BF16, and the reference
dequantization scale * q + bias computed in f32 from the stored values.

Files per case NAME: NAME.bin (the data bytes), NAME.f32 (reference, f32
little endian, [N][K]), for MLX also NAME.scales and NAME.biases. The
manifest lists one case a line: NAME DTYPE N K BITS GROUP SDTYPE.

Run:  /usr/bin/python3 tools/gen_quant_golden.py --gguf-py /path/to/llama.cpp/gguf-py
"""
import argparse
import os
import sys

import numpy as np

GGUF_TYPES = {  # name: (block elements, block bytes, offsets of f16 fields)
    "Q8_0": (32, 34, [0]),
    "Q4_0": (32, 18, [0]),
    "Q4_1": (32, 20, [0, 2]),
    "Q5_0": (32, 22, [0]),
    "Q5_1": (32, 24, [0, 2]),
    "Q2_K": (256, 84, [80, 82]),
    "Q3_K": (256, 110, [108]),
    "Q4_K": (256, 144, [0, 2]),
    "Q5_K": (256, 176, [0, 2]),
    "Q6_K": (256, 210, [208]),
}


def f32_to_bf16_bits(a):
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def store_sb(a, sdtype):
    """(bytes, the f32 values actually stored)"""
    a = np.asarray(a, dtype=np.float32)
    if sdtype == "F32":
        return a.tobytes(), a
    if sdtype == "F16":
        h = a.astype(np.float16)
        return h.tobytes(), h.astype(np.float32)
    b = f32_to_bf16_bits(a)
    return b.tobytes(), (b.astype(np.uint32) << 16).view(np.float32)


def gguf_cases(rng, quants, gtype, out, man):
    for name, (qk, bb, f16s) in GGUF_TYPES.items():
        N, K = 3, 2 * 256
        nb = N * K // qk
        blocks = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
        for off in f16s:
            # sane scales: magnitudes 1e-4 .. 0.1, either sign for d
            v = (rng.uniform(1e-4, 0.1, size=nb) * rng.choice([-1.0, 1.0], size=nb)).astype(np.float16)
            blocks[:, off:off + 2] = v.view(np.uint8).reshape(nb, 2)
        data = blocks.reshape(N, K // qk * bb)
        ref = quants.dequantize(data, getattr(gtype, name)).astype(np.float32).reshape(N, K)
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(data.tobytes())
        with open(os.path.join(out, name + ".f32"), "wb") as f:
            f.write(ref.astype("<f4").tobytes())
        man.append(f"{name} {name} {N} {K} 0 0 -")


def mlx_quantize(w, bits, group):
    N, K = w.shape
    g = w.reshape(N, K // group, group)
    beta = g.min(axis=2)
    alpha = g.max(axis=2)
    scale = (alpha - beta) / np.float32((1 << bits) - 1)
    scale = np.where(scale == 0, np.float32(1e-8), scale).astype(np.float32)
    q = np.rint((g - beta[..., None]) / scale[..., None])
    q = np.clip(q, 0, (1 << bits) - 1).astype(np.uint32).reshape(N, K)
    return q, scale.astype(np.float32), beta.astype(np.float32)


def mlx_pack(q, bits):
    N, K = q.shape
    bitsarr = ((q[..., None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    stream = bitsarr.reshape(N, K * bits)
    return np.packbits(stream, axis=1, bitorder="little")  # [N][K*bits/8] bytes


def mlx_cases(rng, out, man):
    sdts = ["F16", "BF16", "F32"]
    i = 0
    for bits in (2, 3, 4, 5, 6, 8):
        for group in (32, 64, 128):
            N, K = 3, 256
            w = rng.normal(0, 0.05, size=(N, K)).astype(np.float32)
            q, scale, beta = mlx_quantize(w, bits, group)
            sdt = sdts[i % 3]
            i += 1
            sbytes, s32 = store_sb(scale, sdt)
            bbytes, b32 = store_sb(beta, sdt)
            # reference in f32: scale * q, rounded, plus bias, rounded
            s_full = np.repeat(s32, group, axis=1)
            b_full = np.repeat(b32, group, axis=1)
            ref = (s_full * q.astype(np.float32)).astype(np.float32) + b_full
            name = f"MLX{bits}_g{group}"
            for ext, payload in ((".bin", mlx_pack(q, bits).tobytes()), (".scales", sbytes), (".biases", bbytes),
                                 (".f32", ref.astype("<f4").tobytes())):
                with open(os.path.join(out, name + ext), "wb") as f:
                    f.write(payload)
            man.append(f"{name} MLX {N} {K} {bits} {group} {sdt}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf-py", default=os.environ.get("GGUF_PY"), help="llama.cpp's gguf-py directory")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "quant_blocks"))
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    from gguf import quants
    from gguf.constants import GGMLQuantizationType as gtype

    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    man = []
    gguf_cases(rng, quants, gtype, args.out, man)
    mlx_cases(rng, args.out, man)
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(man) + "\n")
    print(f"{len(man)} cases written to {args.out}")


if __name__ == "__main__":
    main()
