/*
 * kernels/cuda/embed.h — the token embedding gather. CPU twin: pgd_cuda_embed_twin
 * (embed_twin.c). Device pointers; asynchronous on `stream`; the launch is checked.
 */
#ifndef PGD_KERNELS_CUDA_EMBED_H
#define PGD_KERNELS_CUDA_EMBED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[t][e] = f32(table[tokens[t]][e]) for t < T, e < E; table: bf16 [V][E]; x: f32 [T][E]. */
int pgd_cuda_embed(const uint16_t *table, const int32_t *tokens, uint32_t T, uint32_t E, float *x,
                   void *stream);
void pgd_cuda_embed_twin(const uint16_t *table, const int32_t *tokens, uint32_t T, uint32_t E,
                         float *x);

#ifdef __cplusplus
}
#endif

#endif
