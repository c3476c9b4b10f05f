/*
 * kernels/cpu/attention.c — paged causal attention over an f32 or f16 KV cache: the scalar
 * reference of the order in attention.h and its x86 SIMD paths (attention_x86.inc, built for
 * AVX-512 and AVX2, each for both cache dtypes through attention_x86_dtypes.inc), which must
 * give the same bits; and the store of a token's K and V.
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

#include "kernels/cpu/quant.h"
#include "kernels/cpu/vexp.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define ATT_MAX_GROUP 64 /* heads per kv head the SIMD paths take (more: scalar path) */
#define ATT_PF_V      4  /* V blocks prefetched ahead in pass 3 (measured: 4 > 2; K: 2 tiles) */

/* sum of 16 double lanes in the order of attention.h */
static inline double sum16d(const double s[16]) {
    double h[8];
    for (int i = 0; i < 8; i++) h[i] = s[i] + s[i + 8];
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/* ---- the scalar reference ---------------------------------------------------------------- */

/* Element i of a cache, as a float (exact). */
static inline float kv_at(pgd_kv_dtype t, const void *c, uint64_t i) {
    return t == PGD_KV_F16 ? pgd_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

static void attn_scalar(const pgd_attn_shape *s, uint32_t kvh, const float *q, const void *k_cache,
                        const void *v_cache, const int32_t *block_table, uint32_t n_ctx,
                        float *scores, float *out) {
    const uint32_t D = s->head_dim, BS = s->block_size, G = s->n_group;
    const uint64_t head_stride = (uint64_t)BS * D; /* one kv head in a block (K or V) */
    const uint64_t block_stride = (uint64_t)s->n_kv_head * head_stride;
    const uint32_t n_pad = (n_ctx + BS - 1) / BS * BS; /* scores row stride */
    for (uint32_t g = 0; g < G; g++) {
        const float *qg = q + (uint64_t)g * D;
        float *sc = scores + (uint64_t)g * n_pad;
        for (uint32_t p = 0; p < n_ctx; p++) {
            const uint64_t kt = (uint64_t)block_table[p / BS] * block_stride + kvh * head_stride;
            float a[2] = {0.0f, 0.0f};
            for (uint32_t d = 0; d < D; d++)
                a[d & 1] =
                    fmaf(qg[d], kv_at(s->dtype, k_cache, kt + (uint64_t)d * BS + p % BS), a[d & 1]);
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
            const uint64_t v = (uint64_t)block_table[p / BS] * block_stride + kvh * head_stride +
                               (uint64_t)(p % BS) * D;
            for (uint32_t d = 0; d < D; d++)
                o[d] = fmaf(sc[p], kv_at(s->dtype, v_cache, v + d), o[d]);
        }
        for (uint32_t d = 0; d < D; d++) o[d] *= inv;
    }
}

/* Row of n floats to halves, round to nearest even. */
static void row_f16_scalar(const float *x, uint16_t *y, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) y[i] = pgd_f32_to_f16(x[i]);
}

typedef void (*row_f16_fn)(const float *, uint16_t *, uint32_t);

/* One token's K and V into their slots (layouts: attention.h); row: an f16 row converter
 * (f16 caches) taking n % 16 == 0 when it is a SIMD one. */
static void store_with(const pgd_attn_shape *s, void *k_cache, void *v_cache, uint64_t b,
                       uint32_t j, const float *k, const float *v, row_f16_fn row) {
    const uint32_t D = s->head_dim, BS = s->block_size;
    for (uint32_t h = 0; h < s->n_kv_head; h++) {
        const uint64_t k0 = pgd_attn_k_index(s, b, h, 0, j);
        const uint64_t v0 = ((b * s->n_kv_head + h) * BS + j) * D;
        const float *kh = k + (uint64_t)h * D, *vh = v + (uint64_t)h * D;
        if (s->dtype == PGD_KV_F16) {
            uint16_t kt[256], *kc = k_cache;
            for (uint32_t d0 = 0; d0 < D; d0 += 256) { /* K: to halves, then d-major */
                const uint32_t n = D - d0 < 256 ? D - d0 : 256;
                row(kh + d0, kt, n);
                for (uint32_t d = 0; d < n; d++) kc[k0 + (uint64_t)(d0 + d) * BS] = kt[d];
            }
            row(vh, (uint16_t *)v_cache + v0, D);
        } else {
            float *kc = k_cache;
            for (uint32_t d = 0; d < D; d++) kc[k0 + (uint64_t)d * BS] = kh[d];
            memcpy((float *)v_cache + v0, vh, D * sizeof(float));
        }
    }
}

/* ---- x86 SIMD paths ---------------------------------------------------------------------- */

typedef void (*attn_fn)(const pgd_attn_shape *, uint32_t, const float *, const void *, const void *,
                        const int32_t *, uint32_t, float *, float *);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/cpu/vec16_x86.h"

#define INL PGD__INL

/* AVX-512: a vector of 16 floats is one zmm. */
#define T      PGD__V5
#define FN(x)  a5_##x
#define ATT_GT 4 /* heads per register tile */
#define ATT_NB 2 /* blocks per pass-1 tile */
#define ATT_DV 4 /* 16-float slices of head_dim per pass-3 tile */
#include "kernels/cpu/attention_x86_dtypes.inc"
#undef T
#undef FN
#undef ATT_GT
#undef ATT_NB
#undef ATT_DV

/* AVX2: a vector of 16 floats is two ymm. */
#define T      PGD__V2
#define FN(x)  a2_##x
#define ATT_GT 2
#define ATT_NB 1
#define ATT_DV 2
#include "kernels/cpu/attention_x86_dtypes.inc"
#undef T
#undef FN
#undef ATT_GT
#undef ATT_NB
#undef ATT_DV

#define ROW_F16(P, TGT)                                                                            \
    TGT static void P##_row_f16(const float *x, uint16_t *y, uint32_t n) {                         \
        for (uint32_t i = 0; i < n; i += 16) P##_sth(y + i, P##_ld(x + i));                        \
    }
ROW_F16(a5, PGD__V5)
ROW_F16(a2, PGD__V2)
#undef ROW_F16

static attn_fn simd_path(pgd_cpu_isa isa, pgd_kv_dtype t) {
    const bool h = t == PGD_KV_F16;
    if (isa == PGD_ISA_AVX512) return h ? a5_attn_f16 : a5_attn_f32;
    if (isa == PGD_ISA_AVX2) return h ? a2_attn_f16 : a2_attn_f32;
    return NULL;
}

static row_f16_fn simd_row_f16(pgd_cpu_isa isa) {
    return isa == PGD_ISA_AVX512 ? a5_row_f16 : isa == PGD_ISA_AVX2 ? a2_row_f16 : NULL;
}
#else
static attn_fn simd_path(pgd_cpu_isa isa, pgd_kv_dtype t) {
    (void)isa;
    (void)t;
    return NULL;
}

static row_f16_fn simd_row_f16(pgd_cpu_isa isa) {
    (void)isa;
    return NULL;
}
#endif

static attn_fn path_for(pgd_cpu_isa isa, const pgd_attn_shape *s) {
    attn_fn f = NULL;
    if (s->block_size == 16 && s->head_dim % 16 == 0 && s->n_group <= ATT_MAX_GROUP)
        f = simd_path(isa, s->dtype);
    return f ? f : attn_scalar;
}

int pgd_attn_paged_isa(pgd_cpu_isa isa, const pgd_attn_shape *s, uint32_t kvh, const float *q,
                       const void *k_cache, const void *v_cache, const int32_t *block_table,
                       uint32_t n_ctx, float *scores, float *out) {
    int rc = pgd_cpu_isa_resolve(&isa, "attention");
    if (rc) return rc;
    path_for(isa, s)(s, kvh, q, k_cache, v_cache, block_table, n_ctx, scores, out);
    return 0;
}

void pgd_attn_paged(const pgd_attn_shape *s, uint32_t kvh, const float *q, const void *k_cache,
                    const void *v_cache, const int32_t *block_table, uint32_t n_ctx, float *scores,
                    float *out) {
    path_for(pgd_cpu_isa_best(), s)(s, kvh, q, k_cache, v_cache, block_table, n_ctx, scores, out);
}

static row_f16_fn row_for(pgd_cpu_isa isa, const pgd_attn_shape *s) {
    row_f16_fn f = s->head_dim % 16 == 0 ? simd_row_f16(isa) : NULL;
    return f ? f : row_f16_scalar;
}

int pgd_attn_store_isa(pgd_cpu_isa isa, const pgd_attn_shape *s, void *k_cache, void *v_cache,
                       uint64_t b, uint32_t j, const float *k, const float *v) {
    int rc = pgd_cpu_isa_resolve(&isa, "attention store");
    if (rc) return rc;
    store_with(s, k_cache, v_cache, b, j, k, v, row_for(isa, s));
    return 0;
}

void pgd_attn_store(const pgd_attn_shape *s, void *k_cache, void *v_cache, uint64_t b, uint32_t j,
                    const float *k, const float *v) {
    store_with(s, k_cache, v_cache, b, j, k, v, row_for(pgd_cpu_isa_best(), s));
}
