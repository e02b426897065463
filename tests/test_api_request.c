/* test_api_request: the request-mapping layer (api.h). Each dialect (chat
 * completions, completions, Responses, Anthropic messages / count_tokens)
 * from literal request JSON to the normalized messages / tools /
 * template_vars (compared as compact JSON) and scalar settings; every error
 * path answers 400 with a message naming the field; captured Claude Code
 * and Codex bodies (trimmed copies in tests/data/api/) parse to the
 * expected role sequence; the messages produced are stable when fed back
 * as a chat request. The request body is deleted before any check, so the
 * result must own everything it holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "test.h"
#include "base/util.h"

static int parse_at(int line, api_kind kind, const char *json, api_request *r, char *err, size_t errlen) {
    cJSON *b = cJSON_Parse(json);
    if (!b) test_fail(__FILE__, line, "test body is not JSON: %s", json);
    err[0] = 0;
    int rc = api_parse(kind, b, r, err, errlen);
    cJSON_Delete(b);
    return rc;
}

/* Parses json and requires success. */
#define PARSE_OK(kind, json, r)                                                            \
    do {                                                                                   \
        char _e[512];                                                                      \
        int _rc = parse_at(__LINE__, kind, json, r, _e, sizeof _e);                        \
        if (_rc != 0) test_fail(__FILE__, __LINE__, "api_parse -> %d: %s", _rc, _e);       \
    } while (0)

static void check_json_at(int line, const cJSON *j, const char *want) {
    char *got = j ? cJSON_PrintUnformatted(j) : xstrdup("null");
    if (strcmp(got, want) != 0) test_fail(__FILE__, line, "JSON differs\n  got:  %s\n  want: %s", got, want);
    free(got);
}
#define CHECK_JSON(j, want) check_json_at(__LINE__, j, want)

static void check_str_at(int line, const char *got, const char *want) {
    if (!got || !want ? got != want : strcmp(got, want) != 0)
        test_fail(__FILE__, line, "got \"%s\", want \"%s\"", got ? got : "(null)", want ? want : "(null)");
}
#define CHECK_STR(got, want) check_str_at(__LINE__, got, want)

/* ---- chat completions ---- */

TEST(api_chat_messages_and_tools) {
    api_request r;
    PARSE_OK(API_CHAT,
             "{\"model\":\"qwen3\",\"messages\":["
             "{\"role\":\"developer\",\"content\":\"Be brief.\"},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"line 1\"},{\"type\":\"text\",\"text\":\"line 2\"}]},"
             "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"think\",\"tool_calls\":["
             "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"q\\\": \\\"x\\\", \\\"n\\\": 2}\"}},"
             "{\"type\":\"function\",\"function\":{\"name\":\"noargs\",\"arguments\":\"\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"},"
             "{\"role\":\"user\",\"content\":\"thanks\",\"name\":\"bob\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"refusal\",\"refusal\":\"no\"}],\"reasoning\":\"r2\","
             "\"tool_calls\":[{\"id\":\"c2\",\"function\":{\"name\":\"get\",\"arguments\":{\"q\":\"y\"}}}]}],"
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"description\":\"Look up\",\"strict\":true,"
             "\"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},\"required\":[\"q\"]}}},"
             "{\"type\":\"function\",\"function\":{\"name\":\"noargs\",\"parameters\":null}},"
             "{\"type\":\"custom\",\"custom\":{\"name\":\"grammar\"}},"
             "{\"type\":\"function\",\"name\":\"flat\",\"parameters\":{\"type\":\"object\"}}],"
             "\"temperature\":0.7,\"top_p\":0.95,\"top_k\":20,\"min_p\":0.05,\"seed\":1234,"
             "\"max_tokens\":100,\"max_completion_tokens\":50,\"stop\":[\"</s>\",\"\",\"END\"],"
             "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"n\":1,"
             "\"presence_penalty\":0.5,\"frequency_penalty\":-1,\"logprobs\":false,\"user\":\"u\"}",
             &r);
    CHECK_EQ_INT(r.kind, API_CHAT);
    CHECK_JSON(r.messages,
               "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
               "{\"role\":\"user\",\"content\":\"line 1\\nline 2\"},"
               "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"think\",\"tool_calls\":["
               "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":{\"q\":\"x\",\"n\":2}}},"
               "{\"id\":\"call_2_1\",\"type\":\"function\",\"function\":{\"name\":\"noargs\",\"arguments\":{}}}]},"
               "{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":\"c1\"},"
               "{\"role\":\"user\",\"content\":\"thanks\",\"name\":\"bob\"},"
               "{\"role\":\"assistant\",\"content\":\"no\",\"reasoning_content\":\"r2\",\"tool_calls\":["
               "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":{\"q\":\"y\"}}}]}]");
    CHECK_JSON(r.tools,
               "[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"description\":\"Look up\","
               "\"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},\"required\":[\"q\"]}}},"
               "{\"type\":\"function\",\"function\":{\"name\":\"noargs\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}},"
               "{\"type\":\"function\",\"function\":{\"name\":\"flat\",\"parameters\":{\"type\":\"object\"}}}]");
    CHECK_JSON(r.template_vars, "{}");
    CHECK(r.prompt == NULL);
    CHECK_STR(r.model, "qwen3");
    CHECK_NEAR(r.temperature, 0.7, 0);
    CHECK_NEAR(r.top_p, 0.95, 0);
    CHECK_NEAR(r.min_p, 0.05, 0);
    CHECK_EQ_INT(r.top_k, 20);
    CHECK_EQ_INT(r.seed, 1234);
    CHECK_EQ_INT(r.max_tokens, 50); /* max_completion_tokens wins */
    CHECK_EQ_INT(r.n_stop, 2);
    if (r.n_stop == 2) {
        CHECK_STR(r.stop[0], "</s>");
        CHECK_STR(r.stop[1], "END");
    }
    CHECK_EQ_INT(r.stream, 1);
    CHECK_EQ_INT(r.include_usage, 1);
    CHECK_EQ_INT(r.n, 1);
    CHECK_EQ_INT(r.thinking, -1);
    CHECK_EQ_INT(r.drop_reasoning, 0);
    CHECK_EQ_INT(r.thinking_budget, -1);
    CHECK(r.thinking_budget_message == NULL);
    CHECK_STR(r.reasoning_effort, "");
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_AUTO);
    CHECK(r.tool_choice_name == NULL);
    api_request_free(&r);
    CHECK(r.messages == NULL && r.template_vars == NULL); /* freed and cleared */
    api_request_free(&r);                                 /* twice is harmless */
}

TEST(api_chat_defaults) {
    api_request r;
    PARSE_OK(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[],\"stop\":null}", &r);
    CHECK_JSON(r.messages, "[{\"role\":\"user\",\"content\":\"hi\"}]");
    CHECK(r.tools == NULL); /* an empty list is no tools */
    CHECK_JSON(r.template_vars, "{}");
    CHECK(r.model == NULL);
    CHECK_EQ_INT(r.max_tokens, -1);
    CHECK(r.temperature == -1 && r.top_p == -1 && r.min_p == -1);
    CHECK_EQ_INT(r.top_k, -1);
    CHECK_EQ_INT(r.seed, -1);
    CHECK_EQ_INT(r.n_stop, 0);
    CHECK_EQ_INT(r.stream, 0);
    CHECK_EQ_INT(r.include_usage, 0);
    CHECK_EQ_INT(r.n, 1);
    CHECK_EQ_INT(r.thinking, -1);
    api_request_free(&r);
    /* a single stop string; explicit zeros are values, not "not given" */
    PARSE_OK(API_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"\\n\",\"temperature\":0,\"top_k\":0,"
             "\"min_p\":0,\"seed\":0,\"max_tokens\":1}",
             &r);
    CHECK_EQ_INT(r.n_stop, 1);
    if (r.n_stop == 1) CHECK_STR(r.stop[0], "\n");
    CHECK(r.temperature == 0 && r.min_p == 0);
    CHECK_EQ_INT(r.top_k, 0);
    CHECK_EQ_INT(r.seed, 0);
    CHECK_EQ_INT(r.max_tokens, 1);
    api_request_free(&r);
}

TEST(api_chat_thinking_and_template_vars) {
    api_request r;
    /* kwargs copied; top-level enable_thinking wins; effort normalized */
    PARSE_OK(API_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"chat_template_kwargs\":{\"enable_thinking\":true,\"custom\":1,\"reasoning_effort\":\"low\"},"
             "\"enable_thinking\":false,\"reasoning_effort\":\"XHigh\",\"reasoning_budget\":128,"
             "\"reasoning_budget_message\":\"\"}",
             &r);
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":false,\"custom\":1,\"reasoning_effort\":\"high\"}");
    CHECK_EQ_INT(r.thinking, 0);
    CHECK_STR(r.reasoning_effort, "high");
    CHECK_EQ_INT(r.thinking_budget, 128);
    CHECK_STR(r.thinking_budget_message, "");
    CHECK_EQ_INT(r.drop_reasoning, 0);
    api_request_free(&r);
    /* kwargs alone */
    PARSE_OK(API_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"chat_template_kwargs\":{\"enable_thinking\":false,\"reasoning_effort\":\"minimal\"}}",
             &r);
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":false,\"reasoning_effort\":\"low\"}");
    CHECK_EQ_INT(r.thinking, 0);
    api_request_free(&r);
    /* "none" turns thinking off unless enable_thinking says otherwise */
    PARSE_OK(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"none\"}", &r);
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":false}");
    CHECK_EQ_INT(r.thinking, 0);
    CHECK_STR(r.reasoning_effort, "");
    api_request_free(&r);
    PARSE_OK(API_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"none\","
             "\"chat_template_kwargs\":{\"enable_thinking\":true,\"reasoning_effort\":\"high\"}}",
             &r);
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":true}");
    CHECK_EQ_INT(r.thinking, 1);
    api_request_free(&r);
    PARSE_OK(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"enable_thinking\":true}", &r);
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":true}");
    CHECK_EQ_INT(r.thinking, 1);
    api_request_free(&r);
    /* reasoning_budget 0: explicitly off for this request */
    PARSE_OK(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_budget\":0}", &r);
    CHECK_EQ_INT(r.thinking_budget, 0);
    api_request_free(&r);
}

TEST(api_effort_values) {
    const char *in[] = {"low", "LOW", "minimal", "medium", "Medium", "high", "xhigh", "max"};
    const char *want[] = {"low", "low", "low", "medium", "medium", "high", "high", "high"};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        char body[256];
        api_request r;
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"%s\"}",
                 in[i]);
        PARSE_OK(API_CHAT, body, &r);
        CHECK_MSG(r.reasoning_effort[0] && !strcmp(r.reasoning_effort, want[i]), "%s -> \"%s\", want %s", in[i],
                  r.reasoning_effort, want[i]);
        CHECK_EQ_INT(r.thinking, -1);
        api_request_free(&r);
        snprintf(body, sizeof body, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"%s\"}}", in[i]);
        PARSE_OK(API_RESPONSES, body, &r);
        CHECK_STR(r.reasoning_effort, want[i]);
        api_request_free(&r);
        snprintf(body, sizeof body,
                 "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"output_config\":{\"effort\":\"%s\"}}",
                 in[i]);
        PARSE_OK(API_MESSAGES, body, &r);
        CHECK_STR(r.reasoning_effort, want[i]);
        api_request_free(&r);
    }
}

TEST(api_tool_choice) {
    static const char base[] = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                               "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\"}}]";
    char body[512];
    api_request r;
    snprintf(body, sizeof body, "{%s,\"tool_choice\":\"none\"}", base);
    PARSE_OK(API_CHAT, body, &r);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_NONE);
    CHECK(r.tools == NULL);
    api_request_free(&r);
    snprintf(body, sizeof body, "{%s,\"tool_choice\":\"required\"}", base);
    PARSE_OK(API_CHAT, body, &r);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_REQUIRED);
    CHECK(r.tools != NULL);
    api_request_free(&r);
    snprintf(body, sizeof body, "{%s,\"tool_choice\":\"auto\"}", base);
    PARSE_OK(API_CHAT, body, &r);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_AUTO);
    api_request_free(&r);
    snprintf(body, sizeof body, "{%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get\"}}}", base);
    PARSE_OK(API_CHAT, body, &r);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_NAMED);
    CHECK_STR(r.tool_choice_name, "get");
    api_request_free(&r);
    /* the Responses form, on Responses */
    PARSE_OK(API_RESPONSES,
             "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"get\"}],"
             "\"tool_choice\":{\"type\":\"function\",\"name\":\"get\"}}",
             &r);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_NAMED);
    CHECK_STR(r.tool_choice_name, "get");
    api_request_free(&r);
    PARSE_OK(API_RESPONSES, "{\"input\":\"x\",\"tool_choice\":\"none\"}", &r);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_NONE);
    api_request_free(&r);
    /* Anthropic */
    static const char mbase[] = "\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                "\"tools\":[{\"name\":\"Bash\",\"input_schema\":{\"type\":\"object\"}}]";
    const char *choice[] = {"auto", "any", "none"};
    const int want[] = {TOOL_CHOICE_AUTO, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NONE};
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{%s,\"tool_choice\":{\"type\":\"%s\",\"disable_parallel_tool_use\":true}}", mbase,
                 choice[i]);
        PARSE_OK(API_MESSAGES, body, &r);
        CHECK_EQ_INT(r.tool_choice, want[i]);
        CHECK((r.tools == NULL) == (want[i] == TOOL_CHOICE_NONE));
        api_request_free(&r);
    }
    snprintf(body, sizeof body, "{%s,\"tool_choice\":{\"type\":\"tool\",\"name\":\"Bash\"}}", mbase);
    PARSE_OK(API_MESSAGES, body, &r);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_NAMED);
    CHECK_STR(r.tool_choice_name, "Bash");
    api_request_free(&r);
}

/* ---- completions ---- */

TEST(api_completions) {
    api_request r;
    PARSE_OK(API_COMPLETIONS,
             "{\"model\":\"m\",\"prompt\":\"Once upon\",\"max_tokens\":16,\"stop\":\"\\n\",\"temperature\":0,\"seed\":-5,"
             "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"echo\":false,\"n\":1}",
             &r);
    CHECK_EQ_INT(r.kind, API_COMPLETIONS);
    CHECK_STR(r.prompt, "Once upon");
    CHECK(r.messages == NULL && r.tools == NULL);
    CHECK_JSON(r.template_vars, "{}");
    CHECK_STR(r.model, "m");
    CHECK_EQ_INT(r.max_tokens, 16);
    CHECK_EQ_INT(r.n_stop, 1);
    CHECK_EQ_INT(r.seed, -5);
    CHECK(r.temperature == 0);
    CHECK_EQ_INT(r.stream, 1);
    CHECK_EQ_INT(r.include_usage, 1);
    api_request_free(&r);
    PARSE_OK(API_COMPLETIONS, "{\"prompt\":[\"first\",\"second\"]}", &r);
    CHECK_STR(r.prompt, "first");
    CHECK_EQ_INT(r.max_tokens, -1);
    api_request_free(&r);
}

/* ---- Responses ---- */

TEST(api_responses_items) {
    api_request r;
    PARSE_OK(API_RESPONSES,
             "{\"model\":\"gpt\",\"instructions\":\"Be careful.\",\"input\":["
             "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"Dev rules.\"}]},"
             "{\"role\":\"system\",\"content\":\"More rules.\"},"
             "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"run it\"},"
             "{\"type\":\"input_text\",\"text\":\"now\"}]},"
             "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"encrypted_content\":\"xx\"},"
             "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Running.\"}]},"
             "{\"type\":\"function_call\",\"call_id\":\"call_a\",\"name\":\"exec\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"},"
             "{\"type\":\"function_call\",\"id\":\"fc_b\",\"name\":\"exec\",\"arguments\":{\"cmd\":\"pwd\"}},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_a\",\"output\":\"file.txt\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"fc_b\",\"output\":[{\"type\":\"input_text\",\"text\":\"out.txt\"},"
             "{\"type\":\"input_image\",\"image_url\":\"data:\"},{\"k\":1}]},"
             "{\"type\":\"function_call\",\"call_id\":\"call_c\",\"name\":\"exec\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_c\",\"output\":{\"ok\":true}},"
             "{\"type\":\"message\",\"role\":\"developer\",\"content\":\"mid\"},"
             "{\"type\":\"item_reference\",\"id\":\"x\"}],"
             "\"tools\":[{\"type\":\"function\",\"name\":\"exec\",\"description\":\"Run\",\"strict\":false,"
             "\"parameters\":{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"}}}},"
             "{\"type\":\"web_search\",\"external_web_access\":false},"
             "{\"type\":\"namespace\",\"name\":\"ns\",\"tools\":[{\"type\":\"function\",\"name\":\"inner\"}]},"
             "{\"type\":\"custom\",\"name\":\"apply_patch\"},"
             "{\"type\":\"function\",\"function\":{\"name\":\"nested\"}}],"
             "\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"reasoning\":{\"effort\":\"minimal\",\"summary\":\"auto\"},"
             "\"max_output_tokens\":256,\"temperature\":1,\"stream\":true,\"store\":false,\"include\":[]}",
             &r);
    CHECK_EQ_INT(r.kind, API_RESPONSES);
    CHECK_JSON(r.messages,
               "[{\"role\":\"system\",\"content\":\"Be careful.\\n\\nDev rules.\\n\\nMore rules.\"},"
               "{\"role\":\"user\",\"content\":\"run it\\nnow\"},"
               "{\"role\":\"assistant\",\"content\":\"Running.\",\"tool_calls\":["
               "{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"exec\",\"arguments\":{\"cmd\":\"ls\"}}},"
               "{\"id\":\"fc_b\",\"type\":\"function\",\"function\":{\"name\":\"exec\",\"arguments\":{\"cmd\":\"pwd\"}}}]},"
               "{\"role\":\"tool\",\"content\":\"file.txt\",\"tool_call_id\":\"call_a\"},"
               "{\"role\":\"tool\",\"content\":\"out.txt\\n[image omitted: dspark serves text-only models]\\n{\\\"k\\\":1}\","
               "\"tool_call_id\":\"fc_b\"},"
               "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
               "{\"id\":\"call_c\",\"type\":\"function\",\"function\":{\"name\":\"exec\",\"arguments\":{}}}]},"
               "{\"role\":\"tool\",\"content\":\"{\\\"ok\\\":true}\",\"tool_call_id\":\"call_c\"},"
               "{\"role\":\"system\",\"content\":\"mid\"}]");
    CHECK_JSON(r.tools,
               "[{\"type\":\"function\",\"function\":{\"name\":\"exec\",\"description\":\"Run\","
               "\"parameters\":{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"}}}}},"
               "{\"type\":\"function\",\"function\":{\"name\":\"nested\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]");
    CHECK_JSON(r.template_vars, "{\"reasoning_effort\":\"low\"}");
    CHECK_STR(r.model, "gpt");
    CHECK_EQ_INT(r.max_tokens, 256);
    CHECK(r.temperature == 1);
    CHECK_EQ_INT(r.stream, 1);
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_AUTO);
    CHECK_EQ_INT(r.thinking, -1);
    CHECK_EQ_INT(r.n_stop, 0);
    api_request_free(&r);

    PARSE_OK(API_RESPONSES, "{\"input\":\"hello\"}", &r);
    CHECK_JSON(r.messages, "[{\"role\":\"user\",\"content\":\"hello\"}]");
    CHECK_JSON(r.template_vars, "{}");
    CHECK(r.tools == NULL);
    CHECK_EQ_INT(r.max_tokens, -1);
    api_request_free(&r);
    /* a function call right after a user message opens its own assistant message */
    PARSE_OK(API_RESPONSES,
             "{\"instructions\":\"I\",\"input\":[{\"role\":\"user\",\"content\":\"u\"},"
             "{\"type\":\"function_call\",\"call_id\":\"k\",\"name\":\"f\",\"arguments\":\"{}\"}],"
             "\"reasoning\":{\"effort\":\"none\"}}",
             &r);
    CHECK_JSON(r.messages,
               "[{\"role\":\"system\",\"content\":\"I\"},{\"role\":\"user\",\"content\":\"u\"},"
               "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"k\",\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]");
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":false}");
    CHECK_EQ_INT(r.thinking, 0);
    api_request_free(&r);
}

/* ---- Anthropic messages ---- */

TEST(api_messages_blocks) {
    api_request r;
    PARSE_OK(API_MESSAGES,
             "{\"model\":\"claude\",\"max_tokens\":1024,\"system\":["
             "{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=1; cc_entrypoint=cli;\"},"
             "{\"type\":\"text\",\"text\":\"You are helpful.\",\"cache_control\":{\"type\":\"ephemeral\"}},"
             "{\"type\":\"text\",\"text\":\"Be terse.\"}],"
             "\"messages\":["
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"<reminder>\"},{\"type\":\"text\",\"text\":\"list files\"}]},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Need ls.\",\"signature\":\"sig\"},"
             "{\"type\":\"redacted_thinking\",\"data\":\"xx\"},{\"type\":\"text\",\"text\":\"Listing.\"},"
             "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{\"command\":\"ls\"}},"
             "{\"type\":\"tool_use\",\"name\":\"Read\",\"input\":{\"path\":\"a\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"a\\nb\","
             "\"cache_control\":{\"type\":\"ephemeral\"}},"
             "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1_1\",\"content\":[{\"type\":\"text\",\"text\":\"no such file\"},"
             "{\"type\":\"image\",\"source\":{}}],\"is_error\":true},"
             "{\"type\":\"text\",\"text\":\"what now?\"}]},"
             "{\"role\":\"assistant\",\"content\":\"Done.\"},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"x\",\"content\":\"only result\",\"is_error\":false}]}],"
             "\"tools\":[{\"name\":\"Bash\",\"description\":\"Run a command\",\"input_schema\":{\"type\":\"object\","
             "\"properties\":{\"command\":{\"type\":\"string\"}},\"required\":[\"command\"]},"
             "\"cache_control\":{\"type\":\"ephemeral\"},\"strict\":true,\"defer_loading\":false},"
             "{\"name\":\"NoSchema\"},{\"type\":\"web_search_20250305\",\"name\":\"web_search\",\"max_uses\":5},"
             "{\"type\":\"custom\",\"name\":\"Custom\",\"input_schema\":{\"type\":\"object\"}},{\"description\":\"nameless\"}],"
             "\"tool_choice\":{\"type\":\"auto\"},\"stop_sequences\":[\"\\n\\nHuman:\"],\"temperature\":0.2,\"top_p\":0.8,"
             "\"top_k\":40,\"stream\":true,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
             "\"output_config\":{\"effort\":\"max\"},\"metadata\":{\"user_id\":\"u\"},\"context_management\":{\"edits\":[]}}",
             &r);
    CHECK_EQ_INT(r.kind, API_MESSAGES);
    CHECK_JSON(r.messages,
               "[{\"role\":\"system\",\"content\":\"You are helpful.\\nBe terse.\"},"
               "{\"role\":\"user\",\"content\":\"<reminder>\\nlist files\"},"
               "{\"role\":\"assistant\",\"content\":\"Listing.\",\"reasoning_content\":\"Need ls.\",\"tool_calls\":["
               "{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"Bash\",\"arguments\":{\"command\":\"ls\"}}},"
               "{\"id\":\"toolu_1_1\",\"type\":\"function\",\"function\":{\"name\":\"Read\",\"arguments\":{\"path\":\"a\"}}}]},"
               "{\"role\":\"tool\",\"content\":\"a\\nb\",\"tool_call_id\":\"toolu_1\"},"
               "{\"role\":\"tool\",\"content\":\"Error: no such file\\n[image omitted: dspark serves text-only models]\","
               "\"tool_call_id\":\"toolu_1_1\"},"
               "{\"role\":\"user\",\"content\":\"what now?\"},"
               "{\"role\":\"assistant\",\"content\":\"Done.\"},"
               "{\"role\":\"tool\",\"content\":\"only result\",\"tool_call_id\":\"x\"}]");
    CHECK_JSON(r.tools,
               "[{\"type\":\"function\",\"function\":{\"name\":\"Bash\",\"description\":\"Run a command\","
               "\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string\"}},\"required\":[\"command\"]}}},"
               "{\"type\":\"function\",\"function\":{\"name\":\"NoSchema\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}},"
               "{\"type\":\"function\",\"function\":{\"name\":\"Custom\",\"parameters\":{\"type\":\"object\"}}}]");
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":true,\"reasoning_effort\":\"high\"}");
    CHECK_EQ_INT(r.thinking, 1);
    CHECK_EQ_INT(r.drop_reasoning, 0);
    CHECK_EQ_INT(r.thinking_budget, 2048);
    CHECK_EQ_INT(r.max_tokens, 1024);
    CHECK_EQ_INT(r.n_stop, 1);
    if (r.n_stop == 1) CHECK_STR(r.stop[0], "\n\nHuman:");
    CHECK_NEAR(r.temperature, 0.2, 0);
    CHECK_NEAR(r.top_p, 0.8, 0);
    CHECK_EQ_INT(r.top_k, 40);
    CHECK_EQ_INT(r.stream, 1);
    CHECK_STR(r.model, "claude");
    CHECK_EQ_INT(r.n, 1);
    api_request_free(&r);
}

TEST(api_messages_system_folding) {
    api_request r;
    PARSE_OK(API_MESSAGES,
             "{\"max_tokens\":10,\"system\":\"Base.\",\"messages\":["
             "{\"role\":\"system\",\"content\":\"Lead 1.\"},"
             "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"Lead 2.\"}]},"
             "{\"role\":\"user\",\"content\":\"q1\"},"
             "{\"role\":\"system\",\"content\":\"after q1\"},"
             "{\"role\":\"assistant\",\"content\":\"a1\"},"
             "{\"role\":\"system\",\"content\":\"before q2\"},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":\"r\"}]},"
             "{\"role\":\"assistant\",\"content\":\"a2\"},"
             "{\"role\":\"system\",\"content\":\"at end\"}]}",
             &r);
    CHECK_JSON(r.messages,
               "[{\"role\":\"system\",\"content\":\"Base.\\n\\nLead 1.\\n\\nLead 2.\"},"
               "{\"role\":\"user\",\"content\":\"q1\\n\\n<system-reminder>\\nafter q1\\n</system-reminder>\"},"
               "{\"role\":\"assistant\",\"content\":\"a1\"},"
               "{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"t\"},"
               "{\"role\":\"user\",\"content\":\"<system-reminder>\\nbefore q2\\n</system-reminder>\"},"
               "{\"role\":\"assistant\",\"content\":\"a2\"},"
               "{\"role\":\"user\",\"content\":\"<system-reminder>\\nat end\\n</system-reminder>\"}]");
    CHECK_JSON(r.template_vars, "{}");
    CHECK_EQ_INT(r.thinking, -1);
    CHECK(r.tools == NULL);
    api_request_free(&r);
    /* leading system messages are the system prompt; an empty user turn is kept */
    PARSE_OK(API_MESSAGES,
             "{\"max_tokens\":10,\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":[]}]}",
             &r);
    CHECK_JSON(r.messages, "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"\"}]");
    api_request_free(&r);
}

TEST(api_messages_thinking) {
    api_request r;
    static const char msgs[] = "\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char body[512];
    snprintf(body, sizeof body, "{%s,\"thinking\":{\"type\":\"disabled\"},\"output_config\":{\"effort\":\"high\"}}", msgs);
    PARSE_OK(API_MESSAGES, body, &r);
    CHECK_EQ_INT(r.thinking, 0);
    CHECK_EQ_INT(r.drop_reasoning, 1);
    CHECK_STR(r.reasoning_effort, "");
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":false}");
    CHECK_EQ_INT(r.thinking_budget, -1);
    api_request_free(&r);
    snprintf(body, sizeof body, "{%s,\"thinking\":{\"type\":\"adaptive\"},\"output_config\":{\"effort\":\"bogus\"}}", msgs);
    PARSE_OK(API_MESSAGES, body, &r);
    CHECK_EQ_INT(r.thinking, 1);
    CHECK_EQ_INT(r.drop_reasoning, 0);
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":true}");
    api_request_free(&r);
    snprintf(body, sizeof body, "{%s,\"thinking\":{\"type\":\"adaptive\"},\"output_config\":{\"effort\":\"medium\"}}", msgs);
    PARSE_OK(API_MESSAGES, body, &r);
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":true,\"reasoning_effort\":\"medium\"}");
    api_request_free(&r);
    snprintf(body, sizeof body, "{%s,\"output_config\":{\"effort\":\"low\"}}", msgs);
    PARSE_OK(API_MESSAGES, body, &r);
    CHECK_EQ_INT(r.thinking, -1);
    CHECK_JSON(r.template_vars, "{\"reasoning_effort\":\"low\"}");
    api_request_free(&r);
    /* count_tokens: same body, max_tokens optional */
    PARSE_OK(API_COUNT_TOKENS, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"system\":\"S\"}", &r);
    CHECK_EQ_INT(r.kind, API_COUNT_TOKENS);
    CHECK_JSON(r.messages, "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hi\"}]");
    CHECK_EQ_INT(r.max_tokens, -1);
    api_request_free(&r);
}

/* ---- errors ---- */

typedef struct {
    api_kind kind;
    const char *body, *want; /* want: a substring of the message */
} err_case;

static const err_case ERRS[] = {
    /* chat */
    {API_CHAT, "{}", "'messages' must be a non-empty array"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "'logprobs' must be true or false"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}",
     "'top_logprobs' must be at most 20"},
    {API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":6}", "'logprobs' must be at most 5"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"yaml\"}}",
     "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\" (got \"yaml\")"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\"}}",
     "'response_format.json_schema' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":5}}}",
     "'response_format.json_schema.schema' must be a JSON Schema object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":1}}}",
     "'response_format.json_schema.strict' must be a boolean"},
    {API_RESPONSES, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\"}}}",
     "'text.format.schema' is required"},
    {API_RESPONSES, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "'text.format.type' must be"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":3}", "'presence_penalty' must be a number in [-2, 2]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":\"1\"}", "'frequency_penalty' must be a number in [-2, 2]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"repetition_penalty\":0}", "'repetition_penalty' must be a number in (0, 100]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"repetition_penalty\":1.1,\"repeat_penalty\":1.2}", "are the same setting: give one"},
    {API_COMPLETIONS, "{\"prompt\":\"x\",\"repeat_last_n\":-2}", "'repeat_last_n' must be an integer >= -1"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":[1,2]}", "'logit_bias' must be an object mapping token ids"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"abc\":1}}", "'logit_bias' key \"abc\" is not a token id"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"-1\":1}}", "'logit_bias' key \"-1\" is not a token id"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":101}}", "'logit_bias[\"5\"]' must be a number in [-100, 100]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"ignore_eos\":1}", "'ignore_eos' must be true or false"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":\"json\"}",
     "'response_format' must be an object"},
    {API_CHAT, "{\"messages\":[]}", "'messages' must be a non-empty array"},
    {API_CHAT, "{\"messages\":{}}", "'messages' must be a non-empty array"},
    {API_CHAT, "{\"messages\":[1]}", "'messages[0]' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", "'messages[0].role' must be one of"},
    {API_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "'messages[0].role' must be one of"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "'messages[0].content' must be"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
               "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
     "image/audio/file content is not supported: dspark serves text-only models ('messages[0].content[1]'"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}",
     "image/audio/file content is not supported"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\"}]}]}",
     "image/audio/file content is not supported"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "'messages[0].content[0].text' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}",
     "'messages[0].content[0].type' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[5]}]}", "'messages[0].content[0]' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":"
               "[{\"function\":{\"name\":\"f\",\"arguments\":\"{bad\"}}]}]}",
     "'messages[1].tool_calls[0].function.arguments' is not valid JSON"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
     "'messages[0].tool_calls[0].function.arguments' must hold a JSON object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{} x\"}}]}]}",
     "'messages[0].tool_calls[0].function.arguments' is not valid JSON"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":5}}]}]}",
     "'messages[0].tool_calls[0].function.arguments' must be a JSON object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "'messages[0].tool_calls' must be an array"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[1]}]}", "'messages[0].tool_calls[0]' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{}]}]}",
     "'messages[0].tool_calls[0].function' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}",
     "'messages[0].tool_calls[0].function.name' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":5,\"function\":{\"name\":\"f\"}}]}]}",
     "'messages[0].tool_calls[0].id' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"reasoning_content\":5}]}",
     "'messages[0].reasoning_content' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"reasoning\":{}}]}", "'messages[0].reasoning' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":5}]}", "'messages[0].tool_call_id' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":{}}", "'tools' must be an array"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":[1]}", "'tools[0]' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":5}]}", "'tools[0].type' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"function\",\"function\":{}}]}",
     "'tools[0].function.name' must be a non-empty string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]}",
     "'tools[0].function.name' must be a non-empty string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"function\",\"function\":5}]}",
     "'tools[0].function' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
               "\"parameters\":[]}}]}",
     "'tools[0].function.parameters' must be a JSON object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
               "\"description\":5}}]}",
     "'tools[0].function.description' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tool_choice\":\"sometimes\"}", "'tool_choice' must be"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tool_choice\":5}", "'tool_choice' must be"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tool_choice\":{\"type\":\"allowed_tools\"}}", "'tool_choice' must be"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tool_choice\":{\"type\":\"function\"}}",
     "'tool_choice' must name a function"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tool_choice\":\"required\"}",
     "'tool_choice' requires a tool call but no tools were given"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
               "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
     "'tool_choice' names the tool \"g\", which is not among 'tools'"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
     "not among 'tools'"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"chat_template_kwargs\":[]}", "'chat_template_kwargs' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}",
     "'chat_template_kwargs.enable_thinking' must be true or false"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"enable_thinking\":1}", "'enable_thinking' must be true or false"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"reasoning_effort\":\"extreme\"}",
     "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh (got \"extreme\")"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"reasoning_effort\":3}", "'reasoning_effort' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"chat_template_kwargs\":{\"reasoning_effort\":\"bad\"}}",
     "'chat_template_kwargs.reasoning_effort' must be one of"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"reasoning_budget\":-1}", "'reasoning_budget' must be an integer >= 0"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"reasoning_budget\":1.5}", "'reasoning_budget' must be an integer"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"reasoning_budget\":true}", "'reasoning_budget' must be an integer"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"reasoning_budget_message\":5}",
     "'reasoning_budget_message' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_tokens\":0}", "'max_tokens' must be an integer >= 1"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_completion_tokens\":-3}",
     "'max_completion_tokens' must be an integer >= 1"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_tokens\":\"10\"}", "'max_tokens' must be an integer"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_tokens\":1e13}", "'max_tokens' must be at most"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"temperature\":2.5}", "'temperature' must be a number in [0, 2]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"temperature\":\"hot\"}", "'temperature' must be a number"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"temperature\":-0.1}", "'temperature' must be a number"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"top_p\":0}", "'top_p' must be a number in (0, 1]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"top_p\":1.5}", "'top_p' must be a number in (0, 1]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"top_k\":-1}", "'top_k' must be an integer >= 0"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"min_p\":2}", "'min_p' must be a number in [0, 1]"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"seed\":1.5}", "'seed' must be an integer"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"seed\":1e300}", "'seed' must be at most"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"seed\":\"7\"}", "'seed' must be an integer"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stop\":5}", "'stop' must be a string or an array of strings"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stop\":[\"a\",1]}", "'stop[1]' must be a string"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
               "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
     "'stop' may hold at most 16 strings (got 17)"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stream\":\"yes\"}", "'stream' must be true or false"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stream_options\":1}", "'stream_options' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stream_options\":{\"include_usage\":\"y\"}}",
     "'stream_options.include_usage' must be true or false"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"n\":33}", "'n' must be at most 32"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"n\":0}", "'n' must be an integer >= 1"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"model\":5}", "'model' must be a string"},
    /* completions */
    {API_COMPLETIONS, "{}", "'prompt' must be a string"},
    {API_COMPLETIONS, "{\"prompt\":[1,2]}", "'prompt' must be a string"},
    {API_COMPLETIONS, "{\"prompt\":[]}", "'prompt' must be a string"},
    {API_COMPLETIONS, "{\"prompt\":5}", "'prompt' must be a string"},
    {API_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":0}", "'max_tokens' must be an integer >= 1"},
    {API_COMPLETIONS, "{\"prompt\":\"x\",\"n\":1.5}", "'n' must be an integer"},
    {API_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[5]}", "'stop[0]' must be a string"},
    {API_COMPLETIONS, "{\"prompt\":\"x\",\"top_p\":-1}", "'top_p' must be a number"},
    /* Responses */
    {API_RESPONSES, "{}", "'input' is required"},
    {API_RESPONSES, "{\"input\":null}", "'input' is required"},
    {API_RESPONSES, "{\"input\":5}", "'input' must be a string or an array of items"},
    {API_RESPONSES, "{\"input\":[]}", "'input' must not be an empty array"},
    {API_RESPONSES, "{\"input\":[{\"type\":\"reasoning\",\"summary\":[]}]}", "'input' holds no message or function call items"},
    {API_RESPONSES, "{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}",
     "previous_response_id is not supported: this server is stateless; send the whole conversation in input"},
    {API_RESPONSES, "{\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation is not supported"},
    {API_RESPONSES, "{\"input\":[5]}", "'input[0]' must be an object"},
    {API_RESPONSES, "{\"input\":[{\"type\":5}]}", "'input[0].type' must be a string"},
    {API_RESPONSES, "{\"input\":[{\"role\":\"bot\",\"content\":\"x\"}]}", "'input[0].role' must be one of"},
    {API_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
                    "{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}",
     "image/audio/file content is not supported: dspark serves text-only models ('input[0].content[1]'"},
    {API_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_id\":\"f\"}]}]}",
     "image/audio/file content is not supported"},
    {API_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":{}}]}", "'input[0].content' must be"},
    {API_RESPONSES, "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"arguments\":\"{}\"}]}",
     "'input[0].name' must be a string"},
    {API_RESPONSES, "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{\"}]}",
     "'input[0].arguments' is not valid JSON"},
    {API_RESPONSES, "{\"input\":[{\"type\":\"function_call\",\"call_id\":5,\"name\":\"f\"}]}",
     "'input[0].call_id' must be a string"},
    {API_RESPONSES, "{\"input\":[{\"type\":\"function_call\",\"id\":5,\"name\":\"f\"}]}", "'input[0].id' must be a string"},
    {API_RESPONSES, "{\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}",
     "'input[0].call_id' must be a string"},
    {API_RESPONSES, "{\"input\":\"x\",\"instructions\":5}", "'instructions' must be a string"},
    {API_RESPONSES, "{\"input\":\"x\",\"reasoning\":\"high\"}", "'reasoning' must be an object"},
    {API_RESPONSES, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"huge\"}}", "'reasoning.effort' must be one of"},
    {API_RESPONSES, "{\"input\":\"x\",\"max_output_tokens\":0}", "'max_output_tokens' must be an integer >= 1"},
    {API_RESPONSES, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "'tools[0].name' must be a non-empty string"},
    {API_RESPONSES, "{\"input\":\"x\",\"tool_choice\":\"required\"}", "'tool_choice' requires"},
    {API_RESPONSES, "{\"input\":\"x\",\"temperature\":3}", "'temperature' must be a number"},
    {API_RESPONSES, "{\"input\":\"x\",\"reasoning_budget\":-2}", "'reasoning_budget' must be an integer >= 0"},
    /* Anthropic messages */
    {API_MESSAGES, "{\"max_tokens\":1}", "'messages': must be a non-empty array"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[]}", "'messages': must be a non-empty array"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":\"hi\"}", "'messages': must be a non-empty array"},
    {API_MESSAGES, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "'max_tokens' is required"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
     "'messages': must include a user or assistant message"},
    {API_MESSAGES, "{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "'max_tokens' must be an integer >= 1"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[1]}", "'messages[0]' must be an object"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
     "'messages[0].role' must be one of user, assistant, system"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":5}]}",
     "'messages[0].content' must be a string or an array of content blocks"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                   "{\"type\":\"image\",\"source\":{}}]}]}",
     "image content is not supported: dspark serves text-only models ('messages[0].content[1]')"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\"}]}]}",
     "document content is not supported: dspark serves text-only models"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"image\"}]}]}",
     "image content is not supported"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}",
     "'messages[0].content[0].type' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "'messages[0].content[0].text' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
     "'messages[0].content[0].text' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{}]}]}",
     "'messages[0].content[0].type' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":7}]}",
     "'messages[0].content' must be a string or an array of content blocks"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"r\"}]}]}",
     "'messages[0].content[0].tool_use_id' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                   "\"tool_use_id\":\"t\",\"content\":5}]}]}",
     "'messages[0].content[0].content' must be a string or an array of content blocks"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                   "\"tool_use_id\":\"t\",\"content\":[{\"text\":\"x\"}]}]}]}",
     "'messages[0].content[0].content[0].type' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                   "\"tool_use_id\":\"t\",\"content\":[{\"type\":\"text\"}]}]}]}",
     "'messages[0].content[0].content[0].text' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                   "\"tool_use_id\":\"t\",\"is_error\":\"yes\"}]}]}",
     "'messages[0].content[0].is_error' must be true or false"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                   "\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"input\":{}}]}]}",
     "'messages[1].content[0].name' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                   "\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":5}]}]}",
     "'messages[1].content[0].input' must be a JSON object"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                   "\"content\":[{\"type\":\"tool_use\",\"id\":5,\"name\":\"f\"}]}]}",
     "'messages[1].content[0].id' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                   "\"content\":[{\"type\":\"thinking\",\"signature\":\"s\"}]}]}",
     "'messages[1].content[0].thinking' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"system\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "'system' must be a string or an array of text blocks"},
    {API_MESSAGES, "{\"max_tokens\":1,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "'system[0]' must be a text block"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":5},{\"role\":\"user\",\"content\":\"x\"}]}",
     "'messages[0].content' must be a string or an array of text blocks"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"system\",\"content\":5}]}",
     "'messages[1].content' must be a string or an array of text blocks"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":\"a\"},"
                   "{\"role\":\"system\",\"content\":[1]}]}",
     "'messages[2].content[0]' must be a text block"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "'tools' must be an array"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[1]}",
     "'tools[0]' must be an object"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":5}]}",
     "'tools[0].name' must be a non-empty string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"t\","
                   "\"input_schema\":[]}]}",
     "'tools[0].input_schema' must be a JSON object"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"t\","
                   "\"description\":5}]}",
     "'tools[0].description' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\"}",
     "'tool_choice' must be an object"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"sometimes\"}}",
     "'tool_choice.type' must be one of auto, any, tool, none"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"tool\"}}",
     "'tool_choice.name' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"any\"}}",
     "'tool_choice' requires a tool call"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"tool\","
                   "\"name\":\"x\"},\"tools\":[{\"name\":\"y\"}]}",
     "'tool_choice' names the tool \"x\", which is not among 'tools'"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":\"on\"}",
     "'thinking' must be an object"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":{\"type\":\"maybe\"}}",
     "'thinking.type' must be one of enabled, disabled, adaptive"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":{\"type\":\"enabled\","
                   "\"budget_tokens\":0}}",
     "'thinking.budget_tokens' must be an integer >= 1"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_sequences\":[1]}",
     "'stop_sequences[0]' must be a string"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_sequences\":{}}",
     "'stop_sequences' must be a string or an array of strings"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}",
     "'temperature' must be a number"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":1.5}",
     "'top_k' must be an integer"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}",
     "'stream' must be true or false"},
    {API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":[]}",
     "'model' must be a string"},
    {API_COUNT_TOKENS, "{}", "'messages': must be a non-empty array"},
    /* dspark's extension */
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":true}",
     "'x_dspark' must be an object"},
    {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":{\"speculative\":0}}",
     "'x_dspark.speculative' must be true or false"},
    {API_COMPLETIONS, "{\"prompt\":\"x\",\"x_dspark\":{\"speculativ\":false}}",
     "'x_dspark.speculativ' is not a known field"},
    {API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":[]}",
     "'x_dspark' must be an object"},
    {API_COUNT_TOKENS, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
     "image content is not supported"},
};

TEST(api_errors_name_the_field) {
    for (size_t i = 0; i < sizeof ERRS / sizeof ERRS[0]; i++) {
        const err_case *c = &ERRS[i];
        char err[512];
        api_request r;
        int rc = parse_at(__LINE__, c->kind, c->body, &r, err, sizeof err);
        CHECK_MSG(rc == 400, "case %zu (%s): rc %d, want 400", i, c->body, rc);
        CHECK_MSG(strstr(err, c->want) != NULL, "case %zu (%s):\n  got:  %s\n  want: ...%s...", i, c->body, err, c->want);
        /* nothing is left allocated on failure */
        CHECK_MSG(r.messages == NULL && r.tools == NULL && r.template_vars == NULL && r.stop == NULL && r.model == NULL &&
                      r.prompt == NULL && r.tool_choice_name == NULL && r.thinking_budget_message == NULL,
                  "case %zu: request not cleared", i);
        CHECK_EQ_INT(r.kind, c->kind);
        api_request_free(&r);
    }
}

TEST(api_body_must_be_object) {
    const char *bodies[] = {"[1]", "\"text\"", "null", "3", "true"};
    for (int k = API_CHAT; k <= API_COUNT_TOKENS; k++)
        for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
            char err[256];
            api_request r;
            int rc = parse_at(__LINE__, (api_kind)k, bodies[i], &r, err, sizeof err);
            CHECK_EQ_INT(rc, 400);
            CHECK_MSG(!strcmp(err, "request body must be a JSON object"), "kind %d %s: %s", k, bodies[i], err);
            api_request_free(&r);
        }
    /* a NULL body (nothing parsed) too, and a NULL err buffer is allowed */
    api_request r;
    CHECK_EQ_INT(api_parse(API_CHAT, NULL, &r, NULL, 0), 400);
    api_request_free(&r);
}

/* ---- real client bodies ---- */

static cJSON *load_fixture(const char *name) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/api/%s", test_data_dir(), name);
    size_t n;
    char *text = ds_read_file(path, &n, err, sizeof err);
    CHECK_MSG(text != NULL, "%s", err);
    if (!text) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    CHECK_MSG(j != NULL, "%s: not JSON", path);
    /* a capture file wraps the body in {method, path, headers, body} */
    cJSON *body = cJSON_GetObjectItemCaseSensitive(j, "body");
    if (cJSON_IsObject(body) && cJSON_GetObjectItemCaseSensitive(j, "method")) {
        cJSON_DetachItemViaPointer(j, body);
        cJSON_Delete(j);
        j = body;
    }
    return j;
}

/* "role,role,..." of r->messages into out. */
static void roles_of(const cJSON *msgs, char *out, size_t n) {
    out[0] = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        size_t l = strlen(out);
        snprintf(out + l, n - l, "%s%s", l ? "," : "", cJSON_IsString(role) ? role->valuestring : "?");
    }
}

static const char *field(const cJSON *m, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Feeding the produced messages and tools back as a chat request gives the same messages and tools. */
static void check_chat_roundtrip(int line, const api_request *r) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddItemToObject(b, "messages", cJSON_Duplicate(r->messages, 1));
    if (r->tools) cJSON_AddItemToObject(b, "tools", cJSON_Duplicate(r->tools, 1));
    api_request again;
    char err[512];
    int rc = api_parse(API_CHAT, b, &again, err, sizeof err);
    cJSON_Delete(b);
    if (rc != 0) {
        test_fail(__FILE__, line, "round trip: %s", err);
        return;
    }
    /* printed forms: cJSON_Compare misjudges objects with duplicate keys */
    char *msgs = cJSON_PrintUnformatted(r->messages), *tools = r->tools ? cJSON_PrintUnformatted(r->tools) : xstrdup("null");
    check_json_at(line, again.messages, msgs);
    check_json_at(line, again.tools, tools);
    free(msgs);
    free(tools);
    api_request_free(&again);
}

TEST(api_claude_code_bodies) {
    cJSON *b = load_fixture("claude_code_tool_roundtrip.json");
    if (!b) return;
    api_request r;
    char err[512], roles[256];
    int rc = api_parse(API_MESSAGES, b, &r, err, sizeof err);
    CHECK_MSG(rc == 0, "claude code body: %s", err);
    cJSON_Delete(b);
    if (rc) return;
    roles_of(r.messages, roles, sizeof roles);
    CHECK_STR(roles, "system,user,assistant,tool");
    const cJSON *m = r.messages;
    const char *sys = field(cJSON_GetArrayItem(m, 0), "content"), *user = field(cJSON_GetArrayItem(m, 1), "content");
    CHECK_MSG(starts(sys, "You are a Claude agent, built on Anthropic's Claude Agent SDK.\n"), "system: %.80s", sys);
    CHECK(strstr(sys, "x-anthropic-billing-header") == NULL);
    /* the user's two text blocks, then the mid-conversation system message folded in as a reminder */
    CHECK_MSG(starts(user, "<system-reminder>\nAs you answer the user's questions"), "user: %.80s", user);
    CHECK(strstr(user, "</system-reminder>\n\n\nrun echo\n\n<system-reminder>\nAvailable agent types") != NULL);
    CHECK_MSG(strlen(user) >= 19 && !strcmp(user + strlen(user) - 19, "\n</system-reminder>"), "user ends: %s",
              user + (strlen(user) > 40 ? strlen(user) - 40 : 0));
    const cJSON *asst = cJSON_GetArrayItem(m, 2), *tool = cJSON_GetArrayItem(m, 3);
    CHECK_STR(field(asst, "content"), "done");
    CHECK_JSON(cJSON_GetObjectItemCaseSensitive(asst, "tool_calls"),
               "[{\"id\":\"toolu_stub01\",\"type\":\"function\",\"function\":{\"name\":\"Bash\","
               "\"arguments\":{\"command\":\"echo hi-from-tool\",\"description\":\"stub tool call\"}}}]");
    CHECK_JSON(tool, "{\"role\":\"tool\",\"content\":\"hi-from-tool\",\"tool_call_id\":\"toolu_stub01\"}");
    CHECK_EQ_INT(cJSON_GetArraySize(r.tools), 6);
    const cJSON *bash = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.tools, 1), "function");
    CHECK_STR(field(bash, "name"), "Bash");
    CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(bash, "parameters")));
    CHECK_JSON(r.template_vars, "{\"enable_thinking\":true,\"reasoning_effort\":\"high\"}");
    CHECK_EQ_INT(r.thinking, 1);
    CHECK_EQ_INT(r.max_tokens, 32000);
    CHECK_EQ_INT(r.stream, 1);
    CHECK_STR(r.model, "qwen3-0.6b");
    check_chat_roundtrip(__LINE__, &r);
    api_request_free(&r);

    /* --bare with a thinking block sent back */
    b = load_fixture("claude_code_thinking_tool.json");
    if (!b) return;
    rc = api_parse(API_MESSAGES, b, &r, err, sizeof err);
    CHECK_MSG(rc == 0, "claude code thinking body: %s", err);
    cJSON_Delete(b);
    if (rc) return;
    roles_of(r.messages, roles, sizeof roles);
    CHECK_STR(roles, "system,user,assistant,tool");
    CHECK_STR(field(cJSON_GetArrayItem(r.messages, 0), "content"),
              "You are a Claude agent, built on Anthropic's Claude Agent SDK.\nCWD: $TMPDIR/cc/work\nDate: 2026-11-29");
    CHECK_STR(field(cJSON_GetArrayItem(r.messages, 2), "reasoning_content"), "The user wants a greeting.");
    CHECK_EQ_INT(cJSON_GetArraySize(r.tools), 3);
    check_chat_roundtrip(__LINE__, &r);
    api_request_free(&r);
    /* the same body counts tokens */
    b = load_fixture("claude_code_thinking_tool.json");
    if (!b) return;
    CHECK_EQ_INT(api_parse(API_COUNT_TOKENS, b, &r, err, sizeof err), 0);
    cJSON_Delete(b);
    api_request_free(&r);
}

TEST(api_codex_body) {
    cJSON *b = load_fixture("codex_exec_tool_roundtrip.json");
    if (!b) return;
    api_request r;
    char err[512], roles[256];
    int rc = api_parse(API_RESPONSES, b, &r, err, sizeof err);
    CHECK_MSG(rc == 0, "codex body: %s", err);
    cJSON_Delete(b);
    if (rc) return;
    roles_of(r.messages, roles, sizeof roles);
    /* two developer messages -> one system message; two user messages; the call; its output */
    CHECK_STR(roles, "system,user,user,assistant,tool");
    const char *sys = field(cJSON_GetArrayItem(r.messages, 0), "content");
    CHECK_MSG(starts(sys, "You are a coding agent running in the Codex CLI"), "system: %.80s", sys);
    CHECK(strstr(sys, "\n\n<skills_instructions>") != NULL);
    CHECK_STR(field(cJSON_GetArrayItem(r.messages, 2), "content"), "run echo");
    CHECK_JSON(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.messages, 3), "tool_calls"),
               "[{\"id\":\"call_stub1\",\"type\":\"function\",\"function\":{\"name\":\"exec_command\","
               "\"arguments\":{\"cmd\":\"echo hi-from-tool\"}}}]");
    const cJSON *tool = cJSON_GetArrayItem(r.messages, 4);
    CHECK_STR(field(tool, "tool_call_id"), "call_stub1");
    CHECK(starts(field(tool, "content"), "Chunk ID: "));
    /* exec_command and write_stdin; the namespace and web_search tools are skipped */
    CHECK_EQ_INT(cJSON_GetArraySize(r.tools), 2);
    CHECK_STR(field(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.tools, 0), "function"), "name"), "exec_command");
    CHECK_EQ_INT(r.tool_choice, TOOL_CHOICE_AUTO);
    CHECK_JSON(r.template_vars, "{}");
    CHECK_EQ_INT(r.stream, 1);
    CHECK_STR(r.model, "qwen3-0.6b");
    check_chat_roundtrip(__LINE__, &r);
    api_request_free(&r);
}

/* the fields that shape the distribution and the output format, as parsed */
TEST(api_penalties_bias_and_formats) {
    api_request r;
    char err[512];
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":0.5,"
                    "\"frequency_penalty\":-1,\"logit_bias\":{\"12\":-100,\"7\":2.5},\"seed\":-3,\"n\":4,"
                    "\"ignore_eos\":true,\"repeat_penalty\":1.2,\"response_format\":{\"type\":\"json_schema\","
                    "\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}";
    CHECK_EQ_INT(parse_at(__LINE__, API_CHAT, b, &r, err, sizeof err), 0);
    CHECK(r.presence == 0.5 && r.frequency == -1);
    CHECK_EQ_INT(r.n_bias, 2);
    CHECK(r.bias_id[0] == 12 && r.bias[0] == -100 && r.bias_id[1] == 7 && r.bias[1] == 2.5f);
    CHECK(r.has_seed && r.seed == -3); /* a negative seed is a seed */
    CHECK_EQ_INT(r.n, 4);
    CHECK_EQ_INT(r.ignore_eos, 1);
    CHECK(r.repetition == 1.2 && r.rep_window == 64); /* llama.cpp's name: its default window */
    CHECK_EQ_INT(r.json_mode, API_JSON_SCHEMA);
    CHECK_JSON(r.json_schema, "{\"type\":\"object\"}");
    api_request_free(&r);
    b = "{\"prompt\":\"x\",\"repetition_penalty\":1.5,\"response_format\":{\"type\":\"json_object\"}}";
    CHECK_EQ_INT(parse_at(__LINE__, API_COMPLETIONS, b, &r, err, sizeof err), 0);
    CHECK(r.repetition == 1.5 && r.rep_window == -1); /* vLLM's name: the whole context */
    CHECK_EQ_INT(r.json_mode, API_JSON_OBJECT);
    CHECK(!r.has_seed && r.n == 1 && r.n_bias == 0);
    api_request_free(&r);
    b = "{\"prompt\":\"x\",\"repeat_penalty\":1.5,\"repeat_last_n\":-1}";
    CHECK_EQ_INT(parse_at(__LINE__, API_COMPLETIONS, b, &r, err, sizeof err), 0);
    CHECK(r.repetition == 1.5 && r.rep_window == -1);
    api_request_free(&r);
    b = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\",\"schema\":{\"type\":"
        "\"array\"}}}}";
    CHECK_EQ_INT(parse_at(__LINE__, API_RESPONSES, b, &r, err, sizeof err), 0);
    CHECK_EQ_INT(r.json_mode, API_JSON_SCHEMA);
    CHECK_JSON(r.json_schema, "{\"type\":\"array\"}");
    api_request_free(&r);
    /* Anthropic: temperature in [0, 1] */
    b = "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":1.5}";
    CHECK_EQ_INT(parse_at(__LINE__, API_MESSAGES, b, &r, err, sizeof err), 400);
    CHECK_MSG(strstr(err, "temperature: range: 0..1"), "%s", err);
    b = "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":1}";
    CHECK_EQ_INT(parse_at(__LINE__, API_MESSAGES, b, &r, err, sizeof err), 0);
    api_request_free(&r);
}

/* the plain forms of the refused features are accepted */
TEST(api_accepts_plain_output_formats) {
    const struct {
        api_kind kind;
        const char *body;
    } ok[] = {
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false,\"top_logprobs\":0}"},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"text\"}}"},
        {API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":0}"},
        {API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":null}"},
        {API_RESPONSES, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}}}"},
        {API_RESPONSES, "{\"input\":\"x\",\"text\":{\"verbosity\":\"low\"}}"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char err[512];
        api_request r;
        int rc = parse_at(__LINE__, ok[i].kind, ok[i].body, &r, err, sizeof err);
        CHECK_MSG(rc == 0, "%s: %s", ok[i].body, err);
        api_request_free(&r);
    }
}

TEST(api_logprobs_fields) {
    const struct {
        api_kind kind;
        const char *body;
        int want;
    } cases[] = {
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", -1},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}", 0},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":3}", 3},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false,\"top_logprobs\":3}", -1},
        {API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":2}", 2},
        {API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":0}", 0},
        {API_COMPLETIONS, "{\"prompt\":\"x\"}", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512];
        api_request r;
        CHECK_MSG(parse_at(__LINE__, cases[i].kind, cases[i].body, &r, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(r.logprobs == cases[i].want, "%s: logprobs %d, want %d", cases[i].body, r.logprobs, cases[i].want);
        api_request_free(&r);
    }
}

TEST(api_x_dspark_speculative) {
    const struct {
        api_kind kind;
        const char *body;
        int want;
    } cases[] = {
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", -1},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":{\"speculative\":false}}", 0},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":{\"speculative\":true}}", 1},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":{}}", -1},
        {API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":null}", -1},
        {API_COMPLETIONS, "{\"prompt\":\"x\",\"x_dspark\":{\"speculative\":false}}", 0},
        {API_RESPONSES, "{\"input\":\"x\",\"x_dspark\":{\"speculative\":false}}", 0},
        {API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"x_dspark\":{\"speculative\":false}}", 0},
        /* count_tokens generates nothing: the field is not looked at */
        {API_COUNT_TOKENS, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x_dspark\":1}", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512];
        api_request r;
        CHECK_MSG(parse_at(__LINE__, cases[i].kind, cases[i].body, &r, err, sizeof err) == 0, "%s: %s", cases[i].body, err);
        CHECK_MSG(r.speculative == cases[i].want, "%s: speculative %d, want %d", cases[i].body, r.speculative,
                  cases[i].want);
        api_request_free(&r);
    }
}
