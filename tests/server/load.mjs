// Concurrency and memory: `dspark serve` on the bundled model under 32
// requests in flight, mixed stream / non-stream and chat / completions;
// every answer must equal the one the same request gets alone (greedy).
//   DSPARK_LOAD_PHASE=warm  computes each prompt's expected answers one at a
//       time, then runs a short concurrent warm-up; writes $DSPARK_LOAD_FILE
//   DSPARK_LOAD_PHASE=load  reads it and runs $DSPARK_LOAD_N requests (200)
// The C side (tests/test_server.c) reads the server's RSS between the phases
// and after the load. It starts the server with --max-batch 32 and a KV pool
// (--kv-ram) that holds the pages of about ten of these requests at once:
// the load phase watches /health meanwhile, and the pages held never pass
// the pool's capacity, more than four requests run at once, and admissions
// wait for pages (kv_pages.deferred) rather than pass the bound.
import fs from "node:fs";
import { assert, openai, run, test, request, checkXDspark, MODEL_ID } from "./common.mjs";

const PHASE = process.env.DSPARK_LOAD_PHASE || "warm";
const FILE = process.env.DSPARK_LOAD_FILE || "";
const N = Number(process.env.DSPARK_LOAD_N || 200);
const INFLIGHT = 32;
const MAX = 24;
const client = openai({ timeout: 240000 });
const model = MODEL_ID || "dspark-coder-6m";

const PROMPTS = [
    "def fibonacci(n):\n",
    "def is_prime(n):\n",
    "class Stack:\n    def __init__(self):\n",
    "def read_lines(path):\n    with open(path) as f:\n",
    "import json\n\ndef load_config(path):\n",
    "def merge_sorted(a, b):\n    result = []\n",
    "def word_count(text):\n    counts = {}\n",
    "def flatten(items):\n",
];
const KINDS = ["chat", "chat-stream", "completion", "completion-stream"];

async function ask(kind, i) {
    const p = PROMPTS[i];
    if (kind.startsWith("chat")) {
        const body = { model, messages: [{ role: "user", content: p }], max_tokens: MAX, temperature: 0 };
        if (kind === "chat") {
            const r = await client.chat.completions.create(body);
            checkXDspark(r.x_dspark);
            return r.choices[0].message.content ?? "";
        }
        let t = "";
        for await (const c of await client.chat.completions.create({ ...body, stream: true })) t += c.choices?.[0]?.delta?.content ?? "";
        return t;
    }
    const body = { model, prompt: p, max_tokens: MAX, temperature: 0 };
    if (kind === "completion") return (await client.completions.create(body)).choices[0].text;
    let t = "";
    for await (const c of await client.completions.create({ ...body, stream: true })) t += c.choices?.[0]?.text ?? "";
    return t;
}

// runs jobs [{kind, i}] with INFLIGHT at a time; returns the mismatches
async function hammer(jobs, expected) {
    const bad = [];
    let next = 0, done = 0;
    async function worker() {
        while (next < jobs.length) {
            const j = jobs[next++];
            const got = await ask(j.kind, j.i);
            const want = expected[j.kind.startsWith("chat") ? "chat" : "completion"][j.i];
            if (got !== want) bad.push(`${j.kind} prompt ${j.i}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`);
            done++;
        }
    }
    await Promise.all(Array.from({ length: INFLIGHT }, worker));
    assert.equal(done, jobs.length);
    return bad;
}

function mixed(n, seed) {
    const jobs = [];
    for (let k = 0; k < n; k++) jobs.push({ kind: KINDS[(k + seed) % 4], i: (k * 3 + seed + Math.floor(k / 4)) % PROMPTS.length });
    return jobs;
}

if (PHASE === "warm") {
    test("expected answers, one request at a time", async () => {
        const expected = { chat: [], completion: [] };
        for (const [i] of PROMPTS.entries()) {
            expected.chat[i] = await ask("chat", i);
            expected.completion[i] = await ask("completion", i);
            assert.ok(expected.chat[i].length > 0 && expected.completion[i].length > 0, `prompt ${i}: empty answer`);
            // streaming gives the same text
            assert.equal(await ask("chat-stream", i), expected.chat[i]);
            assert.equal(await ask("completion-stream", i), expected.completion[i]);
        }
        const bad = await hammer(mixed(32, 1), expected);
        assert.deepEqual(bad, [], `warm-up mismatches:\n${bad.slice(0, 5).join("\n")}`);
        assert.ok(FILE, "DSPARK_LOAD_FILE");
        fs.writeFileSync(FILE, JSON.stringify(expected));
    }, 280000);
} else {
    test(`${N} requests, ${INFLIGHT} in flight, all answers as expected`, async () => {
        const expected = JSON.parse(fs.readFileSync(FILE, "utf8"));
        const t0 = Date.now();
        // /health while the load runs: the pool's pages and the batch
        let polling = true, maxHeld = 0, maxRunning = 0, cap = 0, polls = 0;
        const poller = (async () => {
            while (polling) {
                const h = (await request("GET", "/health")).json;
                const kp = h.kv_pages;
                assert.ok(kp && kp.capacity > 0, `/health kv_pages.capacity: ${JSON.stringify(kp)}`);
                cap = kp.capacity;
                maxHeld = Math.max(maxHeld, kp.held);
                maxRunning = Math.max(maxRunning, h.requests_running);
                assert.ok(kp.held <= kp.capacity, `KV pages held ${kp.held} > the pool's ${kp.capacity}`);
                polls++;
                await new Promise((r) => setTimeout(r, 20));
            }
        })();
        const bad = await hammer(mixed(N, 0), expected);
        polling = false;
        await poller;
        assert.deepEqual(bad, [], `${bad.length} of ${N} answers differ:\n${bad.slice(0, 5).join("\n")}`);
        console.log(`     ${N} requests in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
        const h = await request("GET", "/health");
        const kp = h.json.kv_pages;
        console.log(`     up to ${maxRunning} requests running, ${maxHeld} of ${cap} KV pages held (${polls} polls), ` +
            `${kp.deferred} admissions deferred, ${kp.slots_shed} idle slots emptied for pages`);
        assert.ok(maxRunning > 4, `at most ${maxRunning} requests ran at once (--max-batch 32)`);
        assert.ok(kp.deferred > 0, "no admission waited for pages: the pool did not bound the batch");
        assert.ok(kp.held <= kp.capacity);
        assert.equal(h.json.status, "ok");
        assert.ok(h.json.memory?.rss_bytes > 0, "health memory.rss_bytes");
        const m = await request("GET", "/metrics");
        const line = m.text.split("\n").find((l) => /^dspark_requests_total(\{[^}]*\})? /.test(l));
        assert.ok(line && Number(line.split(" ").pop()) >= N, `dspark_requests_total counts the load: ${line}`);
    }, 280000);
}

await run();
