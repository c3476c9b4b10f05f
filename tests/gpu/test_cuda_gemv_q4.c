/*
 * tests/gpu/test_cuda_gemv_q4.c — the GEMV over weights in 4 bits, pgd_cuda_gemv_q4 and
 * pgd_cuda_gemv_q4_silu (kernels/cuda/gemv_q4.h), against its CPU twin:
 *   - bit for bit at M = 1 .. 8 (x of magnitudes 2^-10 .. 2^10, so that s rounds) on shapes that
 * straddle the kernel's edges: N of 1 and 3, and N past a multiple of the 8 or 16 columns a CTA
 * takes (37, 131, 67, 21, ...); K of 1, 2 and 3 blocks (lanes with none), 896 (28 blocks), 1440 and
 * 3104 (45 and 97 blocks: lanes with a block more than others, partial rounds), 4096 and 14336;
 * nibbles over 0 .. 15 (0 and 15 more often), d and m random halves of both signs, with zeros (d =
 * 0 blocks among them), subnormals and f16's largest values now and then; W's dm plane also at a
 * 4-byte (not 8- or 16-byte) offset; at M = 1 the instance PGD_CUDA_GEMV_EARLY selects;
 *   - batch invariance: every row's bits the same at every M (the run at M = 8 the reference);
 *     the rows past M (poisoned with NaN, all bits set, before each run) untouched;
 *   - pgd_cuda_gemv_q4_ld (Y's rows N + 5 apart, a fused product's part) at M = 1, 4, 7: each
 *     row's N columns the twin's bits, the rest of its row and the rows past M untouched;
 *   - the twin against an independent double-precision sum of the dequantized weights, each
 *     element within THE SUM's rounding bound (so a twin wrong the same way as the kernel is
 *     caught too);
 *   - the SiLU form: the bits of pgd_cuda_gemv_q4 over the gate/up weight then
 *     pgd_cuda_silu_mul, and within silu_mul.h's tolerance of the twin then the SiLU * up twin
 *     (equal or one bf16 ulp for g >= -88; both tiny below), M = 1 .. 8;
 *   - pgd_cuda_gemv_q4_one, each round's loads all first or not: the twin's bits at one row;
 *   - bad arguments refused with PGD_EINVAL (M 0 or 9, N or F 0, K 0 or not a multiple of 32, X
 *     or W.q not 16-byte aligned, W.dm not 4-byte aligned), writing nothing; W.q at 16 bytes and
 *     W.dm at 4 bytes past an allocation accepted.
 * Random data; the seed is printed (PGD_SEED repeats it). On the CPU emulation of the runtime
 * (tests/cuda_emu, PGD_CUDA_EMU set) the shapes are narrow. Exit 77 (skipped) without a GPU.
 * Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemv_q4.h"
#include "kernels/cuda/silu_mul.h"
#include "testutil.h"
#include "gpu_testutil.h"

enum { MM = PGD_CUDA_GEMV_MAX_M };

static bool emu(void) {
    return getenv("PGD_CUDA_EMU") != NULL;
}

/* The operands: X bf16 [MM][K], W [N][K] in THE FORM, on the host and the device (the device's
 * dm plane starts dm_off words into its allocation). */
typedef struct {
    uint32_t N, K, dm_off;
    uint16_t *X;
    uint8_t *q;
    uint32_t *dm;
    uint16_t *dX;
    uint32_t *ddm;
    pgd_q4_mat W;
} problem;

/* A half of magnitude about `mag` (either sign, a factor 0.5 .. 1.5), or with `special` now and
 * then one of f16's edges: zeros, the smallest and largest subnormals, the smallest normal, the
 * largest value. */
static uint16_t rand_half(double mag, bool special) {
    static const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF};
    if (special && gt_urand(32) == 0) return edges[gt_urand(PGD_ARRAY_LEN(edges))];
    return pgd_f32_to_f16((float)(mag * (1.0 + 0.5 * gt_frand()) * (gt_urand(2) ? 1 : -1)));
}

/* Random operands: x in [-1, 1) (special: a quarter of them scaled by a power of two, so that the
 * sums of x round and show their order), nibbles uniform with 0 and 15 more often, d and m so that
 * a column's sum is of a few units (special: f16's edges too, and blocks with d = 0). */
static bool problem_make(problem *p, uint32_t N, uint32_t K, uint32_t dm_off, bool special) {
    const uint32_t C = K / PGD_Q4_BLOCK;
    const uint64_t nx = (uint64_t)MM * K, nq = (uint64_t)N * K / 2, nd = (uint64_t)N * C;
    *p = (problem){N, K, dm_off, malloc(nx * 2), malloc(nq), malloc(nd * 4), NULL, NULL, {0}};
    if (!p->X || !p->q || !p->dm) return false;
    for (uint64_t i = 0; i < nx; i++) /* a quarter scaled by 2^-10 .. 2^10: inexact sums of s */
        p->X[i] = pgd_f32_to_bf16(
            ldexpf(gt_frand(), !special || gt_urand(4) ? 0 : (int)gt_urand(21) - 10));
    for (uint64_t i = 0; i < nq; i++) {
        uint32_t v[2];
        for (int h = 0; h < 2; h++) {
            const uint32_t r = gt_urand(16);
            v[h] = r == 0 ? 0 : r == 1 ? 15 : gt_urand(16);
        }
        p->q[i] = (uint8_t)(v[0] | v[1] << 4);
    }
    /* |p| of a block ~ 30, |s| ~ 3 */
    const double dmag = 1.0 / (30.0 * sqrt((double)C)), mmag = 1.0 / (3.0 * sqrt((double)C));
    for (uint64_t i = 0; i < nd; i++) {
        const uint16_t d = special && gt_urand(16) == 0 ? 0 : rand_half(dmag, special);
        p->dm[i] = d | (uint32_t)rand_half(mmag, special) << 16;
    }
    uint32_t *dm_host = calloc(nd + dm_off, 4);
    if (!dm_host) return false;
    memcpy(dm_host + dm_off, p->dm, nd * 4);
    p->dX = gt_upload(p->X, nx * 2);
    p->W.q = gt_upload(p->q, nq);
    p->ddm = gt_upload(dm_host, (nd + dm_off) * 4);
    free(dm_host);
    p->W.dm = p->ddm ? p->ddm + dm_off : NULL;
    return p->dX && p->W.q && p->ddm;
}

static void problem_free(problem *p) {
    free(p->X), free(p->q), free(p->dm);
    cudaFree(p->dX), cudaFree(p->W.q), cudaFree(p->ddm);
}

/* Element k of W's row n, dequantized exactly in double: d q + m. */
static double w_at(const problem *p, uint32_t n, uint32_t k, double *d, double *m) {
    const uint32_t C = p->K / PGD_Q4_BLOCK, j = k % 32;
    const uint32_t dm = p->dm[(uint64_t)n * C + k / 32];
    const uint8_t byte = p->q[(uint64_t)n * (p->K / 2) + (k / 32) * 16 + j % 16];
    *d = pgd_f16_to_f32((uint16_t)(dm & 0xFFFF)), *m = pgd_f16_to_f32((uint16_t)(dm >> 16));
    return j < 16 ? byte & 15 : byte >> 4;
}

/* The twin's rows against the double-precision sum of x (d q + m): each within THE SUM's
 * rounding bound, (32 + a lane's 2 FMAs a block + the tree's 5 + 2) 2^-24 of the sum of
 * |x d q| + |x m|. The number of elements outside. */
static uint64_t twin_vs_double(const problem *p, const float *Y, uint32_t M) {
    const uint32_t C = p->K / PGD_Q4_BLOCK;
    const double bound = (32.0 + 2 * ((C + 31) / 32) + 7) * 0x1p-24;
    uint64_t bad = 0;
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < p->N; n++) {
            double sum = 0, abs_sum = 0;
            for (uint32_t k = 0; k < p->K; k++) {
                double d, mo;
                const double q = w_at(p, n, k, &d, &mo);
                const double x = pgd_bf16_to_f32(p->X[(uint64_t)m * p->K + k]);
                sum += x * (d * q) + x * mo;
                abs_sum += fabs(x * d * q) + fabs(x * mo);
            }
            const double y = Y[(uint64_t)m * p->N + n], err = fabs(y - sum);
            if (!(err <= bound * abs_sum + 0x1p-140) && bad++ < 3)
                fprintf(stderr, "  twin %u x %u, [%u][%u]: %.9g, double sum %.17g\n", p->N, p->K, m,
                        n, y, sum);
        }
    return bad;
}

/* Whether the bytes are all 0xFF (the poison, untouched). */
static bool poisoned(const void *h, size_t bytes) {
    for (size_t i = 0; i < bytes; i++)
        if (((const uint8_t *)h)[i] != 0xFF) return false;
    return true;
}

static int run_ld(const void *ctx, float *dY, uint32_t ldy, uint32_t M) {
    const problem *p = ctx;
    return pgd_cuda_gemv_q4_ld(p->dX, p->W, dY, ldy, M, p->N, p->K, NULL);
}

static void check_shape(uint32_t N, uint32_t K, uint32_t dm_off) {
    problem p;
    REQUIRE(problem_make(&p, N, K, dm_off, true));
    const uint64_t ny = (uint64_t)MM * N;
    float *want = malloc(ny * 4), *got = malloc(ny * 4), *at8 = malloc(ny * 4);
    float *dY = gt_poisoned(ny * 4);
    REQUIRE(want && got && at8 && dY);
    pgd_cuda_gemv_q4_twin(p.X, p.q, p.dm, want, MM, N, K);
    CHECK_EQ_INT(twin_vs_double(&p, want, MM), 0);
    for (uint32_t M = MM; M >= 1; M--) { /* M = 8 first: the rows every M must give */
        REQUIRE(cudaMemset(dY, 0xFF, ny * 4) == cudaSuccess);
        CHECK_EQ_INT(pgd_cuda_gemv_q4(p.dX, p.W, dY, M, N, K, NULL), 0);
        REQUIRE(gt_download(got, dY, ny * 4) == 0);
        char what[96];
        snprintf(what, sizeof what, "gemv q4 %u x %u (dm at +%u), M = %u vs twin", N, K, dm_off, M);
        CHECK_EQ_INT(gt_count_diff(what, got, want, (uint64_t)M * N, 4), 0);
        if (M == MM) memcpy(at8, got, ny * 4);
        snprintf(what, sizeof what, "gemv q4 %u x %u, M = %u vs M = %u", N, K, M, MM);
        CHECK_EQ_INT(gt_count_diff(what, got, at8, (uint64_t)M * N, 4), 0);
        CHECK(poisoned(got + (uint64_t)M * N, (ny - (uint64_t)M * N) * 4)); /* rows past M */
    }
    /* Y's rows ldy apart (_ld): each row's N columns the twin's bits, the rest untouched */
    char what[64];
    snprintf(what, sizeof what, "gemv q4 %u x %u vs twin", N, K);
    CHECK_EQ_INT(gt_rows_apart(what, run_ld, &p, want, N, MM), 0);
    /* one row with each round's loads all first, and as the backend runs it: the same bits */
    for (int round = 0; round < 2; round++) {
        REQUIRE(cudaMemset(dY, 0xFF, ny * 4) == cudaSuccess);
        CHECK_EQ_INT(pgd_cuda_gemv_q4_one(p.dX, p.W, dY, N, K, round, NULL), 0);
        REQUIRE(gt_download(got, dY, ny * 4) == 0);
        char what[96];
        snprintf(what, sizeof what, "gemv q4 %u x %u, one row, round_first %d vs twin", N, K,
                 round);
        CHECK_EQ_INT(gt_count_diff(what, got, want, N, 4), 0);
        CHECK(poisoned(got + N, (ny - N) * 4));
    }
    cudaFree(dY);
    free(want), free(got), free(at8);
    problem_free(&p);
}

/* Shapes (N, K): K of 1, 2, 3 blocks, 28 (lanes with none), 45 and 97 (lanes with one block
 * more, partial rounds), 128 and 448; N past the 8 and 16 columns a CTA takes, and one. */
static void test_shapes(void) {
    static const uint32_t shapes[][2] = {{37, 32},   {3, 64},     {131, 96},
                                         {100, 896}, {37, 1440},  {20, 3104},
                                         {67, 4096}, {21, 14336}, {1, 4096}};
    /* model-sized ones (Qwen2.5-0.5B's QKV; on a GPU also Llama-3-8B's QKV and down) */
    static const uint32_t big[][2] = {{1152, 896}, {6144, 4096}, {4099, 14336}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++)
        check_shape(shapes[i][0], shapes[i][1], (uint32_t)(i % 2));
    for (size_t i = 0; i < (emu() ? 1 : PGD_ARRAY_LEN(big)); i++)
        check_shape(big[i][0], big[i][1], (uint32_t)(i % 2));
}

/* The SiLU form against pgd_cuda_gemv_q4 + pgd_cuda_silu_mul (bits) and the twins (tolerance). */
static void check_silu(uint32_t F, uint32_t K) {
    problem p;
    REQUIRE(problem_make(&p, 2 * F, K, F % 2, false));
    const uint64_t no = (uint64_t)MM * F, ny = 2 * no;
    float *Ytw = malloc(ny * 4);
    uint16_t *twin = malloc(no * 2), *want = malloc(no * 2), *got = malloc(no * 2);
    float *dY = gt_poisoned(ny * 4);
    uint16_t *dO = gt_poisoned(no * 2);
    REQUIRE(Ytw && twin && want && got && dY && dO);
    pgd_cuda_gemv_q4_twin(p.X, p.q, p.dm, Ytw, MM, 2 * F, K);
    pgd_cuda_silu_mul_twin(Ytw, MM, F, twin);
    uint64_t exact = 0, ulp = 0, tiny = 0, bad = 0;
    for (uint32_t M = 1; M <= MM; M++) {
        REQUIRE(cudaMemset(dO, 0xFF, no * 2) == cudaSuccess);
        CHECK_EQ_INT(pgd_cuda_gemv_q4(p.dX, p.W, dY, M, 2 * F, K, NULL), 0);
        CHECK_EQ_INT(pgd_cuda_silu_mul(dY, M, F, dO, NULL), 0);
        REQUIRE(gt_download(want, dO, no * 2) == 0);
        REQUIRE(cudaMemset(dO, 0xFF, no * 2) == cudaSuccess);
        CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(p.dX, p.W, dO, M, F, K, NULL), 0);
        REQUIRE(gt_download(got, dO, no * 2) == 0);
        char what[96];
        snprintf(what, sizeof what, "gemv q4 + SiLU, F %u, K %u, M = %u vs the two kernels", F, K,
                 M);
        CHECK_EQ_INT(gt_count_diff(what, got, want, (uint64_t)M * F, 2), 0);
        CHECK(poisoned(got + (uint64_t)M * F, (no - (uint64_t)M * F) * 2));
        for (uint64_t i = 0; i < (uint64_t)M * F; i++) {
            const float g = Ytw[(i / F) * 2 * F + i % F], u = Ytw[(i / F) * 2 * F + F + i % F];
            const int64_t dd = gt_bf16_ord(got[i]) - gt_bf16_ord(twin[i]);
            const double lim = fabs((double)g * u) * ldexp(1.0, -126) + ldexp(1.0, -133);
            if (got[i] == twin[i])
                exact++;
            else if (g >= -88.0f && (dd == 1 || dd == -1))
                ulp++;
            else if (g < -88.0f && fabs(pgd_bf16_to_f32(got[i])) <= lim &&
                     fabs(pgd_bf16_to_f32(twin[i])) <= lim)
                tiny++;
            else if (bad++ < 5)
                fprintf(stderr, "  F %u K %u M %u [%llu]: g %.9g u %.9g: GPU 0x%04x, twin 0x%04x\n",
                        F, K, M, (unsigned long long)i, g, u, got[i], twin[i]);
        }
    }
    fprintf(stderr, "    SiLU F %u K %u vs twins: %llu equal, %llu one ulp, %llu tiny\n", F, K,
            (unsigned long long)exact, (unsigned long long)ulp, (unsigned long long)tiny);
    CHECK_EQ_INT(bad, 0);
    CHECK(exact > 0);
    cudaFree(dY), cudaFree(dO);
    free(Ytw), free(twin), free(want), free(got);
    problem_free(&p);
}

static void test_silu(void) {
    static const uint32_t shapes[][2] = {{1, 64}, {13, 896}, {37, 3104}, {9, 4096}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++) check_silu(shapes[i][0], shapes[i][1]);
    if (!emu()) check_silu(14336 / 4 + 3, 4096);
}

/* Bad shapes and alignments refused, nothing written; the alignments THE FORM allows taken. */
static void test_refuses(void) {
    enum { K = 64, N = 4 };
    uint8_t *x = gt_poisoned(MM * K * 2 + 64), *q = gt_poisoned(N * K / 2 + 64),
            *dm = gt_poisoned(N * K / 8 + 64);
    float *y = gt_poisoned(MM * N * 4);
    REQUIRE(x && q && dm && y);
    REQUIRE(cudaMemset(x, 0, MM * K * 2 + 64) == cudaSuccess);
    REQUIRE(cudaMemset(q, 0, N * K / 2 + 64) == cudaSuccess);
    REQUIRE(cudaMemset(dm, 0, N * K / 8 + 64) == cudaSuccess);
    const uint16_t *X = (const uint16_t *)x;
    uint32_t *D = (uint32_t *)dm;
    const pgd_q4_mat W = {q, D};
    const pgd_q4_mat Wq1 = {q + 1, D}, Wq8 = {q + 8, D};
    const pgd_q4_mat Wd2 = {q, (uint32_t *)(dm + 2)}, Wd1 = {q, (uint32_t *)(dm + 1)};
    uint16_t *o = (uint16_t *)y;
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, W, y, 0, N, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, W, y, MM + 1, N, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, W, y, 1, 0, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, W, y, 1, N, 0, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_ld(X, W, y, N - 1, 1, N, K, NULL), PGD_EINVAL); /* ldy < N */
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, W, y, 1, N, 48, NULL), PGD_EINVAL);          /* K % 32 */
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, W, y, 1, N, 16, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X + 1, W, y, 1, N, K, NULL), PGD_EINVAL); /* X at 2 bytes */
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X + 4, W, y, 1, N, K, NULL), PGD_EINVAL); /* X at 8 bytes */
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, Wq1, y, 1, N, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, Wq8, y, 1, N, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, Wd2, y, 1, N, K, NULL), PGD_EINVAL); /* dm at 2 bytes */
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X, Wd1, y, 1, N, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X, W, o, 0, N, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X, W, o, MM + 1, N, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X, W, o, 1, 0, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X, W, o, 1, N / 2, 48, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X + 1, W, o, 1, N / 2, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X, Wq8, o, 1, N / 2, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X, Wd2, o, 1, N / 2, K, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_one(X, W, y, 0, K, 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_one(X, W, y, N, 48, 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_one(X + 1, W, y, N, K, 0, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemv_q4_one(X, Wd2, y, N, K, 1, NULL), PGD_EINVAL);
    float h[MM * N];
    REQUIRE(gt_download(h, y, sizeof h) == 0);
    CHECK(poisoned(h, sizeof h)); /* nothing written */
    /* q at 16 bytes in, dm at 4 bytes in: THE FORM's alignments (zeros: the sums are +0) */
    const pgd_q4_mat W16 = {q + 16, D + 1};
    CHECK_EQ_INT(pgd_cuda_gemv_q4(X + 8, W16, y, MM, N, K, NULL), 0);
    REQUIRE(gt_download(h, y, sizeof h) == 0);
    for (int i = 0; i < MM * N; i++) CHECK(h[i] == 0.0f && !signbit(h[i]));
    CHECK_EQ_INT(pgd_cuda_gemv_q4_silu(X + 8, W16, o, MM, N / 2, K, NULL), 0);
    cudaFree(x), cudaFree(q), cudaFree(dm), cudaFree(y);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_refuses);
    RUN(test_shapes);
    RUN(test_silu);
    return test_summary();
}
