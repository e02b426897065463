/* gguf_model: a GGUF model file (or split set) presented the way dspark's
 * Hugging Face loaders see a checkpoint: tensors under their HF names and
 * shapes (engine/tensor.h), a config.json text and a generation_config.json
 * text in HF spelling that config_parse / config_parse_generation accept.
 *
 * Supported architectures (general.architecture): qwen3, qwen2, llama.
 * Names: token_embd -> model.embed_tokens, output -> lm_head (absent: tied
 * embeddings), output_norm -> model.norm, blk.N.{attn_q,attn_k,attn_v,
 * attn_output} -> model.layers.N.self_attn.{q,k,v,o}_proj (weight, bias),
 * attn_q_norm/attn_k_norm -> self_attn.{q,k}_norm, attn_norm ->
 * input_layernorm, ffn_norm -> post_attention_layernorm, ffn_{gate,up,down}
 * -> mlp.{gate,up,down}_proj. Any other tensor is an error naming it.
 * Shapes: HF's, the ggml dims reversed (shape[0] = ne[ndim-1]); quantized
 * tensors are 2-D [N][K] with K = ne[0] (each row K/QK blocks).
 *
 * llama.cpp's converter interleaves the two rotary halves of each head's
 * rows of q and k (and their biases) for architecture llama; those tensors
 * are copied, owned by the gguf_model, with the rows put back in HF order
 * (whole rows move, so quantized rows stay intact). The other tensors point
 * into the file's image. qwen2 and qwen3 are stored unpermuted.
 *
 * Llama-3-style RoPE scaling is carried as rope_freqs.weight, a factor per
 * rotary frequency (ggml divides base frequency i by factor i); it is not a
 * model tensor and the config says rope_type default: the caller applies
 * gguf_model_rope_freqs to its inverse frequencies. */
#ifndef DS_GGUF_MODEL_H
#define DS_GGUF_MODEL_H

#include <stddef.h>

#include "base/gguf.h"
#include "engine/tensor.h"

typedef struct gguf_model gguf_model;

/* Opens path (a .gguf or any part of a split set), mapped or read into
 * memory, and translates it. Errors name the file and the key or tensor. */
int gguf_model_open(gguf_model **out, const char *path, int read_into_memory, char *err, size_t errlen);
void gguf_model_close(gguf_model *m);

/* NUL-terminated JSON texts owned by the model. */
const char *gguf_model_config_json(const gguf_model *m);
const char *gguf_model_generation_json(const gguf_model *m);

int gguf_model_tensor_count(const gguf_model *m);
const tensor *gguf_model_tensor_at(const gguf_model *m, int i);
const tensor *gguf_model_find(const gguf_model *m, const char *hf_name); /* NULL when absent */

/* rope_freqs.weight's head_dim/2 factors, or NULL (*n = 0) when the file
 * has none. HF inv_freq[i] of the scaled rope = base inv_freq[i] / f[i]. */
const float *gguf_model_rope_freqs(const gguf_model *m, int *n);

/* The underlying file (metadata for the tokenizer, etc.). */
const gguf *gguf_model_file(const gguf_model *m);

#endif
