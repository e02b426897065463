#!/bin/sh
# serve-store: what a finished request's prefix-block store costs the
# requests still running. A fresh `dspark serve` (--max-batch 2, a block
# cache of --cache-ram MiB) streams answer A (ANSWER tokens, EOS ignored);
# once A runs, request B sends a prompt of about PROMPT tokens for one
# token, and its end stores PROMPT/128 blocks. The server's /events stream
# gives each step's end time and length; the time between two steps that
# no step took (admission, the end of a job, and a store where it runs on
# the scheduler thread) is the gap. Reported per binary: the largest gap,
# the gap after B's last step, the blocks stored and the storer thread's
# time (once the stores are over), A's mean step time when it runs alone,
# and the time from the first step to the last.
# With BASE (a second dspark binary, e.g. built from the revision before a
# change) both binaries run in turns, TRIALS times each, on one machine.
# MODEL (default the bundled model), THREADS (2), DSPARK (default: make),
# DSPARK_ARGS (more serve flags).
#   bench/serve-store.sh [PROMPT] [ANSWER] [TRIALS]
set -e
cd "$(dirname "$0")/.."
[ -n "${DSPARK:-}" ] || { make -s dspark; DSPARK=./dspark; }
PROMPT=${1:-2048} ANSWER=${2:-120} TRIALS=${3:-3} THREADS=${THREADS:-2}
MODEL=${MODEL:-models/dspark-coder-6m}
TMP=$(mktemp -d)
PID= EPID=
trap 'kill $PID $EPID 2>/dev/null || true; rm -rf "$TMP"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# a prompt of about PROMPT tokens: numbered lines of plain words
python3 - "$PROMPT" > "$TMP/b.json" <<'PY'
import json, sys
n = int(sys.argv[1])
words = "the scheduler copies every whole block of the finished answer into host memory".split()
text = " ".join(f"{i}: " + " ".join(words[(i + k) % len(words)] for k in range(6)) for i in range(n // 9))
print(json.dumps({"prompt": text, "max_tokens": 1, "temperature": 0}))
PY
printf '{"prompt":"Write a long story.","max_tokens":%d,"temperature":0,"ignore_eos":true,"stream":true}' \
    "$ANSWER" > "$TMP/a.json"

one() { # BIN LABEL: one trial, one line to $TMP/rows
    p=$(port)
    # shellcheck disable=SC2086
    "$1" serve --model "$MODEL" --max-batch 2 -t "$THREADS" --port "$p" --cache-ram 8192 -c 8192 \
        ${DSPARK_ARGS:-} > "$TMP/log" 2>&1 &
    PID=$!
    i=0
    until grep -q "listening on" "$TMP/log"; do
        i=$((i + 1)); [ $i -gt 1200 ] && { cat "$TMP/log"; exit 1; }; sleep 0.1
    done
    curl -sN "http://127.0.0.1:$p/events" > "$TMP/ev" &
    EPID=$!
    curl -sN "http://127.0.0.1:$p/v1/completions" -H 'content-type: application/json' -d @"$TMP/a.json" \
        > "$TMP/a.out" &
    APID=$!
    until grep -q '"text"' "$TMP/a.out" 2> /dev/null; do sleep 0.05; done
    curl -s "http://127.0.0.1:$p/v1/completions" -H 'content-type: application/json' -d @"$TMP/b.json" \
        > "$TMP/b.out"
    wait $APID
    # the stores of B's and A's blocks over (a binary without the storer
    # thread has none left by now and reports no gauge)
    i=0
    while curl -s "http://127.0.0.1:$p/metrics" | grep -q '^dspark_prefix_blocks_storing [1-9]'; do
        i=$((i + 1)); [ $i -gt 600 ] && break; sleep 0.1
    done
    curl -s "http://127.0.0.1:$p/metrics" > "$TMP/metrics"
    blocks=$(awk '/^dspark_prefix_blocks_stored_total/ {print $2}' "$TMP/metrics")
    sts=$(awk '/^dspark_prefix_blocks_store_seconds_total/ {printf "%.2f", $2}' "$TMP/metrics")
    kill $EPID $PID 2> /dev/null || true
    wait $PID 2> /dev/null || true
    PID= EPID=
    python3 - "$TMP/ev" "$2" "${blocks:-?}" "$TMP/b.out" "${sts:--}" >> "$TMP/rows" <<'PY'
import json, sys
ev, label, blocks, bout, sts = sys.argv[1:6]
steps = []
for line in open(ev):
    if line.startswith("data:"):
        try:
            e = json.loads(line[5:])
        except ValueError:
            continue
        if e.get("type") == "step":
            steps.append((e["t"], e["ms"] / 1e3, e["jobs"]))
gaps = [(steps[i][0] - steps[i][1] - steps[i - 1][0], i) for i in range(1, len(steps))]
big = max(gaps) if gaps else (0, 0)
# B's last step: the last step with two jobs
last2 = max((i for i, s in enumerate(steps) if s[2] == 2), default=None)
after = gaps[last2][0] if last2 is not None and last2 < len(gaps) else float("nan")
one = [s[1] for s in steps if s[2] == 1]
ptok = json.load(open(bout)).get("usage", {}).get("prompt_tokens", "?")
a_end = max((s[0] for s in steps), default=0) - min((s[0] for s in steps), default=0)
print(f"| {label} | {ptok} | {blocks} | {sts} | {big[0]*1e3:.1f} | {after*1e3:.1f} | {sum(one)/max(len(one),1)*1e3:.1f} | {a_end:.1f} |")
PY
}

t=0
while [ $t -lt "$TRIALS" ]; do
    one "$DSPARK" "$(basename "$DSPARK")"
    [ -z "${BASE:-}" ] || one "$BASE" "base"
    t=$((t + 1))
done
echo "| binary | B's prompt tokens | blocks stored (A and B) | storer's time (s) | largest gap between steps (ms) | gap after B's last step (ms) | A's mean step alone (ms) | first to last step (s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
cat "$TMP/rows"
