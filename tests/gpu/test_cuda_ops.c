/*
 * tests/gpu/test_cuda_ops.c — each CUDA op against its CPU twin (kernels/cuda/..._twin.c) on
 * fresh random inputs: embedding, add + RMSNorm, the q/k head RMSNorm (qwen3), bias + RoPE + KV
 * write, SiLU * mul (bit for bit, but SiLU * mul within the tolerance of silu_mul.h), and the
 * dummy fills against common/counter_hash.h. Token counts T in {1, 3, 17, 64, 300}, widths across
 * the 256-thread edges, a KV slab with random non-contiguous slots and a padding row. Outputs are
 * poisoned with NaN before each run (but the head norm's, which works in place); the seed is
 * printed (PGD_SEED repeats it). Dequantization has its own test (test_cuda_dequant.c). Exit 77
 * (skipped) when no GPU is present. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/counter_hash.h"
#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/dequant.h"
#include "kernels/cuda/dummy.h"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/head_norm.h"
#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/silu_mul.h"
#include "testutil.h"
#include "gpu_testutil.h"

static const uint32_t k_Ts[] = {1, 3, 17, 64, 300};

/* A random finite bf16 value. */
static uint16_t rand_bf16(void) {
    return (uint16_t)(gt_next() & 0xBBFFu);
}

static void test_embed(void) {
    static const uint32_t Es[] = {1, 255, 257, 4099};
    const uint32_t V = 1000;
    for (size_t ie = 0; ie < PGD_ARRAY_LEN(Es); ie++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(k_Ts); it++) {
            const uint32_t E = Es[ie], T = k_Ts[it];
            const uint64_t n = (uint64_t)T * E;
            uint16_t *table = malloc(sizeof(uint16_t) * V * E);
            int32_t *tokens = malloc(sizeof(int32_t) * T);
            float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
            REQUIRE(table && tokens && want && got);
            for (uint64_t i = 0; i < (uint64_t)V * E; i++) table[i] = rand_bf16();
            for (uint32_t t = 0; t < T; t++) tokens[t] = (int32_t)gt_urand(V);
            uint16_t *d_table = gt_upload(table, sizeof(uint16_t) * V * E);
            int32_t *d_tokens = gt_upload(tokens, sizeof(int32_t) * T);
            float *d_x = gt_poisoned(sizeof(float) * n);
            REQUIRE(d_table && d_tokens && d_x);
            CHECK_EQ_INT(pgd_cuda_embed(d_table, d_tokens, T, E, d_x, NULL), 0);
            pgd_cuda_embed_twin(table, tokens, T, E, want);
            REQUIRE(gt_download(got, d_x, sizeof(float) * n) == 0);
            CHECK_EQ_INT(gt_count_diff("embed", got, want, n, sizeof(float)), 0);
            cudaFree(d_table), cudaFree(d_tokens), cudaFree(d_x);
            free(table), free(tokens), free(want), free(got);
        }
}

/* One add + RMSNorm case; mode bit 0: add, bit 1: a shuffled rows list. */
static void rmsnorm_case(uint32_t E, uint32_t R, int mode) {
    const uint32_t N = R + 5;
    const bool with_add = mode & 1, with_rows = mode & 2;
    const uint64_t nx = (uint64_t)N * E, no = (uint64_t)R * E;
    const float eps = 1e-5f;
    float *x = malloc(sizeof(float) * nx), *gx = malloc(sizeof(float) * nx);
    float *add = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * E);
    uint16_t *want = malloc(sizeof(uint16_t) * no), *got = malloc(sizeof(uint16_t) * no);
    uint32_t *perm = malloc(sizeof(uint32_t) * N);
    REQUIRE(x && gx && add && w && want && got && perm);
    for (uint64_t i = 0; i < nx; i++) x[i] = gt_frand() * 8, add[i] = gt_frand();
    for (uint32_t e = 0; e < E; e++) w[e] = gt_frand() * 2;
    for (uint32_t i = 0; i < N; i++) perm[i] = i;
    for (uint32_t i = N - 1; i > 0; i--) { /* distinct rows, in shuffled order */
        uint32_t j = gt_urand(i + 1), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    const uint32_t *rows = with_rows ? perm : NULL;
    float *d_x = gt_upload(x, sizeof(float) * nx), *d_add = gt_upload(add, sizeof(float) * nx);
    float *d_w = gt_upload(w, sizeof(float) * E);
    uint32_t *d_rows = gt_upload(perm, sizeof(uint32_t) * N);
    uint16_t *d_out = gt_poisoned(sizeof(uint16_t) * no);
    REQUIRE(d_x && d_add && d_w && d_rows && d_out);
    CHECK_EQ_INT(pgd_cuda_add_rmsnorm(d_x, with_add ? d_add : NULL, d_w, eps,
                                      with_rows ? d_rows : NULL, R, E, d_out, NULL),
                 0);
    pgd_cuda_add_rmsnorm_twin(x, with_add ? add : NULL, w, eps, rows, R, E, want);
    REQUIRE(gt_download(gx, d_x, sizeof(float) * nx) == 0);
    REQUIRE(gt_download(got, d_out, sizeof(uint16_t) * no) == 0);
    CHECK_EQ_INT(gt_count_diff("rmsnorm x", gx, x, nx, sizeof(float)), 0);
    CHECK_EQ_INT(gt_count_diff("rmsnorm out", got, want, no, sizeof(uint16_t)), 0);
    if (!with_add) { /* the last row alone: the bits it had in the batch */
        const uint32_t r = with_rows ? perm[R - 1] : R - 1;
        uint32_t *d_r = gt_upload(&r, sizeof r);
        REQUIRE(d_r && cudaMemset(d_out, 0xFF, sizeof(uint16_t) * E) == cudaSuccess);
        CHECK_EQ_INT(pgd_cuda_add_rmsnorm(d_x, NULL, d_w, eps, d_r, 1, E, d_out, NULL), 0);
        REQUIRE(gt_download(want, d_out, sizeof(uint16_t) * E) == 0);
        CHECK_EQ_INT(
            gt_count_diff("rmsnorm alone", want, got + (uint64_t)(R - 1) * E, E, sizeof(uint16_t)),
            0);
        cudaFree(d_r);
    }
    cudaFree(d_x), cudaFree(d_add), cudaFree(d_w), cudaFree(d_rows), cudaFree(d_out);
    free(x), free(gx), free(add), free(w), free(want), free(got), free(perm);
}

static void test_rmsnorm(void) {
    static const uint32_t Es[] = {1, 255, 256, 257, 4096, 4099}; /* 4096: the most in registers */
    for (size_t ie = 0; ie < PGD_ARRAY_LEN(Es); ie++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(k_Ts); it++)
            for (int mode = 0; mode < 4; mode++) rmsnorm_case(Es[ie], k_Ts[it], mode);
}

/* One q/k head RMSNorm case: T rows of Hq + 2 Hk heads of D, each head at its own scale (2^-10
 * .. 2^9), a padding row (untouched, as v). In place: the input is the output, so a head left
 * as it was differs from the twin's. Then the last row alone, in a poisoned buffer: the bits it
 * had in the batch. */
static void head_norm_case(uint32_t Hq, uint32_t Hk, uint32_t D, uint32_t T) {
    const uint32_t W = (Hq + 2 * Hk) * D;
    const uint64_t n = (uint64_t)T * W;
    const float eps = 1e-6f;
    float *qkv = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    float *qw = malloc(sizeof(float) * D), *kw = malloc(sizeof(float) * D);
    int32_t *pos = malloc(sizeof(int32_t) * T);
    REQUIRE(qkv && got && qw && kw && pos);
    for (uint64_t i = 0; i < n; i += D) {
        const float scale = ldexpf(1.0f, (int)gt_urand(20) - 10);
        for (uint32_t e = 0; e < D; e++) qkv[i + e] = gt_frand() * scale;
    }
    for (uint32_t e = 0; e < D; e++) qw[e] = 1.0f + gt_frand() * 0.5f, kw[e] = 0.5f + gt_frand();
    for (uint32_t t = 0; t < T; t++) pos[t] = (int32_t)gt_urand(4096);
    if (T > 2) pos[T / 2] = -1; /* a padding row */
    float *d_qkv = gt_upload(qkv, sizeof(float) * n), *d_qw = gt_upload(qw, sizeof(float) * D);
    float *d_kw = gt_upload(kw, sizeof(float) * D);
    int32_t *d_pos = gt_upload(pos, sizeof(int32_t) * T);
    float *d_one = gt_poisoned(sizeof(float) * W);
    REQUIRE(d_qkv && d_qw && d_kw && d_pos && d_one);
    const float *last = qkv + (uint64_t)(T - 1) * W; /* the last row, before the norm */
    REQUIRE(cudaMemcpy(d_one, last, sizeof(float) * W, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK_EQ_INT(pgd_cuda_head_rmsnorm(d_qkv, d_qw, d_kw, eps, d_pos, T, Hq, Hk, D, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_head_rmsnorm(d_one, d_qw, d_kw, eps, d_pos + (T - 1), 1, Hq, Hk, D, NULL),
                 0);
    pgd_cuda_head_rmsnorm_twin(qkv, qw, kw, eps, pos, T, Hq, Hk, D);
    REQUIRE(gt_download(got, d_qkv, sizeof(float) * n) == 0);
    CHECK_EQ_INT(gt_count_diff("head_norm", got, qkv, n, sizeof(float)), 0);
    REQUIRE(gt_download(got, d_one, sizeof(float) * W) == 0);
    CHECK_EQ_INT(gt_count_diff("head_norm alone", got, last, W, sizeof(float)), 0);
    cudaFree(d_qkv), cudaFree(d_qw), cudaFree(d_kw), cudaFree(d_pos), cudaFree(d_one);
    free(qkv), free(got), free(qw), free(kw), free(pos);
}

static void test_head_norm(void) {
    static const uint32_t shapes[][3] = {
        {16, 8, 128},                          /* Qwen3-0.6B */
        {32, 8, 128},                          /* Qwen3-8B */
        {3, 1, 64},   {5, 1, 128},             /* odd head counts */
        {4, 2, 32},   {3, 3, 7},   {1, 1, 33}, /* fewer elements than lanes; a lane with two */
        {2, 1, 256},                           /* the widest head */
    };
    for (size_t s = 0; s < PGD_ARRAY_LEN(shapes); s++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(k_Ts); it++)
            head_norm_case(shapes[s][0], shapes[s][1], shapes[s][2], k_Ts[it]);
}

typedef struct {
    uint32_t n_head, n_kv_head, head_dim, rope_dim;
    bool neox;
} rope_shape;

static void rope_kv_case(const rope_shape *sh, uint32_t T, bool with_bias) {
    const uint32_t D = sh->head_dim, RD = sh->rope_dim, bs = 16, n_pos = 4096, layer = 2;
    const uint32_t W = (sh->n_head + 2 * sh->n_kv_head) * D;
    const pgd_kv_geom g = {
        .n_layer = 3, .n_kv_head = sh->n_kv_head, .block_size = bs, .head_dim = D};
    const uint32_t n_blocks = 2 * ((T + bs - 1) / bs) + 2, n_slots = (n_blocks - 1) * bs;
    const uint64_t nq = (uint64_t)T * W, nkv = n_blocks * pgd_kv_block_elems(g);
    float *qkv = malloc(sizeof(float) * nq), *gq = malloc(sizeof(float) * nq);
    float *bias = malloc(sizeof(float) * W);
    float *cos_sin = malloc(sizeof(float) * n_pos * (RD ? RD : 1));
    double *inv = malloc(sizeof(double) * (RD ? RD : 1));
    uint16_t *kv = malloc(sizeof(uint16_t) * nkv), *gkv = malloc(sizeof(uint16_t) * nkv);
    int64_t *slots = malloc(sizeof(int64_t) * n_slots);
    int32_t *pos = malloc(sizeof(int32_t) * T);
    REQUIRE(qkv && gq && bias && cos_sin && inv && kv && gkv && slots && pos);
    pgd_rope_inv_freq(inv, RD, 500000.0f, NULL);
    for (uint32_t p = 0; p < n_pos; p++) pgd_rope_cos_sin(cos_sin + (uint64_t)p * RD, inv, RD, p);
    for (uint64_t i = 0; i < nq; i++) qkv[i] = gt_frand() * 4;
    for (uint32_t i = 0; i < W; i++) bias[i] = gt_frand();
    for (uint32_t i = 0; i < n_slots; i++) slots[i] = bs + i; /* never the null block */
    for (uint32_t t = 0; t < T; t++) {                        /* T distinct random slots */
        uint32_t j = t + gt_urand(n_slots - t);
        int64_t tmp = slots[t];
        slots[t] = slots[j], slots[j] = tmp;
        pos[t] = (int32_t)gt_urand(n_pos);
    }
    if (T > 1) slots[T / 2] = -1;             /* a row that writes no KV */
    if (T > 2) pos[T - 1] = -1;               /* a padding row: untouched */
    memset(kv, 0xFF, sizeof(uint16_t) * nkv); /* the device slab is poisoned the same way */
    float *d_qkv = gt_upload(qkv, sizeof(float) * nq), *d_bias = gt_upload(bias, sizeof(float) * W);
    float *d_cs = gt_upload(cos_sin, sizeof(float) * n_pos * (RD ? RD : 1));
    int32_t *d_pos = gt_upload(pos, sizeof(int32_t) * T);
    int64_t *d_slots = gt_upload(slots, sizeof(int64_t) * T);
    uint16_t *d_kv = gt_poisoned(sizeof(uint16_t) * nkv);
    REQUIRE(d_qkv && d_bias && d_cs && d_pos && d_slots && d_kv);
    CHECK_EQ_INT(pgd_cuda_rope_kv(d_qkv, with_bias ? d_bias : NULL, d_cs, d_pos, d_slots, T,
                                  sh->n_head, sh->n_kv_head, D, RD, sh->neox, d_kv, g, layer, NULL),
                 0);
    pgd_cuda_rope_kv_twin(qkv, with_bias ? bias : NULL, cos_sin, pos, slots, T, sh->n_head,
                          sh->n_kv_head, D, RD, sh->neox, kv, g, layer);
    REQUIRE(gt_download(gq, d_qkv, sizeof(float) * nq) == 0);
    REQUIRE(gt_download(gkv, d_kv, sizeof(uint16_t) * nkv) == 0);
    CHECK_EQ_INT(gt_count_diff("rope_kv qkv", gq, qkv, nq, sizeof(float)), 0);
    CHECK_EQ_INT(gt_count_diff("rope_kv slab", gkv, kv, nkv, sizeof(uint16_t)), 0);
    cudaFree(d_qkv), cudaFree(d_bias), cudaFree(d_cs), cudaFree(d_pos), cudaFree(d_slots);
    cudaFree(d_kv);
    free(qkv), free(gq), free(bias), free(cos_sin), free(inv), free(kv), free(gkv), free(slots);
    free(pos);
}

static void test_rope_kv(void) {
    static const rope_shape shapes[] = {
        {32, 8, 128, 128, false}, /* Llama-3-8B */
        {14, 2, 64, 64, true},    /* Qwen2-0.5B */
        {3, 1, 80, 32, true},     /* partial rotation, both styles */
        {3, 1, 80, 32, false},    {5, 5, 96, 64, false}, {2, 1, 8, 0, false}, /* no rotation */
        {3, 1, 24, 12, true},     {3, 1, 24, 12, false}, /* rope_dim not a multiple of 8: the
                                                          * scalar form (the others: vector) */
        {2, 2, 12, 8, false},                            /* head_dim not a multiple of 8: scalar */
    };
    for (size_t s = 0; s < PGD_ARRAY_LEN(shapes); s++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(k_Ts); it++)
            for (int b = 0; b < 2; b++) rope_kv_case(&shapes[s], k_Ts[it], b);
}

static void silu_mul_form(bool bf16_in) {
    /* 4100: whole groups of 4 (the f32 form's 16 bytes) past the grid; 4104 and 1000 of 8 (the
     * bf16 form's); 4100 by single columns in the bf16 form */
    static const uint32_t Fs[] = {1, 255, 257, 1000, 4099, 4100, 4104};
    static const float special[] = {0.0f,   -0.0f,  200.0f,  -200.0f, 1e-30f, -87.0f,
                                    -87.9f, -88.0f, -88.01f, -88.5f,  -89.0f, -100.0f};
    uint64_t exact = 0, ulp = 0, tiny = 0, bad = 0;
    for (size_t jf = 0; jf < PGD_ARRAY_LEN(Fs); jf++)
        for (size_t it = 0; it < PGD_ARRAY_LEN(k_Ts); it++) {
            const uint32_t F = Fs[jf], T = k_Ts[it];
            const uint64_t n = (uint64_t)T * F;
            float *gu = malloc(sizeof(float) * 2 * n);
            uint16_t *want = malloc(sizeof(uint16_t) * n), *got = malloc(sizeof(uint16_t) * n);
            REQUIRE(gu && want && got);
            for (uint64_t i = 0; i < 2 * n; i++) gu[i] = gt_frand() * 12;
            for (uint64_t i = 0; i < n; i += 7) gu[(i / F) * 2 * F + i % F] *= 10; /* wide g */
            for (uint64_t i = 0; i < PGD_ARRAY_LEN(special) && i < n; i++)
                gu[(i / F) * 2 * F + i % F] = special[i];
            uint16_t *gu16 = malloc(sizeof(uint16_t) * 2 * n);
            REQUIRE(gu16);
            for (uint64_t i = 0; i < 2 * n; i++) { /* bf16: the values rounded (g, u below) */
                gu16[i] = pgd_f32_to_bf16(gu[i]);
                if (bf16_in) gu[i] = pgd_bf16_to_f32(gu16[i]);
            }
            void *d_gu = bf16_in ? gt_upload(gu16, sizeof(uint16_t) * 2 * n)
                                 : gt_upload(gu, sizeof(float) * 2 * n);
            uint16_t *d_out = gt_poisoned(sizeof(uint16_t) * n);
            REQUIRE(d_gu && d_out);
            if (bf16_in) {
                CHECK_EQ_INT(pgd_cuda_silu_mul_bf16(d_gu, T, F, d_out, NULL), 0);
                pgd_cuda_silu_mul_bf16_twin(gu16, T, F, want);
            } else {
                CHECK_EQ_INT(pgd_cuda_silu_mul(d_gu, T, F, d_out, NULL), 0);
                pgd_cuda_silu_mul_twin(gu, T, F, want);
            }
            free(gu16);
            REQUIRE(gt_download(got, d_out, sizeof(uint16_t) * n) == 0);
            for (uint64_t i = 0; i < n; i++) {
                const float g = gu[(i / F) * 2 * F + i % F], u = gu[(i / F) * 2 * F + F + i % F];
                const int64_t d = gt_bf16_ord(got[i]) - gt_bf16_ord(want[i]);
                const double lim = fabs((double)g * u) * ldexp(1.0, -126) + ldexp(1.0, -133);
                if (got[i] == want[i])
                    exact++;
                else if (g >= -88.0f && (d == 1 || d == -1))
                    ulp++;
                else if (g < -88.0f && fabs(pgd_bf16_to_f32(got[i])) <= lim &&
                         fabs(pgd_bf16_to_f32(want[i])) <= lim)
                    tiny++;
                else if (bad++ < 5)
                    fprintf(stderr, "  silu_mul g %.9g u %.9g: GPU 0x%04x, twin 0x%04x\n", g, u,
                            got[i], want[i]);
            }
            cudaFree(d_gu), cudaFree(d_out);
            free(gu), free(want), free(got);
        }
    fprintf(stderr, "  silu_mul%s: %llu equal, %llu one bf16 ulp apart, %llu tiny (g < -88)\n",
            bf16_in ? " (bf16 product)" : "", (unsigned long long)exact, (unsigned long long)ulp,
            (unsigned long long)tiny);
    CHECK_EQ_INT(bad, 0);
}

/* Kernel and twin agree as silu_mul.h promises: equal or one bf16 ulp apart for g >= -88;
 * below, both tiny (|out| <= |g * u| * 2^-126, plus a bf16 subnormal step of rounding). Both
 * forms: over an f32 product (pgd_cuda_silu_mul) and over a bf16 one (pgd_cuda_silu_mul_bf16,
 * the same values rounded to bf16 first). */
static void test_silu_mul(void) {
    for (int form = 0; form < 2; form++) silu_mul_form(form == 1);
}

static void test_dummy(void) {
    static const uint64_t ns[] = {1, 1000, (1u << 20) + 3, 65535ull * 256 + 12345};
    static const int shifts[] = {0, 7, 10, 33};
    for (size_t in = 0; in < PGD_ARRAY_LEN(ns); in++) {
        const uint64_t n = ns[in], seed = gt_next();
        const uint32_t tensor = gt_urand(1000);
        uint16_t *want16 = malloc(sizeof(uint16_t) * n), *got16 = malloc(sizeof(uint16_t) * n);
        float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
        uint16_t *d16 = gt_poisoned(sizeof(uint16_t) * n);
        float *d32 = gt_poisoned(sizeof(float) * n);
        REQUIRE(want16 && got16 && want && got && d16 && d32);
        for (size_t is = 0; is < PGD_ARRAY_LEN(shifts); is++) {
            REQUIRE(cudaMemset(d16, 0xFF, sizeof(uint16_t) * n) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_dummy_bf16(seed, tensor, shifts[is], n, d16, NULL), 0);
            uint64_t inexact = 0;
            for (uint64_t i = 0; i < n; i++) {
                const float v = pgd_dummy_value(seed, tensor, i, shifts[is]);
                want16[i] = pgd_f32_to_bf16(v);
                inexact += pgd_bf16_to_f32(want16[i]) != v;
            }
            CHECK_EQ_INT(inexact, 0); /* the values are exact in bf16 */
            REQUIRE(gt_download(got16, d16, sizeof(uint16_t) * n) == 0);
            CHECK_EQ_INT(gt_count_diff("dummy bf16", got16, want16, n, sizeof(uint16_t)), 0);
            /* a part from element `first` on (one expert's rows): the same values, shifted */
            const uint64_t first = gt_urand((uint32_t)n), part = n - first;
            REQUIRE(cudaMemset(d16, 0xFF, sizeof(uint16_t) * n) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_dummy_bf16_at(seed, tensor, shifts[is], first, part, d16, NULL),
                         0);
            REQUIRE(gt_download(got16, d16, sizeof(uint16_t) * part) == 0);
            CHECK_EQ_INT(
                gt_count_diff("dummy bf16 part", got16, want16 + first, part, sizeof(uint16_t)), 0);
        }
        for (int b = 0; b < 2; b++) {
            const float base = b ? 1.0f : 0.0f;
            REQUIRE(cudaMemset(d32, 0xFF, sizeof(float) * n) == cudaSuccess);
            CHECK_EQ_INT(pgd_cuda_dummy_f32(seed, tensor, base, n, d32, NULL), 0);
            for (uint64_t i = 0; i < n; i++) want[i] = base + pgd_dummy_value(seed, tensor, i, 10);
            REQUIRE(gt_download(got, d32, sizeof(float) * n) == 0);
            CHECK_EQ_INT(gt_count_diff("dummy f32", got, want, n, sizeof(float)), 0);
        }
        cudaFree(d16), cudaFree(d32);
        free(want16), free(got16), free(want), free(got);
    }
    CHECK_EQ_INT(pgd_cuda_dummy_bf16(1, 1, -1, 10, NULL, NULL), PGD_EINVAL);
}

static void test_errors(void) {
    const pgd_kv_geom g = {.n_layer = 2, .n_kv_head = 2, .block_size = 16, .head_dim = 64};
    /* rope_dim odd or above head_dim; a slab of another KV head count; layer out of range */
    static const uint32_t bad[][3] = {{2, 63, 0}, {2, 66, 0}, {1, 64, 0}, {2, 64, 2}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(bad); i++)
        CHECK_EQ_INT(pgd_cuda_rope_kv(NULL, NULL, NULL, NULL, NULL, 1, 4, bad[i][0], 64, bad[i][1],
                                      false, NULL, g, bad[i][2], NULL),
                     PGD_EINVAL);
    /* a head of no elements, or wider than 256 */
    CHECK_EQ_INT(pgd_cuda_head_rmsnorm(NULL, NULL, NULL, 1e-6f, NULL, 1, 2, 1, 0, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_head_rmsnorm(NULL, NULL, NULL, 1e-6f, NULL, 1, 2, 1, 257, NULL),
                 PGD_EINVAL);
    /* nothing to do: no launch, no fault */
    CHECK_EQ_INT(pgd_cuda_head_rmsnorm(NULL, NULL, NULL, 1e-6f, NULL, 0, 2, 1, 64, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_embed(NULL, NULL, 0, 64, NULL, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_add_rmsnorm(NULL, NULL, NULL, 1e-5f, NULL, 0, 64, NULL, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_silu_mul(NULL, 0, 64, NULL, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_dummy_f32(1, 1, 0.0f, 0, NULL, NULL), 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_embed);
    RUN(test_rmsnorm);
    RUN(test_head_norm);
    RUN(test_rope_kv);
    RUN(test_silu_mul);
    RUN(test_dummy);
    RUN(test_errors);
    return test_summary();
}
