/* pull: see pull.h. */
#include "spec/pull.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hfcache.h"
#include "base/util.h"
#include "engine/config.h"
#include "spec/registry.h"

int pull_model(const char *spec, const pull_opts *o, char *snapshot, size_t n, int *drafter_failures, char *err,
               size_t errlen) {
    char id[256], rev[256];
    if (drafter_failures) *drafter_failures = 0;
    if (hf_parse_id(spec, id, sizeof id, rev, sizeof rev, err, errlen)) return -1;
    hub_opts ho = o->hub;
    if (rev[0]) ho.revision = rev;
    if (hub_pull(id, &ho, snapshot, n, NULL, err, errlen)) return -1;
    if (o->no_drafters) return 0;
    char cfgpath[4200];
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", snapshot);
    if (!ds_file_exists(cfgpath)) {
        if (o->hub.log)
            fprintf(o->hub.log, "dspark: %s: no config.json pulled, so no drafters looked up (add --include "
                                "config.json)\n", id);
        return 0;
    }
    model_config c;
    char cerr[512];
    if (config_load(&c, snapshot, cerr, sizeof cerr) != 0) {
        /* a config dspark cannot read has no registered drafter either */
        if (o->hub.log) fprintf(o->hub.log, "dspark: %s: no drafters looked up: %s\n", id, cerr);
        return 0;
    }
    const registry_entry *e = registry_match(&c);
    if (!e) {
        if (o->hub.log)
            fprintf(o->hub.log, "dspark: %s: no registered DSpark or DFlash drafter for this model (--mode lookup "
                                "works for any model)\n", id);
        return 0;
    }
    const char *drafters[2] = {e->dspark, e->dflash};
    for (int i = 0; i < 2; i++) {
        if (!drafters[i]) continue;
        hub_opts dopt = o->hub;
        dopt.revision = NULL;
        dopt.include = NULL;
        dopt.n_include = 0;
        char dsnap[4096], derr[2048];
        if (o->hub.log) fprintf(o->hub.log, "dspark: %s: the %s drafter of %s\n", id, i ? "DFlash" : "DSpark", e->target);
        if (hub_pull(drafters[i], &dopt, dsnap, sizeof dsnap, NULL, derr, sizeof derr) != 0) {
            if (drafter_failures) ++*drafter_failures;
            if (o->hub.log) fprintf(o->hub.log, "dspark: drafter %s not pulled: %s\n", drafters[i], derr);
        }
    }
    return 0;
}

/* dir's model: dir when it holds config.json, else its one .gguf file. */
static int model_in(const char *dir, char *out, size_t n) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (ds_file_exists(p)) {
        snprintf(out, n, "%s", dir);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    int found = 0;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".gguf")) {
            if (found++ == 0) snprintf(out, n, "%s/%s", dir, de->d_name);
        }
    }
    closedir(d);
    return found == 1 ? 0 : -1;
}

int pull_resolve(const char *arg, int with_drafters, const pull_opts *o, char *out, size_t n, char *err,
                 size_t errlen) {
    struct stat sb;
    if (stat(arg, &sb) == 0) {
        snprintf(out, n, "%s", arg);
        return 0;
    }
    char id[256], rev[256], root[4096], snap[4096];
    if (hf_parse_id(arg, id, sizeof id, rev, sizeof rev, err, errlen))
        return ds_err(err, errlen, "%s is neither a file or folder nor a Hugging Face model id (org/name)", arg);
    hf_cache_root(root, sizeof root);
    const char *r = rev[0] ? rev : o->hub.revision;
    if (hf_snapshot_dir(root, id, r, snap, sizeof snap) == 0 && model_in(snap, out, n) == 0) return 0;
    pull_opts po = *o;
    po.no_drafters = !with_drafters || o->no_drafters;
    if (pull_model(arg, &po, snap, sizeof snap, NULL, err, errlen)) return -1;
    if (model_in(snap, out, n) != 0)
        return ds_err(err, errlen, "%s was pulled into %s, but it holds no config.json and not exactly one .gguf file",
                      arg, snap);
    return 0;
}
