/* serve_format: the reply bodies and stream events of each dialect (see
 * serve_internal.h):
 *   OpenAI chat:  chat.completion / chat.completion.chunk frames (data:
 *                 only), reasoning as reasoning_content, tool calls as one
 *                 delta.tool_calls chunk at the end, usage in a final chunk
 *                 when stream_options.include_usage, then [DONE];
 *   completions:  text_completion frames, then [DONE];
 *   Responses:    typed events with sequence numbers (response.created ...
 *                 response.completed), reasoning / message / function_call
 *                 output items;
 *   Anthropic:    message_start, ping, content blocks (thinking, text,
 *                 tool_use) with their deltas, message_delta, message_stop.
 * Every finished reply carries the x_dspark telemetry object. A job that did
 * not end whole (fmt_failure: an engine error, a cut at shutdown, a cancel)
 * ends in the dialect's error instead, never in a normal finish: a stream
 * gets fmt_stream_error, a whole reply an error status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/serve_internal.h"
#include "base/util.h"

enum { BLOCK_NONE, BLOCK_THINKING, BLOCK_TEXT };

void fmt_init(fmt_state *f, api_kind kind, const api_request *req, const server *srv, const sched_job *job,
              int n_prompt) {
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->req = req;
    f->srv = srv;
    f->job = job;
    f->n_prompt = n_prompt;
    f->created = (long)time(NULL);
    ds_unique_id(f->id, sizeof f->id,
                 kind == API_CHAT ? "chatcmpl-" : kind == API_COMPLETIONS ? "cmpl-" : kind == API_RESPONSES ? "resp_"
                                                                                                        : "msg_");
}

void fmt_next_choice(fmt_state *f, const sched_job *job) {
    fmt_state old = *f;
    fmt_free(f);
    fmt_init(f, old.kind, old.req, old.srv, job, old.n_prompt);
    memcpy(f->id, old.id, sizeof f->id);
    f->created = old.created;
    f->index = old.index + 1;
    f->gen_before = old.gen_before + old.job->st.n_gen;
}

void fmt_free(fmt_state *f) {
    sb_free(&f->answer);
    sb_free(&f->reason);
    free(f->lp);
}

void fmt_add_logprobs(fmt_state *f, const sched_logprob *e, int n) {
    if (n <= 0) return;
    if (f->n_lp + n > f->cap_lp) {
        f->cap_lp = f->n_lp + n + 32;
        f->lp = xrealloc(f->lp, sizeof *f->lp * (size_t)f->cap_lp);
    }
    memcpy(f->lp + f->n_lp, e, sizeof *e * (size_t)n);
    f->n_lp += n;
}

/* A token as text (invalid UTF-8 bytes shown as U+FFFD) and, when bytes is
   not NULL, its raw bytes as a number array (what OpenAI's "bytes" holds). */
static void token_json(const fmt_state *f, int id, cJSON *into, const char *key_text, int with_bytes) {
    size_t n = 0;
    const char *b = tok_token_bytes(f->srv->tok, id, &n);
    if (!b) b = "", n = 0;
    strbuf t = {0};
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)b[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
        int ok = len && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = ((unsigned char)b[i + k] & 0xC0) == 0x80;
        if (ok) {
            sb_append(&t, b + i, len);
            i += len;
        } else {
            sb_puts(&t, "\xef\xbf\xbd");
            i++;
        }
    }
    cJSON_AddStringToObject(into, key_text, sb_str(&t));
    sb_free(&t);
    if (with_bytes) {
        cJSON *arr = cJSON_AddArrayToObject(into, "bytes");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber((unsigned char)b[i]));
    }
}

/* chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]};
   completions: {tokens, token_logprobs, top_logprobs: [{token: lp}], text_offset}.
   Takes the pending entries. NULL when none are pending. */
static cJSON *take_logprobs(fmt_state *f) {
    if (f->req->logprobs < 0) return NULL;
    cJSON *o = cJSON_CreateObject();
    if (f->kind == API_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = 0; i < f->n_lp; i++) {
            const sched_logprob *e = &f->lp[i];
            cJSON *t = cJSON_CreateObject();
            token_json(f, e->id, t, "token", 1);
            cJSON_AddNumberToObject(t, "logprob", e->lp);
            cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
            for (int k = 0; k < e->n_top; k++) {
                cJSON *a = cJSON_CreateObject();
                token_json(f, e->top_id[k], a, "token", 1);
                cJSON_AddNumberToObject(a, "logprob", e->top_lp[k]);
                cJSON_AddItemToArray(top, a);
            }
            cJSON_AddItemToArray(content, t);
        }
    } else {
        cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
        cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
        for (int i = 0; i < f->n_lp; i++) {
            const sched_logprob *e = &f->lp[i];
            cJSON *tmp = cJSON_CreateObject();
            token_json(f, e->id, tmp, "t", 0);
            const char *ts = cJSON_GetObjectItem(tmp, "t")->valuestring;
            cJSON_AddItemToArray(toks, cJSON_CreateString(ts));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(e->lp));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)f->text_offset));
            size_t nb = 0;
            tok_token_bytes(f->srv->tok, e->id, &nb);
            f->text_offset += nb;
            cJSON *alt = cJSON_CreateObject();
            for (int k = 0; k < e->n_top; k++) {
                cJSON *a = cJSON_CreateObject();
                token_json(f, e->top_id[k], a, "t", 0);
                const char *as = cJSON_GetObjectItem(a, "t")->valuestring;
                if (!cJSON_GetObjectItem(alt, as)) cJSON_AddNumberToObject(alt, as, e->top_lp[k]);
                cJSON_Delete(a);
            }
            cJSON_AddItemToArray(tops, alt);
            cJSON_Delete(tmp);
        }
    }
    f->n_lp = 0;
    return o;
}

static const char *model_name(const fmt_state *f) { return f->req->model ? f->req->model : f->srv->model_id; }

static void frame(strbuf *out, const char *event, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    if (event) sb_printf(out, "event: %s\n", event);
    sb_puts(out, "data: ");
    sb_puts(out, s);
    sb_puts(out, "\n\n");
    free(s);
    cJSON_Delete(o);
}

cJSON *fmt_telemetry(const server *srv, const sched_job *j) {
    const spec_stats *st = &j->st;
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "mode", j->plain ? "baseline" : srv->mode);
    cJSON_AddNumberToObject(x, "request", (double)j->req_id);
    cJSON_AddNumberToObject(x, "tokens_per_round", st->n_rounds ? (double)st->n_round_tok / st->n_rounds : 0.0);
    cJSON_AddNumberToObject(x, "cap", j->cap);
    cJSON_AddNumberToObject(x, "rounds", st->n_rounds);
    cJSON_AddNumberToObject(x, "drafted", (double)st->n_drafted);
    cJSON_AddNumberToObject(x, "accepted", (double)st->n_accepted);
    cJSON_AddNumberToObject(x, "draft_acceptance", st->n_drafted ? (double)st->n_accepted / st->n_drafted : 0.0);
    /* rounds by drafts accepted: [k] = rounds that accepted k drafts, up to
       the last non-zero entry ([] without rounds) */
    int top = SPEC_MAX_DRAFT;
    while (top >= 0 && !st->accept_hist[top]) top--;
    cJSON *h = cJSON_AddArrayToObject(x, "accept_hist");
    for (int a = 0; a <= top; a++) cJSON_AddItemToArray(h, cJSON_CreateNumber(st->accept_hist[a]));
    cJSON_AddNumberToObject(x, "prompt_tokens", j->n_ids);
    cJSON_AddNumberToObject(x, "cached_tokens", j->n_ids - st->n_prefilled);
    cJSON_AddNumberToObject(x, "completion_tokens", st->n_gen);
    cJSON_AddNumberToObject(x, "tokens_per_sec", st->t_decode > 0 && st->n_gen > 1 ? (st->n_gen - 1) / st->t_decode
                                                                                   : 0.0);
    cJSON_AddNumberToObject(x, "prefill_tokens_per_sec",
                            st->t_prefill > 0 && st->n_prefilled > 0 ? st->n_prefilled / st->t_prefill : 0.0);
    cJSON_AddNumberToObject(x, "prefill_seconds", st->t_prefill);
    cJSON_AddNumberToObject(x, "decode_seconds", st->t_decode);
    cJSON_AddNumberToObject(x, "queue_seconds", j->t_start > 0 ? j->t_start - j->t_queued : 0.0);
    cJSON_AddNumberToObject(x, "ttft_seconds", j->t_first > 0 ? j->t_first - j->t_queued : 0.0);
    cJSON_AddNumberToObject(x, "drafter_share", st->t_decode > 0 ? st->t_draft / st->t_decode : 0.0);
    if (j->budget_forced) cJSON_AddBoolToObject(x, "reasoning_budget_forced", 1);
    return x;
}

/* ---- finish reasons and usage ---- */

static int cached_tokens(const fmt_state *f) { return f->job->n_ids - f->job->st.n_prefilled; }

static const char *openai_finish(const fmt_state *f, const tc_result *c) {
    if (c && c->n) return "tool_calls";
    return f->job->finish == FINISH_LENGTH ? "length" : "stop";
}

static const char *anthropic_stop(const fmt_state *f, const tc_result *c) {
    if (c && c->n) return "tool_use";
    switch (f->job->finish) {
    case FINISH_STOP: return "stop_sequence";
    case FINISH_LENGTH: return "max_tokens";
    default: return "end_turn";
    }
}

static cJSON *openai_usage(const fmt_state *f) {
    cJSON *u = cJSON_CreateObject();
    long out = f->gen_before + f->job->st.n_gen;
    cJSON_AddNumberToObject(u, "prompt_tokens", f->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", out);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(f->n_prompt + out));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", cached_tokens(f));
    return u;
}

static cJSON *anthropic_usage(const fmt_state *f, int final) {
    cJSON *u = cJSON_CreateObject();
    int cached = final ? cached_tokens(f) : 0;
    cJSON_AddNumberToObject(u, "input_tokens", f->n_prompt - cached);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    cJSON_AddNumberToObject(u, "output_tokens", final ? f->job->st.n_gen : 0);
    return u;
}

static cJSON *responses_usage(const fmt_state *f) {
    cJSON *u = cJSON_CreateObject();
    int out = f->job->st.n_gen;
    cJSON_AddNumberToObject(u, "input_tokens", f->n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", cached_tokens(f));
    cJSON_AddNumberToObject(u, "output_tokens", out);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", f->n_prompt + out);
    return u;
}

static cJSON *parse_args(const char *json) {
    cJSON *a = json ? cJSON_Parse(json) : NULL;
    if (!cJSON_IsObject(a)) {
        cJSON_Delete(a);
        a = cJSON_CreateObject();
    }
    return a;
}

static cJSON *openai_tool_call(const tc_call *c, int index, int with_index) {
    cJSON *t = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(t, "index", index);
    cJSON_AddStringToObject(t, "id", c->id);
    cJSON_AddStringToObject(t, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(fn, "name", c->name);
    cJSON_AddStringToObject(fn, "arguments", c->arguments ? c->arguments : "{}");
    return t;
}

static void anthropic_tool_id(const tc_call *c, char *out, size_t n) {
    snprintf(out, n, "toolu_%s", !strncmp(c->id, "call_", 5) ? c->id + 5 : c->id);
}

/* ---- OpenAI chat and completions ---- */

static cJSON *chunk(const fmt_state *f, cJSON **choice) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", f->id);
    cJSON_AddStringToObject(o, "object", f->kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)f->created);
    cJSON_AddStringToObject(o, "model", model_name(f));
    cJSON *cs = cJSON_AddArrayToObject(o, "choices");
    if (choice) {
        *choice = cJSON_CreateObject();
        cJSON_AddNumberToObject(*choice, "index", f->index);
        cJSON_AddItemToArray(cs, *choice);
    }
    return o;
}

static void chat_delta(fmt_state *f, const char *key, const char *val, size_t n, strbuf *out) {
    cJSON *c, *o = chunk(f, &c);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    char *v = xmalloc(n + 1);
    memcpy(v, val, n);
    v[n] = 0;
    cJSON_AddStringToObject(d, key, v);
    free(v);
    cJSON *lp = f->n_lp ? take_logprobs(f) : NULL;
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    cJSON_AddNullToObject(c, "finish_reason");
    frame(out, NULL, o);
}

static void completion_text(fmt_state *f, const char *text, size_t n, const char *finish, strbuf *out) {
    cJSON *c, *o = chunk(f, &c);
    char *v = xmalloc(n + 1);
    memcpy(v, text, n);
    v[n] = 0;
    cJSON_AddStringToObject(c, "text", v);
    free(v);
    cJSON *lp = f->n_lp ? take_logprobs(f) : NULL;
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    if (finish) cJSON_AddItemToObject(o, "x_dspark", fmt_telemetry(f->srv, f->job));
    frame(out, NULL, o);
}

/* ---- Responses ---- */

static cJSON *resp_event(fmt_state *f, const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", ++f->seq);
    return o;
}

static cJSON *resp_message_item(const fmt_state *f, const char *text, int done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", f->item_id);
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(it, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (done) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "output_text");
        cJSON_AddStringToObject(p, "text", text);
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddItemToArray(content, p);
    }
    return it;
}

static cJSON *resp_reasoning_item(const char *id, const char *text) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "reasoning");
    cJSON *sum = cJSON_AddArrayToObject(it, "summary"), *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "summary_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddItemToArray(sum, p);
    return it;
}

static cJSON *resp_call_item(const tc_call *c, const char *id, int done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(it, "call_id", c->id);
    cJSON_AddStringToObject(it, "name", c->name);
    cJSON_AddStringToObject(it, "arguments", done && c->arguments ? c->arguments : done ? "{}" : "");
    return it;
}

/* The response object; output may be NULL (an empty list); error: the
   failed response's {code, message}, taken over (NULL: none). */
static cJSON *resp_object_err(const fmt_state *f, const char *status, cJSON *output, int final, cJSON *error) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", f->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)f->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "model", model_name(f));
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    if (error) cJSON_AddItemToObject(o, "error", error);
    else cJSON_AddNullToObject(o, "error");
    if (final && !strcmp(status, "incomplete")) {
        cJSON *d = cJSON_AddObjectToObject(o, "incomplete_details");
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", 1);
    cJSON_AddStringToObject(o, "tool_choice", "auto");
    cJSON_AddArrayToObject(o, "tools");
    cJSON_AddObjectToObject(o, "metadata");
    if (final) {
        cJSON_AddItemToObject(o, "usage", responses_usage(f));
        cJSON_AddItemToObject(o, "x_dspark", fmt_telemetry(f->srv, f->job));
    } else cJSON_AddNullToObject(o, "usage");
    return o;
}

static cJSON *resp_object(const fmt_state *f, const char *status, cJSON *output, int final) {
    return resp_object_err(f, status, output, final, NULL);
}

static const char *resp_status(const fmt_state *f) {
    return f->job->finish == FINISH_LENGTH ? "incomplete" : "completed";
}

static void resp_emit_reasoning(fmt_state *f, strbuf *out) {
    if (f->reasoning_sent || !f->reason.n) return;
    f->reasoning_sent = 1;
    char *id = f->rs_id;
    ds_unique_id(id, sizeof f->rs_id, "rs_");
    cJSON *e = resp_event(f, "response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", f->n_blocks);
    cJSON *it = resp_reasoning_item(id, "");
    cJSON_DeleteItemFromObject(it, "summary");
    cJSON_AddArrayToObject(it, "summary");
    cJSON_AddItemToObject(e, "item", it);
    frame(out, "response.output_item.added", e);
    e = resp_event(f, "response.output_item.done");
    cJSON_AddNumberToObject(e, "output_index", f->n_blocks++);
    cJSON_AddItemToObject(e, "item", resp_reasoning_item(id, sb_str(&f->reason)));
    frame(out, "response.output_item.done", e);
}

static void resp_text_delta(fmt_state *f, const char *text, size_t n, strbuf *out) {
    if (!f->msg_open) {
        resp_emit_reasoning(f, out);
        f->msg_open = 1;
        ds_unique_id(f->item_id, sizeof f->item_id, "msg_");
        f->n_blocks++; /* the message's output_index is n_blocks - 1 */
        cJSON *e = resp_event(f, "response.output_item.added");
        cJSON_AddNumberToObject(e, "output_index", f->n_blocks - 1);
        cJSON_AddItemToObject(e, "item", resp_message_item(f, "", 0));
        frame(out, "response.output_item.added", e);
        e = resp_event(f, "response.content_part.added");
        cJSON_AddStringToObject(e, "item_id", f->item_id);
        cJSON_AddNumberToObject(e, "output_index", f->n_blocks - 1);
        cJSON_AddNumberToObject(e, "content_index", 0);
        cJSON *p = cJSON_AddObjectToObject(e, "part");
        cJSON_AddStringToObject(p, "type", "output_text");
        cJSON_AddStringToObject(p, "text", "");
        cJSON_AddArrayToObject(p, "annotations");
        frame(out, "response.content_part.added", e);
    }
    cJSON *e = resp_event(f, "response.output_text.delta");
    cJSON_AddStringToObject(e, "item_id", f->item_id);
    cJSON_AddNumberToObject(e, "output_index", f->n_blocks - 1);
    cJSON_AddNumberToObject(e, "content_index", 0);
    char *v = xmalloc(n + 1);
    memcpy(v, text, n);
    v[n] = 0;
    cJSON_AddStringToObject(e, "delta", v);
    free(v);
    frame(out, "response.output_text.delta", e);
}

/* ---- Anthropic ---- */

static void anth_close_block(fmt_state *f, strbuf *out) {
    if (f->block == BLOCK_NONE) return;
    cJSON *e;
    if (f->block == BLOCK_THINKING) {
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "content_block_delta");
        cJSON_AddNumberToObject(e, "index", f->n_blocks - 1);
        cJSON *d = cJSON_AddObjectToObject(e, "delta");
        cJSON_AddStringToObject(d, "type", "signature_delta");
        cJSON_AddStringToObject(d, "signature", "dspark");
        frame(out, "content_block_delta", e);
    }
    e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", "content_block_stop");
    cJSON_AddNumberToObject(e, "index", f->n_blocks - 1);
    frame(out, "content_block_stop", e);
    f->block = BLOCK_NONE;
}

static void anth_delta(fmt_state *f, int kind, const char *s, size_t n, strbuf *out) {
    if (f->block != kind) {
        anth_close_block(f, out);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "content_block_start");
        cJSON_AddNumberToObject(e, "index", f->n_blocks++);
        cJSON *b = cJSON_AddObjectToObject(e, "content_block");
        if (kind == BLOCK_THINKING) {
            cJSON_AddStringToObject(b, "type", "thinking");
            cJSON_AddStringToObject(b, "thinking", "");
            cJSON_AddStringToObject(b, "signature", "");
        } else {
            cJSON_AddStringToObject(b, "type", "text");
            cJSON_AddStringToObject(b, "text", "");
        }
        frame(out, "content_block_start", e);
        f->block = kind;
    }
    if (!n) return;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", "content_block_delta");
    cJSON_AddNumberToObject(e, "index", f->n_blocks - 1);
    cJSON *d = cJSON_AddObjectToObject(e, "delta");
    char *v = xmalloc(n + 1);
    memcpy(v, s, n);
    v[n] = 0;
    cJSON_AddStringToObject(d, "type", kind == BLOCK_THINKING ? "thinking_delta" : "text_delta");
    cJSON_AddStringToObject(d, kind == BLOCK_THINKING ? "thinking" : "text", v);
    free(v);
    frame(out, "content_block_delta", e);
}

/* ---- streams ---- */

void fmt_stream_begin(fmt_state *f, strbuf *out) {
    if (f->kind == API_CHAT) {
        cJSON *c, *o = chunk(f, &c);
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        cJSON_AddNullToObject(c, "finish_reason");
        frame(out, NULL, o);
    } else if (f->kind == API_RESPONSES) {
        cJSON *e = resp_event(f, "response.created");
        cJSON_AddItemToObject(e, "response", resp_object(f, "in_progress", NULL, 0));
        frame(out, "response.created", e);
        e = resp_event(f, "response.in_progress");
        cJSON_AddItemToObject(e, "response", resp_object(f, "in_progress", NULL, 0));
        frame(out, "response.in_progress", e);
    } else if (f->kind == API_MESSAGES) {
        cJSON *e = cJSON_CreateObject(), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "message_start");
        cJSON_AddStringToObject(m, "id", f->id);
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "model", model_name(f));
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        cJSON_AddItemToObject(m, "usage", anthropic_usage(f, 0));
        cJSON_AddItemToObject(e, "message", m);
        frame(out, "message_start", e);
        sb_puts(out, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    }
    /* completions: no opening frame */
}

void fmt_stream_delta(fmt_state *f, const char *reason, size_t nr, const char *text, size_t nt, strbuf *out) {
    if (nr) sb_append(&f->reason, reason, nr);
    if (nt) sb_append(&f->answer, text, nt);
    switch (f->kind) {
    case API_CHAT:
        if (nr) chat_delta(f, "reasoning_content", reason, nr, out);
        if (nt) chat_delta(f, "content", text, nt, out);
        break;
    case API_COMPLETIONS:
        if (nt) completion_text(f, text, nt, NULL, out);
        break;
    case API_RESPONSES:
        if (nt) resp_text_delta(f, text, nt, out);
        break;
    case API_MESSAGES:
        if (nr) anth_delta(f, BLOCK_THINKING, reason, nr, out);
        if (nt) anth_delta(f, BLOCK_TEXT, text, nt, out);
        break;
    default: break;
    }
}

void fmt_stream_keepalive(fmt_state *f, strbuf *out) {
    if (f->kind == API_CHAT) {
        cJSON *c, *o = chunk(f, &c);
        cJSON_AddObjectToObject(c, "delta");
        cJSON_AddNullToObject(c, "finish_reason");
        frame(out, NULL, o);
    } else if (f->kind == API_MESSAGES) sb_puts(out, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    else sb_puts(out, ": keepalive\n\n");
}

static void chat_end(fmt_state *f, const tc_result *calls, strbuf *out) {
    cJSON *c, *o;
    if (calls->n) {
        o = chunk(f, &c);
        cJSON *d = cJSON_AddObjectToObject(c, "delta"), *tc = cJSON_AddArrayToObject(d, "tool_calls");
        for (int i = 0; i < calls->n; i++) cJSON_AddItemToArray(tc, openai_tool_call(&calls->calls[i], i, 1));
        cJSON_AddNullToObject(c, "finish_reason");
        frame(out, NULL, o);
    }
    o = chunk(f, &c);
    cJSON_AddObjectToObject(c, "delta");
    cJSON *lp = f->n_lp ? take_logprobs(f) : NULL;
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    cJSON_AddStringToObject(c, "finish_reason", openai_finish(f, calls));
    cJSON_AddItemToObject(o, "x_dspark", fmt_telemetry(f->srv, f->job));
    frame(out, NULL, o);
}

static void usage_chunk(fmt_state *f, strbuf *out) {
    if (!f->req->include_usage) return;
    cJSON *o = chunk(f, NULL);
    cJSON_AddItemToObject(o, "usage", openai_usage(f));
    frame(out, NULL, o);
}

static void resp_end(fmt_state *f, const tc_result *calls, strbuf *out) {
    resp_emit_reasoning(f, out);
    cJSON *output = cJSON_CreateArray();
    if (f->reasoning_sent) cJSON_AddItemToArray(output, resp_reasoning_item(f->rs_id, sb_str(&f->reason)));
    if (f->msg_open) {
        int idx = f->n_blocks - 1;
        cJSON *e = resp_event(f, "response.output_text.done");
        cJSON_AddStringToObject(e, "item_id", f->item_id);
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddNumberToObject(e, "content_index", 0);
        cJSON_AddStringToObject(e, "text", sb_str(&f->answer));
        frame(out, "response.output_text.done", e);
        e = resp_event(f, "response.content_part.done");
        cJSON_AddStringToObject(e, "item_id", f->item_id);
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddNumberToObject(e, "content_index", 0);
        cJSON *p = cJSON_AddObjectToObject(e, "part");
        cJSON_AddStringToObject(p, "type", "output_text");
        cJSON_AddStringToObject(p, "text", sb_str(&f->answer));
        cJSON_AddArrayToObject(p, "annotations");
        frame(out, "response.content_part.done", e);
        e = resp_event(f, "response.output_item.done");
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddItemToObject(e, "item", resp_message_item(f, sb_str(&f->answer), 1));
        frame(out, "response.output_item.done", e);
        cJSON_AddItemToArray(output, resp_message_item(f, sb_str(&f->answer), 1));
    }
    for (int i = 0; i < calls->n; i++) {
        const tc_call *c = &calls->calls[i];
        char id[64];
        ds_unique_id(id, sizeof id, "fc_");
        int idx = f->n_blocks++;
        cJSON *e = resp_event(f, "response.output_item.added");
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddItemToObject(e, "item", resp_call_item(c, id, 0));
        frame(out, "response.output_item.added", e);
        e = resp_event(f, "response.function_call_arguments.delta");
        cJSON_AddStringToObject(e, "item_id", id);
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddStringToObject(e, "delta", c->arguments ? c->arguments : "{}");
        frame(out, "response.function_call_arguments.delta", e);
        e = resp_event(f, "response.function_call_arguments.done");
        cJSON_AddStringToObject(e, "item_id", id);
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddStringToObject(e, "arguments", c->arguments ? c->arguments : "{}");
        frame(out, "response.function_call_arguments.done", e);
        e = resp_event(f, "response.output_item.done");
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddItemToObject(e, "item", resp_call_item(c, id, 1));
        frame(out, "response.output_item.done", e);
        cJSON_AddItemToArray(output, resp_call_item(c, id, 1));
    }
    const char *status = resp_status(f);
    const char *type = !strcmp(status, "completed") ? "response.completed" : "response.incomplete";
    cJSON *e = resp_event(f, type);
    cJSON_AddItemToObject(e, "response", resp_object(f, status, output, 1));
    frame(out, type, e);
}

static void anth_end(fmt_state *f, const tc_result *calls, strbuf *out) {
    if (!f->n_blocks && !calls->n) anth_delta(f, BLOCK_TEXT, "", 0, out);
    anth_close_block(f, out);
    for (int i = 0; i < calls->n; i++) {
        const tc_call *c = &calls->calls[i];
        char id[64];
        anthropic_tool_id(c, id, sizeof id);
        int idx = f->n_blocks++;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "content_block_start");
        cJSON_AddNumberToObject(e, "index", idx);
        cJSON *b = cJSON_AddObjectToObject(e, "content_block");
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", c->name);
        cJSON_AddObjectToObject(b, "input");
        frame(out, "content_block_start", e);
        cJSON *args = parse_args(c->arguments);
        char *js = cJSON_PrintUnformatted(args);
        cJSON_Delete(args);
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "content_block_delta");
        cJSON_AddNumberToObject(e, "index", idx);
        cJSON *d = cJSON_AddObjectToObject(e, "delta");
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", js);
        free(js);
        frame(out, "content_block_delta", e);
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "content_block_stop");
        cJSON_AddNumberToObject(e, "index", idx);
        frame(out, "content_block_stop", e);
    }
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", "message_delta");
    cJSON *d = cJSON_AddObjectToObject(e, "delta");
    cJSON_AddStringToObject(d, "stop_reason", anthropic_stop(f, calls));
    if (!calls->n && f->job->finish == FINISH_STOP) cJSON_AddStringToObject(d, "stop_sequence", f->job->stop_hit);
    else cJSON_AddNullToObject(d, "stop_sequence");
    cJSON_AddItemToObject(e, "usage", anthropic_usage(f, 1));
    cJSON_AddItemToObject(e, "x_dspark", fmt_telemetry(f->srv, f->job));
    frame(out, "message_delta", e);
    sb_puts(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
}

void fmt_stream_end(fmt_state *f, const tc_result *calls, strbuf *out) {
    switch (f->kind) {
    case API_CHAT:
        chat_end(f, calls, out);
        if (f->more) break;
        usage_chunk(f, out);
        sb_puts(out, "data: [DONE]\n\n");
        break;
    case API_COMPLETIONS:
        completion_text(f, "", 0, openai_finish(f, NULL), out);
        if (f->more) break;
        usage_chunk(f, out);
        sb_puts(out, "data: [DONE]\n\n");
        break;
    case API_RESPONSES: resp_end(f, calls, out); break;
    case API_MESSAGES: anth_end(f, calls, out); break;
    default: break;
    }
}

/* ---- answers that did not end whole ---- */

int fmt_failure(const sched_job *j, char *msg, size_t n) {
    int status;
    const char *what;
    switch (j->finish) {
    case FINISH_EOS: case FINISH_STOP: case FINISH_LENGTH: return 0;
    case FINISH_SHUTDOWN: status = 503, what = NULL; break;
    case FINISH_CANCEL: status = 500, what = "the request was cancelled before its answer was finished"; break;
    default: status = 500, what = "generation failed"; break;
    }
    if (msg && n) {
        if (!what) snprintf(msg, n, "%s", *j->error ? j->error : "the server shut down before this answer was finished");
        else if (*j->error) snprintf(msg, n, "%s: %s", what, j->error);
        else snprintf(msg, n, "%s", what);
    }
    return status;
}

void fmt_stream_error(fmt_state *f, strbuf *out) {
    char msg[768];
    int status = fmt_failure(f->job, msg, sizeof msg);
    if (!status) status = 500, snprintf(msg, sizeof msg, "the answer ended without a finish");
    int shutdown = status == 503;
    if (f->kind == API_MESSAGES) {
        /* Anthropic's mid-stream error event; overloaded_error is the one its
           clients retry, which is right for a server going away */
        cJSON *e = cJSON_CreateObject(), *er = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "error");
        cJSON_AddStringToObject(er, "type", shutdown ? "overloaded_error" : "api_error");
        cJSON_AddStringToObject(er, "message", msg);
        cJSON_AddItemToObject(e, "error", er);
        frame(out, "error", e);
    } else if (f->kind == API_RESPONSES) {
        /* the terminal response.failed event, its response carrying the error
           (usage null: a job cut in the queue has no counts) */
        cJSON *er = cJSON_CreateObject();
        cJSON_AddStringToObject(er, "code", "server_error");
        cJSON_AddStringToObject(er, "message", msg);
        cJSON *e = resp_event(f, "response.failed");
        cJSON_AddItemToObject(e, "response", resp_object_err(f, "failed", NULL, 0, er));
        frame(out, "response.failed", e);
    } else {
        /* chat and completions: what OpenAI-compatible servers send, a data
           frame holding only "error" (the SDKs raise it); no finish_reason,
           no usage and no [DONE] follow, so nothing reads as complete */
        cJSON *e = cJSON_CreateObject(), *er = cJSON_CreateObject();
        cJSON_AddStringToObject(er, "message", msg);
        cJSON_AddStringToObject(er, "type", shutdown ? "service_unavailable" : "server_error");
        if (shutdown) cJSON_AddStringToObject(er, "code", "server_shutting_down");
        else cJSON_AddNumberToObject(er, "code", status);
        cJSON_AddNullToObject(er, "param");
        cJSON_AddItemToObject(e, "error", er);
        frame(out, NULL, e);
    }
}

/* ---- whole replies ---- */

char *fmt_body(fmt_state *f, const char *reason, const char *text, const tc_result *calls) {
    cJSON *o = cJSON_CreateObject();
    if (f->kind == API_CHAT || f->kind == API_COMPLETIONS) {
        cJSON_AddStringToObject(o, "id", f->id);
        cJSON_AddStringToObject(o, "object", f->kind == API_CHAT ? "chat.completion" : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)f->created);
        cJSON_AddStringToObject(o, "model", model_name(f));
        cJSON *cs = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", f->index);
        if (f->kind == API_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (calls->n && !*text) cJSON_AddNullToObject(m, "content");
            else cJSON_AddStringToObject(m, "content", text);
            if (*reason) cJSON_AddStringToObject(m, "reasoning_content", reason);
            if (calls->n) {
                cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
                for (int i = 0; i < calls->n; i++) cJSON_AddItemToArray(tc, openai_tool_call(&calls->calls[i], i, 0));
            }
        } else {
            cJSON_AddStringToObject(c, "text", text);
        }
        cJSON *lp = take_logprobs(f);
        if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
        else cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddStringToObject(c, "finish_reason", openai_finish(f, calls));
        cJSON_AddItemToArray(cs, c);
        cJSON_AddItemToObject(o, "usage", openai_usage(f));
        cJSON_AddItemToObject(o, "x_dspark", fmt_telemetry(f->srv, f->job));
    } else if (f->kind == API_RESPONSES) {
        cJSON *output = cJSON_CreateArray();
        char id[64];
        if (*reason) {
            ds_unique_id(id, sizeof id, "rs_");
            cJSON_AddItemToArray(output, resp_reasoning_item(id, reason));
        }
        if (*text || !calls->n) {
            ds_unique_id(f->item_id, sizeof f->item_id, "msg_");
            cJSON_AddItemToArray(output, resp_message_item(f, text, 1));
        }
        for (int i = 0; i < calls->n; i++) {
            ds_unique_id(id, sizeof id, "fc_");
            cJSON_AddItemToArray(output, resp_call_item(&calls->calls[i], id, 1));
        }
        cJSON_Delete(o);
        o = resp_object(f, resp_status(f), output, 1);
    } else {
        cJSON_AddStringToObject(o, "id", f->id);
        cJSON_AddStringToObject(o, "type", "message");
        cJSON_AddStringToObject(o, "role", "assistant");
        cJSON_AddStringToObject(o, "model", model_name(f));
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        if (*reason) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "thinking");
            cJSON_AddStringToObject(b, "thinking", reason);
            cJSON_AddStringToObject(b, "signature", "dspark");
            cJSON_AddItemToArray(content, b);
        }
        if (*text || (!*reason && !calls->n)) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "text");
            cJSON_AddStringToObject(b, "text", text);
            cJSON_AddItemToArray(content, b);
        }
        for (int i = 0; i < calls->n; i++) {
            char id[64];
            anthropic_tool_id(&calls->calls[i], id, sizeof id);
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "tool_use");
            cJSON_AddStringToObject(b, "id", id);
            cJSON_AddStringToObject(b, "name", calls->calls[i].name);
            cJSON_AddItemToObject(b, "input", parse_args(calls->calls[i].arguments));
            cJSON_AddItemToArray(content, b);
        }
        cJSON_AddStringToObject(o, "stop_reason", anthropic_stop(f, calls));
        if (!calls->n && f->job->finish == FINISH_STOP) cJSON_AddStringToObject(o, "stop_sequence", f->job->stop_hit);
        else cJSON_AddNullToObject(o, "stop_sequence");
        cJSON_AddItemToObject(o, "usage", anthropic_usage(f, 1));
        cJSON_AddItemToObject(o, "x_dspark", fmt_telemetry(f->srv, f->job));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
