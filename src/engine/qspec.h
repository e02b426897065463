/* qspec: the weight quantization a checkpoint's config.json declares, as
 * mlx-lm writes it: "quantization" (or the same under
 * "quantization_config"): {"group_size": G, "bits": B, "mode": "affine",
 * MODULE: {"group_size": g, "bits": b} | false, ...}, the per-module
 * entries overriding the defaults (false: that module is not quantized).
 * Other quantization methods ("quant_method": "gptq", "awq", "fp8", ...)
 * and other MLX modes are refused by name. The tensors themselves say
 * which modules are quantized (a U32 weight with its .scales and
 * .biases); wbind checks each against what this declares. */
#ifndef DS_QSPEC_H
#define DS_QSPEC_H

#include <stddef.h>

typedef struct {
    char *module; /* "model.layers.0.mlp.down_proj" */
    int bits;     /* 0: not quantized (false) */
    int group;
} qspec_override;

typedef struct {
    int bits, group; /* the defaults; bits 0: the config declares no quantization */
    int n;
    qspec_override *ov;
} qspec;

/* Parses config.json's text. 0 (q->bits 0 when there is no quantization),
 * or -1 with err naming the key. */
int qspec_parse(qspec *q, const char *text, size_t n, const char *ctx, char *err, size_t errlen);
/* qspec_parse of dir/config.json. */
int qspec_load(qspec *q, const char *dir, char *err, size_t errlen);
void qspec_free(qspec *q);
/* The bits and group size declared for a module (its weight's name
 * without ".weight"): 1 quantized, 0 not. */
int qspec_for(const qspec *q, const char *module, int *bits, int *group);
/* Whether bits and group are ones the kernels implement. */
int qspec_supported(int bits, int group);

#endif
