#!/usr/bin/env bash
# CPU benchmark: dspark vs llama.cpp's llama-bench on the same random
# Qwen3-0.6B-shaped bf16 weights, prefill of 512 tokens (pp512) and decode
# of 128 tokens (tg128), batch 1, in one run.
#
#   LLAMA_BENCH=/path/to/llama-bench LLAMA_CPP=/path/to/llama.cpp bench/cpu-bench.sh
#
# LLAMA_CPP is a llama.cpp source tree (its gguf-py package converts the
# checkpoint to GGUF; needs Debian's python3-numpy). Without LLAMA_BENCH the
# script measures dspark alone and says so. Options (environment):
#   THREADS="2 1"   thread counts to measure      REPS=3   repetitions
#   SHAPE=0.6b|1.7b|30b-a3b-4l|gemma3-1b|mistral-7b-4l  checkpoint shape (mkrandom)
#                   OUT=bench/out  scratch dir
#                   gemma3-1b: its GGUFs (BF16, and Q8_0 as the one QUANTS
#                   it takes) come from bench/gemma3-gguf.c, without a
#                   vocabulary (llama-bench needs none; LLAMA_CPP unused);
#                   mistral-7b-4l: every GGUF, BF16 too, from `dspark
#                   quantize` with the Llama 2 tokenizer (TOKDIR; the
#                   SentencePiece kind of Mistral v0.1's, also 32,000
#                   tokens), LLAMA_CPP unused
#   LOADS="read mmap" weight loading: read into memory (dspark's default,
#                   llama-bench --load-mode none) and/or file mapping (dspark
#                   --mmap, llama-bench --load-mode mmap). On some VMs
#                   streaming from a file mapping is much slower and noisier.
#   BASE=BIN        another dspark binary (an earlier revision's build) run
#                   beside this tree's, rep by rep alternated, with the
#                   ratio of this tree's rates to its rates (bf16 and QUANTS).
#   LOADS=" "       (a blank) skips the bf16 rows: QUANTS alone.
#   QUANTS="Q8_0 Q4_0 Q4_K_M"  also quantized builds: `dspark quantize` writes
#                   each GGUF once (with the tokenizer, so llama.cpp loads it),
#                   and dspark and llama-bench run the same file (weights read
#                   into memory); empty (the default) skips them.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
LOADS=${LOADS:-read mmap}
REPS=${REPS:-3}
SHAPE=${SHAPE:-0.6b}
OUT=${OUT:-bench/out}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUT"
NAME=qwen3-$SHAPE
GEMMA=0 MISTRAL=0
case $SHAPE in gemma3*) NAME=$SHAPE; GEMMA=1 ;; mistral*) NAME=$SHAPE; MISTRAL=1 ;; esac
MODEL="$OUT/$NAME-random"
TOKDIR=${TOKDIR:-}

make -s dspark
cc -O2 -o "$OUT/mkrandom" bench/mkrandom.c -lm
[ -f "$MODEL/model.safetensors" ] || "$OUT/mkrandom" "$MODEL" "$SHAPE" 1234

if [ $GEMMA = 1 ]; then
  sh bench/build-tool.sh gemma3-gguf "$OUT/gemma3-gguf"
  TOKDIR=none
elif [ -z "$TOKDIR" ]; then
  scripts/fetch-test-assets >/dev/null
  TOKDIR="$HOME/.cache/dspark/tokenizers/$([ $MISTRAL = 1 ] && echo llama2 || echo qwen3)"
fi
# the tokenizer beside the weights, so that the GGUFs `dspark quantize`
# writes carry it
[ $GEMMA = 1 ] || cp "$TOKDIR/tokenizer.json" "$TOKDIR/tokenizer_config.json" "$MODEL/"

have_llama=0
if [ -n "${LLAMA_BENCH:-}" ] && [ -x "$LLAMA_BENCH" ]; then
  GGUF="$OUT/$NAME-random-bf16.gguf"
  if [ -z "${LOADS// /}" ]; then
    : # (no bf16 rows: their GGUF is not needed)
  elif [ $GEMMA = 1 ]; then
    [ -f "$GGUF" ] || "$OUT/gemma3-gguf" "$MODEL" "$GGUF" bf16
  elif [ $MISTRAL = 1 ]; then
    [ -f "$GGUF" ] || ./dspark quantize --model "$MODEL" --out "$GGUF" --type BF16 > "$OUT/quantize-BF16.log" 2>&1 ||
      { cat "$OUT/quantize-BF16.log" >&2; exit 1; }
  else
    if [ -z "${LLAMA_CPP:-}" ] || [ ! -d "$LLAMA_CPP/gguf-py" ]; then
      echo "cpu-bench: LLAMA_CPP must point at a llama.cpp source tree (for gguf-py) to convert the weights" >&2
      exit 1
    fi
    [ -f "$GGUF" ] || PYTHONPATH="$LLAMA_CPP/gguf-py" "$PY" bench/hf_to_gguf.py "$MODEL" "$TOKDIR" "$GGUF"
  fi
  have_llama=1
else
  echo "cpu-bench: LLAMA_BENCH not set or not executable: measuring dspark alone (no llama.cpp anchor)" >&2
fi

QUANTS=${QUANTS:-}
if [ -n "$QUANTS" ]; then
  for q in $QUANTS; do
    [ -f "$OUT/$NAME-$q.gguf" ] && continue
    if [ $GEMMA = 1 ]; then
      [ "$q" = Q8_0 ] || { echo "cpu-bench: gemma3's GGUFs here are BF16 and Q8_0 only" >&2; exit 1; }
      "$OUT/gemma3-gguf" "$MODEL" "$OUT/$NAME-$q.gguf" q8_0
    else
      ./dspark quantize --model "$MODEL" --out "$OUT/$NAME-$q.gguf" \
        --type "$q" > "$OUT/quantize-$q.log" 2>&1 || { cat "$OUT/quantize-$q.log" >&2; exit 1; }
    fi
  done
fi

# 512 prompt ids for pp512 (fixed pseudo-random, inside the vocabulary),
# and the id decode starts from (the checkpoint's BOS)
VOCAB=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$MODEL/config.json")
PP_IDS=$(awk -v V="$VOCAB" 'BEGIN{m=V-100<150000?V-100:150000; s=7; for(i=0;i<512;i++){s=(s*1103515245+12345)%2147483648; printf "%s%d", (i?",":""), 100+s%m}}')
BOS=$(sed -n 's/.*"bos_token_id": *\([0-9]*\).*/\1/p' "$MODEL/config.json")

stamp_field() { sed -n "s/.*$1 \([0-9.]*\) tok\/s.*/\1/p"; }
mean() { awk '{s+=$1; n++} END{printf "%.2f", s/n}'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
echo "model: $MODEL ($(du -h "$MODEL/model.safetensors" | cut -f1) bf16)"
echo
printf "| engine | weights | threads | pp512 tok/s | tg128 tok/s |\n|---|---|---:|---:|---:|\n"
for load in $LOADS; do
  case $load in
    read) dflag=""; lmode=none ;;
    mmap) dflag="--mmap"; lmode=mmap ;;
    *) echo "cpu-bench: unknown load mode $load (read or mmap)" >&2; exit 1 ;;
  esac
  for t in $THREADS; do
    pp=(); tg=(); bpp=(); btg=()
    for r in $(seq "$REPS"); do
      for bin in ./dspark ${BASE:-}; do
        p=$("$bin" run --model "$MODEL" --prompt-ids "$PP_IDS" -n 1 -t "$t" -c 1024 --print-ids $dflag 2>&1 >/dev/null | stamp_field prefill)
        g=$("$bin" run --model "$MODEL" --prompt-ids "$BOS" -n 129 --ignore-eos -t "$t" -c 1024 --print-ids $dflag 2>&1 >/dev/null | stamp_field decode)
        if [ "$bin" = ./dspark ]; then pp+=("$p"); tg+=("$g"); else bpp+=("$p"); btg+=("$g"); fi
      done
    done
    dpp=$(printf '%s\n' "${pp[@]}" | mean); dtg=$(printf '%s\n' "${tg[@]}" | mean)
    printf "| dspark | %s | %s | %s | %s |\n" "$load" "$t" "$dpp" "$dtg"
    if [ -n "${BASE:-}" ]; then
      bp=$(printf '%s\n' "${bpp[@]}" | mean); bt=$(printf '%s\n' "${btg[@]}" | mean)
      printf "| dspark BASE | %s | %s | %s | %s |\n" "$load" "$t" "$bp" "$bt"
      printf "| ratio to BASE | %s | %s | %s | %s |\n" "$load" "$t" \
        "$(awk -v a="$dpp" -v b="$bp" 'BEGIN{printf "%.3f", a/b}')" "$(awk -v a="$dtg" -v b="$bt" 'BEGIN{printf "%.3f", a/b}')"
    fi
    if [ $have_llama = 1 ]; then
      js=$("$LLAMA_BENCH" -m "$GGUF" -t "$t" -p 512 -n 128 -r "$REPS" --load-mode "$lmode" -o json 2>/dev/null)
      lpp=$(echo "$js" | "$PY" -c 'import json,sys; print("%.2f" % [r["avg_ts"] for r in json.load(sys.stdin) if r["n_prompt"]>0][0])')
      ltg=$(echo "$js" | "$PY" -c 'import json,sys; print("%.2f" % [r["avg_ts"] for r in json.load(sys.stdin) if r["n_gen"]>0][0])')
      printf "| llama.cpp BF16 | %s | %s | %s | %s |\n" "$load" "$t" "$lpp" "$ltg"
      printf "| **ratio** | %s | %s | **%s** | **%s** |\n" "$load" "$t" \
        "$(awk -v a="$dpp" -v b="$lpp" 'BEGIN{printf "%.2f", a/b}')" "$(awk -v a="$dtg" -v b="$ltg" 'BEGIN{printf "%.2f", a/b}')"
    fi
  done
done

# quantized builds: the same GGUF for both engines, read into memory
for q in $QUANTS; do
  QG="$OUT/$NAME-$q.gguf"
  for t in $THREADS; do
    pp=(); tg=(); bpp=(); btg=()
    for r in $(seq "$REPS"); do
      for bin in ./dspark ${BASE:-}; do
        p=$("$bin" run --model "$QG" --prompt-ids "$PP_IDS" -n 1 -t "$t" -c 1024 --print-ids 2>&1 >/dev/null | stamp_field prefill)
        g=$("$bin" run --model "$QG" --prompt-ids "$BOS" -n 129 --ignore-eos -t "$t" -c 1024 --print-ids 2>&1 >/dev/null | stamp_field decode)
        if [ "$bin" = ./dspark ]; then pp+=("$p"); tg+=("$g"); else bpp+=("$p"); btg+=("$g"); fi
      done
    done
    dpp=$(printf '%s\n' "${pp[@]}" | mean); dtg=$(printf '%s\n' "${tg[@]}" | mean)
    printf "| dspark | %s | %s | %s | %s |\n" "$q" "$t" "$dpp" "$dtg"
    if [ -n "${BASE:-}" ]; then
      bp=$(printf '%s\n' "${bpp[@]}" | mean); bt=$(printf '%s\n' "${btg[@]}" | mean)
      printf "| dspark BASE | %s | %s | %s | %s |\n" "$q" "$t" "$bp" "$bt"
      printf "| ratio to BASE | %s | %s | %s | %s |\n" "$q" "$t" \
        "$(awk -v a="$dpp" -v b="$bp" 'BEGIN{printf "%.3f", a/b}')" "$(awk -v a="$dtg" -v b="$bt" 'BEGIN{printf "%.3f", a/b}')"
    fi
    if [ $have_llama = 1 ]; then
      js=$("$LLAMA_BENCH" -m "$QG" -t "$t" -p 512 -n 128 -r "$REPS" --load-mode none -o json 2>/dev/null)
      lpp=$(echo "$js" | "$PY" -c 'import json,sys; print("%.2f" % [r["avg_ts"] for r in json.load(sys.stdin) if r["n_prompt"]>0][0])')
      ltg=$(echo "$js" | "$PY" -c 'import json,sys; print("%.2f" % [r["avg_ts"] for r in json.load(sys.stdin) if r["n_gen"]>0][0])')
      printf "| llama.cpp | %s | %s | %s | %s |\n" "$q" "$t" "$lpp" "$ltg"
      printf "| **ratio** | %s | %s | **%s** | **%s** |\n" "$q" "$t" \
        "$(awk -v a="$dpp" -v b="$lpp" 'BEGIN{printf "%.2f", a/b}')" "$(awk -v a="$dtg" -v b="$ltg" 'BEGIN{printf "%.2f", a/b}')"
    fi
  done
done
