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
 * -> 227); inside a decode step both were slower (PGD_CUDA_GEMV_LOADS=8|16, their A/B switch:
 * +3.8% / +13.0% a token on the H200 at bd7e959, +0.2% / +7.4% on an H100), so 4 stays.
 *
 * Two forms remove a one-row step's norm kernels (PGD_CUDA_GEMV_NORM=1 in the backend, opt-in:
 * 20% slower a decode token on the H200 at c185117, the fused QKV + norm 22.4 us against 19.1
 * for the two kernels): the residual form (pgd_cuda_gemv_acc) adds its product into the residual
 * row where lane 0 writes it, and the norm form (pgd_cuda_gemv_rmsnorm) norms that row in every CTA
 * before its warps read X from shared memory: the row copied in by cp.async (one round trip, no
 * registers held), the norm's weights prefetched into L1 before the wait, the sums of squares
 * and the normed bf16 row from shared memory. 256-thread CTAs, 4 or 6 an SM (the registers'
 * bound, launch_bounds), each warp striding over the columns. The QKV product's norm form
 * (pgd_cuda_gemv_qkv_rope) gives each warp a pair of columns — a RoPE pair, or two neighbouring
 * unrotated dimensions — and lane 0 ends it as rope_kv.cu does (bias, rotation, q into qkv, k and
 * v into the slab; rope_math.cuh). A decode token then launches 96 kernels fewer, and with the
 * early loads the norm's latency overlaps the first weights'.
 */
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/qkv_pairs.h"
#include "kernels/cuda/rmsnorm_math.cuh"
#include "kernels/cuda/rope_math.cuh"
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
    /* a partial round (the first, before the wait, or the last): unconditional loads (past the
     * row: chunk c0 again, or chunk 0 for a lane with none, K < 256), FMAs while in the row */
    auto load_part = [&](uint32_t c0) {
        const uint32_t again = c0 < C ? c0 : 0;
#pragma unroll
        for (uint32_t u = 0; u < L; u++) {
            const uint32_t c = c0 + u * kLanes;
#pragma unroll
            for (int r = 0; r < R; r++) wr[r][u] = __ldcs(w[r] + (c < C ? c : again));
        }
    };
    auto fma_chunk = [&](uint32_t u, uint32_t c) {
        float wf[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) unpack(wr[r][u], wf[r]);
#pragma unroll
        for (int m = 0; m < MR; m++) {
            float xf[8];
            unpack(xc(m, c), xf);
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[r][m] = __fmaf_rn(xf[e], wf[r][e], acc[r][m]);
        }
    };
    auto fma_part = [&](uint32_t c0) {
#pragma unroll
        for (uint32_t u = 0; u < L; u++) {
            const uint32_t c = c0 + u * kLanes;
            if (c >= C) break;
            fma_chunk(u, c);
        }
    };
    uint32_t c0 = lane;
    if (Early) { /* W is constant during a step: the first round in flight before the wait,
                  * while the previous kernel (a norm, the attention) still runs */
        load_part(c0);
        between();
        fma_part(c0);
        c0 += kLanes * L;
    } else {
        between();
    }
    for (; c0 + kLanes * (L - 1) < C; c0 += kLanes * L) { /* whole rounds: no branch */
#pragma unroll
        for (uint32_t u = 0; u < L; u++)
#pragma unroll
            for (int r = 0; r < R; r++) wr[r][u] = __ldcs(w[r] + c0 + u * kLanes);
#pragma unroll
        for (uint32_t u = 0; u < L; u++) fma_chunk(u, c0 + u * kLanes);
    }
    if (c0 < C) { /* the lane's last chunks, fewer than L */
        load_part(c0);
        fma_part(c0);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++)
#pragma unroll
            for (uint32_t s = kLanes / 2; s > 0; s /= 2)
                acc[r][m] = __fadd_rn(acc[r][m], __shfl_down_sync(0xffffffffu, acc[r][m], s));
}

/* Lane 0's results for the columns n0 .. n0 + P - 1 below N: Y[m][n] = sum (Acc: Y[m][n] + sum,
 * one rounding), or in the SiLU form O[m][n] = bf16(SiLU(gate) * up). */
template <int MR, int R, bool Silu, bool Acc>
__device__ __forceinline__ void store(const float (&acc)[R][MR], uint32_t n0, uint32_t N, float *Y,
                                      uint16_t *O) {
    constexpr int P = Silu ? R / 2 : R;
#pragma unroll
    for (int r = 0; r < P; r++)
        if (n0 + r < N)
#pragma unroll
            for (int m = 0; m < MR; m++) {
                const uint64_t i = (uint64_t)m * N + n0 + r;
                if (Silu)
                    O[i] = pgd_dev_f32_to_bf16(pgd_dev_silu_mul(acc[r][m], acc[P + r][m]));
                else
                    Y[i] = Acc ? __fadd_rn(Y[i], acc[r][m]) : acc[r][m];
            }
}

/* The CTAs an SM the compiler is told to expect (launch bounds' second value). 1: it keeps a
 * whole round of W loads in flight (sm_90a, nvcc 13: 48 registers at one row, 40 warps an SM;
 * 72 in the SiLU form). Lean, 0 (no value given): it spends as few registers as it can (28 and
 * 36 before the rounds lost their branches), and to do so issues each W load after the previous
 * chunk's FMAs: one load a lane in flight — the kernel every GPU measurement before this form
 * ran (PGD_CUDA_GEMV_LEAN=1 brings it back, for scripts/gpu-check's A/B). */
template <bool Lean> constexpr uint32_t kGemvMinCtas = Lean ? 0 : 1;

/* Plain (Silu false): X bf16 [MR][K], W bf16 [N][K], Y f32 [MR][N] (Acc: added to what Y holds);
 * warp w computes the columns w R .. w R + R - 1 (those below N). Silu: W is the fused gate/up
 * weight [2N][K] (gate rows, then up rows), O bf16 [MR][N]; warp w computes the columns
 * j = w R / 2 .. + R / 2 - 1 of gate and of up, and writes bf16(SiLU(gate) * up) for each. K a
 * multiple of 8. */
template <int MR, int R, bool Silu, uint32_t L, bool Early, bool Acc, bool Lean>
__global__ void __launch_bounds__(kThreads, kGemvMinCtas<Lean>)
    gemv_kernel(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t N,
                uint32_t K) {
    static_assert(!Silu || R % 2 == 0, "gate and up columns in pairs");
    static_assert(!(Silu && Acc), "the SiLU form writes bf16");
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
    if (lane == 0) store<MR, R, Silu, Acc>(acc, n0, N, Y, O);
}

/* ---- the norm forms (pgd_cuda_gemv_rmsnorm, pgd_cuda_gemv_qkv_rope) ----------------------
 * One row. Every CTA norms x's row into its shared memory with rmsnorm.cu's arithmetic, thread j
 * of PGD_RMSNORM_LANES being the norm's lane j, then its warps take their columns as
 * gemv_kernel's do, reading X from there. The CTAs are at most kNormCtasPerSm an SM (so the
 * row is normed no more often than that) and a warp takes columns n, n + (the grid's warps), ...
 * (so warps differ by at most one column). */
constexpr uint32_t kNormThreads = PGD_RMSNORM_LANES, kNormWarps = kNormThreads / kLanes;
static_assert(kNormThreads % kLanes == 0 && kNormThreads % 4 == 0, "whole warps");

/* The norm form's ends: the plain product, SiLU * up, or the QKV row's bias, RoPE and KV write. */
enum class Form { kPlain, kSilu, kRope };

/* CTAs an SM the registers must allow (launch bounds), the most without spills that keep a
 * round's loads in flight (sm_90a, nvcc 13): 40 registers in the plain form, 62 to 64 in the
 * SiLU and RoPE forms (two columns'); 8 and 6 CTAs, as before the rounds lost their branches,
 * would spill now. */
template <Form F, bool Early> constexpr uint32_t kNormCtasPerSm = F == Form::kPlain ? 6 : 4;

/* Dynamic shared memory of the norm form for rows of K: the row f32 [K], then the normed row
 * bf16 [K]. */
constexpr size_t norm_smem(uint32_t K) {
    return (size_t)K * 6;
}

/* Before the wait: the norm weights' cache lines into L1 (they are constant during a step; the
 * second pass reads them). */
__device__ __forceinline__ void norm_prefetch(const float *nw, uint32_t K) {
#if defined(__CUDACC__) /* nvcc; the emulator (tests/cuda_emu) has no cache to fill */
    for (uint32_t e = threadIdx.x * 32; e < K; e += kNormThreads * 32) /* 128-byte lines */
        asm volatile("prefetch.global.L1 [%0];" ::"l"(nw + e));
#else
    (void)nw, (void)K;
#endif
}

/* x's row normed into xs (bf16 [K], shared) by the whole CTA: the row copied into xf (f32 [K],
 * shared; cp.async, no registers held), thread j sums the squares of elements j, j + LANES, ...
 * in order (rmsnorm_math.cuh), the scale by the tree, then xs[e] = bf16((x[e] * s) * w[e]).
 * Returns after a barrier (xs complete). x 16-byte aligned. */
__device__ __forceinline__ void norm_row(const float *x, const float *nw, float eps, uint32_t K,
                                         float *xf, uint16_t *xs, double *part, float *scale) {
    const uint32_t j = threadIdx.x;
    for (uint32_t i = j; i < K / 4; i += kNormThreads)
        __pipeline_memcpy_async(xf + 4 * i, x + 4 * i, 16);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    double acc = 0.0;
    for (uint32_t e = j; e < K; e += kNormThreads) acc = pgd_dev_rms_square(acc, xf[e]);
    const float s = pgd_dev_rms_scale(part, scale, acc, K, eps);
    for (uint32_t e = j; e < K; e += kNormThreads) xs[e] = pgd_dev_rms_out(xf[e], s, __ldg(nw + e));
    __syncthreads();
}

/* What the RoPE form needs beyond the product (rope_kv.h's arguments for one row). */
struct rope_epi {
    const float *bias;    /* f32 [QKV] or NULL */
    const float *cos_sin; /* f32 [n_pos][rope_dim] */
    const int32_t *pos;   /* the row's position (the step's metadata) */
    const int64_t *slot;  /* its KV slot */
    uint16_t *kv;         /* the f16 slab */
    pgd_kv_geom geom;
    uint32_t layer, n_head, rope_dim;
    bool neox;
};

/* Pair u of the QKV row (qkv_pairs.h). */
__device__ __forceinline__ pgd_qkv_pair pair_at(const rope_epi &r, uint32_t u) {
    return pgd_qkv_pair_at(r.n_head, r.geom.n_kv_head, r.geom.head_dim, r.rope_dim, r.neox, u);
}

/* Lane 0's end of pair p with products a, b, as rope_kv.cu does it: the bias (bz: its two
 * values), the rotation by (c, s), q into qkv, k or v into the slab at `slot` (none when slot <
 * 0); a padding row (pos < 0) writes its raw q products (the product's own, unrotated). */
__device__ __forceinline__ void rope_store(const rope_epi &r, const pgd_qkv_pair &p, float a,
                                           float b, float2 bz, float2 cs, int32_t pos, int64_t slot,
                                           float *qkv) {
    const uint32_t n_qk = r.n_head + r.geom.n_kv_head;
    if (pos >= 0) {
        if (r.bias) a = __fadd_rn(a, bz.x), b = __fadd_rn(b, bz.y);
        if (p.rot) pgd_dev_rope_rotate(a, b, cs.x, cs.y);
    }
    if (p.h < r.n_head) {
        qkv[p.c0] = a;
        qkv[p.c1] = b;
    } else if (pos >= 0 && slot >= 0) {
        const bool v = p.h >= n_qk;
        uint16_t *dst =
            r.kv + pgd_kv_slot_index(r.geom, slot, r.layer, v, p.h - (v ? n_qk : r.n_head));
        dst[p.d0] = pgd_dev_kv_f16(a);
        dst[p.d1] = pgd_dev_kv_f16(b);
    }
}

/* x, nw: f32 [K]. kPlain: W bf16 [N][K], Y f32 [N]; kSilu: W [2N][K] (gate rows then up rows), O
 * bf16 [N]; kRope: W the QKV weight [2N][K], N its column pairs, Y the q part of qkv (f32 [2N]).
 * Dynamic shared memory: norm_smem(K). */
template <Form F, bool Early>
__global__ void __launch_bounds__(kNormThreads, kNormCtasPerSm<F, Early>)
    gemv_norm_kernel(const float *x, const float *nw, float eps, const uint16_t *W, float *Y,
                     uint16_t *O, uint32_t N, uint32_t K, rope_epi re) {
    extern __shared__ __align__(16) uint4 norm_sm[]; /* f32 [K], then bf16 [K] */
    __shared__ double part[kNormThreads];
    __shared__ float scale;
    float *xf = reinterpret_cast<float *>(norm_sm);
    const uint4 *xs4 = norm_sm + K / 4; /* the normed row */
    constexpr int R = F == Form::kPlain ? 1 : 2;
    const uint32_t lane = threadIdx.x % kLanes, C = K / 8, stride = gridDim.x * kNormWarps;
    uint32_t n = blockIdx.x * kNormWarps + threadIdx.x / kLanes;
    auto xc = [&](int, uint32_t c) { return xs4[c]; };
    const uint4 *w[R];
    float acc[R][1] = {};
    /* kRope: the row's position and slot (the step's metadata), and per pair its bias and cos /
     * sin values (constant during the step): loaded before the wait, or before the pair's dot */
    int32_t pos = 0;
    int64_t slot = -1;
    if (F == Form::kRope) pos = *re.pos, slot = *re.slot;
    float2 bz = {0.0f, 0.0f}, cs = {1.0f, 0.0f};
    /* W's rows of column (pair) col, clamped to N - 1; kRope: its bias and cos / sin values */
    auto begin = [&](uint32_t col) {
        if constexpr (F == Form::kRope) {
            const pgd_qkv_pair pr = pair_at(re, min(col, N - 1));
            w[0] = reinterpret_cast<const uint4 *>(W + (uint64_t)pr.c0 * K);
            w[R - 1] = reinterpret_cast<const uint4 *>(W + (uint64_t)pr.c1 * K);
            if (re.bias) bz = float2{__ldg(re.bias + pr.c0), __ldg(re.bias + pr.c1)};
            if (pr.rot && pos >= 0) {
                const float *c = re.cos_sin + (uint64_t)pos * re.rope_dim + 2 * pr.i;
                cs = float2{__ldg(c), __ldg(c + 1)};
            }
        } else {
            col_rows<R, F == Form::kSilu>(W, col, N, K, w);
        }
    };
    /* lane 0: column (pair) col's results, if it is one */
    auto end = [&](uint32_t col) {
        if (col >= N) return;
        if constexpr (F == Form::kRope)
            rope_store(re, pair_at(re, col), acc[0][0], acc[R - 1][0], bz, cs, pos, slot, Y);
        else
            store<1, R, F == Form::kSilu, false>(acc, col, N, Y, O);
    };
    norm_prefetch(nw, K);
    /* the first column: every warp, one past N too (it reads column N - 1 and drops the
     * result), since the whole CTA norms the row */
    begin(n);
    warp_dot<1, R, kLoads, Early>(
        w, C, lane, xc,
        [&] {
            pgd_dev_pdl_enter(); /* x is the previous kernel's output */
            norm_row(x, nw, eps, K, xf, reinterpret_cast<uint16_t *>(norm_sm + K / 4), part,
                     &scale);
        },
        acc);
    if (lane == 0) end(n);
    for (n += stride; n < N; n += stride) {
        begin(n);
        warp_dot<1, R, kLoads, false>(
            w, C, lane, xc, [] {}, acc);
        if (lane == 0) end(n);
    }
}

template <Form F, bool Early>
cudaError_t launch_norm(const float *x, const float *nw, float eps, const uint16_t *W, float *Y,
                        uint16_t *O, uint32_t N, uint32_t K, const rope_epi &re,
                        cudaStream_t stream) {
    /* the fewest columns a warp that keep to kNormCtasPerSm CTAs an SM, then the fewest warps
     * that take them all at that many a warp */
    const uint64_t most = (uint64_t)kNormWarps * kNormCtasPerSm<F, Early> * pgd_cuda_sm_count();
    const uint64_t per = (N + most - 1) / most;
    const unsigned ctas = pgd_cuda_grid((N + per - 1) / per, kNormWarps);
    static bool smem_done[PGD_CUDA_MAX_DEVICES]; /* for rows past 8k elements */
    if (norm_smem(K) > 48 * 1024) {
        const cudaError_t e = pgd_cuda_smem_once(gemv_norm_kernel<F, Early>,
                                                 norm_smem(PGD_CUDA_GEMV_NORM_MAX_K), smem_done);
        if (e != cudaSuccess) return e;
    }
    return pgd_cuda_launch(gemv_norm_kernel<F, Early>, ctas, kNormThreads, norm_smem(K), stream, x,
                           nw, eps, W, Y, O, N, K, re);
}

/* read() (never 0) once into *known (0: not read yet); any host thread. */
template <class F> int read_once(int *known, F read) {
    int k = __atomic_load_n(known, __ATOMIC_RELAXED);
    if (!k) {
        k = read();
        __atomic_store_n(known, k, __ATOMIC_RELAXED);
    }
    return k;
}

/* A switch of env_switch.h, read once into *known (1: off, 2: on). */
bool env_switch(const char *name, bool dflt, int *known) {
    return read_once(known, [&] { return pgd_cuda_env_switch(name, dflt) ? 2 : 1; }) == 2;
}

/* Whether a one-row product's warps issue their first round of W loads before the wait for the
 * previous kernel: the default since the H200 run of commit c185117 (batch-1 decode 1.3% faster
 * alone, 2.5% with the tensor-core decode attention); PGD_CUDA_GEMV_EARLY=0 turns it off. */
bool early_loads() {
    static int known;
    return env_switch("PGD_CUDA_GEMV_EARLY", true, &known);
}

/* W chunks a lane has in flight in the one-row plain and SiLU products: PGD_CUDA_GEMV_LOADS=8
 * or 16 (scripts/gpu-check's A/B: faster alone in the kernel bench, slower in a decode step on
 * both cards measured), else kLoads. Read once; any host thread. */
uint32_t loads_env() {
    static int known;
    return (uint32_t)read_once(&known, [] {
        const char *env = getenv("PGD_CUDA_GEMV_LOADS");
        return env && !strcmp(env, "8") ? 8 : env && !strcmp(env, "16") ? 16 : (int)kLoads;
    });
}

/* Whether one-row products run the lean instances (kGemvMinCtas): PGD_CUDA_GEMV_LEAN=1, the
 * kernel as the GPU runs before commit c185117 measured it (4.7% slower a decode token there) —
 * scripts/gpu-check's kernel-bench A/B; not early. */
bool lean_env() {
    static int known;
    return env_switch("PGD_CUDA_GEMV_LEAN", false, &known);
}

/* Early, Lean: 1 or 0, or -1 for what the environment says (early_loads(), lean_env()); both
 * forms exist for one row only (the products the GEMV runs by default), lean (never early)
 * before early. */
template <int MR, bool Silu, uint32_t L = kLoads, int Early = -1, bool Acc = false, int Lean = -1>
cudaError_t launch(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t N,
                   uint32_t K, cudaStream_t stream) {
    constexpr int R = Silu && cols_for(MR) < 2 ? 2 : cols_for(MR);
    constexpr int P = Silu ? R / 2 : R;
    const uint32_t warps = (N + P - 1) / P;
    const unsigned ctas = (warps + kWarps - 1) / kWarps;
    if constexpr (MR == 1) {
        if constexpr (L == kLoads)
            if (Lean == 1 || (Lean == -1 && Early != 1 && lean_env()))
                return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, false, Acc, true>, ctas,
                                       kThreads, 0, stream, X, W, Y, O, N, K);
        if (Early == 1 || (Early == -1 && early_loads()))
            return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, true, Acc, false>, ctas, kThreads, 0,
                                   stream, X, W, Y, O, N, K);
    }
    return pgd_cuda_launch(gemv_kernel<MR, R, Silu, L, false, Acc, false>, ctas, kThreads, 0,
                           stream, X, W, Y, O, N, K);
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

/* The checks and the launch of each form (Silu, or Acc: Y += the product). */
template <bool Silu, bool Acc = false>
int gemv(const uint16_t *X, const uint16_t *W, float *Y, uint16_t *O, uint32_t M, uint32_t N,
         uint32_t K, void *stream) {
    int rc = check(M, K, X, W);
    if (rc || N == 0) return rc;
    static const launch_fn by_m[] = {
        launch<1, Silu, kLoads, -1, Acc>, launch<2, Silu, kLoads, -1, Acc>,
        launch<3, Silu, kLoads, -1, Acc>, launch<4, Silu, kLoads, -1, Acc>,
        launch<5, Silu, kLoads, -1, Acc>, launch<6, Silu, kLoads, -1, Acc>,
        launch<7, Silu, kLoads, -1, Acc>, launch<8, Silu, kLoads, -1, Acc>};
    static_assert(sizeof by_m / sizeof by_m[0] == PGD_CUDA_GEMV_MAX_M, "one instance per M");
    launch_fn f = by_m[M - 1];
    if (!Acc && M == 1 && loads_env() != kLoads)
        f = loads_env() == 8 ? launch<1, Silu, 8> : launch<1, Silu, 16>;
    PGD_CUDA_TRY(f(X, W, Y, O, N, K, (cudaStream_t)stream));
    return 0;
}

/* The checks of a norm form and its launch, early as asked (-1: early_loads()). */
template <Form F>
int norm_form(int early, const float *x, const float *nw, float eps, const uint16_t *W, float *Y,
              uint16_t *O, uint32_t N, uint32_t K, const rope_epi &re, void *stream) {
    if (K == 0 || K % 8 || K > PGD_CUDA_GEMV_NORM_MAX_K || (uintptr_t)W % 16 || (uintptr_t)x % 16 ||
        (uintptr_t)nw % 4 || (F == Form::kSilu ? !O : !Y))
        return pgd_error_set(PGD_EINVAL,
                             "CUDA GEMV with RMSNorm: K %u (a multiple of 8, at most %u), W "
                             "and x 16-byte aligned, %s given",
                             K, PGD_CUDA_GEMV_NORM_MAX_K, F == Form::kSilu ? "out" : "Y");
    if (N == 0) return 0;
    const bool e = early == 1 || (early == -1 && early_loads());
    PGD_CUDA_TRY((e ? launch_norm<F, true> : launch_norm<F, false>)(x, nw, eps, W, Y, O, N, K, re,
                                                                    (cudaStream_t)stream));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_gemv(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M, uint32_t N,
                             uint32_t K, void *stream) {
    return gemv<false>(X, W, Y, NULL, M, N, K, stream);
}

extern "C" int pgd_cuda_gemv_acc(const uint16_t *X, const uint16_t *W, float *Y, uint32_t M,
                                 uint32_t N, uint32_t K, void *stream) {
    return gemv<false, true>(X, W, Y, NULL, M, N, K, stream);
}

extern "C" int pgd_cuda_gemv_silu(const uint16_t *X, const uint16_t *Wgu, uint16_t *out, uint32_t M,
                                  uint32_t F, uint32_t K, void *stream) {
    return gemv<true>(X, Wgu, NULL, out, M, F, K, stream);
}

extern "C" int pgd_cuda_gemv_rmsnorm(const float *x, const float *nw, float eps, const uint16_t *W,
                                     float *Y, uint16_t *out, uint32_t N, uint32_t K, bool silu,
                                     int early, void *stream) {
    const rope_epi none = {};
    return silu ? norm_form<Form::kSilu>(early, x, nw, eps, W, Y, out, N, K, none, stream)
                : norm_form<Form::kPlain>(early, x, nw, eps, W, Y, out, N, K, none, stream);
}

extern "C" int pgd_cuda_gemv_qkv_rope(const float *x, const float *nw, float eps,
                                      const uint16_t *Wqkv, const float *bias, const float *cos_sin,
                                      const int32_t *pos, const int64_t *slot, uint32_t n_head,
                                      uint32_t rope_dim, bool neox, uint16_t *kv, pgd_kv_geom geom,
                                      uint32_t layer, float *qkv, uint32_t K, int early,
                                      void *stream) {
    const uint32_t D = geom.head_dim;
    if (D == 0 || D % 2 || rope_dim > D || rope_dim % 2 || geom.n_kv_head == 0 ||
        geom.block_size == 0 || layer >= geom.n_layer || !cos_sin || !pos || !slot || !kv)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA QKV GEMV with RoPE: head_dim %u, rope_dim %u (even, at most "
                             "head_dim), %u KV heads, block size %u, layer %u of %u",
                             D, rope_dim, geom.n_kv_head, geom.block_size, layer, geom.n_layer);
    const rope_epi re = {bias, cos_sin, pos, slot, kv, geom, layer, n_head, rope_dim, neox};
    const uint32_t pairs = pgd_qkv_pairs(n_head, geom.n_kv_head, D);
    return norm_form<Form::kRope>(early, x, nw, eps, Wqkv, qkv, NULL, pairs, K, re, stream);
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
        {{launch<1, false, 4, 0, false, 0>, launch<1, false, 8, 0, false, 0>,
          launch<1, false, 16, 0, false, 0>},
         {launch<1, true, 4, 0, false, 0>, launch<1, true, 8, 0, false, 0>,
          launch<1, true, 16, 0, false, 0>}},
        {{launch<1, false, 4, 1>, launch<1, false, 8, 1>, launch<1, false, 16, 1>},
         {launch<1, true, 4, 1>, launch<1, true, 8, 1>, launch<1, true, 16, 1>}}};
    static const launch_fn lean_form[2] = {launch<1, false, 4, 0, false, 1>,
                                           launch<1, true, 4, 0, false, 1>};
    PGD_CUDA_TRY((lean ? lean_form[silu] : by_loads[early][silu][loads / 8])(X, W, Y, O, N, K,
                                                                             (cudaStream_t)stream));
    return 0;
}
