/* the CUDA header, for the CPU runs of tests/cuemu: emu.h gives what the kernels use */
#include "emu.h"
