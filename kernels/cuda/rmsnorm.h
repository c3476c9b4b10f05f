/*
 * kernels/cuda/rmsnorm.h — residual add + RMSNorm, the normed rows in bf16 for the next GEMM.
 * CPU twin: pgd_cuda_add_rmsnorm_twin (rmsnorm_twin.c). Device pointers; asynchronous.
 *
 * One CTA per row and a fixed reduction tree, so a row's bits depend only on the row: lane
 * j < PGD_RMSNORM_LANES sums (double) x^2 of elements j, j + PGD_RMSNORM_LANES, ... in order,
 * then the lanes fold pairwise (lane j += lane j + h for h = LANES/2, ..., 1). The twin does the
 * same arithmetic in the same order, so kernel and twin agree bit for bit.
 */
#ifndef PGD_KERNELS_CUDA_RMSNORM_H
#define PGD_KERNELS_CUDA_RMSNORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_RMSNORM_LANES 256 /* partial sums of a row = threads of its CTA */

/* For each i < R, with r = rows ? rows[i] : i: if add, x[r] += add[r] (f32, in place); then
 * out[i] = bf16(x[r][e] * s * w[e]) (f32 products, left to right) with
 * s = f32(1 / sqrt(sum(x[r]^2) / E + eps)), all of it in double as pgd_rmsnorm_f32 does.
 * x, add: f32 [.][E]; w: f32 [E]; rows: [R] or NULL (distinct when add is given);
 * out: bf16 [R][E]. */
int pgd_cuda_add_rmsnorm(float *x, const float *add, const float *w, float eps,
                         const uint32_t *rows, uint32_t R, uint32_t E, uint16_t *out, void *stream);
void pgd_cuda_add_rmsnorm_twin(float *x, const float *add, const float *w, float eps,
                               const uint32_t *rows, uint32_t R, uint32_t E, uint16_t *out);

#ifdef __cplusplus
}
#endif

#endif
