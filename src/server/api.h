/* api: maps the parsed JSON body of a generation request in any of the
 * server's API dialects (OpenAI chat completions, OpenAI completions,
 * OpenAI Responses, Anthropic messages and messages/count_tokens) to one
 * normalized request: an OpenAI-shaped message list, tools and template
 * variables for chat_template_render, plus the sampling, stop, stream and
 * thinking settings. No HTTP and no model here.
 *
 * Common rules
 *   - Unknown fields are ignored; a JSON null counts as absent. Known fields
 *     of the wrong type or range are refused (400) with a message naming
 *     the field, e.g. "'messages[2].role' must be one of ...".
 *   - Text only: image / audio / file / document content in a message is
 *     refused ("image/audio/file content is not supported: dspark serves
 *     text-only models"; Anthropic: "image content is not supported: ...").
 *     Inside a tool result (whose history the client cannot edit) an image
 *     becomes the text "[image omitted: dspark serves text-only models]".
 *   - Tool-call arguments become JSON objects (strings are parsed; "" is {};
 *     invalid JSON or a non-object is refused naming the message). A call
 *     without an id gets a deterministic one ("call_M_K" / "toolu_M_K",
 *     message M, call K), so a re-sent history renders identically.
 *   - Tools become [{"type":"function","function":{name, description?,
 *     parameters}}] (parameters default {"type":"object","properties":{}});
 *     an empty list is NULL. tool_choice none drops the tools; required /
 *     named need tools, and a named tool must be among them; both are
 *     enforced by constrained decoding (server/constrain.h).
 *   - reasoning_effort is lowercased; minimal -> low, xhigh / max -> high;
 *     "none" (OpenAI dialects) means thinking off (enable_thinking false)
 *     unless enable_thinking was given. Other values: 400 on chat /
 *     Responses, ignored on messages (output_config.effort).
 *   - Sampling: temperature [0, 2], top_p (0, 1], top_k >= 0, min_p [0, 1],
 *     seed any integer, max tokens >= 1; stop: a string or at most
 *     API_MAX_STOP strings (empty ones dropped).
 *
 * Chat completions: messages (roles system, developer -> system, user,
 *   assistant, tool; content string, null -> "", or parts with text parts
 *   joined by "\n"; reasoning_content, or "reasoning", passed through;
 *   tool_call_id and name kept), tools, tool_choice, chat_template_kwargs
 *   (copied into template_vars; its enable_thinking / reasoning_effort are
 *   read too, top-level ones win), enable_thinking, reasoning_effort,
 *   reasoning_budget (>= 0; 0 = off for this request), reasoning_budget_message,
 *   max_tokens or max_completion_tokens (the latter wins), temperature,
 *   top_p, top_k, min_p, seed (any integer; negative ones too), stop, stream,
 *   stream_options.include_usage, n (1..API_MAX_N choices; the server also
 *   refuses n above its --max-batch, the choices running side by side), model (echoed,
 *   not checked: the server serves one model, as llama.cpp's server does),
 *   and the fields of api_fields.c: presence_penalty and frequency_penalty
 *   [-2, 2], repetition_penalty (vLLM; window: the whole context) or
 *   repeat_penalty (llama.cpp; window repeat_last_n, default 64, -1 the whole
 *   context, 0 off), both (0, 100] and refused together when they differ,
 *   logit_bias {"id": bias in [-100, 100]} (at most API_MAX_BIAS; ids
 *   checked against the vocabulary by the server), ignore_eos (bool),
 *   response_format {type: text | json_object (llama.cpp's optional
 *   "schema" beside it) | json_schema, json_schema: {name, schema, strict}}.
 *   user, ... are ignored.
 * Completions: prompt (a string, or a list whose first element is a
 *   string) and the same sampling / stop / stream / n / model fields,
 *   penalties, logit_bias, ignore_eos and response_format.
 * Responses (stateless): input (a string = one user message, or items:
 *   message, function_call, function_call_output; reasoning and unknown
 *   item types are skipped), instructions and the leading system /
 *   developer messages merged ("\n\n") into one leading system message,
 *   consecutive function_call items merged into one assistant message
 *   (joining a directly preceding assistant message), tools (flat or nested
 *   function tools; web_search, namespace, custom, ... skipped), tool_choice,
 *   reasoning.effort, reasoning_budget(_message), max_output_tokens,
 *   sampling fields, stream, model, text.format {type: text | json_object |
 *   json_schema, name, schema, strict}, and (as extensions) the penalties,
 *   logit_bias and ignore_eos of chat. previous_response_id / conversation are
 *   refused (the server keeps no state).
 * Anthropic messages / count_tokens: system (string or text blocks joined
 *   "\n"; a Claude Code "x-anthropic-billing-header:" block is dropped: it
 *   is billing metadata that differs per conversation at the very head of
 *   the prompt), messages (user / assistant / system; blocks text,
 *   thinking -> reasoning_content, tool_use -> tool_calls, tool_result ->
 *   tool messages placed before the turn's text, "Error: " prefixed when
 *   is_error; redacted_thinking and server-tool blocks dropped; a user turn
 *   of only tool results gives no user message; leading system messages
 *   join the system prompt ("\n\n"), later ones are wrapped in
 *   "<system-reminder>\n...\n</system-reminder>" and appended ("\n\n") to the
 *   previous user turn when that is the nearest non-system message, else
 *   prepended to the next user turn, else become a user message), tools
 *   ({name, description, input_schema}; entries without a name or with a
 *   type other than "custom" skipped), tool_choice {type auto|any|tool|none,
 *   name}, thinking {type enabled (budget_tokens) | disabled | adaptive},
 *   output_config.effort (skipped when thinking is disabled), max_tokens
 *   (required for messages), stop_sequences, temperature ([0, 1], as
 *   Anthropic: above 1 is a 400 invalid_request_error), top_p, top_k,
 *   stream, model. No penalties or logit_bias (Anthropic has none).
 *
 * dspark's own extension, every dialect but count_tokens: a top-level
 *   "x_dspark" object. Its one field, "speculative" (bool): false decodes
 *   this request plainly (no drafter; the greedy text is the same, only
 *   slower), true (the default) with the server's mode. x_dspark must be an
 *   object and holds no other field: anything else is refused (400), so a
 *   misspelt option is not silently ignored. */
#ifndef DS_API_H
#define DS_API_H

#include <stddef.h>
#include <cjson/cJSON.h>

#define API_MAX_STOP 16   /* stop strings per request */
#define API_MAX_BIAS 1024 /* logit_bias entries */
#define API_MAX_N 32      /* n: choices per request (the most slots, sched.h) */

typedef enum { API_CHAT, API_COMPLETIONS, API_RESPONSES, API_MESSAGES, API_COUNT_TOKENS } api_kind;
enum { API_JSON_NONE, API_JSON_OBJECT, API_JSON_SCHEMA };
enum { TOOL_CHOICE_AUTO, TOOL_CHOICE_NONE, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NAMED };

typedef struct {
    api_kind kind;
    cJSON *messages;      /* owned; OpenAI-shaped [{role: system|user|assistant|tool, content: string,
                             reasoning_content?, tool_calls?: [{id, type:"function", function:{name,
                             arguments: OBJECT}}], tool_call_id?, name?}]; NULL for completions */
    cJSON *tools;         /* owned; [{"type":"function","function":{name, description?, parameters}}] or
                             NULL (none given, or tool_choice none) */
    cJSON *template_vars; /* owned, never NULL after a successful parse: chat_template_kwargs (chat only),
                             then enable_thinking (bool) and reasoning_effort (string) when set */
    char *prompt;         /* completions only */
    char *model;          /* the request's "model" or NULL */
    long max_tokens;      /* -1 when not given (max_tokens / max_completion_tokens / max_output_tokens) */
    double temperature, top_p, min_p; /* -1 when not given */
    long top_k;           /* -1 when not given */
    long long seed;       /* valid when has_seed */
    int has_seed;
    char **stop;          /* stop / stop_sequences (non-empty strings) */
    int n_stop;
    int stream, include_usage; /* include_usage: stream_options.include_usage */
    int thinking;         /* -1 not said; 0 off; 1 on */
    int drop_reasoning;   /* messages: thinking disabled -> reasoning is not returned */
    long thinking_budget; /* messages thinking.budget_tokens; chat/responses reasoning_budget (0 = off
                             for this request); -1 none */
    char *thinking_budget_message; /* chat/responses reasoning_budget_message ("" kept), or NULL */
    char reasoning_effort[8]; /* "" or low|medium|high */
    int tool_choice;      /* TOOL_CHOICE_* */
    char *tool_choice_name; /* TOOL_CHOICE_NAMED: the function */
    int n;                /* choices (chat, completions: 1..API_MAX_N; else 1) */
    double presence, frequency; /* OpenAI penalties over the generated tokens; 0 when not given */
    double repetition;    /* repetition_penalty / repeat_penalty; 1 when not given */
    int rep_window;       /* its window: repeat_last_n, else -1 (whole context) for repetition_penalty
                             and 64 for repeat_penalty */
    int n_bias;           /* logit_bias: bias[i] added to the logit of bias_id[i] (owned arrays) */
    int *bias_id;
    float *bias;
    int ignore_eos;       /* generation goes on past the end-of-sequence tokens */
    int json_mode;        /* API_JSON_*: response_format / text.format */
    cJSON *json_schema;   /* owned; API_JSON_SCHEMA's schema */
    int logprobs;         /* -1: none; else log-probabilities with this many alternatives per token
                             (chat: logprobs true + top_logprobs 0..20; completions: logprobs 0..5) */
    int speculative;      /* x_dspark.speculative: -1 not said (the server's mode), 0 plain decoding
                             for this request, 1 the server's mode */
} api_request;

/* Parses body (any JSON value) as a request of the given dialect into *out.
 * Returns 0, or the HTTP status to answer (400) with err holding the message
 * for the dialect's error object; on failure *out is left empty (freeing it
 * is harmless). A non-object body gives "request body must be a JSON
 * object". */
int api_parse(api_kind kind, const cJSON *body, api_request *out, char *err, size_t errlen);
void api_request_free(api_request *r);

#endif
