#!/bin/sh
# serve-bench: what the HTTP path costs on top of the engine. Starts
# `dspark serve` (the bundled model unless MODEL is set; MODE, default
# baseline) on a free port and, for a few coding prompts, measures greedy
# completions of N tokens (default 128) through /v1/completions, streamed
# and not: the engine's own decode rate (x_dspark.tokens_per_sec), the
# client's end-to-end rate (tokens / wall time incl. HTTP, JSON, SSE) and the
# time to the first streamed byte. Then `dspark run` on the same prompts for
# the command-line decode rate. Medians of REPS (default 5).
#   bench/serve-bench.sh [N] [REPS]
set -e
cd "$(dirname "$0")/.."
make -s dspark
N=${1:-128} REPS=${2:-5} MODE=${MODE:-baseline}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
LOG=$(mktemp)
./dspark serve ${MODEL:+--model "$MODEL"} --mode "$MODE" --port "$PORT" 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null; rm -f "$LOG"' EXIT
i=0
until grep -q "listening on" "$LOG"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$LOG"; exit 1; }; sleep 0.1
done
python3 - "$PORT" "$N" "$REPS" <<'PY'
import json, statistics, sys, time, urllib.request
port, n, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
url = f"http://127.0.0.1:{port}/v1/completions"
prompts = ["def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n",
           "import os\n\ndef list_python_files(root):\n", "def parse_config(path):\n    \"\"\"Read a JSON config file.\"\"\"\n"]
def post(body, stream):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.time(); first = None; x = None; text = ""
    with urllib.request.urlopen(req) as r:
        if not stream:
            d = json.loads(r.read()); return time.time() - t0, None, d["x_dspark"], d["usage"]["completion_tokens"]
        for line in r:
            if first is None: first = time.time() - t0
            line = line.decode().strip()
            if line.startswith("data: {"):
                d = json.loads(line[6:])
                x = d.get("x_dspark", x)
    return time.time() - t0, first, x, x["completion_tokens"]
print(f"{'prompt':>6} {'mode':>10} {'engine tok/s':>13} {'end-to-end tok/s':>17} {'first byte ms':>14}")
for i, p in enumerate(prompts):
    body = {"prompt": p, "max_tokens": n, "temperature": 0}
    for stream in (False, True):
        post(dict(body, stream=stream), stream)  # warm
        eng, e2e, fb = [], [], []
        for _ in range(reps):
            t, first, x, k = post(dict(body, stream=stream), stream)
            eng.append(x["tokens_per_sec"]); e2e.append(k / t)
            if first is not None: fb.append(first * 1e3)
        print(f"{i:>6} {'stream' if stream else 'whole':>10} {statistics.median(eng):13.0f} {statistics.median(e2e):17.0f} "
              f"{(statistics.median(fb) if fb else float('nan')):14.1f}")
PY
kill $PID; wait $PID 2>/dev/null || true
echo "dspark run (same prompts, command line):"
for p in 'def fibonacci(n):\n' 'class Stack:\n    def __init__(self):\n'; do
    ./dspark run ${MODEL:+--model "$MODEL"} --mode "$MODE" -p "$(printf "$p")" -n "$N" --ignore-eos 2>&1 >/dev/null | grep stamp
done
