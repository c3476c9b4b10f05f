/*
 * kernels/cuda/gemv.h — the model's products for few rows (decode steps of up to
 * PGD_CUDA_GEMV_MAX_M sequences), a kernel of pagoda's own beside cuBLASLt: Y[M][N] (f32) =
 * X[M][K] (bf16) · W[N][K]ᵀ (bf16), f32 FMAs. CPU twin: pgd_cuda_gemv_twin (gemv_twin.c), bit
 * for bit. Device pointers; asynchronous.
 *
 * Why: at M = 1 a step reads every weight once and computes almost nothing, so the product runs
 * at the speed its weights stream; cuBLASLt's algorithms for M <= 8 read Llama-3-8B's QKV and O
 * weights at 2.8-3.0 TB/s on an H200 (the gate/up ones at 4.1) and add split-K reduction passes.
 * This kernel is the weights read once, in 16-byte coalesced loads with many in flight, and
 * nothing else. It is chosen by the GEMM plan (gemm.h) when the handle asks for it. Its SiLU form
 * ends the gate/up product in SiLU * up, with the bits of the two kernels it replaces.
 *
 * THE SUM (what the twin repeats): W's row n and X's row m are cut into chunks of 8 elements
 * (chunk c: elements 8c .. 8c + 7); lane l of 32 starts from +0 and, over its chunks
 * c = l, l + 32, l + 64, ... ascending and within a chunk over the 8 elements ascending,
 * acc_l = fma(x, w, acc_l) (bf16 -> f32 exact, one rounding per FMA); then the 32 lanes fold
 * by the tree y_l = y_l + y_{l+s} for s = 16, 8, 4, 2, 1 (l < s), Y[m][n] = y_0. The order
 * depends on K alone: a row's bits are the same for every M, and equal to the twin's.
 *
 * Invariants: K a multiple of 8, X and W 16-byte aligned (so is every row), 1 <= M <=
 * PGD_CUDA_GEMV_MAX_M.
 */
#ifndef PGD_KERNELS_CUDA_GEMV_H
#define PGD_KERNELS_CUDA_GEMV_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_CUDA_GEMV_MAX_M                                                                        \
    8 /* >= pgd_cuda_gemm_bucket_max[0] (gemm.h), the rows the plans give it */
#define PGD_CUDA_GEMV_LANES 32

/* Y = X · Wᵀ by THE SUM: X bf16 [M][K], W bf16 [N][K], Y f32 [M][N]. 0, or PGD_EINVAL (shape,
 * alignment) / PGD_ECUDA. */
int pgd_cuda_gemv(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M, uint32_t N,
                  uint32_t K, void *stream);
/* The gate/up product and SiLU * up in one: out[m][j] = bf16(SiLU(g) * u) with g = Y[m][j] and
 * u = Y[m][F + j] of Y = X · Wguᵀ by THE SUM, SiLU * up as silu_mul.h computes it — the bits of
 * pgd_cuda_gemv over Wgu then pgd_cuda_silu_mul, without the f32 [M][2F] in between.
 * Wgu bf16 [2F][K] (gate rows, then up rows), out bf16 [M][F]. 0, PGD_EINVAL / PGD_ECUDA. */
int pgd_cuda_gemv_silu(const uint16_t *X, const uint16_t *Wgu, uint16_t *out, uint32_t M,
                       uint32_t F, uint32_t K, void *stream);
/* For measurements (bench/cuda_decode_kernels.c): one row, the plain form (Y f32 [N], W [N][K])
 * or the SiLU form (silu: O bf16 [N], W the gate/up weight [2N][K]), with `loads` (4, 8 or 16) of
 * a lane's W chunks in flight instead of 4, with `early`, a warp's first round of W loads issued
 * before the wait for the previous kernel (the one-row default; PGD_CUDA_GEMV_EARLY=0 turns it
 * off), or `lean` (4 loads, not early): the instance compiled for as few registers as the
 * compiler can (one load a lane in flight; what PGD_CUDA_GEMV_LEAN=1 makes the default) — the
 * same bits as pgd_cuda_gemv / _silu (THE SUM's order depends on none of them). 0, PGD_EINVAL /
 * PGD_ECUDA. */
int pgd_cuda_gemv_loads(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t N,
                        uint32_t K, bool silu, uint32_t loads, bool early, bool lean, void *stream);
/* The twin on the host, bit for bit: any M. */
void pgd_cuda_gemv_twin(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M, uint32_t N,
                        uint32_t K);

#ifdef __cplusplus
}
#endif

#endif
