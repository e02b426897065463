/* Test fixtures written at run time (too large or too arbitrary to commit). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"
#include "base/util.h"
#include "engine/model.h"
#include "engine/threadpool.h"
#include "spec/drafter.h"
#include "spec/registry.h"
#include "text/tokenizer.h"

void test_bundled_path(char *dir, size_t n, const char *suffix) {
    snprintf(dir, n, "%s/../../models/%s%s", test_data_dir(), DSPARK_DEFAULT_MODEL, suffix);
}

static unsigned xorshift(unsigned *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

void test_prompt_ids(int *p, int n, int shared, unsigned seed, int V) {
    unsigned a = 1, b = seed;
    for (int i = 0; i < n; i++) p[i] = (int)(xorshift(i < shared ? &a : &b) % (unsigned)(V - 200));
}

int test_bundled_open(test_bundled_set *b) {
    char dir[700], err[512];
    memset(b, 0, sizeof *b);
    test_bundled_path(dir, sizeof dir, "");
    if (model_load(&b->m, dir, NULL, err, sizeof err) != 0 || tok_load(&b->tok, dir, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    b->tp = tp_create(2);
    const char *kinds[2] = {"dflash", "dspark"};
    dmodel **dm[2] = {&b->dflash, &b->dspark};
    for (int k = 0; k < 2; k++) {
        char suffix[16];
        snprintf(suffix, sizeof suffix, "-%s", kinds[k]);
        test_bundled_path(dir, sizeof dir, suffix);
        if (dmodel_load(dm[k], dir, b->m, NULL, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            return -1;
        }
    }
    return 0;
}

void test_bundled_close(test_bundled_set *b) {
    dmodel_free(b->dflash);
    dmodel_free(b->dspark);
    tok_free(b->tok);
    tp_free(b->tp);
    model_free(b->m);
}

int test_copy_qwen3_tokenizer(const char *dir) {
    const char *tdir = test_tokenizer_dir();
    if (!tdir) return -1;
    mkdir(dir, 0755);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/qwen3/tokenizer.json %s/qwen3/tokenizer_config.json %s/", tdir, tdir, dir);
    return system(cmd) == 0 ? 0 : -1;
}

int test_write_tiny_qwen3(const char *dir) {
    if (test_copy_qwen3_tokenizer(dir) != 0) return -1;
    const long H = 32, I = 64, L = 2, NH = 2, NKV = 1, HD = 16, V = 151936;
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":%ld,"
            "\"intermediate_size\":%ld,\"num_hidden_layers\":%ld,\"num_attention_heads\":%ld,"
            "\"num_key_value_heads\":%ld,\"head_dim\":%ld,\"vocab_size\":%ld,\"max_position_embeddings\":4096,"
            "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000,\"tie_word_embeddings\":true,"
            "\"torch_dtype\":\"bfloat16\",\"eos_token_id\":[151645,151643]}\n",
            H, I, L, NH, NKV, HD, V);
    fclose(f);
    struct { char name[80]; long d0, d1; } t[3 + 2 * 11];
    int nt = 0;
#define ADD(nm, a, b) do { snprintf(t[nt].name, 80, "%s", nm); t[nt].d0 = a; t[nt].d1 = b; nt++; } while (0)
    ADD("model.embed_tokens.weight", V, H);
    ADD("model.norm.weight", H, 0);
    const char *names[11] = {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                             "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                             "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight",
                             "mlp.up_proj.weight", "mlp.down_proj.weight"};
    long shp[11][2] = {{H, 0}, {H, 0}, {NH * HD, H}, {NKV * HD, H}, {NKV * HD, H}, {H, NH * HD},
                       {HD, 0}, {HD, 0}, {I, H}, {I, H}, {H, I}};
    for (long l = 0; l < L; l++)
        for (int k = 0; k < 11; k++) {
            char nm[80];
            snprintf(nm, sizeof nm, "model.layers.%ld.%s", l, names[k]);
            ADD(nm, shp[k][0], shp[k][1]);
        }
#undef ADD
    char *hdr = xmalloc(1 << 16);
    size_t n = (size_t)snprintf(hdr, 1 << 16, "{");
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        size_t bytes = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1) * 2;
        char shape[64];
        if (t[i].d1) snprintf(shape, sizeof shape, "%ld,%ld", t[i].d0, t[i].d1);
        else snprintf(shape, sizeof shape, "%ld", t[i].d0);
        n += (size_t)snprintf(hdr + n, (1 << 16) - n, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", t[i].name, shape, off, off + bytes);
        off += bytes;
    }
    hdr[n++] = '}';
    while (n % 8) hdr[n++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) {
        free(hdr);
        return -1;
    }
    uint64_t hl = n;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, n, f);
    free(hdr);
    uint32_t r = 12345;
    for (int i = 0; i < nt; i++) {
        size_t cnt = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1);
        int is_norm = t[i].d1 == 0;
        for (size_t j = 0; j < cnt; j++) {
            r = r * 1664525u + 1013904223u;
            float u = ((float)(r >> 8) / 16777216.0f - 0.5f) * (is_norm ? 0.2f : 0.6f) + (is_norm ? 1.0f : 0.0f);
            uint16_t b = ds_f32_to_bf16(u);
            fwrite(&b, 2, 1, f);
        }
    }
    return fclose(f) == 0 ? 0 : -1;
}

int test_run_cli(const char *args, char **out, char **errtxt) {
    static int calls;
    const char *b = getenv("DSPARK_BIN");
    char cmd[8192], eo[600], oo[600];
    snprintf(oo, sizeof oo, "%s/cli-%d.out", test_tmp_dir(), calls);
    snprintf(eo, sizeof eo, "%s/cli-%d.err", test_tmp_dir(), calls++);
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", b ? b : "./dspark", args, oo, eo);
    int st = system(cmd);
    char e[256];
    size_t n;
    char *o = ds_read_file(oo, &n, e, sizeof e), *r = ds_read_file(eo, &n, e, sizeof e);
    if (out) *out = o;
    else free(o);
    if (errtxt) *errtxt = r;
    else free(r);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}


void test_env_save(const char *const *vars, int n, char **saved) {
    for (int i = 0; i < n; i++) {
        saved[i] = getenv(vars[i]) ? strdup(getenv(vars[i])) : NULL;
        unsetenv(vars[i]);
    }
}

void test_env_restore(const char *const *vars, int n, char **saved) {
    for (int i = 0; i < n; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
        saved[i] = NULL;
    }
}

double test_rel_err(const float *a, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= md)) md = d;
        if (fabs((double)ref[i]) > mr) mr = fabs((double)ref[i]);
    }
    return mr > 0 ? md / mr : md;
}
