"""Sums ncu's raw CSV page (gpu__time_duration per kernel) over the last
forward pass of a run (from its last embedding kernel on), by kernel and
grid. Used by bench/cuda-step-profile.sh."""
import collections
import csv
import re
import sys

lines = open(sys.argv[1], errors="replace").read().split("\n")
i0 = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
rows = list(csv.reader(lines[i0:]))
head = rows[0]
kn, dv, gs = head.index("Kernel Name"), head.index("gpu__time_duration.sum"), head.index("Grid Size")
ks = []
for r in rows[1:]:
    if len(r) > dv:
        try:
            ks.append((r[kn], float(r[dv].replace(",", "")), r[gs]))
        except ValueError:
            pass
starts = [i for i, k in enumerate(ks) if "k_embed" in k[0]]
if not starts:
    sys.exit("no forward pass found (no k_embed kernel)")
step = ks[starts[-1]:]
by = collections.defaultdict(lambda: [0.0, 0])
for name, ns, grid in step:
    name = re.sub(r"\(.*$", "", name).replace("__nv_bfloat16", "bf16").replace("void ", "")
    by[name + " " + grid][0] += ns
    by[name + " " + grid][1] += 1
print("| kernel, grid | launches | total us | us each |\n|---|---:|---:|---:|")
for name, (ns, n) in sorted(by.items(), key=lambda x: -x[1][0]):
    print("| %s | %d | %.1f | %.2f |" % (name, n, ns / 1e3, ns / 1e3 / n))
print("| all (%d kernels) | | %.1f | |" % (len(step), sum(k[1] for k in step) / 1e3))
