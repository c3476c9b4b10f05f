/*
 * kernels/cpu/matmul_x86_f32.c — x86-64 SIMD kernels of the PGD_ACT_F32 mode (quantized
 * weights, f32 activations) for matmul_f32.c: an AVX2 (+FMA, F16C) set and an AVX-512 set.
 * The library is built without -march flags, so each function carries its own target
 * attribute; matmul.c picks a set after checking the CPU (pgd_cpu_isa_supported).
 *
 * Owns: two constant kernel tables. The kernels (decode kd, dequantize deq, prefill kp) are one
 * body, matmul_x86_f32.inc (which describes them), included once per vector width: 256-bit for
 * AVX2 with a 3-token prefill tile, 512-bit for AVX-512 with a 6-token one. The width's
 * primitives are here: dequantizing a block, the hsum32 of a decode's lanes, and the prefill's
 * last reduction.
 * Dequantization (the w_e of matmul_kern.h, in registers):
 *   AVX2: a block is four vectors of 8 weights; quants are widened to int32 (vpmovsx/zxbd),
 *     converted (vcvtdq2ps) and scaled: vmulps by d (exact), or vfmadd(d, q, m) for the
 *     types with a min.
 *   AVX-512: a block is two vectors of 16. Q8_0 as above. The 4/5-bit types go through a
 *     table: the 16 (or 32) possible weights of the block, tab[i] = d * (i - off) or
 *     fma(d, i, m), are computed once (one vmulps/vfmadd per 16 entries, the same operation
 *     as the scalar reference per element, so the same bits), then each weight is a vpermps
 *     of the table by its nibble; for Q5_x the fifth bit is rotated out of qh into bit 4 of
 *     the index and one vpermt2ps reads the 32-entry table (measured faster than masked
 *     permutes on Zen 5).
 * Prefill's last reduction: the lanes of 4 rows reduced in registers (hsum32 of 4 rows at once,
 *   transposed) and 4 outputs per token stored together.
 * Invariants: the PGD_ACT_F32 order of matmul_kern.h (lane e % 32, e ascending, fmaf; the
 * hsum32 tree at the end), so the bits match the scalar reference.
 * Threading: pure functions.
 */
#include "kernels/cpu/matmul_kern.h"

#include "kernels/cpu/quant.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define INL         inline __attribute__((always_inline))

/* A kp register tile of T tokens (matmul_x86_f32.inc). */
typedef void (*kp_tile_fn)(const float *wd, int64_t ldw, const float *x, int64_t ldx, int64_t kc,
                           float *part, int first, float *y, int64_t ldy, int nr);

static INL uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static INL uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* hsum8 of matmul_kern.h on a vector: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
AVX2_TARGET static INL float hsum8_v(__m256 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* ======================================= AVX2 ============================================ */

#define FA_TARGET AVX2_TARGET
#define FA_(name) name##_avx2

/* 32 bytes with 0x10 where bit e of qh is set. */
FA_TARGET static INL __m256i bits_to_0x10(uint32_t qh) {
    const __m256i shuf =
        _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bitm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bitm), bitm);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Block blk of type kt as w[i] = weights 8i .. 8i+7. */
FA_TARGET static INL void FA_(deq)(int kt, const uint8_t *blk, __m256 w[4]) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(rd16(blk)));
    if (kt == PGD__KQ_Q8_0) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * i));
            w[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
        }
        return;
    }
    const int has_min = kt == PGD__KQ_Q4_1 || kt == PGD__KQ_Q5_1;
    const int five = kt == PGD__KQ_Q5_0 || kt == PGD__KQ_Q5_1;
    const uint8_t *p = blk + (has_min ? 4 : 2);
    const __m256 m = has_min ? _mm256_set1_ps(_cvtsh_ss(rd16(blk + 2))) : _mm256_setzero_ps();
    uint32_t qh = 0;
    if (five) qh = rd32(p), p += 4;
    /* the quants as bytes: lo = elements 0..15 (low nibbles), hi = 16..31 (high nibbles);
     * Q5_x in one 256-bit register (measured faster there), Q4_x in two 128-bit ones
     * (measured faster there) */
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m128i lo, hi;
    if (five) {
        __m256i q32 =
            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
        q32 = _mm256_or_si256(q32, bits_to_0x10(qh));
        if (!has_min) q32 = _mm256_sub_epi8(q32, _mm256_set1_epi8(16)); /* q - 16 */
        lo = _mm256_castsi256_si128(q32);
        hi = _mm256_extracti128_si256(q32, 1);
    } else {
        const __m128i m4 = _mm_set1_epi8(15);
        lo = _mm_and_si128(t, m4);
        hi = _mm_and_si128(_mm_srli_epi16(t, 4), m4);
        if (!has_min) { /* q - 8 */
            lo = _mm_sub_epi8(lo, _mm_set1_epi8(8));
            hi = _mm_sub_epi8(hi, _mm_set1_epi8(8));
        }
    }
    const __m128i q[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (has_min)
            w[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q[i])), m);
        else
            w[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q[i])));
    }
}

/* hsum32 of the lanes, a[i] = lanes 8i .. 8i+7: hsum8 of (a[0] + a[2]) + (a[1] + a[3]). */
FA_TARGET static INL float FA_(hsum32)(const __m256 a[4]) {
    return hsum8_v(_mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3])));
}

/* hsum8 of four 8-lane vectors, transposed: [hsum8(h0), hsum8(h1), hsum8(h2), hsum8(h3)],
 * each by the tree ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
FA_TARGET static INL __m128 hsum8x4_v(__m256 h0, __m256 h1, __m256 h2, __m256 h3) {
    /* g_r[i] = h_r[i] + h_r[i + 4]: [g0 | g1] and [g2 | g3] */
    __m256 g01 =
        _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
    __m256 g23 =
        _mm256_add_ps(_mm256_permute2f128_ps(h2, h3, 0x20), _mm256_permute2f128_ps(h2, h3, 0x31));
    /* lane 0 of each half: (g0 + g2) + (g1 + g3) */
    g01 = _mm256_add_ps(g01, _mm256_permute_ps(g01, _MM_SHUFFLE(1, 0, 3, 2)));
    g23 = _mm256_add_ps(g23, _mm256_permute_ps(g23, _MM_SHUFFLE(1, 0, 3, 2)));
    g01 = _mm256_add_ps(g01, _mm256_permute_ps(g01, _MM_SHUFFLE(2, 3, 0, 1)));
    g23 = _mm256_add_ps(g23, _mm256_permute_ps(g23, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m256 u = _mm256_unpacklo_ps(g01, g23); /* [y0, y2, ., . | y1, y3, ., .] */
    return _mm256_castps256_ps128(
        _mm256_permutevar8x32_ps(u, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
}

/* kp's last reduction (lanes 24..31 in a, 0..23 in part): hsum32 = hsum8 of
 * (a[i] + a[i+16]) + (a[i+8] + a[i+24]), the first nr of 4 rows stored. */
FA_TARGET static INL void FA_(kp_y)(const float *part, const __m256 a[PGD__FA_PR], float *y,
                                    int nr) {
    __m256 h[PGD__FA_PR];
#pragma GCC unroll 4
    for (int r = 0; r < PGD__FA_PR; r++) {
        const float *p = part + r * 32;
        h[r] = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 16)),
                             _mm256_add_ps(_mm256_loadu_ps(p + 8), a[r]));
    }
    const __m128 v = hsum8x4_v(h[0], h[1], h[2], h[3]);
    if (nr == 4)
        _mm_storeu_ps(y, v);
    else
        _mm_maskstore_ps(y, _mm_cmpgt_epi32(_mm_set1_epi32(nr), _mm_setr_epi32(0, 1, 2, 3)), v);
}

#define FA_V      __m256
#define FA_OP(op) _mm256_##op##_ps
#define FA_KP_T   3
#include "kernels/cpu/matmul_x86_f32.inc"

/* ====================================== AVX-512 ========================================== */

#define FA_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define FA_(name) name##_avx512

/* Block blk of type kt as w[0] = weights 0..15, w[1] = 16..31. */
FA_TARGET static INL void FA_(deq)(int kt, const uint8_t *blk, __m512 w[2]) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(rd16(blk)));
    if (kt == PGD__KQ_Q8_0) {
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2 + 16 * i));
            w[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
        }
        return;
    }
    const int has_min = kt == PGD__KQ_Q4_1 || kt == PGD__KQ_Q5_1;
    const int five = kt == PGD__KQ_Q5_0 || kt == PGD__KQ_Q5_1;
    const uint8_t *p = blk + (has_min ? 4 : 2);
    const __m512 iota =
        _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); /* exact */
    __m512 tlo, thi = _mm512_setzero_ps(); /* tlo[i]: the weight of q = i, thi: of q = 16 + i */
    if (has_min) {
        /* d and m converted together from the block's leading dword */
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)rd32(blk)));
        const __m512 dd = _mm512_broadcastss_ps(dm);
        const __m512 m = _mm512_broadcastss_ps(_mm_movehdup_ps(dm));
        tlo = _mm512_fmadd_ps(dd, iota, m);
        if (five) thi = _mm512_fmadd_ps(dd, _mm512_add_ps(iota, _mm512_set1_ps(16.0f)), m);
    } else if (five) {
        tlo = _mm512_mul_ps(d, _mm512_sub_ps(iota, _mm512_set1_ps(16.0f)));
        thi = _mm512_mul_ps(d, iota);
    } else {
        tlo = _mm512_mul_ps(d, _mm512_sub_ps(iota, _mm512_set1_ps(8.0f)));
    }
    uint32_t qh = 0;
    if (five) qh = rd32(p), p += 4;
    /* dword lanes holding the bytes: low nibble = element e, high nibble = element 16 + e;
     * vpermps reads only the low 4 bits of each index */
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512i vh = _mm512_srli_epi32(v, 4);
    if (!five) {
        w[0] = _mm512_permutexvar_ps(v, tlo);
        w[1] = _mm512_permutexvar_ps(vh, tlo);
    } else {
        /* 5-bit indices into [tlo | thi]: bits 0..3 the nibble, bit 4 = bit e (16 + e) of qh
         * rotated into place; vpermt2ps ignores the bits above */
        const __m512i rl = _mm512_setr_epi32(28, 29, 30, 31, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
        const __m512i rh = _mm512_add_epi32(rl, _mm512_set1_epi32(16));
        const __m512i q = _mm512_set1_epi32((int)qh), m15 = _mm512_set1_epi32(15);
        const __m512i il = _mm512_ternarylogic_epi32(m15, v, _mm512_rorv_epi32(q, rl), 0xca);
        const __m512i ih = _mm512_ternarylogic_epi32(m15, vh, _mm512_rorv_epi32(q, rh), 0xca);
        w[0] = _mm512_permutex2var_ps(tlo, il, thi);
        w[1] = _mm512_permutex2var_ps(tlo, ih, thi);
    }
}

/* hsum32 of the lanes (a[0] = lanes 0..15, a[1] = lanes 16..31). */
FA_TARGET static INL float FA_(hsum32)(const __m512 a[2]) {
    const __m512 s = _mm512_add_ps(a[0], a[1]); /* a[i] + a[i+16] */
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), hi);
    return hsum8_v(h);
}

/* hsum32 of four outputs from s_r[i] = a_r[i] + a_r[i + 16] (i < 16), transposed:
 * [hsum32(a0), .., hsum32(a3)], each by the tree of matmul_kern.h. */
FA_TARGET static INL __m128 hsum32x4_v(__m512 s0, __m512 s1, __m512 s2, __m512 s3) {
    /* h_r[i] = s_r[i] + s_r[i + 8]: [h0 | h1] and [h2 | h3] */
    const __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(s0, s1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(s2, s3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(s2, s3, _MM_SHUFFLE(3, 2, 3, 2)));
    /* g_r[i] = h_r[i] + h_r[i + 4]: [g0 | g1 | g2 | g3] */
    __m512 g = _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 0 of each quarter: (g0 + g2) + (g1 + g3) */
    g = _mm512_add_ps(g, _mm512_permute_ps(g, _MM_SHUFFLE(1, 0, 3, 2)));
    g = _mm512_add_ps(g, _mm512_permute_ps(g, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, g));
}

/* kp's last reduction (lanes 16..31 in a, 0..15 in part), the first nr of 4 rows stored. */
FA_TARGET static INL void FA_(kp_y)(const float *part, const __m512 a[PGD__FA_PR], float *y,
                                    int nr) {
    __m512 s[PGD__FA_PR];
#pragma GCC unroll 4
    for (int r = 0; r < PGD__FA_PR; r++) s[r] = _mm512_add_ps(_mm512_loadu_ps(part + r * 32), a[r]);
    _mm_mask_storeu_ps(y, (__mmask8)((1u << nr) - 1), hsum32x4_v(s[0], s[1], s[2], s[3]));
}

#define FA_V      __m512
#define FA_OP(op) _mm512_##op##_ps
#define FA_KP_T   6
#include "kernels/cpu/matmul_x86_f32.inc"

const pgd__fa_kernels *pgd__fa_kernels_avx2(void) {
    return &fa_kernels_avx2;
}
const pgd__fa_kernels *pgd__fa_kernels_avx512(void) {
    return &fa_kernels_avx512;
}

#else

const pgd__fa_kernels *pgd__fa_kernels_avx2(void) {
    return NULL;
}
const pgd__fa_kernels *pgd__fa_kernels_avx512(void) {
    return NULL;
}

#endif
