// The request fields that shape the distribution and the output format,
// against a live `dspark serve`. $DSPARK_FIELDS_PHASE picks the model:
//   scripted: the scripted Qwen3 (tests/scripted.c; Hermes tool calls, a
//     reasoning block): tool_choice required / named enforced in each
//     dialect, with reasoning before the call left free; schemas refused
//     with the reason;
//   bundled: the bundled model: response_format / text.format answers
//     that validate against their schema, n > 1 (seeded, streamed with
//     each chunk's index), logit_bias, penalties, ignore_eos, bad fields.
import { assert, openai, anthropic, run, test, postJSON, streamSSE, MODEL_ID, SCRIPT, USER_Q } from "./common.mjs";

const PHASE = process.env.DSPARK_FIELDS_PHASE || "bundled";
const model = MODEL_ID || "m";

// A validator for the keywords the schemas here use, from the JSON Schema text.
function valid(v, s) {
    if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) return false;
    const t = s.type;
    const isObj = v !== null && typeof v === "object" && !Array.isArray(v);
    if (t === "object" && !isObj) return false;
    if (t === "array" && !Array.isArray(v)) return false;
    if (t === "string" && typeof v !== "string") return false;
    if (t === "boolean" && typeof v !== "boolean") return false;
    if (t === "integer" && !Number.isInteger(v)) return false;
    if (t === "number" && typeof v !== "number") return false;
    if (typeof v === "number" && ((s.minimum !== undefined && v < s.minimum) || (s.maximum !== undefined && v > s.maximum)))
        return false;
    if (typeof v === "string" && s.maxLength !== undefined && [...v].length > s.maxLength) return false;
    if (isObj) {
        for (const k of s.required || []) if (!(k in v)) return false;
        for (const [k, x] of Object.entries(v)) {
            if (s.properties && !(k in s.properties) && s.additionalProperties === false) return false;
            if (s.properties && s.properties[k] && !valid(x, s.properties[k])) return false;
        }
    }
    if (Array.isArray(v)) {
        if (s.maxItems !== undefined && v.length > s.maxItems) return false;
        if (s.items && !v.every((x) => valid(x, s.items))) return false;
    }
    return true;
}

if (PHASE === "scripted") {
    const CITY_TOOL = {
        type: "function",
        function: {
            name: "get_weather", description: "Current weather of a city",
            parameters: { type: "object", properties: { city: { enum: ["Paris", "Rome"] } }, required: ["city"],
                additionalProperties: false },
        },
    };
    const TIME_TOOL = { type: "function", function: { name: "get_time", parameters: { type: "object",
        properties: { zone: { type: "integer", minimum: -12, maximum: 14 } }, required: ["zone"] } } };
    const client = openai();
    const user = [{ role: "user", content: USER_Q }];

    function checkCall(name, args, params, what) {
        assert.equal(name, params === CITY_TOOL.function.parameters ? "get_weather" : name, what);
        const a = typeof args === "string" ? JSON.parse(args) : args;
        assert.ok(valid(a, params), `${what}: arguments ${JSON.stringify(a)} do not validate`);
    }

    test("chat: a named tool is called, its arguments valid, the reasoning before it free", async () => {
        const r = await client.chat.completions.create({ model, messages: user, tools: [TIME_TOOL, CITY_TOOL],
            tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 120 });
        const c = r.choices[0];
        assert.equal(c.finish_reason, "tool_calls");
        assert.equal(c.message.tool_calls.length, 1);
        checkCall(c.message.tool_calls[0].function.name, c.message.tool_calls[0].function.arguments,
            CITY_TOOL.function.parameters, "named");
        assert.equal(c.message.reasoning_content, SCRIPT.think); // the script's reasoning, untouched
    });

    test("chat: tool_choice required with thinking off (the script would answer text)", async () => {
        const r = await client.chat.completions.create({ model, messages: user, tools: [TIME_TOOL, CITY_TOOL],
            tool_choice: "required", max_tokens: 120, chat_template_kwargs: { enable_thinking: false } });
        const c = r.choices[0];
        assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c.message));
        assert.ok(c.message.tool_calls.length >= 1);
        for (const t of c.message.tool_calls) {
            const params = t.function.name === "get_time" ? TIME_TOOL.function.parameters : CITY_TOOL.function.parameters;
            checkCall(t.function.name, t.function.arguments, params, "required");
        }
        // unconstrained, the same request answers the script's text
        const free = await client.chat.completions.create({ model, messages: user, tools: [TIME_TOOL, CITY_TOOL],
            max_tokens: 40, chat_template_kwargs: { enable_thinking: false } });
        assert.equal(free.choices[0].message.content, SCRIPT.hello);
    });

    test("responses: tool_choice required gives a function_call item", async () => {
        const r = await postJSON("/v1/responses", { model, input: USER_Q, max_output_tokens: 120,
            tools: [{ type: "function", name: "get_weather", parameters: CITY_TOOL.function.parameters }],
            tool_choice: "required" });
        assert.equal(r.status, 200, r.text);
        const calls = r.json.output.filter((o) => o.type === "function_call");
        assert.equal(calls.length >= 1, true, r.text);
        checkCall(calls[0].name, calls[0].arguments, CITY_TOOL.function.parameters, "responses");
    });

    test("anthropic: tool_choice any and tool give tool_use blocks", async () => {
        const c = anthropic();
        for (const tc of [{ type: "any" }, { type: "tool", name: "get_weather" }]) {
            const m = await c.messages.create({ model, max_tokens: 120, messages: user, tool_choice: tc,
                tools: [{ name: "get_weather", input_schema: CITY_TOOL.function.parameters }] });
            assert.equal(m.stop_reason, "tool_use", JSON.stringify(m.content));
            const use = m.content.find((b) => b.type === "tool_use");
            checkCall(use.name, use.input, CITY_TOOL.function.parameters, `anthropic ${tc.type}`);
        }
    });

    test("a schema dspark cannot enforce is refused with the keyword", async () => {
        const r = await postJSON("/v1/chat/completions", { model, messages: user, tool_choice: "required",
            tools: [{ type: "function", function: { name: "f", parameters: { type: "object",
                properties: { s: { type: "string", pattern: "^a+$" } } } } }] });
        assert.equal(r.status, 400, r.text);
        assert.match(r.json.error.message, /pattern/);
        assert.match(r.json.error.message, /tool "f"/);
        const j = await postJSON("/v1/chat/completions", { model, messages: user,
            response_format: { type: "json_schema", json_schema: { name: "x", schema: { not: {} } } } });
        assert.equal(j.status, 400, j.text);
        assert.match(j.json.error.message, /not/);
    });
} else {
    const client = openai();
    const SCHEMAS = [
        { type: "object", properties: { name: { type: "string", maxLength: 10 },
            age: { type: "integer", minimum: 0, maximum: 120 }, ok: { type: "boolean" } },
          required: ["name", "age", "ok"], additionalProperties: false },
        { type: "object", properties: { lang: { enum: ["c", "python", "go"] },
            lines: { type: "array", items: { type: "integer", minimum: 1, maximum: 99 }, maxItems: 3 } },
          required: ["lang", "lines"], additionalProperties: false },
    ];
    const PROMPTS = ["Describe a person as JSON.", "Which language is this? def f(x): return x"];

    test("chat response_format json_schema: every finished answer validates", async () => {
        let done = 0, total = 0;
        for (const [si, schema] of SCHEMAS.entries())
            for (const content of PROMPTS)
                for (const sampling of [{ temperature: 0 }, { temperature: 0.8, seed: 11 }]) {
                    const r = await client.chat.completions.create({ model, messages: [{ role: "user", content }],
                        max_tokens: 300, frequency_penalty: 1, ...sampling,
                        response_format: { type: "json_schema", json_schema: { name: `s${si}`, strict: true, schema } } });
                    total++;
                    const c = r.choices[0];
                    if (c.finish_reason !== "stop") continue;
                    done++;
                    const v = JSON.parse(c.message.content);
                    assert.ok(valid(v, schema), `schema ${si}: ${c.message.content}`);
                }
        assert.ok(done >= total / 2, `only ${done} of ${total} answers finished`);
    }, 240000);

    test("responses text.format json_schema and chat json_object", async () => {
        const r = await postJSON("/v1/responses", { model, input: PROMPTS[1], max_output_tokens: 300,
            temperature: 0, frequency_penalty: 1,
            text: { format: { type: "json_schema", name: "lang", strict: true, schema: SCHEMAS[1] } } });
        assert.equal(r.status, 200, r.text);
        if (r.json.status === "completed") {
            const msg = r.json.output.find((o) => o.type === "message");
            assert.ok(valid(JSON.parse(msg.content[0].text), SCHEMAS[1]), msg.content[0].text);
        }
        const o = await client.chat.completions.create({ model, messages: [{ role: "user", content: PROMPTS[0] }],
            max_tokens: 200, temperature: 0, response_format: { type: "json_object" } });
        if (o.choices[0].finish_reason === "stop") {
            const v = JSON.parse(o.choices[0].message.content);
            assert.equal(typeof v, "object");
            assert.ok(v !== null && !Array.isArray(v));
        }
    }, 120000);

    test("n > 1: choices indexed, a seed reproduces them, the stream carries each index", async () => {
        const body = { model, messages: [{ role: "user", content: "def add(a, b):" }], max_tokens: 12, n: 3,
            temperature: 1, seed: 21 };
        const a = await client.chat.completions.create(body);
        const b = await client.chat.completions.create(body);
        assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
        assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
        assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, "the choices are all the same sample");
        const gen = a.usage.completion_tokens;
        const texts = ["", "", ""];
        let usage = null;
        const s = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
        for await (const ch of s) {
            if (ch.usage) usage = ch.usage;
            for (const c of ch.choices) texts[c.index] += c.delta?.content ?? "";
        }
        assert.deepEqual(texts, a.choices.map((c) => c.message.content));
        assert.equal(usage.completion_tokens, gen);
        const big = await postJSON("/v1/chat/completions", { ...body, n: 33 });
        assert.equal(big.status, 400);
        assert.match(big.json.error.message, /'n' must be at most 32/);
    });

    test("logit_bias forces and bans tokens; out-of-vocabulary ids are refused", async () => {
        const amp = (await postJSON("/tokenize", { content: "&" })).json.tokens[0];
        const msgs = [{ role: "user", content: "def fib" }];
        const f = await client.chat.completions.create({ model, messages: msgs, max_tokens: 8, temperature: 0,
            logit_bias: { [amp]: 100 } });
        assert.equal(f.choices[0].message.content, "&".repeat(8));
        const plain = await client.chat.completions.create({ model, messages: msgs, max_tokens: 8, temperature: 0 });
        const first = (await postJSON("/tokenize", { content: plain.choices[0].message.content })).json.tokens[0];
        const banned = await client.chat.completions.create({ model, messages: msgs, max_tokens: 8, temperature: 0,
            logit_bias: { [first]: -100 } });
        const ids = (await postJSON("/tokenize", { content: banned.choices[0].message.content })).json.tokens;
        assert.ok(!ids.includes(first), "a banned token was generated");
        const bad = await postJSON("/v1/completions", { model, prompt: "x", logit_bias: { "999999": 1 } });
        assert.equal(bad.status, 400);
        assert.match(bad.json.error.message, /token id 999999 is outside the vocabulary/);
    });

    test("penalties change a greedy answer; ignore_eos runs to max_tokens", async () => {
        const msgs = [{ role: "user", content: "Write a Python function that returns the factorial of n." }];
        const base = await client.chat.completions.create({ model, messages: msgs, max_tokens: 60, temperature: 0 });
        for (const p of [{ presence_penalty: 1.5 }, { frequency_penalty: 1.5 }, { repetition_penalty: 1.5 },
            { repeat_penalty: 1.5, repeat_last_n: 16 }]) {
            const r = await postJSON("/v1/chat/completions", { model, messages: msgs, max_tokens: 60, temperature: 0, ...p });
            assert.equal(r.status, 200, r.text);
            assert.notEqual(r.json.choices[0].message.content, base.choices[0].message.content, JSON.stringify(p));
        }
        const hi = [{ role: "user", content: "Say hi." }];
        const ends = await client.chat.completions.create({ model, messages: hi, max_tokens: 300, temperature: 0 });
        assert.equal(ends.choices[0].finish_reason, "stop"); // the premise: this answer ends by itself
        const r = await postJSON("/v1/chat/completions", { model, messages: hi, max_tokens: 300, temperature: 0,
            ignore_eos: true });
        assert.equal(r.json.choices[0].finish_reason, "length");
        assert.equal(r.json.usage.completion_tokens, 300);
    }, 120000);

    test("anthropic temperature above 1 is refused as Anthropic does", async () => {
        const r = await postJSON("/v1/messages", { model, max_tokens: 4, temperature: 1.2,
            messages: [{ role: "user", content: "x" }] });
        assert.equal(r.status, 400);
        assert.equal(r.json.type, "error");
        assert.equal(r.json.error.type, "invalid_request_error");
        assert.match(r.json.error.message, /temperature/);
    });
}

await run();
