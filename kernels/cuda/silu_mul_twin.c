/*
 * kernels/cuda/silu_mul_twin.c — CPU twin of pgd_cuda_silu_mul (silu_mul.cu): the CPU's own
 * SiLU * up (pgd_swiglu_f32's formula, (g / (1 + pgd__expf(-g))) * u, each operation rounded),
 * then pgd_f32_to_bf16 (the bf16 form: its inputs widened first). Equal to pgd_swiglu_f32 + bf16
 * bit for bit; within the tolerance that silu_mul.cu states of the kernel (CUDA's expf is not
 * pgd__expf). Plain C.
 */
#include "kernels/cuda/silu_mul.h"

#include "kernels/cpu/quant.h"
#include "kernels/cpu/vexp.h"

static inline uint16_t silu_mul_one(float g, float u) {
    return pgd_f32_to_bf16((g / (1.0f + pgd__expf(-g))) * u);
}

/* gu: f32 [T][2F]; out: bf16 [T][F]. */
void pgd_cuda_silu_mul_twin(const float *gu, uint32_t T, uint32_t F, uint16_t *out) {
    for (uint32_t t = 0; t < T; t++) {
        const float *g = gu + (uint64_t)t * 2 * F, *u = g + F;
        uint16_t *o = out + (uint64_t)t * F;
        for (uint32_t j = 0; j < F; j++) o[j] = silu_mul_one(g[j], u[j]);
    }
}

/* gu: bf16 [T][2F]; out: bf16 [T][F]. */
void pgd_cuda_silu_mul_bf16_twin(const uint16_t *gu, uint32_t T, uint32_t F, uint16_t *out) {
    for (uint32_t t = 0; t < T; t++) {
        const uint16_t *g = gu + (uint64_t)t * 2 * F, *u = g + F;
        uint16_t *o = out + (uint64_t)t * F;
        for (uint32_t j = 0; j < F; j++)
            o[j] = silu_mul_one(pgd_bf16_to_f32(g[j]), pgd_bf16_to_f32(u[j]));
    }
}
