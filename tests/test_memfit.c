/* memfit: the memory estimate (engine/memfit.h) on known figures, the
 * window the commands choose or refuse (a fake machine through
 * tests/hooks.h, and the real binary), the server's memory guard shedding
 * an idle cache slot, and /health's warnings. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "cli/cli.h"
#include "engine/kv.h"
#include "engine/memfit.h"
#include "engine/model.h"
#include "server/sched.h"
#include "server/serve_internal.h"
#include "spec/registry.h"
#include "spec/seq.h"
#include "hooks.h"
#include "test.h"

#define GiB ((size_t)1 << 30)
#define MiB ((size_t)1 << 20)

static const char *bundled(void) {
    static char d[600];
    snprintf(d, sizeof d, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    return d;
}

TEST(memfit_estimate_numbers) {
    /* a Qwen3-0.6B's shape: 28 layers, 8 KV heads of 128 */
    model_config c = {.n_layers = 28, .n_kv_heads = 8, .head_dim = 128, .n_heads = 16, .hidden_size = 1024,
                      .intermediate_size = 3072, .vocab_size = 151936, .max_position_embeddings = 40960};
    size_t fixed, per;
    memfit_config_bytes(&c, 32, 64, &fixed, &per);
    CHECK_EQ_INT(per, 229376); /* 2 x 28 x 8 x 128 x 4 */
    memfit_config_bytes(&c, 16, 64, &fixed, &per);
    CHECK_EQ_INT(per, 114688);
    memfit_config_bytes(&c, 8, 64, &fixed, &per);
    CHECK_EQ_INT(per, 59136); /* 2 x 28 x 8 x (128 + 4) */
    /* fixed: 64 rows of activations, 65 logits rows and a page of each
       layer's cache (the one the length is in: 128 positions) */
    CHECK_EQ_INT(fixed, 4 * 64 * (2 * 1024 + 2 * 2048 + 2 * 1024 + 2 * 3072) + 4 * 64 + 4 * 65 * 151936 +
                            28 * 128 * (2 * 8 * (128 + 4)));

    /* 16 GiB free: budget = 16 GiB - 256 MiB - 16 GiB / 20 */
    memfit_in in = {.avail = 16 * GiB, .weights = 1 * GiB, .fixed = 0, .per_pos = 229376, .slots = 2,
                    .window = 0, .max_window = 40960};
    memfit_out o;
    memfit_estimate(&in, &o);
    size_t budget = 16 * GiB - 256 * MiB - 16 * GiB / 20;
    CHECK_EQ_INT(o.budget, budget);
    CHECK_EQ_INT(o.need, 1 * GiB + 2 * (size_t)229376 * 40960); /* 18.5 GiB */
    CHECK(!o.fits);
    int want = (int)((budget - GiB) / 2 / 229376) / MEMFIT_ROUND * MEMFIT_ROUND;
    CHECK_EQ_INT(o.max_fit, want);
    CHECK_EQ_INT(o.window, want);
    CHECK(want == 32512); /* the figure a user sees */
    /* pooled pages (windows 1): 8 slots of 64 MiB scratch and one window */
    in.slots = 8;
    in.windows = 1;
    in.fixed = 64 * MiB;
    memfit_estimate(&in, &o);
    CHECK_EQ_INT(o.need, 1 * GiB + 8 * 64 * MiB + (size_t)229376 * 40960);
    CHECK(o.fits && o.window == 40960 && o.max_fit == 40960);
    in.avail = 8 * GiB; /* budget 7.35 GiB: past 1.5 GiB, 27,136 positions */
    memfit_estimate(&in, &o);
    budget = 8 * GiB - 256 * MiB - 8 * GiB / 20;
    CHECK_EQ_INT(o.max_fit, (int)((budget - GiB - 8 * 64 * MiB) / 229376) / MEMFIT_ROUND * MEMFIT_ROUND);
    CHECK(!o.fits && o.max_fit == 27136);
    in.windows = 0; /* every slot's window: 8 times the positions */
    memfit_estimate(&in, &o);
    CHECK(!o.fits && o.max_fit == (int)((budget - GiB - 8 * 64 * MiB) / 8 / 229376) / MEMFIT_ROUND * MEMFIT_ROUND);
    in.avail = 16 * GiB;
    in.fixed = 0;
    /* one slot fits the whole window */
    in.slots = 1;
    memfit_estimate(&in, &o);
    CHECK(o.fits && o.window == 40960 && o.max_fit == 40960);
    /* an explicit window past the model's is judged as asked */
    in.window = 50000;
    memfit_estimate(&in, &o);
    CHECK(o.fits && o.window == 50000);
    in.window = 100000000;
    memfit_estimate(&in, &o);
    CHECK(!o.fits && o.max_fit > 40960 && o.max_fit % MEMFIT_ROUND == 0);
    /* nothing fits */
    in.avail = 300 * MiB;
    memfit_estimate(&in, &o);
    CHECK(!o.fits && o.max_fit == 0 && o.window == 0);
}

TEST(memfit_pressure_rule) {
    char why[128];
    memfit_sys s = {.mem_total = 64 * GiB, .mem_avail = 10 * GiB, .psi_some10 = -1, .psi_full10 = -1};
    CHECK(!memfit_pressure(&s, why, sizeof why));
    s.mem_avail = 3 * GiB; /* below 64/20 = 3.2 GiB */
    CHECK(memfit_pressure(&s, why, sizeof why) && strstr(why, "MemAvailable"));
    s.mem_avail = 10 * GiB;
    s.psi_full10 = 12.5;
    CHECK(memfit_pressure(&s, why, sizeof why) && strstr(why, "stalled"));
    s = (memfit_sys){.mem_total = 4 * GiB, .mem_avail = 400 * MiB, .psi_full10 = -1};
    CHECK(memfit_pressure(&s, why, sizeof why)); /* the 512 MiB floor */
    /* the real machine: /proc reads */
    char err[256];
    memfit_sys now;
    CHECK(memfit_read_sys(&now, err, sizeof err) == 0 && now.mem_total > 0 && now.mem_avail <= now.mem_total);
}

/* a fake machine: the bundled model's window (its maximum) does not fit,
   and cli_window takes the largest that does and says so; memfit_model
   suggests a smaller storage for more */
TEST(memfit_model_window_cut) {
    char err[512];
    model *m;
    if (model_load(&m, bundled(), NULL, err, sizeof err) != 0) return test_fail(__FILE__, __LINE__, "%s", err);
    const model_config *c = model_cfg(m);
    size_t per = kv_bytes_per_pos(c->n_layers, c->n_kv_heads, c->head_dim, 32);
    size_t b0 = model_ctx_bytes(m, 0, 256, 0);
    /* whole pages: 1000 positions take 8 of 128 a layer */
    CHECK_EQ_INT(model_ctx_bytes(m, 1000, 256, 0) - b0, per * 1024);
    CHECK_EQ_INT(model_ctx_bytes(m, 1000, 256, 8) - b0,
                 kv_page_bytes(c->n_kv_heads, c->head_dim, 8) * 8 * (size_t)c->n_layers);
    /* room for 1100 positions: avail = reserve + fixed + 1100 x per */
    size_t room = b0 + 1100 * per;
    size_t avail = (size_t)((double)(room + MEMFIT_RESERVE_MIN) / (1.0 - 1.0 / MEMFIT_RESERVE_DIV)) + 1;
    memfit_sys fake = {.mem_total = 8 * GiB, .mem_avail = avail, .psi_some10 = -1, .psi_full10 = -1};
    memfit_test_sys(&fake);
    memfit_report r;
    CHECK(memfit_model(m, 1, 256, 0, NULL, &r, err, sizeof err) == 0);
    CHECK(!r.out.fits && r.out.max_fit == 1024 && r.out.want == c->max_position_embeddings);
    CHECK(r.alt_bits == 16 && r.alt_window == c->max_position_embeddings); /* f16 fits the whole 2048 */
    char msg[768];
    memfit_describe(&r, 1, msg, sizeof msg);
    CHECK_MSG(strstr(msg, "use --context-window 1024 (or --kv-bits 16 for up to 2048)"), "%s", msg);
    /* the library's default is cut the same way (64-row scratch: a little more room) */
    CHECK(model_default_context(m) >= 1024 && model_default_context(m) < c->max_position_embeddings);
    /* the command: the default window cut, said on stderr; an explicit one that fits is kept */
    cli_engine e = {.m = m};
    opts o = {0};
    CHECK_EQ_INT(cli_window(&e, &o, 1, 256, "run"), 1024);
    o.ctx = 512;
    CHECK_EQ_INT(cli_window(&e, &o, 1, 256, "run"), 512);
    /* two slots: on the CPU their pages come from one pool the server
       bounds, so the room holds two slots' scratch and one window (1200
       positions here), and the pool gets what the scratch leaves */
    o.ctx = 0;
    room = 2 * (b0 + 600 * per);
    fake.mem_avail = (size_t)((double)(room + MEMFIT_RESERVE_MIN) / (1.0 - 1.0 / MEMFIT_RESERVE_DIV)) + 1;
    CHECK_EQ_INT(cli_window(&e, &o, 2, 256, "serve"), 1024);
    CHECK(memfit_model(m, 2, 256, 1024, NULL, &r, err, sizeof err) == 0);
    CHECK(r.pooled && r.out.fits && r.pool >= 1200 * per && r.pool < 1201 * per + 64);
    memfit_test_sys(NULL);
    model_free(m);
}

/* the real binary: an explicit window that cannot fit is refused with the
   suggestion (exit 1, no crash); --kv-bits outside 32/16/8 is refused */
TEST(memfit_cli_refuses_window) {
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m %s -p hi -n 2 -c 100000000 -t 1", bundled());
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 1);
    CHECK_MSG(err && strstr(err, "run: the 100000000-position window needs") && strstr(err, "use --context-window ") &&
                  strstr(err, "--kv-bits 8 for up to"),
              "%s", err ? err : "(null)");
    free(out), free(err), out = err = NULL;
    snprintf(args, sizeof args, "serve -m %s -c 100000000 -t 1 --cache-slots 4", bundled());
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 1);
    CHECK_MSG(err && strstr(err, "serve: the 100000000-position window needs") && strstr(err, "4 cache slots"), "%s",
              err ? err : "(null)");
    free(out), free(err), out = err = NULL;
    snprintf(args, sizeof args, "run -m %s -p hi -n 2 --kv-bits 4", bundled());
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 1);
    CHECK_MSG(err && strstr(err, "--kv-bits expects 32"), "%s", err ? err : "(null)");
    free(out), free(err), out = err = NULL;
    /* --kv-bits 8 runs, greedy, and prints the same ids as plain decoding with the lookup drafter */
    char *o2 = NULL;
    snprintf(args, sizeof args, "run -m %s -p 'def main(' -n 24 --temp 0 --print-ids --ignore-eos -t 1 --kv-bits 8",
             bundled());
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    free(err), err = NULL;
    snprintf(args, sizeof args,
             "run -m %s -p 'def main(' -n 24 --temp 0 --print-ids --ignore-eos -t 1 --kv-bits 8 --mode lookup",
             bundled());
    CHECK_EQ_INT(test_run_cli(args, &o2, &err), 0);
    CHECK_MSG(out && o2 && !strcmp(out, o2), "%s vs %s", out ? out : "", o2 ? o2 : "");
    free(out), free(o2), free(err);
}

TEST(memfit_guard_sheds_idle_slot) {
    char err[512];
    model *m;
    if (model_load(&m, bundled(), NULL, err, sizeof err) != 0) return test_fail(__FILE__, __LINE__, "%s", err);
    seq *s[3];
    sched_slot slots[3];
    float *lg = xmalloc(sizeof(float) * (size_t)model_cfg(m)->vocab_size);
    int ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 100 + i;
    for (int i = 0; i < 3; i++) {
        CHECK(seq_create(&s[i], m, 256, 64, NULL, err, sizeof err) == 0);
        slots[i] = (sched_slot){.s = s[i]};
        if (i < 2) CHECK(seq_prefill(s[i], ids, 30 + i, lg, err, sizeof err) >= 0); /* slot 3 stays empty */
    }
    double used[3] = {5.0, 3.0, 1.0};
    char line[192] = "";
    /* no pressure: nothing shed */
    memfit_sys ok = {.mem_total = 16 * GiB, .mem_avail = 8 * GiB, .psi_some10 = -1, .psi_full10 = -1};
    memfit_test_sys(&ok);
    CHECK_EQ_INT(sched_guard(slots, 3, NULL, used, line, sizeof line), 0);
    CHECK(seq_len(s[0]) == 30 && seq_len(s[1]) == 31);
    /* pressure that shedding does not relieve (the fake stays low): every
       idle slot holding positions is shed, never a busy one */
    memfit_sys low = {.mem_total = 16 * GiB, .mem_avail = 100 * MiB, .psi_some10 = -1, .psi_full10 = -1};
    memfit_test_sys(&low);
    /* both slots that hold positions busy (jobs running in them): nothing to shed */
    const int busy01[3] = {1, 1, 0}, busy0[3] = {1, 0, 0};
    CHECK_EQ_INT(sched_guard(slots, 3, busy01, used, line, sizeof line), 0);
    CHECK(seq_len(s[0]) == 30 && seq_len(s[1]) == 31);
    CHECK_EQ_INT(sched_guard(slots, 3, busy0, used, line, sizeof line), 1);
    CHECK_EQ_INT(seq_len(s[0]), 30);
    CHECK_EQ_INT(seq_len(s[1]), 0);
    CHECK_MSG(strstr(line, "memory guard: MemAvailable 100 MiB") && strstr(line, "shed idle cache slot 2 (31 positions"),
              "%s", line);
    /* the shed slot works again (its cache refills on demand) */
    CHECK(seq_prefill(s[1], ids, 20, lg, err, sizeof err) == 20);
    memfit_test_sys(NULL);
    for (int i = 0; i < 3; i++) seq_free(s[i]);
    free(lg);
    model_free(m);
}

static int has_code(const cJSON *w, const char *code) {
    const cJSON *x;
    cJSON_ArrayForEach(x, w) {
        const cJSON *c = cJSON_GetObjectItem(x, "code");
        if (cJSON_IsString(c) && !strcmp(c->valuestring, code)) return 1;
    }
    return 0;
}

TEST(memfit_health_warnings) {
    server srv = {.ctx_window = 768, .window_cut = 2048, .tpl = NULL};
    sched_metrics m = {.slots_shed = 1};
    snprintf(m.last_shed, sizeof m.last_shed, "memory guard: x; shed idle cache slot 2");
    memfit_sys sys = {.mem_total = 16 * GiB, .mem_avail = 100 * MiB, .swap_total = GiB, .swap_free = GiB / 2,
                      .psi_some10 = -1, .psi_full10 = -1};
    cJSON *w = cJSON_CreateArray();
    serve_health_warnings(w, &srv, &sys, &m);
    CHECK(has_code(w, "no_chat_template") && has_code(w, "memory_pressure") && has_code(w, "swap_in_use") &&
          has_code(w, "cache_shed") && has_code(w, "window_cut"));
    char *t = cJSON_PrintUnformatted(w);
    CHECK_MSG(strstr(t, "512 MiB of swap in use") && strstr(t, "2048-position window") && strstr(t, "is 768"), "%s", t);
    free(t);
    cJSON_Delete(w);
    /* a healthy machine, nothing shed, the whole window: no memory warnings */
    w = cJSON_CreateArray();
    sys = (memfit_sys){.mem_total = 16 * GiB, .mem_avail = 8 * GiB, .psi_some10 = -1, .psi_full10 = -1};
    srv.window_cut = 0;
    m = (sched_metrics){0};
    serve_health_warnings(w, &srv, &sys, &m);
    CHECK_EQ_INT(cJSON_GetArraySize(w), 1); /* the chat template alone */
    serve_health_warnings(w, &srv, NULL, &m);
    CHECK_EQ_INT(cJSON_GetArraySize(w), 2);
    cJSON_Delete(w);
}

/* Sliding-window layers keep about their window (kv.h): the config-only
   estimate counts them as a fixed cost and only the other layers per
   position; with no window, every layer per position. */
TEST(memfit_config_windows) {
    model_config c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 64, c.intermediate_size = 128, c.n_layers = 6, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
    c.vocab_size = 1000;
    size_t f0, p0, f1, p1;
    memfit_config_bytes(&c, 32, 8, &f0, &p0);
    const size_t layer = kv_bytes_per_pos(1, 2, 16, 32), page = kv_page_bytes(2, 16, 32);
    CHECK(page == KV_PAGE * layer); /* (32 KiB: whole system pages) */
    CHECK(p0 == 6 * layer && f0 >= 6 * page);
    c.sliding_window = 512;
    for (int l = 0; l < 6; l++) c.sliding[l] = (l + 1) % 6 != 0; /* five slide */
    memfit_config_bytes(&c, 32, 8, &f1, &p1);
    CHECK(p1 == 1 * layer);
    /* a sliding layer: its window, the slack and two pages; a full one: a
       page beside its share a position */
    CHECK(f1 + 5 * page == f0 + 5 * layer * (size_t)(512 + 2 * KV_SLACK + 2 * KV_PAGE));
    /* what a cache of n positions keeps, by the same rule, in whole pages */
    int win[6] = {512, 512, 512, 512, 512, 0};
    CHECK(kv_bytes_resident(6, 2, 16, 32, win, 100000) == (5 * (size_t)(512 + 2 * KV_SLACK + 2 * KV_PAGE) + 100096) * layer);
    CHECK(kv_bytes_resident(6, 2, 16, 32, win, 600) == 6 * (size_t)640 * layer);
    CHECK(kv_bytes_resident(6, 2, 16, 32, NULL, 600) == 6 * (size_t)640 * layer);
}
