/*
 * engine/backends/cuda_plan.h — the host-side arithmetic of the CUDA backend, kept apart from
 * any CUDA call so that CI tests it on the CPU (tests/unit/test_cuda_plan.c): the layout of a
 * step's packed metadata, the packing itself (plain, or padded for a CUDA graph), which decode
 * steps replay a graph and at what padded size, the weights' device bytes, and the KV cache's size
 * from the memory left.
 *
 * Threading: pure functions.
 */
#ifndef PGD_ENGINE_BACKENDS_CUDA_PLAN_H
#define PGD_ENGINE_BACKENDS_CUDA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backends/backend.h"
#include "engine/backends/cuda.h"   /* pgd_cuda_weights */
#include "kernels/cuda/attention.h" /* pgd_attn_tile */

/* A step's metadata in one buffer, at these byte offsets (each part 256-byte aligned), the
 * block tables last so a step uploads only up to the rows it uses. */
typedef struct pgd_cuda_meta_layout {
    size_t tokens;    /* int32 [max_tokens] */
    size_t pos;       /* int32 [max_tokens] */
    size_t slots;     /* int64 [max_tokens] */
    size_t seq_of;    /* uint32 [max_tokens]: the sequence of each token */
    size_t rows;      /* uint32 [max_rows + max_tokens]: the full-logit rows, the sampled rows,
                         then the hidden rows (embeddings) */
    size_t specs;     /* pgd_sample_spec [max_rows] of the sampled rows */
    size_t draws;     /* uint64 [max_rows] */
    size_t tiles;     /* pgd_attn_tile [max_tokens]: the tensor-core attention's query tiles */
    size_t attn_rows; /* uint32 [max_tokens]: the rows of the CUDA-core attention */
    size_t tables;    /* int32 [max_seqs][stride_max] */
    size_t total;
} pgd_cuda_meta_layout;

pgd_cuda_meta_layout pgd_cuda_meta_layout_of(uint32_t max_tokens, uint32_t max_rows,
                                             uint32_t max_seqs, uint32_t stride_max);

/* ---- attention work ----
 * A step's attention runs in two launches: the tensor-core kernel over query tiles of the
 * sequences with two query tokens or more (prefill chunks), and the CUDA-core kernel over the
 * other rows (decode rows: their arithmetic is then the same in any step, mixed or not). */
typedef struct pgd_cuda_attn_work {
    uint32_t n_tiles, n_rows; /* tiles for the tensor-core kernel; rows for the other */
} pgd_cuda_attn_work;

/* Batch bt's attention work: each sequence with two query tokens or more in tiles of
 * tile_rows consecutive rows (its last tile may be shorter) into tiles[], every other row into
 * rows[] (ascending); tile_rows 0: every row into rows[]. tiles[] and rows[] hold n_tokens.
 * The tiles come longest first — by their last row's position, descending, then by first row
 * — since the tensor-core kernel's CTAs start in that order: a causal prompt's tiles differ in
 * keys by up to its length, and when its longest started last (in row order) they ran alone at
 * the end of the launch. The order changes no result (each tile's arithmetic is its own). */
pgd_cuda_attn_work pgd_cuda_attn_plan(const pgd_batch *bt, uint32_t tile_rows, pgd_attn_tile *tiles,
                                      uint32_t *rows);

/* Pack batch bt into buf (laid out by l), its attention work planned with tile_rows
 * (pgd_cuda_attn_plan; *work gets the counts); returns the bytes to upload (through the block
 * table rows the batch uses). The batch must fit the layout's limits (asserted). */
size_t pgd_cuda_meta_pack(const pgd_cuda_meta_layout *l, const pgd_batch *bt, uint32_t tile_rows,
                          pgd_cuda_attn_work *work, uint8_t *buf);

/* ---- CUDA graphs of decode steps ----
 * A decode-only step (one query token per sequence, every row sampled on the device) replays a
 * graph captured once for its padded size and block-table stride: nothing of one step is baked
 * into a graph but those two numbers, since the kernels read the tokens, positions, slots,
 * tables and sampling specs from the metadata buffer, whose device address never changes. */

/* The padded size a decode step of n sequences runs at: the smallest of 1, 2, 4, 8, then the
 * multiples of 8 up to 64, of 32 up to 256, of 64 beyond, but at most `limit` (the most rows a
 * step's buffers hold). 0 when n is 0 or above limit. */
uint32_t pgd_cuda_graph_size(uint32_t n, uint32_t limit);

/* The block-table stride a graph runs with for a batch of stride `stride`: the smallest power of
 * two >= stride and >= 16, at most stride_max; 0 when stride > stride_max. */
uint32_t pgd_cuda_graph_stride(uint32_t stride, uint32_t stride_max);

/* Whether batch bt can replay a decode graph: at least one sequence, each with one query token,
 * no full-logit rows, no hidden rows, and sampled row i on the device for token i, for every
 * token. */
bool pgd_cuda_graph_fits(const pgd_batch *bt);

/* Pack decode batch bt (pgd_cuda_graph_fits) padded to n_pad >= bt->n_seqs rows, block-table
 * rows re-strided to `stride` >= bt->bt_stride (their tail zero). A padding row has token 0,
 * position -1 and slot -1 (attention gives it zeros, the KV write skips it), sequence 0, row
 * index its own, a greedy spec and a zero draw; its block-table row is zero. Returns the bytes
 * to upload (through n_pad table rows). The padded batch must fit the layout (asserted). */
size_t pgd_cuda_meta_pack_padded(const pgd_cuda_meta_layout *l, const pgd_batch *bt, uint32_t n_pad,
                                 uint32_t stride, uint8_t *buf);

/* ---- split-KV attention ----
 * Attention launches of at most PGD_CUDA_SPLIT_ROWS rows spread each row's chunks over several
 * CTAs (pgd_cuda_attention_split: the same bits); larger launches have CTAs enough. */
#define PGD_CUDA_SPLIT_ROWS 64

/* CTAs per (row, KV head, head tile) for an attention launch of T rows, each row giving
 * ctas_per_row CTAs unsplit: about two CTAs per SM (n_sm), at most max_chunks (more would have
 * no chunk to take); 1 (unsplit) for 0 or more than PGD_CUDA_SPLIT_ROWS rows. */
uint32_t pgd_cuda_attn_splits(uint32_t T, uint32_t ctas_per_row, uint32_t n_sm,
                              uint32_t max_chunks);

/* ---- memory ---- */

/* The device bytes of model c's weights as the CUDA backend places them: every matrix in bf16
 * (the embedding; the output head unless tied; per layer the fused QKV, wo, the fused gate/up
 * and down, or with experts the router and each expert's gate/up and down — GGUF weights of any
 * type are dequantized to bf16 on the device), or with q8 in 8 bits and a half scale per 32
 * (kernels/cuda/q8.h: 17/16 bytes a weight) but for a head pgd_cuda_head_bf16 keeps in bf16;
 * the norms and the QKV biases in f32. */
uint64_t pgd_cuda_weight_bytes(const pgd_model_config *c, bool q8);

/* Whether model c's matrices take the 8- and 4-bit forms: the K of every product a multiple of
 * 32, the experts' count a multiple of 8 (the tensor-core kernel's rows of 8). */
bool pgd_cuda_q8_fits(const pgd_model_config *c);

/* Whether the output head (and, tied, the embedding: one matrix) stays in bf16 with
 * --gpu-weights q8_0 / q4: where the vocabulary is not a multiple of 8 (a tokenizer with a few
 * tokens added, 32001 or 32002), which the tensor-core kernel's rows of 8 cannot cover, so
 * cuBLASLt multiplies it. */
bool pgd_cuda_head_bf16(const pgd_model_config *c);

/* What --gpu-weights auto takes for model c when `share` bytes of the GPU are its to use
 * (gpu_memory_utilization of the total, less what others hold): bf16 when the bf16 weights leave
 * a tenth of the share, and at least PGD_CUDA_BF16_ROOM, for the activations and the KV cache
 * (or when the model does not take 8 bits), else q8_0 when its 8 bits leave that much, else
 * q4 (4 bits where the file's blocks are, 8 elsewhere: no larger than q8_0). None may fit: the
 * load then fails saying so. */
#define PGD_CUDA_BF16_ROOM (4ull << 30)
pgd_cuda_weights pgd_cuda_weights_choose(const pgd_model_config *c, uint64_t share);

/* KV blocks for a GPU with `total` bytes of which `free_bytes` are free once the weights and
 * everything a step needs are allocated: kv_blocks when given, else kv_bytes / block_bytes when
 * given, else what keeps the process under `utilization` of total with `reserve` bytes spare.
 * 0 when not even 2 blocks fit or the asked blocks exceed free memory. */
uint64_t pgd_cuda_kv_blocks(uint64_t total, uint64_t free_bytes, double utilization,
                            uint64_t reserve, uint64_t block_bytes, uint64_t kv_bytes,
                            uint64_t kv_blocks);

#endif
