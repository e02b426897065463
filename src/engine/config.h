/* config: a model's config.json (+ generation_config.json) reduced to the
 * hyper-parameters the forward pass needs, with strict validation: every
 * value is range-checked and unknown architectures or unsupported features
 * are refused with a message naming the file and key. */
#ifndef DS_CONFIG_H
#define DS_CONFIG_H

#include <stddef.h>

#include "engine/tensor.h"

typedef enum { ARCH_QWEN3 = 0, ARCH_QWEN2, ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN3_MOE, ARCH_GEMMA3 } ds_arch;

#define CONFIG_MAX_EOS 16
#define CONFIG_MAX_LAYERS 1024
#define MOE_MAX_TOP_K 32

typedef enum { ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_LLAMA3 } rope_kind;

typedef struct {
    ds_arch arch;
    char model_type[32];      /* as written in config.json */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;             /* explicit head_dim or hidden/heads */
    int max_position_embeddings;
    float rms_norm_eps;
    double rope_theta;
    rope_kind rope_type;
    float rope_factor;        /* linear and llama3 */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int rope_original_max_pos;                         /* llama3 */
    int tie_word_embeddings;
    int attention_bias;       /* q/k/v biases (qwen2 always; others per config) */
    int o_bias;               /* o_proj bias (llama attention_bias) */
    int qk_norm;              /* per-head RMSNorm of q and k before RoPE (qwen3) */
    /* sliding-window attention: a row at position p of a layer with
       sliding[l] sees positions p - sliding_window + 1 .. p (transformers'
       rule: kv_pos > q_pos - sliding_window); 0 = no layer slides */
    int sliding_window;
    unsigned char sliding[CONFIG_MAX_LAYERS];
    /* mixture of experts (qwen3_moe): layers with moe[l] route each row to
       its moe_top_k of moe_experts experts (moe_intermediate_size wide),
       the rest have the dense MLP (intermediate_size); 0 experts: none */
    int moe_experts, moe_top_k, moe_intermediate_size, moe_norm_topk;
    unsigned char moe[CONFIG_MAX_LAYERS];
    /* Gemma 3 (gemma3_text, or a gemma3 checkpoint's text_config): RMSNorm
       weights applied as (1 + w) (folded at load); a norm on the attention
       output and on the MLP output before each residual add (post_norms);
       GELU (tanh) gating (mlp_gelu); the embedding times embed_scale
       (sqrt(hidden_size), 0 elsewhere); scores times attn_scale
       (query_pre_attn_scalar^-0.5; 0: head_dim^-0.5); logits soft-capped
       at final_softcap (0: none); sliding layers' RoPE at
       rope_local_theta (default rope) while the others take rope_theta
       and its scaling */
    int norm_plus_one, post_norms, mlp_gelu;
    float embed_scale, attn_scale, final_softcap;
    double rope_local_theta;
    int vision_skipped;       /* a gemma3 checkpoint whose vision tower is not loaded */
    ds_dtype torch_dtype;     /* the checkpoint's declared dtype (informational) */
    int bos_token_id;         /* -1 when none */
    int n_eos;
    int eos_token_ids[CONFIG_MAX_EOS];
} model_config;

/* Parses config.json text. ctx names the file in errors. */
int config_parse(model_config *c, const char *text, size_t n, const char *ctx, char *err, size_t errlen);
/* Parses generation_config.json text, overriding eos/bos ids if present. */
int config_parse_generation(model_config *c, const char *text, size_t n, const char *ctx, char *err,
                            size_t errlen);
/* Loads dir/config.json and, if present, dir/generation_config.json. */
int config_load(model_config *c, const char *dir, char *err, size_t errlen);
const char *config_arch_name(ds_arch a);

/* RoPE inverse frequencies for the config (head_dim/2 entries), with the
 * configured scaling applied exactly as transformers does. */
void config_rope_inv_freq(const model_config *c, float *inv_freq);
/* The sliding layers' inverse frequencies where they differ (Gemma 3:
 * default RoPE at rope_local_theta); returns 0 and writes nothing when
 * every layer takes config_rope_inv_freq's. */
int config_rope_inv_freq_local(const model_config *c, float *inv_freq);

#endif
