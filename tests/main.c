/* Test runner: runs every registered TEST (or those whose name contains
 * one of the arguments) and prints "N passed, N failed". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#ifdef DSPARK_CUDA
#include "cuda/cuda_hooks.h"
#endif

#define MAX_TESTS 1024
static struct { const char *name; test_fn fn; } tests[MAX_TESTS];
static int n_tests;
static int cur_failed;
static const char *cur_name;

void test_register(const char *name, test_fn fn) {
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "too many tests\n");
        exit(2);
    }
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    if (cur_failed < 10) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "  FAIL %s (%s:%d): ", cur_name, file, line);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    }
    cur_failed++;
}

const char *test_data_dir(void) {
    const char *d = getenv("DSPARK_TEST_DATA");
    return d ? d : "tests/data";
}

const char *test_tokenizer_dir(void) {
    static char buf[4096];
    const char *cands[3] = {getenv("DSPARK_TOKENIZERS"), NULL, "../shared/assets/tokenizers"};
    const char *home = getenv("HOME");
    if (home) {
        snprintf(buf, sizeof buf, "%s/.cache/dspark/tokenizers", home);
        cands[1] = buf;
    }
    for (int i = 0; i < 3; i++) {
        if (!cands[i]) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/qwen3/tokenizer.json", cands[i]);
        if (access(p, R_OK) == 0) return cands[i];
    }
    fprintf(stderr, "  real tokenizer files not found: run scripts/fetch-test-assets "
                    "(or set DSPARK_TOKENIZERS)\n");
    return NULL;
}

const char *test_tmp_dir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/dspark-test-XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return dir;
}

static int cmp(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return strcmp(x, y);
}

int main(int argc, char **argv) {
    /* calibration (and any other cache) goes to the scratch directory, never
       to the user's ~/.cache, also for the dspark processes tests start */
    setenv("DSPARK_CACHE_DIR", test_tmp_dir(), 1);
#ifdef DSPARK_CUDA
    /* DSPARK_TEST_CUDA_TUNING: the CUDA tuning every model of this run
       takes, as a cu_tuning_parse spec (scripts/test-cuda's groups run the
       same tests under other launch choices this way) */
    const char *tune = getenv("DSPARK_TEST_CUDA_TUNING");
    if (tune && *tune) {
        cu_tuning t;
        char err[256];
        cuda_hook_tuning_get(&t);
        if (cu_tuning_parse(tune, &t, err, sizeof err) != 0) {
            fprintf(stderr, "DSPARK_TEST_CUDA_TUNING: %s\n", err);
            return 2;
        }
        cuda_hook_tuning_set(&t);
    }
#endif
    /* run in name order so output is stable regardless of link order */
    qsort(tests, (size_t)n_tests, sizeof tests[0], cmp);
    int passed = 0, failed = 0;
    for (int i = 0; i < n_tests; i++) {
        int want = argc < 2;
        for (int a = 1; a < argc; a++)
            if (strstr(tests[i].name, argv[a])) want = 1;
        if (!want) continue;
        cur_name = tests[i].name;
        cur_failed = 0;
        tests[i].fn();
        if (cur_failed) {
            failed++;
            fprintf(stderr, "FAIL %s (%d checks)\n", tests[i].name, cur_failed);
        } else {
            passed++;
            printf("ok   %s\n", tests[i].name);
        }
        fflush(stdout);
    }
    if (test_tmp_dir()[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", test_tmp_dir());
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_tmp_dir());
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
