// dspark's web interface: chat, the race of plain against speculative
// decoding, and the engine's view. Plain JavaScript, no dependencies, no
// network beyond this server. Model output is only ever shown as text or
// through markdown(), which escapes it before adding any tag.
"use strict";

const $ = (s, r = document) => r.querySelector(s);
function el(tag, props = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}
const fmt = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "–");

// ---- API: fetch with the key, server-sent events over fetch ----

let apiKey = localStorage.getItem("dspark.key") || "";
let keyWait = null;
function askKey() {
  if (keyWait) return keyWait;
  const dlg = $("#key-dialog");
  keyWait = new Promise((res) => {
    dlg.addEventListener("close", () => {
      apiKey = $("#key-input").value.trim();
      localStorage.setItem("dspark.key", apiKey);
      keyWait = null;
      res();
    }, { once: true });
  });
  dlg.showModal();
  return keyWait;
}
async function call(path, opts = {}) {
  for (;;) {
    const h = { ...(opts.body ? { "Content-Type": "application/json" } : {}) };
    if (apiKey) h.Authorization = "Bearer " + apiKey;
    const r = await fetch(path, { ...opts, headers: h });
    if (r.status !== 401) return r;
    await askKey();
  }
}
// Reads an event stream, calling onFrame({event, data}) per frame.
async function readSSE(resp, onFrame) {
  const rd = resp.body.getReader(), dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await rd.read();
    if (done) break;
    buf += dec.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event = null, data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onFrame({ event, data: data.join("\n") });
    }
  }
}
async function errorText(r) {
  try { const j = await r.json(); return j.error?.message || JSON.stringify(j); } catch { return `HTTP ${r.status}`; }
}

// ---- Markdown (escape first, then a few tags) ----

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (s) => s.replace(/[&<>"']/g, (c) => ESC[c]);
function inline(s) {
  return s.split(/(`[^`\n]+`)/).map((p) => {
    if (p.length > 2 && p[0] === "`" && p.endsWith("`")) return "<code>" + esc(p.slice(1, -1)) + "</code>";
    return esc(p)
      .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>")
      .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" rel="noopener noreferrer" target="_blank">$1</a>');
  }).join("");
}
const LIST = /^\s*([-*+]|\d+[.)])\s+/;
function markdown(src) {
  const lines = src.split("\n");
  let html = "", para = [], i = 0;
  const flush = () => { if (para.length) html += "<p>" + para.map(inline).join("<br>") + "</p>"; para = []; };
  while (i < lines.length) {
    const l = lines[i];
    const fence = l.match(/^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/);
    if (fence) {
      flush();
      const code = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) code.push(lines[i]);
      i++;
      const lang = fence[2] ? ` class="lang-${esc(fence[2])}"` : "";
      html += `<pre><code${lang}>${esc(code.join("\n"))}</code></pre>`;
      continue;
    }
    const h = l.match(/^(#{1,6})\s+(.*)/);
    if (h) { flush(); const n = Math.min(h[1].length + 2, 6); html += `<h${n}>${inline(h[2])}</h${n}>`; i++; continue; }
    if (LIST.test(l)) {
      flush();
      const tag = /^\s*\d/.test(l) ? "ol" : "ul", items = [];
      while (i < lines.length && LIST.test(lines[i])) items.push(lines[i++].replace(LIST, ""));
      html += `<${tag}>${items.map((x) => "<li>" + inline(x) + "</li>").join("")}</${tag}>`;
      continue;
    }
    if (/^>\s?/.test(l)) {
      flush();
      const q = [];
      while (i < lines.length && /^>\s?/.test(lines[i])) q.push(lines[i++].replace(/^>\s?/, ""));
      html += `<blockquote>${q.map(inline).join("<br>")}</blockquote>`;
      continue;
    }
    if (!l.trim()) flush(); else para.push(l);
    i++;
  }
  flush();
  return html;
}

// ---- server state: /health (open without the key) ----

let health = null;
async function pollHealth() {
  try {
    const r = await fetch("/health");
    health = await r.json();
    const h = health;
    const cap = h.max_draft == null ? "" : ` · draft cap ${h.max_draft}`;
    $("#model-line").textContent = `model ${h.model} · mode ${h.mode}${h.drafter ? " (drafter " + h.drafter.split("/").pop() + ")" : ""}` +
      `${cap} · context ${h.context_window}` + (h.busy ? " · generating" : "") + (h.queue_depth ? ` · ${h.queue_depth} queued` : "");
    $("#lane-spec-h").textContent = h.mode === "baseline" ? "Speculative (the server runs baseline)" : `Speculative (${h.mode})`;
    const w = $("#warnings");
    w.replaceChildren(...(h.warnings || []).map((x) => el("p", { text: `⚠ ${x.message}` })));
    const mem = h.memory || {};
    engineCard("Resident memory", mem.rss_bytes ? fmt(mem.rss_bytes / 1048576, 0) + " MiB" : "–");
    engineCard("Available memory", mem.available_bytes ? fmt(mem.available_bytes / 1048576, 0) + " MiB" : "–");
  } catch {
    $("#model-line").textContent = "the server does not answer";
  }
}

// ---- tabs ----

const TABS = ["chat", "race", "engine"];
function showTab(name, focus) {
  for (const t of TABS) {
    const b = $("#tab-" + t), on = t === name;
    b.setAttribute("aria-selected", on);
    b.tabIndex = on ? 0 : -1;
    $("#view-" + t).hidden = !on;
    if (on && focus) b.focus();
  }
  if (name === "engine") startEvents();
  location.hash = name === "chat" ? "" : name;
}
for (const t of TABS) {
  $("#tab-" + t).addEventListener("click", () => showTab(t));
  $("#tab-" + t).addEventListener("keydown", (e) => {
    const k = TABS.indexOf(t), d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    if (d) showTab(TABS[(k + d + TABS.length) % TABS.length], true);
  });
}

// ---- chat ----

const store = {
  load() { try { return JSON.parse(localStorage.getItem("dspark.convs")) || []; } catch { return []; } },
  save() { localStorage.setItem("dspark.convs", JSON.stringify(convs)); },
};
let convs = store.load();
let cur = localStorage.getItem("dspark.current") || null;
let ctrl = null; // the running generation's AbortController
const SETTINGS = ["system", "temp", "top-p", "top-k", "seed", "max", "spec", "tools"];

function conv() {
  let c = convs.find((x) => x.id === cur);
  if (!c) {
    c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [], t: Date.now() };
    convs.unshift(c);
    cur = c.id;
  }
  return c;
}
function selectConv(id) {
  if (ctrl) return;
  cur = id;
  localStorage.setItem("dspark.current", cur);
  const c = conv();
  $("#set-system").value = c.system || "";
  renderConvs();
  renderMessages();
}
function renderConvs() {
  $("#conv-list").replaceChildren(...convs.map((c) => {
    const li = el("li", { "aria-current": c.id === cur ? "true" : "false" },
      el("button", { class: "open", text: c.title, title: c.title, onclick: () => selectConv(c.id) }),
      el("button", { class: "del", text: "✕", "aria-label": `Delete “${c.title}”`, onclick: () => {
        if (ctrl) return;
        convs = convs.filter((x) => x.id !== c.id);
        if (cur === c.id) cur = convs[0]?.id || null;
        store.save();
        selectConv(cur);
      } }));
    return li;
  }));
}
function telemetryLine(x) {
  if (!x) return "";
  const hist = x.accept_hist && x.accept_hist.length > 1 ? ` · accepted per round ${x.accept_hist.map((n, k) => `${k}:${n}`).join(" ")}` : "";
  return `${x.completion_tokens} tokens · ${fmt(x.tokens_per_sec)} tok/s · ${fmt(x.tokens_per_round, 2)} tokens/round · ` +
    `mode ${x.mode}${x.cached_tokens ? ` · ${x.cached_tokens} prompt tokens cached` : ""}${hist}`;
}
function messageNode(m, idx) {
  const who = el("div", { class: "who" }, el("strong", { text: m.role === "user" ? "You" : "Assistant" }));
  if (m.role === "user") who.append(el("button", { text: "Edit", "aria-label": "Edit this message", onclick: () => editAt(idx) }));
  const body = el("div", { class: "body" });
  const li = el("li", { class: "msg " + m.role }, who);
  if (m.reasoning) {
    const d = el("details", { class: "reasoning" }, el("summary", { text: "Reasoning" }), el("div", { class: "r" }));
    d.lastChild.textContent = m.reasoning;
    li.append(d);
  }
  li.append(body);
  if (m.role === "assistant") body.innerHTML = markdown(m.content || ""); // escaped by markdown()
  else body.textContent = m.content;
  for (const t of m.tool_calls || [])
    li.append(el("div", { class: "tool" }, el("strong", { text: "Tool call: " + (t.function?.name || "?") }),
      el("pre", { text: t.function?.arguments || "{}" })));
  const meta = [m.error ? "error: " + m.error : "", m.stopped ? "stopped" : "", telemetryLine(m.x)].filter(Boolean).join(" · ");
  if (meta) li.append(el("p", { class: "meta", text: meta }));
  return li;
}
function renderMessages() {
  const c = conv();
  $("#messages").replaceChildren(...c.messages.map(messageNode));
  const last = c.messages[c.messages.length - 1];
  $("#regen").disabled = !!ctrl || !c.messages.some((m) => m.role === "user");
  $("#messages").scrollTop = 1e9;
  return last;
}
let paintQueued = false;
function repaintLast() {
  if (paintQueued) return;
  paintQueued = true;
  requestAnimationFrame(() => {
    paintQueued = false;
    const c = conv(), list = $("#messages");
    const n = c.messages.length - 1;
    if (list.lastChild) list.lastChild.replaceWith(messageNode(c.messages[n], n));
    list.scrollTop = 1e9;
  });
}
function readSettings() {
  const v = (id) => $("#set-" + id).value;
  const s = { temperature: Number(v("temp")), max_tokens: Number(v("max")) || 256 };
  if (v("top-p") !== "" && Number(v("top-p")) < 1) s.top_p = Number(v("top-p"));
  if (Number(v("top-k")) > 0) s.top_k = Number(v("top-k"));
  if (v("seed") !== "") s.seed = Number(v("seed"));
  if (v("spec") === "off") s.x_dspark = { speculative: false };
  if (v("tools").trim()) {
    let t;
    try { t = JSON.parse(v("tools")); } catch (e) { throw new Error("Tools: not JSON: " + e.message); }
    if (!Array.isArray(t)) throw new Error("Tools: a JSON array of tools is expected");
    if (t.length) s.tools = t;
  }
  return s;
}
async function generate() {
  const c = conv();
  c.system = $("#set-system").value;
  const msgs = [];
  if (c.system.trim()) msgs.push({ role: "system", content: c.system });
  for (const m of c.messages) {
    const o = { role: m.role, content: m.content || "" };
    if (m.tool_calls) o.tool_calls = m.tool_calls;
    msgs.push(o);
  }
  const a = { role: "assistant", content: "", reasoning: "" };
  c.messages.push(a);
  renderMessages();
  ctrl = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  try {
    const body = { messages: msgs, stream: true, ...readSettings() };
    const r = await call("/v1/chat/completions", { method: "POST", body: JSON.stringify(body), signal: ctrl.signal });
    if (!r.ok) a.error = await errorText(r);
    else await readSSE(r, (f) => {
      if (f.data === "[DONE]") return;
      const j = JSON.parse(f.data), ch = j.choices?.[0], d = ch?.delta || {};
      if (j.error) a.error = j.error.message;
      if (d.content) a.content += d.content;
      if (d.reasoning_content) a.reasoning += d.reasoning_content;
      for (const t of d.tool_calls || []) {
        a.tool_calls ??= [];
        const k = t.index ?? a.tool_calls.length;
        const have = a.tool_calls[k] ??= { id: t.id, type: "function", function: { name: "", arguments: "" } };
        if (t.function?.name) have.function.name += t.function.name;
        if (t.function?.arguments) have.function.arguments += t.function.arguments;
      }
      if (ch?.finish_reason) a.finish = ch.finish_reason;
      if (j.x_dspark) a.x = j.x_dspark;
      $("#chat-stats").textContent = `${a.content.length + a.reasoning.length} characters in ${fmt((performance.now() - t0) / 1000)} s`;
      repaintLast();
    });
  } catch (e) {
    if (e.name === "AbortError") a.stopped = true; else a.error = String(e.message || e);
  }
  if (!a.reasoning) delete a.reasoning;
  ctrl = null;
  setBusy(false);
  $("#chat-stats").textContent = a.x ? telemetryLine(a.x) : a.stopped ? "stopped" : "";
  if (c.title === "New chat") c.title = (c.messages.find((m) => m.role === "user")?.content || "chat").slice(0, 40);
  c.t = Date.now();
  store.save();
  renderConvs();
  renderMessages();
}
function setBusy(b) {
  $("#send").disabled = b;
  $("#stop").disabled = !b;
  $("#regen").disabled = b;
}
function editAt(idx) {
  if (ctrl) return;
  const c = conv();
  $("#chat-input").value = c.messages[idx].content;
  c.messages.splice(idx);
  store.save();
  renderMessages();
  $("#chat-input").focus();
}
$("#chat-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const t = $("#chat-input").value;
  if (!t.trim() || ctrl) return;
  $("#chat-input").value = "";
  const c = conv();
  c.messages.push({ role: "user", content: t });
  store.save();
  renderConvs();
  generate();
});
$("#chat-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("#chat-form").requestSubmit(); }
});
$("#stop").addEventListener("click", () => ctrl?.abort());
$("#regen").addEventListener("click", () => {
  const c = conv();
  while (c.messages.length && c.messages[c.messages.length - 1].role !== "user") c.messages.pop();
  if (c.messages.length) generate();
});
$("#new-chat").addEventListener("click", () => {
  if (ctrl) return;
  cur = null;
  conv();
  store.save();
  selectConv(cur);
  $("#chat-input").focus();
});
for (const id of SETTINGS) {
  const e = $("#set-" + id);
  const saved = JSON.parse(localStorage.getItem("dspark.settings") || "{}");
  if (id !== "system" && saved[id] !== undefined) e.value = saved[id];
  e.addEventListener("change", () => {
    const s = {};
    for (const k of SETTINGS) if (k !== "system") s[k] = $("#set-" + k).value;
    localStorage.setItem("dspark.settings", JSON.stringify(s));
    if (id === "system") { conv().system = e.value; store.save(); }
  });
}

// ---- /events: one reader for the race and the engine view ----

const listeners = new Set();
let eventsOn = false, lastReq = 0, replayDone = null;
function startEvents() {
  if (eventsOn) return replayDone;
  eventsOn = true;
  replayDone = new Promise((res) => {
    const settle = setTimeout(res, 400); // the ring's replay arrives at once
    (async () => {
      for (;;) {
        try {
          const r = await call("/events");
          await readSSE(r, (f) => {
            let j;
            try { j = JSON.parse(f.data); } catch { return; }
            if (f.event === "stats") return;
            j.at = performance.now();
            for (const l of listeners) l(j);
          });
        } catch { /* reconnect below */ }
        clearTimeout(settle);
        res();
        await new Promise((r) => setTimeout(r, 2000));
      }
    })();
  });
  listeners.add((j) => { lastReq = Math.max(lastReq, j.req || 0); });
  return replayDone;
}

// ---- the race ----

function figs(lane, pairs) {
  $("#lane-" + lane + " .figs").replaceChildren(...pairs.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: v }))));
}
function hist(h) {
  const box = $("#lane-spec .hist"), max = Math.max(1, ...h);
  box.replaceChildren(...h.map((n, k) => {
    const b = el("div", { class: "bar", title: `${n} rounds accepted ${k} drafts` }, el("span", { text: String(k) }));
    b.style.height = (100 * n) / max + "%";
    return b;
  }));
  box.setAttribute("aria-label", "Rounds by drafts accepted: " + h.map((n, k) => `${k} accepted: ${n}`).join(", "));
}
function laneFigs(lane, s) {
  // each side's clock runs from its own first token (a queued side waits unclocked)
  const now = s.end ?? performance.now(), secs = s.t0 ? (now - s.t0) / 1000 : 0;
  const live = s.rounds ? s.committed / s.rounds : NaN;
  const x = s.x;
  figs(lane, [
    ["time", s.t0 ? fmt(secs, 2) + " s" : s.end ? "–" : "queued"],
    ["tokens", x ? String(x.completion_tokens) : String(s.committed + (s.rounds ? 1 : 0))],
    ["tokens/s", fmt(x ? x.tokens_per_sec : s.roundSecs ? s.committed / s.roundSecs : NaN)],
    ["tokens/round", fmt(x ? x.tokens_per_round : live, 2)],
    ["rounds", String(x ? x.rounds : s.rounds)],
    ...(lane === "spec" ? [["acceptance", x ? fmt(100 * x.draft_acceptance, 0) + "%" : s.drafted ? fmt(100 * s.accepted / s.drafted, 0) + "%" : "–"],
      ["draft cap", String(x ? x.cap : s.cap ?? "–")]] : []),
  ]);
  if (lane === "spec") hist(x ? x.accept_hist : s.hist);
}
let race = null;
// Runs one side; started() is called once the server has queued its request.
async function runLane(lane, base, speculative, started) {
  const s = { text: "", chunks: [], committed: 0, rounds: 0, drafted: 0, accepted: 0, roundSecs: 0, hist: [], req: 0,
    after: lastReq }; // this lane's request comes after every request seen so far
  race[lane] = s;
  const out = $("#lane-" + lane + " .out");
  out.textContent = "";
  const onEv = (j) => {
    if (j.type || !j.req || j.req <= s.after || (s.req && j.req !== s.req) || s.end) return;
    const plainEv = j.mode === "baseline";
    if (speculative ? plainEv && health?.mode !== "baseline" : !plainEv) return;
    if (speculative && race.plain?.req === j.req) return;
    if (!s.req) s.req = j.req;
    s.rounds++;
    s.committed += j.committed;
    s.drafted += j.drafted;
    s.accepted += j.accepted;
    s.roundSecs += j.ms / 1000;
    s.cap = j.cap;
    while (s.hist.length <= j.accepted) s.hist.push(0);
    s.hist[j.accepted]++;
  };
  listeners.add(onEv);
  const tick = setInterval(() => laneFigs(lane, s), 100);
  const body = { ...base, stream: true, x_dspark: { speculative } };
  try {
    const r = await call("/v1/chat/completions", { method: "POST", body: JSON.stringify(body) });
    started?.();
    if (!r.ok) throw new Error(await errorText(r));
    await readSSE(r, (f) => {
      if (f.data === "[DONE]") return;
      const j = JSON.parse(f.data), d = j.choices?.[0]?.delta;
      const piece = (d?.reasoning_content || "") + (d?.content || "");
      if (piece) {
        s.t0 ??= performance.now();
        s.text += piece;
        s.chunks.push([performance.now() - s.t0, piece]);
        out.textContent = s.text;
        out.scrollTop = 1e9;
      }
      if (j.x_dspark) s.x = j.x_dspark;
    });
  } finally {
    started?.();
    s.end = performance.now();
    s.t0 ??= s.end;
    clearInterval(tick);
    listeners.delete(onEv);
  }
  laneFigs(lane, s);
  return s;
}
function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
$("#race-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const btn = $("#race-run"), v = $("#verdict");
  btn.disabled = true;
  $("#race-replay").disabled = true;
  v.className = "verdict";
  v.textContent = "Racing…";
  const temp = Number($("#race-temp").value) || 0, seed = $("#race-seed").value;
  const base = { messages: [{ role: "user", content: $("#race-prompt").value }], max_tokens: Number($("#race-max").value) || 128,
    temperature: temp };
  if (seed !== "") base.seed = Number(seed);
  race = {};
  try {
    await startEvents();
    // both at once, plain first: a server that generates one request at a
    // time queues the speculative one behind it; one that batches runs both
    let queued;
    const first = new Promise((r) => { queued = r; });
    const pp = runLane("plain", base, false, queued);
    await first;
    const [p, s] = await Promise.all([pp, runLane("spec", base, true)]);
    const same = p.text === s.text;
    const speed = p.x && s.x && p.x.tokens_per_sec > 0 ? s.x.tokens_per_sec / p.x.tokens_per_sec : NaN;
    const wall = (p.end - p.t0) / (s.end - s.t0);
    const tail = ` Speculative decoding ran at ${fmt(speed, 2)}× the plain decode rate (${fmt(s.x?.tokens_per_sec)} vs ${fmt(p.x?.tokens_per_sec)} tokens/s), ${fmt(wall, 2)}× in wall time.`;
    if (temp === 0) {
      v.textContent = same ? `Identical output: ${p.text.length} characters, ${p.x?.completion_tokens} tokens, the same in both runs.` + tail
        : `Outputs differ from character ${firstDiff(p.text, s.text)}: greedy decoding should be identical — please report this.`;
      v.className = "verdict " + (same ? "ok" : "bad");
    } else {
      v.textContent = (same ? `Identical output with seed ${seed || "(random)"} at temperature ${temp}.`
        : `Different text at temperature ${temp}: speculative sampling keeps the model's distribution, but a seed does not fix the same draws in both modes.`) + tail;
      v.className = "verdict " + (same ? "ok" : "");
    }
    v.dataset.identical = same ? "1" : "0";
    $("#race-replay").disabled = false;
  } catch (err) {
    v.textContent = "The race failed: " + (err.message || err);
    v.className = "verdict bad";
  }
  btn.disabled = false;
});
$("#race-replay").addEventListener("click", () => {
  if (!race?.plain || !race?.spec) return;
  const lanes = ["plain", "spec"].map((k) => ({ k, s: race[k], out: $("#lane-" + k + " .out"), i: 0, text: "" }));
  for (const l of lanes) l.out.textContent = "";
  const t0 = performance.now();
  const step = () => {
    const t = performance.now() - t0;
    let more = false;
    for (const l of lanes) {
      while (l.i < l.s.chunks.length && l.s.chunks[l.i][0] <= t) l.text += l.s.chunks[l.i++][1];
      l.out.textContent = l.text;
      more ||= l.i < l.s.chunks.length;
    }
    if (more) requestAnimationFrame(step);
  };
  requestAnimationFrame(step);
});

// ---- the engine's view ----

const series = []; // {at, tps, tpr, cap}
const T0 = performance.now();
function engineCard(k, v) {
  const box = $("#engine-cards");
  let c = [...box.children].find((x) => x.dataset.k === k);
  if (!c) { c = el("div", { class: "card" }, el("div", { class: "k", text: k }), el("div", { class: "v" })); c.dataset.k = k; box.append(c); }
  c.lastChild.textContent = v;
}
listeners.add((j) => {
  if (j.type === "prefill") {
    $("#prefill-bar").max = j.total || 1;
    $("#prefill-bar").value = j.processed;
    $("#prefill-text").textContent = `${j.processed} / ${j.total} tokens${j.done ? " (done)" : ""} · request ${j.req}`;
    return;
  }
  if (j.committed === undefined) return;
  // tokens/s over the request's last 8 rounds (one round alone is too noisy to read)
  const win = series.filter((p) => p.req === j.req).slice(-7);
  const ms = win.reduce((a, p) => a + p.ms, j.ms), tok = win.reduce((a, p) => a + p.tpr, j.committed);
  series.push({ at: j.at, req: j.req, ms: j.ms, tps: ms > 0 ? (1000 * tok) / ms : 0, tpr: j.committed, cap: j.cap });
  if (series.length > 2000) series.splice(0, series.length - 2000);
  const log = $("#round-log");
  log.prepend(el("li", { text: `req ${j.req} · ${j.mode} · round ${j.i} · drafted ${j.drafted} · accepted ${j.accepted} · committed ${j.committed} · cap ${j.cap} · ${fmt(j.ms, 2)} ms` }));
  while (log.children.length > 50) log.lastChild.remove();
  plotQueued ||= requestAnimationFrame(drawPlots);
});
let plotQueued = 0;
function plot(canvas, lines, yLabel) {
  const dpr = window.devicePixelRatio || 1, w = canvas.clientWidth || 600, h = canvas.clientHeight || 160;
  canvas.width = w * dpr;
  canvas.height = h * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  const css = getComputedStyle(document.documentElement);
  const now = performance.now(), span = 60000, pad = 30;
  let ymax = 1;
  for (const l of lines) for (const p of l.pts) if (p.at > now - span) ymax = Math.max(ymax, p.y);
  ymax *= 1.1;
  g.strokeStyle = css.getPropertyValue("--line");
  g.fillStyle = css.getPropertyValue("--muted");
  g.font = "11px system-ui";
  g.beginPath(); g.moveTo(pad, 4); g.lineTo(pad, h - 16); g.lineTo(w - 4, h - 16); g.stroke();
  g.fillText(fmt(ymax, ymax < 10 ? 1 : 0), 2, 12);
  g.fillText("0", 2, h - 16);
  g.fillText("last 60 s", w - 56, h - 3);
  g.fillText(yLabel, pad + 4, 12);
  const X = (at) => pad + ((w - pad - 4) * (at - (now - span))) / span, Y = (y) => h - 16 - ((h - 24) * y) / ymax;
  for (const l of lines) {
    g.strokeStyle = css.getPropertyValue(l.color);
    g.setLineDash(l.dash ? [4, 3] : []);
    g.lineWidth = 1.5;
    g.beginPath();
    let first = true;
    for (const p of l.pts) {
      if (p.at < now - span) continue;
      if (first) g.moveTo(X(p.at), Y(p.y)); else g.lineTo(X(p.at), Y(p.y));
      first = false;
    }
    g.stroke();
  }
  g.setLineDash([]);
}
function drawPlots() {
  plotQueued = 0;
  if ($("#view-engine").hidden) return;
  // tokens/s: each second's committed tokens over its rounds' time
  plot($("#plot-tps"), [{ color: "--spec", pts: series.map((p) => ({ at: p.at, y: p.tps })) }], "tokens/s");
  plot($("#plot-tpr"), [{ color: "--spec", pts: series.map((p) => ({ at: p.at, y: p.tpr })) },
    { color: "--plain", dash: true, pts: series.map((p) => ({ at: p.at, y: p.cap })) }], "tokens/round");
}
function promValues(text) {
  const v = {};
  for (const line of text.split("\n")) {
    const m = line.match(/^dspark_(\w+)(?:\{[^}]*\})? ([-+0-9.eE]+)$/);
    if (m) v[m[1]] = Number(m[2]);
  }
  return v;
}
async function pollMetrics() {
  if ($("#view-engine").hidden) return;
  try {
    const r = await call("/metrics");
    const m = promValues(await r.text());
    engineCard("Requests", String(m.requests_total ?? "–"));
    engineCard("Generated tokens", String(m.completion_tokens_total ?? "–"));
    engineCard("Decode tokens/s", fmt(m.decode_tokens_per_second));
    engineCard("Prefill tokens/s", fmt(m.prefill_tokens_per_second, 0));
    engineCard("Tokens per round", fmt(m.tokens_per_round, 2));
    engineCard("Draft acceptance", m.drafted_tokens_total ? fmt((100 * m.accepted_tokens_total) / m.drafted_tokens_total, 0) + "%" : "–");
    engineCard("Draft cap", String(m.draft_cap ?? "–"));
    engineCard("Prefix cache hits", String(m.prefix_cache_hits_total ?? "–"));
    engineCard("Prompt tokens cached", `${m.prompt_tokens_cached_total ?? 0} of ${m.prompt_tokens_total ?? 0}`);
    engineCard("Queue", `${m.queue_depth ?? 0}${m.busy ? " · busy" : " · idle"}`);
    drawPlots();
  } catch { /* shown by /health */ }
}

// ---- start ----

selectConv(cur || conv().id);
pollHealth();
setInterval(pollHealth, 5000);
setInterval(pollMetrics, 2000);
const start = location.hash.slice(1);
showTab(TABS.includes(start) ? start : "chat");
if (start === "engine") pollMetrics();
$("#tab-engine").addEventListener("click", pollMetrics);
