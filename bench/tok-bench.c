/* tok-bench: encoding speed of dspark's tokenizer on one text file, taken
 * whole (one tok_encode call, add_special off), best of REPS runs.
 *
 *   tok-bench TOKENIZER_DIR TEXT_FILE [REPS]
 *
 * Prints one line: name, bytes, tokens, best seconds, MB/s, tokens/s, and
 * the FNV-1a hash of the ids (to compare with another implementation's
 * ids). bench/tok-bench.sh runs it beside the Hugging Face library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "base/util.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok-bench TOKENIZER_DIR TEXT_FILE [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (reps < 1) reps = 1;
    char err[512];
    tokenizer *t;
    double t0 = ds_now();
    if (tok_load(&t, argv[1], err, sizeof err)) {
        fprintf(stderr, "tok-bench: %s\n", err);
        return 1;
    }
    double load = ds_now() - t0;
    size_t len;
    char *text = ds_read_file(argv[2], &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "tok-bench: %s\n", err);
        tok_free(t);
        return 1;
    }
    double best = 1e30;
    int n = 0;
    uint64_t h = 0;
    for (int r = 0; r < reps; r++) {
        int *ids;
        t0 = ds_now();
        n = tok_encode(t, text, len, 0, &ids, err, sizeof err);
        double dt = ds_now() - t0;
        if (n < 0) {
            fprintf(stderr, "tok-bench: %s\n", err);
            free(text);
            tok_free(t);
            return 1;
        }
        if (dt < best) best = dt;
        h = ds_fnv1a(DS_FNV_SEED, ids, (size_t)n * sizeof *ids);
        free(ids);
    }
    const char *name = strrchr(argv[1], '/');
    name = name && name[1] ? name + 1 : argv[1];
    printf("dspark %-8s bytes %zu tokens %d best %.4f s  %.2f MB/s  %.0f tok/s  (load %.2f s) ids-fnv %016llx\n",
           name, len, n, best, len / best / 1e6, n / best, load, (unsigned long long)h);
    free(text);
    tok_free(t);
    return 0;
}
