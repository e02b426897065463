// Concurrent requests against a live `dspark serve` (continuous batching:
// up to --max-batch requests generated together, each in its own cache
// slot with its own sampler, one forward per step carrying all their rows).
// tests/test_server.c server_conc starts one server per phase:
//   DSPARK_CONC_PHASE=bundled   the bundled model, DSpark drafts pinned at 7,
//       --max-batch 4: mixed requests (speculative and plain, greedy and
//       seeded sampling, a stop string, logprobs, a json_schema, a cancel)
//       sent together each answer what they answer alone; a long prompt's
//       prefill goes in chunks between the others' rounds; n above the batch
//       is refused and n within it equals the single requests of its seeds;
//       a request arriving while another with the same long system prompt
//       runs takes that prefix by copy (cached_tokens, the copy counters)
//       and answers as alone; a prompt whose slot was reused since comes
//       back from the prefix block cache and answers as it did cold;
//       /health and /metrics show the batch; last, SIGTERM (to
//       $DSPARK_SERVER_PID) with a full batch and a queue: every answer
//       finishes whole, equal to its answer alone.
//   DSPARK_CONC_PHASE=scripted  the scripted model (tests/scripted.c):
//       tool calls (required, named, auto after the reasoning, Anthropic's
//       any) and plain answers sent together equal their answers alone.
import { assert, openai, anthropic, run, test, request, postJSON, streamSSE, sleep, MODEL_ID, SCRIPT, USER_Q }
    from "./common.mjs";

const PHASE = process.env.DSPARK_CONC_PHASE || "bundled";
const PID = Number(process.env.DSPARK_SERVER_PID);
const model = MODEL_ID || "m";

const health = async () => (await request("GET", "/health")).json;
async function metrics() {
    const text = (await request("GET", "/metrics")).text;
    const get = (n) => {
        const m = text.match(new RegExp(`^dspark_${n} (\\S+)$`, "m"));
        return m ? Number(m[1]) : undefined;
    };
    return { text, get };
}
async function until(pred, what, ms = 20000) {
    const t0 = Date.now();
    for (;;) {
        const h = await health();
        if (pred(h)) return h;
        assert.ok(Date.now() - t0 < ms, `${what}: not within ${ms} ms (last /health ${JSON.stringify(h)})`);
        await sleep(10);
    }
}
const idle = () => until((h) => h.requests_running === 0 && h.requests_waiting === 0, "the engine is idle");

// What an answer is, for comparing: the text (or tool calls), the finish and
// the generated tokens; log-probabilities when asked for.
function outcome(r) {
    assert.equal(r.status, 200, r.text);
    const j = r.json;
    if (j.object === "chat.completion") {
        const c = j.choices[0];
        return { text: c.message.content, calls: c.message.tool_calls ?? null, finish: c.finish_reason,
            tokens: j.usage.completion_tokens, lp: c.logprobs ?? null };
    }
    if (j.object === "text_completion")
        return { text: j.choices[0].text, finish: j.choices[0].finish_reason, tokens: j.usage.completion_tokens,
            lp: j.choices[0].logprobs ?? null };
    if (j.type === "message")
        return { content: j.content, finish: j.stop_reason, tokens: j.usage.output_tokens };
    throw new Error(`unexpected body ${r.text.slice(0, 300)}`);
}

// A streamed chat answer gathered into the same shape (logprobs' content joined).
async function streamed(body) {
    const r = await streamSSE("/v1/chat/completions", { ...body, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200);
    let text = "", finish = null, tokens = null, lp = null;
    for (const f of r.frames) {
        if (!f.json) continue;
        assert.ok(!f.json.error, `stream error: ${f.data}`);
        const c = f.json.choices?.[0];
        if (c) {
            text += c.delta?.content ?? "";
            if (c.finish_reason) finish = c.finish_reason;
            if (c.logprobs?.content) (lp ??= []).push(...c.logprobs.content);
        }
        if (f.json.usage) tokens = f.json.usage.completion_tokens;
    }
    return { text, calls: null, finish, tokens, lp: lp ? { content: lp } : null };
}

function send(c) {
    return c.stream ? streamed(c.body) : postJSON(c.path, c.body).then(outcome);
}

function same(got, ref, what) {
    assert.deepEqual(got, ref, `${what}: the answer sent with others differs from the one alone`);
}

if (PHASE === "bundled") {
    const chat = (content, n, extra = {}) => ({ path: "/v1/chat/completions",
        body: { model, messages: [{ role: "user", content }], max_tokens: n, temperature: 0, ...extra } });
    const comp = (prompt, n, extra = {}) => ({ path: "/v1/completions",
        body: { model, prompt, max_tokens: n, temperature: 0, ...extra } });
    const plain = { x_dspark: { speculative: false } };
    const SCHEMA = { type: "object", properties: { name: { type: "string", maxLength: 10 },
        age: { type: "integer", minimum: 0, maximum: 120 } }, required: ["name", "age"], additionalProperties: false };
    // mixed lengths, modes, sampling, formats
    const CASES = [
        { what: "chat greedy speculative", ...chat("def fib(n):", 48) },
        { what: "chat greedy plain", ...chat("Write a Python function that returns the factorial of n.", 40, plain) },
        { what: "completion seeded", ...comp("import numpy as np\n", 32, { temperature: 0.9, seed: 11 }) },
        { what: "chat seeded plain", ...chat("def add(a, b):", 24, { temperature: 0.7, top_p: 0.9, seed: 5, ...plain }) },
        { what: "completion greedy speculative", ...comp("# a long list of numbers\nnums = [1, 2, 3, ", 64) },
        { what: "chat json_schema", ...chat("Describe a person as JSON.", 60,
            { response_format: { type: "json_schema", json_schema: { name: "p", schema: SCHEMA } } }) },
        { what: "chat streamed logprobs", stream: true,
            ...chat("class Stack:", 32, { logprobs: true, top_logprobs: 2 }) },
    ];
    const refs = [];

    test("each request alone (the references); a stop string taken from one", async () => {
        for (const c of CASES) refs.push(await send(c));
        // a stop string inside the first answer: the same request with it
        // stops there (the stop case then joins the concurrent set)
        const t = refs[0].text;
        assert.ok(t.length > 16, `a short reference answer: ${JSON.stringify(t)}`);
        const stop = t.slice(8, 12);
        const c = { what: "chat greedy stop string", ...chat("def fib(n):", 48, { stop: [stop] }) };
        const r = await send(c);
        assert.equal(r.finish, "stop");
        assert.equal(r.text, t.slice(0, t.indexOf(stop)));
        CASES.push(c);
        refs.push(r);
        const js = refs[5];
        if (js.finish === "stop") JSON.parse(js.text);
    }, 120000);

    test("sent together (a full batch, the rest queued, one cancelled): each answer equals its answer alone",
        async () => {
            await idle();
            const before = (await metrics()).get("requests_cancelled_total");
            let maxRunning = 0, maxWaiting = 0, polling = true;
            const poll = (async () => {
                while (polling) {
                    const h = await health();
                    maxRunning = Math.max(maxRunning, h.requests_running);
                    maxWaiting = Math.max(maxWaiting, h.requests_waiting);
                    await sleep(5);
                }
            })();
            // a long stream its client drops after a few frames
            let frames = 0;
            const cancelled = streamSSE("/v1/chat/completions", { ...chat("def main():", 1500).body, stream: true,
                ...plain }, { onFrame: () => ++frames >= 4 });
            const outs = await Promise.all(CASES.map(send));
            await cancelled;
            polling = false;
            await poll;
            for (const [i, c] of CASES.entries()) same(outs[i], refs[i], c.what);
            assert.equal(maxRunning, 4, "the batch never reached --max-batch 4");
            assert.ok(maxWaiting >= 1, "no request waited for the batch");
            await idle();
            assert.equal((await metrics()).get("requests_cancelled_total"), before + 1, "the dropped stream's cancel");
        }, 120000);

    test("a long prompt's prefill goes in chunks between the others' rounds", async () => {
        await idle();
        // about 1500 prompt tokens: three chunks of a plain prefill
        let text = "# data\n";
        for (let i = 0; ; i++) {
            text += `value_${i} = ${(i * 37) % 101}\n`;
            if (i % 50 === 0 && (await postJSON("/tokenize", { content: text })).json.tokens.length > 1500) break;
        }
        const events = [];
        let longReq = null, longDone = false;
        const ev = streamSSE("/events", undefined, { method: "GET", timeoutMs: 60000, onFrame: (f) => {
            const j = f.json;
            if (!j) return false;
            events.push(j);
            if (j.type === "prefill" && j.total > 1400) {
                longReq = j.req;
                if (j.done) longDone = true;
            }
            return longDone;
        } });
        await sleep(100);
        const list = "# a long list of numbers\nnums = [1, 2, 3, ";
        const a = send(comp(list, 300, { ignore_eos: true, ...plain })), b = send(comp(list, 300, { ignore_eos: true }));
        await until((h) => h.requests_running === 2 && h.batch.steps > 0, "two answers running");
        await sleep(50);
        const long = send(comp(text, 4, plain));
        await ev;
        const first = events.findIndex((j) => j.type === "prefill" && j.req === longReq);
        const last = events.findIndex((j) => j.type === "prefill" && j.req === longReq && j.done);
        const chunks = events.filter((j) => j.type === "prefill" && j.req === longReq && !j.done).length;
        const between = events.slice(first, last).filter((j) => j.type === undefined && j.req !== longReq);
        assert.ok(chunks >= 2, `the long prompt's prefill reported ${chunks} chunk(s)`);
        assert.ok(between.length >= chunks - 1,
            `${between.length} rounds of the running answers during the long prompt's ${chunks}-chunk prefill`);
        const steps = events.slice(first, last).filter((j) => j.type === "step");
        assert.ok(steps.some((s) => s.jobs === 3), "no step carried the long prompt and both running answers");
        await Promise.all([a, b, long]);
    }, 120000);

    test("n above --max-batch is refused; n choices run side by side as the single requests of their seeds",
        async () => {
            const body = chat("def add(a, b):", 16, { temperature: 1, seed: 21 }).body;
            const big = await postJSON("/v1/chat/completions", { ...body, n: 5 });
            assert.equal(big.status, 400, big.text);
            assert.match(big.json.error.message, /--max-batch 4/);
            const r = await postJSON("/v1/chat/completions", { ...body, n: 4 });
            assert.equal(r.status, 200, r.text);
            for (let i = 0; i < 4; i++) {
                const one = outcome(await postJSON("/v1/chat/completions", { ...body, seed: 21 + i }));
                assert.equal(r.json.choices[i].message.content, one.text, `choice ${i}`);
            }
        }, 60000);

    test("a request arriving while another runs takes their shared prompt prefix by copy, and answers as alone",
        async () => {
            await idle();
            let sys = "You are a careful coding agent. Tools: read_file(path), write_file(path, text), run(cmd).\n";
            for (let i = 0; (await postJSON("/tokenize", { content: sys })).json.tokens.length < 400; i++)
                sys += `Rule ${i}: keep functions short, name things plainly, test edge case ${i}.\n`;
            const ask = (q, n, extra = {}) => ({ path: "/v1/chat/completions", body: { model, max_tokens: n,
                temperature: 0, messages: [{ role: "system", content: sys }, { role: "user", content: q }], ...extra } });
            const m0 = await metrics();
            const copies0 = m0.get("prefix_cache_copies_total"), tok0 = m0.get("prefix_cache_copied_tokens_total");
            const s0 = (await health()).batch.steps;
            const a = send(ask("Write a CSV parser.", 1500, { ignore_eos: true }));
            await until((h) => h.requests_running === 1 && h.batch.steps >= s0 + 3, "the first answer decoding");
            const b = ask("Write a JSON printer.", 24);
            const rb = await postJSON(b.path, b.body);
            const got = outcome(rb), cached = rb.json.usage.prompt_tokens_details.cached_tokens;
            await a;
            const m1 = await metrics();
            assert.equal(m1.get("prefix_cache_copies_total"), copies0 + 1, "one copy between the slots");
            const copied = m1.get("prefix_cache_copied_tokens_total") - tok0;
            assert.ok(cached >= 400 && cached < rb.json.usage.prompt_tokens, `cached_tokens ${cached}`);
            assert.ok(copied >= cached - 32 && copied <= cached, `${copied} positions copied, ${cached} cached`);
            same(got, outcome(await postJSON(b.path, b.body)), "the request given a copied prefix");
        }, 60000);

    test("a prompt whose slot was reused since comes back from the prefix block cache, and answers as cold",
        async () => {
            await idle();
            let sys = "You review pull requests. Say what breaks, what is slow and what is unclear.\n";
            for (let i = 0; (await postJSON("/tokenize", { content: sys })).json.tokens.length < 300; i++)
                sys += `Check ${i}: the error path of step ${i} and its cleanup.\n`;
            const ask = (q) => ({ path: "/v1/chat/completions", body: { model, max_tokens: 20, temperature: 0,
                messages: [{ role: "system", content: sys }, { role: "user", content: q }] } });
            const y = ask("Review: def f(x): return x / 0");
            const cold = await postJSON(y.path, y.body);
            const ref = outcome(cold);
            // four unrelated conversations take the four slots
            for (let i = 0; i < 4; i++)
                outcome(await postJSON("/v1/chat/completions", { model, max_tokens: 4, temperature: 0,
                    messages: [{ role: "user", content: `Filler ${i}: name ${i + 2} colours of the ${["sea", "sky", "sand", "moss"][i]}.` }] }));
            const h0 = await health(), m0 = await metrics();
            assert.ok(h0.prefix_cache.blocks.cached >= 2, JSON.stringify(h0.prefix_cache));
            assert.ok(h0.prefix_cache.blocks.bytes <= h0.prefix_cache.blocks.budget_bytes, JSON.stringify(h0.prefix_cache));
            const warm = await postJSON(y.path, y.body);
            same(outcome(warm), ref, "the answer from cached blocks");
            const cached = warm.json.usage.prompt_tokens_details.cached_tokens;
            const m1 = await metrics(), h1 = await health();
            assert.ok(cached >= 256 && cached % 128 === 0, `cached_tokens ${cached}`);
            assert.equal(m1.get("prefix_cache_copies_total"), m0.get("prefix_cache_copies_total"), "no slot held it");
            assert.equal(m1.get("prefix_blocks_hits_total"), m0.get("prefix_blocks_hits_total") + 1);
            assert.equal(m1.get("prefix_blocks_loaded_tokens_total") - m0.get("prefix_blocks_loaded_tokens_total"), cached);
            assert.equal(h1.prefix_cache.blocks.loaded_tokens, m1.get("prefix_blocks_loaded_tokens_total"));
            assert.equal(h1.prefix_cache.blocks.block_tokens, 128);
            // the blocks went in by reference: the slot shares their pages
            assert.ok(h1.kv_pages && h1.kv_pages.page_tokens === 128, JSON.stringify(h1.kv_pages));
            assert.ok(h1.kv_pages.shared >= cached / 128, `${h1.kv_pages.shared} pages shared, ${cached} positions from blocks`);
            assert.equal(m1.get("kv_pages"), h1.kv_pages.held);
            assert.equal(m1.get("kv_pages_bytes"), h1.kv_pages.bytes);
        }, 60000);

    test("/health and /metrics show the batch", async () => {
        await idle();
        const h = await health();
        assert.equal(h.max_batch, 4);
        assert.equal(h.cache_slots, 4);
        const b = h.batch;
        assert.equal(b.max_batch, 4);
        assert.ok(b.steps > 0 && b.avg_step_jobs > 1 && b.avg_step_jobs <= 4, JSON.stringify(b));
        assert.ok(b.avg_step_rows >= b.avg_step_jobs, JSON.stringify(b));
        const m = await metrics();
        assert.equal(m.get("max_batch"), 4);
        const steps = m.get("steps_total"), jobs = m.get("step_jobs_total");
        assert.ok(steps >= b.steps && jobs / steps > 1, `steps ${steps}, jobs ${jobs}`);
        assert.equal(m.get("requests_running"), 0);
        const inf = m.text.match(/^dspark_step_rows_bucket\{le="\+Inf"\} (\d+)$/m);
        assert.ok(inf, "the step_rows histogram");
        assert.equal(Number(inf[1]), m.get("step_rows_count"));
        assert.equal(m.get("step_rows_count"), steps);
        const b1 = Number(m.text.match(/^dspark_step_rows_bucket\{le="1"\} (\d+)$/m)[1]);
        assert.ok(b1 < steps, "every step carried one row");
    });

    test("SIGTERM with a full batch and a queue: every answer finishes whole, equal to its answer alone",
        async () => {
            assert.ok(PID > 0, "DSPARK_SERVER_PID is not set");
            await idle();
            const done0 = (await metrics()).get("requests_total");
            const pending = CASES.map(send);
            // every request in the scheduler (running, queued or done) before the
            // signal: one still on its way would meet the drain's 503
            for (const t0 = Date.now(); ;) {
                const h = await health(), done = (await metrics()).get("requests_total") - done0;
                if (h.requests_running === 4 && h.requests_waiting >= 1 &&
                    h.requests_running + h.requests_waiting + done === CASES.length) break;
                assert.ok(Date.now() - t0 < 20000, `a full batch, a queue and every request in: ${JSON.stringify(h)}`);
                await sleep(10);
            }
            process.kill(PID, "SIGTERM");
            const outs = await Promise.all(pending);
            for (const [i, c] of CASES.entries()) same(outs[i], refs[i], c.what);
        }, 120000);
} else {
    const user = [{ role: "user", content: USER_Q }];
    const CITY = { type: "object", properties: { city: { enum: ["Paris", "Rome"] } }, required: ["city"],
        additionalProperties: false };
    const tools = [{ type: "function", function: { name: "get_weather", parameters: CITY } }];
    const chat = (extra) => ({ path: "/v1/chat/completions", body: { model, messages: user, max_tokens: 120, ...extra } });
    const CASES = [
        { what: "tool_choice required", ...chat({ tools, tool_choice: "required",
            chat_template_kwargs: { enable_thinking: false } }) },
        { what: "named tool", ...chat({ tools, tool_choice: { type: "function", function: { name: "get_weather" } } }) },
        { what: "auto: the script's call after its reasoning", ...chat({ tools }) },
        { what: "plain text", ...chat({ chat_template_kwargs: { enable_thinking: false } }) },
        { what: "raw completion", path: "/v1/completions", body: { model, prompt: SCRIPT.rawPrompt, max_tokens: 16 } },
        { what: "anthropic tool_choice any", path: "/v1/messages", body: { model, max_tokens: 120, messages: user,
            tool_choice: { type: "any" }, tools: [{ name: "get_weather", input_schema: CITY }] } },
    ];

    test("tool calls and plain answers sent together equal their answers alone", async () => {
        const refs = [];
        for (const c of CASES) refs.push(await send(c));
        assert.equal(refs[0].finish, "tool_calls", JSON.stringify(refs[0]));
        assert.equal(refs[2].finish, "tool_calls", JSON.stringify(refs[2]));
        assert.equal(refs[3].text, SCRIPT.hello);
        assert.equal(refs[4].text, SCRIPT.fox);
        assert.equal(refs[5].finish, "tool_use");
        // tool-call ids differ per answer: compare everything else
        const norm = (o) => JSON.parse(JSON.stringify(o, (k, v) => (k === "id" ? undefined : v)));
        for (let round = 0; round < 2; round++) {
            const outs = await Promise.all(CASES.map(send));
            for (const [i, c] of CASES.entries()) same(norm(outs[i]), norm(refs[i]), c.what);
        }
    }, 120000);
}

await run();
