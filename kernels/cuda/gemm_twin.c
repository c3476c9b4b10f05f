/*
 * kernels/cuda/gemm_twin.c — the CPU twin of the cuBLASLt GEMM (gemm.h): exact products of the
 * bf16 inputs summed in double, then rounded to f32. The GPU sums in f32 in its own order, so
 * the two agree within a tolerance (tests/gpu/test_cuda_gemm.c states it).
 */
#include "kernels/cuda/gemm.h"

#include "kernels/cpu/quant.h"

void pgd_cuda_gemm_twin(const uint16_t *X /* [M][K] */, const uint16_t *W /* [N][K] */,
                        float *Y /* [M][N] */, uint32_t M, uint32_t N, uint32_t K) {
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            double acc = 0.0;
            const uint16_t *x = X + (uint64_t)m * K, *w = W + (uint64_t)n * K;
            for (uint32_t k = 0; k < K; k++)
                acc += (double)pgd_bf16_to_f32(x[k]) * (double)pgd_bf16_to_f32(w[k]);
            Y[(uint64_t)m * N + n] = (float)acc;
        }
}
