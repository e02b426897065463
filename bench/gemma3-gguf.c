/* gemma3-gguf: a random gemma3_text checkpoint (mkrandom gemma3-1b) as a
 * GGUF laid out as llama.cpp's converter writes gemma3 (its tensor names,
 * the norms as F32 with Gemma's + 1 added, the sliding window and its
 * period, the sliding layers' RoPE base), the matrices in BF16 or Q8_0, and
 * no vocabulary (tokenizer.ggml.model "no_vocab": llama-bench needs none).
 * For the side-by-side CPU benchmark (bench/gemma3-cpu.sh): both engines
 * then read the same file.
 *   gemma3-gguf CHECKPOINT_DIR OUT.gguf [bf16|q8_0] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/gguf_write.h"
#include "base/util.h"
#include "engine/config.h"
#include "engine/ops.h"
#include "engine/quant_encode.h"
#include "engine/safetensors.h"

static const struct {
    const char *hf, *gguf;
} MAP[] = {{"input_layernorm", "attn_norm"},
           {"post_attention_layernorm", "post_attention_norm"},
           {"pre_feedforward_layernorm", "ffn_norm"},
           {"post_feedforward_layernorm", "post_ffw_norm"},
           {"self_attn.q_proj", "attn_q"},
           {"self_attn.k_proj", "attn_k"},
           {"self_attn.v_proj", "attn_v"},
           {"self_attn.o_proj", "attn_output"},
           {"self_attn.q_norm", "attn_q_norm"},
           {"self_attn.k_norm", "attn_k_norm"},
           {"mlp.gate_proj", "ffn_gate"},
           {"mlp.up_proj", "ffn_up"},
           {"mlp.down_proj", "ffn_down"}};

/* the GGUF name of an HF tensor, or -1 */
static int gguf_name(const char *hf, char *out, size_t n) {
    if (!strcmp(hf, "model.embed_tokens.weight")) return snprintf(out, n, "token_embd.weight"), 0;
    if (!strcmp(hf, "model.norm.weight")) return snprintf(out, n, "output_norm.weight"), 0;
    int l, k = -1;
    char rest[96];
    if (sscanf(hf, "model.layers.%d.%95s%n", &l, rest, &k) != 2) return -1;
    char *dot = strstr(rest, ".weight");
    if (!dot || dot[7]) return -1;
    *dot = 0;
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++)
        if (!strcmp(rest, MAP[i].hf)) return snprintf(out, n, "blk.%d.%s.weight", l, MAP[i].gguf), 0;
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: gemma3-gguf CHECKPOINT_DIR OUT.gguf [bf16|q8_0]\n");
        return 1;
    }
    const int q8 = argc > 3 && !strcmp(argv[3], "q8_0");
    char err[1024];
    model_config c;
    st_set *st;
    if (config_load(&c, argv[1], err, sizeof err) != 0 || st_set_open(&st, argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "gemma3-gguf: %s\n", err);
        return 1;
    }
    if (c.arch != ARCH_GEMMA3 || c.rope_type != ROPE_DEFAULT) {
        fprintf(stderr, "gemma3-gguf: %s is not a gemma3 checkpoint without RoPE scaling\n", argv[1]);
        return 1;
    }
    int pattern = 0; /* the period of the global layers */
    for (int l = 0; l < c.n_layers && !pattern; l++)
        if (!c.sliding[l]) pattern = l + 1;
    gguf_writer *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "gemma3");
    gguf_w_u32(w, "gemma3.block_count", (uint32_t)c.n_layers);
    gguf_w_u32(w, "gemma3.context_length", (uint32_t)c.max_position_embeddings);
    gguf_w_u32(w, "gemma3.vocab_size", (uint32_t)c.vocab_size); /* (no vocabulary says it otherwise) */
    gguf_w_u32(w, "gemma3.embedding_length", (uint32_t)c.hidden_size);
    gguf_w_u32(w, "gemma3.feed_forward_length", (uint32_t)c.intermediate_size);
    gguf_w_u32(w, "gemma3.attention.head_count", (uint32_t)c.n_heads);
    gguf_w_u32(w, "gemma3.attention.head_count_kv", (uint32_t)c.n_kv_heads);
    gguf_w_u32(w, "gemma3.attention.key_length", (uint32_t)c.head_dim);
    gguf_w_u32(w, "gemma3.attention.value_length", (uint32_t)c.head_dim);
    gguf_w_f32(w, "gemma3.attention.layer_norm_rms_epsilon", c.rms_norm_eps);
    gguf_w_f32(w, "gemma3.rope.freq_base", (float)c.rope_theta);
    gguf_w_f32(w, "gemma3.rope.freq_base_swa", (float)c.rope_local_theta);
    if (c.sliding_window) {
        gguf_w_u32(w, "gemma3.attention.sliding_window", (uint32_t)c.sliding_window);
        gguf_w_u32(w, "gemma3.attention.sliding_window_pattern", (uint32_t)(pattern ? pattern : c.n_layers + 1));
    }
    gguf_w_str(w, "tokenizer.ggml.model", "no_vocab");
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1);
    const int n = st_set_count(st);
    char (*names)[96] = xcalloc((size_t)n, 96);
    for (int i = 0; i < n; i++) {
        const tensor *t = st_set_get(st, i);
        if (gguf_name(t->name, names[i], 96) != 0) {
            fprintf(stderr, "gemma3-gguf: no GGUF name for \"%s\"\n", t->name);
            return 1;
        }
        const int mat = t->ndim == 2;
        const uint32_t ty = !mat ? GGML_F32 : q8 && t->shape[1] % 32 == 0 ? GGML_Q8_0 : GGML_BF16;
        int64_t ne[2] = {mat ? t->shape[1] : t->shape[0], mat ? t->shape[0] : 1};
        if (gguf_w_add_tensor(w, names[i], ty, mat ? 2 : 1, ne, err, sizeof err) != 0) {
            fprintf(stderr, "gemma3-gguf: %s\n", err);
            return 1;
        }
    }
    if (gguf_w_begin(w, argv[2], err, sizeof err) != 0) {
        fprintf(stderr, "gemma3-gguf: %s\n", err);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const tensor *t = st_set_get(st, i);
        const int64_t cnt = tensor_numel(t);
        int r;
        if (t->ndim != 2) { /* a norm: w + 1 in f32, as the converter stores it */
            float *v = xmalloc(sizeof(float) * (size_t)cnt);
            op_to_f32(v, t->data, t->dtype, cnt);
            for (int64_t j = 0; j < cnt; j++) v[j] = 1.0f + v[j];
            r = gguf_w_data(w, v, sizeof(float) * (size_t)cnt, err, sizeof err);
            free(v);
        } else if (q8 && t->shape[1] % 32 == 0) {
            const int64_t K = t->shape[1];
            const size_t rb = qenc_row_bytes(DT_Q8_0, K);
            float *row = xmalloc(sizeof(float) * (size_t)K);
            char *q = xmalloc(rb * (size_t)t->shape[0]);
            for (int64_t r0 = 0; r0 < t->shape[0]; r0++) {
                op_to_f32(row, (const char *)t->data + (size_t)r0 * (size_t)K * 2, t->dtype, K);
                qenc_row(DT_Q8_0, row, K, q + (size_t)r0 * rb);
            }
            r = gguf_w_data(w, q, rb * (size_t)t->shape[0], err, sizeof err);
            free(row);
            free(q);
        } else {
            r = gguf_w_data(w, t->data, t->nbytes, err, sizeof err);
        }
        if (r != 0) {
            fprintf(stderr, "gemma3-gguf: %s\n", err);
            return 1;
        }
    }
    if (gguf_w_finish(w, err, sizeof err) != 0) {
        fprintf(stderr, "gemma3-gguf: %s\n", err);
        return 1;
    }
    gguf_w_free(w);
    free(names);
    st_set_close(st);
    printf("wrote %s (%s)\n", argv[2], q8 ? "Q8_0" : "BF16");
    return 0;
}
