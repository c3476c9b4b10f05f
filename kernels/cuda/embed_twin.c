/*
 * kernels/cuda/embed_twin.c — CPU twin of pgd_cuda_embed (embed.cu): the same gather, the same
 * exact bf16 -> f32 widening (pgd_bf16_to_f32), so the two agree bit for bit. Plain C.
 */
#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/embed.h"

/* table: bf16 [V][E]; tokens: [T]; x: f32 [T][E]. */
void pgd_cuda_embed_twin(const uint16_t *table, const int32_t *tokens, uint32_t T, uint32_t E,
                         float *x) {
    for (uint32_t t = 0; t < T; t++) {
        PGD_ASSERT(tokens[t] >= 0);
        const uint16_t *row = table + (uint64_t)tokens[t] * E;
        float *dst = x + (uint64_t)t * E;
        for (uint32_t e = 0; e < E; e++) dst[e] = pgd_bf16_to_f32(row[e]);
    }
}
