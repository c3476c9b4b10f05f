/*
 * kernels/cuda/gemm_grouped_twin.c — CPU twin of pgd_cuda_gemm_grouped (gemm_grouped.cu): each
 * element the exact sum of the same bf16 products in double (a product of two bf16 is exact in
 * double, and so, to ~1e-16 relative, is their sum), rounded once to f32, then (out_bf16) to
 * bf16 to nearest even. The kernel's f32 accumulation on tensor cores agrees within a tolerance
 * that grows with K (tests/gpu/test_cuda_gemm_grouped.c). Plain C; host pointers.
 */
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemm_grouped.h"

void pgd_cuda_gemm_grouped_twin(const uint16_t *X, const uint32_t *gather, const uint16_t *W,
                                uint32_t N, uint32_t K, const pgd_grouped_tile *tiles,
                                uint32_t n_tiles, bool out_bf16, void *Y) {
    for (uint32_t i = 0; i < n_tiles; i++) {
        const pgd_grouped_tile t = tiles[i];
        const uint16_t *w = W + (uint64_t)t.expert * N * K; /* [N][K] */
        for (uint32_t r = t.row0; r < t.row0 + t.rows; r++) {
            const uint16_t *x = X + (uint64_t)(gather ? gather[r] : r) * K;
            for (uint32_t n = 0; n < N; n++) {
                const uint16_t *wn = w + (uint64_t)n * K;
                double s = 0;
                for (uint32_t k = 0; k < K; k++)
                    s += (double)pgd_bf16_to_f32(x[k]) * (double)pgd_bf16_to_f32(wn[k]);
                const float f = (float)s;
                if (out_bf16)
                    ((uint16_t *)Y)[(uint64_t)r * N + n] = pgd_f32_to_bf16(f);
                else
                    ((float *)Y)[(uint64_t)r * N + n] = f;
            }
        }
    }
}
