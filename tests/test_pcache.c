/* The prefix cache in blocks (spec/pcache.h): a sequence given cached
 * blocks continues bit for bit as one that computed its whole prompt, at
 * every --kv-bits, and a drafter state given the blocks' context rows
 * drafts as one that ingested them; blocks are shared between prompts
 * with a common prefix; the budget holds, and the least recently used
 * block that nothing continues goes first. On the bundled model. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "engine/sampler.h"
#include "spec/drafter.h"
#include "spec/pcache.h"
#include "spec/registry.h"
#include "spec/seq.h"
#include "spec/spec.h"
#include "test.h"

#define PK_CTX 1024
#define PK_NEW 40
#define BK PCACHE_BLOCK

/* at every --kv-bits with blocks by reference (the CPU's pages), then
   with copied rows (two tensor-parallel ranks, whose caches copy) */
TEST(pcache_target_bits) {
    const int bits[] = {32, 16, 8, 32};
    for (int k = 0; k < 4; k++) {
        char dir[700], err[512];
        test_bundled_path(dir, sizeof dir, "");
        model *m;
        model_load_opts lo = {.kv_bits = bits[k], .tensor_parallel = k == 3 ? 2 : 0};
        if (model_load(&m, dir, &lo, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            return;
        }
        const int V = model_cfg(m)->vocab_size;
        tpool *tp = tp_create(2);
        seq *a, *b, *c;
        CHECK(seq_create(&a, m, PK_CTX, 256, tp, err, sizeof err) == 0);
        CHECK(seq_create(&b, m, PK_CTX, 256, tp, err, sizeof err) == 0); /* (chunked as c: see test_prefix_copy.c) */
        CHECK(seq_create(&c, m, PK_CTX, 256, tp, err, sizeof err) == 0);
        int pa[3 * BK + 20], pb[3 * BK + 50];
        const int na = 3 * BK + 20, nb = 3 * BK + 50, shared = 2 * BK + 40;
        test_prompt_ids(pa, na, shared, 7, V);
        test_prompt_ids(pb, nb, shared, 9, V);
        float *la = xmalloc(sizeof(float) * (size_t)V), *lb = xmalloc(sizeof(float) * (size_t)V),
              *lc = xmalloc(sizeof(float) * (size_t)V);
        CHECK_EQ_INT(seq_block_rows(a), k == 3 ? 0 : BK);
        pcache *pc = pcache_new((size_t)1 << 30);
        CHECK(seq_prefill(a, pa, na, la, err, sizeof err) == na);
        CHECK_MSG(pcache_store(pc, a, NULL, NULL, err, sizeof err) == 3, "%s", err);
        const size_t rb = seq_pos_bytes(a) * 3 * BK;
        unsigned char *want = xmalloc(rb), *got = xmalloc(rb);
        CHECK(seq_save_rows(a, 0, 3 * BK, want, err, sizeof err) == 0);
        CHECK_EQ_INT(pcache_store(pc, a, NULL, NULL, err, sizeof err), 0); /* all there already */
        CHECK_EQ_INT(pcache_match(pc, pa, na, 0), 3 * BK);
        CHECK_EQ_INT(pcache_match(pc, pb, nb, 0), 2 * BK); /* the third block differs */
        CHECK_EQ_INT(pcache_match(pc, pa, na, 1), 0);      /* no drafter rows */
        /* b takes the two shared blocks, then computes only the rest */
        CHECK_EQ_INT(pcache_load(pc, b, NULL, pb, nb, 0, nb - 1, err, sizeof err), 2 * BK);
        CHECK_EQ_INT(seq_len(b), 2 * BK);
        CHECK(memcmp(seq_tokens(b), pb, sizeof(int) * 2 * BK) == 0);
        CHECK_EQ_INT(seq_prefill(b, pb, nb, lb, err, sizeof err), nb - 2 * BK);
        CHECK_EQ_INT(seq_prefill(c, pb, nb, lc, err, sizeof err), nb);
        CHECK_MSG(memcmp(lb, lc, sizeof(float) * (size_t)V) == 0, "kv %d: the last row's logits differ", bits[k]);
        int id = op_argmax(lb, V);
        for (int t = 0; t < PK_NEW; t++) {
            CHECK(seq_step(b, id, lb, err, sizeof err) == 0);
            CHECK(seq_step(c, id, lc, err, sizeof err) == 0);
            CHECK_MSG(memcmp(lb, lc, sizeof(float) * (size_t)V) == 0, "kv %d: step %d differs", bits[k], t);
            id = op_argmax(lb, V);
        }
        /* a sequence holding part of a block reloads from that block's start;
           the limit keeps the prompt's last row (and its block) computed */
        seq_truncate(b, BK + 10);
        CHECK_EQ_INT(pcache_load(pc, b, NULL, pa, na, BK + 10, na - 1, err, sizeof err), 3 * BK);
        CHECK_EQ_INT(pcache_load(pc, b, NULL, pa, 3 * BK, 0, 3 * BK - 1, err, sizeof err), 2 * BK);
        CHECK_EQ_INT(pcache_load(pc, b, NULL, pa, na, 3 * BK, na - 1, err, sizeof err), 3 * BK); /* nothing past */
        pcache_stats st;
        pcache_get_stats(pc, &st);
        CHECK_EQ_INT(st.blocks, 3);
        CHECK(st.bytes <= st.budget);
        CHECK_EQ_INT((int)st.lookups, 4);
        CHECK_EQ_INT((int)st.hits, 3);
        /* a writes other ids over rows it stored (a shared page is copied
           first): the blocks still read as stored */
        int pd[3 * BK + 20];
        memcpy(pd, pa, sizeof pd);
        for (int i = BK + 10; i < na; i++) pd[i] = (pa[i] + 1) % (V - 200);
        seq_truncate(a, BK + 10);
        CHECK_EQ_INT(seq_prefill(a, pd, na, la, err, sizeof err), na - BK - 10);
        CHECK(seq_save_rows(a, 0, 3 * BK, got, err, sizeof err) == 0);
        CHECK(memcmp(got, want, rb) != 0); /* (a holds other rows now) */
        seq_reset(b);
        CHECK_EQ_INT(pcache_load(pc, b, NULL, pa, na, 0, na - 1, err, sizeof err), 3 * BK);
        CHECK(seq_save_rows(b, 0, 3 * BK, got, err, sizeof err) == 0);
        CHECK_MSG(memcmp(got, want, rb) == 0, "kv %d: a cached block changed under its source's writes", bits[k]);
        free(want), free(got);
        free(la), free(lb), free(lc);
        pcache_free(pc);
        seq_free(a), seq_free(b), seq_free(c);
        tp_free(tp);
        model_free(m);
    }
}

/* Drafter rows travel with the blocks: the speculative run on a sequence
   and state given the cached blocks equals the run on ones that computed
   the whole prompt, and computes only the rest. */
TEST(pcache_drafter) {
    char err[512];
    test_bundled_set bs;
    if (test_bundled_open(&bs) != 0) {
        test_bundled_close(&bs);
        return;
    }
    model *m = bs.m;
    dmodel *dm = bs.dspark;
    tpool *tp = bs.tp;
    const int V = model_cfg(m)->vocab_size;
    sampler *smp;
    sampler_params sp = {.temperature = 0.0f};
    CHECK(sampler_create(&smp, &sp, V, err, sizeof err) == 0);
    seq *s[3];
    dstate *ds[3];
    for (int i = 0; i < 3; i++) {
        CHECK(seq_create(&s[i], m, PK_CTX, 256, tp, err, sizeof err) == 0);
        CHECK(dstate_create(&ds[i], dm, PK_CTX, tp, smp, err, sizeof err) == 0);
    }
    const int na = 2 * BK + 60, nb = 2 * BK + 90;
    int pa[2 * BK + 60], pb[2 * BK + 90];
    test_prompt_ids(pa, na, 2 * BK + 5, 3, V);
    test_prompt_ids(pb, nb, 2 * BK + 5, 5, V);
    int out[3][PK_NEW];
    spec_stats st[3];
    spec_opts o = {.max_new = PK_NEW, .max_draft = 6, .ignore_eos = 1};
    drafter d0 = dstate_drafter(ds[0]);
    CHECK(spec_generate(s[0], smp, &d0, pa, na, &o, out[0], NULL, &st[0], err, sizeof err) == 0);
    pcache *pc = pcache_new((size_t)1 << 30);
    CHECK_MSG(pcache_store(pc, s[0], ds[0], NULL, err, sizeof err) >= 2, "%s", err);
    CHECK_EQ_INT(pcache_match(pc, pb, nb, 1), 2 * BK);
    /* on the CPU the blocks hold the drafter's context pages, not copies:
       the source now writes over positions of block 1, and the blocks must
       still read as stored (the copy on write) */
    CHECK_EQ_INT(dstate_block_rows(ds[0]), BK);
    int pc2[BK + 80];
    test_prompt_ids(pc2, BK + 80, BK + 10, 7, V);
    CHECK(spec_generate(s[0], smp, &d0, pc2, BK + 80, &o, out[0], NULL, &st[0], err, sizeof err) == 0);
    /* a block past the context, or put where the context does not reach */
    dblock *k = dstate_block_take(ds[0], 5, err, sizeof err);
    CHECK_MSG(!k && strstr(err, "drafter block 5"), "%s", err);
    k = dstate_block_take(ds[0], 0, err, sizeof err);
    CHECK_MSG(k != NULL, "%s", err);
    CHECK(dstate_block_put(ds[2], pb, 1, k, err, sizeof err) == -1 && strstr(err, "drafter block 1"));
    dblock_free(k);
    CHECK_EQ_INT(pcache_load(pc, s[1], ds[1], pb, nb, 0, nb - 1, err, sizeof err), 2 * BK);
    CHECK_EQ_INT(dstate_ctx_len(ds[1]), 2 * BK);
    drafter d1 = dstate_drafter(ds[1]), d2 = dstate_drafter(ds[2]);
    CHECK(spec_generate(s[1], smp, &d1, pb, nb, &o, out[1], NULL, &st[1], err, sizeof err) == 0);
    CHECK(spec_generate(s[2], smp, &d2, pb, nb, &o, out[2], NULL, &st[2], err, sizeof err) == 0);
    CHECK_MSG(memcmp(out[1], out[2], sizeof out[1]) == 0, "the cached run's ids differ from the whole prompt's");
    CHECK_EQ_INT(st[1].n_accepted, st[2].n_accepted);
    CHECK_MSG(st[1].n_prefilled == nb - 2 * BK && st[2].n_prefilled == nb, "rows computed: %d and %d",
              st[1].n_prefilled, st[2].n_prefilled);
    /* blocks stored by a plain sequence carry no drafter rows, and take them
       when a state that holds them stores the same ids */
    pcache *p2 = pcache_new((size_t)1 << 30);
    CHECK(pcache_store(p2, s[2], NULL, NULL, err, sizeof err) >= 2);
    CHECK_EQ_INT(pcache_match(p2, pb, nb, 1), 0);
    pcache_stats a, b;
    pcache_get_stats(p2, &a);
    CHECK_EQ_INT(pcache_store(p2, s[2], ds[2], NULL, err, sizeof err), 0);
    pcache_get_stats(p2, &b);
    CHECK_EQ_INT(pcache_match(p2, pb, nb, 1), 2 * BK);
    CHECK(b.bytes > a.bytes && b.blocks == a.blocks);
    pcache_free(p2);
    pcache_free(pc);
    for (int i = 0; i < 3; i++) dstate_free(ds[i]), seq_free(s[i]);
    sampler_free(smp);
    test_bundled_close(&bs);
}

/* Shared prefixes take one copy of their blocks; the budget holds; the
   least recently used leaf goes first; shedding empties it. */
TEST(pcache_budget_lru) {
    char err[512];
    test_bundled_set bs;
    if (test_bundled_open(&bs) != 0) {
        test_bundled_close(&bs);
        return;
    }
    model *m = bs.m;
    tpool *tp = bs.tp;
    const int V = model_cfg(m)->vocab_size;
    seq *s;
    CHECK(seq_create(&s, m, PK_CTX, 256, tp, err, sizeof err) == 0);
    const int n = 3 * BK;
    int pa[3 * BK], pb[3 * BK], pc_[3 * BK];
    test_prompt_ids(pa, n, BK, 11, V);  /* a and b share their first block */
    test_prompt_ids(pb, n, BK, 12, V);
    test_prompt_ids(pc_, n, 0, 13, V);
    const size_t blk = seq_pos_bytes(s) * BK;
    float *lg = xmalloc(sizeof(float) * (size_t)V);
    /* room for five blocks (and their bookkeeping), not six */
    pcache *pc = pcache_new(5 * blk + 5 * 1024 + 512);
    CHECK(seq_prefill(s, pa, n, lg, err, sizeof err) == n);
    CHECK_EQ_INT(pcache_store(pc, s, NULL, NULL, err, sizeof err), 3);
    CHECK(seq_prefill(s, pb, n, lg, err, sizeof err) > 0);
    CHECK_EQ_INT(pcache_store(pc, s, NULL, NULL, err, sizeof err), 2); /* the first block is a's */
    pcache_stats st;
    pcache_get_stats(pc, &st);
    CHECK_EQ_INT(st.blocks, 5);
    CHECK_EQ_INT(pcache_match(pc, pa, n, 0), n);
    CHECK_EQ_INT(pcache_match(pc, pb, n, 0), n);
    /* a used again, after b */
    seq *t;
    CHECK(seq_create(&t, m, PK_CTX, 256, tp, err, sizeof err) == 0);
    CHECK_EQ_INT(pcache_load(pc, t, NULL, pa, n, 0, n, err, sizeof err), n);
    CHECK(seq_prefill(s, pc_, n, lg, err, sizeof err) == n);
    CHECK_EQ_INT(pcache_store(pc, s, NULL, NULL, err, sizeof err), 3);
    pcache_get_stats(pc, &st);
    CHECK(st.bytes <= st.budget);
    CHECK_EQ_INT(st.blocks, 5);
    CHECK_EQ_INT((int)st.evicted_blocks, 3);
    /* c's three blocks evicted b's two (older than a's, which was used last)
       and then a's last block, the oldest leaf left */
    CHECK_EQ_INT(pcache_match(pc, pc_, n, 0), n);
    CHECK_EQ_INT(pcache_match(pc, pa, n, 0), 2 * BK);
    CHECK_EQ_INT(pcache_match(pc, pb, n, 0), BK); /* the block shared with a stays */
    CHECK(pcache_shed(pc, 0) == st.bytes);
    pcache_get_stats(pc, &st);
    CHECK_EQ_INT(st.blocks, 0);
    CHECK_EQ_INT(pcache_match(pc, pa, n, 0), 0);
    /* a budget below one block keeps nothing */
    pcache *tiny = pcache_new(blk / 2);
    CHECK_EQ_INT(pcache_store(tiny, s, NULL, NULL, err, sizeof err), 0);
    pcache_free(tiny);
    pcache_free(pc);
    free(lg);
    seq_free(s), seq_free(t);
    test_bundled_close(&bs);
}

/* A store stops before its next block once its stop flag is set (the
   scheduler's claim of a slot whose blocks are being stored). */
TEST(pcache_store_stop) {
    char err[512];
    test_bundled_set bs;
    if (test_bundled_open(&bs) != 0) {
        test_bundled_close(&bs);
        return;
    }
    const int V = model_cfg(bs.m)->vocab_size, n = 3 * BK;
    seq *s;
    CHECK(seq_create(&s, bs.m, PK_CTX, 256, bs.tp, err, sizeof err) == 0);
    int p[3 * BK];
    test_prompt_ids(p, n, 0, 21, V);
    float *lg = xmalloc(sizeof(float) * (size_t)V);
    CHECK(seq_prefill(s, p, n, lg, err, sizeof err) == n);
    pcache *pc = pcache_new((size_t)1 << 28);
    int stop = 1;
    CHECK_EQ_INT(pcache_store(pc, s, NULL, &stop, err, sizeof err), 0);
    CHECK_EQ_INT(pcache_match(pc, p, n, 0), 0);
    stop = 0;
    CHECK_EQ_INT(pcache_store(pc, s, NULL, &stop, err, sizeof err), 3);
    CHECK_EQ_INT(pcache_match(pc, p, n, 0), n);
    pcache_free(pc);
    free(lg);
    seq_free(s);
    test_bundled_close(&bs);
}

/* One thread stores while another loads and sheds (the server's storer
   and scheduler): under a budget of a few blocks, so stores evict while
   loads copy out, every load gives whole blocks of its prompt whose rows
   are the bits the storing sequence holds, and the budget holds. */
typedef struct {
    pcache *pc;
    seq **src;
    int n_src, rounds, failed;
    char err[256];
} store_job;

static void *store_loop(void *p) {
    store_job *sj = p;
    for (int r = 0; r < sj->rounds; r++)
        if (pcache_store(sj->pc, sj->src[r % sj->n_src], NULL, NULL, sj->err, sizeof sj->err) < 0) {
            __atomic_store_n(&sj->failed, 1, __ATOMIC_RELEASE);
            break;
        }
    return NULL;
}

TEST(pcache_threads) {
    char err[512];
    test_bundled_set bs;
    if (test_bundled_open(&bs) != 0) {
        test_bundled_close(&bs);
        return;
    }
    const int V = model_cfg(bs.m)->vocab_size, n = 4 * BK;
    enum { NS = 3 };
    seq *src[NS], *t;
    int p[NS][4 * BK];
    float *lg = xmalloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < NS; i++) {
        CHECK(seq_create(&src[i], bs.m, PK_CTX, 256, bs.tp, err, sizeof err) == 0);
        test_prompt_ids(p[i], n, BK, 31 + (unsigned)i, V); /* the first block shared */
        CHECK(seq_prefill(src[i], p[i], n, lg, err, sizeof err) == n);
    }
    CHECK(seq_create(&t, bs.m, PK_CTX, 256, bs.tp, err, sizeof err) == 0);
    const size_t blk = seq_pos_bytes(t) * BK;
    unsigned char *want = xmalloc(blk * 4), *got = xmalloc(blk * 4);
    pcache *pc = pcache_new(5 * blk + 5 * 1024 + 512);
    store_job sj = {.pc = pc, .src = src, .n_src = NS, .rounds = 60};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, store_loop, &sj) == 0);
    pcache_stats st;
    do pcache_get_stats(pc, &st);
    while (!st.stored_blocks && !__atomic_load_n(&sj.failed, __ATOMIC_ACQUIRE)); /* (the loads start once one is in) */
    int loads = 0, hits = 0;
    for (int r = 0; r < 200; r++) {
        const int k = r % NS;
        seq_reset(t);
        int held = pcache_load(pc, t, NULL, p[k], n, 0, n, err, sizeof err);
        CHECK_MSG(held >= 0 && held % BK == 0 && held <= n, "load %d: %d (%s)", r, held, err);
        if (held <= 0) continue;
        hits++;
        CHECK(memcmp(seq_tokens(t), p[k], sizeof(int) * (size_t)held) == 0);
        CHECK(seq_save_rows(t, 0, held, got, err, sizeof err) == 0);
        CHECK(seq_save_rows(src[k], 0, held, want, err, sizeof err) == 0);
        CHECK_MSG(memcmp(got, want, seq_pos_bytes(t) * (size_t)held) == 0, "load %d: rows differ", r);
        if (r % 17 == 0) pcache_shed(pc, 2 * blk);
        loads++;
    }
    pthread_join(th, NULL);
    CHECK_MSG(!sj.failed, "%s", sj.err);
    pcache_get_stats(pc, &st);
    CHECK(st.bytes <= st.budget);
    CHECK(st.blocks <= 5);
    CHECK_MSG(hits > 0, "no load found a block (%d loads)", loads);
    pcache_free(pc);
    free(want), free(got), free(lg);
    for (int i = 0; i < NS; i++) seq_free(src[i]);
    seq_free(t);
    test_bundled_close(&bs);
}
