/* Tests for config.c: real-world qwen3 / qwen2 / llama configs (both the
 * transformers 4 and 5 spellings), generation_config overrides, RoPE
 * inverse frequencies against an independent double-precision computation,
 * and the refusals, each of which must name the key. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/config.h"
#include "test.h"

/* Qwen/Qwen3-4B (April 2025), verbatim apart from layout */
static const char *QWEN3_4B =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":2560,\"initializer_range\":0.02,\"intermediate_size\":9728,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":36,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":32,\"num_hidden_layers\":36,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

static const char *QWEN3_GEN =
    "{\"bos_token_id\":151643,\"do_sample\":true,\"eos_token_id\":[151645,151643],\"pad_token_id\":151643,"
    "\"temperature\":0.6,\"top_k\":20,\"top_p\":0.95,\"transformers_version\":\"4.51.0\"}";

/* Qwen/Qwen2.5-0.5B-Instruct */
static const char *QWEN2 =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"eos_token_id\":151645,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
    "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":21,"
    "\"model_type\":\"qwen2\",\"num_attention_heads\":14,\"num_hidden_layers\":24,\"num_key_value_heads\":2,"
    "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.43.1\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

/* meta-llama/Llama-3.1-8B-Instruct */
static const char *LLAMA31 =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"hidden_act\":\"silu\","
    "\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":14336,"
    "\"max_position_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"llama\",\"num_attention_heads\":32,"
    "\"num_hidden_layers\":32,\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
    "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.43.0.dev0\","
    "\"use_cache\":true,\"vocab_size\":128256}";

/* a transformers 5 style Qwen3 config: dtype and rope_parameters */
static const char *QWEN3_TF5 =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":151643,"
    "\"dtype\":\"float16\",\"eos_token_id\":151645,\"head_dim\":96,\"hidden_act\":\"silu\",\"hidden_size\":1024,"
    "\"intermediate_size\":3072,\"layer_types\":[\"full_attention\",\"full_attention\"],"
    "\"max_position_embeddings\":40960,\"model_type\":\"qwen3\",\"num_attention_heads\":16,"
    "\"num_hidden_layers\":2,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_parameters\":{\"rope_theta\":1000000,\"rope_type\":\"default\"},\"tie_word_embeddings\":false,"
    "\"transformers_version\":\"5.0.0\",\"use_sliding_window\":false,\"vocab_size\":151936}";

/* mistralai/Mistral-7B-v0.1: a sliding window over every layer */
static const char *MISTRAL_V01 =
    "{\"architectures\":[\"MistralForCausalLM\"],\"bos_token_id\":1,\"eos_token_id\":2,\"hidden_act\":\"silu\","
    "\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":14336,"
    "\"max_position_embeddings\":32768,\"model_type\":\"mistral\",\"num_attention_heads\":32,"
    "\"num_hidden_layers\":32,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,"
    "\"sliding_window\":4096,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.34.0.dev0\",\"use_cache\":true,\"vocab_size\":32000}";

/* mistralai/Mistral-Nemo-Instruct-2407: an explicit head_dim (128, not
   5120 / 32), no window */
static const char *MISTRAL_NEMO =
    "{\"architectures\":[\"MistralForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":1,\"eos_token_id\":2,"
    "\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":5120,\"initializer_range\":0.02,"
    "\"intermediate_size\":14336,\"max_position_embeddings\":1024000,\"model_type\":\"mistral\","
    "\"num_attention_heads\":32,\"num_hidden_layers\":40,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,"
    "\"rope_theta\":1000000.0,\"sliding_window\":null,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.43.0.dev0\",\"use_cache\":true,"
    "\"vocab_size\":131072}";

/* Qwen/Qwen3-30B-A3B: 128 experts, 8 a token */
static const char *QWEN3_MOE =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"decoder_sparse_step\":1,\"eos_token_id\":151645,\"head_dim\":128,"
    "\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":6144,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":48,\"mlp_only_layers\":[],"
    "\"model_type\":\"qwen3_moe\",\"moe_intermediate_size\":768,\"norm_topk_prob\":true,"
    "\"num_attention_heads\":32,\"num_experts\":128,\"num_experts_per_tok\":8,\"num_hidden_layers\":48,"
    "\"num_key_value_heads\":4,\"output_router_logits\":false,\"rms_norm_eps\":1e-06,\"rope_scaling\":null,"
    "\"rope_theta\":1000000.0,\"router_aux_loss_coef\":0.001,\"sliding_window\":null,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\","
    "\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";

static int parse(model_config *c, const char *text, char *err, size_t n) {
    return config_parse(c, text, strlen(text), "config.json", err, n);
}

/* Edits a base config: replaces the first occurrence of `from` with `to`. */
static char *edit(const char *base, const char *from, const char *to) {
    const char *p = strstr(base, from);
    if (!p) {
        fprintf(stderr, "edit: \"%s\" not found\n", from);
        abort();
    }
    size_t a = (size_t)(p - base), fl = strlen(from), tl = strlen(to), bl = strlen(base);
    char *out = malloc(bl - fl + tl + 1);
    memcpy(out, base, a);
    memcpy(out + a, to, tl);
    memcpy(out + a + tl, p + fl, bl - a - fl + 1);
    return out;
}

static double ref_inv_freq(double theta, int dim, int i) { return 1.0 / pow(theta, (double)(2 * i) / dim); }

TEST(config_qwen3_4b) {
    model_config c;
    char err[512] = "";
    CHECK_MSG(parse(&c, QWEN3_4B, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.arch, ARCH_QWEN3);
    CHECK(strcmp(c.model_type, "qwen3") == 0);
    CHECK(strcmp(config_arch_name(c.arch), "qwen3") == 0);
    CHECK_EQ_INT(c.vocab_size, 151936);
    CHECK_EQ_INT(c.hidden_size, 2560);
    CHECK_EQ_INT(c.intermediate_size, 9728);
    CHECK_EQ_INT(c.n_layers, 36);
    CHECK_EQ_INT(c.n_heads, 32);
    CHECK_EQ_INT(c.n_kv_heads, 8);
    CHECK_EQ_INT(c.head_dim, 128); /* explicit, != 2560 / 32 */
    CHECK_EQ_INT(c.max_position_embeddings, 40960);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-12);
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK_EQ_INT(c.rope_type, ROPE_DEFAULT);
    CHECK_EQ_INT(c.tie_word_embeddings, 1);
    CHECK_EQ_INT(c.attention_bias, 0);
    CHECK_EQ_INT(c.o_bias, 0);
    CHECK_EQ_INT(c.qk_norm, 1);
    CHECK_EQ_INT(c.torch_dtype, DT_BF16);
    CHECK_EQ_INT(c.bos_token_id, 151643);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 151645);

    /* generation_config: the eos list replaces the single id */
    CHECK_MSG(config_parse_generation(&c, QWEN3_GEN, strlen(QWEN3_GEN), "generation_config.json", err, sizeof err) == 0,
              "%s", err);
    CHECK_EQ_INT(c.n_eos, 2);
    CHECK_EQ_INT(c.eos_token_ids[0], 151645);
    CHECK_EQ_INT(c.eos_token_ids[1], 151643);
    CHECK_EQ_INT(c.bos_token_id, 151643);

    float inv[64];
    config_rope_inv_freq(&c, inv);
    int bad = 0;
    for (int i = 0; i < 64; i++) {
        double r = ref_inv_freq(1e6, 128, i);
        if (fabs(inv[i] - r) > 1e-6 * r) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(inv[0] == 1.0f);

    /* attention_bias on qwen3 means q/k/v and o biases */
    char *t = edit(QWEN3_4B, "\"attention_bias\":false", "\"attention_bias\":true");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.attention_bias, 1);
    CHECK_EQ_INT(c.o_bias, 1);
    free(t);
}

TEST(config_qwen2) {
    model_config c;
    char err[512] = "";
    CHECK_MSG(parse(&c, QWEN2, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.arch, ARCH_QWEN2);
    CHECK_EQ_INT(c.head_dim, 64); /* 896 / 14 */
    CHECK_EQ_INT(c.n_kv_heads, 2);
    CHECK_EQ_INT(c.attention_bias, 1);
    CHECK_EQ_INT(c.o_bias, 0);
    CHECK_EQ_INT(c.qk_norm, 0);
    CHECK_EQ_INT(c.tie_word_embeddings, 1);
    CHECK_EQ_INT(c.n_eos, 1);
    /* qwen2 has the q/k/v biases whatever attention_bias says */
    char *t = edit(QWEN2, "\"attention_dropout\"", "\"attention_bias\":false,\"attention_dropout\"");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.attention_bias, 1);
    CHECK_EQ_INT(c.o_bias, 0);
    free(t);
}

/* Llama-3 scaling computed independently, in double, from the formula. */
static double ref_llama3(double theta, int dim, int i, double factor, double lf, double hf, double old) {
    double inv = ref_inv_freq(theta, dim, i);
    double wl = 2 * M_PI / inv;
    double lw = old / lf, hw = old / hf;
    if (wl < hw) return inv;
    if (wl > lw) return inv / factor;
    double s = (old / wl - lf) / (hf - lf);
    return (1 - s) * inv / factor + s * inv;
}

TEST(config_llama31_rope_scaling) {
    model_config c;
    char err[512] = "";
    CHECK_MSG(parse(&c, LLAMA31, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.arch, ARCH_LLAMA);
    CHECK_EQ_INT(c.head_dim, 128);
    CHECK_EQ_INT(c.qk_norm, 0);
    CHECK_EQ_INT(c.attention_bias, 0);
    CHECK_EQ_INT(c.o_bias, 0);
    CHECK_EQ_INT(c.tie_word_embeddings, 0);
    CHECK_NEAR(c.rms_norm_eps, 1e-5, 1e-11);
    CHECK_EQ_INT(c.rope_type, ROPE_LLAMA3);
    CHECK_NEAR(c.rope_factor, 8, 0);
    CHECK_NEAR(c.rope_low_freq_factor, 1, 0);
    CHECK_NEAR(c.rope_high_freq_factor, 4, 0);
    CHECK_EQ_INT(c.rope_original_max_pos, 8192);
    CHECK_NEAR(c.rope_theta, 500000, 0);
    CHECK_EQ_INT(c.n_eos, 3);
    CHECK_EQ_INT(c.eos_token_ids[2], 128009);
    CHECK_EQ_INT(c.bos_token_id, 128000);

    float inv[64];
    config_rope_inv_freq(&c, inv);
    int bad = 0, n_high = 0, n_low = 0, n_mid = 0;
    for (int i = 0; i < 64; i++) {
        double r = ref_llama3(500000, 128, i, 8, 1, 4, 8192);
        double plain = ref_inv_freq(500000, 128, i);
        if (fabs(inv[i] - r) > 1e-6 * r) {
            bad++;
            fprintf(stderr, "  inv_freq[%d] = %.9g, want %.9g\n", i, inv[i], r);
        }
        if (r == plain) n_high++;
        else if (fabs(r - plain / 8) <= 1e-15) n_low++;
        else n_mid++;
    }
    CHECK_EQ_INT(bad, 0);
    /* all three regimes are exercised */
    CHECK(n_high > 0 && n_low > 0 && n_mid > 0);

    /* the same scaling written the transformers 5 way */
    char *t = edit(LLAMA31, "\"rope_scaling\"", "\"rope_parameters\"");
    char *t2 = edit(t, "\"rope_theta\":500000.0", "\"rope_thetaX\":1");
    char *t3 = edit(t2, "\"rope_type\":\"llama3\"", "\"rope_type\":\"llama3\",\"rope_theta\":500000.0");
    model_config c5;
    CHECK_MSG(parse(&c5, t3, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c5.rope_type, ROPE_LLAMA3);
    CHECK_NEAR(c5.rope_theta, 500000, 0);
    float inv5[64];
    config_rope_inv_freq(&c5, inv5);
    CHECK(memcmp(inv, inv5, sizeof inv) == 0);
    free(t);
    free(t2);
    free(t3);

    /* legacy "type" key */
    t = edit(LLAMA31, "\"rope_type\":\"llama3\"", "\"type\":\"llama3\"");
    CHECK_MSG(parse(&c5, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c5.rope_type, ROPE_LLAMA3);
    free(t);

    /* llama defaults: max_position_embeddings 2048, kv heads = heads */
    t = edit(LLAMA31, "\"max_position_embeddings\":131072,", "");
    t2 = edit(t, "\"num_key_value_heads\":8,", "");
    CHECK_MSG(parse(&c5, t2, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c5.max_position_embeddings, 2048);
    CHECK_EQ_INT(c5.n_kv_heads, 32);
    free(t);
    free(t2);

    /* llama attention_bias: q/k/v/o */
    t = edit(LLAMA31, "\"attention_bias\":false", "\"attention_bias\":true");
    CHECK_MSG(parse(&c5, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c5.attention_bias, 1);
    CHECK_EQ_INT(c5.o_bias, 1);
    free(t);
}

/* inv_freq bit patterns from transformers 5.17.0 / torch 2.11.0 on CPU
 * (LlamaRotaryEmbedding / Qwen3RotaryEmbedding(config).inv_freq), for the
 * Llama-3.1-8B rope, an odd llama3 setup (head_dim 90, theta 123456,
 * factor 3, low 1.5, high 5, original 1000) and Qwen3-4B. */
static const uint32_t TF_LLAMA31[64] = {
    0x3f800000, 0x3f508ac1, 0x3f29e1c6, 0x3f0a6384, 0x3ee177bc, 0x3eb7ab7d,
    0x3e959ee3, 0x3e73c461, 0x3e4693b0, 0x3e21c3a0, 0x3e03c6a0, 0x3dd6b19c,
    0x3daee4ad, 0x3d8e7898, 0x3d681e67, 0x3d3d1684, 0x3d1a08c8, 0x3cfaf53f,
    0x3ccc6f49, 0x3ca68939, 0x3c87a9c3, 0x3c5d06ec, 0x3c340d6d, 0x3c12ac7f,
    0x3beef74f, 0x3bc2aa76, 0x3b9e9402, 0x3b812e35, 0x3b527720, 0x3b0dfd06,
    0x3ab3d11d, 0x3a60979e, 0x3a0995d2, 0x39a3f108, 0x393b2dd2, 0x38c86886,
    0x38a3418d, 0x3884fdbf, 0x3858ac81, 0x38308199, 0x380fc8f8, 0x37ea426f,
    0x37bed4f4, 0x379b7475, 0x377d45c3, 0x374e51f5, 0x3728126b, 0x3708ea0f,
    0x36df10c4, 0x36b5b687, 0x369406cb, 0x36712b80, 0x36447610, 0x36200a69,
    0x36025f34, 0x35d46808, 0x35ad07a7, 0x358cf400, 0x3565a54d, 0x353b12c7,
    0x351864a7, 0x34f848c2, 0x34ca41b0, 0x34a4c2ff,
};
static const uint32_t TF_LLAMA_ODD[45] = {
    0x3f800000, 0x3f454919, 0x3f180995, 0x3eea5592, 0x3eb496c3, 0x3e8b2b95,
    0x3e56808c, 0x3e254e2c, 0x3dfec8b6, 0x3dc45934, 0x3d9750b6, 0x3d6938a3,
    0x3d33bb2b, 0x3d0a825a, 0x3cb2d215, 0x3c57fed6, 0x3c030c5e, 0x3b9fed3b,
    0x3b48cba0, 0x3b1abe07, 0x3aee80d7, 0x3ab7cd3f, 0x3a8da56d, 0x3a5a5179,
    0x3a283f09, 0x3a01a88d, 0x39c7d774, 0x399a01dd, 0x396d5ed1, 0x3936edbf,
    0x390cf92f, 0x38d94804, 0x38a77276, 0x38810ae5, 0x3846e477, 0x3819469a,
    0x37ec3e30, 0x37b60f51, 0x378c4dc5, 0x37583fd1, 0x3726a6dc, 0x37006dfd,
    0x36c5f29f, 0x36988c3b, 0x366b1ef0,
};
static const uint32_t TF_QWEN3_4B[64] = {
    0x3f800000, 0x3f4e4bad, 0x3f263de0, 0x3f05f6ef, 0x3ed7e89b, 0x3eadfcff,
    0x3e8c3504, 0x3e61f835, 0x3e361887, 0x3e12bd91, 0x3dec7fd6, 0x3dbe94c6,
    0x3d99940d, 0x3d778513, 0x3d47763f, 0x3d20bc1d, 0x3d0186e3, 0x3cd0c1a8,
    0x3ca8398b, 0x3c879008, 0x3c5a7bf2, 0x3c301052, 0x3c0de12d, 0x3be4aa46,
    0x3bb8449c, 0x3b947dae, 0x3b6f520e, 0x3b40dac5, 0x3b1b690d, 0x3afa78f0,
    0x3ac9d75c, 0x3aa2a6f7, 0x3a83126f, 0x3a533f28, 0x3a2a3b44, 0x3a092e02,
    0x39dd1725, 0x39b229fb, 0x398f9272, 0x39676492, 0x393a7753, 0x39164324,
    0x38f22ce2, 0x38c327b5, 0x389d43a4, 0x387d75d4, 0x384c3fbe, 0x382497ab,
    0x3804a2b2, 0x37d5c441, 0x37ac431d, 0x378ad0ed, 0x375fba4f, 0x37344a0e,
    0x371148e3, 0x36ea2732, 0x36bcb0c1, 0x36980e02, 0x36751070, 0x36457bab,
    0x361f23e4, 0x36003dec, 0x35ceaf79, 0x35a68e4c,
};

/* the llama_odd config as transformers 5.17 wrote it (to_json_string) */
static const char *LLAMA_ODD_TF5 =
    "{\"attention_bias\":false,\"attention_dropout\":0.0,\"bos_token_id\":1,\"eos_token_id\":2,"
    "\"head_dim\":90,\"hidden_act\":\"silu\",\"hidden_size\":1440,\"initializer_range\":0.02,"
    "\"intermediate_size\":14336,\"max_position_embeddings\":4096,\"mlp_bias\":false,"
    "\"model_type\":\"llama\",\"num_attention_heads\":16,\"num_hidden_layers\":2,"
    "\"num_key_value_heads\":8,\"pad_token_id\":null,\"pretraining_tp\":1,\"rms_norm_eps\":1e-06,"
    "\"rope_parameters\":{\"factor\":3.0,\"high_freq_factor\":5.0,\"low_freq_factor\":1.5,"
    "\"original_max_position_embeddings\":1000,\"rope_theta\":123456.0,\"rope_type\":\"llama3\"},"
    "\"tie_word_embeddings\":false,\"transformers_version\":\"5.17.0\",\"use_cache\":true,"
    "\"vocab_size\":128256}";

static int ulps(float got, uint32_t want) {
    uint32_t g;
    memcpy(&g, &got, 4);
    return g > want ? (int)(g - want) : (int)(want - g);
}

TEST(config_rope_matches_transformers) {
    model_config c;
    char err[512] = "";
    float inv[64];
    int worst = 0;
    CHECK_MSG(parse(&c, LLAMA31, err, sizeof err) == 0, "%s", err);
    config_rope_inv_freq(&c, inv);
    for (int i = 0; i < 64; i++) worst = ulps(inv[i], TF_LLAMA31[i]) > worst ? ulps(inv[i], TF_LLAMA31[i]) : worst;
    CHECK_EQ_INT(worst, 0);
    CHECK_MSG(parse(&c, LLAMA_ODD_TF5, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.head_dim, 90);
    CHECK_EQ_INT(c.rope_type, ROPE_LLAMA3);
    config_rope_inv_freq(&c, inv);
    worst = 0;
    for (int i = 0; i < 45; i++) worst = ulps(inv[i], TF_LLAMA_ODD[i]) > worst ? ulps(inv[i], TF_LLAMA_ODD[i]) : worst;
    CHECK_EQ_INT(worst, 0);
    /* torch's vectorised powf (SLEEF, 1 ulp) rounds one Qwen3-4B entry
     * differently from the correctly rounded pow used here */
    CHECK_MSG(parse(&c, QWEN3_4B, err, sizeof err) == 0, "%s", err);
    config_rope_inv_freq(&c, inv);
    worst = 0;
    int n_off = 0;
    for (int i = 0; i < 64; i++) {
        int u = ulps(inv[i], TF_QWEN3_4B[i]);
        worst = u > worst ? u : worst;
        n_off += u != 0;
    }
    CHECK(worst <= 1);
    CHECK(n_off <= 2);
}

TEST(config_linear_rope) {
    model_config c;
    char err[512] = "";
    char *t = edit(LLAMA31, "\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                            "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"",
                   "\"type\":\"linear\",\"factor\":4.0");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.rope_type, ROPE_LINEAR);
    float inv[64];
    config_rope_inv_freq(&c, inv);
    int bad = 0;
    for (int i = 0; i < 64; i++) {
        double r = ref_inv_freq(500000, 128, i) / 4;
        bad += fabs(inv[i] - r) > 1e-6 * r;
    }
    CHECK_EQ_INT(bad, 0);
    free(t);
    /* rope_type "default" with a factor: no scaling */
    t = edit(LLAMA31, "\"rope_type\":\"llama3\"", "\"rope_type\":\"default\"");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.rope_type, ROPE_DEFAULT);
    free(t);
}

TEST(config_transformers5) {
    model_config c;
    char err[512] = "";
    CHECK_MSG(parse(&c, QWEN3_TF5, err, sizeof err) == 0, "%s", err);
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK_EQ_INT(c.rope_type, ROPE_DEFAULT);
    CHECK_EQ_INT(c.torch_dtype, DT_F16);
    CHECK_EQ_INT(c.head_dim, 96); /* explicit, != 1024 / 16 */
    float inv[48];
    config_rope_inv_freq(&c, inv);
    int bad = 0;
    for (int i = 0; i < 48; i++) {
        double r = ref_inv_freq(1e6, 96, i);
        /* 2i/96 is not exact in float32: the exponent carries ~1e-7 */
        bad += fabs(inv[i] - r) > 2e-6 * r;
    }
    CHECK_EQ_INT(bad, 0);
    /* theta absent everywhere: 10000 */
    char *t = edit(QWEN3_TF5, "\"rope_theta\":1000000,", "");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_NEAR(c.rope_theta, 10000, 0);
    free(t);
    /* "dtype" wins over "torch_dtype" */
    t = edit(QWEN3_TF5, "\"dtype\":\"float16\"", "\"dtype\":\"float32\",\"torch_dtype\":\"bfloat16\"");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.torch_dtype, DT_F32);
    free(t);
    /* neither: F32 */
    t = edit(QWEN3_TF5, "\"dtype\":\"float16\",", "");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.torch_dtype, DT_F32);
    free(t);
}

TEST(config_defaults_and_drafters) {
    model_config c;
    char err[512] = "";
    const char *min = "{\"model_type\":\"qwen3\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"max_position_embeddings\":512}";
    CHECK_MSG(parse(&c, min, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.n_kv_heads, 4);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-12);
    CHECK_NEAR(c.rope_theta, 10000, 0);
    CHECK_EQ_INT(c.tie_word_embeddings, 0);
    CHECK_EQ_INT(c.torch_dtype, DT_F32);
    CHECK_EQ_INT(c.bos_token_id, -1);
    CHECK_EQ_INT(c.n_eos, 0);
    CHECK_EQ_INT(c.attention_bias, 0);
    /* drafter checkpoints keep the target's model_type */
    char *t = edit(QWEN3_4B, "\"Qwen3ForCausalLM\"", "\"Qwen3DSparkModel\"");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    free(t);
    t = edit(QWEN3_4B, "\"Qwen3ForCausalLM\"", "\"DFlashDraftModel\"");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    free(t);
    /* nulls are absent */
    t = edit(QWEN3_4B, "\"bos_token_id\":151643", "\"bos_token_id\":null");
    CHECK_MSG(parse(&c, t, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.bos_token_id, -1);
    free(t);
}

TEST(config_generation) {
    model_config c;
    char err[512] = "";
    CHECK_MSG(parse(&c, QWEN3_4B, err, sizeof err) == 0, "%s", err);
    const char *g1 = "{\"eos_token_id\":7,\"bos_token_id\":3}";
    CHECK_MSG(config_parse_generation(&c, g1, strlen(g1), "generation_config.json", err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 7);
    CHECK_EQ_INT(c.bos_token_id, 3);
    /* absent or null keys change nothing */
    const char *g2 = "{\"eos_token_id\":null,\"temperature\":0.7}";
    CHECK_MSG(config_parse_generation(&c, g2, strlen(g2), "generation_config.json", err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 7);
    /* errors name the file and key, and leave the config untouched */
    const char *g3 = "{\"bos_token_id\":5,\"eos_token_id\":\"</s>\"}";
    CHECK_EQ_INT(config_parse_generation(&c, g3, strlen(g3), "generation_config.json", err, sizeof err), -1);
    CHECK_MSG(strstr(err, "generation_config.json") && strstr(err, "eos_token_id"), "%s", err);
    CHECK_EQ_INT(c.bos_token_id, 3);
    CHECK_EQ_INT(c.eos_token_ids[0], 7);
    const char *g4 = "{\"eos_token_id\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}";
    CHECK_EQ_INT(config_parse_generation(&c, g4, strlen(g4), "generation_config.json", err, sizeof err), -1);
    CHECK(strstr(err, "eos_token_id") != NULL);
    const char *g5 = "{\"eos_token_id\":[1,-2]}";
    CHECK_EQ_INT(config_parse_generation(&c, g5, strlen(g5), "generation_config.json", err, sizeof err), -1);
    const char *g6 = "[1]";
    CHECK_EQ_INT(config_parse_generation(&c, g6, strlen(g6), "generation_config.json", err, sizeof err), -1);
    const char *g7 = "{\"eos_token_id\":";
    CHECK_EQ_INT(config_parse_generation(&c, g7, strlen(g7), "generation_config.json", err, sizeof err), -1);
    CHECK(strstr(err, "generation_config.json") != NULL);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        return;
    }
    fputs(text, f);
    fclose(f);
}

TEST(config_load_dir) {
    char dir[512], err[512] = "";
    snprintf(dir, sizeof dir, "%s/cfg_qwen3", test_tmp_dir());
    mkdir(dir, 0755);
    model_config c;
    CHECK_EQ_INT(config_load(&c, dir, err, sizeof err), -1);
    CHECK(strstr(err, "config.json") != NULL);
    write_text(dir, "config.json", QWEN3_4B);
    CHECK_MSG(config_load(&c, dir, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.n_eos, 1);
    write_text(dir, "generation_config.json", QWEN3_GEN);
    CHECK_MSG(config_load(&c, dir, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.n_eos, 2);
    write_text(dir, "generation_config.json", "{\"eos_token_id\":1.5}");
    CHECK_EQ_INT(config_load(&c, dir, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "generation_config.json") && strstr(err, "eos_token_id"), "%s", err);
    write_text(dir, "config.json", "{\"model_type\":\"gpt2\"}");
    CHECK_EQ_INT(config_load(&c, dir, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "cfg_qwen3/config.json") != NULL, "%s", err);
}

/* Expects base with `from` replaced by `to` to fail with an error
 * containing needle (and "config.json"). */
static void expect_edit_fail(int line, const char *base, const char *from, const char *to, const char *needle) {
    char *t = edit(base, from, to);
    model_config c;
    char err[512] = "";
    int rc = parse(&c, t, err, sizeof err);
    if (rc != -1) test_fail(__FILE__, line, "expected failure for %s -> %s", from, to);
    else if (!strstr(err, needle) || !strstr(err, "config.json"))
        test_fail(__FILE__, line, "error \"%s\" lacks \"%s\"", err, needle);
    free(t);
}
#define EDIT_FAIL(base, from, to, needle) expect_edit_fail(__LINE__, base, from, to, needle)

TEST(config_mistral) {
    model_config c;
    char err[512];
    CHECK_MSG(parse(&c, MISTRAL_V01, err, sizeof err) == 0, "%s", err);
    CHECK(c.arch == ARCH_MISTRAL && !strcmp(config_arch_name(c.arch), "mistral"));
    CHECK_EQ_INT(c.head_dim, 128);
    CHECK_EQ_INT(c.max_position_embeddings, 32768);
    CHECK_EQ_INT(c.sliding_window, 4096);
    int all = 1;
    for (int l = 0; l < c.n_layers; l++) all &= c.sliding[l] == 1;
    CHECK(all && !c.qk_norm && !c.attention_bias && !c.tie_word_embeddings);
    CHECK_EQ_INT(c.bos_token_id, 1);
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 2);
    CHECK_MSG(parse(&c, MISTRAL_NEMO, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.head_dim, 128);
    CHECK_EQ_INT(c.hidden_size, 5120);
    CHECK_EQ_INT(c.sliding_window, 0);
    CHECK_EQ_INT(c.sliding[0], 0);
    /* layer_types name each layer's kind (here the first slides, the second does not) */
    char *two = edit(MISTRAL_V01, "\"num_hidden_layers\":32,", "\"num_hidden_layers\":2,"
                     "\"layer_types\":[\"sliding_attention\",\"full_attention\"],");
    CHECK_MSG(parse(&c, two, err, sizeof err) == 0, "%s", err);
    CHECK(c.sliding_window == 4096 && c.sliding[0] == 1 && c.sliding[1] == 0);
    free(two);
    /* no max_position_embeddings: MistralConfig's 4096 * 32 */
    char *nomax = edit(MISTRAL_V01, "\"max_position_embeddings\":32768,", "");
    CHECK_MSG(parse(&c, nomax, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.max_position_embeddings, 131072);
    free(nomax);
    /* qwen2's sliding_window is inert without use_sliding_window */
    CHECK_MSG(parse(&c, QWEN2, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.sliding_window, 0);
}

TEST(config_qwen3_moe) {
    model_config c;
    char err[512];
    CHECK_MSG(parse(&c, QWEN3_MOE, err, sizeof err) == 0, "%s", err);
    CHECK(c.arch == ARCH_QWEN3_MOE && c.qk_norm && !c.attention_bias);
    CHECK(c.moe_experts == 128 && c.moe_top_k == 8 && c.moe_intermediate_size == 768 && c.moe_norm_topk);
    int all = 1;
    for (int l = 0; l < c.n_layers; l++) all &= c.moe[l] == 1;
    CHECK(all);
    /* decoder_sparse_step 2: layers 1, 3, ... route; mlp_only_layers keeps layer 3 dense */
    char *e = edit(QWEN3_MOE, "\"decoder_sparse_step\":1", "\"decoder_sparse_step\":2");
    char *e2 = edit(e, "\"mlp_only_layers\":[]", "\"mlp_only_layers\":[3]");
    CHECK_MSG(parse(&c, e2, err, sizeof err) == 0, "%s", err);
    CHECK(!c.moe[0] && c.moe[1] && !c.moe[2] && !c.moe[3] && c.moe[5]);
    free(e), free(e2);
    /* the dense families have none */
    CHECK_MSG(parse(&c, QWEN3_4B, err, sizeof err) == 0, "%s", err);
    CHECK(c.moe_experts == 0 && !c.moe[0]);
}

/* Gemma 3 as published: the 1B text model (transformers 4 keys: a
   sliding_window_pattern, rope_local_base_freq) and the 4B multimodal
   checkpoint, whose text_config names only what differs from
   Gemma3TextConfig's defaults; then transformers 5's per-layer-type
   rope_parameters and layer_types, and the refusals. */
static const char GEMMA3_1B[] =
    "{\"architectures\":[\"Gemma3ForCausalLM\"],\"attention_bias\":false,\"attn_logit_softcapping\":null,"
    "\"bos_token_id\":2,\"eos_token_id\":[1,106],\"final_logit_softcapping\":null,\"head_dim\":256,"
    "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":1152,\"intermediate_size\":6912,"
    "\"max_position_embeddings\":32768,\"model_type\":\"gemma3_text\",\"num_attention_heads\":4,"
    "\"num_hidden_layers\":26,\"num_key_value_heads\":1,\"pad_token_id\":0,\"query_pre_attn_scalar\":256,"
    "\"rms_norm_eps\":1e-06,\"rope_local_base_freq\":10000,\"rope_scaling\":null,\"rope_theta\":1000000,"
    "\"sliding_window\":512,\"sliding_window_pattern\":6,\"torch_dtype\":\"bfloat16\",\"vocab_size\":262144}";
static const char GEMMA3_4B[] =
    "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"boi_token_index\":255999,\"eos_token_id\":[1,106],"
    "\"image_token_index\":262144,\"mm_tokens_per_image\":256,\"model_type\":\"gemma3\",\"text_config\":{"
    "\"hidden_size\":2560,\"intermediate_size\":10240,\"model_type\":\"gemma3_text\",\"num_hidden_layers\":34,"
    "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},\"sliding_window\":1024},\"torch_dtype\":\"bfloat16\","
    "\"vision_config\":{\"hidden_size\":1152,\"image_size\":896,\"model_type\":\"siglip_vision_model\","
    "\"num_hidden_layers\":27,\"patch_size\":14}}";
static const char GEMMA3_T5[] =
    "{\"model_type\":\"gemma3_text\",\"vocab_size\":512,\"hidden_size\":64,\"intermediate_size\":160,"
    "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,"
    "\"query_pre_attn_scalar\":24,\"sliding_window\":16,\"final_logit_softcapping\":5.0,"
    "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\"],"
    "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\",\"rope_theta\":1000000.0,\"factor\":2.0},"
    "\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}}}";

TEST(config_gemma3) {
    model_config c;
    char err[512];
    CHECK_MSG(parse(&c, GEMMA3_1B, err, sizeof err) == 0, "%s", err);
    CHECK(c.arch == ARCH_GEMMA3 && !strcmp(config_arch_name(c.arch), "gemma3"));
    CHECK(c.qk_norm && c.norm_plus_one && c.post_norms && c.mlp_gelu && c.tie_word_embeddings && !c.vision_skipped);
    CHECK_EQ_INT(c.head_dim, 256);
    CHECK_EQ_INT(c.sliding_window, 512);
    for (int l = 0; l < c.n_layers; l++) CHECK_EQ_INT(c.sliding[l], (l + 1) % 6 != 0);
    CHECK(c.attn_scale == (float)pow(256.0, -0.5) && c.attn_scale == 0.0625f);
    CHECK(c.embed_scale == (float)sqrt(1152.0));
    CHECK(c.final_softcap == 0 && c.rope_theta == 1e6 && c.rope_local_theta == 1e4 && c.rope_type == ROPE_DEFAULT);
    CHECK(c.n_eos == 2 && c.eos_token_ids[1] == 106 && c.bos_token_id == 2);
    /* the sliding layers' frequencies: default RoPE at the local base */
    float g[128], lo[128];
    config_rope_inv_freq(&c, g);
    CHECK_EQ_INT(config_rope_inv_freq_local(&c, lo), 1);
    CHECK(g[0] == 1.0f && lo[0] == 1.0f && g[1] != lo[1]);
    CHECK(lo[1] == 1.0f / (float)pow(10000.0, (double)(2.0f / 256.0f)));

    CHECK_MSG(parse(&c, GEMMA3_4B, err, sizeof err) == 0, "%s", err);
    CHECK(c.arch == ARCH_GEMMA3 && c.vision_skipped);
    CHECK(c.hidden_size == 2560 && c.n_layers == 34 && c.vocab_size == 262208 && c.n_heads == 8 && c.n_kv_heads == 4);
    CHECK(c.head_dim == 256 && c.sliding_window == 1024 && c.max_position_embeddings == 131072);
    CHECK(c.rope_type == ROPE_LINEAR && c.rope_factor == 8.0f && c.rope_theta == 1e6);
    CHECK(c.n_eos == 2 && c.torch_dtype == DT_BF16 && c.tie_word_embeddings);
    CHECK(c.sliding[4] && !c.sliding[5] && !c.sliding[11] && c.sliding[12]);

    CHECK_MSG(parse(&c, GEMMA3_T5, err, sizeof err) == 0, "%s", err);
    CHECK(c.sliding[0] && c.sliding[1] && !c.sliding[2] && c.sliding[3] && c.sliding_window == 16);
    CHECK(c.rope_type == ROPE_LINEAR && c.rope_factor == 2.0f && c.rope_theta == 1e6 && c.rope_local_theta == 1e4);
    CHECK(c.final_softcap == 5.0f && c.attn_scale == (float)pow(24.0, -0.5));
    /* other families keep one set of frequencies */
    CHECK_MSG(parse(&c, MISTRAL_V01, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(config_rope_inv_freq_local(&c, lo), 0);
    CHECK(c.embed_scale == 0 && c.attn_scale == 0 && !c.norm_plus_one);

    EDIT_FAIL(GEMMA3_1B, "\"attn_logit_softcapping\":null", "\"attn_logit_softcapping\":50.0", "attn_logit_softcapping");
    EDIT_FAIL(GEMMA3_1B, "\"hidden_activation\":\"gelu_pytorch_tanh\"", "\"hidden_activation\":\"gelu\"",
              "\"hidden_activation\" \"gelu\" is not supported for gemma3");
    EDIT_FAIL(GEMMA3_1B, "\"pad_token_id\":0", "\"use_bidirectional_attention\":true", "use_bidirectional_attention");
    EDIT_FAIL(GEMMA3_1B, "\"query_pre_attn_scalar\":256", "\"query_pre_attn_scalar\":0", "query_pre_attn_scalar");
    EDIT_FAIL(GEMMA3_1B, "\"final_logit_softcapping\":null", "\"final_logit_softcapping\":-1", "final_logit_softcapping");
    EDIT_FAIL(GEMMA3_4B, "\"text_config\":{", "\"text_config\":3,\"x\":{", "needs a \"text_config\" object");
    EDIT_FAIL(GEMMA3_T5, "\"rope_type\":\"default\",", "\"rope_type\":\"linear\",\"factor\":2,",
              "only the default rope type");
}

TEST(config_refusals) {
    EDIT_FAIL(QWEN3_4B, "\"model_type\":\"qwen3\"", "\"model_type\":\"phi3\"",
              "config.json: unsupported model_type \"phi3\" (supported: qwen3, qwen2, llama, mistral, qwen3_moe, gemma3, "
              "gemma3_text)");
    EDIT_FAIL(QWEN3_4B, "\"model_type\":\"qwen3\",", "", "\"model_type\"");
    EDIT_FAIL(QWEN3_4B, "\"model_type\":\"qwen3\"", "\"model_type\":3", "\"model_type\"");
    EDIT_FAIL(QWEN3_4B, "\"Qwen3ForCausalLM\"", "\"MistralForCausalLM\"", "does not match model_type");
    EDIT_FAIL(QWEN3_4B, "\"Qwen3ForCausalLM\"", "\"Gemma3ForCausalLM\"", "Gemma3ForCausalLM");
    EDIT_FAIL(MISTRAL_V01, "\"sliding_window\":4096", "\"sliding_window\":0", "\"sliding_window\"");
    EDIT_FAIL(QWEN3_MOE, "\"num_experts_per_tok\":8", "\"num_experts_per_tok\":129", "\"num_experts_per_tok\"");
    EDIT_FAIL(QWEN3_MOE, "\"num_experts_per_tok\":8", "\"num_experts_per_tok\":64", "above 32");
    EDIT_FAIL(QWEN3_MOE, "\"moe_intermediate_size\":768,", "", "\"moe_intermediate_size\"");
    EDIT_FAIL(QWEN3_MOE, "\"mlp_only_layers\":[]", "\"mlp_only_layers\":[48]", "\"mlp_only_layers\"");
    EDIT_FAIL(QWEN3_MOE, "\"mlp_only_layers\":[]", "\"mlp_only_layers\":3", "\"mlp_only_layers\"");
    EDIT_FAIL(MISTRAL_V01, "\"sliding_window\":4096", "\"sliding_window\":\"4096\"", "\"sliding_window\"");
    EDIT_FAIL(MISTRAL_NEMO, "\"num_hidden_layers\":40,", "\"num_hidden_layers\":1,\"layer_types\":[\"sliding_attention\"],",
              "\"sliding_window\" is not set");
    EDIT_FAIL(QWEN3_4B, "\"Qwen3ForCausalLM\"", "\"LlamaForCausalLM\"", "does not match model_type");
    EDIT_FAIL(QWEN3_4B, "[\"Qwen3ForCausalLM\"]", "\"Qwen3ForCausalLM\"", "architectures");
    /* wrong types and ranges name the key */
    EDIT_FAIL(QWEN3_4B, "\"hidden_size\":2560", "\"hidden_size\":\"2560\"", "\"hidden_size\"");
    EDIT_FAIL(QWEN3_4B, "\"hidden_size\":2560", "\"hidden_size\":0", "\"hidden_size\"");
    EDIT_FAIL(QWEN3_4B, "\"vocab_size\":151936", "\"vocab_size\":1e12", "\"vocab_size\"");
    EDIT_FAIL(QWEN3_4B, "\"vocab_size\":151936", "\"vocab_size\":1.5", "\"vocab_size\"");
    EDIT_FAIL(QWEN3_4B, "\"num_hidden_layers\":36", "\"num_hidden_layers\":[36]", "\"num_hidden_layers\"");
    EDIT_FAIL(QWEN3_4B, "\"num_hidden_layers\":36,", "", "missing \"num_hidden_layers\"");
    EDIT_FAIL(QWEN3_4B, "\"intermediate_size\":9728", "\"intermediate_size\":true", "\"intermediate_size\"");
    EDIT_FAIL(QWEN3_4B, "\"rms_norm_eps\":1e-06", "\"rms_norm_eps\":\"1e-6\"", "\"rms_norm_eps\"");
    EDIT_FAIL(QWEN3_4B, "\"rms_norm_eps\":1e-06", "\"rms_norm_eps\":0", "\"rms_norm_eps\"");
    EDIT_FAIL(QWEN3_4B, "\"rope_theta\":1000000", "\"rope_theta\":\"1e6\"", "\"rope_theta\"");
    EDIT_FAIL(QWEN3_4B, "\"rope_theta\":1000000", "\"rope_theta\":-5", "\"rope_theta\"");
    EDIT_FAIL(QWEN3_4B, "\"tie_word_embeddings\":true", "\"tie_word_embeddings\":1", "\"tie_word_embeddings\"");
    EDIT_FAIL(QWEN3_4B, "\"attention_bias\":false", "\"attention_bias\":\"no\"", "\"attention_bias\"");
    EDIT_FAIL(QWEN3_4B, "\"eos_token_id\":151645", "\"eos_token_id\":\"<|im_end|>\"", "\"eos_token_id\"");
    EDIT_FAIL(QWEN3_4B, "\"bos_token_id\":151643", "\"bos_token_id\":-1", "\"bos_token_id\"");
    EDIT_FAIL(QWEN3_4B, "\"max_position_embeddings\":40960,", "", "\"max_position_embeddings\"");
    /* head and width consistency */
    EDIT_FAIL(QWEN3_4B, "\"num_key_value_heads\":8", "\"num_key_value_heads\":7", "\"num_key_value_heads\"");
    EDIT_FAIL(QWEN3_4B, "\"num_key_value_heads\":8", "\"num_key_value_heads\":64", "\"num_key_value_heads\"");
    EDIT_FAIL(QWEN3_4B, "\"head_dim\":128", "\"head_dim\":127", "\"head_dim\"");
    EDIT_FAIL(QWEN3_4B, "\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":2560",
              "\"hidden_act\":\"silu\",\"hidden_size\":2561", "not divisible by \"num_attention_heads\"");
    EDIT_FAIL(QWEN3_4B, "\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":2560",
              "\"hidden_act\":\"silu\",\"hidden_size\":1312", "\"head_dim\" (41) must be even");
    /* unsupported features */
    EDIT_FAIL(QWEN3_4B, "\"use_sliding_window\":false", "\"use_sliding_window\":true",
              "sliding window attention is not supported");
    EDIT_FAIL(QWEN3_TF5, "[\"full_attention\",\"full_attention\"]", "[\"full_attention\",\"sliding_attention\"]",
              "sliding window attention is not supported");
    EDIT_FAIL(QWEN3_TF5, "[\"full_attention\",\"full_attention\"]", "[\"full_attention\"]", "\"layer_types\"");
    EDIT_FAIL(QWEN3_TF5, "[\"full_attention\",\"full_attention\"]", "[\"full_attention\",\"linear_attention\"]",
              "linear_attention");
    EDIT_FAIL(LLAMA31, "\"mlp_bias\":false", "\"mlp_bias\":true", "mlp_bias");
    EDIT_FAIL(QWEN3_4B, "\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"", "\"hidden_act\" \"gelu\"");
    EDIT_FAIL(QWEN3_4B, "\"torch_dtype\":\"bfloat16\"", "\"torch_dtype\":\"float8\"", "\"torch_dtype\"");
    EDIT_FAIL(QWEN3_TF5, "\"dtype\":\"float16\"", "\"dtype\":5", "\"dtype\"");
    /* rope scaling */
    EDIT_FAIL(QWEN3_4B, "\"rope_scaling\":null", "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}",
              "config.json: rope scaling type \"yarn\" is not supported");
    EDIT_FAIL(QWEN3_4B, "\"rope_scaling\":null", "\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}",
              "rope scaling type \"dynamic\" is not supported");
    EDIT_FAIL(QWEN3_TF5, "\"rope_type\":\"default\"", "\"rope_type\":\"yarn\",\"factor\":4.0",
              "rope scaling type \"yarn\" is not supported");
    EDIT_FAIL(QWEN3_4B, "\"rope_scaling\":null", "\"rope_scaling\":{\"factor\":4.0}", "rope_type");
    EDIT_FAIL(QWEN3_4B, "\"rope_scaling\":null", "\"rope_scaling\":[1]", "\"rope_scaling\"");
    EDIT_FAIL(QWEN3_4B, "\"rope_scaling\":null", "\"rope_scaling\":{\"rope_type\":\"linear\"}", "\"factor\"");
    EDIT_FAIL(QWEN3_4B, "\"rope_scaling\":null", "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":\"2\"}",
              "\"factor\"");
    EDIT_FAIL(LLAMA31, "\"low_freq_factor\":1.0,", "", "\"low_freq_factor\"");
    EDIT_FAIL(LLAMA31, "\"original_max_position_embeddings\":8192", "\"original_max_position_embeddings\":8192.5",
              "\"original_max_position_embeddings\"");
    EDIT_FAIL(LLAMA31, "\"high_freq_factor\":4.0", "\"high_freq_factor\":1.0", "\"high_freq_factor\"");
    EDIT_FAIL(LLAMA31, "\"factor\":8.0", "\"factor\":0", "\"factor\"");
    EDIT_FAIL(LLAMA31, "\"rope_theta\":500000.0",
              "\"rope_theta\":500000.0,\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2}", "rope_parameters");
    EDIT_FAIL(QWEN3_TF5, "\"rope_parameters\":{\"rope_theta\":1000000,",
              "\"rope_parameters\":{\"rope_theta\":\"big\",", "\"rope_theta\"");
    /* not JSON / not an object */
    model_config c;
    char err[512];
    CHECK_EQ_INT(parse(&c, "{\"model_type\":", err, sizeof err), -1);
    CHECK(strstr(err, "config.json") != NULL);
    CHECK_EQ_INT(parse(&c, "[]", err, sizeof err), -1);
    CHECK(strstr(err, "config.json") != NULL);
    CHECK_EQ_INT(config_parse(&c, "", 0, "config.json", err, sizeof err), -1);
    CHECK(strstr(err, "config.json") != NULL);
}
