/* registry: see registry.h.
 *
 * models/registry.json (found beside the binary as the bundled model is):
 *   {"schema_version": 1,
 *    "targets": [{"name": "Qwen3-8B",           the target's name (required)
 *                 "hf_id": "Qwen/Qwen3-8B",     its Hugging Face repo (absent for the bundled model)
 *                 "bundled": true,              optional: the model in models/
 *                 "note": "...",                optional
 *                 "shape": {model_type, vocab_size, hidden_size, intermediate_size, num_hidden_layers,
 *                           num_attention_heads, num_key_value_heads, head_dim, tie_word_embeddings,
 *                           max_position_embeddings, rope_theta},   config.json's values (all required)
 *                 "builds": [{"kind": "bf16" | "mlx-8bit" | "mlx-4bit" | "gguf", "id": REPO}, ...],
 *                                                (the bundled model lists none: it has one, in models/)
 *                 "drafters": {"dspark": {"id": REPO, "acceptance": {...}},
 *                              "dflash": {"id": REPO, "acceptance": {...}}}}]}
 * acceptance (optional) is passed through as published: numbers of tokens
 * per round by benchmark, and "source" saying where and how they were
 * measured. A target is matched by its architecture (model_type),
 * vocab_size, hidden_size, num_hidden_layers and rope_theta. */
#include "spec/registry.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "base/util.h"
#include "spec/modelref.h"

#define REGISTRY_MAX 64

static struct {
    cJSON *root; /* the parsed file: the entries' strings point into it */
    registry_entry e[REGISTRY_MAX];
    int n;
    char path[4096];
    char error[1024];
} g_reg;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int has_config(const char *dir) {
    char p[4096];
    return ds_path_join(p, sizeof p, dir, "config.json") == 0 && ds_file_exists(p);
}

/* the folder holding the running binary */
static int exe_dir(char *out, size_t n) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 0;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = 0;
    snprintf(out, n, "%s", exe);
    return 1;
}

/* models/ beside the binary: the source tree (binary at the root, or a
   build/<kind>/ binary), then an installed prefix */
static const char *const MODELS_REL[] = {"models", "../../models", "../share/dspark/models", "../models"};

static int find_in_models(const char *name, int want_dir, char *out, size_t n) {
    char exe[4096];
    if (!exe_dir(exe, sizeof exe)) return 0;
    for (size_t i = 0; i < sizeof MODELS_REL / sizeof MODELS_REL[0]; i++) {
        char p[4600];
        snprintf(p, sizeof p, "%s/%s/%s", exe, MODELS_REL[i], name);
        if (want_dir ? has_config(p) : ds_file_exists(p)) {
            snprintf(out, n, "%s", p);
            return 1;
        }
    }
    return 0;
}

static int get_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int *out, const char *ctx, char *err,
                   size_t errlen) {
    int64_t v;
    if (json_req_int(o, k, lo, hi, &v, ctx, err, errlen) < 0) return -1;
    *out = (int)v;
    return 0;
}

static int parse_drafter(const cJSON *ds, const char *kind, registry_drafter *d, const char *ctx, char *err,
                         size_t errlen) {
    const cJSON *o = ds ? cJSON_GetObjectItemCaseSensitive(ds, kind) : NULL;
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return ds_err(err, errlen, "%s: drafters.%s must be an object", ctx, kind);
    char c2[600];
    snprintf(c2, sizeof c2, "%s drafters.%s", ctx, kind);
    if (json_req_str(o, "id", &d->id, c2, err, errlen) < 0) return -1;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "acceptance");
    if (a && !cJSON_IsObject(a)) return ds_err(err, errlen, "%s: \"acceptance\" must be an object", c2);
    for (const cJSON *x = a ? a->child : NULL; x; x = x->next)
        if (!cJSON_IsNumber(x) && !(cJSON_IsString(x) && !strcmp(x->string, "source")))
            return ds_err(err, errlen, "%s: acceptance \"%s\" must be a number (only \"source\" is text)", c2,
                          x->string);
    d->acceptance = a;
    return 0;
}

static int parse_entry(const cJSON *t, registry_entry *e, int idx, const char *path, char *err, size_t errlen) {
    char ctx[4400];
    snprintf(ctx, sizeof ctx, "%s: targets[%d]", path, idx);
    if (!cJSON_IsObject(t)) return ds_err(err, errlen, "%s must be an object", ctx);
    memset(e, 0, sizeof *e);
    if (json_req_str(t, "name", &e->target, ctx, err, errlen) < 0) return -1;
    snprintf(ctx, sizeof ctx, "%s: target %s", path, e->target);
    if (json_opt_str(t, "hf_id", &e->hf_id, ctx, err, errlen) < 0 ||
        json_opt_str(t, "note", &e->note, ctx, err, errlen) < 0 ||
        json_opt_bool(t, "bundled", &e->bundled, ctx, err, errlen) < 0)
        return -1;
    if (!e->hf_id && !e->bundled) return ds_err(err, errlen, "%s: missing \"hf_id\"", ctx);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(t, "shape");
    if (!cJSON_IsObject(s)) return ds_err(err, errlen, "%s: missing \"shape\" object", ctx);
    const char *mt;
    if (json_req_str(s, "model_type", &mt, ctx, err, errlen) < 0) return -1;
    snprintf(e->model_type, sizeof e->model_type, "%s", mt);
    int tied = 0;
    if (get_int(s, "vocab_size", 1, 1 << 24, &e->vocab, ctx, err, errlen) ||
        get_int(s, "hidden_size", 1, 1 << 20, &e->hidden, ctx, err, errlen) ||
        get_int(s, "intermediate_size", 1, 1 << 22, &e->intermediate, ctx, err, errlen) ||
        get_int(s, "num_hidden_layers", 1, 4096, &e->layers, ctx, err, errlen) ||
        get_int(s, "num_attention_heads", 1, 4096, &e->heads, ctx, err, errlen) ||
        get_int(s, "num_key_value_heads", 1, 4096, &e->kv_heads, ctx, err, errlen) ||
        get_int(s, "head_dim", 1, 4096, &e->head_dim, ctx, err, errlen) ||
        get_int(s, "max_position_embeddings", 1, 1 << 26, &e->max_pos, ctx, err, errlen) ||
        json_req_num(s, "rope_theta", &e->rope_theta, ctx, err, errlen) < 0 ||
        json_opt_bool(s, "tie_word_embeddings", &tied, ctx, err, errlen) < 0)
        return -1;
    e->tied = tied;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(t, "builds");
    if (b && !cJSON_IsArray(b)) return ds_err(err, errlen, "%s: \"builds\" must be a list", ctx);
    for (const cJSON *x = b ? b->child : NULL; x; x = x->next) {
        if (e->n_builds == REGISTRY_MAX_BUILDS)
            return ds_err(err, errlen, "%s: more than %d builds", ctx, REGISTRY_MAX_BUILDS);
        registry_build *rb = &e->builds[e->n_builds];
        if (!cJSON_IsObject(x) || json_req_str(x, "kind", &rb->kind, ctx, err, errlen) < 0 ||
            json_req_str(x, "id", &rb->id, ctx, err, errlen) < 0)
            return err[0] ? -1 : ds_err(err, errlen, "%s: each build must be {\"kind\", \"id\"}", ctx);
        if (strcmp(rb->kind, "bf16") && strcmp(rb->kind, "mlx-8bit") && strcmp(rb->kind, "mlx-4bit") &&
            strcmp(rb->kind, "gguf"))
            return ds_err(err, errlen, "%s: build kind \"%s\" (expected bf16, mlx-8bit, mlx-4bit or gguf)", ctx,
                          rb->kind);
        e->n_builds++;
    }
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(t, "drafters");
    if (ds && !cJSON_IsObject(ds)) return ds_err(err, errlen, "%s: \"drafters\" must be an object", ctx);
    if (parse_drafter(ds, "dspark", &e->dspark_d, ctx, err, errlen) ||
        parse_drafter(ds, "dflash", &e->dflash_d, ctx, err, errlen))
        return -1;
    e->dspark = e->dspark_d.id;
    e->dflash = e->dflash_d.id;
    return 0;
}

int registry_load_file(const char *path, char *err, size_t errlen) {
    err[0] = 0;
    cJSON *root = json_parse_file(path, err, errlen);
    if (!root) return -1;
    static registry_entry tmp[REGISTRY_MAX];
    int n = 0;
    int64_t ver;
    const cJSON *targets = cJSON_GetObjectItemCaseSensitive(root, "targets");
    if (!cJSON_IsObject(root)) {
        ds_err(err, errlen, "%s: expected a JSON object", path);
        goto fail;
    }
    if (json_req_int(root, "schema_version", 1, 1, &ver, path, err, errlen) < 0) goto fail;
    if (!cJSON_IsArray(targets)) {
        ds_err(err, errlen, "%s: missing \"targets\" list", path);
        goto fail;
    }
    for (const cJSON *t = targets->child; t; t = t->next) {
        if (n == REGISTRY_MAX) {
            ds_err(err, errlen, "%s: more than %d targets", path, REGISTRY_MAX);
            goto fail;
        }
        if (parse_entry(t, &tmp[n], n, path, err, errlen) != 0) goto fail;
        n++;
    }
    cJSON_Delete(g_reg.root);
    g_reg.root = root;
    memcpy(g_reg.e, tmp, sizeof tmp[0] * (size_t)n);
    g_reg.n = n;
    snprintf(g_reg.path, sizeof g_reg.path, "%s", path);
    g_reg.error[0] = 0;
    return 0;
fail:
    cJSON_Delete(root);
    return -1;
}

static void load_once(void) {
    char found[4096], path[4096];
    if (find_in_models("registry.json", 0, found, sizeof found)) {
        /* shown by doctor: without the build/<kind>/../../ detour */
        char *rp = realpath(found, NULL);
        snprintf(path, sizeof path, "%s", rp ? rp : found);
        free(rp);
    } else {
        snprintf(g_reg.error, sizeof g_reg.error,
                 "models/registry.json was not found beside the dspark binary (models/, ../../models/, "
                 "../share/dspark/models/ or ../models/)");
        return;
    }
    if (registry_load_file(path, g_reg.error, sizeof g_reg.error) != 0)
        snprintf(g_reg.path, sizeof g_reg.path, "%s", path);
}

const registry_entry *registry_entries(int *n) {
    pthread_once(&g_once, load_once);
    *n = g_reg.n;
    return g_reg.e;
}

void registry_source(const char **path, const char **error) {
    pthread_once(&g_once, load_once);
    *path = g_reg.path;
    *error = g_reg.error;
}

const registry_entry *registry_match(const model_config *c) {
    int n;
    const registry_entry *e = registry_entries(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(config_arch_name(c->arch), e[i].model_type) && fabs(c->rope_theta - e[i].rope_theta) <= 1.0 &&
            c->vocab_size == e[i].vocab && c->hidden_size == e[i].hidden && c->n_layers == e[i].layers)
            return &e[i];
    return NULL;
}

int registry_default_model(char *out, size_t n) {
    const char *env = getenv("DSPARK_MODEL");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return 1;
    }
    return registry_bundled_dir(out, n);
}

int registry_bundled_dir(char *out, size_t n) { return find_in_models(DSPARK_DEFAULT_MODEL, 1, out, n); }

int registry_find_local(const char *repo, const char *model_dir, char *out, size_t n) {
    return modelref_find_id(repo, MODELREF_DRAFTER, model_dir, out, n) == 1;
}

void registry_search_hint(const char *repo, char *out, size_t n) {
    const char *s = strrchr(repo, '/');
    snprintf(out, n,
             "download it with `dspark pull %s` (or into a folder of DSPARK_DRAFTERS or DSPARK_MODEL_DIRS as %s, "
             "or beside the model), or pass --drafter DIR; `dspark doctor` lists the places searched",
             repo, s ? s + 1 : repo);
}
