/* A scripted Qwen3 checkpoint: a real-format model (config.json, bf16
 * model.safetensors, the real Qwen3 tokenizer and chat template) whose
 * greedy output is known text, so the server tests can check exact answers
 * (thinking, tool calls, plain text, raw completions) through every API.
 *
 * It is a "bigram machine". One decoder layer whose o_proj and down_proj
 * are zero adds nothing to the residual stream, so the final hidden state
 * at a position is the current token's embedding. Each token of a script
 * (a "state") gets a one-hot embedding row e_s; the final RMSNorm turns it
 * into sqrt(H) e_s, and the untied lm_head has weight SC_LOGIT_W at column
 * s of the successor's row, so the successor wins by a logit of
 * sqrt(H) * SC_LOGIT_W (64 here; every other logit is 0). Tokens outside
 * the scripts embed to zero, give all-zero logits and so continue with id 0
 * ("!"), whose successor is <|im_end|>. Greedy decoding from the last
 * prompt token therefore replays a fixed chain, whatever came before it:
 *
 *   "\n" (end of the thinking-on generation prompt "<|im_start|>assistant\n")
 *       -> SC_THINK_TOOL, then <|im_end|>
 *   "\n\n" (end of the thinking-off prompt "...<think>\n\n</think>\n\n")
 *       -> SC_HELLO, then <|im_end|>
 *   " time" (a raw prompt such as "Once upon a time")
 *       -> SC_FOX, then <|endoftext|>
 *
 * The generator derives the first two triggers by rendering the copied chat
 * template and checks that every token has one successor (no token may
 * appear twice across the scripts, nor be a trigger), so a change of
 * tokenizer or template fails loudly instead of producing another text. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "text/chat_template.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "spec/seq.h"
#include "test.h"
#include "text/tokenizer.h"
#include "base/util.h"

#define SC_H 64          /* hidden size: at most SC_H states */
#define SC_I 64          /* MLP width (its weights are zero) */
#define SC_NH 2          /* attention heads */
#define SC_HD 32         /* head_dim */
#define SC_V 151936      /* Qwen3's vocab_size (embedding rows) */
#define SC_LOGIT_W 8.0f  /* lm_head weight of a successor (exact in bf16) */

#define SC_THINK_TOOL                                                                                  \
    "<think>Checking weather...</think><tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\": " \
    "\"Paris\"}}</tool_call>"
#define SC_HELLO "Hello from dspark!"
#define SC_FOX "There was a fox."
#define SC_RAW_PROMPT "Once upon a time"
#define SC_USER "What is the weather in Paris?"

typedef struct {
    const char *name, *text, *eos;
    int trigger;
    int ids[64], n; /* trigger, the text's ids, eos */
} sc_script;

static int sc_fail(const char *fmt, ...) DS_PRINTF(1, 2);
static int sc_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  scripted model: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return -1;
}

/* The last token id of the template's rendering of msgs (+ tools) with the
   generation prompt and the given extra variables; -1 on error. */
static int last_prompt_id(const chat_template *ct, const tokenizer *tk, const char *msgs, const char *tools,
                          const char *extra) {
    char err[512];
    cJSON *m = cJSON_Parse(msgs), *t = tools ? cJSON_Parse(tools) : NULL, *x = extra ? cJSON_Parse(extra) : NULL;
    char *text = NULL;
    size_t len = 0;
    int id = -1;
    if (m && chat_template_render(ct, m, t, 1, x, &text, &len, err, sizeof err) == 0) {
        int *ids = NULL;
        int n = tok_encode(tk, text, len, 0, &ids, err, sizeof err);
        if (n > 0) id = ids[n - 1];
        free(ids);
    } else {
        sc_fail("cannot render the chat template: %s", m ? err : "bad messages JSON");
    }
    free(text);
    cJSON_Delete(m);
    cJSON_Delete(t);
    cJSON_Delete(x);
    return id;
}

static const char *TOOLS_JSON =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";

/* Derives the triggers and tokenizes the scripts; checks every token has a
   single successor. Fills sc[3]. */
static int sc_build(const char *dir, sc_script sc[3]) {
    char err[1024];
    tokenizer *tk = NULL;
    chat_template *ct = NULL;
    if (tok_load(&tk, dir, err, sizeof err) != 0) return sc_fail("tok_load: %s", err);
    if (chat_template_load(&ct, dir, err, sizeof err) != 0) {
        tok_free(tk);
        return sc_fail("chat_template_load: %s", err);
    }
    int rc = -1;
    const char *user = "[{\"role\":\"user\",\"content\":\"" SC_USER "\"}]";
    /* a finished tool round: the prompt still ends with the thinking-on
       generation prompt */
    const char *tool_turn =
        "[{\"role\":\"user\",\"content\":\"" SC_USER "\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny, 21 C\"}]";
    int on = last_prompt_id(ct, tk, user, NULL, "{\"enable_thinking\":true}");
    int dflt = last_prompt_id(ct, tk, user, NULL, NULL);
    int tools_on = last_prompt_id(ct, tk, user, TOOLS_JSON, NULL);
    int after_tool = last_prompt_id(ct, tk, tool_turn, TOOLS_JSON, NULL);
    int off = last_prompt_id(ct, tk, user, NULL, "{\"enable_thinking\":false}");
    int off_tools = last_prompt_id(ct, tk, user, TOOLS_JSON, "{\"enable_thinking\":false}");
    int *ids = NULL;
    int nraw = tok_encode(tk, SC_RAW_PROMPT, strlen(SC_RAW_PROMPT), 0, &ids, err, sizeof err);
    int raw = nraw > 0 ? ids[nraw - 1] : -1;
    free(ids);
    if (on < 0 || off < 0 || raw < 0) {
        sc_fail("cannot find the last token of the generation prompts (%d, %d) or of \"%s\" (%d): %s", on, off,
                SC_RAW_PROMPT, raw, err);
        goto done;
    }
    if (dflt != on || tools_on != on || after_tool != on) {
        sc_fail("the thinking-on generation prompts end in different tokens");
        goto done;
    }
    if (off_tools != off || off == on) {
        sc_fail("the thinking-off generation prompt does not end in its own token");
        goto done;
    }
    sc[0] = (sc_script){.name = "think+tool", .text = SC_THINK_TOOL, .eos = "<|im_end|>", .trigger = on};
    sc[1] = (sc_script){.name = "hello", .text = SC_HELLO, .eos = "<|im_end|>", .trigger = off};
    sc[2] = (sc_script){.name = "fox", .text = SC_FOX, .eos = "<|endoftext|>", .trigger = raw};
    for (int s = 0; s < 3; s++) {
        int eos = tok_token_id(tk, sc[s].eos);
        int n = tok_encode(tk, sc[s].text, strlen(sc[s].text), 0, &ids, err, sizeof err);
        if (eos < 0 || n <= 0 || n + 2 > 64) {
            free(ids);
            sc_fail("cannot tokenize script %s (%s)", sc[s].name, n < 0 ? err : "length");
            goto done;
        }
        char *back = tok_decode(tk, ids, n, 0, NULL);
        int same = back && !strcmp(back, sc[s].text);
        free(back);
        if (!same) {
            free(ids);
            sc_fail("script %s does not round-trip through the tokenizer: %s", sc[s].name, sc[s].text);
            goto done;
        }
        sc[s].n = 0;
        sc[s].ids[sc[s].n++] = sc[s].trigger;
        for (int i = 0; i < n; i++) sc[s].ids[sc[s].n++] = ids[i];
        sc[s].ids[sc[s].n++] = eos;
        free(ids);
    }
    rc = 0;
done:
    chat_template_free(ct);
    tok_free(tk);
    return rc;
}

/* next[a] = the successor of state a, checked single-valued; returns the
   number of states, or -1. */
static int sc_successors(const sc_script sc[3], int *next, int vocab) {
    for (int i = 0; i < vocab; i++) next[i] = -1;
    int states = 0;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i + 1 < sc[s].n; i++) {
            int a = sc[s].ids[i], b = sc[s].ids[i + 1];
            if (a < 0 || a >= vocab || b < 0 || b >= vocab) return sc_fail("token id out of range in %s", sc[s].name);
            if (next[a] >= 0 && next[a] != b)
                return sc_fail("token %d has two successors (%d and %d; script %s): reword the scripts so that "
                               "no token repeats",
                               a, next[a], b, sc[s].name);
            if (next[a] < 0) states++;
            next[a] = b;
        }
    if (states > SC_H) return sc_fail("%d states, more than the hidden size %d", states, SC_H);
    return states;
}

static int write_config(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,"
            "\"intermediate_size\":%d,\"num_hidden_layers\":1,\"num_attention_heads\":%d,"
            "\"num_key_value_heads\":1,\"head_dim\":%d,\"vocab_size\":%d,\"max_position_embeddings\":40960,"
            "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000,\"tie_word_embeddings\":false,"
            "\"torch_dtype\":\"bfloat16\",\"bos_token_id\":151643,\"eos_token_id\":[151645,151643]}\n",
            SC_H, SC_I, SC_NH, SC_HD, SC_V);
    return fclose(f) == 0 ? 0 : -1;
}

typedef struct {
    const char *name;
    long d0, d1; /* d1 0: a vector */
    uint16_t *data; /* NULL: all zero; else d0*d1 values */
    int ones;       /* a norm weight: all 1 */
} sc_tensor;

static int write_weights(const char *dir, const sc_script sc[3]) {
    int *next = xmalloc(sizeof(int) * SC_V);
    int states = sc_successors(sc, next, SC_V);
    if (states < 0) {
        free(next);
        return -1;
    }
    uint16_t *embed = xcalloc((size_t)SC_V * SC_H, 2), *head = xcalloc((size_t)SC_V * SC_H, 2);
    int s = 0;
    for (int a = 0; a < SC_V; a++) {
        if (next[a] < 0) continue;
        embed[(size_t)a * SC_H + s] = ds_f32_to_bf16(1.0f);
        head[(size_t)next[a] * SC_H + s] = ds_f32_to_bf16(SC_LOGIT_W);
        s++;
    }
    free(next);
    const long Q = SC_NH * SC_HD;
    sc_tensor t[] = {
        {"lm_head.weight", SC_V, SC_H, head, 0},
        {"model.embed_tokens.weight", SC_V, SC_H, embed, 0},
        {"model.layers.0.input_layernorm.weight", SC_H, 0, NULL, 1},
        {"model.layers.0.mlp.down_proj.weight", SC_H, SC_I, NULL, 0},
        {"model.layers.0.mlp.gate_proj.weight", SC_I, SC_H, NULL, 0},
        {"model.layers.0.mlp.up_proj.weight", SC_I, SC_H, NULL, 0},
        {"model.layers.0.post_attention_layernorm.weight", SC_H, 0, NULL, 1},
        {"model.layers.0.self_attn.k_norm.weight", SC_HD, 0, NULL, 1},
        {"model.layers.0.self_attn.k_proj.weight", SC_HD, SC_H, NULL, 0},
        {"model.layers.0.self_attn.o_proj.weight", SC_H, Q, NULL, 0},
        {"model.layers.0.self_attn.q_norm.weight", SC_HD, 0, NULL, 1},
        {"model.layers.0.self_attn.q_proj.weight", Q, SC_H, NULL, 0},
        {"model.layers.0.self_attn.v_proj.weight", SC_HD, SC_H, NULL, 0},
        {"model.norm.weight", SC_H, 0, NULL, 1},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    char hdr[8192];
    size_t n = (size_t)snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        size_t bytes = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1) * 2;
        char shape[64];
        if (t[i].d1) snprintf(shape, sizeof shape, "%ld,%ld", t[i].d0, t[i].d1);
        else snprintf(shape, sizeof shape, "%ld", t[i].d0);
        n += (size_t)snprintf(hdr + n, sizeof hdr - n,
                              ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}", t[i].name,
                              shape, off, off + bytes);
        off += bytes;
    }
    hdr[n++] = '}';
    while (n % 8) hdr[n++] = ' ';
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    int rc = f ? 0 : -1;
    uint64_t hl = n;
    if (f) rc |= fwrite(&hl, 8, 1, f) != 1 || fwrite(hdr, 1, n, f) != n;
    uint16_t small[SC_H * SC_I]; /* the largest all-zero / all-one tensor */
    for (int i = 0; f && i < nt; i++) {
        size_t cnt = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1);
        if (t[i].data) {
            rc |= fwrite(t[i].data, 2, cnt, f) != cnt;
            continue;
        }
        if (cnt > sizeof small / 2) {
            rc = -1;
            break;
        }
        for (size_t j = 0; j < cnt; j++) small[j] = t[i].ones ? ds_f32_to_bf16(1.0f) : 0;
        rc |= fwrite(small, 2, cnt, f) != cnt;
    }
    if (f && fclose(f) != 0) rc = -1;
    free(embed);
    free(head);
    return rc ? -1 : 0;
}

int test_write_scripted_qwen3(const char *dir) {
    if (test_copy_qwen3_tokenizer(dir) != 0) return -1;
    sc_script sc[3];
    if (sc_build(dir, sc) != 0) return -1;
    if (write_config(dir) != 0) return sc_fail("cannot write %s/config.json", dir);
    if (write_weights(dir, sc) != 0) return sc_fail("cannot write the weights in %s", dir);
    return 0;
}

const char *test_scripted_model_dir(void) {
    static char dir[512];
    static int state; /* 0 not tried, 1 ok, -1 failed */
    if (!state) {
        snprintf(dir, sizeof dir, "%s/scripted-qwen3", test_tmp_dir());
        state = test_write_scripted_qwen3(dir) == 0 ? 1 : -1;
    }
    return state > 0 ? dir : NULL;
}

/* Greedy generation from the full rendered prompt with the project's model
   code must replay each script exactly, ending with its eos; the CLI's chat
   path must print the thinking-off answer. */
TEST(scripted_model) {
    const char *dir = test_scripted_model_dir();
    CHECK_MSG(dir != NULL, "could not write the scripted model");
    if (!dir) return;
    sc_script sc[3];
    if (sc_build(dir, sc) != 0) {
        test_fail(__FILE__, __LINE__, "sc_build failed");
        return;
    }
    int *next = xmalloc(sizeof(int) * SC_V);
    CHECK(sc_successors(sc, next, SC_V) > 0);
    free(next);
    char err[1024];
    model *m = NULL;
    if (model_load(&m, dir, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "model_load: %s", err);
        return;
    }
    tokenizer *tk = NULL;
    chat_template *ct = NULL;
    CHECK(tok_load(&tk, dir, err, sizeof err) == 0);
    CHECK(chat_template_load(&ct, dir, err, sizeof err) == 0);
    const model_config *cfg = model_cfg(m);
    CHECK_EQ_INT(cfg->vocab_size, SC_V);
    CHECK(!cfg->tie_word_embeddings);
    int im_end = tk ? tok_token_id(tk, "<|im_end|>") : -1, eot = tk ? tok_token_id(tk, "<|endoftext|>") : -1;
    CHECK(im_end >= 0 && eot >= 0);
    tpool *tp = tp_create(1);
    seq *s = NULL;
    CHECK(seq_create(&s, m, 1024, 64, tp, err, sizeof err) == 0);
    float *logits = xmalloc(sizeof(float) * SC_V);
    /* full prompts as the server renders them */
    const char *extra[3] = {"{\"enable_thinking\":true}", "{\"enable_thinking\":false}", NULL};
    for (int k = 0; s && tk && ct && k < 3; k++) {
        int *prompt = NULL, np;
        char *text = NULL;
        size_t len = 0;
        if (k < 2) {
            cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                      "{\"role\":\"user\",\"content\":\"" SC_USER "\"}]");
            cJSON *x = cJSON_Parse(extra[k]), *tools = k == 0 ? cJSON_Parse(TOOLS_JSON) : NULL;
            CHECK(chat_template_render(ct, msgs, tools, 1, x, &text, &len, err, sizeof err) == 0);
            cJSON_Delete(msgs);
            cJSON_Delete(x);
            cJSON_Delete(tools);
        } else {
            text = xstrdup(SC_RAW_PROMPT);
            len = strlen(text);
        }
        np = text ? tok_encode(tk, text, len, 0, &prompt, err, sizeof err) : -1;
        free(text);
        CHECK(np > 0 && prompt[np - 1] == sc[k].trigger);
        int got[80], ng = 0;
        if (np > 0 && seq_prefill(s, prompt, np, logits, err, sizeof err) >= 0) {
            while (ng < 80) {
                int id = op_argmax(logits, SC_V);
                got[ng++] = id;
                if (id == im_end || id == eot || ng == 80) break;
                if (seq_step(s, id, logits, err, sizeof err) != 0) break;
            }
        } else {
            test_fail(__FILE__, __LINE__, "prefill: %s", err);
        }
        free(prompt);
        /* the script's ids after the trigger, its eos included */
        CHECK_EQ_INT(ng, sc[k].n - 1);
        int same = ng == sc[k].n - 1 && !memcmp(got, sc[k].ids + 1, sizeof(int) * (size_t)ng);
        CHECK_MSG(same, "script %s: greedy output differs", sc[k].name);
        char *out = tok_decode(tk, got, ng > 0 ? ng - 1 : 0, 0, NULL);
        CHECK_MSG(out && !strcmp(out, sc[k].text), "script %s: got \"%s\"", sc[k].name, out ? out : "");
        free(out);
    }
    /* a prompt ending in a token outside the scripts stops at once: "!" then eos */
    int other[2] = {9707, 1879}; /* "Hello world" */
    if (s && seq_prefill(s, other, 2, logits, err, sizeof err) >= 0) {
        CHECK_EQ_INT(op_argmax(logits, SC_V), 0);
        CHECK(seq_step(s, 0, logits, err, sizeof err) == 0 && op_argmax(logits, SC_V) == im_end);
    }
    free(logits);
    seq_free(s);
    tp_free(tp);
    chat_template_free(ct);
    tok_free(tk);
    model_free(m);
    /* end to end through the CLI: template, tokenizer, generation loop */
    char args[1200], *out = NULL, *errs = NULL;
    snprintf(args, sizeof args, "run --model %s --chat --no-thinking --prompt 'Hi' -n 32 -t 1", dir);
    int rc = test_run_cli(args, &out, &errs);
    size_t hl = strlen(SC_HELLO);
    int ok = rc == 0 && out && !strncmp(out, SC_HELLO, hl) && strspn(out + hl, "\n") == strlen(out + hl);
    CHECK_MSG(ok, "dspark %s: exit %d, stdout \"%s\", stderr %s", args, rc, out ? out : "", errs ? errs : "");
    free(out);
    free(errs);
    /* the raw script through the speculative (lookup) loop, as ids */
    char want[400];
    size_t wn = 0;
    for (int i = 1; i + 1 < sc[2].n; i++)
        wn += (size_t)snprintf(want + wn, sizeof want - wn, "%s%d", i > 1 ? "," : "", sc[2].ids[i]);
    snprintf(args, sizeof args, "run --model %s --prompt '%s' --mode lookup -n 32 -t 1 --print-ids", dir,
             SC_RAW_PROMPT);
    rc = test_run_cli(args, &out, &errs);
    CHECK_MSG(rc == 0 && out && strstr(out, want) == out, "dspark %s: exit %d, stdout \"%s\" (want %s), stderr %s",
              args, rc, out ? out : "", want, errs ? errs : "");
    free(out);
    free(errs);
}
