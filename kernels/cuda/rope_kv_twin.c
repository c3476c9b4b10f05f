/*
 * kernels/cuda/rope_kv_twin.c — CPU twin of pgd_cuda_rope_kv (rope_kv.cu). The rotation is the
 * CPU's own pgd_rope_apply (kernels/cpu/rope.c), called on one (a, b) pair at a time so that k
 * can be rotated without touching qkv or needing scratch; the f16 rounding is pgd_f32_to_f16;
 * the slot arithmetic is kv_layout.h's. Same bits as the kernel (NaN payloads aside). Plain C.
 */
#include "kernels/cuda/rope_kv.h"

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"

/* qkv: f32 [T][(n_head + 2 * n_kv_head) * D]; bias: f32 [(n_head + 2 * n_kv_head) * D] or NULL;
 * cos_sin: f32 [n_pos][rope_dim]; pos, slots: [T]; kv: the f16 slab (kv_layout.h). */
void pgd_cuda_rope_kv_twin(float *qkv, const float *bias, const float *cos_sin, const int32_t *pos,
                           const int64_t *slots, uint32_t T, uint32_t n_head, uint32_t n_kv_head,
                           uint32_t head_dim, uint32_t rope_dim, bool neox, uint16_t *kv,
                           pgd_kv_geom geom, uint32_t layer) {
    const uint32_t D = head_dim, half = rope_dim / 2, n_qk = n_head + n_kv_head;
    PGD_ASSERT(rope_dim <= D && rope_dim % 2 == 0 && geom.head_dim == D &&
               geom.n_kv_head == n_kv_head && geom.block_size > 0 && layer < geom.n_layer);
    const uint64_t width = (uint64_t)(n_qk + n_kv_head) * D;
    for (uint32_t t = 0; t < T; t++) {
        if (pos[t] < 0) continue; /* padding row */
        float *row = qkv + t * width;
        const float *cs = cos_sin + (uint64_t)pos[t] * rope_dim;
        const int64_t slot = slots[t];
        for (uint32_t h = 0; h < n_qk; h++) {
            const bool is_q = h < n_head;
            uint16_t *k = NULL;
            if (!is_q && slot >= 0) k = kv + pgd_kv_slot_index(geom, slot, layer, 0, h - n_head);
            float *x = row + (uint64_t)h * D;
            const float *b = bias ? bias + (uint64_t)h * D : NULL;
            for (uint32_t i = 0; i < half; i++) {
                uint32_t i0, i1;
                pgd_rope_pair(i, half, neox, &i0, &i1);
                float p[2] = {x[i0], x[i1]};
                if (b) p[0] += b[i0], p[1] += b[i1];
                pgd_rope_apply(p, cs + 2 * i, 1, 2, 2, false); /* the pair, with (cos, sin) i */
                if (is_q) {
                    x[i0] = p[0];
                    x[i1] = p[1];
                } else if (k) {
                    k[i0] = pgd_f32_to_f16(p[0]);
                    k[i1] = pgd_f32_to_f16(p[1]);
                }
            }
            for (uint32_t d = rope_dim; d < D; d++) {
                const float v = b ? x[d] + b[d] : x[d];
                if (is_q)
                    x[d] = v;
                else if (k)
                    k[d] = pgd_f32_to_f16(v);
            }
        }
        if (slot < 0) continue;
        for (uint32_t h = 0; h < n_kv_head; h++) {
            const float *x = row + (uint64_t)(n_qk + h) * D;
            const float *b = bias ? bias + (uint64_t)(n_qk + h) * D : NULL;
            uint16_t *v = kv + pgd_kv_slot_index(geom, slot, layer, 1, h);
            for (uint32_t d = 0; d < D; d++) v[d] = pgd_f32_to_f16(b ? x[d] + b[d] : x[d]);
        }
    }
}
