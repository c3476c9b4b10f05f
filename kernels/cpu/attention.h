/*
 * kernels/cpu/attention.h — causal attention of one query token over a paged f32 KV cache.
 *
 * Cache layout of one layer:
 *   K: [n_blocks][n_kv_head][head_dim][block_size]   (d-major inside a block)
 *   V: [n_blocks][n_kv_head][block_size][head_dim]
 * Position p of a sequence lives in block block_table[p / block_size] at offset
 * p % block_size. K is stored d-major so the scores of a block's positions accumulate as
 * independent lanes (s[j] += q[d] * K[d][j], d ascending): vector code, the same order for every
 * position, no reassociation — results are identical on every instruction set.
 *
 * One call handles the query heads of one kv head group (n_group = n_head / n_kv_head heads
 * that share kv head `kvh`), reading each K/V byte of that head once. Scores for positions
 * 0..n_ctx-1, then a softmax (max-subtracted, double sum) and the weighted V sum in position
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
 * k_cache: [n_blocks][n_kv_head][head_dim][block_size]
 * v_cache: [n_blocks][n_kv_head][block_size][head_dim]
 * block_table: [ceil(n_ctx / block_size)]
 * scores:  [n_group][n_ctx rounded up to block_size] scratch
 * out:     [n_group][head_dim]
 */
void pgd_attn_paged_f32(const pgd_attn_shape *s, uint32_t kvh, const float *q, const float *k_cache,
                        const float *v_cache, const int32_t *block_table, uint32_t n_ctx,
                        float *scores, float *out);

/* Index of element (d, offset j) of kv head h in block b of a K cache (floats). */
static inline uint64_t pgd_attn_k_index(const pgd_attn_shape *s, uint64_t b, uint32_t h, uint32_t d,
                                        uint32_t j) {
    return ((b * s->n_kv_head + h) * s->head_dim + d) * s->block_size + j;
}

#endif
