/*
 * kernels/cuda/sample.cu — sampling on the device (sample.h): one CTA of 512 threads per row,
 * matching the host reference pgd_sample_logits (engine/sampling/sampler.c) bit for bit in the
 * token, because every value a decision depends on is computed with the host's operations in
 * the host's order (sample_math.h); reductions whose result does not depend on their order
 * (max, argmax, top-n selection: exact comparisons under a total order) run in parallel.
 *
 * Per row:
 *   1. argmax: each thread scans its 16-byte chunks of the row (row_best) for the best
 *      (sanitised logit, lower id) candidate, then the CTA reduces them: m and the greedy
 *      token. A row whose every logit is -inf or NaN (the host's PGD_EINVAL) gets token -1,
 *      logprob 0, n_top 0.
 *   2. temperature / min-p (not greedy): thread b computes block b's sum of weights
 *      (pgd_sample_block_sum's arithmetic, the block's logits loaded first: block_sum) into
 *      shared memory; thread 0 adds them up in block order, leaving the running totals in place
 *      (z, then target = u * z); the CTA finds the first block whose running total exceeds
 *      target (a min over indices: exact), copies its logits into shared memory, and thread 0
 *      walks it (pgd_sample_walk's arithmetic: walk_block). Thread 0's pass over the block
 *      sums is sequential because the host's double total is: about 2,000 dependent adds for a
 *      128k vocabulary, a few microseconds.
 *   3. logprobs: the same block sums at T = 1 without min-p (reused from step 2 when T = 1 and
 *      min-p is off: they are the same numbers), lz = m + log(z_raw); the chosen token's
 *      logprob; top_logprobs: each thread keeps its own best n (sorted, ties by lower id, as
 *      sampler.c's top_offer), then n rounds of a CTA-wide best over the threads' heads.
  4. top-k / top-p (not greedy; instead of step 2): the host's candidate order (sampler.h) —
 *      the candidates sorted best first, every sum over them in that order. The candidates are
 *      found by a radix select, 8 bits a pass, of the K-th largest key (top-k: the sanitised
 *      logit's order, K = top_k; top-p alone: the weight's bits over the ids of positive
 *      weight, K = min(their count, PGD_CUDA_SAMPLE_MAX_CANDS)); ties at the K-th key go to the
 *      lower ids (a second select over the tied ids). Each thread appends its ids above the
 *      cut to a shared list, which a bitonic sort puts in the candidate order (weight, then
 *      lower id: every key distinct); thread 0 then walks it as sampler.c does: the top-k
 *      mass, the top-p prefix, min-p, the draw. A top-p row whose nucleus would need more than
 *      the list holds gets token PGD_CUDA_SAMPLE_ON_HOST: its logits stay in place for the
 *      host sampler, which gives the same token (the same order, the same sums).
 * Tokens therefore equal the host's for every u; logprobs may differ by an f32 ulp (the device's
 * double log is within 1 ulp of glibc's).
 *
 * Rows whose spec pgd_cuda_sample_supports rejects (top-k above the list) must not be sent; the
 * kernel answers them like an all -inf row (token -1).
 *
 * Memory: dynamic shared memory of ceil(V / 64) doubles (16 KB at V = 128256; beyond 48 KB the
 * launch asks for the opt-in size), and 9 KB static for the candidates. Threading: any host
 * thread owning the stream.
 */
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/sample.h"
#include "kernels/cuda/sample_math.h"

namespace {

constexpr uint32_t kThreads = 512;
constexpr uint32_t kWarps = kThreads / 32;
constexpr uint32_t kCands = PGD_CUDA_SAMPLE_MAX_CANDS;
static_assert((kCands & (kCands - 1)) == 0 && kCands >= kThreads, "bitonic sort of kCands keys");
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

/* f(x, i) for this thread's logits x = l[i] of the row l (f32 [V]): its 16-byte chunks tid,
 * tid + kThreads, ... four of them in flight at once, and the elements before the first chunk
 * and after the last one by one; each thread's ids in increasing order. One CTA reads the whole
 * row, so its loads in flight are the rate: a float at a time, the next load behind the
 * previous value's arithmetic, had a pass over 128k logits take ~36 us on an H200 (the argmax;
 * the sampled paths' passes did the same). Pinned: each round's loads behind load_round, for
 * the passes whose work ptxas otherwise spreads them over. */
/* A round of 4 chunks q[c], q[c + kThreads], ... into x, behind a call: ptxas cannot move a load
 * past the return, so the four are in flight together whatever f's code makes it schedule (in
 * the top-p passes, with their exponential and their histogram atomics, it issued each load
 * after the previous chunk's work). */
__device__ __noinline__ void load_round(const float4 *q, uint32_t c, float4 (&x)[4]) {
#pragma unroll
    for (uint32_t u = 0; u < 4; u++) x[u] = q[c + u * kThreads];
}

template <bool Pinned = false, class F>
__device__ __forceinline__ void for_each_logit(const float *l, uint32_t V, F f) {
    const uint32_t head = min((uint32_t)((16 - (uintptr_t)l % 16) % 16 / 4), V);
    for (uint32_t i = threadIdx.x; i < head; i += kThreads) f(l[i], i);
    const float4 *q = reinterpret_cast<const float4 *>(l + head); /* [n4] */
    const uint32_t n4 = (V - head) / 4;
    auto f4 = [&](float4 x, uint32_t c) {
        const uint32_t i = head + 4 * c;
        f(x.x, i), f(x.y, i + 1), f(x.z, i + 2), f(x.w, i + 3);
    };
    uint32_t c = threadIdx.x;
    for (; c + 3 * kThreads < n4; c += 4 * kThreads) {
        float4 x[4];
        if (Pinned) {
            load_round(q, c, x);
        } else {
#pragma unroll
            for (uint32_t u = 0; u < 4; u++) x[u] = q[c + u * kThreads];
        }
#pragma unroll
        for (uint32_t u = 0; u < 4; u++) f4(x[u], c + u * kThreads);
    }
    for (; c < n4; c += kThreads) f4(q[c], c);
    for (uint32_t i = head + 4 * n4 + threadIdx.x; i < V; i += kThreads) f(l[i], i);
}

/* This thread's best (sanitised logit, lower id) of the row l (f32 [V]). Which thread sees which
 * logit, and in what order, does not matter: better_of is a total order. */
__device__ __forceinline__ cand row_best(const float *l, uint32_t V) {
    cand best = {-INFINITY, INT32_MAX};
    for_each_logit(l, V, [&](float v, uint32_t i) {
        best = better_of(best, cand{pgd_sample_sanitize(v), (int32_t)i});
    });
    return best;
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

/* Block blk's sum, pgd_sample_block_sum's arithmetic in its order, its 64 logits loaded first:
 * 16-byte loads, 8 in flight (the host form, a 4-byte load behind each weight's arithmetic, made
 * ~250 dependent L2 round trips a thread for a 128k row). A block that is not whole or not
 * 16-byte aligned takes the host form. */
__device__ double block_sum(const float *l, uint32_t V, uint32_t blk, float m, float inv_t,
                            float lowest) {
    const uint32_t b0 = blk * PGD_SAMPLE_BLOCK;
    if (V - b0 < PGD_SAMPLE_BLOCK || (uintptr_t)(l + b0) % 16)
        return pgd_sample_block_sum(l, V, blk, m, inv_t, lowest);
    const float4 *q = reinterpret_cast<const float4 *>(l + b0);
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (uint32_t h = 0; h < PGD_SAMPLE_BLOCK / 32; h++) {
        float4 x[8];
#pragma unroll
        for (uint32_t u = 0; u < 8; u++) x[u] = q[8 * h + u];
#pragma unroll
        for (uint32_t u = 0; u < 8; u++) { /* ids b0 + 32 h + 4 u + k into lane k */
            a[0] = pgd_rn_add(a[0], pgd_sample_weight(x[u].x, m, inv_t, lowest));
            a[1] = pgd_rn_add(a[1], pgd_sample_weight(x[u].y, m, inv_t, lowest));
            a[2] = pgd_rn_add(a[2], pgd_sample_weight(x[u].z, m, inv_t, lowest));
            a[3] = pgd_rn_add(a[3], pgd_sample_weight(x[u].w, m, inv_t, lowest));
        }
    }
    return ((double)a[0] + (double)a[1]) + ((double)a[2] + (double)a[3]);
}

/* pgd_sample_walk's part inside block b0 (its n logits staged in x): the id whose cumulative
 * weight, from acc, first exceeds target; -1 if none does (the host form then walks on from the
 * block's start: the rounding shortfall's fallbacks). */
__device__ int32_t walk_block(const float *x, uint32_t n, uint32_t b0, double acc, double target,
                              float m, float inv_t, float lowest) {
    for (uint32_t k = 0; k < n; k++) {
        const float p = pgd_sample_weight(x[k], m, inv_t, lowest);
        if (p <= 0.0f) continue;
        acc += (double)p;
        if (acc > target) return (int32_t)(b0 + k);
    }
    return -1;
}

/* Fills bsum[nb] with the row's block sums (every thread), then thread 0 turns them into running
 * totals; returns the total (to every thread). */
__device__ double block_totals(const float *l, uint32_t V, uint32_t nb, float m, float inv_t,
                               float lowest, double *bsum, double *total) {
    __syncthreads(); /* whoever read bsum or *total before is done */
    for (uint32_t b = threadIdx.x; b < nb; b += kThreads)
        bsum[b] = block_sum(l, V, b, m, inv_t, lowest);
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
    float tv[PGD_SAMPLER_MAX_TOP_LOGPROBS] = {0};   /* [cnt] in use */
    int32_t ti[PGD_SAMPLER_MAX_TOP_LOGPROBS] = {0}; /* [cnt] in use */
    int cnt = 0;
    /* sampler.c's top_offer; later ids lose ties (a thread's ids come in increasing order) */
    for_each_logit(l, V, [&](float x, uint32_t i) {
        const float v = pgd_sample_sanitize(x);
        if (cnt == n_top && !(v > tv[n_top - 1])) return;
        int j = cnt < n_top ? cnt++ : n_top - 1;
        for (; j > 0 && v > tv[j - 1]; j--) {
            tv[j] = tv[j - 1];
            ti[j] = ti[j - 1];
        }
        tv[j] = v;
        ti[j] = (int32_t)i;
    });
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

/* ---- top-k / top-p ---- */

/* Floats to unsigned ints in the same order (-0 as +0, which compares equal to it). */
__device__ __forceinline__ uint32_t float_ord(float f) {
    if (f == 0.0f) f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* What the selection keeps in shared memory. */
struct select_smem {
    uint32_t hist[256];
    uint32_t prefix, rank, equal, total, count;
    unsigned long long keys[kCands]; /* (weight bits << 32) | ~id, the best first once sorted */
};

/* The *K-th largest of key(x, i, &v) over the row's logits x = l[i] (key returns whether id i
 * takes part; for_each_logit reads them), 8 bits a pass from the top; *K is first lowered to how
 * many ids take part (*total, counted by the first pass; at least 1), *above gets how many keys are
 * larger, *equal how many equal it. To every thread. */
template <class Key>
__device__ uint32_t kth_largest(const float *l, uint32_t V, uint32_t *K, Key key, select_smem &sm,
                                uint32_t *total, uint32_t *above, uint32_t *equal) {
    uint32_t prefix = 0, mask = 0, rank = *K;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint32_t d = threadIdx.x; d < 256; d += kThreads) sm.hist[d] = 0;
        __syncthreads();
        for_each_logit<true>(l, V, [&](float x, uint32_t i) {
            uint32_t v;
            if (key(x, i, &v) && (v & mask) == prefix) atomicAdd(&sm.hist[(v >> shift) & 255u], 1u);
        });
        __syncthreads();
        if (threadIdx.x == 0) {
            if (shift == 24) { /* every id taking part is in this pass's histogram */
                uint32_t n = 0;
                for (uint32_t d = 0; d < 256; d++) n += sm.hist[d];
                sm.total = n;
                rank = min(rank, n);
            }
            uint32_t cum = 0, d = 255;
            for (;; d--) { /* rank <= the count: some digit holds it */
                if (cum + sm.hist[d] >= rank || d == 0) break;
                cum += sm.hist[d];
            }
            sm.prefix = prefix | d << shift;
            sm.rank = rank - cum;
            sm.equal = sm.hist[d];
        }
        __syncthreads();
        prefix = sm.prefix;
        rank = sm.rank;
        mask |= 255u << shift;
    }
    *total = sm.total;
    *K = min(*K, *total);
    *above = *K - rank;
    *equal = sm.equal;
    __syncthreads(); /* sm is free again */
    return prefix;
}

/* Sorts sm.keys[kCands] into descending order (bitonic). */
__device__ void sort_desc(select_smem &sm) {
    for (uint32_t k = 2; k <= kCands; k *= 2)
        for (uint32_t j = k / 2; j > 0; j /= 2) {
            __syncthreads();
            for (uint32_t i = threadIdx.x; i < kCands; i += kThreads) {
                const uint32_t o = i ^ j;
                if (o <= i) continue;
                const unsigned long long a = sm.keys[i], b = sm.keys[o];
                if ((i & k) == 0 ? a < b : a > b) {
                    sm.keys[i] = b;
                    sm.keys[o] = a;
                }
            }
        }
    __syncthreads();
}

/* The candidate key of id i with weight p: larger is better (more probable, then lower id). */
__device__ __forceinline__ unsigned long long cand_key(float p, uint32_t i) {
    return (unsigned long long)__float_as_uint(p) << 32 | (0xFFFFFFFFu - i);
}

/* A top-k / top-p row's token (to thread 0; the others get -1): see step 4 above. z_p: the
 * dense total at this temperature without min-p (top-p alone), else unused. */
__device__ int32_t sample_candidates(const float *l, uint32_t V, const pgd_sample_spec &sp, float m,
                                     float inv_t, double z_p, double u, select_smem &sm) {
    const bool top_k = sp.top_k > 0 && (uint32_t)sp.top_k < V;
    /* top-k: the sanitised logits' order over every id; top-p: the weights of positive ones */
    auto logit_key = [&](float x, uint32_t, uint32_t *v) {
        *v = float_ord(pgd_sample_sanitize(x));
        return true;
    };
    auto weight_key = [&](float x, uint32_t, uint32_t *v) {
        const float p = pgd_sample_weight(x, m, inv_t, 0.0f);
        *v = __float_as_uint(p);
        return p > 0.0f;
    };
    /* top-k: K = top_k of every id; top-p: the list's length, or fewer ids of positive weight
     * (n_pos) */
    uint32_t K = top_k ? (uint32_t)sp.top_k : kCands, n_pos, above, equal, t;
    t = top_k ? kth_largest(l, V, &K, logit_key, sm, &n_pos, &above, &equal)
              : kth_largest(l, V, &K, weight_key, sm, &n_pos, &above, &equal);
    /* ties at the K-th key: the lower ids, up to id_max */
    uint32_t id_max = 0xFFFFFFFFu;
    if (above + equal > K) {
        auto tied = [&](float x, uint32_t i, uint32_t *v) {
            uint32_t k;
            const bool in = top_k ? logit_key(x, i, &k) : weight_key(x, i, &k);
            *v = 0xFFFFFFFFu - i;
            return in && k == t;
        };
        uint32_t k2 = K - above, n2, a2, e2;
        id_max = 0xFFFFFFFFu - kth_largest(l, V, &k2, tied, sm, &n2, &a2, &e2);
    }
    for (uint32_t i = threadIdx.x; i < kCands; i += kThreads) sm.keys[i] = 0; /* below any id */
    if (threadIdx.x == 0) sm.count = 0;
    __syncthreads();
    for_each_logit(l, V, [&](float x, uint32_t i) {
        uint32_t v;
        const bool in = top_k ? logit_key(x, i, &v) : weight_key(x, i, &v);
        if (!in || v < t || (v == t && i > id_max)) return;
        const uint32_t slot = atomicAdd(&sm.count, 1u); /* top-p: v is the weight's bits */
        sm.keys[slot] =
            cand_key(top_k ? pgd_sample_weight(x, m, inv_t, 0.0f) : __uint_as_float(v), i);
    });
    sort_desc(sm);
    if (threadIdx.x != 0) return -1;
    /* sampler.c's walk over the candidates in order */
    uint32_t nc = K;
    const double top_p = (double)sp.top_p;
    if (sp.top_p < 1.0f) {
        double zk = 0.0;
        if (top_k)
            for (uint32_t c = 0; c < K; c++) zk += (double)__uint_as_float(sm.keys[c] >> 32);
        const double target = top_p * (top_k ? zk : z_p);
        double acc = 0.0;
        uint32_t c = 0;
        for (; c < K; c++) {
            acc += (double)__uint_as_float(sm.keys[c] >> 32);
            if (acc >= target) break;
        }
        if (c < K)
            nc = c + 1;
        else if (!top_k && n_pos > K)
            return PGD_CUDA_SAMPLE_ON_HOST; /* the nucleus goes on past the list */
    }
    if (sp.min_p > 0.0f) { /* keep p >= min_p, in order */
        uint32_t k = 0;
        for (uint32_t c = 0; c < nc; c++)
            if (__uint_as_float(sm.keys[c] >> 32) >= sp.min_p) sm.keys[k++] = sm.keys[c];
        nc = k;
    }
    double z = 0.0;
    for (uint32_t c = 0; c < nc; c++) z += (double)__uint_as_float(sm.keys[c] >> 32);
    const double target = u * z;
    double acc = 0.0;
    uint32_t last = 0;
    for (uint32_t c = 0; c < nc; c++) {
        const float p = __uint_as_float(sm.keys[c] >> 32);
        if (p <= 0.0f) continue;
        acc += (double)p;
        last = c;
        if (acc > target) break;
    }
    return (int32_t)(0xFFFFFFFFu - (uint32_t)(sm.keys[last] & 0xFFFFFFFFu));
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float *logits, uint32_t V, const pgd_sample_spec *specs,
                  const uint64_t *draws, pgd_sample_result *results) {
    extern __shared__ double bsum[]; /* [ceil(V / 64)] block sums, then running totals */
    __shared__ cand red[kWarps];
    __shared__ uint32_t red_u[kWarps];
    __shared__ double total;
    __shared__ select_smem sel;
    __shared__ int32_t token_sh;
    __shared__ float walk_sh[PGD_SAMPLE_BLOCK]; /* the drawn block's logits */
    pgd_dev_pdl_enter();
    const uint32_t row = blockIdx.x, nb = (V + PGD_SAMPLE_BLOCK - 1) / PGD_SAMPLE_BLOCK;
    const float *l = logits + (uint64_t)row * V;
    const pgd_sample_spec sp = specs[row];
    pgd_sample_result *res = results + row;

    cand best = block_best(row_best(l, V), red);
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
    double z = 0.0;        /* the draw's total */
    bool z_is_raw = false; /* z is the raw softmax's total (T = 1, nothing zeroed) */
    const bool top_k = sp.top_k > 0 && (uint32_t)sp.top_k < V;
    if (!greedy && (top_k || sp.top_p < 1.0f)) {
        if (!top_k) { /* top-p alone: the dense total at this temperature, without min-p */
            z = block_totals(l, V, nb, m, inv_t, 0.0f, bsum, &total);
            z_is_raw = inv_t == 1.0f;
        }
        token = sample_candidates(l, V, sp, m, inv_t, z, pgd_sample_uniform(draws[row]), sel);
        if (threadIdx.x == 0) token_sh = token;
        __syncthreads();
        token = token_sh;
        if (token == PGD_CUDA_SAMPLE_ON_HOST) {
            if (threadIdx.x == 0) {
                res->token = token;
                res->logprob = 0.0f;
                res->n_top = 0;
            }
            return;
        }
    } else if (!greedy) {
        z = block_totals(l, V, nb, m, inv_t, lowest, bsum, &total);
        z_is_raw = inv_t == 1.0f && lowest == 0.0f;
        const double target = pgd_sample_uniform(draws[row]) * z;
        uint32_t first = nb - 1;
        for (uint32_t b = threadIdx.x; b + 1 < nb; b += kThreads)
            if (bsum[b] > target) {
                first = b;
                break;
            }
        const uint32_t blk = block_min(first, red_u);
        /* the block's logits into shared memory at once, so that thread 0's walk is not up to
         * 64 dependent loads */
        const uint32_t b0 = blk * PGD_SAMPLE_BLOCK, n_in = min(PGD_SAMPLE_BLOCK, V - b0);
        if (threadIdx.x < n_in) walk_sh[threadIdx.x] = l[b0 + threadIdx.x];
        __syncthreads();
        if (threadIdx.x == 0) {
            const double acc = blk ? bsum[blk - 1] : 0.0;
            token = walk_block(walk_sh, n_in, b0, acc, target, m, inv_t, lowest);
            if (token < 0) token = pgd_sample_walk(l, V, blk, acc, target, m, inv_t, lowest);
        }
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
    const double z_raw = z_is_raw ? z : block_totals(l, V, nb, m, 1.0f, 0.0f, bsum, &total);
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
    PGD_CUDA_TRY(pgd_cuda_launch(sample_kernel, N, kThreads, smem, stream, logits, V, specs, draws,
                                 results));
    return 0;
}
