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
 */
#ifndef PGD_KERNELS_CUDA_GEMM_GROUPED_H
#define PGD_KERNELS_CUDA_GEMM_GROUPED_H

#include <stdbool.h>
#include <stdint.h>

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

#ifdef __cplusplus
}
#endif

#endif
