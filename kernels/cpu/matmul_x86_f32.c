/*
 * kernels/cpu/matmul_x86_f32.c — x86-64 SIMD kernels of the PGD_ACT_F32 mode (quantized
 * weights, f32 activations) for matmul_f32.c: an AVX2 (+FMA, F16C) set and an AVX-512 set.
 * The library is built without -march flags, so each function carries its own target
 * attribute; matmul.c picks a set after checking the CPU (pgd_cpu_isa_supported).
 *
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
 * Decode (kd): per block, dequantize once, FMA into the 32 lanes of each of mr <= 2 tokens
 *   (4 ymm or 2 zmm per token: one FMA per lane per block, no latency chain). Lean on
 *   purpose: m = 1 is bound by the weight stream.
 * Prefill (kp): the f32 panel of PGD__FA_PR = 4 rows against up to 6 (AVX-512) or 3 (AVX2)
 *   tokens at a time, the accumulators of one lane group (16 or 8 of the 32 lanes) for all
 *   rows x tokens in registers while the panel chunk is swept, then the next lane group. Each
 *   step loads 4 weight vectors and T activation vectors for 4*T FMAs. On the last chunk the
 *   lanes are reduced in registers (hsum32 of 4 rows at once, transposed) and 4 outputs per
 *   token stored together.
 * Every kernel follows the PGD_ACT_F32 order exactly (lane e % 32, e ascending, fmaf; the
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

#define T2  __attribute__((target("avx2,fma,f16c")))
#define T5  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define INL inline __attribute__((always_inline))

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
T2 static INL float hsum8_v(__m256 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* ======================================= AVX2 ============================================ */

/* 32 bytes with 0x10 where bit e of qh is set. */
T2 static INL __m256i bits_to_0x10(uint32_t qh) {
    const __m256i shuf =
        _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bitm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bitm), bitm);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Block blk of type kt as w[i] = weights 8i .. 8i+7. */
T2 static INL void deq_avx2(int kt, const uint8_t *blk, __m256 w[4]) {
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

T2 static INL void kd_avx2_body(int kt, int mr, const uint8_t *w, const float *x, int64_t k,
                                float *out) {
    const size_t bs = pgd__kq_block_bytes(kt);
    __m256 acc[PGD__FA_MR][4];
    for (int t = 0; t < mr; t++)
        for (int i = 0; i < 4; i++) acc[t][i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / PGD_QK; b++) {
        __m256 wv[4];
        deq_avx2(kt, w + (size_t)b * bs, wv);
#pragma GCC unroll 2
        for (int t = 0; t < mr; t++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                acc[t][i] = _mm256_fmadd_ps(wv[i], _mm256_loadu_ps(x + t * k + b * PGD_QK + 8 * i),
                                            acc[t][i]);
    }
    for (int t = 0; t < mr; t++) /* hsum32: (a[i] + a[i+16]) + (a[i+8] + a[i+24]), then hsum8 */
        out[t] = hsum8_v(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][2]),
                                       _mm256_add_ps(acc[t][1], acc[t][3])));
}

T2 static INL void deq_avx2_row(int kt, const uint8_t *w, int64_t nb, float *dst) {
    const size_t bs = pgd__kq_block_bytes(kt);
    for (int64_t b = 0; b < nb; b++) {
        __m256 wv[4];
        deq_avx2(kt, w + (size_t)b * bs, wv);
        for (int i = 0; i < 4; i++) _mm256_store_ps(dst + b * PGD_QK + 8 * i, wv[i]);
    }
}

/* The per-type decode and dequantize entry points of one ISA variant (isa: avx2 or avx512,
 * T_: its target attribute): kd_<isa>_<type> dispatching to a function per token count, and
 * deq_<isa>_<type>. */
#define KD_SET(T_, isa, sfx, kt)                                                                   \
    T_ __attribute__((noinline)) static void kd_##isa##_##sfx##_1(                                 \
        const uint8_t *w, const float *x, int64_t k, float *out) {                                 \
        kd_##isa##_body(kt, 1, w, x, k, out);                                                      \
    }                                                                                              \
    T_ __attribute__((noinline)) static void kd_##isa##_##sfx##_2(                                 \
        const uint8_t *w, const float *x, int64_t k, float *out) {                                 \
        kd_##isa##_body(kt, 2, w, x, k, out);                                                      \
    }                                                                                              \
    static void kd_##isa##_##sfx(const uint8_t *w, const float *x, int64_t k, int mr,              \
                                 float *out) {                                                     \
        if (mr == 2)                                                                               \
            kd_##isa##_##sfx##_2(w, x, k, out);                                                    \
        else                                                                                       \
            kd_##isa##_##sfx##_1(w, x, k, out);                                                    \
    }                                                                                              \
    T_ static void deq_##isa##_##sfx(const uint8_t *w, int64_t nb, float *dst) {                   \
        deq_##isa##_row(kt, w, nb, dst);                                                           \
    }
#define KD_SETS(T_, isa)                                                                           \
    KD_SET(T_, isa, q8_0, PGD__KQ_Q8_0)                                                            \
    KD_SET(T_, isa, q4_0, PGD__KQ_Q4_0)                                                            \
    KD_SET(T_, isa, q4_1, PGD__KQ_Q4_1)                                                            \
    KD_SET(T_, isa, q5_0, PGD__KQ_Q5_0)                                                            \
    KD_SET(T_, isa, q5_1, PGD__KQ_Q5_1)
KD_SETS(T2, avx2)

/* hsum8 of four 8-lane vectors, transposed: [hsum8(h0), hsum8(h1), hsum8(h2), hsum8(h3)],
 * each by the tree ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
T2 static INL __m128 hsum8x4_v(__m256 h0, __m256 h1, __m256 h2, __m256 h3) {
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

/* Stores the first nr of v's 4 floats at y. */
T2 static INL void store_nr_avx2(float *y, __m128 v, int nr) {
    if (nr == 4)
        _mm_storeu_ps(y, v);
    else
        _mm_maskstore_ps(y, _mm_cmpgt_epi32(_mm_set1_epi32(nr), _mm_setr_epi32(0, 1, 2, 3)), v);
}

/* T tokens x the 4 panel rows, lane group g (lanes 8g .. 8g+7) at a time; kp's contract. */
T2 static INL void kp_avx2_tile(int T, const float *wd, int64_t ldw, const float *x, int64_t ldx,
                                int64_t kc, float *part /* [T][PGD__FA_PR][32] */, int first,
                                float *y, int64_t ldy, int nr) {
    for (int g = 0; g < 4; g++) {
        __m256 acc[PGD__FA_PR][3];
#pragma GCC unroll 4
        for (int r = 0; r < PGD__FA_PR; r++)
#pragma GCC unroll 3
            for (int t = 0; t < T; t++)
                acc[r][t] = first ? _mm256_setzero_ps()
                                  : _mm256_loadu_ps(part + (t * PGD__FA_PR + r) * 32 + 8 * g);
        for (int64_t e = 8 * g; e < kc; e += PGD_QK) {
            __m256 xv[3];
#pragma GCC unroll 3
            for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(x + t * ldx + e);
#pragma GCC unroll 4
            for (int r = 0; r < PGD__FA_PR; r++) {
                const __m256 wv = _mm256_load_ps(wd + r * ldw + e);
#pragma GCC unroll 3
                for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
        if (g < 3 || !y) {
#pragma GCC unroll 4
            for (int r = 0; r < PGD__FA_PR; r++)
#pragma GCC unroll 3
                for (int t = 0; t < T; t++)
                    _mm256_storeu_ps(part + (t * PGD__FA_PR + r) * 32 + 8 * g, acc[r][t]);
            continue;
        }
        /* the last chunk: hsum32 = hsum8 of (a[i] + a[i+16]) + (a[i+8] + a[i+24]) */
#pragma GCC unroll 3
        for (int t = 0; t < T; t++) {
            __m256 h[PGD__FA_PR];
#pragma GCC unroll 4
            for (int r = 0; r < PGD__FA_PR; r++) {
                const float *p = part + (t * PGD__FA_PR + r) * 32;
                h[r] = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 16)),
                                     _mm256_add_ps(_mm256_loadu_ps(p + 8), acc[r][t]));
            }
            store_nr_avx2(y + t * ldy, hsum8x4_v(h[0], h[1], h[2], h[3]), nr);
        }
    }
}

#define KP_AVX2(T)                                                                                 \
    T2 __attribute__((noinline)) static void kp_avx2_##T(                                          \
        const float *wd, int64_t ldw, const float *x, int64_t ldx, int64_t kc, float *part,        \
        int first, float *y, int64_t ldy, int nr) {                                                \
        kp_avx2_tile(T, wd, ldw, x, ldx, kc, part, first, y, ldy, nr);                             \
    }
KP_AVX2(1)
KP_AVX2(2)
KP_AVX2(3)
#undef KP_AVX2

static void kp_avx2(const float *wd, int64_t ldw, const float *x, int64_t ldx, int mt, int64_t kc,
                    float *part, int first, float *y, int64_t ldy, int nr) {
    for (int t = 0; t < mt;) {
        const int n = mt - t >= 3 ? 3 : mt - t;
        const float *xt = x + t * ldx;
        float *pt = part + (size_t)t * PGD__FA_PR * 32, *yt = y ? y + t * ldy : NULL;
        if (n == 3)
            kp_avx2_3(wd, ldw, xt, ldx, kc, pt, first, yt, ldy, nr);
        else if (n == 2)
            kp_avx2_2(wd, ldw, xt, ldx, kc, pt, first, yt, ldy, nr);
        else
            kp_avx2_1(wd, ldw, xt, ldx, kc, pt, first, yt, ldy, nr);
        t += n;
    }
}

static const pgd__fa_kernels fa_kernels_avx2 = {
    {kd_avx2_q8_0, kd_avx2_q4_0, kd_avx2_q4_1, kd_avx2_q5_0, kd_avx2_q5_1},
    {deq_avx2_q8_0, deq_avx2_q4_0, deq_avx2_q4_1, deq_avx2_q5_0, deq_avx2_q5_1},
    kp_avx2,
    3,
};

/* ====================================== AVX-512 ========================================== */

/* Block blk of type kt as w[0] = weights 0..15, w[1] = 16..31. */
T5 static INL void deq_avx512(int kt, const uint8_t *blk, __m512 w[2]) {
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

/* hsum32 of the lanes (a0 = lanes 0..15, a1 = lanes 16..31). */
T5 static INL float hsum32_v(__m512 a0, __m512 a1) {
    const __m512 s = _mm512_add_ps(a0, a1); /* a[i] + a[i+16] */
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), hi);
    return hsum8_v(h);
}

T5 static INL void kd_avx512_body(int kt, int mr, const uint8_t *w, const float *x, int64_t k,
                                  float *out) {
    const size_t bs = pgd__kq_block_bytes(kt);
    __m512 acc[PGD__FA_MR][2];
    for (int t = 0; t < mr; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / PGD_QK; b++) {
        __m512 wv[2];
        deq_avx512(kt, w + (size_t)b * bs, wv);
#pragma GCC unroll 2
        for (int t = 0; t < mr; t++)
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++)
                acc[t][i] = _mm512_fmadd_ps(wv[i], _mm512_loadu_ps(x + t * k + b * PGD_QK + 16 * i),
                                            acc[t][i]);
    }
    for (int t = 0; t < mr; t++) out[t] = hsum32_v(acc[t][0], acc[t][1]);
}

T5 static INL void deq_avx512_row(int kt, const uint8_t *w, int64_t nb, float *dst) {
    const size_t bs = pgd__kq_block_bytes(kt);
    for (int64_t b = 0; b < nb; b++) {
        __m512 wv[2];
        deq_avx512(kt, w + (size_t)b * bs, wv);
        _mm512_store_ps(dst + b * PGD_QK, wv[0]);
        _mm512_store_ps(dst + b * PGD_QK + 16, wv[1]);
    }
}

KD_SETS(T5, avx512)
#undef KD_SETS
#undef KD_SET

/* hsum32 of four outputs from s_r[i] = a_r[i] + a_r[i + 16] (i < 16), transposed:
 * [hsum32(a0), .., hsum32(a3)], each by the tree of matmul_kern.h. */
T5 static INL __m128 hsum32x4_v(__m512 s0, __m512 s1, __m512 s2, __m512 s3) {
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

/* T tokens x the 4 panel rows, lane group h (lanes 16h .. 16h+15) at a time; kp's contract. */
T5 static INL void kp_avx512_tile(int T, const float *wd, int64_t ldw, const float *x, int64_t ldx,
                                  int64_t kc, float *part /* [T][PGD__FA_PR][32] */, int first,
                                  float *y, int64_t ldy, int nr) {
    for (int h = 0; h < 2; h++) {
        __m512 acc[PGD__FA_PR][6];
#pragma GCC unroll 4
        for (int r = 0; r < PGD__FA_PR; r++)
#pragma GCC unroll 6
            for (int t = 0; t < T; t++)
                acc[r][t] = first ? _mm512_setzero_ps()
                                  : _mm512_loadu_ps(part + (t * PGD__FA_PR + r) * 32 + 16 * h);
        for (int64_t e = 16 * h; e < kc; e += PGD_QK) {
            __m512 xv[6];
#pragma GCC unroll 6
            for (int t = 0; t < T; t++) xv[t] = _mm512_loadu_ps(x + t * ldx + e);
#pragma GCC unroll 4
            for (int r = 0; r < PGD__FA_PR; r++) {
                const __m512 wv = _mm512_load_ps(wd + r * ldw + e);
#pragma GCC unroll 6
                for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
        if (h == 0 || !y) {
#pragma GCC unroll 4
            for (int r = 0; r < PGD__FA_PR; r++)
#pragma GCC unroll 6
                for (int t = 0; t < T; t++)
                    _mm512_storeu_ps(part + (t * PGD__FA_PR + r) * 32 + 16 * h, acc[r][t]);
            continue;
        }
        /* the last chunk: y = hsum32 of the lanes (lanes 0..15 wait in part) */
        const __mmask8 keep = (__mmask8)((1u << nr) - 1);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            __m512 sr[PGD__FA_PR];
#pragma GCC unroll 4
            for (int r = 0; r < PGD__FA_PR; r++)
                sr[r] = _mm512_add_ps(_mm512_loadu_ps(part + (t * PGD__FA_PR + r) * 32), acc[r][t]);
            _mm_mask_storeu_ps(y + t * ldy, keep, hsum32x4_v(sr[0], sr[1], sr[2], sr[3]));
        }
    }
}

#define KP_AVX512(T)                                                                               \
    T5 __attribute__((noinline)) static void kp_avx512_##T(                                        \
        const float *wd, int64_t ldw, const float *x, int64_t ldx, int64_t kc, float *part,        \
        int first, float *y, int64_t ldy, int nr) {                                                \
        kp_avx512_tile(T, wd, ldw, x, ldx, kc, part, first, y, ldy, nr);                           \
    }
KP_AVX512(1)
KP_AVX512(2)
KP_AVX512(3)
KP_AVX512(4)
KP_AVX512(5)
KP_AVX512(6)
#undef KP_AVX512

static void kp_avx512(const float *wd, int64_t ldw, const float *x, int64_t ldx, int mt, int64_t kc,
                      float *part, int first, float *y, int64_t ldy, int nr) {
    typedef void (*tile_fn)(const float *, int64_t, const float *, int64_t, int64_t, float *, int,
                            float *, int64_t, int);
    static const tile_fn tiles[7] = {NULL,        kp_avx512_1, kp_avx512_2, kp_avx512_3,
                                     kp_avx512_4, kp_avx512_5, kp_avx512_6};
    for (int t = 0; t < mt;) {
        const int n = mt - t >= 6 ? 6 : mt - t;
        tiles[n](wd, ldw, x + t * ldx, ldx, kc, part + (size_t)t * PGD__FA_PR * 32, first,
                 y ? y + t * ldy : NULL, ldy, nr);
        t += n;
    }
}

static const pgd__fa_kernels fa_kernels_avx512 = {
    {kd_avx512_q8_0, kd_avx512_q4_0, kd_avx512_q4_1, kd_avx512_q5_0, kd_avx512_q5_1},
    {deq_avx512_q8_0, deq_avx512_q4_0, deq_avx512_q4_1, deq_avx512_q5_0, deq_avx512_q5_1},
    kp_avx512,
    6,
};

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
