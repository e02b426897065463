/* Speculative decoding tests: the verify loop (spec.c) against the
 * baseline generation loop on the golden checkpoints (greedy output must be
 * identical, stop conditions included), KV consistency after partial
 * acceptance, the accept rule with hand-made distributions, the sampled
 * output distribution, and the lookup drafter's index. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "base/json.h"
#include "spec/lookup.h"
#include "engine/ops.h"
#include "spec/spec.h"
#include "test.h"
#include "base/util.h"

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* ---- an oracle drafter: proposes a known continuation with errors ---- */

typedef struct {
    const int *ref; /* prompt + expected output */
    int n_ref, pos, round, vocab, every;
} oracle;

static int or_reset(void *self, const int *ids, int n) {
    oracle *o = self;
    o->pos = n;
    o->round = 0;
    return n;
}
static int or_propose(void *self, int k, int *draft, float *q) {
    oracle *o = self;
    o->round++;
    for (int i = 0; i < k; i++) {
        int t = o->pos + i < o->n_ref ? o->ref[o->pos + i] : 1;
        if ((o->round * 7 + i) % o->every == o->every - 1) t = (t + 1) % o->vocab; /* a wrong draft */
        draft[i] = t;
    }
    return k;
}
static void or_commit(void *self, const int *ids, int n) { ((oracle *)self)->pos += n; }

/* ---- golden model harness ---- */

typedef struct {
    model *m;
    tpool *tp;
    int vocab, n_stop, stop[8];
    int golden_prompt[64], n_golden;
} tmodel;

static int open_model(tmodel *t, const char *name) {
    char dir[600], err[512], path[700];
    memset(t, 0, sizeof *t);
    /* "NAME": a checkpoint under tests/data/models/; "quant_models/NAME":
       a quantized fixture (its model.gguf, or the MLX folder itself) */
    if (strchr(name, '/')) snprintf(dir, sizeof dir, "%s/%s", test_data_dir(), name);
    else snprintf(dir, sizeof dir, "%s/models/%s", test_data_dir(), name);
    char gguf[700];
    snprintf(gguf, sizeof gguf, "%s/model.gguf", dir);
    if (model_load(&t->m, ds_file_exists(gguf) ? gguf : dir, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    t->tp = tp_create(2);
    const model_config *c = model_cfg(t->m);
    t->vocab = c->vocab_size;
    for (int i = 0; i < c->n_eos && i < 8; i++) t->stop[t->n_stop++] = c->eos_token_ids[i];
    snprintf(path, sizeof path, "%s/golden.json", dir);
    cJSON *j = json_parse_file(path, err, sizeof err);
    const cJSON *v;
    if (j)
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "prompt")) if (t->n_golden < 64) t->golden_prompt[t->n_golden++] =
            v->valueint;
    cJSON_Delete(j);
    return 0;
}

static void close_model(tmodel *t) {
    tp_free(t->tp);
    model_free(t->m);
}

static sampler *greedy_sampler(int vocab) {
    sampler_params sp = {.temperature = 0, .top_p = 1};
    sampler *s;
    char err[256];
    sampler_create(&s, &sp, vocab, err, sizeof err);
    return s;
}

typedef struct {
    int n_ctx, max_new, n_stop, ignore_eos;
    const int *stop;
} gen_cfg;

/* baseline greedy, written out here as the plain reference loop (one row a
   step, argmax, the stop rules of baseline decoding); returns n_gen (-1 on
   error) */
static int run_baseline(tmodel *t, const gen_cfg *g, const int *prompt, int n, int *out) {
    seq *s;
    char err[512];
    if (seq_create(&s, t->m, g->n_ctx, 64, t->tp, err, sizeof err) != 0) return -1;
    float *logits = xmalloc(sizeof(float) * (size_t)t->vocab);
    int n_gen = 0, rc = seq_prefill(s, prompt, n, logits, err, sizeof err) < 0 ? -1 : 0;
    while (rc == 0 && n_gen < g->max_new) {
        int id = op_argmax(logits, t->vocab), is_stop = 0;
        out[n_gen++] = id;
        for (int i = 0; i < g->n_stop; i++) is_stop |= g->stop[i] == id;
        if (is_stop && !g->ignore_eos) break;
        if (n_gen == g->max_new || seq_len(s) + 1 >= seq_capacity(s)) break;
        rc = seq_step(s, id, logits, err, sizeof err);
    }
    if (rc != 0) test_fail(__FILE__, __LINE__, "%s", err);
    free(logits);
    seq_free(s);
    return rc ? -1 : n_gen;
}

/* speculative greedy; checks the cache afterwards holds prompt + out[0..n-1);
   returns n_gen, accepted count into *acc */
static int run_spec(tmodel *t, const gen_cfg *g, drafter *d, int k, const int *prompt, int n, int *out, long *acc) {
    seq *s;
    char err[512];
    if (seq_create(&s, t->m, g->n_ctx, 64, t->tp, err, sizeof err) != 0) return -1;
    sampler *smp = greedy_sampler(t->vocab);
    spec_opts so = {.max_new = g->max_new, .max_draft = k, .stop = g->stop, .n_stop = g->n_stop,
                    .ignore_eos = g->ignore_eos};
    spec_stats st;
    int rc = spec_generate(s, smp, d, prompt, n, &so, out, NULL, &st, err, sizeof err);
    if (rc != 0) test_fail(__FILE__, __LINE__, "%s", err);
    if (rc == 0 && st.n_gen > 0) {
        CHECK_EQ_INT(seq_len(s), n + st.n_gen - 1);
        CHECK(!memcmp(seq_tokens(s), prompt, sizeof(int) * (size_t)n));
        CHECK(!memcmp(seq_tokens(s) + n, out, sizeof(int) * (size_t)(st.n_gen - 1)));
    }
    if (acc) *acc = st.n_accepted;
    sampler_free(smp);
    seq_free(s);
    return rc ? -1 : st.n_gen;
}

#define N_RAND 16
#define N_REP 6

static int make_prompt(int i, int vocab, int *p) {
    static const int rep[N_REP][12] = {{1, 2, 3}, {5, 5, 5, 5, 5, 5}, {7, 8, 9, 7, 8, 9, 7, 8, 9},
                                       {40, 41, 40, 41, 40, 41, 40, 41}, {100, 200, 300, 100, 200, 300, 100},
                                       {3, 1, 4, 1, 5, 9, 2, 6, 3, 1, 4, 1}};
    static const int rep_n[N_REP] = {3, 6, 9, 8, 7, 12};
    if (i < N_REP) {
        memcpy(p, rep[i], sizeof(int) * (size_t)rep_n[i]);
        return rep_n[i];
    }
    uint32_t s = 12345u + (uint32_t)i * 7919u;
    int n = 2 + (int)(lcg(&s) % 24);
    for (int j = 0; j < n; j++) p[j] = (int)(lcg(&s) % (uint32_t)vocab);
    return n;
}

static void lossless_model(const char *name) {
    tmodel t;
    if (open_model(&t, name) != 0) return;
    int base[256], got[256], prompt[64];
    lookup *lk = lookup_create(3, 1), *lk_sized = lookup_create(3, 1);
    const double steep[9] = {1, 1.4, 1.9, 2.1, 2.6, 2.8, 3.2, 3.4, 3.6}; /* a small model on a CPU */
    lookup_set_costs(lk_sized, steep, 9);
    long rep_acc = 0, rep_sized = 0;
    int n_prompts = N_REP + N_RAND + 1, mismatches = 0;
    for (int pi = 0; pi < n_prompts; pi++) {
        int n;
        if (pi == n_prompts - 1) {
            n = t.n_golden;
            memcpy(prompt, t.golden_prompt, sizeof(int) * (size_t)n);
        } else {
            n = make_prompt(pi, t.vocab, prompt);
        }
        /* configurations: real eos ids; eos ignored; a stop id from the
           middle of the output; a small window */
        for (int cfg = 0; cfg < 4; cfg++) {
            gen_cfg g = {.n_ctx = 512, .max_new = 96, .stop = t.stop, .n_stop = t.n_stop};
            int stop1;
            if (cfg == 1) g.ignore_eos = 1;
            if (cfg == 2) {
                gen_cfg g0 = g;
                g0.ignore_eos = 1;
                int nb = run_baseline(&t, &g0, prompt, n, base);
                if (nb < 40) continue;
                stop1 = base[10 + pi % 25];
                g.stop = &stop1;
                g.n_stop = 1;
            }
            if (cfg == 3) {
                g.n_ctx = n + 20 + pi % 7;
                g.ignore_eos = 1;
            }
            int nb = run_baseline(&t, &g, prompt, n, base);
            if (nb < 0) break;
            for (int k = 1; k <= 16; k++) {
                if (cfg >= 2 && k != 1 && k != 2 && k != 5 && k != 16) continue;
                for (int which = 0; which < 3; which++) {
                    long acc = 0;
                    int ng;
                    if (which == 2 && cfg >= 2) continue;
                    if (which == 0) {
                        drafter d = lookup_drafter(lk);
                        ng = run_spec(&t, &g, &d, k, prompt, n, got, &acc);
                        if (pi < N_REP && cfg == 1) rep_acc += acc;
                    } else if (which == 2) { /* lookup sizing its drafts by match, learning as it goes */
                        drafter d = lookup_drafter(lk_sized);
                        ng = run_spec(&t, &g, &d, k, prompt, n, got, &acc);
                        if (pi < N_REP && cfg == 1) rep_sized += acc;
                    } else {
                        int ref[600];
                        memcpy(ref, prompt, sizeof(int) * (size_t)n);
                        memcpy(ref + n, base, sizeof(int) * (size_t)nb);
                        oracle o = {.ref = ref, .n_ref = n + nb, .vocab = t.vocab, .every = 2 + (k + pi) % 6};
                        drafter d = {.self = &o, .deterministic = 1, .reset = or_reset, .propose = or_propose,
                                     .commit = or_commit};
                        ng = run_spec(&t, &g, &d, k, prompt, n, got, &acc);
                        if (nb > 4 && k > 1) CHECK_MSG(acc > 0, "%s oracle accepted nothing", name);
                    }
                    if (ng != nb || memcmp(got, base, sizeof(int) * (size_t)nb)) {
                        if (mismatches++ < 5)
                            test_fail(__FILE__, __LINE__, "%s prompt %d cfg %d k %d drafter %d: %d vs %d tokens",
                                      name, pi, cfg, k, which, ng, nb);
                    }
                }
            }
        }
    }
    CHECK_MSG(rep_acc > 0, "%s: lookup accepted nothing on repetitive prompts", name);
    CHECK_MSG(rep_sized > 0, "%s: sized lookup accepted nothing on repetitive prompts", name);
    CHECK_EQ_INT(mismatches, 0);
    lookup_free(lk);
    lookup_free(lk_sized);
    close_model(&t);
}

TEST(spec_lossless_greedy_qwen3) { lossless_model("qwen3-bf16"); }
TEST(spec_lossless_greedy_llama3) { lossless_model("llama3-bf16"); }
/* quantized targets: a GGUF (Q4_0) and an MLX 4-bit folder */
TEST(spec_lossless_greedy_q4_0) { lossless_model("quant_models/qwen3-q4_0"); }
TEST(spec_lossless_greedy_mlx4) { lossless_model("quant_models/qwen3-mlx-4bit-g64"); }

/* prompts long enough for whole prefill groups (the CPU's prefill family on
   quantized layers: rows [0, 128 * (n / 128)) of the prefill), with
   repetition so the lookup drafter gets accepted: speculative output still
   equals plain decoding */
static void lossless_long(const char *name) {
    tmodel t;
    if (open_model(&t, name) != 0) return;
    int prompt[300], base[64], got[64], mismatches = 0;
    long acc_all = 0;
    uint32_t sd = 777u;
    for (int j = 0; j < 300; j++) prompt[j] = j >= 40 && j % 50 < 20 ? prompt[j - 40] : (int)(lcg(&sd) % (uint32_t)t.vocab);
    lookup *lk = lookup_create(3, 1);
    const int lens[3] = {128, 256, 300};
    for (int li = 0; li < 3; li++) {
        gen_cfg g = {.n_ctx = 512, .max_new = 48, .ignore_eos = 1};
        const int nb = run_baseline(&t, &g, prompt, lens[li], base);
        if (nb < 0) break;
        for (int k = 1; k <= 16; k *= 4) {
            long acc = 0;
            drafter d = lookup_drafter(lk);
            const int ng = run_spec(&t, &g, &d, k, prompt, lens[li], got, &acc);
            acc_all += acc;
            if ((ng != nb || memcmp(got, base, sizeof(int) * (size_t)nb)) && mismatches++ < 3)
                test_fail(__FILE__, __LINE__, "%s prompt of %d k %d: %d vs %d tokens", name, lens[li], k, ng, nb);
        }
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK_MSG(acc_all > 0, "%s: lookup accepted nothing", name);
    lookup_free(lk);
    close_model(&t);
}
TEST(spec_lossless_greedy_long_q4_0) { lossless_long("quant_models/qwen3-q4_0"); }
TEST(spec_lossless_greedy_long_q4_k_m) { lossless_long("quant_models/qwen3-256-q4_k_m"); }

/* cancels generation after its n-th round (spec_opts.on_round) */
typedef struct {
    volatile sig_atomic_t flag;
    int rounds, after;
} canceller;
static void cancel_after(void *ctx, int drafted, int accepted, int emitted, double seconds) {
    (void)drafted, (void)accepted, (void)emitted, (void)seconds;
    canceller *c = ctx;
    if (++c->rounds == c->after) c->flag = 1;
}

/* Plain greedy decoding through spec_generate (no drafter: on a GPU, the
   chained steps, each launched before the previous id is read) against the
   reference loop: the same ids under each stop rule, the same bits of the
   last logits row, the cache holding prompt + ids but the last; and, cut
   by a cancel, a cache that goes on decoding as the reference did. */
static void plain_model(const char *name) {
    tmodel t;
    if (open_model(&t, name) != 0) return;
    int base[128], got[128], prompt[64];
    float *ref_logits = xmalloc(sizeof(float) * (size_t)t.vocab), *last = xmalloc(sizeof(float) * (size_t)t.vocab);
    sampler *smp = greedy_sampler(t.vocab);
    char err[512];
    for (int pi = 0; pi < N_REP + 4; pi++) {
        int n = make_prompt(pi, t.vocab, prompt);
        for (int cfg = 0; cfg < 4; cfg++) {
            gen_cfg g = {.n_ctx = 256, .max_new = 40 + pi % 5, .stop = t.stop, .n_stop = t.n_stop};
            int stop1;
            if (cfg == 1) g.ignore_eos = 1;
            if (cfg == 2) { /* a stop id from the middle of the output */
                gen_cfg g0 = g;
                g0.ignore_eos = 1;
                if (run_baseline(&t, &g0, prompt, n, base) < 20) continue;
                stop1 = base[5 + pi % 9];
                g.stop = &stop1;
                g.n_stop = 1;
            }
            if (cfg == 3) { /* the window ends it */
                g.n_ctx = n + 9 + pi % 4;
                g.ignore_eos = 1;
            }
            /* the reference loop, keeping its last logits row */
            seq *s;
            if (seq_create(&s, t.m, g.n_ctx, 64, t.tp, err, sizeof err) != 0) {
                test_fail(__FILE__, __LINE__, "%s", err);
                break;
            }
            int nb = 0, rc = seq_prefill(s, prompt, n, ref_logits, err, sizeof err) < 0 ? -1 : 0;
            while (rc == 0) {
                int id = op_argmax(ref_logits, t.vocab), is_stop = 0;
                base[nb++] = id;
                for (int i = 0; i < g.n_stop; i++) is_stop |= g.stop[i] == id;
                if ((is_stop && !g.ignore_eos) || nb == g.max_new || seq_len(s) + 1 >= seq_capacity(s)) break;
                rc = seq_step(s, id, ref_logits, err, sizeof err);
            }
            CHECK_MSG(rc == 0, "%s", err);
            seq_reset(s);
            spec_opts so = {.max_new = g.max_new, .stop = g.stop, .n_stop = g.n_stop, .ignore_eos = g.ignore_eos};
            spec_stats st;
            rc = spec_generate(s, smp, NULL, prompt, n, &so, got, last, &st, err, sizeof err);
            CHECK_MSG(rc == 0, "%s", err);
            if (rc == 0) {
                CHECK_EQ_INT(st.n_gen, nb);
                CHECK_MSG(!memcmp(got, base, sizeof(int) * (size_t)nb), "%s prompt %d cfg %d: other ids", name, pi,
                          cfg);
                CHECK_MSG(!memcmp(last, ref_logits, sizeof(float) * (size_t)t.vocab),
                          "%s prompt %d cfg %d: the last logits row differs", name, pi, cfg);
                CHECK_EQ_INT(seq_len(s), n + nb - 1);
                CHECK(!memcmp(seq_tokens(s) + n, got, sizeof(int) * (size_t)(nb - 1)));
                CHECK_EQ_INT(st.n_rounds, nb - 1);
            }
            /* cut after a few rounds: the cache is prompt + ids but the
               last, and the next step from it gives the reference's id */
            if (cfg == 1 && nb > 12) {
                canceller c = {.after = 3 + pi % 7};
                so.cancel = &c.flag;
                so.on_round = cancel_after;
                so.hook_ctx = &c;
                seq_reset(s);
                rc = spec_generate(s, smp, NULL, prompt, n, &so, got, NULL, &st, err, sizeof err);
                CHECK_MSG(rc == 0, "%s", err);
                CHECK(st.cancelled);
                CHECK_EQ_INT(st.n_gen, c.after + 1);
                CHECK_EQ_INT(seq_len(s), n + st.n_gen - 1);
                CHECK(!memcmp(got, base, sizeof(int) * (size_t)st.n_gen));
                CHECK_MSG(seq_step(s, got[st.n_gen - 1], ref_logits, err, sizeof err) == 0, "%s", err);
                CHECK_EQ_INT(op_argmax(ref_logits, t.vocab), base[st.n_gen]);
            }
            seq_free(s);
        }
    }
    sampler_free(smp);
    free(ref_logits);
    free(last);
    close_model(&t);
}

TEST(spec_lossless_plain_qwen3) { plain_model("qwen3-bf16"); }
TEST(spec_lossless_plain_llama3) { plain_model("llama3-bf16"); }

TEST(spec_kv_consistent_after_partial_accept) {
    tmodel t;
    if (open_model(&t, "qwen3-bf16") != 0) return;
    int prompt[64], base[128], got[128];
    int n = make_prompt(N_REP + 3, t.vocab, prompt);
    gen_cfg g = {.n_ctx = 256, .max_new = 40, .ignore_eos = 1};
    int nb = run_baseline(&t, &g, prompt, n, base);
    int ref[200];
    memcpy(ref, prompt, sizeof(int) * (size_t)n);
    memcpy(ref + n, base, sizeof(int) * (size_t)nb);
    oracle o = {.ref = ref, .n_ref = n + nb, .vocab = t.vocab, .every = 3};
    drafter d = {.self = &o, .deterministic = 1, .reset = or_reset, .propose = or_propose, .commit = or_commit};
    seq *s;
    char err[512];
    CHECK(seq_create(&s, t.m, 256, 64, t.tp, err, sizeof err) == 0);
    sampler *smp = greedy_sampler(t.vocab);
    spec_opts so = {.max_new = 40, .max_draft = 6, .ignore_eos = 1};
    spec_stats st;
    float *last = xmalloc(sizeof(float) * (size_t)t.vocab), *a = xmalloc(sizeof(float) * (size_t)t.vocab);
    CHECK(spec_generate(s, smp, &d, prompt, n, &so, got, last, &st, err, sizeof err) == 0);
    CHECK(st.n_accepted > 0 && st.n_accepted < st.n_drafted);
    CHECK_EQ_INT(st.n_gen, nb);
    /* the next forward over the speculative cache equals a plain forward */
    CHECK(seq_step(s, got[st.n_gen - 1], a, err, sizeof err) == 0);
    model_ctx *c;
    CHECK(mctx_create(&c, t.m, 256, 64, t.tp, err, sizeof err) == 0);
    int total = n + st.n_gen;
    float *all = xmalloc(sizeof(float) * (size_t)t.vocab * 2);
    model_batch b = {.n = total, .tokens = ref, .n_logits = 2, .logits = all};
    CHECK(model_forward(c, &b, err, sizeof err) == 0);
    double md = 0, mr = 0, ml = 0;
    for (int i = 0; i < t.vocab; i++) {
        md = fmax(md, fabs(a[i] - all[t.vocab + i]));
        mr = fmax(mr, fabs(all[t.vocab + i]));
        ml = fmax(ml, fabs(last[i] - all[i])); /* the row the last id was drawn from */
    }
    CHECK_MSG(md <= 1e-3 * mr && ml <= 1e-3 * mr, "diff %g / %g (last row %g)", md, mr, ml);
    free(all);
    free(a);
    free(last);
    mctx_free(c);
    sampler_free(smp);
    seq_free(s);
    close_model(&t);
}

/* ---- the accept rule with hand-made distributions ---- */

static sampler *mk_sampler(float temp, int top_k, float top_p, uint64_t seed, int vocab) {
    sampler_params sp = {.temperature = temp, .top_k = top_k, .top_p = top_p, .seed = seed};
    sampler *s;
    char err[256];
    if (sampler_create(&s, &sp, vocab, err, sizeof err) != 0) return NULL;
    return s;
}

static void set_logp(float *row, const double *p, int V) {
    for (int i = 0; i < V; i++) row[i] = p[i] > 0 ? (float)log(p[i]) : -1e30f;
}

/* |observed count - n*pr| within 5 sigma (plus a little slack) */
static void check_freq(const long *cnt, long n, const double *pr, int V, const char *what) {
    for (int i = 0; i < V; i++) {
        double e = n * pr[i], sd = sqrt(n * pr[i] * (1 - pr[i]));
        CHECK_MSG(fabs(cnt[i] - e) <= 5 * sd + 2, "%s: token %d seen %ld, expected %.1f", what, i, cnt[i], e);
    }
}

TEST(spec_accept_greedy) {
    enum { V = 8 };
    float logits[4 * V] = {0};
    logits[0 * V + 3] = 5; /* argmax row 0: 3 */
    logits[1 * V + 6] = 5; /* row 1: 6 */
    logits[2 * V + 1] = 5; /* row 2: 1 */
    logits[3 * V + 4] = 5; /* row 3: 4 */
    sampler *s = mk_sampler(0, 0, 1, 0, V);
    float p[V], r[V];
    int y;
    int d1[3] = {3, 6, 2};
    CHECK_EQ_INT(spec_accept(s, logits, V, d1, NULL, 3, p, r, &y), 2);
    CHECK_EQ_INT(y, 1);
    int d2[3] = {3, 6, 1};
    CHECK_EQ_INT(spec_accept(s, logits, V, d2, NULL, 3, p, r, &y), 3);
    CHECK_EQ_INT(y, 4); /* bonus */
    int d3[3] = {0, 6, 1};
    CHECK_EQ_INT(spec_accept(s, logits, V, d3, NULL, 3, p, r, &y), 0);
    CHECK_EQ_INT(y, 3);
    CHECK_EQ_INT(spec_accept(s, logits, V, d3, NULL, 0, p, r, &y), 0);
    CHECK_EQ_INT(y, 3);
    /* ties: the smaller index, as op_argmax */
    logits[0 * V + 5] = 5;
    CHECK_EQ_INT(op_argmax(logits, V), 3);
    CHECK_EQ_INT(spec_accept(s, logits, V, d1, NULL, 1, p, r, &y), 1);
    sampler_free(s);
}

/* one draft d against row 0 (target p0, filtered by the sampler) with draft
   distribution q (NULL: one-hot); checks the acceptance rate and the
   distribution of y on rejection and of the bonus on acceptance */
static void accept_case(const double *p0, const double *p1, const double *qd, int d, int top_k, float top_p,
                        const char *what) {
    enum { V = 6 };
    const long N = 60000;
    float logits[2 * V], fp[V], r[V], q[V];
    set_logp(logits, p0, V);
    set_logp(logits + V, p1, V);
    sampler *s = mk_sampler(1.0f, top_k, top_p, 42, V);
    double pf[V], p1f[V], qq[V];
    sampler_probs(s, logits, fp);
    for (int i = 0; i < V; i++) pf[i] = fp[i];
    sampler_probs(s, logits + V, fp);
    for (int i = 0; i < V; i++) p1f[i] = fp[i];
    for (int i = 0; i < V; i++) {
        qq[i] = qd ? qd[i] : (i == d);
        q[i] = (float)qq[i];
    }
    long acc = 0, rej[V] = {0}, bon[V] = {0};
    for (long t = 0; t < N; t++) {
        int y;
        int a = spec_accept(s, logits, V, &d, qd ? q : NULL, 1, fp, r, &y);
        if (a) {
            acc++;
            bon[y]++;
        } else {
            rej[y]++;
        }
    }
    double pa = fmin(1.0, pf[d] / fmax(qq[d], 1e-8));
    CHECK_MSG(fabs(acc - N * pa) <= 5 * sqrt(N * pa * (1 - pa)) + 2, "%s: accepted %ld of %ld, expected p %.4f", what,
              acc, N, pa);
    double res[V], z = 0;
    for (int i = 0; i < V; i++) z += res[i] = fmax(0, pf[i] - qq[i]);
    for (int i = 0; i < V; i++) res[i] = z > 1e-8 ? res[i] / z : pf[i];
    if (N - acc > 0) check_freq(rej, N - acc, res, V, what);
    if (acc > 0) check_freq(bon, acc, p1f, V, what);
    sampler_free(s);
}

TEST(spec_accept_sampling_rule) {
    const double p0[6] = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
    const double p1[6] = {0.05, 0.05, 0.3, 0.3, 0.2, 0.1};
    const double qbad[6] = {0.02, 0.08, 0.1, 0.5, 0.2, 0.1};
    /* one-hot drafts: accept with p(d); residual = p without d */
    accept_case(p0, p1, NULL, 0, 0, 1.0f, "one-hot d=0");
    accept_case(p0, p1, NULL, 3, 0, 1.0f, "one-hot d=3");
    /* a draft distribution: min(1, p/q); residual max(0, p - q) */
    accept_case(p0, p1, qbad, 3, 0, 1.0f, "q d=3");
    accept_case(p0, p1, qbad, 0, 0, 1.0f, "q d=0 (p > q: always accepted)");
    /* filtered targets: top-k 2 and top-p 0.7 (a draft outside is never accepted) */
    accept_case(p0, p1, qbad, 1, 2, 1.0f, "top-k 2, d=1");
    accept_case(p0, p1, NULL, 2, 2, 1.0f, "top-k 2, d=2 outside");
    accept_case(p0, p1, qbad, 2, 0, 0.7f, "top-p 0.7, d=2");
    accept_case(p0, p1, NULL, 4, 0, 0.7f, "top-p 0.7, d=4 outside");
}

/* The first emitted token of a round, with drafts drawn from a deliberately
   bad q, has the target's filtered distribution. */
TEST(spec_sampling_distribution) {
    enum { V = 8 };
    const double p0[V] = {0.3, 0.2, 0.15, 0.12, 0.1, 0.07, 0.04, 0.02};
    const double qd[V] = {0.01, 0.01, 0.02, 0.06, 0.1, 0.2, 0.3, 0.3};
    float logits[3 * V], q[2 * V], fp[V], r[V];
    set_logp(logits, p0, V);
    set_logp(logits + V, p0, V);
    set_logp(logits + 2 * V, p0, V);
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < V; i++) q[j * V + i] = (float)qd[i];
    const struct { int top_k; float top_p; } cfg[3] = {{0, 1.0f}, {5, 1.0f}, {0, 0.8f}};
    for (int c = 0; c < 3; c++) {
        sampler *s = mk_sampler(0.7f, cfg[c].top_k, cfg[c].top_p, 1000 + (uint64_t)c, V);
        sampler_probs(s, logits, fp);
        double pt[V];
        for (int i = 0; i < V; i++) pt[i] = fp[i];
        long cnt[V] = {0}, cnt2[V] = {0}, n2 = 0;
        const long N = 200000;
        uint32_t rs = 99u + (uint32_t)c;
        for (long t = 0; t < N; t++) {
            int d[2];
            for (int j = 0; j < 2; j++) {
                double u = (lcg(&rs) & 0xffffff) / 16777216.0, cum = 0;
                d[j] = V - 1;
                for (int i = 0; i < V; i++) {
                    cum += qd[i];
                    if (u < cum) {
                        d[j] = i;
                        break;
                    }
                }
            }
            int y;
            int a = spec_accept(s, logits, V, d, q, 2, fp, r, &y);
            cnt[a > 0 ? d[0] : y]++;
            if (a > 0) {
                cnt2[a > 1 ? d[1] : y]++;
                n2++;
            }
        }
        check_freq(cnt, N, pt, V, "first token");
        check_freq(cnt2, n2, pt, V, "second token given the first was accepted");
        sampler_free(s);
    }
}

/* ---- the lookup index ---- */

static int brute_propose(const int *ids, int n, int nmax, int nmin, int k, int *out) {
    for (int g = nmax; g >= nmin; g--) {
        if (g > n) continue;
        for (int e = n - 1; e >= g; e--) {
            if (memcmp(ids + e - g, ids + n - g, sizeof(int) * (size_t)g)) continue;
            int m = n - e < k ? n - e : k;
            memcpy(out, ids + e, sizeof(int) * (size_t)m);
            return m;
        }
    }
    return 0;
}

TEST(spec_lookup_sized_drafts) {
    lookup *l = lookup_create(3, 1);
    CHECK_EQ_INT(lookup_draft_len(l, 1, 5), 5); /* no costs: whatever the match gives */
    /* each verify row about a third of a step (the bundled model on two
       cores): a unigram match (prior acceptance 0.3) does not pay for one
       row, (1 + 0.3) / 1.4 < 1; a trigram match (0.8) pays best at three,
       (1 + .8 + .64 + .512) / 2.1 = 1.41 against 1.29 at one and 1.29 at four */
    const double steep[9] = {1, 1.4, 1.9, 2.1, 2.6, 2.8, 3.2, 3.4, 3.6};
    lookup_set_costs(l, steep, 9);
    CHECK_EQ_INT(lookup_draft_len(l, 1, 8), 0);
    CHECK_EQ_INT(lookup_draft_len(l, 3, 8), 3);
    CHECK_EQ_INT(lookup_draft_len(l, 3, 1), 1); /* bounded by what the match gives */
    /* a wider verify almost free (a GPU): unigram matches draft too */
    double flat[9];
    for (int i = 0; i < 9; i++) flat[i] = 1 + 0.01 * i;
    lookup_set_costs(l, flat, 9);
    CHECK(lookup_draft_len(l, 1, 8) >= 2);
    CHECK(lookup_draft_len(l, 3, 8) >= 6);
    /* through the drafter: trigram drafts that keep being rejected stop */
    lookup_set_costs(l, steep, 9);
    drafter d = lookup_drafter(l);
    int a[] = {1, 2, 3, 4, 5, 1, 2, 3}, out[16], wrong = 9;
    d.reset(d.self, a, 8);
    int first = d.propose(d.self, 8, out, NULL);
    CHECK_EQ_INT(first, 3);
    CHECK(out[0] == 4 && out[1] == 5 && out[2] == 1);
    int m = first;
    for (int i = 0; i < 40 && m > 0; i++) {
        d.commit(d.self, &wrong, 1); /* the target disagreed with the first draft */
        lookup_reset(l, a, 8);       /* the same context again, the statistics kept */
        m = d.propose(d.self, 8, out, NULL);
    }
    CHECK_EQ_INT(m, 0);
    /* a new sequence starts from the priors again */
    d.reset(d.self, a, 8);
    CHECK_EQ_INT(d.propose(d.self, 8, out, NULL), 3);
    /* copy runs (the match runs back 8 ids or more) have their own, higher
       prior: they draft longer than trigram matches under the same costs */
    CHECK(lookup_draft_len(l, LOOKUP_LONG, 15) > lookup_draft_len(l, 3, 15));
    lookup_set_costs(l, (double[16]){1, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09, 1.1, 1.11, 1.12,
                                     1.13, 1.14, 1.15},
                     16);
    /* 1..20 then 1..10: the suffix matches back 10 ids, so up to 15 (the
       cap) of the 20 that followed */
    int run[30], wantc[15];
    for (int i = 0; i < 30; i++) run[i] = 1 + i % 20;
    d.reset(d.self, run, 30);
    CHECK_EQ_INT(d.propose(d.self, 15, out, NULL), 15);
    for (int i = 0; i < 15; i++) wantc[i] = 1 + (10 + i) % 20;
    CHECK(memcmp(out, wantc, sizeof wantc) == 0);
    /* a trigram match that runs back less than 8 ids ("51 52 53", preceded
       by 50 there and by 60 here): at most 8, though these costs and the
       trigram prior would take more */
    int shortm[24] = {50, 51, 52, 53, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 60, 51, 52, 53};
    CHECK(lookup_draft_len(l, 3, 15) > 8);
    d.reset(d.self, shortm, 24);
    int ms = d.propose(d.self, 15, out, NULL);
    CHECK_MSG(ms == 8, "short match proposed %d", ms);
    lookup_free(l);
}

/* A stand-in neural drafter for the hybrid: counts its calls, proposes
   77, 78, ... with a uniform q */
typedef struct {
    int proposes, commits, features, resets, V, dev_proposes;
} fake_inner;
static int fi_reset(void *self, const int *ids, int n) {
    (void)ids;
    ((fake_inner *)self)->resets++;
    return n;
}
static int fi_propose(void *self, int k, int *draft, float *q) {
    fake_inner *f = self;
    f->proposes++;
    for (int i = 0; i < k; i++) {
        draft[i] = 77 + i;
        for (int v = 0; q && v < f->V; v++) q[(size_t)i * f->V + v] = 1.0f / f->V;
    }
    return k;
}
/* its device proposal: n drafts, one uniform each, q "on the device" (a
   marker address) */
static const float fi_qrows[1];
static int fi_propose_resident(void *self, int k, int *draft, const double *u, int *used, model_draft_q *q) {
    fake_inner *f = self;
    f->dev_proposes++;
    for (int i = 0; i < k; i++) draft[i] = 77 + i + (u[i] < 0.5 ? 0 : 10);
    *used = k;
    q->e = fi_qrows;
    return k;
}
static void fi_commit(void *self, const int *ids, int n) {
    (void)ids;
    (void)n;
    ((fake_inner *)self)->commits++;
}
static void fi_features(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    (void)pos0, (void)n, (void)taps, (void)rows, (void)row0;
    ((fake_inner *)self)->features++;
}

/* Hybrid drafting: a copy run of 5+ ids drafts lookup's continuation
   (q one-hot) without asking the drafter; otherwise the drafter's block;
   reset / commit / features reach both; and the same for proposals on the
   device (the drafter's own state reaches it; lookup's use no uniforms and
   leave q one-hot). */
TEST(spec_lookup_hybrid) {
    enum { V = 100 };
    fake_inner f = {.V = V};
    static const int taps_layers[1] = {2};
    drafter inner = {.self = &f, .deterministic = 0, .n_taps = 1, .tap_layers = taps_layers, .reset = fi_reset,
                     .propose = fi_propose, .commit = fi_commit, .features = fi_features,
                     .propose_resident = fi_propose_resident};
    lookup_hybrid *h = lookup_hybrid_create(inner, V);
    drafter d = lookup_hybrid_drafter(h);
    CHECK(d.propose_resident != NULL);
    CHECK(d.n_taps == 1 && d.tap_layers == taps_layers && !d.deterministic);
    int out[8], ctx[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    static float q[8 * V];
    d.reset(d.self, ctx, 12);
    CHECK_EQ_INT(f.resets, 1);
    CHECK(!lookup_hybrid_ready(h));
    CHECK_EQ_INT(d.propose(d.self, 4, out, q), 4); /* no earlier occurrence: the drafter's */
    CHECK(out[0] == 77 && f.proposes == 1 && !lookup_hybrid_last_was_lookup(h));
    /* 3 4 5 6 7 again: a copy run of 5, continued by 8 9 10 11 12 */
    int more[5] = {3, 4, 5, 6, 7};
    d.commit(d.self, more, 5);
    d.features(d.self, 12, 5, NULL, 5, 0);
    CHECK(f.commits == 1 && f.features == 1);
    CHECK(lookup_hybrid_ready(h));
    CHECK_EQ_INT(d.propose(d.self, 4, out, q), 4);
    CHECK(out[0] == 8 && out[1] == 9 && out[2] == 10 && out[3] == 11);
    CHECK(f.proposes == 1 && lookup_hybrid_last_was_lookup(h));
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < V; v++) CHECK(q[(size_t)i * V + v] == (v == out[i] ? 1.0f : 0.0f));
    /* on the device: lookup's copy again, then (no copy run) the drafter's */
    const double u[4] = {0.7, 0.2, 0.9, 0.1};
    int used = -1;
    model_draft_q dq = {.e = fi_qrows};
    CHECK_EQ_INT(d.propose_resident(d.self, 4, out, u, &used, &dq), 4);
    CHECK(out[0] == 8 && out[3] == 11 && used == 0 && dq.e == NULL && f.dev_proposes == 0);
    int other[1] = {99};
    d.commit(d.self, other, 1);
    CHECK_EQ_INT(d.propose_resident(d.self, 3, out, u, &used, &dq), 3);
    CHECK(f.dev_proposes == 1 && used == 3 && dq.e == fi_qrows && !lookup_hybrid_last_was_lookup(h));
    CHECK(out[0] == 87 && out[1] == 78 && out[2] == 89);
    /* a run of 4 is not a copy run: "41 42 43 44" again, after 50 here and
       40 there */
    int ctx2[10] = {40, 41, 42, 43, 44, 50, 41, 42, 43, 44};
    d.reset(d.self, ctx2, 10);
    CHECK(!lookup_hybrid_ready(h));
    CHECK_EQ_INT(d.propose(d.self, 2, out, NULL), 2);
    CHECK(out[0] == 77 && f.proposes == 2);
    lookup_hybrid_free(h);
    /* what spec_accept makes of an explicit one-hot q (a non-deterministic
       drafter's lookup round) is what it makes of q = NULL */
    const double p0[6] = {0.1, 0.3, 0.05, 0.25, 0.2, 0.1}, p1[6] = {0.2, 0.2, 0.2, 0.1, 0.1, 0.2};
    const double onehot[6] = {0, 0, 0, 1, 0, 0};
    accept_case(p0, p1, onehot, 3, 0, 1.0f, "explicit one-hot q d=3");
}

TEST(spec_lookup_index) {
    lookup *l = lookup_create(3, 1);
    int out[16], used;
    int a[] = {1, 2, 3, 4, 5, 1, 2, 3};
    lookup_reset(l, a, 8);
    CHECK_EQ_INT(lookup_len(l), 8);
    /* after "1 2 3" at 0..2 came 4,5,1,2,3: capped by k=4 */
    int m = lookup_propose(l, 4, out, &used);
    CHECK_EQ_INT(used, 3);
    CHECK_EQ_INT(m, 4);
    CHECK(out[0] == 4 && out[1] == 5 && out[2] == 1 && out[3] == 2);
    /* most recent occurrence wins */
    int b[] = {7, 1, 7, 2, 7};
    lookup_reset(l, b, 5);
    m = lookup_propose(l, 8, out, &used);
    CHECK_EQ_INT(used, 1);
    CHECK(m == 2 && out[0] == 2 && out[1] == 7);
    /* longer n-gram beats a more recent shorter one */
    int c[] = {5, 6, 9, 0, 6, 8, 5, 6};
    lookup_reset(l, c, 8);
    m = lookup_propose(l, 1, out, &used);
    CHECK(used == 2 && m == 1 && out[0] == 9);
    /* no match */
    int e[] = {1, 2, 3};
    lookup_reset(l, e, 3);
    CHECK_EQ_INT(lookup_propose(l, 4, out, &used), 0);
    CHECK_EQ_INT(used, 0);
    lookup_free(l);
    /* incremental pushes vs a brute-force scan, small alphabet, long context */
    for (int cfg = 0; cfg < 3; cfg++) {
        int nmax = 1 + cfg * 2, nmin = cfg == 2 ? 2 : 1;
        l = lookup_create(nmax, nmin);
        int *ids = xmalloc(sizeof(int) * 5000);
        uint32_t s = 7u + (uint32_t)cfg;
        int n = 0;
        for (int i = 0; i < 10; i++) ids[n++] = (int)(lcg(&s) % 6);
        lookup_reset(l, ids, n);
        int bad = 0;
        while (n < 5000) {
            int k = 1 + (int)(lcg(&s) % 16), want[16];
            int m1 = lookup_propose(l, k, out, NULL), m2 = brute_propose(ids, n, nmax, nmin, k, want);
            if (m1 != m2 || memcmp(out, want, sizeof(int) * (size_t)m1)) bad++;
            int add = 1 + (int)(lcg(&s) % 5);
            if (n + add > 5000) add = 5000 - n;
            for (int i = 0; i < add; i++) ids[n + i] = (int)(lcg(&s) % 6);
            lookup_push(l, ids + n, add);
            n += add;
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(lookup_len(l), 5000);
        free(ids);
        lookup_free(l);
    }
}

/* sampled speculative generation end to end: runs, keeps the cache
   bookkeeping, and is reproducible for a seed */
TEST(spec_sampled_generate) {
    tmodel t;
    if (open_model(&t, "qwen3-bf16") != 0) return;
    int prompt[] = {5, 5, 5, 5, 5, 5}, out[2][120];
    lookup *lk = lookup_create(3, 1);
    for (int rep = 0; rep < 2; rep++) {
        seq *s;
        char err[512];
        CHECK(seq_create(&s, t.m, 256, 64, t.tp, err, sizeof err) == 0);
        sampler *smp = mk_sampler(0.8f, 40, 0.95f, 7, t.vocab);
        drafter d = lookup_drafter(lk);
        spec_opts so = {.max_new = 120, .max_draft = 8, .stop = t.stop, .n_stop = t.n_stop};
        spec_stats st;
        memset(out[rep], 0, sizeof out[rep]);
        CHECK(spec_generate(s, smp, &d, prompt, 6, &so, out[rep], NULL, &st, err, sizeof err) == 0);
        CHECK(st.n_gen >= 1 && st.n_gen <= 120);
        CHECK_EQ_INT(seq_len(s), 6 + st.n_gen - 1);
        CHECK(!memcmp(seq_tokens(s) + 6, out[rep], sizeof(int) * (size_t)(st.n_gen - 1)));
        for (int i = 0; i < st.n_gen; i++) CHECK(out[rep][i] >= 0 && out[rep][i] < t.vocab);
        sampler_free(smp);
        seq_free(s);
    }
    CHECK(!memcmp(out[0], out[1], sizeof out[0]));
    lookup_free(lk);
    close_model(&t);
}
