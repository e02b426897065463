// Other families through `dspark serve`: a random checkpoint of a family
// (tests/test_server.c: server_gemma3, a gemma3 with Gemma 3's own
// tokenizer and chat template; server_qwen3_moe, a qwen3_moe with Qwen3's)
// whose answers are whatever the random weights give, so the checks are
// that every route agrees: the rendered prompt's token count
// ($DSPARK_FAMILY_PROMPT_TOKENS), a chat answer whole, streamed and sent
// beside another request, the same conversation through the Anthropic API,
// and a long prompt (past gemma3's sliding window) answered the same from a
// cold cache and from the one its first request left.
import { assert, openai, anthropic, run, test, postJSON, MODEL_ID } from "./common.mjs";

const client = openai();
const model = MODEL_ID || "m";
const user = [{ role: "user", content: "Hi there" }];
const PROMPT_TOKENS = Number(process.env.DSPARK_FAMILY_PROMPT_TOKENS);

let chatText = null;

test("chat: the template's tokens, an answer whole, streamed and beside another alike", async () => {
    const r = await client.chat.completions.create({ model, messages: user, max_tokens: 6, temperature: 0 });
    // gemma3: <bos> <start_of_turn> user \n Hi ▁there <end_of_turn> \n <start_of_turn> model \n (11);
    // qwen3: <|im_start|> user \n Hi Ġthere <|im_end|> \n <|im_start|> assistant \n (10)
    assert.equal(r.usage.prompt_tokens, PROMPT_TOKENS);
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
    const [x, y] = await Promise.all([
        client.chat.completions.create({ model, messages: user, max_tokens: 6, temperature: 0 }),
        client.chat.completions.create({ model, messages: [{ role: "user", content: "Another question" }],
            max_tokens: 6, temperature: 0 }),
    ]);
    assert.equal(x.choices[0].message.content ?? "", chatText);
    assert.ok(y.usage.completion_tokens >= 1);
});

test("the Anthropic API renders the same prompt and answers the same", async () => {
    const a = await anthropic().messages.create({ model, max_tokens: 6, messages: user, temperature: 0 });
    // (Anthropic counts the prompt's cached positions apart: the chat above left them)
    assert.equal(a.usage.input_tokens + (a.usage.cache_read_input_tokens ?? 0), PROMPT_TOKENS, JSON.stringify(a.usage));
    const text = a.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    assert.equal(text, chatText);
});

test("a long prompt: cold and from the cache alike", async () => {
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
