/*
 * kernels/cuda/gemv_rounds.cuh — what the GEMVs over 8- and 4-bit weights (gemv_q8.cu,
 * gemv_q4.cu) share: a lane's walk over its blocks in rounds of loads, the warp's fold of its
 * sums, lane 0's stores, X's chunk as f32, and the one-row early-load switch. Each kernel brings
 * its own weights' loads and a block's arithmetic (THE SUM of its header); the order of the sums
 * is theirs, this only schedules. Device code but gemv_early_loads (any host thread).
 */
#ifndef PGD_KERNELS_CUDA_GEMV_ROUNDS_CUH
#define PGD_KERNELS_CUDA_GEMV_ROUNDS_CUH

#include <stdint.h>

#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemv.h" /* PGD_CUDA_GEMV_LANES */
#include "kernels/cuda/silu_math.cuh"

/* The 8 bf16 of a 16-byte chunk of X as f32 (exact). */
__device__ __forceinline__ void pgd_gemv_unpack_x(const uint4 &r, float (&f)[8]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

/* A lane's walk over its blocks lane, lane + 32, ... (C a row) in rounds of L: load(u, b) puts
 * block b in round slot u, fma(u, b) adds slot u's block b into the lane's sums; between() runs
 * once, after the first round's loads are in flight (Early) or before any load (the wait for the
 * previous kernel). As in gemv.cu, whole rounds have no branch between their loads and their
 * FMAs (a bound check per block would let the compiler sink each load after the previous block's
 * FMAs: one load in flight); a partial round (the first before the wait, or the last) loads
 * unconditionally (past the row: the round's first block again, or block 0 for a lane with none)
 * and adds only the blocks in the row. The blocks are added in ascending order whatever L. */
template <uint32_t L, bool Early, class Load, class Fma, class Between>
__device__ __forceinline__ void pgd_gemv_rounds(uint32_t C, uint32_t lane, Load load, Fma fma,
                                                Between between) {
    constexpr uint32_t kLanes = PGD_CUDA_GEMV_LANES;
    auto load_part = [&](uint32_t b0) {
        const uint32_t again = b0 < C ? b0 : 0;
#pragma unroll
        for (uint32_t u = 0; u < L; u++) {
            const uint32_t b = b0 + u * kLanes;
            load(u, b < C ? b : again);
        }
    };
    auto fma_part = [&](uint32_t b0) {
#pragma unroll
        for (uint32_t u = 0; u < L; u++) {
            const uint32_t b = b0 + u * kLanes;
            if (b >= C) break;
            fma(u, b);
        }
    };
    uint32_t b0 = lane;
    if (Early) { /* W is constant during a step: the first round in flight before the wait */
        load_part(b0);
        between();
        fma_part(b0);
        b0 += kLanes * L;
    } else {
        between();
    }
    for (; b0 + kLanes * (L - 1) < C; b0 += kLanes * L) { /* whole rounds: no branch */
#pragma unroll
        for (uint32_t u = 0; u < L; u++) load(u, b0 + u * kLanes);
#pragma unroll
        for (uint32_t u = 0; u < L; u++) fma(u, b0 + u * kLanes);
    }
    if (b0 < C) { /* the lane's last blocks, fewer than L */
        load_part(b0);
        fma_part(b0);
    }
}

/* The warp's fold of each sum by the tree y_l = y_l + y_{l+s}, s = 16, 8, 4, 2, 1: lane 0 ends
 * with the results. */
template <int MR, int R> __device__ __forceinline__ void pgd_gemv_fold(float (&acc)[R][MR]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++)
#pragma unroll
            for (uint32_t s = PGD_CUDA_GEMV_LANES / 2; s > 0; s /= 2)
                acc[r][m] = __fadd_rn(acc[r][m], __shfl_down_sync(0xffffffffu, acc[r][m], s));
}

/* Lane 0's results for the columns n0 .. n0 + P - 1 below N (P = R, or R / 2 gate and up pairs
 * in the SiLU form): Y[m][n] = sum, or in the SiLU form O[m][n] = bf16(SiLU(gate) * up); the
 * output's rows ldy elements apart (ldy >= N). */
template <int MR, int R, bool Silu>
__device__ __forceinline__ void pgd_gemv_store(const float (&acc)[R][MR], uint32_t n0, uint32_t N,
                                               uint32_t ldy, float *Y, uint16_t *O) {
    constexpr int P = Silu ? R / 2 : R;
#pragma unroll
    for (int r = 0; r < P; r++)
        if (n0 + r < N)
#pragma unroll
            for (int m = 0; m < MR; m++) {
                const uint64_t i = (uint64_t)m * ldy + n0 + r;
                if (Silu)
                    O[i] = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(acc[r][m], acc[P + r][m]));
                else
                    Y[i] = acc[r][m];
            }
}

/* Whether a one-row product's warps issue their first round of W loads before the wait for the
 * previous kernel: gemv.cu's default and its switch (PGD_CUDA_GEMV_EARLY=0 turns it off), read
 * once a kernel file; any host thread. */
static inline bool pgd_gemv_early_loads() {
    static int known;
    return pgd_cuda_env_switch_once(&known, "PGD_CUDA_GEMV_EARLY", true);
}

#endif
