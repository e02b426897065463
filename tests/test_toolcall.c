/* Tool-call parsing tests: each format (hermes, xml, llama3, mistral,
 * pythonic, gemma) with single and multiple calls compared to literal
 * names and argument JSON, the text around calls, schema typing and
 * positional arguments, malformed and truncated blocks (no calls, text
 * unchanged), call ids, the streaming gate (markers and UTF-8 split across
 * 1-byte pushes, withheld tails, held text) and format detection on real
 * chat templates. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "text/chat_template.h"
#include "spec/registry.h"
#include "base/strbuf.h"
#include "test.h"
#include "server/toolcall.h"
#include "base/util.h"

#define CHECK_STR(a, b)                                                                          \
    do {                                                                                         \
        const char *_a = (a), *_b = (b);                                                         \
        if (!_a || strcmp(_a, _b) != 0)                                                          \
            test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, _a ? _a : "(null)", _b); \
    } while (0)

/* Call i of r is name(args). */
#define CHECK_CALL(r, i, nm, args)                                                               \
    do {                                                                                         \
        if ((r).n <= (i)) {                                                                      \
            test_fail(__FILE__, __LINE__, "no call %d (n = %d)", (i), (r).n);                    \
        } else {                                                                                 \
            CHECK_STR((r).calls[i].name, nm);                                                    \
            CHECK_STR((r).calls[i].arguments, args);                                             \
        }                                                                                        \
    } while (0)

static const char kTools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"location\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"metric\":{\"type\":\"boolean\"},"
    "\"ratio\":{\"type\":\"number\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"opts\":{\"type\":\"object\"},\"zip\":{\"type\":\"string\"},\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"location\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\"}}}}}]";

static cJSON *tools(void) { return cJSON_Parse(kTools); }

static void parse(tc_format f, const char *text, const cJSON *t, tc_result *r) {
    tc_parse(f, text, strlen(text), t, r);
}

/* Parses text expecting no calls and the text back unchanged. */
static int unchanged(tc_format f, const char *text, const cJSON *t) {
    tc_result r;
    parse(f, text, t, &r);
    int ok = r.n == 0 && r.calls == NULL && r.text && strcmp(r.text, text) == 0;
    tc_result_free(&r);
    return ok;
}

static int id_ok(const char *id) {
    if (strlen(id) != 29 || strncmp(id, "call_", 5) != 0) return 0;
    for (int i = 5; i < 29; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return 0;
    return 1;
}

/* ---- format detection ---- */

static tc_format format_of_dir(const char *dir) {
    char err[512];
    chat_template *t = NULL;
    int rc = chat_template_load(&t, dir, err, sizeof err);
    CHECK_MSG(rc == 0, "%s: %s", dir, err);
    if (rc) return (tc_format)-1;
    tc_format f = tc_format_for_template(chat_template_source(t));
    chat_template_free(t);
    return f;
}

TEST(toolcall_format_real_templates) {
    const char *td = test_tokenizer_dir();
    char dir[1200];
    if (td) {
        snprintf(dir, sizeof dir, "%s/qwen3", td);
        CHECK_EQ_INT(format_of_dir(dir), TC_HERMES);
        /* the Llama 3(.0) template shows no tool-call syntax at all */
        snprintf(dir, sizeof dir, "%s/llama3", td);
        CHECK_EQ_INT(format_of_dir(dir), TC_NONE);
    }
    /* the bundled model's template is plain ChatML */
    snprintf(dir, sizeof dir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    CHECK_EQ_INT(format_of_dir(dir), TC_NONE);
    static const struct { const char *fam; tc_format f; } fams[] = {
        {"qwen3", TC_HERMES},       {"qwen2_5", TC_HERMES},  {"granite4", TC_HERMES},
        {"qwen3_coder", TC_XML},    {"llama3_1", TC_LLAMA3}, {"llama3_2", TC_LLAMA3},
        {"mistral_nemo", TC_MISTRAL}, {"llama3", TC_NONE},   {"gemma3", TC_NONE},
        {"phi3_5", TC_NONE},        {"deepseek_v3", TC_NONE}, {"gpt_oss", TC_NONE}};
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
        snprintf(dir, sizeof dir, "%s/templates/%s", test_data_dir(), fams[i].fam);
        tc_format f = format_of_dir(dir);
        CHECK_MSG(f == fams[i].f, "%s: %s, want %s", fams[i].fam, tc_format_name(f), tc_format_name(fams[i].f));
    }
}

TEST(toolcall_format_literal_templates) {
    CHECK_EQ_INT(tc_format_for_template(NULL), TC_NONE);
    CHECK_EQ_INT(tc_format_for_template("{{ messages[0].content }}"), TC_NONE);
    CHECK_EQ_INT(tc_format_for_template("{{- '<tool_call>\\n{\"name\": ' }}"), TC_HERMES);
    CHECK_EQ_INT(tc_format_for_template("'<tool_call>\\n<function=' + tc.name + '>\\n'"), TC_XML);
    CHECK_EQ_INT(tc_format_for_template("{{- '[TOOL_CALLS][' }}"), TC_MISTRAL);
    CHECK_EQ_INT(tc_format_for_template("'<|tool_call_start|>[' + calls + ']<|tool_call_end|>'"), TC_PYTHONIC);
    CHECK_EQ_INT(tc_format_for_template("{{- '<|tool_call>call:' + name + '{' }}"), TC_GEMMA);
    CHECK_EQ_INT(tc_format_for_template("wrap calls in ```tool_code fences"), TC_GEMMA);
    CHECK_EQ_INT(tc_format_for_template("{{- '<|python_tag|>' }}"), TC_LLAMA3);
    CHECK_EQ_INT(tc_format_for_template("{%- if message.role == 'ipython' %}"), TC_LLAMA3);
    CHECK_EQ_INT(tc_format_for_template("{\"name\": function name, \"parameters\": dict}<|eot_id|>"), TC_LLAMA3);
    CHECK_EQ_INT(tc_format_for_template("{\"name\": function name, \"parameters\": dict}"), TC_NONE);
    CHECK_STR(tc_format_name(TC_HERMES), "hermes");
    CHECK_STR(tc_format_name(TC_XML), "xml");
    CHECK_STR(tc_format_name(TC_LLAMA3), "llama3");
    CHECK_STR(tc_format_name(TC_MISTRAL), "mistral");
    CHECK_STR(tc_format_name(TC_PYTHONIC), "pythonic");
    CHECK_STR(tc_format_name(TC_GEMMA), "gemma");
    CHECK_STR(tc_format_name(TC_NONE), "none");
}

/* ---- hermes ---- */

TEST(toolcall_hermes) {
    tc_result r;
    parse(TC_HERMES,
          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", "
          "\"days\": 3}}\n</tool_call>",
          NULL, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "get_weather", "{\"location\":\"Paris\",\"days\":3}");
    CHECK_STR(r.text, "Let me check.");
    CHECK(r.n == 1 && id_ok(r.calls[0].id));
    tc_result_free(&r);

    /* two calls, text after, arguments as a string holding an object */
    parse(TC_HERMES,
          "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": null}]}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"q\\\": \\\"hi\\\"}\"}\n</tool_call>\nDone.",
          NULL, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "a", "{\"x\":[1,{\"y\":null}]}");
    CHECK_CALL(r, 1, "b", "{\"q\":\"hi\"}");
    CHECK_STR(r.text, "Done.");
    CHECK(r.n == 2 && strcmp(r.calls[0].id, r.calls[1].id) != 0);
    tc_result_free(&r);

    /* closers missing before the next call and at the end; no arguments */
    parse(TC_HERMES, "<tool_call>\n{\"name\": \"now\"}\n<tool_call>{\"name\": \"then\", \"arguments\": null}\n", NULL,
          &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "now", "{}");
    CHECK_CALL(r, 1, "then", "{}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    /* a good block, then a broken one that stays in the text */
    parse(TC_HERMES,
          "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and "
          "<tool_call>{\"name\": \"b\", \"arguments\": {oops}}</tool_call>",
          NULL, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "a", "{}");
    CHECK_STR(r.text, "and <tool_call>{\"name\": \"b\", \"arguments\": {oops}}</tool_call>");
    tc_result_free(&r);

    /* numbers keep their spelling (a 64-bit id survives); text that only
     * cJSON's lenient reader accepts is printed anew */
    parse(TC_HERMES,
          "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"id\": 1234567890123456789, \"x\": [1.50, 2E+3], "
          "\"s\": \"a  b\\n\"}}\n</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {\"a\": 01}}</tool_call>",
          NULL, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "f", "{\"id\":1234567890123456789,\"x\":[1.50,2E+3],\"s\":\"a  b\\n\"}");
    CHECK_CALL(r, 1, "g", "{\"a\":1}");
    tc_result_free(&r);

    CHECK(unchanged(TC_HERMES, "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,}}\n</tool_call>", NULL));
    CHECK(unchanged(TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"tru", NULL));
    CHECK(unchanged(TC_HERMES, "<tool_call>\n{\"name\": \"f\"} trailing words", NULL));
    CHECK(unchanged(TC_HERMES, "<tool_call>\n{\"arguments\": {}}\n</tool_call>", NULL));
    CHECK(unchanged(TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"[1]\"}\n</tool_call>", NULL));
    CHECK(unchanged(TC_HERMES, "  plain answer, no calls  ", NULL));
}

/* ---- Qwen3-Coder XML ---- */

TEST(toolcall_xml_schema_typing) {
    cJSON *t = tools();
    tc_result r;
    parse(TC_XML,
          "I'll check.\n<tool_call>\n<function=get_weather>\n"
          "<parameter=location>\nParis\n</parameter>\n"
          "<parameter=days>\n3\n</parameter>\n"
          "<parameter=metric>\ntrue\n</parameter>\n"
          "<parameter=ratio>\n0.5\n</parameter>\n"
          "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"
          "<parameter=opts>\n{\"x\": 1}\n</parameter>\n"
          "<parameter=zip>\n02134\n</parameter>\n"
          "<parameter=note>\n  line one\nline two\n</parameter>\n"
          "</function>\n</tool_call>",
          t, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "get_weather",
               "{\"location\":\"Paris\",\"days\":3,\"metric\":true,\"ratio\":0.5,\"tags\":[\"a\",\"b\"],"
               "\"opts\":{\"x\":1},\"zip\":\"02134\",\"note\":\"  line one\\nline two\"}");
    CHECK_STR(r.text, "I'll check.");
    tc_result_free(&r);

    /* values that do not fit their type stay strings; null where allowed */
    parse(TC_XML,
          "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n"
          "<parameter=metric>\nyes\n</parameter>\n<parameter=opts>\n{bad\n</parameter>\n"
          "<parameter=note>\nnull\n</parameter>\n</function>\n</tool_call>",
          t, &r);
    CHECK_CALL(r, 0, "get_weather", "{\"days\":\"three\",\"metric\":\"yes\",\"opts\":\"{bad\",\"note\":null}");
    tc_result_free(&r);
    cJSON_Delete(t);
}

TEST(toolcall_xml_no_schema) {
    tc_result r;
    /* two calls; the second lacks </tool_call> and one </parameter> */
    parse(TC_XML,
          "<tool_call>\n<function=run>\n<parameter=n>\n42\n</parameter>\n<parameter=s>\nhello\n</parameter>\n"
          "<parameter=b>\nfalse\n</parameter>\n<parameter=z>\nnull\n</parameter>\n"
          "<parameter=j>\n{\"a\":1}\n</parameter>\n<parameter=f>\n-1.5e3\n</parameter>\n</function>\n</tool_call>\n"
          "<tool_call>\n<function=other>\n<parameter=code>\nx = 1\nprint(x)\n<parameter=k>\nTrue\n</parameter>\n"
          "</function>\nAfter.",
          NULL, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "run", "{\"n\":42,\"s\":\"hello\",\"b\":false,\"z\":null,\"j\":\"{\\\"a\\\":1}\",\"f\":-1.5e3}");
    CHECK_CALL(r, 1, "other", "{\"code\":\"x = 1\\nprint(x)\",\"k\":\"True\"}");
    CHECK_STR(r.text, "After.");
    tc_result_free(&r);

    CHECK(unchanged(TC_XML, "<tool_call>\n<function=run>\n<parameter=n>\n42\n</parameter>\n", NULL));
    CHECK(unchanged(TC_XML, "<tool_call>\n<function=run>\n<parameter=n>\n42", NULL));
    CHECK(unchanged(TC_XML, "<tool_call>\n<function=>\n</function>\n</tool_call>", NULL));
    CHECK(unchanged(TC_XML, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", NULL));
}

/* ---- llama3 ---- */

TEST(toolcall_llama3) {
    cJSON *t = tools();
    tc_result r;
    parse(TC_LLAMA3, "  {\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"days\": 2}}", t, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "get_weather", "{\"location\":\"Paris\",\"days\":2}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    parse(TC_LLAMA3,
          "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"a\"}}; "
          "{\"name\": \"search\", \"arguments\": {\"query\": \"b\"}}\n{\"name\": \"get_weather\", \"parameters\": {}}",
          t, &r);
    CHECK_EQ_INT(r.n, 3);
    CHECK_CALL(r, 0, "search", "{\"query\":\"a\"}");
    CHECK_CALL(r, 1, "search", "{\"query\":\"b\"}");
    CHECK_CALL(r, 2, "get_weather", "{}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    /* text before <|python_tag|> is kept */
    parse(TC_LLAMA3, "Sure.\n<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"x\"}}", t, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "search", "{\"query\":\"x\"}");
    CHECK_STR(r.text, "Sure.");
    tc_result_free(&r);

    /* without tools any name goes */
    parse(TC_LLAMA3, "{\"name\": \"anything\", \"parameters\": {\"k\": true}}", NULL, &r);
    CHECK_CALL(r, 0, "anything", "{\"k\":true}");
    tc_result_free(&r);

    CHECK(unchanged(TC_LLAMA3, "{\"name\": \"unknown_tool\", \"parameters\": {}}", t));
    CHECK(unchanged(TC_LLAMA3, "{\"name\": \"John\", \"age\": 30}", NULL));
    CHECK(unchanged(TC_LLAMA3, "{\"name\": \"search\", \"parameters\": {\"query\": ", t));
    CHECK(unchanged(TC_LLAMA3, "The answer is {\"name\": \"search\", \"parameters\": {}}", t));
    cJSON_Delete(t);
}

/* ---- mistral ---- */

TEST(toolcall_mistral) {
    tc_result r;
    parse(TC_MISTRAL,
          "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]", NULL, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "a", "{\"x\":1}");
    CHECK_CALL(r, 1, "b", "{}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    parse(TC_MISTRAL,
          "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"id\": 9007199254740993}}, "
          "{\"function\": {\"name\": \"b\", \"arguments\": \"{\\\"n\\\": 9007199254740995}\"}}]", NULL, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "a", "{\"id\":9007199254740993}");
    CHECK_CALL(r, 1, "b", "{\"n\":9007199254740995}");
    tc_result_free(&r);

    parse(TC_MISTRAL,
          "Checking both.[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}"
          "[TOOL_CALLS]search[CALL_ID]a1b2c3d4e[ARGS]{\"query\": \"q\", \"limit\": 5}",
          NULL, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "get_weather", "{\"location\":\"Paris\"}");
    CHECK_CALL(r, 1, "search", "{\"query\":\"q\",\"limit\":5}");
    CHECK_STR(r.text, "Checking both.");
    tc_result_free(&r);

    CHECK(unchanged(TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {", NULL));
    CHECK(unchanged(TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"arguments\": {}}]", NULL));
    CHECK(unchanged(TC_MISTRAL, "[TOOL_CALLS]f[ARGS][1, 2]", NULL));
    CHECK(unchanged(TC_MISTRAL, "[TOOL_CALLS]f{\"a\": 1}", NULL));
    CHECK(unchanged(TC_MISTRAL, "[TOOL_CALLS][]", NULL));
}

/* ---- pythonic (LFM2) ---- */

TEST(toolcall_pythonic) {
    tc_result r;
    parse(TC_PYTHONIC,
          "<|tool_call_start|>[get_weather(location=\"Paris\", days=3), search()]<|tool_call_end|>Checking.", NULL,
          &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "get_weather", "{\"location\":\"Paris\",\"days\":3}");
    CHECK_CALL(r, 1, "search", "{}");
    CHECK_STR(r.text, "Checking.");
    tc_result_free(&r);

    /* the literal subset; non-literals keep their source text */
    parse(TC_PYTHONIC,
          "<|tool_call_start|>[f(s='it\\'s', d=\"a\\\"b\\n\", i=-5, fl=2.5e3, t=True, fa=False, n=None, "
          "l=[1, 'x', [2],], d2={'k': (1, 2), 3: 'v'}, h=0x1F, big=1_000, e=some.var + 1, "
          "u=\"\\u00e9\\U0001F600\", tup=(7,), raw=r'\\d+', cat='a' 'b', lc=[x for x in y], mix=[1, y])]"
          "<|tool_call_end|>",
          NULL, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "f",
               "{\"s\":\"it's\",\"d\":\"a\\\"b\\n\",\"i\":-5,\"fl\":2.5e3,\"t\":true,\"fa\":false,\"n\":null,"
               "\"l\":[1,\"x\",[2]],\"d2\":{\"k\":[1,2],\"3\":\"v\"},\"h\":31,\"big\":1000,\"e\":\"some.var + 1\","
               "\"u\":\"\xc3\xa9\xf0\x9f\x98\x80\",\"tup\":[7],\"raw\":\"\\\\d+\",\"cat\":\"ab\","
               "\"lc\":\"[x for x in y]\",\"mix\":\"[1, y]\"}");
    tc_result_free(&r);

    /* dotted names; a single call without brackets; no closer at the end */
    parse(TC_PYTHONIC, "Sure: <|tool_call_start|>math.add(a=1, b=2.5)", NULL, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "math.add", "{\"a\":1,\"b\":2.5}");
    CHECK_STR(r.text, "Sure:");
    tc_result_free(&r);

    /* a whole answer that is just a call list */
    parse(TC_PYTHONIC, "\n[search(query=\"x\", limit=2)]\n", NULL, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "search", "{\"query\":\"x\",\"limit\":2}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    CHECK(unchanged(TC_PYTHONIC, "<|tool_call_start|>[get_weather(location=\"Par", NULL));
    CHECK(unchanged(TC_PYTHONIC, "<|tool_call_start|>[get_weather(location=)]<|tool_call_end|>", NULL));
    CHECK(unchanged(TC_PYTHONIC, "<|tool_call_start|>[f(a=[1, 2)]<|tool_call_end|>", NULL));
    CHECK(unchanged(TC_PYTHONIC, "<|tool_call_start|>[]<|tool_call_end|>", NULL));
    CHECK(unchanged(TC_PYTHONIC, "<|tool_call_start|>[f(a=1) junk]<|tool_call_end|>", NULL));
    CHECK(unchanged(TC_PYTHONIC, "[1, 2, 3]", NULL));
    CHECK(unchanged(TC_PYTHONIC, "See [f(a=1)] here", NULL));
}

TEST(toolcall_pythonic_positional) {
    cJSON *t = tools();
    tc_result r;
    /* positional arguments take the schema's property names in order;
     * strings are retyped where the schema excludes strings */
    parse(TC_PYTHONIC,
          "<|tool_call_start|>[get_weather(\"Paris\", 3, metric=\"false\"), search('q', '7')]<|tool_call_end|>", t,
          &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "get_weather", "{\"location\":\"Paris\",\"days\":3,\"metric\":false}");
    CHECK_CALL(r, 1, "search", "{\"query\":\"q\",\"limit\":7}");
    tc_result_free(&r);
    /* without a schema positional arguments are dropped */
    parse(TC_PYTHONIC, "<|tool_call_start|>[get_weather(\"Paris\", days=3)]<|tool_call_end|>", NULL, &r);
    CHECK_CALL(r, 0, "get_weather", "{\"days\":3}");
    tc_result_free(&r);
    cJSON_Delete(t);
}

/* ---- gemma ---- */

TEST(toolcall_gemma4) {
    cJSON *t = tools();
    tc_result r;
    parse(TC_GEMMA,
          "Looking.<|tool_call>call:get_weather{location:<|\"|>Paris, France<|\"|>,days:3,metric:true}<tool_call|>"
          "<|tool_call>call:search{query:<|\"|>a {b}, [c]<|\"|>,limit:<|\"|>5<|\"|>}<tool_call|>Then more.",
          t, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "get_weather", "{\"location\":\"Paris, France\",\"days\":3,\"metric\":true}");
    CHECK_CALL(r, 1, "search", "{\"query\":\"a {b}, [c]\",\"limit\":5}");
    CHECK_STR(r.text, "Looking.Then more.");
    tc_result_free(&r);

    /* schema: a bare 02134 stays the string the schema asks for */
    parse(TC_GEMMA, "<|tool_call>call:get_weather{zip:02134,days:x}<tool_call|>", t, &r);
    CHECK_CALL(r, 0, "get_weather", "{\"zip\":\"02134\",\"days\":\"x\"}");
    tc_result_free(&r);

    /* nested values, bare scalars, no closer at the end */
    parse(TC_GEMMA,
          "<|tool_call>call:f{o:{a:<|\"|>x<|\"|>,b:[1,<|\"|>y<|\"|>]},z:null,w:hello world,fl:-1.5,j:[1,2],"
          "bad:{a}}",
          NULL, &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "f",
               "{\"o\":{\"a\":\"x\",\"b\":[1,\"y\"]},\"z\":null,\"w\":\"hello world\",\"fl\":-1.5,\"j\":[1,2],"
               "\"bad\":\"{a}\"}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    CHECK(unchanged(TC_GEMMA, "<|tool_call>call:f{a:<|\"|>unterminated}<tool_call|>", NULL));
    CHECK(unchanged(TC_GEMMA, "<|tool_call>call:f{a:1", NULL));
    CHECK(unchanged(TC_GEMMA, "<|tool_call>call:f{a:[1,}<tool_call|>", NULL));
    CHECK(unchanged(TC_GEMMA, "<|tool_call>f{a:1}<tool_call|>", NULL));
    CHECK(unchanged(TC_GEMMA, "<|tool_call>call:f{:1}<tool_call|>", NULL));
    cJSON_Delete(t);
}

TEST(toolcall_gemma3_tool_code) {
    cJSON *t = tools();
    tc_result r;
    parse(TC_GEMMA, "I'll look that up.\n```tool_code\nget_weather(location=\"Paris\", days=2)\n```\nOne moment.", t,
          &r);
    CHECK_EQ_INT(r.n, 1);
    CHECK_CALL(r, 0, "get_weather", "{\"location\":\"Paris\",\"days\":2}");
    CHECK_STR(r.text, "I'll look that up.\n\nOne moment.");
    tc_result_free(&r);

    parse(TC_GEMMA, "```tool_code\nprint(search(\"cats\", limit=3))\nget_weather('Oslo')\n```", t, &r);
    CHECK_EQ_INT(r.n, 2);
    CHECK_CALL(r, 0, "search", "{\"query\":\"cats\",\"limit\":3}");
    CHECK_CALL(r, 1, "get_weather", "{\"location\":\"Oslo\"}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    CHECK(unchanged(TC_GEMMA, "```tool_code\nget_weather(location=\"Paris\"\n```", t));
    CHECK(unchanged(TC_GEMMA, "```tool_code\nx = 1\n```", t));
    cJSON_Delete(t);
}

/* ---- none, ids ---- */

TEST(toolcall_none_copies_text) {
    tc_result r;
    const char *s = "  <tool_call>{\"name\": \"f\"}</tool_call>  ";
    parse(TC_NONE, s, NULL, &r);
    CHECK_EQ_INT(r.n, 0);
    CHECK(r.calls == NULL);
    CHECK_STR(r.text, s);
    tc_result_free(&r);
    tc_parse(TC_HERMES, NULL, 0, NULL, &r);
    CHECK_EQ_INT(r.n, 0);
    CHECK_STR(r.text, "");
    tc_result_free(&r);
}

#define ID_THREADS 4
#define ID_PER_THREAD 50

static void *id_worker(void *arg) {
    char (*ids)[32] = arg;
    for (int i = 0; i < ID_PER_THREAD; i++) {
        tc_result r;
        const char *s = "<tool_call>{\"name\": \"f\"}</tool_call>";
        tc_parse(TC_HERMES, s, strlen(s), NULL, &r);
        if (r.n == 1) memcpy(ids[i], r.calls[0].id, 32);
        else ids[i][0] = 0;
        tc_result_free(&r);
    }
    return NULL;
}

static int cmp_id(const void *a, const void *b) { return strcmp(a, b); }

TEST(toolcall_ids_unique_across_threads) {
    static char ids[ID_THREADS * ID_PER_THREAD][32];
    pthread_t th[ID_THREADS];
    for (int i = 0; i < ID_THREADS; i++) pthread_create(&th[i], NULL, id_worker, ids[i * ID_PER_THREAD]);
    for (int i = 0; i < ID_THREADS; i++) pthread_join(th[i], NULL);
    int n = ID_THREADS * ID_PER_THREAD, bad = 0, dup = 0;
    for (int i = 0; i < n; i++) bad += !id_ok(ids[i]);
    qsort(ids, (size_t)n, 32, cmp_id);
    for (int i = 1; i < n; i++) dup += strcmp(ids[i - 1], ids[i]) == 0;
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(dup, 0);
}

/* ---- the streaming gate ---- */

/* Whether s[0..n) is complete UTF-8 (no sequence cut at the end). */
static int utf8_whole(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (i + k > n) return 0;
        i += k;
    }
    return 1;
}

/* Pushes s one byte at a time; *trip_at gets the byte index whose push
 * first returned 1 (-1 if none); checks the shown text is never cut. */
static int push_bytes(tc_gate *g, const char *s, strbuf *out, int *trip_at) {
    *trip_at = -1;
    int bad = 0;
    for (size_t i = 0; s[i]; i++) {
        int t = tc_gate_push(g, s + i, 1, out);
        if (t && *trip_at < 0) *trip_at = (int)i;
        if (!t && *trip_at >= 0) bad++;
        if (!utf8_whole(out->s ? out->s : "", out->n)) bad++;
    }
    return bad;
}

TEST(toolcall_gate_marker_split) {
    const char *s = "Hello <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    tc_gate *g = tc_gate_new(TC_HERMES);
    strbuf out = {0}, held = {0};
    int trip_at;
    CHECK_EQ_INT(push_bytes(g, s, &out, &trip_at), 0);
    CHECK_EQ_INT(trip_at, 16); /* the '>' of "<tool_call>" */
    CHECK_STR(sb_str(&out), "Hello ");
    CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 1);
    CHECK_STR(sb_str(&out), "Hello ");
    CHECK_STR(sb_str(&held), s + 6);
    tc_result r;
    tc_parse(TC_HERMES, held.s, held.n, NULL, &r);
    CHECK_CALL(r, 0, "f", "{\"a\":1}");
    CHECK_STR(r.text, "");
    tc_result_free(&r);

    /* the gate starts over after finish; a whole chunk with the marker */
    sb_clear(&out);
    sb_clear(&held);
    CHECK_EQ_INT(tc_gate_push(g, "ab<tool_call>cd", 15, &out), 1);
    CHECK_EQ_INT(tc_gate_push(g, "ef", 2, &out), 1);
    CHECK_STR(sb_str(&out), "ab");
    CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 1);
    CHECK_STR(sb_str(&held), "<tool_call>cdef");
    tc_gate_free(g);
    sb_free(&out);
    sb_free(&held);
}

TEST(toolcall_gate_withheld_tail) {
    tc_gate *g = tc_gate_new(TC_MISTRAL);
    strbuf out = {0}, held = {0};
    CHECK_EQ_INT(tc_gate_push(g, "abc [TOOL", 9, &out), 0);
    CHECK_STR(sb_str(&out), "abc ");
    CHECK_EQ_INT(tc_gate_push(g, "S] x [TOOL_CALL", 15, &out), 0);
    CHECK_STR(sb_str(&out), "abc [TOOLS] x ");
    CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 0);
    CHECK_STR(sb_str(&out), "abc [TOOLS] x [TOOL_CALL");
    CHECK_EQ_INT(held.n, 0);
    tc_gate_free(g);

    /* at most (longest marker - 1) bytes are withheld */
    g = tc_gate_new(TC_PYTHONIC);
    sb_clear(&out);
    const char *s = "x<|tool_call_start|";
    CHECK_EQ_INT(tc_gate_push(g, s, strlen(s), &out), 0);
    CHECK_STR(sb_str(&out), "x");
    CHECK_EQ_INT(tc_gate_push(g, "!", 1, &out), 0);
    CHECK_STR(sb_str(&out), "x<|tool_call_start|!");
    tc_gate_free(g);
    sb_free(&out);
    sb_free(&held);
}

TEST(toolcall_gate_utf8) {
    const char *s = "h\xc3\xa9llo w\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 <tool \xf0\x9f\x98\x80!";
    tc_format fs[] = {TC_NONE, TC_HERMES, TC_GEMMA, TC_LLAMA3};
    for (int k = 0; k < 4; k++) {
        tc_gate *g = tc_gate_new(fs[k]);
        strbuf out = {0}, held = {0};
        int trip_at;
        CHECK_EQ_INT(push_bytes(g, s, &out, &trip_at), 0);
        CHECK_EQ_INT(trip_at, -1);
        CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 0);
        CHECK_STR(sb_str(&out), s);
        CHECK_EQ_INT(held.n, 0);
        tc_gate_free(g);
        sb_free(&out);
        sb_free(&held);
    }
    /* a partial sequence waits for the rest, within one push or across */
    tc_gate *g = tc_gate_new(TC_NONE);
    strbuf out = {0};
    CHECK_EQ_INT(tc_gate_push(g, "a\xe6\x97", 3, &out), 0);
    CHECK_STR(sb_str(&out), "a");
    CHECK_EQ_INT(tc_gate_push(g, "\xa5", 1, &out), 0);
    CHECK_STR(sb_str(&out), "a\xe6\x97\xa5");
    tc_gate_free(g);
    sb_free(&out);
}

TEST(toolcall_gate_llama3_and_gemma) {
    strbuf out = {0}, held = {0};
    int trip_at;
    /* a '{' as the first non-space character holds the whole answer */
    tc_gate *g = tc_gate_new(TC_LLAMA3);
    CHECK_EQ_INT(push_bytes(g, "  {\"name\": \"f\", \"parameters\": {}}", &out, &trip_at), 0);
    CHECK_EQ_INT(trip_at, 2);
    CHECK_STR(sb_str(&out), "  ");
    CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 1);
    CHECK_STR(sb_str(&held), "{\"name\": \"f\", \"parameters\": {}}");
    /* a later '{' does not; <|python_tag|> anywhere does */
    sb_clear(&out);
    sb_clear(&held);
    CHECK_EQ_INT(push_bytes(g, "Use {x} here <|python_tag|>{}", &out, &trip_at), 0);
    CHECK_EQ_INT(trip_at, 26);
    CHECK_STR(sb_str(&out), "Use {x} here ");
    CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 1);
    CHECK_STR(sb_str(&held), "<|python_tag|>{}");
    tc_gate_free(g);

    g = tc_gate_new(TC_GEMMA);
    sb_clear(&out);
    sb_clear(&held);
    CHECK_EQ_INT(push_bytes(g, "See:\n```python\nx\n```\n```tool_code\nf()\n```", &out, &trip_at), 0);
    CHECK_STR(sb_str(&out), "See:\n```python\nx\n```\n");
    CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 1);
    CHECK_STR(sb_str(&held), "```tool_code\nf()\n```");
    sb_clear(&out);
    sb_clear(&held);
    CHECK_EQ_INT(push_bytes(g, "ok <|tool_call>call:f{}<tool_call|>", &out, &trip_at), 0);
    CHECK_EQ_INT(trip_at, 14);
    CHECK_STR(sb_str(&out), "ok ");
    CHECK_EQ_INT(tc_gate_finish(g, &out, &held), 1);
    CHECK_STR(sb_str(&held), "<|tool_call>call:f{}<tool_call|>");
    tc_gate_free(g);
    sb_free(&out);
    sb_free(&held);
}
