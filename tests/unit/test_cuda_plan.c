/*
 * tests/unit/test_cuda_plan.c — the CUDA backend's host-side arithmetic on the CPU
 * (engine/backends/cuda_plan.h): the packed step metadata (parts aligned and disjoint, every
 * field where the kernels read it, only the used block-table rows uploaded) and the KV cache's
 * size from the memory left (utilization, explicit bytes or blocks, not even two blocks) and the
 * weights' device bytes (the presets' published parameter counts); the
 * CUDA graphs' padded sizes (against the list written out), strides, which batches replay a
 * graph, and the padded packing (its real rows as the plain packing has them, padding inert);
 * the split-KV attention's CTAs per row; the attention work (prefill sequences cut into tensor-
 * core tiles, one-token sequences' rows to the CUDA-core kernel, against lists written out);
 * that padding a decode step never moves it to another
 * of the fast GEMM plans' ranges of M (kernels/cuda/gemm.h), so a replayed graph and the same
 * step run eagerly use the same algorithms; the chunks of the 8- and 4-bit products through
 * cuBLASLt (gemm.h's pgd_gemm_deq_rows).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backends/cuda_plan.h"
#include "engine/model/preset.h"
#include "kernels/cuda/gemm.h"
#include "testutil.h"

static void test_layout(void) {
    pgd_cuda_meta_layout l = pgd_cuda_meta_layout_of(8192, 256, 256, 512);
    size_t parts[] = {l.tokens, l.pos,   l.slots,     l.seq_of, l.rows, l.specs,
                      l.draws,  l.tiles, l.attn_rows, l.tables, l.total};
    for (size_t i = 0; i + 1 < PGD_ARRAY_LEN(parts); i++) {
        CHECK(parts[i] % 256 == 0);
        CHECK(parts[i] < parts[i + 1]);
    }
    CHECK(l.pos - l.tokens >= 8192 * 4 && l.seq_of - l.slots >= 8192 * 8);
    CHECK(l.total - l.tables >= 256ull * 512 * 4);
    CHECK(l.draws - l.specs >= 256 * sizeof(pgd_sample_spec));
    CHECK(l.specs - l.rows >= (256 + 8192) * 4); /* logit + sampled rows, then hidden rows */
    CHECK(l.attn_rows - l.tiles >= 8192 * sizeof(pgd_attn_tile));
    CHECK(l.tables - l.attn_rows >= 8192 * 4);
}

static void test_pack(void) {
    /* two sequences: 3 tokens then 2; rows 0 and 4 full logits, rows 2 and 4 sampled */
    int32_t tokens[5] = {11, 12, 13, 21, 22}, pos[5] = {0, 1, 2, 7, 8};
    int64_t slots[5] = {16, 17, 18, 39, 40};
    uint32_t q_start[3] = {0, 3, 5}, kv_len[2] = {3, 9}, rows[2] = {0, 4};
    int32_t tables[2][3] = {{1, 0, 0}, {3, 4, 0}};
    pgd_sample_row samples[2] = {{2, {.temperature = 0.5f, .top_p = 1.0f}, 77},
                                 {4, {.temperature = 0.0f, .top_p = 1.0f}, 0}};
    pgd_batch bt = {.n_tokens = 5,
                    .tokens = tokens,
                    .positions = pos,
                    .slots = slots,
                    .n_seqs = 2,
                    .q_start = q_start,
                    .kv_len = kv_len,
                    .block_tables = &tables[0][0],
                    .bt_stride = 3,
                    .n_logits = 2,
                    .logit_rows = rows,
                    .n_samples = 2,
                    .samples = samples};
    pgd_cuda_meta_layout l = pgd_cuda_meta_layout_of(16, 8, 4, 8);
    uint8_t *buf = calloc(1, l.total);
    REQUIRE(buf);
    pgd_cuda_attn_work w;
    size_t n = pgd_cuda_meta_pack(&l, &bt, 2, &w, buf);
    CHECK_EQ_INT(n, l.tables + 6 * sizeof(int32_t)); /* only the two rows of 3 entries */
    /* tiles of 2 rows: sequence 0 (3 tokens) gives (0, 2) and (2, 1), sequence 1 (3, 2); listed
     * longest first (last positions 8, 2, 1) */
    CHECK_EQ_INT(w.n_tiles, 3);
    CHECK_EQ_INT(w.n_rows, 0);
    const pgd_attn_tile *tl = (const pgd_attn_tile *)(buf + l.tiles);
    CHECK(tl[0].t0 == 3 && tl[0].n == 2 && tl[1].t0 == 2 && tl[1].n == 1 && tl[2].t0 == 0 &&
          tl[2].n == 2);
    CHECK(memcmp(buf + l.tokens, tokens, sizeof tokens) == 0);
    CHECK(memcmp(buf + l.pos, pos, sizeof pos) == 0);
    CHECK(memcmp(buf + l.slots, slots, sizeof slots) == 0);
    const uint32_t *seq_of = (const uint32_t *)(buf + l.seq_of);
    CHECK(seq_of[0] == 0 && seq_of[2] == 0 && seq_of[3] == 1 && seq_of[4] == 1);
    const uint32_t *r = (const uint32_t *)(buf + l.rows);
    CHECK(r[0] == 0 && r[1] == 4 && r[2] == 2 && r[3] == 4);
    const pgd_sample_spec *sp = (const pgd_sample_spec *)(buf + l.specs);
    CHECK(sp[0].temperature == 0.5f && sp[1].temperature == 0.0f);
    CHECK(((const uint64_t *)(buf + l.draws))[0] == 77);
    const int32_t *tb = (const int32_t *)(buf + l.tables);
    CHECK(tb[0] == 1 && tb[3] == 3 && tb[4] == 4);
    /* hidden rows (an embedding's) come after the logit and sampled rows; nothing else moves */
    uint32_t hidden[3] = {1, 3, 0};
    bt.n_hidden = 3;
    bt.hidden_rows = hidden;
    uint8_t *buf2 = calloc(1, l.total);
    REQUIRE(buf2);
    CHECK_EQ_INT(pgd_cuda_meta_pack(&l, &bt, 2, &w, buf2), n);
    r = (const uint32_t *)(buf2 + l.rows);
    CHECK(r[0] == 0 && r[1] == 4 && r[2] == 2 && r[3] == 4 && r[4] == 1 && r[5] == 3 && r[6] == 0);
    CHECK(memcmp(buf2 + l.specs, buf + l.specs, l.total - l.specs) == 0);
    CHECK(memcmp(buf2, buf, l.rows) == 0);
    free(buf2);
    free(buf);
}

/* The attention work of a mixed batch against lists written out. */
static void test_attn_plan(void) {
    /* sequences of 1, 5, 1, 2 and 1 query tokens: rows 0 | 1-5 | 6 | 7-8 | 9; the prefill
     * chunks at positions 0-4 and 10-11 */
    uint32_t q_start[6] = {0, 1, 6, 7, 9, 10};
    int32_t pos[10] = {40, 0, 1, 2, 3, 4, 9, 10, 11, 3};
    pgd_batch bt = {.n_tokens = 10, .n_seqs = 5, .q_start = q_start, .positions = pos};
    pgd_attn_tile tiles[10];
    uint32_t rows[10];
    /* tiles of 4 rows, longest first: (7, 2) ends at position 11, (5, 1) at 4, (1, 4) at 3 */
    pgd_cuda_attn_work w = pgd_cuda_attn_plan(&bt, 4, tiles, rows);
    CHECK_EQ_INT(w.n_tiles, 3);
    CHECK_EQ_INT(w.n_rows, 3);
    CHECK(tiles[0].t0 == 7 && tiles[0].n == 2 && tiles[1].t0 == 5 && tiles[1].n == 1);
    CHECK(tiles[2].t0 == 1 && tiles[2].n == 4);
    CHECK(rows[0] == 0 && rows[1] == 6 && rows[2] == 9);
    /* tiles of 16 rows: one per prefill sequence, the one ending later first */
    w = pgd_cuda_attn_plan(&bt, 16, tiles, rows);
    CHECK_EQ_INT(w.n_tiles, 2);
    CHECK(tiles[0].t0 == 7 && tiles[0].n == 2 && tiles[1].t0 == 1 && tiles[1].n == 5);
    /* equal last positions: the earlier rows first */
    int32_t same[10] = {40, 0, 1, 2, 3, 11, 9, 10, 11, 3};
    bt.positions = same;
    w = pgd_cuda_attn_plan(&bt, 4, tiles, rows);
    CHECK_EQ_INT(w.n_tiles, 3);
    CHECK(tiles[0].t0 == 5 && tiles[1].t0 == 7 && tiles[2].t0 == 1);
    /* tile_rows 0 (the tensor-core kernel off): every row, in order */
    w = pgd_cuda_attn_plan(&bt, 0, tiles, rows);
    CHECK_EQ_INT(w.n_tiles, 0);
    CHECK_EQ_INT(w.n_rows, 10);
    for (uint32_t i = 0; i < 10; i++) CHECK_EQ_INT(rows[i], i);
    /* the shapes the tensor-core kernel takes */
    CHECK_EQ_INT(pgd_attn_tc_rows(4, 128), 16);
    CHECK_EQ_INT(pgd_attn_tc_rows(3, 64), 21);
    CHECK_EQ_INT(pgd_attn_tc_rows(7, 64), 9);
    CHECK_EQ_INT(pgd_attn_tc_rows(64, 128), 1);
    CHECK_EQ_INT(pgd_attn_tc_rows(65, 128), 0);
    CHECK_EQ_INT(pgd_attn_tc_rows(4, 96), 0);
    CHECK_EQ_INT(pgd_attn_tc_rows(4, 256), 0);
}

static void test_graph_size(void) {
    /* the sizes written out: 1 2 4 8, multiples of 8 to 64, of 32 to 256, of 64 beyond */
    uint32_t list[64], n_list = 0;
    for (uint32_t g = 1; g <= 8; g *= 2) list[n_list++] = g;
    for (uint32_t g = 16; g <= 64; g += 8) list[n_list++] = g;
    for (uint32_t g = 96; g <= 256; g += 32) list[n_list++] = g;
    for (uint32_t g = 320; g <= 1024; g += 64) list[n_list++] = g;
    const uint32_t limits[] = {1, 7, 8, 64, 100, 256, 1000, 1024};
    for (size_t li = 0; li < PGD_ARRAY_LEN(limits); li++) {
        const uint32_t limit = limits[li];
        uint32_t distinct = 0, last = 0;
        CHECK_EQ_INT(pgd_cuda_graph_size(0, limit), 0);
        CHECK_EQ_INT(pgd_cuda_graph_size(limit + 1, limit), 0);
        for (uint32_t n = 1; n <= limit; n++) {
            uint32_t want = limit;
            for (uint32_t i = 0; i < n_list; i++)
                if (list[i] >= n) {
                    want = list[i] < limit ? list[i] : limit;
                    break;
                }
            const uint32_t got = pgd_cuda_graph_size(n, limit);
            if (got != want) fprintf(stderr, "  n %u limit %u: %u, want %u\n", n, limit, got, want);
            CHECK_EQ_INT(got, want);
            CHECK(got >= n && got <= limit);
            distinct += got != last;
            last = got;
        }
        if (limit == 256) CHECK_EQ_INT(distinct, 17); /* graphs a 256-sequence GPU may capture */
    }
}

static void test_graph_size_keeps_gemm_range(void) {
    const uint32_t limits[] = {7, 64, 100, 256, 1000, 1024, 4096, 8192};
    for (size_t li = 0; li < PGD_ARRAY_LEN(limits); li++)
        for (uint32_t n = 1; n <= limits[li]; n++) {
            const uint32_t pad = pgd_cuda_graph_size(n, limits[li]);
            if (pgd_cuda_gemm_bucket(pad) != pgd_cuda_gemm_bucket(n))
                fprintf(stderr, "  n %u (limit %u) pads to %u: GEMM range %d, not %d\n", n,
                        limits[li], pad, pgd_cuda_gemm_bucket(pad), pgd_cuda_gemm_bucket(n));
            CHECK_EQ_INT(pgd_cuda_gemm_bucket(pad), pgd_cuda_gemm_bucket(n));
        }
    /* the ranges themselves */
    CHECK_EQ_INT(pgd_cuda_gemm_bucket(1), 0); /* one row: the GEMV kernel's range */
    CHECK_EQ_INT(pgd_cuda_gemm_bucket(2), 1);
    CHECK_EQ_INT(pgd_cuda_gemm_bucket(8), 1);
    CHECK_EQ_INT(pgd_cuda_gemm_bucket(9), 2);
    CHECK_EQ_INT(pgd_cuda_gemm_bucket(1024), 4);
    CHECK_EQ_INT(pgd_cuda_gemm_bucket(1025), 5);
    CHECK_EQ_INT(pgd_cuda_gemm_bucket(UINT32_MAX), 5);
}

static void test_graph_stride(void) {
    CHECK_EQ_INT(pgd_cuda_graph_stride(1, 512), 16);
    CHECK_EQ_INT(pgd_cuda_graph_stride(16, 512), 16);
    CHECK_EQ_INT(pgd_cuda_graph_stride(17, 512), 32);
    CHECK_EQ_INT(pgd_cuda_graph_stride(300, 512), 512);
    CHECK_EQ_INT(pgd_cuda_graph_stride(300, 400), 400); /* capped at the most a table has */
    CHECK_EQ_INT(pgd_cuda_graph_stride(5, 8), 8);
    CHECK_EQ_INT(pgd_cuda_graph_stride(9, 8), 0);
}

/* A decode batch of 3 sequences (positions 5, 40, 17; tables of stride 3), all sampled. */
typedef struct decode3 {
    int32_t tokens[3], pos[3];
    int64_t slots[3];
    uint32_t q_start[4], kv_len[3];
    int32_t tables[3][3];
    pgd_sample_row samples[3];
    pgd_batch bt;
} decode3;

static void decode3_init(decode3 *d) {
    *d = (decode3){.tokens = {101, 102, 103},
                   .pos = {5, 40, 17},
                   .slots = {37, 72, 49},
                   .q_start = {0, 1, 2, 3},
                   .kv_len = {6, 41, 18},
                   .tables = {{2, 0, 0}, {3, 5, 6}, {7, 8, 0}},
                   .samples = {{0, {.temperature = 0.7f, .top_p = 0.9f}, 11},
                               {1, {.temperature = 0.0f, .top_p = 1.0f}, 0},
                               {2, {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.1f}, 33}}};
    d->bt = (pgd_batch){.n_tokens = 3,
                        .tokens = d->tokens,
                        .positions = d->pos,
                        .slots = d->slots,
                        .n_seqs = 3,
                        .q_start = d->q_start,
                        .kv_len = d->kv_len,
                        .block_tables = &d->tables[0][0],
                        .bt_stride = 3,
                        .n_samples = 3,
                        .samples = d->samples};
}

static void test_graph_fits(void) {
    decode3 d;
    decode3_init(&d);
    CHECK(pgd_cuda_graph_fits(&d.bt));
    uint32_t rows[1] = {1};
    d.bt.n_logits = 1; /* a full-logit row: the host samples it */
    d.bt.logit_rows = rows;
    CHECK(!pgd_cuda_graph_fits(&d.bt));
    decode3_init(&d);
    d.bt.n_samples = 2; /* a row sampled nowhere on the device */
    CHECK(!pgd_cuda_graph_fits(&d.bt));
    decode3_init(&d);
    d.bt.n_hidden = 1; /* a hidden row asked besides (not by the runner: it samples none then) */
    d.bt.hidden_rows = rows;
    CHECK(!pgd_cuda_graph_fits(&d.bt));
    decode3_init(&d);
    d.samples[1].token = 2, d.samples[2].token = 1; /* rows out of token order */
    CHECK(!pgd_cuda_graph_fits(&d.bt));
    decode3_init(&d);
    uint32_t q2[3] = {0, 1, 3}; /* a prompt chunk of 2 tokens */
    d.bt.n_seqs = 2;
    d.bt.q_start = q2;
    d.bt.n_samples = 2;
    CHECK(!pgd_cuda_graph_fits(&d.bt));
    decode3_init(&d);
    d.bt.n_seqs = d.bt.n_tokens = d.bt.n_samples = 0;
    CHECK(!pgd_cuda_graph_fits(&d.bt));
}

static void test_pack_padded(void) {
    decode3 d;
    decode3_init(&d);
    pgd_cuda_meta_layout l = pgd_cuda_meta_layout_of(16, 8, 8, 32);
    uint8_t *plain = malloc(l.total), *pad = malloc(l.total);
    REQUIRE(plain && pad);
    memset(plain, 0xAB, l.total);
    memset(pad, 0xAB, l.total); /* poison: every byte the kernels read must be written */
    pgd_cuda_attn_work w;
    pgd_cuda_meta_pack(&l, &d.bt, 16, &w, plain);
    CHECK(w.n_tiles == 0 && w.n_rows == 3); /* decode rows: all on CUDA cores */
    size_t n = pgd_cuda_meta_pack_padded(&l, &d.bt, 4, 16, pad);
    CHECK_EQ_INT(n, l.tables + 4 * 16 * sizeof(int32_t));
    /* the real rows: what the plain packing gives */
    const size_t parts[][2] = {{l.tokens, 4}, {l.pos, 4},  {l.slots, 8},
                               {l.seq_of, 4}, {l.rows, 4}, {l.draws, 8}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(parts); i++)
        CHECK(memcmp(plain + parts[i][0], pad + parts[i][0], 3 * parts[i][1]) == 0);
    for (uint32_t i = 0; i < 3; i++) { /* field by field: a struct's padding is not data */
        const pgd_sample_spec *a = (const pgd_sample_spec *)(plain + l.specs) + i,
                              *b = (const pgd_sample_spec *)(pad + l.specs) + i;
        CHECK(a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p &&
              a->min_p == b->min_p && a->logprobs == b->logprobs &&
              a->top_logprobs == b->top_logprobs);
    }
    const int32_t *tb = (const int32_t *)(pad + l.tables);
    for (uint32_t s = 0; s < 4; s++)
        for (uint32_t k = 0; k < 16; k++)
            CHECK_EQ_INT(tb[s * 16 + k], s < 3 && k < 3 ? d.tables[s][k] : 0);
    /* the padding row: inert */
    CHECK_EQ_INT(((const int32_t *)(pad + l.tokens))[3], 0);
    CHECK_EQ_INT(((const int32_t *)(pad + l.pos))[3], -1);
    CHECK_EQ_INT(((const int64_t *)(pad + l.slots))[3], -1);
    CHECK_EQ_INT(((const uint32_t *)(pad + l.seq_of))[3], 0);
    CHECK_EQ_INT(((const uint32_t *)(pad + l.rows))[3], 3);
    const pgd_sample_spec *sp = (const pgd_sample_spec *)(pad + l.specs);
    CHECK(sp[3].temperature == 0.0f && sp[3].top_k == 0 && sp[3].top_p == 1.0f &&
          sp[3].min_p == 0.0f && !sp[3].logprobs && sp[3].top_logprobs == 0);
    CHECK_EQ_INT(((const uint64_t *)(pad + l.draws))[3], 0);
    free(plain);
    free(pad);
}

static void test_attn_splits(void) {
    /* H100 (132 SMs), Llama-3-8B (8 KV heads, one tile each), 8k context (32 chunks) */
    CHECK_EQ_INT(pgd_cuda_attn_splits(1, 8, 132, 32), 32); /* 264 / 8 = 33, capped */
    CHECK_EQ_INT(pgd_cuda_attn_splits(1, 8, 132, 4), 4);   /* a 1k-context model */
    CHECK_EQ_INT(pgd_cuda_attn_splits(4, 8, 132, 32), 9);  /* ceil(264 / 32) */
    CHECK_EQ_INT(pgd_cuda_attn_splits(16, 8, 132, 32), 3); /* ceil(264 / 128) */
    CHECK_EQ_INT(pgd_cuda_attn_splits(33, 8, 132, 32), 1); /* 264 CTAs already */
    CHECK_EQ_INT(pgd_cuda_attn_splits(64, 2, 132, 32), 3); /* ceil(264 / 128) */
    CHECK_EQ_INT(pgd_cuda_attn_splits(65, 2, 132, 32), 1); /* over PGD_CUDA_SPLIT_ROWS */
    CHECK_EQ_INT(pgd_cuda_attn_splits(0, 8, 132, 32), 1);
    CHECK_EQ_INT(pgd_cuda_attn_splits(1, 8, 132, 1), 1); /* one chunk: nothing to split */
    CHECK_EQ_INT(pgd_cuda_attn_splits(1, 0, 132, 32), 1);
    /* never fewer CTAs than about two per SM while it may split */
    for (uint32_t T = 1; T <= PGD_CUDA_SPLIT_ROWS; T++) {
        const uint32_t n = pgd_cuda_attn_splits(T, 4, 132, 1000);
        CHECK(n >= 1 && (uint64_t)T * 4 * n >= 264 && (uint64_t)T * 4 * (n - 1) < 264);
    }
}

/* The chunks of the 8- and 4-bit products through cuBLASLt (gemm.h): all of N where the
 * scratch holds it; else the fewest chunks that fit, in 128s, as even as that allows; a last
 * chunk of the rest; none where 128 rows do not fit. Written-out cases, then every (N, K,
 * scratch) of a grid against those rules. */
static void test_deq_chunks(void) {
    CHECK_EQ_INT(pgd_gemm_deq_rows(28672, 4096, 256u << 20), 28672); /* 8B gate/up: 224 MiB */
    CHECK_EQ_INT(pgd_gemm_deq_rows(57344, 8192, 256u << 20), 14336); /* 70B gate/up: 4 */
    CHECK_EQ_INT(pgd_gemm_deq_rows(8192, 28672, 256u << 20), 4096);  /* 70B down: 2 */
    CHECK_EQ_INT(pgd_gemm_deq_rows(700, 96, 300 * 96 * 2), 256);
    CHECK_EQ_INT(pgd_gemm_deq_last(700, 256), 188);
    CHECK_EQ_INT(pgd_gemm_deq_last(512, 256), 256);
    CHECK_EQ_INT(pgd_gemm_deq_last(200, 200), 200);
    CHECK_EQ_INT(pgd_gemm_deq_rows(256, 64, 127 * 64 * 2), 0);
    uint64_t cases = 0, bad = 0;
    for (uint32_t N = 1; N <= 3000; N += 37)
        for (uint32_t K = 32; K <= 512; K += 96)
            for (uint64_t s = 4096; s <= (uint64_t)1 << 22; s = s * 3 / 2) {
                const uint32_t r = pgd_gemm_deq_rows(N, K, s);
                const uint64_t row = (uint64_t)K * 2, fit = s / row / 128 * 128;
                cases++;
                if ((uint64_t)N * row <= s) {
                    bad += r != N;
                    continue;
                }
                if (!fit) {
                    bad += r != 0;
                    continue;
                }
                const uint32_t chunks = (N + r - 1) / r, last = pgd_gemm_deq_last(N, r);
                bad += r % 128 != 0 || (uint64_t)r * row > s || r > N ||
                       chunks != (N + fit - 1) / fit || last < 1 || last > r ||
                       (uint64_t)(chunks - 1) * r + last != N;
            }
    fprintf(stderr, "    %llu chunkings checked\n", (unsigned long long)cases);
    CHECK_EQ_INT(bad, 0);
}

/* The weights' device bytes of the built-in presets against their published parameter counts
 * (Hugging Face's: every matrix, norm and bias once), each matrix parameter 2 bytes (bf16) and
 * each norm and bias parameter 4 (f32): 2 x params + 2 x (norm and bias params). */
static void test_weight_bytes(void) {
    static const struct {
        const char *name;
        uint64_t params, norm_bias; /* published count; the norms' and biases' share of it */
    } want[] = {
        {"llama-3-8b", 8030261248ull, 65ull * 4096},
        {"llama-3-70b", 70553706496ull, 161ull * 8192},
        {"llama-3.2-1b", 1235814400ull, 33ull * 2048},
        {"qwen2.5-0.5b", 494032768ull, 49ull * 896 + 24ull * (896 + 2 * 128)},
        {"smollm2-135m", 134515008ull, 61ull * 576},
        /* 30.5B: 48 layers of 128 experts (8 a token), q and k head norms of 128 */
        {"qwen3-30b-a3b", 30532122624ull, 97ull * 2048 + 48ull * 2 * 128},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(want); i++) {
        pgd_model_preset p;
        REQUIRE(pgd_model_preset_load(want[i].name, &p) == 0);
        const uint64_t got = pgd_cuda_weight_bytes(&p.cfg, false);
        if (got != 2 * want[i].params + 2 * want[i].norm_bias)
            fprintf(stderr, "    %s: %llu bytes\n", want[i].name, (unsigned long long)got);
        CHECK_EQ_INT(got, 2 * want[i].params + 2 * want[i].norm_bias);
        /* 8 bits: each matrix parameter 1 byte and a 2-byte scale per 32 of them */
        const uint64_t mat = want[i].params - want[i].norm_bias;
        CHECK(mat % 32 == 0 && pgd_cuda_q8_fits(&p.cfg));
        CHECK_EQ_INT(pgd_cuda_weight_bytes(&p.cfg, true), mat + mat / 16 + 4 * want[i].norm_bias);
    }
}

/* --gpu-weights auto: bf16 while they leave max(a tenth of the share, 4 GiB), else 8 bits while
 * those do, else 4. */
static void test_weights_choose(void) {
    const uint64_t G = 1ull << 30;
    pgd_model_preset p;
    REQUIRE(pgd_model_preset_load("llama-3-8b", &p) == 0);                   /* 14.96 GiB in bf16 */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 72 * G) == PGD_CUDA_WEIGHTS_BF16); /* an 80 GiB card */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 19 * G) == PGD_CUDA_WEIGHTS_BF16); /* 4.04 GiB left */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 18 * G) == PGD_CUDA_WEIGHTS_Q8_0); /* 3.04 GiB left */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 10 * G) == PGD_CUDA_WEIGHTS_Q4);   /* 7.95 in 8 bits */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 12 * G) == PGD_CUDA_WEIGHTS_Q8_0); /* bf16 cannot fit */
    REQUIRE(pgd_model_preset_load("mixtral-8x7b", &p) == 0);                 /* ~87 GiB in bf16 */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 72 * G) == PGD_CUDA_WEIGHTS_Q8_0);
    CHECK(pgd_cuda_weights_choose(&p.cfg, 126 * G) == PGD_CUDA_WEIGHTS_BF16); /* an H200 */
    REQUIRE(pgd_model_preset_load("llama-3-70b", &p) == 0); /* 131.4 GiB in bf16, 69.8 in 8 bits */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 72 * G) == PGD_CUDA_WEIGHTS_Q4);    /* an 80 GiB card */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 126 * G) == PGD_CUDA_WEIGHTS_Q8_0); /* an H200 */
    REQUIRE(pgd_model_preset_load("qwen3-30b-a3b", &p) == 0); /* 56.9 GiB; a tenth: 7.2 */
    CHECK(pgd_cuda_weights_choose(&p.cfg, 72 * G) == PGD_CUDA_WEIGHTS_BF16);
    CHECK(pgd_cuda_weights_choose(&p.cfg, 63 * G) == PGD_CUDA_WEIGHTS_Q8_0);
    p.cfg.n_embd = 1000; /* a K of 1000 takes no 8-bit form: bf16 however little room */
    CHECK(!pgd_cuda_q8_fits(&p.cfg));
    CHECK(pgd_cuda_weights_choose(&p.cfg, 1 * G) == PGD_CUDA_WEIGHTS_BF16);
    p.cfg.n_embd = 2048;
    CHECK(pgd_cuda_q8_fits(&p.cfg));
    p.cfg.n_expert = 60; /* an expert count not of 8s: the router's rows on the tensor cores */
    CHECK(!pgd_cuda_q8_fits(&p.cfg));
    p.cfg.n_expert = 128;
    /* a vocabulary not of 8s (151937) keeps the head in bf16 in every form: in 8 bits the head's
     * 151937 x 2048 weights take 2 bytes each instead of 17/16, the rest as before */
    const uint64_t E = p.cfg.n_embd, q8_even = pgd_cuda_weight_bytes(&p.cfg, true);
    CHECK(!pgd_cuda_head_bf16(&p.cfg));
    p.cfg.n_vocab = 151937;
    CHECK(pgd_cuda_q8_fits(&p.cfg) && pgd_cuda_head_bf16(&p.cfg));
    CHECK_EQ_INT(pgd_cuda_weight_bytes(&p.cfg, true),
                 q8_even + E * 34 / 32 /* the embedding's row more */ - 151936 * E * 34 / 32 +
                     151937 * E * 2);
    p.cfg.tied_output = true; /* tied: the one matrix in bf16 */
    CHECK_EQ_INT(pgd_cuda_weight_bytes(&p.cfg, true),
                 q8_even - 2 * 151936 * E * 34 / 32 + 151937 * E * 2);
}

static void test_kv_blocks(void) {
    const uint64_t G = 1ull << 30, blk = 2ull << 20; /* 2 MiB blocks (Llama-3-8B, f16) */
    /* 80 GiB card, 20 GiB used (weights etc.), 0.9 share, 256 MiB spare: 72 - 20 - 0.25 GiB */
    uint64_t n = pgd_cuda_kv_blocks(80 * G, 60 * G, 0.9, 256ull << 20, blk, 0, 0);
    CHECK_EQ_INT(n, (uint64_t)((0.9 * 80 * G - 20 * G - (256ull << 20)) / blk));
    CHECK_EQ_INT(pgd_cuda_kv_blocks(80 * G, 60 * G, 0.9, 0, blk, 4 * G, 0), 2048);  /* bytes */
    CHECK_EQ_INT(pgd_cuda_kv_blocks(80 * G, 60 * G, 0.9, 0, blk, 4 * G, 100), 100); /* blocks */
    CHECK_EQ_INT(pgd_cuda_kv_blocks(80 * G, 60 * G, 0.9, 0, blk, 70 * G, 0), 0);    /* > free */
    CHECK_EQ_INT(pgd_cuda_kv_blocks(80 * G, 7 * G, 0.9, 0, blk, 0, 0), 0);    /* over the share */
    CHECK_EQ_INT(pgd_cuda_kv_blocks(80 * G, 60 * G, 0.9, 0, blk, blk, 0), 0); /* one block */
}

int main(void) {
    RUN(test_layout);
    RUN(test_pack);
    RUN(test_attn_plan);
    RUN(test_graph_size);
    RUN(test_graph_size_keeps_gemm_range);
    RUN(test_graph_stride);
    RUN(test_graph_fits);
    RUN(test_pack_padded);
    RUN(test_attn_splits);
    RUN(test_deq_chunks);
    RUN(test_weight_bytes);
    RUN(test_weights_choose);
    RUN(test_kv_blocks);
    return test_summary();
}
