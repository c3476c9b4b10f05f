/*
 * kernels/cuda/attention.h — paged attention for a mixed batch (prefill chunks and decode rows
 * together). CPU twin: pgd_cuda_attention_twin (attention_twin.c). Device pointers;
 * asynchronous.
 *
 * Determinism: the key positions of a query are taken in fixed chunks of PGD_ATTN_CHUNK; each
 * chunk gives its own (max, sum of exp, exp-weighted sum of V) in f32, and the chunks fold in
 * increasing order by one formula. A row's result therefore depends only on its own query and
 * context, never on the batch, the number of rows or how the work is split. The kernel and the
 * twin share that arithmetic (attention_math.h, the exponential included) and agree bit for bit.
 */
#ifndef PGD_KERNELS_CUDA_ATTENTION_H
#define PGD_KERNELS_CUDA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/kv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_ATTN_CHUNK 256

/* For each token t < T (of sequence seq_of[t], at position pos[t]) and query head h < n_head:
 * out[t][h][:] = bf16(sum_p softmax_p(scale * q[t][h] . K_p) V_p) over positions p in
 * [0, pos[t]] of its sequence, K_p and V_p (f16) read from `layer` of the slab at position p's
 * slot: block block_tables[seq_of[t] * bt_stride + p / block_size], offset p % block_size. Query
 * head h reads KV head h / (n_head / n_kv_head). q: f32, row t at q + t * q_stride, head h at
 * + h * head_dim; out: bf16 [T][n_head][head_dim]. A token with pos[t] < 0 (a padding row)
 * attends to nothing and gets zeros. head_dim: a multiple of 8, at most 256; kv 16-byte aligned.
 * 0, PGD_EINVAL (shapes) or PGD_ECUDA. */
int pgd_cuda_attention(const float *q, uint32_t q_stride, const uint16_t *kv, pgd_kv_geom geom,
                       uint32_t layer, uint32_t n_head, const int32_t *block_tables,
                       uint32_t bt_stride, const uint32_t *seq_of, const int32_t *pos, uint32_t T,
                       float scale, uint16_t *out, void *stream);
/* The bytes of scratch pgd_cuda_attention_split needs for T rows of n_head heads of head_dim
 * whose positions stay below max_ctx. */
size_t pgd_cuda_attention_split_bytes(uint32_t T, uint32_t n_head, uint32_t head_dim,
                                      uint32_t max_ctx);

/* pgd_cuda_attention, bit for bit, over the rows rows[0 .. n) (NULL: the rows 0 .. n - 1), with
 * each row's chunks spread over n_split CTAs per (row,
 * KV head, head tile) — chunk c to CTA c % n_split — for launches of few rows over long
 * contexts, where one CTA per (row, KV head) leaves most of the GPU idle (decode). The chunk
 * partials go to scratch (f32 [T][n_head][ceil(max_ctx / PGD_ATTN_CHUNK)][2 + head_dim], of
 * pgd_cuda_attention_split_bytes), then the row's last CTA to finish folds each (row, head)'s
 * partials in chunk order. Every pos[t] must be below max_ctx (a row beyond gets NaN). n_split <=
 * 1: the one-kernel path (no scratch used). The scratch holds n rows (the list's order); rows not
 * in the list are left alone. `arrived`: pgd_cuda_attention_split_counters(n, n_head) counters,
 * zero before the first launch (cudaMemset); every launch that completes leaves them zero
 * (the last CTA of a row merges its partials and resets its counter). 0, PGD_EINVAL or
 * PGD_ECUDA. */
int pgd_cuda_attention_split(const float *q, uint32_t q_stride, const uint16_t *kv,
                             pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                             const int32_t *block_tables, uint32_t bt_stride,
                             const uint32_t *seq_of, const int32_t *pos, const uint32_t *rows,
                             uint32_t n, float scale, uint32_t n_split, uint32_t max_ctx,
                             float *scratch, uint32_t *arrived, uint16_t *out, void *stream);
/* The uint32 counters pgd_cuda_attention_split needs for n rows of n_head heads. */
size_t pgd_cuda_attention_split_counters(uint32_t n, uint32_t n_head);

/* ---- tensor-core attention for query tiles (attention_tc.cu) ----
 * A tile is rows t0 .. t0 + n - 1 of the batch: consecutive query tokens of one sequence at
 * ascending consecutive positions (a prefill chunk, or part of one). One CTA per (tile, KV
 * head) computes all n x group (row, query head) pairs of the tile together, so each K and V
 * row is read once for them, and the dot products and the exp-weighted sums run on tensor
 * cores (f16 in, f32 accumulation).
 *
 * Arithmetic (FlashAttention-2's online softmax, in base 2): the query rounded to f16 (clamped
 * to f16's range first: pgd_attn_f16_clamp); the keys taken in blocks of PGD_ATTN_TC_KEYS at
 * absolute positions, in increasing order; per block, x_j = rn(acc_j * rn(scale * log2 e))
 * with acc_j the dot product of the f16 query and key j (an f32 sum on the tensor cores), -inf
 * past the row's position; m' = max(m, max_j x_j) (m = -inf before the first block);
 * alpha = 2^(m - m') (1 when m' = m); p_j = 2^(x_j - m') (0 for -inf); l <- l * alpha + sum_j
 * p_j; o[d] <- o[d] * alpha + sum_j f16(p_j) V_j[d]; m <- m'. Then out[d] = bf16(o[d] * (1 / l)).
 * The sums (dot products, P V, l) are f32 sums in the hardware's order and 2^x is the GPU's
 * (pgd_attn_exp2: exp2f's bits, a result below 2^-126 0), so the results are not
 * pgd_cuda_attention's bit for bit; pgd_cuda_attention_tc_twin (the same formulas, f16 roundings at
 * the same points, its own sum order and the host's exp2f) agrees within f32 noise before the final
 * bf16 rounding. A pair's arithmetic does not depend on its place in the tile, on the tile's size
 * or on the batch: the tiling changes no bit (tests/gpu/test_cuda_attention.c checks it on the
 * device). */
#define PGD_ATTN_TC_SLOTS 64 /* (row, query head) pairs of one CTA */
#define PGD_ATTN_TC_KEYS  64 /* keys of one block of the online softmax */

typedef struct pgd_attn_tile {
    uint32_t t0, n; /* the tile's first row, its rows (1 .. pgd_attn_tc_rows) */
} pgd_attn_tile;

/* Rows per tile for a GQA group of `group` query heads of head_dim: PGD_ATTN_TC_SLOTS / group;
 * 0 when the tensor-core kernel does not take the shape (head_dim other than 64 or 128, or a
 * group above PGD_ATTN_TC_SLOTS). */
static inline uint32_t pgd_attn_tc_rows(uint32_t group, uint32_t head_dim) {
    if ((head_dim != 64 && head_dim != 128) || group == 0 || group > PGD_ATTN_TC_SLOTS) return 0;
    return PGD_ATTN_TC_SLOTS / group;
}

/* The same for the wide form (128 slots a CTA, two tiles of 16 a warp): twice the queries for
 * each key block the CTA copies and each K and V fragment its warps read. 0 where
 * pgd_attn_tc_rows is 0. */
static inline uint32_t pgd_attn_tc_rows_wide(uint32_t group, uint32_t head_dim) {
    return pgd_attn_tc_rows(group, head_dim) ? 2 * PGD_ATTN_TC_SLOTS / group : 0;
}

/* Attention (pgd_cuda_attention's meaning) for the rows of tiles[0 .. n_tiles) (a device
 * array); other rows are left alone. Every tile's rows must satisfy the tile's definition
 * above, with n <= tile_rows and pos >= 0; tile_rows is pgd_attn_tc_rows (64 slots a CTA) or
 * pgd_attn_tc_rows_wide (128: the wide form) of the shape, and picks the form — the same bits
 * either way. q, kv 16-byte aligned, q_stride a multiple of 4. 0, PGD_EINVAL (shapes the kernel
 * does not take: see pgd_attn_tc_rows; another tile_rows; alignment) or PGD_ECUDA. */
int pgd_cuda_attention_tc(const float *q, uint32_t q_stride, const uint16_t *kv, pgd_kv_geom geom,
                          uint32_t layer, uint32_t n_head, const int32_t *block_tables,
                          uint32_t bt_stride, const uint32_t *seq_of, const int32_t *pos,
                          const pgd_attn_tile *tiles, uint32_t n_tiles, uint32_t tile_rows,
                          float scale, uint16_t *out, void *stream);

/* ---- tensor-core attention for decode rows (attention_dec.cu) ----
 * Rows of one query token each, split over KV chunks like pgd_cuda_attention_split, with the
 * (up to 16) query heads of a KV head as the rows of one tensor-core tile.
 *
 * Arithmetic: the query rounded to f16 (clamped first: pgd_attn_f16_clamp); the positions in
 * chunks of PGD_ATTN_CHUNK, each in blocks of PGD_ATTN_TC_KEYS, at absolute positions; per
 * block b, x_j = rn(acc_j * rn(scale * log2 e)) (acc_j the dot product of the f16 query and key
 * j, an f32 sum on the tensor cores), m_b = max_j x_j, p_j = 2^(x_j - m_b), l_b = sum_j p_j,
 * o_b[d] = sum_j f16(p_j) V_j[d]; a chunk's partial is its blocks folded in increasing order,
 * the chunks' partials are folded in increasing order the same way:
 *   M = max(m, m'); a = 2^(m - M); b = 2^(m' - M); l <- l a + l' b; o <- o a + o' b; m <- M
 * (each operation rounded), and out[d] = bf16(o[d] / l). The sums run in the hardware's order
 * and 2^x is the GPU's (the weights pgd_attn_exp2, the folds exp2f), so pgd_cuda_attention_dec_twin
 * (the same formulas, its own sum order, the host's exp2f) agrees within f32 noise before the bf16
 * rounding. A row's bits do not depend on the batch, the list or n_split. */
#define PGD_ATTN_DEC_GROUP 16 /* query heads of a KV head the kernel takes, at most */

/* Whether pgd_cuda_attention_dec takes GQA groups of `group` heads of head_dim. */
static inline int pgd_attn_dec_takes(uint32_t group, uint32_t head_dim) {
    return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= PGD_ATTN_DEC_GROUP;
}

/* The rows rows[0 .. n) (NULL: 0 .. n - 1) by the arithmetic above, each (row, KV head)'s
 * chunks over n_split CTAs (chunk c to CTA c % n_split; at least 1, at most the chunks of
 * max_ctx), scratch and counters as pgd_cuda_attention_split's (pgd_cuda_attention_split_bytes,
 * _counters; the counters zero before the first launch, left zero by every launch). A row
 * beyond max_ctx gets NaN, a padding row zeros; rows not in the list are left alone. Each row
 * must be its sequence's only row in the step (decode rows: the backend sends rows of longer
 * chunks to pgd_cuda_attention_tc), since the kernel reads the KV of a row's earlier positions
 * before it waits for the previous kernel (cuda_util.cuh). 0, PGD_EINVAL (shapes it does not
 * take: pgd_attn_dec_takes) or PGD_ECUDA. */
int pgd_cuda_attention_dec(const float *q, uint32_t q_stride, const uint16_t *kv, pgd_kv_geom geom,
                           uint32_t layer, uint32_t n_head, const int32_t *block_tables,
                           uint32_t bt_stride, const uint32_t *seq_of, const int32_t *pos,
                           const uint32_t *rows, uint32_t n, float scale, uint32_t n_split,
                           uint32_t max_ctx, float *scratch, uint32_t *arrived, uint16_t *out,
                           void *stream);

/* The decode kernel's twin, for rows 0 .. T - 1 (host arrays): its formulas, f16 roundings at
 * the same points, f32 sums in this function's own order, the host's exp2f. */
void pgd_cuda_attention_dec_twin(const float *q, uint32_t q_stride, const uint16_t *kv,
                                 pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                 const int32_t *block_tables, uint32_t bt_stride,
                                 const uint32_t *seq_of, const int32_t *pos, uint32_t T,
                                 float scale, uint16_t *out);

void pgd_cuda_attention_twin(const float *q, uint32_t q_stride, const uint16_t *kv,
                             pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                             const int32_t *block_tables, uint32_t bt_stride,
                             const uint32_t *seq_of, const int32_t *pos, uint32_t T, float scale,
                             uint16_t *out);

/* The tensor-core kernel's twin, for rows 0 .. T - 1 (host arrays, pgd_cuda_attention_twin's
 * arguments): pgd_cuda_attention_tc's formulas with its f16 roundings at the same points, f32
 * sums in this function's own order, the host's exp2f. */
void pgd_cuda_attention_tc_twin(const float *q, uint32_t q_stride, const uint16_t *kv,
                                pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                const int32_t *block_tables, uint32_t bt_stride,
                                const uint32_t *seq_of, const int32_t *pos, uint32_t T, float scale,
                                uint16_t *out);

#ifdef __cplusplus
}
#endif

#endif
