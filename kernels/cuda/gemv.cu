/*
 * kernels/cuda/gemv.cu — Y = X · Wᵀ for up to PGD_CUDA_GEMV_MAX_M rows (gemv.h: THE SUM). Owns
 * nothing. CPU twin: gemv_twin.c, bit for bit.
 *
 * Grid: one warp per R output columns (rows of W: R = 1, 2 or 4 as M grows, cols_for), kWarps
 * warps a CTA; the kernel is templated on M and R so a lane's M x R accumulators stay in
 * registers. How many columns a warp takes never changes a result (THE SUM is per column). Lane l
 * reads W's chunks l, l + 32, ... of row n in 16-byte loads (a warp: 512 contiguous bytes a load),
 * kLoads of them in flight before their FMAs, streamed (__ldcs: W is read once a step and should
 * not push the activations and the KV cache out of L2); X's chunks come through the read-only
 * cache (__ldg: every warp of the GPU reads the same M rows). Then the warp's shuffle-down tree
 * and lane 0 writes the M results. No shared memory, no barrier: a warp past N leaves at once.
 * The SiLU form (pgd_cuda_gemv_silu) takes gate column j and up column F + j in the same warp
 * and writes bf16(SiLU(gate) * up) from lane 0 (silu_math.cuh: silu_mul.cu's arithmetic).
 *
 * Bandwidth: kLoads x 16 bytes x 32 lanes x R = 2-8 KiB in flight a warp; at M = 1, 28
 * registers (64 warps an SM), at M = 8, 125 (16 warps an SM). Measured on an H200
 * (bench/results/gpu-h200.md): 2.75-4.38 TB/s at M = 1, faster than cuBLASLt on every product
 * but the down projection, slower at M = 4 and 8. Tried together there (commit ed543f3) and
 * slower, so undone: 8 loads in flight at one column a warp (QKV 16.0 -> 17.4 us, gate/up 58.7
 * -> 66.5) and a prefetch to L2 of a lane's first chunks before the wait for the previous
 * kernel (gate/up + SiLU, which kept 4 loads, 59.0 -> 63.0) — in the kernel bench, where the
 * previous kernel is the same GEMV, streaming too. In a decode step the GEMVs follow a norm or
 * the attention, latency-bound kernels on a few SMs: there a warp's first round of W loads (into
 * its registers) may be issued before the wait (PGD_CUDA_GEMV_EARLY=1, one-row products; the
 * same bits; more registers: 34 against 28 at 4 loads, 50 against 36 in the SiLU form).
 * Untested on hardware; off until scripts/gpu-check's A/B row says it pays.
 */
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/silu_math.cuh"

namespace {

constexpr uint32_t kLanes = PGD_CUDA_GEMV_LANES;
constexpr uint32_t kWarps = 4, kThreads = kWarps * kLanes;
constexpr uint32_t kLoads = 4; /* W chunks of a lane in flight (pgd_cuda_gemv_loads: 8, 16) */
static_assert(kLanes == 32, "a warp's lanes share a column's chunks");

/* The 8 bf16 of a 16-byte chunk as f32 (exact). */
__device__ __forceinline__ void unpack(const uint4 &r, float (&f)[8]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

/* The columns a warp takes for M rows: each X chunk a lane reads from the cache then serves R
 * columns, so X's traffic stays within twice W's (at M = 8 one column a warp would read 8 bytes
 * of X from L1 per byte of W streamed, about what an SM's L1 can deliver). */
constexpr int cols_for(int MR) {
    return MR <= 2 ? 1 : MR <= 4 ? 2 : 4;
}

/* Plain (Silu false): X bf16 [MR][K], W bf16 [N][K], Y f32 [MR][N]; warp w computes the columns
 * w R .. w R + R - 1 (those below N). Silu: W is the fused gate/up weight [2N][K] (gate rows, then
 * up rows), O bf16 [MR][N]; warp w computes the columns j = w R / 2 .. + R / 2 - 1 of gate and of
 * up, and writes bf16(SiLU(gate) * up) for each. K a multiple of 8. */
template <int MR, int R, bool Silu, uint32_t L, bool Early>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t N,
                uint32_t K) {
    static_assert(!Silu || R % 2 == 0, "gate and up columns in pairs");
    constexpr int P = Silu ? R / 2 : R; /* output columns a warp */
    const uint32_t lane = threadIdx.x % kLanes;
    const uint32_t n0 = (blockIdx.x * kWarps + threadIdx.x / kLanes) * P;
    if (n0 >= N) return; /* uniform over the warp */
    const uint32_t C = K / 8;
    const uint4 *w[R]; /* a column past N reads the last one again (its result is dropped) */
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint64_t col = min(n0 + r % P, N - 1) + (Silu && r >= P ? N : 0);
        w[r] = reinterpret_cast<const uint4 *>(W + col * K);
    }
    float acc[R][MR];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++) acc[r][m] = 0.0f;
    /* a round of chunks c0, c0 + 32, ... (L of them): wr[][u] = chunk c0 + 32u, unconditional
     * loads (past the row: chunk c0 again, or chunk 0 for a lane with none, K < 256) */
    uint4 wr[R][L];
    auto load_round = [&](uint32_t c0) {
        const uint32_t again = c0 < C ? c0 : 0;
#pragma unroll
        for (uint32_t u = 0; u < L; u++) {
            const uint32_t c = c0 + u * kLanes;
#pragma unroll
            for (int r = 0; r < R; r++) wr[r][u] = __ldcs(w[r] + (c < C ? c : again));
        }
    };
    auto fma_round = [&](uint32_t c0) {
#pragma unroll
        for (uint32_t u = 0; u < L; u++) {
            const uint32_t c = c0 + u * kLanes;
            if (c >= C) break;
            float wf[R][8];
#pragma unroll
            for (int r = 0; r < R; r++) unpack(wr[r][u], wf[r]);
#pragma unroll
            for (int m = 0; m < MR; m++) {
                float xf[8];
                unpack(__ldg(reinterpret_cast<const uint4 *>(X + (uint64_t)m * K) + c), xf);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r][m] = __fmaf_rn(xf[e], wf[r][e], acc[r][m]);
            }
        }
    };
    uint32_t start = lane;
    if (Early) { /* W is constant during a step: the first round in flight before the wait,
                  * while the previous kernel (a norm, the attention) still runs */
        load_round(lane);
        pgd_dev_pdl_enter(); /* X is the previous kernel's output */
        fma_round(lane);
        start += kLanes * L;
    } else {
        pgd_dev_pdl_enter();
    }
    for (uint32_t c0 = start; c0 < C; c0 += kLanes * L) {
        load_round(c0);
        fma_round(c0);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++)
#pragma unroll
            for (uint32_t s = kLanes / 2; s > 0; s /= 2)
                acc[r][m] = __fadd_rn(acc[r][m], __shfl_down_sync(0xffffffffu, acc[r][m], s));
    if (lane != 0) return;
#pragma unroll
    for (int r = 0; r < P; r++)
        if (n0 + r < N)
#pragma unroll
            for (int m = 0; m < MR; m++) {
                if (Silu)
                    O[(uint64_t)m * N + n0 + r] =
                        pgd_dev_f32_to_bf16(pgd_dev_silu_mul(acc[r][m], acc[P + r][m]));
                else
                    Y[(uint64_t)m * N + n0 + r] = acc[r][m];
            }
}

/* Whether a one-row product's warps issue their first round of W loads before the wait for the
 * previous kernel: when the environment says PGD_CUDA_GEMV_EARLY=1 (the A/B switch of
 * scripts/gpu-check; off by default until measured). Read once; any host thread. */
bool early_loads() {
    static int known; /* 0: not read yet, 1: off, 2: on */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (!k) {
        const char *env = getenv("PGD_CUDA_GEMV_EARLY");
        k = env && env[0] == '1' ? 2 : 1;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}

template <int MR, bool Silu, uint32_t L = kLoads, int Early = -1 /* -1: early_loads() */>
cudaError_t launch(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t N,
                   uint32_t K, cudaStream_t stream) {
    constexpr int R = Silu && cols_for(MR) < 2 ? 2 : cols_for(MR);
    constexpr int P = Silu ? R / 2 : R;
    const uint32_t warps = (N + P - 1) / P;
    const unsigned ctas = (warps + kWarps - 1) / kWarps;
    if constexpr (MR == 1) /* the early form for one row only (the products the GEMV runs by
                            * default) */
        if (Early == 1 || (Early == -1 && early_loads()))
            return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, true>, ctas, kThreads, 0, stream, X,
                                   W, Y, O, N, K);
    return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, false>, ctas, kThreads, 0, stream, X, W, Y,
                           O, N, K);
}

using launch_fn = cudaError_t (*)(const uint16_t *, const uint16_t *, float *, uint16_t *, uint32_t,
                                  uint32_t, cudaStream_t);

/* The argument checks of every entry point: 0 or PGD_EINVAL (said). */
int check(uint32_t M, uint32_t K, const uint16_t *X, const uint16_t *W) {
    if (M < 1 || M > PGD_CUDA_GEMV_MAX_M || K == 0 || K % 8 || (uintptr_t)X % 16 ||
        (uintptr_t)W % 16)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA GEMV: %u rows (1 to %u), K %u (a multiple of 8), X and W "
                             "16-byte aligned",
                             M, PGD_CUDA_GEMV_MAX_M, K);
    return 0;
}

/* The checks and the launch of either form. */
template <bool Silu>
int gemv(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t M, uint32_t N,
         uint32_t K, void *stream) {
    int rc = check(M, K, X, W);
    if (rc || N == 0) return rc;
    static const launch_fn by_m[] = {launch<1, Silu>, launch<2, Silu>, launch<3, Silu>,
                                     launch<4, Silu>, launch<5, Silu>, launch<6, Silu>,
                                     launch<7, Silu>, launch<8, Silu>};
    static_assert(sizeof by_m / sizeof by_m[0] == PGD_CUDA_GEMV_MAX_M, "one instance per M");
    PGD_CUDA_TRY(by_m[M - 1](X, W, Y, O, N, K, (cudaStream_t)stream));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_gemv(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M, uint32_t N,
                             uint32_t K, void *stream) {
    return gemv<false>(X, W, Y, NULL, M, N, K, stream);
}

extern "C" int pgd_cuda_gemv_silu(const uint16_t *X, const uint16_t *Wgu, uint16_t *out, uint32_t M,
                                  uint32_t F, uint32_t K, void *stream) {
    return gemv<true>(X, Wgu, NULL, out, M, F, K, stream);
}

extern "C" int pgd_cuda_gemv_loads(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O,
                                   uint32_t N, uint32_t K, bool silu, uint32_t loads, bool early,
                                   void *stream) {
    if (loads != 4 && loads != 8 && loads != 16)
        return pgd_error_set(PGD_EINVAL, "CUDA GEMV: %u loads a lane (4, 8 or 16)", loads);
    int rc = check(1, K, X, W);
    if (rc || N == 0) return rc;
    static const launch_fn by_loads[2][2][3] = {
        {{launch<1, false, 4, 0>, launch<1, false, 8, 0>, launch<1, false, 16, 0>},
         {launch<1, true, 4, 0>, launch<1, true, 8, 0>, launch<1, true, 16, 0>}},
        {{launch<1, false, 4, 1>, launch<1, false, 8, 1>, launch<1, false, 16, 1>},
         {launch<1, true, 4, 1>, launch<1, true, 8, 1>, launch<1, true, 16, 1>}}};
    PGD_CUDA_TRY(by_loads[early][silu][loads / 8](X, W, Y, O, N, K, (cudaStream_t)stream));
    return 0;
}
