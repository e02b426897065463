/* cpu_internal: the CPU backend's layer pieces, shared by cpu_backend.c
 * and the tensor-parallel emulation (cpu_tpar.c), which runs a rank's
 * layer with the same functions over the rank's description (tpar.h).
 * Only those two files include it. */
#ifndef DS_CPU_INTERNAL_H
#define DS_CPU_INTERNAL_H

#include <stddef.h>

#include "engine/backend.h"
#include "engine/kv.h"

/* Activation scratch for up to B rows of one network's layers. */
typedef struct cpu_scratch {
    float *x, *xb;    /* [B][H] */
    float *q, *att;   /* [B][nh*hd] */
    float *k, *v;     /* [B][nkv*hd] */
    float *gate, *up; /* [B][max(I, the experts' width)] */
    int *pos;         /* [B] */
    /* MLP_MOE (a model with experts; else NULL): router probabilities
       [B][E], each row's experts and weights [B][top_k], gathered rows and
       an expert's outputs [B][H], the sum [B][H], the gathered rows' index */
    float *rp, *sw, *ex, *ey, *acc;
    int *sel, *who;
} cpu_scratch;

void cpu_scratch_init(cpu_scratch *s, const model_config *c, size_t B);
void cpu_scratch_free(cpu_scratch *s);
/* the scratch's bytes for B rows of config c (what cpu_scratch_init allocates, less the MoE buffers) */
size_t cpu_scratch_bytes(const model_config *c, size_t B);
/* y = x W^T (+ b) over M rows, rows [0, Mpre) through the prefill family */
void cpu_mm(tpool *tp, float *y, const float *x, int M, int Mpre, const tensor *W, const float *b);
/* the attention norm, q/k/v, q/k norms and RoPE of the M rows in s->x */
void cpu_layer_qkv(tpool *tp, cpu_scratch *s, const wlayer *L, const model_config *c, const float *inv_freq, int M,
                   int Mpre);
/* rows [off, off+M): their K/V stored at the end of kv (uncommitted), and their attention */
void cpu_layer_attn(tpool *tp, cpu_scratch *s, const wlayer *L, const model_config *c, kv_cache *kv, int l, int off,
                    int M, int n_past);
/* MLP_MOE over the M rows of s->xb into s->xb */
void cpu_moe_mlp(tpool *tp, cpu_scratch *s, const wmoe *e, int M, int Mpre, int H);
/* the rows8 layout for a model's matmul weights read into memory */
void cpu_layout(const model_desc *d);
/* a target this backend runs (its KV storage and its layers' kinds): 0, or
   -1 with err */
int cpu_check_desc(const model_desc *d, char *err, size_t errlen);
/* rows of a prefill group (BACKEND_GROUP_ROWS, or the tests' setting) */
int cpu_group_rows(void);
/* the copy of the batch's rows x [M][H] (rows row0..) into its taps of layer `layer` */
void cpu_tap_copy(const struct model_batch_s *b, const float *x, int layer, int row0, int M, int H);

/* the tensor-parallel emulation's table: backend_cpu's with the targets'
   functions over N ranks (cpu_tpar.c) */
const backend *cpu_tpar_backend(void);

#endif
