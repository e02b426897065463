/* tok_encode: text to ids, following HF's pipeline (see tokenizer.c):
 * raw added tokens, normalizer, normalized added tokens, pre-tokenizer
 * steps, BPE, post-processor. All scratch lives in a per-call context, so
 * encoding is thread-safe. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tok_internal.h"
#include "base/util.h"

/* Replaces every non-overlapping match of a literal or regex, left to
 * right (HF's NormalizedString::replace). Returns a malloc'd string. */
static char *replace_all(const norm_step *st, const char *s, size_t n, size_t *out_len) {
    sbuf b = {0};
    tk_sbuf_add(&b, "", 0);
    size_t i = 0;
    if (st->re) {
        pcre2_match_data *md = pcre2_match_data_create(1, NULL);
        size_t off = 0;
        while (off <= n) {
            int rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc < 0) break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) { /* empty match: nothing to replace, step one char */
                if (ov[0] >= n) break;
                size_t adv = 1;
                while (ov[0] + adv < n && ((unsigned char)s[ov[0] + adv] & 0xC0) == 0x80) adv++;
                off = ov[0] + adv;
                continue;
            }
            tk_sbuf_add(&b, s + i, ov[0] - i);
            tk_sbuf_add(&b, st->with, st->with_len);
            i = off = ov[1];
        }
        pcre2_match_data_free(md);
    } else if (st->pat_len) {
        const char *p;
        while (i < n && (p = memmem(s + i, n - i, st->pat, st->pat_len))) {
            size_t at = (size_t)(p - s);
            tk_sbuf_add(&b, s + i, at - i);
            tk_sbuf_add(&b, st->with, st->with_len);
            i = at + st->pat_len;
        }
    }
    tk_sbuf_add(&b, s + i, n - i);
    *out_len = b.n;
    return b.p;
}

/* Normalizes s[0..n) through the normalizer steps. Returns a malloc'd
 * string (*out_len) or NULL when nothing changes. */
char *tk_normalize(const tokenizer *t, const char *s, size_t n, size_t *out_len) {
    if (!t->n_norm || !n) return NULL;
    char *cur = NULL;
    size_t cur_len = n;
    for (int k = 0; k < t->n_norm; k++) {
        const norm_step *st = &t->norm[k];
        const char *in = cur ? cur : s;
        char *next = NULL;
        size_t next_len = 0;
        if (st->kind == NORM_REPLACE) {
            next = replace_all(st, in, cur_len, &next_len);
        } else if (st->kind == NORM_PREPEND) {
            if (!cur_len) continue; /* HF prepends to non-empty text only */
            next = xmalloc(st->with_len + cur_len + 1);
            memcpy(next, st->with, st->with_len);
            memcpy(next + st->with_len, in, cur_len);
            next[st->with_len + cur_len] = 0;
            next_len = st->with_len + cur_len;
        } else {
            int ascii = 1, below_0300 = 1;
            for (size_t i = 0; i < cur_len; i++) {
                unsigned char c = (unsigned char)in[i];
                if (c >= 0x80) ascii = 0;
                if (c >= 0xCC) { /* lead bytes of U+0300 and up */
                    below_0300 = 0;
                    break;
                }
            }
            if (ascii) continue; /* every Unicode normal form leaves ASCII alone */
            /* NFC cannot change text below U+0300: no combining marks, no
             * composition pairs, no singletons */
            if (st->kind == NORM_NFC && below_0300) continue;
            int opts = UTF8PROC_STABLE;
            switch (st->kind) {
            case NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
            case NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
            case NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
            case NORM_NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
            default: break;
            }
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)cur_len, &dst,
                                              (utf8proc_option_t)opts);
            if (r < 0) { /* cannot happen on validated UTF-8; keep the text as is */
                free(dst);
                continue;
            }
            next = (char *)dst;
            next_len = (size_t)r;
        }
        free(cur);
        cur = next;
        cur_len = next_len;
    }
    if (!cur || (cur_len == n && !memcmp(cur, s, n))) {
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

/* Moves the entry at i down to its place (min-heap on the key). */
static void heap_sift_down(enc_ctx *c, size_t i) {
    size_t n = c->heap_n;
    uint64_t x = c->heap[i];
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = (l + 1 < n && c->heap[l + 1] < c->heap[l]) ? l + 1 : l;
        if (c->heap[m] >= x) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    c->heap[i] = x;
}

static uint64_t heap_pop(enc_ctx *c) {
    uint64_t top = c->heap[0], last = c->heap[--c->heap_n];
    if (c->heap_n) {
        c->heap[0] = last;
        heap_sift_down(c, 0);
    }
    return top;
}

static void push_pair(enc_ctx *c, int pos) {
    int nx = c->sym[pos].next;
    if (nx < 0) return;
    const pmap_slot *m = tk_pmap_get(&c->t->merges, c->sym[pos].id, c->sym[nx].id);
    if (m) heap_push(c, ((uint64_t)m->rank << 32) | (uint32_t)pos);
}

static void add_sym(enc_ctx *c, int *ns, int id) {
    if ((size_t)*ns == c->sym_cap) {
        c->sym_cap = c->sym_cap ? c->sym_cap * 2 : 256;
        c->sym = xrealloc(c->sym, c->sym_cap * sizeof *c->sym);
    }
    c->sym[*ns] = (bpe_sym){id, *ns - 1, -1, 1};
    (*ns)++;
}

/* The initial symbols of a byte-level word: one per byte (raw bytes; the
 * byte alphabet is implied). A byte missing from the vocab becomes unk
 * (fused if asked) or is dropped, as HF. */
static int init_bytes(enc_ctx *c, const char *w, size_t n) {
    const tokenizer *t = c->t;
    int ns = 0, pend_unk = 0;
    for (size_t i = 0; i < n; i++) {
        int id = t->byte_id[(unsigned char)w[i]];
        if (id < 0) {
            if (t->unk_id < 0) continue;
            if (pend_unk && t->fuse_unk) continue;
            if (pend_unk) add_sym(c, &ns, t->unk_id);
            pend_unk = 1;
            continue;
        }
        if (pend_unk) add_sym(c, &ns, t->unk_id);
        pend_unk = 0;
        add_sym(c, &ns, id);
    }
    if (pend_unk) add_sym(c, &ns, t->unk_id);
    return ns;
}

/* The initial symbols of a SentencePiece-style word: one per character;
 * a character not in the vocab becomes its <0xNN> byte tokens
 * (byte_fallback, when all of them exist), else unk, else nothing. This
 * follows HF's BPE::merge_word to the letter, including that byte tokens
 * do not flush a pending unk. */
static int init_chars(enc_ctx *c, const char *w, size_t n) {
    const tokenizer *t = c->t;
    int ns = 0, pend_unk = 0;
    size_t i = 0;
    while (i < n) {
        size_t adv;
        int32_t cp = tk_utf8_decode_at((const unsigned char *)w + i, n - i, &adv);
        int id = cp >= 0 && cp < 0x10000 ? t->bmp_id[cp] : tk_smap_get(&t->vocab, w + i, adv);
        if (id >= 0) {
            if (pend_unk) add_sym(c, &ns, t->unk_id);
            pend_unk = 0;
            add_sym(c, &ns, id);
        } else {
            int all = t->byte_fallback;
            for (size_t k = 0; all && k < adv; k++) all = t->fb_id[(unsigned char)w[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < adv; k++) add_sym(c, &ns, t->fb_id[(unsigned char)w[i + k]]);
            } else if (t->unk_id >= 0) {
                if (pend_unk && !t->fuse_unk) add_sym(c, &ns, t->unk_id);
                pend_unk = 1;
            }
        }
        i += adv;
    }
    if (pend_unk) add_sym(c, &ns, t->unk_id);
    return ns;
}

/* BPE over one pre-tokenized word. Merges the lowest-ranked adjacent pair
 * first, leftmost on ties, exactly as HF's Word::merge_all: a priority
 * queue over (rank, position), O(n log n) in the word length. */
static void bpe_merge(enc_ctx *c, const char *w, size_t n, int whole_word) {
    const tokenizer *t = c->t;
    if (!n) return;
    if (t->byte_level && n == 1 && t->byte_id[(unsigned char)w[0]] >= 0) {
        tk_ivec_push(&c->out, t->byte_id[(unsigned char)w[0]]);
        return;
    }
    if (t->ignore_merges && whole_word) { /* a whole word already in the vocab is kept as is */
        int id;
        if (t->byte_level) {
            c->word.n = 0;
            for (size_t i = 0; i < n; i++) {
                unsigned char b = (unsigned char)w[i];
                tk_sbuf_add(&c->word, t->bl_utf8[b], t->bl_len[b]);
            }
            id = tk_smap_get(&t->vocab, c->word.p, c->word.n);
        } else {
            id = tk_smap_get(&t->vocab, w, n);
        }
        if (id >= 0) {
            tk_ivec_push(&c->out, id);
            return;
        }
    }
    int ns = t->byte_level ? init_bytes(c, w, n) : init_chars(c, w, n);
    for (int i = 0; i + 1 < ns; i++) c->sym[i].next = i + 1;
    /* the initial pairs, heapified in O(n) (long SentencePiece words run to
     * megabytes) */
    c->heap_n = 0;
    for (int i = 0; i + 1 < ns; i++) {
        const pmap_slot *m = tk_pmap_get(&t->merges, c->sym[i].id, c->sym[i + 1].id);
        if (!m) continue;
        if (c->heap_n == c->heap_cap) {
            c->heap_cap = c->heap_cap ? c->heap_cap * 2 : 256;
            c->heap = xrealloc(c->heap, c->heap_cap * sizeof *c->heap);
        }
        c->heap[c->heap_n++] = ((uint64_t)m->rank << 32) | (uint32_t)i;
    }
    for (size_t k = c->heap_n / 2; k-- > 0;) heap_sift_down(c, k);
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

/* BPE through the word cache. */
static void bpe_cached(enc_ctx *c, const char *w, size_t n, int whole_word) {
    if (n < WC_MIN_WORD || n > WC_MAX_WORD) {
        bpe_merge(c, w, n, whole_word);
        return;
    }
    if (!c->wc.slots) tk_smap_init(&c->wc, 1024);
    int at = tk_smap_get(&c->wc, w, n);
    if (at >= 0) {
        for (int i = 0; i < c->wc_ids.v[at]; i++) tk_ivec_push(&c->out, c->wc_ids.v[at + 1 + i]);
        return;
    }
    size_t first = c->out.n;
    bpe_merge(c, w, n, whole_word);
    if (c->wc.count < WC_MAX_ENTRIES) {
        at = (int)c->wc_ids.n;
        tk_ivec_push(&c->wc_ids, (int)(c->out.n - first));
        for (size_t i = first; i < c->out.n; i++) tk_ivec_push(&c->wc_ids, c->out.v[i]);
        tk_smap_put(&c->wc, w, n, at);
    }
}

/* A SentencePiece-style word is often a whole line or text (no
 * pre-tokenizer splits it). No merge joins two adjacent in-vocab chars x,
 * y unless some merge (a, b) has a ending in x and b starting with y, so
 * the word is cut at every other such boundary and the chunks (which
 * repeat, like words) go through the cache: the same ids, much faster. */
static void sp_word(enc_ctx *c, const char *w, size_t n) {
    const tokenizer *t = c->t;
    if (t->ignore_merges) { /* HF looks the whole word up first */
        int id = tk_smap_get(&t->vocab, w, n);
        if (id >= 0) {
            tk_ivec_push(&c->out, id);
            return;
        }
    }
    if (t->no_split) {
        bpe_cached(c, w, n, 0);
        return;
    }
    size_t start = 0, i = 0;
    int32_t prev = -1;
    int prev_in = 0;
    while (i < n) {
        size_t adv;
        int32_t cp = tk_utf8_decode_at((const unsigned char *)w + i, n - i, &adv);
        int in = cp >= 0 && (cp < 0x10000 ? t->bmp_id[cp] >= 0 : tk_smap_get(&t->vocab, w + i, adv) >= 0);
        if (i > start && prev_in && in && !(t->cross.slots && tk_pmap_get(&t->cross, prev, cp))) {
            bpe_cached(c, w + start, i - start, 0);
            start = i;
        }
        prev = cp;
        prev_in = in;
        i += adv;
    }
    bpe_cached(c, w + start, n - start, 0);
}

static void bpe_word(enc_ctx *c, const char *w, size_t n) {
    if (!c->t->byte_level) sp_word(c, w, n);
    else bpe_cached(c, w, n, 1);
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

static void pre_tokenize(enc_ctx *c, int level, const char *s, size_t n, int first);

/* Applies a split behavior to the spans of a level and recurses on each
 * resulting piece (HF's NormalizedString::split). */
static void split_and_recurse(enc_ctx *c, int level, int behavior, const char *s, size_t n, int first) {
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
        if (x.e > x.s) pre_tokenize(c, level + 1, s + x.s, x.e - x.s, first && x.s == 0);
    }
}

/* Metaspace: spaces become the replacement char, which is prepended per
 * the scheme ("first": only to the piece at the start of the input);
 * with split, each replacement char starts a new piece (MergedWithNext). */
static void metaspace(enc_ctx *c, int level, const pre_step *st, const char *s, size_t n, int first) {
    sbuf b = {0};
    size_t rl = (size_t)st->rep_len;
    int starts = n >= rl && !memcmp(s, st->rep, rl);
    if (!starts && (st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && first)))
        tk_sbuf_add(&b, st->rep, rl);
    size_t i = 0;
    for (size_t j = 0; j < n; j++) {
        if (s[j] != ' ') continue;
        tk_sbuf_add(&b, s + i, j - i);
        tk_sbuf_add(&b, st->rep, rl);
        i = j + 1;
    }
    tk_sbuf_add(&b, s + i, n - i);
    if (!st->split) {
        pre_tokenize(c, level + 1, b.p, b.n, first);
    } else {
        size_t from = 0;
        for (size_t j = 1; j + rl <= b.n; j++) {
            if (memcmp(b.p + j, st->rep, rl) != 0) continue;
            pre_tokenize(c, level + 1, b.p + from, j - from, first && from == 0);
            from = j;
        }
        pre_tokenize(c, level + 1, b.p + from, b.n - from, first && from == 0);
    }
    free(b.p);
}

static void pre_tokenize(enc_ctx *c, int level, const char *s, size_t n, int first) {
    if (!n || c->failed) return;
    const tokenizer *t = c->t;
    if (level == t->n_pre) {
        bpe_word(c, s, n);
        return;
    }
    const pre_step *st = &t->pre[level];
    if (st->kind == PRE_SPLIT) {
        split_and_recurse(c, level, st->behavior, s, n, first);
        return;
    }
    if (st->kind == PRE_METASPACE) {
        metaspace(c, level, st, s, n, first);
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
    if (st->re) split_and_recurse(c, level, SPLIT_ISOLATED, s, n, first);
    else pre_tokenize(c, level + 1, s, n, first);
    free(tmp);
}

/* Normalizes a piece that holds no raw added token, cuts out the
 * normalized added tokens, and pre-tokenizes the rest. */
static void encode_normalized(enc_ctx *c, const char *s, size_t n, int first);

/* Cuts the added tokens of `tr` out of s (HF's AddedVocabulary::
 * find_matches); on_text receives the pieces in between. */
static void split_added(enc_ctx *c, const trie *tr, const char *s, size_t n, int first,
                        void (*on_text)(enc_ctx *, const char *, size_t, int)) {
    const tokenizer *t = c->t;
    size_t start_off = 0, i = 0;
    if (!tr->count) {
        on_text(c, s, n, first);
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
        if (start_off < start) on_text(c, s + start_off, start - start_off, first && start_off == 0);
        tk_ivec_push(&c->out, a->id);
        start_off = stop;
    }
    if (start_off < n) on_text(c, s + start_off, n - start_off, first && start_off == 0);
}

static void pre_tokenize_root(enc_ctx *c, const char *s, size_t n, int first) { pre_tokenize(c, 0, s, n, first); }

static void encode_normalized(enc_ctx *c, const char *s, size_t n, int first) {
    size_t nl = 0;
    char *ns = tk_normalize(c->t, s, n, &nl);
    split_added(c, &c->t->trie_norm, ns ? ns : s, ns ? nl : n, first, pre_tokenize_root);
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
    if (len) split_added(&c, &t->trie_raw, text, len, 1, encode_normalized);
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
