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

/* pgd_cuda_attention, bit for bit, with each row's chunks spread over n_split CTAs per (row,
 * KV head, head tile) — chunk c to CTA c % n_split — for launches of few rows over long
 * contexts, where one CTA per (row, KV head) leaves most of the GPU idle (decode). The chunk
 * partials go to scratch (f32 [T][n_head][ceil(max_ctx / PGD_ATTN_CHUNK)][2 + head_dim], of
 * pgd_cuda_attention_split_bytes), then a second kernel folds each (row, head)'s partials in
 * chunk order. Every pos[t] must be below max_ctx (a row beyond gets NaN). n_split <= 1: the
 * one-kernel path (no scratch used). 0, PGD_EINVAL or PGD_ECUDA. */
int pgd_cuda_attention_split(const float *q, uint32_t q_stride, const uint16_t *kv,
                             pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                             const int32_t *block_tables, uint32_t bt_stride,
                             const uint32_t *seq_of, const int32_t *pos, uint32_t T, float scale,
                             uint32_t n_split, uint32_t max_ctx, float *scratch, uint16_t *out,
                             void *stream);

void pgd_cuda_attention_twin(const float *q, uint32_t q_stride, const uint16_t *kv,
                             pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                             const int32_t *block_tables, uint32_t bt_stride,
                             const uint32_t *seq_of, const int32_t *pos, uint32_t T, float scale,
                             uint16_t *out);

#ifdef __cplusplus
}
#endif

#endif
