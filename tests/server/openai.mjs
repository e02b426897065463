// OpenAI chat completions, completions and models through the official `openai` client against `dspark serve` running the
// scripted model (tests/scripted.c): every answer is known text.
import {
    assert, openai, run, test, SCRIPT, USER_Q, MODEL_ID, WEATHER_TOOL_OPENAI,
    checkCount, checkXDspark, checkOpenAIUsage, streamSSE, request,
} from "./common.mjs";

const client = openai();
const user = [{ role: "user", content: USER_Q }];
const model = MODEL_ID || "scripted";

// collects a chat stream: text per field, tool calls assembled by index
async function collectChat(stream) {
    const out = { chunks: [], content: "", reasoning: "", toolCalls: [], finish: null, usage: null, roleSeen: false };
    for await (const c of stream) {
        out.chunks.push(c);
        assert.equal(c.object, "chat.completion.chunk");
        if (c.usage) out.usage = c.usage;
        for (const ch of c.choices ?? []) {
            assert.equal(ch.index, 0);
            const d = ch.delta ?? {};
            if (d.role) {
                assert.equal(d.role, "assistant");
                out.roleSeen = true;
            }
            if (typeof d.content === "string") out.content += d.content;
            if (typeof d.reasoning_content === "string") out.reasoning += d.reasoning_content;
            for (const tc of d.tool_calls ?? []) {
                const i = tc.index;
                assert.ok(Number.isInteger(i), "delta.tool_calls[].index");
                out.toolCalls[i] ??= { id: "", type: "", name: "", arguments: "" };
                const t = out.toolCalls[i];
                if (tc.id) t.id += tc.id;
                if (tc.type) t.type = tc.type;
                if (tc.function?.name) t.name += tc.function.name;
                if (tc.function?.arguments) t.arguments += tc.function.arguments;
            }
            if (ch.finish_reason) {
                assert.equal(out.finish, null, "finish_reason given twice");
                out.finish = ch.finish_reason;
            }
        }
    }
    const ids = new Set(out.chunks.map((c) => c.id));
    assert.equal(ids.size, 1, "every chunk carries the same id");
    return out;
}

test("models.list: one model, the served id", async () => {
    const page = await client.models.list();
    assert.equal(page.data.length, 1);
    const m = page.data[0];
    assert.equal(m.object, "model");
    if (MODEL_ID) assert.equal(m.id, MODEL_ID);
    assert.equal(typeof m.owned_by, "string");
    const one = await client.models.retrieve(m.id);
    assert.equal(one.id, m.id);
    assert.equal(one.object, "model");
});

test("chat: thinking on, no tools: reasoning_content + the raw tool markup as content", async () => {
    const r = await client.chat.completions.create({ model, messages: user });
    assert.equal(r.object, "chat.completion");
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, model);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, "assistant");
    assert.equal(c.message.reasoning_content, SCRIPT.think);
    assert.equal(c.message.content, SCRIPT.toolMarkup);
    assert.ok(!c.message.tool_calls || c.message.tool_calls.length === 0, "no tools given: no tool_calls");
    assert.equal(c.finish_reason, "stop");
    checkOpenAIUsage(r.usage);
    checkCount(r.usage.completion_tokens, SCRIPT.thinkTokens, "completion_tokens");
    checkXDspark(r.x_dspark);
});

test("chat: enable_thinking:false (top level) gives the plain answer", async () => {
    const r = await client.chat.completions.create({ model, messages: user, enable_thinking: false });
    const c = r.choices[0];
    assert.equal(c.message.content, SCRIPT.hello);
    assert.ok(!c.message.reasoning_content, `no reasoning: ${JSON.stringify(c.message.reasoning_content)}`);
    assert.equal(c.finish_reason, "stop");
    checkOpenAIUsage(r.usage);
    checkCount(r.usage.completion_tokens, SCRIPT.helloTokens, "completion_tokens");
});

test("chat: chat_template_kwargs.enable_thinking false, and top-level wins over kwargs", async () => {
    let r = await client.chat.completions.create({ model, messages: user, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(r.choices[0].message.content, SCRIPT.hello);
    r = await client.chat.completions.create({
        model, messages: user, enable_thinking: true, chat_template_kwargs: { enable_thinking: false },
    });
    assert.equal(r.choices[0].message.reasoning_content, SCRIPT.think);
});

test("chat: tools -> tool_calls, finish_reason tool_calls", async () => {
    const r = await client.chat.completions.create({ model, messages: user, tools: [WEATHER_TOOL_OPENAI] });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    assert.ok(c.message.content === null || c.message.content === "", `content ${JSON.stringify(c.message.content)}`);
    assert.equal(c.message.reasoning_content, SCRIPT.think);
    assert.equal(c.message.tool_calls?.length, 1);
    const tc = c.message.tool_calls[0];
    assert.equal(tc.type, "function");
    assert.ok(typeof tc.id === "string" && tc.id.length > 0, "tool call id");
    assert.equal(tc.function.name, SCRIPT.toolName);
    assert.equal(typeof tc.function.arguments, "string");
    assert.deepEqual(JSON.parse(tc.function.arguments), SCRIPT.toolArgs);
    checkOpenAIUsage(r.usage);
});

test("chat stream: reasoning_content and content deltas, final chunk with x_dspark", async () => {
    const s = await client.chat.completions.create({ model, messages: user, stream: true });
    const o = await collectChat(s);
    assert.ok(o.roleSeen, "a delta with role assistant");
    assert.equal(o.reasoning, SCRIPT.think);
    assert.equal(o.content, SCRIPT.toolMarkup);
    assert.equal(o.toolCalls.length, 0);
    assert.equal(o.finish, "stop");
    assert.equal(o.usage, null, "no usage without stream_options.include_usage");
    const last = o.chunks[o.chunks.length - 1];
    checkXDspark(last.x_dspark, "last chunk x_dspark");
});

test("chat stream: tools -> delta.tool_calls, finish tool_calls, no markup in content", async () => {
    const s = await client.chat.completions.create({ model, messages: user, tools: [WEATHER_TOOL_OPENAI], stream: true });
    const o = await collectChat(s);
    assert.equal(o.reasoning, SCRIPT.think);
    assert.ok(!o.content.includes("<tool_call>"), `content ${JSON.stringify(o.content)}`);
    assert.equal(o.content.trim(), "");
    assert.equal(o.toolCalls.length, 1);
    assert.equal(o.toolCalls[0].name, SCRIPT.toolName);
    assert.equal(o.toolCalls[0].type, "function");
    assert.ok(o.toolCalls[0].id.length > 0);
    assert.deepEqual(JSON.parse(o.toolCalls[0].arguments), SCRIPT.toolArgs);
    assert.equal(o.finish, "tool_calls");
    // the SDK's own accumulator agrees
    const st = client.chat.completions.stream({ model, messages: user, tools: [WEATHER_TOOL_OPENAI] });
    const fin = await st.finalChatCompletion();
    assert.equal(fin.choices[0].message.tool_calls[0].function.name, SCRIPT.toolName);
    assert.deepEqual(JSON.parse(fin.choices[0].message.tool_calls[0].function.arguments), SCRIPT.toolArgs);
});

test("chat stream: thinking off, include_usage gives a usage chunk equal to the non-stream usage", async () => {
    const body = { model, messages: user, enable_thinking: false };
    const ns = await client.chat.completions.create(body);
    const s = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    const o = await collectChat(s);
    assert.equal(o.content, SCRIPT.hello);
    assert.equal(o.reasoning, "");
    assert.equal(o.finish, "stop");
    checkOpenAIUsage(o.usage, "stream usage");
    assert.deepEqual(
        [o.usage.prompt_tokens, o.usage.completion_tokens, o.usage.total_tokens],
        [ns.usage.prompt_tokens, ns.usage.completion_tokens, ns.usage.total_tokens],
    );
    const withUsage = o.chunks.filter((c) => c.usage);
    assert.equal(withUsage.length, 1, "exactly one chunk carries usage");
});

test("chat: stop sequence cuts the text, finish_reason stop (non-stream and stream)", async () => {
    const body = { model, messages: user, enable_thinking: false, stop: ["dspark"] };
    const r = await client.chat.completions.create(body);
    const t = r.choices[0].message.content ?? "";
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.ok(!t.includes("dspark") && t.length > 0 && SCRIPT.hello.startsWith(t), `content ${JSON.stringify(t)}`);
    assert.equal(t.trimEnd(), "Hello from");
    const o = await collectChat(await client.chat.completions.create({ ...body, stream: true }));
    assert.equal(o.content, t);
    assert.equal(o.finish, "stop");
    // a single string works too
    const r2 = await client.chat.completions.create({ ...body, stop: " from" });
    assert.equal(r2.choices[0].message.content, "Hello");
});

test("chat: max_tokens small -> finish length, completion_tokens == max_tokens", async () => {
    const r = await client.chat.completions.create({ model, messages: user, enable_thinking: false, max_tokens: 3 });
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.completion_tokens, 3);
    assert.equal(r.choices[0].message.content, SCRIPT.hello3);
    checkOpenAIUsage(r.usage);
    const r2 = await client.chat.completions.create({
        model, messages: user, enable_thinking: false, max_completion_tokens: 2,
    });
    assert.equal(r2.usage.completion_tokens, 2);
    assert.equal(r2.choices[0].finish_reason, "length");
    const o = await collectChat(await client.chat.completions.create({
        model, messages: user, enable_thinking: false, max_tokens: 3, stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(o.finish, "length");
    assert.equal(o.content, SCRIPT.hello3);
    assert.equal(o.usage.completion_tokens, 3);
});

test("chat: multi-turn with a tool result (arguments as a string) is accepted", async () => {
    const messages = [
        { role: "system", content: "You are terse." },
        { role: "user", content: USER_Q },
        {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "call_abc", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
        },
        { role: "tool", tool_call_id: "call_abc", content: "sunny, 21 C" },
    ];
    const r = await client.chat.completions.create({ model, messages, tools: [WEATHER_TOOL_OPENAI] });
    assert.equal(r.choices[0].finish_reason, "tool_calls"); // the script answers with a call again
    const r2 = await client.chat.completions.create({ model, messages: [...messages, { role: "assistant", content: "Sunny." },
        { role: "user", content: [{ type: "text", text: "Thanks" }, { type: "text", text: "bye" }] }],
        tools: [WEATHER_TOOL_OPENAI], enable_thinking: false });
    assert.equal(r2.choices[0].message.content, SCRIPT.hello);
    assert.ok(r2.usage.prompt_tokens > r.usage.prompt_tokens, "a longer conversation has more prompt tokens");
});

test("chat: the request's model name is echoed, never selects anything", async () => {
    const r = await client.chat.completions.create({ model: "not-a-served-model", messages: user, enable_thinking: false });
    assert.equal(r.model, "not-a-served-model");
    assert.equal(r.choices[0].message.content, SCRIPT.hello);
});

test("completions: raw prompt, non-stream and stream", async () => {
    const r = await client.completions.create({ model, prompt: SCRIPT.rawPrompt, max_tokens: 32 });
    assert.equal(r.object, "text_completion");
    assert.equal(r.choices[0].text, SCRIPT.fox);
    assert.equal(r.choices[0].finish_reason, "stop");
    checkOpenAIUsage(r.usage);
    checkCount(r.usage.completion_tokens, SCRIPT.foxTokens, "completion_tokens");
    checkXDspark(r.x_dspark);
    const s = await client.completions.create({ model, prompt: SCRIPT.rawPrompt, max_tokens: 32, stream: true });
    let text = "", finish = null, last = null;
    for await (const c of s) {
        last = c;
        for (const ch of c.choices ?? []) {
            text += ch.text ?? "";
            if (ch.finish_reason) finish = ch.finish_reason;
        }
    }
    assert.equal(text, SCRIPT.fox);
    assert.equal(finish, "stop");
    checkXDspark(last.x_dspark, "last completion chunk x_dspark");
    const r2 = await client.completions.create({ model, prompt: SCRIPT.rawPrompt, max_tokens: 2 });
    assert.equal(r2.choices[0].text, "There was");
    assert.equal(r2.choices[0].finish_reason, "length");
    assert.equal(r2.usage.completion_tokens, 2);
    const r3 = await client.completions.create({ model, prompt: SCRIPT.rawPrompt, stop: [" a "] });
    assert.equal(r3.choices[0].text, "There was");
    assert.equal(r3.choices[0].finish_reason, "stop");
});

test("completions stream: raw SSE ends with data: [DONE]", async () => {
    const { status, frames } = await streamSSE("/v1/completions", { model, prompt: SCRIPT.rawPrompt, stream: true });
    assert.equal(status, 200);
    const data = frames.filter((f) => f.data !== null);
    assert.equal(data[data.length - 1].data, "[DONE]");
    assert.equal(data.slice(0, -1).map((f) => f.json.choices?.[0]?.text ?? "").join(""), SCRIPT.fox);
});

test("routes: without /v1 and with a query string", async () => {
    const r = await request("POST", "/chat/completions?x=1", {
        body: { model, messages: user, enable_thinking: false },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, SCRIPT.hello);
    const m = await request("GET", "/models");
    assert.equal(m.status, 200);
    assert.equal(m.json.object, "list");
    assert.match(String(r.headers["content-type"]), /application\/json/);
});

test("chat: reasoning_budget closes the reasoning and the answer follows (streamed too)", async () => {
    const body = { model: "m", messages: [{ role: "user", content: USER_Q }], max_tokens: 64, reasoning_budget: 2 };
    const r = await client.chat.completions.create(body);
    assert.equal(r.choices[0].message.reasoning_content, "Checking");
    assert.equal(r.choices[0].message.content, SCRIPT.hello);
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.equal(r.x_dspark.reasoning_budget_forced, true);
    let reason = "", text = "";
    const st = await client.chat.completions.create({ ...body, stream: true });
    for await (const ch of st) {
        const d = ch.choices[0]?.delta ?? {};
        reason += d.reasoning_content ?? "";
        text += d.content ?? "";
    }
    assert.equal(reason, "Checking");
    assert.equal(text, SCRIPT.hello);
});

test("logprobs: chat (whole and streamed) and completions report the target's token log-probabilities", async () => {
    // the scripted model gives its next token a logit of 64 and every other token 0:
    // log p(chosen) ~ 0, the runner-up ~ -64
    const body = { model, messages: user, enable_thinking: false, logprobs: true, top_logprobs: 2 };
    const r = await client.chat.completions.create(body);
    const lp = r.choices[0].logprobs.content;
    assert.equal(r.choices[0].message.content, SCRIPT.hello);
    assert.equal(lp.map((t) => t.token).join(""), SCRIPT.hello);
    for (const t of lp) {
        assert.ok(t.logprob <= 0 && t.logprob > -1e-3, `logprob ${t.logprob}`);
        assert.deepEqual(t.bytes, [...Buffer.from(t.token, "utf8")]);
        assert.equal(t.top_logprobs.length, 2);
        assert.equal(t.top_logprobs[0].token, t.token);
        assert.ok(t.top_logprobs[1].logprob < -60 && t.top_logprobs[1].logprob > -70, `runner-up ${t.top_logprobs[1].logprob}`);
    }
    let streamed = [];
    const st = await client.chat.completions.create({ ...body, stream: true });
    for await (const ch of st) streamed.push(...(ch.choices[0]?.logprobs?.content ?? []));
    assert.equal(streamed.map((t) => t.token).join(""), SCRIPT.hello);
    const c = await client.completions.create({ model, prompt: SCRIPT.rawPrompt, max_tokens: 16, logprobs: 1 });
    const cl = c.choices[0].logprobs;
    assert.equal(cl.tokens.join(""), SCRIPT.fox);
    assert.equal(cl.text_offset[0], 0);
    for (let i = 1; i < cl.tokens.length; i++)
        assert.equal(cl.text_offset[i], cl.text_offset[i - 1] + Buffer.byteLength(cl.tokens[i - 1]));
    assert.ok(cl.token_logprobs.every((x) => x <= 0 && x > -1e-3));
    assert.equal(Object.keys(cl.top_logprobs[0]).length, 1);
    // without logprobs there are none
    const plain = await client.chat.completions.create({ model, messages: user, enable_thinking: false });
    assert.ok(plain.choices[0].logprobs == null);
});

await run();
