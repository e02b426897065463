/* moe: the router rule of mixture-of-experts layers (desc.h wmoe), one
 * place for every backend and for the tests. */
#ifndef DS_MOE_H
#define DS_MOE_H

/* Row p[E] of router logits becomes its softmax (f32: max subtracted,
 * expf, the sum in index order, each divided by it); sel[K] gets the K
 * largest probabilities' experts in descending order (the lower index first
 * among equals) and w[K] their probabilities, divided by their sum (in
 * that order) when norm. */
void moe_route(float *p, int E, int K, int norm, int *sel, float *w);

#endif
