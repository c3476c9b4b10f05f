/*
 * kernels/cpu/attention.h — causal attention of one query token over a paged KV cache of f32
 * or IEEE f16 elements, and the store of a token's K and V into it.
 *
 * Cache layout of one layer (elements of the cache's dtype):
 *   K: [n_blocks][n_kv_head][head_dim][block_size]   (d-major inside a block)
 *   V: [n_blocks][n_kv_head][block_size][head_dim]
 * Position p of a sequence lives in block block_table[p / block_size] at offset
 * p % block_size. K is stored d-major so the scores of a block's positions accumulate as
 * independent lanes (s[j] += q[d] * K[d][j], d ascending): vector code, the same order for every
 * position, no reassociation — results are identical on every instruction set.
 * An f16 cache holds each value rounded to nearest even (pgd_f32_to_f16) and is read back
 * exactly, so attention over it gives the bits of the f32 path over the rounded values.
 *
 * One call handles the query heads of one kv head group (n_group = n_head / n_kv_head heads
 * that share kv head `kvh`). THE ORDER (every path follows it, so the SIMD paths give the
 * scalar reference's bits and a result depends only on the query and the cache, never on the
 * batch or the instruction set):
 *   scores  s_p = (a0 + a1) * scale, a0 = fmaf chain over even d ascending from +0, a1 the
 *           same over odd d (two chains per position: twice the parallelism of one)
 *   softmax mx = max_p s_p; e_p = pgd__expf(s_p - mx) (kernels/cpu/vexp.h); the sum in 16
 *           double lanes S[p % 16] += e_p, p ascending, then h_i = S[i] + S[i + 8] and
 *           ((h0 + h4) + (h2 + h6)) + ((h1 + h5) + (h3 + h7)); inv = (float)(1 / sum)
 *   output  o_d = fmaf chain over p ascending of e_p * v_p[d] from +0; out_d = o_d * inv
 * The SIMD paths need block_size 16 and head_dim % 16 == 0 (others run the scalar path).
 * Threading: pure; any thread.
 */
#ifndef PGD_KERNELS_CPU_ATTENTION_H
#define PGD_KERNELS_CPU_ATTENTION_H

#include "common/kv_dtype.h"
#include "kernels/cpu/isa.h"

#include <stdint.h>

typedef struct pgd_attn_shape {
    uint32_t n_kv_head, n_group, head_dim, block_size;
    float scale;        /* usually 1/sqrt(head_dim) */
    pgd_kv_dtype dtype; /* of k_cache and v_cache */
} pgd_attn_shape;

/*
 * q:       [n_group][head_dim]   queries of heads kvh*n_group .. (kvh+1)*n_group-1
 * k_cache: [n_blocks][n_kv_head][head_dim][block_size]   (s->dtype elements)
 * v_cache: [n_blocks][n_kv_head][block_size][head_dim]
 * block_table: [ceil(n_ctx / block_size)]
 * scores:  [n_group][n_ctx rounded up to block_size] scratch
 * out:     [n_group][head_dim]
 */
void pgd_attn_paged(const pgd_attn_shape *s, uint32_t kvh, const float *q, const void *k_cache,
                    const void *v_cache, const int32_t *block_table, uint32_t n_ctx, float *scores,
                    float *out);

/* The same on a given instruction-set path (tests); PGD_EINVAL when this CPU or build cannot
 * run it. Paths give identical bits. */
int pgd_attn_paged_isa(pgd_cpu_isa isa, const pgd_attn_shape *s, uint32_t kvh, const float *q,
                       const void *k_cache, const void *v_cache, const int32_t *block_table,
                       uint32_t n_ctx, float *scores, float *out);

/* Store one token's keys and values (k, v: [n_kv_head][head_dim] f32) at offset j of block b,
 * converted to s->dtype (f16: round to nearest even, the bits of pgd_f32_to_f16 on every
 * path). */
void pgd_attn_store(const pgd_attn_shape *s, void *k_cache, void *v_cache, uint64_t b, uint32_t j,
                    const float *k, const float *v);
int pgd_attn_store_isa(pgd_cpu_isa isa, const pgd_attn_shape *s, void *k_cache, void *v_cache,
                       uint64_t b, uint32_t j, const float *k, const float *v);

/* Index of element (d, offset j) of kv head h in block b of a K cache (elements). */
static inline uint64_t pgd_attn_k_index(const pgd_attn_shape *s, uint64_t b, uint32_t h, uint32_t d,
                                        uint32_t j) {
    return ((b * s->n_kv_head + h) * s->head_dim + d) * s->block_size + j;
}

#endif
