/* cuda_glue: the CUDA backend's table (backend.h) over the entry points of
 * cuda_backend.h and cuda_drafter.h. Built only by `make cuda`; a build
 * without it has no "cuda" backend (backend_for says so). */
#include <string.h>

#include "base/util.h"

#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_drafter.h"
#include "engine/kv.h"
#include "engine/model.h"

_Static_assert(CUDA_GEMM_MIN_ROWS == BACKEND_GROUP_ROWS, "the cuBLAS groups are the backends' groups");
_Static_assert(CUDA_PREFILL_ROWS == BACKEND_PREFILL_ROWS, "the GPU's prefill chunk is the backends' chunk");

/* (what a description may hold beyond plain layers runs on the GPU as on
   the CPU: sliding windows, GELU gating, post-norms, per-layer RoPE, the
   scaled embedding and scores, soft-capped logits; attention soft-capping
   the config loader refuses for both backends) */
static int g_model_create(void **out, const model_desc *d, int device, char *err, size_t errlen) {
    for (int l = 0; l < d->cfg->n_layers; l++) {
        const mlp_kind k = d->layers[l].mlp;
        if (d->layers[l].attn != ATTN_CAUSAL || (k != MLP_SWIGLU && k != MLP_GEGLU && k != MLP_MOE))
            return ds_err(err, errlen, "CUDA backend: layer %d of the target has a kind it does not run", l);
    }
    /* the target's cache in the storages of engine/kv.h (cu_kv: the store
       and the attention kernels follow its row rules); the drafters' caches
       stay f32 */
    if (d->kv_bits && !kv_bits_ok(d->kv_bits))
        return ds_err(err, errlen, "--kv-bits %d: the CUDA backend's KV cache stores 32, 16 or 8 bits", d->kv_bits);
    return cuda_model_create((cuda_model **)out, d, device, err, errlen);
}
static void g_model_free(void *bm) { cuda_model_free(bm); }
static void g_model_caps(const void *bm, backend_caps *caps) {
    (void)bm;
    *caps = (backend_caps){.group_rows = CUDA_GEMM_MIN_ROWS,
                           .resident_taps = MODEL_RESIDENT_TAPS,
                           .chain = 1,
                           .drafter_resident = 1,
                           .kv_low_bits = 1};
}
static int g_samples_rows(const void *bm) { return cuda_model_samples(bm); }
static int g_ctx_create(void **out, void *bm, int n_ctx, int max_batch, tpool *tp, char *err, size_t errlen) {
    (void)tp;
    return cuda_ctx_create((cuda_ctx **)out, bm, n_ctx, max_batch, err, errlen);
}
static void g_ctx_free(void *bc) { cuda_ctx_free(bc); }
static int g_ctx_len(const void *bc) { return cuda_ctx_len(bc); }
static int g_ctx_capacity(const void *bc) { return cuda_ctx_capacity(bc); }
static void g_ctx_truncate(void *bc, int len) { cuda_ctx_truncate(bc, len); }
static int g_ctx_copy(void *dst, const void *src, int n, char *err, size_t errlen) {
    return cuda_ctx_copy(dst, (cuda_ctx *)src, n, err, errlen); /* (drains src's stream: not const there) */
}
static size_t g_ctx_pos_bytes(const void *bm) { return cuda_ctx_pos_bytes(bm); }
static int g_ctx_save(void *bc, int pos0, int n, void *host, char *err, size_t errlen) {
    return cuda_ctx_save(bc, pos0, n, host, err, errlen);
}
static int g_ctx_load(void *bc, int pos0, int n, const void *host, char *err, size_t errlen) {
    return cuda_ctx_load(bc, pos0, n, host, err, errlen);
}
static size_t g_ctx_bytes(const void *bm, int n_ctx, int max_batch) { return cuda_ctx_bytes(bm, n_ctx, max_batch); }
static int g_mem_avail(const void *bm, size_t *free_b, size_t *total_b) { return cuda_mem_info(bm, free_b, total_b); }
static int g_forward(void *bc, const model_batch *b, char *err, size_t errlen) { return cuda_forward(bc, b, err, errlen); }
static const float *g_resident_taps(void *bc, int n, int *rows) { return cuda_ctx_taps(bc, n, rows); }
static int g_chain_ok(const void *bc) { return cuda_chain_ok(bc); }
static int g_chain_start(void *bc, int id, char *err, size_t errlen) { return cuda_chain_start(bc, id, err, errlen); }
static int g_chain_next(void *bc, int more, int *id, char *err, size_t errlen) {
    return cuda_chain_next(bc, more, id, err, errlen);
}
static void g_chain_end(void *bc) { cuda_chain_end(bc); }

static int g_dmodel_create(void **out, const drafter_desc *d, void *target_bm, char *err, size_t errlen) {
    for (int l = 0; l < d->cfg->n_layers; l++)
        if (d->layers[l].attn != ATTN_BLOCK || d->layers[l].mlp != MLP_SWIGLU)
            return ds_err(err, errlen, "CUDA backend: layer %d of the drafter has a kind it does not run", l);
    return cuda_dmodel_create((cuda_dmodel **)out, d, target_bm, 0, err, errlen);
}
static void g_dmodel_free(void *bdm) { cuda_dmodel_free(bdm); }
static int g_dstate_create(void **out, void *bdm, int cap, tpool *tp, char *err, size_t errlen) {
    (void)tp;
    return cuda_dstate_create((cuda_dstate **)out, bdm, cap, err, errlen);
}
static void g_dstate_free(void *bs) { cuda_dstate_free(bs); }
static int g_dstate_len(const void *bs) { return cuda_dstate_len(bs); }
static int g_dstate_capacity(const void *bs) { return cuda_dstate_capacity(bs); }
static void g_dstate_truncate(void *bs, int len) { cuda_dstate_truncate(bs, len); }
static int g_dstate_copy(void *dst, const void *src, int n, char *err, size_t errlen) {
    return cuda_dstate_copy(dst, (cuda_dstate *)src, n, err, errlen);
}
static size_t g_dstate_pos_bytes(const void *bdm) { return cuda_dstate_pos_bytes(bdm); }
static int g_dstate_save(void *bs, int pos0, int n, void *host, char *err, size_t errlen) {
    return cuda_dstate_save(bs, pos0, n, host, err, errlen);
}
static int g_dstate_load(void *bs, int pos0, int n, const void *host, char *err, size_t errlen) {
    return cuda_dstate_load(bs, pos0, n, host, err, errlen);
}
static int g_dstate_ingest(void *bs, int pos0, int n, const float *taps, int rows, int row0, char *err,
                           size_t errlen) {
    return cuda_dstate_ingest(bs, pos0, n, taps, rows, row0, err, errlen);
}
static int g_dstate_ingest_resident(void *bs, int pos0, int n, const float *taps, int rows, int row0, char *err,
                                    size_t errlen) {
    return cuda_dstate_ingest_dev(bs, pos0, n, taps, rows, row0, err, errlen);
}
/* the device computes every row; the caller applies the confidence cut */
static int g_dstate_propose(void *bs, int anchor, int n, int chain, float conf_th, int *draft, float *conf,
                            char *err, size_t errlen) {
    (void)conf_th;
    return cuda_dstate_propose(bs, anchor, n, chain, draft, conf, err, errlen);
}
static int g_dstate_row(void *bs, int j, int prev, float conf_th, float *conf, float *z, char *err, size_t errlen) {
    (void)conf_th;
    return cuda_dstate_row(bs, j, prev, conf, z, err, errlen);
}
static int g_dstate_propose_sampled(void *bs, int anchor, int n, const sampler_params *p, const double *u,
                                    int *draft, float *conf, char *err, size_t errlen) {
    return cuda_dstate_propose_sampled(bs, anchor, n, p, u, draft, conf, err, errlen);
}
static void g_dstate_qrows(const void *bs, model_draft_q *q) { cuda_dstate_qrows(bs, &q->e, &q->tot); }
static int g_dstate_read_last(const void *bs, float *base, float *z, int rows, char *err, size_t errlen) {
    return cuda_dstate_read_last(bs, base, z, rows, err, errlen);
}
static int g_dstate_read_ctx(const void *bs, float *g, char *err, size_t errlen) {
    return cuda_dstate_read_ctx(bs, g, err, errlen);
}

static backend g_table = {
    .name = "cuda",
    .describe = cuda_describe,
    .device_info = cuda_device_info,
    .model_create = g_model_create,
    .ctx_bytes = g_ctx_bytes,
    .mem_avail = g_mem_avail,
    .model_free = g_model_free,
    .model_caps = g_model_caps,
    .samples_rows = g_samples_rows,
    .ctx_create = g_ctx_create,
    .ctx_free = g_ctx_free,
    .ctx_len = g_ctx_len,
    .ctx_capacity = g_ctx_capacity,
    .ctx_truncate = g_ctx_truncate,
    .ctx_copy = g_ctx_copy,
    .ctx_pos_bytes = g_ctx_pos_bytes,
    .ctx_save = g_ctx_save,
    .ctx_load = g_ctx_load,
    .forward = g_forward,
    .resident_taps = g_resident_taps,
    .chain_ok = g_chain_ok,
    .chain_start = g_chain_start,
    .chain_next = g_chain_next,
    .chain_end = g_chain_end,
    .dmodel_create = g_dmodel_create,
    .dmodel_free = g_dmodel_free,
    .dstate_create = g_dstate_create,
    .dstate_free = g_dstate_free,
    .dstate_len = g_dstate_len,
    .dstate_capacity = g_dstate_capacity,
    .dstate_truncate = g_dstate_truncate,
    .dstate_copy = g_dstate_copy,
    .dstate_pos_bytes = g_dstate_pos_bytes,
    .dstate_save = g_dstate_save,
    .dstate_load = g_dstate_load,
    .dstate_ingest = g_dstate_ingest,
    .dstate_ingest_resident = g_dstate_ingest_resident,
    .dstate_propose = g_dstate_propose,
    .dstate_row = g_dstate_row,
    .dstate_propose_sampled = g_dstate_propose_sampled,
    .dstate_qrows = g_dstate_qrows,
    .dstate_read_last = g_dstate_read_last,
    .dstate_read_ctx = g_dstate_read_ctx,
};

const backend *cuda_backend_table(void) {
    g_table.dstate_ctx_chunk = cuda_dstate_ctx_chunk();
    return &g_table;
}
