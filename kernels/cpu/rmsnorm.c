/*
 * kernels/cpu/rmsnorm.c — RMSNorm over one row, f32 with a double accumulator.
 */
#include "kernels/cpu/rmsnorm.h"

#include <math.h>

void pgd_rmsnorm_f32(const float *x, const float *g, float *y, uint32_t n, float eps) {
    double ss = 0.0;
    for (uint32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (uint32_t i = 0; i < n; i++) y[i] = x[i] * scale * g[i];
}
