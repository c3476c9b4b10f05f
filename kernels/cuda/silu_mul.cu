/*
 * kernels/cuda/silu_mul.cu — SiLU(gate) * up into bf16 from an f32 or a bf16 gate/up product, a
 * thread per 4 (f32) or 8 (bf16) consecutive outputs of a row (see silu_mul_kernel). Owns nothing.
 * CPU twin: silu_mul_twin.c.
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

/* Consecutive outputs a thread takes: one 16-byte load of each input (4 f32 or 8 bf16). */
template <typename In> constexpr uint32_t kVec = 16 / sizeof(In);

/* The input's elements as f32: f32 as they are, bf16 widened (exact). */
__device__ __forceinline__ float widen(float x) {
    return x;
}
__device__ __forceinline__ float widen(uint16_t x) {
    return __uint_as_float((uint32_t)x << 16);
}

/* kVec<In> consecutive elements from a 16-byte aligned address, in one load, as f32. */
__device__ __forceinline__ void load_vec(const float *p, float (&f)[4]) {
    const float4 r = *reinterpret_cast<const float4 *>(p);
    f[0] = r.x, f[1] = r.y, f[2] = r.z, f[3] = r.w;
}
__device__ __forceinline__ void load_vec(const uint16_t *p, float (&f)[8]) {
    const uint4 r = *reinterpret_cast<const uint4 *>(p);
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

/* gu: f32 or bf16 (In) [T][2F]; out: bf16 [T][F]. Grid (column groups, rows): CTA (x, y) takes
 * row y (then y + gridDim.y, ...) and columns V (x * blockDim + thread) .. + V - 1 (V =
 * kVec<In>: 4 f32 or 8 bf16 inputs, 16 bytes), further groups by the grid's x stride — no 64-bit
 * division per element (the flat grid-stride form spent most of its time there: 77 us for 1024 x
 * 14336 on an H200, ~2x the bandwidth bound). A group of V whole columns inside the row with
 * aligned rows (F % V == 0, gu 16-byte aligned, out 2V-byte aligned) goes by one 16-byte load of
 * each input and one store of V bf16; any other column one by one. Each element's arithmetic is
 * unchanged. (The bf16 form took 4 columns a thread, 8-byte loads, until the H200 measured it at
 * 67% of the copy bandwidth: 30.9 us over 1024 x 14336.) */
template <typename In>
__global__ void silu_mul_kernel(const In *gu, uint32_t T, uint32_t F, uint16_t *out) {
    constexpr uint32_t V = kVec<In>;
    pgd_dev_pdl_enter();
    const bool vec = F % V == 0 && (uintptr_t)gu % 16 == 0 && (uintptr_t)out % (2 * V) == 0;
    for (uint32_t t = blockIdx.y; t < T; t += gridDim.y) {
        const In *g = gu + 2ull * F * t, *u = g + F;
        uint16_t *o = out + (uint64_t)F * t;
        for (uint32_t j0 = V * (blockIdx.x * blockDim.x + threadIdx.x); j0 < F;
             j0 += V * gridDim.x * blockDim.x) {
            if (vec) {
                float gv[V], uv[V];
                load_vec(g + j0, gv);
                load_vec(u + j0, uv);
                uint32_t w[V / 2];
#pragma unroll
                for (uint32_t i = 0; i < V / 2; i++)
                    w[i] = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(gv[2 * i], uv[2 * i])) |
                           (uint32_t)pgd_dev_f32_to_bf16(
                               pgd_dev_silu_mul(gv[2 * i + 1], uv[2 * i + 1]))
                               << 16;
                if constexpr (V == 8)
                    *reinterpret_cast<uint4 *>(o + j0) = uint4{w[0], w[1], w[2], w[3]};
                else
                    *reinterpret_cast<uint2 *>(o + j0) = uint2{w[0], w[1]};
                continue;
            }
            for (uint32_t j = j0; j < j0 + V && j < F; j++)
                o[j] = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(widen(g[j]), widen(u[j])));
        }
    }
}

template <typename In>
int launch(const In *gu, uint32_t T, uint32_t F, uint16_t *out, void *stream) {
    if (T == 0 || F == 0) return 0;
    const dim3 grid(pgd_cuda_grid((F + kVec<In> - 1) / kVec<In>, PGD_CUDA_THREADS), min(T, 65535u));
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
