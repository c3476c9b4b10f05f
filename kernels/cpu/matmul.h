/*
 * kernels/cpu/matmul.h — y[m][n] = x[m][k] · W[n][k]^T on the CPU, W row-major in a GGUF type.
 *
 * Weight types: F32, F16 (f32 FMA dot products on the f32 activations), Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1. Quantized weights stay in their GGUF blocks in memory; two activation modes:
 *   PGD_ACT_F32 (the default): f32 activations; each weight block is dequantized on the fly
 *     (in registers, or once per chunk into an f32 tile shared by many tokens) to the exact
 *     f32 value d·q (+ m) and multiplied with x by f32 FMA. As accurate as multiplying by the
 *     f32-dequantized matrix (relative error ~1e-6).
 *   PGD_ACT_Q8 (opt-in; faster on AVX-512 VNNI, above all with packed weights, less exact):
 * activations quantized once per row to Q8 blocks of 32, then exact integer dot products per block,
 * accumulated in float per block. Costs accuracy (the logits of small models move by up to ~1e-1
 * relative). F32/F16 weights always use f32 activations (the mode does not apply to them).
 *
 * Determinism: every y[i][j] is a fixed function of (x row i, W row j, mode) alone: the
 * reduction order over k is defined once per mode (kernels/cpu/matmul_kern.h) and every code
 * path — scalar or SIMD, any m, any position of row i in the batch, any tile shape, any thread
 * count — follows it, so results are bit-identical across all of them (the tests check this).
 * The SIMD paths also match the scalar reference bit for bit.
 *
 * Q8 activation format (pgd_q8_act, not an on-disk format): per block of 32 values x_e,
 *   amax = max_e |x_e|,  d = amax / 127.0f,  id = (d != 0) ? 1.0f / d : 0,
 *   q_e = round_half_even(x_e * id)   (all float32 operations),
 *   sum = Σ q_e,  s = d * (float)sum.
 * Non-finite activations or weights give unspecified (but memory-safe) results.
 *
 * Threading: pure functions over caller-owned buffers. Work is split over output rows (n) on
 * the given pool (NULL: the calling thread only); the pool's one-run-at-a-time rule applies.
 */
#ifndef PGD_KERNELS_CPU_MATMUL_H
#define PGD_KERNELS_CPU_MATMUL_H

#include "kernels/cpu/isa.h"
#include "kernels/cpu/threadpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Activation precision of the quantized-weight multiply (see the top of this file). */
typedef enum pgd_act_mode {
    PGD_ACT_F32 = 0, /* f32 activations, weights dequantized on the fly (default) */
    PGD_ACT_Q8 = 1,  /* activations quantized to Q8 blocks, integer dot products */
} pgd_act_mode;

/* "f32", "q8"; "?" otherwise. */
const char *pgd_act_mode_name(pgd_act_mode mode);

/* Whether pgd_matmul accepts weights of this GGUF type id. */
bool pgd_matmul_supported(uint32_t wtype);

/* m rows of k activations quantized to Q8 blocks (see the format above). The arrays live in one
 * caller-provided buffer; each row is padded to nb_pad = round_up(k/32, 8) blocks with zeros
 * (quants, scales and sums), so kernels can work on groups of 8 blocks. */
typedef struct pgd_q8_act {
    int64_t m, k, nb_pad;
    int8_t *qs;   /* [m][nb_pad * 32] quants */
    int8_t *qt;   /* [m][nb_pad * 32] the same, each group of 8 blocks (256 bytes) transposed
                   * in dwords: qt[256 g + 32 c + 4 l + j] = qs[256 g + 32 l + 4 c + j] */
    float *d;     /* [m][nb_pad] block scales */
    float *s;     /* [m][nb_pad] d * sum */
    int32_t *sum; /* [m][nb_pad] sum of the block's quants */
} pgd_q8_act;

/* Bytes of buffer pgd_q8_act_init needs for m rows of k (k % 32 == 0); 0 on overflow. */
size_t pgd_q8_act_bytes(int64_t m, int64_t k);

/* Lays out `a` over buf[size] (any alignment; buf must outlive a). PGD_EINVAL if k % 32 != 0,
 * m < 1 or k < 32, PGD_ERANGE if size < pgd_q8_act_bytes(m, k). */
int pgd_q8_act_init(pgd_q8_act *a, void *buf, size_t size, int64_t m, int64_t k);

/* Quantizes x[a->m][a->k] into a. Bit-identical for every isa. 0 or PGD_EINVAL (isa). */
int pgd_q8_act_quantize(pgd_threadpool *pool, pgd_cpu_isa isa, const float *x /* [m][k] */,
                        pgd_q8_act *a);

/* y[x->m][n] = x · W^T for a quantized weight type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and
 * pre-quantized activations, e.g. one quantization shared by the Q, K and V projections.
 * w: n rows of x->k elements of wtype. Returns 0, PGD_EUNSUPPORTED (type), PGD_EINVAL. */
int pgd_matmul_q8(pgd_threadpool *pool, pgd_cpu_isa isa, uint32_t wtype,
                  const void *w /* [n][k] of wtype */, int64_t n, const pgd_q8_act *x,
                  float *y /* [m][n] */);

/* Scratch bytes pgd_matmul_mode needs: the Q8 activations for quantized types in PGD_ACT_Q8
 * mode; 0 for F32/F16 weights and for PGD_ACT_F32 (its tiles live on the stack). SIZE_MAX for
 * an unsupported type or mode, or a bad shape. */
size_t pgd_matmul_scratch_bytes_mode(pgd_act_mode mode, uint32_t wtype, int64_t m, int64_t k);

/* y[m][n] = x[m][k] · W[n][k]^T with W of type wtype, activations in `mode`. scratch may be
 * NULL (then what is needed is allocated and freed inside); else it holds scratch_size >=
 * pgd_matmul_scratch_bytes_mode bytes. k must be a multiple of the type's block size. y must
 * not overlap x, w or scratch. Returns 0, PGD_EUNSUPPORTED (type), PGD_EINVAL (shape, isa,
 * mode), PGD_ERANGE (scratch too small), PGD_ENOMEM. */
int pgd_matmul_mode(pgd_threadpool *pool, pgd_act_mode mode, uint32_t wtype, const void *w,
                    int64_t n, int64_t k, const float *x, int64_t m, float *y, void *scratch,
                    size_t scratch_size);

/* pgd_matmul_mode on an explicit instruction-set path (tests, benchmarks). */
int pgd_matmul_isa_mode(pgd_threadpool *pool, pgd_cpu_isa isa, pgd_act_mode mode, uint32_t wtype,
                        const void *w, int64_t n, int64_t k, const float *x, int64_t m, float *y,
                        void *scratch, size_t scratch_size);

/* Packed weights for PGD_ACT_Q8: a Q8_0, Q4_0 or Q4_1 matrix rearranged once (at model load)
 * into the order the AVX-512 VNNI batch kernel reads (rows in blocks of 16, each group of 8
 * blocks of a row pair transposed, Q4 quants still 4-bit; kernels/cpu/matmul_kern.h), so no
 * multiply rearranges weights per call, and one token runs through the same kernel as many.
 * About the size of the original; results have the same bits as with the original.
 * pgd_q8_pack_bytes: bytes of the packed copy, or 0 when this type, shape or ISA (AUTO: the
 * best) has no packed kernel (then use the original). */
size_t pgd_q8_pack_bytes(pgd_cpu_isa isa, uint32_t wtype, int64_t n, int64_t k);

/* Packs w [n][k] of wtype into dst[size] (64-byte aligned, size >= pgd_q8_pack_bytes). 0,
 * PGD_EUNSUPPORTED (not packable here), PGD_EINVAL (alignment, size). */
int pgd_q8_pack(pgd_cpu_isa isa, uint32_t wtype, const void *w, int64_t n, int64_t k, void *dst,
                size_t size);

/* One weight of pgd_matmul_group: y[m][n] = x[m][k] · W[n][k]^T. */
typedef struct pgd_matmul_part {
    uint32_t wtype;
    const void *w; /* [n][k] in wtype */
    int64_t n;
    float *y;           /* [m][n] */
    const void *packed; /* pgd_q8_pack of w for the best ISA, or NULL; PGD_ACT_Q8 reads it */
} pgd_matmul_part;

/* pgd_matmul_mode for n_parts weights that share x (a layer's q/k/v or gate/up projections):
 * when every part is a quantized type, one pool run for all of them (fewer fork/join points
 * per step) and, in PGD_ACT_Q8 mode, one quantization of x (scratch: as for one part); else
 * one pgd_matmul_mode per part. Same bits either way, packed or not. Same errors as
 * pgd_matmul_mode; PGD_EINVAL for n_parts outside [1, 4]. */
int pgd_matmul_group(pgd_threadpool *pool, pgd_act_mode mode, const pgd_matmul_part *parts,
                     int n_parts, int64_t k, const float *x, int64_t m, void *scratch,
                     size_t scratch_size);

/* The same three in the default mode (PGD_ACT_F32). */
size_t pgd_matmul_scratch_bytes(uint32_t wtype, int64_t m, int64_t k);
int pgd_matmul(pgd_threadpool *pool, uint32_t wtype, const void *w, int64_t n, int64_t k,
               const float *x, int64_t m, float *y, void *scratch, size_t scratch_size);
int pgd_matmul_isa(pgd_threadpool *pool, pgd_cpu_isa isa, uint32_t wtype, const void *w, int64_t n,
                   int64_t k, const float *x, int64_t m, float *y, void *scratch,
                   size_t scratch_size);

#endif
