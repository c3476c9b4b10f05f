/*
 * tests/unit/test_cuda_plan.c — the CUDA backend's host-side arithmetic on the CPU
 * (engine/backends/cuda_plan.h): the packed step metadata (parts aligned and disjoint, every
 * field where the kernels read it, only the used block-table rows uploaded) and the KV cache's
 * size from the memory left (utilization, explicit bytes or blocks, not even two blocks).
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backends/cuda_plan.h"
#include "testutil.h"

static void test_layout(void) {
    pgd_cuda_meta_layout l = pgd_cuda_meta_layout_of(8192, 256, 256, 512);
    size_t parts[] = {l.tokens, l.pos,   l.slots,  l.seq_of, l.rows,
                      l.specs,  l.draws, l.tables, l.total};
    for (size_t i = 0; i + 1 < PGD_ARRAY_LEN(parts); i++) {
        CHECK(parts[i] % 256 == 0);
        CHECK(parts[i] < parts[i + 1]);
    }
    CHECK(l.pos - l.tokens >= 8192 * 4 && l.seq_of - l.slots >= 8192 * 8);
    CHECK(l.total - l.tables >= 256ull * 512 * 4);
    CHECK(l.draws - l.specs >= 256 * sizeof(pgd_sample_spec));
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
    size_t n = pgd_cuda_meta_pack(&l, &bt, buf);
    CHECK_EQ_INT(n, l.tables + 6 * sizeof(int32_t)); /* only the two rows of 3 entries */
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
    free(buf);
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
    RUN(test_kv_blocks);
    return test_summary();
}
