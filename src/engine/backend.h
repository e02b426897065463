/* backend: the seam between the engine above (model.c, the drafters, the
 * speculative loop, the server) and the hardware. A backend executes the
 * descriptions of desc.h: it creates its copy of a model or drafter,
 * contexts (a KV cache and scratch for one sequence), and runs forwards,
 * each with its own kernels and fusions. Two implement it: the CPU
 * (cpu_backend.c, always built) and CUDA (engine/cuda, `make cuda`).
 * Nothing above the engine includes a backend's own header; it sees this
 * table through model.h and drafter.h.
 *
 * Every backend keeps the rule the lossless loop rests on: a row's bits
 * never depend on the batch it is in, except that rows of whole groups of
 * BACKEND_GROUP_ROWS rows counted from a forward's first row may take a
 * prefill kernel family (a row's result then depends only on its group).
 * Verifies are narrower than a group (spec.c checks). */
#ifndef DS_BACKEND_H
#define DS_BACKEND_H

#include <stddef.h>

#include "engine/desc.h"
#include "engine/sampler.h"
#include "engine/threadpool.h"

/* rows of a group that a backend may run through its prefill kernels */
#define BACKEND_GROUP_ROWS 128
/* rows a prefill chunk takes on a backend whose contexts hold a group: the
   speculative prefill's default chunk is the same, so speculative and
   plain runs fill the same cache */
#define BACKEND_PREFILL_ROWS 1024

struct model_batch_s;
typedef struct model_draft_q model_draft_q;

/* What a backend does beyond the common contract. */
typedef struct {
    int group_rows;     /* BACKEND_GROUP_ROWS when it has a prefill kernel family, else 0 */
    int resident_taps;  /* layers whose taps a forward can leave in the backend's memory (0: none) */
    int chain;          /* chained greedy decoding (model.h mctx_chain_*) */
    int drafter_resident; /* its drafters read resident taps and draw sampled drafts there */
    int kv_low_bits;    /* its KV caches store 16 and 8 bits as well as 32 (model_desc.kv_bits) */
} backend_caps;

/* One device as a report (dspark doctor) shows it. */
typedef struct backend_device_info {
    char name[128];
    size_t mem_total, mem_free;  /* bytes */
    int cc_major, cc_minor;      /* compute capability */
    int driver_version;          /* as the driver reports it, e.g. 13000 for 13.0 */
    int runtime_version;         /* the runtime this build links, same form */
    int has_kernels;             /* this build's kernels run on it */
    char kernels_note[512];      /* why not, when they do not */
} backend_device_info;

typedef struct backend {
    const char *name; /* "cpu", "cuda" */
    /* device index -> a description, "NVIDIA H200, 139.8 GiB, ..." */
    int (*describe)(int device, char *out, size_t n);
    /* device index -> its details; NULL for a backend without devices of
       its own (the CPU). 0, or -1 with err filled. */
    int (*device_info)(int device, backend_device_info *out, char *err, size_t errlen);

    /* ---- targets ---- */
    int (*model_create)(void **out, const model_desc *d, int device, char *err, size_t errlen);
    void (*model_free)(void *bm);
    void (*model_caps)(const void *bm, backend_caps *caps);
    /* 1 when a sampled verify should ask for sampler_rows's answers
       (model_batch.smp) rather than logits rows */
    int (*samples_rows)(const void *bm);
    int (*ctx_create)(void **out, void *bm, int n_ctx, int max_batch, tpool *tp, char *err, size_t errlen);
    void (*ctx_free)(void *bc);
    int (*ctx_len)(const void *bc);
    int (*ctx_capacity)(const void *bc);
    void (*ctx_truncate)(void *bc, int len);
    /* Memory facts for the fit estimate (engine/memfit.h).
       ctx_bytes: what a context of n_ctx positions and max_batch rows
       allocates in the memory it runs in (KV cache at the model's
       kv_bits, plus scratch);
       mem_avail: that memory's free and total bytes with the model's
       weights already resident, or NULL when it is the host's RAM (then
       /proc/meminfo says);
       ctx_release: empties a context and gives its cache's pages back to
       the system, returning the bytes released (NULL where the cache is
       not host memory that can be handed back) */
    size_t (*ctx_bytes)(const void *bm, int n_ctx, int max_batch);
    int (*mem_avail)(const void *bm, size_t *free_b, size_t *total_b);
    size_t (*ctx_release)(void *bc);
    /* makes context dst hold src's positions [0, n) (two contexts of one
       model; n at most src's length and dst's capacity) with src's stored
       bits; NULL where the backend has no copy */
    int (*ctx_copy)(void *dst, const void *src, int n, char *err, size_t errlen);
    /* Cache rows to host memory and back (a prefix cache kept outside the
       contexts): ctx_save writes positions [pos0, pos0+n) of the context
       (below its length) to host, ctx_pos_bytes each, as kv_save_rows lays
       them out; ctx_load puts such rows at [pos0, pos0+n) of a context of
       the same model (pos0 at most its length; it is cut there first) and
       sets its length to pos0+n. The stored bits travel as they are. NULL
       where the backend has none. */
    size_t (*ctx_pos_bytes)(const void *bm);
    /* the first position whose rows the context still holds in every layer
       (sliding layers give older rows back); NULL: always 0 */
    int (*ctx_kept_from)(const void *bc);
    int (*ctx_save)(void *bc, int pos0, int n, void *host, char *err, size_t errlen);
    int (*ctx_load)(void *bc, int pos0, int n, const void *host, char *err, size_t errlen);
    /* Blocks by reference (the prefix cache without copies; NULL where the
       backend copies rows instead): block_rows positions a block;
       ctx_block_take returns a handle that holds the rows of block b
       (positions [b * block_rows, (b+1) * block_rows), whole, below the
       context's length and at or above its kept_from) by reference, NULL
       when it cannot; ctx_block_put makes them block b of a context of the
       same model (b * block_rows at most its length: it is cut there
       first) and sets its length to the block's end, so it then reads as
       the context they came from did; block_drop gives a handle back. A
       context that writes into rows it shares copies them first. */
    int block_rows;
    /* the contexts' cache pages: bytes of one, how many are held and how
       many of them more than one holder shares (NULL: none) */
    void (*kv_pages)(const void *bm, size_t *page_bytes, int64_t *held, int64_t *shared);
    void *(*ctx_block_take)(void *bc, int b);
    int (*ctx_block_put)(void *bc, int b, const void *h, char *err, size_t errlen);
    void (*block_drop)(void *h);
    /* model_forward on this backend (b already validated by model.c) */
    int (*forward)(void *bc, const struct model_batch_s *b, char *err, size_t errlen);
    /* model_forward_multi on this backend (2 or more distinct contexts of
       one model, each batch validated): the results of forward on each in
       turn, bit for bit. NULL: model.c runs them in turn. */
    int (*forward_multi)(void *const *bcs, const struct model_batch_s *bs, int n, char *err, size_t errlen);
    /* mctx_resident_taps (model.h); NULL when caps.resident_taps is 0 */
    const float *(*resident_taps)(void *bc, int n, int *rows);
    /* chained greedy decoding (model.h); NULL when caps.chain is 0 */
    int (*chain_ok)(const void *bc);
    int (*chain_start)(void *bc, int id, char *err, size_t errlen);
    int (*chain_next)(void *bc, int more, int *id, char *err, size_t errlen);
    void (*chain_end)(void *bc);

    /* ---- drafters (drafter.h), beside a target of this backend ---- */
    int (*dmodel_create)(void **out, const drafter_desc *d, void *target_bm, char *err, size_t errlen);
    void (*dmodel_free)(void *bdm);
    /* cap: cache positions (the context window plus one block) */
    int (*dstate_create)(void **out, void *bdm, int cap, tpool *tp, char *err, size_t errlen);
    void (*dstate_free)(void *bs);
    int (*dstate_len)(const void *bs); /* positions with context K/V */
    int (*dstate_capacity)(const void *bs);
    void (*dstate_truncate)(void *bs, int len);
    /* as ctx_copy for two drafter states of one drafter (context positions
       [0, n)); NULL where the backend has no copy */
    int (*dstate_copy)(void *dst, const void *src, int n, char *err, size_t errlen);
    /* as ctx_pos_bytes / ctx_save / ctx_load for a drafter state's context
       positions; NULL where the backend has none */
    size_t (*dstate_pos_bytes)(const void *bdm);
    int (*dstate_save)(void *bs, int pos0, int n, void *host, char *err, size_t errlen);
    int (*dstate_load)(void *bs, int pos0, int n, const void *host, char *err, size_t errlen);
    /* as ctx_block_take / ctx_block_put for a drafter state's context
       (block_rows positions; its handle goes with block_drop); NULL where
       the backend has none */
    void *(*dstate_block_take)(void *bs, int b);
    int (*dstate_block_put)(void *bs, int b, const void *h, char *err, size_t errlen);
    /* context rows pos0 .. pos0+n-1 (the cache cut to pos0 first): row i's
       features taps[t][row0 + i][H] for each tap t of taps[n_taps][rows][H],
       in host memory, or (ingest_resident, NULL unless
       caps.drafter_resident) in the target's resident taps buffer */
    int (*dstate_ingest)(void *bs, int pos0, int n, const float *taps, int rows, int row0, char *err, size_t errlen);
    int (*dstate_ingest_resident)(void *bs, int pos0, int n, const float *taps, int rows, int row0, char *err,
                                  size_t errlen);
    /* The block [anchor, mask x (B-1)] at positions len .. len+B-1 and the
       LM head for n rows (DFlash: mask rows 1..n; DSpark: rows 0..n-1).
       chain: the n drafts chosen greedily into draft[n] (DSpark with a
       confidence head: conf[n], each row's confidence given the drafts
       before it; the backend may stop after the first row whose
       confidence is below conf_th, the rows past it unset). Otherwise only
       the head rows (dstate_row continues). */
    int (*dstate_propose)(void *bs, int anchor, int n, int chain, float conf_th, int *draft, float *conf, char *err,
                          size_t errlen);
    /* DSpark after a propose without chain: row j given the previous id:
       its confidence (when the head exists) and its logits z[V] = head
       row j (+ W2 . W1[prev]); z may be left unset when the confidence is
       below conf_th */
    int (*dstate_row)(void *bs, int j, int prev, float conf_th, float *conf, float *z, char *err, size_t errlen);
    /* DSpark, sampled, where caps.drafter_resident: as a chained propose
       but draft j is drawn in the backend with u[j] under p, the rows'
       distributions left there for the verify (dstate_qrows); NULL
       otherwise */
    int (*dstate_propose_sampled)(void *bs, int anchor, int n, const sampler_params *p, const double *u, int *draft,
                                  float *conf, char *err, size_t errlen);
    void (*dstate_qrows)(const void *bs, model_draft_q *q);
    /* the last propose's head rows base[rows][V] and DSpark's biased rows
       z[rows][V] (either may be NULL), copied out for tests */
    int (*dstate_read_last)(const void *bs, float *base, float *z, int rows, char *err, size_t errlen);
    /* the context features (after fc and hidden_norm) of the last ingested
       chunk into g[rows][H]; returns rows (at most dstate_ctx_chunk) */
    int (*dstate_read_ctx)(const void *bs, float *g, char *err, size_t errlen);
    int dstate_ctx_chunk; /* context rows ingested per pass */

    /* ---- tensor parallelism (engine/tpar.h) ---- */
    /* the table that runs a model split over model_desc.tp_ranks > 1 ranks
       of this backend (the CPU: an emulation of the ranks in one process);
       NULL where the backend splits no model (model_load refuses such a
       split by name, never runs it whole) */
    const struct backend *(*tensor_parallel)(void);
} backend;

extern const backend backend_cpu;

/* The backend for a device name ("cpu", "cuda", "cuda:N"; NULL or "" is
 * "cpu") and its device index in *index; NULL with err filled when the
 * name is malformed or this build has no such backend. */
const backend *backend_for(const char *device, int *index, char *err, size_t errlen);
/* Devices the named backend ("cuda") sees in this build (0 when none). */
int backend_device_count(const char *name);
/* 1 when this build has the named backend ("cpu" always; "cuda" with
 * `make cuda`). */
int backend_built(const char *name);
/* The named backend's device `device` (see backend_device_info). 0, or -1
 * with err filled (not built, no such device, a backend without devices,
 * or the query failed). */
int backend_query_device(const char *name, int device, backend_device_info *out, char *err, size_t errlen);

/* How device a of the named backend reaches device b (a tensor-parallel
 * split's links, for `doctor`): peer_access, whether a reads and writes
 * b's memory directly; native_atomics, whether atomics work across that
 * link (NVLink gives them, PCIe peers do not); perf_rank, the driver's
 * relative rank of the link (lower is faster; -1 without peer access). 0,
 * or -1 with err (not built, no such devices, a backend without devices,
 * or the query failed). */
typedef struct {
    int peer_access, native_atomics, perf_rank;
} backend_peer_info;
int backend_query_peer(const char *name, int a, int b, backend_peer_info *out, char *err, size_t errlen);

#endif
