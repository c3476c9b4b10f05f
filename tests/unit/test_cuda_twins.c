/*
 * tests/unit/test_cuda_twins.c — the CPU twins of the CUDA kernels (kernels/cuda/..._twin.c)
 * against independent CPU references already in the tree: the embedding against
 * pgd_bf16_to_f32, add + RMSNorm against pgd_rmsnorm_f32 (one bf16 ulp: the double sums run in
 * different orders), the q/k head RMSNorm against pgd_rmsnorm_f32 on each head (two f32 ulp;
 * bit-exact where the sums are exact in any order), bias + RoPE + KV write against
 * pgd_rope_apply + pgd_f32_to_f16 + the slab layout written out by hand (bit-exact), SiLU * mul
 * against pgd_swiglu_f32 then bf16 (bit-exact; its bf16-product form against the f32 form on the
 * widened values), the GEMV's sum (gemv.h) against the double-accumulation GEMM twin (within the
 * f32 error bound of its chains) and on a case whose result shows its order, the 8-bit GEMV's
 * (gemv_q8.h) against a double-precision sum of the dequantized weights (within its bound) and on
 * cases that show its order, the 4-bit GEMV's (gemv_q4.h) likewise and on a block worked by hand
 * (the nibble order, d and m); and the f32 -> bf16 rounding on hand-checked values. No GPU needed
 * (label unit); tests/gpu/test_cuda_ops.c then holds each kernel to its twin.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_q4.h"
#include "kernels/cuda/gemv_q8.h"
#include "kernels/cuda/head_norm.h"
#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/silu_mul.h"
#include "testutil.h"

#define TWIN_RNG_SEED 0x9E3779B97F4A7C15ull
#include "twin_rng.h"
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* A bf16 value's place on the number line (+0 and -0 at 0): adjacent values differ by 1. */
static int64_t bf16_ord(uint16_t h) {
    return (h & 0x8000u) ? -(int64_t)(h & 0x7fffu) : (int64_t)h;
}
/* The same for an f32 value. */
static int64_t f32_ord(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
}

static void test_bf16_round(void) {
    static const struct {
        uint32_t f;
        uint16_t bf;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x40490fdbu, 0x4049}, /* pi, rounded down */
        {0x3f807fffu, 0x3f80}, /* just below the tie */
        {0x3f808000u, 0x3f80}, /* tie, even stays */
        {0x3f808001u, 0x3f81}, /* just above the tie */
        {0x3f818000u, 0x3f82}, /* tie, odd rounds up to even */
        {0xbf818000u, 0xbf82}, /* the same, negative */
        {0x7f7f7fffu, 0x7f7f}, /* below the tie under FLT_MAX's bf16 */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to inf */
        {0x7f800000u, 0x7f80}, /* +inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x7fc00000u, 0x7fc0}, /* quiet NaN */
        {0x7f800001u, 0x7fc0}, /* signalling NaN, low payload: stays NaN (not inf), quiet */
        {0x7fa00000u, 0x7fe0}, /* NaN payload's top bits kept */
        {0xffc00000u, 0xffc0}, /* -NaN */
        {0x00000000u, 0x0000}, /* +0 */
        {0x80000000u, 0x8000}, /* -0 */
        {0x00000001u, 0x0000}, /* smallest subnormal, rounds to 0 */
        {0x80000001u, 0x8000}, /* ... keeping the sign */
        {0x00008000u, 0x0000}, /* subnormal tie, even stays */
        {0x00018000u, 0x0002}, /* subnormal tie, odd rounds up */
        {0x00010000u, 0x0001}, /* smallest bf16 subnormal, exact */
        {0x007fffffu, 0x0080}, /* largest subnormal rounds to the smallest normal */
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        uint16_t got = pgd_f32_to_bf16(bits_f32(cases[i].f));
        if (got != cases[i].bf)
            fprintf(stderr, "  bf16(0x%08x) = 0x%04x, want 0x%04x\n", cases[i].f, got, cases[i].bf);
        CHECK(got == cases[i].bf);
    }
    for (int i = 0; i < 1000; i++) { /* every finite bf16 value converts back to itself */
        uint16_t h = (uint16_t)next();
        if ((h & 0x7f80u) == 0x7f80u) continue;
        CHECK(pgd_f32_to_bf16(pgd_bf16_to_f32(h)) == h);
    }
}

static void test_embed(void) {
    static const uint32_t Es[] = {1, 7, 256, 257}, Ts[] = {1, 3, 17};
    const uint32_t V = 50;
    for (size_t ie = 0; ie < PGD_ARRAY_LEN(Es); ie++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++) {
            const uint32_t E = Es[ie], T = Ts[it];
            uint16_t *table = malloc(sizeof(uint16_t) * V * E);
            float *x = malloc(sizeof(float) * T * E);
            int32_t tokens[17];
            REQUIRE(table && x);
            for (uint32_t i = 0; i < V * E; i++) table[i] = (uint16_t)next(); /* any bits */
            for (uint32_t t = 0; t < T; t++) tokens[t] = (int32_t)urand(V);
            pgd_cuda_embed_twin(table, tokens, T, E, x);
            int bad = 0;
            for (uint32_t t = 0; t < T; t++)
                for (uint32_t e = 0; e < E; e++) {
                    float want = pgd_bf16_to_f32(table[(uint32_t)tokens[t] * E + e]);
                    bad += memcmp(&x[t * E + e], &want, sizeof want) != 0;
                }
            CHECK_EQ_INT(bad, 0);
            free(table);
            free(x);
        }
}

static void test_rmsnorm(void) {
    static const uint32_t Es[] = {1, 7, 255, 256, 257, 1000, 4099}, Rs[] = {1, 3, 17};
    const float eps = 1e-5f;
    for (size_t ie = 0; ie < PGD_ARRAY_LEN(Es); ie++)
        for (size_t ir = 0; ir < PGD_ARRAY_LEN(Rs); ir++)
            for (int mode = 0; mode < 4; mode++) { /* bit 0: add; bit 1: a rows list */
                const uint32_t E = Es[ie], R = Rs[ir], N = R + 4;
                const bool with_add = mode & 1, with_rows = mode & 2;
                float *x = malloc(sizeof(float) * N * E), *xref = malloc(sizeof(float) * N * E);
                float *add = malloc(sizeof(float) * N * E), *w = malloc(sizeof(float) * E);
                float *y = malloc(sizeof(float) * E);
                uint16_t *out = malloc(sizeof(uint16_t) * R * E), one[4099];
                uint32_t rows[17], perm[21];
                REQUIRE(x && xref && add && w && y && out);
                for (uint32_t i = 0; i < N * E; i++) x[i] = frand() * 8, add[i] = frand();
                for (uint32_t e = 0; e < E; e++) w[e] = frand() * 2;
                for (uint32_t i = 0; i < N; i++) perm[i] = i;
                for (uint32_t i = N - 1; i > 0; i--) { /* distinct rows, in shuffled order */
                    uint32_t j = urand(i + 1), tmp = perm[i];
                    perm[i] = perm[j], perm[j] = tmp;
                }
                for (uint32_t i = 0; i < R; i++) rows[i] = with_rows ? perm[i] : i;
                memcpy(xref, x, sizeof(float) * N * E);
                pgd_cuda_add_rmsnorm_twin(x, with_add ? add : NULL, w, eps, with_rows ? rows : NULL,
                                          R, E, out);
                int64_t far = 0, off = 0;
                for (uint32_t i = 0; i < R; i++) {
                    float *xr = xref + (uint64_t)rows[i] * E;
                    if (with_add)
                        for (uint32_t e = 0; e < E; e++) xr[e] += add[(uint64_t)rows[i] * E + e];
                    pgd_rmsnorm_f32(xr, w, y, E, eps);
                    for (uint32_t e = 0; e < E; e++) {
                        int64_t d = bf16_ord(out[i * E + e]) - bf16_ord(pgd_f32_to_bf16(y[e]));
                        far += d < -1 || d > 1;
                        off += d != 0;
                    }
                }
                CHECK_EQ_INT(far, 0);
                if (off * 100 > (int64_t)R * E)
                    fprintf(stderr, "  E %u R %u: %lld of %u outputs one ulp off\n", E, R,
                            (long long)off, R * E);
                CHECK(off * 100 <= (int64_t)R * E); /* the sums' order moves few roundings */
                CHECK(memcmp(x, xref, sizeof(float) * N * E) == 0); /* the add, exactly */
                /* A row alone gives the bits it had among the others. */
                if (!with_add) {
                    pgd_cuda_add_rmsnorm_twin(x, NULL, w, eps, &rows[R - 1], 1, E, one);
                    CHECK(memcmp(one, out + (uint64_t)(R - 1) * E, sizeof(uint16_t) * E) == 0);
                }
                free(x), free(xref), free(add), free(w), free(y), free(out);
            }
}

/* The q/k head RMSNorm (qwen3) against pgd_rmsnorm_f32 on each head. exact: inputs k * 2^-8,
 * |k| <= 512, whose squares' sums are exact in double in any order: then the same bits; else
 * at most 2 f32 ulp apart (the double sum's order can move the f32 scale by one ulp), and
 * rarely off at all. v and padding rows (pos < 0) untouched. */
static void head_norm_case(uint32_t Hq, uint32_t Hk, uint32_t D, uint32_t T, bool exact) {
    const uint32_t W = (Hq + 2 * Hk) * D;
    const float eps = 1e-6f;
    float *qkv = malloc(sizeof(float) * T * W), *orig = malloc(sizeof(float) * T * W);
    float *qw = malloc(sizeof(float) * D), *kw = malloc(sizeof(float) * D);
    float *y = malloc(sizeof(float) * D);
    int32_t pos[17];
    REQUIRE(qkv && orig && qw && kw && y && T <= 17);
    for (uint32_t i = 0; i < T * W; i++)
        orig[i] = qkv[i] = exact ? (float)((int32_t)urand(1025) - 512) / 256.0f : frand() * 4;
    for (uint32_t e = 0; e < D; e++) qw[e] = 1.0f + frand() * 0.5f, kw[e] = 0.5f + frand();
    for (uint32_t t = 0; t < T; t++) pos[t] = (int32_t)urand(1000);
    if (T > 2) pos[T / 2] = -1; /* a padding row */
    pgd_cuda_head_rmsnorm_twin(qkv, qw, kw, eps, pos, T, Hq, Hk, D);
    int64_t far = 0, off = 0, worst = 0, untouched_bad = 0;
    for (uint32_t t = 0; t < T; t++) {
        const float *row = qkv + (uint64_t)t * W, *o = orig + (uint64_t)t * W;
        if (pos[t] < 0) {
            untouched_bad += memcmp(row, o, sizeof(float) * W) != 0;
            continue;
        }
        untouched_bad +=
            memcmp(row + (Hq + Hk) * D, o + (Hq + Hk) * D, sizeof(float) * Hk * D) != 0; /* v */
        for (uint32_t h = 0; h < Hq + Hk; h++) {
            pgd_rmsnorm_f32(o + (uint64_t)h * D, h < Hq ? qw : kw, y, D, eps);
            for (uint32_t e = 0; e < D; e++) {
                int64_t d = f32_ord(row[(uint64_t)h * D + e]) - f32_ord(y[e]);
                d = d < 0 ? -d : d;
                worst = d > worst ? d : worst;
                far += d > 2;
                off += d != 0;
            }
        }
    }
    CHECK_EQ_INT(untouched_bad, 0);
    CHECK_EQ_INT(far, 0);
    if (exact) CHECK_EQ_INT(off, 0);
    const int64_t n = (int64_t)T * (Hq + Hk) * D;
    if (off * 100 > n)
        fprintf(stderr, "  head_norm %u+%u heads of %u, T %u: %lld of %lld off (worst %lld ulp)\n",
                Hq, Hk, D, T, (long long)off, (long long)n, (long long)worst);
    CHECK(off * 100 <= n);
    /* a head alone (one token of it) gives the bits it had among the others */
    for (uint32_t t = 0; t < T; t++) {
        if (pos[t] < 0) continue;
        float *one = orig + (uint64_t)t * W;
        pgd_cuda_head_rmsnorm_twin(one, qw, kw, eps, &pos[t], 1, Hq, Hk, D);
        CHECK(memcmp(one, qkv + (uint64_t)t * W, sizeof(float) * W) == 0);
        break;
    }
    free(qkv), free(orig), free(qw), free(kw), free(y);
}

static void test_head_norm(void) {
    static const uint32_t shapes[][3] = {
        {16, 8, 128},                          /* Qwen3-0.6B */
        {32, 8, 128},                          /* Qwen3-8B */
        {4, 2, 64},   {3, 1, 64}, {5, 1, 128}, /* odd head counts */
        {4, 2, 32},   {3, 3, 7},  {1, 1, 33},  /* fewer elements than lanes; a lane with two */
        {2, 1, 256},                           /* the widest head */
    };
    static const uint32_t Ts[] = {1, 3, 17};
    for (size_t s = 0; s < PGD_ARRAY_LEN(shapes); s++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++)
            for (int exact = 0; exact < 2; exact++)
                head_norm_case(shapes[s][0], shapes[s][1], shapes[s][2], Ts[it], exact);
}

typedef struct {
    uint32_t n_head, n_kv_head, head_dim, rope_dim;
    bool neox;
} rope_shape;

static void rope_case(const rope_shape *sh, uint32_t T, bool with_bias) {
    const uint32_t D = sh->head_dim, Hq = sh->n_head, Hk = sh->n_kv_head, RD = sh->rope_dim;
    const uint32_t W = (Hq + 2 * Hk) * D, bs = 16, n_pos = 300, layer = 1;
    const pgd_kv_geom g = {.n_layer = 2, .n_kv_head = Hk, .block_size = bs, .head_dim = D};
    const uint32_t n_blocks = 2 * (T + bs - 1) / bs + 2;
    const uint64_t slab_n = n_blocks * pgd_kv_block_elems(g);
    float *qkv = malloc(sizeof(float) * T * W), *orig = malloc(sizeof(float) * T * W);
    float *bias = malloc(sizeof(float) * W), *ref = malloc(sizeof(float) * W);
    float *cos_sin = malloc(sizeof(float) * n_pos * (RD ? RD : 1));
    double *inv = malloc(sizeof(double) * (RD ? RD : 1));
    uint16_t *kv = malloc(sizeof(uint16_t) * slab_n), *want = malloc(sizeof(uint16_t) * slab_n);
    int64_t slots[17], *all = malloc(sizeof(int64_t) * n_blocks * bs);
    int32_t pos[17];
    REQUIRE(qkv && orig && bias && ref && cos_sin && inv && kv && want && all);
    pgd_rope_inv_freq(inv, RD, 10000.0f, NULL);
    for (uint32_t p = 0; p < n_pos; p++) pgd_rope_cos_sin(cos_sin + p * RD, inv, RD, p);
    for (uint32_t i = 0; i < T * W; i++) orig[i] = qkv[i] = frand() * 4;
    for (uint32_t i = 0; i < W; i++) bias[i] = frand();
    /* distinct random slots outside the null block; the last token of several is padding */
    uint32_t n_all = (n_blocks - 1) * bs;
    for (uint32_t i = 0; i < n_all; i++) all[i] = bs + i;
    for (uint32_t t = 0; t < T; t++) {
        uint32_t j = t + urand(n_all - t);
        int64_t tmp = all[t];
        all[t] = all[j], all[j] = tmp;
        slots[t] = all[t];
        pos[t] = (int32_t)urand(n_pos);
    }
    if (T > 1) slots[T - 1] = -1;
    if (T > 2) pos[0] = -1; /* a padding row: untouched, writes nothing */
    memset(kv, 0xA5, sizeof(uint16_t) * slab_n);
    memcpy(want, kv, sizeof(uint16_t) * slab_n);
    pgd_cuda_rope_kv_twin(qkv, with_bias ? bias : NULL, cos_sin, pos, slots, T, Hq, Hk, D, RD,
                          sh->neox, kv, g, layer);
    int bad_q = 0, bad_kv_part = 0;
    for (uint32_t t = 0; t < T; t++) {
        memcpy(ref, orig + (uint64_t)t * W, sizeof(float) * W);
        if (pos[t] < 0) {
            bad_q += memcmp(qkv + (uint64_t)t * W, ref, sizeof(float) * W) != 0;
            continue;
        }
        if (with_bias)
            for (uint32_t i = 0; i < W; i++) ref[i] += bias[i];
        const float *cs = cos_sin + (uint64_t)pos[t] * RD;
        pgd_rope_apply(ref, cs, Hq, D, RD, sh->neox);
        pgd_rope_apply(ref + Hq * D, cs, Hk, D, RD, sh->neox);
        bad_q += memcmp(qkv + (uint64_t)t * W, ref, sizeof(float) * Hq * D) != 0;
        bad_kv_part += memcmp(qkv + (uint64_t)t * W + Hq * D, orig + (uint64_t)t * W + Hq * D,
                              sizeof(float) * 2 * Hk * D) != 0; /* k and v of qkv untouched */
        if (slots[t] < 0) continue;
        const uint64_t block = (uint64_t)slots[t] / bs, off = (uint64_t)slots[t] % bs;
        for (uint32_t kvi = 0; kvi < 2; kvi++)
            for (uint32_t h = 0; h < Hk; h++)
                for (uint32_t d = 0; d < D; d++) {
                    uint64_t at = ((((block * 2 + layer) * 2 + kvi) * Hk + h) * bs + off) * D + d;
                    want[at] = pgd_f32_to_f16(ref[(Hq + kvi * Hk + h) * D + d]);
                }
    }
    CHECK_EQ_INT(bad_q, 0);
    CHECK_EQ_INT(bad_kv_part, 0);
    CHECK(memcmp(kv, want, sizeof(uint16_t) * slab_n) == 0);
    free(qkv), free(orig), free(bias), free(ref), free(cos_sin), free(inv), free(kv), free(want);
    free(all);
}

static void test_rope_kv(void) {
    static const rope_shape shapes[] = {
        {4, 2, 64, 64, false}, {4, 2, 64, 64, true}, {3, 1, 80, 32, true},
        {3, 1, 80, 32, false}, {2, 2, 6, 4, false},  {2, 1, 8, 0, false},
    };
    static const uint32_t Ts[] = {1, 3, 17};
    for (size_t s = 0; s < PGD_ARRAY_LEN(shapes); s++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++)
            for (int b = 0; b < 2; b++) rope_case(&shapes[s], Ts[it], b);
}

static void test_silu_mul(void) {
    static const uint32_t Fs[] = {1, 15, 17, 300}, Ts[] = {1, 3, 17};
    static const float special[] = {0.0f, -0.0f, 200.0f, -200.0f, 1e-30f, -87.5f, -88.5f, -100.0f};
    for (size_t jf = 0; jf < PGD_ARRAY_LEN(Fs); jf++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++) {
            const uint32_t F = Fs[jf], T = Ts[it];
            float *gu = malloc(sizeof(float) * T * 2 * F), *y = malloc(sizeof(float) * F);
            uint16_t *out = malloc(sizeof(uint16_t) * T * F);
            REQUIRE(gu && y && out);
            for (uint32_t i = 0; i < T * 2 * F; i++) gu[i] = frand() * 30;
            for (uint32_t i = 0; i < PGD_ARRAY_LEN(special) && i < T * F; i++)
                gu[(i / F) * 2 * F + i % F] = special[i];
            pgd_cuda_silu_mul_twin(gu, T, F, out);
            int bad = 0;
            for (uint32_t t = 0; t < T; t++) {
                pgd_swiglu_f32(gu + (uint64_t)t * 2 * F, gu + (uint64_t)t * 2 * F + F, y, F);
                for (uint32_t j = 0; j < F; j++) bad += out[t * F + j] != pgd_f32_to_bf16(y[j]);
            }
            CHECK_EQ_INT(bad, 0);
            /* the bf16 form: the f32 form's bits on the values widened from bf16 */
            uint16_t *gu16 = malloc(sizeof(uint16_t) * T * 2 * F),
                     *out16 = malloc(sizeof(uint16_t) * T * F);
            REQUIRE(gu16 && out16);
            for (uint32_t i = 0; i < T * 2 * F; i++) {
                gu16[i] = pgd_f32_to_bf16(gu[i]);
                gu[i] = pgd_bf16_to_f32(gu16[i]);
            }
            pgd_cuda_silu_mul_bf16_twin(gu16, T, F, out16);
            pgd_cuda_silu_mul_twin(gu, T, F, out);
            CHECK(memcmp(out16, out, sizeof(uint16_t) * T * F) == 0);
            free(gu), free(y), free(out), free(gu16), free(out16);
        }
}

/* The GEMV twin: near the exact sum, and in THE SUM's order. */
static void test_gemv(void) {
    static const uint32_t shapes[][3] = {{1, 5, 8}, {3, 37, 584}, {8, 9, 4096}, {2, 4, 14336}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++) {
        const uint32_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        uint16_t *X = malloc((size_t)M * K * 2), *W = malloc((size_t)N * K * 2);
        float *Y = malloc((size_t)M * N * 4), *R = malloc((size_t)M * N * 4);
        REQUIRE(X && W && Y && R);
        for (size_t e = 0; e < (size_t)M * K; e++) X[e] = pgd_f32_to_bf16(frand());
        for (size_t e = 0; e < (size_t)N * K; e++) W[e] = pgd_f32_to_bf16(frand());
        pgd_cuda_gemv_twin(X, W, Y, M, N, K);
        pgd_cuda_gemm_twin(X, W, R, M, N, K);
        /* a lane's chain has at most 8 ceil(K / 256) FMAs, then 5 additions: each result within
         * (that + 1) 2^-24 of the sum of |x w| */
        const double n_ops = 8.0 * ((K + 255) / 256) + 6;
        for (uint32_t m = 0; m < M; m++)
            for (uint32_t n = 0; n < N; n++) {
                double abs_sum = 0;
                for (uint32_t k = 0; k < K; k++)
                    abs_sum += fabs((double)pgd_bf16_to_f32(X[(size_t)m * K + k]) *
                                    pgd_bf16_to_f32(W[(size_t)n * K + k]));
                const double err = fabs((double)Y[m * N + n] - R[m * N + n]);
                if (err > n_ops * 0x1p-24 * abs_sum)
                    fprintf(stderr, "  gemv %ux%ux%u [%u][%u]: %g vs %g\n", M, N, K, m, n,
                            Y[m * N + n], R[m * N + n]);
                CHECK(err <= n_ops * 0x1p-24 * abs_sum);
            }
        free(X);
        free(W);
        free(Y);
        free(R);
    }
    /* the order: K = 33 chunks, 2^30 at element 0 (lane 0), -2^30 at element 8 (lane 1), 1 at
     * element 256 (chunk 32: lane 0 again). Lane 0 rounds 2^30 + 1 to 2^30, lane 1 holds
     * -2^30, the tree gives 0; a plain left-to-right sum would give 1. */
    enum { KO = 33 * 8 };
    uint16_t x[KO], w[KO];
    for (int k = 0; k < KO; k++) x[k] = w[k] = 0;
    x[0] = w[0] = pgd_f32_to_bf16(32768.0f);
    x[8] = pgd_f32_to_bf16(-32768.0f);
    w[8] = pgd_f32_to_bf16(32768.0f);
    x[256] = w[256] = pgd_f32_to_bf16(1.0f);
    float y = -1.0f;
    pgd_cuda_gemv_twin(x, w, &y, 1, 1, KO);
    CHECK(y == 0.0f);
}

/* The 8-bit GEMV twin: near the exact sum of x * (d * q), and in THE SUM's order. */
static void test_gemv_q8(void) {
    static const uint32_t shapes[][3] = {
        {1, 5, 32}, {3, 37, 896}, {2, 3, 1440}, {8, 9, 4096}, {2, 4, 14336}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++) {
        const uint32_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], C = K / 32;
        uint16_t *X = malloc((size_t)M * K * 2), *D = malloc((size_t)N * C * 2);
        int8_t *Q = malloc((size_t)N * K);
        float *Y = malloc((size_t)M * N * 4);
        REQUIRE(X && D && Q && Y);
        for (size_t e = 0; e < (size_t)M * K; e++) X[e] = pgd_f32_to_bf16(frand());
        for (size_t e = 0; e < (size_t)N * K; e++) Q[e] = (int8_t)(uint8_t)urand(256);
        for (size_t e = 0; e < (size_t)N * C; e++) D[e] = pgd_f32_to_f16(frand() * 0.01f);
        D[0] = 0x0001; /* a subnormal scale */
        pgd_cuda_gemv_q8_twin(X, Q, D, Y, M, N, K);
        /* a block's chain of 32 FMAs, its scale's FMA, a lane's ceil(C / 32) blocks, then 5
         * additions: each result within (that + 2) 2^-24 of the sum of |x d q| */
        const double n_ops = 32.0 + (C + 31) / 32 + 8;
        int bad = 0;
        for (uint32_t m = 0; m < M; m++)
            for (uint32_t n = 0; n < N; n++) {
                double sum = 0, abs_sum = 0;
                for (uint32_t k = 0; k < K; k++) {
                    const double t =
                        (double)pgd_bf16_to_f32(X[(size_t)m * K + k]) *
                        ((double)pgd_f16_to_f32(D[(size_t)n * C + k / 32]) * Q[(size_t)n * K + k]);
                    sum += t;
                    abs_sum += fabs(t);
                }
                const double err = fabs((double)Y[m * N + n] - sum);
                if (!(err <= n_ops * 0x1p-24 * abs_sum) && bad++ < 3)
                    fprintf(stderr, "  gemv q8 %ux%ux%u [%u][%u]: %.9g vs %.17g\n", M, N, K, m, n,
                            Y[m * N + n], sum);
            }
        CHECK_EQ_INT(bad, 0);
        free(X), free(D), free(Q), free(Y);
    }
    /* the order within a block: x q = 1, 2^24, 1, -2^24 at elements 0 .. 3; the chain rounds
     * 1 + 2^24 and then 2^24 + 1 to 2^24 (ties to even) and ends at 0, where the exact sum is 2
     * (backwards: 2; in swapped pairs: 1) */
    enum { KO = 33 * 32 };
    uint16_t x[KO], d[KO / 32];
    int8_t q[KO];
    for (int k = 0; k < KO; k++) x[k] = 0, q[k] = 0;
    for (int b = 0; b < KO / 32; b++) d[b] = pgd_f32_to_f16(1.0f);
    x[0] = pgd_f32_to_bf16(1.0f), q[0] = 1;
    x[1] = pgd_f32_to_bf16(1048576.0f), q[1] = 16;
    x[2] = pgd_f32_to_bf16(1.0f), q[2] = 1;
    x[3] = pgd_f32_to_bf16(-1048576.0f), q[3] = 16;
    float y = -1.0f;
    pgd_cuda_gemv_q8_twin(x, q, d, &y, 1, 1, 32);
    CHECK(y == 0.0f);
    /* the lanes: block 0 (lane 0) 2^24, block 1 (lane 1) -2^24, block 32 (lane 0 again) 1, as
     * a block sum of 2 scaled by 0.5: lane 0 rounds 2^24 + 1 to 2^24, the tree gives 0; a sum
     * over the blocks in order would give 1 */
    for (int k = 0; k < KO; k++) x[k] = 0, q[k] = 0;
    x[0] = pgd_f32_to_bf16(1048576.0f), q[0] = 16;
    x[32] = pgd_f32_to_bf16(-1048576.0f), q[32] = 16;
    x[32 * 32 + 5] = pgd_f32_to_bf16(1.0f), q[32 * 32 + 5] = 2;
    d[32] = pgd_f32_to_f16(0.5f);
    y = -1.0f;
    pgd_cuda_gemv_q8_twin(x, q, d, &y, 1, 1, KO);
    CHECK(y == 0.0f);
    /* the 1 in block 31 instead (lane 31): the tree brings it to lane 1 (-2^24 + 1, exact)
     * before lane 0's 2^24 meets it: 1 */
    x[32 * 32 + 5] = 0, q[32 * 32 + 5] = 0;
    x[31 * 32] = pgd_f32_to_bf16(1.0f), q[31 * 32] = 1;
    y = -1.0f;
    pgd_cuda_gemv_q8_twin(x, q, d, &y, 1, 1, KO);
    CHECK(y == 1.0f);
}

/* The 4-bit GEMV twin: near the exact sum of x * (d * q + m), a block worked by hand, and in THE
 * SUM's order. */
static void test_gemv_q4(void) {
    static const uint32_t shapes[][3] = {
        {1, 5, 32}, {3, 37, 896}, {2, 3, 1440}, {8, 9, 4096}, {2, 4, 14336}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(shapes); i++) {
        const uint32_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], C = K / 32;
        uint16_t *X = malloc((size_t)M * K * 2);
        uint32_t *DM = malloc((size_t)N * C * 4);
        uint8_t *Q = malloc((size_t)N * K / 2);
        float *Y = malloc((size_t)M * N * 4);
        REQUIRE(X && DM && Q && Y);
        for (size_t e = 0; e < (size_t)M * K; e++) X[e] = pgd_f32_to_bf16(frand());
        for (size_t e = 0; e < (size_t)N * K / 2; e++) Q[e] = (uint8_t)urand(256);
        for (size_t e = 0; e < (size_t)N * C; e++)
            DM[e] = pgd_f32_to_f16(frand() * 0.01f) | (uint32_t)pgd_f32_to_f16(frand() * 0.1f)
                                                          << 16;
        DM[0] = 0x0001 | 0x83FFu << 16; /* subnormal d and m */
        DM[N * C - 1] &= 0xFFFF0000u;   /* d = 0 */
        pgd_cuda_gemv_q4_twin(X, Q, DM, Y, M, N, K);
        /* a block's chains of 32, its two FMAs into acc for each of a lane's ceil(C / 32) blocks,
         * then 5 additions: each result within (that + 2) 2^-24 of the sum of |x d q| + |x m| */
        const double n_ops = 32.0 + 2 * ((C + 31) / 32) + 7;
        int bad = 0;
        for (uint32_t m = 0; m < M; m++)
            for (uint32_t n = 0; n < N; n++) {
                double sum = 0, abs_sum = 0;
                for (uint32_t k = 0; k < K; k++) {
                    const uint32_t dm = DM[(size_t)n * C + k / 32], j = k % 32;
                    const uint8_t byte = Q[(size_t)n * K / 2 + (k / 32) * 16 + j % 16];
                    const double x = pgd_bf16_to_f32(X[(size_t)m * K + k]);
                    const double d = pgd_f16_to_f32((uint16_t)(dm & 0xFFFF));
                    const double mo = pgd_f16_to_f32((uint16_t)(dm >> 16));
                    const double q = j < 16 ? byte & 15 : byte >> 4;
                    sum += x * (d * q) + x * mo;
                    abs_sum += fabs(x * d * q) + fabs(x * mo);
                }
                const double err = fabs((double)Y[m * N + n] - sum);
                if (!(err <= n_ops * 0x1p-24 * abs_sum) && bad++ < 3)
                    fprintf(stderr, "  gemv q4 %ux%ux%u [%u][%u]: %.9g vs %.17g\n", M, N, K, m, n,
                            Y[m * N + n], sum);
            }
        CHECK_EQ_INT(bad, 0);
        free(X), free(DM), free(Q), free(Y);
    }
    /* one block by hand: byte 0 = 0xF3 (element 0: 3, element 16: 15), byte 5 = 0x7A (element
     * 5: 10, element 21: 7); x0 = 1, x16 = 2, x5 = -1, x21 = 0.5, the rest 0: p = 3 + 30 - 10 +
     * 3.5 = 26.5 (the nibbles swapped: 15 + 6 - 7 + 5 = 19), s = 2.5; d = 0.25, m = 2:
     * y = 26.5 * 0.25 + 2.5 * 2 = 11.625 (d and m swapped: 58) */
    enum { KO = 33 * 32 };
    uint16_t x[KO];
    uint8_t q[KO / 2];
    uint32_t dm[KO / 32];
    for (int k = 0; k < KO; k++) x[k] = 0;
    for (int k = 0; k < KO / 2; k++) q[k] = 0;
    q[0] = 0xF3, q[5] = 0x7A;
    x[0] = pgd_f32_to_bf16(1.0f), x[16] = pgd_f32_to_bf16(2.0f);
    x[5] = pgd_f32_to_bf16(-1.0f), x[21] = pgd_f32_to_bf16(0.5f);
    dm[0] = pgd_f32_to_f16(0.25f) | (uint32_t)pgd_f32_to_f16(2.0f) << 16;
    float y = -1.0f;
    pgd_cuda_gemv_q4_twin(x, q, dm, &y, 1, 1, 32);
    CHECK(y == 11.625f);
    /* s's order within a block: x = 1, 2^24, 1, -2^24 at elements 0 .. 3, the nibbles 0, d 0,
     * m 1: s rounds 1 + 2^24 and then 2^24 + 1 to 2^24 (ties to even) and ends at 0, where the
     * exact sum is 2 */
    for (int k = 0; k < 4; k++)
        x[k] = pgd_f32_to_bf16(k % 2 ? (k == 1 ? 16777216.0f : -16777216.0f) : 1.0f);
    x[5] = x[16] = x[21] = 0;
    q[0] = q[5] = 0;
    dm[0] = (uint32_t)pgd_f32_to_f16(1.0f) << 16;
    y = -1.0f;
    pgd_cuda_gemv_q4_twin(x, q, dm, &y, 1, 1, 32);
    CHECK(y == 0.0f);
    /* a lane's blocks and p d before s m: block 0 (lane 0) x0 = 2^20, q0 = 8, d = 2, m = 0:
     * acc = 2^24; block 32 (lane 0 again) x = 1 with q = 1, then x = 2^20 with q = 0, d = 1,
     * m = -16: p d = 1 rounds away (2^24 + 1 -> 2^24), then s m = -(2^24 + 16) leaves -16; s m
     * first would give -15, as the exact sum is */
    for (int k = 0; k < KO; k++) x[k] = 0;
    for (int b = 0; b < KO / 32; b++) dm[b] = 0;
    x[0] = pgd_f32_to_bf16(1048576.0f), q[0] = 8;
    dm[0] = pgd_f32_to_f16(2.0f);
    x[32 * 32] = pgd_f32_to_bf16(1.0f), x[32 * 32 + 1] = pgd_f32_to_bf16(1048576.0f);
    q[32 * 16] = 1;
    dm[32] = pgd_f32_to_f16(1.0f) | (uint32_t)pgd_f32_to_f16(-16.0f) << 16;
    y = -1.0f;
    pgd_cuda_gemv_q4_twin(x, q, dm, &y, 1, 1, KO);
    CHECK(y == -16.0f);
}

int main(void) {
    RUN(test_bf16_round);
    RUN(test_embed);
    RUN(test_rmsnorm);
    RUN(test_head_norm);
    RUN(test_rope_kv);
    RUN(test_silu_mul);
    RUN(test_gemv);
    RUN(test_gemv_q8);
    RUN(test_gemv_q4);
    return test_summary();
}
