/* cli_run: `dspark run` (a completion of one prompt, raw or through the
 * chat template) and `dspark logits`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "text/chat_template.h"
#include "cli/cli.h"
#include "base/util.h"

const char RUN_HELP[] =
    "usage: dspark run --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
    "Generates a completion and streams it to stdout. The prompt is raw text unless\n"
    "--chat wraps it as a user message in the model's chat template.\n"
    "  -m, --model DIR|FILE|ID  Hugging Face checkpoint directory (config.json + safetensors,\n"
    "                           float or MLX-quantized), a .gguf file, or a Hugging Face id\n"
    "                           ORG/NAME[@REV] found on this machine (dspark doctor lists\n"
    "                           where) (default: the bundled model, or $DSPARK_MODEL)\n"
    "      --trust-remote-code  accept a checkpoint whose config asks for its own Python code\n"
    "                           (auto_map / model_file; dspark never runs it)\n"
    "      --pull               an id not found on this machine is pulled into the Hugging Face\n"
    "                           cache first (see dspark pull)\n"
    "  -p, --prompt TEXT        prompt text (needs the model's tokenizer)\n"
    "      --prompt-ids IDS     prompt as comma-separated token ids (no tokenizer needed)\n"
    "      --chat               apply the chat template to --prompt (a single user turn)\n"
    "      --system TEXT        with --chat: a system message\n"
    "      --no-thinking        with --chat: enable_thinking=false for the template\n"
    "      --var KEY=VALUE      with --chat: a template variable (VALUE as JSON, else a string)\n"
    "  -n N                     tokens to generate (default 128)\n"
    "      --temp T             temperature; 0 = greedy (default 0)\n"
    "      --top-k K            keep the K most probable tokens (0 = off)\n"
    "      --top-p P            nucleus sampling mass (1 = off)\n"
    "      --min-p P            drop tokens below P x the top probability (0 = off)\n"
    "      --seed S             sampling seed (default 0)\n"
    "  -t, --threads N          CPU threads (default: all cores)\n"
    "  -c, --context-window N   KV cache positions (default: the model's, or the most that fits in\n"
    "                           memory, said on stderr; a window that cannot fit is refused)\n"
    "      --kv-bits 32|16|8    KV cache storage: 32 f32 (exact, default), 16 f16, 8 int8 with\n"
    "                           per-position scales (about 2x / 4x the window in the same memory)\n"
    "      --tensor-parallel N  split the model's layers over N ranks (heads, MLP columns and\n"
    "                           vocabulary; docs/ARCHITECTURE.md). On the CPU the N ranks are\n"
    "                           emulated in one process: a test of the split, not a speedup;\n"
    "                           on a GPU N > 1 is refused (multi-GPU is not built yet)\n"
    "      --mmap               map the weight files instead of reading them into memory\n"
    "                           (starts faster, uses less memory; decode can be slower)\n"
    "      --device D           cpu (default), cuda or cuda:N (a `make cuda` build; also $DSPARK_DEVICE)\n"
    "      --print-ids          print generated token ids, comma-separated, instead of text\n"
    "      --ignore-eos         keep generating past end-of-sequence tokens\n"
    "      --no-warmup          skip the short warm-up forward before the prompt (it keeps\n"
    "                           one-off costs out of the stamp's rates: on a GPU, cuBLAS's\n"
    "                           set-up, the weight copies and the decode graph's capture)\n"
    "      --mode M             decoding (all lossless): auto (the target's DSpark/DFlash\n"
    "                           drafter if one is given or installed and it pays on this\n"
    "                           machine, else lookup),\n"
    "                           dspark, dflash, lookup (n-gram prompt lookup, any model)\n"
    "                           or baseline (default: one token per forward)\n"
    "      --drafter DIR        the DSpark or DFlash drafter checkpoint for the target\n"
    "      --max-draft N|auto   drafts per verify round: N pins it; auto adapts it every\n"
    "                           round from the acceptance seen (and parks drafting while it\n"
    "                           loses); default: calibrated once per machine and model\n"
    "      --confidence-threshold C\n"
    "                           DSpark: end a block at the first draft whose confidence\n"
    "                           is below C (0..1)\n"
    "      --no-lookup-drafts   DSpark/DFlash: never draft from lookup (by default a round\n"
    "                           whose context ends in a copy run of 5+ tokens seen before\n"
    "                           drafts that run's continuation instead of the drafter's block)\n"
    "A stamp line goes to stderr: prompt tokens, prefill tok/s, generated tokens,\n"
    "decode tok/s, the mode with its draft cap, tokens per verify round and how many\n"
    "rounds accepted 0, 1, 2, ... drafts, and an FNV-1a hash of the last logits row.\n";

/* The prompt's ids: --prompt-ids, the raw --prompt (with the tokenizer's
 * special tokens, as HF's tokenizer(text) adds them), or --chat. */
static int *prompt_ids(const opts *o, const tokenizer *tok, int *n) {
    char err[1024];
    int *ids = NULL;
    if (o->prompt_ids) {
        *n = ds_parse_ids(o->prompt_ids, &ids, err, sizeof err);
        if (*n < 0) cli_die("--prompt-ids: %s", err);
        return ids;
    }
    if (!o->prompt) cli_die("give --prompt TEXT or --prompt-ids IDS");
    if (!o->chat) {
        *n = tok_encode(tok, o->prompt, strlen(o->prompt), 1, &ids, err, sizeof err);
    } else {
        chat_template *ct;
        if (chat_template_load(&ct, o->model, err, sizeof err) != 0) cli_die("%s", err);
        cJSON *msgs = cJSON_CreateArray();
        if (o->system) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "system");
            cJSON_AddStringToObject(m, "content", o->system);
            cJSON_AddItemToArray(msgs, m);
        }
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", o->prompt);
        cJSON_AddItemToArray(msgs, m);
        cJSON *vars = cli_template_vars(o);
        char *text;
        size_t len;
        int r = chat_template_render(ct, msgs, NULL, 1, vars, &text, &len, err, sizeof err);
        cJSON_Delete(vars);
        cJSON_Delete(msgs);
        chat_template_free(ct);
        if (r != 0) cli_die("%s", err);
        /* apply_chat_template(tokenize=True) adds no special tokens */
        *n = tok_encode(tok, text, len, 0, &ids, err, sizeof err);
        free(text);
    }
    if (*n < 0) cli_die("%s", err);
    if (*n == 0) cli_die("the prompt encodes to no tokens");
    return ids;
}

int cmd_run(const opts *o) {
    if (o->prompt && o->prompt_ids) cli_die("give either --prompt or --prompt-ids, not both");
    if (o->chat && !o->prompt) cli_die("--chat needs --prompt TEXT");
    tokenizer *tok = cli_tokenizer(o->model, o->prompt != NULL);
    int n_prompt;
    int *prompt = prompt_ids(o, tok, &n_prompt);
    int n_predict = o->n_predict < 0 ? 128 : o->n_predict;
    cli_engine e;
    cli_engine_open(&e, o);
    const model_config *c = model_cfg(e.m);
    sampler *smp = cli_sampler(o, c->vocab_size);
    char err[1024];
    seq *s;
    if (seq_create(&s, e.m, cli_window(&e, o, 1, 256, "run"), 256, e.tp, err, sizeof err) != 0) cli_die("%s", err);
    if (n_prompt + n_predict > seq_capacity(s))
        fprintf(stderr, "dspark: note: prompt + %d tokens exceed the %d-position context window; generation stops "
                        "when it is full\n", n_predict, seq_capacity(s));
    int stop[32];
    int n_stop = cli_stop_ids(e.m, tok, stop);
    int *gen = (o->print_ids || !tok) ? xmalloc(sizeof(int) * (size_t)(n_predict + 1)) : NULL;
    spec_stats st;
    uint64_t hash;
    cli_spec sp;
    cli_spec_open(&sp, o, NULL, &e, s, smp);
    /* the model's one-off first-forward costs out of the stamp's rates (as
       the server's warm-up keeps them off its first request) */
    if (!o->no_warmup && seq_warm_up(s, err, sizeof err) < 0) cli_die("warm-up forward: %s", err);
    if (cli_generate(s, smp, &sp, tok, prompt, n_prompt, n_predict, stop, n_stop, o->ignore_eos, !gen, gen, NULL, &st,
                     &hash, err, sizeof err) != 0)
        cli_die("%s", err);
    if (gen)
        for (int i = 0; i < st.n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
    printf("\n");
    fflush(stdout);
    int n_dec = st.n_gen > 1 ? st.n_gen - 1 : 0; /* forward passes after the prefill */
    char spec[1024];
    cli_spec_describe(&sp, &st, spec, sizeof spec);
    fprintf(stderr, "stamp: prompt %d tok, prefill %.2f tok/s, generated %d tok, decode %.2f tok/s%s, threads %d, "
                    "logits fnv1a %016llx\n",
            n_prompt, n_prompt / st.t_prefill, st.n_gen, n_dec > 0 ? n_dec / st.t_decode : 0.0, spec, tp_size(e.tp),
            (unsigned long long)hash);
    free(gen);
    free(prompt);
    cli_spec_close(&sp);
    seq_free(s);
    sampler_free(smp);
    cli_engine_close(&e);
    tok_free(tok);
    return 0;
}

const char LOGITS_HELP[] =
    "usage: dspark logits --model DIR --prompt-ids 1,2,3 --out FILE [--threads N] [--mmap] [--device cpu|cuda[:N]]\n"
    "                     [--kv-bits 32|16|8] [--tensor-parallel N]\n"
    "Writes float32 little-endian logits for every prompt position, row-major\n"
    "[positions x vocab]. Needs no tokenizer. --tensor-parallel N: as in dspark run.\n";

int cmd_logits(const opts *o) {
    if (!o->prompt_ids || !o->out) cli_die("logits needs --prompt-ids and --out (see dspark logits --help)");
    char err[1024];
    int *ids;
    int n = ds_parse_ids(o->prompt_ids, &ids, err, sizeof err);
    if (n < 0) cli_die("--prompt-ids: %s", err);
    cli_engine e;
    cli_engine_open(&e, o);
    const model_config *c = model_cfg(e.m);
    model_ctx *ctx;
    if (mctx_create(&ctx, e.m, o->ctx ? cli_window(&e, o, 1, 256, "logits") : n, 256, e.tp, err, sizeof err) != 0) cli_die("%s", err);
    float *logits = xmalloc(sizeof(float) * (size_t)n * (size_t)c->vocab_size);
    model_batch b = {.n = n, .tokens = ids, .n_logits = n, .logits = logits};
    if (model_forward(ctx, &b, err, sizeof err) != 0) cli_die("%s", err);
    FILE *f = fopen(o->out, "wb");
    if (!f) cli_die("cannot write %s: %s", o->out, strerror(errno));
    size_t cnt = (size_t)n * (size_t)c->vocab_size;
    if (fwrite(logits, sizeof(float), cnt, f) != cnt || fclose(f) != 0) cli_die("cannot write %s", o->out);
    free(logits);
    free(ids);
    mctx_free(ctx);
    cli_engine_close(&e);
    return 0;
}
