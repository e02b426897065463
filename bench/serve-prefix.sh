#!/bin/sh
# serve-prefix: time to the first token of an agent-style request whose
# long system prompt (at least PREFIX tokens, default 1200) the server has
# seen before, against the cold prefill. Per trial (default 5) a fresh
# `dspark serve` gets, streamed with 8 answer tokens each:
#   cold   the system prompt + question 1 (nothing cached)
#   slot   the system prompt + question 2, after the first finished (its
#          slot holds the prefix: the free slot with the longest prefix)
#   copy   the system prompt + question 4, sent while a 400-token answer to
#          question 3 runs in the slot that holds the prefix: another slot
#          takes a copy of the prefix (share_prefix) and prefills only the
#          rest (the script checks that a copy was made)
#   block  the system prompt + question 5, after four unrelated
#          conversations have taken every slot: the prefix comes back from
#          the prefix block cache (--cache-ram; whole 128-token blocks)
# Reported: the median time to the first token of each, and the cached
# tokens the server reported (usage.prompt_tokens_details.cached_tokens).
# MODEL (default the bundled model), THREADS (2), DSPARK (a binary: no make),
# DSPARK_ARGS (more serve flags, e.g. "--device cuda").
#   bench/serve-prefix.sh [PREFIX] [TRIALS]
set -e
cd "$(dirname "$0")/.."
[ -n "${DSPARK:-}" ] || { make -s dspark; DSPARK=./dspark; }
PREFIX=${1:-1200} TRIALS=${2:-5} THREADS=${THREADS:-2}
MODEL=${MODEL:-models/dspark-coder-6m}
TMP=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$TMP"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

: >"$TMP/rows"
t=0
while [ $t -lt "$TRIALS" ]; do
    p=$(port)
    # shellcheck disable=SC2086
    "$DSPARK" serve --model "$MODEL" --max-batch 4 -t "$THREADS" --port "$p" ${DSPARK_ARGS:-} >"$TMP/log" 2>&1 &
    PID=$!
    i=0
    until grep -q "listening on" "$TMP/log"; do
        i=$((i + 1)); [ $i -gt 600 ] && { cat "$TMP/log"; exit 1; }; sleep 0.1
    done
    python3 - "$p" "$PREFIX" >>"$TMP/rows" <<'PY'
import json, sys, threading, time, urllib.request
port, want = int(sys.argv[1]), int(sys.argv[2])
url = f"http://127.0.0.1:{port}"
def post(path, body):
    r = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(r)
def health():
    return json.loads(urllib.request.urlopen(url + "/health").read())
system = "You are a coding agent. Tools: read_file(path), write_file(path, text), run(cmd), search(query).\n"
i = 0
while len(json.loads(post("/tokenize", {"content": system}).read())["tokens"]) < want:
    system += "".join(f"Rule {i + j}: keep each function short, name things plainly, test edge case {i + j}.\n"
                      for j in range(4))
    i += 4
n_sys = len(json.loads(post("/tokenize", {"content": system}).read())["tokens"])
def ask(q, n):
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}], "max_tokens": n,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
def ttft(q, n=8):
    t0 = time.time(); first = None; cached = None
    with post("/v1/chat/completions", ask(q, n)) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: {"): continue
            j = json.loads(line[6:])
            if first is None and j.get("choices") and j["choices"][0]["delta"].get("content"):
                first = time.time() - t0
            if j.get("usage"): cached = j["usage"]["prompt_tokens_details"]["cached_tokens"]
    return first * 1e3, cached
cold = ttft("Write a CSV parser.")
slot = ttft("Write a JSON printer.")
bg = threading.Thread(target=lambda: post("/v1/chat/completions",
                      {**ask("Write a long test suite.", 400), "stream": False, "ignore_eos": True}).read())
bg.start()
while health()["requests_running"] < 1: time.sleep(0.002)
time.sleep(0.05)
copy = ttft("Write a YAML reader.")
bg.join()
for k in range(4):
    post("/v1/chat/completions", {"messages": [{"role": "user", "content": f"Other chat {k}: list {k + 3} fruits."}],
                                  "max_tokens": 4, "temperature": 0}).read()
block = ttft("Write a TOML writer.")
m = urllib.request.urlopen(url + "/metrics").read().decode()
copies = [float(l.split()[-1]) for l in m.splitlines() if l.startswith("dspark_prefix_cache_copies_total")][0]
assert copies >= 1, "no prefix copy was made: the long answer ended before the copy request"
m = urllib.request.urlopen(url + "/metrics").read().decode()
hits = [float(l.split()[-1]) for l in m.splitlines() if l.startswith("dspark_prefix_blocks_hits_total")][0]
assert hits >= 1, "the block cache was not hit"
print(json.dumps({"cold": cold, "slot": slot, "copy": copy, "block": block, "n_sys": n_sys}))
PY
    kill $PID 2>/dev/null; wait $PID 2>/dev/null || true; PID=
    t=$((t + 1))
done
python3 - "$TMP/rows" "$MODEL" "$PREFIX" "$TRIALS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"model {sys.argv[2]}, system prompt of {rows[0]['n_sys']} tokens, median of {sys.argv[4]}")
print(f"{'request':<8} {'first token ms':>15} {'cached tokens':>14}")
for k in ("cold", "slot", "copy", "block"):
    print(f"{k:<8} {statistics.median(r[k][0] for r in rows):15.1f} {statistics.median(r[k][1] for r in rows):14.0f}")
PY
