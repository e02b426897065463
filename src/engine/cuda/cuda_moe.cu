// cuda_moe: see cuda_moe.cuh. The experts' upload, the routing kernels
// (k_moe_route, k_moe_plan), the gather and the combine, and the host side
// that launches each chosen expert's matmuls over its gathered rows.
#include <cuda_runtime.h>

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_layer.cuh"

/* ---- kernels ------------------------------------------------------------- */

#define ROUTE_WARPS 8 /* rows (a warp each) per k_moe_route block */

/* One warp a row m of p[M][E], the router logits, left as the row's
   softmax: the maximum (fmaxf: exact in any order), expf(p - max), their
   sum by the warp's fixed butterfly, each divided by it. Then top_k rounds,
   each taking the largest probability not yet taken, the lower index first
   among equals (a NaN ranks below every probability, so the order is total
   and every lane agrees), weighted by its probability; under norm the
   weights are divided by their sum in the order taken (engine/moe's
   renormalization). sel[m][K] and w[m][K] get them in ascending expert
   order, the order of the combine's sum. A row's result depends on its
   logits alone. */
__global__ void __launch_bounds__(32 * ROUTE_WARPS)
    k_moe_route(float *p, int M, int E, int K, int norm, int *sel, float *w) {
    pdl_trigger();
    pdl_wait();
    __shared__ int s_sel[ROUTE_WARPS][MOE_MAX_TOP_K];
    __shared__ float s_w[ROUTE_WARPS][MOE_MAX_TOP_K];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, m = blockIdx.x * ROUTE_WARPS + wp;
    if (m >= M) return; /* (a whole warp: M rows, a warp each) */
    float *r = p + (size_t)m * E;
    float mx = -INFINITY;
    for (int j = lane; j < E; j += 32) mx = fmaxf(mx, r[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < E; j += 32) {
        const float e = expf(r[j] - mx);
        r[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    for (int j = lane; j < E; j += 32) r[j] = r[j] / sum;
    int *ss = s_sel[wp];
    float *sw = s_w[wp];
    for (int k = 0; k < K; k++) {
        int bj = -1;
        float bq = 0.0f;
        for (int j = lane; j < E; j += 32) { /* (j ascending: the lower index kept among equals) */
            int taken = 0;
            for (int u = 0; u < k; u++) taken |= ss[u] == j;
            const float q = r[j] != r[j] ? -1.0f : r[j];
            if (!taken && (bj < 0 || q > bq)) bj = j, bq = q;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float oq = __shfl_xor_sync(0xffffffffu, bq, o);
            const int oj = __shfl_xor_sync(0xffffffffu, bj, o);
            if (oj >= 0 && (bj < 0 || oq > bq || (oq == bq && oj < bj))) bj = oj, bq = oq;
        }
        if (lane == 0) ss[k] = bj, sw[k] = r[bj]; /* (bj >= 0: K <= E, cu_moe_up) */
        __syncwarp();
    }
    if (lane) return;
    if (norm) {
        float tot = 0.0f;
        for (int k = 0; k < K; k++) tot += sw[k];
        for (int k = 0; k < K; k++) sw[k] = sw[k] / tot;
    }
    for (int k = 1; k < K; k++) /* ascending expert order (insertion: K <= MOE_MAX_TOP_K) */
        for (int u = k; u > 0 && ss[u - 1] > ss[u]; u--) {
            const int ts = ss[u];
            const float tw = sw[u];
            ss[u] = ss[u - 1], sw[u] = sw[u - 1];
            ss[u - 1] = ts, sw[u - 1] = tw;
        }
    for (int k = 0; k < K; k++) sel[(size_t)m * K + k] = ss[k], w[(size_t)m * K + k] = sw[k];
}

/* the place of expert e in row i's ascending list sel[i][K], or -1 */
__device__ __forceinline__ int row_has(const int *sel, int K, int e) {
    for (int k = 0; k < K; k++)
        if (sel[k] == e) return k;
    return -1;
}

#define PLAN_THREADS 1024
#define PLAN_MAX_E 4096 /* (config.c's bound on the experts) */

/* One block: the rows routed to each expert, laid out expert after expert
   in ascending expert order and, within an expert, in ascending row order
   (the CPU's gather order): cnt[e] rows for expert e, from the sum of the
   counts before it; at[i][k] = where row i's k-th expert (ascending) has
   its gathered row; src[n] = the row gathered at n. A warp per expert at a
   time, 32 rows a step by ballot, so everything is an exact count. */
__global__ void __launch_bounds__(PLAN_THREADS)
    k_moe_plan(const int *sel, int M, int K, int E, int *cnt, int *at, int *src) {
    pdl_trigger();
    pdl_wait();
    __shared__ int off[PLAN_MAX_E];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int e = wp; e < E; e += nw) {
        int c = 0;
        for (int b = 0; b < M; b += 32) {
            const int i = b + lane;
            c += __popc(__ballot_sync(0xffffffffu, i < M && row_has(sel + (size_t)i * K, K, e) >= 0));
        }
        if (lane == 0) off[e] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int e = 0, s = 0; e < E; e++) {
            const int c = off[e];
            cnt[e] = c;
            off[e] = s;
            s += c;
        }
    __syncthreads();
    for (int e = wp; e < E; e += nw) {
        int o = off[e];
        for (int b = 0; b < M; b += 32) {
            const int i = b + lane, k = i < M ? row_has(sel + (size_t)i * K, K, e) : -1;
            const unsigned bal = __ballot_sync(0xffffffffu, k >= 0);
            if (k >= 0) {
                const int n = o + __popc(bal & ((1u << lane) - 1u));
                at[(size_t)i * K + k] = n;
                src[n] = i;
            }
            o += __popc(bal);
        }
    }
}

/* a block a gathered row: xg[n] = xb[src[n]] */
__global__ void k_moe_gather(float *xg, const float *xb, const int *src, int H) {
    pdl_trigger();
    pdl_wait();
    const size_t n = blockIdx.x;
    const float *in = xb + (size_t)src[n] * H;
    float *out = xg + n * H;
    if (H % 4 == 0) {
        for (int h = threadIdx.x; h < H / 4; h += blockDim.x)
            reinterpret_cast<float4 *>(out)[h] = reinterpret_cast<const float4 *>(in)[h];
    } else {
        for (int h = threadIdx.x; h < H; h += blockDim.x) out[h] = in[h];
    }
}

/* a block a row m: x[m] (+)= the sum over its K experts in ascending
   expert order of w[m][k] * y[at[m][k]], each product and sum rounded as
   the CPU's (the sum from 0, products never fused into it; add: onto x[m],
   else in place of it) */
__global__ void k_moe_combine(float *x, const float *y, const int *at, const float *w, int K, int H, int add) {
    pdl_trigger();
    pdl_wait();
    __shared__ int s_at[MOE_MAX_TOP_K];
    __shared__ float s_w[MOE_MAX_TOP_K];
    const int m = blockIdx.x;
    if ((int)threadIdx.x < K) s_at[threadIdx.x] = at[(size_t)m * K + threadIdx.x], s_w[threadIdx.x] = w[(size_t)m * K + threadIdx.x];
    __syncthreads();
    float *xr = x + (size_t)m * H;
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < K; k++) a = __fadd_rn(a, __fmul_rn(s_w[k], y[(size_t)s_at[k] * H + h]));
        xr[h] = add ? __fadd_rn(xr[h], a) : a;
    }
}

/* ---- upload -------------------------------------------------------------- */

/* bytes of an MLX scale or bias */
static size_t mlx_sb(ds_dtype sdt) { return sdt == DT_F32 ? 4 : 2; }

/* whether expert tensor t has t0's format (dtype, and MLX's parameters) */
static int same_format(const tensor *t, const tensor *t0) {
    return t->dtype == t0->dtype &&
           (t->dtype != DT_MLX || (t->q.bits == t0->q.bits && t->q.group == t0->q.group && t->q.sdtype == t0->q.sdtype));
}

/* the E tensors t[e], each [N][K], stacked by rows into W ([E * N][K], one
   format) */
static int up_stack(dev_pool *pl, dmat *W, const tensor *const *t, int E, int64_t N, int64_t K, const char *who,
                    int l, char *err, size_t errlen) {
    memset(W, 0, sizeof *W);
    if (!t) return ds_err(err, errlen, "%s: layer %d: an MoE layer without its experts", who, l);
    for (int e = 0; e < E; e++) {
        const tensor *x = t[e];
        if (!x) return ds_err(err, errlen, "%s: layer %d: expert %d is missing", who, l, e);
        if (x->ndim != 2 || x->shape[0] != N || x->shape[1] != K)
            return ds_err(err, errlen, "%s: %s is not [%lld][%lld]", who, x->name, (long long)N, (long long)K);
        if (x->rows8) return ds_err(err, errlen, "%s: %s is not row-major", who, x->name);
        if (!same_format(x, t[0]))
            return ds_err(err, errlen, "%s: %s is %s, expert 0's %s: the experts of a projection need one format",
                          who, x->name, dtype_name(x->dtype), dtype_name(t[0]->dtype));
        if (dtype_is_quant(x->dtype)) {
            if (cu_q_geometry(x, err, errlen)) return -1;
        } else if (x->dtype != DT_BF16 && x->dtype != DT_F16 && x->dtype != DT_F32) {
            return ds_err(err, errlen, "%s: %s has dtype %s (bf16, f16, f32 or a quantized format needed)", who,
                          x->name, dtype_name(x->dtype));
        }
    }
    if ((int64_t)E * N > INT_MAX) return ds_err(err, errlen, "%s: layer %d: %d experts of %lld rows are too many", who, l, E, (long long)N);
    const tensor *t0 = t[0];
    W->dt = t0->dtype;
    W->N = (int)((int64_t)E * N);
    W->K = (int)K;
    if (W->dt == DT_MLX) W->bits = t0->q.bits, W->group = t0->q.group, W->sdt = t0->q.sdtype;
    const size_t eb = dtype_is_quant(W->dt) ? cu_q_row_bytes(W->dt, W->bits, W->K) * (size_t)N
                                            : (size_t)N * (size_t)K * dtype_size(W->dt);
    const size_t sb = W->dt == DT_MLX ? (size_t)N * (size_t)(K / W->group) * mlx_sb(W->sdt) : 0;
    for (int e = 0; e < E; e++)
        if (t[e]->nbytes != eb) return ds_err(err, errlen, "%s: %s holds %zu bytes, not %zu", who, t[e]->name, t[e]->nbytes, eb);
    if (cu_dev_alloc(pl, &W->p, eb * (size_t)E, err, errlen)) return -1;
    if (sb && (cu_dev_alloc(pl, &W->sc, sb * (size_t)E, err, errlen) || cu_dev_alloc(pl, &W->bi, sb * (size_t)E, err, errlen)))
        return -1;
    for (int e = 0; e < E; e++) {
        CK(cudaMemcpy((char *)W->p + eb * (size_t)e, t[e]->data, eb, cudaMemcpyHostToDevice));
        if (sb) {
            CK(cudaMemcpy((char *)W->sc + sb * (size_t)e, t[e]->q.scales, sb, cudaMemcpyHostToDevice));
            CK(cudaMemcpy((char *)W->bi + sb * (size_t)e, t[e]->q.biases, sb, cudaMemcpyHostToDevice));
        }
    }
    return 0;
}

int cu_moe_up(dev_pool *pl, dmoe *D, const wmoe *e, const model_config *c, int l, const char *who, char *err,
              size_t errlen) {
    memset(D, 0, sizeof *D);
    if (!e || !e->router) return ds_err(err, errlen, "%s: layer %d: an MoE layer without its router", who, l);
    const int64_t H = c->hidden_size, I = e->inter, E = e->n_experts;
    if (E < 1 || E > PLAN_MAX_E || e->top_k < 1 || e->top_k > E || e->top_k > MOE_MAX_TOP_K || I < 1)
        return ds_err(err, errlen, "%s: layer %d: %d experts of top %d (1..%d experts, 1..min(experts, %d) a row)",
                      who, l, e->n_experts, e->top_k, PLAN_MAX_E, MOE_MAX_TOP_K);
    const tensor *rt = e->router;
    if (rt->ndim != 2 || rt->shape[0] != E || rt->shape[1] != H)
        return ds_err(err, errlen, "%s: %s is not [%lld][%lld]", who, rt->name, (long long)E, (long long)H);
    D->E = (int)E, D->K = e->top_k, D->norm = e->norm_topk, D->inter = (int)I;
    if (cu_up_mat(pl, &D->router, rt, err, errlen) || up_stack(pl, &D->gate, e->gate, D->E, I, H, who, l, err, errlen) ||
        up_stack(pl, &D->up, e->up, D->E, I, H, who, l, err, errlen) ||
        up_stack(pl, &D->down, e->down, D->E, H, I, who, l, err, errlen))
        return -1;
    /* (the SwiGLU matmul reads gate and up rows alike: one format, else apart) */
    D->gu_apart = D->gate.dt != D->up.dt || (dtype_is_quant(D->gate.dt) && !cu_q_same_format(&D->gate, &D->up));
    return 0;
}

/* expert e's rows (n of them) of a stacked projection, as a matrix of its own */
static dmat expert(const dmat *W, int e, int n) { return cu_mat_rows(W, e * n, n); }

/* ---- the context's scratch and the two halves ------------------------------ */

struct cu_moe_buf {
    int rows, E, K, I, apart; /* the most of each over the model's MoE layers; apart: a layer runs gate/up apart */
    float *logits;            /* [rows][E] router logits, then probabilities */
    int *sel;                 /* [rows][K] each row's experts, ascending */
    float *w;                 /* [rows][K] their weights */
    int *at;                  /* [rows][K] their gathered rows */
    int *src;                 /* [rows * K] the row each gathered row is */
    int *cnt, *h_cnt;         /* [E] rows per expert: device, pinned host */
    /* [rows * K][H]: the gathered rows; each expert's down projection
       then writes its outputs over its own rows, which nothing reads any
       more (every gate/up is enqueued before the first down) */
    float *xg;
    float *h; /* [rows * K][I]: the SwiGLU rows (twice with apart: the up rows after them) */
    int M, ok; /* the layer in flight: its rows, and whether its plan in h_cnt holds */
    int failed;
    char msg[200];
};

int cu_moe_any(const dlayer *ls, int n) {
    for (int l = 0; l < n; l++)
        if (ls[l].mlp == MLP_MOE) return 1;
    return 0;
}

/* the buffer's dimensions for the model's layers (0 without experts) */
static int buf_dims(const dlayer *ls, int n, int *E, int *K, int *I, int *apart) {
    *E = *K = *I = *apart = 0;
    for (int l = 0; l < n; l++) {
        if (ls[l].mlp != MLP_MOE) continue;
        const dmoe *D = &ls[l].moe;
        if (D->E > *E) *E = D->E;
        if (D->K > *K) *K = D->K;
        if (D->inter > *I) *I = D->inter;
        *apart |= D->gu_apart;
    }
    return *E > 0;
}

/* the floats (or ints) of each array, in the order of cu_moe_buf */
static void buf_sizes(size_t *s, int rows, int H, int E, int K, int I, int apart) {
    const size_t R = (size_t)rows, RK = R * (size_t)K;
    const size_t v[] = {R * E, RK, RK, RK, RK, (size_t)E, RK * (size_t)H, RK * (size_t)I * (apart ? 2 : 1)};
    memcpy(s, v, sizeof v);
}
enum { BUF_ARRAYS = 8 };

size_t cu_moe_buf_bytes(const model_config *c, const dlayer *ls, int n, int rows) {
    int E, K, I, apart;
    if (!buf_dims(ls, n, &E, &K, &I, &apart)) return 0;
    size_t s[BUF_ARRAYS], b = 0;
    buf_sizes(s, rows, c->hidden_size, E, K, I, apart);
    for (int i = 0; i < BUF_ARRAYS; i++) b += 4 * s[i]; /* (floats and ints alike) */
    return b;
}

int cu_moe_buf_create(cu_moe_buf **out, const model_config *c, const dlayer *ls, int n, int rows, char *err,
                      size_t errlen) {
    *out = NULL;
    int E, K, I, apart;
    if (!buf_dims(ls, n, &E, &K, &I, &apart)) return 0;
    cu_moe_buf *b = (cu_moe_buf *)xcalloc(1, sizeof *b);
    b->rows = rows, b->E = E, b->K = K, b->I = I, b->apart = apart;
    size_t s[BUF_ARRAYS];
    buf_sizes(s, rows, c->hidden_size, E, K, I, apart);
    void **p[BUF_ARRAYS] = {(void **)&b->logits, (void **)&b->sel, (void **)&b->w,  (void **)&b->at,
                            (void **)&b->src,    (void **)&b->cnt, (void **)&b->xg, (void **)&b->h};
    for (int i = 0; i < BUF_ARRAYS; i++) {
        cudaError_t e = cudaMalloc(p[i], 4 * s[i]);
        if (e != cudaSuccess) {
            cudaGetLastError(); /* (not sticky) */
            cu_moe_buf_free(b);
            return ds_err(err, errlen, "CUDA: cannot allocate the experts' scratch (%.0f MiB for %d rows): %s%s",
                          (double)cu_moe_buf_bytes(c, ls, n, rows) / (1 << 20), rows, cudaGetErrorString(e),
                          cu_tiles_hint());
        }
    }
    if (cudaMallocHost((void **)&b->h_cnt, sizeof(int) * (size_t)E) != cudaSuccess) {
        cudaGetLastError();
        cu_moe_buf_free(b);
        return ds_err(err, errlen, "CUDA: cannot allocate pinned memory for the experts' counts");
    }
    *out = b;
    return 0;
}

void cu_moe_buf_free(cu_moe_buf *b) {
    if (!b) return;
    void *p[] = {b->logits, b->sel, b->w, b->at, b->src, b->cnt, b->xg, b->h};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cudaFree(p[i]);
    if (b->h_cnt) cudaFreeHost(b->h_cnt);
    free(b);
}

/* records the first failure (cu_moe_check reports it) */
static void buf_fail(cu_moe_buf *b, const char *what, cudaError_t e) {
    b->ok = 0;
    if (b->failed) return;
    b->failed = 1;
    snprintf(b->msg, sizeof b->msg, "CUDA: the experts' routing: %s%s%s", what, e != cudaSuccess ? ": " : "",
             e != cudaSuccess ? cudaGetErrorString(e) : "");
}

int cu_moe_check(cu_moe_buf *b, char *err, size_t errlen) {
    if (!b || !b->failed) return 0;
    b->failed = 0;
    return ds_err(err, errlen, "%s", b->msg);
}

void cu_moe_gate_up(cu_go st, cu_moe_buf *b, const dmoe *D, const float *x, float *xb, const float *gn, int H,
                    float eps, int M, int omit) {
    if (!b) return;
    b->ok = 0;
    if (omit & CU_OMIT_GU) return;
    if (M < 1 || M > b->rows || D->E > b->E || D->K > b->K || D->inter > b->I || (D->gu_apart && !b->apart))
        return buf_fail(b, "a layer wider than the context's scratch", cudaSuccess);
    /* (the host reads the counts back below: no graph can hold that) */
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
        return buf_fail(b, "an MoE layer cannot run inside a CUDA graph's capture", cudaSuccess);
    const int E = D->E, K = D->K, I = D->inter;
    cu_rmsnorm(st, xb, x, gn, M, H, eps);
    cu_matmul(st, b->logits, xb, M, &D->router, NULL);
    launch(k_moe_route, (M + ROUTE_WARPS - 1) / ROUTE_WARPS, 32 * ROUTE_WARPS, st, b->logits, M, E, K, D->norm, b->sel,
           b->w);
    launch(k_moe_plan, 1, PLAN_THREADS, st, (const int *)b->sel, M, K, E, b->cnt, b->at, b->src);
    launch(k_moe_gather, M * K, 128, st, b->xg, (const float *)xb, (const int *)b->src, H);
    cudaError_t e = cudaMemcpyAsync(b->h_cnt, b->cnt, sizeof(int) * (size_t)E, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return buf_fail(b, "reading the experts' row counts", e);
    /* every row takes K distinct experts (k_moe_route): counts of at most
       M each, M * K in all, or the plan is not one this code made */
    long tot = 0;
    for (int i = 0; i < E; i++) {
        if (b->h_cnt[i] < 0 || b->h_cnt[i] > M) return buf_fail(b, "an expert's row count out of range", cudaSuccess);
        tot += b->h_cnt[i];
    }
    if (tot != (long)M * K) return buf_fail(b, "the experts' row counts do not add up", cudaSuccess);
    float *up = b->h + (size_t)b->rows * b->K * b->I; /* (gate and up apart: the up rows) */
    for (int i = 0, o = 0; i < E; o += b->h_cnt[i], i++) {
        const int n = b->h_cnt[i];
        if (!n) continue;
        const float *xe = b->xg + (size_t)o * H;
        float *he = b->h + (size_t)o * I;
        const dmat g = expert(&D->gate, i, I), u = expert(&D->up, i, I);
        if (D->gu_apart) {
            cu_matmul(st, he, xe, n, &g, NULL);
            cu_matmul(st, up + (size_t)o * I, xe, n, &u, NULL);
            cu_swiglu_apart(st, he, up + (size_t)o * I, (size_t)n * I);
        } else {
            cu_matmul_swiglu(st, he, xe, n, &g, &u);
        }
    }
    b->M = M;
    b->ok = 1;
}

void cu_moe_down(cu_go st, cu_moe_buf *b, const dmoe *D, float *y, int add, int H, int M, int omit) {
    if (!b || !b->ok || (omit & CU_OMIT_DOWN)) return;
    if (M != b->M) return buf_fail(b, "the down half of another layer's rows", cudaSuccess);
    b->ok = 0;
    const int E = D->E, I = D->inter;
    for (int i = 0, o = 0; i < E; o += b->h_cnt[i], i++) {
        const int n = b->h_cnt[i];
        if (!n) continue;
        const dmat d = expert(&D->down, i, H);
        cu_matmul(st, b->xg + (size_t)o * H, b->h + (size_t)o * I, n, &d, NULL);
    }
    launch(k_moe_combine, M, 256, st, y, (const float *)b->xg, (const int *)b->at, (const float *)b->w, D->K, H, add);
}

/* ---- the test hook (tests/cuda/cuda_hooks.h) -------------------------------- */

extern "C" int cuda_test_moe(float *x, int M, const wmoe *e, int H, const float *gn, float eps, int tiled, int *sel,
                             char *err, size_t errlen) {
    dev_pool pl = {};
    model_config c;
    memset(&c, 0, sizeof c);
    c.hidden_size = H;
    dlayer L;
    memset(&L, 0, sizeof L);
    L.mlp = MLP_MOE;
    cu_moe_buf *b = NULL;
    float *dx = NULL, *dxb = NULL, *dg = NULL;
    int rc = cu_moe_up(&pl, &L.moe, e, &c, 0, "CUDA test", err, errlen);
    if (!rc && tiled)
        rc = cu_tile_mat(&pl, &L.moe.gate, err, errlen) || cu_tile_mat(&pl, &L.moe.up, err, errlen) ||
             cu_tile_mat(&pl, &L.moe.down, err, errlen);
    if (!rc)
        rc = cu_up_f32(&pl, &dx, x, (size_t)M * H, err, errlen) || cu_up_f32(&pl, &dg, gn, (size_t)H, err, errlen) ||
             cu_dev_alloc(&pl, (void **)&dxb, sizeof(float) * (size_t)M * H, err, errlen) ||
             cu_moe_buf_create(&b, &c, &L, 1, M, err, errlen);
    if (!rc) {
        const cu_go st = cu_go_on(0, cu_tuning_hooked());
        cu_moe_gate_up(st, b, &L.moe, dx, dxb, dg, H, eps, M, 0);
        cu_moe_down(st, b, &L.moe, dx, 1, H, M, 0);
        cudaError_t ce = cudaDeviceSynchronize();
        if (ce == cudaSuccess) ce = cudaGetLastError();
        if (ce == cudaSuccess) ce = cudaMemcpy(x, dx, sizeof(float) * (size_t)M * H, cudaMemcpyDeviceToHost);
        if (ce == cudaSuccess && sel)
            ce = cudaMemcpy(sel, b->sel, sizeof(int) * (size_t)M * L.moe.K, cudaMemcpyDeviceToHost);
        if (ce != cudaSuccess) rc = ds_err(err, errlen, "CUDA: the experts' MLP: %s", cudaGetErrorString(ce));
        else if (cu_moe_check(b, err, errlen)) rc = -1;
    }
    cu_moe_buf_free(b);
    cu_pool_free(&pl);
    return rc ? -1 : 0;
}
