/*
 * kernels/cuda/rmsnorm.cu — residual add + RMSNorm into bf16, one CTA of PGD_RMSNORM_LANES
 * threads per row (grid-stride over rows). Owns nothing. CPU twin: rmsnorm_twin.c.
 *
 * Invariants (bit-exact with the twin):
 *   - thread j adds (f32, __fadd_rn) and squares elements j, j + LANES, ... of its row and sums
 *     the squares in double in that order (__dmul_rn / __dadd_rn: the square of an f32 is exact
 *     in double, and nothing is contracted);
 *   - the LANES partials fold by the fixed pairwise tree of rmsnorm.h in shared memory;
 *   - s = f32(1 / sqrt(ss / E + eps)) with correctly rounded double division and square root,
 *     then out = bf16((x * s) * w), each product rounded (__fmul_rn).
 *   A row's bits depend only on the row, never on R, rows or the grid.
 * Each thread loads kLoads of its elements (and their addends) before it adds, stores and squares
 * them in the same order: one load waited for at a time made the kernel latency-bound (15 us for
 * one row of 4096 on an H200; 6 us with 8 loads in flight, two passes over the row). A row of
 * at most kOne * LANES elements (4096) now stays in registers: its elements, addends and norm
 * weights are all loaded before the first is used, and the second pass reads nothing; the
 * weights (constant during a step) are loaded before the wait for the previous kernel
 * (cuda_util.cuh's PDL contract), and the tree's last five levels run in warp 0 by shuffles.
 */
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rmsnorm_math.cuh"

namespace {

/* Elements of a row a thread holds in registers when the row fits (E <= kOne * LANES: one
 * wait for all of its loads, the norm's weights included); longer rows take two passes. */
constexpr uint32_t kOne = 16;

/* N elements of a row, e0, e0 + LANES, ... (those below E): loaded with their addends (add: the
 * addend row or NULL) before the first is used, then x += add in place (f32), and the squares
 * summed into acc in order (double). v gets the elements (0 past E). */
template <uint32_t N>
__device__ __forceinline__ void add_square(float *xr, const float *add, uint32_t e0, uint32_t E,
                                           float (&v)[N], double &acc) {
    float a[N];
#pragma unroll
    for (uint32_t u = 0; u < N; u++) {
        const uint32_t e = e0 + u * PGD_RMSNORM_LANES;
        v[u] = e < E ? xr[e] : 0.0f;
        a[u] = add && e < E ? add[e] : 0.0f;
    }
#pragma unroll
    for (uint32_t u = 0; u < N; u++) {
        const uint32_t e = e0 + u * PGD_RMSNORM_LANES;
        if (e >= E) break;
        if (add) {
            v[u] = __fadd_rn(v[u], a[u]);
            xr[e] = v[u];
        }
        acc = pgd_dev_rms_square(acc, v[u]);
    }
}

/* The same N elements normed: o[e] = bf16((v * s) * g), each product rounded. */
template <uint32_t N>
__device__ __forceinline__ void scale_out(uint16_t *o, uint32_t e0, uint32_t E, const float (&v)[N],
                                          const float (&g)[N], float s) {
#pragma unroll
    for (uint32_t u = 0; u < N; u++) {
        const uint32_t e = e0 + u * PGD_RMSNORM_LANES;
        if (e < E) o[e] = pgd_dev_rms_out(v[u], s, g[u]);
    }
}

/* N norm weights from e0 (0 past E). */
template <uint32_t N>
__device__ __forceinline__ void load_w(const float *w, uint32_t e0, uint32_t E, float (&g)[N]) {
#pragma unroll
    for (uint32_t u = 0; u < N; u++) {
        const uint32_t e = e0 + u * PGD_RMSNORM_LANES;
        g[u] = e < E ? w[e] : 0.0f;
    }
}

/* x, add: f32 [.][E]; w: f32 [E]; rows: [R] or NULL; out: bf16 [R][E]; blockDim.x = LANES. */
__global__ void __launch_bounds__(PGD_RMSNORM_LANES)
    add_rmsnorm_kernel(float *x, const float *add, const float *w, float eps, const uint32_t *rows,
                       uint32_t R, uint32_t E, uint16_t *out) {
    __shared__ double part[PGD_RMSNORM_LANES];
    __shared__ float scale;
    const unsigned j = threadIdx.x;
    const bool one = E <= kOne * PGD_RMSNORM_LANES; /* a row in registers: one wait for its loads */
    float g[kOne];
    if (one) load_w(w, j, E, g); /* constant during a step: in flight before the wait */
    pgd_dev_pdl_enter();
    for (uint32_t i = blockIdx.x; i < R; i += gridDim.x) { /* uniform across the CTA */
        const uint64_t r = rows ? rows[i] : i;
        float *xr = x + r * E;
        const float *ar = add ? add + r * E : NULL;
        uint16_t *o = out + (uint64_t)i * E;
        double acc = 0.0;
        if (one) {
            float v[kOne];
            add_square(xr, ar, j, E, v, acc);
            scale_out(o, j, E, v, g, pgd_dev_rms_scale(part, &scale, acc, E, eps));
            continue;
        }
        constexpr uint32_t kLoads = 8, kStep = kLoads * PGD_RMSNORM_LANES;
        for (uint32_t e0 = j; e0 < E; e0 += kStep) {
            float v[kLoads];
            add_square(xr, ar, e0, E, v, acc);
        }
        const float s = pgd_dev_rms_scale(part, &scale, acc, E, eps);
        for (uint32_t e0 = j; e0 < E; e0 += kStep) { /* xr[e]: this thread's own writes */
            float v[kLoads], g[kLoads];
#pragma unroll
            for (uint32_t u = 0; u < kLoads; u++) {
                const uint32_t e = e0 + u * PGD_RMSNORM_LANES;
                v[u] = e < E ? xr[e] : 0.0f;
            }
            load_w(w, e0, E, g);
            scale_out(o, e0, E, v, g, s);
        }
    }
}

} // namespace

extern "C" int pgd_cuda_add_rmsnorm(float *x, const float *add, const float *w, float eps,
                                    const uint32_t *rows, uint32_t R, uint32_t E, uint16_t *out,
                                    void *stream) {
    if (R == 0 || E == 0) return 0;
    PGD_CUDA_TRY(pgd_cuda_launch(add_rmsnorm_kernel, pgd_cuda_grid(R, 1), PGD_RMSNORM_LANES, 0,
                                 stream, x, add, w, eps, rows, R, E, out));
    return 0;
}
