/*
 * tests/gpu/test_cuda_gemm_deq.c — the products over 8- and 4-bit weights through cuBLASLt on
 * their values dequantized to bf16, chunk by chunk (kernels/cuda/gemm.h's pgd_cuda_gemm_deq):
 *   - the weights: random f32 rows quantized by the CPU (pgd_quantize_row_q8_0 / _q4_1), the
 *     blocks split onto the device as a GGUF file's are; the reference's W is the blocks' values
 *     rounded to bf16 on the host (pgd_f32_to_bf16 of f16(d) q, of fmaf(f16(d), q, f16(m)));
 *   - against the GEMM's CPU twin on those bf16 values: every row within test_cuda_gemm.c's
 *     tolerance (f32 out), or that plus bf16's rounding with no element far off (bf16 out), at
 *     M = 1, 5, 64 and 300, for N that one chunk holds, that chunks of 128s split evenly, and
 *     that leaves a shorter last chunk — Y poisoned with NaN first, so a chunk's columns left
 *     unwritten or written past show;
 *   - in one chunk, with the split-free plan, the bits of pgd_cuda_gemm_run over the bf16 values
 *     uploaded from the host (the same product, the same algorithm); and a row's bits the same
 *     at every M (the split-free plans);
 *   - Y's rows N + 40 apart (pgd_cuda_gemm_deq_create_ld: a fused product's part), every
 *     chunking: each row within the tolerance, none left poisoned, the gaps untouched;
 *   - refusals: the GEMV mode, K not a multiple of 32, a scratch of fewer than 128 rows, rows
 *     closer than N.
 * Random data, seed printed. Exit 77 (skipped) without a GPU. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemm.h"
#include "testutil.h"
#include "gpu_testutil.h"

enum { MAX_M = 300, REF = 12 };

/* W [N][K] in `bits` bits on the device (q8 or q4 set) and its values as bf16 on the host. */
typedef struct qweights {
    uint32_t bits, N, K;
    pgd_q8_mat q8;
    pgd_q4_mat q4;
    uint16_t *h; /* host bf16 [N][K] */
} qweights;

static void make_weights(qweights *w, uint32_t bits, uint32_t N, uint32_t K) {
    *w = (qweights){.bits = bits, .N = N, .K = K};
    const uint64_t nb = (uint64_t)N * K / 32, bsz = bits == 8 ? 34 : 20;
    float *x = malloc((uint64_t)K * sizeof *x);
    uint8_t *blocks = malloc(nb * bsz);
    w->h = malloc((uint64_t)N * K * 2);
    REQUIRE(x && blocks && w->h);
    const float scale = 1.0f / sqrtf((float)K);
    for (uint32_t n = 0; n < N; n++) {
        for (uint32_t k = 0; k < K; k++) x[k] = gt_frand() * scale;
        uint8_t *row = blocks + (uint64_t)n * (K / 32) * bsz;
        if (bits == 8) {
            pgd_quantize_row_q8_0(x, row, K);
            const pgd_block_q8_0 *b = (const pgd_block_q8_0 *)row;
            for (uint32_t k = 0; k < K; k++)
                w->h[(uint64_t)n * K + k] =
                    pgd_f32_to_bf16(pgd_f16_to_f32(b[k / 32].d) * (float)b[k / 32].qs[k % 32]);
        } else {
            pgd_quantize_row_q4_1(x, row, K);
            const pgd_block_q4_1 *b = (const pgd_block_q4_1 *)row;
            for (uint32_t k = 0; k < K; k++) {
                const uint32_t j = k % 32,
                               q = j < 16 ? b[k / 32].qs[j] & 15 : b[k / 32].qs[j - 16] >> 4;
                w->h[(uint64_t)n * K + k] = pgd_f32_to_bf16(
                    fmaf(pgd_f16_to_f32(b[k / 32].d), (float)q, pgd_f16_to_f32(b[k / 32].m)));
            }
        }
    }
    uint8_t *src = gt_upload(blocks, nb * bsz);
    REQUIRE(src);
    if (bits == 8) {
        REQUIRE(cudaMalloc((void **)&w->q8.q, (uint64_t)N * K) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&w->q8.d, nb * 2) == cudaSuccess);
        REQUIRE(pgd_cuda_q8_split(src, N, K, w->q8, NULL) == 0);
    } else {
        REQUIRE(cudaMalloc((void **)&w->q4.q, (uint64_t)N * K / 2) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&w->q4.dm, nb * 4) == cudaSuccess);
        REQUIRE(pgd_cuda_q4_split(src, N, K, w->q4, NULL) == 0);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    cudaFree(src);
    free(blocks);
    free(x);
}

static void free_weights(qweights *w) {
    cudaFree(w->q8.q), cudaFree(w->q8.d), cudaFree(w->q4.q), cudaFree(w->q4.dm);
    free(w->h);
}

static int run_deq(pgd_cuda_gemm *g, pgd_cuda_gemm_deq *d, const uint16_t *dX, const qweights *w,
                   uint16_t *scratch, void *dY, uint32_t M) {
    return w->bits == 8 ? pgd_cuda_gemm_deq_q8(g, d, dX, w->q8, scratch, dY, M, NULL)
                        : pgd_cuda_gemm_deq_q4(g, d, dX, w->q4, scratch, dY, M, NULL);
}

/* Row m of Y (f32 or bf16 [.][N]) against the twin's row: relative L2 error; elements off by
 * more than bf16's rounding of the value plus the row's scale counted into *far (NaN too). */
static double row_error(const void *Y, bool bf16, const float *ref, uint32_t m, uint32_t N,
                        uint64_t *far) {
    double d = 0, r = 0;
    for (uint32_t n = 0; n < N; n++) r += (double)ref[n] * ref[n];
    const double rms = sqrt(r / N);
    for (uint32_t n = 0; n < N; n++) {
        const uint64_t i = (uint64_t)m * N + n;
        const double got = bf16 ? pgd_bf16_to_f32(((const uint16_t *)Y)[i]) : ((const float *)Y)[i];
        const double e = got - ref[n];
        d += e * e;
        *far += !(fabs(e) <= 0x1p-8 * (fabs(ref[n]) + rms));
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* W [N][K] in `bits` bits, chunks of what `scratch_rows` rows of K hold. */
static void check(pgd_cuda_gemm *g, uint32_t bits, uint32_t N, uint32_t K, uint32_t scratch_rows) {
    static const uint32_t ms[] = {1, 5, 64, MAX_M};
    qweights w;
    make_weights(&w, bits, N, K);
    const uint64_t scratch_bytes = (uint64_t)scratch_rows * K * 2, ny = (uint64_t)MAX_M * N;
    const uint32_t rows = pgd_gemm_deq_rows(N, K, scratch_bytes);
    uint16_t *X = malloc((uint64_t)MAX_M * K * 2);
    float *Yref = malloc((uint64_t)REF * N * 4);
    void *Y = malloc(ny * 4), *Yall = malloc(ny * 4);
    REQUIRE(X && Yref && Y && Yall);
    for (uint64_t i = 0; i < (uint64_t)MAX_M * K; i++) X[i] = pgd_f32_to_bf16(gt_frand());
    pgd_cuda_gemm_twin(X, w.h, Yref, REF, N, K);
    uint16_t *dX = gt_upload(X, (uint64_t)MAX_M * K * 2), *scratch = gt_poisoned(scratch_bytes);
    void *dY = gt_poisoned(ny * 4);
    REQUIRE(dX && scratch && dY);
    for (int out = 0; out < 2; out++) {
        const bool bf16 = out == 1;
        const size_t ey = bf16 ? 2 : 4;
        const double tol = fmax(1e-5, K * 0x1p-27) + (bf16 ? 0x1p-9 : 0);
        for (int mode = 0; mode < 2; mode++) {
            pgd_cuda_gemm_deq *d = NULL;
            REQUIRE(pgd_cuda_gemm_deq_create(
                        g, N, K, MAX_M, scratch_bytes, (pgd_cuda_gemm_mode)mode,
                        bf16 ? PGD_CUDA_GEMM_OUT_BF16 : PGD_CUDA_GEMM_OUT_F32, &d) == 0);
            CHECK(pgd_cuda_gemm_deq_scratch(d) <= scratch_bytes);
            for (size_t i = 0; i < PGD_ARRAY_LEN(ms); i++) {
                const uint32_t M = ms[i];
                REQUIRE(cudaMemset(dY, 0xFF, ny * ey) == cudaSuccess);
                CHECK_EQ_INT(run_deq(g, d, dX, &w, scratch, dY, M), 0);
                CHECK(gt_download(Y, dY, (uint64_t)M * N * ey) == 0);
                double worst = 0;
                uint64_t far = 0;
                for (uint32_t m = 0; m < M && m < REF; m++) {
                    const double e = row_error(Y, bf16, Yref + (uint64_t)m * N, m, N, &far);
                    if (!(e <= worst)) worst = e;
                }
                if (M == MAX_M)
                    fprintf(stderr,
                            "    %u-bit %u x %u in chunks of %u, %s out, %s: worst row error "
                            "vs twin %.2e, %llu far\n",
                            bits, N, K, rows, bf16 ? "bf16" : "f32", mode ? "fast" : "split-free",
                            worst, (unsigned long long)far);
                CHECK(worst <= tol);
                CHECK_EQ_INT(far, 0);
                /* rows past the first REF: nothing left poisoned */
                uint64_t nan = 0;
                for (uint64_t i2 = 0; i2 < (uint64_t)M * N; i2++)
                    nan += bf16 ? (((uint16_t *)Y)[i2] & 0x7fff) > 0x7f80 : isnan(((float *)Y)[i2]);
                CHECK_EQ_INT(nan, 0);
                if (mode == PGD_CUDA_GEMM_INVARIANT) { /* a row's bits whatever M is */
                    if (M == 1)
                        memcpy(Yall, Y, (uint64_t)N * ey);
                    else
                        CHECK(memcmp(Yall, Y, (uint64_t)N * ey) == 0);
                }
            }
            pgd_cuda_gemm_deq_destroy(d);
        }
    }
    /* one chunk, split-free: the bits of the bf16 product over the host's values */
    if (rows == N) {
        pgd_cuda_gemm_deq *d = NULL;
        pgd_cuda_gemm_plan *p = NULL;
        uint16_t *dW = gt_upload(w.h, (uint64_t)N * K * 2);
        REQUIRE(dW);
        REQUIRE(pgd_cuda_gemm_deq_create(g, N, K, MAX_M, scratch_bytes, PGD_CUDA_GEMM_INVARIANT,
                                         PGD_CUDA_GEMM_OUT_F32, &d) == 0);
        REQUIRE(pgd_cuda_gemm_plan_create(g, N, K, MAX_M, PGD_CUDA_GEMM_INVARIANT,
                                          PGD_CUDA_GEMM_OUT_F32, &p) == 0);
        CHECK_EQ_INT(run_deq(g, d, dX, &w, scratch, dY, MAX_M), 0);
        CHECK(gt_download(Y, dY, ny * 4) == 0);
        REQUIRE(cudaMemset(dY, 0xFF, ny * 4) == cudaSuccess);
        CHECK_EQ_INT(pgd_cuda_gemm_run(g, p, dX, dW, dY, MAX_M, NULL), 0);
        CHECK(gt_download(Yall, dY, ny * 4) == 0);
        CHECK_EQ_INT(gt_count_diff("dequantized vs bf16 product", Y, Yall, ny, 4), 0);
        pgd_cuda_gemm_plan_destroy(p);
        pgd_cuda_gemm_deq_destroy(d);
        cudaFree(dW);
    }
    /* Y's rows ldy apart (pgd_cuda_gemm_deq_create_ld: a fused product's part), f32 out, fast
     * plans, M = MAX_M: each row's N columns within the tolerance of the twin and none left
     * poisoned, the rest of each row untouched */
    const uint32_t ldy = N + 40;
    const uint64_t nl = (uint64_t)MAX_M * ldy;
    float *dYl = gt_poisoned(nl * 4), *hl = malloc(nl * 4);
    pgd_cuda_gemm_deq *dl = NULL;
    REQUIRE(dYl && hl);
    REQUIRE(pgd_cuda_gemm_deq_create_ld(g, N, K, ldy, MAX_M, scratch_bytes, PGD_CUDA_GEMM_FAST,
                                        PGD_CUDA_GEMM_OUT_F32, &dl) == 0);
    CHECK_EQ_INT(run_deq(g, dl, dX, &w, scratch, dYl, MAX_M), 0);
    CHECK(gt_download(hl, dYl, nl * 4) == 0);
    uint64_t far = 0, gap = 0, nan = 0;
    double worst = 0;
    for (uint32_t m = 0; m < MAX_M; m++) {
        const float *row = hl + (uint64_t)m * ldy;
        for (uint32_t n = N; n < ldy; n++) gap += memcmp(&row[n], "\xff\xff\xff\xff", 4) != 0;
        for (uint32_t n = 0; n < N; n++) nan += isnan(row[n]);
        const double e = m < REF ? row_error(row, false, Yref + (uint64_t)m * N, 0, N, &far) : 0;
        if (!(e <= worst)) worst = e;
    }
    fprintf(stderr, "    %u-bit %u x %u, rows %u apart: worst row error vs twin %.2e\n", bits, N, K,
            ldy, worst);
    CHECK(worst <= fmax(1e-5, K * 0x1p-27));
    CHECK_EQ_INT(far, 0);
    CHECK_EQ_INT(nan, 0);
    CHECK_EQ_INT(gap, 0);
    pgd_cuda_gemm_deq_destroy(dl);
    cudaFree(dYl);
    free(hl);
    cudaFree(dX), cudaFree(scratch), cudaFree(dY);
    free(X), free(Yref), free(Y), free(Yall);
    free_weights(&w);
}

static void test_products(void) {
    pgd_cuda_gemm *g = NULL;
    REQUIRE(pgd_cuda_gemm_create(32u << 20, &g) == 0);
    for (uint32_t bits = 8; bits >= 4; bits -= 4) {
        check(g, bits, 200, 96, 256);  /* one chunk */
        check(g, bits, 512, 160, 300); /* two chunks of 256 */
        check(g, bits, 700, 96, 300);  /* 256, 256 and 188 */
    }
    pgd_cuda_gemm_destroy(g);
}

static void test_refuses(void) {
    pgd_cuda_gemm *g = NULL;
    pgd_cuda_gemm_deq *d = (pgd_cuda_gemm_deq *)(uintptr_t)16; /* a refusal sets NULL */
    REQUIRE(pgd_cuda_gemm_create(32u << 20, &g) == 0);
    CHECK_EQ_INT(pgd_cuda_gemm_deq_create(g, 256, 64, 16, 1u << 20, PGD_CUDA_GEMM_FAST_GEMV,
                                          PGD_CUDA_GEMM_OUT_F32, &d),
                 PGD_EINVAL);
    CHECK(d == NULL);
    CHECK_EQ_INT(pgd_cuda_gemm_deq_create(g, 256, 48, 16, 1u << 20, PGD_CUDA_GEMM_FAST,
                                          PGD_CUDA_GEMM_OUT_F32, &d),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_deq_create(g, 256, 64, 16, 127 * 64 * 2, PGD_CUDA_GEMM_FAST,
                                          PGD_CUDA_GEMM_OUT_F32, &d),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_deq_create(g, 0, 64, 16, 1u << 20, PGD_CUDA_GEMM_FAST,
                                          PGD_CUDA_GEMM_OUT_F32, &d),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_deq_create_ld(g, 256, 64, 255, 16, 1u << 20, PGD_CUDA_GEMM_FAST,
                                             PGD_CUDA_GEMM_OUT_F32, &d),
                 PGD_EINVAL); /* rows closer than N */
    pgd_cuda_gemm_plan *p = NULL;
    CHECK_EQ_INT(pgd_cuda_gemm_plan_create_ld(g, 64, 64, 32, 16, PGD_CUDA_GEMM_FAST,
                                              PGD_CUDA_GEMM_OUT_F32, &p),
                 PGD_EINVAL); /* rows closer than their width */
    CHECK_EQ_INT(pgd_cuda_gemm_plan_create_ld(g, 64, 64, 128, 16, PGD_CUDA_GEMM_FAST_GEMV,
                                              PGD_CUDA_GEMM_OUT_F32, &p),
                 PGD_EINVAL);
    CHECK(p == NULL);
    pgd_cuda_gemm_destroy(g);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_products);
    RUN(test_refuses);
    return test_summary();
}
