/*
 * kernels/cuda/gemv_q8_twin.c — CPU twin of pgd_cuda_gemv_q8 (gemv_q8.cu): THE SUM of
 * gemv_q8.h, each block's FMA chain and each lane's scale FMAs with the host's correctly rounded
 * fmaf, the tree's additions one rounding each (ISO C: nothing contracted), so its bits are the
 * kernel's. Plain C.
 */
#include <math.h>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemv_q8.h"

/* X bf16 [M][K], W in THE FORM: Wq int8 [N][K], Wd half [N][K / 32]; Y f32 [M][N]. K a multiple
 * of 32. */
void pgd_cuda_gemv_q8_twin(const uint16_t *X, const int8_t *Wq, const uint16_t *Wd, float *Y,
                           uint32_t M, uint32_t N, uint32_t K) {
    const uint32_t C = K / PGD_Q8_BLOCK;
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            const uint16_t *x = X + (uint64_t)m * K, *d = Wd + (uint64_t)n * C;
            const int8_t *q = Wq + (uint64_t)n * K;
            float y[PGD_CUDA_GEMV_LANES];
            for (uint32_t l = 0; l < PGD_CUDA_GEMV_LANES; l++) {
                float acc = 0.0f;
                for (uint32_t b = l; b < C; b += PGD_CUDA_GEMV_LANES) {
                    float p = 0.0f;
                    for (uint32_t e = PGD_Q8_BLOCK * b; e < PGD_Q8_BLOCK * (b + 1); e++)
                        p = fmaf(pgd_bf16_to_f32(x[e]), (float)q[e], p);
                    acc = fmaf(p, pgd_f16_to_f32(d[b]), acc);
                }
                y[l] = acc;
            }
            for (uint32_t s = PGD_CUDA_GEMV_LANES / 2; s > 0; s /= 2)
                for (uint32_t l = 0; l < s; l++) y[l] = y[l] + y[l + s];
            Y[(uint64_t)m * N + n] = y[0];
        }
}
