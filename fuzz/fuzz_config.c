/* fuzz_config: libFuzzer target for config.json and generation_config.json
 * parsing. The input is parsed as config.json; when accepted, the RoPE
 * frequencies are computed (exercising the scaling paths on whatever
 * parameters got through validation) and the input is parsed again as
 * generation_config.json over the result. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    model_config c;
    const char *text = (const char *)data;
    if (config_parse(&c, text, size, "config.json", err, sizeof err) == 0) {
        float *inv = malloc(sizeof(float) * (size_t)(c.head_dim / 2 + 1));
        config_rope_inv_freq(&c, inv);
        free(inv);
        if (c.n_eos < 0 || c.n_eos > CONFIG_MAX_EOS || c.head_dim % 2) __builtin_trap();
    } else {
        /* a plausible base so the generation path sees a real config */
        c = (model_config){.arch = ARCH_QWEN3, .vocab_size = 151936, .bos_token_id = -1};
    }
    model_config before = c;
    if (config_parse_generation(&c, text, size, "generation_config.json", err, sizeof err) != 0) {
        if (c.n_eos != before.n_eos || c.bos_token_id != before.bos_token_id) __builtin_trap();
    } else if (c.n_eos < 0 || c.n_eos > CONFIG_MAX_EOS) {
        __builtin_trap();
    }
    return 0;
}
