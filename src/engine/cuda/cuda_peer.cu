/* cuda_peer: how two GPUs of this host reach each other (backend.h
 * backend_query_peer), for `doctor`'s tensor-parallel section: the
 * runtime's peer access and its link attributes. Touches no context
 * beyond the runtime's own. */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int cuda_peer_info(int a, int b, int *access, int *atomics, int *rank, char *err, size_t errlen) {
    int can = 0, v = 0;
    *access = 0, *atomics = 0, *rank = -1;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, a, b);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "CUDA devices %d and %d: peer access query failed: %s", a, b, cudaGetErrorString(e));
        return -1;
    }
    *access = can;
    if (!can) return 0;
    if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, a, b) == cudaSuccess) *atomics = v;
    if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, a, b) == cudaSuccess) *rank = v;
    return 0;
}
