/* fuzz_textstream: libFuzzer target for the streaming text filters
 * (think.c, stopstr.c). Input layout: byte 0 holds flags (bit 0:
 * prefilled; bits 1-2: markers: Qwen, Gemma-4, custom, none; bits 3-4: the
 * number of stop strings), byte 1 seeds the chunking; then NUL-terminated
 * fields: the custom opener and closer (when chosen), the stop strings;
 * everything after them is the text. Checks, for a pseudo-random chunking:
 *  - the reasoning splitter's concatenated releases equal think_split_all
 *    (or, where only the whole-text closer-without-opener rule applies,
 *    the whole text as answer);
 *  - the stop matcher's output equals a whole-text reference (earliest
 *    match, shortest on a tie, then the first listed) and it never holds
 *    more than the longest stop string's length - 1 plus a split UTF-8
 *    sequence;
 *  - when the text (and the markers) are valid UTF-8, every single release
 *    is valid UTF-8 (for the stop matcher: when it has stop strings; with
 *    none it passes chunks through as they come). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/stopstr.h"
#include "base/strbuf.h"
#include "text/think.h"
#include "base/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const strbuf *a, const strbuf *b) { return a->n == b->n && !memcmp(sb_str(a), sb_str(b), a->n); }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Whether think_split_all's closer-without-opener rule applies. */
static int rule_applies(const char *t, size_t n, const char *open, const char *close, int prefilled) {
    if (prefilled || !open) return 0;
    size_t ol = strlen(open), cl = strlen(close), i = 0;
    while (i < n && is_ws(t[i])) i++;
    if (n - i >= ol && !memcmp(t + i, open, ol)) return 0;
    const char *c = n ? memmem(t, n, close, cl) : NULL;
    return c && !memmem(t, (size_t)(c - t), open, ol);
}

static uint32_t next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Next field of the input: up to a NUL (consumed) or the end. */
static const char *field(const char **p, const char *end) {
    const char *z = memchr(*p, 0, (size_t)(end - *p));
    if (!z) {
        *p = end;
        return NULL;
    }
    const char *f = *p;
    *p = z + 1;
    return f;
}

static void check_think(const char *text, size_t n, const char *open, const char *close, int prefilled, uint8_t seed) {
    int valid = ds_utf8_valid(text, n) && (!open || (ds_utf8_valid(open, strlen(open)) && ds_utf8_valid(close, strlen(close))));
    strbuf r = {0}, a = {0}, wr = {0}, wa = {0};
    think_split t;
    think_init(&t, open, close, prefilled);
    uint32_t st = seed;
    size_t maxc = 1 + seed % 24;
    for (size_t i = 0; i < n;) {
        size_t k = 1 + next(&st) % maxc;
        if (k > n - i) k = n - i;
        size_t r0 = r.n, a0 = a.n;
        think_push(&t, text + i, k, &r, &a);
        if (valid && (!ds_utf8_valid(sb_str(&r) + r0, r.n - r0) || !ds_utf8_valid(sb_str(&a) + a0, a.n - a0))) __builtin_trap();
        i += k;
    }
    size_t r0 = r.n, a0 = a.n;
    think_finish(&t, &r, &a);
    if (valid && (!ds_utf8_valid(sb_str(&r) + r0, r.n - r0) || !ds_utf8_valid(sb_str(&a) + a0, a.n - a0))) __builtin_trap();
    if (think_in_reasoning(&t) && t.held.n) __builtin_trap();
    think_free(&t);
    if (rule_applies(text, n, open, close, prefilled)) {
        /* streaming: all answer; whole text: as if prefilled */
        sb_append(&wa, text, n);
        strbuf pr = {0}, pa = {0}, qr = {0}, qa = {0};
        think_split_all(text, n, open, close, 0, &pr, &pa);
        think_split_all(text, n, open, close, 1, &qr, &qa);
        if (!same(&pr, &qr) || !same(&pa, &qa)) __builtin_trap();
        sb_free(&pr);
        sb_free(&pa);
        sb_free(&qr);
        sb_free(&qa);
    } else {
        think_split_all(text, n, open, close, prefilled, &wr, &wa);
    }
    if (!same(&r, &wr) || !same(&a, &wa)) __builtin_trap();
    sb_free(&r);
    sb_free(&a);
    sb_free(&wr);
    sb_free(&wa);
}

static void check_stops(const char *text, size_t n, const char *const *stops, int k, uint8_t seed) {
    size_t maxlen = 0;
    for (int i = 0; i < k; i++)
        if (strlen(stops[i]) > maxlen) maxlen = strlen(stops[i]);
    int valid = maxlen && ds_utf8_valid(text, n); /* no stop strings: a plain pass-through */
    /* the reference */
    int want = -1;
    size_t keep = n;
    for (size_t at = 0; at < n && want < 0; at++)
        for (int i = 0; i < k; i++) {
            size_t l = strlen(stops[i]);
            if (l && l <= n - at && !memcmp(text + at, stops[i], l) && (want < 0 || l < strlen(stops[want]))) {
                want = i;
                keep = at;
            }
        }
    if (want >= 0) keep = utf8_cut_before(text, n, keep);
    /* streamed */
    stop_matcher m;
    stop_init(&m, stops, k);
    strbuf out = {0};
    uint32_t st = seed * 7u + 1u;
    size_t maxc = 1 + seed % 40;
    int hit = 0;
    for (size_t i = 0; i < n && !hit;) {
        size_t c = 1 + next(&st) % maxc;
        if (c > n - i) c = n - i;
        size_t o0 = out.n;
        hit = stop_push(&m, text + i, c, &out);
        if (valid && !ds_utf8_valid(sb_str(&out) + o0, out.n - o0)) __builtin_trap();
        if (!hit && maxlen && m.held.n > maxlen - 1 + 3) __builtin_trap();
        if (!maxlen && m.held.n) __builtin_trap();
        i += c;
    }
    if (!hit) {
        size_t o0 = out.n;
        stop_flush(&m, &out);
        if (valid && !ds_utf8_valid(sb_str(&out) + o0, out.n - o0)) __builtin_trap();
    }
    if (out.n != keep || memcmp(sb_str(&out), text, keep)) __builtin_trap();
    if (want < 0 ? stop_which(&m) != NULL : !stop_which(&m) || strcmp(stop_which(&m), stops[want]))
        __builtin_trap();
    stop_free(&m);
    sb_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int flags = data[0];
    uint8_t seed = data[1];
    const char *p = (const char *)data + 2, *end = (const char *)data + size;
    const char *open = NULL, *close = NULL;
    switch ((flags >> 1) & 3) {
    case 0: open = "<think>", close = "</think>"; break;
    case 1: open = "<|channel>thought\n", close = "<channel|>"; break;
    case 2:
        open = field(&p, end);
        close = field(&p, end);
        if (!open || !close || !*open || !*close) open = close = NULL;
        break;
    default: break;
    }
    const char *stops[3];
    int k = 0;
    for (int i = 0; i < ((flags >> 3) & 3); i++) {
        const char *f = field(&p, end);
        if (f) stops[k++] = f;
    }
    size_t n = (size_t)(end - p);
    char *text = malloc(n + 1); /* own copy: exact size, NUL-terminated */
    memcpy(text, p, n);
    text[n] = 0;

    check_think(text, n, open, close, flags & 1, seed);
    check_stops(text, n, stops, k, seed);

    const char *o, *c;
    think_markers_for_template(text, &o, &c);
    int pre = think_prompt_prefilled(text, n, open, close);
    if (pre && !open) __builtin_trap();
    free(text);
    return 0;
}
