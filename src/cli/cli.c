/* cli: see cli.h. */
#include "cli/cli.h"
#include "text/tok_gguf.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/memfit.h"
#include "engine/ops.h"
#include "engine/tpar.h"
#include "base/util.h"
#include "spec/modelref.h"

void cli_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dspark: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static int parse_int(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        cli_die("%s expects an integer in [%ld, %ld], got \"%s\"", flag, lo, hi, v);
    return (int)x;
}

static float parse_float(const char *flag, const char *v) {
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (!*v || *end || errno || !isfinite(x)) cli_die("%s expects a number, got \"%s\"", flag, v);
    return x;
}

void cli_parse(opts *o, int argc, char **argv, const char *cmd, const char *allowed) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1; /* command default */
    o->drain_timeout = -1;
    o->cache_ram = -1;
    o->top_p = 1.0f;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char key[64];
        if (a[0] != '-' || !a[1]) {
            if (!o->text) {
                o->text = a;
                continue;
            }
            cli_die("%s: unexpected argument \"%s\" (see dspark %s --help)", cmd, a, cmd);
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = 1;
            continue;
        }
        snprintf(key, sizeof key, " %s ", a);
        /* every command that opens a model accepts --trust-remote-code */
        int model_flag = !strcmp(a, "--trust-remote-code") && strstr(allowed, " --model ");
        if (!strstr(allowed, key) && !model_flag)
            cli_die("%s: unknown option \"%s\" (see dspark %s --help)", cmd, a, cmd);
        if (!strcmp(a, "--json") && strcmp(cmd, "bench")) { /* a switch, except bench's --json FILE */
            o->json_out = 1;
            continue;
        }
        int *flag = !strcmp(a, "--print-ids")             ? &o->print_ids
                    : !strcmp(a, "--jsonl")               ? &o->jsonl
                    : !strcmp(a, "--add-special")         ? &o->add_special
                    : !strcmp(a, "--ignore-eos")          ? &o->ignore_eos
                    : !strcmp(a, "--skip-special")        ? &o->skip_special
                    : !strcmp(a, "--chat")                ? &o->chat
                    : !strcmp(a, "--no-generation-prompt") ? &o->no_gen_prompt
                    : !strcmp(a, "--no-thinking")         ? &o->no_thinking
                    : !strcmp(a, "--mmap")                ? &o->use_mmap
                    : !strcmp(a, "--no-lookup-drafts")    ? &o->no_lookup_drafts
                    : !strcmp(a, "--no-warmup")           ? &o->no_warmup
                    : !strcmp(a, "--print-env")           ? &o->print_env
                    : !strcmp(a, "--no-drafters")         ? &o->no_drafters
                    : !strcmp(a, "--pull")                ? &o->pull
                    : !strcmp(a, "--trust-remote-code")   ? &o->trust_remote_code
                    : !strcmp(a, "--models")              ? &o->list_models
                                                          : NULL;
        if (flag) {
            *flag = 1;
            continue;
        }
        if (!v) cli_die("%s: %s needs a value", cmd, a);
        i++;
        if (!strcmp(a, "--model") || !strcmp(a, "-m")) o->model = v;
        else if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) o->prompt = v;
        else if (!strcmp(a, "--prompt-ids")) o->prompt_ids = v;
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) o->out = v;
        else if (!strcmp(a, "--file") || !strcmp(a, "-f")) o->file = v;
        else if (!strcmp(a, "--messages")) o->messages = v;
        else if (!strcmp(a, "--tools")) o->tools = v;
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--mode")) o->mode = v;
        else if (!strcmp(a, "--drafter")) o->drafter = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--modes")) o->modes = v;
        else if (!strcmp(a, "--json")) o->json = v;
        else if (!strcmp(a, "--type")) o->qtype = v;
        else if (!strcmp(a, "--revision")) o->revision = v;
        else if (!strcmp(a, "--include")) {
            if (o->n_include == CLI_MAX_INCLUDE) cli_die("too many --include options (at most %d)", CLI_MAX_INCLUDE);
            o->include[o->n_include++] = v;
        }
        else if (!strcmp(a, "--group-size")) o->group_size = parse_int(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--trials")) o->trials = parse_int(a, v, 1, 100);
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--url")) o->url = v;
        else if (!strcmp(a, "--api-key")) o->api_key = v;
        else if (!strcmp(a, "--port")) o->port = parse_int(a, v, 1, 65535);
        else if (!strcmp(a, "--cache-slots")) o->cache_slots = parse_int(a, v, 1, 32);
        else if (!strcmp(a, "--max-batch")) o->max_batch = parse_int(a, v, 1, 32);
        else if (!strcmp(a, "--kv-ram")) o->kv_ram = parse_int(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--cache-ram")) o->cache_ram = parse_int(a, v, 0, 1 << 24);
        else if (!strcmp(a, "--drain-timeout")) {
            o->drain_timeout = parse_float(a, v);
            if (o->drain_timeout < 0 || o->drain_timeout > 86400)
                cli_die("--drain-timeout expects seconds in [0, 86400] (0: cut at once), got \"%s\"", v);
        }
        else if (!strcmp(a, "--kv-bits")) {
            if (strcmp(v, "32") && strcmp(v, "16") && strcmp(v, "8"))
                cli_die("--kv-bits expects 32 (f32), 16 (f16) or 8 (int8 with scales), got \"%s\"", v);
            o->kv_bits = atoi(v);
        }
        else if (!strcmp(a, "--tensor-parallel")) o->tensor_parallel = parse_int(a, v, 1, TPAR_MAX_RANKS);
        else if (!strcmp(a, "--reasoning-effort")) {
            if (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high"))
                cli_die("--reasoning-effort expects low, medium or high, got \"%s\"", v);
            o->reasoning_effort = v;
        }
        else if (!strcmp(a, "--max-draft")) {
            if (!strcmp(v, "auto")) o->max_draft_auto = 1;
            else o->max_draft = parse_int(a, v, 1, SPEC_MAX_DRAFT);
        } else if (!strcmp(a, "--confidence-threshold")) {
            o->conf_threshold = parse_float(a, v);
            o->has_conf = 1;
        }
        else if (!strcmp(a, "--var")) {
            if (!strchr(v, '=')) cli_die("--var expects KEY=VALUE, got \"%s\"", v);
            if (o->n_vars == CLI_MAX_VARS) cli_die("too many --var options (at most %d)", CLI_MAX_VARS);
            o->vars[o->n_vars++] = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) o->n_predict = parse_int(a, v, 0, 1 << 30);
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) o->threads = parse_int(a, v, 1, 1024);
        else if (!strcmp(a, "--context-window") || !strcmp(a, "-c")) o->ctx = parse_int(a, v, 1, 1 << 30);
        else if (!strcmp(a, "--top-k")) o->top_k = parse_int(a, v, 0, 1 << 30);
        else if (!strcmp(a, "--temp")) o->temp = parse_float(a, v);
        else if (!strcmp(a, "--top-p")) o->top_p = parse_float(a, v);
        else if (!strcmp(a, "--min-p")) o->min_p = parse_float(a, v);
        else if (!strcmp(a, "--seed")) o->seed = (unsigned long long)parse_int(a, v, 0, 0x7fffffff);
        else cli_die("%s: option \"%s\" is not handled", cmd, a);
    }
}

void cli_resolve_models(opts *o) {
    /* static: o keeps pointers to them for the process's life */
    static char model_path[4096], drafter_path[4096];
    char err[8192];
    o->model_spec = o->model;
    if (modelref_resolve(o->model, MODELREF_TARGET, NULL, model_path, sizeof model_path, err, sizeof err) != 0)
        cli_die("%s", err);
    o->model = model_path;
    if (modelref_check_remote_code(o->model, modelref_trust_remote_code(o->trust_remote_code), err, sizeof err))
        cli_die("%s", err);
    if (o->drafter) {
        if (modelref_resolve(o->drafter, MODELREF_DRAFTER, o->model, drafter_path, sizeof drafter_path, err, sizeof err))
            cli_die("--drafter: %s", err);
        o->drafter = drafter_path;
    }
}

tokenizer *cli_tokenizer(const char *dir, int required) {
    char path[4096], err[512];
    tokenizer *t;
    if (tok_gguf_is_file(dir)) { /* a lone GGUF: its metadata holds the tokenizer, if it has one */
        if (tok_load(&t, dir, err, sizeof err) == 0) return t;
        if (required) cli_die("%s", err);
        fprintf(stderr, "dspark: no tokenizer (%s)\n", err);
        return NULL;
    }
    if (ds_path_join(path, sizeof path, dir, "tokenizer.json") != 0) cli_die("model path too long");
    if (!ds_file_exists(path)) {
        if (required) cli_die("%s has no tokenizer.json (use --prompt-ids to pass token ids)", dir);
        return NULL;
    }
    if (tok_load(&t, dir, err, sizeof err) != 0) cli_die("%s", err);
    return t;
}

void cli_engine_open(cli_engine *e, const opts *o) {
    char err[1024];
    model_load_opts lo = {.use_mmap = o->use_mmap, .device = o->device, .kv_bits = o->kv_bits,
                          .tensor_parallel = o->tensor_parallel};
    if (model_load(&e->m, o->model, &lo, err, sizeof err) != 0) cli_die("%s", err);
    if (strcmp(model_device(e->m), "cpu")) fprintf(stderr, "dspark: device %s\n", model_device(e->m));
    else if (model_tensor_parallel(e->m) > 1)
        fprintf(stderr, "dspark: tensor parallel: %d ranks emulated on the CPU in one process (a test of the split, "
                        "not a speedup)\n", model_tensor_parallel(e->m));
    if (model_cfg(e->m)->vision_skipped)
        fprintf(stderr, "dspark: note: %s is a gemma3 checkpoint with a vision tower; only its text model is loaded "
                        "(images are not read)\n", o->model);
    e->tp = tp_create(o->threads);
}

void cli_engine_close(cli_engine *e) {
    tp_free(e->tp);
    model_free(e->m);
}

int cli_window(const cli_engine *e, const opts *o, int slots, int max_batch, const char *what) {
    char err[512], msg[768];
    memfit_report r;
    if (memfit_model(e->m, slots, max_batch, o->ctx, NULL, &r, err, sizeof err) != 0) {
        /* no /proc/meminfo: nothing to check against; say so once */
        fprintf(stderr, "dspark: note: %s; the context window is not checked against memory\n", err);
        return o->ctx ? o->ctx : model_cfg(e->m)->max_position_embeddings;
    }
    if (r.out.fits) return r.out.window;
    memfit_describe(&r, slots, msg, sizeof msg);
    if (o->ctx || !r.out.max_fit) cli_die("%s: %s", what, msg); /* an explicit window is never cut */
    fprintf(stderr, "dspark: %s: %s; using --context-window %d\n", what, msg, r.out.max_fit);
    return r.out.max_fit;
}

sampler *cli_sampler(const opts *o, int vocab) {
    char err[512];
    sampler_params sp = {.temperature = o->temp, .top_k = o->top_k, .top_p = o->top_p, .min_p = o->min_p,
                         .seed = o->seed};
    sampler *s;
    if (sampler_create(&s, &sp, vocab, err, sizeof err) != 0) cli_die("%s", err);
    return s;
}

int cli_stop_ids(const model *m, const tokenizer *tok, int *ids) {
    const model_config *c = model_cfg(m);
    int n = 0;
    for (int i = 0; i < c->n_eos && n < 31; i++) ids[n++] = c->eos_token_ids[i];
    int te = tok ? tok_eos_id(tok) : -1;
    int dup = 0;
    for (int i = 0; i < n; i++) dup |= ids[i] == te;
    if (te >= 0 && !dup) ids[n++] = te;
    return n;
}

cJSON *cli_template_vars(const opts *o) {
    cJSON *v = cJSON_CreateObject();
    if (o->no_thinking) cJSON_AddBoolToObject(v, "enable_thinking", 0);
    for (int i = 0; i < o->n_vars; i++) {
        const char *eq = strchr(o->vars[i], '=');
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - o->vars[i]), o->vars[i]);
        cJSON *val = cJSON_Parse(eq + 1);
        if (!val) val = cJSON_CreateString(eq + 1);
        cJSON_DeleteItemFromObjectCaseSensitive(v, key);
        cJSON_AddItemToObject(v, key, val);
    }
    return v;
}

typedef struct {
    const tokenizer *tok;
    tok_stream ts;
    char *buf;
    size_t cap;
} stream_ctx;

static void stream_emit(void *ctx, int id) {
    stream_ctx *c = ctx;
    size_t k = tok_stream_push(c->tok, &c->ts, id, c->buf, c->cap + 1);
    fwrite(c->buf, 1, k, stdout);
    fflush(stdout);
}

int cli_generate(seq *s, sampler *smp, cli_spec *sp, const tokenizer *tok, const int *prompt, int n_prompt,
                 int max_new, const int *stop, int n_stop, int ignore_eos, int stream, int *out_ids,
                 volatile sig_atomic_t *cancel, spec_stats *st, uint64_t *logits_hash, char *err, size_t errlen) {
    int vocab = model_cfg(seq_model(s))->vocab_size;
    float *logits = xmalloc(sizeof(float) * (size_t)vocab);
    if (!tok) stream = 0;
    stream_ctx sc = {.tok = tok, .cap = tok ? tok_stream_cap(tok) : 0};
    sc.buf = xmalloc(sc.cap + 1);
    spec_opts so = {.max_new = max_new, .stop = stop, .n_stop = n_stop,
                    .ignore_eos = ignore_eos, .cancel = cancel, .emit = stream ? stream_emit : NULL,
                    .emit_ctx = &sc};
    cli_spec_apply(sp, &so);
    int rc = spec_generate(s, smp, cli_spec_drafter(sp), prompt, n_prompt, &so, out_ids, logits_hash ? logits : NULL,
                           st, err, errlen);
    if (stream) {
        size_t k = tok_stream_flush(&sc.ts, sc.buf, sc.cap + 1);
        fwrite(sc.buf, 1, k, stdout);
        fflush(stdout);
    }
    if (logits_hash) *logits_hash = rc == 0 ? ds_fnv1a(DS_FNV_SEED, logits, sizeof(float) * (size_t)vocab) : 0;
    free(sc.buf);
    free(logits);
    return rc;
}

