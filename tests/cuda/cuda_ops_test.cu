// cuda_ops_test: the CUDA ops one at a time on host arrays, for the tests
// against the CPU ops (cuda_hooks.h's cuda_test_* functions), launched
// under the hooks' tuning; the ops themselves are in cuda_mma.cu,
// cuda_ops.cu and cuda_attn*.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_layer.cuh"
#include "engine/cuda/cuda_ops.cuh"
#include "cuda/cuda_hooks.h"

/* the single ops' launches: the legacy stream, the hooks' tuning (a SwiGLU
   runs two blocks an SM where its swiglu2 is 1: cu_go's two) */
static cu_go go0(void) {
    cu_go g = cu_go_on(0, cu_tuning_hooked());
    g.two = g.t->swiglu2 == 1;
    return g;
}

/* sets the hooks' tuning field f to v; returns the value before */
static int set_field(int cu_tuning::*f, int v) {
    cu_tuning t;
    cuda_hook_tuning_get(&t);
    const int prev = t.*f;
    t.*f = v;
    cuda_hook_tuning_set(&t);
    return prev;
}
/* the same for the fields whose -1 means the default's 1 */
static int set_on(int cu_tuning::*f, int v) { return set_field(f, v < 0 ? 1 : v); }
extern "C" int cuda_test_prefill_rows(int rows) { return set_field(&cu_tuning::prefill_rows, rows); }
extern "C" int cuda_test_argmax_split(int on) { return set_on(&cu_tuning::argmax_split, on); }
extern "C" int cuda_test_attention_spread(int on) { return set_field(&cu_tuning::att_spread, on); }
extern "C" int cuda_test_attention_early(int on) { return set_on(&cu_tuning::att_early, on); }
extern "C" int cuda_test_attention_wide(int on) { return set_on(&cu_tuning::att_wide, on); }
extern "C" int cuda_test_attention_wg(int on) { return set_on(&cu_tuning::att_wg, on); }
extern "C" int cuda_test_swiglu_two(int on) { return set_field(&cu_tuning::swiglu2, on) == 1; }
/* ---- single ops for tests ------------------------------------------------ */

template <typename T> static int dup_to_dev(T **d, const T *h, size_t n, char *err, size_t errlen) {
    CK(cudaMalloc((void **)d, sizeof(T) * (n ? n : 1)));
    if (h && n) CK(cudaMemcpy(*d, h, sizeof(T) * n, cudaMemcpyHostToDevice));
    return 0;
}

static int test_matmul_dev(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt, int N, int K,
                           const float *bias, const float *gn, float eps, int mode, int gemm, char *err,
                           size_t errlen);

/* a matmul test's weights (and the second matrix, when w2) on the device, wb bytes each */
static int weights_to_dev(void **dw, void **dw2, const void *w, const void *w2, size_t wb, char *err, size_t errlen) {
    CK(cudaMalloc(dw, wb));
    CK(cudaMemcpy(*dw, w, wb, cudaMemcpyHostToDevice));
    if (w2) {
        CK(cudaMalloc(dw2, wb));
        CK(cudaMemcpy(*dw2, w2, wb, cudaMemcpyHostToDevice));
    }
    return 0;
}

extern "C" int cuda_test_matmul(float *y, const float *x, int M, const void *w, ds_dtype dt, int N, int K,
                                const float *bias, char *err, size_t errlen) {
    return test_matmul_dev(y, x, M, w, NULL, dt, N, K, bias, NULL, 0, 0, 0, err, errlen);
}

extern "C" int cuda_test_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps, char *err,
                                 size_t errlen) {
    float *dx, *dw;
    if (dup_to_dev(&dx, x, (size_t)M * D, err, errlen) || dup_to_dev(&dw, w, (size_t)D, err, errlen)) return -1;
    cu_rmsnorm(go0(), dx, dx, dw, M, D, eps);
    CK_LAUNCH();
    CK(cudaMemcpy(y, dx, sizeof(float) * (size_t)M * D, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dw);
    return 0;
}

extern "C" int cuda_test_elem(int op, float *x, const float *y, const float *w, int M, int D, float s, char *err,
                              size_t errlen) {
    const size_t n = (size_t)M * D;
    float *dx, *dy = NULL, *dw = NULL;
    if (op < 0 || op > 3) return ds_err(err, errlen, "no elementwise step %d", op);
    if (dup_to_dev(&dx, x, n, err, errlen) || (op >= 2 && dup_to_dev(&dy, y, n, err, errlen)) ||
        (op == 3 && dup_to_dev(&dw, w, (size_t)D, err, errlen)))
        return -1;
    if (op == 0) cu_scale(go0(), dx, s, n);
    else if (op == 1) cu_softcap(go0(), dx, s, n);
    else if (op == 2) cu_geglu_apart(go0(), dx, dy, n);
    else cu_rmsnorm_add(go0(), dx, dy, dw, M, D, s);
    CK_LAUNCH();
    CK(cudaMemcpy(x, dx, sizeof(float) * n, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    return 0;
}

extern "C" int cuda_test_read(void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return 0;
}

/* RoPE as the forward applies it: the q/k/v post-processing on query heads only, no norm */
extern "C" int cuda_test_rope(float *x, int M, int n_heads, int head_dim, const int *pos, const float *inv_freq,
                              char *err, size_t errlen) {
    float *dx, *df;
    int *dp;
    if (dup_to_dev(&dx, x, (size_t)M * n_heads * head_dim, err, errlen) ||
        dup_to_dev(&df, inv_freq, (size_t)head_dim / 2, err, errlen) || dup_to_dev(&dp, pos, (size_t)M, err, errlen))
        return -1;
    cu_qkv_args a = {dx, dx, NULL, NULL, n_heads * head_dim, 0, cu_kv{}, NULL, NULL, dp, df, n_heads, 0, head_dim, 0,
                     dp, 0.0f};
    cu_qkv_post_run(go0(), &a, M); /* (no kv heads: the query heads alone) */
    CK_LAUNCH();
    CK(cudaMemcpy(x, dx, sizeof(float) * (size_t)M * n_heads * head_dim, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(df);
    cudaFree(dp);
    return 0;
}

/* where cuda_test_attention's decode path also puts its pre-cut output (NULL: nowhere) */
static uint32_t *g_att_cut;
extern "C" void cuda_test_attention_cut(uint32_t *dst) { g_att_cut = dst; }
static int g_att_window;
extern "C" int cuda_test_attention_window(int window) {
    const int prev = g_att_window;
    g_att_window = window;
    return prev;
}
extern "C" int cuda_test_code_arch(char *err, size_t errlen) { return cu_code_arch(err, errlen); }
extern "C" int cuda_test_hopper_paths(void) { return cu_hopper_code() && pdl_enabled(go0()); }
extern "C" int cuda_test_attn_spread_for(int len) { return cu_attn_spread_for(cu_tuning_hooked(), len); }
extern "C" int cuda_test_attn_wg_ready(int hd) { return cu_attn_wg_ready(cu_tuning_hooked(), hd); }

extern "C" int cuda_test_attention(float *out, const float *q, int M, int nh, int nkv, int hd, const float *kc,
                                   const float *vc, int cap, int n_past, float scale, int tiled, char *err,
                                   size_t errlen) {
    return cuda_test_attention_kv(out, q, M, nh, nkv, hd, 32, kc, vc, NULL, NULL, cap, n_past, scale, tiled, err, errlen);
}

extern "C" int cuda_test_attention_kv(float *out, const float *q, int M, int nh, int nkv, int hd, int bits,
                                      const void *kc, const void *vc, const float *ks, const float *vs, int cap,
                                      int n_past, float scale, int tiled, char *err, size_t errlen) {
    if (tiled && !cu_attn_tiled_ok(nh, nkv, hd)) return ds_err(err, errlen, "no prefill attention kernel for these heads");
    float *dq, *dout, *dks = NULL, *dvs = NULL;
    unsigned char *dk, *dv;
    int *dlen;
    const size_t eb = (size_t)nkv * cap * hd * (size_t)(bits / 8);
    if (dup_to_dev(&dlen, &n_past, 1, err, errlen)) return -1;
    if (dup_to_dev(&dq, q, (size_t)M * nh * hd, err, errlen) ||
        dup_to_dev(&dk, (const unsigned char *)kc, eb, err, errlen) ||
        dup_to_dev(&dv, (const unsigned char *)vc, eb, err, errlen) ||
        (bits == 8 && (dup_to_dev(&dks, ks, (size_t)nkv * cap, err, errlen) ||
                       dup_to_dev(&dvs, vs, (size_t)nkv * cap, err, errlen))) ||
        dup_to_dev(&dout, (float *)NULL, (size_t)M * nh * hd, err, errlen))
        return -1;
    const cu_kv kv = {dk, dv, dks, dvs, bits};
    float *part;
    if (dup_to_dev(&part, (float *)NULL, cu_attn_part_floats(nh, hd, cap), err, errlen)) return -1;
    float *img = NULL;
    if (tiled && cu_attn_wg_ready(cu_tuning_hooked(), hd) && dup_to_dev(&img, (float *)NULL, cu_attn_wg_floats(nkv, hd, cap), err, errlen))
        return -1;
    uint32_t *dc = NULL;
    if (!tiled && g_att_cut && dup_to_dev(&dc, (uint32_t *)NULL, (size_t)M * nh * hd, err, errlen)) return -1;
    if (tiled) cu_attention_tiled(go0(), dout, dq, kv, part, img, M, nh, nkv, hd, cap, dlen, scale, g_att_window);
    else
        cu_attention(go0(), dout, dq, kv, part, M, nh, nkv, hd, cap, dlen, scale, 1, 0,
                     cu_attn_spread_for(cu_tuning_hooked(), n_past), g_att_window, dc);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(float) * (size_t)M * nh * hd, cudaMemcpyDeviceToHost));
    if (dc) {
        CK(cudaMemcpy(g_att_cut, dc, sizeof(uint32_t) * (size_t)M * nh * hd, cudaMemcpyDeviceToHost));
        cudaFree(dc);
    }
    cudaFree(part);
    cudaFree(img);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dks);
    cudaFree(dvs);
    cudaFree(dout);
    cudaFree(dlen);
    return 0;
}

extern "C" int cuda_test_embed(float *out, const void *e, ds_dtype dt, int V, int H, const int *tok, int M, char *err,
                               size_t errlen) {
    void *de;
    int *dt_;
    float *dout;
    size_t eb = (size_t)V * H * dtype_size(dt);
    CK(cudaMalloc(&de, eb));
    CK(cudaMemcpy(de, e, eb, cudaMemcpyHostToDevice));
    if (dup_to_dev(&dt_, tok, (size_t)M, err, errlen) || dup_to_dev(&dout, (float *)NULL, (size_t)M * H, err, errlen))
        return -1;
    dmat E = {de, dt, V, H};
    cu_embed(go0(), dout, &E, dt_, M);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(float) * (size_t)M * H, cudaMemcpyDeviceToHost));
    cudaFree(de);
    cudaFree(dt_);
    cudaFree(dout);
    return 0;
}

/* The fused matmuls on host arrays: mode 0 store, 1 residual add (y is
   read), 2 SwiGLU of W and W2; with gn the RMSNorm of x is folded in; gemm:
   the forward's choice, cuBLAS for the whole groups of the tuning's gemm_rows. */
static int test_matmul_dev(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt, int N, int K,
                           const float *bias, const float *gn, float eps, int mode, int gemm, char *err,
                           size_t errlen) {
    float *dx, *dy, *db = NULL, *dg = NULL;
    void *dw, *dw2 = NULL;
    size_t wb = (size_t)N * K * dtype_size(dt);
    dmat W = {NULL, dt, N, K};
    if (gn && !cu_fuses_norm(cu_tuning_hooked(), &W)) return ds_err(err, errlen, "no folded norm for this matrix (K %% 8 or dtype)");
    if (dup_to_dev(&dx, x, (size_t)M * K, err, errlen) ||
        dup_to_dev(&dy, mode == 1 ? y : (float *)NULL, (size_t)M * N, err, errlen) ||
        (gn && dup_to_dev(&dg, gn, (size_t)K, err, errlen)))
        return -1;
    if (weights_to_dev(&dw, &dw2, w, w2, wb, err, errlen)) return -1;
    if (bias && dup_to_dev(&db, bias, (size_t)N, err, errlen)) return -1;
    W.p = dw;
    dmat W2 = {dw2, dt, N, K};
    cu_gemm *g = NULL; /* gemm: cuBLAS for the whole groups, as in the forward */
    if (gemm && cu_gemm_create(&g, cu_tuning_hooked()->gemm_rows, M, K, N, 0, err, errlen) != 0) return -1;
    size_t yn = (size_t)M * N;
    float *y0 = mode == 1 ? (float *)xmalloc(sizeof(float) * yn) : NULL; /* the addend, for the second run */
    if (y0) memcpy(y0, y, sizeof(float) * yn);
    cu_layer_matmul(go0(), g, mode, dy, dx, M, &W, &W2, db, dg, eps, NULL, cu_cut{});
    CK_LAUNCH();
    CK(cudaMemcpy(y, dy, sizeof(float) * yn, cudaMemcpyDeviceToHost));
    int rc = cu_gemm_check(g, err, errlen);
    /* again from tile-major copies of the weights: the same bits */
    dev_pool pl = {};
    if (!rc && cu_tiles_ok(&W)) {
        float *yt = (float *)xmalloc(sizeof(float) * yn);
        rc = cu_tile_mat(&pl, &W, err, errlen) || (w2 && cu_tile_mat(&pl, &W2, err, errlen)) ? -1 : 0;
        if (!rc && cudaMemcpy(dy, y0, sizeof(float) * (y0 ? yn : 0), cudaMemcpyHostToDevice) != cudaSuccess)
            rc = ds_err(err, errlen, "CUDA: cannot reset the matmul output");
        if (!rc) {
            cu_layer_matmul(go0(), g, mode, dy, dx, M, &W, &W2, db, dg, eps, NULL, cu_cut{});
            if (cudaMemcpy(yt, dy, sizeof(float) * yn, cudaMemcpyDeviceToHost) != cudaSuccess)
                rc = ds_err(err, errlen, "CUDA: the tile-major matmul failed: %s", cudaGetErrorString(cudaGetLastError()));
        }
        for (size_t i = 0; !rc && i < yn; i++)
            if (memcmp(&y[i], &yt[i], sizeof(float)))
                rc = ds_err(err, errlen, "tile-major weights give %.9g at row %zu column %zu, row-major %.9g", yt[i],
                            i / (size_t)N, i % (size_t)N, y[i]);
        free(yt);
    }
    cu_pool_free(&pl);
    free(y0);
    cu_gemm_free(g);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dg);
    cudaFree(dw);
    cudaFree(dw2);
    cudaFree(db);
    return rc;
}

/* mode 1: y[M][N] += x . W^T (+ bias); mode 2: y = silu(x . W^T) * (x . W2^T); mode 3: gelu_tanh in place of
   silu (MM_GEGLU) */
extern "C" int cuda_test_matmul_fused(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt,
                                      int N, int K, const float *bias, int mode, char *err, size_t errlen) {
    return test_matmul_dev(y, x, M, w, mode >= 2 ? w2 : NULL, dt, N, K, bias, NULL, 0, mode, 0, err, errlen);
}

/* y = RMSNorm(x, gn).W^T (+ bias) (mode 0) or silu(RMSNorm(x).W^T) *
   (RMSNorm(x).W2^T) (mode 2), with the norm folded into the matmul */
extern "C" int cuda_test_matmul_norm(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt,
                                     int N, int K, const float *bias, const float *gn, float eps, int mode, char *err,
                                     size_t errlen) {
    return test_matmul_dev(y, x, M, w, w2, dt, N, K, bias, gn, eps, mode, 0, err, errlen);
}

__global__ void k_cut_rows(uint32_t *xc, const float *x, size_t n, int K) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) bf16_cut_put(xc + i / K * K, (int)(i % K), x[i]);
}

/* The pre-cut paths on host arrays, bf16 weights: mode 1 y += x . W^T (+
   bias) by cu_matmul_add_cut from x cut on the device (bf16_cut_put, one
   thread a value); mode 2 y = silu(RMSNorm(x, gn) . W^T) * (RMSNorm(x, gn)
   . W2^T) with its pre-cut copy into yc[M][N] */
extern "C" int cuda_test_matmul_cut(float *y, uint32_t *yc, const float *x, int M, const void *w, const void *w2,
                                    int N, int K, const float *bias, const float *gn, float eps, int mode, char *err,
                                    size_t errlen) {
    float *dx, *dy, *db = NULL, *dg = NULL;
    uint32_t *dc;
    void *dw, *dw2 = NULL;
    const size_t wb = (size_t)N * K * 2, xn = (size_t)M * K, yn = (size_t)M * N;
    dmat W = {NULL, DT_BF16, N, K};
    if (!cu_takes_cut(cu_tuning_hooked(), &W, M) || (mode >= 2 && (!gn || !w2 || N % 8)) || mode < 0 || mode > 3)
        return ds_err(err, errlen, "no pre-cut path for mode %d, %d rows of %d x %d", mode, M, N, K);
    if (dup_to_dev(&dx, x, xn, err, errlen) || dup_to_dev(&dy, mode == 1 ? y : (float *)NULL, yn, err, errlen) ||
        dup_to_dev(&dc, (uint32_t *)NULL, mode <= 1 ? xn : yn, err, errlen) ||
        (gn && dup_to_dev(&dg, gn, (size_t)K, err, errlen)) || (bias && dup_to_dev(&db, bias, (size_t)N, err, errlen)))
        return -1;
    if (weights_to_dev(&dw, &dw2, w, w2, wb, err, errlen)) return -1;
    W.p = dw;
    dmat W2 = {dw2, DT_BF16, N, K};
    int rc = 0;
    if (mode == 1) {
        k_cut_rows<<<(unsigned)((xn + 255) / 256), 256>>>(dc, dx, xn, K);
        rc = cu_matmul_add_cut(go0(), dy, dc, M, &W, db);
        if (rc) ds_err(err, errlen, "cu_matmul_add_cut refused %d rows of %d x %d", M, N, K);
    } else if (mode == 0) { /* the plain product from the pre-cut input (a post-normed sublayer's) */
        k_cut_rows<<<(unsigned)((xn + 255) / 256), 256>>>(dc, dx, xn, K);
        cu_layer_matmul(go0(), NULL, MM_STORE, dy, NULL, M, &W, NULL, db, NULL, 0.0f, NULL, cu_cut{dc, NULL, NULL});
    } else if (mode == 2) {
        cu_matmul_swiglu_norm(go0(), dy, dx, M, &W, &W2, dg, eps, dc);
    } else if (!cu_layer_matmul(go0(), NULL, MM_GEGLU, dy, dx, M, &W, &W2, NULL, dg, eps, NULL, cu_cut{NULL, dc, NULL})) {
        rc = ds_err(err, errlen, "the GELU's pre-cut copy was not written");
    }
    CK_LAUNCH();
    CK(cudaMemcpy(y, dy, sizeof(float) * yn, cudaMemcpyDeviceToHost));
    if (mode >= 2) CK(cudaMemcpy(yc, dc, sizeof(uint32_t) * yn, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dc);
    cudaFree(dg);
    cudaFree(db);
    cudaFree(dw);
    cudaFree(dw2);
    return rc;
}

/* The folded norm run apart (cu_norm_cut, then the matmul from its pre-cut
   rows and scales, as cu_norm_split has the forward run it), bf16
   weights: mode 0 y = RMSNorm(x, gn) . W^T (+ bias), mode 2 the SwiGLU
   with its pre-cut copy into yc[M][N] */
extern "C" int cuda_test_matmul_norm_apart(float *y, uint32_t *yc, const float *x, int M, const void *w,
                                           const void *w2, int N, int K, const float *bias, const float *gn, float eps,
                                           int mode, char *err, size_t errlen) {
    float *dx, *dy, *db = NULL, *dg, *dr;
    uint32_t *dxc, *dyc = NULL;
    void *dw, *dw2 = NULL;
    const size_t wb = (size_t)N * K * 2, yn = (size_t)M * N;
    dmat W = {NULL, DT_BF16, N, K};
    if (!cu_takes_cut(cu_tuning_hooked(), &W, M) || !cu_norm_cut_ok(K) || (mode >= 2 && (!w2 || N % 8)) ||
        (mode != 0 && mode != 2 && mode != 3))
        return ds_err(err, errlen, "no norm apart for mode %d, %d rows of %d x %d", mode, M, N, K);
    if (dup_to_dev(&dx, x, (size_t)M * K, err, errlen) || dup_to_dev(&dy, (float *)NULL, yn, err, errlen) ||
        dup_to_dev(&dg, gn, (size_t)K, err, errlen) || dup_to_dev(&dr, (float *)NULL, (size_t)M, err, errlen) ||
        dup_to_dev(&dxc, (uint32_t *)NULL, (size_t)M * K, err, errlen) ||
        (mode >= 2 && dup_to_dev(&dyc, (uint32_t *)NULL, yn, err, errlen)) ||
        (bias && dup_to_dev(&db, bias, (size_t)N, err, errlen)))
        return -1;
    if (weights_to_dev(&dw, &dw2, w, mode >= 2 ? w2 : NULL, wb, err, errlen)) return -1;
    W.p = dw;
    dmat W2 = {dw2, DT_BF16, N, K};
    cu_norm_cut(go0(), dxc, dr, dx, dg, M, K, eps);
    const int wrote = cu_layer_matmul(go0(), NULL, mode == 3 ? MM_GEGLU : mode == 2 ? MM_SWIGLU : MM_STORE, dy, NULL, M,
                                      &W, &W2, db, dg, eps, NULL, cu_cut{dxc, dyc, dr});
    int rc = mode >= 2 && !wrote ? ds_err(err, errlen, "the gated output's pre-cut copy was not written") : 0;
    CK_LAUNCH();
    CK(cudaMemcpy(y, dy, sizeof(float) * yn, cudaMemcpyDeviceToHost));
    if (mode >= 2) CK(cudaMemcpy(yc, dyc, sizeof(uint32_t) * yn, cudaMemcpyDeviceToHost));
    void *bufs[] = {dx, dy, db, dg, dr, dxc, dyc, dw, dw2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    return rc;
}

/* the prefill path: cuBLAS for whole groups of the tuning's gemm_rows rows, the
   kernels for the rest; mode and gn as above (gn NULL: no norm) */
extern "C" int cuda_test_matmul_prefill(float *y, const float *x, int M, const void *w, const void *w2, int N, int K,
                                        const float *bias, const float *gn, float eps, int mode, char *err,
                                        size_t errlen) {
    return test_matmul_dev(y, x, M, w, mode >= 2 ? w2 : NULL, DT_BF16, N, K, bias, gn, eps, mode, 1, err, errlen);
}

/* the fused projection's q/k/v post-processing (cu_matmul_norm_qkv, run
   twice on the same counters, so the second run shows they were reset) or
   the matmul and the separate kernel: q[M][nh*hd], kc/vc[nkv][cap][hd]
   (positions len .. len + M - 1 written, the rest zero) */
extern "C" int cuda_test_qkv(float *q, float *kc, float *vc, const float *x, int M, const void *w, int K,
                             const float *bias, const float *gn, const float *qn, const float *kn, const int *pos,
                             const float *inv_freq, int nh, int nkv, int hd, int cap, int len, int fused, char *err,
                             size_t errlen) {
    return cuda_test_qkv_kv(q, 32, kc, vc, NULL, NULL, x, M, w, K, bias, gn, qn, kn, pos, inv_freq, nh, nkv, hd, cap,
                            len, fused, err, errlen);
}

extern "C" int cuda_test_qkv_kv(float *q, int bits, void *kc, void *vc, float *ks, float *vs, const float *x, int M,
                                const void *w, int K, const float *bias, const float *gn, const float *qn,
                                const float *kn, const int *pos, const float *inv_freq, int nh, int nkv, int hd,
                                int cap, int len, int fused, char *err, size_t errlen) {
    const int N = (nh + 2 * nkv) * hd;
    /* cf: bytes of a K (or V) cache; ns: its scales (8 bits) */
    const size_t wb = sizeof(__nv_bfloat16) * (size_t)N * K, cf = (size_t)nkv * cap * hd * (size_t)(bits / 8),
                 ns = bits == 8 ? (size_t)nkv * cap : 0;
    float *dx, *dy, *dq, *db = NULL, *dg, *dqn, *dkn, *df, *dks = NULL, *dvs = NULL;
    unsigned char *dkc, *dvc;
    int *dp, *dl, *cnt;
    void *dw;
    if (dup_to_dev(&dx, x, (size_t)M * K, err, errlen) || dup_to_dev(&dy, (float *)NULL, (size_t)M * N, err, errlen) ||
        dup_to_dev(&dq, (float *)NULL, (size_t)M * nh * hd, err, errlen) ||
        dup_to_dev(&dkc, (unsigned char *)NULL, cf, err, errlen) ||
        dup_to_dev(&dvc, (unsigned char *)NULL, cf, err, errlen) ||
        (ns && (dup_to_dev(&dks, (float *)NULL, ns, err, errlen) || dup_to_dev(&dvs, (float *)NULL, ns, err, errlen))) ||
        (bias && dup_to_dev(&db, bias, (size_t)N, err, errlen)) || dup_to_dev(&dg, gn, (size_t)K, err, errlen) ||
        dup_to_dev(&dqn, qn, (size_t)hd, err, errlen) || dup_to_dev(&dkn, kn, (size_t)hd, err, errlen) ||
        dup_to_dev(&df, inv_freq, (size_t)hd / 2, err, errlen) || dup_to_dev(&dp, pos, (size_t)M, err, errlen) ||
        dup_to_dev(&dl, &len, 1, err, errlen) || dup_to_dev(&cnt, (int *)NULL, (size_t)cu_qkv_tail_cnt(nh, nkv), err,
                                                            errlen))
        return -1;
    CK(cudaMalloc(&dw, wb));
    CK(cudaMemcpy(dw, w, wb, cudaMemcpyHostToDevice));
    CK(cudaMemset(cnt, 0, sizeof(int) * cu_qkv_tail_cnt(nh, nkv)));
    CK(cudaMemset(dq, 0, sizeof(float) * (size_t)M * nh * hd));
    CK(cudaMemset(dkc, 0, cf));
    CK(cudaMemset(dvc, 0, cf));
    if (ns) {
        CK(cudaMemset(dks, 0, sizeof(float) * ns));
        CK(cudaMemset(dvs, 0, sizeof(float) * ns));
    }
    dmat W = {dw, DT_BF16, N, K};
    const float eps = 1e-6f;
    int rc = 0;
    cu_qkv_tail t = {cu_qkv_fused_args(dq, dy, cu_kv{dkc, dvc, dks, dvs, bits}, dqn, dkn, dp, df, nh, nkv, hd, cap, dl, eps), cnt};
    if (fused) {
        for (int r = 0; r < 2 && rc == 0; r++) {
            if (r) { /* the second run starts from zeroed outputs */
                CK(cudaMemset(dq, 0, sizeof(float) * (size_t)M * nh * hd));
                CK(cudaMemset(dkc, 0, cf));
                CK(cudaMemset(dvc, 0, cf));
                if (ns) {
                    CK(cudaMemset(dks, 0, sizeof(float) * ns));
                    CK(cudaMemset(dvs, 0, sizeof(float) * ns));
                }
            }
            if (!cu_matmul_norm_qkv(go0(), dy, dx, M, &W, db, dg, eps, &t))
                rc = ds_err(err, errlen, "the fused q/k/v tail does not take %d rows of head_dim %d", M, hd);
        }
    } else {
        cu_matmul_norm(go0(), dy, dx, M, &W, db, dg, eps);
        cu_qkv_post_run(go0(), &t.a, M);
    }
    if (rc == 0) {
        CK_LAUNCH();
        CK(cudaMemcpy(q, dq, sizeof(float) * (size_t)M * nh * hd, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(kc, dkc, cf, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(vc, dvc, cf, cudaMemcpyDeviceToHost));
        if (ns) {
            CK(cudaMemcpy(ks, dks, sizeof(float) * ns, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(vs, dvs, sizeof(float) * ns, cudaMemcpyDeviceToHost));
        }
    }
    void *bufs[] = {dx, dy, dq, dkc, dvc, db, dg, dqn, dkn, df, dp, dl, cnt, dw, dks, dvs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    return rc;
}

/* thread i writes out[2i] and out[2i + 1]: tf32_cut's head and tail of
   x[i] (PAIR 0), or bf16_cut2's packed heads and tails of x[2i] and
   x[2i + 1], x[n] taken as 0 for odd n (PAIR 1) */
template <int PAIR> __global__ void k_cut_check(uint32_t *out, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (PAIR ? (n + 1) / 2 : n)) return;
    uint32_t h, l;
    if (PAIR) {
        const bf16x2_cut c = bf16_cut2(x[2 * i], 2 * i + 1 < n ? x[2 * i + 1] : 0.0f);
        h = c.h, l = c.l;
    } else {
        const tf32x2 c = tf32_cut(x[i]);
        h = c.h, l = c.l;
    }
    out[2 * i] = h;
    out[2 * i + 1] = l;
}
template <int PAIR> static int cut_check(uint32_t *out, const float *x, int n, char *err, size_t errlen) {
    float *dx;
    uint32_t *dout;
    const int items = PAIR ? (n + 1) / 2 : n;
    if (dup_to_dev(&dx, x, (size_t)n, err, errlen) || dup_to_dev(&dout, (uint32_t *)NULL, (size_t)2 * items, err, errlen))
        return -1;
    k_cut_check<PAIR><<<(items + 255) / 256, 256>>>(dout, dx, n);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(uint32_t) * 2 * (size_t)items, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dout);
    return 0;
}

/* for each x[i]: tf32_cut's head and tail, out[2i], out[2i + 1] (bit
   patterns, before the tensor core's truncation) */
extern "C" int cuda_test_tf32_cut(uint32_t *out, const float *x, int n, char *err, size_t errlen) {
    return cut_check<0>(out, x, n, err, errlen);
}
/* bf16_cut2 of the pairs (x[2i], x[2i + 1]): out[2i] the packed heads,
   out[2i + 1] the packed tails */
extern "C" int cuda_test_bf16_cut(uint32_t *out, const float *x, int n, char *err, size_t errlen) {
    return cut_check<1>(out, x, n, err, errlen);
}

/* twice with the split kernel's scratch (the second run finds the counts
   the first left) */
extern "C" int cuda_test_argmax(int *out, const float *x, int M, int n, char *err, size_t errlen) {
    float *dx;
    int *dout;
    cu_am am;
    if (dup_to_dev(&dx, x, (size_t)M * n, err, errlen) || dup_to_dev(&dout, (int *)NULL, (size_t)M, err, errlen) ||
        cu_am_create(&am, M, n, err, errlen))
        return -1;
    for (int r = 0; r < 2; r++) {
        CK(cudaMemset(dout, 0xff, sizeof(int) * (size_t)M));
        cu_argmax(go0(), dout, dx, M, n, &am);
        CK_LAUNCH();
    }
    CK(cudaMemcpy(out, dout, sizeof(int) * (size_t)M, cudaMemcpyDeviceToHost));
    cu_am_free(&am);
    cudaFree(dx);
    cudaFree(dout);
    return 0;
}

/* ---- quantized matrices (cuda_quant.cu) ---- */

/* The quantized matmul through the backend's entry points: mode 0
   cu_matmul (+ bias), 1 cu_matmul_add (y is read), 2 cu_matmul_swiglu of W
   and W2; with gn, cu_layer_matmul with the RMSNorm of x (a quantized
   matrix declines the folded norm: the norm runs apart into scratch). The
   fused paths' predicates must all decline a quantized matrix. */
extern "C" int cuda_test_qmatmul(float *y, const float *x, int M, const tensor *W, const tensor *W2, const float *bias,
                                 const float *gn, float eps, int mode, int group, char *err, size_t errlen) {
    dev_pool pl = {};
    dmat dw = {}, dw2 = {};
    const int N = (int)W->shape[0], K = (int)W->shape[1];
    float *dx = NULL, *dy = NULL, *db = NULL, *dg = NULL, *dxb = NULL;
    int rc = cu_up_mat(&pl, &dw, W, err, errlen) || (W2 && cu_up_mat(&pl, &dw2, W2, err, errlen)) ||
             cu_up_f32(&pl, &dx, x, (size_t)M * K, err, errlen) || cu_up_f32(&pl, &dy, y, (size_t)M * N, err, errlen) ||
             cu_up_f32(&pl, &db, bias, (size_t)N, err, errlen) || cu_up_f32(&pl, &dg, gn, (size_t)K, err, errlen) ||
             cu_dev_alloc(&pl, (void **)&dxb, sizeof(float) * (size_t)M * K, err, errlen);
    const cu_go st = go0();
    if (!rc && (cu_fuses_norm(st.t, &dw) || cu_takes_cut(st.t, &dw, M) || cu_tiles_ok(&dw) || cu_tile_bytes(&dw)))
        rc = ds_err(err, errlen, "a fused path takes the quantized %s", dtype_name(dw.dt));
    cu_gemm *g = NULL; /* group: the prefill groups' cuBLAS on the matrix in bf16 */
    if (!rc && group && cu_gemm_create(&g, group, M, K, N, (size_t)N * K, err, errlen)) rc = -1;
    if (!rc) {
        const int epi = mode == 2 ? MM_SWIGLU : mode == 1 ? MM_ADD : MM_STORE;
        if (gn || g) cu_layer_matmul(st, g, epi, dy, dx, M, &dw, W2 ? &dw2 : NULL, db, dg, eps, dxb, cu_cut{});
        else if (mode == 2) cu_matmul_swiglu(st, dy, dx, M, &dw, &dw2);
        else if (mode == 1) cu_matmul_add(st, dy, dx, M, &dw, db);
        else cu_matmul(st, dy, dx, M, &dw, db);
        cudaError_t e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaMemcpy(y, dy, sizeof(float) * (size_t)M * N, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = ds_err(err, errlen, "CUDA: quantized matmul: %s", cudaGetErrorString(e));
        if (!rc && cu_gemm_check(g, err, errlen)) rc = -1;
    }
    cu_gemm_free(g);
    cu_pool_free(&pl);
    return rc ? -1 : 0;
}

extern "C" int cuda_test_qembed(float *out, const tensor *E, const int *tok, int M, char *err, size_t errlen) {
    dev_pool pl = {};
    dmat de = {};
    int *dt_ = NULL;
    float *dout = NULL;
    const int H = (int)E->shape[1];
    int rc = cu_up_mat(&pl, &de, E, err, errlen) || cu_dev_alloc(&pl, (void **)&dt_, sizeof(int) * (size_t)M, err, errlen) ||
             cu_dev_alloc(&pl, (void **)&dout, sizeof(float) * (size_t)M * H, err, errlen);
    if (!rc) {
        cudaError_t e = cudaMemcpy(dt_, tok, sizeof(int) * (size_t)M, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) {
            cu_embed(go0(), dout, &de, dt_, M);
            e = cudaDeviceSynchronize();
        }
        if (e == cudaSuccess) e = cudaMemcpy(out, dout, sizeof(float) * (size_t)M * H, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = ds_err(err, errlen, "CUDA: quantized embedding: %s", cudaGetErrorString(e));
    }
    cu_pool_free(&pl);
    return rc ? -1 : 0;
}

static unsigned char rows_pattern(size_t blk, size_t pos, size_t byte, int gen) {
    return (unsigned char)(blk * 131 + pos * 7 + byte * 3 + (size_t)gen * 101);
}

extern "C" int cuda_test_rows_host(size_t row, size_t cap, size_t blocks, int pos0, int n, char *err, size_t errlen) {
    const size_t total = row * cap * blocks, w = (size_t)n * row;
    unsigned char *h = (unsigned char *)malloc(total), *rows = (unsigned char *)malloc(w * blocks + 1);
    void *d = NULL;
    cudaStream_t st = NULL;
    int rc = -1;
    if (!h || !rows) {
        ds_err(err, errlen, "out of host memory");
        goto out;
    }
    for (size_t b = 0; b < blocks; b++)
        for (size_t p = 0; p < cap; p++)
            for (size_t i = 0; i < row; i++) h[(b * cap + p) * row + i] = rows_pattern(b, p, i, 0);
    if (cudaMalloc(&d, total) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess ||
        cudaMemcpy(d, h, total, cudaMemcpyHostToDevice) != cudaSuccess) {
        ds_err(err, errlen, "CUDA setup: %s", cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    if (cu_rows_host(d, cap, st, rows, row, pos0, n, blocks, 1, err, errlen)) goto out;
    for (size_t b = 0; b < blocks; b++)
        for (size_t p = 0; p < (size_t)n; p++)
            for (size_t i = 0; i < row; i++)
                if (rows[(b * n + p) * row + i] != rows_pattern(b, pos0 + p, i, 0)) {
                    ds_err(err, errlen, "save: block %zu position %zu byte %zu differs", b, pos0 + p, i);
                    goto out;
                }
    for (size_t b = 0; b < blocks; b++)
        for (size_t p = 0; p < (size_t)n; p++)
            for (size_t i = 0; i < row; i++) rows[(b * n + p) * row + i] = rows_pattern(b, pos0 + p, i, 1);
    if (cu_rows_host(d, cap, st, rows, row, pos0, n, blocks, 0, err, errlen)) goto out;
    if (cudaMemcpy(h, d, total, cudaMemcpyDeviceToHost) != cudaSuccess) {
        ds_err(err, errlen, "CUDA read back: %s", cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    for (size_t b = 0; b < blocks; b++)
        for (size_t p = 0; p < cap; p++)
            for (size_t i = 0; i < row; i++) {
                const int in = p >= (size_t)pos0 && p < (size_t)pos0 + (size_t)n;
                if (h[(b * cap + p) * row + i] != rows_pattern(b, p, i, in)) {
                    ds_err(err, errlen, "load: block %zu position %zu byte %zu %s", b, p, i,
                           in ? "was not loaded" : "changed outside the rows");
                    goto out;
                }
            }
    rc = 0;
out:
    if (d) cudaFree(d);
    if (st) cudaStreamDestroy(st);
    free(h);
    free(rows);
    return rc;
}
