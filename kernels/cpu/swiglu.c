/*
 * kernels/cpu/swiglu.c — SiLU(gate) * up, elementwise: the scalar reference and an AVX-512 and
 * an AVX2 path with the same bits (the exp of kernels/cpu/vexp.h, then a divide and a
 * multiply, all correctly rounded).
 */
#include "kernels/cpu/swiglu.h"

#include "common/error.h"
#include "kernels/cpu/vexp.h"

static inline float silu_mul(float g, float u) {
    return (g / (1.0f + pgd__expf(-g))) * u;
}

static void swiglu_scalar(const float *gate, const float *up, float *out, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) out[i] = silu_mul(gate[i], up[i]);
}

typedef void (*swiglu_fn)(const float *, const float *, float *, uint64_t);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* One exp step list for both widths: V(op) names the intrinsic of the width. */
#define SWIGLU_BODY(V, W, vec, ivec, cvt, addi, slli, set1i, cast)                                 \
    const vec lo = V(set1_ps)(PGD__EXP_LO), hi = V(set1_ps)(PGD__EXP_HI);                          \
    const vec magic = V(set1_ps)(PGD__EXP_MAGIC), one = V(set1_ps)(1.0f);                          \
    uint64_t i = 0;                                                                                \
    for (; i + W <= n; i += W) {                                                                   \
        const vec g = V(loadu_ps)(gate + i);                                                       \
        vec x = V(sub_ps)(V(setzero_ps)(), g);                                                     \
        x = V(min_ps)(V(max_ps)(x, lo), hi);                                                       \
        const vec t = V(sub_ps)(V(fmadd_ps)(x, V(set1_ps)(PGD__EXP_LOG2E), magic), magic);         \
        vec r = V(fmadd_ps)(t, V(set1_ps)(-PGD__EXP_LN2_HI), x);                                   \
        r = V(fmadd_ps)(t, V(set1_ps)(-PGD__EXP_LN2_LO), r);                                       \
        vec p = V(set1_ps)(PGD__EXP_C7);                                                           \
        p = V(fmadd_ps)(p, r, V(set1_ps)(PGD__EXP_C6));                                            \
        p = V(fmadd_ps)(p, r, V(set1_ps)(PGD__EXP_C5));                                            \
        p = V(fmadd_ps)(p, r, V(set1_ps)(PGD__EXP_C4));                                            \
        p = V(fmadd_ps)(p, r, V(set1_ps)(PGD__EXP_C3));                                            \
        p = V(fmadd_ps)(p, r, V(set1_ps)(PGD__EXP_C2));                                            \
        p = V(fmadd_ps)(p, r, one);                                                                \
        p = V(fmadd_ps)(p, r, one);                                                                \
        const ivec e = slli(addi(cvt(t), set1i(127)), 23);                                         \
        const vec ex = V(mul_ps)(p, cast(e));                                                      \
        V(storeu_ps)(out + i, V(mul_ps)(V(div_ps)(g, V(add_ps)(one, ex)), V(loadu_ps)(up + i)));   \
    }                                                                                              \
    for (; i < n; i++) out[i] = silu_mul(gate[i], up[i]);

#define V5(op) _mm512_##op
#define V2(op) _mm256_##op

__attribute__((target("avx2,fma,avx512f"))) static void
swiglu_avx512(const float *gate, const float *up, float *out, uint64_t n) {
    SWIGLU_BODY(V5, 16, __m512, __m512i, _mm512_cvtps_epi32, _mm512_add_epi32, _mm512_slli_epi32,
                _mm512_set1_epi32, _mm512_castsi512_ps)
}

__attribute__((target("avx2,fma"))) static void swiglu_avx2(const float *gate, const float *up,
                                                            float *out, uint64_t n) {
    SWIGLU_BODY(V2, 8, __m256, __m256i, _mm256_cvtps_epi32, _mm256_add_epi32, _mm256_slli_epi32,
                _mm256_set1_epi32, _mm256_castsi256_ps)
}
#undef V5
#undef V2
#undef SWIGLU_BODY

static swiglu_fn path(pgd_cpu_isa isa) {
    return isa == PGD_ISA_AVX512 ? swiglu_avx512
           : isa == PGD_ISA_AVX2 ? swiglu_avx2
                                 : swiglu_scalar;
}
#else
static swiglu_fn path(pgd_cpu_isa isa) {
    (void)isa;
    return swiglu_scalar;
}
#endif

int pgd_swiglu_f32_isa(pgd_cpu_isa isa, const float *gate, const float *up, float *out,
                       uint64_t n) {
    if (isa == PGD_ISA_AUTO) isa = pgd_cpu_isa_best();
    if (!pgd_cpu_isa_supported(isa))
        return pgd_error_set(PGD_EINVAL, "swiglu: this CPU cannot run the %s path",
                             pgd_cpu_isa_name(isa));
    path(isa)(gate, up, out, n);
    return 0;
}

void pgd_swiglu_f32(const float *gate, const float *up, float *out, uint64_t n) {
    path(pgd_cpu_isa_best())(gate, up, out, n);
}
