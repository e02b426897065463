/* cli_quantize: `dspark quantize`: a HF checkpoint dspark reads (Qwen3,
 * Qwen2, Llama, Qwen3-MoE, Mistral, Gemma 3; F32/F16/BF16 safetensors)
 * written as
 *   - one GGUF file that llama.cpp runs on its own: the metadata and tensor
 *     names its converter (convert_hf_to_gguf.py) writes, the tokenizer
 *     embedded (cli_quantize_vocab.c), weights in one of ggml's block
 *     types, the Q4_K_M mix, or F32 / F16 / BF16; or
 *   - an MLX folder (mlx-lm's convert layout): config.json with
 *     "quantization", the tokenizer files, model.safetensors holding each
 *     2-D weight as NAME.weight (uint32), NAME.scales, NAME.biases.
 * The quantization itself is engine/quant_encode.h; this file chooses the
 * type of each tensor, names it, orders its rows, and writes the files.
 * Output goes to a temporary path renamed into place at the end, so a
 * failed run leaves no partial file under the asked-for name. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/gguf_write.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/cli_quantize.h"
#include "engine/config.h"
#include "engine/quant_encode.h"
#include "engine/safetensors.h"
#include "engine/threadpool.h"

const char QUANTIZE_HELP[] =
    "usage: dspark quantize --model DIR --out PATH --type TYPE [--group-size N] [--threads N]\n"
    "Writes a quantized copy of the HF checkpoint in DIR.\n"
    "  --type Q8_0|Q4_0|Q4_K|Q6_K   a GGUF file, every 2-D weight in that type (llama-quantize --pure);\n"
    "                               rows whose length is not a multiple of the block fall back as\n"
    "                               llama.cpp does (Q4_K -> Q5_0, Q6_K -> Q8_0, else F16)\n"
    "  --type Q4_K_M                llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for the output (or tied\n"
    "                               embedding) and for attn_v / ffn_down in the layers llama.cpp picks\n"
    "  --type F32|F16|BF16          a GGUF file, every 2-D weight in that float type\n"
    "  --type mlx4|mlx8             an MLX folder at PATH (mlx-lm layout), 4- or 8-bit affine\n"
    "  --group-size N               MLX group: 32, 64 (default) or 128\n"
    "Norms and biases stay F32 (GGUF) or as stored (MLX); a mixture of experts keeps its routers\n"
    "unquantized and, in an MLX folder, has its experts stacked as mlx-lm's switch_mlp. The GGUF\n"
    "carries the architecture's hyper-parameters (Mistral as llama.cpp's llama, Gemma 3 as gemma3 with\n"
    "its norms' + 1 stored), the tokenizer (tokenizer.json: byte-level BPE, or SentencePiece-style\n"
    "as a \"llama\" vocabulary) and the chat template.\n";

/* ---- the choice of types (GGUF) ---- */

typedef enum { QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q6_K, QT_Q4_K_M, QT_F32, QT_F16, QT_BF16, QT_MLX4, QT_MLX8 } qtype;

static const struct { const char *name; qtype t; uint32_t file_type; } QTYPES[] = {
    /* general.file_type: llama.cpp's llama_ftype numbers (pure Q4_K is
       reported as its nearest ftype, Q4_K_S) */
    {"Q8_0", QT_Q8_0, 7}, {"Q4_0", QT_Q4_0, 2}, {"Q4_K", QT_Q4_K, 14}, {"Q6_K", QT_Q6_K, 18},
    {"Q4_K_M", QT_Q4_K_M, 15}, {"F32", QT_F32, 0}, {"F16", QT_F16, 1}, {"BF16", QT_BF16, 32},
    {"mlx4", QT_MLX4, 0}, {"mlx8", QT_MLX8, 0},
};

/* The role of a tensor in the Q4_K_M rule. */
typedef enum { ROLE_OTHER, ROLE_TOKEN_EMBD, ROLE_OUTPUT, ROLE_ATTN_V, ROLE_FFN_DOWN, ROLE_QNORM, ROLE_ROUTER } role;

/* llama.cpp's choice of the layers that get more bits in its _M mixes: the
 * first and last eighth of the layers, and every third layer between. */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static uint32_t ggml_of(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: return GGML_Q8_0;
    case DT_Q4_0: return GGML_Q4_0;
    case DT_Q5_0: return GGML_Q5_0;
    case DT_Q4_K: return GGML_Q4_K;
    case DT_Q6_K: return GGML_Q6_K;
    case DT_F16: return GGML_F16;
    case DT_BF16: return GGML_BF16;
    default: return GGML_F32;
    }
}

/* The stored type of a tensor of row length K and ndim dims. 1-D tensors
 * (norms, biases, rope factors) are F32 as the converter writes them, and
 * so is an MoE router (llama-quantize leaves ffn_gate_inp alone). */
static ds_dtype choose_type(qtype q, role r, int layer, int n_layer, int64_t K, int ndim) {
    if (ndim < 2 || r == ROLE_ROUTER) return DT_F32;
    if (q == QT_F32 || q == QT_F16 || q == QT_BF16) return q == QT_F32 ? DT_F32 : q == QT_F16 ? DT_F16 : DT_BF16;
    ds_dtype t = q == QT_Q8_0 ? DT_Q8_0 : q == QT_Q4_0 ? DT_Q4_0 : q == QT_Q6_K ? DT_Q6_K : DT_Q4_K;
    if (q == QT_Q4_K_M) {
        if (r == ROLE_OUTPUT || r == ROLE_TOKEN_EMBD) /* ROLE_TOKEN_EMBD only when tied (no output) */
            return K % 256 ? DT_Q8_0 : DT_Q6_K;
        if ((r == ROLE_ATTN_V || r == ROLE_FFN_DOWN) && more_bits(layer, n_layer)) t = DT_Q6_K;
    }
    /* llama.cpp's fallback for rows that do not fit the block */
    if (K % qenc_block_elems(t)) {
        if (t == DT_Q4_K) t = DT_Q5_0;
        else if (t == DT_Q6_K) t = DT_Q8_0;
        if (K % qenc_block_elems(t)) t = DT_F16;
    }
    return t;
}

/* ---- rows out of the checkpoint ---- */

/* Source row n of t (F32, F16 or BF16) as f32; -1 when an element is not
 * finite (no quantized code can hold it). */
static int src_row(const tensor *t, int64_t K, int64_t n, float *y) {
    const uint8_t *p = (const uint8_t *)t->data + (size_t)(n * K) * dtype_size(t->dtype);
    int bad = 0;
    for (int64_t k = 0; k < K; k++) {
        float v;
        if (t->dtype == DT_F32) memcpy(&v, p + 4 * k, 4);
        else {
            uint16_t h;
            memcpy(&h, p + 2 * k, 2);
            v = t->dtype == DT_BF16 ? ds_bf16_to_f32(h) : ds_f16_to_f32(h);
        }
        bad |= !isfinite(v);
        y[k] = v;
    }
    return bad ? -1 : 0;
}

/* The converter's row order for Llama's q/k projections: HF keeps each
 * head's rotary pairs as two halves (i, i + hd/2); llama.cpp's rope wants
 * them adjacent (2i, 2i+1). Output row h*hd + 2i + j is input row
 * h*hd + j*hd/2 + i. */
static int64_t permuted_row(int64_t r, int hd) {
    int64_t h = r / hd, w = r % hd;
    return h * hd + (w % 2) * (hd / 2) + w / 2;
}

typedef struct {
    const tensor *src;
    int64_t K, r0, nrows;
    int permute_hd;    /* 0: rows in order */
    float add;         /* added to every value (Gemma's norms: 1, as its (1 + w) computes in f32) */
    ds_dtype out;      /* F32, F16 or an encoded type (GGUF) */
    size_t row_bytes;
    uint8_t *buf;      /* nrows * row_bytes */
    int mlx_bits, group;
    uint32_t *q;       /* MLX: nrows * K*bits/32 words */
    float *sc, *bi;    /* MLX: nrows * K/group */
    int bad_row;       /* -1, or a row that held a non-finite value */
} rows_job;

static void rows_worker(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int lo, hi;
    tp_range((int)j->nrows, ith, nth, &lo, &hi);
    float *x = xmalloc(sizeof(float) * (size_t)j->K);
    for (int i = lo; i < hi; i++) {
        int64_t r = j->r0 + i;
        int64_t s = j->permute_hd ? permuted_row(r, j->permute_hd) : r;
        if (src_row(j->src, j->K, s, x) != 0) {
            j->bad_row = (int)r; /* any one of the bad rows will do for the message */
            continue;
        }
        if (j->add != 0)
            for (int64_t k = 0; k < j->K; k++) x[k] = j->add + x[k];
        if (j->mlx_bits) {
            int64_t wpr = j->K * j->mlx_bits / 32, gpr = j->K / j->group;
            qenc_mlx_row(x, j->K, j->mlx_bits, j->group, j->q + i * wpr, j->sc + i * gpr, j->bi + i * gpr);
            continue;
        }
        uint8_t *o = j->buf + (size_t)i * j->row_bytes;
        if (j->out == DT_F32) memcpy(o, x, sizeof(float) * (size_t)j->K);
        else if (j->out == DT_F16 || j->out == DT_BF16)
            for (int64_t k = 0; k < j->K; k++) {
                uint16_t h = j->out == DT_F16 ? ds_f32_to_f16(x[k]) : ds_f32_to_bf16(x[k]);
                memcpy(o + 2 * k, &h, 2);
            }
        else qenc_row(j->out, x, j->K, o);
    }
    free(x);
}

/* Rows per batch: about 16 MiB of f32 source, at least one row. */
static int64_t batch_rows(int64_t K, int64_t N) {
    int64_t b = ((int64_t)4 << 20) / (K > 0 ? K : 1);
    if (b < 1) b = 1;
    return b < N ? b : N;
}

/* ---- GGUF ---- */

typedef struct {
    char name[96];      /* GGUF name */
    const tensor *src;  /* NULL: rope_freqs (generated); with experts, expert 0's */
    const tensor **experts; /* n_experts per-expert matrices stacked into one 3-d tensor, else NULL */
    int n_experts;
    role r;
    int layer;
    int permute_hd;
    float add;          /* rows_job.add */
    ds_dtype type;
    int64_t N, K;       /* rows and row length; N = 1 for 1-D */
    int ndim;
} out_tensor;

/* HF suffixes of one layer and their GGUF names (gguf-py's tensor map). */
typedef struct {
    const char *hf, *gg;
    role r;
} layer_name;
static const layer_name LAYER_MAP[] = {
    {"input_layernorm.weight", "attn_norm.weight", ROLE_OTHER},
    {"self_attn.q_proj.weight", "attn_q.weight", ROLE_OTHER},
    {"self_attn.q_proj.bias", "attn_q.bias", ROLE_OTHER},
    {"self_attn.k_proj.weight", "attn_k.weight", ROLE_OTHER},
    {"self_attn.k_proj.bias", "attn_k.bias", ROLE_OTHER},
    {"self_attn.v_proj.weight", "attn_v.weight", ROLE_ATTN_V},
    {"self_attn.v_proj.bias", "attn_v.bias", ROLE_OTHER},
    {"self_attn.o_proj.weight", "attn_output.weight", ROLE_OTHER},
    {"self_attn.o_proj.bias", "attn_output.bias", ROLE_OTHER},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", ROLE_QNORM},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", ROLE_QNORM},
    {"post_attention_layernorm.weight", "ffn_norm.weight", ROLE_OTHER},
    {"mlp.gate_proj.weight", "ffn_gate.weight", ROLE_OTHER},
    {"mlp.up_proj.weight", "ffn_up.weight", ROLE_OTHER},
    {"mlp.down_proj.weight", "ffn_down.weight", ROLE_FFN_DOWN},
};
#define N_LAYER_MAP ((int)(sizeof LAYER_MAP / sizeof LAYER_MAP[0]))

/* Gemma 3's layer: norms before and after both the attention and the MLP
   (ffn_norm is the MLP's input norm there), and q/k norms */
static const layer_name GEMMA_MAP[] = {
    {"input_layernorm.weight", "attn_norm.weight", ROLE_OTHER},
    {"self_attn.q_proj.weight", "attn_q.weight", ROLE_OTHER},
    {"self_attn.k_proj.weight", "attn_k.weight", ROLE_OTHER},
    {"self_attn.v_proj.weight", "attn_v.weight", ROLE_ATTN_V},
    {"self_attn.o_proj.weight", "attn_output.weight", ROLE_OTHER},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", ROLE_QNORM},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", ROLE_QNORM},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", ROLE_OTHER},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight", ROLE_OTHER},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", ROLE_OTHER},
    {"mlp.gate_proj.weight", "ffn_gate.weight", ROLE_OTHER},
    {"mlp.up_proj.weight", "ffn_up.weight", ROLE_OTHER},
    {"mlp.down_proj.weight", "ffn_down.weight", ROLE_FFN_DOWN},
};
#define N_GEMMA_MAP ((int)(sizeof GEMMA_MAP / sizeof GEMMA_MAP[0]))

/* A gemma3 (multimodal) checkpoint's vision tower and projector: llama.cpp
   keeps them in a separate projector file, which this does not write */
static int vision_tensor(const char *name) {
    static const char *const P[] = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                    "model.multi_modal_projector."};
    for (int i = 0; i < 4; i++)
        if (!strncmp(name, P[i], strlen(P[i]))) return 1;
    return 0;
}

static int add_out(out_tensor **v, int *n, const char *gg, const tensor *src, role r, int layer, const model_config *c,
                   qtype q, char *err, size_t errlen) {
    if (src && (src->ndim < 1 || src->ndim > 2))
        return ds_err(err, errlen, "%s: tensor %s has %d dims (1 or 2 expected)", src->file, src->name, src->ndim);
    if (src && src->dtype != DT_F32 && src->dtype != DT_F16 && src->dtype != DT_BF16)
        return ds_err(err, errlen, "%s: tensor %s is %s (quantize reads F32, F16 or BF16 checkpoints)", src->file,
                      src->name, dtype_name(src->dtype));
    *v = xrealloc(*v, sizeof(out_tensor) * (size_t)(*n + 1));
    out_tensor *o = &(*v)[(*n)++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", gg);
    o->src = src;
    o->r = r;
    o->layer = layer;
    if (src) {
        o->ndim = src->ndim;
        o->N = src->ndim == 2 ? src->shape[0] : 1;
        o->K = src->shape[src->ndim - 1];
    } else {
        o->ndim = 1;
        o->N = 1;
        o->K = c->head_dim / 2;
    }
    o->type = choose_type(q, r, layer, c->n_layers, o->K, o->ndim);
    return 0;
}

/* Llama 3's rope scaling as the converter bakes it: one factor per rotary
 * frequency (rope_freqs.weight), by which llama.cpp divides the frequency. */
static void llama3_rope_factors(const model_config *c, float *f) {
    int hd = c->head_dim;
    double old = c->rope_original_max_pos, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    double lo_wl = old / lo, hi_wl = old / hi;
    for (int i = 0; i < hd / 2; i++) {
        double freq = 1.0 / pow(c->rope_theta, (double)(2 * i) / hd);
        double wl = 2 * M_PI / freq;
        if (wl < hi_wl) f[i] = 1.0f;
        else if (wl > lo_wl) f[i] = c->rope_factor;
        else {
            double smooth = (old / wl - lo) / (hi - lo);
            f[i] = (float)(1.0 / ((1 - smooth) / c->rope_factor + smooth));
        }
    }
}

static const char *base_name(const char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    const char *s = p + n;
    while (s > p && s[-1] != '/') s--;
    return s;
}

/* Mistral is llama.cpp's llama: the same tensors, q/k rows permuted alike */
static int llama_layout(const model_config *c) { return c->arch == ARCH_LLAMA || c->arch == ARCH_MISTRAL; }

/* The sliding layers as llama.cpp reads them: sliding_window, and where
   the layers do not follow the default for the architecture (gemma3: a
   period of 6, the last layer of each global; llama: every layer, as
   dspark reads it), sliding_window_pattern as one flag a layer. */
static void add_window(gguf_writer *w, const model_config *c, const char *a) {
    char k[128];
    if (!c->sliding_window) return;
    snprintf(k, sizeof k, "%s.attention.sliding_window", a);
    gguf_w_u32(w, k, (uint32_t)c->sliding_window);
    uint8_t flags[CONFIG_MAX_LAYERS];
    int usual = 1;
    for (int l = 0; l < c->n_layers; l++) {
        flags[l] = c->sliding[l] != 0;
        usual &= flags[l] == (c->arch == ARCH_GEMMA3 ? l % 6 < 5 : 1);
    }
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", a);
    if (!usual) gguf_w_arr(w, k, GGUF_BOOL, flags, (uint64_t)c->n_layers);
}

/* Gemma 3's keys beyond the common ones (llama.cpp's gemma3 loader): the
   window, the sliding layers' RoPE base, the final soft-cap. llama.cpp
   scales the scores by 1/sqrt(head size) (the 62-layer 27B: 1/sqrt(hidden
   / heads)), which query_pre_attn_scalar matches in Google's checkpoints;
   where it does not, gemma3.attention.scale carries the checkpoint's
   factor for dspark, and llama.cpp, which does not read it, would compute
   another model (said on log). */
static void add_gemma3(gguf_writer *w, const model_config *c, FILE *log) {
    add_window(w, c, "gemma3");
    gguf_w_f32(w, "gemma3.rope.freq_base_swa", (float)c->rope_local_theta);
    if (c->final_softcap > 0) gguf_w_f32(w, "gemma3.final_logit_softcapping", c->final_softcap);
    double q = c->n_layers == 62 ? (double)(c->hidden_size / c->n_heads) : (double)c->head_dim;
    if ((float)pow(q, -0.5) != c->attn_scale) {
        gguf_w_f32(w, "gemma3.attention.scale", c->attn_scale);
        if (log)
            fprintf(log, "dspark: note: query_pre_attn_scalar is not llama.cpp's for this shape: dspark reads the "
                         "scale from gemma3.attention.scale, llama.cpp ignores it\n");
    }
}

static void add_hparams(gguf_writer *w, const model_config *c, const char *dir, uint32_t file_type, FILE *log) {
    const char *a = llama_layout(c)              ? "llama"
                    : c->arch == ARCH_QWEN2     ? "qwen2"
                    : c->arch == ARCH_QWEN3_MOE ? "qwen3moe"
                    : c->arch == ARCH_GEMMA3    ? "gemma3"
                                                : "qwen3";
    char k[128], name[256];
    gguf_w_str(w, "general.architecture", a);
    snprintf(name, sizeof name, "%s", base_name(dir));
    char *slash = strchr(name, '/');
    if (slash) *slash = 0;
    gguf_w_str(w, "general.name", name);
    gguf_w_u32(w, "general.file_type", file_type);
    gguf_w_u32(w, "general.quantization_version", 2);
#define KEY(s) (snprintf(k, sizeof k, "%s." s, a), k)
    gguf_w_u32(w, KEY("context_length"), (uint32_t)c->max_position_embeddings);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)c->hidden_size);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)c->n_layers);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)c->intermediate_size);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)c->n_heads);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
    gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
    gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->rms_norm_eps);
    gguf_w_f32(w, KEY("rope.freq_base"), (float)c->rope_theta);
    if (llama_layout(c)) {
        gguf_w_u32(w, KEY("vocab_size"), (uint32_t)c->vocab_size);
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    }
    if (c->arch == ARCH_MISTRAL && c->sliding_window) {
        /* llama.cpp's llama graph attends to every position: the same
           logits while the context fits the window */
        add_window(w, c, a);
        if (log)
            fprintf(log, "dspark: note: llama.cpp's llama architecture ignores the sliding window (%d); "
                         "dspark applies it\n", c->sliding_window);
    }
    if (c->arch == ARCH_GEMMA3) add_gemma3(w, c, log);
    if (c->arch == ARCH_QWEN3_MOE) {
        gguf_w_u32(w, KEY("expert_count"), (uint32_t)c->moe_experts);
        gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)c->moe_top_k);
        gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c->moe_intermediate_size);
    }
    if (c->rope_type == ROPE_LINEAR) {
        gguf_w_str(w, KEY("rope.scaling.type"), "linear");
        gguf_w_f32(w, KEY("rope.scaling.factor"), c->rope_factor);
    }
#undef KEY
}

/* Writes tensor o through the writer, a batch of rows at a time. */
static int write_gguf_tensor(gguf_writer *w, const out_tensor *o, const model_config *c, tpool *tp, char *err,
                             size_t errlen) {
    if (!o->src) { /* rope_freqs: generated */
        float *f = xmalloc(sizeof(float) * (size_t)o->K);
        llama3_rope_factors(c, f);
        int rc = gguf_w_data(w, f, sizeof(float) * (size_t)o->K, err, errlen);
        free(f);
        return rc;
    }
    size_t rb = o->type == DT_F32                        ? 4 * (size_t)o->K
                : o->type == DT_F16 || o->type == DT_BF16 ? 2 * (size_t)o->K
                                                          : qenc_row_bytes(o->type, o->K);
    int64_t B = batch_rows(o->K, o->N);
    uint8_t *buf = xmalloc(rb * (size_t)B);
    int rc = 0;
    const int ne = o->experts ? o->n_experts : 1;
    for (int e = 0; e < ne && !rc; e++) { /* a stacked tensor: each expert's rows in turn */
        const tensor *src = o->experts ? o->experts[e] : o->src;
        for (int64_t r0 = 0; r0 < o->N && !rc; r0 += B) {
            rows_job j = {.src = src, .K = o->K, .r0 = r0, .nrows = o->N - r0 < B ? o->N - r0 : B,
                          .permute_hd = o->permute_hd, .add = o->add, .out = o->type, .row_bytes = rb, .buf = buf, .bad_row = -1};
            tp_run(tp, rows_worker, &j);
            if (j.bad_row >= 0)
                rc = ds_err(err, errlen, "%s: tensor %s row %d holds a NaN or infinity", src->file, src->name,
                            j.bad_row);
            else rc = gguf_w_data(w, buf, rb * (size_t)j.nrows, err, errlen);
        }
    }
    free(buf);
    return rc;
}

static int quantize_gguf(const char *dir, const char *out, qtype q, uint32_t file_type, const model_config *c,
                         const st_set *st, tpool *tp, FILE *log, char *err, size_t errlen) {
    out_tensor *v = NULL;
    int n = 0, rc = -1, vision = 0;
    int *used = xcalloc((size_t)st_set_count(st), sizeof(int));
    gguf_writer *w = gguf_w_new();
    const tensor *t;
    /* a gemma3 checkpoint's text model under the prefix it was saved with
       (as model.c binds it) */
    const char *pfx = "model.", *head = "lm_head.weight";
    if (c->arch == ARCH_GEMMA3 && !st_set_find(st, "model.embed_tokens.weight")) {
        if (st_set_find(st, "language_model.model.embed_tokens.weight"))
            pfx = "language_model.model.", head = "language_model.lm_head.weight";
        else if (st_set_find(st, "model.language_model.embed_tokens.weight"))
            pfx = "model.language_model.";
    }
    const layer_name *map = c->arch == ARCH_GEMMA3 ? GEMMA_MAP : LAYER_MAP;
    const int n_map = c->arch == ARCH_GEMMA3 ? N_GEMMA_MAP : N_LAYER_MAP;
    char hf[200];
#define FIND(name) (t = st_set_find(st, name))
#define USE()                                                                                              \
    do {                                                                                                   \
        for (int u = 0; u < st_set_count(st); u++)                                                         \
            if (st_set_get(st, u) == t) used[u] = 1;                                                       \
    } while (0)
    const tensor *lm_head = st_set_find(st, head);
    /* tied: llama.cpp reads the embedding as the output; an lm_head the
       checkpoint also carries is then the same matrix, left out */
    int has_output = lm_head && !c->tie_word_embeddings;
    snprintf(hf, sizeof hf, "%sembed_tokens.weight", pfx);
    if (!FIND(hf)) {
        ds_err(err, errlen, "%s: no %s", dir, hf);
        goto done;
    }
    USE();
    if (add_out(&v, &n, "token_embd.weight", t, has_output ? ROLE_OTHER : ROLE_TOKEN_EMBD, 0, c, q, err, errlen))
        goto done;
    if (llama_layout(c) && c->rope_type == ROPE_LLAMA3 &&
        add_out(&v, &n, "rope_freqs.weight", NULL, ROLE_OTHER, 0, c, q, err, errlen))
        goto done;
    for (int l = 0; l < c->n_layers; l++) {
        char gg[96];
        for (int m = 0; m < n_map; m++) {
            snprintf(hf, sizeof hf, "%slayers.%d.%s", pfx, l, map[m].hf);
            snprintf(gg, sizeof gg, "blk.%d.%s", l, map[m].gg);
            if (!FIND(hf)) continue;
            USE();
            if (add_out(&v, &n, gg, t, map[m].r, l, c, q, err, errlen)) goto done;
            if (llama_layout(c) && (strstr(hf, "q_proj") || strstr(hf, "k_proj")))
                v[n - 1].permute_hd = c->head_dim;
            /* Gemma's norms scale by (1 + w): llama.cpp's files store the sum */
            if (c->arch == ARCH_GEMMA3 && strstr(gg, "norm.weight")) v[n - 1].add = 1.0f;
        }
        if (!c->moe[l]) continue;
        /* a mixture of experts as llama.cpp's converter writes it: the router,
           each kind of expert matrix stacked into one 3-d tensor [E][rows][K] */
        snprintf(hf, sizeof hf, "model.layers.%d.mlp.gate.weight", l);
        snprintf(gg, sizeof gg, "blk.%d.ffn_gate_inp.weight", l);
        if (!FIND(hf)) {
            ds_err(err, errlen, "%s: no %s", dir, hf);
            goto done;
        }
        USE();
        if (add_out(&v, &n, gg, t, ROLE_ROUTER, l, c, q, err, errlen)) goto done;
        static const struct { const char *hf, *gg; role r; } EXP[] = {
            {"gate_proj", "ffn_gate_exps", ROLE_OTHER}, {"up_proj", "ffn_up_exps", ROLE_OTHER},
            {"down_proj", "ffn_down_exps", ROLE_FFN_DOWN}};
        for (int k = 0; k < 3; k++) {
            const tensor **ex = xcalloc((size_t)c->moe_experts, sizeof *ex);
            for (int e = 0; e < c->moe_experts; e++) {
                snprintf(hf, sizeof hf, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, EXP[k].hf);
                if (!FIND(hf) || t->ndim != 2 || (e && (t->shape[0] != ex[0]->shape[0] || t->shape[1] != ex[0]->shape[1]))) {
                    ds_err(err, errlen, "%s: %s is missing or not shaped as expert 0's", dir, hf);
                    free(ex);
                    goto done;
                }
                USE();
                ex[e] = t;
            }
            snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, EXP[k].gg);
            if (add_out(&v, &n, gg, ex[0], EXP[k].r, l, c, q, err, errlen)) {
                free(ex);
                goto done;
            }
            v[n - 1].experts = ex, v[n - 1].n_experts = c->moe_experts, v[n - 1].ndim = 3;
        }
    }
    snprintf(hf, sizeof hf, "%snorm.weight", pfx);
    if (!FIND(hf)) {
        ds_err(err, errlen, "%s: no %s", dir, hf);
        goto done;
    }
    USE();
    if (add_out(&v, &n, "output_norm.weight", t, ROLE_OTHER, 0, c, q, err, errlen)) goto done;
    if (c->arch == ARCH_GEMMA3) v[n - 1].add = 1.0f;
    if (lm_head) {
        t = lm_head;
        USE();
        if (has_output && add_out(&v, &n, "output.weight", t, ROLE_OUTPUT, 0, c, q, err, errlen)) goto done;
    }
    for (int u = 0; u < st_set_count(st); u++) {
        const tensor *x = st_set_get(st, u);
        if (used[u] || strstr(x->name, "rotary_emb.inv_freq")) continue;
        if (c->arch == ARCH_GEMMA3 && vision_tensor(x->name)) {
            vision++;
            continue;
        }
        ds_err(err, errlen, "%s: tensor %s has no GGUF name here (quantize knows the %s layout)", x->file, x->name,
               config_arch_name(c->arch));
        goto done;
    }
    if (vision && log)
        fprintf(log, "dspark: note: the vision tower's %d tensors are not written (llama.cpp keeps them in a "
                     "projector file of their own); the GGUF is the text model\n", vision);
#undef FIND
#undef USE
    add_hparams(w, c, dir, file_type, log);
    if (quantize_add_tokenizer(w, dir, c, log, err, errlen)) goto done;
    for (int i = 0; i < n; i++) {
        int64_t ne[3] = {v[i].K, v[i].N, v[i].n_experts};
        if (gguf_w_add_tensor(w, v[i].name, ggml_of(v[i].type), v[i].ndim, ne, err, errlen)) goto done;
    }
    if (gguf_w_begin(w, out, err, errlen)) goto done;
    for (int i = 0; i < n; i++) {
        if (log) fprintf(log, "[%3d/%3d] %-28s %-6s %s%lld x %lld\n", i + 1, n, v[i].name,
                         dtype_name(v[i].type),
                         v[i].experts ? "experts x " : "", (long long)v[i].N, (long long)v[i].K);
        if (write_gguf_tensor(w, &v[i], c, tp, err, errlen)) goto done;
    }
    rc = gguf_w_finish(w, err, errlen);
done:
    gguf_w_free(w);
    free(used);
    for (int i = 0; i < n; i++) free((void *)v[i].experts);
    free(v);
    return rc;
}

/* ---- MLX ---- */

typedef struct {
    char name[256];
    ds_dtype dtype;
    int64_t shape[3];
    int ndim;
    size_t nbytes;
} st_entry;

/* An expert's matrix PREFIXmlp.experts.E.PROJ.weight: E, and the module
   mlx-lm stacks the experts into, PREFIXmlp.switch_mlp.PROJ; -1 otherwise */
static int expert_of(const char *name, char *stack, size_t n) {
    const char *m = strstr(name, "mlp.experts.");
    if (!m) return -1;
    const char *p = m + 12;
    int e = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 6) e = e * 10 + (*p++ - '0'), digits++;
    if (!digits || *p != '.') return -1;
    p++;
    size_t pl = strlen(p);
    if (pl <= 7 || strcmp(p + pl - 7, ".weight") != 0) return -1;
    if (snprintf(stack, n, "%.*smlp.switch_mlp.%.*s", (int)(m - name), name, (int)(pl - 7), p) >= (int)n) return -1;
    return e;
}

/* expert e's matrix of the stack (the name of expert 0's with e in its place) */
static const tensor *expert_tensor(const st_set *st, const char *name0, int e) {
    char nm[300];
    const char *m = strstr(name0, "mlp.experts.0.");
    if (!m) return NULL;
    snprintf(nm, sizeof nm, "%.*smlp.experts.%d.%s", (int)(m - name0), name0, e, m + 14);
    return st_set_find(st, nm);
}

/* The safetensors header for entries laid end to end in order, padded
 * with spaces to a multiple of 8 bytes (the format's alignment). */
static char *st_header(const st_entry *e, int n, size_t *len) {
    cJSON *h = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(md, "format", "mlx");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(h, e[i].name);
        cJSON_AddStringToObject(t, "dtype", dtype_name(e[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < e[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e[i].shape[d]));
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + e[i].nbytes)));
        off += e[i].nbytes;
    }
    char *s = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t n0 = strlen(s), n1 = (n0 + 7) / 8 * 8;
    s = xrealloc(s, n1 + 1);
    memset(s + n0, ' ', n1 - n0);
    s[n1] = 0;
    *len = n1;
    return s;
}

static int fwrite_all(FILE *f, const void *p, size_t n, const char *path, char *err, size_t errlen) {
    if (n && fwrite(p, 1, n, f) != n) return ds_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

/* Whether t becomes NAME.weight/scales/biases: what mlx-lm quantizes, the
 * Linear and Embedding weights (2-D, named .weight) whose rows split into
 * whole groups. */
static int mlx_quantizable(const tensor *t, int group) {
    size_t n = strlen(t->name);
    return t->ndim == 2 && n > 7 && !strcmp(t->name + n - 7, ".weight") && t->shape[1] % group == 0 &&
           (t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16);
}

/* An MoE layer's router (PREFIXmlp.gate.weight): kept as stored in an MLX
   build, as in a GGUF (a rounded router changes which experts a row
   takes); its module is declared unquantized in config.json */
static int mlx_router(const tensor *t, int E) {
    static const char suf[] = ".mlp.gate.weight";
    size_t n = strlen(t->name), k = sizeof suf - 1;
    return E > 0 && n >= k && !strcmp(t->name + n - k, suf);
}

static void put_float_as(uint8_t *dst, float v, ds_dtype t) {
    if (t == DT_F32) memcpy(dst, &v, 4);
    else {
        uint16_t h = t == DT_BF16 ? ds_f32_to_bf16(v) : ds_f32_to_f16(v);
        memcpy(dst, &h, 2);
    }
}

/* The data of one switch_mlp stack: experts 0..E-1 of t's projection,
   their words one after another, then their scales, then their biases (or
   their floats, where the rows do not split into groups) */
static int write_mlx_stack(FILE *f, const char *path, const st_set *st, const tensor *t0, int E, int bits, int group,
                           tpool *tp, FILE *log, char *err, size_t errlen) {
    if (!mlx_quantizable(t0, group)) {
        for (int x = 0; x < E; x++) {
            const tensor *t = expert_tensor(st, t0->name, x);
            if (fwrite_all(f, t->data, t->nbytes, path, err, errlen)) return -1;
        }
        return 0;
    }
    const int64_t N = t0->shape[0], K = t0->shape[1], wpr = K * bits / 32, gpr = K / group;
    const size_t es = dtype_size(t0->dtype), per = (size_t)(N * gpr);
    uint8_t *sb = xmalloc(es * per * 2 * (size_t)E); /* scales [E][N][gpr], then biases */
    if (log) fprintf(log, "%-48s mlx%d g%d %d x %lld x %lld (stacked)\n", t0->name, bits, group, E, (long long)N,
                     (long long)K);
    int rc = 0;
    for (int x = 0; x < E && !rc; x++) {
        const tensor *t = expert_tensor(st, t0->name, x);
        rows_job j = {.src = t, .K = K, .r0 = 0, .nrows = N, .mlx_bits = bits, .group = group, .bad_row = -1};
        j.q = xmalloc(sizeof(uint32_t) * (size_t)(N * wpr));
        j.sc = xmalloc(sizeof(float) * per);
        j.bi = xmalloc(sizeof(float) * per);
        tp_run(tp, rows_worker, &j);
        for (size_t k = 0; k < per; k++) {
            put_float_as(sb + ((size_t)x * per + k) * es, j.sc[k], t0->dtype);
            put_float_as(sb + ((size_t)(E + x) * per + k) * es, j.bi[k], t0->dtype);
        }
        if (j.bad_row >= 0) rc = ds_err(err, errlen, "%s: tensor %s row %d holds a NaN or infinity", t->file, t->name,
                                        j.bad_row);
        if (!rc) rc = fwrite_all(f, j.q, sizeof(uint32_t) * (size_t)(N * wpr), path, err, errlen);
        free(j.q);
        free(j.sc);
        free(j.bi);
    }
    if (!rc) rc = fwrite_all(f, sb, es * per * 2 * (size_t)E, path, err, errlen);
    free(sb);
    return rc;
}

/* E > 0 (a mixture of experts): every mlp.experts.*.PROJ.weight is
   written as mlx-lm lays the experts out, stacked in PROJ's switch_mlp
   module ([E][rows][cols] words, scales and biases; or floats) */
static int write_mlx_weights(const char *path, const st_set *st, int bits, int group, int E, tpool *tp, FILE *log,
                             char *err, size_t errlen) {
    int ns = st_set_count(st), n = 0, rc = -1;
    st_entry *e = xcalloc((size_t)ns * 3 + 1, sizeof(st_entry));
    char stack[200];
    for (int i = 0; i < ns; i++) {
        const tensor *t = st_set_get(st, i);
        if (strstr(t->name, "rotary_emb.inv_freq")) continue;
        if (strlen(t->name) >= sizeof e[0].name - 8)
            return free(e), ds_err(err, errlen, "%s: tensor name %s too long", t->file, t->name);
        const int ex = E > 0 ? expert_of(t->name, stack, sizeof stack) : -1;
        if (ex > 0) continue; /* (stacked with expert 0) */
        if (ex == 0) {
            for (int k = 1; k < E; k++) {
                const tensor *o = expert_tensor(st, t->name, k);
                if (!o || o->ndim != 2 || o->shape[0] != t->shape[0] || o->shape[1] != t->shape[1] || o->dtype != t->dtype)
                    return free(e), ds_err(err, errlen, "%s: expert %d of %s is missing or differs in shape or dtype",
                                           t->file, k, stack);
            }
            const int qz = mlx_quantizable(t, group);
            for (int s2 = 0; s2 < (qz ? 3 : 1); s2++) {
                static const char *SUF[3] = {"weight", "scales", "biases"};
                snprintf(e[n].name, sizeof e[n].name, "%s.%s", stack, SUF[s2]);
                e[n].ndim = 3;
                e[n].shape[0] = E;
                e[n].shape[1] = t->shape[0];
                e[n].shape[2] = !qz ? t->shape[1] : s2 == 0 ? t->shape[1] * bits / 32 : t->shape[1] / group;
                e[n].dtype = qz && s2 == 0 ? DT_U32 : t->dtype;
                e[n].nbytes = (size_t)E * (size_t)e[n].shape[1] * (size_t)e[n].shape[2] *
                              (qz && s2 == 0 ? 4 : dtype_size(t->dtype));
                n++;
            }
            continue;
        }
        if (!mlx_quantizable(t, group) || mlx_router(t, E)) {
            snprintf(e[n].name, sizeof e[n].name, "%s", t->name);
            e[n].dtype = t->dtype;
            e[n].ndim = t->ndim > 2 ? 2 : t->ndim;
            if (t->ndim > 2) return free(e), ds_err(err, errlen, "%s: tensor %s has %d dims", t->file, t->name, t->ndim);
            for (int d = 0; d < t->ndim; d++) e[n].shape[d] = t->shape[d];
            e[n++].nbytes = t->nbytes;
            continue;
        }
        size_t base = strlen(t->name) - 7; /* without ".weight" */
        int64_t N = t->shape[0], K = t->shape[1];
        static const char *SUF[3] = {"weight", "scales", "biases"};
        for (int s = 0; s < 3; s++) {
            snprintf(e[n].name, sizeof e[n].name, "%.*s.%s", (int)base, t->name, SUF[s]);
            e[n].ndim = 2;
            e[n].shape[0] = N;
            e[n].shape[1] = s == 0 ? K * bits / 32 : K / group;
            e[n].dtype = s == 0 ? DT_U32 : t->dtype;
            e[n].nbytes = (size_t)N * (size_t)e[n].shape[1] * (s == 0 ? 4 : dtype_size(t->dtype));
            n++;
        }
    }
    size_t hlen;
    char *h = st_header(e, n, &hlen);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        free(e);
        return ds_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
    }
    uint64_t hl = hlen;
    if (fwrite_all(f, &hl, 8, path, err, errlen) || fwrite_all(f, h, hlen, path, err, errlen)) goto done;
    for (int i = 0; i < ns; i++) {
        const tensor *t = st_set_get(st, i);
        if (strstr(t->name, "rotary_emb.inv_freq")) continue;
        const int ex = E > 0 ? expert_of(t->name, stack, sizeof stack) : -1;
        if (ex > 0) continue;
        if (ex == 0) {
            if (write_mlx_stack(f, path, st, t, E, bits, group, tp, log, err, errlen)) goto done;
            continue;
        }
        if (!mlx_quantizable(t, group) || mlx_router(t, E)) {
            if (fwrite_all(f, t->data, t->nbytes, path, err, errlen)) goto done;
            continue;
        }
        int64_t N = t->shape[0], K = t->shape[1], wpr = K * bits / 32, gpr = K / group;
        if (log) fprintf(log, "%-48s mlx%d g%d %lld x %lld\n", t->name, bits, group, (long long)N, (long long)K);
        rows_job j = {.src = t, .K = K, .r0 = 0, .nrows = N, .mlx_bits = bits, .group = group, .bad_row = -1};
        j.q = xmalloc(sizeof(uint32_t) * (size_t)(N * wpr));
        j.sc = xmalloc(sizeof(float) * (size_t)(N * gpr));
        j.bi = xmalloc(sizeof(float) * (size_t)(N * gpr));
        tp_run(tp, rows_worker, &j);
        size_t es = dtype_size(t->dtype);
        uint8_t *sb = xmalloc(es * (size_t)(N * gpr) * 2);
        for (int64_t k = 0; k < N * gpr; k++) {
            put_float_as(sb + k * es, j.sc[k], t->dtype);
            put_float_as(sb + (size_t)(N * gpr + k) * es, j.bi[k], t->dtype);
        }
        int bad = j.bad_row >= 0;
        if (bad) ds_err(err, errlen, "%s: tensor %s row %d holds a NaN or infinity", t->file, t->name, j.bad_row);
        bad = bad || fwrite_all(f, j.q, sizeof(uint32_t) * (size_t)(N * wpr), path, err, errlen) ||
              fwrite_all(f, sb, es * (size_t)(N * gpr) * 2, path, err, errlen);
        free(j.q);
        free(j.sc);
        free(j.bi);
        free(sb);
        if (bad) goto done;
    }
    rc = 0;
done:
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) rc = rc ? rc : ds_err(err, errlen, "%s: %s", path, strerror(errno));
    if (fclose(f) != 0 && !rc) rc = ds_err(err, errlen, "%s: %s", path, strerror(errno));
    free(h);
    free(e);
    return rc;
}

static int copy_file(const char *from, const char *to, char *err, size_t errlen) {
    size_t len;
    char *d = ds_read_file(from, &len, err, errlen);
    if (!d) return -1;
    FILE *f = fopen(to, "wb");
    int rc = !f ? ds_err(err, errlen, "cannot write %s: %s", to, strerror(errno))
                : fwrite_all(f, d, len, to, err, errlen);
    if (f && fclose(f) != 0 && !rc) rc = ds_err(err, errlen, "%s: %s", to, strerror(errno));
    free(d);
    return rc;
}

/* The files an MLX folder carries beside its weights, copied when present. */
static const char *const MLX_COPY[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                       "generation_config.json", "chat_template.jinja", "vocab.json", "merges.txt",
                                       "tokenizer.model"};
#define N_MLX_COPY ((int)(sizeof MLX_COPY / sizeof MLX_COPY[0]))

static void remove_tree_files(const char *d) {
    char p[4200];
    const char *own[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++)
        if (ds_path_join(p, sizeof p, d, own[i]) == 0) unlink(p);
    for (int i = 0; i < N_MLX_COPY; i++)
        if (ds_path_join(p, sizeof p, d, MLX_COPY[i]) == 0) unlink(p);
    rmdir(d);
}

static int quantize_mlx(const char *dir, const char *out, int bits, int group, int E, const st_set *st, tpool *tp,
                        FILE *log,
                        char *err, size_t errlen) {
    struct stat sb;
    if (stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return ds_err(err, errlen, "%s exists and is not a directory (an MLX output is a folder)", out);
    char tmp[4096], p[4200], q[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    if (mkdir(tmp, 0755) != 0) return ds_err(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    int rc = -1;
    char *text = NULL, *js = NULL;
    cJSON *cfg = NULL;
    size_t len;
    if (ds_path_join(p, sizeof p, tmp, "model.safetensors") != 0) {
        ds_err(err, errlen, "path too long");
        goto done;
    }
    if (write_mlx_weights(p, st, bits, group, E, tp, log, err, errlen)) goto done;
    /* config.json: the checkpoint's, plus mlx-lm's "quantization" (and the
       "quantization_config" copy transformers reads) */
    ds_path_join(p, sizeof p, dir, "config.json");
    if (!(text = ds_read_file(p, &len, err, errlen))) goto done;
    if (!(cfg = cJSON_ParseWithLength(text, len))) {
        ds_err(err, errlen, "%s: not valid JSON", p);
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "quantization_config" : "quantization";
        cJSON_DeleteItemFromObjectCaseSensitive(cfg, key);
        cJSON *qo = cJSON_AddObjectToObject(cfg, key);
        cJSON_AddNumberToObject(qo, "group_size", group);
        cJSON_AddNumberToObject(qo, "bits", bits);
        for (int i = 0; i < st_set_count(st); i++) { /* the routers stay as stored */
            const tensor *t = st_set_get(st, i);
            if (!mlx_router(t, E)) continue;
            char mod[256];
            snprintf(mod, sizeof mod, "%.*s", (int)(strlen(t->name) - 7), t->name);
            cJSON_AddBoolToObject(qo, mod, 0);
        }
    }
    js = cJSON_Print(cfg);
    ds_path_join(p, sizeof p, tmp, "config.json");
    FILE *f = fopen(p, "wb");
    if (!f) {
        ds_err(err, errlen, "cannot write %s: %s", p, strerror(errno));
        goto done;
    }
    int bad = fwrite_all(f, js, strlen(js), p, err, errlen) || fwrite_all(f, "\n", 1, p, err, errlen);
    if (fclose(f) != 0 && !bad) bad = ds_err(err, errlen, "%s: %s", p, strerror(errno));
    if (bad) goto done;
    for (int i = 0; i < N_MLX_COPY; i++) {
        if (ds_path_join(p, sizeof p, dir, MLX_COPY[i]) != 0 || !ds_file_exists(p)) continue;
        ds_path_join(q, sizeof q, tmp, MLX_COPY[i]);
        if (copy_file(p, q, err, errlen)) goto done;
    }
    /* into place: rename fails on a folder that holds anything, so an
       existing model is never mixed with or replaced by this one */
    if (rename(tmp, out) != 0) {
        ds_err(err, errlen, "cannot move the MLX folder to %s: %s%s", out, strerror(errno),
               errno == ENOTEMPTY || errno == EEXIST ? " (it exists and is not empty)" : "");
        goto done;
    }
    rc = 0;
done:
    if (rc) remove_tree_files(tmp);
    cJSON_Delete(cfg);
    free(js);
    free(text);
    return rc;
}

/* ---- the command ---- */

int quantize_model(const char *dir, const char *out, const char *type, int group, int threads, FILE *log, char *err,
                   size_t errlen) {
    int qi = -1;
    for (int i = 0; i < (int)(sizeof QTYPES / sizeof QTYPES[0]); i++)
        if (type && !strcasecmp(type, QTYPES[i].name)) qi = i;
    if (qi < 0)
        return ds_err(err, errlen, "unknown quantization type \"%s\" (expected Q8_0, Q4_0, Q4_K, Q6_K, Q4_K_M, F32, F16, BF16, mlx4 or mlx8)",
                      type ? type : "");
    qtype q = QTYPES[qi].t;
    int mlx = q == QT_MLX4 || q == QT_MLX8;
    if (group && !mlx) return ds_err(err, errlen, "--group-size applies to the MLX types (mlx4, mlx8) only");
    if (!group) group = 64; /* mlx-lm's default */
    if (group != 32 && group != 64 && group != 128)
        return ds_err(err, errlen, "--group-size must be 32, 64 or 128, got %d", group);
    if (!out || !*out) return ds_err(err, errlen, "--out PATH is required");
    model_config c;
    if (config_load(&c, dir, err, errlen)) return -1;
    if (c.vision_skipped && mlx)
        return ds_err(err, errlen, "%s: an MLX build of a gemma3 checkpoint with a vision tower is not written yet", dir);
    if (c.moe_experts > 0 && !c.moe_norm_topk && !mlx)
        /* llama.cpp's qwen3moe graph always renormalizes the chosen weights */
        return ds_err(err, errlen, "%s: norm_topk_prob is false, which a qwen3moe GGUF cannot say", dir);
    st_set *st;
    if (st_set_open(&st, dir, err, errlen)) return -1;
    tpool *tp = tp_create(threads);
    int rc = mlx ? quantize_mlx(dir, out, q == QT_MLX4 ? 4 : 8, group, c.moe_experts, st, tp, log, err, errlen)
                 : quantize_gguf(dir, out, q, QTYPES[qi].file_type, &c, st, tp, log, err, errlen);
    tp_free(tp);
    st_set_close(st);
    return rc;
}

int cmd_quantize(const opts *o) {
    char err[1024];
    if (!o->qtype) cli_die("quantize: --type is required (Q8_0, Q4_0, Q4_K, Q6_K, Q4_K_M, F32, F16, BF16, mlx4 or mlx8)");
    if (!o->out) cli_die("quantize: --out PATH is required");
    double t0 = ds_now();
    if (quantize_model(o->model, o->out, o->qtype, o->group_size, o->threads, stderr, err, sizeof err) != 0)
        cli_die("quantize: %s", err);
    fprintf(stderr, "dspark: wrote %s (%s) in %.1f s\n", o->out, o->qtype, ds_now() - t0);
    return 0;
}
