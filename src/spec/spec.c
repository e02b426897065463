/* spec: see spec.h. */
#include "spec/spec.h"
#include "spec/spec_internal.h"
#include "spec/spec_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "base/util.h"

/* A verify (at most SPEC_MAX_DRAFT + 1 rows) must take the batch-invariant
   kernels, never a backend's prefill family, and prefilling in
   prefill_chunk-row calls must cut the same groups as one call over the
   whole prompt (backend.h) */
_Static_assert(SPEC_MAX_DRAFT + 1 < BACKEND_GROUP_ROWS, "verify widths reach the prefill kernels");
_Static_assert(SPEC_MAX_DRAFT + 1 <= MODEL_SAMPLE_ROWS, "a verify has more rows than a forward samples");
_Static_assert(SPEC_PREFILL_CHUNK % BACKEND_GROUP_ROWS == 0, "prefill chunks cut the groups differently");
_Static_assert(SPEC_PREFILL_CHUNK == BACKEND_PREFILL_ROWS, "the speculative prefill's chunks are the backends'");
_Static_assert(SPEC_PROGRESS_CHUNK % BACKEND_GROUP_ROWS == 0, "progress chunks cut the groups differently");

/* The round that sampler_rows's answers out[0..k] give, its uniforms
   drawn ahead by sampler_peek: the accepted count a and the extra token *y;
   consumes the uniforms the round used (sampler_rows) */
int spec_take_rows(sampler *smp, const int *out, int k, int *y) {
    int a = 0;
    while (a < k && out[a] < 0) a++;
    *y = out[a];
    sampler_skip(smp, a < k ? a + 2 : k + 1);
    return a;
}

/* A rejected sampled draft's replacement: y ~ normalize(max(0, p - q)),
   or p itself when that leaves no mass (p == q up to rounding). r is
   scratch of vocab floats. */
static int residual_draw(sampler *smp, const float *p, const float *q, float *r, int vocab) {
    double mass = 0;
    for (int i = 0; i < vocab; i++) {
        float v = p[i] - q[i];
        r[i] = v > 0.0f ? v : 0.0f;
        mass += r[i];
    }
    if (mass <= 1e-8) {
        memcpy(r, p, sizeof(float) * (size_t)vocab);
        mass = 0;
        for (int i = 0; i < vocab; i++) mass += r[i];
    }
    return sampler_draw(smp, r, vocab, mass);
}

int spec_accept(sampler *smp, const float *logits, int vocab, const int *draft, const float *q, int k, float *p,
                float *r, int *y) {
    if (sampler_is_greedy(smp)) {
        int a = 0;
        while (a < k && op_argmax(logits + (size_t)a * vocab, vocab) == draft[a]) a++;
        *y = op_argmax(logits + (size_t)a * vocab, vocab);
        return a;
    }
    if (!q) { /* one-hot drafts: the rows' rule, with uniforms drawn ahead */
        double u[SPEC_MAX_DRAFT + 1];
        int out[SPEC_MAX_DRAFT + 1];
        sampler_peek(smp, u, k + 1);
        sampler_rows(smp, logits, k + 1, draft, u, out, 0);
        return spec_take_rows(smp, out, k, y);
    }
    for (int j = 0; j < k; j++) {
        const float *row = logits + (size_t)j * vocab;
        const float *qj = q + (size_t)j * vocab;
        int d = draft[j];
        sampler_probs(smp, row, p);
        double qd = qj[d];
        if (qd < 1e-8) qd = 1e-8;
        double u = sampler_uniform(smp);
        if (u < (double)p[d] / qd) continue; /* accepted: u < min(1, p/q) */
        *y = residual_draw(smp, p, qj, r, vocab);
        return j;
    }
    *y = sampler_sample(smp, logits + (size_t)k * vocab);
    return k;
}

/* ---- a logit processor's rows (spec.h logit_proc) ---- */

/* D (spec.h) of the processed row w into p[vocab]; w comes back masked.
   Returns p's mass (about 1), or -1 when no id is allowed. */
static double proc_dist(sampler *smp, const logit_proc *lp, float *w, int V, float *p) {
    sampler_probs(smp, w, p);
    if (lp->mask(lp->self, w) <= 0) return -1;
    double mass = 0;
    for (int i = 0; i < V; i++) {
        if (w[i] == -INFINITY) p[i] = 0.0f;
        else mass += p[i];
    }
    if (mass > 0) return mass;
    /* the filters left the allowed ids no mass: the masked row's filters */
    sampler_probs(smp, w, p);
    mass = 0;
    for (int i = 0; i < V; i++) mass += p[i];
    return mass > 0 ? mass : -1;
}

/* A draw from D for the raw row, taken into the processor's context: the
   sampler's pick of the processed row when the processor takes it, else a
   draw from the whole of D (spec.h: the two steps together draw from D).
   Returns the id, or -1 on an error. */
int spec_proc_choose(sampler *smp, const logit_proc *lp, const float *raw, int V, float *w, float *p) {
    lp->apply(lp->self, raw, w);
    const int greedy = sampler_is_greedy(smp);
    int x = greedy ? op_argmax(w, V) : sampler_sample(smp, w);
    int r = lp->accept(lp->self, x);
    if (r != 0) return r > 0 ? x : -1;
    if (greedy) {
        /* the first argmax over the allowed ids: when the unmasked first
           argmax is allowed it is that one, so the check above agrees */
        if (lp->mask(lp->self, w) <= 0) return -1;
        x = op_argmax(w, V);
    } else {
        double mass = proc_dist(smp, lp, w, V, p);
        if (mass < 0) return -1;
        x = sampler_draw(smp, p, V, mass);
    }
    return lp->accept(lp->self, x) == 1 ? x : -1;
}

/* A verify round under a processor, row by row (spec.h): logits[nd+1][V]
   raw, drafts d[nd], q[nd][V] the drafts' distributions (NULL: one-hot).
   Each accepted draft and y are taken into the processor's context.
   Returns the accepted count (y in *y), or -1 on an error. */
int spec_proc_round(sampler *smp, const logit_proc *lp, const float *logits, int V, const int *d, const float *q,
                      int nd, float *w, float *p, float *r, int *y) {
    const int greedy = sampler_is_greedy(smp);
    for (int j = 0; j <= nd; j++) {
        const float *row = logits + (size_t)j * V;
        if (j < nd && q && !greedy) { /* min(1, D(d) / q(d)), else y ~ max(0, D - q) */
            lp->apply(lp->self, row, w);
            if (proc_dist(smp, lp, w, V, p) < 0) return -1;
            const float *qj = q + (size_t)j * V;
            double qd = qj[d[j]] < 1e-8f ? 1e-8 : qj[d[j]];
            if (sampler_uniform(smp) < (double)p[d[j]] / qd) {
                if (lp->accept(lp->self, d[j]) != 1) return -1;
                continue;
            }
            *y = residual_draw(smp, p, qj, r, V);
            return lp->accept(lp->self, *y) == 1 ? j : -1;
        }
        /* greedy, or a one-hot draft: the position's own draw, compared */
        int x = spec_proc_choose(smp, lp, row, V, w, p);
        if (x < 0) return -1;
        if (j < nd && x == d[j]) continue;
        *y = x;
        return j;
    }
    return -1; /* not reached: row nd always ends the round */
}

int spec_proc_fail(const logit_proc *lp, char *err, size_t errlen) {
    const char *e = lp->error ? lp->error(lp->self) : NULL;
    return ds_err(err, errlen, "constrained decoding: %s", e && *e ? e : "no token is allowed here");
}

