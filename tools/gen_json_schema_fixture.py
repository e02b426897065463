#!/usr/bin/env python3
"""Reference fixture for dspark's JSON-Schema-to-grammar compiler
(src/text/json_schema.c), labelled by an independent validator.

For each schema below (all inside the supported subset), generates
instances in the layout the grammar produces (declared property order, no
undeclared keys, compact or lightly spaced), plus mutations of them (wrong
types, missing required keys, extra keys, lengths, bounds, counts, enum
values), and labels each with python-jsonschema's Draft 2020-12 validator.
Mutations that stay valid are dropped (the grammar need not accept every
valid layout); so the C test (tests/test_json_schema.c) checks that every
`valid` instance is accepted and every invalid one refused.

Writes tests/data/json_schema/fixture.jsonl, one
{"schema": ..., "instance": "<text>", "valid": true|false} per line.

Usage (Debian: apt-get install python3-jsonschema):
  /usr/bin/python3 tools/gen_json_schema_fixture.py [OUT]
"""
import json
import os
import random
import sys

import jsonschema

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
     "email": {"type": "string"}}, "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}},
    {"type": "array", "items": {"type": "integer", "minimum": -20, "maximum": 1234}, "minItems": 1, "maxItems": 4},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False, "minItems": 1},
    {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "string", "maxLength": 2}},
    {"type": "string", "minLength": 2, "maxLength": 5},
    {"enum": ["red", "green", 3, None, [1, "x"]]},
    {"const": {"k": [True, 2.5]}},
    {"anyOf": [{"type": "integer", "exclusiveMinimum": 10}, {"type": "string", "maxLength": 1}]},
    {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "null"}, "maxItems": 2}]},
    {"type": ["integer", "null"], "maximum": -3},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
     "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}}, "required": ["v"],
     "additionalProperties": False}}, "$ref": "#/$defs/node"},
    {"allOf": [{"type": "object", "properties": {"x": {"type": "integer", "minimum": 5, "maximum": 95}}, "required": ["x"]},
               {"properties": {"y": {"type": "string", "maxLength": 3}}, "required": ["y"]}], "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "integer", "maximum": 9}},
    {"type": "object", "properties": {"p": {"type": "integer"}, "q": {"type": "string"}, "r": {"type": "boolean"}},
     "required": ["q"], "additionalProperties": False},
    {"type": "integer", "minimum": -1000000, "maximum": 99999},
    {"type": "number", "minimum": 0},
    True,
]

WORDS = ["", "a", "ab", "xyz", "hello", "caf\u00e9", "\u4e2d\u6587", "q\"uote", "back\\slash", "tab\there", "new\nline",
         "\U0001F600"]


def resolve(root, s):
    while isinstance(s, dict) and "$ref" in s:
        ref = s["$ref"]
        node = root
        for part in ref[2:].split("/") if ref != "#" else []:
            node = node[part]
        s = node
    return s


def merged(s):
    if isinstance(s, dict) and "allOf" in s:
        m = {k: v for k, v in s.items() if k != "allOf"}
        m.setdefault("properties", {})
        m.setdefault("required", [])
        for b in s["allOf"]:
            for k, v in b.items():
                if k == "properties":
                    m["properties"].update(v)
                elif k == "required":
                    m["required"] += [r for r in v if r not in m["required"]]
                else:
                    m[k] = v
        return m
    return s


def gen(root, s, rng, depth=0):
    s = merged(resolve(root, s))
    if s is True or s == {}:
        return rng.choice([1, "s", None, True, [1], {"k": 2}, 2.5])
    if "enum" in s:
        return rng.choice(s["enum"])
    if "const" in s:
        return s["const"]
    if "anyOf" in s or "oneOf" in s:
        return gen(root, rng.choice(s.get("anyOf") or s.get("oneOf")), rng, depth)
    t = s.get("type")
    if isinstance(t, list):
        t = rng.choice(t)
    if t == "null":
        return None
    if t == "boolean":
        return rng.random() < 0.5
    if t == "integer":
        lo = s.get("minimum", s.get("exclusiveMinimum", -10**6 - 1) + 1)
        hi = s.get("maximum", s.get("exclusiveMaximum", 10**6 + 1) - 1)
        return rng.choice([lo, hi, rng.randint(lo, hi), rng.randint(lo, min(hi, lo + 20))])
    if t == "number":
        v = rng.choice([0, 1.5, 3, 1e21, 0.001, 12345.678])
        return v if s.get("minimum", -1) <= v else -v
    if t == "string":
        lo, hi = s.get("minLength", 0), s.get("maxLength", 8)
        w = rng.choice(WORDS)
        while len(w) < lo:
            w += rng.choice("abc\u00e9")
        return w[:hi]
    if t == "array":
        prefix = s.get("prefixItems", [])
        items = s.get("items", True)
        lo, hi = s.get("minItems", 0), s.get("maxItems", 4 if depth < 2 else 1)
        if items is False:
            hi = min(hi, len(prefix))
        n = rng.randint(lo, max(lo, hi))
        return [gen(root, prefix[i] if i < len(prefix) else items, rng, depth + 1) for i in range(n)]
    if t == "object" or "properties" in s:
        props = s.get("properties", {})
        req = s.get("required", [])
        out = {}
        for k, v in props.items():
            if k in req or rng.random() < 0.5:
                out[k] = gen(root, v, rng, depth + 1)
        if not props and s.get("additionalProperties") is not False:
            for i in range(rng.randint(0, 2)):
                out["k%d" % i] = gen(root, s.get("additionalProperties", True), rng, depth + 1)
        return out
    return None


def mutate(v, rng):
    """A random structural change somewhere in v."""
    if isinstance(v, dict) and v and rng.random() < 0.6:
        k = rng.choice(list(v))
        r = rng.random()
        w = dict(v)
        if r < 0.3:
            del w[k]
        elif r < 0.5:
            w["extra"] = 1
        else:
            w[k] = mutate(w[k], rng)
        return w
    if isinstance(v, list) and v and rng.random() < 0.6:
        w = list(v)
        r = rng.random()
        if r < 0.3:
            w.pop()
        elif r < 0.5:
            w.append(w[0])
        else:
            i = rng.randrange(len(w))
            w[i] = mutate(w[i], rng)
        return w
    return rng.choice([None, True, 0, -1, 10**7, 151, 2.5, "", "toolongstring", [], {}, "red", 9, 10, 11, -3, -2])


def layouts(v, rng):
    yield json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    if rng.random() < 0.5:
        yield json.dumps(v, separators=(", ", ": "), ensure_ascii=False)
    if rng.random() < 0.3 and not any(ord(c) > 0xFFFF for c in json.dumps(v, ensure_ascii=False)):
        yield json.dumps(v, indent=2, ensure_ascii=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                            "json_schema", "fixture.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    rng = random.Random(47)
    lines = []
    for s in SCHEMAS:
        val = jsonschema.Draft202012Validator(s)
        seen = set()
        for _ in range(20):
            v = gen(s, s, rng)
            ok = val.is_valid(v)
            if not ok:
                continue  # the generator only aims at valid values
            for text in layouts(v, rng):
                if text not in seen:
                    seen.add(text)
                    lines.append({"schema": s, "instance": text, "valid": True})
            m = mutate(v, rng)
            if not val.is_valid(m):
                text = json.dumps(m, separators=(",", ":"), ensure_ascii=False)
                if text not in seen:
                    seen.add(text)
                    lines.append({"schema": s, "instance": text, "valid": False})
    with open(out, "w", encoding="utf-8") as f:
        for l in lines:
            f.write(json.dumps(l, ensure_ascii=False) + "\n")
    print("%s: %d cases (%d valid)" % (out, len(lines), sum(l["valid"] for l in lines)))


if __name__ == "__main__":
    main()
