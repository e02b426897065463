/* hooks: entry points that only the tests call. They are defined in src/
 * beside the state they reach, and declared here rather than in the
 * modules' public headers. */
#ifndef DS_TEST_HOOKS_H
#define DS_TEST_HOOKS_H

#include "engine/memfit.h"
#include "spec/drafter.h"

/* ops.c: 0 forces the scalar kernels, 1 the SIMD ones where the CPU has
 * them (the result must agree to rounding); returns the previous setting */
int ops_use_simd(int on);

/* cpu_backend.c: the rows of a prefill group (g <= 0: BACKEND_GROUP_ROWS
 * again); g = 1 sends every row of a quantized model through the prefill
 * family, which the short golden fixtures could not otherwise reach */
void cpu_test_group_rows(int g);

/* drafter.c: after propose, the logits rows the drafts came from and the
 * confidences. base: the LM-head rows ([rows][vocab]: DSpark rows 0..k-1,
 * DFlash the mask rows 1..k); markov: DSpark's biased rows (NULL
 * otherwise); conf: DSpark's confidences (NULL otherwise). Returns rows. */
int dstate_last(const dstate *ds, const float **base, const float **markov, const float **conf);
/* drafter.c: the context features C_t (after fc and hidden_norm) of the
 * last features() call's rows, [n][hidden] */
const float *dstate_last_ctx(const dstate *ds, int *n);

/* memfit.c: memfit_read_sys reports *fake instead of reading /proc (NULL:
 * /proc again); fake must outlive its use */
void memfit_test_sys(const memfit_sys *fake);

#endif
