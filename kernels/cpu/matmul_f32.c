/*
 * kernels/cpu/matmul_f32.c — the PGD_ACT_F32 mode of the CPU matmul for quantized weights:
 * the work split over the thread pool, the prefill tiling, and the scalar reference kernels
 * that the SIMD kernels (matmul_x86_f32.c) must match bit for bit.
 *
 * Owns: nothing (pure functions; the per-task tiles live on the task's stack).
 * Invariants: the PGD_ACT_F32 reduction order of matmul_kern.h: every weight element is
 * dequantized to the same f32 value on every path, and lane e % 32 of (token, row) receives
 * fmaf(w_e, x_e, lane) for e ascending, whatever the kernel, tile or chunk, so y does not
 * depend on m, on the token's position, on the panel cut or on the pool size. Each output
 * element is written by exactly one task.
 * Work split: the n output rows are cut into tasks of consecutive rows (a multiple of
 * PGD__FA_PR each, so panels never straddle tasks). Decode (m <= PGD__FA_MR): one kd call per
 * weight row, blocks dequantized in registers, read once for all tokens. Prefill: per block of
 * FA_ROW_BLOCK rows, per tile of up to PGD__FA_PT tokens, per panel of PGD__FA_PR rows, per
 * chunk of PGD__FA_KC elements: the panel chunk is dequantized once into wd (while the next
 * panel's raw blocks are prefetched) and kp multiplies it with every token of the tile, the 32
 * lanes of each (token, row) carried in `part` from chunk to chunk; the last chunk's kp writes
 * y into a small tile that goes to y in whole row segments.
 * Threading: see matmul.h.
 */
#include "kernels/cpu/matmul_kern.h"

#include "kernels/cpu/quant.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FA_TASKS_PER_THREAD 4
#define FA_DECODE_TASKS     2  /* per thread, for m <= PGD__FA_MR */
#define FA_ROW_BLOCK        16 /* output rows staged in a tile before they go to y */
#define FA_PF_ROWS          8  /* decode: prefetch distance in weight rows (measured 8-12 best) */

/* ---- scalar reference kernels ------------------------------------------------------------ */

static inline float rdf16(const uint8_t *p) {
    return pgd_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* The 32 weights w_e of one block of type kt, as defined in matmul_kern.h. */
static inline __attribute__((always_inline)) void deq_block_scalar(int kt, const uint8_t *blk,
                                                                   float *o /* [32] */) {
    const float d = rdf16(blk);
    switch (kt) {
    case PGD__KQ_Q8_0:
        for (int e = 0; e < PGD_QK; e++) o[e] = d * (float)(int8_t)blk[2 + e];
        break;
    case PGD__KQ_Q4_0:
        for (int j = 0; j < PGD_QK / 2; j++) {
            o[j] = d * (float)((blk[2 + j] & 15) - 8);
            o[j + 16] = d * (float)((blk[2 + j] >> 4) - 8);
        }
        break;
    case PGD__KQ_Q4_1: {
        const float m = rdf16(blk + 2);
        for (int j = 0; j < PGD_QK / 2; j++) {
            o[j] = fmaf(d, (float)(blk[4 + j] & 15), m);
            o[j + 16] = fmaf(d, (float)(blk[4 + j] >> 4), m);
        }
        break;
    }
    case PGD__KQ_Q5_0:
    case PGD__KQ_Q5_1: {
        const int min = kt == PGD__KQ_Q5_1;
        const uint8_t *p = blk + (min ? 4 : 2);
        const uint32_t qh =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        const float m = min ? rdf16(blk + 2) : 0.0f;
        for (int j = 0; j < PGD_QK / 2; j++) {
            int lo = (p[4 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (p[4 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            if (min) {
                o[j] = fmaf(d, (float)lo, m);
                o[j + 16] = fmaf(d, (float)hi, m);
            } else {
                o[j] = d * (float)(lo - 16);
                o[j + 16] = d * (float)(hi - 16);
            }
        }
        break;
    }
    }
}

static inline __attribute__((always_inline)) void kd_scalar(int kt, const uint8_t *w,
                                                            const float *x /* [mr][k] */, int64_t k,
                                                            int mr, float *out /* [mr] */) {
    const size_t bs = pgd__kq_block_bytes(kt);
    float acc[PGD__FA_MR][32] = {{0}};
    for (int64_t b = 0; b < k / PGD_QK; b++) {
        float wb[32];
        deq_block_scalar(kt, w + (size_t)b * bs, wb);
        for (int t = 0; t < mr; t++)
            for (int e = 0; e < PGD_QK; e++)
                acc[t][e] = fmaf(wb[e], x[t * k + b * PGD_QK + e], acc[t][e]);
    }
    for (int t = 0; t < mr; t++) out[t] = pgd__hsum32(acc[t]);
}

static inline __attribute__((always_inline)) void deq_scalar(int kt, const uint8_t *w, int64_t nb,
                                                             float *dst /* [nb * 32] */) {
    for (int64_t b = 0; b < nb; b++)
        deq_block_scalar(kt, w + (size_t)b * pgd__kq_block_bytes(kt), dst + b * PGD_QK);
}

#define FA_SCALAR(sfx, kt)                                                                         \
    static void kd_scalar_##sfx(const uint8_t *w, const float *x, int64_t k, int mr, float *out) { \
        kd_scalar(kt, w, x, k, mr, out);                                                           \
    }                                                                                              \
    static void deq_scalar_##sfx(const uint8_t *w, int64_t nb, float *dst) {                       \
        deq_scalar(kt, w, nb, dst);                                                                \
    }
FA_SCALAR(q8_0, PGD__KQ_Q8_0)
FA_SCALAR(q4_0, PGD__KQ_Q4_0)
FA_SCALAR(q4_1, PGD__KQ_Q4_1)
FA_SCALAR(q5_0, PGD__KQ_Q5_0)
FA_SCALAR(q5_1, PGD__KQ_Q5_1)
#undef FA_SCALAR

static void kp_scalar(const float *wd /* [PGD__FA_PR][ldw] */, int64_t ldw,
                      const float *x /* [mt][ldx] */, int64_t ldx, int mt, int64_t kc,
                      float *part /* [mt][PGD__FA_PR][32] */, int first,
                      float *y /* [mt][ldy] or NULL */, int64_t ldy, int nr) {
    for (int t = 0; t < mt; t++)
        for (int r = 0; r < PGD__FA_PR; r++) {
            float *acc = part + ((size_t)t * PGD__FA_PR + (size_t)r) * 32;
            if (first) memset(acc, 0, sizeof(float) * 32);
            for (int64_t e = 0; e < kc; e++)
                acc[e % 32] = fmaf(wd[r * ldw + e], x[t * ldx + e], acc[e % 32]);
            if (y && r < nr) y[t * ldy + r] = pgd__hsum32(acc);
        }
}

static const pgd__fa_kernels fa_kernels_scalar = {
    {kd_scalar_q8_0, kd_scalar_q4_0, kd_scalar_q4_1, kd_scalar_q5_0, kd_scalar_q5_1},
    {deq_scalar_q8_0, deq_scalar_q4_0, deq_scalar_q4_1, deq_scalar_q5_0, deq_scalar_q5_1},
    kp_scalar,
    1,
};

const pgd__fa_kernels *pgd__fa_kernels_scalar(void) {
    return &fa_kernels_scalar;
}

/* ---- the multiply ------------------------------------------------------------------------ */

typedef struct fa_job {
    const pgd__fa_kernels *kern;
    int kt;
    const uint8_t *w; /* [n][row_bytes] */
    size_t row_bytes;
    int64_t n, k, m;
    const float *x; /* [m][k] */
    float *y;       /* [m][n] */
    int64_t rows_per_task;
} fa_job;

static void fa_decode(const fa_job *j, int64_t r0, int64_t r1) {
    const pgd__kd_fn kd = j->kern->kd[j->kt];
    for (int64_t i = r0; i < r1; i++) {
        float out[PGD__FA_MR];
        if (i + FA_PF_ROWS < r1) { /* a row at a time, FA_PF_ROWS ahead */
            const uint8_t *nx = j->w + (size_t)(i + FA_PF_ROWS) * j->row_bytes;
            for (size_t o = 0; o < j->row_bytes; o += 64) __builtin_prefetch(nx + o, 0, 3);
        }
        kd(j->w + (size_t)i * j->row_bytes, j->x, j->k, (int)j->m, out);
        for (int64_t t = 0; t < j->m; t++) j->y[t * j->n + i] = out[t];
    }
}

static void fa_prefill(const fa_job *j, int64_t r0, int64_t r1) {
    const pgd__deq_fn deq = j->kern->deq[j->kt];
    const size_t bs = pgd__kq_block_bytes(j->kt);
    _Alignas(64) float wd[PGD__FA_PR][PGD__FA_KC];       /* the panel chunk, dequantized */
    _Alignas(64) float part[PGD__FA_PT][PGD__FA_PR][32]; /* lanes of (token, row) */
    _Alignas(64) float yt[PGD__FA_PT][FA_ROW_BLOCK];     /* y[t0 + t][rb + i] */
    /* token tiles of about even sizes in multiples of the kernel's register tile: m = 64 runs
     * as 36 + 28 on AVX-512 (tile 6), not 48 + 16 */
    const int64_t unit = j->kern->kp_tokens, n_tiles = (j->m + PGD__FA_PT - 1) / PGD__FA_PT;
    int64_t tile = ((j->m + n_tiles - 1) / n_tiles + unit - 1) / unit * unit;
    if (tile > PGD__FA_PT) tile = PGD__FA_PT;
    if ((r1 - r0) % PGD__FA_PR) /* a last panel of nr < PGD__FA_PR rows reads the others */
        memset(wd, 0, sizeof(wd));
    for (int64_t rb = r0; rb < r1; rb += FA_ROW_BLOCK) {
        const int nrb = r1 - rb < FA_ROW_BLOCK ? (int)(r1 - rb) : FA_ROW_BLOCK;
        for (int64_t t0 = 0; t0 < j->m; t0 += tile) {
            const int mt = j->m - t0 < tile ? (int)(j->m - t0) : (int)tile;
            for (int p0 = 0; p0 < nrb; p0 += PGD__FA_PR) {
                const int nr = nrb - p0 < PGD__FA_PR ? nrb - p0 : PGD__FA_PR;
                for (int64_t c0 = 0; c0 < j->k; c0 += PGD__FA_KC) {
                    const int64_t kc = j->k - c0 < PGD__FA_KC ? j->k - c0 : PGD__FA_KC;
                    const uint8_t *wc = j->w + (size_t)(rb + p0) * j->row_bytes +
                                        (size_t)(c0 / PGD_QK) * bs; /* [nr][row_bytes] */
                    /* the next panel's chunk into cache while this one is dequantized and
                     * multiplied (weights beyond L2 otherwise stall the next deq), a row
                     * after each row's deq rather than all at once */
                    const int pf = t0 == 0 && rb + p0 + 2 * PGD__FA_PR <= r1;
                    const size_t cb = (size_t)(kc / PGD_QK) * bs;
                    for (int r = 0; r < nr; r++) {
                        deq(wc + (size_t)r * j->row_bytes, kc / PGD_QK, wd[r]);
                        const uint8_t *nx = wc + (size_t)(PGD__FA_PR + r) * j->row_bytes;
                        for (size_t o = 0; pf && o < cb; o += 64) __builtin_prefetch(nx + o, 0, 3);
                    }
                    j->kern->kp(&wd[0][0], PGD__FA_KC, j->x + t0 * j->k + c0, j->k, mt, kc,
                                &part[0][0][0], c0 == 0, c0 + kc == j->k ? &yt[0][p0] : NULL,
                                FA_ROW_BLOCK, nr);
                }
            }
            /* whole row segments: y lines are written once, even when n * 4 is a multiple of
             * the cache's set stride */
            for (int t = 0; t < mt; t++)
                memcpy(j->y + (t0 + t) * j->n + rb, yt[t], sizeof(float) * (size_t)nrb);
        }
    }
}

static void fa_task(int task, int thread, void *ctx) {
    const fa_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->n) r1 = j->n;
    if (j->m <= PGD__FA_MR)
        fa_decode(j, r0, r1);
    else
        fa_prefill(j, r0, r1);
}

/* Rows per task of one multiply of m tokens: about FA_TASKS_PER_THREAD tasks per thread (for
 * decode, m <= PGD__FA_MR, FA_DECODE_TASKS: longer streams of rows), whole panels. */
static int64_t fa_rows_per_task(int threads, int64_t n, int64_t m) {
    return pgd__rows_per_task(threads, n, m <= PGD__FA_MR ? FA_DECODE_TASKS : FA_TASKS_PER_THREAD,
                              PGD__FA_PR);
}

int pgd__matmul_fa_group(pgd_threadpool *pool, const pgd__fa_kernels *kern,
                         const pgd__fa_part *parts, int n_parts, int64_t k, const float *x,
                         int64_t m) {
    fa_job jobs[PGD__FA_MAX_PARTS];
    pgd_task_span spans[PGD__FA_MAX_PARTS];
    const int threads = pgd_threadpool_size(pool);
    for (int i = 0; i < n_parts; i++) {
        const pgd__fa_part *p = &parts[i];
        jobs[i] = (fa_job){kern, p->kt, p->w, p->row_bytes, p->n,
                           k,    m,     x,    p->y,         fa_rows_per_task(threads, p->n, m)};
        spans[i] = (pgd_task_span){
            fa_task, &jobs[i], (int)((p->n + jobs[i].rows_per_task - 1) / jobs[i].rows_per_task)};
    }
    return pgd_threadpool_run_spans(pool, spans, n_parts);
}

int pgd__matmul_fa(pgd_threadpool *pool, const pgd__fa_kernels *kern, int kt, const uint8_t *w,
                   size_t row_bytes, int64_t n, int64_t k, const float *x, int64_t m, float *y) {
    const pgd__fa_part part = {kt, w, row_bytes, n, y};
    return pgd__matmul_fa_group(pool, kern, &part, 1, k, x, m);
}
