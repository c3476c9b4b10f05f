/*
 * engine/backends/cuda_plan.h — the host-side arithmetic of the CUDA backend, kept apart from
 * any CUDA call so that CI tests it on the CPU (tests/unit/test_cuda_plan.c): the layout of a
 * step's packed metadata, the packing itself, and the KV cache's size from the memory left.
 *
 * Threading: pure functions.
 */
#ifndef PGD_ENGINE_BACKENDS_CUDA_PLAN_H
#define PGD_ENGINE_BACKENDS_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backends/backend.h"

/* A step's metadata in one buffer, at these byte offsets (each part 256-byte aligned), the
 * block tables last so a step uploads only up to the rows it uses. */
typedef struct pgd_cuda_meta_layout {
    size_t tokens; /* int32 [max_tokens] */
    size_t pos;    /* int32 [max_tokens] */
    size_t slots;  /* int64 [max_tokens] */
    size_t seq_of; /* uint32 [max_tokens]: the sequence of each token */
    size_t rows;   /* uint32 [max_rows]: the full-logit rows, then the sampled rows */
    size_t specs;  /* pgd_sample_spec [max_rows] of the sampled rows */
    size_t draws;  /* uint64 [max_rows] */
    size_t tables; /* int32 [max_seqs][stride_max] */
    size_t total;
} pgd_cuda_meta_layout;

pgd_cuda_meta_layout pgd_cuda_meta_layout_of(uint32_t max_tokens, uint32_t max_rows,
                                             uint32_t max_seqs, uint32_t stride_max);

/* Pack batch bt into buf (laid out by l); returns the bytes to upload (through the block table
 * rows the batch uses). The batch must fit the layout's limits (asserted). */
size_t pgd_cuda_meta_pack(const pgd_cuda_meta_layout *l, const pgd_batch *bt, uint8_t *buf);

/* KV blocks for a GPU with `total` bytes of which `free_bytes` are free once the weights and
 * everything a step needs are allocated: kv_blocks when given, else kv_bytes / block_bytes when
 * given, else what keeps the process under `utilization` of total with `reserve` bytes spare.
 * 0 when not even 2 blocks fit or the asked blocks exceed free memory. */
uint64_t pgd_cuda_kv_blocks(uint64_t total, uint64_t free_bytes, double utilization,
                            uint64_t reserve, uint64_t block_bytes, uint64_t kv_bytes,
                            uint64_t kv_blocks);

#endif
