/*
 * engine/backends/cuda_plan.c — host-side arithmetic of the CUDA backend (see cuda_plan.h).
 */
#include "engine/backends/cuda_plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cuda/q8.h"

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
    PART(rows, ((size_t)max_rows + max_tokens) * sizeof(uint32_t))
    PART(specs, (size_t)max_rows * sizeof(pgd_sample_spec))
    PART(draws, (size_t)max_rows * sizeof(uint64_t))
    PART(tiles, (size_t)max_tokens * sizeof(pgd_attn_tile))
    PART(attn_rows, (size_t)max_tokens * sizeof(uint32_t))
    PART(tables, (size_t)max_seqs * stride_max * sizeof(int32_t))
#undef PART
    l.total = off;
    return l;
}

/* Every part but the block tables, for the batch's own tokens and rows. */
static void pack_rows(const pgd_cuda_meta_layout *l, const pgd_batch *bt, uint8_t *buf) {
    const uint32_t T = bt->n_tokens;
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
    if (bt->n_hidden)
        memcpy(rows + bt->n_logits + bt->n_samples, bt->hidden_rows,
               bt->n_hidden * sizeof(uint32_t));
}

/* The positions tile_cmp reads (qsort has no context argument; one per thread). */
static _Thread_local const int32_t *tile_pos;

/* More keys first (the tile's last row's position, descending), then the earlier tile. */
static int tile_cmp(const void *pa, const void *pb) {
    const pgd_attn_tile *a = pa, *b = pb;
    const int32_t ka = tile_pos[a->t0 + a->n - 1], kb = tile_pos[b->t0 + b->n - 1];
    if (ka != kb) return ka > kb ? -1 : 1;
    return a->t0 < b->t0 ? -1 : a->t0 > b->t0;
}

pgd_cuda_attn_work pgd_cuda_attn_plan(const pgd_batch *bt, uint32_t tile_rows, pgd_attn_tile *tiles,
                                      uint32_t *rows) {
    pgd_cuda_attn_work w = {0, 0};
    for (uint32_t s = 0; s < bt->n_seqs; s++) {
        const uint32_t t0 = bt->q_start[s], t1 = bt->q_start[s + 1];
        if (tile_rows && t1 - t0 >= 2) {
            for (uint32_t t = t0; t < t1; t += tile_rows)
                tiles[w.n_tiles++] = (pgd_attn_tile){t, t1 - t < tile_rows ? t1 - t : tile_rows};
        } else {
            for (uint32_t t = t0; t < t1; t++) rows[w.n_rows++] = t;
        }
    }
    if (w.n_tiles > 1) {
        tile_pos = bt->positions;
        qsort(tiles, w.n_tiles, sizeof *tiles, tile_cmp);
        tile_pos = NULL;
    }
    return w;
}

size_t pgd_cuda_meta_pack(const pgd_cuda_meta_layout *l, const pgd_batch *bt, uint32_t tile_rows,
                          pgd_cuda_attn_work *work, uint8_t *buf) {
    PGD_ASSERT((size_t)bt->n_tokens * sizeof(int32_t) <= l->pos - l->tokens &&
               (size_t)(bt->n_logits + bt->n_samples + bt->n_hidden) * sizeof(uint32_t) <=
                   l->specs - l->rows &&
               (size_t)bt->n_seqs * bt->bt_stride * sizeof(int32_t) <= l->total - l->tables);
    pack_rows(l, bt, buf);
    *work = pgd_cuda_attn_plan(bt, tile_rows, (pgd_attn_tile *)(buf + l->tiles),
                               (uint32_t *)(buf + l->attn_rows));
    size_t tables = (size_t)bt->n_seqs * bt->bt_stride * sizeof(int32_t);
    memcpy(buf + l->tables, bt->block_tables, tables);
    return l->tables + tables;
}

uint32_t pgd_cuda_graph_size(uint32_t n, uint32_t limit) {
    if (n == 0 || n > limit) return 0;
    uint32_t g;
    if (n <= 8) {
        g = 1;
        while (g < n) g *= 2;
    } else {
        const uint32_t q = n <= 64 ? 8 : n <= 256 ? 32 : 64;
        g = (n + q - 1) / q * q;
    }
    return g < limit ? g : limit;
}

uint32_t pgd_cuda_graph_stride(uint32_t stride, uint32_t stride_max) {
    if (stride > stride_max) return 0;
    uint32_t s = 16;
    while (s < stride) s *= 2;
    return s < stride_max ? s : stride_max;
}

bool pgd_cuda_graph_fits(const pgd_batch *bt) {
    const uint32_t n = bt->n_seqs;
    if (n == 0 || bt->n_tokens != n || bt->n_logits != 0 || bt->n_samples != n || bt->n_hidden)
        return false;
    for (uint32_t s = 0; s < n; s++)
        if (bt->q_start[s] != s || bt->samples[s].token != s) return false;
    return bt->q_start[n] == n;
}

size_t pgd_cuda_meta_pack_padded(const pgd_cuda_meta_layout *l, const pgd_batch *bt, uint32_t n_pad,
                                 uint32_t stride, uint8_t *buf) {
    const uint32_t n = bt->n_seqs;
    PGD_ASSERT(pgd_cuda_graph_fits(bt) && n_pad >= n && stride >= bt->bt_stride &&
               (size_t)n_pad * sizeof(int32_t) <= l->pos - l->tokens &&
               (size_t)n_pad * sizeof(uint32_t) <= l->specs - l->rows &&
               (size_t)n_pad * stride * sizeof(int32_t) <= l->total - l->tables);
    pack_rows(l, bt, buf); /* a decode batch: row i is token i of sequence i */
    const pgd_sample_spec greedy = {.temperature = 0.0f, .top_p = 1.0f};
    for (uint32_t i = n; i < n_pad; i++) {
        ((int32_t *)(buf + l->tokens))[i] = 0;
        ((int32_t *)(buf + l->pos))[i] = -1;
        ((int64_t *)(buf + l->slots))[i] = -1;
        ((uint32_t *)(buf + l->seq_of))[i] = 0;
        ((uint32_t *)(buf + l->rows))[i] = i;
        ((pgd_sample_spec *)(buf + l->specs))[i] = greedy;
        ((uint64_t *)(buf + l->draws))[i] = 0;
    }
    int32_t *tables = (int32_t *)(buf + l->tables);
    for (uint32_t i = 0; i < n_pad; i++) {
        const uint32_t used = i < n ? bt->bt_stride : 0;
        if (used)
            memcpy(tables + (size_t)i * stride, bt->block_tables + (size_t)i * used,
                   used * sizeof(int32_t));
        memset(tables + (size_t)i * stride + used, 0, (stride - used) * sizeof(int32_t));
    }
    return l->tables + (size_t)n_pad * stride * sizeof(int32_t);
}

uint32_t pgd_cuda_attn_splits(uint32_t T, uint32_t ctas_per_row, uint32_t n_sm,
                              uint32_t max_chunks) {
    if (T == 0 || T > PGD_CUDA_SPLIT_ROWS || ctas_per_row == 0) return 1;
    const uint64_t unsplit = (uint64_t)T * ctas_per_row, want = 2ull * n_sm;
    uint64_t n = (want + unsplit - 1) / unsplit;
    if (n > max_chunks) n = max_chunks;
    return n > 1 ? (uint32_t)n : 1;
}

uint64_t pgd_cuda_weight_bytes(const pgd_model_config *c, bool q8) {
    const uint64_t E = c->n_embd, V = c->n_vocab, L = c->n_layer;
    const uint64_t QD = (uint64_t)c->n_head * c->head_dim,
                   KVD = (uint64_t)c->n_head_kv * c->head_dim;
    const uint64_t ffn =
        c->n_expert ? c->n_expert * (E + 3 * (uint64_t)c->n_ff_exp * E) : 3 * (uint64_t)c->n_ff * E;
    /* the head (the embedding too when tied) apart: bf16 in every form where head_bf16 */
    const uint64_t head = V * E, matrices = V * E * (c->tied_output ? 0 : 1) +
                                            L * ((QD + 2 * KVD) * E + E * QD + ffn);
    const uint64_t vectors = (2 * L + 1) * E + (c->qkv_bias ? L * (QD + 2 * KVD) : 0) +
                             (c->qk_norm ? L * 2 * (uint64_t)c->head_dim : 0);
    if (!q8) return 2 * (matrices + head) + 4 * vectors;
    const uint64_t q8_head = pgd_cuda_head_bf16(c) ? 2 * head : head + head / PGD_Q8_BLOCK * 2;
    return matrices + matrices / PGD_Q8_BLOCK * 2 + q8_head + 4 * vectors;
}

bool pgd_cuda_head_bf16(const pgd_model_config *c) {
    return c->n_vocab % 8 != 0;
}

bool pgd_cuda_q8_fits(const pgd_model_config *c) {
    const uint64_t QD = (uint64_t)c->n_head * c->head_dim;
    /* the K of every product: E (QKV, gate/up, router, head), H D (wo), F or FX (down), a
     * multiple of 32; their N (the tensor-core kernel's rows of 8): the experts' count (the rest
     * are multiples of the K above; a vocabulary of other sizes keeps its head in bf16:
     * pgd_cuda_head_bf16) */
    return c->n_embd % PGD_Q8_BLOCK == 0 && QD % PGD_Q8_BLOCK == 0 &&
           (c->n_expert ? c->n_ff_exp : c->n_ff) % PGD_Q8_BLOCK == 0 && c->n_expert % 8 == 0 &&
           (uint64_t)c->n_head_kv * c->head_dim % 8 == 0;
}

pgd_cuda_weights pgd_cuda_weights_choose(const pgd_model_config *c, uint64_t share) {
    const uint64_t bf16 = pgd_cuda_weight_bytes(c, false), room = share / 10;
    const uint64_t spare = room > PGD_CUDA_BF16_ROOM ? room : PGD_CUDA_BF16_ROOM;
    if (bf16 + spare <= share || !pgd_cuda_q8_fits(c)) return PGD_CUDA_WEIGHTS_BF16;
    if (pgd_cuda_weight_bytes(c, true) + spare <= share) return PGD_CUDA_WEIGHTS_Q8_0;
    return PGD_CUDA_WEIGHTS_Q4;
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
