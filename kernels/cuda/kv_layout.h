/*
 * kernels/cuda/kv_layout.h — where a token's K and V live in the CUDA backend's KV memory, for
 * the kernels, their CPU twins and the host (plain C, also compiled __host__ __device__).
 *
 * One slab of f16 elements [n_blocks][n_layer][2][n_kv_head][block_size][head_dim]: a block's
 * copy-on-write is one contiguous copy of pgd_kv_block_elems elements, and each (block, layer,
 * K or V, head) page is contiguous along head_dim for wide loads. Block 0 is the null block.
 *
 * Threading: pure functions.
 */
#ifndef PGD_KERNELS_CUDA_KV_LAYOUT_H
#define PGD_KERNELS_CUDA_KV_LAYOUT_H

#include <stdint.h>

#include "common/counter_hash.h" /* PGD_HD */

typedef struct pgd_kv_geom {
    uint32_t n_layer, n_kv_head, block_size, head_dim;
} pgd_kv_geom;

/* Elements of one block: every layer's K and V. */
static inline PGD_HD uint64_t pgd_kv_block_elems(pgd_kv_geom g) {
    return (uint64_t)g.n_layer * 2 * g.n_kv_head * g.block_size * g.head_dim;
}

/* Index of element 0 of (block, layer, kv: 0 = K / 1 = V, head, offset within the block). */
static inline PGD_HD uint64_t pgd_kv_index(pgd_kv_geom g, uint32_t block, uint32_t layer,
                                           uint32_t kv, uint32_t head, uint32_t off) {
    return ((((uint64_t)block * g.n_layer + layer) * 2 + kv) * g.n_kv_head + head) * g.block_size *
               g.head_dim +
           (uint64_t)off * g.head_dim;
}

/* The same for a KV slot (block * block_size + offset) and a position's slot through a block
 * table row. */
static inline PGD_HD uint64_t pgd_kv_slot_index(pgd_kv_geom g, int64_t slot, uint32_t layer,
                                                uint32_t kv, uint32_t head) {
    return pgd_kv_index(g, (uint32_t)(slot / g.block_size), layer, kv, head,
                        (uint32_t)(slot % g.block_size));
}

#endif
