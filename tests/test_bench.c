/* `dspark bench` through the binary: the table and the JSON on the tiny
 * drafter fixtures (synthetic prompts: the target has no tokenizer), the
 * built-in prompts through a real chat template on a tiny Qwen3, a custom
 * --prompt-ids prompt, and the errors for bad flags. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "test.h"
#include "base/util.h"


static const char *drafters(void) {
    static char d[600];
    snprintf(d, sizeof d, "%s/drafters", test_data_dir());
    return d;
}

/* Table rows "| PROMPT | MODE |" in the output. */
static int count_rows(const char *out, const char *prompt, const char *mode) {
    char key[128];
    int n = 0;
    for (const char *p = out; p && *p; p++) {
        if (p != out && p[-1] != '\n') continue;
        if (*p != '|') continue;
        const char *a = p + 1;
        while (*a == ' ') a++;
        size_t lp = strlen(prompt);
        if (strncmp(a, prompt, lp) || a[lp] != ' ') continue;
        a += lp;
        while (*a == ' ') a++;
        snprintf(key, sizeof key, "| %s ", mode);
        if (!strncmp(a, key, strlen(key))) n++;
    }
    return n;
}

static cJSON *read_json(const char *path) {
    char e[256];
    size_t n;
    char *txt = ds_read_file(path, &n, e, sizeof e);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    return j;
}

TEST(bench_drafter_table_and_json) {
    char args[2048], json[700], *out = NULL, *err = NULL;
    snprintf(json, sizeof json, "%s/bench.json", test_tmp_dir());
    snprintf(args, sizeof args, "bench --model %s/target --drafter %s/dspark --trials 2 -n 24 -t 2 --json %s",
             drafters(), drafters(), json);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    CHECK_MSG(out && strstr(out, "dspark bench: model ") && strstr(out, "trials 2") && strstr(out, "n 24") &&
                  strstr(out, "synthetic token ids") && strstr(out, "drafter ") && strstr(out, "(with lookup drafts)") &&
                  strstr(out, "cpu "),
              "header: %s", out ? out : "");
    CHECK_MSG(out && !strstr(out, "MISMATCH") && !strstr(out, "| NO"), "%s", out ? out : "");
    const char *prompts[] = {"ids-mixed", "ids-repeat", "ids-stride"};
    const char *modes[] = {"baseline", "lookup", "dspark"};
    for (int p = 0; p < 3; p++)
        for (int m = 0; m < 3; m++)
            CHECK_MSG(count_rows(out, prompts[p], modes[m]) == 1, "row %s / %s in\n%s", prompts[p], modes[m],
                      out ? out : "");
    /* baseline's row is first for each prompt, the summary has one line per mode */
    /* the summary's row (the cap column is as wide as its widest text) */
    const char *srow = out ? strstr(out, "\n| baseline | -") : NULL;
    const char *eol = srow ? strchr(srow + 1, '\n') : NULL;
    const char *one = srow ? strstr(srow, "|           1.00x | yes") : NULL;
    CHECK_MSG(out && strstr(out, "| ids-mixed  | baseline | -") && one && (!eol || one < eol), "%s", out ? out : "");
    CHECK_MSG(out && strstr(out, "| dspark   | ") && strstr(out, "(calibrated"), "%s", out ? out : "");
    free(out);
    free(err);

    cJSON *j = read_json(json);
    CHECK_MSG(j != NULL, "bench JSON does not parse");
    if (!j) return;
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "trials")->valuedouble, 2);
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "n_predict")->valuedouble, 24);
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "threads")->valuedouble, 2);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "model")) && cJSON_IsString(cJSON_GetObjectItem(j, "drafter")) &&
          cJSON_IsString(cJSON_GetObjectItem(j, "cpu")));
    const char *device = cJSON_GetStringValue(cJSON_GetObjectItem(j, "device"));
    CHECK_MSG(device && !strcmp(device, "cpu"), "bench JSON: device %s, not cpu", device ? device : "missing");
    cJSON *res = cJSON_GetObjectItem(j, "results");
    CHECK_EQ_INT(cJSON_GetArraySize(res), 9);
    cJSON *r;
    int i = 0;
    cJSON_ArrayForEach(r, res) {
        const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(r, "mode"));
        const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(r, "prompt"));
        CHECK_MSG(mode && !strcmp(mode, modes[i % 3]), "result %d mode %s", i, mode ? mode : "");
        CHECK_MSG(prompt && !strcmp(prompt, prompts[i / 3]), "result %d prompt %s", i, prompt ? prompt : "");
        const char *fields[] = {"cap", "cap_source", "tok_s_median", "tok_s", "prefill_tok_s_median",
                                "tokens_per_round", "accept_rate", "speedup", "identical", "n_gen"};
        for (int f = 0; f < 10; f++) CHECK_MSG(cJSON_HasObjectItem(r, fields[f]), "result %d lacks %s", i, fields[f]);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItem(r, "identical")));
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(r, "tok_s")), 2);
        CHECK(cJSON_GetObjectItem(r, "tok_s_median")->valuedouble > 0);
        int n_gen = (int)cJSON_GetObjectItem(r, "n_gen")->valuedouble;
        CHECK_MSG(n_gen >= 1 && n_gen <= 24, "n_gen %d", n_gen);
        if (i % 3 == 0) {
            CHECK_NEAR(cJSON_GetObjectItem(r, "speedup")->valuedouble, 1.0, 1e-12);
            CHECK(cJSON_IsNull(cJSON_GetObjectItem(r, "cap")) && cJSON_IsNull(cJSON_GetObjectItem(r, "accept_rate")));
            CHECK_NEAR(cJSON_GetObjectItem(r, "tokens_per_round")->valuedouble, 1.0, 1e-12);
        } else {
            CHECK(cJSON_GetObjectItem(r, "cap")->valuedouble >= 1);
            const char *src = cJSON_GetStringValue(cJSON_GetObjectItem(r, "cap_source"));
            CHECK_MSG(src && !strncmp(src, "calibrated", 10), "cap_source %s", src ? src : "");
            CHECK(cJSON_GetObjectItem(r, "speedup")->valuedouble > 0);
            CHECK(cJSON_GetObjectItem(r, "tokens_per_round")->valuedouble >= 1);
        }
        i++;
    }
    cJSON *sum = cJSON_GetObjectItem(j, "summary");
    CHECK_EQ_INT(cJSON_GetArraySize(sum), 3);
    i = 0;
    cJSON_ArrayForEach(r, sum) {
        const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(r, "mode"));
        CHECK_MSG(mode && !strcmp(mode, modes[i]), "summary %d mode %s", i, mode ? mode : "");
        CHECK(cJSON_IsTrue(cJSON_GetObjectItem(r, "all_identical")));
        CHECK(cJSON_GetObjectItem(r, "geomean_speedup")->valuedouble > 0);
        if (i == 0) CHECK_NEAR(cJSON_GetObjectItem(r, "geomean_speedup")->valuedouble, 1.0, 1e-12);
        i++;
    }
    cJSON_Delete(j);
}

TEST(bench_modes_list) {
    char args[2048], *out = NULL, *err = NULL;
    /* baseline is added (and run first) when --modes leaves it out */
    snprintf(args, sizeof args, "bench --model %s/target --drafter %s/dflash --modes dflash --trials 1 -n 16 -t 2",
             drafters(), drafters());
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    CHECK_MSG(out && count_rows(out, "ids-mixed", "baseline") == 1 && count_rows(out, "ids-stride", "dflash") == 1 &&
                  !strstr(out, "| lookup"),
              "%s\n%s", out ? out : "", err ? err : "");
    const char *b = out ? strstr(out, "| ids-mixed  | baseline |") : NULL;
    const char *d = out ? strstr(out, "| ids-mixed  | dflash   |") : NULL;
    CHECK_MSG(b && d && b < d, "%s", out ? out : "");
    free(out);
    free(err);
    /* default modes with a DFlash drafter; --max-draft pins every cap */
    snprintf(args, sizeof args, "bench --model %s/target --drafter %s/dflash --trials 1 -n 16 -t 2 --max-draft 3",
             drafters(), drafters());
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    CHECK_MSG(out && count_rows(out, "ids-repeat", "lookup") == 1 && count_rows(out, "ids-repeat", "dflash") == 1 &&
                  strstr(out, "3 (pinned)") && !strstr(out, "calibrated"),
              "%s\n%s", out ? out : "", err ? err : "");
    free(out);
    free(err);
    /* one custom prompt; auto without a drafter is lookup, listed once */
    snprintf(args, sizeof args,
             "bench --model %s/target --modes baseline,lookup,auto --prompt-ids 5,6,7,5,6,7,5,6 --trials 3 -n 20 "
             "--max-draft auto", drafters());
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    CHECK_MSG(out && count_rows(out, "custom", "baseline") == 1 && count_rows(out, "custom", "lookup") == 1 &&
                  !strstr(out, "ids-") && strstr(out, "(auto)") && strstr(out, "trials 3"),
              "%s\n%s", out ? out : "", err ? err : "");
    free(out);
    free(err);
}

TEST(bench_chat_template_prompts) {
    static char dir[600];
    snprintf(dir, sizeof dir, "%s/tiny-qwen3-bench", test_tmp_dir());
    int made = test_write_tiny_qwen3(dir) == 0;
    CHECK_MSG(made, "tiny model could not be written (real tokenizer missing?)");
    if (!made) return;
    char args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "bench --model %s --modes lookup --trials 1 -n 8 -t 2", dir);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    const char *prompts[] = {"chat", "code", "math"};
    for (int p = 0; p < 3; p++)
        CHECK_MSG(out && count_rows(out, prompts[p], "baseline") == 1 && count_rows(out, prompts[p], "lookup") == 1,
                  "%s: %s\n%s", prompts[p], out ? out : "", err ? err : "");
    CHECK_MSG(out && strstr(out, "chat template (enable_thinking=false)") && strstr(out, "drafter none"), "%s",
              out ? out : "");
    free(out);
    free(err);
}

TEST(bench_errors) {
    const char *bad[][2] = {
        {"--modes baseline,bogus", "unknown mode \"bogus\""},
        {"--modes baseline,,lookup", "--modes"},
        {"--trials 0", "--trials expects an integer in [1, 100]"},
        {"--trials 101", "--trials"},
        {"-n 1", "-n must be at least 2"},
        {"--prompt-ids 1,x", "--prompt-ids"},
        {"--temp 0.5", "unknown option \"--temp\""},
        {"--modes dspark", "needs --drafter DIR"},
        {"--modes dspark --drafter %s/dflash", "use --mode dflash"},
        {"-c 20", "leaves no room to generate"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char extra[1024], args[2048], *out = NULL, *err = NULL;
        snprintf(extra, sizeof extra, bad[i][0], drafters());
        snprintf(args, sizeof args, "bench --model %s/target -n 8 --trials 1 %s", drafters(), extra);
        CHECK_MSG(test_run_cli(args, &out, &err) == 1, "%s: should fail", extra);
        CHECK_MSG(err && strstr(err, bad[i][1]), "%s: %s", extra, err ? err : "");
        free(out);
        free(err);
    }
    char *out = NULL;
    CHECK_EQ_INT(test_run_cli("bench --help", &out, NULL), 0);
    CHECK(out && strstr(out, "usage: dspark bench") && strstr(out, "--modes"));
    free(out);
    CHECK_EQ_INT(test_run_cli("--help", &out, NULL), 0);
    CHECK(out && strstr(out, "  bench "));
    free(out);
}
