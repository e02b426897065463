/* sampler: turns a row of logits into the next token. Greedy when the
 * temperature is 0; otherwise temperature, then top-k, top-p and min-p
 * filtering (in that order, as transformers applies its warpers), then a
 * draw from a seeded generator, so a given seed reproduces a run. The
 * filtered distribution is also exposed (sampler_probs) because
 * speculative decoding must accept drafts against exactly it.
 *
 * A draw walks the kept tokens in id order, adding their weights
 * exp((logit - max) / T) until the running sum passes u times the kept
 * mass, u uniform in [0, 1); the GPU's sampler (model_batch.smp) follows
 * the same rule. */
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
/* The next n uniform draws into u without consuming them; sampler_skip
 * consumes n (so a caller can draw ahead and keep only what it used). */
void sampler_peek(sampler *s, double *u, int n);
void sampler_skip(sampler *s, int n);
/* The parameters in effect (top_p 1 when it was given as 0). */
const sampler_params *sampler_get_params(const sampler *s);
/* A speculative verify's rows, sampled with given uniforms: logits[n][vocab],
 * draft[n-1] the token fed after row j (the draft row j judges), u[n].
 * Row j < n-1: out[j] = -1 when the draft is accepted (u[j] < p_j(draft)),
 * else a draw with u[j+1] from p_j without the draft (from p_j when that
 * leaves no mass). Row n-1: a draw from p_{n-1} with u[n-1]. The first row
 * with out[j] >= 0 ends the round; a round ending at row a < n-1 used a + 2
 * uniforms, one that accepted every draft n. s samples (not greedy: a
 * greedy round compares drafts with op_argmax).
 * With all 0 the rows after the round's end are not sampled (out -2 there),
 * as a round needs; a GPU answers every row anyway. */
void sampler_rows(sampler *s, const float *logits, int n, const int *draft, const double *u, int *out, int all);
/* An index drawn from the non-negative weights w[0..n) summing to mass > 0
 * (a probability vector: mass 1), with the sampler's generator. */
int sampler_draw(sampler *s, const float *w, int n, double mass);

#endif
