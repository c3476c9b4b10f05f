/*
 * kernels/cpu/rope.h — rotary position embedding, applied in place to the heads of one token.
 *
 * Angles: theta_i = (pos / linear_scale) * base^(-2i/rope_dim) / freq_factor[i], i < rope_dim/2.
 * Style NORM rotates adjacent pairs (x[2i], x[2i+1]) (llama-arch GGUF layout); NEOX rotates
 * (x[i], x[i + rope_dim/2]) (qwen2). Dimensions >= rope_dim pass through.
 */
#ifndef PGD_KERNELS_CPU_ROPE_H
#define PGD_KERNELS_CPU_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/counter_hash.h" /* PGD_HD */

/* The dimensions (*i0, *i1) of rotation pair i < half = rope_dim / 2 within a head: (2i, 2i + 1),
 * or (i, i + half) when neox. Host and device (the CUDA kernels and their twins use it too). */
static inline PGD_HD void pgd_rope_pair(uint32_t i, uint32_t half, bool neox, uint32_t *i0,
                                        uint32_t *i1) {
    *i0 = neox ? i : 2 * i;
    *i1 = neox ? i + half : 2 * i + 1;
}

/* inv_freq: [rope_dim/2] filled with base^(-2i/rope_dim) / freq_factor[i] (factors may be NULL). */
void pgd_rope_inv_freq(double *inv_freq, uint32_t rope_dim, float base, const float *freq_factors);

/* cs: [rope_dim/2][2] (cos, sin) for one position. */
void pgd_rope_cos_sin(float *cs, const double *inv_freq, uint32_t rope_dim, double pos);

/* x: [n_heads][head_dim], rotated in place with the table of one position. */
void pgd_rope_apply(float *x, const float *cs, uint32_t n_heads, uint32_t head_dim,
                    uint32_t rope_dim, bool neox);

#endif
