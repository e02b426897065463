#!/bin/sh
# cuda-ab: builds or settings of the CUDA backend side by side in one run
# on the GPU machine, alternated round by round so that what drifts between
# runs (clocks, the machine) falls on every variant alike: verify-cost's
# t(1), t(8), t(9) and t(16) and the prefill of the context at 512 (and 8192), and `dspark run`'s
# decode rate and logits hash at 512 (the same hash: the same bits), then
# each variant's range over the rounds.
# Usage, on the GPU machine, each DIR an unpacked scripts/cuda-pack devpack
# (a baseline revision's: `scripts/cuda-pack REV`, build/devpack-base.tar.xz):
#   bench/cuda-ab.sh MODEL_DIR NAME=DIR[:VAR=VALUE...] NAME=DIR[:VAR=VALUE...] ...
# e.g.  bench/cuda-ab.sh /tmp/m8 main=/tmp/b new=/tmp/p off=/tmp/p:DSPARK_BENCH_TUNING=att_early=0
# (a CUDA tuning, src/engine/cuda/cuda_tuning.h, fields joined by '/': verify-cost
# takes it; `dspark run` reads none, so its rates are the defaults')
# Knobs: ROUNDS (2), REPS (10), LONG (1: also context 8192, once a round),
# REPS_LONG (5), RUN (1: also `dspark run`, -n 128), SPEC (MODE:DRAFTER_DIR:CAP,
# e.g. dspark:/tmp/ds8:7: also a speculative `dspark run` with that drafter,
# -n 64; with a random drafter nothing is accepted, so its tok/s is rounds
# per second).
set -e
cd "$(dirname "$0")/.."
M=${1:?usage: $0 MODEL_DIR NAME=DIR[:VAR=VALUE...] ...}
shift
[ -f "$M/config.json" ] || { echo "cuda-ab: no config.json in $M" >&2; exit 1; }
[ $# -ge 1 ] || { echo "cuda-ab: name at least one variant, NAME=DIR[:VAR=VALUE...]" >&2; exit 1; }
ROUNDS=${ROUNDS:-2} REPS=${REPS:-10} LONG=${LONG:-1} REPS_LONG=${REPS_LONG:-5} RUN=${RUN:-1} SPEC=${SPEC:-}
libs=$(sh bench/cuda-libs.sh 2>/dev/null || true)
log=$(mktemp)
err=$(mktemp)
trap 'rm -f "$log" "$err"' EXIT
ids=$(awk 'BEGIN { for (i = 0; i < 512; i++) printf "%s%d", (i ? "," : ""), (i * 7919) % 150000 + 10 }')

# run NAME=DIR[:VAR=VALUE...] PROGRAM ARGS...: PROGRAM from DIR under the
# variant's settings
run() {
    spec=$1 prog=$2
    shift 2
    dir=${spec#*=}
    vars=
    case $dir in *:*) vars=$(echo "${dir#*:}" | tr ':' ' ') dir=${dir%%:*} ;; esac
    [ -x "$dir/$prog" ] || { echo "cuda-ab: no $dir/$prog" >&2; exit 1; }
    # shellcheck disable=SC2086
    env LD_LIBRARY_PATH="$dir/libs:$libs" DSPARK_TOKENIZERS="$dir/tok" DSPARK_DEVICE=cuda $vars "$dir/$prog" "$@"
}

# stamp NAME=... KIND ARGS...: `dspark run ARGS` under the variant, its decode
# rate and logits hash as "NAME KIND RATE HASH"
stamp() {
    spec=$1 kind=$2
    shift 2
    # (the stamp is on stderr)
    out=$(run "$spec" dspark run --model "$M" --seed 1 --prompt-ids "$ids" --ignore-eos --temp 0 --device cuda "$@" \
        2>&1 > /dev/null) || { echo "$out" >&2; exit 1; }
    echo "$out" | grep '^stamp:' | tr ',' '\n' | awk -v n="${spec%%=*}" -v k="$kind" '
        / decode [0-9.]+ tok\/s/ { for (i = 1; i <= NF; i++) if ($i == "decode") r = $(i + 1) }
        /fnv1a/ { h = $NF }
        END { if (r == "") exit 1; print n, k, r, h }'
}

# verify NAME=... CONTEXT REPS: the name, the context, t(1) t(8) t(9) t(16) in ms
# and the prefill of the CONTEXT tokens in tok/s
verify() {
    out=$(run "$1" verify-cost "$M" "$2" 1 "$3" 2> "$err") || { cat "$err" >&2; exit 1; }
    echo "$out" | awk -v n="${1%%=*}" -v c="$2" '
        $2 == "prefill" { p = substr($7, 2) }
        $1 == 1 { a = $2 } $1 == 8 { b = $2 } $1 == 9 { d = $2 } $1 == 16 { e = $2 }
        END { if (e == "" || p == "") exit 1; print n, "t" c, a, b, d, e, p }'
}

for _ in $(seq "$ROUNDS"); do
    for v in "$@"; do
        verify "$v" 512 "$REPS" | tee -a "$log"
        if [ "$LONG" = 1 ]; then verify "$v" 8192 "$REPS_LONG" | tee -a "$log"; fi
        if [ "$RUN" = 1 ]; then stamp "$v" run --mode baseline -n 128 | tee -a "$log"; fi
        if [ -n "$SPEC" ]; then
            stamp "$v" spec --mode "${SPEC%%:*}" --drafter "$(echo "$SPEC" | cut -d: -f2)" \
                --max-draft "${SPEC##*:}" -n 64 | tee -a "$log"
        fi
    done
done

echo
echo "| variant | t(1) 512 | t(8) | t(9) | t(16) | t(16)/t(1) | t(1) 8192 | t(16) 8192 | prefill 512, tok/s | prefill 8192 | run 512, tok/s | logits hash |${SPEC:+ $SPEC, tok/s | its hash |}"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|${SPEC:+---:|---|}"
for v in "$@"; do
    awk -v n="${v%%=*}" '
        function put(k, x) { if (!(k in lo) || x < lo[k]) lo[k] = x; if (!(k in hi) || x > hi[k]) hi[k] = x }
        function rng(k) { if (!(k in lo)) return "-"; return lo[k] == hi[k] ? lo[k] : lo[k] "-" hi[k] }
        $1 != n { next }
        $2 == "t512" { put("a", $3); put("b", $4); put("c", $5); put("d", $6); put("q", 0 + sprintf("%.2f", $6 / $3)); put("p", $7) }
        $2 == "t8192" { put("e", $3); put("f", $6); put("P", $7) }
        $2 == "run" { put("g", $3); hs[$4] = 1 }
        $2 == "spec" { put("s", $3); ss[$4] = 1 }
        END {
            h = ""; for (k in hs) h = h (h == "" ? "" : ", ") k
            sh = ""; for (k in ss) sh = sh (sh == "" ? "" : ", ") k
            printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", n, rng("a"), rng("b"), rng("c"), rng("d"),
                   rng("q"), rng("e"), rng("f"), rng("p"), rng("P"), rng("g"), h == "" ? "-" : h
            if (spec != "") printf " %s | %s |", rng("s"), sh == "" ? "-" : sh
            printf "\n"
        }' spec="$SPEC" "$log"
done
