/* think: splits generated text into reasoning and answer at the model's
 * reasoning markers (e.g. "<think>" ... "</think>"), streamed or whole.
 *
 * Rules (the same for both forms):
 *  - Not prefilled: the text is undecided until its first non-whitespace
 *    bytes. If it starts (after whitespace, which is dropped) with the
 *    opener, it is reasoning up to the closer; otherwise all of it is the
 *    answer, verbatim (later openers are not split off).
 *  - Prefilled (the prompt already opened a block): reasoning up to the
 *    closer.
 *  - Newlines right after the opener (or at the start of a prefilled
 *    block) and whitespace right before the closer are left out of the
 *    reasoning; whitespace right after the closer is left out of the
 *    answer. A block that never closes is all reasoning (its trailing
 *    whitespace left out).
 * While streaming, bytes that could begin the closer (fewer than its
 * length), whitespace that could precede it, the undecided start and an
 * incomplete UTF-8 sequence at the end are held back; every release ends on
 * a UTF-8 boundary. The concatenated releases do not depend on how the text
 * was chunked, and equal think_split_all's result except for the rule that
 * only the whole-text form applies (see there). */
#ifndef DS_THINK_H
#define DS_THINK_H

#include <stddef.h>

#include "base/strbuf.h"

typedef struct {
    const char *open, *close; /* not copied: must outlive the splitter */
    size_t open_len, close_len;
    int state;
    strbuf held;
} think_split;

/* open/close: the markers; either one NULL or empty turns splitting off
 * (everything is answer). prefilled: the model starts inside a block. */
void think_init(think_split *t, const char *open, const char *close, int prefilled);
/* Pushes generated text (any chunking); appends what can be released now
 * to reason / answer. */
void think_push(think_split *t, const char *s, size_t n, strbuf *reason, strbuf *answer);
/* End of the text: releases everything held. */
void think_finish(think_split *t, strbuf *reason, strbuf *answer);
/* 1 while inside a block (including a prefilled start); 0 in the answer
 * and while a non-prefilled start is still undecided. */
int think_in_reasoning(const think_split *t);
void think_free(think_split *t);

/* Markers for a chat template's source: "<think>" / "</think>" when it
 * mentions "<think>"; Gemma-4's "<|channel>thought\n" / "<channel|>" when it
 * mentions "<|channel>". Returns 1, or 0 with both set NULL. The strings
 * are static. */
int think_markers_for_template(const char *template_source, const char **open, const char **close);
/* Whether a rendered prompt ends inside an open block: the last opener in
 * prompt[0..n) is followed only by whitespace. 0 when a marker is NULL. */
int think_prompt_prefilled(const char *prompt, size_t n, const char *open, const char *close);
/* The whole-text form, for replies that are not streamed: the same rules,
 * plus one: when the text does not start with the opener and is not
 * prefilled, a closer with no opener before it makes everything before it
 * reasoning (as if prefilled: for prompts that opened a block without
 * think_prompt_prefilled seeing it). */
void think_split_all(const char *text, size_t n, const char *open, const char *close, int prefilled, strbuf *reason,
                     strbuf *answer);

#endif
