/* cuda_none: the CUDA backend's entry points in a build without CUDA
 * (`make` rather than `make cuda`): every call says so. */
#include "cuda_backend.h"
#include "util.h"

#define NOT_BUILT(err, errlen) ds_err(err, errlen, "this dspark was built without CUDA (build it with `make cuda`)")

int cuda_device_count(void) { return 0; }
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
int cuda_forward(cuda_ctx *c, const void *b, char *err, size_t errlen) {
    (void)c;
    (void)b;
    return NOT_BUILT(err, errlen);
}
