/* mkrandom: writes a random-weight checkpoint in Hugging Face layout
 * (config.json, generation_config.json, model.safetensors in bf16) with the
 * exact Qwen3-0.6B, 1.7B, 4B or 8B shapes, for speed benchmarks only. Weights
 * ~ N(0, 0.02) (4B and 8B: uniform with the same deviation, drawn faster),
 * norms ~ 1 + the same noise, deterministic from the seed.
 *   mkrandom OUT_DIR [0.6b|1.7b|4b|8b|30b-a3b|30b-a3b-4l|gemma3-1b|mistral-7b|mistral-7b-4l] [seed]
 * (30b-a3b: Qwen3-30B-A3B's shape, 48 layers of 128 experts of which 8 a
 * token, 61 GB of bf16 (a GPU's benchmark: it needs that much disk and an
 * 80 GB GPU); 30b-a3b-4l: the same layers, 4 of them, small enough for a
 * CPU benchmark;
 * gemma3-1b: Gemma-3-1B's shape, gemma3_text, its norms drawn around 0 as
 * Gemma's (1 + w) norms are stored; mistral-7b: Mistral-7B's layers, 32 of
 * them, v0.1's 32,000-token vocabulary (a Llama 2 tokenizer fits it), no
 * window, an untied head;
 * mistral-7b-4l: 4 of those layers, for a CPU benchmark)
 * Or a drafter in the published layouts for such a target (5 layers of the
 * target's width, taps [1, 7, 13, 19, 25] by the published fallback):
 *   mkrandom OUT_DIR dspark-0.6b|dflash-0.6b|dspark-1.7b|dflash-1.7b [target seed]
 * or one of the published Qwen3-8B drafters' shapes (5 layers of width 4096,
 * taps [1, 9, 17, 25, 33] of a 36-layer target; the DSpark embedding and
 * head copies are drawn on their own, so they stay unaliased copies):
 *   mkrandom OUT_DIR dspark-8b|dflash-8b
 * DSpark's embed_tokens and lm_head copies are drawn with the target's seed,
 * so they are byte-identical to the target's tied embedding (and get
 * aliased), as in the published checkpoints. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t rng = 1234;
static double unif(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float gauss(void) {
    static int have;
    static float next;
    if (have) {
        have = 0;
        return next;
    }
    double r = sqrt(-2.0 * log(unif())), t = 6.283185307179586 * unif();
    next = (float)(r * sin(t));
    have = 1;
    return (float)(r * cos(t));
}
static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

typedef struct {
    char name[96];
    long d0, d1; /* d1 = 0 for vectors */
    int norm;
} tdesc;

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mkrandom OUT_DIR [0.6b|1.7b|4b|8b|dspark-0.6b|dflash-0.6b|...] [seed]\n");
        return 1;
    }
    const char *dir = argv[1];
    const char *shape = argc > 2 ? argv[2] : "0.6b";
    int big = strstr(shape, "1.7b") != NULL;
    int dspark = !strncmp(shape, "dspark", 6), dflash = !strncmp(shape, "dflash", 6);
    int q4b = !strcmp(shape, "4b"), q8b = !strcmp(shape, "8b"); /* 8B: untied LM head */
    int d8b = (dspark || dflash) && strstr(shape, "8b") != NULL;  /* a drafter for Qwen3-8B */
    int moe = !strcmp(shape, "30b-a3b-4l") || !strcmp(shape, "30b-a3b"), gem = !strcmp(shape, "gemma3-1b");
    int mis = !strncmp(shape, "mistral-7b", 10);
    const long E = 128, EK = 8, EI = 768;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) | 1 : 1234;
    rng = seed;
    long H = big ? 2048 : 1024, I = big ? 6144 : 3072, L = 28, NH = 16, NKV = 8, HD = 128, V = 151936;
    if (q4b || q8b || d8b) {
        H = q4b ? 2560 : 4096;
        I = q4b ? 9728 : 12288;
        L = 36;
        NH = 32;
    }
    if (moe) H = 2048, I = 6144, L = strcmp(shape, "30b-a3b") ? 4 : 48, NH = 32, NKV = 4;
    if (gem) H = 1152, I = 6912, L = 26, NH = 4, NKV = 1, HD = 256, V = 262144;
    if (mis) H = 4096, I = 14336, L = strcmp(shape, "mistral-7b") ? 4 : 32, NH = 32, NKV = 8, V = 32000;
    const char *pre = "model.";
    if (dspark || dflash) {
        L = 5;
        pre = "";
    }
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    const char *taps = d8b ? "[1,9,17,25,33]" : "[1,7,13,19,25]";
    if (dspark)
        fprintf(f,
                "{\"architectures\":[\"Qwen3DSparkModel\"],\"block_size\":7,\"num_target_layers\":%d,"
                "\"mask_token_id\":151669,\"target_layer_ids\":%s,\"markov_rank\":256,"
                "\"markov_head_type\":\"vanilla\",\"enable_confidence_head\":true,"
                "\"confidence_head_with_markov\":true,",
                d8b ? 36 : 28, taps);
    else if (dflash)
        fprintf(f,
                "{\"architectures\":[\"DFlashDraftModel\"],\"block_size\":16,\"num_target_layers\":%d,"
                "\"dflash_config\":{\"mask_token_id\":151669,\"target_layer_ids\":%s},",
                d8b ? 36 : 28, taps);
    else if (moe)
        fprintf(f,
                "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",\"num_experts\":%ld,"
                "\"num_experts_per_tok\":%ld,\"moe_intermediate_size\":%ld,\"norm_topk_prob\":true,"
                "\"decoder_sparse_step\":1,\"mlp_only_layers\":[],",
                E, EK, EI);
    else if (gem)
        fprintf(f, "{\"architectures\":[\"Gemma3ForCausalLM\"],\"model_type\":\"gemma3_text\","
                   "\"hidden_activation\":\"gelu_pytorch_tanh\",\"query_pre_attn_scalar\":256,\"sliding_window\":512,"
                   "\"sliding_window_pattern\":6,\"rope_local_base_freq\":10000,");
    else if (mis)
        fprintf(f, "{\"architectures\":[\"MistralForCausalLM\"],\"model_type\":\"mistral\",\"sliding_window\":null,");
    else
        fprintf(f, "{\"architectures\":[\"Qwen3ForCausalLM\"],");
    if (!moe && !gem && !mis) fprintf(f, "\"model_type\":\"qwen3\",");
    fprintf(f,
            "\"hidden_size\":%ld,"
            "\"intermediate_size\":%ld,\"num_hidden_layers\":%ld,\"num_attention_heads\":%ld,"
            "\"num_key_value_heads\":%ld,\"head_dim\":%ld,\"vocab_size\":%ld,\"max_position_embeddings\":40960,"
            "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000,\"tie_word_embeddings\":%s,\"attention_bias\":false,"
            "%s\"torch_dtype\":\"bfloat16\",\"bos_token_id\":%s,\"eos_token_id\":%s}\n",
            H, I, L, NH, NKV, HD, V, q8b || moe || mis ? "false" : "true", gem ? "" : "\"hidden_act\":\"silu\",",
            gem ? "2" : mis ? "1" : "151643", gem ? "[1,106]" : mis ? "2" : "151645");
    fclose(f);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    f = fopen(path, "w");
    fprintf(f, gem   ? "{\"bos_token_id\":2,\"eos_token_id\":[1,106]}\n"
               : mis ? "{\"bos_token_id\":1,\"eos_token_id\":2}\n"
                     : "{\"bos_token_id\":151643,\"eos_token_id\":[151645,151643]}\n");
    fclose(f);

    int nt = 0;
    tdesc *t = calloc((size_t)(17 + L * (14 + (moe ? 3 * E : 0))), sizeof *t);
#define ADD(n0, a, b, nm) do { snprintf(t[nt].name, 96, "%s", n0); t[nt].d0 = a; t[nt].d1 = b; t[nt].norm = nm; nt++; } while (0)
    /* norm 2: drawn from the target's seed (the DSpark copies of its embedding) */
    if (!dflash) ADD(dspark ? "embed_tokens.weight" : "model.embed_tokens.weight", V, H, dspark ? 2 : 0);
    if (dspark) {
        ADD("lm_head.weight", V, H, 2);
        ADD("markov_head.markov_w1.weight", V, 256, 0);
        ADD("markov_head.markov_w2.weight", V, 256, 0);
        ADD("confidence_head.proj.weight", 1, H + 256, 0);
        ADD("confidence_head.proj.bias", 1, 0, 0);
    }
    if (dspark || dflash) {
        ADD("fc.weight", H, 5 * H, 0);
        ADD("hidden_norm.weight", H, 0, 1);
        ADD("norm.weight", H, 0, 1);
    } else {
        ADD("model.norm.weight", H, 0, gem ? 3 : 1);
        if (q8b || moe || mis) ADD("lm_head.weight", V, H, 0);
    }
    char nm[96];
    for (long l = 0; l < L; l++) {
#define LAY(s, a, b, n) do { snprintf(nm, 96, "%slayers.%ld.%s", pre, l, s); ADD(nm, a, b, n); } while (0)
        const int nw = gem ? 3 : 1; /* Gemma stores w of its (1 + w) norms */
        LAY("input_layernorm.weight", H, 0, nw);
        LAY("post_attention_layernorm.weight", H, 0, nw);
        if (gem) {
            LAY("pre_feedforward_layernorm.weight", H, 0, nw);
            LAY("post_feedforward_layernorm.weight", H, 0, nw);
        }
        LAY("self_attn.q_proj.weight", NH * HD, H, 0);
        LAY("self_attn.k_proj.weight", NKV * HD, H, 0);
        LAY("self_attn.v_proj.weight", NKV * HD, H, 0);
        LAY("self_attn.o_proj.weight", H, NH * HD, 0);
        if (!mis) { /* (Mistral has no q/k norms) */
            LAY("self_attn.q_norm.weight", HD, 0, nw);
            LAY("self_attn.k_norm.weight", HD, 0, nw);
        }
        if (moe) {
            LAY("mlp.gate.weight", E, H, 0);
            for (long e = 0; e < E; e++) {
                char en[64];
                snprintf(en, sizeof en, "mlp.experts.%ld.gate_proj.weight", e);
                LAY(en, EI, H, 0);
                snprintf(en, sizeof en, "mlp.experts.%ld.up_proj.weight", e);
                LAY(en, EI, H, 0);
                snprintf(en, sizeof en, "mlp.experts.%ld.down_proj.weight", e);
                LAY(en, H, EI, 0);
            }
            continue;
        }
        LAY("mlp.gate_proj.weight", I, H, 0);
        LAY("mlp.up_proj.weight", I, H, 0);
        LAY("mlp.down_proj.weight", H, I, 0);
    }
    /* header */
    size_t cap = ((size_t)1 << 20) + 256 * (size_t)nt, n = 0; /* (an entry is under 256 bytes) */
    char *hdr = malloc(cap);
    n += (size_t)snprintf(hdr + n, cap - n, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        size_t bytes = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1) * 2;
        if (t[i].d1)
            n += (size_t)snprintf(hdr + n, cap - n, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%ld,%ld],\"data_offsets\":[%zu,%zu]}",
                                  t[i].name, t[i].d0, t[i].d1, off, off + bytes);
        else
            n += (size_t)snprintf(hdr + n, cap - n, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%ld],\"data_offsets\":[%zu,%zu]}",
                                  t[i].name, t[i].d0, off, off + bytes);
        off += bytes;
    }
    n += (size_t)snprintf(hdr + n, cap - n, "}");
    while (n % 8) hdr[n++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    uint64_t hl = n;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, n, f);
    uint16_t *buf = malloc(sizeof(uint16_t) * (1 << 20));
    uint64_t own = seed * 2654435761u | 1;
    for (int i = 0; i < nt; i++) {
        size_t cnt = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1);
        if (dspark) rng = t[i].norm == 2 ? seed : own++; /* copies replay the target's first draws */
        while (cnt) {
            size_t k = cnt < (1u << 20) ? cnt : (1u << 20);
            if (q4b || q8b || d8b || moe || gem || mis) /* uniform in +-0.02*sqrt(3): the same deviation, several times faster */
                for (size_t j = 0; j < k; j++)
                    buf[j] = bf16((t[i].norm == 1 ? 1.0f : 0.0f) + 0.0693f * ((float)unif() - 0.5f));
            else
                for (size_t j = 0; j < k; j++) buf[j] = bf16((t[i].norm == 1 ? 1.0f : 0.0f) + 0.02f * gauss());
            fwrite(buf, 2, k, f);
            cnt -= k;
        }
    }
    if (fclose(f) != 0) {
        perror(path);
        return 1;
    }
    printf("wrote %s (%zu bytes of weights, %d tensors)\n", dir, off, nt);
    free(buf);
    free(hdr);
    free(t);
    return 0;
}
