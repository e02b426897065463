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
// The browser: browser.mjs.
import fs from "node:fs";
import path from "node:path";
import { assert, run, test, sleep, BASE, API_KEY } from "./common.mjs";
import { ART, S, requests, evaluate, until, loaded, screenshot, setField, click, keyIfAsked, closeBrowser } from "./browser.mjs";

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

test("the browser closes", closeBrowser);

await run();
