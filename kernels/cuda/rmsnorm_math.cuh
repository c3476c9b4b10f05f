/*
 * kernels/cuda/rmsnorm_math.cuh — a row's RMSNorm scale on the device, the arithmetic rmsnorm.h
 * states (lane partials of x^2 in double, the fixed pairwise tree, f32(1 / sqrt(ss / E + eps))
 * in double), as rmsnorm.cu computes it (a GEMV that normed its own input row shared it until
 * commit a7ae551). CUDA C++ only.
 *
 * Threading: CTA-collective: the PGD_RMSNORM_LANES threads of the CTA (thread j: lane j) call
 * it together.
 */
#ifndef PGD_KERNELS_CUDA_RMSNORM_MATH_CUH
#define PGD_KERNELS_CUDA_RMSNORM_MATH_CUH

#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/rmsnorm.h"

/* The row's scale from this thread's sum of squares (acc: elements j, j + LANES, ... in order):
 * the lanes' partials folded by the tree, then f32(1 / sqrt(ss / E + eps)). The tree's levels
 * that pair lanes of different warps (h >= 32) go through shared memory (part: double [LANES]),
 * the last five inside warp 0 by shuffles (lane j adds lane j + h's value of the level before:
 * the same pairs, so the same bits, with 5 barriers instead of 10). Every thread gets the scale;
 * part and *s are free again when it returns. */
static __device__ __forceinline__ float pgd_dev_rms_scale(double *part, float *s, double acc,
                                                          uint32_t E, float eps) {
    static_assert(PGD_RMSNORM_LANES >= 64 && PGD_RMSNORM_LANES % 32 == 0, "whole warps");
    const unsigned j = threadIdx.x;
    part[j] = acc;
    __syncthreads();
    for (unsigned h = PGD_RMSNORM_LANES / 2; h >= 32; h >>= 1) {
        if (j < h) part[j] = __dadd_rn(part[j], part[j + h]);
        __syncthreads();
    }
    if (j < 32) {
        double v = part[j];
#pragma unroll
        for (unsigned h = 16; h > 0; h >>= 1) v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, h));
        if (j == 0) {
            const double ms = __dadd_rn(__ddiv_rn(v, (double)E), (double)eps);
            *s = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(ms)));
        }
    }
    __syncthreads();
    const float r = *s;
    __syncthreads(); /* *s and part are read before the next row writes them */
    return r;
}

/* acc += x^2 in double (the square of an f32 is exact in double; nothing contracted). */
static __device__ __forceinline__ double pgd_dev_rms_square(double acc, float v) {
    return __dadd_rn(acc, __dmul_rn((double)v, (double)v));
}

/* bf16((v * s) * w), each product rounded: an element of the normed row. */
static __device__ __forceinline__ uint16_t pgd_dev_rms_out(float v, float s, float w) {
    return pgd_dev_f32_to_bf16(__fmul_rn(__fmul_rn(v, s), w));
}

#endif
