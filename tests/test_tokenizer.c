/* Tokenizer tests: golden ids and decodes from the Hugging Face tokenizers
 * library on the real Qwen3, Llama-3, Gemma-3 and Llama-2 tokenizer.json
 * (tests/data/tok/, written by tools/gen_tokenizer_golden.py; the files come
 * from scripts/fetch-test-assets), add_special, streaming decode, malformed
 * files, and the less common pipeline options on small synthetic
 * byte-level and SentencePiece-style tokenizers. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/json.h"
#include "test.h"
#include "text/tokenizer.h"
#include "base/util.h"

/* ---------------------------------------------------------------- */
/* helpers                                                            */

#define N_REAL 4
enum { QWEN3, LLAMA3, GEMMA3, LLAMA2 };
static const char *real_names[N_REAL] = {"qwen3", "llama3", "gemma3", "llama2"};
static tokenizer *real_tok[N_REAL];
static int real_tried[N_REAL], real_atexit;

static void free_real(void) {
    for (int i = 0; i < N_REAL; i++) tok_free(real_tok[i]);
}

/* The real tokenizer (QWEN3, ...), loaded once per process; records a
 * failure when it cannot be had (run scripts/fetch-test-assets). */
static tokenizer *real(int which) {
    if (!real_tried[which]) {
        real_tried[which] = 1;
        if (!real_atexit) atexit(free_real);
        real_atexit = 1;
        const char *dir = test_tokenizer_dir();
        if (dir) {
            char path[4200], err[512];
            snprintf(path, sizeof path, "%s/%s", dir, real_names[which]);
            if (tok_load(&real_tok[which], path, err, sizeof err)) {
                test_fail(__FILE__, __LINE__, "loading %s: %s (run scripts/fetch-test-assets)", path, err);
                real_tok[which] = NULL;
            }
        }
    }
    if (!real_tok[which])
        test_fail(__FILE__, __LINE__, "real %s tokenizer not available (run scripts/fetch-test-assets)",
                  real_names[which]);
    return real_tok[which];
}

static int valid_utf8(const char *s, size_t n) {
    utf8proc_ssize_t i = 0;
    while ((size_t)i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - (size_t)i), &c);
        if (k <= 0) return 0;
        i += k;
    }
    return 1;
}

typedef struct {
    char **lines; /* corpus lines, no newline */
    size_t *lens;
    int n;
    char *text;
    size_t len;
} corpus;

static int load_corpus(corpus *c) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/tok/corpus.txt", test_data_dir());
    memset(c, 0, sizeof *c);
    c->text = ds_read_file(path, &c->len, err, sizeof err);
    if (!c->text) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    int cap = 0;
    size_t s = 0;
    for (size_t i = 0; i < c->len; i++) {
        if (c->text[i] != '\n') continue;
        if (c->n == cap) {
            cap = cap ? cap * 2 : 256;
            c->lines = xrealloc(c->lines, (size_t)cap * sizeof *c->lines);
            c->lens = xrealloc(c->lens, (size_t)cap * sizeof *c->lens);
        }
        c->lines[c->n] = c->text + s;
        c->lens[c->n] = i - s;
        c->n++;
        s = i + 1;
    }
    return 0;
}

static void free_corpus(corpus *c) {
    free(c->lines);
    free(c->lens);
    free(c->text);
}

typedef struct {
    int **ids; /* L lines */
    int *n;
    int nl;
    char **dec, **dec_skip; /* D and K lines by corpus line (NULL: as the text / as dec) */
    size_t *dec_n, *dec_skip_n;
    int *s_line, **s_ids, *s_n, ns, s_cap; /* S lines */
    int *w_ids, w_n;                         /* W line */
    char *x;                                 /* X line (NULL: the W text) */
    size_t x_n;
} golden;

#define W_LINES 150 /* tools/gen_tokenizer_golden.py */

static int parse_list(const char *p, int **out) {
    char err[256];
    if (*p == 0) {
        *out = NULL;
        return 0;
    }
    if (*p != ' ') return -1;
    return ds_parse_ids(p + 1, out, err, sizeof err);
}

static char *parse_hex(const char *p, size_t *n) {
    if (*p == ' ') p++;
    size_t len = strlen(p);
    if (len % 2) return NULL;
    char *out = xmalloc(len / 2 + 1);
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(p + 2 * i, "%2x", &v) != 1) {
            free(out);
            return NULL;
        }
        out[i] = (char)v;
    }
    out[len / 2] = 0;
    *n = len / 2;
    return out;
}

static int load_golden(golden *g, const char *name, int nlines) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/tok/%s.golden", test_data_dir(), name);
    memset(g, 0, sizeof *g);
    g->w_n = -1;
    size_t len;
    char *text = ds_read_file(path, &len, err, sizeof err);
    if (!text) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    g->dec = xcalloc((size_t)nlines, sizeof *g->dec);
    g->dec_skip = xcalloc((size_t)nlines, sizeof *g->dec_skip);
    g->dec_n = xcalloc((size_t)nlines, sizeof *g->dec_n);
    g->dec_skip_n = xcalloc((size_t)nlines, sizeof *g->dec_skip_n);
    int cap = 0, rc = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') continue;
        int *ids = NULL, k = -1;
        if (line[0] == 'L') {
            k = parse_list(line + 1, &ids);
            if (g->nl == cap) {
                cap = cap ? cap * 2 : 256;
                g->ids = xrealloc(g->ids, (size_t)cap * sizeof *g->ids);
                g->n = xrealloc(g->n, (size_t)cap * sizeof *g->n);
            }
            g->ids[g->nl] = ids;
            g->n[g->nl++] = k;
        } else if (line[0] == 'D' || line[0] == 'K') {
            char *end;
            long i = strtol(line + 2, &end, 10);
            size_t n = 0;
            char *d = parse_hex(end, &n);
            if (d && i >= 0 && i < nlines) {
                char **slot = line[0] == 'D' ? &g->dec[i] : &g->dec_skip[i];
                free(*slot);
                *slot = d;
                (line[0] == 'D' ? g->dec_n : g->dec_skip_n)[i] = n;
                k = 0;
            } else {
                free(d);
            }
        } else if (line[0] == 'S') {
            char *end;
            if (g->ns == g->s_cap) {
                g->s_cap = g->s_cap ? g->s_cap * 2 : 64;
                g->s_line = xrealloc(g->s_line, (size_t)g->s_cap * sizeof *g->s_line);
                g->s_ids = xrealloc(g->s_ids, (size_t)g->s_cap * sizeof *g->s_ids);
                g->s_n = xrealloc(g->s_n, (size_t)g->s_cap * sizeof *g->s_n);
            }
            long i = strtol(line + 2, &end, 10);
            k = parse_list(end, &ids);
            g->s_line[g->ns] = (int)i;
            g->s_ids[g->ns] = ids;
            g->s_n[g->ns++] = k;
        } else if (line[0] == 'W') {
            k = parse_list(line + 1, &ids);
            g->w_ids = ids;
            g->w_n = k;
        } else if (line[0] == 'X') {
            free(g->x);
            g->x = parse_hex(line + 1, &g->x_n);
            k = g->x ? 0 : -1;
        }
        if (k < 0) {
            test_fail(__FILE__, __LINE__, "%s: bad line \"%.40s\"", path, line);
            rc = -1;
        }
    }
    free(text);
    return rc;
}

static void free_golden(golden *g, int nlines) {
    for (int i = 0; i < g->nl; i++) free(g->ids[i]);
    for (int i = 0; i < g->ns; i++) free(g->s_ids[i]);
    for (int i = 0; i < nlines && g->dec; i++) {
        free(g->dec[i]);
        free(g->dec_skip[i]);
    }
    free(g->dec);
    free(g->dec_skip);
    free(g->dec_n);
    free(g->dec_skip_n);
    free(g->ids);
    free(g->n);
    free(g->s_line);
    free(g->s_ids);
    free(g->s_n);
    free(g->w_ids);
    free(g->x);
}

/* Compares ids; on mismatch reports where. Returns 1 when equal. */
static int same_ids(const char *what, int line, const int *got, int ng, const int *want, int nw) {
    int i = 0;
    while (i < ng && i < nw && got[i] == want[i]) i++;
    if (i == ng && i == nw) return 1;
    test_fail(__FILE__, __LINE__, "%s line %d: %d ids vs %d expected; first difference at %d: got %d, want %d",
              what, line, ng, nw, i, i < ng ? got[i] : -1, i < nw ? want[i] : -1);
    return 0;
}

static void check_stream(const tokenizer *t, const int *ids, int n, const char *label);

static int same_text(const char *got, size_t ng, const char *want, size_t nw) {
    return ng == nw && memcmp(got, want, ng) == 0;
}

/* Golden equality over every corpus line the golden covers (ids, decode
 * with and without skip_special, streamed decode), the add_special lines and the
 * first W_LINES lines as one text. min_lines: how many lines the golden
 * must cover at least. */
static void check_golden(int which, int min_lines) {
    const char *name = real_names[which];
    tokenizer *t = real(which);
    corpus c;
    golden g;
    if (!t || load_corpus(&c)) return;
    if (load_golden(&g, name, c.n)) {
        free_golden(&g, c.n);
        free_corpus(&c);
        return;
    }
    CHECK_MSG(g.nl >= min_lines && g.nl <= c.n, "%s golden covers %d of %d corpus lines", name, g.nl, c.n);
    CHECK(c.n >= 2000);
    int bad = 0, bad_dec = 0;
    char err[256];
    for (int i = 0; i < c.n && i < g.nl; i++) {
        int *ids;
        int n = tok_encode(t, c.lines[i], c.lens[i], 0, &ids, err, sizeof err);
        CHECK_MSG(n >= 0, "line %d: %s", i, err);
        if (n < 0) continue;
        if (!same_ids(name, i, ids, n, g.ids[i], g.n[i])) {
            if (++bad < 4) fprintf(stderr, "    text: \"%.*s\"\n", (int)c.lens[i], c.lines[i]);
        }
        size_t dl, sl;
        char *d = tok_decode(t, ids, n, 0, &dl);
        char *ds = tok_decode(t, ids, n, 1, &sl);
        const char *e = g.dec[i] ? g.dec[i] : c.lines[i];
        size_t el = g.dec[i] ? g.dec_n[i] : c.lens[i];
        const char *es = g.dec_skip[i] ? g.dec_skip[i] : e;
        size_t esl = g.dec_skip[i] ? g.dec_skip_n[i] : el;
        if (!same_text(d, dl, e, el) || !same_text(ds, sl, es, esl)) {
            if (++bad_dec < 4)
                test_fail(__FILE__, __LINE__, "%s line %d: decode \"%s\" / skip_special \"%s\", want \"%.*s\" / \"%.*s\"",
                          name, i, d, ds, (int)el, e, (int)esl, es);
        }
        free(d);
        free(ds);
        char label[64];
        snprintf(label, sizeof label, "%s line %d", name, i);
        check_stream(t, ids, n, label); /* streamed, it must equal the decode */
        free(ids);
    }
    CHECK_MSG(bad_dec == 0, "%s: %d lines decode differently", name, bad_dec);
    CHECK(g.ns >= 4);
    for (int k = 0; k < g.ns; k++) {
        int i = g.s_line[k];
        CHECK(i >= 0 && i < c.n);
        if (i < 0 || i >= c.n) continue;
        int *ids;
        int n = tok_encode(t, c.lines[i], c.lens[i], 1, &ids, err, sizeof err);
        CHECK(n >= 0);
        if (n >= 0) same_ids("add_special", i, ids, n, g.s_ids[k], g.s_n[k]);
        free(ids);
    }
    CHECK(g.w_n > 1000);
    size_t wlen = (size_t)(c.lines[W_LINES] - c.text);
    int *ids;
    int n = tok_encode(t, c.text, wlen, 0, &ids, err, sizeof err);
    CHECK(n >= 0);
    if (n >= 0) same_ids("first lines as one text", 0, ids, n, g.w_ids, g.w_n);
    size_t dl;
    char *d = tok_decode(t, ids, n, 0, &dl);
    CHECK_MSG(g.x ? same_text(d, dl, g.x, g.x_n) : same_text(d, dl, c.text, wlen), "%s: W decode differs", name);
    free(d);
    free(ids);
    free_golden(&g, c.n);
    free_corpus(&c);
}

TEST(tok_golden_qwen3) { check_golden(QWEN3, 2000); }
TEST(tok_golden_llama3) { check_golden(LLAMA3, 2000); }
TEST(tok_golden_gemma3) { check_golden(GEMMA3, 2000); }
TEST(tok_golden_llama2) { check_golden(LLAMA2, 800); }

/* ---------------------------------------------------------------- */

static int encode_str(const tokenizer *t, const char *s, int add_special, int **ids) {
    char err[256];
    int n = tok_encode(t, s, strlen(s), add_special, ids, err, sizeof err);
    if (n < 0) test_fail(__FILE__, __LINE__, "encode \"%s\": %s", s, err);
    return n;
}

TEST(tok_empty_input) {
    for (int w = 0; w < N_REAL; w++) {
        tokenizer *t = real(w);
        if (!t) return;
        int *ids = NULL;
        char err[256];
        CHECK_EQ_INT(tok_encode(t, "", 0, 0, &ids, err, sizeof err), 0);
        free(ids);
        CHECK_EQ_INT(tok_encode(t, NULL, 0, 0, &ids, err, sizeof err), 0);
        free(ids);
        size_t len = 99;
        char *d = tok_decode(t, NULL, 0, 0, &len);
        CHECK(d && len == 0 && d[0] == 0);
        free(d);
    }
}

TEST(tok_invalid_utf8_is_refused) {
    tokenizer *t = real(0);
    if (!t) return;
    int *ids = NULL;
    char err[256] = "";
    CHECK_EQ_INT(tok_encode(t, "ok \xff bad", 8, 0, &ids, err, sizeof err), -1);
    CHECK(ids == NULL);
    CHECK_MSG(strstr(err, "UTF-8") && strstr(err, "byte 3"), "message: %s", err);
    CHECK_EQ_INT(tok_encode(t, "\xed\xa0\x80", 3, 0, &ids, err, sizeof err), -1); /* surrogate */
}

TEST(tok_special_tokens_and_lookups) {
    tokenizer *q = real(0), *l = real(1);
    if (!q || !l) return;
    CHECK_EQ_INT(tok_vocab_size(q), 151669);
    CHECK_EQ_INT(tok_vocab_size(l), 128256);
    CHECK_EQ_INT(tok_token_id(q, "<|im_end|>"), 151645);
    CHECK_EQ_INT(tok_token_id(q, "<think>"), 151667);
    CHECK_EQ_INT(tok_token_id(q, "Hello"), 9707);
    CHECK_EQ_INT(tok_token_id(q, "no such token at all"), -1);
    CHECK(tok_is_special(q, 151644));
    CHECK(!tok_is_special(q, 151667)); /* <think> is added but not special */
    CHECK(!tok_is_special(q, 9707));
    CHECK(!tok_is_special(q, -1) && !tok_is_special(q, 1 << 30));
    CHECK_EQ_INT(tok_eos_id(q), 151645);
    CHECK_EQ_INT(tok_bos_id(q), -1);
    CHECK_EQ_INT(tok_bos_id(l), 128000);
    CHECK_EQ_INT(tok_eos_id(l), 128001);
    size_t n;
    const char *b = tok_token_bytes(q, 220, &n); /* "Ġ" is a space */
    CHECK(b && n == 1 && b[0] == ' ');
    b = tok_token_bytes(q, 151644, &n);
    CHECK(b && n == strlen("<|im_start|>") && !strcmp(b, "<|im_start|>"));
    CHECK(tok_token_bytes(q, 151669, &n) == NULL);
    CHECK(tok_token_bytes(q, -5, &n) == NULL);

    /* <think> is matched before BPE although it is not special */
    int *ids;
    int k = encode_str(q, "a<think>b</think>", 0, &ids);
    CHECK_EQ_INT(k, 4);
    if (k == 4) CHECK(ids[1] == 151667 && ids[3] == 151668);
    free(ids);

    /* skip_special drops special tokens only */
    k = encode_str(q, "<|im_start|>user\nHi<think>x</think><|im_end|>", 0, &ids);
    size_t dl;
    char *d = tok_decode(q, ids, k, 1, &dl);
    CHECK_MSG(!strcmp(d, "user\nHi<think>x</think>"), "got \"%s\"", d);
    free(d);
    d = tok_decode(q, ids, k, 0, &dl);
    CHECK(!strcmp(d, "<|im_start|>user\nHi<think>x</think><|im_end|>"));
    free(d);
    free(ids);

    /* unknown ids are skipped when decoding */
    int odd[3] = {9707, 151669, 1 << 30};
    d = tok_decode(q, odd, 3, 0, &dl);
    CHECK(!strcmp(d, "Hello"));
    free(d);
}

/* Qwen3's post-processor adds nothing; this Llama-3 file's is ByteLevel
 * too (the golden S lines check both). The official Meta Llama-3 file has
 * Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|> $A)]: apply
 * that to the real file and check the BOS appears. */
TEST(tok_add_special_template) {
    const char *dir = test_tokenizer_dir();
    CHECK(dir != NULL);
    if (!dir) return;
    char src[4200], err[512];
    snprintf(src, sizeof src, "%s/llama3/tokenizer.json", dir);
    cJSON *root = json_parse_file(src, err, sizeof err);
    CHECK_MSG(root != NULL, "%s", err);
    if (!root) return;
    cJSON *pp = cJSON_Parse(
        "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
        "\"trim_offsets\":false,\"use_regex\":true},{\"type\":\"TemplateProcessing\",\"single\":["
        "{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\","
        "\"type_id\":0}}],\"pair\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\","
        "\"type_id\":1}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{"
        "\"<|begin_of_text|>\":{\"id\":\"<|begin_of_text|>\",\"ids\":[128000],\"tokens\":["
        "\"<|begin_of_text|>\"]}}}]}");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "post_processor", pp);
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char d[600], p[700];
    snprintf(d, sizeof d, "%s/llama3-template", test_tmp_dir());
    snprintf(p, sizeof p, "mkdir -p %s", d);
    CHECK(system(p) == 0);
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) {
        free(txt);
        return;
    }
    fputs(txt, f);
    fclose(f);
    free(txt);
    tokenizer *t;
    CHECK_MSG(tok_load(&t, d, err, sizeof err) == 0, "%s", err);
    int *ids;
    int n = encode_str(t, "Hello world", 1, &ids);
    CHECK_EQ_INT(n, 3);
    if (n == 3) CHECK(ids[0] == 128000 && ids[1] == 9906 && ids[2] == 1917);
    free(ids);
    n = encode_str(t, "Hello world", 0, &ids);
    CHECK_EQ_INT(n, 2);
    free(ids);
    n = encode_str(t, "", 1, &ids);
    CHECK_EQ_INT(n, 1);
    if (n == 1) CHECK_EQ_INT(ids[0], 128000);
    free(ids);
    tok_free(t);
}

/* ---------------------------------------------------------------- */
/* streaming decode                                                   */

/* Pushes ids one at a time; every chunk must be valid UTF-8 and the
 * concatenation (with the flush) must equal tok_decode. */
static void check_stream(const tokenizer *t, const int *ids, int n, const char *label) {
    size_t cap = tok_stream_cap(t);
    char *chunk = xmalloc(cap);
    size_t acc_cap = 64, acc_n = 0;
    char *acc = xmalloc(acc_cap);
    tok_stream s = {0};
    for (int i = 0; i <= n; i++) {
        size_t k = i < n ? tok_stream_push(t, &s, ids[i], chunk, cap) : tok_stream_flush(&s, chunk, cap);
        CHECK(k < cap && chunk[k] == 0);
        CHECK_MSG(valid_utf8(chunk, k), "%s: chunk %d is not valid UTF-8", label, i);
        while (acc_n + k + 1 > acc_cap) acc = xrealloc(acc, acc_cap *= 2);
        memcpy(acc + acc_n, chunk, k);
        acc_n += k;
    }
    size_t dl;
    char *d = tok_decode(t, ids, n, 0, &dl);
    CHECK_MSG(dl == acc_n && memcmp(d, acc, dl) == 0, "%s: streamed text differs from decode", label);
    CHECK_MSG(valid_utf8(d, dl), "%s: decode is not valid UTF-8", label);
    free(d);
    free(acc);
    free(chunk);
}

/* The id of the token standing for the single raw byte b. */
static int byte_token(const tokenizer *t, unsigned char b) {
    for (int id = 0; id < 512; id++) {
        size_t n;
        const char *p = tok_token_bytes(t, id, &n);
        if (p && n == 1 && (unsigned char)p[0] == b) return id;
    }
    return -1;
}

TEST(tok_stream_never_splits_utf8) {
    static const char *texts[] = {
        "Hello 🌍 world 🚀",
        "👨‍👩‍👧‍👦 and 🇺🇸🇬🇧 flags, 👍🏽",
        "你好，世界！机器学习是人工智能的一个分支。",
        "日本語 한국어 العربية हिन्दी",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠜎𠜱 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
        "<|im_start|>user\n🤖🤖<|im_end|>",
    };
    for (int w = 0; w < N_REAL; w++) {
        tokenizer *t = real(w);
        if (!t) return;
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            int *ids;
            int n = encode_str(t, texts[i], 0, &ids);
            char label[64];
            snprintf(label, sizeof label, "%s text %zu", real_names[w], i);
            if (n > 0) check_stream(t, ids, n, label);
            free(ids);
        }
    }
    /* ids that do not form valid UTF-8 decode to U+FFFD per maximal
     * invalid subpart, as Rust's from_utf8_lossy; streaming agrees. */
    tokenizer *t = real(0);
    if (!t) return;
    struct {
        const char *bytes;
        const char *want;
    } cases[] = {
        {"\xf0\x9f\x98" "A", "\xef\xbf\xbd" "A"},        /* truncated 4-byte sequence, then ASCII */
        {"\xe4\xbd", "\xef\xbf\xbd"},                     /* truncated at the end: one U+FFFD */
        {"\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd"},         /* lone continuation bytes */
        {"\xe0\x80" "a", "\xef\xbf\xbd\xef\xbf\xbd" "a"}, /* bad second byte: two subparts */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},         /* overlong lead */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"\xe4\xbd\xa0", "\xe4\xbd\xa0"},                 /* 你, byte by byte */
        {"\xf0\x9f\x8c\x8d", "\xf0\x9f\x8c\x8d"},         /* 🌍, byte by byte */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int ids[8], n = 0;
        for (const char *p = cases[i].bytes; *p; p++) ids[n++] = byte_token(t, (unsigned char)*p);
        size_t dl;
        char *d = tok_decode(t, ids, n, 0, &dl);
        CHECK_MSG(!strcmp(d, cases[i].want), "case %zu: decode gave \"%s\"", i, d);
        free(d);
        char label[32];
        snprintf(label, sizeof label, "bytes case %zu", i);
        check_stream(t, ids, n, label);
    }
    /* a special token right after a held-back byte */
    int ids[2] = {byte_token(t, 0xe4), tok_token_id(t, "<|im_end|>")};
    check_stream(t, ids, 2, "held byte then special");
    /* a too small buffer drops what does not fit, never half a character */
    tok_stream s = {0};
    char small[4];
    int sid = tok_token_id(t, "<|im_end|>");
    CHECK_EQ_INT(tok_stream_push(t, &s, sid, small, sizeof small), 0);
    CHECK(small[0] == 0);
}

/* ---------------------------------------------------------------- */
/* concurrency: encode is thread-safe                                 */

typedef struct {
    const tokenizer *t;
    const corpus *c;
    const golden *g;
    int ok;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    a->ok = 1;
    for (int r = 0; r < 3; r++) {
        int *ids;
        char err[256];
        int n = tok_encode(a->t, a->c->text, (size_t)(a->c->lines[W_LINES] - a->c->text), 0, &ids, err, sizeof err);
        if (n != a->g->w_n || memcmp(ids, a->g->w_ids, (size_t)n * sizeof *ids)) a->ok = 0;
        free(ids);
    }
    return NULL;
}

TEST(tok_encode_threads) {
    tokenizer *t = real(0);
    corpus c;
    golden g;
    if (!t || load_corpus(&c)) return;
    if (load_golden(&g, "qwen3", c.n)) {
        free_golden(&g, c.n);
        free_corpus(&c);
        return;
    }
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){t, &c, &g, 0};
        CHECK(pthread_create(&th[i], NULL, thr_main, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(args[i].ok, "thread %d got different ids", i);
    }
    free_golden(&g, c.n);
    free_corpus(&c);
}

/* Long inputs stay fast and round-trip: 100 KB runs of one unit each
 * (a whitespace run is a single pre-token; so is a run of letters). */
TEST(tok_long_runs) {
    static const char *units[] = {" ", "a", "\t", "!", "\n", "\r\n", "1", " \n", "ab ", "\xc3\xa9", "\xf0\x9f\x99\x82"};
    size_t n = 100000;
    char *s = xmalloc(n + 8);
    char err[256];
    for (int w = 0; w < N_REAL; w++) {
        tokenizer *t = real(w);
        if (!t) break;
        for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
            size_t ul = strlen(units[u]), len = 0;
            while (len + ul <= n) {
                memcpy(s + len, units[u], ul);
                len += ul;
            }
            s[len++] = 'x';
            int *ids;
            double t0 = ds_now();
            int m = tok_encode(t, s, len, 0, &ids, err, sizeof err);
            double dt = ds_now() - t0;
            CHECK_MSG(m > 0, "%s", err);
            CHECK_MSG(dt < 5.0, "unit %zu took %.2f s", u, dt);
            if (m <= 0) continue;
            size_t dl;
            char *d = tok_decode(t, ids, m, 0, &dl);
            CHECK_MSG(dl == len && memcmp(d, s, len) == 0, "unit %zu: round trip differs", u);
            free(d);
            free(ids);
        }
    }
    free(s);
}

/* ---------------------------------------------------------------- */
/* malformed and unsupported files                                    */

static int write_file(const char *dir, const char *name, const char *text) {
    char p[700];
    snprintf(p, sizeof p, "mkdir -p %s", dir);
    if (system(p) != 0) return -1;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}

/* Loads a tokenizer.json given as text; returns the load status and
 * leaves the message in err. */
static int load_text(const char *sub, const char *json, tokenizer **out, char *err, size_t errlen) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", test_tmp_dir(), sub);
    if (write_file(dir, "tokenizer.json", json)) {
        test_fail(__FILE__, __LINE__, "cannot write %s", dir);
        return -2;
    }
    err[0] = 0;
    return tok_load(out, dir, err, errlen);
}

static void expect_error(const char *sub, const char *json, const char *needle1, const char *needle2) {
    tokenizer *t = NULL;
    char err[512];
    int rc = load_text(sub, json, &t, err, sizeof err);
    CHECK_MSG(rc == -1 && t == NULL, "%s: load should fail", sub);
    CHECK_MSG(strstr(err, needle1) && (!needle2 || strstr(err, needle2)), "%s: message \"%s\"", sub, err);
    tok_free(t);
}

#define BL "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}"
#define MINI_MODEL "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}"

TEST(tok_malformed_files) {
    expect_error("trunc", "{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":", "tokenizer.json",
                 "invalid JSON");
    expect_error("nomodel", "{\"version\":\"1.0\",\"added_tokens\":[]}", "missing \"model\"", NULL);
    expect_error("notobj", "[1,2,3]", "top level", NULL);
    expect_error("bertpre",
                 "{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"decoder\":" BL
                 ",\"model\":" MINI_MODEL "}",
                 "tokenizer.json: unsupported pre_tokenizer type \"BertPreTokenizer\"", NULL);
    expect_error("precompiled",
                 "{\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"\"},\"decoder\":" BL
                 ",\"model\":" MINI_MODEL "}",
                 "unsupported normalizer type \"Precompiled\"", NULL);
    expect_error("ctc", "{\"pre_tokenizer\":" BL ",\"decoder\":{\"type\":\"CTC\"},\"model\":" MINI_MODEL "}",
                 "unsupported decoder type \"CTC\"", NULL);
    expect_error("afterfuse",
                 "{\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Replace\","
                 "\"pattern\":{\"String\":\"a\"},\"content\":\"b\"}]},\"model\":" MINI_MODEL "}",
                 "decoder \"Replace\" after Fuse", NULL);
    expect_error("regexdec",
                 "{\"decoder\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"a+\"},\"content\":\"b\"},"
                 "\"model\":" MINI_MODEL "}",
                 "decoder Replace supports", NULL);
    expect_error("scheme",
                 "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":"
                 "\"sometimes\"},\"decoder\":" BL ",\"model\":" MINI_MODEL "}",
                 "prepend_scheme \"sometimes\"", NULL);
    expect_error("metarep",
                 "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"ab\"},\"decoder\":" BL
                 ",\"model\":" MINI_MODEL "}",
                 "replacement must be one character", NULL);
    expect_error("fbbl",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL
                 ",\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}",
                 "byte_fallback with a ByteLevel pre_tokenizer", NULL);
    expect_error("nodecoder", "{\"pre_tokenizer\":" BL ",\"model\":" MINI_MODEL "}", "without a decoder", NULL);
    expect_error("replnorm",
                 "{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"}},\"decoder\":" BL
                 ",\"model\":" MINI_MODEL "}",
                 "missing \"content\"", NULL);
    expect_error("wordpiece",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL
                 ",\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
                 "unsupported model type \"WordPiece\"", NULL);
    expect_error("wordpiece2",
                 "{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"decoder\":{\"type\":\"WordPiece\"},"
                 "\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
                 "unsupported model type \"WordPiece\"", NULL);
    expect_error("hugeid",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL
                 ",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":2000000000},\"merges\":[]}}",
                 "vocab entry \"a\" must have an integer id", NULL);
    expect_error("unigram",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL ",\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}",
                 "unsupported model type \"Unigram\"", NULL);
    expect_error("norm",
                 "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Lowercase\"}]},"
                 "\"pre_tokenizer\":" BL ",\"decoder\":" BL ",\"model\":" MINI_MODEL "}",
                 "unsupported normalizer type \"Lowercase\"", NULL);
    expect_error("post",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL ",\"post_processor\":{\"type\":\"Fancy\"},\"model\":"
                 MINI_MODEL "}",
                 "unsupported post_processor type \"Fancy\"", NULL);
    expect_error("badmerge",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL
                 ",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
                 "merge 0", "\"ab\"");
    expect_error("badregex",
                 "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                 "{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\"}," BL "]},\"decoder\":" BL
                 ",\"model\":" MINI_MODEL "}",
                 "Split regex does not compile", NULL);
    expect_error("badvocab",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL
                 ",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
                 "vocab entry \"a\"", NULL);
    expect_error("badadded",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL ",\"model\":" MINI_MODEL
                 ",\"added_tokens\":[{\"content\":\"<x>\"}]}",
                 "missing \"id\"", NULL);

    tokenizer *t = NULL;
    char err[512];
    CHECK(tok_load(&t, "/nonexistent/dir", err, sizeof err) == -1 && t == NULL);
    CHECK_MSG(strstr(err, "/nonexistent/dir/tokenizer.json"), "message \"%s\"", err);

    /* a malformed tokenizer_config.json is an error too */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/badconfig", test_tmp_dir());
    CHECK(write_file(dir, "tokenizer.json", "{\"pre_tokenizer\":" BL ",\"decoder\":" BL ",\"model\":" MINI_MODEL "}") ==
          0);
    CHECK(write_file(dir, "tokenizer_config.json", "{\"eos_token\": ") == 0);
    CHECK(tok_load(&t, dir, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "tokenizer_config.json"), "message \"%s\"", err);
}

/* ---------------------------------------------------------------- */
/* a synthetic byte-level tokenizer for the less common options       */

/* GPT-2's byte alphabet: the character byte b stands for. */
static void byte_char(int b, char out[3]) {
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    int cp = b;
    if (!printable) {
        int extra = 0;
        for (int x = 0; x < b; x++) {
            int px = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
            extra += !px;
        }
        cp = 0x100 + extra;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* Vocab: byte b has id b; "ab" 256, "ba" 257, "Ġa" 258; merges in that
 * order. Added tokens "<x>" 300 and "é" 301 (normalized) unless given. */
static tokenizer *synth(const char *normalizer, const char *pre, const char *added, const char *post) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "normalizer", normalizer ? cJSON_Parse(normalizer) : cJSON_CreateNull());
    cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse(pre));
    cJSON_AddItemToObject(root, "post_processor", post ? cJSON_Parse(post) : cJSON_CreateNull());
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse(BL));
    cJSON_AddItemToObject(root, "added_tokens",
                          cJSON_Parse(added ? added
                                            : "[{\"id\":300,\"content\":\"<x>\",\"special\":true,\"normalized\":false},"
                                              "{\"id\":301,\"content\":\"\\u00e9\",\"special\":false,"
                                              "\"normalized\":true}]"));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) {
        char c[3];
        byte_char(b, c);
        cJSON_AddNumberToObject(vocab, c, b);
    }
    cJSON_AddNumberToObject(vocab, "ab", 256);
    cJSON_AddNumberToObject(vocab, "ba", 257);
    cJSON_AddNumberToObject(vocab, "\xc4\xa0" "a", 258);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddItemToArray(merges, cJSON_CreateString("a b"));
    cJSON_AddItemToArray(merges, cJSON_CreateString("b a"));
    cJSON_AddItemToArray(merges, cJSON_CreateString("\xc4\xa0 a"));
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    static int seq;
    char sub[64], err[512];
    snprintf(sub, sizeof sub, "synth%d", seq++);
    tokenizer *t = NULL;
    if (load_text(sub, txt, &t, err, sizeof err)) test_fail(__FILE__, __LINE__, "synthetic load: %s", err);
    free(txt);
    return t;
}

/* Encodes s and compares with the expected ids (terminated by -1). */
static void expect_ids(const tokenizer *t, const char *s, int add_special, const int *want, int line) {
    int nw = 0;
    while (want[nw] >= 0) nw++;
    int *ids = NULL;
    char err[256];
    int n = tok_encode(t, s, strlen(s), add_special, &ids, err, sizeof err);
    if (n < 0) test_fail(__FILE__, line, "encode \"%s\": %s", s, err);
    else same_ids(s, line, ids, n, want, nw);
    free(ids);
}
#define EXPECT_IDS(t, s, sp, ...)                                 \
    do {                                                          \
        static const int _w[] = {__VA_ARGS__, -1};                \
        expect_ids(t, s, sp, _w, __LINE__);                       \
    } while (0)

#define SPLIT(pat, beh) \
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"" pat \
    "\"},\"behavior\":\"" beh "\",\"invert\":false}," BL "]}"

TEST(tok_synthetic_split_behaviors) {
    tokenizer *t = synth(NULL, BL, NULL, NULL);
    if (!t) return;
    EXPECT_IDS(t, "abab", 0, 256, 256);
    EXPECT_IDS(t, "bab", 0, 98, 256); /* the lower-ranked "ab" wins over "ba" */
    tok_free(t);
    if ((t = synth(NULL, SPLIT("b", "Isolated"), NULL, NULL))) {
        EXPECT_IDS(t, "ab", 0, 97, 98);
        tok_free(t);
    }
    if ((t = synth(NULL, SPLIT("b", "MergedWithPrevious"), NULL, NULL))) {
        EXPECT_IDS(t, "ab", 0, 256);
        EXPECT_IDS(t, "ba", 0, 98, 97);
        tok_free(t);
    }
    if ((t = synth(NULL, SPLIT("b", "MergedWithNext"), NULL, NULL))) {
        EXPECT_IDS(t, "ba", 0, 257);
        EXPECT_IDS(t, "ab", 0, 97, 98);
        tok_free(t);
    }
    if ((t = synth(NULL, SPLIT("b", "Removed"), NULL, NULL))) {
        EXPECT_IDS(t, "abab", 0, 97, 97);
        tok_free(t);
    }
    if ((t = synth(NULL, SPLIT("b", "Contiguous"), NULL, NULL))) {
        EXPECT_IDS(t, "abba", 0, 97, 98, 98, 97); /* "a","bb","a" */
        tok_free(t);
    }
    /* ByteLevel with a prefix space and the GPT-2 regex */
    if ((t = synth(NULL, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", NULL, NULL))) {
        EXPECT_IDS(t, "a a", 0, 258, 258);
        EXPECT_IDS(t, " a", 0, 258);
        tok_free(t);
    }
}

TEST(tok_synthetic_added_token_flags) {
    tokenizer *t = synth(NULL, BL, NULL, NULL);
    if (!t) return;
    EXPECT_IDS(t, "a  <x>b", 0, 97, 32, 32, 300, 98);
    EXPECT_IDS(t, "<x<x>>", 0, 60, 120, 300, 62);
    /* normalized=true tokens match the NFC'd text only with an NFC normalizer */
    EXPECT_IDS(t, "\xc3\xa9", 0, 301);
    EXPECT_IDS(t, "e\xcc\x81", 0, 101, 204, 129);
    tok_free(t);
    if ((t = synth("{\"type\":\"NFC\"}", BL, NULL, NULL))) {
        EXPECT_IDS(t, "e\xcc\x81!", 0, 301, 33);
        tok_free(t);
    }
    const char *flags = "[{\"id\":300,\"content\":\"<x>\",\"special\":true,\"normalized\":false,\"lstrip\":true},"
                        "{\"id\":301,\"content\":\"<y>\",\"special\":true,\"normalized\":false,\"rstrip\":true},"
                        "{\"id\":302,\"content\":\"<z>\",\"special\":true,\"normalized\":false,\"single_word\":true}]";
    if ((t = synth(NULL, BL, flags, NULL))) {
        EXPECT_IDS(t, "a  <x>b", 0, 97, 300, 98);
        EXPECT_IDS(t, "a <y>  b", 0, 97, 32, 301, 98);
        EXPECT_IDS(t, "a<z>b", 0, 97, 60, 122, 62, 98);
        EXPECT_IDS(t, "a <z> b", 0, 97, 32, 302, 32, 98);
        EXPECT_IDS(t, "<z>", 0, 302);
        tok_free(t);
    }
}

TEST(tok_synthetic_post_processors) {
    const char *tpl = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<x>\",\"type_id\":0}},"
                      "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<e>\",\"type_id\":0}}],"
                      "\"special_tokens\":{\"<x>\":{\"id\":\"<x>\",\"ids\":[300],\"tokens\":[\"<x>\"]},"
                      "\"<e>\":{\"id\":\"<e>\",\"ids\":[301,300],\"tokens\":[\"<e>\",\"<x>\"]}}}";
    tokenizer *t = synth(NULL, BL, NULL, tpl);
    if (t) {
        EXPECT_IDS(t, "ab", 1, 300, 256, 301, 300);
        EXPECT_IDS(t, "ab", 0, 256);
        tok_free(t);
    }
    t = synth(NULL, BL, NULL, "{\"type\":\"RobertaProcessing\",\"sep\":[\"</s>\",2],\"cls\":[\"<s>\",0]}");
    if (t) {
        EXPECT_IDS(t, "ab", 1, 0, 256, 2);
        tok_free(t);
    }
    expect_error("tplundef",
                 "{\"pre_tokenizer\":" BL ",\"decoder\":" BL ",\"model\":" MINI_MODEL
                 ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<q>\"}},"
                 "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{}}}",
                 "special token \"<q>\" is not defined", NULL);
}

/* ---------------------------------------------------------------- */
/* a synthetic SentencePiece-style tokenizer                          */

#define SP_DEC_GEMMA                                                                                          \
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"        \
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}"
#define SP_DEC_LLAMA2                                                                                         \
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"        \
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \"," \
    "\"start\":1,\"stop\":0}]}"
#define SP_NORM_GEMMA "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}"
#define SP_NORM_LLAMA2                                                                                        \
    "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"}," SP_NORM_GEMMA "]}"

enum { SP_UNK = 0, SP_BOS = 1, SP_EOS = 2, SP_B0 = 3, SP_META = 259, SP_A, SP_B, SP_MA, SP_AB, SP_MAB, SP_C, SP_BA };
#define SP_BYTE(b) (SP_B0 + (b))

/* Vocab: <unk> <s> </s>, <0x00>..<0xFF>, then ▁ a b ▁a ab ▁ab c ba;
 * merges "a b", "▁ a", "▁a b", "▁ ab" in that order. model_opts are extra
 * "key":value pairs for the model; config is tokenizer_config.json. */
static tokenizer *synth_sp(const char *normalizer, const char *pre, const char *decoder, const char *model_opts,
                           const char *config) {
    char *vocab = xmalloc(20000);
    int o = snprintf(vocab, 20000, "{\"<unk>\":0,\"<s>\":1,\"</s>\":2");
    for (int b = 0; b < 256; b++) o += snprintf(vocab + o, (size_t)(20000 - o), ",\"<0x%02X>\":%d", b, SP_BYTE(b));
    snprintf(vocab + o, (size_t)(20000 - o),
             ",\"\\u2581\":%d,\"a\":%d,\"b\":%d,\"\\u2581a\":%d,\"ab\":%d,\"\\u2581ab\":%d,\"c\":%d,\"ba\":%d}", SP_META,
             SP_A, SP_B, SP_MA, SP_AB, SP_MAB, SP_C, SP_BA);
    size_t cap = 40000;
    char *json = xmalloc(cap);
    snprintf(json, cap,
             "{\"normalizer\":%s,\"pre_tokenizer\":%s,\"decoder\":%s,\"added_tokens\":["
             "{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
             "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
             "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}],"
             "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
             "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}},"
             "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\"%s%s,\"vocab\":%s,\"merges\":[[\"a\",\"b\"],"
             "[\"\\u2581\",\"a\"],[\"\\u2581a\",\"b\"],[\"\\u2581\",\"ab\"]]}}",
             normalizer ? normalizer : "null", pre ? pre : "null", decoder, model_opts ? "," : "",
             model_opts ? model_opts : "", vocab);
    free(vocab);
    static int seq;
    char sub[64], dir[700], err[512];
    snprintf(sub, sizeof sub, "synthsp%d", seq++);
    snprintf(dir, sizeof dir, "%s/%s", test_tmp_dir(), sub);
    if (config && write_file(dir, "tokenizer_config.json", config)) test_fail(__FILE__, __LINE__, "cannot write");
    tokenizer *t = NULL;
    if (load_text(sub, json, &t, err, sizeof err)) test_fail(__FILE__, __LINE__, "synthetic load: %s", err);
    free(json);
    return t;
}

static void expect_decode(const tokenizer *t, const int *ids, int n, int skip, const char *want, int line) {
    size_t dl;
    char *d = tok_decode(t, ids, n, skip, &dl);
    if (strlen(want) != dl || memcmp(d, want, dl) != 0)
        test_fail(__FILE__, line, "decode gave \"%s\", want \"%s\"", d, want);
    free(d);
}
#define EXPECT_DECODE(t, skip, want, ...)                    \
    do {                                                     \
        static const int _i[] = {__VA_ARGS__};               \
        expect_decode(t, _i, (int)(sizeof _i / sizeof *_i), skip, want, __LINE__); \
    } while (0)

TEST(tok_sp_gemma_style) {
    tokenizer *t = synth_sp(SP_NORM_GEMMA, NULL, SP_DEC_GEMMA, "\"byte_fallback\":true,\"fuse_unk\":true", NULL);
    if (!t) return;
    EXPECT_IDS(t, "ab", 0, SP_AB);
    EXPECT_IDS(t, " ab", 0, SP_MAB);
    EXPECT_IDS(t, "bab", 0, SP_B, SP_AB);      /* "a b" outranks the unmerged "b a" */
    EXPECT_IDS(t, "ab ab", 0, SP_AB, SP_MAB);  /* no pre-tokenizer: one word */
    EXPECT_IDS(t, "\xc3\xa9", 0, SP_BYTE(0xC3), SP_BYTE(0xA9)); /* é by byte fallback */
    EXPECT_IDS(t, "ab", 1, SP_BOS, SP_AB);
    EXPECT_IDS(t, "<s>a</s>", 0, SP_BOS, SP_A, SP_EOS);
    EXPECT_DECODE(t, 0, " ab\xc3\xa9", SP_MAB, SP_BYTE(0xC3), SP_BYTE(0xA9));
    EXPECT_DECODE(t, 0, "<s>ab", SP_BOS, SP_AB);
    EXPECT_DECODE(t, 1, "ab", SP_BOS, SP_AB);
    /* an invalid byte run becomes one U+FFFD per byte (not per subpart) */
    EXPECT_DECODE(t, 0, "\xef\xbf\xbd\xef\xbf\xbd" "a", SP_BYTE(0xC3), SP_BYTE(0x28), SP_A);
    EXPECT_DECODE(t, 0, "\xef\xbf\xbd\xef\xbf\xbd", SP_BYTE(0xE4), SP_BYTE(0xBD));
    EXPECT_DECODE(t, 0, "\xe4\xbd\xa0" "b", SP_BYTE(0xE4), SP_BYTE(0xBD), SP_BYTE(0xA0), SP_B);
    size_t n;
    const char *b = tok_token_bytes(t, SP_BYTE(0x41), &n);
    CHECK(b && n == 1 && b[0] == 'A');
    b = tok_token_bytes(t, SP_MAB, &n);
    CHECK(b && n == 3 && !memcmp(b, " ab", 3));
    int ids[] = {SP_MAB, SP_BYTE(0xE4), SP_BYTE(0xBD), SP_BYTE(0xA0), SP_A, SP_BYTE(0xF0), SP_BYTE(0x9F),
                 SP_BYTE(0x99), SP_BYTE(0x82)};
    check_stream(t, ids, 9, "gemma-style stream");
    int inc[] = {SP_A, SP_BYTE(0xE4), SP_BYTE(0xBD), SP_B}; /* incomplete run, then a token */
    check_stream(t, inc, 4, "gemma-style incomplete run");
    int tail[] = {SP_A, SP_BYTE(0xE4), SP_BYTE(0xBD)}; /* incomplete at the end (flush) */
    check_stream(t, tail, 3, "gemma-style incomplete tail");
    tok_free(t);

    /* no byte fallback: unknown chars become <unk>, fused or not */
    if ((t = synth_sp(SP_NORM_GEMMA, NULL, SP_DEC_GEMMA, "\"fuse_unk\":true", NULL))) {
        EXPECT_IDS(t, "a\xc3\xa9\xc3\xa9" "b", 0, SP_A, SP_UNK, SP_B);
        tok_free(t);
    }
    if ((t = synth_sp(SP_NORM_GEMMA, NULL, SP_DEC_GEMMA, "\"fuse_unk\":false", NULL))) {
        EXPECT_IDS(t, "a\xc3\xa9\xc3\xa9" "b", 0, SP_A, SP_UNK, SP_UNK, SP_B);
        EXPECT_IDS(t, "ba", 0, SP_B, SP_A);
        tok_free(t);
    }
    /* ignore_merges: a word in the vocab is taken whole */
    if ((t = synth_sp(SP_NORM_GEMMA, NULL, SP_DEC_GEMMA, "\"ignore_merges\":true", NULL))) {
        EXPECT_IDS(t, "ba", 0, SP_BA);
        tok_free(t);
    }
}

TEST(tok_sp_llama2_style) {
    tokenizer *t = synth_sp(SP_NORM_LLAMA2, NULL, SP_DEC_LLAMA2, "\"byte_fallback\":true", NULL);
    if (!t) return;
    EXPECT_IDS(t, "ab", 0, SP_MAB);
    EXPECT_IDS(t, "ab", 1, SP_BOS, SP_MAB);
    EXPECT_IDS(t, "<s>ab", 0, SP_BOS, SP_MAB); /* each piece between added tokens gets the ▁ */
    EXPECT_IDS(t, "", 0, -1);
    EXPECT_DECODE(t, 0, "ab", SP_MAB);
    EXPECT_DECODE(t, 0, "ab ab", SP_MAB, SP_MAB);
    EXPECT_DECODE(t, 0, "<s> ab", SP_BOS, SP_MAB);
    EXPECT_DECODE(t, 1, "ab", SP_BOS, SP_MAB);
    EXPECT_DECODE(t, 0, " ab", SP_META, SP_META, SP_AB); /* Strip takes one space only */
    int ids[] = {SP_MAB, SP_MAB, SP_BYTE(0xC3), SP_BYTE(0xA9)};
    check_stream(t, ids, 4, "llama2-style stream");
    int ids2[] = {SP_META, SP_META, SP_AB};
    check_stream(t, ids2, 3, "llama2-style stream, leading spaces");
    tok_free(t);

    /* tokenizer_config.json of a Llama class rebuilds BOS/EOS */
    t = synth_sp(SP_NORM_LLAMA2, NULL, SP_DEC_LLAMA2, NULL,
                 "{\"tokenizer_class\":\"LlamaTokenizerFast\",\"bos_token\":\"<s>\",\"eos_token\":\"</s>\","
                 "\"add_bos_token\":false,\"add_eos_token\":true}");
    if (t) {
        EXPECT_IDS(t, "ab", 1, SP_MAB, SP_EOS);
        CHECK_EQ_INT(tok_bos_id(t), SP_BOS);
        CHECK_EQ_INT(tok_eos_id(t), SP_EOS);
        tok_free(t);
    }
    t = synth_sp(SP_NORM_LLAMA2, NULL, SP_DEC_LLAMA2, NULL,
                 "{\"tokenizer_class\":\"GemmaTokenizer\",\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}");
    if (t) {
        EXPECT_IDS(t, "ab", 1, SP_BOS, SP_MAB); /* the defaults: BOS only */
        tok_free(t);
    }
    /* other classes keep the post-processor of tokenizer.json */
    t = synth_sp(SP_NORM_LLAMA2, NULL, SP_DEC_LLAMA2, NULL,
                 "{\"tokenizer_class\":\"PreTrainedTokenizerFast\",\"add_bos_token\":false,\"add_eos_token\":true}");
    if (t) {
        EXPECT_IDS(t, "ab", 1, SP_BOS, SP_MAB);
        tok_free(t);
    }
    /* add_bos_token without a usable bos_token is an error */
    char dir[600], err[512];
    snprintf(dir, sizeof dir, "%s/addbos", test_tmp_dir());
    CHECK(write_file(dir, "tokenizer.json", "{\"decoder\":" SP_DEC_GEMMA ",\"model\":" MINI_MODEL "}") == 0);
    CHECK(write_file(dir, "tokenizer_config.json",
                     "{\"tokenizer_class\":\"LlamaTokenizerFast\",\"add_bos_token\":true,\"bos_token\":\"<nope>\"}") ==
          0);
    t = NULL;
    CHECK(tok_load(&t, dir, err, sizeof err) == -1 && t == NULL);
    CHECK_MSG(strstr(err, "add_bos_token"), "message \"%s\"", err);
}

TEST(tok_sp_metaspace) {
    const char *dec = "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\",\"split\":true}";
    const char *first = "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true}";
    const char *nosplit = "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\",\"split\":false}";
    const char *never = "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"never\",\"split\":true}";
    const char *legacy = "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"add_prefix_space\":true}";
    tokenizer *t = synth_sp(NULL, dec, dec, "\"byte_fallback\":true", NULL);
    if (t) {
        EXPECT_IDS(t, "ab ab", 0, SP_MAB, SP_MAB);
        EXPECT_IDS(t, "ab  b", 0, SP_MAB, SP_META, SP_META, SP_B); /* split: "▁ab" "▁" "▁b" */
        EXPECT_IDS(t, "<s>ab", 0, SP_BOS, SP_MAB);
        EXPECT_DECODE(t, 0, "ab ab", SP_MAB, SP_MAB);
        EXPECT_DECODE(t, 0, " ab", SP_META, SP_META, SP_AB); /* only the first token loses its ▁ */
        EXPECT_DECODE(t, 1, "ab ab", SP_BOS, SP_MAB, SP_MAB);
        int ids[] = {SP_MAB, SP_MAB, SP_META};
        check_stream(t, ids, 3, "metaspace stream");
        tok_free(t);
    }
    if ((t = synth_sp(NULL, first, first, NULL, NULL))) {
        EXPECT_IDS(t, "ab", 0, SP_MAB);
        EXPECT_IDS(t, "<s>ab", 0, SP_BOS, SP_AB); /* not at the start of the input */
        tok_free(t);
    }
    if ((t = synth_sp(NULL, nosplit, dec, NULL, NULL))) {
        EXPECT_IDS(t, "bab", 0, SP_META, SP_B, SP_AB);
        EXPECT_IDS(t, "a b", 0, SP_MA, SP_META, SP_B);
        tok_free(t);
    }
    if ((t = synth_sp(NULL, never, never, NULL, NULL))) {
        EXPECT_IDS(t, "ab b", 0, SP_AB, SP_META, SP_B);
        EXPECT_DECODE(t, 0, " ab", SP_META, SP_AB);
        tok_free(t);
    }
    if ((t = synth_sp(NULL, legacy, legacy, NULL, NULL))) { /* the older add_prefix_space=true: "always" */
        EXPECT_IDS(t, "ab", 0, SP_MAB);
        tok_free(t);
    }
    /* as HF: add_prefix_space=false needs prepend_scheme "never" */
    expect_error("apsfalse",
                 "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"add_prefix_space\":false},\"decoder\":" BL
                 ",\"model\":" MINI_MODEL "}",
                 "add_prefix_space does not match declared prepend_scheme", NULL);
    /* a Regex Replace normalizer */
    if ((t = synth_sp("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"c+\"},\"content\":\"b\"}", NULL, SP_DEC_GEMMA,
                      NULL, NULL))) {
        EXPECT_IDS(t, "accc", 0, SP_AB);
        tok_free(t);
    }
}
