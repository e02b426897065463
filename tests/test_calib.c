/* Calibration tests: cache keys and paths, the cache file (round trip,
 * other entries kept, corrupt and hostile contents never crash and are
 * replaced by the next store), the cap choice on hand-computed curves, the
 * adaptive controller (growth, parking and probing, empty rounds,
 * determinism), and the verify measurement on the tiny golden model. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "spec/calib.h"
#include "engine/model.h"
#include "spec/seq.h"
#include "test.h"
#include "engine/threadpool.h"
#include "base/util.h"

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static void tmp_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", test_tmp_dir(), name); }

/* t(w)/t(1) of Qwen3-0.6B-shaped bf16 on a 2-vCPU machine (docs/history/benchmarks-log.md, the verify cost before the current kernel): measured at
   w = 1..8, 10, 12, 14, 16; the odd widths 9..15 interpolated between their neighbours */
static const double CPU_RATIO[17] = {0,    1.00, 1.03, 1.17,  1.50, 1.61, 1.84,  2.15, 2.33,
                                     2.58, 2.83, 2.995, 3.16, 3.47, 3.78, 4.005, 4.23};

static calib_costs cpu_curve(double t1, double draft_s) {
    calib_costs c = {.n_w = 16, .draft_s = draft_s};
    for (int w = 1; w <= 16; w++) c.verify_s[w] = t1 * CPU_RATIO[w];
    return c;
}

static int same_costs(const calib_costs *a, const calib_costs *b) {
    if (a->n_w != b->n_w || a->draft_s != b->draft_s || a->draft_tok_s != b->draft_tok_s) return 0;
    for (int w = 1; w <= a->n_w; w++)
        if (a->verify_s[w] != b->verify_s[w]) return 0;
    return 1;
}

/* ---- keys and paths ---- */

TEST(calib_key_fields) {
    char k[CALIB_KEY_MAX], k2[CALIB_KEY_MAX];
    calib_key(k, sizeof k, "cpu", "Qwen/Qwen3-0.6B", "lookup", "bf16", 2);
    const char *want[] = {"dspark-calib;", ";backend=cpu;", ";model=Qwen/Qwen3-0.6B;", ";drafter=lookup;",
                          ";dtype=bf16;", ";threads=2;", ";cpu=", ";ncpu=", ";build="};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) CHECK_MSG(strstr(k, want[i]), "%s lacks %s", k, want[i]);
    /* every field changes the key */
    const char *args[5][4] = {{"cuda", "Qwen/Qwen3-0.6B", "lookup", "bf16"},
                              {"cpu", "Qwen/Qwen3-1.7B", "lookup", "bf16"},
                              {"cpu", "Qwen/Qwen3-0.6B", "dspark-0.6B", "bf16"},
                              {"cpu", "Qwen/Qwen3-0.6B", "lookup", "f32"},
                              {"cpu", "Qwen/Qwen3-0.6B", "lookup", "bf16"}};
    for (int i = 0; i < 5; i++) {
        calib_key(k2, sizeof k2, args[i][0], args[i][1], args[i][2], args[i][3], i == 4 ? 4 : 2);
        CHECK_MSG(strcmp(k, k2) != 0, "variant %d gives the same key", i);
    }
    /* same configuration, same key; NULL and "" drafter are the same target-only entry */
    calib_key(k2, sizeof k2, "cpu", "Qwen/Qwen3-0.6B", "lookup", "bf16", 2);
    CHECK(strcmp(k, k2) == 0);
    calib_key(k, sizeof k, "cpu", "m", NULL, "bf16", 2);
    calib_key(k2, sizeof k2, "cpu", "m", "", "bf16", 2);
    CHECK(strcmp(k, k2) == 0);
    CHECK(strstr(k, ";drafter=;") != NULL);
    /* separators inside values cannot fake another configuration */
    calib_key(k, sizeof k, "cpu", "m;drafter=x", "", "bf16", 2);
    calib_key(k2, sizeof k2, "cpu", "m", "x", "bf16", 2);
    CHECK(strcmp(k, k2) != 0);
    CHECK(strstr(k, "m%3Bdrafter%3Dx") != NULL);
    /* a key too long for the buffer ends in a hash of the whole key */
    char longa[3000], longb[3000], small[200], small2[200];
    memset(longa, 'a', sizeof longa - 1);
    longa[sizeof longa - 1] = 0;
    memcpy(longb, longa, sizeof longb);
    longb[sizeof longb - 2] = 'b';
    calib_key(small, sizeof small, "cpu", longa, "", "bf16", 2);
    calib_key(small2, sizeof small2, "cpu", longb, "", "bf16", 2);
    CHECK_EQ_INT(strlen(small), sizeof small - 1);
    CHECK(small[sizeof small - 18] == '#');
    CHECK(strcmp(small, small2) != 0);
}

static void save_env(const char *name, char **saved) {
    const char *v = getenv(name);
    *saved = v ? xstrdup(v) : NULL;
}

static void restore_env(const char *name, char *saved) {
    if (saved) setenv(name, saved, 1);
    else unsetenv(name);
    free(saved);
}

TEST(calib_default_path) {
    char *s1, *s2, *s3, p[512];
    save_env("DSPARK_CACHE_DIR", &s1);
    save_env("XDG_CACHE_HOME", &s2);
    save_env("HOME", &s3);
    setenv("DSPARK_CACHE_DIR", "/c/d", 1);
    setenv("XDG_CACHE_HOME", "/x", 1);
    setenv("HOME", "/h", 1);
    CHECK(calib_default_path(p, sizeof p) == 0 && strcmp(p, "/c/d/calibration.json") == 0);
    setenv("DSPARK_CACHE_DIR", "", 1); /* empty counts as unset */
    CHECK(calib_default_path(p, sizeof p) == 0 && strcmp(p, "/x/dspark/calibration.json") == 0);
    unsetenv("DSPARK_CACHE_DIR");
    CHECK(calib_default_path(p, sizeof p) == 0 && strcmp(p, "/x/dspark/calibration.json") == 0);
    setenv("XDG_CACHE_HOME", "relative", 1); /* the XDG spec ignores relative paths */
    CHECK(calib_default_path(p, sizeof p) == 0 && strcmp(p, "/h/.cache/dspark/calibration.json") == 0);
    unsetenv("XDG_CACHE_HOME");
    CHECK(calib_default_path(p, sizeof p) == 0 && strcmp(p, "/h/.cache/dspark/calibration.json") == 0);
    CHECK(calib_default_path(p, 10) == -1); /* too small */
    unsetenv("HOME");
    CHECK(calib_default_path(p, sizeof p) == -1);
    restore_env("DSPARK_CACHE_DIR", s1);
    restore_env("XDG_CACHE_HOME", s2);
    restore_env("HOME", s3);
}

/* ---- cache file ---- */

static int count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

TEST(calib_store_load_roundtrip) {
    char dir[512], path[600], err[512], warn[1024];
    tmp_path(dir, sizeof dir, "rt/a/b"); /* parents do not exist yet */
    snprintf(path, sizeof path, "%s/calibration.json", dir);
    calib_costs a = cpu_curve(0.0123456789, 0), b = {.n_w = 3, .draft_s = 1.0 / 3, .draft_tok_s = 0.1 / 3};
    a.verify_s[5] = 0.1; /* values with no short exact decimal form */
    a.verify_s[7] = 1.0 / 7;
    b.verify_s[1] = 5e-7;
    b.verify_s[2] = 2.0 / 3;
    b.verify_s[3] = 9999.999999999998;
    calib_costs got;
    CHECK_EQ_INT(calib_load(path, "A", &got, warn, sizeof warn), 0); /* no file */
    CHECK(warn[0] == 0);
    CHECK(calib_store(path, "A", &a, err, sizeof err) == 0);
    CHECK(calib_store(path, "B \"quoted\" \\ key", &b, err, sizeof err) == 0);
    memset(&got, 0, sizeof got);
    CHECK_EQ_INT(calib_load(path, "A", &got, warn, sizeof warn), 1);
    CHECK(same_costs(&got, &a));
    memset(&got, 0, sizeof got);
    CHECK_EQ_INT(calib_load(path, "B \"quoted\" \\ key", &got, warn, sizeof warn), 1);
    CHECK(same_costs(&got, &b));
    CHECK_EQ_INT(calib_load(path, "C", &got, warn, sizeof warn), 0); /* no entry */
    CHECK(warn[0] == 0);
    /* replacing A keeps B */
    calib_costs a2 = a;
    a2.n_w = 4;
    a2.draft_s = 0.25;
    CHECK(calib_store(path, "A", &a2, err, sizeof err) == 0);
    CHECK_EQ_INT(calib_load(path, "A", &got, warn, sizeof warn), 1);
    CHECK(same_costs(&got, &a2));
    CHECK_EQ_INT(calib_load(path, "B \"quoted\" \\ key", &got, warn, sizeof warn), 1);
    CHECK(same_costs(&got, &b));
    CHECK_EQ_INT(count_tmp_files(dir), 0);
    /* invalid costs are refused, the file is untouched */
    calib_costs bad = a;
    bad.verify_s[2] = -1;
    CHECK(calib_store(path, "A", &bad, err, sizeof err) == -1);
    CHECK_EQ_INT(calib_load(path, "A", &got, warn, sizeof warn), 1);
    CHECK(same_costs(&got, &a2));
    /* the file holds at most CALIB_MAX_ENTRIES entries; the newest stay */
    for (int i = 0; i < CALIB_MAX_ENTRIES + 5; i++) {
        char key[32];
        snprintf(key, sizeof key, "K%d", i);
        CHECK(calib_store(path, key, &b, err, sizeof err) == 0);
    }
    char last[32];
    snprintf(last, sizeof last, "K%d", CALIB_MAX_ENTRIES + 4);
    CHECK_EQ_INT(calib_load(path, last, &got, warn, sizeof warn), 1);
    int n_found = 0;
    const char *all[] = {"A", "B \"quoted\" \\ key"};
    for (int i = 0; i < 2; i++) n_found += calib_load(path, all[i], &got, warn, sizeof warn) == 1;
    for (int i = 0; i < CALIB_MAX_ENTRIES + 5; i++) {
        char key[32];
        snprintf(key, sizeof key, "K%d", i);
        n_found += calib_load(path, key, &got, warn, sizeof warn) == 1;
    }
    CHECK_EQ_INT(n_found, CALIB_MAX_ENTRIES);
}

/* load says -1 with a warning naming the path; a store then writes a file
   that loads */
static void check_corrupt(const char *path, const void *data, size_t n, const char *what) {
    char warn[1024], err[512];
    calib_costs got, c = cpu_curve(0.01, 0.002);
    write_bytes(path, data, n);
    warn[0] = 0;
    int r = calib_load(path, "k", &got, warn, sizeof warn);
    CHECK_MSG(r == -1, "%s: load returned %d", what, r);
    CHECK_MSG(strstr(warn, path) && strstr(warn, "corrupt") && strstr(warn, "rewritten"), "%s: warning '%s'", what,
              warn);
    CHECK_MSG(calib_store(path, "k", &c, err, sizeof err) == 0, "%s: %s", what, err);
    CHECK_MSG(calib_load(path, "k", &got, warn, sizeof warn) == 1 && same_costs(&got, &c), "%s: not rewritten", what);
}

TEST(calib_corrupt_files) {
    char path[600];
    tmp_path(path, sizeof path, "corrupt.json");
    static const char *bad[] = {
        "",
        "   \n",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, 0.2",
        "{\"version\": 1, \"entries\": {",
        "null",
        "[]",
        "[{\"version\": 1, \"entries\": {}}]",
        "42",
        "\"a string\"",
        "{}",
        "{\"version\": 2, \"entries\": {}}",
        "{\"version\": \"1\", \"entries\": {}}",
        "{\"version\": 1e999, \"entries\": {}}",
        "{\"version\": 1}",
        "{\"version\": 1, \"entries\": []}",
        "{\"version\": 1, \"entries\": null}",
        "{\"version\": 1, \"entries\": {\"k\": 3}}",
        "{\"version\": 1, \"entries\": {\"k\": [0.1]}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": \"0.1\", \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": {\"1\": 0.1}, \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, -0.2], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, 0], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, 1e999], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, -1e999], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, 1e300], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, NaN], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, \"0.2\"], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, null], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, [0.2]], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1, true], \"draft_s\": 0}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1]}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1], \"draft_s\": -0.5}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1], \"draft_s\": \"0\"}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1], \"draft_s\": {\"x\": {\"y\": []}}}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1], \"draft_s\": 0, \"created\": \"today\"}}}",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1], \"draft_s\": 0}}} trailing",
        "{\"version\": 1, \"entries\": {\"k\": {\"verify_s\": [0.1], \"draft_s\": 0}}}{}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) check_corrupt(path, bad[i], strlen(bad[i]), bad[i]);

    /* valid JSON followed by a NUL and garbage */
    static const char nul[] = "{\"version\": 1, \"entries\": {}}\0garbage";
    check_corrupt(path, nul, sizeof nul - 1, "NUL after the value");
    /* nesting far deeper than any parser should recurse */
    size_t deep = 200000;
    char *d = xmalloc(deep);
    for (size_t i = 0; i < deep; i++) d[i] = i < deep / 2 ? '[' : ']';
    check_corrupt(path, d, deep, "deep nesting");
    for (size_t i = 0; i < deep; i++) d[i] = "{\"a\":"[i % 5];
    check_corrupt(path, d, deep, "deep objects");
    free(d);
    /* random bytes */
    uint32_t seed = 7;
    for (int t = 0; t < 50; t++) {
        unsigned char buf[600];
        size_t n = 1 + lcg(&seed) % sizeof buf;
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)lcg(&seed);
        buf[0] = (unsigned char)(buf[0] | 0x80); /* never accidentally valid JSON */
        check_corrupt(path, buf, n, "random bytes");
    }
    /* a directory where the file should be */
    char dpath[600], warn[1024];
    calib_costs got;
    tmp_path(dpath, sizeof dpath, "dir.json");
    mkdir(dpath, 0755);
    CHECK_EQ_INT(calib_load(dpath, "k", &got, warn, sizeof warn), -1);
    CHECK(strstr(warn, dpath) != NULL);
    /* a corrupt entry of another key does not spoil ours; the next store drops it */
    char err[512];
    write_text(path, "{\"version\": 1, \"entries\": {\"other\": {\"verify_s\": \"x\"},"
                     " \"k\": {\"verify_s\": [0.5, 0.75], \"draft_s\": 0.125, \"created\": 1}}}");
    CHECK_EQ_INT(calib_load(path, "k", &got, warn, sizeof warn), 1);
    CHECK(got.n_w == 2 && got.verify_s[1] == 0.5 && got.verify_s[2] == 0.75 && got.draft_s == 0.125);
    CHECK_EQ_INT(calib_load(path, "other", &got, warn, sizeof warn), -1);
    CHECK(calib_store(path, "new", &got, err, sizeof err) == 0);
    CHECK_EQ_INT(calib_load(path, "other", &got, warn, sizeof warn), 0);
    CHECK_EQ_INT(calib_load(path, "k", &got, warn, sizeof warn), 1);
}

/* every prefix and many byte flips of a valid file: no crash, and whatever
   loads is valid */
TEST(calib_mangled_files) {
    char path[600], err[512], warn[1024];
    tmp_path(path, sizeof path, "mangled.json");
    calib_costs c = cpu_curve(0.02, 0.001), got;
    CHECK(calib_store(path, "k", &c, err, sizeof err) == 0);
    CHECK(calib_store(path, "k2", &c, err, sizeof err) == 0);
    size_t n;
    char *good = ds_read_file(path, &n, err, sizeof err);
    CHECK(good != NULL);
    if (!good) return;
    char *buf = xmalloc(n + 1);
    int n_ok = 0;
    for (size_t len = 0; len < n; len++) {
        write_bytes(path, good, len);
        int r = calib_load(path, "k", &got, warn, sizeof warn);
        CHECK_MSG(r == -1 || (r == 1 && len + 1 >= n), "prefix %zu: %d", len, r); /* only the final newline may go */
        n_ok += r == 1;
    }
    CHECK(n_ok <= 1);
    uint32_t seed = 99;
    static const char junk[] = "{}[]\",:-+.eE0123456789 \n\\tfnul\x01\xff";
    for (int t = 0; t < 2000; t++) {
        memcpy(buf, good, n);
        int flips = 1 + (int)(lcg(&seed) % 3);
        for (int f = 0; f < flips; f++) buf[lcg(&seed) % n] = junk[lcg(&seed) % (sizeof junk - 1)];
        write_bytes(path, buf, n);
        int r = calib_load(path, "k", &got, warn, sizeof warn);
        CHECK(r >= -1 && r <= 1);
        if (r == 1) CHECK(calib_costs_valid(&got));
        if (r == -1) CHECK(strstr(warn, path) != NULL);
        if (r == 0) CHECK(warn[0] == 0);
    }
    free(buf);
    free(good);
}

/* ---- cap choice ---- */

TEST(calib_best_cap) {
    double alpha[CALIB_MAX_K], tps;
    calib_costs flat = {.n_w = 16}, lin = {.n_w = 16};
    for (int w = 1; w <= 16; w++) {
        flat.verify_s[w] = 0.05;
        lin.verify_s[w] = 0.05 * w;
    }
    /* flat: every extra draft is free, so the cap is max_k, also past the measured widths */
    calib_prior(alpha, CALIB_MAX_K, 0.9, 1.0);
    CHECK(alpha[0] == 0.9 && alpha[CALIB_MAX_K - 1] == 0.9);
    CHECK_EQ_INT(calib_best_cap(&flat, alpha, 8, NULL), 8);
    CHECK_EQ_INT(calib_best_cap(&flat, alpha, 40, NULL), 40);
    /* t(w) = w t(1): k drafts cost k+1 forwards but yield < k+1 tokens */
    CHECK_EQ_INT(calib_best_cap(&lin, alpha, 15, &tps), 0);
    CHECK_NEAR(tps, 20.0, 1e-9);
    calib_prior(alpha, CALIB_MAX_K, 1.0, 1.0); /* even perfect acceptance only ties: ties go to 0 */
    CHECK_EQ_INT(calib_best_cap(&lin, alpha, 15, NULL), 0);

    /* The CPU curve (CPU_RATIO) with the default prior alpha_i = 0.6 * 0.95^(i-1):
     *   alpha = 0.6, 0.57, 0.5415, 0.514425, ...; E(k) = 1 + sum of prefix products
     *   k=0: E 1.000000 / 1.00 = 1.000000
     *   k=1: E 1.600000 / 1.03 = 1.553398
     *   k=2: E 1.942000 / 1.17 = 1.659829   <- best
     *   k=3: E 2.127193 / 1.50 = 1.418129
     *   k=4: E 2.222461 / 1.61 = 1.380411
     *   k=7: E 2.300168 / 2.33 = 0.987196 (and falling) */
    calib_costs cpu = cpu_curve(0.08, 0);
    calib_prior(alpha, CALIB_MAX_K, CALIB_PRIOR_A1, CALIB_PRIOR_DECAY);
    CHECK_NEAR(alpha[3], 0.514425, 1e-12);
    CHECK_EQ_INT(calib_best_cap(&cpu, alpha, 15, &tps), 2);
    CHECK_NEAR(tps, 1.942 / (1.17 * 0.08), 1e-9);
    CHECK_EQ_INT(calib_best_cap(&cpu, alpha, 1, NULL), 1);
    CHECK_EQ_INT(calib_best_cap(&cpu, alpha, 0, &tps), 0);
    CHECK_NEAR(tps, 1 / 0.08, 1e-9);
    /* a drafter round as expensive as half a forward: k=2 gives 1.942 / 1.67 = 1.163 > 1 (k=1: 1.6 / 1.53 = 1.046,
       k=3: 2.127 / 2.0 = 1.064); one as expensive as a forward: 1.942 / 2.17 < 1.6 / 2.03 < 1, so plain decoding */
    cpu.draft_s = 0.5 * 0.08;
    CHECK_EQ_INT(calib_best_cap(&cpu, alpha, 15, NULL), 2);
    cpu.draft_s = 0.08;
    CHECK_EQ_INT(calib_best_cap(&cpu, alpha, 15, NULL), 0);
    /* a cost per drafted token instead: 0.25 forward per draft gives k=1: 1.6 / 1.28 = 1.25, k=2:
       1.942 / 1.67 = 1.163, k=3: 2.127 / 2.25 = 0.945, so k = 1 */
    cpu.draft_s = 0;
    cpu.draft_tok_s = 0.25 * 0.08;
    CHECK_EQ_INT(calib_best_cap(&cpu, alpha, 15, NULL), 1);
    cpu.draft_tok_s = 0;
    cpu.draft_s = 10.0;
    calib_prior(alpha, CALIB_MAX_K, 1.0, 1.0);
    CHECK_EQ_INT(calib_best_cap(&cpu, alpha, 15, NULL), 0);

    /* extrapolation past the measured widths */
    cpu = cpu_curve(1.0, 0);
    CHECK_NEAR(calib_verify_time(&cpu, 16), 4.23, 1e-12);
    CHECK_NEAR(calib_verify_time(&cpu, 20), 4.23 + 4 * (4.23 - 4.005), 1e-9);
    calib_costs one = {.n_w = 1, .verify_s = {0, 0.5}};
    CHECK_NEAR(calib_verify_time(&one, 4), 2.0, 1e-12);
    calib_costs dip = {.n_w = 2, .verify_s = {0, 1.0, 0.9}}; /* a noisy measurement never extrapolates downwards */
    CHECK_NEAR(calib_verify_time(&dip, 5), 0.9, 1e-12);

    /* bad input */
    calib_costs bad = cpu;
    bad.verify_s[3] = 0;
    CHECK(!calib_costs_valid(&bad));
    CHECK_EQ_INT(calib_best_cap(&bad, alpha, 4, &tps), 0);
    CHECK(tps == 0);
    double odd[3] = {NAN, 2.0, -1.0};
    CHECK_EQ_INT(calib_best_cap(&flat, odd, 3, NULL), 0); /* NaN counts as 0: nothing gets accepted */
}

/* ---- controller ---- */

TEST(calib_ctl_grows_on_acceptance) {
    calib_costs cpu = cpu_curve(0.08, 0);
    calib_ctl c;
    calib_ctl_init(&c, &cpu, 8);
    int k = calib_ctl_next(&c);
    CHECK_EQ_INT(k, 2); /* the prior's choice (see calib_best_cap) */
    int prev = k, monotone = 1;
    for (int r = 0; r < 40; r++) {
        calib_ctl_observe(&c, k, k);
        k = calib_ctl_next(&c);
        monotone &= k >= prev;
        prev = k;
    }
    CHECK(monotone);
    CHECK_EQ_INT(k, 8);
    double alpha[8];
    calib_ctl_estimates(&c, alpha, 8);
    for (int i = 0; i < 8; i++) CHECK(alpha[i] > 0.9);
    /* and shrinks again when the text stops matching the drafts after the first */
    for (int r = 0; r < 40; r++) {
        calib_ctl_observe(&c, k, 1);
        k = calib_ctl_next(&c);
    }
    CHECK(k >= 1 && k <= 2);
}

/* calls next until it returns nonzero; returns how many zeros came first */
static int zeros_until_probe(calib_ctl *c, int *cap) {
    int z = 0;
    while ((*cap = calib_ctl_next(c)) == 0 && z < 1000) z++;
    return z;
}

TEST(calib_ctl_parks_and_probes) {
    calib_costs cpu = cpu_curve(0.08, 0.5 * 0.08); /* drafting pays only if acceptance is decent */
    calib_ctl c;
    calib_ctl_init(&c, &cpu, 8);
    int k = calib_ctl_next(&c), rounds = 0;
    CHECK_EQ_INT(k, 2);
    while (k > 0 && rounds < 20) {
        calib_ctl_observe(&c, k, 0);
        k = calib_ctl_next(&c);
        rounds++;
    }
    CHECK_EQ_INT(k, 0);
    CHECK(rounds <= 3);
    CHECK(c.parked);
    /* 8 parked rounds in all (the one just returned included), then a probe */
    int cap, z = zeros_until_probe(&c, &cap);
    CHECK_EQ_INT(z + 1, CALIB_PARK_MIN);
    CHECK(cap >= 1 && cap <= CALIB_PROBE_CAP);
    /* a probe the drafter could not fill is repeated, not counted */
    calib_ctl_observe(&c, 0, 0);
    CHECK_EQ_INT(calib_ctl_next(&c), cap);
    calib_ctl_observe(&c, 0, 0);
    CHECK_EQ_INT(calib_ctl_next(&c), cap);
    /* losing probes double the park, up to CALIB_PARK_MAX */
    int want = CALIB_PARK_MIN;
    for (int i = 0; i < 6; i++) {
        calib_ctl_observe(&c, cap, 0);
        want = want * 2 > CALIB_PARK_MAX ? CALIB_PARK_MAX : want * 2;
        z = zeros_until_probe(&c, &cap);
        CHECK_EQ_INT(z, want);
        CHECK(cap >= 1 && cap <= CALIB_PROBE_CAP);
    }
    CHECK_EQ_INT(want, CALIB_PARK_MAX);
    /* the text turns draftable: winning probes unpark within a few probes */
    int unparked = 0;
    for (int i = 0; i < 4 && !unparked; i++) {
        calib_ctl_observe(&c, cap, cap);
        k = calib_ctl_next(&c);
        if (k > 0) unparked = 1;
        else zeros_until_probe(&c, &cap);
    }
    CHECK(unparked);
    CHECK(!c.parked);
    CHECK_EQ_INT(c.park_len, CALIB_PARK_MIN);
    /* and acceptance keeps it going */
    for (int r = 0; r < 30; r++) {
        calib_ctl_observe(&c, k, k);
        k = calib_ctl_next(&c);
        CHECK(k > 0);
    }
}

TEST(calib_ctl_empty_rounds) {
    /* rounds in which the drafter proposes nothing carry no information: they neither park the controller nor
       change its caps */
    calib_costs cpu = cpu_curve(0.08, 0.5 * 0.08);
    calib_ctl a, b;
    calib_ctl_init(&a, &cpu, 8);
    calib_ctl_init(&b, &cpu, 8);
    for (int r = 0; r < 500; r++) {
        CHECK_EQ_INT(calib_ctl_next(&a), 2);
        calib_ctl_observe(&a, 0, 0);
    }
    double alpha[8], prior[8];
    calib_ctl_estimates(&a, alpha, 8);
    calib_prior(prior, 8, CALIB_PRIOR_A1, CALIB_PRIOR_DECAY);
    for (int i = 0; i < 8; i++) CHECK_NEAR(alpha[i], prior[i], 1e-15);
    /* the same informative rounds with and without empty rounds in between give the same caps */
    calib_ctl_init(&a, &cpu, 8);
    uint32_t seed = 5;
    int n_parked = 0;
    for (int r = 0; r < 300; r++) {
        int ka = calib_ctl_next(&a), kb = calib_ctl_next(&b);
        CHECK_EQ_INT(ka, kb);
        n_parked += ka == 0;
        if (kb > 0) /* b also gets rounds in which the drafter found nothing; they change nothing */
            for (int e = 0; e < (int)(lcg(&seed) % 3); e++) {
                calib_ctl_observe(&b, 0, 0);
                CHECK_EQ_INT(calib_ctl_next(&b), kb);
            }
        int acc = ka ? (int)(lcg(&seed) % (unsigned)(ka + 1)) : 0;
        calib_ctl_observe(&a, ka, acc);
        calib_ctl_observe(&b, kb, acc);
    }
    CHECK(n_parked > 0); /* the sequence went through parks and probes too */
    /* a drafter proposing fewer than the cap: only what it proposed counts */
    calib_ctl_init(&a, &cpu, 8);
    for (int r = 0; r < 30; r++) {
        calib_ctl_next(&a);
        calib_ctl_observe(&a, 1, 1);
    }
    calib_ctl_estimates(&a, alpha, 8);
    CHECK(alpha[0] > 0.9);
    CHECK(a.reach[2] == 0 && a.acc[2] == 0);
}

TEST(calib_ctl_deterministic) {
    calib_costs cpu = cpu_curve(0.08, 0.3 * 0.08);
    calib_ctl a, b;
    calib_ctl_init(&a, &cpu, 12);
    calib_ctl_init(&b, &cpu, 12);
    uint32_t seed = 11;
    int n_parked = 0, n_big = 0;
    for (int r = 0; r < 3000; r++) {
        int ka = calib_ctl_next(&a), kb = calib_ctl_next(&b);
        CHECK_EQ_INT(ka, kb);
        CHECK(ka >= 0 && ka <= 12);
        n_parked += ka == 0;
        n_big += ka >= 8; /* caps settle where the curve bends: 5, 7, 11 (t(13)/t(12) jumps) */
        /* phases: a good drafter, a useless one, a good one again */
        int phase = (r / 600) % 3 == 1;
        int prop = ka && lcg(&seed) % 4 == 0 ? (int)(lcg(&seed) % (unsigned)(ka + 1)) : ka, acc = 0;
        while (acc < prop && (int)(lcg(&seed) % 100) < (phase ? 5 : 97)) acc++;
        calib_ctl_observe(&a, prop, acc);
        calib_ctl_observe(&b, prop, acc);
    }
    CHECK(n_parked > 0);
    CHECK(n_big > 0);
    /* degenerate configurations */
    calib_ctl_init(&a, &cpu, 0);
    CHECK_EQ_INT(calib_ctl_next(&a), 0);
    calib_ctl_observe(&a, 3, 3);
    CHECK_EQ_INT(calib_ctl_next(&a), 0);
    calib_ctl_init(&a, NULL, 5);
    CHECK_EQ_INT(calib_ctl_next(&a), 5);
    calib_ctl_init(&a, &cpu, 1000);
    CHECK_EQ_INT(a.max_k, CALIB_MAX_K);
}

/* ---- measurement ---- */

TEST(calib_measure_verify) {
    char dir[600], err[512];
    snprintf(dir, sizeof dir, "%s/models/qwen3-bf16", test_data_dir());
    model *m;
    if (model_load(&m, dir, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    tpool *tp = tp_create(2);
    seq *s;
    CHECK(seq_create(&s, m, 0, 8, tp, err, sizeof err) == 0); /* max_batch 8 < 16: chunked verifies work too */
    float *logits = xmalloc(sizeof(float) * (size_t)model_cfg(m)->vocab_size);
    int prompt[5] = {1, 2, 3, 4, 5};
    CHECK(seq_prefill(s, prompt, 5, logits, err, sizeof err) == 5); /* measure starts from whatever s holds */
    calib_costs c;
    memset(&c, 0xff, sizeof c);
    CHECK_MSG(calib_measure_verify(s, CALIB_MAX_W, 32, CALIB_DEFAULT_REPS, &c, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(c.n_w, CALIB_MAX_W);
    for (int w = 1; w <= c.n_w; w++) CHECK(isfinite(c.verify_s[w]) && c.verify_s[w] > 0);
    CHECK(c.draft_s == 0);
    CHECK(calib_costs_valid(&c));
    CHECK_EQ_INT(seq_len(s), 0);
    /* bad arguments fail cleanly and leave s usable */
    CHECK(calib_measure_verify(s, 0, 32, 1, &c, err, sizeof err) == -1);
    CHECK(calib_measure_verify(s, CALIB_MAX_W + 1, 32, 1, &c, err, sizeof err) == -1);
    CHECK(calib_measure_verify(s, 4, 32, 0, &c, err, sizeof err) == -1);
    CHECK(calib_measure_verify(s, 4, 0, 1, &c, err, sizeof err) == -1);
    CHECK(calib_measure_verify(s, 4, seq_capacity(s) - 3, 1, &c, err, sizeof err) == -1);
    CHECK(strstr(err, "window") != NULL);
    CHECK(calib_measure_verify(s, 4, seq_capacity(s) - 4, 1, &c, err, sizeof err) == 0); /* exactly fits */
    CHECK_EQ_INT(seq_len(s), 0);
    CHECK(seq_prefill(s, prompt, 5, logits, err, sizeof err) == 5);
    free(logits);
    seq_free(s);
    tp_free(tp);
    model_free(m);
}
