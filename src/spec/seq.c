/* seq: see seq.h. */
#include "spec/seq.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct seq {
    model_ctx *ctx;
    int *toks; /* [capacity] ids in the KV cache, in order */
    int n;
    int taps_resident; /* seq_keep_taps_resident */
    /* chained decoding: a step in flight (between seq_chain_* calls, at
       most one), and its input id */
    int in_chain, chain_in;
};

int seq_create(seq **out, const model *m, int n_ctx, int max_batch, tpool *tp, char *err, size_t errlen) {
    *out = NULL;
    seq *s = xcalloc(1, sizeof *s);
    if (mctx_create(&s->ctx, m, n_ctx, max_batch, tp, err, errlen) != 0) {
        free(s);
        return -1;
    }
    s->toks = xmalloc(sizeof(int) * (size_t)mctx_capacity(s->ctx));
    *out = s;
    return 0;
}

void seq_free(seq *s) {
    if (!s) return;
    mctx_free(s->ctx);
    free(s->toks);
    free(s);
}

const model *seq_model(const seq *s) { return mctx_model(s->ctx); }
int seq_len(const seq *s) { return s->n; }
int seq_capacity(const seq *s) { return mctx_capacity(s->ctx); }
const int *seq_tokens(const seq *s) { return s->toks; }

/* the cache cut to len, and the ids to what it then holds (a model with
   sliding layers empties it when the rows len attends to are gone) */
static void cut(seq *s, int len) {
    mctx_truncate(s->ctx, len);
    const int have = mctx_len(s->ctx);
    s->n = have < len ? have : len;
}

void seq_reset(seq *s) {
    seq_chain_end(s);
    s->n = 0;
    mctx_truncate(s->ctx, 0);
}

size_t seq_release(seq *s) {
    seq_chain_end(s);
    s->n = 0;
    return mctx_release(s->ctx);
}

double seq_warm_up(seq *s, char *err, size_t errlen) {
    double t0 = ds_now();
    const model *m = seq_model(s);
    /* a backend with a prefill family warms it too: one group and a row */
    int rows = model_caps(m)->group_rows ? model_caps(m)->group_rows + 1 : 1;
    if (rows + 2 > seq_capacity(s)) rows = 1;
    int *ids = xcalloc((size_t)rows, sizeof(int));
    float *logits = xmalloc(sizeof(float) * (size_t)model_cfg(m)->vocab_size);
    int am = 0, next = 0;
    int rc = seq_prefill(s, ids, rows, logits, err, errlen) < 0 ||
             seq_append_argmax(s, &next, 1, &am, 0, NULL, NULL, err, errlen) != 0;
    /* plain decoding's chained step too (its graph), where it runs */
    if (!rc && seq_chain_ok(s) && rows + 4 <= seq_capacity(s))
        rc = seq_chain_start(s, next, err, errlen) != 0 || seq_chain_next(s, 1, &am, err, errlen) != 0 ||
             seq_chain_next(s, 0, &am, err, errlen) != 0;
    seq_release(s); /* (its KV pages back to the pool: a slot holds none until a request) */
    free(ids);
    free(logits);
    return rc ? -1 : ds_now() - t0;
}

int seq_prefill(seq *s, const int *prompt, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ds_err(err, errlen, "empty prompt");
    if (n > mctx_capacity(s->ctx))
        return ds_err(err, errlen, "prompt of %d tokens does not fit the %d-token context window", n,
                      mctx_capacity(s->ctx));
    int keep = 0;
    while (keep < s->n && keep < n - 1 && s->toks[keep] == prompt[keep]) keep++;
    cut(s, keep);
    keep = s->n;
    model_batch b = {.n = n - keep, .tokens = prompt + keep, .n_logits = 1, .logits = logits};
    if (model_forward(s->ctx, &b, err, errlen) != 0) {
        seq_reset(s);
        return -1;
    }
    memcpy(s->toks + keep, prompt + keep, sizeof(int) * (size_t)(n - keep));
    s->n = n;
    return n - keep;
}

int seq_step(seq *s, int id, float *logits, char *err, size_t errlen) {
    if (s->n >= mctx_capacity(s->ctx))
        return ds_err(err, errlen, "context window full (%d tokens)", mctx_capacity(s->ctx));
    model_batch b = {.n = 1, .tokens = &id, .n_logits = 1, .logits = logits};
    if (model_forward(s->ctx, &b, err, errlen) != 0) return -1;
    s->toks[s->n++] = id;
    return 0;
}

int seq_append(seq *s, const int *ids, int n, int n_logits, float *logits, char *err, size_t errlen) {
    return seq_append_taps(s, ids, n, n_logits, logits, 0, NULL, NULL, err, errlen);
}

static int append(seq *s, const model_batch *b, char *err, size_t errlen) {
    const int *ids = b->tokens;
    int n = b->n;
    if (n <= 0 || b->n_logits < 0 || b->n_logits > n) return ds_err(err, errlen, "seq_append: bad row counts");
    if (s->n + n > mctx_capacity(s->ctx))
        return ds_err(err, errlen, "context window full (%d tokens)", mctx_capacity(s->ctx));
    model_batch bb = *b;
    bb.taps_resident = s->taps_resident && b->n_taps > 0;
    if (model_forward(s->ctx, &bb, err, errlen) != 0) {
        cut(s, s->n);
        return -1;
    }
    memcpy(s->toks + s->n, ids, sizeof(int) * (size_t)n);
    s->n += n;
    return 0;
}

int seq_append_taps(seq *s, const int *ids, int n, int n_logits, float *logits, int n_taps, const int *tap_layers,
                    float *taps, char *err, size_t errlen) {
    model_batch b = {.n = n, .tokens = ids, .n_logits = n_logits, .logits = logits, .n_taps = n_taps,
                     .tap_layers = tap_layers, .taps = taps};
    return append(s, &b, err, errlen);
}

int seq_append_argmax(seq *s, const int *ids, int n, int *argmax, int n_taps, const int *tap_layers, float *taps,
                      char *err, size_t errlen) {
    model_batch b = {.n = n, .tokens = ids, .n_logits = n, .argmax = argmax, .n_taps = n_taps,
                     .tap_layers = tap_layers, .taps = taps};
    return append(s, &b, err, errlen);
}

int seq_append_sample(seq *s, const int *ids, int n, sampler *smp, const double *u, const model_draft_q *q, int *out,
                      int n_taps, const int *tap_layers, float *taps, char *err, size_t errlen) {
    model_batch b = {.n = n, .tokens = ids, .n_logits = n, .smp = smp, .draft = ids + 1, .u = u, .sampled = out,
                     .draft_q = q, .n_taps = n_taps, .tap_layers = tap_layers, .taps = taps};
    return append(s, &b, err, errlen);
}

/* a job's rows that cannot go, whatever the others do: the checks of
   append, before anything runs */
static int job_check(seq_job *j) {
    const model_batch *b = &j->b;
    if (b->n <= 0 || b->n_logits < 0 || b->n_logits > b->n || !b->tokens)
        return ds_err(j->err, sizeof j->err, "seq_append: bad row counts");
    if (j->s->n + b->n > mctx_capacity(j->s->ctx))
        return ds_err(j->err, sizeof j->err, "context window full (%d tokens)", mctx_capacity(j->s->ctx));
    return 0;
}

/* a job's append done: its ids join the sequence */
static void job_done(seq_job *j) {
    memcpy(j->s->toks + j->s->n, j->b.tokens, sizeof(int) * (size_t)j->b.n);
    j->s->n += j->b.n;
    j->rc = 0;
}

int seq_append_multi(seq_job *jobs, int n, char *err, size_t errlen) {
    if (n < 1 || n > MODEL_MULTI_MAX)
        return ds_err(err, errlen, "seq_append_multi: %d sequences (1..%d)", n, MODEL_MULTI_MAX);
    for (int i = 0; i < n; i++) {
        if (!jobs[i].s) return ds_err(err, errlen, "seq_append_multi: sequence %d is NULL", i);
        if (seq_model(jobs[i].s) != seq_model(jobs[0].s))
            return ds_err(err, errlen, "seq_append_multi: sequence %d belongs to another model", i);
        for (int k = 0; k < i; k++)
            if (jobs[k].s == jobs[i].s)
                return ds_err(err, errlen, "seq_append_multi: jobs %d and %d are one sequence", k, i);
    }
    model_ctx *cs[MODEL_MULTI_MAX];
    model_batch bs[MODEL_MULTI_MAX];
    int idx[MODEL_MULTI_MAX], m = 0;
    for (int i = 0; i < n; i++) {
        jobs[i].err[0] = 0;
        jobs[i].rc = job_check(&jobs[i]);
        if (jobs[i].rc) continue;
        cs[m] = jobs[i].s->ctx;
        bs[m] = jobs[i].b;
        idx[m++] = i;
    }
    if (m == 0) return 0;
    if (m == 1) { /* (a failure is this job's own) */
        seq_job *j = &jobs[idx[0]];
        if (model_forward(cs[0], &bs[0], j->err, sizeof j->err) != 0) {
            cut(j->s, j->s->n);
            j->rc = -1;
        } else {
            job_done(j);
        }
        return 0;
    }
    char e[400];
    if (model_forward_multi(cs, bs, m, e, sizeof e) == 0) {
        for (int t = 0; t < m; t++) job_done(&jobs[idx[t]]);
        return 0;
    }
    /* nothing ran (a batch was refused) or the forward broke part-way: put
       every cache back to its sequence and run each job alone */
    for (int t = 0; t < m; t++) cut(jobs[idx[t]].s, jobs[idx[t]].s->n);
    for (int t = 0; t < m; t++) {
        seq_job *j = &jobs[idx[t]];
        if (model_forward(cs[t], &bs[t], j->err, sizeof j->err) != 0) {
            cut(j->s, j->s->n);
            j->rc = -1;
        } else {
            job_done(j);
        }
    }
    return 0;
}

void seq_keep_taps_resident(seq *s, int on) { s->taps_resident = on; }
const float *seq_resident_taps(seq *s, int n, int *rows) { return mctx_resident_taps(s->ctx, n, rows); }

int seq_chain_ok(const seq *s) { return mctx_chain_ok(s->ctx); }

int seq_chain_start(seq *s, int id, char *err, size_t errlen) {
    seq_chain_end(s);
    if (s->n >= mctx_capacity(s->ctx))
        return ds_err(err, errlen, "context window full (%d tokens)", mctx_capacity(s->ctx));
    if (mctx_chain_start(s->ctx, id, err, errlen) != 0) return -1;
    s->chain_in = id;
    s->in_chain = 1;
    return 0;
}

int seq_chain_next(seq *s, int more, int *next, char *err, size_t errlen) {
    if (!s->in_chain) return ds_err(err, errlen, "chained decoding: no step in flight");
    if (mctx_chain_next(s->ctx, more, next, err, errlen) != 0) {
        s->in_chain = 0;
        return -1;
    }
    s->toks[s->n++] = s->chain_in;
    s->chain_in = *next; /* the input of the step launched above, if any */
    s->in_chain = more;
    return 0;
}

void seq_chain_end(seq *s) {
    if (!s->in_chain) return;
    mctx_chain_end(s->ctx);
    s->in_chain = 0;
}

int seq_copy_prefix(seq *dst, const seq *src, int n, char *err, size_t errlen) {
    if (n < 0 || n > src->n) return ds_err(err, errlen, "sequence copy: %d ids, the source holds %d", n, src->n);
    if (src->in_chain) return ds_err(err, errlen, "sequence copy: the source has a chained step in flight");
    seq_chain_end(dst);
    if (mctx_copy_prefix(dst->ctx, src->ctx, n, err, errlen) != 0) return -1;
    memcpy(dst->toks, src->toks, sizeof(int) * (size_t)n);
    dst->n = n;
    return 0;
}

size_t seq_pos_bytes(const seq *s) { return mctx_pos_bytes(s->ctx); }
int seq_kept_from(const seq *s) { return mctx_kept_from(s->ctx); }

int seq_save_rows(seq *s, int pos0, int n, void *host, char *err, size_t errlen) {
    if (pos0 < 0 || n < 0 || pos0 + n > s->n)
        return ds_err(err, errlen, "sequence save: positions %d..%d, it holds %d", pos0, pos0 + n, s->n);
    seq_chain_end(s);
    return mctx_save_rows(s->ctx, pos0, n, host, err, errlen);
}

/* after a load of positions [pos0, pos0+n) into the context (rc its
   result; the sequence cut to pos0 before it): the ids, or on a failure
   the context cut back to pos0 */
static int loaded(seq *s, const int *ids, int pos0, int n, int rc) {
    if (rc != 0) {
        mctx_truncate(s->ctx, pos0);
        return -1;
    }
    memcpy(s->toks + pos0, ids + pos0, sizeof(int) * (size_t)n);
    s->n = pos0 + n;
    return 0;
}

int seq_load_rows(seq *s, const int *ids, int pos0, int n, const void *host, char *err, size_t errlen) {
    if (pos0 < 0 || n < 0 || pos0 > s->n || n > seq_capacity(s) - pos0)
        return ds_err(err, errlen, "sequence load: positions %d..%d, it holds %d and takes %d", pos0, pos0 + n, s->n,
                      seq_capacity(s));
    seq_truncate(s, pos0);
    return loaded(s, ids, pos0, n, mctx_load_rows(s->ctx, pos0, n, host, err, errlen));
}

int seq_block_rows(const seq *s) { return mctx_block_rows(s->ctx); }

mblock *seq_block_take(seq *s, int b, char *err, size_t errlen) {
    seq_chain_end(s);
    return mctx_block_take(s->ctx, b, err, errlen);
}

int seq_block_put(seq *s, const int *ids, int b, const mblock *blk, char *err, size_t errlen) {
    const int r = seq_block_rows(s), pos0 = b * r;
    if (!r || b < 0 || pos0 > s->n || r > seq_capacity(s) - pos0)
        return ds_err(err, errlen, "sequence block %d: it holds %d positions and takes %d", b, s->n, seq_capacity(s));
    seq_truncate(s, pos0);
    return loaded(s, ids, pos0, r, mctx_block_put(s->ctx, b, blk, err, errlen));
}

void seq_truncate(seq *s, int len) {
    seq_chain_end(s);
    if (len < 0) len = 0;
    if (len >= s->n) return;
    cut(s, len);
}
