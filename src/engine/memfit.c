/* memfit: see memfit.h. */
#include "engine/memfit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv.h"
#include "base/util.h"

/* tests/hooks.h: a machine's memory to report instead of /proc's */
static const memfit_sys *g_fake;
void memfit_test_sys(const memfit_sys *fake) { g_fake = fake; }

static double psi_avg10(const char *line) {
    const char *p = strstr(line, "avg10=");
    return p ? atof(p + 6) : -1.0;
}

int memfit_read_sys(memfit_sys *s, char *err, size_t errlen) {
    if (g_fake) {
        *s = *g_fake;
        return 0;
    }
    memset(s, 0, sizeof *s);
    s->psi_some10 = s->psi_full10 = -1.0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return ds_err(err, errlen, "cannot read /proc/meminfo: the memory available is unknown");
    char line[256];
    int have = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        char key[64];
        if (sscanf(line, "%63[^:]: %llu", key, &kb) != 2) continue;
        size_t b = (size_t)kb * 1024;
        if (!strcmp(key, "MemTotal")) s->mem_total = b;
        else if (!strcmp(key, "MemAvailable")) s->mem_avail = b, have = 1;
        else if (!strcmp(key, "SwapTotal")) s->swap_total = b;
        else if (!strcmp(key, "SwapFree")) s->swap_free = b;
    }
    fclose(f);
    if (!have) return ds_err(err, errlen, "/proc/meminfo has no MemAvailable: the memory available is unknown");
    if ((f = fopen("/proc/pressure/memory", "r"))) {
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "some ", 5)) s->psi_some10 = psi_avg10(line);
            else if (!strncmp(line, "full ", 5)) s->psi_full10 = psi_avg10(line);
        }
        fclose(f);
    }
    return 0;
}

int memfit_pressure(const memfit_sys *s, char *why, size_t n) {
    size_t low = s->mem_total / MEMFIT_LOW_DIV > MEMFIT_LOW_MIN ? s->mem_total / MEMFIT_LOW_DIV : MEMFIT_LOW_MIN;
    if (s->mem_avail < low) {
        snprintf(why, n, "MemAvailable %zu MiB < %zu MiB", s->mem_avail >> 20, low >> 20);
        return 1;
    }
    if (s->psi_full10 >= MEMFIT_PSI_FULL) {
        snprintf(why, n, "memory pressure: tasks stalled %.1f%% of the last 10 s", s->psi_full10);
        return 1;
    }
    if (n) *why = 0;
    return 0;
}

static size_t in_slots(const memfit_in *in) { return (size_t)(in->slots > 0 ? in->slots : 1); }
static size_t in_windows(const memfit_in *in) {
    return in->windows > 0 && in->windows < in->slots ? (size_t)in->windows : in_slots(in);
}

/* largest n (a multiple of MEMFIT_ROUND) with slots x fixed + windows x per_pos x n <= room */
static int max_window(const memfit_in *in, size_t room) {
    const size_t slots = in_slots(in), windows = in_windows(in);
    if (room / slots <= in->fixed || !in->per_pos) return 0;
    size_t n = (room - slots * in->fixed) / windows / in->per_pos;
    /* at most the model's window, or the asked one when that is longer */
    size_t cap = (size_t)(in->window > in->max_window ? in->window : in->max_window);
    if (cap > 0 && n > cap) n = cap;
    else n = n / MEMFIT_ROUND * MEMFIT_ROUND;
    if (n > (size_t)(1 << 30)) n = (size_t)1 << 30;
    return n < MEMFIT_MIN_WINDOW ? 0 : (int)n;
}

void memfit_estimate(const memfit_in *in, memfit_out *out) {
    memset(out, 0, sizeof *out);
    size_t reserve = MEMFIT_RESERVE_MIN + in->avail / MEMFIT_RESERVE_DIV;
    out->budget = in->avail > reserve ? in->avail - reserve : 0;
    size_t room = out->budget > in->weights ? out->budget - in->weights : 0;
    int want = in->window > 0 ? in->window : in->max_window;
    out->want = want;
    out->need = in->weights + in_slots(in) * in->fixed + in_windows(in) * in->per_pos * (size_t)(want > 0 ? want : 0);
    out->max_fit = max_window(in, room);
    out->fits = want > 0 && out->need <= out->budget;
    out->window = out->fits ? want : out->max_fit;
}

void memfit_config_bytes(const model_config *c, int kv_bits, int max_batch, size_t *fixed, size_t *per_pos) {
    /* the CPU backend's context (cpu_backend.c cpu_ctx_bytes) */
    size_t B = (size_t)(max_batch > 0 ? max_batch : 64), H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * (size_t)c->head_dim, KD = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    *fixed = sizeof(float) * B * (2 * H + 2 * QD + 2 * KD + 2 * I) + sizeof(int) * B +
             sizeof(float) * (size_t)MODEL_SAMPLE_ROWS * (size_t)c->vocab_size;
    /* the cache in pages (kv.h kv_bytes_resident): sliding layers keep
       about their window, a fixed cost; the others a page's share a
       position and up to a page more (the one the length is in) */
    const int bits = kv_bits ? kv_bits : 32;
    const size_t page = kv_page_bytes(c->n_kv_heads, c->head_dim, bits);
    int full = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->sliding_window > 0 && c->sliding[l])
            *fixed += page * (size_t)kv_window_pages(c->sliding_window);
        else full++;
    }
    *fixed += page * (size_t)full;
    *per_pos = page / KV_PAGE * (size_t)full;
}

/* the estimate's inputs for model m at kv_bits */
static void model_in(const model *m, int kv_bits, int slots, int max_batch, int window, size_t avail, memfit_in *in) {
    model_kv_pages kp;
    /* a context's bytes are linear in its window on both backends (the KV
       cache; the GPU's attention partials): two points give the line */
    /* (sliding layers keep about their window's rows whatever the length:
       the line through two long lengths counts them in the fixed part, an
       upper bound below the window) */
    const int n1 = 1 << 16;
    size_t b1 = model_ctx_bytes(m, n1, max_batch, kv_bits), b2 = model_ctx_bytes(m, 2 * n1, max_batch, kv_bits);
    const size_t per = (b2 - b1 + n1 - 1) / n1, b0 = b1 > per * (size_t)n1 ? b1 - per * (size_t)n1 : 0;
    *in = (memfit_in){.avail = avail, .fixed = b0, .per_pos = per, .slots = slots,
                      .windows = model_get_kv_pages(m, &kp) == 0 ? 1 : slots,
                      .window = window, .max_window = model_cfg(m)->max_position_embeddings};
}

int memfit_model(const model *m, int slots, int max_batch, int window, const memfit_sys *sys, memfit_report *r,
                 char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    size_t avail, total;
    r->kv_bits = model_kv_bits(m);
    r->on_device = model_device_mem(m, &avail, &total);
    if (!r->on_device) {
        memfit_sys now;
        if (!sys) {
            if (memfit_read_sys(&now, err, errlen) != 0) return -1;
            sys = &now;
        }
        /* weights mapped from files are page cache, which MemAvailable
           counts as free; they must stay resident to run at speed */
        size_t mapped = model_mapped_bytes(m);
        avail = sys->mem_avail > mapped ? sys->mem_avail - mapped : 0;
    }
    r->avail = avail;
    memfit_in in;
    model_in(m, r->kv_bits, slots, max_batch, window, avail, &in);
    memfit_estimate(&in, &r->out);
    r->pooled = in.windows == 1 && slots > 1;
    if (in.windows == 1) {
        const size_t scr = in.weights + in_slots(&in) * in.fixed;
        r->pool = r->out.budget > scr ? r->out.budget - scr : 0;
    }
    if (model_kv_low_bits(m)) {
        const int lower[] = {16, 8};
        for (int i = 0; i < 2; i++) {
            if (lower[i] >= r->kv_bits) continue;
            memfit_in a;
            memfit_out o;
            model_in(m, lower[i], slots, max_batch, window, avail, &a);
            memfit_estimate(&a, &o);
            if (o.max_fit > r->out.max_fit) {
                r->alt_bits = lower[i];
                r->alt_window = o.max_fit;
                if (window > 0 ? o.max_fit >= window : o.max_fit >= in.max_window) break; /* enough: the higher storage */
            }
        }
    }
    return 0;
}

/* "14.2 GiB", "310 MiB" */
static const char *human(size_t b, char *buf, size_t n) {
    if (b >= ((size_t)1 << 30)) snprintf(buf, n, "%.1f GiB", (double)b / (double)((size_t)1 << 30));
    else snprintf(buf, n, "%.0f MiB", (double)b / (double)((size_t)1 << 20));
    return buf;
}

void memfit_describe(const memfit_report *r, int slots, char *out, size_t n) {
    const memfit_out *o = &r->out;
    char tail[200];
    if (o->max_fit && r->alt_bits)
        snprintf(tail, sizeof tail, "use --context-window %d (or --kv-bits %d for up to %d)", o->max_fit, r->alt_bits,
                 r->alt_window);
    else if (o->max_fit)
        snprintf(tail, sizeof tail, "use --context-window %d", o->max_fit);
    else if (r->alt_bits)
        snprintf(tail, sizeof tail, "use --kv-bits %d with --context-window %d at most", r->alt_bits, r->alt_window);
    else
        snprintf(tail, sizeof tail, "not even a %d-position window fits", MEMFIT_MIN_WINDOW);
    char h1[32], h2[32], h3[32];
    snprintf(out, n, "the %d-position window needs %s for %d cache slot%s%s at --kv-bits %d; %s of %s is available (%s usable): %s",
             o->want, human(o->need, h1, sizeof h1), slots, slots == 1 ? "" : "s",
             r->pooled ? " (one window of pooled pages)" : "", r->kv_bits,
             human(r->avail, h2, sizeof h2), r->on_device ? "GPU memory" : "memory", human(o->budget, h3, sizeof h3),
             tail);
}
