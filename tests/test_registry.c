/* Registry tests: targets recognised by shape (and not the 2507 refresh),
 * and local drafter copies found in each documented place, in order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model.h"
#include "spec/registry.h"
#include "test.h"

static void qwen3(model_config *c, int hidden, int layers, double theta) {
    memset(c, 0, sizeof *c);
    c->arch = ARCH_QWEN3;
    c->vocab_size = 151936;
    c->hidden_size = hidden;
    c->n_layers = layers;
    c->rope_theta = theta;
}

TEST(registry_match_by_shape) {
    model_config c;
    qwen3(&c, 2560, 36, 1e6);
    const registry_entry *e = registry_match(&c);
    CHECK(e && !strcmp(e->target, "Qwen3-4B") && !strcmp(e->dspark, "deepseek-ai/dspark_qwen3_4b_block7") &&
          !strcmp(e->dflash, "z-lab/Qwen3-4B-DFlash-b16"));
    qwen3(&c, 4096, 36, 1e6);
    e = registry_match(&c);
    CHECK(e && !strcmp(e->target, "Qwen3-8B") && !strcmp(e->dflash, "z-lab/Qwen3-8B-DFlash-b16"));
    qwen3(&c, 5120, 40, 1e6);
    e = registry_match(&c);
    CHECK(e && !strcmp(e->target, "Qwen3-14B") && e->dflash == NULL);
    qwen3(&c, 2560, 36, 5e6); /* Qwen3-4B-Instruct-2507: not what the drafters were trained on */
    CHECK(registry_match(&c) == NULL);
    qwen3(&c, 1024, 28, 1e6); /* Qwen3-0.6B: nothing published */
    CHECK(registry_match(&c) == NULL);
    qwen3(&c, 2560, 36, 1e6);
    c.arch = ARCH_LLAMA;
    CHECK(registry_match(&c) == NULL);
    /* the bundled model: its drafters are looked up beside it */
    qwen3(&c, 256, 6, 1e6);
    c.vocab_size = 6144;
    e = registry_match(&c);
    CHECK(e && !strcmp(e->target, DSPARK_DEFAULT_MODEL) && strstr(e->dspark, DSPARK_DEFAULT_MODEL "-dspark") &&
          strstr(e->dflash, DSPARK_DEFAULT_MODEL "-dflash"));
}

TEST(registry_default_model_env) {
    char out[1024];
    char *saved = getenv("DSPARK_MODEL") ? strdup(getenv("DSPARK_MODEL")) : NULL;
    setenv("DSPARK_MODEL", "/some/where/model", 1);
    CHECK_EQ_INT(registry_default_model(out, sizeof out), 1);
    CHECK(!strcmp(out, "/some/where/model"));
    if (saved) setenv("DSPARK_MODEL", saved, 1);
    else unsetenv("DSPARK_MODEL");
    free(saved);
}

static void mkdirs(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static void touch_config(const char *dir) {
    char p[1100];
    mkdirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("{}", f);
        fclose(f);
    }
}

TEST(registry_find_local_places) {
    char root[400], dir[900], out[1200], hint[2048];
    const char *repo = "deepseek-ai/dspark_qwen3_4b_block7";
    snprintf(root, sizeof root, "%s/registry", test_tmp_dir());
    mkdirs(root);
    char *saved[4];
    const char *vars[4] = {"DSPARK_DRAFTERS", "DSPARK_CACHE_DIR", "HF_HUB_CACHE", "HF_HOME"};
    for (int i = 0; i < 4; i++) saved[i] = getenv(vars[i]) ? strdup(getenv(vars[i])) : NULL;
    unsetenv("DSPARK_DRAFTERS");
    unsetenv("HF_HOME");
    snprintf(dir, sizeof dir, "%s/cache", root);
    setenv("DSPARK_CACHE_DIR", dir, 1);
    snprintf(dir, sizeof dir, "%s/hub", root);
    setenv("HF_HUB_CACHE", dir, 1);
    snprintf(dir, sizeof dir, "%s/models/Qwen3-4B", root);
    mkdirs(dir);
    CHECK_EQ_INT(registry_find_local(repo, dir, out, sizeof out), 0);
    /* beside the model */
    snprintf(dir, sizeof dir, "%s/models/dspark_qwen3_4b_block7", root);
    touch_config(dir);
    snprintf(dir, sizeof dir, "%s/models/Qwen3-4B", root);
    CHECK_EQ_INT(registry_find_local(repo, dir, out, sizeof out), 1);
    CHECK(strstr(out, "models/Qwen3-4B/../dspark_qwen3_4b_block7") != NULL);
    /* the Hugging Face hub cache wins over that */
    snprintf(dir, sizeof dir, "%s/hub/models--deepseek-ai--dspark_qwen3_4b_block7/snapshots/abc123", root);
    touch_config(dir);
    snprintf(dir, sizeof dir, "%s/models/Qwen3-4B", root);
    CHECK_EQ_INT(registry_find_local(repo, dir, out, sizeof out), 1);
    CHECK(strstr(out, "snapshots/abc123") != NULL);
    /* the dspark cache wins over the hub */
    snprintf(dir, sizeof dir, "%s/cache/drafters/dspark_qwen3_4b_block7", root);
    touch_config(dir);
    CHECK_EQ_INT(registry_find_local(repo, NULL, out, sizeof out), 1);
    CHECK(strstr(out, "cache/drafters/dspark_qwen3_4b_block7") != NULL);
    /* DSPARK_DRAFTERS wins over everything; entries without the drafter are skipped */
    snprintf(dir, sizeof dir, "%s/mine/dspark_qwen3_4b_block7", root);
    touch_config(dir);
    snprintf(dir, sizeof dir, "%s/empty:%s/mine", root, root);
    setenv("DSPARK_DRAFTERS", dir, 1);
    CHECK_EQ_INT(registry_find_local(repo, NULL, out, sizeof out), 1);
    CHECK(strstr(out, "mine/dspark_qwen3_4b_block7") != NULL);
    /* a directory without config.json is not a drafter */
    CHECK_EQ_INT(registry_find_local("z-lab/Qwen3-4B-DFlash-b16", NULL, out, sizeof out), 0);
    /* the hint says how to download it (dspark pull) rather than naming one folder */
    registry_search_hint(repo, hint, sizeof hint);
    CHECK(strstr(hint, "dspark pull deepseek-ai/dspark_qwen3_4b_block7") && strstr(hint, "--drafter"));
    for (int i = 0; i < 4; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
}

/* A quantized build of a registered target (here the bundled model, as a
 * GGUF and as an MLX 4-bit folder written by dspark quantize) matches the
 * same entry by its shapes, and a lone GGUF's drafters are found in the
 * folder that holds it. */
TEST(registry_quantized_builds) {
    char dir[600], cmd[2400], src[700];
    snprintf(dir, sizeof dir, "%s/regq", test_tmp_dir());
    snprintf(src, sizeof src, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    mkdir(dir, 0755);
    const char *outs[2] = {"b.gguf", "b-mlx4"}, *types[2] = {"Q8_0", "mlx4"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "quantize --model %s --out %s/%s --type %s", src, dir, outs[i], types[i]);
        CHECK_EQ_INT(test_run_cli(cmd, NULL, NULL), 0);
        char path[800], err[512];
        snprintf(path, sizeof path, "%s/%s", dir, outs[i]);
        model *m;
        CHECK_MSG(model_load(&m, path, NULL, err, sizeof err) == 0, "%s: %s", path, err);
        if (!m) continue;
        const registry_entry *e = registry_match(model_cfg(m));
        CHECK(e && !strcmp(e->target, DSPARK_DEFAULT_MODEL));
        model_free(m);
    }
    /* a drafter folder beside the .gguf */
    char drafter[800], path[900], out[1024];
    snprintf(drafter, sizeof drafter, "%s/%s-dspark", dir, DSPARK_DEFAULT_MODEL);
    mkdir(drafter, 0755);
    snprintf(path, sizeof path, "%s/config.json", drafter);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("{}", f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/b.gguf", dir);
    unsetenv("DSPARK_DRAFTERS");
    setenv("DSPARK_CACHE_DIR", dir, 1); /* nothing under DIR/drafters */
    setenv("HF_HUB_CACHE", dir, 1);
    CHECK_EQ_INT(registry_find_local("dspark/" DSPARK_DEFAULT_MODEL "-dspark", path, out, sizeof out), 1);
    CHECK_MSG(!strcmp(out, drafter), "found %s, expected %s", out, drafter);
    unsetenv("DSPARK_CACHE_DIR");
    unsetenv("HF_HUB_CACHE");
}
