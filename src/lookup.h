/* lookup: the prompt-lookup (n-gram) drafter. Over the context (prompt +
 * emitted ids) it finds the most recent earlier occurrence of the last n
 * ids (n from ngram_max down to ngram_min) and proposes the ids that
 * followed it. A hash table maps each n-gram to the position after its most
 * recent occurrence and is updated as ids are committed, so a proposal
 * costs O(ngram_max + k), not a scan of the context. */
#ifndef DS_LOOKUP_H
#define DS_LOOKUP_H

#include "spec.h"

#define LOOKUP_MAX_NGRAM 8

typedef struct lookup lookup;

/* 1 <= ngram_min <= ngram_max <= LOOKUP_MAX_NGRAM (clamped). */
lookup *lookup_create(int ngram_max, int ngram_min);
void lookup_free(lookup *l);
void lookup_reset(lookup *l, const int *ids, int n);
void lookup_push(lookup *l, const int *ids, int n);
int lookup_len(const lookup *l);
/* Up to k ids continuing the context into out; returns the count (0 when
 * no n-gram of the suffix occurred before). *n_used: the matched n (or 0). */
int lookup_propose(lookup *l, int k, int *out, int *n_used);
/* The drafter interface over l (deterministic). */
drafter lookup_drafter(lookup *l);

#endif
