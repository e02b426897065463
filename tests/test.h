/* test: a minimal test harness. Each TEST registers itself before main
 * runs; CHECK records a failure with file and line and carries on. The
 * runner (tests/main.c) prints "N passed, N failed". */
#ifndef DS_TEST_H
#define DS_TEST_H

#include <math.h>
#include <stdio.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...);
/* Directory holding committed fixtures (tests/data). */
const char *test_data_dir(void);
/* Directory with real tokenizers (qwen3/, llama3/), or NULL with a
 * message printed when they cannot be found. */
const char *test_tokenizer_dir(void);
/* A fresh scratch directory for this test process. */
const char *test_tmp_dir(void);
/* Writes a tiny random-weight Qwen3 checkpoint (the real Qwen3 vocabulary
 * size, 2 layers of width 32) with the real Qwen3 tokenizer files into dir,
 * for tests of the text paths (tokenizer + template + model). Returns 0, or
 * -1 when the real tokenizer is unavailable. */
int test_write_tiny_qwen3(const char *dir);
/* The bundled model with its tokenizer, its two drafters and a 2-thread
 * pool; 0, or -1 after a test failure naming what did not load (what did
 * is left for test_bundled_close). */
struct model;
struct tokenizer;
struct dmodel;
struct tpool;
typedef struct {
    struct model *m;
    struct tokenizer *tok;
    struct dmodel *dflash, *dspark;
    struct tpool *tp;
} test_bundled_set;
int test_bundled_open(test_bundled_set *b);
/* The bundled model's folder (suffix "" ) or one of its drafters' ("-dspark",
 * "-dflash"), into dir. */
void test_bundled_path(char *dir, size_t n, const char *suffix);
/* n prompt ids below V - 200: the first `shared` the same for every seed
 * (from seed 1), the rest from seed, so two prompts share exactly that
 * prefix. */
void test_prompt_ids(int *p, int n, int shared, unsigned seed, int V);
/* A random gemma3 (3 layers, a sliding window of 8 on every other one, 512
 * positions) of Gemma 3's vocabulary, with the test assets' Gemma 3
 * tokenizer and chat template, written into dir (tests/test_families.c).
 * 0, or -1 after a test failure. */
int test_gemma3_tok_model(char *dir, size_t n);
/* A random qwen3_moe (8 experts, top 2, a dense second layer, 1024
 * positions) of Qwen3's vocabulary with Qwen3's tokenizer and chat
 * template, written into dir (tests/test_families.c). 0, or -1 after a
 * test failure. */
int test_moe_tok_model(char *dir, size_t n);
void test_bundled_close(test_bundled_set *b);
/* max |a - ref| / max |ref| over n values, the relative error the logit
 * bounds are stated in (a NaN in a: infinitely far) */
double test_rel_err(const float *a, const float *ref, size_t n);
/* Copies the real Qwen3 tokenizer.json and tokenizer_config.json into dir
 * (created). 0, or -1 when they are unavailable. */
int test_copy_qwen3_tokenizer(const char *dir);
/* Runs `$DSPARK_BIN ARGS` (default ./dspark) and returns its exit code;
 * stdout and stderr into malloc'd strings when out / errtxt are given. */
int test_run_cli(const char *args, char **out, char **errtxt);
/* Saves the n environment variables vars[] into saved[] and unsets them;
 * test_env_restore puts them back (or unsets them) and frees saved[]. */
void test_env_save(const char *const *vars, int n, char **saved);
void test_env_restore(const char *const *vars, int n, char **saved);

#define TEST(name)                                                         \
    static void test_##name(void);                                         \
    __attribute__((constructor)) static void test_reg_##name(void) {       \
        test_register(#name, test_##name);                                 \
    }                                                                      \
    static void test_##name(void)

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);    \
    } while (0)

#define CHECK_MSG(cond, ...)                                               \
    do {                                                                   \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);           \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                 \
    do {                                                                   \
        long long _a = (long long)(a), _b = (long long)(b);                \
        if (_a != _b)                                                      \
            test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, _a, _b); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                              \
    do {                                                                   \
        double _a = (double)(a), _b = (double)(b);                         \
        if (!(fabs(_a - _b) <= (tol)))                                     \
            test_fail(__FILE__, __LINE__, "%s ~= %s: %.9g vs %.9g (tol %g)", #a, #b, _a, _b, (double)(tol)); \
    } while (0)

#endif

/* The scripted Qwen3 checkpoint (tests/scripted.c): the real Qwen3
 * tokenizer and chat template over a 1-layer "bigram machine" whose greedy
 * output is fixed text: after the thinking-on generation prompt
 * "<think>Checking weather...</think><tool_call>{"name":"get_weather",
 * "arguments":{"city": "Paris"}}</tool_call>", after the thinking-off one
 * "Hello from dspark!" (both then <|im_end|>), after a raw prompt ending in
 * " time" "There was a fox." then <|endoftext|>. */
#ifndef DS_TEST_SCRIPTED_H
#define DS_TEST_SCRIPTED_H
/* Writes it into dir; 0, or -1 with a message (tokenizer unavailable, or a
 * script token with two successors). */
int test_write_scripted_qwen3(const char *dir);
/* The checkpoint written once per test process under test_tmp_dir(), or
 * NULL when it could not be written. */
const char *test_scripted_model_dir(void);
#endif
