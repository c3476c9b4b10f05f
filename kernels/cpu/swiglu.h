/*
 * kernels/cpu/swiglu.h — SwiGLU activation: out[i] = silu(gate[i]) * up[i], silu(x) = x/(1+e^-x).
 */
#ifndef PGD_KERNELS_CPU_SWIGLU_H
#define PGD_KERNELS_CPU_SWIGLU_H

#include <stdint.h>

/* gate, up, out: [n] (out may alias gate). */
void pgd_swiglu_f32(const float *gate, const float *up, float *out, uint64_t n);

#endif
