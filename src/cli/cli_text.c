/* cli_text: the commands that need only the tokenizer and template files:
 * `tokenize`, `detokenize` and `template`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "text/chat_template.h"
#include "cli/cli.h"
#include "text/jinja.h"
#include "base/json.h"
#include "base/util.h"

const char TOKENIZE_HELP[] =
    "usage: dspark tokenize --model DIR [--file F | TEXT] [--jsonl] [--add-special]\n"
    "Prints the token ids of TEXT (or of file F) as a JSON array; -- before a TEXT that starts with -.\n"
    "  --jsonl        encode each line separately (without its newline), one array per line\n"
    "  --add-special  add what the tokenizer's post-processor adds (e.g. BOS)\n"
    "Needs only tokenizer.json (and tokenizer_config.json) in DIR.\n";

static void print_ids_json(const int *ids, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("]\n");
}

int cmd_tokenize(const opts *o) {
    if (!!o->file == !!o->text) cli_die("tokenize needs exactly one of --file F or TEXT");
    tokenizer *tok = cli_tokenizer(o->model, 1);
    char err[1024];
    size_t len;
    char *text;
    if (o->file) {
        text = ds_read_file(o->file, &len, err, sizeof err);
        if (!text) cli_die("%s", err);
    } else {
        text = xstrdup(o->text);
        len = strlen(text);
    }
    const char *p = text, *end = text + len;
    do {
        const char *nl = o->jsonl ? memchr(p, '\n', (size_t)(end - p)) : NULL;
        const char *stop = nl ? nl : end;
        if (o->jsonl && p == end) break; /* no empty record after a final newline */
        int *ids = NULL;
        int n = tok_encode(tok, p, (size_t)(stop - p), o->add_special, &ids, err, sizeof err);
        if (n < 0) cli_die("%s", err);
        print_ids_json(ids, n);
        free(ids);
        p = nl ? nl + 1 : end;
    } while (o->jsonl && p < end);
    free(text);
    tok_free(tok);
    return 0;
}

const char DETOKENIZE_HELP[] =
    "usage: dspark detokenize --model DIR 1,2,3 [--skip-special]\n"
    "Prints the text of the given token ids. Needs only the tokenizer files.\n";

int cmd_detokenize(const opts *o) {
    if (!o->text) cli_die("detokenize needs a comma-separated id list");
    tokenizer *tok = cli_tokenizer(o->model, 1);
    char err[512];
    int *ids;
    int n = ds_parse_ids(o->text, &ids, err, sizeof err);
    if (n < 0) cli_die("%s", err);
    for (int i = 0; i < n; i++)
        if (ids[i] >= tok_vocab_size(tok))
            cli_die("token id %d is outside the vocabulary (size %d)", ids[i], tok_vocab_size(tok));
    size_t len;
    char *s = tok_decode(tok, ids, n, o->skip_special, &len);
    fwrite(s, 1, len, stdout);
    putchar('\n');
    free(s);
    free(ids);
    tok_free(tok);
    return 0;
}

const char TEMPLATE_HELP[] =
    "usage: dspark template --model DIR --messages FILE.json [--tools FILE.json]\n"
    "                       [--no-generation-prompt] [--var KEY=VALUE]... [--no-thinking]\n"
    "Prints the prompt the model's chat template renders, exactly (no newline added),\n"
    "as transformers' apply_chat_template(messages, tools=..., add_generation_prompt=True,\n"
    "**vars) does. FILE.json holds a JSON array of messages (or an object with\n"
    "\"messages\" and optionally \"tools\"). VALUE is parsed as JSON when it is valid JSON\n"
    "(true, 3, \"x\"), else taken as a string. Needs only the tokenizer/template files.\n";

/* Parses a JSON file for a template: numbers written as 3.0 stay floats,
 * as Python's json.loads keeps them (templates print them so). */
static cJSON *template_json(const char *path) {
    char err[1024];
    size_t n;
    char *text = ds_read_file(path, &n, err, sizeof err);
    if (!text) cli_die("%s", err);
    cJSON *root = json_parse(text, n, path, err, sizeof err);
    if (!root) cli_die("%s", err);
    jinja_json_mark_floats(root, text);
    free(text);
    return root;
}

int cmd_template(const opts *o) {
    if (!o->messages) cli_die("template needs --messages FILE.json (see dspark template --help)");
    char err[1024];
    chat_template *ct;
    if (chat_template_load(&ct, o->model, err, sizeof err) != 0) cli_die("%s", err);
    cJSON *root = template_json(o->messages);
    cJSON *msgs = root, *tools = NULL, *tools_root = NULL;
    if (cJSON_IsObject(root)) {
        msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
        tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    }
    if (!cJSON_IsArray(msgs)) cli_die("%s: expected a JSON array of messages (or {\"messages\": [...]})", o->messages);
    if (o->tools) {
        tools_root = template_json(o->tools);
        if (!cJSON_IsArray(tools_root)) cli_die("%s: expected a JSON array of tools", o->tools);
        tools = tools_root;
    }
    cJSON *vars = cli_template_vars(o);
    char *text;
    size_t len;
    if (chat_template_render(ct, msgs, tools, !o->no_gen_prompt, vars, &text, &len, err, sizeof err) != 0)
        cli_die("%s", err);
    fwrite(text, 1, len, stdout);
    free(text);
    cJSON_Delete(vars);
    cJSON_Delete(tools_root);
    cJSON_Delete(root);
    chat_template_free(ct);
    return 0;
}
