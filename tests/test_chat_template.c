/* test_chat_template: loading chat templates (string, named list,
 * chat_template.jinja, bos/eos forms) and byte-identical conformance with
 * Python Jinja2 as transformers configures it, over the golden fixtures in
 * tests/data/templates/<family>/ made by tools/gen_template_golden.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/chat_template.h"
#include "text/jinja.h"
#include "test.h"
#include "base/util.h"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* The generator renders strftime_now(fmt) as "@@strftime_now(FMT)@@" so the
 * fixtures do not depend on the day; put in today's local date as ours does. */
static char *subst_now(const char *want) {
    const char *tag = "@@strftime_now(";
    size_t cap = strlen(want) + 1, n = 0;
    char *o = xmalloc(cap);
    const char *p = want, *q;
    while ((q = strstr(p, tag)) != NULL) {
        const char *fe = strstr(q + strlen(tag), ")@@");
        if (!fe) break;
        char fmt[64], val[128];
        size_t fl = (size_t)(fe - q) - strlen(tag);
        if (fl >= sizeof fmt) break;
        memcpy(fmt, q + strlen(tag), fl);
        fmt[fl] = 0;
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        size_t vl = strftime(val, sizeof val, fmt, &tmv);
        cap += vl;
        o = xrealloc(o, cap);
        memcpy(o + n, p, (size_t)(q - p));
        n += (size_t)(q - p);
        memcpy(o + n, val, vl);
        n += vl;
        p = fe + 3;
    }
    strcpy(o + n, p);
    return o;
}

/* Returns the number of cases that matched; *total gets the count. */
static int run_family(const char *family, int *total) {
    char dir[1024], path[1200], err[1024];
    snprintf(dir, sizeof dir, "%s/templates/%s", test_data_dir(), family);
    *total = 0;
    chat_template *t = NULL;
    int rc = chat_template_load(&t, dir, err, sizeof err);
    CHECK_MSG(rc == 0, "%s: load: %s", family, err);
    if (rc) return 0;
    size_t n1, n2;
    snprintf(path, sizeof path, "%s/cases.jsonl", dir);
    char *cases = ds_read_file(path, &n1, err, sizeof err);
    snprintf(path, sizeof path, "%s/expected.jsonl", dir);
    char *exp = ds_read_file(path, &n2, err, sizeof err);
    CHECK_MSG(cases && exp, "%s: fixtures missing: %s", family, err);
    int ok = 0;
    char *sc = NULL, *se = NULL;
    for (char *lc = cases ? strtok_r(cases, "\n", &sc) : NULL, *le = exp ? strtok_r(exp, "\n", &se) : NULL; lc && le;
         lc = strtok_r(NULL, "\n", &sc), le = strtok_r(NULL, "\n", &se)) {
        (*total)++;
        cJSON *c = jinja_json_parse(lc), *e = cJSON_Parse(le);
        CHECK_MSG(c && e, "%s case %d: bad fixture line", family, *total);
        if (!c || !e) { cJSON_Delete(c); cJSON_Delete(e); continue; }
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
        char *out = NULL;
        size_t olen = 0;
        err[0] = 0;
        int r = chat_template_render(t, cJSON_GetObjectItemCaseSensitive(c, "messages"),
                                     cJSON_IsArray(tools) ? tools : NULL,
                                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
                                     cJSON_GetObjectItemCaseSensitive(c, "extra"), &out, &olen, err, sizeof err);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(e, "text");
        const cJSON *eerr = cJSON_GetObjectItemCaseSensitive(e, "error");
        const cJSON *etype = cJSON_GetObjectItemCaseSensitive(e, "type");
        if (cJSON_IsString(text)) {
            char *want = subst_now(text->valuestring);
            if (r != 0) test_fail(__FILE__, __LINE__, "%s case %d: render failed: %s", family, *total, err);
            else if (olen != strlen(want) || memcmp(out, want, olen) != 0) {
                size_t i = 0;
                while (i < olen && want[i] && out[i] == want[i]) i++;
                test_fail(__FILE__, __LINE__, "%s case %d: differs at byte %zu: got \"%.60s\" want \"%.60s\"", family,
                          *total, i, out + i, want + i);
            } else ok++;
            free(want);
        } else {
            /* Jinja2 raised: we must fail too, and raise_exception's message must come through */
            if (r == 0) test_fail(__FILE__, __LINE__, "%s case %d: rendered but Jinja2 raised %s", family, *total,
                                  cJSON_IsString(eerr) ? eerr->valuestring : "?");
            else if (cJSON_IsString(etype) && !strcmp(etype->valuestring, "TemplateError") && cJSON_IsString(eerr) &&
                     !strstr(err, eerr->valuestring))
                test_fail(__FILE__, __LINE__, "%s case %d: error \"%s\" lacks \"%s\"", family, *total, err,
                          eerr->valuestring);
            else ok++;
        }
        free(out);
        cJSON_Delete(c);
        cJSON_Delete(e);
    }
    free(cases);
    free(exp);
    chat_template_free(t);
    return ok;
}

static void family_test(const char *family) {
    int total = 0;
    int ok = run_family(family, &total);
    CHECK_MSG(total >= 50, "%s: only %d cases", family, total);
    CHECK_MSG(ok == total, "%s: %d/%d cases identical", family, ok, total);
}

TEST(chat_template_qwen3_golden) { family_test("qwen3"); }
TEST(chat_template_llama3_golden) { family_test("llama3"); }
TEST(chat_template_llama3_1_golden) { family_test("llama3_1"); }
TEST(chat_template_gemma3_golden) { family_test("gemma3"); }
TEST(chat_template_deepseek_v3_golden) { family_test("deepseek_v3"); }
TEST(chat_template_qwen2_5_golden) { family_test("qwen2_5"); }
TEST(chat_template_llama3_2_golden) { family_test("llama3_2"); }
TEST(chat_template_mistral_nemo_golden) { family_test("mistral_nemo"); }
TEST(chat_template_qwen3_coder_golden) { family_test("qwen3_coder"); }
TEST(chat_template_gpt_oss_golden) { family_test("gpt_oss"); }
TEST(chat_template_granite4_golden) { family_test("granite4"); }
TEST(chat_template_phi3_5_golden) { family_test("phi3_5"); }

TEST(chat_template_real_tokenizer_dirs) {
    const char *td = test_tokenizer_dir();
    if (!td) return;
    const char *fams[] = {"qwen3", "llama3"};
    for (int i = 0; i < 2; i++) {
        char dir[1024], err[512];
        snprintf(dir, sizeof dir, "%s/%s", td, fams[i]);
        chat_template *t = NULL;
        int rc = chat_template_load(&t, dir, err, sizeof err);
        CHECK_MSG(rc == 0, "%s: %s", dir, err);
        if (rc) continue;
        cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"Hi\"}]");
        char *out = NULL;
        rc = chat_template_render(t, msgs, NULL, 1, NULL, &out, NULL, err, sizeof err);
        CHECK_MSG(rc == 0 && out && strstr(out, "Hi"), "%s: %s", dir, err);
        free(out);
        cJSON_Delete(msgs);
        chat_template_free(t);
    }
}

TEST(chat_template_load_forms) {
    char dir[1024], path[1200], err[512];
    snprintf(dir, sizeof dir, "%s/ct_forms", test_tmp_dir());
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);

    /* named list: tool_use preferred when tools are given; bos as {"content": ...} */
    write_file(path, "{\"bos_token\":{\"content\":\"<s>\"},\"eos_token\":\"</s>\",\"chat_template\":["
                     "{\"name\":\"default\",\"template\":\"D{{ bos_token }}{{ messages|length }}\"},"
                     "{\"name\":\"tool_use\",\"template\":\"T{{ tools|length }}{{ eos_token }}\"}]}");
    chat_template *t = NULL;
    CHECK(chat_template_load(&t, dir, err, sizeof err) == 0);
    if (t) {
        CHECK(!strcmp(chat_template_bos(t), "<s>"));
        CHECK(!strcmp(chat_template_eos(t), "</s>"));
        cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"x\"}]");
        cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
        char *out = NULL;
        CHECK(chat_template_render(t, msgs, NULL, 0, NULL, &out, NULL, err, sizeof err) == 0);
        CHECK(out && !strcmp(out, "D<s>1"));
        free(out);
        out = NULL;
        CHECK(chat_template_render(t, msgs, tools, 0, NULL, &out, NULL, err, sizeof err) == 0);
        CHECK(out && !strcmp(out, "T1</s>"));
        free(out);
        cJSON_Delete(msgs);
        cJSON_Delete(tools);
        chat_template_free(t);
    }

    /* extra keyword variables, tools/documents none, add_generation_prompt */
    write_file(path, "{\"chat_template\":\"{{ enable_thinking }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ bos_token }}\"}");
    t = NULL;
    CHECK(chat_template_load(&t, dir, err, sizeof err) == 0);
    if (t) {
        cJSON *msgs = cJSON_Parse("[]"), *extra = cJSON_Parse("{\"enable_thinking\":false}");
        char *out = NULL;
        CHECK(chat_template_render(t, msgs, NULL, 1, extra, &out, NULL, err, sizeof err) == 0);
        CHECK_MSG(out && !strcmp(out, "False|None|None|True|"), "got %s", out ? out : err);
        free(out);
        cJSON_Delete(msgs);
        cJSON_Delete(extra);
        chat_template_free(t);
    }

    /* chat_template.jinja wins over the config */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    write_file(path, "J{{ messages[0].content }}\n");
    t = NULL;
    CHECK(chat_template_load(&t, dir, err, sizeof err) == 0);
    if (t) {
        cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"x\"}]");
        char *out = NULL;
        CHECK(chat_template_render(t, msgs, NULL, 0, NULL, &out, NULL, err, sizeof err) == 0);
        CHECK(out && !strcmp(out, "Jx"));
        free(out);
        cJSON_Delete(msgs);
        chat_template_free(t);
    }
    remove(path);

    /* no template: 1; bad template: -1 with line:column */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_file(path, "{\"eos_token\":\"x\"}");
    t = NULL;
    CHECK(chat_template_load(&t, dir, err, sizeof err) == 1);
    CHECK(t == NULL);
    write_file(path, "{\"chat_template\":\"ok\\n{% for x in y %}\"}");
    CHECK(chat_template_load(&t, dir, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, ":2:") != NULL, "err: %s", err);
    write_file(path, "{\"chat_template\":\"{{ raise_exception('No system role') }}\"}");
    CHECK(chat_template_load(&t, dir, err, sizeof err) == 0);
    if (t) {
        cJSON *msgs = cJSON_Parse("[]");
        char *out = NULL;
        CHECK(chat_template_render(t, msgs, NULL, 0, NULL, &out, NULL, err, sizeof err) == -1);
        CHECK_MSG(strstr(err, "No system role") && strstr(err, ":1:"), "err: %s", err);
        CHECK(out == NULL);
        cJSON_Delete(msgs);
        chat_template_free(t);
    }
    write_file(path, "{\"chat_template\": 5}");
    CHECK(chat_template_load(&t, dir, err, sizeof err) == -1);
}
