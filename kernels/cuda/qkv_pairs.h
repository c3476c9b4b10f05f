/*
 * kernels/cuda/qkv_pairs.h — the QKV row's columns in pairs, as the one-row QKV GEMV that ends in
 * bias, RoPE and the KV write takes them (gemv.h: pgd_cuda_gemv_qkv_rope, a warp per pair), so
 * that one thread holds both values of every rotation. The row is [q: n_head | k: n_kv_head |
 * v: n_kv_head] heads of head_dim D; pair u belongs to head h = u / (D / 2), and its index i =
 * u % (D / 2) names:
 *   - for a q or k head and i < rope_dim / 2, rotation pair i: dimensions (2i, 2i + 1), or
 *     (i, i + rope_dim / 2) when neox — rope_kv.h's pairs, rotated by cos/sin entry i;
 *   - for a q or k head past that, two neighbouring unrotated dimensions past rope_dim;
 *   - for a v head, dimensions (2i, 2i + 1).
 * Every column of the row is in exactly one pair (tests/unit/test_cuda_qkv_pairs.c). Host and
 * device (PGD_HD); pure functions.
 */
#ifndef PGD_KERNELS_CUDA_QKV_PAIRS_H
#define PGD_KERNELS_CUDA_QKV_PAIRS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/counter_hash.h" /* PGD_HD */
#include "kernels/cpu/rope.h"    /* pgd_rope_pair */

typedef struct pgd_qkv_pair {
    uint32_t c0, c1; /* the columns of the QKV row */
    uint32_t h;      /* the head (q heads, then k heads, then v heads) */
    uint32_t d0, d1; /* the dimensions within it */
    uint32_t i;      /* the rotation's cos/sin entry (rotated pairs) */
    bool rot;        /* a RoPE pair */
} pgd_qkv_pair;

/* The pairs of a QKV row. */
static inline PGD_HD uint32_t pgd_qkv_pairs(uint32_t n_head, uint32_t n_kv_head, uint32_t D) {
    return (n_head + 2 * n_kv_head) * (D / 2);
}

/* Pair u (< pgd_qkv_pairs) for heads of D dimensions (even), the first rope_dim (even, <= D)
 * rotated. */
static inline PGD_HD pgd_qkv_pair pgd_qkv_pair_at(uint32_t n_head, uint32_t n_kv_head, uint32_t D,
                                                  uint32_t rope_dim, bool neox, uint32_t u) {
    const uint32_t half = rope_dim / 2, n_qk = n_head + n_kv_head;
    pgd_qkv_pair p;
    p.h = u / (D / 2);
    p.i = u % (D / 2);
    p.rot = p.h < n_qk && p.i < half;
    if (p.rot) {
        pgd_rope_pair(p.i, half, neox, &p.d0, &p.d1);
    } else {
        p.d0 = p.h < n_qk ? rope_dim + 2 * (p.i - half) : 2 * p.i;
        p.d1 = p.d0 + 1;
    }
    p.c0 = p.h * D + p.d0;
    p.c1 = p.h * D + p.d1;
    return p;
}

#endif
