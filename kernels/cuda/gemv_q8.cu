/*
 * kernels/cuda/gemv_q8.cu — Y = X · Wᵀ for up to PGD_CUDA_GEMV_MAX_M rows over weights in 8 bits
 * (gemv_q8.h: THE SUM; q8.h: THE FORM). Owns nothing. CPU twin: gemv_q8_twin.c, bit for bit.
 *
 * Why: a batch-1 decode step of an 8-bit model reads every weight once and computes little, so
 * this product runs at the speed its weights stream — 34 bytes a block of 32 instead of gemv.cu's
 * 64. It is gemv.cu's kernel over THE FORM: a warp per few columns, rounds of loads, one fold.
 *
 * Grid: one warp per R output columns (rows of W: R = 1, 2 or 4 as M grows, cols_for), kWarps
 * warps a CTA; templated on M and R so a lane's M x R accumulators stay in registers. How many
 * columns a warp takes never changes a result (THE SUM is per column). Lane l takes whole blocks
 * of 32 weights, b = l, l + 32, ...: a block is two 16-byte loads of q (a warp: 1 KiB contiguous)
 * and one 2-byte load of d (64 contiguous bytes), streamed (__ldcs: W is read once a step and
 * should not push the activations and the KV cache out of L2); X's 64 bytes of a block come
 * through the read-only cache (__ldg: every warp reads the same M rows). A lane loads a round of
 * L blocks of each of its R rows before their FMAs, L = max(1, 2 / R) (kRoundBlocks): at one row
 * two blocks, four 16-byte loads of q, gemv.cu's 64 bytes a lane. What ptxas makes of it (sm_90a,
 * nvcc 13.0, read with cuobjdump -sass): at one row 72 registers, and of a round's 4 q and 2 d
 * loads 5 outstanding at once (the second d load issued after the first block's FMAs began); the
 * SiLU form at one row 61 registers, all 6; M = 8, 210 registers, 8 of 12. Four blocks a round at
 * one row made 94 registers and still only 7 of 12 outstanding (ptxas interleaves the round's 16
 * X loads and sinks the rest of W's behind the first FMAs): a GPU should decide. Then the
 * shuffle-down tree and lane 0 writes the M results. No shared memory, no barrier: a warp past N
 * leaves at once. The SiLU form takes gate column j and up column F + j in the same warp and
 * writes bf16(SiLU(gate) * up) from lane 0 (silu_math.cuh: silu_mul.cu's arithmetic).
 *
 * The int8 -> f32 conversion: an int8 value q is exactly ((q + 128) + 2^23) - (2^23 + 128) in
 * f32: q + 128 is the byte with its top bit flipped (one XOR a word of four), put into the low
 * mantissa bits of 2^23 by one byte permutation (PRMT) and taken out by one FADD, both exact. No
 * I2F (a quarter-rate instruction: 16 a clock per SM would not keep up with the stream), and a
 * single integer operation a weight (a byte's mask and the OR of 2^23 would be two: LOP3 takes
 * one immediate), so that at one row the integer pipe (64 a clock per SM, which also widens X)
 * keeps ahead of the ~18 weights a clock per SM an H200's copy bandwidth brings.
 *
 * PDL (cuda_util.cuh): W is constant during a step, so at one row a warp's first round of W
 * loads is issued before the wait for the previous kernel, as in gemv.cu (and under the same
 * switch, PGD_CUDA_GEMV_EARLY=0); X is read only after it.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemv_q8.h"
#include "kernels/cuda/gemv_rounds.cuh"
#include "kernels/cuda/silu_math.cuh"

namespace {

constexpr uint32_t kLanes = PGD_CUDA_GEMV_LANES;
constexpr uint32_t kBlock = PGD_Q8_BLOCK; /* weights a block, one scale */
constexpr uint32_t kWarps = 4, kThreads = kWarps * kLanes;
constexpr uint32_t kRoundBlocks = 2; /* blocks of W a lane loads a round, all R rows together */
static_assert(kLanes == 32 && kBlock == 32, "a lane takes whole blocks, the warp 32 of them");

/* The columns a warp takes for M rows: each X block a lane reads from the cache then serves R
 * columns. X is 2 bytes a weight here against W's one, so the columns grow one step sooner than
 * in gemv.cu: X's L1 traffic at most four times W's (M = 4 and 8), twice at one row. */
constexpr int cols_for(int MR) {
    return MR == 1 ? 1 : MR <= 4 ? 2 : 4;
}

/* The 4 int8 of a word of q (little-endian: byte i is weight i) as f32, exactly (the header
 * comment says how): a PRMT a weight puts q + 128 under 2^23's exponent, an FADD takes 2^23 + 128
 * away. */
__device__ __forceinline__ void unpack_q(uint32_t w, float (&f)[4]) {
    const uint32_t u = w ^ 0x80808080u;      /* each byte q + 128 */
    constexpr uint32_t kMagic = 0x4B000000u; /* 2^23: bytes 4 .. 7 of the permutation's input */
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) /* bytes: u's byte i, 0, 0, 0x4B */
        f[i] = __fadd_rn(__uint_as_float(__byte_perm(u, kMagic, 0x7440u | i)), -8388736.0f);
}

/* W's rows of the R columns a warp takes from n0 (P = R, or R / 2 gate and up pairs in the SiLU
 * form: gate rows n, then up rows N + n), as q's 16-byte chunks (two a block) and d's scales; a
 * column past N reads the last one again (its result is dropped). */
template <int R, bool Silu>
__device__ __forceinline__ void col_rows(const pgd_q8_mat &W, uint32_t n0, uint32_t N, uint32_t K,
                                         const uint4 *(&q)[R], const uint16_t *(&d)[R]) {
    constexpr int P = Silu ? R / 2 : R;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint64_t col = min(n0 + r % P, N - 1) + (Silu && r >= P ? N : 0);
        q[r] = reinterpret_cast<const uint4 *>(W.q + col * K);
        d[r] = W.d + col * (K / kBlock);
    }
}

/* A warp's R dot products with MR rows of X by THE SUM, C blocks a row: q[r], d[r] W's rows;
 * xc(m, c) X's 16-byte chunk c (8 elements) of row m. between() is called once by every lane:
 * after the warp's first round of W loads is in flight (Early), or before any load — the wait for
 * the previous kernel. Lane 0 ends with the sums in acc. The blocks in rounds of L:
 * pgd_gemv_rounds (gemv_rounds.cuh). */
template <int MR, int R, uint32_t L, bool Early, class XC, class Between>
__device__ __forceinline__ void warp_dot(const uint4 *const (&q)[R], const uint16_t *const (&d)[R],
                                         uint32_t C, uint32_t lane, XC xc, Between between,
                                         float (&acc)[R][MR]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++) acc[r][m] = 0.0f;
    uint4 wq[R][L][2]; /* a round: wq[][u] = block b0 + 32u, its two 16-byte halves */
    uint16_t wd[R][L];
    auto load = [&](uint32_t u, uint32_t b) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            wq[r][u][0] = __ldcs(q[r] + 2 * b);
            wq[r][u][1] = __ldcs(q[r] + 2 * b + 1);
            wd[r][u] = __ldcs(d[r] + b);
        }
    };
    /* block b (round slot u): for each column r and row m, p = +0, 32 FMAs in the block's order,
     * then acc = fma(p, d, acc) */
    auto fma_block = [&](uint32_t u, uint32_t b) {
        float p[R][MR];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int m = 0; m < MR; m++) p[r][m] = 0.0f;
#pragma unroll
        for (uint32_t c = 0; c < kBlock / 8; c++) { /* X's chunk 4b + c: elements 8c .. 8c + 7 */
            float wf[R][8];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint4 &h = wq[r][u][c / 2];
                float lo[4], hi[4];
                unpack_q(c % 2 ? h.z : h.x, lo);
                unpack_q(c % 2 ? h.w : h.y, hi);
#pragma unroll
                for (int e = 0; e < 4; e++) wf[r][e] = lo[e], wf[r][4 + e] = hi[e];
            }
#pragma unroll
            for (int m = 0; m < MR; m++) {
                float xf[8];
                pgd_gemv_unpack_x(xc(m, 4 * b + c), xf);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < 8; e++) p[r][m] = __fmaf_rn(xf[e], wf[r][e], p[r][m]);
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = __half2float(__ushort_as_half(wd[r][u]));
#pragma unroll
            for (int m = 0; m < MR; m++) acc[r][m] = __fmaf_rn(p[r][m], s, acc[r][m]);
        }
    };
    pgd_gemv_rounds<L, Early>(C, lane, load, fma_block, between);
    pgd_gemv_fold<MR, R>(acc);
}

/* Plain (Silu false): X bf16 [MR][K], W [N][K] in THE FORM, Y f32 [MR][N]; warp w computes the
 * columns w R .. w R + R - 1 (those below N). Silu: W is the fused gate/up weight [2N][K] (gate
 * rows, then up rows), O bf16 [MR][N]; warp w computes the columns j = w R / 2 .. + R / 2 - 1 of
 * gate and of up, and writes bf16(SiLU(gate) * up) for each. K a multiple of 32. Launch bounds
 * with one CTA an SM, as gemv.cu's default instances: the compiler may spend the registers a
 * whole round in flight needs. */
template <int MR, int R, bool Silu, bool Early>
__global__ void __launch_bounds__(kThreads, 1)
    gemv_q8_kernel(const uint16_t *X, pgd_q8_mat W, float *Y, uint16_t *O, uint32_t N, uint32_t K,
                   uint32_t ldy) {
    static_assert(!Silu || R % 2 == 0, "gate and up columns in pairs");
    constexpr int P = Silu ? R / 2 : R;                             /* output columns a warp */
    constexpr uint32_t L = kRoundBlocks > R ? kRoundBlocks / R : 1; /* blocks of a row a round */
    const uint32_t lane = threadIdx.x % kLanes;
    const uint32_t n0 = (blockIdx.x * kWarps + threadIdx.x / kLanes) * P;
    if (n0 >= N) return; /* uniform over the warp */
    const uint4 *q[R];
    const uint16_t *d[R];
    col_rows<R, Silu>(W, n0, N, K, q, d);
    float acc[R][MR];
    auto xc = [&](int m, uint32_t c) {
        return __ldg(reinterpret_cast<const uint4 *>(X + (uint64_t)m * K) + c);
    };
    /* X is the previous kernel's output */
    warp_dot<MR, R, L, Early>(
        q, d, K / kBlock, lane, xc, [] { pgd_dev_pdl_enter(); }, acc);
    if (lane == 0) pgd_gemv_store<MR, R, Silu>(acc, n0, N, ldy, Y, O);
}

template <int MR, bool Silu>
cudaError_t launch(const uint16_t *X, pgd_q8_mat W, float *Y, uint16_t *O, uint32_t N, uint32_t K,
                   uint32_t ldy, cudaStream_t stream) {
    constexpr int R = Silu && cols_for(MR) < 2 ? 2 : cols_for(MR);
    constexpr int P = Silu ? R / 2 : R;
    const uint64_t warps = ((uint64_t)N + P - 1) / P;
    const unsigned ctas = (unsigned)((warps + kWarps - 1) / kWarps);
    if constexpr (MR == 1)
        if (pgd_gemv_early_loads())
            return pgd_cuda_launch(gemv_q8_kernel<MR, R, Silu, true>, ctas, kThreads, 0, stream, X,
                                   W, Y, O, N, K, ldy);
    return pgd_cuda_launch(gemv_q8_kernel<MR, R, Silu, false>, ctas, kThreads, 0, stream, X, W, Y,
                           O, N, K, ldy);
}

using launch_fn = cudaError_t (*)(const uint16_t *, pgd_q8_mat, float *, uint16_t *, uint32_t,
                                  uint32_t, uint32_t, cudaStream_t);

/* The checks and the launch of the plain form (N columns, output rows ldy apart) or the SiLU
 * form (N pairs, ldy N): 0 or PGD_EINVAL (said) / PGD_ECUDA. */
template <bool Silu>
int gemv_q8(const uint16_t *X, pgd_q8_mat W, float *Y, uint16_t *O, uint32_t M, uint32_t N,
            uint32_t K, uint32_t ldy, void *stream) {
    if (M < 1 || M > PGD_CUDA_GEMV_MAX_M || N < 1 || ldy < N || (Silu && N > UINT32_MAX / 2) ||
        K == 0 || K % kBlock || (uintptr_t)X % 16 || (uintptr_t)W.q % 16 || (uintptr_t)W.d % 2)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA GEMV q8%s: %u rows (1 to %u), %u columns (at least 1, at most "
                             "the output's row stride %u), K %u (a multiple of 32), X and W.q "
                             "16-byte aligned, W.d 2-byte aligned",
                             Silu ? " + SiLU" : "", M, PGD_CUDA_GEMV_MAX_M, N, ldy, K);
    static const launch_fn by_m[] = {launch<1, Silu>, launch<2, Silu>, launch<3, Silu>,
                                     launch<4, Silu>, launch<5, Silu>, launch<6, Silu>,
                                     launch<7, Silu>, launch<8, Silu>};
    static_assert(sizeof by_m / sizeof by_m[0] == PGD_CUDA_GEMV_MAX_M, "one instance per M");
    PGD_CUDA_TRY(by_m[M - 1](X, W, Y, O, N, K, ldy, (cudaStream_t)stream));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_gemv_q8(const uint16_t *X, pgd_q8_mat W, float *Y, uint32_t M, uint32_t N,
                                uint32_t K, void *stream) {
    return gemv_q8<false>(X, W, Y, NULL, M, N, K, N, stream);
}

extern "C" int pgd_cuda_gemv_q8_ld(const uint16_t *X, pgd_q8_mat W, float *Y, uint32_t ldy,
                                   uint32_t M, uint32_t N, uint32_t K, void *stream) {
    return gemv_q8<false>(X, W, Y, NULL, M, N, K, ldy, stream);
}

extern "C" int pgd_cuda_gemv_q8_silu(const uint16_t *X, pgd_q8_mat Wgu, uint16_t *out, uint32_t M,
                                     uint32_t F, uint32_t K, void *stream) {
    return gemv_q8<true>(X, Wgu, NULL, out, M, F, K, F, stream);
}
