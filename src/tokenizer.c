/* tokenizer: loads a Hugging Face tokenizer.json and encodes/decodes the
 * way the `tokenizers` library does, for byte-level BPE models (Qwen2/3,
 * Llama 3, GPT-2 style).
 *
 * Encoding follows HF's pipeline step by step, because exact id equality
 * with HF is the contract:
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (leftmost-longest, honouring lstrip/rstrip/single_word);
 *   2. each remaining piece is normalized (NFC, ...), then added tokens
 *      with normalized=true are cut out of the normalized text;
 *   3. pre-tokenizers (Split regex, ByteLevel) cut pieces into words;
 *   4. each word is BPE-merged by rank (ids, not strings: the merge table
 *      maps an id pair to (rank, merged id));
 *   5. the post-processor's prefix/suffix is added when asked.
 * Every component is a small tagged step parsed in one place (parse_*),
 * so new kinds (SentencePiece-style Replace/Prepend, Metaspace, ...) slot in
 * beside the existing ones. Anything not understood is refused at load,
 * naming the component: silently mis-tokenizing would be worse.
 *
 * The loaded tokenizer is immutable; all scratch lives in a per-call
 * context, so tok_encode may run on many threads at once.
 *
 * This file loads tokenizer.json and decodes; tok_encode.c encodes;
 * tok_base.c holds the containers and UTF-8 helpers (tok_internal.h). */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "json.h"
#include "tok_internal.h"
#include "util.h"

void tok_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
    tk_smap_free(&t->vocab);
    free(t->merges.slots);
    free(t->added);
    tk_smap_free(&t->added_map);
    free(t->trie_raw.n);
    free(t->trie_norm.n);
    free(t->strs.p);
    free(t->prefix.v);
    free(t->suffix.v);
    free(t->tb);
    free(t->tflags);
    free(t->tbytes.p);
    free(t);
}

int tok_vocab_size(const tokenizer *t) { return t->vocab_size; }

/* ---------------------------------------------------------------- */
/* Loading: components                                                */

typedef struct {
    const char *ctx; /* file path for messages */
    char *err;
    size_t errlen;
} lctx;

static const char *type_of(const cJSON *o) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* Oniguruma's \s and \S are Unicode White_Space; PCRE2's (with UCP) also
 * take U+180E, so they are spelled out as the White_Space property. */
static char *rewrite_regex(const char *pat) {
    sbuf b = {0};
    for (const char *p = pat; *p; p++) {
        if (*p == '\\' && p[1]) {
            if (p[1] == 's') tk_sbuf_add(&b, "\\p{White_Space}", 15);
            else if (p[1] == 'S') tk_sbuf_add(&b, "\\P{White_Space}", 15);
            else tk_sbuf_add(&b, p, 2);
            p++;
        } else {
            tk_sbuf_add(&b, p, 1);
        }
    }
    if (!b.p) tk_sbuf_add(&b, "", 0);
    return b.p;
}

static pcre2_code *compile_regex(const char *pat, int literal, lctx *L, const char *what) {
    int ecode;
    PCRE2_SIZE eoff;
    char *rw = literal ? NULL : rewrite_regex(pat);
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); /* LITERAL refuses UCP */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pat : rw), PCRE2_ZERO_TERMINATED, opts, &ecode,
                                   &eoff, NULL);
    free(rw);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        ds_err(L->err, L->errlen, "%s: %s regex does not compile at offset %zu: %s", L->ctx, what,
               (size_t)eoff, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
    return re;
}

static int parse_normalizer(tokenizer *t, const cJSON *n, lctx *L) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *ty = type_of(n);
    if (!ty) return ds_err(L->err, L->errlen, "%s: normalizer has no \"type\"", L->ctx);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(arr))
            return ds_err(L->err, L->errlen, "%s: normalizer Sequence without a \"normalizers\" list", L->ctx);
        const cJSON *x;
        cJSON_ArrayForEach(x, arr) {
            if (parse_normalizer(t, x, L)) return -1;
        }
        return 0;
    }
    enum norm_kind k;
    if (!strcmp(ty, "NFC")) k = NORM_NFC;
    else if (!strcmp(ty, "NFD")) k = NORM_NFD;
    else if (!strcmp(ty, "NFKC")) k = NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) k = NORM_NFKD;
    else return ds_err(L->err, L->errlen, "%s: unsupported normalizer type \"%s\"", L->ctx, ty);
    if (t->n_norm == MAX_STEPS) return ds_err(L->err, L->errlen, "%s: too many normalizers", L->ctx);
    t->norm[t->n_norm++] = k;
    return 0;
}

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static int parse_pre_tokenizer(tokenizer *t, const cJSON *p, lctx *L) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *ty = type_of(p);
    if (!ty) return ds_err(L->err, L->errlen, "%s: pre_tokenizer has no \"type\"", L->ctx);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(arr))
            return ds_err(L->err, L->errlen, "%s: pre_tokenizer Sequence without a \"pretokenizers\" list",
                          L->ctx);
        const cJSON *x;
        cJSON_ArrayForEach(x, arr) {
            if (parse_pre_tokenizer(t, x, L)) return -1;
        }
        return 0;
    }
    if (t->byte_level)
        return ds_err(L->err, L->errlen, "%s: pre_tokenizer \"%s\" after ByteLevel is not supported", L->ctx, ty);
    if (t->n_pre == MAX_STEPS) return ds_err(L->err, L->errlen, "%s: too many pre_tokenizers", L->ctx);
    pre_step *s = &t->pre[t->n_pre];
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "Split")) {
        s->kind = PRE_SPLIT;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *rx = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON *st = pat ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
        if (cJSON_IsString(rx)) s->re = compile_regex(rx->valuestring, 0, L, "pre_tokenizer Split");
        else if (cJSON_IsString(st)) s->re = compile_regex(st->valuestring, 1, L, "pre_tokenizer Split");
        else return ds_err(L->err, L->errlen, "%s: pre_tokenizer Split needs a \"pattern\" {\"Regex\"|\"String\"}",
                           L->ctx);
        if (!s->re) return -1;
        t->n_pre++; /* owned from here on, freed by tok_free */
        const char *beh = "Isolated";
        if (json_opt_str(p, "behavior", &beh, L->ctx, L->err, L->errlen) < 0) return -1;
        if (!strcmp(beh, "Isolated")) s->behavior = SPLIT_ISOLATED;
        else if (!strcmp(beh, "Removed")) s->behavior = SPLIT_REMOVED;
        else if (!strcmp(beh, "MergedWithPrevious")) s->behavior = SPLIT_MERGED_PREV;
        else if (!strcmp(beh, "MergedWithNext")) s->behavior = SPLIT_MERGED_NEXT;
        else if (!strcmp(beh, "Contiguous")) s->behavior = SPLIT_CONTIGUOUS;
        else return ds_err(L->err, L->errlen, "%s: unsupported Split behavior \"%s\"", L->ctx, beh);
        if (json_opt_bool(p, "invert", &s->invert, L->ctx, L->err, L->errlen) < 0) return -1;
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) {
        s->kind = PRE_BYTELEVEL;
        int use_regex = 1;
        s->add_prefix_space = 1; /* serde defaults of the HF struct */
        if (json_opt_bool(p, "add_prefix_space", &s->add_prefix_space, L->ctx, L->err, L->errlen) < 0 ||
            json_opt_bool(p, "use_regex", &use_regex, L->ctx, L->err, L->errlen) < 0)
            return -1;
        if (use_regex) {
            s->re = compile_regex(GPT2_REGEX, 0, L, "ByteLevel");
            if (!s->re) return -1;
        }
        s->behavior = SPLIT_ISOLATED;
        t->n_pre++;
        t->byte_level = 1;
        return 0;
    }
    return ds_err(L->err, L->errlen, "%s: unsupported pre_tokenizer type \"%s\"", L->ctx, ty);
}

/* Resolves the post-processor into the ids added before and after a
 * single sequence. */
static int parse_post_processor(tokenizer *t, const cJSON *p, lctx *L) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *ty = type_of(p);
    if (!ty) return ds_err(L->err, L->errlen, "%s: post_processor has no \"type\"", L->ctx);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(p, "processors");
        if (!cJSON_IsArray(arr))
            return ds_err(L->err, L->errlen, "%s: post_processor Sequence without a \"processors\" list", L->ctx);
        const cJSON *x;
        cJSON_ArrayForEach(x, arr) {
            if (parse_post_processor(t, x, L)) return -1;
        }
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) return 0; /* offsets only */
    ivec pre = {0}, suf = {0};
    int rc = 0;
    if (!strcmp(ty, "TemplateProcessing")) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
        if (!cJSON_IsArray(single)) {
            rc = ds_err(L->err, L->errlen, "%s: TemplateProcessing without a \"single\" list", L->ctx);
            goto out;
        }
        int seen_a = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, single) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
            const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
            if (sq) {
                const cJSON *sid = cJSON_GetObjectItemCaseSensitive(sq, "id");
                if (!cJSON_IsString(sid) || strcmp(sid->valuestring, "A") != 0 || seen_a) {
                    rc = ds_err(L->err, L->errlen, "%s: TemplateProcessing \"single\" must hold sequence A once",
                                L->ctx);
                    goto out;
                }
                seen_a = 1;
            } else if (sp) {
                const cJSON *sid = cJSON_GetObjectItemCaseSensitive(sp, "id");
                const cJSON *def = (cJSON_IsString(sid) && specials)
                                       ? cJSON_GetObjectItemCaseSensitive(specials, sid->valuestring)
                                       : NULL;
                const cJSON *ids = def ? cJSON_GetObjectItemCaseSensitive(def, "ids") : NULL;
                if (!cJSON_IsArray(ids)) {
                    rc = ds_err(L->err, L->errlen, "%s: TemplateProcessing special token %s%s%s is not defined",
                                L->ctx, cJSON_IsString(sid) ? "\"" : "", cJSON_IsString(sid) ? sid->valuestring : "?",
                                cJSON_IsString(sid) ? "\"" : "");
                    goto out;
                }
                const cJSON *v;
                cJSON_ArrayForEach(v, ids) {
                    if (!json_is_int(v, 0, INT32_MAX)) {
                        rc = ds_err(L->err, L->errlen, "%s: TemplateProcessing ids must be integers", L->ctx);
                        goto out;
                    }
                    tk_ivec_push(seen_a ? &suf : &pre, (int)v->valuedouble);
                }
            } else {
                rc = ds_err(L->err, L->errlen, "%s: TemplateProcessing item is neither SpecialToken nor Sequence",
                            L->ctx);
                goto out;
            }
        }
        if (!seen_a) {
            rc = ds_err(L->err, L->errlen, "%s: TemplateProcessing \"single\" lacks sequence A", L->ctx);
            goto out;
        }
    } else if (!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing")) {
        const char *keys[2] = {"cls", "sep"};
        for (int k = 0; k < 2; k++) {
            const cJSON *pair = cJSON_GetObjectItemCaseSensitive(p, keys[k]);
            const cJSON *id = cJSON_IsArray(pair) ? cJSON_GetArrayItem(pair, 1) : NULL;
            if (!json_is_int(id, 0, INT32_MAX)) {
                rc = ds_err(L->err, L->errlen, "%s: %s \"%s\" must be [token, id]", L->ctx, ty, keys[k]);
                goto out;
            }
            tk_ivec_push(k == 0 ? &pre : &suf, (int)id->valuedouble);
        }
    } else {
        rc = ds_err(L->err, L->errlen, "%s: unsupported post_processor type \"%s\"", L->ctx, ty);
        goto out;
    }
    /* a later processor wraps what the earlier ones produced */
    for (size_t i = 0; i < t->prefix.n; i++) tk_ivec_push(&pre, t->prefix.v[i]);
    free(t->prefix.v);
    t->prefix = pre;
    pre.v = NULL;
    for (size_t i = 0; i < suf.n; i++) tk_ivec_push(&t->suffix, suf.v[i]);
out:
    free(pre.v);
    free(suf.v);
    return rc;
}

static int parse_decoder(tokenizer *t, const cJSON *d, int *byte_level, lctx *L) {
    if (!d || cJSON_IsNull(d))
        return ds_err(L->err, L->errlen, "%s: a tokenizer without a decoder is not supported", L->ctx);
    const char *ty = type_of(d);
    if (!ty) return ds_err(L->err, L->errlen, "%s: decoder has no \"type\"", L->ctx);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (!cJSON_IsArray(arr))
            return ds_err(L->err, L->errlen, "%s: decoder Sequence without a \"decoders\" list", L->ctx);
        const cJSON *x;
        cJSON_ArrayForEach(x, arr) {
            if (parse_decoder(t, x, byte_level, L)) return -1;
        }
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) {
        *byte_level = 1;
        return 0;
    }
    return ds_err(L->err, L->errlen, "%s: unsupported decoder type \"%s\"", L->ctx, ty);
}


static int parse_bpe(tokenizer *t, const cJSON *m, lctx *L) {
    const char *ty = type_of(m);
    if (ty && strcmp(ty, "BPE") != 0)
        return ds_err(L->err, L->errlen, "%s: unsupported model type \"%s\"", L->ctx, ty);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!ty && !merges)
        return ds_err(L->err, L->errlen, "%s: model has no \"type\" and is not a BPE model", L->ctx);
    if (!cJSON_IsObject(vocab)) return ds_err(L->err, L->errlen, "%s: model.vocab must be an object", L->ctx);
    if (!cJSON_IsArray(merges)) return ds_err(L->err, L->errlen, "%s: model.merges must be a list", L->ctx);

    double dropout = 0;
    if (json_opt_num(m, "dropout", &dropout, L->ctx, L->err, L->errlen) < 0) return -1;
    if (dropout != 0) return ds_err(L->err, L->errlen, "%s: BPE dropout is not supported", L->ctx);
    int byte_fallback = 0;
    if (json_opt_bool(m, "byte_fallback", &byte_fallback, L->ctx, L->err, L->errlen) < 0) return -1;
    if (byte_fallback) return ds_err(L->err, L->errlen, "%s: BPE byte_fallback is not supported yet", L->ctx);
    const char *sfx = NULL, *pfx = NULL;
    if (json_opt_str(m, "continuing_subword_prefix", &pfx, L->ctx, L->err, L->errlen) < 0 ||
        json_opt_str(m, "end_of_word_suffix", &sfx, L->ctx, L->err, L->errlen) < 0)
        return -1;
    if ((pfx && *pfx) || (sfx && *sfx))
        return ds_err(L->err, L->errlen, "%s: BPE continuing_subword_prefix/end_of_word_suffix are not supported",
                      L->ctx);
    if (json_opt_bool(m, "ignore_merges", &t->ignore_merges, L->ctx, L->err, L->errlen) < 0 ||
        json_opt_bool(m, "fuse_unk", &t->fuse_unk, L->ctx, L->err, L->errlen) < 0)
        return -1;

    int nv = cJSON_GetArraySize(vocab);
    tk_smap_init(&t->vocab, (size_t)nv);
    const cJSON *v;
    cJSON_ArrayForEach(v, vocab) {
        if (!json_is_int(v, 0, TK_MAX_ID - 1))
            return ds_err(L->err, L->errlen, "%s: vocab entry \"%s\" must have an integer id in [0, %d)", L->ctx,
                          v->string, TK_MAX_ID);
        int id = (int)v->valuedouble;
        tk_smap_put(&t->vocab, v->string, strlen(v->string), id);
        if (id + 1 > t->vocab_size) t->vocab_size = id + 1;
    }

    t->unk_id = -1;
    const char *unk = NULL;
    if (json_opt_str(m, "unk_token", &unk, L->ctx, L->err, L->errlen) < 0) return -1;
    if (unk) {
        t->unk_id = tk_smap_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0) return ds_err(L->err, L->errlen, "%s: unk_token \"%s\" is not in the vocab", L->ctx, unk);
    }

    int nm = cJSON_GetArraySize(merges);
    tk_pmap_init(&t->merges, (size_t)nm);
    char *buf = NULL;
    size_t bufcap = 0;
    uint32_t rank = 0;
    const cJSON *mg;
    cJSON_ArrayForEach(mg, merges) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(mg)) { /* "a b" */
            const char *sp = strchr(mg->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return ds_err(L->err, L->errlen, "%s: merge %u \"%s\" is not two tokens separated by a space",
                              L->ctx, rank, mg->valuestring);
            a = mg->valuestring;
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (cJSON_IsArray(mg) && cJSON_GetArraySize(mg) == 2 && cJSON_IsString(cJSON_GetArrayItem(mg, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(mg, 1))) { /* ["a", "b"] */
            a = cJSON_GetArrayItem(mg, 0)->valuestring;
            b = cJSON_GetArrayItem(mg, 1)->valuestring;
            la = strlen(a);
            lb = strlen(b);
        } else {
            free(buf);
            return ds_err(L->err, L->errlen, "%s: merge %u must be \"a b\" or [\"a\", \"b\"]", L->ctx, rank);
        }
        int ia = tk_smap_get(&t->vocab, a, la), ib = tk_smap_get(&t->vocab, b, lb);
        if (la + lb > bufcap) {
            bufcap = (la + lb) * 2;
            buf = xrealloc(buf, bufcap);
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int ic = tk_smap_get(&t->vocab, buf, la + lb);
        if (ia < 0 || ib < 0 || ic < 0) {
            const char *miss = ia < 0 ? a : ib < 0 ? b : NULL;
            int ml = ia < 0 ? (int)la : ib < 0 ? (int)lb : (int)(la + lb);
            ds_err(L->err, L->errlen, "%s: merge %u uses a token not in the vocab: \"%.*s\"", L->ctx, rank, ml,
                   miss ? miss : buf);
            free(buf);
            return -1;
        }
        tk_pmap_put(&t->merges, ia, ib, rank, ic);
        rank++;
    }
    free(buf);
    return 0;
}

static int parse_added_tokens(tokenizer *t, const cJSON *arr, lctx *L) {
    if (!arr || cJSON_IsNull(arr)) return 0;
    if (!cJSON_IsArray(arr)) return ds_err(L->err, L->errlen, "%s: \"added_tokens\" must be a list", L->ctx);
    int n = cJSON_GetArraySize(arr);
    t->added = xcalloc((size_t)(n ? n : 1), sizeof *t->added);
    tk_smap_init(&t->added_map, (size_t)n);
    const cJSON *a;
    cJSON_ArrayForEach(a, arr) {
        added_tok *x = &t->added[t->n_added];
        int64_t id;
        const char *content;
        if (json_req_int(a, "id", 0, TK_MAX_ID - 1, &id, L->ctx, L->err, L->errlen) < 0 ||
            json_req_str(a, "content", &content, L->ctx, L->err, L->errlen) < 0)
            return -1;
        x->id = (int)id;
        x->normalized = -1;
        if (json_opt_bool(a, "special", &x->special, L->ctx, L->err, L->errlen) < 0 ||
            json_opt_bool(a, "normalized", &x->normalized, L->ctx, L->err, L->errlen) < 0 ||
            json_opt_bool(a, "lstrip", &x->lstrip, L->ctx, L->err, L->errlen) < 0 ||
            json_opt_bool(a, "rstrip", &x->rstrip, L->ctx, L->err, L->errlen) < 0 ||
            json_opt_bool(a, "single_word", &x->single_word, L->ctx, L->err, L->errlen) < 0)
            return -1;
        if (x->normalized < 0) x->normalized = !x->special; /* HF's default */
        size_t cl = strlen(content);
        if (!cl) continue; /* HF ignores empty added tokens */
        x->off = (uint32_t)tk_sbuf_add(&t->strs, content, cl);
        x->len = (uint32_t)cl;
        tk_smap_put(&t->added_map, content, cl, x->id);
        if (x->id + 1 > t->vocab_size) t->vocab_size = x->id + 1;
        t->n_added++;
    }
    /* Tries are built after all content is in t->strs (it may move). */
    for (int i = 0; i < t->n_added; i++) {
        added_tok *x = &t->added[i];
        const char *c = t->strs.p + x->off;
        if (!x->normalized) {
            tk_trie_add(&t->trie_raw, c, x->len, i);
        } else {
            size_t nl = 0;
            char *nc = tk_normalize(t, c, x->len, &nl);
            tk_trie_add(&t->trie_norm, nc ? nc : c, nc ? nl : x->len, i);
            free(nc);
        }
    }
    return 0;
}

/* Bytes each id decodes to: the ByteLevel decoder maps every char of the
 * token back to its byte; a token with a char outside the byte alphabet
 * stays as its UTF-8 text (as HF's decoder does). */
static void build_token_bytes(tokenizer *t) {
    uint32_t b2c[256];
    int16_t c2b[0x144];
    tk_bl_tables(b2c, c2b);
    size_t nv = (size_t)t->vocab_size;
    t->tb = xcalloc(nv * 2, sizeof *t->tb);
    t->tflags = xcalloc(nv, 1);
    sbuf *out = &t->tbytes;
    tk_sbuf_add(out, "", 0);
    for (int pass = 0; pass < 2; pass++) {
        /* vocab first, then added tokens so they take precedence for an id */
        size_t count = pass == 0 ? t->vocab.mask + 1 : (size_t)t->n_added;
        for (size_t i = 0; i < count; i++) {
            const char *s;
            size_t n;
            int id;
            if (pass == 0) {
                const smap_slot *sl = &t->vocab.slots[i];
                if (sl->len == UINT32_MAX) continue;
                s = t->vocab.keys.p + sl->off;
                n = sl->len;
                id = sl->val;
            } else {
                s = t->strs.p + t->added[i].off;
                n = t->added[i].len;
                id = t->added[i].id;
            }
            size_t o = out->n, k = 0;
            int ok = 1;
            while (k < n) {
                size_t adv;
                int32_t cp = tk_utf8_decode_at((const unsigned char *)s + k, n - k, &adv);
                if (cp < 0 || cp >= 0x144 || c2b[cp] < 0) {
                    ok = 0;
                    break;
                }
                char byte = (char)c2b[cp];
                tk_sbuf_add(out, &byte, 1);
                k += adv;
            }
            if (!ok) {
                out->n = o;
                tk_sbuf_add(out, s, n);
            }
            size_t len = out->n - o;
            t->tb[2 * (size_t)id] = (uint32_t)o;
            t->tb[2 * (size_t)id + 1] = (uint32_t)len;
            tk_sbuf_add(out, "\0", 1); /* keep each entry NUL-terminated */
            t->tflags[id] = TF_PRESENT | (pass == 1 && t->added[i].special ? TF_SPECIAL : 0);
            if (len > t->max_tok_len) t->max_tok_len = len;
        }
    }
}

static int parse_config(tokenizer *t, const char *path, lctx *L) {
    t->bos_id = t->eos_id = -1;
    if (!ds_file_exists(path)) return 0;
    cJSON *c = json_parse_file(path, L->err, L->errlen);
    if (!c) return -1;
    const char *keys[2] = {"bos_token", "eos_token"};
    int *dst[2] = {&t->bos_id, &t->eos_id};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(v)) *dst[k] = tok_token_id(t, v->valuestring);
    }
    cJSON_Delete(c);
    return 0;
}

int tok_load(tokenizer **out, const char *dir, char *err, size_t errlen) {
    *out = NULL;
    char path[4096], cpath[4096];
    if (ds_path_join(path, sizeof path, dir, "tokenizer.json") ||
        ds_path_join(cpath, sizeof cpath, dir, "tokenizer_config.json"))
        return ds_err(err, errlen, "%s: path too long", dir);
    lctx L = {path, err, errlen};
    cJSON *root = json_parse_file(path, err, errlen);
    if (!root) return -1;
    tokenizer *t = xcalloc(1, sizeof *t);
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        ds_err(err, errlen, "%s: top level must be an object", path);
        goto done;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        ds_err(err, errlen, "%s: missing \"model\"", path);
        goto done;
    }
    const char *mty = type_of(model);
    if (mty && strcmp(mty, "BPE") != 0) { /* named first: the other components follow from it */
        ds_err(err, errlen, "%s: unsupported model type \"%s\"", path, mty);
        goto done;
    }
    if (parse_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &L) ||
        parse_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &L))
        goto done;
    int dec_bl = 0;
    if (parse_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), &dec_bl, &L)) goto done;
    if (!t->byte_level || !dec_bl) {
        ds_err(err, errlen, "%s: only byte-level BPE is supported (ByteLevel pre_tokenizer and decoder)", path);
        goto done;
    }
    if (parse_bpe(t, model, &L) || parse_added_tokens(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &L))
        goto done;
    if (parse_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), &L)) goto done;
    for (size_t i = 0; i < t->prefix.n + t->suffix.n; i++) {
        int id = i < t->prefix.n ? t->prefix.v[i] : t->suffix.v[i - t->prefix.n];
        if (id >= t->vocab_size) {
            ds_err(err, errlen, "%s: post_processor adds id %d, beyond the vocabulary", path, id);
            goto done;
        }
    }
    const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(root, "padding");
    if ((trunc && !cJSON_IsNull(trunc)) || (pad && !cJSON_IsNull(pad))) {
        ds_err(err, errlen, "%s: truncation/padding settings are not supported", path);
        goto done;
    }
    if (t->vocab_size == 0) {
        ds_err(err, errlen, "%s: empty vocabulary", path);
        goto done;
    }
    /* the symbol each byte starts as */
    uint32_t b2c[256];
    int16_t c2b[0x144];
    tk_bl_tables(b2c, c2b);
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t n = tk_utf8_encode(b2c[b], u);
        t->byte_id[b] = tk_smap_get(&t->vocab, u, n);
        memcpy(t->bl_utf8[b], u, n);
        t->bl_len[b] = (uint8_t)n;
    }
    build_token_bytes(t);
    lctx LC = {cpath, err, errlen};
    if (parse_config(t, cpath, &LC)) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

/* ---------------------------------------------------------------- */
/* Lookups and decoding                                               */

const char *tok_token_bytes(const tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab_size || !(t->tflags[id] & TF_PRESENT)) return NULL;
    if (len) *len = t->tb[2 * (size_t)id + 1];
    return t->tbytes.p + t->tb[2 * (size_t)id];
}

int tok_token_id(const tokenizer *t, const char *token) {
    size_t n = strlen(token);
    int id = tk_smap_get(&t->added_map, token, n);
    return id >= 0 ? id : tk_smap_get(&t->vocab, token, n);
}

int tok_is_special(const tokenizer *t, int id) {
    return id >= 0 && id < t->vocab_size && (t->tflags[id] & TF_SPECIAL) != 0;
}

int tok_bos_id(const tokenizer *t) { return t->bos_id; }
int tok_eos_id(const tokenizer *t) { return t->eos_id; }

size_t tok_stream_cap(const tokenizer *t) { return 3 * (t->max_tok_len + 8) + 1; }

static const char REPL[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* How a byte continues a sequence led by `lead` at position `k` (1..3):
 * returns 1 if it fits. Maximal-subpart rules, as Rust's from_utf8_lossy. */
static int cont_ok(unsigned char lead, int k, unsigned char b) {
    if (k == 1) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (lead == 0xE0) lo = 0xA0;
        else if (lead == 0xED) hi = 0x9F;
        else if (lead == 0xF0) lo = 0x90;
        else if (lead == 0xF4) hi = 0x8F;
        return b >= lo && b <= hi;
    }
    return (b & 0xC0) == 0x80;
}

static int lead_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

typedef struct {
    char *p;
    size_t n, cap; /* cap includes room for the NUL */
    int full;
} obuf;

static void out_put(obuf *o, const void *d, size_t n) {
    if (o->full || o->n + n + 1 > o->cap) { /* too small a buffer: drop the rest, never split a char */
        o->full = 1;
        return;
    }
    memcpy(o->p + o->n, d, n);
    o->n += n;
}

/* Decodes bytes, replacing each maximal invalid subpart by U+FFFD. With
 * pend != NULL a trailing incomplete-but-valid prefix is stored there
 * instead of being replaced. */
static void lossy(obuf *o, const unsigned char *p, size_t n, unsigned char *pend, int *npend) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = p[i];
        if (b < 0x80) {
            size_t j = i + 1;
            while (j < n && p[j] < 0x80) j++;
            out_put(o, p + i, j - i);
            i = j;
            continue;
        }
        int L = lead_len(b);
        if (!L) {
            out_put(o, REPL, 3);
            i++;
            continue;
        }
        int k = 1;
        while (k < L && i + (size_t)k < n && cont_ok(b, k, p[i + k])) k++;
        if (k == L) {
            out_put(o, p + i, (size_t)L);
            i += (size_t)L;
        } else if (i + (size_t)k == n && pend) {
            memcpy(pend, p + i, (size_t)k);
            *npend = k;
            return;
        } else {
            out_put(o, REPL, 3);
            i += (size_t)k;
        }
    }
}

char *tok_decode(const tokenizer *t, const int *ids, int n, int skip_special, size_t *len) {
    sbuf raw = {0};
    tk_sbuf_add(&raw, "", 0);
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *b = tok_token_bytes(t, ids[i], &l);
        if (!b || (skip_special && tok_is_special(t, ids[i]))) continue;
        tk_sbuf_add(&raw, b, l);
    }
    obuf o = {xmalloc(raw.n * 3 + 1), 0, raw.n * 3 + 1, 0};
    lossy(&o, (const unsigned char *)raw.p, raw.n, NULL, NULL);
    o.p[o.n] = 0;
    free(raw.p);
    if (len) *len = o.n;
    return o.p;
}

size_t tok_stream_push(const tokenizer *t, tok_stream *s, int id, char *out, size_t cap) {
    obuf o = {out, 0, cap, 0};
    if (!cap) return 0;
    size_t n;
    const unsigned char *p = (const unsigned char *)tok_token_bytes(t, id, &n);
    if (!p) {
        out[0] = 0;
        return 0;
    }
    size_t i = 0;
    /* finish (or reject) the held-back sequence first */
    while (s->npend > 0 && i < n) {
        unsigned char lead = s->pend[0];
        int L = lead_len(lead);
        if (cont_ok(lead, s->npend, p[i])) {
            s->pend[s->npend++] = p[i++];
            if (s->npend == L) {
                out_put(&o, s->pend, (size_t)L);
                s->npend = 0;
            }
        } else {
            out_put(&o, REPL, 3);
            s->npend = 0;
        }
    }
    if (i < n) lossy(&o, p + i, n - i, s->pend, &s->npend);
    out[o.n] = 0;
    return o.n;
}

size_t tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    obuf o = {out, 0, cap, 0};
    if (!cap) return 0;
    if (s->npend) out_put(&o, REPL, 3);
    s->npend = 0;
    out[o.n] = 0;
    return o.n;
}
