// Shared by the server conformance scripts (run by tests/test_server.c, one
// per test, against a live `dspark serve`): the official SDK clients loaded
// from $DSPARK_NODE_DIR/node_modules (scripts/fetch-test-clients installs
// them), raw HTTP and SSE helpers, the scripted model's answers, and a tiny
// runner that prints "ok NAME" / "FAIL NAME: why" and exits 1 on a failure.
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

export { assert };

export const BASE = (process.env.DSPARK_URL || "http://127.0.0.1:8080").replace(/\/+$/, "");
export const MODEL_ID = process.env.DSPARK_MODEL_ID || "";
export const API_KEY = process.env.DSPARK_API_KEY || "";
// Every timeout below (a client call's, a stream's, a test's: 60 s unless
// given) is multiplied by DSPARK_TEST_TIMEOUT_SCALE (default 1; the server
// tests set it for sanitizer builds, which run the model several times slower).
const SCALE = Number(process.env.DSPARK_TEST_TIMEOUT_SCALE) > 0 ? Number(process.env.DSPARK_TEST_TIMEOUT_SCALE) : 1;
const TIMEOUT_MS = 60000 * SCALE;

const nodeDir = process.env.DSPARK_NODE_DIR || path.join(os.homedir(), ".cache", "dspark", "node");
const requireClients = createRequire(path.join(nodeDir, "package.json"));

function load(name) {
    if (!fs.existsSync(path.join(nodeDir, "node_modules", name, "package.json"))) {
        console.error(`${name} is not installed in ${nodeDir}/node_modules: run scripts/fetch-test-clients`);
        process.exit(2);
    }
    return requireClients(name);
}

const openaiMod = load("openai");
const anthropicMod = load("@anthropic-ai/sdk");
export const OpenAI = openaiMod.OpenAI ?? openaiMod.default ?? openaiMod;
export const Anthropic = anthropicMod.Anthropic ?? anthropicMod.default ?? anthropicMod;

export function openai(opts = {}) {
    return new OpenAI({ baseURL: `${BASE}/v1`, apiKey: API_KEY || "sk-unused", maxRetries: 0, timeout: TIMEOUT_MS, ...opts });
}
export function anthropic(opts = {}) {
    return new Anthropic({ baseURL: BASE, apiKey: API_KEY || "sk-unused", maxRetries: 0, timeout: TIMEOUT_MS, ...opts });
}

// ---- the scripted model (tests/scripted.c): greedy answers by the prompt's last token ----
export const SCRIPT = {
    // thinking on ("<|im_start|>assistant\n"): reasoning, then a Hermes tool call
    think: "Checking weather...",
    toolName: "get_weather",
    toolArgs: { city: "Paris" },
    toolMarkup: '<tool_call>{"name":"get_weather","arguments":{"city": "Paris"}}</tool_call>',
    thinkTokens: 20, // <think> ... </tool_call>, without the <|im_end|>
    // thinking off ("...</think>\n\n")
    hello: "Hello from dspark!",
    helloTokens: 5,
    hello3: "Hello from d", // its first 3 tokens
    // raw completion after " time"
    rawPrompt: "Once upon a time",
    fox: "There was a fox.",
    foxTokens: 5,
};
export const USER_Q = "What is the weather in Paris?";
export const WEATHER_TOOL_OPENAI = {
    type: "function",
    function: {
        name: "get_weather",
        description: "Current weather of a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
};
export const WEATHER_TOOL_FLAT = { type: "function", name: "get_weather", description: "Current weather of a city",
    parameters: WEATHER_TOOL_OPENAI.function.parameters };
export const WEATHER_TOOL_ANTHROPIC = {
    name: "get_weather",
    description: "Current weather of a city",
    input_schema: WEATHER_TOOL_OPENAI.function.parameters,
};

// completion token counts: the eos that ended the answer may or may not be counted
export function checkCount(got, n, what) {
    assert.ok(got === n || got === n + 1, `${what}: ${got}, expected ${n} (or ${n + 1} counting the eos)`);
}

export function checkXDspark(x, what = "x_dspark") {
    assert.ok(x && typeof x === "object", `${what} missing`);
    assert.equal(typeof x.mode, "string", `${what}.mode`);
    assert.ok(x.mode.length > 0, `${what}.mode empty`);
    for (const k of ["tokens_per_round", "tokens_per_sec"])
        assert.equal(typeof x[k], "number", `${what}.${k} is ${JSON.stringify(x[k])}`);
    assert.ok("cap" in x, `${what}.cap missing`);
}

export function checkOpenAIUsage(u, what = "usage") {
    assert.ok(u && typeof u === "object", `${what} missing`);
    assert.ok(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `${what}.prompt_tokens ${u.prompt_tokens}`);
    assert.ok(Number.isInteger(u.completion_tokens) && u.completion_tokens >= 0, `${what}.completion_tokens`);
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}.total_tokens`);
}

// ---- raw HTTP ----
// A request over node:http (not fetch, so an early answer such as 413 to a
// body still being sent is seen, and any method and header can be sent).
export function request(method, p, { body, headers = {}, timeout = TIMEOUT_MS } = {}) {
    return new Promise((resolve, reject) => {
        const u = new URL(BASE + p);
        let data = body;
        if (data !== undefined && typeof data !== "string" && !Buffer.isBuffer(data)) data = JSON.stringify(data);
        const h = { ...headers };
        if (data !== undefined) {
            h["Content-Length"] = Buffer.byteLength(data);
            if (!Object.keys(h).some((k) => k.toLowerCase() === "content-type")) h["Content-Type"] = "application/json";
        }
        let answered = false;
        const req = http.request(
            { host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers: h, timeout },
            (res) => {
                answered = true;
                const chunks = [];
                res.on("data", (c) => chunks.push(c));
                res.on("end", () => {
                    const text = Buffer.concat(chunks).toString("utf8");
                    let json;
                    try {
                        json = JSON.parse(text);
                    } catch {
                        json = undefined;
                    }
                    resolve({ status: res.statusCode, headers: res.headers, text, json });
                });
                res.on("error", (e) => reject(e));
            },
        );
        req.on("timeout", () => req.destroy(new Error(`${method} ${p}: timed out`)));
        req.on("error", (e) => {
            if (!answered) reject(e);
        });
        if (data !== undefined) req.write(data, () => {});
        req.end();
    });
}

export function auth() {
    return API_KEY ? { Authorization: `Bearer ${API_KEY}` } : {};
}

export async function postJSON(p, body, headers = {}) {
    return request("POST", p, { body, headers: { ...auth(), ...headers } });
}

// Parses SSE text into frames {event, data, json, comment}.
export function parseSSE(text) {
    const frames = [];
    for (const block of text.split(/\r?\n\r?\n/)) {
        if (!block.trim()) continue;
        const f = { event: null, data: null, comment: null };
        const data = [];
        for (const line of block.split(/\r?\n/)) {
            if (line.startsWith(":")) f.comment = (f.comment ?? "") + line.slice(1).trim();
            else if (line.startsWith("event:")) f.event = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) {
            f.data = data.join("\n");
            try {
                f.json = JSON.parse(f.data);
            } catch {
                f.json = undefined;
            }
        }
        frames.push(f);
    }
    return frames;
}

// Streams an SSE reply with fetch; onFrame(frame) may return true to stop
// reading (the connection is then aborted). Returns {status, headers, frames}.
export async function streamSSE(p, body, { onFrame, headers = {}, method = "POST", timeoutMs = 60000 } = {}) {
    timeoutMs *= SCALE;
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), timeoutMs);
    const res = await fetch(BASE + p, {
        method,
        headers: { ...auth(), ...(body !== undefined ? { "Content-Type": "application/json" } : {}), ...headers },
        body: body !== undefined ? JSON.stringify(body) : undefined,
        signal: ac.signal,
    });
    const frames = [];
    if (!res.body) {
        clearTimeout(timer);
        return { status: res.status, headers: res.headers, frames };
    }
    const dec = new TextDecoder();
    let buf = "";
    let stopped = false;
    try {
        for await (const chunk of res.body) {
            buf += dec.decode(chunk, { stream: true });
            let i;
            while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
                const m = buf.slice(i).match(/^\r?\n\r?\n/)[0];
                const block = buf.slice(0, i);
                buf = buf.slice(i + m.length);
                for (const f of parseSSE(block + "\n\n")) {
                    f.t = Date.now();
                    frames.push(f);
                    if (onFrame && onFrame(f)) stopped = true;
                }
                if (stopped) break;
            }
            if (stopped) break;
        }
    } catch (e) {
        if (!stopped && e.name !== "AbortError") throw e;
        if (!stopped) throw new Error(`${p}: stream timed out after ${timeoutMs} ms`);
    } finally {
        clearTimeout(timer);
        if (stopped) ac.abort();
    }
    return { status: res.status, headers: res.headers, frames };
}

export function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms));
}

// ---- runner ----
const tests = [];
export function test(name, fn, timeoutMs = 60000) {
    tests.push({ name, fn, timeoutMs: timeoutMs * SCALE });
}
export async function run() {
    const only = process.env.DSPARK_ONLY;
    let failed = 0, ran = 0;
    for (const t of tests) {
        if (only && !t.name.includes(only)) continue;
        ran++;
        const t0 = Date.now();
        let timer;
        try {
            await Promise.race([
                t.fn(),
                new Promise((_, rej) => {
                    timer = setTimeout(() => rej(new Error(`timed out after ${t.timeoutMs} ms`)), t.timeoutMs);
                }),
            ]);
            console.log(`ok   ${t.name} (${Date.now() - t0} ms)`);
        } catch (e) {
            failed++;
            const detail = e && e.stack ? e.stack : String(e);
            console.log(`FAIL ${t.name}: ${detail}`);
            if (e && e.status) console.log(`     (HTTP ${e.status}: ${JSON.stringify(e.error ?? e.body ?? "")})`);
        } finally {
            clearTimeout(timer);
        }
    }
    console.log(`${ran - failed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
}
