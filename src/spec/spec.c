/* spec: see spec.h. */
#include "spec/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "base/util.h"

/* A verify (at most SPEC_MAX_DRAFT + 1 rows) must take the batch-invariant
   kernels, never a backend's prefill family, and prefilling in
   prefill_chunk-row calls must cut the same groups as one call over the
   whole prompt (backend.h) */
_Static_assert(SPEC_MAX_DRAFT + 1 < BACKEND_GROUP_ROWS, "verify widths reach the prefill kernels");
_Static_assert(SPEC_MAX_DRAFT + 1 <= MODEL_SAMPLE_ROWS, "a verify has more rows than a forward samples");
_Static_assert(SPEC_PREFILL_CHUNK % BACKEND_GROUP_ROWS == 0, "prefill chunks cut the groups differently");
_Static_assert(SPEC_PREFILL_CHUNK == BACKEND_PREFILL_ROWS, "the speculative prefill's chunks are the backends'");
/* prompt rows between progress reports on the plain prefill path */
#define PROGRESS_CHUNK 512

/* The round that sampler_rows's answers out[0..k] give, its uniforms
   drawn ahead by sampler_peek: the accepted count a and the extra token *y;
   consumes the uniforms the round used (sampler_rows) */
static int take_rows(sampler *smp, const int *out, int k, int *y) {
    int a = 0;
    while (a < k && out[a] < 0) a++;
    *y = out[a];
    sampler_skip(smp, a < k ? a + 2 : k + 1);
    return a;
}

/* A rejected sampled draft's replacement: y ~ normalize(max(0, p - q)),
   or p itself when that leaves no mass (p == q up to rounding). r is
   scratch of vocab floats. */
static int residual_draw(sampler *smp, const float *p, const float *q, float *r, int vocab) {
    double mass = 0;
    for (int i = 0; i < vocab; i++) {
        float v = p[i] - q[i];
        r[i] = v > 0.0f ? v : 0.0f;
        mass += r[i];
    }
    if (mass <= 1e-8) {
        memcpy(r, p, sizeof(float) * (size_t)vocab);
        mass = 0;
        for (int i = 0; i < vocab; i++) mass += r[i];
    }
    return sampler_draw(smp, r, vocab, mass);
}

int spec_accept(sampler *smp, const float *logits, int vocab, const int *draft, const float *q, int k, float *p,
                float *r, int *y) {
    if (sampler_is_greedy(smp)) {
        int a = 0;
        while (a < k && op_argmax(logits + (size_t)a * vocab, vocab) == draft[a]) a++;
        *y = op_argmax(logits + (size_t)a * vocab, vocab);
        return a;
    }
    if (!q) { /* one-hot drafts: the rows' rule, with uniforms drawn ahead */
        double u[SPEC_MAX_DRAFT + 1];
        int out[SPEC_MAX_DRAFT + 1];
        sampler_peek(smp, u, k + 1);
        sampler_rows(smp, logits, k + 1, draft, u, out, 0);
        return take_rows(smp, out, k, y);
    }
    for (int j = 0; j < k; j++) {
        const float *row = logits + (size_t)j * vocab;
        const float *qj = q + (size_t)j * vocab;
        int d = draft[j];
        sampler_probs(smp, row, p);
        double qd = qj[d];
        if (qd < 1e-8) qd = 1e-8;
        double u = sampler_uniform(smp);
        if (u < (double)p[d] / qd) continue; /* accepted: u < min(1, p/q) */
        *y = residual_draw(smp, p, qj, r, vocab);
        return j;
    }
    *y = sampler_sample(smp, logits + (size_t)k * vocab);
    return k;
}

/* ---- a logit processor's rows (spec.h logit_proc) ---- */

/* D (spec.h) of the processed row w into p[vocab]; w comes back masked.
   Returns p's mass (about 1), or -1 when no id is allowed. */
static double proc_dist(sampler *smp, const logit_proc *lp, float *w, int V, float *p) {
    sampler_probs(smp, w, p);
    if (lp->mask(lp->self, w) <= 0) return -1;
    double mass = 0;
    for (int i = 0; i < V; i++) {
        if (w[i] == -INFINITY) p[i] = 0.0f;
        else mass += p[i];
    }
    if (mass > 0) return mass;
    /* the filters left the allowed ids no mass: the masked row's filters */
    sampler_probs(smp, w, p);
    mass = 0;
    for (int i = 0; i < V; i++) mass += p[i];
    return mass > 0 ? mass : -1;
}

/* A draw from D for the raw row, taken into the processor's context: the
   sampler's pick of the processed row when the processor takes it, else a
   draw from the whole of D (spec.h: the two steps together draw from D).
   Returns the id, or -1 on an error. */
static int proc_choose(sampler *smp, const logit_proc *lp, const float *raw, int V, float *w, float *p) {
    lp->apply(lp->self, raw, w);
    const int greedy = sampler_is_greedy(smp);
    int x = greedy ? op_argmax(w, V) : sampler_sample(smp, w);
    int r = lp->accept(lp->self, x);
    if (r != 0) return r > 0 ? x : -1;
    if (greedy) {
        /* the first argmax over the allowed ids: when the unmasked first
           argmax is allowed it is that one, so the check above agrees */
        if (lp->mask(lp->self, w) <= 0) return -1;
        x = op_argmax(w, V);
    } else {
        double mass = proc_dist(smp, lp, w, V, p);
        if (mass < 0) return -1;
        x = sampler_draw(smp, p, V, mass);
    }
    return lp->accept(lp->self, x) == 1 ? x : -1;
}

/* A verify round under a processor, row by row (spec.h): logits[nd+1][V]
   raw, drafts d[nd], q[nd][V] the drafts' distributions (NULL: one-hot).
   Each accepted draft and y are taken into the processor's context.
   Returns the accepted count (y in *y), or -1 on an error. */
static int proc_round(sampler *smp, const logit_proc *lp, const float *logits, int V, const int *d, const float *q,
                      int nd, float *w, float *p, float *r, int *y) {
    const int greedy = sampler_is_greedy(smp);
    for (int j = 0; j <= nd; j++) {
        const float *row = logits + (size_t)j * V;
        if (j < nd && q && !greedy) { /* min(1, D(d) / q(d)), else y ~ max(0, D - q) */
            lp->apply(lp->self, row, w);
            if (proc_dist(smp, lp, w, V, p) < 0) return -1;
            const float *qj = q + (size_t)j * V;
            double qd = qj[d[j]] < 1e-8f ? 1e-8 : qj[d[j]];
            if (sampler_uniform(smp) < (double)p[d[j]] / qd) {
                if (lp->accept(lp->self, d[j]) != 1) return -1;
                continue;
            }
            *y = residual_draw(smp, p, qj, r, V);
            return lp->accept(lp->self, *y) == 1 ? j : -1;
        }
        /* greedy, or a one-hot draft: the position's own draw, compared */
        int x = proc_choose(smp, lp, row, V, w, p);
        if (x < 0) return -1;
        if (j < nd && x == d[j]) continue;
        *y = x;
        return j;
    }
    return -1; /* not reached: row nd always ends the round */
}

static int proc_fail(const logit_proc *lp, char *err, size_t errlen) {
    const char *e = lp->error ? lp->error(lp->self) : NULL;
    return ds_err(err, errlen, "constrained decoding: %s", e && *e ? e : "no token is allowed here");
}

typedef struct {
    const spec_opts *o;
    spec_stats *st;
    int *out_ids;
    int n_prompt, cap;
} gen_state;

/* Records an emitted id; 1 when generation stops after it: a stop id (not
   emitted as text), the token limit, or a full context window, checked in
   that order after every token, so a stop inside an accepted block cuts
   the output where one-token-at-a-time decoding would. */
static int push(gen_state *g, int id, const float *row) {
    const spec_opts *o = g->o;
    if (g->out_ids) g->out_ids[g->st->n_gen] = id;
    g->st->n_gen++;
    int is_stop = 0;
    for (int i = 0; i < o->n_stop; i++) is_stop |= o->stop[i] == id;
    if (is_stop && !o->ignore_eos) {
        g->st->stopped_by_eos = 1;
        return 1;
    }
    if (o->emit_logits) o->emit_logits(o->emit_ctx, id, row);
    if (o->emit) o->emit(o->emit_ctx, id);
    /* baseline: stop when n_gen == max_new or seq_len + 1 >= capacity,
       with seq_len = n_prompt + n_gen - 1 at that point */
    return g->st->n_gen == o->max_new || g->n_prompt + g->st->n_gen >= g->cap;
}

/* Plain greedy decoding as a chain of one-row steps (seq_chain_start): the
   step for an id is launched before the id is read back, unless the token
   limit or the window ends generation at that id, so the GPU never waits
   for the host; a step past a stop id (or a cancel) is dropped. The same
   ids, stops and statistics as one-row rounds. */
static int decode_chained(seq *s, gen_state *g, int anchor, int *last_in, char *err, size_t errlen) {
    const spec_opts *o = g->o;
    spec_stats *st = g->st;
    if (seq_chain_start(s, anchor, err, errlen) != 0) return -1;
    int in = anchor, rc = 0;
    for (int stop = 0; !stop;) {
        if (o->cancel && *o->cancel) break;
        double tr = ds_now();
        /* push's limits for the id read next (n_gen is one more then) */
        const int more = st->n_gen + 1 < o->max_new && g->n_prompt + st->n_gen + 1 < g->cap;
        int y;
        if (seq_chain_next(s, more, &y, err, errlen) != 0) {
            rc = -1;
            break;
        }
        st->n_rounds++;
        st->accept_hist[0]++;
        st->n_round_tok++;
        stop = push(g, y, NULL);
        *last_in = in;
        in = y;
        if (o->on_round) o->on_round(o->hook_ctx, 0, 0, 1, ds_now() - tr);
    }
    seq_chain_end(s);
    return rc;
}

/* whether drafter d (reading nt > 0 taps) takes them where the target's
   backend left them (features_resident) */
static int taps_resident(const seq *s, const drafter *d) {
    return d->features_resident && d->n_taps <= model_caps(seq_model(s))->resident_taps;
}

/* Prefill for a drafter that reads target features: the cached prefix is
   kept only as far as the drafter still holds features for it, and the rest
   runs in chunks whose layer taps go to the drafter as they are computed
   (so features never need a whole-prompt buffer), through the host or, for
   a drafter beside its target on a GPU, in the backend's memory. Returns rows computed or
   -1. */
static int prefill_features(seq *s, drafter *d, const int *prompt, int n, float *logits, float *taps, int chunk,
                            const spec_opts *o, spec_stats *st, char *err, size_t errlen) {
    if (n <= 0) return ds_err(err, errlen, "empty prompt");
    if (n > seq_capacity(s))
        return ds_err(err, errlen, "prompt of %d tokens does not fit the %d-token context window", n,
                      seq_capacity(s));
    int keep = 0;
    const int *have = seq_tokens(s);
    while (keep < seq_len(s) && keep < n - 1 && have[keep] == prompt[keep]) keep++;
    double td = ds_now();
    int dk = d->reset(d->self, prompt, n);
    st->t_draft += ds_now() - td;
    if (dk < keep) keep = dk < 0 ? 0 : dk;
    seq_truncate(s, keep);
    const int on_res = taps_resident(s, d);
    for (int pos = keep; pos < n; pos += chunk) {
        int m = n - pos < chunk ? n - pos : chunk;
        int last = pos + m == n, res_rows = 0;
        const float *res = on_res ? seq_resident_taps(s, m, &res_rows) : NULL;
        seq_keep_taps_resident(s, res != NULL);
        int rc = seq_append_taps(s, prompt + pos, m, last, logits, d->n_taps, d->tap_layers, taps, err, errlen);
        seq_keep_taps_resident(s, 0);
        if (rc != 0) {
            seq_reset(s);
            return -1;
        }
        td = ds_now();
        if (res) d->features_resident(d->self, pos, m, res, res_rows, 0);
        else d->features(d->self, pos, m, taps, m, 0);
        st->t_draft += ds_now() - td;
        if (o->on_prefill) o->on_prefill(o->hook_ctx, pos + m, n);
    }
    return n - keep;
}

/* seq_prefill, in PROGRESS_CHUNK steps when progress is reported: each
   step extends the cached prefix (seq_prefill keeps it), so the work is
   the same but for one logits row per step. */
static int prefill_plain(seq *s, const int *prompt, int n, float *logits, const spec_opts *o, char *err,
                         size_t errlen) {
    if (!o->on_prefill) return seq_prefill(s, prompt, n, logits, err, errlen);
    int keep = 0;
    const int *have = seq_tokens(s);
    while (keep < seq_len(s) && keep < n - 1 && have[keep] == prompt[keep]) keep++;
    int done = 0;
    for (int m = keep + PROGRESS_CHUNK; ; m += PROGRESS_CHUNK) {
        if (m > n) m = n;
        int r = seq_prefill(s, prompt, m, logits, err, errlen);
        if (r < 0) return -1;
        done += r;
        o->on_prefill(o->hook_ctx, m, n);
        if (m == n) break;
    }
    return done;
}

int spec_generate(seq *s, sampler *smp, drafter *d, const int *prompt, int n_prompt, const spec_opts *o,
                  int *out_ids, float *last_logits, spec_stats *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    const int chunk = o->prefill_chunk ? o->prefill_chunk : SPEC_PREFILL_CHUNK;
    if (chunk <= 0 || chunk % BACKEND_GROUP_ROWS)
        return ds_err(err, errlen, "prefill chunk of %d rows: it must be a positive multiple of %d", chunk,
                      BACKEND_GROUP_ROWS);
    const int V = model_cfg(seq_model(s))->vocab_size;
    int K = d ? o->max_draft : 0;
    if (K < 0) K = 0;
    if (K > SPEC_MAX_DRAFT) K = SPEC_MAX_DRAFT;
    float *logits = xmalloc(sizeof(float) * (size_t)(K + 1) * (size_t)V);
    float *p = xmalloc(sizeof(float) * (size_t)V), *r = xmalloc(sizeof(float) * (size_t)V);
    float *w = o->proc ? xmalloc(sizeof(float) * (size_t)V) : NULL; /* a processed row */
    int rows[SPEC_MAX_DRAFT + 1], tok[SPEC_MAX_DRAFT + 1], am[SPEC_MAX_DRAFT + 1];
    /* nobody reading logits rows: a greedy verify asks for the rows' argmax
       only, a sampled one with one-hot drafts for sampler_rows's answers
       (a GPU then samples on the device and reads back ids, not
       vocab-wide rows); the last logits row, when asked for, is recomputed
       at the end */
    /* a logit processor reads every row on the host (spec.h) */
    const logit_proc *lp = o->proc;
    const int greedy = sampler_is_greedy(smp),
              on_rows = !o->emit_logits && !lp && model_samples_rows(seq_model(s));
    /* sampled drafts drawn on the target's GPU, their distributions left
       there for the verify */
    const int res_q = !greedy && on_rows && d && !d->deterministic && d->propose_resident;
    const int ids_only = greedy ? !o->emit_logits && !lp : on_rows && (!d || d->deterministic || res_q);
    model_draft_q dq = {0};
    /* the drafts' distributions on the host (a drafter that samples there) */
    float *q = (d && !d->deterministic && K > 0 && !res_q) ? xmalloc(sizeof(float) * (size_t)K * (size_t)V) : NULL;
    int last_in = -1; /* the input id of the row behind the last emitted id (-1: none since the prefill) */
    gen_state g = {.o = o, .st = st, .out_ids = out_ids, .n_prompt = n_prompt, .cap = seq_capacity(s)};
    int rc = 0, last_row = 0;
    const int nt = d ? d->n_taps : 0, H = model_cfg(seq_model(s))->hidden_size;
    float *taps = nt ? xmalloc(sizeof(float) * (size_t)nt * (size_t)(K + 1 > chunk ? K + 1 : chunk) *
                               (size_t)H)
                     : NULL;
    double t0 = ds_now();
    if (nt) st->n_prefilled = prefill_features(s, d, prompt, n_prompt, logits, taps, chunk, o, st, err, errlen);
    else st->n_prefilled = prefill_plain(s, prompt, n_prompt, logits, o, err, errlen);
    double t1 = ds_now();
    st->t_prefill = t1 - t0;
    if (st->n_prefilled < 0) {
        rc = -1;
        goto done;
    }
    if (d && !nt) d->reset(d->self, prompt, n_prompt);
    if (o->max_new <= 0 || (o->cancel && *o->cancel)) goto finish;
    int anchor;
    if (lp) {
        lp->save(lp->self);
        anchor = proc_choose(smp, lp, logits, V, w, p);
        if (anchor < 0) {
            rc = proc_fail(lp, err, errlen);
            goto finish;
        }
    } else {
        anchor = sampler_sample(smp, logits);
    }
    int stop = push(&g, anchor, logits);
    if (d) d->commit(d->self, &anchor, 1);
    /* a drafter on the target's GPU reads the verifies' taps there */
    int tap_rows = 0;
    const float *res_taps = nt && taps_resident(s, d) && K + 1 <= MODEL_RESIDENT_TAP_ROWS
                                ? seq_resident_taps(s, K + 1, &tap_rows) /* (every round's buffer) */
                                : NULL;
    seq_keep_taps_resident(s, res_taps != NULL);
    if (!stop && !d && greedy && ids_only && seq_chain_ok(s)) {
        rc = decode_chained(s, &g, anchor, &last_in, err, errlen);
        stop = 1;
    }
    while (!stop) {
        if (o->cancel && *o->cancel) break;
        int L = seq_len(s); /* = n_prompt + n_gen - 1: the anchor is not in the cache */
        int k = K;
        if (k > 0 && o->next_cap) {
            int c = o->next_cap(o->ctl);
            k = c < 0 ? 0 : c < K ? c : K;
        }
        if (k > o->max_new - st->n_gen - 1) k = o->max_new - st->n_gen - 1;
        if (k > g.cap - L - 2) k = g.cap - L - 2;
        int nd = 0;
        double tr = ds_now();
        if (k > 0) {
            double td = ds_now();
            if (res_q) {
                double ud[SPEC_MAX_DRAFT];
                int used = 0;
                sampler_peek(smp, ud, k);
                nd = d->propose_resident(d->self, k, rows + 1, ud, &used, &dq);
                sampler_skip(smp, used); /* the draws propose would have made */
            } else {
                nd = d->propose(d->self, k, rows + 1, q);
            }
            st->t_draft += ds_now() - td;
            if (nd < 0) nd = 0;
            if (nd > k) nd = k;
        }
        rows[0] = anchor;
        int y, a = 0;
        if (ids_only && greedy) {
            if (seq_append_argmax(s, rows, nd + 1, am, nt, nt ? d->tap_layers : NULL, taps, err, errlen) != 0) {
                rc = -1;
                break;
            }
            while (a < nd && am[a] == rows[a + 1]) a++; /* spec_accept's greedy rule */
            y = am[a];
        } else if (ids_only) {
            double u[SPEC_MAX_DRAFT + 1];
            sampler_peek(smp, u, nd + 1);
            const model_draft_q *qd = nd && dq.e ? &dq : NULL; /* NULL: one-hot drafts */
            if (seq_append_sample(s, rows, nd + 1, smp, u, qd, am, nt, nt ? d->tap_layers : NULL, taps, err,
                                  errlen) != 0) {
                rc = -1;
                break;
            }
            a = take_rows(smp, am, nd, &y);
        } else {
            if (seq_append_taps(s, rows, nd + 1, nd + 1, logits, nt, nt ? d->tap_layers : NULL, taps, err, errlen) !=
                0) {
                rc = -1;
                break;
            }
            const float *qh = d && !d->deterministic ? q : NULL;
            if (lp) {
                lp->save(lp->self);
                a = proc_round(smp, lp, logits, V, rows + 1, qh, nd, w, p, r, &y);
                if (a < 0) {
                    rc = proc_fail(lp, err, errlen);
                    seq_truncate(s, L);
                    break;
                }
            } else {
                a = spec_accept(smp, logits, V, rows + 1, qh, nd, p, r, &y);
            }
        }
        if (k > 0 && o->observe) o->observe(o->ctl, nd, a);
        st->n_rounds++;
        st->n_drafted += nd;
        st->n_accepted += a;
        st->accept_hist[a]++;
        memcpy(tok, rows + 1, sizeof(int) * (size_t)a);
        tok[a] = y;
        int ne = 0;
        for (int i = 0; i <= a && !stop; i++) {
            if (o->cancel && *o->cancel) break;
            stop = push(&g, tok[i], ids_only ? NULL : logits + (size_t)i * V);
            last_row = i;
            last_in = rows[i];
            ne++;
        }
        st->n_round_tok += ne;
        if (lp && ne < a + 1) { /* a stop or cancel inside the round: the context holds what was emitted */
            lp->restore(lp->self);
            for (int i = 0; i < ne; i++) lp->accept(lp->self, tok[i]);
        }
        if (o->on_round) o->on_round(o->hook_ctx, nd, a, ne, ds_now() - tr);
        /* keep the anchor and the emitted ids but the last (the next anchor) */
        seq_truncate(s, L + (ne ? ne : 1));
        if (ne == 0) { /* cancelled */
            last_in = -1;
            break;
        }
        if (d) {
            double td = ds_now();
            /* the rows kept in the target cache: the anchor and ne-1 drafts */
            if (res_taps) d->features_resident(d->self, L, ne, res_taps, tap_rows, 0);
            else if (nt) d->features(d->self, L, ne, taps, nd + 1, 0);
            d->commit(d->self, tok, ne);
            st->t_draft += ds_now() - td;
        }
        anchor = tok[ne - 1];
    }
    seq_keep_taps_resident(s, 0);
finish:
    /* (the last logits row below is for the caller's hash, not decoding) */
    st->t_decode = ds_now() - t1;
    if (last_logits && ids_only && last_in >= 0 && rc == 0) {
        /* the row that gave the last id, computed again alone: its input is
           the cache's last position, and a row's bits do not depend on the
           batch it is computed in */
        seq_truncate(s, seq_len(s) - 1);
        if (seq_append_taps(s, &last_in, 1, 1, last_logits, 0, NULL, NULL, err, errlen) != 0) rc = -1;
    } else if (last_logits) {
        /* ids-only rounds write no logits rows: row 0 is then the prefill's
           (all there is when no round ran; a cancelled run's is stale) */
        memcpy(last_logits, logits + (size_t)(ids_only ? 0 : last_row) * V, sizeof(float) * (size_t)V);
    }
    st->cancelled = o->cancel && *o->cancel;
done:
    free(taps);
    free(logits);
    free(q);
    free(w);
    free(p);
    free(r);
    return rc;
}
