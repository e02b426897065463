/* lookup-cost: the host's share of a lookup (n-gram) speculative round, the
 * work a GPU round would have to overlap: the proposal (lookup_propose) and
 * committing the round's accepted ids (lookup_push). A text stands in for
 * the target's output: its ids are generated in rounds as a greedy target
 * would emit them (the accepted prefix of the proposal, then the text's
 * next id as the correction or bonus), from a prompt of its first half.
 *
 *   lookup-cost TOKENIZER_DIR TEXT_FILE [K=16] [REPS=20]
 *
 * Prints the ids, the rounds, tokens per round and the mean microseconds
 * of host work per round (best of REPS replays). bench/lookup-cost.sh runs
 * it on this repository's code with the bundled and Qwen3 tokenizers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/lookup.h"
#include "text/tokenizer.h"
#include "base/util.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: lookup-cost TOKENIZER_DIR TEXT_FILE [K=16] [REPS=20]\n");
        return 2;
    }
    int k = argc > 3 ? atoi(argv[3]) : 16, reps = argc > 4 ? atoi(argv[4]) : 20;
    if (k < 1 || k > 64 || reps < 1) {
        fprintf(stderr, "lookup-cost: K must be 1..64 and REPS at least 1\n");
        return 2;
    }
    char err[512];
    tokenizer *t;
    if (tok_load(&t, argv[1], err, sizeof err)) {
        fprintf(stderr, "lookup-cost: %s\n", err);
        return 1;
    }
    size_t len = 0;
    char *text = ds_read_file(argv[2], &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "lookup-cost: %s\n", err);
        return 1;
    }
    int *ids = NULL;
    int n = tok_encode(t, text, len, 0, &ids, err, sizeof err);
    if (n < 4) {
        fprintf(stderr, "lookup-cost: %s\n", n < 0 ? err : "the text has fewer than 4 ids");
        return 1;
    }
    int p0 = n / 2, rounds = 0, draft[64];
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        lookup *l = lookup_create(LOOKUP_MAX_NGRAM, 1);
        lookup_reset(l, ids, p0);
        rounds = 0;
        double t0 = ds_now();
        for (int p = p0; p < n; rounds++) {
            int m = lookup_propose(l, k < n - p ? k : n - p, draft, NULL), a = 0;
            while (a < m && p + a < n && draft[a] == ids[p + a]) a++;
            int c = a + 1 < n - p ? a + 1 : n - p; /* the accepted drafts and the target's own id */
            lookup_push(l, ids + p, c);
            p += c;
        }
        double dt = ds_now() - t0;
        if (dt < best) best = dt;
        lookup_free(l);
    }
    printf("%s: %d ids, %d generated in %d rounds (%.2f tokens per round), %.2f us of host work per round\n", argv[2], n,
           n - p0, rounds, (double)(n - p0) / rounds, best / rounds * 1e6);
    free(ids);
    free(text);
    tok_free(t);
    return 0;
}
