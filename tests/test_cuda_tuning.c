/* Tests for cuda_tuning.c, the CUDA backend's tuning parser (plain C, so it
 * runs without a GPU): the defaults, specs that set fields (both
 * separators, negative values, omit's kernel list, fma's name), and the
 * refusals, each naming the culprit and leaving the tuning as it was. */
#include <string.h>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_tuning.h"
#include "test.h"

TEST(cuda_tuning_defaults) {
    cu_tuning t = cu_tuning_defaults();
    CHECK(t.pdl == 1 && t.pdl_late == -1 && t.swiglu2 == -1 && t.fma == 0 && t.qkv_tail == 1 && t.cut == 1);
    CHECK(t.gemm_rows == CUDA_GEMM_MIN_ROWS && t.prefill_rows == CUDA_PREFILL_ROWS);
    CHECK(t.argmax_split == 1 && t.graphs == 1 && t.att_wg == 1 && t.att_spread == -1 && t.att_wide == 1);
    CHECK(t.att_early == 1 && t.sample == -1 && t.chain == 1 && t.omit == 0);
    char err[256];
    cu_tuning u = t;
    CHECK(cu_tuning_parse(NULL, &u, err, sizeof err) == 0 && cu_tuning_parse("", &u, err, sizeof err) == 0);
    CHECK(!memcmp(&u, &t, sizeof t));
}

TEST(cuda_tuning_parse_good) {
    char err[256];
    cu_tuning t = cu_tuning_defaults();
    CHECK_MSG(cu_tuning_parse("pdl=0,graphs=0,gemm_rows=4,att_spread=1", &t, err, sizeof err) == 0, "%s", err);
    CHECK(t.pdl == 0 && t.graphs == 0 && t.gemm_rows == 4 && t.att_spread == 1 && t.att_wide == 1);
    CHECK_MSG(cu_tuning_parse("att_spread=-1/sample=1/prefill_rows=256", &t, err, sizeof err) == 0, "%s", err);
    CHECK(t.att_spread == -1 && t.sample == 1 && t.prefill_rows == 256 && t.pdl == 0);
    CHECK_MSG(cu_tuning_parse("omit=qkv+down,fma=fma", &t, err, sizeof err) == 0, "%s", err);
    CHECK(t.omit == (CU_OMIT_QKV | CU_OMIT_DOWN) && t.fma == 1);
    CHECK_MSG(cu_tuning_parse("omit=0,fma=0,gemm_rows=0", &t, err, sizeof err) == 0, "%s", err);
    CHECK(t.omit == 0 && t.fma == 0 && t.gemm_rows == 0);
}

TEST(cuda_tuning_parse_bad) {
    const char *bad[][2] = {
        {"pdl=0,bogus=1", "bogus"},     {"att_wide=2", "att_wide=2"}, {"graphs=", "graphs="},
        {"graphs=1x", "graphs=1x"},      {"pdl", "'pdl'"},             {"omit=qkv+mlp", "mlp"},
        {"att_spread=-2", "att_spread"}, {"prefill_rows=0", "prefill_rows=0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        cu_tuning t = cu_tuning_defaults(), d = t;
        CHECK_MSG(cu_tuning_parse(bad[i][0], &t, err, sizeof err) != 0, "%s accepted", bad[i][0]);
        CHECK_MSG(strstr(err, bad[i][1]) != NULL, "%s: the error does not name %s: %s", bad[i][0], bad[i][1], err);
        CHECK_MSG(!memcmp(&t, &d, sizeof t), "%s: the tuning changed", bad[i][0]);
    }
}
