// check.h: what the CPU runs of CUDA kernels (tests/cuemu/*.cc) share: a
// failed check's report (the first 20 of them), random inputs and the
// distance from a reference.
#ifndef DS_CUEMU_CHECK_H
#define DS_CUEMU_CHECK_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

static int failures = 0;
#define EXPECT(cond, ...)                                                                                            \
    do {                                                                                                             \
        if (!(cond) && failures++ < 20) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                   \
            fprintf(stderr, __VA_ARGS__);                                                                            \
            fputc('\n', stderr);                                                                                     \
        }                                                                                                            \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand() { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* how far got is from want: the largest difference over want's largest
   magnitude (a NaN: infinitely far) */
template <typename W> static double rel_off(const std::vector<float> &got, const std::vector<W> &want) {
    double big = 0, err = 0;
    for (size_t i = 0; i < want.size(); i++) {
        big = fmax(big, fabs((double)want[i]));
        const double d = fabs(got[i] - (double)want[i]);
        err = d != d ? INFINITY : fmax(err, d);
    }
    return err / (big > 0 ? big : 1);
}
#endif
