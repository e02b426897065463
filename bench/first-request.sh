#!/bin/sh
# first-request: what the server's warm-up saves the first request. Starts
# `dspark serve` (the bundled model unless MODEL is set; DEVICE, default
# cpu; MODE, default baseline; FLAGS, more serve options such as --mmap)
# with and without --no-warmup, alternated
# ROUNDS times (default 3), and each time it starts times three
# non-streamed completions of one token after prompts of about PROMPT
# tokens (default 512; no two share a prefix): the first pays whatever the
# server has not paid before listening, the others show the steady cost.
# Also prints the server's own warm-up line. BIN (default ./dspark) runs
# instead of the checkout's build, e.g. an unpacked CUDA build on the GPU
# machine. MODEL needs its tokenizer.json (for a `mkrandom` checkpoint, copy
# the Qwen3 tokenizer files into it).
#   bench/first-request.sh
set -e
cd "$(dirname "$0")/.."
BIN=${BIN:-./dspark}
[ "$BIN" != ./dspark ] || make -s dspark
ROUNDS=${ROUNDS:-3} PROMPT=${PROMPT:-512} MODE=${MODE:-baseline} DEVICE=${DEVICE:-cpu}
LOG=$(mktemp)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -f "$LOG"' EXIT
one() { # $1: extra serve flag (or empty)
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    # shellcheck disable=SC2086
    "$BIN" serve ${MODEL:+--model "$MODEL"} --device "$DEVICE" --mode "$MODE" --port "$PORT" $FLAGS $1 2>"$LOG" &
    PID=$!
    i=0
    until grep -q "listening on" "$LOG"; do
        i=$((i + 1))
        [ $i -gt 3000 ] && { cat "$LOG"; exit 1; }
        kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }
        sleep 0.1
    done
    python3 - "$PORT" "$PROMPT" "${1:-warm-up}" "$(grep -o 'warmed up.*' "$LOG" || echo 'no warm-up')" <<'PY'
import json, sys, time, urllib.request
port, n, label, line = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
# about n tokens of code-like text; request k's words start k words on, so
# no two requests share a cached prefix (the first one's is the same every
# time the server starts)
words = ("def value(self, key): return self.table.get(key, None) if key else default_value\n").split(" ")
def post(k):
    text = " ".join(words[(i + k) % len(words)] for i in range(n // 2))
    body = {"prompt": text, "max_tokens": 1, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req) as r:
        d = json.loads(r.read())
    return (time.time() - t0) * 1e3, d["usage"]["prompt_tokens"]
t = [post(k) for k in range(3)]
print(f"{label:>12}: first {t[0][0]:8.1f} ms, then {t[1][0]:8.1f} / {t[2][0]:8.1f} ms "
      f"({t[0][1]} prompt tokens; {line})")
PY
    kill $PID
    wait $PID 2>/dev/null || true
    PID=
}
r=0
while [ $r -lt "$ROUNDS" ]; do
    one ""
    one --no-warmup
    r=$((r + 1))
done
