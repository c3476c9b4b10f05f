/*
 * kernels/cuda/gemm.h — the model's matrix products through cuBLASLt: Y[M][N] (f32) =
 * X[M][K] (bf16) · W[N][K]ᵀ (bf16), fp32 accumulation. CPU twin: pgd_cuda_gemm_twin
 * (gemm_twin.c: double accumulation of the same bf16 inputs; a tolerance check).
 *
 * Determinism: one plan per weight shape (N, K), made once at load, fixes one algorithm with no
 * split-K (reduction scheme NONE, one K split), used for every M up to max_m: a row's dot
 * products then run in the same order whatever else is in the batch (tests/gpu checks rows at
 * M = 1, 7, 64, 512 and more are bit-identical). `fast` plans may pick an algorithm per range of
 * M for speed instead (then a row's bits depend on the batch size).
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

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pgd_cuda_gemm pgd_cuda_gemm;
typedef struct pgd_cuda_gemm_plan pgd_cuda_gemm_plan;

/* A cuBLASLt handle with a workspace of workspace_bytes on the current device. 0, PGD_ECUDA. */
int pgd_cuda_gemm_create(size_t workspace_bytes, pgd_cuda_gemm **out);
void pgd_cuda_gemm_destroy(pgd_cuda_gemm *g); /* NULL is fine */

/* A plan for W of shape [N][K] and any M in [1, max_m]. 0, PGD_ECUDA (no algorithm). */
int pgd_cuda_gemm_plan_create(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t max_m, bool fast,
                              pgd_cuda_gemm_plan **out);
void pgd_cuda_gemm_plan_destroy(pgd_cuda_gemm_plan *p); /* NULL is fine */

/* Y = X · Wᵀ for M rows (1 <= M <= max_m), asynchronous on `stream`. Device pointers, 16-byte
 * aligned: X bf16 [M][K], W bf16 [N][K], Y f32 [M][N]. 0, PGD_ECUDA. */
int pgd_cuda_gemm_run(pgd_cuda_gemm *g, pgd_cuda_gemm_plan *p, const uint16_t *X, const uint16_t *W,
                      float *Y, uint32_t M, void *stream);

/* The CPU twin: Y[m][n] = sum_k X[m][k] W[n][k] in double, rounded to f32 (host pointers). */
void pgd_cuda_gemm_twin(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M, uint32_t N,
                        uint32_t K);

#ifdef __cplusplus
}
#endif

#endif
