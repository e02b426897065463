/* GGUF tokenizer tests: the tokenizer and chat template rebuilt from a
 * vocab-only GGUF (tests/data/tok/NAME.gguf.xz, written from the real
 * Qwen3 and Llama-3 tokenizer files by tools/gen_gguf_vocab.py) equal the
 * ones loaded from tokenizer.json / tokenizer_config.json: ids for every
 * corpus line and for the corpus as one text, with and without specials,
 * decodes, every token's bytes and special flag, BOS/EOS, the template.
 * Then tiny in-memory GGUFs: a byte-level one through the JSON texts
 * (tok_load_buf), a SentencePiece-style one whose merges are rebuilt from
 * scores (against the tokenizer.json HF would write for it), and malformed
 * metadata, each a clear error. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/gguf.h"
#include "base/gguf_write.h"
#include "base/util.h"
#include "cli/cli_quantize.h"
#include "test.h"
#include "text/chat_template.h"
#include "text/tok_gguf.h"
#include "text/tokenizer.h"

/* tests/data/tok/NAME.gguf.xz decompressed under the test's scratch dir
 * (once per process); NULL with a failure recorded when that fails. */
static const char *fixture(const char *name) {
    static char paths[2][512];
    static const char *names[2] = {"qwen3", "llama3"};
    for (int i = 0; i < 2; i++) {
        if (strcmp(name, names[i]) != 0) continue;
        if (!paths[i][0]) {
            char cmd[1500];
            snprintf(paths[i], sizeof paths[i], "%s/%s.gguf", test_tmp_dir(), name);
            snprintf(cmd, sizeof cmd, "xz -dc '%s/tok/%s.gguf.xz' > '%s'", test_data_dir(), name, paths[i]);
            if (system(cmd) != 0) {
                test_fail(__FILE__, __LINE__, "cannot decompress %s.gguf.xz (is xz installed?)", name);
                paths[i][0] = 0;
                return NULL;
            }
        }
        return paths[i];
    }
    return NULL;
}

static int same_ids(const int *a, int na, const int *b, int nb) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a));
}

/* Where a GGUF cannot say what the HF files say, by how the converter
 * writes it:
 *   - it marks CONTROL every added token that looks special to it
 *     ("<|...|>", Gemma's <unusedN> and <mask>, ...), so Qwen3's
 *     non-special <|fim_prefix|>.. come back special (same ids; only
 *     skip_special decodes differ, and only over those tokens);
 *   - it records add_bos_token only from tokenizer_config.json or a
 *     TemplateProcessing post-processor; this Llama-3 file has neither (its
 *     post-processor is ByteLevel alone), so the GGUF gets llama.cpp's
 *     default for "llama-bpe", BOS added, as the official Meta file does. */
typedef struct {
    const uint8_t *flag_differs; /* by id: special in one, not the other */
    int extra_bos;               /* the GGUF's add_special ids are BOS + the JSON's */
} known_diffs;

static int any_flagged(const known_diffs *k, const int *ids, int n) {
    for (int i = 0; i < n; i++)
        if (k->flag_differs[ids[i]]) return 1;
    return 0;
}

/* One text through both tokenizers: ids (both add_special settings) and
 * both decodes equal, but for the known differences. 1 when equal. */
static int same_text(const tokenizer *j, const tokenizer *g, const known_diffs *k, const char *s, size_t n) {
    int ok = 1;
    char err[256];
    for (int add = 0; add < 2 && ok; add++) {
        int *a = NULL, *b = NULL;
        int na = tok_encode(j, s, n, add, &a, err, sizeof err);
        int nb = tok_encode(g, s, n, add, &b, err, sizeof err);
        if (add && k->extra_bos)
            ok = na >= 0 && nb == na + 1 && b[0] == tok_bos_id(g) && same_ids(a, na, b + 1, nb - 1);
        else
            ok = na >= 0 && same_ids(a, na, b, nb);
        for (int skip = 0; skip < 2 && ok && na >= 0; skip++) {
            if (skip && any_flagged(k, a, na)) continue;
            size_t la, lb;
            char *da = tok_decode(j, a, na, skip, &la), *db = tok_decode(g, a, na, skip, &lb);
            ok = la == lb && !memcmp(da, db, la);
            free(da);
            free(db);
        }
        free(a);
        free(b);
    }
    return ok;
}

/* The converter's does_token_look_special (the added tokens it makes
   CONTROL whatever the file says). */
static int looks_special(const char *a, size_t la) {
    static const char *const WHOLE[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof WHOLE / sizeof *WHOLE; i++)
        if (la == strlen(WHOLE[i]) && !memcmp(a, WHOLE[i], la)) return 1;
    if (la > 4 && !memcmp(a, "<|", 2) && !memcmp(a + la - 2, "|>", 2)) return 1;
    return la > 7 && !memcmp(a, "<unused", 7) && a[la - 1] == '>';
}

/* The tokenizer in the HF files of jdir and the one rebuilt from the GGUF
   at gpath agree on every token and on the corpus (name labels failures). */
static void check_same_tokenizer_at(const char *name, const char *jdir, const char *gpath, int extra_bos) {
    char err[512];
    tokenizer *j = NULL, *g = NULL;
    uint8_t *flag = NULL;
    CHECK_MSG(tok_load(&j, jdir, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(tok_load(&g, gpath, err, sizeof err) == 0, "%s", err);
    if (!j || !g) goto done;
    CHECK_EQ_INT(tok_vocab_size(g), tok_vocab_size(j));
    CHECK_EQ_INT(tok_bos_id(g), tok_bos_id(j));
    CHECK_EQ_INT(tok_eos_id(g), tok_eos_id(j));
    int bad_tok = 0, nv = tok_vocab_size(j), nflag = 0;
    flag = xcalloc((size_t)nv + 1, 1);
    known_diffs kd = {flag, extra_bos};
    for (int id = 0; id < nv; id++) {
        size_t la = 0, lb = 0;
        const char *a = tok_token_bytes(j, id, &la), *b = tok_token_bytes(g, id, &lb);
        if (!a != !b || (a && (la != lb || memcmp(a, b, la))))
            if (bad_tok++ < 5) test_fail(__FILE__, __LINE__, "%s: token %d's bytes differ", name, id);
        if (tok_is_special(j, id) != tok_is_special(g, id)) {
            /* only the converter's rule may differ, one way */
            CHECK_MSG(a && looks_special(a, la) && tok_is_special(g, id), "%s: token %d's special flag differs", name,
                      id);
            flag[id] = 1;
            nflag++;
        }
    }
    /* the corpus, line by line and whole */
    char cpath[600];
    snprintf(cpath, sizeof cpath, "%s/tok/corpus.txt", test_data_dir());
    size_t len;
    char *text = ds_read_file(cpath, &len, err, sizeof err);
    CHECK_MSG(text != NULL, "%s", err);
    if (!text) goto done;
    int lines = 0, bad = 0;
    for (size_t s = 0, i = 0; i < len; i++) {
        if (text[i] != '\n') continue;
        if (!same_text(j, g, &kd, text + s, i - s) && bad++ < 5)
            test_fail(__FILE__, __LINE__, "%s: corpus line %d differs: \"%.*s\"", name, lines, (int)(i - s), text + s);
        lines++;
        s = i + 1;
    }
    CHECK(lines > 1000);
    CHECK_MSG(same_text(j, g, &kd, text, len), "%s: the whole corpus differs", name);
    const char *specials = "<|im_start|>user\nHi<think>x</think><|im_end|><|begin_of_text|><|eot_id|> x";
    CHECK(same_text(j, g, &kd, specials, strlen(specials)));
    /* Qwen3: the 12 FIM/repo tokens; Llama-3: none; Gemma 3: <mask> and
       its 6242 <unusedN> */
    CHECK(nflag <= 6300);
    free(text);
done:
    free(flag);
    tok_free(j);
    tok_free(g);
}

static void check_same_tokenizer(const char *name, int extra_bos) {
    const char *dir = test_tokenizer_dir(), *gpath = fixture(name);
    if (!dir || !gpath) {
        test_fail(__FILE__, __LINE__, "%s: fixtures unavailable (run scripts/fetch-test-assets)", name);
        return;
    }
    char jdir[600];
    snprintf(jdir, sizeof jdir, "%s/%s", dir, name);
    check_same_tokenizer_at(name, jdir, gpath, extra_bos);
}

TEST(tok_gguf_qwen3_equals_json) { check_same_tokenizer("qwen3", 0); }
TEST(tok_gguf_llama3_equals_json) { check_same_tokenizer("llama3", 1); }

/* The tokenizer `dspark quantize` writes into a GGUF (cli_quantize_vocab.c)
   from a SentencePiece-style tokenizer.json: a "llama" vocabulary whose
   scores order the merges. Read back, it is the tokenizer of the HF files:
   Gemma 3's (no prefix space; the merges of each piece split from the
   longest left part) and Llama 2's (a prefix space; the splits by their
   parts' ids), the real ones of the test assets. vocab: the model's size
   (Gemma 3's config says 262208, 63 ids past its tokenizer's). */
static void check_written_tokenizer(const char *name, int vocab, int extra_bos) {
    const char *dir = test_tokenizer_dir();
    if (!dir) {
        test_fail(__FILE__, __LINE__, "%s: fixtures unavailable (run scripts/fetch-test-assets)", name);
        return;
    }
    char jdir[600], gpath[700], err[512];
    snprintf(jdir, sizeof jdir, "%s/%s", dir, name);
    snprintf(gpath, sizeof gpath, "%s/written-%s.gguf", test_tmp_dir(), name);
    model_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = vocab;
    c.bos_token_id = -1;
    gguf_writer *w = gguf_w_new();
    int rc = quantize_add_tokenizer(w, jdir, &c, NULL, err, sizeof err);
    if (!rc) rc = gguf_w_begin(w, gpath, err, sizeof err);
    if (!rc) rc = gguf_w_finish(w, err, sizeof err);
    gguf_w_free(w);
    CHECK_MSG(rc == 0, "%s: %s", name, err);
    if (rc) return;
    gguf *g;
    if (gguf_open(&g, gpath, 0, err, sizeof err) == 0) {
        gguf_str s;
        CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) == 0 && !strcmp(s.s, "llama"));
        const gguf_kv *tk = gguf_find(g, "tokenizer.ggml.tokens"), *sc = gguf_find(g, "tokenizer.ggml.scores");
        CHECK(tk && tk->n == (uint64_t)vocab && sc && sc->n == (uint64_t)vocab);
        gguf_close(g);
    } else {
        CHECK_MSG(0, "%s", err);
    }
    check_same_tokenizer_at(name, jdir, gpath, extra_bos);
}

TEST(tok_gguf_written_gemma3_equals_json) { check_written_tokenizer("gemma3", 262208, 0); }
TEST(tok_gguf_written_llama2_equals_json) { check_written_tokenizer("llama2", 32000, 0); }

static void check_same_template(const char *name) {
    const char *dir = test_tokenizer_dir(), *gpath = fixture(name);
    if (!dir || !gpath) return;
    char jdir[600], err[512];
    snprintf(jdir, sizeof jdir, "%s/%s", dir, name);
    chat_template *a = NULL, *b = NULL;
    CHECK_MSG(chat_template_load(&a, jdir, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(chat_template_load(&b, gpath, err, sizeof err) == 0, "%s", err);
    if (a && b) {
        CHECK(!strcmp(chat_template_source(a), chat_template_source(b)));
        CHECK(!strcmp(chat_template_bos(a), chat_template_bos(b)));
        CHECK(!strcmp(chat_template_eos(a), chat_template_eos(b)));
        cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                  "{\"role\":\"user\",\"content\":\"Hi there\"},"
                                  "{\"role\":\"assistant\",\"content\":\"Hello!\"},"
                                  "{\"role\":\"user\",\"content\":\"Weather?\"}]");
        char *ra = NULL, *rb = NULL;
        CHECK_MSG(chat_template_render(a, msgs, NULL, 1, NULL, &ra, NULL, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(chat_template_render(b, msgs, NULL, 1, NULL, &rb, NULL, err, sizeof err) == 0, "%s", err);
        CHECK(ra && rb && !strcmp(ra, rb) && strstr(ra, "Weather?"));
        free(ra);
        free(rb);
        cJSON_Delete(msgs);
    }
    chat_template_free(a);
    chat_template_free(b);
}

TEST(tok_gguf_chat_template_qwen3) { check_same_template("qwen3"); }
TEST(tok_gguf_chat_template_llama3) { check_same_template("llama3"); }

/* ---------------------------------------------------------------- */
/* A tiny GGUF writer for malformed metadata                           */

typedef struct {
    unsigned char *p;
    size_t n, cap;
    int nkv;
} wbuf;

static void put(wbuf *w, const void *d, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->p = xrealloc(w->p, w->cap);
    }
    memcpy(w->p + w->n, d, n);
    w->n += n;
}
static void put_u32(wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wbuf *w, uint64_t v) { put(w, &v, 8); }
static void put_s(wbuf *w, const char *s) {
    put_u64(w, strlen(s));
    put(w, s, strlen(s));
}
static void kv_str(wbuf *w, const char *k, const char *v) {
    put_s(w, k);
    put_u32(w, GGUF_STRING);
    put_s(w, v);
    w->nkv++;
}
static void kv_u32(wbuf *w, const char *k, uint32_t v) {
    put_s(w, k);
    put_u32(w, GGUF_U32);
    put_u32(w, v);
    w->nkv++;
}
static void kv_bool(wbuf *w, const char *k, int v) {
    put_s(w, k);
    put_u32(w, GGUF_BOOL);
    unsigned char b = (unsigned char)v;
    put(w, &b, 1);
    w->nkv++;
}
static void kv_strs(wbuf *w, const char *k, const char *const *v, int n) {
    put_s(w, k);
    put_u32(w, GGUF_ARRAY);
    put_u32(w, GGUF_STRING);
    put_u64(w, (uint64_t)n);
    for (int i = 0; i < n; i++) put_s(w, v[i]);
    w->nkv++;
}
static void kv_i32s(wbuf *w, const char *k, const int32_t *v, int n) {
    put_s(w, k);
    put_u32(w, GGUF_ARRAY);
    put_u32(w, GGUF_I32);
    put_u64(w, (uint64_t)n);
    put(w, v, (size_t)n * 4);
    w->nkv++;
}

/* The image: header + the kvs written into body. */
static unsigned char *image(const wbuf *body, size_t *n) {
    wbuf w = {0};
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, 0);
    put_u64(&w, (uint64_t)body->nkv);
    put(&w, body->p, body->n);
    while (w.n % 32) put(&w, "", 1);
    *n = w.n;
    return w.p;
}

/* A byte-level vocabulary: "a", "b", "ab", "Ġ", "Ġab", <|end|> (control),
 * <x> (user-defined), [PAD7] (unused). */
enum { F_NO_TOKENS = 1, F_TYPES_SHORT = 2, F_BAD_MERGE = 4, F_NO_MERGES = 8, F_DEFAULT_BOS = 16 };
static const char *TOKS[] = {"a", "b", "ab", "\xc4\xa0", "\xc4\xa0" "ab", "<|end|>", "<x>", "[PAD7]"};
static const int32_t TYPES[] = {1, 1, 1, 1, 1, 3, 4, 5};

static unsigned char *tiny(const char *model, const char *pre, int flags, size_t *n) {
    wbuf b = {0};
    kv_str(&b, "general.architecture", "qwen3");
    if (model) kv_str(&b, "tokenizer.ggml.model", model);
    if (pre) kv_str(&b, "tokenizer.ggml.pre", pre);
    if (!(flags & F_NO_TOKENS)) kv_strs(&b, "tokenizer.ggml.tokens", TOKS, 8);
    kv_i32s(&b, "tokenizer.ggml.token_type", TYPES, flags & F_TYPES_SHORT ? 7 : 8);
    const char *merges[] = {"a b", flags & F_BAD_MERGE ? "\xc4\xa0" "ab" : "\xc4\xa0 ab"};
    if (!(flags & F_NO_MERGES)) kv_strs(&b, "tokenizer.ggml.merges", merges, 2);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", 5);
    if (!(flags & F_DEFAULT_BOS)) kv_bool(&b, "tokenizer.ggml.add_bos_token", 0);
    kv_str(&b, "tokenizer.chat_template", "{{ messages[0]['content'] }}{{ eos_token }}");
    unsigned char *img = image(&b, n);
    free(b.p);
    return img;
}

/* Builds the JSON texts from an image and loads them through the text
 * loader (tok_load_buf); returns 0 or -1 with err. */
static int load_tiny(const unsigned char *img, size_t n, tokenizer **t, char *err, size_t errlen) {
    gguf *g;
    *t = NULL;
    if (gguf_open_mem(&g, img, n, "tiny.gguf", err, errlen)) return -1;
    cJSON *tj, *cj;
    int rc = tok_gguf_json(g, "tiny.gguf", &tj, &cj, err, errlen);
    gguf_close(g);
    if (rc) return -1;
    char *ts = cJSON_PrintUnformatted(tj), *cs = cJSON_PrintUnformatted(cj);
    rc = tok_load_buf(t, ts, strlen(ts), cs, strlen(cs), err, errlen);
    free(ts);
    free(cs);
    cJSON_Delete(tj);
    cJSON_Delete(cj);
    return rc;
}

TEST(tok_gguf_tiny_loads) {
    size_t n;
    unsigned char *img = tiny("gpt2", "qwen2", 0, &n);
    tokenizer *t;
    char err[512];
    CHECK_MSG(load_tiny(img, n, &t, err, sizeof err) == 0, "%s", err);
    if (t) {
        int *ids;
        int k = tok_encode(t, "ab ab<|end|><x>", 15, 1, &ids, err, sizeof err);
        int want[] = {2, 4, 5, 6};
        CHECK_MSG(same_ids(ids, k, want, 4), "got %d ids", k);
        free(ids);
        CHECK_EQ_INT(tok_vocab_size(t), 7); /* the UNUSED [PAD7] is left out */
        CHECK_EQ_INT(tok_token_id(t, "[PAD7]"), -1);
        CHECK(tok_is_special(t, 5) && !tok_is_special(t, 6));
        CHECK_EQ_INT(tok_eos_id(t), 5);
        CHECK_EQ_INT(tok_bos_id(t), -1);
        tok_free(t);
    }
    free(img);
}

static void expect_error(const char *model, const char *pre, int flags, const char *want) {
    size_t n;
    unsigned char *img = tiny(model, pre, flags, &n);
    tokenizer *t;
    char err[512] = "";
    CHECK_MSG(load_tiny(img, n, &t, err, sizeof err) != 0, "expected an error with \"%s\"", want);
    CHECK_MSG(strstr(err, want) && strstr(err, "tiny.gguf"), "error \"%s\" lacks \"%s\"", err, want);
    tok_free(t);
    free(img);
}

TEST(tok_gguf_errors) {
    expect_error("gpt2", "qwen2", F_NO_TOKENS, "no tokenizer.ggml.tokens");
    expect_error(NULL, "qwen2", 0, "no tokenizer.ggml.model");
    expect_error("bert", "qwen2", 0, "unsupported tokenizer.ggml.model \"bert\"");
    expect_error("gpt2", "mystery-pre", 0, "unsupported tokenizer.ggml.pre \"mystery-pre\"");
    expect_error("gpt2", NULL, 0, "no tokenizer.ggml.pre");
    expect_error("gpt2", "qwen2", F_BAD_MERGE, "tokenizer.ggml.merges[1]");
    expect_error("gpt2", "qwen2", F_NO_MERGES, "no tokenizer.ggml.merges");
    expect_error("gpt2", "qwen2", F_TYPES_SHORT, "token_type has 7 entries for 8 tokens");
    /* BOS to be added (llama-bpe's default) without a BOS id */
    expect_error("gpt2", "llama-bpe", F_DEFAULT_BOS, "bos_token_id is absent");
}

/* A .gguf path for tok_load and chat_template_load: the file decides. */
TEST(tok_gguf_file_entry_points) {
    size_t n;
    unsigned char *img = tiny("gpt2", "qwen2", 0, &n);
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/tiny.gguf", test_tmp_dir());
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(img, 1, n, f) == n);
    if (f) fclose(f);
    free(img);
    tokenizer *t;
    CHECK_MSG(tok_load(&t, path, err, sizeof err) == 0, "%s", err);
    tok_free(t);
    chat_template *ct;
    CHECK_MSG(chat_template_load(&ct, path, err, sizeof err) == 0, "%s", err);
    if (ct) {
        cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hey\"}]");
        char *out = NULL;
        CHECK(chat_template_render(ct, msgs, NULL, 0, NULL, &out, NULL, err, sizeof err) == 0);
        CHECK(out && !strcmp(out, "hey<|end|>"));
        free(out);
        cJSON_Delete(msgs);
        chat_template_free(ct);
    }
    /* a broken file is an error naming it, from both */
    snprintf(path, sizeof path, "%s/broken.gguf", test_tmp_dir());
    f = fopen(path, "wb");
    if (f) {
        fputs("GGUF nonsense", f);
        fclose(f);
    }
    CHECK(tok_load(&t, path, err, sizeof err) != 0 && strstr(err, "broken.gguf"));
    CHECK(chat_template_load(&ct, path, err, sizeof err) != 0 && strstr(err, "broken.gguf"));
}

/* ---------------------------------------------------------------- */
/* SentencePiece-style ("llama") vocabularies                          */

static void kv_f32s(wbuf *w, const char *k, const float *v, int n) {
    put_s(w, k);
    put_u32(w, GGUF_ARRAY);
    put_u32(w, GGUF_F32);
    put_u64(w, (uint64_t)n);
    put(w, v, (size_t)n * 4);
    w->nkv++;
}

#define SP "\xe2\x96\x81"
static const char *SPM_TOKS[] = {"<unk>", "<s>", "</s>", "<0x41>", SP, "a", "b", "ab", SP "a", SP "ab", "ba"};
static const int32_t SPM_TYPES[] = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1};
static const float SPM_SCORES[] = {0, 0, 0, 0, -1, -2, -3, -4, -5, -6, -3.5f};

/* The tokenizer.json HF's converter makes of that vocabulary: merges
 * ranked by the merged piece's score (ba, ab, _a, then _ab's two splits
 * ordered by their parts' ids). */
static const char *SPM_JSON =
    "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x41>\":3,\"" SP "\":4,\"a\":5,\"b\":6,\"ab\":7,\"" SP "a\":8,"
    "\"" SP "ab\":9,\"ba\":10},"
    "\"merges\":[\"b a\",\"a b\",\"" SP " a\",\"" SP " ab\",\"" SP "a b\"]},"
    "\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" SP "\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
    "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP "\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
    "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}";

static unsigned char *tiny_spm(int nscores, size_t *n) {
    wbuf b = {0};
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", SPM_TOKS, 11);
    kv_i32s(&b, "tokenizer.ggml.token_type", SPM_TYPES, 11);
    if (nscores) kv_f32s(&b, "tokenizer.ggml.scores", SPM_SCORES, nscores);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    kv_u32(&b, "tokenizer.ggml.unknown_token_id", 0);
    unsigned char *img = image(&b, n);
    free(b.p);
    return img;
}

TEST(tok_gguf_spm_merges_from_scores) {
    size_t n;
    unsigned char *img = tiny_spm(11, &n);
    tokenizer *g = NULL, *j = NULL;
    char err[512];
    CHECK_MSG(load_tiny(img, n, &g, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(tok_load_buf(&j, SPM_JSON, strlen(SPM_JSON), NULL, 0, err, sizeof err) == 0, "%s", err);
    free(img);
    if (g && j) {
        int *ids;
        int k = tok_encode(g, "aba", 3, 1, &ids, err, sizeof err);
        int want[] = {1, 8, 10};
        CHECK_MSG(same_ids(ids, k, want, 3), "got %d ids", k);
        free(ids);
        k = tok_encode(g, "A", 1, 0, &ids, err, sizeof err); /* byte fallback */
        int want2[] = {4, 3};
        CHECK_MSG(same_ids(ids, k, want2, 2), "got %d ids", k);
        free(ids);
        const char *texts[] = {"ab ab", "aba", "bab A", "A", "", "abab ba", "  a  b ", "<s>ab</s>", "x\xc3\xa9"};
        uint8_t none[16] = {0};
        known_diffs kd = {none, 0};
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
            CHECK_MSG(same_text(j, g, &kd, texts[i], strlen(texts[i])), "\"%s\" differs", texts[i]);
        CHECK_EQ_INT(tok_bos_id(g), 1);
        CHECK_EQ_INT(tok_eos_id(g), 2);
    }
    tok_free(g);
    tok_free(j);
    /* the scores are what the merges come from */
    img = tiny_spm(0, &n);
    CHECK(load_tiny(img, n, &g, err, sizeof err) != 0 && strstr(err, "no tokenizer.ggml.scores"));
    free(img);
    img = tiny_spm(10, &n);
    CHECK(load_tiny(img, n, &g, err, sizeof err) != 0 && strstr(err, "scores has 10 entries for 11 tokens"));
    free(img);
}
