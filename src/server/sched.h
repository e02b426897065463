/* sched: the server's generation thread (its scheduler). One thread owns the
 * model, its cache slots (sequences whose KV caches keep conversations, so
 * consecutive turns reuse their common prefix, each with its own drafter
 * state and sampler) and runs up to max_batch jobs at once; HTTP threads hand
 * it jobs (token ids and sampling settings, never raw JSON) through a FIFO
 * queue and read the generated text back from the job as it grows.
 *
 * Continuous batching: each running job holds a slot of its own and a
 * stepwise speculative run (spec/spec.h spec_run). The thread loops: admit
 * queued jobs while fewer than max_batch run (arrival order), then one
 * spec_step over every running job, in which each does its next unit of
 * work (a prefill chunk, a draft + verify round, or a plain step) and the
 * target's forwards of all of them go in one model_forward_multi; jobs whose
 * run is done end and free their slot. So a new prompt's prefill goes in
 * chunks between the others' rounds, and a job's output is what it gives
 * alone (a row's bits never depend on the batch it is in; each job has its
 * own sampler, seeded per request).
 *
 * A job is shared by the HTTP thread that made it and the scheduler: both
 * hold a reference (sched_job_release drops one). The scheduler decodes the
 * ids to text (special tokens are not shown), applies the request's stop
 * strings (the text stops before the earliest match and generation ends at
 * the token that completed it) and appends the text to job->text under
 * job->mu, broadcasting job->cv; job->done is set last. A client that goes
 * away calls sched_job_cancel: generation stops at the next token. A job's
 * error (its run's) ends that job alone. At shutdown, past the drain,
 * sched_cut ends the queued jobs and halts every running one, all with
 * FINISH_SHUTDOWN.
 *
 * Rounds, prefill progress and steps are published to an event ring
 * (sched_events_*) that /events subscribers read without ever blocking
 * generation. */
#ifndef DS_SCHED_H
#define DS_SCHED_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "cli/cli.h"
#include "engine/sampler.h"
#include "spec/pcache.h"
#include "spec/spec.h"
#include "spec/spec_run.h"
#include "base/strbuf.h"
#include "server/logitproc.h"
#include "text/tokenizer.h"

/* How a job ended. FINISH_SHUTDOWN: the server cut it at shutdown (the drain
 * timeout ran out, or a second signal) before it finished, queued or
 * running; its error says so. Only EOS, STOP and LENGTH are whole answers:
 * every other end is reported to the client as an error, never a normal
 * finish. */
enum { FINISH_NONE, FINISH_EOS, FINISH_STOP, FINISH_LENGTH, FINISH_CANCEL, FINISH_ERROR, FINISH_SHUTDOWN };

typedef struct sched sched;

#define SCHED_MAX_TOP_LOGPROBS 20
/* One generated token's log-probability under the target (raw logits, any
 * sampling settings aside) and its most likely alternatives. */
typedef struct {
    int id;
    float lp;
    int n_top;
    int top_id[SCHED_MAX_TOP_LOGPROBS];
    float top_lp[SCHED_MAX_TOP_LOGPROBS];
} sched_logprob;

typedef struct sched_job {
    /* set by the creator before sched_submit; read-only afterwards */
    int *ids;
    int n_ids;
    int max_new;
    sampler_params sp;
    char **stops;
    int n_stops;
    uint64_t req_id;
    /* Reasoning budget (0 or less: none): after this many tokens inside a
       reasoning block (think_open ... think_close; from the start when the
       prompt opened it) the scheduler closes the block itself by feeding
       budget_text (e.g. "\n\n</think>\n\n") and generation goes on with
       the answer. The strings must outlive the job. */
    int think_budget, think_prefilled;
    const char *think_open, *think_close;
    char *budget_text; /* owned */
    int logprobs;      /* -1: none; else alternatives per token (0..SCHED_MAX_TOP_LOGPROBS) */
    int plain;         /* decode without the drafter (x_dspark.speculative false): the mode reads
                          "baseline" in this job's events and telemetry */
    int ignore_eos;    /* generation goes on past the end-of-sequence ids (not shown) */
    /* penalties, logit bias and grammar (server/logitproc.h); proc.bias_id, proc.bias and
       proc.g are owned by the job. With any of them every row comes back to the host. */
    lproc_cfg proc;

    /* shared: guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    strbuf text;      /* generated text not yet taken by the reader */
    sched_logprob *lp; /* log-probabilities of the shown tokens not yet taken (logprobs >= 0) */
    int n_lp, cap_lp;
    int done, finish; /* FINISH_* once done */
    char stop_hit[256]; /* the stop string that ended it */
    char error[512];
    spec_stats st;     /* final counts and times */
    int cap;           /* the draft cap of the last round */
    int budget_forced; /* the reasoning budget closed the block */
    double t_queued, t_start, t_first, t_end; /* ds_now() stamps */

    volatile sig_atomic_t halt; /* stop generating (cancel, cut, stop string or reasoning budget) */
    int cancelled;
    int cut;           /* sched_cut reached it before it was done */
    int kv_waited;     /* its admission waited for KV pages (scheduler thread) */
    int refs;
} sched_job;

typedef struct {
    const char *model_id; /* basename of the model directory */
    const char *mode;     /* resolved mode name */
    const char *drafter;  /* drafter directory or "" */
    int context_window;
    int cap;              /* the configured draft cap (the ceiling when adaptive) */
    int adaptive;
    int slots;            /* cache slots */
    int max_batch;        /* jobs generated at once (1..slots; sched_start bounds it) */
    size_t prefix_cache;  /* bytes of the prefix block cache (spec/pcache.h; 0: none) */
    int64_t kv_capacity;  /* KV pages the pool may hold (sched.c pool_admit; 0: no bound, the
                             backend's caches are not paged) */
} sched_info;

/* A cache slot: one sequence (KV cache) with its decoding state: drafter
 * state and cap controller (sp) and the sampler the drafter draws with
 * (smp, re-seeded for each job). The engine keeps several conversations
 * this way: a job runs in the free slot (none held by a running job) whose
 * cached ids share the longest prefix with its prompt when that is at
 * least half the prompt, else in the least recently used free slot, so a
 * side request (a title, another chat) does not evict the main
 * conversation. The slots are distinct sequences of one model. */
typedef struct {
    seq *s;
    cli_spec *sp;
    sampler *smp;
} sched_slot;
#define SCHED_MAX_SLOTS 32

/* Takes ownership of nothing: the slots' sequences, specs and samplers, tok
 * and info's strings stay the caller's and must outlive the scheduler.
 * info->max_batch is bounded to 1..n_slots (sched_get_info tells the value
 * in use). Starts the thread. */
sched *sched_start(const sched_slot *slots, int n_slots, const tokenizer *tok, const int *stop_ids, int n_stop,
                   const sched_info *info);
/* Shutdown past the drain: refuses new jobs (sched_submit returns -1),
 * finishes every queued job with FINISH_SHUTDOWN and error `why`, and halts
 * the running ones at their next token; each of them too ends
 * FINISH_SHUTDOWN (error `why`) unless it had already ended by eos, a stop
 * string or its token budget. Returns at once: the thread exits after the
 * running jobs. */
void sched_cut(sched *en, const char *why);
/* sched_cut (when not done yet), then joins the thread and ends /events
 * readers; sched_free then releases it. */
void sched_stop(sched *en);
void sched_free(sched *en);
const sched_info *sched_get_info(const sched *en);

/* A new job with one reference (the caller's); the caller fills the input
 * fields (ids, stops are taken over and freed with the job). */
sched_job *sched_job_new(void);
/* Queues the job; the scheduler takes its own reference. Returns the number of
 * jobs ahead of it (queued, and running when the batch is full), or -1 when the scheduler is stopping (the job is then
 * finished with FINISH_ERROR). */
int sched_submit(sched *en, sched_job *j);
void sched_job_cancel(sched_job *j);
void sched_job_release(sched_job *j);

/* The memory guard (engine/memfit.h memfit_pressure): while the machine
 * is under memory pressure, empties idle cache slots, least recently used
 * first (seq_release: their KV pages go back to the system), never a slot
 * with busy[i] set (serving or about to serve a request; busy NULL: none
 * is), and stops once the pressure is gone. used[n] are the slots'
 * last-use times. Each shed slot is logged to stderr and its line left in
 * log. Returns the slots shed. The scheduler runs it as it admits each job
 * and every SCHED_GUARD_S seconds while idle. */
#define SCHED_GUARD_S 2.0
int sched_guard(const sched_slot *slots, int n, const int *busy, const double *used, char *log, size_t logn);

/* Steps by the rows their forwards carried (the runs' prefill chunks and
 * verify rows, as their progress hooks report them): bucket i counts steps
 * of at most SCHED_ROWS_BOUNDS[i] rows (and more than the bound before),
 * the last bucket the steps past every bound. */
#define SCHED_ROWS_BUCKETS 13
extern const int SCHED_ROWS_BOUNDS[SCHED_ROWS_BUCKETS];

/* Counters for /metrics and /health. requests counts every finished job,
 * the ones cut while queued included. */
typedef struct {
    uint64_t requests, requests_cancelled, requests_failed, requests_cut;
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
    uint64_t rounds, round_tokens, drafted, accepted;
    double prefill_seconds, decode_seconds;
    uint64_t prefill_tokens; /* computed (not reused) prompt rows */
    uint64_t prompts;        /* jobs whose prompt was processed (the prefix cache's lookups) */
    uint64_t slot_hits;      /* of those, the ones that reused at least one cached position */
    int queue_depth, busy, last_cap; /* queue_depth: jobs waiting; busy: jobs running (0..max_batch) */
    uint64_t steps;          /* spec_step calls */
    uint64_t step_rows;      /* rows the steps carried */
    uint64_t step_jobs;      /* jobs the steps carried (the batch widths added up) */
    int last_step_rows, last_step_jobs;
    double step_seconds;     /* wall time inside the steps (the engine busy) */
    uint64_t rows_hist[SCHED_ROWS_BUCKETS + 1];
    uint64_t slots_shed;    /* cache slots the memory guard emptied */
    uint64_t prefix_copies;  /* prompts given another slot's cached prefix (share_prefix) */
    uint64_t prefix_copied_tokens; /* the positions those copies brought */
    char last_shed[192];    /* the guard's last log line ("" before any) */
    pcache_stats blocks;    /* the prefix block cache (zeros when there is none) */
    uint64_t blocks_shed;   /* bytes of it the memory guard gave back */
    double blocks_store_seconds; /* time the storer thread spent storing blocks */
    int blocks_storing;          /* slots whose blocks are queued or being stored */
    int kv_paged;                /* the backend's caches are in pages: kv_pages holds them */
    model_kv_pages kv_pages;
    int64_t kv_capacity;         /* the pool's bound in pages (0: none) */
    int64_t kv_reserved;         /* pages the running jobs may still take, at the last admission */
    uint64_t kv_deferred;        /* admissions put off until the pool had room */
    uint64_t kv_pool_shed;       /* idle slots emptied to make room in the pool */
} sched_metrics;
void sched_get_metrics(sched *en, sched_metrics *m);

/* Event ring: each event is a JSON object text. *seq counts the events a
 * reader has taken (*pos); start it at SCHED_EVENTS_NEW to begin with the last
 * `replay` events. sched_events_next appends the next event to out
 * (returns 1), or waits up to timeout seconds for one (returns 0); a reader
 * that fell more than the ring behind skips to the oldest kept event.
 * Returns -1 when the scheduler is stopping. */
#define SCHED_EVENTS_NEW UINT64_MAX
int sched_events_next(sched *en, uint64_t *pos, int replay, double timeout, strbuf *out);

#endif
