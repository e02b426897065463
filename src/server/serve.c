/* serve: `dspark serve`, an HTTP server speaking the OpenAI (chat
 * completions, completions, responses, models) and Anthropic (messages,
 * count_tokens) APIs on one port, plus /health, /metrics (Prometheus),
 * /events (rounds and prefill progress as server-sent events), /tokenize
 * and /detokenize. HTTP threads parse, render the chat template, tokenize
 * and enqueue; the scheduler thread (sched.c) owns the model. The file layout
 * is in serve_internal.h. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "spec/registry.h"
#include "server/serve_internal.h"
#include "server/web.h"
#include "engine/memfit.h"
#include "base/util.h"

const char SERVE_HELP[] =
    "usage: dspark serve [--model DIR] [options]\n"
    "HTTP server with the OpenAI and Anthropic APIs on one port:\n"
    "  POST /v1/chat/completions /v1/completions /v1/responses   (OpenAI)\n"
    "  POST /v1/messages /v1/messages/count_tokens               (Anthropic; Claude Code)\n"
    "  GET  /v1/models /health /metrics /events /doctor   POST /tokenize /detokenize\n"
    "  GET  /                    the web interface: chat, plain vs speculative race, engine view\n"
    "  -m, --model DIR|FILE|ID  checkpoint, .gguf or Hugging Face id with a tokenizer (default: the bundled model)\n"
    "      --pull               an id not found on this machine is pulled into the Hugging Face\n"
    "                           cache first (see dspark pull)\n"
    "      --host ADDR          address to listen on (default 127.0.0.1)\n"
    "      --port N             port (default 8080)\n"
    "      --api-key KEY        require Authorization: Bearer KEY or x-api-key: KEY\n"
    "                           (every route but /health)\n"
    "  -c, --context-window N   prompt + answer tokens per request (default: the model's, or the most\n"
    "                           that fits in memory for every cache slot; a window that cannot fit\n"
    "                           is refused, naming the one that does)\n"
    "      --kv-bits 32|16|8    KV cache storage: 32 f32 (exact, default), 16 f16, 8 int8 with\n"
    "                           per-position scales (about 2x / 4x the window in the same memory)\n"
    "      --tensor-parallel N  split the model's layers over N ranks (heads, MLP columns and\n"
    "                           vocabulary; docs/ARCHITECTURE.md). On the CPU the N ranks are\n"
    "                           emulated in one process: a test of the split, not a speedup;\n"
    "                           on a GPU N > 1 is refused (multi-GPU is not built yet)\n"
    "      --cache-slots N      conversations kept in KV caches, each a cache of the context\n"
    "                           window (on the CPU filled from one pool of pages, --kv-ram; at most\n"
    "                           32; default: --max-batch, at least 2);\n"
    "                           a request runs in the free slot sharing the longest prefix with it\n"
    "                           (at least half of the prompt), else in the least recently used one\n"
    "      --max-batch N        requests generated at once, each in a cache slot of its own, their\n"
    "                           rows in one forward per step (at most --cache-slots; default 4\n"
    "                           when 4 slots of the window fit in memory, else fewer, at least 2)\n"
    "      --kv-ram MiB         on the CPU, where the slots, the running requests and the prefix\n"
    "                           cache draw KV pages from one pool: the pages they may hold\n"
    "                           together (default: the memory left past the weights and every\n"
    "                           slot's scratch; at least one window's pages). A request starts\n"
    "                           once the pages its whole answer may take fit beside the running\n"
    "                           ones' (idle slots and cached blocks give theirs back first)\n"
    "      --cache-ram MiB      the prefix cache: host memory for KV blocks of 128 tokens that\n"
    "                           finished requests leave and new prompts take back by their prefix,\n"
    "                           across conversations, least recently used out first (default on\n"
    "                           the CPU: a quarter of the available memory, at most 8192; on a GPU\n"
    "                           off, as the blocks cross PCIe on the scheduler thread; 0: off)\n"
    "      --mode M             auto, dspark, dflash, lookup or baseline (default auto:\n"
    "                           the model's drafter when one is installed and pays on\n"
    "                           this machine, else lookup)\n"
    "      --drafter DIR --max-draft N|auto --confidence-threshold C --no-lookup-drafts\n"
    "                           as in dspark run\n"
    "      --no-thinking        enable_thinking=false unless a request says otherwise\n"
    "      --reasoning-effort low|medium|high   default reasoning_effort for templates\n"
    "  -n N                     default max tokens of an answer (default: up to the window)\n"
    "      --temp T --top-k K --top-p P --min-p P --seed S   default sampling (greedy)\n"
    "  -t, --threads N  --mmap  --device cpu|cuda[:N] (default cpu; also $DSPARK_DEVICE)\n"
    "      --no-warmup          skip the warm-up forward in each cache slot at start (what a\n"
    "                           model's first forward pays once then falls on the first request)\n"
    "      --drain-timeout S    on SIGTERM / SIGINT: stop taking generation requests (503) and give\n"
    "                           those in flight and queued S seconds to finish (default 30; 0: cut\n"
    "                           at once), then cut the rest with an error in their dialect and exit 0;\n"
    "                           a second signal cuts at once\n"
    "Environment: DSPARK_STREAM_KEEPALIVE_S (keep-alive interval of streams, default 15),\n"
    "DSPARK_MAX_BODY_BYTES (largest request body, default 32 MiB).\n";

/* ---- start ---- */

/* seq_warm_up in each cache slot. Returns the seconds it took, or -1 with
   err set. */
static double warm_up(seq **seqs, int n, char *err, size_t errlen) {
    double t = 0;
    for (int i = 0; i < n; i++) {
        double ti = seq_warm_up(seqs[i], err, errlen);
        if (ti < 0) return -1;
        t += ti;
    }
    return t;
}

/* Cache slots and the batch. Every running request holds a slot of its own,
   so --max-batch is at most the slots. --cache-slots alone: a batch of up
   to SERVE_DEFAULT_BATCH of them; --max-batch alone: that many slots (at
   least two). Neither: SERVE_DEFAULT_BATCH slots and batch when the window
   (--context-window, else the model's) fits in memory beside that many,
   else fewer, down to two (cli_window then cuts the window if even two do
   not fit). Returns the slots; *max_batch the batch. */
#define SERVE_DEFAULT_BATCH 4
/* --cache-ram in bytes; not given: a quarter of the memory available once
   the model is loaded, at most SERVE_CACHE_RAM_MIB (the memory guard gives
   it back first under pressure), on the CPU; off on a GPU, where a finished
   request's blocks cross PCIe from pageable memory on the scheduler thread
   (a 20,000-token prompt of a 4B model stalls the next request for seconds:
   docs/BENCHMARKS.md) */
#define SERVE_CACHE_RAM_MIB 8192
static size_t prefix_cache_bytes(const opts *o, const model *m) {
    if (o->cache_ram >= 0) return (size_t)o->cache_ram << 20;
    if (strcmp(model_device(m), "cpu") != 0) return 0;
    memfit_sys sys;
    char err[256];
    size_t cap = (size_t)SERVE_CACHE_RAM_MIB << 20;
    if (memfit_read_sys(&sys, err, sizeof err) != 0) return cap;
    return sys.mem_avail / 4 < cap ? sys.mem_avail / 4 : cap;
}

static int serve_slots(const cli_engine *ce, const opts *o, int *max_batch) {
    int mb = o->max_batch;
    if (o->cache_slots) {
        if (mb > o->cache_slots)
            cli_die("--max-batch %d needs %d cache slots (each running request holds one): raise --cache-slots "
                    "(now %d) or lower --max-batch",
                    mb, mb, o->cache_slots);
        *max_batch = mb ? mb : o->cache_slots < SERVE_DEFAULT_BATCH ? o->cache_slots : SERVE_DEFAULT_BATCH;
        return o->cache_slots;
    }
    if (mb) {
        *max_batch = mb;
        return mb > 2 ? mb : 2;
    }
    int n = SERVE_DEFAULT_BATCH;
    for (; n > 2; n--) {
        memfit_report r;
        char err[256];
        if (memfit_model(ce->m, n, 512, o->ctx, NULL, &r, err, sizeof err) != 0 || r.out.fits) break;
    }
    *max_batch = n;
    return n;
}

/* The KV pool's bound in pages (sched.h info.kv_capacity) where the
   backend's caches draw on one pool (the CPU): --kv-ram, else what the
   memory estimate leaves past the weights and every slot's scratch
   (memfit_report.pool), and at least one window's pages (the start rule
   checked that much fits) with a page a layer to spare, so a request of
   the whole window can always run once the others are done. 0 (no bound)
   where the caches are not paged or the memory cannot be read. */
static int64_t kv_pool_pages(const cli_engine *ce, const opts *o, int n_slots, int window) {
    model_kv_pages kp;
    if (model_get_kv_pages(ce->m, &kp) != 0) {
        if (o->kv_ram)
            cli_die("--kv-ram: the caches here (%s%s) are not pages of one pool, each slot holds its window: "
                    "--cache-slots and --context-window size them", model_device(ce->m),
                    o->tensor_parallel > 1 ? ", tensor-parallel ranks" : "");
        return 0;
    }
    const int64_t one = model_kv_pages_for(ce->m, window) + model_cfg(ce->m)->n_layers;
    if (o->kv_ram) {
        const int64_t p = (int64_t)(((size_t)o->kv_ram << 20) / kp.page_bytes);
        if (p < one)
            cli_die("--kv-ram %d MiB holds %lld KV pages of %zu bytes; one %d-position window needs %lld "
                    "(%.0f MiB): raise --kv-ram or lower --context-window",
                    o->kv_ram, (long long)p, kp.page_bytes, window, (long long)one,
                    (double)one * (double)kp.page_bytes / 1048576.0);
        return p;
    }
    memfit_report r;
    char err[256];
    if (memfit_model(ce->m, n_slots, 512, window, NULL, &r, err, sizeof err) != 0) return 0;
    const int64_t p = (int64_t)(r.pool / kp.page_bytes);
    return p > one ? p : one;
}

/* ---- errors ---- */

static const char *error_type(int dialect, int status) {
    switch (status) {
    case 400: case 413: case 405: return dialect == DIALECT_ANTHROPIC && status == 413 ? "request_too_large"
                                                                                     : "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return dialect == DIALECT_ANTHROPIC ? "not_found_error" : "not_found";
    case 503: return dialect == DIALECT_ANTHROPIC ? "overloaded_error" : "service_unavailable";
    default: return dialect == DIALECT_OPENAI ? "server_error" : "api_error";
    }
}

void serve_error(const http_req *r, int dialect, int status, const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject();
    if (dialect == DIALECT_ANTHROPIC) {
        cJSON_AddStringToObject(o, "type", "error");
        cJSON_AddStringToObject(e, "type", error_type(dialect, status));
        cJSON_AddStringToObject(e, "message", msg);
    } else {
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", error_type(dialect, status));
        if (code) cJSON_AddStringToObject(e, "code", code);
        else if (dialect == DIALECT_RESPONSES) cJSON_AddNullToObject(e, "code");
        else cJSON_AddNumberToObject(e, "code", status);
        cJSON_AddNullToObject(e, "param");
    }
    cJSON_AddItemToObject(o, "error", e);
    char *s = cJSON_PrintUnformatted(o);
    http_reply_json(r, status, s);
    free(s);
    cJSON_Delete(o);
}

/* ---- simple routes ---- */

static long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long pages = 0, rss = 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
    return rss * sysconf(_SC_PAGESIZE);
}

static void reply_cjson(const http_req *r, int status, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    http_reply_json(r, status, s);
    free(s);
    cJSON_Delete(o);
}

static int draining(const server *srv) { return __atomic_load_n(&srv->draining, __ATOMIC_SEQ_CST); }

/* requests that reused cached positions per prompt processed: exact, from
   the scheduler's counts (0 before any) */
static double prefix_hit_rate(const sched_metrics *m) { return m->prompts ? (double)m->slot_hits / m->prompts : 0.0; }

/* HTTP requests in flight: the handle is stored once the server is
   started, which its first requests may precede (none counted then) */
static int in_flight(server *srv) { return http_in_flight(__atomic_load_n(&srv->hs, __ATOMIC_ACQUIRE)); }

/* 200 with "status": "ok"; while draining 503 with "status": "draining",
   so that a load balancer's readiness check takes the server out at once */
static void route_health(server *srv, const http_req *r) {
    const sched_info *in = sched_get_info(srv->en);
    sched_metrics m;
    sched_get_metrics(srv->en, &m);
    int drain = draining(srv);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", drain ? "draining" : "ok");
    cJSON_AddBoolToObject(o, "draining", drain);
    cJSON_AddNumberToObject(o, "drain_timeout_seconds", srv->drain_timeout);
    cJSON_AddStringToObject(o, "model", srv->model_id);
    cJSON_AddStringToObject(o, "mode", in->mode);
    if (in->drafter && *in->drafter) cJSON_AddStringToObject(o, "drafter", in->drafter);
    else cJSON_AddNullToObject(o, "drafter");
    if (!in->cap) cJSON_AddNullToObject(o, "max_draft");
    else if (in->adaptive) cJSON_AddStringToObject(o, "max_draft", "auto");
    else cJSON_AddNumberToObject(o, "max_draft", in->cap);
    cJSON_AddNumberToObject(o, "context_window", srv->ctx_window);
    cJSON_AddNumberToObject(o, "cache_slots", in->slots);
    cJSON_AddNumberToObject(o, "max_output_tokens", srv->max_output);
    cJSON_AddStringToObject(o, "tool_call_format", tc_format_name(srv->tcf));
    cJSON_AddBoolToObject(o, "chat_template", srv->tpl != NULL);
    cJSON_AddStringToObject(o, "thinking_default", srv->no_thinking ? "off" : "on");
    if (srv->reasoning_effort) cJSON_AddStringToObject(o, "reasoning_effort", srv->reasoning_effort);
    cJSON_AddBoolToObject(o, "busy", m.busy > 0);
    cJSON_AddNumberToObject(o, "queue_depth", m.queue_depth);
    cJSON_AddNumberToObject(o, "requests_running", m.busy);
    cJSON_AddNumberToObject(o, "requests_waiting", m.queue_depth);
    cJSON_AddNumberToObject(o, "max_batch", in->max_batch);
    cJSON *bt = cJSON_AddObjectToObject(o, "batch");
    cJSON_AddNumberToObject(bt, "max_batch", in->max_batch);
    cJSON_AddNumberToObject(bt, "running", m.busy);
    cJSON_AddNumberToObject(bt, "queued", m.queue_depth);
    cJSON_AddNumberToObject(bt, "steps", (double)m.steps);
    cJSON_AddNumberToObject(bt, "last_step_jobs", m.last_step_jobs);
    cJSON_AddNumberToObject(bt, "last_step_rows", m.last_step_rows);
    cJSON_AddNumberToObject(bt, "avg_step_jobs", m.steps ? (double)m.step_jobs / (double)m.steps : 0.0);
    cJSON_AddNumberToObject(bt, "avg_step_rows", m.steps ? (double)m.step_rows / (double)m.steps : 0.0);
    cJSON_AddNumberToObject(bt, "step_seconds", m.step_seconds);
    cJSON_AddNumberToObject(bt, "tokens_per_second",
                            m.step_seconds > 0 ? (double)m.completion_tokens / m.step_seconds : 0.0);
    cJSON_AddNumberToObject(o, "http_requests_in_flight", in_flight(srv));
    cJSON *pc = cJSON_AddObjectToObject(o, "prefix_cache");
    cJSON_AddNumberToObject(pc, "lookups", (double)m.prompts);
    cJSON_AddNumberToObject(pc, "hits", (double)m.slot_hits);
    cJSON_AddNumberToObject(pc, "hit_rate", prefix_hit_rate(&m));
    cJSON_AddNumberToObject(pc, "prompt_tokens", (double)m.prompt_tokens);
    cJSON_AddNumberToObject(pc, "cached_tokens", (double)m.cached_tokens);
    cJSON_AddNumberToObject(pc, "copies", (double)m.prefix_copies);
    cJSON_AddNumberToObject(pc, "copied_tokens", (double)m.prefix_copied_tokens);
    cJSON *bl = cJSON_AddObjectToObject(pc, "blocks");
    cJSON_AddNumberToObject(bl, "block_tokens", m.blocks.block_tokens);
    cJSON_AddNumberToObject(bl, "cached", m.blocks.blocks);
    cJSON_AddNumberToObject(bl, "bytes", (double)m.blocks.bytes);
    cJSON_AddNumberToObject(bl, "budget_bytes", (double)m.blocks.budget);
    cJSON_AddNumberToObject(bl, "free_bytes", (double)(m.blocks.budget - m.blocks.bytes));
    cJSON_AddNumberToObject(bl, "lookups", (double)m.blocks.lookups);
    cJSON_AddNumberToObject(bl, "hits", (double)m.blocks.hits);
    cJSON_AddNumberToObject(bl, "loaded_tokens", (double)m.blocks.loaded_tokens);
    cJSON_AddNumberToObject(bl, "stored", (double)m.blocks.stored_blocks);
    cJSON_AddNumberToObject(bl, "evicted", (double)m.blocks.evicted_blocks);
    cJSON_AddNumberToObject(bl, "shed_bytes", (double)m.blocks_shed);
    cJSON_AddNumberToObject(bl, "storing", m.blocks_storing);
    cJSON_AddNumberToObject(bl, "store_seconds", m.blocks_store_seconds);
    if (m.kv_paged) { /* the running requests' and the blocks' cache pages (one pool) */
        cJSON *kp = cJSON_AddObjectToObject(o, "kv_pages");
        cJSON_AddNumberToObject(kp, "page_tokens", m.kv_pages.page_tokens);
        cJSON_AddNumberToObject(kp, "page_bytes", (double)m.kv_pages.page_bytes);
        cJSON_AddNumberToObject(kp, "held", (double)m.kv_pages.held);
        cJSON_AddNumberToObject(kp, "shared", (double)m.kv_pages.shared);
        cJSON_AddNumberToObject(kp, "bytes", (double)m.kv_pages.held * (double)m.kv_pages.page_bytes);
        cJSON_AddNumberToObject(kp, "capacity", (double)m.kv_capacity);
        cJSON_AddNumberToObject(kp, "reserved", (double)m.kv_reserved);
        cJSON_AddNumberToObject(kp, "free", (double)(m.kv_capacity > m.kv_pages.held ? m.kv_capacity - m.kv_pages.held : 0));
        cJSON_AddNumberToObject(kp, "deferred", (double)m.kv_deferred);
        cJSON_AddNumberToObject(kp, "slots_shed", (double)m.kv_pool_shed);
    }
    cJSON_AddNumberToObject(o, "uptime_seconds", ds_now() - srv->t_start);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddNumberToObject(mem, "rss_bytes", (double)rss_bytes());
    memfit_sys sys;
    char err[256];
    int have = memfit_read_sys(&sys, err, sizeof err) == 0;
    if (have) {
        cJSON_AddNumberToObject(mem, "available_bytes", (double)sys.mem_avail);
        cJSON_AddNumberToObject(mem, "total_bytes", (double)sys.mem_total);
        cJSON_AddNumberToObject(mem, "swap_used_bytes", (double)(sys.swap_total - sys.swap_free));
    }
    cJSON_AddNumberToObject(mem, "cache_slots_shed", (double)m.slots_shed);
    cJSON *w = cJSON_AddArrayToObject(o, "warnings");
    serve_health_warnings(w, srv, have ? &sys : NULL, &m);
    reply_cjson(r, drain ? 503 : 200, o);
}

static void warn(cJSON *w, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void warn(cJSON *w, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "code", code);
    cJSON_AddStringToObject(x, "message", msg);
    cJSON_AddItemToArray(w, x);
}

void serve_health_warnings(cJSON *w, const server *srv, const void *sysp, const sched_metrics *m) {
    const memfit_sys *sys = sysp;
    char why[128];
    if (!srv->tpl) warn(w, "no_chat_template", "the model has no chat template: only /v1/completions works");
    if (sys && memfit_pressure(sys, why, sizeof why))
        warn(w, "memory_pressure", "the machine is short of memory (%s): idle cache slots are shed", why);
    if (sys && sys->swap_total > sys->swap_free)
        warn(w, "swap_in_use", "%.0f MiB of swap in use: a model or cache paged out runs at disk speed",
             (double)(sys->swap_total - sys->swap_free) / 1048576.0);
    if (m->slots_shed)
        warn(w, "cache_shed", "%llu idle cache slot%s shed under memory pressure (last: %s)",
             (unsigned long long)m->slots_shed, m->slots_shed == 1 ? "" : "s", m->last_shed);
    if (srv->window_cut)
        warn(w, "window_cut",
             "the model's %d-position window does not fit in memory: the context window is %d "
             "(--context-window, --kv-bits, fewer --cache-slots)",
             srv->window_cut, srv->ctx_window);
}

static cJSON *model_object(server *srv) {
    const sched_info *in = sched_get_info(srv->en);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", srv->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)(long)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "dspark");
    char dn[512];
    snprintf(dn, sizeof dn, "%s (dspark %s)", srv->model_id, in->mode);
    cJSON_AddStringToObject(m, "display_name", dn);
    cJSON_AddNumberToObject(m, "context_window", srv->ctx_window);
    cJSON *x = cJSON_AddObjectToObject(m, "x_dspark");
    cJSON_AddStringToObject(x, "mode", in->mode);
    if (in->drafter && *in->drafter) cJSON_AddStringToObject(x, "drafter", in->drafter);
    return m;
}

/* GET /v1/models, and /v1/models/ID (any id: model names never select
   anything here, so every id names the one served model) */
static void route_models(server *srv, const http_req *r, int one) {
    if (one) {
        reply_cjson(r, 200, model_object(srv));
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(srv));
    reply_cjson(r, 200, o);
}

static void route_metrics(server *srv, const http_req *r) {
    sched_metrics m;
    sched_get_metrics(srv->en, &m);
    const sched_info *in = sched_get_info(srv->en);
    strbuf b = {0};
#define METRIC(name, type, help, fmt, val)                                                        \
    sb_printf(&b, "# HELP dspark_%s %s\n# TYPE dspark_%s %s\ndspark_%s" fmt "\n", name, help, name, type, name, val)
    sb_printf(&b, "# HELP dspark_info The served model and decoding mode.\n# TYPE dspark_info gauge\n"
                  "dspark_info{model=\"%s\",mode=\"%s\"} 1\n",
              srv->model_id, in->mode);
    METRIC("requests_total", "counter", "Generation requests finished.", " %llu", (unsigned long long)m.requests);
    METRIC("requests_cancelled_total", "counter", "Requests whose client went away.", " %llu",
           (unsigned long long)m.requests_cancelled);
    METRIC("requests_failed_total", "counter", "Requests that ended in an engine error.", " %llu",
           (unsigned long long)m.requests_failed);
    METRIC("requests_cut_total", "counter", "Requests cut at shutdown (drain timeout or a second signal).", " %llu",
           (unsigned long long)m.requests_cut);
    METRIC("prompt_tokens_total", "counter", "Prompt tokens of finished requests.", " %llu",
           (unsigned long long)m.prompt_tokens);
    METRIC("prompt_tokens_cached_total", "counter", "Prompt tokens reused from the KV cache.", " %llu",
           (unsigned long long)m.cached_tokens);
    METRIC("prefix_cache_lookups_total", "counter", "Prompts processed (each looks up the cache slots).", " %llu",
           (unsigned long long)m.prompts);
    METRIC("prefix_cache_hits_total", "counter", "Prompts that reused cached positions.", " %llu",
           (unsigned long long)m.slot_hits);
    METRIC("prefix_cache_hit_ratio", "gauge", "prefix_cache_hits_total / prefix_cache_lookups_total.", " %.4f",
           prefix_hit_rate(&m));
    METRIC("prefix_cache_copies_total", "counter", "Prompts given another cache slot's longer prefix (copied).",
           " %llu", (unsigned long long)m.prefix_copies);
    METRIC("prefix_cache_copied_tokens_total", "counter", "Positions those copies brought.", " %llu",
           (unsigned long long)m.prefix_copied_tokens);
    METRIC("prefix_blocks_cached", "gauge", "KV blocks held by the prefix cache.", " %d", m.blocks.blocks);
    if (m.kv_paged) {
        METRIC("kv_pages", "gauge", "KV cache pages held (running requests, cache slots and prefix blocks).",
               " %lld", (long long)m.kv_pages.held);
        METRIC("kv_pages_shared", "gauge", "Of them, pages more than one holder shares.", " %lld",
               (long long)m.kv_pages.shared);
        METRIC("kv_pages_bytes", "gauge", "Bytes the held pages take.", " %.0f",
               (double)m.kv_pages.held * (double)m.kv_pages.page_bytes);
        METRIC("kv_pages_capacity", "gauge", "The pages the pool may hold (--kv-ram; 0: no bound).", " %lld",
               (long long)m.kv_capacity);
        METRIC("kv_pages_reserved", "gauge", "Pages the running requests may still take.", " %lld",
               (long long)m.kv_reserved);
        METRIC("kv_deferred_total", "counter", "Admissions put off until the pool had room.", " %llu",
               (unsigned long long)m.kv_deferred);
        METRIC("kv_slots_shed_total", "counter", "Idle cache slots emptied to make room in the pool.", " %llu",
               (unsigned long long)m.kv_pool_shed);
    }
    METRIC("prefix_blocks_bytes", "gauge", "Bytes the prefix cache's blocks take.", " %llu",
           (unsigned long long)m.blocks.bytes);
    METRIC("prefix_blocks_budget_bytes", "gauge", "The prefix cache's budget (--cache-ram).", " %llu",
           (unsigned long long)m.blocks.budget);
    METRIC("prefix_blocks_free_bytes", "gauge", "Budget the blocks leave free.", " %llu",
           (unsigned long long)(m.blocks.budget - m.blocks.bytes));
    METRIC("prefix_blocks_lookups_total", "counter", "Admissions that looked up the block cache.", " %llu",
           (unsigned long long)m.blocks.lookups);
    METRIC("prefix_blocks_hits_total", "counter", "Admissions that loaded at least one block.", " %llu",
           (unsigned long long)m.blocks.hits);
    METRIC("prefix_blocks_loaded_tokens_total", "counter", "Positions loaded from the block cache.", " %llu",
           (unsigned long long)m.blocks.loaded_tokens);
    METRIC("prefix_blocks_stored_total", "counter", "Blocks stored.", " %llu",
           (unsigned long long)m.blocks.stored_blocks);
    METRIC("prefix_blocks_evicted_total", "counter", "Blocks evicted (budget or memory guard).", " %llu",
           (unsigned long long)m.blocks.evicted_blocks);
    METRIC("prefix_blocks_storing", "gauge", "Slots whose blocks are queued or being stored.", " %d",
           m.blocks_storing);
    METRIC("prefix_blocks_store_seconds_total", "counter", "Time the storer thread spent storing blocks.", " %.6f",
           m.blocks_store_seconds);
    METRIC("completion_tokens_total", "counter", "Generated tokens.", " %llu",
           (unsigned long long)m.completion_tokens);
    METRIC("rounds_total", "counter", "Verify rounds (target forwards while decoding).", " %llu",
           (unsigned long long)m.rounds);
    METRIC("drafted_tokens_total", "counter", "Draft tokens proposed.", " %llu", (unsigned long long)m.drafted);
    METRIC("accepted_tokens_total", "counter", "Draft tokens accepted.", " %llu", (unsigned long long)m.accepted);
    METRIC("tokens_per_round", "gauge", "Tokens committed per round over all requests.", " %.4f",
           m.rounds ? (double)m.round_tokens / (double)m.rounds : 0.0);
    METRIC("draft_cap", "gauge", "The draft cap of the last round.", " %d", m.last_cap);
    METRIC("prefill_tokens_per_second", "gauge",
           "Prefill rate per request (computed prompt tokens over the requests' prefill times added up).", " %.2f",
           m.prefill_seconds > 0 ? (double)m.prefill_tokens / m.prefill_seconds : 0.0);
    METRIC("decode_tokens_per_second", "gauge",
           "Decode rate per request (generated tokens over the requests' decode times added up; concurrent "
           "requests' times overlap).", " %.2f",
           m.decode_seconds > 0 ? (double)(m.completion_tokens) / m.decode_seconds : 0.0);
    METRIC("step_seconds_total", "counter", "Wall time inside engine steps (the engine busy).", " %.3f",
           m.step_seconds);
    METRIC("batch_tokens_per_second", "gauge",
           "Generated tokens over the wall time of the steps: the batch's aggregate rate, prefill included.",
           " %.2f", m.step_seconds > 0 ? (double)m.completion_tokens / m.step_seconds : 0.0);
    METRIC("queue_depth", "gauge", "Requests waiting for the engine.", " %d", m.queue_depth);
    METRIC("busy", "gauge", "1 while a request is being generated.", " %d", m.busy > 0);
    METRIC("requests_running", "gauge", "Requests being generated (the running batch).", " %d", m.busy);
    METRIC("requests_waiting", "gauge", "Requests queued for the engine.", " %d", m.queue_depth);
    METRIC("max_batch", "gauge", "Most requests generated at once (--max-batch).", " %d", in->max_batch);
    METRIC("steps_total", "counter", "Engine steps (one forward carries every running request's rows).", " %llu",
           (unsigned long long)m.steps);
    METRIC("step_jobs_total", "counter", "Requests the steps carried (steps_total times the mean batch width).",
           " %llu", (unsigned long long)m.step_jobs);
    METRIC("batch_width", "gauge", "Requests the last step carried.", " %d", m.last_step_jobs);
    METRIC("step_rows_last", "gauge", "Rows (prefill chunks and verify rows) the last step carried.", " %d",
           m.last_step_rows);
    sb_printf(&b, "# HELP dspark_step_rows Rows per engine step (prefill chunks and verify rows).\n"
                  "# TYPE dspark_step_rows histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < SCHED_ROWS_BUCKETS; i++) {
        cum += m.rows_hist[i];
        sb_printf(&b, "dspark_step_rows_bucket{le=\"%d\"} %llu\n", SCHED_ROWS_BOUNDS[i], (unsigned long long)cum);
    }
    cum += m.rows_hist[SCHED_ROWS_BUCKETS];
    sb_printf(&b, "dspark_step_rows_bucket{le=\"+Inf\"} %llu\ndspark_step_rows_sum %llu\ndspark_step_rows_count %llu\n",
              (unsigned long long)cum, (unsigned long long)m.step_rows, (unsigned long long)m.steps);
    METRIC("http_requests_in_flight", "gauge", "HTTP requests being handled or answered (this scrape included).",
           " %d", in_flight(srv));
    METRIC("draining", "gauge", "1 once a stop signal came: requests in flight finish, new ones get 503.", " %d",
           draining(srv));
    METRIC("resident_memory_bytes", "gauge", "Resident set size of the server.", " %ld", rss_bytes());
#undef METRIC
    http_reply(r, 200, "text/plain; version=0.0.4", sb_str(&b), b.n);
    sb_free(&b);
}

typedef struct {
    server *srv;
    uint64_t seq;
    int fd, sent_stats;
    double last;
    strbuf ev;
} events_stream;

static void stats_json(server *srv, strbuf *out) {
    sched_metrics m;
    sched_get_metrics(srv->en, &m);
    sb_printf(out,
              "{\"requests\":%llu,\"rounds\":%llu,\"completion_tokens\":%llu,\"tokens_per_round\":%.4f,"
              "\"draft_acceptance\":%.4f,\"cap\":%d,\"busy\":%d,\"queue_depth\":%d,\"running\":%d,"
              "\"max_batch\":%d}",
              (unsigned long long)m.requests, (unsigned long long)m.rounds, (unsigned long long)m.completion_tokens,
              m.rounds ? (double)m.round_tokens / (double)m.rounds : 0.0,
              m.drafted ? (double)m.accepted / (double)m.drafted : 0.0, m.last_cap, m.busy > 0, m.queue_depth, m.busy,
              sched_get_info(srv->en)->max_batch);
}

static int events_fill(void *ctx, strbuf *out) {
    events_stream *e = ctx;
    if (!e->sent_stats) {
        e->sent_stats = 1;
        sb_puts(out, "event: stats\ndata: ");
        stats_json(e->srv, out);
        sb_puts(out, "\n\n");
        e->last = ds_now();
        return 1;
    }
    for (;;) {
        if (http_fd_gone(e->fd)) return -1;
        sb_clear(&e->ev);
        int rc = sched_events_next(e->srv->en, &e->seq, 32, 0.25, &e->ev);
        if (rc < 0) return 0;
        if (rc == 1) {
            sb_printf(out, "event: round\ndata: %s\n\n", sb_str(&e->ev));
            e->last = ds_now();
            return 1;
        }
        if (ds_now() - e->last >= 1.0) {
            sb_puts(out, ": keepalive\n\n");
            e->last = ds_now();
            return 1;
        }
    }
}

static void events_close(void *ctx, int gone) {
    (void)gone;
    events_stream *e = ctx;
    sb_free(&e->ev);
    free(e);
}

static void route_events(server *srv, const http_req *r) {
    events_stream *e = xcalloc(1, sizeof *e);
    e->srv = srv;
    e->seq = SCHED_EVENTS_NEW;
    e->fd = r->fd;
    http_stream st = {.fill = events_fill, .close = events_close, .ctx = e, .background = 1};
    http_reply_stream(r, 200, NULL, &st);
}

cJSON *serve_parse_body(const http_req *r, int dialect) {
    char err[256];
    cJSON *b = json_parse(r->body_len ? r->body : "{}", r->body_len ? r->body_len : 2, "request body", err, sizeof err);
    if (!b) serve_error(r, dialect, 400, NULL, "invalid JSON body: %s", err);
    else if (!cJSON_IsObject(b)) {
        serve_error(r, dialect, 400, NULL, "request body must be a JSON object");
        cJSON_Delete(b);
        b = NULL;
    }
    return b;
}

static void route_tokenize(server *srv, const http_req *r) {
    cJSON *b = serve_parse_body(r, DIALECT_OPENAI);
    if (!b) return;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "content");
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(b, "add_special");
    const cJSON *wp = cJSON_GetObjectItemCaseSensitive(b, "with_pieces");
    if (!cJSON_IsString(c)) {
        serve_error(r, DIALECT_OPENAI, 400, NULL, "'content' must be a string");
        cJSON_Delete(b);
        return;
    }
    int *ids = NULL;
    char err[512];
    int n = tok_encode(srv->tok, c->valuestring, strlen(c->valuestring), cJSON_IsTrue(as), &ids, err, sizeof err);
    if (n < 0) {
        serve_error(r, DIALECT_OPENAI, 400, NULL, "cannot tokenize: %s", err);
        cJSON_Delete(b);
        return;
    }
    cJSON *o = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) {
        if (cJSON_IsTrue(wp)) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "id", ids[i]);
            size_t len;
            char *piece = tok_decode(srv->tok, ids + i, 1, 0, &len);
            cJSON_AddStringToObject(x, "piece", piece);
            free(piece);
            cJSON_AddItemToArray(t, x);
        } else cJSON_AddItemToArray(t, cJSON_CreateNumber(ids[i]));
    }
    free(ids);
    cJSON_Delete(b);
    reply_cjson(r, 200, o);
}

static void route_detokenize(server *srv, const http_req *r) {
    cJSON *b = serve_parse_body(r, DIALECT_OPENAI);
    if (!b) return;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "tokens");
    int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1, vocab = tok_vocab_size(srv->tok);
    int *ids = xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1)), i = 0;
    for (const cJSON *x = t ? t->child : NULL; n >= 0 && x; x = x->next, i++) {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1.0;
        if (!(v >= 0.0 && v < (double)vocab) || v != floor(v)) { /* range first: no out-of-range cast */
            n = -2;
            break;
        }
        ids[i] = (int)v;
    }
    if (n < 0) {
        serve_error(r, DIALECT_OPENAI, 400, NULL,
                    n == -1 ? "'tokens' must be an array of token ids"
                            : "'tokens' must hold integer token ids in [0, %d)", vocab);
        free(ids);
        cJSON_Delete(b);
        return;
    }
    size_t len;
    char *s = tok_decode(srv->tok, ids, n, 0, &len);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", s);
    free(s);
    free(ids);
    cJSON_Delete(b);
    reply_cjson(r, 200, o);
}

/* GET / and the page's files (web.h), open without the API key: the page
   asks for the key and sends it with its API calls. An ETag (FNV-1a of the
   bytes) lets the browser revalidate: If-None-Match answers 304. Returns 0
   when path names no file. */
static int route_web(const http_req *r, const char *path) {
    for (const web_asset *a = WEB_ASSETS; a->path; a++) {
        if (strcmp(a->path, path)) continue;
        char etag[32];
        snprintf(etag, sizeof etag, "\"%016llx\"", (unsigned long long)ds_fnv1a(DS_FNV_SEED, a->data, a->len));
        const char *inm = http_header(r, "If-None-Match");
        const char *hdrs[] = {"ETag", etag, "Cache-Control", "no-cache", "X-Content-Type-Options", "nosniff",
                              "Content-Security-Policy",
                              "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                              "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
                              NULL};
        if (inm && strstr(inm, etag)) http_reply_static(r, 304, NULL, "", 0, hdrs);
        else http_reply_static(r, 200, a->type, a->data, a->len, hdrs);
        return 1;
    }
    return 0;
}

/* ---- routing ---- */

static int authorised(const server *srv, const http_req *r) {
    if (!srv->api_key) return 1;
    const char *a = http_header(r, "Authorization"), *x = http_header(r, "x-api-key");
    if (x && !strcmp(x, srv->api_key)) return 1;
    if (a && !strncmp(a, "Bearer ", 7) && !strcmp(a + 7, srv->api_key)) return 1;
    return 0;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static void handle(void *app, const http_req *r) {
    server *srv = app;
    const char *p = !strncmp(r->path, "/v1/", 4) ? r->path + 3 : r->path;
    int get = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
    int dialect = ends_with(p, "/messages") || ends_with(p, "/messages/count_tokens") ? DIALECT_ANTHROPIC
                  : ends_with(p, "/responses")                                          ? DIALECT_RESPONSES
                                                                                        : DIALECT_OPENAI;
    if (!strcmp(r->method, "HEAD")) {
        http_reply(r, 200, NULL, "", 0);
        return;
    }
    if (get && !strcmp(p, "/health")) {
        route_health(srv, r);
        return;
    }
    if (get && route_web(r, r->path)) return;
    if (!authorised(srv, r)) {
        serve_error(r, dialect, 401, NULL, "invalid api key: send Authorization: Bearer KEY or x-api-key: KEY");
        return;
    }
    static const struct {
        const char *path;
        int post;
        int kind; /* -1: not a generation route */
    } routes[] = {
        {"/chat/completions", 1, API_CHAT}, {"/completions", 1, API_COMPLETIONS},
        {"/responses", 1, API_RESPONSES},   {"/messages", 1, API_MESSAGES},
        {"/messages/count_tokens", 1, API_COUNT_TOKENS},
        {"/models", 0, -1}, {"/metrics", 0, -1}, {"/events", 0, -1}, {"/tokenize", 1, -1}, {"/detokenize", 1, -1},
        {"/doctor", 0, -1},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(p, routes[i].path)) continue;
        if (routes[i].post ? !post : !get) {
            serve_error(r, dialect, 405, NULL, "%s %s: use %s", r->method, r->path, routes[i].post ? "POST" : "GET");
            return;
        }
        if (routes[i].kind >= 0 && routes[i].kind != API_COUNT_TOKENS && draining(srv))
            serve_error(r, dialect, 503, "server_shutting_down",
                        "the server is shutting down: it finishes the requests it has and takes no new ones "
                        "(send this one to another server, or again once this one is back)");
        else if (routes[i].kind >= 0) serve_generate(srv, r, (api_kind)routes[i].kind);
        else if (!strcmp(p, "/models")) route_models(srv, r, 0);
        else if (!strcmp(p, "/metrics")) route_metrics(srv, r);
        else if (!strcmp(p, "/events")) route_events(srv, r);
        else if (!strcmp(p, "/tokenize")) route_tokenize(srv, r);
        else if (!strcmp(p, "/doctor")) reply_cjson(r, 200, doctor_report(1)); /* as `dspark doctor --models --json` */
        else route_detokenize(srv, r);
        return;
    }
    if (get && !strncmp(p, "/models/", 8) && p[8]) {
        route_models(srv, r, 1);
        return;
    }
    serve_error(r, dialect, 404, NULL, "unknown route %s %s", r->method, r->path);
}

/* ---- startup ---- */

static double env_seconds(const char *name, double def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    double x = strtod(v, &end);
    if (*end || !(x > 0) || x > 3600) cli_die("%s must be a number of seconds in (0, 3600], got \"%s\"", name, v);
    return x;
}

static size_t env_bytes(const char *name, size_t def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || x < 1024) cli_die("%s must be a byte count >= 1024, got \"%s\"", name, v);
    return (size_t)x;
}

/* after the cut, how long the connections get to send their error endings */
#define CUT_GRACE_S 5.0

/* Waits up to `seconds` for every HTTP request to be answered (http_in_flight
   0). Returns 0 when they were, 1 on timeout, 2 when a stop signal came. */
static int wait_answered(server *srv, const sigset_t *sigs, double seconds) {
    double end = ds_now() + seconds;
    for (;;) {
        if (in_flight(srv) == 0) return 0;
        double left = end - ds_now();
        if (left <= 0) return 1;
        if (left > 0.02) left = 0.02;
        struct timespec ts = {0, (long)(left * 1e9)};
        if (sigtimedwait(sigs, NULL, &ts) > 0) return 2;
    }
}

/* Shutdown. The first SIGTERM / SIGINT starts the drain: the listener stays
   open, but new generation requests get 503 and /health says "draining";
   the requests in flight and the queued ones get drain_timeout seconds to
   finish. Then (or at once on a second signal, or with a timeout of 0) the
   scheduler cuts the rest: each ends with its dialect's error, never a
   normal finish, and the connections get CUT_GRACE_S to send those before
   the caller closes them. */
static void drain(server *srv, const sigset_t *sigs) {
    int sig = 0;
    sigwait(sigs, &sig);
    __atomic_store_n(&srv->draining, 1, __ATOMIC_SEQ_CST);
    int n = in_flight(srv);
    fprintf(stderr, "dspark serve: %s: draining, %d request%s in flight get %g s to finish (new ones get 503; "
                    "a second signal cuts them)\n",
            sig == SIGINT ? "interrupted" : "terminated", n, n == 1 ? "" : "s", srv->drain_timeout);
    fflush(stderr);
    int rc = wait_answered(srv, sigs, srv->drain_timeout);
    if (rc != 0) {
        char why[256];
        if (rc == 2) snprintf(why, sizeof why, "the server shut down before this answer was finished (a second stop "
                                               "signal cut the drain short)");
        else snprintf(why, sizeof why, "the server shut down before this answer was finished (its %g s drain "
                                       "timeout ran out)", srv->drain_timeout);
        n = in_flight(srv);
        fprintf(stderr, "dspark serve: %s: cutting %d request%s\n", rc == 2 ? "second signal" : "drain timeout", n,
                n == 1 ? "" : "s");
        sched_cut(srv->en, why);
        wait_answered(srv, sigs, CUT_GRACE_S); /* a further signal ends this wait too */
    }
    fprintf(stderr, "dspark serve: %s, exiting\n", rc ? "cut" : "drained");
    fflush(stderr);
}

int cmd_serve(const opts *o) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* every thread inherits this; main waits with sigwait */
    signal(SIGPIPE, SIG_IGN);

    server srv = {.t_start = ds_now()};
    srv.keepalive_s = env_seconds("DSPARK_STREAM_KEEPALIVE_S", 15.0);
    size_t max_body = env_bytes("DSPARK_MAX_BODY_BYTES", (size_t)32 << 20);
    char err[1024];
    tokenizer *tok = cli_tokenizer(o->model, 1);
    srv.tok = tok;
    int trc = chat_template_load(&srv.tpl, o->model, err, sizeof err);
    if (trc < 0) cli_die("%s", err);
    const char *src = srv.tpl ? chat_template_source(srv.tpl) : NULL;
    srv.tcf = tc_format_for_template(src);
    think_markers_for_template(src, &srv.think_open, &srv.think_close);

    cli_engine ce;
    cli_engine_open(&ce, o);
    const model_config *mc = model_cfg(ce.m);
    int max_batch;
    int n_slots = serve_slots(&ce, o, &max_batch);
    seq *seqs[SCHED_MAX_SLOTS] = {0};
    cli_spec sps[SCHED_MAX_SLOTS];
    sched_slot slots[SCHED_MAX_SLOTS];
    /* every slot's window fits beside the others (engine/memfit.h), or
       serve refuses to start, naming the window that does */
    int window = cli_window(&ce, o, n_slots, 512, "serve");
    srv.window_cut = o->ctx == 0 && window < mc->max_position_embeddings ? mc->max_position_embeddings : 0;
    for (int i = 0; i < n_slots; i++)
        if (seq_create(&seqs[i], ce.m, window, 512, ce.tp, err, sizeof err) != 0)
            cli_die("cache slot %d of %d: %s (fewer --cache-slots or a smaller --context-window need less memory)",
                    i + 1, n_slots, err);
    seq *s = seqs[0];
    srv.ctx_window = seq_capacity(s);
    const int64_t kv_capacity = kv_pool_pages(&ce, o, n_slots, srv.ctx_window);
    srv.max_output = srv.ctx_window;
    srv.default_max = o->n_predict > 0 ? o->n_predict : 0;
    srv.sdef = (sampler_params){.temperature = o->temp, .top_k = o->top_k, .top_p = o->top_p, .min_p = o->min_p,
                                .seed = o->seed};
    srv.has_seed = o->seed != 0;
    /* a sampler per slot: the jobs running together each draw from their own
       (a drafter holds its slot's) */
    sampler *smps[SCHED_MAX_SLOTS];
    for (int i = 0; i < n_slots; i++) smps[i] = cli_sampler(o, mc->vocab_size);
    cli_spec_open(&sps[0], o, o->mode ? o->mode : "auto", &ce, s, smps[0]);
    for (int i = 1; i < n_slots; i++) cli_spec_clone(&sps[i], &sps[0], o, &ce, seqs[i], smps[i]);
    for (int i = 0; i < n_slots; i++) slots[i] = (sched_slot){.s = seqs[i], .sp = &sps[i], .smp = smps[i]};
    cli_spec sp = sps[0]; /* for the banner below (a copy; sps[0] is the one in use) */
    int stop_ids[32];
    int n_stop = cli_stop_ids(ce.m, tok, stop_ids);

    /* named as given: the folder an id resolved to ends in a commit hash */
    const char *named = o->model_spec ? o->model_spec : o->model;
    const char *slash = strrchr(named, '/');
    char model_id[256];
    snprintf(model_id, sizeof model_id, "%s", slash && slash[1] ? slash + 1 : named);
    size_t ml = strlen(model_id);
    while (ml > 1 && model_id[ml - 1] == '/') model_id[--ml] = 0;
    srv.model_id = model_id;
    srv.api_key = o->api_key;
    srv.no_thinking = o->no_thinking;
    srv.reasoning_effort = o->reasoning_effort;
    sched_info info = {.model_id = model_id, .mode = cli_mode_name(sp.mode),
                        .drafter = sp.mode == CLI_MODE_DSPARK || sp.mode == CLI_MODE_DFLASH ? sp.drafter_dir : "",
                        .context_window = srv.ctx_window,
                        .cap = sp.mode == CLI_MODE_BASELINE ? 0 : sp.max_draft, .adaptive = sp.adaptive,
                        .slots = n_slots, .max_batch = max_batch, .prefix_cache = prefix_cache_bytes(o, ce.m),
                        .kv_capacity = kv_capacity};
    srv.mode = info.mode;
    if (!o->no_warmup) {
        double tw = warm_up(seqs, n_slots, err, sizeof err);
        if (tw < 0) cli_die("warm-up forward: %s", err);
        fprintf(stderr, "dspark serve: warmed up %d cache slot%s in %.0f ms\n", n_slots, n_slots == 1 ? "" : "s",
                tw * 1e3);
    }
    srv.en = sched_start(slots, n_slots, tok, stop_ids, n_stop, &info);

    const char *host = o->host ? o->host : "127.0.0.1";
    int port = o->port ? o->port : 8080;
    srv.drain_timeout = o->drain_timeout >= 0 ? o->drain_timeout : 30.0;
    http_server *hs = http_start(host, port, max_body, handle, &srv, err, sizeof err);
    if (!hs) cli_die("%s", err);
    __atomic_store_n(&srv.hs, hs, __ATOMIC_RELEASE); /* (requests may come in before it is set: in_flight) */
    const char *uhost = strchr(host, ':') ? "[::1]" : host;
    fprintf(stderr,
            "dspark serve: model %s, mode %s%s%s, context window %d x %d cache slots, up to %d requests at once, "
            "tool calls: %s, thinking: %s\n"
            "  OpenAI base URL:   http://%s:%d/v1\n"
            "  Claude Code:       dspark claude --url http://%s:%d%s\n"
            "  try: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json' -d "
            "'{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n",
            model_id, info.mode, *info.drafter ? ", drafter " : "", info.drafter, srv.ctx_window, n_slots,
            sched_get_info(srv.en)->max_batch,
            tc_format_name(srv.tcf), srv.think_open ? (srv.no_thinking ? "off by default" : "on") : "none",
            uhost, port, uhost, port, o->api_key ? " --api-key KEY" : "", uhost, port);
    const size_t pcb = sched_get_info(srv.en)->prefix_cache;
    if (pcb) fprintf(stderr, "dspark serve: prefix cache: %.0f MiB of host memory for %d-token KV blocks\n",
                     (double)pcb / 1048576.0, PCACHE_BLOCK);
    else fprintf(stderr, "dspark serve: prefix cache: off (%s)\n",
                 o->cache_ram == 0 ? "--cache-ram 0"
                 : o->cache_ram < 0 && strcmp(model_device(ce.m), "cpu") != 0
                     ? "the default on a GPU; --cache-ram MiB turns it on"
                     : "this backend cannot save cache rows");
    if (kv_capacity) {
        model_kv_pages kp;
        model_get_kv_pages(ce.m, &kp);
        fprintf(stderr, "dspark serve: KV pool: %lld pages of %d positions a layer (%.0f MiB%s) for the slots, the "
                        "running requests and the prefix cache\n",
                (long long)kv_capacity, kp.page_tokens, (double)kv_capacity * (double)kp.page_bytes / 1048576.0,
                o->kv_ram ? ", --kv-ram" : "");
    }
    fprintf(stderr, "dspark serve: listening on http://%s:%d\n", uhost, port);
    fflush(stderr);

    drain(&srv, &sigs);
    sched_stop(srv.en);
    http_stop(hs);
    sched_free(srv.en);
    for (int i = n_slots - 1; i >= 0; i--) cli_spec_close(&sps[i]); /* clones before the original */
    for (int i = 0; i < n_slots; i++) sampler_free(smps[i]);
    for (int i = 0; i < n_slots; i++) seq_free(seqs[i]);
    cli_engine_close(&ce);
    chat_template_free(srv.tpl);
    tok_free(tok);
    return 0;
}
