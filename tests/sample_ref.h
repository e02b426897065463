/* The sampler's rule in double precision with a full sort (sample_ref.c). */
#ifndef DS_TEST_SAMPLE_REF_H
#define DS_TEST_SAMPLE_REF_H

#include <stdint.h>

#include "engine/sampler.h"

/* how far a uniform may be from a draw's boundary and still land on the
   other side through the samplers' float rounding */
#define REF_SLACK 1e-5

/* a uniform draw in [0, 1) from a 32-bit LCG state */
float ref_urand(uint32_t *seed);
/* n rows of V test logits (malloc'd): a flat tail in [-2, 2) and a head of
   30 tokens, (i * 7919 + j) % V for row j, at 6..12; odd rows rounded to
   halves (many exact ties, so the filters cut through tied tokens); row 4
   with one token at -inf */
float *ref_test_rows(int n, int V, uint32_t *seed);
/* a draft for row j of those: any token, or one of the row's head */
int ref_test_draft(int j, int V, uint32_t *seed);
/* out[V]: the filtered, renormalised distribution of logits l under p */
void ref_filter(const float *l, int V, sampler_params p, double *out);
/* A verify's answers got[n] for logits[n][V] against this reference: the
   number of rows that differ other than by a uniform within REF_SLACK of a
   boundary (0: all agree). qlogits NULL: one-hot drafts, sampler_rows's
   rule (accepted when u[j] < p(d), else a draw with u[j+1] from p without
   d). Else drafts with distributions (DSpark's): draft[j] must be the draw
   from the filtered qlogits row j with uq[j] (counted among the rows that
   differ if not), and got[j] spec_accept's answer (accepted when u[j] <
   p(d) / q(d), else a draw with u[j+1] from max(0, p - q)). *exact (may be
   NULL): answers equal outright; *accepted (may be NULL): rows answered -1. */
int ref_rows_check(const float *logits, const float *qlogits, int n, int V, sampler_params p, const int *draft,
                   const double *uq, const double *u, const int *got, int *exact, int *accepted);

/* the sampler under test: sampler_rows's answers got[n] for rows[n][V];
   0, or -1 with err filled */
typedef int (*rows_fn)(void *ctx, const float *rows, int n, int V, const sampler_params *p, const int *draft,
                       const double *u, int *got, char *err, size_t errlen);
/* f against the reference on test rows (ref_test_rows) of every size in
   Vs[nV] under every parameter set in ps[np]: rounds of 7 rows with drafts
   and uniforms from seed, the first a single drawn row; failures through
   test_fail (a row that differs other than at a boundary, or more than two
   rows not equal outright per size and parameters) */
void ref_rows_suite(rows_fn f, void *ctx, const int *Vs, int nV, const sampler_params *ps, int np, uint32_t seed);

#endif
