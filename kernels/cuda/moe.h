/*
 * kernels/cuda/moe.h — a mixture-of-experts layer's routing on the device: each token's experts
 * and weights from the router's logits, the tokens grouped by expert into the tiles the grouped
 * products take (kernels/cuda/gemm_grouped.h), and the experts' outputs mixed back into each
 * token's row. CPU twins beside each (moe_twin.c). Device pointers; asynchronous; nothing is
 * read back to the host, so a step that routes can be captured in a CUDA graph.
 *
 * A layer's FFN (engine/backends/cuda.c): router GEMM -> pgd_cuda_moe_route -> pgd_cuda_moe_group
 * -> grouped gate/up (X gathered by sorted_tok) -> SiLU * up -> grouped down ->
 * pgd_cuda_moe_combine. P = T * K pairs (token t's j-th expert: pair t * K + j); the sorted order
 * puts expert 0's pairs first, then expert 1's, ..., each expert's in ascending token order.
 *
 * Determinism: no atomics decide an order or a sum; every result depends on its own token's
 * inputs alone, so a token's bits are the same in every batch.
 */
#ifndef PGD_KERNELS_CUDA_MOE_H
#define PGD_KERNELS_CUDA_MOE_H

#include <stdint.h>

#include "kernels/cuda/gemm_grouped.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_MOE_MAX_EXPERTS 512 /* experts a router may have */
#define PGD_MOE_MAX_USED    64  /* experts a token may use (= PGD_MAX_EXPERTS_USED) */

/* Token t's K experts from logits[t] (f32 [T][NE]), as engine/backends/cpu.c's route_token
 * chooses them: K passes, pass j taking the not-yet-taken expert with the largest logit (the
 * first untaken expert is the candidate, a later one replaces it only if strictly greater: ties
 * go to the lowest id); weights w_j = exp(l_j - l_0) / sum_i exp(l_i - l_0) in double (l_0 the
 * first chosen, the sum in the order chosen), rounded to f32. Written in ascending expert id:
 * pick [T][K] the ids, pick_w [T][K] their weights. 1 <= K <= min(NE, PGD_MOE_MAX_USED),
 * NE <= PGD_MOE_MAX_EXPERTS. 0, PGD_EINVAL or PGD_ECUDA. */
int pgd_cuda_moe_route(const float *logits, uint32_t T, uint32_t NE, uint32_t K, uint32_t *pick,
                       float *pick_w, void *stream);
void pgd_cuda_moe_route_twin(const float *logits, uint32_t T, uint32_t NE, uint32_t K,
                             uint32_t *pick, float *pick_w);

/* The pairs of pick [T][K] (ids ascending within a token, as pgd_cuda_moe_route writes them)
 * grouped by expert: sorted_tok [P] the token of each row of the sorted order; row_of [P] the
 * row of pair t * K + j; tiles [pgd_grouped_max_tiles(P, NE)]: expert 0's rows in tiles of
 * PGD_GROUPED_TILE_ROWS (the last partial), then expert 1's, ...; experts without pairs have
 * none; *n_tiles (device) their number. counts: device scratch [NE + 1]. P = T * K.
 * 0, PGD_EINVAL or PGD_ECUDA. */
int pgd_cuda_moe_group(const uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K, uint32_t *counts,
                       uint32_t *sorted_tok, uint32_t *row_of, pgd_grouped_tile *tiles,
                       uint32_t *n_tiles, void *stream);
/* The twin: host pointers, *n_tiles on the host; the same outputs, bit for bit. */
void pgd_cuda_moe_group_twin(const uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K,
                             uint32_t *sorted_tok, uint32_t *row_of, pgd_grouped_tile *tiles,
                             uint32_t *n_tiles);

/* out[t][c] = sum over j = 0 .. K-1 in order of pick_w[t][j] * Y[row_of[t * K + j]][c], each
 * term added by one fused multiply-add from 0 (acc = fmaf(w, y, acc)). Y: f32 [P][E] (the down
 * product in the sorted order); out: f32 [T][E]. Kernel and twin agree bit for bit. */
int pgd_cuda_moe_combine(const float *Y, const uint32_t *row_of, const float *pick_w, uint32_t T,
                         uint32_t K, uint32_t E, float *out, void *stream);
void pgd_cuda_moe_combine_twin(const float *Y, const uint32_t *row_of, const float *pick_w,
                               uint32_t T, uint32_t K, uint32_t E, float *out);

#ifdef __cplusplus
}
#endif

#endif
