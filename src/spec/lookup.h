/* lookup: the prompt-lookup (n-gram) drafter. Over the context (prompt +
 * emitted ids) it finds the most recent earlier occurrence of the last n
 * ids (n from ngram_max down to ngram_min) and proposes the ids that
 * followed it. A hash table maps each n-gram to the position after its most
 * recent occurrence and is updated as ids are committed, so a proposal
 * costs O(ngram_max + k), not a scan of the context. */
#ifndef DS_LOOKUP_H
#define DS_LOOKUP_H

#include "spec/spec.h"

#define LOOKUP_MAX_NGRAM 8
/* The match class of a copy run (lookup_draft_len's g): the match goes on
 * back 8 ids or more. */
#define LOOKUP_LONG (LOOKUP_MAX_NGRAM + 1)

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
/* Match-sized drafts. Without costs the drafter proposes up to k ids
 * from any match. Given this machine's verify times t[w-1] for widths
 * w = 1..n (any unit; calibration's), it sizes each proposal by the class
 * of its match instead: its order g, or LOOKUP_LONG when the match runs
 * back 8 ids or more (a copy run: code or text the output repeats). The
 * length is the L maximising expected tokens per verify time,
 * (1 + a + a^2 + ... + a^L) / t(L + 1), against plain decoding (L = 0),
 * where a is the per-draft acceptance of that class so far (accepted
 * drafts / (accepted + rejections)), starting from a prior of a few
 * rounds; at most 8 from an n-gram match, and from a copy run up to twice
 * its length (within k). Where a wider verify costs little (a GPU) even
 * unigram matches draft and copy runs draft long; where each row costs a
 * third of a step (a small target on a CPU) only matches that have proven
 * reliable do. */
void lookup_set_costs(lookup *l, const double *t, int n);
/* The draft length the drafter would propose for a match of class g (the
 * order, or LOOKUP_LONG) with up to k ids available (k without costs). */
int lookup_draft_len(const lookup *l, int g, int k);
/* The drafter interface over l (deterministic). */
drafter lookup_drafter(lookup *l);

/* Hybrid drafting for the DSpark / DFlash modes, as mlx-dspark's lookup
 * drafts: an n-gram index rides along the neural drafter (inner) and,
 * when the context ends in a copy run (the latest earlier occurrence of
 * its last LOOKUP_HYBRID_RUN ids or more), that run's continuation is the
 * round's draft instead of the drafter's block: free, and accepted almost
 * always. q is then one-hot at each draft. reset / commit / features go to
 * both (the drafter keeps its context features whatever drafted). */
#define LOOKUP_HYBRID_RUN 5
typedef struct lookup_hybrid lookup_hybrid;
lookup_hybrid *lookup_hybrid_create(drafter inner, int vocab);
void lookup_hybrid_free(lookup_hybrid *h);
drafter lookup_hybrid_drafter(lookup_hybrid *h);
/* The context ends in a copy run now (the next proposal is lookup's). */
int lookup_hybrid_ready(lookup_hybrid *h);
/* The last proposal was lookup's (not the drafter's). */
int lookup_hybrid_last_was_lookup(const lookup_hybrid *h);
/* Proposals lookup made since the last reset (the sequence's start). */
int lookup_hybrid_rounds(const lookup_hybrid *h);

#endif
