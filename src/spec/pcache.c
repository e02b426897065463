/* pcache: see pcache.h. */
#include "spec/pcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* a block's drafter rows: copied, or by reference where the drafter's
   backend shares its context pages (dstate_block_rows) */
typedef struct {
    void *rows;
    dblock *blk;
} dpart;
static int dpart_has(const dpart *p) { return p->rows || p->blk; }
static void dpart_free(dpart *p) {
    free(p->rows);
    dblock_free(p->blk);
    p->rows = NULL, p->blk = NULL;
}
/* block bi of ds's context into p */
static int dpart_take(dpart *p, dstate *ds, int bi, size_t db, char *err, size_t errlen) {
    if (dstate_block_rows(ds) == PCACHE_BLOCK) {
        p->blk = dstate_block_take(ds, bi, err, errlen);
        return p->blk ? 0 : -1;
    }
    p->rows = xmalloc(PCACHE_BLOCK * db);
    return dstate_save_rows(ds, bi * PCACHE_BLOCK, PCACHE_BLOCK, p->rows, err, errlen);
}

typedef struct pblock pblock;
struct pblock {
    uint64_t h;           /* chained hash of the prefix up to and with this block */
    pblock *parent;       /* the block before (NULL: the first) */
    pblock *next;         /* the bucket's chain */
    int ids[PCACHE_BLOCK];
    void *rows;           /* target rows (copied) */
    dpart d;              /* the drafter's rows (none: both NULL) */
    mblock *blk;          /* or the target's rows by reference (a backend that shares them) */
    size_t bytes;
    uint64_t used;        /* the touch counter when last used */
    int children;         /* cached blocks that continue it (never evicted while > 0) */
    int pins;             /* copies under way that read it or extend it (never evicted while > 0) */
};

struct pcache {
    pthread_mutex_t mu; /* the index, the counters, pins and touches */
    size_t budget, bytes; /* (bytes counts blocks being copied in too) */
    pblock **tab;
    size_t tab_n; /* power of two */
    int n;
    uint64_t clock;
    pcache_stats st;
};

pcache *pcache_new(size_t budget) {
    pcache *pc = xcalloc(1, sizeof *pc);
    pc->budget = budget;
    pc->tab_n = 256;
    pc->tab = xcalloc(pc->tab_n, sizeof *pc->tab);
    pthread_mutex_init(&pc->mu, NULL);
    return pc;
}

static void block_free(pblock *b) {
    free(b->rows);
    mblock_free(b->blk);
    dpart_free(&b->d);
    free(b);
}

void pcache_free(pcache *pc) {
    if (!pc) return;
    for (size_t i = 0; i < pc->tab_n; i++)
        for (pblock *b = pc->tab[i], *nx; b; b = nx) nx = b->next, block_free(b);
    free(pc->tab);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

void pcache_get_stats(pcache *pc, pcache_stats *st) {
    pthread_mutex_lock(&pc->mu);
    *st = pc->st;
    st->budget = pc->budget;
    st->bytes = pc->bytes;
    st->blocks = pc->n;
    st->block_tokens = PCACHE_BLOCK;
    pthread_mutex_unlock(&pc->mu);
}

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

static uint64_t block_hash(uint64_t parent_h, const int *ids) {
    uint64_t h = mix(parent_h, 0x51ed270b27cf5a1fULL);
    for (int i = 0; i < PCACHE_BLOCK; i++) h = mix(h, (uint32_t)ids[i]);
    return h;
}

/* the cached block continuing parent with ids, or NULL */
static pblock *find(const pcache *pc, const pblock *parent, const int *ids, uint64_t h) {
    for (pblock *b = pc->tab[h & (pc->tab_n - 1)]; b; b = b->next)
        if (b->h == h && b->parent == parent && memcmp(b->ids, ids, sizeof b->ids) == 0) return b;
    return NULL;
}

static void grow(pcache *pc) {
    size_t n2 = pc->tab_n * 2;
    pblock **t = xcalloc(n2, sizeof *t);
    for (size_t i = 0; i < pc->tab_n; i++)
        for (pblock *b = pc->tab[i], *nx; b; b = nx) {
            nx = b->next;
            b->next = t[b->h & (n2 - 1)];
            t[b->h & (n2 - 1)] = b;
        }
    free(pc->tab);
    pc->tab = t;
    pc->tab_n = n2;
}

static void unlink_block(pcache *pc, pblock *v) {
    for (pblock **p = &pc->tab[v->h & (pc->tab_n - 1)]; *p; p = &(*p)->next)
        if (*p == v) {
            *p = v->next;
            break;
        }
    if (v->parent) v->parent->children--;
    pc->bytes -= v->bytes;
    pc->n--;
    pc->st.evicted_blocks++;
    block_free(v);
}

/* Evicts the least recently used block that nothing continues and no copy
   holds; 0 when there is none. */
static int evict_one(pcache *pc) {
    pblock *v = NULL;
    for (size_t i = 0; i < pc->tab_n; i++)
        for (pblock *b = pc->tab[i]; b; b = b->next)
            if (!b->children && !b->pins && (!v || b->used < v->used)) v = b;
    if (!v) return 0;
    unlink_block(pc, v);
    return 1;
}

/* room for `need` more bytes within the budget, which then count */
static int reserve(pcache *pc, size_t need) {
    if (need > pc->budget) return 0;
    while (pc->bytes + need > pc->budget)
        if (!evict_one(pc)) return 0;
    pc->bytes += need;
    return 1;
}

size_t pcache_shed(pcache *pc, size_t keep) {
    pthread_mutex_lock(&pc->mu);
    size_t before = pc->bytes;
    while (pc->bytes > keep && evict_one(pc)) {
    }
    size_t r = before - pc->bytes;
    pthread_mutex_unlock(&pc->mu);
    return r;
}

/* The lock is held for the index and never across a copy: a block being
   filled is not in the index yet (no lookup finds half a block), and the
   block it continues is pinned meanwhile, as it must stay its parent. */
int pcache_store(pcache *pc, seq *s, dstate *ds, const int *stop, char *err, size_t errlen) {
    const size_t tb = seq_pos_bytes(s), db = ds ? dstate_pos_bytes(ds) : 0;
    if (!tb) return ds_err(err, errlen, "the prefix cache: this backend cannot save cache rows");
    const int *ids = seq_tokens(s), nb = seq_len(s) / PCACHE_BLOCK;
    /* by reference where the backend's blocks are these: no copy, and a
       block costs memory only once no sequence holds its rows any more */
    const int share = seq_block_rows(s) == PCACHE_BLOCK;
    if (seq_kept_from(s) > 0) return 0; /* sliding layers gave rows back: no chain from position 0 */
    /* the drafter's rows go with a block only where its context holds the
       same ids as the sequence there */
    int dn = 0;
    if (ds && db) {
        int n_ids;
        const int *dids = dstate_ids(ds, &n_ids);
        dn = dstate_ctx_len(ds);
        if (dn > n_ids) dn = n_ids;
        if (dn > seq_len(s)) dn = seq_len(s);
        int k = 0;
        while (k < dn && dids[k] == ids[k]) k++;
        dn = k;
    }
    pblock *prev = NULL;
    uint64_t h = 0;
    int added = 0, rc = 0;
    pthread_mutex_lock(&pc->mu);
    for (int bi = 0; bi < nb && !(stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)); bi++) {
        const int *bid = ids + (size_t)bi * PCACHE_BLOCK, pos0 = bi * PCACHE_BLOCK;
        const int with_d = dn >= pos0 + PCACHE_BLOCK;
        h = block_hash(h, bid);
        pblock *b = find(pc, prev, bid, h);
        if (prev) prev->pins++; /* (not evicted for this block's room) */
        if (!b) {
            const size_t bytes = sizeof(pblock) + PCACHE_BLOCK * (tb + (with_d ? db : 0));
            if (!reserve(pc, bytes)) {
                if (prev) prev->pins--;
                break;
            }
            pthread_mutex_unlock(&pc->mu);
            b = xcalloc(1, sizeof *b);
            b->h = h;
            b->parent = prev;
            memcpy(b->ids, bid, sizeof b->ids);
            b->bytes = bytes;
            if (share) {
                b->blk = seq_block_take(s, bi, err, errlen);
                rc = b->blk ? 0 : -1;
            } else {
                b->rows = xmalloc(PCACHE_BLOCK * tb);
                rc = seq_save_rows(s, pos0, PCACHE_BLOCK, b->rows, err, errlen);
            }
            if (!rc && with_d) rc = dpart_take(&b->d, ds, bi, db, err, errlen);
            pthread_mutex_lock(&pc->mu);
            if (prev) prev->pins--;
            if (rc) {
                pc->bytes -= bytes;
                block_free(b);
                break;
            }
            pblock *dup = find(pc, prev, bid, h); /* (another store put it in meanwhile) */
            if (dup) {
                pc->bytes -= bytes;
                block_free(b);
                b = dup;
                b->used = ++pc->clock;
                prev = b;
                continue;
            }
            if (pc->n >= (int)pc->tab_n) grow(pc);
            b->next = pc->tab[h & (pc->tab_n - 1)];
            pc->tab[h & (pc->tab_n - 1)] = b;
            if (prev) prev->children++;
            pc->n++;
            pc->st.stored_blocks++;
            added++;
        } else {
            b->used = ++pc->clock; /* (not the one evicted for its own rows) */
            if (with_d && !dpart_has(&b->d)) {
                const size_t more = PCACHE_BLOCK * db;
                if (reserve(pc, more)) {
                    b->pins++;
                    pthread_mutex_unlock(&pc->mu);
                    dpart d = {0};
                    rc = dpart_take(&d, ds, bi, db, err, errlen);
                    pthread_mutex_lock(&pc->mu);
                    b->pins--;
                    if (rc || dpart_has(&b->d)) { /* (or another store gave it its rows meanwhile) */
                        dpart_free(&d);
                        pc->bytes -= more;
                    } else {
                        b->d = d;
                        b->bytes += more;
                    }
                }
            }
            if (prev) prev->pins--;
            if (rc) break;
        }
        b->used = ++pc->clock;
        prev = b;
    }
    pthread_mutex_unlock(&pc->mu);
    return rc ? -1 : added;
}

/* the chain of cached blocks of ids[0 .. n): chain[0 .. return) */
static int walk(const pcache *pc, const int *ids, int n, int need_ds, pblock **chain, int max) {
    pblock *prev = NULL;
    uint64_t h = 0;
    int k = 0;
    for (; k < max && (k + 1) * PCACHE_BLOCK <= n; k++) {
        const int *bid = ids + (size_t)k * PCACHE_BLOCK;
        h = block_hash(h, bid);
        pblock *b = find(pc, prev, bid, h);
        if (!b || (need_ds && !dpart_has(&b->d))) break;
        if (chain) chain[k] = b;
        prev = b;
    }
    return k;
}

int pcache_match(pcache *pc, const int *ids, int n, int need_ds) {
    pthread_mutex_lock(&pc->mu);
    int k = walk(pc, ids, n, need_ds, NULL, n / PCACHE_BLOCK);
    pthread_mutex_unlock(&pc->mu);
    return k * PCACHE_BLOCK;
}

/* the chain's blocks are pinned while their rows are copied out (the
   lock released), so a store on another thread cannot evict them */
int pcache_load(pcache *pc, seq *s, dstate *ds, const int *ids, int n, int have, int limit, char *err,
                size_t errlen) {
    if (limit > n) limit = n;
    const int max = limit / PCACHE_BLOCK;
    pthread_mutex_lock(&pc->mu);
    pc->st.lookups++;
    if (max <= 0 || pc->n == 0) {
        pthread_mutex_unlock(&pc->mu);
        return have;
    }
    pblock **chain = xmalloc(sizeof *chain * (size_t)max);
    const int k = walk(pc, ids, n, ds != NULL, chain, max);
    const int b0 = have / PCACHE_BLOCK;
    if (k * PCACHE_BLOCK <= have) { /* nothing past what they hold */
        pthread_mutex_unlock(&pc->mu);
        free(chain);
        return have;
    }
    for (int i = 0; i < k; i++) chain[i]->used = ++pc->clock, chain[i]->pins++;
    pthread_mutex_unlock(&pc->mu);
    int first = b0, pos0 = b0 * PCACHE_BLOCK;
    seq_truncate(s, pos0);
    if (seq_len(s) < pos0) first = 0, pos0 = 0; /* (sliding layers had given back what pos0 attends to) */
    int held = pos0, rc = 0;
    for (int i = first; i < k; i++) {
        const int p = i * PCACHE_BLOCK;
        if ((chain[i]->blk ? seq_block_put(s, ids, i, chain[i]->blk, err, errlen)
                           : seq_load_rows(s, ids, p, PCACHE_BLOCK, chain[i]->rows, err, errlen)) != 0 ||
            (ds && (chain[i]->d.blk ? dstate_block_put(ds, ids, i, chain[i]->d.blk, err, errlen)
                                    : dstate_load_rows(ds, ids, p, PCACHE_BLOCK, chain[i]->d.rows, err, errlen)) != 0)) {
            seq_truncate(s, held);
            rc = -1;
            break;
        }
        held = p + PCACHE_BLOCK;
    }
    pthread_mutex_lock(&pc->mu);
    for (int i = 0; i < k; i++) chain[i]->pins--;
    if (!rc) {
        pc->st.hits++;
        pc->st.loaded_tokens += (uint64_t)(held - pos0);
    }
    pthread_mutex_unlock(&pc->mu);
    free(chain);
    return rc ? -1 : held;
}
