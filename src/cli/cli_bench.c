/* cli_bench: `dspark bench`, the decode speed of each decoding mode on a few
 * fixed prompts, and the check that every mode gives the baseline's greedy
 * output (lossless is the point: a mismatch is a bug and the exit status).
 *
 * Prompts: three built-in user turns (chat, code, math) rendered through
 * the model's chat template with enable_thinking=false; raw text when the
 * model has a tokenizer but no template; three synthetic token-id prompts
 * derived from the vocabulary size when it has no tokenizer.json (so the
 * command runs on any checkpoint); or one --prompt-ids prompt ("custom").
 *
 * One model load and one sequence serve every run; each mode's drafter and
 * cap are set up once (cli_spec_open, calibrating on first use), and every
 * trial starts from an empty cache, so each one prefills from scratch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "text/chat_template.h"
#include "cli/cli.h"
#include "engine/cpu.h"
#include "base/util.h"

const char BENCH_HELP[] =
    "usage: dspark bench --model DIR [--drafter DIR] [--modes M1,M2,...] [options]\n"
    "Measures greedy decode speed of each mode on four built-in prompts (chat, code,\n"
    "math, rendered through the chat template with enable_thinking=false, and a raw\n"
    "Python completion) and checks\n"
    "that every mode generates exactly the baseline's tokens. Prints a table: the\n"
    "median over trials of decode tok/s, prefill tok/s, tokens per verify round, draft\n"
    "acceptance, speedup over baseline and whether the output is identical; then the\n"
    "geometric-mean speedup of each mode. Exit status 1 when any output differs.\n"
    "  -m, --model DIR|FILE     checkpoint directory or .gguf file (default: the bundled\n"
    "                           model, or $DSPARK_MODEL; without tokenizer.json\n"
    "                           or chat template: synthetic token-id prompts from the\n"
    "                           vocabulary size, or raw text when only the template is missing)\n"
    "      --drafter DIR        the DSpark or DFlash drafter checkpoint for the target\n"
    "      --modes LIST         comma-separated: baseline, lookup, dspark, dflash, auto\n"
    "                           (default: baseline,lookup and the drafter's mode when\n"
    "                           --drafter is given, or one is installed and pays on this\n"
    "                           machine); baseline always\n"
    "                           runs first, each resolved mode runs once\n"
    "      --trials N           runs per prompt and mode, each from an empty cache (default 3)\n"
    "  -n N                     tokens to generate per run, stopping at end-of-sequence\n"
    "                           (default 128)\n"
    "      --prompt-ids IDS     benchmark one prompt of comma-separated token ids instead\n"
    "      --json FILE          also write the results as JSON\n"
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
    "      --device D           cpu (default), cuda or cuda:N (a `make cuda` build; also $DSPARK_DEVICE)\n"
    "      --max-draft N|auto   drafts per verify round for the speculative modes\n"
    "                           (default: calibrated; see dspark run --help)\n"
    "      --confidence-threshold C   DSpark: end blocks at confidence below C\n"
    "      --no-lookup-drafts   DSpark/DFlash: no lookup drafts in copy runs (see dspark run --help)\n";

#define BENCH_MAX_MODES 4 /* baseline, lookup, dspark, dflash */
#define BENCH_MAX_PROMPTS 4
#define BENCH_SYNTH_PROMPTS 3

/* raw: a completion of the text itself, never through the chat template */
static const struct {
    const char *name, *text;
    int raw;
} PROMPTS[BENCH_MAX_PROMPTS] = {
    {"chat", "I'm planning a one-week trip to Japan in April with a friend. We like food, easy hikes and quiet "
             "towns more than big cities, and our budget is moderate. Could you suggest an itinerary, how to get "
             "around, and a few things we should book in advance?",
     0},
    {"code", "Write a Python function merge_intervals(intervals) that takes a list of [start, end] pairs of "
             "integers, merges every pair of overlapping or touching intervals, and returns the merged intervals "
             "sorted by start. It must not modify its input. Include type hints, a docstring and a few doctest "
             "examples, and state the time complexity.",
     0},
    {"math", "A train leaves a station at 9:00 travelling at 80 km/h. A second train leaves the same station at "
             "10:30 on a parallel track in the same direction at 120 km/h. At what time does the second train "
             "catch up with the first, and how far from the station are they then? Solve it step by step.",
     0},
    {"completion",
     "import os\n\n\ndef find_files(root, suffix):\n    \"\"\"Return the paths of all files under root whose name "
     "ends with suffix.\"\"\"\n    result = []\n    for dirpath, dirnames, filenames in os.walk(root):\n",
     1},
};

typedef struct {
    char name[32];
    int *ids, n;
} bench_prompt;

typedef struct {
    double tok_s[100], prefill_tok_s[100];
    double tok_s_med, prefill_med, speedup; /* speedup NAN when undefined */
    long rounds, round_tok, drafted, accepted;
    int n_gen, identical;
} bench_cell;

/* Synthetic prompts for a model without a tokenizer: fixed formulas of the
   vocabulary size V (so the same checkpoint always gets the same ids). */
static int synthetic_prompts(bench_prompt *p, int V) {
    static const char *names[BENCH_SYNTH_PROMPTS] = {"ids-mixed", "ids-repeat", "ids-stride"};
    for (int k = 0; k < BENCH_SYNTH_PROMPTS; k++) {
        snprintf(p[k].name, sizeof p[k].name, "%s", names[k]);
        p[k].n = 32;
        p[k].ids = xmalloc(sizeof(int) * 32);
        for (int i = 0; i < 32; i++) {
            long x = k == 0   ? (i * 7919L + 13) % V        /* spread over the vocabulary */
                     : k == 1 ? ((i % 6) * 104729L + 5) % V /* a 6-id phrase repeated */
                              : (i * (V / 37L + 1) + 3) % V; /* an arithmetic stride */
            p[k].ids[i] = (int)x;
        }
    }
    return BENCH_SYNTH_PROMPTS;
}

/* The built-in prompts through the chat template (enable_thinking=false),
   or as raw text when tmpl is NULL. */
static int text_prompts(bench_prompt *p, const opts *o, const tokenizer *tok, const chat_template *tmpl) {
    char err[1024];
    for (int k = 0; k < BENCH_MAX_PROMPTS; k++) {
        snprintf(p[k].name, sizeof p[k].name, "%s", PROMPTS[k].name);
        if (!tmpl || PROMPTS[k].raw) {
            p[k].n = tok_encode(tok, PROMPTS[k].text, strlen(PROMPTS[k].text), 1, &p[k].ids, err, sizeof err);
        } else {
            cJSON *msgs = cJSON_CreateArray(), *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "user");
            cJSON_AddStringToObject(m, "content", PROMPTS[k].text);
            cJSON_AddItemToArray(msgs, m);
            cJSON *vars = cli_template_vars(o);
            cJSON_DeleteItemFromObjectCaseSensitive(vars, "enable_thinking");
            cJSON_AddBoolToObject(vars, "enable_thinking", 0);
            char *text;
            size_t len;
            int r = chat_template_render(tmpl, msgs, NULL, 1, vars, &text, &len, err, sizeof err);
            cJSON_Delete(vars);
            cJSON_Delete(msgs);
            if (r != 0) cli_die("%s", err);
            /* apply_chat_template(tokenize=True) adds no special tokens */
            p[k].n = tok_encode(tok, text, len, 0, &p[k].ids, err, sizeof err);
            free(text);
        }
        if (p[k].n < 0) cli_die("%s", err);
        if (p[k].n == 0) cli_die("the %s prompt encodes to no tokens", p[k].name);
    }
    return BENCH_MAX_PROMPTS;
}

/* The modes to run, in order, baseline first and each once; auto is
   resolved later (it may turn out to be one already listed). */
static int parse_modes(const char *list, const char **names) {
    static const char *known[] = {"baseline", "lookup", "dspark", "dflash", "auto"};
    int n = 0;
    names[n++] = known[0];
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < 5; i++)
            if (strlen(known[i]) == len && !strncmp(p, known[i], len)) found = i;
        if (found < 0)
            cli_die("--modes: unknown mode \"%.*s\" (expected a comma-separated list of baseline, lookup, dspark, "
                    "dflash and auto)", (int)len, p);
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= names[i] == known[found];
        if (!dup) names[n++] = known[found];
        if (!p[len]) break;
        p += len + 1;
    }
    return n;
}

static double median(const double *x, int n) {
    double s[100];
    memcpy(s, x, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* Runs `trials` greedy generations of prompt p, each from an empty cache,
   and compares every trial's ids with ref[*n_ref] (the baseline's output);
   set_ref: the first trial's ids become ref. ids is scratch [n_predict]. */
static void bench_one(bench_cell *c, seq *s, sampler *smp, cli_spec *sp, const bench_prompt *p, int trials,
                      int n_predict, const int *stop, int n_stop, int *ref, int *n_ref, int set_ref, int *ids) {
    char err[1024];
    memset(c, 0, sizeof *c);
    c->identical = 1;
    for (int t = 0; t < trials; t++) {
        seq_reset(s);
        if (sp->adaptive) calib_ctl_init(&sp->ctl, sp->have_costs ? &sp->costs : NULL, sp->block_cap);
        spec_stats st;
        if (cli_generate(s, smp, sp, NULL, p->ids, p->n, n_predict, stop, n_stop, 0, 0, ids, NULL, &st, NULL, err,
                         sizeof err) != 0)
            cli_die("%s prompt, %s: %s", p->name, cli_mode_name(sp->mode), err);
        c->tok_s[t] = st.n_gen > 1 && st.t_decode > 0 ? (st.n_gen - 1) / st.t_decode : 0;
        c->prefill_tok_s[t] = st.t_prefill > 0 ? p->n / st.t_prefill : 0;
        c->rounds += st.n_rounds;
        c->round_tok += st.n_round_tok;
        c->drafted += st.n_drafted;
        c->accepted += st.n_accepted;
        if (t == 0) c->n_gen = st.n_gen;
        if (set_ref && t == 0) {
            memcpy(ref, ids, sizeof(int) * (size_t)st.n_gen);
            *n_ref = st.n_gen;
        } else if (st.n_gen != *n_ref || memcmp(ids, ref, sizeof(int) * (size_t)st.n_gen)) {
            c->identical = 0;
        }
    }
    c->tok_s_med = median(c->tok_s, trials);
    c->prefill_med = median(c->prefill_tok_s, trials);
}

static void cap_text(const cli_spec *sp, char *out, size_t n) {
    if (sp->mode == CLI_MODE_BASELINE) snprintf(out, n, "-");
    else snprintf(out, n, "%d (%s)", sp->max_draft, sp->cap_source);
}

static void write_json(const char *path, const opts *o, const char *device, const char *drafter_dir, int threads,
                       int n_predict, int trials, const char *date, const char *source, const bench_prompt *pr,
                       int n_pr, const cli_spec *sp, int n_modes, bench_cell cells[][BENCH_MAX_MODES], const double *geo, const int *all_ident) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", o->model);
    if (drafter_dir) cJSON_AddStringToObject(root, "drafter", drafter_dir);
    else cJSON_AddNullToObject(root, "drafter");
    cJSON_AddNumberToObject(root, "threads", threads);
    cJSON_AddNumberToObject(root, "n_predict", n_predict);
    cJSON_AddNumberToObject(root, "trials", trials);
    cJSON_AddStringToObject(root, "cpu", cpu_name());
    cJSON_AddStringToObject(root, "device", device); /* where the model ran: cpu, or the GPU */
    cJSON_AddStringToObject(root, "date", date);
    cJSON_AddStringToObject(root, "prompt_source", source);
    cJSON *prompts = cJSON_AddArrayToObject(root, "prompts");
    for (int p = 0; p < n_pr; p++) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "name", pr[p].name);
        cJSON_AddNumberToObject(j, "n_tokens", pr[p].n);
        cJSON_AddItemToArray(prompts, j);
    }
    cJSON *results = cJSON_AddArrayToObject(root, "results");
    for (int p = 0; p < n_pr; p++)
        for (int m = 0; m < n_modes; m++) {
            const bench_cell *c = &cells[p][m];
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "prompt", pr[p].name);
            cJSON_AddStringToObject(j, "mode", cli_mode_name(sp[m].mode));
            if (sp[m].mode == CLI_MODE_BASELINE) {
                cJSON_AddNullToObject(j, "cap");
                cJSON_AddNullToObject(j, "cap_source");
            } else {
                cJSON_AddNumberToObject(j, "cap", sp[m].max_draft);
                cJSON_AddStringToObject(j, "cap_source", sp[m].cap_source);
            }
            cJSON_AddNumberToObject(j, "tok_s_median", c->tok_s_med);
            cJSON_AddItemToObject(j, "tok_s", cJSON_CreateDoubleArray(c->tok_s, trials));
            cJSON_AddNumberToObject(j, "prefill_tok_s_median", c->prefill_med);
            cJSON_AddNumberToObject(j, "tokens_per_round", c->rounds ? (double)c->round_tok / c->rounds : 0);
            if (c->drafted) cJSON_AddNumberToObject(j, "accept_rate", (double)c->accepted / c->drafted);
            else cJSON_AddNullToObject(j, "accept_rate");
            if (isnan(c->speedup)) cJSON_AddNullToObject(j, "speedup");
            else cJSON_AddNumberToObject(j, "speedup", c->speedup);
            cJSON_AddBoolToObject(j, "identical", c->identical);
            cJSON_AddNumberToObject(j, "n_gen", c->n_gen);
            cJSON_AddItemToArray(results, j);
        }
    cJSON *summary = cJSON_AddArrayToObject(root, "summary");
    for (int m = 0; m < n_modes; m++) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "mode", cli_mode_name(sp[m].mode));
        if (isnan(geo[m])) cJSON_AddNullToObject(j, "geomean_speedup");
        else cJSON_AddNumberToObject(j, "geomean_speedup", geo[m]);
        cJSON_AddBoolToObject(j, "all_identical", all_ident[m]);
        cJSON_AddItemToArray(summary, j);
    }
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = fopen(path, "w");
    if (!f || fputs(txt, f) < 0 || fputc('\n', f) < 0 || fclose(f) != 0) cli_die("cannot write %s", path);
    free(txt);
}

int cmd_bench(const opts *o) {
    int trials = o->trials ? o->trials : 3;
    int n_predict = o->n_predict < 0 ? 128 : o->n_predict;
    if (n_predict < 2) cli_die("bench: -n must be at least 2 (decode speed needs a second token)");
    const char *mode_names[BENCH_MAX_MODES + 1];
    int n_names = parse_modes(o->modes ? o->modes : "baseline,lookup,auto", mode_names);

    /* the prompts */
    char err[1024];
    bench_prompt pr[BENCH_MAX_PROMPTS];
    int n_pr;
    const char *source;
    tokenizer *tok = cli_tokenizer(o->model, 0);
    if (o->prompt_ids) {
        snprintf(pr[0].name, sizeof pr[0].name, "custom");
        pr[0].n = ds_parse_ids(o->prompt_ids, &pr[0].ids, err, sizeof err);
        if (pr[0].n < 0) cli_die("--prompt-ids: %s", err);
        if (pr[0].n == 0) cli_die("--prompt-ids: no token ids given");
        n_pr = 1;
        source = "token ids (--prompt-ids)";
    } else if (tok) {
        chat_template *ct = NULL;
        int r = chat_template_load(&ct, o->model, err, sizeof err);
        if (r < 0) cli_die("%s", err);
        n_pr = text_prompts(pr, o, tok, r == 0 ? ct : NULL);
        source = r == 0 ? "built-in, through the chat template (enable_thinking=false) but the raw completion"
                        : "built-in raw text (the model has no chat template)";
        chat_template_free(ct);
    } else {
        n_pr = 0; /* needs the vocabulary size: after the model is loaded */
        source = "synthetic token ids (the model has no tokenizer.json)";
    }

    cli_engine e;
    cli_engine_open(&e, o);
    const model_config *mc = model_cfg(e.m);
    if (!n_pr) n_pr = synthetic_prompts(pr, mc->vocab_size);
    opts go = *o;
    go.temp = 0; /* bench is always greedy */
    sampler *smp = cli_sampler(&go, mc->vocab_size);
    seq *s;
    if (seq_create(&s, e.m, cli_window(&e, o, 1, 256, "bench"), 256, e.tp, err, sizeof err) != 0) cli_die("%s", err);
    for (int p = 0; p < n_pr; p++) {
        if (pr[p].n + 2 > seq_capacity(s))
            cli_die("the %s prompt (%d tokens) leaves no room to generate in the %d-position context window",
                    pr[p].name, pr[p].n, seq_capacity(s));
        if (pr[p].n + n_predict > seq_capacity(s))
            fprintf(stderr, "dspark: note: the %s prompt (%d tokens) + %d tokens exceed the %d-position context "
                            "window; generation stops when it is full\n", pr[p].name, pr[p].n, n_predict,
                    seq_capacity(s));
    }
    int stop[32];
    int n_stop = cli_stop_ids(e.m, tok, stop);

    /* one drafter and cap per mode; auto may resolve to a mode already listed */
    cli_spec sp[BENCH_MAX_MODES + 1]; /* + a slot for an auto that turns out a duplicate */
    int n_modes = 0;
    const char *ddir = NULL;
    for (int i = 0; i < n_names; i++) {
        cli_spec *x = &sp[n_modes];
        if (!strcmp(mode_names[i], "baseline")) {
            memset(x, 0, sizeof *x); /* CLI_MODE_BASELINE: no drafter */
        } else {
            opts mo = *o;
            if (!strcmp(mode_names[i], "lookup")) {
                mo.drafter = NULL;
                mo.has_conf = 0;
            }
            cli_spec_open(x, &mo, mode_names[i], &e, s, smp);
        }
        int dup = 0;
        for (int j = 0; j < n_modes; j++) dup |= sp[j].mode == x->mode;
        if (dup) {
            cli_spec_close(x);
            continue;
        }
        if (x->dm && !ddir) ddir = x->drafter_dir;
        n_modes++;
    }

    char date[64];
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", &tmv);
    int threads = tp_size(e.tp);

    /* the runs: per prompt, baseline first (the reference), then each mode */
    bench_cell (*cells)[BENCH_MAX_MODES] = xcalloc((size_t)n_pr, sizeof *cells);
    int *ids = xmalloc(sizeof(int) * (size_t)n_predict), *ref = xmalloc(sizeof(int) * (size_t)n_predict);
    int mismatch = 0;
    for (int p = 0; p < n_pr; p++) {
        int n_ref = 0;
        for (int m = 0; m < n_modes; m++) {
            bench_cell *c = &cells[p][m];
            bench_one(c, s, smp, &sp[m], &pr[p], trials, n_predict, stop, n_stop, ref, &n_ref, m == 0, ids);
            double base = cells[p][0].tok_s_med;
            c->speedup = base > 0 && c->tok_s_med > 0 ? c->tok_s_med / base : NAN;
            fprintf(stderr, "bench: %s / %s: %.2f tok/s%s\n", pr[p].name, cli_mode_name(sp[m].mode), c->tok_s_med,
                    c->identical ? "" : " (OUTPUT DIFFERS)");
        }
    }
    seq_reset(s);

    /* the summary: geometric mean speedup over the prompts where it is defined */
    double geo[BENCH_MAX_MODES];
    int all_ident[BENCH_MAX_MODES];
    for (int m = 0; m < n_modes; m++) {
        double lsum = 0;
        int k = 0;
        all_ident[m] = 1;
        for (int p = 0; p < n_pr; p++) {
            if (!isnan(cells[p][m].speedup)) {
                lsum += log(cells[p][m].speedup);
                k++;
            }
            all_ident[m] &= cells[p][m].identical;
        }
        geo[m] = k ? exp(lsum / k) : NAN;
    }

    /* the table */
    int pw = 6;
    for (int p = 0; p < n_pr; p++)
        if ((int)strlen(pr[p].name) > pw) pw = (int)strlen(pr[p].name);
    printf("dspark bench: model %s, drafter %s%s, threads %d, n %d, trials %d, cpu %s, date %s\n", o->model,
           ddir ? ddir : "none", !ddir ? "" : o->no_lookup_drafts ? " (lookup drafts off)" : " (with lookup drafts)",
           threads, n_predict, trials, cpu_name(), date);
    printf("prompts: %s:", source);
    for (int p = 0; p < n_pr; p++) printf(" %s %d tok%s", pr[p].name, pr[p].n, p + 1 < n_pr ? "," : "\n");
    printf("greedy; tok/s are medians over trials; speedup: decode tok/s over the baseline's; tok/round and\n"
           "accept (accepted / drafted) over all trials; identical: every trial's ids equal the baseline's\n\n");
    char caps[BENCH_MAX_MODES][64];
    int cw = 15; /* the cap column: as wide as its widest text */
    for (int m = 0; m < n_modes; m++) {
        cap_text(&sp[m], caps[m], sizeof caps[m]);
        if ((int)strlen(caps[m]) > cw) cw = (int)strlen(caps[m]);
    }
    static const char dashes[] = "----------------------------------------------------------------";
    printf("| %-*s | %-8s | %-*s | %12s | %13s | %9s | %6s | %7s | %-9s |\n", pw, "prompt", "mode", cw, "cap",
           "decode tok/s", "prefill tok/s", "tok/round", "accept", "speedup", "identical");
    printf("|%.*s|----------|%.*s|-------------:|--------------:|----------:|-------:|--------:|-----------|\n",
           pw + 2, dashes, cw + 2, dashes);
    for (int p = 0; p < n_pr; p++)
        for (int m = 0; m < n_modes; m++) {
            const bench_cell *c = &cells[p][m];
            char acc[16], spd[16];
            if (c->drafted) snprintf(acc, sizeof acc, "%.2f", (double)c->accepted / c->drafted);
            else snprintf(acc, sizeof acc, "-");
            if (isnan(c->speedup)) snprintf(spd, sizeof spd, "-");
            else snprintf(spd, sizeof spd, "%.2fx", c->speedup);
            printf("| %-*s | %-8s | %-*s | %12.2f | %13.2f | %9.2f | %6s | %7s | %-9s |\n", pw, pr[p].name,
                   cli_mode_name(sp[m].mode), cw, caps[m], c->tok_s_med, c->prefill_med,
                   c->rounds ? (double)c->round_tok / c->rounds : 0.0, acc, spd, c->identical ? "yes" : "NO");
        }
    printf("\n| %-8s | %-*s | %-15s | %-13s |\n", "mode", cw, "cap", "geomean speedup", "all identical");
    printf("|----------|%.*s|----------------:|---------------|\n", cw + 2, dashes);
    for (int m = 0; m < n_modes; m++) {
        char g[16];
        if (isnan(geo[m])) snprintf(g, sizeof g, "-");
        else snprintf(g, sizeof g, "%.2fx", geo[m]);
        printf("| %-8s | %-*s | %15s | %-13s |\n", cli_mode_name(sp[m].mode), cw, caps[m], g,
               all_ident[m] ? "yes" : "NO");
    }
    for (int p = 0; p < n_pr; p++)
        for (int m = 0; m < n_modes; m++)
            if (!cells[p][m].identical) {
                printf("OUTPUT MISMATCH: mode %s prompt %s\n", cli_mode_name(sp[m].mode), pr[p].name);
                mismatch = 1;
            }
    fflush(stdout);

    if (o->json)
        write_json(o->json, o, model_device(e.m), ddir, threads, n_predict, trials, date, source, pr, n_pr, sp, n_modes,
                   cells, geo, all_ident);

    free(ids);
    free(ref);
    free(cells);
    for (int m = 0; m < n_modes; m++) cli_spec_close(&sp[m]);
    for (int p = 0; p < n_pr; p++) free(pr[p].ids);
    seq_free(s);
    sampler_free(smp);
    cli_engine_close(&e);
    tok_free(tok);
    return mismatch;
}
