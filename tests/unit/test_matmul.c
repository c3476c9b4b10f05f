/*
 * tests/unit/test_matmul.c — the CPU matmul (kernels/cpu/matmul.h) against references written
 * here from the format definitions: weights quantized and dequantized by this file (GGUF block
 * layouts), activations quantized by this file (the Q8 activation format of matmul.h), dot
 * products in double. Both activation modes: PGD_ACT_F32 (the default) against the product
 * of the dequantized weights with the f32 activations (relative error <= 1e-5), PGD_ACT_Q8
 * against the product with the Q8-dequantized activations. Also: every ISA path bit-identical
 * to the scalar one, results bit-identical across batch sizes, row positions, token tiles,
 * k chunks and thread counts, odd shapes, bad arguments.
 *
 * PGD_BENCH=1 adds a benchmark (GFLOP/s, weight GB/s; both modes, and Q8 on packed weights as
 * "q8p"); default runs time nothing.
 */
#include "kernels/cpu/matmul.h"

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- helpers written from the definitions ------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float rng_f(float lo, float hi) { /* uniform in [lo, hi) */
    return lo + (hi - lo) * (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
}

/* IEEE binary16 -> binary32, exact. */
static double ref_f16(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v;
    if (exp == 0)
        v = ldexp((double)man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexp((double)(man | 1024), exp - 25);
    return sign ? -v : v;
}

/* binary32 -> binary16, round to nearest even (finite, in-range inputs only). */
static uint16_t ref_to_f16(float f) {
    double a = fabs((double)f);
    uint16_t sign = f < 0 ? 0x8000 : 0;
    if (a == 0) return sign;
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int exp = e - 1;
    if (exp < -14) exp = -14; /* subnormal range: quantum 2^-24 */
    double quantum = ldexp(1.0, exp - 10);
    double q = nearbyint(a / quantum); /* ties to even */
    uint32_t bits;
    if (exp == -14 && q < 1024)
        bits = (uint32_t)q;
    else {
        if (q >= 2048) q /= 2, exp++;
        bits = (uint32_t)(exp + 15) << 10 | ((uint32_t)q - 1024);
    }
    return (uint16_t)(sign | bits);
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static uint16_t get16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

typedef struct tinfo {
    uint32_t type;
    const char *name;
    int block;      /* elements per block */
    int block_size; /* bytes */
} tinfo;

static const tinfo TYPES[] = {
    {PGD_TYPE_F32, "F32", 1, 4},     {PGD_TYPE_F16, "F16", 1, 2},
    {PGD_TYPE_Q8_0, "Q8_0", 32, 34}, {PGD_TYPE_Q4_0, "Q4_0", 32, 18},
    {PGD_TYPE_Q4_1, "Q4_1", 32, 20}, {PGD_TYPE_Q5_0, "Q5_0", 32, 22},
    {PGD_TYPE_Q5_1, "Q5_1", 32, 24},
};

/* Quantizes one block of x (block elements) into dst from the format definition. */
static void ref_quant_block(uint32_t type, const float *x, uint8_t *dst) {
    switch (type) {
    case PGD_TYPE_F32:
        memcpy(dst, x, 4);
        return;
    case PGD_TYPE_F16:
        put16(dst, ref_to_f16(x[0]));
        return;
    default:
        break;
    }
    float amax = 0, vmax = 0, mn = x[0], mx = x[0];
    for (int i = 0; i < 32; i++) {
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), vmax = x[i];
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    int q[32];
    float d = 0, m = 0;
    switch (type) {
    case PGD_TYPE_Q8_0: {
        d = amax / 127;
        for (int i = 0; i < 32; i++) q[i] = d ? (int)lrintf(x[i] / d) : 0;
        break;
    }
    case PGD_TYPE_Q4_0:
    case PGD_TYPE_Q5_0: {
        int half = type == PGD_TYPE_Q4_0 ? 8 : 16;
        d = vmax / -half;
        for (int i = 0; i < 32; i++) {
            int v = d ? (int)lrintf(x[i] / d) + half : half;
            q[i] = v < 0 ? 0 : v > 2 * half - 1 ? 2 * half - 1 : v;
        }
        break;
    }
    case PGD_TYPE_Q4_1:
    case PGD_TYPE_Q5_1: {
        int top = type == PGD_TYPE_Q4_1 ? 15 : 31;
        d = (mx - mn) / top;
        m = mn;
        for (int i = 0; i < 32; i++) {
            int v = d ? (int)lrintf((x[i] - mn) / d) : 0;
            q[i] = v < 0 ? 0 : v > top ? top : v;
        }
        break;
    }
    }
    put16(dst, ref_to_f16(d));
    uint8_t *p = dst + 2;
    if (type == PGD_TYPE_Q8_0) {
        for (int i = 0; i < 32; i++) p[i] = (uint8_t)(int8_t)q[i];
        return;
    }
    if (type == PGD_TYPE_Q4_1 || type == PGD_TYPE_Q5_1) put16(dst + 2, ref_to_f16(m)), p += 2;
    if (type == PGD_TYPE_Q5_0 || type == PGD_TYPE_Q5_1) {
        uint32_t qh = 0;
        for (int i = 0; i < 32; i++) qh |= (uint32_t)((q[i] >> 4) & 1) << i;
        for (int i = 0; i < 4; i++) p[i] = (uint8_t)(qh >> (8 * i));
        p += 4;
    }
    for (int j = 0; j < 16; j++) p[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

/* Dequantizes one block from the format definition into y (double). */
static void ref_dequant_block(uint32_t type, const uint8_t *b, double *y) {
    switch (type) {
    case PGD_TYPE_F32: {
        float f;
        memcpy(&f, b, 4);
        y[0] = f;
        return;
    }
    case PGD_TYPE_F16:
        y[0] = ref_f16(get16(b));
        return;
    case PGD_TYPE_Q8_0:
        for (int i = 0; i < 32; i++) y[i] = ref_f16(get16(b)) * (int8_t)b[2 + i];
        return;
    default:
        break;
    }
    double d = ref_f16(get16(b)), m = 0;
    const uint8_t *p = b + 2;
    if (type == PGD_TYPE_Q4_1 || type == PGD_TYPE_Q5_1) m = ref_f16(get16(b + 2)), p += 2;
    uint32_t qh = 0;
    if (type == PGD_TYPE_Q5_0 || type == PGD_TYPE_Q5_1) {
        qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        p += 4;
    }
    for (int i = 0; i < 32; i++) {
        int q = i < 16 ? (p[i] & 15) : (p[i - 16] >> 4);
        q |= (int)((qh >> i) & 1) << 4;
        switch (type) {
        case PGD_TYPE_Q4_0:
            y[i] = d * (q - 8);
            break;
        case PGD_TYPE_Q5_0:
            y[i] = d * (q - 16);
            break;
        default:
            y[i] = d * q + m;
            break; /* Q4_1, Q5_1 */
        }
    }
}

/* The Q8 activation format of matmul.h, written from its definition. */
static void ref_quant_act(const float *x, int64_t k, int8_t *q, float *d) {
    for (int64_t b = 0; b < k / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        float db = amax / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        for (int i = 0; i < 32; i++) {
            float prod = x[b * 32 + i] * id;
            q[b * 32 + i] = (int8_t)rintf(prod); /* default mode: ties to even */
        }
        d[b] = db;
    }
}

/* A test problem: W [n][k] of type, x [m][k], dequantized copies and double references. */
typedef struct problem {
    const tinfo *t;
    int64_t n, k, m;
    size_t row_bytes;
    uint8_t *w;   /* [n][row_bytes] */
    double *wd;   /* [n][k] dequantized */
    float *x;     /* [m][k] */
    double *xd;   /* [m][k] Q8-dequantized (quantized types) or x itself */
    double *ref;  /* [m][n] Σ wd * xd */
    double *refx; /* [m][n] Σ wd * x  */
    double *mag;  /* [m][n] Σ |wd * xd| */
    double *magx; /* [m][n] Σ |wd * x| */
} problem;

static void problem_free(problem *p) {
    free(p->w), free(p->wd), free(p->x), free(p->xd), free(p->ref), free(p->refx), free(p->mag);
    free(p->magx);
    memset(p, 0, sizeof(*p));
}

/* random_bits: fill quant blocks with random bytes (every bit pattern, e.g. Q8_0's -128) and
 * random scales instead of quantizing random floats. */
static int problem_make(problem *p, const tinfo *t, int64_t n, int64_t k, int64_t m,
                        int random_bits) {
    memset(p, 0, sizeof(*p));
    p->t = t, p->n = n, p->k = k, p->m = m;
    p->row_bytes = (size_t)(k / t->block * t->block_size);
    p->w = malloc((size_t)n * p->row_bytes);
    p->wd = malloc(sizeof(double) * (size_t)(n * k));
    p->x = malloc(sizeof(float) * (size_t)(m * k));
    p->xd = malloc(sizeof(double) * (size_t)(m * k));
    p->ref = malloc(sizeof(double) * (size_t)(m * n));
    p->refx = malloc(sizeof(double) * (size_t)(m * n));
    p->mag = malloc(sizeof(double) * (size_t)(m * n));
    p->magx = malloc(sizeof(double) * (size_t)(m * n));
    if (!p->w || !p->wd || !p->x || !p->xd || !p->ref || !p->refx || !p->mag || !p->magx) return -1;
    float *row = malloc(sizeof(float) * (size_t)k);
    if (!row) return -1;
    for (int64_t j = 0; j < n; j++) {
        float bias =
            t->type == PGD_TYPE_Q4_1 || t->type == PGD_TYPE_Q5_1 ? rng_f(-0.5f, 0.5f) : 0.0f;
        for (int64_t e = 0; e < k; e++) row[e] = rng_f(-1, 1) + bias;
        uint8_t *wr = p->w + (size_t)j * p->row_bytes;
        for (int64_t b = 0; b < k / t->block; b++) {
            uint8_t *blk = wr + b * t->block_size;
            ref_quant_block(t->type, row + b * t->block, blk);
            if (random_bits && t->block == 32) {
                for (int i = 0; i < t->block_size; i++) blk[i] = (uint8_t)rng_u64();
                put16(blk, ref_to_f16(rng_f(-0.02f, 0.02f)));
                if (t->type == PGD_TYPE_Q4_1 || t->type == PGD_TYPE_Q5_1)
                    put16(blk + 2, ref_to_f16(rng_f(-0.3f, 0.3f)));
            }
            ref_dequant_block(t->type, blk, p->wd + j * k + b * t->block);
        }
    }
    free(row);
    for (int64_t i = 0; i < m * k; i += 32) { /* blocks of varied magnitude */
        float scale = rng_f(0.25f, 4.0f);
        for (int64_t e = i; e < i + 32 && e < m * k; e++) p->x[e] = rng_f(-1, 1) * scale;
    }
    if (t->block == 32) {
        int8_t *q = malloc((size_t)k);
        float *d = malloc(sizeof(float) * (size_t)(k / 32));
        if (!q || !d) return free(q), free(d), -1;
        for (int64_t i = 0; i < m; i++) {
            ref_quant_act(p->x + i * k, k, q, d);
            for (int64_t e = 0; e < k; e++) p->xd[i * k + e] = (double)d[e / 32] * q[e];
        }
        free(q), free(d);
    } else {
        for (int64_t i = 0; i < m * k; i++) p->xd[i] = p->x[i];
    }
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double s = 0, sx = 0, a = 0, ax = 0;
            for (int64_t e = 0; e < k; e++) {
                s += p->wd[j * k + e] * p->xd[i * k + e];
                sx += p->wd[j * k + e] * p->x[i * k + e];
                a += fabs(p->wd[j * k + e] * p->xd[i * k + e]);
                ax += fabs(p->wd[j * k + e] * p->x[i * k + e]);
            }
            p->ref[i * n + j] = s, p->refx[i * n + j] = sx, p->mag[i * n + j] = a;
            p->magx[i * n + j] = ax;
        }
    }
    return 0;
}

static const pgd_cpu_isa ISAS[] = {PGD_ISA_SCALAR, PGD_ISA_AVX2, PGD_ISA_AVX512};

/* y[m][n] = x[m][k] · W^T for p's weights in `mode` (scratch allocated inside). */
static int mm(pgd_threadpool *pool, pgd_cpu_isa isa, pgd_act_mode mode, const problem *p,
              const float *x, int64_t m, float *y) {
    return pgd_matmul_isa_mode(pool, isa, mode, p->t->type, p->w, p->n, p->k, x, m, y, NULL, 0);
}

/* PGD_ACT_F32 mode: y [m][n] against Σ wd * x in double (the dequantized weights times the
 * f32 activations). Per element |err| <= rel * Σ |wd * x| with rel = 1e-5 (the f32 sums round
 * about k/32 + 6 times per lane, (k/32 + 7) * 2^-24 < 1e-5 for k < 5000), and the relative L2
 * error <= 1e-5. quiet: count failures without printing. Returns the number of failures. */
static int check_result_f32(const problem *p, const float *y, const char *what, int quiet) {
    int bad = 0;
    double e2 = 0, r2 = 0;
    const double rel = fmax(1e-5, (double)(p->k / 32 + 7) * 0x1p-24);
    for (int64_t i = 0; i < p->m * p->n; i++) {
        double err = fabs(y[i] - p->refx[i]);
        if (!(err <= rel * p->magx[i] + 1e-30)) {
            if (!quiet && bad < 3)
                fprintf(stderr,
                        "  f32 %s %s n=%lld k=%lld m=%lld: y[%lld] = %.9g, ref %.9g (|err| %g, "
                        "mag %g)\n",
                        what, p->t->name, (long long)p->n, (long long)p->k, (long long)p->m,
                        (long long)i, y[i], p->refx[i], err, p->magx[i]);
            bad++;
        }
        e2 += err * err, r2 += p->refx[i] * p->refx[i];
    }
    if (!(sqrt(e2) <= 1e-5 * sqrt(r2) + 1e-30)) {
        if (!quiet)
            fprintf(stderr, "  f32 %s %s: relative L2 error %g vs the f32-activation reference\n",
                    what, p->t->name, sqrt(e2 / r2));
        bad++;
    }
    return bad;
}

/* PGD_ACT_Q8 mode: y [m][n] against p's references; returns the number of failures. */
static int check_result(const problem *p, const float *y, const char *what) {
    int bad = 0;
    double e2 = 0, r2 = 0, ex2 = 0, rx2 = 0;
    /* float accumulation bound: a handful of roundings per lane over k/8 (or nb/8) steps */
    double steps = p->t->block == 32 ? (double)(p->k / 32) / 8 + 6 : (double)p->k / 8 + 4;
    double rel = p->t->block == 32 ? 1e-5 : fmax(1e-5, 2 * steps * 0x1p-24);
    for (int64_t i = 0; i < p->m * p->n; i++) {
        double err = fabs(y[i] - p->ref[i]);
        if (!(err <= rel * p->mag[i] + 1e-30)) {
            if (bad++ < 3)
                fprintf(stderr,
                        "  %s %s n=%lld k=%lld m=%lld: y[%lld] = %.9g, ref %.9g (|err| %g, "
                        "mag %g)\n",
                        what, p->t->name, (long long)p->n, (long long)p->k, (long long)p->m,
                        (long long)i, y[i], p->ref[i], err, p->mag[i]);
        }
        e2 += err * err, r2 += p->ref[i] * p->ref[i];
        ex2 += (y[i] - p->refx[i]) * (y[i] - p->refx[i]), rx2 += p->refx[i] * p->refx[i];
    }
    if (!(sqrt(e2) <= 1e-5 * sqrt(r2) + 1e-30)) {
        fprintf(stderr, "  %s %s: relative L2 error %g vs the quantized-activation reference\n",
                what, p->t->name, sqrt(e2 / r2));
        bad++;
    }
    /* looser: against the product with the unquantized activations (over enough outputs for
     * the L2 ratio to be meaningful: one small dot product may cancel by chance) */
    if (p->m * p->n >= 16 && !(sqrt(ex2) <= 1e-2 * sqrt(rx2) + 1e-30)) {
        fprintf(stderr,
                "  %s %s n=%lld k=%lld m=%lld: relative L2 error %g vs the "
                "f32-activation reference\n",
                what, p->t->name, (long long)p->n, (long long)p->k, (long long)p->m,
                sqrt(ex2 / rx2));
        bad++;
    }
    return bad;
}

/* ---- tests ------------------------------------------------------------------------------- */

static pgd_threadpool *pool2, *pool3;

static void test_isa_probe(void) {
    CHECK(pgd_cpu_isa_supported(PGD_ISA_SCALAR));
    CHECK(pgd_cpu_isa_supported(pgd_cpu_isa_best()));
    CHECK(pgd_cpu_isa_best() != PGD_ISA_AUTO);
    CHECK_EQ_STR(pgd_cpu_isa_name(PGD_ISA_AVX2), "avx2");
    CHECK_EQ_STR(pgd_act_mode_name(PGD_ACT_F32), "f32");
    CHECK_EQ_STR(pgd_act_mode_name(PGD_ACT_Q8), "q8");
    fprintf(stderr, "  best isa: %s (avx2 %s, avx512 %s)\n", pgd_cpu_isa_name(pgd_cpu_isa_best()),
            pgd_cpu_isa_supported(PGD_ISA_AVX2) ? "yes" : "no",
            pgd_cpu_isa_supported(PGD_ISA_AVX512) ? "yes" : "no");
    CHECK(pgd_matmul_supported(PGD_TYPE_Q4_1));
    CHECK(!pgd_matmul_supported(PGD_TYPE_Q6_K));
}
/* The Q8 activation quantizer against the definition, on every path, with edge blocks. */
static void test_act_quant(void) {
    const int64_t m = 3, k = 96 * 4;
    float x[3 * 384];
    for (int64_t i = 0; i < m * k; i++) x[i] = rng_f(-3, 3);
    for (int i = 0; i < 32; i++) x[32 + i] = 0.0f;                     /* all-zero block */
    for (int i = 0; i < 32; i++) x[64 + i] = (float)(i - 16) + 0.5f;   /* amax 15.5 */
    for (int i = 0; i < 31; i++) x[96 + i] = (float)(i - 15) / 32;     /* x * id: halves */
    x[96 + 31] = 127.0f / 16;                                          /* d = 1/16, id = 16 */
    for (int i = 0; i < 32; i++) x[128 + i] = i == 7 ? -1e-30f : 0.0f; /* subnormal-ish */
    int8_t q[384];
    float d[12];
    size_t bytes = pgd_q8_act_bytes(m, k);
    REQUIRE(bytes > 0);
    void *buf = malloc(bytes + 3);
    REQUIRE(buf);
    for (size_t ii = 0; ii < PGD_ARRAY_LEN(ISAS); ii++) {
        if (!pgd_cpu_isa_supported(ISAS[ii])) continue;
        pgd_q8_act a;
        memset(buf, 0x55, bytes + 3);
        CHECK_EQ_INT(pgd_q8_act_init(&a, (char *)buf + 3, bytes, m, k), 0); /* misaligned */
        CHECK_EQ_INT(a.nb_pad, 16);
        CHECK_EQ_INT(pgd_q8_act_quantize(ii == 0 ? NULL : pool2, ISAS[ii], x, &a), 0);
        int bad = 0;
        for (int64_t r = 0; r < m; r++) {
            ref_quant_act(x + r * k, k, q, d);
            const int8_t *qs = a.qs + r * a.nb_pad * 32, *qt = a.qt + r * a.nb_pad * 32;
            if (memcmp(q, qs, (size_t)k)) bad++;
            for (int64_t e = k; e < a.nb_pad * 32; e++) bad += qs[e] != 0;
            /* the transposed copy: dword c of block l of a group at dword l of vector c */
            for (int64_t e = 0; e < a.nb_pad * 32; e++) {
                int64_t g = e / 256, l = e % 256 / 32, c = e % 32 / 4, j = e % 4;
                bad += qt[256 * g + 32 * c + 4 * l + j] != qs[e];
            }
            for (int64_t b = 0; b < a.nb_pad; b++) {
                float db = b < k / 32 ? d[b] : 0.0f;
                int32_t sum = 0;
                for (int i = 0; b < k / 32 && i < 32; i++) sum += q[b * 32 + i];
                if (memcmp(&db, &a.d[r * a.nb_pad + b], 4) || a.sum[r * a.nb_pad + b] != sum) bad++;
                float s = db * (float)sum;
                if (memcmp(&s, &a.s[r * a.nb_pad + b], 4)) bad++;
            }
        }
        if (bad) fprintf(stderr, "  isa %s: %d mismatches\n", pgd_cpu_isa_name(ISAS[ii]), bad);
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(a.qs[64 + 31], 127);
        CHECK_EQ_INT(a.qs[96 + 0], -8); /* -7.5: ties to even */
        CHECK_EQ_INT(a.qs[96 + 2], -6); /* -6.5 */
        CHECK_EQ_INT(a.qs[96 + 1], -7);
        CHECK_EQ_INT(a.qs[96 + 31], 127);
        CHECK_EQ_INT(a.qs[32 + 5], 0);
    }
    pgd_q8_act a;
    CHECK_EQ_INT(pgd_q8_act_init(&a, buf, bytes - 1, m, k), PGD_ERANGE);
    CHECK_EQ_INT(pgd_q8_act_init(&a, buf, bytes, m, 33), PGD_EINVAL);
    CHECK_EQ_INT(pgd_q8_act_init(&a, buf, bytes, 0, k), PGD_EINVAL);
    free(buf);
}

/* PGD_ACT_Q8 accuracy against the references: every type, k and m (the small-batch and the
 * batched kernels), quantized-from-floats and random-bit weights, every ISA path (bitwise
 * equal to the scalar path). */
static void test_q8_accuracy(void) {
    static const int64_t ks[] = {32, 64, 576, 1536};
    static const int64_t ms[] = {1, 2, 5, 17};
    static const int64_t ns[] = {1, 7, 33, 70};
    int cases = 0;
    for (size_t ti = 0; ti < PGD_ARRAY_LEN(TYPES); ti++) {
        for (size_t ki = 0; ki < PGD_ARRAY_LEN(ks); ki++) {
            for (size_t mi = 0; mi < 2 * PGD_ARRAY_LEN(ms); mi++) {
                const int rb = (int)(mi % 2); /* random block bits */
                if (rb && TYPES[ti].block == 1) continue;
                int64_t k = ks[ki], m = ms[mi / 2], n = ns[(ki + 2 * ti + mi) % 4];
                problem p;
                REQUIRE(problem_make(&p, &TYPES[ti], n, k, m, rb) == 0);
                float *y0 = malloc(sizeof(float) * (size_t)(m * n));
                float *y1 = malloc(sizeof(float) * (size_t)(m * n));
                REQUIRE(y0 && y1);
                CHECK_EQ_INT(mm(NULL, PGD_ISA_SCALAR, PGD_ACT_Q8, &p, p.x, m, y0), 0);
                CHECK_EQ_INT(check_result(&p, y0, "scalar"), 0);
                for (size_t ii = 1; ii < PGD_ARRAY_LEN(ISAS); ii++) {
                    if (!pgd_cpu_isa_supported(ISAS[ii])) continue;
                    memset(y1, 0xff, sizeof(float) * (size_t)(m * n));
                    CHECK_EQ_INT(mm(pool2, ISAS[ii], PGD_ACT_Q8, &p, p.x, m, y1), 0);
                    if (memcmp(y0, y1, sizeof(float) * (size_t)(m * n))) {
                        fprintf(stderr, "  %s %s n=%lld k=%lld m=%lld: differs from scalar\n",
                                pgd_cpu_isa_name(ISAS[ii]), p.t->name, (long long)n, (long long)k,
                                (long long)m);
                        CHECK_EQ_INT(check_result(&p, y1, pgd_cpu_isa_name(ISAS[ii])), 0);
                        CHECK(0);
                    }
                }
                cases++;
                free(y0), free(y1);
                problem_free(&p);
            }
        }
    }
    CHECK(cases >= 150);
}

/* F32/F16 with k not a multiple of 8 (the scalar tail inside the SIMD kernels). */
static void test_float_tails(void) {
    static const int64_t ks[] = {1, 7, 9, 37, 200};
    for (size_t ti = 0; ti < 2; ti++) {
        for (size_t ki = 0; ki < PGD_ARRAY_LEN(ks); ki++) {
            int64_t k = ks[ki], n = 9, m = (int64_t)ki + 1;
            problem p;
            REQUIRE(problem_make(&p, &TYPES[ti], n, k, m, 0) == 0);
            float y0[9 * 5], y1[9 * 5];
            CHECK_EQ_INT(
                pgd_matmul_isa(NULL, PGD_ISA_SCALAR, p.t->type, p.w, n, k, p.x, m, y0, NULL, 0), 0);
            CHECK_EQ_INT(check_result(&p, y0, "scalar"), 0);
            for (size_t ii = 1; ii < PGD_ARRAY_LEN(ISAS); ii++) {
                if (!pgd_cpu_isa_supported(ISAS[ii])) continue;
                CHECK_EQ_INT(
                    pgd_matmul_isa(pool3, ISAS[ii], p.t->type, p.w, n, k, p.x, m, y1, NULL, 0), 0);
                CHECK(memcmp(y0, y1, sizeof(float) * (size_t)(m * n)) == 0);
            }
            problem_free(&p);
        }
    }
}

/* PGD_ACT_F32 accuracy: every quantized type against Σ wd * x in double at relative error
 * <= 1e-5, k in {32, 64, 576, 1536}, m in {1, 2, 3, 5, 17, 37} (decode and prefill kernels), n
 * not a multiple of the panel, quantized-from-floats and random-bit weights; every ISA path
 * bitwise equal to the scalar one. Then the check itself: the Q8 mode must fail it. */
static void test_f32_accuracy(void) {
    static const int64_t ks[] = {32, 64, 576, 1536};
    static const int64_t ms[] = {1, 2, 3, 5, 17, 37};
    static const int64_t ns[] = {1, 7, 33, 70};
    int cases = 0;
    for (size_t ti = 0; ti < PGD_ARRAY_LEN(TYPES); ti++) {
        if (TYPES[ti].block == 1) continue; /* F32/F16 weights: no activation mode */
        for (size_t ki = 0; ki < PGD_ARRAY_LEN(ks); ki++) {
            for (size_t mi = 0; mi < 2 * PGD_ARRAY_LEN(ms); mi++) {
                const int rb = (int)(mi % 2);
                int64_t k = ks[ki], m = ms[mi / 2], n = ns[(ki + 2 * ti + mi / 2) % 4];
                problem p;
                REQUIRE(problem_make(&p, &TYPES[ti], n, k, m, rb) == 0);
                float *y0 = malloc(sizeof(float) * (size_t)(m * n));
                float *y1 = malloc(sizeof(float) * (size_t)(m * n));
                REQUIRE(y0 && y1);
                CHECK_EQ_INT(mm(NULL, PGD_ISA_SCALAR, PGD_ACT_F32, &p, p.x, m, y0), 0);
                CHECK_EQ_INT(check_result_f32(&p, y0, "scalar", 0), 0);
                for (size_t ii = 1; ii < PGD_ARRAY_LEN(ISAS); ii++) {
                    if (!pgd_cpu_isa_supported(ISAS[ii])) continue;
                    memset(y1, 0xff, sizeof(float) * (size_t)(m * n));
                    CHECK_EQ_INT(mm(ii == 1 ? pool3 : pool2, ISAS[ii], PGD_ACT_F32, &p, p.x, m, y1),
                                 0);
                    if (memcmp(y0, y1, sizeof(float) * (size_t)(m * n))) {
                        fprintf(stderr, "  f32 %s %s n=%lld k=%lld m=%lld: differs from scalar\n",
                                pgd_cpu_isa_name(ISAS[ii]), p.t->name, (long long)n, (long long)k,
                                (long long)m);
                        CHECK_EQ_INT(check_result_f32(&p, y1, pgd_cpu_isa_name(ISAS[ii]), 0), 0);
                        CHECK(0);
                    }
                }
                cases++;
                free(y0), free(y1);
                problem_free(&p);
            }
        }
    }
    CHECK(cases == 5 * 4 * 12);
    /* the check can fail: the Q8-activation results of the same kind of problem miss it */
    for (size_t ti = 2; ti < PGD_ARRAY_LEN(TYPES); ti++) {
        problem p;
        REQUIRE(problem_make(&p, &TYPES[ti], 33, 576, 5, 0) == 0);
        float y[33 * 5];
        CHECK_EQ_INT(mm(pool2, PGD_ISA_AUTO, PGD_ACT_Q8, &p, p.x, 5, y), 0);
        CHECK(check_result_f32(&p, y, "q8", 1) > 0);
        CHECK_EQ_INT(mm(pool2, PGD_ISA_AUTO, PGD_ACT_F32, &p, p.x, 5, y), 0);
        CHECK_EQ_INT(check_result_f32(&p, y, "auto", 0), 0);
        problem_free(&p);
    }
}

/* Row i gives the same bits alone (m = 1), at any position of a batch of m, in batches of 2,
 * 3, 5 and 17 at various offsets, and with 1, 2 or 3 threads; per ISA path, and every path the
 * same bits as the scalar one. F32 mode: k = 4672 runs through 5 chunks of PGD__FA_KC (1024)
 * and k = 1056 through a chunk of one block; m = 100 through three token tiles. Q8 mode:
 * k = 4672 takes the batched kernel through more than one chunk of prepared groups. */
static void determinism_case(pgd_act_mode mode, int64_t n, int64_t k, int64_t m) {
    static const int64_t bms[] = {2, 3, 5, 17};
    pgd_threadpool *pool1 = NULL;
    REQUIRE(pgd_threadpool_create(1, &pool1) == 0);
    pgd_threadpool *pools[] = {NULL, pool1, pool2, pool3};
    float *xr = malloc(sizeof(float) * (size_t)(m * k)); /* rows rotated by 11 */
    float *ys = malloc(sizeof(float) * (size_t)(m * n)); /* the scalar path's */
    float *yb = malloc(sizeof(float) * (size_t)(m * n)),
          *yr = malloc(sizeof(float) * (size_t)(m * n));
    float *y1 = malloc(sizeof(float) * (size_t)n), *y5 = malloc(sizeof(float) * (size_t)(17 * n));
    REQUIRE(xr && ys && yb && yr && y1 && y5);
    for (size_t ti = 0; ti < PGD_ARRAY_LEN(TYPES); ti++) {
        if (mode == PGD_ACT_F32 && TYPES[ti].block == 1) continue; /* same path as Q8 mode */
        problem p;
        REQUIRE(problem_make(&p, &TYPES[ti], n, k, m, 0) == 0);
        for (int64_t i = 0; i < m; i++)
            memcpy(xr + ((i + 11) % m) * k, p.x + i * k, sizeof(float) * (size_t)k);
        for (size_t ii = 0; ii < PGD_ARRAY_LEN(ISAS); ii++) {
            pgd_cpu_isa isa = ISAS[ii];
            if (!pgd_cpu_isa_supported(isa)) continue;
            int bad = 0;
            REQUIRE(mm(NULL, isa, mode, &p, p.x, m, yb) == 0);
            bad += mode == PGD_ACT_F32 ? check_result_f32(&p, yb, pgd_cpu_isa_name(isa), 0)
                                       : check_result(&p, yb, pgd_cpu_isa_name(isa));
            if (ii == 0) memcpy(ys, yb, sizeof(float) * (size_t)(m * n));
            if (memcmp(ys, yb, sizeof(float) * (size_t)(m * n))) bad++;
            for (size_t pi = 0; pi < PGD_ARRAY_LEN(pools); pi++) {
                CHECK_EQ_INT(mm(pools[pi], isa, mode, &p, xr, m, yr), 0);
                for (int64_t i = 0; i < m; i++)
                    if (memcmp(yb + i * n, yr + ((i + 11) % m) * n, sizeof(float) * (size_t)n))
                        bad++;
                for (int64_t i = 0; i < m; i += 3) {
                    CHECK_EQ_INT(mm(pools[pi], isa, mode, &p, p.x + i * k, 1, y1), 0);
                    if (memcmp(yb + i * n, y1, sizeof(float) * (size_t)n)) bad++;
                }
                /* batches of 2, 3, 5 and 17 at various offsets: other kernels and tile splits */
                for (size_t bi = 0; bi < PGD_ARRAY_LEN(bms); bi++) {
                    const int64_t bm = bms[bi], at = (7 * bm + (int64_t)pi) % (m - bm + 1);
                    CHECK_EQ_INT(mm(pools[pi], isa, mode, &p, p.x + at * k, bm, y5), 0);
                    if (memcmp(yb + at * n, y5, sizeof(float) * (size_t)(bm * n))) bad++;
                }
            }
            if (bad)
                fprintf(stderr, "  %s %s %s n=%lld k=%lld m=%lld: %d determinism mismatches\n",
                        pgd_act_mode_name(mode), p.t->name, pgd_cpu_isa_name(isa), (long long)n,
                        (long long)k, (long long)m, bad);
            CHECK_EQ_INT(bad, 0);
        }
        problem_free(&p);
    }
    free(xr), free(ys), free(yb), free(yr), free(y1), free(y5);
    pgd_threadpool_destroy(pool1);
}

static void test_determinism(void) {
    determinism_case(PGD_ACT_Q8, 77, 576, 37);
    determinism_case(PGD_ACT_Q8, 9, 4672, 37);
    determinism_case(PGD_ACT_F32, 77, 576, 37);
    determinism_case(PGD_ACT_F32, 9, 4672, 37);
    determinism_case(PGD_ACT_F32, 30, 1056, 100);
}

/* pgd_matmul_group: the parts of one run (mixed quantized types, then with an F16 part that
 * takes the one-call-per-part route, and in Q8 mode) give exactly the bits of separate calls,
 * (and part 0 its reference's accuracy); bad part counts are refused. */
static void test_group(void) {
    const int64_t k = 576, m = 7;
    static const int64_t ns[] = {200, 72, 64, 130};
    static const size_t types[][4] = {{2, 4, 3, 5}, {6, 2, 1, 4}, {4, 4, 4, 4}};
    for (size_t tc = 0; tc < PGD_ARRAY_LEN(types); tc++) {
        for (int mode = PGD_ACT_F32; mode <= PGD_ACT_Q8; mode++) {
            problem p[4];
            float *yg[4], *ys[4];
            pgd_matmul_part parts[4];
            rng_state = 0x51ed270b27a1c5ULL + tc;
            for (int i = 0; i < 4; i++) {
                REQUIRE(problem_make(&p[i], &TYPES[types[tc][i]], ns[i], k, m, 0) == 0);
                if (i > 0) memcpy(p[i].x, p[0].x, sizeof(float) * (size_t)(m * k));
                yg[i] = malloc(sizeof(float) * (size_t)(m * ns[i]));
                ys[i] = malloc(sizeof(float) * (size_t)(m * ns[i]));
                REQUIRE(yg[i] && ys[i]);
                parts[i] = (pgd_matmul_part){p[i].t->type, p[i].w, p[i].n, yg[i], NULL};
            }
            for (int n_parts = 1; n_parts <= 4; n_parts++) {
                for (int i = 0; i < n_parts; i++) memset(yg[i], 0xff, sizeof(float) * m * ns[i]);
                CHECK_EQ_INT(pgd_matmul_group(pool3, (pgd_act_mode)mode, parts, n_parts, k, p[0].x,
                                              m, NULL, 0),
                             0);
                for (int i = 0; i < n_parts; i++) {
                    REQUIRE(pgd_matmul_mode(pool2, (pgd_act_mode)mode, p[i].t->type, p[i].w, p[i].n,
                                            k, p[0].x, m, ys[i], NULL, 0) == 0);
                    CHECK(memcmp(yg[i], ys[i], sizeof(float) * (size_t)(m * ns[i])) == 0);
                    /* part 0 keeps the x its reference was computed with */
                    if (i == 0 && mode == PGD_ACT_F32 && p[i].t->block == 32)
                        CHECK_EQ_INT(check_result_f32(&p[i], yg[i], "group", 0), 0);
                }
            }
            CHECK_EQ_INT(
                pgd_matmul_group(pool3, (pgd_act_mode)mode, parts, 0, k, p[0].x, m, NULL, 0),
                PGD_EINVAL);
            CHECK_EQ_INT(
                pgd_matmul_group(pool3, (pgd_act_mode)mode, parts, 5, k, p[0].x, m, NULL, 0),
                PGD_EINVAL);
            for (int i = 0; i < 4; i++) problem_free(&p[i]), free(yg[i]), free(ys[i]);
        }
    }
}

/* Packed weights (pgd_q8_pack, PGD_ACT_Q8): the same bits as the scalar path on the original
 * weights for every packable type, random bit patterns too, rows not a multiple of 16, last
 * groups of 1 .. 5 and 7 blocks (k = 32 .. 4672), 1 .. 37 tokens and 1 .. 3 threads, alone and
 * in a group beside an unpacked part; sizes and errors. Where
 * the CPU has no packed kernel, pgd_q8_pack_bytes is 0. */
static void test_packed(void) {
    static const int64_t shapes[][2] = {{1, 32},   {16, 64},  {3, 96},   {16, 128},  {24, 224},
                                        {33, 288}, {40, 416}, {77, 576}, {20, 1056}, {9, 4672}};
    static const int64_t ms[] = {1, 2, 3, 4, 5, 17, 37};
    pgd_threadpool *pool1 = NULL;
    REQUIRE(pgd_threadpool_create(1, &pool1) == 0);
    pgd_threadpool *pools[] = {NULL, pool1, pool2, pool3};
    const int have = pgd_cpu_isa_supported(PGD_ISA_AVX512);
    int cases = 0;
    for (size_t ti = 2; ti <= 4; ti++) { /* Q8_0, Q4_0, Q4_1 */
        for (size_t si = 0; si < PGD_ARRAY_LEN(shapes); si++) {
            const int64_t n = shapes[si][0], k = shapes[si][1], m = 37;
            const size_t need = pgd_q8_pack_bytes(PGD_ISA_AUTO, TYPES[ti].type, n, k);
            CHECK_EQ_INT(pgd_q8_pack_bytes(PGD_ISA_SCALAR, TYPES[ti].type, n, k), 0);
            CHECK_EQ_INT(pgd_q8_pack_bytes(PGD_ISA_AVX2, TYPES[ti].type, n, k), 0);
            if (!have) {
                CHECK_EQ_INT(need, 0);
                continue;
            }
            /* rows padded to 16; per row block the original's bytes, but the scales (and
             * mins) of a last partial group padded to 16 rows x 8 blocks */
            const int64_t nb = k / 32, tail = nb % 8;
            const int64_t qbytes = TYPES[ti].type == PGD_TYPE_Q8_0 ? 32 : 16;
            const int64_t scales = TYPES[ti].type == PGD_TYPE_Q4_1 ? 2 : 1;
            const size_t rb = (size_t)(16 * (nb - tail) * TYPES[ti].block_size +
                                       (tail ? 16 * tail * qbytes + 256 * scales : 0));
            CHECK(need == (size_t)((n + 15) / 16) * rb);
            for (int random_bits = 0; random_bits < 2; random_bits++) {
                problem p;
                REQUIRE(problem_make(&p, &TYPES[ti], n, k, m, random_bits) == 0);
                void *pk = aligned_alloc(64, (need + 63) / 64 * 64);
                float *ys = malloc(sizeof(float) * (size_t)(m * n));
                float *yp = malloc(sizeof(float) * (size_t)(m * n));
                REQUIRE(pk && ys && yp);
                CHECK_EQ_INT(pgd_q8_pack(PGD_ISA_AUTO, p.t->type, p.w, n, k, pk, need), 0);
                int bad = 0;
                for (size_t mi = 0; mi < PGD_ARRAY_LEN(ms); mi++) {
                    const int64_t mm_ = ms[mi], at = (5 * mm_) % (m - mm_ + 1);
                    REQUIRE(mm(NULL, PGD_ISA_SCALAR, PGD_ACT_Q8, &p, p.x + at * k, mm_, ys) == 0);
                    const size_t bytes = sizeof(float) * (size_t)(mm_ * n);
                    for (size_t pi = 0; pi < PGD_ARRAY_LEN(pools); pi++) {
                        memset(yp, 0xff, bytes);
                        const pgd_matmul_part part = {p.t->type, p.w, n, yp, pk};
                        CHECK_EQ_INT(pgd_matmul_group(pools[pi], PGD_ACT_Q8, &part, 1, k,
                                                      p.x + at * k, mm_, NULL, 0),
                                     0);
                        if (memcmp(ys, yp, bytes)) bad++;
                    }
                    cases++;
                }
                if (bad)
                    fprintf(stderr, "  packed %s n=%lld k=%lld%s: %d mismatches vs scalar\n",
                            p.t->name, (long long)n, (long long)k, random_bits ? " (bits)" : "",
                            bad);
                CHECK_EQ_INT(bad, 0);
                /* errors: too small, misaligned */
                CHECK_EQ_INT(pgd_q8_pack(PGD_ISA_AUTO, p.t->type, p.w, n, k, pk, need - 1),
                             PGD_EINVAL);
                CHECK_EQ_INT(pgd_q8_pack(PGD_ISA_AUTO, p.t->type, p.w, n, k, (char *)pk + 32, need),
                             PGD_EINVAL);
                free(pk), free(ys), free(yp);
                problem_free(&p);
            }
        }
    }
    CHECK(!have || cases == 3 * 10 * 2 * 7);
    /* a group of a packed part beside an unpacked one (Q5_1: no packed layout), sharing x */
    if (have) {
        const int64_t k = 576, m = 9;
        problem a, b;
        REQUIRE(problem_make(&a, &TYPES[4], 50, k, m, 0) == 0);
        REQUIRE(problem_make(&b, &TYPES[6], 21, k, m, 0) == 0);
        const size_t need = pgd_q8_pack_bytes(PGD_ISA_AUTO, a.t->type, a.n, k);
        void *pk = aligned_alloc(64, (need + 63) / 64 * 64);
        float ya[50 * 9], yb[21 * 9], ra[50 * 9], rb[21 * 9];
        REQUIRE(pk && pgd_q8_pack(PGD_ISA_AUTO, a.t->type, a.w, a.n, k, pk, need) == 0);
        const pgd_matmul_part parts[2] = {{a.t->type, a.w, a.n, ya, pk},
                                          {b.t->type, b.w, b.n, yb, NULL}};
        CHECK_EQ_INT(pgd_matmul_group(pool3, PGD_ACT_Q8, parts, 2, k, a.x, m, NULL, 0), 0);
        REQUIRE(mm(NULL, PGD_ISA_SCALAR, PGD_ACT_Q8, &a, a.x, m, ra) == 0);
        REQUIRE(mm(NULL, PGD_ISA_SCALAR, PGD_ACT_Q8, &b, a.x, m, rb) == 0);
        CHECK(memcmp(ya, ra, sizeof ya) == 0);
        CHECK(memcmp(yb, rb, sizeof yb) == 0);
        free(pk);
        problem_free(&a), problem_free(&b);
    }
    /* types without a packed layout */
    CHECK_EQ_INT(pgd_q8_pack_bytes(PGD_ISA_AUTO, PGD_TYPE_Q5_0, 16, 64), 0);
    CHECK_EQ_INT(pgd_q8_pack_bytes(PGD_ISA_AUTO, PGD_TYPE_F16, 16, 64), 0);
    CHECK_EQ_INT(pgd_q8_pack_bytes(PGD_ISA_AUTO, PGD_TYPE_Q4_1, 16, 48), 0);
    _Alignas(64) uint8_t buf[64];
    CHECK_EQ_INT(pgd_q8_pack(PGD_ISA_AUTO, PGD_TYPE_Q5_1, buf, 1, 32, buf, sizeof buf),
                 PGD_EUNSUPPORTED);
    pgd_threadpool_destroy(pool1);
}

/* Modes and their scratch; pre-quantized activations shared by several weights; caller
 * scratch; bad arguments. */
static void test_api(void) {
    const int64_t n = 40, k = 256, m = 6;
    problem p;
    REQUIRE(problem_make(&p, &TYPES[4] /* Q4_1 */, n, k, m, 0) == 0);
    float y0[40 * 6], y1[40 * 6];
    size_t sb = pgd_matmul_scratch_bytes_mode(PGD_ACT_Q8, PGD_TYPE_Q4_1, m, k);
    CHECK(sb == pgd_q8_act_bytes(m, k));
    CHECK_EQ_INT(pgd_matmul_scratch_bytes_mode(PGD_ACT_F32, PGD_TYPE_Q4_1, m, k), 0);
    CHECK_EQ_INT(pgd_matmul_scratch_bytes(PGD_TYPE_Q4_1, m, k), 0); /* the default: F32 */
    CHECK_EQ_INT(pgd_matmul_scratch_bytes_mode(PGD_ACT_Q8, PGD_TYPE_F16, m, k), 0);
    CHECK(pgd_matmul_scratch_bytes(PGD_TYPE_Q6_K, m, k) == SIZE_MAX);
    CHECK(pgd_matmul_scratch_bytes_mode((pgd_act_mode)5, PGD_TYPE_Q4_1, m, k) == SIZE_MAX);
    void *scratch = malloc(sb);
    REQUIRE(scratch);
    CHECK_EQ_INT(
        pgd_matmul_mode(pool2, PGD_ACT_Q8, PGD_TYPE_Q4_1, p.w, n, k, p.x, m, y0, scratch, sb), 0);
    CHECK_EQ_INT(check_result(&p, y0, "auto"), 0);
    pgd_q8_act a;
    CHECK_EQ_INT(pgd_q8_act_init(&a, scratch, sb, m, k), 0);
    CHECK_EQ_INT(pgd_q8_act_quantize(pool2, PGD_ISA_AUTO, p.x, &a), 0);
    CHECK_EQ_INT(pgd_matmul_q8(pool3, PGD_ISA_AUTO, PGD_TYPE_Q4_1, p.w, n, &a, y1), 0);
    CHECK(memcmp(y0, y1, sizeof(y0)) == 0);
    /* the default mode is F32 (no scratch needed, any given is ignored) */
    CHECK_EQ_INT(pgd_matmul(pool2, PGD_TYPE_Q4_1, p.w, n, k, p.x, m, y0, NULL, 0), 0);
    CHECK_EQ_INT(check_result_f32(&p, y0, "auto", 0), 0);
    CHECK_EQ_INT(
        pgd_matmul_mode(NULL, PGD_ACT_F32, PGD_TYPE_Q4_1, p.w, n, k, p.x, m, y1, scratch, 1), 0);
    CHECK(memcmp(y0, y1, sizeof(y0)) == 0);
    CHECK_EQ_INT(
        pgd_matmul_isa(pool3, PGD_ISA_SCALAR, PGD_TYPE_Q4_1, p.w, n, k, p.x, m, y1, NULL, 0), 0);
    CHECK(memcmp(y0, y1, sizeof(y0)) == 0);
    /* errors */
    CHECK_EQ_INT(
        pgd_matmul_mode(NULL, PGD_ACT_Q8, PGD_TYPE_Q4_1, p.w, n, k, p.x, m, y0, scratch, sb - 1),
        PGD_ERANGE);
    CHECK_EQ_INT(
        pgd_matmul_mode(NULL, (pgd_act_mode)2, PGD_TYPE_Q4_1, p.w, n, k, p.x, m, y0, NULL, 0),
        PGD_EINVAL);
    for (int mode = 0; mode < 2; mode++) {
        pgd_act_mode md = (pgd_act_mode)mode;
        CHECK_EQ_INT(pgd_matmul_mode(NULL, md, PGD_TYPE_Q4_1, p.w, n, 48, p.x, m, y0, NULL, 0),
                     PGD_EINVAL);
        CHECK_EQ_INT(pgd_matmul_mode(NULL, md, PGD_TYPE_Q6_K, p.w, n, k, p.x, m, y0, NULL, 0),
                     PGD_EUNSUPPORTED);
        CHECK_EQ_INT(pgd_matmul_mode(NULL, md, 9999, p.w, n, k, p.x, m, y0, NULL, 0),
                     PGD_EUNSUPPORTED);
        CHECK_EQ_INT(pgd_matmul_mode(NULL, md, PGD_TYPE_Q4_1, p.w, n, 0, p.x, m, y0, NULL, 0),
                     PGD_EINVAL);
        CHECK_EQ_INT(pgd_matmul_mode(NULL, md, PGD_TYPE_Q4_1, p.w, n, k, p.x, -1, y0, NULL, 0),
                     PGD_EINVAL);
        CHECK_EQ_INT(pgd_matmul_isa_mode(NULL, (pgd_cpu_isa)77, md, PGD_TYPE_Q4_1, p.w, n, k, p.x,
                                         m, y0, NULL, 0),
                     PGD_EINVAL);
        /* empty shapes are no-ops */
        y0[0] = 42.0f;
        CHECK_EQ_INT(pgd_matmul_mode(NULL, md, PGD_TYPE_Q4_1, p.w, 0, k, p.x, m, y0, NULL, 0), 0);
        CHECK_EQ_INT(pgd_matmul_mode(NULL, md, PGD_TYPE_Q4_1, p.w, n, k, p.x, 0, y0, NULL, 0), 0);
        CHECK(y0[0] == 42.0f);
    }
    CHECK_EQ_INT(pgd_matmul_q8(NULL, PGD_ISA_AUTO, PGD_TYPE_F16, p.w, n, &a, y1), PGD_EINVAL);
    free(scratch);
    problem_free(&p);
}

/* ---- benchmark (PGD_BENCH=1) --------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench_one(pgd_threadpool *pool, pgd_cpu_isa isa, pgd_act_mode mode, const tinfo *t,
                      int64_t n, int64_t k, int64_t m) {
    size_t row_bytes = (size_t)(k / t->block * t->block_size);
    uint8_t *w = malloc((size_t)n * row_bytes);
    float *x = malloc(sizeof(float) * (size_t)(m * k)),
          *y = malloc(sizeof(float) * (size_t)(m * n));
    float blockf[32];
    size_t sb = pgd_matmul_scratch_bytes_mode(mode, t->type, m, k);
    void *scratch = sb ? malloc(sb) : NULL, *packed = NULL;
    if (!w || !x || !y || (sb && !scratch)) goto out;
    for (int64_t j = 0; j < n * (k / t->block); j++) {
        for (int i = 0; i < t->block; i++) blockf[i] = rng_f(-1, 1);
        ref_quant_block(t->type, blockf, w + j * t->block_size);
    }
    for (int64_t i = 0; i < m * k; i++) x[i] = rng_f(-1, 1);
    /* Q8 mode on the best ISA: also with the weights packed (pgd_q8_pack), where it can */
    const size_t pb =
        mode == PGD_ACT_Q8 && isa == pgd_cpu_isa_best() ? pgd_q8_pack_bytes(isa, t->type, n, k) : 0;
    packed = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
    if (pb && (!packed || pgd_q8_pack(isa, t->type, w, n, k, packed, pb))) goto out;
    for (int pk = 0; pk < (pb ? 2 : 1); pk++) {
        const pgd_matmul_part part = {t->type, w, n, y, pk ? packed : NULL};
        double best = 1e30, total = 0;
        for (int reps = -1; total < 0.5 || reps < 5; reps++) { /* the first warms up */
            double t0 = now_s();
            if (pk)
                pgd_matmul_group(pool, mode, &part, 1, k, x, m, scratch, sb);
            else
                pgd_matmul_isa_mode(pool, isa, mode, t->type, w, n, k, x, m, y, scratch, sb);
            double dt = now_s() - t0;
            if (reps < 0) continue;
            total += dt;
            if (dt < best) best = dt;
        }
        printf("bench %-6s %-3s %-4s threads=%d k=%-5lld n=%-6lld m=%-3lld  %8.1f us  %7.1f "
               "GFLOP/s  %6.1f GB/s\n",
               pgd_cpu_isa_name(isa),
               t->block == 1 ? "-"
               : pk          ? "q8p"
                             : pgd_act_mode_name(mode),
               t->name, pgd_threadpool_size(pool), (long long)k, (long long)n, (long long)m,
               best * 1e6, 2.0 * (double)(m * n * k) / best * 1e-9,
               (double)((size_t)n * row_bytes) / best * 1e-9);
    }
out:
    free(w), free(x), free(y), free(scratch), free(packed);
}

/* Best of >= 5 runs and >= 0.5 s per point (the machine may be shared). PGD_BENCH_QUICK=1:
 * only Q8_0, only the best ISA. */
static void bench(void) {
    static const int64_t shapes[][2] = {{576, 1536}, {576, 49152}, {1536, 576}};
    static const int64_t ms[] = {1, 16, 64};
    static const size_t tis[] = {2, 3, 4, 1}; /* Q8_0, Q4_0, Q4_1, F16 */
    const char *q = getenv("PGD_BENCH_QUICK");
    const int quick = q && strcmp(q, "1") == 0;
    pgd_threadpool *pools[] = {NULL, pool2};
    pgd_cpu_isa isas[] = {pgd_cpu_isa_best(), PGD_ISA_AVX2, PGD_ISA_SCALAR};
    for (size_t ii = 0; ii < (quick ? 1 : 3); ii++) {
        if (ii > 0 && (isas[ii] == isas[0] || !pgd_cpu_isa_supported(isas[ii]))) continue;
        for (size_t ti = 0; ti < (quick ? 1 : PGD_ARRAY_LEN(tis)); ti++)
            for (size_t si = 0; si < PGD_ARRAY_LEN(shapes); si++)
                for (size_t mi = 0; mi < PGD_ARRAY_LEN(ms); mi++)
                    for (size_t pi = 0; pi < 2; pi++)
                        for (int mode = 0; mode < 2; mode++) {
                            if (TYPES[tis[ti]].block == 1 && mode) continue;
                            if (isas[ii] == PGD_ISA_SCALAR &&
                                (pi == 0 || tis[ti] != 2 || shapes[si][1] > 4096))
                                continue; /* the reference path: one point of comparison */
                            bench_one(pools[pi], isas[ii], (pgd_act_mode)mode, &TYPES[tis[ti]],
                                      shapes[si][1], shapes[si][0], ms[mi]);
                        }
    }
}

int main(void) {
    if (pgd_threadpool_create(2, &pool2) || pgd_threadpool_create(3, &pool3)) {
        fprintf(stderr, "cannot create thread pools\n");
        return 1;
    }
    RUN(test_isa_probe);
    RUN(test_act_quant);
    RUN(test_q8_accuracy);
    RUN(test_f32_accuracy);
    RUN(test_float_tails);
    RUN(test_determinism);
    RUN(test_api);
    RUN(test_group);
    RUN(test_packed);
    const char *b = getenv("PGD_BENCH");
    if (b && strcmp(b, "1") == 0) bench();
    pgd_threadpool_destroy(pool2);
    pgd_threadpool_destroy(pool3);
    return test_summary();
}
