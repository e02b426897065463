/* doctor / models / model ids end to end: `dspark doctor --models --json`
 * and `dspark models --json` checked against docs/doctor-schema.md (every
 * required key with its type), the registry file's own checks, --model
 * given as a Hugging Face id of a model in a cache laid out here, and the
 * remote-code refusal and acceptance through the command line. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "spec/registry.h"
#include "test.h"

/* ---- a schema as (path, type) rows ------------------------------------ */

/* types: n number, s string, b bool, o object, a array; upper case: the
   same or null. A path's parts are object keys; "[]" applies the rest to
   every element of an array. */
typedef struct {
    const char *path;
    char type;
} field;

static int type_ok(const cJSON *v, char t) {
    if (t >= 'A' && t <= 'Z') {
        if (cJSON_IsNull(v)) return 1;
        t = (char)(t - 'A' + 'a');
    }
    switch (t) {
    case 'n': return cJSON_IsNumber(v);
    case 's': return cJSON_IsString(v);
    case 'b': return cJSON_IsBool(v);
    case 'o': return cJSON_IsObject(v);
    case 'a': return cJSON_IsArray(v);
    }
    return 0;
}

/* checks path (from its part at p) under v; returns the failures */
static int check_path(const cJSON *v, const char *p, char t, const char *full, const char *what) {
    if (!*p) {
        if (!type_ok(v, t)) {
            test_fail(__FILE__, __LINE__, "%s: %s is not of type '%c'", what, full, t);
            return 1;
        }
        return 0;
    }
    if (!strncmp(p, "[]", 2)) {
        if (!cJSON_IsArray(v)) {
            test_fail(__FILE__, __LINE__, "%s: %s: not an array before \"%s\"", what, full, p);
            return 1;
        }
        int bad = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, v) bad += check_path(x, p[2] == '.' ? p + 3 : p + 2, t, full, what);
        return bad;
    }
    char key[64];
    size_t k = strcspn(p, ".[");
    snprintf(key, sizeof key, "%.*s", (int)k, p);
    const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, key) : NULL;
    if (!c) {
        test_fail(__FILE__, __LINE__, "%s: missing %s (at \"%s\")", what, full, key);
        return 1;
    }
    const char *rest = p + k;
    if (*rest == '.') rest++;
    return check_path(c, rest, t, full, what);
}

static int check_schema(const cJSON *root, const field *f, size_t n, const char *what) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += check_path(root, f[i].path, f[i].type, f[i].path, what);
    return bad;
}

/* docs/doctor-schema.md, the "models" entries (shared by doctor and models) */
#define MODEL_FIELDS                                                                                                   \
    {"models", 'a'}, {"models[].name", 's'}, {"models[].hf_id", 'S'}, {"models[].bundled", 'b'},                      \
        {"models[].max_position_embeddings", 'n'}, {"models[].builds", 'a'}, {"models[].builds[].kind", 's'},       \
        {"models[].builds[].id", 'S'}, {"models[].builds[].downloaded", 'b'}, {"models[].builds[].path", 'S'},       \
        {"models[].builds[].memory.weights_bytes", 'n'}, {"models[].builds[].memory.kv_bytes_per_position", 'n'},    \
        {"models[].builds[].memory.scratch_bytes", 'n'}, {"models[].builds[].memory.need_bytes", 'n'},               \
        {"models[].builds[].memory.window", 'n'}, {"models[].builds[].memory.fits", 'B'},                            \
        {"models[].builds[].memory.suggest", 'a'}, {"models[].drafters.dspark", 'O'},                                \
        {"models[].drafters.dflash", 'O'}, {"budget.device", 's'}, {"budget.bytes", 'n'},                            \
        {"budget.reserve_bytes", 'n'}, {"registry.path", 's'}, {"registry.error", 'S'}, {"registry.targets", 'n'}, \
        {"schema_version", 'n'}

static const field DOCTOR_FIELDS[] = {
    {"ok", 'b'}, {"problems", 'a'}, {"problems[]", 's'},
    {"build.version", 's'}, {"build.cuda", 'b'}, {"build.simd_compiled", 'a'}, {"build.simd_compiled[]", 's'},
    {"cpu.name", 's'}, {"cpu.logical_cpus", 'n'}, {"cpu.features", 'o'}, {"cpu.features.avx2", 'b'},
    {"cpu.features.avx512f", 'b'}, {"cpu.ops_level", 'n'}, {"cpu.kernel_path", 's'}, {"cpu.best_kernel_path", 's'},
    {"gpus.cuda_built", 'b'}, {"gpus.devices", 'a'}, {"gpus.devices[].index", 'n'},
    {"memory.total_bytes", 'n'}, {"memory.available_bytes", 'n'}, {"memory.swap_total_bytes", 'n'},
    {"memory.swap_free_bytes", 'n'}, {"memory.pressure", 'O'},
    {"disk.cache", 's'}, {"disk.measured_at", 's'}, {"disk.free_bytes", 'n'},
    {"model_places", 'a'}, {"model_places[].what", 's'}, {"model_places[].path", 's'}, {"model_places[].exists", 'b'},
    {"model_places[].drafters_only", 'b'},
    {"calibration.path", 'S'}, {"calibration.error", 'S'}, {"calibration.entries", 'a'},
    {"calibration.entries[].key", 's'}, {"calibration.entries[].valid", 'b'},
    {"tensor_parallel.max_ranks", 'n'}, {"tensor_parallel.cpu", 's'}, {"tensor_parallel.cuda", 's'},
    {"tensor_parallel.gpus", 'n'}, {"tensor_parallel.links", 'a'}, {"tensor_parallel.fits", 'a'},
    MODEL_FIELDS,
};

static const field MODELS_FIELDS[] = {MODEL_FIELDS};

/* the variables the commands read, pointed into a scratch tree */
static const char *const VARS[] = {"DSPARK_MODEL_DIRS", "DSPARK_DRAFTERS", "DSPARK_CACHE_DIR", "HF_HUB_CACHE", "HF_HOME",
                             "HOME", "DSPARK_TRUST_REMOTE_CODE", "DSPARK_MODEL"};
#define NVARS (int)(sizeof VARS / sizeof VARS[0])
static char *saved[NVARS];

static void env_isolate(const char *root) {
    char p[1200];
    test_env_save(VARS, NVARS, saved);
    snprintf(p, sizeof p, "%s/home", root);
    mkdir(root, 0755);
    mkdir(p, 0755);
    setenv("HOME", p, 1);
    snprintf(p, sizeof p, "%s/hub", root);
    setenv("HF_HUB_CACHE", p, 1);
    snprintf(p, sizeof p, "%s/cache", root);
    setenv("DSPARK_CACHE_DIR", p, 1);
}

static void env_restore(void) { test_env_restore(VARS, NVARS, saved); }

TEST(doctor_json_schema) {
    char root[700];
    snprintf(root, sizeof root, "%s/doctor", test_tmp_dir());
    env_isolate(root);
    char *out = NULL, *err = NULL;
    int rc = test_run_cli("doctor --models --json", &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK_MSG(j != NULL, "doctor --json is not JSON: %s / %s", out ? out : "", err ? err : "");
    if (j) {
        CHECK_EQ_INT(check_schema(j, DOCTOR_FIELDS, sizeof DOCTOR_FIELDS / sizeof DOCTOR_FIELDS[0], "doctor"), 0);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "schema_version");
        CHECK(cJSON_IsNumber(v) && v->valueint == 1);
        /* the exit status says whether problems were found */
        int np = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "problems"));
        CHECK_EQ_INT(rc, np ? 1 : 0);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")) == (np == 0));
        /* the registry was found beside the binary, and the bundled model is downloaded */
        const cJSON *m, *found = NULL;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(j, "models")) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(m, "name");
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, DSPARK_DEFAULT_MODEL)) found = m;
        }
        CHECK_MSG(found != NULL, "no %s in doctor's models", DSPARK_DEFAULT_MODEL);
        if (found) {
            const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(found, "builds"), 0);
            CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "downloaded")));
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(found, "drafters"), "dspark");
            CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "downloaded")));
        }
        /* the Hugging Face cache set here is one of the places, in its place */
        const cJSON *pl;
        int hub = 0;
        cJSON_ArrayForEach(pl, cJSON_GetObjectItemCaseSensitive(j, "model_places")) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(pl, "path");
            hub |= cJSON_IsString(p) && !strcmp(p->valuestring, getenv("HF_HUB_CACHE"));
        }
        CHECK(hub);
    }
    cJSON_Delete(j);
    free(out);
    free(err);
    /* the text form, and an unknown option */
    rc = test_run_cli("doctor", &out, NULL);
    CHECK(out && strstr(out, "models are looked for in") && strstr(out, "cpu: "));
    free(out);
    CHECK_EQ_INT(test_run_cli("doctor --frobnicate", NULL, NULL), 1);
    env_restore();
}

TEST(models_json_schema) {
    char root[700];
    snprintf(root, sizeof root, "%s/models-cmd", test_tmp_dir());
    env_isolate(root);
    char *out = NULL;
    CHECK_EQ_INT(test_run_cli("models --json", &out, NULL), 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK_MSG(j != NULL, "models --json is not JSON: %s", out ? out : "");
    if (j) {
        CHECK_EQ_INT(check_schema(j, MODELS_FIELDS, sizeof MODELS_FIELDS / sizeof MODELS_FIELDS[0], "models"), 0);
        /* Qwen3-8B with its builds and both drafters, nothing downloaded here */
        const cJSON *m, *q = NULL;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(j, "models")) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(m, "name");
            if (!strcmp(nm->valuestring, "Qwen3-8B")) q = m;
        }
        CHECK(q != NULL);
        if (q) {
            const cJSON *b;
            int kinds = 0;
            cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(q, "builds")) {
                const char *k = cJSON_GetObjectItemCaseSensitive(b, "kind")->valuestring;
                kinds |= !strcmp(k, "bf16") ? 1 : !strcmp(k, "mlx-8bit") ? 2 : !strcmp(k, "mlx-4bit") ? 4 : !strcmp(k, "gguf") ? 8 : 0;
                CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "downloaded")));
            }
            CHECK_EQ_INT(kinds, 15);
            const cJSON *ds = cJSON_GetObjectItemCaseSensitive(q, "drafters");
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(ds, "dspark");
            CHECK(d && !strcmp(cJSON_GetObjectItemCaseSensitive(d, "id")->valuestring, "deepseek-ai/dspark_qwen3_8b_block7"));
            CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(d, "acceptance")));
            CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(ds, "dflash")));
        }
    }
    cJSON_Delete(j);
    free(out);
    CHECK_EQ_INT(test_run_cli("models", &out, NULL), 0);
    CHECK(out && strstr(out, "Qwen3-14B") && strstr(out, "mlx-community/Qwen3-8B-4bit"));
    free(out);
    env_restore();
}

/* The registry file is checked as it is read: a bad one names the file and
 * the entry, and leaves the registry as it was. */
TEST(registry_file_checks) {
    char p[700], e[1024];
    snprintf(p, sizeof p, "%s/registry-bad.json", test_tmp_dir());
    const char *bad[] = {
        "[]", "{\"schema_version\": 2, \"targets\": []}", "{\"schema_version\": 1}",
        "{\"schema_version\": 1, \"targets\": [{\"name\": \"x\"}]}",
        "{\"schema_version\": 1, \"targets\": [{\"name\": \"x\", \"hf_id\": \"a/b\", \"shape\": {\"model_type\": \"qwen3\"}}]}",
    };
    int n0;
    registry_entries(&n0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(p, "w");
        fputs(bad[i], f);
        fclose(f);
        e[0] = 0;
        CHECK_EQ_INT(registry_load_file(p, e, sizeof e), -1);
        CHECK_MSG(strstr(e, "registry-bad.json") != NULL, "case %zu: %s", i, e);
    }
    int n1;
    registry_entries(&n1);
    CHECK_EQ_INT(n1, n0);
    const char *path, *error;
    registry_source(&path, &error);
    CHECK_MSG(strstr(path, "models/registry.json") && !*error, "registry %s: %s", path, error);
}

/* the bundled model, as an absolute path */
static int bundled(char *out, size_t n) {
    char p[PATH_MAX + 100];
    snprintf(p, sizeof p, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    char *r = realpath(p, NULL);
    if (!r) return -1;
    snprintf(out, n, "%s", r);
    free(r);
    return 0;
}

TEST(cli_model_id_from_hf_cache) {
    char root[700], b[PATH_MAX], p[2000], args[PATH_MAX + 200];
    snprintf(root, sizeof root, "%s/cli-id", test_tmp_dir());
    env_isolate(root);
    CHECK_EQ_INT(bundled(b, sizeof b), 0);
    const char *c1 = "3333333333333333333333333333333333333333";
    snprintf(p, sizeof p, "%s/hub/models--acme--coder/snapshots", root);
    char mk[PATH_MAX + 9000];
    snprintf(mk, sizeof mk, "mkdir -p %s %s/hub/models--acme--coder/refs && ln -s %s %s/%s && echo %s > "
                            "%s/hub/models--acme--coder/refs/main",
             p, root, b, p, c1, c1, root);
    CHECK_EQ_INT(system(mk), 0);
    char *out = NULL, *err = NULL;
    CHECK_EQ_INT(test_run_cli("tokenize --model acme/coder hello", &out, &err), 0);
    CHECK_MSG(out && *out, "no ids: %s", err ? err : "");
    free(out);
    free(err);
    /* DSPARK_MODEL takes an id too */
    setenv("DSPARK_MODEL", "acme/coder", 1);
    CHECK_EQ_INT(test_run_cli("tokenize hello", NULL, NULL), 0);
    unsetenv("DSPARK_MODEL");
    /* a miss says where it looked and how to download */
    CHECK_EQ_INT(test_run_cli("run --model acme/absent --prompt-ids 1 -n 1", NULL, &err), 1);
    CHECK_MSG(err && strstr(err, "models--acme--absent") && strstr(err, "dspark pull acme/absent"), "%s",
              err ? err : "");
    free(err);
    /* --drafter takes an id, found beside the model's folder */
    snprintf(args, sizeof args, "run --model %s --mode dspark --drafter dspark/%s-dspark --prompt-ids 1,2,3 -n 4", b,
             DSPARK_DEFAULT_MODEL);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0);
    free(err);
    env_restore();
}

/* A copy of the bundled model whose config.json is config_text (files
   other than config.json linked) */
static void model_with_config(const char *dir, const char *b, const char *config_text) {
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && for f in %s/*; do [ \"$(basename $f)\" = config.json ] || ln -sf $f %s/; done",
             dir, b, dir);
    CHECK_EQ_INT(system(cmd), 0);
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(config_text, f);
    fclose(f);
}

TEST(cli_remote_code) {
    char root[700], b[PATH_MAX], dir[900], args[1200], cfg[PATH_MAX + 20];
    snprintf(root, sizeof root, "%s/cli-remote", test_tmp_dir());
    env_isolate(root);
    CHECK_EQ_INT(bundled(b, sizeof b), 0);
    size_t n;
    char e[256];
    snprintf(cfg, sizeof cfg, "%s/config.json", b);
    char *text = ds_read_file(cfg, &n, e, sizeof e);
    CHECK(text != NULL);
    if (!text) return;
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON *am = cJSON_AddObjectToObject(j, "auto_map");
    cJSON_AddStringToObject(am, "AutoModelForCausalLM", "modeling_custom.CustomForCausalLM");
    char *s = cJSON_Print(j);
    snprintf(dir, sizeof dir, "%s/automap", root);
    model_with_config(dir, b, s);
    free(s);
    char *err = NULL;
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 -n 2", dir);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    CHECK_MSG(err && strstr(err, "auto_map") && strstr(err, "never runs") && strstr(err, "--trust-remote-code"), "%s",
              err ? err : "");
    free(err);
    /* accepted by the flag or the variable: the architecture is one dspark implements */
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 -n 2 --trust-remote-code", dir);
    CHECK_EQ_INT(test_run_cli(args, NULL, NULL), 0);
    setenv("DSPARK_TRUST_REMOTE_CODE", "1", 1);
    snprintf(args, sizeof args, "tokenize --model %s hello", dir);
    CHECK_EQ_INT(test_run_cli(args, NULL, NULL), 0);
    unsetenv("DSPARK_TRUST_REMOTE_CODE");
    /* accepted, an architecture dspark does not implement is still refused, by name */
    cJSON_ReplaceItemInObject(j, "model_type", cJSON_CreateString("custom_lm"));
    s = cJSON_Print(j);
    snprintf(dir, sizeof dir, "%s/custom", root);
    model_with_config(dir, b, s);
    free(s);
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 -n 2 --trust-remote-code", dir);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    CHECK_MSG(err && strstr(err, "unsupported model_type \"custom_lm\""), "%s", err ? err : "");
    free(err);
    /* commands without a model take no --trust-remote-code */
    CHECK_EQ_INT(test_run_cli("models --trust-remote-code", NULL, NULL), 1);
    cJSON_Delete(j);
    env_restore();
}
