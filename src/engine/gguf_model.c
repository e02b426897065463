/* gguf_model: GGUF -> dspark's HF-shaped model description (gguf_model.h).
 *
 * The translation is driven by the names llama.cpp's converter writes
 * (gguf-py's tensor_mapping.py, convert_hf_to_gguf.py) and by the metadata
 * keys it sets ({arch}.embedding_length, ...). Everything is checked before
 * use: an unknown tensor, a layer index past block_count, a quantized
 * tensor that is not 2-D, a metadata value of the wrong type, each is an
 * error naming the file and the key or tensor. */
#include "engine/gguf_model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"

struct gguf_model {
    gguf *g;
    const char *path;  /* the file's name, for messages (owned) */
    int n;
    tensor *t;
    const tensor **sorted; /* by HF name */
    void **owned;          /* un-permuted copies */
    int nowned;
    float *rope_freqs;
    int n_rope_freqs;
    int head_dim; /* the config's */
    char *config, *generation;
};

static const struct {
    const char *arch, *hf_class, *model_type;
} ARCHS[] = {{"qwen3", "Qwen3ForCausalLM", "qwen3"},
             {"qwen2", "Qwen2ForCausalLM", "qwen2"},
             {"llama", "LlamaForCausalLM", "llama"},
             {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
             {"gemma3", "Gemma3ForCausalLM", "gemma3_text"}};
#define N_ARCHS (int)(sizeof ARCHS / sizeof ARCHS[0])
#define ARCH_I_LLAMA 2
#define ARCH_I_QWEN3MOE 3
#define ARCH_I_GEMMA3 4

/* blk.N.<gguf> -> model.layers.N.<hf>; bias: whether .bias may follow */
static const struct {
    const char *gguf, *hf;
    int bias;
} BLK[] = {
    {"attn_q", "self_attn.q_proj", 1},       {"attn_k", "self_attn.k_proj", 1},
    {"attn_v", "self_attn.v_proj", 1},       {"attn_output", "self_attn.o_proj", 1},
    {"attn_q_norm", "self_attn.q_norm", 0},  {"attn_k_norm", "self_attn.k_norm", 0},
    {"attn_norm", "input_layernorm", 0},     {"ffn_norm", "post_attention_layernorm", 0},
    {"ffn_gate", "mlp.gate_proj", 0},        {"ffn_up", "mlp.up_proj", 0},
    {"ffn_down", "mlp.down_proj", 0},        {"ffn_gate_inp", "mlp.gate", 0},
};
/* gemma3's norms around its attention and MLP: ffn_norm is the MLP's input
   norm there, and two more follow the attention and the MLP */
static const struct {
    const char *gguf, *hf;
} BLK_GEMMA[] = {{"ffn_norm", "pre_feedforward_layernorm"},
                 {"post_attention_norm", "post_attention_layernorm"},
                 {"post_ffw_norm", "post_feedforward_layernorm"}};

/* a mixture of experts' stacked tensors (ggml [H or Im, Im or H, E]: each
   expert's matrix one contiguous slice), split into the published
   per-expert names */
static const struct {
    const char *gguf, *hf;
} EXPS[] = {{"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};

/* blk.N.ffn_*_exps.weight: the EXPS entry and N, else -1 */
static int exps_of(const char *g, int *layer) {
    int l = -1, k = -1;
    char what[32];
    if (sscanf(g, "blk.%d.%31[a-z_].weight%n", &l, what, &k) != 2 || k < 0 || g[k] || l < 0) return -1;
    for (int i = 0; i < (int)(sizeof EXPS / sizeof EXPS[0]); i++)
        if (strcmp(what, EXPS[i].gguf) == 0) {
            *layer = l;
            return i;
        }
    return -1;
}

static int dtype_of(uint32_t ggml, ds_dtype *dt) {
    switch (ggml) {
    case GGML_F32: *dt = DT_F32; return 0;
    case GGML_F16: *dt = DT_F16; return 0;
    case GGML_BF16: *dt = DT_BF16; return 0;
    case GGML_Q8_0: *dt = DT_Q8_0; return 0;
    case GGML_Q4_0: *dt = DT_Q4_0; return 0;
    case GGML_Q4_1: *dt = DT_Q4_1; return 0;
    case GGML_Q5_0: *dt = DT_Q5_0; return 0;
    case GGML_Q5_1: *dt = DT_Q5_1; return 0;
    case GGML_Q2_K: *dt = DT_Q2_K; return 0;
    case GGML_Q3_K: *dt = DT_Q3_K; return 0;
    case GGML_Q4_K: *dt = DT_Q4_K; return 0;
    case GGML_Q5_K: *dt = DT_Q5_K; return 0;
    case GGML_Q6_K: *dt = DT_Q6_K; return 0;
    default: return -1;
    }
}

/* The HF name of a GGUF tensor into out, or -1 (unknown name). *layer
 * gets N for blk.N tensors, else -1. */
static int hf_name(const char *g, char *out, size_t n, int *layer, int ai) {
    *layer = -1;
    if (strcmp(g, "token_embd.weight") == 0) return snprintf(out, n, "model.embed_tokens.weight") < 0 ? -1 : 0;
    if (strcmp(g, "output_norm.weight") == 0) return snprintf(out, n, "model.norm.weight") < 0 ? -1 : 0;
    if (strcmp(g, "output.weight") == 0) return snprintf(out, n, "lm_head.weight") < 0 ? -1 : 0;
    if (strncmp(g, "blk.", 4) != 0) return -1;
    const char *p = g + 4;
    long l = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 6) l = l * 10 + (*p++ - '0'), digits++;
    if (!digits || *p != '.' || (digits > 1 && g[4] == '0')) return -1;
    p++;
    const char *dot = strrchr(p, '.');
    if (!dot) return -1;
    size_t base = (size_t)(dot - p);
    int is_bias = strcmp(dot, ".bias") == 0;
    if (!is_bias && strcmp(dot, ".weight") != 0) return -1;
    for (size_t i = 0; ai == ARCH_I_GEMMA3 && !is_bias && i < sizeof BLK_GEMMA / sizeof BLK_GEMMA[0]; i++)
        if (strlen(BLK_GEMMA[i].gguf) == base && strncmp(p, BLK_GEMMA[i].gguf, base) == 0) {
            *layer = (int)l;
            snprintf(out, n, "model.layers.%ld.%s.weight", l, BLK_GEMMA[i].hf);
            return 0;
        }
    for (size_t i = 0; i < sizeof BLK / sizeof BLK[0]; i++) {
        if (strlen(BLK[i].gguf) != base || strncmp(p, BLK[i].gguf, base) != 0) continue;
        if (is_bias && !BLK[i].bias) return -1;
        *layer = (int)l;
        snprintf(out, n, "model.layers.%ld.%s%s", l, BLK[i].hf, dot);
        return 0;
    }
    return -1;
}

static int cmp_tp(const void *a, const void *b) {
    return strcmp((*(const tensor *const *)a)->name, (*(const tensor *const *)b)->name);
}
static int cmp_key(const void *k, const void *b) { return strcmp((const char *)k, (*(const tensor *const *)b)->name); }

void gguf_model_close(gguf_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) free((char *)m->t[i].name);
    free(m->t);
    free(m->sorted);
    for (int i = 0; i < m->nowned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->rope_freqs);
    free(m->config);
    free(m->generation);
    free((char *)m->path);
    gguf_close(m->g);
    free(m);
}

/* A metadata integer {arch}.suffix in [lo, hi]; absent: def, or an error
 * when def < 0 (required). */
static int meta_int(const gguf_model *m, const char *arch, const char *suffix, int64_t lo, int64_t hi, int64_t def,
                    int64_t *v, char *err, size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int r = gguf_get_int(m->g, key, v);
    if (r == -1) {
        if (def < 0) return ds_err(err, errlen, "%s: missing metadata \"%s\"", m->path, key);
        *v = def;
        return 0;
    }
    if (r == -2) return ds_err(err, errlen, "%s: metadata \"%s\" is not a single integer", m->path, key);
    if (*v < lo || *v > hi)
        return ds_err(err, errlen, "%s: metadata \"%s\" is %" PRId64 " (expected %" PRId64 "..%" PRId64 ")", m->path,
                      key, *v, lo, hi);
    return 0;
}

static int meta_float(const gguf_model *m, const char *key, double def, double *v, char *err, size_t errlen) {
    int r = gguf_get_float(m->g, key, v);
    if (r == -1) *v = def;
    else if (r == -2) return ds_err(err, errlen, "%s: metadata \"%s\" is not a float", m->path, key);
    return 0;
}

/* Moves q/k rows (or bias elements) back from the converter's order: GGUF
 * row h*hd + 2*i + j holds HF row h*hd + j*(hd/2) + i (llama's permute:
 * reshape [heads][2][hd/2] -> swap the last two axes). */
static int unpermute(gguf_model *m, tensor *t, int heads, char *err, size_t errlen) {
    int64_t rows = t->shape[0];
    if (heads <= 0 || rows % (2 * (int64_t)heads))
        return ds_err(err, errlen, "%s: tensor \"%s\": %" PRId64 " rows do not split into %d heads of rotary pairs",
                      m->path, t->name, rows, heads);
    size_t rb = t->nbytes / (size_t)rows;
    int64_t hd = rows / heads, half = hd / 2;
    uint8_t *dst = xmalloc(t->nbytes ? t->nbytes : 1);
    const uint8_t *src = t->data;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(dst + (size_t)(h * hd + j * half + i) * rb, src + (size_t)(h * hd + 2 * i + j) * rb, rb);
    m->owned = xrealloc(m->owned, (size_t)(m->nowned + 1) * sizeof *m->owned);
    m->owned[m->nowned++] = dst;
    t->data = dst;
    return 0;
}

/* {arch}.attention.sliding_window and the layers it applies to, as
   layer_types: {arch}.attention.sliding_window_pattern as one flag a
   layer, or a period (the last layer of each is global; default
   def_period, 0: every layer slides). No window: every layer is global. */
static int window_config(const gguf_model *m, cJSON *c, const char *arch, int64_t layers, int64_t def_period,
                         char *err, size_t errlen) {
    int64_t swa = 0, period = def_period;
    char key[128];
    if (meta_int(m, arch, "attention.sliding_window", 0, 1 << 26, 0, &swa, err, errlen)) return -1;
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    const gguf_kv *pat = gguf_find(m->g, key);
    if (swa > 0 && pat && pat->type == GGUF_ARRAY) {
        if (pat->n != (uint64_t)layers || (pat->elt != GGUF_BOOL && pat->elt != GGUF_U8))
            return ds_err(err, errlen, "%s: \"%s\" must be %" PRId64 " flags", m->path, key, layers);
        for (int64_t l = 0; l < layers; l++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(((const uint8_t *)pat->arr)[l] ? "sliding_attention"
                                                                                        : "full_attention"));
    } else {
        if (swa > 0 && meta_int(m, arch, "attention.sliding_window_pattern", def_period ? 1 : 0, 1 << 20, def_period,
                                &period, err, errlen))
            return -1;
        for (int64_t l = 0; l < layers; l++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(swa > 0 && (!period || l % period < period - 1)
                                                            ? "sliding_attention"
                                                            : "full_attention"));
    }
    if (swa > 0) cJSON_AddNumberToObject(c, "sliding_window", (double)swa);
    return 0;
}

/* gemma3's keys as llama.cpp reads them (its gemma3 loader): the sliding
   window and its layer pattern (a period, default 6, or one flag a
   layer), the sliding layers' RoPE base (default 10000), the score scale
   (1/sqrt(head size), for the 62-layer 27B 1/sqrt(hidden / heads)), an
   optional final soft-cap; GELU-tanh gating. The norms it stores already
   carry Gemma's + 1 (model.c reads them as they are). A scale that rule
   does not give (a checkpoint whose query_pre_attn_scalar is not llama.cpp's)
   comes as gemma3.attention.scale, which dspark's quantize writes and
   llama.cpp does not read. */
static int gemma3_config(const gguf_model *m, cJSON *c, int64_t layers, int64_t hidden, int64_t heads, int64_t kl,
                         char *err, size_t errlen) {
    cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    double scale;
    if (meta_float(m, "gemma3.attention.scale", 0, &scale, err, errlen)) return -1;
    if (scale != 0 && !(scale > 1e-6 && scale <= 1e3))
        return ds_err(err, errlen, "%s: \"gemma3.attention.scale\" is %g (expected a positive factor)", m->path, scale);
    /* scale = q^-0.5 rounded to f32: q = 1 / scale^2 gives back that f32 */
    cJSON_AddNumberToObject(c, "query_pre_attn_scalar", scale != 0 ? 1.0 / (scale * scale)
                                                        : layers == 62 ? (double)(hidden / heads)
                                                                       : (double)kl);
    if (window_config(m, c, "gemma3", layers, 6, err, errlen)) return -1;
    double base_swa, cap;
    if (meta_float(m, "gemma3.rope.freq_base_swa", 10000.0, &base_swa, err, errlen) ||
        meta_float(m, "gemma3.final_logit_softcapping", 0, &cap, err, errlen))
        return -1;
    cJSON_AddNumberToObject(c, "rope_local_base_freq", base_swa);
    if (cap > 0) cJSON_AddNumberToObject(c, "final_logit_softcapping", cap);
    return 0;
}

static int build_config(gguf_model *m, int ai, char *err, size_t errlen) {
    const char *arch = ARCHS[ai].arch, *hf_class = ARCHS[ai].hf_class;
    int64_t layers, hidden, ffn, heads, kvh, ctx, kl, vl, rd, vocab, n_exp = 0, n_used = 0, exp_ffn = -1;
    if (ai == ARCH_I_QWEN3MOE &&
        (meta_int(m, arch, "expert_count", 1, 4096, -1, &n_exp, err, errlen) ||
         meta_int(m, arch, "expert_used_count", 1, n_exp, -1, &n_used, err, errlen) ||
         meta_int(m, arch, "expert_feed_forward_length", 1, 1 << 20, -1, &exp_ffn, err, errlen)))
        return -1;
    if (meta_int(m, arch, "block_count", 1, 1024, -1, &layers, err, errlen) ||
        meta_int(m, arch, "embedding_length", 1, 65536, -1, &hidden, err, errlen) ||
        meta_int(m, arch, "feed_forward_length", 1, 1 << 20, exp_ffn, &ffn, err, errlen) ||
        meta_int(m, arch, "attention.head_count", 1, 4096, -1, &heads, err, errlen) ||
        meta_int(m, arch, "attention.head_count_kv", 1, heads, heads, &kvh, err, errlen) ||
        meta_int(m, arch, "context_length", 1, 1 << 26, 2048, &ctx, err, errlen) ||
        meta_int(m, arch, "attention.key_length", 1, 4096, hidden % heads ? -1 : hidden / heads, &kl, err, errlen) ||
        meta_int(m, arch, "attention.value_length", 1, 4096, kl, &vl, err, errlen) ||
        meta_int(m, arch, "rope.dimension_count", 1, 4096, kl, &rd, err, errlen))
        return -1;
    if (vl != kl)
        return ds_err(err, errlen, "%s: value_length %" PRId64 " differs from key_length %" PRId64 " (not supported)",
                      m->path, vl, kl);
    if (rd != kl)
        return ds_err(err, errlen, "%s: %s.rope.dimension_count %" PRId64 " is not the head size %" PRId64
                      " (partial rotary embedding is not supported)", m->path, arch, rd, kl);
    m->head_dim = (int)kl;
    const tensor *emb = gguf_model_find(m, "model.embed_tokens.weight");
    if (!emb || emb->ndim != 2) return ds_err(err, errlen, "%s: no 2-D token_embd.weight", m->path);
    if (meta_int(m, arch, "vocab_size", 1, 10000000, emb->shape[0], &vocab, err, errlen)) return -1;
    char key[128];
    double eps, theta;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (meta_float(m, key, 1e-6, &eps, err, errlen)) return -1;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    if (meta_float(m, key, 10000.0, &theta, err, errlen)) return -1;

    /* a llama file with a sliding window is a Mistral (dspark's quantize
       writes the window; llama.cpp's llama graph does not read it) */
    int64_t llama_swa = 0;
    if (ai == ARCH_I_LLAMA && meta_int(m, arch, "attention.sliding_window", 0, 1 << 26, 0, &llama_swa, err, errlen))
        return -1;
    cJSON *c = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(llama_swa ? "MistralForCausalLM" : hf_class));
    cJSON_AddStringToObject(c, "model_type", llama_swa ? "mistral" : ARCHS[ai].model_type);
    if (llama_swa && window_config(m, c, arch, layers, 0, err, errlen)) {
        cJSON_Delete(c);
        return -1;
    }
    if (ai == ARCH_I_QWEN3MOE) {
        /* llama.cpp's qwen3moe graph renormalizes the chosen experts' weights */
        cJSON_AddNumberToObject(c, "num_experts", (double)n_exp);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)n_used);
        cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)exp_ffn);
        cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
        /* the layers without a router (llama.cpp's qwen3moe has one in every
           layer; a file may still leave some dense) */
        cJSON *only = cJSON_AddArrayToObject(c, "mlp_only_layers");
        for (int64_t l = 0; l < layers; l++) {
            char nm[96];
            snprintf(nm, sizeof nm, "model.layers.%" PRId64 ".mlp.gate.weight", l);
            if (!gguf_model_find(m, nm)) cJSON_AddItemToArray(only, cJSON_CreateNumber((double)l));
        }
    }
    cJSON_AddNumberToObject(c, "vocab_size", (double)vocab);
    cJSON_AddNumberToObject(c, "hidden_size", (double)hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)ffn);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)kvh);
    cJSON_AddNumberToObject(c, "head_dim", (double)kl);
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)ctx);
    cJSON_AddNumberToObject(c, "rms_norm_eps", eps);
    cJSON_AddNumberToObject(c, "rope_theta", theta);
    if (ai == ARCH_I_GEMMA3) {
        if (gemma3_config(m, c, layers, hidden, heads, kl, err, errlen) != 0) {
            cJSON_Delete(c);
            return -1;
        }
    } else {
        cJSON_AddStringToObject(c, "hidden_act", "silu");
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", gguf_model_find(m, "lm_head.weight") == NULL);
    /* qwen2 always has q/k/v biases; the others say so by their tensors */
    int bias = strcmp(arch, "qwen2") == 0 || gguf_model_find(m, "model.layers.0.self_attn.q_proj.bias");
    cJSON_AddBoolToObject(c, "attention_bias", bias);
    if (emb->dtype == DT_BF16 || emb->dtype == DT_F16 || emb->dtype == DT_F32)
        cJSON_AddStringToObject(c, "dtype", emb->dtype == DT_BF16 ? "bfloat16" : emb->dtype == DT_F16 ? "float16" : "float32");

    /* RoPE scaling as metadata: linear is supported, yarn and the others
       are not (config.c refuses them too); "none" means none */
    gguf_str st = {0};
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int r = gguf_get_str(m->g, key, &st);
    double factor = 0;
    if (r == -2) goto bad_type;
    if (r == 0 && strcmp(st.s, "none") != 0) {
        if (strcmp(st.s, "linear") != 0) {
            cJSON_Delete(c);
            return ds_err(err, errlen, "%s: \"%s\" is \"%.32s\": only linear RoPE scaling is supported", m->path, key,
                          st.s);
        }
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        if (gguf_get_float(m->g, key, &factor) != 0) goto bad_type;
    } else if (r == -1) {
        snprintf(key, sizeof key, "%s.rope.scale_linear", arch); /* the older spelling */
        r = gguf_get_float(m->g, key, &factor);
        if (r == -2) goto bad_type;
        if (r == -1) factor = 0;
    }
    if (factor != 0 && factor != 1) {
        cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "linear");
        cJSON_AddNumberToObject(rs, "factor", factor);
    }

    int64_t bos, ids[3];
    int nid = 0;
    cJSON *gen = cJSON_CreateObject();
    r = gguf_get_int(m->g, "tokenizer.ggml.bos_token_id", &bos);
    if (r == -2 || (r == 0 && (bos < 0 || bos >= vocab))) {
        snprintf(key, sizeof key, "tokenizer.ggml.bos_token_id");
        cJSON_Delete(gen);
        goto bad_type;
    }
    if (r == 0) {
        cJSON_AddNumberToObject(c, "bos_token_id", (double)bos);
        cJSON_AddNumberToObject(gen, "bos_token_id", (double)bos);
    }
    /* end of generation: the eos token, and end-of-turn / end-of-message
       where the file names them (HF configs list them all in eos_token_id) */
    static const char *EOS[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                "tokenizer.ggml.eom_token_id"};
    for (int i = 0; i < 3; i++) {
        int64_t v;
        r = gguf_get_int(m->g, EOS[i], &v);
        if (r == -1) continue;
        if (r == -2 || v < 0 || v >= vocab) {
            snprintf(key, sizeof key, "%s", EOS[i]);
            cJSON_Delete(gen);
            goto bad_type;
        }
        int dup = 0;
        for (int k = 0; k < nid; k++) dup |= ids[k] == v;
        if (!dup) ids[nid++] = v;
    }
    if (nid) {
        cJSON *e1 = cJSON_AddArrayToObject(c, "eos_token_id"), *e2 = cJSON_AddArrayToObject(gen, "eos_token_id");
        for (int k = 0; k < nid; k++) {
            cJSON_AddItemToArray(e1, cJSON_CreateNumber((double)ids[k]));
            cJSON_AddItemToArray(e2, cJSON_CreateNumber((double)ids[k]));
        }
    }
    m->config = cJSON_Print(c);
    m->generation = cJSON_Print(gen);
    cJSON_Delete(c);
    cJSON_Delete(gen);
    if (!m->config || !m->generation) return ds_err(err, errlen, "%s: out of memory building config.json", m->path);
    return 0;
bad_type:
    cJSON_Delete(c);
    return ds_err(err, errlen, "%s: metadata \"%s\" has the wrong type or is out of range", m->path, key);
}

int gguf_model_open(gguf_model **out, const char *path, int read_into_memory, char *err, size_t errlen) {
    *out = NULL;
    gguf *g = NULL;
    if (gguf_open(&g, path, read_into_memory, err, errlen) != 0) return -1;
    gguf_model *m = xcalloc(1, sizeof *m);
    m->g = g;
    m->path = xstrdup(path);
    gguf_str as;
    int r = gguf_get_str(g, "general.architecture", &as);
    if (r != 0) {
        ds_err(err, errlen, "%s: %s \"general.architecture\"", path, r == -1 ? "missing" : "non-string");
        goto fail;
    }
    int ai = -1;
    for (int i = 0; i < N_ARCHS; i++)
        if (strcmp(as.s, ARCHS[i].arch) == 0) ai = i;
    if (ai < 0) {
        ds_err(err, errlen, "%s: unsupported architecture \"%.64s\" (supported: qwen3, qwen2, llama, qwen3moe, gemma3)",
               path,
               as.s);
        goto fail;
    }
    const char *arch = ARCHS[ai].arch;
    int64_t layers, heads, kvh;
    if (meta_int(m, arch, "block_count", 1, 1024, -1, &layers, err, errlen) ||
        meta_int(m, arch, "attention.head_count", 1, 4096, -1, &heads, err, errlen) ||
        meta_int(m, arch, "attention.head_count_kv", 1, heads, heads, &kvh, err, errlen))
        goto fail;

    int nt = gguf_tensor_count(g);
    size_t cap = (size_t)nt + 1;
    for (int i = 0; i < nt; i++) { /* each stacked expert tensor becomes one per expert */
        const gguf_tensor *gt = gguf_tensor_at(g, i);
        int l;
        if (ai == ARCH_I_QWEN3MOE && exps_of(gt->name, &l) >= 0 && gt->ndim == 3 && gt->ne[2] > 0 &&
            gt->ne[2] <= 4096)
            cap += (size_t)gt->ne[2];
    }
    m->t = xcalloc(cap, sizeof *m->t);
    for (int i = 0; i < nt; i++) {
        const gguf_tensor *gt = gguf_tensor_at(g, i);
        int xl, xi = ai == ARCH_I_QWEN3MOE ? exps_of(gt->name, &xl) : -1;
        if (xi >= 0) {
            ds_dtype dt;
            if (gt->ndim != 3 || gt->ne[2] < 1 || gt->ne[2] > 4096 || gt->ne[3] != 1 || gt->nbytes % gt->ne[2]) {
                ds_err(err, errlen, "%s: tensor \"%s\" must be 3-D [in, out, experts]", path, gt->name);
                goto fail;
            }
            if (xl >= layers) {
                ds_err(err, errlen, "%s: tensor \"%s\": layer %d, but %s.block_count is %" PRId64, path, gt->name,
                       xl, arch, layers);
                goto fail;
            }
            if (dtype_of(gt->type, &dt) != 0) {
                const char *tn = gguf_type_name(gt->type);
                ds_err(err, errlen, "%s: tensor \"%s\": ggml type %s (%u) is not supported", path, gt->name,
                       tn ? tn : "unknown", gt->type);
                goto fail;
            }
            const size_t per = gt->nbytes / (size_t)gt->ne[2];
            for (int64_t e = 0; e < gt->ne[2]; e++) {
                tensor *t = &m->t[m->n];
                char nm[160];
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%" PRId64 ".%s.weight", xl, e, EXPS[xi].hf);
                t->name = xstrdup(nm);
                m->n++;
                t->dtype = dt;
                t->file = gt->file;
                t->data = (const char *)gt->data + (size_t)e * per;
                t->nbytes = per;
                t->ndim = 2;
                t->shape[0] = gt->ne[1];
                t->shape[1] = gt->ne[0];
            }
            continue;
        }
        if (strcmp(gt->name, "rope_freqs.weight") == 0) {
            if (gt->type != GGML_F32 || gt->ndim != 1) {
                ds_err(err, errlen, "%s: tensor \"rope_freqs.weight\" must be 1-D F32", path);
                goto fail;
            }
            m->n_rope_freqs = (int)gt->ne[0];
            m->rope_freqs = xmalloc((size_t)gt->ne[0] * sizeof(float) + 1);
            memcpy(m->rope_freqs, gt->data, gt->nbytes); /* aligned copy of possibly unaligned bytes */
            continue;
        }
        char nm[160];
        int layer;
        if (hf_name(gt->name, nm, sizeof nm, &layer, ai) != 0) {
            ds_err(err, errlen, "%s: tensor \"%s\" is not one of a %s model's", path, gt->name, arch);
            goto fail;
        }
        if (layer >= layers) {
            ds_err(err, errlen, "%s: tensor \"%s\": layer %d, but %s.block_count is %" PRId64, path, gt->name, layer,
                   arch, layers);
            goto fail;
        }
        tensor *t = &m->t[m->n];
        if (dtype_of(gt->type, &t->dtype) != 0) {
            const char *tn = gguf_type_name(gt->type);
            ds_err(err, errlen, "%s: tensor \"%s\": ggml type %s (%u) is not supported", path, gt->name,
                   tn ? tn : "unknown", gt->type);
            goto fail;
        }
        t->name = xstrdup(nm);
        m->n++;
        t->file = gt->file;
        t->data = gt->data;
        t->nbytes = gt->nbytes;
        int nd = gt->ndim;
        /* trailing ggml dims of 1 beyond the stored count do not exist */
        t->ndim = nd;
        for (int k = 0; k < nd; k++) t->shape[k] = gt->ne[nd - 1 - k];
        if (dtype_is_quant(t->dtype)) {
            if (nd == 1 || gt->ne[2] != 1 || gt->ne[3] != 1) {
                ds_err(err, errlen, "%s: tensor \"%s\": a %s tensor must be 2-D", path, gt->name,
                       gguf_type_name(gt->type));
                goto fail;
            }
            t->ndim = 2;
            t->shape[0] = gt->ne[1];
            t->shape[1] = gt->ne[0];
        }
        if (ai == ARCH_I_LLAMA && layer >= 0) {
            /* llama: q and k (weights and biases) were permuted */
            int isq = strstr(nm, ".q_proj.") != NULL, isk = strstr(nm, ".k_proj.") != NULL;
            if ((isq || isk) && t->shape[0] > 0 &&
                unpermute(m, t, (int)(isq ? heads : kvh), err, errlen) != 0)
                goto fail;
        }
    }
    m->sorted = xmalloc((m->n ? (size_t)m->n : 1) * sizeof *m->sorted);
    for (int i = 0; i < m->n; i++) m->sorted[i] = &m->t[i];
    qsort(m->sorted, (size_t)m->n, sizeof *m->sorted, cmp_tp);
    /* two GGUF names cannot map to one HF name (the map is injective), but
       a file could still hold e.g. blk.1 and blk.01: hf_name refuses the
       latter, so the check below only guards the invariant */
    for (int i = 1; i < m->n; i++)
        if (strcmp(m->sorted[i - 1]->name, m->sorted[i]->name) == 0) {
            ds_err(err, errlen, "%s: two tensors map to \"%s\"", path, m->sorted[i]->name);
            goto fail;
        }
    if (build_config(m, ai, err, errlen) != 0) goto fail;
    if (m->rope_freqs) {
        if (m->n_rope_freqs * 2 != m->head_dim) {
            ds_err(err, errlen, "%s: rope_freqs.weight has %d factors, expected head_dim/2 = %d", path,
                   m->n_rope_freqs, m->head_dim / 2);
            goto fail;
        }
    }
    *out = m;
    return 0;
fail:
    gguf_model_close(m);
    return -1;
}

const char *gguf_model_config_json(const gguf_model *m) { return m->config; }
const char *gguf_model_generation_json(const gguf_model *m) { return m->generation; }
int gguf_model_tensor_count(const gguf_model *m) { return m->n; }
const tensor *gguf_model_tensor_at(const gguf_model *m, int i) { return i >= 0 && i < m->n ? &m->t[i] : NULL; }
const tensor *gguf_model_find(const gguf_model *m, const char *hf) {
    if (!m->sorted) { /* during construction: linear */
        for (int i = 0; i < m->n; i++)
            if (strcmp(m->t[i].name, hf) == 0) return &m->t[i];
        return NULL;
    }
    const tensor **r = bsearch(hf, m->sorted, (size_t)m->n, sizeof *m->sorted, cmp_key);
    return r ? *r : NULL;
}
const float *gguf_model_rope_freqs(const gguf_model *m, int *n) {
    if (n) *n = m->n_rope_freqs;
    return m->rope_freqs;
}
const gguf *gguf_model_file(const gguf_model *m) { return m->g; }
