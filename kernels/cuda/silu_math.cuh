/*
 * kernels/cuda/silu_math.cuh — SiLU(g) * u on the device, the arithmetic silu_mul.h states
 * (CUDA's accurate expf, then (g / (1 + e)) * u with each operation rounded once), written once
 * for the two kernels that compute it: silu_mul.cu and the GEMV that ends in it (gemv.cu), so
 * both give the same bits. CUDA C++ only.
 *
 * Threading: pure functions.
 */
#ifndef PGD_KERNELS_CUDA_SILU_MATH_CUH
#define PGD_KERNELS_CUDA_SILU_MATH_CUH

static __device__ __forceinline__ float pgd_dev_silu_mul(float g, float u) {
    const float e = expf(-g);
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
}

#endif
