/* fuzz_tokenizer: libFuzzer target for the tokenizer.json loader and for
 * encoding/decoding with whatever it accepts. The input is
 *   tokenizer.json text, "\0", tokenizer_config.json text (empty: none),
 *   "\0", text to encode
 * (missing parts are empty). When the tokenizer loads, the text is encoded
 * with and without add_special; every id must be in range; the ids are
 * decoded whole and streamed (the stream never emits invalid UTF-8), and
 * the text bytes are also decoded as arbitrary ids. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int valid_utf8(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = p[i];
        size_t k = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

static void check_ids(const tokenizer *t, const int *ids, int n) {
    int vs = tok_vocab_size(t);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vs) __builtin_trap();
    size_t dl;
    char *d = tok_decode(t, ids, n, 0, &dl);
    if (!d || d[dl] != 0 || !valid_utf8((const unsigned char *)d, dl)) __builtin_trap(); /* NUL inside is fine */
    free(d);
    d = tok_decode(t, ids, n, 1, &dl);
    free(d);
    size_t cap = tok_stream_cap(t);
    if (cap < 16) cap = 16;
    char *buf = malloc(cap);
    tok_stream s = {0};
    for (int i = 0; i <= n; i++) {
        size_t k = i < n ? tok_stream_push(t, &s, ids[i], buf, cap) : tok_stream_flush(&s, buf, cap);
        if (k >= cap || buf[k] != 0 || !valid_utf8((const unsigned char *)buf, k)) __builtin_trap();
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data, *end = p + size;
    const char *z1 = memchr(p, 0, size);
    const char *cfg = z1 ? z1 + 1 : end;
    const char *z2 = z1 ? memchr(cfg, 0, (size_t)(end - cfg)) : NULL;
    const char *text = z2 ? z2 + 1 : end;
    size_t json_len = (size_t)((z1 ? z1 : end) - p);
    size_t cfg_len = z1 ? (size_t)((z2 ? z2 : end) - cfg) : 0;
    size_t text_len = (size_t)(end - text);
    char err[512];
    tokenizer *t = NULL;
    if (tok_load_buf(&t, p, json_len, cfg_len ? cfg : NULL, cfg_len, err, sizeof err) != 0) {
        if (t || !err[0]) __builtin_trap(); /* a refusal always says why */
        return 0;
    }
    for (int special = 0; special < 2; special++) {
        int *ids = NULL;
        int n = tok_encode(t, text, text_len, special, &ids, err, sizeof err);
        if (n >= 0) check_ids(t, ids, n);
        free(ids);
    }
    /* the text as arbitrary ids (ids out of range must be skipped) */
    int n = (int)(text_len / 2);
    if (n > 4096) n = 4096;
    int *raw = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) raw[i] = (int)((unsigned char)text[2 * i] | (unsigned char)text[2 * i + 1] << 8) - 8;
    size_t dl;
    char *d = tok_decode(t, raw, n, 0, &dl);
    if (!d || !valid_utf8((const unsigned char *)d, dl)) __builtin_trap();
    free(d);
    free(raw);
    tok_free(t);
    return 0;
}
