/*
 * kernels/cuda/rmsnorm.h — residual add + RMSNorm, the normed rows in bf16 for the next GEMM.
 * CPU twin: pgd_cuda_add_rmsnorm_twin (rmsnorm_twin.c). Device pointers; asynchronous.
 *
 * One CTA per row and a fixed reduction tree, so a row's bits depend only on the row.
 */
#ifndef PGD_KERNELS_CUDA_RMSNORM_H
#define PGD_KERNELS_CUDA_RMSNORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* For each i < R, with r = rows ? rows[i] : i: if add, x[r] += add[r] (f32, in place); then
 * out[i] = bf16(x[r][e] * s * w[e]) with s = 1 / sqrt(sum(x[r]^2) / E + eps), the sum of
 * squares in double. x, add: f32 [.][E]; w: f32 [E]; rows: [R] or NULL; out: bf16 [R][E]. */
int pgd_cuda_add_rmsnorm(float *x, const float *add, const float *w, float eps,
                         const uint32_t *rows, uint32_t R, uint32_t E, uint16_t *out, void *stream);
void pgd_cuda_add_rmsnorm_twin(float *x, const float *add, const float *w, float eps,
                               const uint32_t *rows, uint32_t R, uint32_t E, uint16_t *out);

#ifdef __cplusplus
}
#endif

#endif
