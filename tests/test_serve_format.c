/* Server reply formatting (serve_format.c) without a model: SSE framing
 * (every frame "event: NAME\ndata: JSON\n\n" or "data: JSON\n\n", event names
 * equal to the data's type), each dialect's event order and indexes, keep-alive
 * frames, and the whole-reply bodies. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/serve_internal.h"
#include "test.h"

typedef struct {
    char event[64];
    cJSON *data; /* NULL for comments and [DONE] */
    int done, comment;
} sse_frame;

/* Splits an SSE byte stream into frames; returns the count or -1 when a
   frame is malformed (the reason is reported with CHECK). */
static int parse_sse(const char *s, sse_frame *fr, int max) {
    int n = 0;
    while (*s) {
        const char *end = strstr(s, "\n\n");
        CHECK_MSG(end != NULL, "unterminated frame: %s", s);
        if (!end || n == max) return -1;
        sse_frame *f = &fr[n++];
        memset(f, 0, sizeof *f);
        const char *line = s;
        while (line < end) {
            const char *nl = memchr(line, '\n', (size_t)(end - line));
            if (!nl) nl = end;
            size_t len = (size_t)(nl - line);
            if (len >= 7 && !strncmp(line, "event: ", 7)) snprintf(f->event, sizeof f->event, "%.*s", (int)len - 7, line + 7);
            else if (len >= 6 && !strncmp(line, "data: ", 6)) {
                if (len == 12 && !strncmp(line + 6, "[DONE]", 6)) f->done = 1;
                else {
                    char *js = strndup(line + 6, len - 6);
                    f->data = cJSON_Parse(js);
                    CHECK_MSG(f->data != NULL, "data is not JSON: %s", js);
                    free(js);
                }
            } else if (len >= 1 && line[0] == ':') f->comment = 1;
            else CHECK_MSG(0, "unexpected SSE line: %.*s", (int)len, line);
            line = nl + 1;
        }
        if (f->event[0] && f->data) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(f->data, "type");
            CHECK_MSG(cJSON_IsString(t) && !strcmp(t->valuestring, f->event), "event %s carries type %s", f->event,
                      cJSON_IsString(t) ? t->valuestring : "(none)");
        }
        s = end + 2;
    }
    return n;
}

static void free_frames(sse_frame *fr, int n) {
    for (int i = 0; i < n; i++) cJSON_Delete(fr[i].data);
}

static const char *jstr(const cJSON *o, const char *path) {
    /* path: dotted keys, e.g. "delta.type" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *x = o;
    for (char *k = strtok(buf, "."); k && x; k = strtok(NULL, ".")) x = cJSON_GetObjectItemCaseSensitive(x, k);
    return cJSON_IsString(x) ? x->valuestring : "";
}

static double jnum(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

typedef struct {
    server srv;
    api_request req;
    sched_job *job;
    fmt_state f;
    tc_call call;
    tc_result calls;
} fixture;

static void fixture_init(fixture *x, api_kind kind, const char *body) {
    memset(x, 0, sizeof *x);
    x->srv.model_id = "test-model";
    x->srv.mode = "dspark";
    char err[256];
    cJSON *b = cJSON_Parse(body);
    CHECK(b != NULL);
    CHECK_EQ_INT(api_parse(kind, b, &x->req, err, sizeof err), 0);
    cJSON_Delete(b);
    x->job = sched_job_new();
    x->job->n_ids = 10;
    x->job->st.n_prefilled = 7; /* 3 cached */
    x->job->st.n_gen = 6;
    x->job->st.n_rounds = 3;
    x->job->st.n_round_tok = 5;
    x->job->finish = FINISH_EOS;
    fmt_init(&x->f, kind, &x->req, &x->srv, x->job, 10);
    snprintf(x->call.id, sizeof x->call.id, "call_0123456789abcdef01234567");
    x->call.name = "get_weather";
    x->call.arguments = "{\"city\":\"Paris\"}";
    x->calls.calls = &x->call;
    x->calls.n = 1;
}

static void fixture_free(fixture *x) {
    fmt_free(&x->f);
    sched_job_release(x->job);
    api_request_free(&x->req);
}

TEST(serve_format_anthropic_stream) {
    fixture x;
    fixture_init(&x, API_MESSAGES, "{\"max_tokens\":10,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    strbuf out = {0};
    fmt_stream_begin(&x.f, &out);
    fmt_stream_delta(&x.f, "Let me", 6, "", 0, &out);
    fmt_stream_delta(&x.f, " think", 6, "", 0, &out);
    fmt_stream_keepalive(&x.f, &out);
    fmt_stream_delta(&x.f, "", 0, "Hello", 5, &out);
    fmt_stream_delta(&x.f, "", 0, " world", 6, &out);
    fmt_stream_end(&x.f, &x.calls, &out);
    sse_frame fr[64];
    int n = parse_sse(sb_str(&out), fr, 64);
    const char *want[] = {"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                          "ping", "content_block_delta", "content_block_stop", "content_block_start",
                          "content_block_delta", "content_block_delta", "content_block_stop", "content_block_start",
                          "content_block_delta", "content_block_stop", "message_delta", "message_stop"};
    int nw = (int)(sizeof want / sizeof want[0]);
    CHECK_EQ_INT(n, nw);
    for (int i = 0; i < n && i < nw; i++) CHECK_MSG(!strcmp(fr[i].event, want[i]), "frame %d: %s, want %s", i, fr[i].event, want[i]);
    if (n == nw) {
        CHECK(!strcmp(jstr(fr[2].data, "content_block.type"), "thinking"));
        CHECK(!strcmp(jstr(fr[3].data, "delta.thinking"), "Let me"));
        CHECK(!strcmp(jstr(fr[6].data, "delta.type"), "signature_delta"));
        CHECK_EQ_INT(jnum(fr[7].data, "index"), 0);
        CHECK(!strcmp(jstr(fr[8].data, "content_block.type"), "text"));
        CHECK_EQ_INT(jnum(fr[8].data, "index"), 1);
        CHECK(!strcmp(jstr(fr[10].data, "delta.text"), " world"));
        CHECK(!strcmp(jstr(fr[12].data, "content_block.type"), "tool_use"));
        CHECK(!strcmp(jstr(fr[12].data, "content_block.id"), "toolu_0123456789abcdef01234567"));
        CHECK_EQ_INT(jnum(fr[12].data, "index"), 2);
        CHECK(!strcmp(jstr(fr[13].data, "delta.partial_json"), "{\"city\":\"Paris\"}"));
        CHECK(!strcmp(jstr(fr[15].data, "delta.stop_reason"), "tool_use"));
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(fr[15].data, "usage");
        CHECK_EQ_INT(jnum(u, "output_tokens"), 6);
        CHECK_EQ_INT(jnum(u, "input_tokens"), 7);
        CHECK_EQ_INT(jnum(u, "cache_read_input_tokens"), 3);
        CHECK(!strcmp(jstr(fr[15].data, "x_dspark.mode"), "dspark"));
    }
    free_frames(fr, n > 0 ? n : 0);
    sb_free(&out);
    fixture_free(&x);
}

TEST(serve_format_chat_stream) {
    fixture x;
    fixture_init(&x, API_CHAT,
                 "{\"stream\":true,\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    strbuf out = {0};
    fmt_stream_begin(&x.f, &out);
    fmt_stream_delta(&x.f, "hmm", 3, "", 0, &out);
    fmt_stream_keepalive(&x.f, &out);
    fmt_stream_delta(&x.f, "", 0, "Hel\xc3\xa9", 5, &out);
    fmt_stream_end(&x.f, &x.calls, &out);
    sse_frame fr[32];
    int n = parse_sse(sb_str(&out), fr, 32);
    /* role, reasoning, keep-alive, content, tool_calls, finish, usage, [DONE] */
    CHECK_EQ_INT(n, 8);
    if (n == 8) {
        for (int i = 0; i < 7; i++) {
            CHECK(!fr[i].event[0]);
            CHECK(!strcmp(jstr(fr[i].data, "object"), "chat.completion.chunk"));
            CHECK(!strcmp(jstr(fr[i].data, "id"), jstr(fr[0].data, "id")));
        }
        const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(fr[0].data, "choices"), 0);
        CHECK(!strcmp(jstr(c0, "delta.role"), "assistant"));
        const cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItem(fr[1].data, "choices"), 0);
        CHECK(!strcmp(jstr(c1, "delta.reasoning_content"), "hmm"));
        const cJSON *c2 = cJSON_GetArrayItem(cJSON_GetObjectItem(fr[2].data, "choices"), 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c2, "delta")) == 0);
        const cJSON *c3 = cJSON_GetArrayItem(cJSON_GetObjectItem(fr[3].data, "choices"), 0);
        CHECK(!strcmp(jstr(c3, "delta.content"), "Hel\xc3\xa9"));
        const cJSON *c4 = cJSON_GetArrayItem(cJSON_GetObjectItem(fr[4].data, "choices"), 0);
        const cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c4, "delta"), "tool_calls"), 0);
        CHECK(!strcmp(jstr(tc, "function.name"), "get_weather"));
        CHECK(!strcmp(jstr(tc, "function.arguments"), "{\"city\":\"Paris\"}"));
        CHECK_EQ_INT(jnum(tc, "index"), 0);
        const cJSON *c5 = cJSON_GetArrayItem(cJSON_GetObjectItem(fr[5].data, "choices"), 0);
        CHECK(!strcmp(jstr(c5, "finish_reason"), "tool_calls"));
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(fr[6].data, "choices")) == 0);
        const cJSON *u = cJSON_GetObjectItem(fr[6].data, "usage");
        CHECK_EQ_INT(jnum(u, "prompt_tokens"), 10);
        CHECK_EQ_INT(jnum(u, "completion_tokens"), 6);
        CHECK_EQ_INT(jnum(u, "total_tokens"), 16);
        CHECK(fr[7].done);
    }
    free_frames(fr, n > 0 ? n : 0);
    sb_free(&out);
    fixture_free(&x);
}

TEST(serve_format_responses_stream) {
    fixture x;
    fixture_init(&x, API_RESPONSES, "{\"stream\":true,\"input\":\"hi\"}");
    strbuf out = {0};
    fmt_stream_begin(&x.f, &out);
    fmt_stream_delta(&x.f, "plan", 4, "", 0, &out);
    fmt_stream_keepalive(&x.f, &out);
    fmt_stream_delta(&x.f, "", 0, "Hi", 2, &out);
    fmt_stream_delta(&x.f, "", 0, "!", 1, &out);
    fmt_stream_end(&x.f, &x.calls, &out);
    sse_frame fr[48];
    int n = parse_sse(sb_str(&out), fr, 48);
    const char *want[] = {"response.created", "response.in_progress", "", "response.output_item.added",
                          "response.output_item.done", "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
                          "response.content_part.done", "response.output_item.done", "response.output_item.added",
                          "response.function_call_arguments.delta", "response.function_call_arguments.done",
                          "response.output_item.done", "response.completed"};
    int nw = (int)(sizeof want / sizeof want[0]);
    CHECK_EQ_INT(n, nw);
    int seqn = 0;
    for (int i = 0; i < n && i < nw; i++) {
        CHECK_MSG(!strcmp(fr[i].event, want[i]), "frame %d: %s, want %s", i, fr[i].event, want[i]);
        if (!fr[i].data) {
            CHECK(fr[i].comment);
            continue;
        }
        CHECK_EQ_INT(jnum(fr[i].data, "sequence_number"), ++seqn);
    }
    if (n == nw) {
        CHECK(!strcmp(jstr(cJSON_GetObjectItem(fr[3].data, "item"), "type"), "reasoning"));
        CHECK_EQ_INT(jnum(fr[3].data, "output_index"), 0);
        CHECK_EQ_INT(jnum(fr[5].data, "output_index"), 1);
        CHECK(!strcmp(jstr(fr[9].data, "text"), "Hi!"));
        CHECK_EQ_INT(jnum(fr[12].data, "output_index"), 2);
        CHECK(!strcmp(jstr(fr[14].data, "arguments"), "{\"city\":\"Paris\"}"));
        const cJSON *resp = cJSON_GetObjectItem(fr[16].data, "response");
        CHECK(!strcmp(jstr(resp, "status"), "completed"));
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(resp, "output")), 3);
        CHECK_EQ_INT(jnum(cJSON_GetObjectItem(resp, "usage"), "output_tokens"), 6);
    }
    free_frames(fr, n > 0 ? n : 0);
    sb_free(&out);
    fixture_free(&x);
}

TEST(serve_format_completions_stream_and_bodies) {
    fixture x;
    fixture_init(&x, API_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":true}");
    x.job->finish = FINISH_LENGTH;
    strbuf out = {0};
    fmt_stream_begin(&x.f, &out);
    CHECK_EQ_INT(out.n, 0);
    fmt_stream_delta(&x.f, "", 0, "xy", 2, &out);
    fmt_stream_keepalive(&x.f, &out);
    tc_result none = {0};
    fmt_stream_end(&x.f, &none, &out);
    sse_frame fr[8];
    int n = parse_sse(sb_str(&out), fr, 8);
    CHECK_EQ_INT(n, 4);
    if (n == 4) {
        CHECK(!strcmp(jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(fr[0].data, "choices"), 0), "text"), "xy"));
        CHECK(fr[1].comment);
        CHECK(!strcmp(jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(fr[2].data, "choices"), 0), "finish_reason"), "length"));
        CHECK(fr[3].done);
    }
    free_frames(fr, n > 0 ? n : 0);
    sb_free(&out);
    char *b = fmt_body(&x.f, "", "xy", &none);
    cJSON *o = cJSON_Parse(b);
    CHECK(!strcmp(jstr(o, "object"), "text_completion"));
    CHECK(!strcmp(jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "text"), "xy"));
    cJSON_Delete(o);
    free(b);
    fixture_free(&x);

    /* Anthropic whole reply: thinking, text, tool_use in that order; a stop string */
    fixture_init(&x, API_MESSAGES, "{\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    b = fmt_body(&x.f, "r", "t", &x.calls);
    o = cJSON_Parse(b);
    const cJSON *content = cJSON_GetObjectItem(o, "content");
    CHECK_EQ_INT(cJSON_GetArraySize(content), 3);
    CHECK(!strcmp(jstr(cJSON_GetArrayItem(content, 0), "type"), "thinking"));
    CHECK(!strcmp(jstr(cJSON_GetArrayItem(content, 1), "text"), "t"));
    CHECK(!strcmp(jstr(cJSON_GetArrayItem(content, 2), "input.city"), "Paris"));
    CHECK(!strcmp(jstr(o, "stop_reason"), "tool_use"));
    cJSON_Delete(o);
    free(b);
    x.job->finish = FINISH_STOP;
    snprintf(x.job->stop_hit, sizeof x.job->stop_hit, "END");
    b = fmt_body(&x.f, "", "", &none);
    o = cJSON_Parse(b);
    content = cJSON_GetObjectItem(o, "content");
    CHECK_EQ_INT(cJSON_GetArraySize(content), 1); /* always one block */
    CHECK(!strcmp(jstr(o, "stop_reason"), "stop_sequence"));
    CHECK(!strcmp(jstr(o, "stop_sequence"), "END"));
    cJSON_Delete(o);
    free(b);
    fixture_free(&x);

    /* chat whole reply with a tool call: content null, finish tool_calls */
    fixture_init(&x, API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    b = fmt_body(&x.f, "why", "", &x.calls);
    o = cJSON_Parse(b);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItem(c, "message");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    CHECK(!strcmp(jstr(m, "reasoning_content"), "why"));
    CHECK(!strcmp(jstr(c, "finish_reason"), "tool_calls"));
    CHECK_EQ_INT(jnum(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens_details"), "cached_tokens"), 3);
    cJSON_Delete(o);
    free(b);
    fixture_free(&x);
}

/* An answer that did not end whole (cut at shutdown, an engine error, a
   cancel) ends in its dialect's error after whatever text went out: never a
   finish reason, usage, [DONE], message_stop or response.completed. */
TEST(serve_format_cut_endings) {
    static const struct {
        api_kind kind;
        const char *body;
    } cases[] = {
        {API_CHAT, "{\"stream\":true,\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"},
        {API_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
        {API_RESPONSES, "{\"stream\":true,\"input\":\"hi\"}"},
        {API_MESSAGES, "{\"max_tokens\":10,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"},
    };
    const int finishes[] = {FINISH_SHUTDOWN, FINISH_ERROR, FINISH_CANCEL};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t k = 0; k < sizeof finishes / sizeof finishes[0]; k++) {
            fixture x;
            fixture_init(&x, cases[c].kind, cases[c].body);
            x.job->finish = finishes[k];
            snprintf(x.job->error, sizeof x.job->error, "%s",
                     finishes[k] == FINISH_SHUTDOWN ? "the server shut down before this answer was finished"
                     : finishes[k] == FINISH_ERROR  ? "out of memory"
                                                    : "");
            char msg[256];
            int status = fmt_failure(x.job, msg, sizeof msg);
            CHECK_EQ_INT(status, finishes[k] == FINISH_SHUTDOWN ? 503 : 500);
            CHECK_MSG(strstr(msg, finishes[k] == FINISH_SHUTDOWN ? "shut down" : finishes[k] == FINISH_ERROR
                                                                                   ? "generation failed: out of memory"
                                                                                   : "cancelled"),
                      "message: %s", msg);
            strbuf out = {0};
            fmt_stream_begin(&x.f, &out);
            fmt_stream_delta(&x.f, "", 0, "Hel", 3, &out);
            fmt_stream_error(&x.f, &out);
            sse_frame fr[32];
            int n = parse_sse(sb_str(&out), fr, 32);
            CHECK_MSG(n >= 2, "kind %d finish %d: %d frames", (int)cases[c].kind, finishes[k], n);
            for (int i = 0; i < n; i++) {
                CHECK_MSG(!fr[i].done, "kind %d: [DONE] in a failed stream", (int)cases[c].kind);
                const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(fr[i].data, "choices"), 0);
                const cJSON *fin = cJSON_GetObjectItem(ch, "finish_reason");
                CHECK_MSG(!fin || cJSON_IsNull(fin), "kind %d: finish_reason %s", (int)cases[c].kind, jstr(ch, "finish_reason"));
                CHECK(!cJSON_GetObjectItem(fr[i].data, "usage") || cases[c].kind == API_RESPONSES);
                CHECK(strcmp(fr[i].event, "message_delta") && strcmp(fr[i].event, "message_stop") &&
                      strcmp(fr[i].event, "response.completed") && strcmp(fr[i].event, "response.incomplete"));
            }
            if (n >= 2) {
                const cJSON *last = fr[n - 1].data;
                const char *want_msg = finishes[k] == FINISH_SHUTDOWN ? "shut down" : finishes[k] == FINISH_ERROR
                                                                                          ? "out of memory"
                                                                                          : "cancelled";
                if (cases[c].kind == API_MESSAGES) {
                    CHECK(!strcmp(fr[n - 1].event, "error"));
                    CHECK(!strcmp(jstr(last, "error.type"), finishes[k] == FINISH_SHUTDOWN ? "overloaded_error" : "api_error"));
                    CHECK(strstr(jstr(last, "error.message"), want_msg) != NULL);
                } else if (cases[c].kind == API_RESPONSES) {
                    CHECK(!strcmp(fr[n - 1].event, "response.failed"));
                    const cJSON *resp = cJSON_GetObjectItem(last, "response");
                    CHECK(!strcmp(jstr(resp, "status"), "failed"));
                    CHECK(!strcmp(jstr(resp, "error.code"), "server_error"));
                    CHECK(strstr(jstr(resp, "error.message"), want_msg) != NULL);
                    CHECK_EQ_INT(jnum(last, "sequence_number"), jnum(fr[n - 2].data, "sequence_number") + 1);
                } else {
                    CHECK(!fr[n - 1].event[0]);
                    CHECK(strstr(jstr(last, "error.message"), want_msg) != NULL);
                    CHECK(!strcmp(jstr(last, "error.type"),
                                  finishes[k] == FINISH_SHUTDOWN ? "service_unavailable" : "server_error"));
                    if (finishes[k] == FINISH_SHUTDOWN) CHECK(!strcmp(jstr(last, "error.code"), "server_shutting_down"));
                }
            }
            free_frames(fr, n > 0 ? n : 0);
            sb_free(&out);
            fixture_free(&x);
        }
    /* the whole ends */
    fixture x;
    fixture_init(&x, API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    const int whole[] = {FINISH_EOS, FINISH_STOP, FINISH_LENGTH};
    for (int i = 0; i < 3; i++) {
        x.job->finish = whole[i];
        CHECK_EQ_INT(fmt_failure(x.job, NULL, 0), 0);
    }
    fixture_free(&x);
}
