/*
 * kernels/cpu/attention.c — paged causal attention, f32: the scalar reference of the order in
 * attention.h and its x86 SIMD paths (attention_x86.inc, built twice: AVX-512 and AVX2), which
 * must give the same bits.
 *
 * SIMD shape (block_size 16: a block's 16 positions are one vector of 16 lanes):
 *   pass 1: per pair of blocks and tile of up to ATT_GT heads, the two d-parity chains of every
 *     (block, head) in registers while d sweeps the head: per d, one K vector per block and a
 *     broadcast q per head; the scores go to the scratch rows.
 *   pass 2: per head, max, exp and the 16-lane double sum, vector by vector.
 *   pass 3: per tile of heads x 16-float slices of head_dim, accumulators in registers while
 *     the positions are swept: per position one V row slice, a broadcast weight per head.
 * Owns: nothing (the caller's scratch). Threading: pure.
 */
#include "kernels/cpu/attention.h"

#include "common/error.h"
#include "kernels/cpu/vexp.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define ATT_MAX_GROUP 64 /* heads per kv head the SIMD paths take (more: scalar path) */

/* sum of 16 double lanes in the order of attention.h */
static inline double sum16d(const double s[16]) {
    double h[8];
    for (int i = 0; i < 8; i++) h[i] = s[i] + s[i + 8];
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/* ---- the scalar reference ---------------------------------------------------------------- */

static void attn_scalar(const pgd_attn_shape *s, uint32_t kvh, const float *q, const float *k_cache,
                        const float *v_cache, const int32_t *block_table, uint32_t n_ctx,
                        float *scores, float *out) {
    const uint32_t D = s->head_dim, BS = s->block_size, G = s->n_group;
    const uint64_t head_stride = (uint64_t)BS * D; /* one kv head in a block (K or V) */
    const uint64_t block_stride = (uint64_t)s->n_kv_head * head_stride;
    const uint32_t n_pad = (n_ctx + BS - 1) / BS * BS; /* scores row stride */
    for (uint32_t g = 0; g < G; g++) {
        const float *qg = q + (uint64_t)g * D;
        float *sc = scores + (uint64_t)g * n_pad;
        for (uint32_t p = 0; p < n_ctx; p++) {
            const float *kt =
                k_cache + (uint64_t)block_table[p / BS] * block_stride + kvh * head_stride;
            float a[2] = {0.0f, 0.0f};
            for (uint32_t d = 0; d < D; d++)
                a[d & 1] = fmaf(qg[d], kt[(uint64_t)d * BS + p % BS], a[d & 1]);
            sc[p] = (a[0] + a[1]) * s->scale;
        }
        float mx = -INFINITY;
        for (uint32_t p = 0; p < n_ctx; p++) mx = sc[p] > mx ? sc[p] : mx;
        double lanes[16] = {0};
        for (uint32_t p = 0; p < n_ctx; p++) {
            sc[p] = pgd__expf(sc[p] - mx);
            lanes[p % 16] += sc[p];
        }
        const float inv = (float)(1.0 / sum16d(lanes));
        float *o = out + (uint64_t)g * D;
        for (uint32_t d = 0; d < D; d++) o[d] = 0.0f;
        for (uint32_t p = 0; p < n_ctx; p++) {
            const float *v = v_cache + (uint64_t)block_table[p / BS] * block_stride +
                             kvh * head_stride + (uint64_t)(p % BS) * D;
            for (uint32_t d = 0; d < D; d++) o[d] = fmaf(sc[p], v[d], o[d]);
        }
        for (uint32_t d = 0; d < D; d++) o[d] *= inv;
    }
}

/* ---- x86 SIMD paths ---------------------------------------------------------------------- */

typedef void (*attn_fn)(const pgd_attn_shape *, uint32_t, const float *, const float *,
                        const float *, const int32_t *, uint32_t, float *, float *);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define INL inline __attribute__((always_inline))

/* AVX-512: a vector of 16 floats is one zmm. */
#define T      __attribute__((target("avx2,fma,avx512f,avx512dq")))
#define FN(x)  a5_##x
#define ATT_GT 4 /* heads per register tile */
#define ATT_NB 2 /* blocks per pass-1 tile */
#define ATT_DV 4 /* 16-float slices of head_dim per pass-3 tile */
typedef __m512 a5_v;
typedef struct {
    __m512d lo, hi;
} a5_vd;
T static INL a5_v a5_zero(void) {
    return _mm512_setzero_ps();
}
T static INL a5_v a5_ld(const float *p) {
    return _mm512_loadu_ps(p);
}
T static INL void a5_st(float *p, a5_v v) {
    _mm512_storeu_ps(p, v);
}
T static INL a5_v a5_set1(float x) {
    return _mm512_set1_ps(x);
}
T static INL a5_v a5_fma(a5_v a, a5_v b, a5_v c) {
    return _mm512_fmadd_ps(a, b, c);
}
T static INL a5_v a5_add(a5_v a, a5_v b) {
    return _mm512_add_ps(a, b);
}
T static INL a5_v a5_sub(a5_v a, a5_v b) {
    return _mm512_sub_ps(a, b);
}
T static INL a5_v a5_mul(a5_v a, a5_v b) {
    return _mm512_mul_ps(a, b);
}
T static INL a5_v a5_max(a5_v a, a5_v b) {
    return _mm512_max_ps(a, b);
}
T static INL a5_v a5_min(a5_v a, a5_v b) {
    return _mm512_min_ps(a, b);
}
T static INL float a5_hmax(a5_v v) {
    return _mm512_reduce_max_ps(v);
}
/* lanes >= n (n < 16) replaced by f */
T static INL a5_v a5_keep(a5_v v, uint32_t n, float f) {
    return _mm512_mask_mov_ps(_mm512_set1_ps(f), (__mmask16)((1u << n) - 1), v);
}
/* 2^n of integral n in [-126, 127] */
T static INL a5_v a5_pow2i(a5_v n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
T static INL a5_vd a5_vd_zero(void) {
    return (a5_vd){_mm512_setzero_pd(), _mm512_setzero_pd()};
}
T static INL a5_vd a5_vd_add(a5_vd s, a5_v v) {
    s.lo = _mm512_add_pd(s.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    s.hi = _mm512_add_pd(
        s.hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    return s;
}
T static INL void a5_vd_st(double *p, a5_vd s) {
    _mm512_storeu_pd(p, s.lo);
    _mm512_storeu_pd(p + 8, s.hi);
}
#include "kernels/cpu/attention_x86.inc"
#undef T
#undef FN
#undef ATT_GT
#undef ATT_NB
#undef ATT_DV

/* AVX2: a vector of 16 floats is two ymm. */
#define T      __attribute__((target("avx2,fma")))
#define FN(x)  a2_##x
#define ATT_GT 2
#define ATT_NB 1
#define ATT_DV 2
typedef struct {
    __m256 a, b;
} a2_v;
typedef struct {
    __m256d d[4];
} a2_vd;
#define A2_OP(name, op)                                                                            \
    T static INL a2_v a2_##name(a2_v x, a2_v y) {                                                  \
        return (a2_v){op(x.a, y.a), op(x.b, y.b)};                                                 \
    }
A2_OP(add, _mm256_add_ps)
A2_OP(sub, _mm256_sub_ps)
A2_OP(mul, _mm256_mul_ps)
A2_OP(max, _mm256_max_ps)
A2_OP(min, _mm256_min_ps)
#undef A2_OP
T static INL a2_v a2_zero(void) {
    return (a2_v){_mm256_setzero_ps(), _mm256_setzero_ps()};
}
T static INL a2_v a2_ld(const float *p) {
    return (a2_v){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
T static INL void a2_st(float *p, a2_v v) {
    _mm256_storeu_ps(p, v.a);
    _mm256_storeu_ps(p + 8, v.b);
}
T static INL a2_v a2_set1(float x) {
    return (a2_v){_mm256_set1_ps(x), _mm256_set1_ps(x)};
}
T static INL a2_v a2_fma(a2_v x, a2_v y, a2_v z) {
    return (a2_v){_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)};
}
T static INL float a2_hmax(a2_v v) {
    __m256 m = _mm256_max_ps(v.a, v.b);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
T static INL a2_v a2_keep(a2_v v, uint32_t n, float f) {
    const __m256i lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i nn = _mm256_set1_epi32((int)n);
    const __m256 ma = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, lo));
    const __m256 mb =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, _mm256_add_epi32(lo, _mm256_set1_epi32(8))));
    const __m256 ff = _mm256_set1_ps(f);
    return (a2_v){_mm256_blendv_ps(ff, v.a, ma), _mm256_blendv_ps(ff, v.b, mb)};
}
T static INL __m256 a2_pow2i_h(__m256 n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
T static INL a2_v a2_pow2i(a2_v n) {
    return (a2_v){a2_pow2i_h(n.a), a2_pow2i_h(n.b)};
}
T static INL a2_vd a2_vd_zero(void) {
    return (a2_vd){
        {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}};
}
T static INL a2_vd a2_vd_add(a2_vd s, a2_v v) {
    s.d[0] = _mm256_add_pd(s.d[0], _mm256_cvtps_pd(_mm256_castps256_ps128(v.a)));
    s.d[1] = _mm256_add_pd(s.d[1], _mm256_cvtps_pd(_mm256_extractf128_ps(v.a, 1)));
    s.d[2] = _mm256_add_pd(s.d[2], _mm256_cvtps_pd(_mm256_castps256_ps128(v.b)));
    s.d[3] = _mm256_add_pd(s.d[3], _mm256_cvtps_pd(_mm256_extractf128_ps(v.b, 1)));
    return s;
}
T static INL void a2_vd_st(double *p, a2_vd s) {
    for (int i = 0; i < 4; i++) _mm256_storeu_pd(p + 4 * i, s.d[i]);
}
#include "kernels/cpu/attention_x86.inc"
#undef T
#undef FN
#undef ATT_GT
#undef ATT_NB
#undef ATT_DV

static attn_fn simd_path(pgd_cpu_isa isa) {
    if (isa == PGD_ISA_AVX512) return a5_attn;
    if (isa == PGD_ISA_AVX2) return a2_attn;
    return NULL;
}
#else
static attn_fn simd_path(pgd_cpu_isa isa) {
    (void)isa;
    return NULL;
}
#endif

static attn_fn path_for(pgd_cpu_isa isa, const pgd_attn_shape *s) {
    attn_fn f = NULL;
    if (s->block_size == 16 && s->head_dim % 16 == 0 && s->n_group <= ATT_MAX_GROUP)
        f = simd_path(isa);
    return f ? f : attn_scalar;
}

int pgd_attn_paged_f32_isa(pgd_cpu_isa isa, const pgd_attn_shape *s, uint32_t kvh, const float *q,
                           const float *k_cache, const float *v_cache, const int32_t *block_table,
                           uint32_t n_ctx, float *scores, float *out) {
    if (isa == PGD_ISA_AUTO) isa = pgd_cpu_isa_best();
    if (!pgd_cpu_isa_supported(isa))
        return pgd_error_set(PGD_EINVAL, "attention: this CPU cannot run the %s path",
                             pgd_cpu_isa_name(isa));
    path_for(isa, s)(s, kvh, q, k_cache, v_cache, block_table, n_ctx, scores, out);
    return 0;
}

void pgd_attn_paged_f32(const pgd_attn_shape *s, uint32_t kvh, const float *q, const float *k_cache,
                        const float *v_cache, const int32_t *block_table, uint32_t n_ctx,
                        float *scores, float *out) {
    path_for(pgd_cpu_isa_best(), s)(s, kvh, q, k_cache, v_cache, block_table, n_ctx, scores, out);
}
