/* sched: see sched.h. */
#include "server/sched.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/stopstr.h"
#include "base/util.h"
#include "engine/memfit.h"

#define EVENT_RING 512

struct sched {
    cli_spec *sp; /* the slot of the running job */
    seq *s;
    sched_slot slots[SCHED_MAX_SLOTS];
    double slot_used[SCHED_MAX_SLOTS];
    int n_slots;
    sampler *smp;
    const tokenizer *tok;
    int stop_ids[32], n_stop;
    sched_info info;
    gtok_trie *trie; /* the vocabulary trie, built for the first constrained job */
    pthread_t th;

    pthread_mutex_t qmu; /* queue, stopping, running */
    pthread_cond_t qcv;
    sched_job **q;
    int qn, qcap, stopping;
    sched_job *running;
    char cut_why[256]; /* sched_cut's reason, the error of the job it halts */

    pthread_mutex_t mmu; /* metrics */
    sched_metrics m;

    pthread_mutex_t emu; /* event ring */
    pthread_cond_t ecv;
    char *ring[EVENT_RING];
    uint64_t n_events;
    int events_closed;
};

static void abs_deadline(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_REALTIME, ts);
    double s = (double)ts->tv_sec + ts->tv_nsec * 1e-9 + seconds;
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)((s - (double)ts->tv_sec) * 1e9);
}

/* ---- events ---- */

static void publish(sched *en, const char *json) {
    pthread_mutex_lock(&en->emu);
    char **slot = &en->ring[en->n_events % EVENT_RING];
    free(*slot);
    *slot = xstrdup(json);
    en->n_events++;
    pthread_cond_broadcast(&en->ecv);
    pthread_mutex_unlock(&en->emu);
}

int sched_events_next(sched *en, uint64_t *pos, int replay, double timeout, strbuf *out) {
    pthread_mutex_lock(&en->emu);
    if (*pos == SCHED_EVENTS_NEW) *pos = en->n_events > (uint64_t)replay ? en->n_events - (uint64_t)replay : 0;
    int rc = 0;
    for (int waited = 0;; waited = 1) {
        if (en->events_closed) {
            rc = -1;
            break;
        }
        if (en->n_events > EVENT_RING && *pos < en->n_events - EVENT_RING) *pos = en->n_events - EVENT_RING;
        if (*pos < en->n_events) {
            sb_puts(out, en->ring[*pos % EVENT_RING]);
            (*pos)++;
            rc = 1;
            break;
        }
        if (waited) break;
        struct timespec ts;
        abs_deadline(&ts, timeout);
        pthread_cond_timedwait(&en->ecv, &en->emu, &ts);
    }
    pthread_mutex_unlock(&en->emu);
    return rc;
}

/* ---- jobs ---- */

sched_job *sched_job_new(void) {
    sched_job *j = xcalloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->logprobs = -1;
    j->t_queued = ds_now();
    return j;
}

void sched_job_release(sched_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    free(j->ids);
    free(j->budget_text);
    free(j->lp);
    free(j->proc.bias_id);
    free(j->proc.bias);
    grammar_free((grammar *)j->proc.g);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->stops);
    sb_free(&j->text);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void sched_job_cancel(sched_job *j) {
    pthread_mutex_lock(&j->mu);
    if (!j->done) j->cancelled = 1;
    j->halt = 1;
    pthread_mutex_unlock(&j->mu);
}

static void finish_job(sched_job *j, int finish, const char *error) {
    pthread_mutex_lock(&j->mu);
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    j->finish = finish;
    j->t_end = ds_now();
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

int sched_submit(sched *en, sched_job *j) {
    pthread_mutex_lock(&en->qmu);
    if (en->stopping) {
        pthread_mutex_unlock(&en->qmu);
        finish_job(j, FINISH_ERROR, "the server is shutting down");
        return -1;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    if (en->qn == en->qcap) {
        en->qcap = en->qcap ? en->qcap * 2 : 16;
        en->q = xrealloc(en->q, sizeof *en->q * (size_t)en->qcap);
    }
    en->q[en->qn++] = j;
    int ahead = en->qn - 1 + (en->running != NULL);
    pthread_cond_signal(&en->qcv);
    pthread_mutex_unlock(&en->qmu);
    return ahead;
}

/* ---- generation ---- */

typedef struct {
    sched *en;
    sched_job *j;
    tok_stream ts;
    char *piece;
    size_t piece_cap;
    stop_matcher sm;
    strbuf out;
    int round, prefill_reported;
    /* reasoning budget: 0 before an opener, 1 inside, 2 after the closer */
    int think_state, think_tokens, budget_hit;
    strbuf tail; /* recent text, to find the markers */
} gen_ctx;

/* Follows the reasoning block through the text and halts generation when
   the budget is spent inside it. */
static void track_think(gen_ctx *g, const char *s, size_t n) {
    sched_job *j = g->j;
    if (j->think_budget <= 0 || !j->think_open || !j->think_close || g->think_state == 2 || g->budget_hit) return;
    if (g->think_state == 1) g->think_tokens++;
    sb_append(&g->tail, s, n);
    const char *mk = g->think_state == 0 ? j->think_open : j->think_close;
    const char *hit = strstr(sb_str(&g->tail), mk);
    if (hit) {
        sb_consume(&g->tail, (size_t)(hit - g->tail.s) + strlen(mk));
        g->think_state++;
        if (g->think_state == 1) g->think_tokens = 1;
        if (g->think_state == 1 && strstr(sb_str(&g->tail), j->think_close)) g->think_state = 2;
        if (g->think_state == 2) return;
    } else if (g->tail.n > 64) sb_consume(&g->tail, g->tail.n - 64);
    if (g->think_state == 1 && g->think_tokens >= j->think_budget) {
        g->budget_hit = 1;
        j->halt = 1;
    }
}

static void deliver(gen_ctx *g, int last) {
    sched_job *j = g->j;
    if (!g->out.n && !last) return;
    pthread_mutex_lock(&j->mu);
    if (g->out.n) {
        if (!j->t_first) j->t_first = ds_now();
        sb_append(&j->text, g->out.s, g->out.n);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    sb_clear(&g->out);
}

/* log-softmax of the row at id, and the top alternatives */
static void on_emit_logits(void *ctx, int id, const float *row) {
    gen_ctx *g = ctx;
    sched_job *j = g->j;
    if (j->logprobs < 0 || tok_is_special(g->en->tok, id)) return;
    int V = tok_vocab_size(g->en->tok), n = j->logprobs;
    const model_config *mc = model_cfg(seq_model(g->en->s));
    if (mc->vocab_size < V) V = mc->vocab_size;
    float mx = row[0];
    for (int i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)(row[i] - mx));
    float lse = mx + (float)log(sum);
    sched_logprob e = {.id = id, .lp = row[id] - lse};
    for (int i = 0; i < V && n > 0; i++) { /* insertion into the sorted top n */
        float v = row[i];
        if (e.n_top == n && v <= row[e.top_id[n - 1]]) continue;
        int k = e.n_top < n ? e.n_top++ : n - 1;
        while (k > 0 && row[e.top_id[k - 1]] < v) {
            e.top_id[k] = e.top_id[k - 1];
            k--;
        }
        e.top_id[k] = i;
    }
    for (int i = 0; i < e.n_top; i++) e.top_lp[i] = row[e.top_id[i]] - lse;
    pthread_mutex_lock(&j->mu);
    if (j->n_lp == j->cap_lp) {
        j->cap_lp = j->cap_lp ? 2 * j->cap_lp : 64;
        j->lp = xrealloc(j->lp, sizeof *j->lp * (size_t)j->cap_lp);
    }
    j->lp[j->n_lp++] = e;
    pthread_mutex_unlock(&j->mu);
}

static void on_emit(void *ctx, int id) {
    gen_ctx *g = ctx;
    if (tok_is_special(g->en->tok, id)) return;
    size_t k = tok_stream_push(g->en->tok, &g->ts, id, g->piece, g->piece_cap);
    track_think(g, g->piece, k);
    if (stop_push(&g->sm, g->piece, k, &g->out)) {
        g->j->halt = 1;
        snprintf(g->j->stop_hit, sizeof g->j->stop_hit, "%s", stop_which(&g->sm));
    }
    deliver(g, 0);
}

/* the job's drafter: none for a plain job */
static drafter *job_drafter(sched *en, const sched_job *j) { return j->plain ? NULL : cli_spec_drafter(en->sp); }

/* the mode a job decodes in */
static const char *job_mode(const sched *en, const sched_job *j) { return j->plain ? "baseline" : en->info.mode; }

static void prefill_event(gen_ctx *g, int done, int total, int final) {
    char ev[256];
    snprintf(ev, sizeof ev, "{\"type\":\"prefill\",\"req\":%llu,\"mode\":\"%s\",\"processed\":%d,\"total\":%d%s}",
             (unsigned long long)g->j->req_id, job_mode(g->en, g->j), done, total, final ? ",\"done\":true" : "");
    publish(g->en, ev);
}

static void on_prefill(void *ctx, int done, int total) { prefill_event(ctx, done, total, 0); }

static int current_cap(const sched *en, const sched_job *j) {
    const cli_spec *sp = en->sp;
    if (!sp || sp->mode == CLI_MODE_BASELINE || (j && j->plain)) return 0;
    return sp->adaptive ? sp->ctl.cap : sp->max_draft;
}

static void on_round(void *ctx, int drafted, int accepted, int emitted, double seconds) {
    gen_ctx *g = ctx;
    sched *en = g->en;
    if (!g->prefill_reported) {
        g->prefill_reported = 1;
        prefill_event(g, g->j->n_ids, g->j->n_ids, 1);
    }
    int cap = current_cap(en, g->j);
    g->j->cap = cap;
    const char *src = !en->sp || en->sp->mode == CLI_MODE_BASELINE || drafted == 0 ? "plain"
                      : en->sp->mode == CLI_MODE_LOOKUP                           ? "lookup"
                                                                                  : "drafter";
    char ev[384];
    snprintf(ev, sizeof ev,
             "{\"req\":%llu,\"mode\":\"%s\",\"i\":%d,\"drafted\":%d,\"accepted\":%d,\"committed\":%d,\"cap\":%d,"
             "\"source\":\"%s\",\"ms\":%.3f,\"t\":%.3f}",
             (unsigned long long)g->j->req_id, job_mode(en, g->j), g->round++, drafted, accepted, emitted, cap, src,
             seconds * 1e3, ds_now());
    publish(en, ev);
}

/* The budget ran out inside the reasoning block: feed the closing text as
   if the model had written it (one forward over the prompt, the answer so
   far and the closing tokens, reusing the cached prefix) and generate the
   rest of the token budget from there. The counts of both parts add up;
   the forced tokens count as generated. */
static int continue_after_budget(sched *en, sched_job *j, gen_ctx *g, spec_opts *so, const int *out_ids,
                                 spec_stats *st, char *err, size_t errlen) {
    int *close = NULL;
    int nc = tok_encode(en->tok, j->budget_text, strlen(j->budget_text), 0, &close, err, errlen);
    if (nc < 0) return -1;
    int left = j->max_new - st->n_gen - nc;
    if (left <= 0 || j->n_ids + st->n_gen + nc >= seq_capacity(en->s)) {
        free(close); /* no room to close the block: end as the budget found it */
        return 0;
    }
    j->budget_forced = 1;
    int n = j->n_ids + st->n_gen + nc;
    int *ids = xmalloc(sizeof(int) * (size_t)n);
    memcpy(ids, j->ids, sizeof(int) * (size_t)j->n_ids);
    memcpy(ids + j->n_ids, out_ids, sizeof(int) * (size_t)st->n_gen);
    memcpy(ids + j->n_ids + st->n_gen, close, sizeof(int) * (size_t)nc);
    for (int i = 0; i < nc; i++) {
        on_emit(g, close[i]);
        /* the closing text as the model's own: a grammar waiting for the
           block's end starts after it (a text it refuses is not taken) */
        if (so->proc) so->proc->accept(so->proc->self, close[i]);
    }
    free(close);
    g->think_state = 2;
    /* generation goes on unless a cancel or a cut came meanwhile (their flags
       are set under mu before halt, so none is lost here) */
    pthread_mutex_lock(&j->mu);
    j->halt = j->cancelled || j->cut;
    pthread_mutex_unlock(&j->mu);
    spec_opts o2 = *so;
    o2.max_new = left;
    spec_stats s2;
    int rc = spec_generate(en->s, en->smp, job_drafter(en, j), ids, n, &o2, NULL, NULL, &s2, err, errlen);
    free(ids);
    if (rc != 0) return rc;
    st->n_gen += nc + s2.n_gen;
    st->stopped_by_eos = s2.stopped_by_eos;
    st->cancelled = s2.cancelled;
    st->n_rounds += s2.n_rounds;
    st->n_round_tok += s2.n_round_tok;
    st->n_drafted += s2.n_drafted;
    st->n_accepted += s2.n_accepted;
    for (int a = 0; a <= SPEC_MAX_DRAFT; a++) st->accept_hist[a] += s2.accept_hist[a];
    st->t_prefill += s2.t_prefill;
    st->t_decode += s2.t_decode;
    st->t_draft += s2.t_draft;
    return 0;
}

/* The slot whose cached ids share the longest prefix with the prompt, when
   that prefix is at least half the prompt; else the least recently used
   slot (an empty one first). A new conversation shares only the template's
   first few tokens with any cached one, and must not evict it for them. */
static int pick_slot(sched *en, const int *ids, int n) {
    int best = -1, best_len = 0, lru = 0;
    for (int i = 0; i < en->n_slots; i++) {
        seq *s = en->slots[i].s;
        const int *have = seq_tokens(s);
        int len = seq_len(s), k = 0;
        while (k < len && k < n && have[k] == ids[k]) k++;
        if (k > best_len) {
            best = i;
            best_len = k;
        }
        if (en->slot_used[i] < en->slot_used[lru]) lru = i;
    }
    return best >= 0 && 2 * best_len >= n ? best : lru;
}

int sched_guard(const sched_slot *slots, int n, int busy, const double *used, char *log, size_t logn) {
    memfit_sys sys;
    char err[256], why[128];
    int shed = 0, done[SCHED_MAX_SLOTS] = {0};
    for (;;) {
        if (memfit_read_sys(&sys, err, sizeof err) != 0 || !memfit_pressure(&sys, why, sizeof why)) break;
        int pick = -1;
        for (int i = 0; i < n && i < SCHED_MAX_SLOTS; i++)
            if (i != busy && !done[i] && seq_len(slots[i].s) > 0 && (pick < 0 || used[i] < used[pick])) pick = i;
        if (pick < 0) break; /* nothing idle left to give back */
        done[pick] = 1;
        int held = seq_len(slots[pick].s);
        size_t b = seq_release(slots[pick].s);
        shed++;
        snprintf(log, logn, "memory guard: %s; shed idle cache slot %d (%d positions, %.1f MiB)", why, pick + 1, held,
                 (double)b / 1048576.0);
        fprintf(stderr, "dspark serve: %s\n", log);
    }
    return shed;
}

/* the guard from the scheduler thread, its count and line to the metrics */
static void guard(sched *en, int busy) {
    char line[192];
    int k = sched_guard(en->slots, en->n_slots, busy, en->slot_used, line, sizeof line);
    if (!k) return;
    pthread_mutex_lock(&en->mmu);
    en->m.slots_shed += (uint64_t)k;
    snprintf(en->m.last_shed, sizeof en->m.last_shed, "%s", line);
    pthread_mutex_unlock(&en->mmu);
}

static void run_job(sched *en, sched_job *j) {
    char err[512];
    int slot = pick_slot(en, j->ids, j->n_ids);
    guard(en, slot);
    en->slot_used[slot] = ds_now();
    en->s = en->slots[slot].s;
    en->sp = en->slots[slot].sp;
    pthread_mutex_lock(&j->mu);
    j->t_start = ds_now();
    pthread_mutex_unlock(&j->mu);
    if (sampler_reset(en->smp, &j->sp, err, sizeof err) != 0) {
        finish_job(j, FINISH_ERROR, err);
        return;
    }
    gen_ctx g = {.en = en, .j = j, .piece_cap = tok_stream_cap(en->tok) + 1};
    g.piece = xmalloc(g.piece_cap);
    stop_init(&g.sm, (const char *const *)j->stops, j->n_stops);
    spec_opts so = {.max_new = j->max_new, .stop = en->stop_ids, .n_stop = en->n_stop, .cancel = &j->halt,
                    .emit = on_emit, .emit_logits = j->logprobs >= 0 ? on_emit_logits : NULL, .emit_ctx = &g,
                    .on_prefill = on_prefill, .on_round = on_round,
                    .hook_ctx = &g};
    if (!j->plain) cli_spec_apply(en->sp, &so);
    so.ignore_eos = j->ignore_eos;
    lproc *lpr = NULL;
    logit_proc lpi;
    if (lproc_cfg_active(&j->proc)) {
        if (j->proc.g && !en->trie) en->trie = gtok_trie_new(en->tok, en->stop_ids, en->n_stop);
        lpr = lproc_new(&j->proc, en->trie, model_cfg(seq_model(en->s))->vocab_size, j->ids, j->n_ids);
        lpi = lproc_iface(lpr);
        so.proc = &lpi;
    }
    spec_stats st = {0};
    int *out_ids = xmalloc(sizeof(int) * (size_t)(j->max_new > 0 ? j->max_new : 1));
    g.think_state = j->think_prefilled ? 1 : 0;
    int rc = j->halt ? 0 : spec_generate(en->s, en->smp, job_drafter(en, j), j->ids, j->n_ids, &so, out_ids,
                                         NULL, &st, err, sizeof err);
    if (rc == 0 && g.budget_hit && !stop_matched(&g.sm) && !j->cancelled)
        rc = continue_after_budget(en, j, &g, &so, out_ids, &st, err, sizeof err);
    free(out_ids);
    lproc_free(lpr);
    size_t k = tok_stream_flush(&g.ts, g.piece, g.piece_cap);
    if (!stop_matched(&g.sm)) {
        if (!stop_push(&g.sm, g.piece, k, &g.out)) stop_flush(&g.sm, &g.out);
        if (stop_matched(&g.sm)) snprintf(j->stop_hit, sizeof j->stop_hit, "%s", stop_which(&g.sm));
    }
    deliver(&g, 1);
    if (!g.prefill_reported && rc == 0) prefill_event(&g, j->n_ids, j->n_ids, 1);
    int cancelled, cut;
    pthread_mutex_lock(&j->mu);
    j->st = st;
    cancelled = j->cancelled;
    cut = j->cut;
    pthread_mutex_unlock(&j->mu);
    /* A cut job that still reached its token budget is whole (LENGTH); one
       halted short of it is not, whatever else ended the loop. */
    int finish = rc != 0                            ? FINISH_ERROR
                 : stop_matched(&g.sm)              ? FINISH_STOP
                 : st.stopped_by_eos                ? FINISH_EOS
                 : cut && st.n_gen < j->max_new     ? FINISH_SHUTDOWN
                 : cancelled                        ? FINISH_CANCEL
                                                    : FINISH_LENGTH;
    char why[sizeof en->cut_why];
    pthread_mutex_lock(&en->qmu);
    snprintf(why, sizeof why, "%s", en->cut_why);
    pthread_mutex_unlock(&en->qmu);
    pthread_mutex_lock(&en->mmu);
    sched_metrics *m = &en->m;
    m->requests++;
    m->requests_cancelled += finish == FINISH_CANCEL;
    m->requests_failed += finish == FINISH_ERROR;
    m->requests_cut += finish == FINISH_SHUTDOWN;
    if (rc == 0) {
        m->prompt_tokens += (uint64_t)j->n_ids;
        m->cached_tokens += (uint64_t)(j->n_ids - st.n_prefilled);
        m->prefill_tokens += (uint64_t)st.n_prefilled;
        m->prompts++;
        m->slot_hits += j->n_ids - st.n_prefilled > 0; /* positions actually reused, not merely matched */
        m->completion_tokens += (uint64_t)st.n_gen;
        m->rounds += (uint64_t)st.n_rounds;
        m->round_tokens += (uint64_t)st.n_round_tok;
        m->drafted += (uint64_t)st.n_drafted;
        m->accepted += (uint64_t)st.n_accepted;
        m->prefill_seconds += st.t_prefill;
        m->decode_seconds += st.t_decode;
        m->last_cap = current_cap(en, j);
    }
    pthread_mutex_unlock(&en->mmu);
    finish_job(j, finish, rc != 0 ? err : finish == FINISH_SHUTDOWN ? why : NULL);
    stop_free(&g.sm);
    sb_free(&g.out);
    sb_free(&g.tail);
    free(g.piece);
}

static void *sched_main(void *arg) {
    sched *en = arg;
    for (;;) {
        pthread_mutex_lock(&en->qmu);
        while (!en->qn && !en->stopping) {
            struct timespec ts;
            abs_deadline(&ts, SCHED_GUARD_S);
            if (pthread_cond_timedwait(&en->qcv, &en->qmu, &ts) == ETIMEDOUT && !en->qn && !en->stopping) {
                pthread_mutex_unlock(&en->qmu); /* idle: no slot is serving */
                guard(en, -1);
                pthread_mutex_lock(&en->qmu);
            }
        }
        if (en->stopping) {
            pthread_mutex_unlock(&en->qmu);
            break;
        }
        sched_job *j = en->q[0];
        memmove(en->q, en->q + 1, sizeof *en->q * (size_t)(en->qn - 1));
        en->qn--;
        en->running = j;
        pthread_mutex_unlock(&en->qmu);
        run_job(en, j);
        pthread_mutex_lock(&en->qmu);
        en->running = NULL;
        pthread_mutex_unlock(&en->qmu);
        sched_job_release(j);
    }
    return NULL;
}

sched *sched_start(const sched_slot *slots, int n_slots, sampler *smp, const tokenizer *tok, const int *stop_ids,
                     int n_stop, const sched_info *info) {
    sched *en = xcalloc(1, sizeof *en);
    en->n_slots = n_slots < 1 ? 1 : n_slots > SCHED_MAX_SLOTS ? SCHED_MAX_SLOTS : n_slots;
    memcpy(en->slots, slots, sizeof(sched_slot) * (size_t)en->n_slots);
    en->sp = slots[0].sp;
    en->s = slots[0].s;
    en->smp = smp;
    en->tok = tok;
    en->n_stop = n_stop < 32 ? n_stop : 32;
    memcpy(en->stop_ids, stop_ids, sizeof(int) * (size_t)en->n_stop);
    en->info = *info;
    pthread_mutex_init(&en->qmu, NULL);
    pthread_cond_init(&en->qcv, NULL);
    pthread_mutex_init(&en->mmu, NULL);
    pthread_mutex_init(&en->emu, NULL);
    pthread_cond_init(&en->ecv, NULL);
    if (pthread_create(&en->th, NULL, sched_main, en) != 0) cli_die("cannot start the scheduler thread");
    return en;
}

void sched_cut(sched *en, const char *why) {
    pthread_mutex_lock(&en->qmu);
    if (en->stopping) { /* cut already */
        pthread_mutex_unlock(&en->qmu);
        return;
    }
    en->stopping = 1;
    snprintf(en->cut_why, sizeof en->cut_why, "%s", why);
    if (en->running) {
        sched_job *j = en->running;
        pthread_mutex_lock(&j->mu);
        if (!j->done) j->cut = 1;
        j->halt = 1;
        pthread_mutex_unlock(&j->mu);
    }
    sched_job **q = en->q;
    int qn = en->qn;
    en->q = NULL;
    en->qn = en->qcap = 0;
    pthread_cond_broadcast(&en->qcv);
    pthread_mutex_unlock(&en->qmu);
    for (int i = 0; i < qn; i++) {
        pthread_mutex_lock(&q[i]->mu);
        q[i]->cut = 1;
        pthread_mutex_unlock(&q[i]->mu);
        finish_job(q[i], FINISH_SHUTDOWN, why);
        sched_job_release(q[i]);
    }
    free(q);
    pthread_mutex_lock(&en->mmu);
    en->m.requests += (uint64_t)qn;
    en->m.requests_cut += (uint64_t)qn;
    pthread_mutex_unlock(&en->mmu);
}

void sched_stop(sched *en) {
    sched_cut(en, "the server shut down before this request was finished");
    pthread_join(en->th, NULL);
    pthread_mutex_lock(&en->emu);
    en->events_closed = 1;
    pthread_cond_broadcast(&en->ecv);
    pthread_mutex_unlock(&en->emu);
}

void sched_free(sched *en) {
    if (!en) return;
    for (int i = 0; i < EVENT_RING; i++) free(en->ring[i]);
    gtok_trie_free(en->trie);
    pthread_mutex_destroy(&en->qmu);
    pthread_cond_destroy(&en->qcv);
    pthread_mutex_destroy(&en->mmu);
    pthread_mutex_destroy(&en->emu);
    pthread_cond_destroy(&en->ecv);
    free(en);
}

const sched_info *sched_get_info(const sched *en) { return &en->info; }

void sched_get_metrics(sched *en, sched_metrics *m) {
    pthread_mutex_lock(&en->mmu);
    *m = en->m;
    pthread_mutex_unlock(&en->mmu);
    pthread_mutex_lock(&en->qmu);
    m->queue_depth = en->qn;
    m->busy = en->running != NULL;
    pthread_mutex_unlock(&en->qmu);
}
