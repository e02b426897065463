/* wbind: binding the tensors of a loaded safetensors set to a network's
 * weights, with the checks every loader needs: each tensor the network
 * expects must exist with a float dtype (F32, F16, BF16) and the expected
 * shape, and afterwards nothing may be left over (a tensor nobody claimed
 * means the file is not the network the config says). Shared by the target
 * model and the drafters so both refuse bad files with the same messages. */
#ifndef DS_WBIND_H
#define DS_WBIND_H

#include <stddef.h>

#include "engine/config.h"
#include "engine/desc.h"
#include "engine/qspec.h"
#include "engine/safetensors.h"

typedef struct {
    st_set *st;
    const qspec *q;   /* the declared quantization, or NULL (none) */
    const char *what; /* names the network in errors, e.g. "qwen3" or "DSpark drafter" */
    char **names;     /* every name claimed so far */
    int n_names, cap_names;
    char *err;
    size_t errlen;
    const char *skip[4]; /* name prefixes of tensors that belong to another network (a vision tower) */
    int n_skip;
} wbind;

/* q: config.json's declared quantization (qspec.h), or NULL for none. */
void wbind_init(wbind *b, st_set *st, const qspec *q, const char *what, char *err, size_t errlen);
void wbind_done(wbind *b); /* frees the claimed-name list */
/* Finds and claims a tensor, checking dtype and shape ([d0] when d1 == 0,
 * else [d0][d1]). NULL with err filled when missing or wrong. A matrix
 * may be quantized: a GGUF block type (checked by quant_check), or MLX's
 * NAME.weight U32 words with NAME.scales and NAME.biases, which are
 * claimed with it and joined into one DT_MLX tensor (owned by the set);
 * its bits and group size, read from the shapes, must be what the
 * config declares for that module. */
const tensor *wbind_get(wbind *b, const char *name, int64_t d0, int64_t d1);
/* 0 when every tensor in the set was claimed (rotary_emb.inv_freq buffers
 * and names under b->skip are ignored), else -1 naming the first stray
 * tensor. */
int wbind_check_leftovers(wbind *b);
/* Widens a claimed tensor into f32 at *pool and advances the pool. */
float *wbind_f32(float **pool, const tensor *t);


/* Floats of pool one layer of config c takes. */
size_t wbind_layer_floats(const model_config *c);
/* Binds layer l, whose tensor names start with prefix (e.g.
 * "model.layers.3."), as config c describes it (q/k norms, biases; an MoE
 * layer's router and experts, mlp.gate.weight and the published per-expert
 * mlp.experts.E.{gate,up,down}_proj.weight, into *moe, whose pointer arrays
 * it allocates: wbind_moe_free). 0, or -1 with the binder's error filled. */
int wbind_layer(wbind *b, const char *prefix, const model_config *c, int l, float **pool, wlayer *L, wmoe *moe);
void wbind_moe_free(wmoe *moe);

#endif
