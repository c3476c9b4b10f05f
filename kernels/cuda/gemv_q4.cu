/*
 * kernels/cuda/gemv_q4.cu — Y = X · Wᵀ for up to PGD_CUDA_GEMV_MAX_M rows over weights in 4 bits
 * (gemv_q4.h: THE SUM; q4.h: THE FORM). Owns nothing. CPU twin: gemv_q4_twin.c, bit for bit.
 *
 * Why: a batch-1 decode step of a 4-bit model reads every weight once and computes little, so
 * this product runs at the speed its weights stream — 20 bytes a block of 32 (16 of nibbles, 4
 * of d and m) instead of gemv.cu's 64. It is gemv_q8.cu's kernel over THE FORM: a warp per few
 * columns, rounds of loads, one fold.
 *
 * Grid: one warp per R output columns (rows of W: R = 2 at one row, 4 from two, cols_for), kWarps
 * warps a CTA; templated on M and R so a lane's M x R accumulators stay in registers. How many
 * columns a warp takes never changes a result (THE SUM is per column). Lane l takes whole blocks
 * of 32 weights, b = l, l + 32, ...: a block is one 16-byte load of q (a warp: 512 contiguous
 * bytes) and one 4-byte load of dm (128 contiguous bytes), streamed (__ldcs: W is read once a
 * step and should not push the activations and the KV cache out of L2); X's 64 bytes of a block
 * come through the read-only cache (__ldg: every warp reads the same M rows). A lane loads a
 * round of L blocks of each of its R rows before their FMAs, L = max(1, 4 / R) (kRoundBlocks):
 * four 16-byte loads of q and four of dm a lane, gemv.cu's 64 bytes of W in flight (at one row,
 * two blocks of each of the two rows). What ptxas makes of it (sm_90a, nvcc 13.0; registers from
 * cuobjdump -res-usage on the built object, the loads read with cuobjdump -sass): at one row 115
 * registers (118-121 with the early first round, 111 in the SiLU form), no stack; of a round's 4
 * q and 4 dm loads, the first block's 2 q loads and all 4 dm loads are issued before the first
 * conversion, the second block's q loads after the first block's conversions begin (ptxas's
 * choice: the source has no branch between them) — a GPU should decide whether more is worth
 * forcing. Two and three rows 128 (kMinCtas: four CTAs an SM), four 236-245, five to eight
 * 245-255; no spills but 8 bytes of stack in the SiLU form at seven and eight rows.
 * PGD_CUDA_GEMV_Q4_ROUND=1 forces it at one row (opt-in; the A/B in bench_cuda_decode_kernels'
 * 4-bit table): a __syncwarp after a round's loads, a memory barrier ptxas keeps them above —
 * all 4 q and 4 dm loads then issue before the first conversion, at 142-146 registers (3 CTAs
 * an SM instead of 4: 64 bytes of W in flight a lane instead of ~32); the other instances' SASS
 * is unchanged by the switch's existence. Measured slower on an H200 (2026-12-04, Llama-3-8B's
 * shapes at one row): QKV 11.4 us against 10.9, O 9.1 against 8.5, gate/up 38.5 against 34.6,
 * down 21.0 against 19.9, the head 156.8 against 136.2: it stays off.
 *
 * X per weight: a block of X (64 bytes a row) serves the warp's R columns, so X's L1 traffic is
 * 3.2 M / R times W's: 1.6 at one row, 3.2 at four (the columns grow one step sooner than in
 * gemv_q8.cu: X's 64 bytes a block meet 20 of W here, 34 there). s, a block's sum of x,
 * depends on X's row and the block alone: each lane computes it once for the warp's R columns,
 * interleaved with the FMAs of p (an independent chain: no latency added), 1 / R additions a
 * weight a row. A CTA-wide s in shared memory would save those additions but cost a barrier and a
 * prologue whose chains (a row's K / 32 blocks of 32 dependent additions, shared by 128 threads)
 * run before the first FMA: at M = 8 and K = 14336 about a thousand dependent additions a thread.
 *
 * The nibble -> f32 conversion, exact, no I2F (a quarter-rate instruction): the nibble at bits
 * S .. S + 3 of a word (S <= 16) masked and put under 2^23's exponent by one LOP3 (mask and OR)
 * is the f32 2^23 + q 2^S, and one FFMA by 2^-S less 2^(23 - S) gives q (the product is exact, a
 * power of two times a normal number, and q exact). The nibbles at bits 20, 24 and 28 take one
 * shift of the word by 12 first, shared. So a word of eight weights costs 9 integer operations
 * and 8 FP32 ones: at one row the integer pipe (64 a clock per SM, which also widens X) and the
 * FP32 pipe (128: the conversion, the FMA, half an addition for s) keep ahead of the ~29 weights
 * a clock per SM an H200's copy bandwidth brings at 0.625 bytes a weight.
 *
 * Then the shuffle-down tree and lane 0 writes the M results. No shared memory, no barrier: a
 * warp past N leaves at once. The SiLU form takes gate column j and up column F + j in the same
 * warp and writes bf16(SiLU(gate) * up) from lane 0 (silu_math.cuh: silu_mul.cu's arithmetic).
 *
 * PDL (cuda_util.cuh): W is constant during a step, so at one row a warp's first round of W
 * loads is issued before the wait for the previous kernel, as in gemv.cu (and under the same
 * switch, PGD_CUDA_GEMV_EARLY=0); X is read only after it.
 *
 * Invariants: every FMA and addition of THE SUM is written __fmaf_rn / __fadd_rn (nothing
 * contracted, nothing reordered); p and s start from +0 and take a block's 32 elements in
 * ascending order; a lane's blocks ascend; acc takes p d before s m.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemv_q4.h"
#include "kernels/cuda/gemv_rounds.cuh"
#include "kernels/cuda/silu_math.cuh"

namespace {

constexpr uint32_t kLanes = PGD_CUDA_GEMV_LANES;
constexpr uint32_t kBlock = PGD_Q4_BLOCK; /* weights a block, one d and one m */
constexpr uint32_t kWarps = 4, kThreads = kWarps * kLanes;
constexpr uint32_t kRoundBlocks = 4; /* blocks of W a lane loads a round, all R rows together */
static_assert(kLanes == 32 && kBlock == 32, "a lane takes whole blocks, the warp 32 of them");

/* The columns a warp takes for M rows: each X block a lane reads from the cache then serves R
 * columns (and its s is added once for them). */
constexpr int cols_for(int MR) {
    return MR == 1 ? 2 : 4;
}

/* The CTAs an SM the launch bounds ask for at M rows (the header comment has the registers each
 * makes): one, so the compiler may spend the registers a whole round in flight needs, except at 2
 * and 3 rows, where four (128 registers a lane) still spill nothing and let four CTAs share an SM
 * where one alone took 218 to 240 (from 4 rows, 128 spilled). */
template <int MR> constexpr uint32_t kMinCtas = MR == 2 || MR == 3 ? 4 : 1;

/* The nibble at bits pos .. pos + 3 of w (pos a multiple of 4, a constant once unrolled) as f32,
 * exactly (the header comment says how): one mask-and-OR, one FFMA; past bit 16 the word shifted
 * by 12 first. */
__device__ __forceinline__ float nib(uint32_t w, uint32_t pos) {
    const uint32_t sh = pos <= 16 ? 0 : 12, s = pos - sh;
    const float f = __uint_as_float(((w >> sh) & (0xFu << s)) | 0x4B000000u); /* 2^23 + q 2^s */
    return __fmaf_rn(f, __uint_as_float((127u - s) << 23), -__uint_as_float((150u - s) << 23));
}

/* W's rows of the R columns a warp takes from n0 (P = R, or R / 2 gate and up pairs in the SiLU
 * form: gate rows n, then up rows N + n), as q's 16-byte blocks and dm's words; a column past N
 * reads the last one again (its result is dropped). */
template <int R, bool Silu>
__device__ __forceinline__ void col_rows(const pgd_q4_mat &W, uint32_t n0, uint32_t N, uint32_t K,
                                         const uint4 *(&q)[R], const uint32_t *(&dm)[R]) {
    constexpr int P = Silu ? R / 2 : R;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint64_t col = min(n0 + r % P, N - 1) + (Silu && r >= P ? N : 0);
        q[r] = reinterpret_cast<const uint4 *>(W.q + col * (K / 2));
        dm[r] = W.dm + col * (K / kBlock);
    }
}

/* A warp's R dot products with MR rows of X by THE SUM, C blocks a row: q[r], dm[r] W's rows;
 * xc(m, c) X's 16-byte chunk c (8 elements) of row m. between() is called once by every lane:
 * after the warp's first round of W loads is in flight (Early), or before any load — the wait for
 * the previous kernel. Lane 0 ends with the sums in acc. The blocks in rounds of L:
 * pgd_gemv_rounds (gemv_rounds.cuh). */
template <int MR, int R, uint32_t L, bool Early, bool Round, class XC, class Between>
__device__ __forceinline__ void warp_dot(const uint4 *const (&q)[R], const uint32_t *const (&dm)[R],
                                         uint32_t C, uint32_t lane, XC xc, Between between,
                                         float (&acc)[R][MR]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++) acc[r][m] = 0.0f;
    uint4 wq[R][L]; /* a round: wq[][u] = block b0 + 32u, its 32 nibbles */
    uint32_t wdm[R][L];
    auto load = [&](uint32_t u, uint32_t b) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            wq[r][u] = __ldcs(q[r] + b);
            wdm[r][u] = __ldcs(dm[r] + b);
        }
        /* Round: the round's loads all issued before this point (a memory barrier ptxas keeps
         * them above: PGD_CUDA_GEMV_Q4_ROUND) */
        if (Round && u == L - 1) __syncwarp();
    };
    /* block b (round slot u): for each row m, s = +0 and for each column r p = +0; 32 elements in
     * the block's order (s's additions once for the R columns); then acc = fma(p, d, acc), then
     * acc = fma(s, m, acc) */
    auto fma_block = [&](uint32_t u, uint32_t b) {
        float p[R][MR], s[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) {
            s[m] = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) p[r][m] = 0.0f;
        }
#pragma unroll
        for (uint32_t c = 0; c < kBlock / 8; c++) { /* X's chunk 4b + c: elements 8c .. 8c + 7 */
            /* element 8c + e: byte 8 (c % 2) + e (word 2 (c % 2) + e / 4, its byte e % 4), the
             * low nibble for c < 2, the high one after */
            const uint32_t hi = 4 * (c / 2);
            float xf[MR][8];
#pragma unroll
            for (int m = 0; m < MR; m++) {
                pgd_gemv_unpack_x(xc(m, 4 * b + c), xf[m]);
#pragma unroll
                for (int e = 0; e < 8; e++) s[m] = __fadd_rn(s[m], xf[m][e]);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint4 &h = wq[r][u];
                const uint32_t w0 = c % 2 ? h.z : h.x, w1 = c % 2 ? h.w : h.y;
#pragma unroll
                for (uint32_t e = 0; e < 8; e++) {
                    const float wv = nib(e < 4 ? w0 : w1, 8 * (e % 4) + hi);
#pragma unroll
                    for (int m = 0; m < MR; m++) p[r][m] = __fmaf_rn(xf[m][e], wv, p[r][m]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = __half2float(__ushort_as_half((unsigned short)(wdm[r][u] & 0xFFFFu)));
            const float mo = __half2float(__ushort_as_half((unsigned short)(wdm[r][u] >> 16)));
#pragma unroll
            for (int m = 0; m < MR; m++) {
                acc[r][m] = __fmaf_rn(p[r][m], d, acc[r][m]);
                acc[r][m] = __fmaf_rn(s[m], mo, acc[r][m]);
            }
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
template <int MR, int R, bool Silu, bool Early, bool Round = false>
__global__ void __launch_bounds__(kThreads, kMinCtas<MR>)
    gemv_q4_kernel(const uint16_t *X, pgd_q4_mat W, float *Y, uint16_t *O, uint32_t N, uint32_t K,
                   uint32_t ldy) {
    static_assert(!Silu || R % 2 == 0, "gate and up columns in pairs");
    constexpr int P = Silu ? R / 2 : R;                             /* output columns a warp */
    constexpr uint32_t L = kRoundBlocks > R ? kRoundBlocks / R : 1; /* blocks of a row a round */
    const uint32_t lane = threadIdx.x % kLanes;
    const uint32_t n0 = (blockIdx.x * kWarps + threadIdx.x / kLanes) * P;
    if (n0 >= N) return; /* uniform over the warp */
    const uint4 *q[R];
    const uint32_t *dm[R];
    col_rows<R, Silu>(W, n0, N, K, q, dm);
    float acc[R][MR];
    auto xc = [&](int m, uint32_t c) {
        return __ldg(reinterpret_cast<const uint4 *>(X + (uint64_t)m * K) + c);
    };
    /* X is the previous kernel's output */
    warp_dot<MR, R, L, Early, Round>(
        q, dm, K / kBlock, lane, xc, [] { pgd_dev_pdl_enter(); }, acc);
    if (lane == 0) pgd_gemv_store<MR, R, Silu>(acc, n0, N, ldy, Y, O);
}

/* Whether one-row products issue each round's loads all before its conversions
 * (PGD_CUDA_GEMV_Q4_ROUND=1; off by default), read once; any host thread. */
bool round_first() {
    static int known;
    return pgd_cuda_env_switch_once(&known, "PGD_CUDA_GEMV_Q4_ROUND", false);
}

/* round: at one row, each round's loads all first (-1: as round_first() says). */
template <int MR, bool Silu>
cudaError_t launch(const uint16_t *X, pgd_q4_mat W, float *Y, uint16_t *O, uint32_t N, uint32_t K,
                   uint32_t ldy, cudaStream_t stream, int round = -1) {
    constexpr int R = Silu && cols_for(MR) < 2 ? 2 : cols_for(MR);
    constexpr int P = Silu ? R / 2 : R;
    const uint64_t warps = ((uint64_t)N + P - 1) / P;
    const unsigned ctas = (unsigned)((warps + kWarps - 1) / kWarps);
    if constexpr (MR == 1) {
        const bool early = pgd_gemv_early_loads(), all = round < 0 ? round_first() : round > 0;
        auto go = [&](auto kernel) {
            return pgd_cuda_launch(kernel, ctas, kThreads, 0, stream, X, W, Y, O, N, K, ldy);
        };
        return early && all ? go(gemv_q4_kernel<MR, R, Silu, true, true>)
               : early      ? go(gemv_q4_kernel<MR, R, Silu, true, false>)
               : all        ? go(gemv_q4_kernel<MR, R, Silu, false, true>)
                            : go(gemv_q4_kernel<MR, R, Silu, false, false>);
    }
    return pgd_cuda_launch(gemv_q4_kernel<MR, R, Silu, false>, ctas, kThreads, 0, stream, X, W, Y,
                           O, N, K, ldy);
}

using launch_fn_r = cudaError_t (*)(const uint16_t *, pgd_q4_mat, float *, uint16_t *, uint32_t,
                                    uint32_t, uint32_t, cudaStream_t, int);

/* The checks of the plain form (N columns, output rows ldy apart) or the SiLU form (N pairs,
 * ldy N): 0 or PGD_EINVAL (said). */
int check(bool silu, const uint16_t *X, pgd_q4_mat W, uint32_t M, uint32_t N, uint32_t K,
          uint32_t ldy) {
    if (M < 1 || M > PGD_CUDA_GEMV_MAX_M || N < 1 || ldy < N || (silu && N > UINT32_MAX / 2) ||
        K == 0 || K % kBlock || (uintptr_t)X % 16 || (uintptr_t)W.q % 16 || (uintptr_t)W.dm % 4)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA GEMV q4%s: %u rows (1 to %u), %u columns (at least 1, at most "
                             "the output's row stride %u), K %u (a multiple of 32), X and W.q "
                             "16-byte aligned, W.dm 4-byte aligned",
                             silu ? " + SiLU" : "", M, PGD_CUDA_GEMV_MAX_M, N, ldy, K);
    return 0;
}

template <bool Silu>
int gemv_q4(const uint16_t *X, pgd_q4_mat W, float *Y, uint16_t *O, uint32_t M, uint32_t N,
            uint32_t K, uint32_t ldy, void *stream) {
    int rc = check(Silu, X, W, M, N, K, ldy);
    if (rc) return rc;
    static const launch_fn_r by_m[] = {launch<1, Silu>, launch<2, Silu>, launch<3, Silu>,
                                       launch<4, Silu>, launch<5, Silu>, launch<6, Silu>,
                                       launch<7, Silu>, launch<8, Silu>};
    static_assert(sizeof by_m / sizeof by_m[0] == PGD_CUDA_GEMV_MAX_M, "one instance per M");
    PGD_CUDA_TRY(by_m[M - 1](X, W, Y, O, N, K, ldy, (cudaStream_t)stream, -1));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_gemv_q4(const uint16_t *X, pgd_q4_mat W, float *Y, uint32_t M, uint32_t N,
                                uint32_t K, void *stream) {
    return gemv_q4<false>(X, W, Y, NULL, M, N, K, N, stream);
}

extern "C" int pgd_cuda_gemv_q4_ld(const uint16_t *X, pgd_q4_mat W, float *Y, uint32_t ldy,
                                   uint32_t M, uint32_t N, uint32_t K, void *stream) {
    return gemv_q4<false>(X, W, Y, NULL, M, N, K, ldy, stream);
}

extern "C" int pgd_cuda_gemv_q4_one(const uint16_t *X, pgd_q4_mat W, float *Y, uint32_t N,
                                    uint32_t K, int round_first, void *stream) {
    int rc = check(false, X, W, 1, N, K, N);
    if (rc) return rc;
    const launch_fn_r one = launch<1, false>;
    PGD_CUDA_TRY(one(X, W, Y, NULL, N, K, N, (cudaStream_t)stream, round_first ? 1 : 0));
    return 0;
}

extern "C" int pgd_cuda_gemv_q4_silu(const uint16_t *X, pgd_q4_mat Wgu, uint16_t *out, uint32_t M,
                                     uint32_t F, uint32_t K, void *stream) {
    return gemv_q4<true>(X, Wgu, NULL, out, M, F, K, F, stream);
}
