/* constrain: the grammar (text/grammar.h) a request's output format asks
 * for, for constrained decoding (server/logitproc.h):
 *   - response_format / text.format json_object: one JSON object;
 *     json_schema: a JSON document valid against the schema
 *     (text/json_schema.h says what is supported; anything else is refused
 *     with the keyword's JSON pointer);
 *   - tool_choice required (Anthropic {type: "any"}): one or more tool calls
 *     of the given tools; a named tool (Anthropic {type: "tool"}): one call
 *     of that tool. Each call is written in the model's own format with its
 *     arguments valid against the tool's parameters schema. dspark writes
 *     the Hermes / Qwen format, "<tool_call>\n{\"name\": NAME,
 *     \"arguments\": ARGS}\n</tool_call>" (calls joined by "\n"); other
 *     formats are refused with the reason (their markers are special
 *     tokens the grammar cannot produce, or their layout is not written
 *     here).
 * One blank, or a line break and up to JSON_SCHEMA_INDENT_MAX blanks, may
 * come first (after a reasoning block, models put a line break before the
 * answer). */
#ifndef DS_CONSTRAIN_H
#define DS_CONSTRAIN_H

#include <stddef.h>

#include "server/api.h"
#include "server/toolcall.h"
#include "text/grammar.h"

/* 1 when q asks for constrained output. */
int constrain_wanted(const api_request *q);
/* The grammar for q (tcf: the model's tool-call format), or NULL with err
 * filled (a message for a 400 naming the field and the reason). */
grammar *constrain_grammar(const api_request *q, tc_format tcf, char *err, size_t errlen);
/* The GBNF text (malloc'd), or NULL with err filled: for tests and logs. */
char *constrain_gbnf(const api_request *q, tc_format tcf, char *err, size_t errlen);

#endif
