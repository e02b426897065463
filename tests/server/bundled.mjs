// `dspark serve` on the bundled model (models/dspark-coder-6m): greedy
// outputs of fixed prompts (recorded to $DSPARK_RESULTS; with
// $DSPARK_COMPARE they must equal that earlier server's, e.g. a --mode
// dspark server against a --mode baseline one), stream == non-stream,
// keep-alives during a slow prefill (DSPARK_STREAM_KEEPALIVE_S is small),
// a client that disconnects mid-stream, /tokenize, /detokenize, /metrics,
// /events. $DSPARK_EXPECT_MODE is the mode x_dspark and /health must report.
import fs from "node:fs";
import {
    assert, openai, anthropic, run, test, request, postJSON, streamSSE, checkXDspark, sleep, MODEL_ID,
} from "./common.mjs";

const MODE = process.env.DSPARK_EXPECT_MODE || "";
const RESULTS = process.env.DSPARK_RESULTS || "";
const COMPARE = process.env.DSPARK_COMPARE || "";
const client = openai();
const model = MODEL_ID || "dspark-coder-6m";
const MAX = 48;

const CHAT = [
    "Write a Python function that returns the factorial of n.",
    'def add(a, b):\n    """Return the sum of a and b."""',
    "Write a function is_prime(n) that checks whether n is prime.",
    "Reverse the string s and return it.",
];
const RAW = [
    "def fibonacci(n):\n",
    "import os\n\n\ndef list_files(path):\n",
    "class Stack:\n    def __init__(self):\n",
];

// 1,534 tokens of code (the window is 2,048): a prefill that takes a noticeable time
const LONG = Array.from({ length: 37 }, (_, i) =>
    `def helper_${i}(values, limit=${i}):\n    total = 0\n    for v in values:\n        if v > limit:\n` +
    `            total += v * ${(i % 7) + 1}\n    return total\n`).join("\n");

const outputs = {}; // key -> text
const perRound = []; // x_dspark.tokens_per_round of each greedy answer

function record(key, text, x) {
    outputs[key] = text;
    checkXDspark(x, `${key} x_dspark`);
    if (MODE) assert.equal(x.mode, MODE, `${key}: x_dspark.mode`);
    perRound.push(x.tokens_per_round);
}

test("health reports the mode and the bundled model", async () => {
    const h = (await request("GET", "/health")).json;
    assert.equal(h.status, "ok");
    if (MODEL_ID) assert.equal(h.model, MODEL_ID);
    if (MODE) assert.equal(h.mode, MODE);
    assert.ok(h.context_window > 0 && h.context_window <= 2048, `context_window ${h.context_window}`);
});

test("greedy chat answers: stream equals non-stream", async () => {
    for (const [i, p] of CHAT.entries()) {
        const body = { model, messages: [{ role: "user", content: p }], max_tokens: MAX, temperature: 0 };
        const r = await client.chat.completions.create(body);
        const text = r.choices[0].message.content ?? "";
        assert.ok(text.length > 0, `chat ${i}: empty answer`);
        assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
        record(`chat${i}`, text, r.x_dspark);
        let st = "", last = null;
        for await (const c of await client.chat.completions.create({ ...body, stream: true })) {
            st += c.choices?.[0]?.delta?.content ?? "";
            last = c;
        }
        assert.equal(st, text, `chat ${i}: stream differs from non-stream`);
        checkXDspark(last.x_dspark);
    }
});

test("greedy completions: stream equals non-stream", async () => {
    for (const [i, p] of RAW.entries()) {
        const body = { model, prompt: p, max_tokens: MAX, temperature: 0 };
        const r = await client.completions.create(body);
        const text = r.choices[0].text;
        assert.ok(text.length > 0, `raw ${i}: empty answer`);
        record(`raw${i}`, text, r.x_dspark);
        let st = "";
        for await (const c of await client.completions.create({ ...body, stream: true })) st += c.choices?.[0]?.text ?? "";
        assert.equal(st, text, `raw ${i}: stream differs from non-stream`);
    }
    // a long prompt (prefill in several chunks) too
    const r = await client.completions.create({ model, prompt: LONG, max_tokens: 32, temperature: 0 });
    record("long", r.choices[0].text, r.x_dspark);
    assert.ok(r.usage.prompt_tokens > 1000, `long prompt: ${r.usage.prompt_tokens} tokens`);
});

test("greedy Anthropic and Responses answers equal the chat answer", async () => {
    const m = await anthropic().messages.create({
        model, max_tokens: MAX, temperature: 0, messages: [{ role: "user", content: CHAT[0] }],
    });
    // (leading / trailing whitespace of an answer may be trimmed per dialect)
    const t = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    assert.equal(t.trim(), outputs.chat0.trim());
    const r = await client.responses.create({ model, input: CHAT[0], max_output_tokens: MAX, temperature: 0 });
    assert.equal(r.output_text.trim(), outputs.chat0.trim());
});

test("speculative decoding drafted tokens (dspark mode)", async () => {
    if (MODE !== "dspark") return;
    assert.ok(perRound.some((v) => v > 1), `some tokens_per_round > 1: ${perRound}`);
    console.log(`     tokens per round: ${perRound.map((v) => v.toFixed(2)).join(" ")}`);
});

test("x_dspark.speculative false: plain decoding, the same greedy text", async () => {
    for (const [i, p] of CHAT.entries()) {
        const body = { model, messages: [{ role: "user", content: p }], max_tokens: MAX, temperature: 0 };
        const plain = await postJSON("/v1/chat/completions", { ...body, x_dspark: { speculative: false } });
        assert.equal(plain.status, 200, JSON.stringify(plain.json));
        const x = plain.json.x_dspark;
        assert.equal(plain.json.choices[0].message.content, outputs[`chat${i}`], `chat ${i}: plain differs`);
        assert.equal(x.mode, "baseline", `chat ${i}: x_dspark.mode of a plain request`);
        assert.equal(x.drafted, 0, `chat ${i}: a plain request drafted`);
        assert.ok(Number.isInteger(x.request) && x.request > 0, `x_dspark.request ${x.request}`);
        assert.deepEqual(x.accept_hist, x.rounds ? [x.rounds] : [], `chat ${i}: plain accept_hist`);
        const spec = await postJSON("/v1/chat/completions", { ...body, x_dspark: { speculative: true } });
        const xs = spec.json.x_dspark;
        assert.equal(spec.json.choices[0].message.content, outputs[`chat${i}`], `chat ${i}: speculative differs`);
        if (MODE) assert.equal(xs.mode, MODE);
        // the histogram counts every round; its weighted sum is the accepted drafts
        assert.equal(xs.accept_hist.reduce((a, b) => a + b, 0), xs.rounds, JSON.stringify(xs));
        assert.equal(xs.accept_hist.reduce((a, b, k) => a + b * k, 0), xs.accepted, JSON.stringify(xs));
    }
    const bad = await postJSON("/v1/chat/completions", {
        model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, x_dspark: { speculative: "no" },
    });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /'x_dspark.speculative' must be true or false/);
});

test("keep-alives while the request waits for a slow prefill", async () => {
    // a blocker ahead in the queue, then four streams with a long prompt; every
    // prompt starts with its own line, so none is served from the prefix cache
    // (an earlier test ran LONG) and each waits out a whole prefill (~0.2 s on
    // two cores, several keep-alive intervals)
    const fresh = (tag) => `# ${tag} ${process.pid} ${Date.now()}\n` + LONG;
    const blocker = client.completions.create({ model, prompt: fresh("blocker"), max_tokens: 64, temperature: 0 }).catch((e) => e);
    await sleep(20);
    const long = [{ role: "user", content: fresh("chat") }];
    const [chat, comp, msgs, resp] = await Promise.all([
        streamSSE("/v1/chat/completions", { model, messages: long, max_tokens: 8, stream: true }),
        streamSSE("/v1/completions", { model, prompt: fresh("completions"), max_tokens: 8, stream: true }),
        streamSSE("/v1/messages", { model, messages: [{ role: "user", content: fresh("messages") }], max_tokens: 8, stream: true }),
        streamSSE("/v1/responses", { model, input: fresh("responses"), max_output_tokens: 8, stream: true }),
    ]);
    const b = await blocker;
    assert.ok(!(b instanceof Error), `the blocker request failed: ${b}`);
    for (const [n, s] of [["chat", chat], ["completions", comp], ["messages", msgs], ["responses", resp]])
        assert.equal(s.status, 200, `${n} stream status`);
    // chat: empty-delta chunks before the first text
    const cf = chat.frames.filter((f) => f.data !== null && f.data !== "[DONE]");
    const firstText = cf.findIndex((f) => f.json.choices?.[0]?.delta?.content);
    assert.ok(firstText > 0, "chat stream has text");
    const ka = cf.slice(0, firstText).filter((f) => {
        const c = f.json.choices?.[0];
        return c && c.index === 0 && c.finish_reason === null && c.delta && Object.keys(c.delta).length === 0;
    });
    assert.ok(ka.length >= 1, `chat: empty-delta keep-alive chunks before the text (frames: ${cf.slice(0, 5).map((f) => f.data)})`);
    assert.equal(chat.frames.filter((f) => f.comment !== null).length, 0, "chat streams use chunks, not comments");
    // completions and responses: ": keepalive" comments
    for (const [n, s] of [["completions", comp], ["responses", resp]]) {
        const i = s.frames.findIndex((f) => f.data !== null && (f.json?.choices?.[0]?.text || f.json?.type === "response.output_text.delta"));
        const before = (i < 0 ? s.frames : s.frames.slice(0, i)).filter((f) => f.comment === "keepalive");
        assert.ok(before.length >= 1, `${n}: ": keepalive" comments before the text`);
    }
    // messages: event: ping
    const first = msgs.frames.findIndex((f) => f.event === "content_block_start");
    assert.ok(first > 0, "messages stream has a content block");
    const pings = msgs.frames.slice(0, first).filter((f) => f.event === "ping");
    assert.ok(pings.length >= 2, `messages: pings before the first block: ${pings.length}`);
    for (const p of pings) assert.deepEqual(p.json, { type: "ping" });
    const count = (s) => s.frames.filter((f) => f.comment === "keepalive").length;
    console.log(`     keep-alives before the text: chat ${ka.length}, completions ${count(comp)}, messages ${pings.length}, ` +
        `responses ${count(resp)}`);
    // the SDKs read through keep-alives: same text as a plain request
    const ref = await client.chat.completions.create({ model, messages: long, max_tokens: 8, temperature: 0 });
    let st = "";
    const blocker2 = client.completions.create({ model, prompt: fresh("blocker2"), max_tokens: 32, temperature: 0 }).catch((e) => e);
    for await (const c of await client.chat.completions.create({ model, messages: long, max_tokens: 8, stream: true }))
        st += c.choices?.[0]?.delta?.content ?? "";
    await blocker2;
    assert.equal(st, ref.choices[0].message.content);
    const joined = cf.map((f) => f.json.choices?.[0]?.delta?.content ?? "").join("");
    assert.equal(joined, ref.choices[0].message.content);
}, 90000);

test("a client that disconnects mid-stream; the next request is served", async () => {
    const body = { model, messages: [{ role: "user", content: CHAT[1] }], max_tokens: 400, stream: true };
    let seen = 0;
    const s = await streamSSE("/v1/chat/completions", body, {
        onFrame: (f) => f.json?.choices?.[0]?.delta?.content && ++seen >= 2,
    });
    assert.ok(seen >= 2, "read two text chunks before leaving");
    const m = await streamSSE("/v1/messages", { model, max_tokens: 400, stream: true, messages: [{ role: "user", content: CHAT[2] }] }, {
        onFrame: (f) => f.event === "content_block_delta",
    });
    assert.ok(m.frames.length > 0);
    const t0 = Date.now();
    const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: CHAT[0] }], max_tokens: MAX, temperature: 0 });
    assert.equal(r.choices[0].message.content, outputs.chat0, "same answer as before the disconnects");
    assert.ok(Date.now() - t0 < 30000);
    const h = await request("GET", "/health");
    assert.equal(h.json.status, "ok");
});

test("cache slots: a side request does not evict the conversation's cached prefix", async () => {
    const h = (await request("GET", "/health")).json;
    assert.ok(h.cache_slots >= 2, `cache_slots ${h.cache_slots}`);
    // a conversation with a long first turn
    const turn1 = [{ role: "user", content: LONG.slice(0, 2000) + "\n# summarise the helpers" }];
    const a1 = await client.chat.completions.create({ model, messages: turn1, max_tokens: 8, temperature: 0 });
    const p1 = a1.usage.prompt_tokens;
    assert.ok(p1 > 300, `first turn prompt ${p1} tokens`);
    // a side request for another conversation (a client's title generation, say)
    const side = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "Title for: sorting a list" }], max_tokens: 4, temperature: 0,
    });
    assert.ok(side.usage.prompt_tokens_details.cached_tokens < 20, "the side request shares no long prefix");
    // the conversation's next turn reuses its first turn from the cache
    const turn2 = [...turn1, { role: "assistant", content: a1.choices[0].message.content ?? "" },
        { role: "user", content: "and the second one?" }];
    const a2 = await client.chat.completions.create({ model, messages: turn2, max_tokens: 4, temperature: 0 });
    const cached = a2.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached >= p1 - 8, `second turn reused ${cached} of the first turn's ${p1} prompt tokens`);
    assert.equal(a2.x_dspark.cached_tokens, cached);
});

test("/tokenize and /detokenize round trip", async () => {
    const t = await postJSON("/tokenize", { content: "def f():" });
    assert.equal(t.status, 200, t.text);
    assert.ok(Array.isArray(t.json.tokens) && t.json.tokens.length > 0 && t.json.tokens.every(Number.isInteger), t.text);
    const d = await postJSON("/detokenize", { tokens: t.json.tokens });
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.content, "def f():");
    const t2 = await postJSON("/tokenize", { content: "def f():\n    return 1" });
    assert.ok(t2.json.tokens.length > t.json.tokens.length);
    for (const bad of [[1e300], [-1], [1.5], ["a"], [1e9]]) {
        const r = await postJSON("/detokenize", { tokens: bad });
        assert.equal(r.status, 400, `${JSON.stringify(bad)}: ${r.text}`);
        assert.equal(r.json.error.type, "invalid_request_error");
    }
    assert.equal((await postJSON("/tokenize", { content: 5 })).status, 400);
});

test("/metrics is Prometheus text with dspark_requests_total", async () => {
    const r = await request("GET", "/metrics");
    assert.equal(r.status, 200);
    assert.match(String(r.headers["content-type"]), /^text\/plain/);
    const line = r.text.split("\n").find((l) => /^dspark_requests_total(\{[^}]*\})? /.test(l));
    assert.ok(line, `a dspark_requests_total sample in:\n${r.text.slice(0, 600)}`);
    assert.ok(Number(line.split(" ").pop()) >= 1, line);
    for (const l of r.text.split("\n")) {
        if (!l || l.startsWith("#")) continue;
        assert.match(l, /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [-+0-9.eEInfa]+$/, `sample line: ${l}`);
    }
});

test("/events shows prefill and round events while a request runs", async () => {
    let prefill = null, round = null;
    const ev = streamSSE("/events", undefined, {
        method: "GET",
        timeoutMs: 30000,
        onFrame: (f) => {
            const j = f.json;
            if (j && j.type === "prefill") prefill ??= j;
            else if (j && f.event === "round" && j.type === undefined) round ??= j;
            return Boolean(prefill && round);
        },
    });
    await sleep(200);
    const r = await client.completions.create({ model, prompt: RAW[0] + "    ", max_tokens: 24, temperature: 0 });
    assert.ok(r.choices[0].text.length > 0);
    // a second request if the first was over before the reader caught up
    const res = await Promise.race([ev, sleep(3000).then(() => null)]);
    if (!res) await client.completions.create({ model, prompt: RAW[1], max_tokens: 24, temperature: 0 });
    const { status } = await ev;
    assert.equal(status, 200);
    assert.ok(prefill, "a {type:\"prefill\"} event");
    assert.ok(Number.isInteger(prefill.processed) && Number.isInteger(prefill.total), JSON.stringify(prefill));
    assert.ok(round, "a round event");
    assert.ok(Number.isInteger(round.committed) || Number.isInteger(round.accepted), JSON.stringify(round));
}, 40000);

test("results recorded and equal to the other server's", async () => {
    if (RESULTS) fs.writeFileSync(RESULTS, JSON.stringify({ mode: MODE, outputs }, null, 1));
    if (!COMPARE) return;
    const other = JSON.parse(fs.readFileSync(COMPARE, "utf8"));
    const keys = Object.keys(other.outputs);
    assert.deepEqual(Object.keys(outputs).sort(), keys.sort());
    const diff = keys.filter((k) => other.outputs[k] !== outputs[k]);
    assert.deepEqual(diff, [], diff.map((k) => `${k}: ${other.mode} ${JSON.stringify(other.outputs[k])} vs ${MODE} ${JSON.stringify(outputs[k])}`).join("\n"));
});

await run();
