/*
 * kernels/cuda/rope_kv.h — bias, RoPE and the KV write of one layer, fused. CPU twin:
 * pgd_cuda_rope_kv_twin (rope_kv_twin.c). Device pointers; asynchronous.
 */
#ifndef PGD_KERNELS_CUDA_ROPE_KV_H
#define PGD_KERNELS_CUDA_ROPE_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/cuda/kv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each token t < T, qkv[t] = [q: n_head*D | k: n_kv_head*D | v: n_kv_head*D] (f32, the
 * fused QKV GEMM's row): add bias (same layout; may be NULL), rotate q and k by the cos/sin row
 * of position pos[t] (cos_sin: f32 [n_pos][rope_dim], pairs (cos, sin) as pgd_rope_cos_sin
 * writes them) over the first rope_dim dimensions of each head — adjacent pairs, or halves when
 * neox — with pgd_rope_apply's arithmetic (a*c - b*s, a*s + b*c, every product rounded), write
 * q back in place and k, v as f16 (nearest even) into the slab at slot slots[t] of `layer`.
 * A row with slots[t] < 0 writes no KV; a padding row (pos[t] < 0, as attention.h defines it)
 * is left as it is and writes nothing (its position would index outside cos_sin). */
int pgd_cuda_rope_kv(float *qkv, const float *bias, const float *cos_sin, const int32_t *pos,
                     const int64_t *slots, uint32_t T, uint32_t n_head, uint32_t n_kv_head,
                     uint32_t head_dim, uint32_t rope_dim, bool neox, uint16_t *kv,
                     pgd_kv_geom geom, uint32_t layer, void *stream);
void pgd_cuda_rope_kv_twin(float *qkv, const float *bias, const float *cos_sin, const int32_t *pos,
                           const int64_t *slots, uint32_t T, uint32_t n_head, uint32_t n_kv_head,
                           uint32_t head_dim, uint32_t rope_dim, bool neox, uint16_t *kv,
                           pgd_kv_geom geom, uint32_t layer);

#ifdef __cplusplus
}
#endif

#endif
