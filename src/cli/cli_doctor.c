/* cli_doctor: `dspark doctor` (and the server's GET /doctor) and `dspark
 * models`: what this machine and build offer, where models are looked
 * for, and which registered models are here and fit. Both build one JSON
 * report (docs/doctor-schema.md, schema_version DOCTOR_SCHEMA_VERSION);
 * the text forms print from that report, so the two never disagree.
 *
 * Fits are engine/memfit.h's estimate (the one run, chat and serve apply):
 * weights + KV bytes per position x window + scratch against the budget
 * (GPU 0's free memory when this build has CUDA and sees a GPU, else
 * MemAvailable) less memfit's reserve. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/hfcache.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cli.h"
#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/memfit.h"
#include "engine/ops_internal.h" /* ops_level / ops_max_level: the kernel path in use */
#include "engine/tpar.h"
#include "spec/calib.h"
#include "spec/modelref.h"
#include "spec/registry.h"

#define DOCTOR_SCHEMA_VERSION 1

const char DOCTOR_HELP[] =
    "usage: dspark doctor [--models] [--json]\n"
    "What this machine and build offer for dspark: the CPU and its kernel path, each GPU (with a CUDA\n"
    "build), memory, free disk in the model cache, every place models are looked for (in order), the\n"
    "calibration cache, and problems found. The server answers GET /doctor with the same JSON.\n"
    "  --models   also each registered model: downloaded or not, and whether it fits this machine\n"
    "  --json     print the report as JSON (docs/doctor-schema.md), to paste into a bug report\n"
    "Exit status 1 when a problem is listed.\n";

const char MODELS_HELP[] =
    "usage: dspark models [--json]\n"
    "The registered targets (models/registry.json): their Hugging Face builds (bf16, MLX 8/4-bit, GGUF),\n"
    "their DSpark / DFlash drafters with published tokens per round, whether each is downloaded, and\n"
    "whether it fits this machine (and at which --context-window when not at its full window).\n"
    "Any other qwen3 / qwen2 / llama checkpoint runs too: --mode lookup, or --drafter for your own.\n"
    "  --json     print as JSON (the \"models\" array of doctor's schema, docs/doctor-schema.md)\n";

/* ---- the memory estimate ---------------------------------------------- */

/* Weights of a registered target's build, in bits per weight: bf16 16;
 * MLX affine 8 / 4 bits plus a bf16 scale and bias per group of 64; GGUF
 * counted as Q4_K_M (4.85 bits), the build most people take. */
static double build_bits(const char *kind) {
    if (!strcmp(kind, "mlx-8bit")) return 8.5;
    if (!strcmp(kind, "mlx-4bit")) return 4.5;
    if (!strcmp(kind, "gguf")) return 4.85;
    return 16.0;
}

/* A registered target's shapes as the config memfit reads. */
static void entry_config(const registry_entry *e, model_config *c) {
    memset(c, 0, sizeof *c);
    c->hidden_size = e->hidden;
    c->intermediate_size = e->intermediate;
    c->n_heads = e->heads;
    c->n_kv_heads = e->kv_heads;
    c->head_dim = e->head_dim;
    c->vocab_size = e->vocab;
    c->n_layers = e->layers;
    c->max_position_embeddings = e->max_pos;
}

/* memfit's estimate (engine/memfit.h, the one every command uses) for
 * registered target e in build kind, one cache slot, its full window, the
 * KV cache at kv_bits (32, 16 or 8), against budget bytes available; the
 * weights from the parameter count at the build's bits per weight. */
static void estimate(const registry_entry *e, const char *kind, int kv_bits, double budget, memfit_out *out,
                     size_t *weights, size_t *fixed, size_t *per_pos) {
    double H = e->hidden, I = e->intermediate, V = e->vocab, L = e->layers;
    double QD = (double)e->heads * e->head_dim, KD = (double)e->kv_heads * e->head_dim;
    double params = L * (H * QD * 2 + H * KD * 2 + 3 * H * I) + V * H * (e->tied ? 1 : 2);
    model_config c;
    entry_config(e, &c);
    *weights = (size_t)(params * build_bits(kind) / 8);
    memfit_config_bytes(&c, kv_bits, 0, fixed, per_pos);
    memfit_in in = {.avail = budget > 0 ? (size_t)budget : 0, .weights = *weights, .fixed = *fixed,
                    .per_pos = *per_pos, .slots = 1, .window = 0, .max_window = e->max_pos};
    memfit_estimate(&in, out);
}

/* memfit's estimate for one rank of registered target e split over ranks
 * GPUs (engine/tpar.h): its share of the weights, its KV heads (one when
 * they are replicated) and its scratch, at the full window against one
 * GPU's budget. 0, or -1 when the shapes do not split over ranks. */
static int rank_estimate(const registry_entry *e, const char *kind, int ranks, double budget, memfit_out *out,
                         size_t *weights) {
    model_config c;
    entry_config(e, &c);
    tpar_plan p;
    char err[256];
    if (tpar_plan_make(&p, &c, ranks, err, sizeof err) != 0) return -1;
    size_t w, fixed, per_pos;
    estimate(e, kind, 32, 0, out, &w, &fixed, &per_pos);
    c.n_heads = p.heads, c.n_kv_heads = p.kv_heads, c.intermediate_size = p.inter;
    *weights = w / (size_t)ranks;
    memfit_config_bytes(&c, 32, 0, &fixed, &per_pos);
    memfit_in in = {.avail = budget > 0 ? (size_t)budget : 0, .weights = *weights, .fixed = fixed,
                    .per_pos = per_pos, .slots = 1, .window = 0, .max_window = e->max_pos};
    memfit_estimate(&in, out);
    return 0;
}

/* ---- machine facts ---------------------------------------------------- */

/* a "Key:   N kB" line of /proc/meminfo in bytes, or -1 */
static double meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = strtod(line + kl + 1, NULL) * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* /proc/pressure/memory's "some" and "full" avg10 (percent of the last 10
   s that tasks stalled on memory), or NULL where the kernel has no PSI */
static cJSON *pressure(void) {
    FILE *f = fopen("/proc/pressure/memory", "r");
    if (!f) return NULL;
    cJSON *o = cJSON_CreateObject();
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char kind[8];
        double a10, a60, a300;
        if (sscanf(line, "%7s avg10=%lf avg60=%lf avg300=%lf", kind, &a10, &a60, &a300) != 4) continue;
        char k[32];
        snprintf(k, sizeof k, "%s_avg10", kind);
        cJSON_AddNumberToObject(o, k, a10);
        snprintf(k, sizeof k, "%s_avg60", kind);
        cJSON_AddNumberToObject(o, k, a60);
    }
    fclose(f);
    return o;
}

/* free bytes on the file system holding path (or its nearest existing
   parent); the folder measured into where */
static double disk_free(const char *path, char *where, size_t n) {
    snprintf(where, n, "%s", path);
    struct statvfs sv;
    while (statvfs(where, &sv) != 0) {
        char *slash = strrchr(where, '/');
        if (!slash || slash == where) {
            snprintf(where, n, "/");
            if (statvfs(where, &sv) != 0) return -1;
            break;
        }
        *slash = 0;
    }
    return (double)sv.f_bavail * (double)sv.f_frsize;
}

static cJSON *cpu_json(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", cpu_name());
    cJSON_AddNumberToObject(o, "logical_cpus", cpu_count());
    cpu_feature fs[16];
    int nf = cpu_feature_list(fs, 16);
    cJSON *f = cJSON_AddObjectToObject(o, "features");
    for (int i = 0; i < nf; i++) cJSON_AddBoolToObject(f, fs[i].name, fs[i].present);
    static const char *paths[] = {"scalar", "avx2", "avx512"};
    int lvl = ops_level(), mx = ops_max_level();
    cJSON_AddNumberToObject(o, "ops_level", lvl);
    cJSON_AddStringToObject(o, "kernel_path", lvl >= 0 && lvl <= 2 ? paths[lvl] : "?");
    cJSON_AddStringToObject(o, "best_kernel_path", mx >= 0 && mx <= 2 ? paths[mx] : "?");
    return o;
}

static cJSON *build_json(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", DSPARK_VERSION);
    cJSON_AddBoolToObject(o, "cuda", backend_built("cuda"));
    cJSON *s = cJSON_AddArrayToObject(o, "simd_compiled");
#ifdef DS_HAVE_AVX2_PATH
    cJSON_AddItemToArray(s, cJSON_CreateString("avx2"));
    cJSON_AddItemToArray(s, cJSON_CreateString("avx512"));
#else
    (void)s;
#endif
    return o;
}

static cJSON *gpus_json(cJSON *problems, double *budget_gpu) {
    cJSON *o = cJSON_CreateObject();
    int built = backend_built("cuda");
    cJSON_AddBoolToObject(o, "cuda_built", built);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    *budget_gpu = -1;
    if (!built) {
        cJSON_AddStringToObject(o, "note", "this dspark was built without CUDA: GPUs are not used (build with `make cuda`)");
        return o;
    }
    int n = backend_device_count("cuda");
    if (n == 0) {
        cJSON_AddStringToObject(o, "note", "no CUDA device is visible (driver not loaded, or CUDA_VISIBLE_DEVICES)");
        cJSON_AddItemToArray(problems, cJSON_CreateString("a CUDA build, but no CUDA device is visible"));
    }
    for (int i = 0; i < n; i++) {
        backend_device_info d;
        char err[512];
        cJSON *g = cJSON_CreateObject();
        cJSON_AddNumberToObject(g, "index", i);
        if (backend_query_device("cuda", i, &d, err, sizeof err) != 0) {
            cJSON_AddStringToObject(g, "error", err);
            cJSON_AddItemToArray(devs, g);
            char msg[700];
            snprintf(msg, sizeof msg, "GPU %d: %s", i, err);
            cJSON_AddItemToArray(problems, cJSON_CreateString(msg));
            continue;
        }
        char v[32];
        cJSON_AddStringToObject(g, "name", d.name);
        cJSON_AddNumberToObject(g, "memory_total_bytes", (double)d.mem_total);
        cJSON_AddNumberToObject(g, "memory_free_bytes", (double)d.mem_free);
        snprintf(v, sizeof v, "%d.%d", d.cc_major, d.cc_minor);
        cJSON_AddStringToObject(g, "compute_capability", v);
        snprintf(v, sizeof v, "%d.%d", d.driver_version / 1000, (d.driver_version % 1000) / 10);
        cJSON_AddStringToObject(g, "driver_version", v);
        snprintf(v, sizeof v, "%d.%d", d.runtime_version / 1000, (d.runtime_version % 1000) / 10);
        cJSON_AddStringToObject(g, "runtime_version", v);
        cJSON_AddBoolToObject(g, "kernels", d.has_kernels);
        if (!d.has_kernels) {
            cJSON_AddStringToObject(g, "kernels_note", d.kernels_note);
            char msg[700];
            snprintf(msg, sizeof msg, "GPU %d (%s): %s", i, d.name, d.kernels_note);
            cJSON_AddItemToArray(problems, cJSON_CreateString(msg));
        } else if (*budget_gpu < 0) {
            *budget_gpu = (double)d.mem_free; /* the device --device cuda takes */
        }
        cJSON_AddItemToArray(devs, g);
    }
    return o;
}

int doctor_tp_largest(int ranks, double budget, const char **name, const char **kind, double *weights) {
    int ne, found = 0;
    const registry_entry *es = registry_entries(&ne);
    *name = *kind = NULL;
    *weights = 0;
    for (int i = 0; i < ne; i++) {
        static const registry_build bundled = {"bf16", NULL};
        int nb = es[i].bundled ? 1 : es[i].n_builds;
        for (int j = 0; j < nb; j++) {
            const char *k = es[i].bundled ? bundled.kind : es[i].builds[j].kind;
            memfit_out fo;
            size_t w;
            if (rank_estimate(&es[i], k, ranks, budget, &fo, &w) == 0 && fo.fits &&
                (double)w * ranks > *weights) {
                *name = es[i].target, *kind = k, *weights = (double)w * ranks;
                found = 1;
            }
        }
    }
    return found;
}

/* Tensor parallelism (--tensor-parallel N): what each device kind does,
 * the links between this host's GPUs, and for each power-of-two count of
 * GPUs the largest registered build whose rank fits each of them (the
 * smallest free memory among the first N) at its full window. */
static cJSON *tp_json(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "max_ranks", TPAR_MAX_RANKS);
    cJSON_AddStringToObject(o, "cpu", "emulated: --tensor-parallel N with --device cpu runs N ranks in one process "
                                      "(a test of the split, not a speedup)");
    cJSON_AddStringToObject(o, "cuda", "not built: --tensor-parallel N > 1 with --device cuda is refused "
                                       "(multi-GPU tensor parallelism is to come)");
    int n = backend_built("cuda") ? backend_device_count("cuda") : 0;
    double free_b[TPAR_MAX_RANKS];
    int usable = 0;
    for (int i = 0; i < n && i < TPAR_MAX_RANKS; i++) {
        backend_device_info d;
        char err[512];
        if (backend_query_device("cuda", i, &d, err, sizeof err) != 0 || !d.has_kernels) break;
        free_b[usable++] = (double)d.mem_free;
    }
    cJSON_AddNumberToObject(o, "gpus", usable);
    cJSON *links = cJSON_AddArrayToObject(o, "links");
    for (int a = 0; a < usable; a++)
        for (int b = a + 1; b < usable; b++) {
            backend_peer_info pi;
            char err[512];
            cJSON *l = cJSON_CreateObject();
            cJSON_AddNumberToObject(l, "a", a);
            cJSON_AddNumberToObject(l, "b", b);
            if (backend_query_peer("cuda", a, b, &pi, err, sizeof err) != 0) {
                cJSON_AddStringToObject(l, "error", err);
            } else {
                cJSON_AddBoolToObject(l, "peer_access", pi.peer_access);
                cJSON_AddBoolToObject(l, "native_atomics", pi.native_atomics);
                cJSON_AddNumberToObject(l, "performance_rank", pi.perf_rank);
                cJSON_AddStringToObject(l, "link", !pi.peer_access ? "no peer access (through host memory)"
                                                   : pi.native_atomics ? "peer, with native atomics (NVLink class)"
                                                                       : "peer, without native atomics (PCIe class)");
            }
            cJSON_AddItemToArray(links, l);
        }
    cJSON *fits = cJSON_AddArrayToObject(o, "fits");
    for (int ranks = 1; ranks <= usable; ranks *= 2) {
        double budget = free_b[0];
        for (int i = 1; i < ranks; i++) budget = free_b[i] < budget ? free_b[i] : budget;
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "ranks", ranks);
        cJSON_AddNumberToObject(f, "device_bytes", budget);
        const char *best_name, *best_kind;
        double best_w;
        const int found = doctor_tp_largest(ranks, budget, &best_name, &best_kind, &best_w);
        if (found) {
            cJSON *b = cJSON_AddObjectToObject(f, "largest");
            cJSON_AddStringToObject(b, "name", best_name);
            cJSON_AddStringToObject(b, "kind", best_kind);
            cJSON_AddNumberToObject(b, "weights_bytes", best_w);
        } else {
            cJSON_AddNullToObject(f, "largest");
        }
        cJSON_AddItemToArray(fits, f);
    }
    if (!usable)
        cJSON_AddStringToObject(o, "note", backend_built("cuda") ? "no CUDA device with this build's kernels is visible"
                                                                 : "this dspark was built without CUDA: no GPUs to split over");
    return o;
}

static cJSON *memory_json(cJSON *problems) {
    cJSON *o = cJSON_CreateObject();
    double tot = meminfo("MemTotal"), av = meminfo("MemAvailable"), st = meminfo("SwapTotal"), sf = meminfo("SwapFree");
    cJSON_AddNumberToObject(o, "total_bytes", tot);
    cJSON_AddNumberToObject(o, "available_bytes", av);
    cJSON_AddNumberToObject(o, "swap_total_bytes", st);
    cJSON_AddNumberToObject(o, "swap_free_bytes", sf);
    cJSON *p = pressure();
    if (p) cJSON_AddItemToObject(o, "pressure", p);
    else cJSON_AddNullToObject(o, "pressure");
    if (tot < 0 || av < 0) cJSON_AddItemToArray(problems, cJSON_CreateString("cannot read /proc/meminfo"));
    const cJSON *full = p ? cJSON_GetObjectItemCaseSensitive(p, "full_avg10") : NULL;
    if (full && full->valuedouble >= 10) {
        char msg[200];
        snprintf(msg, sizeof msg, "memory pressure: tasks stalled on memory %.0f%% of the last 10 s (swapping?)",
                 full->valuedouble);
        cJSON_AddItemToArray(problems, cJSON_CreateString(msg));
    }
    return o;
}

static cJSON *places_json(void) {
    modelref_place pl[MODELREF_MAX_PLACES];
    int n = modelref_places(MODELREF_DRAFTER, NULL, pl, MODELREF_MAX_PLACES);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        struct stat sb;
        cJSON_AddStringToObject(o, "what", pl[i].what);
        cJSON_AddStringToObject(o, "path", pl[i].path);
        cJSON_AddBoolToObject(o, "exists", stat(pl[i].path, &sb) == 0 && S_ISDIR(sb.st_mode));
        cJSON_AddBoolToObject(o, "drafters_only", pl[i].drafters_only);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* the calibration cache's entries, each checked as calib_load checks it */
static cJSON *calib_json(void) {
    cJSON *o = cJSON_CreateObject();
    char path[4096];
    if (calib_default_path(path, sizeof path) != 0) {
        cJSON_AddNullToObject(o, "path");
        cJSON_AddStringToObject(o, "error", "no cache folder: none of DSPARK_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
        cJSON_AddArrayToObject(o, "entries");
        return o;
    }
    cJSON_AddStringToObject(o, "path", path);
    cJSON *entries = cJSON_AddArrayToObject(o, "entries");
    if (!ds_file_exists(path)) {
        cJSON_AddNullToObject(o, "error");
        return o;
    }
    char err[512];
    cJSON *root = json_parse_file(path, err, sizeof err);
    const cJSON *es = root ? cJSON_GetObjectItemCaseSensitive(root, "entries") : NULL;
    if (!cJSON_IsObject(es)) {
        cJSON_AddStringToObject(o, "error", root ? "no \"entries\" object (it will be rewritten)" : err);
        cJSON_Delete(root);
        return o;
    }
    for (const cJSON *e = es->child; e; e = e->next) {
        cJSON *x = cJSON_CreateObject();
        calib_costs c;
        char warn[512] = "";
        int rc = calib_load(path, e->string, &c, warn, sizeof warn);
        cJSON_AddStringToObject(x, "key", e->string);
        cJSON_AddBoolToObject(x, "valid", rc == 1);
        if (rc == 1) cJSON_AddNumberToObject(x, "widths", c.n_w);
        const cJSON *cr = cJSON_GetObjectItemCaseSensitive(e, "created");
        if (cJSON_IsNumber(cr)) cJSON_AddNumberToObject(x, "created", cr->valuedouble);
        cJSON_AddItemToArray(entries, x);
    }
    cJSON_AddNullToObject(o, "error");
    cJSON_Delete(root);
    return o;
}

/* ---- models ----------------------------------------------------------- */

static void add_path_or_null(cJSON *o, const char *key, int found, const char *path) {
    if (found) cJSON_AddStringToObject(o, key, path);
    else cJSON_AddNullToObject(o, key);
}

/* fit of one build: as is (f32 KV cache), else the window / KV width that
   would fit: the widest window at 32 bits first, then the narrowest KV
   width that gives the full window, or the widest window at 8 bits */
static cJSON *fit_json(const registry_entry *e, const char *kind, double budget) {
    cJSON *o = cJSON_CreateObject();
    memfit_out f;
    size_t weights, fixed, per_pos;
    estimate(e, kind, 32, budget, &f, &weights, &fixed, &per_pos);
    cJSON_AddNumberToObject(o, "weights_bytes", (double)weights);
    cJSON_AddNumberToObject(o, "kv_bytes_per_position", (double)per_pos);
    cJSON_AddNumberToObject(o, "scratch_bytes", (double)fixed);
    cJSON_AddNumberToObject(o, "need_bytes", (double)f.need);
    cJSON_AddNumberToObject(o, "window", e->max_pos);
    if (budget <= 0) {
        cJSON_AddNullToObject(o, "fits");
        cJSON_AddArrayToObject(o, "suggest");
        return o;
    }
    cJSON_AddBoolToObject(o, "fits", f.fits);
    cJSON *sug = cJSON_AddArrayToObject(o, "suggest");
    if (f.fits) return o;
    static const int kvs[] = {32, 16, 8};
    for (int i = 0; i < 3; i++) {
        memfit_out g;
        estimate(e, kind, kvs[i], budget, &g, &weights, &fixed, &per_pos);
        int w = g.fits ? e->max_pos : g.max_fit;
        if (w < MEMFIT_MIN_WINDOW || (i > 0 && !g.fits && kvs[i] != 8)) continue;
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "context_window", w);
        cJSON_AddNumberToObject(x, "kv_bits", kvs[i]);
        cJSON_AddItemToArray(sug, x);
        if (i > 0) break;
    }
    return o;
}

static cJSON *drafter_json(const registry_drafter *d, const char *target_path) {
    if (!d->id) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    char path[4096];
    cJSON_AddStringToObject(o, "id", d->id);
    int found = registry_find_local(d->id, target_path, path, sizeof path);
    cJSON_AddBoolToObject(o, "downloaded", found);
    add_path_or_null(o, "path", found, path);
    if (d->acceptance) cJSON_AddItemToObject(o, "acceptance", cJSON_Duplicate(d->acceptance, 1));
    else cJSON_AddNullToObject(o, "acceptance");
    return o;
}

static cJSON *models_json(double budget) {
    int n;
    const registry_entry *es = registry_entries(&n);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const registry_entry *e = &es[i];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", e->target);
        if (e->hf_id) cJSON_AddStringToObject(t, "hf_id", e->hf_id);
        else cJSON_AddNullToObject(t, "hf_id");
        cJSON_AddBoolToObject(t, "bundled", e->bundled);
        cJSON_AddNumberToObject(t, "max_position_embeddings", e->max_pos);
        cJSON *bs = cJSON_AddArrayToObject(t, "builds");
        char first_path[4096] = "";
        /* the bundled model: one bf16 build, in models/ (no hub id) */
        static const registry_build bundled = {"bf16", NULL};
        int nb = e->bundled ? 1 : e->n_builds;
        for (int j = 0; j < nb; j++) {
            const registry_build *b = e->bundled ? &bundled : &e->builds[j];
            cJSON *x = cJSON_CreateObject();
            char path[4096];
            int found;
            if (e->bundled) found = registry_bundled_dir(path, sizeof path);
            else found = modelref_find_id(b->id, MODELREF_TARGET, NULL, path, sizeof path) != 0;
            cJSON_AddStringToObject(x, "kind", b->kind);
            if (b->id) cJSON_AddStringToObject(x, "id", b->id);
            else cJSON_AddNullToObject(x, "id");
            cJSON_AddBoolToObject(x, "downloaded", found);
            add_path_or_null(x, "path", found, path);
            cJSON_AddItemToObject(x, "memory", fit_json(e, b->kind, budget));
            cJSON_AddItemToArray(bs, x);
            if (found && !first_path[0]) snprintf(first_path, sizeof first_path, "%s", path);
        }
        cJSON *ds = cJSON_AddObjectToObject(t, "drafters");
        cJSON_AddItemToObject(ds, "dspark", drafter_json(&e->dspark_d, first_path[0] ? first_path : NULL));
        cJSON_AddItemToObject(ds, "dflash", drafter_json(&e->dflash_d, first_path[0] ? first_path : NULL));
        cJSON_AddItemToArray(a, t);
    }
    return a;
}

static cJSON *registry_json(void) {
    const char *path, *error;
    int n;
    registry_entries(&n);
    registry_source(&path, &error);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    if (*error) cJSON_AddStringToObject(o, "error", error);
    else cJSON_AddNullToObject(o, "error");
    cJSON_AddNumberToObject(o, "targets", n);
    return o;
}

/* the memory models are checked against (see the file comment) */
static cJSON *budget_json(double gpu_free, double *budget) {
    cJSON *o = cJSON_CreateObject();
    if (gpu_free > 0) {
        cJSON_AddStringToObject(o, "device", "cuda:0");
        *budget = gpu_free;
    } else {
        cJSON_AddStringToObject(o, "device", "cpu");
        *budget = meminfo("MemAvailable");
    }
    cJSON_AddNumberToObject(o, "bytes", *budget);
    cJSON_AddNumberToObject(o, "reserve_bytes", (double)MEMFIT_RESERVE_MIN + *budget / MEMFIT_RESERVE_DIV);
    return o;
}

cJSON *doctor_report(int with_models) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "schema_version", DOCTOR_SCHEMA_VERSION);
    cJSON *problems = cJSON_CreateArray(); /* "ok" and "problems" are added once every check has run */
    cJSON_AddItemToObject(r, "build", build_json());
    cJSON_AddItemToObject(r, "cpu", cpu_json());
    double gpu_free;
    cJSON_AddItemToObject(r, "gpus", gpus_json(problems, &gpu_free));
    cJSON_AddItemToObject(r, "memory", memory_json(problems));
    char root[2048], where[2048];
    hf_cache_root(root, sizeof root);
    cJSON *d = cJSON_AddObjectToObject(r, "disk");
    double fr = disk_free(root, where, sizeof where);
    cJSON_AddStringToObject(d, "cache", root);
    cJSON_AddStringToObject(d, "measured_at", where);
    cJSON_AddNumberToObject(d, "free_bytes", fr);
    cJSON_AddItemToObject(r, "model_places", places_json());
    cJSON *reg = registry_json();
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(reg, "error");
    if (cJSON_IsString(re)) cJSON_AddItemToArray(problems, cJSON_CreateString(re->valuestring));
    cJSON_AddItemToObject(r, "registry", reg);
    cJSON_AddItemToObject(r, "calibration", calib_json());
    double budget;
    cJSON_AddItemToObject(r, "budget", budget_json(gpu_free, &budget));
    cJSON_AddItemToObject(r, "tensor_parallel", tp_json());
    if (with_models) cJSON_AddItemToObject(r, "models", models_json(budget));
    /* first in the printed JSON: what a bug report's reader looks at first */
    cJSON_AddItemToObject(r, "problems", problems);
    cJSON_AddBoolToObject(r, "ok", cJSON_GetArraySize(problems) == 0);
    return r;
}

/* ---- text ------------------------------------------------------------- */

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const cJSON *obj(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static void gib(char *out, size_t n, double bytes) {
    if (bytes < 0) snprintf(out, n, "?");
    else snprintf(out, n, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
}

static void print_fit(const cJSON *mem, char *out, size_t n) {
    const cJSON *fits = obj(mem, "fits"), *x;
    char need[32];
    gib(need, sizeof need, num(mem, "need_bytes"));
    if (cJSON_IsTrue(fits)) {
        snprintf(out, n, "yes (%s at %d)", need, (int)num(mem, "window"));
        return;
    }
    if (!cJSON_IsFalse(fits)) {
        snprintf(out, n, "?");
        return;
    }
    if (!cJSON_GetArraySize(obj(mem, "suggest"))) {
        snprintf(out, n, "no (%s)", need);
        return;
    }
    size_t k = (size_t)snprintf(out, n, "with");
    const char *sep = " ";
    cJSON_ArrayForEach(x, obj(mem, "suggest")) {
        if (k >= n) break;
        if (num(x, "kv_bits") != 32)
            k += (size_t)snprintf(out + k, n - k, "%s--context-window %d --kv-bits %d", sep, (int)num(x, "context_window"),
                                  (int)num(x, "kv_bits"));
        else
            k += (size_t)snprintf(out + k, n - k, "%s--context-window %d", sep, (int)num(x, "context_window"));
        sep = ", or ";
    }
}

static void print_models(const cJSON *models) {
    printf("%-16s %-9s %-34s %-10s %s\n", "target", "build", "id", "downloaded", "fits");
    const cJSON *t;
    cJSON_ArrayForEach(t, models) {
        int first = 1;
        const cJSON *b;
        cJSON_ArrayForEach(b, obj(t, "builds")) {
            char fit[256];
            print_fit(obj(b, "memory"), fit, sizeof fit);
            printf("%-16s %-9s %-34s %-10s %s\n", first ? str(t, "name") : "", str(b, "kind"),
                   str(b, "id") ? str(b, "id") : "(bundled: models/)",
                   cJSON_IsTrue(obj(b, "downloaded")) ? "yes" : "no", fit);
            first = 0;
        }
        static const char *kinds[] = {"dspark", "dflash"};
        for (int k = 0; k < 2; k++) {
            const cJSON *d = obj(obj(t, "drafters"), kinds[k]);
            if (!cJSON_IsObject(d)) continue;
            printf("%-16s %-9s %-34s %-10s", "", kinds[k], str(d, "id"), cJSON_IsTrue(obj(d, "downloaded")) ? "yes" : "no");
            const cJSON *a = obj(d, "acceptance"), *x;
            if (cJSON_IsObject(a)) {
                printf(" published tokens/round:");
                cJSON_ArrayForEach(x, a) if (cJSON_IsNumber(x)) printf(" %s %.2f", x->string, x->valuedouble);
            }
            printf("\n");
        }
    }
}

static void print_doctor(const cJSON *r) {
    char a[32], b[32], c[32];
    const cJSON *x, *bd = obj(r, "build"), *cpu = obj(r, "cpu");
    printf("dspark %s, CUDA %s, SIMD kernels compiled:", str(bd, "version"),
           cJSON_IsTrue(obj(bd, "cuda")) ? "built" : "not built");
    cJSON_ArrayForEach(x, obj(bd, "simd_compiled")) printf(" %s", x->valuestring);
    printf("\ncpu: %s, %d logical CPUs, kernel path %s (best here %s)\n  features:", str(cpu, "name"),
           (int)num(cpu, "logical_cpus"), str(cpu, "kernel_path"), str(cpu, "best_kernel_path"));
    cJSON_ArrayForEach(x, obj(cpu, "features")) printf(" %s%s", cJSON_IsTrue(x) ? "+" : "-", x->string);
    const cJSON *g = obj(r, "gpus");
    printf("\ngpus:%s%s\n", str(g, "note") ? " " : "", str(g, "note") ? str(g, "note") : "");
    cJSON_ArrayForEach(x, obj(g, "devices")) {
        if (str(x, "error")) {
            printf("  %d: %s\n", (int)num(x, "index"), str(x, "error"));
            continue;
        }
        gib(a, sizeof a, num(x, "memory_total_bytes"));
        gib(b, sizeof b, num(x, "memory_free_bytes"));
        printf("  %d: %s, %s (%s free), compute %s, driver %s, runtime %s, kernels: %s\n", (int)num(x, "index"),
               str(x, "name"), a, b, str(x, "compute_capability"), str(x, "driver_version"), str(x, "runtime_version"),
               cJSON_IsTrue(obj(x, "kernels")) ? "yes" : str(x, "kernels_note"));
    }
    const cJSON *m = obj(r, "memory"), *p = obj(m, "pressure");
    gib(a, sizeof a, num(m, "total_bytes"));
    gib(b, sizeof b, num(m, "available_bytes"));
    gib(c, sizeof c, num(m, "swap_total_bytes"));
    printf("memory: %s, %s available, swap %s", a, b, c);
    if (cJSON_IsObject(p)) printf(", pressure some %.1f%% full %.1f%% (avg10)", num(p, "some_avg10"), num(p, "full_avg10"));
    const cJSON *d = obj(r, "disk");
    gib(a, sizeof a, num(d, "free_bytes"));
    printf("\ndisk: %s free at %s (the Hugging Face cache: %s)\n", a, str(d, "measured_at"), str(d, "cache"));
    printf("models are looked for in (in order; an existing local path always wins):\n");
    int i = 1;
    cJSON_ArrayForEach(x, obj(r, "model_places")) printf("  %d. %s: %s%s%s\n", i++, str(x, "what"), str(x, "path"),
                                                         cJSON_IsTrue(obj(x, "exists")) ? "" : " (absent)",
                                                         cJSON_IsTrue(obj(x, "drafters_only")) ? " (drafters)" : "");
    const cJSON *reg = obj(r, "registry");
    printf("registry: %s, %d targets\n", *str(reg, "path") ? str(reg, "path") : "(none)", (int)num(reg, "targets"));
    const cJSON *cal = obj(r, "calibration");
    printf("calibration: %s", str(cal, "path") ? str(cal, "path") : "(no cache folder)");
    if (str(cal, "error")) printf(" (%s)", str(cal, "error"));
    printf(", %d entries\n", cJSON_GetArraySize(obj(cal, "entries")));
    cJSON_ArrayForEach(x, obj(cal, "entries")) printf("  %s%s\n", str(x, "key"), cJSON_IsTrue(obj(x, "valid")) ? "" : " (invalid)");
    const cJSON *tp = obj(r, "tensor_parallel");
    printf("tensor parallel (--tensor-parallel N, at most %d): cpu %s; cuda %s\n", (int)num(tp, "max_ranks"),
           str(tp, "cpu"), str(tp, "cuda"));
    if (str(tp, "note")) printf("  %s\n", str(tp, "note"));
    cJSON_ArrayForEach(x, obj(tp, "links")) {
        if (str(x, "error")) printf("  GPUs %d-%d: %s\n", (int)num(x, "a"), (int)num(x, "b"), str(x, "error"));
        else printf("  GPUs %d-%d: %s, performance rank %d\n", (int)num(x, "a"), (int)num(x, "b"), str(x, "link"),
                    (int)num(x, "performance_rank"));
    }
    cJSON_ArrayForEach(x, obj(tp, "fits")) {
        const cJSON *l = obj(x, "largest");
        gib(a, sizeof a, num(x, "device_bytes"));
        if (cJSON_IsObject(l)) {
            gib(b, sizeof b, num(l, "weights_bytes"));
            printf("  %d GPU%s (%s free each): the largest registered build that fits is %s %s (%s of weights)\n",
                   (int)num(x, "ranks"), num(x, "ranks") > 1 ? "s" : "", a, str(l, "name"), str(l, "kind"), b);
        } else {
            printf("  %d GPU%s (%s free each): no registered build fits\n", (int)num(x, "ranks"),
                   num(x, "ranks") > 1 ? "s" : "", a);
        }
    }
    const cJSON *bu = obj(r, "budget");
    gib(a, sizeof a, num(bu, "bytes"));
    if (obj(r, "models")) {
        printf("models (fit: within %s on %s less a reserve):\n", a, str(bu, "device"));
        print_models(obj(r, "models"));
    }
    const cJSON *pr = obj(r, "problems");
    cJSON_ArrayForEach(x, pr) printf("problem: %s\n", x->valuestring);
    printf("-- %s\n", cJSON_GetArraySize(pr) ? "problems above" : "ok");
}

static void print_json(cJSON *r) {
    char *s = cJSON_Print(r);
    puts(s);
    free(s);
}

int cmd_doctor(const opts *o) {
    cJSON *r = doctor_report(o->list_models);
    int ok = cJSON_IsTrue(obj(r, "ok"));
    if (o->json_out) print_json(r);
    else print_doctor(r);
    cJSON_Delete(r);
    return ok ? 0 : 1;
}

int cmd_models(const opts *o) {
    double gpu_free, budget;
    cJSON *problems = cJSON_CreateArray();
    cJSON *g = gpus_json(problems, &gpu_free);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "schema_version", DOCTOR_SCHEMA_VERSION);
    cJSON_AddItemToObject(r, "registry", registry_json());
    cJSON *bu = budget_json(gpu_free, &budget);
    cJSON_AddItemToObject(r, "budget", bu);
    cJSON_AddItemToObject(r, "models", models_json(budget));
    cJSON_Delete(g);
    cJSON_Delete(problems);
    const cJSON *re = obj(obj(r, "registry"), "error");
    int rc = cJSON_IsString(re) ? 1 : 0;
    if (o->json_out) {
        print_json(r);
    } else if (rc) {
        fprintf(stderr, "dspark: %s\n", re->valuestring);
    } else {
        char a[32];
        gib(a, sizeof a, budget);
        printf("registered targets (%s); fits: within %s on %s less a reserve (as run and serve count)\n",
               str(obj(r, "registry"), "path"), a, str(bu, "device"));
        print_models(obj(r, "models"));
        printf("Any other qwen3 / qwen2 / llama checkpoint works too: --mode lookup needs no drafter, --drafter DIR "
               "takes your own; --mode baseline decodes plainly. Get one with `dspark pull ID`.\n");
    }
    cJSON_Delete(r);
    return rc;
}
