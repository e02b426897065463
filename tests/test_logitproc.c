/* Request-level logit processing (server/logitproc.h, spec.h logit_proc)
 * on the bundled model: penalties and logit_bias against a reference loop
 * that recomputes them from the raw logits at every step; plain decoding
 * through spec_generate equal to that reference; speculative decoding
 * (lookup, DFlash, DSpark) equal to plain decoding under each processor,
 * greedy and (drafters with one-hot drafts) sampled with a seed; JSON
 * schema answers that parse and validate against their schema; the
 * reasoning block left free before the grammar. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/model.h"
#include "engine/ops.h"
#include "server/constrain.h"
#include "server/logitproc.h"
#include "server/toolcall.h"
#include "spec/drafter.h"
#include "spec/lookup.h"
#include "spec/registry.h"
#include "spec/spec.h"
#include "test.h"
#include "text/json_schema.h"
#include "text/tokenizer.h"
#include "base/util.h"

#define MAX_NEW 240
static int max_new = 80; /* per test */
#define N_CTX 512

typedef struct {
    model *m;
    tpool *tp;
    tokenizer *tok;
    gtok_trie *trie;
    dmodel *dflash, *dspark;
    int V, eos[8], n_eos;
} bundled;

static int open_bundled(bundled *b) {
    test_bundled_set t;
    const int rc = test_bundled_open(&t);
    memset(b, 0, sizeof *b);
    b->m = t.m, b->tok = t.tok, b->dflash = t.dflash, b->dspark = t.dspark, b->tp = t.tp;
    if (rc != 0 && (!b->m || !b->tok)) return -1; /* (a drafter that did not load is reported; the rest goes on) */
    const model_config *c = model_cfg(b->m);
    b->V = c->vocab_size;
    for (int i = 0; i < c->n_eos && i < 8; i++) b->eos[b->n_eos++] = c->eos_token_ids[i];
    b->trie = gtok_trie_new(b->tok, b->eos, b->n_eos);
    return 0;
}

static void close_bundled(bundled *b) {
    gtok_trie_free(b->trie);
    test_bundled_set t = {.m = b->m, .tok = b->tok, .dflash = b->dflash, .dspark = b->dspark, .tp = b->tp};
    test_bundled_close(&t);
}

/* ---- the reference: plain decoding, the processing recomputed from the
   history at every step (no incremental counts) ---- */

static void ref_process(const lproc_cfg *c, const int *hist, int n_hist, int n_prompt, const float *raw, float *w,
                        int V) {
    memcpy(w, raw, sizeof(float) * (size_t)V);
    char *seen = calloc((size_t)V, 1);
    int from = c->rep_window < 0 ? 0 : n_hist - c->rep_window < 0 ? 0 : n_hist - c->rep_window;
    if (c->repetition != 1 && c->repetition != 0 && c->rep_window != 0)
        for (int i = from; i < n_hist; i++)
            if (!seen[hist[i]]) {
                seen[hist[i]] = 1;
                float *x = &w[hist[i]];
                *x = *x > 0 ? *x / c->repetition : *x * c->repetition;
            }
    memset(seen, 0, (size_t)V);
    for (int i = n_prompt; i < n_hist; i++) {
        int t = hist[i], cnt = 0;
        if (seen[t]) continue;
        seen[t] = 1;
        for (int k = n_prompt; k < n_hist; k++) cnt += hist[k] == t;
        w[t] -= c->presence + c->frequency * (float)cnt;
    }
    for (int i = 0; i < c->n_bias; i++) w[c->bias_id[i]] += c->bias[i];
    free(seen);
}

/* whether the grammar can take id after the bytes so far (the byte
   matcher alone, not the trie walk of the masks) */
static int ref_allowed(const bundled *b, const gm_state *st, int id) {
    for (int i = 0; i < b->n_eos; i++)
        if (b->eos[i] == id) return gm_is_complete(st);
    if (id >= tok_vocab_size(b->tok) || tok_is_special(b->tok, id)) return 0;
    size_t len = 0;
    const char *s = tok_token_bytes(b->tok, id, &len);
    if (!s || !len) return 0;
    gm_state *c = gm_clone(st);
    int ok = gm_accept_bytes(c, s, len) == 1;
    gm_free(c);
    return ok;
}

/* a sequence on the bundled model and a sampler for one generation */
static int open_seq(const bundled *b, const sampler_params *spp, seq **s, sampler **smp) {
    char err[512];
    if (seq_create(s, b->m, N_CTX, 64, b->tp, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    if (sampler_create(smp, spp, b->V, err, sizeof err) != 0) {
        seq_free(*s);
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    return 0;
}

static int ref_generate(const bundled *b, const lproc_cfg *c, const sampler_params *spp, const int *prompt, int n,
                        int *out) {
    char err[512];
    seq *s;
    sampler *smp;
    if (open_seq(b, spp, &s, &smp) != 0) return -1;
    int V = b->V, *hist = xmalloc(sizeof(int) * (size_t)(n + MAX_NEW)), ng = 0;
    memcpy(hist, prompt, sizeof(int) * (size_t)n);
    float *raw = xmalloc(sizeof(float) * (size_t)V), *w = xmalloc(sizeof(float) * (size_t)V),
          *p = xmalloc(sizeof(float) * (size_t)V);
    gm_state *st = c->g ? gm_new(c->g) : NULL;
    int rc = seq_prefill(s, prompt, n, raw, err, sizeof err) < 0 ? -1 : 0;
    while (rc == 0 && ng < max_new) {
        ref_process(c, hist, n + ng, n, raw, w, V);
        int id;
        if (sampler_is_greedy(smp)) {
            /* the first largest allowed: candidates in order of w */
            memcpy(p, w, sizeof(float) * (size_t)V);
            for (;;) {
                id = op_argmax(p, V);
                if (!st || ref_allowed(b, st, id)) break;
                p[id] = -INFINITY;
            }
        } else {
            id = sampler_sample(smp, w);
            if (st && !ref_allowed(b, st, id)) { /* D: p restricted to the allowed ids */
                sampler_probs(smp, w, p);
                double mass = 0;
                for (int i = 0; i < V; i++) {
                    if (!ref_allowed(b, st, i)) p[i] = 0;
                    mass += p[i];
                }
                if (mass <= 0) { /* no mass there: the masked row's distribution */
                    for (int i = 0; i < V; i++)
                        if (!ref_allowed(b, st, i)) w[i] = -INFINITY;
                    sampler_probs(smp, w, p);
                    mass = 0;
                    for (int i = 0; i < V; i++) mass += p[i];
                }
                id = sampler_draw(smp, p, V, mass);
            }
        }
        if (st) {
            size_t len = 0;
            const char *bytes = tok_token_bytes(b->tok, id, &len);
            int is_eos = 0;
            for (int i = 0; i < b->n_eos; i++) is_eos |= b->eos[i] == id;
            if (!is_eos) CHECK(gm_accept_bytes(st, bytes, len) == 1);
        }
        out[ng] = id;
        hist[n + ng++] = id;
        int stop = 0;
        for (int i = 0; i < b->n_eos; i++) stop |= b->eos[i] == id;
        if (stop || ng == max_new) break;
        rc = seq_step(s, id, raw, err, sizeof err);
    }
    if (rc) test_fail(__FILE__, __LINE__, "%s", err);
    gm_free(st);
    free(hist);
    free(raw);
    free(w);
    free(p);
    sampler_free(smp);
    seq_free(s);
    return rc ? -1 : ng;
}

/* ---- spec_generate with the processor: which 0 plain, 1 lookup, 2 DFlash, 3 DSpark ---- */
static int run(const bundled *b, const lproc_cfg *c, const sampler_params *spp, int which, int k, const int *prompt,
               int n, int *out, long *accepted) {
    char err[512];
    seq *s;
    sampler *smp;
    if (open_seq(b, spp, &s, &smp) != 0) return -1;
    lookup *lk = NULL;
    dstate *ds = NULL;
    drafter d, *dp = NULL;
    if (which == 1) {
        lk = lookup_create(3, 1);
        d = lookup_drafter(lk);
        dp = &d;
    } else if (which >= 2) {
        dmodel *dm = which == 2 ? b->dflash : b->dspark;
        if (!dm || dstate_create(&ds, dm, N_CTX, b->tp, smp, err, sizeof err) != 0) {
            sampler_free(smp);
            seq_free(s);
            return -2;
        }
        d = dstate_drafter(ds);
        dp = &d;
    }
    lproc *lp = lproc_new(c, b->trie, b->V, prompt, n);
    logit_proc li = lproc_iface(lp);
    spec_opts so = {.max_new = max_new, .max_draft = k, .stop = b->eos, .n_stop = b->n_eos, .proc = &li};
    spec_stats st;
    int rc = spec_generate(s, smp, dp, prompt, n, &so, out, NULL, &st, err, sizeof err);
    if (rc) test_fail(__FILE__, __LINE__, "%s", err);
    if (accepted) *accepted = st.n_accepted;
    lproc_free(lp);
    lookup_free(lk);
    dstate_free(ds);
    sampler_free(smp);
    seq_free(s);
    return rc ? -1 : st.n_gen;
}

static int encode(const bundled *b, const char *text, int *ids, int max) {
    int *t = NULL;
    char err[256];
    int n = tok_encode(b->tok, text, strlen(text), 0, &t, err, sizeof err);
    if (n > max) n = max;
    if (n > 0) memcpy(ids, t, sizeof(int) * (size_t)n);
    free(t);
    return n;
}

static const char *const PROMPTS[] = {
    "<|im_start|>user\nWrite a function that adds two numbers<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\nfor x in range(10):\n    for x in range(10):\n        ",
};
#define N_PROMPTS 3

typedef struct {
    const char *name;
    lproc_cfg c;
} proc_case;

static int bias_ids[3] = {0, 0, 0};
static float bias_vals[3] = {-100, 5, 2.5f};

/* the processors under test (bias ids picked from the model's own output) */
static int cases(proc_case *pc, const int *greedy_out, int ng) {
    bias_ids[0] = greedy_out[1];                /* banned */
    bias_ids[1] = greedy_out[ng > 4 ? 4 : 0];   /* pushed */
    bias_ids[2] = 220;                          /* a space */
    int n = 0;
    pc[n++] = (proc_case){"presence+frequency", {.presence = 0.8f, .frequency = 0.6f, .repetition = 1}};
    pc[n++] = (proc_case){"negative penalties", {.presence = -0.5f, .frequency = -0.3f, .repetition = 1}};
    pc[n++] = (proc_case){"repetition whole", {.repetition = 1.3f, .rep_window = -1}};
    pc[n++] = (proc_case){"repetition last 16", {.repetition = 1.8f, .rep_window = 16}};
    pc[n++] = (proc_case){"logit_bias", {.repetition = 1, .n_bias = 3, .bias_id = bias_ids, .bias = bias_vals}};
    pc[n++] = (proc_case){"all", {.presence = 0.4f, .frequency = 0.2f, .repetition = 1.2f, .rep_window = 32,
                                  .n_bias = 3, .bias_id = bias_ids, .bias = bias_vals}};
    return n;
}

static void compare(const char *what, const int *a, int na, const int *b, int nb, int *fails) {
    if (na == nb && !memcmp(a, b, sizeof(int) * (size_t)na)) return;
    if ((*fails)++ < 6) test_fail(__FILE__, __LINE__, "%s: %d vs %d tokens, or other ids", what, na, nb);
}

TEST(logitproc_penalties_reference_and_lossless) {
    bundled b;
    if (open_bundled(&b) != 0) return;
    max_new = 80;
    int prompt[256], ref[MAX_NEW], got[MAX_NEW], raw_out[MAX_NEW], fails = 0;
    long acc_total = 0;
    const sampler_params greedy = {.temperature = 0, .top_p = 1};
    for (int pi = 0; pi < N_PROMPTS; pi++) {
        int n = encode(&b, PROMPTS[pi], prompt, 256);
        lproc_cfg none = {.repetition = 1};
        int nraw = ref_generate(&b, &none, &greedy, prompt, n, raw_out);
        CHECK(nraw > 4);
        proc_case pc[8];
        int nc = cases(pc, raw_out, nraw);
        for (int ci = 0; ci < nc; ci++) {
            for (int smode = 0; smode < 2; smode++) {
                sampler_params sp = smode ? (sampler_params){.temperature = 0.9f, .top_k = 40, .top_p = 0.95f,
                                                             .seed = 77 + (uint64_t)pi}
                                          : greedy;
                int nref = ref_generate(&b, &pc[ci].c, &sp, prompt, n, ref);
                char what[160];
                /* the processor changes the output (else the case tests nothing) */
                if (!smode) CHECK_MSG(nref != nraw || memcmp(ref, raw_out, sizeof(int) * (size_t)nref),
                                      "%s: the same output as without it", pc[ci].name);
                for (int which = 0; which < 4; which++) {
                    /* sampled: drafters whose drafts are one-hot give the plain tokens exactly */
                    if (smode && which == 3) continue;
                    for (int k = which ? 2 : 0; k <= (which ? 7 : 0); k += 5) {
                        long acc = 0;
                        int ng = run(&b, &pc[ci].c, &sp, which, k, prompt, n, got, &acc);
                        if (ng == -2) continue; /* drafter missing: reported at load */
                        acc_total += acc;
                        snprintf(what, sizeof what, "prompt %d %s %s drafter %d k %d", pi, pc[ci].name,
                                 smode ? "sampled" : "greedy", which, k);
                        compare(what, got, ng, ref, nref, &fails);
                    }
                }
            }
        }
    }
    CHECK_MSG(acc_total > 0, "no draft was ever accepted: the speculative rows were not exercised");
    CHECK_EQ_INT(fails, 0);
    close_bundled(&b);
}

/* ---- constrained decoding ---- */

static int utf8_len(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* A validator for the keywords the schemas below use, written from the
   JSON Schema text (not from json_schema.c): 1 valid, 0 not. */
static int valid(const cJSON *v, const cJSON *s) {
    const cJSON *t = cJSON_GetObjectItem(s, "type"), *e = cJSON_GetObjectItem(s, "enum");
    if (e) {
        const cJSON *x;
        int hit = 0;
        cJSON_ArrayForEach(x, e) hit |= cJSON_Compare(x, v, 1);
        if (!hit) return 0;
    }
    if (t) {
        const char *ty = t->valuestring;
        if (!strcmp(ty, "object") && !cJSON_IsObject(v)) return 0;
        if (!strcmp(ty, "array") && !cJSON_IsArray(v)) return 0;
        if (!strcmp(ty, "string") && !cJSON_IsString(v)) return 0;
        if (!strcmp(ty, "boolean") && !cJSON_IsBool(v)) return 0;
        if (!strcmp(ty, "number") && !cJSON_IsNumber(v)) return 0;
        if (!strcmp(ty, "integer") && (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))) return 0;
    }
    const cJSON *mn = cJSON_GetObjectItem(s, "minimum"), *mx = cJSON_GetObjectItem(s, "maximum");
    if (cJSON_IsNumber(v) && ((mn && v->valuedouble < mn->valuedouble) || (mx && v->valuedouble > mx->valuedouble)))
        return 0;
    const cJSON *ml = cJSON_GetObjectItem(s, "maxLength");
    if (cJSON_IsString(v) && ml && utf8_len(v->valuestring) > ml->valueint) return 0;
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItem(s, "properties"), *req = cJSON_GetObjectItem(s, "required"), *x;
        cJSON_ArrayForEach(x, req) if (!cJSON_GetObjectItem(v, x->valuestring)) return 0;
        cJSON_ArrayForEach(x, v) {
            const cJSON *ps = cJSON_GetObjectItem(props, x->string);
            if (props && !ps) return 0; /* additionalProperties false in these schemas */
            if (ps && !valid(x, ps)) return 0;
        }
    }
    if (cJSON_IsArray(v)) {
        const cJSON *it = cJSON_GetObjectItem(s, "items"), *mi = cJSON_GetObjectItem(s, "maxItems"), *x;
        if (mi && cJSON_GetArraySize(v) > mi->valueint) return 0;
        cJSON_ArrayForEach(x, v) if (it && !valid(x, it)) return 0;
    }
    return 1;
}

static const char *const SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":10},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"age\",\"ok\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"lang\":{\"enum\":[\"c\",\"python\",\"go\"]},"
    "\"lines\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},"
    "\"maxItems\":3}},\"required\":[\"lang\",\"lines\"],\"additionalProperties\":false}",
};

TEST(logitproc_json_schema_valid_and_lossless) {
    bundled b;
    if (open_bundled(&b) != 0) return;
    max_new = MAX_NEW;
    int prompt[256], ref[MAX_NEW], got[MAX_NEW], fails = 0, complete = 0, answers = 0;
    for (int si = 0; si < 2; si++) {
        cJSON *schema = cJSON_Parse(SCHEMAS[si]);
        char err[512];
        /* the server's composition: leading whitespace, then the schema */
        api_request q = {.kind = API_CHAT, .json_mode = API_JSON_SCHEMA, .json_schema = schema};
        grammar *g = constrain_grammar(&q, TC_NONE, err, sizeof err);
        CHECK_MSG(g != NULL, "%s", err);
        if (!g) continue;
        for (int pi = 0; pi < N_PROMPTS; pi++) {
            int n = encode(&b, PROMPTS[pi], prompt, 256);
            for (int ci = 0; ci < 2; ci++) {
                /* the grammar alone, and with a frequency penalty (which
                   also keeps this model from filling every whitespace run) */
                lproc_cfg c = {.repetition = 1, .g = g, .think_open = -1, .think_close = -1};
                if (ci) c.frequency = 1.0f;
                for (int smode = 0; smode < 2; smode++) {
                    sampler_params sp = smode ? (sampler_params){.temperature = 0.8f, .top_p = 0.95f,
                                                                 .seed = 5 + (uint64_t)pi}
                                              : (sampler_params){.temperature = 0, .top_p = 1};
                    int nref = ref_generate(&b, &c, &sp, prompt, n, ref);
                    char what[160];
                    for (int which = 0; which < 4; which++) {
                        if (smode && which == 3) continue;
                        int k = which ? 3 + pi : 0;
                        int ng = run(&b, &c, &sp, which, k, prompt, n, got, NULL);
                        if (ng == -2) continue;
                        snprintf(what, sizeof what, "schema %d prompt %d penalty %d %s drafter %d", si, pi, ci,
                                 smode ? "sampled" : "greedy", which);
                        compare(what, got, ng, ref, nref, &fails);
                    }
                    answers++;
                    int ended = nref > 0 && (ref[nref - 1] == b.eos[0] || (b.n_eos > 1 && ref[nref - 1] == b.eos[1]));
                    if (getenv("DSPARK_TEST_VERBOSE")) {
                        char *t = tok_decode(b.tok, ref, nref, 1, NULL);
                        printf("     schema %d prompt %d penalty %d %s: %s\n", si, pi, ci, smode ? "sampled" : "greedy", t);
                        free(t);
                    }
                    if (!ended) continue;
                    complete++;
                    size_t len;
                    char *text = tok_decode(b.tok, ref, nref, 1, &len);
                    cJSON *v = cJSON_Parse(text);
                    CHECK_MSG(v && valid(v, schema), "schema %d: the answer %s does not validate", si, text);
                    cJSON_Delete(v);
                    free(text);
                }
            }
        }
        grammar_free(g);
        cJSON_Delete(schema);
    }
    printf("     %d of %d constrained answers complete within %d tokens\n", complete, answers, MAX_NEW);
    CHECK_MSG(complete >= answers / 2, "only %d of %d answers completed", complete, answers);
    CHECK_EQ_INT(fails, 0);
    close_bundled(&b);
}

/* the reasoning block stays free; the grammar starts after it */
TEST(logitproc_think_then_grammar) {
    bundled b;
    if (open_bundled(&b) != 0) return;
    char err[256];
    grammar *g = json_schema_grammar(NULL, err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    int open = -1, close = -1, brace = -1, word = -1, ids[8];
    if (encode(&b, "<think>", ids, 8) == 1) open = ids[0];
    if (encode(&b, "</think>", ids, 8) == 1) close = ids[0];
    if (encode(&b, "{", ids, 8) == 1) brace = ids[0];
    if (encode(&b, "hello", ids, 8) >= 1) word = ids[0];
    CHECK(open >= 0 && close >= 0 && brace >= 0 && word >= 0);
    float *w = xmalloc(sizeof(float) * (size_t)b.V);
    int prompt[1] = {brace};
    for (int start = 0; start <= 2; start++) {
        lproc_cfg c = {.repetition = 1, .g = g, .think_open = open, .think_close = close, .think_start = start};
        lproc *lp = lproc_new(&c, b.trie, b.V, prompt, 1);
        logit_proc li = lproc_iface(lp);
        if (start == 1) CHECK_EQ_INT(li.accept(li.self, open), 1); /* the model opens the block */
        if (start == 0) {
            CHECK_EQ_INT(li.accept(li.self, open), 0); /* no block: the grammar from the first token */
            CHECK_EQ_INT(li.accept(li.self, word), 0);
        } else {
            for (int i = 0; i < b.V; i++) w[i] = 0;
            CHECK_EQ_INT(li.mask(li.self, w), b.V); /* inside: everything is allowed */
            CHECK_EQ_INT(li.accept(li.self, word), 1);
            li.save(li.self);
            CHECK_EQ_INT(li.accept(li.self, close), 1);
            CHECK_EQ_INT(li.accept(li.self, word), 0); /* after it: JSON only */
            li.restore(li.self);                       /* back inside the block */
            CHECK_EQ_INT(li.accept(li.self, word), 1);
            CHECK_EQ_INT(li.accept(li.self, close), 1);
        }
        CHECK_EQ_INT(li.accept(li.self, brace), 1);
        for (int i = 0; i < b.V; i++) w[i] = 0;
        int allowed = li.mask(li.self, w);
        CHECK(allowed > 0 && allowed < b.V);
        CHECK(w[word] == -INFINITY);
        lproc_free(lp);
    }
    free(w);
    grammar_free(g);
    close_bundled(&b);
}

/* the server's grammars: what they take is what the format promises, and
   what they refuse is refused with the reason */
TEST(constrain_grammars) {
    char err[1024];
    const char *M = "[{\"role\":\"user\",\"content\":\"x\"}]";
    struct {
        const char *extra, *yes[3], *no[3];
    } cases[] = {
        {"\"response_format\":{\"type\":\"json_object\"}",
         {"{}", "\n  {\"a\": [1, {\"b\": null}]}", NULL},
         {"[]", "x{}", "{} x"}},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{\"type\":\"object\","
         "\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},\"required\":[\"n\"]}}}",
         {"{\"n\": 3}", " {\"n\":9}", NULL},
         {"{\"n\": 10}", "{}", "{\"n\": \"3\"}"}},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
         "\"properties\":{\"x\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"g\","
         "\"parameters\":{}}}],\"tool_choice\":\"required\"",
         {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"y\"}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", "
          "\"arguments\": {}}\n</tool_call>",
          NULL},
         {"", "<tool_call>\n{\"name\": \"h\", \"arguments\": {}}\n</tool_call>", "hello"}},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}},{\"type\":\"function\","
         "\"function\":{\"name\":\"g\",\"parameters\":{}}}],\"tool_choice\":{\"type\":\"function\",\"function\":"
         "{\"name\":\"g\"}}",
         {"<tool_call>\n{\"name\": \"g\", \"arguments\": {\"any\": [1]}}\n</tool_call>", NULL, NULL},
         {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", "
          "\"arguments\": {}}\n</tool_call>",
          NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[2048];
        snprintf(body, sizeof body, "{\"messages\":%s,%s}", M, cases[i].extra);
        cJSON *b = cJSON_Parse(body);
        api_request q;
        CHECK_MSG(api_parse(API_CHAT, b, &q, err, sizeof err) == 0, "case %zu: %s", i, err);
        CHECK(constrain_wanted(&q));
        grammar *g = constrain_grammar(&q, TC_HERMES, err, sizeof err);
        CHECK_MSG(g != NULL, "case %zu: %s", i, err);
        for (int k = 0; g && k < 3; k++) {
            if (cases[i].yes[k]) {
                CHECK_MSG(grammar_matches(g, cases[i].yes[k], strlen(cases[i].yes[k])) == 1, "case %zu: %s refused", i,
                          cases[i].yes[k]);
                if (q.tools) { /* read back by the server's own parser */
                    tc_result r;
                    tc_parse(TC_HERMES, cases[i].yes[k], strlen(cases[i].yes[k]), q.tools, &r);
                    CHECK_MSG(r.n >= 1, "case %zu: no call parsed from %s", i, cases[i].yes[k]);
                    tc_result_free(&r);
                }
            }
            if (cases[i].no[k])
                CHECK_MSG(grammar_matches(g, cases[i].no[k], strlen(cases[i].no[k])) == 0, "case %zu: %s taken", i,
                          cases[i].no[k]);
        }
        /* formats dspark does not write are refused, naming the reason */
        if (q.tools) {
            grammar *x = constrain_grammar(&q, TC_MISTRAL, err, sizeof err);
            CHECK(x == NULL && strstr(err, "special token"));
            x = constrain_grammar(&q, TC_NONE, err, sizeof err);
            CHECK(x == NULL && strstr(err, "no tool-call format"));
        }
        grammar_free(g);
        api_request_free(&q);
        cJSON_Delete(b);
    }
    /* a JSON format and a required tool call together: refused */
    cJSON *b = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                           "\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\","
                           "\"response_format\":{\"type\":\"json_object\"}}");
    api_request q;
    CHECK_EQ_INT(api_parse(API_CHAT, b, &q, err, sizeof err), 0);
    CHECK(constrain_grammar(&q, TC_HERMES, err, sizeof err) == NULL && strstr(err, "give one"));
    api_request_free(&q);
    cJSON_Delete(b);
}

/* DSpark's sampled drafts are judged by min(1, D(d) / q(d)) against the
   processed distribution D: over many seeds the tokens at the drafted
   positions are distributed as plain decoding's. Each frequent token's rate
   must agree within 4.5 standard errors. (Penalties and a bias: under a
   JSON grammar this model's code drafts are all refused.) */
TEST(logitproc_sampled_drafts_distribution) {
    bundled b;
    if (open_bundled(&b) != 0) return;
    if (!b.dspark) {
        close_bundled(&b);
        return;
    }
    int ids[4];
    CHECK_EQ_INT(encode(&b, "(", ids, 4), 1);
    int bias_id[1] = {ids[0]};
    float bias[1] = {1.5f};
    lproc_cfg c = {.frequency = 0.7f, .repetition = 1.3f, .rep_window = -1, .n_bias = 1, .bias_id = bias_id,
                   .bias = bias};
    int prompt[256], n = encode(&b, PROMPTS[0], prompt, 256), out[8];
    enum { N = 1000, POS = 4 };
    int *hist[2];
    for (int m = 0; m < 2; m++) hist[m] = xcalloc((size_t)POS * (size_t)b.V, sizeof(int));
    max_new = POS;
    long acc = 0;
    for (int i = 0; i < N; i++)
        for (int m = 0; m < 2; m++) {
            sampler_params sp = {.temperature = 1.0f, .top_p = 1, .seed = 1000 + (uint64_t)i};
            long a = 0;
            int ng = run(&b, &c, &sp, m ? 3 : 0, m ? 3 : 0, prompt, n, out, &a);
            acc += a;
            for (int p = 0; p < ng && p < POS; p++) hist[m][(size_t)p * b.V + out[p]]++;
        }
    CHECK_MSG(acc > N / 4, "DSpark accepted %ld drafts in %d runs: the rule was hardly exercised", acc, N);
    int checked = 0;
    double zmax = 0;
    for (int p = 1; p < POS; p++)
        for (int t = 0; t < b.V; t++) {
            double fa = (double)hist[0][(size_t)p * b.V + t] / N, fb = (double)hist[1][(size_t)p * b.V + t] / N;
            double pm = (fa + fb) / 2;
            if (pm < 0.03) continue;
            checked++;
            double se = sqrt(2 * pm * (1 - pm) / N);
            if (fabs(fa - fb) / se > zmax) zmax = fabs(fa - fb) / se;
            CHECK_MSG(fabs(fa - fb) <= 4.5 * se + 1e-9, "position %d token %d: plain %.3f, DSpark %.3f", p, t, fa, fb);
        }
    CHECK(checked >= 3);
    printf("     %ld drafts accepted in %d runs; %d token rates compared, largest difference %.2f standard errors\n",
           acc, N, checked, zmax);
    for (int m = 0; m < 2; m++) free(hist[m]);
    close_bundled(&b);
}
