/*
 * kernels/cuda/silu_mul.cu — SiLU(gate) * up into bf16, one thread per output element
 * (grid-stride, 64-bit indices). Owns nothing. CPU twin: silu_mul_twin.c.
 *
 * Arithmetic: e = expf(-g) (CUDA's accurate expf, not __expf: at most 2 ulp), then
 * (g / (1 + e)) * u with IEEE division and each operation rounded once (__fadd_rn, __fdiv_rn,
 * __fmul_rn), then bf16 (round to nearest even). The twin uses the CPU's exponential
 * (pgd__expf, within 1 ulp, its argument clamped to [-87, 88]), so the two are NOT bit-exact:
 *   - for g >= -88 the f32 results differ by a few f32 ulps at most, so the bf16 outputs are
 *     equal or adjacent (one bf16 ulp);
 *   - for g < -88 the CPU's exp saturates at e^88 while CUDA's goes on (to inf), so both
 *     outputs are tiny but may differ by more: each is at most |g * u| * 2^-126 in magnitude.
 * tests/gpu/test_cuda_ops.c checks exactly this tolerance.
 */
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/silu_math.cuh"
#include "kernels/cuda/silu_mul.h"

namespace {

/* gu: f32 [T][2F]; out: bf16 [T][F]. */
__global__ void silu_mul_kernel(const float *gu, uint32_t T, uint32_t F, uint16_t *out) {
    const uint64_t n = (uint64_t)T * F, step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t t = i / F, j = i % F;
        out[i] = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(gu[2 * F * t + j], gu[2 * F * t + F + j]));
    }
}

} // namespace

extern "C" int pgd_cuda_silu_mul(const float *gu, uint32_t T, uint32_t F, uint16_t *out,
                                 void *stream) {
    if (T == 0 || F == 0) return 0;
    const uint64_t n = (uint64_t)T * F;
    silu_mul_kernel<<<pgd_cuda_grid(n, PGD_CUDA_THREADS), PGD_CUDA_THREADS, 0,
                      (cudaStream_t)stream>>>(gu, T, F, out);
    PGD_CUDA_LAUNCHED();
    return 0;
}
