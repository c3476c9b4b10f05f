/*
 * kernels/cuda/rmsnorm_twin.c — CPU twin of pgd_cuda_add_rmsnorm (rmsnorm.cu): the kernel's
 * arithmetic in the kernel's order (PGD_RMSNORM_LANES lane partials in double, the pairwise
 * tree of rmsnorm.h, the scale in double rounded once, (x * s) * w in f32), so the two agree bit
 * for bit. It differs from pgd_rmsnorm_f32 (one sum in index order) only by the order of the
 * double sum. Plain C; no FMA contraction (ISO C mode for GCC, the pragma for clang).
 */
#include "kernels/cuda/rmsnorm.h"

#include <math.h>

#include "kernels/cpu/quant.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* x, add: f32 [.][E]; w: f32 [E]; rows: [R] or NULL; out: bf16 [R][E]. */
void pgd_cuda_add_rmsnorm_twin(float *x, const float *add, const float *w, float eps,
                               const uint32_t *rows, uint32_t R, uint32_t E, uint16_t *out) {
    if (E == 0) return;
    double part[PGD_RMSNORM_LANES];
    for (uint32_t i = 0; i < R; i++) {
        const uint64_t r = rows ? rows[i] : i;
        float *xr = x + r * E;
        if (add)
            for (uint32_t e = 0; e < E; e++) xr[e] = xr[e] + add[r * E + e];
        for (uint32_t j = 0; j < PGD_RMSNORM_LANES; j++) {
            double acc = 0.0;
            for (uint32_t e = j; e < E; e += PGD_RMSNORM_LANES) acc += (double)xr[e] * xr[e];
            part[j] = acc;
        }
        for (uint32_t h = PGD_RMSNORM_LANES / 2; h > 0; h >>= 1)
            for (uint32_t j = 0; j < h; j++) part[j] += part[j + h];
        const float s = (float)(1.0 / sqrt(part[0] / E + (double)eps));
        uint16_t *o = out + (uint64_t)i * E;
        for (uint32_t e = 0; e < E; e++) o[e] = pgd_f32_to_bf16(xr[e] * s * w[e]);
    }
}
