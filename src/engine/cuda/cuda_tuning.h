/* cuda_tuning: the CUDA backend's launch choices, one struct held by the
 * model (cuda_model.tune, copied when the model is created) and passed to
 * the launches that read it. The defaults (cu_tuning_defaults) are what
 * production runs; the other values exist for comparisons: every field
 * but omit gives the defaults' results (the same bits, or for gemm_rows
 * and prefill_rows the same within cuBLAS's tolerance), only the time
 * differs. Nothing in src reads a tuning from the environment: the test
 * binary and the bench tools parse one from theirs and set it through
 * tests/cuda/cuda_hooks.h before creating a model. Plain C, built in
 * every configuration so that the parser is tested without a GPU. */
#ifndef DS_CUDA_TUNING_H
#define DS_CUDA_TUNING_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the kernels cu_tuning.omit leaves out of every layer */
enum { CU_OMIT_QKV = 1, CU_OMIT_ATTN = 2, CU_OMIT_O = 4, CU_OMIT_GU = 8, CU_OMIT_DOWN = 16 };

typedef struct cu_tuning {
    int pdl;          /* programmatic dependent launch where the device takes it (1; 0 never) */
    int pdl_late;     /* the matmul's late trigger: -1 the chained decode steps only, 1 every launch, 0 none */
    int swiglu2;      /* two SwiGLU blocks an SM at 1-8 rows: -1 under the short-cache attention shape, 1, 0 */
    int fma;          /* every matmul on the FMA kernel (0) */
    int qkv_tail;     /* the q/k/v projection post-processes q, k and v itself (1; 0 the separate kernel) */
    int cut;          /* matmuls take pre-cut inputs where they can, the norm run apart included (1) */
    int gemm_rows;    /* rows a cuBLAS group (CUDA_GEMM_MIN_ROWS; 0 no cuBLAS; at or below a verify width: tests) */
    int argmax_split; /* the argmax split over slices of a row (1; 0 one block a row) */
    int graphs;       /* forwards replayed from captured CUDA graphs (1; never a model with experts: cuda_moe.cuh) */
    int att_wg;       /* the warpgroup-mma prefill attention where it can run (1) */
    int att_spread;   /* the decode attention's spread shape: -1 from ATT_SPREAD_FROM positions, 1 always, 0 never */
    int att_wide;     /* verify rows of the decode attention on twice the warps (1) */
    int att_early;    /* the decode attention's first chunk requested before its wait (1) */
    int sample;       /* sampled verifies on the device: -1 from CUDA_SAMPLE_MIN_VOCAB tokens, 1 always, 0 never */
    int prefill_rows; /* rows a prefill chunk where the context takes cuBLAS groups (CUDA_PREFILL_ROWS) */
    int chain;        /* chained greedy decoding (1; never a model with experts: cuda_moe.cuh) */
    int omit;         /* CU_OMIT_* kernels left out (0; for timing a kernel's share only: the results are wrong) */
} cu_tuning;

/* the production settings */
cu_tuning cu_tuning_defaults(void);

/* Applies spec to *t: fields "name=value" joined by ',' (or '/', for
 * scripts whose own lists take commas), e.g. "pdl=0,graphs=0,gemm_rows=4,
 * att_spread=1"; the names are cu_tuning's fields, the values integers in
 * each field's range, except fma's (0, 1 or "fma") and omit's (kernels
 * qkv, attn, o, gateup, down joined by '+', or 0). An empty or NULL spec
 * changes nothing. -1 with the reason in err on an unknown name or a bad
 * value (*t then unchanged). */
int cu_tuning_parse(const char *spec, cu_tuning *t, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
