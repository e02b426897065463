// no_attn_wg.h: for the CPU runs of the attention kernels (cuda_attn.cu):
// the warpgroup-mma prefill attention (cuda_attn_wg.cu: Hopper assembly) is
// not built here; cu_attention_tiled runs k_attn_tc without its scratch.
#ifndef DS_CUEMU_NO_ATTN_WG_H
#define DS_CUEMU_NO_ATTN_WG_H
int cu_attn_wg_ready(const cu_tuning *, int) { return 0; }
void cu_attn_wg_prep(cu_go, float *, cu_kv, int, int, int, const int *, int, int) {
    emu::fail("the warpgroup-mma prefill attention is not part of this run");
}
void cu_attn_wg(cu_go, const float *, float *, float *, float *, const float *, int, int, int, int, int,
                const int *, float, int, int, int) {
    emu::fail("the warpgroup-mma prefill attention is not part of this run");
}
#endif
