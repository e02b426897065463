/* calib: see calib.h. */
#include "spec/calib.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/cpu.h"
#include "spec/spec.h"
#include "base/util.h"

_Static_assert(CALIB_MAX_K >= SPEC_MAX_DRAFT, "the controller must cover every cap spec accepts");

#ifdef DSPARK_BUILD_ID
#define CALIB_BUILD DSPARK_BUILD_ID
#elif defined(DSPARK_VERSION)
#define CALIB_BUILD DSPARK_VERSION " " __DATE__ " " __TIME__
#else
#define CALIB_BUILD __DATE__ " " __TIME__
#endif

#define CALIB_MAX_FILE (16u << 20) /* a cache file larger than this is not ours */

/* ---- costs ---- */

static int time_ok(double t, int zero_ok) {
    return isfinite(t) && (zero_ok ? t >= 0 : t > 0) && t <= CALIB_MAX_SECONDS;
}

int calib_costs_valid(const calib_costs *c) {
    if (!c || c->n_w < 1 || c->n_w > CALIB_MAX_W || !time_ok(c->draft_s, 1) || !time_ok(c->draft_tok_s, 1)) return 0;
    for (int w = 1; w <= c->n_w; w++)
        if (!time_ok(c->verify_s[w], 0)) return 0;
    return 1;
}

double calib_verify_time(const calib_costs *c, int w) {
    if (!calib_costs_valid(c) || w < 1) return 0;
    if (w <= c->n_w) return c->verify_s[w];
    double last = c->verify_s[c->n_w];
    double slope = c->n_w >= 2 ? last - c->verify_s[c->n_w - 1] : last;
    if (slope < 0) slope = 0;
    return last + slope * (double)(w - c->n_w);
}

/* ---- measurement ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int calib_measure_verify(seq *s, int n_w, int ctx_len, int reps, calib_costs *out, char *err, size_t errlen) {
    if (n_w < 1 || n_w > CALIB_MAX_W)
        return ds_err(err, errlen, "calibration: widths must be 1..%d (got %d)", CALIB_MAX_W, n_w);
    if (reps < 1 || reps > 1000) return ds_err(err, errlen, "calibration: repetitions must be 1..1000 (got %d)", reps);
    if (ctx_len < 1 || ctx_len > seq_capacity(s) - n_w)
        return ds_err(err, errlen, "calibration: a context of %d tokens plus %d rows does not fit the %d-token window",
                      ctx_len, n_w, seq_capacity(s));
    int vocab = model_cfg(seq_model(s))->vocab_size;
    int *ids = xmalloc(sizeof(int) * (size_t)(ctx_len + n_w));
    for (int i = 0; i < ctx_len + n_w; i++) ids[i] = (int)(((int64_t)i * 7919) % vocab);
    float *logits = xmalloc(sizeof(float) * (size_t)n_w * (size_t)vocab);
    /* at least reps passes; more, up to CALIB_MAX_REPS, while the passes so
       far took less than CALIB_MIN_SECONDS: a small model's forwards are
       short enough for one preempted sample to set a width's time */
    const int most = reps > CALIB_MAX_REPS ? reps : CALIB_MAX_REPS;
    double *samples = xmalloc(sizeof(double) * (size_t)most * (size_t)(n_w + 1)); /* [w][rep], stride most */
    int rc = -1;
    seq_reset(s);
    if (seq_prefill(s, ids, ctx_len, logits, err, errlen) < 0) goto done;
    /* warm-up at the widest width: faults in every scratch page and KV slot the passes touch */
    if (seq_append(s, ids + ctx_len, n_w, n_w, logits, err, errlen) != 0) goto done;
    seq_truncate(s, ctx_len);
    double start = ds_now();
    int done_reps = 0;
    while (done_reps < reps || (done_reps < most && ds_now() - start < CALIB_MIN_SECONDS)) {
        for (int w = 1; w <= n_w; w++) {
            double t0 = ds_now();
            if (seq_append(s, ids + ctx_len, w, w, logits, err, errlen) != 0) goto done;
            double t = ds_now() - t0;
            seq_truncate(s, ctx_len);
            samples[(size_t)w * (size_t)most + (size_t)done_reps] = t > 1e-9 ? t : 1e-9;
        }
        done_reps++;
    }
    memset(out, 0, sizeof *out);
    out->n_w = n_w;
    for (int w = 1; w <= n_w; w++) {
        double *v = samples + (size_t)w * (size_t)most;
        /* the fastest repetition: interference from other processes only
           ever adds time, and a cached cost measured on a busy machine
           would mislead every later run */
        qsort(v, (size_t)done_reps, sizeof *v, cmp_double);
        out->verify_s[w] = v[0];
    }
    out->draft_s = 0;
    out->draft_tok_s = 0;
    rc = 0;
done:
    seq_reset(s);
    free(samples);
    free(logits);
    free(ids);
    return rc;
}

/* ---- key and path ---- */

int calib_default_path(char *out, size_t n) {
    const char *d = getenv("DSPARK_CACHE_DIR");
    int len;
    if (d && d[0]) {
        len = snprintf(out, n, "%s/calibration.json", d);
    } else if ((d = getenv("XDG_CACHE_HOME")) && d[0] == '/') {
        len = snprintf(out, n, "%s/dspark/calibration.json", d);
    } else if ((d = getenv("HOME")) && d[0]) {
        len = snprintf(out, n, "%s/.cache/dspark/calibration.json", d);
    } else {
        if (n) out[0] = 0;
        return -1;
    }
    if (len < 0 || (size_t)len >= n) {
        if (n) out[0] = 0;
        return -1;
    }
    return 0;
}

/* The "model name" line of /proc/cpuinfo (x86; on other machines there is
 * often none), else the CPUID brand string. */
static void machine_cpu_name(char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            char *p = strchr(line, ':');
            if (!p) continue;
            p++;
            while (*p == ' ' || *p == '\t') p++;
            size_t l = strlen(p);
            while (l && (p[l - 1] == '\n' || p[l - 1] == ' ' || p[l - 1] == '\t')) p[--l] = 0;
            snprintf(out, n, "%s", p);
            break;
        }
        fclose(f);
    }
    if (!out[0]) snprintf(out, n, "%s", cpu_name());
}

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_putc(sbuf *b, char ch) {
    if (b->n + 2 > b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->p = xrealloc(b->p, b->cap);
    }
    b->p[b->n++] = ch;
    b->p[b->n] = 0;
}

static void sb_puts(sbuf *b, const char *s) {
    while (*s) sb_putc(b, *s++);
}

/* name=value; with the value's bytes outside printable ASCII and the
   separators % ; = written as %XX, so the fields cannot run into each other */
static void sb_field(sbuf *b, const char *name, const char *value) {
    static const char hex[] = "0123456789ABCDEF";
    sb_puts(b, ";");
    sb_puts(b, name);
    sb_putc(b, '=');
    for (const unsigned char *s = (const unsigned char *)(value ? value : ""); *s; s++) {
        if (*s < 0x20 || *s > 0x7e || *s == '%' || *s == ';' || *s == '=') {
            sb_putc(b, '%');
            sb_putc(b, hex[*s >> 4]);
            sb_putc(b, hex[*s & 15]);
        } else {
            sb_putc(b, (char)*s);
        }
    }
}

void calib_key(char *out, size_t n, const char *device, const char *model_id, const char *drafter_id,
               const char *dtype, int threads) {
    if (!out || n == 0) return;
    char cpu[256], num[32];
    machine_cpu_name(cpu, sizeof cpu);
    sbuf b = {0};
    sb_puts(&b, "dspark-calib");
    sb_field(&b, "backend", device);
    sb_field(&b, "model", model_id);
    sb_field(&b, "drafter", drafter_id);
    sb_field(&b, "dtype", dtype);
    snprintf(num, sizeof num, "%d", threads);
    sb_field(&b, "threads", num);
    sb_field(&b, "cpu", cpu);
    snprintf(num, sizeof num, "%d", cpu_count());
    sb_field(&b, "ncpu", num);
    sb_field(&b, "build", CALIB_BUILD);
    if (b.n < n) {
        memcpy(out, b.p, b.n + 1);
    } else if (n > 18) {
        /* too long: a prefix, '#', and 16 hex digits of the whole key's hash */
        size_t keep = n - 18;
        memcpy(out, b.p, keep);
        snprintf(out + keep, n - keep, "#%016llx", (unsigned long long)ds_fnv1a(DS_FNV_SEED, b.p, b.n));
    } else {
        memcpy(out, b.p, n - 1);
        out[n - 1] = 0;
    }
    free(b.p);
}

/* ---- cache file ---- */

/* Checks one entry; fills *c (and *created when not NULL). 0, or -1 with
   why filled. */
static int parse_entry(const cJSON *e, calib_costs *c, double *created, char *why, size_t whylen) {
    if (!cJSON_IsObject(e)) return ds_err(why, whylen, "entry is not an object");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "verify_s");
    if (!cJSON_IsArray(v)) return ds_err(why, whylen, "\"verify_s\" is not an array");
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > CALIB_MAX_W)
        return ds_err(why, whylen, "\"verify_s\" has %d values, expected 1..%d", n, CALIB_MAX_W);
    memset(c, 0, sizeof *c);
    c->n_w = n;
    int w = 1;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (w > n) break; /* cannot happen for a well-formed array; cheap to guard */
        if (!cJSON_IsNumber(it) || !time_ok(it->valuedouble, 0))
            return ds_err(why, whylen, "\"verify_s\"[%d] is not a time in (0, %g] seconds", w - 1, CALIB_MAX_SECONDS);
        c->verify_s[w++] = it->valuedouble;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(e, "draft_s");
    if (!cJSON_IsNumber(d) || !time_ok(d->valuedouble, 1))
        return ds_err(why, whylen, "\"draft_s\" is not a time in [0, %g] seconds", CALIB_MAX_SECONDS);
    c->draft_s = d->valuedouble;
    /* optional (older entries lack it): drafter seconds per drafted token */
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "draft_tok_s");
    c->draft_tok_s = 0;
    if (dt) {
        if (!cJSON_IsNumber(dt) || !time_ok(dt->valuedouble, 1))
            return ds_err(why, whylen, "\"draft_tok_s\" is not a time in [0, %g] seconds", CALIB_MAX_SECONDS);
        c->draft_tok_s = dt->valuedouble;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "created");
    double tc = 0;
    if (t) {
        if (!cJSON_IsNumber(t) || !isfinite(t->valuedouble) || t->valuedouble < 0 || t->valuedouble > 1e13)
            return ds_err(why, whylen, "\"created\" is not a time stamp");
        tc = t->valuedouble;
    }
    if (created) *created = tc;
    return 0;
}

/* Reads and checks the file's outer shape. Returns 1 with *root (the
   document) and *entries set, 0 when the file does not exist, -1 with why
   filled when it is unusable. */
static int read_cache(const char *path, cJSON **root, const cJSON **entries, char *why, size_t whylen) {
    *root = NULL;
    *entries = NULL;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return ds_err(why, whylen, "%s", strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return ds_err(why, whylen, "not a regular file");
    if ((uintmax_t)st.st_size > CALIB_MAX_FILE)
        return ds_err(why, whylen, "%lld bytes, more than a calibration cache holds", (long long)st.st_size);
    char rerr[256];
    size_t n;
    char *text = ds_read_file(path, &n, rerr, sizeof rerr);
    if (!text) {
        if (!ds_file_exists(path)) return 0; /* removed in between */
        return ds_err(why, whylen, "%s", rerr);
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (doc) { /* cJSON stops at the end of the first value: anything after it but space is damage */
        size_t off = end && end >= text && end <= text + n ? (size_t)(end - text) : n;
        while (off < n && (text[off] == ' ' || text[off] == '\t' || text[off] == '\n' || text[off] == '\r')) off++;
        if (off < n) {
            cJSON_Delete(doc);
            free(text);
            return ds_err(why, whylen, "unexpected data after the JSON value at byte %zu", off);
        }
    } else {
        size_t off = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        free(text);
        return ds_err(why, whylen, "invalid JSON near byte %zu", off);
    }
    free(text);
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return ds_err(why, whylen, "not a JSON object");
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(doc, "version");
    if (!cJSON_IsNumber(ver) || !isfinite(ver->valuedouble) || ver->valuedouble != CALIB_VERSION) {
        if (cJSON_IsNumber(ver) && isfinite(ver->valuedouble) && fabs(ver->valuedouble) < 1e9)
            ds_err(why, whylen, "version %g, expected %d", ver->valuedouble, CALIB_VERSION);
        else
            ds_err(why, whylen, "\"version\" missing or not a number, expected %d", CALIB_VERSION);
        cJSON_Delete(doc);
        return -1;
    }
    const cJSON *ent = cJSON_GetObjectItemCaseSensitive(doc, "entries");
    if (!cJSON_IsObject(ent)) {
        cJSON_Delete(doc);
        return ds_err(why, whylen, "\"entries\" is not an object");
    }
    *root = doc;
    *entries = ent;
    return 1;
}

int calib_load(const char *path, const char *key, calib_costs *out, char *warn, size_t warnlen) {
    if (warn && warnlen) warn[0] = 0;
    char why[300];
    cJSON *root;
    const cJSON *entries;
    int r = read_cache(path, &root, &entries, why, sizeof why);
    if (r == 0) return 0;
    if (r < 0) {
        ds_err(warn, warnlen, "calibration cache %s is corrupt (%s); ignoring it, it will be rewritten", path, why);
        return -1;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(entries, key);
    if (!e) {
        cJSON_Delete(root);
        return 0;
    }
    calib_costs c;
    if (parse_entry(e, &c, NULL, why, sizeof why) != 0) {
        cJSON_Delete(root);
        ds_err(warn, warnlen, "calibration cache %s is corrupt (entry %.200s: %s); ignoring it, it will be rewritten",
               path, key, why);
        return -1;
    }
    cJSON_Delete(root);
    *out = c;
    return 1;
}

/* The shortest of %.15g..%.17g that reads back as exactly x. */
static cJSON *exact_number(double x) {
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    return cJSON_CreateRaw(buf);
}

static cJSON *entry_json(const calib_costs *c, double created) {
    cJSON *e = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    for (int w = 1; w <= c->n_w; w++) cJSON_AddItemToArray(arr, exact_number(c->verify_s[w]));
    cJSON_AddItemToObject(e, "verify_s", arr);
    cJSON_AddItemToObject(e, "draft_s", exact_number(c->draft_s));
    cJSON_AddItemToObject(e, "draft_tok_s", exact_number(c->draft_tok_s));
    cJSON_AddItemToObject(e, "created", exact_number(created));
    return e;
}

/* mkdir -p of path's parent directory */
static int make_parents(const char *path, char *err, size_t errlen) {
    char *p = xstrdup(path);
    char *slash = strrchr(p, '/');
    int rc = 0;
    if (slash && slash != p) {
        *slash = 0;
        for (char *q = p + 1; rc == 0; q++) {
            if (*q != '/' && *q != 0) continue;
            char saved = *q;
            *q = 0;
            struct stat st;
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                rc = ds_err(err, errlen, "cannot create %s: %s", p, strerror(errno));
            else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
                rc = ds_err(err, errlen, "cannot create %s: not a directory", p);
            *q = saved;
            if (!saved) break;
        }
    }
    free(p);
    return rc;
}

static int write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct {
    const char *key;
    calib_costs c;
    double created;
} kept_entry;

static int cmp_newest(const void *a, const void *b) {
    const kept_entry *x = a, *y = b;
    if (x->created != y->created) return x->created < y->created ? 1 : -1;
    return strcmp(x->key, y->key);
}

int calib_store(const char *path, const char *key, const calib_costs *c, char *err, size_t errlen) {
    if (!calib_costs_valid(c)) return ds_err(err, errlen, "calibration: refusing to store invalid costs");
    if (make_parents(path, err, errlen) != 0) return -1;

    /* the other valid entries of the existing file, newest first */
    char why[300];
    cJSON *old;
    const cJSON *entries;
    kept_entry *kept = NULL;
    int n_kept = 0;
    if (read_cache(path, &old, &entries, why, sizeof why) == 1) {
        kept = xmalloc(sizeof *kept * (size_t)(cJSON_GetArraySize(entries) + 1));
        const cJSON *e;
        cJSON_ArrayForEach(e, entries) {
            if (!e->string || strcmp(e->string, key) == 0) continue;
            int dup = 0;
            for (int i = 0; i < n_kept && !dup; i++) dup = strcmp(kept[i].key, e->string) == 0;
            if (dup) continue;
            kept_entry k = {.key = e->string};
            if (parse_entry(e, &k.c, &k.created, why, sizeof why) == 0) kept[n_kept++] = k;
        }
        qsort(kept, (size_t)n_kept, sizeof *kept, cmp_newest);
        if (n_kept > CALIB_MAX_ENTRIES - 1) n_kept = CALIB_MAX_ENTRIES - 1;
    }

    cJSON *doc = cJSON_CreateObject();
    cJSON_AddNumberToObject(doc, "version", CALIB_VERSION);
    cJSON *ent = cJSON_AddObjectToObject(doc, "entries");
    cJSON_AddItemToObject(ent, key, entry_json(c, (double)time(NULL)));
    for (int i = 0; i < n_kept; i++) cJSON_AddItemToObject(ent, kept[i].key, entry_json(&kept[i].c, kept[i].created));
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    free(kept);
    cJSON_Delete(old);
    if (!text) return ds_err(err, errlen, "calibration: cannot serialise the cache");

    size_t plen = strlen(path) + 32;
    char *tmp = xmalloc(plen);
    snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        ds_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    } else {
        size_t tl = strlen(text);
        int ok = write_all(fd, text, tl) == 0 && write_all(fd, "\n", 1) == 0 && fsync(fd) == 0;
        int saved = errno;
        if (close(fd) != 0 && ok) {
            ok = 0;
            saved = errno;
        }
        if (!ok) {
            ds_err(err, errlen, "cannot write %s: %s", tmp, strerror(saved));
            unlink(tmp);
        } else if (rename(tmp, path) != 0) {
            ds_err(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
            unlink(tmp);
        } else {
            rc = 0;
            /* make the rename itself durable; best effort */
            char *dir = xstrdup(path);
            char *slash = strrchr(dir, '/');
            if (slash) {
                if (slash == dir) slash[1] = 0;
                else *slash = 0;
            }
            int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) {
                (void)fsync(dfd);
                close(dfd);
            }
            free(dir);
        }
    }
    free(tmp);
    free(text);
    return rc;
}

/* ---- cap choice ---- */

void calib_prior(double *alpha, int n, double a1, double decay) {
    double a = a1;
    for (int i = 0; i < n; i++) {
        alpha[i] = a != a ? 0 : a < 0 ? 0 : a > 1 ? 1 : a;
        a *= decay;
    }
}

int calib_best_cap(const calib_costs *c, const double *alpha, int max_k, double *tok_per_s) {
    if (!calib_costs_valid(c)) {
        if (tok_per_s) *tok_per_s = 0;
        return 0;
    }
    double best = 1.0 / calib_verify_time(c, 1), e = 1, prod = 1;
    int best_k = 0;
    for (int k = 1; k <= max_k; k++) {
        double a = alpha[k - 1];
        a = a != a ? 0 : a < 0 ? 0 : a > 1 ? 1 : a;
        prod *= a;
        e += prod;
        double r = e / (c->draft_s + c->draft_tok_s * k + calib_verify_time(c, k + 1));
        if (r > best * (1 + 1e-12)) { /* a tie within rounding goes to the smaller cap */
            best = r;
            best_k = k;
        }
    }
    if (tok_per_s) *tok_per_s = best;
    return best_k;
}

/* ---- controller ---- */

void calib_ctl_init(calib_ctl *c, const calib_costs *costs, int max_k) {
    memset(c, 0, sizeof *c);
    c->max_k = max_k < 0 ? 0 : max_k > CALIB_MAX_K ? CALIB_MAX_K : max_k;
    if (costs && calib_costs_valid(costs)) {
        c->costs = *costs;
        c->have_costs = 1;
    }
    c->park_len = CALIB_PARK_MIN;
}

void calib_ctl_estimates(const calib_ctl *c, double *alpha, int n) {
    if (n > c->max_k) n = c->max_k;
    double m = CALIB_PRIOR_A1;
    for (int i = 1; i <= n; i++) {
        double est = (c->acc[i] + CALIB_PRIOR_WEIGHT * m) / (c->reach[i] + CALIB_PRIOR_WEIGHT);
        alpha[i - 1] = est;
        m = CALIB_PRIOR_DECAY * est;
    }
}

/* a parked round: older evidence counts for less, but keeps a weight of at
   least CALIB_PRIOR_WEIGHT where it had that much */
static void age_parked(calib_ctl *c) {
    for (int i = 1; i <= c->max_k; i++) {
        if (c->reach[i] <= CALIB_PRIOR_WEIGHT) continue;
        double r = c->reach[i] * CALIB_FORGET;
        if (r < CALIB_PRIOR_WEIGHT) r = CALIB_PRIOR_WEIGHT;
        c->acc[i] *= r / c->reach[i];
        c->reach[i] = r;
    }
}

static int best_now(const calib_ctl *c) {
    double alpha[CALIB_MAX_K];
    calib_ctl_estimates(c, alpha, c->max_k);
    return calib_best_cap(&c->costs, alpha, c->max_k, NULL);
}

/* starts (or restarts) a park of park_len rounds; this call is its first */
static int park(calib_ctl *c) {
    c->parked = 1;
    c->probe_seen = 0;
    c->park_left = c->park_len - 1;
    age_parked(c);
    return c->cap = 0;
}

int calib_ctl_next(calib_ctl *c) {
    if (c->max_k == 0) return c->cap = 0;
    if (!c->have_costs) return c->cap = c->max_k;
    if (c->parked) {
        if (c->park_left > 0) {
            c->park_left--;
            age_parked(c);
            return c->cap = 0;
        }
        if (!c->probe_seen) return c->cap = c->max_k < CALIB_PROBE_CAP ? c->max_k : CALIB_PROBE_CAP;
        int k = best_now(c);
        if (k == 0) {
            c->park_len = c->park_len * 2 > CALIB_PARK_MAX ? CALIB_PARK_MAX : c->park_len * 2;
            return park(c);
        }
        c->parked = 0;
        c->park_len = CALIB_PARK_MIN;
        return c->cap = k;
    }
    int k = best_now(c);
    if (k == 0) return park(c);
    return c->cap = k;
}

void calib_ctl_observe(calib_ctl *c, int proposed, int accepted) {
    if (proposed <= 0 || c->max_k == 0) return;
    if (proposed > c->max_k) proposed = c->max_k;
    if (accepted < 0) accepted = 0;
    if (accepted > proposed) accepted = proposed;
    for (int i = 1; i <= c->max_k; i++) {
        c->reach[i] *= CALIB_FORGET;
        c->acc[i] *= CALIB_FORGET;
    }
    int reached = accepted + 1 < proposed ? accepted + 1 : proposed;
    for (int i = 1; i <= reached; i++) c->reach[i] += 1;
    for (int i = 1; i <= accepted; i++) c->acc[i] += 1;
    if (c->parked && c->park_left == 0) c->probe_seen = 1;
}
