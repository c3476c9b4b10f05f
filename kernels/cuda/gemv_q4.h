/*
 * kernels/cuda/gemv_q4.h — the products of few rows (decode steps of up to PGD_CUDA_GEMV_MAX_M
 * sequences) over weights in 4 bits (q4.h's THE FORM): Y[M][N] (f32) = X[M][K] (bf16) · W[N][K]ᵀ,
 * f32 FMAs. The 4-bit twin of gemv_q8.h: W is read once, in 16-byte coalesced loads with many in
 * flight — 0.625 bytes a weight instead of 2, so a batch-1 decode streams 5/16 of bf16's bytes.
 * CPU twin: pgd_cuda_gemv_q4_twin (gemv_q4_twin.c), bit for bit. Device pointers; asynchronous.
 *
 * THE SUM (what the twin repeats): W's row n and X's row m are cut into blocks of 32 elements
 * (block b: elements 32b .. 32b + 31; W's scale d and offset m of dm[n][b], q.h's nibble order);
 * lane l of 32 starts from acc_l = +0 and, over its blocks b = l, l + 32, l + 64, ... ascending:
 * p = +0 and s = +0; for j = 0 .. 31 ascending (element 32b + j), p = fma(x, (float)q, p) and
 * s = s + x; then acc_l = fma(p, f16(d), acc_l), then acc_l = fma(s, f16(m), acc_l) (each
 * operation rounded once; bf16 -> f32, the nibble -> f32 and half -> f32 exact). Then the 32
 * lanes fold by the tree y_l = y_l + y_{l+s} for s = 16, 8, 4, 2, 1 (l < s); Y[m][n] = y_0.
 * s depends on X's row and the block alone: a kernel may compute it once for all of W's rows,
 * in that order. The order depends on K alone: a row's bits are the same for every M, and equal
 * to the twin's.
 *
 * Invariants: K a multiple of 32, X 16-byte aligned (so is every row: K % 8 == 0), W.q 16-byte
 * aligned, W.dm 4-byte aligned, 1 <= M <= PGD_CUDA_GEMV_MAX_M (gemv.h).
 */
#ifndef PGD_KERNELS_CUDA_GEMV_Q4_H
#define PGD_KERNELS_CUDA_GEMV_Q4_H

#include <stdint.h>

#include "kernels/cuda/gemv.h" /* PGD_CUDA_GEMV_MAX_M */
#include "kernels/cuda/q4.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Y = X · Wᵀ by THE SUM: X bf16 [M][K], W [N][K] in THE FORM, Y f32 [M][N]. 0, or PGD_EINVAL
 * (shape, alignment) / PGD_ECUDA. */
int pgd_cuda_gemv_q4(const uint16_t *X, pgd_q4_mat W, float *Y, uint32_t M, uint32_t N, uint32_t K,
                     void *stream);
/* pgd_cuda_gemv_q4 with Y's rows ldy elements apart (ldy >= N; columns N .. ldy - 1 of a row not
 * written): a part of a fused product's output, a row's bits those of the plain form. */
int pgd_cuda_gemv_q4_ld(const uint16_t *X, pgd_q4_mat W, float *Y, uint32_t ldy, uint32_t M,
                        uint32_t N, uint32_t K, void *stream);
/* The gate/up product and SiLU * up in one: out[m][j] = bf16(SiLU(g) * u) with g = Y[m][j] and
 * u = Y[m][F + j] of Y = X · Wguᵀ by THE SUM, SiLU * up as silu_mul.h computes it — the bits of
 * pgd_cuda_gemv_q4 over Wgu then pgd_cuda_silu_mul. Wgu [2F][K] in THE FORM (gate rows, then up
 * rows), out bf16 [M][F]. 0, PGD_EINVAL / PGD_ECUDA. */
int pgd_cuda_gemv_q4_silu(const uint16_t *X, pgd_q4_mat Wgu, uint16_t *out, uint32_t M, uint32_t F,
                          uint32_t K, void *stream);
/* pgd_cuda_gemv_q4 at one row (Y [1][N]) with each round's loads all issued before its first
 * conversion (round_first: a __syncwarp after them; at one row ptxas otherwise issues the
 * second block's nibbles after the first block's conversions begin, gemv_q4.cu) or as the
 * backend runs it: the same bits either way. The A/B of bench_cuda_decode_kernels;
 * PGD_CUDA_GEMV_Q4_ROUND=1 makes round_first the backend's (opt-in: an H200 measured it slower
 * on every shape, gemv_q4.cu). 0, PGD_EINVAL / PGD_ECUDA. */
int pgd_cuda_gemv_q4_one(const uint16_t *X, pgd_q4_mat W, float *Y, uint32_t N, uint32_t K,
                         int round_first, void *stream);
/* The twin on the host, bit for bit: any M. W's planes on the host. */
void pgd_cuda_gemv_q4_twin(const uint16_t *X, const uint8_t *Wq, const uint32_t *Wdm, float *Y,
                           uint32_t M, uint32_t N, uint32_t K);

#ifdef __cplusplus
}
#endif

#endif
