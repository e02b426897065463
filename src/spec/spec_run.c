/* spec_run: the verify loop as steps (see spec_run.h), and spec_generate
 * as one run stepped to its end. */
#include "spec/spec_run.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "spec/spec_internal.h"

enum { RUN_PREFILL, RUN_DECODE, RUN_DONE };

struct spec_run {
    seq *s;
    sampler *smp;
    drafter *d;
    int *prompt, n_prompt;
    spec_opts o;
    int *out_ids;
    spec_stats *st;
    /* fixed at creation (spec_generate's choices, spec.h) */
    int V, K, H, nt, chunk, cap;
    int greedy, ids_only, res_q;
    float *logits; /* [K+1][V]: the verify's rows, or the prefill's last row in row 0 */
    float *p, *r, *w, *q, *taps;
    model_draft_q dq;
    /* the state between steps */
    int phase;
    int started;  /* the prefill's first step ran (its checks, the kept prefix) */
    int pf_pos;   /* the next prompt position to compute */
    int pf_failed; /* failed while prefilling (spec_generate then reports no decode time) */
    int anchor;   /* the last emitted id, not yet in the cache */
    int last_in;  /* the input id of the row behind the last emitted id (-1: none since the prefill) */
    int last_row; /* its row in logits (host rows) */
    const float *res_taps; /* a verify's taps in the backend's memory (a drafter beside it on a GPU) */
    int tap_rows;
    double t0, t1;
    int rc;
    char err[512];
    /* the unit of work under way in the current step */
    int m, res_rows, L, k, nd;
    const float *res;
    int rows[SPEC_MAX_DRAFT + 1], tok[SPEC_MAX_DRAFT + 1], am[SPEC_MAX_DRAFT + 1];
    double u[SPEC_MAX_DRAFT + 1];
    double tr;
};

static void run_fail(spec_run *r, const char *msg) {
    snprintf(r->err, sizeof r->err, "%s", msg && *msg ? msg : "generation failed");
    r->rc = -1;
    if (r->phase == RUN_PREFILL) r->pf_failed = 1;
    r->phase = RUN_DONE;
    seq_keep_taps_resident(r->s, 0);
}

/* whether drafter d (reading taps) takes them where the target's backend
   left them (features_resident) */
static int taps_resident(const seq *s, const drafter *d) {
    return d->features_resident && d->n_taps <= model_caps(seq_model(s))->resident_taps;
}

int spec_run_create(spec_run **out, seq *s, sampler *smp, drafter *d, const int *prompt, int n_prompt,
                    const spec_opts *o, int *out_ids, spec_stats *st, char *err, size_t errlen) {
    *out = NULL;
    if (!s || !smp || !o || !st) return ds_err(err, errlen, "spec_run_create: no sequence, sampler, options or stats");
    if (n_prompt < 0 || (n_prompt > 0 && !prompt))
        return ds_err(err, errlen, "spec_run_create: a prompt of %d tokens without ids", n_prompt);
    memset(st, 0, sizeof *st);
    const int chunk = o->prefill_chunk ? o->prefill_chunk : SPEC_PREFILL_CHUNK;
    if (chunk <= 0 || chunk % BACKEND_GROUP_ROWS)
        return ds_err(err, errlen, "prefill chunk of %d rows: it must be a positive multiple of %d", chunk,
                      BACKEND_GROUP_ROWS);
    spec_run *r = xcalloc(1, sizeof *r);
    r->s = s;
    r->smp = smp;
    r->d = d;
    r->n_prompt = n_prompt;
    r->prompt = xmalloc(sizeof(int) * (size_t)(n_prompt > 0 ? n_prompt : 1));
    if (n_prompt) memcpy(r->prompt, prompt, sizeof(int) * (size_t)n_prompt);
    r->o = *o;
    r->out_ids = out_ids;
    r->st = st;
    r->chunk = chunk;
    r->cap = seq_capacity(s);
    const model *m = seq_model(s);
    r->V = model_cfg(m)->vocab_size;
    r->H = model_cfg(m)->hidden_size;
    int K = d ? o->max_draft : 0;
    r->K = K < 0 ? 0 : K > SPEC_MAX_DRAFT ? SPEC_MAX_DRAFT : K;
    r->nt = d ? d->n_taps : 0;
    const size_t V = (size_t)r->V;
    r->logits = xcalloc((size_t)(r->K + 1) * V, sizeof(float)); /* (zeros until a prefill's last row) */
    r->p = xmalloc(sizeof(float) * V);
    r->r = xmalloc(sizeof(float) * V);
    r->w = o->proc ? xmalloc(sizeof(float) * V) : NULL; /* a processed row */
    /* nobody reading logits rows: a greedy verify asks for the rows' argmax
       only, a sampled one with one-hot drafts for sampler_rows's answers
       (a GPU then samples on the device and reads back ids, not
       vocab-wide rows); the last logits row, when asked for, is recomputed
       at the end. A logit processor reads every row on the host (spec.h). */
    const logit_proc *lp = o->proc;
    r->greedy = sampler_is_greedy(smp);
    const int on_rows = !o->emit_logits && !lp && model_samples_rows(m);
    /* sampled drafts drawn on the target's GPU, their distributions left
       there for the verify */
    r->res_q = !r->greedy && on_rows && d && !d->deterministic && d->propose_resident;
    r->ids_only = r->greedy ? !o->emit_logits && !lp : on_rows && (!d || d->deterministic || r->res_q);
    /* the drafts' distributions on the host (a drafter that samples there) */
    if (d && !d->deterministic && r->K > 0 && !r->res_q) r->q = xmalloc(sizeof(float) * (size_t)r->K * V);
    if (r->nt) {
        int rows = r->K + 1 > chunk ? r->K + 1 : chunk;
        r->taps = xmalloc(sizeof(float) * (size_t)r->nt * (size_t)rows * (size_t)r->H);
    }
    r->last_in = -1;
    r->phase = RUN_PREFILL;
    *out = r;
    return 0;
}

int spec_run_done(const spec_run *r) { return r->phase == RUN_DONE; }
int spec_run_prefilling(const spec_run *r) { return r->phase == RUN_PREFILL; }
const char *spec_run_error(const spec_run *r) { return r->rc ? r->err : NULL; }

/* Records an emitted id; 1 when generation stops after it: a stop id (not
   emitted as text), the token limit, or a full context window, checked in
   that order after every token, so a stop inside an accepted block cuts
   the output where one-token-at-a-time decoding would. */
static int push(spec_run *r, int id, const float *row) {
    const spec_opts *o = &r->o;
    spec_stats *st = r->st;
    if (r->out_ids) r->out_ids[st->n_gen] = id;
    st->n_gen++;
    int is_stop = 0;
    for (int i = 0; i < o->n_stop; i++) is_stop |= o->stop[i] == id;
    if (is_stop && !o->ignore_eos) {
        st->stopped_by_eos = 1;
        return 1;
    }
    if (o->emit_logits) o->emit_logits(o->emit_ctx, id, row);
    if (o->emit) o->emit(o->emit_ctx, id);
    /* baseline: stop when n_gen == max_new or seq_len + 1 >= capacity,
       with seq_len = n_prompt + n_gen - 1 at that point */
    return st->n_gen == o->max_new || r->n_prompt + st->n_gen >= r->cap;
}

static int cancelled(const spec_run *r) { return r->o.cancel && __atomic_load_n(r->o.cancel, __ATOMIC_RELAXED); }

/* ---- prefill ---- */

/* The prefill's first step: the prompt's checks and the cached prefix
   kept (seq_prefill's rule, and for a drafter reading features only as
   far as it still holds them). 0, or -1 (the run failed). */
static int prefill_begin(spec_run *r) {
    const int n = r->n_prompt;
    char e[256];
    r->started = 1;
    r->t0 = ds_now();
    if (n <= 0) {
        run_fail(r, "empty prompt");
        return -1;
    }
    if (n > seq_capacity(r->s)) {
        ds_err(e, sizeof e, "prompt of %d tokens does not fit the %d-token context window", n, seq_capacity(r->s));
        run_fail(r, e);
        return -1;
    }
    int keep = 0;
    const int *have = seq_tokens(r->s);
    while (keep < seq_len(r->s) && keep < n - 1 && have[keep] == r->prompt[keep]) keep++;
    if (r->nt) {
        double td = ds_now();
        int dk = r->d->reset(r->d->self, r->prompt, n);
        r->st->t_draft += ds_now() - td;
        if (dk < keep) keep = dk < 0 ? 0 : dk;
    }
    seq_truncate(r->s, keep);
    keep = seq_len(r->s); /* (a sliding layer may have given back the rows keep attends to) */
    r->pf_pos = keep;
    r->st->n_prefilled = n - keep;
    return 0;
}

/* The next chunk's rows into job. */
static void prefill_job(spec_run *r, seq_job *j) {
    const int n = r->n_prompt;
    const int chunk = r->nt ? r->chunk : r->o.on_prefill ? SPEC_PROGRESS_CHUNK : SPEC_PREFILL_CHUNK;
    const int m = n - r->pf_pos < chunk ? n - r->pf_pos : chunk;
    const int last = r->pf_pos + m == n;
    r->m = m;
    r->res = NULL;
    r->res_rows = 0;
    model_batch b = {.n = m, .tokens = r->prompt + r->pf_pos, .n_logits = last, .logits = r->logits};
    if (r->nt) {
        r->res = taps_resident(r->s, r->d) ? seq_resident_taps(r->s, m, &r->res_rows) : NULL;
        b.n_taps = r->nt;
        b.tap_layers = r->d->tap_layers;
        b.taps = r->taps;
        b.taps_resident = r->res != NULL;
    }
    j->b = b;
}

/* The first id, drawn from the prefill's last row; the run decodes next
   or is done. */
static void prefill_end(spec_run *r) {
    const spec_opts *o = &r->o;
    drafter *d = r->d;
    r->t1 = ds_now();
    r->st->t_prefill = r->t1 - r->t0;
    if (d && !r->nt) d->reset(d->self, r->prompt, r->n_prompt);
    r->phase = RUN_DONE;
    if (o->max_new <= 0 || cancelled(r)) return;
    const logit_proc *lp = o->proc;
    int anchor;
    if (lp) {
        lp->save(lp->self);
        anchor = spec_proc_choose(r->smp, lp, r->logits, r->V, r->w, r->p);
        if (anchor < 0) {
            char e[512];
            spec_proc_fail(lp, e, sizeof e);
            run_fail(r, e);
            return;
        }
    } else {
        anchor = sampler_sample(r->smp, r->logits);
    }
    int stop = push(r, anchor, r->logits);
    if (d) d->commit(d->self, &anchor, 1);
    r->anchor = anchor;
    /* a drafter on the target's GPU reads the verifies' taps there */
    r->res_taps = r->nt && taps_resident(r->s, d) && r->K + 1 <= MODEL_RESIDENT_TAP_ROWS
                      ? seq_resident_taps(r->s, r->K + 1, &r->tap_rows) /* (every round's buffer) */
                      : NULL;
    if (!stop) r->phase = RUN_DECODE;
}

static void prefill_done(spec_run *r, const seq_job *j) {
    if (j->rc != 0) {
        seq_reset(r->s); /* as seq_prefill leaves a failed prompt */
        run_fail(r, j->err);
        return;
    }
    if (r->nt) {
        double td = ds_now();
        if (r->res) r->d->features_resident(r->d->self, r->pf_pos, r->m, r->res, r->res_rows, 0);
        else r->d->features(r->d->self, r->pf_pos, r->m, r->taps, r->m, 0);
        r->st->t_draft += ds_now() - td;
    }
    r->pf_pos += r->m;
    if (r->o.on_prefill) r->o.on_prefill(r->o.hook_ctx, r->pf_pos, r->n_prompt);
    if (r->pf_pos == r->n_prompt) prefill_end(r);
}

/* ---- rounds ---- */

/* The round's drafts and its verify's rows into job; 0 when the run
   stopped instead (a cancel). */
static int round_job(spec_run *r, seq_job *j) {
    const spec_opts *o = &r->o;
    spec_stats *st = r->st;
    drafter *d = r->d;
    if (cancelled(r)) {
        r->phase = RUN_DONE;
        return 0;
    }
    r->tr = ds_now();
    const int L = seq_len(r->s); /* = n_prompt + n_gen - 1: the anchor is not in the cache */
    int k = r->K;
    if (k > 0 && o->next_cap) {
        int c = o->next_cap(o->ctl);
        k = c < 0 ? 0 : c < r->K ? c : r->K;
    }
    if (k > o->max_new - st->n_gen - 1) k = o->max_new - st->n_gen - 1;
    if (k > r->cap - L - 2) k = r->cap - L - 2;
    int nd = 0;
    if (k > 0) {
        double td = ds_now();
        if (r->res_q) {
            double ud[SPEC_MAX_DRAFT];
            int used = 0;
            sampler_peek(r->smp, ud, k);
            nd = d->propose_resident(d->self, k, r->rows + 1, ud, &used, &r->dq);
            sampler_skip(r->smp, used); /* the draws propose would have made */
        } else {
            nd = d->propose(d->self, k, r->rows + 1, r->q);
        }
        st->t_draft += ds_now() - td;
        if (nd < 0) nd = 0;
        if (nd > k) nd = k;
    }
    r->L = L;
    r->k = k;
    r->nd = nd;
    r->rows[0] = r->anchor;
    model_batch b = {.n = nd + 1, .tokens = r->rows, .n_logits = nd + 1};
    if (r->ids_only && r->greedy) {
        b.argmax = r->am;
    } else if (r->ids_only) {
        sampler_peek(r->smp, r->u, nd + 1);
        b.smp = r->smp;
        b.draft = r->rows + 1;
        b.u = r->u;
        b.sampled = r->am;
        b.draft_q = nd && r->dq.e ? &r->dq : NULL; /* NULL: one-hot drafts */
    } else {
        b.logits = r->logits;
    }
    if (r->nt) {
        b.n_taps = r->nt;
        b.tap_layers = d->tap_layers;
        b.taps = r->taps;
        b.taps_resident = r->res_taps != NULL;
    }
    j->b = b;
    return 1;
}

static void round_done(spec_run *r, const seq_job *j) {
    const spec_opts *o = &r->o;
    spec_stats *st = r->st;
    drafter *d = r->d;
    const logit_proc *lp = o->proc;
    const int V = r->V, nd = r->nd, L = r->L;
    if (j->rc != 0) {
        run_fail(r, j->err);
        return;
    }
    int y, a = 0;
    if (r->ids_only && r->greedy) {
        while (a < nd && r->am[a] == r->rows[a + 1]) a++; /* spec_accept's greedy rule */
        y = r->am[a];
    } else if (r->ids_only) {
        a = spec_take_rows(r->smp, r->am, nd, &y);
    } else {
        const float *qh = d && !d->deterministic ? r->q : NULL;
        if (lp) {
            lp->save(lp->self);
            a = spec_proc_round(r->smp, lp, r->logits, V, r->rows + 1, qh, nd, r->w, r->p, r->r, &y);
            if (a < 0) {
                char e[512];
                spec_proc_fail(lp, e, sizeof e);
                seq_truncate(r->s, L);
                run_fail(r, e);
                return;
            }
        } else {
            a = spec_accept(r->smp, r->logits, V, r->rows + 1, qh, nd, r->p, r->r, &y);
        }
    }
    if (r->k > 0 && o->observe) o->observe(o->ctl, nd, a);
    st->n_rounds++;
    st->n_drafted += nd;
    st->n_accepted += a;
    st->accept_hist[a]++;
    memcpy(r->tok, r->rows + 1, sizeof(int) * (size_t)a);
    r->tok[a] = y;
    int ne = 0, stop = 0;
    for (int i = 0; i <= a && !stop; i++) {
        if (cancelled(r)) break;
        stop = push(r, r->tok[i], r->ids_only ? NULL : r->logits + (size_t)i * V);
        r->last_row = i;
        r->last_in = r->rows[i];
        ne++;
    }
    st->n_round_tok += ne;
    if (lp && ne < a + 1) { /* a stop or cancel inside the round: the context holds what was emitted */
        lp->restore(lp->self);
        for (int i = 0; i < ne; i++) lp->accept(lp->self, r->tok[i]);
    }
    if (o->on_round) o->on_round(o->hook_ctx, nd, a, ne, ds_now() - r->tr);
    /* keep the anchor and the emitted ids but the last (the next anchor) */
    seq_truncate(r->s, L + (ne ? ne : 1));
    if (ne == 0) { /* cancelled */
        r->last_in = -1;
        r->phase = RUN_DONE;
        return;
    }
    if (d) {
        double td = ds_now();
        /* the rows kept in the target cache: the anchor and ne-1 drafts */
        if (r->res_taps) d->features_resident(d->self, L, ne, r->res_taps, r->tap_rows, 0);
        else if (r->nt) d->features(d->self, L, ne, r->taps, nd + 1, 0);
        d->commit(d->self, r->tok, ne);
        st->t_draft += ds_now() - td;
    }
    r->anchor = r->tok[ne - 1];
    if (stop) r->phase = RUN_DONE;
}

/* Plain greedy decoding as a chain of one-row steps (seq_chain_start), at
   most max_tok ids: the step for an id is launched before the id is read
   back, unless the token limit, the window or max_tok ends the chain at
   that id, so the GPU never waits for the host; a step past a stop id (or
   a cancel) is dropped. The same ids, stops and statistics as one-row
   rounds. */
static void decode_chained(spec_run *r, int max_tok) {
    const spec_opts *o = &r->o;
    spec_stats *st = r->st;
    char e[512];
    if (seq_chain_start(r->s, r->anchor, e, sizeof e) != 0) {
        run_fail(r, e);
        return;
    }
    int in = r->anchor, stop = 0;
    for (int t = 0; !stop && t < max_tok; t++) {
        if (cancelled(r)) {
            stop = 1;
            break;
        }
        double tr = ds_now();
        /* push's limits for the id read next (n_gen is one more then) */
        const int more = st->n_gen + 1 < o->max_new && r->n_prompt + st->n_gen + 1 < r->cap && t + 1 < max_tok;
        int y;
        if (seq_chain_next(r->s, more, &y, e, sizeof e) != 0) {
            seq_chain_end(r->s);
            run_fail(r, e);
            return;
        }
        st->n_rounds++;
        st->accept_hist[0]++;
        st->n_round_tok++;
        stop = push(r, y, NULL);
        r->last_in = in;
        in = y;
        if (o->on_round) o->on_round(o->hook_ctx, 0, 0, 1, ds_now() - tr);
    }
    seq_chain_end(r->s);
    r->anchor = in;
    if (stop) r->phase = RUN_DONE;
}

static int chains(const spec_run *r) {
    return r->phase == RUN_DECODE && !r->d && r->greedy && r->ids_only && seq_chain_ok(r->s);
}

/* ---- steps ---- */

static int step_runs(spec_run *const *runs, int n, int chain_max, char *err, size_t errlen) {
    if (n < 0 || n > SPEC_STEP_MAX_RUNS) return ds_err(err, errlen, "spec_step: %d runs (0..%d)", n, SPEC_STEP_MAX_RUNS);
    spec_run *live[SPEC_STEP_MAX_RUNS];
    int nl = 0;
    for (int i = 0; i < n; i++) {
        const spec_run *r = runs[i];
        if (!r) return ds_err(err, errlen, "spec_step: run %d is NULL", i);
        if (r->phase == RUN_DONE) continue;
        for (int t = 0; t < nl; t++) {
            const spec_run *x = live[t];
            if (x->s == r->s || x->smp == r->smp || (x->d && r->d && x->d->self == r->d->self))
                return ds_err(err, errlen, "spec_step: two runs share a %s",
                              x->s == r->s ? "sequence" : x->smp == r->smp ? "sampler" : "drafter state");
            if (seq_model(x->s) != seq_model(r->s))
                return ds_err(err, errlen, "spec_step: runs on sequences of different models");
        }
        live[nl++] = runs[i];
    }
    if (nl == 0) return 0;
    if (nl == 1 && chains(live[0])) {
        decode_chained(live[0], chain_max);
        return 0;
    }
    seq_job jobs[SPEC_STEP_MAX_RUNS];
    spec_run *who[SPEC_STEP_MAX_RUNS];
    int nj = 0;
    for (int i = 0; i < nl; i++) {
        spec_run *r = live[i];
        seq_job *j = &jobs[nj];
        memset(j, 0, sizeof *j);
        j->s = r->s;
        if (r->phase == RUN_PREFILL) {
            if (!r->started && prefill_begin(r) != 0) continue;
            prefill_job(r, j);
        } else if (!round_job(r, j)) {
            continue;
        }
        who[nj++] = r;
    }
    if (nj == 0) return 0;
    if (seq_append_multi(jobs, nj, err, errlen) != 0) return -1; /* (checked above: not reached) */
    for (int i = 0; i < nj; i++) {
        if (who[i]->phase == RUN_PREFILL) prefill_done(who[i], &jobs[i]);
        else round_done(who[i], &jobs[i]);
    }
    return 0;
}

int spec_step(spec_run *const *runs, int n, char *err, size_t errlen) {
    return step_runs(runs, n, SPEC_CHAIN_STEP, err, errlen);
}

int spec_run_finish(spec_run *r, float *last_logits, char *err, size_t errlen) {
    if (r->phase != RUN_DONE) {
        seq_chain_end(r->s);
        if (r->phase == RUN_PREFILL && r->started) r->t1 = ds_now();
        r->phase = RUN_DONE;
    }
    spec_stats *st = r->st;
    if (r->pf_failed) return ds_err(err, errlen, "%s", r->err);
    /* (the last logits row below is for the caller's hash, not decoding) */
    st->t_decode = r->t1 > 0 ? ds_now() - r->t1 : 0;
    int rc = r->rc;
    if (rc) ds_err(err, errlen, "%s", r->err);
    if (last_logits && r->ids_only && r->last_in >= 0 && rc == 0) {
        /* the row that gave the last id, computed again alone: its input is
           the cache's last position, and a row's bits do not depend on the
           batch it is computed in */
        seq_truncate(r->s, seq_len(r->s) - 1);
        if (seq_append_taps(r->s, &r->last_in, 1, 1, last_logits, 0, NULL, NULL, err, errlen) != 0) rc = -1;
    } else if (last_logits) {
        /* ids-only rounds write no logits rows: row 0 is then the prefill's
           (all there is when no round ran; a cancelled run's is stale) */
        memcpy(last_logits, r->logits + (size_t)(r->ids_only ? 0 : r->last_row) * r->V, sizeof(float) * (size_t)r->V);
    }
    st->cancelled = cancelled(r);
    return rc;
}

void spec_run_free(spec_run *r) {
    if (!r) return;
    free(r->prompt);
    free(r->taps);
    free(r->logits);
    free(r->q);
    free(r->w);
    free(r->p);
    free(r->r);
    free(r);
}

int spec_generate(seq *s, sampler *smp, drafter *d, const int *prompt, int n_prompt, const spec_opts *o,
                  int *out_ids, float *last_logits, spec_stats *st, char *err, size_t errlen) {
    spec_run *r;
    if (spec_run_create(&r, s, smp, d, prompt, n_prompt, o, out_ids, st, err, errlen) != 0) return -1;
    /* one run, nobody to admit beside it: a chain runs to its end */
    while (!spec_run_done(r))
        if (step_runs(&r, 1, INT_MAX, err, errlen) != 0) break;
    int rc = spec_run_finish(r, last_logits, err, errlen);
    spec_run_free(r);
    return rc;
}
