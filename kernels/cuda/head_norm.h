/*
 * kernels/cuda/head_norm.h — the RMSNorm of every query and key head (Qwen3's q_norm / k_norm),
 * in place over the fused QKV GEMM's f32 output, before RoPE. CPU twin:
 * pgd_cuda_head_rmsnorm_twin (head_norm_twin.c). Device pointers; asynchronous.
 *
 * One warp per (token, head) and a fixed reduction tree, so a head's bits depend only on that
 * head: lane j < PGD_HEAD_NORM_LANES sums (double) x^2 of elements j, j + LANES, ... in order,
 * then the lanes fold pairwise (lane j += lane j + h for h = LANES/2, ..., 1). The twin does the
 * same arithmetic in the same order, so kernel and twin agree bit for bit. Against
 * pgd_rmsnorm_f32 (one sum in index order) only the order of the double sum differs.
 */
#ifndef PGD_KERNELS_CUDA_HEAD_NORM_H
#define PGD_KERNELS_CUDA_HEAD_NORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_HEAD_NORM_LANES   32  /* partial sums of a head = the lanes of its warp */
#define PGD_HEAD_NORM_MAX_DIM 256 /* the widest head (8 elements a lane, in registers) */

/* For each token t < T with pos[t] >= 0, qkv[t] = [q: n_head*D | k: n_kv_head*D | v: ...] (f32,
 * the fused QKV GEMM's row): every q head x (D elements) becomes x[e] * s * q_w[e], every k
 * head x[e] * s * k_w[e] (f32 products, left to right), s = f32(1 / sqrt(sum(x^2) / D + eps))
 * computed in double as pgd_rmsnorm_f32 does; v is left as it is, and so is a padding row
 * (pos[t] < 0, as attention.h defines it). qkv: f32 [T][(n_head + 2 * n_kv_head) * D];
 * q_w, k_w: f32 [D]; pos: [T]. head_dim: 1 .. PGD_HEAD_NORM_MAX_DIM.
 * 0, PGD_EINVAL (head_dim) or PGD_ECUDA. */
int pgd_cuda_head_rmsnorm(float *qkv, const float *q_w, const float *k_w, float eps,
                          const int32_t *pos, uint32_t T, uint32_t n_head, uint32_t n_kv_head,
                          uint32_t head_dim, void *stream);
void pgd_cuda_head_rmsnorm_twin(float *qkv, const float *q_w, const float *k_w, float eps,
                                const int32_t *pos, uint32_t T, uint32_t n_head, uint32_t n_kv_head,
                                uint32_t head_dim);

#ifdef __cplusplus
}
#endif

#endif
