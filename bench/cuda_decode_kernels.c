/*
 * bench/cuda_decode_kernels.c — the kernels of a decode step alone, on Llama-3-8B's shapes, timed
 * with CUDA events (mean of 20 runs after 3 warm-ups): each weight product at M = 1, 4 and 8 rows
 * through cuBLASLt (pagoda's fast plan, kernels/cuda/gemm.h) and through its GEMV kernel
 * (kernels/cuda/gemv.h; the default for one row; at one row also with 8 and 16 of a lane's loads
 * in flight instead of 4, with its first round before the wait for the previous kernel, and
 * its lean instance: one load a lane in flight, the kernel measured before the rounds' fix),
 * with the weights' bandwidth, and gate/up with its SiLU * up (two kernels; one on the GEMV, as a
 * one-row step runs it); the split attention of one decode row over 1k, 4k and 16k positions, on
 * CUDA cores and on tensor cores (the KV bytes it reads a launch, as bandwidth); the tensor-core
 * attention of a 2k-token prompt (its causal FLOPs per second); a 2k-token prefill's gate/up
 * product and SiLU * up, the product in f32 and in bf16; one residual add + RMSNorm row; then, in a
 * table of their own, the products over 8-bit weights (kernels/cuda/q8.h, --gpu-weights q8_0):
 * at 1, 4 and 8 rows on the 8-bit GEMV and at 1 to 64 rows on the tensor-core kernel
 * (pgd_cuda_gemm_q8), with the bytes the weights take (17 for 16 weights) as bandwidth, and the
 * gate/up of prefill chunks of 256, 512 and 2048 rows on the tensor-core kernel and on cuBLASLt
 * over the weights dequantized to bf16 in chunks of 256 and 32 MiB (gemm.h's pgd_cuda_gemm_deq;
 * FLOP/s); and the same over 4-bit weights (kernels/cuda/q4.h, --gpu-weights q4: 5 bytes for 8
 * weights), the 4-bit GEMV at one row also with each round's loads all issued before its
 * conversions (PGD_CUDA_GEMV_Q4_ROUND=1). The runs cycle through copies of the weights and through
 * the layers of a 32-layer KV slab, more bytes than the L2 cache holds, as a decode step does.
 * Random data (never zeros). Prints one markdown table; scripts/gpu-check runs it.
 *
 * PGD_CUDA_EMU set (the CPU emulation, tests/cuda_emu): narrow shapes, short contexts, 2 layers
 * (a smoke run of the code; its times mean nothing). Exit 77 without a GPU.
 */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backends/cuda_plan.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/dummy.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_grouped.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_q4.h"
#include "kernels/cuda/gemv_q8.h"
#include "kernels/cuda/q4.h"
#include "kernels/cuda/q8.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/silu_mul.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) != 0) {                                                                            \
            fprintf(stderr, "decode_kernels: %s failed (line %d)\n", #x, __LINE__);                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint32_t g_warm = 3, g_reps = 20; /* runs before timing, runs timed (emulation: 1, 1) */
static uint64_t g_rotate_bytes = 512ull << 20; /* cycled through: beyond any L2 */
static bool g_emu;                             /* PGD_CUDA_EMU: a smoke run */

static cudaEvent_t g_a, g_b;

typedef int (*run_fn)(void *ctx, uint32_t i); /* the i-th run; 0 or an error */

/* Mean microseconds of a run. */
static double time_runs(run_fn f, void *ctx) {
    for (uint32_t i = 0; i < g_warm; i++) TRY(f(ctx, i));
    TRY(cudaEventRecord(g_a, 0));
    for (uint32_t i = 0; i < g_reps; i++) TRY(f(ctx, g_warm + i));
    TRY(cudaEventRecord(g_b, 0));
    TRY(cudaEventSynchronize(g_b));
    float ms = 0;
    TRY(cudaEventElapsedTime(&ms, g_a, g_b));
    return ms * 1e3 / g_reps;
}

/* ---- products ------------------------------------------------------------------------------ */

/* Llama-3-8B's weight products: W [N][K] */
static const struct shape {
    const char *name;
    uint32_t N, K;
} k_shapes[] = {{"QKV", 6144, 4096},
                {"O", 4096, 4096},
                {"gate/up", 28672, 4096},
                {"down", 4096, 14336},
                {"output head", 128256, 4096}};

typedef struct prod {
    pgd_cuda_gemm *g;
    pgd_cuda_gemm_plan *plan;
    uint16_t *X, *W; /* X [8][K]; W: n_w copies of [N][K] */
    float *Y;
    uint16_t *H; /* SiLU * up out, bf16 [8][N / 2] */
    uint32_t N, K, M, n_w;
    bool gemv, silu; /* silu: the gate/up product then SiLU * up, as a step runs it */
    uint32_t loads;  /* gemv at one row: a lane's loads in flight (pgd_cuda_gemv_loads), 0: 4 */
    bool early;      /* with loads: the first round before the wait for the previous kernel */
    bool lean;       /* with loads (4): the instance compiled for the fewest registers */
} prod;

static int run_prod(void *ctx, uint32_t i) {
    prod *p = ctx;
    const uint16_t *W = p->W + (uint64_t)(i % p->n_w) * p->N * p->K;
    if (p->gemv && p->loads)
        return pgd_cuda_gemv_loads(p->X, W, p->Y, p->H, p->silu ? p->N / 2 : p->N, p->K, p->silu,
                                   p->loads, p->early, p->lean, NULL);
    if (p->silu && p->gemv) return pgd_cuda_gemv_silu(p->X, W, p->H, p->M, p->N / 2, p->K, NULL);
    int rc = p->gemv ? pgd_cuda_gemv(p->X, W, p->Y, p->M, p->N, p->K, NULL)
                     : pgd_cuda_gemm_run(p->g, p->plan, p->X, W, p->Y, p->M, NULL);
    if (!rc && p->silu) rc = pgd_cuda_silu_mul(p->Y, p->M, p->N / 2, p->H, NULL);
    return rc;
}

static void products(pgd_cuda_gemm *g) {
    const struct shape *shapes = k_shapes;
    static const uint32_t ms[] = {1, 4, 8};
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
        prod p = {.g = g, .N = g_emu ? shapes[s].N / 512 : shapes[s].N, .K = shapes[s].K};
        const uint64_t bytes = (uint64_t)p.N * p.K * 2;
        p.n_w = (uint32_t)((g_rotate_bytes + bytes - 1) / bytes);
        TRY(cudaMalloc((void **)&p.W, bytes * p.n_w));
        TRY(cudaMalloc((void **)&p.X, (uint64_t)8 * p.K * 2));
        TRY(cudaMalloc((void **)&p.Y, (uint64_t)8 * p.N * 4));
        TRY(cudaMalloc((void **)&p.H, (uint64_t)8 * p.N * 2));
        TRY(pgd_cuda_dummy_bf16(7, (uint32_t)s, 6, (uint64_t)p.N * p.K * p.n_w, p.W, NULL));
        TRY(pgd_cuda_dummy_bf16(8, (uint32_t)s, 0, (uint64_t)8 * p.K, p.X, NULL));
        TRY(pgd_cuda_gemm_plan_create(g, p.N, p.K, 64, PGD_CUDA_GEMM_FAST, PGD_CUDA_GEMM_OUT_F32,
                                      &p.plan));
        for (int silu = 0; silu < (strcmp(shapes[s].name, "gate/up") ? 1 : 2); silu++)
            for (size_t m = 0; m < sizeof ms / sizeof ms[0]; m++) {
                p.M = ms[m];
                p.silu = silu;
                double us[2];
                for (int k = 0; k < 2; k++) {
                    p.gemv = k == 1;
                    us[k] = time_runs(run_prod, &p);
                }
                printf("| %s%s (%u x %u) | %u | %.1f us, %.0f GB/s | %.1f us, %.0f GB/s |\n",
                       shapes[s].name, silu ? " + SiLU * up (fused on the GEMV)" : "", p.N, p.K,
                       p.M, us[0], bytes / (us[0] * 1e3), us[1], bytes / (us[1] * 1e3));
                /* at one row, the GEMV with more of a lane's loads in flight (each with its
                 * first round before the wait for the previous kernel, as the default), with 4
                 * and that round after the wait (the same bits; here the previous kernel is the
                 * same product, streaming too, unlike in a step), and the lean instance (one
                 * load a lane in flight: the kernel measured before) */
                for (uint32_t v = 0; p.M == 1 && v < 4; v++) {
                    p.gemv = true;
                    p.loads = v < 2 ? 8u << v : 4;
                    p.early = v < 2;
                    p.lean = v == 3;
                    const double t = time_runs(run_prod, &p);
                    printf("| %s%s, %s | 1 | | %.1f us, %.0f GB/s |\n", shapes[s].name,
                           silu ? " + SiLU * up" : "",
                           v == 0   ? "8 loads a lane in flight"
                           : v == 1 ? "16 loads a lane in flight"
                           : v == 2 ? "4 loads a lane, all after the wait (PGD_CUDA_GEMV_EARLY=0)"
                                    : "lean (PGD_CUDA_GEMV_LEAN=1: the kernel measured before)",
                           t, bytes / (t * 1e3));
                    p.loads = 0;
                    p.early = p.lean = false;
                }
            }
        pgd_cuda_gemm_plan_destroy(p.plan);
        cudaFree(p.W);
        cudaFree(p.X);
        cudaFree(p.Y);
        cudaFree(p.H);
    }
}

/* ---- products over 8- and 4-bit weights ------------------------------------------------------ */

typedef struct prod_q {
    uint32_t bits; /* 8: W8, 4: W4 */
    pgd_q8_mat W8; /* n_w copies of [N][K] in q8.h's THE FORM */
    pgd_q4_mat W4; /* or in q4.h's */
    uint16_t *X;   /* bf16 [max M][K] */
    float *Y;      /* [max M][N] */
    uint32_t N, K, M, n_w;
    bool gemv;
    bool round;             /* 4 bits, one row: each round's loads all first (gemv_q4.h) */
    pgd_cuda_gemm *g;       /* with deq: the product on cuBLASLt over the weights dequantized */
    pgd_cuda_gemm_deq *deq; /* (gemm.h) into scratch, Y in bf16 */
    uint16_t *scratch;
} prod_q;

static int run_prod_q(void *ctx, uint32_t i) {
    prod_q *p = ctx;
    const uint64_t at = (uint64_t)(i % p->n_w) * p->N;
    const bool bf16 = p->scratch != NULL; /* the prefill rows: gate/up's bf16 out */
    if (p->bits == 4) {
        const pgd_q4_mat W = {p->W4.q + at * p->K / 2, p->W4.dm + at * (p->K / PGD_Q4_BLOCK)};
        if (p->round) return pgd_cuda_gemv_q4_one(p->X, W, p->Y, p->N, p->K, 1, NULL);
        if (p->gemv) return pgd_cuda_gemv_q4(p->X, W, p->Y, p->M, p->N, p->K, NULL);
        if (p->deq)
            return pgd_cuda_gemm_deq_q4(p->g, p->deq, p->X, W, p->scratch, p->Y, p->M, NULL);
        return pgd_cuda_gemm_q4(p->X, W, p->M, p->N, p->K, bf16, p->Y, NULL);
    }
    const pgd_q8_mat W = {p->W8.q + at * p->K, p->W8.d + at * (p->K / PGD_Q8_BLOCK)};
    if (p->gemv) return pgd_cuda_gemv_q8(p->X, W, p->Y, p->M, p->N, p->K, NULL);
    if (p->deq) return pgd_cuda_gemm_deq_q8(p->g, p->deq, p->X, W, p->scratch, p->Y, p->M, NULL);
    return pgd_cuda_gemm_q8(p->X, W, p->M, p->N, p->K, bf16, p->Y, NULL);
}

/* p's weights: n_w copies of [N][K] in its form, from dummy bf16 values (quantized through a
 * bf16 buffer of one copy). */
static void q_weights(prod_q *p, uint32_t tensor) {
    const uint64_t N = p->N, K = p->K;
    uint16_t *tmp;
    if (p->bits == 4) {
        TRY(cudaMalloc((void **)&p->W4.q, N * K / 2 * p->n_w));
        TRY(cudaMalloc((void **)&p->W4.dm, N * (K / PGD_Q4_BLOCK) * 4 * p->n_w));
    } else {
        TRY(cudaMalloc((void **)&p->W8.q, N * K * p->n_w));
        TRY(cudaMalloc((void **)&p->W8.d, N * (K / PGD_Q8_BLOCK) * 2 * p->n_w));
    }
    TRY(cudaMalloc((void **)&tmp, N * K * 2));
    for (uint32_t c = 0; c < p->n_w; c++) {
        const uint64_t at = (uint64_t)c * N;
        TRY(pgd_cuda_dummy_bf16(7 + c, tensor, 6, N * K, tmp, NULL));
        if (p->bits == 4)
            TRY(pgd_cuda_q4_quantize(
                tmp, 1, N, K,
                (pgd_q4_mat){p->W4.q + at * K / 2, p->W4.dm + at * (K / PGD_Q4_BLOCK)}, NULL));
        else
            TRY(pgd_cuda_q8_quantize(
                tmp, 1, N, K, (pgd_q8_mat){p->W8.q + at * K, p->W8.d + at * (K / PGD_Q8_BLOCK)},
                NULL));
    }
    TRY(cudaDeviceSynchronize());
    cudaFree(tmp);
}

static void free_prod_q(prod_q *p) {
    cudaFree(p->W8.q), cudaFree(p->W8.d), cudaFree(p->W4.q), cudaFree(p->W4.dm);
    cudaFree(p->X), cudaFree(p->Y);
}

/* The products over `bits`-bit weights: each shape at 1 .. 64 rows on the tensor-core kernel and
 * up to PGD_CUDA_GEMV_MAX_M on the GEMV; then prefill chunks' gate/up (bf16 out, as the backend
 * writes it) of 256, 512 and 2048 rows on the tensor-core kernel and on cuBLASLt over the
 * weights dequantized into a scratch (gemm.h's pgd_cuda_gemm_deq, the backend's 256 MiB: one
 * chunk), dequantization included — where the second overtakes the first is what the
 * backend's PGD_CUDA_DEQ_ROWS default (512) should be. */
static void products_q(pgd_cuda_gemm *g, uint32_t bits) {
    const struct shape *shapes = k_shapes;
    static const uint32_t ms[] = {1, 4, 8, 16, 64};
    printf("\n| product over %u-bit weights (--gpu-weights %s) | rows | tensor cores "
           "(pgd_cuda_gemm_q%u; the default from %u rows) | %u-bit GEMV (the default up to %u "
           "rows) |\n|---|---:|---|---|\n",
           bits, bits == 4 ? "q4" : "q8_0", bits, PGD_CUDA_GEMV_MAX_M + 1, bits,
           PGD_CUDA_GEMV_MAX_M);
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
        prod_q p = {.bits = bits,
                    .N = g_emu ? (shapes[s].N / 512 + 7) / 8 * 8 : shapes[s].N, /* 8s */
                    .K = shapes[s].K};
        const uint64_t bytes = bits == 4 ? pgd_q4_bytes(p.N, p.K) : pgd_q8_bytes(p.N, p.K);
        p.n_w = (uint32_t)((g_rotate_bytes + bytes - 1) / bytes);
        q_weights(&p, (uint32_t)s);
        TRY(cudaMalloc((void **)&p.X, (uint64_t)64 * p.K * 2));
        TRY(cudaMalloc((void **)&p.Y, (uint64_t)64 * p.N * 4));
        TRY(pgd_cuda_dummy_bf16(8, (uint32_t)s, 0, (uint64_t)64 * p.K, p.X, NULL));
        for (size_t m = 0; m < sizeof ms / sizeof ms[0]; m++) {
            p.M = ms[m];
            char cell[2][64] = {"", ""};
            for (int k = 0; k < 2; k++) {
                p.gemv = k == 1;
                if (p.gemv && p.M > PGD_CUDA_GEMV_MAX_M) continue;
                const double us = time_runs(run_prod_q, &p);
                snprintf(cell[k], sizeof cell[k], "%.1f us, %.0f GB/s", us, bytes / (us * 1e3));
            }
            printf("| %s (%u x %u) | %u | %s | %s |\n", shapes[s].name, p.N, p.K, p.M, cell[0],
                   cell[1]);
            if (bits == 4 && p.M == 1) { /* the A/B of PGD_CUDA_GEMV_Q4_ROUND */
                p.gemv = p.round = true;
                const double us = time_runs(run_prod_q, &p);
                p.round = false;
                printf("| %s, each round's loads all first (PGD_CUDA_GEMV_Q4_ROUND=1) | 1 | | "
                       "%.1f us, %.0f GB/s |\n",
                       shapes[s].name, us, bytes / (us * 1e3));
            }
        }
        free_prod_q(&p);
    }
    /* prefill chunks' gate/up product: the tensor-core kernel, and cuBLASLt on the weights
     * dequantized */
    static const uint32_t pm[] = {64, 128, 256, 512, 2048};
    prod_q p = {.bits = bits, .N = g_emu ? 112 : 28672, .K = 4096, .n_w = 1, .g = g};
    const uint64_t max_m = g_emu ? 64 : 2048, scratch = 256u << 20;
    q_weights(&p, 9);
    TRY(cudaMalloc((void **)&p.X, max_m * p.K * 2));
    TRY(cudaMalloc((void **)&p.Y, max_m * p.N * 2));
    TRY(cudaMalloc((void **)&p.scratch, scratch));
    TRY(pgd_cuda_dummy_bf16(8, 9, 0, max_m * p.K, p.X, NULL));
    /* the backend's scratch (one chunk here), and chunks of 32 MiB (4096 rows), which the L2
     * may still hold when cuBLASLt reads them (PGD_CUDA_DEQ_SCRATCH_MB=32) */
    pgd_cuda_gemm_deq *deq[2];
    TRY(pgd_cuda_gemm_deq_create(g, p.N, p.K, (uint32_t)max_m, scratch, PGD_CUDA_GEMM_FAST,
                                 PGD_CUDA_GEMM_OUT_BF16, &deq[0]));
    TRY(pgd_cuda_gemm_deq_create(g, p.N, p.K, (uint32_t)max_m, g_emu ? 1u << 20 : 32u << 20,
                                 PGD_CUDA_GEMM_FAST, PGD_CUDA_GEMM_OUT_BF16, &deq[1]));
    printf("\n| gate/up over %u-bit weights (%u x %u, bf16 out), a prefill chunk | rows | tensor "
           "cores (pgd_cuda_gemm_q%u) | dequantized + cuBLASLt (pgd_cuda_gemm_deq_q%u: the "
           "default from %u rows; 256 MiB chunks) | the same in 32 MiB chunks |\n"
           "|---|---:|---|---|---|\n",
           bits, p.N, p.K, bits, bits, bits == 4 ? 128u : 256u);
    for (size_t m = 0; m < sizeof pm / sizeof pm[0]; m++) {
        if (g_emu && m >= 3) break; /* the emulator's 16, 32, 64 rows (max_m) */
        p.M = g_emu ? (uint32_t)(16 << m) : pm[m];
        const double flop = 2.0 * p.M * p.N * p.K;
        double us[3];
        for (int k = 0; k < 3; k++) {
            p.deq = k ? deq[k - 1] : NULL;
            us[k] = time_runs(run_prod_q, &p);
        }
        printf("| gate/up, %u rows | %u | %.1f us, %.1f TFLOP/s | %.1f us, %.1f TFLOP/s | %.1f us, "
               "%.1f TFLOP/s |\n",
               p.M, p.M, us[0], flop / (us[0] * 1e6), us[1], flop / (us[1] * 1e6), us[2],
               flop / (us[2] * 1e6));
    }
    pgd_cuda_gemm_deq_destroy(deq[0]);
    pgd_cuda_gemm_deq_destroy(deq[1]);
    cudaFree(p.scratch);
    free_prod_q(&p);
}

/* ---- a prefill's gate/up product and SiLU * up ------------------------------------------------
 */

typedef struct ffn_run {
    pgd_cuda_gemm *g;
    pgd_cuda_gemm_plan *plan;
    uint16_t *X, *W, *H; /* X bf16 [M][K], W bf16 [2F][K], H bf16 [M][F] */
    void *Y;             /* [M][2F], f32 or bf16 as the plan */
    uint32_t M, F;
    bool bf16;
} ffn_run;

static int run_ffn(void *ctx, uint32_t i) {
    (void)i;
    ffn_run *f = ctx;
    int rc = pgd_cuda_gemm_run(f->g, f->plan, f->X, f->W, f->Y, f->M, NULL);
    if (!rc)
        rc = f->bf16 ? pgd_cuda_silu_mul_bf16(f->Y, f->M, f->F, f->H, NULL)
                     : pgd_cuda_silu_mul(f->Y, f->M, f->F, f->H, NULL);
    return rc;
}

/* The gate/up product of a 2k-token prefill step and its SiLU * up, the product written in f32
 * (as before) and in bf16 (the backend's plan since): the bytes the two kernels move differ by
 * M x 2F x 2 twice (235 MB at Llama-3-8B's shapes). */
static void prefill_ffn(pgd_cuda_gemm *g) {
    ffn_run f = {.g = g, .M = g_emu ? 64 : 2048, .F = g_emu ? 56 : 14336};
    const uint32_t K = 4096;
    TRY(cudaMalloc((void **)&f.X, (uint64_t)f.M * K * 2));
    TRY(cudaMalloc((void **)&f.W, (uint64_t)2 * f.F * K * 2));
    TRY(cudaMalloc((void **)&f.H, (uint64_t)f.M * f.F * 2));
    TRY(cudaMalloc(&f.Y, (uint64_t)f.M * 2 * f.F * 4));
    TRY(pgd_cuda_dummy_bf16(14, 0, 6, (uint64_t)2 * f.F * K, f.W, NULL));
    TRY(pgd_cuda_dummy_bf16(14, 1, 0, (uint64_t)f.M * K, f.X, NULL));
    const double flop = 2.0 * f.M * 2 * f.F * K;
    for (int b = 0; b < 2; b++) {
        f.bf16 = b == 1;
        TRY(pgd_cuda_gemm_plan_create(g, 2 * f.F, K, f.M, PGD_CUDA_GEMM_FAST,
                                      b ? PGD_CUDA_GEMM_OUT_BF16 : PGD_CUDA_GEMM_OUT_F32, &f.plan));
        const double us = time_runs(run_ffn, &f);
        printf("| gate/up (%u x %u) + SiLU * up, a %u-token prefill, the product in %s | %u | "
               "%.1f us, %.1f TFLOP/s | |\n",
               2 * f.F, K, f.M, b ? "bf16 (the default)" : "f32", f.M, us, flop / (us * 1e6));
        pgd_cuda_gemm_plan_destroy(f.plan);
    }
    cudaFree(f.X), cudaFree(f.W), cudaFree(f.H), cudaFree(f.Y);
}

/* ---- attention ----------------------------------------------------------------------------- */

typedef struct attn {
    pgd_kv_geom geom;
    uint16_t *kv, *out;
    float *q, *scratch;
    int32_t *bt;
    uint32_t *seq_of, *arrived;
    int32_t *pos;
    uint32_t n_split, max_ctx;
    bool dec; /* the tensor-core decode kernel (pgd_cuda_attention_dec) */
} attn;

static int run_attn(void *ctx, uint32_t i) {
    attn *a = ctx;
    return (a->dec ? pgd_cuda_attention_dec : pgd_cuda_attention_split)(
        a->q, 6144, a->kv, a->geom, i % a->geom.n_layer, 32, a->bt, a->max_ctx / a->geom.block_size,
        a->seq_of, a->pos, NULL, 1, 0.088f, a->n_split, a->max_ctx, a->scratch, a->arrived, a->out,
        NULL);
}

static void attention(uint32_t n_sm) {
    static const uint32_t ctxs[] = {1024, 4096, 16384};
    const uint32_t n_ctx = g_emu ? 2 : 3, max_ctx = g_emu ? 4096 : 16384, bs = 16;
    const uint32_t n_blocks = max_ctx / bs + 1;
    attn a = {.geom = {g_emu ? 2 : 32, 8, bs, 128}, .max_ctx = max_ctx};
    const uint64_t slab = n_blocks * pgd_kv_block_elems(a.geom);
    TRY(cudaMalloc((void **)&a.kv, slab * 2));
    TRY(pgd_cuda_dummy_bf16(9, 0, 0, slab, a.kv, NULL)); /* any 16-bit patterns: finite f16 */
    TRY(cudaMalloc((void **)&a.q, 6144 * sizeof(float)));
    TRY(pgd_cuda_dummy_f32(10, 0, 0.0f, 6144, a.q, NULL));
    TRY(cudaMalloc((void **)&a.out, 32 * 128 * 2));
    TRY(cudaMalloc((void **)&a.scratch, pgd_cuda_attention_split_bytes(1, 32, 128, max_ctx)));
    const size_t n_arr = pgd_cuda_attention_split_counters(1, 32);
    TRY(cudaMalloc((void **)&a.arrived, n_arr * sizeof(uint32_t)));
    TRY(cudaMemset(a.arrived, 0, n_arr * sizeof(uint32_t)));
    /* the block table: blocks 1 .. n in a scattered order, as an allocator hands them out */
    int32_t *bt = malloc((n_blocks - 1) * sizeof *bt);
    if (!bt) exit(1);
    for (uint32_t i = 0; i < n_blocks - 1; i++) bt[i] = (int32_t)(1 + i);
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (uint32_t i = n_blocks - 2; i > 0; i--) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        const uint32_t j = (uint32_t)(r % (i + 1));
        const int32_t t = bt[i];
        bt[i] = bt[j], bt[j] = t;
    }
    TRY(cudaMalloc((void **)&a.bt, (n_blocks - 1) * sizeof *bt));
    TRY(cudaMemcpy(a.bt, bt, (n_blocks - 1) * sizeof *bt, cudaMemcpyHostToDevice));
    free(bt);
    const uint32_t zero = 0;
    TRY(cudaMalloc((void **)&a.seq_of, sizeof zero));
    TRY(cudaMemcpy(a.seq_of, &zero, sizeof zero, cudaMemcpyHostToDevice));
    TRY(cudaMalloc((void **)&a.pos, sizeof(int32_t)));
    for (size_t c = 0; c < n_ctx; c++) {
        const int32_t last = (int32_t)ctxs[c] - 1;
        TRY(cudaMemcpy(a.pos, &last, sizeof last, cudaMemcpyHostToDevice));
        const double bytes = (double)ctxs[c] * 8 * 128 * 2 * 2; /* K and V of 8 KV heads */
        for (int dec = 0; dec < 2; dec++) { /* CUDA cores, then the tensor-core decode kernel */
            a.dec = dec;
            a.n_split = pgd_cuda_attn_splits(1, 8, n_sm, max_ctx / PGD_ATTN_CHUNK);
            const double us = time_runs(run_attn, &a);
            printf("| attention, 1 decode row (32 heads / 8 KV heads, head_dim 128), %u positions, "
                   "split %u%s | 1 | %.1f us, %.0f GB/s | |\n",
                   ctxs[c], a.n_split,
                   dec ? ", tensor cores (the default)" : ", CUDA cores (PGD_CUDA_DECODE_TC=0)", us,
                   bytes / (us * 1e3));
        }
    }
    cudaFree(a.kv), cudaFree(a.q), cudaFree(a.out), cudaFree(a.scratch), cudaFree(a.arrived);
    cudaFree(a.bt), cudaFree(a.seq_of), cudaFree(a.pos);
}

/* ---- prefill attention (tensor cores) ------------------------------------------------------- */

typedef struct prefill {
    attn a;
    pgd_attn_tile *tiles; /* device */
    uint32_t n_tiles, tile_rows;
} prefill;

static int run_prefill(void *ctx, uint32_t i) {
    prefill *p = ctx;
    const attn *a = &p->a;
    return pgd_cuda_attention_tc(a->q, 6144, a->kv, a->geom, i % a->geom.n_layer, 32, a->bt,
                                 a->max_ctx / a->geom.block_size, a->seq_of, a->pos, p->tiles,
                                 p->n_tiles, p->tile_rows, 0.088f, a->out, NULL);
}

/* One prompt of n tokens (positions 0 .. n - 1, one sequence) through the tensor-core attention,
 * tiled as a step tiles it (pgd_cuda_attn_plan); its causal products' FLOPs per second. */
static void prefill_attention(void) {
    const uint32_t n = g_emu ? 96 : 2048, bs = 16, n_blocks = n / bs + 1;
    prefill p = {.a = {.geom = {g_emu ? 2 : 32, 8, bs, 128}, .max_ctx = n}};
    attn *a = &p.a;
    const uint64_t slab = n_blocks * pgd_kv_block_elems(a->geom);
    TRY(cudaMalloc((void **)&a->kv, slab * 2));
    TRY(pgd_cuda_dummy_bf16(12, 0, 0, slab, a->kv, NULL));
    TRY(cudaMalloc((void **)&a->q, (size_t)n * 6144 * sizeof(float)));
    TRY(pgd_cuda_dummy_f32(13, 0, 0.0f, (uint64_t)n * 6144, a->q, NULL));
    TRY(cudaMalloc((void **)&a->out, (size_t)n * 32 * 128 * 2));
    int32_t *bt = malloc((n_blocks - 1) * sizeof *bt), *pos = malloc(n * sizeof *pos);
    uint32_t *seq_of = calloc(n, sizeof *seq_of), *rows = malloc(n * sizeof *rows);
    uint32_t q_start[2] = {0, n};
    pgd_attn_tile *tiles = malloc(n * sizeof *tiles);
    if (!bt || !pos || !seq_of || !rows || !tiles) exit(1);
    for (uint32_t i = 0; i < n_blocks - 1; i++) bt[i] = (int32_t)(n_blocks - 1 - i); /* scattered */
    for (uint32_t i = 0; i < n; i++) pos[i] = (int32_t)i;
    const pgd_batch batch = {.n_tokens = n, .n_seqs = 1, .q_start = q_start, .positions = pos};
    TRY(cudaMalloc((void **)&a->bt, (n_blocks - 1) * sizeof *bt));
    TRY(cudaMemcpy(a->bt, bt, (n_blocks - 1) * sizeof *bt, cudaMemcpyHostToDevice));
    TRY(cudaMalloc((void **)&a->pos, n * sizeof *pos));
    TRY(cudaMemcpy(a->pos, pos, n * sizeof *pos, cudaMemcpyHostToDevice));
    TRY(cudaMalloc((void **)&a->seq_of, n * sizeof *seq_of));
    TRY(cudaMemcpy(a->seq_of, seq_of, n * sizeof *seq_of, cudaMemcpyHostToDevice));
    TRY(cudaMalloc((void **)&p.tiles, n * sizeof *tiles));
    /* the narrow tiles (64 slots a CTA: PGD_CUDA_ATTN_TC_WIDE=0), then the wide form's (128: the
     * default) */
    for (int wide = 0; wide < 2; wide++) {
        p.tile_rows = wide ? pgd_attn_tc_rows_wide(4, 128) : pgd_attn_tc_rows(4, 128);
        p.n_tiles = pgd_cuda_attn_plan(&batch, p.tile_rows, tiles, rows).n_tiles;
        TRY(cudaMemcpy(p.tiles, tiles, p.n_tiles * sizeof *tiles, cudaMemcpyHostToDevice));
        const double us = time_runs(run_prefill, &p);
        /* Q K^T and P V over the causal pairs: 2 x 2 x head_dim FLOPs a (query head, key) pair */
        const double flop = 4.0 * 128 * 32 * ((double)n * (n + 1) / 2);
        printf("| attention, prefill of one %u-token prompt on tensor cores (32 heads / 8 KV "
               "heads, head_dim 128; %u tiles%s) | %u | %.1f us, %.1f TFLOP/s | |\n",
               n, p.n_tiles,
               wide ? " of 128 slots, two 16-slot tiles a warp: the default"
                    : " of 64 slots: PGD_CUDA_ATTN_TC_WIDE=0",
               n, us, flop / (us * 1e6));
    }
    free(bt), free(pos), free(seq_of), free(rows), free(tiles);
    cudaFree(a->kv), cudaFree(a->q), cudaFree(a->out), cudaFree(a->bt), cudaFree(a->pos);
    cudaFree(a->seq_of), cudaFree(p.tiles);
}

/* ---- RMSNorm ------------------------------------------------------------------------------- */

typedef struct norm {
    float *x, *add, *w;
    uint16_t *out;
} norm;

static int run_norm(void *ctx, uint32_t i) {
    (void)i;
    norm *n = ctx;
    return pgd_cuda_add_rmsnorm(n->x, n->add, n->w, 1e-5f, NULL, 1, 4096, n->out, NULL);
}

static void rmsnorm(void) {
    norm n;
    TRY(cudaMalloc((void **)&n.x, 4096 * 4));
    TRY(cudaMalloc((void **)&n.add, 4096 * 4));
    TRY(cudaMalloc((void **)&n.w, 4096 * 4));
    TRY(cudaMalloc((void **)&n.out, 4096 * 2));
    TRY(pgd_cuda_dummy_f32(11, 0, 0.0f, 4096, n.x, NULL));
    TRY(pgd_cuda_dummy_f32(11, 1, 0.0f, 4096, n.add, NULL));
    TRY(pgd_cuda_dummy_f32(11, 2, 1.0f, 4096, n.w, NULL));
    printf("| residual add + RMSNorm, 1 row of 4096 | 1 | %.1f us | |\n", time_runs(run_norm, &n));
    cudaFree(n.x), cudaFree(n.add), cudaFree(n.w), cudaFree(n.out);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || !n) {
        fprintf(stderr, "decode_kernels: no CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    TRY(cudaGetDeviceProperties(&prop, 0));
    if ((g_emu = getenv("PGD_CUDA_EMU") != NULL)) {
        g_rotate_bytes = 1u << 20;
        g_warm = g_reps = 1;
    }
    TRY(cudaEventCreate(&g_a));
    TRY(cudaEventCreate(&g_b));
    pgd_cuda_gemm *g = NULL;
    TRY(pgd_cuda_gemm_create(32u << 20, &g));
    printf("### Decode kernels alone on %s (bench_cuda_decode_kernels, CUDA events, mean of %u)\n\n"
           "| kernel | rows | cuBLASLt (the default from 2 rows) | pagoda's GEMV (the default at 1 "
           "row) |\n"
           "|---|---:|---|---|\n",
           prop.name, g_reps);
    products(g);
    prefill_ffn(g);
    attention((uint32_t)prop.multiProcessorCount);
    prefill_attention();
    rmsnorm();
    products_q(g, 8);
    products_q(g, 4);
    pgd_cuda_gemm_destroy(g);
    return 0;
}
