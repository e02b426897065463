/* cuda_moe: the mixture-of-experts MLP (desc.h wmoe, MLP_MOE: qwen3_moe)
 * on the GPU: the experts' upload, the per-context routing scratch, and
 * the two halves of the layer's MLP that cu_layer enqueues.
 *
 * The rule is engine/moe's, as the CPU runs it (cpu_backend.c moe_mlp):
 * each row's router logits (the exact matmul of its normed row) go through
 * an f32 softmax, its top_k experts are the largest probabilities (the
 * lower index first among equals), weighted by those probabilities
 * renormalized under norm_topk; the row's output is the sum over its
 * experts in ascending expert order of weight * down_e(silu(gate_e x) *
 * up_e x), added to the residual.
 *
 * Routing: on the device (the router matmul, then k_moe_route and
 * k_moe_plan), and the experts' matmuls launched by the host over the rows
 * routed to each expert, gathered: the host reads the experts' row counts
 * back (one stream synchronisation a layer), so a forward reads only the
 * chosen experts' weights, through the same matmul entry points as any
 * layer matrix (cu_matmul, cu_matmul_swiglu: bf16 / f16 / f32 and every
 * quantized format). That synchronisation cannot be captured in a CUDA
 * graph and stalls a chained step, so a model with experts runs its
 * forwards kernel by kernel (cuda_backend.cu: no graphs, no chained
 * decoding).
 *
 * Invariant: a row's bits never depend on the other rows of its forward.
 * The norm, the router matmul and the routing are per row; a gathered row
 * goes through an expert's matmul whose kernels give a row the same bits
 * at every launch width and place (the exact kernels at every width,
 * prefill rows included: the experts never take the cuBLAS groups, whose
 * bits follow the group); and the combine sums a row's experts in
 * ascending expert order from its own outputs. So a verify row equals the
 * row decoded alone, and a prefill row is the same in any chunking. */
#ifndef DS_CUDA_MOE_CUH
#define DS_CUDA_MOE_CUH

#include "engine/cuda/cuda_ops.cuh"

extern "C" {
#include "engine/desc.h"
}

/* A layer's experts on the device: the router [E][H]; every expert's gate
   (and up) rows stacked into one matrix [E * inter][H] and its down rows
   into one [E * H][inter] (expert e's rows from e * inter, e * H: one
   allocation a projection, each expert a row view, cu_moe_expert); the
   projections in one format each (every expert's the same). gu_apart: gate
   and up in different formats (each its own matmul, then the SwiGLU
   apart). */
struct dmoe {
    int E, K, norm, inter;
    dmat router, gate, up, down;
    int gu_apart;
};

/* e's experts (c: the model's shapes; l, who: for errors) into D,
   allocated in pl; an expert of another format or shape than the first,
   or of a dtype the kernels lack, is an error naming it */
int cu_moe_up(dev_pool *pl, dmoe *D, const wmoe *e, const model_config *c, int l, const char *who, char *err,
              size_t errlen);

struct dlayer; /* (cuda_layer.cuh, whose dlayer holds a dmoe) */

/* A context's routing scratch for forwards of up to rows rows (NULL for a
   model without experts): router logits, each row's experts, weights and
   their outputs' places, the rows gathered for the experts, the experts'
   row counts (device and pinned host). */
struct cu_moe_buf;
/* 1 when one of the n layers ls has experts */
int cu_moe_any(const dlayer *ls, int n);
/* bytes of device memory cu_moe_buf_create allocates for rows rows (0
   without experts) */
size_t cu_moe_buf_bytes(const model_config *c, const dlayer *ls, int n, int rows);
/* *out = the scratch (NULL without experts) */
int cu_moe_buf_create(cu_moe_buf **out, const model_config *c, const dlayer *ls, int n, int rows, char *err,
                      size_t errlen);
void cu_moe_buf_free(cu_moe_buf *b);
/* the first routing failure since the last check (a count read back that
   the plan cannot have made, or its copy failing), as an error; 0 when
   none (b may be NULL) */
int cu_moe_check(cu_moe_buf *b, char *err, size_t errlen);

/* The first half of an MoE layer's MLP over M rows: xb = RMSNorm(x, gn),
   the router logits, the routing, the host's read of the counts (the
   stream synchronised), the rows gathered, and each chosen expert's gate
   and up with the SwiGLU. omit & CU_OMIT_GU: none of it (then
   cu_moe_down adds nothing either: timing only). */
void cu_moe_gate_up(cu_go st, cu_moe_buf *b, const dmoe *D, const float *x, float *xb, const float *gn, int H,
                    float eps, int M, int omit);
/* The second half: each chosen expert's down projection, then y[m] =
   the weighted sum of row m's experts in ascending expert order, added
   onto y[m] under add (the residual add: y the hidden rows x). omit &
   CU_OMIT_DOWN: none of it. */
void cu_moe_down(cu_go st, cu_moe_buf *b, const dmoe *D, float *y, int add, int H, int M, int omit);

#endif
