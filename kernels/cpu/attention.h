/*
 * kernels/cpu/attention.h — causal attention of one query token over a paged f32 KV cache.
 *
 * Cache layout of one layer (K and V alike):
 *   cache[n_blocks][n_kv_head][block_size][head_dim] f32
 * so one kv head's keys within a block are contiguous. Position p of a sequence lives in
 * block block_table[p / block_size] at offset p % block_size.
 *
 * One call handles the query heads of one kv head group (n_group = n_head / n_kv_head heads
 * that share kv head `kvh`), reading each K/V byte of that head once. Scores are computed for
 * positions 0..n_ctx-1 in order, then a two-pass softmax and the weighted V sum, all in a fixed
 * order: the result depends only on the query and the cache, never on the batch.
 */
#ifndef PGD_KERNELS_CPU_ATTENTION_H
#define PGD_KERNELS_CPU_ATTENTION_H

#include <stdint.h>

typedef struct pgd_attn_shape {
    uint32_t n_kv_head, n_group, head_dim, block_size;
    float scale; /* usually 1/sqrt(head_dim) */
} pgd_attn_shape;

/*
 * q:       [n_group][head_dim]   queries of heads kvh*n_group .. (kvh+1)*n_group-1
 * k_cache: [n_blocks][n_kv_head][block_size][head_dim]
 * v_cache: same layout
 * block_table: [ceil(n_ctx / block_size)]
 * scores:  [n_group][n_ctx] scratch
 * out:     [n_group][head_dim]
 */
void pgd_attn_paged_f32(const pgd_attn_shape *s, uint32_t kvh, const float *q, const float *k_cache,
                        const float *v_cache, const int32_t *block_table, uint32_t n_ctx,
                        float *scores, float *out);

#endif
