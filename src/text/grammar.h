/* grammar: context-free grammars over bytes and an incremental matcher, the
 * core of constrained decoding (response_format json_object / json_schema,
 * a required or named tool call).
 *
 * A grammar is a set of named rules; a rule is an expression built from
 * literals ("..."), character classes ([a-z], [^"\\]; ranges of Unicode code
 * points, matched as their UTF-8 encodings, so a negated class accepts
 * multi-byte characters), references to other rules, sequences,
 * alternatives (|), grouping and the repetitions ? * + {m} {m,} {m,n}. It is
 * built either from a GBNF-style text (grammar_parse) or programmatically
 * (gb_*). The text form:
 *
 *     root   ::= "{" ws pair ("," ws pair)* "}"     # a comment
 *     pair   ::= [a-z]+ ws ":" ws [0-9]{1,3} ws
 *     ws     ::= [ \t\n]{0,8}
 *
 * A rule's body runs until the next `name ::=` or the end of the text, so
 * bodies may span lines. Escapes in literals and classes: \n \r \t \\ \" \'
 * \] \[ \- \^ \xHH \uHHHH \UHHHHHHHH; `.` is any UTF-8 character. Names
 * are [A-Za-z0-9_-]+. Errors name the line and column.
 *
 * Grammars are refused (with the rule named) when a rule is left-recursive
 * (it can reach itself without consuming a byte, including `(x?)*`), when a
 * rule is referenced but not defined, or past GRAMMAR_MAX_ELEMENTS.
 *
 * The matcher (gm_*) is a pushdown recognizer: its state is a set of at
 * most GM_MAX_STACKS parse stacks (distinct parses alive in parallel), each
 * a path in a tree of shared nodes, so advancing by one byte touches only
 * the stacks' tops and copying a state is two memcpy's. A reference in tail
 * position does not grow the stack, so long repetitions run in constant
 * space. Past the limits (GM_MAX_STACKS parallel parses, GM_MAX_NODES
 * nodes: a deeply nested or very ambiguous input) an advance fails with -1
 * and gm_error says which limit; the state is then left as it was. */
#ifndef DS_GRAMMAR_H
#define DS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#define GRAMMAR_MAX_ELEMENTS (1 << 22) /* lowered elements of a grammar */
#define GRAMMAR_MAX_REPEAT 100000      /* the largest m or n of {m,n} */
#define GM_MAX_STACKS 1024             /* parallel parses in one state */
#define GM_MAX_NODES (1u << 22)        /* stack nodes in one state */

typedef struct grammar grammar;

/* Parses GBNF-style text (len bytes) whose start rule is `root` (NULL:
 * "root"). NULL with err filled ("line L, column C: ...") on failure. */
grammar *grammar_parse(const char *text, size_t len, const char *root, char *err, size_t errlen);
void grammar_free(grammar *g);
int grammar_rule_count(const grammar *g); /* after lowering (classes, repetitions add rules) */

/* Programmatic construction. Expressions are ints (>= 0) owned by the
 * builder; a failed call returns -1 and the builder remembers the first
 * error, which gb_build reports. Rules are named; gb_rule finds or creates
 * one (a rule may be referenced before it is defined). */
typedef struct gram_builder gram_builder;
gram_builder *gb_new(void);
void gb_free(gram_builder *b);
int gb_rule(gram_builder *b, const char *name);              /* rule id */
int gb_lit(gram_builder *b, const char *s, size_t n);        /* bytes as they are */
int gb_class(gram_builder *b, const uint32_t *ranges, int npairs, int negate); /* pairs lo,hi of code points */
int gb_ref(gram_builder *b, int rule);
int gb_seq(gram_builder *b, const int *items, int n); /* n = 0: the empty string */
int gb_alt(gram_builder *b, const int *items, int n);
int gb_rep(gram_builder *b, int item, int min, int max); /* max -1: unbounded */
int gb_define(gram_builder *b, int rule, int expr);      /* once per rule */
/* Checks and lowers the grammar; root names the start rule. The builder
 * stays the caller's (free it with gb_free). */
grammar *gb_build(gram_builder *b, const char *root, char *err, size_t errlen);

/* The matcher. A state belongs to one grammar, which must outlive it. */
typedef struct gm_state gm_state;
gm_state *gm_new(const grammar *g); /* at the start of the root rule */
void gm_free(gm_state *s);
gm_state *gm_clone(const gm_state *s);
/* dst := src (same grammar), reusing dst's memory: the rollback of a
 * speculative advance. */
void gm_copy(gm_state *dst, const gm_state *src);
/* Advances by one byte: 1 accepted, 0 not accepted (state unchanged), -1 a
 * limit was hit (state unchanged, gm_error says which). */
int gm_accept_byte(gm_state *s, uint8_t c);
/* All n bytes or none: 1, 0 (state unchanged) or -1 (limit, unchanged). */
int gm_accept_bytes(gm_state *s, const void *bytes, size_t n);
int gm_is_complete(const gm_state *s);  /* the input so far is a whole match */
int gm_can_continue(const gm_state *s); /* some byte can follow */
/* The bytes that can come next, as a 256-bit set (4 words). */
void gm_next_bytes(const gm_state *s, uint64_t set[4]);
int gm_stack_count(const gm_state *s);
const char *gm_error(const gm_state *s); /* the last limit error, "" if none */
/* Convenience: 1 if text (n bytes) is a complete match of g, 0 if not, -1
 * on a limit. */
int grammar_matches(const grammar *g, const void *text, size_t n);

#endif
