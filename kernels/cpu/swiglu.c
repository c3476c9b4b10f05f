/*
 * kernels/cpu/swiglu.c — SiLU(gate) * up, elementwise.
 */
#include "kernels/cpu/swiglu.h"

#include <math.h>

void pgd_swiglu_f32(const float *gate, const float *up, float *out, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
