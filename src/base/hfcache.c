/* hfcache: see hfcache.h. */
#include "base/hfcache.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"

void hf_cache_root(char *out, size_t n) {
    const char *c = getenv("HF_HUB_CACHE"), *hf = getenv("HF_HOME"), *x = getenv("XDG_CACHE_HOME"),
               *h = getenv("HOME");
    if (c && *c) snprintf(out, n, "%s", c);
    else if (hf && *hf) snprintf(out, n, "%s/hub", hf);
    else if (x && *x) snprintf(out, n, "%s/huggingface/hub", x);
    else snprintf(out, n, "%s/.cache/huggingface/hub", h && *h ? h : ".");
}

static int part_ok(const char *s, size_t len) {
    if (len == 0 || s[0] == '.') return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return 0;
    return 1;
}

int hf_parse_id(const char *spec, char *id, size_t idn, char *rev, size_t revn, char *err, size_t errlen) {
    const char *at = strchr(spec, '@');
    size_t idlen = at ? (size_t)(at - spec) : strlen(spec);
    const char *slash = memchr(spec, '/', idlen);
    if (!slash || !part_ok(spec, (size_t)(slash - spec)) || !part_ok(slash + 1, idlen - (size_t)(slash - spec) - 1))
        return ds_err(err, errlen, "\"%s\" is not a model id of the form org/name[@revision]", spec);
    if (idlen >= idn) return ds_err(err, errlen, "model id \"%.*s\" is too long", (int)idlen, spec);
    memcpy(id, spec, idlen);
    id[idlen] = 0;
    const char *r = at ? at + 1 : "";
    if (at) {
        if (!*r || *r == '/' || strstr(r, "..")) return ds_err(err, errlen, "revision \"%s\" of %s is not valid", r, id);
        for (const char *p = r; *p; p++)
            if (!isgraph((unsigned char)*p)) return ds_err(err, errlen, "revision \"%s\" of %s is not valid", r, id);
    }
    if (strlen(r) >= revn) return ds_err(err, errlen, "revision \"%s\" is too long", r);
    snprintf(rev, revn, "%s", r);
    return 0;
}

int hf_repo_dir(const char *root, const char *id, char *out, size_t n) {
    const char *slash = strchr(id, '/');
    if (!slash) return -1;
    int w = snprintf(out, n, "%s/models--%.*s--%s", root, (int)(slash - id), id, slash + 1);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

int hf_is_commit(const char *s) {
    size_t i = 0;
    for (; s[i]; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return 0;
    return i == 40;
}

int hf_snapshot_dir(const char *root, const char *id, const char *rev, char *out, size_t n) {
    char repo[4096], commit[128];
    if (hf_repo_dir(root, id, repo, sizeof repo)) return -1;
    if (!rev || !*rev) rev = "main";
    if (hf_is_commit(rev)) {
        snprintf(commit, sizeof commit, "%s", rev);
    } else {
        char ref[4300];
        snprintf(ref, sizeof ref, "%s/refs/%s", repo, rev);
        size_t len = 0;
        char *txt = ds_read_file(ref, &len, NULL, 0);
        if (!txt) {
            snprintf(out, n, "%s", ref);
            return -1;
        }
        while (len && isspace((unsigned char)txt[len - 1])) txt[--len] = 0;
        int ok = hf_is_commit(txt);
        if (ok) snprintf(commit, sizeof commit, "%s", txt);
        free(txt);
        if (!ok) {
            snprintf(out, n, "%s", ref);
            return -1;
        }
    }
    int w = snprintf(out, n, "%s/snapshots/%s", repo, commit);
    if (w < 0 || (size_t)w >= n) return -1;
    struct stat sb;
    return stat(out, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -1;
}

static int fits(int w, size_t n) { return w < 0 || (size_t)w >= n ? -1 : 0; }

int hf_blob_path(const char *repo, const char *etag, const char *suffix, char *out, size_t n) {
    return fits(snprintf(out, n, "%s/blobs/%s%s", repo, etag, suffix ? suffix : ""), n);
}

int hf_pointer_path(const char *repo, const char *commit, const char *file, char *out, size_t n) {
    return fits(snprintf(out, n, "%s/snapshots/%s/%s", repo, commit, file), n);
}

int hf_ref_path(const char *repo, const char *rev, char *out, size_t n) {
    return fits(snprintf(out, n, "%s/refs/%s", repo, rev), n);
}

int hf_lock_path(const char *root, const char *id, const char *etag, char *out, size_t n) {
    const char *slash = strchr(id, '/');
    if (!slash) return -1;
    return fits(snprintf(out, n, "%s/.locks/models--%.*s--%s/%s.lock", root, (int)(slash - id), id, slash + 1, etag),
                n);
}

int hf_blob_link(const char *file, const char *etag, char *out, size_t n) {
    /* snapshots/COMMIT/ is two levels below the repo; each folder of file one more */
    size_t w = 0;
    int depth = 2;
    for (const char *p = file; *p; p++) depth += *p == '/';
    for (int i = 0; i < depth; i++) {
        if (w + 3 >= n) return -1;
        memcpy(out + w, "../", 3);
        w += 3;
    }
    return fits(snprintf(out + w, n - w, "blobs/%s", etag), n - w);
}

void hf_token_path(char *out, size_t n) {
    const char *t = getenv("HF_TOKEN_PATH"), *hf = getenv("HF_HOME"), *x = getenv("XDG_CACHE_HOME"),
               *h = getenv("HOME");
    if (t && *t) snprintf(out, n, "%s", t);
    else if (hf && *hf) snprintf(out, n, "%s/token", hf);
    else if (x && *x) snprintf(out, n, "%s/huggingface/token", x);
    else snprintf(out, n, "%s/.cache/huggingface/token", h && *h ? h : ".");
}
