// The device argmax (src/engine/cuda/cuda_argmax.cu) run on the CPU by emu.h: one
// block a row (k_argmax) and the split form (the tuning's argmax_split: a
// block a slice, the row's last block merging the pairs), against the
// first largest value's index, over widths from one slice to a Qwen3
// vocabulary (151,936) and one past it (not a multiple of 4), several rows
// at once, ties inside a slice and across slices, -inf values, a row of
// -inf, and a second call on the same scratch (the count reset by the last
// block).
#include "../../src/engine/cuda/cuda_argmax.cu"
#include "check.h"
#include "no_ops.h"

static cu_tuning tn = cu_tuning_defaults(); /* the launches' tuning: argmax_split varied */

static int first_max(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int main(void) {
    const int widths[] = {100, 2048, 4097, 30001, 151936, 151937};
    for (int n : widths) {
        const int rows = n > 100000 ? 3 : 5;
        std::vector<float> x((size_t)rows * n);
        for (float &v : x) v = frand();
        /* row 0: the largest value at many places, every 97th from the
           end back to a third of the row (ties inside slices, across lanes
           and across slices: the first wins) */
        for (int p = n - 1; p >= n / 3; p -= 97) x[(size_t)p] = 2.0f;
        /* row 1: -inf everywhere but a tie of two inside one slice late in the row */
        for (int i = 0; i < n; i++) x[(size_t)n + i] = -INFINITY;
        x[(size_t)n + n - 3] = x[(size_t)n + n - 2] = 0.5f;
        /* row 2: all -inf (answer 0) */
        for (int i = 0; i < n; i++) x[2 * (size_t)n + i] = -INFINITY;
        cu_am am;
        char err[128];
        EXPECT(cu_am_create(&am, rows, n, err, sizeof err) == 0, "n=%d: %s", n, err);
        for (int split = 0; split < 2; split++)
            for (int call = 0; call < 2; call++) {
                tn.argmax_split = split;
                std::vector<int> out(rows, -7);
                cu_argmax(cu_go_on(nullptr, &tn), out.data(), x.data(), rows, n, &am);
                for (int m = 0; m < rows; m++) {
                    const int want = first_max(&x[(size_t)m * n], n);
                    EXPECT(out[m] == want, "n=%d row %d %s (call %d): %d, want %d", n, m, split ? "split" : "one block",
                           call, out[m], want);
                }
                if (split && am.cnt)
                    for (int m = 0; m < rows; m++) EXPECT(am.cnt[m] == 0, "n=%d: row %d's count left at %u", n, m, am.cnt[m]);
            }
        printf("  n=%-6d %d rows: %s\n", n, rows, am.nb ? "one block a row and split agree with the first largest" : "one block a row (one slice) agrees");
        cu_am_free(&am);
    }
    if (failures) {
        fprintf(stderr, "cuemu argmax: %d checks failed\n", failures);
        return 1;
    }
    printf("cuemu argmax: both kernels give the first largest index\n");
    return 0;
}
