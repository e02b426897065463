// The web interface's chat on the scripted model (tests/scripted.c), whose
// known answers hold reasoning and a tool call: the reasoning is shown
// folded, the tool call as a tool call (not as text), the Markdown of the
// plain answer rendered; model text is never markup (a user message full of
// tags stays text). The browser: browser.mjs.
import { assert, run, test, BASE, SCRIPT, USER_Q, WEATHER_TOOL_OPENAI } from "./common.mjs";
import { S, requests, evaluate, until, loaded, setField, click, closeBrowser } from "./browser.mjs";

const lastAssistant = `[...document.querySelectorAll("#messages .msg.assistant")].pop()`;
const answered = `!document.querySelector("#send").disabled && ${lastAssistant}?.querySelector(".meta")`;

test("reasoning folded, the tool call shown as such", async () => {
    const wait = await loaded();
    await S("Page.navigate", { url: BASE + "/" });
    await wait();
    await click("#settings summary");
    await setField("#set-tools", JSON.stringify([WEATHER_TOOL_OPENAI]));
    await setField("#chat-input", USER_Q);
    await click("#send");
    await until(answered, "the answer");
    const r = await evaluate(`(() => { const m = ${lastAssistant}, d = m.querySelector("details.reasoning");
        return { open: d && d.open, reasoning: d && d.querySelector(".r").textContent,
                 tool: [...m.querySelectorAll(".tool")].map(t => t.textContent), body: m.querySelector(".body").textContent }; })()`);
    assert.equal(r.reasoning, SCRIPT.think);
    assert.equal(r.open, false, "the reasoning is folded");
    assert.equal(r.tool.length, 1, JSON.stringify(r));
    assert.match(r.tool[0], /Tool call: get_weather/);
    assert.deepEqual(JSON.parse(r.tool[0].replace(/^Tool call: get_weather/, "")), SCRIPT.toolArgs);
    assert.ok(!r.body.includes("<tool_call>"), `the markup is not shown as text: ${r.body}`);
});

test("without tools the markup is text; HTML in messages stays text", async () => {
    await setField("#set-tools", "");
    await setField("#chat-input", "<img src=x onerror=\"window.__pwned=1\"> **bold** " + USER_Q);
    await click("#send");
    await until(answered, "the answer");
    const r = await evaluate(`(() => { const m = ${lastAssistant};
        return { body: m.querySelector(".body").textContent, imgs: document.querySelectorAll("#messages img").length,
                 pwned: window.__pwned || 0 }; })()`);
    assert.equal(r.imgs, 0, "a tag in a message became an element");
    assert.equal(r.pwned, 0);
    assert.ok(r.body.includes("<tool_call>"), r.body); // the raw markup, escaped, as text
});

test("Markdown: code blocks, emphasis, lists; links only http(s)", async () => {
    const html = await evaluate(`(() => { const a = document.createElement("div");
        a.innerHTML = markdown("# T\\n\\nSome **bold** and \`x<y\`\\n\\n\`\`\`python\\nif a < b:\\n    pass\\n\`\`\`\\n- one\\n- two\\n" +
            "[ok](https://example.org) [bad](javascript:alert(1)) <script>x</script>");
        return { pre: a.querySelector("pre code.lang-python")?.textContent, strong: a.querySelector("strong")?.textContent,
                 code: a.querySelector("p code")?.textContent, lis: a.querySelectorAll("li").length,
                 links: [...a.querySelectorAll("a")].map(l => l.getAttribute("href")), scripts: a.querySelectorAll("script").length,
                 h: a.querySelector("h3")?.textContent }; })()`);
    assert.equal(html.pre, "if a < b:\n    pass");
    assert.equal(html.strong, "bold");
    assert.equal(html.code, "x<y");
    assert.equal(html.lis, 2);
    assert.deepEqual(html.links, ["https://example.org"]);
    assert.equal(html.scripts, 0);
    assert.equal(html.h, "T");
});

test("no request left the machine", async () => {
    const origin = new URL(BASE).origin;
    const outside = requests.filter((u) => !u.startsWith(origin + "/") && !u.startsWith("data:") && u !== "about:blank");
    assert.deepEqual(outside, [], `requests outside ${origin}`);
});

test("the browser closes", closeBrowser);

await run();
