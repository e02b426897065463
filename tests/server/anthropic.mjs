// Anthropic Messages API through the official `@anthropic-ai/sdk` client
// against `dspark serve` running the scripted model (tests/scripted.c).
import {
    assert, anthropic, run, test, SCRIPT, USER_Q, MODEL_ID, WEATHER_TOOL_ANTHROPIC, Anthropic,
    checkCount, checkXDspark, postJSON, streamSSE,
} from "./common.mjs";

const client = anthropic();
const model = MODEL_ID || "scripted";
const user = [{ role: "user", content: USER_Q }];
const off = { type: "disabled" };

// the whole prompt: Anthropic's input_tokens leaves out what the prompt cache read
function promptTokens(u) {
    for (const k of ["cache_read_input_tokens", "cache_creation_input_tokens"])
        if (u[k] !== undefined && u[k] !== null) assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `usage.${k} ${u[k]}`);
    return u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
}

function textOf(msg) {
    return msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
}

function checkToolAnswer(msg) {
    assert.equal(msg.stop_reason, "tool_use");
    const types = msg.content.map((b) => b.type);
    const th = msg.content.filter((b) => b.type === "thinking");
    assert.equal(th.length, 1, `one thinking block: ${types}`);
    assert.equal(th[0].thinking, SCRIPT.think);
    assert.equal(typeof th[0].signature, "string");
    const tu = msg.content.filter((b) => b.type === "tool_use");
    assert.equal(tu.length, 1, `one tool_use block: ${types}`);
    assert.equal(tu[0].name, SCRIPT.toolName);
    assert.deepEqual(tu[0].input, SCRIPT.toolArgs);
    assert.ok(typeof tu[0].id === "string" && tu[0].id.length > 0);
    assert.ok(types.indexOf("thinking") < types.indexOf("tool_use"), `thinking before tool_use: ${types}`);
    assert.equal(textOf(msg).trim(), "", "no text outside the call");
}

test("messages: thinking disabled -> one text block, end_turn, usage, x_dspark", async () => {
    const m = await client.messages.create({ model, max_tokens: 64, thinking: off, messages: user });
    assert.equal(m.type, "message");
    assert.equal(m.role, "assistant");
    assert.match(m.id, /^msg_/);
    assert.equal(m.model, model);
    assert.deepEqual(m.content.map((b) => b.type), ["text"]);
    assert.equal(m.content[0].text, SCRIPT.hello);
    assert.equal(m.stop_reason, "end_turn");
    assert.equal(m.stop_sequence, null);
    assert.ok(Number.isInteger(m.usage.input_tokens) && m.usage.input_tokens >= 0);
    assert.ok(promptTokens(m.usage) > 10);
    checkCount(m.usage.output_tokens, SCRIPT.helloTokens, "output_tokens");
    checkXDspark(m.x_dspark);
});

test("messages: thinking on + tools -> thinking block, tool_use block, stop_reason tool_use", async () => {
    const m = await client.messages.create({
        model, max_tokens: 256, thinking: { type: "enabled", budget_tokens: 1024 }, tools: [WEATHER_TOOL_ANTHROPIC], messages: user,
    });
    checkToolAnswer(m);
    // the template's default (no thinking field) is thinking on as well
    checkToolAnswer(await client.messages.create({ model, max_tokens: 256, tools: [WEATHER_TOOL_ANTHROPIC], messages: user }));
    // Anthropic always parses tool calls, tools given or not
    checkToolAnswer(await client.messages.create({ model, max_tokens: 256, messages: user }));
});

test("messages stream: event order, deltas, message_delta usage, finalMessage", async () => {
    const s = await client.messages.create({
        model, max_tokens: 256, tools: [WEATHER_TOOL_ANTHROPIC], messages: user, stream: true,
    });
    const ev = [];
    for await (const e of s) ev.push(e);
    const types = ev.map((e) => e.type);
    assert.equal(types[0], "message_start", types.join(","));
    assert.equal(types[types.length - 1], "message_stop");
    assert.equal(types[types.length - 2], "message_delta");
    assert.deepEqual(ev[0].message.content, []);
    assert.equal(ev[0].message.stop_reason, null);
    assert.ok(promptTokens(ev[0].message.usage) > 0);
    // blocks: start, deltas, stop, with consecutive indexes, never interleaved
    let open = -1, next = 0;
    const blocks = [];
    for (const e of ev.slice(1, -2)) {
        if (e.type === "content_block_start") {
            assert.equal(open, -1, "a block opened inside another");
            assert.equal(e.index, next);
            open = e.index;
            blocks.push({ block: e.content_block, text: "", json: "", sig: "" });
        } else if (e.type === "content_block_delta") {
            assert.equal(e.index, open);
            const b = blocks[open], d = e.delta;
            if (d.type === "text_delta") b.text += d.text;
            else if (d.type === "thinking_delta") b.text += d.thinking;
            else if (d.type === "input_json_delta") b.json += d.partial_json;
            else if (d.type === "signature_delta") b.sig += d.signature;
            else assert.fail(`unknown delta ${d.type}`);
        } else if (e.type === "content_block_stop") {
            assert.equal(e.index, open);
            open = -1;
            next++;
        } else {
            assert.fail(`unexpected event ${e.type} between message_start and message_delta`);
        }
    }
    assert.equal(open, -1, "every block closed");
    const kinds = blocks.map((b) => b.block.type);
    assert.deepEqual(kinds.filter((k) => k !== "text"), ["thinking", "tool_use"], kinds.join(","));
    const th = blocks.find((b) => b.block.type === "thinking");
    assert.equal(th.text, SCRIPT.think);
    const tu = blocks.find((b) => b.block.type === "tool_use");
    assert.equal(tu.block.name, SCRIPT.toolName);
    assert.deepEqual(JSON.parse(tu.json), SCRIPT.toolArgs);
    const md = ev[ev.length - 2];
    assert.equal(md.delta.stop_reason, "tool_use");
    assert.ok(Number.isInteger(md.usage.output_tokens) && md.usage.output_tokens > 0);
    checkXDspark(md.x_dspark, "message_delta x_dspark");
    // the SDK's MessageStream accumulates the same message
    const fin = await client.messages.stream({ model, max_tokens: 256, tools: [WEATHER_TOOL_ANTHROPIC], messages: user }).finalMessage();
    checkToolAnswer(fin);
});

test("messages stream: thinking disabled -> text deltas, end_turn", async () => {
    const st = client.messages.stream({ model, max_tokens: 64, thinking: off, messages: user });
    let text = "";
    st.on("text", (t) => {
        text += t;
    });
    const fin = await st.finalMessage();
    assert.equal(text, SCRIPT.hello);
    assert.equal(textOf(fin), SCRIPT.hello);
    assert.equal(fin.stop_reason, "end_turn");
    checkCount(fin.usage.output_tokens, SCRIPT.helloTokens, "output_tokens");
});

test("messages: raw SSE has named events matching the data type", async () => {
    const { status, frames, headers } = await streamSSE("/v1/messages?beta=true", {
        model, max_tokens: 64, thinking: off, messages: user, stream: true,
    }, { headers: { "anthropic-version": "2023-06-01" } });
    assert.equal(status, 200);
    assert.match(headers.get("content-type"), /text\/event-stream/);
    for (const f of frames.filter((x) => x.data !== null)) assert.equal(f.event, f.json.type, `event ${f.event}`);
});

test("messages: tool_result round trip (second turn accepted)", async () => {
    const first = await client.messages.create({ model, max_tokens: 256, tools: [WEATHER_TOOL_ANTHROPIC], messages: user });
    const tu = first.content.find((b) => b.type === "tool_use");
    assert.ok(tu, "a tool_use block");
    const messages = [
        ...user,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, content: "sunny, 21 C" }] },
    ];
    const second = await client.messages.create({ model, max_tokens: 256, tools: [WEATHER_TOOL_ANTHROPIC], messages });
    assert.equal(second.stop_reason, "tool_use"); // the script calls again
    assert.ok(promptTokens(second.usage) > promptTokens(first.usage), "the history is in the prompt");
    // error results and block-list content are accepted too
    const third = await client.messages.create({
        model, max_tokens: 64, thinking: off,
        messages: [...user, { role: "assistant", content: [tu] },
            { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, is_error: true,
                content: [{ type: "text", text: "no network" }] }, { type: "text", text: "Try again later." }] }],
    });
    assert.equal(textOf(third), SCRIPT.hello);
});

test("messages: stop_sequences -> stop_reason stop_sequence (non-stream and stream)", async () => {
    const body = { model, max_tokens: 64, thinking: off, messages: user, stop_sequences: ["dspark"] };
    const m = await client.messages.create(body);
    assert.equal(m.stop_reason, "stop_sequence");
    assert.equal(m.stop_sequence, "dspark");
    assert.equal(textOf(m).trimEnd(), "Hello from");
    const fin = await client.messages.stream(body).finalMessage();
    assert.equal(fin.stop_reason, "stop_sequence");
    assert.equal(fin.stop_sequence, "dspark");
    assert.equal(textOf(fin), textOf(m));
});

test("messages: max_tokens reached -> stop_reason max_tokens", async () => {
    const m = await client.messages.create({ model, max_tokens: 3, thinking: off, messages: user });
    assert.equal(m.stop_reason, "max_tokens");
    assert.equal(m.usage.output_tokens, 3);
    assert.equal(textOf(m), SCRIPT.hello3);
});

test("messages: system as a string and as text blocks", async () => {
    const a = await client.messages.create({ model, max_tokens: 64, thinking: off, system: "Be brief.", messages: user });
    assert.equal(textOf(a), SCRIPT.hello);
    const b = await client.messages.create({
        model, max_tokens: 64, thinking: off, messages: user,
        system: [{ type: "text", text: "Be brief." }, { type: "text", text: "Answer in English.", cache_control: { type: "ephemeral" } }],
    });
    assert.equal(textOf(b), SCRIPT.hello);
    const none = await client.messages.create({ model, max_tokens: 64, thinking: off, messages: user });
    assert.ok(promptTokens(a.usage) > promptTokens(none.usage), "the system prompt is in the prompt");
    assert.ok(promptTokens(b.usage) > promptTokens(a.usage), "both system blocks are in the prompt");
});

test("messages: a mid-conversation system message is accepted", async () => {
    const m = await client.messages.create({
        model, max_tokens: 64, thinking: off,
        messages: [
            { role: "user", content: "Hi" },
            { role: "assistant", content: "Hello." },
            { role: "system", content: "The user prefers short answers." },
            { role: "user", content: USER_Q },
        ],
    });
    assert.equal(textOf(m), SCRIPT.hello);
});

test("count_tokens: a positive integer that grows with the prompt and equals usage.input_tokens", async () => {
    const small = await client.messages.countTokens({ model, messages: user, thinking: off });
    assert.ok(Number.isInteger(small.input_tokens) && small.input_tokens > 0, JSON.stringify(small));
    const big = await client.messages.countTokens({
        model, thinking: off, messages: [{ role: "user", content: USER_Q + " Please also tell me about the wind and the rain." }],
    });
    assert.ok(big.input_tokens > small.input_tokens, `${big.input_tokens} > ${small.input_tokens}`);
    const withTools = await client.messages.countTokens({ model, messages: user, thinking: off, tools: [WEATHER_TOOL_ANTHROPIC] });
    assert.ok(withTools.input_tokens > small.input_tokens, "tools are in the prompt");
    const m = await client.messages.create({ model, max_tokens: 8, thinking: off, messages: user });
    assert.equal(promptTokens(m.usage), small.input_tokens);
    const raw = await postJSON("/v1/messages/count_tokens?beta=true", { model, messages: user, thinking: off });
    assert.equal(raw.status, 200);
    assert.equal(raw.json.input_tokens, small.input_tokens);
});

test("messages: an image block -> 400 invalid_request_error", async () => {
    const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    const body = {
        model, max_tokens: 16,
        messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: png } },
            { type: "text", text: "What is this?" }] }],
    };
    await assert.rejects(client.messages.create(body), (e) => {
        assert.ok(e instanceof Anthropic.BadRequestError, `BadRequestError, got ${e?.constructor?.name}: ${e}`);
        assert.equal(e.status, 400);
        assert.equal(e.error?.type, "error");
        assert.equal(e.error?.error?.type, "invalid_request_error");
        return true;
    });
    const raw = await postJSON("/v1/messages", body);
    assert.equal(raw.status, 400);
    assert.equal(raw.json.type, "error");
    assert.equal(raw.json.error.type, "invalid_request_error");
    assert.ok(typeof raw.json.error.message === "string" && raw.json.error.message.length > 0);
});

test("messages: the request's model name is echoed", async () => {
    const m = await client.messages.create({ model: "another-vendor-model", max_tokens: 64, thinking: off, messages: user });
    assert.equal(m.model, "another-vendor-model");
    assert.equal(textOf(m), SCRIPT.hello);
});

test("messages: thinking budget closes the block and the answer follows", async () => {
    // budget 2: "<think>" and "Checking" are generated, then the server feeds
    // "\n</think>\n\n" itself, after which the scripted model answers
    const m = await client.messages.create({
        model, max_tokens: 64, thinking: { type: "enabled", budget_tokens: 2 }, messages: user,
    });
    assert.deepEqual(m.content.map((b) => b.type), ["thinking", "text"]);
    assert.equal(m.content[0].thinking, "Checking");
    assert.equal(m.content[1].text, SCRIPT.hello);
    assert.equal(m.stop_reason, "end_turn");
    assert.equal(m.x_dspark.reasoning_budget_forced, true);
    // a budget larger than the reasoning changes nothing
    const big = await client.messages.create({
        model, max_tokens: 256, thinking: { type: "enabled", budget_tokens: 1024 }, tools: [WEATHER_TOOL_ANTHROPIC], messages: user,
    });
    checkToolAnswer(big);
    assert.equal(big.x_dspark.reasoning_budget_forced, undefined);
});

await run();
