/* constrain: see constrain.h. */
#include "server/constrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "base/util.h"
#include "text/json_schema.h"

int constrain_wanted(const api_request *q) {
    return q->json_mode != API_JSON_NONE ||
           (q->tools && (q->tool_choice == TOOL_CHOICE_REQUIRED || q->tool_choice == TOOL_CHOICE_NAMED));
}

static int ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Appends GBNF text to out with every rule name prefixed (definitions and
   references alike; literals, classes, repetition counts and comments as
   they are), so several generated grammars can share one set of rules. */
static void prefixed(strbuf *out, const char *g, const char *prefix) {
    for (const char *s = g; *s;) {
        char c = *s;
        if (c == '"' || c == '[' || c == '{') {
            char close = c == '"' ? '"' : c == '[' ? ']' : '}';
            const char *e = s + 1;
            while (*e && *e != close) e += e[0] == '\\' && e[1] ? 2 : 1;
            if (*e) e++;
            sb_append(out, s, (size_t)(e - s));
            s = e;
        } else if (c == '#') {
            while (*s && *s != '\n') s++;
        } else if (ident_char(c)) {
            const char *e = s;
            while (ident_char(*e)) e++;
            sb_puts(out, prefix);
            sb_append(out, s, (size_t)(e - s));
            s = e;
        } else {
            sb_append(out, s, 1);
            s++;
        }
    }
}

/* bytes as a GBNF literal */
static void lit(strbuf *o, const char *s) {
    sb_puts(o, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') sb_printf(o, "\\%c", *p);
        else if (*p == '\n') sb_puts(o, "\\n");
        else if (*p < 0x20) sb_printf(o, "\\x%02X", *p);
        else sb_append(o, (const char *)p, 1);
    }
    sb_puts(o, "\"");
}

/* the schema's grammar with its rules prefixed; -1 with err filled */
static int schema_rules(strbuf *o, const cJSON *schema, const char *prefix, const char *what, char *err,
                        size_t errlen) {
    char e[512];
    char *g = json_schema_to_gbnf(schema, e, sizeof e);
    if (!g) return ds_err(err, errlen, "%s: %s", what, e);
    prefixed(o, g, prefix);
    free(g);
    return 0;
}

static const char *const FORMAT_WHY[] = {
    [TC_NONE] = "the model's chat template has no tool-call format",
    [TC_XML] = "its Qwen3-Coder XML format is not written by dspark's grammars",
    [TC_LLAMA3] = "its Llama 3 format is not written by dspark's grammars",
    [TC_MISTRAL] = "its Mistral format opens calls with a special token ([TOOL_CALLS]) that constrained decoding "
                   "cannot produce",
    [TC_PYTHONIC] = "its pythonic format is not written by dspark's grammars",
    [TC_GEMMA] = "its Gemma format is not written by dspark's grammars",
};

char *constrain_gbnf(const api_request *q, tc_format tcf, char *err, size_t errlen) {
    int tools = q->tools && (q->tool_choice == TOOL_CHOICE_REQUIRED || q->tool_choice == TOOL_CHOICE_NAMED);
    if (tools && q->json_mode != API_JSON_NONE) {
        ds_err(err, errlen, "a JSON response format and a required tool call cannot both be enforced: give one");
        return NULL;
    }
    strbuf o = {0};
    char ws[64];
    snprintf(ws, sizeof ws, "([ \\t] | \"\\n\" [ \\t]{0,%d})?", JSON_SCHEMA_INDENT_MAX); /* as json_schema.h's */
    if (!tools) {
        sb_printf(&o, "root ::= %s j-root\n", ws);
        const char *what = q->kind == API_RESPONSES ? "text.format.schema" : "response_format schema";
        if (schema_rules(&o, q->json_mode == API_JSON_SCHEMA ? q->json_schema : NULL, "j-", what, err, errlen)) {
            sb_free(&o);
            return NULL;
        }
        return sb_take(&o);
    }
    const char *field = q->kind == API_MESSAGES ? "tool_choice {\"type\": \"any\" | \"tool\"}"
                        : q->tool_choice == TOOL_CHOICE_REQUIRED ? "tool_choice \"required\""
                                                                 : "a named tool_choice";
    if (tcf != TC_HERMES) {
        ds_err(err, errlen,
               "%s needs constrained decoding of the model's tool calls, and this model's cannot be: %s (dspark "
               "writes the Hermes / Qwen <tool_call> format); use tool_choice \"auto\"",
               field, tcf >= 0 && tcf <= TC_GEMMA && FORMAT_WHY[tcf] ? FORMAT_WHY[tcf] : "unknown format");
        return NULL;
    }
    sb_printf(&o, "root ::= %s call%s\n", ws, q->tool_choice == TOOL_CHOICE_REQUIRED ? " (\"\\n\" call)*" : "");
    sb_puts(&o, "call ::= \"<tool_call>\\n{\\\"name\\\": \" (");
    strbuf rules = {0};
    int k = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, q->tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(nm)) continue;
        if (q->tool_choice == TOOL_CHOICE_NAMED && strcmp(nm->valuestring, q->tool_choice_name)) continue;
        char prefix[32], what[160];
        snprintf(prefix, sizeof prefix, "t%d-", k);
        snprintf(what, sizeof what, "the parameters schema of tool \"%.64s\"", nm->valuestring);
        if (schema_rules(&rules, cJSON_GetObjectItemCaseSensitive(f, "parameters"), prefix, what, err, errlen)) {
            sb_free(&rules);
            sb_free(&o);
            return NULL;
        }
        cJSON *js = cJSON_CreateString(nm->valuestring);
        char *name = cJSON_PrintUnformatted(js);
        cJSON_Delete(js);
        if (k) sb_puts(&o, " |");
        sb_puts(&o, " ");
        lit(&o, name);
        free(name);
        sb_printf(&o, " \", \\\"arguments\\\": \" t%d-root", k);
        k++;
    }
    sb_puts(&o, " ) \"}\\n</tool_call>\"\n");
    sb_append(&o, sb_str(&rules), rules.n);
    sb_free(&rules);
    if (!k) {
        sb_free(&o);
        ds_err(err, errlen, "%s: no tool to call", field);
        return NULL;
    }
    return sb_take(&o);
}

grammar *constrain_grammar(const api_request *q, tc_format tcf, char *err, size_t errlen) {
    char *text = constrain_gbnf(q, tcf, err, errlen);
    if (!text) return NULL;
    char gerr[512];
    grammar *g = grammar_parse(text, strlen(text), "root", gerr, sizeof gerr);
    if (!g) ds_err(err, errlen, "the output format's grammar is refused: %s", gerr);
    free(text);
    return g;
}
