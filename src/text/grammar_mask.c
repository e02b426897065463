/* grammar_mask: the vocabulary trie and the masked walk (grammar_mask.h). */
#include "text/grammar_mask.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "text/grammar_internal.h"

/* The trie in preorder: node i's subtree is [i, end[i]); its children are
 * i+1, end[i+1], ... Node 0 is the root (no byte). */
struct gtok_trie {
    const tokenizer *tok;
    int vocab;
    size_t nnodes;
    uint8_t *byte;
    uint32_t *end;
    uint32_t *tok_off; /* tokens ending at node i: toks[tok_off[i] .. tok_off[i+1]) */
    int32_t *toks;
    int maxdepth;
    uint8_t *is_eos; /* per id */
    int *eos;
    int neos;
};

typedef struct {
    const uint8_t *b;
    size_t n;
    int id;
} tok_entry;

static int cmp_entry(const void *x, const void *y) {
    const tok_entry *a = x, *b = y;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->b, b->b, n);
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->id - b->id;
}

gtok_trie *gtok_trie_new(const tokenizer *t, const int *eos_ids, int n_eos) {
    gtok_trie *tr = xcalloc(1, sizeof *tr);
    tr->tok = t;
    tr->vocab = tok_vocab_size(t);
    tr->is_eos = xcalloc((size_t)tr->vocab + 1, 1);
    tr->eos = xmalloc(((size_t)n_eos + 1) * sizeof(int));
    for (int i = 0; i < n_eos; i++)
        if (eos_ids[i] >= 0 && eos_ids[i] < tr->vocab && !tr->is_eos[eos_ids[i]]) {
            tr->is_eos[eos_ids[i]] = 1;
            tr->eos[tr->neos++] = eos_ids[i];
        }
    tok_entry *e = xmalloc(((size_t)tr->vocab + 1) * sizeof *e);
    size_t ne = 0, total = 0;
    for (int id = 0; id < tr->vocab; id++) {
        size_t len = 0;
        const char *b = tok_token_bytes(t, id, &len);
        if (!b || !len || tok_is_special(t, id) || tr->is_eos[id]) continue;
        e[ne++] = (tok_entry){(const uint8_t *)b, len, id};
        total += len;
    }
    qsort(e, ne, sizeof *e, cmp_entry);
    /* sorted entries give the preorder directly: a new node for each byte
       past the common prefix with the previous entry */
    size_t cap = total + 1;
    tr->byte = xmalloc(cap);
    tr->end = xmalloc(cap * sizeof(uint32_t));
    uint32_t *tcount = xcalloc(cap, sizeof(uint32_t));
    size_t maxlen = 1;
    for (size_t i = 0; i < ne; i++)
        if (e[i].n > maxlen) maxlen = e[i].n;
    uint32_t *path = xmalloc((maxlen + 1) * sizeof(uint32_t)); /* node at each depth */
    size_t nn = 1, depth = 0;
    path[0] = 0;
    tr->byte[0] = 0;
    int32_t *node_of = xmalloc((ne + 1) * sizeof(int32_t));
    for (size_t i = 0; i < ne; i++) {
        size_t common = 0;
        if (i) {
            size_t m = e[i].n < e[i - 1].n ? e[i].n : e[i - 1].n;
            while (common < m && e[i].b[common] == e[i - 1].b[common]) common++;
        }
        /* close the nodes deeper than the common prefix */
        while (depth > common) tr->end[path[depth--]] = (uint32_t)nn;
        for (size_t k = common; k < e[i].n; k++) {
            tr->byte[nn] = e[i].b[k];
            path[++depth] = (uint32_t)nn++;
        }
        node_of[i] = (int32_t)path[e[i].n];
        tcount[path[e[i].n]]++;
        if ((int)e[i].n > tr->maxdepth) tr->maxdepth = (int)e[i].n;
    }
    while (depth > 0) tr->end[path[depth--]] = (uint32_t)nn;
    tr->end[0] = (uint32_t)nn;
    tr->nnodes = nn;
    tr->tok_off = xmalloc((nn + 1) * sizeof(uint32_t));
    uint32_t acc = 0;
    for (size_t i = 0; i < nn; i++) {
        tr->tok_off[i] = acc;
        acc += tcount[i];
    }
    tr->tok_off[nn] = acc;
    tr->toks = xmalloc(((size_t)acc + 1) * sizeof(int32_t));
    memset(tcount, 0, nn * sizeof(uint32_t));
    for (size_t i = 0; i < ne; i++) {
        uint32_t nd = (uint32_t)node_of[i];
        tr->toks[tr->tok_off[nd] + tcount[nd]++] = e[i].id;
    }
    free(node_of);
    free(path);
    free(tcount);
    free(e);
    return tr;
}

void gtok_trie_free(gtok_trie *tr) {
    if (!tr) return;
    free(tr->byte);
    free(tr->end);
    free(tr->tok_off);
    free(tr->toks);
    free(tr->is_eos);
    free(tr->eos);
    free(tr);
}

int gtok_trie_vocab(const gtok_trie *tr) { return tr->vocab; }
size_t gtok_trie_nodes(const gtok_trie *tr) { return tr->nnodes; }
int gtok_is_eos(const gtok_trie *tr, int id) { return id >= 0 && id < tr->vocab && tr->is_eos[id]; }

/* The walk's memory. Nodes are shared by (pos, parent) and head sets are
 * interned (sorted), so an advance is computed once per (head set, byte)
 * and then looked up: inside a string, the sets after each whole character
 * repeat, and most of the trie costs a table probe. */
struct gm_masker {
    const gtok_trie *tr;
    gm_node *pool;
    uint32_t npool, cappool;
    gm_scratch *sc;
    /* interned head sets: heads hs_heads[hs_off[i] .. hs_off[i] + hs_n[i]) */
    uint32_t *hs_heads, *hs_off, *hs_n;
    uint64_t (*hs_next)[4];
    uint32_t nhs, caphs, nheads_used, capheads_used;
    gm_htab hs_tab;  /* content hash -> set id + 1 (chained by probing on a clash) */
    gm_htab adv_tab; /* (set, byte) -> result set + 1, or UINT32_MAX: refused (sets past ROWS) */
    uint32_t *rows;  /* the same for the first ROWS sets: rows[set * 256 + byte], 0 unknown */
    uint32_t *tmp;
    struct frame {
        uint32_t cur, end, hs;
    } *fr;
};

gm_masker *gm_masker_new(const gtok_trie *tr) {
    gm_masker *m = xcalloc(1, sizeof *m);
    m->tr = tr;
    m->tmp = xmalloc(GM_MAX_STACKS * sizeof(uint32_t));
    m->fr = xmalloc((size_t)(tr->maxdepth + 2) * sizeof *m->fr);
    m->sc = gm_scratch_new();
    m->sc->gen = 1;
    m->sc->hashcons = 1;
    return m;
}

void gm_masker_free(gm_masker *m) {
    if (!m) return;
    free(m->pool);
    free(m->hs_heads);
    free(m->hs_off);
    free(m->hs_n);
    free(m->hs_next);
    gm_htab_free(&m->hs_tab);
    gm_htab_free(&m->adv_tab);
    free(m->rows);
    free(m->tmp);
    free(m->fr);
    gm_scratch_free(m->sc);
    free(m);
}

#define ROWS 4096

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* the id of head set h[0..n) (sorted here) */
static uint32_t intern(gm_masker *m, const grammar *g, uint32_t *h, int n) {
    if (n > 1) qsort(h, (size_t)n, sizeof *h, cmp_u32);
    uint64_t key = ds_fnv1a(DS_FNV_SEED, h, (size_t)n * sizeof *h);
    for (uint64_t k = key;; k = ds_mix64(k + 1)) { /* a clash moves to the next key */
        int found;
        uint32_t *slot = gm_htab_get(&m->hs_tab, k, &found);
        if (!found) {
            if (m->nhs == m->caphs) {
                m->caphs = m->caphs ? 2 * m->caphs : 256;
                m->hs_off = xrealloc(m->hs_off, m->caphs * sizeof *m->hs_off);
                m->hs_n = xrealloc(m->hs_n, m->caphs * sizeof *m->hs_n);
                m->hs_next = xrealloc(m->hs_next, m->caphs * sizeof *m->hs_next);
            }
            if (m->nheads_used + (uint32_t)n > m->capheads_used) {
                while (m->nheads_used + (uint32_t)n > m->capheads_used)
                    m->capheads_used = m->capheads_used ? 2 * m->capheads_used : 4096;
                m->hs_heads = xrealloc(m->hs_heads, m->capheads_used * sizeof *m->hs_heads);
            }
            uint32_t id = m->nhs++;
            if (id < ROWS) {
                if (!m->rows) m->rows = xmalloc((size_t)ROWS * 256 * sizeof *m->rows);
                memset(m->rows + (size_t)id * 256, 0, 256 * sizeof *m->rows);
            }
            m->hs_off[id] = m->nheads_used;
            m->hs_n[id] = (uint32_t)n;
            memcpy(m->hs_heads + m->nheads_used, h, (size_t)n * sizeof *h);
            m->nheads_used += (uint32_t)n;
            uint64_t *nx = m->hs_next[id];
            nx[0] = nx[1] = nx[2] = nx[3] = 0;
            for (int i = 0; i < n; i++) {
                if (!h[i]) continue;
                const uint64_t *st = g->sets[GE_VAL(g->el[m->pool[h[i]].pos])];
                nx[0] |= st[0], nx[1] |= st[1], nx[2] |= st[2], nx[3] |= st[3];
            }
            *slot = id + 1;
            return id;
        }
        uint32_t id = *slot - 1;
        if (m->hs_n[id] == (uint32_t)n && !memcmp(m->hs_heads + m->hs_off[id], h, (size_t)n * sizeof *h)) return id;
    }
}

int gm_token_mask(gm_masker *m, const gm_state *s, uint64_t *mask) {
    const gtok_trie *tr = m->tr;
    const grammar *g = s->g;
    memset(mask, 0, gtok_mask_words(tr->vocab) * sizeof(uint64_t));
    int count = 0;
    if (gm_is_complete(s))
        for (int i = 0; i < tr->neos; i++) {
            mask[tr->eos[i] >> 6] |= 1ull << (tr->eos[i] & 63);
            count++;
        }
    if (!gm_can_continue(s) || tr->nnodes < 2) return count;
    if (m->cappool < s->npool + 1024) {
        m->cappool = s->npool + 1024;
        m->pool = xrealloc(m->pool, m->cappool * sizeof(gm_node));
    }
    memcpy(m->pool, s->pool, s->npool * sizeof(gm_node));
    m->npool = s->npool;
    gm_htab_reset(&m->sc->nodes);
    gm_htab_reset(&m->hs_tab);
    gm_htab_reset(&m->adv_tab);
    m->nhs = 0;
    m->nheads_used = 0;
    memcpy(m->tmp, s->heads, (size_t)s->nheads * sizeof(uint32_t));
    uint32_t hs0 = intern(m, g, m->tmp, s->nheads);
    int d = 0;
    m->fr[0] = (struct frame){1, (uint32_t)tr->nnodes, hs0};
    char err[96];
    while (d >= 0) {
        struct frame *f = &m->fr[d];
        if (f->cur >= f->end) {
            d--;
            continue;
        }
        uint32_t c = f->cur, hs = f->hs;
        f->cur = tr->end[c];
        uint8_t b = tr->byte[c];
        if (!((m->hs_next[hs][b >> 6] >> (b & 63)) & 1)) continue;
        uint32_t r, *row = hs < ROWS ? m->rows + (size_t)hs * 256 + b : NULL;
        int found = 0;
        if (row) {
            r = *row;
            found = r != 0;
        } else {
            r = *gm_htab_get(&m->adv_tab, ((uint64_t)hs << 8) | b, &found);
        }
        if (!found) {
            int n = gm_advance(g, &m->pool, &m->npool, &m->cappool, m->sc, m->hs_heads + m->hs_off[hs],
                               (int)m->hs_n[hs], b, m->tmp, err, sizeof err);
            r = n <= 0 ? UINT32_MAX : intern(m, g, m->tmp, n) + 1;
            if (row) m->rows[(size_t)hs * 256 + b] = r; /* (rows never move once allocated) */
            else *gm_htab_get(&m->adv_tab, ((uint64_t)hs << 8) | b, &found) = r;
        }
        if (r == UINT32_MAX) continue;
        for (uint32_t k = tr->tok_off[c]; k < tr->tok_off[c + 1]; k++) {
            int id = tr->toks[k];
            mask[id >> 6] |= 1ull << (id & 63);
            count++;
        }
        if (tr->end[c] > c + 1) {
            const uint64_t *nx = m->hs_next[r - 1];
            if (nx[0] | nx[1] | nx[2] | nx[3]) m->fr[++d] = (struct frame){c + 1, tr->end[c], r - 1};
        }
    }
    return count;
}

int gm_accept_token(const gtok_trie *tr, gm_state *s, int id) {
    if (id < 0 || id >= tr->vocab) return 0;
    if (tr->is_eos[id]) return gm_is_complete(s);
    if (tok_is_special(tr->tok, id)) return 0;
    size_t len = 0;
    const char *b = tok_token_bytes(tr->tok, id, &len);
    if (!b || !len) return 0;
    return gm_accept_bytes(s, b, len);
}
