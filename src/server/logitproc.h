/* logitproc: what a request asks of the target's distribution beyond the
 * sampler's filters, as a spec_generate logit processor (spec.h
 * logit_proc): penalties, a logit bias and a grammar (constrained decoding).
 *
 * Processed logits w of a raw row, in this order:
 *   1. repetition penalty r (HF transformers / vLLM `repetition_penalty`,
 *      llama.cpp `repeat_penalty`): for each id present in the window (the
 *      last rep_window tokens of prompt + generated text; -1 the whole
 *      context), w = w / r when w > 0, else w * r;
 *   2. presence and frequency penalties (OpenAI): w -= presence * [c > 0] +
 *      frequency * c, c = the id's count among the generated tokens;
 *   3. logit bias: w += bias for each listed id.
 * The grammar (may be NULL) then restricts the ids that may follow
 * (text/grammar_mask.h); the end-of-sequence ids only at a complete match.
 *
 * Reasoning: with think markers (single token ids), the grammar starts
 * after the reasoning block: think_start 2 means the prompt opened one (the
 * grammar waits for think_close), 1 that the model may open one with its
 * first token (think_open is then allowed besides the grammar's ids), 0
 * that the grammar applies from the first token. Inside the block every
 * id is allowed.
 *
 * The context is the tokens taken so far: the prompt at creation, then
 * every id accept takes. save / restore keep one snapshot (a verify
 * round's start). */
#ifndef DS_LOGITPROC_H
#define DS_LOGITPROC_H

#include <stddef.h>

#include "spec/spec.h"
#include "text/grammar.h"
#include "text/grammar_mask.h"

typedef struct {
    float presence, frequency; /* 0: off */
    float repetition;          /* 1 (or 0): off */
    int rep_window;            /* -1: the whole context; 0: off */
    int n_bias;
    int *bias_id;
    float *bias;
    const grammar *g;          /* NULL: no constraint */
    int think_open, think_close; /* ids, or -1 */
    int think_start;           /* 0, 1 or 2, above */
} lproc_cfg;

typedef struct lproc lproc;

/* 1 when c asks for anything (else no processor is needed). */
int lproc_cfg_active(const lproc_cfg *c);
/* A processor over vocab ids (the model's vocabulary) whose context is
 * prompt[0..n). tr: the vocabulary trie, required when c->g is set. The
 * configuration's arrays and grammar must outlive the processor. */
lproc *lproc_new(const lproc_cfg *c, const gtok_trie *tr, int vocab, const int *prompt, int n);
void lproc_free(lproc *p);
/* The spec-loop interface over p. */
logit_proc lproc_iface(lproc *p);

#endif
