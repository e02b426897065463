#!/bin/sh
# serve-conc: throughput and per-request latency of `dspark serve` under
# concurrent streams. For each server configuration and each concurrency C
# in CONC (default "1 2 4 8"), C client threads each send REQS (default 3)
# streamed greedy completions of N tokens (default 64; ignore_eos, so every
# answer is N tokens) one after another, each thread its own prompt;
# reported: aggregate tokens/s (all tokens / wall time), and per request the
# median time to the first token and end-to-end tokens/s. Configurations:
#   dspark MODE --max-batch 8   (continuous batching)
#   dspark MODE --max-batch 1   (one request at a time: the server before it)
# for MODE in MODES (default "dspark baseline"); the two are run alternately
# per concurrency (the machine is shared and noisy) and each cell is the
# median of TRIALS (default 3) runs.
# With LLAMA_SERVER (a llama.cpp llama-server binary), also llama-server
# -np C -cb on a Q8_0 GGUF of the same weights (`dspark quantize`; GGUF=FILE
# takes that GGUF instead), beside dspark serving that same GGUF.
# Other settings: MAXB (default "8 1": the --max-batch values compared),
# DSPARK (a dspark binary: no `make`), DSPARK_ARGS (more serve flags, e.g.
# "--device cuda"), LLAMA_ARGS (more llama-server flags, e.g. "-ngl 99 -fa on").
#   bench/serve-conc.sh [N] [REQS]
set -e
cd "$(dirname "$0")/.."
[ -n "${DSPARK:-}" ] || { make -s dspark; DSPARK=./dspark; }
N=${1:-64} REQS=${2:-3}
CONC=${CONC:-"1 2 4 8"} MODES=${MODES:-"dspark baseline"} TRIALS=${TRIALS:-3} THREADS=${THREADS:-2}
MODEL=${MODEL:-models/dspark-coder-6m} MAXB=${MAXB:-"8 1"}
TMP=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$TMP"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server LOGLINE CMD...: runs CMD in the background, waits for LOGLINE in its log
start_server() {
    line=$1; shift
    : >"$TMP/log"
    "$@" >>"$TMP/log" 2>&1 &
    PID=$!
    i=0
    until grep -q "$line" "$TMP/log"; do
        i=$((i + 1)); [ $i -gt 600 ] && { cat "$TMP/log"; exit 1; }; sleep 0.1
    done
}
stop_server() { kill $PID 2>/dev/null; wait $PID 2>/dev/null || true; PID=; }

# load PORT C LABEL: one cell, printed as a row
load() {
    python3 - "$1" "$2" "$3" "$N" "$REQS" "$TRIALS" <<'PY'
import json, statistics, sys, threading, time, urllib.request
port, c, label, n, reqs, trials = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
url = f"http://127.0.0.1:{port}/v1/completions"
prompts = ["def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n", "import os\n\ndef list_python_files(root):\n",
           "def parse_config(path):\n    \"\"\"Read a JSON config file.\"\"\"\n", "# a long list of numbers\nnums = [1, 2, 3, ",
           "def quicksort(xs):\n", "class LinkedList:\n", "def read_lines(path):\n"]
def one(p, out):
    body = {"prompt": p, "max_tokens": n, "temperature": 0, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.time(); first = None
    with urllib.request.urlopen(req) as r:
        for line in r:
            line = line.decode().strip()
            if first is None and line.startswith("data: {") and json.loads(line[6:])["choices"] and \
                    json.loads(line[6:])["choices"][0].get("text"):
                first = time.time() - t0
    t = time.time() - t0
    out.append((first if first is not None else t, n / t))
def cell():
    out = []
    def worker(i):
        for _ in range(reqs): one(prompts[i % len(prompts)], out)
    ths = [threading.Thread(target=worker, args=(i,)) for i in range(c)]
    t0 = time.time()
    for t in ths: t.start()
    for t in ths: t.join()
    wall = time.time() - t0
    return c * reqs * n / wall, statistics.median(o[0] for o in out) * 1e3, statistics.median(o[1] for o in out)
one(prompts[0], [])  # warm
rows = [cell() for _ in range(trials)]
agg = statistics.median(r[0] for r in rows); ttft = statistics.median(r[1] for r in rows); per = statistics.median(r[2] for r in rows)
print(f"{label:<34} {c:>4} {agg:14.0f} {per:16.0f} {ttft:12.1f}", flush=True)
PY
}

echo "model $MODEL, $N tokens a request, $REQS requests a stream, median of $TRIALS, -t $THREADS"
printf "%-34s %4s %14s %16s %12s\n" "server" "C" "aggregate t/s" "per-request t/s" "TTFT ms"
for mode in $MODES; do
    for c in $CONC; do
        for mb in $MAXB; do
            port=$(free_port)
            # shellcheck disable=SC2086
            start_server "listening on" "$DSPARK" serve --model "$MODEL" --mode "$mode" --max-batch $mb \
                --cache-slots $((mb > 16 ? mb : 16)) -t "$THREADS" --port "$port" ${DSPARK_ARGS:-}
            load "$port" "$c" "dspark $mode --max-batch $mb"
            stop_server
        done
    done
done

if [ -n "${LLAMA_SERVER:-}" ]; then
    if [ -z "${GGUF:-}" ]; then
        GGUF="$TMP/model-q8_0.gguf"
        "$DSPARK" quantize --model "$MODEL" --out "$GGUF" --type Q8_0 >"$TMP/quantize.log" 2>&1 || { cat "$TMP/quantize.log"; exit 1; }
    fi
    mb=$(echo $MAXB | cut -d' ' -f1)
    for c in $CONC; do
        port=$(free_port)
        # shellcheck disable=SC2086
        start_server "listening on" "$DSPARK" serve --model "$GGUF" --mode baseline --max-batch $mb --cache-slots $((mb > 16 ? mb : 16)) \
            -t "$THREADS" --port "$port" ${DSPARK_ARGS:-}
        load "$port" "$c" "dspark $(basename "$GGUF") baseline --max-batch $mb"
        stop_server
        port=$(free_port)
        # shellcheck disable=SC2086
        start_server "listening on" "$LLAMA_SERVER" -m "$GGUF" -np "$c" -cb -t "$THREADS" -c $((2048 * c)) \
            --port "$port" ${LLAMA_ARGS:-}
        load "$port" "$c" "llama-server $(basename "$GGUF") -np $c"
        stop_server
    done
else
    echo "(LLAMA_SERVER not set: no llama.cpp server beside it)"
fi
