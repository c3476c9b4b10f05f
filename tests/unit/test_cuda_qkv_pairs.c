/*
 * tests/unit/test_cuda_qkv_pairs.c — the QKV row's column pairs of the one-row QKV GEMV that ends
 * in RoPE (kernels/cuda/qkv_pairs.h), on the CPU: every column of the row in exactly one pair,
 * both columns of a pair in one head, a pair rotated exactly when it is a q or k head's dimension
 * below rope_dim; and rotating a random row pair by pair (bias added first, as the kernel does)
 * gives the q part and the slab's k and v of pgd_cuda_rope_kv_twin (rope_kv_twin.c, which follows
 * the CPU's own RoPE) bit for bit — in Llama, Qwen2 (neox), partial-rotation and no-rotation
 * shapes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/qkv_pairs.h"
#include "kernels/cuda/rope_kv.h"
#include "testutil.h"

typedef struct {
    uint32_t H, HKV, D, RD;
    bool neox;
} shape;

static const shape k_shapes[] = {
    {32, 8, 128, 128, false}, {32, 8, 128, 128, true}, {14, 2, 64, 64, true},
    {3, 1, 80, 32, true},     {3, 1, 80, 32, false},   {2, 1, 8, 0, false},
};

static void test_cover(void) {
    for (size_t s = 0; s < PGD_ARRAY_LEN(k_shapes); s++) {
        const shape *sh = &k_shapes[s];
        const uint32_t D = sh->D, QKV = (sh->H + 2 * sh->HKV) * D, n_qk = sh->H + sh->HKV;
        const uint32_t n = pgd_qkv_pairs(sh->H, sh->HKV, D);
        CHECK_EQ_INT(2 * n, QKV);
        uint8_t *seen = calloc(QKV, 1);
        REQUIRE(seen);
        uint32_t bad = 0, rotated = 0;
        for (uint32_t u = 0; u < n; u++) {
            const pgd_qkv_pair p = pgd_qkv_pair_at(sh->H, sh->HKV, D, sh->RD, sh->neox, u);
            bad += p.c0 >= QKV || p.c1 >= QKV || p.d0 >= D || p.d1 >= D || p.d0 == p.d1;
            if (p.c0 < QKV) seen[p.c0]++;
            if (p.c1 < QKV) seen[p.c1]++;
            bad += p.c0 / D != p.h || p.c1 / D != p.h || p.c0 % D != p.d0 || p.c1 % D != p.d1;
            bad += p.rot != (p.h < n_qk && p.d0 < sh->RD);
            if (p.rot) { /* rope_kv.h's pairs: (2i, 2i + 1), or (i, i + RD / 2) */
                rotated++;
                bad += sh->neox ? (p.d0 != p.i || p.d1 != p.i + sh->RD / 2)
                                : (p.d0 != 2 * p.i || p.d1 != 2 * p.i + 1);
            } else {
                bad += p.d1 != p.d0 + 1 || (p.h < n_qk && p.d0 < sh->RD);
            }
        }
        for (uint32_t c = 0; c < QKV; c++) bad += seen[c] != 1;
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(rotated, n_qk * (sh->RD / 2));
        free(seen);
    }
}

/* A row rotated pair by pair against the twin of the RoPE + KV write kernel. */
static void test_rotation(void) {
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (size_t s = 0; s < PGD_ARRAY_LEN(k_shapes); s++) {
        const shape *sh = &k_shapes[s];
        const uint32_t D = sh->D, RD = sh->RD, QKV = (sh->H + 2 * sh->HKV) * D;
        const uint32_t n_qk = sh->H + sh->HKV, pos_at = 1234;
        const pgd_kv_geom g = {.n_layer = 1, .n_kv_head = sh->HKV, .block_size = 4, .head_dim = D};
        const uint64_t nkv = 2 * pgd_kv_block_elems(g);
        float *row = malloc(QKV * sizeof(float)), *want = malloc(QKV * sizeof(float));
        float *bias = malloc(QKV * sizeof(float)), *got = malloc(QKV * sizeof(float));
        float *cs = malloc((RD ? RD : 1) * sizeof(float));
        double *inv = malloc((RD ? RD : 1) * sizeof(double));
        uint16_t *kv = malloc(nkv * sizeof(uint16_t));
        REQUIRE(row && want && bias && got && cs && inv && kv);
        for (uint32_t c = 0; c < QKV; c++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            row[c] = (float)((double)(rng >> 11) * 0x1.0p-53 * 8.0 - 4.0);
            bias[c] = (float)c / (float)QKV - 0.5f;
        }
        pgd_rope_inv_freq(inv, RD, 500000.0f, NULL);
        pgd_rope_cos_sin(cs, inv, RD, pos_at);
        /* the twin over a table whose row pos_at is cs (the other rows unused) */
        float *table = calloc((uint64_t)(pos_at + 1) * (RD ? RD : 1), sizeof(float));
        REQUIRE(table);
        memcpy(table + (uint64_t)pos_at * RD, cs, RD * sizeof(float));
        memcpy(want, row, QKV * sizeof(float));
        memset(kv, 0xFF, nkv * sizeof(uint16_t));
        const int32_t pos = (int32_t)pos_at;
        const int64_t slot = 5;
        pgd_cuda_rope_kv_twin(want, bias, table, &pos, &slot, 1, sh->H, sh->HKV, D, RD, sh->neox,
                              kv, g, 0);
        /* pair by pair: bias, then the rotation (a c - b s, a s + b c, each product rounded) */
        memcpy(got, row, QKV * sizeof(float));
        for (uint32_t u = 0; u < pgd_qkv_pairs(sh->H, sh->HKV, D); u++) {
            const pgd_qkv_pair p = pgd_qkv_pair_at(sh->H, sh->HKV, D, RD, sh->neox, u);
            float a = got[p.c0] + bias[p.c0], b = got[p.c1] + bias[p.c1];
            if (p.rot) {
                const float c = cs[2 * p.i], sn = cs[2 * p.i + 1];
                const float ac = a * c, bs = b * sn, as = a * sn, bc = b * c;
                a = ac - bs;
                b = as + bc;
            }
            got[p.c0] = a, got[p.c1] = b;
        }
        uint32_t bad = 0;
        for (uint32_t c = 0; c < sh->H * D; c++) bad += memcmp(&got[c], &want[c], 4) != 0;
        /* the slab's k and v rows: the pairs' k and v values in f16 */
        for (uint32_t h = sh->H; h < n_qk + sh->HKV; h++) {
            const bool v = h >= n_qk;
            const uint16_t *r = kv + pgd_kv_slot_index(g, slot, 0, v, h - (v ? n_qk : sh->H));
            for (uint32_t d = 0; d < D; d++) bad += r[d] != pgd_f32_to_f16(got[h * D + d]);
        }
        CHECK_EQ_INT(bad, 0);
        free(row), free(want), free(bias), free(got), free(cs), free(inv), free(kv), free(table);
    }
}

int main(void) {
    RUN(test_cover);
    RUN(test_rotation);
    return test_summary();
}
