/*
 * kernels/cpu/vec16_x86.h — vectors of 16 floats for the x86 SIMD paths of the small CPU
 * kernels (attention, SwiGLU): a5_* on AVX-512 (one zmm), a2_* on AVX2 (two ymm), the same
 * operations under the same names, so one kernel body serves both; a5_exp / a2_exp follow
 * pgd__expf (kernels/cpu/vexp.h) operation for operation, so they give its bits.
 * Include only on x86-64 with GCC or clang. Internal header. Threading: pure.
 */
#ifndef PGD_KERNELS_CPU_VEC16_X86_H
#define PGD_KERNELS_CPU_VEC16_X86_H

#include "kernels/cpu/vexp.h"

#include <immintrin.h>
#include <stdint.h>

#define PGD__INL inline __attribute__((always_inline))
#define PGD__V5  __attribute__((target("avx2,fma,f16c,avx512f,avx512dq")))
#define PGD__V2  __attribute__((target("avx2,fma,f16c")))

/* ---- AVX-512 ---- */
typedef __m512 a5_v;
typedef struct {
    __m512d lo, hi;
} a5_vd;
PGD__V5 static PGD__INL a5_v a5_zero(void) {
    return _mm512_setzero_ps();
}
PGD__V5 static PGD__INL a5_v a5_ld(const float *p) {
    return _mm512_loadu_ps(p);
}
PGD__V5 static PGD__INL void a5_st(float *p, a5_v v) {
    _mm512_storeu_ps(p, v);
}
/* 16 IEEE halves, exactly */
PGD__V5 static PGD__INL a5_v a5_ldh(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
/* to 16 IEEE halves, rounding to nearest even (the bits of pgd_f32_to_f16) */
PGD__V5 static PGD__INL void a5_sth(uint16_t *p, a5_v v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
PGD__V5 static PGD__INL a5_v a5_set1(float x) {
    return _mm512_set1_ps(x);
}
PGD__V5 static PGD__INL a5_v a5_fma(a5_v a, a5_v b, a5_v c) {
    return _mm512_fmadd_ps(a, b, c);
}
PGD__V5 static PGD__INL a5_v a5_add(a5_v a, a5_v b) {
    return _mm512_add_ps(a, b);
}
PGD__V5 static PGD__INL a5_v a5_sub(a5_v a, a5_v b) {
    return _mm512_sub_ps(a, b);
}
PGD__V5 static PGD__INL a5_v a5_mul(a5_v a, a5_v b) {
    return _mm512_mul_ps(a, b);
}
PGD__V5 static PGD__INL a5_v a5_max(a5_v a, a5_v b) {
    return _mm512_max_ps(a, b);
}
PGD__V5 static PGD__INL a5_v a5_min(a5_v a, a5_v b) {
    return _mm512_min_ps(a, b);
}
PGD__V5 static PGD__INL float a5_hmax(a5_v v) {
    return _mm512_reduce_max_ps(v);
}
/* lanes >= n (n < 16) replaced by f */
PGD__V5 static PGD__INL a5_v a5_keep(a5_v v, uint32_t n, float f) {
    return _mm512_mask_mov_ps(_mm512_set1_ps(f), (__mmask16)((1u << n) - 1), v);
}
/* 2^n of integral n in [-126, 127] */
PGD__V5 static PGD__INL a5_v a5_pow2i(a5_v n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
PGD__V5 static PGD__INL a5_vd a5_vd_zero(void) {
    return (a5_vd){_mm512_setzero_pd(), _mm512_setzero_pd()};
}
PGD__V5 static PGD__INL a5_vd a5_vd_add(a5_vd s, a5_v v) {
    s.lo = _mm512_add_pd(s.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    s.hi = _mm512_add_pd(
        s.hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    return s;
}
PGD__V5 static PGD__INL void a5_vd_st(double *p, a5_vd s) {
    _mm512_storeu_pd(p, s.lo);
    _mm512_storeu_pd(p + 8, s.hi);
}
PGD__V5 static PGD__INL a5_v a5_div(a5_v a, a5_v b) {
    return _mm512_div_ps(a, b);
}

/* ---- AVX2 ---- */
typedef struct {
    __m256 a, b;
} a2_v;
typedef struct {
    __m256d d[4];
} a2_vd;
#define A2_OP(name, op)                                                                            \
    PGD__V2 static PGD__INL a2_v a2_##name(a2_v x, a2_v y) {                                       \
        return (a2_v){op(x.a, y.a), op(x.b, y.b)};                                                 \
    }
A2_OP(add, _mm256_add_ps)
A2_OP(sub, _mm256_sub_ps)
A2_OP(mul, _mm256_mul_ps)
A2_OP(max, _mm256_max_ps)
A2_OP(min, _mm256_min_ps)
A2_OP(div, _mm256_div_ps)
#undef A2_OP
PGD__V2 static PGD__INL a2_v a2_zero(void) {
    return (a2_v){_mm256_setzero_ps(), _mm256_setzero_ps()};
}
PGD__V2 static PGD__INL a2_v a2_ld(const float *p) {
    return (a2_v){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
PGD__V2 static PGD__INL void a2_st(float *p, a2_v v) {
    _mm256_storeu_ps(p, v.a);
    _mm256_storeu_ps(p + 8, v.b);
}
PGD__V2 static PGD__INL a2_v a2_ldh(const uint16_t *p) {
    return (a2_v){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)))};
}
PGD__V2 static PGD__INL void a2_sth(uint16_t *p, a2_v v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v.a, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128((__m128i *)(p + 8), _mm256_cvtps_ph(v.b, _MM_FROUND_TO_NEAREST_INT));
}
PGD__V2 static PGD__INL a2_v a2_set1(float x) {
    return (a2_v){_mm256_set1_ps(x), _mm256_set1_ps(x)};
}
PGD__V2 static PGD__INL a2_v a2_fma(a2_v x, a2_v y, a2_v z) {
    return (a2_v){_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)};
}
PGD__V2 static PGD__INL float a2_hmax(a2_v v) {
    __m256 m = _mm256_max_ps(v.a, v.b);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
PGD__V2 static PGD__INL a2_v a2_keep(a2_v v, uint32_t n, float f) {
    const __m256i lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i nn = _mm256_set1_epi32((int)n);
    const __m256 ma = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, lo));
    const __m256 mb =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, _mm256_add_epi32(lo, _mm256_set1_epi32(8))));
    const __m256 ff = _mm256_set1_ps(f);
    return (a2_v){_mm256_blendv_ps(ff, v.a, ma), _mm256_blendv_ps(ff, v.b, mb)};
}
PGD__V2 static PGD__INL __m256 a2_pow2i_h(__m256 n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
PGD__V2 static PGD__INL a2_v a2_pow2i(a2_v n) {
    return (a2_v){a2_pow2i_h(n.a), a2_pow2i_h(n.b)};
}
PGD__V2 static PGD__INL a2_vd a2_vd_zero(void) {
    return (a2_vd){
        {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}};
}
PGD__V2 static PGD__INL a2_vd a2_vd_add(a2_vd s, a2_v v) {
    s.d[0] = _mm256_add_pd(s.d[0], _mm256_cvtps_pd(_mm256_castps256_ps128(v.a)));
    s.d[1] = _mm256_add_pd(s.d[1], _mm256_cvtps_pd(_mm256_extractf128_ps(v.a, 1)));
    s.d[2] = _mm256_add_pd(s.d[2], _mm256_cvtps_pd(_mm256_castps256_ps128(v.b)));
    s.d[3] = _mm256_add_pd(s.d[3], _mm256_cvtps_pd(_mm256_extractf128_ps(v.b, 1)));
    return s;
}
PGD__V2 static PGD__INL void a2_vd_st(double *p, a2_vd s) {
    for (int i = 0; i < 4; i++) _mm256_storeu_pd(p + 4 * i, s.d[i]);
}
/* e^x on 16 lanes: the operations of pgd__expf (kernels/cpu/vexp.h), lane by lane. */
#define PGD__VEC16_EXP(P, TGT)                                                                     \
    TGT static PGD__INL P##_v P##_exp(P##_v x) {                                                   \
        x = P##_max(x, P##_set1(PGD__EXP_LO));                                                     \
        x = P##_min(x, P##_set1(PGD__EXP_HI));                                                     \
        const P##_v magic = P##_set1(PGD__EXP_MAGIC);                                              \
        const P##_v n = P##_sub(P##_fma(x, P##_set1(PGD__EXP_LOG2E), magic), magic);               \
        P##_v r = P##_fma(n, P##_set1(-PGD__EXP_LN2_HI), x);                                       \
        r = P##_fma(n, P##_set1(-PGD__EXP_LN2_LO), r);                                             \
        P##_v p = P##_set1(PGD__EXP_C7);                                                           \
        p = P##_fma(p, r, P##_set1(PGD__EXP_C6));                                                  \
        p = P##_fma(p, r, P##_set1(PGD__EXP_C5));                                                  \
        p = P##_fma(p, r, P##_set1(PGD__EXP_C4));                                                  \
        p = P##_fma(p, r, P##_set1(PGD__EXP_C3));                                                  \
        p = P##_fma(p, r, P##_set1(PGD__EXP_C2));                                                  \
        p = P##_fma(p, r, P##_set1(1.0f));                                                         \
        p = P##_fma(p, r, P##_set1(1.0f));                                                         \
        return P##_mul(p, P##_pow2i(n));                                                           \
    }
PGD__VEC16_EXP(a5, PGD__V5)
PGD__VEC16_EXP(a2, PGD__V2)

#endif
