/* grammar_mask: token masks for constrained decoding. For a matcher state
 * (text/grammar.h), the set of token ids whose bytes the grammar can
 * accept next, as a bitmask over the vocabulary, plus the end-of-sequence
 * tokens when the input so far is a complete match.
 *
 * The vocabulary is put once per tokenizer into a byte trie (gtok_trie,
 * immutable, shareable between threads; special tokens and tokens with no
 * bytes are left out, so they are never allowed, except the end-of-sequence
 * ids named at construction). A mask walks the trie depth first, advancing
 * a copy of the matcher's stacks by each edge's byte; a branch is dropped
 * as soon as its byte is not among the bytes the stacks can take next, so
 * only prefixes the grammar accepts are visited. The walk's memory is a
 * gm_masker (one per thread).
 *
 * The walk shares stack nodes by (position, parent) and interns head sets,
 * so each (head set, byte) advance is computed once per mask and then
 * looked up: inside a string the sets repeat after every character.
 *
 * Measured cost (the real Qwen3 tokenizer, 151,669 ids, a 333,107-node
 * trie built in about 60 ms; one core of a shared 2-core machine, -O2;
 * `make test T=grammar_mask_timing` prints it): 0.002-0.04 ms per mask at
 * structural positions (start, after `{`, in a key, an integer, an enum, a
 * date), about 7-9 ms inside a free string, where 147k ids are allowed and
 * the whole trie is walked.
 *
 * Speculative decoding: to verify drafted tokens, gm_copy the state, call
 * gm_accept_token for each drafted token in turn (a token it refuses is a
 * mismatch like any other), and gm_copy back to roll back. */
#ifndef DS_GRAMMAR_MASK_H
#define DS_GRAMMAR_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "text/grammar.h"
#include "text/tokenizer.h"

typedef struct gtok_trie gtok_trie;
/* The tokenizer must outlive the trie. eos_ids[0..n_eos): the ids that end
 * generation (allowed only at a complete match). */
gtok_trie *gtok_trie_new(const tokenizer *t, const int *eos_ids, int n_eos);
void gtok_trie_free(gtok_trie *tr);
int gtok_trie_vocab(const gtok_trie *tr);      /* tok_vocab_size */
size_t gtok_trie_nodes(const gtok_trie *tr);   /* trie size, for tests and logs */
static inline size_t gtok_mask_words(int vocab) { return ((size_t)vocab + 63) / 64; }

typedef struct gm_masker gm_masker;
gm_masker *gm_masker_new(const gtok_trie *tr);
void gm_masker_free(gm_masker *m);
/* Fills mask (gtok_mask_words(vocab) words; bit id set = allowed) for
 * state s. Returns the number of allowed ids. A token whose advance would
 * pass a matcher limit is left out. */
int gm_token_mask(gm_masker *m, const gm_state *s, uint64_t *mask);

/* Checks one token and advances s over it: 1 accepted, 0 refused (s
 * unchanged), -1 a matcher limit (s unchanged). An end-of-sequence id is
 * accepted (s unchanged) exactly when gm_is_complete(s). */
int gm_accept_token(const gtok_trie *tr, gm_state *s, int id);
/* 1 if id is one of the trie's end-of-sequence ids. */
int gtok_is_eos(const gtok_trie *tr, int id);

#endif
