/* spec_internal: the accept rules of spec.c that the stepwise loop
 * (spec_run.c) applies; not for use outside src/spec. */
#ifndef DS_SPEC_INTERNAL_H
#define DS_SPEC_INTERNAL_H

#include "spec/spec.h"

/* The round that sampler_rows's answers out[0..k] give, its uniforms
   drawn ahead by sampler_peek: the accepted count (the extra token in *y);
   consumes the uniforms the round used. */
int spec_take_rows(sampler *smp, const int *out, int k, int *y);
/* A draw from the distribution D (spec.h logit_proc) of a raw row, taken
   into the processor's context; the id, or -1 on an error. w and p are
   scratch [V]. */
int spec_proc_choose(sampler *smp, const logit_proc *lp, const float *raw, int V, float *w, float *p);
/* A verify round under a processor, row by row: logits[nd+1][V] raw,
   drafts d[nd], q[nd][V] their distributions (NULL: one-hot). Returns the
   accepted count (y in *y), or -1 on an error. */
int spec_proc_round(sampler *smp, const logit_proc *lp, const float *logits, int V, const int *d, const float *q,
                    int nd, float *w, float *p, float *r, int *y);
/* The processor's error as the loop reports it; returns -1. */
int spec_proc_fail(const logit_proc *lp, char *err, size_t errlen);

#endif
