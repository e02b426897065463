/* tok_gguf: rebuilds a Hugging Face tokenizer.json / tokenizer_config.json
 * from a GGUF file's tokenizer metadata (see tok_gguf.h).
 *
 * What GGUF keeps of a tokenizer, and how each part maps back:
 *   tokenizer.ggml.tokens      id -> token string: model.vocab (every token
 *                              but UNUSED ones, the converter's [PADn]
 *                              fillers, which HF's vocabulary lacks)
 *   tokenizer.ggml.token_type  CONTROL -> an added token, special;
 *                              USER_DEFINED -> an added token, not special
 *                              (both normalized=false: llama.cpp matches
 *                              them in the raw text, and the converter
 *                              stored them pre-normalized)
 *   tokenizer.ggml.merges      "a b" (a space inside a token is stored as
 *                              U+0120, so exactly one ASCII space splits)
 *   tokenizer.ggml.pre         the pre-tokenizer by name: the table below
 *                              gives the regex of the HF file of that
 *                              family (the one llama.cpp's own adaptation
 *                              stands for), its normalizer, whether a word
 *                              found whole in the vocabulary skips the
 *                              merges (ignore_merges), and llama.cpp's
 *                              default for adding BOS
 *   *_token_id, add_*_token    the config's bos/eos/pad/unk and the
 *                              post-processor's BOS/EOS
 *   tokenizer.chat_template[.NAME], tokenizer.chat_templates: chat_template
 *   tokenizer.ggml.scores      ("llama" files) the merges, rebuilt the way
 *                              transformers converts a slow Llama
 *                              tokenizer; UNKNOWN tokens become special
 *                              added tokens, BYTE ones turn on byte_fallback
 * A name this file does not know is an error naming it: guessing a
 * pre-tokenizer would mis-tokenize silently. */
#include "text/tok_gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "text/tok_internal.h"

/* llama.cpp's token types (llama_token_type) */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
    const char *name;  /* tokenizer.ggml.pre */
    const char *regex; /* a Split before ByteLevel; NULL: ByteLevel's own GPT-2 regex */
    int nfc;           /* HF's file normalizes to NFC first */
    int ignore_merges;
    int add_bos; /* llama.cpp's default when add_bos_token is absent */
} pre_entry;

/* The families whose HF files were checked against these entries: Qwen2,
 * Qwen2.5, Qwen3 (and DeepSeek-R1's Qwen distills) carry "qwen2"; Llama 3,
 * 3.1, 3.2 carry "llama-bpe" (older files "llama3" or "llama-v3"); GPT-2
 * "gpt-2". */
static const pre_entry PRE[] = {
    {"qwen2", RE_QWEN2, 1, 0, 0},
    {"deepseek-r1-qwen", RE_QWEN2, 1, 0, 0},
    {"llama-bpe", RE_LLAMA3, 0, 1, 1},
    {"llama3", RE_LLAMA3, 0, 1, 1},
    {"llama-v3", RE_LLAMA3, 0, 1, 1},
    {"gpt-2", NULL, 0, 0, 0},
};

static const pre_entry *find_pre(const char *name) {
    for (size_t i = 0; i < sizeof PRE / sizeof *PRE; i++)
        if (!strcmp(name, PRE[i].name)) return &PRE[i];
    return NULL;
}

const char *tok_gguf_pre_name(const char *regex) {
    /* the first entry of each pattern is its canonical name */
    for (size_t i = 0; regex && i < sizeof PRE / sizeof *PRE; i++)
        if (PRE[i].regex && !strcmp(PRE[i].regex, regex)) return PRE[i].name;
    return NULL;
}

int tok_gguf_is_file(const char *path) {
    size_t n = strlen(path);
    struct stat st;
    return n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---------------------------------------------------------------- */
/* Reading the metadata                                               */

typedef struct {
    const gguf *g;
    const char *name;
    char *err;
    size_t errlen;
} gctx;

/* A string key: 1 found, 0 absent, -1 error (present, not a string). */
static int get_str(gctx *C, const char *key, gguf_str *v) {
    int rc = gguf_get_str(C->g, key, v);
    if (rc == -2) return ds_err(C->err, C->errlen, "%s: %s must be a string", C->name, key);
    return rc == 0;
}

/* An integer key in [lo, hi]: 1 found, 0 absent, -1 error. */
static int get_int(gctx *C, const char *key, int64_t lo, int64_t hi, int64_t *v) {
    int rc = gguf_get_int(C->g, key, v);
    if (rc == -2) return ds_err(C->err, C->errlen, "%s: %s must be an integer", C->name, key);
    if (rc == 0 && (*v < lo || *v > hi))
        return ds_err(C->err, C->errlen, "%s: %s = %lld is out of range [%lld, %lld]", C->name, key, (long long)*v,
                      (long long)lo, (long long)hi);
    return rc == 0;
}

static int get_bool(gctx *C, const char *key, int *v) {
    const gguf_kv *kv = gguf_find(C->g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_BOOL) return ds_err(C->err, C->errlen, "%s: %s must be a bool", C->name, key);
    *v = kv->u != 0 || kv->i != 0;
    return 1;
}

/* An array key of element type elt (NULL when absent: caller decides). */
static const gguf_kv *get_arr(gctx *C, const char *key, gguf_vtype elt, const char *what, int *bad) {
    const gguf_kv *kv = gguf_find(C->g, key);
    *bad = 0;
    if (!kv) return NULL;
    if (kv->type != GGUF_ARRAY || kv->elt != elt) {
        *bad = 1;
        ds_err(C->err, C->errlen, "%s: %s must be an array of %s", C->name, key, what);
        return NULL;
    }
    return kv;
}

/* A token string usable as a JSON key: no NUL inside (cJSON strings end
 * at the first NUL, so such a token would silently become another one). */
static int check_token(gctx *C, const gguf_str *s, uint64_t id) {
    if (memchr(s->s, 0, s->len))
        return ds_err(C->err, C->errlen, "%s: tokenizer.ggml.tokens[%llu] holds a NUL byte", C->name,
                      (unsigned long long)id);
    if (!s->len)
        return ds_err(C->err, C->errlen, "%s: tokenizer.ggml.tokens[%llu] is empty", C->name, (unsigned long long)id);
    return 0;
}

/* The token types as ints (all NORMAL when the key is absent, as
 * llama.cpp reads it). *types is malloc'd. */
static int read_types(gctx *C, uint64_t n, int32_t **types) {
    int bad;
    const gguf_kv *kv = get_arr(C, "tokenizer.ggml.token_type", GGUF_I32, "int32", &bad);
    if (bad) return -1;
    *types = xmalloc((n ? n : 1) * sizeof **types);
    if (!kv) {
        for (uint64_t i = 0; i < n; i++) (*types)[i] = TT_NORMAL;
        return 0;
    }
    if (kv->n != n) {
        free(*types);
        *types = NULL;
        return ds_err(C->err, C->errlen, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", C->name,
                      (unsigned long long)kv->n, (unsigned long long)n);
    }
    memcpy(*types, kv->arr, n * sizeof **types);
    for (uint64_t i = 0; i < n; i++)
        if ((*types)[i] < TT_UNDEFINED || (*types)[i] > TT_BYTE) {
            int t = (*types)[i];
            free(*types);
            *types = NULL;
            return ds_err(C->err, C->errlen, "%s: tokenizer.ggml.token_type[%llu] = %d is not a token type", C->name,
                          (unsigned long long)i, t);
        }
    return 0;
}

typedef struct {
    const gguf_str *tok; /* tokenizer.ggml.tokens */
    uint64_t n;
    int32_t *type;
    int64_t id[4]; /* bos, eos, unk, pad: -1 when absent */
    int add_bos, add_eos;
} vocab_info;

static const char *SPECIAL_KEYS[4] = {"bos", "eos", "unk", "pad"};
static const char *SPECIAL_GGUF[4] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                      "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};

static int read_vocab(gctx *C, vocab_info *V) {
    memset(V, 0, sizeof *V);
    int bad;
    const gguf_kv *kv = get_arr(C, "tokenizer.ggml.tokens", GGUF_STRING, "strings", &bad);
    if (bad) return -1;
    if (!kv) return ds_err(C->err, C->errlen, "%s: no tokenizer.ggml.tokens (not a GGUF with a tokenizer)", C->name);
    if (kv->n == 0 || kv->n > TK_MAX_ID)
        return ds_err(C->err, C->errlen, "%s: tokenizer.ggml.tokens has %llu entries (1 to %d supported)", C->name,
                      (unsigned long long)kv->n, TK_MAX_ID);
    V->tok = kv->arr;
    V->n = kv->n;
    if (read_types(C, V->n, &V->type)) return -1;
    for (int k = 0; k < 4; k++) {
        V->id[k] = -1;
        if (get_int(C, SPECIAL_GGUF[k], 0, (int64_t)V->n - 1, &V->id[k]) < 0) goto fail;
    }
    return 0;
fail:
    free(V->type);
    V->type = NULL;
    return -1;
}

/* add_bos_token / add_eos_token: the file's, else llama.cpp's default for
 * the vocabulary's kind. strict: adding a token the file does not name is
 * an error (HF's post-processor could not be built either); the chat
 * template's config alone does not need that. */
static int read_add_flags(gctx *C, vocab_info *V, int def_bos, int strict) {
    V->add_bos = def_bos;
    V->add_eos = 0;
    if (get_bool(C, "tokenizer.ggml.add_bos_token", &V->add_bos) < 0 ||
        get_bool(C, "tokenizer.ggml.add_eos_token", &V->add_eos) < 0)
        return -1;
    if (!strict) return 0;
    if (V->add_bos && V->id[0] < 0)
        return ds_err(C->err, C->errlen, "%s: BOS is to be added but tokenizer.ggml.bos_token_id is absent", C->name);
    if (V->add_eos && V->id[1] < 0)
        return ds_err(C->err, C->errlen, "%s: EOS is to be added but tokenizer.ggml.eos_token_id is absent", C->name);
    return 0;
}

/* ---------------------------------------------------------------- */
/* tokenizer_config.json                                              */

/* The chat templates: tokenizer.chat_template alone is a string; named
 * ones (tokenizer.chat_templates lists the names, each in
 * tokenizer.chat_template.NAME) make the list form. */
static int add_chat_template(gctx *C, cJSON *cfg) {
    gguf_str def;
    int has_def = get_str(C, "tokenizer.chat_template", &def);
    if (has_def < 0) return -1;
    int bad;
    const gguf_kv *names = get_arr(C, "tokenizer.chat_templates", GGUF_STRING, "strings", &bad);
    if (bad) return -1;
    if (!names || !names->n) {
        if (has_def) {
            if (memchr(def.s, 0, def.len))
                return ds_err(C->err, C->errlen, "%s: tokenizer.chat_template holds a NUL byte", C->name);
            cJSON_AddStringToObject(cfg, "chat_template", def.s);
        }
        return 0;
    }
    cJSON *list = cJSON_AddArrayToObject(cfg, "chat_template");
    if (has_def) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", "default");
        cJSON_AddStringToObject(e, "template", def.s);
        cJSON_AddItemToArray(list, e);
    }
    const gguf_str *nm = names->arr;
    for (uint64_t i = 0; i < names->n; i++) {
        char key[512];
        gguf_str tpl;
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", nm[i].s);
        int rc = get_str(C, key, &tpl);
        if (rc < 0) return -1;
        if (!rc) return ds_err(C->err, C->errlen, "%s: tokenizer.chat_templates names \"%s\" but %s is absent",
                               C->name, nm[i].s, key);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", nm[i].s);
        cJSON_AddStringToObject(e, "template", tpl.s);
        cJSON_AddItemToArray(list, e);
    }
    return 0;
}

static cJSON *build_config(gctx *C, const vocab_info *V) {
    cJSON *cfg = cJSON_CreateObject();
    for (int k = 0; k < 4; k++) {
        char key[16];
        snprintf(key, sizeof key, "%s_token", SPECIAL_KEYS[k]);
        if (V->id[k] >= 0) cJSON_AddStringToObject(cfg, key, V->tok[V->id[k]].s);
        else cJSON_AddNullToObject(cfg, key);
    }
    cJSON_AddBoolToObject(cfg, "add_bos_token", V->add_bos);
    cJSON_AddBoolToObject(cfg, "add_eos_token", V->add_eos);
    if (add_chat_template(C, cfg)) {
        cJSON_Delete(cfg);
        return NULL;
    }
    return cfg;
}

/* ---------------------------------------------------------------- */
/* tokenizer.json                                                     */

static cJSON *obj_type(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* model.vocab and added_tokens from the tokens and their types. */
static int add_vocab(gctx *C, const vocab_info *V, cJSON *model, cJSON *root) {
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (uint64_t i = 0; i < V->n; i++) {
        if (V->type[i] == TT_UNUSED) continue;
        if (check_token(C, &V->tok[i], i)) return -1;
        cJSON_AddItemToObject(vocab, V->tok[i].s, cJSON_CreateNumber((double)i));
        if (V->type[i] != TT_CONTROL && V->type[i] != TT_USER_DEFINED) continue;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", (double)i);
        cJSON_AddStringToObject(a, "content", V->tok[i].s);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", V->type[i] == TT_CONTROL);
        cJSON_AddItemToArray(added, a);
    }
    return 0;
}

/* TemplateProcessing adding BOS before and EOS after, as configured. */
static void add_post_processor(const vocab_info *V, cJSON *root) {
    if (!V->add_bos && !V->add_eos) {
        cJSON_AddNullToObject(root, "post_processor");
        return;
    }
    cJSON *p = obj_type("TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(p, "single");
    cJSON *specials = cJSON_AddObjectToObject(p, "special_tokens");
    for (int k = 0; k < 3; k++) { /* BOS, the sequence, EOS */
        int64_t id = k == 0 ? (V->add_bos ? V->id[0] : -1) : k == 2 ? (V->add_eos ? V->id[1] : -1) : -1;
        cJSON *item = cJSON_CreateObject();
        if (k == 1) {
            cJSON *sq = cJSON_AddObjectToObject(item, "Sequence");
            cJSON_AddStringToObject(sq, "id", "A");
            cJSON_AddNumberToObject(sq, "type_id", 0);
        } else if (id >= 0) {
            const char *s = V->tok[id].s;
            cJSON *sp = cJSON_AddObjectToObject(item, "SpecialToken");
            cJSON_AddStringToObject(sp, "id", s);
            cJSON_AddNumberToObject(sp, "type_id", 0);
            if (!cJSON_GetObjectItemCaseSensitive(specials, s)) {
                cJSON *d = cJSON_AddObjectToObject(specials, s);
                cJSON_AddStringToObject(d, "id", s);
                cJSON_AddItemToObject(d, "ids", cJSON_CreateIntArray((const int[]){(int)id}, 1));
                cJSON *toks = cJSON_AddArrayToObject(d, "tokens");
                cJSON_AddItemToArray(toks, cJSON_CreateString(s));
            }
        } else {
            cJSON_Delete(item);
            continue;
        }
        cJSON_AddItemToArray(single, item);
    }
    cJSON_AddItemToObject(root, "post_processor", p);
}

/* model.merges from tokenizer.ggml.merges, as ["a", "b"] pairs. */
static int add_merges_gpt2(gctx *C, cJSON *model) {
    int bad;
    const gguf_kv *kv = get_arr(C, "tokenizer.ggml.merges", GGUF_STRING, "strings", &bad);
    if (bad) return -1;
    if (!kv) return ds_err(C->err, C->errlen, "%s: no tokenizer.ggml.merges (a \"gpt2\" tokenizer needs them)", C->name);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    const gguf_str *m = kv->arr;
    char *buf = NULL;
    size_t cap = 0;
    for (uint64_t i = 0; i < kv->n; i++) {
        const char *sp = memchr(m[i].s, ' ', m[i].len);
        if (!sp || sp == m[i].s || sp + 1 == m[i].s + m[i].len || memchr(sp + 1, ' ', m[i].len - (size_t)(sp + 1 - m[i].s)) ||
            memchr(m[i].s, 0, m[i].len)) {
            free(buf);
            return ds_err(C->err, C->errlen, "%s: tokenizer.ggml.merges[%llu] \"%.*s\" is not two tokens separated by one space",
                          C->name, (unsigned long long)i, (int)(m[i].len > 80 ? 80 : m[i].len), m[i].s);
        }
        size_t la = (size_t)(sp - m[i].s);
        if (la + 1 > cap) {
            cap = 2 * (la + 1);
            buf = xrealloc(buf, cap);
        }
        memcpy(buf, m[i].s, la);
        buf[la] = 0;
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(buf));
        cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
        cJSON_AddItemToArray(merges, pair);
    }
    free(buf);
    return 0;
}

/* The byte-level BPE of "gpt2" files. */
static cJSON *build_gpt2(gctx *C, vocab_info *V) {
    gguf_str pre;
    int rc = get_str(C, "tokenizer.ggml.pre", &pre);
    if (rc < 0) return NULL;
    if (!rc) {
        ds_err(C->err, C->errlen, "%s: no tokenizer.ggml.pre: the pre-tokenizer of a \"gpt2\" tokenizer is unknown", C->name);
        return NULL;
    }
    const pre_entry *pe = find_pre(pre.s);
    if (!pe) {
        char known[256] = "";
        for (size_t i = 0; i < sizeof PRE / sizeof *PRE; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s\"%s\"", i ? ", " : "", PRE[i].name);
        ds_err(C->err, C->errlen, "%s: unsupported tokenizer.ggml.pre \"%s\" (supported: %s)", C->name, pre.s, known);
        return NULL;
    }
    if (read_add_flags(C, V, pe->add_bos, 1)) return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *model = obj_type("BPE");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", pe->ignore_merges);
    cJSON_AddItemToObject(root, "model", model);
    if (add_vocab(C, V, model, root) || add_merges_gpt2(C, model)) {
        cJSON_Delete(root);
        return NULL;
    }
    if (pe->nfc) cJSON_AddItemToObject(root, "normalizer", obj_type("NFC"));
    else cJSON_AddNullToObject(root, "normalizer");
    cJSON *bl = obj_type("ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
    cJSON_AddBoolToObject(bl, "trim_offsets", 0);
    cJSON_AddBoolToObject(bl, "use_regex", pe->regex == NULL);
    if (pe->regex) {
        cJSON *seq = obj_type("Sequence");
        cJSON *list = cJSON_AddArrayToObject(seq, "pretokenizers");
        cJSON *split = obj_type("Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", pe->regex);
        cJSON_AddStringToObject(split, "behavior", "Isolated");
        cJSON_AddBoolToObject(split, "invert", 0);
        cJSON_AddItemToArray(list, split);
        cJSON_AddItemToArray(list, bl);
        cJSON_AddItemToObject(root, "pre_tokenizer", seq);
    } else {
        cJSON_AddItemToObject(root, "pre_tokenizer", bl);
    }
    cJSON_AddItemToObject(root, "decoder", obj_type("ByteLevel"));
    add_post_processor(V, root);
    return root;
}

/* A merge candidate of the SentencePiece rebuild. */
typedef struct {
    float score; /* the merged piece's */
    int piece, l, r;
} spm_merge;

/* transformers' SentencePieceExtractor order: by score, highest first;
 * ties (Python's stable sort) in vocabulary order of the merged piece,
 * then by the ids of the left and right parts. */
static int cmp_spm(const void *pa, const void *pb) {
    const spm_merge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->piece != b->piece) return a->piece < b->piece ? -1 : 1;
    if (a->l != b->l) return a->l < b->l ? -1 : 1;
    return a->r < b->r ? -1 : a->r > b->r;
}

/* The merges a SentencePiece vocabulary implies, as transformers builds
 * them for a slow Llama tokenizer: every split of every piece into two
 * pieces of the vocabulary (at character boundaries) is a merge, ranked
 * by the merged piece's score. */
static int add_merges_spm(gctx *C, const vocab_info *V, const float *score, cJSON *model) {
    smap ids;
    tk_smap_init(&ids, (size_t)V->n);
    for (uint64_t i = 0; i < V->n; i++)
        if (V->type[i] != TT_UNUSED) tk_smap_put(&ids, V->tok[i].s, V->tok[i].len, (int32_t)i);
    spm_merge *m = NULL;
    size_t nm = 0, cap = 0;
    for (uint64_t i = 0; i < V->n; i++) {
        if (V->type[i] == TT_UNUSED) continue;
        const char *s = V->tok[i].s;
        size_t n = V->tok[i].len, k = 0;
        while (k < n) {
            size_t adv;
            if (tk_utf8_decode_at((const unsigned char *)s + k, n - k, &adv) < 0) {
                free(m);
                tk_smap_free(&ids);
                return ds_err(C->err, C->errlen, "%s: tokenizer.ggml.tokens[%llu] is not valid UTF-8", C->name,
                              (unsigned long long)i);
            }
            k += adv;
            if (k >= n) break;
            int l = tk_smap_get(&ids, s, k), r = tk_smap_get(&ids, s + k, n - k);
            if (l < 0 || r < 0) continue;
            if (nm == cap) {
                cap = cap ? 2 * cap : 1024;
                m = xrealloc(m, cap * sizeof *m);
            }
            m[nm++] = (spm_merge){score[i], (int)i, l, r};
        }
    }
    tk_smap_free(&ids);
    if (nm) qsort(m, nm, sizeof *m, cmp_spm);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (size_t i = 0; i < nm; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(V->tok[m[i].l].s));
        cJSON_AddItemToArray(pair, cJSON_CreateString(V->tok[m[i].r].s));
        cJSON_AddItemToArray(merges, pair);
    }
    free(m);
    return 0;
}

static cJSON *replace_step(const char *pat, const char *with) {
    cJSON *r = obj_type("Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "pattern"), "String", pat);
    cJSON_AddStringToObject(r, "content", with);
    return r;
}

/* The SentencePiece-style vocabularies of "llama" files, in the form of
 * HF's (legacy) Llama tokenizer.json: spaces become U+2581 with one
 * prepended (tokenizer.ggml.add_space_prefix, default true), BPE over
 * characters with <0xNN> byte fallback, and the decoder undoing both. */
#define SPM_SPACE "\xe2\x96\x81"
static cJSON *build_spm(gctx *C, vocab_info *V) {
    int bad, prefix = 1;
    const gguf_kv *sc = get_arr(C, "tokenizer.ggml.scores", GGUF_F32, "float32", &bad);
    if (bad) return NULL;
    if (!sc) {
        ds_err(C->err, C->errlen, "%s: no tokenizer.ggml.scores (a \"llama\" tokenizer's merges come from them)", C->name);
        return NULL;
    }
    if (sc->n != V->n) {
        ds_err(C->err, C->errlen, "%s: tokenizer.ggml.scores has %llu entries for %llu tokens", C->name,
               (unsigned long long)sc->n, (unsigned long long)V->n);
        return NULL;
    }
    if (get_bool(C, "tokenizer.ggml.add_space_prefix", &prefix) < 0 || read_add_flags(C, V, 1, 1)) return NULL;
    int64_t unk = V->id[2];
    int has_bytes = 0;
    for (uint64_t i = 0; i < V->n; i++) {
        if (V->type[i] == TT_UNKNOWN && unk < 0) unk = (int64_t)i;
        if (V->type[i] == TT_BYTE) has_bytes = 1;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *model = obj_type("BPE");
    if (unk >= 0) cJSON_AddStringToObject(model, "unk_token", V->tok[unk].s);
    else cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    cJSON_AddBoolToObject(model, "byte_fallback", has_bytes);
    cJSON_AddItemToObject(root, "model", model);
    /* the unknown token is an added special token too, as in HF's files */
    for (uint64_t i = 0; i < V->n; i++)
        if (V->type[i] == TT_UNKNOWN) V->type[i] = TT_CONTROL;
    if (add_vocab(C, V, model, root) || add_merges_spm(C, V, sc->arr, model)) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON *norm = obj_type("Sequence");
    cJSON *nl = cJSON_AddArrayToObject(norm, "normalizers");
    if (prefix) {
        cJSON *p = obj_type("Prepend");
        cJSON_AddStringToObject(p, "prepend", SPM_SPACE);
        cJSON_AddItemToArray(nl, p);
    }
    cJSON_AddItemToArray(nl, replace_step(" ", SPM_SPACE));
    cJSON_AddItemToObject(root, "normalizer", norm);
    cJSON_AddNullToObject(root, "pre_tokenizer");
    cJSON *dec = obj_type("Sequence");
    cJSON *dl = cJSON_AddArrayToObject(dec, "decoders");
    cJSON_AddItemToArray(dl, replace_step(SPM_SPACE, " "));
    cJSON_AddItemToArray(dl, obj_type("ByteFallback"));
    cJSON_AddItemToArray(dl, obj_type("Fuse"));
    if (prefix) {
        cJSON *st = obj_type("Strip");
        cJSON_AddStringToObject(st, "content", " ");
        cJSON_AddNumberToObject(st, "start", 1);
        cJSON_AddNumberToObject(st, "stop", 0);
        cJSON_AddItemToArray(dl, st);
    }
    cJSON_AddItemToObject(root, "decoder", dec);
    add_post_processor(V, root);
    return root;
}

/* ---------------------------------------------------------------- */
/* Entry points                                                       */

int tok_gguf_json(const gguf *g, const char *name, cJSON **tok, cJSON **cfg, char *err, size_t errlen) {
    if (tok) *tok = NULL;
    if (cfg) *cfg = NULL;
    gctx C = {g, name, err, errlen};
    gguf_str model;
    int rc = get_str(&C, "tokenizer.ggml.model", &model);
    if (rc < 0) return -1;
    if (!rc) return ds_err(err, errlen, "%s: no tokenizer.ggml.model (not a GGUF with a tokenizer)", name);
    int is_gpt2 = !strcmp(model.s, "gpt2"), is_llama = !strcmp(model.s, "llama");
    if (!is_gpt2 && !is_llama)
        return ds_err(err, errlen, "%s: unsupported tokenizer.ggml.model \"%s\" (supported: \"gpt2\", \"llama\")", name,
                      model.s);
    vocab_info V;
    if (read_vocab(&C, &V)) return -1;
    cJSON *t = NULL, *c = NULL;
    if (tok) {
        t = is_gpt2 ? build_gpt2(&C, &V) : build_spm(&C, &V);
        if (!t) goto fail;
    } else {
        /* the config alone: an unknown pre-tokenizer does not stop the chat template */
        gguf_str pre;
        const pre_entry *pe = get_str(&C, "tokenizer.ggml.pre", &pre) == 1 ? find_pre(pre.s) : NULL;
        if (read_add_flags(&C, &V, is_llama || (pe && pe->add_bos), 0)) goto fail;
    }
    if (cfg && !(c = build_config(&C, &V))) goto fail;
    free(V.type);
    if (tok) *tok = t;
    if (cfg) *cfg = c;
    return 0;
fail:
    free(V.type);
    cJSON_Delete(t);
    return -1;
}

int tok_load_gguf(tokenizer **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    gguf *g;
    if (gguf_open(&g, path, 0, err, errlen)) return -1;
    cJSON *tok, *cfg;
    int rc = tok_gguf_json(g, path, &tok, &cfg, err, errlen);
    gguf_close(g);
    if (rc) return -1;
    rc = tok_load_json(out, tok, cfg, path, err, errlen);
    cJSON_Delete(tok);
    cJSON_Delete(cfg);
    return rc;
}

cJSON *tok_gguf_config_file(const char *path, char *err, size_t errlen) {
    gguf *g;
    if (gguf_open(&g, path, 0, err, errlen)) return NULL;
    cJSON *cfg;
    int rc = tok_gguf_json(g, path, NULL, &cfg, err, errlen);
    gguf_close(g);
    return rc ? NULL : cfg;
}
