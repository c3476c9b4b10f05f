/*
 * kernels/cuda/silu_mul.h — SiLU(gate) * up over the fused gate/up GEMM's output (f32, or bf16
 * where the GEMM rounds it: a prefill's), in bf16 for the down projection. CPU twin:
 * pgd_cuda_silu_mul_twin (silu_mul_twin.c). Asynchronous.
 *
 * Not bit-exact: the kernel's exp is CUDA's expf, the twin's the CPU's pgd__expf. The outputs
 * are equal or one bf16 ulp apart where g >= -88; below, both are at most |g * u| * 2^-126
 * (silu_mul.cu says why).
 */
#ifndef PGD_KERNELS_CUDA_SILU_MUL_H
#define PGD_KERNELS_CUDA_SILU_MUL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[t][j] = bf16((g / (1 + exp(-g))) * u) with g = gu[t][j], u = gu[t][F + j], for t < T,
 * j < F. gu: f32 [T][2F]; out: bf16 [T][F]. */
int pgd_cuda_silu_mul(const float *gu, uint32_t T, uint32_t F, uint16_t *out, void *stream);
void pgd_cuda_silu_mul_twin(const float *gu, uint32_t T, uint32_t F, uint16_t *out);

/* The same over a bf16 product (gemm.h's PGD_CUDA_GEMM_OUT_BF16): g and u widened to f32
 * (exactly), then the same arithmetic. gu: bf16 [T][2F], 16-byte aligned for the vector path. */
int pgd_cuda_silu_mul_bf16(const uint16_t *gu, uint32_t T, uint32_t F, uint16_t *out, void *stream);
void pgd_cuda_silu_mul_bf16_twin(const uint16_t *gu, uint32_t T, uint32_t F, uint16_t *out);

#ifdef __cplusplus
}
#endif

#endif
