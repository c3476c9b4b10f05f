/*
 * kernels/cpu/vexp.h — the exponential of the CPU kernels (softmax, SiLU), defined as a fixed
 * sequence of f32 operations so the scalar reference and every SIMD path give the same bits.
 *
 *   x  = min(max(x, -87), 88)           (written as x > c ? x : c, the semantics of vmaxps /
 *                                         vminps with the constant second: a NaN becomes c)
 *   t  = fmaf(x, log2(e), 1.5 * 2^23);  n = t - 1.5 * 2^23    (round to nearest even)
 *   r  = fmaf(n, -LN2_HI, x);  r = fmaf(n, -LN2_LO, r)        (|r| <= ln2 / 2)
 *   p  = 1/7!;  p = fmaf(p, r, 1/k!) for k = 6 .. 2;  p = fmaf(p, r, 1);  p = fmaf(p, r, 1)
 *   e^x = p * 2^n                       (2^n built from its exponent bits; n in [-126, 127])
 * Within 1 ulp of e^x on [-87, 88] (every float there checked once: worst 0.94 ulp); e^x of
 * anything below -87 is e^-87 (~1.6e-38), which the callers (softmax weights, SiLU) treat as
 * the ~0 it is.
 * Threading: pure.
 */
#ifndef PGD_KERNELS_CPU_VEXP_H
#define PGD_KERNELS_CPU_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PGD__EXP_LO     -87.0f
#define PGD__EXP_HI     88.0f
#define PGD__EXP_LOG2E  1.44269504088896341f
#define PGD__EXP_MAGIC  12582912.0f          /* 1.5 * 2^23 */
#define PGD__EXP_LN2_HI 0.693145751953125f   /* ln 2, high 16 bits */
#define PGD__EXP_LN2_LO 1.42860676533018e-6f /* ln 2 - LN2_HI */
#define PGD__EXP_C7     (1.0f / 5040.0f)
#define PGD__EXP_C6     (1.0f / 720.0f)
#define PGD__EXP_C5     (1.0f / 120.0f)
#define PGD__EXP_C4     (1.0f / 24.0f)
#define PGD__EXP_C3     (1.0f / 6.0f)
#define PGD__EXP_C2     0.5f

/* The scalar reference of the definition above. */
static inline float pgd__expf(float x) {
    x = x > PGD__EXP_LO ? x : PGD__EXP_LO;
    x = x < PGD__EXP_HI ? x : PGD__EXP_HI;
    const float n = fmaf(x, PGD__EXP_LOG2E, PGD__EXP_MAGIC) - PGD__EXP_MAGIC;
    float r = fmaf(n, -PGD__EXP_LN2_HI, x);
    r = fmaf(n, -PGD__EXP_LN2_LO, r);
    float p = PGD__EXP_C7;
    p = fmaf(p, r, PGD__EXP_C6);
    p = fmaf(p, r, PGD__EXP_C5);
    p = fmaf(p, r, PGD__EXP_C4);
    p = fmaf(p, r, PGD__EXP_C3);
    p = fmaf(p, r, PGD__EXP_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return p * s;
}

#endif
