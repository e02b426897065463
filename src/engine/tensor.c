/* tensor: the dtype table (sizes and safetensors spellings) and element
 * counts for tensor descriptions. The safetensors and GGUF loaders map
 * their dtype strings through here, so a name is spelled in one place. */
#include "engine/tensor.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[DT_COUNT] = {
    [DT_F32] = {"F32", 4},       [DT_F16] = {"F16", 2},         [DT_BF16] = {"BF16", 2},
    [DT_F64] = {"F64", 8},       [DT_I64] = {"I64", 8},         [DT_I32] = {"I32", 4},
    [DT_I16] = {"I16", 2},       [DT_I8] = {"I8", 1},           [DT_U8] = {"U8", 1},
    [DT_BOOL] = {"BOOL", 1},     [DT_F8_E4M3] = {"F8_E4M3", 1}, [DT_F8_E5M2] = {"F8_E5M2", 1},
    [DT_U32] = {"U32", 4},
    [DT_Q8_0] = {"Q8_0", 0},     [DT_Q4_0] = {"Q4_0", 0},       [DT_Q4_1] = {"Q4_1", 0},
    [DT_Q5_0] = {"Q5_0", 0},     [DT_Q5_1] = {"Q5_1", 0},       [DT_Q2_K] = {"Q2_K", 0},
    [DT_Q3_K] = {"Q3_K", 0},     [DT_Q4_K] = {"Q4_K", 0},       [DT_Q5_K] = {"Q5_K", 0},
    [DT_Q6_K] = {"Q6_K", 0},     [DT_MLX] = {"MLX", 0},
};

size_t dtype_size(ds_dtype t) {
    if ((unsigned)t >= DT_COUNT) return 0;
    return dtypes[t].size;
}

const char *dtype_name(ds_dtype t) {
    if ((unsigned)t >= DT_COUNT) return "?";
    return dtypes[t].name;
}

int dtype_from_name(const char *s, ds_dtype *out) {
    if (!s) return -1;
    for (int i = 0; i < DT_FIRST_QUANT; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (ds_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* The product of the dimensions (1 for a scalar). Loaders overflow-check
 * shapes before building a tensor, so this cannot overflow for them. */
int64_t tensor_numel(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int tensor_rows8_ok(const tensor *t) {
    return !t->rows8 && t->ndim == 2 && (t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16) &&
           t->shape[0] > 0 && t->shape[1] > 0 && t->shape[0] % 8 == 0 && t->shape[1] % 8 == 0;
}

typedef struct {
    char *data;
    size_t es;
    int64_t K, b0, b1; /* blocks [b0, b1) */
} rows8_job;

static void *rows8_blocks(void *p) {
    const rows8_job *j = p;
    size_t blk = (size_t)(8 * j->K) * j->es, piece = 8 * j->es;
    char *tmp = xmalloc(blk);
    for (int64_t b = j->b0; b < j->b1; b++) {
        char *d = j->data + (size_t)b * blk;
        memcpy(tmp, d, blk);
        for (int64_t r = 0; r < 8; r++)
            for (int64_t k = 0; k < j->K; k += 8)
                memcpy(d + tensor_off(j->K, 1, r, k) * j->es, tmp + (size_t)(r * j->K + k) * j->es, piece);
    }
    free(tmp);
    return NULL;
}

/* blocks are independent: a large matrix is split over up to 8 threads
   (the rearranging is a pass over memory at load time) */
#define ROWS8_THREAD_BYTES ((size_t)4 << 20)

void tensor_to_rows8(void *data, size_t es, int64_t N, int64_t K) {
    int64_t nb = N / 8;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int T = (size_t)(N * K) * es >= ROWS8_THREAD_BYTES && ncpu > 1 ? (ncpu < 8 ? (int)ncpu : 8) : 1;
    rows8_job jobs[8];
    pthread_t th[8];
    int started = 0;
    for (int t = 0; t < T; t++)
        jobs[t] = (rows8_job){.data = data, .es = es, .K = K, .b0 = nb * t / T, .b1 = nb * (t + 1) / T};
    for (int t = 1; t < T; t++) {
        if (pthread_create(&th[t], NULL, rows8_blocks, &jobs[t]) != 0) break;
        started = t;
    }
    /* this thread takes the first share and any a thread could not start for */
    rows8_blocks(&jobs[0]);
    for (int t = started + 1; t < T; t++) rows8_blocks(&jobs[t]);
    for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
}

int tensor_same_values(const tensor *a, const tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes ||
        memcmp(a->shape, b->shape, sizeof a->shape) != 0)
        return 0;
    if (a->rows8 == b->rows8) return memcmp(a->data, b->data, a->nbytes) == 0;
    /* one of them is rows8, so both are 2-D with K a multiple of 8 */
    const int64_t N = a->shape[0], K = a->shape[1];
    const size_t es = dtype_size(a->dtype);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k += 8)
            if (memcmp((const char *)a->data + tensor_off(K, a->rows8, n, k) * es,
                       (const char *)b->data + tensor_off(K, b->rows8, n, k) * es, 8 * es) != 0)
                return 0;
    return 1;
}
