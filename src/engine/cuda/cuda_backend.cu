// cuda_backend: see cuda_backend.h. The model's weights, device contexts and
// forward pass; the kernels are in cuda_mma.cu, cuda_ops.cu and cuda_attn*.cu.
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_layer.cuh"
extern "C" {
#include "engine/backend.h" /* backend_device_info (a C header) */
}

#define TRACE_EVENTS 1024
#define GRAPH_ROWS 17 /* widest batch replayed from a graph: a verify of 16 drafts + the anchor */
#define GRAPH_TAPS 8  /* most tapped layers a graph copies out (the published drafters tap 5) */
/* d_taps, where the taps of up to GRAPH_ROWS rows are copied on the device,
   is where taps_resident leaves those */
static_assert(GRAPH_ROWS == MODEL_RESIDENT_TAP_ROWS && GRAPH_TAPS == MODEL_RESIDENT_TAPS, "device taps buffer");

struct cuda_model {
    model_config cfg;
    int gpu;
    int clusters; /* the device has thread-block clusters (compute capability 9.0 on): the device sampler */
    dmat embed, lm_head;
    float *final_norm, *inv_freq;
    dlayer *layers;
    dev_pool pool; /* every device allocation of the weights */
    int tiles_done; /* the tile-major copies decided (model_tiles) */
    cu_tuning tune; /* its launch choices (cuda_tuning.h): cu_tuning_hooked's when created */
    int kv_bits;    /* its contexts' KV storage (model_desc.kv_bits: 32, 16 or 8; cu_kv) */
};

/* a captured forward and what its capture fixed (graph_for) */
struct graph_entry {
    int spread, tapped, out, M, n_sel;
    cudaGraphExec_t g; /* NULL where its capture failed */
};

struct cuda_ctx {
    cuda_model *m;
    int cap, len, max_batch;
    int rows;                        /* rows of activation scratch: max_batch, or more for prefill (prefill_rows) */
    void *kv;                        /* [layer][2][nkv][cap][hd] elements of m->kv_bits */
    float *kv_sc;                    /* bits 8: [layer][2][nkv][cap] scales; else NULL */
    float *x, *xb, *q, *att, *qkv, *gate, *logits;
    float *part;                     /* split attention partials */
    float *wg_img;                   /* the warpgroup-mma prefill attention's scratch, or NULL (ctx_create) */
    int *tok, *pos, *d_len;          /* device: ids, positions, cache length before the batch */
    int *qkv_cnt;                    /* device: the fused q/k/v tail's per-head counts (cu_qkv_tail) */
    uint32_t *att_c, *gate_c;        /* device: att and gate pre-cut for o and down, CU_CUT_ROWS rows */
    uint32_t *norm_c;                /* device: a norm run apart, its pre-cut rows (cu_norm_split), CU_CUT_ROWS */
    float *norm_r;                   /* device: and its rows' scales */
    int *d_ids, *h_ids;              /* argmax or samples of the logits rows: device, pinned host */
    cu_am am;                        /* the split argmax's scratch for the logits rows */
    cu_sample_args *h_samp, *d_samp; /* the device sampler's arguments: pinned host, device */
    float *escr;                     /* the device sampler's scratch rows */
    int *h_in;                       /* pinned: [rows] ids, [rows] positions, [1] length */
    float *h_pinned;                 /* pinned host staging for logits */
    size_t pinned_floats;
    cudaStream_t st;
    /* rows per forward chunk: max_batch, or a whole number of cuBLAS
       groups of prefill_rows when max_batch holds one; small_chunk the
       same from max_batch alone, for batches that ask more logits rows
       than the max_batch rows of the logits buffer */
    int chunk, small_chunk;
    cu_gemm *gemm; /* cuBLAS for the groups of prefill-sized chunks (NULL: chunks are narrower) */
    cu_moe_buf *moe; /* the experts' routing scratch (cuda_moe.cuh; NULL: a model without experts) */
    /* CUDA graphs of whole forwards, keyed by (the attention's launch
       shape, spread for long caches or not; with taps or not; what comes
       back: logits, ids, both or samples; rows; logits rows), for batches
       of up to GRAPH_ROWS rows, captured as first needed and looked up
       linearly (a context meets a few dozen keys: its decode and verify
       widths). Tapped graphs copy the tap layers into d_taps (the
       host copies follow the replay, unless the taps stay there:
       taps_resident); they are captured for one set of tap layers,
       tap_layers (a drafter's), and other sets run without graphs. */
    graph_entry *graphs;
    int n_graphs, cap_graphs;
    float *d_taps; /* [GRAPH_TAPS][GRAPH_ROWS][hidden] */
    /* wider batches' device taps (a speculative prefill's chunks):
       [GRAPH_TAPS][wide_rows][hidden], allocated by cuda_ctx_taps */
    float *d_wide;
    int wide_rows;
    int tap_layers[GRAPH_TAPS], n_tap_layers;
    int use_graphs;
    /* chained decoding (cuda_chain_start): a step's graph by the attention's
       launch shape; each step's argmax read back into h_ring[its number %
       2], with chain_ev[the same] recorded after it; steps launched and
       consumed so far (their difference the steps in flight, at most 2) */
    cudaGraphExec_t chain_g[2];
    int *h_ring;
    cudaEvent_t chain_ev[2];
    long chain_launched, chain_done;
    /* DSPARK_CUDA_TRACE=1: forwards run without graphs, with events between
       the ops, and print where each one's GPU time went (bench use) */
    cudaEvent_t *ev;
    int *ev_op, n_ev;
};

/* The tuning models take when created: the defaults, unless a test or a
   bench tool set another through cuda_hook_tuning_set (tests/cuda/cuda_hooks.h,
   which declares these two; production code never calls them). Set
   before the models it is for are created, on one thread. */
static cu_tuning g_hooked = cu_tuning_defaults();
const cu_tuning *cu_tuning_hooked(void) { return &g_hooked; }
extern "C" void cuda_hook_tuning_get(cu_tuning *t) { *t = g_hooked; }
extern "C" void cuda_hook_tuning_set(const cu_tuning *t) { g_hooked = *t; }

extern "C" int cuda_model_samples(const cuda_model *m) {
    if (!m->clusters) return 0; /* the device sampler runs on thread-block clusters */
    if (m->tune.sample >= 0) return m->tune.sample;
    return m->cfg.vocab_size >= CUDA_SAMPLE_MIN_VOCAB;
}

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" int cuda_describe(int gpu, char *out, size_t n) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, gpu);
    if (e != cudaSuccess) {
        snprintf(out, n, "cannot query CUDA device %d: %s", gpu, cudaGetErrorString(e));
        return -1;
    }
    int drv = 0, rt = 0, cur = -1;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    int len = snprintf(out, n, "%s, %.1f GiB, compute %d.%d, %d SMs, driver %d.%d, runtime %d.%d", p.name,
                       (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, p.multiProcessorCount, drv / 1000,
                       (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    /* the architecture the build's kernels run from there (where it is the
       current device: the model's, after cuda_model_create checked it) */
    int a = cudaGetDevice(&cur) == cudaSuccess && cur == gpu ? cu_code_arch(NULL, 0) : 0;
    if (len > 0 && (size_t)len < n && a > 0) snprintf(out + len, n - (size_t)len, ", kernels compute_%d", a);
    return 0;
}

extern "C" int cuda_device_info(int gpu, backend_device_info *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, gpu);
    if (e != cudaSuccess) return ds_err(err, errlen, "cannot query CUDA device %d: %s", gpu, cudaGetErrorString(e));
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->mem_total = p.totalGlobalMem;
    cudaDriverGetVersion(&out->driver_version);
    cudaRuntimeGetVersion(&out->runtime_version);
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    if ((e = cudaSetDevice(gpu)) != cudaSuccess) {
        cudaGetLastError();
        return ds_err(err, errlen, "cannot use CUDA device %d: %s", gpu, cudaGetErrorString(e));
    }
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
        out->mem_free = fr;
        out->mem_total = tot;
    } else {
        cudaGetLastError();
    }
    /* the same checks cuda_model_create makes before it loads anything */
    if (p.major * 10 + p.minor < 80)
        snprintf(out->kernels_note, sizeof out->kernels_note,
                 "compute capability %d.%d: the kernels need 8.0 or newer (bf16 tensor cores)", p.major, p.minor);
    else
        out->has_kernels = cu_code_arch(out->kernels_note, sizeof out->kernels_note) > 0;
    if (prev >= 0) cudaSetDevice(prev);
    return 0;
}

extern "C" int cuda_model_create(cuda_model **out, const model_desc *w, int gpu, char *err, size_t errlen) {
    *out = NULL;
    int ndev = cuda_device_count();
    if (ndev <= 0) return ds_err(err, errlen, "no CUDA device is visible");
    if (gpu < 0 || gpu >= ndev) return ds_err(err, errlen, "CUDA device %d does not exist (%d visible)", gpu, ndev);
    CK(cudaSetDevice(gpu));
    const int cc = cu_device_cc(gpu);
    if (cc < 80)
        return ds_err(err, errlen, "CUDA backend: device %d has compute capability %d.%d; it needs 8.0 or newer "
                      "(bf16 tensor cores, asynchronous copies)", gpu, cc / 10, cc % 10);
    if (cu_code_arch(err, errlen) < 0) return -1;
    if (w->cfg->n_heads % w->cfg->n_kv_heads || w->cfg->n_heads / w->cfg->n_kv_heads > ATT_MAX_G)
        return ds_err(err, errlen, "CUDA backend: %d query heads per kv head is not supported (at most %d)",
                      w->cfg->n_heads / w->cfg->n_kv_heads, ATT_MAX_G);
    if (w->cfg->head_dim % 4 || w->cfg->head_dim > ATT_MAX_HD)
        return ds_err(err, errlen, "CUDA backend: head_dim %d is not supported (a multiple of 4, at most %d)",
                      w->cfg->head_dim, ATT_MAX_HD);
    cuda_model *m = (cuda_model *)xcalloc(1, sizeof *m);
    m->cfg = *w->cfg;
    m->gpu = gpu;
    m->kv_bits = w->kv_bits ? w->kv_bits : 32;
    m->clusters = cu_hopper_code();
    m->tune = g_hooked;
    if (m->tune.omit)
        fprintf(stderr, "dspark: CUDA tuning omit=%d: those kernels are left out of every layer, so the results are "
                        "wrong (for timing only)\n", m->tune.omit);
    const model_config *c = &m->cfg;
    int H = c->hidden_size, hd = c->head_dim;
    int rc = cu_up_mat(&m->pool, &m->embed, w->embed, err, errlen);
    if (!rc) {
        if (w->lm_head == w->embed) m->lm_head = m->embed;
        else rc = cu_up_mat(&m->pool, &m->lm_head, w->lm_head, err, errlen);
    }
    if (!rc) rc = cu_up_f32(&m->pool, &m->final_norm, w->final_norm, (size_t)H, err, errlen);
    if (!rc) rc = cu_up_f32(&m->pool, &m->inv_freq, w->inv_freq, (size_t)hd / 2, err, errlen);
    m->layers = (dlayer *)xcalloc((size_t)c->n_layers, sizeof(dlayer));
    for (int l = 0; !rc && l < c->n_layers; l++)
        rc = cu_up_layer(&m->pool, &m->layers[l], &w->layers[l], c, l, "CUDA backend", err, errlen);
    if (rc) {
        cuda_model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* the matrices' tile-major copies (see dmat), decided by the first forward */
static int model_tiles(cuda_model *m, char *err, size_t errlen) {
    if (__atomic_load_n(&m->tiles_done, __ATOMIC_ACQUIRE)) return 0;
    const model_config *c = &m->cfg;
    int n = 0;
    dmat **mats = (dmat **)xmalloc(sizeof(dmat *) * (size_t)(CU_LAYER_MATS * c->n_layers + 1));
    mats[n++] = &m->lm_head;
    for (int l = 0; l < c->n_layers; l++, n += CU_LAYER_MATS) cu_layer_mats(&m->layers[l], mats + n);
    int rc = cu_tile_once(&m->tiles_done, &m->pool, mats, n, err, errlen);
    free(mats);
    return rc;
}

const dmat *cu_model_embed(const cuda_model *m) { return &m->embed; }
const dmat *cu_model_lm_head(const cuda_model *m) { return &m->lm_head; }
int cu_model_gpu(const cuda_model *m) { return m->gpu; }
const cu_tuning *cu_model_tune(const cuda_model *m) { return &m->tune; }

extern "C" void cuda_model_free(cuda_model *m) {
    if (!m) return;
    cu_pool_free(&m->pool);
    free(m->layers);
    free(m);
}

static int ensure_pinned(cuda_ctx *x, size_t floats, char *err, size_t errlen);

/* Rows per prefill chunk on a GPU, when the caller's max_batch holds a
   cuBLAS group: at least the tuning's prefill_rows (CUDA_PREFILL_ROWS; a
   value below max_batch leaves max_batch). A wider chunk gives the
   prefill attention more blocks than the 1.45 waves of a 256-row chunk at
   4k positions; measured on an H200 with a Qwen3-8B (docs/history/benchmarks-log.md,
   "Where a prefill's time goes"): 4k prefill 9,480-9,497 -> 10,762-10,785
   tok/s from 256 to 1024 rows (11,071 at 2048 in another run), 16k 6,000 ->
   6,199. A row's bits do not depend on its chunk
   (cuBLAS groups and attention spans start at fixed rows and positions),
   so this changes no result. Costs about 380 KB of scratch a row for that
   model; the logits buffer keeps max_batch rows. When the wider scratch
   cannot be allocated, the context falls back to max_batch rows. */
/* whether a context of max_batch rows runs cuBLAS groups (bf16 weights, or
   quantized ones dequantized to bf16 for them: cuda_gemm.cu) */
static int takes_gemm(const cuda_model *m, int max_batch) {
    const int G = m->tune.gemm_rows;
    const ds_dtype dt = m->layers[0].wqkv.dt;
    return G > 0 && max_batch >= G && (dt == DT_BF16 || dtype_is_quant(dt));
}

/* elements of the largest quantized layer matrix: the bf16 weight scratch
   of a context's cuBLAS groups (cuda_gemm.cu; 0 for a float model). The
   LM head never takes the groups (a prefill asks for its last rows only,
   which the decode kernels run), so it is not counted. For a Qwen3-8B,
   gate or up, 12288 x 4096: 96 MiB a context. */
static size_t quant_scratch(const cuda_model *m) {
    size_t most = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        dlayer *L = &m->layers[l];
        const dmat *ms[CU_LAYER_MATS] = {&L->wqkv, &L->wo, &L->wg, &L->wu, &L->wd};
        for (int i = 0; i < CU_LAYER_MATS; i++)
            if (dtype_is_quant(ms[i]->dt) && (size_t)ms[i]->N * (size_t)ms[i]->K > most)
                most = (size_t)ms[i]->N * (size_t)ms[i]->K;
    }
    return most;
}

/* bytes one position of a context's KV cache costs over all layers, K and
   V (kv_bytes_per_pos's figure: elements of kv_bits, and a scale a head
   at 8 bits). Every layer's cache holds the whole context, sliding-window
   layers' too: the attention kernels skip the chunks before a row's
   window (cuda_attn.cu), so the rows there are kept but never read. The
   CPU instead gives such rows' pages back (kv_set_windows); on the GPU a
   ring buffer a window layer would save that memory, at the price of
   positions that wrap inside the kernels' chunks, the prefix copies and
   the block cache's rows, so it is not done. */
static size_t kv_pos_bytes(const cuda_model *m) {
    const model_config *c = &m->cfg;
    const size_t per_head = (size_t)c->head_dim * (size_t)(m->kv_bits / 8) + (m->kv_bits == 8 ? sizeof(float) : 0);
    return (size_t)2 * (size_t)c->n_layers * (size_t)c->n_kv_heads * per_head;
}

/* layer l of x's cache as the kernels take it */
static cu_kv ctx_kv(const cuda_ctx *x, int l) {
    const model_config *c = &x->m->cfg;
    const size_t per = (size_t)c->n_kv_heads * (size_t)x->cap; /* rows of K (or V) a layer */
    const size_t eb = (size_t)c->head_dim * (size_t)(x->m->kv_bits / 8);
    char *k = (char *)x->kv + (size_t)l * 2 * per * eb;
    cu_kv kv = {k, k + per * eb, NULL, NULL, x->m->kv_bits};
    if (x->kv_sc) kv.ks = x->kv_sc + (size_t)l * 2 * per, kv.vs = kv.ks + per;
    return kv;
}

/* a context with activation scratch for rows >= max_batch rows (a whole
   number of cuBLAS groups when more) */
static int ctx_create(cuda_ctx **out, cuda_model *m, int n_ctx, int max_batch, int rows, char *err,
                      size_t errlen) {
    const model_config *c = &m->cfg;
    const int G = m->tune.gemm_rows, gemm = takes_gemm(m, max_batch);
    size_t B = (size_t)max_batch, R = (size_t)rows, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    cuda_ctx *x = (cuda_ctx *)xcalloc(1, sizeof *x);
    x->m = m;
    x->cap = n_ctx;
    x->max_batch = max_batch;
    x->rows = (int)R;
    size_t kvf = (size_t)c->n_layers * 2 * KD * (size_t)n_ctx, kvs = (size_t)c->n_layers * 2 * c->n_kv_heads * n_ctx;
    cudaError_t e = cudaMalloc((void **)&x->kv, kvf * (size_t)(m->kv_bits / 8));
    if (e == cudaSuccess && m->kv_bits == 8) e = cudaMalloc((void **)&x->kv_sc, sizeof(float) * kvs);
    if (e != cudaSuccess) {
        cudaFree(x->kv);
        free(x);
        return ds_err(err, errlen, "CUDA: cannot allocate the %.2f GiB KV cache (%d bits) for %d positions: %s%s",
                      (double)kv_pos_bytes(m) * n_ctx / (1 << 30), m->kv_bits, n_ctx, cudaGetErrorString(e),
                      cu_tiles_hint());
    }
    float **bufs[] = {&x->x, &x->xb, &x->q, &x->att, &x->qkv, &x->gate, &x->logits, &x->part, &x->d_taps};
    size_t sizes[] = {R * H, R * H, R * QD, R * QD, R * (QD + 2 * KD), R * cu_layer_gate_floats(m->layers, c->n_layers, (int)I),
                      B * (size_t)c->vocab_size,
                      cu_attn_part_floats(c->n_heads, c->head_dim, n_ctx), (size_t)GRAPH_TAPS * GRAPH_ROWS * H};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        e = cudaMalloc((void **)bufs[i], sizeof(float) * sizes[i]);
        if (e != cudaSuccess) {
            cuda_ctx_free(x);
            return ds_err(err, errlen, "CUDA: cannot allocate scratch: %s%s", cudaGetErrorString(e), cu_tiles_hint());
        }
    }
    if (cudaMalloc((void **)&x->tok, sizeof(int) * R) != cudaSuccess ||
        cudaMalloc((void **)&x->pos, sizeof(int) * R) != cudaSuccess ||
        cudaMalloc((void **)&x->d_len, sizeof(int)) != cudaSuccess ||
        cudaMalloc((void **)&x->att_c, sizeof(uint32_t) * CU_CUT_ROWS * QD) != cudaSuccess ||
        cudaMalloc((void **)&x->gate_c, sizeof(uint32_t) * CU_CUT_ROWS * I) != cudaSuccess ||
        cudaMalloc((void **)&x->norm_c, sizeof(uint32_t) * CU_CUT_ROWS * H) != cudaSuccess ||
        cudaMalloc((void **)&x->norm_r, sizeof(float) * CU_CUT_ROWS) != cudaSuccess ||
        cudaMalloc((void **)&x->qkv_cnt, sizeof(int) * cu_qkv_tail_cnt(c->n_heads, c->n_kv_heads)) != cudaSuccess ||
        cudaMemset(x->qkv_cnt, 0, sizeof(int) * cu_qkv_tail_cnt(c->n_heads, c->n_kv_heads)) != cudaSuccess ||
        cudaMalloc((void **)&x->d_ids, sizeof(int) * R) != cudaSuccess ||
        cudaMallocHost((void **)&x->h_ids, sizeof(int) * R) != cudaSuccess ||
        cudaMallocHost((void **)&x->h_samp, sizeof(cu_sample_args)) != cudaSuccess ||
        cudaMalloc((void **)&x->d_samp, sizeof(cu_sample_args)) != cudaSuccess ||
        cudaMalloc((void **)&x->escr, sizeof(float) * (B < MODEL_SAMPLE_ROWS ? B : MODEL_SAMPLE_ROWS) *
                                          cu_sample_stride(c->vocab_size)) != cudaSuccess ||
        cudaMallocHost((void **)&x->h_in, sizeof(int) * (2 * R + 1)) != cudaSuccess ||
        cudaMallocHost((void **)&x->h_ring, sizeof(int) * 2) != cudaSuccess ||
        cudaEventCreateWithFlags(&x->chain_ev[0], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&x->chain_ev[1], cudaEventDisableTiming) != cudaSuccess ||
        cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking) != cudaSuccess) {
        cuda_ctx_free(x);
        return ds_err(err, errlen, "CUDA: cannot allocate scratch%s", cu_tiles_hint());
    }
    if (cu_am_create(&x->am, (int)B, c->vocab_size, err, errlen) != 0) {
        cuda_ctx_free(x);
        return -1;
    }
    size_t lf = (size_t)(GRAPH_ROWS > max_batch ? GRAPH_ROWS : max_batch) * (size_t)c->vocab_size;
    if (ensure_pinned(x, lf, err, errlen) != 0) {
        cuda_ctx_free(x);
        return -1;
    }
    x->chunk = x->small_chunk = max_batch;
    if (gemm) {
        x->chunk = (int)R / G * G;
        x->small_chunk = max_batch / G * G;
        size_t kmax = H > I ? H : I, nmax = QD + 2 * KD > I ? QD + 2 * KD : I;
        if (QD > kmax) kmax = QD;
        if (H > nmax) nmax = H;
        if (cu_gemm_create(&x->gemm, G, x->chunk, (int)kmax, (int)nmax, quant_scratch(m), err, errlen) != 0) {
            cuda_ctx_free(x);
            return -1;
        }
    }
    /* the warpgroup-mma prefill attention's scratch (cu_attn_wg_floats:
       four times a layer's share of the cache), made here rather than at
       the first prefill group, which may be inside a graph's capture, and
       only where the device keeps room after it (cu_room_for, as for the
       weights' tile-major copies); without it the context runs k_attn_tc
       (the same results to TF32 rounding) */
    const size_t wgb = sizeof(float) * cu_attn_wg_floats(c->n_kv_heads, c->head_dim, n_ctx);
    if (gemm && cu_attn_wg_ready(&m->tune, c->head_dim) && cu_room_for(wgb) &&
        cudaMalloc((void **)&x->wg_img, wgb) != cudaSuccess) {
        cudaGetLastError(); /* (not sticky) */
        x->wg_img = NULL;
    }
    if (cu_moe_buf_create(&x->moe, c, m->layers, c->n_layers, (int)R, err, errlen) != 0) {
        cuda_ctx_free(x);
        return -1;
    }
    /* an MoE layer reads its experts' row counts back on the host
       (cuda_moe.cuh), which no graph can hold: such a model's forwards run
       kernel by kernel (and it has no chained decoding: cuda_chain_ok) */
    x->use_graphs = m->tune.graphs && !x->moe;
    const char *tr = getenv("DSPARK_CUDA_TRACE");
    if (tr && *tr && strcmp(tr, "0") && strcmp(tr, "1"))
        fprintf(stderr, "dspark: DSPARK_CUDA_TRACE=%s: not 0 or 1; no trace\n", tr);
    if (tr && !strcmp(tr, "1")) {
        x->use_graphs = 0;
        x->ev = (cudaEvent_t *)xcalloc(TRACE_EVENTS, sizeof(cudaEvent_t));
        x->ev_op = (int *)xcalloc(TRACE_EVENTS, sizeof(int));
        for (int i = 0; i < TRACE_EVENTS; i++) cudaEventCreate(&x->ev[i]);
    }
    *out = x;
    return 0;
}

extern "C" size_t cuda_ctx_bytes(const cuda_model *m, int n_ctx, int max_batch) {
    const model_config *c = &m->cfg;
    const int G = m->tune.gemm_rows, gemm = takes_gemm(m, max_batch);
    const int rows = gemm && m->tune.prefill_rows / G * G > max_batch ? m->tune.prefill_rows / G * G : max_batch;
    size_t B = (size_t)max_batch, R = (size_t)rows, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    size_t f = R * H * 2 + R * QD * 2 + R * (QD + 2 * KD) + R * cu_layer_gate_floats(m->layers, c->n_layers, (int)I) +
               B * (size_t)c->vocab_size + cu_attn_part_floats(c->n_heads, c->head_dim, n_ctx) +
               (size_t)GRAPH_TAPS * GRAPH_ROWS * H +
               (size_t)(B < MODEL_SAMPLE_ROWS ? B : MODEL_SAMPLE_ROWS) * cu_sample_stride(c->vocab_size);
    if (gemm && cu_attn_wg_ready(&m->tune, c->head_dim)) f += cu_attn_wg_floats(c->n_kv_heads, c->head_dim, n_ctx);
    /* (the KV cache whole at every layer: the GPU keeps a sliding-window
       layer's positions before its window too, see kv_pos_bytes, so memfit
       counts those layers at full length here) */
    return kv_pos_bytes(m) * (size_t)n_ctx /* the KV cache */ + sizeof(float) * f +
           sizeof(uint32_t) * CU_CUT_ROWS * (QD + I + H) + cu_moe_buf_bytes(c, m->layers, c->n_layers, rows);
}

extern "C" int cuda_mem_info(const cuda_model *m, size_t *free_b, size_t *total_b) {
    if (cudaSetDevice(m->gpu) != cudaSuccess || cudaMemGetInfo(free_b, total_b) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}

extern "C" int cuda_ctx_create(cuda_ctx **out, cuda_model *m, int n_ctx, int max_batch, char *err, size_t errlen) {
    *out = NULL;
    CK(cudaSetDevice(m->gpu));
    const int G = m->tune.gemm_rows, rows = G > 0 ? m->tune.prefill_rows / G * G : 0;
    if (takes_gemm(m, max_batch) && rows > max_batch && ctx_create(out, m, n_ctx, max_batch, rows, err, errlen) == 0)
        return 0;
    cudaGetLastError(); /* (a failed allocation above is not sticky) */
    return ctx_create(out, m, n_ctx, max_batch, max_batch, err, errlen);
}

extern "C" void cuda_ctx_free(cuda_ctx *x) {
    if (!x) return;
    cudaFree(x->kv);
    cudaFree(x->kv_sc);
    float *bufs[] = {x->x, x->xb, x->q, x->att, x->qkv, x->gate, x->logits, x->part, x->d_taps, x->d_wide, x->wg_img};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    cudaFree(x->tok);
    cudaFree(x->pos);
    cudaFree(x->d_len);
    cudaFree(x->qkv_cnt);
    cudaFree(x->att_c);
    cudaFree(x->gate_c);
    cudaFree(x->norm_c);
    cudaFree(x->norm_r);
    cudaFree(x->d_ids);
    cu_am_free(&x->am);
    if (x->h_ids) cudaFreeHost(x->h_ids);
    if (x->h_samp) cudaFreeHost(x->h_samp);
    cudaFree(x->d_samp);
    cudaFree(x->escr);
    for (int i = 0; i < x->n_graphs; i++)
        if (x->graphs[i].g) cudaGraphExecDestroy(x->graphs[i].g);
    free(x->graphs);
    for (int a = 0; a < 2; a++) {
        if (x->chain_g[a]) cudaGraphExecDestroy(x->chain_g[a]);
        if (x->chain_ev[a]) cudaEventDestroy(x->chain_ev[a]);
    }
    if (x->h_ring) cudaFreeHost(x->h_ring);
    cu_gemm_free(x->gemm);
    cu_moe_buf_free(x->moe);
    if (x->st) cudaStreamDestroy(x->st);
    if (x->h_pinned) cudaFreeHost(x->h_pinned);
    if (x->h_in) cudaFreeHost(x->h_in);
    if (x->ev)
        for (int i = 0; i < TRACE_EVENTS; i++) cudaEventDestroy(x->ev[i]);
    free(x->ev);
    free(x->ev_op);
    free(x);
}

/* Ends a chain of decode steps: waits for the steps in flight and drops
   from the cache those whose ids were not read. */
static void chain_drain(cuda_ctx *x) {
    if (x->chain_launched == x->chain_done) return;
    cudaStreamSynchronize(x->st); /* (an error here shows at the next forward's) */
    x->len -= (int)(x->chain_launched - x->chain_done);
    x->chain_launched = x->chain_done = 0;
}

extern "C" int cuda_ctx_len(const cuda_ctx *x) { return x->len - (int)(x->chain_launched - x->chain_done); }
extern "C" int cuda_ctx_capacity(const cuda_ctx *x) { return x->cap; }
extern "C" void cuda_ctx_truncate(cuda_ctx *x, int len) {
    chain_drain(x);
    if (len < x->len) x->len = len < 0 ? 0 : len;
}

/* The cache is [layer][2][nkv][cap][hd] (scales [layer][2][nkv][cap]): the
   first n rows of each block carry a prefix between two contexts of any
   capacities (cu_copy_prefix_rows). */
extern "C" int cuda_ctx_copy(cuda_ctx *dst, cuda_ctx *src, int n, char *err, size_t errlen) {
    chain_drain(src);
    chain_drain(dst);
    if (dst == src || dst->m != src->m || n < 0 || n > src->len || n > dst->cap)
        return ds_err(err, errlen, "cache copy: %d positions do not fit (source holds %d, destination takes %d)", n,
                      src->len, dst->cap);
    const model_config *c = &src->m->cfg;
    const size_t blocks = (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads;
    const size_t row = (size_t)c->head_dim * (size_t)(src->m->kv_bits / 8);
    CK(cudaSetDevice(src->m->gpu));
    if (cu_copy_prefix_rows(dst->kv, dst->cap, dst->st, src->kv, src->cap, src->st, row, n, blocks, err, errlen) ||
        (src->kv_sc && cu_copy_prefix_rows(dst->kv_sc, dst->cap, dst->st, src->kv_sc, src->cap, src->st,
                                           sizeof(float), n, blocks, err, errlen)))
        return -1;
    dst->len = n;
    return 0;
}

extern "C" size_t cuda_ctx_pos_bytes(const cuda_model *m) { return kv_pos_bytes(m); }

/* rows [pos0, pos0+n) of the cache and host memory as kv_save_rows lays
   them out: the elements of every block, then (8 bits) the scales */
static int ctx_rows_host(cuda_ctx *x, int pos0, int n, void *host, int to_host, char *err, size_t errlen) {
    const model_config *c = &x->m->cfg;
    const size_t blocks = (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads;
    const size_t row = (size_t)c->head_dim * (size_t)(x->m->kv_bits / 8);
    CK(cudaSetDevice(x->m->gpu));
    if (cu_rows_host(x->kv, x->cap, x->st, host, row, pos0, n, blocks, to_host, err, errlen)) return -1;
    if (x->kv_sc && cu_rows_host(x->kv_sc, x->cap, x->st, (char *)host + blocks * (size_t)n * row, sizeof(float), pos0,
                                 n, blocks, to_host, err, errlen))
        return -1;
    return 0;
}

extern "C" int cuda_ctx_save(cuda_ctx *x, int pos0, int n, void *host, char *err, size_t errlen) {
    chain_drain(x);
    if (pos0 < 0 || n < 0 || pos0 + n > x->len)
        return ds_err(err, errlen, "cache save: positions %d..%d (the context holds %d)", pos0, pos0 + n, x->len);
    return ctx_rows_host(x, pos0, n, host, 1, err, errlen);
}

extern "C" int cuda_ctx_load(cuda_ctx *x, int pos0, int n, const void *host, char *err, size_t errlen) {
    chain_drain(x);
    if (pos0 < 0 || n < 0 || pos0 > x->len || n > x->cap - pos0)
        return ds_err(err, errlen, "cache load: positions %d..%d (the context holds %d, takes %d)", pos0, pos0 + n,
                      x->len, x->cap);
    x->len = pos0;
    if (ctx_rows_host(x, pos0, n, (void *)host, 0, err, errlen)) return -1;
    x->len = pos0 + n;
    return 0;
}

static int ensure_pinned(cuda_ctx *x, size_t floats, char *err, size_t errlen) {
    if (x->pinned_floats >= floats) return 0;
    if (x->h_pinned) cudaFreeHost(x->h_pinned);
    x->h_pinned = NULL;
    x->pinned_floats = 0;
    CK(cudaMallocHost((void **)&x->h_pinned, sizeof(float) * floats));
    x->pinned_floats = floats;
    return 0;
}

/* Where a forward's taps go on the device: [GRAPH_TAPS][rows][hidden] from
   p (p NULL: to the caller's buffer) */
struct tap_dst {
    float *p;
    int rows;
};

/* Taps go straight into the caller's (pageable) buffer, the chunk's stream
   synchronisation completing them; with dev.p (a tapped graph, or taps that
   stay on the device) there. */
static void copy_taps(cuda_ctx *x, const model_batch *b, int layer, int row0, int M, tap_dst dev) {
    int H = x->m->cfg.hidden_size;
    for (int t = 0; t < b->n_taps; t++) {
        if (b->tap_layers[t] != layer) continue;
        if (dev.p) {
            cudaMemcpyAsync(dev.p + ((size_t)t * dev.rows + (size_t)row0) * H, x->x, sizeof(float) * (size_t)M * H,
                            cudaMemcpyDeviceToDevice, x->st);
            continue;
        }
        float *dst = b->taps + ((size_t)t * (size_t)b->n + (size_t)row0) * (size_t)H;
        cudaMemcpyAsync(dst, x->x, sizeof(float) * (size_t)M * H, cudaMemcpyDeviceToHost, x->st);
    }
}

/* 1 when b's taps can come from a tapped graph: few enough, and the set the
   tapped graphs hold (the first tapped batch fixes it) */
static int taps_graphable(cuda_ctx *x, const model_batch *b) {
    if (b->n_taps > GRAPH_TAPS) return 0;
    if (!x->n_tap_layers) {
        memcpy(x->tap_layers, b->tap_layers, sizeof(int) * (size_t)b->n_taps);
        x->n_tap_layers = b->n_taps;
    }
    return x->n_tap_layers == b->n_taps && !memcmp(x->tap_layers, b->tap_layers, sizeof(int) * (size_t)b->n_taps);
}

enum { OP_IN, OP_EMBED, OP_QKV, OP_POST, OP_ATTN, OP_O, OP_GU, OP_DOWN, OP_HEAD, OP_OUT, OP_N };
static const char *const op_names[OP_N] = {"upload", "embed", "qkv", "qk-norm+rope", "attention",
                                           "o+res", "gate/up", "down+res", "lm head", "logits copy"};

/* trace: an event after each op, labelled with the op it ends */
static void mark(cuda_ctx *x, int op) {
    if (!x->ev || x->n_ev >= TRACE_EVENTS) return;
    x->ev_op[x->n_ev] = op;
    cudaEventRecord(x->ev[x->n_ev++], x->st);
}

/* cu_layer's marks: its ops are OP_QKV .. OP_DOWN */
static_assert(OP_POST - OP_QKV == CU_LOP_POST && OP_ATTN - OP_QKV == CU_LOP_ATTN && OP_O - OP_QKV == CU_LOP_O &&
                  OP_GU - OP_QKV == CU_LOP_GU && OP_DOWN - OP_QKV == CU_LOP_DOWN,
              "a layer's ops in the trace's order");
static void layer_mark(void *x, int op) { mark((cuda_ctx *)x, OP_QKV + op); }

static void trace_report(cuda_ctx *x, int M) {
    double us[OP_N] = {0}, tot = 0;
    for (int i = 1; i < x->n_ev; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, x->ev[i - 1], x->ev[i]);
        us[x->ev_op[i]] += 1e3 * ms;
        tot += 1e3 * ms;
    }
    fprintf(stderr, "cuda trace: %d rows, %.0f us:", M, tot);
    for (int i = 0; i < OP_N; i++)
        if (us[i] > 0) fprintf(stderr, " %s %.0f", op_names[i], us[i]);
    fprintf(stderr, "\n");
    x->n_ev = 0;
}

/* launches on the context's stream under its model's tuning */
static cu_go ctx_go(const cuda_ctx *x) { return cu_go_on(x->st, &x->m->tune); }

/* what a forward's logits rows give back: the rows, their argmax, both,
   or the device sampler's answers (model_batch.smp); OUT_CHAIN (with
   OUT_IDS, one row): a chained decode step, whose input is the previous
   step's argmax on the device (cu_chain_next) and whose argmax stays
   there (the host copies it out: chain_launch) */
enum { OUT_LOGITS = 1, OUT_IDS = 2, OUT_SAMPLE = 4, OUT_CHAIN = 8 };

/* cu_norm_apart with this context's scratch */
static cu_cut norm_apart(cuda_ctx *x, cu_go st, int site, const float *in, int M, const dmat *W, const float *gn) {
    return cu_norm_apart(st, x->gemm, x->norm_c, x->norm_r, site, in, M, W, gn, x->m->cfg.rms_norm_eps);
}

/* logits[n] of the final-normed rows h[n] */
static void lm_head(cuda_ctx *x, cu_go st, const float *h, int n) {
    const cuda_model *m = x->m;
    const model_config *c = &m->cfg;
    const cu_cut pre = norm_apart(x, st, CU_NS_LM, h, n, &m->lm_head, m->final_norm);
    if (pre.in) {
        cu_matmul_cut(st, x->logits, pre.in, n, &m->lm_head, pre.r);
    } else if (cu_fuses_norm(st.t, &m->lm_head)) {
        cu_matmul_norm(st, x->logits, h, n, &m->lm_head, NULL, m->final_norm, c->rms_norm_eps);
    } else {
        cu_rmsnorm(st, x->xb, h, m->final_norm, n, c->hidden_size, c->rms_norm_eps);
        cu_matmul(st, x->logits, x->xb, n, &m->lm_head, NULL);
    }
    /* a soft-capped network (Gemma's final_logit_softcapping): the rows
       capped in place before anything reads them, so the argmax, the
       device sampler and the rows copied back all see the CPU's logits
       (ties that the cap's rounding makes included) */
    if (c->final_softcap > 0) cu_softcap(st, x->logits, c->final_softcap, (size_t)n * (size_t)c->vocab_size);
}

/* the layers' view of this context's scratch and inputs */
static cu_layer_rows layer_rows(cuda_ctx *x) {
    cu_layer_rows r = {};
    r.cfg = &x->m->cfg;
    r.x = x->x, r.xb = x->xb, r.q = x->q, r.qkv = x->qkv, r.att = x->att, r.gate = x->gate, r.part = x->part;
    r.att_c = x->att_c, r.gate_c = x->gate_c, r.norm_c = x->norm_c, r.norm_r = x->norm_r;
    r.qkv_cnt = x->qkv_cnt;
    r.pos = x->pos, r.d_len = x->d_len, r.inv_freq = x->m->inv_freq, r.cap = x->cap;
    r.gemm = x->gemm, r.wg_img = x->wg_img, r.moe = x->moe;
    return r;
}

/* Enqueues one chunk of M rows whose ids, positions and cache length are in
   h_in (pinned): the uploads, every layer, and, when n_sel > 0, the final
   norm and LM head for the chunk's last n_sel rows with the logits copied
   to h_pinned (out & OUT_LOGITS) and their argmax (OUT_IDS) or samples
   (OUT_SAMPLE, with the arguments in h_samp) to h_ids. b
   (NULL: no taps) names the layers to tap, copied to the host or, with
   dev.p (a tapped graph's capture, or taps_resident), there from row row0
   on. spread: the decode attention's launch shape (cu_attn_spread_for). */
static void enqueue_chunk(cuda_ctx *x, int M, int n_sel, int out, const model_batch *b, int row0, tap_dst dev,
                          int spread) {
    cuda_model *m = x->m;
    const model_config *c = &m->cfg;
    const int H = c->hidden_size;
    cu_go st = ctx_go(x);
    st.late = (out & OUT_CHAIN) != 0; /* the chained step's kernels trigger late (cu_go's late) */
    int B = x->rows;
    if (out & OUT_CHAIN) {
        cu_chain_next(st, x->tok, x->pos, x->d_len, x->d_ids);
    } else {
        cudaMemcpyAsync(x->tok, x->h_in, sizeof(int) * M, cudaMemcpyHostToDevice, st);
        cudaMemcpyAsync(x->pos, x->h_in + B, sizeof(int) * M, cudaMemcpyHostToDevice, st);
        cudaMemcpyAsync(x->d_len, x->h_in + 2 * B, sizeof(int), cudaMemcpyHostToDevice, st);
    }
    if (out == OUT_SAMPLE) cudaMemcpyAsync(x->d_samp, x->h_samp, sizeof(cu_sample_args), cudaMemcpyHostToDevice, st);
    mark(x, OP_IN);
    cu_embed(st, x->x, &m->embed, x->tok, M);
    if (c->embed_scale > 0) cu_scale(st, x->x, c->embed_scale, (size_t)M * H); /* (Gemma's sqrt(H), in f32) */
    mark(x, OP_EMBED);
    if (b) copy_taps(x, b, -1, row0, M, dev);
    const cu_layer_rows rows = layer_rows(x);
    const cu_layer_how how = {spread, m->tune.omit, layer_mark, x}; /* (omit: for timing only, cuda_tuning.h) */
    for (int l = 0; l < c->n_layers; l++) {
        cu_layer(st, &rows, &m->layers[l], ctx_kv(x, l), M, &how);
        if (b) copy_taps(x, b, l, row0, M, dev);
    }
    if (n_sel) {
        int V = c->vocab_size;
        lm_head(x, st, x->x + (size_t)(M - n_sel) * H, n_sel);
        mark(x, OP_HEAD);
        if (out & (OUT_IDS | OUT_SAMPLE)) {
            if (out & OUT_IDS) cu_argmax(st, x->d_ids, x->logits, n_sel, V, &x->am);
            else cu_sample_rows(st, x->d_ids, x->logits, x->escr, n_sel, V, x->d_samp, NULL, 0);
            if (!(out & OUT_CHAIN))
                cudaMemcpyAsync(x->h_ids, x->d_ids, sizeof(int) * (size_t)n_sel, cudaMemcpyDeviceToHost, st);
        }
        if (out & OUT_LOGITS)
            cudaMemcpyAsync(x->h_pinned, x->logits, sizeof(float) * (size_t)n_sel * V, cudaMemcpyDeviceToHost, st);
        mark(x, OP_OUT);
    }
}

/* The graph for (spread, taps or not, M, n_sel), captured on first use; NULL when
   capture fails (graphs are then switched off for this context). tb: the
   batch whose tap layers a tapped graph copies (NULL: untapped). */
static cudaGraphExec_t capture(cuda_ctx *x, cudaGraphExec_t *g, int M, int n_sel, int out, const model_batch *tb,
                               int spread) {
    if (*g) return *g;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(x->st, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) goto fail;
    enqueue_chunk(x, M, n_sel, out, tb, 0, tap_dst{x->d_taps, GRAPH_ROWS}, spread);
    if ((e = cudaStreamEndCapture(x->st, &graph)) != cudaSuccess || !graph) goto fail;
    if ((e = cudaGraphInstantiate(g, graph, 0)) != cudaSuccess) goto fail;
    cudaGraphDestroy(graph);
    return *g;
fail:
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    { /* the results stay right, only slower: said once, so that a timing knows */
        static int said = 0;
        if (!said) {
            said = 1;
            fprintf(stderr, "dspark: CUDA graph capture failed (%s); this context runs kernel by kernel\n",
                    e != cudaSuccess ? cudaGetErrorString(e) : "no graph");
        }
    }
    *g = NULL;
    x->use_graphs = 0;
    return NULL;
}
static cudaGraphExec_t graph_for(cuda_ctx *x, int M, int n_sel, int out, const model_batch *tb, int spread) {
    const int tapped = tb != NULL;
    for (int i = 0; i < x->n_graphs; i++) {
        graph_entry *e = &x->graphs[i];
        if (e->spread == spread && e->tapped == tapped && e->out == out && e->M == M && e->n_sel == n_sel)
            return capture(x, &e->g, M, n_sel, out, tb, spread);
    }
    if (x->n_graphs == x->cap_graphs) {
        x->cap_graphs = x->cap_graphs ? 2 * x->cap_graphs : 16;
        x->graphs = (graph_entry *)xrealloc(x->graphs, sizeof(graph_entry) * (size_t)x->cap_graphs);
    }
    graph_entry *e = &x->graphs[x->n_graphs++];
    *e = graph_entry{spread, tapped, out, M, n_sel, NULL};
    return capture(x, &e->g, M, n_sel, out, tb, spread);
}

/* The chunk's logits rows: which of them the batch asked for, as a count of
   trailing rows (graphs and the gather-free path need them at the end); -1
   when the selection is not a contiguous tail of the chunk. */
static int tail_rows(const model_batch *b, int row0, int M, int next_logit, int *n_sel) {
    int n = 0;
    for (int i = next_logit; i < b->n_logits; i++) {
        int r = b->logit_rows ? b->logit_rows[i] : b->n - b->n_logits + i;
        if (r >= row0 + M) break;
        n++;
    }
    *n_sel = n;
    for (int i = 0; i < n; i++) {
        int r = b->logit_rows ? b->logit_rows[next_logit + i] : b->n - b->n_logits + next_logit + i;
        if (r != row0 + M - n + i) return -1;
    }
    return 0;
}

static int forward_chunk(cuda_ctx *x, const model_batch *b, int row0, int M, int *next_logit, char *err,
                         size_t errlen) {
    const model_config *c = &x->m->cfg;
    int B = x->rows, V = c->vocab_size, H = c->hidden_size;
    for (int i = 0; i < M; i++) {
        x->h_in[i] = b->tokens[row0 + i];
        x->h_in[B + i] = b->pos ? b->pos[row0 + i] : x->len + i;
    }
    x->h_in[2 * B] = x->len;
    const int spread = cu_attn_spread_for(&x->m->tune, x->len); /* the decode attention's shape for this cache length */
    /* taps left on the device: a verify's in d_taps, wider batches' in d_wide */
    const int wide = b->taps_resident && b->n > GRAPH_ROWS;
    tap_dst dev = {NULL, 0};
    if (b->taps_resident) dev = wide ? tap_dst{x->d_wide, x->wide_rows} : tap_dst{x->d_taps, GRAPH_ROWS};
    int n_sel;
    if (tail_rows(b, row0, M, *next_logit, &n_sel) != 0) {
        /* rare: logits of rows that are not the chunk's tail; run the layers,
           then the head row by row (each row alone gives the same bits) */
        enqueue_chunk(x, M, 0, 0, b, row0, dev, spread);
        CK(cudaStreamSynchronize(x->st));
        if (cu_gemm_check(x->gemm, err, errlen) || cu_moe_check(x->moe, err, errlen)) return -1;
        for (int i = 0; i < n_sel; i++) {
            int r = b->logit_rows[*next_logit + i] - row0;
            lm_head(x, ctx_go(x), x->x + (size_t)r * H, 1);
            if (b->argmax) {
                cu_argmax(ctx_go(x), x->d_ids, x->logits, 1, V, &x->am);
                CK(cudaMemcpyAsync(b->argmax + *next_logit + i, x->d_ids, sizeof(int), cudaMemcpyDeviceToHost,
                                   x->st));
            }
            if (b->logits)
                CK(cudaMemcpyAsync(b->logits + (size_t)(*next_logit + i) * V, x->logits, sizeof(float) * V,
                                   cudaMemcpyDeviceToHost, x->st));
        }
        CK(cudaStreamSynchronize(x->st));
        CK_LAUNCH();
        *next_logit += n_sel;
        x->len += M;
        return 0;
    }
    int out = b->smp ? OUT_SAMPLE : (b->logits ? OUT_LOGITS : 0) | (b->argmax ? OUT_IDS : 0);
    if (b->smp && n_sel) {
        cu_sample_args_set(x->h_samp, sampler_get_params(b->smp), b->draft, b->u, b->n_logits);
        x->h_samp->row0 = *next_logit;
        if (b->draft_q) {
            x->h_samp->q = b->draft_q->e;
            x->h_samp->qtot = b->draft_q->tot;
        }
    }
    int tapped = b->n_taps > 0;
    /* (a tapped graph leaves its taps at row 0 of d_taps) */
    cudaGraphExec_t g = x->use_graphs && M <= GRAPH_ROWS &&
                                (!tapped || (taps_graphable(x, b) && (!b->taps_resident || (row0 == 0 && !wide))))
                            ? graph_for(x, M, n_sel, out, tapped ? b : NULL, spread)
                            : NULL;
    if (g) {
        CK(cudaGraphLaunch(g, x->st));
        for (int t = 0; !b->taps_resident && t < b->n_taps; t++) /* the replay's taps to the caller */
            CK(cudaMemcpyAsync(b->taps + ((size_t)t * (size_t)b->n + (size_t)row0) * (size_t)H,
                               x->d_taps + (size_t)t * GRAPH_ROWS * H, sizeof(float) * (size_t)M * H,
                               cudaMemcpyDeviceToHost, x->st));
    } else {
        enqueue_chunk(x, M, n_sel, out, tapped ? b : NULL, row0, dev, spread);
    }
    CK_LAUNCH();
    CK(cudaStreamSynchronize(x->st));
    if (cu_gemm_check(x->gemm, err, errlen) || cu_moe_check(x->moe, err, errlen)) return -1;
    if (x->ev) trace_report(x, M);
    if (n_sel && b->logits)
        memcpy(b->logits + (size_t)*next_logit * V, x->h_pinned, sizeof(float) * (size_t)n_sel * V);
    if (n_sel && b->argmax) memcpy(b->argmax + *next_logit, x->h_ids, sizeof(int) * (size_t)n_sel);
    if (n_sel && b->smp) memcpy(b->sampled + *next_logit, x->h_ids, sizeof(int) * (size_t)n_sel);
    *next_logit += n_sel;
    x->len += M;
    return 0;
}

extern "C" const float *cuda_ctx_taps(cuda_ctx *x, int n, int *rows) {
    if (rows) *rows = 0;
    if (n <= GRAPH_ROWS) {
        if (rows) *rows = GRAPH_ROWS;
        return x->d_taps;
    }
    if (n > x->wide_rows) {
        if (cudaSetDevice(x->m->gpu) != cudaSuccess) return NULL;
        float *p = NULL;
        if (cudaMalloc((void **)&p, sizeof(float) * GRAPH_TAPS * (size_t)n * x->m->cfg.hidden_size) != cudaSuccess) {
            cudaGetLastError();
            return NULL;
        }
        cudaFree(x->d_wide); /* (synchronises: no forward still writes it) */
        x->d_wide = p;
        x->wide_rows = n;
    }
    if (rows) *rows = x->wide_rows;
    return x->d_wide;
}

extern "C" int cuda_forward(cuda_ctx *x, const void *bv, char *err, size_t errlen) {
    const model_batch *b = (const model_batch *)bv;
    chain_drain(x);
    if (x->len + b->n > x->cap)
        return ds_err(err, errlen, "context window full: %d cached + %d new positions exceed the %d-position window",
                      x->len, b->n, x->cap);
    if (b->taps_resident && b->n > GRAPH_ROWS && b->n > x->wide_rows)
        return ds_err(err, errlen, "forward: the device holds taps for %d rows, not %d (ask mctx_resident_taps first)",
                      x->wide_rows > GRAPH_ROWS ? x->wide_rows : GRAPH_ROWS, b->n);
    CK(cudaSetDevice(x->m->gpu));
    if (model_tiles(x->m, err, errlen) != 0) return -1;
    int next_logit = 0, len0 = x->len;
    /* a chunk's logits rows fit the max_batch rows of the logits buffer */
    const int step = b->n_logits > x->max_batch ? x->small_chunk : x->chunk;
    for (int row0 = 0; row0 < b->n; row0 += step) {
        int M = b->n - row0 < step ? b->n - row0 : step;
        if (forward_chunk(x, b, row0, M, &next_logit, err, errlen) != 0) {
            x->len = len0;
            return -1;
        }
    }
    return 0;
}

/* ---- chained decoding ---------------------------------------------------- */

/* (not for a model with experts: each step would wait on the host for
   every MoE layer's routing, cuda_moe.cuh) */
extern "C" int cuda_chain_ok(const cuda_ctx *x) { return !x->ev && x->m->tune.chain && !x->moe; }

/* Launches the next chained step (its input set by the previous step or
   cu_chain_set), its id's copy to h_ring and its event. */
static int chain_launch(cuda_ctx *x, char *err, size_t errlen) {
    if (x->len + 1 > x->cap)
        return ds_err(err, errlen, "context window full: %d cached + 1 new position exceed the %d-position window",
                      x->len, x->cap);
    const int spread = cu_attn_spread_for(&x->m->tune, x->len), slot = (int)(x->chain_launched & 1);
    cudaGraphExec_t g = x->use_graphs ? capture(x, &x->chain_g[spread], 1, 1, OUT_IDS | OUT_CHAIN, NULL, spread)
                                      : NULL;
    if (g) CK(cudaGraphLaunch(g, x->st));
    else enqueue_chunk(x, 1, 1, OUT_IDS | OUT_CHAIN, NULL, 0, tap_dst{NULL, 0}, spread);
    CK(cudaMemcpyAsync(x->h_ring + slot, x->d_ids, sizeof(int), cudaMemcpyDeviceToHost, x->st));
    CK(cudaEventRecord(x->chain_ev[slot], x->st));
    CK_LAUNCH();
    x->len++;
    x->chain_launched++;
    return 0;
}

extern "C" int cuda_chain_start(cuda_ctx *x, int id, char *err, size_t errlen) {
    CK(cudaSetDevice(x->m->gpu));
    chain_drain(x);
    if (model_tiles(x->m, err, errlen) != 0) return -1;
    cu_chain_set(ctx_go(x), x->d_ids, x->pos, x->d_len, id, x->len - 1);
    if (chain_launch(x, err, errlen) == 0) return 0;
    chain_drain(x);
    return -1;
}

extern "C" int cuda_chain_next(cuda_ctx *x, int more, int *id, char *err, size_t errlen) {
    if (x->chain_launched == x->chain_done) return ds_err(err, errlen, "chained decoding: no step in flight");
    if (more && x->chain_launched - x->chain_done > 1) /* (its slot is the one not read yet) */
        return ds_err(err, errlen, "chained decoding: two steps in flight already");
    CK(cudaSetDevice(x->m->gpu));
    /* (the step launched here takes the other slot than the one read below) */
    if (more && chain_launch(x, err, errlen) != 0) {
        chain_drain(x);
        return -1;
    }
    const int slot = (int)(x->chain_done & 1);
    cudaError_t e = cudaEventSynchronize(x->chain_ev[slot]);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) {
        chain_drain(x);
        return ds_err(err, errlen, "CUDA: a chained decode step: %s", cudaGetErrorString(e));
    }
    *id = x->h_ring[slot];
    x->chain_done++;
    return 0;
}

extern "C" void cuda_chain_end(cuda_ctx *x) {
    if (cudaSetDevice(x->m->gpu) == cudaSuccess) chain_drain(x);
}
