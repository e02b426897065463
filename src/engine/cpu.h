/* cpu: runtime CPU feature detection, so one binary runs everywhere and
 * picks the AVX2+FMA+F16C kernels only where they exist. */
#ifndef DS_CPU_H
#define DS_CPU_H

int cpu_has_avx2(void);   /* AVX2 and FMA and F16C, OS-enabled (XSAVE/YMM) */
int cpu_has_avx512(void); /* AVX-512 F+BW+VL+DQ (and cpu_has_avx2), OS-enabled (opmask/ZMM state) */
int cpu_count(void);      /* online logical CPUs */
const char *cpu_name(void); /* brand string, or "unknown" */

/* The instruction-set extensions a report shows ("avx2", "avx512f",
 * "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile"), each
 * present only where the OS enables its register state too. Returns the
 * count written (at most cap). */
typedef struct {
    const char *name;
    int present;
} cpu_feature;
int cpu_feature_list(cpu_feature *out, int cap);

#endif
