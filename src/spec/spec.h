/* spec: the speculative verify loop shared by every drafter.
 *
 * One round: the drafter proposes up to k tokens; the target runs one
 * forward over [anchor, d1..dk] (the anchor is the last emitted token, not
 * yet in the KV cache) with logits for all k+1 rows; the accept rule keeps a
 * prefix d1..da and adds one target token y (a correction, or a bonus when
 * all k are accepted); the KV cache is truncated to the committed length
 * (anchor + a drafts; y becomes the next anchor) and the drafter is told
 * what was committed.
 *
 * Accept rule (lossless): greedy accepts the longest prefix equal to the
 * target's argmax (op_argmax, as the baseline sampler), then the argmax.
 * Sampling accepts d with probability min(1, p(d)/q(d)) where p is the
 * sampler's filtered distribution (sampler_probs) and q the draft's; on
 * rejection y ~ normalize(max(0, p - q)); when all are accepted y ~ p.
 * A deterministic drafter (lookup) has q one-hot at its draft.
 *
 * Stop conditions (stop ids, the token budget, a full window, cancel) are
 * applied token by token inside an accepted block, exactly where the
 * baseline loop would stop, so greedy output equals baseline output. */
#ifndef DS_SPEC_H
#define DS_SPEC_H

#include <signal.h>
#include <stddef.h>

#include "engine/sampler.h"
#include "spec/seq.h"

#define SPEC_MAX_DRAFT 64
/* the default prompt rows per forward of a feature drafter's prefill: the
   backends' prefill chunk (BACKEND_PREFILL_ROWS, spec.c checks), so the
   speculative prefill runs the plain one's chunks; its taps stay in a
   GPU's memory (84 MB for five taps of Qwen3-8B) or pass through the host
   at once */
#define SPEC_PREFILL_CHUNK 1024

typedef struct {
    void *self;
    /* 1: proposals are deterministic (q one-hot at the draft); propose
       never writes q. 0: propose writes q[i][vocab] when q is not NULL. */
    int deterministic;
    /* Target layers whose outputs (model_batch taps) the drafter reads as
       context features; 0 for drafters that read only tokens. */
    int n_taps;
    const int *tap_layers;
    /* Starts a sequence whose context is ids[0..n) (the prompt). Returns
       how many leading positions of it the drafter still holds features
       for (prefix reuse across chat turns); the loop then feeds features
       from there on. Drafters without features return n. */
    int (*reset)(void *self, const int *ids, int n);
    /* Proposes up to k tokens continuing the context into draft[k];
       returns how many (0..k). */
    int (*propose)(void *self, int k, int *draft, float *q);
    /* The context grew by ids[0..n) (emitted tokens, in order). */
    void (*commit)(void *self, const int *ids, int n);
    /* Target features of positions pos0 .. pos0+n-1: row i is
       taps[t][row0 + i][hidden] for each tap t, with `rows` rows per tap
       (the model_batch taps layout). Features the drafter held at positions
       >= pos0 are dropped first. NULL when n_taps is 0. */
    void (*features)(void *self, int pos0, int n, const float *taps, int rows, int row0);
    /* features from taps in the target backend's memory
       (mctx_resident_taps's buffer, the same layout); NULL unless the
       drafter's backend reads them there (a GPU), which then keeps a
       verify's taps there */
    void (*features_resident)(void *self, int pos0, int n, const float *taps, int rows, int row0);
    /* Sampled proposals drawn in the target's backend (a GPU DSpark, sampling):
       as propose, but draft j is drawn there with the uniform u[j] (drawn
       ahead by the caller from the shared sampler; *used: how many of u it
       took, which the caller then consumes), and the drafts'
       distributions stay in the backend's memory (*q, always set, for the
       verify's model_batch.draft_q; q->e NULL: the drafts are
       deterministic, q one-hot). NULL unless the drafter can do that. */
    int (*propose_resident)(void *self, int k, int *draft, const double *u, int *used, model_draft_q *q);
} drafter;

/* A logit processor: what a request asks of the target's distribution
 * beyond the sampler's filters (penalties, a logit bias, a grammar). The
 * loop then reads every verify row back to the host (never the chained or
 * device-sampled paths), so both backends give the same answers, and it
 * judges a round row by row: row j is processed in the context of the
 * drafts accepted before it, so the processed distribution of every
 * position is the one plain decoding computes there.
 *
 * The distribution a position draws from, D, is defined as follows (w the
 * processed logits, p = the sampler's filtered distribution of w, A the
 * ids `accept` takes now): greedy, the first argmax of w over A; sampled, p
 * restricted to A and renormalised, or, when p gives A no mass, the
 * sampler's distribution of w with the ids outside A at -inf. The loop
 * draws from D by checking the sampler's pick of w first (accept) and
 * computing A (mask) only when it is refused: for sampling, a draw x ~ p
 * kept when x is in A and otherwise replaced by a draw from D is
 * distributed as D (P(x) = p(x) + (1 - p(A)) p(x) / p(A) = p(x) / p(A)).
 * Drafts are accepted against D: greedy and one-hot drafts by comparing
 * them with the position's draw from D (which is how plain decoding draws:
 * a sampled round then consumes the plain loop's uniforms and gives its
 * tokens exactly), drafts with a distribution q by min(1, D(d) / q(d)). */
typedef struct {
    void *self;
    /* the processed logits w[vocab] of a raw row in the current context */
    void (*apply)(void *self, const float *raw, float *w);
    /* takes id into the context when allowed: 1 taken, 0 refused (context
       unchanged), -1 an error (see error) */
    int (*accept)(void *self, int id);
    /* sets w[i] = -INFINITY for every id accept would refuse now; returns
       how many stay (0: nothing can follow, -1: an error) */
    int (*mask)(void *self, float *w);
    /* remembers the context / returns to the one remembered (a round's
       start: the emitted tokens are then taken again) */
    void (*save)(void *self);
    void (*restore)(void *self);
    const char *(*error)(void *self);
} logit_proc;

typedef struct {
    int max_new;                  /* tokens to generate at most */
    int max_draft;                /* k: drafts per round (0..SPEC_MAX_DRAFT) */
    /* prompt rows per forward while prefilling for a drafter that reads
       target features (0: SPEC_PREFILL_CHUNK); a positive multiple of
       BACKEND_GROUP_ROWS, else spec_generate fails saying so */
    int prefill_chunk;
    const int *stop;              /* stop ids */
    int n_stop, ignore_eos;
    volatile sig_atomic_t *cancel; /* may be NULL */
    void (*emit)(void *ctx, int id); /* each emitted id except a stop id; may be NULL */
    void *emit_ctx;
    /* Called before emit with the same id and the target's raw logits row
       it was chosen from ([vocab], before any sampling filter); may be
       NULL. (Log-probabilities for clients.) */
    void (*emit_logits)(void *ctx, int id, const float *logits);
    /* Adaptive cap (may be NULL): next_cap gives the cap for the coming
       round (0..max_draft; 0 = a plain one-row step), observe is told how
       many drafts were verified and accepted. */
    int (*next_cap)(void *ctl);
    void (*observe)(void *ctl, int proposed, int accepted);
    void *ctl;
    /* Progress hooks (may be NULL; ctx is hook_ctx): on_prefill after each
       prefill chunk with the prompt positions done so far (the reused
       prefix counts as done); on_round after each verify forward with the
       drafts proposed, accepted, tokens emitted and the round's seconds. */
    void (*on_prefill)(void *ctx, int done, int total);
    void (*on_round)(void *ctx, int drafted, int accepted, int emitted, double seconds);
    void *hook_ctx;
    /* may be NULL; its context must already hold the prompt (spec_generate
       takes the tokens it emits into it) */
    const logit_proc *proc;
} spec_opts;

typedef struct {
    int n_prefilled, n_gen, stopped_by_eos, cancelled;
    int n_rounds;   /* verify forwards */
    int n_round_tok; /* tokens emitted by verify rounds (the first token comes from the prefill) */
    long n_drafted, n_accepted;
    int accept_hist[SPEC_MAX_DRAFT + 1]; /* rounds by number of drafts accepted */
    double t_prefill;
    double t_decode; /* the rounds, from the end of the prefill to the last id (not
                        the recompute of the last logits row asked for at the end) */
    double t_draft; /* of t_decode: time inside the drafter (propose + features) */
} spec_stats;

/* Prefills prompt into s (prefix reuse as seq_prefill), then generates with
 * drafter d (NULL: no drafts, one row per round): one run of the stepwise
 * loop (spec_run.h), stepped alone to its end. Ids (a stop id included)
 * go to out_ids[max_new] when given; the logits row the last id was drawn
 * from to last_logits[vocab] when given. Afterwards s holds the prompt and
 * every emitted id except the last (as the baseline loop leaves it).
 * Returns 0, or -1 with err filled. */
int spec_generate(seq *s, sampler *smp, drafter *d, const int *prompt, int n_prompt, const spec_opts *o,
                  int *out_ids, float *last_logits, spec_stats *st, char *err, size_t errlen);

/* The accept rule over k drafts: logits[k+1][vocab] from the verify
 * forward, q[k][vocab] the draft distributions (NULL: one-hot at each
 * draft). Returns the accepted count a and the extra token in *y. p and r
 * are scratch [vocab]. */
int spec_accept(sampler *smp, const float *logits, int vocab, const int *draft, const float *q, int k, float *p,
                float *r, int *y);

#endif
