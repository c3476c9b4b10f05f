/*
 * kernels/cpu/matmul_kern.h — internal interface between the CPU matmul's drivers (matmul.c:
 * dispatch, PGD_ACT_Q8 mode and F32/F16 weights; matmul_f32.c: PGD_ACT_F32 mode; each with its
 * scalar reference kernels) and the SIMD kernel files (matmul_x86.c, matmul_x86_f32.c). Not a
 * public header.
 *
 * THE REDUCTION ORDER (every path must follow it exactly; this is what makes results
 * bit-identical across ISA paths, batch sizes, tiles and thread counts):
 *
 * Quantized weights, PGD_ACT_Q8 (block b = 0 .. nb-1 of 32 elements, x in pgd_q8_act form):
 *   isum_b = Σ_e qw_e · qx_e − off · sum_b      exact int32; qw_e is the stored integer
 *            (Q8_0: int8; Q4_x: nibble 0..15; Q5_x: 5-bit 0..31), off = 8 (Q4_0),
 *            16 (Q5_0), 0 (others), sum_b = Σ qx_e of the activation block
 *   dd_b   = dw_b * dx_b                          (float multiply, dw_b = f16 -> f32)
 *   acc[b % 8] = fmaf(dd_b, (float)isum_b, acc[b % 8])
 *   Q4_1/Q5_1 only: acc[b % 8] = fmaf(mw_b, sx_b, acc[b % 8])   (mw_b = f16 min, sx_b = s)
 *   y = hsum8(acc), acc[] starting at +0.0f
 * Quantized weights, PGD_ACT_F32 (element e = 0 .. k-1 in block b = e / 32, x in f32):
 *   w_e = dw_b * (float)(q_e - off)        Q8_0 (int8 q, off 0), Q4_0 (off 8), Q5_0 (off 16)
 *   w_e = fmaf(dw_b, (float)q_e, mw_b)     Q4_1, Q5_1 (mw_b = f16 min)
 *         (dw_b * q is exact in float: an 11-bit significand times at most 8 bits, so w_e is
 *         the correctly rounded d*q (+ m), whatever instruction computes it: vmulps, vfmadd,
 *         or a permute of a 16/32-entry table built with the same operation)
 *   acc[e % 32] = fmaf(w_e, x_e, acc[e % 32])   e ascending, acc[] starting at +0.0f
 *   y = hsum32(acc)
 *   (32 independent lanes: one FMA per lane per block, so a decode kernel never waits on an
 *   FMA latency chain; the lane is the element's position in its block.)
 * F32/F16 weights (element e = 0 .. k-1, x in f32):
 *   acc[e % 8] = fmaf(w_e, x_e, acc[e % 8]);  y = hsum8(acc)
 * hsum8(a) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
 * hsum32(a) = hsum8(h), h[i] = (a[i] + a[i + 16]) + (a[i + 8] + a[i + 24])  for i < 8
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

/* Bytes per 32-element block of a PGD__KQ_* format (the GGUF block sizes). */
static inline size_t pgd__kq_block_bytes(int kt) {
    static const size_t bytes[PGD__KQ_COUNT] = {34, 18, 20, 22, 24};
    return bytes[kt];
}

#define PGD__QMR 2  /* most tokens per kq call (natural layout, small batches) */
#define PGD__MT  32 /* most tokens per kqm call (transposed layout, batches) */
#define PGD__QBR 16 /* most weight rows per kqb call */

/* Rows per task when n rows are split into about `per` tasks per thread: at least 8, a multiple
 * of `unit` (the drivers' row block or panel). */
static inline int64_t pgd__rows_per_task(int threads, int64_t n, int64_t per, int64_t unit) {
    if (threads <= 1) return n;
    int64_t rpt = (n + (int64_t)threads * per - 1) / ((int64_t)threads * per);
    if (rpt < 8) rpt = 8;
    return (rpt + unit - 1) / unit * unit;
}
#define PGD__FMR 4 /* most tokens per F32/F16 kernel call */
#define PGD__NR  4 /* most weight rows per F32/F16 kernel call */

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

/* out[t * PGD__QBR + r] = dot(W row r, x row t0 + t) for r < nr <= PGD__QBR, t < mt <= PGD__MT:
 * a block of rows (row_bytes apart) against many tokens, reading x->qt; same bits as
 * pgd__kq_fn. Also prefetches pf[pf_bytes] as kqp does (below). Optional in a kernel set
 * (NULL: kqm per row). */
typedef void (*pgd__kqb_fn)(const uint8_t *w, size_t row_bytes, int nr, const pgd_q8_act *x,
                            int64_t t0, int mt, float *out /* [mt][PGD__QBR] */, const uint8_t *pf,
                            size_t pf_bytes);

/* out[t * PGD__NR + r] = dot(W row r, x row t) for t < mr, r < nr (1 <= mr <= PGD__FMR,
 * 1 <= nr <= PGD__NR); W rows are row_bytes apart, F32 or F16 (f16 != 0), k elements. */
typedef void (*pgd__kf_fn)(int f16, const uint8_t *w, size_t row_bytes, int nr,
                           const float *x /* [mr][k] */, int64_t k, int mr,
                           float *out /* [mr][PGD__NR] */);

/* THE PACKED LAYOUT (pgd_q8_pack; Q8_0, Q4_0, Q4_1): the weights in the order kqp reads them.
 * Rows in blocks of PGD__QBR = 16 (the last padded with zero rows); a row block is ngroups =
 * ceil(nb / 8) group records back to back (nb = k / 32 blocks; the last group has nbg =
 * nb - 8 (ngroups - 1) blocks, the others 8). A group record, for the 8 row pairs p (rows 2p,
 * 2p + 1) of the block:
 *   quants [8 pairs][C][2 * nbg] dwords: vector c of pair p is dword c of blocks 0 .. nbg-1 of
 *          row 2p, then the same of row 2p + 1. Q4_0/Q4_1: C = 4, dword c of the 16 packed
 *          quant bytes (its low nibbles are elements 4c .. 4c+3, its high ones 16+4c ..);
 *          Q8_0: C = 8, dword c of the 32 quants, each + 128 (the VNNI unsigned operand).
 *   d      [8 pairs][16] f16: lanes 0-7 the scales of row 2p's blocks, 8-15 row 2p+1's (zero
 *          from nbg on in each half)
 *   m      [8 pairs][16] f16, the same for the mins (Q4_1 only)
 * A last group of nbg <= PGD__QP_TILE_NBG = 4 blocks is in the tile layout instead, the same bytes:
 * the 4 rows of pairs 2q, 2q + 1 (q < 4, a kqp register tile) share each vector and scale row,
 *   quants [4 tiles][C][4 * nbg] dwords: dword r nbg + l of vector c of tile q is dword c of
 *          block l of row 4q + r
 *   d, m   [4 tiles][16] f16 (lanes r nbg + l; zero from 4 nbg on), then 128 bytes of zeros
 * so a token's dot products with that group take one vector per tile, not one per pair.
 * Every record, quant vector and scale row of the pair layout is 64- (32-) byte aligned from
 * the block's start. A full group's record is the size of its 16 x 8 GGUF blocks; the last
 * group's scales are padded to 16 lanes, so a row block is that much larger than its 16 rows
 * (e.g. Q4_1, k = 576: 6144 bytes for 5760). */
static inline size_t pgd__qp_quant_dwords(int kt) { /* C: dwords of a block's quants */
    return kt == PGD__KQ_Q8_0 ? 8 : 4;
}
static inline size_t pgd__qp_group_bytes(int kt, int nbg) { /* a record of nbg blocks */
    return 64 * pgd__qp_quant_dwords(kt) * (size_t)nbg + (kt == PGD__KQ_Q4_1 ? 512 : 256);
}
/* Bytes of one packed row block of nb blocks per row. */
static inline size_t pgd__qp_block_bytes(int kt, int64_t nb) {
    const int64_t full = nb / 8;
    return (size_t)full * pgd__qp_group_bytes(kt, 8) +
           (nb % 8 ? pgd__qp_group_bytes(kt, (int)(nb % 8)) : 0);
}
/* Whether a last group of nbg blocks is in the tile layout (else the pair layout). */
#define PGD__QP_TILE_NBG 4
static inline int pgd__qp_tiled(int nbg) {
    return nbg <= PGD__QP_TILE_NBG;
}

/* out[t * PGD__QBR + r] = dot(row r of the packed row block blk, x row t0 + t) for r < 16,
 * t < mt <= PGD__MT, reading x->qt; same bits as pgd__kq_fn on the unpacked rows. Also
 * prefetches pf[pf_bytes] (64-byte lines; NULL: none) a few lines at a time between its
 * register tiles, so that weights coming from DRAM load while this block computes without a
 * burst of prefetches stalling it. */
typedef void (*pgd__kqp_fn)(const uint8_t *blk, const pgd_q8_act *x, int64_t t0, int mt,
                            float *out /* [mt][PGD__QBR] */, const uint8_t *pf, size_t pf_bytes);

typedef struct pgd__matmul_kernels {
    pgd__quant_row_fn quant_row;
    pgd__kq_fn kq[PGD__KQ_COUNT];
    pgd__kqm_fn kqm[PGD__KQ_COUNT];
    pgd__kqb_fn kqb[PGD__KQ_COUNT]; /* all NULL or none */
    pgd__kqp_fn kqp[PGD__KQ_COUNT]; /* NULL where the set has none (packed types only) */
    pgd__kf_fn kf;
} pgd__matmul_kernels;

/* The x86 SIMD kernel sets (matmul_x86.c); NULL when not built for x86-64. They do not check
 * the CPU: the caller does (pgd_cpu_isa_supported). */
const pgd__matmul_kernels *pgd__matmul_kernels_avx2(void);
const pgd__matmul_kernels *pgd__matmul_kernels_avx512(void);

static inline float pgd__hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static inline float pgd__hsum32(const float a[32]) {
    float h[8];
    for (int i = 0; i < 8; i++) h[i] = (a[i] + a[i + 16]) + (a[i + 8] + a[i + 24]);
    return pgd__hsum8(h);
}

/* ---- PGD_ACT_F32 kernels (matmul_f32.c drives them) ---------------------------------------
 * Decode (m <= PGD__FA_MR): kd dequantizes each block in registers and FMAs it with every
 * token's x. Prefill: the weights are cut into panels of PGD__FA_PR rows x PGD__FA_KC
 * elements, each dequantized once (deq) into an f32 tile that kp multiplies with up to
 * PGD__FA_PT tokens, carrying the 32 accumulator lanes of every (token, row) in `part` between
 * chunks. Both follow the PGD_ACT_F32 order above, so they give the same bits. */
#define PGD__FA_MR 2    /* most tokens per kd call */
#define PGD__FA_PR 4    /* weight rows per prefill panel */
#define PGD__FA_PT 48   /* most tokens per kp call */
#define PGD__FA_KC 1024 /* elements per prefill chunk (a multiple of 32) */

/* out[t] = y of (W row w: k / 32 blocks, x row t at x + t * k) for t < mr <= PGD__FA_MR. */
typedef void (*pgd__kd_fn)(const uint8_t *w, const float *x /* [mr][k] */, int64_t k, int mr,
                           float *out /* [mr] */);

/* dst[nb * 32] = w_e of nb blocks (the PGD_ACT_F32 definition). */
typedef void (*pgd__deq_fn)(const uint8_t *w, int64_t nb, float *dst /* [nb * 32] */);

/* For t < mt <= PGD__FA_PT, every panel row r < PGD__FA_PR, elements e < kc (kc % 32 == 0),
 * with lanes L[t][r][32] starting as +0 (first) or part[t][r][]:
 *   L[t][r][e % 32] = fmaf(wd[r * ldw + e], x[t * ldx + e], L[t][r][e % 32]), e ascending;
 * then y == NULL: part[t][r][] = L[t][r][] (more chunks follow); else (the last chunk):
 * y[t * ldy + r] = hsum32(L[t][r]) for r < nr, part left unspecified. Rows r >= nr are
 * computed too (lanes are independent) and never stored, so they only need to be initialized.
 * wd is 64-byte aligned with ldw % 16 == 0; x any alignment. */
typedef void (*pgd__kp_fn)(const float *wd /* [PGD__FA_PR][ldw] */, int64_t ldw,
                           const float *x /* [mt][ldx] */, int64_t ldx, int mt, int64_t kc,
                           float *part /* [mt][PGD__FA_PR][32] */, int first,
                           float *y /* [mt][ldy] or NULL */, int64_t ldy, int nr);

typedef struct pgd__fa_kernels {
    pgd__kd_fn kd[PGD__KQ_COUNT];
    pgd__deq_fn deq[PGD__KQ_COUNT];
    pgd__kp_fn kp;
    int kp_tokens; /* kp's register tile (tokens): token tiles are cut in multiples of it */
} pgd__fa_kernels;

/* The x86 SIMD sets (matmul_x86_f32.c); NULL when not built for x86-64. No CPU check. */
const pgd__fa_kernels *pgd__fa_kernels_avx2(void);
const pgd__fa_kernels *pgd__fa_kernels_avx512(void);

/* One weight of a group multiply (pgd__matmul_fa_group). */
#define PGD__FA_MAX_PARTS 4
typedef struct pgd__fa_part {
    int kt;           /* PGD__KQ_* */
    const uint8_t *w; /* [n][row_bytes] */
    size_t row_bytes;
    int64_t n;
    float *y; /* [m][n] */
} pgd__fa_part;

/* y_i = x · W_i^T for 1 <= n_parts <= PGD__FA_MAX_PARTS weights sharing x[m][k], all in one
 * pool run (the tasks of every part side by side); same bits as one call per part. */
int pgd__matmul_fa_group(pgd_threadpool *pool, const pgd__fa_kernels *kern,
                         const pgd__fa_part *parts, int n_parts, int64_t k, const float *x,
                         int64_t m);

/* y[m][n] in PGD_ACT_F32 mode with the given kernel set (matmul_f32.c). kt: PGD__KQ_*;
 * w: n rows of row_bytes; shapes already checked (n, m >= 1, k % 32 == 0). 0 or the pool's
 * error. */
int pgd__matmul_fa(pgd_threadpool *pool, const pgd__fa_kernels *kern, int kt,
                   const uint8_t *w /* [n][row_bytes] */, size_t row_bytes, int64_t n, int64_t k,
                   const float *x /* [m][k] */, int64_t m, float *y /* [m][n] */);

/* The scalar reference set (matmul_f32.c). */
const pgd__fa_kernels *pgd__fa_kernels_scalar(void);

#endif
