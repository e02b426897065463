/* chat_template: a model's chat template and the variables transformers
 * passes to it. Loaded from a .gguf file's tokenizer.chat_template (and its
 * named tokenizer.chat_template.NAME ones, bos/eos from its token ids), or
 * from DIR/chat_template.jinja, or from
 * "chat_template" in DIR/tokenizer_config.json (a string, or a list of
 * {name, template} where "default" is used and "tool_use" is preferred
 * when tools are given), with bos_token / eos_token taken from
 * tokenizer_config.json (string or {"content": ...}). */
#ifndef DS_CHAT_TEMPLATE_H
#define DS_CHAT_TEMPLATE_H

#include <stddef.h>
#include <cjson/cJSON.h>

typedef struct chat_template chat_template;

/* dir: a model folder or a .gguf file. Returns 0 on success; 1 when it
 * has no chat template at all (err says so); -1 on a malformed file or
 * template. */
int chat_template_load(chat_template **out, const char *dir, char *err, size_t errlen);
void chat_template_free(chat_template *t);

/* Renders messages (a JSON array of {role, content, ...}) as
 * apply_chat_template(messages, tools=tools, add_generation_prompt=...,
 * **extra) does, tokenize=False. tools may be NULL (then `tools` and
 * `documents` are defined as none, as transformers passes them); extra is an
 * object of further keyword variables (e.g. {"enable_thinking": false}) or
 * NULL. *out is malloc'd. */
int chat_template_render(const chat_template *t, const cJSON *messages, const cJSON *tools,
                         int add_generation_prompt, const cJSON *extra, char **out, size_t *out_len, char *err,
                         size_t errlen);

const char *chat_template_bos(const chat_template *t); /* "" when none */
const char *chat_template_eos(const chat_template *t); /* "" when none */
/* The template source text (all loaded templates, newline-joined): the
 * server reads the model's tool-call and thinking markers from it. */
const char *chat_template_source(const chat_template *t);

#endif
