/* cli_quantize.h: what the files of `dspark quantize` share
 * (cli_quantize.c: tensors, types, files; cli_quantize_vocab.c: the
 * tokenizer a GGUF carries). */
#ifndef DS_CLI_QUANTIZE_H
#define DS_CLI_QUANTIZE_H

#include <stddef.h>
#include <stdio.h>

#include "base/gguf_write.h"
#include "engine/config.h"

/* The tokenizer of the checkpoint in dir (tokenizer.json and
 * tokenizer_config.json) as tokenizer.* metadata of w, in the form
 * llama.cpp's converter gives it:
 *   - byte-level BPE (Qwen, Llama 3): model "gpt2", tokens, types, merges
 *     and the pre-tokenizer's name;
 *   - SentencePiece-style BPE (Gemma 3, Llama 2, Mistral: U+2581 for
 *     spaces, <0xNN> byte fallback): model "llama", tokens, a score and a
 *     type per token, add_space_prefix;
 * then the special ids, add_bos / add_eos and the chat template. c gives
 * the vocabulary's size (ids the tokenizer leaves free become the
 * converter's [PADn] fillers) and the fallback special ids. A folder
 * without tokenizer.json, or a tokenizer of another kind, is written
 * without one, with a note on log: a GGUF without a tokenizer still runs
 * from token ids. 0, or -1 with err (unreadable or inconsistent files). */
int quantize_add_tokenizer(gguf_writer *w, const char *dir, const model_config *c, FILE *log, char *err,
                           size_t errlen);

#endif
