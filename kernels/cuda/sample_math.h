/*
 * kernels/cuda/sample_math.h — the arithmetic of the device sampler (sample.cu), written as
 * __host__ __device__ functions that redo, operation for operation, the dense passes of the host
 * reference pgd_sample_logits (engine/sampling/sampler.c), so the device's probabilities, block
 * sums, totals and inverse-CDF walk have the host's bits and a seed gives the same token on both.
 *
 * What sampler.c computes for a temperature / min-p row (its F_DENSE path), and so this:
 *   sanitise  NaN -> -inf, +inf -> FLT_MAX; m = the max
 *   weight    p_i = e((l_i - m) * (1 / T)), f32, e = sampler.c's Cephes exp (below); p_i = 0
 *             when p_i < min_p (the max has p = 1 exactly)
 *   blocks    of PGD_SAMPLE_BLOCK ids: four f32 lanes, lane k summing ids b0 + k, b0 + k + 4, ...
 *             in order from +0; the block's sum ((double)a0 + a1) + ((double)a2 + a3)
 *   total     z = the block sums added in block order in double from 0, which is also the running
 *             total the walk compares: target = u * z; the first block (not the last) whose
 *             running total exceeds target is entered with the total before it, and its ids are
 *             walked in order adding (double)p_i until the sum exceeds target
 *             (pgd_sample_walk, with sampler.c's fallbacks for a rounding shortfall)
 *   logprobs  log-softmax of the raw row: the same blocks at T = 1 without min-p give z_raw,
 *             lz = m + log(z_raw) in double, logprob_i = (float)((double)l_i - lz)
 * The host compiles sampler.c in ISO C11 without FMA contraction; the device uses the
 * never-fused pgd_rn_* operations (attention_math.h). Only log() may differ (CUDA's double log
 * is within 1 ulp, glibc's correctly rounded in practice), which moves a logprob by an f32 ulp at
 * most, never a token.
 *
 * Threading: pure functions.
 */
#ifndef PGD_KERNELS_CUDA_SAMPLE_MATH_H
#define PGD_KERNELS_CUDA_SAMPLE_MATH_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/sample_types.h"
#include "kernels/cuda/attention_math.h" /* pgd_rn_*, pgd_bits_f32 */
#include "kernels/cuda/sample.h"         /* PGD_CUDA_SAMPLE_MAX_CANDS */

#define PGD_SAMPLE_BLOCK 64 /* ids per block sum: sampler.c's BLOCK */

/* Whether the device sampler takes this spec: greedy (top-k / top-p do not apply then), or
 * temperature, min-p, top-p and top-k up to PGD_CUDA_SAMPLE_MAX_CANDS; top_logprobs within the
 * host's limit. */
static inline PGD_HD bool pgd_sample_spec_on_device(const pgd_sample_spec *s) {
    if (s->logprobs && (s->top_logprobs < 0 || s->top_logprobs > PGD_SAMPLER_MAX_TOP_LOGPROBS))
        return false;
    if (s->temperature < PGD_SAMPLER_GREEDY_EPS) return true;
    return s->top_k >= 0 && s->top_k <= PGD_CUDA_SAMPLE_MAX_CANDS;
}

/* NaN -> -inf, +inf -> FLT_MAX */
static inline PGD_HD float pgd_sample_sanitize(float x) {
    if (x != x) return -INFINITY;
    return x > FLT_MAX ? FLT_MAX : x;
}

/* sampler.c's v_exp, one lane: e^x for x <= 0 (larger x counts as 0); 0 below -87 and for NaN.
 * Every operation separately rounded, in its order. */
static inline PGD_HD float pgd_sample_exp(float x) {
    if (!(x >= -87.0f)) return 0.0f;
    x = x > 0.0f ? 0.0f : x;
    const float magic = 12582912.0f;
    const float n = pgd_rn_sub(pgd_rn_add(pgd_rn_mul(x, 1.44269504088896341f), magic), magic);
    const float r =
        pgd_rn_add(pgd_rn_sub(x, pgd_rn_mul(n, 0.693359375f)), pgd_rn_mul(n, 2.12194440e-4f));
    const float coef[5] = {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                           5.0000001201e-1f};
    float y = 1.9875691500e-4f;
    PGD_UNROLL
    for (int i = 0; i < 5; i++) y = pgd_rn_add(pgd_rn_mul(y, r), coef[i]);
    y = pgd_rn_add(pgd_rn_add(pgd_rn_mul(y, pgd_rn_mul(r, r)), r), 1.0f);
    return pgd_rn_mul(y, pgd_bits_f32((uint32_t)((int32_t)n + 127) << 23));
}

/* The weight of raw logit l: e((sanitise(l) - m) * inv_t), 0 below `lowest` (min-p, or 0). The
 * raw softmax's weight is pgd_sample_weight(l, m, 1, 0). */
static inline PGD_HD float pgd_sample_weight(float l, float m, float inv_t, float lowest) {
    const float p = pgd_sample_exp(pgd_rn_mul(pgd_rn_sub(pgd_sample_sanitize(l), m), inv_t));
    return p >= lowest ? p : 0.0f;
}

/* The sum of block `blk` of the row l[n] (four lanes, then in double). */
static inline PGD_HD double pgd_sample_block_sum(const float *l, uint32_t n, uint32_t blk, float m,
                                                 float inv_t, float lowest) {
    const uint32_t b0 = blk * PGD_SAMPLE_BLOCK;
    const uint32_t b1 = n - b0 < PGD_SAMPLE_BLOCK ? n : b0 + PGD_SAMPLE_BLOCK;
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint32_t i = b0; i < b1; i += 4) {
        PGD_UNROLL
        for (uint32_t k = 0; k < 4; k++)
            if (i + k < b1) a[k] = pgd_rn_add(a[k], pgd_sample_weight(l[i + k], m, inv_t, lowest));
    }
    return ((double)a[0] + (double)a[1]) + ((double)a[2] + (double)a[3]);
}

/* The walk inside block `blk`, entered with the running total `acc` of the blocks before it:
 * the first id whose cumulative weight exceeds target; on a rounding shortfall the last id with
 * weight (on to the row's end), else the last one with weight before the block. */
static inline PGD_HD int32_t pgd_sample_walk(const float *l, uint32_t n, uint32_t blk, double acc,
                                             double target, float m, float inv_t, float lowest) {
    int32_t last = -1;
    for (uint32_t i = blk * PGD_SAMPLE_BLOCK; i < n; i++) {
        const float p = pgd_sample_weight(l[i], m, inv_t, lowest);
        if (p <= 0.0f) continue;
        acc += (double)p;
        last = (int32_t)i;
        if (acc > target) return last;
    }
    if (last >= 0) return last;
    for (uint32_t i = blk * PGD_SAMPLE_BLOCK; i-- > 0;)
        if (pgd_sample_weight(l[i], m, inv_t, lowest) > 0.0f) return (int32_t)i;
    return 0; /* unreachable: the max has weight 1 */
}

/* The host's uniform number of a row's 64 random bits. */
static inline PGD_HD double pgd_sample_uniform(uint64_t draw) {
    return (double)(draw >> 11) * 0x1.0p-53;
}

/* Candidate order of greedy and top_logprobs: a before b if more probable, then lower id. */
static inline PGD_HD bool pgd_sample_better(float av, int32_t aid, float bv, int32_t bid) {
    return av > bv || (av == bv && aid < bid);
}

#endif
