/*
 * kernels/cuda/moe.cu — a mixture-of-experts layer's routing on the device (moe.h): each token's
 * top-K experts and weights, the pairs grouped by expert into the grouped products' tiles, and the
 * experts' outputs mixed back. Owns nothing. CPU twins: moe_twin.c.
 *
 * Route: one warp per token, grid-stride over the T tokens, PGD_CUDA_THREADS / 32 warps a CTA.
 * Lane l holds the logits of experts l, l + 32, ... (at most 16: NE <= 512) in registers and a
 * mask of the taken ones. Pass j: the first untaken expert c (warp minimum of the lanes' first)
 * wins if its logit is a NaN (nothing is greater than a NaN, so route_token keeps it); else the
 * winner is the largest of the untaken non-NaN logits, the lowest id among equal ones (a lane
 * scans its experts in ascending order keeping the first of equals, the butterfly keeps the lower
 * id of equals) — route_token's "a later one replaces the candidate only if strictly greater",
 * whatever the lanes' order. Lane j % 32 keeps pass j's (id, logit). Weights: each lane exp() of
 * its passes' l_j - l_0 in double, the sum in pass order (every lane the same, by shuffles),
 * w_j = f32(wd_j / sum); each pass's pair written at its rank among the K ids.
 *
 * Group: two kernels, no atomics that decide an order (the shared-memory histogram's integer
 * additions commute: the counts are the same whatever the order they land in).
 *   - plan, one CTA of kPlanThreads: counts[e] = the pairs of expert e (a shared histogram over
 *     the P pairs), one block-wide exclusive scan of (rows, tiles) packed in 64 bits: expert e's
 *     row offset and first tile; thread e writes its tiles and counts[e] = its row offset,
 *     counts[NE] = the rows, *n_tiles the tiles;
 *   - scatter, a CTA per expert (grid-stride): CTA e walks the P pairs in order in chunks of
 *     PGD_CUDA_THREADS * kScatPer (thread i: kScatPer consecutive pairs), a block-wide exclusive
 *     scan of each thread's matches gives each match its rank, so the rows of e keep the pairs'
 *     order (ascending token: a token has an expert once); it stops once counts[e + 1] -
 *     counts[e] rows are written, an expert without pairs at once.
 *
 * Combine: one thread per (token, 4 columns) (per column when E % 4 or an address is not 16-byte
 * aligned), grid-stride; the K terms added by __fmaf_rn in j order from 0: the twin's bits.
 *
 * Invariants: a token's pick / pick_w and out bits depend only on its own inputs (its logits; its
 * Y rows and weights), never on T, the grid or its place in the batch; the group's outputs are a
 * function of pick alone. Ids >= NE in pick (never made by route) are ignored: no row.
 * PDL (cuda_util.cuh): every kernel waits before its first read (all inputs are a step's
 * activations) and before its first write.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/moe.h"

namespace {

constexpr uint32_t kLanes = 32;
constexpr uint32_t kWarps = PGD_CUDA_THREADS / kLanes;  /* tokens a route CTA works on */
constexpr uint32_t kPer = PGD_MOE_MAX_EXPERTS / kLanes; /* logits a lane holds, at most */
constexpr uint32_t kPlanThreads = 1024;                 /* the plan's one CTA */
constexpr uint32_t kScatPer = 8;                        /* pairs a scatter thread takes */
constexpr uint32_t kNone = 0xffffffffu;                 /* no expert */
static_assert(kPer <= 32, "a lane's taken experts fit a 32-bit mask");
static_assert(PGD_MOE_MAX_USED <= 2 * kLanes, "a lane keeps two passes at most");
static_assert(PGD_MOE_MAX_EXPERTS <= kPlanThreads, "a plan thread per expert");

/* ---- route ------------------------------------------------------------------------------ */

/* logits: f32 [T][NE]; pick, pick_w: [T][K]; blockDim.x = PGD_CUDA_THREADS. Warp w of the grid
 * takes tokens w, w + warps, ... */
__global__ void __launch_bounds__(PGD_CUDA_THREADS)
    route_kernel(const float *logits, uint32_t T, uint32_t NE, uint32_t K, uint32_t *pick,
                 float *pick_w) {
    const uint32_t lane = threadIdx.x % kLanes;
    const uint64_t step = (uint64_t)gridDim.x * kWarps;
    pgd_dev_pdl_enter();
    for (uint64_t t = (uint64_t)blockIdx.x * kWarps + threadIdx.x / kLanes; t < T; t += step) {
        const float *r = logits + t * NE; /* the token's logits: f32 [NE] */
        float v[kPer];
        uint32_t taken = 0; /* bit u: expert lane + 32 u taken (or past NE) */
#pragma unroll
        for (uint32_t u = 0; u < kPer; u++) {
            const uint32_t e = lane + u * kLanes;
            v[u] = e < NE ? r[e] : 0.0f;
            if (e >= NE) taken |= 1u << u;
        }
        /* pass j's (id, logit) at lane j % 32: lo for j < 32, hi for j >= 32 */
        uint32_t id_lo = kNone, id_hi = kNone;
        float v_lo = 0.0f, v_hi = 0.0f, l0 = 0.0f;
        for (uint32_t j = 0; j < K; j++) { /* uniform in the warp */
            /* the lane's first untaken expert (2 id + its logit's NaN bit) and its best non-NaN
             * one (the first of equals) */
            uint32_t first = kNone, best = kNone;
            float fv = 0.0f, bv = 0.0f;
#pragma unroll
            for (uint32_t u = 0; u < kPer; u++) {
                if ((taken >> u) & 1u) continue;
                const uint32_t e = lane + u * kLanes;
                const bool is_nan = v[u] != v[u];
                if (first == kNone) first = 2 * e + (is_nan ? 1u : 0u), fv = v[u];
                if (!is_nan && (best == kNone || v[u] > bv)) best = e, bv = v[u];
            }
#pragma unroll
            for (uint32_t o = kLanes / 2; o > 0; o >>= 1) {
                first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
                const uint32_t ob = __shfl_xor_sync(0xffffffffu, best, o);
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                if (ob != kNone && (best == kNone || ov > bv || (ov == bv && ob < best)))
                    best = ob, bv = ov;
            }
            /* the NaN logit of the first untaken expert, from the lane that owns it */
            const float nv = __shfl_sync(0xffffffffu, fv, (first >> 1) % kLanes);
            const bool first_nan = first & 1u;
            const uint32_t win = first_nan ? first >> 1 : best;
            const float wv = first_nan ? nv : bv;
            if (win % kLanes == lane) taken |= 1u << (win / kLanes);
            if (j == 0) l0 = wv;
            if (j % kLanes == lane) {
                if (j < kLanes)
                    id_lo = win, v_lo = wv;
                else
                    id_hi = win, v_hi = wv;
            }
        }
        /* weights in double: wd_j = exp(l_j - l_0), the sum in pass order */
        const double d0 = (double)l0;
        const double wd_lo = lane < K ? exp(__dsub_rn((double)v_lo, d0)) : 0.0;
        const double wd_hi = lane + kLanes < K ? exp(__dsub_rn((double)v_hi, d0)) : 0.0;
        double sum = 0.0;
        uint32_t rank_lo = 0, rank_hi = 0;
        for (uint32_t i = 0; i < K; i++) { /* uniform in the warp */
            const bool hi = i >= kLanes;
            sum = __dadd_rn(sum, __shfl_sync(0xffffffffu, hi ? wd_hi : wd_lo, i % kLanes));
            const uint32_t id = __shfl_sync(0xffffffffu, hi ? id_hi : id_lo, i % kLanes);
            rank_lo += id < id_lo ? 1u : 0u;
            rank_hi += id < id_hi ? 1u : 0u;
        }
        uint32_t *p = pick + t * K;
        float *w = pick_w + t * K;
        if (lane < K) p[rank_lo] = id_lo, w[rank_lo] = __double2float_rn(__ddiv_rn(wd_lo, sum));
        if (lane + kLanes < K)
            p[rank_hi] = id_hi, w[rank_hi] = __double2float_rn(__ddiv_rn(wd_hi, sum));
    }
}

/* ---- group ------------------------------------------------------------------------------ */

/* A block-wide exclusive prefix sum of x (every thread of the CTA calls it; blockDim.x a
 * multiple of 32, at most 1024); *total the CTA's sum. part: shared [32]. Ends with a barrier,
 * so part may be used again at once. */
template <typename V> __device__ __forceinline__ V block_excl_scan(V x, V *part, V *total) {
    const uint32_t lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
    const uint32_t warps = blockDim.x / kLanes;
    V inc = x;
#pragma unroll
    for (uint32_t o = 1; o < kLanes; o <<= 1) {
        const V y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    if (lane == kLanes - 1) part[warp] = inc;
    __syncthreads();
    V before = 0, all = 0;
    for (uint32_t i = 0; i < warps; i++) {
        const V s = part[i];
        if (i < warp) before += s;
        all += s;
    }
    __syncthreads();
    *total = all;
    return before + inc - x;
}

/* pick: [P]; counts: [NE + 1]; tiles: [pgd_grouped_max_tiles(P, NE)]; blockDim.x = kPlanThreads,
 * one CTA. */
__global__ void __launch_bounds__(kPlanThreads)
    group_plan_kernel(const uint32_t *pick, uint32_t P, uint32_t NE, uint32_t *counts,
                      pgd_grouped_tile *tiles, uint32_t *n_tiles) {
    __shared__ uint32_t hist[PGD_MOE_MAX_EXPERTS];
    __shared__ uint64_t part[kPlanThreads / kLanes];
    const uint32_t e = threadIdx.x;
    pgd_dev_pdl_enter();
    if (e < NE) hist[e] = 0;
    __syncthreads();
    for (uint32_t p = threadIdx.x; p < P; p += blockDim.x) {
        const uint32_t x = pick[p];
        if (x < NE) atomicAdd(&hist[x], 1u); /* integer: the same count in any order */
    }
    __syncthreads();
    const uint32_t c = e < NE ? hist[e] : 0,
                   nt = (c + PGD_GROUPED_TILE_ROWS - 1) / PGD_GROUPED_TILE_ROWS;
    /* rows in the high half, tiles in the low: neither sum carries (tiles <= max_tiles < 2^32) */
    uint64_t total;
    const uint64_t before = block_excl_scan<uint64_t>(((uint64_t)c << 32) | nt, part, &total);
    if (e >= NE) return;
    const uint32_t row0 = (uint32_t)(before >> 32), tile0 = (uint32_t)before;
    for (uint32_t i = 0; i < nt; i++) {
        const uint32_t at = i * PGD_GROUPED_TILE_ROWS, left = c - at;
        tiles[tile0 + i] = {e, row0 + at,
                            left < PGD_GROUPED_TILE_ROWS ? left : PGD_GROUPED_TILE_ROWS};
    }
    counts[e] = row0;
    if (e == NE - 1) counts[NE] = (uint32_t)(total >> 32), *n_tiles = (uint32_t)total;
}

/* pick: [P] (token t's j-th expert at t * K + j); counts: [NE + 1] row offsets (the plan's);
 * sorted_tok, row_of: [P]; blockDim.x = PGD_CUDA_THREADS. CTA b takes experts b, b + grid, ... */
__global__ void __launch_bounds__(PGD_CUDA_THREADS)
    group_scatter_kernel(const uint32_t *pick, uint32_t P, uint32_t NE, uint32_t K,
                         const uint32_t *counts, uint32_t *sorted_tok, uint32_t *row_of) {
    __shared__ uint32_t part[PGD_CUDA_THREADS / kLanes];
    constexpr uint32_t chunk = PGD_CUDA_THREADS * kScatPer;
    pgd_dev_pdl_enter();
    for (uint32_t e = blockIdx.x; e < NE; e += gridDim.x) {
        const uint32_t off = counts[e], n = counts[e + 1] - off;
        uint32_t done = 0; /* rows of e written: the same in every thread */
        for (uint32_t base = 0; base < P && done < n; base += chunk) {
            const uint32_t p0 = base + threadIdx.x * kScatPer;
            uint32_t mine = 0, m = 0; /* bit i: pair p0 + i is e's */
#pragma unroll
            for (uint32_t i = 0; i < kScatPer; i++)
                if (p0 + i < P && pick[p0 + i] == e) mine |= 1u << i, m++;
            uint32_t total;
            uint32_t r = done + block_excl_scan<uint32_t>(m, part, &total);
#pragma unroll
            for (uint32_t i = 0; i < kScatPer; i++)
                if ((mine >> i) & 1u) {
                    sorted_tok[off + r] = (p0 + i) / K;
                    row_of[p0 + i] = off + r;
                    r++;
                }
            done += total;
        }
    }
}

/* ---- combine ---------------------------------------------------------------------------- */

/* Y: f32 [P][E]; row_of, pick_w: [T][K]; out: f32 [T][E]; V columns a thread (1 or 4: then E % 4
 * == 0 and Y, out 16-byte aligned). Item i: token i / (E / V), columns V (i % (E / V)) ... */
template <uint32_t V>
__global__ void __launch_bounds__(PGD_CUDA_THREADS)
    combine_kernel(const float *Y, const uint32_t *row_of, const float *pick_w, uint32_t T,
                   uint32_t K, uint32_t E, float *out) {
    const uint32_t EV = E / V;
    const uint64_t n = (uint64_t)T * EV, step = (uint64_t)gridDim.x * blockDim.x;
    pgd_dev_pdl_enter();
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t t = i / EV, c = (i % EV) * V;
        const uint32_t *rows = row_of + t * K;
        const float *w = pick_w + t * K;
        if constexpr (V == 4) {
            float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
            for (uint32_t j = 0; j < K; j++) {
                const float wj = w[j];
                const float4 y = *(const float4 *)(Y + (uint64_t)rows[j] * E + c);
                acc.x = __fmaf_rn(wj, y.x, acc.x);
                acc.y = __fmaf_rn(wj, y.y, acc.y);
                acc.z = __fmaf_rn(wj, y.z, acc.z);
                acc.w = __fmaf_rn(wj, y.w, acc.w);
            }
            *(float4 *)(out + t * E + c) = acc;
        } else {
            float acc = 0.0f;
            for (uint32_t j = 0; j < K; j++)
                acc = __fmaf_rn(w[j], Y[(uint64_t)rows[j] * E + c], acc);
            out[t * E + c] = acc;
        }
    }
}

/* The shared argument checks of route and group. */
int check_route(const char *what, uint32_t NE, uint32_t K) {
    if (NE == 0 || NE > PGD_MOE_MAX_EXPERTS)
        return pgd_error_set(PGD_EINVAL, "moe %s: %u experts (1 .. %u)", what, NE,
                             PGD_MOE_MAX_EXPERTS);
    if (K == 0 || K > NE || K > PGD_MOE_MAX_USED)
        return pgd_error_set(PGD_EINVAL, "moe %s: %u experts a token (1 .. min(%u, %u))", what, K,
                             NE, PGD_MOE_MAX_USED);
    return 0;
}

} // namespace

extern "C" int pgd_cuda_moe_route(const float *logits, uint32_t T, uint32_t NE, uint32_t K,
                                  uint32_t *pick, float *pick_w, void *stream) {
    int rc = check_route("route", NE, K);
    if (rc) return rc;
    if (T == 0) return 0;
    PGD_CUDA_TRY(pgd_cuda_launch(route_kernel, pgd_cuda_grid(T, kWarps), PGD_CUDA_THREADS, 0,
                                 stream, logits, T, NE, K, pick, pick_w));
    return 0;
}

extern "C" int pgd_cuda_moe_group(const uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K,
                                  uint32_t *counts, uint32_t *sorted_tok, uint32_t *row_of,
                                  pgd_grouped_tile *tiles, uint32_t *n_tiles, void *stream) {
    int rc = check_route("group", NE, K);
    if (rc) return rc;
    const uint64_t P = (uint64_t)T * K;
    if (P > INT32_MAX)
        return pgd_error_set(PGD_EINVAL, "moe group: %llu pairs (at most %d)",
                             (unsigned long long)P, INT32_MAX);
    if (P == 0) return 0; /* nothing written: *n_tiles neither */
    PGD_CUDA_TRY(pgd_cuda_launch(group_plan_kernel, 1, kPlanThreads, 0, stream, pick, (uint32_t)P,
                                 NE, counts, tiles, n_tiles));
    PGD_CUDA_TRY(pgd_cuda_launch(group_scatter_kernel, pgd_cuda_grid(NE, 1), PGD_CUDA_THREADS, 0,
                                 stream, pick, (uint32_t)P, NE, K, (const uint32_t *)counts,
                                 sorted_tok, row_of));
    return 0;
}

extern "C" int pgd_cuda_moe_combine(const float *Y, const uint32_t *row_of, const float *pick_w,
                                    uint32_t T, uint32_t K, uint32_t E, float *out, void *stream) {
    if (K == 0 || K > PGD_MOE_MAX_USED)
        return pgd_error_set(PGD_EINVAL, "moe combine: %u experts a token (1 .. %u)", K,
                             PGD_MOE_MAX_USED);
    const uint64_t n = (uint64_t)T * E;
    if (n == 0) return 0;
    const bool vec = E % 4 == 0 && ((uintptr_t)Y | (uintptr_t)out) % 16 == 0;
    if (vec)
        PGD_CUDA_TRY(pgd_cuda_launch(combine_kernel<4>, pgd_cuda_grid(n / 4, PGD_CUDA_THREADS),
                                     PGD_CUDA_THREADS, 0, stream, Y, row_of, pick_w, T, K, E, out));
    else
        PGD_CUDA_TRY(pgd_cuda_launch(combine_kernel<1>, pgd_cuda_grid(n, PGD_CUDA_THREADS),
                                     PGD_CUDA_THREADS, 0, stream, Y, row_of, pick_w, T, K, E, out));
    return 0;
}
