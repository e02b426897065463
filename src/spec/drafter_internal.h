/* drafter_internal: the weight struct shared by drafter_load.c (binding)
 * and drafter.c (the forward pass). */
#ifndef DS_DRAFTER_INTERNAL_H
#define DS_DRAFTER_INTERNAL_H

#include "engine/cuda/cuda_drafter.h"
#include "spec/drafter.h"
#include "engine/safetensors.h"
#include "engine/wbind.h"

typedef wlayer dlayer;

struct dmodel {
    drafter_config cfg;
    const model *target;
    st_set *st;
    const tensor *fc;               /* [H][n_taps*H] */
    float *hidden_norm, *final_norm; /* [H] */
    dlayer *layers;
    const tensor *embed, *lm_head;  /* DSpark: its own or the target's (aliased); DFlash: the target's */
    const tensor *w1, *w2;          /* Markov head [V][r] each, or NULL */
    const tensor *conf_w;           /* confidence head [1][H(+r)], or NULL */
    float conf_b;
    int alias_embed, alias_head;
    float *inv_freq;                /* [hd/2] */
    float *owned;                   /* f32 norms + inv_freq */
    cuda_dmodel *cu;                /* the device copy when the target is on a GPU, else NULL */
};

#endif
