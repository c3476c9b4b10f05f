/*
 * kernels/cpu/swiglu.h — SwiGLU activation: out[i] = silu(gate[i]) * up[i], silu(x) = x/(1+e^-x).
 *
 * Defined as out = (g / (1 + pgd__expf(-g))) * up in f32 (kernels/cpu/vexp.h), so the SIMD
 * paths give the scalar reference's bits. Threading: pure; any thread.
 */
#ifndef PGD_KERNELS_CPU_SWIGLU_H
#define PGD_KERNELS_CPU_SWIGLU_H

#include "kernels/cpu/isa.h"

#include <stdint.h>

/* gate, up, out: [n] (out may alias gate). */
void pgd_swiglu_f32(const float *gate, const float *up, float *out, uint64_t n);

/* The same on a given path (tests); PGD_EINVAL when this CPU or build cannot run it. */
int pgd_swiglu_f32_isa(pgd_cpu_isa isa, const float *gate, const float *up, float *out, uint64_t n);

#endif
