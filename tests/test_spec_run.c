/* The stepwise loop (spec/spec_run.h) on the bundled model: runs of every
 * mode (plain, lookup, DFlash, DSpark, DSpark with lookup's copy runs),
 * greedy and sampled (each its own seed), with budgets, stop ids, a cancel
 * part-way, a logit processor, progress hooks, host logits rows and the
 * adaptive cap, stepped together (joining after others have run steps,
 * leaving when done) give exactly what each gives alone through
 * spec_generate: ids, statistics but times, every hook's calls, the last
 * logits row's bits, and the sequence left behind. A run whose prompt
 * does not fit its window fails alone; a wrong set of runs is refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/model.h"
#include "spec/calib.h"
#include "spec/drafter.h"
#include "spec/lookup.h"
#include "spec/registry.h"
#include "spec/spec_run.h"
#include "test.h"
#include "text/tokenizer.h"

#define N_CTX 1024
#define MAX_OUT 160
#define MAX_RUNS 8
#define LOG_MAX 512

typedef struct {
    model *m;
    tpool *tp;
    tokenizer *tok;
    dmodel *dflash, *dspark;
    int V, eos;
} bundled;

static int open_bundled(bundled *b) {
    test_bundled_set t;
    const int rc = test_bundled_open(&t);
    memset(b, 0, sizeof *b);
    b->m = t.m, b->tok = t.tok, b->dflash = t.dflash, b->dspark = t.dspark, b->tp = t.tp;
    if (rc != 0) return -1;
    b->V = model_cfg(b->m)->vocab_size;
    b->eos = model_cfg(b->m)->eos_token_ids[0];
    return 0;
}

static void close_bundled(bundled *b) {
    test_bundled_set t = {.m = b->m, .tok = b->tok, .dflash = b->dflash, .dspark = b->dspark, .tp = b->tp};
    test_bundled_close(&t);
}

static int test_spec_run_vocab; /* the bundled model's, for the processor */

/* ---- a logit processor: some ids banned outright, and no id twice in a
   row (so its answer depends on the context it keeps) ---- */

typedef struct {
    int prev, saved;
    const int *ban;
    int n_ban;
} norepeat;

static int nr_allowed(const norepeat *p, int id) {
    if (id == p->prev) return 0;
    for (int i = 0; i < p->n_ban; i++)
        if (p->ban[i] == id) return 0;
    return 1;
}
static void nr_apply(void *self, const float *raw, float *w) {
    const norepeat *p = self;
    memcpy(w, raw, sizeof(float) * (size_t)test_spec_run_vocab);
    if (p->prev >= 0) w[p->prev] -= 2.0f; /* a penalty too: the processed row differs from the raw one */
}
static int nr_accept(void *self, int id) {
    norepeat *p = self;
    if (!nr_allowed(p, id)) return 0;
    p->prev = id;
    return 1;
}
static int nr_mask(void *self, float *w) {
    const norepeat *p = self;
    int left = 0;
    for (int i = 0; i < test_spec_run_vocab; i++) {
        if (!nr_allowed(p, i)) w[i] = -INFINITY;
        else left++;
    }
    return left;
}
static void nr_save(void *self) { ((norepeat *)self)->saved = ((norepeat *)self)->prev; }
static void nr_restore(void *self) { ((norepeat *)self)->prev = ((norepeat *)self)->saved; }
static const char *nr_error(void *self) { return "nothing allowed"; }

/* ---- one run's set-up and everything it reports ---- */

enum { M_PLAIN, M_LOOKUP, M_DFLASH, M_DSPARK, M_HYBRID };

typedef struct {
    int mode, prompt, max_new, max_draft;
    float temp;
    uint64_t seed;
    int stop_extra;   /* an extra stop id (-1 none) */
    int cancel_after; /* rounds after which on_round raises the cancel flag (0: never) */
    int proc;         /* the no-repeat processor */
    int logits;       /* emit_logits on (host rows) */
    int progress;     /* on_prefill on */
    int adaptive;     /* a calib_ctl cap */
    int chunk;        /* prefill_chunk (0: the default) */
    int n_ctx;        /* the sequence's window (0: N_CTX) */
    int join;         /* the step at which the run joins a batch */
} run_cfg;

typedef struct {
    int rc;
    char err[512];
    int out[MAX_OUT];
    spec_stats st;
    int log[LOG_MAX], n_log; /* every hook call, in order, as numbers */
    uint64_t logits_hash;    /* of the emit_logits rows */
    float *last;             /* last logits row */
    int seq_n;
    uint64_t seq_hash;
} run_out;

typedef struct {
    const bundled *b;
    run_cfg c;
    run_out *o;
    volatile sig_atomic_t cancel;
    int rounds;
    seq *s;
    sampler *smp;
    dstate *ds;
    lookup *lk;
    lookup_hybrid *hy;
    drafter d, *dp;
    calib_ctl ctl;
    norepeat nr;
    logit_proc lp;
    int stop[2];
    spec_opts so;
    int *prompt, n_prompt;
} run_env;

static void logv(run_env *e, int v) {
    if (e->o->n_log < LOG_MAX) e->o->log[e->o->n_log] = v;
    e->o->n_log++;
}
static void h_emit(void *ctx, int id) {
    logv(ctx, 1);
    logv(ctx, id);
}
static void h_emit_logits(void *ctx, int id, const float *row) {
    run_env *e = ctx;
    logv(e, 2);
    e->o->logits_hash = ds_fnv1a(e->o->logits_hash, row, sizeof(float) * (size_t)e->b->V);
}
static void h_prefill(void *ctx, int done, int total) {
    logv(ctx, 3);
    logv(ctx, done);
    logv(ctx, total);
}
static void h_round(void *ctx, int drafted, int accepted, int emitted, double seconds) {
    run_env *e = ctx;
    logv(e, 4);
    logv(e, drafted);
    logv(e, accepted);
    logv(e, emitted);
    if (e->c.cancel_after && ++e->rounds == e->c.cancel_after) e->cancel = 1;
}
static int h_next_cap(void *ctl) { return calib_ctl_next(ctl); }
static void h_observe(void *ctl, int proposed, int accepted) { calib_ctl_observe(ctl, proposed, accepted); }

static const int BAN[3] = {11, 13, 220};

static const char *const TEXTS[] = {
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "import os\nimport sys\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
    "# merge two sorted lists\ndef merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i",
    "def add(x, y):\n    return x + y\n\ndef sub(x, y):\n    return x - y\n\ndef mul(x, y):\n",
};
#define N_TEXTS 5

/* prompt i: TEXTS[i % N_TEXTS], repeated (i / N_TEXTS + 1)^2 times */
static int make_prompt(const bundled *b, int i, int **ids) {
    int reps = (i / N_TEXTS + 1) * (i / N_TEXTS + 1);
    size_t one = strlen(TEXTS[i % N_TEXTS]);
    char *t = xmalloc(one * (size_t)reps + 1);
    for (int r = 0; r < reps; r++) memcpy(t + one * (size_t)r, TEXTS[i % N_TEXTS], one);
    t[one * (size_t)reps] = 0;
    char err[256];
    int n = tok_encode(b->tok, t, strlen(t), 0, ids, err, sizeof err);
    free(t);
    if (n < 0) test_fail(__FILE__, __LINE__, "%s", err);
    return n;
}

static int env_open(run_env *e, const bundled *b, const run_cfg *c, run_out *o) {
    char err[512];
    memset(e, 0, sizeof *e);
    memset(o, 0, sizeof *o);
    e->b = b;
    e->c = *c;
    e->o = o;
    o->logits_hash = DS_FNV_SEED;
    o->last = xmalloc(sizeof(float) * (size_t)b->V);
    e->n_prompt = make_prompt(b, c->prompt, &e->prompt);
    if (e->n_prompt < 0) return -1;
    if (seq_create(&e->s, b->m, c->n_ctx ? c->n_ctx : N_CTX, 64, b->tp, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    sampler_params sp = {.temperature = c->temp, .top_k = c->temp > 0 ? 40 : 0, .top_p = 0.95f, .seed = c->seed};
    if (sampler_create(&e->smp, &sp, b->V, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    if (c->mode == M_LOOKUP) {
        e->lk = lookup_create(3, 1);
        e->d = lookup_drafter(e->lk);
        e->dp = &e->d;
    } else if (c->mode != M_PLAIN) {
        const dmodel *dm = c->mode == M_DFLASH ? b->dflash : b->dspark;
        if (dstate_create(&e->ds, dm, seq_capacity(e->s), b->tp, e->smp, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            return -1;
        }
        e->d = dstate_drafter(e->ds);
        if (c->mode == M_HYBRID) {
            e->hy = lookup_hybrid_create(e->d, b->V);
            e->d = lookup_hybrid_drafter(e->hy);
        }
        e->dp = &e->d;
    }
    e->stop[0] = b->eos;
    e->stop[1] = c->stop_extra;
    e->so = (spec_opts){.max_new = c->max_new, .max_draft = c->max_draft, .prefill_chunk = c->chunk,
                        .stop = e->stop, .n_stop = c->stop_extra >= 0 ? 2 : 1, .cancel = &e->cancel,
                        .emit = h_emit, .emit_ctx = e, .on_round = h_round, .hook_ctx = e};
    if (c->logits) e->so.emit_logits = h_emit_logits;
    if (c->progress) e->so.on_prefill = h_prefill;
    if (c->adaptive) {
        calib_ctl_init(&e->ctl, NULL, c->max_draft);
        /* no costs: always max_k; cut it by what was seen so the hooks matter */
        e->so.next_cap = h_next_cap;
        e->so.observe = h_observe;
        e->so.ctl = &e->ctl;
    }
    if (c->proc) {
        e->nr = (norepeat){.prev = e->prompt[e->n_prompt - 1], .ban = BAN, .n_ban = 3};
        e->lp = (logit_proc){.self = &e->nr, .apply = nr_apply, .accept = nr_accept, .mask = nr_mask,
                             .save = nr_save, .restore = nr_restore, .error = nr_error};
        e->so.proc = &e->lp;
    }
    return 0;
}

static void env_close(run_env *e) {
    run_out *o = e->o;
    o->seq_n = seq_len(e->s);
    o->seq_hash = ds_fnv1a(DS_FNV_SEED, seq_tokens(e->s), sizeof(int) * (size_t)o->seq_n);
    lookup_hybrid_free(e->hy);
    lookup_free(e->lk);
    dstate_free(e->ds);
    sampler_free(e->smp);
    seq_free(e->s);
    free(e->prompt);
}

static void solo(const bundled *b, const run_cfg *c, run_out *o) {
    run_env e;
    if (env_open(&e, b, c, o) != 0) return;
    o->rc = spec_generate(e.s, e.smp, e.dp, e.prompt, e.n_prompt, &e.so, o->out, o->last, &o->st, o->err,
                          sizeof o->err);
    env_close(&e);
}

/* the runs stepped together: run i joins at step c[i].join and leaves
   (spec_run_finish, then freed) as soon as it is done */
static void together(const bundled *b, const run_cfg *c, run_out *o, int n) {
    run_env *e = xcalloc((size_t)n, sizeof *e);
    spec_run *rs[MAX_RUNS] = {0}, *set[MAX_RUNS];
    int joined[MAX_RUNS] = {0}, left = 0;
    char err[512];
    for (int i = 0; i < n; i++)
        if (env_open(&e[i], b, &c[i], &o[i]) != 0) goto out;
    for (int step = 0; left < n && step < 100000; step++) {
        for (int i = 0; i < n; i++)
            if (!joined[i] && c[i].join <= step) {
                joined[i] = 1;
                if (spec_run_create(&rs[i], e[i].s, e[i].smp, e[i].dp, e[i].prompt, e[i].n_prompt, &e[i].so,
                                    o[i].out, &o[i].st, err, sizeof err) != 0) {
                    test_fail(__FILE__, __LINE__, "run %d: %s", i, err);
                    goto out;
                }
            }
        int ns = 0;
        for (int i = 0; i < n; i++)
            if (rs[i]) set[ns++] = rs[i];
        if (spec_step(set, ns, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "spec_step: %s", err);
            goto out;
        }
        for (int i = 0; i < n; i++)
            if (rs[i] && spec_run_done(rs[i])) {
                o[i].rc = spec_run_finish(rs[i], o[i].last, o[i].err, sizeof o[i].err);
                spec_run_free(rs[i]);
                rs[i] = NULL;
                left++;
            }
    }
    CHECK_EQ_INT(left, n);
out:
    for (int i = 0; i < n; i++) {
        spec_run_free(rs[i]);
        if (e[i].s) env_close(&e[i]);
    }
    free(e);
}

static void check_same(const run_out *a, const run_out *x, int i, int V) {
    CHECK_MSG(a->rc == x->rc, "run %d: rc %d alone, %d together (%s / %s)", i, a->rc, x->rc, a->err, x->err);
    if (a->rc) CHECK_MSG(!strcmp(a->err, x->err), "run %d: error '%s' alone, '%s' together", i, a->err, x->err);
    const spec_stats *s = &a->st, *t = &x->st;
    CHECK_MSG(s->n_gen == t->n_gen && !memcmp(a->out, x->out, sizeof(int) * (size_t)(s->n_gen < MAX_OUT ? s->n_gen : MAX_OUT)),
              "run %d: ids differ (%d / %d generated)", i, s->n_gen, t->n_gen);
    CHECK_MSG(s->n_prefilled == t->n_prefilled && s->stopped_by_eos == t->stopped_by_eos &&
                  s->cancelled == t->cancelled && s->n_rounds == t->n_rounds && s->n_round_tok == t->n_round_tok &&
                  s->n_drafted == t->n_drafted && s->n_accepted == t->n_accepted &&
                  !memcmp(s->accept_hist, t->accept_hist, sizeof s->accept_hist),
              "run %d: statistics differ (rounds %d / %d, accepted %ld / %ld)", i, s->n_rounds, t->n_rounds,
              s->n_accepted, t->n_accepted);
    CHECK_MSG(a->n_log == x->n_log && !memcmp(a->log, x->log, sizeof(int) * (size_t)(a->n_log < LOG_MAX ? a->n_log : LOG_MAX)),
              "run %d: hook calls differ (%d / %d)", i, a->n_log, x->n_log);
    CHECK_MSG(a->logits_hash == x->logits_hash, "run %d: emit_logits rows differ", i);
    if (!a->rc) CHECK_MSG(!memcmp(a->last, x->last, sizeof(float) * (size_t)V), "run %d: last logits differ", i);
    CHECK_MSG(a->seq_n == x->seq_n && a->seq_hash == x->seq_hash, "run %d: the sequences left differ (%d / %d)", i,
              a->seq_n, x->seq_n);
}

/* every run alone, then together; each must match */
static void same_alone_and_together(const run_cfg *c, int n, const char *what) {
    bundled b;
    if (open_bundled(&b) != 0) return;
    test_spec_run_vocab = b.V;
    run_out *alone = xcalloc((size_t)n, sizeof *alone), *tog = xcalloc((size_t)n, sizeof *tog);
    for (int i = 0; i < n; i++) solo(&b, &c[i], &alone[i]);
    together(&b, c, tog, n);
    for (int i = 0; i < n; i++) {
        check_same(&alone[i], &tog[i], i, b.V);
        free(alone[i].last);
        free(tog[i].last);
    }
    /* the cases exercise what they claim: runs that generate, draft, stop */
    int gen = 0, drafted = 0;
    for (int i = 0; i < n; i++) {
        gen += alone[i].st.n_gen;
        drafted += (int)alone[i].st.n_accepted;
    }
    if (getenv("SPEC_RUN_SHOW"))
        for (int i = 0; i < n; i++)
            fprintf(stderr, "  run %d: prefilled %d, %d ids, rounds %d, accepted %ld/%ld, eos %d, cancelled %d, hooks %d\n",
                    i, alone[i].st.n_prefilled, alone[i].st.n_gen, alone[i].st.n_rounds, alone[i].st.n_accepted,
                    alone[i].st.n_drafted, alone[i].st.stopped_by_eos, alone[i].st.cancelled, alone[i].n_log);
    CHECK_MSG(gen > 0 && (drafted > 0 || !strcmp(what, "plain")), "%s: %d ids, %d drafts accepted", what, gen, drafted);
    free(alone);
    free(tog);
    close_bundled(&b);
}

/* greedy: every mode, budgets, an extra stop id, a cancel, host logits,
   progress, a processor, the adaptive cap; joining at different steps */
TEST(spec_run_greedy_modes) {
    const run_cfg c[8] = {
        {.mode = M_DSPARK, .prompt = 0, .max_new = 120, .max_draft = 6, .stop_extra = -1},
        {.mode = M_DFLASH, .prompt = 1, .max_new = 100, .max_draft = 8, .stop_extra = -1, .logits = 1, .join = 2},
        {.mode = M_PLAIN, .prompt = 17, .max_new = 60, .stop_extra = -1, .progress = 1},
        {.mode = M_LOOKUP, .prompt = 3, .max_new = 140, .max_draft = 8, .stop_extra = -1, .join = 5},
        {.mode = M_HYBRID, .prompt = 14, .max_new = 90, .max_draft = 6, .stop_extra = -1, .chunk = 128, .progress = 1,
         .join = 1},
        {.mode = M_DSPARK, .prompt = 4, .max_new = 80, .max_draft = 4, .stop_extra = -1, .cancel_after = 7, .join = 3},
        {.mode = M_LOOKUP, .prompt = 8, .max_new = 100, .max_draft = 5, .stop_extra = 25, .proc = 1},
        {.mode = M_DSPARK, .prompt = 5, .max_new = 110, .max_draft = 6, .stop_extra = -1, .adaptive = 1, .join = 30},
    };
    same_alone_and_together(c, 8, "greedy");
}

/* sampled, each run its own seed: the same draws alone and together */
TEST(spec_run_sampled_modes) {
    const run_cfg c[6] = {
        {.mode = M_DSPARK, .prompt = 0, .max_new = 100, .max_draft = 6, .temp = 0.8f, .seed = 1, .stop_extra = -1},
        {.mode = M_DFLASH, .prompt = 6, .max_new = 90, .max_draft = 8, .temp = 0.7f, .seed = 2, .stop_extra = -1,
         .join = 1},
        {.mode = M_PLAIN, .prompt = 2, .max_new = 70, .temp = 1.0f, .seed = 3, .stop_extra = -1, .logits = 1},
        {.mode = M_LOOKUP, .prompt = 3, .max_new = 120, .max_draft = 8, .temp = 0.6f, .seed = 4, .stop_extra = -1,
         .cancel_after = 9, .join = 4},
        {.mode = M_HYBRID, .prompt = 7, .max_new = 80, .max_draft = 6, .temp = 0.9f, .seed = 5, .stop_extra = -1,
         .proc = 1, .join = 2},
        {.mode = M_DSPARK, .prompt = 8, .max_new = 60, .max_draft = 5, .temp = 0.8f, .seed = 6, .stop_extra = -1,
         .logits = 1, .join = 6},
    };
    same_alone_and_together(c, 6, "sampled");
}

/* plain decoding only, two runs: the rounds are one-row steps */
TEST(spec_run_plain_pair) {
    const run_cfg c[2] = {
        {.mode = M_PLAIN, .prompt = 1, .max_new = 50, .stop_extra = -1},
        {.mode = M_PLAIN, .prompt = 3, .max_new = 70, .temp = 0.8f, .seed = 9, .stop_extra = -1, .join = 3},
    };
    same_alone_and_together(c, 2, "plain");
}

/* a run whose prompt does not fit its window fails alone, with
   spec_generate's error; a run with max_new 0 ends at once */
TEST(spec_run_failure_alone) {
    const run_cfg c[4] = {
        {.mode = M_DSPARK, .prompt = 0, .max_new = 60, .max_draft = 6, .stop_extra = -1},
        {.mode = M_DSPARK, .prompt = 12, .max_new = 60, .max_draft = 6, .stop_extra = -1, .n_ctx = 64, .join = 1},
        {.mode = M_PLAIN, .prompt = 13, .max_new = 40, .stop_extra = -1, .n_ctx = 64},
        {.mode = M_LOOKUP, .prompt = 4, .max_new = 0, .max_draft = 4, .stop_extra = -1, .join = 2},
    };
    bundled b;
    if (open_bundled(&b) != 0) return;
    test_spec_run_vocab = b.V;
    run_out alone[4], tog[4];
    for (int i = 0; i < 4; i++) solo(&b, &c[i], &alone[i]);
    together(&b, c, tog, 4);
    for (int i = 0; i < 4; i++) check_same(&alone[i], &tog[i], i, b.V);
    CHECK(alone[0].rc == 0 && alone[0].st.n_gen > 0 && alone[3].rc == 0 && alone[3].st.n_gen == 0);
    for (int i = 1; i <= 2; i++)
        CHECK_MSG(tog[i].rc == -1 && strstr(tog[i].err, "does not fit the 64-token context window"), "run %d: %s", i,
                  tog[i].err);
    for (int i = 0; i < 4; i++) {
        free(alone[i].last);
        free(tog[i].last);
    }
    close_bundled(&b);
}

/* a wrong set of runs is the step's error, and no run moves */
TEST(spec_run_bad_sets) {
    bundled b;
    if (open_bundled(&b) != 0) return;
    test_spec_run_vocab = b.V;
    char err[512];
    run_cfg c = {.mode = M_PLAIN, .prompt = 0, .max_new = 8, .stop_extra = -1};
    run_out o;
    run_env e;
    if (env_open(&e, &b, &c, &o) != 0) return;
    spec_run *r1, *r2;
    CHECK(spec_run_create(&r1, e.s, e.smp, NULL, e.prompt, e.n_prompt, &e.so, o.out, &o.st, err, sizeof err) == 0);
    CHECK(spec_run_create(&r2, e.s, e.smp, NULL, e.prompt, e.n_prompt, &e.so, o.out, &o.st, err, sizeof err) == 0);
    spec_run *two[2] = {r1, r2}, *null[1] = {NULL};
    CHECK(spec_step(two, 2, err, sizeof err) == -1 && strstr(err, "two runs share a sequence"));
    CHECK(spec_step(null, 1, err, sizeof err) == -1 && strstr(err, "run 0 is NULL"));
    CHECK(spec_step(two, SPEC_STEP_MAX_RUNS + 1, err, sizeof err) == -1 && strstr(err, "runs (0.."));
    CHECK(spec_run_prefilling(r1) && !spec_run_done(r1) && seq_len(e.s) == 0);
    CHECK(spec_step(two, 0, err, sizeof err) == 0);
    /* a prefill chunk off the groups is refused at creation */
    spec_opts bad = e.so;
    bad.prefill_chunk = 100;
    spec_run *r3 = NULL;
    CHECK(spec_run_create(&r3, e.s, e.smp, NULL, e.prompt, e.n_prompt, &bad, o.out, &o.st, err, sizeof err) == -1 &&
          strstr(err, "prefill chunk of 100 rows") && !r3);
    /* one of them runs to its end alone */
    while (!spec_run_done(r1)) CHECK(spec_step(&r1, 1, err, sizeof err) == 0);
    CHECK(spec_run_finish(r1, NULL, err, sizeof err) == 0 && spec_run_error(r1) == NULL);
    CHECK_MSG(o.st.n_gen >= 1 && o.st.n_gen <= 8 && o.st.n_prefilled == e.n_prompt, "%d ids, %d prefilled", o.st.n_gen,
              o.st.n_prefilled);
    spec_run_free(r1);
    spec_run_free(r2);
    env_close(&e);
    free(o.last);
    close_bundled(&b);
}
