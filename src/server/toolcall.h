/* toolcall: turns a model's native tool-call markup in its answer text
 * (reasoning already removed) into structured calls {id, name, arguments}.
 * The format is chosen from the chat template source (the markers it
 * contains). Six families are understood:
 *   hermes    <tool_call>{"name": .., "arguments": {..}}</tool_call>  (Qwen, Hermes)
 *   xml       <tool_call><function=NAME><parameter=KEY>value</parameter>..</function></tool_call>
 *             (Qwen3-Coder; values typed by the tool's JSON schema)
 *   llama3    the answer is {"name": .., "parameters": {..}} (after an optional <|python_tag|>)
 *   mistral   [TOOL_CALLS][{..}, ..]  and  [TOOL_CALLS]NAME[ARGS]{..}
 *   pythonic  <|tool_call_start|>[f(a=1), g()]<|tool_call_end|>  (LFM2; a Python-literal subset)
 *   gemma     <|tool_call>call:NAME{k:<|"|>v<|"|>,n:3}<tool_call|>  (Gemma 4) and
 *             ```tool_code\nNAME(a=1)\n```  (Gemma 3)
 * Parsing never fails: a block that does not parse completely stays in the
 * text, so malformed call markup degrades to plain text and is never lost.
 * A streaming gate lets text before the first call marker through live and
 * holds everything from the marker on for tc_parse at the end. */
#ifndef DS_TOOLCALL_H
#define DS_TOOLCALL_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "base/strbuf.h"

typedef enum { TC_NONE = 0, TC_HERMES, TC_XML, TC_LLAMA3, TC_MISTRAL, TC_PYTHONIC, TC_GEMMA } tc_format;

/* The format a model emits, chosen from its chat template source text by
 * the markers it contains: "<function=" together with "<tool_call>" ->
 * TC_XML; "<tool_call>" -> TC_HERMES; "[TOOL_CALLS]" -> TC_MISTRAL;
 * "<|tool_call_start|>" -> TC_PYTHONIC; "<|tool_call>" or "tool_code" ->
 * TC_GEMMA; "<|python_tag|>", "ipython", or "\"parameters\"" together with
 * "<|eot_id|>" -> TC_LLAMA3; otherwise (and for NULL) TC_NONE. */
tc_format tc_format_for_template(const char *template_source);
/* "hermes", "xml", "llama3", "mistral", "pythonic", "gemma", "none". */
const char *tc_format_name(tc_format f);

typedef struct {
    char id[32];     /* "call_" + 24 lowercase hex digits, unique */
    char *name;
    char *arguments; /* compact JSON object text, e.g. {"city":"Paris"} */
} tc_call;

typedef struct {
    tc_call *calls; /* NULL when n == 0 */
    int n;
    char *text;     /* when n > 0: the input with the parsed call blocks
                     * removed, trimmed of surrounding whitespace; when
                     * n == 0: the input unchanged */
} tc_result;

/* Parses the complete answer text[0..n). tools: the request's tools in
 * OpenAI shape [{"type":"function","function":{"name","description",
 * "parameters":{JSON schema}}}] (the Anthropic shape {"name",
 * "input_schema"} is read too) or NULL; the schemas type XML, pythonic and
 * Gemma parameter values and name positional arguments, and for llama3 a
 * call must name one of the tools. Never fails. TC_NONE: no calls, text
 * copied. Call ids come from a thread-safe source and are unique within the
 * process. Free with tc_result_free. */
void tc_parse(tc_format f, const char *text, size_t n, const cJSON *tools, tc_result *out);
void tc_result_free(tc_result *r);

/* Streaming gate: text before the first call marker streams live; from the
 * marker on everything is held. Markers: hermes/xml "<tool_call>", mistral
 * "[TOOL_CALLS]", pythonic "<|tool_call_start|>", gemma "<|tool_call>" and
 * "```tool_code", llama3 "<|python_tag|>" and a '{' as the first
 * non-space character of the answer. */
typedef struct tc_gate tc_gate;
tc_gate *tc_gate_new(tc_format f); /* TC_NONE: a pass-through gate */
void tc_gate_free(tc_gate *g);
/* Appends to out the text that can be shown now. Withholds at most
 * (longest marker length - 1) bytes that could be the start of a marker,
 * and never splits a UTF-8 sequence (an incomplete one at the end waits for
 * its remaining bytes; this holds for TC_NONE too). Returns 1 once a marker
 * has been seen (tripped; the text before it has been appended), after
 * which nothing more is appended to out. */
int tc_gate_push(tc_gate *g, const char *s, size_t n, strbuf *out);
/* End of generation: if not tripped, appends the withheld tail to out; if
 * tripped, appends everything from the marker on to held (the caller then
 * runs tc_parse on it and shows it as text if that finds no calls).
 * Returns tripped. The gate is then empty; further pushes start over. */
int tc_gate_finish(tc_gate *g, strbuf *out, strbuf *held);

#endif
