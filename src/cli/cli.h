/* cli: what the dspark commands share: flag parsing into one opts struct,
 * fatal-error helpers (only command code prints and exits), loading a
 * model with its thread pool, the stop-token set, and the streaming
 * generation loop used by `run` and `chat`. */
#ifndef DS_CLI_H
#define DS_CLI_H

#include <signal.h>
#include <stdio.h>
#include <stdint.h>

#include "spec/calib.h"
#include "spec/drafter.h"
#include "spec/lookup.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "spec/seq.h"
#include "spec/spec.h"
#include "engine/threadpool.h"
#include "text/tokenizer.h"

#define CLI_MAX_VARS 32
#define CLI_MAX_INCLUDE 32
#define DSPARK_VERSION "0.1.0"

struct cJSON;
/* The doctor report (cli_doctor.c; docs/doctor-schema.md), with the
 * registered models when with_models is set. The caller frees it. */
struct cJSON *doctor_report(int with_models);
/* The registered build with the most weights whose one rank of a split
 * over `ranks` GPUs (engine/tpar.h) fits `budget` bytes of one GPU at its
 * full window (memfit's estimate): 1 with its name, build kind and whole
 * weights' bytes, or 0 when none fits (or none splits over ranks). */
int doctor_tp_largest(int ranks, double budget, const char **name, const char **kind, double *weights);

typedef struct {
    const char *model_spec; /* --model (or DSPARK_MODEL) as given, before modelref resolved it into model */
    int trust_remote_code;  /* --trust-remote-code */
    int json_out;           /* doctor, models: --json (print JSON) */
    int list_models;        /* doctor: --models */
    const char *model, *prompt, *prompt_ids, *out, *file, *text, *messages, *tools, *system;
    const char *mode;    /* --mode (NULL = baseline) */
    const char *device;  /* --device cpu|cuda[:N] (NULL: $DSPARK_DEVICE, else cpu) */
    const char *drafter; /* --drafter DIR */
    int max_draft;       /* --max-draft N (0 = not pinned) */
    int max_draft_auto;  /* --max-draft auto */
    int has_conf;        /* --confidence-threshold given */
    float conf_threshold;
    int n_predict, threads, ctx, top_k, print_ids, jsonl, add_special, ignore_eos, help, skip_special;
    int chat, no_gen_prompt, no_thinking, use_mmap;
    int no_lookup_drafts; /* --no-lookup-drafts: DSpark / DFlash rounds never use lookup's copy runs */
    int no_warmup;        /* --no-warmup: serve takes its first request without a warm-up forward */
    const char *modes, *json; /* bench: --modes LIST, --json FILE */
    int trials;               /* bench: --trials N (0 = default) */
    const char *qtype;        /* quantize: --type */
    int group_size;           /* quantize: --group-size (0 = default) */
    /* serve / claude */
    const char *host, *url, *api_key, *reasoning_effort;
    int port, print_env;
    int cache_slots; /* serve: --cache-slots N (0 = default) */
    int max_batch;   /* serve: --max-batch N, jobs generated together (0 = default) */
    int cache_ram;   /* serve: --cache-ram MiB, the prefix block cache (< 0: not given, the default; 0: off) */
    int kv_ram;      /* serve: --kv-ram MiB, the KV pages of every slot together (0: not given, the default) */
    double drain_timeout; /* serve: --drain-timeout SECONDS (< 0: not given, the default) */
    int kv_bits;     /* --kv-bits 32|16|8 (0 = 32): the KV cache's storage */
    int tensor_parallel; /* --tensor-parallel N (0 = 1): ranks the model splits over (engine/tpar.h) */
    int n_rest;   /* claude: the arguments after "--" */
    char **rest;
    float temp, top_p, min_p;
    unsigned long long seed;
    /* pull, and --pull on run / chat / serve */
    const char *revision; /* --revision R */
    int n_include;        /* --include GLOB, repeated */
    const char *include[CLI_MAX_INCLUDE];
    int no_drafters;      /* --no-drafters */
    int pull;             /* --pull: fetch --model / --drafter ids missing from the hub cache */
    int n_vars;
    const char *vars[CLI_MAX_VARS]; /* "key=value" */
} opts;

void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* allowed: the flags the command accepts, space-separated and padded. */
void cli_parse(opts *o, int argc, char **argv, const char *cmd, const char *allowed);

/* NULL when DIR has no tokenizer.json and it is not required. */
tokenizer *cli_tokenizer(const char *dir, int required);

typedef struct {
    model *m;
    tpool *tp;
} cli_engine;
void cli_engine_open(cli_engine *e, const opts *o);
void cli_engine_close(cli_engine *e);
sampler *cli_sampler(const opts *o, int vocab);
/* The context window for `slots` contexts of max_batch rows of e's model
 * (engine/memfit.h): --context-window when it fits, else a refusal (dies)
 * naming the window and --kv-bits that fit; without it the model's window
 * when it fits, else the largest that does, said on stderr. `what` names
 * the command in the messages ("run", "serve"). */
int cli_window(const cli_engine *e, const opts *o, int slots, int max_batch, const char *what);

/* End-of-sequence ids: generation_config/config eos ids plus the
 * tokenizer's eos token. Returns the count written to ids (cap 32). */
int cli_stop_ids(const model *m, const tokenizer *tok, int *ids);

/* The keyword variables for a chat template: --var k=v (v parsed as JSON
 * when it is valid JSON, else taken as a string) and --no-thinking
 * (enable_thinking=false). Returns a cJSON object (caller frees). */
struct cJSON *cli_template_vars(const opts *o);


/* Speculative decoding as the command line asked for it (cli_spec.c). */
enum { CLI_MODE_BASELINE, CLI_MODE_LOOKUP, CLI_MODE_DSPARK, CLI_MODE_DFLASH, CLI_MODE_AUTO };
const char *cli_mode_name(int mode);

typedef struct {
    int mode;                /* resolved: never CLI_MODE_AUTO after cli_spec_open */
    char drafter_dir[4096];  /* neural modes */
    lookup *lk;
    dmodel *dm;
    dstate *ds;
    drafter d;
    int block_cap;           /* most drafts one round can carry */
    int max_draft;           /* the cap (the ceiling when adaptive) */
    const char *cap_source;  /* "pinned", "calibrated", "fallback" or "auto" */
    calib_costs costs;
    int have_costs;
    calib_ctl ctl;
    int adaptive;
    lookup_hybrid *hy; /* DSpark / DFlash: lookup's copy runs as drafts (d wraps the drafter) */
    int hy_cap;        /* the cap of a round lookup drafts: the block, or the pinned cap */
    int borrowed_dm; /* a clone: dm belongs to the cli_spec it was cloned from */
} cli_spec;

/* Resolves mode (NULL: o->mode, default baseline) with o's --drafter,
 * --max-draft and --confidence-threshold for the target in e whose
 * sequence is s (calibration measures on it and leaves it empty); dies
 * with a clear message on a bad combination or a missing drafter. */
void cli_spec_open(cli_spec *sp, const opts *o, const char *mode, const cli_engine *e, seq *s, sampler *smp);
void cli_spec_close(cli_spec *sp);
/* dst: the same mode, drafter and cap as src (already open) for another
 * sequence s: its own drafter state (or lookup index) and cap controller,
 * sharing src's drafter weights (src must outlive dst). */
void cli_spec_clone(cli_spec *dst, const cli_spec *src, const opts *o, const cli_engine *e, seq *s, sampler *smp);
drafter *cli_spec_drafter(cli_spec *sp); /* NULL for baseline (sp may be NULL) */
/* Positions [0, n) of src's drafter state into dst's (two clones of one
 * spec; seq_copy_prefix's companion): a feature drafter's context cache
 * (dstate_copy_prefix); nothing for lookup and baseline, which rebuild
 * from the ids. Returns the positions dst's drafter then holds of the
 * prefix (n, or fewer when src's state holds fewer), or -1 with err
 * filled. */
int cli_spec_copy_prefix(cli_spec *dst, const cli_spec *src, int n, char *err, size_t errlen);
/* The feature drafter's state (the prefix block cache saves and loads its
 * rows), or NULL for lookup and baseline, which rebuild from the ids. */
dstate *cli_spec_dstate(const cli_spec *sp);
/* The positions of context the drafter state holds (a speculative run
 * reuses a cached prefix only as far as these reach), or -1 where there is
 * no such state (baseline, lookup: nothing limits the reuse). */
int cli_spec_ctx_len(const cli_spec *sp);
/* Sets so's cap (and the adaptive controller) from sp. */
void cli_spec_apply(cli_spec *sp, spec_opts *so);
/* ", mode M, cap C (source), tokens/round T, accepted drafts per round a:n ..." */
void cli_spec_describe(const cli_spec *sp, const spec_stats *st, char *out, size_t n);

/* Prefills prompt into s (reusing the cached prefix), then generates up to
 * max_new tokens with sp's drafter (sp NULL or baseline: one token a round)
 * until a stop id, the window is full, or *cancel becomes non-zero; streams
 * the text to stdout when stream is set and collects the ids (stop id
 * included) into out_ids[max_new] when given. Generated ids are appended
 * to s; st gets the counts and times, and logits_hash (may be NULL) an
 * FNV-1a hash of the last logits row. Greedy output is the same in every
 * mode; sampled output has the same distribution. Returns 0, or -1 with err
 * filled. */
int cli_generate(seq *s, sampler *smp, cli_spec *sp, const tokenizer *tok, const int *prompt, int n_prompt,
                 int max_new, const int *stop, int n_stop, int ignore_eos, int stream, int *out_ids,
                 volatile sig_atomic_t *cancel, spec_stats *st, uint64_t *logits_hash, char *err, size_t errlen);

int cmd_run(const opts *o);
int cmd_logits(const opts *o);
int cmd_tokenize(const opts *o);
int cmd_detokenize(const opts *o);
int cmd_template(const opts *o);
int cmd_chat(const opts *o);
int cmd_bench(const opts *o);
int cmd_serve(const opts *o);  /* serve.c */
int cmd_claude(const opts *o); /* cli_claude.c */
int cmd_quantize(const opts *o); /* cli_quantize.c */
int cmd_pull(const opts *o);     /* cli_pull.c */
/* --pull: replaces o->model and o->drafter, when they are hub ids not
 * found locally, by the folders pulled for them (the model's drafters
 * along unless --no-drafters); dies with the pull's error. */
void cli_pull_args(opts *o);
int cmd_doctor(const opts *o);   /* cli_doctor.c */
int cmd_models(const opts *o);   /* cli_doctor.c */
/* `dspark quantize` without the command line: the checkpoint in dir as
 * type (Q8_0, Q4_0, Q4_K, Q6_K, Q4_K_M: a GGUF file at out; mlx4, mlx8:
 * an MLX folder at out, group 0 = 64), threads 0 = all CPUs, progress to
 * log (may be NULL). 0, or -1 with err filled. */
int quantize_model(const char *dir, const char *out, const char *type, int group, int threads, FILE *log, char *err,
                   size_t errlen);
extern const char RUN_HELP[], LOGITS_HELP[], TOKENIZE_HELP[], DETOKENIZE_HELP[], TEMPLATE_HELP[], CHAT_HELP[],
    BENCH_HELP[], SERVE_HELP[], CLAUDE_HELP[], QUANTIZE_HELP[], PULL_HELP[], DOCTOR_HELP[], MODELS_HELP[];

/* Resolves o->model (and o->drafter) through spec/modelref.h in place
 * (o->model_spec keeps what was given) and refuses a checkpoint that ships
 * its own code unless trusted; dies with the reason. */
void cli_resolve_models(opts *o);

#endif
