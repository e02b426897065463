/* spec_run: the speculative loop of spec_generate (spec.h) as steps, so
 * that several sequences of one model generate together.
 *
 * A run is one generation: its sequence, sampler, drafter (or none),
 * prompt, options, output ids and statistics, exactly the arguments of
 * spec_generate. spec_step gives every unfinished run of a set its next
 * unit of work:
 *
 *   prefill   one chunk of the prompt (prefill_chunk rows for a drafter that
 *             reads target features, else SPEC_PREFILL_CHUNK rows, or
 *             SPEC_PROGRESS_CHUNK when on_prefill reports progress), so a
 *             long prompt never holds the others back for more than one
 *             chunk; the chunk that ends the prompt also draws the first id;
 *   round     the drafter proposes (its own pass, run by run), then one
 *             verify of [anchor, drafts] (a plain one-row step without
 *             drafts), the accept rule, the stops, the rollback and the
 *             drafter's commit.
 *
 * The target forwards of all the runs of a step go to the model in ONE
 * model_forward_multi (seq_append_multi), each run's rows as its own
 * sequence's batch. Since a row's bits never depend on the batch it is in,
 * every run's ids, statistics (but times), hooks and last logits are those
 * it gives alone through spec_generate, whatever runs share its steps and
 * whenever it joined them (tests/test_spec_run.c).
 *
 * Chained greedy decoding (seq_chain_*, a GPU) is for a run alone: a step
 * whose only unfinished run is plain greedy decoding over ids runs up to
 * SPEC_CHAIN_STEP tokens of it as a chain, so spec_step still returns
 * regularly (spec_generate, with nobody to admit, chains to the end).
 * With two runs or more every run takes one-row rounds (the same ids).
 *
 * Ownership: a run borrows its sequence, sampler, drafter, out_ids and
 * stats, and the pointers inside its options (stop ids, cancel flag, hooks,
 * logit processor) until spec_run_free; it copies the prompt and the
 * options struct. Each run must have its own sequence, sampler and drafter
 * state, and the sequences of one step must belong to one model. */
#ifndef DS_SPEC_RUN_H
#define DS_SPEC_RUN_H

#include <stddef.h>

#include "spec/spec.h"

/* most tokens of chained decoding one spec_step runs for a run alone */
#define SPEC_CHAIN_STEP 32
/* most runs one spec_step takes (model_forward_multi's bound) */
#define SPEC_STEP_MAX_RUNS MODEL_MULTI_MAX
/* prompt rows of a plain prefill's chunk while on_prefill reports progress */
#define SPEC_PROGRESS_CHUNK 512

typedef struct spec_run spec_run;

/* A run of spec_generate's arguments (last_logits goes to spec_run_finish).
 * No forward runs here; st is zeroed, out_ids[max_new] is written as ids
 * are emitted (a stop id included), and the hooks of o are called from
 * spec_step. Returns 0, or -1 with err filled for bad options (a prefill
 * chunk that is not a positive multiple of BACKEND_GROUP_ROWS, a negative
 * prompt length); a prompt that does not fit the window is the run's own
 * error at its first step, as spec_generate reports it. */
int spec_run_create(spec_run **out, seq *s, sampler *smp, drafter *d, const int *prompt, int n_prompt,
                    const spec_opts *o, int *out_ids, spec_stats *st, char *err, size_t errlen);
/* 1 when the run has finished: a stop id, the token budget, a full window,
 * a cancel (seen between its steps, or between the tokens of a round), or
 * its own error (spec_run_error). */
int spec_run_done(const spec_run *r);
/* 1 while the run is still prefilling its prompt. */
int spec_run_prefilling(const spec_run *r);
/* The run's error, or NULL. */
const char *spec_run_error(const spec_run *r);
/* Every unfinished run of runs[0..n) does its next unit of work (above);
 * finished runs are skipped, so a caller may keep them in the set. A run's
 * own failure (its prompt does not fit, a processor that allows nothing, a
 * forward refused for its rows) ends that run with its error kept and
 * never the others. Returns 0, or -1 with err filled only for a failure
 * that is no single run's: n outside 0..SPEC_STEP_MAX_RUNS, a NULL run, two
 * unfinished runs on one sequence, sampler or drafter state, sequences of
 * different models. */
int spec_step(spec_run *const *runs, int n, char *err, size_t errlen);
/* Ends the run as spec_generate ends: st's decode time and cancel flag,
 * and the logits row the last id was drawn from into last_logits[vocab]
 * when given (recomputed alone when the rounds read back ids only: one
 * forward of one row, on this run's sequence). A run not yet done stops
 * where it stands. Returns 0, or -1 with err filled (the run's error, or
 * that forward's). */
int spec_run_finish(spec_run *r, float *last_logits, char *err, size_t errlen);
void spec_run_free(spec_run *r);

#endif
