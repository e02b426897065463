/* pcache: the prefix cache in blocks. The cache rows of token prefixes
 * kept in host memory in fixed blocks of PCACHE_BLOCK positions, beside
 * the sequences (whose contexts hold only the conversations they run): a
 * finished request's sequence leaves every whole block of its ids here
 * (the target's rows, and a feature drafter's context rows where its state
 * holds them), and a new prompt takes the longest chain of cached blocks
 * of its prefix back into its sequence before it prefills the rest, across
 * requests and conversations.
 *
 * Blocks are indexed by the ids they hold and the block before them (a
 * chained hash, the ids compared on a hit, so a block stands for its whole
 * prefix); one budget of bytes bounds them all; past it, the least
 * recently used block that no cached block continues goes first. A block
 * holds the stored bits of a context's rows: its pages by reference where
 * the backend shares them (seq_block_take, dstate_block_take: the CPU),
 * else bytes copied out and back (mctx_save_rows, dstate_save_rows), so a
 * prompt served from the cache reads the bits its first request stored: the
 * lossless rule holds, and a block boundary is a multiple of the backends'
 * prefill group (BACKEND_GROUP_ROWS divides PCACHE_BLOCK), so the rows
 * after a loaded prefix go through the kernels a cold prefill gives them.
 *
 * Thread-safe: the server stores a finished request's blocks on a thread
 * of their own while its scheduler loads, matches and sheds. One lock
 * guards the index and is never held across a copy of rows: a block being
 * filled enters the index only once whole, and the blocks a copy reads or
 * continues are pinned for it, so no eviction frees them meanwhile. */
#ifndef DS_PCACHE_H
#define DS_PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "spec/drafter.h"
#include "spec/seq.h"

#define PCACHE_BLOCK 128

typedef struct pcache pcache;

typedef struct {
    size_t budget, bytes; /* bytes allowed and held (rows and ids) */
    int blocks, block_tokens;
    uint64_t lookups, hits;     /* pcache_load calls; those that loaded a block */
    uint64_t loaded_tokens;     /* positions loaded into sequences */
    uint64_t stored_blocks, evicted_blocks;
} pcache_stats;

/* budget: bytes (0: a cache that keeps nothing). */
pcache *pcache_new(size_t budget);
void pcache_free(pcache *pc);
void pcache_get_stats(pcache *pc, pcache_stats *st);

/* Keeps the whole blocks of s's ids that are not cached yet, with ds's
 * context rows (ds may be NULL) for the blocks its context covers (the
 * blocks already cached without them take them now). Stops at the first
 * block the budget cannot take, or before the next block once *stop (may be
 * NULL) is set. s and ds must not change meanwhile. Returns the blocks
 * added, or -1 with err filled (a backend that cannot save rows; what was
 * kept stays). */
int pcache_store(pcache *pc, seq *s, dstate *ds, const int *stop, char *err, size_t errlen);

/* Positions of ids[0 .. n) the cache holds (whole blocks from the first;
 * need_ds: only blocks that carry drafter rows count). */
int pcache_match(pcache *pc, const int *ids, int n, int need_ds);

/* Gives s (and ds, when not NULL) the cached blocks of ids[0 .. n) past
 * what they hold: `have` is the prefix of ids both already hold (s, and ds's
 * context); they are cut to the block boundary at or below it and the
 * cached blocks from there are loaded, no further than `limit` positions
 * (a prompt's last row is always computed: limit < n). Nothing changes when
 * the cache holds no block past `have`. Returns the prefix of ids s (and
 * ds) then hold, or -1 with err filled (a load failed: s and ds then hold
 * the blocks loaded before it). */
int pcache_load(pcache *pc, seq *s, dstate *ds, const int *ids, int n, int have, int limit, char *err,
                size_t errlen);

/* Drops least recently used blocks until at most `keep` bytes are held;
 * returns the bytes released. */
size_t pcache_shed(pcache *pc, size_t keep);

#endif
