/*
 * kernels/cuda/gemm_grouped.h — the experts' products of a mixture-of-experts layer: one launch
 * multiplies every expert's group of rows by that expert's matrix, the groups and their sizes
 * read from device memory (kernels/cuda/moe.h makes them), so nothing of the routing reaches the
 * host and the launch can be captured in a CUDA graph. bf16 in, f32 accumulation on the tensor
 * cores (mma.sync, kernels/cuda/mma_sync.cuh). CPU twin: pgd_cuda_gemm_grouped_twin
 * (gemm_grouped_twin.c). Device pointers; asynchronous.
 *
 * The rows: a list of tiles, each up to PGD_GROUPED_TILE_ROWS consecutive rows of one expert;
 * tile i covers rows [row0, row0 + rows) of the sorted order, all multiplied by expert
 * `expert`'s matrix. Row r's input is X's row gather[r] (gather NULL: row r); its output is Y's
 * row r.
 *
 * Batch invariance: an output element is its row's dot product with one weight row, accumulated
 * over K in an order fixed by K alone; a row's bits depend neither on the other rows of its tile
 * nor on the tile's place in the list.
 *
 * Weights in 8 bits (the _q8 forms; q8.h's THE FORM, --gpu-weights q8_0): the tensor cores
 * multiply X's bf16 by the values q as bf16 (exact: |q| <= 128) over each block of 32 of K (two
 * k16 steps from zero), and each element's block sum joins its accumulator scaled, acc =
 * fma(block sum, f16(d[n][b]), acc), blocks ascending — the scale applied once a block, the
 * values never rounded. The dense form pgd_cuda_gemm_q8 runs the same kernel over rows [0, M)
 * of one matrix in tiles it numbers itself (no tile list): a row's bits are the same in both
 * forms, whatever the tiling. It is the product of more rows than the GEMV's (gemv_q8.h) over
 * 8-bit weights: prefill chunks, decode steps of more than PGD_CUDA_GEMV_MAX_M sequences.
 *
 * Weights in 4 bits (the _q4 forms; q4.h's THE FORM, --gpu-weights q4): as the _q8 forms, the
 * tensor cores multiply X's bf16 by the values q as bf16 (exact: 0 <= q <= 15) over each block of
 * 32 of K (two k16 steps from zero) into the block sum p; the block's offset needs the row's sum
 * of X over the block, s (f32, in an order the row alone fixes: the kernel computes it from its
 * own copy of the row); each element then joins its accumulator as acc = fma(p, f16(d), acc),
 * then acc = fma(s, f16(m), acc), blocks ascending. The dense form pgd_cuda_gemm_q4 likewise
 * gives a row the bits the grouped form gives it, whatever the tiling.
 */
#ifndef PGD_KERNELS_CUDA_GEMM_GROUPED_H
#define PGD_KERNELS_CUDA_GEMM_GROUPED_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/cuda/q4.h"
#include "kernels/cuda/q8.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_GROUPED_TILE_ROWS 64 /* the most rows of a tile (of one expert) */

/* One tile of rows of the sorted order, all of one expert (1 <= rows <= PGD_GROUPED_TILE_ROWS). */
typedef struct pgd_grouped_tile {
    uint32_t expert, row0, rows;
} pgd_grouped_tile;

/* The most tiles P rows over NE experts can make: each expert's rows in tiles of
 * PGD_GROUPED_TILE_ROWS, its last one partial. The grouped launch's grid is sized by it. */
static inline uint32_t pgd_grouped_max_tiles(uint32_t P, uint32_t NE) {
    return (P + PGD_GROUPED_TILE_ROWS - 1) / PGD_GROUPED_TILE_ROWS + (NE < P ? NE : P);
}

/* For each tile i < *n_tiles (device memory; at most max_tiles, which sizes the grid) and each of
 * its rows r: Y[r][n] = sum_k X[g][k] * W[tile.expert][n][k] for n < N, g = gather ? gather[r]
 * : r. X: bf16 [*][K] (rows K apart); W: bf16 [NE][N][K]; gather: [rows of the sorted order] or
 * NULL; Y: [rows][N], f32 or (out_bf16) bf16 rounded to nearest even. Rows no tile covers are
 * not written. N and K multiples of 8; X, W and Y 16-byte aligned.
 * 0, PGD_EINVAL (shape, alignment) or PGD_ECUDA. */
int pgd_cuda_gemm_grouped(const uint16_t *X, const uint32_t *gather, const uint16_t *W, uint32_t N,
                          uint32_t K, const pgd_grouped_tile *tiles, const uint32_t *n_tiles,
                          uint32_t max_tiles, bool out_bf16, void *Y, void *stream);
/* The twin, host pointers and *n_tiles on the host: each element summed in double, then rounded
 * once to f32 (and to bf16 with out_bf16). */
void pgd_cuda_gemm_grouped_twin(const uint16_t *X, const uint32_t *gather, const uint16_t *W,
                                uint32_t N, uint32_t K, const pgd_grouped_tile *tiles,
                                uint32_t n_tiles, bool out_bf16, void *Y);

/* pgd_cuda_gemm_grouped over weights in THE FORM: W [NE][N][K] (q8.h), K a multiple of 32 (and
 * W.q 16-byte aligned, W.d 2-byte aligned); the rest as there. */
int pgd_cuda_gemm_grouped_q8(const uint16_t *X, const uint32_t *gather, pgd_q8_mat W, uint32_t N,
                             uint32_t K, const pgd_grouped_tile *tiles, const uint32_t *n_tiles,
                             uint32_t max_tiles, bool out_bf16, void *Y, void *stream);
/* The dense form: Y[m][n] = sum_k X[m][k] * W[n][k] for m < M (X bf16 [M][K], W [N][K] in THE
 * FORM, Y [M][N] f32 or bf16), M >= 1; the same bits a row gets from pgd_cuda_gemm_grouped_q8. */
int pgd_cuda_gemm_q8(const uint16_t *X, pgd_q8_mat W, uint32_t M, uint32_t N, uint32_t K,
                     bool out_bf16, void *Y, void *stream);
/* The dense form with Y's rows ldy elements apart (ldy >= N, a multiple of 8; a row's columns
 * N .. ldy - 1 not written): a part of a fused product's output, a row's bits as above. */
int pgd_cuda_gemm_q8_ld(const uint16_t *X, pgd_q8_mat W, uint32_t M, uint32_t N, uint32_t K,
                        uint32_t ldy, bool out_bf16, void *Y, void *stream);
/* The twin of both _q8 forms (dense: one tile {0, 0, M}), host pointers: each element
 * sum_k x * (f16(d) * q) in double, rounded once to f32 (and to bf16 with out_bf16). */
void pgd_cuda_gemm_grouped_q8_twin(const uint16_t *X, const uint32_t *gather, const int8_t *Wq,
                                   const uint16_t *Wd, uint32_t N, uint32_t K,
                                   const pgd_grouped_tile *tiles, uint32_t n_tiles, bool out_bf16,
                                   void *Y);

/* pgd_cuda_gemm_grouped over weights in 4 bits: W [NE][N][K] in q4.h's THE FORM, K a multiple
 * of 32 (W.q 16-byte aligned, W.dm 4-byte aligned); the rest as there. */
int pgd_cuda_gemm_grouped_q4(const uint16_t *X, const uint32_t *gather, pgd_q4_mat W, uint32_t N,
                             uint32_t K, const pgd_grouped_tile *tiles, const uint32_t *n_tiles,
                             uint32_t max_tiles, bool out_bf16, void *Y, void *stream);
/* The dense form over 4-bit weights (as pgd_cuda_gemm_q8): the same bits a row gets from
 * pgd_cuda_gemm_grouped_q4. */
int pgd_cuda_gemm_q4(const uint16_t *X, pgd_q4_mat W, uint32_t M, uint32_t N, uint32_t K,
                     bool out_bf16, void *Y, void *stream);
/* ... with Y's rows ldy elements apart, as pgd_cuda_gemm_q8_ld. */
int pgd_cuda_gemm_q4_ld(const uint16_t *X, pgd_q4_mat W, uint32_t M, uint32_t N, uint32_t K,
                        uint32_t ldy, bool out_bf16, void *Y, void *stream);
/* The twin of both _q4 forms (dense: one tile {0, 0, M}), host pointers: each element
 * sum_k x * (f16(d) * q + f16(m)) in double, rounded once to f32 (and to bf16 with out_bf16). */
void pgd_cuda_gemm_grouped_q4_twin(const uint16_t *X, const uint32_t *gather, const uint8_t *Wq,
                                   const uint32_t *Wdm, uint32_t N, uint32_t K,
                                   const pgd_grouped_tile *tiles, uint32_t n_tiles, bool out_bf16,
                                   void *Y);

#ifdef __cplusplus
}
#endif

#endif
