/* seq: one token sequence and its KV cache: a model_ctx plus the ids that
 * are in it. seq_prefill makes the cache hold a new prompt by keeping the
 * longest common prefix with what is cached and computing only the rest,
 * so a multi-turn chat prefills only the new turn. */
#ifndef DS_SEQ_H
#define DS_SEQ_H

#include <stddef.h>

#include "engine/model.h"

typedef struct seq seq;

/* n_ctx 0 = the model's default window; max_batch rows per forward chunk. */
int seq_create(seq **out, const model *m, int n_ctx, int max_batch, tpool *tp, char *err, size_t errlen);
void seq_free(seq *s);
const model *seq_model(const seq *s);
int seq_len(const seq *s);
int seq_capacity(const seq *s);
const int *seq_tokens(const seq *s);
void seq_reset(seq *s);
/* seq_reset that also gives the KV cache's pages back to the system (the
 * server's memory guard sheds an idle cache slot this way; the next
 * prompt prefills from scratch). Returns the bytes released (0 on a GPU,
 * whose cache is not host memory). */
size_t seq_release(seq *s);

/* One short forward, then the sequence emptied (seq_release: no KV pages
 * kept), so that what a model's
 * first forward pays once does not fall on the first prompt: on a GPU the
 * tile-major weight copies, cuBLAS's set-up (a prefill group plus one row),
 * the kernels' first loads and the decode graph; on the CPU the weights'
 * first touch (one row). Run it once drafters and other caches exist (the
 * GPU's copies are sized after them). Returns the seconds it took, or -1
 * (err filled). */
double seq_warm_up(seq *s, char *err, size_t errlen);

/* Makes the sequence exactly prompt[0..n): keeps the common prefix (always
 * recomputing at least the last row, whose logits are needed), prefills the
 * rest, writes the last row's logits to logits[vocab]. Returns the number of
 * rows computed, or -1 (err filled; the sequence is then empty). */
int seq_prefill(seq *s, const int *prompt, int n, float *logits, char *err, size_t errlen);

/* Appends id and computes its logits. 0 on success, -1 on error (e.g. the
 * context window is full). */
int seq_step(seq *s, int id, float *logits, char *err, size_t errlen);

/* Appends ids[0..n) in one forward and writes the logits of the last
 * n_logits rows to logits[n_logits][vocab] (a speculative verify wants
 * all n). 0, or -1 (err filled; the sequence is unchanged). */
int seq_append(seq *s, const int *ids, int n, int n_logits, float *logits, char *err, size_t errlen);

/* seq_append that also copies out the residual stream after the n_taps
 * decoder layers tap_layers (model_batch's taps: [n_taps][n][hidden]);
 * drafters read the target's features this way. */
int seq_append_taps(seq *s, const int *ids, int n, int n_logits, float *logits, int n_taps, const int *tap_layers,
                    float *taps, char *err, size_t errlen);

/* Appends ids[0..n) in one forward and writes each row's argmax (the
 * greedy next token after it) to argmax[n], with taps as seq_append_taps;
 * no logits come back (a GPU reads back only the ids). */
int seq_append_argmax(seq *s, const int *ids, int n, int *argmax, int n_taps, const int *tap_layers, float *taps,
                      char *err, size_t errlen);

/* Appends ids[0..n) in one forward and writes sampler_rows's answers for
 * its rows (drafts ids[1..n), uniforms u[n]) to out[n], with taps as
 * seq_append_taps; no logits come back (a GPU samples on the device).
 * q: NULL (one-hot drafts), or the drafts' distributions on the GPU
 * (model_batch.draft_q). */
int seq_append_sample(seq *s, const int *ids, int n, sampler *smp, const double *u, const model_draft_q *q, int *out,
                      int n_taps, const int *tap_layers, float *taps, char *err, size_t errlen);

/* One sequence's part of seq_append_multi: the rows to append as
 * model_forward takes them (tokens, positions NULL, logits / argmax /
 * sampled answers, taps; taps_resident as given: seq_keep_taps_resident
 * is for the one-sequence appends), and its result. */
typedef struct {
    seq *s;
    model_batch b;
    int rc;        /* out: 0, or -1 with err (the sequence then unchanged) */
    char err[400];
} seq_job;

/* The appends of several sequences of one model in one forward
 * (model_forward_multi): each job's results are those of its append
 * alone. A job whose rows cannot go (the window is full, bad row counts)
 * fails alone; when the forward itself fails, every job runs again alone
 * (model_forward, its rows' bits the same), so a failure lands on the
 * sequence it belongs to. Returns 0 (each job's rc says how it went), or
 * -1 with err filled when the call is wrong (n outside
 * 1..MODEL_MULTI_MAX, a NULL or repeated sequence, two models). */
int seq_append_multi(seq_job *jobs, int n, char *err, size_t errlen);

/* While on, tapped appends leave their taps in the backend's memory
 * (seq_resident_taps) and do not write the taps buffer (model_batch
 * taps_resident: a backend with resident taps). */
void seq_keep_taps_resident(seq *s, int on);
/* The backend's buffer of the taps of appends of up to n rows
 * ([n_taps][*rows][hidden], mctx_resident_taps), or NULL (the CPU). */
const float *seq_resident_taps(seq *s, int n, int *rows);

/* Chained greedy decoding (mctx_chain_start, model.h): seq_chain_start
 * launches the step for id; seq_chain_next (more: launch the step after
 * it first) waits for the oldest step in flight, gives its argmax in *next
 * and appends its input id to the sequence; seq_chain_end drops the steps
 * still in flight. seq_chain_ok: 0 where it does not run (the CPU). */
int seq_chain_ok(const seq *s);
int seq_chain_start(seq *s, int id, char *err, size_t errlen);
int seq_chain_next(seq *s, int more, int *next, char *err, size_t errlen);
void seq_chain_end(seq *s);

/* Makes dst hold src's first n ids and their cache (two sequences of one
 * model, n <= seq_len(src)) as src holds them (mctx_copy_prefix): a
 * prompt that starts with another sequence's cached ids then prefills only
 * the rest. 0, or -1 with err filled (dst unchanged). */
int seq_copy_prefix(seq *dst, const seq *src, int n, char *err, size_t errlen);

/* The block cache's side (mctx_save_rows): seq_pos_bytes per position (0
 * where the backend cannot save rows); seq_save_rows writes the cache
 * rows of positions [pos0, pos0+n) (below seq_len) to host; seq_load_rows
 * makes the sequence ids[0 .. pos0+n) with the rows of [pos0, pos0+n)
 * from host (ids[0 .. pos0) must be what it holds; it is cut to pos0
 * first). 0, or -1 with err filled (after a failed load the sequence holds
 * ids[0 .. pos0)). */
size_t seq_pos_bytes(const seq *s);
int seq_kept_from(const seq *s); /* mctx_kept_from */
int seq_save_rows(seq *s, int pos0, int n, void *host, char *err, size_t errlen);
int seq_load_rows(seq *s, const int *ids, int pos0, int n, const void *host, char *err, size_t errlen);
/* The same by reference (mctx_block_take / mctx_block_put): seq_block_rows
 * positions a block (0: the backend copies rows); seq_block_put makes the
 * sequence ids[0 .. (b+1) * rows) with blk as block b (ids[0 .. b * rows)
 * must be what it holds; it is cut there first). */
int seq_block_rows(const seq *s);
mblock *seq_block_take(seq *s, int b, char *err, size_t errlen);
int seq_block_put(seq *s, const int *ids, int b, const mblock *blk, char *err, size_t errlen);

/* Rolls back to the first len ids (len <= seq_len). */
void seq_truncate(seq *s, int len);

#endif
