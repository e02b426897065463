/* hub: see hub.h. One metadata request, then a few worker threads (one
 * libcurl easy handle each) take files from a shared list; the calling
 * thread draws the progress until they finish. */
#include "base/hub.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <openssl/evp.h>

#include "base/hfcache.h"
#include "base/strbuf.h"
#include "base/util.h"

#define HUB_MAX_JOBS 8

/* ---- small helpers ---- */

static void fmt_bytes(long long b, char *out, size_t n) {
    const char *u[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1000 && i < 4) v /= 1000, i++;
    if (i == 0) snprintf(out, n, "%lld B", b);
    else snprintf(out, n, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, u[i]);
}

static void fmt_eta(double s, char *out, size_t n) {
    if (!(s >= 0) || s > 360000) {
        snprintf(out, n, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, n, "%ld:%02ld", t / 60, t % 60);
}

/* mkdir -p of path's folders (and of path itself when whole is set). */
static int mkdirs(const char *path, int whole) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    if (!whole) {
        char *s = strrchr(tmp, '/');
        if (!s) return 0;
        *s = 0;
    }
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}

static void endpoint(char *out, size_t n) {
    const char *e = getenv("HF_ENDPOINT");
    snprintf(out, n, "%s", e && *e ? e : "https://huggingface.co");
    size_t len = strlen(out);
    while (len && out[len - 1] == '/') out[--len] = 0;
}

/* $HF_TOKEN, else the saved login token; "" when neither. */
static void read_token(char *out, size_t n) {
    const char *t = getenv("HF_TOKEN");
    out[0] = 0;
    if (t && *t) {
        snprintf(out, n, "%s", t);
        return;
    }
    char path[PATH_MAX];
    hf_token_path(path, sizeof path);
    size_t len = 0;
    char *txt = ds_read_file(path, &len, NULL, 0);
    if (!txt) return;
    while (len && isspace((unsigned char)txt[len - 1])) txt[--len] = 0;
    const char *s = txt;
    while (isspace((unsigned char)*s)) s++;
    snprintf(out, n, "%s", s);
    free(txt);
}

/* A repo path is taken only when it stays inside the snapshot: relative,
 * no empty, "." or ".." part, printable. */
static int path_ok(const char *p) {
    if (!*p || *p == '/' || strlen(p) > 1000) return 0;
    for (const char *s = p; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == '\\') return 0;
    const char *seg = p;
    for (;;) {
        const char *e = strchr(seg, '/');
        size_t len = e ? (size_t)(e - seg) : strlen(seg);
        if (len == 0 || (len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.')) return 0;
        if (!e) return 1;
        seg = e + 1;
    }
}

static int is_hex(const char *s, size_t len) {
    if (strlen(s) != len) return 0;
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return 0;
    return 1;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int hub_wanted(const char *path, int has_safetensors) {
    if (strchr(path, '/')) return 0;
    static const char *const names[] = {"config.json",        "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                                        "vocab.json",         "merges.txt",             "added_tokens.json",
                                        "chat_template.jinja", "chat_template.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(path, names[i])) return 1;
    if (ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json")) return 1;
    return !has_safetensors && ends_with(path, ".gguf");
}

int hub_file_digest(const char *path, int lfs, char *hex, size_t n, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ds_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return ds_err(err, errlen, "cannot stat %s: %s", path, strerror(errno));
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || !EVP_DigestInit_ex(ctx, lfs ? EVP_sha256() : EVP_sha1(), NULL)) {
        EVP_MD_CTX_free(ctx);
        fclose(f);
        return ds_err(err, errlen, "libcrypto could not start a digest");
    }
    if (!lfs) { /* git's blob header */
        char head[64];
        int hl = snprintf(head, sizeof head, "blob %lld", (long long)sb.st_size);
        EVP_DigestUpdate(ctx, head, (size_t)hl + 1);
    }
    size_t cap = 1 << 20, got;
    unsigned char *buf = xmalloc(cap);
    int rerr = 0;
    while ((got = fread(buf, 1, cap, f)) > 0) EVP_DigestUpdate(ctx, buf, got);
    rerr = ferror(f);
    free(buf);
    fclose(f);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (rerr) return ds_err(err, errlen, "error reading %s", path);
    if (n < 2 * (size_t)mdlen + 1) return ds_err(err, errlen, "digest buffer too small");
    for (unsigned i = 0; i < mdlen; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/* ---- HTTP ---- */

typedef struct {
    long code;
    char xcode[64], xmsg[300];
} http_meta;

static size_t on_header(char *buf, size_t sz, size_t nm, void *ud) {
    http_meta *m = ud;
    size_t len = sz * nm;
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), buf);
    size_t l = strlen(line);
    while (l && (line[l - 1] == '\r' || line[l - 1] == '\n')) line[--l] = 0;
    if (!strncmp(line, "HTTP/", 5)) { /* a new response (after a redirect): its own error headers */
        m->xcode[0] = m->xmsg[0] = 0;
        return len;
    }
    char *colon = strchr(line, ':');
    if (!colon) return len;
    *colon = 0;
    const char *v = colon + 1;
    while (*v == ' ') v++;
    if (!strcasecmp(line, "X-Error-Code")) snprintf(m->xcode, sizeof m->xcode, "%s", v);
    else if (!strcasecmp(line, "X-Error-Message")) snprintf(m->xmsg, sizeof m->xmsg, "%s", v);
    return len;
}

static CURL *http_new(const char *token, struct curl_slist **hdrs, http_meta *m) {
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    *hdrs = NULL;
    if (token && *token) {
        char h[4200];
        snprintf(h, sizeof h, "Authorization: Bearer %s", token);
        *hdrs = curl_slist_append(*hdrs, h);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "dspark (libcurl)");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a transfer that stalls (under 1 byte/s for 60 s) counts as dropped */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, m);
    return c;
}

/* Failures worth another attempt: the connection, or the server's
 * temporary trouble (5xx, 429). */
static int retryable(CURLcode rc, long code) {
    if (rc == CURLE_HTTP_RETURNED_ERROR) return code >= 500 || code == 429;
    return rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
           rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_COULDNT_CONNECT || rc == CURLE_GOT_NOTHING ||
           rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM || rc == CURLE_SSL_CONNECT_ERROR;
}

/* The message for an HTTP error status from the hub. file is NULL for the
 * metadata request. */
static int http_error(const http_meta *m, const char *ep, const char *id, const char *rev, const char *file,
                      int have_token, char *err, size_t errlen) {
    const char *tok = have_token ? "the token in HF_TOKEN (or the saved login) was refused or lacks access"
                                 : "HF_TOKEN is not set";
    char hint[600] = "";
    if (m->xmsg[0]) snprintf(hint, sizeof hint, " (the hub says: %s)", m->xmsg);
    if (m->code == 401 || m->code == 403) {
        if (!strcmp(m->xcode, "GatedRepo") || m->code == 403)
            return ds_err(err, errlen,
                          "%s is gated (HTTP %ld): accept its license on %s/%s while logged in, then set HF_TOKEN "
                          "to a read token of that account; %s%s",
                          id, m->code, ep, id, tok, hint);
        return ds_err(err, errlen,
                      "%s: access denied (HTTP 401): the repository does not exist, or it is private or gated; "
                      "check the id on %s/%s, and for a private or gated model set HF_TOKEN to a read token of an "
                      "account with access (and accept the license on the model page); %s%s",
                      id, ep, id, tok, hint);
    }
    if (m->code == 404) {
        if (!strcmp(m->xcode, "RevisionNotFound"))
            return ds_err(err, errlen, "revision \"%s\" of %s not found at %s (HTTP 404)%s", rev, id, ep, hint);
        if (file && !strcmp(m->xcode, "EntryNotFound"))
            return ds_err(err, errlen, "%s: file %s not found at that revision (HTTP 404)%s", id, file, hint);
        if (file) return ds_err(err, errlen, "%s: %s not found at %s (HTTP 404)%s", id, file, ep, hint);
        if (!strcmp(m->xcode, "RepoNotFound"))
            return ds_err(err, errlen, "repository %s not found at %s (HTTP 404)%s", id, ep, hint);
        return ds_err(err, errlen, "repository %s or its revision \"%s\" not found at %s (HTTP 404)%s", id, rev, ep,
                      hint);
    }
    if (m->code == 429)
        return ds_err(err, errlen, "%s: the hub is rate-limiting requests (HTTP 429); wait and pull again%s", id,
                      hint);
    return ds_err(err, errlen, "%s: HTTP %ld from %s%s%s%s", id, m->code, ep, file ? " for " : "", file ? file : "",
                  hint);
}

static size_t on_body(char *buf, size_t sz, size_t nm, void *ud) {
    strbuf *b = ud;
    if (b->n > ((size_t)64 << 20)) return 0; /* a listing is small; this is not the hub */
    sb_append(b, buf, sz * nm);
    return sz * nm;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The retry policy both requests share: o->retries more tries (default
 * 5, negative none), two at most after a refused connection (seldom a
 * blip), waits from o->retry_ms (default 1 s) doubling up to 30 s. */
typedef struct {
    int retries;
    long wait_ms;
} backoff;

static backoff backoff_of(const hub_opts *o) {
    return (backoff){o->retries < 0 ? 0 : o->retries ? o->retries : 5, o->retry_ms > 0 ? o->retry_ms : 1000};
}

/* 1 when attempt (0-based) was the last one allowed after cr */
static int backoff_spent(const backoff *b, int attempt, CURLcode cr) {
    return attempt >= (cr == CURLE_COULDNT_CONNECT && b->retries > 2 ? 2 : b->retries);
}

static void backoff_wait(backoff *b) {
    sleep_ms(b->wait_ms);
    if (b->wait_ms < 30000) b->wait_ms *= 2;
}

/* ---- the file list ---- */

typedef struct {
    char *path;
    char etag[72];
    long long size;
    int lfs;
} hfile;

static void free_files(hfile *f, int n) {
    for (int i = 0; i < n; i++) free(f[i].path);
    free(f);
}

/* Reads the listing into commit and files (all of the repo). */
static int parse_listing(const char *txt, const char *id, char *commit, size_t cn, hfile **out, int *nout,
                         char *err, size_t errlen) {
    cJSON *j = cJSON_Parse(txt);
    if (!j) return ds_err(err, errlen, "%s: the hub's answer is not JSON", id);
    int rc = -1;
    hfile *fs = NULL;
    int n = 0;
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha");
    const cJSON *sib = cJSON_GetObjectItemCaseSensitive(j, "siblings");
    if (!cJSON_IsString(sha) || !hf_is_commit(sha->valuestring)) {
        ds_err(err, errlen, "%s: the hub's answer has no commit (\"sha\")", id);
        goto done;
    }
    snprintf(commit, cn, "%s", sha->valuestring);
    if (!cJSON_IsArray(sib)) {
        ds_err(err, errlen, "%s: the hub's answer has no file list (\"siblings\")", id);
        goto done;
    }
    fs = xcalloc((size_t)cJSON_GetArraySize(sib) + 1, sizeof *fs);
    const cJSON *s;
    cJSON_ArrayForEach(s, sib) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "rfilename");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(s, "size");
        const cJSON *blob = cJSON_GetObjectItemCaseSensitive(s, "blobId");
        const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(s, "lfs");
        if (!cJSON_IsString(name) || !path_ok(name->valuestring)) {
            ds_err(err, errlen, "%s: the hub lists a file with a bad name (%s)",
                   id, cJSON_IsString(name) ? name->valuestring : "none");
            goto done;
        }
        hfile *f = &fs[n];
        if (cJSON_IsObject(lfs)) {
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(lfs, "sha256");
            const cJSON *ls = cJSON_GetObjectItemCaseSensitive(lfs, "size");
            if (!cJSON_IsString(h) || !is_hex(h->valuestring, 64) || !cJSON_IsNumber(ls) || ls->valuedouble < 0) {
                ds_err(err, errlen, "%s: the hub's entry for %s has no valid lfs sha256 and size", id,
                       name->valuestring);
                goto done;
            }
            f->lfs = 1;
            snprintf(f->etag, sizeof f->etag, "%s", h->valuestring);
            f->size = (long long)ls->valuedouble;
        } else {
            if (!cJSON_IsString(blob) || !is_hex(blob->valuestring, 40) || !cJSON_IsNumber(size) ||
                size->valuedouble < 0) {
                ds_err(err, errlen,
                       "%s: the hub's entry for %s has no blob id and size (does %s answer ?blobs=true like the "
                       "Hugging Face hub?)",
                       id, name->valuestring, "the endpoint");
                goto done;
            }
            snprintf(f->etag, sizeof f->etag, "%s", blob->valuestring);
            f->size = (long long)size->valuedouble;
        }
        f->path = xstrdup(name->valuestring);
        n++;
    }
    *out = fs;
    *nout = n;
    fs = NULL;
    rc = 0;
done:
    if (fs) free_files(fs, n);
    cJSON_Delete(j);
    return rc;
}

/* Keeps the files o selects (moved to the front); their count, or -1. */
static int select_files(hfile *fs, int n, const hub_opts *o, const char *id, char *err, size_t errlen) {
    int has_st = 0, kept = 0;
    for (int i = 0; i < n; i++) has_st |= ends_with(fs[i].path, ".safetensors") && !strchr(fs[i].path, '/');
    for (int i = 0; i < n; i++) {
        int want = 0;
        if (o->n_include) {
            for (int k = 0; k < o->n_include && !want; k++) want = fnmatch(o->include[k], fs[i].path, 0) == 0;
        } else {
            want = hub_wanted(fs[i].path, has_st);
        }
        if (want) {
            hfile t = fs[kept];
            fs[kept++] = fs[i];
            fs[i] = t;
        }
    }
    if (!o->n_include && !has_st) {
        int ng = 0;
        char names[600] = "";
        for (int i = 0; i < kept; i++)
            if (ends_with(fs[i].path, ".gguf")) {
                size_t l = strlen(names);
                if (ng++ < 6) snprintf(names + l, sizeof names - l, "%s%s", ng > 1 ? ", " : "", fs[i].path);
            }
        if (ng > 1)
            return ds_err(err, errlen,
                          "%s has no safetensors weights and %d GGUF files (%s%s): choose one with --include, "
                          "e.g. --include '*Q4_K_M*'",
                          id, ng, names, ng > 6 ? ", ..." : "");
        if (ng == 0)
            return ds_err(err, errlen,
                          "%s has no model weights dspark can run (no top-level *.safetensors or *.gguf); "
                          "--include GLOB picks files by name",
                          id);
    }
    if (kept == 0) return ds_err(err, errlen, "no file of %s matches the --include patterns", id);
    return kept;
}

/* ---- the pull ---- */

typedef struct {
    const char *name;
    long long done, total, start_bytes;
    double t0;
    int active;
} slot_state;

typedef struct {
    const hub_opts *o;
    const char *id, *rev, *root;
    char ep[1024], token[4096], repo[PATH_MAX], commit[48];
    hfile *files;
    int nfiles, nall, next, running, fetched, ndone;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    volatile int abort;
    char err[2048];
    long long total, done_bytes, received; /* done_bytes: complete files, cached ones included */
    slot_state slot[HUB_MAX_JOBS];
    FILE *log;
    int tty, lines_drawn;
    double t0, last_line;
} pull_job;

typedef struct {
    pull_job *j;
    int slot;
    FILE *fp;
    long long off;       /* bytes already in the .incomplete file */
    long long counted;   /* of this transfer's bytes, those added to j->received */
    int first, write_errno;
    CURL *c;
} xfer;

static size_t on_file_data(char *buf, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t len = sz * nm;
    if (x->first) {
        x->first = 0;
        long code = 0;
        curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code);
        if (x->off > 0 && code != 206) { /* the range was ignored: the whole file comes */
            if (ftruncate(fileno(x->fp), 0) != 0) {
                x->write_errno = errno;
                return 0;
            }
            pthread_mutex_lock(&x->j->mu);
            x->j->slot[x->slot].start_bytes -= x->off;
            pthread_mutex_unlock(&x->j->mu);
            x->off = 0;
        }
        if (fseeko(x->fp, x->off, SEEK_SET) != 0) {
            x->write_errno = errno;
            return 0;
        }
    }
    if (fwrite(buf, 1, len, x->fp) != len) {
        x->write_errno = errno ? errno : EIO;
        return 0;
    }
    return len;
}

static int on_file_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    xfer *x = ud;
    pthread_mutex_lock(&x->j->mu);
    x->j->slot[x->slot].done = x->off + (long long)dlnow;
    x->j->received += (long long)dlnow - x->counted;
    x->counted = (long long)dlnow;
    pthread_mutex_unlock(&x->j->mu);
    return x->j->abort ? 1 : 0;
}

static long long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (long long)sb.st_size : -1;
}

static long long free_bytes(const char *dir) {
    struct statvfs v;
    return statvfs(dir, &v) == 0 ? (long long)v.f_bavail * (long long)v.f_frsize : -1;
}

static void url_path(CURL *c, const char *path, strbuf *out) {
    /* each part escaped, the slashes kept */
    const char *seg = path;
    for (;;) {
        const char *e = strchr(seg, '/');
        int len = e ? (int)(e - seg) : (int)strlen(seg);
        char *q = curl_easy_escape(c, seg, len);
        sb_puts(out, q ? q : "");
        curl_free(q);
        if (!e) break;
        sb_puts(out, "/");
        seg = e + 1;
    }
}

/* Downloads f into blobs/ETAG.incomplete (resuming it), retrying dropped
 * connections; 0 when the file there has f's size. */
static int download(pull_job *j, int slot, const hfile *f, const char *inc, char *err, size_t errlen) {
    const hub_opts *o = j->o;
    backoff bo = backoff_of(o);
    http_meta m;
    struct curl_slist *hdrs;
    CURL *c = http_new(j->token, &hdrs, &m);
    if (!c) return ds_err(err, errlen, "libcurl could not start");
    strbuf url = {0};
    sb_printf(&url, "%s/%s/resolve/%s/", j->ep, j->id, j->commit);
    url_path(c, f->path, &url);
    curl_easy_setopt(c, CURLOPT_URL, sb_str(&url));
    int rc = -1;
    for (int attempt = 0;; attempt++) {
        long long off = file_size(inc);
        if (off > f->size) { /* not this file's prefix */
            unlink(inc);
            off = -1;
        }
        if (off == f->size) {
            rc = 0;
            break;
        }
        FILE *fp = fopen(inc, off > 0 ? "r+b" : "wb");
        if (!fp) {
            ds_err(err, errlen, "cannot write %s: %s", inc, strerror(errno));
            break;
        }
        if (off < 0) off = 0;
        xfer x = {.j = j, .slot = slot, .fp = fp, .off = off, .first = 1, .c = c};
        pthread_mutex_lock(&j->mu);
        j->slot[slot].done = j->slot[slot].start_bytes = off;
        pthread_mutex_unlock(&j->mu);
        char range[64];
        snprintf(range, sizeof range, "%lld-", off);
        curl_easy_setopt(c, CURLOPT_RANGE, off > 0 ? range : NULL);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_file_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_file_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        memset(&m, 0, sizeof m);
        CURLcode cr = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &m.code);
        if (fflush(fp) != 0 && !x.write_errno) x.write_errno = errno;
        if (fclose(fp) != 0 && !x.write_errno) x.write_errno = errno;
        curl_off_t got = 0;
        curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &got);
        pthread_mutex_lock(&j->mu);
        j->received += (long long)got - x.counted; /* what the last progress call did not see */
        pthread_mutex_unlock(&j->mu);
        long long now = file_size(inc);
        if (x.write_errno) {
            char need[32], have[32];
            long long fb = free_bytes(j->repo);
            fmt_bytes(f->size - (now > 0 ? now : 0), need, sizeof need);
            fmt_bytes(fb > 0 ? fb : 0, have, sizeof have);
            if (x.write_errno == ENOSPC || x.write_errno == EDQUOT)
                ds_err(err, errlen,
                       "disk full writing %s of %s into %s: %s more needed for this file, %s free; free some space "
                       "and pull again (the partial file is kept and resumed)",
                       f->path, j->id, j->repo, need, have);
            else ds_err(err, errlen, "cannot write %s: %s", inc, strerror(x.write_errno));
            break;
        }
        if (j->abort) {
            ds_err(err, errlen, "stopped");
            break;
        }
        if (cr == CURLE_OK && now == f->size) {
            rc = 0;
            break;
        }
        if (cr == CURLE_HTTP_RETURNED_ERROR && !retryable(cr, m.code)) {
            http_error(&m, j->ep, j->id, j->rev, f->path, j->token[0] != 0, err, errlen);
            break;
        }
        if (cr == CURLE_COULDNT_RESOLVE_HOST || cr == CURLE_COULDNT_RESOLVE_PROXY) {
            ds_err(err, errlen, "cannot resolve the host of %s (%s): check the network or HF_ENDPOINT", j->ep,
                   curl_easy_strerror(cr));
            break;
        }
        if (cr != CURLE_OK && !retryable(cr, m.code)) {
            ds_err(err, errlen, "downloading %s of %s failed: %s", f->path, j->id, curl_easy_strerror(cr));
            break;
        }
        /* dropped (or a short body without an error): resume from what arrived */
        if (backoff_spent(&bo, attempt, cr)) {
            char have[32], all[32];
            fmt_bytes(now > 0 ? now : 0, have, sizeof have);
            fmt_bytes(f->size, all, sizeof all);
            ds_err(err, errlen,
                   "the connection to %s dropped while downloading %s of %s (%s of %s received; %s) after %d "
                   "attempt%s: pull again to resume from there",
                   j->ep, f->path, j->id, have, all,
                   cr == CURLE_OK ? "the body ended early"
                   : cr == CURLE_HTTP_RETURNED_ERROR ? "the server answered with an error"
                                                     : curl_easy_strerror(cr),
                   attempt + 1, attempt ? "s" : "");
            break;
        }
        if (j->log && !j->tty)
            fprintf(j->log, "dspark: %s: %s: connection dropped (%s), retrying in %.1f s\n", j->id, f->path,
                    curl_easy_strerror(cr), bo.wait_ms / 1000.0);
        backoff_wait(&bo);
    }
    sb_free(&url);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return rc;
}

/* Puts snapshots/COMMIT/PATH in place as a link to blobs/ETAG (atomically:
 * a new link renamed over the old name). */
static int place_link(pull_job *j, const hfile *f, char *err, size_t errlen) {
    char ptr[PATH_MAX], link[PATH_MAX], cur[PATH_MAX], tmp[PATH_MAX + 32];
    if (hf_pointer_path(j->repo, j->commit, f->path, ptr, sizeof ptr) || hf_blob_link(f->path, f->etag, link, sizeof link))
        return ds_err(err, errlen, "path too long for %s", f->path);
    ssize_t l = readlink(ptr, cur, sizeof cur - 1);
    if (l >= 0) {
        cur[l] = 0;
        if (!strcmp(cur, link)) return 0;
    }
    if (mkdirs(ptr, 0) != 0) return ds_err(err, errlen, "cannot create the folder of %s: %s", ptr, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", ptr, (long)getpid());
    unlink(tmp);
    if (symlink(link, tmp) != 0 || rename(tmp, ptr) != 0) {
        int e = errno;
        unlink(tmp);
        return ds_err(err, errlen, "cannot link %s: %s", ptr, strerror(e));
    }
    return 0;
}

/* One file: cached, or downloaded, verified and moved into blobs/; then
 * linked into the snapshot. */
static int pull_file(pull_job *j, int slot, const hfile *f, char *err, size_t errlen) {
    char blob[PATH_MAX], inc[PATH_MAX], lock[PATH_MAX];
    if (hf_blob_path(j->repo, f->etag, "", blob, sizeof blob) ||
        hf_blob_path(j->repo, f->etag, ".incomplete", inc, sizeof inc) ||
        hf_lock_path(j->root, j->id, f->etag, lock, sizeof lock))
        return ds_err(err, errlen, "cache path too long for %s", f->path);
    int rc = 0, fetched = 0;
    if (file_size(blob) != f->size) {
        /* the lock keeps another dspark or huggingface_hub (which takes the
           same flock) from writing the same .incomplete file */
        if (mkdirs(lock, 0) != 0) return ds_err(err, errlen, "cannot create %s: %s", lock, strerror(errno));
        int lfd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        if (lfd < 0) return ds_err(err, errlen, "cannot open %s: %s", lock, strerror(errno));
        while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
        }
        if (file_size(blob) != f->size) {
            pthread_mutex_lock(&j->mu);
            j->slot[slot] = (slot_state){.name = f->path, .total = f->size, .t0 = ds_now(), .active = 1};
            pthread_mutex_unlock(&j->mu);
            rc = download(j, slot, f, inc, err, errlen);
            if (rc == 0) {
                char got[80];
                rc = hub_file_digest(inc, f->lfs, got, sizeof got, err, errlen);
                if (rc == 0 && strcmp(got, f->etag)) {
                    unlink(inc);
                    rc = ds_err(err, errlen,
                                "%s of %s failed verification: its %s is %s, the hub lists %s; the download was "
                                "removed (pull again; if it repeats, the endpoint serves a different file)",
                                f->path, j->id, f->lfs ? "SHA-256" : "git blob id", got, f->etag);
                }
            }
            if (rc == 0 && (chmod(inc, 0644) != 0 || rename(inc, blob) != 0))
                rc = ds_err(err, errlen, "cannot move %s into place: %s", inc, strerror(errno));
            fetched = rc == 0;
        }
        flock(lfd, LOCK_UN);
        close(lfd);
    }
    if (rc == 0) rc = place_link(j, f, err, errlen);
    pthread_mutex_lock(&j->mu);
    j->slot[slot].active = 0;
    if (rc == 0) {
        j->done_bytes += f->size;
        j->fetched += fetched;
        j->ndone++;
        if (fetched && j->log && !j->tty) {
            double dt = ds_now() - j->slot[slot].t0;
            char sz[32], rate[32];
            fmt_bytes(f->size, sz, sizeof sz);
            fmt_bytes(dt > 0 ? (long long)((double)(f->size - j->slot[slot].start_bytes) / dt) : 0, rate,
                      sizeof rate);
            fprintf(j->log, "dspark: %s: %s (%s) done in %.1f s, %s/s\n", j->id, f->path, sz, dt, rate);
        }
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

typedef struct {
    pull_job *j;
    int slot;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    pull_job *j = a->j;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->abort || j->next >= j->nfiles ? -1 : j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i < 0) break;
        char err[2048];
        if (pull_file(j, a->slot, &j->files[i], err, sizeof err) != 0) {
            pthread_mutex_lock(&j->mu);
            if (!j->abort) snprintf(j->err, sizeof j->err, "%s", err); /* the first error is the cause */
            j->abort = 1;
            pthread_mutex_unlock(&j->mu);
            break;
        }
    }
    pthread_mutex_lock(&j->mu);
    j->running--;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void bar(char *out, size_t n, double frac) {
    int w = 20, k = (int)(frac * w + 0.5);
    if (k > w) k = w;
    if (k < 0) k = 0;
    snprintf(out, n, "[%.*s%.*s]", k, "####################", w - k, "--------------------");
}

/* One progress line: name, bar, percentage, bytes, rate, ETA. */
static void progress_line(FILE *out, const char *name, long long done, long long total, double rate) {
    char b[48], d[32], t[32], r[32], e[32];
    double frac = total > 0 ? (double)done / (double)total : 1;
    bar(b, sizeof b, frac);
    fmt_bytes(done, d, sizeof d);
    fmt_bytes(total, t, sizeof t);
    fmt_bytes((long long)rate, r, sizeof r);
    fmt_eta(rate > 0 ? (double)(total - done) / rate : -1, e, sizeof e);
    fprintf(out, "\r\033[K  %-28.28s %s %3d%%  %s / %s  %s/s  ETA %s\n", name, b, (int)(frac * 100), d, t, r, e);
}

/* Called with j->mu held. */
static void draw(pull_job *j, int final) {
    if (!j->log) return;
    double now = ds_now(), el = now - j->t0;
    long long inflight = 0;
    for (int s = 0; s < HUB_MAX_JOBS; s++)
        if (j->slot[s].active) inflight += j->slot[s].done;
    long long done = j->done_bytes + inflight;
    double rate = el > 0.2 ? (double)j->received / el : 0;
    if (j->tty) {
        if (j->lines_drawn) fprintf(j->log, "\033[%dA", j->lines_drawn);
        int lines = 0;
        for (int s = 0; s < HUB_MAX_JOBS && !final; s++) {
            slot_state *st = &j->slot[s];
            if (!st->active) continue;
            double fe = now - st->t0;
            progress_line(j->log, st->name, st->done, st->total,
                          fe > 0.2 ? (double)(st->done - st->start_bytes) / fe : 0);
            lines++;
        }
        char name[64];
        snprintf(name, sizeof name, "total (%d/%d files)", j->ndone, j->nfiles);
        progress_line(j->log, name, done, j->total, rate);
        lines++;
        /* clear lines left from a taller frame */
        for (int k = lines; k < j->lines_drawn; k++) fprintf(j->log, "\r\033[K\n");
        if (j->lines_drawn > lines) fprintf(j->log, "\033[%dA", j->lines_drawn - lines);
        j->lines_drawn = lines;
        fflush(j->log);
    } else if (now - j->last_line >= 10 || final) {
        j->last_line = now;
        if (final) return;
        char d[32], t[32], r[32], e[32];
        fmt_bytes(done, d, sizeof d);
        fmt_bytes(j->total, t, sizeof t);
        fmt_bytes((long long)rate, r, sizeof r);
        fmt_eta(rate > 0 ? (double)(j->total - done) / rate : -1, e, sizeof e);
        fprintf(j->log, "dspark: %s: %d%% (%s of %s), %s/s, ETA %s\n", j->id,
                j->total ? (int)(100.0 * (double)done / (double)j->total) : 100, d, t, r, e);
        fflush(j->log);
    }
}

/* The listing of id at rev, with retries of dropped connections. */
static int fetch_listing(pull_job *j, strbuf *body, char *err, size_t errlen) {
    http_meta m;
    struct curl_slist *hdrs;
    CURL *c = http_new(j->token, &hdrs, &m);
    if (!c) return ds_err(err, errlen, "libcurl could not start");
    char *rq = curl_easy_escape(c, j->rev, 0); /* "refs/pr/1" is one path part */
    strbuf url = {0};
    sb_printf(&url, "%s/api/models/%s/revision/%s?blobs=true", j->ep, j->id, rq ? rq : "");
    curl_free(rq);
    curl_easy_setopt(c, CURLOPT_URL, sb_str(&url));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    backoff bo = backoff_of(j->o);
    int rc = -1;
    for (int attempt = 0;; attempt++) {
        sb_clear(body);
        memset(&m, 0, sizeof m);
        CURLcode cr = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &m.code);
        if (cr == CURLE_OK) {
            rc = 0;
            break;
        }
        if (cr == CURLE_HTTP_RETURNED_ERROR && !retryable(cr, m.code)) {
            http_error(&m, j->ep, j->id, j->rev, NULL, j->token[0] != 0, err, errlen);
            break;
        }
        if (!retryable(cr, m.code) || backoff_spent(&bo, attempt, cr)) {
            if (attempt) snprintf(m.xmsg, sizeof m.xmsg, " after %d attempts", attempt + 1);
            ds_err(err, errlen, "cannot get the file list of %s from %s: %s%s%s", j->id, j->ep,
                   cr == CURLE_HTTP_RETURNED_ERROR ? "the server answered with an error" : curl_easy_strerror(cr),
                   attempt ? m.xmsg : "",
                   cr == CURLE_COULDNT_RESOLVE_HOST || cr == CURLE_COULDNT_CONNECT ? " (check the network or HF_ENDPOINT)"
                                                                                    : "");
            break;
        }
        if (j->log)
            fprintf(j->log, "dspark: %s: %s, retrying in %.1f s\n", j->ep, curl_easy_strerror(cr), bo.wait_ms / 1000.0);
        backoff_wait(&bo);
    }
    sb_free(&url);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return rc;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int write_ref(const char *repo, const char *rev, const char *commit, char *err, size_t errlen) {
    char ref[PATH_MAX], tmp[PATH_MAX + 32];
    if (hf_ref_path(repo, rev, ref, sizeof ref)) return ds_err(err, errlen, "path too long for refs/%s", rev);
    if (mkdirs(ref, 0) != 0) return ds_err(err, errlen, "cannot create the folder of %s: %s", ref, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", ref, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return ds_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    int bad = fputs(commit, f) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, ref) != 0) {
        unlink(tmp);
        return ds_err(err, errlen, "cannot write %s: %s", ref, strerror(errno));
    }
    return 0;
}

int hub_pull(const char *id, const hub_opts *o, char *snapshot, size_t n, hub_result *res, char *err,
             size_t errlen) {
    char pid[256], prev[256];
    if (hf_parse_id(id, pid, sizeof pid, prev, sizeof prev, err, errlen)) return -1;
    if (prev[0]) return ds_err(err, errlen, "give the revision of %s in hub_opts, not in the id", pid);
    pthread_once(&curl_once, curl_init);
    pull_job *j = xcalloc(1, sizeof *j);
    char root[PATH_MAX];
    hf_cache_root(root, sizeof root);
    j->o = o;
    j->id = pid;
    j->rev = o->revision && *o->revision ? o->revision : "main";
    j->root = root;
    j->log = o->log;
    j->tty = o->log && (o->tty > 0 || (o->tty < 0 && isatty(fileno(o->log))));
    endpoint(j->ep, sizeof j->ep);
    read_token(j->token, sizeof j->token);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    int rc = -1;
    strbuf body = {0};
    if (hf_repo_dir(root, pid, j->repo, sizeof j->repo)) {
        ds_err(err, errlen, "cache path too long for %s", pid);
        goto out;
    }
    if (fetch_listing(j, &body, err, errlen)) goto out;
    if (parse_listing(sb_str(&body), pid, j->commit, sizeof j->commit, &j->files, &j->nfiles, err, errlen)) goto out;
    j->nall = j->nfiles;
    int all = j->nall = j->nfiles;
    int kept = select_files(j->files, all, o, pid, err, errlen);
    if (kept < 0) goto out;
    j->nfiles = kept;
    /* the space the missing files need, against what the disk has */
    char blobs[PATH_MAX];
    if (hf_blob_path(j->repo, "", "", blobs, sizeof blobs) || mkdirs(blobs, 1) != 0) {
        ds_err(err, errlen, "cannot create %s: %s", blobs, strerror(errno));
        goto out;
    }
    long long need = 0, cached = 0;
    for (int i = 0; i < kept; i++) {
        char p[PATH_MAX];
        j->total += j->files[i].size;
        hf_blob_path(j->repo, j->files[i].etag, "", p, sizeof p);
        if (file_size(p) == j->files[i].size) {
            cached += j->files[i].size;
            continue;
        }
        hf_blob_path(j->repo, j->files[i].etag, ".incomplete", p, sizeof p);
        long long part = file_size(p);
        need += j->files[i].size - (part > 0 && part <= j->files[i].size ? part : 0);
    }
    long long fb = free_bytes(blobs);
    if (fb >= 0 && need > fb) {
        char a[32], b[32];
        fmt_bytes(need, a, sizeof a);
        fmt_bytes(fb, b, sizeof b);
        ds_err(err, errlen, "not enough disk space for %s: it needs %s more, %s is free in %s", pid, a, b, blobs);
        goto out;
    }
    if (j->log) {
        char t[32], c[32];
        fmt_bytes(j->total, t, sizeof t);
        fmt_bytes(cached, c, sizeof c);
        fprintf(j->log, "dspark: pulling %s@%s (commit %.12s) from %s: %d of %d files, %s (%s in the cache)\n", pid,
                j->rev, j->commit, j->ep, kept, all, t, c);
    }
    int jobs = o->jobs > 0 ? o->jobs : 4;
    if (jobs > HUB_MAX_JOBS) jobs = HUB_MAX_JOBS;
    if (jobs > kept) jobs = kept;
    pthread_t th[HUB_MAX_JOBS];
    worker_arg wa[HUB_MAX_JOBS];
    j->t0 = j->last_line = ds_now();
    j->running = 0;
    for (int w = 0; w < jobs; w++) {
        wa[w] = (worker_arg){j, w};
        pthread_mutex_lock(&j->mu);
        j->running++;
        pthread_mutex_unlock(&j->mu);
        if (pthread_create(&th[w], NULL, worker, &wa[w]) != 0) {
            pthread_mutex_lock(&j->mu);
            j->running--;
            pthread_mutex_unlock(&j->mu);
            jobs = w;
            break;
        }
    }
    pthread_mutex_lock(&j->mu);
    if (jobs == 0) {
        snprintf(j->err, sizeof j->err, "cannot start a download thread");
        j->abort = 1;
    }
    while (j->running > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        draw(j, 0);
    }
    draw(j, 1);
    pthread_mutex_unlock(&j->mu);
    for (int w = 0; w < jobs; w++) pthread_join(th[w], NULL);
    if (j->abort) {
        ds_err(err, errlen, "%s", j->err);
        goto out;
    }
    /* every file is in the snapshot: now the revision may name it */
    if (strcmp(j->rev, j->commit) && write_ref(j->repo, j->rev, j->commit, err, errlen)) goto out;
    if (hf_snapshot_dir(root, pid, j->commit, snapshot, n) != 0) {
        ds_err(err, errlen, "the snapshot of %s is missing after the pull", pid);
        goto out;
    }
    if (res) {
        memset(res, 0, sizeof *res);
        snprintf(res->commit, sizeof res->commit, "%s", j->commit);
        res->files = kept;
        res->fetched = j->fetched;
        res->bytes = j->total;
        res->received = j->received;
    }
    if (j->log) {
        char r[32];
        fmt_bytes(j->received, r, sizeof r);
        fprintf(j->log, "dspark: %s@%s ready (%d files, %d downloaded, %s received): %s\n", pid, j->rev, kept,
                j->fetched, r, snapshot);
    }
    rc = 0;
out:
    sb_free(&body);
    if (j->files) free_files(j->files, j->nall);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
    return rc;
}
