/* Tests for qspec.c: the quantization an MLX config.json declares (as
 * mlx-community's folders write it), per-module overrides, and the
 * refusals, each naming what it found. */
#include <string.h>

#include "engine/qspec.h"
#include "test.h"

static int parse(qspec *q, const char *json, char *err, size_t errlen) {
    return qspec_parse(q, json, strlen(json), "config.json", err, errlen);
}

TEST(qspec_none) {
    qspec q;
    char err[256];
    CHECK_EQ_INT(parse(&q, "{\"model_type\":\"qwen3\"}", err, sizeof err), 0);
    CHECK_EQ_INT(q.bits, 0);
    int b = 1, g = 1;
    CHECK_EQ_INT(qspec_for(&q, "model.layers.0.mlp.up_proj", &b, &g), 0);
    qspec_free(&q);
    CHECK_EQ_INT(parse(&q, "{\"quantization\":null}", err, sizeof err), 0);
    CHECK_EQ_INT(q.bits, 0);
    qspec_free(&q);
}

/* mlx-community/Qwen3-0.6B-4bit writes both keys, the same */
TEST(qspec_mlx_community) {
    qspec q;
    char err[256];
    const char *cfg = "{\"model_type\":\"qwen3\",\"quantization\":{\"group_size\":64,\"bits\":4},"
                      "\"quantization_config\":{\"group_size\":64,\"bits\":4}}";
    CHECK_EQ_INT(parse(&q, cfg, err, sizeof err), 0);
    CHECK_EQ_INT(q.bits, 4);
    CHECK_EQ_INT(q.group, 64);
    int b = 0, g = 0;
    CHECK_EQ_INT(qspec_for(&q, "model.layers.3.self_attn.q_proj", &b, &g), 1);
    CHECK_EQ_INT(b, 4);
    CHECK_EQ_INT(g, 64);
    qspec_free(&q);
    /* only quantization_config, with the newer "mode" */
    CHECK_EQ_INT(parse(&q, "{\"quantization_config\":{\"group_size\":32,\"bits\":8,\"mode\":\"affine\"}}", err,
                       sizeof err),
                 0);
    CHECK_EQ_INT(q.bits, 8);
    CHECK_EQ_INT(q.group, 32);
    qspec_free(&q);
}

TEST(qspec_overrides) {
    qspec q;
    char err[256];
    const char *cfg = "{\"quantization\":{\"group_size\":64,\"bits\":4,"
                      "\"model.layers.0.mlp.down_proj\":{\"group_size\":32,\"bits\":8},"
                      "\"model.layers.1.mlp.down_proj\":{\"bits\":6},"
                      "\"lm_head\":false}}";
    CHECK_EQ_INT(parse(&q, cfg, err, sizeof err), 0);
    int b = 0, g = 0;
    CHECK_EQ_INT(qspec_for(&q, "model.layers.0.mlp.down_proj", &b, &g), 1);
    CHECK(b == 8 && g == 32);
    CHECK_EQ_INT(qspec_for(&q, "model.layers.1.mlp.down_proj", &b, &g), 1);
    CHECK(b == 6 && g == 64); /* the default group */
    CHECK_EQ_INT(qspec_for(&q, "lm_head", &b, &g), 0);
    CHECK_EQ_INT(qspec_for(&q, "model.layers.2.mlp.down_proj", &b, &g), 1);
    CHECK(b == 4 && g == 64);
    qspec_free(&q);
}

TEST(qspec_refusals) {
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"quantization\":{\"group_size\":64,\"bits\":7}}", "bits 7"},
        {"{\"quantization\":{\"group_size\":48,\"bits\":4}}", "group_size 48"},
        {"{\"quantization\":{\"bits\":4}}", "\"group_size\""},
        {"{\"quantization\":{\"group_size\":64,\"bits\":4,\"mode\":\"mxfp4\"}}", "mxfp4"},
        {"{\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128}}", "gptq"},
        {"{\"quantization\":{\"group_size\":64,\"bits\":4,\"model.layers.0.mlp.up_proj\":{\"bits\":9}}}",
         "model.layers.0.mlp.up_proj"},
        {"{\"quantization\":[4]}", "object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qspec q;
        char err[512] = "";
        CHECK_MSG(parse(&q, bad[i].json, err, sizeof err) == -1, "accepted %s", bad[i].json);
        CHECK_MSG(strstr(err, bad[i].want) != NULL, "%s: error \"%s\" does not name %s", bad[i].json, err,
                  bad[i].want);
    }
}
