/*
 * tests/gpu/test_cuda_sample.c — pgd_cuda_sample against the host reference pgd_sample_logits
 * on random rows: vocabularies from 1 to 400,000 (the last needs the shared-memory opt-in),
 * logits of several scales, integer logits (ties), NaN / +-inf sprinkled in, rows that are all
 * -inf or NaN, flat rows; greedy (with and without a top-k the greedy rule ignores), temperature
 * 0.7 to 2.5, min-p, top-k (50; 300 with top-p 0.8), top-p (0.9; 0.95 with min-p), logprobs
 * with 0 to 20 alternatives. Results are poisoned first.
 *
 * What must hold:
 *   - greedy tokens: equal;
 *   - top-k / top-p tokens: equal (the host's candidate order and sums, redone), or
 *     PGD_CUDA_SAMPLE_ON_HOST for a top-p row whose nucleus outgrows the device's list — only
 *     top-p rows without top-k, only vocabularies above the list, and at least one such row
 *     (flat rows at a 128k vocabulary) so the hand-back is exercised;
 *   - temperature / min-p tokens: the kernel redoes the host's arithmetic (sample_math.h), so
 *     they are expected equal for every u. A difference is tolerated only at a boundary of the
 *     inverse CDF: u within 1e-6 of the cumulative probability (recomputed here in double)
 *     between the two tokens. Such cases are counted and printed; there may be at most 1% of
 *     the sampled rows, and none elsewhere; and draws aimed at the host's own boundaries
 *     (test_at_boundaries: decided by the sums' last bits) give the host's tokens, none
 *     excused;
 *   - logprobs: within 1e-5 (the device's double log may differ from glibc's by an ulp), -inf
 *     where the host has -inf; the top_logprobs ids equal, in order;
 *   - all -inf / NaN rows (the host's PGD_EINVAL): token -1;
 *   - batch invariance: a row's result alone and in the reversed batch equals its result in
 *     the batch, bit for bit.
 * Exit 77 (skipped) without a GPU. Label `cuda`. Seed: PGD_TEST_SEED, else the time (printed).
 */
#include <cuda_runtime_api.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "engine/sampling/sampler.h"
#include "kernels/cuda/dequant.h" /* pgd_cuda_device_count */
#include "kernels/cuda/sample.h"
#include "kernels/cuda/sample_math.h" /* the host's arithmetic, to aim draws at its boundaries */
#include "testutil.h"

static uint64_t rng = 1;

static uint64_t rnd(void) { /* xorshift64* */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

static double urand(void) {
    return (double)(rnd() >> 11) * 0x1p-53;
}

static float nrand(void) { /* standard normal (Box-Muller) */
    return (float)(sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()));
}

/* Row r of a test batch: logits of kind r % 7, spec from r % 8. */
static void make_row(float *l, uint32_t V, uint32_t r, pgd_sample_spec *sp) {
    const float scale = (float)(0.5 + 6.0 * urand());
    for (uint32_t i = 0; i < V; i++) l[i] = nrand() * scale;
    switch (r % 7) {
    case 1: /* integer logits: many ties, also at the max */
        for (uint32_t i = 0; i < V; i++) l[i] = floorf(l[i]);
        break;
    case 2: /* NaN, +-inf */
        for (int k = 0; k < 6; k++) {
            const uint32_t x = (uint32_t)(rnd() % 3);
            l[rnd() % V] = x == 0 ? NAN : x == 1 ? INFINITY : -INFINITY;
        }
        break;
    case 3: /* every logit -inf or NaN: the host refuses the row */
        if (r % 3 == 0)
            for (uint32_t i = 0; i < V; i++) l[i] = rnd() & 1 ? NAN : -INFINITY;
        break;
    case 4: /* one dominant logit */
        l[rnd() % V] = 30.0f;
        break;
    case 5: /* flat */
        for (uint32_t i = 0; i < V; i++) l[i] = 0.25f;
        break;
    default:
        break;
    }
    static const float temps[] = {0.0f, 0.0f, 1.0f, 0.7f, 1.3f, 1.0f, 2.5f, 0.9f};
    memset(sp, 0, sizeof *sp);
    sp->temperature = temps[r % 8];
    sp->top_k = r % 8 == 1 ? 40 : 0; /* greedy ignores it */
    sp->top_p = 1.0f;
    if (r % 8 == 2 || r % 8 == 6) sp->top_p = r % 8 == 2 ? 0.9f : 0.95f; /* top-p (+ min-p) */
    if (r % 8 == 3 && V > 50) sp->top_k = 50;                            /* top-k */
    if (r % 8 == 4 && V > 300) {                                         /* top-k + top-p */
        sp->top_k = 300;
        sp->top_p = 0.8f;
    }
    sp->min_p = r % 8 >= 5 ? (float)(0.02 + 0.3 * urand()) : 0.0f;
    sp->logprobs = (r / 8) % 2 == 0;
    sp->top_logprobs = sp->logprobs ? (int32_t)(rnd() % (PGD_SAMPLER_MAX_TOP_LOGPROBS + 1)) : 0;
}

/* Whether u lies within 1e-6 of the inverse CDF's boundary between tokens a and b of row l (the
 * dense distribution of the spec, recomputed in double). */
static int near_boundary(const float *l, uint32_t V, const pgd_sample_spec *sp, double u, int32_t a,
                         int32_t b) {
    double m = -INFINITY;
    for (uint32_t i = 0; i < V; i++) {
        double x = isnan(l[i]) ? -INFINITY : l[i] > FLT_MAX ? FLT_MAX : l[i];
        m = x > m ? x : m;
    }
    double *p = malloc(V * sizeof *p), z = 0.0;
    for (uint32_t i = 0; i < V; i++) {
        double x = isnan(l[i]) ? -INFINITY : l[i] > FLT_MAX ? FLT_MAX : l[i];
        p[i] = exp((x - m) / sp->temperature);
        if (p[i] < sp->min_p) p[i] = 0.0;
        z += p[i];
    }
    const int32_t lo = a < b ? a : b, hi = a < b ? b : a;
    double cum = 0.0;
    int near = 0;
    for (int32_t i = 0; i < hi; i++) {
        cum += p[i] / z;
        if (i >= lo && fabs(cum - u) <= 1e-6) near = 1;
    }
    free(p);
    return near;
}

static int same_result(const pgd_sample_result *a, const pgd_sample_result *b) {
    if (a->token != b->token || a->n_top != b->n_top) return 0;
    if (memcmp(&a->logprob, &b->logprob, sizeof a->logprob)) return 0;
    for (int k = 0; k < a->n_top && k < PGD_SAMPLER_MAX_TOP_LOGPROBS; k++)
        if (a->top[k].token != b->top[k].token ||
            memcmp(&a->top[k].logprob, &b->top[k].logprob, sizeof a->top[k].logprob))
            return 0;
    return 1;
}

static int near_logprob(float dev, float host) {
    if (isinf(host)) return dev == host;
    return fabs((double)dev - (double)host) <= 1e-5;
}

/* The kernel over rows of device arrays into host res[N] (poisoned first). */
static int run(const float *d_l, uint32_t N, uint32_t V, const pgd_sample_spec *d_sp,
               const uint64_t *d_draw, pgd_sample_result *d_res, pgd_sample_result *res) {
    if (cudaMemset(d_res, 0xFF, N * sizeof *d_res) != cudaSuccess) return -1;
    int rc = pgd_cuda_sample(d_l, N, V, d_sp, d_draw, d_res, NULL);
    if (rc) {
        fprintf(stderr, "  pgd_cuda_sample: %s\n", pgd_error_detail());
        return rc;
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    return cudaMemcpy(res, d_res, N * sizeof *res, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

typedef struct tally {
    uint64_t rows, sampled, greedy_bad, boundary, token_bad, logprob_bad, top_bad, error_bad,
        invariance_bad, cand_rows, on_host, on_host_bad;
} tally;

static void check_vocab(uint32_t V, uint32_t N, pgd_sampler_scratch *sc, tally *t) {
    float *l = malloc((size_t)N * V * sizeof *l);
    pgd_sample_spec *sp = malloc(N * sizeof *sp);
    uint64_t *draw = malloc(N * sizeof *draw);
    pgd_sample_result *res = malloc(N * sizeof *res), *one = malloc(N * sizeof *one);
    for (uint32_t r = 0; r < N; r++) {
        make_row(l + (size_t)r * V, V, r, &sp[r]);
        draw[r] = rnd();
    }
    float *d_l = NULL;
    pgd_sample_spec *d_sp = NULL;
    uint64_t *d_draw = NULL;
    pgd_sample_result *d_res = NULL;
    REQUIRE(cudaMalloc((void **)&d_l, (size_t)N * V * sizeof *l) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&d_sp, N * sizeof *sp) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&d_draw, N * sizeof *draw) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&d_res, N * sizeof *res) == cudaSuccess);
    REQUIRE(cudaMemcpy(d_l, l, (size_t)N * V * sizeof *l, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(d_sp, sp, N * sizeof *sp, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(d_draw, draw, N * sizeof *draw, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(run(d_l, N, V, d_sp, d_draw, d_res, res) == 0);

    for (uint32_t r = 0; r < N; r++) {
        const float *row = l + (size_t)r * V;
        const pgd_sample_result *d = &res[r];
        pgd_sample_result h;
        t->rows++;
        if (pgd_sample_logits(row, (int32_t)V, &sp[r], draw[r], sc, &h)) {
            t->error_bad += d->token != -1 || d->n_top != 0;
            continue;
        }
        const int greedy = sp[r].temperature < PGD_SAMPLER_GREEDY_EPS;
        const int cands = !greedy && (sp[r].top_k > 0 || sp[r].top_p < 1.0f);
        t->cand_rows += cands;
        if (d->token == PGD_CUDA_SAMPLE_ON_HOST) { /* a top-p nucleus past the device's list */
            t->on_host++;
            t->on_host_bad +=
                !cands || sp[r].top_k > 0 || V <= PGD_CUDA_SAMPLE_MAX_CANDS || d->n_top != 0;
            continue;
        }
        if (cands && d->token != h.token) { /* the same order and sums: no boundary excuse */
            fprintf(stderr, "  V %u row %u (top-k %d, top-p %g): token %d, host %d\n", V, r,
                    sp[r].top_k, (double)sp[r].top_p, d->token, h.token);
            t->token_bad++;
        } else if (cands) {
            t->sampled++;
        } else if (greedy) {
            t->greedy_bad += d->token != h.token;
        } else {
            t->sampled++;
            if (d->token != h.token) {
                const double u = (double)(draw[r] >> 11) * 0x1p-53;
                const int b = d->token >= 0 && d->token < (int32_t)V &&
                              near_boundary(row, V, &sp[r], u, d->token, h.token);
                fprintf(stderr, "  V %u row %u: token %d, host %d (u %.17g)%s\n", V, r, d->token,
                        h.token, u, b ? ": at a boundary" : "");
                if (b)
                    t->boundary++;
                else
                    t->token_bad++;
            }
        }
        if (sp[r].logprobs && d->token == h.token) {
            t->logprob_bad += !near_logprob(d->logprob, h.logprob);
            int top_ok = d->n_top == h.n_top;
            for (int k = 0; top_ok && k < h.n_top; k++)
                top_ok = d->top[k].token == h.top[k].token &&
                         near_logprob(d->top[k].logprob, h.top[k].logprob);
            t->top_bad += !top_ok;
        } else if (!sp[r].logprobs) {
            t->logprob_bad += d->logprob != 0.0f || d->n_top != 0;
        }
    }

    /* every 5th row alone, and the batch reversed */
    for (uint32_t r = 0; r < N; r += 5) {
        REQUIRE(run(d_l + (size_t)r * V, 1, V, d_sp + r, d_draw + r, d_res, one) == 0);
        t->invariance_bad += !same_result(&one[0], &res[r]);
    }
    float *rl = malloc((size_t)N * V * sizeof *rl);
    pgd_sample_spec *rsp = malloc(N * sizeof *rsp);
    uint64_t *rdraw = malloc(N * sizeof *rdraw);
    for (uint32_t r = 0; r < N; r++) {
        memcpy(rl + (size_t)r * V, l + (size_t)(N - 1 - r) * V, V * sizeof *rl);
        rsp[r] = sp[N - 1 - r];
        rdraw[r] = draw[N - 1 - r];
    }
    REQUIRE(cudaMemcpy(d_l, rl, (size_t)N * V * sizeof *l, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(d_sp, rsp, N * sizeof *sp, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(d_draw, rdraw, N * sizeof *draw, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(run(d_l, N, V, d_sp, d_draw, d_res, one) == 0);
    for (uint32_t r = 0; r < N; r++) t->invariance_bad += !same_result(&one[r], &res[N - 1 - r]);

    free(rl);
    free(rsp);
    free(rdraw);
    cudaFree(d_l);
    cudaFree(d_sp);
    cudaFree(d_draw);
    cudaFree(d_res);
    free(l);
    free(sp);
    free(draw);
    free(res);
    free(one);
}

static void test_against_host(void) {
    static const uint32_t vocab[][2] = {{1, 48},      {5, 64},     {64, 64},     {65, 64},
                                        {1000, 96},   {32000, 96}, {128256, 96}, {151936, 32},
                                        {262144, 16}, {400000, 8}};
    pgd_sampler_scratch *sc = NULL;
    REQUIRE(pgd_sampler_scratch_create(400000, &sc) == 0);
    tally t = {0};
    for (size_t i = 0; i < sizeof vocab / sizeof vocab[0]; i++)
        check_vocab(vocab[i][0], vocab[i][1], sc, &t);
    pgd_sampler_scratch_destroy(sc);
    fprintf(stderr,
            "  %llu rows (%llu sampled): greedy %llu, tokens %llu (+ %llu at a boundary), "
            "logprobs %llu, top %llu, refused rows %llu, invariance %llu differ; %llu top-k / "
            "top-p rows, %llu left to the host (%llu wrongly)\n",
            (unsigned long long)t.rows, (unsigned long long)t.sampled,
            (unsigned long long)t.greedy_bad, (unsigned long long)t.token_bad,
            (unsigned long long)t.boundary, (unsigned long long)t.logprob_bad,
            (unsigned long long)t.top_bad, (unsigned long long)t.error_bad,
            (unsigned long long)t.invariance_bad, (unsigned long long)t.cand_rows,
            (unsigned long long)t.on_host, (unsigned long long)t.on_host_bad);
    CHECK_EQ_INT(t.greedy_bad, 0);
    CHECK_EQ_INT(t.token_bad, 0);
    CHECK(t.boundary * 100 <= t.sampled);
    CHECK_EQ_INT(t.logprob_bad, 0);
    CHECK_EQ_INT(t.top_bad, 0);
    CHECK_EQ_INT(t.error_bad, 0);
    CHECK_EQ_INT(t.invariance_bad, 0);
    CHECK(t.on_host > 0 && t.on_host * 4 < t.cand_rows);
    CHECK_EQ_INT(t.on_host_bad, 0);
}

/* The draws that land on the host's own inverse-CDF boundaries: for temperature and min-p rows
 * (V aligned and not, so both of the kernel's block-sum forms run), ids k picked at random, u
 * set to k's cumulative weight over the total as sample_math.h computes them (the host's
 * arithmetic and order), and the draws around it (u's last 3 bits either way). The token there
 * is decided by the last bits of the block sums, the running totals and the walk's sum: equal
 * to the host's for every one of these draws, no boundary excused, or the kernel's arithmetic
 * is not the host's (a block's lanes summed in another order fails here, not in
 * test_against_host). */
static void test_at_boundaries(void) {
    static const uint32_t vocab[] = {1000, 1001, 128256};
    static const float temps[] = {1.0f, 0.8f, 1.7f}, min_ps[] = {0.0f, 0.0f, 0.05f};
    enum { kIds = 2, kAround = 7 };
    pgd_sampler_scratch *sc = NULL;
    REQUIRE(pgd_sampler_scratch_create(128256, &sc) == 0);
    uint64_t rows = 0, bad = 0;
    for (size_t vi = 0; vi < sizeof vocab / sizeof vocab[0]; vi++) {
        const uint32_t V = vocab[vi], N = kIds * kAround;
        float *row = malloc(V * sizeof *row), *l = malloc((size_t)N * V * sizeof *l);
        double *bsum = malloc(((V + PGD_SAMPLE_BLOCK - 1) / PGD_SAMPLE_BLOCK) * sizeof *bsum);
        pgd_sample_spec sp[kIds * kAround];
        uint64_t draw[kIds * kAround];
        pgd_sample_result res[kIds * kAround];
        REQUIRE(row && l && bsum);
        const float scale = (float)(1.0 + 3.0 * urand());
        for (uint32_t i = 0; i < V; i++) row[i] = nrand() * scale;
        const pgd_sample_spec spec = {.temperature = temps[vi], .top_p = 1.0f, .min_p = min_ps[vi]};
        float m = -INFINITY;
        for (uint32_t i = 0; i < V; i++) m = fmaxf(m, pgd_sample_sanitize(row[i]));
        const float inv_t = pgd_rn_div(1.0f, spec.temperature);
        const uint32_t nb = (V + PGD_SAMPLE_BLOCK - 1) / PGD_SAMPLE_BLOCK;
        double z = 0.0;
        for (uint32_t b = 0; b < nb; b++) {
            bsum[b] = z; /* the total before block b */
            z += pgd_sample_block_sum(row, V, b, m, inv_t, spec.min_p);
        }
        for (uint32_t j = 0; j < kIds; j++) {
            /* an id of positive weight and its cumulative weight, as the walk sums it */
            uint32_t k;
            do k = (uint32_t)(rnd() % V);
            while (pgd_sample_weight(row[k], m, inv_t, spec.min_p) <= 0.0f);
            const uint32_t b = k / PGD_SAMPLE_BLOCK;
            double acc = bsum[b];
            for (uint32_t i = b * PGD_SAMPLE_BLOCK; i <= k; i++) {
                const float p = pgd_sample_weight(row[i], m, inv_t, spec.min_p);
                if (p > 0.0f) acc += (double)p;
            }
            const uint64_t u53 = (uint64_t)(acc / z * 0x1p53);
            for (uint32_t d = 0; d < kAround; d++) {
                const uint32_t r = j * kAround + d;
                memcpy(l + (size_t)r * V, row, V * sizeof *row);
                sp[r] = spec;
                draw[r] = (u53 + d - kAround / 2) << 11;
            }
        }
        float *d_l = NULL;
        pgd_sample_spec *d_sp = NULL;
        uint64_t *d_draw = NULL;
        pgd_sample_result *d_res = NULL;
        REQUIRE(cudaMalloc((void **)&d_l, (size_t)N * V * sizeof *l) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&d_sp, sizeof sp) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&d_draw, sizeof draw) == cudaSuccess);
        REQUIRE(cudaMalloc((void **)&d_res, sizeof res) == cudaSuccess);
        REQUIRE(cudaMemcpy(d_l, l, (size_t)N * V * sizeof *l, cudaMemcpyHostToDevice) ==
                cudaSuccess);
        REQUIRE(cudaMemcpy(d_sp, sp, sizeof sp, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(d_draw, draw, sizeof draw, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(run(d_l, N, V, d_sp, d_draw, d_res, res) == 0);
        uint32_t tokens_seen = 0;
        for (uint32_t r = 0; r < N; r++) {
            pgd_sample_result h;
            REQUIRE(pgd_sample_logits(row, (int32_t)V, &sp[r], draw[r], sc, &h) == 0);
            rows++;
            if (res[r].token != h.token && bad++ < 5)
                fprintf(stderr, "  V %u draw %d around id boundary %u: token %d, host %d\n", V,
                        (int)(r % kAround) - kAround / 2, r / kAround, res[r].token, h.token);
            tokens_seen += r % kAround && h.token != res[r - 1].token;
        }
        CHECK(tokens_seen > 0); /* the draws straddle a boundary: some neighbours differ */
        cudaFree(d_l);
        cudaFree(d_sp);
        cudaFree(d_draw);
        cudaFree(d_res);
        free(bsum);
        free(l);
        free(row);
    }
    pgd_sampler_scratch_destroy(sc);
    fprintf(stderr, "  %llu draws at the host's boundaries: %llu tokens differ\n",
            (unsigned long long)rows, (unsigned long long)bad);
    CHECK_EQ_INT(bad, 0);
}

static void test_supports(void) {
    pgd_sample_spec s = {.temperature = 0.0f, .top_k = 50, .top_p = 0.5f};
    CHECK(pgd_cuda_sample_supports(&s)); /* greedy ignores top-k and top-p */
    s = (pgd_sample_spec){.temperature = 0.8f, .top_p = 1.0f, .min_p = 0.1f};
    CHECK(pgd_cuda_sample_supports(&s));
    s.logprobs = true;
    s.top_logprobs = 20;
    CHECK(pgd_cuda_sample_supports(&s));
    s.top_logprobs = 21;
    CHECK(!pgd_cuda_sample_supports(&s));
    s = (pgd_sample_spec){.temperature = 0.8f, .top_k = 50, .top_p = 1.0f};
    CHECK(pgd_cuda_sample_supports(&s));
    s = (pgd_sample_spec){.temperature = 0.8f, .top_p = 0.9f};
    CHECK(pgd_cuda_sample_supports(&s));
    s = (pgd_sample_spec){.temperature = 0.8f, .top_k = PGD_CUDA_SAMPLE_MAX_CANDS, .top_p = 0.5f};
    CHECK(pgd_cuda_sample_supports(&s));
    s.top_k = PGD_CUDA_SAMPLE_MAX_CANDS + 1; /* more candidates than the device keeps */
    CHECK(!pgd_cuda_sample_supports(&s));
    CHECK_EQ_INT(pgd_cuda_sample(NULL, 1, 0, NULL, NULL, NULL, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_sample(NULL, 0, 10, NULL, NULL, NULL, NULL), 0);
}

int main(void) {
    if (pgd_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    const char *e = getenv("PGD_TEST_SEED");
    const uint64_t seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "seed %llu (PGD_TEST_SEED to repeat)\n", (unsigned long long)seed);
    rng = seed ? seed : 1;
    RUN(test_supports);
    RUN(test_against_host);
    RUN(test_at_boundaries);
    return test_summary();
}
