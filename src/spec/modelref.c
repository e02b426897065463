/* modelref: see modelref.h. */
#include "spec/modelref.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/hfcache.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "base/util.h"

/* ---- places ----------------------------------------------------------- */

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static const char *home(void) {
    const char *h = getenv("HOME");
    return h && *h ? h : ".";
}

/* "~" and "~/x" are the home folder; other paths as written */
static void expand_home(const char *in, char *out, size_t n) {
    if (in[0] == '~' && (in[1] == 0 || in[1] == '/')) snprintf(out, n, "%s%s", home(), in + 1);
    else snprintf(out, n, "%s", in);
}

/* the dspark cache (where calibration and drafters live) */
static void dspark_cache_root(char *out, size_t n) {
    const char *d = getenv("DSPARK_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME");
    if (d && *d) snprintf(out, n, "%s", d);
    else if (x && *x) snprintf(out, n, "%s/dspark", x);
    else snprintf(out, n, "%s/.cache/dspark", home());
}

static int add_place(modelref_place *out, int k, int cap, const char *what, const char *path, int drafters_only) {
    if (k >= cap || !*path) return k;
    out[k].what = what;
    snprintf(out[k].path, sizeof out[k].path, "%s", path);
    out[k].drafters_only = drafters_only;
    return k + 1;
}

/* each non-empty entry of a colon-separated list */
static int add_list(modelref_place *out, int k, int cap, const char *what, const char *list, int drafters_only) {
    if (!list || !*list) return k;
    char *dup = xstrdup(list), *save = NULL;
    for (char *d = strtok_r(dup, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char p[2048];
        expand_home(d, p, sizeof p);
        k = add_place(out, k, cap, what, p, drafters_only);
    }
    free(dup);
    return k;
}

/* the folder beside which a target's drafters may sit */
static void beside_root(const char *model_dir, char *out, size_t n) {
    if (is_file(model_dir)) {
        const char *slash = strrchr(model_dir, '/');
        if (slash) snprintf(out, n, "%.*s", (int)(slash - model_dir), model_dir);
        else snprintf(out, n, ".");
    } else {
        snprintf(out, n, "%s/..", model_dir);
    }
}

int modelref_places(modelref_kind kind, const char *model_dir, modelref_place *out, int cap) {
    int k = 0;
    char p[2048];
    k = add_list(out, k, cap, "DSPARK_MODEL_DIRS", getenv("DSPARK_MODEL_DIRS"), 0);
    if (kind == MODELREF_DRAFTER) {
        k = add_list(out, k, cap, "DSPARK_DRAFTERS", getenv("DSPARK_DRAFTERS"), 1);
        char root[1900];
        dspark_cache_root(root, sizeof root);
        snprintf(p, sizeof p, "%s/drafters", root);
        k = add_place(out, k, cap, "dspark cache", p, 1);
    }
    hf_cache_root(p, sizeof p);
    k = add_place(out, k, cap, "Hugging Face cache", p, 0);
    snprintf(p, sizeof p, "%s/.lmstudio/models", home());
    k = add_place(out, k, cap, "LM Studio", p, 0);
    snprintf(p, sizeof p, "%s/.cache/lm-studio/models", home());
    k = add_place(out, k, cap, "LM Studio", p, 0);
    if (kind == MODELREF_DRAFTER && model_dir && *model_dir) {
        beside_root(model_dir, p, sizeof p);
        k = add_place(out, k, cap, "beside the model", p, 1);
    }
    return k;
}

/* ---- one lookup ------------------------------------------------------- */

typedef struct {
    const char *id, *name; /* "ORG/NAME", "NAME" */
    const char *rev;       /* "" when none */
    const char *file;      /* the .gguf asked for, or NULL */
    modelref_kind kind;
    strbuf tried;          /* what was looked at, for a miss */
    char *out;
    size_t n;
    char *err;
    size_t errlen;
} look;

static int has_config(const char *dir) {
    char p[4200];
    return ds_path_join(p, sizeof p, dir, "config.json") == 0 && is_file(p);
}

static int ends_with_gguf(const char *s) {
    size_t n = strlen(s);
    return n > 5 && strcasecmp(s + n - 5, ".gguf") == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A split GGUF set's shards after the first (NAME-00002-of-00003.gguf):
   the loader opens a set from its first shard, so only that one counts. */
static int later_shard(const char *name) {
    const char *of = strstr(name, "-of-");
    if (!of || of - name < 6) return 0;
    const char *k = of - 5;
    for (int i = 0; i < 5; i++)
        if (k[i] < '0' || k[i] > '9') return 0;
    return k[-1] == '-' && strncmp(k, "00001", 5) != 0;
}

/* The GGUF model in dir: want (when named) or the only one there (vision
 * projectors, mmproj-*.gguf, are not models; a split set counts as its
 * first shard). 1 with the file in out, 0 when dir holds none (or not
 * want), -1 when several leave the choice open (err lists them, out holds
 * dir). */
static int pick_gguf(const char *dir, const char *want, const char *spec, char *out, size_t n, char *err,
                     size_t errlen) {
    char p[4600];
    if (want) {
        snprintf(p, sizeof p, "%s/%s", dir, want);
        if (!is_file(p)) return 0;
        snprintf(out, n, "%s", p);
        return 1;
    }
    DIR *dh = opendir(dir);
    if (!dh) return 0;
    char **names = NULL;
    int cnt = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        if (de->d_name[0] == '.' || !ends_with_gguf(de->d_name) || !strncasecmp(de->d_name, "mmproj", 6) ||
            later_shard(de->d_name))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (!is_file(p)) continue;
        names = xrealloc(names, sizeof *names * (size_t)(cnt + 1));
        names[cnt++] = xstrdup(de->d_name);
    }
    closedir(dh);
    int rc = 0;
    if (cnt == 1) {
        snprintf(out, n, "%s/%s", dir, names[0]);
        rc = 1;
    } else if (cnt > 1) {
        snprintf(out, n, "%s", dir);
        qsort(names, (size_t)cnt, sizeof *names, cmp_str);
        strbuf b = {0};
        for (int i = 0; i < cnt && i < 12; i++) sb_printf(&b, "%s%s", i ? ", " : "", names[i]);
        if (cnt > 12) sb_printf(&b, ", ... (%d in all)", cnt);
        ds_err(err, errlen, "%s holds %d GGUF files (%s): name one, as a path or as %s/FILE.gguf (e.g. %s/%s)", dir,
               cnt, sb_str(&b), spec, spec, names[0]);
        sb_free(&b);
        rc = -1;
    }
    for (int i = 0; i < cnt; i++) free(names[i]);
    free(names);
    return rc;
}

/* 1: dir is the checkpoint (out set); 0: not here; -1: error */
static int check_folder(look *L, const char *dir) {
    sb_printf(&L->tried, "\n    %s", dir);
    if (!is_dir(dir)) return 0;
    if (!L->file && has_config(dir)) {
        snprintf(L->out, L->n, "%s", dir);
        return 1;
    }
    if (L->kind != MODELREF_TARGET) return 0;
    return pick_gguf(dir, L->file, L->id, L->out, L->n, L->err, L->errlen);
}

/* the newest snapshot of a hub repo folder (by modification time), for a
   repo downloaded at a revision other than main */
static int newest_snapshot(const char *repodir, char *out, size_t n) {
    char snaps[4400];
    if ((size_t)snprintf(snaps, sizeof snaps, "%s/snapshots", repodir) >= sizeof snaps) return 0;
    DIR *dh = opendir(snaps);
    if (!dh) return 0;
    struct dirent *de;
    double best = -1;
    while ((de = readdir(dh)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char p[4700];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", snaps, de->d_name) >= n) continue;
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        double t = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        /* ties by name, so the choice does not depend on readdir's order */
        if (t > best || (t == best && strcmp(p, out) > 0)) {
            best = t;
            memcpy(out, p, strlen(p) + 1); /* fits: checked against n above */
        }
    }
    closedir(dh);
    return best >= 0;
}

/* a hub-layout root (ROOT/models--ORG--NAME) */
static int check_hub(look *L, const char *root) {
    char snap[4400], repodir[4300];
    if (hf_repo_dir(root, L->id, repodir, sizeof repodir) != 0) return 0;
    if (hf_snapshot_dir(root, L->id, L->rev, snap, sizeof snap) == 0) return check_folder(L, snap);
    if (!*L->rev && is_dir(repodir)) {
        snap[0] = 0;
        if (newest_snapshot(repodir, snap, sizeof snap)) return check_folder(L, snap);
    }
    sb_printf(&L->tried, "\n    %s%s%s", repodir, *L->rev ? " at revision " : "", L->rev);
    return 0;
}

static int search(look *L, const char *model_dir) {
    modelref_place pl[MODELREF_MAX_PLACES];
    int np = modelref_places(L->kind, model_dir, pl, MODELREF_MAX_PLACES);
    char p[4400];
    for (int i = 0; i < np; i++) {
        const char *what = pl[i].what, *root = pl[i].path;
        int rc = 0, hub = !strcmp(what, "Hugging Face cache"), model_dirs = !strcmp(what, "DSPARK_MODEL_DIRS");
        sb_printf(&L->tried, "\n  %s (%s):", what, root);
        if (hub) {
            rc = check_hub(L, root);
        } else if (*L->rev && !model_dirs) {
            sb_puts(&L->tried, " skipped (a plain folder has no revisions)");
        } else if (model_dirs) {
            if (!*L->rev) {
                snprintf(p, sizeof p, "%s/%s", root, L->id);
                rc = check_folder(L, p);
                if (!rc) {
                    snprintf(p, sizeof p, "%s/%s", root, L->name);
                    rc = check_folder(L, p);
                }
            }
            if (!rc) rc = check_hub(L, root);
        } else if (!strcmp(what, "LM Studio")) {
            snprintf(p, sizeof p, "%s/%s", root, L->id);
            rc = check_folder(L, p);
        } else { /* the drafter folders: DIR/NAME */
            snprintf(p, sizeof p, "%s/%s", root, L->name);
            rc = check_folder(L, p);
        }
        if (rc) return rc;
    }
    return 0;
}

/* Splits spec into id, revision and file: ORG/NAME[@REV][/FILE.gguf]. */
static int parse_spec(const char *spec, char *id, size_t idn, char *rev, size_t revn, char *file, size_t filen,
                      char *err, size_t errlen) {
    char head[1024];
    file[0] = 0;
    snprintf(head, sizeof head, "%s", spec);
    const char *first = strchr(spec, '/'), *last = strrchr(spec, '/');
    /* a trailing /FILE.gguf after the id (or after its revision) */
    if (ends_with_gguf(spec) && first && last != first) {
        snprintf(file, filen, "%s", last + 1);
        head[last - spec] = 0;
    }
    return hf_parse_id(head, id, idn, rev, revn, err, errlen);
}

static int lookup(const char *spec, modelref_kind kind, const char *model_dir, char *out, size_t n, char *err,
                  size_t errlen, int report) {
    char id[512], rev[512], file[512], e2[512];
    if (parse_spec(spec, id, sizeof id, rev, sizeof rev, file, sizeof file, e2, sizeof e2) != 0) {
        if (report) ds_err(err, errlen, "%s", e2);
        return -2;
    }
    look L = {.id = id, .name = strchr(id, '/') + 1, .rev = rev, .file = file[0] ? file : NULL, .kind = kind,
              .out = out, .n = n, .err = err, .errlen = errlen};
    int rc = search(&L, model_dir);
    if (rc == 0 && report) {
        ds_err(err, errlen,
               "%s \"%s\" is not a local folder or file, and was not found as a Hugging Face id; looked in:%s\n"
               "download it with `dspark pull %s` (it goes to the Hugging Face cache; HF_TOKEN for gated "
               "repos), set DSPARK_MODEL_DIRS to the folder that holds it, or pass its folder or .gguf file",
               kind == MODELREF_DRAFTER ? "drafter" : "model", spec, sb_str(&L.tried), spec);
    }
    sb_free(&L.tried);
    return rc;
}

int modelref_find_id(const char *id, modelref_kind kind, const char *model_dir, char *out, size_t n) {
    char err[1024];
    int rc = lookup(id, kind, model_dir, out, n, err, sizeof err, 0);
    return rc == -2 ? 0 : rc;
}

int modelref_resolve(const char *spec, modelref_kind kind, const char *model_dir, char *out, size_t n, char *err,
                     size_t errlen) {
    if (!spec || !*spec) return ds_err(err, errlen, "an empty model path or id");
    struct stat sb;
    if (stat(spec, &sb) == 0) {
        /* a local folder of GGUF files (no config.json) takes its one file */
        if (S_ISDIR(sb.st_mode) && kind == MODELREF_TARGET && !has_config(spec)) {
            int rc = pick_gguf(spec, NULL, spec, out, n, err, errlen);
            if (rc < 0) return -1;
            if (rc == 1) return 0;
        }
        if ((size_t)snprintf(out, n, "%s", spec) >= n) return ds_err(err, errlen, "path too long: %s", spec);
        return 0;
    }
    int rc = lookup(spec, kind, model_dir, out, n, err, errlen, 1);
    if (rc == -2) /* not an id either */
        return ds_err(err, errlen, "%s \"%s\": no such file or folder (and not a Hugging Face id of the form "
                                   "org/name[@revision])",
                      kind == MODELREF_DRAFTER ? "drafter" : "model", spec);
    return rc == 1 ? 0 : -1;
}

/* ---- remote code ------------------------------------------------------ */

int modelref_trust_remote_code(int trust_flag) {
    if (trust_flag) return 1;
    const char *e = getenv("DSPARK_TRUST_REMOTE_CODE");
    return e && (!strcmp(e, "1") || !strcasecmp(e, "true") || !strcasecmp(e, "yes"));
}

static int nonempty(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0;
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) return v->child != NULL;
    return 1;
}

/* the marker key in obj or in a *_config object inside it, or NULL */
static const char *marker(const cJSON *obj, char *where, size_t n) {
    static const char *keys[] = {"auto_map", "model_file"};
    for (int k = 0; k < 2; k++)
        if (nonempty(cJSON_GetObjectItemCaseSensitive(obj, keys[k]))) {
            snprintf(where, n, "\"%s\"", keys[k]);
            return keys[k];
        }
    for (const cJSON *c = obj->child; c; c = c->next) {
        size_t l = c->string ? strlen(c->string) : 0;
        if (!cJSON_IsObject(c) || l < 7 || strcmp(c->string + l - 7, "_config")) continue;
        for (int k = 0; k < 2; k++)
            if (nonempty(cJSON_GetObjectItemCaseSensitive(c, keys[k]))) {
                snprintf(where, n, "\"%s\" in \"%s\"", keys[k], c->string);
                return keys[k];
            }
    }
    return NULL;
}

int modelref_check_remote_code(const char *path, int trusted, char *err, size_t errlen) {
    if (trusted || !is_dir(path)) return 0;
    static const char *files[] = {"config.json", "tokenizer_config.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4400], e2[256], where[160];
        if (ds_path_join(p, sizeof p, path, files[i]) != 0 || !is_file(p)) continue;
        cJSON *j = json_parse_file(p, e2, sizeof e2);
        if (!j) continue; /* the loader reports a malformed file in its own words */
        const char *m = cJSON_IsObject(j) ? marker(j, where, sizeof where) : NULL;
        cJSON_Delete(j);
        if (m)
            return ds_err(err, errlen,
                          "%s has %s: this checkpoint ships Python code of its own for transformers to import. "
                          "dspark never runs that code (it implements each architecture itself), so it refuses such "
                          "a checkpoint unless you accept it: pass --trust-remote-code or set "
                          "DSPARK_TRUST_REMOTE_CODE=1 (it then loads only if its architecture is one dspark "
                          "implements)",
                          p, where);
    }
    return 0;
}
