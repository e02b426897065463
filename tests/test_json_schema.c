/* Tests for the JSON Schema compiler (text/json_schema.h): each supported
 * keyword with accepted and refused instances, the refusal messages of the
 * unsupported ones (keyword and JSON pointer), hostile schemas (deep
 * nesting, $ref cycles, huge bounds) refused without a crash, and the
 * committed reference fixture tests/data/json_schema/fixture.jsonl
 * (tools/gen_json_schema_fixture.py: instances labelled by python-jsonschema)
 * checked against the grammar. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "test.h"
#include "text/json_schema.h"

static grammar *compile(const char *schema) {
    cJSON *s = cJSON_Parse(schema);
    CHECK_MSG(s != NULL, "bad test schema %s", schema);
    char err[300] = "";
    grammar *g = json_schema_grammar(s, err, sizeof err);
    CHECK_MSG(g != NULL, "schema refused: %s: %s", schema, err);
    cJSON_Delete(s);
    return g;
}

/* instances separated by '\n'; the first `nyes` must match, the rest not */
static void expect(const char *schema, const char *const *yes, const char *const *no) {
    grammar *g = compile(schema);
    if (!g) return;
    for (int i = 0; yes && yes[i]; i++)
        CHECK_MSG(grammar_matches(g, yes[i], strlen(yes[i])) == 1, "%s should accept %s", schema, yes[i]);
    for (int i = 0; no && no[i]; i++)
        CHECK_MSG(grammar_matches(g, no[i], strlen(no[i])) == 0, "%s should refuse %s", schema, no[i]);
    grammar_free(g);
}

#define YES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void refused(const char *schema, const char *want) {
    cJSON *s = cJSON_Parse(schema);
    CHECK_MSG(s != NULL, "bad test schema %s", schema);
    char err[300] = "";
    grammar *g = json_schema_grammar(s, err, sizeof err);
    CHECK_MSG(g == NULL, "accepted: %s", schema);
    CHECK_MSG(strstr(err, want) != NULL, "%s: error '%s' lacks '%s'", schema, err, want);
    grammar_free(g);
    cJSON_Delete(s);
}

TEST(json_schema_types) {
    expect("{\"type\":\"string\"}", YES("\"\"", "\"a b\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"", "\"caf\xc3\xa9\""),
           YES("\"a", "a", "\"\\x\"", "\"\\u12\"", "\"tab\there\"", "1", " \"a\""));
    expect("{\"type\":\"number\"}", YES("0", "-0", "1.5", "-12.25e+10", "3E-2", "123456789012345678901234567890"),
           YES("01", "1.", ".5", "+1", "1e", "--1", "NaN", "\"1\""));
    expect("{\"type\":\"integer\"}", YES("0", "-7", "42"), YES("1.0", "1e3", "-", "007"));
    expect("{\"type\":\"boolean\"}", YES("true", "false"), YES("True", "1", "null"));
    expect("{\"type\":\"null\"}", YES("null"), YES("nul", "false"));
    expect("{\"type\":[\"string\",\"integer\"]}", YES("\"x\"", "3"), YES("null", "1.5"));
    expect("{}", YES("1", "{\"a\":[null,{}]}", "\"s\""), YES("", "{", "[1,]"));
    expect("true", YES("[]", "false"), NULL);
}

TEST(json_schema_objects) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                    "\"c\":{\"type\":\"boolean\"}},\"required\":[\"c\",\"a\"]}";
    expect(s, YES("{\"a\":1,\"c\":true}", "{\"a\":1,\"b\":\"x\",\"c\":false}", "{ \"a\" : 1 ,\n  \"c\" : true\n}"),
           YES("{\"a\":1}", "{\"c\":true}", "{\"c\":true,\"a\":1}", "{\"a\":1,\"c\":true,}", "{\"a\":1,\"d\":2,\"c\":true}",
               "{}", "{\"a\":\"1\",\"c\":true}"));
    /* all optional: the empty object and any subsequence in order */
    expect("{\"properties\":{\"x\":{\"type\":\"null\"},\"y\":{\"type\":\"null\"}}}",
           YES("{}", "{\"x\":null}", "{\"y\":null}", "{\"x\":null,\"y\":null}"), YES("{,}", "{\"y\":null,\"x\":null}"));
    /* required names not declared take the additionalProperties schema */
    expect("{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":{\"type\":\"integer\"}}",
           YES("{\"k\":5}"), YES("{}", "{\"k\":\"v\"}"));
    /* no properties: any keys with values of additionalProperties */
    expect("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}",
           YES("{}", "{\"p\":true,\"q\":false}"), YES("{\"p\":1}"));
    expect("{\"type\":\"object\",\"additionalProperties\":false}", YES("{}", "{ }"), YES("{\"a\":1}"));
    expect("{\"type\":\"object\"}", YES("{}", "{\"a\":[1,{\"b\":null}]}"), YES("[]", "{\"a\"}"));
    /* keys needing escapes */
    expect("{\"properties\":{\"q\\\"k\":{\"const\":1}},\"required\":[\"q\\\"k\"]}", YES("{\"q\\\"k\":1}"),
           YES("{\"qk\":1}"));
    /* whitespace: nothing, one blank, or a line break and bounded indentation */
    char ind[200], ind2[200];
    snprintf(ind, sizeof ind, "{\n%*s}", JSON_SCHEMA_INDENT_MAX, "");
    snprintf(ind2, sizeof ind2, "{\n%*s}", JSON_SCHEMA_INDENT_MAX + 1, "");
    expect("{\"type\":\"object\"}",
           YES("{ }", "{\t}", "{\n}", "{\r\n  }", ind, "{\n  \"a\": 1,\n  \"b\": [\n    1\n  ]\n}", "{\"a\" :\t1 }"),
           YES("{  }", "{\t\t}", "{ \n}", "{\n\n}", ind2, "{\"a\":  1}"));
}

TEST(json_schema_arrays) {
    expect("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
           YES("[1,2]", "[1, 2, 3]", "[ 1 ,2 ]"), YES("[1]", "[1,2,3,4]", "[1,\"2\"]", "[]", "[1,2,]"));
    expect("{\"type\":\"array\"}", YES("[]", "[1,\"a\",[null]]"), YES("[", "[,]"));
    expect("{\"type\":\"array\",\"maxItems\":0}", YES("[]"), YES("[1]"));
    expect("{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"}}",
           YES("[]", "[1]", "[1,\"a\"]", "[1,\"a\",true,false]"), YES("[\"a\"]", "[1,2]", "[1,\"a\",3]"));
    expect("{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false,\"minItems\":2}",
           YES("[1,\"a\"]"), YES("[1]", "[1,\"a\",1]"));
    expect("{\"items\":[{\"const\":\"x\"}],\"additionalItems\":false}", YES("[]", "[\"x\"]"), YES("[\"x\",\"x\"]"));
    expect("{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"uniqueItems\":false}", YES("[null]"), NULL);
}

TEST(json_schema_strings_formats) {
    expect("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", YES("\"ab\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\"", "\"a\\nb\""),
           YES("\"a\"", "\"abcd\"", "\"\""));
    expect("{\"type\":\"string\",\"format\":\"date\"}", YES("\"2024-02-29\"", "\"1999-12-31\""),
           YES("\"2024-2-29\"", "\"2024-13-01\"", "\"2024-00-10\"", "\"2024-01-32\"", "\"x\""));
    expect("{\"type\":\"string\",\"format\":\"time\"}", YES("\"23:59:60Z\"", "\"08:00:00.5+01:00\""),
           YES("\"24:00:00Z\"", "\"08:00:00\"", "\"8:00:00Z\""));
    expect("{\"type\":\"string\",\"format\":\"date-time\"}", YES("\"2024-01-31T12:00:00Z\"", "\"2024-01-31 12:00:00-05:00\""),
           YES("\"2024-01-31\"", "\"2024-01-31T12:00Z\""));
    expect("{\"type\":\"string\",\"format\":\"uuid\"}", YES("\"123e4567-e89b-12d3-a456-426614174000\""),
           YES("\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""));
}

TEST(json_schema_numbers) {
    expect("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}", YES("-5", "0", "9", "10", "99", "100", "120", "-1"),
           YES("-6", "121", "200", "1000", "-0", "-10"));
    expect("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1000}", YES("1", "999", "500"),
           YES("0", "1000", "-1"));
    expect("{\"type\":\"integer\",\"minimum\":37}", YES("37", "99", "100", "12345678901234567890"), YES("36", "0", "-40"));
    expect("{\"type\":\"integer\",\"maximum\":-37}", YES("-37", "-100", "-99999999999"), YES("-36", "0", "5"));
    expect("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", YES("2", "3"), YES("1", "4"));
    expect("{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true}", YES("6"), YES("5"));
    expect("{\"type\":\"number\",\"minimum\":0}", YES("0", "0.5", "7e3"), YES("-1", "-0.5", "-0"));
    /* every integer in a window, against the arithmetic */
    static const long bounds[][2] = {{0, 0}, {-9, 9}, {7, 1234}, {-1001, -99}, {199, 200}, {10, 99}, {-50, 305}};
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
        char sch[128];
        snprintf(sch, sizeof sch, "{\"type\":\"integer\",\"minimum\":%ld,\"maximum\":%ld}", bounds[k][0], bounds[k][1]);
        grammar *g = compile(sch);
        if (!g) continue;
        for (long v = -1500; v <= 1500; v++) {
            char t[32];
            snprintf(t, sizeof t, "%ld", v);
            int want = v >= bounds[k][0] && v <= bounds[k][1];
            CHECK_MSG(grammar_matches(g, t, strlen(t)) == want, "%s on %ld", sch, v);
        }
        grammar_free(g);
    }
}

TEST(json_schema_enum_const_combinators_refs) {
    expect("{\"enum\":[\"a\",1,null,[true],{\"k\":\"v\"}]}", YES("\"a\"", "1", "null", "[true]", "{\"k\":\"v\"}"),
           YES("\"b\"", "2", "[false]"));
    expect("{\"type\":\"string\",\"enum\":[\"a\",1]}", YES("\"a\""), YES("1"));
    expect("{\"const\":\"x\\ny\"}", YES("\"x\\ny\""), YES("\"x y\""));
    expect("{\"const\":{\"k\":[1,{}]}}", YES("{\"k\":[1,{}]}", "{ \"k\" : [ 1 , { } ] }"), YES("{\"k\":[1]}", "{\"k\":[1,{},2]}"));
    expect("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", YES("3", "\"a\""),
           YES("\"ab\"", "null"));
    expect("{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"boolean\"}]}", YES("null", "true"), YES("0"));
    expect("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
           "{\"properties\":{\"b\":{\"type\":\"null\"}},\"required\":[\"b\"]}]}",
           YES("{\"a\":1,\"b\":null}"), YES("{\"a\":1}", "{\"b\":null}"));
    expect("{\"allOf\":[{\"$ref\":\"#/definitions/base\"},{\"required\":[\"n\"]}],"
           "\"definitions\":{\"base\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}}}",
           YES("{\"n\":2}"), YES("{}"));
    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
                       "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    expect(tree, YES("{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}"),
           YES("{\"v\":1,\"kids\":[{}]}", "{\"kids\":[]}"));
    /* a reference to the root */
    expect("{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"$ref\":\"#\"}]}}",
           YES("[1,[2,[3]],[]]"), YES("[1,[\"x\"]]"));
}

TEST(json_schema_refusals) {
    refused("{\"type\":\"string\",\"pattern\":\"^a\"}", "json schema at '#': 'pattern' is not supported");
    refused("{\"properties\":{\"a/b\":{\"not\":{}}}}", "at '#/properties/a~1b': 'not' is not supported");
    refused("{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties' is not supported");
    refused("{\"items\":{\"type\":\"number\",\"multipleOf\":2}}", "at '#/items': 'multipleOf' is not supported");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems is not supported");
    refused("{\"type\":\"string\",\"format\":\"email\"}", "format 'email' is not supported");
    refused("{\"type\":\"number\",\"maximum\":3}", "maximum on a number is not supported");
    refused("{\"type\":\"integer\",\"minimum\":1e300}", "outside +-10^15");
    refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer lies between");
    refused("{\"type\":\"string\",\"maxLength\":1e9}", "maxLength 1000000000 is above");
    refused("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "below minLength");
    refused("{\"type\":\"nope\"}", "unknown type 'nope'");
    refused("{\"$ref\":\"http://x/y.json\"}", "only local references");
    refused("{\"$ref\":\"#/$defs/missing\"}", "does not resolve");
    refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
            "a cycle of references");
    refused("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
            "recursion through $ref that consumes no input");
    refused("{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", "'type' beside $ref");
    refused("{\"type\":\"object\",\"anyOf\":[{}]}", "'type' beside anyOf");
    refused("{\"enum\":[1],\"minimum\":0}", "'minimum' beside enum/const");
    refused("{\"type\":\"string\",\"enum\":[1,2]}", "no value is allowed");
    refused("false", "the schema false allows nothing");
    refused("{\"properties\":{\"a\":false},\"required\":[\"a\"]}", "at '#/properties/a'");
    refused("{\"additionalProperties\":false,\"required\":[\"z\"]}", "required property 'z' is not allowed");
    refused("{\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "minItems 2 but only 1");
    refused("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "allOf: 'type' differs");
    refused("{\"anyOf\":[]}", "anyOf must be a non-empty array");
    refused("{\"minLength\":1,\"items\":{}}", "keywords of several types");
    refused("3", "a schema must be an object or a boolean");
}

TEST(json_schema_hostile) {
    /* deep nesting is refused, not a stack overflow */
    char *deep = malloc(20000);
    strcpy(deep, "");
    for (int i = 0; i < 500; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 500; i++) strcat(deep, "}");
    refused(deep, "nested deeper than");
    /* a long chain of references, each to the next */
    strcpy(deep, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 300; i++) {
        char t[96];
        snprintf(t, sizeof t, "%s\"d%d\":{\"items\":{\"$ref\":\"#/$defs/d%d\"}}", i ? "," : "", i, i + 1);
        strcat(deep, t);
    }
    strcat(deep, ",\"d300\":{}}}");
    refused(deep, "nested deeper than");
    free(deep);
    /* json_object mode */
    char err[200];
    grammar *g = json_schema_grammar(NULL, err, sizeof err);
    CHECK(g != NULL);
    if (g) {
        const char *t = "{\"a\":[1,2,{\"b\":null}]}";
        CHECK(grammar_matches(g, t, strlen(t)) == 1);
        CHECK(grammar_matches(g, "[1]", 3) == 0);
        grammar_free(g);
    }
}

TEST(json_schema_reference_fixture) {
    char path[512];
    snprintf(path, sizeof path, "%s/json_schema/fixture.jsonl", test_data_dir());
    size_t len;
    char err[300];
    char *text = ds_read_file(path, &len, err, sizeof err);
    CHECK_MSG(text != NULL, "%s", err);
    if (!text) return;
    int n = 0, nvalid = 0;
    char *prev_schema = NULL;
    grammar *g = NULL;
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line) - 1;
        else *nl = 0;
        if (!*line) continue;
        cJSON *c = cJSON_Parse(line);
        CHECK(c != NULL);
        if (!c) continue;
        cJSON *sch = cJSON_GetObjectItem(c, "schema"), *inst = cJSON_GetObjectItem(c, "instance");
        int valid = cJSON_IsTrue(cJSON_GetObjectItem(c, "valid"));
        char *st = cJSON_PrintUnformatted(sch);
        if (!prev_schema || strcmp(st, prev_schema)) {
            grammar_free(g);
            g = json_schema_grammar(sch, err, sizeof err);
            CHECK_MSG(g != NULL, "%s: %s", st, err);
            free(prev_schema);
            prev_schema = st;
        } else {
            free(st);
        }
        if (g && cJSON_IsString(inst)) {
            int m = grammar_matches(g, inst->valuestring, strlen(inst->valuestring));
            CHECK_MSG(m == valid, "schema %s, instance %s: grammar %d, validator %d", prev_schema, inst->valuestring, m,
                      valid);
            n++;
            nvalid += valid;
        }
        cJSON_Delete(c);
    }
    CHECK(n > 300 && nvalid > 100);
    grammar_free(g);
    free(prev_schema);
    free(text);
}
