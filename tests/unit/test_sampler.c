/*
 * tests/unit/test_sampler.c — engine/sampler: distributions, determinism, greedy, penalties,
 * logit bias, logprobs, validation, large vocabularies.
 *
 * Every expectation is computed here from the definitions, in double precision: the filtered
 * softmax (temperature -> top-k -> top-p -> min-p), log_softmax, the penalty formulas. Draw
 * counts are compared with a chi-square goodness-of-fit test whose p-value comes from the
 * regularized incomplete gamma function implemented below (and checked against closed forms).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/error.h"
#include "common/text.h"
#include "engine/sampling/json_fsm.h"
#include "engine/sampling/sampler.h"
#include "testutil.h"

#define DRAWS 20000
/* Top-p cuts closer than this (in cumulative mass) to top_p are too close to call: the sampler
 * works with float probabilities (relative error ~1e-7) and the reference in double. */
#define KNIFE_EDGE 1e-6

/* ---- statistics ------------------------------------------------------------------------- */

/* Q(a, x) = Gamma(a, x) / Gamma(a), the upper regularized incomplete gamma function. */
static double gamma_q(double a, double x) {
    if (x <= 0.0) return 1.0;
    double lead = exp(-x + a * log(x) - lgamma(a));
    if (x < a + 1.0) { /* series for P */
        double ap = a, del = 1.0 / a, sum = del;
        for (int i = 0; i < 100000; i++) {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-16) break;
        }
        return 1.0 - sum * lead;
    }
    /* continued fraction for Q (modified Lentz) */
    double tiny = 1e-300, b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-16) break;
    }
    return lead * h;
}

static double chi2_pvalue(double chi2, int df) {
    return gamma_q(df / 2.0, chi2 / 2.0);
}

/* Pearson chi-square of counts[n] against probabilities expect[n] (sum 1) over `total` draws;
 * cells with an expected count below 5 are pooled. *zero_hits counts draws of ids whose
 * expected probability is exactly 0. Returns the p-value. */
static double goodness_of_fit(const long *counts, const double *expect, int n, long total,
                              long *zero_hits) {
    double chi2 = 0.0, pool_e = 0.0;
    long pool_o = 0;
    int cells = 0;
    *zero_hits = 0;
    for (int i = 0; i < n; i++) {
        if (expect[i] == 0.0) {
            *zero_hits += counts[i];
            continue;
        }
        double e = expect[i] * (double)total;
        if (e < 5.0) {
            pool_e += e;
            pool_o += counts[i];
            continue;
        }
        chi2 += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
        cells++;
    }
    if (pool_e > 0.0) {
        chi2 += ((double)pool_o - pool_e) * ((double)pool_o - pool_e) / pool_e;
        cells++;
    }
    if (cells < 2) return 1.0;
    return chi2_pvalue(chi2, cells - 1);
}

/* ---- reference distribution ------------------------------------------------------------- */

static const double *g_sort_key;
static int cmp_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_sort_key[i] > g_sort_key[j]) return -1;
    if (g_sort_key[i] < g_sort_key[j]) return 1;
    return i < j ? -1 : i > j;
}

/* ids of key[n] sorted by key descending, ties by lower id */
static int *order_desc(const double *key, int n) {
    int *ord = malloc((size_t)n * sizeof *ord);
    for (int i = 0; i < n; i++) ord[i] = i;
    g_sort_key = key;
    qsort(ord, (size_t)n, sizeof *ord, cmp_desc);
    return ord;
}

/* The distribution the sampler must draw from, straight from the definitions: softmax(l / T),
 * keep the top_k most probable, renormalise, keep the smallest most-probable prefix with mass
 * >= top_p, renormalise, drop p < min_p * p_max, renormalise. *margin (if not NULL) gets the
 * distance of the top-p cumulative masses around the cut from top_p, to keep tests off the
 * knife edge. */
static void reference(const float *l, int n, double t, int top_k, double top_p, double min_p,
                      double *out, double *margin) {
    double *z = malloc((size_t)n * sizeof *z);
    double mx = -INFINITY, s = 0.0;
    for (int i = 0; i < n; i++) {
        z[i] = (double)l[i] / t;
        if (z[i] > mx) mx = z[i];
    }
    for (int i = 0; i < n; i++) s += exp(z[i] - mx);
    for (int i = 0; i < n; i++) out[i] = exp(z[i] - mx) / s;
    int *ord = order_desc(z, n);
    int keep = n;
    if (top_k > 0 && top_k < n) keep = top_k;
    double mass = 0.0;
    for (int r = 0; r < keep; r++) mass += out[ord[r]];
    if (margin) *margin = 1.0;
    if (top_p < 1.0) {
        double cum = 0.0;
        int r = 0;
        for (; r < keep; r++) {
            cum += out[ord[r]] / mass;
            if (cum >= top_p) break;
        }
        if (margin) *margin = fmin(cum - top_p, top_p - (cum - out[ord[r]] / mass));
        keep = r + 1 < keep ? r + 1 : keep;
    }
    double pmax = out[ord[0]];
    for (int r = 0; r < n; r++) {
        int i = ord[r];
        if (r >= keep || out[i] < min_p * pmax) out[i] = 0.0;
    }
    s = 0.0;
    for (int i = 0; i < n; i++) s += out[i];
    for (int i = 0; i < n; i++) out[i] /= s;
    free(ord);
    free(z);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t g_rng = 12345;
static double urand(void) { /* splitmix64 -> [0, 1) */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}
static double gauss(void) {
    double u = urand(), v = urand();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* 32 logits, all distinct, spread over about [-3, 4] */
static const float k_logits[32] = {1.20f,  -0.35f, 2.85f,  0.10f,  -1.70f, 3.60f,  0.95f,  -2.40f,
                                   1.75f,  0.40f,  -0.90f, 2.20f,  -2.95f, 0.65f,  1.45f,  -0.15f,
                                   3.10f,  -1.25f, 0.25f,  2.55f,  -0.60f, 1.05f,  -2.10f, 0.80f,
                                   -1.45f, 1.90f,  0.05f,  -0.75f, 2.40f,  -1.95f, 0.55f,  1.60f};

static pgd_sampler *make(const pgd_sampling_params *p, int n) {
    pgd_sampler *s = NULL;
    int rc = pgd_sampler_create(p, n, NULL, &s);
    if (rc) fprintf(stderr, "  create: %s\n", pgd_error_detail());
    return s;
}

/* DRAWS samples with params p over l[n]; checks the fit against `expect` and that no id of
 * zero expected probability is drawn. Returns the p-value. */
static double fit(const float *l, int n, const pgd_sampling_params *p, const double *expect) {
    pgd_sampler *s = make(p, n);
    if (!s) return -1.0;
    long *counts = calloc((size_t)n, sizeof *counts);
    pgd_sample_result r;
    int errors = 0;
    for (int d = 0; d < DRAWS; d++) {
        if (pgd_sampler_sample(s, l, &r) || r.token < 0 || r.token >= n) {
            errors++;
            continue;
        }
        counts[r.token]++;
    }
    long zero_hits;
    double pv = goodness_of_fit(counts, expect, n, DRAWS, &zero_hits);
    CHECK_EQ_INT(errors, 0);
    CHECK_EQ_INT(zero_hits, 0);
    free(counts);
    pgd_sampler_destroy(s);
    return pv;
}

static void check_fit(const float *l, int n, float t, int top_k, float top_p, float min_p,
                      uint64_t seed) {
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.temperature = t;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    double *expect = malloc((size_t)n * sizeof *expect), margin;
    reference(l, n, t, top_k, top_p, min_p, expect, &margin);
    REQUIRE(margin > KNIFE_EDGE); /* the test itself must not sit on the top-p knife edge */
    int kept = 0;
    for (int i = 0; i < n; i++) kept += expect[i] > 0.0;
    double pv = fit(l, n, &p, expect);
    fprintf(stderr, "    T=%.2f k=%d p=%.2f min_p=%.2f n=%d kept=%d: chi-square p-value %.4f\n",
            (double)t, top_k, (double)top_p, (double)min_p, n, kept, pv);
    CHECK(pv > 0.001);
    free(expect);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_gamma_q(void) {
    /* closed forms: df = 2 -> exp(-x/2); df = 4 -> exp(-x/2) (1 + x/2) */
    for (double x = 0.1; x < 40.0; x *= 1.7) {
        CHECK_NEAR(chi2_pvalue(x, 2), exp(-x / 2), 1e-12);
        CHECK_NEAR(chi2_pvalue(x, 4), exp(-x / 2) * (1 + x / 2), 1e-12);
    }
    /* tabulated 5% critical values */
    CHECK_NEAR(chi2_pvalue(3.841458820694124, 1), 0.05, 1e-9);
    CHECK_NEAR(chi2_pvalue(18.307038053275146, 10), 0.05, 1e-9);
    CHECK_NEAR(chi2_pvalue(124.34211340400407, 100), 0.05, 1e-9);
}

static void test_temperature(void) {
    check_fit(k_logits, 32, 0.7f, 0, 1.0f, 0.0f, 1);
    check_fit(k_logits, 32, 1.3f, 0, 1.0f, 0.0f, 2);
    check_fit(k_logits, 32, 1.0f, 0, 1.0f, 0.0f, 3);
}

static void test_top_k(void) {
    check_fit(k_logits, 32, 1.0f, 5, 1.0f, 0.0f, 4);
    check_fit(k_logits, 32, 1.6f, 12, 1.0f, 0.0f, 5);
    check_fit(k_logits, 32, 1.0f, 31, 1.0f, 0.0f, 6);
}

static void test_top_p(void) {
    check_fit(k_logits, 32, 1.0f, 0, 0.8f, 0.0f, 7);
    check_fit(k_logits, 32, 1.5f, 0, 0.93f, 0.0f, 8);
    check_fit(k_logits, 32, 0.5f, 0, 0.3f, 0.0f, 9); /* a single token can carry the mass */
}

static void test_min_p(void) {
    check_fit(k_logits, 32, 1.0f, 0, 1.0f, 0.1f, 10);
    check_fit(k_logits, 32, 1.4f, 0, 1.0f, 0.25f, 11);
}

static void test_combination(void) {
    check_fit(k_logits, 32, 0.9f, 12, 0.9f, 0.05f, 12);
    check_fit(k_logits, 32, 1.2f, 20, 0.85f, 0.0f, 13);
    check_fit(k_logits, 32, 1.1f, 0, 0.95f, 0.08f, 14);
}

/* more candidates than one block sum / one quickselect leaf */
static void test_larger_vocab_fit(void) {
    int n = 3000;
    float *l = malloc((size_t)n * sizeof *l);
    g_rng = 777;
    for (int i = 0; i < n; i++) l[i] = (float)(1.5 * gauss());
    check_fit(l, n, 1.0f, 0, 1.0f, 0.0f, 15);   /* dense draw across 12 blocks */
    check_fit(l, n, 1.0f, 0, 0.6f, 0.0f, 16);   /* quickselect over ~hundreds */
    check_fit(l, n, 1.0f, 400, 0.9f, 0.0f, 17); /* top-k heap of 400 then top-p */
    check_fit(l, n, 0.8f, 0, 1.0f, 0.2f, 18);   /* dense min-p */
    free(l);
}

/* top-k and top-p break ties by the lower id */
static void test_ties(void) {
    float l[10] = {1, 5, 5, 2, 5, 5, 0, 5, 3, 1};
    /* top-k = 3 of five equal maxima (ids 1, 2, 4, 5, 7): ids 1, 2, 4, equally likely */
    check_fit(l, 10, 1.0f, 3, 1.0f, 0.0f, 19);
    double expect[10] = {0};
    reference(l, 10, 1.0, 3, 1.0, 0.0, expect, NULL);
    CHECK(expect[1] > 0 && expect[2] > 0 && expect[4] > 0 && expect[5] == 0 && expect[7] == 0);
    /* top-p small enough for two of the tied maxima: ids 1 and 2 */
    check_fit(l, 10, 1.0f, 0, 0.3f, 0.0f, 20);
}

/* the fit test has power: T = 0.7 draws are rejected against the T = 1.3 distribution */
static void test_fit_rejects_wrong_distribution(void) {
    double expect[32];
    reference(k_logits, 32, 1.3, 0, 1.0, 0.0, expect, NULL);
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.temperature = 0.7f;
    p.seed = 99;
    double pv = fit(k_logits, 32, &p, expect);
    CHECK(pv >= 0.0 && pv < 1e-6);
}

static void sample_seq(pgd_sampler *s, const float *l, int n, int32_t *seq) {
    pgd_sample_result r;
    for (int i = 0; i < n; i++) {
        seq[i] = pgd_sampler_sample(s, l, &r) ? -1 : r.token;
    }
}

static void test_seed_determinism(void) {
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.seed = 42;
    int32_t a[200], b[200], c[200], d[200];
    pgd_sampler *s1 = make(&p, 32), *s2 = make(&p, 32);
    p.seed = 43;
    pgd_sampler *s3 = make(&p, 32);
    REQUIRE(s1 && s2 && s3);
    sample_seq(s1, k_logits, 200, a);
    /* s2 interleaved with another sequence on other logits and a shared scratch: same tokens */
    pgd_sampler_scratch *sc = NULL;
    REQUIRE(pgd_sampler_scratch_create(64, &sc) == 0);
    pgd_sampling_params q;
    pgd_sampling_params_default(&q);
    q.seed = 42;
    q.temperature = 2.0f;
    pgd_sampler *other = NULL;
    REQUIRE(pgd_sampler_create(&q, 64, sc, &other) == 0);
    float lo[64];
    for (int i = 0; i < 64; i++) lo[i] = (float)(i % 7) * 0.3f;
    pgd_sample_result r;
    for (int i = 0; i < 200; i++) {
        CHECK(pgd_sampler_sample(other, lo, &r) == 0);
        CHECK(pgd_sampler_sample(s2, k_logits, &r) == 0);
        b[i] = r.token;
    }
    sample_seq(s3, k_logits, 200, c);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    int distinct = 0;
    for (int i = 0; i < 200; i++) distinct += a[i] != a[0];
    CHECK(distinct > 0);
    /* a fresh sampler with the same seed repeats the sequence */
    pgd_sampler_destroy(s1);
    p.seed = 42;
    s1 = make(&p, 32);
    REQUIRE(s1);
    sample_seq(s1, k_logits, 200, d);
    CHECK(memcmp(a, d, sizeof a) == 0);
    pgd_sampler_destroy(s1);
    pgd_sampler_destroy(s2);
    pgd_sampler_destroy(s3);
    pgd_sampler_destroy(other);
    pgd_sampler_scratch_destroy(sc);
}

static int greedy_pick(const float *l, int n, float t) {
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.temperature = t;
    p.top_k = 3;
    p.top_p = 0.5f;
    pgd_sampler *s = make(&p, n);
    if (!s) return -2;
    pgd_sample_result r;
    int tok = pgd_sampler_sample(s, l, &r) ? -1 : r.token;
    pgd_sampler_destroy(s);
    return tok;
}

static void test_greedy(void) {
    CHECK_EQ_INT(greedy_pick(k_logits, 32, 0.0f), 5); /* 3.60 is the largest */
    float tie[9] = {0.5f, 1.0f, -2.0f, 7.25f, 0.0f, 7.25f, 3.0f, 7.25f, -1.0f};
    CHECK_EQ_INT(greedy_pick(tie, 9, 0.0f), 3);
    CHECK_EQ_INT(greedy_pick(tie, 9, 1e-6f), 3); /* below the greedy threshold */
    float last[6] = {-1, -1, -1, -1, -1, 2};
    CHECK_EQ_INT(greedy_pick(last, 6, 0.0f), 5);
    /* NaN is never chosen, +inf is */
    float odd[5] = {NAN, 1.0f, INFINITY, 2.0f, NAN};
    CHECK_EQ_INT(greedy_pick(odd, 5, 0.0f), 2);
    CHECK_EQ_INT(greedy_pick(odd, 5, 1.0f), 2);
    float masked[4] = {-INFINITY, NAN, -INFINITY, 0.25f};
    CHECK_EQ_INT(greedy_pick(masked, 4, 0.8f), 3);
    /* a row with nothing finite is an error */
    float none[3] = {-INFINITY, NAN, -INFINITY};
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    pgd_sampler *s = make(&p, 3);
    REQUIRE(s);
    pgd_sample_result r;
    CHECK_EQ_INT(pgd_sampler_sample(s, none, &r), PGD_EINVAL);
    pgd_sampler_destroy(s);
}

static void test_logit_bias(void) {
    pgd_logit_bias bias[3] = {{5, -100.0f}, {9, 2.5f}, {0, 0.75f}};
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.temperature = 0.0f;
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    pgd_sampler *s = make(&p, 32);
    REQUIRE(s);
    bias[0].bias = 50.0f; /* the sampler keeps its own copy */
    float out[32];
    pgd_sampler_process_logits(s, k_logits, out);
    for (int i = 0; i < 32; i++) {
        double want = k_logits[i];
        if (i == 5) want -= 100.0;
        if (i == 9) want += 2.5;
        if (i == 0) want += 0.75;
        CHECK_NEAR(out[i], want, 1e-5);
    }
    /* greedy sees biased logits: 3.60 - 100 is gone, 0.40 + 2.5 = 2.90 < 3.10 (id 16) wins */
    pgd_sample_result r;
    CHECK(pgd_sampler_sample(s, k_logits, &r) == 0);
    CHECK_EQ_INT(r.token, 16);
    pgd_sampler_destroy(s);
}

static void test_repetition_penalty(void) {
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.repetition_penalty = 1.5f;
    pgd_sampler *s = make(&p, 32);
    REQUIRE(s);
    int32_t prompt[4] = {2, 1, 2, 7}; /* 2.85, -0.35, 2.85 (again), -2.40 */
    CHECK(pgd_sampler_accept_prompt(s, prompt, 4) == 0);
    CHECK(pgd_sampler_accept(s, 16) == 0); /* 3.10 */
    CHECK(pgd_sampler_accept(s, 16) == 0);
    CHECK(pgd_sampler_accept(s, 7) == 0); /* in both */
    float out[32];
    pgd_sampler_process_logits(s, k_logits, out);
    for (int i = 0; i < 32; i++) {
        double x = k_logits[i];
        int seen = i == 2 || i == 1 || i == 7 || i == 16;
        double want = !seen ? x : x > 0 ? x / 1.5 : x * 1.5; /* once, however often seen */
        CHECK_NEAR(out[i], want, 1e-5);
    }
    CHECK_EQ_INT(pgd_sampler_output_count(s, 16), 2);
    CHECK_EQ_INT(pgd_sampler_output_count(s, 2), 0);
    CHECK_EQ_INT(pgd_sampler_n_output(s), 3);
    pgd_sampler_destroy(s);

    /* greedy flips: 3.60 (id 5) / 1.5 = 2.40 < 3.10 (id 16) */
    p.temperature = 0.0f;
    s = make(&p, 32);
    REQUIRE(s);
    int32_t five = 5;
    CHECK(pgd_sampler_accept_prompt(s, &five, 1) == 0);
    pgd_sample_result r;
    CHECK(pgd_sampler_sample(s, k_logits, &r) == 0);
    CHECK_EQ_INT(r.token, 16);
    pgd_sampler_destroy(s);
}

static void test_frequency_presence(void) {
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.3f;
    pgd_sampler *s = make(&p, 32);
    REQUIRE(s);
    int32_t prompt[2] = {4, 5};
    CHECK(pgd_sampler_accept_prompt(s, prompt, 2) == 0); /* the prompt does not count */
    int32_t outs[6] = {3, 3, 11, 3, 30, 11};
    for (int i = 0; i < 6; i++) CHECK(pgd_sampler_accept(s, outs[i]) == 0);
    float out[32];
    pgd_sampler_process_logits(s, k_logits, out);
    for (int i = 0; i < 32; i++) {
        int cnt = 0;
        for (int j = 0; j < 6; j++) cnt += outs[j] == i;
        double want = (double)k_logits[i] - 0.5 * cnt - (cnt > 0 ? 0.3 : 0.0);
        CHECK_NEAR(out[i], want, 1e-5);
    }
    pgd_sampler_destroy(s);

    /* negative penalties reward repeats */
    p.frequency_penalty = -1.0f;
    p.presence_penalty = -2.0f;
    s = make(&p, 32);
    REQUIRE(s);
    CHECK(pgd_sampler_accept(s, 12) == 0);
    pgd_sampler_process_logits(s, k_logits, out);
    CHECK_NEAR(out[12], -2.95 + 1.0 + 2.0, 1e-5);
    pgd_sampler_destroy(s);
}

/* bias -> repetition -> frequency/presence, in that order */
static void test_penalty_order(void) {
    pgd_logit_bias bias[2] = {{3, 1.0f}, {10, -1.0f}};
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    pgd_sampler *s = make(&p, 32);
    REQUIRE(s);
    int32_t pr = 10;
    CHECK(pgd_sampler_accept_prompt(s, &pr, 1) == 0);
    CHECK(pgd_sampler_accept(s, 3) == 0);
    float out[32];
    pgd_sampler_process_logits(s, k_logits, out);
    /* id 3: (0.10 + 1) / 2 - 0.5 - 0.25 = -0.2 */
    CHECK_NEAR(out[3], -0.2, 1e-5);
    /* id 10: (-0.90 - 1) * 2 = -3.8 (prompt only: no frequency/presence) */
    CHECK_NEAR(out[10], -3.8, 1e-5);
    CHECK_NEAR(out[4], -1.70, 1e-6);
    pgd_sampler_destroy(s);
}

static void log_softmax(const float *l, int n, double *out) {
    double mx = -INFINITY, s = 0.0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) s += exp((double)l[i] - mx);
    for (int i = 0; i < n; i++) out[i] = (double)l[i] - mx - log(s);
}

static void test_logprobs(void) {
    int n = 1000;
    float *l = malloc((size_t)n * sizeof *l);
    double *ls = malloc((size_t)n * sizeof *ls);
    g_rng = 4242;
    for (int i = 0; i < n; i++) l[i] = (float)(2.0 * gauss());
    l[17] = l[400] = l[999] = 9.0f; /* a three-way tie at the top */
    log_softmax(l, n, ls);
    int *ord = order_desc(ls, n);
    pgd_logit_bias bias = {3, 10.0f};
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.logprobs = true;
    p.top_logprobs = 20;
    p.temperature = 0.6f; /* none of these change the reported logprobs */
    p.top_k = 50;
    p.logit_bias = &bias;
    p.n_logit_bias = 1;
    p.seed = 5;
    pgd_sampler *s = make(&p, n);
    REQUIRE(s);
    pgd_sample_result r;
    for (int it = 0; it < 20; it++) {
        REQUIRE(pgd_sampler_sample(s, l, &r) == 0);
        REQUIRE(r.token >= 0 && r.token < n);
        CHECK_NEAR(r.logprob, ls[r.token], 1e-5);
        CHECK_EQ_INT(r.n_top, 20);
        for (int i = 0; i < r.n_top; i++) {
            CHECK_EQ_INT(r.top[i].token, ord[i]);
            CHECK_NEAR(r.top[i].logprob, ls[ord[i]], 1e-5);
            if (i) CHECK(r.top[i].logprob <= r.top[i - 1].logprob);
        }
    }
    CHECK_EQ_INT(r.top[0].token, 17);
    CHECK_EQ_INT(r.top[1].token, 400);
    CHECK_EQ_INT(r.top[2].token, 999);
    pgd_sampler_destroy(s);

    /* greedy with logprobs; top_logprobs larger than the vocabulary; masked tokens */
    float small[5] = {0.0f, -INFINITY, 1.0f, 0.5f, NAN};
    float fin[5] = {0.0f, -INFINITY, 1.0f, 0.5f, -INFINITY};
    double lsm[5];
    log_softmax(fin, 5, lsm);
    p.temperature = 0.0f;
    p.top_k = 0;
    p.n_logit_bias = 0;
    p.top_logprobs = 7;
    s = make(&p, 5);
    REQUIRE(s);
    REQUIRE(pgd_sampler_sample(s, small, &r) == 0);
    CHECK_EQ_INT(r.token, 2);
    CHECK_NEAR(r.logprob, lsm[2], 1e-6);
    CHECK_EQ_INT(r.n_top, 5);
    int want_ids[5] = {2, 3, 0, 1, 4};
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(r.top[i].token, want_ids[i]);
    for (int i = 0; i < 3; i++) CHECK_NEAR(r.top[i].logprob, lsm[want_ids[i]], 1e-6);
    CHECK(isinf(r.top[3].logprob) && r.top[3].logprob < 0);
    CHECK(isinf(r.top[4].logprob) && r.top[4].logprob < 0);
    pgd_sampler_destroy(s);

    /* logprobs off: nothing reported */
    p.logprobs = false;
    p.top_logprobs = 0;
    s = make(&p, 5);
    REQUIRE(s);
    REQUIRE(pgd_sampler_sample(s, small, &r) == 0);
    CHECK_EQ_INT(r.n_top, 0);
    pgd_sampler_destroy(s);
    free(ord);
    free(ls);
    free(l);
}

static int expect_invalid(const pgd_sampling_params *p, int n_vocab, const char *param) {
    const char *got = NULL;
    int rc = pgd_sampling_params_validate(p, n_vocab, &got);
    if (rc != PGD_EINVAL || !got || strcmp(got, param) != 0 || !strstr(pgd_error_detail(), param)) {
        fprintf(stderr, "  expected EINVAL for %s, got %d (%s: %s)\n", param, rc, got ? got : "-",
                pgd_error_detail());
        return 0;
    }
    pgd_sampler *s = NULL;
    if (pgd_sampler_create(p, n_vocab, NULL, &s) != PGD_EINVAL || s) return 0;
    return 1;
}

static void test_validation(void) {
    pgd_sampling_params d, p;
    pgd_sampling_params_default(&d);
    const char *param = "x";
    CHECK_EQ_INT(pgd_sampling_params_validate(&d, 32, &param), 0);
    CHECK(param == NULL);
#define BAD(field, value, name)                                                                    \
    do {                                                                                           \
        p = d;                                                                                     \
        p.field = value;                                                                           \
        CHECK(expect_invalid(&p, 32, name));                                                       \
    } while (0)
    BAD(temperature, -0.1f, "temperature");
    BAD(temperature, NAN, "temperature");
    BAD(temperature, 101.0f, "temperature");
    BAD(top_k, -2, "top_k");
    BAD(top_p, 0.0f, "top_p");
    BAD(top_p, 1.01f, "top_p");
    BAD(top_p, NAN, "top_p");
    BAD(min_p, -0.01f, "min_p");
    BAD(min_p, 1.5f, "min_p");
    BAD(repetition_penalty, 0.0f, "repetition_penalty");
    BAD(repetition_penalty, INFINITY, "repetition_penalty");
    BAD(presence_penalty, 2.5f, "presence_penalty");
    BAD(presence_penalty, NAN, "presence_penalty");
    BAD(frequency_penalty, -2.01f, "frequency_penalty");
    BAD(top_logprobs, 21, "top_logprobs");
    BAD(top_logprobs, -1, "top_logprobs");
    BAD(top_logprobs, 3, "top_logprobs"); /* without logprobs */
#undef BAD
    pgd_logit_bias bad_id = {32, 1.0f}, neg_id = {-1, 1.0f}, bad_bias = {3, 150.0f},
                   nan_bias = {3, NAN};
    p = d;
    p.n_logit_bias = 1;
    p.logit_bias = &bad_id;
    CHECK(expect_invalid(&p, 32, "logit_bias"));
    p.logit_bias = &neg_id;
    CHECK(expect_invalid(&p, 32, "logit_bias"));
    p.logit_bias = &bad_bias;
    CHECK(expect_invalid(&p, 32, "logit_bias"));
    p.logit_bias = &nan_bias;
    CHECK(expect_invalid(&p, 32, "logit_bias"));
    /* the edges that are allowed */
    p = d;
    p.temperature = 0.0f;
    p.top_k = -1;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.logprobs = true;
    p.top_logprobs = 20;
    pgd_logit_bias ok = {31, -100.0f};
    p.logit_bias = &ok;
    p.n_logit_bias = 1;
    CHECK_EQ_INT(pgd_sampling_params_validate(&p, 32, NULL), 0);

    /* token ids out of range */
    pgd_sampler *s = make(&d, 32);
    REQUIRE(s);
    int32_t ids[2] = {0, 32};
    CHECK_EQ_INT(pgd_sampler_accept_prompt(s, ids, 2), PGD_EINVAL);
    CHECK_EQ_INT(pgd_sampler_accept(s, -1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_sampler_accept(s, 32), PGD_EINVAL);
    CHECK_EQ_INT(pgd_sampler_accept(s, 31), 0);
    pgd_sampler_destroy(s);

    /* a scratch too small for the vocabulary */
    pgd_sampler_scratch *sc = NULL;
    REQUIRE(pgd_sampler_scratch_create(16, &sc) == 0);
    CHECK_EQ_INT(pgd_sampler_create(&d, 32, sc, &s), PGD_EINVAL);
    pgd_sampler_scratch_destroy(sc);
}

/* min_p = 1 keeps exactly the maxima */
static void test_min_p_one(void) {
    float l[6] = {1.0f, 4.0f, 2.0f, 4.0f, -1.0f, 3.9f};
    double expect[6] = {0, 0.5, 0, 0.5, 0, 0};
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.min_p = 1.0f;
    p.seed = 21;
    CHECK(fit(l, 6, &p, expect) > 0.001);
    p.top_k = 5; /* the candidate path */
    CHECK(fit(l, 6, &p, expect) > 0.001);
    p.top_k = 0;
    p.top_p = 0.999f;
    CHECK(fit(l, 6, &p, expect) > 0.001);
}

/* Compares the sampler's filtered distribution with the reference: the same survivors and the
 * same probabilities. Returns 1 when they agree, -1 on a mismatch (reported), 0 when the
 * reference's top-p cut is on the knife edge: then, if `lenient`, up to 3 ids next to the cut
 * may differ in survival (1 is returned if the rest agrees), else the set is skipped. */
static int compare_distribution_x(const float *l, int n, float t, int top_k, float top_p,
                                  float min_p, int lenient) {
    double *ref = malloc((size_t)n * sizeof *ref), margin;
    float *got = malloc((size_t)n * sizeof *got);
    int result = 1;
    pgd_sampler *s = NULL;
    reference(l, n, t, top_k, top_p, min_p, ref, &margin);
    int edge = margin < KNIFE_EDGE;
    if (edge && !lenient) {
        result = 0;
        goto out;
    }
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.temperature = t;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    s = make(&p, n);
    if (!s || pgd_sampler_distribution(s, l, got) != 0) {
        result = -1;
        goto out;
    }
    int bad = 0, flips = 0;
    for (int i = 0; i < n && bad < 3; i++) {
        if (edge && (ref[i] > 0.0) != (got[i] > 0.0f) && ++flips <= 3) continue;
        if ((ref[i] > 0.0) != (got[i] > 0.0f) || fabs(ref[i] - got[i]) > 1e-5) {
            fprintf(stderr, "  n=%d T=%g k=%d p=%g min_p=%g: id %d want %.9g got %.9g\n", n,
                    (double)t, top_k, (double)top_p, (double)min_p, i, ref[i], (double)got[i]);
            bad++;
        }
    }
    if (edge)
        fprintf(stderr, "    (top-p cut margin %.2g: %d ids at the edge differ)\n", margin, flips);
    if (bad) result = -1;
out:
    pgd_sampler_destroy(s);
    free(got);
    free(ref);
    return result;
}

static int compare_distribution(const float *l, int n, float t, int top_k, float top_p,
                                float min_p) {
    return compare_distribution_x(l, n, t, top_k, top_p, min_p, 0);
}

/* the exact distribution over a grid of parameters, two rows */
static void test_distribution_grid(void) {
    int n2 = 3000;
    float *l2 = malloc((size_t)n2 * sizeof *l2);
    g_rng = 777;
    for (int i = 0; i < n2; i++) l2[i] = (float)(1.5 * gauss());
    const float temps[] = {0.5f, 1.0f, 1.7f}, tps[] = {1.0f, 0.3f, 0.75f, 0.9f, 0.97f},
                mps[] = {0.0f, 0.05f, 0.3f};
    const int tks[] = {0, 1, 7, 50, 400};
    int compared = 0, skipped = 0, failed = 0;
    for (int row = 0; row < 2; row++) {
        const float *l = row ? l2 : k_logits;
        int n = row ? n2 : 32;
        for (size_t a = 0; a < PGD_ARRAY_LEN(temps); a++)
            for (size_t b = 0; b < PGD_ARRAY_LEN(tks); b++)
                for (size_t c = 0; c < PGD_ARRAY_LEN(tps); c++)
                    for (size_t d = 0; d < PGD_ARRAY_LEN(mps); d++) {
                        int r = compare_distribution(l, n, temps[a], tks[b], tps[c], mps[d]);
                        compared += r == 1;
                        skipped += r == 0;
                        failed += r < 0;
                    }
        /* a fine sweep of top-p alone: the cut lands in every part of the quickselect */
        for (int k = 1; k < 50; k++) {
            int r = compare_distribution(l, n, 1.0f, 0, (float)k / 50.0f, 0.0f);
            compared += r == 1;
            skipped += r == 0;
            failed += r < 0;
        }
    }
    fprintf(stderr, "    %d parameter sets compared, %d skipped (knife edge)\n", compared, skipped);
    CHECK_EQ_INT(failed, 0);
    CHECK(compared > 400);
    free(l2);
}

/* the distribution accessor leaves the RNG alone */
static void test_distribution_keeps_rng(void) {
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.seed = 77;
    p.top_k = 20;
    pgd_sampler *a = make(&p, 32), *b = make(&p, 32);
    REQUIRE(a && b);
    float probs[32];
    pgd_sample_result ra, rb;
    int same = 1;
    for (int i = 0; i < 50; i++) {
        CHECK(pgd_sampler_distribution(b, k_logits, probs) == 0);
        CHECK(pgd_sampler_sample(a, k_logits, &ra) == 0);
        CHECK(pgd_sampler_sample(b, k_logits, &rb) == 0);
        same &= ra.token == rb.token;
    }
    CHECK(same);
    pgd_sampler_destroy(a);
    pgd_sampler_destroy(b);
}

/* CPU time of this thread: the machines these run on are shared, wall time says little */
static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* n_vocab 150k: results agree with the definitions, and the time per call is printed */
static void test_large_vocab(void) {
    int n = 150000;
    float *l = malloc((size_t)n * sizeof *l);
    double *lz = malloc((size_t)n * sizeof *lz), *ref = malloc((size_t)n * sizeof *ref);
    g_rng = 31337;
    /* an LLM-like row: a broad body and a few strong candidates */
    for (int i = 0; i < n; i++) l[i] = (float)(2.5 * gauss() - 4.0);
    for (int i = 0; i < 40; i++) l[(i * 7919 + 13) % n] = (float)(8.0 + 4.0 * urand());
    for (int i = 0; i < n; i++) lz[i] = l[i];
    int *ord = order_desc(lz, n);
    struct {
        const char *name;
        float t, top_p, min_p;
        int top_k, logprobs;
    } cfg[] = {
        {"greedy", 0.0f, 1.0f, 0.0f, 0, 0},
        {"temperature", 1.0f, 1.0f, 0.0f, 0, 0},
        {"top-k 50", 1.0f, 1.0f, 0.0f, 50, 0},
        {"top-p 0.9", 1.0f, 0.9f, 0.0f, 0, 0},
        {"top-p 0.95 T1.5", 1.5f, 0.95f, 0.0f, 0, 0},
        {"min-p 0.05", 1.0f, 1.0f, 0.05f, 0, 0},
        {"k40 p0.9 m0.02", 0.8f, 0.9f, 0.02f, 40, 0},
        {"top-p + top_logprobs 20", 1.0f, 0.9f, 0.0f, 0, 1},
    };
    pgd_sample_result r;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        pgd_sampling_params p;
        pgd_sampling_params_default(&p);
        p.temperature = cfg[c].t;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.top_k = cfg[c].top_k;
        p.logprobs = cfg[c].logprobs;
        p.top_logprobs = cfg[c].logprobs ? 20 : 0;
        p.seed = 1000 + c;
        pgd_sampler *s = make(&p, n);
        REQUIRE(s);
        if (cfg[c].t > 0.0f)
            reference(l, n, cfg[c].t, cfg[c].top_k, cfg[c].top_p, cfg[c].min_p, ref, NULL);
        int iters = 200, outside = 0;
        double t0 = now_us();
        for (int i = 0; i < iters; i++) {
            REQUIRE(pgd_sampler_sample(s, l, &r) == 0);
            if (cfg[c].t == 0.0f ? r.token != ord[0] : !(ref[r.token] > 0.0)) outside++;
        }
        double per = (now_us() - t0) / iters;
        CHECK_EQ_INT(outside, 0);
        if (cfg[c].t > 0.0f)
            CHECK(compare_distribution_x(l, n, cfg[c].t, cfg[c].top_k, cfg[c].top_p, cfg[c].min_p,
                                         1) == 1);
        int kept = 0;
        if (cfg[c].t > 0.0f)
            for (int i = 0; i < n; i++) kept += ref[i] > 0.0;
        fprintf(stderr, "    n_vocab %d, %-24s %8.1f cpu us/sample (kept %d)\n", n, cfg[c].name,
                per, kept);
        if (cfg[c].logprobs) {
            log_softmax(l, n, lz);
            CHECK_NEAR(r.logprob, lz[r.token], 1e-4);
            for (int i = 0; i < 20; i++) {
                CHECK_EQ_INT(r.top[i].token, ord[i]);
                CHECK_NEAR(r.top[i].logprob, lz[ord[i]], 1e-4);
            }
        }
        pgd_sampler_destroy(s);
    }
    free(ord);
    free(ref);
    free(lz);
    free(l);
}

/* the top-p pre-filter must not cut into the nucleus of a flat distribution */
static void test_flat_top_p(void) {
    int n = 20000;
    float *l = malloc((size_t)n * sizeof *l);
    double *ref = malloc((size_t)n * sizeof *ref);
    g_rng = 2024;
    for (int i = 0; i < n; i++) l[i] = (float)(0.05 * gauss());
    reference(l, n, 1.0, 0, 0.99, 0.0, ref, NULL);
    int kept = 0;
    for (int i = 0; i < n; i++) kept += ref[i] > 0.0;
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.top_p = 0.99f;
    p.seed = 8;
    pgd_sampler *s = make(&p, n);
    REQUIRE(s);
    pgd_sample_result r;
    int outside = 0;
    double t0 = now_us();
    for (int i = 0; i < 100; i++) {
        REQUIRE(pgd_sampler_sample(s, l, &r) == 0);
        outside += !(ref[r.token] > 0.0);
    }
    fprintf(stderr, "    flat n_vocab %d top-p 0.99: kept %d, %.1f cpu us/sample\n", n, kept,
            (now_us() - t0) / 100);
    CHECK_EQ_INT(outside, 0);
    CHECK(kept > n / 2);
    CHECK(compare_distribution_x(l, n, 1.0f, 0, 0.99f, 0.0f, 1) == 1);
    pgd_sampler_destroy(s);
    free(ref);
    free(l);
}

/* A spec's top_k of the vocabulary or more is off: the same token as top_k 0, nothing read
 * past the row (ASan would see it). */
static void test_spec_top_k_past_vocab(void) {
    enum { V = 40 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)(gauss() * 2.0);
    pgd_sampler_scratch *sc = NULL;
    REQUIRE(pgd_sampler_scratch_create(V, &sc) == 0);
    pgd_sample_spec off = {.temperature = 0.9f, .top_p = 1.0f}, big = off;
    big.top_k = V + 7;
    for (uint64_t k = 1; k <= 20; k++) {
        const uint64_t draw = k * 0x9E3779B97F4A7C15ull;
        pgd_sample_result a, b;
        REQUIRE(pgd_sample_logits(l, V, &off, draw, sc, &a) == 0);
        REQUIRE(pgd_sample_logits(l, V, &big, draw, sc, &b) == 0);
        CHECK_EQ_INT(a.token, b.token);
    }
    pgd_sampler_scratch_destroy(sc);
}

/* The device contract: a sequence sampled by a backend (the host draws the random bits,
 * pgd_sample_logits runs steps 4-9 where the logits are) gets the tokens and logprobs the host
 * sampler would give, sample after sample, for every mode the backend may take. */
static void test_device_rows_match_host(void) {
    enum { V = 3000, STEPS = 40 };
    float *l = malloc(V * sizeof *l);
    pgd_sampler_scratch *sc = NULL;
    REQUIRE(l && pgd_sampler_scratch_create(V, &sc) == 0);
    int n_checked = 0, n_draws = 0;
    for (int cfg = 0; cfg < 48; cfg++) {
        pgd_sampling_params p;
        pgd_sampling_params_default(&p);
        p.temperature = (float[]){0.0f, 0.7f, 1.0f, 1.6f}[cfg % 4];
        p.top_k = (int32_t[]){0, 5, 200}[(cfg / 4) % 3];
        p.top_p = (float[]){1.0f, 0.9f}[(cfg / 12) % 2];
        p.min_p = (float[]){0.0f, 0.05f}[(cfg / 24) % 2];
        p.logprobs = cfg % 3 == 0;
        p.top_logprobs = p.logprobs ? 5 : 0;
        p.seed = 1000 + (uint64_t)cfg;
        pgd_sampler *host = make(&p, V), *dev = make(&p, V);
        REQUIRE(host && dev);
        CHECK(pgd_sampler_on_device(dev));
        for (int step = 0; step < STEPS; step++) {
            for (int i = 0; i < V; i++) l[i] = (float)(gauss() * 3.0);
            pgd_sample_result a, b;
            REQUIRE(pgd_sampler_sample(host, l, &a) == 0);
            pgd_sample_spec spec;
            pgd_sampler_spec(dev, &spec);
            uint64_t draw = pgd_sampler_draw(dev);
            n_draws += draw != 0;
            REQUIRE(pgd_sample_logits(l, V, &spec, draw, sc, &b) == 0);
            CHECK_EQ_INT(a.token, b.token);
            CHECK(a.logprob == b.logprob && a.n_top == b.n_top);
            for (int k = 0; k < a.n_top && k < b.n_top; k++)
                CHECK(a.top[k].token == b.top[k].token && a.top[k].logprob == b.top[k].logprob);
            pgd_sampler_accept(host, a.token);
            pgd_sampler_accept(dev, b.token);
            n_checked++;
        }
        pgd_sampler_destroy(host);
        pgd_sampler_destroy(dev);
    }
    /* penalties and biases keep a sequence on the host */
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.presence_penalty = 0.5f;
    pgd_sampler *s = make(&p, V);
    CHECK(!pgd_sampler_on_device(s));
    pgd_sampler_destroy(s);
    fprintf(stderr, "    %d samples, %d with random bits\n", n_checked, n_draws);
    CHECK(n_draws >= 36 * STEPS - 5);
    pgd_sampler_scratch_destroy(sc);
    free(l);
}

typedef struct made_vocab {
    const char *bytes;
    const uint32_t *off;
} made_vocab;

static const char *made_piece(const void *ctx, int32_t t, size_t *len) {
    const made_vocab *m = ctx;
    *len = m->off[t + 1] - m->off[t];
    return m->bytes + m->off[t];
}

/* JSON-constrained sampling (pgd_sampler_constrain_json) over a vocabulary made here: the ASCII
 * bytes, tokens of several bytes (structure, a literal, whitespace, a two-byte UTF-8 character
 * whole and split in two), an end-of-generation token, another control token (no bytes) and an
 * end-of-generation token with bytes.
 * Random walks under random logits, nudged towards closing brackets as they grow: each one
 * that ends has written what jansson parses as an object and ends as it closes (no trailing
 * whitespace), no walk ends early, the other control token never comes, and the sampler is a
 * host one. */
static void test_json_constraint(void) {
    static const char *const multi[] = {"{\"",      "\":",  "true", "  ",
                                        "\xc3\xa9", "\xc3", "\xa9", "}\n"};
    /* EOG2: an ending token with bytes ("x", a user-defined end token's text), which inside a
     * string would be text: it too must wait for the whole object */
    enum { N_ASCII = 128, N_MULTI = 8, EOG = N_ASCII + N_MULTI, CONTROL, EOG2, V };
    pgd_buf bytes = PGD_BUF_INIT;
    uint32_t off[V + 1];
    off[0] = 0;
    for (int t = 0; t < V; t++) {
        if (t < N_ASCII) {
            char c = (char)t;
            pgd_buf_append(&bytes, &c, 1);
        } else if (t < EOG) {
            pgd_buf_puts(&bytes, multi[t - N_ASCII]);
        } else if (t == EOG2) {
            pgd_buf_puts(&bytes, "x");
        }
        off[t + 1] = (uint32_t)bytes.len;
    }
    int32_t eog[2] = {EOG, EOG2};
    made_vocab mv = {bytes.data, off};
    uint32_t plain[V];
    for (int t = 0; t < V; t++)
        plain[t] = pgd_json_plain_chars((const uint8_t *)bytes.data + off[t], off[t + 1] - off[t]);
    CHECK_EQ_INT((int)plain['a'], 1);
    CHECK_EQ_INT((int)plain[N_ASCII + 4], 1); /* é whole */
    CHECK(plain[N_ASCII + 5] == UINT32_MAX);  /* half of it */
    CHECK(plain['"'] == UINT32_MAX && plain[CONTROL] == UINT32_MAX);
    /* with the table (plain text taken without trying) and without: the same masks */
    pgd_vocab_bytes vb = {made_piece, &mv, V, eog, 2, plain};
    pgd_vocab_bytes slow = {made_piece, &mv, V, eog, 2, NULL};
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    float logits[V], masked[V], masked_slow[V];
    int diff = 0;
    int ended = 0, ended2 = 0, control = 0, beyond = 0;
    for (int walk = 0; walk < 200; walk++) {
        p.seed = (uint64_t)walk;
        pgd_sampler *s, *s2;
        REQUIRE(pgd_sampler_create(&p, V, NULL, &s) == 0);
        REQUIRE(pgd_sampler_create(&p, V, NULL, &s2) == 0);
        pgd_sampler_constrain_json(s, &vb, pgd_json_schema_object());
        pgd_sampler_constrain_json(s2, &slow, pgd_json_schema_object());
        CHECK(!pgd_sampler_on_device(s));
        pgd_buf out = PGD_BUF_INIT;
        bool done = false;
        for (int step = 0; step < 3000 && !done; step++) {
            for (int t = 0; t < V; t++) logits[t] = (float)(4.0 * urand());
            float push = (float)step / 40.0f; /* towards an end */
            logits['}'] += push, logits[']'] += push, logits['"'] += push, logits[EOG] += push;
            logits[EOG2] += 3.0f;     /* likely whenever allowed: inside strings, were it text */
            logits[CONTROL] += 50.0f; /* most likely of all, were it allowed */
            pgd_sampler_process_logits(s, logits, masked);
            pgd_sampler_process_logits(s2, logits, masked_slow);
            for (int t = 0; t < V; t++) diff += isinf(masked[t]) != isinf(masked_slow[t]);
            pgd_sample_result r;
            int src = pgd_sampler_sample(s, logits, &r);
            if (src) {
                fprintf(stderr, "    walk %d step %d: %s after %zu bytes:", walk, step,
                        pgd_error_detail(), out.len);
                for (size_t q = 0; q < out.len; q++)
                    fprintf(stderr, " %02x", (unsigned char)out.data[q]);
                fprintf(stderr, "\n");
            }
            REQUIRE(src == 0);
            control += r.token == CONTROL;
            if (r.token == EOG || r.token == EOG2) {
                done = true;
                ended2 += r.token == EOG2;
            } else {
                pgd_buf_append(&out, bytes.data + off[r.token], off[r.token + 1] - off[r.token]);
            }
            REQUIRE(pgd_sampler_accept(s, r.token) == 0);
            REQUIRE(pgd_sampler_accept(s2, r.token) == 0);
        }
        if (done) {
            ended++;
            json_error_t e;
            json_t *v = json_loadb(out.data ? out.data : "", out.len, JSON_ALLOW_NUL, &e);
            bool limit = !v && (strstr(e.text, "overflow") || strstr(e.text, "too big"));
            beyond += limit; /* a number past a double: JSON, but past jansson's limits */
            CHECK(limit || (v != NULL && json_is_object(v)));
            /* it ends as the object closes: no whitespace but what the closing token holds */
            size_t k = out.len;
            if (k >= 2 && !memcmp(out.data + k - 2, "}\n", 2)) k--;
            CHECK(k && out.data[k - 1] == '}');
            if (!limit && (!v || !json_is_object(v)))
                fprintf(stderr, "    walk %d: %s: %.*s\n", walk, v ? "not an object" : e.text,
                        (int)out.len, out.data);
            json_decref(v);
        }
        pgd_buf_free(&out);
        pgd_sampler_destroy(s);
        pgd_sampler_destroy(s2);
    }
    CHECK_EQ_INT(diff, 0);
    fprintf(stderr, "    %d of 200 walks ended, %d with a number past jansson's limits\n", ended,
            beyond);
    CHECK(ended >= 150 && beyond < 20 && ended2 > 0);
    CHECK_EQ_INT(control, 0);
    pgd_buf_free(&bytes);
}

/* vLLM's min_tokens: held ids are never drawn, and carry no probability, until the output has
 * the minimum; the sampler stays on the host meanwhile; then they come back. */
static void test_hold_ends(void) {
    const int V = 8;
    float logits[8] = {0.5f, 1.0f, 0.0f, 4.0f, 2.0f, -1.0f, 3.5f, 0.25f}; /* 3, then 6, then 4 */
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    p.temperature = 0.0f;
    pgd_sampler *s = make(&p, V);
    CHECK(pgd_sampler_on_device(s));
    const int32_t ends[2] = {3, 6};
    REQUIRE(pgd_sampler_hold_ends(s, ends, 2, 2) == 0);
    for (int k = 0; k < 3; k++) {
        CHECK(pgd_sampler_on_device(s) == (k == 2));
        pgd_sample_result r;
        REQUIRE(pgd_sampler_sample(s, logits, &r) == 0);
        CHECK_EQ_INT(r.token, k < 2 ? 4 : 3);
        REQUIRE(pgd_sampler_accept(s, r.token) == 0);
    }
    pgd_sampler_destroy(s);
    /* sampled: the held ids' probability is 0 while held, their softmax share after */
    p.temperature = 1.0f;
    s = make(&p, V);
    REQUIRE(pgd_sampler_hold_ends(s, ends, 2, 1) == 0);
    float probs[8];
    REQUIRE(pgd_sampler_distribution(s, logits, probs) == 0);
    CHECK(probs[3] == 0.0f && probs[6] == 0.0f);
    double z = 0.0;
    for (int i = 0; i < V; i++) z += i == 3 || i == 6 ? 0.0 : exp((double)logits[i]);
    CHECK_NEAR(probs[4], exp(2.0) / z, 1e-6);
    REQUIRE(pgd_sampler_accept(s, 4) == 0);
    REQUIRE(pgd_sampler_distribution(s, logits, probs) == 0);
    z = 0.0;
    for (int i = 0; i < V; i++) z += exp((double)logits[i]);
    CHECK_NEAR(probs[3], exp(4.0) / z, 1e-6);
    /* bad holds */
    const int32_t out_of_range[1] = {8};
    CHECK_EQ_INT(pgd_sampler_hold_ends(s, out_of_range, 1, 3), PGD_EINVAL);
    CHECK_EQ_INT(pgd_sampler_hold_ends(s, ends, PGD_SAMPLER_MAX_HELD + 1, 3), PGD_EINVAL);
    pgd_sampler_destroy(s);
}

int main(void) {
    RUN(test_gamma_q);
    RUN(test_json_constraint);
    RUN(test_temperature);
    RUN(test_top_k);
    RUN(test_top_p);
    RUN(test_min_p);
    RUN(test_combination);
    RUN(test_larger_vocab_fit);
    RUN(test_ties);
    RUN(test_min_p_one);
    RUN(test_fit_rejects_wrong_distribution);
    RUN(test_seed_determinism);
    RUN(test_device_rows_match_host);
    RUN(test_spec_top_k_past_vocab);
    RUN(test_greedy);
    RUN(test_logit_bias);
    RUN(test_repetition_penalty);
    RUN(test_frequency_presence);
    RUN(test_penalty_order);
    RUN(test_logprobs);
    RUN(test_validation);
    RUN(test_distribution_grid);
    RUN(test_distribution_keeps_rng);
    RUN(test_large_vocab);
    RUN(test_flat_top_p);
    RUN(test_hold_ends);
    return test_summary();
}
