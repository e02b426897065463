/* serve_gen: the generation routes (see serve_internal.h). A request is
 * mapped (api.h), rendered through the chat template, tokenized and checked
 * against the context window on the HTTP thread; the scheduler generates; the
 * text comes back through the output pipeline: the reasoning split (think.h)
 * and, when tools are parsed, the tool-call gate that holds back text from
 * the first call marker on (toolcall.h). A whole reply is formatted when the
 * job is done; a stream is formatted as text arrives, with keep-alive frames
 * whenever nothing was sent for the keep-alive interval. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/json.h"
#include "server/constrain.h"
#include "server/serve_internal.h"
#include "base/util.h"

static int dialect_of(api_kind k) {
    return k == API_MESSAGES || k == API_COUNT_TOKENS ? DIALECT_ANTHROPIC
           : k == API_RESPONSES                       ? DIALECT_RESPONSES
                                                      : DIALECT_OPENAI;
}

/* shortest interval between two stream writes while tokens flow */
#define STREAM_MIN_GAP_S 0.005

/* ---- output pipeline ---- */

static void outproc_init(outproc *p, const server *srv, const api_request *q, int prefilled) {
    memset(p, 0, sizeof *p);
    p->srv = srv;
    p->split = q->kind != API_COMPLETIONS && srv->think_open != NULL;
    p->drop_reasoning = q->drop_reasoning;
    think_init(&p->th, p->split ? srv->think_open : NULL, p->split ? srv->think_close : NULL, prefilled);
    p->parse_tools = srv->tcf != TC_NONE && q->kind != API_COMPLETIONS &&
                     (q->tools != NULL || (q->kind == API_MESSAGES && q->tool_choice != TOOL_CHOICE_NONE));
    p->tools = q->tools;
    if (p->parse_tools) p->gate = tc_gate_new(srv->tcf);
}

static void outproc_free(outproc *p) {
    think_free(&p->th);
    tc_gate_free(p->gate);
}

/* Text from the scheduler -> reasoning and visible answer text. */
static void outproc_push(outproc *p, const char *s, size_t n, strbuf *reason, strbuf *text) {
    strbuf ans = {0};
    think_push(&p->th, s, n, reason, &ans);
    if (p->gate) tc_gate_push(p->gate, ans.s ? ans.s : "", ans.n, text);
    else sb_append(text, sb_str(&ans), ans.n);
    sb_free(&ans);
    if (p->drop_reasoning) sb_clear(reason);
}

/* End of generation: the rest of the text, and the tool calls if any. */
static void outproc_finish(outproc *p, strbuf *reason, strbuf *text, tc_result *calls) {
    memset(calls, 0, sizeof *calls);
    strbuf ans = {0};
    think_finish(&p->th, reason, &ans);
    if (p->drop_reasoning) sb_clear(reason);
    if (!p->gate) {
        sb_append(text, sb_str(&ans), ans.n);
        sb_free(&ans);
        return;
    }
    strbuf held = {0};
    tc_gate_push(p->gate, sb_str(&ans), ans.n, text);
    if (tc_gate_finish(p->gate, text, &held)) {
        tc_parse(p->srv->tcf, sb_str(&held), held.n, p->tools, calls);
        if (calls->n) {
            if (calls->text && *calls->text) {
                if (text->n && text->s[text->n - 1] != ' ' && text->s[text->n - 1] != '\n') sb_puts(text, "\n");
                sb_puts(text, calls->text);
            }
        } else sb_append(text, sb_str(&held), held.n);
    }
    sb_free(&held);
    sb_free(&ans);
}

/* The whole text at once (a non-streamed reply): the same as pushing it
   and finishing, but the reasoning split also applies the whole-text rule
   (a closer with no opener ends a reasoning block the prompt opened). */
static void outproc_whole(outproc *p, const char *s, size_t n, int prefilled, strbuf *reason, strbuf *text,
                          tc_result *calls) {
    memset(calls, 0, sizeof *calls);
    strbuf ans = {0};
    if (p->split) think_split_all(s, n, p->srv->think_open, p->srv->think_close, prefilled, reason, &ans);
    else sb_append(&ans, s, n);
    if (p->drop_reasoning) sb_clear(reason);
    if (p->parse_tools) {
        tc_parse(p->srv->tcf, sb_str(&ans), ans.n, p->tools, calls);
        sb_puts(text, calls->n ? calls->text : sb_str(&ans));
    } else sb_append(text, sb_str(&ans), ans.n);
    sb_free(&ans);
}

/* ---- request -> job ---- */

typedef struct {
    server *srv;
    api_request req;
    sched_job *job;                /* the choice being answered: jobs[cur] */
    sched_job *jobs[API_MAX_N];    /* one a choice (n > 1), queued together, run side by side, answered in order */
    int n_jobs, cur;
    int n_prompt, prefilled, fd;
    outproc op;
    fmt_state fmt;
    int phase; /* 0: begin not sent, 1: streaming, 2: ended */
    double last_sent;
} gen_ctx;

static void gen_free(gen_ctx *g) {
    for (int i = 0; i < g->n_jobs; i++) {
        sched_job_cancel(g->jobs[i]);
        sched_job_release(g->jobs[i]);
    }
    outproc_free(&g->op);
    fmt_free(&g->fmt);
    api_request_free(&g->req);
    free(g);
}

static cJSON *template_vars(const server *srv, const api_request *q) {
    cJSON *v = cJSON_CreateObject();
    if (srv->no_thinking) cJSON_AddBoolToObject(v, "enable_thinking", 0);
    if (srv->reasoning_effort) cJSON_AddStringToObject(v, "reasoning_effort", srv->reasoning_effort);
    for (const cJSON *e = q->template_vars ? q->template_vars->child : NULL; e; e = e->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(v, e->string);
        cJSON_AddItemToObject(v, e->string, cJSON_Duplicate(e, 1));
    }
    return v;
}

/* The prompt's token ids, or -1 after answering with an error. */
static int build_prompt(server *srv, const http_req *r, const api_request *q, int **ids, int *prefilled) {
    int dialect = dialect_of(q->kind);
    char err[1024];
    char *text = NULL;
    size_t len = 0;
    int add_special = 0;
    *prefilled = 0;
    if (q->kind == API_COMPLETIONS) {
        text = xstrdup(q->prompt ? q->prompt : "");
        len = strlen(text);
        add_special = 1;
    } else {
        if (!srv->tpl) {
            serve_error(r, dialect, 400, NULL,
                        "the model %s has no chat template: use /v1/completions with a raw prompt", srv->model_id);
            return -1;
        }
        cJSON *vars = template_vars(srv, q);
        int rc = chat_template_render(srv->tpl, q->messages, q->tools, 1, vars, &text, &len, err, sizeof err);
        cJSON_Delete(vars);
        if (rc != 0) {
            serve_error(r, dialect, 400, NULL, "could not apply chat template: %s", err);
            return -1;
        }
        if (srv->think_open) *prefilled = think_prompt_prefilled(text, len, srv->think_open, srv->think_close);
    }
    int n = tok_encode(srv->tok, text, len, add_special, ids, err, sizeof err);
    free(text);
    if (n < 0) {
        serve_error(r, dialect, 400, NULL, "cannot tokenize the prompt: %s", err);
        return -1;
    }
    if (n == 0 && q->kind == API_COMPLETIONS) {
        free(*ids);
        serve_error(r, dialect, 400, NULL, "'prompt' is empty");
        return -1;
    }
    return n;
}

static int check_window(server *srv, const http_req *r, api_kind kind, int n) {
    int W = srv->ctx_window;
    if (n < W) return 0;
    if (kind == API_MESSAGES || kind == API_COUNT_TOKENS)
        serve_error(r, DIALECT_ANTHROPIC, 400, NULL, "prompt is too long: %d tokens > %d maximum", n, W);
    else if (kind == API_RESPONSES)
        serve_error(r, DIALECT_RESPONSES, 400, "context_length_exceeded",
                    "prompt is %d tokens, this model's context window is %d", n, W);
    else
        serve_error(r, DIALECT_OPENAI, 400, "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, your prompt is %d tokens "
                    "(prompt is too long: %d tokens > %d maximum).",
                    W, n, n, W);
    return -1;
}

static sched_job *make_job(server *srv, const api_request *q, int *ids, int n, int prefilled) {
    sched_job *j = sched_job_new();
    j->ids = ids;
    j->n_ids = n;
    int room = srv->ctx_window - n;
    long max = q->max_tokens > 0 ? q->max_tokens : srv->default_max > 0 ? srv->default_max : room;
    j->max_new = max < room ? (int)max : room;
    sampler_params sp = srv->sdef;
    if (q->temperature >= 0) sp.temperature = (float)q->temperature;
    if (q->top_p >= 0) sp.top_p = (float)q->top_p;
    if (q->min_p >= 0) sp.min_p = (float)q->min_p;
    if (q->top_k >= 0) sp.top_k = (int)q->top_k;
    if (q->has_seed) sp.seed = (uint64_t)q->seed;
    else if (!srv->has_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sp.seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec;
    }
    j->sp = sp;
    if (q->n_stop) {
        j->stops = xmalloc(sizeof(char *) * (size_t)q->n_stop);
        for (int i = 0; i < q->n_stop; i++) j->stops[i] = xstrdup(q->stop[i]);
        j->n_stops = q->n_stop;
    }
    j->req_id = __atomic_add_fetch(&srv->next_req, 1, __ATOMIC_RELAXED);
    j->logprobs = q->kind == API_CHAT || q->kind == API_COMPLETIONS ? q->logprobs : -1;
    j->plain = q->speculative == 0;
    j->ignore_eos = q->ignore_eos;
    if (q->thinking_budget > 0 && srv->think_open && q->kind != API_COMPLETIONS) {
        j->think_budget = q->thinking_budget > INT32_MAX ? INT32_MAX : (int)q->thinking_budget;
        j->think_prefilled = prefilled;
        j->think_open = srv->think_open;
        j->think_close = srv->think_close;
        strbuf b = {0};
        const char *msg = q->thinking_budget_message;
        if (msg && *msg) sb_printf(&b, "\n\n%s\n%s\n\n", msg, srv->think_close);
        else sb_printf(&b, "\n%s\n\n", srv->think_close);
        j->budget_text = sb_take(&b);
    }
    return j;
}

/* the id of a marker that is one token, else -1 */
static int single_token(const server *srv, const char *text) {
    int *ids = NULL;
    char err[256];
    int n = text ? tok_encode(srv->tok, text, strlen(text), 0, &ids, err, sizeof err) : 0;
    int id = n == 1 ? ids[0] : -1;
    free(ids);
    return id;
}

/* The job's penalties, logit bias and grammar (sched_job.proc) from the
   request. Returns 0, or -1 after answering 400. */
static int job_proc(server *srv, const http_req *r, const api_request *q, int prefilled, sched_job *j) {
    int dialect = dialect_of(q->kind);
    lproc_cfg *c = &j->proc;
    c->presence = (float)q->presence;
    c->frequency = (float)q->frequency;
    c->repetition = (float)q->repetition;
    c->rep_window = q->rep_window;
    c->think_open = c->think_close = -1;
    int V = tok_vocab_size(srv->tok);
    for (int i = 0; i < q->n_bias; i++)
        if (q->bias_id[i] >= V) {
            serve_error(r, dialect, 400, "invalid_logit_bias",
                        "'logit_bias': token id %d is outside the vocabulary (ids 0..%d)", q->bias_id[i], V - 1);
            return -1;
        }
    if (q->n_bias) {
        c->n_bias = q->n_bias;
        c->bias_id = xmalloc(sizeof(int) * (size_t)q->n_bias);
        c->bias = xmalloc(sizeof(float) * (size_t)q->n_bias);
        memcpy(c->bias_id, q->bias_id, sizeof(int) * (size_t)q->n_bias);
        memcpy(c->bias, q->bias, sizeof(float) * (size_t)q->n_bias);
    }
    if (!constrain_wanted(q)) return 0;
    char err[1024];
    grammar *g = constrain_grammar(q, srv->tcf, err, sizeof err);
    if (!g) {
        serve_error(r, dialect, 400, NULL, "%s", err);
        return -1;
    }
    c->g = g;
    /* reasoning stays free: the grammar starts after the block */
    if (srv->think_open && q->kind != API_COMPLETIONS) {
        int off = q->thinking == 0 || (srv->no_thinking && q->thinking != 1);
        if (prefilled || !off) {
            c->think_open = single_token(srv, srv->think_open);
            c->think_close = single_token(srv, srv->think_close);
            if (c->think_open < 0 || c->think_close < 0) {
                serve_error(r, dialect, 400, NULL,
                            "constrained output after a reasoning block needs the markers %s / %s to be single "
                            "tokens, and this tokenizer splits them: turn thinking off for this request",
                            srv->think_open, srv->think_close);
                return -1;
            }
            c->think_start = prefilled ? 2 : 1;
        }
    }
    return 0;
}

/* Waits for the job to finish, or (when any_text) for new text, for at most
   `seconds`, in slices that look for a client that went away. Returns -1
   when it did. */
static int wait_job(sched_job *j, int fd, double seconds, int any_text) {
    double end = ds_now() + seconds;
    pthread_mutex_lock(&j->mu);
    while (!j->done && !(any_text && j->text.n)) {
        double left = end - ds_now();
        if (left <= 0) break;
        if (left > 0.1) left = 0.1;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + left;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!j->done && !(any_text && j->text.n) && http_fd_gone(fd)) {
            pthread_mutex_unlock(&j->mu);
            return -1;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

/* Takes the job's new text into out (and its log-probabilities into f);
   returns done. */
static int take_text(sched_job *j, strbuf *out, fmt_state *f) {
    pthread_mutex_lock(&j->mu);
    sb_append(out, sb_str(&j->text), j->text.n);
    sb_clear(&j->text);
    fmt_add_logprobs(f, j->lp, j->n_lp);
    j->n_lp = 0;
    int done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done;
}

/* One choice's whole text: its body (fmt_body), or NULL after answering
   an error. */
static char *whole_choice(gen_ctx *g, const http_req *r) {
    strbuf text = {0}, reason = {0}, vis = {0};
    char *body = NULL;
    for (;;) {
        if (wait_job(g->job, r->fd, 3600, 0) < 0) {
            sched_job_cancel(g->job);
            serve_error(r, dialect_of(g->req.kind), 500, NULL, "the client went away");
            goto out;
        }
        if (take_text(g->job, &text, &g->fmt)) break;
    }
    char msg[768];
    int failed = fmt_failure(g->job, msg, sizeof msg); /* never a normal body for a cut answer */
    if (failed) {
        serve_error(r, dialect_of(g->req.kind), failed, failed == 503 ? "server_shutting_down" : NULL, "%s", msg);
        goto out;
    }
    tc_result calls;
    outproc_whole(&g->op, sb_str(&text), text.n, g->prefilled, &reason, &vis, &calls);
    body = fmt_body(&g->fmt, sb_str(&reason), sb_str(&vis), &calls);
    tc_result_free(&calls);
out:
    sb_free(&text);
    sb_free(&reason);
    sb_free(&vis);
    return body;
}

/* moves g to its next choice (n > 1) */
static void next_choice(gen_ctx *g) {
    g->job = g->jobs[++g->cur];
    outproc_free(&g->op);
    outproc_init(&g->op, g->srv, &g->req, g->prefilled);
    fmt_next_choice(&g->fmt, g->job);
}

static void reply_whole(gen_ctx *g, const http_req *r) {
    char *body = whole_choice(g, r);
    if (!body) return;
    if (g->n_jobs > 1) { /* the later choices join the first body's choices; usage counts them all */
        cJSON *o = cJSON_Parse(body);
        free(body);
        cJSON *cs = cJSON_GetObjectItem(o, "choices");
        while (g->cur + 1 < g->n_jobs) {
            next_choice(g);
            char *b = whole_choice(g, r);
            if (!b) {
                cJSON_Delete(o);
                return;
            }
            cJSON *ob = cJSON_Parse(b);
            free(b);
            cJSON_AddItemToArray(cs, cJSON_DetachItemFromArray(cJSON_GetObjectItem(ob, "choices"), 0));
            cJSON_ReplaceItemInObject(o, "usage", cJSON_DetachItemFromObject(ob, "usage"));
            cJSON_Delete(ob);
        }
        body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    http_reply_json(r, 200, body);
    free(body);
}

static int stream_fill(void *ctx, strbuf *out) {
    gen_ctx *g = ctx;
    if (g->phase == 2) return 0;
    if (g->phase == 0) {
        fmt_stream_begin(&g->fmt, out);
        g->phase = 1;
        g->last_sent = ds_now();
        return 1;
    }
    strbuf text = {0}, reason = {0}, vis = {0};
    int rc = 1;
    for (;;) {
        double left = g->last_sent + g->srv->keepalive_s - ds_now();
        if (wait_job(g->job, g->fd, left > 0 ? left : 0, 1) < 0) {
            rc = -1;
            break;
        }
        /* gather the tokens of the next few milliseconds into one write:
           waking once per token costs a fast engine its share of the CPU */
        double gap = g->last_sent + STREAM_MIN_GAP_S - ds_now();
        if (gap > 0 && wait_job(g->job, g->fd, gap, 0) < 0) {
            rc = -1;
            break;
        }
        int done = take_text(g->job, &text, &g->fmt);
        if (text.n) outproc_push(&g->op, text.s, text.n, &reason, &vis);
        sb_clear(&text);
        int failed = done && fmt_failure(g->job, NULL, 0);
        tc_result calls = {0};
        if (done && !failed) outproc_finish(&g->op, &reason, &vis, &calls);
        if (reason.n || vis.n) fmt_stream_delta(&g->fmt, sb_str(&reason), reason.n, sb_str(&vis), vis.n, out);
        sb_clear(&reason);
        sb_clear(&vis);
        if (done) {
            int more = !failed && g->cur + 1 < g->n_jobs;
            g->fmt.more = more;
            if (failed) fmt_stream_error(&g->fmt, out);
            else fmt_stream_end(&g->fmt, &calls, out);
            tc_result_free(&calls);
            if (more) { /* the next choice (queued behind this one) */
                next_choice(g);
                fmt_stream_begin(&g->fmt, out);
                break;
            }
            g->phase = 2;
            break;
        }
        if (out->n) break;
        if (ds_now() - g->last_sent >= g->srv->keepalive_s) {
            fmt_stream_keepalive(&g->fmt, out);
            break;
        }
    }
    if (out->n) g->last_sent = ds_now();
    sb_free(&text);
    sb_free(&reason);
    sb_free(&vis);
    return rc;
}

static void stream_close(void *ctx, int client_gone) {
    (void)client_gone;
    gen_free(ctx);
}

void serve_generate(server *srv, const http_req *r, api_kind kind) {
    int dialect = dialect_of(kind);
    char err[1024];
    cJSON *body = serve_parse_body(r, dialect);
    if (!body) return;
    gen_ctx *g = xcalloc(1, sizeof *g);
    g->srv = srv;
    g->fd = r->fd;
    int st = api_parse(kind, body, &g->req, err, sizeof err);
    cJSON_Delete(body);
    if (st != 0) {
        serve_error(r, dialect, st, NULL, "%s", err);
        api_request_free(&g->req);
        free(g);
        return;
    }
    int *ids = NULL;
    int n = build_prompt(srv, r, &g->req, &ids, &g->prefilled);
    if (n < 0) {
        api_request_free(&g->req);
        free(g);
        return;
    }
    if (kind == API_COUNT_TOKENS) {
        char out[64];
        snprintf(out, sizeof out, "{\"input_tokens\":%d}", n);
        http_reply_json(r, 200, out);
        free(ids);
        api_request_free(&g->req);
        free(g);
        return;
    }
    if (check_window(srv, r, kind, n) != 0) {
        free(ids);
        api_request_free(&g->req);
        free(g);
        return;
    }
    int mb = sched_get_info(srv->en)->max_batch;
    if (g->req.n > mb) {
        serve_error(r, dialect, 400, "invalid_n",
                    "'n' is %d: this server generates at most %d choices at once (--max-batch %d)", g->req.n, mb,
                    mb);
        free(ids);
        api_request_free(&g->req);
        free(g);
        return;
    }
    g->n_prompt = n;
    /* n > 1: one job a choice, each its own sample (a given seed: seed + i,
       so the choices are reproducible and differ), the same prompt; they
       are queued together and run side by side (n <= --max-batch), each in
       its own cache slot, and are answered in order */
    for (int i = 0; i < g->req.n; i++) {
        int *own = ids;
        if (i < g->req.n - 1) {
            own = xmalloc(sizeof(int) * (size_t)n);
            memcpy(own, ids, sizeof(int) * (size_t)n);
        }
        sched_job *j = make_job(srv, &g->req, own, n, g->prefilled);
        if (i && g->req.has_seed) j->sp.seed += (uint64_t)i;
        else if (i) j->sp.seed ^= (uint64_t)i * 0x9e3779b97f4a7c15ULL;
        g->jobs[g->n_jobs++] = j;
        if (job_proc(srv, r, &g->req, g->prefilled, j) != 0) {
            if (i < g->req.n - 1) free(ids);
            gen_free(g);
            return;
        }
    }
    g->job = g->jobs[0];
    outproc_init(&g->op, srv, &g->req, g->prefilled);
    fmt_init(&g->fmt, kind, &g->req, srv, g->job, n);
    for (int i = 0; i < g->n_jobs; i++)
        if (sched_submit(srv->en, g->jobs[i]) < 0) {
            serve_error(r, dialect, 503, NULL, "the server is shutting down");
            gen_free(g);
            return;
        }
    if (!g->req.stream) {
        reply_whole(g, r);
        gen_free(g);
        return;
    }
    http_stream hs = {.fill = stream_fill, .close = stream_close, .ctx = g};
    http_reply_stream(r, 200, NULL, &hs);
}
