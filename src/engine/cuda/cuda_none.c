/* cuda_none: the CUDA backend's and the GPU drafters' entry points in a
 * build without CUDA (`make` rather than `make cuda`): every call says so. */
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_drafter.h"
#include "base/util.h"

#define NOT_BUILT(err, errlen) ds_err(err, errlen, "this dspark was built without CUDA (build it with `make cuda`)")

int cuda_device_count(void) { return 0; }
int cuda_model_samples(const cuda_model *m) {
    (void)m;
    return 0;
}
int cuda_describe(int gpu, char *out, size_t n) {
    (void)gpu;
    return NOT_BUILT(out, n);
}
int cuda_model_create(cuda_model **out, const cuda_weights *w, int gpu, char *err, size_t errlen) {
    (void)w;
    (void)gpu;
    *out = NULL;
    return NOT_BUILT(err, errlen);
}
void cuda_model_free(cuda_model *m) { (void)m; }
int cuda_ctx_create(cuda_ctx **out, cuda_model *m, int n_ctx, int max_batch, char *err, size_t errlen) {
    (void)m;
    (void)n_ctx;
    (void)max_batch;
    *out = NULL;
    return NOT_BUILT(err, errlen);
}
void cuda_ctx_free(cuda_ctx *c) { (void)c; }
int cuda_ctx_len(const cuda_ctx *c) {
    (void)c;
    return 0;
}
int cuda_ctx_capacity(const cuda_ctx *c) {
    (void)c;
    return 0;
}
void cuda_ctx_truncate(cuda_ctx *c, int len) {
    (void)c;
    (void)len;
}
const float *cuda_ctx_taps(cuda_ctx *c, int n, int *rows) {
    (void)c;
    (void)n;
    if (rows) *rows = 0;
    return NULL;
}
int cuda_chain_ok(const cuda_ctx *c) {
    (void)c;
    return 0;
}
int cuda_chain_start(cuda_ctx *c, int id, char *err, size_t errlen) {
    (void)c;
    (void)id;
    return NOT_BUILT(err, errlen);
}
int cuda_chain_next(cuda_ctx *c, int more, int *id, char *err, size_t errlen) {
    (void)c;
    (void)more;
    (void)id;
    return NOT_BUILT(err, errlen);
}
void cuda_chain_end(cuda_ctx *c) { (void)c; }
int cuda_test_swiglu_two(int on) {
    (void)on;
    return 0;
}
int cuda_test_norm_split(int sites, int rows) {
    (void)sites;
    (void)rows;
    return 0;
}
int cuda_test_read(void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
    (void)dst;
    (void)src;
    (void)bytes;
    return NOT_BUILT(err, errlen);
}
int cuda_forward(cuda_ctx *c, const void *b, char *err, size_t errlen) {
    (void)c;
    (void)b;
    return NOT_BUILT(err, errlen);
}

/* the GPU drafters (cuda_drafter.h): drafter_load only creates them for a
   target on a GPU, which this build never has */
int cuda_dmodel_create(cuda_dmodel **out, const cuda_dweights *w, struct cuda_model *target, int gpu, char *err,
                       size_t errlen) {
    (void)w;
    (void)target;
    (void)gpu;
    *out = NULL;
    return NOT_BUILT(err, errlen);
}
void cuda_dmodel_free(cuda_dmodel *m) { (void)m; }
int cuda_dstate_create(cuda_dstate **out, cuda_dmodel *m, int cap, char *err, size_t errlen) {
    (void)m;
    (void)cap;
    *out = NULL;
    return NOT_BUILT(err, errlen);
}
void cuda_dstate_free(cuda_dstate *s) { (void)s; }
int cuda_dstate_len(const cuda_dstate *s) {
    (void)s;
    return 0;
}
int cuda_dstate_capacity(const cuda_dstate *s) {
    (void)s;
    return 0;
}
void cuda_dstate_truncate(cuda_dstate *s, int len) {
    (void)s;
    (void)len;
}
int cuda_dstate_ingest(cuda_dstate *s, int pos0, int n, const float *taps, int rows, int row0, char *err,
                       size_t errlen) {
    (void)s;
    (void)pos0;
    (void)n;
    (void)taps;
    (void)rows;
    (void)row0;
    return NOT_BUILT(err, errlen);
}
int cuda_dstate_ingest_dev(cuda_dstate *s, int pos0, int n, const float *taps, int rows, int row0, char *err,
                           size_t errlen) {
    return cuda_dstate_ingest(s, pos0, n, taps, rows, row0, err, errlen);
}
int cuda_dstate_propose(cuda_dstate *s, int anchor, int n, int chain, int *draft, float *conf, char *err,
                        size_t errlen) {
    (void)s;
    (void)anchor;
    (void)n;
    (void)chain;
    (void)draft;
    (void)conf;
    return NOT_BUILT(err, errlen);
}
int cuda_dstate_propose_sampled(cuda_dstate *s, int anchor, int n, const sampler_params *p, const double *u,
                                int *draft, float *conf, char *err, size_t errlen) {
    (void)s;
    (void)anchor;
    (void)n;
    (void)p;
    (void)u;
    (void)draft;
    (void)conf;
    return NOT_BUILT(err, errlen);
}
void cuda_dstate_qrows(const cuda_dstate *s, const float **q, const unsigned long long **tot) {
    (void)s;
    *q = NULL;
    *tot = NULL;
}
int cuda_dstate_row(cuda_dstate *s, int j, int prev, float *conf, float *z, char *err, size_t errlen) {
    (void)s;
    (void)j;
    (void)prev;
    (void)conf;
    (void)z;
    return NOT_BUILT(err, errlen);
}
int cuda_dstate_read_last(const cuda_dstate *s, float *base, float *z, int rows, char *err, size_t errlen) {
    (void)s;
    (void)base;
    (void)z;
    (void)rows;
    return NOT_BUILT(err, errlen);
}
int cuda_dstate_read_ctx(const cuda_dstate *s, float *g, char *err, size_t errlen) {
    (void)s;
    (void)g;
    return NOT_BUILT(err, errlen);
}
int cuda_dstate_ctx_chunk(void) { return 0; }
