/* tok_gguf: a GGUF file's tokenizer metadata (tokenizer.ggml.*,
 * tokenizer.chat_template) turned into the tokenizer.json and
 * tokenizer_config.json that Hugging Face would have, so that one loader
 * (tokenizer.c) and one template loader (chat_template.c) serve both kinds
 * of model folder. Only metadata is read; tensors are never touched.
 *
 * Supported: tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges,
 * token_type) with the pre-tokenizers named in tok_gguf.c's table
 * (tokenizer.ggml.pre: "qwen2", "llama-bpe", ...); "llama" (SentencePiece
 * style: tokens, scores, token_type; the merges are rebuilt from the
 * scores as transformers does for a slow Llama tokenizer). Anything else,
 * and any malformed field, is an error naming the key. */
#ifndef DS_TOK_GGUF_H
#define DS_TOK_GGUF_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "base/gguf.h"
#include "text/tokenizer.h"

/* 1 when path names a GGUF file (a regular file ending in ".gguf"), 0
 * otherwise (a folder, say): how tok_load and chat_template_load choose. */
int tok_gguf_is_file(const char *path);

/* Builds tokenizer.json (*tok) and tokenizer_config.json (*cfg) from g's
 * metadata; name (the file) prefixes messages. Either out may be NULL
 * when not wanted (the chat template needs only the config, which is
 * cheap: no vocabulary or merges are built for it). Free with
 * cJSON_Delete. Returns 0, or -1 with err filled and nothing allocated. */
int tok_gguf_json(const gguf *g, const char *name, cJSON **tok, cJSON **cfg, char *err, size_t errlen);

/* The tokenizer.ggml.pre name this reader gives the byte-level
 * pre-tokenizer whose Split pattern is regex ("qwen2", "llama-bpe"), or
 * NULL for a pattern it has no name for: what a writer of "gpt2" files
 * may name (a pre-tokenizer named wrongly would mis-tokenize silently). */
const char *tok_gguf_pre_name(const char *regex);

/* tok_load for a .gguf file: opens it (mapped, metadata only), builds the
 * two JSON trees and loads them. */
int tok_load_gguf(tokenizer **out, const char *path, char *err, size_t errlen);

/* The tokenizer_config.json of a .gguf file (bos_token, eos_token,
 * chat_template, ...), for chat_template_load. NULL with err filled on
 * error. */
cJSON *tok_gguf_config_file(const char *path, char *err, size_t errlen);

#endif
