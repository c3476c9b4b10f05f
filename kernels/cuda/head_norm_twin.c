/*
 * kernels/cuda/head_norm_twin.c — CPU twin of pgd_cuda_head_rmsnorm (head_norm.cu): the kernel's
 * arithmetic in the kernel's order (PGD_HEAD_NORM_LANES lane partials in double, the pairwise
 * tree of head_norm.h, the scale in double rounded once, (x * s) * w in f32), so the two agree
 * bit for bit. It differs from pgd_rmsnorm_f32 on each head only by the order of the double sum.
 * Plain C; no FMA contraction (ISO C mode for GCC, the pragma for clang).
 */
#include "kernels/cuda/head_norm.h"

#include <math.h>

#include "common/error.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* One head in place: x: f32 [D]; w: f32 [D]. */
static void norm_head(float *x, const float *w, float eps, uint32_t D) {
    double part[PGD_HEAD_NORM_LANES];
    for (uint32_t j = 0; j < PGD_HEAD_NORM_LANES; j++) {
        double acc = 0.0;
        for (uint32_t e = j; e < D; e += PGD_HEAD_NORM_LANES) acc += (double)x[e] * x[e];
        part[j] = acc;
    }
    for (uint32_t h = PGD_HEAD_NORM_LANES / 2; h > 0; h >>= 1)
        for (uint32_t j = 0; j < h; j++) part[j] += part[j + h];
    const float s = (float)(1.0 / sqrt(part[0] / D + (double)eps));
    for (uint32_t e = 0; e < D; e++) x[e] = x[e] * s * w[e];
}

/* qkv: f32 [T][(n_head + 2 * n_kv_head) * D]; q_w, k_w: f32 [D]; pos: [T]. */
void pgd_cuda_head_rmsnorm_twin(float *qkv, const float *q_w, const float *k_w, float eps,
                                const int32_t *pos, uint32_t T, uint32_t n_head, uint32_t n_kv_head,
                                uint32_t head_dim) {
    const uint32_t D = head_dim, n_qk = n_head + n_kv_head;
    PGD_ASSERT(D > 0 && D <= PGD_HEAD_NORM_MAX_DIM);
    const uint64_t width = (uint64_t)(n_qk + n_kv_head) * D;
    for (uint32_t t = 0; t < T; t++) {
        if (pos[t] < 0) continue; /* padding row */
        float *row = qkv + t * width;
        for (uint32_t h = 0; h < n_qk; h++)
            norm_head(row + (uint64_t)h * D, h < n_head ? q_w : k_w, eps, D);
    }
}
