/* The sampler's rule in double precision with a full sort (sample_ref.c). */
#ifndef DS_TEST_SAMPLE_REF_H
#define DS_TEST_SAMPLE_REF_H

#include "sampler.h"

/* how far a uniform may be from a draw's boundary and still land on the
   other side through the samplers' float rounding */
#define REF_SLACK 1e-5

/* out[V]: the filtered, renormalised distribution of logits l under p */
void ref_filter(const float *l, int V, sampler_params p, double *out);
/* sampler_rows's answers got[n] for logits[n][V] against this reference:
   the number of rows that differ other than by a uniform within REF_SLACK
   of a boundary (0: all agree); *exact (may be NULL): rows equal outright */
int ref_rows_check(const float *logits, int n, int V, sampler_params p, const int *draft, const double *u,
                   const int *got, int *exact);

#endif
