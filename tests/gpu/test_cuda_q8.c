/*
 * tests/gpu/test_cuda_q8.c — the 8-bit weights' making and gathering (kernels/cuda/q8.h) against
 * the CPU: pgd_cuda_q8_quantize equals pgd_quantize_row_q8_0 (the CPU's requantization) bit for
 * bit from f32 and from bf16 values — random values, all-zero blocks, blocks whose largest value
 * is negative, values on rounding ties (x = (k + 1/2) d); pgd_cuda_q8_split equals the Q8_0
 * blocks it is given, read back into blocks; pgd_cuda_q8_embed equals f16(d) * q of the asked
 * rows; pgd_cuda_q8_rows_bf16 equals those values rounded to bf16 (pgd_f32_to_bf16) from any
 * row on; the planes' edges (rows past the asked ones untouched: poisoned and left so); bad
 * shapes and alignments refused. Outputs poisoned before each run; the seed is printed. Exit 77
 * (skipped) without a GPU. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/q8.h"
#include "testutil.h"
#include "gpu_testutil.h"

/* THE FORM's planes of rows x cols downloaded and put back into Q8_0 blocks [rows][cols / 32]
 * (34 bytes each), with `extra` more rows of poison checked to stay poison. 0, or -1. */
static int download_blocks(pgd_q8_mat m, uint64_t rows, uint64_t cols, uint64_t extra,
                           pgd_block_q8_0 *out) {
    const uint64_t nb = cols / 32, all = rows + extra;
    int8_t *q = malloc(all * cols);
    uint16_t *d = malloc(all * nb * 2);
    int rc = -1;
    if (q && d && !gt_download(q, m.q, all * cols) && !gt_download(d, m.d, all * nb * 2)) {
        rc = 0;
        for (uint64_t b = 0; b < rows * nb; b++) {
            out[b].d = d[b];
            memcpy(out[b].qs, q + b * 32, 32);
        }
        for (uint64_t i = rows * cols; i < all * cols; i++) rc |= q[i] != -1 ? -1 : 0;
        for (uint64_t i = rows * nb; i < all * nb; i++) rc |= d[i] != 0xFFFF ? -1 : 0;
        if (rc) fprintf(stderr, "  rows past the asked ones were written\n");
    }
    free(q);
    free(d);
    return rc;
}

static bool alloc_form(uint64_t rows, uint64_t cols, pgd_q8_mat *m) {
    m->q = gt_poisoned(rows * cols);
    m->d = gt_poisoned(rows * (cols / 32) * 2);
    return m->q && m->d;
}

static void free_form(pgd_q8_mat m) {
    cudaFree(m.q);
    cudaFree(m.d);
}

/* Random values with the patterns the rounding rule cares about, block by block. */
static void fill_values(float *x, uint64_t n) {
    for (uint64_t b = 0; b < n / 32; b++) {
        float *v = x + b * 32;
        const uint32_t kind = gt_urand(6);
        const float scale = (float)(gt_urand(2000) + 1) / 1000.0f;
        for (int j = 0; j < 32; j++) v[j] = gt_frand() * scale;
        if (kind == 0) memset(v, 0, 32 * sizeof *v);    /* d = 0: every q 0 */
        if (kind == 1) v[gt_urand(32)] = -2.0f * scale; /* the largest is negative: q -127 */
        if (kind == 2) { /* ties: x = (k + 1/2) d for a d exact in f16 */
            const float d = 1.0f / 64.0f;
            v[0] = 127.0f * d;
            for (int j = 1; j < 32; j++) v[j] = ((float)gt_urand(253) - 126.0f + 0.5f) * d;
        }
        if (kind == 3) v[gt_urand(32)] = 1e-30f; /* a tiny value among others */
        if (kind == 4)
            for (int j = 0; j < 32; j++) v[j] *= 1e-6f; /* d in f16's subnormal range */
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
            pgd_block_q8_0 *want = malloc(n / 32 * sizeof *want),
                           *got = malloc(n / 32 * sizeof *got);
            REQUIRE(x && xb && want && got);
            fill_values(x, n);
            if (bf) /* from bf16: the CPU's rule over the bf16 values (exact in f32) */
                for (uint64_t k = 0; k < n; k++) {
                    xb[k] = pgd_f32_to_bf16(x[k]);
                    x[k] = pgd_bf16_to_f32(xb[k]);
                }
            pgd_quantize_row_q8_0(x, want, (int64_t)n);
            void *src = bf ? gt_upload(xb, n * 2) : gt_upload(x, n * sizeof *x);
            pgd_q8_mat m;
            REQUIRE(src && alloc_form(rows + 2, cols, &m));
            CHECK_EQ_INT(pgd_cuda_q8_quantize(src, bf, (int64_t)rows, (int64_t)cols, m, NULL), 0);
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

static void test_split_and_embed(void) {
    const uint64_t V = 37, E = 160, nb = E / 32;
    pgd_block_q8_0 *blocks = malloc(V * nb * sizeof *blocks), *got = malloc(V * nb * sizeof *got);
    REQUIRE(blocks && got);
    for (uint64_t b = 0; b < V * nb; b++) { /* random finite f16 scales, every int8 value */
        blocks[b].d = (uint16_t)(gt_next() & 0xBBFF);
        for (int j = 0; j < 32; j++) blocks[b].qs[j] = (int8_t)gt_next();
    }
    blocks[0].qs[0] = -128;
    blocks[0].qs[1] = 127;
    /* the GGUF bytes: blocks of 34 one after the other, at an odd address */
    uint8_t *raw = malloc(V * nb * 34 + 1);
    REQUIRE(raw);
    for (uint64_t b = 0; b < V * nb; b++) {
        raw[1 + 34 * b] = (uint8_t)blocks[b].d;
        raw[2 + 34 * b] = (uint8_t)(blocks[b].d >> 8);
        memcpy(raw + 3 + 34 * b, blocks[b].qs, 32);
    }
    uint8_t *src = gt_upload(raw, V * nb * 34 + 1);
    pgd_q8_mat m;
    REQUIRE(src && alloc_form(V + 1, E, &m));
    CHECK_EQ_INT(pgd_cuda_q8_split(src + 1, (int64_t)V, (int64_t)E, m, NULL), 0);
    CHECK(download_blocks(m, V, E, 1, got) == 0);
    CHECK_EQ_INT(gt_count_diff("split", blocks, got, V * nb, sizeof *blocks), 0);

    enum { T = 9 };
    const int32_t tokens[T] = {0, 36, 5, 5, 17, 1, 36, 0, 20};
    float want[T * 160], out[T * 160];
    for (int t = 0; t < T; t++)
        for (uint64_t e = 0; e < E; e++) {
            const pgd_block_q8_0 *b = &blocks[(uint64_t)tokens[t] * nb + e / 32];
            want[t * E + e] = pgd_f16_to_f32(b->d) * (float)b->qs[e % 32];
        }
    int32_t *d_tok = gt_upload(tokens, sizeof tokens);
    float *x = gt_poisoned(sizeof out);
    REQUIRE(d_tok && x);
    CHECK_EQ_INT(pgd_cuda_q8_embed(m, d_tok, T, (uint32_t)E, x, NULL), 0);
    CHECK(gt_download(out, x, sizeof out) == 0);
    CHECK_EQ_INT(gt_count_diff("embed", want, out, T * E, sizeof *out), 0);
    cudaFree(x);
    cudaFree(d_tok);
    free_form(m);
    cudaFree(src);
    free(raw);
    free(blocks);
    free(got);
}

/* pgd_cuda_q8_rows_bf16: rows [row0, row0 + R) of random blocks (every int8 value, f16 scales of
 * every magnitude: products of up to 19 significant bits, so the rounding to bf16 and its ties
 * are met) equal pgd_f32_to_bf16(f16(d) * q); the row after them stays poison. */
static void test_rows_bf16(void) {
    const uint64_t V = 41, E = 224, nb = E / 32, row0 = 6, R = 33;
    pgd_block_q8_0 *blocks = malloc(V * nb * sizeof *blocks);
    uint8_t *raw = malloc(V * nb * 34);
    uint16_t *want = malloc((R + 1) * E * 2), *out = malloc((R + 1) * E * 2);
    REQUIRE(blocks && raw && want && out);
    for (uint64_t b = 0; b < V * nb; b++) {
        blocks[b].d = (uint16_t)(gt_next() & 0xBBFF);
        for (int j = 0; j < 32; j++) blocks[b].qs[j] = (int8_t)gt_next();
        raw[34 * b] = (uint8_t)blocks[b].d;
        raw[34 * b + 1] = (uint8_t)(blocks[b].d >> 8);
        memcpy(raw + 34 * b + 2, blocks[b].qs, 32);
    }
    uint8_t *src = gt_upload(raw, V * nb * 34);
    pgd_q8_mat m;
    REQUIRE(src && alloc_form(V, E, &m));
    CHECK_EQ_INT(pgd_cuda_q8_split(src, (int64_t)V, (int64_t)E, m, NULL), 0);
    for (uint64_t r = 0; r < R; r++)
        for (uint64_t e = 0; e < E; e++) {
            const pgd_block_q8_0 *b = &blocks[(row0 + r) * nb + e / 32];
            want[r * E + e] = pgd_f32_to_bf16(pgd_f16_to_f32(b->d) * (float)b->qs[e % 32]);
        }
    for (uint64_t e = 0; e < E; e++) want[R * E + e] = 0xFFFF; /* the poisoned row after */
    uint16_t *d_out = gt_poisoned((R + 1) * E * 2);
    REQUIRE(d_out);
    CHECK_EQ_INT(pgd_cuda_q8_rows_bf16(m, row0, (uint32_t)R, (uint32_t)E, d_out, NULL), 0);
    CHECK(gt_download(out, d_out, (R + 1) * E * 2) == 0);
    CHECK_EQ_INT(gt_count_diff("rows_bf16", want, out, (R + 1) * E, 2), 0);
    CHECK_EQ_INT(pgd_cuda_q8_rows_bf16(m, 0, 1, 40, d_out, NULL), PGD_EINVAL); /* K % 32 */
    CHECK_EQ_INT(pgd_cuda_q8_rows_bf16(m, 0, 1, (uint32_t)E, d_out + 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q8_rows_bf16(m, 0, 0, (uint32_t)E, d_out, NULL), 0); /* nothing */
    cudaFree(d_out);
    cudaFree(src);
    free_form(m);
    free(blocks);
    free(raw);
    free(want);
    free(out);
}

static void test_errors(void) {
    pgd_q8_mat m;
    REQUIRE(alloc_form(2, 64, &m));
    float *x = gt_poisoned(2 * 64 * sizeof(float));
    REQUIRE(x);
    CHECK_EQ_INT(pgd_cuda_q8_quantize(x, 0, 2, 48, m, NULL), PGD_EINVAL); /* cols % 32 */
    CHECK_EQ_INT(pgd_cuda_q8_quantize(x, 0, -1, 64, m, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q8_quantize((char *)x + 2, 0, 1, 64, m, NULL), PGD_EINVAL);
    pgd_q8_mat bad = m;
    bad.q += 8; /* values 8-byte aligned only */
    CHECK_EQ_INT(pgd_cuda_q8_quantize(x, 0, 1, 32, bad, NULL), PGD_EINVAL);
    bad = m;
    bad.d = (uint16_t *)((char *)m.d + 1);
    CHECK_EQ_INT(pgd_cuda_q8_split(x, 1, 32, bad, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q8_embed(m, NULL, 1, 40, x, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_q8_quantize(x, 0, 0, 64, m, NULL), 0); /* no rows: nothing to do */
    cudaFree(x);
    free_form(m);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_quantize);
    RUN(test_split_and_embed);
    RUN(test_rows_bf16);
    RUN(test_errors);
    return test_summary();
}
