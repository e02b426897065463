#!/bin/sh
# drafter-cost: runs dspark once on a target + drafter pair with an empty
# calibration cache, so it measures what it measures on a pair's first use,
# and prints it: the target's verify time per width w (w-1 drafts + the
# anchor) as t(w)/t(1), and the drafter's round cost (a fixed part plus a
# part per drafted token), also in units of t(1).
#   bench/drafter-cost.sh MODEL_DIR DRAFTER_DIR [THREADS (0 = all)]
# DSPARK_BIN names another dspark binary (e.g. a CUDA build, with
# DSPARK_DEVICE=cuda); otherwise ./dspark is built and used.
set -e
cd "$(dirname "$0")/.."
BIN=${DSPARK_BIN:-./dspark}
[ -n "$DSPARK_BIN" ] || make -s dspark
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
DSPARK_CACHE_DIR=$D "$BIN" run --model "$1" --drafter "$2" --mode auto --prompt-ids 1,2,3 -n 2 \
    ${3:+-t "$3"} >/dev/null 2>"$D/log" || { cat "$D/log" >&2; exit 1; }
python3 - "$D/calibration.json" "$1" "$2" <<'PY'
import json, sys
e = list(json.load(open(sys.argv[1]))["entries"].values())[0]
v = e["verify_s"]
t1 = v[0]
print(f"target {sys.argv[2]}, drafter {sys.argv[3]}")
print("| w | " + " | ".join(str(i + 1) for i in range(len(v))) + " |")
print("|---|" + "---|" * len(v))
print("| ms | " + " | ".join(f"{x * 1e3:.2f}" for x in v) + " |")
print("| t(w)/t(1) | " + " | ".join(f"{x / t1:.2f}" for x in v) + " |")
d, dt = e["draft_s"], e.get("draft_tok_s", 0.0)
print(f"drafter round: {d * 1e3:.2f} ms + {dt * 1e3:.3f} ms per drafted token "
      f"({d / t1:.2f} + {dt / t1:.3f} x t(1))")
PY
