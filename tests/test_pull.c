/* pull tests: a stand-in for the Hugging Face hub's HTTP API (libmicrohttpd
 * in this process, on a loopback port) serves a few repos built from the
 * bundled model and its drafters: the listing with blob ids, sizes and LFS
 * SHA-256 sums, files by commit with Range support, LFS files through a
 * redirect, a gated repo (401 without the right token), unknown repos and
 * revisions (404), a file whose bytes differ from its listed SHA-256, and a
 * switch that cuts the connection once mid-file. The tests pull into fresh
 * HF_HUB_CACHE folders and check the layout, resume, verification, the
 * error messages, --include, the drafters pulled along and --pull. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/evp.h>

#include "base/hfcache.h"
#include "base/hub.h"
#include "base/util.h"
#include "spec/pull.h"
#include "spec/registry.h"
#include "test.h"

typedef struct {
    const char *path;
    char *data;
    size_t len;
    int lfs, bad_sum;
    char sha256[65], blobid[41];
} ffile;

typedef struct {
    const char *id, *commit;
    ffile f[8];
    int n, gated;
} frepo;

static struct {
    struct MHD_Daemon *d;
    int port;
    frepo repo[5];
    int nrepo;
    pthread_mutex_t mu;
    long long served;     /* file body bytes sent */
    const char *cut_path; /* the next response for this file ... */
    long long cut_at;     /* ... ends (connection closed) at this file offset */
    long long last_start; /* the first byte asked for by the last file request */
    int ok;
} H = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void hexdigest(const EVP_MD *md, const char *pre, size_t pl, const char *d, size_t n, char *hex) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned ol = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, md, NULL);
    if (pl) EVP_DigestUpdate(c, pre, pl);
    EVP_DigestUpdate(c, d, n);
    EVP_DigestFinal_ex(c, out, &ol);
    EVP_MD_CTX_free(c);
    for (unsigned i = 0; i < ol; i++) sprintf(hex + 2 * i, "%02x", out[i]);
}

static void add_file(frepo *r, const char *path, char *data, size_t len, int lfs) {
    ffile *f = &r->f[r->n++];
    f->path = path;
    f->data = data;
    f->len = len;
    f->lfs = lfs;
    char head[64];
    int hl = snprintf(head, sizeof head, "blob %zu", len) + 1;
    hexdigest(EVP_sha1(), head, (size_t)hl, data, len, f->blobid);
    hexdigest(EVP_sha256(), NULL, 0, data, len, f->sha256);
}

static void add_disk(frepo *r, const char *path, const char *dir, int lfs) {
    char p[512], e[256];
    size_t n = 0;
    snprintf(p, sizeof p, "%s/%s", dir, path);
    char *d = ds_read_file(p, &n, e, sizeof e);
    if (!d) {
        fprintf(stderr, "test_pull: %s\n", e);
        d = xstrdup("");
        n = 0;
    }
    add_file(r, path, d, n, lfs);
}

static frepo *find_repo(const char *id) {
    for (int i = 0; i < H.nrepo; i++)
        if (!strcmp(H.repo[i].id, id)) return &H.repo[i];
    return NULL;
}

static enum MHD_Result reply(struct MHD_Connection *c, int code, const char *body, const char *xcode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (xcode) MHD_add_response_header(r, "X-Error-Code", xcode);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)code, r);
    MHD_destroy_response(r);
    return rc;
}

typedef struct {
    const ffile *f;
    long long start, cut; /* cut: the file offset where this response stops (-1: none) */
} body_ctx;

static ssize_t read_body(void *cls, uint64_t pos, char *buf, size_t max) {
    body_ctx *b = cls;
    long long at = b->start + (long long)pos;
    if (b->cut >= 0 && at >= b->cut) return MHD_CONTENT_READER_END_WITH_ERROR;
    long long end = b->cut >= 0 ? b->cut : (long long)b->f->len;
    size_t n = (size_t)(end - at) < max ? (size_t)(end - at) : max;
    memcpy(buf, b->f->data + at, n);
    pthread_mutex_lock(&H.mu);
    H.served += (long long)n;
    pthread_mutex_unlock(&H.mu);
    return (ssize_t)n;
}

static enum MHD_Result serve_file(struct MHD_Connection *c, const frepo *r, const ffile *f) {
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    long long start = 0;
    if (range && sscanf(range, "bytes=%lld-", &start) != 1) start = 0;
    if (start > (long long)f->len) return reply(c, 416, "{}", NULL);
    body_ctx *b = xcalloc(1, sizeof *b);
    b->f = f;
    b->start = start;
    b->cut = -1;
    pthread_mutex_lock(&H.mu);
    H.last_start = start;
    if (H.cut_path && !strcmp(H.cut_path, f->path) && H.cut_at > start) {
        b->cut = H.cut_at;
        H.cut_path = NULL; /* once */
    }
    pthread_mutex_unlock(&H.mu);
    struct MHD_Response *resp =
        MHD_create_response_from_callback((uint64_t)f->len - (uint64_t)start, 16384, read_body, b, free);
    char v[200];
    snprintf(v, sizeof v, "\"%s\"", f->lfs ? f->sha256 : f->blobid);
    MHD_add_response_header(resp, f->lfs ? "X-Linked-Etag" : "ETag", v);
    MHD_add_response_header(resp, "X-Repo-Commit", r->commit);
    MHD_add_response_header(resp, "Accept-Ranges", "bytes");
    int code = 200;
    if (range) {
        snprintf(v, sizeof v, "bytes %lld-%zu/%zu", start, f->len ? f->len - 1 : 0, f->len);
        MHD_add_response_header(resp, "Content-Range", v);
        code = 206;
    }
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result on_req(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_n, void **state) {
    if (!*state) { /* the headers: answer on the next call */
        *state = (void *)1;
        return MHD_YES;
    }
    char org[128], name[128], rest[512] = "";
    int api = !strncmp(url, "/api/models/", 12), cdn = !strncmp(url, "/cdn/", 5);
    const char *p = api ? url + 12 : cdn ? url + 5 : url + 1;
    if (sscanf(p, "%127[^/]/%127[^/]/%511[^\n]", org, name, rest) < 2) return reply(c, 404, "{}", NULL);
    char id[300];
    snprintf(id, sizeof id, "%s/%s", org, name);
    const frepo *r = find_repo(id);
    if (!r) return reply(c, 404, "{\"error\":\"Repository not found\"}", "RepoNotFound");
    if (r->gated) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!auth || strcmp(auth, "Bearer secret"))
            return reply(c, 401, "{\"error\":\"Access to model is restricted\"}", "GatedRepo");
    }
    if (api) {
        if (strncmp(rest, "revision/", 9)) return reply(c, 404, "{}", NULL);
        const char *rev = rest + 9;
        if (strcmp(rev, "main") && strcmp(rev, r->commit))
            return reply(c, 404, "{\"error\":\"Invalid rev id\"}", "RevisionNotFound");
        cJSON *j = cJSON_CreateObject(), *sib = cJSON_AddArrayToObject(j, "siblings");
        cJSON_AddStringToObject(j, "id", r->id);
        cJSON_AddStringToObject(j, "sha", r->commit);
        for (int i = 0; i < r->n; i++) {
            const ffile *f = &r->f[i];
            cJSON *s = cJSON_CreateObject();
            cJSON_AddStringToObject(s, "rfilename", f->path);
            cJSON_AddNumberToObject(s, "size", (double)f->len);
            cJSON_AddStringToObject(s, "blobId", f->blobid);
            if (f->lfs) {
                cJSON *l = cJSON_AddObjectToObject(s, "lfs");
                cJSON_AddStringToObject(l, "sha256", f->bad_sum ? "00000000000000000000000000000000"
                                                                  "00000000000000000000000000000000"
                                                                : f->sha256);
                cJSON_AddNumberToObject(l, "size", (double)f->len);
                cJSON_AddNumberToObject(l, "pointerSize", 134);
            }
            cJSON_AddItemToArray(sib, s);
        }
        char *txt = cJSON_PrintUnformatted(j);
        enum MHD_Result rc = reply(c, 200, txt, NULL);
        free(txt);
        cJSON_Delete(j);
        return rc;
    }
    const char *path = rest;
    if (!cdn) {
        if (strncmp(rest, "resolve/", 8)) return reply(c, 404, "{}", NULL);
        const char *slash = strchr(rest + 8, '/');
        if (!slash || (size_t)(slash - rest - 8) != strlen(r->commit) || strncmp(rest + 8, r->commit, 40))
            return reply(c, 404, "{}", "RevisionNotFound");
        path = slash + 1;
    }
    for (int i = 0; i < r->n; i++) {
        const ffile *f = &r->f[i];
        if (strcmp(f->path, path)) continue;
        if (f->lfs && !cdn) { /* as the hub does: LFS files come from elsewhere */
            char loc[700];
            snprintf(loc, sizeof loc, "/cdn/%s/%s", r->id, f->path);
            struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            MHD_add_response_header(resp, "Location", loc);
            enum MHD_Result rc = MHD_queue_response(c, 302, resp);
            MHD_destroy_response(resp);
            return rc;
        }
        return serve_file(c, r, f);
    }
    return reply(c, 404, "{\"error\":\"Entry not found\"}", "EntryNotFound");
}

static int hub_up(void) {
    if (H.d) return 0;
    if (H.ok < 0) return -1;
    const char *models = "models";
    char dir[256];
    frepo *t = &H.repo[H.nrepo++];
    t->id = "test/coder";
    t->commit = "1111111111111111111111111111111111111111";
    snprintf(dir, sizeof dir, "%s/%s", models, DSPARK_DEFAULT_MODEL);
    add_disk(t, "config.json", dir, 0);
    add_disk(t, "generation_config.json", dir, 0);
    add_disk(t, "tokenizer.json", dir, 0);
    add_disk(t, "tokenizer_config.json", dir, 0);
    add_disk(t, "model.safetensors", dir, 1);
    add_file(t, "README.md", xstrdup("# a model\n"), 10, 0);
    add_file(t, "coder-q8.gguf", xstrdup("GGUF not really"), 15, 1);
    add_file(t, "original/consolidated.safetensors", xstrdup("not needed"), 10, 1);
    const char *dr[2] = {"dspark", "dflash"};
    for (int k = 0; k < 2; k++) {
        frepo *d = &H.repo[H.nrepo++];
        static char ids[2][80];
        snprintf(ids[k], sizeof ids[k], "dspark/%s-%s", DSPARK_DEFAULT_MODEL, dr[k]);
        d->id = ids[k];
        d->commit = k ? "3333333333333333333333333333333333333333" : "2222222222222222222222222222222222222222";
        snprintf(dir, sizeof dir, "%s/%s", models, ids[k] + 7);
        add_disk(d, "config.json", dir, 0);
        add_disk(d, "model.safetensors", dir, 1);
    }
    frepo *b = &H.repo[H.nrepo++];
    b->id = "test/badsum";
    b->commit = "4444444444444444444444444444444444444444";
    add_file(b, "config.json", xstrdup("{}"), 2, 0);
    char *blob = xmalloc(50000);
    for (int i = 0; i < 50000; i++) blob[i] = (char)(i * 7);
    add_file(b, "model.safetensors", blob, 50000, 1);
    b->f[1].bad_sum = 1;
    frepo *g = &H.repo[H.nrepo++];
    g->id = "test/gated";
    g->commit = "5555555555555555555555555555555555555555";
    g->gated = 1;
    add_file(g, "config.json", xstrdup("{}"), 2, 0);
    add_file(g, "model.safetensors", xstrdup("weights"), 7, 1);
    for (int i = 0; i < H.nrepo; i++)
        for (int k = 0; k < H.repo[i].n; k++)
            if (H.repo[i].f[k].len == 0) {
                H.ok = -1;
                return -1;
            }

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    H.d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, on_req,
                           NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
    if (!H.d) {
        H.ok = -1;
        return -1;
    }
    H.port = MHD_get_daemon_info(H.d, MHD_DAEMON_INFO_BIND_PORT)->port;
    return 0;
}

static int n_cache;
static const char *const HF_VARS[] = {"HF_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN", "HF_TOKEN_PATH"};
static char *saved_env[4];
static int env_saved;

/* The environment as it was before fresh_cache, so that later tests (and
 * the processes they start) do not see the stand-in or its caches. */
static void env_restore(void) {
    if (!env_saved) return;
    for (int i = 0; i < 4; i++) {
        if (saved_env[i]) setenv(HF_VARS[i], saved_env[i], 1);
        else unsetenv(HF_VARS[i]);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    env_saved = 0;
}

/* A fresh, empty hub cache and the stand-in's address in the environment
 * (env_restore undoes it). */
static const char *fresh_cache(void) {
    static char root[512];
    char ep[64];
    if (!env_saved) {
        for (int i = 0; i < 4; i++) saved_env[i] = getenv(HF_VARS[i]) ? xstrdup(getenv(HF_VARS[i])) : NULL;
        env_saved = 1;
    }
    snprintf(root, sizeof root, "%s/hub-%d", test_tmp_dir(), n_cache++);
    setenv("HF_HUB_CACHE", root, 1);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d/", H.port); /* (the trailing slash is dropped) */
    setenv("HF_ENDPOINT", ep, 1);
    unsetenv("HF_TOKEN");
    setenv("HF_TOKEN_PATH", "/nonexistent/token", 1); /* never the user's saved login */
    return root;
}

static long long served(void) {
    pthread_mutex_lock(&H.mu);
    long long s = H.served;
    pthread_mutex_unlock(&H.mu);
    return s;
}

static const ffile *file_of(const char *repo, const char *path) {
    const frepo *r = find_repo(repo);
    for (int i = 0; r && i < r->n; i++)
        if (!strcmp(r->f[i].path, path)) return &r->f[i];
    return NULL;
}

/* The snapshot entry repo/path at commit is a relative link to its blob
 * and holds the served bytes. */
static int entry_ok(const char *root, const char *repo, const char *path) {
    const frepo *r = find_repo(repo);
    const ffile *f = file_of(repo, path);
    char rd[1024], ptr[2048], link[1024], want[1024];
    hf_repo_dir(root, repo, rd, sizeof rd);
    snprintf(ptr, sizeof ptr, "%s/snapshots/%s/%s", rd, r->commit, path);
    ssize_t l = readlink(ptr, link, sizeof link - 1);
    if (l < 0) return 0;
    link[l] = 0;
    snprintf(want, sizeof want, "../../blobs/%s", f->lfs ? f->sha256 : f->blobid);
    if (strcmp(link, want)) return 0;
    size_t n = 0;
    char *d = ds_read_file(ptr, &n, NULL, 0);
    int ok = d && n == f->len && !memcmp(d, f->data, n);
    free(d);
    return ok;
}

static int exists(const char *p) {
    struct stat sb;
    return lstat(p, &sb) == 0;
}

TEST(pull_digest_vectors) {
    char p[512], hex[80], err[256];
    snprintf(p, sizeof p, "%s/digest.txt", test_tmp_dir());
    FILE *f = fopen(p, "wb");
    fputs("hello\n", f);
    fclose(f);
    CHECK_EQ_INT(hub_file_digest(p, 0, hex, sizeof hex, err, sizeof err), 0);
    CHECK(!strcmp(hex, "ce013625030ba8dba906f756967f9e9ca394464a")); /* git hash-object */
    f = fopen(p, "wb");
    fputs("abc", f);
    fclose(f);
    CHECK_EQ_INT(hub_file_digest(p, 1, hex, sizeof hex, err, sizeof err), 0);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    CHECK_EQ_INT(hub_file_digest("/nonexistent/x", 1, hex, sizeof hex, err, sizeof err), -1);
    CHECK(hub_wanted("config.json", 1) && hub_wanted("model-00001-of-00002.safetensors", 1) &&
          hub_wanted("model.safetensors.index.json", 1) && hub_wanted("tokenizer.json", 1));
    CHECK(!hub_wanted("README.md", 1) && !hub_wanted("x.gguf", 1) && hub_wanted("x.gguf", 0) &&
          !hub_wanted("original/model.safetensors", 1) && !hub_wanted("pytorch_model.bin", 1));
    char link[256];
    CHECK_EQ_INT(hf_blob_link("a/b/c.json", "e1", link, sizeof link), 0);
    CHECK(!strcmp(link, "../../../../blobs/e1"));
}

TEST(pull_layout_and_drafters) {
    if (hub_up()) {
        CHECK_MSG(0, "the stand-in hub did not start (bundled model files missing?)");
        return;
    }
    const char *root = fresh_cache();
    char snap[2048], err[2048], rd[1024], p[4096];
    int failed = -1;
    pull_opts po = {.hub = {.retries = -1, .tty = 0}};
    CHECK_EQ_INT(pull_model("test/coder", &po, snap, sizeof snap, &failed, err, sizeof err), 0);
    CHECK_MSG(failed == 0, "drafters failed: %d", failed);
    hf_repo_dir(root, "test/coder", rd, sizeof rd);
    snprintf(p, sizeof p, "%s/snapshots/1111111111111111111111111111111111111111", rd);
    CHECK(!strcmp(snap, p));
    /* refs/main names the commit; every default file links into blobs/ */
    snprintf(p, sizeof p, "%s/refs/main", rd);
    char *ref = ds_read_file(p, NULL, NULL, 0);
    CHECK(ref && !strcmp(ref, "1111111111111111111111111111111111111111"));
    free(ref);
    const char *want[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "model.safetensors"};
    for (size_t i = 0; i < 5; i++) CHECK_MSG(entry_ok(root, "test/coder", want[i]), "entry %s", want[i]);
    const char *skip[] = {"README.md", "coder-q8.gguf", "original"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", snap, skip[i]);
        CHECK_MSG(!exists(p), "%s pulled by default", skip[i]);
    }
    snprintf(p, sizeof p, "%s/blobs/%s.incomplete", rd, file_of("test/coder", "model.safetensors")->sha256);
    CHECK(!exists(p));
    /* the drafters came along, where the registry finds them */
    char ids[2][128];
    snprintf(ids[0], sizeof ids[0], "dspark/%s-dspark", DSPARK_DEFAULT_MODEL);
    snprintf(ids[1], sizeof ids[1], "dspark/%s-dflash", DSPARK_DEFAULT_MODEL);
    for (int k = 0; k < 2; k++) {
        CHECK(entry_ok(root, ids[k], "config.json") && entry_ok(root, ids[k], "model.safetensors"));
        char found[2048];
        CHECK(registry_find_local(ids[k], NULL, found, sizeof found) == 1 && strstr(found, root) == found);
    }
    /* pulled again: nothing is downloaded */
    long long before = served();
    hub_result res;
    hub_opts ho = {.retries = -1};
    CHECK_EQ_INT(hub_pull("test/coder", &ho, snap, sizeof snap, &res, err, sizeof err), 0);
    CHECK_EQ_INT(served(), before);
    CHECK_EQ_INT(res.fetched, 0);
    CHECK_EQ_INT(res.files, 5);
    /* on a terminal: the redrawn bar with bytes, rate and ETA */
    fresh_cache();
    snprintf(p, sizeof p, "%s/progress.txt", test_tmp_dir());
    FILE *lf = fopen(p, "w+");
    hub_opts tty = {.retries = -1, .log = lf, .tty = 1};
    CHECK_EQ_INT(hub_pull("test/coder", &tty, snap, sizeof snap, NULL, err, sizeof err), 0);
    fclose(lf);
    char *txt = ds_read_file(p, NULL, NULL, 0);
    CHECK_MSG(txt && strstr(txt, "total (5/5 files)") && strstr(txt, "100%") && strstr(txt, "ETA") &&
                  strstr(txt, "/s") && strstr(txt, "\033[K"),
              "%s", txt ? txt : "");
    free(txt);
    /* the command line prints the snapshot; --no-drafters */
    fresh_cache();
    char *out = NULL, *errtxt = NULL;
    CHECK_EQ_INT(test_run_cli("pull test/coder --no-drafters", &out, &errtxt), 0);
    CHECK(out && strstr(out, "/snapshots/1111111111111111111111111111111111111111"));
    CHECK(errtxt && strstr(errtxt, "ready") && !strstr(errtxt, "drafter of"));
    free(out);
    free(errtxt);
    env_restore();
}

TEST(pull_resume_after_cut) {
    if (hub_up()) return;
    const char *root = fresh_cache();
    const ffile *f = file_of("test/coder", "model.safetensors");
    char snap[2048], err[2048], rd[1024], inc[2048], p[2048];
    hf_repo_dir(root, "test/coder", rd, sizeof rd);
    snprintf(inc, sizeof inc, "%s/blobs/%s.incomplete", rd, f->sha256);
    const char *only[] = {"model.safetensors"};
    hub_opts ho = {.include = only, .n_include = 1, .retries = -1};
    /* a connection cut at 1 MB, no retries: an error, the part kept, no ref */
    pthread_mutex_lock(&H.mu);
    H.cut_path = "model.safetensors";
    H.cut_at = 1000000;
    pthread_mutex_unlock(&H.mu);
    CHECK_EQ_INT(hub_pull("test/coder", &ho, snap, sizeof snap, NULL, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "dropped") && strstr(err, "model.safetensors") && strstr(err, "resume"), "%s", err);
    struct stat sb;
    CHECK(stat(inc, &sb) == 0 && sb.st_size > 0 && sb.st_size <= 1000000);
    long long part = stat(inc, &sb) == 0 ? (long long)sb.st_size : 0;
    snprintf(p, sizeof p, "%s/refs/main", rd);
    CHECK(!exists(p));
    snprintf(p, sizeof p, "%s/snapshots/%s/model.safetensors", rd, find_repo("test/coder")->commit);
    CHECK(!exists(p));
    /* the next run asks for the rest only */
    long long before = served();
    hub_result res;
    CHECK_EQ_INT(hub_pull("test/coder", &ho, snap, sizeof snap, &res, err, sizeof err), 0);
    CHECK_EQ_INT(served() - before, (long long)f->len - part);
    CHECK_EQ_INT(H.last_start, part);
    CHECK_EQ_INT(res.received, (long long)f->len - part);
    CHECK(entry_ok(root, "test/coder", "model.safetensors"));
    CHECK(!exists(inc));
    /* with retries, one run resumes by itself: every byte sent once */
    root = fresh_cache();
    pthread_mutex_lock(&H.mu);
    H.cut_path = "model.safetensors";
    H.cut_at = 500000;
    pthread_mutex_unlock(&H.mu);
    ho.retries = 3;
    ho.retry_ms = 10;
    before = served();
    CHECK_EQ_INT(hub_pull("test/coder", &ho, snap, sizeof snap, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(served() - before, (long long)f->len);
    CHECK(entry_ok(root, "test/coder", "model.safetensors"));
    env_restore();
}

TEST(pull_bad_checksum) {
    if (hub_up()) return;
    const char *root = fresh_cache();
    char snap[2048], err[2048], rd[1024], p[2048];
    hub_opts ho = {.retries = -1};
    CHECK_EQ_INT(hub_pull("test/badsum", &ho, snap, sizeof snap, NULL, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "model.safetensors") && strstr(err, "verification") && strstr(err, "SHA-256") &&
                  strstr(err, "removed"),
              "%s", err);
    hf_repo_dir(root, "test/badsum", rd, sizeof rd);
    snprintf(p, sizeof p, "%s/blobs/0000000000000000000000000000000000000000000000000000000000000000", rd);
    CHECK(!exists(p));
    strcat(p, ".incomplete");
    CHECK(!exists(p));
    snprintf(p, sizeof p, "%s/refs/main", rd);
    CHECK(!exists(p));
    env_restore();
}

TEST(pull_errors_and_include) {
    if (hub_up()) return;
    const char *root = fresh_cache();
    char *out = NULL, *e = NULL;
    CHECK_EQ_INT(test_run_cli("pull test/gated", &out, &e), 1);
    CHECK_MSG(e && strstr(e, "gated") && strstr(e, "HF_TOKEN") && strstr(e, "license") && strstr(e, "HF_TOKEN is not set"),
              "%s", e ? e : "");
    free(out);
    free(e);
    setenv("HF_TOKEN", "secret", 1);
    CHECK_EQ_INT(test_run_cli("pull test/gated", NULL, &e), 0);
    free(e);
    unsetenv("HF_TOKEN");
    CHECK_EQ_INT(test_run_cli("pull test/nothere", NULL, &e), 1);
    CHECK_MSG(e && strstr(e, "test/nothere") && strstr(e, "not found"), "%s", e ? e : "");
    free(e);
    CHECK_EQ_INT(test_run_cli("pull test/coder --revision v9", NULL, &e), 1);
    CHECK_MSG(e && strstr(e, "revision \"v9\"") && strstr(e, "not found"), "%s", e ? e : "");
    free(e);
    CHECK_EQ_INT(test_run_cli("pull not-an-id", NULL, &e), 1);
    CHECK(e && strstr(e, "org/name"));
    free(e);
    /* --include: only the matching files (README.md, not pulled by default) */
    CHECK_EQ_INT(test_run_cli("pull test/coder@main --include '*.md' --include 'tokenizer*'", &out, &e), 0);
    char rd[1024], p[2048];
    hf_repo_dir(root, "test/coder", rd, sizeof rd);
    CHECK(entry_ok(root, "test/coder", "README.md") && entry_ok(root, "test/coder", "tokenizer.json") &&
          entry_ok(root, "test/coder", "tokenizer_config.json"));
    snprintf(p, sizeof p, "%s/snapshots/%s/config.json", rd, find_repo("test/coder")->commit);
    CHECK(!exists(p));
    CHECK(e && strstr(e, "no drafters looked up"));
    free(out);
    free(e);
    CHECK_EQ_INT(test_run_cli("pull test/coder --include 'nothing*'", NULL, &e), 1);
    CHECK(e && strstr(e, "matches the --include"));
    free(e);
    env_restore();
}

TEST(pull_flag_on_run) {
    if (hub_up()) return;
    const char *root = fresh_cache();
    char *out = NULL, *e = NULL;
    /* an id not in the cache: pulled with its drafters, then run with one */
    CHECK_EQ_INT(test_run_cli("run --pull --model test/coder --mode dspark -p 'def add(a, b):' -n 8 --temp 0 --no-warmup",
                              &out, &e), 0);
    CHECK_MSG(out && strlen(out) > 0, "%s", e ? e : "");
    CHECK_MSG(e && strstr(e, "mode dspark"), "%s", e ? e : "");
    CHECK(entry_ok(root, "test/coder", "model.safetensors"));
    free(out);
    free(e);
    /* found in the cache now: nothing downloaded */
    long long before = served();
    CHECK_EQ_INT(test_run_cli("run --pull --model test/coder -p 'x' -n 2 --no-warmup", NULL, &e), 0);
    CHECK_EQ_INT(served(), before);
    free(e);
    /* without --pull an id is not fetched */
    CHECK(test_run_cli("run --model test/nothere -p x -n 1", NULL, &e) != 0);
    free(e);
    env_restore();
}
