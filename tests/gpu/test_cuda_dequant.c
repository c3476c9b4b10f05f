/*
 * tests/gpu/test_cuda_dequant.c — CUDA dequantization equals the CPU reference
 * (pgd_dequant_row) bit for bit, for every supported type, on random blocks with odd row
 * lengths and row counts. Exit 77 (skipped) when no GPU is present. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/dequant.h"
#include "testutil.h"

static uint64_t rng = 0x1234567887654321ull;
static uint8_t rand_byte(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint8_t)rng;
}

/* Random bytes, with every f16/bf16 scale field made finite so comparisons are meaningful. */
static void fill(uint32_t type, uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) p[i] = rand_byte();
    const pgd_type_traits *tt = pgd_type_info(type);
    if (type == PGD_TYPE_F32) {
        for (uint64_t i = 0; i + 4 <= n; i += 4) p[i + 3] &= 0x3F; /* |x| < 2 */
    } else if (type == PGD_TYPE_F16 || type == PGD_TYPE_BF16) {
        for (uint64_t i = 0; i + 2 <= n; i += 2) p[i + 1] &= 0x3B;
    } else {
        int scales = (type == PGD_TYPE_Q4_1 || type == PGD_TYPE_Q5_1) ? 2 : 1;
        for (uint64_t b = 0; b < n / tt->type_size; b++)
            for (int s = 0; s < scales; s++) p[b * tt->type_size + 2 * s + 1] &= 0x3B;
    }
}

static void test_types(void) {
    static const uint32_t types[] = {PGD_TYPE_F32,  PGD_TYPE_F16,  PGD_TYPE_BF16, PGD_TYPE_Q8_0,
                                     PGD_TYPE_Q4_0, PGD_TYPE_Q4_1, PGD_TYPE_Q5_0, PGD_TYPE_Q5_1};
    static const int64_t shapes[][2] = {{1, 32}, {3, 576}, {7, 1536}, {130, 96}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            uint64_t rb;
            REQUIRE(pgd_row_bytes(types[t], (uint64_t)cols, &rb) == 0);
            uint8_t *h_src = malloc(rb * rows);
            float *want = malloc(sizeof(float) * rows * cols),
                  *got = malloc(sizeof(float) * rows * cols);
            fill(types[t], h_src, rb * rows);
            for (int64_t r = 0; r < rows; r++)
                REQUIRE(pgd_dequant_row(types[t], h_src + r * rb, want + r * cols, cols) == 0);
            void *d_src = NULL;
            float *d_dst = NULL;
            REQUIRE(cudaMalloc(&d_src, rb * rows) == cudaSuccess);
            REQUIRE(cudaMalloc((void **)&d_dst, sizeof(float) * rows * cols) == cudaSuccess);
            REQUIRE(cudaMemcpy(d_src, h_src, rb * rows, cudaMemcpyHostToDevice) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_dequant(types[t], d_src, d_dst, rows, cols, NULL), 0);
            REQUIRE(cudaMemcpy(got, d_dst, sizeof(float) * rows * cols, cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            int64_t bad = 0;
            for (int64_t i = 0; i < rows * cols; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
            if (bad)
                fprintf(stderr, "  type %s %lldx%lld: %lld elements differ\n",
                        pgd_type_info(types[t])->name, (long long)rows, (long long)cols,
                        (long long)bad);
            CHECK_EQ_INT(bad, 0);
            cudaFree(d_src);
            cudaFree(d_dst);
            free(h_src);
            free(want);
            free(got);
        }
    }
}

static void test_errors(void) {
    CHECK(pgd_cuda_dequant(PGD_TYPE_Q4_K, NULL, NULL, 1, 256, NULL) < 0);
    CHECK(pgd_cuda_dequant(PGD_TYPE_Q4_0, NULL, NULL, 1, 33, NULL) < 0);
}

int main(void) {
    if (pgd_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    RUN(test_types);
    RUN(test_errors);
    return test_summary();
}
