// emu.h: runs a CUDA kernel's source on the CPU, for checking a kernel's
// indexing, masking, work split and synchronisation where no GPU is at
// hand. Each CUDA thread of a block is a fiber (ucontext) on one host
// thread; __syncthreads and the warp-wide operations (shuffles, mma.sync)
// are rendezvous that yield to the other fibers until every live thread of
// the block (or lane of the warp) has arrived, and a round in which no
// fiber can move is reported as a deadlock (a barrier some threads never
// reach). cp.async copies are held per thread until its wait_group lets
// them land, so a read of shared memory before the wait (or before the
// barrier after it) sees the block's initial NaNs instead of the data;
// a group lands at its commit on a coin toss, and warps are left out of
// scheduling passes at random, so a stage refilled while another warp
// still reads it shows too. Blocks run one after another.
//
// What it is not: a timing model, or the tensor core's arithmetic (mma is
// the exact product of the TF32-truncated operands, summed in double and
// rounded once). A kernel source compiled here takes this header in place
// of cuda_ops.cuh (its include guard is defined below), with the helpers it
// uses given CPU meanings; the constants come from the real header
// (consts.h, extracted by the Makefile).
#ifndef DS_CUEMU_H
#define DS_CUEMU_H

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define DS_CUDA_OPS_CUH /* the real helpers' header is replaced by this one */
#include "consts.h"

/* ---- CUDA syntax ---------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float4 {
    float x, y, z, w;
};
struct float2 {
    float x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef int cudaError_t;
typedef struct emu_stream_ *cudaStream_t;
enum { cudaSuccess = 0 };
enum { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrMultiProcessorCount = 16 };
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaFuncAttributes {
    size_t sharedSizeBytes;
};

namespace emu {

/* the device the launchers see: an H200's SM count and opt-in shared memory */
inline int sms = 132, smem_optin = 232448;

struct copy16 {
    void *dst;
    const void *src;
    bool zero;
};

struct fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    int tid = 0;
    bool done = false;
    std::vector<std::vector<copy16>> groups; /* committed cp.async groups, oldest first */
    std::vector<copy16> open;                /* issued since the last commit */
};

struct barrier {
    int count = 0;
    unsigned gen = 0;
};

inline std::vector<fiber> fibers;
inline int cur = -1, nthreads = 0;
inline ucontext_t sched;
inline std::function<void()> body;
inline barrier block_bar;
inline std::vector<barrier> warp_bar;
inline std::vector<uint32_t> slots; /* [warp][lane][16] words exchanged at warp rendezvous */
inline bool progress;
inline dim3 grid_dim, block_dim, block_idx;
/* the block's dynamic shared memory: the array a kernel declares extern
   __shared__ is defined by the test (a file-scope float4 array of
   smem_optin bytes) and registered here */
inline void *smem = nullptr;

[[noreturn]] inline void fail(const char *what) {
    fprintf(stderr, "cuemu: %s (block %u,%u,%u, thread %d)\n", what, block_idx.x, block_idx.y, block_idx.z,
            cur >= 0 ? fibers[cur].tid : -1);
    exit(2);
}

inline fiber &me() { return fibers[cur]; }
inline int lane() { return me().tid % 32; }
inline int warp() { return me().tid / 32; }
inline void yield() { swapcontext(&me().ctx, &sched); }

inline int exited(int lo, int hi) {
    int n = 0;
    for (int i = lo; i < hi && i < nthreads; i++) n += fibers[i].done;
    return n;
}

/* waits until every live thread in [lo, hi) has arrived at b */
inline void rendezvous(barrier &b, int lo, int hi) {
    if (hi > nthreads) hi = nthreads;
    const unsigned g = b.gen;
    b.count++;
    for (;;) {
        if (b.gen != g) return;
        if (b.count + exited(lo, hi) >= hi - lo) {
            b.count = 0;
            b.gen++;
            progress = true;
            return;
        }
        yield();
    }
}

inline void syncthreads() { rendezvous(block_bar, 0, nthreads); }
inline void syncwarp() { rendezvous(warp_bar[warp()], warp() * 32, warp() * 32 + 32); }
inline uint32_t *my_slot(int l = -1) { return &slots[((size_t)warp() * 32 + (l < 0 ? lane() : l)) * 16]; }

/* cp.async: held until a wait lets the group land */
inline void cp_issue(void *dst, const void *src, bool zero) { me().open.push_back({dst, src, zero}); }
/* the schedule's random choices (xorshift, fixed seed: a failure repeats) */
inline uint64_t rng = 0x2545f4914f6cdd1dull;
inline unsigned coin() {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 33);
}
inline void cp_land(const std::vector<copy16> &g);
/* a committed group lands at once (as it may on the GPU) on one commit in
   two, else at the wait that covers it */
inline void cp_commit() {
    if (coin() & 1) {
        cp_land(me().open);
        me().open.clear(); /* landed, but still counted by wait_group */
    }
    me().groups.push_back(me().open);
    me().open.clear();
}
inline void cp_land(const std::vector<copy16> &g) {
    for (const copy16 &c : g) {
        if (c.zero) memset(c.dst, 0, 16);
        else memcpy(c.dst, c.src, 16);
    }
}
/* all but the newest n committed groups land (uncommitted copies stay, as
   on the GPU) */
inline void cp_wait(int n) {
    std::vector<std::vector<copy16>> &gs = me().groups;
    while ((int)gs.size() > n) {
        cp_land(gs.front());
        gs.erase(gs.begin());
    }
}

inline void trampoline() {
    body();
    fiber &f = me();
    if (!f.open.empty()) fail("cp.async copies issued but never committed at the thread's end");
    cp_wait(0);
    f.done = true;
    progress = true;
    /* uc_link returns to the scheduler */
}

/* runs one block of the kernel call k on block_dim threads */
inline void run_block(const std::function<void()> &k) {
    nthreads = (int)(block_dim.x * block_dim.y * block_dim.z);
    if ((int)fibers.size() < nthreads) fibers.resize(nthreads);
    warp_bar.assign((nthreads + 31) / 32, barrier());
    slots.assign((size_t)warp_bar.size() * 32 * 16, 0);
    block_bar = barrier();
    body = k;
    for (int i = 0; i < nthreads; i++) {
        fiber &f = fibers[i];
        f.tid = i;
        f.done = false;
        f.groups.clear();
        f.open.clear();
        if (f.stack.empty()) f.stack.resize(128 << 10);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = &sched;
        makecontext(&f.ctx, trampoline, 0);
    }
    /* passes over the warps: in most, each warp is left out with odds of
       one in three, so warps drift apart between block barriers and a
       stage refilled while another warp still reads it shows; after a
       pass that moved nothing, one with every warp, and if that moves
       nothing either, the block is stuck */
    const int nw = (nthreads + 31) / 32;
    bool all = true;
    for (;;) {
        bool live = false;
        progress = false;
        for (int w = 0; w < nw; w++) {
            const bool run = all || coin() % 3 != 0;
            for (cur = 32 * w; cur < nthreads && cur < 32 * w + 32; cur++) {
                if (fibers[cur].done) continue;
                live = true;
                if (run) swapcontext(&sched, &fibers[cur].ctx);
            }
        }
        cur = -1;
        if (!live) break;
        if (!progress && all) fail("deadlock: threads wait at a barrier or warp operation the others never reach");
        all = !progress;
    }
}

/* a launch: every block in turn, its dynamic shared memory NaN-filled
   (0xff bytes) so a read of anything not yet written shows */
inline void launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &k) {
    if (smem_bytes > (size_t)smem_optin) fail("a launch asks for more shared memory than the device gives");
    if (smem_bytes && !smem) fail("a launch with shared memory, and no array registered for it");
    grid_dim = grid;
    block_dim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                block_idx = dim3(x, y, z);
                if (smem_bytes) memset(smem, 0xff, smem_bytes);
                run_block(k);
            }
}

/* the exchange behind the shuffles: lane l's v to the lane that asks for l */
inline uint32_t shfl(uint32_t v, int src) {
    *my_slot() = v;
    syncwarp();
    uint32_t r = *my_slot(src & 31);
    syncwarp();
    return r;
}

inline float tf32_of(uint32_t b) { return __uint_as_float(b & 0xffffe000u); }

/* mma.sync m16n8k8 TF32: every lane's fragments gathered, each lane's four
   outputs D = C + A B from them (A row r, column k: lane 4 (r % 8) + k % 4,
   register (r >= 8) + 2 (k >= 4); B row k, column n: lane 4 n + k % 4,
   register k >= 4; D (r, n): lane 4 (r % 8) + n / 2, register 2 (r >= 8) +
   n % 2) */
inline void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    uint32_t *s = my_slot();
    s[0] = a0, s[1] = a1, s[2] = a2, s[3] = a3, s[4] = b0, s[5] = b1;
    syncwarp();
    const int g = lane() / 4, t = lane() % 4;
    float out[4];
    for (int e = 0; e < 4; e++) {
        const int r = g + 8 * (e >= 2), n = 2 * t + (e & 1);
        double acc = d[e];
        for (int k = 0; k < 8; k++) {
            const uint32_t a = my_slot(4 * (r % 8) + k % 4)[(r >= 8) + 2 * (k >= 4)];
            const uint32_t b = my_slot(4 * n + k % 4)[4 + (k >= 4)];
            acc += (double)tf32_of(a) * (double)tf32_of(b);
        }
        out[e] = (float)acc;
    }
    syncwarp();
    for (int e = 0; e < 4; e++) d[e] = out[e];
}

} // namespace emu

#define threadIdx (dim3((unsigned)emu::me().tid % emu::block_dim.x, (unsigned)emu::me().tid / emu::block_dim.x, 0))
#define blockIdx (emu::block_idx)
#define gridDim (emu::grid_dim)
#define blockDim (emu::block_dim)

static inline void __syncthreads() { emu::syncthreads(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
static inline float __shfl_xor_sync(unsigned mask, float v, int off) {
    if (mask != 0xffffffffu) emu::fail("a shuffle with a partial mask (not modelled)");
    return __uint_as_float(emu::shfl(__float_as_uint(v), emu::lane() ^ off));
}

/* ---- the cuda_ops.cuh helpers the emulated kernels use ------------------- */

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static inline void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                            uint32_t b1) {
    emu::mma_tf32(d, a0, a1, a2, a3, b0, b1);
}
struct tf32x2 {
    uint32_t h, l;
};
static inline tf32x2 tf32_cut(float x) {
    uint32_t b = __float_as_uint(x);
    return {b, __float_as_uint(x - __uint_as_float(b & 0xffffe000u))};
}
static inline void cp_async16(void *smem, const void *gmem) { emu::cp_issue(smem, gmem, false); }
static inline void cp_async16_or_zero(void *smem, const void *gmem, bool ok) { emu::cp_issue(smem, gmem, !ok); }
static inline void cp_async_commit() { emu::cp_commit(); }
static inline void cp_async_wait_all() { emu::cp_wait(0); }
static inline void cp_async_wait_one() { emu::cp_wait(1); }
static inline void cp_async_wait_but(int n) { emu::cp_wait(n > 7 ? 7 : n); }
static inline void pdl_trigger() {}
static inline void pdl_wait() {}

struct cu_pf {
    const void *p[CU_PF_RANGES];
    size_t n[CU_PF_RANGES];
};
static inline void l2_prefetch(const cu_pf &, int, int) {}

/* the switches: set by the emulation tests through the kernel's own setter */
static inline int env_switch(int *mode, const char *, int set, int on) {
    if (*mode == -2) *mode = -1;
    int prev = *mode;
    if (set) *mode = on;
    return prev;
}

static inline int sm_count(void) { return emu::sms; }
static inline int cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
static inline int cudaDeviceGetAttribute(int *v, int attr, int) {
    *v = attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? emu::smem_optin : emu::sms;
    return cudaSuccess;
}
template <typename F> static inline int cudaFuncGetAttributes(cudaFuncAttributes *a, F) {
    a->sharedSizeBytes = 0;
    return cudaSuccess;
}
template <typename F> static inline int cudaFuncSetAttribute(F, int, int) { return cudaSuccess; }

/* a kernel's launch: the blocks run here, in turn, before it returns */
template <typename... KA, typename... A>
static inline void launch_smem(void (*k)(KA...), dim3 grid, dim3 block, size_t smem, cudaStream_t, A... args) {
    emu::launch(grid, block, smem, [&]() { k(args...); });
}
#endif
