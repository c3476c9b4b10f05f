/*
 * engine/backends/cuda_plan.c — host-side arithmetic of the CUDA backend (see cuda_plan.h).
 */
#include "engine/backends/cuda_plan.h"

#include <string.h>

#include "common/error.h"

static size_t align_up(size_t x) {
    return (x + 255) & ~(size_t)255;
}

pgd_cuda_meta_layout pgd_cuda_meta_layout_of(uint32_t max_tokens, uint32_t max_rows,
                                             uint32_t max_seqs, uint32_t stride_max) {
    pgd_cuda_meta_layout l;
    size_t off = 0;
#define PART(field, bytes)                                                                         \
    l.field = off;                                                                                 \
    off += align_up(bytes);
    PART(tokens, (size_t)max_tokens * sizeof(int32_t))
    PART(pos, (size_t)max_tokens * sizeof(int32_t))
    PART(slots, (size_t)max_tokens * sizeof(int64_t))
    PART(seq_of, (size_t)max_tokens * sizeof(uint32_t))
    PART(rows, (size_t)max_rows * sizeof(uint32_t))
    PART(specs, (size_t)max_rows * sizeof(pgd_sample_spec))
    PART(draws, (size_t)max_rows * sizeof(uint64_t))
    PART(tables, (size_t)max_seqs * stride_max * sizeof(int32_t))
#undef PART
    l.total = off;
    return l;
}

size_t pgd_cuda_meta_pack(const pgd_cuda_meta_layout *l, const pgd_batch *bt, uint8_t *buf) {
    const uint32_t T = bt->n_tokens;
    PGD_ASSERT((size_t)T * sizeof(int32_t) <= l->pos - l->tokens &&
               (size_t)(bt->n_logits + bt->n_samples) * sizeof(uint32_t) <= l->specs - l->rows &&
               (size_t)bt->n_seqs * bt->bt_stride * sizeof(int32_t) <= l->total - l->tables);
    memcpy(buf + l->tokens, bt->tokens, T * sizeof(int32_t));
    memcpy(buf + l->pos, bt->positions, T * sizeof(int32_t));
    memcpy(buf + l->slots, bt->slots, T * sizeof(int64_t));
    uint32_t *seq_of = (uint32_t *)(buf + l->seq_of);
    for (uint32_t s = 0; s < bt->n_seqs; s++)
        for (uint32_t t = bt->q_start[s]; t < bt->q_start[s + 1]; t++) seq_of[t] = s;
    uint32_t *rows = (uint32_t *)(buf + l->rows);
    if (bt->n_logits) memcpy(rows, bt->logit_rows, bt->n_logits * sizeof(uint32_t));
    pgd_sample_spec *specs = (pgd_sample_spec *)(buf + l->specs);
    uint64_t *draws = (uint64_t *)(buf + l->draws);
    for (uint32_t i = 0; i < bt->n_samples; i++) {
        rows[bt->n_logits + i] = bt->samples[i].token;
        specs[i] = bt->samples[i].spec;
        draws[i] = bt->samples[i].draw;
    }
    size_t tables = (size_t)bt->n_seqs * bt->bt_stride * sizeof(int32_t);
    memcpy(buf + l->tables, bt->block_tables, tables);
    return l->tables + tables;
}

uint64_t pgd_cuda_kv_blocks(uint64_t total, uint64_t free_bytes, double utilization,
                            uint64_t reserve, uint64_t block_bytes, uint64_t kv_bytes,
                            uint64_t kv_blocks) {
    uint64_t n = kv_blocks;
    if (!n) {
        uint64_t bytes = kv_bytes;
        if (!bytes) {
            uint64_t used = total > free_bytes ? total - free_bytes : 0;
            uint64_t budget = (uint64_t)(utilization * (double)total);
            bytes = budget > used + reserve ? budget - used - reserve : 0;
        }
        n = bytes / block_bytes;
    }
    if (n > (uint64_t)INT32_MAX) n = INT32_MAX;
    if (n < 2 || n * block_bytes > free_bytes) return 0;
    return n;
}
