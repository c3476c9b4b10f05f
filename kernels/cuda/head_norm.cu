/*
 * kernels/cuda/head_norm.cu — the RMSNorm of every query and key head (Qwen3), in place over the
 * fused QKV GEMM's f32 rows, before RoPE: one warp per (token, head), grid-stride over the
 * T * (n_head + n_kv_head) heads, PGD_CUDA_THREADS / 32 warps a CTA. Owns nothing. CPU twin:
 * head_norm_twin.c.
 *
 * Invariants (bit-exact with the twin):
 *   - lane j holds elements j, j + 32, ... of its head (at most 8: head_dim <= 256) in
 *     registers and sums their squares in double in that order (pgd_dev_rms_square: the square
 *     of an f32 is exact in double, nothing contracted); a lane past the head's end sums nothing
 *     (0.0);
 *   - the 32 partials fold by the fixed pairwise tree of head_norm.h (__shfl_down_sync, h = 16,
 *     8, 4, 2, 1: lane j adds lane j + h's value of the level before), lane 0's sum broadcast;
 *   - s = f32(1 / sqrt(ss / D + eps)) with correctly rounded double division and square root,
 *     then x = (x * s) * w, each product rounded (__fmul_rn), w the q or the k weights;
 *   - each element is read and written by one lane (in place is safe), the v part and padding
 *     rows (pos[t] < 0, warp-uniform) are never touched.
 *   A head's bits depend only on the head and its weights, never on T, the grid or the head's
 *   place in the batch.
 * PDL (cuda_util.cuh): a warp's first head's position and norm weights (metadata and weights,
 * constant during a step) are loaded before the wait; everything else after it.
 */
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/head_norm.h"
#include "kernels/cuda/rmsnorm_math.cuh" /* pgd_dev_rms_square */

namespace {

constexpr uint32_t kLanes = PGD_HEAD_NORM_LANES;
constexpr uint32_t kPer = PGD_HEAD_NORM_MAX_DIM / kLanes; /* elements a lane holds, at most */
constexpr uint32_t kWarps = PGD_CUDA_THREADS / kLanes;    /* heads a CTA works on at once */
static_assert(kLanes == 32, "a head is one warp");

/* The lane's norm weights: w[lane + u * 32] (0 past D). */
__device__ __forceinline__ void load_w(const float *w, uint32_t lane, uint32_t D,
                                       float (&g)[kPer]) {
#pragma unroll
    for (uint32_t u = 0; u < kPer; u++) {
        const uint32_t e = lane + u * kLanes;
        g[u] = e < D ? w[e] : 0.0f;
    }
}

/* qkv: f32 [T][(n_head + 2 * n_kv_head) * D]; q_w, k_w: f32 [D]; pos: [T];
 * blockDim.x = PGD_CUDA_THREADS. Warp w of the grid takes heads w, w + warps, ... of the
 * T * (n_head + n_kv_head): head h of token t is item t * (n_head + n_kv_head) + h. */
__global__ void __launch_bounds__(PGD_CUDA_THREADS)
    head_norm_kernel(float *qkv, const float *q_w, const float *k_w, float eps, const int32_t *pos,
                     uint32_t T, uint32_t n_head, uint32_t n_kv_head, uint32_t D) {
    const uint32_t lane = threadIdx.x % kLanes, n_qk = n_head + n_kv_head;
    const uint64_t n_items = (uint64_t)T * n_qk, step = (uint64_t)gridDim.x * kWarps;
    const uint64_t w0 = (uint64_t)blockIdx.x * kWarps + threadIdx.x / kLanes;
    const uint64_t width = (uint64_t)(n_qk + n_kv_head) * D;
    /* the first head's position and weights: constant during a step, in flight before the
     * wait for the previous kernel */
    int32_t p0 = -1;
    float g[kPer];
    if (w0 < n_items) {
        p0 = pos[w0 / n_qk];
        load_w(w0 % n_qk < n_head ? q_w : k_w, lane, D, g);
    }
    pgd_dev_pdl_enter();
    for (uint64_t w = w0; w < n_items; w += step) { /* uniform in the warp */
        const uint32_t t = (uint32_t)(w / n_qk), h = (uint32_t)(w % n_qk);
        const int32_t p = w == w0 ? p0 : pos[t];
        if (p < 0) continue; /* padding row */
        if (w != w0) load_w(h < n_head ? q_w : k_w, lane, D, g);
        float *x = qkv + t * width + (uint64_t)h * D; /* the head: f32 [D] */
        float v[kPer];
#pragma unroll
        for (uint32_t u = 0; u < kPer; u++) { /* every load issued before the first is used */
            const uint32_t e = lane + u * kLanes;
            v[u] = e < D ? x[e] : 0.0f;
        }
        double acc = 0.0;
#pragma unroll
        for (uint32_t u = 0; u < kPer; u++)
            if (lane + u * kLanes < D) acc = pgd_dev_rms_square(acc, v[u]);
#pragma unroll
        for (uint32_t o = kLanes / 2; o > 0; o >>= 1)
            acc = __dadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, o));
        const double ss = __shfl_sync(0xffffffffu, acc, 0);
        const double ms = __dadd_rn(__ddiv_rn(ss, (double)D), (double)eps);
        const float s = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(ms)));
#pragma unroll
        for (uint32_t u = 0; u < kPer; u++) {
            const uint32_t e = lane + u * kLanes;
            if (e < D) x[e] = __fmul_rn(__fmul_rn(v[u], s), g[u]);
        }
    }
}

} // namespace

extern "C" int pgd_cuda_head_rmsnorm(float *qkv, const float *q_w, const float *k_w, float eps,
                                     const int32_t *pos, uint32_t T, uint32_t n_head,
                                     uint32_t n_kv_head, uint32_t head_dim, void *stream) {
    if (head_dim == 0 || head_dim > PGD_HEAD_NORM_MAX_DIM)
        return pgd_error_set(PGD_EINVAL, "head_norm: head_dim %u (1 .. %u)", head_dim,
                             PGD_HEAD_NORM_MAX_DIM);
    const uint64_t heads = (uint64_t)T * (n_head + n_kv_head);
    if (heads == 0) return 0;
    PGD_CUDA_TRY(pgd_cuda_launch(head_norm_kernel, pgd_cuda_grid(heads, kWarps), PGD_CUDA_THREADS,
                                 0, stream, qkv, q_w, k_w, eps, pos, T, n_head, n_kv_head,
                                 head_dim));
    return 0;
}
