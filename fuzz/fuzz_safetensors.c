/* fuzz_safetensors: libFuzzer target for the safetensors header parser.
 * Feeds the input to st_open_mem as a whole file image and, when it is
 * accepted, touches every tensor's bytes and looks every name up, so a
 * validation gap shows up as an out-of-bounds read under ASan. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    st_file *f = NULL;
    if (st_open_mem(&f, data, size, "fuzz.safetensors", err, sizeof err) != 0) return 0;
    volatile unsigned sum = 0;
    for (int i = 0; i < st_count(f); i++) {
        const tensor *t = st_get(f, i);
        if (st_find(f, t->name) != t) __builtin_trap();
        if (tensor_numel(t) * (int64_t)dtype_size(t->dtype) != (int64_t)t->nbytes) __builtin_trap();
        const uint8_t *p = t->data;
        if (p < data || p + t->nbytes > data + size) __builtin_trap();
        if (t->nbytes) sum += p[0] + p[t->nbytes - 1];
    }
    (void)sum;
    st_close(f);
    return 0;
}
