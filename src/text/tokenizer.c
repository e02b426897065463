/* tokenizer: loads a Hugging Face tokenizer.json and encodes/decodes the
 * way the `tokenizers` library does, for BPE models: byte-level (Qwen2/3,
 * Llama 3, GPT-2 style) and SentencePiece-style (Gemma 3, Llama 2,
 * Mistral: ▁ for spaces, <0xNN> byte fallback).
 *
 * Encoding follows HF's pipeline step by step, because exact id equality
 * with HF is the contract:
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (leftmost-longest, honouring lstrip/rstrip/single_word);
 *   2. each remaining piece is normalized (NFC.., Replace, Prepend), then
 *      added tokens with normalized=true are cut out of the normalized text;
 *   3. pre-tokenizers (Split regex, ByteLevel, Metaspace) cut pieces into
 *      words;
 *   4. each word is BPE-merged by rank (ids, not strings: the merge table
 *      maps an id pair to (rank, merged id)); SentencePiece-style words
 *      start as characters, unknown ones as <0xNN> tokens or unk;
 *   5. the post-processor's prefix/suffix is added when asked (or, for the
 *      Llama/Gemma tokenizer classes, tokenizer_config.json's
 *      add_bos_token/add_eos_token, as transformers does).
 * Decoding runs HF's decoder chain: per-token steps (ByteLevel, Replace,
 * ByteFallback, Metaspace, Strip) precomputed per id, then the joins
 * (Fuse, a ByteFallback run of bytes, a Strip of the fused text).
 * Every component is a small tagged step parsed in one place (parse_*).
 * Anything not understood is refused at load, naming the component:
 * silently mis-tokenizing would be worse.
 *
 * The loaded tokenizer is immutable; all scratch lives in a per-call
 * context, so tok_encode may run on many threads at once.
 *
 * This file loads tokenizer.json and decodes; tok_encode.c encodes;
 * tok_base.c holds the containers and UTF-8 helpers (tok_internal.h). */
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/json.h"
#include "text/tok_gguf.h"
#include "text/tok_internal.h"
#include "base/util.h"

void tok_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
    for (int i = 0; i < t->n_norm; i++) {
        pcre2_code_free(t->norm[i].re);
        free(t->norm[i].pat);
        free(t->norm[i].with);
    }
    for (int i = 0; i < t->n_dec; i++) {
        free(t->dec[i].pat);
        free(t->dec[i].with);
    }
    free(t->bmp_id);
    free(t->tr);
    free(t->traw.p);
    tk_smap_free(&t->vocab);
    free(t->merges.slots);
    free(t->cross.slots);
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

/* A Replace/Split "pattern": {"String": literal} or {"Regex": regex}. */
static int parse_pattern(const cJSON *o, const char **lit, const char **rx, lctx *L, const char *what) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const cJSON *r = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
    const cJSON *st = pat ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
    if (cJSON_IsString(r)) *rx = r->valuestring;
    else if (cJSON_IsString(st)) *lit = st->valuestring;
    else return ds_err(L->err, L->errlen, "%s: %s needs a \"pattern\" {\"Regex\"|\"String\"}", L->ctx, what);
    return 0;
}

/* Metaspace's replacement char and prepend_scheme (or the older
 * add_prefix_space), with HF's defaults. */
static int parse_metaspace(const cJSON *o, char rep[8], int *rep_len, int *prepend, lctx *L, const char *what) {
    const char *r = "\xe2\x96\x81", *scheme = NULL;
    int aps = 1;
    if (json_opt_str(o, "replacement", &r, L->ctx, L->err, L->errlen) < 0 ||
        json_opt_str(o, "prepend_scheme", &scheme, L->ctx, L->err, L->errlen) < 0 ||
        json_opt_bool(o, "add_prefix_space", &aps, L->ctx, L->err, L->errlen) < 0)
        return -1;
    size_t rl = strlen(r), adv = 0;
    if (rl) tk_utf8_decode_at((const unsigned char *)r, rl, &adv);
    if (!rl || rl > 4 || adv != rl)
        return ds_err(L->err, L->errlen, "%s: %s replacement must be one character", L->ctx, what);
    memcpy(rep, r, rl);
    *rep_len = (int)rl;
    /* as HF's deserializer: prepend_scheme defaults to "always", and
     * add_prefix_space=false must come with "never" */
    if (!scheme || !strcmp(scheme, "always")) *prepend = PREPEND_ALWAYS;
    else if (!strcmp(scheme, "first")) *prepend = PREPEND_FIRST;
    else if (!strcmp(scheme, "never")) *prepend = PREPEND_NEVER;
    else return ds_err(L->err, L->errlen, "%s: unsupported %s prepend_scheme \"%s\"", L->ctx, what, scheme);
    if (!aps && *prepend != PREPEND_NEVER)
        return ds_err(L->err, L->errlen, "%s: %s add_prefix_space does not match declared prepend_scheme", L->ctx,
                      what);
    return 0;
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
    if (t->n_norm == MAX_STEPS) return ds_err(L->err, L->errlen, "%s: too many normalizers", L->ctx);
    norm_step *st = &t->norm[t->n_norm];
    memset(st, 0, sizeof *st);
    if (!strcmp(ty, "NFC")) st->kind = NORM_NFC;
    else if (!strcmp(ty, "NFD")) st->kind = NORM_NFD;
    else if (!strcmp(ty, "NFKC")) st->kind = NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) st->kind = NORM_NFKD;
    else if (!strcmp(ty, "Replace")) {
        st->kind = NORM_REPLACE;
        const char *lit = NULL, *rx = NULL, *content;
        if (parse_pattern(n, &lit, &rx, L, "normalizer Replace") ||
            json_req_str(n, "content", &content, L->ctx, L->err, L->errlen) < 0)
            return -1;
        if (rx) {
            st->re = compile_regex(rx, 0, L, "normalizer Replace");
            if (!st->re) return -1;
        } else {
            st->pat = xstrdup(lit);
            st->pat_len = strlen(lit);
        }
        st->with = xstrdup(content);
        st->with_len = strlen(content);
    } else if (!strcmp(ty, "Prepend")) {
        st->kind = NORM_PREPEND;
        const char *pre;
        if (json_req_str(n, "prepend", &pre, L->ctx, L->err, L->errlen) < 0) return -1;
        st->with = xstrdup(pre);
        st->with_len = strlen(pre);
    } else return ds_err(L->err, L->errlen, "%s: unsupported normalizer type \"%s\"", L->ctx, ty);
    t->n_norm++;
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
    if (!strcmp(ty, "Metaspace")) {
        s->kind = PRE_METASPACE;
        s->split = 1;
        if (parse_metaspace(p, s->rep, &s->rep_len, &s->prepend, L, "pre_tokenizer Metaspace") ||
            json_opt_bool(p, "split", &s->split, L->ctx, L->err, L->errlen) < 0)
            return -1;
        t->n_pre++;
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

static int parse_decoder(tokenizer *t, const cJSON *d, lctx *L) {
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
            if (parse_decoder(t, x, L)) return -1;
        }
        return 0;
    }
    if (t->n_dec == MAX_STEPS) return ds_err(L->err, L->errlen, "%s: too many decoders", L->ctx);
    dec_step *st = &t->dec[t->n_dec];
    memset(st, 0, sizeof *st);
    /* After Fuse (or ByteLevel, which fuses) there is one token: only a
     * Strip of the whole text is supported there. */
    if (t->dec_fuse && strcmp(ty, "Strip") != 0 && strcmp(ty, "Fuse") != 0)
        return ds_err(L->err, L->errlen, "%s: decoder \"%s\" after Fuse/ByteLevel is not supported", L->ctx, ty);
    if (!strcmp(ty, "ByteLevel")) {
        st->kind = DEC_BYTELEVEL;
        t->dec_fuse = 1;
    } else if (!strcmp(ty, "Fuse")) {
        st->kind = DEC_FUSE;
        t->dec_fuse = 1;
    } else if (!strcmp(ty, "ByteFallback")) {
        st->kind = DEC_BYTEFALLBACK;
    } else if (!strcmp(ty, "Replace")) {
        st->kind = DEC_REPLACE;
        const char *lit = NULL, *rx = NULL, *content;
        if (parse_pattern(d, &lit, &rx, L, "decoder Replace") ||
            json_req_str(d, "content", &content, L->ctx, L->err, L->errlen) < 0)
            return -1;
        if (rx || !*lit)
            return ds_err(L->err, L->errlen, "%s: decoder Replace supports a non-empty \"String\" pattern only",
                          L->ctx);
        st->pat = xstrdup(lit);
        st->pat_len = strlen(lit);
        st->with = xstrdup(content);
        st->with_len = strlen(content);
    } else if (!strcmp(ty, "Strip")) {
        st->kind = DEC_STRIP;
        const char *content;
        int64_t a, b;
        if (json_req_str(d, "content", &content, L->ctx, L->err, L->errlen) < 0 ||
            json_req_int(d, "start", 0, 1 << 20, &a, L->ctx, L->err, L->errlen) < 0 ||
            json_req_int(d, "stop", 0, 1 << 20, &b, L->ctx, L->err, L->errlen) < 0)
            return -1;
        size_t cl = strlen(content), adv = 0;
        if (cl) st->content = tk_utf8_decode_at((const unsigned char *)content, cl, &adv);
        if (!cl || adv != cl || st->content < 0)
            return ds_err(L->err, L->errlen, "%s: decoder Strip content must be one character", L->ctx);
        st->start = (int)a;
        st->stop = (int)b;
        st->after_fuse = t->dec_fuse;
    } else if (!strcmp(ty, "Metaspace")) {
        st->kind = DEC_METASPACE;
        char rep[8];
        int rl;
        if (parse_metaspace(d, rep, &rl, &st->prepend, L, "decoder Metaspace")) return -1;
        size_t adv;
        st->content = tk_utf8_decode_at((const unsigned char *)rep, (size_t)rl, &adv);
    } else {
        return ds_err(L->err, L->errlen, "%s: unsupported decoder type \"%s\"", L->ctx, ty);
    }
    t->n_dec++;
    return 0;
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
    if (json_opt_bool(m, "byte_fallback", &t->byte_fallback, L->ctx, L->err, L->errlen) < 0) return -1;
    if (t->byte_fallback && t->byte_level)
        return ds_err(L->err, L->errlen, "%s: BPE byte_fallback with a ByteLevel pre_tokenizer is not supported",
                      L->ctx);
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
        if (!t->byte_level) {
            if (!t->cross.slots) tk_pmap_init(&t->cross, 1 << 12);
            size_t adv;
            int32_t x = tk_last_char(a, la), y = tk_utf8_decode_at((const unsigned char *)b, lb, &adv);
            if (x >= 0 && y >= 0 && !tk_pmap_get(&t->cross, x, y)) {
                if ((t->cross_n + 1) * 2 > t->cross.mask + 1) tk_pmap_grow(&t->cross);
                tk_pmap_put(&t->cross, x, y, 0, 0);
                t->cross_n++;
            }
        }
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

/* A <0xNN> token (the ByteFallback decoder's test): its byte, or -1. */
static int fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The decoder's per-token steps (those before Fuse) applied to one token
 * string: what HF's decode_chain makes of it. first: the token is the
 * first one decoded (Metaspace drops its replacement chars there).
 * Appends to out; *byte gets the byte of a ByteFallback token, else -1. */
static void token_text(const tokenizer *t, const char *s, size_t n, int first, sbuf *out, int *byte) {
    const int16_t *c2b = t->c2b;
    sbuf cur = {0}, nxt = {0};
    tk_sbuf_add(&cur, s, n);
    *byte = -1;
    for (int k = 0; k < t->n_dec; k++) {
        const dec_step *st = &t->dec[k];
        if (st->kind == DEC_FUSE || (st->kind == DEC_STRIP && st->after_fuse)) break;
        nxt.n = 0;
        tk_sbuf_add(&nxt, "", 0);
        size_t i = 0;
        switch (st->kind) {
        case DEC_BYTEFALLBACK: {
            int b = fallback_byte(cur.p, cur.n);
            if (b >= 0) {
                char ch = (char)b;
                *byte = b;
                tk_sbuf_add(&nxt, &ch, 1);
            } else {
                tk_sbuf_add(&nxt, cur.p, cur.n);
            }
            break;
        }
        case DEC_BYTELEVEL: {
            int ok = 1;
            while (i < cur.n) {
                size_t adv;
                int32_t cp = tk_utf8_decode_at((const unsigned char *)cur.p + i, cur.n - i, &adv);
                if (cp < 0 || cp >= 0x144 || c2b[cp] < 0) {
                    ok = 0;
                    break;
                }
                char ch = (char)c2b[cp];
                tk_sbuf_add(&nxt, &ch, 1);
                i += adv;
            }
            if (!ok) { /* a char outside the byte alphabet: the token stays as it is */
                nxt.n = 0;
                tk_sbuf_add(&nxt, cur.p, cur.n);
            }
            break;
        }
        case DEC_REPLACE: {
            const char *p;
            while (i < cur.n && (p = memmem(cur.p + i, cur.n - i, st->pat, st->pat_len))) {
                tk_sbuf_add(&nxt, cur.p + i, (size_t)(p - cur.p) - i);
                tk_sbuf_add(&nxt, st->with, st->with_len);
                i = (size_t)(p - cur.p) + st->pat_len;
            }
            tk_sbuf_add(&nxt, cur.p + i, cur.n - i);
            break;
        }
        case DEC_METASPACE:
            while (i < cur.n) {
                size_t adv;
                int32_t cp = tk_utf8_decode_at((const unsigned char *)cur.p + i, cur.n - i, &adv);
                if (cp == st->content) {
                    if (!(first && st->prepend != PREPEND_NEVER)) tk_sbuf_add(&nxt, " ", 1);
                } else {
                    tk_sbuf_add(&nxt, cur.p + i, adv);
                }
                i += adv;
            }
            break;
        case DEC_STRIP: { /* per token (no Fuse before it) */
            size_t a = 0, e = cur.n;
            for (int j = 0; j < st->start && a < e; j++) {
                size_t adv;
                if (tk_utf8_decode_at((const unsigned char *)cur.p + a, e - a, &adv) != st->content) break;
                a += adv;
            }
            for (int j = 0; j < st->stop && e > a; j++) {
                size_t q = e - 1;
                while (q > a && ((unsigned char)cur.p[q] & 0xC0) == 0x80) q--;
                size_t adv;
                if (tk_utf8_decode_at((const unsigned char *)cur.p + q, e - q, &adv) != st->content) break;
                e = q;
            }
            tk_sbuf_add(&nxt, cur.p + a, e - a);
            break;
        }
        case DEC_FUSE: break;
        }
        sbuf tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    tk_sbuf_add(out, cur.p, cur.n);
    free(cur.p);
    free(nxt.p);
}

/* Each id's token string (traw: what the decoder chain starts from) and
 * the bytes it decodes to in the middle of a text (tbytes: ByteLevel
 * chars mapped back to bytes, ▁ to spaces, <0xNN> to its byte, ...). */
static void build_token_bytes(tokenizer *t) {
    size_t nv = (size_t)t->vocab_size;
    t->tb = xcalloc(nv * 2, sizeof *t->tb);
    t->tr = xcalloc(nv * 2, sizeof *t->tr);
    t->tflags = xcalloc(nv, 1);
    sbuf *out = &t->tbytes;
    tk_sbuf_add(out, "", 0);
    tk_sbuf_add(&t->traw, "", 0);
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
            size_t ro = tk_sbuf_add(&t->traw, s, n);
            tk_sbuf_add(&t->traw, "\0", 1);
            t->tr[2 * (size_t)id] = (uint32_t)ro;
            t->tr[2 * (size_t)id + 1] = (uint32_t)n;
            size_t o = out->n;
            int byte;
            token_text(t, t->traw.p + ro, n, 0, out, &byte);
            size_t len = out->n - o;
            t->tb[2 * (size_t)id] = (uint32_t)o;
            t->tb[2 * (size_t)id + 1] = (uint32_t)len;
            tk_sbuf_add(out, "\0", 1); /* keep each entry NUL-terminated */
            t->tflags[id] = (uint8_t)(TF_PRESENT | (pass == 1 && t->added[i].special ? TF_SPECIAL : 0) |
                                      (byte >= 0 ? TF_BYTE : 0));
            if (len > t->max_tok_len) t->max_tok_len = len;
        }
    }
}

/* tokenizer_config.json (c may be NULL: no file). */
static int parse_config(tokenizer *t, const cJSON *c, lctx *L) {
    t->bos_id = t->eos_id = -1;
    if (!c) return 0;
    const char *keys[2] = {"bos_token", "eos_token"};
    int *dst[2] = {&t->bos_id, &t->eos_id};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(v)) *dst[k] = tok_token_id(t, v->valuestring);
    }
    /* transformers' Llama and Gemma tokenizer classes rebuild the
     * post-processor from add_bos_token/add_eos_token (defaults true,
     * false) and the config's bos/eos; the other classes keep
     * tokenizer.json's. */
    static const char *rebuild[] = {"LlamaTokenizer", "LlamaTokenizerFast", "GemmaTokenizer",
                                    "GemmaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast"};
    const char *cls = NULL;
    int rc = json_opt_str(c, "tokenizer_class", &cls, L->ctx, L->err, L->errlen) < 0 ? -1 : 0;
    int add_bos = 1, add_eos = 0;
    if (!rc && (json_opt_bool(c, "add_bos_token", &add_bos, L->ctx, L->err, L->errlen) < 0 ||
                json_opt_bool(c, "add_eos_token", &add_eos, L->ctx, L->err, L->errlen) < 0))
        rc = -1;
    for (size_t i = 0; !rc && cls && i < sizeof rebuild / sizeof *rebuild; i++) {
        if (strcmp(cls, rebuild[i]) != 0) continue;
        if ((add_bos && t->bos_id < 0) || (add_eos && t->eos_id < 0)) {
            rc = ds_err(L->err, L->errlen, "%s: add_%s_token is set but %s_token is missing or unknown", L->ctx,
                        add_bos && t->bos_id < 0 ? "bos" : "eos", add_bos && t->bos_id < 0 ? "bos" : "eos");
            break;
        }
        t->prefix.n = t->suffix.n = 0;
        if (add_bos) tk_ivec_push(&t->prefix, t->bos_id);
        if (add_eos) tk_ivec_push(&t->suffix, t->eos_id);
        break;
    }
    return rc;
}

/* Builds the tokenizer from parsed tokenizer.json (root) and
 * tokenizer_config.json (config, or NULL); path and cpath name them in
 * messages. */
static int load_parsed(tokenizer **out, const cJSON *root, const char *path, const cJSON *config, const char *cpath,
                       char *err, size_t errlen) {
    lctx L = {path, err, errlen};
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
    if (parse_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), &L)) goto done;
    t->dec_bytelevel = t->n_dec == 1 && t->dec[0].kind == DEC_BYTELEVEL;
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
    /* the symbol each byte (byte-level) or character starts as */
    uint32_t b2c[256];
    tk_bl_tables(b2c, t->c2b);
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t n = tk_utf8_encode(b2c[b], u);
        t->byte_id[b] = tk_smap_get(&t->vocab, u, n);
        memcpy(t->bl_utf8[b], u, n);
        t->bl_len[b] = (uint8_t)n;
        char fb[8];
        snprintf(fb, sizeof fb, "<0x%02X>", b); /* Rust's format!("<{b:#04X}>") */
        t->fb_id[b] = t->byte_fallback ? tk_smap_get(&t->vocab, fb, 6) : -1;
    }
    if (!t->byte_level) {
        /* two vocab strings with one id would let a merge join chars that
         * the cross table does not name: no splitting of words then */
        uint8_t *seen = xcalloc((size_t)t->vocab_size, 1);
        for (size_t i = 0; i <= t->vocab.mask; i++) {
            const smap_slot *sl = &t->vocab.slots[i];
            if (sl->len == UINT32_MAX) continue;
            if (seen[sl->val]++) t->no_split = 1;
        }
        free(seen);
        t->bmp_id = xmalloc(0x10000 * sizeof *t->bmp_id);
        for (int cp = 0; cp < 0x10000; cp++) t->bmp_id[cp] = -1;
        for (size_t i = 0; i <= t->vocab.mask; i++) {
            const smap_slot *sl = &t->vocab.slots[i];
            if (sl->len == UINT32_MAX || sl->len > 3) continue;
            size_t adv;
            int32_t cp = tk_utf8_decode_at((const unsigned char *)t->vocab.keys.p + sl->off, sl->len, &adv);
            if (cp >= 0 && cp < 0x10000 && adv == sl->len) t->bmp_id[cp] = sl->val;
        }
    }
    build_token_bytes(t);
    lctx LC = {cpath, err, errlen};
    if (parse_config(t, config, &LC)) goto done;
    rc = 0;
done:
    if (rc) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int tok_load(tokenizer **out, const char *dir, char *err, size_t errlen) {
    *out = NULL;
    if (tok_gguf_is_file(dir)) return tok_load_gguf(out, dir, err, errlen);
    char path[4096], cpath[4096];
    if (ds_path_join(path, sizeof path, dir, "tokenizer.json") ||
        ds_path_join(cpath, sizeof cpath, dir, "tokenizer_config.json"))
        return ds_err(err, errlen, "%s: path too long", dir);
    cJSON *root = json_parse_file(path, err, errlen);
    if (!root) return -1;
    cJSON *config = NULL;
    if (ds_file_exists(cpath) && !(config = json_parse_file(cpath, err, errlen))) {
        cJSON_Delete(root);
        return -1;
    }
    int rc = load_parsed(out, root, path, config, cpath, err, errlen);
    cJSON_Delete(root);
    cJSON_Delete(config);
    return rc;
}

int tok_load_buf(tokenizer **out, const char *json, size_t len, const char *config, size_t config_len, char *err,
                 size_t errlen) {
    *out = NULL;
    cJSON *root = json_parse(json, len, "tokenizer.json", err, errlen);
    if (!root) return -1;
    cJSON *c = NULL;
    if (config && !(c = json_parse(config, config_len, "tokenizer_config.json", err, errlen))) {
        cJSON_Delete(root);
        return -1;
    }
    int rc = load_parsed(out, root, "tokenizer.json", c, "tokenizer_config.json", err, errlen);
    cJSON_Delete(root);
    cJSON_Delete(c);
    return rc;
}

int tok_load_json(tokenizer **out, const cJSON *json, const cJSON *config, const char *name, char *err,
                  size_t errlen) {
    *out = NULL;
    return load_parsed(out, json, name, config, name, err, errlen);
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

static void out_repl(obuf *o, int k) {
    for (int i = 0; i < k; i++) out_put(o, REPL, 3);
}

/* The index of the Strip step acting on the fused text, or -1. */
static int fused_strip(const tokenizer *t) {
    for (int k = 0; k < t->n_dec; k++)
        if (t->dec[k].kind == DEC_STRIP && t->dec[k].after_fuse) return k;
    return -1;
}

static int has_dec(const tokenizer *t, enum dec_kind kind) {
    for (int k = 0; k < t->n_dec; k++)
        if (t->dec[k].kind == kind) return 1;
    return 0;
}

/* HF's decode: the tokens (special ones dropped if asked) go through the
 * decoder chain and are joined. ByteLevel maps every token's chars back
 * to bytes and decodes the lot lossily; ByteFallback turns each run of
 * <0xNN> tokens into its text if valid UTF-8, else one U+FFFD per byte;
 * Metaspace drops the replacement chars of the first token. */
char *tok_decode(const tokenizer *t, const int *ids, int n, int skip_special, size_t *len) {
    sbuf raw = {0};
    tk_sbuf_add(&raw, "", 0);
    int first = 1, meta = has_dec(t, DEC_METASPACE);
    size_t run = 0; /* start of the current run of byte tokens in raw, or SIZE_MAX */
    run = SIZE_MAX;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *b = tok_token_bytes(t, ids[i], &l);
        if (!b || (skip_special && tok_is_special(t, ids[i]))) continue;
        int is_byte = (t->tflags[ids[i]] & TF_BYTE) != 0;
        if (!is_byte && run != SIZE_MAX) { /* a run of byte tokens ends */
            if (tk_utf8_check(raw.p + run, raw.n - run) != raw.n - run) {
                size_t nb = raw.n - run;
                raw.n = run;
                for (size_t k = 0; k < nb; k++) tk_sbuf_add(&raw, REPL, 3);
            }
            run = SIZE_MAX;
        }
        if (is_byte && run == SIZE_MAX) run = raw.n;
        if (first && meta) {
            int byte;
            token_text(t, t->traw.p + t->tr[2 * (size_t)ids[i]], t->tr[2 * (size_t)ids[i] + 1], 1, &raw, &byte);
        } else {
            tk_sbuf_add(&raw, b, l);
        }
        first = 0;
    }
    if (run != SIZE_MAX && tk_utf8_check(raw.p + run, raw.n - run) != raw.n - run) {
        size_t nb = raw.n - run;
        raw.n = run;
        for (size_t k = 0; k < nb; k++) tk_sbuf_add(&raw, REPL, 3);
    }
    obuf o = {xmalloc(raw.n * 3 + 1), 0, raw.n * 3 + 1, 0};
    lossy(&o, (const unsigned char *)raw.p, raw.n, NULL, NULL);
    o.p[o.n] = 0;
    free(raw.p);
    int k = fused_strip(t);
    if (k >= 0) { /* HF's Strip on the one fused token: up to start chars at the front, stop at the end */
        const dec_step *st = &t->dec[k];
        size_t a = 0, e = o.n;
        for (int j = 0; j < st->start && a < e; j++) {
            size_t adv;
            if (tk_utf8_decode_at((const unsigned char *)o.p + a, e - a, &adv) != st->content) break;
            a += adv;
        }
        for (int j = 0; j < st->stop && e > a; j++) {
            size_t q = e - 1;
            while (q > a && ((unsigned char)o.p[q] & 0xC0) == 0x80) q--;
            size_t adv;
            if (tk_utf8_decode_at((const unsigned char *)o.p + q, e - q, &adv) != st->content) break;
            e = q;
        }
        memmove(o.p, o.p + a, e - a);
        o.n = e - a;
        o.p[o.n] = 0;
    }
    if (len) *len = o.n;
    return o.p;
}

/* Drops the leading chars a fused Strip removes from the start of the
 * stream's output (out[0..n)); returns the new length. */
static size_t stream_strip(const tokenizer *t, tok_stream *s, char *out, size_t n) {
    int k = fused_strip(t);
    if (k < 0 || s->lead < 0) return n;
    const dec_step *st = &t->dec[k];
    size_t a = 0;
    while (a < n) {
        size_t adv;
        if (s->lead >= st->start || tk_utf8_decode_at((const unsigned char *)out + a, n - a, &adv) != st->content) {
            s->lead = -1;
            break;
        }
        a += adv;
        s->lead++;
    }
    memmove(out, out + a, n - a);
    out[n - a] = 0;
    return n - a;
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
    s->per_byte = has_dec(t, DEC_BYTEFALLBACK);
    int is_byte = (t->tflags[id] & TF_BYTE) != 0;
    sbuf first = {0};
    if (s->ntok == 0 && has_dec(t, DEC_METASPACE)) { /* the first token decodes differently */
        int byte;
        tk_sbuf_add(&first, "", 0);
        token_text(t, t->traw.p + t->tr[2 * (size_t)id], t->tr[2 * (size_t)id + 1], 1, &first, &byte);
        p = (const unsigned char *)first.p;
        n = first.n;
    }
    if (s->ntok < 2) s->ntok++;
    size_t i = 0;
    if (s->per_byte && !is_byte && s->npend) { /* the byte run ends incomplete */
        out_repl(&o, s->npend);
        s->npend = 0;
    }
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
            out_repl(&o, s->per_byte ? s->npend : 1);
            s->npend = 0;
        }
    }
    if (i < n) lossy(&o, p + i, n - i, s->pend, &s->npend);
    free(first.p);
    out[o.n] = 0;
    return stream_strip(t, s, out, o.n);
}

size_t tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    obuf o = {out, 0, cap, 0};
    if (!cap) return 0;
    if (s->npend) out_repl(&o, s->per_byte ? s->npend : 1);
    s->npend = 0;
    out[o.n] = 0;
    return o.n;
}
