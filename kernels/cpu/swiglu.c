/*
 * kernels/cpu/swiglu.c — SiLU(gate) * up, elementwise: the scalar reference and AVX-512 / AVX2
 * paths on kernels/cpu/vec16_x86.h with the same bits (the exp of kernels/cpu/vexp.h, then a
 * divide and a multiply, all correctly rounded).
 */
#include "kernels/cpu/swiglu.h"

#include "kernels/cpu/vexp.h"

static inline float silu_mul(float g, float u) {
    return (g / (1.0f + pgd__expf(-g))) * u;
}

static void swiglu_scalar(const float *gate, const float *up, float *out, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) out[i] = silu_mul(gate[i], up[i]);
}

typedef void (*swiglu_fn)(const float *, const float *, float *, uint64_t);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/cpu/vec16_x86.h"

/* 16 lanes at a time on vec16_x86.h's vectors (P: a5 or a2), the tail by the reference. */
#define SWIGLU_SIMD(P, TGT)                                                                        \
    TGT static void swiglu_##P(const float *gate, const float *up, float *out, uint64_t n) {       \
        const P##_v one = P##_set1(1.0f);                                                          \
        uint64_t i = 0;                                                                            \
        for (; i + 16 <= n; i += 16) {                                                             \
            const P##_v g = P##_ld(gate + i);                                                      \
            const P##_v e = P##_exp(P##_sub(P##_zero(), g));                                       \
            P##_st(out + i, P##_mul(P##_div(g, P##_add(one, e)), P##_ld(up + i)));                 \
        }                                                                                          \
        for (; i < n; i++) out[i] = silu_mul(gate[i], up[i]);                                      \
    }
SWIGLU_SIMD(a5, PGD__V5)
SWIGLU_SIMD(a2, PGD__V2)
#undef SWIGLU_SIMD

static swiglu_fn path(pgd_cpu_isa isa) {
    return isa == PGD_ISA_AVX512 ? swiglu_a5 : isa == PGD_ISA_AVX2 ? swiglu_a2 : swiglu_scalar;
}
#else
static swiglu_fn path(pgd_cpu_isa isa) {
    (void)isa;
    return swiglu_scalar;
}
#endif

int pgd_swiglu_f32_isa(pgd_cpu_isa isa, const float *gate, const float *up, float *out,
                       uint64_t n) {
    int rc = pgd_cpu_isa_resolve(&isa, "swiglu");
    if (rc) return rc;
    path(isa)(gate, up, out, n);
    return 0;
}

void pgd_swiglu_f32(const float *gate, const float *up, float *out, uint64_t n) {
    path(pgd_cpu_isa_best())(gate, up, out, n);
}
