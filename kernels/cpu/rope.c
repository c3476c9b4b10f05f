/*
 * kernels/cpu/rope.c — rotary embedding. Angles are computed in double so long positions keep
 * their precision; the rotation itself is f32.
 */
#include "kernels/cpu/rope.h"

#include <math.h>

void pgd_rope_inv_freq(double *inv_freq, uint32_t rope_dim, float base, const float *freq_factors) {
    for (uint32_t i = 0; i < rope_dim / 2; i++) {
        inv_freq[i] = pow((double)base, -2.0 * i / rope_dim);
        if (freq_factors) inv_freq[i] /= freq_factors[i];
    }
}

void pgd_rope_cos_sin(float *cs, const double *inv_freq, uint32_t rope_dim, double pos) {
    for (uint32_t i = 0; i < rope_dim / 2; i++) {
        double a = pos * inv_freq[i];
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

void pgd_rope_apply(float *x, const float *cs, uint32_t n_heads, uint32_t head_dim,
                    uint32_t rope_dim, bool neox) {
    uint32_t half = rope_dim / 2;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *v = x + (uint64_t)h * head_dim;
        for (uint32_t i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            uint32_t i0, i1;
            pgd_rope_pair(i, half, neox, &i0, &i1);
            float a = v[i0], b = v[i1];
            v[i0] = a * c - b * s;
            v[i1] = a * s + b * c;
        }
    }
}
