/* tok_internal: what the tokenizer's source files share and nothing else
 * includes: the tokenizer struct, its component kinds, and the small
 * containers (hash maps, trie, buffers) and UTF-8 helpers behind it.
 * tokenizer.c loads and decodes, tok_encode.c encodes, tok_base.c holds
 * the helpers. A new component kind adds an enum value here, its parsing
 * in tokenizer.c and its step in tok_encode.c. */
#ifndef DS_TOK_INTERNAL_H
#define DS_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#include "text/tokenizer.h"

/* ---- containers ---- */

typedef struct { /* growable int array */
    int *v;
    size_t n, cap;
} ivec;

typedef struct { /* growable byte buffer, kept NUL-terminated */
    char *p;
    size_t n, cap;
} sbuf;

typedef struct {
    uint32_t hash; /* low 32 bits of the hash; slot empty when len == UINT32_MAX */
    uint32_t off, len;
    int32_t val;
} smap_slot;

typedef struct { /* string -> int, open addressing; keys live in `keys` */
    smap_slot *slots;
    size_t mask, count;
    sbuf keys;
} smap;

typedef struct {
    uint64_t key; /* (a << 32) | b; UINT64_MAX = empty */
    uint32_t rank;
    int32_t id;
} pmap_slot;

typedef struct { /* id pair -> (merge rank, merged id) */
    pmap_slot *slots;
    size_t mask;
} pmap;

typedef struct {
    int first, next; /* child list */
    int tok;         /* index into t->added, or -1 */
    unsigned char byte;
} trie_node;

typedef struct { /* byte trie over added-token contents; node 0 is the root */
    trie_node *n;
    int count, cap;
} trie;

static inline uint64_t tk_hash_u64(uint64_t x) { return ds_mix64(x); }

static inline const pmap_slot *tk_pmap_get(const pmap *m, int a, int b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = (size_t)tk_hash_u64(key) & m->mask;
    for (;;) {
        const pmap_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}

/* ---- the tokenizer ---- */

enum norm_kind { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_REPLACE, NORM_PREPEND };
enum pre_kind { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE };
enum split_behavior { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };
/* decoder steps; DEC_STRIP after a DEC_FUSE acts on the whole text */
enum dec_kind { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE };

#define MAX_STEPS 16 /* normalizer / pre-tokenizer steps */
#define TK_MAX_ID (1 << 24) /* ids beyond this are refused: tables are indexed by id */

typedef struct { /* one normalizer step */
    enum norm_kind kind;
    char *pat, *with;   /* NORM_REPLACE: literal pattern (or NULL with re) and replacement; NORM_PREPEND: with */
    size_t pat_len, with_len;
    pcre2_code *re;     /* NORM_REPLACE with a Regex pattern */
} norm_step;

typedef struct { /* one pre-tokenizer step */
    enum pre_kind kind;
    pcre2_code *re;     /* PRE_SPLIT, and PRE_BYTELEVEL with use_regex */
    int behavior;       /* PRE_SPLIT */
    int invert;         /* PRE_SPLIT */
    int add_prefix_space; /* PRE_BYTELEVEL */
    char rep[8];        /* PRE_METASPACE: the replacement char as UTF-8 */
    int rep_len, prepend, split;
} pre_step;

typedef struct { /* one decoder step */
    enum dec_kind kind;
    char *pat, *with;   /* DEC_REPLACE (literal) */
    size_t pat_len, with_len;
    int32_t content;    /* DEC_STRIP: the char stripped; DEC_METASPACE: the replacement */
    int start, stop;    /* DEC_STRIP */
    int prepend;        /* DEC_METASPACE: its prepend_scheme */
    int after_fuse;     /* DEC_STRIP: acts on the fused text */
} dec_step;

typedef struct { /* an added token and its HF flags */
    int id;
    int special, normalized, lstrip, rstrip, single_word;
    uint32_t off, len; /* content in t->strs */
} added_tok;

struct tokenizer {
    /* normalizer */
    int n_norm;
    norm_step norm[MAX_STEPS];
    /* pre-tokenizer */
    int n_pre;
    pre_step pre[MAX_STEPS];
    int byte_level; /* a ByteLevel pre-tokenizer maps bytes to the byte alphabet */
    /* decoder */
    int n_dec;
    dec_step dec[MAX_STEPS];
    int dec_bytelevel; /* the decoder is exactly ByteLevel (the fast path) */
    int dec_fuse;      /* a Fuse step (or ByteLevel, which fuses) is present */
    /* BPE model */
    smap vocab;        /* model string -> id */
    pmap merges;       /* (id, id) -> (rank, merged id) */
    int byte_id[256];  /* byte-level: id of each byte's symbol, or -1 */
    char bl_utf8[256][2]; /* each byte's symbol as UTF-8 (1 or 2 bytes) */
    uint8_t bl_len[256];
    int16_t c2b[0x144];   /* byte-alphabet code point -> byte, or -1 */
    int unk_id, fuse_unk, ignore_merges, byte_fallback;
    int *bmp_id;       /* not byte-level: id of each BMP char as a one-char token, or -1 */
    pmap cross;        /* not byte-level: (last char of a, first char of b) of every merge (a, b):
                        * the only adjacent chars a merge can join, so a word splits safely
                        * between any other two in-vocab chars */
    size_t cross_n;
    int no_split;      /* the vocab maps two strings to one id: never split words */
    int fb_id[256];    /* byte_fallback: id of "<0xNN>", or -1 */
    /* added tokens */
    int n_added;
    added_tok *added;
    smap added_map;    /* content -> id */
    trie trie_raw, trie_norm;
    sbuf strs;
    /* post-processor: what add_special adds around the sequence */
    ivec prefix, suffix;
    /* decoding: the bytes each id stands for */
    int vocab_size;    /* 1 + the largest id */
    uint32_t *tb;      /* [vocab_size][2]: offset into tbytes, length */
    uint32_t *tr;      /* [vocab_size][2]: the token's own string in traw (decoder input) */
    sbuf traw;
    uint8_t *tflags;   /* [vocab_size]: TF_* bits */
    sbuf tbytes;       /* every token's bytes, each NUL-terminated */
    size_t max_tok_len;
    int bos_id, eos_id; /* from tokenizer_config.json, or -1 */
};

#define TF_PRESENT 1 /* the id has a token */
#define TF_SPECIAL 2 /* an added token marked special */
#define TF_BYTE 4    /* a <0xNN> token the ByteFallback decoder turns into one byte */

/* ---- helpers (tok_base.c; normalize in tok_encode.c) ---- */

size_t tk_utf8_check(const char *s, size_t n);
int32_t tk_utf8_decode_at(const unsigned char *p, size_t n, size_t *adv);
size_t tk_utf8_encode(uint32_t cp, char *out);
int tk_is_white_space(int32_t c);
int tk_is_word_char(int32_t c);
int32_t tk_last_char(const char *s, size_t n);
void tk_ivec_push(ivec *a, int x);
size_t tk_sbuf_add(sbuf *b, const void *data, size_t n);
void tk_smap_init(smap *m, size_t expect);
void tk_smap_free(smap *m);
void tk_smap_put(smap *m, const char *k, size_t n, int32_t val);
int tk_smap_get(const smap *m, const char *k, size_t n);
void tk_pmap_init(pmap *m, size_t expect);
void tk_pmap_put(pmap *m, int a, int b, uint32_t rank, int id);
void tk_pmap_grow(pmap *m);
void tk_bl_tables(uint32_t b2c[256], int16_t c2b[0x144]);
void tk_trie_add(trie *tr, const char *s, size_t n, int tok);
int tk_trie_longest(const trie *tr, const char *s, size_t n, size_t *mlen);
char *tk_normalize(const tokenizer *t, const char *s, size_t n, size_t *out_len);

#endif
