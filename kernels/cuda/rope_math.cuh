/*
 * kernels/cuda/rope_math.cuh — RoPE on the device, the arithmetic rope_kv.h states (the bias
 * added first, one f32 add; then a' = a c - b s, b' = a s + b c with every product rounded, no
 * FMA; f16 by round to nearest even for the slab), as rope_kv.cu applies it (a one-row QKV GEMV
 * that ended in it shared it until commit a7ae551). CUDA C++ only.
 *
 * Threading: pure functions.
 */
#ifndef PGD_KERNELS_CUDA_ROPE_MATH_CUH
#define PGD_KERNELS_CUDA_ROPE_MATH_CUH

#include <cuda_fp16.h>
#include <stdint.h>

/* (a, b) rotated by (c, s) in place. */
static __device__ __forceinline__ void pgd_dev_rope_rotate(float &a, float &b, float c, float s) {
    const float ra = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    const float rb = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    a = ra;
    b = rb;
}

/* The slab's f16 of a value. */
static __device__ __forceinline__ uint16_t pgd_dev_kv_f16(float v) {
    return __half_as_ushort(__float2half_rn(v));
}

#endif
