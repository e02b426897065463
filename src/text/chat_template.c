/* chat_template: finds a model's chat template (chat_template.jinja, or
 * "chat_template" in tokenizer_config.json as a string or a list of named
 * templates), parses it once, and renders conversations with the variables
 * transformers' apply_chat_template passes: messages, tools, documents,
 * add_generation_prompt, bos_token, eos_token and extra keyword variables. */
#include "text/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"
#include "text/tok_gguf.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "base/util.h"

struct chat_template {
    jinja_template *def;      /* "default" (or the only template) */
    jinja_template *tool_use; /* "tool_use", may be NULL */
    char *bos, *eos;
    strbuf src; /* the source text of every template loaded */
};

static char *token_text(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return xstrdup(v->valuestring);
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return xstrdup(c->valuestring);
    }
    return xstrdup("");
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    jinja_free(t->def);
    jinja_free(t->tool_use);
    free(t->bos);
    free(t->eos);
    sb_free(&t->src);
    free(t);
}

static int parse_one(chat_template *t, jinja_template **out, const char *src, size_t n, const char *name, char *err,
                     size_t errlen) {
    if (t->src.n) sb_puts(&t->src, "\n");
    sb_append(&t->src, src, n);
    return jinja_parse(out, src, n, name, err, errlen);
}

int chat_template_load(chat_template **out, const char *dir, char *err, size_t errlen) {
    *out = NULL;
    char cfg_path[4096], jinja_path[4096];
    cJSON *cfg = NULL;
    /* A .gguf file: its metadata stands for tokenizer_config.json (no
     * chat_template.jinja beside it is looked for: the file is the model) */
    int is_gguf = tok_gguf_is_file(dir);
    if (is_gguf) {
        if (!(cfg = tok_gguf_config_file(dir, err, errlen))) return -1;
        snprintf(cfg_path, sizeof cfg_path, "%s", dir);
        jinja_path[0] = 0;
    } else if (ds_path_join(cfg_path, sizeof cfg_path, dir, "tokenizer_config.json") ||
               ds_path_join(jinja_path, sizeof jinja_path, dir, "chat_template.jinja")) {
        return ds_err(err, errlen, "%s: path too long", dir);
    }
    if (!is_gguf && ds_file_exists(cfg_path)) {
        cfg = json_parse_file(cfg_path, err, errlen);
        if (!cfg) return -1;
        if (!cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            return ds_err(err, errlen, "%s: not a JSON object", cfg_path);
        }
    }
    chat_template *t = xcalloc(1, sizeof *t);
    t->bos = cfg ? token_text(cfg, "bos_token") : xstrdup("");
    t->eos = cfg ? token_text(cfg, "eos_token") : xstrdup("");
    int rc = 0;
    if (!is_gguf && ds_file_exists(jinja_path)) {
        size_t n;
        char *src = ds_read_file(jinja_path, &n, err, errlen);
        if (!src) rc = -1;
        else {
            rc = parse_one(t, &t->def, src, n, jinja_path, err, errlen);
            free(src);
        }
    } else {
        const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
        char name[4200];
        if (!ct || cJSON_IsNull(ct)) {
            rc = 1;
            if (is_gguf) ds_err(err, errlen, "%s: no chat template (no tokenizer.chat_template)", dir);
            else ds_err(err, errlen, "%s: no chat template (neither chat_template.jinja nor \"chat_template\" in tokenizer_config.json)", dir);
        } else if (cJSON_IsString(ct)) {
            snprintf(name, sizeof name, "%s:chat_template", cfg_path);
            rc = parse_one(t, &t->def, ct->valuestring, strlen(ct->valuestring), name, err, errlen);
        } else if (cJSON_IsArray(ct)) {
            for (const cJSON *e = ct->child; e && rc == 0; e = e->next) {
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
                const cJSON *tp = cJSON_GetObjectItemCaseSensitive(e, "template");
                if (!cJSON_IsString(nm) || !cJSON_IsString(tp)) {
                    rc = ds_err(err, errlen, "%s: chat_template list entries need string \"name\" and \"template\"", cfg_path);
                    break;
                }
                jinja_template **slot = !strcmp(nm->valuestring, "default") ? &t->def
                                        : !strcmp(nm->valuestring, "tool_use") ? &t->tool_use : NULL;
                if (!slot || *slot) continue;
                snprintf(name, sizeof name, "%s:chat_template[%s]", cfg_path, nm->valuestring);
                rc = parse_one(t, slot, tp->valuestring, strlen(tp->valuestring), name, err, errlen);
            }
            if (rc == 0 && !t->def && !t->tool_use)
                rc = ds_err(err, errlen, "%s: chat_template list has neither a \"default\" nor a \"tool_use\" template", cfg_path);
        } else {
            rc = ds_err(err, errlen, "%s: \"chat_template\" must be a string or a list of {name, template}", cfg_path);
        }
    }
    cJSON_Delete(cfg);
    if (rc) {
        chat_template_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int chat_template_render(const chat_template *t, const cJSON *messages, const cJSON *tools, int add_generation_prompt,
                         const cJSON *extra, char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!messages || !cJSON_IsArray(messages)) return ds_err(err, errlen, "chat template: messages must be a JSON array");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return ds_err(err, errlen, "chat template: tools must be a JSON array");
    if (extra && !cJSON_IsObject(extra)) return ds_err(err, errlen, "chat template: extra variables must be a JSON object");
    int has_tools = tools && cJSON_IsArray(tools);
    /* transformers: the tool_use template when tools are given and it exists, else default */
    const jinja_template *tpl = has_tools && t->tool_use ? t->tool_use : t->def;
    if (!tpl) return ds_err(err, errlen, "chat template: no \"default\" template for a request without tools");
    cJSON *vars = cJSON_CreateObject();
    cJSON_AddStringToObject(vars, "bos_token", t->bos);
    cJSON_AddStringToObject(vars, "eos_token", t->eos);
    if (extra)
        for (const cJSON *e = extra->child; e; e = e->next) {
            if (!e->string || !strcmp(e->string, "messages") || !strcmp(e->string, "tools") ||
                !strcmp(e->string, "documents") || !strcmp(e->string, "add_generation_prompt"))
                continue;
            cJSON_DeleteItemFromObjectCaseSensitive(vars, e->string);
            cJSON_AddItemToObject(vars, e->string, cJSON_Duplicate(e, 1));
        }
    cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(messages, 1));
    cJSON_AddItemToObject(vars, "tools", has_tools ? cJSON_Duplicate(tools, 1) : cJSON_CreateNull());
    cJSON_AddItemToObject(vars, "documents", cJSON_CreateNull());
    cJSON_AddBoolToObject(vars, "add_generation_prompt", add_generation_prompt ? 1 : 0);
    int rc = jinja_render(tpl, vars, out, out_len, err, errlen);
    cJSON_Delete(vars);
    return rc;
}

const char *chat_template_bos(const chat_template *t) { return t && t->bos ? t->bos : ""; }
const char *chat_template_eos(const chat_template *t) { return t && t->eos ? t->eos : ""; }
const char *chat_template_source(const chat_template *t) { return t ? sb_str(&t->src) : ""; }
