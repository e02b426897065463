/* cli_chat: `dspark chat`, an interactive terminal chat through the
 * model's own chat template. The whole conversation is re-rendered each
 * turn and tokenized; the KV cache keeps the longest common prefix, so only
 * the new turn is prefilled. Line editing and history come from libedit
 * when stdin is a terminal; piped input is read line by line. Ctrl-C stops
 * the answer being generated and returns to the prompt. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <editline/readline.h>

#include "text/chat_template.h"
#include "cli/cli.h"
#include "text/jinja.h"
#include "base/json.h"
#include "base/util.h"

const char CHAT_HELP[] =
    "usage: dspark chat --model DIR [options]\n"
    "Interactive chat using the model's chat template; the answer streams as it is\n"
    "generated, and earlier turns stay in the KV cache.\n"
    "  -m, --model DIR|FILE     checkpoint (or .gguf) with a tokenizer and a chat template\n"
    "                           (default: the bundled model, or $DSPARK_MODEL)\n"
    "      --pull               --model / --drafter may be a Hugging Face id (org/name[@rev]):\n"
    "                           pulled into the hub cache when not there (see dspark pull)\n"
    "      --system TEXT        system message\n"
    "      --no-thinking        enable_thinking=false for the template\n"
    "      --var KEY=VALUE      a template variable (VALUE as JSON, else a string)\n"
    "  -n N                     at most N tokens per answer (default 4096)\n"
    "      --mode M             auto, dspark, dflash, lookup or baseline (default); every\n"
    "                           mode gives the same answers (see dspark run --help)\n"
    "      --drafter DIR        DSpark or DFlash drafter checkpoint for the model\n"
    "      --max-draft N|auto   drafts per verify round (default: calibrated)\n"
    "      --confidence-threshold C   DSpark: end blocks at confidence below C\n"
    "      --no-lookup-drafts   DSpark/DFlash: no lookup drafts in copy runs (see dspark run --help)\n"
    "      --temp T --top-k K --top-p P --min-p P --seed S   sampling (default greedy)\n"
    "  -t, --threads N  -c, --context-window N  --mmap (map weights instead of reading them)\n"
    "  --kv-bits 32|16|8 (KV cache storage: f32 default, f16, int8 with scales)\n"
    "  --tensor-parallel N (the model split over N ranks; on the CPU an emulation in one process,\n"
    "                       a test of the split, not a speedup; refused on a GPU for N > 1)\n"
    "      --device cpu|cuda[:N]  where the model runs (default cpu; also $DSPARK_DEVICE)\n"
    "Commands at the prompt:\n"
    "  /reset          forget the conversation (keeps the system message)\n"
    "  /system TEXT    set the system message and start over\n"
    "  /save FILE      write the conversation as JSON {\"messages\": [...]}\n"
    "  /load FILE      read a conversation saved by /save (or a JSON array of messages)\n"
    "  /stats          tokens in context and the last turn's speed\n"
    "  /help  /exit    (Ctrl-D also exits; Ctrl-C stops the current answer)\n";

static volatile sig_atomic_t g_cancel;
static void on_sigint(int sig) {
    (void)sig;
    g_cancel = 1;
}

typedef struct {
    cJSON *messages; /* array of {role, content} */
    char *system;
} convo;

static void convo_reset(convo *c) {
    cJSON_Delete(c->messages);
    c->messages = cJSON_CreateArray();
    if (c->system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", c->system);
        cJSON_AddItemToArray(c->messages, m);
    }
}

static void convo_add(convo *c, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(c->messages, m);
}

/* Returns a malloc'd line without its newline, or NULL at end of input. */
static char *read_line(int tty) {
    if (tty) return readline("> ");
    size_t cap = 256, n = 0;
    char *buf = xmalloc(cap);
    int ch;
    while ((ch = getchar()) != EOF && ch != '\n') {
        if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
        buf[n++] = (char)ch;
    }
    if (ch == EOF && n == 0) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

static int save_convo(const convo *c, const char *path, char *err, size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "messages", cJSON_Duplicate(c->messages, 1));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    return ok ? 0 : ds_err(err, errlen, "cannot write %s", path);
}

static int load_convo(convo *c, const char *path, char *err, size_t errlen) {
    size_t n;
    char *text = ds_read_file(path, &n, err, errlen);
    if (!text) return -1;
    cJSON *root = json_parse(text, n, path, err, errlen);
    if (root) jinja_json_mark_floats(root, text); /* 3.0 stays a float for the template */
    free(text);
    if (!root) return -1;
    cJSON *msgs = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "messages") : root;
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(root);
        return ds_err(err, errlen, "%s: expected {\"messages\": [...]} or a JSON array of messages", path);
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            cJSON_Delete(root);
            return ds_err(err, errlen, "%s: every message needs a string \"role\"", path);
        }
    }
    cJSON_Delete(c->messages);
    c->messages = cJSON_Duplicate(msgs, 1);
    cJSON_Delete(root);
    return 0;
}

int cmd_chat(const opts *o) {
    char err[1024];
    tokenizer *tok = cli_tokenizer(o->model, 1);
    chat_template *ct;
    int r = chat_template_load(&ct, o->model, err, sizeof err);
    if (r != 0) cli_die("%s%s", err, r == 1 ? " (dspark run works without one)" : "");
    cli_engine e;
    cli_engine_open(&e, o);
    sampler *smp = cli_sampler(o, model_cfg(e.m)->vocab_size);
    seq *s;
    if (seq_create(&s, e.m, cli_window(&e, o, 1, 256, "chat"), 256, e.tp, err, sizeof err) != 0) cli_die("%s", err);
    int stop[32];
    int n_stop = cli_stop_ids(e.m, tok, stop);
    int max_new = o->n_predict < 0 ? 4096 : o->n_predict;
    int *gen = xmalloc(sizeof(int) * (size_t)(max_new + 1));
    cJSON *vars = cli_template_vars(o);
    convo c = {.system = o->system ? xstrdup(o->system) : NULL};
    convo_reset(&c);
    spec_stats last = {0};
    int last_prompt = 0; /* tokens of the last turn's rendered conversation */
    cli_spec sp;
    cli_spec_open(&sp, o, NULL, &e, s, smp);
    int tty = isatty(0);
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    if (tty) printf("dspark chat: %s (/help for commands, Ctrl-D to leave)\n", o->model);

    char *line;
    while ((line = read_line(tty)) != NULL) {
        g_cancel = 0;
        if (tty && *line) add_history(line);
        if (line[0] == '/') {
            char *arg = strchr(line, ' ');
            if (arg) *arg++ = 0;
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) {
                free(line);
                break;
            } else if (!strcmp(line, "/reset")) {
                convo_reset(&c);
                printf("(conversation cleared)\n");
            } else if (!strcmp(line, "/system")) {
                free(c.system);
                c.system = arg && *arg ? xstrdup(arg) : NULL;
                convo_reset(&c);
                printf("(system message %s; conversation cleared)\n", c.system ? "set" : "removed");
            } else if (!strcmp(line, "/save") && arg) {
                if (save_convo(&c, arg, err, sizeof err) != 0) printf("error: %s\n", err);
                else printf("(saved %d messages to %s)\n", cJSON_GetArraySize(c.messages), arg);
            } else if (!strcmp(line, "/load") && arg) {
                if (load_convo(&c, arg, err, sizeof err) != 0) printf("error: %s\n", err);
                else printf("(loaded %d messages from %s)\n", cJSON_GetArraySize(c.messages), arg);
            } else if (!strcmp(line, "/stats")) {
                int n_dec = last.n_gen > 1 ? last.n_gen - 1 : 0;
                printf("context %d / %d tokens; last turn: prompt %d tokens (%d reused from the cache, %d "
                       "prefilled at %.2f tok/s), generated %d at %.2f tok/s\n",
                       seq_len(s), seq_capacity(s), last_prompt, last_prompt - last.n_prefilled,
                       last.n_prefilled, last.t_prefill > 0 ? last.n_prefilled / last.t_prefill : 0.0, last.n_gen,
                       n_dec && last.t_decode > 0 ? n_dec / last.t_decode : 0.0);
                if (sp.mode != CLI_MODE_BASELINE && last.n_rounds) {
                    char desc[1024];
                    cli_spec_describe(&sp, &last, desc, sizeof desc);
                    printf("speculative%s\n", desc);
                }
            } else if (!strcmp(line, "/help")) {
                fputs(CHAT_HELP + (strstr(CHAT_HELP, "Commands") - CHAT_HELP), stdout);
            } else {
                printf("unknown command %s (or missing argument); /help lists them\n", line);
            }
            fflush(stdout);
            free(line);
            continue;
        }
        if (!*line) {
            free(line);
            continue;
        }
        convo_add(&c, "user", line);
        free(line);
        char *text;
        size_t len;
        int *ids = NULL;
        int n = -1;
        if (chat_template_render(ct, c.messages, NULL, 1, vars, &text, &len, err, sizeof err) == 0) {
            n = tok_encode(tok, text, len, 0, &ids, err, sizeof err);
            free(text);
        }
        int rc = -1;
        last_prompt = n;
        if (n > 0)
            rc = cli_generate(s, smp, &sp, tok, ids, n, max_new, stop, n_stop, 0, 1, gen, &g_cancel, &last, NULL, err,
                              sizeof err);
        if (rc != 0) {
            printf("error: %s\n", n == 0 ? "the conversation renders to no tokens" : err);
            /* drop the turn that failed so the user can go on */
            cJSON_DeleteItemFromArray(c.messages, cJSON_GetArraySize(c.messages) - 1);
            free(ids);
            continue;
        }
        free(ids);
        int n_text = last.n_gen - (last.stopped_by_eos ? 1 : 0);
        size_t alen;
        char *answer = tok_decode(tok, gen, n_text, 0, &alen);
        convo_add(&c, "assistant", answer);
        free(answer);
        printf(last.cancelled ? "\n(stopped)\n" : "\n");
        fflush(stdout);
    }
    if (tty) printf("\n");
    cJSON_Delete(c.messages);
    free(c.system);
    cJSON_Delete(vars);
    free(gen);
    cli_spec_close(&sp);
    seq_free(s);
    sampler_free(smp);
    cli_engine_close(&e);
    chat_template_free(ct);
    tok_free(tok);
    return 0;
}
