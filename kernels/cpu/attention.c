/*
 * kernels/cpu/attention.c — paged causal attention, f32 (scalar loops the compiler vectorizes).
 */
#include "kernels/cpu/attention.h"

#include <math.h>
#include <string.h>

static float dot(const float *a, const float *b, uint32_t n) {
    /* Four independent partial sums in a fixed pattern, combined in a fixed order. */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void pgd_attn_paged_f32(const pgd_attn_shape *s, uint32_t kvh, const float *q, const float *k_cache,
                        const float *v_cache, const int32_t *block_table, uint32_t n_ctx,
                        float *scores, float *out) {
    const uint32_t D = s->head_dim, BS = s->block_size, G = s->n_group;
    const uint64_t head_stride = (uint64_t)BS * D; /* one kv head in a block */
    const uint64_t block_stride = (uint64_t)s->n_kv_head * head_stride;

    /* Pass 1: scores[g][p] = q_g . k_p * scale, block by block. */
    for (uint32_t p0 = 0; p0 < n_ctx; p0 += BS) {
        const float *kb =
            k_cache + (uint64_t)block_table[p0 / BS] * block_stride + kvh * head_stride;
        uint32_t n = n_ctx - p0 < BS ? n_ctx - p0 : BS;
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t g = 0; g < G; g++)
                scores[(uint64_t)g * n_ctx + p0 + j] =
                    dot(q + (uint64_t)g * D, kb + (uint64_t)j * D, D) * s->scale;
    }
    /* Pass 2: softmax per head (max-subtracted, double sum). */
    for (uint32_t g = 0; g < G; g++) {
        float *sc = scores + (uint64_t)g * n_ctx;
        float mx = -INFINITY;
        for (uint32_t p = 0; p < n_ctx; p++) mx = sc[p] > mx ? sc[p] : mx;
        double sum = 0.0;
        for (uint32_t p = 0; p < n_ctx; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        float inv = (float)(1.0 / sum);
        for (uint32_t p = 0; p < n_ctx; p++) sc[p] *= inv;
    }
    /* Pass 3: out[g] = sum_p w[g][p] * v_p. */
    memset(out, 0, (uint64_t)G * D * sizeof(float));
    for (uint32_t p0 = 0; p0 < n_ctx; p0 += BS) {
        const float *vb =
            v_cache + (uint64_t)block_table[p0 / BS] * block_stride + kvh * head_stride;
        uint32_t n = n_ctx - p0 < BS ? n_ctx - p0 : BS;
        for (uint32_t j = 0; j < n; j++) {
            const float *v = vb + (uint64_t)j * D;
            for (uint32_t g = 0; g < G; g++) {
                float w = scores[(uint64_t)g * n_ctx + p0 + j];
                float *o = out + (uint64_t)g * D;
                for (uint32_t d = 0; d < D; d++) o[d] += w * v[d];
            }
        }
    }
}
