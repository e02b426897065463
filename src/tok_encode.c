/* tok_encode: text to ids, following HF's pipeline (see tokenizer.c):
 * raw added tokens, normalizer, normalized added tokens, pre-tokenizer
 * steps, BPE, post-processor. All scratch lives in a per-call context, so
 * encoding is thread-safe. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"
#include "util.h"

/* Normalizes s[0..n) through the normalizer steps. Returns a malloc'd
 * string (*out_len) or NULL when nothing changes. */
char *tk_normalize(const tokenizer *t, const char *s, size_t n, size_t *out_len) {
    if (!t->n_norm || !n) return NULL;
    int ascii = 1, below_0300 = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) ascii = 0;
        if (c >= 0xCC) { /* lead bytes of U+0300 and up */
            below_0300 = 0;
            break;
        }
    }
    if (ascii) return NULL; /* every Unicode normal form leaves ASCII alone */
    char *cur = NULL;
    size_t cur_len = n;
    for (int k = 0; k < t->n_norm; k++) {
        /* NFC cannot change text below U+0300: no combining marks, no
         * composition pairs, no singletons */
        if (t->norm[k] == NORM_NFC && below_0300 && !cur) continue;
        int opts = UTF8PROC_STABLE;
        switch (t->norm[k]) {
        case NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
        case NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
        case NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        case NORM_NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)(cur ? cur : s), (utf8proc_ssize_t)cur_len,
                                          &dst, (utf8proc_option_t)opts);
        if (r < 0) { /* cannot happen on validated UTF-8; keep the text as is */
            free(dst);
            continue;
        }
        free(cur);
        cur = (char *)dst;
        cur_len = (size_t)r;
    }
    if (cur && cur_len == n && !memcmp(cur, s, n)) {
        free(cur);
        return NULL;
    }
    *out_len = cur_len;
    return cur;
}

/* ---------------------------------------------------------------- */
/* Encoding                                                           */

typedef struct {
    int id, prev, next, len; /* len 0: merged away */
} bpe_sym;

typedef struct {
    size_t s, e;
    int is_match;
} span;

typedef struct {
    const tokenizer *t;
    ivec out;
    bpe_sym *sym;
    size_t sym_cap;
    uint64_t *heap;
    size_t heap_n, heap_cap;
    sbuf word; /* byte-level string of a word, for ignore_merges */
    smap wc;   /* word cache: word bytes -> offset in wc_ids */
    ivec wc_ids; /* per cached word: count, then the ids */
    pcre2_match_data *md;
    span *lv[MAX_STEPS]; /* per pre-tokenizer level split lists */
    size_t lv_cap[MAX_STEPS];
    char *err;
    size_t errlen;
    int failed;
} enc_ctx;

static void heap_push(enc_ctx *c, uint64_t key) {
    if (c->heap_n == c->heap_cap) {
        c->heap_cap = c->heap_cap ? c->heap_cap * 2 : 256;
        c->heap = xrealloc(c->heap, c->heap_cap * sizeof *c->heap);
    }
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (c->heap[p] <= key) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = key;
}

static uint64_t heap_pop(enc_ctx *c) {
    uint64_t top = c->heap[0], last = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = (l + 1 < n && c->heap[l + 1] < c->heap[l]) ? l + 1 : l;
        if (c->heap[m] >= last) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = last;
    return top;
}

static void push_pair(enc_ctx *c, int pos) {
    int nx = c->sym[pos].next;
    if (nx < 0) return;
    const pmap_slot *m = tk_pmap_get(&c->t->merges, c->sym[pos].id, c->sym[nx].id);
    if (m) heap_push(c, ((uint64_t)m->rank << 32) | (uint32_t)pos);
}

/* BPE over one pre-tokenized word (raw bytes; the byte alphabet is
 * implied). Merges the lowest-ranked adjacent pair first, leftmost on
 * ties, exactly as HF's Word::merge_all: O(n log n) in the word length. */
static void bpe_merge(enc_ctx *c, const char *w, size_t n) {
    const tokenizer *t = c->t;
    if (!n) return;
    if (n == 1 && t->byte_id[(unsigned char)w[0]] >= 0) {
        tk_ivec_push(&c->out, t->byte_id[(unsigned char)w[0]]);
        return;
    }
    if (t->ignore_merges) { /* a whole word already in the vocab is kept as is */
        c->word.n = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char b = (unsigned char)w[i];
            tk_sbuf_add(&c->word, t->bl_utf8[b], t->bl_len[b]);
        }
        int id = tk_smap_get(&t->vocab, c->word.p, c->word.n);
        if (id >= 0) {
            tk_ivec_push(&c->out, id);
            return;
        }
    }
    if (n > c->sym_cap) {
        c->sym_cap = n * 2;
        c->sym = xrealloc(c->sym, c->sym_cap * sizeof *c->sym);
    }
    int ns = 0, pend_unk = -1, pend_unk_len = 0;
    for (size_t i = 0; i < n; i++) {
        int id = t->byte_id[(unsigned char)w[i]];
        if (id < 0) { /* not in the vocab: unk (fused if asked) or dropped, as HF */
            if (t->unk_id < 0) continue;
            if (pend_unk >= 0 && t->fuse_unk) {
                pend_unk_len++;
                continue;
            }
            if (pend_unk >= 0) {
                c->sym[ns] = (bpe_sym){pend_unk, ns - 1, -1, pend_unk_len};
                ns++;
            }
            pend_unk = t->unk_id;
            pend_unk_len = 1;
            continue;
        }
        if (pend_unk >= 0) {
            c->sym[ns] = (bpe_sym){pend_unk, ns - 1, -1, pend_unk_len};
            ns++;
            pend_unk = -1;
        }
        c->sym[ns] = (bpe_sym){id, ns - 1, -1, 1};
        ns++;
    }
    if (pend_unk >= 0) {
        c->sym[ns] = (bpe_sym){pend_unk, ns - 1, -1, pend_unk_len};
        ns++;
    }
    for (int i = 0; i + 1 < ns; i++) c->sym[i].next = i + 1;
    c->heap_n = 0;
    for (int i = 0; i + 1 < ns; i++) push_pair(c, i);
    while (c->heap_n) {
        uint64_t top = heap_pop(c);
        int pos = (int)(uint32_t)top;
        uint32_t rank = (uint32_t)(top >> 32);
        bpe_sym *s = &c->sym[pos];
        if (!s->len || s->next < 0) continue;
        bpe_sym *r = &c->sym[s->next];
        const pmap_slot *m = tk_pmap_get(&t->merges, s->id, r->id);
        if (!m || m->rank != rank) continue; /* stale: the pair changed since it was queued */
        s->id = m->id;
        s->len += r->len;
        r->len = 0;
        s->next = r->next;
        if (s->next >= 0) c->sym[s->next].prev = pos;
        if (s->prev >= 0) push_pair(c, s->prev);
        push_pair(c, pos);
    }
    for (int i = 0; i >= 0 && i < ns; i = c->sym[i].next) tk_ivec_push(&c->out, c->sym[i].id);
}

/* Words repeat, so each call keeps a cache of word -> ids (per call, so
 * nothing is shared between threads). Short words are cheaper to merge
 * than to look up; long ones are rare and would bloat the cache. */
#define WC_MIN_WORD 3
#define WC_MAX_WORD 256
#define WC_MAX_ENTRIES 65536

static void bpe_word(enc_ctx *c, const char *w, size_t n) {
    if (n < WC_MIN_WORD || n > WC_MAX_WORD) {
        bpe_merge(c, w, n);
        return;
    }
    if (!c->wc.slots) tk_smap_init(&c->wc, 1024);
    int at = tk_smap_get(&c->wc, w, n);
    if (at >= 0) {
        for (int i = 0; i < c->wc_ids.v[at]; i++) tk_ivec_push(&c->out, c->wc_ids.v[at + 1 + i]);
        return;
    }
    size_t first = c->out.n;
    bpe_merge(c, w, n);
    if (c->wc.count < WC_MAX_ENTRIES) {
        at = (int)c->wc_ids.n;
        tk_ivec_push(&c->wc_ids, (int)(c->out.n - first));
        for (size_t i = first; i < c->out.n; i++) tk_ivec_push(&c->wc_ids, c->out.v[i]);
        tk_smap_put(&c->wc, w, n, at);
    }
}

/* Finds regex matches in s[0..n) as HF's Pattern::find_matches does:
 * alternating (non-match, match) spans covering the input. */
static size_t find_matches(enc_ctx *c, int level, const pcre2_code *re, int invert, const char *s, size_t n) {
    size_t cnt = 0, prev = 0, off = 0;
#define PUSH_SPAN(a, b, m)                                                                          \
    do {                                                                                            \
        if (cnt == c->lv_cap[level]) {                                                              \
            c->lv_cap[level] = c->lv_cap[level] ? c->lv_cap[level] * 2 : 64;                        \
            c->lv[level] = xrealloc(c->lv[level], c->lv_cap[level] * sizeof(span));                 \
        }                                                                                           \
        c->lv[level][cnt++] = (span){(a), (b), (m) ^ invert};                                       \
    } while (0)
    while (off <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0 && rc != 0) {
            if (!c->failed) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                ds_err(c->err, c->errlen, "tok_encode: regex match failed: %s", (const char *)msg);
            }
            c->failed = 1;
            return 0;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: skip one char, as the Rust iterators do */
            if (ms >= n) break;
            size_t adv = 1;
            while (ms + adv < n && ((unsigned char)s[ms + adv] & 0xC0) == 0x80) adv++;
            off = ms + adv;
            continue;
        }
        if (prev != ms) PUSH_SPAN(prev, ms, 0);
        PUSH_SPAN(ms, me, 1);
        prev = off = me;
    }
    if (prev != n) PUSH_SPAN(prev, n, 0);
#undef PUSH_SPAN
    return cnt;
}

static void pre_tokenize(enc_ctx *c, int level, const char *s, size_t n);

/* Applies a split behavior to the spans of a level and recurses on each
 * resulting piece (HF's NormalizedString::split). */
static void split_and_recurse(enc_ctx *c, int level, int behavior, const char *s, size_t n) {
    const pre_step *st = &c->t->pre[level];
    size_t cnt = find_matches(c, level, st->re, st->invert, s, n);
    if (c->failed) return;
    span *sp = c->lv[level];
    size_t k = 0; /* compacted count */
    switch (behavior) {
    case SPLIT_ISOLATED:
        k = cnt;
        break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < cnt; i++)
            if (!sp[i].is_match) sp[k++] = sp[i];
        break;
    case SPLIT_CONTIGUOUS: {
        int prev = 0;
        for (size_t i = 0; i < cnt; i++) {
            int m = sp[i].is_match;
            if (m == prev && k) sp[k - 1].e = sp[i].e;
            else sp[k++] = sp[i];
            prev = m;
        }
        break;
    }
    case SPLIT_MERGED_PREV: {
        int prev = 0;
        for (size_t i = 0; i < cnt; i++) {
            int m = sp[i].is_match;
            if (m && !prev && k) sp[k - 1].e = sp[i].e;
            else sp[k++] = sp[i];
            prev = m;
        }
        break;
    }
    case SPLIT_MERGED_NEXT: {
        /* walk backwards, compacting towards the end */
        int prev = 0;
        size_t w = cnt;
        for (size_t i = cnt; i-- > 0;) {
            int m = sp[i].is_match;
            if (m && !prev && w < cnt) sp[w].s = sp[i].s;
            else sp[--w] = sp[i];
            prev = m;
        }
        memmove(sp, sp + w, (cnt - w) * sizeof *sp);
        k = cnt - w;
        break;
    }
    }
    for (size_t i = 0; i < k && !c->failed; i++) {
        /* the list of this level may be reallocated by nothing deeper (each
         * level owns its own), so sp stays valid */
        span x = c->lv[level][i];
        if (x.e > x.s) pre_tokenize(c, level + 1, s + x.s, x.e - x.s);
    }
}

static void pre_tokenize(enc_ctx *c, int level, const char *s, size_t n) {
    if (!n || c->failed) return;
    const tokenizer *t = c->t;
    if (level == t->n_pre) {
        bpe_word(c, s, n);
        return;
    }
    const pre_step *st = &t->pre[level];
    if (st->kind == PRE_SPLIT) {
        split_and_recurse(c, level, st->behavior, s, n);
        return;
    }
    /* ByteLevel: optional prefix space, optional GPT-2 split; the byte
     * mapping itself is implied by bpe_word. */
    char *tmp = NULL;
    if (st->add_prefix_space && s[0] != ' ') {
        tmp = xmalloc(n + 1);
        tmp[0] = ' ';
        memcpy(tmp + 1, s, n);
        s = tmp;
        n++;
    }
    if (st->re) split_and_recurse(c, level, SPLIT_ISOLATED, s, n);
    else pre_tokenize(c, level + 1, s, n);
    free(tmp);
}

/* Normalizes a piece that holds no raw added token, cuts out the
 * normalized added tokens, and pre-tokenizes the rest. */
static void encode_normalized(enc_ctx *c, const char *s, size_t n);

/* Cuts the added tokens of `tr` out of s (HF's AddedVocabulary::
 * find_matches); on_text receives the pieces in between. */
static void split_added(enc_ctx *c, const trie *tr, const char *s, size_t n,
                        void (*on_text)(enc_ctx *, const char *, size_t)) {
    const tokenizer *t = c->t;
    size_t start_off = 0, i = 0;
    if (!tr->count) {
        on_text(c, s, n);
        return;
    }
    while (i < n) {
        size_t mlen = 0;
        int k = tk_trie_longest(tr, s + i, n - i, &mlen);
        if (k < 0) {
            i++;
            continue;
        }
        const added_tok *a = &t->added[k];
        size_t start = i, stop = i + mlen;
        i = stop; /* the match is consumed even when rejected below */
        if (a->single_word) {
            int start_ok = start == 0 || !tk_is_word_char(tk_last_char(s, start));
            size_t adv;
            int stop_ok = stop == n || !tk_is_word_char(tk_utf8_decode_at((const unsigned char *)s + stop, n - stop, &adv));
            if (!start_ok || !stop_ok) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > start_off) {
                size_t j = ns - 1;
                while (j > start_off && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
                size_t adv;
                if (!tk_is_white_space(tk_utf8_decode_at((const unsigned char *)s + j, ns - j, &adv))) break;
                ns = j;
            }
            start = ns;
        }
        if (a->rstrip) {
            while (stop < n) {
                size_t adv;
                if (!tk_is_white_space(tk_utf8_decode_at((const unsigned char *)s + stop, n - stop, &adv))) break;
                stop += adv;
            }
            i = stop;
        }
        if (start_off < start) on_text(c, s + start_off, start - start_off);
        tk_ivec_push(&c->out, a->id);
        start_off = stop;
    }
    if (start_off < n) on_text(c, s + start_off, n - start_off);
}

static void pre_tokenize_root(enc_ctx *c, const char *s, size_t n) { pre_tokenize(c, 0, s, n); }

static void encode_normalized(enc_ctx *c, const char *s, size_t n) {
    size_t nl = 0;
    char *ns = tk_normalize(c->t, s, n, &nl);
    split_added(c, &c->t->trie_norm, ns ? ns : s, ns ? nl : n, pre_tokenize_root);
    free(ns);
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int **ids, char *err,
               size_t errlen) {
    *ids = NULL;
    if (!text && len) return ds_err(err, errlen, "tok_encode: NULL text");
    size_t bad = tk_utf8_check(text, len);
    if (bad != len) return ds_err(err, errlen, "tok_encode: input is not valid UTF-8 (byte %zu)", bad);
    enc_ctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.err = err;
    c.errlen = errlen;
    c.md = pcre2_match_data_create(1, NULL);
    if (add_special)
        for (size_t i = 0; i < t->prefix.n; i++) tk_ivec_push(&c.out, t->prefix.v[i]);
    if (len) split_added(&c, &t->trie_raw, text, len, encode_normalized);
    if (add_special)
        for (size_t i = 0; i < t->suffix.n; i++) tk_ivec_push(&c.out, t->suffix.v[i]);
    pcre2_match_data_free(c.md);
    free(c.sym);
    free(c.heap);
    free(c.word.p);
    tk_smap_free(&c.wc);
    free(c.wc_ids.v);
    for (int i = 0; i < MAX_STEPS; i++) free(c.lv[i]);
    if (c.failed) {
        free(c.out.v);
        return -1;
    }
    if (!c.out.v) c.out.v = xmalloc(sizeof(int));
    *ids = c.out.v;
    return (int)c.out.n;
}
