/* sampler-bench: milliseconds per row of the host sampler's filtered
 * distribution (sampler_probs, as speculative acceptance and the sampled
 * drafters call it) on one row of logits of vocabulary V, for the common
 * sampling settings: logits uniform in [-10, 10] with two tokens well
 * above (a flat tail: the costly case for top-p), mean of N rows.
 *   sampler-bench [V=151936] [N=200] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/sampler.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int V = argc > 1 ? atoi(argv[1]) : 151936, N = argc > 2 ? atoi(argv[2]) : 200;
    if (V < 600 || N < 1) {
        fprintf(stderr, "usage: sampler-bench [V >= 600] [N >= 1]\n");
        return 2;
    }
    float *l = malloc(sizeof(float) * V), *p = malloc(sizeof(float) * V);
    uint64_t r = 1;
    for (int i = 0; i < V; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        l[i] = (float)((r >> 40) / 16777216.0) * 20.0f - 10.0f;
    }
    l[123] = 25.0f;
    l[456] = 24.0f;
    const sampler_params ps[] = {{.temperature = 0.7f, .top_p = 1.0f},
                                 {.temperature = 1.0f, .top_p = 1.0f},
                                 {.temperature = 0.7f, .top_k = 20, .top_p = 1.0f},
                                 {.temperature = 0.7f, .top_p = 0.95f},
                                 {.temperature = 1.0f, .top_p = 0.95f},
                                 {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f},
                                 {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f}};
    printf("vocab %d, %d rows each\n| temperature | top-k | top-p | min-p | ms per row |\n|---|---|---|---|---|\n", V, N);
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        sampler *s;
        char err[200];
        if (sampler_create(&s, &ps[k], V, err, sizeof err) != 0) {
            fprintf(stderr, "sampler-bench: %s\n", err);
            return 1;
        }
        sampler_probs(s, l, p); /* warm */
        double t0 = now();
        for (int i = 0; i < N; i++) sampler_probs(s, l, p);
        printf("| %.1f | %d | %.2f | %.2f | %.3f |\n", (double)ps[k].temperature, ps[k].top_k, (double)ps[k].top_p,
               (double)ps[k].min_p, (now() - t0) / N * 1e3);
        sampler_free(s);
    }
    free(l);
    free(p);
    return 0;
}
