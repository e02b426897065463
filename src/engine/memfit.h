/* memfit: will a model, its KV caches and its scratch fit in memory, and
 * at which context window / --kv-bits. The one estimate every command
 * uses (run, chat, bench, serve, doctor) and the server's memory guard
 * reads (memfit_read_sys).
 *
 * The estimate is: weights still to be placed + slots x fixed + windows x
 * per_pos x window <= budget (windows: slots, or 1 for a paged pool, below),
 * with budget = available - reserve, where
 *   available: the host's MemAvailable (/proc/meminfo) when the caches live
 *     in RAM (the CPU backend), else the GPU's free memory with the weights
 *     already on it (backend mem_avail);
 *   reserve: MEMFIT_RESERVE_MIN plus 1/MEMFIT_RESERVE_DIV of available
 *     (the process's own allocations, the page cache the system needs);
 *   per_pos: a context's bytes per position, the KV cache at the chosen
 *     storage (kv.h) plus whatever scratch grows with the window;
 *   fixed: a context's scratch that does not.
 * Swap is never counted as room: a KV cache that pages out runs at disk
 * speed. The CPU's cache is filled on demand, so a window that "does not
 * fit" would start and then meet the OOM killer once a long conversation
 * arrives: the commands refuse it instead, naming the window that fits. */
#ifndef DS_MEMFIT_H
#define DS_MEMFIT_H

#include <stddef.h>

#include "engine/config.h"
#include "engine/model.h"

#define MEMFIT_RESERVE_MIN ((size_t)256 << 20)
#define MEMFIT_RESERVE_DIV 20
/* a suggested window is rounded down to a multiple of this */
#define MEMFIT_ROUND 256
/* below this many positions a window is not worth suggesting */
#define MEMFIT_MIN_WINDOW 256

/* The machine's memory now. */
typedef struct {
    size_t mem_total, mem_avail;   /* MemTotal, MemAvailable */
    size_t swap_total, swap_free;  /* SwapTotal, SwapFree */
    double psi_some10, psi_full10; /* /proc/pressure/memory avg10 (percent); -1 when absent */
} memfit_sys;

/* Reads /proc/meminfo and /proc/pressure/memory. 0, or -1 (err filled)
 * when /proc/meminfo cannot be read or lacks MemAvailable. */
int memfit_read_sys(memfit_sys *s, char *err, size_t errlen);

/* Memory pressure, for the server's guard: MemAvailable below
 * MEMFIT_LOW_MIN or 1/MEMFIT_LOW_DIV of MemTotal, whichever is larger, or
 * the kernel's pressure stall information saying tasks waited on memory
 * (full avg10 >= MEMFIT_PSI_FULL percent). Returns 1 with why filled
 * ("MemAvailable 410 MiB < 512 MiB"), else 0. */
#define MEMFIT_LOW_MIN ((size_t)512 << 20)
#define MEMFIT_LOW_DIV 20
#define MEMFIT_PSI_FULL 10.0
int memfit_pressure(const memfit_sys *s, char *why, size_t n);

/* The inputs of one estimate. */
typedef struct {
    size_t avail;    /* bytes available where the caches go (see above) */
    size_t weights;  /* weight bytes still to be placed there (0: resident) */
    size_t fixed;    /* per context, independent of the window */
    size_t per_pos;  /* per context, per position */
    int slots;       /* contexts: cache slots (1 for run / chat) */
    int windows;     /* of them, those whose whole window is counted (0:
                        slots): 1 where the contexts draw their KV from one
                        pool of pages whose use the server bounds (the
                        CPU's, engine/kv.h), so slots cost their scratch
                        and one window's pages the pool must hold */
    int window;      /* asked for; 0: the model's maximum */
    int max_window;  /* the model's max_position_embeddings */
} memfit_in;

typedef struct {
    int want;        /* the asked window, or the model's maximum */
    int fits;        /* want fits */
    int window;      /* the asked window, or the maximum, when it fits; else max_fit */
    int max_fit;     /* the largest window that fits (a multiple of
                        MEMFIT_ROUND, or the model's or asked window when
                        shorter); 0 when not even MEMFIT_MIN_WINDOW does */
    size_t need;     /* bytes the asked window (or the maximum) needs */
    size_t budget;   /* avail - reserve */
} memfit_out;

/* The arithmetic alone (no system reads): for tests and for callers that
 * know their own figures. */
void memfit_estimate(const memfit_in *in, memfit_out *out);

/* A context's bytes for a model described by its config alone (weights
 * not loaded; the CPU backend's layout): KV at kv_bits per position, and
 * the scratch of max_batch rows. For `dspark doctor` before a load. */
void memfit_config_bytes(const model_config *c, int kv_bits, int max_batch, size_t *fixed, size_t *per_pos);

/* The estimate for a loaded model at its --kv-bits, with slots contexts of
 * max_batch rows and window positions (0: the model's maximum; where the
 * backend pools its caches' pages, one window's pages beside every slot's
 * scratch: the server bounds the pool, server/sched.h), against
 * sys (NULL: read now). With it, alt_bits/alt_window: the smallest
 * storage the backend has below the model's whose maximum fitting window
 * is larger (alt_window, 0 when none), for the suggestion. 0, or -1 (err
 * filled) when the memory cannot be read. */
typedef struct {
    memfit_out out;
    int on_device;  /* 1: the caches go to the GPU's memory */
    int kv_bits;    /* the model's storage */
    int alt_bits, alt_window;
    size_t avail;   /* the available bytes used */
    int pooled;     /* the caches draw on one pool of pages (windows = 1) */
    size_t pool;    /* pooled: the budget past the weights and every
                       slot's scratch, the room the pool's pages may take */
} memfit_report;
int memfit_model(const model *m, int slots, int max_batch, int window, const memfit_sys *sys, memfit_report *r,
                 char *err, size_t errlen);

/* One line for a refused or cut window: "the 131072-position window needs
 * 14.2 GiB for 2 cache slots, 9.1 GiB of memory is available: use
 * --context-window 81920 (or --kv-bits 8 for up to 290816)". */
void memfit_describe(const memfit_report *r, int slots, char *out, size_t n);

#endif
