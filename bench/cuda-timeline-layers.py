#!/usr/bin/env python3
"""cuda-timeline-layers: a decode step of `cuda-timeline` by role in the layer.

cuda-timeline (bench/cuda-timeline.c) lists the middle recorded step's
kernels in end order, but the o and down projections share one matmul
kernel, as do the q/k/v projection and the LM head. This script names each
kernel by where it falls in the layer (q/k/v, its tail when separate,
attention, combine, o, gate+up, down; the LM head once) and prints each
role's mean over the layers: duration, marginal cost (its end less the
previous end: what it adds to the step) and start (less the previous end;
negative where its blocks were resident early). Given a second output
(another width or build), it prints that one's means and the difference.

    bench/cuda-timeline-layers.py OUT_A [OUT_B]
"""
import re
import sys

ROW = re.compile(r"^\| (\d+) \| (.+?) \| (\d+) \| (\d+) \| ([-\d.]+) \| ([-\d.]+) \| ([-\d.]+) \|$")
ROLES = ["q/k/v", "q/k/v tail", "attention", "combine", "o", "gate+up", "down", "LM head"]
# kernels that have one role; the matmul's follows the role before it
KERNEL_ROLE = {"k_attn_rows": "attention", "k_attn_combine": "combine", "k_qkv_post": "q/k/v tail"}
MATMUL_AFTER = {"combine": "o", "o": "gate+up", "gate+up": "down"}


def kernels(path):
    """(name, grid, duration, marginal, start) of the middle step, in order"""
    out = []
    with open(path) as f:
        for line in f:
            m = ROW.match(line.strip())
            if m:
                out.append((m.group(2).split("#")[0], int(m.group(3)), float(m.group(5)), float(m.group(6)),
                            float(m.group(7))))
    if not out:
        sys.exit(f"cuda-timeline-layers: no kernel table in {path}")
    return out


def roles(ks):
    """each kernel's role, or its own name for those outside the pattern"""
    names = [k[0] for k in ks]
    out, prev = [], None
    for i, name in enumerate(names):
        role = KERNEL_ROLE.get(name, name)
        if name == "k_mma":
            role = MATMUL_AFTER.get(prev)
            if role is None:  # a projection before attention, or the head after the last down
                nxt = next((n for n in names[i + 1:] if n.startswith("k_")), "")
                role = "q/k/v" if nxt in ("k_attn_rows", "k_qkv_post") else "LM head"
        out.append(role)
        if role in ROLES:
            prev = role
    return out


def means(path):
    ks = kernels(path)
    acc = {}
    for k, r in zip(ks, roles(ks)):
        a = acc.setdefault(r, [0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1] += k[2]
        a[2] += k[3]
        a[3] += k[4]
    return {r: (a[0], a[1] / a[0], a[2] / a[0], a[3] / a[0]) for r, a in acc.items()}, sum(k[3] for k in ks)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    a, ta = means(sys.argv[1])
    b, tb = means(sys.argv[2]) if len(sys.argv) == 3 else (None, 0.0)
    head = "| role | count | duration, us | marginal, us | start, us |"
    if b:
        head += " B: marginal, us | B: start, us | B - A marginal |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    extra = sorted(set(a) - set(ROLES)) + sorted(set(b or {}) - set(a) - set(ROLES))
    for r in ROLES + extra:
        if r not in a and not (b and r in b):
            continue
        n, d, m, s = a.get(r, (0, 0.0, 0.0, 0.0))
        line = f"| {r} | {n} | {d:.2f} | {m:.2f} | {s:.2f} |"
        if b:
            _, _, mb, sb = b.get(r, (0, 0.0, 0.0, 0.0))
            line += f" {mb:.2f} | {sb:.2f} | {mb - m:+.2f} |"
        print(line)
    print(f"\nstep (sum of marginal costs): {ta:.1f} us" + (f"; B {tb:.1f} us" if b else ""))


if __name__ == "__main__":
    main()
