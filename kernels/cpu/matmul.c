/*
 * kernels/cpu/matmul.c — the CPU matrix multiply: argument checks, ISA and mode selection, and
 * the PGD_ACT_Q8 mode (and F32/F16 weights): the split of the output over the thread pool,
 * activation quantization, and the scalar reference kernels that every SIMD kernel
 * (matmul_x86.c) must match bit for bit. The PGD_ACT_F32 mode of quantized weights lives in
 * matmul_f32.c (reached through pgd__matmul_fa).
 *
 * Owns: nothing mutable except the cached CPU feature probe (computed once, idempotent).
 * Invariants: the reduction order of matmul_kern.h; each output element is written by exactly
 * one task, and what a task computes depends only on its index, so results do not depend on
 * the pool size or on which thread runs which task.
 * Work split: the n output rows are cut into tasks of consecutive rows; inside a task rows are
 * taken in blocks of MM_ROW_BLOCK and, for each block, tokens in tiles (PGD__QMR / PGD__FMR
 * tokens per kernel call, or up to PGD__MT for the batched quantized kernels that unpack the
 * weights once for all of them: kqb, a whole row block per call, where the kernel set has it,
 * else kqm, one row per call), so a block of weight rows stays in cache while every token
 * tile uses it. Packed weights (pgd_q8_pack) go by whole row blocks of 16 through kqp, for any
 * number of tokens. Outputs go through a small tile so each y row segment is written once.
 * Threading: see matmul.h.
 */
#include "kernels/cpu/matmul.h"

#include "common/error.h"
#include "kernels/cpu/matmul_kern.h"
#include "kernels/cpu/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define MM_ROW_BLOCK        PGD__QBR /* weight rows per cache block inside a task */
#define MM_TASKS_PER_THREAD 4
#define MM_STREAM_MAX_M     2 /* ... but one per thread for packed weights and m up to this */
#define MM_ALIGN            64
#define MM_KQM_MIN_M        3 /* batches of at least this many tokens use kqm */
#define MM_KQB_MIN_M        2 /* ... or kqb, where the kernel set has it */
#define MM_KQM_L1_BYTES     32768

/* ---- CPU features ------------------------------------------------------------------------ */

enum { FEAT_PROBED = 1, FEAT_AVX2 = 2, FEAT_AVX512 = 4 };

static unsigned probe_features(void) {
    unsigned f = FEAT_PROBED;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return f;
    unsigned xlo, xhi;
    __asm__ __volatile__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if ((xlo & 0x6) != 0x6 || __get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1;
    if (avx2 && fma && f16c) f |= FEAT_AVX2;
    int avx512 = ((b >> 16) & 1) /* F */ && ((b >> 30) & 1) /* BW */ && ((b >> 31) & 1) /* VL */
                 && ((c >> 11) & 1) /* VNNI */ && (xlo & 0xe6) == 0xe6;
    if ((f & FEAT_AVX2) && avx512) f |= FEAT_AVX512;
#endif
    return f;
}

static unsigned cpu_features(void) {
    static atomic_uint cached;
    unsigned f = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!f) {
        f = probe_features();
        atomic_store_explicit(&cached, f, memory_order_relaxed);
    }
    return f;
}

bool pgd_cpu_isa_supported(pgd_cpu_isa isa) {
    switch (isa) {
    case PGD_ISA_AUTO:
    case PGD_ISA_SCALAR:
        return true;
    case PGD_ISA_AVX2:
        return pgd__matmul_kernels_avx2() && (cpu_features() & FEAT_AVX2);
    case PGD_ISA_AVX512:
        return pgd__matmul_kernels_avx512() && (cpu_features() & FEAT_AVX512);
    }
    return false;
}

int pgd_cpu_isa_resolve(pgd_cpu_isa *isa, const char *kernel) {
    if (*isa == PGD_ISA_AUTO) *isa = pgd_cpu_isa_best();
    if (pgd_cpu_isa_supported(*isa)) return 0;
    return pgd_error_set(PGD_EINVAL, "%s: this CPU cannot run the %s path", kernel,
                         pgd_cpu_isa_name(*isa));
}

pgd_cpu_isa pgd_cpu_isa_best(void) {
    if (pgd_cpu_isa_supported(PGD_ISA_AVX512)) return PGD_ISA_AVX512;
    if (pgd_cpu_isa_supported(PGD_ISA_AVX2)) return PGD_ISA_AVX2;
    return PGD_ISA_SCALAR;
}

const char *pgd_cpu_isa_name(pgd_cpu_isa isa) {
    switch (isa) {
    case PGD_ISA_AUTO:
        return "auto";
    case PGD_ISA_SCALAR:
        return "scalar";
    case PGD_ISA_AVX2:
        return "avx2";
    case PGD_ISA_AVX512:
        return "avx512";
    }
    return "?";
}

/* ---- scalar reference kernels ------------------------------------------------------------ */

static inline uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline float rdf16(const uint8_t *p) {
    return pgd_f16_to_f32(rd16(p));
}

static void quant_row_scalar(const float *x /* [k] */, int64_t k, int8_t *qs /* [k] */,
                             float *d /* [k/32] */, float *s /* [k/32] */,
                             int32_t *sum /* [k/32] */) {
    for (int64_t b = 0; b < k / PGD_QK; b++) {
        const float *xb = x + b * PGD_QK;
        float amax = 0.0f;
        for (int e = 0; e < PGD_QK; e++) {
            float a = fabsf(xb[e]);
            if (a > amax) amax = a;
        }
        float db = amax / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t acc = 0;
        for (int e = 0; e < PGD_QK; e++) {
            float v = nearbyintf(xb[e] * id); /* ties to even, as the SIMD rounding */
            int q = (v >= -127.0f && v <= 127.0f) ? (int)v : 0;
            qs[b * PGD_QK + e] = (int8_t)q;
            acc += q;
        }
        d[b] = db;
        sum[b] = acc;
        s[b] = db * (float)acc;
    }
}

static inline __attribute__((always_inline)) void
kq_scalar(int kt, const uint8_t *w, const pgd_q8_act *x, int64_t t0, int mr, float *out) {
    const int64_t nb = x->k / PGD_QK;
    const size_t bs = pgd__kq_block_bytes(kt);
    for (int t = 0; t < mr; t++) {
        const int8_t *xq = x->qs + (t0 + t) * x->nb_pad * PGD_QK; /* [k] */
        const float *xd = x->d + (t0 + t) * x->nb_pad;            /* [nb] */
        const float *xs = x->s + (t0 + t) * x->nb_pad;            /* [nb] */
        const int32_t *xm = x->sum + (t0 + t) * x->nb_pad;        /* [nb] */
        float acc[8] = {0};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (size_t)b * bs;
            const int8_t *q = xq + b * PGD_QK;
            int32_t isum = 0;
            float dw = rdf16(blk), mw = 0.0f;
            switch (kt) {
            case PGD__KQ_Q8_0: {
                const int8_t *wq = (const int8_t *)(blk + 2);
                for (int e = 0; e < PGD_QK; e++) isum += wq[e] * q[e];
                break;
            }
            case PGD__KQ_Q4_0:
            case PGD__KQ_Q4_1: {
                const uint8_t *qs = blk + (kt == PGD__KQ_Q4_0 ? 2 : 4);
                for (int j = 0; j < PGD_QK / 2; j++)
                    isum += (qs[j] & 15) * q[j] + (qs[j] >> 4) * q[j + PGD_QK / 2];
                if (kt == PGD__KQ_Q4_0)
                    isum -= 8 * xm[b];
                else
                    mw = rdf16(blk + 2);
                break;
            }
            case PGD__KQ_Q5_0:
            case PGD__KQ_Q5_1: {
                const uint8_t *p = blk + (kt == PGD__KQ_Q5_0 ? 2 : 4);
                uint32_t qh = rd32(p);
                const uint8_t *qs = p + 4;
                for (int j = 0; j < PGD_QK / 2; j++) {
                    int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
                    int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
                    isum += lo * q[j] + hi * q[j + PGD_QK / 2];
                }
                if (kt == PGD__KQ_Q5_0)
                    isum -= 16 * xm[b];
                else
                    mw = rdf16(blk + 2);
                break;
            }
            }
            float dd = dw * xd[b];
            acc[b & 7] = fmaf(dd, (float)isum, acc[b & 7]);
            if (kt == PGD__KQ_Q4_1 || kt == PGD__KQ_Q5_1) acc[b & 7] = fmaf(mw, xs[b], acc[b & 7]);
        }
        out[t] = pgd__hsum8(acc);
    }
}

#define KQ_SCALAR(name, kt)                                                                        \
    static void name(const uint8_t *w, const pgd_q8_act *x, int64_t t0, int mr, float *out) {      \
        kq_scalar(kt, w, x, t0, mr, out);                                                          \
    }
KQ_SCALAR(kq_scalar_q8_0, PGD__KQ_Q8_0)
KQ_SCALAR(kq_scalar_q4_0, PGD__KQ_Q4_0)
KQ_SCALAR(kq_scalar_q4_1, PGD__KQ_Q4_1)
KQ_SCALAR(kq_scalar_q5_0, PGD__KQ_Q5_0)
KQ_SCALAR(kq_scalar_q5_1, PGD__KQ_Q5_1)

#define KQM_SCALAR(name, kt)                                                                       \
    static void name(const uint8_t *w, const pgd_q8_act *x, int64_t t0, int mt, float *out) {      \
        for (int t = 0; t < mt; t++) kq_scalar(kt, w, x, t0 + t, 1, out + t);                      \
    }
KQM_SCALAR(kqm_scalar_q8_0, PGD__KQ_Q8_0)
KQM_SCALAR(kqm_scalar_q4_0, PGD__KQ_Q4_0)
KQM_SCALAR(kqm_scalar_q4_1, PGD__KQ_Q4_1)
KQM_SCALAR(kqm_scalar_q5_0, PGD__KQ_Q5_0)
KQM_SCALAR(kqm_scalar_q5_1, PGD__KQ_Q5_1)

static void kf_scalar(int f16, const uint8_t *w, size_t row_bytes, int nr,
                      const float *x /* [mr][k] */, int64_t k, int mr,
                      float *out /* [mr][PGD__NR] */) {
    for (int t = 0; t < mr; t++) {
        for (int r = 0; r < nr; r++) {
            const uint8_t *wr = w + (size_t)r * row_bytes;
            const float *xt = x + t * k;
            float acc[8] = {0};
            for (int64_t e = 0; e < k; e++) {
                float we;
                if (f16)
                    we = rdf16(wr + 2 * e);
                else
                    memcpy(&we, wr + 4 * e, sizeof(we));
                acc[e & 7] = fmaf(we, xt[e], acc[e & 7]);
            }
            out[t * PGD__NR + r] = pgd__hsum8(acc);
        }
    }
}

static const pgd__matmul_kernels kernels_scalar = {
    quant_row_scalar,
    {kq_scalar_q8_0, kq_scalar_q4_0, kq_scalar_q4_1, kq_scalar_q5_0, kq_scalar_q5_1},
    {kqm_scalar_q8_0, kqm_scalar_q4_0, kqm_scalar_q4_1, kqm_scalar_q5_0, kqm_scalar_q5_1},
    {NULL, NULL, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
    kf_scalar,
};

static const pgd__matmul_kernels *kernels_for(pgd_cpu_isa isa) {
    if (isa == PGD_ISA_AUTO) isa = pgd_cpu_isa_best();
    if (!pgd_cpu_isa_supported(isa)) return NULL;
    switch (isa) {
    case PGD_ISA_AVX2:
        return pgd__matmul_kernels_avx2();
    case PGD_ISA_AVX512:
        return pgd__matmul_kernels_avx512();
    default:
        return &kernels_scalar;
    }
}

/* ---- types --------------------------------------------------------------------------------- */

/* Kernel index of a quantized type, -1 for F32/F16, -2 when unsupported. */
static int kq_index(uint32_t wtype) {
    switch (wtype) {
    case PGD_TYPE_F32:
    case PGD_TYPE_F16:
        return -1;
    case PGD_TYPE_Q8_0:
        return PGD__KQ_Q8_0;
    case PGD_TYPE_Q4_0:
        return PGD__KQ_Q4_0;
    case PGD_TYPE_Q4_1:
        return PGD__KQ_Q4_1;
    case PGD_TYPE_Q5_0:
        return PGD__KQ_Q5_0;
    case PGD_TYPE_Q5_1:
        return PGD__KQ_Q5_1;
    default:
        return -2;
    }
}

bool pgd_matmul_supported(uint32_t wtype) {
    return kq_index(wtype) != -2;
}

/* ---- Q8 activations ---------------------------------------------------------------------- */

static int64_t round_up(int64_t v, int64_t a) {
    return (v + a - 1) / a * a;
}

size_t pgd_q8_act_bytes(int64_t m, int64_t k) {
    if (m < 1 || k < PGD_QK || k % PGD_QK) return 0;
    if (m > INT64_MAX / k || m * k > (int64_t)(SIZE_MAX / 4)) return 0;
    int64_t nbp = round_up(k / PGD_QK, 8);
    if (m > INT64_MAX / (nbp * PGD_QK)) return 0;
    int64_t qs = round_up(m * nbp * PGD_QK, MM_ALIGN), per = round_up(m * nbp * 4, MM_ALIGN);
    if (qs > (int64_t)(SIZE_MAX / 8) || per > (int64_t)(SIZE_MAX / 8)) return 0;
    return (size_t)(MM_ALIGN + 2 * qs + 3 * per);
}

int pgd_q8_act_init(pgd_q8_act *a, void *buf, size_t size, int64_t m, int64_t k) {
    size_t need = pgd_q8_act_bytes(m, k);
    if (!need)
        return pgd_error_set(PGD_EINVAL, "q8 activations: bad shape m=%lld k=%lld", (long long)m,
                             (long long)k);
    if (!buf || size < need)
        return pgd_error_set(PGD_ERANGE, "q8 activations: %zu bytes given, %zu needed", size, need);
    uintptr_t p = ((uintptr_t)buf + MM_ALIGN - 1) & ~(uintptr_t)(MM_ALIGN - 1);
    int64_t nbp = round_up(k / PGD_QK, 8);
    size_t qs = (size_t)round_up(m * nbp * PGD_QK, MM_ALIGN);
    size_t per = (size_t)round_up(m * nbp * 4, MM_ALIGN);
    a->m = m;
    a->k = k;
    a->nb_pad = nbp;
    a->qs = (int8_t *)p;
    a->qt = (int8_t *)(p + qs);
    a->d = (float *)(p + 2 * qs);
    a->s = (float *)(p + 2 * qs + per);
    a->sum = (int32_t *)(p + 2 * qs + 2 * per);
    return 0;
}

typedef struct quant_job {
    const pgd__matmul_kernels *kern;
    const float *x; /* [m][k] */
    pgd_q8_act *a;
    int64_t rows_per_task;
} quant_job;

static void quant_task(int task, int thread, void *ctx) {
    const quant_job *j = ctx;
    pgd_q8_act *a = j->a;
    int64_t nb = a->k / PGD_QK;
    int64_t r1 = (task + 1) * j->rows_per_task;
    if (r1 > a->m) r1 = a->m;
    for (int64_t r = task * j->rows_per_task; r < r1; r++) {
        float *d = a->d + r * a->nb_pad, *s = a->s + r * a->nb_pad;
        int32_t *sum = a->sum + r * a->nb_pad;
        int8_t *qs = a->qs + r * a->nb_pad * PGD_QK;
        j->kern->quant_row(j->x + r * a->k, a->k, qs, d, s, sum);
        memset(qs + a->k, 0, (size_t)((a->nb_pad - nb) * PGD_QK));
        for (int64_t b = nb; b < a->nb_pad; b++) d[b] = s[b] = 0.0f, sum[b] = 0;
        int8_t *qt = a->qt + r * a->nb_pad * PGD_QK;
        for (int64_t g = 0; g < a->nb_pad / 8; g++)
            for (int c = 0; c < 8; c++)
                for (int l = 0; l < 8; l++)
                    memcpy(qt + 256 * g + 32 * c + 4 * l, qs + 256 * g + 32 * l + 4 * c, 4);
    }
}

static int quantize_with(pgd_threadpool *pool, const pgd__matmul_kernels *kern, const float *x,
                         pgd_q8_act *a) {
    quant_job job = {kern, x, a, a->m};
    int n_tasks = 1;
    int threads = pgd_threadpool_size(pool);
    if (threads > 1 && a->m * a->k >= 16384) {
        job.rows_per_task = (a->m + threads * 2 - 1) / (threads * 2);
        n_tasks = (int)((a->m + job.rows_per_task - 1) / job.rows_per_task);
    }
    if (n_tasks == 1) {
        quant_task(0, 0, &job);
        return 0;
    }
    return pgd_threadpool_run(pool, n_tasks, quant_task, &job);
}

int pgd_q8_act_quantize(pgd_threadpool *pool, pgd_cpu_isa isa, const float *x, pgd_q8_act *a) {
    const pgd__matmul_kernels *kern = kernels_for(isa);
    if (!kern) return pgd_error_set(PGD_EINVAL, "isa %s not supported", pgd_cpu_isa_name(isa));
    return quantize_with(pool, kern, x, a);
}

/* ---- the multiply ------------------------------------------------------------------------ */

typedef struct mm_job {
    const pgd__matmul_kernels *kern;
    int kt;      /* PGD__KQ_* or -1 for F32/F16 */
    int batched; /* use kqm */
    int f16;     /* F16 weights (kt == -1) */
    const uint8_t *w;
    size_t row_bytes;
    const uint8_t *packed; /* pgd_q8_pack of w (kqp), or NULL */
    int64_t n, k, m;
    const pgd_q8_act *xq; /* quantized types */
    const float *xf;      /* [m][k], F32/F16 */
    float *y;             /* [m][n] */
    int64_t rows_per_task;
} mm_job;

/* Whether m tokens go through the batched kernels (kqb or kqm) rather than kq. */
static int use_batched(const pgd__matmul_kernels *kern, int kt, int64_t m) {
    return m >= (kern->kqb[kt] ? MM_KQB_MIN_M : MM_KQM_MIN_M);
}

/* Rows [rb, rb + nrows) of task rows [r0, r1) for tokens [t0, t0 + mr) by the kqb kernel, which
 * on the first token tile also prefetches the task's next row block (spread, as kqp does). */
static void mm_kqb_block(const mm_job *j, int64_t r1, int64_t rb, int nrows, int64_t t0, int mr) {
    float ob[PGD__MT * PGD__QBR]; /* [mr][PGD__QBR] */
    const int64_t nx = rb + MM_ROW_BLOCK, nx_rows = r1 - nx < MM_ROW_BLOCK ? r1 - nx : MM_ROW_BLOCK;
    const uint8_t *pf = t0 == 0 && nx < r1 ? j->w + (size_t)nx * j->row_bytes : NULL;
    j->kern->kqb[j->kt](j->w + (size_t)rb * j->row_bytes, j->row_bytes, nrows, j->xq, t0, mr, ob,
                        pf, pf ? (size_t)nx_rows * j->row_bytes : 0);
    for (int t = 0; t < mr; t++)
        memcpy(j->y + (t0 + t) * j->n + rb, ob + t * PGD__QBR, sizeof(float) * (size_t)nrows);
}

/* Rows [r0, r1) (r0 a multiple of PGD__QBR) from packed weights, a row block per kqp call. */
static void mm_kqp_rows(const mm_job *j, int64_t r0, int64_t r1) {
    const size_t bb = pgd__qp_block_bytes(j->kt, j->k / PGD_QK);
    float ob[PGD__MT * PGD__QBR]; /* [mr][PGD__QBR] */
    for (int64_t rb = r0; rb < r1; rb += PGD__QBR) {
        const int nrows = (int)(r1 - rb < PGD__QBR ? r1 - rb : PGD__QBR);
        const uint8_t *blk = j->packed + (size_t)(rb / PGD__QBR) * bb;
        /* the task's next row block into cache while this one is multiplied, spread over the
         * kernel's register tiles (a burst of a block's prefetches stalls the core until they
         * drain: measured slower, at any distance) */
        const uint8_t *next = rb + PGD__QBR < r1 ? blk + bb : NULL;
        for (int64_t t0 = 0; t0 < j->m; t0 += PGD__MT) {
            const int mr = (int)(j->m - t0 < PGD__MT ? j->m - t0 : PGD__MT);
            j->kern->kqp[j->kt](blk, j->xq, t0, mr, ob, t0 == 0 ? next : NULL, bb);
            for (int t = 0; t < mr; t++)
                memcpy(j->y + (t0 + t) * j->n + rb, ob + t * PGD__QBR,
                       sizeof(float) * (size_t)nrows);
        }
    }
}

static void mm_task(int task, int thread, void *ctx) {
    const mm_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->n) r1 = j->n;
    if (j->packed) {
        mm_kqp_rows(j, r0, r1);
        return;
    }
    int tile_m = j->kt < 0 ? PGD__FMR : PGD__QMR;
    if (j->kt >= 0 && j->batched) {
        /* tokens per kqm call: enough to amortize unpacking a weight row, few enough that
         * their activations (tile_m * k bytes) stay in L1 while the rows go by */
        int64_t fit = (MM_KQM_L1_BYTES / j->k) & ~(int64_t)3;
        tile_m = (int)(fit < 8 ? 8 : fit > PGD__MT ? PGD__MT : fit);
    }
    for (int64_t rb = r0; rb < r1; rb += MM_ROW_BLOCK) {
        const int nrows = (int)(rb + MM_ROW_BLOCK < r1 ? MM_ROW_BLOCK : r1 - rb);
        for (int64_t t0 = 0; t0 < j->m; t0 += tile_m) {
            const int mr = j->m - t0 < tile_m ? (int)(j->m - t0) : tile_m;
            float tile[PGD__MT][MM_ROW_BLOCK]; /* y[t0 + t][rb + i] */
            float out[PGD__MT > PGD__FMR * PGD__NR ? PGD__MT : PGD__FMR * PGD__NR];
            if (j->kt >= 0 && j->batched && j->kern->kqb[j->kt]) {
                mm_kqb_block(j, r1, rb, nrows, t0, mr);
                continue;
            } else if (j->kt >= 0) {
                for (int i = 0; i < nrows; i++) {
                    const uint8_t *w = j->w + (size_t)(rb + i) * j->row_bytes;
                    if (j->batched)
                        j->kern->kqm[j->kt](w, j->xq, t0, mr, out);
                    else
                        j->kern->kq[j->kt](w, j->xq, t0, mr, out);
                    for (int t = 0; t < mr; t++) tile[t][i] = out[t];
                }
            } else {
                const int nr_max = mr == 1 ? PGD__NR : 2;
                for (int i = 0; i < nrows; i += nr_max) {
                    const int nr = nrows - i < nr_max ? nrows - i : nr_max;
                    j->kern->kf(j->f16, j->w + (size_t)(rb + i) * j->row_bytes, j->row_bytes, nr,
                                j->xf + t0 * j->k, j->k, mr, out);
                    for (int t = 0; t < mr; t++)
                        for (int c = 0; c < nr; c++) tile[t][i + c] = out[t * PGD__NR + c];
                }
            }
            /* whole row segments: y lines are written once, even when n * 4 is a multiple of
             * the cache's set stride */
            for (int t = 0; t < mr; t++)
                memcpy(j->y + (t0 + t) * j->n + rb, tile[t], sizeof(float) * (size_t)nrows);
        }
    }
}

/* Sets job->rows_per_task (whole row blocks for packed weights) for `threads` threads; returns
 * the number of tasks, or -1 when more than an int holds. */
static int64_t mm_split(mm_job *job, int threads) {
    /* a decode step's tokens on packed weights: one long task per thread streams the rows
     * (each task's first block comes without prefetch); else several, for balance */
    const int64_t per = job->packed && job->m <= MM_STREAM_MAX_M ? 1 : MM_TASKS_PER_THREAD;
    const int64_t rpt = pgd__rows_per_task(threads, job->n, per, job->packed ? PGD__QBR : 4);
    job->rows_per_task = rpt;
    int64_t n_tasks = (job->n + rpt - 1) / rpt;
    return n_tasks > INT32_MAX ? -1 : n_tasks;
}

/* One or more jobs in one pool run, their tasks side by side (a single task runs inline). */
static int mm_run(pgd_threadpool *pool, mm_job *jobs, int n_jobs) {
    const int threads = pgd_threadpool_size(pool);
    pgd_task_span spans[PGD__FA_MAX_PARTS];
    int64_t total = 0;
    for (int i = 0; i < n_jobs; i++) {
        const int64_t nt = mm_split(&jobs[i], threads);
        if (nt < 0 || nt > INT32_MAX - total)
            return pgd_error_set(PGD_ERANGE, "matmul: too many rows");
        spans[i] = (pgd_task_span){mm_task, &jobs[i], (int)nt};
        total += nt;
    }
    return pgd_threadpool_run_spans(pool, spans, n_jobs);
}

static int check_weights(uint32_t wtype, int64_t n, int64_t k, size_t *row_bytes) {
    if (kq_index(wtype) == -2) {
        const pgd_type_traits *tr = pgd_type_info(wtype);
        return pgd_error_set(PGD_EUNSUPPORTED, "matmul: weight type %s not supported",
                             tr ? tr->name : "unknown");
    }
    if (n < 0 || k < 1)
        return pgd_error_set(PGD_EINVAL, "matmul: bad shape n=%lld k=%lld", (long long)n,
                             (long long)k);
    int64_t bsz = 1, tsz;
    switch (wtype) {
    case PGD_TYPE_F32:
        tsz = 4;
        break;
    case PGD_TYPE_F16:
        tsz = 2;
        break;
    default:
        bsz = PGD_QK, tsz = (int64_t)pgd__kq_block_bytes(kq_index(wtype));
        break;
    }
    if (k % bsz)
        return pgd_error_set(PGD_EINVAL, "matmul: k=%lld is not a multiple of %lld", (long long)k,
                             (long long)bsz);
    if (k / bsz > INT64_MAX / tsz) return pgd_error_set(PGD_ERANGE, "matmul: k too large");
    *row_bytes = (size_t)(k / bsz * tsz);
    return 0;
}

int pgd_matmul_q8(pgd_threadpool *pool, pgd_cpu_isa isa, uint32_t wtype, const void *w, int64_t n,
                  const pgd_q8_act *x, float *y) {
    size_t row_bytes;
    int rc = check_weights(wtype, n, x->k, &row_bytes);
    if (rc) return rc;
    int kt = kq_index(wtype);
    if (kt < 0)
        return pgd_error_set(PGD_EINVAL, "matmul_q8: weight type %u is not quantized", wtype);
    const pgd__matmul_kernels *kern = kernels_for(isa);
    if (!kern) return pgd_error_set(PGD_EINVAL, "isa %s not supported", pgd_cpu_isa_name(isa));
    if (n == 0) return 0;
    mm_job job = {.kern = kern,
                  .kt = kt,
                  .batched = use_batched(kern, kt, x->m),
                  .w = w,
                  .row_bytes = row_bytes,
                  .n = n,
                  .k = x->k,
                  .m = x->m,
                  .xq = x,
                  .y = y};
    return mm_run(pool, &job, 1);
}

/* PGD_ACT_Q8 for quantized parts (checked, n >= 1) sharing x [m][k], m >= 1: x quantized
 * once into scratch (NULL: allocated here), then every part in one pool run. */
static int q8_parts(pgd_threadpool *pool, const pgd__matmul_kernels *kern,
                    const pgd_matmul_part *parts, int n_parts, int64_t k, const float *x, int64_t m,
                    void *scratch, size_t scratch_size) {
    void *owned = NULL;
    size_t need = pgd_q8_act_bytes(m, k);
    if (!need) return pgd_error_set(PGD_ERANGE, "matmul: activations too large");
    if (!scratch) {
        scratch = owned = malloc(need);
        scratch_size = need;
        if (!owned) return PGD_ENOMEM;
    }
    pgd_q8_act a;
    int rc = pgd_q8_act_init(&a, scratch, scratch_size, m, k);
    if (rc) goto fail;
    rc = quantize_with(pool, kern, x, &a);
    if (rc) goto fail;
    mm_job jobs[PGD__FA_MAX_PARTS];
    for (int i = 0; i < n_parts; i++) {
        const int kt = kq_index(parts[i].wtype);
        jobs[i] = (mm_job){.kern = kern,
                           .kt = kt,
                           .batched = use_batched(kern, kt, m),
                           .w = parts[i].w,
                           .row_bytes = (size_t)(k / PGD_QK) * pgd__kq_block_bytes(kt),
                           .packed = kern->kqp[kt] ? parts[i].packed : NULL,
                           .n = parts[i].n,
                           .k = k,
                           .m = m,
                           .xq = &a,
                           .y = parts[i].y};
    }
    rc = mm_run(pool, jobs, n_parts);
fail:
    free(owned);
    return rc;
}

size_t pgd_q8_pack_bytes(pgd_cpu_isa isa, uint32_t wtype, int64_t n, int64_t k) {
    const int kt = kq_index(wtype);
    const pgd__matmul_kernels *kern = kernels_for(isa);
    if (kt < 0 || !kern || !kern->kqp[kt] || n < 1 || k < PGD_QK || k % PGD_QK) return 0;
    const int64_t blocks = (n + PGD__QBR - 1) / PGD__QBR;
    const size_t bb = pgd__qp_block_bytes(kt, k / PGD_QK);
    if ((uint64_t)blocks > SIZE_MAX / bb) return 0;
    return (size_t)blocks * bb;
}

int pgd_q8_pack(pgd_cpu_isa isa, uint32_t wtype, const void *w, int64_t n, int64_t k, void *dst,
                size_t size) {
    const size_t need = pgd_q8_pack_bytes(isa, wtype, n, k);
    const int kt = kq_index(wtype);
    if (!need || kt < 0)
        return pgd_error_set(PGD_EUNSUPPORTED, "matmul: no packed layout for this weight");
    if (size < need || ((uintptr_t)dst & (MM_ALIGN - 1)))
        return pgd_error_set(PGD_EINVAL, "matmul pack: %zu bytes at %p (need %zu, 64-aligned)",
                             size, dst, need);
    const int64_t nb = k / PGD_QK;
    const size_t bs = pgd__kq_block_bytes(kt), C = pgd__qp_quant_dwords(kt);
    const size_t qoff = kt == PGD__KQ_Q4_1 ? 4 : 2, bb = pgd__qp_block_bytes(kt, nb);
    memset(dst, 0, need);
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * (size_t)nb * bs;
        uint8_t *blk = (uint8_t *)dst + (size_t)(r / PGD__QBR) * bb;
        const int p = (int)(r % PGD__QBR) / 2, h = (int)(r % 2);
        for (int64_t b = 0; b < nb; b++) {
            const int64_t g = b / 8;
            const int l = (int)(b % 8), nbg = nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
            const uint8_t *src = row + (size_t)b * bs;
            uint8_t *rec = blk + (size_t)g * pgd__qp_group_bytes(kt, 8);
            const size_t vbytes = 8 * (size_t)nbg, pbytes = C * vbytes;
            /* the pair layout: vector c of pair p, dword h nbg + l; a last group of up to 4
             * blocks, the tile layout: vector c of tile p / 2, dword (2 (p % 2) + h) nbg + l */
            const int tiled = pgd__qp_tiled(nbg);
            const size_t lane =
                tiled ? (size_t)((2 * (p % 2) + h) * nbg + l) : (size_t)(h * nbg + l);
            for (size_t c = 0; c < C; c++) {
                uint8_t *q = rec +
                             (tiled ? (size_t)(p / 2) * 2 * pbytes + c * 2 * vbytes
                                    : (size_t)p * pbytes + c * vbytes) +
                             4 * lane;
                for (int i = 0; i < 4; i++)
                    q[i] = src[qoff + 4 * c + (size_t)i] ^ (kt == PGD__KQ_Q8_0 ? 0x80 : 0);
            }
            uint8_t *sc = rec + 8 * pbytes +
                          (tiled ? 32 * (size_t)(p / 2) + 2 * lane
                                 : 32 * (size_t)p + 2 * (size_t)(8 * h + l));
            memcpy(sc, src, 2);
            if (kt == PGD__KQ_Q4_1) memcpy(sc + 256, src + 2, 2);
        }
    }
    return 0;
}

const char *pgd_act_mode_name(pgd_act_mode mode) {
    switch (mode) {
    case PGD_ACT_F32:
        return "f32";
    case PGD_ACT_Q8:
        return "q8";
    }
    return "?";
}

static const pgd__fa_kernels *fa_kernels_for(pgd_cpu_isa isa) {
    if (isa == PGD_ISA_AUTO) isa = pgd_cpu_isa_best();
    if (!pgd_cpu_isa_supported(isa)) return NULL;
    switch (isa) {
    case PGD_ISA_AVX2:
        return pgd__fa_kernels_avx2();
    case PGD_ISA_AVX512:
        return pgd__fa_kernels_avx512();
    default:
        return pgd__fa_kernels_scalar();
    }
}

size_t pgd_matmul_scratch_bytes_mode(pgd_act_mode mode, uint32_t wtype, int64_t m, int64_t k) {
    int kt = kq_index(wtype);
    if (kt == -2 || m < 0 || k < 1 || (mode != PGD_ACT_F32 && mode != PGD_ACT_Q8)) return SIZE_MAX;
    if (kt == -1 || m == 0 || mode == PGD_ACT_F32) return 0;
    size_t b = pgd_q8_act_bytes(m, k);
    return b ? b : SIZE_MAX;
}

size_t pgd_matmul_scratch_bytes(uint32_t wtype, int64_t m, int64_t k) {
    return pgd_matmul_scratch_bytes_mode(PGD_ACT_F32, wtype, m, k);
}

int pgd_matmul_isa_mode(pgd_threadpool *pool, pgd_cpu_isa isa, pgd_act_mode mode, uint32_t wtype,
                        const void *w, int64_t n, int64_t k, const float *x, int64_t m, float *y,
                        void *scratch, size_t scratch_size) {
    size_t row_bytes;
    int rc = check_weights(wtype, n, k, &row_bytes);
    if (rc) return rc;
    if (m < 0) return pgd_error_set(PGD_EINVAL, "matmul: m=%lld", (long long)m);
    if (mode != PGD_ACT_F32 && mode != PGD_ACT_Q8)
        return pgd_error_set(PGD_EINVAL, "matmul: activation mode %d", (int)mode);
    const pgd__matmul_kernels *kern = kernels_for(isa);
    if (!kern) return pgd_error_set(PGD_EINVAL, "isa %s not supported", pgd_cpu_isa_name(isa));
    if (n == 0 || m == 0) return 0;
    int kt = kq_index(wtype);
    if (kt == -1) {
        mm_job job = {.kern = kern,
                      .kt = -1,
                      .f16 = wtype == PGD_TYPE_F16,
                      .w = w,
                      .row_bytes = row_bytes,
                      .n = n,
                      .k = k,
                      .m = m,
                      .xf = x,
                      .y = y};
        return mm_run(pool, &job, 1);
    }
    if (mode == PGD_ACT_F32)
        return pgd__matmul_fa(pool, fa_kernels_for(isa), kt, w, row_bytes, n, k, x, m, y);
    const pgd_matmul_part part = {wtype, w, n, y, NULL};
    return q8_parts(pool, kern, &part, 1, k, x, m, scratch, scratch_size);
}

int pgd_matmul_group(pgd_threadpool *pool, pgd_act_mode mode, const pgd_matmul_part *parts,
                     int n_parts, int64_t k, const float *x, int64_t m, void *scratch,
                     size_t scratch_size) {
    if (n_parts < 1 || n_parts > PGD__FA_MAX_PARTS)
        return pgd_error_set(PGD_EINVAL, "matmul group of %d parts", n_parts);
    pgd__fa_part fp[PGD__FA_MAX_PARTS];
    bool fused = (mode == PGD_ACT_F32 || mode == PGD_ACT_Q8) && m > 0;
    for (int i = 0; i < n_parts && fused; i++) {
        size_t row_bytes = 0;
        fp[i].kt = kq_index(parts[i].wtype);
        fused = fp[i].kt >= 0 && parts[i].n > 0 &&
                check_weights(parts[i].wtype, parts[i].n, k, &row_bytes) == 0;
        fp[i].w = parts[i].w;
        fp[i].row_bytes = row_bytes;
        fp[i].n = parts[i].n;
        fp[i].y = parts[i].y;
    }
    if (fused && mode == PGD_ACT_F32)
        return pgd__matmul_fa_group(pool, fa_kernels_for(PGD_ISA_AUTO), fp, n_parts, k, x, m);
    if (fused)
        return q8_parts(pool, kernels_for(PGD_ISA_AUTO), parts, n_parts, k, x, m, scratch,
                        scratch_size);
    for (int i = 0; i < n_parts; i++) {
        int rc = pgd_matmul_mode(pool, mode, parts[i].wtype, parts[i].w, parts[i].n, k, x, m,
                                 parts[i].y, scratch, scratch_size);
        if (rc) return rc;
    }
    return 0;
}

int pgd_matmul_mode(pgd_threadpool *pool, pgd_act_mode mode, uint32_t wtype, const void *w,
                    int64_t n, int64_t k, const float *x, int64_t m, float *y, void *scratch,
                    size_t scratch_size) {
    return pgd_matmul_isa_mode(pool, PGD_ISA_AUTO, mode, wtype, w, n, k, x, m, y, scratch,
                               scratch_size);
}

int pgd_matmul_isa(pgd_threadpool *pool, pgd_cpu_isa isa, uint32_t wtype, const void *w, int64_t n,
                   int64_t k, const float *x, int64_t m, float *y, void *scratch,
                   size_t scratch_size) {
    return pgd_matmul_isa_mode(pool, isa, PGD_ACT_F32, wtype, w, n, k, x, m, y, scratch,
                               scratch_size);
}

int pgd_matmul(pgd_threadpool *pool, uint32_t wtype, const void *w, int64_t n, int64_t k,
               const float *x, int64_t m, float *y, void *scratch, size_t scratch_size) {
    return pgd_matmul_isa_mode(pool, PGD_ISA_AUTO, PGD_ACT_F32, wtype, w, n, k, x, m, y, scratch,
                               scratch_size);
}
