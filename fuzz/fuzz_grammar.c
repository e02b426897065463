/* fuzz_grammar: libFuzzer target for the GBNF parser and the matcher. The
 * input is a grammar text, then a NUL byte, then bytes to match (at most
 * 4 KiB of each). A refused grammar must come with a message. For an
 * accepted one the bytes are fed one at a time and checked: a byte is
 * accepted exactly when gm_next_bytes listed it (while no limit is hit);
 * feeding all bytes at once ends in the same state (completeness, stack
 * count) as one at a time; a clone taken halfway and advanced over the rest
 * agrees; a refused byte leaves the state unchanged. Crashes, leaks and
 * sanitizer reports are failures as well. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *in = nul ? nul + 1 : data + size;
    size_t n = nul ? size - glen - 1 : 0;
    if (glen > 4096 || n > 4096) return 0;
    char err[256] = "";
    grammar *g = grammar_parse((const char *)data, glen, NULL, err, sizeof err);
    if (!g) {
        if (!err[0]) __builtin_trap();
        return 0;
    }
    gm_state *s = gm_new(g), *half = NULL;
    size_t i = 0;
    int limit = 0;
    for (; i < n; i++) {
        uint64_t set[4];
        gm_next_bytes(s, set);
        int listed = (int)((set[in[i] >> 6] >> (in[i] & 63)) & 1);
        int before_complete = gm_is_complete(s), before_stacks = gm_stack_count(s);
        int rc = gm_accept_byte(s, in[i]);
        if (rc < 0) {
            limit = 1;
            break;
        }
        if (rc != listed) __builtin_trap();
        if (!rc) {
            if (gm_is_complete(s) != before_complete || gm_stack_count(s) != before_stacks) __builtin_trap();
            break;
        }
        if (i == n / 2) half = gm_clone(s);
    }
    if (!limit) {
        /* all at once: the same verdict */
        gm_state *w = gm_new(g);
        int rc = gm_accept_bytes(w, in, i);
        if (rc == 1) {
            if (gm_is_complete(w) != gm_is_complete(s) || gm_can_continue(w) != gm_can_continue(s)) __builtin_trap();
        } else if (rc == 0 && i > 0) {
            __builtin_trap();
        }
        if (half && i > n / 2) {
            gm_state *c = gm_new(g);
            gm_copy(c, half);
            int r2 = gm_accept_bytes(c, in + n / 2 + 1, i - n / 2 - 1);
            if (r2 == 0 || (r2 == 1 && gm_is_complete(c) != gm_is_complete(s))) __builtin_trap();
            gm_free(c);
        }
        gm_free(w);
    }
    gm_free(half);
    gm_free(s);
    grammar_free(g);
    return 0;
}
