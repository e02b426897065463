/* fuzz_gguf: libFuzzer target for the GGUF reader. Feeds the input to
 * gguf_open_mem as a whole file image and, when it is accepted, reads every
 * metadata value and array element and touches both ends of every tensor's
 * bytes, so a validation gap shows up as an out-of-bounds read under ASan. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    gguf *g = NULL;
    if (gguf_open_mem(&g, data, size, "fuzz.gguf", err, sizeof err) != 0) return 0;
    volatile unsigned sum = 0;
    for (int i = 0; i < gguf_kv_count(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (gguf_find(g, kv->key) != kv) __builtin_trap();
        if (kv->type == GGUF_STRING) sum += (unsigned char)kv->str.s[kv->str.len];
        if (kv->type != GGUF_ARRAY || kv->n == 0) continue;
        if (kv->elt == GGUF_STRING) {
            const gguf_str *s = kv->arr;
            for (uint64_t j = 0; j < kv->n; j++) sum += (unsigned char)s[j].s[s[j].len];
        } else {
            static const size_t sz[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
            const uint8_t *a = kv->arr;
            sum += a[0] + a[kv->n * sz[kv->elt] - 1];
        }
    }
    for (int i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (gguf_find_tensor(g, t->name) != t) __builtin_trap();
        const uint8_t *p = t->data;
        if (p < data || p + t->nbytes > data + size) __builtin_trap();
        if (t->nbytes) sum += p[0] + p[t->nbytes - 1];
    }
    (void)sum;
    gguf_close(g);
    return 0;
}
