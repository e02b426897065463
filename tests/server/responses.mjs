// OpenAI Responses API (what Codex speaks) through the official `openai`
// client against `dspark serve` running the scripted model (tests/scripted.c).
import { assert, openai, run, test, SCRIPT, USER_Q, MODEL_ID, WEATHER_TOOL_FLAT, checkXDspark, streamSSE } from "./common.mjs";

const client = openai();
const model = MODEL_ID || "scripted";

test("responses: non-stream, no tools: the answer text (reasoning not in the text)", async () => {
    const r = await client.responses.create({ model, input: USER_Q });
    assert.equal(r.object, "response");
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, "completed");
    const msgs = r.output.filter((o) => o.type === "message");
    assert.equal(msgs.length, 1);
    assert.equal(msgs[0].role, "assistant");
    assert.equal(msgs[0].content[0].type, "output_text");
    assert.equal(msgs[0].content[0].text, SCRIPT.toolMarkup);
    assert.equal(r.output_text, SCRIPT.toolMarkup);
    for (const o of r.output.filter((x) => x.type === "reasoning"))
        assert.equal(o.summary.map((s) => s.text).join(""), SCRIPT.think);
    assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    checkXDspark(r.x_dspark);
});

test("responses: tools -> a function_call output item", async () => {
    const r = await client.responses.create({ model, input: USER_Q, instructions: "Use tools.", tools: [WEATHER_TOOL_FLAT] });
    assert.equal(r.status, "completed");
    const calls = r.output.filter((o) => o.type === "function_call");
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, SCRIPT.toolName);
    assert.deepEqual(JSON.parse(calls[0].arguments), SCRIPT.toolArgs);
    assert.ok(typeof calls[0].call_id === "string" && calls[0].call_id.length > 0);
    assert.equal(r.output.filter((o) => o.type === "message" && o.content.some((c) => c.text)).length, 0,
        "a pure tool-call turn has no message text");
    // the next turn carries the call and its output
    const r2 = await client.responses.create({
        model,
        input: [
            { type: "message", role: "user", content: USER_Q },
            { type: "function_call", call_id: calls[0].call_id, name: calls[0].name, arguments: calls[0].arguments },
            { type: "function_call_output", call_id: calls[0].call_id, output: "sunny, 21 C" },
        ],
        tools: [WEATHER_TOOL_FLAT],
    });
    assert.equal(r2.status, "completed");
    assert.equal(r2.output.filter((o) => o.type === "function_call").length, 1);
});

test("responses: max_output_tokens -> incomplete", async () => {
    const r = await client.responses.create({ model, input: USER_Q, max_output_tokens: 2 });
    assert.equal(r.status, "incomplete");
    assert.equal(r.incomplete_details?.reason, "max_output_tokens");
});

async function collectResponses(stream) {
    const ev = [];
    for await (const e of stream) ev.push(e);
    assert.ok(ev.length >= 2, "at least created and completed");
    assert.equal(ev[0].type, "response.created");
    assert.equal(ev[0].response.status, "in_progress");
    assert.equal(ev[ev.length - 1].type, "response.completed");
    assert.equal(ev[0].sequence_number, 1, "sequence_number starts at 1");
    for (let i = 1; i < ev.length; i++)
        assert.ok(ev[i].sequence_number > ev[i - 1].sequence_number, `sequence_number increases at event ${i}`);
    return ev;
}

test("responses stream: text events in order, response.completed last", async () => {
    const ev = await collectResponses(await client.responses.create({ model, input: USER_Q, stream: true }));
    const types = ev.map((e) => e.type);
    const order = ["response.created", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"];
    let at = -1;
    for (const t of order) {
        const i = types.indexOf(t, at + 1);
        assert.ok(i > at, `${t} after position ${at} in ${types.join(",")}`);
        at = i;
    }
    const text = ev.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
    assert.equal(text, SCRIPT.toolMarkup);
    assert.equal(ev.find((e) => e.type === "response.output_text.done").text, SCRIPT.toolMarkup);
    const done = ev[ev.length - 1].response;
    assert.equal(done.status, "completed");
    assert.ok(done.usage.output_tokens > 0);
    checkXDspark(done.x_dspark, "response.completed x_dspark");
});

test("responses stream: tools -> function_call item events, no message item", async () => {
    const ev = await collectResponses(await client.responses.create({ model, input: USER_Q, tools: [WEATHER_TOOL_FLAT], stream: true }));
    const types = ev.map((e) => e.type);
    const added = ev.find((e) => e.type === "response.output_item.added" && e.item.type === "function_call");
    assert.ok(added, `function_call item added: ${types.join(",")}`);
    const args = ev.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => e.delta).join("");
    assert.deepEqual(JSON.parse(args), SCRIPT.toolArgs);
    const argsDone = ev.find((e) => e.type === "response.function_call_arguments.done");
    assert.ok(argsDone, "function_call_arguments.done");
    assert.deepEqual(JSON.parse(argsDone.arguments), SCRIPT.toolArgs);
    const itemDone = ev.find((e) => e.type === "response.output_item.done" && e.item.type === "function_call");
    assert.equal(itemDone.item.name, SCRIPT.toolName);
    assert.ok(types.indexOf("response.output_item.added") < types.indexOf("response.function_call_arguments.delta"));
    assert.ok(types.indexOf("response.function_call_arguments.done") < types.lastIndexOf("response.output_item.done"));
    assert.ok(!ev.some((e) => e.type === "response.output_item.added" && e.item.type === "message"), "no message item");
    const fin = ev[ev.length - 1].response;
    const calls = fin.output.filter((o) => o.type === "function_call");
    assert.equal(calls.length, 1);
    assert.deepEqual(JSON.parse(calls[0].arguments), SCRIPT.toolArgs);
});

test("responses: input items with parts, a developer message, unknown items skipped", async () => {
    const r = await client.responses.create({
        model,
        input: [
            { type: "message", role: "developer", content: [{ type: "input_text", text: "Be brief." }] },
            { type: "message", role: "user", content: [{ type: "input_text", text: USER_Q }] },
        ],
        reasoning: { effort: "low" },
    });
    assert.equal(r.status, "completed");
    assert.equal(r.output_text, SCRIPT.toolMarkup);
});

test("responses stream: raw SSE frames carry type and sequence_number", async () => {
    const { status, frames } = await streamSSE("/v1/responses", { model, input: USER_Q, stream: true });
    assert.equal(status, 200);
    const data = frames.filter((f) => f.data !== null && f.data !== "[DONE]");
    assert.ok(data.length > 2);
    for (const f of data) {
        assert.equal(typeof f.json.type, "string");
        assert.ok(Number.isInteger(f.json.sequence_number), `sequence_number in ${f.data.slice(0, 80)}`);
        if (f.event !== null) assert.equal(f.event, f.json.type);
    }
    assert.equal(data[data.length - 1].json.type, "response.completed");
});

await run();
