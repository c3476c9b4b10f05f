/*
 * kernels/cuda/attention_twin.c — the CPU twin of pgd_cuda_attention (attention.h): plain C
 * doing the kernel's arithmetic in the kernel's order (attention_math.h states it), so the two
 * agree bit for bit; tests/gpu/test_cuda_attention.c checks that, and
 * tests/unit/test_cuda_attention_twin.c checks the twin against the CPU's own paged attention
 * (kernels/cpu/attention.h: another KV layout, another summation order, so within a
 * tolerance).
 *
 * Every query head is computed on its own here (the kernel takes up to PGD_ATTN_HEAD_TILE heads
 * of a group together to read K and V once, which changes no head's arithmetic).
 *
 * pgd_cuda_attention_tc_twin does the tensor-core kernel's formulas (attention.h: the online
 * softmax over blocks of PGD_ATTN_TC_KEYS keys, in base 2) with its f16 roundings (the query
 * before the dot products, each weight before P V); its sums keep this file's order and 2^x is
 * the host's exp2f, so it agrees with pgd_cuda_attention_tc within f32 noise, not bit for bit;
 * pgd_cuda_attention_dec_twin the same for the decode kernel (its blocks' partials folded).
 *
 * Owns: nothing (stack scratch of one chunk). Threading: pure; any thread.
 */
#include "kernels/cuda/attention.h"

#include <math.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h" /* pgd_f16_to_f32, pgd_f32_to_bf16 */
#include "kernels/cuda/attention_math.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The tree of attention_math.h over x[PGD_ATTN_CHUNK] (destroyed); `max` picks the op. */
static float tree(float *x, int max) {
    for (uint32_t s = PGD_ATTN_TREE_RUN / 2; s > 0; s /= 2)
        for (uint32_t r = 0; r < PGD_ATTN_CHUNK; r += PGD_ATTN_TREE_RUN)
            for (uint32_t i = r; i < r + s; i++)
                x[i] = max ? pgd_attn_max(x[i], x[i + s]) : pgd_rn_add(x[i], x[i + s]);
    float y[PGD_ATTN_CHUNK / PGD_ATTN_TREE_RUN];
    const uint32_t n = PGD_ATTN_CHUNK / PGD_ATTN_TREE_RUN;
    for (uint32_t w = 0; w < n; w++) y[w] = x[w * PGD_ATTN_TREE_RUN];
    for (uint32_t s = n / 2; s > 0; s /= 2)
        for (uint32_t i = 0; i < s; i++)
            y[i] = max ? pgd_attn_max(y[i], y[i + s]) : pgd_rn_add(y[i], y[i + s]);
    return y[0];
}

/* x rounded to f16 and back (nearest even). */
static float f16_round(float x) {
    return pgd_f16_to_f32(pgd_f32_to_f16(x));
}

/* The tensor-core kernels' scores of keys k0 .. k0 + nb - 1 for the f16-rounded query q[D]:
 * x[j] = rn(dot * scale_log2), k_at[j] key j's K row; returns their max. */
static float tc_scores(const float *q, const uint16_t *kv, pgd_kv_geom g, uint32_t layer,
                       uint32_t kvh, const int32_t *bt, uint32_t k0, uint32_t nb, float scale_log2,
                       float *x, uint64_t *k_at) {
    float mx = -INFINITY;
    for (uint32_t j = 0; j < nb; j++) {
        const uint32_t p = k0 + j;
        k_at[j] = pgd_kv_index(g, (uint32_t)bt[p / g.block_size], layer, 0, kvh, p % g.block_size);
        float acc = 0.0f;
        for (uint32_t d = 0; d < g.head_dim; d++)
            acc = pgd_rn_fma(q[d], pgd_f16_to_f32(kv[k_at[j] + d]), acc);
        x[j] = pgd_rn_mul(acc, scale_log2);
        mx = x[j] > mx ? x[j] : mx;
    }
    return mx;
}

/* The tensor-core prefill kernel's formulas (attention.h) for one query head, its query
 * rounded to f16 (q[D]) and n_ctx >= 1: out[D] in bf16. */
static void head_tc(const float *q, const uint16_t *kv, pgd_kv_geom g, uint32_t layer, uint32_t kvh,
                    const int32_t *bt, uint32_t n_ctx, float scale, uint16_t *out /* [D] */) {
    const uint32_t D = g.head_dim;
    float o[PGD_ATTN_MAX_HEAD_DIM] = {0}, x[PGD_ATTN_TC_KEYS];
    uint64_t k_at[PGD_ATTN_TC_KEYS];
    const uint64_t v_off = (uint64_t)g.n_kv_head * g.block_size * D;
    const float scale_log2 = pgd_rn_mul(scale, 1.44269504088896340736f);
    float m = -INFINITY, l = 0.0f;
    for (uint32_t k0 = 0; k0 < n_ctx; k0 += PGD_ATTN_TC_KEYS) {
        const uint32_t nb = n_ctx - k0 < PGD_ATTN_TC_KEYS ? n_ctx - k0 : PGD_ATTN_TC_KEYS;
        const float mx = tc_scores(q, kv, g, layer, kvh, bt, k0, nb, scale_log2, x, k_at);
        const float mn = mx > m ? mx : m;
        const float alpha = mn == m ? 1.0f : exp2f(pgd_rn_sub(m, mn));
        float sum = 0.0f;
        for (uint32_t j = 0; j < nb; j++) {
            x[j] = exp2f(pgd_rn_sub(x[j], mn));
            sum = pgd_rn_add(sum, x[j]);
        }
        l = pgd_rn_add(pgd_rn_mul(l, alpha), sum);
        m = mn;
        for (uint32_t d = 0; d < D; d++) {
            float acc = pgd_rn_mul(o[d], alpha);
            for (uint32_t j = 0; j < nb; j++)
                acc = pgd_rn_fma(f16_round(x[j]), pgd_f16_to_f32(kv[k_at[j] + v_off + d]), acc);
            o[d] = acc;
        }
    }
    const float inv = pgd_rn_div(1.0f, l);
    for (uint32_t d = 0; d < D; d++) out[d] = pgd_f32_to_bf16(pgd_rn_mul(o[d], inv));
}

/* The fold of the decode kernel (attention.h): (m, l, o[D]) <- with (mb, lb, ob[D]). */
static void dec_fold(float *m, float *l, float *o, float mb, float lb, const float *ob,
                     uint32_t D) {
    const float M = mb > *m ? mb : *m;
    const float a = exp2f(pgd_rn_sub(*m, M)), b = exp2f(pgd_rn_sub(mb, M));
    *l = pgd_rn_add(pgd_rn_mul(*l, a), pgd_rn_mul(lb, b));
    for (uint32_t d = 0; d < D; d++) o[d] = pgd_rn_add(pgd_rn_mul(o[d], a), pgd_rn_mul(ob[d], b));
    *m = M;
}

/* The decode kernel's formulas (attention.h) for one query head, as head_tc's arguments. */
static void head_dec(const float *q, const uint16_t *kv, pgd_kv_geom g, uint32_t layer,
                     uint32_t kvh, const int32_t *bt, uint32_t n_ctx, float scale,
                     uint16_t *out /* [D] */) {
    const uint32_t D = g.head_dim;
    float x[PGD_ATTN_TC_KEYS];
    float o[PGD_ATTN_MAX_HEAD_DIM], co[PGD_ATTN_MAX_HEAD_DIM], bo[PGD_ATTN_MAX_HEAD_DIM];
    uint64_t k_at[PGD_ATTN_TC_KEYS];
    const uint64_t v_off = (uint64_t)g.n_kv_head * g.block_size * D;
    const float scale_log2 = pgd_rn_mul(scale, 1.44269504088896340736f);
    float m = 0.0f, l = 0.0f;
    for (uint32_t c0 = 0; c0 < n_ctx; c0 += PGD_ATTN_CHUNK) {
        float cm = 0.0f, cl = 0.0f;
        for (uint32_t k0 = c0; k0 < n_ctx && k0 < c0 + PGD_ATTN_CHUNK; k0 += PGD_ATTN_TC_KEYS) {
            const uint32_t nb = n_ctx - k0 < PGD_ATTN_TC_KEYS ? n_ctx - k0 : PGD_ATTN_TC_KEYS;
            const float bm = tc_scores(q, kv, g, layer, kvh, bt, k0, nb, scale_log2, x, k_at);
            float bl = 0.0f;
            for (uint32_t j = 0; j < nb; j++) {
                x[j] = exp2f(pgd_rn_sub(x[j], bm));
                bl = pgd_rn_add(bl, x[j]);
            }
            for (uint32_t d = 0; d < D; d++) {
                float acc = 0.0f;
                for (uint32_t j = 0; j < nb; j++)
                    acc = pgd_rn_fma(f16_round(x[j]), pgd_f16_to_f32(kv[k_at[j] + v_off + d]), acc);
                bo[d] = acc;
            }
            if (k0 == c0) {
                cm = bm, cl = bl;
                memcpy(co, bo, D * sizeof *co);
            } else {
                dec_fold(&cm, &cl, co, bm, bl, bo, D);
            }
        }
        if (c0 == 0) {
            m = cm, l = cl;
            memcpy(o, co, D * sizeof *o);
        } else {
            dec_fold(&m, &l, o, cm, cl, co, D);
        }
    }
    for (uint32_t d = 0; d < D; d++) out[d] = pgd_f32_to_bf16(pgd_rn_div(o[d], l));
}

/* One query head over its positions 0..n_ctx-1: out[D] in bf16. k_at(p) is the element index
 * of position p's K row for this head; its V row is V_off further. tc: 0 this file's exact
 * arithmetic, 1 the tensor-core prefill kernel's (head_tc), 2 the decode kernel's (head_dec). */
static void head(const float *q /* [D] */, const uint16_t *kv, pgd_kv_geom g, uint32_t layer,
                 uint32_t kvh, const int32_t *bt /* the sequence's row */, uint32_t n_ctx,
                 float scale, int tc, uint16_t *out /* [D] */) {
    const uint32_t D = g.head_dim;
    if (tc && n_ctx) {
        float q16[PGD_ATTN_MAX_HEAD_DIM];
        for (uint32_t d = 0; d < D; d++) q16[d] = f16_round(pgd_attn_f16_clamp(q[d]));
        (tc == 1 ? head_tc : head_dec)(q16, kv, g, layer, kvh, bt, n_ctx, scale, out);
        return;
    }
    if (n_ctx == 0) { /* a padding row */
        memset(out, 0, D * sizeof *out);
        return;
    }
    const uint64_t v_off = (uint64_t)g.n_kv_head * g.block_size * D;
    float x[PGD_ATTN_CHUNK], w[PGD_ATTN_CHUNK], o[PGD_ATTN_MAX_HEAD_DIM];
    uint64_t k_at[PGD_ATTN_CHUNK];
    float m = 0.0f, s = 0.0f;
    for (uint32_t c0 = 0; c0 < n_ctx; c0 += PGD_ATTN_CHUNK) {
        const uint32_t nc = n_ctx - c0 < PGD_ATTN_CHUNK ? n_ctx - c0 : PGD_ATTN_CHUNK;
        for (uint32_t j = 0; j < PGD_ATTN_CHUNK; j++) {
            x[j] = -INFINITY;
            if (j >= nc) continue;
            const uint32_t p = c0 + j;
            k_at[j] =
                pgd_kv_index(g, (uint32_t)bt[p / g.block_size], layer, 0, kvh, p % g.block_size);
            float acc = 0.0f;
            for (uint32_t d = 0; d < D; d++)
                acc = pgd_rn_fma(q[d], pgd_f16_to_f32(kv[k_at[j] + d]), acc);
            x[j] = pgd_rn_mul(acc, scale);
        }
        for (uint32_t j = 0; j < PGD_ATTN_CHUNK; j++) w[j] = x[j];
        const float mc = tree(w, 1);
        for (uint32_t j = 0; j < PGD_ATTN_CHUNK; j++)
            x[j] = w[j] = j < nc ? pgd_attn_exp(pgd_rn_sub(x[j], mc)) : 0.0f;
        const float sc = tree(x, 0);
        float a = 1.0f, b = 1.0f;
        if (c0 == 0) {
            m = mc;
            s = sc;
        } else {
            m = pgd_attn_fold_coef(m, mc, &a, &b);
            s = pgd_attn_fold(s, a, sc, b);
        }
        for (uint32_t d = 0; d < D; d++) {
            float acc = 0.0f;
            for (uint32_t j = 0; j < nc; j++)
                acc = pgd_rn_fma(w[j], pgd_f16_to_f32(kv[k_at[j] + v_off + d]), acc);
            o[d] = c0 == 0 ? acc : pgd_attn_fold(o[d], a, acc, b);
        }
    }
    for (uint32_t d = 0; d < D; d++) out[d] = pgd_f32_to_bf16(pgd_rn_div(o[d], s));
}

static void twin(const float *q, uint32_t q_stride, const uint16_t *kv, pgd_kv_geom geom,
                 uint32_t layer, uint32_t n_head, const int32_t *block_tables, uint32_t bt_stride,
                 const uint32_t *seq_of, const int32_t *pos, uint32_t T, float scale, int tc,
                 uint16_t *out) {
    const uint32_t D = geom.head_dim;
    PGD_ASSERT(geom.n_kv_head > 0 && n_head % geom.n_kv_head == 0);
    PGD_ASSERT(D > 0 && D % 8 == 0 && D <= PGD_ATTN_MAX_HEAD_DIM && layer < geom.n_layer);
    const uint32_t group = n_head / geom.n_kv_head;
    for (uint32_t t = 0; t < T; t++) {
        const uint32_t n_ctx = pos[t] < 0 ? 0 : (uint32_t)pos[t] + 1;
        const int32_t *bt = block_tables + (uint64_t)seq_of[t] * bt_stride;
        for (uint32_t h = 0; h < n_head; h++)
            head(q + (uint64_t)t * q_stride + (uint64_t)h * D, kv, geom, layer, h / group, bt,
                 n_ctx, scale, tc, out + ((uint64_t)t * n_head + h) * D);
    }
}

void pgd_cuda_attention_twin(const float *q, uint32_t q_stride, const uint16_t *kv,
                             pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                             const int32_t *block_tables, uint32_t bt_stride,
                             const uint32_t *seq_of, const int32_t *pos, uint32_t T, float scale,
                             uint16_t *out) {
    twin(q, q_stride, kv, geom, layer, n_head, block_tables, bt_stride, seq_of, pos, T, scale, 0,
         out);
}

void pgd_cuda_attention_tc_twin(const float *q, uint32_t q_stride, const uint16_t *kv,
                                pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                const int32_t *block_tables, uint32_t bt_stride,
                                const uint32_t *seq_of, const int32_t *pos, uint32_t T, float scale,
                                uint16_t *out) {
    twin(q, q_stride, kv, geom, layer, n_head, block_tables, bt_stride, seq_of, pos, T, scale, 1,
         out);
}

void pgd_cuda_attention_dec_twin(const float *q, uint32_t q_stride, const uint16_t *kv,
                                 pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                 const int32_t *block_tables, uint32_t bt_stride,
                                 const uint32_t *seq_of, const int32_t *pos, uint32_t T,
                                 float scale, uint16_t *out) {
    twin(q, q_stride, kv, geom, layer, n_head, block_tables, bt_stride, seq_of, pos, T, scale, 2,
         out);
}
