/* Families beyond qwen3 / qwen2 / llama on the CPU, by construction (the
 * golden forwards against transformers are in test_model.c): tiny random
 * checkpoints written here, whose weights are a function of each tensor's
 * name (so two checkpoints share the tensors they both name).
 *   - moe_route: the router rule against a double-precision reference,
 *     ties to the lower index, renormalized or not.
 *   - qwen3_moe with one expert of top 1 is the dense qwen3 of the same
 *     weights, bit for bit; with 8 experts of top 2 (one layer dense by
 *     mlp_only_layers) every row's logits are the same bits whether the
 *     prompt runs as one batch, one token at a time or in chunks of 5.
 *   - a qwen3moe GGUF (stacked BF16 experts, as llama.cpp's converter
 *     writes them) of those weights gives the same logits bit for bit; with
 *     Q8_0 experts, logits within 5e-2 of the largest, batch-invariant.
 *   - the same invariance (and the GGUF's same bits) on the device
 *     $DSPARK_DEVICE names (scripts/test-cuda: the GPU), there within 1e-3
 *     of the CPU's largest logit (families_moe_invariant).
 *   - mistral with a window over every position is the llama of the same
 *     weights, bit for bit; with a 5-position window (shorter than the
 *     prompt) the rows are batch-invariant the same way and differ from
 *     the unwindowed model.
 *   - gemma3 against a double-precision transcription of transformers'
 *     Gemma3ForCausalLM (sliding and global layers, their RoPE bases, the
 *     (1 + w) and post norms, GELU gating, scaled embedding and scores,
 *     soft-capped logits), batch-invariant, and the same in the gemma3
 *     (multimodal) checkpoint layout. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/gguf_write.h"
#include "base/util.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/quant_encode.h"
#include "engine/safetensors.h"
#include "engine/moe.h"
#include "engine/quant.h"
#include "hooks.h"
#include "test.h"

enum { FV = 512, FH = 32, FI = 48, FNH = 4, FNKV = 2, FHD = 16, FL = 2, FT = 24 };

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* the weight of element j of the tensor named name ("experts.0." left out,
   so a one-expert checkpoint shares its expert with the dense MLP; a
   leading "language_model." too, so a gemma3 checkpoint's text model has
   the gemma3_text one's weights) */
static float weight_of(const char *name, size_t j, int norm) {
    char canon[160];
    if (!strncmp(name, "language_model.", 15)) name += 15;
    const char *e = strstr(name, "experts.0.");
    if (e) snprintf(canon, sizeof canon, "%.*s%s", (int)(e - name), name, e + 10);
    else snprintf(canon, sizeof canon, "%s", name);
    uint32_t r = name_hash(canon) ^ (uint32_t)(j * 2654435761u);
    r ^= r >> 15, r *= 2246822519u, r ^= r >> 13, r *= 3266489917u, r ^= r >> 16;
    float u = (float)(r >> 8) / 16777216.0f - 0.5f;
    return norm ? 1.0f + 0.4f * u : 0.9f * u;
}

typedef struct {
    char name[96];
    long d0, d1;
} tdef;

/* config.json text and the tensors of a family checkpoint in dir */
static int write_ckpt(const char *dir, const char *config, const tdef *t, int nt) {
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(config, f);
    fclose(f);
    char *hdr = xmalloc(1 << 17);
    size_t n = (size_t)snprintf(hdr, 1 << 17, "{"), off = 0;
    for (int i = 0; i < nt; i++) {
        size_t bytes = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1) * 2;
        char shape[64];
        if (t[i].d1) snprintf(shape, sizeof shape, "%ld,%ld", t[i].d0, t[i].d1);
        else snprintf(shape, sizeof shape, "%ld", t[i].d0);
        n += (size_t)snprintf(hdr + n, (1 << 17) - n,
                              "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}", i ? "," : "",
                              t[i].name, shape, off, off + bytes);
        off += bytes;
    }
    hdr[n++] = '}';
    while (n % 8) hdr[n++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) return free(hdr), -1;
    uint64_t hl = n;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, n, f);
    free(hdr);
    for (int i = 0; i < nt; i++) {
        size_t cnt = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1);
        for (size_t j = 0; j < cnt; j++) {
            uint16_t b = ds_f32_to_bf16(weight_of(t[i].name, j, t[i].d1 == 0));
            fwrite(&b, 2, 1, f);
        }
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* the tensors: qk norms (qwen3 kinds), each layer's MLP dense or experts */
static int make_tensors(tdef *t, int qk_norm, int experts, const int *dense_layer) {
    int nt = 0;
#define ADD(a, b, ...)                                                                                             \
    do {                                                                                                           \
        snprintf(t[nt].name, sizeof t[nt].name, __VA_ARGS__);                                                      \
        t[nt].d0 = a, t[nt].d1 = b, nt++;                                                                          \
    } while (0)
    ADD(FV, FH, "model.embed_tokens.weight");
    ADD(FV, FH, "lm_head.weight");
    ADD(FH, 0, "model.norm.weight");
    for (int l = 0; l < FL; l++) {
        ADD(FH, 0, "model.layers.%d.input_layernorm.weight", l);
        ADD(FH, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(FNH * FHD, FH, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(FNKV * FHD, FH, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(FNKV * FHD, FH, "model.layers.%d.self_attn.v_proj.weight", l);
        ADD(FH, FNH * FHD, "model.layers.%d.self_attn.o_proj.weight", l);
        if (qk_norm) {
            ADD(FHD, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            ADD(FHD, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        if (!experts || dense_layer[l]) {
            ADD(FI, FH, "model.layers.%d.mlp.gate_proj.weight", l);
            ADD(FI, FH, "model.layers.%d.mlp.up_proj.weight", l);
            ADD(FH, FI, "model.layers.%d.mlp.down_proj.weight", l);
            continue;
        }
        ADD(experts, FH, "model.layers.%d.mlp.gate.weight", l);
        for (int e = 0; e < experts; e++) {
            ADD(FI, FH, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
            ADD(FI, FH, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
            ADD(FH, FI, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
        }
    }
#undef ADD
    return nt;
}

static const char *COMMON = "\"vocab_size\":512,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":2,"
                            "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
                            "\"max_position_embeddings\":256,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,"
                            "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"eos_token_id\":2";

/* every row's logits of prompt ids[FT] run in chunks of `chunk` rows, on
   device (NULL: $DSPARK_DEVICE, else the CPU) */
static float *logits_on(const char *dir, int chunk, const char *device) {
    model *m;
    char err[512];
    model_load_opts lo = {.device = device};
    if (model_load(&m, dir, &lo, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s: %s", dir, err);
        return NULL;
    }
    model_ctx *c;
    if (mctx_create(&c, m, 64, 8, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        model_free(m);
        return NULL;
    }
    float *out = xmalloc(sizeof(float) * FT * FV);
    int ids[FT], pos[FT];
    for (int i = 0; i < FT; i++) ids[i] = (i * 37 + 11) % FV, pos[i] = i;
    for (int i0 = 0; i0 < FT; i0 += chunk) {
        int n = FT - i0 < chunk ? FT - i0 : chunk;
        model_batch b = {.n = n, .tokens = ids + i0, .pos = pos + i0, .n_logits = n, .logits = out + (size_t)i0 * FV};
        if (model_forward(c, &b, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            break;
        }
    }
    mctx_free(c);
    model_free(m);
    return out;
}

static float *logits_of(const char *dir, int chunk) { return logits_on(dir, chunk, NULL); }

/* max |a - b| over every logit, and max |a| into *amax */
static double max_diff(const float *a, const float *b, double *amax) {
    double mx = 0, dd = 0;
    for (size_t i = 0; i < (size_t)FT * FV; i++) {
        mx = fabs(a[i]) > mx ? fabs(a[i]) : mx;
        dd = fabs(a[i] - b[i]) > dd ? fabs(a[i] - b[i]) : dd;
    }
    *amax = mx;
    return dd;
}

static void check_invariant(const char *dir, const char *what) {
    float *a = logits_of(dir, FT), *b = logits_of(dir, 1), *c = logits_of(dir, 5);
    if (a && b && c) {
        CHECK_MSG(!memcmp(a, b, sizeof(float) * FT * FV), "%s: rows one at a time differ from the whole batch", what);
        CHECK_MSG(!memcmp(a, c, sizeof(float) * FT * FV), "%s: chunks of 5 differ from the whole batch", what);
        double mx = 0;
        for (size_t i = 0; i < (size_t)FT * FV; i++) mx = fabs(a[i]) > mx ? fabs(a[i]) : mx;
        CHECK_MSG(mx > 0.1 && isfinite(mx), "%s: logits %g", what, mx);
    }
    free(a), free(b), free(c);
}

/* one tensor's declaration and its BF16 data: HF matrices [rows][cols] are
   ggml {cols, rows}; stacked experts {cols, rows, E}, expert e the e-th
   slice, each from its per-expert HF name */
typedef struct {
    char gguf[96], hf[96]; /* hf: a printf format with %d for the expert when stacked */
    int64_t rows, cols;
    int experts;
} gdef;

/* the keys both test GGUFs share: ARCH.* shape, norm eps, rope base */
static void gguf_w_shape(gguf_writer *w, const char *arch, int layers, float theta) {
    char k[96];
#define KU(name, v) (snprintf(k, sizeof k, "%s." name, arch), gguf_w_u32(w, k, (uint32_t)(v)))
    gguf_w_str(w, "general.architecture", arch);
    KU("block_count", layers);
    KU("context_length", 256);
    KU("embedding_length", FH);
    KU("feed_forward_length", FI);
    KU("attention.head_count", FNH);
    KU("attention.head_count_kv", FNKV);
    KU("attention.key_length", FHD);
    KU("attention.value_length", FHD);
#undef KU
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_w_f32(w, k, 1e-6f);
    snprintf(k, sizeof k, "%s.rope.freq_base", arch);
    gguf_w_f32(w, k, theta);
}

/* the data of HF tensor hf (cnt values of weight_of) as a test GGUF holds
   it: a norm in F32 (the BF16 value's, plus add), else BF16 */
static int gguf_w_float(gguf_writer *w, const char *hf, size_t cnt, int norm, float add, char *err, size_t errlen) {
    int r;
    if (norm) {
        float *v = xmalloc(sizeof(float) * cnt);
        for (size_t j = 0; j < cnt; j++) v[j] = add + ds_bf16_to_f32(ds_f32_to_bf16(weight_of(hf, j, 1)));
        r = gguf_w_data(w, v, sizeof(float) * cnt, err, errlen);
        free(v);
    } else {
        uint16_t *v = xmalloc(2 * cnt);
        for (size_t j = 0; j < cnt; j++) v[j] = ds_f32_to_bf16(weight_of(hf, j, 0));
        r = gguf_w_data(w, v, 2 * cnt, err, errlen);
        free(v);
    }
    return r;
}

/* q8: the experts' gate and up matrices in Q8_0 (their rows are whole
   32-element blocks), the rest BF16 */
static int write_moe_gguf(const char *path, int E, int K, int q8, char *err, size_t errlen) {
    gdef d[64];
    int n = 0;
#define G(g, h, r, c, e)                                                                                               do {                                                                                                                   snprintf(d[n].gguf, sizeof d[n].gguf, "%s", g);                                                                    snprintf(d[n].hf, sizeof d[n].hf, "%s", h);                                                                        d[n].rows = r, d[n].cols = c, d[n].experts = e, n++;                                                           } while (0)
    G("token_embd.weight", "model.embed_tokens.weight", FV, FH, 0);
    G("output.weight", "lm_head.weight", FV, FH, 0);
    G("output_norm.weight", "model.norm.weight", 1, FH, 0);
    for (int l = 0; l < FL; l++) {
        char g[96], h[96];
#define L(gs, hs, r, c, e)                                                                                             do {                                                                                                                   snprintf(g, sizeof g, "blk.%d.%s.weight", l, gs);                                                                  snprintf(h, sizeof h, "model.layers.%d.%s.weight", l, hs);                                                         G(g, h, r, c, e);                                                                                              } while (0)
        L("attn_norm", "input_layernorm", 1, FH, 0);
        L("ffn_norm", "post_attention_layernorm", 1, FH, 0);
        L("attn_q", "self_attn.q_proj", FNH * FHD, FH, 0);
        L("attn_k", "self_attn.k_proj", FNKV * FHD, FH, 0);
        L("attn_v", "self_attn.v_proj", FNKV * FHD, FH, 0);
        L("attn_output", "self_attn.o_proj", FH, FNH * FHD, 0);
        L("attn_q_norm", "self_attn.q_norm", 1, FHD, 0);
        L("attn_k_norm", "self_attn.k_norm", 1, FHD, 0);
        if (l == 1) { /* mlp_only_layers */
            L("ffn_gate", "mlp.gate_proj", FI, FH, 0);
            L("ffn_up", "mlp.up_proj", FI, FH, 0);
            L("ffn_down", "mlp.down_proj", FH, FI, 0);
            continue;
        }
        L("ffn_gate_inp", "mlp.gate", E, FH, 0);
        L("ffn_gate_exps", "mlp.experts.%d.gate_proj", FI, FH, E);
        L("ffn_up_exps", "mlp.experts.%d.up_proj", FI, FH, E);
        L("ffn_down_exps", "mlp.experts.%d.down_proj", FH, FI, E);
#undef L
    }
#undef G
    gguf_writer *w = gguf_w_new();
    gguf_w_shape(w, "qwen3moe", FL, 10000.0f);
    gguf_w_u32(w, "qwen3moe.expert_count", (uint32_t)E);
    gguf_w_u32(w, "qwen3moe.expert_used_count", (uint32_t)K);
    gguf_w_u32(w, "qwen3moe.expert_feed_forward_length", FI);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    int rc = -1;
    for (int i = 0; i < n; i++) {
        int64_t ne[3] = {d[i].cols, d[i].rows, d[i].experts};
        const int nd = d[i].experts ? 3 : d[i].rows == 1 ? 1 : 2;
        const uint32_t type = nd == 1 ? GGML_F32 : q8 && d[i].experts && d[i].cols == FH ? GGML_Q8_0 : GGML_BF16;
        if (gguf_w_add_tensor(w, d[i].gguf, type, nd, ne, err, errlen) != 0) goto done;
    }
    if (gguf_w_begin(w, path, err, errlen) != 0) goto done;
    for (int i = 0; i < n; i++) {
        const int E1 = d[i].experts ? d[i].experts : 1;
        const size_t cnt = (size_t)d[i].rows * (size_t)d[i].cols;
        for (int e = 0; e < E1; e++) {
            char hf[128];
            snprintf(hf, sizeof hf, d[i].hf, e);
            if (q8 && d[i].experts && d[i].cols == FH) {
                const size_t rb = qenc_row_bytes(DT_Q8_0, FH);
                float row[FH];
                char *q = xmalloc(rb * (size_t)d[i].rows);
                for (int64_t r0 = 0; r0 < d[i].rows; r0++) {
                    for (int c = 0; c < FH; c++) row[c] = weight_of(hf, (size_t)r0 * FH + (size_t)c, 0);
                    qenc_row(DT_Q8_0, row, FH, q + (size_t)r0 * rb);
                }
                int r = gguf_w_data(w, q, rb * (size_t)d[i].rows, err, errlen);
                free(q);
                if (r != 0) goto done;
                continue;
            }
            /* a norm in F32 (what llama.cpp writes), the rest BF16 */
            if (gguf_w_float(w, hf, cnt, d[i].rows == 1, 0.0f, err, errlen) != 0) goto done;
        }
    }
    rc = gguf_w_finish(w, err, errlen);
done:
    gguf_w_free(w);
    return rc;
}

TEST(families_moe_route) {
    uint32_t r = 7;
    for (int trial = 0; trial < 200; trial++) {
        const int E = 2 + trial % 30, K = 1 + trial % (E < 8 ? E : 8), norm = trial & 1;
        float p[32], w[8];
        double ref[32];
        int sel[8];
        for (int j = 0; j < E; j++) {
            r = r * 1664525u + 1013904223u;
            p[j] = trial % 7 == 0 ? (float)((r >> 28) % 3) : ((float)(r >> 8) / 16777216.0f - 0.5f) * 8.0f;
        }
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < E; j++) mx = p[j] > mx ? p[j] : mx;
        for (int j = 0; j < E; j++) sum += ref[j] = exp(p[j] - mx);
        moe_route(p, E, K, norm, sel, w);
        double tot = 0;
        int used[32] = {0};
        for (int k = 0; k < K; k++) {
            CHECK(sel[k] >= 0 && sel[k] < E && !used[sel[k]]);
            used[sel[k]] = 1;
            tot += ref[sel[k]] / sum;
            if (k) /* descending, the lower index first among equals */
                CHECK(ref[sel[k - 1]] > ref[sel[k]] || (ref[sel[k - 1]] == ref[sel[k]] && sel[k - 1] < sel[k]));
        }
        for (int j = 0; j < E; j++) /* nothing left out is larger than what was taken */
            if (!used[j]) CHECK(ref[j] <= ref[sel[K - 1]] && (ref[j] < ref[sel[K - 1]] || j > sel[K - 1]));
        for (int k = 0; k < K; k++) {
            double want = ref[sel[k]] / sum / (norm ? tot : 1.0);
            CHECK_MSG(fabs(w[k] - want) <= 1e-6 * (want > 1e-3 ? want : 1e-3), "trial %d: w[%d] %.9g, want %.9g",
                      trial, k, w[k], want);
        }
    }
}

/* the qwen3_moe of 8 experts, top 2, layer 1 dense (mlp_only_layers), in dir */
static int write_moe8(const char *dir, tdef *t) {
    char cfg[2048];
    const int second_dense[FL] = {0, 1};
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",%s,\"num_experts\":8,"
             "\"num_experts_per_tok\":2,\"moe_intermediate_size\":48,\"norm_topk_prob\":true,"
             "\"mlp_only_layers\":[1]}",
             COMMON);
    return write_ckpt(dir, cfg, t, make_tensors(t, 1, 8, second_dense));
}

/* The qwen3_moe of write_moe8 (8 experts, top 2, layer 1 dense) at Qwen3's
   vocabulary with Qwen3's own tokenizer and chat template, in dir
   (test_server.c server_qwen3_moe). 0, or -1 after a test failure. */
int test_moe_tok_model(char *dir, size_t n) {
    snprintf(dir, n, "%s/fam-moe-tok", test_tmp_dir());
    if (test_copy_qwen3_tokenizer(dir) != 0) {
        test_fail(__FILE__, __LINE__, "the Qwen3 tokenizer is missing from the test assets");
        return -1;
    }
    char cfg[2048];
    const int second_dense[FL] = {0, 1};
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",\"vocab_size\":151936,"
             "\"hidden_size\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
             "\"num_key_value_heads\":%d,\"head_dim\":%d,\"max_position_embeddings\":1024,\"rms_norm_eps\":1e-06,"
             "\"rope_theta\":10000.0,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
             "\"bos_token_id\":151643,\"eos_token_id\":151645,\"num_experts\":8,\"num_experts_per_tok\":2,"
             "\"moe_intermediate_size\":48,\"norm_topk_prob\":true,\"mlp_only_layers\":[1]}",
             FH, FI, FL, FNH, FNKV, FHD);
    tdef *t = xmalloc(sizeof(tdef) * 128);
    const int nt = make_tensors(t, 1, 8, second_dense);
    t[0].d0 = t[1].d0 = 151936; /* the embedding and the head at the real vocabulary */
    const int rc = write_ckpt(dir, cfg, t, nt);
    free(t);
    CHECK(rc == 0);
    return rc;
}

TEST(families_moe_forward) {
    char dense[700], one[700], moe[700], cfg[2048];
    snprintf(dense, sizeof dense, "%s/fam-dense", test_tmp_dir());
    snprintf(one, sizeof one, "%s/fam-moe1", test_tmp_dir());
    snprintf(moe, sizeof moe, "%s/fam-moe8", test_tmp_dir());
    tdef *t = xmalloc(sizeof(tdef) * 256);
    const int none[FL] = {0};
    snprintf(cfg, sizeof cfg, "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",%s}", COMMON);
    CHECK(write_ckpt(dense, cfg, t, make_tensors(t, 1, 0, none)) == 0);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",%s,\"num_experts\":1,"
             "\"num_experts_per_tok\":1,\"moe_intermediate_size\":48,\"norm_topk_prob\":true}",
             COMMON);
    CHECK(write_ckpt(one, cfg, t, make_tensors(t, 1, 1, none)) == 0);
    CHECK(write_moe8(moe, t) == 0);
    free(t);
    float *a = logits_of(dense, FT), *b = logits_of(one, FT);
    if (a && b) CHECK_MSG(!memcmp(a, b, sizeof(float) * FT * FV), "one expert of top 1 differs from the dense MLP");
    free(a), free(b);
    check_invariant(moe, "qwen3_moe, 8 experts, top 2");
    /* the same weights as a qwen3moe GGUF */
    char gg[760], err[512];
    snprintf(gg, sizeof gg, "%s/fam-moe8.gguf", test_tmp_dir());
    CHECK_MSG(write_moe_gguf(gg, 8, 2, 0, err, sizeof err) == 0, "%s", err);
    float *x = logits_of(moe, FT), *y = logits_of(gg, FT);
    if (x && y) CHECK_MSG(!memcmp(x, y, sizeof(float) * FT * FV), "the GGUF's logits differ from the safetensors'");
    /* Q8_0 experts (each expert's slice of the stacked blocks): near the
       BF16 logits, every row batch-invariant */
    char gq[760];
    snprintf(gq, sizeof gq, "%s/fam-moe8-q8.gguf", test_tmp_dir());
    CHECK_MSG(write_moe_gguf(gq, 8, 2, 1, err, sizeof err) == 0, "%s", err);
    float *z = logits_of(gq, FT);
    if (x && z) {
        double mx, dd = max_diff(x, z, &mx);
        CHECK_MSG(dd > 0 && dd <= 5e-2 * mx, "Q8_0 experts: max |logit - BF16's| %.4g against max |logit| %.4g", dd, mx);
    }
    /* dspark quantize writes the stacked layout (Q8_0 gate/up rows, F16 where
       a row is not whole blocks) that the reader above splits again */
    char gw[760], args[2400], *qerr = NULL;
    snprintf(gw, sizeof gw, "%s/fam-moe8-written.gguf", test_tmp_dir());
    snprintf(args, sizeof args, "quantize --model %s --out %s --type Q8_0", moe, gw);
    CHECK_MSG(test_run_cli(args, NULL, &qerr) == 0, "quantize: %s", qerr ? qerr : "");
    free(qerr);
    float *wq = logits_of(gw, FT);
    if (x && wq) {
        double mx, dd = max_diff(x, wq, &mx);
        CHECK_MSG(dd > 0 && dd <= 5e-2 * mx, "quantize's Q8_0 GGUF: max |logit - BF16's| %.4g against max |logit| %.4g",
                  dd, mx);
    }
    /* and an MLX build (8 bits, groups of 32) in mlx-lm's layout: the
       experts stacked in switch_mlp, read back as per-expert views */
    char mw[760];
    snprintf(mw, sizeof mw, "%s/fam-moe8-mlx8", test_tmp_dir());
    snprintf(args, sizeof args, "quantize --model %s --out %s --type mlx8 --group-size 32", moe, mw);
    qerr = NULL;
    CHECK_MSG(test_run_cli(args, NULL, &qerr) == 0, "quantize: %s", qerr ? qerr : "");
    free(qerr);
    char stp[800];
    snprintf(stp, sizeof stp, "%s/model.safetensors", mw);
    st_set *ss = NULL;
    char e2[512];
    if (st_set_open(&ss, mw, e2, sizeof e2) == 0) {
        const tensor *sw = st_set_find(ss, "model.layers.0.mlp.switch_mlp.gate_proj.weight");
        const tensor *sd = st_set_find(ss, "model.layers.0.mlp.switch_mlp.down_proj.weight");
        CHECK_MSG(sw && sw->ndim == 3 && sw->shape[0] == 8 && sw->shape[1] == FI && sw->dtype == DT_U32,
                  "the stacked gate_proj words");
        CHECK_MSG(sd && sd->ndim == 3 && sd->shape[0] == 8 && sd->shape[2] == FI, "down_proj (rows of 48: floats)");
        CHECK(!st_set_find(ss, "model.layers.0.mlp.experts.0.gate_proj.weight"));
        /* expert e's slice is its own matrix quantized (mlx.core's rule) */
        const tensor *ssc = st_set_find(ss, "model.layers.0.mlp.switch_mlp.gate_proj.scales");
        const tensor *sbi = st_set_find(ss, "model.layers.0.mlp.switch_mlp.gate_proj.biases");
        int same = sw && ssc && sbi && sw->shape[2] == FH * 8 / 32 && ssc->shape[2] == 1;
        for (int ex = 0; same && ex < 8; ex++)
            for (int r = 0; r < FI; r++) {
                char nm[96];
                snprintf(nm, sizeof nm, "model.layers.0.mlp.experts.%d.gate_proj.weight", ex);
                float row[FH], sc1, bi1;
                uint32_t w[FH * 8 / 32];
                for (int c = 0; c < FH; c++) row[c] = ds_bf16_to_f32(ds_f32_to_bf16(weight_of(nm, (size_t)r * FH + c, 0)));
                qenc_mlx_row(row, FH, 8, 32, w, &sc1, &bi1);
                const size_t at = (size_t)ex * FI + (size_t)r;
                same &= !memcmp(w, (const uint32_t *)sw->data + at * (FH * 8 / 32), sizeof w) &&
                        ((const uint16_t *)ssc->data)[at] == ds_f32_to_bf16(sc1) &&
                        ((const uint16_t *)sbi->data)[at] == ds_f32_to_bf16(bi1);
            }
        CHECK_MSG(same, "the stacked words, scales or biases are not each expert's own");
        const tensor *rt = st_set_find(ss, "model.layers.0.mlp.gate.weight");
        CHECK_MSG(rt && rt->dtype == DT_BF16, "the router is kept as stored");
        st_set_close(ss);
    } else {
        test_fail(__FILE__, __LINE__, "%s", e2);
    }
    /* (its logits: near the BF16 ones until a rounded hidden state moves a
       row to another of two nearly tied experts, which random weights do;
       the layout itself is what the checks above pin) */
    check_invariant(mw, "qwen3_moe, MLX 8-bit written by quantize");
    free(x), free(y), free(z), free(wq);
    check_invariant(gq, "qwen3moe GGUF, Q8_0 experts");
}

/* The 8-expert qwen3_moe above, as safetensors, its BF16 GGUF and with
   Q8_0 experts, on whichever device $DSPARK_DEVICE names (scripts/test-cuda
   runs it on the GPU): every row's logits the same bits as one batch, one
   token at a time and in chunks of 5 (so speculative rows equal plain
   decoding); the GGUF the safetensors' bits; away from the CPU, each
   within 1e-3 of the largest logit of the CPU's forward. */
TEST(families_moe_invariant) {
    char moe[700], gg[760], gq[760], err[512];
    snprintf(moe, sizeof moe, "%s/fam-moe8i", test_tmp_dir());
    snprintf(gg, sizeof gg, "%s/fam-moe8i.gguf", test_tmp_dir());
    snprintf(gq, sizeof gq, "%s/fam-moe8i-q8.gguf", test_tmp_dir());
    tdef *t = xmalloc(sizeof(tdef) * 256);
    CHECK(write_moe8(moe, t) == 0);
    free(t);
    CHECK_MSG(write_moe_gguf(gg, 8, 2, 0, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(write_moe_gguf(gq, 8, 2, 1, err, sizeof err) == 0, "%s", err);
    check_invariant(moe, "qwen3_moe, 8 experts, top 2");
    check_invariant(gg, "qwen3moe GGUF, BF16 experts");
    check_invariant(gq, "qwen3moe GGUF, Q8_0 experts");
    float *x = logits_of(moe, FT), *y = logits_of(gg, FT);
    if (x && y) CHECK_MSG(!memcmp(x, y, sizeof(float) * FT * FV), "the GGUF's logits differ from the safetensors'");
    free(y);
    const char *dev = getenv("DSPARK_DEVICE");
    if (dev && strcmp(dev, "cpu")) {
        const char *dirs[] = {moe, gq};
        for (int i = 0; i < 2; i++) {
            float *a = logits_of(dirs[i], 5), *c = logits_on(dirs[i], 5, "cpu");
            if (a && c) {
                double mx, dd = max_diff(c, a, &mx);
                CHECK_MSG(dd <= 1e-3 * mx, "%s on %s: max |logit - the CPU's| %.3g against max |logit| %.3g", dirs[i],
                          dev, dd, mx);
            }
            free(a), free(c);
        }
    } else {
        /* every prompt row through the prefill family (whole groups of one
           row): the Q8_0 experts' grouped matmuls give each row the bits it
           has alone, and stay near the exact kernels' (f32 order alone) */
        cpu_test_group_rows(1);
        check_invariant(gq, "qwen3moe GGUF, Q8_0 experts, the prefill family");
        float *p = logits_of(gq, FT);
        cpu_test_group_rows(0);
        float *e = logits_of(gq, FT);
        if (p && e) {
            double mx, dd = max_diff(e, p, &mx);
            CHECK_MSG(dd <= 1e-3 * mx, "the prefill family's MoE logits: %.3g from the exact ones (max %.3g)", dd, mx);
            if (quant_pre_fast()) CHECK_MSG(dd > 0, "the prefill family did not run on the experts");
        }
        free(p), free(e);
    }
    free(x);
}

TEST(families_mistral_window) {
    char llama[700], wide[700], win[700], cfg[2048];
    snprintf(llama, sizeof llama, "%s/fam-llama", test_tmp_dir());
    snprintf(wide, sizeof wide, "%s/fam-mistral-wide", test_tmp_dir());
    snprintf(win, sizeof win, "%s/fam-mistral-w5", test_tmp_dir());
    tdef *t = xmalloc(sizeof(tdef) * 64);
    const int none[FL] = {0};
    const int nt = make_tensors(t, 0, 0, none);
    snprintf(cfg, sizeof cfg, "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",%s}", COMMON);
    CHECK(write_ckpt(llama, cfg, t, nt) == 0);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"MistralForCausalLM\"],\"model_type\":\"mistral\",%s,\"sliding_window\":%d}", COMMON,
             FT);
    CHECK(write_ckpt(wide, cfg, t, nt) == 0);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"MistralForCausalLM\"],\"model_type\":\"mistral\",%s,\"sliding_window\":5}", COMMON);
    CHECK(write_ckpt(win, cfg, t, nt) == 0);
    free(t);
    float *a = logits_of(llama, FT), *b = logits_of(wide, FT), *c = logits_of(win, FT);
    if (a && b) CHECK_MSG(!memcmp(a, b, sizeof(float) * FT * FV), "a window over every position differs from none");
    if (a && c) {
        CHECK_MSG(!memcmp(a, c, sizeof(float) * 5 * FV), "the rows within the first window differ");
        CHECK_MSG(memcmp(a + 5 * FV, c + 5 * FV, sizeof(float) * (FT - 5) * FV), "the window changes nothing");
    }
    free(a), free(b), free(c);
    check_invariant(win, "mistral, window 5");
}

/* ---- gemma3 ---- */

enum { GL = 3, GWIN = 5 };
static const char *G_TYPES[GL] = {"sliding_attention", "full_attention", "sliding_attention"};

/* a gemma3_text checkpoint's tensors (tied embedding) under prefix pfx */
static int gemma_tensors(tdef *t, const char *pfx, long V) {
    int nt = 0;
#define ADD(a, b, ...)                                                                                             \
    do {                                                                                                           \
        int k_ = snprintf(t[nt].name, sizeof t[nt].name, "%s", pfx);                                               \
        snprintf(t[nt].name + k_, sizeof t[nt].name - (size_t)k_, __VA_ARGS__);                                    \
        t[nt].d0 = a, t[nt].d1 = b, nt++;                                                                          \
    } while (0)
    ADD(V, FH, "embed_tokens.weight");
    ADD(FH, 0, "norm.weight");
    for (int l = 0; l < GL; l++) {
        const char *nn[] = {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                            "post_feedforward_layernorm"};
        for (int i = 0; i < 4; i++) ADD(FH, 0, "layers.%d.%s.weight", l, nn[i]);
        ADD(FNH * FHD, FH, "layers.%d.self_attn.q_proj.weight", l);
        ADD(FNKV * FHD, FH, "layers.%d.self_attn.k_proj.weight", l);
        ADD(FNKV * FHD, FH, "layers.%d.self_attn.v_proj.weight", l);
        ADD(FH, FNH * FHD, "layers.%d.self_attn.o_proj.weight", l);
        ADD(FHD, 0, "layers.%d.self_attn.q_norm.weight", l);
        ADD(FHD, 0, "layers.%d.self_attn.k_norm.weight", l);
        ADD(FI, FH, "layers.%d.mlp.gate_proj.weight", l);
        ADD(FI, FH, "layers.%d.mlp.up_proj.weight", l);
        ADD(FH, FI, "layers.%d.mlp.down_proj.weight", l);
    }
#undef ADD
    return nt;
}

/* element j of the tensor "model.<suffix>" as the checkpoint stores it (bf16) */
static double gw(const char *suffix, size_t j, int norm) {
    char name[160];
    snprintf(name, sizeof name, "model.%s", suffix);
    return (double)ds_bf16_to_f32(ds_f32_to_bf16(weight_of(name, j, norm)));
}

/* Gemma's RMSNorm over n values: x / sqrt(mean(x^2) + eps) * (1 + w) */
static void g_norm(double *x, int n, const char *wname) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + 1e-6);
    for (int i = 0; i < n; i++) x[i] = x[i] * r * (1.0 + gw(wname, (size_t)i, 1));
}

/* y[rows] = W x, W [rows][cols] named "model.<w>" */
static void g_mat(double *y, const double *x, int rows, int cols, const char *w) {
    for (int r = 0; r < rows; r++) {
        double a = 0;
        for (int c = 0; c < cols; c++) a += gw(w, (size_t)r * (size_t)cols + (size_t)c, 0) * x[c];
        y[r] = a;
    }
}

/* RoPE (rotate-half pairs) of one head at position p with base theta and
   linear factor */
static void g_rope(double *v, int p, double theta, double factor) {
    const int half = FHD / 2;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow(theta, (double)(2 * i) / FHD) / factor, a = p * f;
        double x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cos(a) - x1 * sin(a);
        v[i + half] = x1 * cos(a) + x0 * sin(a);
    }
}

/* The whole prompt through the model as transformers' Gemma3ForCausalLM
   computes it, in double: out[FT][FV] */
static void gemma_reference(const int *ids, double *out) {
    const int QD = FNH * FHD, KD = FNKV * FHD;
    double *x = xcalloc((size_t)FT * FH, sizeof(double)), *K = xmalloc(sizeof(double) * GL * FT * KD),
           *Vv = xmalloc(sizeof(double) * GL * FT * KD), *q = xmalloc(sizeof(double) * FT * QD);
    char w[128];
    for (int t = 0; t < FT; t++)
        for (int h = 0; h < FH; h++) x[t * FH + h] = gw("embed_tokens.weight", (size_t)ids[t] * FH + h, 0) * sqrt((double)FH);
    for (int l = 0; l < GL; l++) {
        const int slide = l != 1;
        const double theta = slide ? 1e4 : 1e6, factor = slide ? 1.0 : 2.0;
        double *k = K + (size_t)l * FT * KD, *v = Vv + (size_t)l * FT * KD;
        for (int t = 0; t < FT; t++) {
            double h[FH];
            memcpy(h, x + t * FH, sizeof h);
            snprintf(w, sizeof w, "layers.%d.input_layernorm.weight", l);
            g_norm(h, FH, w);
            snprintf(w, sizeof w, "layers.%d.self_attn.q_proj.weight", l);
            g_mat(q + t * QD, h, QD, FH, w);
            snprintf(w, sizeof w, "layers.%d.self_attn.k_proj.weight", l);
            g_mat(k + t * KD, h, KD, FH, w);
            snprintf(w, sizeof w, "layers.%d.self_attn.v_proj.weight", l);
            g_mat(v + t * KD, h, KD, FH, w);
            for (int hh = 0; hh < FNH; hh++) {
                snprintf(w, sizeof w, "layers.%d.self_attn.q_norm.weight", l);
                g_norm(q + t * QD + hh * FHD, FHD, w);
                g_rope(q + t * QD + hh * FHD, t, theta, factor);
            }
            for (int hh = 0; hh < FNKV; hh++) {
                snprintf(w, sizeof w, "layers.%d.self_attn.k_norm.weight", l);
                g_norm(k + t * KD + hh * FHD, FHD, w);
                g_rope(k + t * KD + hh * FHD, t, theta, factor);
            }
        }
        for (int t = 0; t < FT; t++) {
            double att[FNH * FHD], o[FH];
            for (int hh = 0; hh < FNH; hh++) {
                const int kh = hh / (FNH / FNKV);
                double sc[FT], mx = -1e300, den = 0;
                for (int s = 0; s <= t; s++) {
                    sc[s] = -1e300;
                    if (slide && !(s > t - GWIN)) continue;
                    double d = 0;
                    for (int i = 0; i < FHD; i++) d += q[t * QD + hh * FHD + i] * k[s * KD + kh * FHD + i];
                    sc[s] = d * pow(24.0, -0.5);
                    mx = sc[s] > mx ? sc[s] : mx;
                }
                for (int s = 0; s <= t; s++) den += sc[s] > -1e299 ? exp(sc[s] - mx) : 0;
                for (int i = 0; i < FHD; i++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++)
                        if (sc[s] > -1e299) a += exp(sc[s] - mx) / den * v[s * KD + kh * FHD + i];
                    att[hh * FHD + i] = a;
                }
            }
            snprintf(w, sizeof w, "layers.%d.self_attn.o_proj.weight", l);
            g_mat(o, att, FH, QD, w);
            snprintf(w, sizeof w, "layers.%d.post_attention_layernorm.weight", l);
            g_norm(o, FH, w);
            double *xr = x + t * FH, hm[FH], g[FI], u[FI], dn[FH];
            for (int i = 0; i < FH; i++) xr[i] += o[i];
            memcpy(hm, xr, sizeof hm);
            snprintf(w, sizeof w, "layers.%d.pre_feedforward_layernorm.weight", l);
            g_norm(hm, FH, w);
            snprintf(w, sizeof w, "layers.%d.mlp.gate_proj.weight", l);
            g_mat(g, hm, FI, FH, w);
            snprintf(w, sizeof w, "layers.%d.mlp.up_proj.weight", l);
            g_mat(u, hm, FI, FH, w);
            for (int i = 0; i < FI; i++)
                g[i] = 0.5 * g[i] * (1 + tanh(sqrt(2 / M_PI) * (g[i] + 0.044715 * g[i] * g[i] * g[i]))) * u[i];
            snprintf(w, sizeof w, "layers.%d.mlp.down_proj.weight", l);
            g_mat(dn, g, FH, FI, w);
            snprintf(w, sizeof w, "layers.%d.post_feedforward_layernorm.weight", l);
            g_norm(dn, FH, w);
            for (int i = 0; i < FH; i++) xr[i] += dn[i];
        }
        /* (the next layer reads x, whose rows all went through this one) */
    }
    for (int t = 0; t < FT; t++) {
        double h[FH];
        memcpy(h, x + t * FH, sizeof h);
        g_norm(h, FH, "norm.weight");
        g_mat(out + (size_t)t * FV, h, FV, FH, "embed_tokens.weight");
        for (int i = 0; i < FV; i++) out[(size_t)t * FV + i] = tanh(out[(size_t)t * FV + i] / 5.0) * 5.0;
    }
    free(x), free(K), free(Vv), free(q);
}

/* Gemma 3 by construction: a random 3-layer gemma3_text checkpoint (two
   sliding layers with a 5-position window on a 24-token prompt, their own
   RoPE base; a global layer with linear scaling; soft-capped logits)
   against a double-precision transcription of transformers' forward; its
   rows batch-invariant; the same weights as a gemma3 checkpoint (text
   under language_model.model., a vision tower beside) give the same bits. */
TEST(families_gemma3) {
    char dir[700], mm[700], cfg[2048], types[256] = "";
    snprintf(dir, sizeof dir, "%s/fam-gemma3", test_tmp_dir());
    snprintf(mm, sizeof mm, "%s/fam-gemma3-mm", test_tmp_dir());
    for (int l = 0; l < GL; l++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"", l ? "," : "", G_TYPES[l]);
    const char *body =
        "\"vocab_size\":512,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":3,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"max_position_embeddings\":256,"
        "\"rms_norm_eps\":1e-06,\"query_pre_attn_scalar\":24,\"sliding_window\":5,\"final_logit_softcapping\":5.0,"
        "\"rope_theta\":1000000.0,\"rope_local_base_freq\":10000.0,\"rope_scaling\":{\"rope_type\":\"linear\","
        "\"factor\":2.0},\"hidden_activation\":\"gelu_pytorch_tanh\",\"tie_word_embeddings\":true";
    snprintf(cfg, sizeof cfg, "{\"architectures\":[\"Gemma3ForCausalLM\"],\"model_type\":\"gemma3_text\",%s,"
             "\"layer_types\":[%s],\"eos_token_id\":1}", body, types);
    tdef *t = xmalloc(sizeof(tdef) * 80);
    int nt = gemma_tensors(t, "model.", FV);
    CHECK(write_ckpt(dir, cfg, t, nt) == 0);
    float *a = logits_of(dir, FT);
    double *ref = xmalloc(sizeof(double) * FT * FV);
    int ids[FT];
    for (int i = 0; i < FT; i++) ids[i] = (i * 37 + 11) % FV;
    gemma_reference(ids, ref);
    if (a) {
        double mx = 0, dd = 0;
        for (size_t i = 0; i < (size_t)FT * FV; i++) {
            mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
            dd = fabs(a[i] - ref[i]) > dd ? fabs(a[i] - ref[i]) : dd;
        }
        CHECK_MSG(mx > 1.0 && dd <= 1e-4 * mx, "gemma3: logits differ from the reference by %g (largest %g)", dd, mx);
        int greedy_same = 1;
        for (int r = 0; r < FT; r++) {
            int ia = 0, ir = 0;
            for (int i = 1; i < FV; i++) {
                if (a[r * FV + i] > a[r * FV + ia]) ia = i;
                if (ref[(size_t)r * FV + i] > ref[(size_t)r * FV + ir]) ir = i;
            }
            greedy_same &= ia == ir;
        }
        CHECK_MSG(greedy_same, "gemma3: a row's greedy token differs from the reference");
    }
    check_invariant(dir, "gemma3");
    /* the multimodal layout: the text model under language_model.model., a
       vision tower that is not read */
    snprintf(cfg, sizeof cfg, "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"model_type\":\"gemma3\","
             "\"eos_token_id\":[1,106],\"text_config\":{\"model_type\":\"gemma3_text\",%s,\"layer_types\":[%s]},"
             "\"vision_config\":{\"model_type\":\"siglip_vision_model\"}}", body, types);
    nt = gemma_tensors(t, "language_model.model.", FV);
    snprintf(t[nt].name, sizeof t[nt].name, "vision_tower.vision_model.post_layernorm.weight");
    t[nt].d0 = FH, t[nt].d1 = 0, nt++;
    CHECK(write_ckpt(mm, cfg, t, nt) == 0);
    float *b = logits_of(mm, FT);
    if (a && b) CHECK_MSG(!memcmp(a, b, sizeof(float) * FT * FV), "gemma3: the multimodal layout's logits differ");
    free(t);
    free(a), free(b), free(ref);
}

/* A random gemma3 of the real vocabulary with Gemma 3's own tokenizer and
   chat template (the test assets' gemma3 folder) in dir: 3 layers, a
   sliding window of 8 every other layer, 512 positions. 0, or -1 (a test
   failure said why). */
int test_gemma3_tok_model(char *dir, size_t n) {
    char cfg[2048], src[800], dst[800];
    const char *tk = test_tokenizer_dir();
    snprintf(src, sizeof src, "%s/gemma3/tokenizer.json", tk ? tk : "");
    struct stat st;
    if (!tk || stat(src, &st) != 0) {
        test_fail(__FILE__, __LINE__, "the gemma3 tokenizer is missing from the test assets (%s)", src);
        return -1;
    }
    snprintf(dir, n, "%s/fam-gemma3-tok", test_tmp_dir());
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Gemma3ForCausalLM\"],\"model_type\":\"gemma3_text\",\"vocab_size\":262144,"
             "\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"head_dim\":16,\"max_position_embeddings\":512,\"query_pre_attn_scalar\":16,"
             "\"sliding_window\":8,\"sliding_window_pattern\":2,\"bos_token_id\":2,\"eos_token_id\":[1,106]}");
    tdef *t = xmalloc(sizeof(tdef) * 80);
    int nt = gemma_tensors(t, "model.", 262144);
    int rc = write_ckpt(dir, cfg, t, nt);
    CHECK(rc == 0);
    free(t);
    for (int i = 0; i < 2 && rc == 0; i++) {
        const char *f = i ? "tokenizer_config.json" : "tokenizer.json";
        snprintf(src, sizeof src, "%s/gemma3/%s", tk, f);
        snprintf(dst, sizeof dst, "%s/%s", dir, f);
        unlink(dst);
        rc = symlink(src, dst);
        CHECK(rc == 0);
    }
    return rc ? -1 : 0;
}

/* End to end with Gemma 3's own tokenizer and chat template: the random
   gemma3 above renders its template, tokenizes, generates and decodes
   through `dspark template` and `dspark run --chat` (and `dspark serve`:
   tests/test_server.c server_gemma3). */
TEST(families_gemma3_cli) {
    char dir[700], cmd[2048];
    if (test_gemma3_tok_model(dir, sizeof dir) != 0) return;
    char *out = NULL, *err = NULL;
    char msgs[800];
    snprintf(msgs, sizeof msgs, "%s/msgs.json", dir);
    FILE *mf = fopen(msgs, "w");
    CHECK(mf != NULL);
    if (!mf) return;
    fputs("[{\"role\":\"user\",\"content\":\"Hi there\"}]", mf);
    fclose(mf);
    snprintf(cmd, sizeof cmd, "template --model %s --messages %s", dir, msgs);
    CHECK_MSG(test_run_cli(cmd, &out, &err) == 0, "%s", err ? err : "");
    CHECK_MSG(out && strstr(out, "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"),
              "the rendered prompt: %s", out ? out : "");
    free(out), free(err);
    out = err = NULL;
    snprintf(cmd, sizeof cmd, "run --model %s --chat -p 'Hi there' -n 6 --mode baseline -t 2", dir);
    CHECK_MSG(test_run_cli(cmd, &out, &err) == 0, "%s", err ? err : "");
    /* <bos> <start_of_turn> user \n Hi ▁there <end_of_turn> \n <start_of_turn> model \n */
    CHECK_MSG(err && strstr(err, "prompt 11 tok,") && strstr(err, "generated 6 tok"), "stderr: %s", err ? err : "");
    free(out), free(err);
}

/* The same gemma3 as llama.cpp's converter writes it (arch gemma3, its norm
   names, the norms stored with their + 1, the layer pattern as a period,
   the score scale implied by the head size) gives the safetensors
   checkpoint's logits bit for bit. */
static int write_gemma_gguf(const char *path, char *err, size_t errlen) {
    gguf_writer *w = gguf_w_new();
    gguf_w_shape(w, "gemma3", GL, 1e6f);
    gguf_w_str(w, "gemma3.rope.scaling.type", "linear");
    gguf_w_f32(w, "gemma3.rope.scaling.factor", 2.0f);
    gguf_w_u32(w, "gemma3.attention.sliding_window", GWIN);
    gguf_w_u32(w, "gemma3.attention.sliding_window_pattern", 2);
    gguf_w_f32(w, "gemma3.final_logit_softcapping", 5.0f);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1);
    static const struct {
        const char *g, *h;
        int rows, cols;
    } L[] = {{"attn_norm", "input_layernorm", 1, FH},
             {"post_attention_norm", "post_attention_layernorm", 1, FH},
             {"ffn_norm", "pre_feedforward_layernorm", 1, FH},
             {"post_ffw_norm", "post_feedforward_layernorm", 1, FH},
             {"attn_q", "self_attn.q_proj", FNH * FHD, FH},
             {"attn_k", "self_attn.k_proj", FNKV * FHD, FH},
             {"attn_v", "self_attn.v_proj", FNKV * FHD, FH},
             {"attn_output", "self_attn.o_proj", FH, FNH * FHD},
             {"attn_q_norm", "self_attn.q_norm", 1, FHD},
             {"attn_k_norm", "self_attn.k_norm", 1, FHD},
             {"ffn_gate", "mlp.gate_proj", FI, FH},
             {"ffn_up", "mlp.up_proj", FI, FH},
             {"ffn_down", "mlp.down_proj", FH, FI}};
    char g[128][64], h[128][96];
    int rows[128], cols[128], n = 0;
    snprintf(g[n], 64, "token_embd.weight"), snprintf(h[n], 96, "model.embed_tokens.weight"), rows[n] = FV, cols[n++] = FH;
    snprintf(g[n], 64, "output_norm.weight"), snprintf(h[n], 96, "model.norm.weight"), rows[n] = 1, cols[n++] = FH;
    for (int l = 0; l < GL; l++)
        for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
            snprintf(g[n], 64, "blk.%d.%s.weight", l, L[i].g);
            snprintf(h[n], 96, "model.layers.%d.%s.weight", l, L[i].h);
            rows[n] = L[i].rows, cols[n++] = L[i].cols;
        }
    int rc = -1;
    for (int i = 0; i < n; i++) {
        int64_t ne[2] = {cols[i], rows[i]};
        if (gguf_w_add_tensor(w, g[i], rows[i] == 1 ? GGML_F32 : GGML_BF16, rows[i] == 1 ? 1 : 2, ne, err, errlen))
            goto done;
    }
    if (gguf_w_begin(w, path, err, errlen) != 0) goto done;
    for (int i = 0; i < n; i++) /* the norms with their + 1 */
        if (gguf_w_float(w, h[i], (size_t)rows[i] * (size_t)cols[i], rows[i] == 1, 1.0f, err, errlen) != 0) goto done;
    rc = gguf_w_finish(w, err, errlen);
done:
    gguf_w_free(w);
    return rc;
}

TEST(families_gemma3_gguf) {
    char dir[700], path[700], cfg[2048], err[512], types[256] = "";
    snprintf(dir, sizeof dir, "%s/fam-gemma3-q16", test_tmp_dir());
    snprintf(path, sizeof path, "%s/fam-gemma3.gguf", test_tmp_dir());
    for (int l = 0; l < GL; l++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"", l ? "," : "", G_TYPES[l]);
    /* (a GGUF carries no query_pre_attn_scalar: llama.cpp scales by the head size) */
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"gemma3_text\",\"vocab_size\":512,\"hidden_size\":32,\"intermediate_size\":48,"
             "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
             "\"max_position_embeddings\":256,\"rms_norm_eps\":1e-06,\"query_pre_attn_scalar\":16,\"sliding_window\":5,"
             "\"final_logit_softcapping\":5.0,\"rope_theta\":1000000.0,\"rope_local_base_freq\":10000.0,"
             "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0},\"layer_types\":[%s],\"eos_token_id\":1}",
             types);
    tdef *t = xmalloc(sizeof(tdef) * 80);
    int nt = gemma_tensors(t, "model.", FV);
    CHECK(write_ckpt(dir, cfg, t, nt) == 0);
    free(t);
    CHECK_MSG(write_gemma_gguf(path, err, sizeof err) == 0, "%s", err);
    float *a = logits_of(dir, FT), *b = logits_of(path, FT);
    if (a && b) CHECK_MSG(!memcmp(a, b, sizeof(float) * FT * FV), "gemma3: the GGUF's logits differ from the safetensors'");
    free(a), free(b);
    check_invariant(path, "gemma3 GGUF");
}

/* The sliding layers give back the rows that fell behind their window
   (kv.h kv_set_windows): a 700-token prompt on the gemma3 above (window 5)
   gives the same logits in one batch, in chunks of 37 and a row at a time,
   the cache then keeps every layer's rows only from kv_kept_from on; a
   rollback within KV_SLACK continues as before, one past the kept rows
   empties the cache (and the sequence recomputes), and rows below the
   kept ones cannot be saved. */
enum { GT = 700 };
static float *gemma_long(model *m, int chunk, int *kept) {
    char err[512];
    model_ctx *c;
    if (mctx_create(&c, m, 1024, 64, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return NULL;
    }
    float *out = xmalloc(sizeof(float) * GT * FV);
    int ids[GT];
    for (int i = 0; i < GT; i++) ids[i] = (i * 131 + 7) % FV;
    for (int i0 = 0; i0 < GT; i0 += chunk) {
        int n = GT - i0 < chunk ? GT - i0 : chunk;
        model_batch b = {.n = n, .tokens = ids + i0, .n_logits = n, .logits = out + (size_t)i0 * FV};
        if (model_forward(c, &b, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            break;
        }
    }
    *kept = mctx_kept_from(c);
    if (chunk == 37) {
        /* a rollback of 10 positions (within KV_SLACK) and the same rows again */
        float *again = xmalloc(sizeof(float) * 10 * FV);
        mctx_truncate(c, GT - 10);
        CHECK_EQ_INT(mctx_len(c), GT - 10);
        model_batch b = {.n = 10, .tokens = ids + GT - 10, .n_logits = 10, .logits = again};
        CHECK(model_forward(c, &b, err, sizeof err) == 0);
        CHECK_MSG(!memcmp(again, out + (size_t)(GT - 10) * FV, sizeof(float) * 10 * FV), "rows after a rollback differ");
        free(again);
        /* rows below the kept ones are not saved; a cut below them empties the cache */
        char *buf = xmalloc(mctx_pos_bytes(c) * 8);
        CHECK(mctx_save_rows(c, 0, 8, buf, err, sizeof err) != 0);
        CHECK(mctx_save_rows(c, GT - 8, 8, buf, err, sizeof err) == 0);
        free(buf);
        mctx_truncate(c, 100);
        CHECK_EQ_INT(mctx_len(c), 0);
        CHECK_EQ_INT(mctx_kept_from(c), 0);
    }
    mctx_free(c);
    return out;
}

TEST(families_gemma3_window_memory) {
    char dir[700];
    snprintf(dir, sizeof dir, "%s/fam-gemma3", test_tmp_dir());
    struct stat st;
    if (stat(dir, &st) != 0) { /* (families_gemma3 writes it) */
        char cfg[2048], types[256] = "";
        for (int l = 0; l < GL; l++)
            snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"", l ? "," : "", G_TYPES[l]);
        snprintf(cfg, sizeof cfg,
                 "{\"model_type\":\"gemma3_text\",\"vocab_size\":512,\"hidden_size\":32,\"intermediate_size\":48,"
                 "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
                 "\"max_position_embeddings\":2048,\"query_pre_attn_scalar\":24,\"sliding_window\":5,"
                 "\"layer_types\":[%s],\"eos_token_id\":1}", types);
        tdef *t = xmalloc(sizeof(tdef) * 80);
        int nt = gemma_tensors(t, "model.", FV);
        CHECK(write_ckpt(dir, cfg, t, nt) == 0);
        free(t);
    }
    model *m;
    char err[512];
    if (model_load(&m, dir, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    int k1 = 0, k2 = 0, k3 = 0;
    float *a = gemma_long(m, GT, &k1), *b = gemma_long(m, 37, &k2), *c = gemma_long(m, 1, &k3);
    if (a && b && c) {
        CHECK_MSG(!memcmp(a, b, sizeof(float) * GT * FV), "chunks of 37 differ from one batch");
        CHECK_MSG(!memcmp(a, c, sizeof(float) * GT * FV), "a row at a time differs from one batch");
    }
    /* rows more than 5 + KV_SLACK behind go, KV_SLACK at least at a time */
    const int kk[3] = {k1, k2, k3};
    for (int i = 0; i < 3; i++)
        CHECK_MSG(kk[i] >= GT - 5 - 2 * KV_SLACK && kk[i] <= GT - 5 - KV_SLACK, "kept from %d", kk[i]);
    free(a), free(b), free(c);
    model_free(m);
}

/* ---- mlx-lm's switch_mlp ---- */

/* one tensor of a safetensors file being written: dtype "BF16" or "U32",
   up to 3 dims, its bytes */
typedef struct {
    char name[128];
    const char *dtype;
    long shape[3];
    int nd;
    void *data;
    size_t bytes;
} stw;

static int write_st(const char *dir, const char *config, stw *t, int nt) {
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(config, f);
    fclose(f);
    char *hdr = xmalloc(1 << 18);
    size_t n = (size_t)snprintf(hdr, 1 << 18, "{"), off = 0;
    for (int i = 0; i < nt; i++) {
        char shape[96];
        int k = 0;
        for (int d = 0; d < t[i].nd; d++) k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%ld", d ? "," : "", t[i].shape[d]);
        n += (size_t)snprintf(hdr + n, (1 << 18) - n, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", t[i].name, t[i].dtype, shape, off, off + t[i].bytes);
        off += t[i].bytes;
    }
    hdr[n++] = '}';
    while (n % 8) hdr[n++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) return free(hdr), -1;
    uint64_t hl = n;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, n, f);
    free(hdr);
    for (int i = 0; i < nt; i++) fwrite(t[i].data, 1, t[i].bytes, f);
    return fclose(f) == 0 ? 0 : -1;
}

/* tensor i of tdef as a BF16 stw (weight_of's values) */
static void stw_bf16(stw *o, const char *name, long d0, long d1, int norm) {
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = "BF16";
    o->nd = d1 ? 2 : 1;
    o->shape[0] = d0, o->shape[1] = d1;
    const size_t cnt = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    uint16_t *v = xmalloc(2 * cnt);
    for (size_t j = 0; j < cnt; j++) v[j] = ds_f32_to_bf16(weight_of(name, j, norm));
    o->data = v;
    o->bytes = 2 * cnt;
}

/* The qwen3_moe above (8 experts, top 2, layer 1 dense) with its experts
   as one matrix an expert each and as mlx-lm stacks them
   (mlp.switch_mlp.{gate,up,down}_proj [E][rows][cols]): in BF16 and with
   gate and up MLX-quantized (4 bits, groups of 32, BF16 scales and
   biases), the two layouts give the same logits bit for bit. */
TEST(families_moe_switch_mlp) {
    const int E = 8;
    const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    const long prow[3] = {FI, FI, FH}, pcol[3] = {FH, FH, FI};
    for (int q = 0; q < 2; q++) {
        char per[700], sw[700], cfg[2048];
        snprintf(per, sizeof per, "%s/fam-moe-per%d", test_tmp_dir(), q);
        snprintf(sw, sizeof sw, "%s/fam-moe-switch%d", test_tmp_dir(), q);
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",%s,\"num_experts\":8,"
                 "\"num_experts_per_tok\":2,\"moe_intermediate_size\":48,\"norm_topk_prob\":true,"
                 "\"mlp_only_layers\":[1]%s}",
                 COMMON, q ? ",\"quantization\":{\"group_size\":32,\"bits\":4}" : "");
        tdef *t = xmalloc(sizeof(tdef) * 256);
        const int second_dense[FL] = {0, 1};
        const int nt = make_tensors(t, 1, 8, second_dense);
        stw *a = xcalloc(512, sizeof *a), *b = xcalloc(512, sizeof *b);
        int na = 0, nb = 0;
        for (int i = 0; i < nt; i++) {
            const char *ex = strstr(t[i].name, "mlp.experts.");
            if (!ex) { /* everything but the experts: the same in both */
                stw_bf16(&a[na++], t[i].name, t[i].d0, t[i].d1, t[i].d1 == 0);
                stw_bf16(&b[nb++], t[i].name, t[i].d0, t[i].d1, t[i].d1 == 0);
                continue;
            }
        }
        for (int p = 0; p < 3; p++) {
            /* (down_proj's rows of 48 are not whole groups of 32: it stays BF16) */
            const int qp = q && p < 2;
            const long R = prow[p], K = pcol[p], G = 32, W = K * 4 / 32, NG = K / G;
            /* stacked buffers */
            uint16_t *sf = xmalloc(2 * (size_t)E * R * K), *ss = xmalloc(2 * (size_t)E * R * NG),
                     *sb = xmalloc(2 * (size_t)E * R * NG);
            uint32_t *sq = xmalloc(4 * (size_t)E * R * W);
            for (int e = 0; e < E; e++) {
                char nm[128];
                snprintf(nm, sizeof nm, "model.layers.0.mlp.experts.%d.%s.weight", e, proj[p]);
                float *x = xmalloc(sizeof(float) * (size_t)R * K);
                for (long j = 0; j < R * K; j++) x[j] = ds_bf16_to_f32(ds_f32_to_bf16(weight_of(nm, (size_t)j, 0)));
                for (long j = 0; j < R * K; j++) sf[(size_t)e * R * K + j] = ds_f32_to_bf16(x[j]);
                if (qp)
                    for (long r = 0; r < R; r++) {
                        float scs[64], bis[64];
                        qenc_mlx_row(x + r * K, K, 4, (int)G, sq + ((size_t)e * R + r) * W, scs, bis);
                        for (long g = 0; g < NG; g++) {
                            ss[((size_t)e * R + r) * NG + g] = ds_f32_to_bf16(scs[g]);
                            sb[((size_t)e * R + r) * NG + g] = ds_f32_to_bf16(bis[g]);
                        }
                    }
                free(x);
                /* the per-expert layout: views of the same bytes, copied */
                stw *o = &a[na++];
                snprintf(o->name, sizeof o->name, "%s", nm);
                o->nd = 2, o->shape[0] = R;
                if (!qp) {
                    o->dtype = "BF16", o->shape[1] = K, o->bytes = 2 * (size_t)R * K;
                    o->data = xmalloc(o->bytes);
                    memcpy(o->data, sf + (size_t)e * R * K, o->bytes);
                    continue;
                }
                o->dtype = "U32", o->shape[1] = W, o->bytes = 4 * (size_t)R * W;
                o->data = xmalloc(o->bytes);
                memcpy(o->data, sq + (size_t)e * R * W, o->bytes);
                for (int k = 0; k < 2; k++) {
                    stw *s2 = &a[na++];
                    snprintf(s2->name, sizeof s2->name, "model.layers.0.mlp.experts.%d.%s.%s", e, proj[p],
                             k ? "biases" : "scales");
                    s2->dtype = "BF16", s2->nd = 2, s2->shape[0] = R, s2->shape[1] = NG, s2->bytes = 2 * (size_t)R * NG;
                    s2->data = xmalloc(s2->bytes);
                    memcpy(s2->data, (k ? sb : ss) + (size_t)e * R * NG, s2->bytes);
                }
            }
            stw *o = &b[nb++];
            snprintf(o->name, sizeof o->name, "model.layers.0.mlp.switch_mlp.%s.weight", proj[p]);
            o->nd = 3, o->shape[0] = E, o->shape[1] = R;
            if (!qp) {
                o->dtype = "BF16", o->shape[2] = K, o->data = sf, o->bytes = 2 * (size_t)E * R * K;
                free(sq), free(ss), free(sb);
                continue;
            }
            o->dtype = "U32", o->shape[2] = W, o->data = sq, o->bytes = 4 * (size_t)E * R * W;
            free(sf);
            for (int k = 0; k < 2; k++) {
                stw *s2 = &b[nb++];
                snprintf(s2->name, sizeof s2->name, "model.layers.0.mlp.switch_mlp.%s.%s", proj[p], k ? "biases" : "scales");
                s2->dtype = "BF16", s2->nd = 3, s2->shape[0] = E, s2->shape[1] = R, s2->shape[2] = NG;
                s2->data = k ? sb : ss, s2->bytes = 2 * (size_t)E * R * NG;
            }
        }
        CHECK(write_st(per, cfg, a, na) == 0);
        CHECK(write_st(sw, cfg, b, nb) == 0);
        for (int i = 0; i < na; i++) free(a[i].data);
        for (int i = 0; i < nb; i++) free(b[i].data);
        free(a), free(b), free(t);
        float *x = logits_of(per, FT), *y = logits_of(sw, FT);
        if (x && y)
            CHECK_MSG(!memcmp(x, y, sizeof(float) * FT * FV), "%s: switch_mlp's logits differ from the per-expert layout's",
                      q ? "MLX 4-bit" : "BF16");
        free(x), free(y);
        if (q) check_invariant(sw, "qwen3_moe, MLX 4-bit switch_mlp");
    }
}

/* Malformed switch_mlp stacks are refused with the tensor named. */
TEST(families_moe_switch_mlp_refusals) {
    char dir[700], cfg[2048], err[512];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",%s,\"num_experts\":8,"
             "\"num_experts_per_tok\":2,\"moe_intermediate_size\":48,\"norm_topk_prob\":true,\"mlp_only_layers\":[1],"
             "\"quantization\":{\"group_size\":32,\"bits\":4}}",
             COMMON);
    static const struct {
        long e;         /* experts in the stack */
        int scales;     /* write the scales */
        const char *want;
    } C[] = {{7, 1, "switch_mlp.gate_proj.weight\" has shape [7, 48, 4]"},
             {8, 0, "\"model.layers.0.mlp.switch_mlp.gate_proj.scales\" is missing"}};
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
        snprintf(dir, sizeof dir, "%s/fam-moe-bad%zu", test_tmp_dir(), k);
        tdef *t = xmalloc(sizeof(tdef) * 256);
        const int second_dense[FL] = {0, 1};
        const int nt = make_tensors(t, 1, 8, second_dense);
        stw *a = xcalloc(256, sizeof *a);
        int na = 0;
        for (int i = 0; i < nt; i++)
            if (!strstr(t[i].name, "mlp.experts.")) stw_bf16(&a[na++], t[i].name, t[i].d0, t[i].d1, t[i].d1 == 0);
        const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int p = 0; p < 3; p++) {
            const long R = p < 2 ? FI : FH, K = p < 2 ? FH : FI, E = p == 0 ? C[k].e : 8;
            stw *o = &a[na++];
            snprintf(o->name, sizeof o->name, "model.layers.0.mlp.switch_mlp.%s.weight", proj[p]);
            o->nd = 3, o->shape[0] = E, o->shape[1] = R;
            if (p == 2) {
                o->dtype = "BF16", o->shape[2] = K, o->bytes = 2 * (size_t)E * R * K;
                o->data = xcalloc(1, o->bytes);
                continue;
            }
            o->dtype = "U32", o->shape[2] = K / 8, o->bytes = 4 * (size_t)E * R * (K / 8);
            o->data = xcalloc(1, o->bytes);
            for (int s2 = 0; s2 < 2; s2++) {
                if (!C[k].scales && p == 0 && s2 == 0) continue;
                stw *q = &a[na++];
                snprintf(q->name, sizeof q->name, "model.layers.0.mlp.switch_mlp.%s.%s", proj[p], s2 ? "biases" : "scales");
                q->dtype = "BF16", q->nd = 3, q->shape[0] = E, q->shape[1] = R, q->shape[2] = 1;
                q->bytes = 2 * (size_t)E * R;
                q->data = xcalloc(1, q->bytes);
            }
        }
        CHECK(write_st(dir, cfg, a, na) == 0);
        for (int i = 0; i < na; i++) free(a[i].data);
        free(a), free(t);
        model *m = NULL;
        CHECK(model_load(&m, dir, NULL, err, sizeof err) != 0);
        CHECK_MSG(strstr(err, C[k].want), "case %zu: %s", k, err);
        model_free(m);
    }
}
