/*
 * tests/gpu/test_cuda_dequant.c — CUDA dequantization equals the CPU reference bit for bit:
 * pgd_cuda_dequant against pgd_dequant_row, pgd_cuda_dequant_bf16 against pgd_f32_to_bf16 of
 * it, for every supported type (K-quants included), on random valid blocks (random quants,
 * finite random f16 scales), odd row lengths and row counts, once with more than 65,535 rows.
 * Outputs are poisoned with NaN before each run; the seed is printed. Exit 77 (skipped) when no
 * GPU is present. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/dequant.h"
#include "testutil.h"
#include "gpu_testutil.h"

/* Byte offsets of a block's f16 scales (d, and m / dmin where there is one); -1 ends. */
static const int *scale_offsets(uint32_t type) {
    static const int at0[] = {0, -1}, at01[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1},
                     q6k[] = {208, -1}, none[] = {-1};
    switch (type) {
    case PGD_TYPE_Q4_0:
    case PGD_TYPE_Q5_0:
    case PGD_TYPE_Q8_0:
        return at0;
    case PGD_TYPE_Q4_1:
    case PGD_TYPE_Q5_1:
    case PGD_TYPE_Q4_K:
    case PGD_TYPE_Q5_K:
        return at01;
    case PGD_TYPE_Q2_K:
        return q2k;
    case PGD_TYPE_Q3_K:
        return q3k;
    case PGD_TYPE_Q6_K:
        return q6k;
    default:
        return none;
    }
}

/* Random bytes (every quant pattern is valid), with every float made finite: f16 scales and
 * f16/bf16 elements get an exponent below the maximum, f32 elements |x| < 2; signs stay. */
static void fill(uint32_t type, uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) p[i] = (uint8_t)gt_next();
    const pgd_type_traits *tt = pgd_type_info(type);
    if (type == PGD_TYPE_F32) {
        for (uint64_t i = 0; i + 4 <= n; i += 4) p[i + 3] &= 0xBF;
    } else if (type == PGD_TYPE_F16 || type == PGD_TYPE_BF16) {
        for (uint64_t i = 0; i + 2 <= n; i += 2) p[i + 1] &= 0xBB;
    } else {
        for (uint64_t b = 0; b < n / tt->type_size; b++)
            for (const int *o = scale_offsets(type); *o >= 0; o++)
                p[b * tt->type_size + (uint64_t)*o + 1] &= 0xBB;
    }
}

static void check_shape(uint32_t type, int64_t rows, int64_t cols) {
    const char *name = pgd_type_info(type)->name;
    const uint64_t n = (uint64_t)rows * (uint64_t)cols;
    uint64_t rb;
    REQUIRE(pgd_row_bytes(type, (uint64_t)cols, &rb) == 0);
    uint8_t *h_src = malloc(rb * rows);
    float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    uint16_t *want16 = malloc(sizeof(uint16_t) * n), *got16 = malloc(sizeof(uint16_t) * n);
    REQUIRE(h_src && want && got && want16 && got16);
    fill(type, h_src, rb * rows);
    for (int64_t r = 0; r < rows; r++)
        REQUIRE(pgd_dequant_row(type, h_src + r * rb, want + r * cols, cols) == 0);
    for (uint64_t i = 0; i < n; i++) want16[i] = pgd_f32_to_bf16(want[i]);
    void *d_src = gt_upload(h_src, rb * rows);
    float *d_dst = gt_poisoned(sizeof(float) * n);
    uint16_t *d_dst16 = gt_poisoned(sizeof(uint16_t) * n);
    REQUIRE(d_src && d_dst && d_dst16);
    CHECK_EQ_INT(pgd_cuda_dequant(type, d_src, d_dst, rows, cols, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_dequant_bf16(type, d_src, d_dst16, rows, cols, NULL), 0);
    REQUIRE(gt_download(got, d_dst, sizeof(float) * n) == 0);
    REQUIRE(gt_download(got16, d_dst16, sizeof(uint16_t) * n) == 0);
    uint64_t bad = gt_count_diff(name, got, want, n, sizeof(float));
    uint64_t bad16 = gt_count_diff(name, got16, want16, n, sizeof(uint16_t));
    if (bad || bad16)
        fprintf(stderr, "  type %s %lldx%lld: %llu f32 and %llu bf16 elements differ\n", name,
                (long long)rows, (long long)cols, (unsigned long long)bad,
                (unsigned long long)bad16);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(bad16, 0);
    cudaFree(d_src), cudaFree(d_dst), cudaFree(d_dst16);
    free(h_src), free(want), free(got), free(want16), free(got16);
}

static void test_types(void) {
    static const uint32_t types[] = {PGD_TYPE_F32,  PGD_TYPE_F16,  PGD_TYPE_BF16, PGD_TYPE_Q8_0,
                                     PGD_TYPE_Q4_0, PGD_TYPE_Q4_1, PGD_TYPE_Q5_0, PGD_TYPE_Q5_1,
                                     PGD_TYPE_Q2_K, PGD_TYPE_Q3_K, PGD_TYPE_Q4_K, PGD_TYPE_Q5_K,
                                     PGD_TYPE_Q6_K};
    /* rows, blocks per row; the last one has more rows than a grid's y dimension allows */
    static const int64_t shapes[][2] = {{1, 1}, {3, 18}, {7, 48}, {130, 3}, {65541, 1}};
    for (size_t t = 0; t < PGD_ARRAY_LEN(types); t++) {
        CHECK(pgd_cuda_dequant_supported(types[t]));
        const int64_t bs = pgd_type_info(types[t])->block_size;
        for (size_t s = 0; s < PGD_ARRAY_LEN(shapes); s++)
            check_shape(types[t], shapes[s][0], shapes[s][1] * bs);
    }
}

static void test_errors(void) {
    uint16_t *none16 = NULL;
    CHECK(!pgd_cuda_dequant_supported(PGD_TYPE_Q8_1));
    CHECK_EQ_INT(pgd_cuda_dequant(PGD_TYPE_Q8_1, NULL, NULL, 1, 32, NULL), PGD_EUNSUPPORTED);
    CHECK_EQ_INT(pgd_cuda_dequant_bf16(PGD_TYPE_IQ2_XXS, NULL, none16, 1, 256, NULL),
                 PGD_EUNSUPPORTED);
    CHECK_EQ_INT(pgd_cuda_dequant(PGD_TYPE_Q4_0, NULL, NULL, 1, 33, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_dequant_bf16(PGD_TYPE_Q4_K, NULL, none16, 1, 128, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_dequant(PGD_TYPE_F32, NULL, NULL, -1, 4, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_dequant(PGD_TYPE_F32, NULL, NULL, 4, -1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_dequant(PGD_TYPE_Q6_K, NULL, NULL, 0, 256, NULL), 0); /* no launch */
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_types);
    RUN(test_errors);
    return test_summary();
}
