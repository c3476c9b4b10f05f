/*
 * kernels/cuda/gemm.h — the model's matrix products through cuBLASLt: Y[M][N] (f32) =
 * X[M][K] (bf16) · W[N][K]ᵀ (bf16), fp32 accumulation. CPU twin: pgd_cuda_gemm_twin
 * (gemm_twin.c: double accumulation of the same bf16 inputs; a tolerance check).
 *
 * Determinism: one plan per weight shape (N, K), made once at load, fixes one algorithm with no
 * split-K (reduction scheme NONE, one K split), used for every M up to max_m: a row's dot
 * products then run in the same order whatever else is in the batch (tests/gpu checks rows at
 * M = 1, 7, 64, 512 and more are bit-identical). `fast` plans pick an algorithm per range of M
 * (pgd_cuda_gemm_bucket), split-K allowed, for speed instead: a row's bits are then the same
 * within a range but may differ between ranges. Measured on an H200 (bench/cuda_gemm_algos.c,
 * Llama-3-8B's shapes): at M = 1 the deterministic plan's algorithm (chosen for M = 4096) reads
 * the weights at 0.8-1.7 TB/s, the heuristic's choice for small M at 2.6-4.4 TB/s (split-K 4 for
 * the down projection); no single algorithm is within 1.5x of the best at both M = 1 and 4096.
 * The ranges end where the CUDA graphs' padded batch sizes (engine/backends/cuda_plan.h) have
 * bounds too, so padding a decode step never moves it to another range.
 *
 * PGD_CUDA_GEMM_FAST_GEMV plans (the backend's default) are fast plans whose first range (M = 1,
 * a decode step of one sequence) runs pagoda's own kernel (gemv.h: the weights streamed once, no
 * split-K pass) instead of cuBLASLt, where K is a multiple of 8 (--no-decode-gemv: cuBLASLt).
 * Measured on an H200 (bench/results/gpu-h200.md): at M = 1 the kernel read Llama-3-8B's QKV, O
 * and gate/up weights faster than cuBLASLt (batch-1 decode 4.96 against 5.20 ms/token), at M = 4
 * and 8 slower on every product but O; so the range is M = 1 alone.
 *
 * Nothing allocates during a run: the workspace is allocated once with the handle, and a run
 * only changes the M of the plan's layouts.
 *
 * Threading: a handle and its plans belong to the thread that owns the stream (the scheduler
 * thread).
 */
#ifndef PGD_KERNELS_CUDA_GEMM_H
#define PGD_KERNELS_CUDA_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/q4.h"
#include "kernels/cuda/q8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ranges of M of a fast plan: range b is (bucket_max[b - 1], bucket_max[b]]. */
#define PGD_CUDA_GEMM_BUCKETS 6
static const uint32_t pgd_cuda_gemm_bucket_max[PGD_CUDA_GEMM_BUCKETS] = {1,   8,    64,
                                                                         256, 1024, UINT32_MAX};
static inline int pgd_cuda_gemm_bucket(uint32_t M) {
    int b = 0;
    while (b < PGD_CUDA_GEMM_BUCKETS - 1 && M > pgd_cuda_gemm_bucket_max[b]) b++;
    return b;
}

/* How a plan chooses its algorithms (see above). */
typedef enum pgd_cuda_gemm_mode {
    PGD_CUDA_GEMM_INVARIANT = 0, /* one split-free algorithm for every M */
    PGD_CUDA_GEMM_FAST = 1,      /* one per range of M, split-K allowed */
    PGD_CUDA_GEMM_FAST_GEMV = 2, /* FAST, with the first range on pgd_cuda_gemv */
} pgd_cuda_gemm_mode;

/* The type of a plan's output Y. bf16 (rounded to nearest even from the f32 sums) where the
 * next kernel reads the product once and only needs bf16's precision — the fused gate/up
 * product of a prefill, which SiLU * up reads (half the bytes written and read: at a 2k-token
 * step of Llama-3-8B, 235 MB a layer less). */
typedef enum pgd_cuda_gemm_out {
    PGD_CUDA_GEMM_OUT_F32 = 0,
    PGD_CUDA_GEMM_OUT_BF16 = 1,
} pgd_cuda_gemm_out;

typedef struct pgd_cuda_gemm pgd_cuda_gemm;
typedef struct pgd_cuda_gemm_plan pgd_cuda_gemm_plan;

/* A cuBLASLt handle with a workspace of workspace_bytes on the current device. 0, PGD_ECUDA. */
int pgd_cuda_gemm_create(size_t workspace_bytes, pgd_cuda_gemm **out);
void pgd_cuda_gemm_destroy(pgd_cuda_gemm *g); /* NULL is fine */

/* A plan for W of shape [N][K] and any M in [1, max_m], output of type `type`. A bf16 plan's
 * split-K partial sums are reduced in f32 (never in the output type). 0, PGD_ECUDA (no
 * algorithm). */
int pgd_cuda_gemm_plan_create(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t max_m,
                              pgd_cuda_gemm_mode mode, pgd_cuda_gemm_out type,
                              pgd_cuda_gemm_plan **out);
/* As pgd_cuda_gemm_plan_create, for a product whose Y rows are ldy >= N elements apart: the
 * columns [n0, n0 + N) of a wider Y[M][ldy] (run with Y + n0). Not PGD_CUDA_GEMM_FAST_GEMV when
 * ldy > N (PGD_EINVAL). */
int pgd_cuda_gemm_plan_create_ld(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t ldy,
                                 uint32_t max_m, pgd_cuda_gemm_mode mode, pgd_cuda_gemm_out type,
                                 pgd_cuda_gemm_plan **out);
/* Whether the plan runs M rows on pgd_cuda_gemv (for tests and logs). */
bool pgd_cuda_gemm_plan_gemv(const pgd_cuda_gemm_plan *p, uint32_t M);
void pgd_cuda_gemm_plan_destroy(pgd_cuda_gemm_plan *p); /* NULL is fine */

/* Y = X · Wᵀ for M rows (1 <= M <= max_m), asynchronous on `stream`. Device pointers, 16-byte
 * aligned: X bf16 [M][K], W bf16 [N][K], Y [M][N] of the plan's output type. The GEMV range
 * (pgd_cuda_gemm_plan_gemv) of a bf16 plan is the caller's to run (the backend's gate/up
 * product there is pgd_cuda_gemv_silu): PGD_EINVAL. 0, PGD_ECUDA. */
int pgd_cuda_gemm_run(pgd_cuda_gemm *g, pgd_cuda_gemm_plan *p, const uint16_t *X, const uint16_t *W,
                      void *Y, uint32_t M, void *stream);

/* ---- products over 8- and 4-bit weights through cuBLASLt ---------------------------------
 *
 * Y = X · Wᵀ for many rows with W in 8 bits (q8.h) or 4 bits (q4.h): W's rows dequantized into a
 * bf16 scratch a chunk at a time (pgd_cuda_q8_rows_bf16 / pgd_cuda_q4_rows_bf16: the values
 * --gpu-weights bf16 would hold, each rounded once to bf16), each chunk's columns of Y by a
 * cuBLASLt plan of the chunk's shape writing into Y's rows (pgd_cuda_gemm_plan_create_ld). The
 * dequantization reads the weights' bytes and writes 2 bytes a weight, which the product reads
 * back: paid once per product whatever M is, it is small next to the product's math where M is
 * large (a prefill), where cuBLASLt's tensor-core rate is the point; the backend sends products
 * of fewer rows to its own kernels (gemv_q8.h, gemm_grouped.h), which read the 8- or 4-bit
 * weights once. The chunks' plans are fast ones (split-K allowed) when `mode` is
 * PGD_CUDA_GEMM_FAST, split-free with PGD_CUDA_GEMM_INVARIANT; a row's bits then do not depend
 * on M but differ from the backend's own kernels'. Untested on hardware. */

/* Rows of W a chunk dequantizes: all N where N x K bf16 values fit scratch_bytes, else the
 * fewest chunks that fit, each a multiple of 128 rows (the last the rest: pgd_gemm_deq_last).
 * 0 where not even 128 rows fit. Host and device alike. */
static inline uint32_t pgd_gemm_deq_rows(uint32_t N, uint32_t K, uint64_t scratch_bytes) {
    const uint64_t row_bytes = (uint64_t)K * 2;
    if ((uint64_t)N * row_bytes <= scratch_bytes) return N;
    const uint64_t fit = scratch_bytes / row_bytes / 128 * 128; /* the most rows, in 128s */
    if (!fit) return 0;
    const uint64_t n_chunks = ((uint64_t)N + fit - 1) / fit;
    const uint64_t even = ((uint64_t)N + n_chunks - 1) / n_chunks; /* as even as 128s allow */
    return (uint32_t)((even + 127) / 128 * 128);
}
/* The rows of the last chunk for chunks of `rows` (pgd_gemm_deq_rows): N - (chunks - 1) rows. */
static inline uint32_t pgd_gemm_deq_last(uint32_t N, uint32_t rows) {
    return N - (N - 1) / rows * rows;
}

typedef struct pgd_cuda_gemm_deq pgd_cuda_gemm_deq;

/* The plans for W of shape [N][K] in chunks of pgd_gemm_deq_rows(N, K, scratch_bytes) rows, any
 * M in [1, max_m], output of type `type`; mode PGD_CUDA_GEMM_FAST or _INVARIANT. The scratch is
 * the caller's (a run's argument), of at least pgd_cuda_gemm_deq_scratch(d) bytes. 0,
 * PGD_EINVAL (shape, mode, a scratch smaller than 128 rows), PGD_ECUDA (no algorithm). */
int pgd_cuda_gemm_deq_create(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t max_m,
                             uint64_t scratch_bytes, pgd_cuda_gemm_mode mode,
                             pgd_cuda_gemm_out type, pgd_cuda_gemm_deq **out);
/* ... with Y's rows ldy elements apart (ldy >= N: a part of a fused product's output). */
int pgd_cuda_gemm_deq_create_ld(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t ldy,
                                uint32_t max_m, uint64_t scratch_bytes, pgd_cuda_gemm_mode mode,
                                pgd_cuda_gemm_out type, pgd_cuda_gemm_deq **out);
uint64_t pgd_cuda_gemm_deq_scratch(const pgd_cuda_gemm_deq *d); /* rows x K x 2 */
void pgd_cuda_gemm_deq_destroy(pgd_cuda_gemm_deq *d);           /* NULL is fine */

/* Y = X · Wᵀ for M rows (1 <= M <= max_m), asynchronous on `stream`: X bf16 [M][K], W [N][K] in
 * 8 bits (pgd_q8_mat, q8.h) or 4 bits (pgd_q4_mat, q4.h), scratch bf16 [rows][K], Y [M][ldy] of
 * the plans' output type (its columns [0, N) written); device pointers, X and Y 16-byte aligned. 0,
 * PGD_ECUDA. */
int pgd_cuda_gemm_deq_q8(pgd_cuda_gemm *g, pgd_cuda_gemm_deq *d, const uint16_t *X, pgd_q8_mat W,
                         uint16_t *scratch, void *Y, uint32_t M, void *stream);
int pgd_cuda_gemm_deq_q4(pgd_cuda_gemm *g, pgd_cuda_gemm_deq *d, const uint16_t *X, pgd_q4_mat W,
                         uint16_t *scratch, void *Y, uint32_t M, void *stream);

/* The CPU twin: Y[m][n] = sum_k X[m][k] W[n][k] in double, rounded to f32 (host pointers). */
void pgd_cuda_gemm_twin(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M, uint32_t N,
                        uint32_t K);

#ifdef __cplusplus
}
#endif

#endif
