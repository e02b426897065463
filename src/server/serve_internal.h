/* serve_internal: what the server's files share.
 *   serve.c        `dspark serve`: startup, routing, auth, errors, /health,
 *                  /v1/models, /metrics, /events, /tokenize, /detokenize
 *   serve_gen.c    the generation routes: request -> prompt -> engine job,
 *                  then a whole reply or a stream, through the output
 *                  pipeline (reasoning split, tool-call gate and parse)
 *   serve_format.c each dialect's reply bodies and stream events */
#ifndef DS_SERVE_INTERNAL_H
#define DS_SERVE_INTERNAL_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "server/api.h"
#include "text/chat_template.h"
#include "server/sched.h"
#include "server/http.h"
#include "base/strbuf.h"
#include "text/think.h"
#include "text/tokenizer.h"
#include "server/toolcall.h"

typedef struct {
    sched *en;
    const tokenizer *tok;
    chat_template *tpl; /* NULL: the model has no chat template */
    tc_format tcf;
    const char *think_open, *think_close; /* NULL when the template shows none */
    const char *api_key;
    const char *model_id;
    const char *mode; /* the resolved decoding mode */
    int ctx_window;
    int window_cut;     /* the model's window when memory cut it to ctx_window, else 0 */
    int max_output;     /* the most tokens one request may ask for */
    int default_max;    /* when a request gives no max_tokens (0: up to the window) */
    int no_thinking;
    const char *reasoning_effort;
    sampler_params sdef; /* sampling defaults from the command line */
    int has_seed;
    double keepalive_s;
    double t_start;
    uint64_t next_req; /* atomic */
    http_server *hs;
    int draining;        /* atomic: a stop signal came; new generation requests get 503 */
    double drain_timeout; /* seconds the requests in flight get to finish after it */
} server;

/* /health's "warnings" entries ({"code", "message"}) appended to w: no
 * chat template, memory pressure (engine/memfit.h memfit_pressure), swap
 * in use, cache slots the memory guard shed (m), the window cut to fit.
 * sys NULL: the memory is unknown (no memory warnings). */
void serve_health_warnings(cJSON *w, const server *srv, const void *sys, const sched_metrics *m);

/* Which error envelope a route answers with. */
enum { DIALECT_OPENAI, DIALECT_ANTHROPIC, DIALECT_RESPONSES };

void serve_error(const http_req *r, int dialect, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The request body as a JSON object ({} when empty), or NULL after
 * answering 400 in the dialect's shape. */
cJSON *serve_parse_body(const http_req *r, int dialect);
void serve_generate(server *srv, const http_req *r, api_kind kind);

/* ---- output pipeline (serve_gen.c) ---- */
typedef struct {
    const server *srv; /* its tool-call format and reasoning markers */
    int split;         /* reasoning is split off (the template has markers) */
    int drop_reasoning; /* split off, then discarded (Anthropic thinking disabled) */
    think_split th;
    int parse_tools;   /* tool calls are parsed */
    const cJSON *tools;
    tc_gate *gate;
} outproc;

/* ---- formatting (serve_format.c) ---- */
typedef struct {
    api_kind kind;
    const api_request *req;
    const server *srv;
    const sched_job *job; /* done when the end is formatted */
    char id[64];
    long created;
    int n_prompt;
    /* streaming state */
    int seq;          /* responses: sequence_number */
    int block;        /* anthropic: the open block (0 none, 1 thinking, 2 text) */
    int msg_open, reasoning_sent; /* responses: the message item is open; the reasoning item went out */
    int n_blocks;     /* blocks (anthropic) / output items (responses) opened so far */
    char item_id[64]; /* responses: the message item */
    char rs_id[64];   /* responses: the reasoning item */
    strbuf answer, reason; /* everything shown so far (responses' done events; non-stream bodies) */
    /* log-probabilities waiting for the next chunk (chat, completions) */
    sched_logprob *lp;
    int n_lp, cap_lp;
    size_t text_offset; /* completions: bytes of text the reported tokens cover */
    /* n > 1 (chat, completions): this choice's index; more: choices follow
       (its stream end is the choice's finish only); gen_before: tokens the
       earlier choices generated (the last usage counts them all) */
    int index, more;
    long gen_before;
} fmt_state;

void fmt_init(fmt_state *f, api_kind kind, const api_request *req, const server *srv, const sched_job *job,
              int n_prompt);
/* The next choice of the same reply (n > 1): f restarted for job with the
 * same id and creation time, index + 1 and the earlier choices' tokens. */
void fmt_next_choice(fmt_state *f, const sched_job *job);
void fmt_free(fmt_state *f);
/* Log-probabilities of tokens generated since the last call: they go with
 * the next chunk (or the whole body). */
void fmt_add_logprobs(fmt_state *f, const sched_logprob *e, int n);
/* Stream frames. */
void fmt_stream_begin(fmt_state *f, strbuf *out);
void fmt_stream_delta(fmt_state *f, const char *reason, size_t nr, const char *text, size_t nt, strbuf *out);
void fmt_stream_keepalive(fmt_state *f, strbuf *out);
void fmt_stream_end(fmt_state *f, const tc_result *calls, strbuf *out);
/* How a done job failed: 0 when its answer is whole (eos, stop string,
 * token budget); else the HTTP status its whole reply answers with (503:
 * cut at shutdown; 500: an engine error or a cancel), with the message for
 * the client in msg (may be NULL). */
int fmt_failure(const sched_job *j, char *msg, size_t n);
/* The dialect's error ending of a stream whose job failed (fmt_failure):
 * chat / completions a data frame {"error": {...}} and no [DONE];
 * Responses the terminal response.failed; Anthropic an error event
 * (overloaded_error when cut at shutdown, else api_error). */
void fmt_stream_error(fmt_state *f, strbuf *out);
/* A whole (non-stream) reply body. */
char *fmt_body(fmt_state *f, const char *reason, const char *text, const tc_result *calls);
/* The x_dspark telemetry object of a finished job. */
cJSON *fmt_telemetry(const server *srv, const sched_job *job);

#endif
