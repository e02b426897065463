// no_ops.h: for the CPU kernel runs that do not build src/engine/cuda/cuda_ops.cu,
// what the launchers reach in it: the build's kernel image says nothing of
// the device (0). And the launches' tuning: the defaults, which a run may
// change (G's).
#ifndef DS_CUEMU_NO_OPS_H
#define DS_CUEMU_NO_OPS_H
int cu_code_arch(char *, size_t) { return 0; }
#endif
