/* grammar_internal: the lowered grammar and the matcher's state, shared by
 * grammar.c (construction, matching) and grammar_mask.c (token masks). */
#ifndef DS_GRAMMAR_INTERNAL_H
#define DS_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "text/grammar.h"

/* An element: the type in the top 2 bits, a value in the rest. A rule's
 * alternatives lie one after another in el[], each closed by GE_END. */
enum { GE_END = 0, GE_SET = 1, GE_REF = 2 };
#define GE_TYPE(e) ((e) >> 30)
#define GE_VAL(e) ((e) & 0x3fffffffu)
#define GE_MAKE(t, v) (((uint32_t)(t) << 30) | (uint32_t)(v))

struct grammar {
    uint32_t *el; /* elements */
    int nel;
    uint32_t *alt;    /* start of each alternative (index into el) */
    int *rule_alt;    /* rule r's alternatives: alt[rule_alt[r] .. rule_alt[r+1]) */
    int nrules;
    char **names;
    uint64_t (*sets)[4]; /* byte sets */
    int nsets;
    int root;
};

/* A stack node: the element to match next and the node below it (0, the
 * bottom, is the sentinel: nothing below). A head is the top node of one
 * stack; head 0 is the empty stack (the input is a complete match). */
typedef struct {
    uint32_t pos, parent;
} gm_node;

/* A hash table from 64-bit keys to 32-bit values whose reset is O(1)
 * (slots carry the generation that wrote them). */
typedef struct {
    uint64_t *key;
    uint32_t *val, *gen;
    uint32_t cap, n, cur;
} gm_htab;

/* The slot of key (its value through *val); *found says whether it was
 * there; a new slot is claimed (grown as needed) when it was not. */
uint32_t *gm_htab_get(gm_htab *h, uint64_t key, int *found);
void gm_htab_reset(gm_htab *h);
void gm_htab_free(gm_htab *h);

/* Scratch of an advance: a dedup table and a work list; with hashcons
 * set, nodes are shared by (pos, parent) (the mask walk's memo). */
typedef struct {
    uint32_t *key_pos, *key_par, *key_gen;
    uint32_t gen;
    uint32_t *work; /* pairs */
    int nwork, capwork;
    int hashcons;
    gm_htab nodes;
    uint32_t *bufs; /* 2 * GM_MAX_STACKS heads, for gm_accept_bytes */
} gm_scratch;

struct gm_state {
    const grammar *g;
    gm_node *pool;
    uint32_t npool, cappool;
    uint32_t *heads;
    int nheads, capheads;
    uint32_t live_after_compact;
    gm_scratch *scratch; /* not copied */
    char err[96];
};

/* Advances heads in[0..nin) by byte c into out (room for GM_MAX_STACKS),
 * appending nodes to *pool (grown as needed). Returns the out count (0: c
 * not accepted) or -1 on a limit (err filled). */
int gm_advance(const grammar *g, gm_node **pool, uint32_t *npool, uint32_t *cappool, gm_scratch *sc,
               const uint32_t *in, int nin, uint8_t c, uint32_t *out, char *err, size_t errlen);
gm_scratch *gm_scratch_new(void);
void gm_scratch_free(gm_scratch *sc);
/* Replaces s's heads by out[0..n) (after gm_advance on s's pool) and
 * compacts the pool when it has grown. */
void gm_commit(gm_state *s, const uint32_t *out, int n);

static inline int gm_set_has(const grammar *g, uint32_t e, uint8_t c) {
    return (int)((g->sets[GE_VAL(e)][c >> 6] >> (c & 63)) & 1u);
}

#endif
