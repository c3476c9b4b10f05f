/*
 * kernels/cuda/dummy.cu — dummy weights filled on the device from common/counter_hash.h (the
 * same __host__ __device__ function the CPU's engine/model/dummy.c calls). Owns nothing.
 *
 * Invariants: element i depends only on (seed, tensor, i, shift), so the grid-stride split
 * changes nothing; the values are exact in f32 and bf16 (odd integers of at most 7 bits times a
 * power of two), and the bf16 store rounds like pgd_f32_to_bf16 for any value anyway. The f32
 * fill adds base with one rounding (__fadd_rn), as the CPU's `base + value` does.
 */
#include <cuda_runtime.h>

#include "common/counter_hash.h"
#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/dummy.h"

namespace {

/* dst: bf16 [n], the tensor's elements first .. first + n - 1. */
__global__ void dummy_bf16_kernel(uint64_t seed, uint32_t tensor, int shift, uint64_t first,
                                  uint64_t n, uint16_t *dst) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        dst[i] = pgd_dev_f32_to_bf16(pgd_dummy_value(seed, tensor, first + i, shift));
}

/* dst: f32 [n]. */
__global__ void dummy_f32_kernel(uint64_t seed, uint32_t tensor, float base, uint64_t n,
                                 float *dst) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        dst[i] = __fadd_rn(base, pgd_dummy_value(seed, tensor, i, 10));
}

} // namespace

extern "C" int pgd_cuda_dummy_bf16_at(uint64_t seed, uint32_t tensor, int shift, uint64_t first,
                                      uint64_t n, uint16_t *dst, void *stream) {
    if (shift < 0) return pgd_error_set(PGD_EINVAL, "dummy fill: negative shift %d", shift);
    if (n == 0) return 0;
    dummy_bf16_kernel<<<pgd_cuda_grid(n, PGD_CUDA_THREADS), PGD_CUDA_THREADS, 0,
                        (cudaStream_t)stream>>>(seed, tensor, shift, first, n, dst);
    PGD_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pgd_cuda_dummy_bf16(uint64_t seed, uint32_t tensor, int shift, uint64_t n,
                                   uint16_t *dst, void *stream) {
    return pgd_cuda_dummy_bf16_at(seed, tensor, shift, 0, n, dst, stream);
}

extern "C" int pgd_cuda_dummy_f32(uint64_t seed, uint32_t tensor, float base, uint64_t n,
                                  float *dst, void *stream) {
    if (n == 0) return 0;
    dummy_f32_kernel<<<pgd_cuda_grid(n, PGD_CUDA_THREADS), PGD_CUDA_THREADS, 0,
                       (cudaStream_t)stream>>>(seed, tensor, base, n, dst);
    PGD_CUDA_LAUNCHED();
    return 0;
}
