// no_ops.h: for the CPU kernel runs that do not build src/engine/cuda/cuda_ops.cu,
// what the launchers reach in it: the build's kernel image says nothing of
// the device (0), and no cu_pdl_off or cu_pdl_late_scope scope is open.
#ifndef DS_CUEMU_NO_OPS_H
#define DS_CUEMU_NO_OPS_H
int cu_code_arch(char *, size_t) { return 0; }
thread_local int cu_pdl_off_depth = 0;
thread_local int cu_pdl_late_depth = 0;
#endif
