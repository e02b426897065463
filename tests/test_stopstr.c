/* Tests for the stop-string matcher (stopstr.c): one and several stop
 * strings, overlapping prefixes, matches straddling chunks, the earliest
 * match across strings (waiting for a longer one that began earlier), the
 * held tail released at flush, the hold bound, UTF-8 safety of every
 * release, the pass-through with no stop strings, and every fixed chunk
 * size against a whole-text reference. */
#include <stdlib.h>
#include <string.h>

#include "text/stopstr.h"
#include "base/strbuf.h"
#include "test.h"
#include "base/util.h"


/* Whole-text reference: the earliest occurrence of any stop string (the
 * shortest on a tie, then the first listed). Returns its index or -1;
 * *keep: the length of the text before it. */
static int reference(const char *text, const char *const *stops, int k, size_t *keep) {
    size_t n = strlen(text);
    for (size_t at = 0; at < n; at++) {
        int best = -1;
        for (int i = 0; i < k; i++) {
            size_t l = strlen(stops[i]);
            if (l && l <= n - at && !memcmp(text + at, stops[i], l) && (best < 0 || l < strlen(stops[best]))) best = i;
        }
        if (best >= 0) {
            *keep = at;
            return best;
        }
    }
    *keep = n;
    return -1;
}

/* Streams text in chunks of `chunk`, pushing until a match; checks each
 * release is valid UTF-8 when the text is, and returns the matched string. */
static const char *run_chunks(const char *text, const char *const *stops, int k, size_t chunk, strbuf *out,
                              stop_matcher *m) {
    size_t n = strlen(text);
    int valid = ds_utf8_valid(text, n);
    stop_init(m, stops, k);
    int hit = 0;
    for (size_t i = 0; i < n && !hit; i += chunk) {
        size_t o0 = out->n;
        hit = stop_push(m, text + i, n - i < chunk ? n - i : chunk, out);
        if (valid) CHECK_MSG(ds_utf8_valid(sb_str(out) + o0, out->n - o0), "partial UTF-8 released (chunk %zu)", chunk);
    }
    if (!hit) stop_flush(m, out);
    if (stop_matched(m)) { /* later pushes append nothing */
        size_t o = out->n;
        CHECK_EQ_INT(stop_push(m, "more", 4, out), 1);
        CHECK_EQ_INT(out->n, o);
    }
    return stop_which(m);
}

static void expect(const char *text, const char *const *stops, int k, const char *want_out, const char *want_which) {
    size_t n = strlen(text);
    for (size_t chunk = 1; chunk <= n; chunk++) {
        strbuf out = {0};
        stop_matcher m;
        const char *w = run_chunks(text, stops, k, chunk, &out, &m);
        CHECK_MSG(!strcmp(sb_str(&out), want_out), "[%s] chunk %zu: out [%s] want [%s]", text, chunk, sb_str(&out),
                  want_out);
        CHECK_MSG(want_which ? w && !strcmp(w, want_which) : !w, "[%s] chunk %zu: matched [%s] want [%s]", text, chunk,
                  w ? w : "(none)", want_which ? want_which : "(none)");
        stop_free(&m);
        sb_free(&out);
    }
}

TEST(stopstr_single) {
    const char *s[] = {"END"};
    expect("helloENDworld", s, 1, "hello", "END");
    expect("END", s, 1, "", "END");
    expect("helloEN", s, 1, "helloEN", NULL);
    strbuf out = {0};
    stop_matcher m;
    stop_init(&m, s, 1);
    CHECK_EQ_INT(stop_push(&m, "abcEN", 5, &out), 0);
    CHECK(!strcmp(sb_str(&out), "abc"));
    CHECK_EQ_INT(stop_push(&m, "Dxyz", 4, &out), 1);
    CHECK(!strcmp(sb_str(&out), "abc"));
    CHECK_EQ_INT(stop_matched(&m), 1);
    CHECK(!strcmp(stop_which(&m), "END"));
    CHECK_EQ_INT(stop_push(&m, "later", 5, &out), 1);
    stop_flush(&m, &out);
    CHECK(!strcmp(sb_str(&out), "abc"));
    stop_free(&m);
    sb_free(&out);
}

TEST(stopstr_multiple) {
    const char *s[] = {"\n\n", "User:"};
    expect("Hi there\nUser: x\n\n", s, 2, "Hi there\n", "User:");
    expect("Hi there\n\nUser: x", s, 2, "Hi there", "\n\n");
    expect("no stop here\n", s, 2, "no stop here\n", NULL);
}

TEST(stopstr_overlapping_prefixes) {
    const char *s[] = {"abc", "ab", "b"};
    expect("xabcd", s, 3, "x", "ab"); /* "ab" and "abc" both at 1: the shorter */
    expect("xbab", s, 3, "x", "b");
    expect("xaab", s, 3, "xa", "ab");
    const char *s2[] = {"aab"};
    expect("aaaab!", s2, 1, "aa", "aab"); /* KMP fallback inside a run */
    const char *s3[] = {"abab", "bac"};
    expect("ababac", s3, 2, "", "abab");
    expect("abac", s3, 2, "a", "bac");
}

TEST(stopstr_straddle) {
    const char *s[] = {"STOP"};
    strbuf out = {0};
    stop_matcher m;
    stop_init(&m, s, 1);
    CHECK_EQ_INT(stop_push(&m, "abcST", 5, &out), 0);
    CHECK(!strcmp(sb_str(&out), "abc"));
    CHECK_EQ_INT(stop_push(&m, "O", 1, &out), 0);
    CHECK(!strcmp(sb_str(&out), "abc"));
    CHECK_EQ_INT(stop_push(&m, "Pxyz", 4, &out), 1);
    CHECK(!strcmp(sb_str(&out), "abc"));
    stop_free(&m);
    sb_free(&out);
    expect("abcSTOSTOPxyz", s, 1, "abcSTO", "STOP");
}

TEST(stopstr_earliest_across_strings) {
    const char *s[] = {"world", "lo w"};
    expect("hello world", s, 2, "hel", "lo w");
    /* "bc" is complete first, but "abcd" began earlier and may still match */
    const char *s2[] = {"bc", "abcd"};
    strbuf out = {0};
    stop_matcher m;
    stop_init(&m, s2, 2);
    CHECK_EQ_INT(stop_push(&m, "xab", 3, &out), 0);
    CHECK(!strcmp(sb_str(&out), "x"));
    CHECK_EQ_INT(stop_push(&m, "c", 1, &out), 0); /* waiting on "abcd" */
    CHECK(!strcmp(sb_str(&out), "x"));
    CHECK_EQ_INT(stop_push(&m, "d", 1, &out), 1);
    CHECK(!strcmp(sb_str(&out), "x"));
    CHECK(!strcmp(stop_which(&m), "abcd"));
    stop_free(&m);
    sb_clear(&out);
    stop_init(&m, s2, 2);
    CHECK_EQ_INT(stop_push(&m, "xabc", 4, &out), 0);
    CHECK_EQ_INT(stop_push(&m, "e", 1, &out), 1);
    CHECK(!strcmp(sb_str(&out), "xa"));
    CHECK(!strcmp(stop_which(&m), "bc"));
    stop_free(&m);
    sb_clear(&out);
    /* generation ends while waiting: the complete match is final */
    stop_init(&m, s2, 2);
    CHECK_EQ_INT(stop_push(&m, "xabc", 4, &out), 0);
    stop_flush(&m, &out);
    CHECK(!strcmp(sb_str(&out), "xa"));
    CHECK_EQ_INT(stop_matched(&m), 1);
    CHECK(!strcmp(stop_which(&m), "bc"));
    stop_free(&m);
    sb_free(&out);
    expect("xabcd", s2, 2, "x", "abcd");
    expect("xabce", s2, 2, "xa", "bc");
}

TEST(stopstr_no_match_flush) {
    const char *s[] = {"xyz", "<|end|>"};
    strbuf out = {0};
    stop_matcher m;
    stop_init(&m, s, 2);
    CHECK_EQ_INT(stop_push(&m, "abcx", 4, &out), 0);
    CHECK(!strcmp(sb_str(&out), "abc"));
    CHECK_EQ_INT(stop_push(&m, "y <|en", 6, &out), 0);
    CHECK(!strcmp(sb_str(&out), "abcxy "));
    stop_flush(&m, &out);
    CHECK(!strcmp(sb_str(&out), "abcxy <|en"));
    CHECK_EQ_INT(stop_matched(&m), 0);
    CHECK(stop_which(&m) == NULL);
    stop_free(&m);
    sb_free(&out);
}

TEST(stopstr_hold_bound) {
    const char *s[] = {"abcdef", "q"};
    strbuf out = {0};
    stop_matcher m;
    stop_init(&m, s, 2);
    CHECK_EQ_INT(stop_push(&m, "xxabcde", 7, &out), 0);
    CHECK(!strcmp(sb_str(&out), "xx"));
    CHECK_EQ_INT(m.held.n, 5);
    CHECK_EQ_INT(stop_push(&m, "g", 1, &out), 0);
    CHECK(!strcmp(sb_str(&out), "xxabcdeg"));
    CHECK_EQ_INT(m.held.n, 0);
    stop_free(&m);
    sb_free(&out);
}

TEST(stopstr_utf8) {
    const char *s[] = {"\xe4\xbd\xa0"}; /* 你 */
    expect("\xc3\xa9\xe4\xbd\xa0\xe5\xa5\xbd", s, 1, "\xc3\xa9", "\xe4\xbd\xa0");
    const char *s2[] = {"zz"};
    const char *text = "\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80!";
    expect(text, s2, 1, text, NULL); /* every release valid at every chunk size */
    /* an incomplete sequence is held even when it cannot begin a stop */
    strbuf out = {0};
    stop_matcher m;
    stop_init(&m, s2, 1);
    stop_push(&m, "a\xf0\x9f", 3, &out);
    CHECK(!strcmp(sb_str(&out), "a"));
    stop_push(&m, "\x98\x80", 2, &out);
    CHECK(!strcmp(sb_str(&out), "a\xf0\x9f\x98\x80"));
    stop_free(&m);
    sb_free(&out);
    /* a stop string that is a bare continuation byte cuts before the character */
    const char *s3[] = {"\xa9"};
    expect("a\xc3\xa9z", s3, 1, "a", "\xa9");
    /* the cut helper itself */
    const char *e = "a\xe4\xbd\xa0";
    CHECK_EQ_INT(utf8_cut_before(e, 4, 4), 4);
    CHECK_EQ_INT(utf8_cut_before(e, 3, 3), 1);
    CHECK_EQ_INT(utf8_cut_before(e, 4, 2), 1);
    CHECK_EQ_INT(utf8_cut_before(e, 4, 1), 1);
    CHECK_EQ_INT(utf8_cut_before("\xe4z", 2, 1), 1); /* malformed: not held */
    CHECK_EQ_INT(utf8_cut_before("\xe4", 1, 1), 0);
    CHECK_EQ_INT(utf8_cut_before("\x80\x80", 2, 1), 1);
}

TEST(stopstr_empty_list) {
    strbuf out = {0};
    stop_matcher m;
    stop_init(&m, NULL, 0);
    CHECK_EQ_INT(stop_push(&m, "a\xc3", 2, &out), 0);
    CHECK_EQ_INT(out.n, 2); /* passed through unchanged, even a partial sequence */
    CHECK_EQ_INT(stop_push(&m, "\xa9", 1, &out), 0);
    stop_flush(&m, &out);
    CHECK(!strcmp(sb_str(&out), "a\xc3\xa9"));
    CHECK_EQ_INT(stop_matched(&m), 0);
    stop_free(&m);
    sb_clear(&out);
    const char *s[] = {"", ""};
    stop_init(&m, s, 2);
    CHECK_EQ_INT(m.n, 0);
    CHECK_EQ_INT(stop_push(&m, "abc", 3, &out), 0);
    CHECK(!strcmp(sb_str(&out), "abc"));
    stop_free(&m);
    sb_clear(&out);
    const char *s2[] = {"", "b"};
    stop_init(&m, s2, 2);
    CHECK_EQ_INT(stop_push(&m, "abc", 3, &out), 1);
    CHECK(!strcmp(sb_str(&out), "a"));
    CHECK(!strcmp(stop_which(&m), "b"));
    stop_free(&m);
    sb_free(&out);
}

TEST(stopstr_chunkings_match_reference) {
    const char *texts[] = {
        "The answer is 42.\n\nUser: next question",
        "aaaaabaaaabaaab",
        "abababababc",
        "<|im_end|> at the start",
        "no stops at all in this one",
        "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\xe5\xa5\xbd!",
    };
    const char *stops[] = {"\n\nUser:", "aab", "ababc", "<|im_end|>", "\xe5\xa5\xbd!", "baa", "42."};
    const int k = (int)(sizeof stops / sizeof *stops);
    int checked = 0;
    for (size_t ti = 0; ti < sizeof texts / sizeof *texts; ti++)
        for (int first = 0; first < k; first++) /* subsets of stops: [first, k) and {first} */
            for (int one = 0; one < 2; one++) {
                const char *const *ss = stops + first;
                int nk = one ? 1 : k - first;
                size_t keep;
                int want = reference(texts[ti], ss, nk, &keep);
                char *want_out = strndup(texts[ti], keep);
                expect(texts[ti], ss, nk, want_out, want >= 0 ? ss[want] : NULL);
                free(want_out);
                checked++;
            }
    CHECK_EQ_INT(checked, 6 * 7 * 2);
    /* spot checks of the reference itself */
    size_t keep;
    CHECK_EQ_INT(reference(texts[1], stops, k, &keep), 1);
    CHECK_EQ_INT(keep, 3);
    CHECK_EQ_INT(reference(texts[0], stops, k, &keep), 6);
    CHECK_EQ_INT(keep, 14);
}
