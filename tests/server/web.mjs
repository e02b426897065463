// The web interface (GET /) in headless Chromium against a live `dspark
// serve` on the bundled model: the page loads from the server alone, a chat
// message streams its answer, a generation is stopped, the conversation is
// found again after a reload, the race of plain against speculative decoding
// ends "identical", the engine view fills from /events and /metrics.
// Screenshots at desktop and phone widths go to $DSPARK_ARTIFACTS; the page's
// bytes and its first contentful paint are printed. Every request the page
// makes must go to the server (no request leaves the machine).
// With $DSPARK_API_KEY the server requires a key: the page must ask for it
// once and then work.
//
// Chromium is driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4), so
// no npm package and no downloaded browser: $DSPARK_CHROMIUM or chromium on
// PATH (Debian's package).
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { assert, run, test, sleep, BASE, API_KEY } from "./common.mjs";

const ART = process.env.DSPARK_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), "dspark-web-"));
const SCALE = Number(process.env.DSPARK_TEST_TIMEOUT_SCALE) > 0 ? Number(process.env.DSPARK_TEST_TIMEOUT_SCALE) : 1;
fs.mkdirSync(ART, { recursive: true });

function findChromium() {
    if (process.env.DSPARK_CHROMIUM) return process.env.DSPARK_CHROMIUM;
    for (const d of (process.env.PATH || "").split(":"))
        for (const n of ["chromium", "chromium-browser"]) {
            const f = path.join(d || ".", n);
            try { fs.accessSync(f, fs.constants.X_OK); return f; } catch { /* next */ }
        }
    console.error("chromium not found on PATH: install it (apt-get install chromium; scripts/install-deps does)");
    process.exit(2);
}

// ---- a minimal DevTools protocol client over the pipe ----
class CDP {
    constructor(proc) {
        this.proc = proc;
        this.out = proc.stdio[3];
        this.id = 0;
        this.pending = new Map();
        this.handlers = [];
        let buf = Buffer.alloc(0);
        proc.stdio[4].on("data", (d) => {
            buf = Buffer.concat([buf, d]);
            let i;
            while ((i = buf.indexOf(0)) >= 0) {
                const msg = JSON.parse(buf.subarray(0, i).toString("utf8"));
                buf = buf.subarray(i + 1);
                if (msg.id !== undefined && this.pending.has(msg.id)) {
                    const { res, rej, method } = this.pending.get(msg.id);
                    this.pending.delete(msg.id);
                    if (msg.error) rej(new Error(`${method}: ${msg.error.message}`));
                    else res(msg.result);
                } else for (const h of this.handlers) h(msg);
            }
        });
    }
    send(method, params = {}, sessionId) {
        const id = ++this.id;
        this.out.write(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }) + "\0");
        return new Promise((res, rej) => this.pending.set(id, { res, rej, method }));
    }
    on(h) { this.handlers.push(h); }
}

const chromium = findChromium();
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-chromium-"));
const args = ["--headless=new", "--remote-debugging-pipe", `--user-data-dir=${profile}`, "--no-first-run",
    "--no-default-browser-check", "--disable-gpu", "--disable-extensions", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-domain-reliability",
    "--metrics-recording-only", "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider",
    "--window-size=1280,860", "about:blank"];
if (process.getuid && process.getuid() === 0) args.unshift("--no-sandbox");
// its own process group: the exit handler ends every Chromium process
const proc = spawn(chromium, args, { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"], detached: true });
let chromeErr = "";
proc.stderr.on("data", (d) => { chromeErr = (chromeErr + d).slice(-4000); });
proc.on("exit", (c) => { if (c && !done) console.error(`chromium exited (${c}):\n${chromeErr}`); });
let done = false;
const cdp = new CDP(proc);

const requests = []; // every URL the page asked for
const events = new Map(); // method -> [params]
let session = null;
cdp.on((m) => {
    if (m.sessionId !== session) return;
    if (m.method === "Network.requestWillBeSent") requests.push(m.params.request.url);
    if (!events.has(m.method)) events.set(m.method, []);
    events.get(m.method).push(m.params);
});
const S = (method, params) => cdp.send(method, params, session);
async function evaluate(expr) {
    const r = await S("Runtime.evaluate", { expression: expr, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`${expr.slice(0, 80)}: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
    return r.result.value;
}
// waits until expr is truthy (returns its value)
async function until(expr, what, ms = 60000) {
    const end = Date.now() + ms * SCALE;
    for (;;) {
        const v = await evaluate(expr);
        if (v) return v;
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await sleep(100);
    }
}
async function loaded() {
    const n = (events.get("Page.loadEventFired") || []).length;
    return async () => {
        const end = Date.now() + 30000 * SCALE;
        while ((events.get("Page.loadEventFired") || []).length === n) {
            if (Date.now() > end) throw new Error("the page did not load");
            await sleep(50);
        }
    };
}
async function screenshot(name, width, height, mobile) {
    await S("Emulation.setDeviceMetricsOverride", { width, height, deviceScaleFactor: 1, mobile });
    await sleep(300);
    const { data } = await S("Page.captureScreenshot", { format: "png" });
    const f = path.join(ART, name);
    fs.writeFileSync(f, Buffer.from(data, "base64"));
    console.log(`     screenshot ${f} (${width}x${height}, ${fs.statSync(f).size} bytes)`);
}
// types text into a field the way a person would (focus, value, input event)
const setField = (sel, v) => evaluate(`(() => { const e = document.querySelector(${JSON.stringify(sel)});
    e.focus(); e.value = ${JSON.stringify(v)}; e.dispatchEvent(new Event("input", {bubbles: true}));
    e.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`);
const click = (sel) => evaluate(`(document.querySelector(${JSON.stringify(sel)}).click(), true)`);
// answers the key dialog when it is open
async function keyIfAsked() {
    if (!API_KEY) return;
    if (await evaluate(`document.querySelector("#key-dialog").open`)) {
        await setField("#key-input", API_KEY);
        await click("#key-form button");
    }
}

const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank" });
({ sessionId: session } = await cdp.send("Target.attachToTarget", { targetId, flatten: true }));
await S("Page.enable");
await S("Network.enable");
await S("Runtime.enable");
await S("Performance.enable");

test("the page loads from the server: its size and first paint", async () => {
    const wait = await loaded();
    await S("Page.navigate", { url: BASE + "/" });
    await wait();
    await until(`document.querySelector("#model-line").textContent.includes("model ")`, "the model line from /health");
    const fcp = await until(`(performance.getEntriesByName("first-contentful-paint")[0] || {}).startTime`,
        "the first contentful paint", 10000);
    const fp = await evaluate(`(performance.getEntriesByName("first-paint")[0] || {}).startTime`);
    const sizes = await evaluate(`performance.getEntriesByType("resource").map(e => [e.name, e.decodedBodySize])
        .concat([[location.href, performance.getEntriesByType("navigation")[0].decodedBodySize]])`);
    const page = sizes.filter(([u]) => /\/(|app\.js|style\.css)$/.test(new URL(u).pathname));
    const bytes = page.reduce((a, [, n]) => a + n, 0);
    assert.equal(page.length, 3, JSON.stringify(sizes));
    assert.ok(fcp > 0, `first-contentful-paint ${fcp}`);
    console.log(`     page ${bytes} bytes (${page.map(([u, n]) => `${new URL(u).pathname} ${n}`).join(", ")}); ` +
        `first paint ${fp?.toFixed(0)} ms, first contentful paint ${fcp.toFixed(0)} ms`);
    fs.writeFileSync(path.join(ART, "page.json"), JSON.stringify({ bytes, first_paint_ms: fp, first_contentful_paint_ms: fcp }));
});

test("a chat message streams its answer", async () => {
    await setField("#set-max", "48");
    await evaluate(`(() => { window.__mut = 0; new MutationObserver(() => window.__mut++)
        .observe(document.querySelector("#messages"), { childList: true, subtree: true, characterData: true }); return 1; })()`);
    await setField("#chat-input", "Write a Python function that returns the factorial of n.");
    await click("#send");
    await sleep(300);
    await keyIfAsked();
    const meta = await until(`(() => { const m = [...document.querySelectorAll("#messages .msg.assistant")].pop();
        return m && m.querySelector(".meta") && m.querySelector(".body").textContent.length > 0 && !document.querySelector("#send").disabled
          ? m.querySelector(".meta").textContent : ""; })()`, "the answer");
    assert.match(meta, /tokens ·.*tok\/s/, meta);
    const updates = await evaluate("window.__mut");
    assert.ok(updates >= 3, `the answer arrived in ${updates} DOM updates: not streamed`);
    const text = await evaluate(`[...document.querySelectorAll("#messages .msg.assistant")].pop().querySelector(".body").textContent`);
    console.log(`     answer (${updates} updates): ${JSON.stringify(text.slice(0, 80))}...`);
});

test("stop ends a running generation", async () => {
    await setField("#set-max", "1500");
    await setField("#chat-input", "Write a long Python module with many helper functions.");
    await click("#send");
    await until(`!document.querySelector("#stop").disabled && [...document.querySelectorAll("#messages .msg.assistant")].pop()
        .querySelector(".body").textContent.length > 0`, "the second answer's first text");
    await click("#stop");
    const meta = await until(`(() => { const m = [...document.querySelectorAll("#messages .msg.assistant")].pop();
        return !document.querySelector("#send").disabled && m.querySelector(".meta")?.textContent; })()`, "the stopped answer", 20000);
    assert.match(meta, /stopped/);
    await setField("#set-max", "48");
});

test("after a reload the conversation is there", async () => {
    const before = await evaluate(`document.querySelectorAll("#messages .msg").length`);
    const wait = await loaded();
    await S("Page.reload", {});
    await wait();
    const n = await until(`document.querySelectorAll("#messages .msg").length`, "the restored messages");
    assert.equal(n, before);
    const title = await evaluate(`document.querySelector("#conv-list li[aria-current=true] .open").textContent`);
    assert.match(title, /^Write a Python function/);
});

test("the race: plain and speculative decoding give identical output", async () => {
    await click("#tab-race");
    await setField("#race-max", "64");
    await setField("#race-temp", "0");
    await click("#race-run");
    await sleep(300);
    await keyIfAsked();
    const v = await until(`document.querySelector("#verdict").dataset.identical !== undefined && !document.querySelector("#race-run").disabled
        && document.querySelector("#verdict").textContent`, "the verdict", 120000);
    assert.equal(await evaluate(`document.querySelector("#verdict").dataset.identical`), "1", v);
    assert.match(v, /^Identical output/);
    const figs = await evaluate(`[...document.querySelectorAll("#lane-spec .figs div")].map(d => d.textContent).join(" | ")`);
    const bars = await evaluate(`document.querySelectorAll("#lane-spec .hist .bar").length`);
    assert.ok(bars >= 1, "an acceptance histogram");
    console.log(`     ${v}\n     speculative: ${figs}`);
    await screenshot("race-desktop.png", 1280, 860, false);
    await screenshot("race-phone.png", 390, 844, true);
    await S("Emulation.clearDeviceMetricsOverride");
}, 180000);

test("the engine view fills from /events and /metrics", async () => {
    await click("#tab-engine");
    // a request while the view listens: its rounds and prefill appear
    await click("#tab-chat");
    await setField("#chat-input", "Reverse the string s and return it.");
    await click("#send");
    await click("#tab-engine");
    await until(`document.querySelectorAll("#round-log li").length > 0`, "round events");
    await until(`!document.querySelector("#send").disabled`, "the chat answer");
    await until(`(() => { const c = [...document.querySelectorAll("#engine-cards .card")].find(c => c.dataset.k === "Requests");
        return c && Number(c.lastChild.textContent) >= 3; })()`, "the request count from /metrics", 20000);
    assert.match(await evaluate(`document.querySelector("#prefill-text").textContent`), /tokens/);
    await sleep(500);
    await screenshot("engine-desktop.png", 1280, 860, false);
    await click("#tab-chat");
    await screenshot("chat-desktop.png", 1280, 860, false);
    await screenshot("chat-phone.png", 390, 844, true);
});

test("no request left the machine", async () => {
    const origin = new URL(BASE).origin;
    const outside = requests.filter((u) => !u.startsWith(origin + "/") && !u.startsWith("data:") && u !== "about:blank");
    assert.deepEqual(outside, [], `requests outside ${origin}`);
    assert.ok(requests.length > 5, `only ${requests.length} requests seen`);
    if (API_KEY) assert.ok(await evaluate(`localStorage.getItem("dspark.key") === ${JSON.stringify(API_KEY)}`), "the key kept");
    console.log(`     ${requests.length} requests, all to ${origin}`);
});

test("the browser closes", async () => {
    done = true;
    const gone = new Promise((r) => proc.once("exit", r));
    await cdp.send("Browser.close");
    await gone;
});

process.on("exit", () => { // run() exits the process
    done = true;
    try { process.kill(-proc.pid, "SIGKILL"); } catch { /* already gone */ }
    try { fs.rmSync(profile, { recursive: true, force: true }); } catch (e) { console.error(`     ${profile}: ${e.message}`); }
});
await run();
