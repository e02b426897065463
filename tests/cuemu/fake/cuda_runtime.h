/* cuemu: the kernels compiled on the CPU need nothing from the CUDA runtime header (emu.h has it) */
