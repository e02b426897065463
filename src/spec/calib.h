/* calib: what speculative decoding costs on this machine, and how many
 * drafts a round should carry.
 *
 * Whether drafting pays depends on the machine as much as on the drafter: a
 * w-row target forward (the verify of w-1 drafts) costs t(w), which on a
 * GPU is almost flat in w and on a CPU grows with w once the matmuls stop
 * being bound by weight streaming. This module
 *   - measures t(w) for w = 1..n_w on a sequence (calib_measure_verify);
 *   - caches the measured costs in a JSON file keyed by backend, model,
 *     drafter, dtype, threads, machine and build (calib_key, calib_load,
 *     calib_store), so the measurement runs once per configuration;
 *   - picks the draft cap k that maximises expected tokens per second for
 *     given per-position acceptance probabilities (calib_best_cap);
 *   - adapts that cap while generating (calib_ctl, for `--max-draft auto`).
 *
 * Model of a round with cap k: the drafter proposes k tokens (draft_s +
 * k * draft_tok_s seconds, 0 when k = 0), the target verifies k + 1 rows (verify_s[k+1]).
 * With alpha_i the probability that draft i is accepted given drafts
 * 1..i-1 were, the round emits E(k) = 1 + sum_{j=1..k} prod_{i=1..j}
 * alpha_i tokens (the accepted drafts plus the target's correction or
 * bonus), so its speed is E(k) / time(k); k = 0 is plain decoding at
 * 1 / verify_s[1]. Widths beyond the measured n_w extrapolate linearly from
 * the last two points (slope clamped at >= 0); with a single point, t(w) =
 * w * t(1) (no batching benefit assumed).
 *
 * Cache file (see calib_default_path):
 *   {"version": 1, "entries": {"<key>": {"verify_s": [t1, .., tn], "draft_s": x, "draft_tok_s": y, "created": unix_time}}}
 * (draft_tok_s is optional on reading: 0 when absent).
 * Numbers are written with enough digits to read back bit-exact. A file
 * that does not parse or does not have this shape is reported once and
 * replaced by the next store; the newest CALIB_MAX_ENTRIES entries are
 * kept. Two processes storing at the same moment may lose one's entry
 * (each rename is atomic; the later one wins), which costs a re-measure. */
#ifndef DS_CALIB_H
#define DS_CALIB_H

#include <stddef.h>

#include "spec/seq.h"

#define CALIB_MAX_W 16         /* widest verify measured */
#define CALIB_MAX_K 64         /* largest cap the controller handles (>= SPEC_MAX_DRAFT) */
#define CALIB_VERSION 1        /* cache file format */
#define CALIB_MAX_ENTRIES 64   /* cache entries kept (newest by "created") */
#define CALIB_MAX_SECONDS 1e4  /* cached times above this are treated as corruption */
#define CALIB_KEY_MAX 1024     /* a buffer of this size holds any key calib_key builds */

/* calib_measure_verify defaults: 3 repetitions (the fastest) of each width over
 * a 128-token context. The measurement costs the prefill of ctx_len tokens
 * plus about (reps + 0.1) * sum_{w=1..n_w} t(w): on the CPU curve of
 * docs/history/benchmarks-log.md (t(w)/t(1) = 1.00 1.03 1.17 1.50 ... 4.23 for w = 1..16)
 * that sum is ~40 t(1) for n_w = 16 and ~13 t(1) for n_w = 8; for
 * Qwen3-0.6B bf16 on 2 threads there (t(1) = 35 ms, prefill ~180 tok/s)
 * about 0.7 s + 3.1 * 1.4 s = 5 s for n_w = 16, 2 s for n_w = 8. */
#define CALIB_DEFAULT_REPS 3
#define CALIB_DEFAULT_CTX 128
/* more passes, up to CALIB_MAX_REPS, while all passes so far took under
 * CALIB_MIN_SECONDS: for a model whose forward takes a fraction of a
 * millisecond (the bundled one: 0.3 ms) three samples let one preempted
 * run set a width's time (a t(1) too high flattens the whole curve) */
#define CALIB_MIN_SECONDS 0.3
#define CALIB_MAX_REPS 200

typedef struct {
    int n_w;                          /* widths measured: 1..n_w */
    double verify_s[CALIB_MAX_W + 1]; /* [w]: seconds for a w-row target forward (index 0 unused) */
    double draft_s;                   /* seconds per drafter round, fixed part (0: free, e.g. n-gram lookup) */
    double draft_tok_s;               /* + seconds per drafted token (LM head rows, DSpark's Markov steps) */
} calib_costs;

/* ---- measurement ---- */

/* Measures the verify curve on s: resets s, prefills a dummy context of
 * ctx_len tokens (ids (i * 7919) % vocab), runs one warm-up n_w-row forward,
 * then at least `reps` passes over w = 1..n_w (interleaved, so slow drift
 * affects all widths alike; more while under CALIB_MIN_SECONDS in all) of
 * seq_append(w rows, w logits rows) + seq_truncate back to ctx_len, and
 * stores the fastest per width in out->verify_s (draft_s = 0; the minimum,
 * because interference from other processes only adds time).
 * Requires 1 <= n_w <= CALIB_MAX_W, 1 <= reps <= 1000, ctx_len >= 1 and
 * ctx_len + n_w <= seq_capacity(s). s is empty afterwards, also on error.
 * Returns 0, or -1 with err filled. */
int calib_measure_verify(seq *s, int n_w, int ctx_len, int reps, calib_costs *out, char *err, size_t errlen);

/* ---- cache ---- */

/* The cache file: $DSPARK_CACHE_DIR/calibration.json, else
 * $XDG_CACHE_HOME/dspark/calibration.json (XDG_CACHE_HOME absolute), else
 * $HOME/.cache/dspark/calibration.json; empty variables count as unset.
 * Returns 0, or -1 when none is set or out (size n) is too small. */
int calib_default_path(char *out, size_t n);

/* Builds the cache key for one configuration into out (size n; use
 * CALIB_KEY_MAX). backend e.g. "cpu"; model_id and drafter_id name the
 * models (drafter_id NULL or "": a target-only entry); dtype e.g. "bf16".
 * The key also names the machine (CPU model name from /proc/cpuinfo, else
 * the CPUID brand string, and the online logical CPU count) and the build
 * (DSPARK_BUILD_ID if defined at compile time, else DSPARK_VERSION if
 * defined plus this file's compile date and time). Field values are
 * percent-escaped, so keys of different configurations differ; a key that
 * would not fit in n ends in '#' and a hash of the whole key. Example:
 *   dspark-calib;backend=cpu;model=Qwen/Qwen3-0.6B;drafter=;dtype=bf16;threads=2;
 *   cpu=Intel(R) Xeon(R) ...;ncpu=2;build=Jan  1 2025 12:00:00 */
void calib_key(char *out, size_t n, const char *backend, const char *model_id, const char *drafter_id,
               const char *dtype, int threads);

/* Looks key up in the cache file at path. Returns 1 and fills *out when the
 * entry exists and is valid; 0 when there is no file or no such entry (warn
 * empty); -1 when the file exists but is unusable (unreadable, not JSON,
 * wrong version or shape, or this entry has wrong types, a verify_s length
 * outside 1..CALIB_MAX_W, or times that are not finite and in (0,
 * CALIB_MAX_SECONDS], draft_s in [0, CALIB_MAX_SECONDS]): warn then says
 * "calibration cache PATH is corrupt (why); ignoring it, it will be
 * rewritten". Any file content is safe to pass. warn may be NULL. */
int calib_load(const char *path, const char *key, calib_costs *out, char *warn, size_t warnlen);

/* Sets key's entry to c (created = now) in the cache file at path, keeping
 * the file's other valid entries (a corrupt file is started afresh), and
 * writes it atomically: PATH.tmp.<pid>, fsync, rename; parent directories
 * are created as needed. c must be valid as calib_load defines it.
 * Returns 0, or -1 with err filled. */
int calib_store(const char *path, const char *key, const calib_costs *c, char *err, size_t errlen);

/* ---- cap choice ---- */

/* The default acceptance prior: alpha_i = 0.6 * 0.95^(i-1), a moderately
 * good drafter (E = 1.94 tokens at k = 2, 2.27 at k = 5). */
#define CALIB_PRIOR_A1 0.6
#define CALIB_PRIOR_DECAY 0.95

/* alpha[i-1] = a1 * decay^(i-1) for i = 1..n, clamped to [0, 1]. A constant
 * acceptance a is calib_prior(alpha, n, a, 1.0). */
void calib_prior(double *alpha, int n, double a1, double decay);

/* Seconds for a w-row verify (w >= 1): measured, or extrapolated beyond
 * n_w as described above. Returns 0 for invalid costs. */
double calib_verify_time(const calib_costs *c, int w);

/* 1 when c has 1 <= n_w <= CALIB_MAX_W, every verify_s[1..n_w] finite and
 * in (0, CALIB_MAX_SECONDS], and draft_s finite and in [0, CALIB_MAX_SECONDS]. */
int calib_costs_valid(const calib_costs *c);

/* The cap k in 0..max_k maximising E(k) / time(k) with alpha[0..max_k)
 * (alpha[i-1] = alpha_i; values outside [0, 1] are clamped, NaN is 0); ties
 * go to the smaller k. *tok_per_s (may be NULL) gets that speed. Invalid
 * costs give 0 and a speed of 0. */
int calib_best_cap(const calib_costs *c, const double *alpha, int max_k, double *tok_per_s);

/* ---- adaptive controller (--max-draft auto) ----
 *
 * Per-position acceptance estimates. For draft position i the controller
 * keeps two exponentially forgotten counts: reach_i, rounds that verified a
 * draft at position i with drafts 1..i-1 accepted, and acc_i, those that
 * accepted it. The estimate is a Beta posterior mean
 *   est_i = (acc_i + W * m_i) / (reach_i + W),   W = CALIB_PRIOR_WEIGHT,
 * with prior mean m_1 = CALIB_PRIOR_A1 and m_i = CALIB_PRIOR_DECAY * est_{i-1}:
 * before any data est_i is exactly the default prior; afterwards a position
 * not yet explored is expected to do almost as well as the one before it,
 * so a drafter that keeps being accepted at the cap gets a larger cap
 * (with a fixed prior the cap would stay where the prior put it).
 *
 * Rounds: calib_ctl_next gives the cap of a round; calib_ctl_observe
 * reports it. Only drafts actually proposed count: a round with proposed
 * == 0 (e.g. lookup found no n-gram) changes nothing, and drafts past the
 * first rejected one are not counted at all. Each round with proposed > 0
 * first multiplies every count by CALIB_FORGET, so the estimates follow
 * the current text (an effective memory of ~10 rounds).
 *
 * Each round's cap is calib_best_cap over the estimates. When that is 0
 * (drafting is expected to be slower than plain decoding), the controller
 * parks: it returns 0 for CALIB_PARK_MIN rounds, then probes with cap
 * min(CALIB_PROBE_CAP, max_k) until a round with proposed > 0 is observed,
 * then decides again: a cap > 0 unparks (the park length returns to
 * CALIB_PARK_MIN); 0 parks again for twice as long (at most
 * CALIB_PARK_MAX rounds). Every parked round also ages the counts by
 * CALIB_FORGET, but never below a weight of CALIB_PRIOR_WEIGHT per
 * position, so after a long park a probe is weighed against both the prior
 * and what caused the parking (1 round against 2 + 2), rather than against
 * the prior alone.
 *
 * Everything is deterministic (no randomness): the same sequence of
 * observations gives the same caps. Costs invalid or NULL: the controller
 * always returns max_k. */
#define CALIB_PRIOR_WEIGHT 2.0 /* Beta prior pseudo-rounds; also the floor of aging while parked */
#define CALIB_FORGET 0.9       /* count decay per informative (or parked) round */
#define CALIB_PARK_MIN 8       /* first park length, rounds */
#define CALIB_PARK_MAX 128     /* longest park, rounds */
#define CALIB_PROBE_CAP 2      /* cap of a probe round */

typedef struct {
    calib_costs costs;
    int have_costs;                /* costs valid */
    int max_k;                     /* 0..CALIB_MAX_K */
    double reach[CALIB_MAX_K + 1]; /* [i]: forgotten count of rounds that verified draft i after i-1 accepts */
    double acc[CALIB_MAX_K + 1];   /* [i]: forgotten count of rounds that accepted draft i */
    int parked;                    /* 1 while parked (counting down or probing) */
    int park_left;                 /* parked rounds still to return 0 before probing */
    int park_len;                  /* length of the next park */
    int probe_seen;                /* a probe round with proposed > 0 was observed */
    int cap;                       /* the last cap returned */
} calib_ctl;

/* costs is copied (may be NULL); max_k is clamped to 0..CALIB_MAX_K. */
void calib_ctl_init(calib_ctl *c, const calib_costs *costs, int max_k);
/* The cap for the next round; 0 = parked (plain decoding this round). */
int calib_ctl_next(calib_ctl *c);
/* After a round: drafts verified (proposed), drafts accepted. */
void calib_ctl_observe(calib_ctl *c, int proposed, int accepted);
/* The current estimates alpha_1..alpha_n into alpha[0..n) (n <= max_k). */
void calib_ctl_estimates(const calib_ctl *c, double *alpha, int n);

#endif
