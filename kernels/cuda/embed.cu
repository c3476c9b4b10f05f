/*
 * kernels/cuda/embed.cu — the token embedding gather: bf16 table rows widened to the f32
 * residual stream. Owns nothing. CPU twin: embed_twin.c.
 *
 * Invariants: bf16 -> f32 is exact (the bits shifted up by 16), so kernel and twin agree bit
 * for bit. Token ids are trusted to lie in [0, V) (the scheduler checks them at submit); the
 * grid-stride loop covers any T * E with 64-bit indices.
 */
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/embed.h"

namespace {

/* table: bf16 [V][E]; tokens: [T]; x: f32 [T][E]. */
__global__ void embed_kernel(const uint16_t *table, const int32_t *tokens, uint32_t T, uint32_t E,
                             float *x) {
    pgd_dev_pdl_enter();
    const uint64_t n = (uint64_t)T * E, step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t t = i / E, e = i % E;
        x[i] = __uint_as_float((uint32_t)table[(uint64_t)tokens[t] * E + e] << 16);
    }
}

} // namespace

extern "C" int pgd_cuda_embed(const uint16_t *table, const int32_t *tokens, uint32_t T, uint32_t E,
                              float *x, void *stream) {
    if (T == 0 || E == 0) return 0;
    const uint64_t n = (uint64_t)T * E;
    PGD_CUDA_TRY(pgd_cuda_launch(embed_kernel, pgd_cuda_grid(n, PGD_CUDA_THREADS), PGD_CUDA_THREADS,
                                 0, stream, table, tokens, T, E, x));
    return 0;
}
