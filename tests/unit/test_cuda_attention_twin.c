/*
 * tests/unit/test_cuda_attention_twin.c — the CUDA attention's CPU twin (pgd_cuda_attention_twin,
 * kernels/cuda/attention_twin.c) against the CPU's own paged attention (kernels/cpu/attention.h)
 * on random mixed batches: the same f16 K/V laid out in both layouts, GQA groups 1, 3, 8 (and 12:
 * two head tiles), head_dim 64 and 128 (and 96, 256), contexts straddling the chunk size
 * (1, 255, 256, 257, 600, 1100), prefill rows and decode rows of several sequences in one call,
 * random non-contiguous block tables.
 *
 * Tolerance: the two sum in different orders (chunked fold vs one softmax; f32 chains vs double
 * lanes), so their f32 results differ by f32 noise; the twin then rounds to bf16. Each twin
 * element must be the bf16 rounding of some value within 1e-5 |cpu| + 2^-23 of the CPU's f32
 * result (K, V in [-1, 1]: 2^-23 is about an f32 ulp of the terms), and at least 99% of the
 * elements must be exactly bf16(cpu) (in practice over 99.9%).
 * The tensor-core kernel's twin (pgd_cuda_attention_tc_twin) against the exact twin, within
 * what its f16 roundings allow (test_tc_twin).
 * Exactness: the shared exponential (attention_math.h) is the CPU's pgd__expf bit for bit;
 * a row's twin output is bit-identical alone and in batches of other sizes and orders.
 * Slab slots past each sequence's context are NaN and unused block-table entries -1, so reading
 * beyond pos[t] shows (NaN out, or a crash).
 *
 * The random batch (attn_batch) is shared with tests/gpu/test_cuda_attention.c, which includes
 * this file with PGD_ATTN_TWIN_TEST_NO_MAIN defined. Seed: PGD_TEST_SEED, or a fixed one here.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/vexp.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_math.h"
#include "testutil.h"

/* ---- random batches ------------------------------------------------------------------------ */

static uint64_t test_rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) { /* xorshift64* */
    test_rng ^= test_rng >> 12, test_rng ^= test_rng << 25, test_rng ^= test_rng >> 27;
    return test_rng * 0x2545F4914F6CDD1Dull;
}

static float frand(void) { /* uniform in [-1, 1) */
    return (float)((double)(rnd() >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* Seeds test_rng from PGD_TEST_SEED or `fallback`, and prints it. */
static void seed_rng(uint64_t fallback) {
    const char *e = getenv("PGD_TEST_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 0) : fallback;
    fprintf(stderr, "seed %llu (PGD_TEST_SEED to repeat)\n", (unsigned long long)seed);
    test_rng = seed ? seed : 1;
}

#define F16_NAN 0x7E00u

typedef struct attn_batch {
    pgd_kv_geom geom;
    uint32_t layer, n_head, n_blocks;
    float scale;
    uint16_t *slab;  /* f16 [n_blocks][n_layer][2][n_kv_head][block_size][head_dim] */
    uint64_t n_slab; /* elements */
    uint32_t S, bt_stride;
    int32_t *bt; /* [S][bt_stride], -1 past each sequence's blocks */
    uint32_t T, q_stride;
    float *q;         /* [T][q_stride] */
    uint32_t *seq_of; /* [T] */
    int32_t *pos;     /* [T] */
} attn_batch;

/* A batch of S sequences: sequence s has context ctx[s] and its last qlen[s] positions are query
 * rows (qlen 1: a decode row). Everything random; slots past a context NaN. */
static void batch_make(attn_batch *b, uint32_t n_kv_head, uint32_t group, uint32_t D, uint32_t bs,
                       uint32_t S, const uint32_t *ctx, const uint32_t *qlen) {
    memset(b, 0, sizeof *b);
    b->geom = (pgd_kv_geom){.n_layer = 2, .n_kv_head = n_kv_head, .block_size = bs, .head_dim = D};
    b->layer = 1;
    b->n_head = n_kv_head * group;
    b->scale = 1.0f / sqrtf((float)D);
    b->S = S;
    uint32_t need = 0;
    for (uint32_t s = 0; s < S; s++) {
        uint32_t nb = (ctx[s] + bs - 1) / bs;
        need += nb;
        b->bt_stride = nb + 2 > b->bt_stride ? nb + 2 : b->bt_stride;
        b->T += qlen[s];
    }
    b->n_blocks = 1 + need + need / 4 + 1; /* the null block, the tables, unused ones */
    b->n_slab = b->n_blocks * pgd_kv_block_elems(b->geom);
    b->slab = malloc(b->n_slab * sizeof *b->slab);
    for (uint64_t i = 0; i < b->n_slab; i++) b->slab[i] = pgd_f32_to_f16(frand());
    /* block ids 1..n_blocks-1 shuffled, handed out in that order */
    uint32_t *perm = malloc(b->n_blocks * sizeof *perm);
    for (uint32_t i = 0; i < b->n_blocks - 1; i++) perm[i] = i + 1;
    for (uint32_t i = b->n_blocks - 1; i-- > 1;) {
        uint32_t j = (uint32_t)(rnd() % (i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    b->bt = malloc((uint64_t)S * b->bt_stride * sizeof *b->bt);
    b->q_stride = b->n_head * D + 3 * D; /* rows of a wider buffer (a fused QKV row) */
    b->q = malloc((uint64_t)b->T * b->q_stride * sizeof *b->q);
    b->seq_of = malloc(b->T * sizeof *b->seq_of);
    b->pos = malloc(b->T * sizeof *b->pos);
    for (uint64_t i = 0; i < (uint64_t)b->T * b->q_stride; i++) b->q[i] = 3.0f * frand();
    uint32_t next = 0, t = 0;
    for (uint32_t s = 0; s < S; s++) {
        int32_t *row = b->bt + (uint64_t)s * b->bt_stride;
        uint32_t nb = (ctx[s] + bs - 1) / bs;
        for (uint32_t i = 0; i < b->bt_stride; i++) row[i] = i < nb ? (int32_t)perm[next++] : -1;
        for (uint32_t p = ctx[s]; p < nb * bs; p++) /* the last block's unused slots */
            for (uint32_t kv = 0; kv < 2; kv++)
                for (uint32_t h = 0; h < n_kv_head; h++)
                    for (uint32_t d = 0; d < D; d++)
                        b->slab[pgd_kv_index(b->geom, (uint32_t)row[p / bs], b->layer, kv, h,
                                             p % bs) +
                                d] = F16_NAN;
        for (uint32_t i = 0; i < qlen[s]; i++, t++) {
            b->seq_of[t] = s;
            b->pos[t] = (int32_t)(ctx[s] - qlen[s] + i);
        }
    }
    free(perm);
}

static void batch_free(attn_batch *b) {
    free(b->slab);
    free(b->bt);
    free(b->q);
    free(b->seq_of);
    free(b->pos);
}

/* Rows rows[0..n) of b (in that order) as a batch of their own: its q, seq_of and pos (malloc). */
typedef struct attn_rows {
    float *q;
    uint32_t *seq_of;
    int32_t *pos;
} attn_rows;

static void rows_select(const attn_batch *b, const uint32_t *rows, uint32_t n, attn_rows *r) {
    r->q = malloc((uint64_t)n * b->q_stride * sizeof *r->q);
    r->seq_of = malloc(n * sizeof *r->seq_of);
    r->pos = malloc(n * sizeof *r->pos);
    for (uint32_t i = 0; i < n; i++) {
        memcpy(r->q + (uint64_t)i * b->q_stride, b->q + (uint64_t)rows[i] * b->q_stride,
               b->q_stride * sizeof *r->q);
        r->seq_of[i] = b->seq_of[rows[i]];
        r->pos[i] = b->pos[rows[i]];
    }
}

static void rows_free(attn_rows *r) {
    free(r->q);
    free(r->seq_of);
    free(r->pos);
}

/* The twin over rows rows[0..n) of b (in that order) into out[n][n_head][D]. */
static void twin_rows(const attn_batch *b, const uint32_t *rows, uint32_t n, uint16_t *out) {
    attn_rows r;
    rows_select(b, rows, n, &r);
    pgd_cuda_attention_twin(r.q, b->q_stride, b->slab, b->geom, b->layer, b->n_head, b->bt,
                            b->bt_stride, r.seq_of, r.pos, n, b->scale, out);
    rows_free(&r);
}

/* Rows of rev[T][row_elems] (the batch run in reverse order) whose bits differ from their
 * rows in fwd[T][row_elems]. */
static uint64_t reversed_differ(const uint16_t *rev, const uint16_t *fwd, uint32_t T,
                                uint64_t row_elems) {
    uint64_t differ = 0;
    for (uint32_t t = 0; t < T; t++)
        differ += memcmp(rev + t * row_elems, fwd + (uint64_t)(T - 1 - t) * row_elems,
                         row_elems * sizeof *rev) != 0;
    return differ;
}

#ifndef PGD_ATTN_TWIN_TEST_NO_MAIN

/* ---- the twin against the CPU attention ------------------------------------------------------ */

/* Layer b->layer of the slab in the CPU's layout (attention.h): K d-major, V row-major. */
static void cpu_caches(const attn_batch *b, uint16_t *kc, uint16_t *vc) {
    const pgd_kv_geom g = b->geom;
    const uint32_t D = g.head_dim, BS = g.block_size;
    for (uint32_t blk = 0; blk < b->n_blocks; blk++)
        for (uint32_t h = 0; h < g.n_kv_head; h++)
            for (uint32_t j = 0; j < BS; j++)
                for (uint32_t d = 0; d < D; d++) {
                    uint64_t base = ((uint64_t)blk * g.n_kv_head + h) * BS * D;
                    kc[base + (uint64_t)d * BS + j] =
                        b->slab[pgd_kv_index(g, blk, b->layer, 0, h, j) + d];
                    vc[base + (uint64_t)j * D + d] =
                        b->slab[pgd_kv_index(g, blk, b->layer, 1, h, j) + d];
                }
}

/* The f32 noise two summation orders may leave, beyond 1e-5 of the value: K and V are within
 * [-1, 1], so the output's terms are of that scale (2^-23: about one f32 ulp of 1). */
#define NOISE_ABS 0x1p-23f

static void check_against_cpu(uint32_t n_kv_head, uint32_t group, uint32_t D) {
    static const uint32_t ctx[] = {1, 255, 256, 257, 600, 1100};
    static const uint32_t qlen[] = {1, 3, 1, 17, 1, 5};
    const uint32_t S = sizeof ctx / sizeof ctx[0];
    attn_batch b;
    batch_make(&b, n_kv_head, group, D, 16, S, ctx, qlen);
    const uint64_t per_layer = (uint64_t)b.n_blocks * n_kv_head * 16 * D;
    uint16_t *kc = malloc(per_layer * sizeof *kc), *vc = malloc(per_layer * sizeof *vc);
    cpu_caches(&b, kc, vc);
    uint16_t *out = malloc((uint64_t)b.T * b.n_head * D * sizeof *out);
    pgd_cuda_attention_twin(b.q, b.q_stride, b.slab, b.geom, b.layer, b.n_head, b.bt, b.bt_stride,
                            b.seq_of, b.pos, b.T, b.scale, out);

    pgd_attn_shape sh = {.n_kv_head = n_kv_head,
                         .n_group = group,
                         .head_dim = D,
                         .block_size = 16,
                         .scale = b.scale,
                         .dtype = PGD_KV_F16};
    float *ref = malloc((uint64_t)group * D * sizeof *ref);
    float *scores = malloc((uint64_t)group * (1100 + 16) * sizeof *scores);
    uint64_t n = 0, exact = 0, bad = 0;
    for (uint32_t t = 0; t < b.T; t++) {
        const int32_t *table = b.bt + (uint64_t)b.seq_of[t] * b.bt_stride;
        for (uint32_t kvh = 0; kvh < n_kv_head; kvh++) {
            const float *q = b.q + (uint64_t)t * b.q_stride + (uint64_t)kvh * group * D;
            pgd_attn_paged(&sh, kvh, q, kc, vc, table, (uint32_t)b.pos[t] + 1, scores, ref);
            for (uint32_t i = 0; i < group * D; i++) {
                const uint16_t got = out[((uint64_t)t * b.n_head + kvh * group) * D + i];
                const double x = pgd_bf16_to_f32(got), r = ref[i];
                /* got must be bf16 of some value within f32 noise of the CPU's */
                const uint16_t want = pgd_f32_to_bf16(ref[i]);
                const float noise = 1e-5f * fabsf(ref[i]) + NOISE_ABS;
                const double lo = pgd_bf16_to_f32(pgd_f32_to_bf16(ref[i] - noise)),
                             hi = pgd_bf16_to_f32(pgd_f32_to_bf16(ref[i] + noise));
                if (!(x >= lo && x <= hi)) {
                    if (bad < 5)
                        fprintf(stderr, "  row %u head %u d %u: twin %.9g cpu %.9g\n", t,
                                kvh * group + i / D, i % D, x, r);
                    bad++;
                }
                exact += got == want;
                n++;
            }
        }
    }
    fprintf(stderr,
            "  groups of %u, head_dim %u: %u rows, %llu/%llu elements exactly bf16(cpu), "
            "the others within f32 noise\n",
            group, D, b.T, (unsigned long long)exact, (unsigned long long)n);
    CHECK_EQ_INT(bad, 0);
    CHECK(exact * 100 >= n * 99);

    /* every row alone, and the batch reversed, give the same bits */
    uint32_t *rows = calloc(b.T, sizeof *rows);
    uint16_t *alone = malloc((uint64_t)b.T * b.n_head * D * sizeof *alone);
    const uint64_t row_elems = (uint64_t)b.n_head * D;
    uint64_t differ = 0;
    for (uint32_t t = 0; t < b.T; t++) {
        rows[0] = t;
        twin_rows(&b, rows, 1, alone);
        differ += memcmp(alone, out + t * row_elems, row_elems * sizeof *out) != 0;
    }
    for (uint32_t t = 0; t < b.T; t++) rows[t] = b.T - 1 - t;
    twin_rows(&b, rows, b.T, alone);
    differ += reversed_differ(alone, out, b.T, row_elems);
    CHECK_EQ_INT(differ, 0);

    free(rows);
    free(alone);
    free(ref);
    free(scores);
    free(out);
    free(kc);
    free(vc);
    batch_free(&b);
}

static void test_twin_vs_cpu(void) {
    static const uint32_t groups[] = {1, 3, 8};
    static const uint32_t dims[] = {64, 128};
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            check_against_cpu(2, groups[g], dims[d]);
    check_against_cpu(1, 12, 96); /* two head tiles of the kernel; 96 = 2 sets of 96 threads */
    check_against_cpu(2, 2, 256);
}

/* The shared exponential is the CPU kernels' pgd__expf, bit for bit. */
static void test_exp_is_cpu_exp(void) {
    uint64_t differ = 0;
    for (uint32_t u = 0; u < 0xFFFFFFFFu - 997; u += 997) { /* a stride over every float */
        float x;
        memcpy(&x, &u, sizeof x);
        const float a = pgd_attn_exp(x), c = pgd__expf(x);
        differ += memcmp(&a, &c, sizeof a) != 0;
    }
    CHECK_EQ_INT(differ, 0);
    CHECK(pgd_attn_exp(0.0f) == 1.0f); /* the fold's weight of the larger max is exactly 1 */
    CHECK(pgd_attn_exp(-0.0f) == 1.0f);
}

/* Padding rows (pos < 0) write zeros. */
static void test_padding_row(void) {
    const uint32_t ctx[] = {40}, qlen[] = {2};
    attn_batch b;
    batch_make(&b, 2, 2, 64, 16, 1, ctx, qlen);
    b.pos[1] = -1;
    uint16_t *out = malloc((uint64_t)b.T * b.n_head * 64 * sizeof *out);
    memset(out, 0xFF, (uint64_t)b.T * b.n_head * 64 * sizeof *out);
    pgd_cuda_attention_twin(b.q, b.q_stride, b.slab, b.geom, b.layer, b.n_head, b.bt, b.bt_stride,
                            b.seq_of, b.pos, b.T, b.scale, out);
    uint64_t nonzero = 0;
    for (uint32_t i = 0; i < b.n_head * 64; i++) nonzero += out[b.n_head * 64 + i] != 0;
    CHECK_EQ_INT(nonzero, 0);
    free(out);
    batch_free(&b);
}

/* The tensor-core kernels' twins (f16 query and weights; the prefill kernel's online softmax,
 * the decode kernel's block partials folded) against the exact twin: the same attention up to
 * those roundings. Bound: the query's rounding (2^-12 relative) moves a score
 * by at most 2^-12 scale sum_d |q_d k_d| (here under 0.012 at head_dim 128, |q| <= 3,
 * |k| <= 1), so each weight by a factor within e^(+-0.024) of its ratio to the others, and the
 * output (an average of |v| <= 1) by well under 0.05; the weights' own rounding adds 2^-11
 * relative; the two bf16 roundings 2^-8 relative. Measured max |difference|: 0.004; the
 * check takes 0.02, and most elements must be within 2^-7 (a test of the twin's meaning,
 * which a rounding in the wrong place — of scores, of the output — would break by far more). */
typedef void (*tc_twin_fn)(const float *, uint32_t, const uint16_t *, pgd_kv_geom, uint32_t,
                           uint32_t, const int32_t *, uint32_t, const uint32_t *, const int32_t *,
                           uint32_t, float, uint16_t *);

static void test_tc_twin(void) {
    static const uint32_t ctx[] = {3, 300, 1100, 257}, qlen[] = {3, 64, 1, 17};
    static const tc_twin_fn twins[] = {pgd_cuda_attention_tc_twin, pgd_cuda_attention_dec_twin};
    for (uint32_t v = 0; v < 4; v++) {
        const uint32_t D = v % 2 ? 128 : 64;
        const tc_twin_fn tc_twin = twins[v / 2];
        attn_batch b;
        batch_make(&b, 2, 4, D, 16, 4, ctx, qlen);
        const uint64_t n = (uint64_t)b.T * b.n_head * D;
        uint16_t *exact = malloc(n * sizeof *exact), *tc = malloc(n * sizeof *tc);
        REQUIRE(exact && tc);
        pgd_cuda_attention_twin(b.q, b.q_stride, b.slab, b.geom, b.layer, b.n_head, b.bt,
                                b.bt_stride, b.seq_of, b.pos, b.T, b.scale, exact);
        tc_twin(b.q, b.q_stride, b.slab, b.geom, b.layer, b.n_head, b.bt, b.bt_stride, b.seq_of,
                b.pos, b.T, b.scale, tc);
        double worst = 0.0;
        uint64_t near = 0, same = 0;
        for (uint64_t i = 0; i < n; i++) {
            const double d = fabs((double)pgd_bf16_to_f32(tc[i]) - pgd_bf16_to_f32(exact[i]));
            worst = d > worst || isnan(d) ? (isnan(d) ? INFINITY : d) : worst;
            near += d <= 0x1p-7;
            same += tc[i] == exact[i];
        }
        fprintf(stderr,
                "  %s twin, head_dim %u: max |tc - exact| %.3g, %.4f within 2^-7, %.4f equal\n",
                v / 2 ? "decode" : "prefill", D, worst, (double)near / (double)n,
                (double)same / (double)n);
        CHECK(worst <= 0.02);
        CHECK((double)near >= 0.99 * (double)n);
        CHECK(same < n); /* the roundings are there */
        /* a query beyond f16's range saturates (clamped), never NaN */
        for (uint32_t i = 0; i < b.q_stride; i++) b.q[i] *= 1e6f;
        tc_twin(b.q, b.q_stride, b.slab, b.geom, b.layer, b.n_head, b.bt, b.bt_stride, b.seq_of,
                b.pos, 1, b.scale, tc);
        uint64_t nan = 0;
        for (uint64_t i = 0; i < (uint64_t)b.n_head * D; i++) nan += isnan(pgd_bf16_to_f32(tc[i]));
        CHECK_EQ_INT(nan, 0);
        free(exact);
        free(tc);
        batch_free(&b);
    }
}

int main(void) {
    seed_rng(20240611);
    RUN(test_exp_is_cpu_exp);
    RUN(test_twin_vs_cpu);
    RUN(test_padding_row);
    RUN(test_tc_twin);
    return test_summary();
}

#endif
