// Another family through `dspark serve`: a random gemma3 of Gemma 3's
// vocabulary with Gemma 3's own tokenizer and chat template
// (tests/test_server.c server_gemma3). Its answers are whatever the random
// weights give, so the checks are that every route agrees: the rendered
// prompt's token count, a chat answer whole and streamed, the same
// conversation through the Anthropic API, and a prompt far past the
// sliding window answered the same from a cold cache and from the one its
// first request left.
import { assert, openai, anthropic, run, test, postJSON, MODEL_ID } from "./common.mjs";

const client = openai();
const model = MODEL_ID || "m";
const user = [{ role: "user", content: "Hi there" }];

let chatText = null;

test("chat: the template's 11 tokens, whole and streamed alike", async () => {
    const r = await client.chat.completions.create({ model, messages: user, max_tokens: 6, temperature: 0 });
    // <bos> <start_of_turn> user \n Hi ▁there <end_of_turn> \n <start_of_turn> model \n
    assert.equal(r.usage.prompt_tokens, 11);
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 6, JSON.stringify(r.usage));
    assert.ok(["length", "stop"].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
    chatText = r.choices[0].message.content ?? "";
    let streamed = "", finish = null;
    for await (const c of await client.chat.completions.create({ model, messages: user, max_tokens: 6, temperature: 0,
        stream: true })) {
        streamed += c.choices?.[0]?.delta?.content ?? "";
        finish = c.choices?.[0]?.finish_reason ?? finish;
    }
    assert.equal(streamed, chatText);
    assert.equal(finish, r.choices[0].finish_reason);
});

test("the Anthropic API renders the same prompt and answers the same", async () => {
    const a = await anthropic().messages.create({ model, max_tokens: 6, messages: user, temperature: 0 });
    // (Anthropic counts the prompt's cached positions apart: the chat above left them)
    assert.equal(a.usage.input_tokens + (a.usage.cache_read_input_tokens ?? 0), 11, JSON.stringify(a.usage));
    const text = a.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    assert.equal(text, chatText);
});

test("a prompt far past the sliding window: cold and from the cache alike", async () => {
    const words = [];
    for (let i = 0; i < 150; i++) words.push(`w${i % 37}`);
    const prompt = words.join(" ");
    const a = await postJSON("/v1/completions", { model, prompt, max_tokens: 5, temperature: 0, ignore_eos: true });
    assert.equal(a.status, 200, a.text);
    assert.ok(a.json.usage.prompt_tokens > 100, JSON.stringify(a.json.usage));
    const b = await postJSON("/v1/completions", { model, prompt, max_tokens: 5, temperature: 0, ignore_eos: true });
    assert.equal(b.status, 200, b.text);
    assert.equal(b.json.choices[0].text, a.json.choices[0].text);
    assert.equal(b.json.usage.completion_tokens, 5);
    assert.ok((b.json.usage.prompt_tokens_details?.cached_tokens ?? 0) > 0,
        `the second request reused no cached positions: ${JSON.stringify(b.json.usage)}`);
});

await run();
