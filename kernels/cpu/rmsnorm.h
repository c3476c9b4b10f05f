/*
 * kernels/cpu/rmsnorm.h — RMSNorm: y = x / sqrt(mean(x^2) + eps) * g, per row.
 * Pure function; the sum runs in index order, so a row's result never depends on the batch.
 */
#ifndef PGD_KERNELS_CPU_RMSNORM_H
#define PGD_KERNELS_CPU_RMSNORM_H

#include <stdint.h>

/* x: [n], g: [n], y: [n] (y may alias x). */
void pgd_rmsnorm_f32(const float *x, const float *g, float *y, uint32_t n, float eps);

#endif
