/* sampler: turns a row of logits into the next token. Greedy when the
 * temperature is 0; otherwise temperature, then top-k, top-p and min-p
 * filtering (in that order, as transformers applies its warpers), then a
 * draw from a seeded generator, so a given seed reproduces a run. The
 * filtered distribution is also exposed (sampler_probs) because
 * speculative decoding must accept drafts against exactly it. */
#ifndef DS_SAMPLER_H
#define DS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temperature; /* <= 0: greedy */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;
} sampler_params;

typedef struct sampler sampler;

/* Validates the parameters (ranges) and allocates scratch for vocab. */
int sampler_create(sampler **out, const sampler_params *p, int vocab, char *err, size_t errlen);
void sampler_free(sampler *s);
/* New parameters (validated as sampler_create does) and a fresh generator
 * seeded from p->seed, keeping the allocation: a server reuses the one
 * sampler its drafter holds. */
int sampler_reset(sampler *s, const sampler_params *p, char *err, size_t errlen);
int sampler_is_greedy(const sampler *s);
/* Next token from logits[vocab]. */
int sampler_sample(sampler *s, const float *logits);
/* The filtered, renormalised distribution the sampler draws from
 * (probs[vocab], zeros outside the kept set). Greedy gives a one-hot. */
void sampler_probs(sampler *s, const float *logits, float *probs);
/* A uniform draw in [0, 1) from the sampler's generator. */
double sampler_uniform(sampler *s);
/* An index drawn from the non-negative weights w[0..n) summing to mass > 0
 * (a probability vector: mass 1), with the sampler's generator. */
int sampler_draw(sampler *s, const float *w, int n, double mass);

#endif
