/* Tests for the reasoning splitter (think.c): Qwen-style blocks with and
 * without newlines, prefilled and unterminated blocks, replies without a
 * block, markers split across 1-byte chunks, UTF-8 split at every byte
 * (no release may end inside a sequence), the streamed result against the
 * whole-text result for every fixed chunk size, and the prompt / template
 * helpers. */
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "test.h"
#include "text/think.h"
#include "base/util.h"

#define QO "<think>"
#define QC "</think>"
#define GO "<|channel>thought\n"
#define GC "<channel|>"


/* Streams text in chunks of `chunk` bytes; checks that every release is
 * valid UTF-8 when the text is. */
static void stream(const char *text, const char *open, const char *close, int prefilled, size_t chunk, strbuf *reason,
                   strbuf *answer) {
    size_t n = strlen(text);
    int valid = ds_utf8_valid(text, n);
    think_split t;
    think_init(&t, open, close, prefilled);
    for (size_t i = 0;; i += chunk) {
        size_t r0 = reason->n, a0 = answer->n;
        int last = i >= n;
        if (!last)
            think_push(&t, text + i, n - i < chunk ? n - i : chunk, reason, answer);
        else
            think_finish(&t, reason, answer);
        if (valid) {
            CHECK_MSG(ds_utf8_valid(sb_str(reason) + r0, reason->n - r0), "partial UTF-8 released to reason (chunk %zu)", chunk);
            CHECK_MSG(ds_utf8_valid(sb_str(answer) + a0, answer->n - a0), "partial UTF-8 released to answer (chunk %zu)", chunk);
        }
        if (last) break;
    }
    think_free(&t);
}

static void expect(const char *text, const char *open, const char *close, int prefilled, const char *want_reason,
                   const char *want_answer) {
    size_t n = strlen(text);
    for (size_t chunk = 1; chunk <= n + 1; chunk++) {
        strbuf r = {0}, a = {0};
        stream(text, open, close, prefilled, chunk, &r, &a);
        CHECK_MSG(!strcmp(sb_str(&r), want_reason), "reason of [%s] chunk %zu: [%s] want [%s]", text, chunk, sb_str(&r),
                  want_reason);
        CHECK_MSG(!strcmp(sb_str(&a), want_answer), "answer of [%s] chunk %zu: [%s] want [%s]", text, chunk, sb_str(&a),
                  want_answer);
        sb_free(&r);
        sb_free(&a);
    }
    strbuf r = {0}, a = {0};
    think_split_all(text, n, open, close, prefilled, &r, &a);
    CHECK_MSG(!strcmp(sb_str(&r), want_reason), "whole reason of [%s]: [%s]", text, sb_str(&r));
    CHECK_MSG(!strcmp(sb_str(&a), want_answer), "whole answer of [%s]: [%s]", text, sb_str(&a));
    sb_free(&r);
    sb_free(&a);
}

TEST(think_qwen_newlines) {
    expect("<think>\nfoo\n</think>\n\nanswer", QO, QC, 0, "foo", "answer");
    expect("<think>\n\nline one\n\nline two\n\n</think>\n\nThe answer.\n", QO, QC, 0, "line one\n\nline two",
           "The answer.\n");
}

TEST(think_qwen_no_newlines) {
    expect("<think>foo</think>answer", QO, QC, 0, "foo", "answer");
    expect("<think></think>answer", QO, QC, 0, "", "answer");
    expect("<think>\n\n</think>\n\nanswer", QO, QC, 0, "", "answer");
    expect("<think>a < b </thin c</think> x", QO, QC, 0, "a < b </thin c", "x");
}

TEST(think_prefilled) {
    expect("foo\n</think>\n\nanswer", QO, QC, 1, "foo", "answer");
    expect("\nfoo</think>answer", QO, QC, 1, "foo", "answer");
    expect("</think>\n\nanswer", QO, QC, 1, "", "answer");
    expect("the plan\n<channel|>Done.", GO, GC, 1, "the plan", "Done.");
    think_split t;
    strbuf r = {0}, a = {0};
    think_init(&t, QO, QC, 1);
    CHECK_EQ_INT(think_in_reasoning(&t), 1);
    think_push(&t, "abc ", 4, &r, &a);
    CHECK(!strcmp(sb_str(&r), "abc"));
    CHECK_EQ_INT(think_in_reasoning(&t), 1);
    think_push(&t, "</think> x", 10, &r, &a);
    CHECK_EQ_INT(think_in_reasoning(&t), 0);
    CHECK(!strcmp(sb_str(&r), "abc"));
    CHECK(!strcmp(sb_str(&a), "x"));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);
}

TEST(think_unterminated) {
    expect("<think>\nstill thinking \n", QO, QC, 0, "still thinking", "");
    expect("<think>\nstill </thi", QO, QC, 0, "still </thi", "");
    expect("cut off", QO, QC, 1, "cut off", "");
    expect("<think>", QO, QC, 0, "", "");
}

TEST(think_no_block) {
    expect("Hello <think>x</think> there", QO, QC, 0, "", "Hello <think>x</think> there");
    expect("\n\nHello", QO, QC, 0, "", "\n\nHello");
    expect("<thinking>x", QO, QC, 0, "", "<thinking>x");
    expect("<thi", QO, QC, 0, "", "<thi");
    expect("<think>x</think>y", NULL, NULL, 0, "", "<think>x</think>y");
    expect("<think>x</think>y", NULL, NULL, 1, "", "<think>x</think>y");
    expect("<think>x</think>y", "", "", 0, "", "<think>x</think>y");
    expect("<|channel>thought\nplan<channel|>Hi", GO, GC, 0, "plan", "Hi");
    expect("<|channel>final\nHi", GO, GC, 0, "", "<|channel>final\nHi");
}

TEST(think_whitespace_only_start) {
    expect("  \n\t", QO, QC, 0, "", "  \n\t");
    expect("", QO, QC, 0, "", "");
    expect("  \n<think>x</think>y", QO, QC, 0, "x", "y");
    /* undecided while only whitespace has arrived */
    think_split t;
    strbuf r = {0}, a = {0};
    think_init(&t, QO, QC, 0);
    think_push(&t, "\n \n", 3, &r, &a);
    CHECK_EQ_INT(think_in_reasoning(&t), 0);
    CHECK_EQ_INT(r.n, 0);
    CHECK_EQ_INT(a.n, 0);
    think_push(&t, "Hi", 2, &r, &a);
    CHECK(!strcmp(sb_str(&a), "\n \nHi"));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);
}

TEST(think_opener_split_1byte) {
    const char *text = "<think>\nabc</think>\nxyz";
    think_split t;
    strbuf r = {0}, a = {0};
    think_init(&t, QO, QC, 0);
    char trace[64] = {0}; /* per byte: r = in reasoning, a = answer released, - = neither */
    for (size_t i = 0; text[i]; i++) {
        think_push(&t, text + i, 1, &r, &a);
        trace[i] = think_in_reasoning(&t) ? 'r' : a.n ? 'a' : '-';
    }
    /* undecided until the opener's '>', inside until the closer's '>', then
     * the newline after it is dropped */
    CHECK_MSG(!strcmp(trace, "------rrrrrrrrrrrr--aaa"), "%s", trace);
    CHECK(!strcmp(sb_str(&r), "abc"));
    CHECK(!strcmp(sb_str(&a), "xyz"));
    think_finish(&t, &r, &a);
    CHECK(!strcmp(sb_str(&a), "xyz"));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);

    /* released amounts after each of the first bytes */
    think_init(&t, QO, QC, 0);
    const char *steps[] = {"<", "t", "h", "i", "n", "k", ">"};
    for (int i = 0; i < 7; i++) {
        think_push(&t, steps[i], 1, &r, &a);
        CHECK_EQ_INT(r.n + a.n, 0);
        CHECK_EQ_INT(think_in_reasoning(&t), i == 6);
    }
    think_push(&t, "\n", 1, &r, &a);
    think_push(&t, "x", 1, &r, &a);
    CHECK(!strcmp(sb_str(&r), "x"));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);
}

TEST(think_closer_split) {
    think_split t;
    strbuf r = {0}, a = {0};
    think_init(&t, QO, QC, 0);
    think_push(&t, "<think>abc", 10, &r, &a);
    CHECK(!strcmp(sb_str(&r), "abc"));
    think_push(&t, " </", 3, &r, &a); /* " </" could precede / begin the closer */
    CHECK(!strcmp(sb_str(&r), "abc"));
    think_push(&t, "thi", 3, &r, &a);
    CHECK(!strcmp(sb_str(&r), "abc"));
    CHECK_EQ_INT(t.held.n, 6); /* " </thi" */
    think_push(&t, "nk>", 3, &r, &a);
    CHECK(!strcmp(sb_str(&r), "abc"));
    CHECK_EQ_INT(think_in_reasoning(&t), 0);
    think_push(&t, "\n", 1, &r, &a);
    think_push(&t, "\n", 1, &r, &a);
    CHECK_EQ_INT(a.n, 0);
    think_push(&t, "ok", 2, &r, &a);
    CHECK(!strcmp(sb_str(&a), "ok"));
    think_push(&t, "\n\n", 2, &r, &a);
    CHECK(!strcmp(sb_str(&a), "ok\n\n"));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);

    /* a closer prefix that does not continue is released */
    think_init(&t, QO, QC, 1);
    think_push(&t, "a </thin", 8, &r, &a);
    CHECK(!strcmp(sb_str(&r), "a"));
    think_push(&t, "x", 1, &r, &a);
    CHECK(!strcmp(sb_str(&r), "a </thinx"));
    CHECK_EQ_INT(t.held.n, 0);
    think_free(&t);
    sb_free(&r);
    sb_free(&a);
}

TEST(think_utf8_every_byte) {
    const char *text = "<think>\n\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80</think>\n\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd "
                       "\xf0\x9f\x98\x80";
    const char *part = "\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80";
    expect(text, QO, QC, 0, part, part); /* checks every release for chunk sizes 1.. */
    expect(part, QO, QC, 1, part, "");
    expect(part, QO, QC, 0, "", part);
    expect(part, NULL, NULL, 0, "", part);
    /* a sequence split at every byte is held until complete */
    think_split t;
    strbuf r = {0}, a = {0};
    think_init(&t, QO, QC, 1);
    think_push(&t, "x\xf0", 2, &r, &a);
    CHECK(!strcmp(sb_str(&r), "x"));
    think_push(&t, "\x9f", 1, &r, &a);
    think_push(&t, "\x98", 1, &r, &a);
    CHECK(!strcmp(sb_str(&r), "x"));
    think_push(&t, "\x80", 1, &r, &a);
    CHECK(!strcmp(sb_str(&r), "x\xf0\x9f\x98\x80"));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);
    think_init(&t, NULL, NULL, 0);
    think_push(&t, "a\xc3", 2, &r, &a);
    CHECK(!strcmp(sb_str(&a), "a"));
    think_push(&t, "\xa9", 1, &r, &a);
    CHECK(!strcmp(sb_str(&a), "a\xc3\xa9"));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);
}

/* Whether think_split_all's closer-without-opener rule applies to text. */
static int rule_applies(const char *text, const char *open, const char *close, int prefilled) {
    if (prefilled || !open) return 0;
    const char *p = text + strspn(text, " \t\n\r\v\f");
    if (!strncmp(p, open, strlen(open))) return 0;
    const char *c = strstr(text, close), *o = strstr(text, open);
    return c && (!o || o > c);
}

TEST(think_stream_equals_whole) {
    const char *texts[] = {
        "<think>\nfoo\n</think>\n\nanswer",
        "  <think>  a\n\n b  \r\n</think>  \n c \n",
        "<think>x</thinkk></think></think>y",
        "<think><think>nested</think>after</think>",
        "plain answer with </think> inside",
        "answer <think>not a block</think>",
        "</think>closer first",
        "<|channel>thought\n\nplan \xe4\xbd\xa0<channel|>\n\xf0\x9f\x98\x80 done",
        "<<think>>",
        "\n\n",
        "<think>\xc3\xa9<</think>\xc3\xa9",
        "<think>\n \n",
    };
    const char *marks[][2] = {{QO, QC}, {GO, GC}, {NULL, NULL}};
    int checked = 0, ruled = 0;
    for (size_t ti = 0; ti < sizeof texts / sizeof *texts; ti++)
        for (int mi = 0; mi < 3; mi++)
            for (int pre = 0; pre < 2; pre++) {
                const char *text = texts[ti], *o = marks[mi][0], *c = marks[mi][1];
                size_t n = strlen(text);
                strbuf wr = {0}, wa = {0};
                int rule = rule_applies(text, o, c, pre);
                if (rule) {
                    sb_puts(&wa, text); /* streaming does not apply the rule */
                    ruled++;
                } else {
                    think_split_all(text, n, o, c, pre, &wr, &wa);
                }
                for (size_t chunk = 1; chunk <= n; chunk++) {
                    strbuf r = {0}, a = {0};
                    stream(text, o, c, pre, chunk, &r, &a);
                    CHECK_MSG(!strcmp(sb_str(&r), sb_str(&wr)) && !strcmp(sb_str(&a), sb_str(&wa)),
                              "text %zu marks %d pre %d chunk %zu: [%s|%s] vs [%s|%s]", ti, mi, pre, chunk, sb_str(&r),
                              sb_str(&a), sb_str(&wr), sb_str(&wa));
                    checked++;
                    sb_free(&r);
                    sb_free(&a);
                }
                sb_free(&wr);
                sb_free(&wa);
            }
    CHECK(checked > 500);
    CHECK_EQ_INT(ruled, 2); /* the two texts with a bare "</think>", Qwen markers, not prefilled */
    /* spot checks of the whole-text results used above */
    strbuf r = {0}, a = {0};
    think_split_all(texts[1], strlen(texts[1]), QO, QC, 0, &r, &a);
    CHECK(!strcmp(sb_str(&r), "  a\n\n b"));
    CHECK(!strcmp(sb_str(&a), "c \n"));
    sb_clear(&r);
    sb_clear(&a);
    think_split_all(texts[3], strlen(texts[3]), QO, QC, 0, &r, &a);
    CHECK(!strcmp(sb_str(&r), "<think>nested"));
    CHECK(!strcmp(sb_str(&a), "after</think>"));
    sb_free(&r);
    sb_free(&a);
}

TEST(think_split_all_closer_without_opener) {
    strbuf r = {0}, a = {0};
    const char *t1 = "I should greet.\n</think>\n\nHello!";
    think_split_all(t1, strlen(t1), QO, QC, 0, &r, &a);
    CHECK(!strcmp(sb_str(&r), "I should greet."));
    CHECK(!strcmp(sb_str(&a), "Hello!"));
    sb_clear(&r);
    sb_clear(&a);
    /* an opener before the closer: no block, all answer */
    const char *t2 = "Hi <think>x</think> y";
    think_split_all(t2, strlen(t2), QO, QC, 0, &r, &a);
    CHECK_EQ_INT(r.n, 0);
    CHECK(!strcmp(sb_str(&a), t2));
    sb_free(&r);
    sb_free(&a);
    /* the streaming splitter leaves such text as the answer */
    expect("</think>x", QO, QC, 1, "", "x");
    think_split t;
    think_init(&t, QO, QC, 0);
    think_push(&t, t1, strlen(t1), &r, &a);
    think_finish(&t, &r, &a);
    CHECK_EQ_INT(r.n, 0);
    CHECK(!strcmp(sb_str(&a), t1));
    think_free(&t);
    sb_free(&r);
    sb_free(&a);
}

TEST(think_prompt_prefilled) {
    const char *on = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n";
    const char *off = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    const char *hist = "<|im_start|>assistant\n<think>\nold\n</think>\n\nold answer<|im_end|>\n<|im_start|>assistant\n";
    CHECK_EQ_INT(think_prompt_prefilled(on, strlen(on), QO, QC), 1);
    CHECK_EQ_INT(think_prompt_prefilled(off, strlen(off), QO, QC), 0);
    CHECK_EQ_INT(think_prompt_prefilled(hist, strlen(hist), QO, QC), 0);
    CHECK_EQ_INT(think_prompt_prefilled(on, strlen(on) - 1, QO, QC), 1);     /* ends right at the opener */
    CHECK_EQ_INT(think_prompt_prefilled(on, strlen(on) - 2, QO, QC), 0);     /* "<think" only */
    CHECK_EQ_INT(think_prompt_prefilled("<think>\nx", 9, QO, QC), 0);        /* text after it */
    CHECK_EQ_INT(think_prompt_prefilled(on, strlen(on), NULL, NULL), 0);
    CHECK_EQ_INT(think_prompt_prefilled("", 0, QO, QC), 0);
    const char *g = "<start_of_turn>model\n<|channel>thought\n";
    CHECK_EQ_INT(think_prompt_prefilled(g, strlen(g), GO, GC), 1);
    const char *g2 = "<start_of_turn>model\n<|channel>thought\n<channel|>";
    CHECK_EQ_INT(think_prompt_prefilled(g2, strlen(g2), GO, GC), 0);
}

TEST(think_markers_for_template) {
    const char *o = "x", *c = "x";
    const char *qwen = "{%- if enable_thinking is defined and enable_thinking is false %}"
                       "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}";
    CHECK_EQ_INT(think_markers_for_template(qwen, &o, &c), 1);
    CHECK(o && !strcmp(o, "<think>"));
    CHECK(c && !strcmp(c, "</think>"));
    const char *gemma = "{{ '<|turn>model\\n' }}{%- if not enable_thinking %}{{ '<|channel>thought\\n<channel|>' }}";
    CHECK_EQ_INT(think_markers_for_template(gemma, &o, &c), 1);
    CHECK(o && !strcmp(o, "<|channel>thought\n"));
    CHECK(c && !strcmp(c, "<channel|>"));
    const char *llama = "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}";
    CHECK_EQ_INT(think_markers_for_template(llama, &o, &c), 0);
    CHECK(o == NULL && c == NULL);
    o = c = "x";
    CHECK_EQ_INT(think_markers_for_template(NULL, &o, &c), 0);
    CHECK(o == NULL && c == NULL);
}
