/* Tests of engine/gguf_model.h: the tiny Qwen3 and Llama models that
 * tools/gen_gguf_fixtures.py converted from the HF test checkpoints the way
 * convert_hf_to_gguf.py does (2-D weights F16, 1-D F32, llama q/k rows
 * permuted, llama3 RoPE as rope_freqs.weight) translate back to the
 * checkpoints: every tensor under its HF name and shape with the HF values
 * (rounded to F16 where the GGUF holds F16), and a config that parses into
 * the same model_config as the HF config.json. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/config.h"
#include "engine/gguf_model.h"
#include "engine/safetensors.h"
#include "test.h"

static float elem(const tensor *t, int64_t i) {
    const uint8_t *p = t->data;
    uint16_t h;
    float f;
    switch (t->dtype) {
    case DT_F32: memcpy(&f, p + 4 * i, 4); return f;
    case DT_F16: memcpy(&h, p + 2 * i, 2); return ds_f16_to_f32(h);
    case DT_BF16: memcpy(&h, p + 2 * i, 2); return ds_bf16_to_f32(h);
    default: return NAN;
    }
}

static void check_model(const char *hf_dir_name, const char *gguf_name, int is_llama) {
    char err[512], hf_dir[512], gp[512];
    snprintf(hf_dir, sizeof hf_dir, "%s/models/%s", test_data_dir(), hf_dir_name);
    snprintf(gp, sizeof gp, "%s/gguf/%s", test_data_dir(), gguf_name);
    for (int mode = 0; mode < 2; mode++) {
        gguf_model *m = NULL;
        CHECK_MSG(gguf_model_open(&m, gp, mode, err, sizeof err) == 0, "%s", err);
        if (!m) return;
        st_set *st = NULL;
        CHECK_MSG(st_set_open(&st, hf_dir, err, sizeof err) == 0, "%s", err);
        if (!st) {
            gguf_model_close(m);
            return;
        }
        /* the same tensor set, names, shapes and values */
        CHECK_EQ_INT(gguf_model_tensor_count(m), st_set_count(st));
        for (int i = 0; i < st_set_count(st); i++) {
            const tensor *h = st_set_get(st, i);
            const tensor *g = gguf_model_find(m, h->name);
            CHECK_MSG(g != NULL, "%s: no %s", gguf_name, h->name);
            if (!g) continue;
            CHECK_MSG(g->ndim == h->ndim && g->shape[0] == h->shape[0] && (h->ndim < 2 || g->shape[1] == h->shape[1]),
                      "%s: shape", h->name);
            CHECK(g->dtype == (h->ndim == 2 ? DT_F16 : DT_F32));
            int64_t n = tensor_numel(h), bad = 0;
            if (tensor_numel(g) != n) continue;
            for (int64_t k = 0; k < n; k++) {
                float want = elem(h, k);
                if (g->dtype == DT_F16) want = ds_f16_to_f32(ds_f32_to_f16(want));
                bad += elem(g, k) != want;
            }
            CHECK_MSG(bad == 0, "%s: %lld values differ", h->name, (long long)bad);
        }
        for (int i = 0; i < gguf_model_tensor_count(m); i++)
            CHECK(gguf_model_find(m, gguf_model_tensor_at(m, i)->name) == gguf_model_tensor_at(m, i));

        /* the config: the same model_config as HF's, but for rope scaling
           (llama3: carried by rope_freqs) and the dtype */
        model_config hc, gc;
        CHECK_MSG(config_load(&hc, hf_dir, err, sizeof err) == 0, "%s", err);
        const char *cj = gguf_model_config_json(m), *gj = gguf_model_generation_json(m);
        CHECK_MSG(config_parse(&gc, cj, strlen(cj), "gguf config", err, sizeof err) == 0, "%s\n%s", err, cj);
        CHECK_MSG(config_parse_generation(&gc, gj, strlen(gj), "gguf generation", err, sizeof err) == 0, "%s", err);
        CHECK(gc.arch == hc.arch && strcmp(gc.model_type, hc.model_type) == 0);
        CHECK_EQ_INT(gc.vocab_size, hc.vocab_size);
        CHECK_EQ_INT(gc.hidden_size, hc.hidden_size);
        CHECK_EQ_INT(gc.intermediate_size, hc.intermediate_size);
        CHECK_EQ_INT(gc.n_layers, hc.n_layers);
        CHECK_EQ_INT(gc.n_heads, hc.n_heads);
        CHECK_EQ_INT(gc.n_kv_heads, hc.n_kv_heads);
        CHECK_EQ_INT(gc.head_dim, hc.head_dim);
        CHECK_EQ_INT(gc.max_position_embeddings, hc.max_position_embeddings);
        CHECK(gc.rms_norm_eps == hc.rms_norm_eps);
        CHECK(gc.rope_theta == hc.rope_theta);
        CHECK_EQ_INT(gc.tie_word_embeddings, hc.tie_word_embeddings);
        CHECK_EQ_INT(gc.attention_bias, hc.attention_bias);
        CHECK_EQ_INT(gc.o_bias, hc.o_bias);
        CHECK_EQ_INT(gc.qk_norm, hc.qk_norm);
        CHECK_EQ_INT(gc.bos_token_id, hc.bos_token_id);
        CHECK_EQ_INT(gc.n_eos, hc.n_eos);
        for (int k = 0; k < gc.n_eos && k < hc.n_eos; k++) CHECK_EQ_INT(gc.eos_token_ids[k], hc.eos_token_ids[k]);
        CHECK_EQ_INT(gc.rope_type, ROPE_DEFAULT);
        int nf = -1;
        const float *f = gguf_model_rope_freqs(m, &nf);
        if (!is_llama) {
            CHECK(f == NULL && nf == 0);
            CHECK_EQ_INT(hc.rope_type, ROPE_DEFAULT);
        } else {
            /* HF's llama3 inverse frequencies = the plain ones / factors */
            CHECK_EQ_INT(hc.rope_type, ROPE_LLAMA3);
            CHECK(f != NULL && nf == hc.head_dim / 2);
            float hi[512], gi[512];
            config_rope_inv_freq(&hc, hi);
            config_rope_inv_freq(&gc, gi);
            for (int k = 0; f && k < nf; k++)
                CHECK_MSG(fabsf(gi[k] / f[k] - hi[k]) <= 1e-6f * hi[k], "inv_freq %d: %g vs %g", k,
                          (double)(gi[k] / f[k]), (double)hi[k]);
        }
        const gguf *gf = gguf_model_file(m);
        gguf_str s;
        CHECK(gf && gguf_get_str(gf, "tokenizer.ggml.model", &s) == 0 && strcmp(s.s, "gpt2") == 0);
        st_set_close(st);
        gguf_model_close(m);
    }
}

TEST(gguf_model_qwen3) { check_model("qwen3-bf16", "qwen3-tiny.gguf", 0); }
TEST(gguf_model_llama3) { check_model("llama3-bf16", "llama3-tiny.gguf", 1); }

/* Writes a minimal GGUF: general.architecture = arch, one F32 tensor. */
static void write_min(const char *path, const char *arch, const char *tname) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return;
    uint32_t u;
    uint64_t q;
    fwrite("GGUF", 1, 4, fp);
    u = 3, fwrite(&u, 4, 1, fp);
    q = 1, fwrite(&q, 8, 1, fp);
    q = 3, fwrite(&q, 8, 1, fp);
    const char *k[3] = {"general.architecture", NULL, NULL};
    char k1[64], k2[64];
    snprintf(k1, sizeof k1, "%s.block_count", arch);
    snprintf(k2, sizeof k2, "%s.attention.head_count", arch);
    k[1] = k1, k[2] = k2;
    for (int i = 0; i < 3; i++) {
        q = strlen(k[i]), fwrite(&q, 8, 1, fp), fwrite(k[i], 1, q, fp);
        if (i == 0) {
            u = GGUF_STRING, fwrite(&u, 4, 1, fp);
            q = strlen(arch), fwrite(&q, 8, 1, fp), fwrite(arch, 1, q, fp);
        } else {
            u = GGUF_U32, fwrite(&u, 4, 1, fp);
            u = 1, fwrite(&u, 4, 1, fp);
        }
    }
    q = strlen(tname), fwrite(&q, 8, 1, fp), fwrite(tname, 1, q, fp);
    u = 1, fwrite(&u, 4, 1, fp);
    q = 4, fwrite(&q, 8, 1, fp);
    u = GGML_F32, fwrite(&u, 4, 1, fp);
    q = 0, fwrite(&q, 8, 1, fp);
    long at = ftell(fp);
    while (at % 32) fputc(0, fp), at++;
    float z[4] = {0};
    fwrite(z, 4, 4, fp);
    fclose(fp);
}

TEST(gguf_model_errors) {
    char err[512], p[600];
    gguf_model *m = NULL;
    snprintf(p, sizeof p, "%s/arch.gguf", test_tmp_dir());
    write_min(p, "gpt2", "token_embd.weight");
    CHECK(gguf_model_open(&m, p, 0, err, sizeof err) != 0 && strstr(err, "gpt2") && strstr(err, "qwen3, qwen2, llama"));
    write_min(p, "qwen3", "blk.0.attn_weird.weight");
    CHECK(gguf_model_open(&m, p, 0, err, sizeof err) != 0 && strstr(err, "blk.0.attn_weird.weight"));
    write_min(p, "qwen3", "blk.3.attn_norm.weight"); /* block_count is 1 */
    CHECK(gguf_model_open(&m, p, 0, err, sizeof err) != 0 && strstr(err, "block_count"));
    write_min(p, "qwen3", "blk.0.attn_norm.bias");
    CHECK(gguf_model_open(&m, p, 0, err, sizeof err) != 0 && strstr(err, "attn_norm.bias"));
    write_min(p, "llama", "rope_freqs.weight"); /* the other metadata missing */
    CHECK(gguf_model_open(&m, p, 0, err, sizeof err) != 0 && strstr(err, "missing metadata \"llama.embedding_length\""));
    CHECK(m == NULL);
}

/* Quantized q/k of a llama: whole Q8_0 rows return to their HF places
 * (HF row r of the fixture is 34 bytes of value r). */
TEST(gguf_model_llama_q8_unpermute) {
    char err[512], p[600];
    snprintf(p, sizeof p, "%s/gguf/llama-q8.gguf", test_data_dir());
    gguf_model *m = NULL;
    CHECK_MSG(gguf_model_open(&m, p, 0, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    const char *names[2] = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight"};
    const int rows[2] = {32, 16};
    for (int w = 0; w < 2; w++) {
        const tensor *t = gguf_model_find(m, names[w]);
        CHECK(t && t->dtype == DT_Q8_0 && t->ndim == 2 && t->shape[0] == rows[w] && t->shape[1] == 32 &&
              t->nbytes == (size_t)rows[w] * 34);
        if (!t) continue;
        int bad = 0;
        for (int r = 0; r < rows[w]; r++)
            for (int b = 0; b < 34; b++) bad += ((const uint8_t *)t->data)[r * 34 + b] != r;
        CHECK_EQ_INT(bad, 0);
    }
    gguf_model_close(m);
}
