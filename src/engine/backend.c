/* backend: the table of backends this build has. See backend.h. */
#include "engine/backend.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#ifdef DSPARK_CUDA
const backend *cuda_backend_table(void);
int cuda_device_count(void);
int cuda_peer_info(int a, int b, int *access, int *atomics, int *rank, char *err, size_t errlen);
#endif

const backend *backend_for(const char *d, int *index, char *err, size_t errlen) {
    *index = 0;
    if (!d || !*d || !strcmp(d, "cpu")) return &backend_cpu;
    int gpu = -1;
    if (!strcmp(d, "cuda")) gpu = 0;
    else if (!strncmp(d, "cuda:", 5)) {
        char *end;
        long g = strtol(d + 5, &end, 10);
        if (d[5] && !*end && g >= 0 && g < 64) gpu = (int)g;
    }
    if (gpu < 0) {
        ds_err(err, errlen, "device \"%s\": expected cpu, cuda or cuda:N", d);
        return NULL;
    }
    *index = gpu;
#ifdef DSPARK_CUDA
    return cuda_backend_table();
#else
    ds_err(err, errlen, "this dspark was built without CUDA (build it with `make cuda`)");
    return NULL;
#endif
}

int backend_device_count(const char *name) {
#ifdef DSPARK_CUDA
    if (name && !strcmp(name, "cuda")) return cuda_device_count();
#endif
    (void)name;
    return 0;
}

int backend_built(const char *name) {
    if (name && !strcmp(name, "cpu")) return 1;
#ifdef DSPARK_CUDA
    if (name && !strcmp(name, "cuda")) return 1;
#endif
    return 0;
}

int backend_query_device(const char *name, int device, backend_device_info *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
#ifdef DSPARK_CUDA
    if (name && !strcmp(name, "cuda")) {
        const backend *b = cuda_backend_table();
        int n = cuda_device_count();
        if (device < 0 || device >= n) return ds_err(err, errlen, "CUDA device %d does not exist (%d visible)", device, n);
        if (!b->device_info) return ds_err(err, errlen, "the CUDA backend reports no device details");
        return b->device_info(device, out, err, errlen);
    }
#endif
    (void)device;
    if (name && !strcmp(name, "cpu")) return ds_err(err, errlen, "the CPU backend has no devices of its own");
    return ds_err(err, errlen, "this dspark was built without the %s backend", name ? name : "(null)");
}

int backend_query_peer(const char *name, int a, int b, backend_peer_info *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->perf_rank = -1;
#ifdef DSPARK_CUDA
    if (name && !strcmp(name, "cuda")) {
        int n = cuda_device_count();
        if (a < 0 || a >= n || b < 0 || b >= n || a == b)
            return ds_err(err, errlen, "CUDA devices %d and %d: two distinct devices of %d visible", a, b, n);
        return cuda_peer_info(a, b, &out->peer_access, &out->native_atomics, &out->perf_rank, err, errlen);
    }
#endif
    (void)a;
    (void)b;
    if (name && !strcmp(name, "cpu")) return ds_err(err, errlen, "the CPU backend has no devices of its own");
    return ds_err(err, errlen, "this dspark was built without the %s backend", name ? name : "(null)");
}
