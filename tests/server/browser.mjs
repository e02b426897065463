// Headless Chromium for the web interface's tests (web.mjs, web_tools.mjs),
// driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
// messages ending in NUL on fds 3 and 4), so no npm package and no
// downloaded browser: $DSPARK_CHROMIUM or chromium on PATH (Debian's
// package). Importing it starts the browser with one page; every URL the
// page requests is kept in `requests`. closeBrowser() ends it (an exit
// handler also ends every Chromium process and removes the profile).
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { sleep, API_KEY } from "./common.mjs";

export const ART = process.env.DSPARK_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), "dspark-web-"));
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

export const requests = []; // every URL the page asked for
const events = new Map(); // method -> [params]
let session = null;
cdp.on((m) => {
    if (m.sessionId !== session) return;
    if (m.method === "Network.requestWillBeSent") requests.push(m.params.request.url);
    if (!events.has(m.method)) events.set(m.method, []);
    events.get(m.method).push(m.params);
});
export const S = (method, params) => cdp.send(method, params, session);
export async function evaluate(expr) {
    const r = await S("Runtime.evaluate", { expression: expr, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`${expr.slice(0, 80)}: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
    return r.result.value;
}
// waits until expr is truthy (returns its value)
export async function until(expr, what, ms = 60000) {
    const end = Date.now() + ms * SCALE;
    for (;;) {
        const v = await evaluate(expr);
        if (v) return v;
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await sleep(100);
    }
}
export async function loaded() {
    const n = (events.get("Page.loadEventFired") || []).length;
    return async () => {
        const end = Date.now() + 30000 * SCALE;
        while ((events.get("Page.loadEventFired") || []).length === n) {
            if (Date.now() > end) throw new Error("the page did not load");
            await sleep(50);
        }
    };
}
export async function screenshot(name, width, height, mobile) {
    await S("Emulation.setDeviceMetricsOverride", { width, height, deviceScaleFactor: 1, mobile });
    await evaluate("document.activeElement?.blur(), 1");
    await sleep(300);
    const { data } = await S("Page.captureScreenshot", { format: "png" });
    const f = path.join(ART, name);
    fs.writeFileSync(f, Buffer.from(data, "base64"));
    console.log(`     screenshot ${f} (${width}x${height}, ${fs.statSync(f).size} bytes)`);
}
// types text into a field the way a person would (focus, value, input event)
export const setField = (sel, v) => evaluate(`(() => { const e = document.querySelector(${JSON.stringify(sel)});
    e.focus(); e.value = ${JSON.stringify(v)}; e.dispatchEvent(new Event("input", {bubbles: true}));
    e.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`);
export const click = (sel) => evaluate(`(document.querySelector(${JSON.stringify(sel)}).click(), true)`);
// answers the key dialog when it is open
export async function keyIfAsked() {
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

export async function closeBrowser() {
    done = true;
    const gone = new Promise((r) => proc.once("exit", r));
    await cdp.send("Browser.close");
    await gone;
}

process.on("exit", () => { // common.mjs's run() exits the process
    done = true;
    try { process.kill(-proc.pid, "SIGKILL"); } catch { /* already gone */ }
    try { fs.rmSync(profile, { recursive: true, force: true }); } catch (e) { console.error(`     ${profile}: ${e.message}`); }
});
