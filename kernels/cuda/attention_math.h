/*
 * kernels/cuda/attention_math.h — the arithmetic pgd_cuda_attention (attention.cu) and its CPU
 * twin (attention_twin.c) share, written once as __host__ __device__ functions so both sides
 * execute the same IEEE operations in the same order and agree bit for bit.
 *
 * Owns:
 *   - pgd_rn_*: single f32 operations, each rounded to nearest even and never fused with its
 *     neighbour. On the device they are the __f*_rn intrinsics, which nvcc never contracts
 *     into an FMA (a plain a * b + c may become one: nvcc's default is -fmad=true); on the host
 *     plain C, which this project compiles in ISO C11 mode (GCC does not contract there; clang
 *     gets the STDC FP_CONTRACT pragma below). fmaf is the host's correctly rounded fmaf.
 *     Subnormals are kept on both sides: never build the kernels with -ftz=true or
 *     --use_fast_math.
 *   - pgd_attn_exp: the CPU kernels' exponential (kernels/cpu/vexp.h, pgd__expf: its constants,
 *     its operations in its order), so the twin, the kernel and the CPU attention all weigh a
 *     score with the same e^x.
 *   - the fold of two chunk partials (pgd_attn_fold_coef, pgd_attn_fold).
 *
 * The scheme (attention.h): a query's positions 0..pos are cut into chunks of PGD_ATTN_CHUNK;
 * chunk c gives (m_c, s_c, o_c[D]):
 *   score  x_j = rn_mul(acc_j, scale), acc_j = fma chain over d ascending from +0 of
 *          q[d] * k_j[d] (k read from f16, exact)
 *   max    m_c = tree over the chunk's 256 slots (slots past the end hold -inf), op
 *          x > y ? x : y
 *   weight w_j = pgd_attn_exp(rn_sub(x_j, m_c)) (0 in the slots past the end)
 *   sum    s_c = the same tree over w, op rn_add
 *   values o_c[d] = fma chain over j ascending from +0 of w_j * v_j[d]
 * THE TREE over 256 slots x[0..255]: for stride 16, 8, 4, 2, 1, within each run of 32 slots
 * x[i] = op(x[i], x[i + stride]) for the first `stride` slots of the run (a warp's shuffle-down
 * reduction); then the 8 run heads y[w] = x[32 w] the same way with strides 4, 2, 1; y[0].
 * The chunks fold in increasing order, starting from chunk 0's partial itself:
 *   M = max(m, m_c); a = exp(m - M); b = exp(m_c - M)
 *   m <- M;  s <- s * a + s_c * b;  o[d] <- o[d] * a + o_c[d] * b   (each operation rounded)
 * and out[d] = bf16(rn_div(o[d], s)), nearest even. A query with pos < 0 (a padding row)
 * attends to nothing and writes zeros.
 *
 * Threading: pure functions.
 */
#ifndef PGD_KERNELS_CUDA_ATTENTION_MATH_H
#define PGD_KERNELS_CUDA_ATTENTION_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/counter_hash.h" /* PGD_HD */
#include "kernels/cpu/vexp.h"    /* the exponential's constants (PGD__EXP_*) */

#if defined(__clang__) && !defined(__CUDACC__)
#pragma STDC FP_CONTRACT OFF
#endif

#define PGD_ATTN_HEAD_TILE    8   /* query heads of one GQA group a CTA takes together */
#define PGD_ATTN_MAX_HEAD_DIM 256 /* head_dim: a multiple of 8, at most this */
#define PGD_ATTN_TREE_RUN     32  /* slots of the tree's first level (one warp) */

#ifdef __CUDA_ARCH__ /* nvcc's device pass (the host compiler would warn) */
#define PGD_UNROLL _Pragma("unroll")
#else
#define PGD_UNROLL
#endif

/* ---- rounded f32 operations, never fused ---------------------------------------------- */

static inline PGD_HD float pgd_rn_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

static inline PGD_HD float pgd_rn_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

static inline PGD_HD float pgd_rn_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

static inline PGD_HD float pgd_rn_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

/* a * b + c with one rounding */
static inline PGD_HD float pgd_rn_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

static inline PGD_HD float pgd_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* ---- the exponential, the fold ---------------------------------------------------------- */

/* e^x exactly as pgd__expf (kernels/cpu/vexp.h) computes it: x clamped to [-87, 88] (NaN to
 * -87), n = round(x log2 e), r = x - n ln2 in two steps, a degree-7 polynomial by Horner in
 * FMAs, times 2^n. */
static inline PGD_HD float pgd_attn_exp(float x) {
    x = x > PGD__EXP_LO ? x : PGD__EXP_LO;
    x = x < PGD__EXP_HI ? x : PGD__EXP_HI;
    const float n = pgd_rn_sub(pgd_rn_fma(x, PGD__EXP_LOG2E, PGD__EXP_MAGIC), PGD__EXP_MAGIC);
    float r = pgd_rn_fma(n, -PGD__EXP_LN2_HI, x);
    r = pgd_rn_fma(n, -PGD__EXP_LN2_LO, r);
    const float coef[7] = {PGD__EXP_C6, PGD__EXP_C5, PGD__EXP_C4, PGD__EXP_C3,
                           PGD__EXP_C2, 1.0f,        1.0f};
    float p = PGD__EXP_C7;
    PGD_UNROLL
    for (int i = 0; i < 7; i++) p = pgd_rn_fma(p, r, coef[i]);
    return pgd_rn_mul(p, pgd_bits_f32((uint32_t)((int32_t)n + 127) << 23));
}

/* x within f16's finite range (+-65504; NaN stays NaN): the tensor-core kernel's query, before
 * its rounding to f16, so a huge query saturates its softmax instead of making it NaN. */
static inline PGD_HD float pgd_attn_f16_clamp(float x) {
    return x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x;
}

/* The tree's operation for the max (a NaN on the right is dropped, on the left kept). */
static inline PGD_HD float pgd_attn_max(float a, float b) {
    return a > b ? a : b;
}

/* The fold's weights: M = max(m, mc), *a = e^(m - M), *b = e^(mc - M) (one of them exactly 1).
 * Returns M, the folded max. */
static inline PGD_HD float pgd_attn_fold_coef(float m, float mc, float *a, float *b) {
    const float M = pgd_attn_max(m, mc);
    *a = pgd_attn_exp(pgd_rn_sub(m, M));
    *b = pgd_attn_exp(pgd_rn_sub(mc, M));
    return M;
}

/* One folded value (the sum, or one output dimension): x * a + xc * b. */
static inline PGD_HD float pgd_attn_fold(float x, float a, float xc, float b) {
    return pgd_rn_add(pgd_rn_mul(x, a), pgd_rn_mul(xc, b));
}

#endif
