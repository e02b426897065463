#!/bin/bash
# cuda-steps: one GPU-machine call's worth of CUDA work from a packed tree
# (scripts/cuda-pack's build/devpack.tar.xz), in order, within a deadline,
# each step's output in OUTDIR/STEP.txt and a line per step (exit status,
# seconds, or why it was skipped) in OUTDIR/steps.txt, so that a call cut
# short still returns what it finished. The random Qwen3-8B (/tmp/m8) and
# DSpark drafter of its shape (/tmp/ds8) are written in the background
# from the start (about 50 s), unless there already; steps that need them
# wait for them.
#   bench/cuda-steps.sh OUTDIR DEADLINE_S STEP...
# Steps:
#   bw                        cuda-stream-probe: the card's read bandwidth under the
#                             matmuls' load patterns, so that a decode figure can be set
#                             against this card's ceiling (an H100 streams about a third
#                             less than an H200: the targets' 230 tok/s is an H200 figure)
#   test                      scripts/test-cuda on the pack
#   ops                       gate+up alone at 16 rows, with and without the folded norm
#   norm                      the LM head, gate+up and q/k/v alone at 1, 9 and 16 rows,
#                             the folded norm against the norm run apart (DSPARK_BENCH_NORM=cut:
#                             the kernels the forward runs at gate/up and the LM head from 9 rows)
#   lmtiles                   the LM head alone at 1, 8 and 16 rows on 1, 2 and 4 weight
#                             tiles a warp (DSPARK_BENCH_TILES)
#   ab:NAME=VARS,NAME=VARS..  bench/cuda-ab.sh /tmp/m8 with a variant per NAME,
#                             VARS as VAR=VALUE joined by ':' (none: the defaults),
#                             led by @base for the baseline pack (build/devpack-base.tar.xz,
#                             from `scripts/cuda-pack REV`); ROUNDS, REPS, REPS_LONG,
#                             LONG, RUN and SPEC pass through
#   tl:CTX:ROWS:MODE[:VARS]   cuda-timeline /tmp/m8 CTX ROWS 8 MODE (chain or forward)
#   prof:MATRIX:ROWS[:VARS]   bench/cuda-mma-profile.sh (Nsight Compute) on MATRIX at
#                             ROWS (widths joined by '+'), e.g. prof:gate+up:1+16:DSPARK_BENCH_NORM=1
# e.g. bench/cuda-steps.sh /tmp/out 570 test ab:main=,wide=DSPARK_BENCH_TUNING=att_wide=0 tl:512:1:chain
# (DSPARK_BENCH_TUNING: a CUDA tuning for verify-cost and cuda-timeline, fields joined by '/')
set -u
cd "$(dirname "$0")/.." || exit 1
OUTD=${1:?usage: $0 OUTDIR DEADLINE_S STEP...}
DL=${2:?usage: $0 OUTDIR DEADLINE_S STEP...}
shift 2
T0=$(date +%s)
P=/tmp/p
mkdir -p "$OUTD" "$P"
python3 -c "import tarfile; tarfile.open('build/devpack.tar.xz').extractall('$P')" ||
    { echo "cuda-steps: cannot unpack build/devpack.tar.xz (run scripts/cuda-pack first)" >&2; exit 1; }
B=/tmp/b
if [ -f build/devpack-base.tar.xz ]; then
    mkdir -p "$B"
    python3 -c "import tarfile; tarfile.open('build/devpack-base.tar.xz').extractall('$B')" ||
        { echo "cuda-steps: cannot unpack build/devpack-base.tar.xz" >&2; exit 1; }
fi
LD_LIBRARY_PATH=$P/libs:$(sh bench/cuda-libs.sh)
export LD_LIBRARY_PATH DSPARK_TOKENIZERS=$P/tok
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUTD/gpu.txt" 2>&1
(
    t=$(date +%s)
    [ -f /tmp/m8/config.json ] || "$P/mkrandom" /tmp/m8 8b > /dev/null
    [ -f /tmp/ds8/config.json ] || "$P/mkrandom" /tmp/ds8 dspark-8b > /dev/null
    echo "models ready in $(($(date +%s) - t)) s"
) > "$OUTD/models.txt" 2>&1 &
MODELS=$!
# step NAME NEED_S CMD...: CMD under what is left of the deadline, skipped
# when less than NEED_S is left
step() {
    local name=$1 need=$2 left t rc
    shift 2
    left=$((DL - ($(date +%s) - T0)))
    if [ "$left" -lt "$need" ]; then
        echo "$name: skipped, $left s left" >> "$OUTD/steps.txt"
        return
    fi
    t=$(date +%s)
    timeout $((left - 5)) "$@" > "$OUTD/$name.txt" 2>&1
    rc=$?
    echo "$name: exit $rc, $(($(date +%s) - t)) s" >> "$OUTD/steps.txt"
}
n=0
for s in "$@"; do
    n=$((n + 1))
    case $s in
    bw) step "$n-bw" 30 "$P/cuda-stream-probe" 20 ;;
    test) step "$n-test" 200 scripts/test-cuda "$P" ;;
    ops)
        step "$n-ops" 20 sh -c "for b in 0 1; do DSPARK_BENCH_NORM=\$b $P/cuda-ops-bench 50 one gate+up 16; done"
        ;;
    norm)
        step "$n-norm" 90 sh -c "for mx in lm_head gate+up qkv; do for r in 1 9 16; do for b in 1 cut 1 cut; do echo \"\$mx, rows \$r, DSPARK_BENCH_NORM=\$b\"; DSPARK_BENCH_NORM=\$b $P/cuda-ops-bench 50 one \$mx \$r; done; done; done"
        ;;
    lmtiles)
        step "$n-lmtiles" 60 sh -c "for r in 1 8 16; do for t in 1 2 4 1 2 4; do echo \"rows \$r, \$t tiles\"; DSPARK_BENCH_TILES=\$t $P/cuda-ops-bench 50 one lm_head \$r; done; done"
        ;;
    ab:*)
        wait $MODELS
        vs=()
        IFS=, read -ra specs <<< "${s#ab:}"
        for v in "${specs[@]}"; do
            vars=${v#*=} dir=$P
            case $vars in @base*) dir=$B vars=${vars#@base} vars=${vars#:} ;; esac
            vs+=("${v%%=*}=$dir${vars:+:$vars}")
        done
        step "$n-ab" 100 bench/cuda-ab.sh /tmp/m8 "${vs[@]}"
        ;;
    tl:*)
        wait $MODELS
        IFS=: read -r _ ctx rows mode vars <<< "$s"
        # shellcheck disable=SC2086
        step "$n-timeline" 20 env DSPARK_DEVICE=cuda ${vars//:/ } "$P/cuda-timeline" /tmp/m8 "$ctx" "$rows" 8 "$mode"
        ;;
    prof:*)
        IFS=: read -r _ mat rows vars <<< "$s"
        # shellcheck disable=SC2086
        step "$n-profile" 60 env ${vars//:/ } bench/cuda-mma-profile.sh "$P" "$mat" "${rows//+/ }"
        ;;
    *) echo "$s: unknown step" >> "$OUTD/steps.txt" ;;
    esac
done
echo "total: $(($(date +%s) - T0)) s" >> "$OUTD/steps.txt"
