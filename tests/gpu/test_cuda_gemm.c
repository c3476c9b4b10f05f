/*
 * tests/gpu/test_cuda_gemm.c — the cuBLASLt GEMM (kernels/cuda/gemm.h) on the model's shapes:
 *   - against its CPU twin (double accumulation of the same bf16 inputs): every row within a
 *     relative L2 error of max(1e-5, K * 2^-27). The twin is exact to ~1e-16; the tensor cores'
 *     f32 accumulation is not round-to-nearest, and its error grows with K, not with sqrt(K)
 *     as rounding errors would: on an H200 the worst row was 1.1e-9 * K (5.0e-7 at K = 576, 4.1e-6
 * at 4096, 1.6e-5 at 14336); the bound is about 7 times that. A wrong element or a bf16 rounding of
 *     the output errs by 1e-3 or more;
 *   - determinism: the rows of a deterministic plan are bit-identical at M = 1, 3, 7, 64, 300
 *     and 512 (the algorithm is fixed per shape, without split-K), so a row's result does not
 * depend on the batch;
 *   - a `fast` plan stays within the same tolerance, and within one of its ranges of M
 *     (pgd_cuda_gemm_bucket) a row's bits do not depend on M either (M = 3 and 7; 300 and 512);
 *   - a fast plan with the GEMV kernel (PGD_CUDA_GEMM_FAST_GEMV) runs M = 1 on it, with the bits
 *     of its twin pgd_cuda_gemv_twin, and more rows on cuBLASLt; the kernel itself, called at
 *     M = 3 and 7 (2 and 4 columns a warp), gives the twin's bits too (which are independent of
 *     M); it refuses bad shapes;
 *   - a plan with bf16 output (PGD_CUDA_GEMM_OUT_BF16): within that tolerance plus bf16's
 *     rounding, no element far off, the same determinism across M; its GEMV rows refused;
 *   - the GEMV ending in SiLU * up (pgd_cuda_gemv_silu) gives the bits of the GEMV then
 *     pgd_cuda_silu_mul, at M = 1, 2, 3, 7 and 8; at one row, with 4, 8 and 16 of a lane's loads
 *     in flight, with the first round of loads before the wait for the previous kernel, and
 *     in the lean instance (pgd_cuda_gemv_loads), both forms give the same bits as the default.
 * Random data (never zeros), seed printed. Exit 77 (skipped) without a GPU. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/silu_mul.h"
#include "testutil.h"
#include "gpu_testutil.h"

static uint64_t g_rng;

static double urand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1.0p-53;
}

static void fill_bf16(uint16_t *p, uint64_t n, double scale) {
    for (uint64_t i = 0; i < n; i++) p[i] = pgd_f32_to_bf16((float)((urand() * 2 - 1) * scale));
}

static double row_rel_l2(const float *a, const float *b, uint32_t n) {
    double d = 0, r = 0;
    for (uint32_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static void check_shape(pgd_cuda_gemm *g, uint32_t N, uint32_t K) {
    enum { MAX_M = 512 };
    static const uint32_t ms[] = {1, 3, 7, 64, 300, MAX_M};
    uint16_t *X = malloc((uint64_t)MAX_M * K * 2), *W = malloc((uint64_t)N * K * 2);
    float *Y = malloc((uint64_t)MAX_M * N * 4), *Yref = malloc((uint64_t)MAX_M * N * 4),
          *Ym = malloc((uint64_t)MAX_M * N * 4), *Y1 = malloc((uint64_t)N * 4);
    REQUIRE(X && W && Y && Yref && Ym && Y1);
    fill_bf16(X, (uint64_t)MAX_M * K, 1.0);
    fill_bf16(W, (uint64_t)N * K, 1.0 / sqrt((double)K));
    uint16_t *dX, *dW;
    float *dY;
    REQUIRE(cudaMalloc((void **)&dX, (uint64_t)MAX_M * K * 2) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&dW, (uint64_t)N * K * 2) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&dY, (uint64_t)MAX_M * N * 4) == cudaSuccess);
    REQUIRE(cudaMemcpy(dX, X, (uint64_t)MAX_M * K * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(dW, W, (uint64_t)N * K * 2, cudaMemcpyHostToDevice) == cudaSuccess);

    /* the twin on the first 16 rows (the full M would take minutes on one core) */
    pgd_cuda_gemm_twin(X, W, Yref, 16, N, K);
    /* the GEMV kernel's exact bits for the rows of M = 7 (and so of M = 1) */
    float *Ygemv = malloc((uint64_t)7 * N * 4);
    REQUIRE(Ygemv);
    pgd_cuda_gemv_twin(X, W, Ygemv, 7, N, K);
    const double tol = fmax(1e-5, K * 0x1p-27);
    for (int mode = 0; mode < 3; mode++) {
        const bool fast = mode != PGD_CUDA_GEMM_INVARIANT;
        pgd_cuda_gemm_plan *p = NULL;
        REQUIRE(pgd_cuda_gemm_plan_create(g, N, K, MAX_M, (pgd_cuda_gemm_mode)mode,
                                          PGD_CUDA_GEMM_OUT_F32, &p) == 0);
        /* the full batch first: the reference bits */
        REQUIRE(cudaMemset(dY, 0xFF, (uint64_t)MAX_M * N * 4) == cudaSuccess); /* NaN poison */
        CHECK_EQ_INT(pgd_cuda_gemm_run(g, p, dX, dW, dY, MAX_M, NULL), 0);
        REQUIRE(cudaMemcpy(Y, dY, (uint64_t)MAX_M * N * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        double worst = 0;
        for (uint32_t m = 0; m < 16; m++) {
            double e = row_rel_l2(Y + (uint64_t)m * N, Yref + (uint64_t)m * N, N);
            if (e > worst) worst = e;
        }
        fprintf(stderr, "    %u x %u%s: worst row error vs twin %.2e\n", N, K,
                mode == PGD_CUDA_GEMM_FAST_GEMV ? " (fast, gemv)"
                : fast                          ? " (fast)"
                                                : "",
                worst);
        CHECK(worst <= tol);
        for (size_t i = 0; i < PGD_ARRAY_LEN(ms) - 1; i++) {
            uint32_t M = ms[i];
            REQUIRE(cudaMemset(dY, 0xFF, (uint64_t)MAX_M * N * 4) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_gemm_run(g, p, dX, dW, dY, M, NULL), 0);
            REQUIRE(cudaMemcpy(Ym, dY, (uint64_t)M * N * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
            int differ = memcmp(Ym, Y, (uint64_t)M * N * 4) != 0;
            if (mode == PGD_CUDA_GEMM_FAST_GEMV && M <= PGD_CUDA_GEMV_MAX_M) {
                /* the plan gives the kernel its first range (one row); the kernel itself takes
                 * up to PGD_CUDA_GEMV_MAX_M rows, each with the twin's bits */
                const bool on = M <= pgd_cuda_gemm_bucket_max[0];
                CHECK(pgd_cuda_gemm_plan_gemv(p, M) == on);
                float *Yk = Ym;
                if (!on) {
                    Yk = malloc((uint64_t)M * N * 4);
                    REQUIRE(Yk);
                    REQUIRE(cudaMemset(dY, 0xFF, (uint64_t)M * N * 4) == cudaSuccess);
                    CHECK_EQ_INT(pgd_cuda_gemv(dX, dW, dY, M, N, K, NULL), 0);
                    REQUIRE(cudaMemcpy(Yk, dY, (uint64_t)M * N * 4, cudaMemcpyDeviceToHost) ==
                            cudaSuccess);
                }
                size_t bad = 0;
                for (uint64_t e = 0; e < (uint64_t)M * N; e++)
                    bad += memcmp(&Yk[e], &Ygemv[e], 4) != 0;
                if (bad)
                    fprintf(stderr, "    gemv, M = %u: %zu of %llu elements differ from its twin\n",
                            M, bad, (unsigned long long)M * N);
                CHECK(bad == 0);
                if (Yk != Ym) free(Yk);
            }
            if (!fast) {
                if (differ) fprintf(stderr, "    M = %u: rows differ from M = %u\n", M, MAX_M);
                CHECK(!differ);
            } else {
                for (uint32_t m = 0; m < M && m < 16; m++)
                    CHECK(row_rel_l2(Ym + (uint64_t)m * N, Yref + (uint64_t)m * N, N) <= tol);
                /* the row 0 of M = 3 against that of M = 7; of M = 300 against M = 512's */
                if (M == 3) memcpy(Y1, Ym, (uint64_t)N * 4);
                const float *same = M == 7 ? Y1 : M == 300 ? Y : NULL;
                if (same && pgd_cuda_gemm_bucket(M) == pgd_cuda_gemm_bucket(M == 7 ? 3 : MAX_M)) {
                    if (memcmp(Ym, same, (uint64_t)N * 4))
                        fprintf(stderr, "    fast, M = %u: row 0 differs within its range\n", M);
                    CHECK(memcmp(Ym, same, (uint64_t)N * 4) == 0);
                }
            }
        }
        pgd_cuda_gemm_plan_destroy(p);
    }
    cudaFree(dX);
    cudaFree(dW);
    cudaFree(dY);
    free(X);
    free(W);
    free(Y);
    free(Yref);
    free(Ym);
    free(Y1);
    free(Ygemv);
}

static void test_model_shapes(void) {
    pgd_cuda_gemm *g = NULL;
    REQUIRE(pgd_cuda_gemm_create(32u << 20, &g) == 0);
    /* SmolLM2's QKV and down, Llama-3-8B's QKV, gate/up and down; on the CPU emulation of the
     * runtime (tests/cuda_emu, PGD_CUDA_EMU set) narrow ones of the same K, which it can afford */
    /* and {1003, 264}: columns past the GEMV's last warp group, 33 chunks for 32 lanes; {100,
     * 64}: 8 chunks, lanes with none */
    static const uint32_t shapes[][2] = {{960, 576},    {576, 1536}, {6144, 4096}, {28672, 4096},
                                         {4096, 14336}, {1003, 264}, {100, 64}};
    static const uint32_t emu_shapes[][2] = {{960, 576},  {576, 1536}, {1000, 256}, {96, 4096},
                                             {40, 14336}, {1003, 264}, {100, 64}};
    const bool emu = getenv("PGD_CUDA_EMU") != NULL;
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++)
        check_shape(g, emu ? emu_shapes[i][0] : shapes[i][0],
                    emu ? emu_shapes[i][1] : shapes[i][1]);
    pgd_cuda_gemm_destroy(g);
}

/* A bf16-output plan (what the backend's gate/up product uses outside the GEMV's rows): every
 * row within the f32 tolerance plus bf16's rounding of the twin (relative L2 <= tol + 2^-9), no
 * element off by more than a bf16 ulp of itself and of the row's size (a wrong element errs by
 * about the row's size), NaN poison overwritten; the rows' bits independent of M as for f32
 * plans (all M for a deterministic plan; within a range for a fast one); the GEMV's rows refused
 * (the caller runs them). */
static void check_bf16_out(pgd_cuda_gemm *g, uint32_t N, uint32_t K) {
    enum { MAX_M = 512, REF = 16 };
    static const uint32_t ms[] = {3, 7, 300};
    const uint64_t ny = (uint64_t)MAX_M * N;
    uint16_t *X = malloc((uint64_t)MAX_M * K * 2), *W = malloc((uint64_t)N * K * 2);
    uint16_t *Y = malloc(ny * 2), *Ym = malloc(ny * 2), *Y3 = malloc((uint64_t)N * 2);
    float *Yref = malloc((uint64_t)REF * N * 4);
    REQUIRE(X && W && Y && Ym && Y3 && Yref);
    fill_bf16(X, (uint64_t)MAX_M * K, 1.0);
    fill_bf16(W, (uint64_t)N * K, 1.0 / sqrt((double)K));
    uint16_t *dX, *dW, *dY;
    REQUIRE(cudaMalloc((void **)&dX, (uint64_t)MAX_M * K * 2) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&dW, (uint64_t)N * K * 2) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&dY, ny * 2) == cudaSuccess);
    REQUIRE(cudaMemcpy(dX, X, (uint64_t)MAX_M * K * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(dW, W, (uint64_t)N * K * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    pgd_cuda_gemm_twin(X, W, Yref, REF, N, K);
    const double tol = fmax(1e-5, K * 0x1p-27) + 0x1p-9;
    for (int mode = 0; mode < 3; mode++) {
        pgd_cuda_gemm_plan *p = NULL;
        REQUIRE(pgd_cuda_gemm_plan_create(g, N, K, MAX_M, (pgd_cuda_gemm_mode)mode,
                                          PGD_CUDA_GEMM_OUT_BF16, &p) == 0);
        REQUIRE(cudaMemset(dY, 0xFF, ny * 2) == cudaSuccess);
        CHECK_EQ_INT(pgd_cuda_gemm_run(g, p, dX, dW, dY, MAX_M, NULL), 0);
        REQUIRE(cudaMemcpy(Y, dY, ny * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
        double worst = 0;
        uint64_t far = 0;
        for (uint32_t m = 0; m < REF; m++) {
            const float *ref = Yref + (uint64_t)m * N;
            double d = 0, r = 0;
            for (uint32_t n = 0; n < N; n++) r += (double)ref[n] * ref[n];
            const double rms = sqrt(r / N);
            for (uint32_t n = 0; n < N; n++) {
                const double got = pgd_bf16_to_f32(Y[(uint64_t)m * N + n]), e = got - ref[n];
                d += e * e;
                far += !(fabs(e) <= 0x1p-8 * (fabs(ref[n]) + rms)); /* NaN counts */
            }
            if (sqrt(d / r) > worst) worst = sqrt(d / r);
        }
        fprintf(stderr, "    %u x %u, bf16 out, mode %d: worst row error vs twin %.2e, %llu far\n",
                N, K, mode, worst, (unsigned long long)far);
        CHECK(worst <= tol);
        CHECK_EQ_INT(far, 0);
        if (mode == PGD_CUDA_GEMM_FAST_GEMV) {
            CHECK(pgd_cuda_gemm_plan_gemv(p, 1));
            CHECK_EQ_INT(pgd_cuda_gemm_run(g, p, dX, dW, dY, 1, NULL), PGD_EINVAL);
        }
        for (size_t i = 0; i < PGD_ARRAY_LEN(ms); i++) {
            const uint32_t M = ms[i];
            REQUIRE(cudaMemset(dY, 0xFF, ny * 2) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_gemm_run(g, p, dX, dW, dY, M, NULL), 0);
            REQUIRE(cudaMemcpy(Ym, dY, (uint64_t)M * N * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
            if (mode == PGD_CUDA_GEMM_INVARIANT) { /* every row as at M = 512 */
                CHECK(memcmp(Ym, Y, (uint64_t)M * N * 2) == 0);
                continue;
            }
            if (M == 3) memcpy(Y3, Ym, (uint64_t)N * 2);
            const uint16_t *same = M == 7 ? Y3 : M == 300 ? Y : NULL; /* row 0, as above */
            if (same && pgd_cuda_gemm_bucket(M) == pgd_cuda_gemm_bucket(M == 7 ? 3 : MAX_M))
                CHECK(memcmp(Ym, same, (uint64_t)N * 2) == 0);
        }
        pgd_cuda_gemm_plan_destroy(p);
    }
    cudaFree(dX), cudaFree(dW), cudaFree(dY);
    free(X), free(W), free(Y), free(Ym), free(Y3), free(Yref);
}

static void test_bf16_out(void) {
    pgd_cuda_gemm *g = NULL;
    REQUIRE(pgd_cuda_gemm_create(32u << 20, &g) == 0);
    /* Llama-3-8B's gate/up and SmolLM2's (narrow on the emulator), and an odd N */
    const bool emu = getenv("PGD_CUDA_EMU") != NULL;
    check_bf16_out(g, emu ? 96 : 28672, 4096);
    check_bf16_out(g, emu ? 160 : 3072, 576);
    check_bf16_out(g, 1003, 264);
    pgd_cuda_gemm_destroy(g);
}

/* The kernel's argument checks (the plan never passes a bad shape). */
static void test_gemv_refuses(void) {
    uint16_t *d = NULL;
    float *y = NULL;
    REQUIRE(cudaMalloc((void **)&d, 4096) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&y, 4096) == cudaSuccess);
    CHECK_EQ_INT(pgd_cuda_gemv(d, d, y, 0, 4, 64, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv(d, d, y, PGD_CUDA_GEMV_MAX_M + 1, 4, 64, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv(d, d, y, 1, 4, 60, NULL), PGD_EINVAL);     /* K % 8 */
    CHECK_EQ_INT(pgd_cuda_gemv(d + 1, d, y, 1, 4, 64, NULL), PGD_EINVAL); /* alignment */
    CHECK_EQ_INT(pgd_cuda_gemv(d, d, y, 1, 0, 64, NULL), 0);              /* nothing to do */
    CHECK_EQ_INT(pgd_cuda_gemv_loads(d, d, y, NULL, 4, 64, false, 5, false, false, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_loads(d, d, y, NULL, 4, 60, false, 8, false, false, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_loads(d, d, y, NULL, 4, 64, false, 8, false, true, NULL),
                 PGD_EINVAL); /* lean: 4 loads */
    CHECK_EQ_INT(pgd_cuda_gemv_loads(d, d, y, NULL, 4, 64, false, 4, true, true, NULL),
                 PGD_EINVAL); /* lean: not early */
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    cudaFree(d);
    cudaFree(y);
}

/* pgd_cuda_gemv_silu against pgd_cuda_gemv then pgd_cuda_silu_mul, bit for bit. */
static void test_gemv_silu(void) {
    const bool emu = getenv("PGD_CUDA_EMU") != NULL;
    const uint32_t shapes[][2] = {{1003, 264}, {emu ? 200 : 14336, 4096}, {100, 64}};
    static const uint32_t ms[] = {1, 2, 3, 7, 8};
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++) {
        const uint32_t F = shapes[i][0], K = shapes[i][1], MM = PGD_CUDA_GEMV_MAX_M;
        uint16_t *X = malloc((uint64_t)MM * K * 2), *W = malloc((uint64_t)2 * F * K * 2);
        uint16_t *want = malloc((uint64_t)MM * F * 2), *got = malloc((uint64_t)MM * F * 2);
        REQUIRE(X && W && want && got);
        fill_bf16(X, (uint64_t)MM * K, 1.0);
        fill_bf16(W, (uint64_t)2 * F * K, 3.0 / sqrt((double)K)); /* gate values of a few units */
        uint16_t *dX, *dW, *dO;
        float *dY;
        REQUIRE(cudaMalloc((void **)&dX, (uint64_t)MM * K * 2) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&dW, (uint64_t)2 * F * K * 2) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&dY, (uint64_t)MM * 2 * F * 4) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&dO, (uint64_t)MM * F * 2) == cudaSuccess);
        REQUIRE(cudaMemcpy(dX, X, (uint64_t)MM * K * 2, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(dW, W, (uint64_t)2 * F * K * 2, cudaMemcpyHostToDevice) == cudaSuccess);
        for (size_t k = 0; k < PGD_ARRAY_LEN(ms); k++) {
            const uint32_t M = ms[k];
            REQUIRE(cudaMemset(dO, 0xFF, (uint64_t)MM * F * 2) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_gemv(dX, dW, dY, M, 2 * F, K, NULL), 0);
            CHECK_EQ_INT(pgd_cuda_silu_mul(dY, M, F, dO, NULL), 0);
            REQUIRE(cudaMemcpy(want, dO, (uint64_t)M * F * 2, cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            REQUIRE(cudaMemset(dO, 0xFF, (uint64_t)MM * F * 2) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_gemv_silu(dX, dW, dO, M, F, K, NULL), 0);
            REQUIRE(cudaMemcpy(got, dO, (uint64_t)M * F * 2, cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            size_t bad = 0;
            for (uint64_t e = 0; e < (uint64_t)M * F; e++) bad += got[e] != want[e];
            if (bad)
                fprintf(stderr, "    gemv + SiLU, F %u, K %u, M = %u: %zu of %llu differ\n", F, K,
                        M, bad, (unsigned long long)M * F);
            CHECK(bad == 0);
            /* one row with 4, 8 and 16 of a lane's loads in flight, the first round before the
             * wait for the previous kernel or after, and the lean instance (pgd_cuda_gemv_loads):
             * the plain form's bits those of pgd_cuda_gemv, the SiLU form's those above */
            for (uint32_t v = 0; M == 1 && v < 7; v++) {
                const uint32_t loads = v == 6 ? 4 : 4u << (v % 3);
                const bool early = v >= 3 && v < 6, lean = v == 6;
                float *yw = malloc((uint64_t)2 * F * 4), *yl = malloc((uint64_t)2 * F * 4);
                REQUIRE(yw && yl);
                CHECK_EQ_INT(pgd_cuda_gemv(dX, dW, dY, 1, 2 * F, K, NULL), 0);
                REQUIRE(cudaMemcpy(yw, dY, (uint64_t)2 * F * 4, cudaMemcpyDeviceToHost) ==
                        cudaSuccess);
                REQUIRE(cudaMemset(dY, 0xFF, (uint64_t)2 * F * 4) == cudaSuccess);
                CHECK_EQ_INT(pgd_cuda_gemv_loads(dX, dW, dY, NULL, 2 * F, K, false, loads, early,
                                                 lean, NULL),
                             0);
                REQUIRE(cudaMemcpy(yl, dY, (uint64_t)2 * F * 4, cudaMemcpyDeviceToHost) ==
                        cudaSuccess);
                REQUIRE(cudaMemset(dO, 0xFF, (uint64_t)F * 2) == cudaSuccess);
                CHECK_EQ_INT(
                    pgd_cuda_gemv_loads(dX, dW, NULL, dO, F, K, true, loads, early, lean, NULL), 0);
                REQUIRE(cudaMemcpy(got, dO, (uint64_t)F * 2, cudaMemcpyDeviceToHost) ==
                        cudaSuccess);
                size_t bad_y = 0, bad_o = 0;
                for (uint64_t e = 0; e < 2 * (uint64_t)F; e++)
                    bad_y += memcmp(&yl[e], &yw[e], 4) != 0;
                for (uint64_t e = 0; e < F; e++) bad_o += got[e] != want[e];
                if (bad_y || bad_o)
                    fprintf(stderr,
                            "    gemv with %u loads%s, F %u, K %u: %zu products, %zu SiLU "
                            "outputs differ\n",
                            loads,
                            early  ? " (early)"
                            : lean ? " (lean)"
                                   : "",
                            F, K, bad_y, bad_o);
                CHECK(bad_y == 0 && bad_o == 0);
                free(yw), free(yl);
            }
        }
        cudaFree(dX), cudaFree(dW), cudaFree(dY), cudaFree(dO);
        free(X), free(W), free(want), free(got);
    }
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    const char *seed = getenv("PGD_TEST_SEED");
    g_rng = seed ? strtoull(seed, NULL, 0) : 0x5eed0001ull;
    fprintf(stderr, "seed %llu (PGD_TEST_SEED)\n", (unsigned long long)g_rng);
    RUN(test_gemv_refuses);
    RUN(test_model_shapes);
    RUN(test_bf16_out);
    RUN(test_gemv_silu);
    return test_summary();
}
