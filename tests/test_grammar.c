/* Tests for the grammar engine (text/grammar.h): parse errors with their
 * line and column, hand-written grammars matched byte by byte (literals,
 * classes with ranges and negation over UTF-8, every repetition form,
 * alternatives, recursion), the refusal of left recursion and undefined
 * rules, the programmatic builder, copy and rollback of states, and the
 * limits (parallel parses) failing cleanly. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/grammar.h"

static grammar *parse(const char *text) {
    char err[256] = "";
    grammar *g = grammar_parse(text, strlen(text), NULL, err, sizeof err);
    CHECK_MSG(g != NULL, "grammar refused: %s\n%s", err, text);
    return g;
}

static int matches(const grammar *g, const char *s) { return grammar_matches(g, s, strlen(s)); }

/* parses, expecting a refusal whose message contains want */
static void refused(const char *text, const char *want) {
    char err[256] = "";
    grammar *g = grammar_parse(text, strlen(text), NULL, err, sizeof err);
    CHECK_MSG(g == NULL, "accepted: %s", text);
    CHECK_MSG(strstr(err, want) != NULL, "for %s: error '%s' lacks '%s'", text, err, want);
    grammar_free(g);
}

TEST(grammar_parse_errors) {
    refused("root ::= \"abc", "line 1, column 10: unterminated literal");
    refused("root ::= [a-", "unterminated character class");
    refused("root ::= [z-a]", "out of order");
    refused("root ::= \"a\"\nfoo ::= (\"b\"", "line 2, column 9: unclosed '('");
    refused("root ::= \"a\"\n  x y ::= \"b\"", "line 2");
    refused("root ::= )", "line 1, column 10: unbalanced ')'");
    refused("root ::= \"a\"{3,1}", "maximum is below the minimum");
    refused("root ::= \"a\"{200000}", "above 100000");
    refused("root ::= \"\\q\"", "unknown escape \\q");
    refused("root ::= \"\\u12\"", "needs 4 hex digits");
    refused("root ::= \"\\uD800\"", "not a Unicode scalar value");
    refused("root ::= other", "line 1, column 10: rule 'other' is referenced but not defined");
    refused("start ::= \"a\"", "no rule named 'root'");
    refused("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
    refused("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    refused("root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left-recursive");
    refused("root ::= (\"a\"?)*", "left-recursive");
    refused("= \"a\"", "expected a rule name");
    refused("root \"a\"", "expected '::='");
    /* nesting past the limit is an error, not a stack overflow */
    char deep[1200];
    strcpy(deep, "root ::= ");
    for (int i = 0; i < 300; i++) strcat(deep, "(");
    refused(deep, "nested deeper");
}

TEST(grammar_literals_alternatives) {
    grammar *g = parse("root ::= \"ab\" | \"abc\" | \"x\" (\"y\" | \"z\") \"!\"  # comment\n");
    if (!g) return;
    CHECK(matches(g, "ab") == 1);
    CHECK(matches(g, "abc") == 1);
    CHECK(matches(g, "xy!") == 1);
    CHECK(matches(g, "xz!") == 1);
    CHECK(matches(g, "a") == 0);
    CHECK(matches(g, "abcd") == 0);
    CHECK(matches(g, "xx!") == 0);
    CHECK(matches(g, "") == 0);
    grammar_free(g);
    g = parse("root ::= \"\\x41\\n\\t\\\"\\\\\\u00e9\"");
    if (!g) return;
    CHECK(matches(g, "A\n\t\"\\\xc3\xa9") == 1);
    grammar_free(g);
    /* a body over several lines, rules in any order */
    g = parse("root ::= greet\n   \" \" name\ngreet ::= \"hi\" |\n  \"hello\"\nname ::= [a-z]+");
    if (!g) return;
    CHECK(matches(g, "hello bob") == 1);
    CHECK(matches(g, "hi x") == 1);
    CHECK(matches(g, "hi ") == 0);
    CHECK(matches(g, "hey bob") == 0);
    grammar_free(g);
}

TEST(grammar_classes_utf8) {
    grammar *g = parse("root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"");
    if (!g) return;
    CHECK(matches(g, "\"plain\"") == 1);
    CHECK(matches(g, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"") == 1); /* 2, 3 and 4 byte characters */
    CHECK(matches(g, "\"a\\b\"") == 0);
    CHECK(matches(g, "\"a\"b\"") == 0);
    CHECK(matches(g, "\"\xc3\"") == 0);          /* a cut character */
    CHECK(matches(g, "\"\xed\xa0\x80\"") == 0);  /* a surrogate */
    CHECK(matches(g, "\"\xc0\xaf\"") == 0);      /* overlong */
    CHECK(matches(g, "\"\xf4\x90\x80\x80\"") == 0); /* past U+10FFFF */
    grammar_free(g);
    g = parse("root ::= [a-cx\\-0-2\xc3\xa9-\xc3\xab\xe4\xb8\x80-\xe9\xbe\xa5]+");
    if (!g) return;
    CHECK(matches(g, "abcx-012") == 1);
    CHECK(matches(g, "\xc3\xa9\xc3\xaa\xc3\xab") == 1);
    CHECK(matches(g, "\xe4\xb8\xad\xe6\x96\x87") == 1); /* CJK */
    CHECK(matches(g, "d") == 0);
    CHECK(matches(g, "\xc3\xac") == 0);
    CHECK(matches(g, "3") == 0);
    grammar_free(g);
    /* every code point of a negated class is accepted, checked on a sample */
    g = parse("root ::= [^a]");
    if (!g) return;
    uint32_t cps[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        uint32_t cp = cps[i];
        char b[4];
        int n;
        if (cp < 0x80) b[0] = (char)cp, n = 1;
        else if (cp < 0x800) b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 63)), n = 2;
        else if (cp < 0x10000)
            b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 63)), b[2] = (char)(0x80 | (cp & 63)), n = 3;
        else
            b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 63)), b[2] = (char)(0x80 | ((cp >> 6) & 63)),
            b[3] = (char)(0x80 | (cp & 63)), n = 4;
        CHECK_MSG(grammar_matches(g, b, (size_t)n) == 1, "U+%X", cp);
    }
    CHECK(matches(g, "a") == 0);
    grammar_free(g);
    g = parse("root ::= . . \"!\"");
    if (!g) return;
    CHECK(matches(g, "x\xe2\x82\xac!") == 1);
    CHECK(matches(g, "x!") == 0);
    grammar_free(g);
}

TEST(grammar_repetitions) {
    grammar *g = parse("root ::= \"a\"? \"b\"* \"c\"+ \"d\"{2} \"e\"{1,3} \"f\"{2,}");
    if (!g) return;
    CHECK(matches(g, "cddeff") == 1);
    CHECK(matches(g, "abbbcccddeeefffff") == 1);
    CHECK(matches(g, "ddeff") == 0);     /* no c */
    CHECK(matches(g, "cdeff") == 0);     /* one d */
    CHECK(matches(g, "cddeeeeff") == 0); /* four e */
    CHECK(matches(g, "cddef") == 0);     /* one f */
    CHECK(matches(g, "aacddeff") == 0);
    grammar_free(g);
    g = parse("root ::= (\"ab\" | [0-9]){0,3} \";\"");
    if (!g) return;
    CHECK(matches(g, ";") == 1);
    CHECK(matches(g, "ab1ab;") == 1);
    CHECK(matches(g, "ab1ab2;") == 0);
    grammar_free(g);
    /* a long repetition runs in constant stack space */
    g = parse("root ::= [a-z]* \".\"");
    if (!g) return;
    size_t n = 200000;
    char *s = malloc(n + 2);
    memset(s, 'q', n);
    s[n] = '.';
    s[n + 1] = 0;
    gm_state *st = gm_new(g);
    CHECK(gm_accept_bytes(st, s, n) == 1);
    CHECK(gm_stack_count(st) <= 2);
    CHECK(gm_accept_byte(st, '.') == 1);
    CHECK(gm_is_complete(st));
    CHECK(!gm_can_continue(st));
    gm_free(st);
    free(s);
    grammar_free(g);
}

TEST(grammar_recursion) {
    grammar *g = parse("root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9]+ | \"(\" expr \")\"");
    if (!g) return;
    CHECK(matches(g, "1+2") == 1);
    CHECK(matches(g, "(1+(2+3))+4") == 1);
    CHECK(matches(g, "((((((((((7))))))))))") == 1);
    CHECK(matches(g, "(1+2") == 0);
    CHECK(matches(g, "1+") == 0);
    CHECK(matches(g, "1)") == 0);
    grammar_free(g);
    /* nullable rules before a reference are fine when not left-recursive */
    g = parse("root ::= opt opt \"x\" root | \"y\"\nopt ::= \"o\"?");
    if (!g) return;
    CHECK(matches(g, "xoxooxy") == 1);
    CHECK(matches(g, "oooxy") == 0);
    grammar_free(g);
}

TEST(grammar_state_queries_and_rollback) {
    grammar *g = parse("root ::= \"ab\" \"c\"?");
    if (!g) return;
    gm_state *s = gm_new(g);
    CHECK(!gm_is_complete(s) && gm_can_continue(s));
    uint64_t set[4];
    gm_next_bytes(s, set);
    CHECK(set[1] == (1ull << ('a' - 64)) && !set[0] && !set[2] && !set[3]);
    CHECK(gm_accept_byte(s, 'x') == 0);
    CHECK(gm_accept_bytes(s, "ax", 2) == 0); /* all or nothing */
    CHECK(gm_accept_byte(s, 'a') == 1);
    gm_state *save = gm_clone(s);
    CHECK(gm_accept_byte(s, 'b') == 1);
    CHECK(gm_is_complete(s) && gm_can_continue(s));
    CHECK(gm_accept_byte(s, 'c') == 1);
    CHECK(gm_is_complete(s) && !gm_can_continue(s));
    gm_copy(s, save); /* roll back to after "a" */
    CHECK(!gm_is_complete(s));
    CHECK(gm_accept_byte(s, 'c') == 0);
    CHECK(gm_accept_bytes(s, "bc", 2) == 1);
    CHECK(gm_is_complete(s));
    gm_free(save);
    gm_free(s);
    grammar_free(g);

    /* copies advance independently over a larger state */
    g = parse("root ::= (\"{\" root \"}\")* \"x\"");
    if (!g) return;
    s = gm_new(g);
    CHECK(gm_accept_bytes(s, "{{{", 3) == 1);
    gm_state *c = gm_clone(s);
    CHECK(gm_accept_bytes(s, "x}x}x}x", 7) == 1 && gm_is_complete(s));
    CHECK(gm_accept_bytes(c, "x}x}x", 5) == 1 && !gm_is_complete(c));
    CHECK(gm_accept_bytes(c, "}x", 2) == 1 && gm_is_complete(c));
    gm_copy(c, s);
    CHECK(gm_is_complete(c));
    gm_free(c);
    gm_free(s);
    grammar_free(g);
}

TEST(grammar_limits) {
    /* each 'a' doubles the distinct stacks: the cap is hit, cleanly */
    grammar *g = parse("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"");
    if (!g) return;
    gm_state *s = gm_new(g);
    int rc = 1, i = 0;
    for (; i < 40 && rc == 1; i++) rc = gm_accept_byte(s, 'a');
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(gm_error(s), "parallel parses") != NULL);
    CHECK(gm_stack_count(s) <= GM_MAX_STACKS);
    CHECK(gm_accept_byte(s, 'b') == 1); /* the state is still usable */
    gm_free(s);
    grammar_free(g);
    /* grammars past the element limit are refused */
    char err[256];
    char big[600] = "root ::=";
    for (int k = 0; k < 12; k++) strcat(big, " \"a\"{0,100000}");
    g = grammar_parse(big, strlen(big), NULL, err, sizeof err);
    CHECK(g == NULL && strstr(err, "too large"));
    grammar_free(g);
}

TEST(grammar_builder) {
    gram_builder *b = gb_new();
    int root = gb_rule(b, "root"), item = gb_rule(b, "item");
    uint32_t digits[2] = {'0', '9'};
    int lb = gb_lit(b, "[", 1), rb = gb_lit(b, "]", 1), comma = gb_lit(b, ",", 1);
    int num = gb_rep(b, gb_class(b, digits, 1, 0), 1, -1);
    int more = gb_rep(b, gb_seq(b, (int[]){comma, gb_ref(b, item)}, 2), 0, -1);
    int list = gb_rep(b, gb_seq(b, (int[]){gb_ref(b, item), more}, 2), 0, 1);
    CHECK(gb_define(b, root, gb_seq(b, (int[]){lb, list, rb}, 3)) == 0);
    CHECK(gb_define(b, item, gb_alt(b, (int[]){num, gb_ref(b, root)}, 2)) == 0);
    CHECK(gb_define(b, item, num) < 0); /* twice */
    char err[256] = "";
    grammar *g = gb_build(b, "root", err, sizeof err);
    CHECK_MSG(g == NULL && strstr(err, "defined twice"), "%s", err);
    gb_free(b);

    b = gb_new();
    root = gb_rule(b, "root");
    item = gb_rule(b, "item");
    num = gb_rep(b, gb_class(b, digits, 1, 0), 1, -1);
    CHECK(gb_define(b, root, gb_seq(b, (int[]){gb_lit(b, "<", 1), gb_ref(b, item), gb_lit(b, ">", 1)}, 3)) == 0);
    CHECK(gb_define(b, item, gb_alt(b, (int[]){num, gb_ref(b, root)}, 2)) == 0);
    g = gb_build(b, "root", err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    if (g) {
        CHECK(matches(g, "<<12>>") == 1);
        CHECK(matches(g, "<<12>") == 0);
        grammar_free(g);
    }
    CHECK(gb_rep(b, num, 3, 2) < 0);
    gb_free(b);
}
