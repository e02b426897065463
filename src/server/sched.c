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

typedef struct active active;

struct sched {
    sched_slot slots[SCHED_MAX_SLOTS];
    double slot_used[SCHED_MAX_SLOTS];
    int slot_busy[SCHED_MAX_SLOTS]; /* a running job holds it (scheduler thread only) */
    int slot_empty[SCHED_MAX_SLOTS]; /* its pages given back (pool_evict) and no job since */
    int n_slots, max_batch;
    const tokenizer *tok;
    int stop_ids[32], n_stop;
    sched_info info;
    gtok_trie *trie; /* the vocabulary trie, built for the first constrained job */
    pcache *pc;      /* the prefix block cache (NULL: none) */
    pthread_t th;
    int step_rows;   /* rows the runs report during the step under way (scheduler thread) */

    pthread_mutex_t qmu; /* queue, stopping, the running jobs */
    pthread_cond_t qcv;
    sched_job **q;
    int qn, qcap, stopping;
    sched_job *running[SCHED_MAX_SLOTS]; /* admitted and not yet finished */
    int n_running;
    char cut_why[256]; /* sched_cut's reason, the error of the jobs it halts */
    int64_t kv_reserved; /* pages the running jobs may still take (scheduler thread; pool_admit) */

    /* The block store: a finished job's slot is queued for the storer
       thread, which copies its whole blocks into the prefix cache while
       the scheduler steps the other jobs; the slot takes no other job
       meanwhile (store_state != 0), except its own conversation's next
       request, which stops the store at the next block (store_claim). */
    pthread_t store_th;
    int store_on, store_quit;
    pthread_mutex_t smu;
    pthread_cond_t scv; /* a slot queued, or a store over */
    int store_q[SCHED_MAX_SLOTS], store_qn;
    int store_state[SCHED_MAX_SLOTS]; /* 0: none, 1: queued, 2: being stored */
    int store_stop[SCHED_MAX_SLOTS];  /* pcache_store's stop for the slot's store */

    pthread_mutex_t mmu; /* metrics */
    sched_metrics m;

    pthread_mutex_t emu; /* event ring */
    pthread_cond_t ecv;
    char *ring[EVENT_RING];
    uint64_t n_events;
    int events_closed;
};

const int SCHED_ROWS_BOUNDS[SCHED_ROWS_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};

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
    __atomic_store_n(&j->halt, 1, __ATOMIC_RELAXED); /* (read by the run without the lock) */
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
    /* the jobs before it: the queue, and the running ones when the batch is full */
    int ahead = en->qn - 1 + (en->n_running >= en->max_batch ? en->n_running : 0);
    pthread_cond_signal(&en->qcv);
    pthread_mutex_unlock(&en->qmu);
    return ahead;
}

/* ---- generation ---- */

/* A job's generation state on the scheduler thread (the hooks' context). */
typedef struct {
    sched *en;
    sched_job *j;
    seq *s;          /* its slot's sequence */
    cli_spec *sp;    /* its slot's drafter and cap controller */
    tok_stream ts;
    char *piece;
    size_t piece_cap;
    stop_matcher sm;
    strbuf out;
    const spec_stats *st; /* the counts of its run under way */
    int round, prefill_reported;
    int prefill_done; /* prompt positions the run reported done (-1: none yet) */
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
        __atomic_store_n(&j->halt, 1, __ATOMIC_RELAXED);
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
    const model_config *mc = model_cfg(seq_model(g->s));
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
        __atomic_store_n(&g->j->halt, 1, __ATOMIC_RELAXED);
        snprintf(g->j->stop_hit, sizeof g->j->stop_hit, "%s", stop_which(&g->sm));
    }
    deliver(g, 0);
}

/* the job's drafter: none for a plain job */
static drafter *job_drafter(const gen_ctx *g) { return g->j->plain ? NULL : cli_spec_drafter(g->sp); }

/* the mode a job decodes in */
static const char *job_mode(const sched *en, const sched_job *j) { return j->plain ? "baseline" : en->info.mode; }

static void prefill_event(gen_ctx *g, int done, int total, int final) {
    char ev[256];
    snprintf(ev, sizeof ev, "{\"type\":\"prefill\",\"req\":%llu,\"mode\":\"%s\",\"processed\":%d,\"total\":%d%s}",
             (unsigned long long)g->j->req_id, job_mode(g->en, g->j), done, total, final ? ",\"done\":true" : "");
    publish(g->en, ev);
}

/* Prefill progress. The positions done since the last report were computed
   in this step; before the first, the run had kept the prefix it reused
   (the prompt less its computed positions, n_prefilled, set as the run's
   prefill starts). */
static void on_prefill(void *ctx, int done, int total) {
    gen_ctx *g = ctx;
    int from = g->prefill_done >= 0 ? g->prefill_done : total - g->st->n_prefilled;
    if (done > from) g->en->step_rows += done - from;
    g->prefill_done = done;
    prefill_event(g, done, total, 0);
}

static int current_cap(const gen_ctx *g) {
    const cli_spec *sp = g->sp;
    if (!sp || sp->mode == CLI_MODE_BASELINE || g->j->plain) return 0;
    return sp->adaptive ? sp->ctl.cap : sp->max_draft;
}

/* A verify (or plain step) of this job: its anchor and drafts were rows of
   the step's forward. */
static void on_round(void *ctx, int drafted, int accepted, int emitted, double seconds) {
    gen_ctx *g = ctx;
    sched *en = g->en;
    en->step_rows += drafted + 1;
    if (!g->prefill_reported) {
        g->prefill_reported = 1;
        prefill_event(g, g->j->n_ids, g->j->n_ids, 1);
    }
    int cap = current_cap(g);
    g->j->cap = cap;
    const char *src = !g->sp || g->sp->mode == CLI_MODE_BASELINE || drafted == 0 ? "plain"
                      : g->sp->mode == CLI_MODE_LOOKUP                          ? "lookup"
                                                                                : "drafter";
    char ev[384];
    snprintf(ev, sizeof ev,
             "{\"req\":%llu,\"mode\":\"%s\",\"i\":%d,\"drafted\":%d,\"accepted\":%d,\"committed\":%d,\"cap\":%d,"
             "\"source\":\"%s\",\"ms\":%.3f,\"t\":%.3f}",
             (unsigned long long)g->j->req_id, job_mode(en, g->j), g->round++, drafted, accepted, emitted, cap, src,
             seconds * 1e3, ds_now());
    publish(en, ev);
}

/* A running job: its slot, its run (spec_run) and what the run reads. */
struct active {
    sched_job *j;
    int slot;
    gen_ctx g;
    spec_opts so;
    lproc *lpr;
    logit_proc lpi;
    int *out_ids;   /* the first run's ids */
    int *ids2;      /* the prompt of the run after a reasoning budget closed its block */
    int parts;      /* runs so far */
    spec_run *run;  /* NULL once the job has no run left */
    spec_stats part; /* the run under way */
    spec_stats st;   /* the job's counts: its runs' added up */
    int failed;      /* a step failed under it (err) */
    char err[512];
};

/* The run's counts added to the job's: the first run's as they are; a
   later one's tokens (and forced) and rounds add up, its prefill is not
   the prompt's */
static void add_stats(spec_stats *t, const spec_stats *s, int first, int forced) {
    if (first) {
        *t = *s;
        return;
    }
    t->n_gen += forced + s->n_gen;
    t->stopped_by_eos = s->stopped_by_eos;
    t->cancelled = s->cancelled;
    t->n_rounds += s->n_rounds;
    t->n_round_tok += s->n_round_tok;
    t->n_drafted += s->n_drafted;
    t->n_accepted += s->n_accepted;
    for (int a = 0; a <= SPEC_MAX_DRAFT; a++) t->accept_hist[a] += s->accept_hist[a];
    t->t_prefill += s->t_prefill;
    t->t_decode += s->t_decode;
    t->t_draft += s->t_draft;
}

/* The budget ran out inside the reasoning block: feed the closing text as
   if the model had written it and start the job's next run over the prompt,
   the answer so far and the closing tokens (reusing the cached prefix),
   for the rest of the token budget. The counts of both parts add up; the
   forced tokens count as generated. Returns 1 when a run started, 0 when
   there is no room to close the block (the job ends as the budget found
   it), -1 on an error (a->err). */
static int continue_after_budget(sched *en, active *a) {
    sched_job *j = a->j;
    gen_ctx *g = &a->g;
    spec_stats *st = &a->st;
    int *close = NULL;
    int nc = tok_encode(en->tok, j->budget_text, strlen(j->budget_text), 0, &close, a->err, sizeof a->err);
    if (nc < 0) return -1;
    int left = j->max_new - st->n_gen - nc;
    if (left <= 0 || j->n_ids + st->n_gen + nc >= seq_capacity(g->s)) {
        free(close);
        return 0;
    }
    j->budget_forced = 1;
    int n = j->n_ids + st->n_gen + nc;
    a->ids2 = xmalloc(sizeof(int) * (size_t)n);
    memcpy(a->ids2, j->ids, sizeof(int) * (size_t)j->n_ids);
    memcpy(a->ids2 + j->n_ids, a->out_ids, sizeof(int) * (size_t)st->n_gen);
    memcpy(a->ids2 + j->n_ids + st->n_gen, close, sizeof(int) * (size_t)nc);
    for (int i = 0; i < nc; i++) {
        on_emit(g, close[i]);
        /* the closing text as the model's own: a grammar waiting for the
           block's end starts after it (a text it refuses is not taken) */
        if (a->so.proc) a->so.proc->accept(a->so.proc->self, close[i]);
    }
    free(close);
    st->n_gen += nc;
    g->think_state = 2;
    /* generation goes on unless a cancel or a cut came meanwhile (their flags
       are set under mu before halt, so none is lost here) */
    pthread_mutex_lock(&j->mu);
    __atomic_store_n(&j->halt, j->cancelled || j->cut, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&j->mu);
    a->so.max_new = left;
    g->prefill_done = -1;
    sched_slot *sl = &en->slots[a->slot];
    memset(&a->part, 0, sizeof a->part);
    if (spec_run_create(&a->run, g->s, sl->smp, job_drafter(g), a->ids2, n, &a->so, NULL, &a->part, a->err,
                        sizeof a->err) != 0)
        return -1;
    a->parts++;
    return 1;
}

static int store_busy(sched *en, int i) {
    pthread_mutex_lock(&en->smu);
    int b = en->store_state[i] != 0;
    pthread_mutex_unlock(&en->smu);
    return b;
}

/* Slot i for a job: a store of it still queued or under way either stops
   at the next block (stop: the job continues the slot's own conversation,
   whose rows stay in the slot) or is waited for (the job overwrites the
   slot, so the blocks are kept first). */
static void store_claim(sched *en, int i, int stop) {
    pthread_mutex_lock(&en->smu);
    if (stop && en->store_state[i] == 1) {
        int k = 0;
        for (int q = 0; q < en->store_qn; q++)
            if (en->store_q[q] != i) en->store_q[k++] = en->store_q[q];
        en->store_qn = k;
        en->store_state[i] = 0;
    }
    if (stop && en->store_state[i] == 2) __atomic_store_n(&en->store_stop[i], 1, __ATOMIC_RELEASE);
    while (en->store_state[i]) pthread_cond_wait(&en->scv, &en->smu);
    pthread_mutex_unlock(&en->smu);
}

/* The free slot whose cached ids share the longest prefix with the prompt,
   when that prefix is at least half the prompt; else the least recently
   used free slot (an empty one first) whose blocks are not being stored,
   or failing one, the least recently used of those. A new conversation
   shares only the template's first few tokens with any cached one, and
   must not evict it for them. */
static int pick_slot(sched *en, const int *ids, int n) {
    int best = -1, best_len = 0, lru = -1, lru_idle = -1;
    for (int i = 0; i < en->n_slots; i++) {
        if (en->slot_busy[i]) continue;
        seq *s = en->slots[i].s;
        const int *have = seq_tokens(s);
        int len = seq_len(s), k = 0;
        while (k < len && k < n && have[k] == ids[k]) k++;
        if (k > best_len) {
            best = i;
            best_len = k;
        }
        if (lru < 0 || en->slot_used[i] < en->slot_used[lru]) lru = i;
        if (!store_busy(en, i) && (lru_idle < 0 || en->slot_used[i] < en->slot_used[lru_idle])) lru_idle = i;
    }
    const int own = best >= 0 && 2 * best_len >= n, pick = own ? best : lru_idle >= 0 ? lru_idle : lru;
    store_claim(en, pick, own);
    return pick;
}

int sched_guard(const sched_slot *slots, int n, const int *busy, const double *used, char *log, size_t logn) {
    memfit_sys sys;
    char err[256], why[128];
    int shed = 0, done[SCHED_MAX_SLOTS] = {0};
    for (;;) {
        if (memfit_read_sys(&sys, err, sizeof err) != 0 || !memfit_pressure(&sys, why, sizeof why)) break;
        int pick = -1;
        for (int i = 0; i < n && i < SCHED_MAX_SLOTS; i++)
            if (!(busy && busy[i]) && !done[i] && seq_len(slots[i].s) > 0 && (pick < 0 || used[i] < used[pick]))
                pick = i;
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

/* the block cache's counters to the metrics */
static void blocks_stats(sched *en, size_t shed) {
    if (!en->pc) return;
    pthread_mutex_lock(&en->mmu);
    pcache_get_stats(en->pc, &en->m.blocks);
    en->m.blocks_shed += shed;
    pthread_mutex_unlock(&en->mmu);
}

/* Under memory pressure the block cache gives back half of what it holds
   at a time, before any idle slot is emptied: a block is rows the next
   prompt may never ask for, a slot a conversation in place. (On the CPU a
   block shares its pages with any slot that holds the same prefix, so
   letting it go frees only the pages no slot holds: under lasting pressure
   the cache empties, then the idle slots go.) */
static void guard_blocks(sched *en) {
    memfit_sys sys;
    char err[256], why[128];
    size_t shed = 0;
    while (en->pc && memfit_read_sys(&sys, err, sizeof err) == 0 && memfit_pressure(&sys, why, sizeof why)) {
        pcache_stats st;
        pcache_get_stats(en->pc, &st);
        if (!st.bytes) break;
        size_t b = pcache_shed(en->pc, st.bytes / 2);
        if (!b) break;
        shed += b;
        fprintf(stderr, "dspark serve: memory guard: %s; the prefix cache let go of %.1f MiB of blocks\n", why,
                (double)b / 1048576.0);
    }
    if (shed) blocks_stats(en, shed);
}

/* the guard from the scheduler thread (the slots of running jobs kept),
   its count and line to the metrics */
static void guard(sched *en) {
    char line[192];
    int held[SCHED_MAX_SLOTS];
    guard_blocks(en);
    for (int i = 0; i < en->n_slots; i++) held[i] = en->slot_busy[i] || store_busy(en, i);
    int k = sched_guard(en->slots, en->n_slots, held, en->slot_used, line, sizeof line);
    if (!k) return;
    pthread_mutex_lock(&en->mmu);
    en->m.slots_shed += (uint64_t)k;
    snprintf(en->m.last_shed, sizeof en->m.last_shed, "%s", line);
    pthread_mutex_unlock(&en->mmu);
}

/* The job is over (its last run finished, or none could start; rc != 0:
   a->err): the rest of its text, its end, its counts to the metrics; its
   slot is free again. */
static void end_job(sched *en, active *a, int rc) {
    sched_job *j = a->j;
    gen_ctx *g = &a->g;
    spec_stats st = a->st;
    size_t k = tok_stream_flush(&g->ts, g->piece, g->piece_cap);
    if (!stop_matched(&g->sm)) {
        if (!stop_push(&g->sm, g->piece, k, &g->out)) stop_flush(&g->sm, &g->out);
        if (stop_matched(&g->sm)) snprintf(j->stop_hit, sizeof j->stop_hit, "%s", stop_which(&g->sm));
    }
    deliver(g, 1);
    if (!g->prefill_reported && rc == 0) prefill_event(g, j->n_ids, j->n_ids, 1);
    int cancelled, cut;
    pthread_mutex_lock(&j->mu);
    j->st = st;
    cancelled = j->cancelled;
    cut = j->cut;
    pthread_mutex_unlock(&j->mu);
    /* A cut job that still reached its token budget is whole (LENGTH); one
       halted short of it is not, whatever else ended the loop. */
    int finish = rc != 0                            ? FINISH_ERROR
                 : stop_matched(&g->sm)             ? FINISH_STOP
                 : st.stopped_by_eos                ? FINISH_EOS
                 : cut && st.n_gen < j->max_new     ? FINISH_SHUTDOWN
                 : cancelled                        ? FINISH_CANCEL
                                                    : FINISH_LENGTH;
    char why[sizeof en->cut_why];
    pthread_mutex_lock(&en->qmu);
    snprintf(why, sizeof why, "%s", en->cut_why);
    for (int i = 0; i < en->n_running; i++)
        if (en->running[i] == j) {
            memmove(en->running + i, en->running + i + 1, sizeof *en->running * (size_t)(en->n_running - i - 1));
            en->n_running--;
            break;
        }
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
        m->last_cap = current_cap(g);
    }
    pthread_mutex_unlock(&en->mmu);
    finish_job(j, finish, rc != 0 ? a->err : finish == FINISH_SHUTDOWN ? why : NULL);
    if (rc == 0 && en->pc) { /* the slot's whole blocks into the cache, on the storer thread */
        seq_chain_end(en->slots[a->slot].s); /* (the slot is only read from here on) */
        pthread_mutex_lock(&en->smu);
        en->store_state[a->slot] = 1;
        en->store_stop[a->slot] = 0;
        en->store_q[en->store_qn++] = a->slot;
        pthread_cond_broadcast(&en->scv);
        pthread_mutex_unlock(&en->smu);
    }
    en->slot_busy[a->slot] = 0;
    en->slot_used[a->slot] = ds_now();
    lproc_free(a->lpr);
    free(a->out_ids);
    free(a->ids2);
    stop_free(&g->sm);
    sb_free(&g->out);
    sb_free(&g->tail);
    free(g->piece);
    sched_job_release(j);
    free(a);
}

/* ids[0 .. k) that slot i holds */
static int slot_match(sched *en, int i, const int *ids, int n) {
    const seq *s = en->slots[i].s;
    const int *have = seq_tokens(s);
    int len = seq_len(s), k = 0;
    while (k < len && k < n && have[k] == ids[k]) k++;
    return k;
}

/* The prefix of ids a run of job j in slot i would reuse: what the slot's
   cache holds, and for a speculative job no further than its drafter state
   holds context (spec_run's prefill keeps no more) */
static int slot_usable(sched *en, int i, const sched_job *j) {
    int k = slot_match(en, i, j->ids, j->n_ids);
    const int d = j->plain ? -1 : cli_spec_ctx_len(en->slots[i].sp);
    return d >= 0 && d < k ? d : k;
}

/* Prefix sharing between slots: when another slot (running a job or not)
   holds a longer usable prefix of the prompt than slot a does, slot a
   takes a copy of that prefix's cache (seq_copy_prefix) and of its
   drafter's context (cli_spec_copy_prefix) before its run starts, so
   concurrent requests with one long system prompt compute it once. Copies
   are taken between steps on this thread: the source's cached prefix is
   not being written (a running job only appends past its prompt). The
   prompt's last row is always computed (its logits are needed), and a copy
   shorter than SHARE_MIN positions is not worth its bytes. A backend
   without the copy keeps the slot as it is. */
#define SHARE_MIN 32
static void share_prefix(sched *en, int a, const sched_job *j) {
    const int own = slot_usable(en, a, j);
    int src = -1, len = own;
    for (int i = 0; i < en->n_slots; i++) {
        if (i == a) continue;
        const int k = slot_usable(en, i, j);
        if (k > len) src = i, len = k;
    }
    if (len > j->n_ids - 1) len = j->n_ids - 1;
    if (src < 0 || len < own + SHARE_MIN) return;
    char err[256];
    sched_slot *d = &en->slots[a], *s = &en->slots[src];
    if (seq_copy_prefix(d->s, s->s, len, err, sizeof err) != 0) return; /* (no copy on this backend: slot a as it was) */
    if (d->sp && s->sp && cli_spec_copy_prefix(d->sp, s->sp, len, err, sizeof err) < 0) {
        seq_truncate(d->s, own); /* (the drafter's copy failed: only what the slot had stays) */
        return;
    }
    pthread_mutex_lock(&en->mmu);
    en->m.prefix_copies++;
    en->m.prefix_copied_tokens += (uint64_t)(len - own);
    pthread_mutex_unlock(&en->mmu);
}

/* The prefix block cache's part of an admission: when it holds whole
   blocks of the prompt past what slot a already has (its own cache or a
   copy), they are loaded into the slot's sequence, and for a speculative
   job into its drafter state too (only blocks that carry drafter rows then
   count). A failed load leaves the slot holding the blocks loaded before
   it (the run computes the rest). */
static void load_blocks(sched *en, int a, const sched_job *j) {
    if (!en->pc) return;
    sched_slot *sl = &en->slots[a];
    dstate *ds = j->plain ? NULL : cli_spec_dstate(sl->sp);
    char err[256];
    /* a job that waited for KV pages (pool_admit) looked up the cache at
       its first try: a retry looks again only when the cache has more for
       it than its slot now holds, so the lookups count admissions */
    if (j->kv_waited && pcache_match(en->pc, j->ids, j->n_ids - 1, ds != NULL) <= slot_usable(en, a, j)) return;
    if (pcache_load(en->pc, sl->s, ds, j->ids, j->n_ids, slot_usable(en, a, j), j->n_ids - 1, err, sizeof err) < 0)
        fprintf(stderr, "dspark serve: prefix cache: %s\n", err);
    blocks_stats(en, 0);
}

/* ---- the KV pool's bound ----
   Where the contexts draw their pages from one pool (the CPU, engine/kv.h),
   info.kv_capacity bounds the pages held. A running job may still take up
   to its reservation (job_pages): the pages of its whole run (prompt,
   answer budget and one round's drafts, at most the window) less those of
   the positions its slot holds now, plus one a layer for the copy of a
   shared page the run first writes into (when its last page is partial).
   A job is admitted only when the pages held, every running job's
   reservation and its own fit the capacity; short of that, the least recently used blocks of the prefix
   cache and then idle slots give their pages back, and failing that the
   job waits at the head of the queue for a running one to end. So however
   many requests run, their pages stay within the capacity (the second run
   a reasoning budget starts, which may pass its reservation, is the memory
   guard's, as is memory outside the pool). */
static int64_t job_pages(const sched *en, const sched_job *j, const seq *s) {
    const model *m = seq_model(s);
    int64_t n = (int64_t)j->n_ids + (j->max_new > 0 ? j->max_new : en->info.context_window) + en->info.cap + 1;
    if (n > en->info.context_window) n = en->info.context_window;
    /* a partial last page may be another holder's too (share_prefix): its
       first write copies it, a page a layer */
    model_kv_pages kp;
    const int len = seq_len(s);
    const int cow = model_get_kv_pages(m, &kp) == 0 && len % kp.page_tokens ? model_cfg(m)->n_layers : 0;
    const int64_t p = model_kv_pages_for(m, (int)n) - model_kv_pages_for(m, len) + cow;
    return p > 0 ? p : 0;
}

/* the pages the na running jobs may still take */
static int64_t reserved_pages(const sched *en, active *const *act, int na) {
    int64_t res = 0;
    for (int i = 0; i < na; i++) res += job_pages(en, act[i]->j, en->slots[act[i]->slot].s);
    return res;
}

/* One holder gives its pages back for pool_admit: half the prefix cache's
   blocks (least recently used), else the least recently used idle slot
   that has not given its pages back since its last job (not `keep`, not
   being stored). 0 when none is left. */
static int pool_evict(sched *en, int keep) {
    if (en->pc) {
        pcache_stats st;
        pcache_get_stats(en->pc, &st);
        if (st.bytes) {
            const size_t b = pcache_shed(en->pc, st.bytes / 2);
            blocks_stats(en, b);
            if (b) return 1;
        }
    }
    int pick = -1;
    for (int i = 0; i < en->n_slots; i++)
        if (i != keep && !en->slot_busy[i] && !en->slot_empty[i] && !store_busy(en, i) &&
            (pick < 0 || en->slot_used[i] < en->slot_used[pick]))
            pick = i;
    if (pick < 0) return 0;
    seq_release(en->slots[pick].s);
    en->slot_empty[pick] = 1;
    pthread_mutex_lock(&en->mmu);
    en->m.kv_pool_shed++;
    pthread_mutex_unlock(&en->mmu);
    return 1;
}

/* Whether job j, in slot a, fits the pool beside the na running jobs: 1
   (admit it), 0 (not now: it waits for a running job, or a store, to end),
   -1 (never: nothing else holds pages and it still does not fit; err) */
static int pool_admit(sched *en, active **act, int na, const sched_job *j, int a, char *err, size_t errlen) {
    if (!en->info.kv_capacity) return 1;
    const seq *s = en->slots[a].s;
    const int64_t res = reserved_pages(en, act, na);
    const int64_t mine = job_pages(en, j, s);
    model_kv_pages kp;
    for (;;) {
        if (model_get_kv_pages(seq_model(s), &kp) != 0 || kp.held + res + mine <= en->info.kv_capacity) {
            __atomic_store_n(&en->kv_reserved, res + mine, __ATOMIC_RELAXED);
            return 1;
        }
        if (!pool_evict(en, a)) break;
    }
    int storing = 0;
    for (int i = 0; i < en->n_slots; i++) storing |= store_busy(en, i);
    if (na || storing) return 0;
    ds_err(err, errlen, "the request may take %lld more KV pages, %lld are held that nothing can give back, and "
           "the pool holds %lld (--kv-ram)", (long long)mine, (long long)kp.held, (long long)en->info.kv_capacity);
    return -1;
}

/* Job j back at the head of the queue (pool_admit said not now) */
static void requeue_front(sched *en, sched_job *j) {
    pthread_mutex_lock(&en->qmu);
    for (int i = 0; i < en->n_running; i++)
        if (en->running[i] == j) {
            memmove(en->running + i, en->running + i + 1, sizeof *en->running * (size_t)(en->n_running - i - 1));
            en->n_running--;
            break;
        }
    if (en->qn == en->qcap) {
        en->qcap = en->qcap ? en->qcap * 2 : 16;
        en->q = xrealloc(en->q, sizeof *en->q * (size_t)en->qcap);
    }
    memmove(en->q + 1, en->q, sizeof *en->q * (size_t)en->qn);
    en->q[0] = j;
    en->qn++;
    pthread_mutex_unlock(&en->qmu);
}

static active deferred; /* start_job's "not now" */

/* Admits a job: its slot (see pick_slot), its sampler seeded for it, its
   run created (no forward yet). Returns the running job, NULL when it
   ended at once (halted before it started, or an error), or &deferred
   when the KV pool cannot take it beside the na running ones yet (it is
   back at the head of the queue). */
static active *start_job(sched *en, sched_job *j, active **act, int na) {
    active *a = xcalloc(1, sizeof *a);
    a->j = j;
    a->slot = pick_slot(en, j->ids, j->n_ids);
    en->slot_busy[a->slot] = 1;
    en->slot_empty[a->slot] = 0;
    share_prefix(en, a->slot, j);
    load_blocks(en, a->slot, j);
    const int fit = __atomic_load_n(&j->halt, __ATOMIC_RELAXED) ? 1 : pool_admit(en, act, na, j, a->slot, a->err,
                                                                                 sizeof a->err);
    if (fit == 0) {
        en->slot_busy[a->slot] = 0;
        free(a);
        requeue_front(en, j);
        pthread_mutex_lock(&en->mmu);
        en->m.kv_deferred += !j->kv_waited;
        pthread_mutex_unlock(&en->mmu);
        j->kv_waited = 1;
        return &deferred;
    }
    guard(en);
    en->slot_used[a->slot] = ds_now();
    sched_slot *sl = &en->slots[a->slot];
    pthread_mutex_lock(&j->mu);
    j->t_start = ds_now();
    pthread_mutex_unlock(&j->mu);
    gen_ctx *g = &a->g;
    *g = (gen_ctx){.en = en, .j = j, .s = sl->s, .sp = sl->sp, .st = &a->part, .prefill_done = -1,
                   .piece_cap = tok_stream_cap(en->tok) + 1};
    g->piece = xmalloc(g->piece_cap);
    g->think_state = j->think_prefilled ? 1 : 0;
    stop_init(&g->sm, (const char *const *)j->stops, j->n_stops);
    a->out_ids = xmalloc(sizeof(int) * (size_t)(j->max_new > 0 ? j->max_new : 1));
    if (fit < 0 || sampler_reset(sl->smp, &j->sp, a->err, sizeof a->err) != 0) {
        end_job(en, a, -1);
        return NULL;
    }
    a->so = (spec_opts){.max_new = j->max_new, .stop = en->stop_ids, .n_stop = en->n_stop, .cancel = &j->halt,
                        .emit = on_emit, .emit_logits = j->logprobs >= 0 ? on_emit_logits : NULL, .emit_ctx = g,
                        .on_prefill = on_prefill, .on_round = on_round, .hook_ctx = g};
    if (!j->plain) cli_spec_apply(sl->sp, &a->so);
    a->so.ignore_eos = j->ignore_eos;
    if (lproc_cfg_active(&j->proc)) {
        if (j->proc.g && !en->trie) en->trie = gtok_trie_new(en->tok, en->stop_ids, en->n_stop);
        a->lpr = lproc_new(&j->proc, en->trie, model_cfg(seq_model(sl->s))->vocab_size, j->ids, j->n_ids);
        a->lpi = lproc_iface(a->lpr);
        a->so.proc = &a->lpi;
    }
    if (__atomic_load_n(&j->halt, __ATOMIC_RELAXED)) { /* cancelled or cut while queued */
        end_job(en, a, 0);
        return NULL;
    }
    if (spec_run_create(&a->run, sl->s, sl->smp, job_drafter(g), j->ids, j->n_ids, &a->so, a->out_ids, &a->part,
                        a->err, sizeof a->err) != 0) {
        end_job(en, a, -1);
        return NULL;
    }
    a->parts = 1;
    return a;
}

/* The job's run is done (or a step failed under it): the run's end, and
   either the job's next run (a reasoning budget closed its block) or the
   job's end. Returns 1 when the job ended. */
static int run_over(sched *en, active *a) {
    int rc;
    if (a->failed) {
        /* the step's failure left the slot's cache in no known state */
        spec_run_free(a->run);
        a->run = NULL;
        seq_reset(a->g.s);
        rc = -1;
    } else {
        rc = spec_run_finish(a->run, NULL, a->err, sizeof a->err);
        spec_run_free(a->run);
        a->run = NULL;
        add_stats(&a->st, &a->part, a->parts == 1, 0);
    }
    sched_job *j = a->j;
    if (rc == 0 && a->parts == 1 && a->g.budget_hit && !stop_matched(&a->g.sm) && !j->cancelled) {
        int c = continue_after_budget(en, a);
        if (c > 0) return 0;
        if (c < 0) rc = -1;
    }
    end_job(en, a, rc);
    return 1;
}

/* One step of every running job: each does its next unit of work (a
   prefill chunk, a round, a plain step) and the target's forwards of all
   of them go in one model_forward_multi (spec_step). */
static void step(sched *en, active **act, int na) {
    spec_run *runs[SCHED_MAX_SLOTS];
    int n = 0;
    for (int i = 0; i < na; i++)
        if (!spec_run_done(act[i]->run)) runs[n++] = act[i]->run;
    if (!n) return;
    en->step_rows = 0;
    char err[512];
    double t0 = ds_now();
    int rc = spec_step(runs, n, err, sizeof err);
    double dt = ds_now() - t0;
    if (rc != 0)
        for (int i = 0; i < na; i++) {
            act[i]->failed = 1;
            snprintf(act[i]->err, sizeof act[i]->err, "%s", err);
        }
    int rows = en->step_rows, b = 0;
    while (b < SCHED_ROWS_BUCKETS && rows > SCHED_ROWS_BOUNDS[b]) b++;
    pthread_mutex_lock(&en->mmu);
    sched_metrics *m = &en->m;
    m->steps++;
    m->step_rows += (uint64_t)rows;
    m->step_jobs += (uint64_t)n;
    m->last_step_rows = rows;
    m->last_step_jobs = n;
    m->rows_hist[b]++;
    m->step_seconds += dt;
    uint64_t k = m->steps;
    pthread_mutex_unlock(&en->mmu);
    char ev[192];
    snprintf(ev, sizeof ev, "{\"type\":\"step\",\"step\":%llu,\"jobs\":%d,\"rows\":%d,\"ms\":%.3f,\"t\":%.3f}",
             (unsigned long long)k, n, rows, dt * 1e3, ds_now());
    publish(en, ev);
}

static void *sched_main(void *arg) {
    sched *en = arg;
    active *act[SCHED_MAX_SLOTS];
    int na = 0;
    for (;;) {
        pthread_mutex_lock(&en->qmu);
        while (!na && !en->qn && !en->stopping) {
            struct timespec ts;
            abs_deadline(&ts, SCHED_GUARD_S);
            if (pthread_cond_timedwait(&en->qcv, &en->qmu, &ts) == ETIMEDOUT && !en->qn && !en->stopping) {
                pthread_mutex_unlock(&en->qmu); /* idle: no slot is serving */
                guard(en);
                pthread_mutex_lock(&en->qmu);
            }
        }
        if (en->stopping && !na) {
            pthread_mutex_unlock(&en->qmu);
            break;
        }
        /* admission between steps, in arrival order, while the batch (and
           the KV pool: pool_admit) has room */
        int waiting = 0;
        while (en->qn && na < en->max_batch) {
            sched_job *j = en->q[0];
            en->running[en->n_running++] = j;
            memmove(en->q, en->q + 1, sizeof *en->q * (size_t)(en->qn - 1));
            en->qn--;
            pthread_mutex_unlock(&en->qmu);
            active *a = start_job(en, j, act, na);
            pthread_mutex_lock(&en->qmu);
            if (a == &deferred) {
                waiting = 1;
                break;
            }
            if (a) act[na++] = a;
        }
        pthread_mutex_unlock(&en->qmu);
        if (!na) {
            if (waiting) { /* a store holds the pages it needs: it ends soon */
                struct timespec ts = {0, 5 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        step(en, act, na);
        for (int i = 0; i < na;) {
            if ((act[i]->failed || spec_run_done(act[i]->run)) && run_over(en, act[i])) {
                memmove(act + i, act + i + 1, sizeof *act * (size_t)(na - i - 1));
                na--;
            } else i++;
        }
        if (en->info.kv_capacity) /* for /health: what the running jobs may still take */
            __atomic_store_n(&en->kv_reserved, reserved_pages(en, act, na), __ATOMIC_RELAXED);
    }
    return NULL;
}

/* The storer thread: each queued slot's whole blocks into the prefix
   cache, in the order the jobs ended. */
static void *store_main(void *arg) {
    sched *en = arg;
    pthread_mutex_lock(&en->smu);
    for (;;) {
        while (!en->store_qn && !en->store_quit) pthread_cond_wait(&en->scv, &en->smu);
        if (en->store_quit) break;
        const int i = en->store_q[0];
        memmove(en->store_q, en->store_q + 1, sizeof *en->store_q * (size_t)--en->store_qn);
        en->store_state[i] = 2;
        pthread_mutex_unlock(&en->smu);
        sched_slot *sl = &en->slots[i];
        char err[256];
        const double t0 = ds_now();
        if (pcache_store(en->pc, sl->s, cli_spec_dstate(sl->sp), &en->store_stop[i], err, sizeof err) < 0)
            fprintf(stderr, "dspark serve: prefix cache: %s\n", err);
        pthread_mutex_lock(&en->mmu);
        en->m.blocks_store_seconds += ds_now() - t0;
        pthread_mutex_unlock(&en->mmu);
        blocks_stats(en, 0);
        pthread_mutex_lock(&en->smu);
        en->store_state[i] = 0;
        pthread_cond_broadcast(&en->scv);
    }
    pthread_mutex_unlock(&en->smu);
    return NULL;
}

/* Stops the storer thread: a store under way ends at its next block, the
   queued ones are dropped (blocks not stored die with the process). */
static void store_end(sched *en) {
    if (!en->store_on) return;
    pthread_mutex_lock(&en->smu);
    en->store_quit = 1;
    en->store_qn = 0;
    for (int i = 0; i < en->n_slots; i++) __atomic_store_n(&en->store_stop[i], 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&en->scv);
    pthread_mutex_unlock(&en->smu);
    pthread_join(en->store_th, NULL);
    en->store_on = 0;
}

sched *sched_start(const sched_slot *slots, int n_slots, const tokenizer *tok, const int *stop_ids, int n_stop,
                   const sched_info *info) {
    sched *en = xcalloc(1, sizeof *en);
    en->n_slots = n_slots < 1 ? 1 : n_slots > SCHED_MAX_SLOTS ? SCHED_MAX_SLOTS : n_slots;
    memcpy(en->slots, slots, sizeof(sched_slot) * (size_t)en->n_slots);
    en->tok = tok;
    en->n_stop = n_stop < 32 ? n_stop : 32;
    memcpy(en->stop_ids, stop_ids, sizeof(int) * (size_t)en->n_stop);
    en->info = *info;
    /* every running job holds a slot of its own */
    en->max_batch = info->max_batch < 1 ? 1 : info->max_batch > en->n_slots ? en->n_slots : info->max_batch;
    en->info.max_batch = en->max_batch;
    en->info.slots = en->n_slots;
    /* a prefix block cache where the backend saves rows */
    if (info->prefix_cache && seq_pos_bytes(en->slots[0].s)) en->pc = pcache_new(info->prefix_cache);
    else en->info.prefix_cache = 0;
    if (en->pc) pcache_get_stats(en->pc, &en->m.blocks);
    pthread_mutex_init(&en->qmu, NULL);
    pthread_cond_init(&en->qcv, NULL);
    pthread_mutex_init(&en->mmu, NULL);
    pthread_mutex_init(&en->emu, NULL);
    pthread_cond_init(&en->ecv, NULL);
    pthread_mutex_init(&en->smu, NULL);
    pthread_cond_init(&en->scv, NULL);
    if (en->pc) {
        if (pthread_create(&en->store_th, NULL, store_main, en) != 0) cli_die("cannot start the block store thread");
        en->store_on = 1;
    }
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
    for (int i = 0; i < en->n_running; i++) {
        sched_job *j = en->running[i];
        pthread_mutex_lock(&j->mu);
        if (!j->done) j->cut = 1;
        __atomic_store_n(&j->halt, 1, __ATOMIC_RELAXED);
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
    store_end(en);
    pthread_mutex_lock(&en->emu);
    en->events_closed = 1;
    pthread_cond_broadcast(&en->ecv);
    pthread_mutex_unlock(&en->emu);
}

void sched_free(sched *en) {
    if (!en) return;
    store_end(en);
    for (int i = 0; i < EVENT_RING; i++) free(en->ring[i]);
    gtok_trie_free(en->trie);
    pcache_free(en->pc);
    pthread_mutex_destroy(&en->qmu);
    pthread_cond_destroy(&en->qcv);
    pthread_mutex_destroy(&en->mmu);
    pthread_mutex_destroy(&en->emu);
    pthread_cond_destroy(&en->ecv);
    pthread_mutex_destroy(&en->smu);
    pthread_cond_destroy(&en->scv);
    free(en);
}

const sched_info *sched_get_info(const sched *en) { return &en->info; }

void sched_get_metrics(sched *en, sched_metrics *m) {
    pthread_mutex_lock(&en->mmu);
    *m = en->m;
    pthread_mutex_unlock(&en->mmu);
    pthread_mutex_lock(&en->qmu);
    m->queue_depth = en->qn;
    m->busy = en->n_running;
    pthread_mutex_unlock(&en->qmu);
    pthread_mutex_lock(&en->smu);
    m->blocks_storing = 0;
    for (int i = 0; i < en->n_slots; i++) m->blocks_storing += en->store_state[i] != 0;
    pthread_mutex_unlock(&en->smu);
    m->kv_paged = model_get_kv_pages(seq_model(en->slots[0].s), &m->kv_pages) == 0;
    m->kv_capacity = en->info.kv_capacity;
    m->kv_reserved = __atomic_load_n(&en->kv_reserved, __ATOMIC_RELAXED);
}
