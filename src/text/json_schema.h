/* json_schema: JSON Schema (a cJSON tree) to a grammar (text/grammar.h) for
 * constrained decoding of response_format json_schema / json_object and of
 * tool-call arguments.
 *
 * The grammar is sound: every text it accepts is a JSON document valid
 * against the schema (within the caveats below). It is not complete: it
 * accepts one layout of each valid value, the one a model writes:
 *   - objects list their declared properties in declared order, required
 *     ones always, optional ones or not; no other keys are generated when
 *     `properties` is given (additionalProperties true, absent or a schema
 *     then only widens what the schema allows, never what is produced);
 *     an object schema without `properties` takes any keys, with values of
 *     additionalProperties (a schema, or any value);
 *   - whitespace after `{`, `[`, `:` and `,` and after each value inside
 *     a container: nothing, one space or tab, or a line break ("\n" or
 *     "\r\n") and at most JSON_SCHEMA_INDENT_MAX spaces or tabs of
 *     indentation (compact, spaced and indented layouts; a model held to
 *     the grammar cannot fill a point with runs of blanks, which a looser
 *     bound let a small model do); none before or after the root value;
 *   - numbers: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? (any number
 *     of digits), integers without fraction or exponent;
 *   - enum and const values are matched as cJSON serializes them (scalars
 *     exactly; inside arrays and objects the bounded whitespace above).
 * Caveats: oneOf is taken as anyOf (an instance valid against several
 * branches is accepted); format date allows day 31 in every month. A
 * \u escape of a lone surrogate is refused (a pair is one character).
 *
 * Supported: type (object, array, string, number, integer, boolean, null,
 * and arrays of them; absent: inferred from the keywords present, else any
 * value), properties, required, additionalProperties (false / true /
 * schema), items (schema, boolean, or an array as tuple items),
 * prefixItems, additionalItems, minItems, maxItems, enum, const, anyOf,
 * oneOf (as anyOf: branches are not checked to be exclusive), allOf (merged:
 * properties and required united, other keywords must agree), $ref to
 * "#", "#/$defs/...", "#/definitions/..." or any local JSON pointer
 * (recursion allowed), minLength, maxLength (code points; at most
 * GRAMMAR_MAX_REPEAT), format date, time, date-time (RFC 3339; the day is
 * 01-31 in every month) and uuid, integer minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (bounds within +-10^15), number
 * minimum 0. Annotations (title, description, default, examples, $comment,
 * $schema, $id, deprecated, readOnly, writeOnly, ...) and unknown keywords
 * are ignored.
 *
 * Refused with an error naming the keyword and its JSON pointer: pattern,
 * patternProperties, propertyNames, min/maxProperties, dependent*,
 * unevaluated*, contains, uniqueItems true, not, if/then/else, multipleOf,
 * other formats, number bounds other than minimum 0, remote $ref, $ref or
 * anyOf/oneOf/enum/const beside other validation keywords, the false
 * schema, unsatisfiable bounds, and schemas nested deeper than
 * JSON_SCHEMA_MAX_DEPTH. */
#ifndef DS_JSON_SCHEMA_H
#define DS_JSON_SCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "text/grammar.h"

#define JSON_SCHEMA_INDENT_MAX 20
#define JSON_SCHEMA_MAX_DEPTH 128

/* The grammar's text (GBNF, malloc'd; start rule "root"), or NULL with err
 * filled. schema NULL: json_object mode, any JSON object. */
char *json_schema_to_gbnf(const cJSON *schema, char *err, size_t errlen);
/* The same, parsed: the grammar, or NULL with err filled. */
grammar *json_schema_grammar(const cJSON *schema, char *err, size_t errlen);

#endif
