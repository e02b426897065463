#!/usr/bin/env bash
# Tokenizer speed: dspark's tok_encode vs the Hugging Face `tokenizers`
# library (Python) on the same ~1 MB text, each taken whole as one string
# (add_special_tokens off), best of REPS runs, one thread, for the real
# Qwen3, Llama-3, Gemma-3 and Llama-2 tokenizers.
#
#   bench/tok-bench.sh [TEXT_FILE]
#
# Without TEXT_FILE it writes .cache/tok/bench-1mb.txt: 1,000,000 bytes cut
# from the Debian fortune files (English, German, Russian, Chinese; package
# fortunes fortunes-de fortunes-ru fortunes-zh) and tests/data/tok/corpus.txt,
# interleaved in 50 KB slices; without the fortunes it repeats the corpus.
# The Python side runs when `import tokenizers` works (else it says so); the
# ids-fnv column (FNV-1a of the ids as int32) must match between the two.
# Options (environment): REPS=5, TOKDIR=~/.cache/dspark/tokenizers,
# NAMES="qwen3 llama3 gemma3 llama2", PYTHON=python3, TOKBENCH=prebuilt binary.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
TOKDIR=${TOKDIR:-${DSPARK_TOKENIZERS:-$HOME/.cache/dspark/tokenizers}}
NAMES=${NAMES:-qwen3 llama3 gemma3 llama2}
PY=${PYTHON:-python3}
TEXT=${1:-.cache/tok/bench-1mb.txt}

if [ ! -f "$TEXT" ]; then
  mkdir -p "$(dirname "$TEXT")"
  "$PY" - "$TEXT" <<'PYEOF'
import os, sys
F = "/usr/share/games/fortunes"
srcs = ["cookie", "computers", "de/zitate", "ru/2001.03", "chinese", "fortunes", "literature", "de/sprichworte"]
texts = []
for s in srcs:
    p = os.path.join(F, s)
    if os.path.exists(p):
        texts.append(open(p, "rb").read().decode("utf-8", "ignore"))
corpus = open("tests/data/tok/corpus.txt", encoding="utf-8", newline="").read()
texts.append(corpus)
out, pos, i = [], [0] * len(texts), 0
size = 0
while size < 1000000:
    k = i % len(texts)
    t = texts[k]
    piece = t[pos[k]:pos[k] + 50000] or t[:50000]
    pos[k] = (pos[k] + 50000) % max(len(t), 1)
    out.append(piece)
    size += len(piece.encode("utf-8"))
    i += 1
b = "".join(out).encode("utf-8")[:1000000].decode("utf-8", "ignore").encode("utf-8")
open(sys.argv[1], "wb").write(b)
print("tok-bench: wrote %s (%d bytes, %d sources)" % (sys.argv[1], len(b), len(texts)), file=sys.stderr)
PYEOF
fi

BIN=${TOKBENCH:-build/tok-bench} # TOKBENCH: a prebuilt tok-bench (skips the build)
if [ -z "${TOKBENCH:-}" ]; then
  mkdir -p build
  cc -std=c11 -D_GNU_SOURCE -O2 -Isrc -o build/tok-bench bench/tok-bench.c src/base/util.c src/base/json.c src/text/tokenizer.c \
    src/text/tok_*.c -lcjson -lpcre2-8 -lutf8proc -lm -pthread
fi

have_hf=1
"$PY" -c 'import tokenizers' 2>/dev/null || have_hf=0
[ $have_hf = 1 ] || echo "tok-bench: the Python tokenizers library is not installed here; dspark only"
for n in $NAMES; do
  d="$TOKDIR/$n"
  [ -f "$d/tokenizer.json" ] || { echo "tok-bench: $d/tokenizer.json missing (scripts/fetch-test-assets)"; exit 1; }
  "$BIN" "$d" "$TEXT" "$REPS"
  if [ $have_hf = 1 ]; then
    "$PY" - "$d" "$TEXT" "$REPS" "$n" <<'PYEOF'
import struct, sys, time
import tokenizers
from tokenizers import Tokenizer
d, path, reps, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
tok = Tokenizer.from_file(d + "/tokenizer.json")
load = time.perf_counter() - t0
data = open(path, "rb").read()
text = data.decode("utf-8")
best = 1e30
for _ in range(reps):
    t0 = time.perf_counter()
    ids = tok.encode(text, add_special_tokens=False).ids
    best = min(best, time.perf_counter() - t0)
h = 0xcbf29ce484222325
for b in struct.pack("<%di" % len(ids), *ids):
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
print("hf     %-8s bytes %d tokens %d best %.4f s  %.2f MB/s  %.0f tok/s  (load %.2f s) ids-fnv %016x  tokenizers %s"
      % (name, len(data), len(ids), best, len(data) / best / 1e6, len(ids) / best, load, h, tokenizers.__version__))
PYEOF
  fi
done
