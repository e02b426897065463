/* drafter_internal: the weight struct shared by drafter_load.c (binding)
 * and drafter.c (the bookkeeping around the backend's forward pass). */
#ifndef DS_DRAFTER_INTERNAL_H
#define DS_DRAFTER_INTERNAL_H

#include "spec/drafter.h"
#include "engine/safetensors.h"
#include "engine/wbind.h"

struct dmodel {
    drafter_config cfg;
    const model *target;
    st_set *st;
    const tensor *fc;               /* [H][n_taps*H] */
    float *hidden_norm, *final_norm; /* [H] */
    wlayer *layers;
    const tensor *embed, *lm_head;  /* DSpark: its own or the target's (aliased); DFlash: the target's */
    const tensor *w1, *w2;          /* Markov head [V][r] each, or NULL */
    const tensor *conf_w;           /* confidence head [1][H(+r)], or NULL */
    float conf_b;
    int alias_embed, alias_head;
    float *inv_freq;                /* [hd/2] */
    float *owned;                   /* f32 norms + inv_freq */
    drafter_desc desc;              /* the above as the backend reads it */
    const backend *be;              /* the target's */
    void *bdm;                      /* the backend's copy */
};

#endif
