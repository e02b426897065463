// Error handling and transport rules of `dspark serve`, with raw HTTP and
// the SDKs' error classes. The server runs the scripted model with
// --api-key $DSPARK_API_KEY, --context-window $DSPARK_CONTEXT_WINDOW and
// DSPARK_MAX_BODY_BYTES=$DSPARK_MAX_BODY.
import {
    assert, openai, anthropic, run, test, request, SCRIPT, USER_Q, MODEL_ID, API_KEY, OpenAI, Anthropic, BASE,
} from "./common.mjs";

const KEY = API_KEY;
const WINDOW = Number(process.env.DSPARK_CONTEXT_WINDOW || 0);
const MAX_BODY = Number(process.env.DSPARK_MAX_BODY || 0);
const model = MODEL_ID || "scripted";
const user = [{ role: "user", content: USER_Q }];
const chatBody = { model, messages: user, enable_thinking: false, max_tokens: 16 };
const msgBody = { model, max_tokens: 16, thinking: { type: "disabled" }, messages: user };
const bearer = { Authorization: `Bearer ${KEY}` };

assert.ok(KEY, "DSPARK_API_KEY must be set for this script");
assert.ok(WINDOW > 0, "DSPARK_CONTEXT_WINDOW must be set for this script");

function checkOpenAIError(r, status, what) {
    assert.equal(r.status, status, `${what}: status ${r.status}: ${r.text}`);
    assert.match(String(r.headers["content-type"]), /application\/json/, `${what}: content-type`);
    const e = r.json?.error;
    assert.ok(e && typeof e === "object", `${what}: {error:{...}} in ${r.text}`);
    assert.ok(typeof e.message === "string" && e.message.length > 0, `${what}: error.message`);
    assert.ok(typeof e.type === "string" && e.type.length > 0, `${what}: error.type`);
    assert.ok("code" in e, `${what}: error.code present`);
    return e;
}

function checkAnthropicError(r, status, type, what) {
    assert.equal(r.status, status, `${what}: status ${r.status}: ${r.text}`);
    assert.equal(r.json?.type, "error", `${what}: {type:"error"} in ${r.text}`);
    assert.equal(r.json.error?.type, type, `${what}: error.type`);
    assert.ok(typeof r.json.error.message === "string" && r.json.error.message.length > 0, `${what}: error.message`);
    return r.json.error;
}

test("health: open without a key, reports model, window, memory", async () => {
    const r = await request("GET", "/health");
    assert.equal(r.status, 200, r.text);
    const h = r.json;
    assert.equal(h.status, "ok");
    if (MODEL_ID) assert.equal(h.model, MODEL_ID);
    assert.equal(typeof h.mode, "string");
    assert.equal(h.context_window, WINDOW);
    assert.ok(Number.isInteger(h.max_output_tokens) && h.max_output_tokens > 0, "max_output_tokens");
    assert.ok(Array.isArray(h.warnings), "warnings is a list");
    assert.ok(h.memory && h.memory.rss_bytes > 1e6, `memory.rss_bytes ${JSON.stringify(h.memory)}`);
    assert.ok("drafter" in h, "drafter");
});

test("auth: a missing or wrong key is 401 in each dialect's error shape", async () => {
    let e = checkOpenAIError(await request("POST", "/v1/chat/completions", { body: chatBody }), 401, "chat, no key");
    assert.equal(e.type, "authentication_error");
    checkOpenAIError(await request("POST", "/v1/chat/completions", { body: chatBody, headers: { Authorization: "Bearer nope" } }),
        401, "chat, wrong key");
    checkOpenAIError(await request("POST", "/v1/completions", { body: { prompt: "x" }, headers: { "x-api-key": "nope" } }),
        401, "completions, wrong x-api-key");
    checkOpenAIError(await request("GET", "/v1/models"), 401, "models, no key");
    checkOpenAIError(await request("POST", "/v1/responses", { body: { input: "x" } }), 401, "responses, no key");
    checkAnthropicError(await request("POST", "/v1/messages", { body: msgBody }), 401, "authentication_error", "messages, no key");
    checkAnthropicError(await request("POST", "/v1/messages?beta=true", { body: msgBody, headers: { "x-api-key": "nope" } }),
        401, "authentication_error", "messages, wrong key");
    checkAnthropicError(await request("POST", "/v1/messages/count_tokens", { body: msgBody }), 401, "authentication_error",
        "count_tokens, no key");
});

test("auth: the right key works as Authorization: Bearer and as x-api-key", async () => {
    let r = await request("POST", "/v1/chat/completions", { body: chatBody, headers: bearer });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, SCRIPT.hello);
    r = await request("POST", "/v1/chat/completions", { body: chatBody, headers: { "x-api-key": KEY } });
    assert.equal(r.status, 200, r.text);
    r = await request("POST", "/v1/messages", { body: msgBody, headers: { "x-api-key": KEY, "anthropic-version": "2023-06-01" } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.content[0].text, SCRIPT.hello);
    r = await request("GET", "/v1/models", { headers: bearer });
    assert.equal(r.status, 200, r.text);
});

test("auth: the SDKs raise their AuthenticationError, and work with the key", async () => {
    await assert.rejects(openai({ apiKey: "sk-wrong" }).chat.completions.create(chatBody), (e) => {
        assert.ok(e instanceof OpenAI.AuthenticationError, `OpenAI.AuthenticationError, got ${e?.constructor?.name}: ${e}`);
        assert.equal(e.status, 401);
        return true;
    });
    await assert.rejects(anthropic({ apiKey: "sk-wrong" }).messages.create(msgBody), (e) => {
        assert.ok(e instanceof Anthropic.AuthenticationError, `Anthropic.AuthenticationError, got ${e?.constructor?.name}: ${e}`);
        assert.equal(e.status, 401);
        assert.equal(e.error?.error?.type, "authentication_error");
        return true;
    });
    // ANTHROPIC_AUTH_TOKEN style (Bearer) as Claude Code sends it
    const viaToken = new Anthropic({ baseURL: BASE, apiKey: null, authToken: KEY, maxRetries: 0 });
    const m = await viaToken.messages.create(msgBody);
    assert.equal(m.content[0].text, SCRIPT.hello);
    const r = await openai().chat.completions.create(chatBody);
    assert.equal(r.choices[0].message.content, SCRIPT.hello);
});

test("invalid JSON body -> 400 in the dialect's error shape", async () => {
    const bad = '{"model": "x", "messages": [';
    let e = checkOpenAIError(await request("POST", "/v1/chat/completions", { body: bad, headers: bearer }), 400, "chat");
    assert.equal(e.type, "invalid_request_error");
    checkOpenAIError(await request("POST", "/v1/completions", { body: bad, headers: bearer }), 400, "completions");
    checkOpenAIError(await request("POST", "/v1/responses", { body: bad, headers: bearer }), 400, "responses");
    checkAnthropicError(await request("POST", "/v1/messages", { body: bad, headers: bearer }), 400, "invalid_request_error", "messages");
    checkAnthropicError(await request("POST", "/v1/messages/count_tokens", { body: bad, headers: bearer }), 400,
        "invalid_request_error", "count_tokens");
    // valid JSON but not a request
    checkOpenAIError(await request("POST", "/v1/chat/completions", { body: { model }, headers: bearer }), 400, "chat without messages");
    checkAnthropicError(await request("POST", "/v1/messages", { body: { model, max_tokens: 4, messages: [] }, headers: bearer }),
        400, "invalid_request_error", "messages: []");
    await assert.rejects(openai().chat.completions.create({ model, messages: [] }), (e2) => {
        assert.ok(e2 instanceof OpenAI.BadRequestError, `OpenAI.BadRequestError, got ${e2?.constructor?.name}`);
        return true;
    });
});

const longText = Array.from({ length: Math.max(WINDOW, 64) }, (_, i) => `word${i % 97}`).join(" ");

test("over-long prompt: Anthropic 'prompt is too long: N tokens > W maximum'", async () => {
    const body = { model, max_tokens: 16, messages: [{ role: "user", content: longText }] };
    const r = await request("POST", "/v1/messages", { body, headers: bearer });
    const e = checkAnthropicError(r, 400, "invalid_request_error", "messages, long prompt");
    const m = /^prompt is too long: (\d+) tokens > (\d+) maximum/.exec(e.message);
    assert.ok(m, `message starts with the exact phrase: ${JSON.stringify(e.message)}`);
    // W: the window, or the longest prompt it takes (window - 1: one token must fit)
    assert.ok(Number(m[2]) === WINDOW || Number(m[2]) === WINDOW - 1, `W ${m[2]} for a window of ${WINDOW}`);
    assert.ok(Number(m[1]) > Number(m[2]), `N ${m[1]} > W ${m[2]}`);
    // N is the prompt's token count as count_tokens gives it
    const c = await request("POST", "/v1/messages/count_tokens", { body, headers: bearer });
    if (c.status === 200) assert.equal(c.json.input_tokens, Number(m[1]), "N equals count_tokens");
    // and a stream is refused the same way, before any event
    const s = await request("POST", "/v1/messages", { body: { ...body, stream: true }, headers: bearer });
    checkAnthropicError(s, 400, "invalid_request_error", "messages stream, long prompt");
    await assert.rejects(anthropic().messages.create(body), (err) => {
        assert.ok(err instanceof Anthropic.BadRequestError, `Anthropic.BadRequestError, got ${err?.constructor?.name}`);
        assert.match(err.error?.error?.message ?? "", /^prompt is too long: \d+ tokens > \d+ maximum/);
        return true;
    });
});

test("over-long prompt: OpenAI 400 with code context_length_exceeded", async () => {
    const chat = await request("POST", "/v1/chat/completions", {
        body: { model, messages: [{ role: "user", content: longText }] }, headers: bearer,
    });
    let e = checkOpenAIError(chat, 400, "chat, long prompt");
    assert.equal(e.code, "context_length_exceeded");
    assert.equal(e.type, "invalid_request_error");
    const comp = await request("POST", "/v1/completions", { body: { model, prompt: longText }, headers: bearer });
    e = checkOpenAIError(comp, 400, "completions, long prompt");
    assert.equal(e.code, "context_length_exceeded");
    const resp = await request("POST", "/v1/responses", { body: { model, input: longText }, headers: bearer });
    assert.equal(resp.status, 400, resp.text);
    await assert.rejects(openai().chat.completions.create({ model, messages: [{ role: "user", content: longText }] }), (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `OpenAI.BadRequestError, got ${err?.constructor?.name}`);
        assert.equal(err.code, "context_length_exceeded");
        return true;
    });
    // a prompt that fits still works afterwards
    const ok = await request("POST", "/v1/chat/completions", { body: chatBody, headers: bearer });
    assert.equal(ok.status, 200, ok.text);
});

test("unknown route -> 404", async () => {
    checkOpenAIError(await request("GET", "/v1/nothing-here", { headers: bearer }), 404, "GET unknown");
    checkOpenAIError(await request("POST", "/v1/nothing-here", { body: {}, headers: bearer }), 404, "POST unknown");
    await assert.rejects(openai().embeddings.create({ model, input: "x" }), (e) => {
        assert.ok(e instanceof OpenAI.NotFoundError, `OpenAI.NotFoundError, got ${e?.constructor?.name}`);
        return true;
    });
});

test("an unknown model name is accepted and echoed", async () => {
    const r = await request("POST", "/v1/chat/completions", { body: { ...chatBody, model: "no-such-model-xyz" }, headers: bearer });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.model, "no-such-model-xyz");
    assert.equal(r.json.choices[0].message.content, SCRIPT.hello);
    const a = await request("POST", "/v1/messages", { body: { ...msgBody, model: "another-vendor-model" }, headers: bearer });
    assert.equal(a.status, 200, a.text);
    assert.equal(a.json.model, "another-vendor-model");
    // no model at all is fine too
    const { model: _m, ...noModel } = chatBody;
    const n = await request("POST", "/v1/chat/completions", { body: noModel, headers: bearer });
    assert.equal(n.status, 200, n.text);
});

test("OPTIONS -> 204 with CORS headers, no key needed", async () => {
    for (const p of ["/v1/chat/completions", "/v1/messages", "/health"]) {
        const r = await request("OPTIONS", p, {
            headers: { Origin: "http://example.test", "Access-Control-Request-Method": "POST" },
        });
        assert.equal(r.status, 204, `${p}: ${r.status} ${r.text}`);
        assert.equal(r.text, "");
        assert.equal(r.headers["access-control-allow-origin"], "*");
        assert.match(String(r.headers["access-control-allow-methods"]), /POST/);
        assert.match(String(r.headers["access-control-allow-headers"]).toLowerCase(), /authorization/);
        assert.match(String(r.headers["access-control-allow-headers"]).toLowerCase(), /content-type/);
    }
    // every reply carries the allow-origin header
    const h = await request("GET", "/health");
    assert.equal(h.headers["access-control-allow-origin"], "*");
});

test("HEAD / -> 200 (the connectivity probe), also without a key", async () => {
    const r = await request("HEAD", "/");
    assert.equal(r.status, 200);
    assert.equal(r.text, "");
    const r2 = await request("HEAD", "/v1/messages");
    assert.equal(r2.status, 200);
});

test("GET / and the page's files: open without a key, typed, ETag revalidation", async () => {
    const types = { "/": "text/html", "/app.js": "text/javascript", "/style.css": "text/css" };
    for (const [p, type] of Object.entries(types)) {
        const r = await request("GET", p);
        assert.equal(r.status, 200, p);
        assert.ok(r.headers["content-type"].startsWith(type), `${p}: ${r.headers["content-type"]}`);
        assert.ok(r.text.length > 500, `${p}: ${r.text.length} bytes`);
        assert.match(r.headers.etag, /^"[0-9a-f]{16}"$/);
        assert.equal(r.headers["cache-control"], "no-cache");
        assert.match(r.headers["content-security-policy"], /default-src 'self'/);
        const again = await request("GET", p, { headers: { "If-None-Match": r.headers.etag } });
        assert.equal(again.status, 304, `${p} revalidated`);
        assert.equal(again.text, "");
    }
    const page = (await request("GET", "/")).text;
    assert.match(page, /<script src="\/app.js" defer><\/script>/);
    assert.ok(!/https?:\/\/(?!127\.0\.0\.1)/.test(page), "the page names no other host");
    // other paths stay behind the key
    assert.equal((await request("GET", "/nothing.js")).status, 401);
    assert.equal((await request("GET", "/nothing.js", { headers: bearer })).status, 404);
    assert.equal((await request("POST", "/", { body: {}, headers: bearer })).status, 404);
});

test("body over DSPARK_MAX_BODY_BYTES -> 413; the server then still answers", async () => {
    assert.ok(MAX_BODY > 0, "DSPARK_MAX_BODY must be set for this script");
    const big = { model, messages: [{ role: "user", content: "x".repeat(MAX_BODY + 4096) }] };
    const r = await request("POST", "/v1/chat/completions", { body: big, headers: bearer });
    assert.equal(r.status, 413, `${r.status}: ${r.text.slice(0, 200)}`);
    const a = await request("POST", "/v1/messages", { body: { ...big, max_tokens: 4 }, headers: bearer });
    assert.equal(a.status, 413);
    // the connection state is clean afterwards
    const ok = await request("POST", "/v1/chat/completions", { body: chatBody, headers: bearer });
    assert.equal(ok.status, 200, ok.text);
});

test("bad field values -> 400 naming the field", async () => {
    const r = await request("POST", "/v1/chat/completions", { body: { ...chatBody, temperature: "hot" }, headers: bearer });
    const e = checkOpenAIError(r, 400, "temperature as a string");
    assert.match(e.message, /temperature/);
    const m = await request("POST", "/v1/messages", { body: { ...msgBody, max_tokens: "many" }, headers: bearer });
    checkAnthropicError(m, 400, "invalid_request_error", "max_tokens as a string");
});

await run();
