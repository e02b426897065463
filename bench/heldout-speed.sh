#!/bin/sh
# heldout-speed: decode speed of every mode of the bundled model on the
# corpus's held-out code prompts, on this machine.
#   bench/heldout-speed.sh [PROMPTS=bench/data/heldout-prompts.txt] [THREADS=2]
# PROMPTS: one prompt per line as comma-separated token ids (written by
# tools/train/heldout_acceptance.py --save-prompts: the first 128 tokens of
# each held-out file). Each prompt is continued greedily, up to 256 tokens,
# in each mode; per mode: generated tokens, tokens per round, the decode
# rate over all prompts (tokens / decode seconds) and its ratio to the
# baseline's, and the geometric mean of the per-prompt speedups.
# DSPARK (default ./dspark) is the binary; MODES the modes with their caps
# (default "baseline lookup-3 dspark-4 dspark-7 dflash-4 dflash-15"). Not
# run by tests.
set -e
P=${1:-bench/data/heldout-prompts.txt}
T=${2:-2}
D=${DSPARK:-./dspark}
[ -f "$P" ] || { echo "no prompts file $P" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
while IFS= read -r ids; do
  i=$((i + 1))
  for m in ${MODES:-baseline lookup-3 dspark-4 dspark-7 dflash-4 dflash-15}; do
    # shellcheck disable=SC2046
    set -- $(echo "$m" | tr '-' ' ')
    extra=""
    [ "$1" = dspark ] && extra="--drafter models/dspark-coder-6m-dspark"
    [ "$1" = dflash ] && extra="--drafter models/dspark-coder-6m-dflash"
    [ -n "$2" ] && extra="$extra --max-draft $2"
    # shellcheck disable=SC2086
    "$D" run --model models/dspark-coder-6m --prompt-ids "$ids" -n 256 --mode "$1" $extra -t "$T" --print-ids \
      2>"$tmp/err" >/dev/null || { cat "$tmp/err" >&2; exit 1; }
    grep '^stamp:' "$tmp/err" | sed "s/^/$i $1-${2:-0} /" >> "$tmp/stamps"
  done
done < "$P"
awk '
{
  key = $2; gen = 0; rate = 0; tpr = 1
  for (f = 3; f <= NF; f++) {
    if ($f == "generated") gen = $(f + 1)
    if ($f == "decode" && $(f + 2) == "tok/s,") rate = $(f + 1)
    if ($f == "tokens/round") { tpr = $(f + 1); sub(/,/, "", tpr) }
  }
  if (rate <= 0) next
  G[key] += gen; S[key] += gen / rate; R[key] += gen / tpr; T[$1, key] = gen / rate; N[$1] = 1
  if (!(key in seen)) { seen[key] = 1; order[++n] = key }
}
END {
  printf "%-12s %8s %8s %10s %8s %8s\n", "mode-cap", "tokens", "tok/rnd", "tok/s", "speedup", "geomean"
  for (k = 1; k <= n; k++) {
    key = order[k]; lg = 0; c = 0
    for (p in N) if (T[p, key] > 0 && T[p, "baseline-0"] > 0) { lg += log(T[p, "baseline-0"] / T[p, key]); c++ }
    printf "%-12s %8d %8.2f %10.0f %7.2fx %7.2fx\n", key, G[key], G[key] / R[key], G[key] / S[key],
      (G[key] / S[key]) / (G["baseline-0"] / S["baseline-0"]), exp(lg / c)
  }
}' "$tmp/stamps"
