/*
 * kernels/cuda/sample.cu — sampling on the device (sample.h): one CTA of 512 threads per row,
 * matching the host reference pgd_sample_logits (engine/sampling/sampler.c) bit for bit in the
 * token, because every value a decision depends on is computed with the host's operations in
 * the host's order (sample_math.h); reductions whose result does not depend on their order
 * (max, argmax, top-n selection: exact comparisons under a total order) run in parallel.
 *
 * Per row:
 *   1. argmax: each thread scans ids tid, tid + 512, ... for the best (sanitised logit, lower
 *      id) candidate, then the CTA reduces them: m and the greedy token. A row whose every
 *      logit is -inf or NaN (the host's PGD_EINVAL) gets token -1, logprob 0, n_top 0.
 *   2. temperature / min-p (not greedy): thread b computes block b's sum of weights
 *      (pgd_sample_block_sum) into shared memory; thread 0 adds them up in block order,
 *      leaving the running totals in place (z, then target = u * z); the CTA finds the first
 *      block whose running total exceeds target (a min over indices: exact); thread 0 walks it
 *      (pgd_sample_walk). Thread 0's pass over the block sums is sequential because the host's
 *      double total is: about 2,000 dependent adds for a 128k vocabulary, a few microseconds.
 *   3. logprobs: the same block sums at T = 1 without min-p (reused from step 2 when T = 1 and
 *      min-p is off: they are the same numbers), lz = m + log(z_raw); the chosen token's
 *      logprob; top_logprobs: each thread keeps its own best n (sorted, ties by lower id, as
 *      sampler.c's top_offer), then n rounds of a CTA-wide best over the threads' heads.
 * Tokens therefore equal the host's for every u; logprobs may differ by an f32 ulp (the device's
 * double log is within 1 ulp of glibc's).
 *
 * Rows whose spec pgd_cuda_sample_supports rejects (top-k, top-p) must not be sent; the kernel
 * answers them like an all -inf row (token -1).
 *
 * Memory: dynamic shared memory of ceil(V / 64) doubles (16 KB at V = 128256; beyond 48 KB the
 * launch asks for the opt-in size). Threading: any host thread owning the stream.
 */
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sample.h"
#include "kernels/cuda/sample_math.h"

namespace {

constexpr uint32_t kThreads = 512;
constexpr uint32_t kWarps = kThreads / 32;
constexpr size_t kDefaultSmem = 48 * 1024; /* dynamic shared memory without the opt-in */

struct cand {
    float v;
    int32_t id; /* INT32_MAX: none (loses to every real id, -inf ones included) */
};

__device__ __forceinline__ cand better_of(cand a, cand b) {
    return pgd_sample_better(b.v, b.id, a.v, a.id) ? b : a;
}

/* The best candidate of the CTA, to every thread. red: [kWarps] shared scratch. */
__device__ cand block_best(cand c, cand *red) {
#pragma unroll
    for (int s = 16; s > 0; s /= 2) {
        cand o;
        o.v = __shfl_xor_sync(0xffffffffu, c.v, s);
        o.id = __shfl_xor_sync(0xffffffffu, c.id, s);
        c = better_of(c, o);
    }
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = c;
    __syncthreads();
    cand r = red[0];
    for (uint32_t w = 1; w < kWarps; w++) r = better_of(r, red[w]);
    __syncthreads(); /* red is free again */
    return r;
}

/* The smallest x of the CTA, to every thread. red: [kWarps] shared scratch. */
__device__ uint32_t block_min(uint32_t x, uint32_t *red) {
#pragma unroll
    for (int s = 16; s > 0; s /= 2) x = min(x, __shfl_xor_sync(0xffffffffu, x, s));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    uint32_t r = red[0];
    for (uint32_t w = 1; w < kWarps; w++) r = min(r, red[w]);
    __syncthreads();
    return r;
}

/* Fills bsum[nb] with the row's block sums (every thread), then thread 0 turns them into running
 * totals; returns the total (to every thread). */
__device__ double block_totals(const float *l, uint32_t V, uint32_t nb, float m, float inv_t,
                               float lowest, double *bsum, double *total) {
    __syncthreads(); /* whoever read bsum or *total before is done */
    for (uint32_t b = threadIdx.x; b < nb; b += kThreads)
        bsum[b] = pgd_sample_block_sum(l, V, b, m, inv_t, lowest);
    __syncthreads();
    if (threadIdx.x == 0) {
        double z = 0.0;
        for (uint32_t b = 0; b < nb; b++) {
            z += bsum[b];
            bsum[b] = z;
        }
        *total = z;
    }
    __syncthreads();
    return *total;
}

/* The n_top best (sanitised) logits of the row into res->top, logprobs relative to lz. */
__device__ void top_logprobs(const float *l, uint32_t V, int n_top, double lz,
                             pgd_sample_result *res, cand *red) {
    float tv[PGD_SAMPLER_MAX_TOP_LOGPROBS];
    int32_t ti[PGD_SAMPLER_MAX_TOP_LOGPROBS];
    int cnt = 0;
    for (uint32_t i = threadIdx.x; i < V; i += kThreads) { /* sampler.c's top_offer */
        const float v = pgd_sample_sanitize(l[i]);
        if (cnt == n_top && !(v > tv[n_top - 1])) continue; /* later ids lose ties */
        int j = cnt < n_top ? cnt++ : n_top - 1;
        for (; j > 0 && v > tv[j - 1]; j--) {
            tv[j] = tv[j - 1];
            ti[j] = ti[j - 1];
        }
        tv[j] = v;
        ti[j] = (int32_t)i;
    }
    int head = 0;
    for (int k = 0; k < n_top; k++) {
        cand c = {-INFINITY, INT32_MAX};
        if (head < cnt) c = {tv[head], ti[head]};
        const cand b = block_best(c, red);
        if (head < cnt && ti[head] == b.id) head++;
        if (threadIdx.x == 0) {
            res->top[k].token = b.id;
            res->top[k].logprob = (float)((double)b.v - lz);
        }
    }
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float *logits, uint32_t V, const pgd_sample_spec *specs,
                  const uint64_t *draws, pgd_sample_result *results) {
    extern __shared__ double bsum[]; /* [ceil(V / 64)] block sums, then running totals */
    __shared__ cand red[kWarps];
    __shared__ uint32_t red_u[kWarps];
    __shared__ double total;
    const uint32_t row = blockIdx.x, nb = (V + PGD_SAMPLE_BLOCK - 1) / PGD_SAMPLE_BLOCK;
    const float *l = logits + (uint64_t)row * V;
    const pgd_sample_spec sp = specs[row];
    pgd_sample_result *res = results + row;

    cand best = {-INFINITY, INT32_MAX};
    for (uint32_t i = threadIdx.x; i < V; i += kThreads)
        best = better_of(best, cand{pgd_sample_sanitize(l[i]), (int32_t)i});
    best = block_best(best, red);
    const float m = best.v;
    if (m == -INFINITY || !pgd_sample_spec_on_device(&sp)) {
        if (threadIdx.x == 0) {
            res->token = -1;
            res->logprob = 0.0f;
            res->n_top = 0;
        }
        return;
    }

    int32_t token = best.id;
    const bool greedy = sp.temperature < PGD_SAMPLER_GREEDY_EPS;
    const float inv_t = greedy ? 1.0f : pgd_rn_div(1.0f, sp.temperature);
    const float lowest = !greedy && sp.min_p > 0.0f ? sp.min_p : 0.0f;
    double z = 0.0; /* the draw's total */
    if (!greedy) {
        z = block_totals(l, V, nb, m, inv_t, lowest, bsum, &total);
        const double target = pgd_sample_uniform(draws[row]) * z;
        uint32_t first = nb - 1;
        for (uint32_t b = threadIdx.x; b + 1 < nb; b += kThreads)
            if (bsum[b] > target) {
                first = b;
                break;
            }
        const uint32_t blk = block_min(first, red_u);
        if (threadIdx.x == 0)
            token = pgd_sample_walk(l, V, blk, blk ? bsum[blk - 1] : 0.0, target, m, inv_t, lowest);
    }
    if (!sp.logprobs) {
        if (threadIdx.x == 0) {
            res->token = token;
            res->logprob = 0.0f;
            res->n_top = 0;
        }
        return;
    }
    /* the raw row's total: the draw's when that was the raw softmax already */
    const double z_raw = !greedy && inv_t == 1.0f && lowest == 0.0f
                             ? z
                             : block_totals(l, V, nb, m, 1.0f, 0.0f, bsum, &total);
    const double lz = (double)m + log(z_raw);
    const int n_top = sp.top_logprobs < (int32_t)V ? sp.top_logprobs : (int)V;
    if (n_top > 0) top_logprobs(l, V, n_top, lz, res, red);
    if (threadIdx.x == 0) {
        res->token = token;
        res->logprob = (float)((double)pgd_sample_sanitize(l[token]) - lz);
        res->n_top = n_top;
    }
}

} // namespace

extern "C" bool pgd_cuda_sample_supports(const pgd_sample_spec *spec) {
    return pgd_sample_spec_on_device(spec);
}

extern "C" int pgd_cuda_sample(const float *logits, uint32_t N, uint32_t V,
                               const pgd_sample_spec *specs, const uint64_t *draws,
                               pgd_sample_result *results, void *stream) {
    if (V == 0 || V > (uint32_t)INT32_MAX || N > (uint32_t)INT32_MAX)
        return pgd_error_set(PGD_EINVAL, "CUDA sampling: %u rows of %u logits", N, V);
    if (N == 0) return 0;
    const size_t smem = (size_t)((V + PGD_SAMPLE_BLOCK - 1) / PGD_SAMPLE_BLOCK) * sizeof(double);
    if (smem > kDefaultSmem) {
        int dev = 0, optin = 0;
        PGD_CUDA_TRY(cudaGetDevice(&dev));
        PGD_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cudaFuncAttributes fa;
        PGD_CUDA_TRY(cudaFuncGetAttributes(&fa, sample_kernel));
        if (smem + fa.sharedSizeBytes > (size_t)optin)
            return pgd_error_set(PGD_EINVAL,
                                 "CUDA sampling: a vocabulary of %u needs %zu bytes of shared "
                                 "memory, the device has %d",
                                 V, smem + fa.sharedSizeBytes, optin);
        PGD_CUDA_TRY(cudaFuncSetAttribute(sample_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    sample_kernel<<<N, kThreads, smem, (cudaStream_t)stream>>>(logits, V, specs, draws, results);
    PGD_CUDA_LAUNCHED();
    return 0;
}
