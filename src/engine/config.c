/* config: owns the reading of config.json and generation_config.json into
 * model_config, and the RoPE inverse frequencies derived from it. It is
 * the one place that knows the transformers defaults for qwen3, qwen2 and
 * llama, and the several spellings transformers 4 and 5 use (rope_theta at
 * top level or inside rope_parameters, rope_scaling vs rope_parameters,
 * torch_dtype vs dtype). Anything the forward pass does not implement
 * (sliding windows, yarn, MLP biases, other activations) is refused here
 * with a message naming the key, rather than silently mis-computed. */
#include "engine/config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "base/util.h"

#define MAX_TOKEN_ID 0x7fffffff

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

const char *config_arch_name(ds_arch a) {
    switch (a) {
    case ARCH_QWEN3: return "qwen3";
    case ARCH_QWEN2: return "qwen2";
    case ARCH_LLAMA: return "llama";
    case ARCH_MISTRAL: return "mistral";
    case ARCH_QWEN3_MOE: return "qwen3_moe";
    case ARCH_GEMMA3: return "gemma3";
    }
    return "?";
}

/* Required/optional int into an int field, with a default when absent. */
static int get_int(const cJSON *o, const char *key, int required, int64_t lo, int64_t hi, int def, int *out,
                   const char *ctx, char *err, size_t errlen) {
    int64_t v = def;
    int r = required ? json_req_int(o, key, lo, hi, &v, ctx, err, errlen)
                     : json_opt_int(o, key, lo, hi, &v, ctx, err, errlen);
    if (r < 0) return -1;
    *out = (int)v;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, int def, int *out, const char *ctx, char *err, size_t errlen) {
    int v = def;
    if (json_opt_bool(o, key, &v, ctx, err, errlen) < 0) return -1;
    *out = v;
    return 0;
}

/* A token id or a list of them (eos_token_id may be either). Returns 1
 * when present, 0 when absent or null, -1 on error. */
static int get_ids(const cJSON *o, const char *key, int *ids, int *n, const char *ctx, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsNumber(v)) {
        if (!json_is_int(v, 0, MAX_TOKEN_ID))
            return ds_err(err, errlen, "%s: \"%s\" must be a non-negative integer token id", ctx, key);
        ids[0] = (int)v->valuedouble;
        *n = 1;
        return 1;
    }
    if (!cJSON_IsArray(v))
        return ds_err(err, errlen, "%s: \"%s\" must be an integer or a list of integers", ctx, key);
    int k = 0;
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!json_is_int(e, 0, MAX_TOKEN_ID))
            return ds_err(err, errlen, "%s: \"%s\" must be an integer or a list of non-negative integers", ctx, key);
        if (k == CONFIG_MAX_EOS)
            return ds_err(err, errlen, "%s: \"%s\" lists more than %d ids", ctx, key, CONFIG_MAX_EOS);
        ids[k++] = (int)e->valuedouble;
    }
    *n = k;
    return 1;
}

typedef struct {
    int present;   /* the block exists and is an object */
    int has_type;  /* it names a rope type */
    rope_kind kind;
    double factor, low, high;
    int orig_max;
} rope_block;

/* Reads rope_scaling or rope_parameters (same layout). need_type: a
 * rope_scaling block must say what it is; rope_parameters may carry only
 * rope_theta. */
static int parse_rope_block(const cJSON *root, const char *key, int need_type, rope_block *r, const char *ctx,
                            char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return ds_err(err, errlen, "%s: \"%s\" must be an object or null", ctx, key);
    r->present = 1;
    char sub[600];
    snprintf(sub, sizeof sub, "%s: %s", ctx, key);
    /* transformers reads rope_type first and falls back to the legacy "type" */
    const char *type = NULL;
    int got = json_opt_str(o, "rope_type", &type, sub, err, errlen);
    if (got < 0) return -1;
    if (got == 0 && json_opt_str(o, "type", &type, sub, err, errlen) < 0) return -1;
    if (!type) {
        if (need_type) return ds_err(err, errlen, "%s: \"%s\" has no \"rope_type\"", ctx, key);
        r->kind = ROPE_DEFAULT;
        return 0;
    }
    r->has_type = 1;
    if (strcmp(type, "default") == 0) {
        r->kind = ROPE_DEFAULT;
        return 0;
    }
    if (strcmp(type, "linear") == 0) {
        r->kind = ROPE_LINEAR;
    } else if (strcmp(type, "llama3") == 0) {
        r->kind = ROPE_LLAMA3;
    } else {
        return ds_err(err, errlen, "%s: rope scaling type \"%.64s\" is not supported", ctx, type);
    }
    if (json_req_num(o, "factor", &r->factor, sub, err, errlen) < 0) return -1;
    if (!(r->factor > 0 && r->factor <= 1e6))
        return ds_err(err, errlen, "%s: \"factor\" must be in (0, 1e6]", sub);
    if (r->kind == ROPE_LLAMA3) {
        int64_t om = 0;
        if (json_req_num(o, "low_freq_factor", &r->low, sub, err, errlen) < 0 ||
            json_req_num(o, "high_freq_factor", &r->high, sub, err, errlen) < 0 ||
            json_req_int(o, "original_max_position_embeddings", 1, 1 << 26, &om, sub, err, errlen) < 0)
            return -1;
        if (!(r->low > 0 && r->low <= 1e6)) return ds_err(err, errlen, "%s: \"low_freq_factor\" must be in (0, 1e6]", sub);
        if (!(r->high > r->low && r->high <= 1e6))
            return ds_err(err, errlen, "%s: \"high_freq_factor\" must be greater than \"low_freq_factor\" (and <= 1e6)",
                          sub);
        r->orig_max = (int)om;
    }
    return 0;
}

static const struct {
    const char *name;
    int arch; /* -1: a drafter built on any supported model_type */
} known_archs[] = {
    {"Qwen3ForCausalLM", ARCH_QWEN3},
    {"Qwen2ForCausalLM", ARCH_QWEN2},
    {"LlamaForCausalLM", ARCH_LLAMA},
    {"MistralForCausalLM", ARCH_MISTRAL},
    {"Qwen3MoeForCausalLM", ARCH_QWEN3_MOE},
    {"Gemma3ForCausalLM", ARCH_GEMMA3},
    {"Gemma3ForConditionalGeneration", ARCH_GEMMA3}, /* its text part (the vision tower is skipped) */
    /* drafter checkpoints keep the target's model_type (reference/drafters.md) */
    {"Qwen3DSparkModel", ARCH_QWEN3},
    {"DFlashDraftModel", -1},
};

static int check_architectures(const cJSON *root, ds_arch arch, const char *mt, const char *ctx, char *err,
                               size_t errlen) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (!a || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a)) return ds_err(err, errlen, "%s: \"architectures\" must be a list of strings", ctx);
    for (const cJSON *e = a->child; e; e = e->next) {
        if (!cJSON_IsString(e)) return ds_err(err, errlen, "%s: \"architectures\" must be a list of strings", ctx);
        int found = -2;
        for (size_t i = 0; i < sizeof known_archs / sizeof known_archs[0]; i++)
            if (strcmp(e->valuestring, known_archs[i].name) == 0) found = known_archs[i].arch;
        if (found == -2)
            return ds_err(err, errlen,
                          "%s: unsupported architecture \"%.64s\" (supported: Qwen3ForCausalLM, Qwen2ForCausalLM, "
                          "LlamaForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM, Gemma3ForCausalLM, "
                          "Gemma3ForConditionalGeneration)",
                          ctx, e->valuestring);
        if (found >= 0 && found != (int)arch)
            return ds_err(err, errlen, "%s: architecture \"%.64s\" does not match model_type \"%s\"", ctx,
                          e->valuestring, mt);
    }
    return 0;
}

/* Which layers slide and over how many positions. Mistral: "sliding_window"
   (null: none) applies to every layer, unless "layer_types" names each
   layer's kind; the other families' "sliding_window" keys are inert
   (Qwen2 slides only under "use_sliding_window", refused above), so
   there a "sliding_attention" layer type is refused. */
static int parse_sliding(model_config *c, const cJSON *root, const char *ctx, char *err, size_t errlen) {
    c->sliding_window = 0;
    memset(c->sliding, 0, sizeof c->sliding);
    if (c->n_layers > CONFIG_MAX_LAYERS)
        return ds_err(err, errlen, "%s: \"num_hidden_layers\" (%d) is above %d", ctx, c->n_layers, CONFIG_MAX_LAYERS);
    int64_t w = 0;
    if (c->arch == ARCH_MISTRAL || c->arch == ARCH_GEMMA3) {
        const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
        if (sw && !cJSON_IsNull(sw) && json_opt_int(root, "sliding_window", 1, 1 << 26, &w, ctx, err, errlen) < 0)
            return -1;
    }
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if ((!lt || cJSON_IsNull(lt)) && c->arch == ARCH_GEMMA3) {
        /* transformers 4's Gemma3TextConfig: every sliding_window_pattern-th
           layer is global, the others slide */
        int pat = 6;
        if (get_int(root, "sliding_window_pattern", 0, 1, 1 << 20, 6, &pat, ctx, err, errlen)) return -1;
        if (w <= 0) return ds_err(err, errlen, "%s: gemma3 needs \"sliding_window\"", ctx);
        int any = 0;
        for (int l = 0; l < c->n_layers; l++) any |= c->sliding[l] = (l + 1) % pat != 0;
        c->sliding_window = any ? (int)w : 0;
        return 0;
    }
    if (!lt || cJSON_IsNull(lt)) {
        c->sliding_window = (int)w;
        for (int l = 0; l < c->n_layers; l++) c->sliding[l] = w > 0;
        return 0;
    }
    if (!cJSON_IsArray(lt)) return ds_err(err, errlen, "%s: \"layer_types\" must be a list of strings", ctx);
    int k = 0, any = 0;
    for (const cJSON *e = lt->child; e; e = e->next, k++) {
        if (!cJSON_IsString(e)) return ds_err(err, errlen, "%s: \"layer_types\" must be a list of strings", ctx);
        int slide = strcmp(e->valuestring, "sliding_attention") == 0;
        if (!slide && strcmp(e->valuestring, "full_attention") != 0)
            return ds_err(err, errlen, "%s: \"layer_types\": layer type \"%.64s\" is not supported", ctx,
                          e->valuestring);
        if (slide && c->arch != ARCH_MISTRAL && c->arch != ARCH_GEMMA3)
            return ds_err(err, errlen, "%s: sliding window attention is not supported for %s (\"layer_types\")", ctx,
                          c->model_type);
        if (slide && w <= 0)
            return ds_err(err, errlen, "%s: \"layer_types\" has a sliding layer but \"sliding_window\" is not set",
                          ctx);
        if (k < c->n_layers) c->sliding[k] = (unsigned char)slide;
        any |= slide;
    }
    if (k != c->n_layers)
        return ds_err(err, errlen, "%s: \"layer_types\" has %d entries but \"num_hidden_layers\" is %d", ctx, k,
                      c->n_layers);
    c->sliding_window = any ? (int)w : 0;
    return 0;
}

/* qwen3_moe's experts (transformers' Qwen3MoeConfig): layer l routes when
   it is not in "mlp_only_layers", num_experts > 0 and (l + 1) is a multiple
   of "decoder_sparse_step". */
static int parse_moe(model_config *c, const cJSON *root, const char *ctx, char *err, size_t errlen) {
    c->moe_experts = 0;
    memset(c->moe, 0, sizeof c->moe);
    if (c->arch != ARCH_QWEN3_MOE) return 0;
    int step = 1;
    /* (transformers 5 writes the count as num_local_experts) */
    const char *ek = cJSON_GetObjectItemCaseSensitive(root, "num_experts") ||
                             !cJSON_GetObjectItemCaseSensitive(root, "num_local_experts")
                         ? "num_experts"
                         : "num_local_experts";
    if (get_int(root, ek, 1, 0, 4096, 0, &c->moe_experts, ctx, err, errlen) ||
        get_int(root, "num_experts_per_tok", 1, 1, c->moe_experts > 0 ? c->moe_experts : 1, 1, &c->moe_top_k, ctx,
                err, errlen) ||
        get_int(root, "moe_intermediate_size", 1, 1, 1 << 20, 0, &c->moe_intermediate_size, ctx, err, errlen) ||
        get_int(root, "decoder_sparse_step", 0, 1, 1024, 1, &step, ctx, err, errlen) ||
        get_bool(root, "norm_topk_prob", 0, &c->moe_norm_topk, ctx, err, errlen))
        return -1;
    if (c->moe_top_k > MOE_MAX_TOP_K)
        return ds_err(err, errlen, "%s: \"num_experts_per_tok\" (%d) is above %d", ctx, c->moe_top_k, MOE_MAX_TOP_K);
    if (c->n_layers > CONFIG_MAX_LAYERS)
        return ds_err(err, errlen, "%s: \"num_hidden_layers\" (%d) is above %d", ctx, c->n_layers, CONFIG_MAX_LAYERS);
    for (int l = 0; l < c->n_layers; l++) c->moe[l] = c->moe_experts > 0 && (l + 1) % step == 0;
    const cJSON *ol = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (ol && !cJSON_IsNull(ol)) {
        if (!cJSON_IsArray(ol)) return ds_err(err, errlen, "%s: \"mlp_only_layers\" must be a list of layer indices", ctx);
        for (const cJSON *e = ol->child; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int)e->valuedouble || e->valueint < 0 ||
                e->valueint >= c->n_layers)
                return ds_err(err, errlen, "%s: \"mlp_only_layers\" must be a list of layer indices below %d", ctx,
                              c->n_layers);
            c->moe[e->valueint] = 0;
        }
    }
    return 0;
}

/* Gemma 3's own keys (config.h), on a config already merged over
   Gemma3TextConfig's defaults (gemma3_merged). */
static int parse_gemma3(model_config *c, const cJSON *root, const char *ctx, char *err, size_t errlen) {
    const char *keys[] = {"hidden_activation", "hidden_act"};
    for (int i = 0; i < 2; i++) {
        const char *act = NULL;
        if (json_opt_str(root, keys[i], &act, ctx, err, errlen) < 0) return -1;
        if (act && strcmp(act, "gelu_pytorch_tanh") != 0)
            return ds_err(err, errlen, "%s: \"%s\" \"%.64s\" is not supported for gemma3 (only gelu_pytorch_tanh)", ctx,
                          keys[i], act);
    }
    c->mlp_gelu = 1;
    c->norm_plus_one = 1;
    c->post_norms = 1;
    int bidir = 0;
    if (get_bool(root, "use_bidirectional_attention", 0, &bidir, ctx, err, errlen)) return -1;
    if (bidir) return ds_err(err, errlen, "%s: \"use_bidirectional_attention\" (an embedding model) is not supported", ctx);
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(root, "attn_logit_softcapping");
    if (ac && !cJSON_IsNull(ac))
        return ds_err(err, errlen, "%s: \"attn_logit_softcapping\" is not supported (the attention kernels do not cap)",
                      ctx);
    double q = 256, cap = 0;
    if (json_opt_num(root, "query_pre_attn_scalar", &q, ctx, err, errlen) < 0) return -1;
    if (!(q > 0 && q <= 1e9)) return ds_err(err, errlen, "%s: \"query_pre_attn_scalar\" must be in (0, 1e9]", ctx);
    c->attn_scale = (float)pow(q, -0.5);
    const cJSON *fc = cJSON_GetObjectItemCaseSensitive(root, "final_logit_softcapping");
    if (fc && !cJSON_IsNull(fc)) {
        if (json_opt_num(root, "final_logit_softcapping", &cap, ctx, err, errlen) < 0) return -1;
        if (!(cap > 0 && cap <= 1e6))
            return ds_err(err, errlen, "%s: \"final_logit_softcapping\" must be in (0, 1e6] or null", ctx);
    }
    c->final_softcap = (float)cap;
    c->embed_scale = (float)sqrt((double)c->hidden_size);
    /* RoPE: transformers 5 keeps a dict per layer type in rope_parameters;
       transformers 4 has rope_theta / rope_scaling (read by the caller) and
       rope_local_base_freq */
    double local = 10000.0;
    if (json_opt_num(root, "rope_local_base_freq", &local, ctx, err, errlen) < 0) return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *full = rp ? cJSON_GetObjectItemCaseSensitive(rp, "full_attention") : NULL;
    const cJSON *slid = rp ? cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention") : NULL;
    if (full && cJSON_IsObject(full)) {
        rope_block rb;
        char sub[600];
        snprintf(sub, sizeof sub, "%s: rope_parameters", ctx);
        if (parse_rope_block(rp, "full_attention", 0, &rb, sub, err, errlen) < 0) return -1;
        double th = c->rope_theta;
        snprintf(sub, sizeof sub, "%s: rope_parameters.full_attention", ctx);
        if (json_opt_num(full, "rope_theta", &th, sub, err, errlen) < 0) return -1;
        if (!(th > 1 && th <= 1e12)) return ds_err(err, errlen, "%s: \"rope_theta\" must be in (1, 1e12]", sub);
        c->rope_theta = th;
        c->rope_type = rb.has_type ? rb.kind : ROPE_DEFAULT;
        c->rope_factor = rb.has_type && rb.kind != ROPE_DEFAULT ? (float)rb.factor : 1.0f;
        if (rb.kind == ROPE_LLAMA3) {
            c->rope_low_freq_factor = (float)rb.low;
            c->rope_high_freq_factor = (float)rb.high;
            c->rope_original_max_pos = rb.orig_max;
        }
    }
    if (slid && cJSON_IsObject(slid)) {
        rope_block rb;
        char sub[600];
        snprintf(sub, sizeof sub, "%s: rope_parameters", ctx);
        if (parse_rope_block(rp, "sliding_attention", 0, &rb, sub, err, errlen) < 0) return -1;
        if (rb.has_type && rb.kind != ROPE_DEFAULT)
            return ds_err(err, errlen, "%s.sliding_attention: only the default rope type is supported there", sub);
        snprintf(sub, sizeof sub, "%s: rope_parameters.sliding_attention", ctx);
        if (json_opt_num(slid, "rope_theta", &local, sub, err, errlen) < 0) return -1;
    }
    if (!(local > 1 && local <= 1e12))
        return ds_err(err, errlen, "%s: the sliding layers' rope theta must be in (1, 1e12]", ctx);
    c->rope_local_theta = local;
    return 0;
}

static int parse_root(model_config *c, const cJSON *root, const char *ctx, char *err, size_t errlen) {
    if (!cJSON_IsObject(root)) return ds_err(err, errlen, "%s: not a JSON object", ctx);

    const char *mt = NULL;
    if (json_req_str(root, "model_type", &mt, ctx, err, errlen) < 0) return -1;
    if (strcmp(mt, "qwen3") == 0) c->arch = ARCH_QWEN3;
    else if (strcmp(mt, "qwen2") == 0) c->arch = ARCH_QWEN2;
    else if (strcmp(mt, "llama") == 0) c->arch = ARCH_LLAMA;
    else if (strcmp(mt, "mistral") == 0) c->arch = ARCH_MISTRAL;
    else if (strcmp(mt, "qwen3_moe") == 0) c->arch = ARCH_QWEN3_MOE;
    else if (strcmp(mt, "gemma3_text") == 0) c->arch = ARCH_GEMMA3;
    else
        return ds_err(err, errlen,
                      "%s: unsupported model_type \"%.64s\" (supported: qwen3, qwen2, llama, mistral, qwen3_moe, "
                      "gemma3, gemma3_text)",
                      ctx, mt);
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    if (check_architectures(root, c->arch, mt, ctx, err, errlen) < 0) return -1;

    if (get_int(root, "vocab_size", 1, 1, 10000000, 0, &c->vocab_size, ctx, err, errlen) ||
        get_int(root, "hidden_size", 1, 1, 65536, 0, &c->hidden_size, ctx, err, errlen) ||
        get_int(root, "intermediate_size", 1, 1, 1 << 20, 0, &c->intermediate_size, ctx, err, errlen) ||
        get_int(root, "num_hidden_layers", 1, 1, 1024, 0, &c->n_layers, ctx, err, errlen) ||
        get_int(root, "num_attention_heads", 1, 1, 4096, 0, &c->n_heads, ctx, err, errlen) ||
        get_int(root, "num_key_value_heads", 0, 1, c->n_heads, c->n_heads, &c->n_kv_heads, ctx, err, errlen))
        return -1;
    if (c->n_heads % c->n_kv_heads != 0)
        return ds_err(err, errlen,
                      "%s: \"num_attention_heads\" (%d) is not a multiple of \"num_key_value_heads\" (%d)", ctx,
                      c->n_heads, c->n_kv_heads);
    int64_t hd = 0;
    int r = json_opt_int(root, "head_dim", 1, 4096, &hd, ctx, err, errlen);
    if (r < 0) return -1;
    if (r == 0) {
        if (c->hidden_size % c->n_heads != 0)
            return ds_err(err, errlen,
                          "%s: \"hidden_size\" (%d) is not divisible by \"num_attention_heads\" (%d) and there is no "
                          "\"head_dim\"",
                          ctx, c->hidden_size, c->n_heads);
        hd = c->hidden_size / c->n_heads;
    }
    if (hd % 2 != 0) return ds_err(err, errlen, "%s: \"head_dim\" (%lld) must be even for RoPE", ctx, (long long)hd);
    c->head_dim = (int)hd;
    if ((int64_t)c->n_heads * c->head_dim > (1 << 20))
        return ds_err(err, errlen, "%s: \"num_attention_heads\" * \"head_dim\" (%lld) is too large", ctx,
                      (long long)c->n_heads * c->head_dim);

    /* transformers: Qwen2/Qwen3 configs always carry it; LlamaConfig
     * defaults to 2048, MistralConfig to 4096 * 32 */
    if (get_int(root, "max_position_embeddings",
                c->arch == ARCH_QWEN2 || c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3_MOE || c->arch == ARCH_GEMMA3, 1,
                1 << 26,
                c->arch == ARCH_MISTRAL ? 4096 * 32 : 2048, &c->max_position_embeddings, ctx, err, errlen))
        return -1;

    double eps = 1e-6;
    if (json_opt_num(root, "rms_norm_eps", &eps, ctx, err, errlen) < 0) return -1;
    if (!(eps > 0 && eps < 1)) return ds_err(err, errlen, "%s: \"rms_norm_eps\" must be in (0, 1)", ctx);
    c->rms_norm_eps = (float)eps;

    /* RoPE: transformers 5 puts rope_theta and any scaling in
     * rope_parameters; transformers 4 uses rope_theta and rope_scaling. */
    rope_block rs, rp;
    if (parse_rope_block(root, "rope_scaling", 1, &rs, ctx, err, errlen) < 0 ||
        parse_rope_block(root, "rope_parameters", 0, &rp, ctx, err, errlen) < 0)
        return -1;
    double theta = 10000.0;
    if (json_opt_num(root, "rope_theta", &theta, ctx, err, errlen) < 0) return -1;
    if (rp.present) {
        char sub[600];
        snprintf(sub, sizeof sub, "%s: rope_parameters", ctx);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
        if (json_opt_num(o, "rope_theta", &theta, sub, err, errlen) < 0) return -1;
    }
    if (!(theta > 1 && theta <= 1e12)) return ds_err(err, errlen, "%s: \"rope_theta\" must be in (1, 1e12]", ctx);
    c->rope_theta = theta;
    int rs_scaled = rs.has_type && rs.kind != ROPE_DEFAULT;
    int rp_scaled = rp.has_type && rp.kind != ROPE_DEFAULT;
    if (rs_scaled && rp_scaled && rs.kind != rp.kind)
        return ds_err(err, errlen, "%s: \"rope_scaling\" and \"rope_parameters\" name different rope types", ctx);
    const rope_block *rb = rp_scaled ? &rp : rs_scaled ? &rs : NULL;
    c->rope_type = ROPE_DEFAULT;
    c->rope_factor = 1.0f;
    if (rb) {
        c->rope_type = rb->kind;
        c->rope_factor = (float)rb->factor;
        if (rb->kind == ROPE_LLAMA3) {
            c->rope_low_freq_factor = (float)rb->low;
            c->rope_high_freq_factor = (float)rb->high;
            c->rope_original_max_pos = rb->orig_max;
        }
    }

    if (get_bool(root, "tie_word_embeddings", 0, &c->tie_word_embeddings, ctx, err, errlen)) return -1;
    int ab = 0, mlp_bias = 0, swa = 0;
    if (get_bool(root, "attention_bias", 0, &ab, ctx, err, errlen) ||
        get_bool(root, "mlp_bias", 0, &mlp_bias, ctx, err, errlen) ||
        get_bool(root, "use_sliding_window", 0, &swa, ctx, err, errlen))
        return -1;
    if (c->arch == ARCH_QWEN2) { /* Qwen2Attention: q/k/v with bias, o without, whatever the config says */
        c->attention_bias = 1;
        c->o_bias = 0;
    } else {
        c->attention_bias = ab;
        c->o_bias = ab;
    }
    if (mlp_bias) return ds_err(err, errlen, "%s: \"mlp_bias\" is true: MLP biases are not supported", ctx);
    if (swa) return ds_err(err, errlen, "%s: sliding window attention is not supported (\"use_sliding_window\" is true)", ctx);
    if (parse_sliding(c, root, ctx, err, errlen) < 0) return -1;
    const char *act = NULL;
    if (json_opt_str(root, "hidden_act", &act, ctx, err, errlen) < 0) return -1;
    if (act && strcmp(act, "silu") != 0 && c->arch != ARCH_GEMMA3)
        return ds_err(err, errlen, "%s: \"hidden_act\" \"%.64s\" is not supported (only silu)", ctx, act);
    c->qk_norm = c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3_MOE || c->arch == ARCH_GEMMA3;
    if (c->arch == ARCH_GEMMA3 && parse_gemma3(c, root, ctx, err, errlen) < 0) return -1;
    if (parse_moe(c, root, ctx, err, errlen) < 0) return -1;

    /* transformers 5 writes "dtype", older versions "torch_dtype" */
    const char *dt = NULL, *dkey = "dtype";
    int got = json_opt_str(root, "dtype", &dt, ctx, err, errlen);
    if (got < 0) return -1;
    if (got == 0) {
        dkey = "torch_dtype";
        if (json_opt_str(root, "torch_dtype", &dt, ctx, err, errlen) < 0) return -1;
    }
    c->torch_dtype = DT_F32;
    if (dt) {
        if (strcmp(dt, "bfloat16") == 0) c->torch_dtype = DT_BF16;
        else if (strcmp(dt, "float16") == 0) c->torch_dtype = DT_F16;
        else if (strcmp(dt, "float32") == 0) c->torch_dtype = DT_F32;
        else
            return ds_err(err, errlen, "%s: \"%s\" \"%.64s\" is not supported (bfloat16, float16, float32)", ctx, dkey,
                          dt);
    }

    c->bos_token_id = -1;
    if (get_int(root, "bos_token_id", 0, 0, MAX_TOKEN_ID, -1, &c->bos_token_id, ctx, err, errlen)) return -1;
    c->n_eos = 0;
    if (get_ids(root, "eos_token_id", c->eos_token_ids, &c->n_eos, ctx, err, errlen) < 0) return -1;
    return 0;
}

/* Gemma3TextConfig's defaults: checkpoints (a gemma3 text_config above
   all) leave out what they do not change */
static const char GEMMA3_DEFAULTS[] =
    "{\"vocab_size\":262208,\"hidden_size\":2304,\"intermediate_size\":9216,\"num_hidden_layers\":26,"
    "\"num_attention_heads\":8,\"num_key_value_heads\":4,\"head_dim\":256,\"max_position_embeddings\":131072,"
    "\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,\"query_pre_attn_scalar\":256,\"sliding_window\":4096,"
    "\"rope_local_base_freq\":10000.0,\"tie_word_embeddings\":true,\"bos_token_id\":2,\"eos_token_id\":1,"
    "\"hidden_activation\":\"gelu_pytorch_tanh\"}";

/* m[k] = a copy of v, replacing what m had there */
static void put_item(cJSON *m, const char *k, const cJSON *v) {
    cJSON *d = cJSON_Duplicate(v, 1);
    if (cJSON_GetObjectItemCaseSensitive(m, k)) cJSON_ReplaceItemInObjectCaseSensitive(m, k, d);
    else cJSON_AddItemToObject(m, k, d);
}

/* A gemma3_text config, or a gemma3 checkpoint's text_config (with the
   top level's token ids, dtype and architectures where the text part has
   none), over GEMMA3_DEFAULTS; NULL with err filled when a gemma3 config
   has no text_config object. */
static cJSON *gemma3_merged(const cJSON *root, int multimodal, int *vision, const char *ctx, char *err,
                            size_t errlen) {
    const cJSON *src = root;
    *vision = 0;
    if (multimodal) {
        src = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (!cJSON_IsObject(src)) {
            ds_err(err, errlen, "%s: a gemma3 config needs a \"text_config\" object", ctx);
            return NULL;
        }
        *vision = cJSON_GetObjectItemCaseSensitive(root, "vision_config") != NULL;
    }
    cJSON *m = cJSON_Parse(GEMMA3_DEFAULTS);
    if (!m) {
        ds_err(err, errlen, "%s: out of memory", ctx);
        return NULL;
    }
    for (const cJSON *e = src->child; e; e = e->next)
        if (e->string && strcmp(e->string, "model_type") != 0)
            put_item(m, e->string, e);
    if (multimodal) {
        const char *top[] = {"bos_token_id", "eos_token_id", "torch_dtype", "dtype", "architectures"};
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, top[i]);
            if (v && !cJSON_GetObjectItemCaseSensitive(src, top[i]))
                put_item(m, top[i], v);
        }
    }
    cJSON_AddStringToObject(m, "model_type", "gemma3_text");
    return m;
}

int config_parse(model_config *c, const char *text, size_t n, const char *ctx, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (!ctx) ctx = "config.json";
    cJSON *root = json_parse(text, n, ctx, err, errlen);
    if (!root) return -1;
    const cJSON *mt = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
    int g = cJSON_IsString(mt) ? !strcmp(mt->valuestring, "gemma3") ? 2 : !strcmp(mt->valuestring, "gemma3_text") : 0;
    int rc = -1, vision = 0;
    if (g) {
        cJSON *m = gemma3_merged(root, g == 2, &vision, ctx, err, errlen);
        if (m) rc = parse_root(c, m, ctx, err, errlen);
        cJSON_Delete(m);
        c->vision_skipped = vision;
    } else {
        rc = parse_root(c, root, ctx, err, errlen);
    }
    cJSON_Delete(root);
    return rc;
}

int config_parse_generation(model_config *c, const char *text, size_t n, const char *ctx, char *err,
                            size_t errlen) {
    if (!ctx) ctx = "generation_config.json";
    cJSON *root = json_parse(text, n, ctx, err, errlen);
    if (!root) return -1;
    int rc = -1, bos = c->bos_token_id, n_eos = 0, ids[CONFIG_MAX_EOS];
    int got;
    if (!cJSON_IsObject(root)) {
        ds_err(err, errlen, "%s: not a JSON object", ctx);
        goto done;
    }
    if (get_int(root, "bos_token_id", 0, 0, MAX_TOKEN_ID, bos, &bos, ctx, err, errlen)) goto done;
    if ((got = get_ids(root, "eos_token_id", ids, &n_eos, ctx, err, errlen)) < 0) goto done;
    /* assign only once everything parsed, so a failure changes nothing */
    c->bos_token_id = bos;
    if (got) {
        c->n_eos = n_eos;
        memcpy(c->eos_token_ids, ids, sizeof(int) * (size_t)n_eos);
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int config_load(model_config *c, const char *dir, char *err, size_t errlen) {
    char path[4096];
    if (ds_path_join(path, sizeof path, dir, "config.json") != 0) return ds_err(err, errlen, "%s: path too long", dir);
    size_t n = 0;
    char *text = ds_read_file(path, &n, err, errlen);
    if (!text) return -1;
    int rc = config_parse(c, text, n, path, err, errlen);
    free(text);
    if (rc) return rc;
    if (ds_path_join(path, sizeof path, dir, "generation_config.json") != 0)
        return ds_err(err, errlen, "%s: path too long", dir);
    if (!ds_file_exists(path)) return 0;
    text = ds_read_file(path, &n, err, errlen);
    if (!text) return -1;
    rc = config_parse_generation(c, text, n, path, err, errlen);
    free(text);
    return rc;
}

/* Mirrors transformers' _compute_default_rope_parameters and
 * _compute_llama3_parameters operation by operation in float32, since
 * that is what the reference computes: arange/dim in float32, base**x in
 * float32 (here: pow in double rounded once, i.e. a correctly rounded
 * powf), 1/x in float32. Python scalars meeting a float32 tensor are
 * rounded to float32 first, and `scalar / tensor` is reciprocal(tensor) *
 * scalar. Each step is its own statement so no compiler fuses a
 * multiply-add the reference does not. */
void config_rope_inv_freq(const model_config *c, float *inv_freq) {
    int dim = c->head_dim, half = dim / 2;
    float base = (float)c->rope_theta;
    float factor = c->rope_factor;
    for (int i = 0; i < half; i++) {
        float x = (float)(2 * i) / (float)dim;
        float p = (float)pow((double)base, (double)x);
        float inv = 1.0f / p;
        if (c->rope_type == ROPE_LINEAR) {
            inv = inv / factor;
        } else if (c->rope_type == ROPE_LLAMA3) {
            double old_ctx = (double)c->rope_original_max_pos;
            double lf = (double)c->rope_low_freq_factor, hf = (double)c->rope_high_freq_factor;
            float low_wl = (float)(old_ctx / lf);
            float high_wl = (float)(old_ctx / hf);
            float rcp = 1.0f / inv;
            float wl = rcp * (float)(2.0 * M_PI);
            float llama = wl > low_wl ? inv / factor : inv;
            int medium = !(wl < high_wl) && !(wl > low_wl);
            if (medium) {
                float rwl = 1.0f / wl;
                float a = rwl * (float)old_ctx;
                float b = a - (float)lf;
                float smooth = b / (float)(hf - lf);
                float one_minus = 1.0f - smooth;
                float t1 = one_minus * llama;
                float t2 = t1 / factor;
                float t3 = smooth * llama;
                llama = t2 + t3;
            }
            inv = llama;
        }
        inv_freq[i] = inv;
    }
}

int config_rope_inv_freq_local(const model_config *c, float *inv_freq) {
    if (c->arch != ARCH_GEMMA3 || !c->sliding_window) return 0;
    model_config l = *c;
    l.rope_theta = c->rope_local_theta;
    l.rope_type = ROPE_DEFAULT;
    l.rope_factor = 1.0f;
    config_rope_inv_freq(&l, inv_freq);
    return 1;
}
