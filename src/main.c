/* main: the dspark command line. Each command parses its flags, calls the
 * library, and is the only place that prints errors and exits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "model.h"
#include "ops.h"
#include "sampler.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "util.h"

#define DSPARK_VERSION "0.1.0"

static void die(const char *fmt, const char *msg) {
    fprintf(stderr, "dspark: ");
    fprintf(stderr, fmt, msg);
    fprintf(stderr, "\n");
    exit(1);
}

/* ---- flag parsing -------------------------------------------------------- */

typedef struct {
    const char *model, *prompt, *prompt_ids, *out, *file, *text;
    int n_predict, threads, ctx, top_k, print_ids, jsonl, add_special, ignore_eos, help, skip_special;
    float temp, top_p, min_p;
    unsigned long long seed;
} opts;

static int parse_int(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "dspark: %s expects an integer in [%ld, %ld], got \"%s\"\n", flag, lo, hi, v);
        exit(1);
    }
    return (int)x;
}

static float parse_float(const char *flag, const char *v) {
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (!*v || *end || errno || !isfinite(x)) {
        fprintf(stderr, "dspark: %s expects a number, got \"%s\"\n", flag, v);
        exit(1);
    }
    return x;
}

/* allowed: which flags this command accepts (a string of names). */
static void parse_opts(opts *o, int argc, char **argv, const char *cmd, const char *allowed) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->top_p = 1.0f;
    o->seed = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char key[64];
        if (a[0] != '-') {
            if (!o->text) {
                o->text = a;
                continue;
            }
            fprintf(stderr, "dspark %s: unexpected argument \"%s\" (see dspark %s --help)\n", cmd, a, cmd);
            exit(1);
        }
        snprintf(key, sizeof key, " %s ", a);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = 1;
            continue;
        }
        if (!strstr(allowed, key)) {
            fprintf(stderr, "dspark %s: unknown option \"%s\" (see dspark %s --help)\n", cmd, a, cmd);
            exit(1);
        }
        int flag = 1;
        if (!strcmp(a, "--print-ids")) o->print_ids = 1;
        else if (!strcmp(a, "--jsonl")) o->jsonl = 1;
        else if (!strcmp(a, "--add-special")) o->add_special = 1;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
        else if (!strcmp(a, "--skip-special")) o->skip_special = 1;
        else flag = 0;
        if (flag) continue;
        if (!v) {
            fprintf(stderr, "dspark %s: %s needs a value\n", cmd, a);
            exit(1);
        }
        i++;
        if (!strcmp(a, "--model") || !strcmp(a, "-m")) o->model = v;
        else if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) o->prompt = v;
        else if (!strcmp(a, "--prompt-ids")) o->prompt_ids = v;
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) o->out = v;
        else if (!strcmp(a, "--file") || !strcmp(a, "-f")) o->file = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) o->n_predict = parse_int(a, v, 0, 1 << 30);
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) o->threads = parse_int(a, v, 1, 1024);
        else if (!strcmp(a, "--context-window") || !strcmp(a, "-c")) o->ctx = parse_int(a, v, 1, 1 << 30);
        else if (!strcmp(a, "--top-k")) o->top_k = parse_int(a, v, 0, 1 << 30);
        else if (!strcmp(a, "--temp")) o->temp = parse_float(a, v);
        else if (!strcmp(a, "--top-p")) o->top_p = parse_float(a, v);
        else if (!strcmp(a, "--min-p")) o->min_p = parse_float(a, v);
        else if (!strcmp(a, "--seed")) o->seed = (unsigned long long)parse_int(a, v, 0, 0x7fffffff);
    }
}

static void need_model(const opts *o, const char *cmd) {
    if (!o->model) {
        fprintf(stderr, "dspark %s: --model DIR is required (see dspark %s --help)\n", cmd, cmd);
        exit(1);
    }
}

/* ---- shared helpers ------------------------------------------------------- */

static tokenizer *load_tokenizer(const char *dir, int required) {
    char path[4096], err[512];
    if (ds_path_join(path, sizeof path, dir, "tokenizer.json") != 0) die("%s", "model path too long");
    if (!ds_file_exists(path)) {
        if (required) {
            fprintf(stderr, "dspark: %s has no tokenizer.json (use --prompt-ids to pass token ids)\n", dir);
            exit(1);
        }
        return NULL;
    }
    tokenizer *t;
    if (tok_load(&t, dir, err, sizeof err) != 0) die("%s", err);
    return t;
}

static int *prompt_tokens(const opts *o, tokenizer *tok, int *n) {
    char err[512];
    int *ids = NULL;
    if (o->prompt_ids) {
        *n = ds_parse_ids(o->prompt_ids, &ids, err, sizeof err);
        if (*n < 0) die("--prompt-ids: %s", err);
        return ids;
    }
    if (!o->prompt) die("%s", "give --prompt TEXT or --prompt-ids IDS");
    *n = tok_encode(tok, o->prompt, strlen(o->prompt), 1, &ids, err, sizeof err);
    if (*n < 0) die("%s", err);
    if (*n == 0) die("%s", "the prompt encodes to no tokens");
    return ids;
}

typedef struct {
    model *m;
    tpool *tp;
    model_ctx *ctx;
} engine;

static void engine_open(engine *e, const opts *o, int max_batch) {
    char err[1024];
    if (model_load(&e->m, o->model, err, sizeof err) != 0) die("%s", err);
    e->tp = tp_create(o->threads);
    if (mctx_create(&e->ctx, e->m, o->ctx, max_batch, e->tp, err, sizeof err) != 0) die("%s", err);
}

static void engine_close(engine *e) {
    mctx_free(e->ctx);
    tp_free(e->tp);
    model_free(e->m);
}

/* ---- commands ---------------------------------------------------------------- */

static const char RUN_HELP[] =
    "usage: dspark run --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
    "Generates a completion of a raw prompt (no chat template) and streams it to stdout.\n"
    "  -m, --model DIR          Hugging Face checkpoint directory (config.json + safetensors)\n"
    "  -p, --prompt TEXT        prompt text (needs tokenizer.json in DIR)\n"
    "      --prompt-ids IDS     prompt as comma-separated token ids (no tokenizer needed)\n"
    "  -n N                     tokens to generate (default 128)\n"
    "      --temp T             temperature; 0 = greedy (default 0)\n"
    "      --top-k K            keep the K most probable tokens (0 = off)\n"
    "      --top-p P            nucleus sampling mass (1 = off)\n"
    "      --min-p P            drop tokens below P x the top probability (0 = off)\n"
    "      --seed S             sampling seed (default 0)\n"
    "  -t, --threads N          CPU threads (default: all cores)\n"
    "  -c, --context-window N   KV cache positions (default: model max, capped by memory)\n"
    "      --print-ids          print generated token ids, comma-separated, instead of text\n"
    "      --ignore-eos         keep generating past end-of-sequence tokens\n"
    "A stamp line goes to stderr: prompt tokens, prefill tok/s, generated tokens,\n"
    "decode tok/s and an FNV-1a hash of the last logits row.\n";

static int is_eos(const model_config *c, int id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == id) return 1;
    return 0;
}

static int cmd_run(const opts *op) {
    opts o = *op;
    if (o.prompt && o.prompt_ids) die("%s", "give either --prompt or --prompt-ids, not both");
    tokenizer *tok = load_tokenizer(o.model, o.prompt != NULL);
    int n_prompt;
    int *prompt = prompt_tokens(&o, tok, &n_prompt);
    engine e;
    engine_open(&e, &o, 256);
    const model_config *c = model_cfg(e.m);
    char err[1024];
    sampler_params sp = {.temperature = o.temp, .top_k = o.top_k, .top_p = o.top_p, .min_p = o.min_p, .seed = o.seed};
    sampler *smp;
    if (sampler_create(&smp, &sp, c->vocab_size, err, sizeof err) != 0) die("%s", err);
    if (n_prompt + o.n_predict > mctx_capacity(e.ctx))
        fprintf(stderr, "dspark: note: prompt + %d tokens exceed the %d-position context window; generation stops "
                        "when it is full\n", o.n_predict, mctx_capacity(e.ctx));
    float *logits = xmalloc(sizeof(float) * (size_t)c->vocab_size);
    int *gen = xmalloc(sizeof(int) * (size_t)(o.n_predict + 1));
    int n_gen = 0;

    double t0 = ds_now();
    model_batch b = {.n = n_prompt, .tokens = prompt, .n_logits = 1, .logits = logits};
    if (model_forward(e.ctx, &b, err, sizeof err) != 0) die("%s", err);
    double t1 = ds_now();
    tok_stream ts = {0};
    char buf[4096];
    int print_text = tok && !o.print_ids;
    while (n_gen < o.n_predict) {
        int id = sampler_sample(smp, logits);
        gen[n_gen++] = id;
        if (print_text) {
            size_t k = tok_stream_push(tok, &ts, id, buf, sizeof buf);
            fwrite(buf, 1, k, stdout);
            fflush(stdout);
        }
        if (!o.ignore_eos && is_eos(c, id)) break;
        if (n_gen == o.n_predict || mctx_len(e.ctx) >= mctx_capacity(e.ctx)) break;
        model_batch d = {.n = 1, .tokens = &id, .n_logits = 1, .logits = logits};
        if (model_forward(e.ctx, &d, err, sizeof err) != 0) die("%s", err);
    }
    double t2 = ds_now();
    if (print_text) {
        size_t k = tok_stream_flush(&ts, buf, sizeof buf);
        fwrite(buf, 1, k, stdout);
        printf("\n");
    } else {
        for (int i = 0; i < n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
        printf("\n");
    }
    fflush(stdout);
    /* decode tok/s counts forward passes after the prefill */
    int n_dec = n_gen > 1 ? n_gen - 1 : 0;
    uint64_t h = ds_fnv1a(DS_FNV_SEED, logits, sizeof(float) * (size_t)c->vocab_size);
    fprintf(stderr, "stamp: prompt %d tok, prefill %.2f tok/s, generated %d tok, decode %.2f tok/s, threads %d, "
                    "logits fnv1a %016llx\n",
            n_prompt, n_prompt / (t1 - t0), n_gen, n_dec > 0 ? n_dec / (t2 - t1) : 0.0, tp_size(e.tp),
            (unsigned long long)h);
    free(gen);
    free(logits);
    free(prompt);
    sampler_free(smp);
    engine_close(&e);
    tok_free(tok);
    return 0;
}

static const char LOGITS_HELP[] =
    "usage: dspark logits --model DIR --prompt-ids 1,2,3 --out FILE [--threads N]\n"
    "Writes float32 little-endian logits for every prompt position, row-major\n"
    "[positions x vocab]. Needs no tokenizer.\n";

static int cmd_logits(const opts *op) {
    opts o = *op;
    if (!o.prompt_ids || !o.out) die("%s", "logits needs --prompt-ids and --out (see dspark logits --help)");
    int n;
    int *ids = prompt_tokens(&o, NULL, &n);
    if (!o.ctx) o.ctx = n;
    engine e;
    engine_open(&e, &o, 256);
    const model_config *c = model_cfg(e.m);
    char err[1024];
    float *logits = xmalloc(sizeof(float) * (size_t)n * (size_t)c->vocab_size);
    model_batch b = {.n = n, .tokens = ids, .n_logits = n, .logits = logits};
    if (model_forward(e.ctx, &b, err, sizeof err) != 0) die("%s", err);
    FILE *f = fopen(o.out, "wb");
    if (!f) {
        fprintf(stderr, "dspark: cannot write %s: %s\n", o.out, strerror(errno));
        exit(1);
    }
    size_t cnt = (size_t)n * (size_t)c->vocab_size;
    if (fwrite(logits, sizeof(float), cnt, f) != cnt || fclose(f) != 0) die("cannot write %s", o.out);
    free(logits);
    free(ids);
    engine_close(&e);
    return 0;
}

static const char TOKENIZE_HELP[] =
    "usage: dspark tokenize --model DIR [--file F | TEXT] [--jsonl] [--add-special]\n"
    "Prints the token ids of TEXT (or of file F) as a JSON array.\n"
    "  --jsonl        encode each line separately (without its newline), one array per line\n"
    "  --add-special  add what the tokenizer's post-processor adds (e.g. BOS)\n"
    "Needs only tokenizer.json (and tokenizer_config.json) in DIR.\n";

static void print_ids_json(const int *ids, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("]\n");
}

static int cmd_tokenize(const opts *op) {
    opts o = *op;
    if (!!o.file == !!o.text) die("%s", "tokenize needs exactly one of --file F or TEXT");
    tokenizer *tok = load_tokenizer(o.model, 1);
    char err[1024];
    size_t len;
    char *text;
    if (o.file) {
        text = ds_read_file(o.file, &len, err, sizeof err);
        if (!text) die("%s", err);
    } else {
        text = xstrdup(o.text);
        len = strlen(text);
    }
    const char *p = text, *end = text + len;
    do {
        const char *nl = o.jsonl ? memchr(p, '\n', (size_t)(end - p)) : NULL;
        const char *stop = nl ? nl : end;
        if (o.jsonl && p == end) break; /* no empty record after a final newline */
        int *ids = NULL;
        int n = tok_encode(tok, p, (size_t)(stop - p), o.add_special, &ids, err, sizeof err);
        if (n < 0) die("%s", err);
        print_ids_json(ids, n);
        free(ids);
        p = nl ? nl + 1 : end;
    } while (o.jsonl && p < end);
    free(text);
    tok_free(tok);
    return 0;
}

static const char DETOKENIZE_HELP[] =
    "usage: dspark detokenize --model DIR 1,2,3 [--skip-special]\n"
    "Prints the text of the given token ids. Needs only the tokenizer files.\n";

static int cmd_detokenize(const opts *op) {
    opts o = *op;
    if (!o.text) die("%s", "detokenize needs a comma-separated id list");
    tokenizer *tok = load_tokenizer(o.model, 1);
    char err[512];
    int *ids;
    int n = ds_parse_ids(o.text, &ids, err, sizeof err);
    if (n < 0) die("%s", err);
    for (int i = 0; i < n; i++)
        if (ids[i] >= tok_vocab_size(tok)) {
            fprintf(stderr, "dspark: token id %d is outside the vocabulary (size %d)\n", ids[i], tok_vocab_size(tok));
            exit(1);
        }
    size_t len;
    char *s = tok_decode(tok, ids, n, o.skip_special, &len);
    fwrite(s, 1, len, stdout);
    putchar('\n');
    free(s);
    free(ids);
    tok_free(tok);
    return 0;
}

static const char MAIN_HELP[] =
    "dspark " DSPARK_VERSION " - LLM inference with lossless speculative decoding\n"
    "usage: dspark COMMAND [options]   (dspark COMMAND --help for details)\n"
    "commands:\n"
    "  run         generate a completion for a raw prompt\n"
    "  logits      write the logits of every prompt position to a file\n"
    "  tokenize    print token ids of a text\n"
    "  detokenize  print the text of token ids\n"
    "  version     print version and CPU features\n";

typedef struct {
    const char *name;
    int (*fn)(const opts *o);
    const char *help;
    const char *flags; /* accepted options, space-separated and padded */
} command;

static const command COMMANDS[] = {
    {"run", cmd_run, RUN_HELP,
     " --model -m --prompt -p --prompt-ids -n --n-predict --temp --top-k --top-p --min-p --seed --threads -t "
     "--context-window -c --print-ids --ignore-eos "},
    {"logits", cmd_logits, LOGITS_HELP, " --model -m --prompt-ids --out -o --threads -t --context-window -c "},
    {"tokenize", cmd_tokenize, TOKENIZE_HELP, " --model -m --file -f --jsonl --add-special "},
    {"detokenize", cmd_detokenize, DETOKENIZE_HELP, " --model -m --skip-special "},
};

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(MAIN_HELP, stdout);
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        const command *c = &COMMANDS[i];
        if (strcmp(cmd, c->name)) continue;
        opts o;
        parse_opts(&o, argc - 2, argv + 2, c->name, c->flags);
        if (o.help) {
            fputs(c->help, stdout);
            return 0;
        }
        need_model(&o, c->name);
        return c->fn(&o);
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("dspark %s\ncpu: %s, %d threads, avx2+fma+f16c: %s\n", DSPARK_VERSION, cpu_name(), cpu_count(),
               cpu_has_avx2() ? "yes" : "no");
        return 0;
    }
    fprintf(stderr, "dspark: unknown command \"%s\"\n%s", cmd, MAIN_HELP);
    return 1;
}
