#!/bin/sh
# lookup-cost: the host's work per lookup round (bench/lookup-cost.c) on
# this repository's C sources and Python tools, with the bundled model's
# tokenizer and Qwen3's (fetched by scripts/fetch-test-assets), built from
# this tree's objects (runs `make` first).
#   bench/lookup-cost.sh [K=16]
set -e
cd "$(dirname "$0")/.."
sh bench/build-tool.sh lookup-cost
qwen="${DSPARK_TOKENIZERS:-$HOME/.cache/dspark/tokenizers}/qwen3"
for tk in models/dspark-coder-6m "$qwen"; do
    [ -f "$tk/tokenizer.json" ] || { echo "lookup-cost: no tokenizer in $tk (scripts/fetch-test-assets)"; continue; }
    echo "# tokenizer $tk, K ${1:-16}"
    for f in src/spec/spec.c src/server/serve.c src/text/jinja_eval.c tools/train/target.py; do
        [ -f "$f" ] && build/lookup-cost "$tk" "$f" "${1:-16}"
    done
done
