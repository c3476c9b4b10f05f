/*
 * kernels/cuda/gemm_grouped_twin.c — CPU twins of pgd_cuda_gemm_grouped and of the _q8 and _q4
 * forms (gemm_grouped.cu): each element the sum of the same products in double (a product of two
 * bf16 is exact in double, and so is x * (f16(d) * q): 8 + 11 + 8 significant bits; a 4-bit
 * weight f16(d) q + f16(m) is exact too, f16's values spanning 2^-24 .. 2^16, and its product
 * with x within double's rounding; their sum to ~1e-16 relative), rounded once to f32, then
 * (out_bf16) to bf16 to nearest even. The kernel's f32 accumulation on tensor cores agrees within
 * a tolerance that grows with K (tests/gpu/test_cuda_gemm_grouped.c). Plain C; host pointers.
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

void pgd_cuda_gemm_grouped_q8_twin(const uint16_t *X, const uint32_t *gather, const int8_t *Wq,
                                   const uint16_t *Wd, uint32_t N, uint32_t K,
                                   const pgd_grouped_tile *tiles, uint32_t n_tiles, bool out_bf16,
                                   void *Y) {
    const uint32_t B = K / PGD_Q8_BLOCK; /* blocks a row */
    for (uint32_t i = 0; i < n_tiles; i++) {
        const pgd_grouped_tile t = tiles[i];
        const int8_t *q = Wq + (uint64_t)t.expert * N * K;   /* [N][K] */
        const uint16_t *d = Wd + (uint64_t)t.expert * N * B; /* [N][K / 32] */
        for (uint32_t r = t.row0; r < t.row0 + t.rows; r++) {
            const uint16_t *x = X + (uint64_t)(gather ? gather[r] : r) * K;
            for (uint32_t n = 0; n < N; n++) {
                const int8_t *qn = q + (uint64_t)n * K;
                const uint16_t *dn = d + (uint64_t)n * B;
                double s = 0;
                for (uint32_t b = 0; b < B; b++) {
                    const double db = pgd_f16_to_f32(dn[b]);
                    for (uint32_t k = b * PGD_Q8_BLOCK; k < (b + 1) * PGD_Q8_BLOCK; k++)
                        s += (double)pgd_bf16_to_f32(x[k]) * (db * (double)qn[k]);
                }
                const float f = (float)s;
                if (out_bf16)
                    ((uint16_t *)Y)[(uint64_t)r * N + n] = pgd_f32_to_bf16(f);
                else
                    ((float *)Y)[(uint64_t)r * N + n] = f;
            }
        }
    }
}

void pgd_cuda_gemm_grouped_q4_twin(const uint16_t *X, const uint32_t *gather, const uint8_t *Wq,
                                   const uint32_t *Wdm, uint32_t N, uint32_t K,
                                   const pgd_grouped_tile *tiles, uint32_t n_tiles, bool out_bf16,
                                   void *Y) {
    const uint32_t B = K / PGD_Q4_BLOCK; /* blocks a row */
    for (uint32_t i = 0; i < n_tiles; i++) {
        const pgd_grouped_tile t = tiles[i];
        const uint8_t *q = Wq + (uint64_t)t.expert * N * (K / 2); /* [N][K / 2] */
        const uint32_t *dm = Wdm + (uint64_t)t.expert * N * B;    /* [N][K / 32] */
        for (uint32_t r = t.row0; r < t.row0 + t.rows; r++) {
            const uint16_t *x = X + (uint64_t)(gather ? gather[r] : r) * K;
            for (uint32_t n = 0; n < N; n++) {
                const uint8_t *qn = q + (uint64_t)n * (K / 2);
                const uint32_t *dmn = dm + (uint64_t)n * B;
                double s = 0;
                for (uint32_t b = 0; b < B; b++) {
                    const double d = pgd_f16_to_f32((uint16_t)(dmn[b] & 0xFFFF));
                    const double m = pgd_f16_to_f32((uint16_t)(dmn[b] >> 16));
                    for (uint32_t j = 0; j < PGD_Q4_BLOCK; j++) {
                        /* element 32 b + j: byte j % 16 of the block, low nibble for j < 16 */
                        const uint8_t byte = qn[b * (PGD_Q4_BLOCK / 2) + j % 16];
                        const double v = j < 16 ? byte & 0xF : byte >> 4;
                        s += (double)pgd_bf16_to_f32(x[b * PGD_Q4_BLOCK + j]) * (d * v + m);
                    }
                }
                const float f = (float)s;
                if (out_bf16)
                    ((uint16_t *)Y)[(uint64_t)r * N + n] = pgd_f32_to_bf16(f);
                else
                    ((float *)Y)[(uint64_t)r * N + n] = f;
            }
        }
    }
}
