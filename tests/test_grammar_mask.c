/* Tests for token masks (text/grammar_mask.h) on the real Qwen3 tokenizer
 * (151,669 ids): at a sample of states along JSON documents, the mask equals
 * a brute-force check of every token (gm_accept_token on a copy), the
 * document's own next token is allowed, end-of-sequence ids exactly at a
 * complete match, special tokens never; speculative verification over a
 * copy rolls back; and the time per mask is printed (the figure quoted in
 * grammar_mask.h and docs/ARCHITECTURE.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "test.h"
#include "text/grammar_mask.h"
#include "text/json_schema.h"

static tokenizer *qwen3(void) {
    static tokenizer *t;
    static int tried;
    if (!tried) {
        tried = 1;
        const char *dir = test_tokenizer_dir();
        if (dir) {
            char path[4200], err[512];
            snprintf(path, sizeof path, "%s/qwen3", dir);
            if (tok_load(&t, path, err, sizeof err)) {
                test_fail(__FILE__, __LINE__, "loading %s: %s", path, err);
                t = NULL;
            }
        }
    }
    if (!t) test_fail(__FILE__, __LINE__, "the real Qwen3 tokenizer is not available (run scripts/fetch-test-assets)");
    return t;
}

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]}},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"when\":{\"type\":\"string\",\"format\":\"date\"}},"
    "\"required\":[\"name\",\"age\",\"ok\"],\"additionalProperties\":false}";

static const char DOC[] = "{\"name\": \"Zo\xc3\xab \\\"Q\\\" \xe4\xb8\xad\", \"age\": 42, \"tags\": [\"red\", \"blue\"], "
                          "\"ok\": true, \"when\": \"2024-05-06\"}";

/* the mask against accept_token on a copy for every id */
static void brute_check(const gtok_trie *tr, gm_masker *mk, const gm_state *s, gm_state *tmp, const tokenizer *t,
                        int eos, const char *where) {
    int V = gtok_trie_vocab(tr);
    uint64_t *mask = calloc(gtok_mask_words(V), sizeof(uint64_t));
    int count = gm_token_mask(mk, s, mask);
    int bad = 0, allowed = 0;
    for (int id = 0; id < V; id++) {
        gm_copy(tmp, s);
        int ok = gm_accept_token(tr, tmp, id) == 1;
        int bit = (int)((mask[id >> 6] >> (id & 63)) & 1);
        allowed += ok;
        if (ok != bit && bad++ < 5) {
            size_t len;
            const char *b = tok_token_bytes(t, id, &len);
            test_fail(__FILE__, __LINE__, "%s: token %d '%.*s': mask %d, accept %d", where, id, (int)len, b ? b : "", bit,
                      ok);
        }
        if (bit && id != eos && tok_is_special(t, id)) CHECK_MSG(0, "%s: special token %d allowed", where, id);
    }
    CHECK_EQ_INT(count, allowed);
    CHECK_MSG(((mask[eos >> 6] >> (eos & 63)) & 1) == (uint64_t)gm_is_complete(s), "%s: eos", where);
    free(mask);
}

/* SCHEMA's grammar (a failure recorded when it does not compile) */
static grammar *schema_grammar(void) {
    cJSON *sch = cJSON_Parse(SCHEMA);
    char err[300];
    grammar *g = json_schema_grammar(sch, err, sizeof err);
    cJSON_Delete(sch);
    CHECK_MSG(g != NULL, "%s", err);
    return g;
}

TEST(grammar_mask_brute_force_qwen3) {
    tokenizer *t = qwen3();
    if (!t) return;
    grammar *g = schema_grammar();
    if (!g) return;
    char err[300];
    int eos = tok_token_id(t, "<|im_end|>");
    CHECK(eos >= 0);
    gtok_trie *tr = gtok_trie_new(t, &eos, 1);
    gm_masker *mk = gm_masker_new(tr);
    int *ids = NULL;
    int n = tok_encode(t, DOC, strlen(DOC), 0, &ids, err, sizeof err);
    CHECK_MSG(n > 10, "%s", err);
    gm_state *s = gm_new(g), *tmp = gm_clone(s);
    int V = gtok_trie_vocab(tr);
    uint64_t *mask = calloc(gtok_mask_words(V), sizeof(uint64_t));
    for (int i = 0; i <= n; i++) {
        /* the brute force at every third boundary (it is 151k accepts) */
        if (i % 3 == 0 || i == n) {
            char where[64];
            snprintf(where, sizeof where, "after %d tokens", i);
            brute_check(tr, mk, s, tmp, t, eos, where);
        }
        if (i == n) break;
        gm_token_mask(mk, s, mask);
        CHECK_MSG((mask[ids[i] >> 6] >> (ids[i] & 63)) & 1, "the document's token %d (#%d) is masked out", ids[i], i);
        CHECK_EQ_INT(gm_accept_token(tr, s, ids[i]), 1);
    }
    CHECK(gm_is_complete(s));
    CHECK_EQ_INT(gm_accept_token(tr, s, eos), 1);
    /* speculative verification: a draft with a wrong token, then rollback */
    gm_state *start = gm_new(g), *spec = gm_clone(start);
    int *d = NULL;
    const char *draft = "{\"name\": 7";
    int nd = tok_encode(t, draft, strlen(draft), 0, &d, err, sizeof err);
    int accepted = 0;
    for (int k = 0; k < nd && gm_accept_token(tr, spec, d[k]) == 1; k++) accepted++;
    CHECK(accepted > 0 && accepted < nd); /* `7` is not a string */
    gm_copy(spec, start);
    CHECK_EQ_INT(gm_accept_token(tr, spec, ids[0]), 1);
    CHECK_EQ_INT(gm_accept_token(tr, spec, eos), 0);
    free(d);
    gm_free(spec);
    gm_free(start);
    free(mask);
    free(ids);
    gm_free(tmp);
    gm_free(s);
    gm_masker_free(mk);
    gtok_trie_free(tr);
    grammar_free(g);
}

/* the time per mask at a few positions of a schema's document */
TEST(grammar_mask_timing_qwen3) {
    tokenizer *t = qwen3();
    if (!t) return;
    grammar *g = schema_grammar();
    if (!g) return;
    int eos = tok_token_id(t, "<|im_end|>");
    double t0 = ds_now();
    gtok_trie *tr = gtok_trie_new(t, &eos, 1);
    double tbuild = ds_now() - t0;
    gm_masker *mk = gm_masker_new(tr);
    uint64_t *mask = calloc(gtok_mask_words(gtok_trie_vocab(tr)), sizeof(uint64_t));
    static const struct {
        const char *label, *prefix;
    } pos[] = {
        {"start", ""},
        {"after {", "{"},
        {"in a key", "{\"na"},
        {"in a string", "{\"name\": \"Zo"},
        {"in an integer", "{\"name\": \"x\", \"age\": 4"},
        {"in an enum", "{\"name\": \"x\", \"age\": 4, \"tags\": [\"gr"},
        {"in a date", "{\"name\": \"x\", \"age\": 4, \"ok\": true, \"when\": \"2024-0"},
    };
    printf("     mask timing (Qwen3, %d ids, trie %zu nodes built in %.0f ms):\n", gtok_trie_vocab(tr),
           gtok_trie_nodes(tr), tbuild * 1e3);
    for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
        gm_state *s = gm_new(g);
        CHECK(gm_accept_bytes(s, pos[k].prefix, strlen(pos[k].prefix)) == 1);
        int reps = 20, count = 0;
        double a = ds_now();
        for (int r = 0; r < reps; r++) count = gm_token_mask(mk, s, mask);
        double per = (ds_now() - a) / reps;
        printf("       %-14s %8.3f ms  %6d allowed\n", pos[k].label, per * 1e3, count);
        CHECK(count > 0);
        gm_free(s);
    }
    free(mask);
    gm_masker_free(mk);
    gtok_trie_free(tr);
    grammar_free(g);
}
