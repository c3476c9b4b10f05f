/*
 * kernels/cuda/attention_mma.cuh — one warp's products over a block of PGD_ATTN_TC_KEYS (64) keys
 * on tensor cores (mma_sync.cuh), the part the prefill kernel (attention_tc.cu) and the decode
 * kernel (attention_dec.cu) share: S = Q K^T for the warp's 16 query rows (or MT tiles of 16:
 * the K and V fragments then read once for all of them), and O += P V.
 *
 * Layouts: Q, K and V staged in shared memory as f16 rows of `ld` elements (ld a multiple of 8,
 * rows padded so that ldmatrix's eight row addresses fall in distinct banks): Q [16][>= D] (the
 * warp's rows), K and V [64][>= D] (the block's keys). S and O are mma.sync accumulators: s[n]
 * the 16 x 8 tile of keys 8n .. 8n + 7, o[f] that of dimensions 8f .. 8f + 7; lane L holds rows
 * L / 4 and L / 4 + 8, columns 2 (L % 4) and + 1 (mma_sync.cuh). P is S's weights rounded to
 * f16, as A registers (pgd_attn_mma_pack_p).
 *
 * Threading: warp-collective (all 32 lanes).
 */
#ifndef PGD_KERNELS_CUDA_ATTENTION_MMA_CUH
#define PGD_KERNELS_CUDA_ATTENTION_MMA_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/mma_sync.cuh"

#define PGD_ATTN_MMA_N (PGD_ATTN_TC_KEYS / 8) /* S tiles of a block */

/* This lane's ldmatrix row address in a 16-row operand read as A, or as V (.trans): lane L
 * gives matrix L / 8's row L % 8, matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15),
 * (8-15, 8-15). */
static __device__ __forceinline__ const __half *pgd_attn_ldm_a(const __half *rows, uint32_t ld,
                                                               uint32_t lane) {
    return rows + (lane % 8 + 8 * (lane / 8 % 2)) * ld + 8 * (lane / 16);
}

/* The same for K rows read as B (non-transposed): matrices (keys 0-7, dims 0-7), (0-7, 8-15),
 * (8-15, 0-7), (8-15, 8-15), so registers 0, 1 are one 8-key tile's B and 2, 3 the next's. */
static __device__ __forceinline__ const __half *pgd_attn_ldm_k(const __half *keys, uint32_t ld,
                                                               uint32_t lane) {
    return keys + (lane % 8 + 8 * (lane / 16)) * ld + 8 * (lane / 8 % 2);
}

/* 2^x for a weight of the online softmax: the special-function unit's own result
 * (ex2.approx.ftz: a result below 2^-126 is 0, 2^-inf is 0). exp2f returns the same bits for
 * x >= -126 but guards each call for subnormal results (a compare and two predicated multiplies,
 * a third of a block's softmax instructions); a weight below 2^-126 is 0 once rounded to f16 for
 * P V either way, and nothing in a row's sum, which holds the row's largest weight, 1. */
static __device__ __forceinline__ float pgd_attn_exp2(float x) {
#if defined(__CUDACC__)
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else /* the emulator (tests/cuda_emu): the host's exp2f, flushed likewise */
    const float r = exp2f(x);
    return r < 0x1p-126f ? 0.0f : r;
#endif
}

/* s[t] = Q_t K^T over head_dim D for MT tiles of 16 query rows (Q_t at qa + t * q_step): each K
 * fragment is read once for the MT tiles; every accumulator sums its head_dim steps in the same
 * order whatever MT is (so a row's bits do not depend on it). qa = pgd_attn_ldm_a(Q_0), ka =
 * pgd_attn_ldm_k(K). */
template <uint32_t D, uint32_t MT>
static __device__ __forceinline__ void pgd_attn_mma_scores_mt(float (&s)[MT][PGD_ATTN_MMA_N][4],
                                                              const __half *qa, uint32_t q_step,
                                                              const __half *ka, uint32_t ld) {
#pragma unroll
    for (uint32_t t = 0; t < MT; t++)
#pragma unroll
        for (uint32_t n = 0; n < PGD_ATTN_MMA_N; n++)
            s[t][n][0] = s[t][n][1] = s[t][n][2] = s[t][n][3] = 0.0f;
#pragma unroll
    for (uint32_t kk = 0; kk < D / 16; kk++) {
        uint32_t af[MT][4];
#pragma unroll
        for (uint32_t t = 0; t < MT; t++) pgd_ldmatrix_x4(af[t], qa + t * q_step + kk * 16);
#pragma unroll
        for (uint32_t n = 0; n < PGD_ATTN_MMA_N / 2; n++) {
            uint32_t bf[4];
            pgd_ldmatrix_x4(bf, ka + n * 16 * ld + kk * 16);
#pragma unroll
            for (uint32_t t = 0; t < MT; t++) {
                pgd_mma_16816(s[t][2 * n], af[t], bf[0], bf[1]);
                pgd_mma_16816(s[t][2 * n + 1], af[t], bf[2], bf[3]);
            }
        }
    }
}

/* s = Q K^T over head_dim D for one tile of 16 rows: qa = pgd_attn_ldm_a(Q), ka =
 * pgd_attn_ldm_k(K). */
template <uint32_t D>
static __device__ __forceinline__ void pgd_attn_mma_scores(float (&s)[PGD_ATTN_MMA_N][4],
                                                           const __half *qa, const __half *ka,
                                                           uint32_t ld) {
    pgd_attn_mma_scores_mt<D, 1>(reinterpret_cast<float(&)[1][PGD_ATTN_MMA_N][4]>(s), qa, 0, ka,
                                 ld);
}

/* p (weights in S's layout) rounded to f16 as the A registers of P V: pf[j] = keys 16j .. +15
 * (the accumulators of two neighbouring 8-key tiles are one 16-key A operand). */
static __device__ __forceinline__ void pgd_attn_mma_pack_p(uint32_t (&pf)[PGD_ATTN_MMA_N / 2][4],
                                                           const float (&p)[PGD_ATTN_MMA_N][4]) {
#pragma unroll
    for (uint32_t j = 0; j < PGD_ATTN_MMA_N / 2; j++) {
        pf[j][0] = pgd_mma_pack(p[2 * j][0], p[2 * j][1]);
        pf[j][1] = pgd_mma_pack(p[2 * j][2], p[2 * j][3]);
        pf[j][2] = pgd_mma_pack(p[2 * j + 1][0], p[2 * j + 1][1]);
        pf[j][3] = pgd_mma_pack(p[2 * j + 1][2], p[2 * j + 1][3]);
    }
}

/* o[t] += P_t V over head_dim D for MT tiles of 16 rows: each V fragment read once for the MT
 * tiles, every accumulator's keys in the same order whatever MT is. va = pgd_attn_ldm_a(V) (read
 * transposed). */
template <uint32_t D, uint32_t MT>
static __device__ __forceinline__ void
pgd_attn_mma_pv_mt(float (&o)[MT][D / 8][4], const uint32_t (&pf)[MT][PGD_ATTN_MMA_N / 2][4],
                   const __half *va, uint32_t ld) {
#pragma unroll
    for (uint32_t j = 0; j < PGD_ATTN_MMA_N / 2; j++)
#pragma unroll
        for (uint32_t f = 0; f < D / 16; f++) {
            uint32_t bf[4];
            pgd_ldmatrix_x4_trans(bf, va + j * 16 * ld + f * 16);
#pragma unroll
            for (uint32_t t = 0; t < MT; t++) {
                pgd_mma_16816(o[t][2 * f], pf[t][j], bf[0], bf[1]);
                pgd_mma_16816(o[t][2 * f + 1], pf[t][j], bf[2], bf[3]);
            }
        }
}

/* o += P V over head_dim D for one tile of 16 rows: va = pgd_attn_ldm_a(V) (read transposed). */
template <uint32_t D>
static __device__ __forceinline__ void pgd_attn_mma_pv(float (&o)[D / 8][4],
                                                       const uint32_t (&pf)[PGD_ATTN_MMA_N / 2][4],
                                                       const __half *va, uint32_t ld) {
    pgd_attn_mma_pv_mt<D, 1>(reinterpret_cast<float(&)[1][D / 8][4]>(o),
                             reinterpret_cast<const uint32_t(&)[1][PGD_ATTN_MMA_N / 2][4]>(pf), va,
                             ld);
}

#endif
