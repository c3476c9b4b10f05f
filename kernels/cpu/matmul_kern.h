/*
 * kernels/cpu/matmul_kern.h — internal interface between matmul.c (dispatch, threading, the
 * scalar reference kernels) and the SIMD kernel files (matmul_x86.c). Not a public header.
 *
 * THE REDUCTION ORDER (every path must follow it exactly; this is what makes results
 * bit-identical across ISA paths, batch sizes, tiles and thread counts):
 *
 * Quantized weights (block b = 0 .. nb-1 of 32 elements, x in pgd_q8_act form):
 *   isum_b = Σ_e qw_e · qx_e − off · sum_b      exact int32; qw_e is the stored integer
 *            (Q8_0: int8; Q4_x: nibble 0..15; Q5_x: 5-bit 0..31), off = 8 (Q4_0),
 *            16 (Q5_0), 0 (others), sum_b = Σ qx_e of the activation block
 *   dd_b   = dw_b * dx_b                          (float multiply, dw_b = f16 -> f32)
 *   acc[b % 8] = fmaf(dd_b, (float)isum_b, acc[b % 8])
 *   Q4_1/Q5_1 only: acc[b % 8] = fmaf(mw_b, sx_b, acc[b % 8])   (mw_b = f16 min, sx_b = s)
 *   y = hsum8(acc), acc[] starting at +0.0f
 * F32/F16 weights (element e = 0 .. k-1, x in f32):
 *   acc[e % 8] = fmaf(w_e, x_e, acc[e % 8]);  y = hsum8(acc)
 * hsum8(a) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
 *
 * Threading: kernels are pure functions of their arguments.
 */
#ifndef PGD_KERNELS_CPU_MATMUL_KERN_H
#define PGD_KERNELS_CPU_MATMUL_KERN_H

#include "kernels/cpu/matmul.h"

#include <stddef.h>
#include <stdint.h>

/* Quantized weight formats the integer kernels handle, in table order. */
enum { PGD__KQ_Q8_0, PGD__KQ_Q4_0, PGD__KQ_Q4_1, PGD__KQ_Q5_0, PGD__KQ_Q5_1, PGD__KQ_COUNT };

#define PGD__QMR 2 /* most tokens per kq call (natural layout, small batches) */
#define PGD__MT 32 /* most tokens per kqm call (transposed layout, batches) */
#define PGD__FMR 4 /* most tokens per F32/F16 kernel call */
#define PGD__NR 4  /* most weight rows per F32/F16 kernel call */

/* Quantizes one row x[k] (k % 32 == 0) into qs[k], d/s/sum[k/32] (the format in matmul.h,
 * natural layout; matmul.c pads and builds the transposed copy). */
typedef void (*pgd__quant_row_fn)(const float *x, int64_t k, int8_t *qs, float *d, float *s,
                                  int32_t *sum);

/* out[t] = dot(W row w, x row t0 + t) for t < mr (1 <= mr <= PGD__QMR); w holds x->k / 32
 * blocks of the kernel's type. Reads x->qs. */
typedef void (*pgd__kq_fn)(const uint8_t *w, const pgd_q8_act *x, int64_t t0, int mr,
                           float *out /* [mr] */);

/* The same for 1 <= mt <= PGD__MT tokens, reading x->qt; same bits as pgd__kq_fn. */
typedef void (*pgd__kqm_fn)(const uint8_t *w, const pgd_q8_act *x, int64_t t0, int mt,
                            float *out /* [mt] */);

/* out[t * PGD__NR + r] = dot(W row r, x row t) for t < mr, r < nr (1 <= mr <= PGD__FMR,
 * 1 <= nr <= PGD__NR); W rows are row_bytes apart, F32 or F16 (f16 != 0), k elements. */
typedef void (*pgd__kf_fn)(int f16, const uint8_t *w, size_t row_bytes, int nr,
                           const float *x /* [mr][k] */, int64_t k, int mr,
                           float *out /* [mr][PGD__NR] */);

typedef struct pgd__matmul_kernels {
    pgd__quant_row_fn quant_row;
    pgd__kq_fn kq[PGD__KQ_COUNT];
    pgd__kqm_fn kqm[PGD__KQ_COUNT];
    pgd__kf_fn kf;
} pgd__matmul_kernels;

/* The x86 SIMD kernel sets (matmul_x86.c); NULL when not built for x86-64. They do not check
 * the CPU: the caller does (pgd_cpu_isa_supported). */
const pgd__matmul_kernels *pgd__matmul_kernels_avx2(void);
const pgd__matmul_kernels *pgd__matmul_kernels_avx512(void);

static inline float pgd__hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

#endif
