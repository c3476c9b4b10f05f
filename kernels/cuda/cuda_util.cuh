/*
 * kernels/cuda/cuda_util.cuh — small helpers shared by the .cu files (CUDA C++ only; the twins
 * never include it): the f32 -> bf16 rounding of pgd_f32_to_bf16 (kernels/cpu/quant.c) on the
 * device, and the grid size of a grid-stride launch.
 *
 * Invariants: pgd_dev_f32_to_bf16 gives pgd_f32_to_bf16's bits for every input, NaN included
 * (its payload's top bits kept, made quiet), so "bf16 of the same f32" is bit-exact across the
 * two. Grid-stride kernels take any element count: the grid is capped, the loop covers the rest
 * with 64-bit indices.
 *
 * Threading: pure functions.
 */
#ifndef PGD_KERNELS_CUDA_UTIL_CUH
#define PGD_KERNELS_CUDA_UTIL_CUH

#include <stdint.h>

/* Threads per CTA of the elementwise (grid-stride) kernels. */
#define PGD_CUDA_THREADS 256
/* At most this many CTAs in a grid-stride launch (far more than fill any current GPU). */
#define PGD_CUDA_MAX_CTAS 65535u

/* Round to nearest even; a NaN stays a quiet NaN with the top bits of its payload. */
static __device__ __forceinline__ uint16_t pgd_dev_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* CTAs for n work items of `threads` each (threads 1: a CTA per item, e.g. per row), at least 1
 * and at most PGD_CUDA_MAX_CTAS; grid-stride loops cover the rest. */
static inline unsigned pgd_cuda_grid(uint64_t n, unsigned threads) {
    uint64_t ctas = (n + threads - 1) / threads;
    if (ctas < 1) ctas = 1;
    return ctas > PGD_CUDA_MAX_CTAS ? PGD_CUDA_MAX_CTAS : (unsigned)ctas;
}

#endif
