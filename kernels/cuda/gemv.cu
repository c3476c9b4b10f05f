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
 * Bandwidth: kLoads x 16 bytes x 32 lanes x R = 2-8 KiB in flight a warp — if the machine
 * code issues a round's loads before its FMAs, which the source alone does not ensure. Until
 * the rounds below lost their per-chunk bound checks and the kernel its launch bounds' CTA count
 * (kGemvMinCtas), the compiler moved each load after the previous chunk's FMAs (they wait for
 * their own load): one load a lane in flight, 28 registers and 64 warps an SM at M = 1, in every
 * GPU measurement before commit c185117 (bench/results/gpu-h200.md, H200: 2.75-4.38 TB/s at
 * M = 1, faster than cuBLASLt on every product but the down projection, whose 4096 warps are
 * half an H200's room). Now, on sm_90a: 48 registers (40 warps an SM) at M = 1, 72 in the SiLU
 * form (28), a whole round in flight — tests/reference/test_cuda_sass.py reads the SASS and
 * checks it. Measured on an H200 at c185117: batch-1 decode 4.7% faster than the lean form, kept
 * for the kernel bench's A/B (PGD_CUDA_GEMV_LEAN=1). In a decode step the GEMVs follow a norm or
 * the attention, latency-bound kernels on a few SMs: there a warp's first round of W loads (into
 * its registers) is issued before the wait (one-row products, the same bits; 1.3% faster a
 * token on that H200, PGD_CUDA_GEMV_EARLY=0 turns it off). The kernel bench measured 8 and 16
 * loads a lane faster alone (QKV 13.9 -> 13.0 us, gate/up + SiLU 54.7 -> 52.9, output head 234
 * -> 227); inside a decode step both were slower (PGD_CUDA_GEMV_LOADS=8|16, their A/B switch
 * until a7ae551: +3.8% / +13.0% a token on the H200 at bd7e959, +0.2% / +7.4% on an H100), so 4
 * stays; the kernel bench keeps those instances (pgd_cuda_gemv_loads).
 *
 * Measured and removed: forms that put a one-row step's RMSNorm, RoPE + KV write and residual
 * adds inside the GEMVs (PGD_CUDA_GEMV_NORM=1 until commit a7ae551): 96 kernels fewer a token,
 * but every CTA normed the whole row before its first product — 20% slower a decode token on an
 * H200 at c185117, 12% at bd7e959, 6% on an H100 (bench/results/gpu-h200.md, gpu-h100.md).
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_rounds.cuh"
#include "kernels/cuda/silu_math.cuh"

namespace {

constexpr uint32_t kLanes = PGD_CUDA_GEMV_LANES;
constexpr uint32_t kWarps = 4, kThreads = kWarps * kLanes;
constexpr uint32_t kLoads = 4; /* W chunks of a lane in flight (pgd_cuda_gemv_loads: 8, 16) */
static_assert(kLanes == 32, "a warp's lanes share a column's chunks");

/* The columns a warp takes for M rows: each X chunk a lane reads from the cache then serves R
 * columns, so X's traffic stays within twice W's (at M = 8 one column a warp would read 8 bytes
 * of X from L1 per byte of W streamed, about what an SM's L1 can deliver). */
constexpr int cols_for(int MR) {
    return MR <= 2 ? 1 : MR <= 4 ? 2 : 4;
}

/* W's rows of the R columns a warp takes from n0 (P = R, or R / 2 gate and up pairs in the SiLU
 * form: gate rows n, then up rows N + n); a column past N reads the last one again (its result
 * is dropped). */
template <int R, bool Silu>
__device__ __forceinline__ void col_rows(const uint16_t *W, uint32_t n0, uint32_t N, uint32_t K,
                                         const uint4 *(&w)[R]) {
    constexpr int P = Silu ? R / 2 : R;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint64_t col = min(n0 + r % P, N - 1) + (Silu && r >= P ? N : 0);
        w[r] = reinterpret_cast<const uint4 *>(W + col * K);
    }
}

/* A warp's R dot products with MR rows of X by THE SUM, C chunks a row: w[r] W's rows; xc(m, c)
 * X's chunk c of row m (uint4). between() is called once by every lane: after the warp's first
 * round of W loads is in flight (Early), or before any load — the wait for the previous kernel
 * and whatever must follow it. Lane 0 ends with the sums in acc.
 *
 * A lane's chunks are lane, lane + 32, ... in that order whatever L; L of them are loaded before
 * the first is used. The rounds whose L chunks are all in the row have no branch between their
 * loads and their FMAs: with a bound check per chunk (the partial round's form), the compiler
 * moves each load into its chunk's guarded block, after the previous chunk's FMAs, and a lane
 * then has one load in flight instead of L (seen in the SASS of sm_90a: cuobjdump -sass). */
template <int MR, int R, uint32_t L, bool Early, class XC, class Between>
__device__ __forceinline__ void warp_dot(const uint4 *const (&w)[R], uint32_t C, uint32_t lane,
                                         XC xc, Between between, float (&acc)[R][MR]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++) acc[r][m] = 0.0f;
    uint4 wr[R][L]; /* a round: wr[][u] = chunk c0 + 32u */
    auto load = [&](uint32_t u, uint32_t c) {
#pragma unroll
        for (int r = 0; r < R; r++) wr[r][u] = __ldcs(w[r] + c);
    };
    auto fma_chunk = [&](uint32_t u, uint32_t c) {
        float wf[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) pgd_gemv_unpack_x(wr[r][u], wf[r]);
#pragma unroll
        for (int m = 0; m < MR; m++) {
            float xf[8];
            pgd_gemv_unpack_x(xc(m, c), xf);
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[r][m] = __fmaf_rn(xf[e], wf[r][e], acc[r][m]);
        }
    };
    pgd_gemv_rounds<L, Early>(C, lane, load, fma_chunk, between);
    pgd_gemv_fold<MR, R>(acc);
}

/* The CTAs an SM the compiler is told to expect (launch bounds' second value). 1: it keeps a
 * whole round of W loads in flight (sm_90a, nvcc 13: 48 registers at one row, 40 warps an SM;
 * 72 in the SiLU form). Lean, 0 (no value given): it spends as few registers as it can (28 and
 * 36 before the rounds lost their branches), and to do so issues each W load after the previous
 * chunk's FMAs: one load a lane in flight — the kernel every GPU measurement before this form
 * ran (PGD_CUDA_GEMV_LEAN=1 brings it back, for scripts/gpu-check's A/B). */
template <bool Lean> constexpr uint32_t kGemvMinCtas = Lean ? 0 : 1;

/* Plain (Silu false): X bf16 [MR][K], W bf16 [N][K], Y f32 [MR][N];
 * warp w computes the columns w R .. w R + R - 1 (those below N). Silu: W is the fused gate/up
 * weight [2N][K] (gate rows, then up rows), O bf16 [MR][N]; warp w computes the columns
 * j = w R / 2 .. + R / 2 - 1 of gate and of up, and writes bf16(SiLU(gate) * up) for each. K a
 * multiple of 8. */
template <int MR, int R, bool Silu, uint32_t L, bool Early, bool Lean>
__global__ void __launch_bounds__(kThreads, kGemvMinCtas<Lean>)
    gemv_kernel(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t N,
                uint32_t K) {
    static_assert(!Silu || R % 2 == 0, "gate and up columns in pairs");
    constexpr int P = Silu ? R / 2 : R; /* output columns a warp */
    const uint32_t lane = threadIdx.x % kLanes;
    const uint32_t n0 = (blockIdx.x * kWarps + threadIdx.x / kLanes) * P;
    if (n0 >= N) return; /* uniform over the warp */
    const uint4 *w[R];
    col_rows<R, Silu>(W, n0, N, K, w);
    float acc[R][MR];
    auto xc = [&](int m, uint32_t c) {
        return __ldg(reinterpret_cast<const uint4 *>(X + (uint64_t)m * K) + c);
    };
    /* X is the previous kernel's output */
    warp_dot<MR, R, L, Early>(
        w, K / 8, lane, xc, [] { pgd_dev_pdl_enter(); }, acc);
    if (lane == 0) pgd_gemv_store<MR, R, Silu>(acc, n0, N, N, Y, O);
}

/* A switch of env_switch.h, read once into *known (0: not read yet, 1: off, 2: on); any host
 * thread. */
bool env_switch(const char *name, bool dflt, int *known) {
    int k = __atomic_load_n(known, __ATOMIC_RELAXED);
    if (!k) {
        k = pgd_cuda_env_switch(name, dflt) ? 2 : 1;
        __atomic_store_n(known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}

/* Whether one-row products run the lean instances (kGemvMinCtas): PGD_CUDA_GEMV_LEAN=1, the
 * kernel as the GPU runs before commit c185117 measured it (4.7% slower a decode token there) —
 * scripts/gpu-check's kernel-bench A/B; not early. */
bool lean_env() {
    static int known;
    return env_switch("PGD_CUDA_GEMV_LEAN", false, &known);
}

/* Early, Lean: 1 or 0, or -1 for what the environment says (pgd_gemv_early_loads(), lean_env());
 * both forms exist for one row only (the products the GEMV runs by default), lean (never early)
 * before early. */
template <int MR, bool Silu, uint32_t L = kLoads, int Early = -1, int Lean = -1>
cudaError_t launch(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t N,
                   uint32_t K, cudaStream_t stream) {
    constexpr int R = Silu && cols_for(MR) < 2 ? 2 : cols_for(MR);
    constexpr int P = Silu ? R / 2 : R;
    const uint32_t warps = (N + P - 1) / P;
    const unsigned ctas = (warps + kWarps - 1) / kWarps;
    if constexpr (MR == 1) {
        if constexpr (L == kLoads)
            if (Lean == 1 || (Lean == -1 && Early != 1 && lean_env()))
                return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, false, true>, ctas, kThreads, 0,
                                       stream, X, W, Y, O, N, K);
        if (Early == 1 || (Early == -1 && pgd_gemv_early_loads()))
            return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, true, false>, ctas, kThreads, 0,
                                   stream, X, W, Y, O, N, K);
    }
    return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, false, false>, ctas, kThreads, 0, stream, X,
                           W, Y, O, N, K);
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

/* The checks and the launch of the plain form or the SiLU form. */
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
                                   bool lean, void *stream) {
    if ((loads != 4 && loads != 8 && loads != 16) || (lean && (early || loads != 4)))
        return pgd_error_set(PGD_EINVAL,
                             "CUDA GEMV: %u loads a lane (4, 8 or 16), lean only at 4 and not "
                             "early",
                             loads);
    int rc = check(1, K, X, W);
    if (rc || N == 0) return rc;
    static const launch_fn by_loads[2][2][3] = {
        {{launch<1, false, 4, 0, 0>, launch<1, false, 8, 0, 0>, launch<1, false, 16, 0, 0>},
         {launch<1, true, 4, 0, 0>, launch<1, true, 8, 0, 0>, launch<1, true, 16, 0, 0>}},
        {{launch<1, false, 4, 1>, launch<1, false, 8, 1>, launch<1, false, 16, 1>},
         {launch<1, true, 4, 1>, launch<1, true, 8, 1>, launch<1, true, 16, 1>}}};
    static const launch_fn lean_form[2] = {launch<1, false, 4, 0, 1>, launch<1, true, 4, 0, 1>};
    PGD_CUDA_TRY((lean ? lean_form[silu] : by_loads[early][silu][loads / 8])(X, W, Y, O, N, K,
                                                                             (cudaStream_t)stream));
    return 0;
}
