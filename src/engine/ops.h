/* ops: the CPU backend. Coarse ops over fp32 activations; weights stay in
 * their file dtype (f32/f16/bf16) and are widened inside the kernels.
 * Every op has a portable scalar path and, where the CPU has AVX2+FMA+F16C,
 * a SIMD path (ops_avx2.c) tested against it. Threaded ops take a tpool
 * (NULL = run on the caller). */
#ifndef DS_OPS_H
#define DS_OPS_H

#include "engine/kv.h"
#include "engine/tensor.h"
#include "engine/threadpool.h"

/* Kernel selection: the SIMD path when the CPU supports it (the tests force
 * the scalar one through tests/hooks.h). */
int ops_simd_active(void);

/* y[M][N] = x[M][K] . W^T (+ bias[N]), W is [N][K] (a HF Linear weight)
 * in F32, F16 or BF16. bias may be NULL. x and y must not alias. */
void op_matmul(tpool *tp, float *y, const float *x, int M, const tensor *W, const float *bias);
/* op_matmul through the prefill family where W has one (quantized W on a
 * machine where quant_pre_fast(): quant.h's unit-per-lane kernel, each row
 * on its own); other W as op_matmul. Only for rows of a backend's prefill
 * groups (backend.h). */
void op_matmul_pre(tpool *tp, float *y, const float *x, int M, const tensor *W, const float *bias);

/* y[m][:] = x[m][:] / sqrt(mean(x[m]^2) + eps) * w[:], rows of width D.
 * y may equal x. */
void op_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps);

/* Rotary embedding, NeoX layout (element i pairs with i + head_dim/2), in
 * place on x[M][n_heads][head_dim]; row m uses position pos[m]; inv_freq
 * has head_dim/2 entries (scaling already applied). angle = (float)pos *
 * inv_freq[i], as transformers computes it in fp32. */
void op_rope(float *x, int M, int n_heads, int head_dim, const int *pos, const float *inv_freq);

/* Causal attention with GQA over a KV cache.
 *   q   [M][n_heads][head_dim]
 *   k,v [n_kv_heads][kv_stride][head_dim] for one layer; positions
 *       0 .. n_past+M-1 are filled (the M new rows already appended)
 *   out [M][n_heads][head_dim]
 * Row m attends to cache positions 0 .. n_past+m. Query head h uses KV
 * head h / (n_heads / n_kv_heads). scale is usually 1/sqrt(head_dim). */
void op_attention(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads,
                  int head_dim, const float *k, const float *v, int kv_stride, int n_past, float scale);

/* op_attention without the causal mask: every row attends to cache
 * positions 0 .. n_past+M-1 (a drafter block that sees itself
 * bidirectionally). Row m's result equals op_attention of that row alone
 * with n_past + M - 1 positions before it. */
void op_attention_block(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads, int head_dim,
                        const float *k, const float *v, int kv_stride, int n_past, float scale);

/* op_attention (full 0) or op_attention_block (full 1) over one layer of
 * a cache in any storage (kv.h): f16 and int8 rows are widened exactly to
 * f32 as they are read and the arithmetic is then op_attention's, so the
 * results are those of op_attention over the widened cache. window > 0
 * (full 0): a sliding window, row m (position n_past + m) sees only the
 * positions from n_past + m - window + 1 on; the positions before a row's
 * window add exact zeros, so its bits are those it has in any batch. */
void op_attention_kv(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads, int head_dim,
                     const kv_view *kv, int n_past, float scale, int full, int window);

/* y[i] = silu(gate[i]) * up[i]; y may alias gate. */
void op_swiglu(float *y, const float *gate, const float *up, int n);
/* y = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g +
 * 0.044715 g^3))) in f32 (torch's approximate="tanh"; scalar on every
 * path, so a row's bits never depend on the vector width) */
void op_geglu(float *y, const float *gate, const float *up, int n);
/* x *= s over n values */
void op_scale(float *x, float s, int n);
/* x = tanh(x / cap) * cap over n values (a logit soft-cap) */
void op_softcap(float *x, float cap, int n);

/* y[i] += x[i]. */
void op_add(float *y, const float *x, int n);

/* y[m][:] = emb[tokens[m]][:] widened to f32; emb is [vocab][D]. Caller
 * has checked the ids. */
void op_embed(float *y, const tensor *emb, const int *tokens, int M);

/* Widens n elements of a F32/F16/BF16 buffer to f32. */
void op_to_f32(float *y, const void *x, ds_dtype dt, int64_t n);

/* Index of the largest value (the first one on ties). */
int op_argmax(const float *x, int n);
/* e[i] = exp((x[i] - mx) * scale), exactly 0 where the argument is below
 * -104 (-inf included), and the sum of e in double: a softmax's numerators
 * and normaliser in one pass. The SIMD path's exp differs from expf in the
 * last bits (relative error about 1.5e-7). */
double op_exp_sum(float *e, const float *x, int n, float mx, float scale);

#endif
