/*
 * kernels/cpu/attention.c — paged causal attention, f32. Plain loops written so the compiler
 * vectorizes them without reassociating any sum (built with -O3, one clone per ISA).
 */
#include "kernels/cpu/attention.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define PGD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PGD_CLONES
#endif

PGD_CLONES
void pgd_attn_paged_f32(const pgd_attn_shape *s, uint32_t kvh, const float *q, const float *k_cache,
                        const float *v_cache, const int32_t *block_table, uint32_t n_ctx,
                        float *scores, float *out) {
    const uint32_t D = s->head_dim, BS = s->block_size, G = s->n_group;
    const uint64_t head_stride = (uint64_t)BS * D; /* one kv head in a block (K or V) */
    const uint64_t block_stride = (uint64_t)s->n_kv_head * head_stride;
    const uint32_t n_pad = (n_ctx + BS - 1) / BS * BS; /* scores row stride */

    /* Pass 1: scores[g][p] = (sum_d q[g][d] * k[p][d]) * scale, d ascending per position. */
    for (uint32_t p0 = 0; p0 < n_ctx; p0 += BS) {
        const float *kt =
            k_cache + (uint64_t)block_table[p0 / BS] * block_stride + kvh * head_stride;
        for (uint32_t g = 0; g < G; g++) {
            float *restrict sc = scores + (uint64_t)g * n_pad + p0; /* [BS] */
            const float *qg = q + (uint64_t)g * D;
            for (uint32_t j = 0; j < BS; j++) sc[j] = 0.0f;
            for (uint32_t d = 0; d < D; d++) {
                const float qd = qg[d];
                const float *restrict kr = kt + (uint64_t)d * BS;
                for (uint32_t j = 0; j < BS; j++) sc[j] += qd * kr[j];
            }
            for (uint32_t j = 0; j < BS; j++) sc[j] *= s->scale;
        }
    }
    /* Pass 2: softmax per head over the n_ctx valid positions. */
    for (uint32_t g = 0; g < G; g++) {
        float *sc = scores + (uint64_t)g * n_pad;
        float mx = -INFINITY;
        for (uint32_t p = 0; p < n_ctx; p++) mx = sc[p] > mx ? sc[p] : mx;
        double sum = 0.0;
        for (uint32_t p = 0; p < n_ctx; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        const float inv = (float)(1.0 / sum);
        for (uint32_t p = 0; p < n_ctx; p++) sc[p] *= inv;
    }
    /* Pass 3: out[g] = sum_p w[g][p] * v_p, p ascending, each d its own lane. */
    memset(out, 0, (uint64_t)G * D * sizeof(float));
    for (uint32_t p0 = 0; p0 < n_ctx; p0 += BS) {
        const float *vb =
            v_cache + (uint64_t)block_table[p0 / BS] * block_stride + kvh * head_stride;
        const uint32_t n = n_ctx - p0 < BS ? n_ctx - p0 : BS;
        for (uint32_t g = 0; g < G; g++) {
            const float *w = scores + (uint64_t)g * n_pad + p0;
            float *restrict o = out + (uint64_t)g * D;
            for (uint32_t j = 0; j < n; j++) {
                const float wj = w[j];
                const float *restrict v = vb + (uint64_t)j * D;
                for (uint32_t d = 0; d < D; d++) o[d] += wj * v[d];
            }
        }
    }
}
