/*
 * kernels/cuda/gemv_twin.c — CPU twin of pgd_cuda_gemv (gemv.cu): THE SUM of gemv.h, each lane's
 * FMA chain with the host's correctly rounded fmaf and the tree's additions one rounding each
 * (ISO C: nothing contracted), so its bits are the kernel's. Plain C.
 */
#include <math.h>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemv.h"

/* X bf16 [M][K], W bf16 [N][K], Y f32 [M][N]; K a multiple of 8. */
void pgd_cuda_gemv_twin(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M, uint32_t N,
                        uint32_t K) {
    const uint32_t C = K / 8;
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            const uint16_t *x = X + (uint64_t)m * K, *w = W + (uint64_t)n * K;
            float y[PGD_CUDA_GEMV_LANES];
            for (uint32_t l = 0; l < PGD_CUDA_GEMV_LANES; l++) {
                float acc = 0.0f;
                for (uint32_t c = l; c < C; c += PGD_CUDA_GEMV_LANES)
                    for (uint32_t e = 8 * c; e < 8 * c + 8; e++)
                        acc = fmaf(pgd_bf16_to_f32(x[e]), pgd_bf16_to_f32(w[e]), acc);
                y[l] = acc;
            }
            for (uint32_t s = PGD_CUDA_GEMV_LANES / 2; s > 0; s /= 2)
                for (uint32_t l = 0; l < s; l++) y[l] = y[l] + y[l + s];
            Y[(uint64_t)m * N + n] = y[0];
        }
}
