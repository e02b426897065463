/* registry: see registry.h. */
#include "spec/registry.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hfcache.h"
#include "base/util.h"

static int has_config(const char *dir) {
    char p[4096];
    return ds_path_join(p, sizeof p, dir, "config.json") == 0 && ds_file_exists(p);
}

static int try_dir(const char *dir, char *out, size_t n) {
    if (!has_config(dir)) return 0;
    snprintf(out, n, "%s", dir);
    return 1;
}

static const struct {
    registry_entry e;
    int vocab, hidden, layers;
} ENTRIES[] = {
    {{"Qwen3-4B", "deepseek-ai/dspark_qwen3_4b_block7", "z-lab/Qwen3-4B-DFlash-b16"}, 151936, 2560, 36},
    {{"Qwen3-8B", "deepseek-ai/dspark_qwen3_8b_block7", "z-lab/Qwen3-8B-DFlash-b16"}, 151936, 4096, 36},
    {{"Qwen3-14B", "deepseek-ai/dspark_qwen3_14b_block7", NULL}, 151936, 5120, 40},
    /* the bundled default (models/): its drafters sit beside it */
    {{DSPARK_DEFAULT_MODEL, "dspark/" DSPARK_DEFAULT_MODEL "-dspark", "dspark/" DSPARK_DEFAULT_MODEL "-dflash"},
     6144, 256, 6},
};

const registry_entry *registry_match(const model_config *c) {
    if (c->arch != ARCH_QWEN3 || fabs(c->rope_theta - 1e6) > 1.0) return NULL;
    for (size_t i = 0; i < sizeof ENTRIES / sizeof ENTRIES[0]; i++)
        if (c->vocab_size == ENTRIES[i].vocab && c->hidden_size == ENTRIES[i].hidden &&
            c->n_layers == ENTRIES[i].layers)
            return &ENTRIES[i].e;
    return NULL;
}

int registry_default_model(char *out, size_t n) {
    const char *env = getenv("DSPARK_MODEL");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return 1;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 0;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = 0;
    /* the source tree (binary at the root, or a build/<kind>/ binary), then
       an installed prefix */
    const char *rel[] = {"models", "../../models", "../share/dspark/models", "../models"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char dir[4600];
        snprintf(dir, sizeof dir, "%s/%s/%s", exe, rel[i], DSPARK_DEFAULT_MODEL);
        if (try_dir(dir, out, n)) return 1;
    }
    return 0;
}

static const char *base_name(const char *repo) {
    const char *s = strrchr(repo, '/');
    return s ? s + 1 : repo;
}

static void cache_root(char *out, size_t n) {
    const char *d = getenv("DSPARK_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (d && *d) snprintf(out, n, "%s", d);
    else if (x && *x) snprintf(out, n, "%s/dspark", x);
    else snprintf(out, n, "%s/.cache/dspark", h ? h : ".");
}

int registry_find_local(const char *repo, const char *model_dir, char *out, size_t n) {
    char buf[4096];
    const char *name = base_name(repo);
    const char *list = getenv("DSPARK_DRAFTERS");
    if (list && *list) {
        char *dup = xstrdup(list), *save = NULL;
        int found = 0;
        for (char *d = strtok_r(dup, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
            snprintf(buf, sizeof buf, "%s/%s", d, name);
            found = try_dir(buf, out, n);
        }
        free(dup);
        if (found) return 1;
    }
    char root[2048];
    cache_root(root, sizeof root);
    snprintf(buf, sizeof buf, "%s/drafters/%s", root, name);
    if (try_dir(buf, out, n)) return 1;
    /* the hub cache: its main revision, else any snapshot */
    hf_cache_root(root, sizeof root);
    if (hf_snapshot_dir(root, repo, NULL, buf, sizeof buf) == 0 && try_dir(buf, out, n)) return 1;
    char repodir[3000];
    if (hf_repo_dir(root, repo, repodir, sizeof repodir) == 0) {
        snprintf(buf, sizeof buf, "%s/snapshots", repodir);
        DIR *dh = opendir(buf);
        if (dh) {
            struct dirent *de;
            int found = 0;
            while (!found && (de = readdir(dh)) != NULL) {
                if (de->d_name[0] == '.') continue;
                char snap[4600];
                snprintf(snap, sizeof snap, "%s/%s", buf, de->d_name);
                found = try_dir(snap, out, n);
            }
            closedir(dh);
            if (found) return 1;
        }
    }
    if (model_dir) {
        /* a folder's siblings; a lone file's (a .gguf) are in its folder */
        struct stat sb;
        if (stat(model_dir, &sb) == 0 && S_ISREG(sb.st_mode)) {
            const char *slash = strrchr(model_dir, '/');
            if (slash) snprintf(buf, sizeof buf, "%.*s/%s", (int)(slash - model_dir), model_dir, name);
            else snprintf(buf, sizeof buf, "%s", name);
        } else {
            snprintf(buf, sizeof buf, "%s/../%s", model_dir, name);
        }
        if (try_dir(buf, out, n)) return 1;
    }
    return 0;
}

void registry_search_hint(const char *repo, char *out, size_t n) {
    char root[2048];
    cache_root(root, sizeof root);
    snprintf(out, n, "download %s into %s/drafters/%s (or the Hugging Face cache, or a directory listed in "
                     "DSPARK_DRAFTERS, or beside the model), or pass --drafter DIR",
             repo, root, base_name(repo));
}
