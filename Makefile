# dspark: plain Makefile. `make help` lists the targets.
#   make            build ./dspark (optimised, with runtime-dispatched AVX2 kernels)
#   make demo       deps + build + the bundled model in baseline and speculative modes
#   make test       build and run the unit + golden test suite
#   make test SAN=1 the same suite under AddressSanitizer + UBSan (build/san/)
#   make test SAN=thread  under ThreadSanitizer (build/tsan/; a race ends the
#                   process that found it, so its test fails)
#   make bench      CPU benchmark against llama.cpp (bench/cpu-bench.sh; docs/BENCHMARKS.md)
#   make fuzz       build the libFuzzer targets (clang) and run each briefly
#   make cuda       build build/cuda/dspark with the CUDA backend (nvcc, sm_90a)
#   make test-cuda  the CUDA op tests and the golden / lossless tests on the GPU
#                   (make test also compiles the CUDA build where nvcc exists)

CC      ?= cc
SAN     ?= 0
CUDA    ?= 0
FUZZ_SECONDS ?= 30
NVCC    ?= nvcc
CUDA_HOME ?= /usr/local/cuda
# The CUDA build targets the GPU nvidia-smi reports here (its compute
# capability, e.g. 8.9 builds sm_89), or Hopper where it reports none or a
# 9.0 one; CUDA_ARCH=... names another. sm_90a (Hopper's arch-specific
# instructions) builds the warpgroup-mma prefill attention; another
# CUDA_ARCH builds without it (k_attn_tc instead). Before 8.0 there is no
# build: the kernels need bf16 tensor cores (the backend says so at load).
ifeq ($(CUDA),1)
  GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
endif
ifneq ($(filter 8% 1%,$(filter-out 90,$(GPU_CC))),)
  CUDA_ARCH ?= -gencode=arch=compute_$(GPU_CC),code=sm_$(GPU_CC)
endif
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
CUDA_DEFS = $(if $(findstring 90a,$(CUDA_ARCH)),-DDSPARK_WGMMA)

WARN    = -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -g -pthread -MMD -MP $(WARN) -Isrc
LIBS    = -lcjson -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lcurl -lcrypto -lm -pthread

ifeq ($(CUDA),1)
  BUILD  = build/cuda
  OPT    = -O2
  LDSAN  =
  BIN    = build/cuda/dspark
else ifeq ($(SAN),1)
  BUILD  = build/san
  OPT    = -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDSAN  = -fsanitize=address,undefined
  BIN    = build/san/dspark
else ifeq ($(SAN),thread)
  BUILD  = build/tsan
  OPT    = -O1 -fno-omit-frame-pointer -fsanitize=thread
  LDSAN  = -fsanitize=thread
  BIN    = build/tsan/dspark
else
  BUILD  = build/rel
  OPT    = -O2
  LDSAN  =
  BIN    = dspark
endif

CFLAGS  = $(CFLAGS_BASE) $(OPT) $(EXTRA_CFLAGS)
SIMD_FLAGS = -mavx2 -mfma -mf16c

# src/ by layer: base (util, json, strbuf), engine (model description, backends,
# kernels; engine/cuda the GPU backend), text, spec, server, cli.
ALL_SRC  = $(wildcard src/*/*.c src/*/*/*.c)
HDRS     = $(wildcard src/*/*.h src/*/*/*.h src/*/*/*.cuh)
LIB_SRC  = $(filter-out src/cli/main.c src/engine/cuda/%,$(ALL_SRC))
# (the CUDA tuning's parser is plain C, built everywhere so that make test checks it)
LIB_SRC += src/engine/cuda/cuda_tuning.c
ifeq ($(CUDA),1)
  CU_OBJ   = $(patsubst src/%.cu,$(BUILD)/src/%.o,$(wildcard src/engine/cuda/*.cu))
  # the CUDA objects depend on a file holding the target, rewritten only
  # when it differs, so they are rebuilt when the target changes
  ARCH_STAMP = $(BUILD)/cuda-arch
  $(shell mkdir -p $(BUILD) && (echo '$(CUDA_ARCH)' | cmp -s - $(ARCH_STAMP) || echo '$(CUDA_ARCH)' > $(ARCH_STAMP)))
  LIBS    += -L$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++ -Wl,-rpath,$(CUDA_HOME)/lib64
  # the CUDA backend's table (backend.c registers it)
  LIB_SRC += src/engine/cuda/cuda_glue.c
  CFLAGS_BASE += -DDSPARK_CUDA
  TEST_CUDA_SRC = $(wildcard tests/cuda/*.c)
  TEST_CU_OBJ = $(BUILD)/tests/cuda/cuda_ops_test.o
else
  CU_OBJ   =
  TEST_CUDA_SRC =
  TEST_CU_OBJ =
endif
# the web interface (web/), embedded in the binary by scripts/embed-web
WEB_FILES = $(sort $(wildcard web/*.html web/*.js web/*.css))
WEB_C    = $(BUILD)/gen/web_assets.c
LIB_OBJ  = $(patsubst src/%.c,$(BUILD)/src/%.o,$(LIB_SRC)) $(CU_OBJ) $(BUILD)/gen/web_assets.o
MAIN_OBJ = $(BUILD)/src/cli/main.o
TEST_SRC = $(wildcard tests/*.c) $(TEST_CUDA_SRC)
TEST_OBJ = $(patsubst tests/%.c,$(BUILD)/tests/%.o,$(TEST_SRC)) $(TEST_CU_OBJ)
TEST_BIN = $(BUILD)/dspark-tests

.PHONY: all test bench fuzz help clean test-assets test-clients demo test-claude test-codex cuda test-cuda cuda-build-check cuemu

all: $(BIN)

$(BIN): $(LIB_OBJ) $(MAIN_OBJ)
	$(CC) $(OPT) $(LDSAN) -o $@ $^ $(LIBS)

$(TEST_BIN): $(LIB_OBJ) $(TEST_OBJ)
	$(CC) $(OPT) $(LDSAN) -o $@ $^ $(LIBS)

$(BUILD)/src/%_avx2.o: src/%_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SIMD_FLAGS) -c $< -o $@

$(BUILD)/src/%_avx512.o: src/%_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -c $< -o $@

$(BUILD)/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(WEB_C): $(WEB_FILES) scripts/embed-web
	@mkdir -p $(dir $@)
	scripts/embed-web $@ $(WEB_FILES)

$(BUILD)/gen/web_assets.o: $(WEB_C) src/server/web.h
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(HDRS) $(wildcard tests/cuda/*.h) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) $(CUDA_DEFS) -Isrc -Itests -lineinfo -Xfatbin -compress-all -Xcompiler -fPIC,-pthread -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

# the CPU runs of CUDA kernels (tests/cuemu, below)
CUEMU_DIR  = $(BUILD)/cuemu
CUEMU_BINS = $(CUEMU_DIR)/attn $(CUEMU_DIR)/mma $(CUEMU_DIR)/argmax $(CUEMU_DIR)/quant $(CUEMU_DIR)/kvbits $(CUEMU_DIR)/moe

# The suite needs the real Qwen3/Llama-3 tokenizers; they are fetched once
# into ~/.cache/dspark (outside the tree) unless already available.
test-assets:
	@scripts/fetch-test-assets

# The server tests drive dspark serve with the official OpenAI/Anthropic SDK
# clients (tests/server/package.json), installed once into ~/.cache/dspark/node.
test-clients:
	@scripts/fetch-test-clients

test: $(TEST_BIN) $(BIN) test-assets test-clients cuda-build-check $(CUEMU_BINS)
	DSPARK_BIN=$(abspath $(BIN)) ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS="halt_on_error=1 exitcode=66" $(TEST_BIN) $(T)
	@# (the emulator's fibers switch stacks, which ThreadSanitizer does not follow)
	@if [ -z "$(T)" ] && [ "$(SAN)" != thread ]; then $(MAKE) -s cuemu; fi
	@if [ -z "$(T)" ]; then scripts/check-layers; fi

# CUDA kernels whose logic the CPU checks too (tests/cuemu/emu.h: each
# CUDA thread a fiber, no GPU and no nvcc needed): built with the host C++
# compiler and run by `make test`, so CI without a GPU runs them.
$(CUEMU_DIR)/%: tests/cuemu/%.cc tests/cuemu/*.h tests/cuemu/fake/*.h src/engine/cuda/*.cu $(HDRS) $(BUILD)/src/base/util.o $(BUILD)/src/engine/tensor.o $(BUILD)/src/engine/cuda/cuda_tuning.o $(CUEMU_EXTRA)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -g $(OPT) -DDSPARK_CUEMU -fno-strict-aliasing -Wall -Wno-unused-function -Wno-unknown-pragmas -Wno-sign-compare -Itests/cuemu \
	  -Itests/cuemu/fake -Isrc $< $(BUILD)/src/base/util.o $(BUILD)/src/engine/tensor.o $(BUILD)/src/engine/cuda/cuda_tuning.o $(CUEMU_EXTRA) -o $@ $(LDSAN) -lm

# (the quantized kernels' run checks them against the CPU's dequantization)
$(CUEMU_DIR)/quant: CUEMU_EXTRA = $(BUILD)/src/engine/quant.o
# (the KV storage runs check the device's row rules against the CPU's)
$(CUEMU_DIR)/kvbits $(CUEMU_DIR)/mma: CUEMU_EXTRA = $(BUILD)/src/engine/kv.o

cuemu: $(CUEMU_BINS)
	@for b in $(CUEMU_BINS); do $$b || exit 1; done

# Where nvcc exists (no GPU needed), the CUDA build is compiled too, so a
# change that breaks it is caught; its tests need a GPU (make test-cuda).
cuda-build-check:
	@if [ "$(CUDA)$(SAN)" = "00" ] && command -v $(NVCC) >/dev/null 2>&1; then \
	  $(MAKE) -s CUDA=1 build/cuda/dspark build/cuda/dspark-tests && echo "CUDA build: compiles"; \
	elif [ "$(CUDA)$(SAN)" = "00" ]; then echo "CUDA build: not checked ($(NVCC) not found)"; fi

# End to end with the real Claude Code (npm, about 245 MB, installed once into
# ~/.cache/dspark/claude-code): dspark serve + dspark claude -- -p 'say hi'.
cuda:
	$(MAKE) CUDA=1 all

# On a machine with an NVIDIA GPU: every CUDA op against the CPU op, then the
# golden forward and lossless tests with the model on the GPU, then the
# golden forwards again with the cuBLAS prefill path taking groups of 4 rows
# (the test models' prompts are shorter than a real group).
test-cuda:
	$(MAKE) CUDA=1 build/cuda/dspark build/cuda/dspark-tests
	scripts/test-cuda build/cuda

# Not part of `make test`.
test-claude: $(BIN)
	DSPARK_BIN=$(abspath $(BIN)) scripts/test-claude

# End to end with OpenAI's Codex CLI over the Responses API (npm, about 424 MB,
# installed once into ~/.cache/dspark/codex): dspark serve + codex exec.
# Not part of `make test`.
test-codex: $(BIN)
	DSPARK_BIN=$(abspath $(BIN)) scripts/test-codex

bench: $(BIN)
	bench/cpu-bench.sh

# The README's first command: dependencies, build, the bundled model in
# baseline and speculative modes (identity check, tokens per round, speedup).
demo:
	scripts/install-deps
	$(MAKE) all
	scripts/demo

FUZZ_TARGETS = $(patsubst fuzz/%.c,build/fuzz/%,$(wildcard fuzz/fuzz_*.c))
FUZZ_LIB_SRC = $(filter-out src/cli/main.c src/%_avx2.c src/%_avx512.c,$(LIB_SRC))

build/fuzz/%: fuzz/%.c $(FUZZ_LIB_SRC) $(HDRS) $(WEB_C)
	@mkdir -p build/fuzz
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Isrc -fsanitize=fuzzer,address,undefined \
	  -DDS_NO_SIMD -o $@ $< $(FUZZ_LIB_SRC) $(WEB_C) $(LIBS)

fuzz: $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
	  n=$$(basename $$t); mkdir -p build/fuzz/corpus-$$n; \
	  echo "== $$n ($(FUZZ_SECONDS) s)"; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build/fuzz/corpus-$$n fuzz/seeds/$$n || exit 1; \
	done

help:
	@echo "make            build ./dspark"
	@echo "make demo       install deps, build, run the bundled model in every mode"
	@echo "make test       run the test suite (T=name filters tests)"
	@echo "make test SAN=1 run the suite under ASan+UBSan"
	@echo "make cuemu      CUDA kernels run on the CPU (part of make test)"
	@echo "make test-claude  Claude Code end to end against dspark serve (npm, 245 MB once)"
	@echo "make test-codex   Codex CLI end to end against dspark serve (npm, 424 MB once)"
	@echo "make bench      CPU benchmark vs llama.cpp (LLAMA_BENCH=..., LLAMA_CPP=...)"
	@echo "make fuzz       build and run libFuzzer targets (FUZZ_SECONDS=$(FUZZ_SECONDS))"
	@echo "make cuda       build build/cuda/dspark with the CUDA backend"
	@echo "make test-cuda  CUDA op tests + golden/lossless tests on the GPU (needs a GPU)"
	@echo "make clean      remove build outputs"

clean:
	rm -rf build dspark

-include $(patsubst %.o,%.d,$(filter-out $(CU_OBJ),$(LIB_OBJ))) $(MAIN_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
