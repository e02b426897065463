/* tokenizer: Hugging Face tokenizer.json for BPE models, byte-level
 * (Qwen2/Qwen3, Llama 3, GPT-2 style) and SentencePiece-style (Gemma 3,
 * Llama 2, Mistral): normalizers (NFC.., Replace, Prepend), pre-tokenizers
 * (Split regexes with PCRE2 Unicode properties, ByteLevel, Metaspace),
 * BPE merges by rank with byte_fallback/unk, added/special tokens matched
 * before BPE, post-processor BOS/EOS (or tokenizer_config.json's
 * add_bos_token/add_eos_token for the Llama/Gemma classes), and the
 * decoder chains (ByteLevel; Replace, ByteFallback, Fuse, Strip, Metaspace).
 * Encoding is thread-safe (no shared mutable state). Decoding streams:
 * tok_stream never emits a partial UTF-8 sequence. */
#ifndef DS_TOKENIZER_H
#define DS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* Loads dir/tokenizer.json (and dir/tokenizer_config.json if present),
 * or, when path names a .gguf file, the tokenizer its metadata describes
 * (text/tok_gguf.h). Unsupported components are refused with a message
 * naming them. */
int tok_load(tokenizer **out, const char *path, char *err, size_t errlen);
/* The same from memory: tokenizer.json text (len bytes) and optionally
 * tokenizer_config.json text (config NULL: none). */
int tok_load_buf(tokenizer **out, const char *json, size_t len, const char *config, size_t config_len, char *err,
                 size_t errlen);
/* The same from parsed trees (config NULL: none); name prefixes messages.
 * The trees stay the caller's. */
struct cJSON;
int tok_load_json(tokenizer **out, const struct cJSON *json, const struct cJSON *config, const char *name, char *err,
                  size_t errlen);
void tok_free(tokenizer *t);

int tok_vocab_size(const tokenizer *t); /* 1 + the largest id */

/* Encodes text (len bytes, UTF-8). add_special: add what the
 * post-processor adds (e.g. Llama 3's <|begin_of_text|>), as HF's
 * add_special_tokens=True. *ids is malloc'd (free it even for 0 ids);
 * returns the count, or -1 with err filled (input that is not valid
 * UTF-8 is refused). Thread-safe. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int **ids, char *err,
               size_t errlen);

/* The raw bytes a token stands for in the middle of a text (through the
 * decoder's per-token steps: ByteLevel chars mapped back to bytes, ▁ to a
 * space, <0xNN> to its byte; NUL-terminated, but may hold partial UTF-8);
 * NULL for an id out of range or unused. Special tokens give their text. */
const char *tok_token_bytes(const tokenizer *t, int id, size_t *len);

/* The id of a token given by its vocabulary string (e.g. "<|im_end|>"),
 * or -1. */
int tok_token_id(const tokenizer *t, const char *token);

/* 1 if id is an added token marked special (what skip_special drops). */
int tok_is_special(const tokenizer *t, int id);

/* bos_token / eos_token of tokenizer_config.json as ids, or -1 when the
 * file, the entry or the token is absent. */
int tok_bos_id(const tokenizer *t);
int tok_eos_id(const tokenizer *t);

/* Decodes ids to a malloc'd NUL-terminated string, exactly as HF's
 * decode (the decoder chain; invalid UTF-8 becomes U+FFFD the way HF's
 * ByteLevel/ByteFallback decoders do it). skip_special drops special
 * tokens. */
char *tok_decode(const tokenizer *t, const int *ids, int n, int skip_special, size_t *len);

/* Streaming decode: feed ids one at a time; out receives only complete
 * UTF-8 sequences (incomplete trailing bytes are held back). Start from
 * a zeroed tok_stream. To skip special tokens, do not push the ids for
 * which tok_is_special is true (the same as tok_decode's skip_special). */
typedef struct {
    unsigned char pend[8];
    int npend;
    int ntok; /* tokens pushed so far (saturates) */
    int lead; /* leading chars a Strip decoder has dropped (or -1: done) */
    int per_byte; /* set by push: invalid held bytes become one U+FFFD each */
} tok_stream;
/* Appends the decodable text of id to out (cap bytes, NUL-terminated);
 * returns bytes written. Unknown ids write nothing. cap must be at least
 * tok_stream_cap(t) (invalid bytes grow 3x as U+FFFD); with less, output
 * that does not fit is dropped (never a partial character). Concatenated
 * chunks (plus the flush) equal tok_decode(..., skip_special=0), with two
 * exceptions: a ByteFallback decoder turns a run of <0xNN> tokens that is
 * not valid UTF-8 into one U+FFFD per byte of the run, which a stream
 * cannot do for characters it already emitted; and a Strip decoder's
 * trailing strip (stop > 0) is not applied. */
size_t tok_stream_push(const tokenizer *t, tok_stream *s, int id, char *out, size_t cap);
size_t tok_stream_cap(const tokenizer *t);
/* Emits whatever is held back (invalid leftovers as U+FFFD); cap >= 16. */
size_t tok_stream_flush(tok_stream *s, char *out, size_t cap);

#endif
