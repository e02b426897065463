/* cli_quantize_vocab: the tokenizer a `dspark quantize` GGUF carries
 * (cli_quantize.h), from the checkpoint's tokenizer.json and
 * tokenizer_config.json, in the form llama.cpp's converter writes.
 *
 * Byte-level BPE files keep their merges ("gpt2"). SentencePiece-style
 * files become a "llama" vocabulary: llama.cpp's converter reads those from
 * tokenizer.model, where each piece has a score and the tokenizer merges
 * the adjacent pair whose concatenation scores highest. A checkpoint that
 * ships only tokenizer.json has the ranked merges instead, which
 * transformers derived from those scores (every split of every piece into
 * two pieces, the pieces by score). So a piece's score is recovered, up to
 * order, as minus the rank of the first merge that makes it, and order is
 * all that either reader uses: llama.cpp ranks pairs by it, and dspark
 * (text/tok_gguf.c) rebuilds the ranked merges from it. */
#include "cli/cli_quantize.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "text/tok_gguf.h"
#include "text/tokenizer.h"

/* llama.cpp's token types */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* The converter's scores for what tokenizer.model does not rank: added
   tokens, and the [PADn] fillers */
#define SCORE_ADDED (-1000.0f)
#define SCORE_PAD (-10000.0f)

/* ---- a string -> id table (cJSON finds an object's member by a linear
   scan, too slow for a 262k vocabulary looked up per merge) ---- */

typedef struct {
    const char *s;
    size_t n;
    int32_t id;
} id_slot;

typedef struct {
    id_slot *slot;
    size_t mask;
} id_map;

static void idm_init(id_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    m->slot = xcalloc(cap, sizeof *m->slot);
    m->mask = cap - 1;
}

/* s must outlive the map; a string already present keeps its first id */
static void idm_put(id_map *m, const char *s, int32_t id) {
    size_t n = strlen(s), i = (size_t)ds_fnv1a(DS_FNV_SEED, s, n) & m->mask;
    for (; m->slot[i].s; i = (i + 1) & m->mask)
        if (m->slot[i].n == n && !memcmp(m->slot[i].s, s, n)) return;
    m->slot[i] = (id_slot){s, n, id};
}

static int32_t idm_get(const id_map *m, const char *s, size_t n) {
    for (size_t i = (size_t)ds_fnv1a(DS_FNV_SEED, s, n) & m->mask; m->slot[i].s; i = (i + 1) & m->mask)
        if (m->slot[i].n == n && !memcmp(m->slot[i].s, s, n)) return m->slot[i].id;
    return -1;
}

/* ---- what kind of tokenizer.json ---- */

typedef enum { KIND_NONE, KIND_BYTE_LEVEL, KIND_SPM } tok_kind;

static const cJSON *member(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static int is_type(const cJSON *o, const char *type) {
    const cJSON *t = member(o, "type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, type);
}

/* A Replace step of pattern {"String": from} into to. */
static int is_replace(const cJSON *o, const char *from, const char *to) {
    const cJSON *s = member(member(o, "pattern"), "String"), *c = member(o, "content");
    return is_type(o, "Replace") && cJSON_IsString(s) && !strcmp(s->valuestring, from) && cJSON_IsString(c) &&
           !strcmp(c->valuestring, to);
}

/* The SentencePiece-style normalizers dspark's GGUF reader rebuilds (and
   llama.cpp's "llama" tokenizer does): spaces to U+2581, with or without
   one prepended. 1 with *prefix set, 0 for any other. */
static int spm_normalizer(const cJSON *n, int *prefix) {
    if (is_replace(n, " ", SPM_SPACE)) return *prefix = 0, 1;
    const cJSON *list = member(n, "normalizers");
    if (!is_type(n, "Sequence") || !cJSON_IsArray(list)) return 0;
    int k = cJSON_GetArraySize(list);
    const cJSON *a = cJSON_GetArrayItem(list, 0), *p = member(a, "prepend");
    if (k == 1 && is_replace(a, " ", SPM_SPACE)) return *prefix = 0, 1;
    if (k == 2 && is_type(a, "Prepend") && cJSON_IsString(p) && !strcmp(p->valuestring, SPM_SPACE) &&
        is_replace(cJSON_GetArrayItem(list, 1), " ", SPM_SPACE))
        return *prefix = 1, 1;
    return 0;
}

/* The kind of tj, and for byte-level BPE the pre-tokenizer's name (*pre);
   for KIND_NONE, why in why. */
static tok_kind classify(const cJSON *tj, int *prefix, const char **pre, char *why, size_t n) {
    const cJSON *m = member(tj, "model"), *norm = member(tj, "normalizer"), *pt = member(tj, "pre_tokenizer");
    if (!is_type(m, "BPE")) return snprintf(why, n, "its model is not BPE"), KIND_NONE;
    const cJSON *dec = member(tj, "decoder");
    char *ds = dec ? cJSON_PrintUnformatted(dec) : NULL;
    int byte_level = ds && strstr(ds, "\"ByteLevel\""), byte_fallback = ds && strstr(ds, "\"ByteFallback\"");
    free(ds);
    if (byte_level) {
        /* the Split regex names the pre-tokenizer; llama.cpp has its own
           code for each name, so one it does not name cannot be written */
        const cJSON *list = member(pt, "pretokenizers"), *e;
        const char *rx = NULL;
        cJSON_ArrayForEach(e, list) if (is_type(e, "Split") && cJSON_IsString(member(member(e, "pattern"), "Regex")))
            rx = member(member(e, "pattern"), "Regex")->valuestring;
        if (!(*pre = tok_gguf_pre_name(rx)))
            return snprintf(why, n, "its pre-tokenizer's pattern is not one a GGUF names (Qwen2's, Llama 3's)"),
                   KIND_NONE;
        return KIND_BYTE_LEVEL;
    }
    /* SentencePiece style: byte fallback, no pre-tokenizer but a split on
       " ", which finds none once the normalizer replaced every space */
    const cJSON *pat = member(member(pt, "pattern"), "String");
    int pt_inert = !pt || cJSON_IsNull(pt) || (is_type(pt, "Split") && cJSON_IsString(pat) && !strcmp(pat->valuestring, " "));
    if (byte_fallback && cJSON_IsTrue(member(m, "byte_fallback")) && !cJSON_IsTrue(member(m, "ignore_merges")) &&
        pt_inert && spm_normalizer(norm, prefix))
        return KIND_SPM;
    return snprintf(why, n, "it is neither byte-level BPE nor SentencePiece-style BPE with byte fallback"), KIND_NONE;
}

/* ---- tokens ---- */

/* A tokenizer_config.json special-token entry: a string or {"content": s}. */
static const char *special_str(const cJSON *cfg, const char *key) {
    const cJSON *v = member(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = member(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

/* The converter's does_token_look_special: added tokens it makes CONTROL
   though the file does not call them special. */
static int looks_special(const char *s) {
    size_t n = strlen(s);
    static const char *const WHOLE[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof WHOLE / sizeof *WHOLE; i++)
        if (!strcmp(s, WHOLE[i])) return 1;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return 1;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>")) return 1; /* <｜...｜> */
    return n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>';
}

/* s with every U+2581 turned into a space (malloc'd): how the converter
   stores user-defined tokens, which llama.cpp matches in the raw text */
static char *spaces_restored(const char *s) {
    char *o = xmalloc(strlen(s) + 1), *q = o;
    while (*s)
        if (!strncmp(s, SPM_SPACE, 3)) *q++ = ' ', s += 3;
        else *q++ = *s++;
    *q = 0;
    return o;
}

static int is_byte_token(const char *s) {
    static const char HEX[] = "0123456789ABCDEFabcdef";
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && strchr(HEX, s[3]) && strchr(HEX, s[4]);
}

typedef struct {
    int V;
    char **tok;    /* [V] */
    int32_t *type; /* [V] */
    float *score;  /* [V], SentencePiece style only */
} vocab;

static void vocab_free(vocab *v) {
    for (int i = 0; v->tok && i < v->V; i++) free(v->tok[i]);
    free(v->tok);
    free(v->type);
    free(v->score);
}

/* The ids of model.vocab and added_tokens, typed as the converter types
   them; ids left free are [PADn]. */
static int read_tokens(vocab *v, const cJSON *tj, tok_kind kind, const char *path, char *err, size_t errlen) {
    const cJSON *m = member(tj, "model"), *e;
    const cJSON *unk = member(m, "unk_token");
    v->tok = xcalloc((size_t)v->V, sizeof(char *));
    v->type = xcalloc((size_t)v->V, sizeof(int32_t));
    cJSON_ArrayForEach(e, member(m, "vocab")) {
        int id = cJSON_IsNumber(e) ? e->valueint : -1;
        if (id < 0 || id >= v->V)
            return ds_err(err, errlen, "%s: token id %d outside the model's vocab_size %d", path, id, v->V);
        free(v->tok[id]);
        v->tok[id] = xstrdup(e->string);
        v->type[id] = TT_NORMAL;
        if (kind == KIND_SPM && is_byte_token(e->string)) v->type[id] = TT_BYTE;
        if (kind == KIND_SPM && cJSON_IsString(unk) && !strcmp(unk->valuestring, e->string)) v->type[id] = TT_UNKNOWN;
    }
    cJSON_ArrayForEach(e, member(tj, "added_tokens")) {
        const cJSON *id = member(e, "id"), *ct = member(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(ct)) continue;
        int i = id->valueint;
        if (i < 0 || i >= v->V)
            return ds_err(err, errlen, "%s: added token id %d outside the model's vocab_size %d", path, i, v->V);
        free(v->tok[i]);
        if (cJSON_IsTrue(member(e, "special")) || looks_special(ct->valuestring)) {
            v->tok[i] = xstrdup(ct->valuestring);
            v->type[i] = TT_CONTROL;
        } else {
            v->tok[i] = spaces_restored(ct->valuestring);
            v->type[i] = TT_USER_DEFINED;
        }
    }
    for (int i = 0; i < v->V; i++)
        if (!v->tok[i]) { /* ids the tokenizer leaves free up to vocab_size */
            char b[32];
            snprintf(b, sizeof b, "[PAD%d]", i);
            v->tok[i] = xstrdup(b);
            v->type[i] = TT_UNUSED;
        }
    return 0;
}

/* One merge of model.merges: "a b" or ["a", "b"]. 0 with the parts. */
static int merge_parts(const cJSON *e, const char **a, size_t *na, const char **b, size_t *nb) {
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return -1;
        *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
        cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
        *a = cJSON_GetArrayItem(e, 0)->valuestring, *na = strlen(*a);
        *b = cJSON_GetArrayItem(e, 1)->valuestring, *nb = strlen(*b);
        return 0;
    }
    return -1;
}

/* The scores (file comment): a piece some merge makes scores minus the
   rank of the first such merge; one no merge makes (characters, bytes)
   scores below every merged piece, since nothing merges into it; added
   tokens and fillers take the converter's scores. */
static int spm_scores(vocab *v, const cJSON *tj, const char *path, char *err, size_t errlen) {
    const cJSON *vj = member(member(tj, "model"), "vocab"), *mg = member(member(tj, "model"), "merges"), *e;
    id_map ids;
    idm_init(&ids, (size_t)cJSON_GetArraySize(vj));
    cJSON_ArrayForEach(e, vj) if (cJSON_IsNumber(e)) idm_put(&ids, e->string, e->valueint);
    int64_t *first = xmalloc(sizeof(int64_t) * (size_t)v->V), rank = 0;
    for (int i = 0; i < v->V; i++) first[i] = -1;
    char *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    cJSON_ArrayForEach(e, mg) {
        const char *a, *b;
        size_t na, nb;
        if (merge_parts(e, &a, &na, &b, &nb)) {
            rc = ds_err(err, errlen, "%s: merge %lld is neither \"a b\" nor a pair of strings", path, (long long)rank);
            break;
        }
        if (na + nb + 1 > cap) buf = xrealloc(buf, cap = 2 * (na + nb + 1));
        memcpy(buf, a, na);
        memcpy(buf + na, b, nb);
        int32_t id = idm_get(&ids, buf, na + nb);
        if (id < 0 || id >= v->V || idm_get(&ids, a, na) < 0 || idm_get(&ids, b, nb) < 0) {
            rc = ds_err(err, errlen, "%s: merge %lld (\"%.*s\" + \"%.*s\") joins tokens the vocabulary lacks", path,
                        (long long)rank, (int)(na > 40 ? 40 : na), a, (int)(nb > 40 ? 40 : nb), b);
            break;
        }
        if (first[id] < 0) first[id] = rank;
        rank++;
    }
    if (!rc && rank >= (1 << 24))
        rc = ds_err(err, errlen, "%s: %lld merges (a float score ranks at most 2^24)", path, (long long)rank);
    v->score = xmalloc(sizeof(float) * (size_t)v->V);
    for (int i = 0; i < v->V; i++)
        v->score[i] = v->type[i] == TT_UNUSED                                  ? SCORE_PAD
                      : v->type[i] == TT_CONTROL || v->type[i] == TT_USER_DEFINED ? SCORE_ADDED
                      : first[i] >= 0                                          ? -(float)first[i]
                                                                               : -(float)rank - 1.0f;
    free(buf);
    free(first);
    free(ids.slot);
    return rc;
}

static int write_merges(gguf_writer *w, const cJSON *tj, const char *path, char *err, size_t errlen) {
    const cJSON *mg = member(member(tj, "model"), "merges"), *e;
    int n = 0, cap = cJSON_GetArraySize(mg);
    char **merges = xcalloc((size_t)cap + 1, sizeof(char *));
    int rc = 0;
    cJSON_ArrayForEach(e, mg) {
        const char *a, *b;
        size_t na, nb;
        if (merge_parts(e, &a, &na, &b, &nb)) {
            rc = ds_err(err, errlen, "%s: merge %d is neither \"a b\" nor a pair of strings", path, n);
            break;
        }
        merges[n] = xmalloc(na + nb + 2);
        snprintf(merges[n++], na + nb + 2, "%.*s %.*s", (int)na, a, (int)nb, b);
    }
    if (!rc) gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, NULL, (uint64_t)n);
    for (int i = 0; i < n; i++) free(merges[i]);
    free(merges);
    return rc;
}

/* ---- specials, flags, template ---- */

static int add_specials(gguf_writer *w, const char *dir, const vocab *v, const model_config *c, FILE *log, char *err,
                        size_t errlen) {
    char cpath[4096];
    size_t len;
    cJSON *tc = NULL;
    if (ds_path_join(cpath, sizeof cpath, dir, "tokenizer_config.json") == 0 && ds_file_exists(cpath)) {
        char *ct = ds_read_file(cpath, &len, err, errlen);
        if (!ct) return -1;
        tc = cJSON_ParseWithLength(ct, len);
        free(ct);
        if (!tc) return ds_err(err, errlen, "%s: not valid JSON", cpath);
    }
    /* special ids: tokenizer_config.json's tokens, else config.json's ids */
    static const struct { const char *cfg, *key; } SPECIAL[] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"}, {"pad_token", "tokenizer.ggml.padding_token_id"},
    };
    for (int s = 0; s < 4; s++) {
        const char *str = tc ? special_str(tc, SPECIAL[s].cfg) : NULL;
        int id = -1;
        for (int i = 0; str && i < v->V && id < 0; i++)
            if (v->type[i] != TT_UNUSED && !strcmp(v->tok[i], str)) id = i;
        if (id < 0 && s == 0) id = c->bos_token_id;
        if (id < 0 && s == 1 && c->n_eos) id = c->eos_token_ids[0];
        if (id >= 0 && id < v->V) gguf_w_u32(w, SPECIAL[s].key, (uint32_t)id);
    }
    /* add_bos_token / add_eos_token: what dspark's tokenizer (HF's
       add_special_tokens rule) puts around an empty text */
    tokenizer *tok;
    char terr[512];
    if (tok_load(&tok, dir, terr, sizeof terr) == 0) {
        int *ids = NULL, bos = tok_bos_id(tok), eos = tok_eos_id(tok);
        int n = tok_encode(tok, "", 0, 1, &ids, terr, sizeof terr);
        int add_bos = n > 0 && bos >= 0 && ids[0] == bos;
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
        gguf_w_bool(w, "tokenizer.ggml.add_eos_token", n > add_bos && eos >= 0 && ids[n - 1] == eos);
        free(ids);
        tok_free(tok);
    } else if (log) {
        fprintf(log, "dspark: note: tokenizer not loadable (%s); add_bos_token left unset\n", terr);
    }
    int rc = 0;
    const cJSON *tmpl = tc ? member(tc, "chat_template") : NULL;
    if (cJSON_IsArray(tmpl)) { /* named templates: the "default" one */
        const cJSON *it, *found = NULL;
        cJSON_ArrayForEach(it, tmpl) if (cJSON_IsString(member(it, "name")) &&
                                         !strcmp(member(it, "name")->valuestring, "default"))
            found = member(it, "template");
        tmpl = found;
    }
    if (cJSON_IsString(tmpl)) gguf_w_str(w, "tokenizer.chat_template", tmpl->valuestring);
    else if (ds_path_join(cpath, sizeof cpath, dir, "chat_template.jinja") == 0 && ds_file_exists(cpath)) {
        char *jt = ds_read_file(cpath, &len, err, errlen);
        if (jt) gguf_w_str_n(w, "tokenizer.chat_template", jt, len);
        else rc = -1;
        free(jt);
    }
    cJSON_Delete(tc);
    return rc;
}

int quantize_add_tokenizer(gguf_writer *w, const char *dir, const model_config *c, FILE *log, char *err,
                           size_t errlen) {
    char path[4096], why[160];
    if (ds_path_join(path, sizeof path, dir, "tokenizer.json") != 0 || !ds_file_exists(path)) {
        if (log) fprintf(log, "dspark: note: %s has no tokenizer.json; the GGUF carries no tokenizer\n", dir);
        return 0;
    }
    size_t len;
    char *text = ds_read_file(path, &len, err, errlen);
    if (!text) return -1;
    cJSON *tj = cJSON_ParseWithLength(text, len);
    free(text);
    if (!tj) return ds_err(err, errlen, "%s: not valid JSON", path);
    int prefix = 0, rc = -1;
    const char *pre = NULL;
    tok_kind kind = classify(tj, &prefix, &pre, why, sizeof why);
    vocab v = {.V = c->vocab_size};
    if (kind == KIND_NONE) {
        if (log) fprintf(log, "dspark: note: %s: %s; the GGUF carries no tokenizer\n", path, why);
        rc = 0;
        goto done;
    }
    if (read_tokens(&v, tj, kind, path, err, errlen)) goto done;
    if (kind == KIND_SPM && spm_scores(&v, tj, path, err, errlen)) goto done;
    gguf_w_str(w, "tokenizer.ggml.model", kind == KIND_SPM ? "llama" : "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", kind == KIND_SPM ? "default" : pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, NULL, (uint64_t)v.V);
    if (kind == KIND_SPM) {
        gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_F32, v.score, (uint64_t)v.V);
        gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", prefix);
    }
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_I32, v.type, (uint64_t)v.V);
    if (kind == KIND_BYTE_LEVEL && write_merges(w, tj, path, err, errlen)) goto done;
    rc = add_specials(w, dir, &v, c, log, err, errlen);
done:
    vocab_free(&v);
    cJSON_Delete(tj);
    return rc;
}
