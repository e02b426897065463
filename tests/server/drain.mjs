// Shutdown of `dspark serve` on the bundled model (tests/test_server.c
// server_drain starts one server per phase and checks it exits with status 0
// afterwards). The script sends the stop signals itself, to $DSPARK_SERVER_PID.
//
//   DSPARK_DRAIN_PHASE=whole   (default --drain-timeout 30) SIGTERM while a
//       long answer is generated and eight more (chat, completions, Responses,
//       Anthropic; streamed and whole) run beside it (a full batch) or wait
//       in the queue: every one finishes
//       whole, equal to its answer before the signal, within the timeout;
//       meanwhile new requests get 503 in their dialect and /health says
//       draining; then the server goes away.
//   DSPARK_DRAIN_PHASE=cut     (--drain-timeout 0.5) the same eight, each
//       longer than the timeout: each ends with its dialect's explicit error
//       (OpenAI streams: a data {"error"} frame, no finish_reason, no [DONE];
//       Responses: response.failed; Anthropic: an error event; whole replies:
//       503 with the dialect's error object), never a normal finish.
//   DSPARK_DRAIN_PHASE=second  (--drain-timeout 30) a second SIGTERM cuts at
//       once; the official SDKs raise the error to their callers.
import {
    assert, openai, anthropic, run, test, request, postJSON, streamSSE, sleep, MODEL_ID,
} from "./common.mjs";

const PHASE = process.env.DSPARK_DRAIN_PHASE || "whole";
// a sanitizer build runs the model several times slower (see common.mjs)
const SCALE = Number(process.env.DSPARK_TEST_TIMEOUT_SCALE) > 0 ? Number(process.env.DSPARK_TEST_TIMEOUT_SCALE) : 1;
const PID = Number(process.env.DSPARK_SERVER_PID);
const model = MODEL_ID || "dspark-coder-6m";
const PROMPT = "Write a Python function that returns the factorial of n.";
const RAW = "# a long list of numbers\nnums = [1, 2, 3, ";

// One request of a dialect: {path, body}; n is its token budget.
function req(dialect, stream, n) {
    const messages = [{ role: "user", content: PROMPT }];
    switch (dialect) {
    case "chat":
        return { path: "/v1/chat/completions", body: { model, messages, max_tokens: n, temperature: 0, stream,
            ...(stream ? { stream_options: { include_usage: true } } : {}) } };
    case "completions":
        return { path: "/v1/completions", body: { model, prompt: RAW, max_tokens: n, temperature: 0, stream,
            ...(stream ? { stream_options: { include_usage: true } } : {}) } };
    case "responses":
        return { path: "/v1/responses", body: { model, input: PROMPT, max_output_tokens: n, temperature: 0, stream } };
    default:
        return { path: "/v1/messages", body: { model, messages, max_tokens: n, temperature: 0, stream } };
    }
}
const DIALECTS = ["chat", "completions", "responses", "messages"];
const CASES = DIALECTS.flatMap((d) => [{ d, stream: false }, { d, stream: true }]);

// How an answer ended: {kind: "whole", text, finish, tokens} or {kind: "error", status, error}.
// Whole means the dialect's normal end (a finish reason, usage, [DONE] /
// message_stop / response.completed|incomplete); anything else found at the
// end (an error frame, a missing end) is recorded as such and checked below.
function endOfWhole(d, r) {
    const j = r.json;
    if (r.status !== 200) return { kind: "error", status: r.status, error: j };
    switch (d) {
    case "chat":
        return { kind: "whole", text: j.choices[0].message.content ?? "", finish: j.choices[0].finish_reason,
            tokens: j.usage.completion_tokens };
    case "completions":
        return { kind: "whole", text: j.choices[0].text, finish: j.choices[0].finish_reason, tokens: j.usage.completion_tokens };
    case "responses":
        return { kind: "whole", text: j.output.filter((o) => o.type === "message").map((o) => o.content[0].text).join(""),
            finish: j.status, tokens: j.usage.output_tokens };
    default:
        return { kind: "whole", text: j.content.filter((b) => b.type === "text").map((b) => b.text).join(""),
            finish: j.stop_reason, tokens: j.usage.output_tokens };
    }
}

function endOfStream(d, frames) {
    const data = frames.filter((f) => f.data !== null);
    const last = data[data.length - 1];
    let text = "", finish = null, tokens = null, error = null, done = false, finishes = 0;
    for (const f of data) {
        if (f.data === "[DONE]") {
            done = true;
            continue;
        }
        const j = f.json;
        assert.ok(j, `${d}: a frame is not JSON: ${f.data}`);
        if (d === "chat" || d === "completions") {
            if (j.error) error = j.error;
            const c = j.choices?.[0];
            if (c) {
                text += d === "chat" ? (c.delta?.content ?? "") : (c.text ?? "");
                if (c.finish_reason) {
                    finish = c.finish_reason;
                    finishes++;
                }
            }
            if (j.usage) tokens = j.usage.completion_tokens;
        } else if (d === "responses") {
            if (j.type === "response.output_text.delta") text += j.delta;
            if (j.type === "response.completed" || j.type === "response.incomplete") {
                finish = j.response.status;
                tokens = j.response.usage.output_tokens;
                finishes++;
                done = true;
            }
            if (j.type === "response.failed") error = j.response.error;
            if (j.type === "error") error = j;
        } else {
            if (j.type === "content_block_delta" && j.delta.type === "text_delta") text += j.delta.text;
            if (j.type === "message_delta") {
                finish = j.delta.stop_reason;
                tokens = j.usage.output_tokens;
                finishes++;
            }
            if (j.type === "message_stop") done = true;
            if (j.type === "error") error = j.error;
        }
    }
    if (error) {
        // the error is the last frame, and nothing before it said the answer was complete
        assert.equal(finishes, 0, `${d} stream: a finish (${finish}) before the error`);
        assert.ok(!done, `${d} stream: an end ([DONE] / message_stop / completed) besides the error`);
        assert.ok(last && last.data !== "[DONE]", `${d} stream: [DONE] after the error`);
        return { kind: "error", status: 200, error, last };
    }
    assert.ok(done && finishes === 1, `${d} stream: neither a whole end nor an error (last frame ${last?.data})`);
    return { kind: "whole", text, finish, tokens };
}

async function send(c, n) {
    const { path, body } = req(c.d, c.stream, n);
    if (!c.stream) return endOfWhole(c.d, await postJSON(path, body));
    const r = await streamSSE(path, body);
    assert.equal(r.status, 200, `${c.d} stream: HTTP ${r.status}`);
    return endOfStream(c.d, r.frames);
}

const name = (c) => `${c.d}${c.stream ? " stream" : ""}`;

async function health() {
    return request("GET", "/health");
}

// Polls /health until pred(json) holds (or fails after ms).
async function until(pred, what, ms = 20000) {
    ms *= SCALE;
    const t0 = Date.now();
    for (;;) {
        const h = (await health()).json;
        if (pred(h)) return h;
        assert.ok(Date.now() - t0 < ms, `${what}: not within ${ms} ms (last /health ${JSON.stringify(h)})`);
        await sleep(10);
    }
}

// n long requests in flight: as many running as the batch takes, the rest queued
function inFlight(h, n) {
    const running = Math.min(n, h.max_batch);
    return h.requests_running === running && h.requests_waiting === n - running;
}

function sigterm() {
    assert.ok(PID > 0, "DSPARK_SERVER_PID is not set");
    process.kill(PID, "SIGTERM");
}

// Resolves once the server no longer answers (its listener closed).
async function gone(ms) {
    const t0 = Date.now();
    for (;;) {
        try {
            await request("GET", "/health", { timeout: 1000 });
        } catch {
            return Date.now() - t0;
        }
        assert.ok(Date.now() - t0 < ms, `the server still answers ${ms} ms after its requests ended`);
        await sleep(50);
    }
}

// The dialect's 503 refusal of a new request while draining.
function checkRefusal(d, r) {
    assert.equal(r.status, 503, `${d} during the drain: HTTP ${r.status} ${r.text}`);
    const e = r.json?.error;
    assert.ok(e && /shutting down/.test(e.message), `${d}: error ${r.text}`);
    if (d === "messages") {
        assert.equal(r.json.type, "error");
        assert.equal(e.type, "overloaded_error");
    } else assert.equal(e.code, "server_shutting_down");
}

// the explicit error of an answer cut at shutdown, in its dialect
function checkCut(c, end) {
    const what = name(c);
    assert.equal(end.kind, "error", `${what}: ended ${JSON.stringify(end).slice(0, 300)}`);
    if (!c.stream) {
        assert.equal(end.status, 503, `${what}: HTTP ${end.status}`);
        checkRefusalShape(c.d, end.error, what);
        return;
    }
    const e = end.error;
    assert.ok(/shut down/.test(e.message), `${what}: error ${JSON.stringify(e)}`);
    if (c.d === "messages") {
        assert.equal(end.last.event, "error", `${what}: the error's event name`);
        assert.equal(e.type, "overloaded_error");
    } else if (c.d === "responses") {
        assert.equal(end.last.event, "response.failed");
        assert.equal(end.last.json.response.status, "failed");
        assert.equal(e.code, "server_error");
    } else {
        assert.equal(e.type, "service_unavailable");
        assert.equal(e.code, "server_shutting_down");
    }
}

function checkRefusalShape(d, j, what) {
    const e = j?.error;
    assert.ok(e && /shut down/.test(e.message), `${what}: body ${JSON.stringify(j)}`);
    if (d === "messages") {
        assert.equal(j.type, "error");
        assert.equal(e.type, "overloaded_error");
    } else assert.equal(e.code, "server_shutting_down");
}

if (PHASE === "whole") {
    test("SIGTERM: the running answer and the queued ones all finish whole; new requests get 503", async () => {
        const SHORT = 40, LONG = 1000;
        // each case's answer before the signal
        const ref = [];
        for (const c of CASES) {
            const e = await send(c, SHORT);
            assert.equal(e.kind, "whole", `${name(c)} before the signal: ${JSON.stringify(e).slice(0, 300)}`);
            ref.push(e);
        }
        for (let i = 0; i < CASES.length; i += 2)
            assert.equal(ref[i + 1].text, ref[i].text, `${CASES[i].d}: stream differs from the whole reply`);
        // telemetry: the same counts in /health and /metrics; each streamed
        // request repeats its whole reply's prompt, so it reuses cached positions
        // a client has its answer a moment before the scheduler marks the job
        // done, so wait for the engine to be idle before reading its gauges
        await until((h) => h.requests_running === 0 && h.requests_waiting === 0, "the engine is idle");
        const h0 = (await health()).json, m0 = (await request("GET", "/metrics")).text;
        const metric = (n) => Number(m0.match(new RegExp(`^dspark_${n} (\\S+)$`, "m"))?.[1]);
        const pc = h0.prefix_cache;
        assert.ok(pc.lookups >= CASES.length && pc.hits >= CASES.length / 2 && pc.hits <= pc.lookups,
            `prefix_cache ${JSON.stringify(pc)}`);
        assert.equal(pc.hit_rate, pc.hits / pc.lookups);
        assert.ok(pc.cached_tokens > 0 && pc.cached_tokens < pc.prompt_tokens, `prefix_cache ${JSON.stringify(pc)}`);
        assert.equal(metric("prefix_cache_lookups_total"), pc.lookups);
        assert.equal(metric("prefix_cache_hits_total"), pc.hits);
        assert.equal(metric("prefix_cache_hit_ratio"), Number((pc.hits / pc.lookups).toFixed(4)));
        assert.equal(metric("prompt_tokens_cached_total"), pc.cached_tokens);
        for (const n of ["requests_running", "requests_waiting", "draining", "requests_cut_total"])
            assert.equal(metric(n), 0, `dspark_${n}`);
        assert.equal(h0.draining, false);
        assert.equal(h0.status, "ok");
        // a long streamed answer runs, the eight wait behind it
        const blocker = send({ d: "chat", stream: true }, LONG);
        await until((h) => h.requests_running === 1, "the long answer runs");
        const pending = CASES.map((c) => send(c, SHORT));
        // the batch full (the long answer and the first short ones running
        // together) and the rest queued behind it
        await until((h) => h.requests_running === h.max_batch && h.requests_waiting >= 1,
            "a full batch running and requests queued");
        const t0 = Date.now();
        sigterm();
        const h = await until((x) => x.draining === true, "/health says draining", 5000);
        assert.equal(h.status, "draining");
        const hr = await health();
        assert.equal(hr.status, 503, "/health while draining");
        assert.ok(h.requests_running + h.requests_waiting >= 1, `nothing in flight at the signal: ${JSON.stringify(h)}`);
        const metrics = (await request("GET", "/metrics")).text;
        assert.match(metrics, /^dspark_draining 1$/m);
        for (const d of DIALECTS) {
            const { path, body } = req(d, false, 8);
            checkRefusal(d, await postJSON(path, body));
        }
        const ends = await Promise.all(pending);
        const b = await blocker;
        const took = Date.now() - t0;
        assert.equal(b.kind, "whole", `the long answer: ${JSON.stringify(b).slice(0, 300)}`);
        assert.equal(b.finish, "length");
        assert.equal(b.tokens, LONG, "the long answer's token count");
        for (const [i, c] of CASES.entries()) {
            assert.equal(ends[i].kind, "whole", `${name(c)}: ${JSON.stringify(ends[i]).slice(0, 300)}`);
            assert.equal(ends[i].text, ref[i].text, `${name(c)}: differs from its answer before the signal`);
            assert.equal(ends[i].finish, ref[i].finish, `${name(c)}: finish`);
        }
        assert.ok(took < 30000, `the drain took ${took} ms, past the 30 s timeout`);
        const g = await gone(10000 * SCALE);
        console.log(`     drained in ${took} ms; the server went away ${g} ms later`);
    }, 120000);
} else if (PHASE === "cut") {
    test("a drain timeout shorter than the answers: each ends with its dialect's error", async () => {
        const LONG = 1500;
        const pending = CASES.map((c) => send(c, LONG));
        await until((h) => inFlight(h, CASES.length), "all eight in flight");
        const t0 = Date.now();
        sigterm();
        const ends = await Promise.all(pending);
        const took = Date.now() - t0;
        let cut = 0;
        for (const [i, c] of CASES.entries()) {
            const e = ends[i];
            if (e.kind === "whole") {
                // one that truly finished before the cut is whole: its full budget
                assert.ok(["length", "incomplete", "max_tokens"].includes(e.finish) && e.tokens === LONG,
                    `${name(c)}: a normal finish of a cut answer (${e.finish}, ${e.tokens} tokens)`);
                continue;
            }
            checkCut(c, e);
            cut++;
        }
        assert.ok(cut >= CASES.length - 1, `only ${cut} of ${CASES.length} answers were cut`);
        assert.ok(took < 500 + 6000 * SCALE, `the cut answers ended ${took} ms after the signal`);
        await gone(10000 * SCALE);
        console.log(`     ${cut} of ${CASES.length} cut; all ended ${took} ms after the signal`);
    }, 120000);
} else {
    test("a second SIGTERM cuts at once; the SDKs raise the error", async () => {
        const LONG = 1500;
        const oa = openai(), an = anthropic();
        const chat = (async () => {
            let text = "";
            const s = await oa.chat.completions.create({ ...req("chat", true, LONG).body });
            for await (const c of s) text += c.choices?.[0]?.delta?.content ?? "";
            return text;
        })();
        const msg = (async () => {
            const s = an.messages.stream(req("messages", true, LONG).body);
            return s.finalMessage();
        })();
        const whole = postJSON(req("responses", false, LONG).path, req("responses", false, LONG).body);
        chat.catch(() => {});
        msg.catch(() => {});
        await until((h) => inFlight(h, 3), "all three in flight");
        const t0 = Date.now();
        sigterm();
        await until((h) => h.draining === true, "/health says draining", 5000);
        await sleep(200);
        sigterm();
        await assert.rejects(chat, (e) => /shut down/.test(String(e?.message ?? e)), "the OpenAI SDK's stream");
        await assert.rejects(msg, (e) => /shut down/.test(String(e?.message ?? e)), "the Anthropic SDK's stream");
        const r = await whole;
        checkCut({ d: "responses", stream: false }, endOfWhole("responses", r));
        const took = Date.now() - t0;
        assert.ok(took < 6000 * SCALE, `the answers ended ${took} ms after the first signal (a 30 s drain was cut)`);
        await gone(10000 * SCALE);
    }, 120000);
}

await run();
