/*
 * kernels/cuda/gemv_q4_twin.c — CPU twin of pgd_cuda_gemv_q4 (gemv_q4.cu): THE SUM of gemv_q4.h,
 * each block's FMA chain over the values and its chain of additions over x, each lane's two FMAs
 * a block (the scale's, then the offset's) with the host's correctly rounded fmaf, the tree's
 * additions one rounding each (ISO C: nothing contracted), so its bits are the kernel's. Plain C.
 */
#include <math.h>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemv_q4.h"

/* X bf16 [M][K], W in THE FORM: Wq nibbles [N][K / 2], Wdm d | m << 16 [N][K / 32]; Y f32
 * [M][N]. K a multiple of 32. */
void pgd_cuda_gemv_q4_twin(const uint16_t *X, const uint8_t *Wq, const uint32_t *Wdm, float *Y,
                           uint32_t M, uint32_t N, uint32_t K) {
    const uint32_t C = K / PGD_Q4_BLOCK;
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            const uint16_t *x = X + (uint64_t)m * K;
            const uint8_t *q = Wq + (uint64_t)n * (K / 2);
            const uint32_t *dm = Wdm + (uint64_t)n * C;
            float y[PGD_CUDA_GEMV_LANES];
            for (uint32_t l = 0; l < PGD_CUDA_GEMV_LANES; l++) {
                float acc = 0.0f;
                for (uint32_t b = l; b < C; b += PGD_CUDA_GEMV_LANES) {
                    const uint8_t *qb = q + (uint64_t)b * (PGD_Q4_BLOCK / 2);
                    const uint16_t *xb = x + (uint64_t)b * PGD_Q4_BLOCK;
                    float p = 0.0f, s = 0.0f;
                    for (uint32_t j = 0; j < PGD_Q4_BLOCK; j++) {
                        /* byte j % 16: element j in its low nibble (j < 16), j in its high one */
                        const uint32_t v = j < 16 ? qb[j] & 15u : (uint32_t)qb[j - 16] >> 4;
                        const float xf = pgd_bf16_to_f32(xb[j]);
                        p = fmaf(xf, (float)v, p);
                        s = s + xf;
                    }
                    acc = fmaf(p, pgd_f16_to_f32((uint16_t)(dm[b] & 0xFFFFu)), acc);
                    acc = fmaf(s, pgd_f16_to_f32((uint16_t)(dm[b] >> 16)), acc);
                }
                y[l] = acc;
            }
            for (uint32_t s = PGD_CUDA_GEMV_LANES / 2; s > 0; s /= 2)
                for (uint32_t l = 0; l < s; l++) y[l] = y[l] + y[l + s];
            Y[(uint64_t)m * N + n] = y[0];
        }
}
