/*
 * kernels/cpu/matmul_x86.c — x86-64 SIMD kernel sets for matmul.c: AVX2 (+FMA, F16C) and
 * AVX-512 (the AVX2 set with the quantized dot products redone with the VNNI instruction
 * vpdpbusd on 256-bit vectors, plus the 512-bit row-block kernels: kqb for batches, kqp for
 * packed weights). The library is built without -march flags, so each function carries its own
 * target attribute and matmul.c picks a set at run time after checking the CPU
 * (pgd_cpu_isa_supported).
 *
 * Owns: two constant kernel tables. The quantized kernels live in matmul_x86.inc (included
 * once per variant); the F32/F16 kernels and the activation quantizer are here, shared.
 * Invariants: the reduction order of matmul_kern.h (bit-identical to the scalar reference).
 * Threading: pure functions.
 */
#include "kernels/cpu/matmul_kern.h"

#include "kernels/cpu/quant.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2_TARGET   __attribute__((target("avx2,fma,f16c")))
#define MM_ROUND_EVEN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#define MM_TARGET AVX2_TARGET
#define MM_(name) name##_avx2
#define MM_VNNI   0
#include "kernels/cpu/matmul_x86.inc"
#undef MM_TARGET
#undef MM_
#undef MM_VNNI

#define MM_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define MM_(name) name##_avx512
#define MM_VNNI   1
#include "kernels/cpu/matmul_x86.inc"
#undef MM_TARGET
#undef MM_
#undef MM_VNNI

/* F32/F16 weights: mr tokens x nr rows, one 8-lane accumulator per (token, row). */
AVX2_TARGET static inline __attribute__((always_inline)) void
kf_body(int f16, int mr, int nr, const uint8_t *w, size_t row_bytes, const float *x /* [mr][k] */,
        int64_t k, float *out /* [mr][PGD__NR] */) {
    __m256 acc[PGD__FMR][PGD__NR];
    for (int t = 0; t < mr; t++)
        for (int r = 0; r < nr; r++) acc[t][r] = _mm256_setzero_ps();
    int64_t e = 0;
    for (; e + 8 <= k; e += 8) {
        __m256 wv[PGD__NR];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const uint8_t *p = w + (size_t)r * row_bytes;
            wv[r] = f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * e)))
                        : _mm256_loadu_ps((const float *)(p + 4 * e));
        }
#pragma GCC unroll 4
        for (int t = 0; t < mr; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * k + e);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[t][r] = _mm256_fmadd_ps(wv[r], xv, acc[t][r]);
        }
    }
    for (int t = 0; t < mr; t++) {
        for (int r = 0; r < nr; r++) {
            float a[8];
            _mm256_storeu_ps(a, acc[t][r]);
            const uint8_t *p = w + (size_t)r * row_bytes;
            for (int64_t i = e; i < k; i++) {
                float wi;
                if (f16) {
                    uint16_t h;
                    memcpy(&h, p + 2 * i, 2);
                    wi = _cvtsh_ss(h);
                } else {
                    memcpy(&wi, p + 4 * i, 4);
                }
                a[i & 7] = __builtin_fmaf(wi, x[t * k + i], a[i & 7]);
            }
            out[t * PGD__NR + r] = pgd__hsum8(a);
        }
    }
}

/* One function per tile shape (mr, nr) in {1, 2, 4} x {1, 2, 4} as used below. */
#define KF_FN(MR, NR)                                                                              \
    AVX2_TARGET __attribute__((noinline)) static void kf_##MR##x##NR(                              \
        int f16, const uint8_t *w, size_t row_bytes, const float *x, int64_t k, float *out) {      \
        if (f16)                                                                                   \
            kf_body(1, MR, NR, w, row_bytes, x, k, out);                                           \
        else                                                                                       \
            kf_body(0, MR, NR, w, row_bytes, x, k, out);                                           \
    }
KF_FN(1, 1)
KF_FN(1, 4)
KF_FN(2, 1)
KF_FN(2, 2)
KF_FN(4, 1)
KF_FN(4, 2)
#undef KF_FN

/* Any mr <= 4 tokens x nr <= 4 rows, cut into the tile shapes above (same bits per element
 * whatever the cut). */
static void kf_avx2(int f16, const uint8_t *w, size_t row_bytes, int nr, const float *x, int64_t k,
                    int mr, float *out) {
    for (int t = 0; t < mr;) {
        const int tm = mr - t >= 4 ? 4 : mr - t >= 2 ? 2 : 1;
        for (int r = 0; r < nr;) {
            const uint8_t *wr = w + (size_t)r * row_bytes;
            const float *xt = x + t * k;
            float *o = out + t * PGD__NR + r;
            if (tm == 4 && nr - r >= 2)
                kf_4x2(f16, wr, row_bytes, xt, k, o), r += 2;
            else if (tm == 4)
                kf_4x1(f16, wr, row_bytes, xt, k, o), r += 1;
            else if (tm == 2 && nr - r >= 2)
                kf_2x2(f16, wr, row_bytes, xt, k, o), r += 2;
            else if (tm == 2)
                kf_2x1(f16, wr, row_bytes, xt, k, o), r += 1;
            else if (nr - r >= 4)
                kf_1x4(f16, wr, row_bytes, xt, k, o), r += 4;
            else
                kf_1x1(f16, wr, row_bytes, xt, k, o), r += 1;
        }
        t += tm;
    }
}

/* Quantizes x[k] to the Q8 activation format (bit-identical to quant_row_scalar for finite
 * input: same amax, same float ops, round-half-even). */
AVX2_TARGET static void quant_row_avx2(const float *x, int64_t k, int8_t *qs, float *d, float *s,
                                       int32_t *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < k / PGD_QK; b++) {
        const float *xb = x + b * PGD_QK;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
        m = _mm256_max_ps(m, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, vid), MM_ROUND_EVEN));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, vid), MM_ROUND_EVEN));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, vid), MM_ROUND_EVEN));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, vid), MM_ROUND_EVEN));
        __m256i t = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
        const int32_t isum = _mm_cvtsi128_si32(t4);
        __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        q = _mm256_permutevar8x32_epi32(q, perm);
        _mm256_storeu_si256((__m256i *)(qs + b * PGD_QK), q);
        d[b] = db;
        sum[b] = isum;
        s[b] = db * (float)isum;
    }
}

static const pgd__matmul_kernels kernels_avx2 = {
    quant_row_avx2,
    {kq_q8_0_avx2, kq_q4_0_avx2, kq_q4_1_avx2, kq_q5_0_avx2, kq_q5_1_avx2},
    {kqm_q8_0_avx2, kqm_q4_0_avx2, kqm_q4_1_avx2, kqm_q5_0_avx2, kqm_q5_1_avx2},
    {NULL, NULL, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
    kf_avx2,
};

static const pgd__matmul_kernels kernels_avx512 = {
    quant_row_avx2,
    {kq_q8_0_avx512, kq_q4_0_avx512, kq_q4_1_avx512, kq_q5_0_avx512, kq_q5_1_avx512},
    {kqm_q8_0_avx512, kqm_q4_0_avx512, kqm_q4_1_avx512, kqm_q5_0_avx512, kqm_q5_1_avx512},
    {kqb_q8_0_avx512, kqb_q4_0_avx512, kqb_q4_1_avx512, kqb_q5_0_avx512, kqb_q5_1_avx512},
    {kqp_q8_0_avx512, kqp_q4_0_avx512, kqp_q4_1_avx512, NULL, NULL},
    kf_avx2,
};

const pgd__matmul_kernels *pgd__matmul_kernels_avx2(void) {
    return &kernels_avx2;
}
const pgd__matmul_kernels *pgd__matmul_kernels_avx512(void) {
    return &kernels_avx512;
}

#else

const pgd__matmul_kernels *pgd__matmul_kernels_avx2(void) {
    return NULL;
}
const pgd__matmul_kernels *pgd__matmul_kernels_avx512(void) {
    return NULL;
}

#endif
