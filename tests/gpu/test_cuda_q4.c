/*
 * tests/gpu/test_cuda_q4.c — the 4-bit weights' making and gathering (kernels/cuda/q4.h) against
 * the CPU: pgd_cuda_q4_quantize equals pgd_quantize_row_q4_1 (the CPU's quantization) bit for
 * bit from f32 and from bf16 values — random values, blocks of one value (d = 0), blocks of
 * negative values only, values on rounding ties (x = lo + (k + 1/2) d), d in f16's subnormal
 * range; pgd_cuda_q4_split equals the Q4_1 blocks it is given (and those pgd_q4_blocks makes of
 * Q4_0 and Q4_K rows), read back into blocks; pgd_cuda_q4_embed equals fmaf(f16(d), q, f16(m))
 * of the asked rows, nibble order included; pgd_cuda_q4_rows_bf16 equals those values rounded
 * to bf16 (pgd_f32_to_bf16) from any row on; the planes' edges (rows past the asked ones
 * untouched: poisoned and left so); bad shapes and alignments refused. Outputs poisoned before each
 * run; the seed is printed. Exit 77 (skipped) without a GPU. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/q4.h"
#include "testutil.h"
#include "gpu_testutil.h"

/* THE FORM's planes of rows x cols downloaded and put back into Q4_1 blocks [rows][cols / 32]
 * (20 bytes each), with `extra` more rows of poison checked to stay poison. 0, or -1. */
static int download_blocks(pgd_q4_mat m, uint64_t rows, uint64_t cols, uint64_t extra,
                           pgd_block_q4_1 *out) {
    const uint64_t nb = cols / 32, all = rows + extra;
    uint8_t *q = malloc(all * cols / 2);
    uint32_t *dm = malloc(all * nb * 4);
    int rc = -1;
    if (q && dm && !gt_download(q, m.q, all * cols / 2) && !gt_download(dm, m.dm, all * nb * 4)) {
        rc = 0;
        for (uint64_t b = 0; b < rows * nb; b++) {
            out[b].d = (uint16_t)dm[b];
            out[b].m = (uint16_t)(dm[b] >> 16);
            memcpy(out[b].qs, q + b * 16, 16);
        }
        for (uint64_t i = rows * cols / 2; i < all * cols / 2; i++) rc |= q[i] != 0xFF ? -1 : 0;
        for (uint64_t i = rows * nb; i < all * nb; i++) rc |= dm[i] != 0xFFFFFFFFu ? -1 : 0;
        if (rc) fprintf(stderr, "  rows past the asked ones were written\n");
    }
    free(q);
    free(dm);
    return rc;
}

static bool alloc_form(uint64_t rows, uint64_t cols, pgd_q4_mat *m) {
    m->q = gt_poisoned(rows * cols / 2);
    m->dm = gt_poisoned(rows * (cols / 32) * 4);
    return m->q && m->dm;
}

static void free_form(pgd_q4_mat m) {
    cudaFree(m.q);
    cudaFree(m.dm);
}

/* Random values with the patterns the rounding rule cares about, block by block. */
static void fill_values(float *x, uint64_t n) {
    for (uint64_t b = 0; b < n / 32; b++) {
        float *v = x + b * 32;
        const uint32_t kind = gt_urand(7);
        const float scale = (float)(gt_urand(2000) + 1) / 1000.0f;
        for (int j = 0; j < 32; j++) v[j] = gt_frand() * scale;
        if (kind == 0) /* one value: d = 0, every q 0 */
            for (int j = 0; j < 32; j++) v[j] = -0.75f * scale;
        if (kind == 1) /* negative only */
            for (int j = 0; j < 32; j++) v[j] = -1.0f - (v[j] < 0 ? -v[j] : v[j]);
        if (kind == 2) { /* ties: x = lo + (k + 1/2) d, d = 1/64, lo = -1/4: all exact */
            const float d = 1.0f / 64.0f, lo = -0.25f;
            v[0] = lo;
            v[1] = lo + 15.0f * d;
            for (int j = 2; j < 32; j++) v[j] = lo + ((float)gt_urand(15) + 0.5f) * d;
        }
        if (kind == 3) v[gt_urand(32)] = 1e-30f; /* a tiny value among others */
        if (kind == 4)
            for (int j = 0; j < 32; j++) v[j] *= 1e-6f; /* d in f16's subnormal range */
        if (kind == 5) v[gt_urand(32)] = 40.0f * scale; /* one far value: most q 0..1 */
    }
}

static void test_quantize(void) {
    static const struct {
        uint64_t rows, cols;
    } shapes[] = {{1, 32}, {3, 96}, {7, 896}, {33, 4096}, {2, 14336}, {1, 256}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++)
        for (int bf = 0; bf < 2; bf++) {
            const uint64_t rows = shapes[i].rows, cols = shapes[i].cols, n = rows * cols;
            float *x = malloc(n * sizeof *x);
            uint16_t *xb = malloc(n * 2);
            pgd_block_q4_1 *want = malloc(n / 32 * sizeof *want),
                           *got = malloc(n / 32 * sizeof *got);
            REQUIRE(x && xb && want && got);
            fill_values(x, n);
            if (bf) /* from bf16: the CPU's rule over the bf16 values (exact in f32) */
                for (uint64_t k = 0; k < n; k++) {
                    xb[k] = pgd_f32_to_bf16(x[k]);
                    x[k] = pgd_bf16_to_f32(xb[k]);
                }
            pgd_quantize_row_q4_1(x, want, (int64_t)n);
            void *src = bf ? gt_upload(xb, n * 2) : gt_upload(x, n * sizeof *x);
            pgd_q4_mat m;
            REQUIRE(src && alloc_form(rows + 2, cols, &m));
            CHECK_EQ_INT(pgd_cuda_q4_quantize(src, bf, (int64_t)rows, (int64_t)cols, m, NULL), 0);
            CHECK(download_blocks(m, rows, cols, 2, got) == 0);
            CHECK_EQ_INT(gt_count_diff("quantize", want, got, n / 32, sizeof *want), 0);
            free_form(m);
            cudaFree(src);
            free(x);
            free(xb);
            free(want);
            free(got);
        }
}

/* Random Q4_1 blocks: finite f16 d and m of both signs, every nibble. */
static void random_blocks(pgd_block_q4_1 *blocks, uint64_t n) {
    for (uint64_t b = 0; b < n; b++) {
        blocks[b].d = (uint16_t)(gt_next() & 0xBBFF);
        blocks[b].m = (uint16_t)(gt_next() & 0xBBFF);
        for (int j = 0; j < 16; j++) blocks[b].qs[j] = (uint8_t)gt_next();
    }
    blocks[0].qs[0] = 0xF0; /* element 0: 0, element 16: 15 */
    blocks[0].qs[15] = 0x0F;
}

/* blocks [V][E / 32] uploaded at an odd address as GGUF bytes, split into m. */
static void split_blocks(const pgd_block_q4_1 *blocks, uint64_t V, uint64_t E, pgd_q4_mat m) {
    const uint64_t nb = E / 32;
    uint8_t *raw = malloc(V * nb * 20 + 1);
    REQUIRE(raw);
    for (uint64_t b = 0; b < V * nb; b++) {
        raw[1 + 20 * b] = (uint8_t)blocks[b].d;
        raw[2 + 20 * b] = (uint8_t)(blocks[b].d >> 8);
        raw[3 + 20 * b] = (uint8_t)blocks[b].m;
        raw[4 + 20 * b] = (uint8_t)(blocks[b].m >> 8);
        memcpy(raw + 5 + 20 * b, blocks[b].qs, 16);
    }
    uint8_t *src = gt_upload(raw, V * nb * 20 + 1);
    REQUIRE(src);
    CHECK_EQ_INT(pgd_cuda_q4_split(src + 1, (int64_t)V, (int64_t)E, m, NULL), 0);
    cudaFree(src);
    free(raw);
}

static void test_split_and_embed(void) {
    const uint64_t V = 37, E = 160, nb = E / 32;
    pgd_block_q4_1 *blocks = malloc(V * nb * sizeof *blocks), *got = malloc(V * nb * sizeof *got);
    REQUIRE(blocks && got);
    random_blocks(blocks, V * nb);
    pgd_q4_mat m;
    REQUIRE(alloc_form(V + 1, E, &m));
    split_blocks(blocks, V, E, m);
    CHECK(download_blocks(m, V, E, 1, got) == 0);
    CHECK_EQ_INT(gt_count_diff("split", blocks, got, V * nb, sizeof *blocks), 0);

    enum { T = 9 };
    const int32_t tokens[T] = {0, 36, 5, 5, 17, 1, 36, 0, 20};
    float want[T * 160], out[T * 160];
    for (int t = 0; t < T; t++)
        for (uint64_t e = 0; e < E; e++) {
            const pgd_block_q4_1 *b = &blocks[(uint64_t)tokens[t] * nb + e / 32];
            const uint32_t j = (uint32_t)(e % 32), q = j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4;
            want[t * E + e] = fmaf(pgd_f16_to_f32(b->d), (float)q, pgd_f16_to_f32(b->m));
        }
    int32_t *d_tok = gt_upload(tokens, sizeof tokens);
    float *x = gt_poisoned(sizeof out);
    REQUIRE(d_tok && x);
    CHECK_EQ_INT(pgd_cuda_q4_embed(m, d_tok, T, (uint32_t)E, x, NULL), 0);
    CHECK(gt_download(out, x, sizeof out) == 0);
    CHECK_EQ_INT(gt_count_diff("embed", want, out, T * E, sizeof *out), 0);
    cudaFree(x);
    cudaFree(d_tok);
    free_form(m);
    free(blocks);
    free(got);
}

/* pgd_cuda_q4_rows_bf16: rows [row0, row0 + R) of random blocks (every nibble, f16 scales and
 * offsets of every magnitude) equal pgd_f32_to_bf16(fmaf(f16(d), q, f16(m))) — nibble order,
 * the rounding to bf16 and the row offset included; the row after them stays poison. */
static void test_rows_bf16(void) {
    const uint64_t V = 41, E = 224, nb = E / 32, row0 = 6, R = 33;
    pgd_block_q4_1 *blocks = malloc(V * nb * sizeof *blocks);
    uint16_t *want = malloc((R + 1) * E * 2), *out = malloc((R + 1) * E * 2);
    REQUIRE(blocks && want && out);
    random_blocks(blocks, V * nb);
    pgd_q4_mat m;
    REQUIRE(alloc_form(V, E, &m));
    split_blocks(blocks, V, E, m);
    for (uint64_t r = 0; r < R; r++)
        for (uint64_t e = 0; e < E; e++) {
            const pgd_block_q4_1 *b = &blocks[(row0 + r) * nb + e / 32];
            const uint32_t j = (uint32_t)(e % 32), q = j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4;
            want[r * E + e] =
                pgd_f32_to_bf16(fmaf(pgd_f16_to_f32(b->d), (float)q, pgd_f16_to_f32(b->m)));
        }
    for (uint64_t e = 0; e < E; e++) want[R * E + e] = 0xFFFF; /* the poisoned row after */
    uint16_t *d_out = gt_poisoned((R + 1) * E * 2);
    REQUIRE(d_out);
    CHECK_EQ_INT(pgd_cuda_q4_rows_bf16(m, row0, (uint32_t)R, (uint32_t)E, d_out, NULL), 0);
    CHECK(gt_download(out, d_out, (R + 1) * E * 2) == 0);
    CHECK_EQ_INT(gt_count_diff("rows_bf16", want, out, (R + 1) * E, 2), 0);
    CHECK_EQ_INT(pgd_cuda_q4_rows_bf16(m, 0, 1, 40, d_out, NULL), PGD_EINVAL); /* K % 32 */
    CHECK_EQ_INT(pgd_cuda_q4_rows_bf16(m, 0, 1, (uint32_t)E, d_out + 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q4_rows_bf16(m, 0, 0, (uint32_t)E, d_out, NULL), 0); /* nothing */
    cudaFree(d_out);
    free_form(m);
    free(blocks);
    free(want);
    free(out);
}

/* Q4_0 and Q4_K rows through pgd_q4_blocks and the split: the blocks back, and their values the
 * CPU's dequantization of the rows (Q4_0 exactly; Q4_K within its re-blocked scales' rounding,
 * test_reblock.c's bound, here a loose 1e-3 of the row's largest value). */
static void test_from_file_types(void) {
    static const uint32_t types[] = {PGD_TYPE_Q4_0, PGD_TYPE_Q4_K};
    const uint64_t rows = 5, cols = 512, nb = rows * cols / 32;
    for (size_t t = 0; t < PGD_ARRAY_LEN(types); t++) {
        const pgd_type_traits *tt = pgd_type_info(types[t]);
        REQUIRE(tt);
        const uint64_t bytes = rows * cols / tt->block_size * tt->type_size;
        uint8_t *raw = malloc(bytes);
        float *want = malloc(rows * cols * sizeof *want);
        pgd_block_q4_1 *blocks = malloc(nb * sizeof *blocks), *got = malloc(nb * sizeof *got);
        REQUIRE(raw && want && blocks && got);
        for (uint64_t i = 0; i < bytes; i++) raw[i] = (uint8_t)gt_next();
        /* small finite scales: every f16 at a header spot (Q4_0: each block's d; Q4_K: d, dmin) */
        for (uint64_t b = 0; b < bytes / tt->type_size; b++) {
            uint8_t *blk = raw + b * tt->type_size;
            for (int h = 0; h < (types[t] == PGD_TYPE_Q4_K ? 2 : 1); h++)
                blk[2 * h + 1] &= 0x1B; /* |value| < 2^-8 .. : no overflow in 8 d or d sc */
        }
        REQUIRE(pgd_dequant_row(types[t], raw, want, (int64_t)(rows * cols)) == 0);
        CHECK_EQ_INT(pgd_q4_blocks(types[t], raw, blocks, (int64_t)(rows * cols)), 0);
        pgd_q4_mat m;
        REQUIRE(alloc_form(rows, cols, &m));
        split_blocks(blocks, rows, cols, m);
        CHECK(download_blocks(m, rows, cols, 0, got) == 0);
        CHECK_EQ_INT(gt_count_diff("file blocks", blocks, got, nb, sizeof *blocks), 0);
        float amax = 0.0f, err = 0.0f;
        for (uint64_t e = 0; e < rows * cols; e++) {
            const pgd_block_q4_1 *b = &got[e / 32];
            const uint32_t j = (uint32_t)(e % 32), q = j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4;
            const float v = fmaf(pgd_f16_to_f32(b->d), (float)q, pgd_f16_to_f32(b->m));
            amax = fmaxf(amax, fabsf(want[e]));
            err = fmaxf(err, fabsf(v - want[e]));
        }
        printf("  %s: worst |error| %.3g of largest %.3g\n", tt->name, (double)err, (double)amax);
        if (types[t] == PGD_TYPE_Q4_0)
            CHECK(err == 0.0f);
        else
            CHECK(err <= 1e-3f * amax);
        free_form(m);
        free(raw);
        free(want);
        free(blocks);
        free(got);
    }
}

static void test_errors(void) {
    pgd_q4_mat m;
    REQUIRE(alloc_form(2, 64, &m));
    float *x = gt_poisoned(2 * 64 * sizeof(float));
    REQUIRE(x);
    CHECK_EQ_INT(pgd_cuda_q4_quantize(x, 0, 2, 48, m, NULL), PGD_EINVAL); /* cols % 32 */
    CHECK_EQ_INT(pgd_cuda_q4_quantize(x, 0, -1, 64, m, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q4_quantize((char *)x + 2, 0, 1, 64, m, NULL), PGD_EINVAL);
    pgd_q4_mat bad = m;
    bad.q += 8; /* values 8-byte aligned only */
    CHECK_EQ_INT(pgd_cuda_q4_quantize(x, 0, 1, 32, bad, NULL), PGD_EINVAL);
    bad = m;
    bad.dm = (uint32_t *)((char *)m.dm + 2);
    CHECK_EQ_INT(pgd_cuda_q4_split(x, 1, 32, bad, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q4_embed(m, NULL, 1, 40, x, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q4_quantize(x, 0, 0, 64, m, NULL), 0); /* no rows: nothing to do */
    cudaFree(x);
    free_form(m);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_quantize);
    RUN(test_split_and_embed);
    RUN(test_rows_bf16);
    RUN(test_from_file_types);
    RUN(test_errors);
    return test_summary();
}
