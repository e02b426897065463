#!/bin/sh
# gpu-llama: stock llama.cpp (its CUDA build, all layers on the GPU, flash
# attention on) on the same bf16 checkpoint that bench/gpu-bench.sh runs, for
# a side-by-side on one GPU. It builds and fetches nothing: $L is a prebuilt
# llama-bench + converter + gguf-py (and, in tok/qwen3, the Qwen3 tokenizer)
# unpacked from an archive of such a build. That archive (about 21 MB as xz)
# and dspark's devpack do not fit one transfer to the GPU machine together
# with this tree: unpack it and convert the checkpoint in one call (this
# script with REPS=1 and small sizes does both), then, while the machine is
# still warm (its /tmp is kept), run bench/gpu-bench.sh with L=$L in the next
# call, so that both engines are measured in that one run.
#   - puts the real Qwen3 tokenizer next to the weights if they have none
#     (from TOK=DIR, $P/tok/qwen3 or $L/tok/qwen3: a first call that carries
#     the llama.cpp archive without the devpack needs TOK, e.g. the
#     tokenizer files unpacked from an archive carried with it);
#   - converts the checkpoint once to a bf16 GGUF (kept as DIR-bf16.gguf);
#   - prefill of 512, 4096 and 16384 tokens from an empty context, and decode
#     of 128 tokens at depth 0, 512 and 8192; markdown table to OUT/llama-bench.txt.
# Usage: L=/tmp/llama P=/tmp/p bench/gpu-llama.sh MODEL_DIR [OUT_DIR]
#   (REPS=3; PP, TG, DEPTHS override the sizes; EXTRA adds llama-bench flags)
set -e
L=${L:-/tmp/llama}
P=${P:-/tmp/p}
REPS=${REPS:-3}
PP=${PP:-512,4096,16384}
TG=${TG:-128}
DEPTHS=${DEPTHS:-0,512,8192}
[ -f "${1:-}/config.json" ] || { echo "usage: L=DIR P=DIR $0 MODEL_DIR [OUT_DIR]" >&2; exit 1; }
M=${1%/}
OUT=${2:-bench/out/gpu}
W=${WORK:-/tmp/gpu-llama}
mkdir -p "$OUT" "$W"
if [ ! -x "$L/llama-bench" ] || [ ! -f "$L/convert_hf_to_gguf.py" ]; then echo "no llama build in $L" >&2; exit 1; fi

# tokenizer: the converter builds the GGUF vocabulary from tokenizer.json +
# tokenizer_config.json (vocab padded to config.json's vocab_size as unused).
if [ ! -f "$M/tokenizer.json" ]; then
    for t in "${TOK:-}" "$P/tok/qwen3" "$P/tok" "$L/tok/qwen3"; do
        if [ -n "$t" ] && [ -f "$t/tokenizer.json" ] && [ -f "$t/tokenizer_config.json" ]; then
            cp "$t/tokenizer.json" "$t/tokenizer_config.json" "$M/"
            break
        fi
    done
    [ -f "$M/tokenizer.json" ] || { echo "no Qwen3 tokenizer found (set TOK=DIR)" >&2; exit 1; }
fi

# conversion, cached next to the checkpoint
G="$M-bf16.gguf"
if [ ! -s "$G" ] || [ -n "$(find "$M/model.safetensors" -newer "$G")" ]; then
    echo "converting $M to $G"
    # this project's converter (numpy + gguf-py, a straight copy of the bf16
    # tensors); llama.cpp's own converter (needs torch) if that fails
    if ! PYTHONPATH="$L/gguf-py${PYTHONPATH:+:$PYTHONPATH}" python3 "$(dirname "$0")/hf_to_gguf.py" "$M" "$M" "$G.tmp" \
        > "$OUT/llama-convert.log" 2>&1; then
        PYP="$L/gguf-py"
        # the converter tries a SentencePiece vocabulary first and only falls
        # back to tokenizer.json on a missing tokenizer.model; without the
        # package its import fails first, so a stand-in module lets it reach
        # that fallback
        if ! python3 -c 'import sentencepiece' 2>/dev/null; then
            mkdir -p "$W/stub/sentencepiece"
            echo 'class SentencePieceProcessor: pass' > "$W/stub/sentencepiece/__init__.py"
            PYP="$PYP:$W/stub"
        fi
        PYTHONPATH="$PYP${PYTHONPATH:+:$PYTHONPATH}" python3 "$L/convert_hf_to_gguf.py" --outtype bf16 \
            --outfile "$G.tmp" "$M" >> "$OUT/llama-convert.log" 2>&1 || { tail -20 "$OUT/llama-convert.log" >&2; exit 1; }
    fi
    mv "$G.tmp" "$G"
fi

# cuBLAS / cudart: the machine's own CUDA 13 (system or the Python wheels'),
# else the cudart shipped in $L/libs
LIBS="$L/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if LD_LIBRARY_PATH="$LIBS" ldd "$L/llama-bench" | grep -q 'libcublas.*not found'; then
    d=$(sh "$(dirname "$0")/cuda-libs.sh")
    [ -n "$d" ] && LIBS="$d:$LIBS"
fi
export LD_LIBRARY_PATH="$LIBS"
if ldd "$L/llama-bench" | grep 'not found' >&2; then echo "missing libraries (set LD_LIBRARY_PATH)" >&2; exit 1; fi

# shellcheck disable=SC2086 # EXTRA is split into flags on purpose
bench() { "$L/llama-bench" -m "$G" -ngl 99 -fa 1 -r "$REPS" -o md ${EXTRA:-} "$@" 2>> "$OUT/llama-bench.log"; }
: > "$OUT/llama-bench.log"
{
    echo "llama.cpp llama-bench, $(basename "$M") bf16 GGUF, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo
    bench -p "$PP" -n 0 && echo && bench -p 0 -n "$TG" -d "$DEPTHS"
} > "$OUT/llama-bench.txt" || { cat "$OUT/llama-bench.txt"; tail -20 "$OUT/llama-bench.log" >&2; exit 1; }
cat "$OUT/llama-bench.txt"
