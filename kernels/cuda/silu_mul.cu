/*
 * kernels/cuda/silu_mul.cu — SiLU(gate) * up into bf16 from an f32 or a bf16 gate/up product, a
 * thread per 4 consecutive outputs of a row (see silu_mul_kernel). Owns nothing. CPU twin:
 * silu_mul_twin.c.
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

constexpr uint32_t kVec = 4; /* consecutive outputs a thread takes */

/* The input's elements as f32: f32 as they are, bf16 widened (exact). Four consecutive ones from
 * a 16-byte (f32) or 8-byte (bf16) aligned address in one load. */
__device__ __forceinline__ float widen(float x) {
    return x;
}
__device__ __forceinline__ float widen(uint16_t x) {
    return __uint_as_float((uint32_t)x << 16);
}
__device__ __forceinline__ float4 load4(const float *p) {
    return *reinterpret_cast<const float4 *>(p);
}
__device__ __forceinline__ float4 load4(const uint16_t *p) {
    const uint2 r = *reinterpret_cast<const uint2 *>(p);
    return float4{__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xFFFF0000u),
                  __uint_as_float(r.y << 16), __uint_as_float(r.y & 0xFFFF0000u)};
}

/* gu: f32 or bf16 (In) [T][2F]; out: bf16 [T][F]. Grid (column groups, rows): CTA (x, y) takes
 * row y (then y + gridDim.y, ...) and columns kVec (x * blockDim + thread) .. + kVec - 1, further
 * groups by the grid's x stride — no 64-bit division per element (the flat grid-stride form spent
 * most of its time there: 77 us for 1024 x 14336 on an H200, ~2x the bandwidth bound). A group
 * of 4 whole columns inside the row with aligned rows (F % 4 == 0, gu 16-byte aligned) goes by
 * one load of each input and one 8-byte store; any other column one by one. Each element's
 * arithmetic is unchanged. */
template <typename In>
__global__ void silu_mul_kernel(const In *gu, uint32_t T, uint32_t F, uint16_t *out) {
    pgd_dev_pdl_enter();
    const bool vec = F % kVec == 0 && (uintptr_t)gu % 16 == 0 && (uintptr_t)out % 8 == 0;
    for (uint32_t t = blockIdx.y; t < T; t += gridDim.y) {
        const In *g = gu + 2ull * F * t, *u = g + F;
        uint16_t *o = out + (uint64_t)F * t;
        for (uint32_t j0 = kVec * (blockIdx.x * blockDim.x + threadIdx.x); j0 < F;
             j0 += kVec * gridDim.x * blockDim.x) {
            if (vec) {
                const float4 g4 = load4(g + j0), u4 = load4(u + j0);
                const uint32_t lo = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(g4.x, u4.x)) |
                                    (uint32_t)pgd_dev_f32_to_bf16(pgd_dev_silu_mul(g4.y, u4.y))
                                        << 16;
                const uint32_t hi = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(g4.z, u4.z)) |
                                    (uint32_t)pgd_dev_f32_to_bf16(pgd_dev_silu_mul(g4.w, u4.w))
                                        << 16;
                *reinterpret_cast<uint2 *>(o + j0) = uint2{lo, hi};
                continue;
            }
            for (uint32_t j = j0; j < j0 + kVec && j < F; j++)
                o[j] = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(widen(g[j]), widen(u[j])));
        }
    }
}

template <typename In>
int launch(const In *gu, uint32_t T, uint32_t F, uint16_t *out, void *stream) {
    if (T == 0 || F == 0) return 0;
    const dim3 grid(pgd_cuda_grid((F + kVec - 1) / kVec, PGD_CUDA_THREADS), min(T, 65535u));
    PGD_CUDA_TRY(
        pgd_cuda_launch(silu_mul_kernel<In>, grid, PGD_CUDA_THREADS, 0, stream, gu, T, F, out));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_silu_mul(const float *gu, uint32_t T, uint32_t F, uint16_t *out,
                                 void *stream) {
    return launch(gu, T, F, out, stream);
}

extern "C" int pgd_cuda_silu_mul_bf16(const uint16_t *gu, uint32_t T, uint32_t F, uint16_t *out,
                                      void *stream) {
    return launch(gu, T, F, out, stream);
}
