/* tok_base: the tokenizer's building blocks: strict UTF-8 helpers, the
 * Unicode classes HF's regexes use, growable buffers, open-addressing
 * hash maps (vocab strings; merge pairs), the byte-level alphabet and the
 * added-token trie. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tok_internal.h"
#include "base/util.h"

/* ---------------------------------------------------------------- */
/* UTF-8 helpers                                                     */

/* Length of the valid UTF-8 sequence at p (n bytes available), or 0 if
 * invalid/truncated. Strict: no overlongs, surrogates or > U+10FFFF. */
static size_t utf8_seq_len(const unsigned char *p, size_t n) {
    unsigned char b = p[0];
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return (n >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (b >= 0xE0 && b <= 0xEF) {
        if (n < 3) return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80) return 0;
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (n < 4) return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        return 4;
    }
    return 0;
}

/* Returns the offset of the first invalid byte, or n when all is valid. */
size_t tk_utf8_check(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq_len(p + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

int32_t tk_utf8_decode_at(const unsigned char *p, size_t n, size_t *adv) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t k = utf8proc_iterate(p, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) {
        *adv = 1;
        return -1;
    }
    *adv = (size_t)k;
    return cp;
}

size_t tk_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Unicode White_Space (what Oniguruma's and Rust regex's \s match). */
int tk_is_white_space(int32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Approximates Rust regex's Unicode \w (Alphabetic, M, Nd, Pc, Join_Control). */
int tk_is_word_char(int32_t c) {
    if (c < 0) return 0;
    if (c == 0x200C || c == 0x200D) return 1;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* The code point that ends s[0..n), or -1. */
int32_t tk_last_char(const char *s, size_t n) {
    if (!n) return -1;
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80 && n - i < 4) i--;
    size_t adv;
    return tk_utf8_decode_at((const unsigned char *)s + i, n - i, &adv);
}

/* ---------------------------------------------------------------- */
/* Growable buffers                                                   */


void tk_ivec_push(ivec *a, int x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->v = xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = x;
}


size_t tk_sbuf_add(sbuf *b, const void *data, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n + 1) c *= 2;
        b->p = xrealloc(b->p, c);
        b->cap = c;
    }
    size_t off = b->n;
    if (n) memcpy(b->p + off, data, n);
    b->n += n;
    b->p[b->n] = 0;
    return off;
}

/* ---------------------------------------------------------------- */
/* Hash maps: string -> int (vocab), id pair -> (rank, id) (merges)  */

static uint64_t hash_bytes(const void *data, size_t n) {
    /* FNV-1a then a final avalanche so low bits are usable as a slot index */
    uint64_t h = ds_fnv1a(DS_FNV_SEED, data, n);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}




void tk_smap_init(smap *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->slots = xmalloc(cap * sizeof *m->slots);
    for (size_t i = 0; i < cap; i++) m->slots[i].len = UINT32_MAX;
    m->mask = cap - 1;
    m->count = 0;
    memset(&m->keys, 0, sizeof m->keys);
}

void tk_smap_free(smap *m) {
    free(m->slots);
    free(m->keys.p);
    memset(m, 0, sizeof *m);
}

static smap_slot *smap_find_slot(const smap *m, const char *k, size_t n, uint64_t h) {
    size_t i = (size_t)h & m->mask;
    for (;;) {
        smap_slot *s = &m->slots[i];
        if (s->len == UINT32_MAX) return s;
        if (s->hash == (uint32_t)h && s->len == n && memcmp(m->keys.p + s->off, k, n) == 0) return s;
        i = (i + 1) & m->mask;
    }
}

static void smap_grow(smap *m) {
    size_t ncap = (m->mask + 1) * 2;
    smap_slot *old = m->slots;
    size_t ocap = m->mask + 1;
    m->slots = xmalloc(ncap * sizeof *m->slots);
    for (size_t i = 0; i < ncap; i++) m->slots[i].len = UINT32_MAX;
    m->mask = ncap - 1;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].len == UINT32_MAX) continue;
        size_t j = old[i].hash & m->mask; /* only the low 32 bits are kept: fine for < 2^32 slots */
        while (m->slots[j].len != UINT32_MAX) j = (j + 1) & m->mask;
        m->slots[j] = old[i];
    }
    free(old);
}

/* Inserts or overwrites (later entries win, as in HF's HashMap collect). */
void tk_smap_put(smap *m, const char *k, size_t n, int32_t val) {
    if ((m->count + 1) * 2 > m->mask + 1) smap_grow(m);
    uint64_t h = hash_bytes(k, n);
    h &= 0xffffffffu;
    smap_slot *s = smap_find_slot(m, k, n, h);
    if (s->len == UINT32_MAX) {
        s->hash = (uint32_t)h;
        s->off = (uint32_t)tk_sbuf_add(&m->keys, k, n);
        s->len = (uint32_t)n;
        m->count++;
    }
    s->val = val;
}

int tk_smap_get(const smap *m, const char *k, size_t n) {
    if (!m->slots) return -1;
    uint64_t h = hash_bytes(k, n) & 0xffffffffu;
    const smap_slot *s = smap_find_slot(m, k, n, h);
    return s->len == UINT32_MAX ? -1 : s->val;
}



void tk_pmap_init(pmap *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->slots = xmalloc(cap * sizeof *m->slots);
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
}

/* Doubles the table (the caller keeps the load under 1/2). */
void tk_pmap_grow(pmap *m) {
    pmap_slot *old = m->slots;
    size_t ocap = m->mask + 1;
    tk_pmap_init(m, ocap);
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key != UINT64_MAX) tk_pmap_put(m, (int)(old[i].key >> 32), (int)(uint32_t)old[i].key, old[i].rank, old[i].id);
    free(old);
}

void tk_pmap_put(pmap *m, int a, int b, uint32_t rank, int id) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = (size_t)tk_hash_u64(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].id = id;
}


/* ---------------------------------------------------------------- */
/* Byte-level alphabet (GPT-2's bytes_to_unicode)                     */

static int bl_printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

/* byte -> code point, and code point (< 0x144) -> byte or -1 */
void tk_bl_tables(uint32_t b2c[256], int16_t c2b[0x144]) {
    int extra = 0;
    for (int i = 0; i < 0x144; i++) c2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        b2c[b] = bl_printable(b) ? (uint32_t)b : (uint32_t)(0x100 + extra++);
        c2b[b2c[b]] = (int16_t)b;
    }
}

/* ---------------------------------------------------------------- */
/* Added-token trie (leftmost-longest matching, like HF's Aho-Corasick) */



static int trie_new_node(trie *tr, unsigned char byte) {
    if (tr->count == tr->cap) {
        tr->cap = tr->cap ? tr->cap * 2 : 64;
        tr->n = xrealloc(tr->n, (size_t)tr->cap * sizeof *tr->n);
    }
    trie_node *x = &tr->n[tr->count];
    x->first = x->next = x->tok = -1;
    x->byte = byte;
    return tr->count++;
}

void tk_trie_add(trie *tr, const char *s, size_t n, int tok) {
    if (!tr->count) trie_new_node(tr, 0);
    int cur = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int ch = tr->n[cur].first;
        while (ch >= 0 && tr->n[ch].byte != c) ch = tr->n[ch].next;
        if (ch < 0) {
            ch = trie_new_node(tr, c);
            tr->n[ch].next = tr->n[cur].first;
            tr->n[cur].first = ch;
        }
        cur = ch;
    }
    tr->n[cur].tok = tok; /* same content twice: the later entry wins */
}

/* Longest token starting at s[0..n): returns its index and length. */
int tk_trie_longest(const trie *tr, const char *s, size_t n, size_t *mlen) {
    if (!tr->count) return -1;
    int cur = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int ch = tr->n[cur].first;
        while (ch >= 0 && tr->n[ch].byte != c) ch = tr->n[ch].next;
        if (ch < 0) break;
        cur = ch;
        if (tr->n[cur].tok >= 0) {
            best = tr->n[cur].tok;
            *mlen = i + 1;
        }
    }
    return best;
}
