/* fuzz_drafter_config: libFuzzer target for drafter config.json parsing
 * (both the z-lab DFlash and the DeepSpec DSpark key layouts). Whatever is
 * accepted must be internally consistent: a known kind, block size and tap
 * count within bounds, the mask id inside the vocabulary. */
#include <stddef.h>
#include <stdint.h>

#include "spec/drafter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    drafter_config c;
    if (drafter_config_parse(&c, (const char *)data, size, "config.json", err, sizeof err) != 0) return 0;
    if (c.kind != DRAFTER_DFLASH && c.kind != DRAFTER_DSPARK) __builtin_trap();
    if (c.block_size < 2 || c.block_size > DRAFTER_MAX_BLOCK) __builtin_trap();
    if (c.n_taps < 1 || c.n_taps > DRAFTER_MAX_TAPS) __builtin_trap();
    if (c.mask_token_id < 0 || c.mask_token_id >= c.base.vocab_size) __builtin_trap();
    if (c.markov_rank < 0 || (c.confidence_with_markov && c.markov_rank == 0)) __builtin_trap();
    for (int i = 0; i < c.n_taps; i++)
        if (c.tap_layers[i] < -1) __builtin_trap();
    return 0;
}
