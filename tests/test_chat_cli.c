/* The chat paths end to end through the binary: `template`, `run --chat`
 * and `chat` with piped input (multi-turn with KV reuse, /stats, /save,
 * /load, /reset), on a tiny random Qwen3 model with the real tokenizer and
 * chat template. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"
#include "base/util.h"

static const char *bin(void) {
    const char *b = getenv("DSPARK_BIN");
    return b ? b : "./dspark";
}

static const char *tiny(void) {
    static char dir[600];
    static int made;
    if (!made) {
        snprintf(dir, sizeof dir, "%s/tiny-qwen3", test_tmp_dir());
        made = test_write_tiny_qwen3(dir) == 0 ? 1 : -1;
    }
    return made == 1 ? dir : NULL;
}

/* Runs a shell command line, captures stdout; returns the exit code. */
static int sh(const char *cmdline, char **out) {
    char path[600], cmd[8192], e[256];
    snprintf(path, sizeof path, "%s/sh.out", test_tmp_dir());
    snprintf(cmd, sizeof cmd, "%s >%s 2>&1", cmdline, path);
    int st = system(cmd);
    size_t n;
    *out = ds_read_file(path, &n, e, sizeof e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(chat_template_command) {
    const char *d = tiny();
    CHECK_MSG(d != NULL, "tiny model could not be written (real tokenizer missing?)");
    if (!d) return;
    char f[700], cmd[4096], *out = NULL;
    snprintf(f, sizeof f, "%s/msgs.json", test_tmp_dir());
    FILE *fp = fopen(f, "w");
    fputs("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi 你好\"}]", fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "%s template --model %s --messages %s --var enable_thinking=false", bin(), d, f);
    CHECK_EQ_INT(sh(cmd, &out), 0);
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 你好<|im_end|>\n"
                       "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK_MSG(out && !strcmp(out, want), "got [%s]", out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "%s template --model %s --messages %s --no-generation-prompt", bin(), d, f);
    CHECK_EQ_INT(sh(cmd, &out), 0);
    CHECK_MSG(out && !strcmp(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 你好<|im_end|>\n"),
              "got [%s]", out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "%s template --model %s --messages /nonexistent.json", bin(), d);
    CHECK(sh(cmd, &out) != 0);
    CHECK(out && strstr(out, "/nonexistent.json"));
    free(out);
}

TEST(chat_run_with_template) {
    const char *d = tiny();
    if (!d) return;
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s run --model %s --prompt 'Hello' --chat --no-thinking -n 5 --print-ids -t 1", bin(), d);
    CHECK_EQ_INT(sh(cmd, &out), 0);
    /* <|im_start|> user \n Hello <|im_end|> \n <|im_start|> assistant \n <think> \n\n </think> \n\n:
       13 tokens, no BOS (apply_chat_template adds no special tokens) */
    CHECK_MSG(out && strstr(out, "stamp: prompt 13 tok"), "%s", out ? out : "");
    free(out);
}

TEST(chat_interactive_piped) {
    const char *d = tiny();
    if (!d) return;
    char cmd[4096], save[700], *out = NULL;
    snprintf(save, sizeof save, "%s/convo.json", test_tmp_dir());
    snprintf(cmd, sizeof cmd,
             "printf 'Hello there\\n/stats\\nAnd again\\n/stats\\n/save %s\\n/reset\\n/stats\\n/load %s\\n"
             "/bogus\\n/exit\\n' | %s chat --model %s -n 6 -t 1 --no-thinking",
             save, save, bin(), d);
    CHECK_EQ_INT(sh(cmd, &out), 0);
    CHECK_MSG(out && strstr(out, "(saved 4 messages"), "%s", out ? out : "");
    CHECK(out && strstr(out, "(loaded 4 messages"));
    CHECK(out && strstr(out, "(conversation cleared)"));
    CHECK(out && strstr(out, "unknown command /bogus"));
    CHECK(out && !strstr(out, "speculative:")); /* baseline mode reports no verify rounds */
    /* the second turn reuses the first turn's tokens from the KV cache */
    const char *s1 = out ? strstr(out, "last turn: prompt ") : NULL;
    const char *s2 = s1 ? strstr(s1 + 1, "last turn: prompt ") : NULL;
    int p1 = 0, r1 = -1, p2 = 0, r2 = 0;
    if (s1) sscanf(s1, "last turn: prompt %d tokens (%d reused", &p1, &r1);
    if (s2) sscanf(s2, "last turn: prompt %d tokens (%d reused", &p2, &r2);
    CHECK_MSG(s1 && s2 && r1 == 0 && p2 > p1 && r2 > 0 && r2 < p2, "turn 1: %d (%d reused), turn 2: %d (%d reused)",
              p1, r1, p2, r2);
    free(out);
}

TEST(chat_template_command_keeps_floats) {
    /* Python's json.loads keeps 3.0 a float and the template prints it so */
    char f[700], cmd[4096], *out = NULL;
    snprintf(f, sizeof f, "%s/floats.json", test_tmp_dir());
    FILE *fp = fopen(f, "w");
    fputs("[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":"
          "\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":3.0,\"b\":2,\"c\":1e3}}}]}]",
          fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "%s template --model %s/templates/qwen3 --messages %s --no-generation-prompt", bin(),
             test_data_dir(), f);
    CHECK_EQ_INT(sh(cmd, &out), 0);
    CHECK_MSG(out && strstr(out, "{\"name\": \"f\", \"arguments\": {\"a\": 3.0, \"b\": 2, \"c\": 1000.0}}"), "got %s",
              out ? out : "");
    free(out);
}

TEST(chat_lookup_mode_same_answers) {
    /* the lookup drafter must not change what chat answers (greedy) */
    const char *d = tiny();
    if (!d) return;
    char cmd[4096], *base = NULL, *spec = NULL;
    const char *in = "printf 'Say the alphabet twice\\nAgain please\\n/exit\\n'";
    snprintf(cmd, sizeof cmd, "%s | %s chat --model %s -n 40 -t 1 --no-thinking", in, bin(), d);
    CHECK_EQ_INT(sh(cmd, &base), 0);
    snprintf(cmd, sizeof cmd, "%s | %s chat --model %s -n 40 -t 1 --no-thinking --mode lookup --max-draft 4", in,
             bin(), d);
    CHECK_EQ_INT(sh(cmd, &spec), 0);
    CHECK_MSG(base && spec && !strcmp(base, spec), "baseline:\n%s\nlookup:\n%s", base ? base : "", spec ? spec : "");
    free(base);
    free(spec);
    snprintf(cmd, sizeof cmd, "%s | %s chat --model %s --mode dflash 2>&1", in, bin(), d);
    CHECK(sh(cmd, &spec) != 0);
    CHECK_MSG(spec && strstr(spec, "needs --drafter"), "%s", spec ? spec : "");
    free(spec);
}
