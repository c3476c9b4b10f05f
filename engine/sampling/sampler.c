/*
 * engine/sampling/sampler.c — see sampler.h for the order of operations and the contract.
 *
 * Owns: per-sequence sampler state (RNG, seen-token table, logit-bias copy) and the scratch
 * (work[n_vocab], cand[n_vocab], bsum[n_blocks]).
 *
 * How one call stays cheap over 50k-150k logits (no full-vocabulary sort, ever):
 *   - the dense passes (sanitise + max, exp + block sums, raw log-sum-exp) are written with
 *     GCC/Clang vector extensions (4 floats, SSE2 on x86-64, NEON on arm64) and a polynomial
 *     exp, so they vectorise at -O2 without -ffast-math; a row's result depends only on the row;
 *   - temperature-only and min-p-only draws walk per-block sums (BLOCK logits a block), then
 *     one block;
 *   - top-k keeps a k-element heap, testing 16 logits at a time against the heap's worst, then
 *     sorts its k candidates into the candidate order (sampler.h);
 *   - top-p without top-k keeps only ids with p >= some cut, then finds the nucleus among them
 *     by a mass-weighted quickselect (expected linear time) and sorts only the nucleus (the
 *     candidate order's running mass decides its exact end: it may take an id or two more or
 *     fewer than the quickselect's sums, which run in another order). The cut is first a guess
 *     (2^-8, then 2^-16 of the max), kept if the ids above it carry the top-p mass, then
 *     (1 - top_p) * Z / (2 n_vocab): the ids below that weigh less than (1 - top_p) / 2 of the
 *     mass in all, so the nucleus is above it; last, every id with p > 0 (a rounding shortfall).
 *     A flat distribution has a large nucleus, and sorting it is the price of one order the
 *     device can reproduce;
 *   - top_logprobs keeps a sorted list of at most 20, again skipping 16 logits at a time.
 * Ties are broken by the lower id everywhere, so results depend only on the logits and the seed.
 *
 * Threading: none of its own; see sampler.h.
 */
#include "engine/sampling/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/error.h"
#include "engine/sampling/json_fsm.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define BLOCK 64 /* logits per block sum (float partial sums stay short) */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

typedef struct cand {
    float p; /* a logit while selecting top-k, then an unnormalised probability */
    int32_t id;
} cand;

struct pgd_sampler_scratch {
    int32_t n_vocab;
    float *work;  /* [n_vocab] processed logits, then probabilities */
    cand *cand;   /* [n_vocab] candidates, or the top-k heap */
    cand *sorted; /* [n_vocab] the radix sort's other buffer */
    double *bsum; /* [ceil(n_vocab / BLOCK)] sums of work per block */
};

typedef struct tok_entry {
    int32_t id;         /* -1: empty slot */
    uint32_t count;     /* times in the output */
    uint32_t in_prompt; /* seen in the prompt (tracked only with a repetition penalty) */
} tok_entry;

struct pgd_sampler {
    pgd_sampling_params p; /* p.logit_bias points at `bias` */
    pgd_logit_bias *bias;  /* [p.n_logit_bias] */
    int32_t n_vocab;
    int32_t top_k; /* effective: 0 when off */
    bool greedy, use_top_p, use_min_p, rep, freq_pres;
    uint64_t rng[4]; /* xoshiro256** state */
    tok_entry *tab;  /* [tab_cap] open addressing, tab_cap a power of two */
    uint32_t tab_cap, tab_len;
    int64_t n_output;
    pgd_sampler_scratch *sc;
    bool own_sc;
    const pgd_vocab_bytes *json_v;      /* pgd_sampler_constrain_json; NULL: unconstrained */
    const pgd_json_schema *schema;      /* counted reference */
    pgd_json_fsm json;                  /* the output so far, as JSON the schema allows */
    int32_t held[PGD_SAMPLER_MAX_HELD]; /* pgd_sampler_hold_ends: ids not drawn ... */
    int n_held;
    int64_t hold_until; /* ... while n_output is below this */
};

/* ---- parameters --------------------------------------------------------------------------- */

void pgd_sampling_params_default(pgd_sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
}

static int bad_param(const char **param, const char *name, const char *fmt, double v) {
    if (param) *param = name;
    return pgd_error_set(PGD_EINVAL, fmt, v);
}

int pgd_sampling_params_validate(const pgd_sampling_params *p, int32_t n_vocab,
                                 const char **param) {
    if (param) *param = NULL;
    if (n_vocab <= 0)
        return bad_param(param, "n_vocab", "n_vocab must be positive (got %g)", (double)n_vocab);
    if (!(p->temperature >= 0.0f && p->temperature <= PGD_SAMPLER_MAX_TEMPERATURE))
        return bad_param(param, "temperature", "temperature must be between 0 and 100 (got %g)",
                         (double)p->temperature);
    if (p->top_k < -1)
        return bad_param(param, "top_k", "top_k must be -1 or 0 (off) or positive (got %g)",
                         (double)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return bad_param(param, "top_p", "top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return bad_param(param, "min_p", "min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f && isfinite(p->repetition_penalty)))
        return bad_param(param, "repetition_penalty",
                         "repetition_penalty must be positive and finite (got %g)",
                         (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return bad_param(param, "presence_penalty",
                         "presence_penalty must be between -2 and 2 (got %g)",
                         (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return bad_param(param, "frequency_penalty",
                         "frequency_penalty must be between -2 and 2 (got %g)",
                         (double)p->frequency_penalty);
    if (p->n_logit_bias && !p->logit_bias)
        return bad_param(param, "logit_bias", "logit_bias: %g entries but no array",
                         (double)p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const pgd_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab) {
            if (param) *param = "logit_bias";
            return pgd_error_set(PGD_EINVAL, "logit_bias: token id %d is outside [0, %d)",
                                 (int)b->token, (int)n_vocab);
        }
        if (!(b->bias >= -100.0f && b->bias <= 100.0f)) {
            if (param) *param = "logit_bias";
            return pgd_error_set(PGD_EINVAL,
                                 "logit_bias: bias %g for token %d must be between -100 and 100",
                                 (double)b->bias, (int)b->token);
        }
    }
    if (p->top_logprobs < 0 || p->top_logprobs > PGD_SAMPLER_MAX_TOP_LOGPROBS)
        return bad_param(param, "top_logprobs", "top_logprobs must be between 0 and 20 (got %g)",
                         (double)p->top_logprobs);
    if (p->top_logprobs > 0 && !p->logprobs)
        return bad_param(param, "top_logprobs", "top_logprobs (%g) needs logprobs to be true",
                         (double)p->top_logprobs);
    return 0;
}

/* ---- RNG: xoshiro256** seeded by splitmix64 --------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* uniform in [0, 1) with 53 random bits */
uint64_t pgd_sampler_random_seed(void) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) == (ssize_t)sizeof seed) return seed;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)(uintptr_t)&seed;
    return splitmix64(&x);
}

/* ---- vector helpers ----------------------------------------------------------------------- */

static inline v4f v_splat(float x) {
    return (v4f){x, x, x, x};
}

static inline v4f v_load(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* the n < 4 floats at p, padded with `fill` */
static inline v4f v_load_tail(const float *p, size_t n, float fill) {
    v4f v = v_splat(fill);
    for (size_t i = 0; i < n; i++) v[i] = p[i];
    return v;
}

static inline void v_store(float *p, v4f v) {
    memcpy(p, &v, sizeof v);
}

static inline v4f v_select(v4i mask, v4f a, v4f b) {
    return (v4f)((mask & (v4i)a) | (~mask & (v4i)b));
}

static inline int v_any(v4i m) {
#if defined(__SSE2__)
    return _mm_movemask_epi8((__m128i)m) != 0;
#else
    return (m[0] | m[1] | m[2] | m[3]) != 0;
#endif
}

/* is any of the 16 floats at p >= t (ge) or > t (gt)?  NaN compares false */
static inline int any16_ge(const float *p, v4f t) {
    return v_any((v_load(p) >= t) | (v_load(p + 4) >= t) | (v_load(p + 8) >= t) |
                 (v_load(p + 12) >= t));
}

static inline int any16_gt(const float *p, v4f t) {
    return v_any((v_load(p) > t) | (v_load(p + 4) > t) | (v_load(p + 8) > t) |
                 (v_load(p + 12) > t));
}

static inline float v_hmax(v4f v) {
    float a = v[0] > v[1] ? v[0] : v[1];
    float b = v[2] > v[3] ? v[2] : v[3];
    return a > b ? a : b;
}

/* NaN -> -inf, +inf -> FLT_MAX */
static inline v4f v_sanitize(v4f v) {
    v = v_select(v != v, v_splat(-INFINITY), v);
    return v_select(v > v_splat(FLT_MAX), v_splat(FLT_MAX), v);
}

static inline float sanitize(float x) {
    if (x != x) return -INFINITY;
    return x > FLT_MAX ? FLT_MAX : x;
}

/* exp(x) for x <= 0 (larger x is taken as 0; NaN and x < -87 give 0). Cephes' expf polynomial:
 * relative error about 2e-7; exp(0) is exactly 1. */
static inline v4f v_exp(v4f x) {
    v4i ok = x >= v_splat(-87.0f);
    x = (v4f)((v4i)x & ok);
    x = v_select(x > v_splat(0.0f), v_splat(0.0f), x);
    v4f n = (x * v_splat(1.44269504088896341f) + v_splat(12582912.0f)) - v_splat(12582912.0f);
    v4f r = x - n * v_splat(0.693359375f) + n * v_splat(2.12194440e-4f);
    v4f y = v_splat(1.9875691500e-4f);
    y = y * r + v_splat(1.3981999507e-3f);
    y = y * r + v_splat(8.3334519073e-3f);
    y = y * r + v_splat(4.1665795894e-2f);
    y = y * r + v_splat(1.6666665459e-1f);
    y = y * r + v_splat(5.0000001201e-1f);
    y = y * (r * r) + r + v_splat(1.0f);
    v4i e = (__builtin_convertvector(n, v4i) + 127) << 23;
    y = y * (v4f)e;
    return (v4f)((v4i)y & ok);
}

static inline float exp1(float x) {
    return v_exp(v_splat(x))[0];
}

/* ---- dense passes ------------------------------------------------------------------------- */

/* Sanitises w[n] in place; returns its max. */
static float sanitize_max(float *w /* [n] */, size_t n) {
    v4f acc[4] = {v_splat(-INFINITY), v_splat(-INFINITY), v_splat(-INFINITY), v_splat(-INFINITY)};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; k++) {
            v4f v = v_sanitize(v_load(w + i + 4 * k));
            v_store(w + i + 4 * k, v);
            acc[k] = v_select(v > acc[k], v, acc[k]);
        }
    }
    for (; i + 4 <= n; i += 4) {
        v4f v = v_sanitize(v_load(w + i));
        v_store(w + i, v);
        acc[0] = v_select(v > acc[0], v, acc[0]);
    }
    for (int k = 1; k < 4; k++) acc[0] = v_select(acc[k] > acc[0], acc[k], acc[0]);
    float m = v_hmax(acc[0]);
    for (; i < n; i++) {
        w[i] = sanitize(w[i]);
        if (w[i] > m) m = w[i];
    }
    return m;
}

/* max of sanitised l[n], l untouched */
static float raw_max(const float *l /* [n] */, size_t n) {
    v4f acc[4] = {v_splat(-INFINITY), v_splat(-INFINITY), v_splat(-INFINITY), v_splat(-INFINITY)};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; k++) {
            v4f v = v_sanitize(v_load(l + i + 4 * k));
            acc[k] = v_select(v > acc[k], v, acc[k]);
        }
    }
    for (; i + 4 <= n; i += 4) {
        v4f v = v_sanitize(v_load(l + i));
        acc[0] = v_select(v > acc[0], v, acc[0]);
    }
    for (int k = 1; k < 4; k++) acc[0] = v_select(acc[k] > acc[0], acc[k], acc[0]);
    float m = v_hmax(acc[0]);
    for (; i < n; i++) {
        float v = sanitize(l[i]);
        if (v > m) m = v;
    }
    return m;
}

/* w[i] = exp((w[i] - m) * inv_t), zeroed below `lowest`; bsum[b] = sum of block b. Returns the
 * total. w must be sanitised. */
static double exp_pass(float *w /* [n] */, size_t n, float m, float inv_t, float lowest,
                       double *bsum /* [ceil(n / BLOCK)] */) {
    double z = 0.0;
    v4f vm = v_splat(m), vt = v_splat(inv_t), vf = v_splat(lowest);
    for (size_t b0 = 0, blk = 0; b0 < n; b0 += BLOCK, blk++) {
        size_t b1 = b0 + BLOCK < n ? b0 + BLOCK : n, i = b0;
        v4f acc = v_splat(0.0f);
        for (; i + 4 <= b1; i += 4) {
            v4f p0 = v_exp((v_load(w + i) - vm) * vt);
            p0 = (v4f)((v4i)p0 & (p0 >= vf));
            v_store(w + i, p0);
            acc += p0;
        }
        for (; i < b1; i += 4) {
            size_t k = b1 - i < 4 ? b1 - i : 4;
            v4f p = v_exp((v_load_tail(w + i, k, -INFINITY) - vm) * vt);
            p = (v4f)((v4i)p & (p >= vf));
            for (size_t j = 0; j < k; j++) w[i + j] = p[j];
            acc += p;
        }
        bsum[blk] = ((double)acc[0] + (double)acc[1]) + ((double)acc[2] + (double)acc[3]);
        z += bsum[blk];
    }
    return z;
}

/* sum of exp(sanitise(l[i]) - m), l untouched */
static double raw_sumexp(const float *l /* [n] */, size_t n, float m) {
    double z = 0.0;
    v4f vm = v_splat(m);
    for (size_t b0 = 0; b0 < n; b0 += BLOCK) {
        size_t b1 = b0 + BLOCK < n ? b0 + BLOCK : n, i = b0;
        v4f acc = v_splat(0.0f);
        for (; i + 4 <= b1; i += 4) acc += v_exp(v_sanitize(v_load(l + i)) - vm);
        if (i < b1) acc += v_exp(v_sanitize(v_load_tail(l + i, b1 - i, -INFINITY)) - vm);
        z += ((double)acc[0] + (double)acc[1]) + ((double)acc[2] + (double)acc[3]);
    }
    return z;
}

/* ---- selection ---------------------------------------------------------------------------- */

/* a ranks before b: more probable, then lower id */
static inline int better(const cand *a, const cand *b) {
    return (a->p > b->p) | ((a->p == b->p) & (a->id < b->id)); /* no branches */
}

static inline void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* heaps of candidates with the worst at the root (top-k keeps the k best in one) */
static inline int worse(const cand *a, const cand *b) {
    return a->p < b->p || (a->p == b->p && a->id > b->id);
}

static void sift_down(cand *h, size_t k, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < k && worse(&h[l], &h[m])) m = l;
        if (r < k && worse(&h[r], &h[m])) m = r;
        if (m == i) return;
        swap_cand(&h[i], &h[m]);
        i = m;
    }
}

/* sorts c[n] best first without allocating (the quickselect's fallback) */
static void heap_sort(cand *c, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(c, n, i);
    for (size_t end = n; end > 1; end--) {
        swap_cand(&c[0], &c[end - 1]);
        sift_down(c, end - 1, 0);
    }
}

static void insertion_sort(cand *c, size_t n) {
    for (size_t i = 1; i < n; i++) {
        cand x = c[i];
        size_t j = i;
        while (j > 0 && better(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/* Reorders c[n] so that c[0..k) is the smallest set of best-ranked candidates whose mass
 * reaches `target`, and returns k (n when the whole mass falls short). c[0..k) is not sorted.
 * Mass-weighted quickselect, median-of-three pivots, a heap sort when the depth budget runs
 * out. */
static size_t nucleus(cand *c /* [n] */, size_t n, double target) {
    size_t lo = 0, hi = n;
    double acc = 0.0;
    int budget = 16;
    for (size_t m = n; m > 1; m >>= 1) budget += 2;
    while (hi - lo > 16) {
        if (budget-- == 0) {
            heap_sort(c + lo, hi - lo);
            goto walk;
        }
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of c[lo], c[mid], c[last] into c[last] */
        if (better(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (better(&c[last], &c[lo])) swap_cand(&c[last], &c[lo]);
        if (better(&c[mid], &c[last])) swap_cand(&c[mid], &c[last]);
        cand piv = c[last];
        size_t a = lo;
        double mass = 0.0;
        for (size_t i = lo; i < last; i++) { /* branchless Lomuto */
            cand x = c[i];
            int b = better(&x, &piv);
            c[i] = c[a];
            c[a] = x;
            mass += (double)x.p * (double)b;
            a += (size_t)b;
        }
        swap_cand(&c[a], &c[last]);
        if (acc + mass >= target) {
            hi = a;
        } else if (acc + mass + piv.p >= target) {
            return a + 1;
        } else {
            acc += mass + piv.p;
            lo = a + 1;
        }
    }
    insertion_sort(c + lo, hi - lo);
walk:
    for (size_t i = lo; i < hi; i++) {
        acc += c[i].p;
        if (acc >= target) return i + 1;
    }
    return hi;
}

static inline void heap_offer(cand *h, size_t k, float v, int32_t id) {
    if (v > h[0].p) { /* ids arrive in increasing order: an equal logit ranks lower */
        h[0].p = v;
        h[0].id = id;
        sift_down(h, k, 0);
    }
}

/* h[0..k) = the k best of w[n] (sanitised), in heap order */
static void top_k_select(const float *w /* [n] */, size_t n, size_t k, cand *h /* [k] */) {
    for (size_t i = 0; i < k; i++) {
        h[i].p = w[i];
        h[i].id = (int32_t)i;
    }
    for (size_t i = k / 2; i-- > 0;) sift_down(h, k, i);
    size_t i = k;
    for (; i + 16 <= n; i += 16) {
        if (!any16_gt(w + i, v_splat(h[0].p))) continue;
        for (size_t j = i; j < i + 16; j++) heap_offer(h, k, w[j], (int32_t)j);
    }
    for (; i < n; i++) heap_offer(h, k, w[i], (int32_t)i);
}

/* the n_top best sanitised raw logits, sorted, into top[] (logits for now) */
static inline void top_offer(pgd_token_logprob *top, int *cnt, int n_top, float v, size_t id) {
    if (*cnt == n_top && !(v > top[n_top - 1].logprob)) return; /* later ids lose ties */
    int j = *cnt < n_top ? (*cnt)++ : n_top - 1;
    while (j > 0 && v > top[j - 1].logprob) {
        top[j] = top[j - 1];
        j--;
    }
    top[j].token = (int32_t)id;
    top[j].logprob = v;
}

static void top_raw(const float *l /* [n] */, size_t n, int n_top,
                    pgd_token_logprob *top /* [n_top] */) {
    int cnt = 0;
    size_t i = 0;
    for (; i < n && cnt < n_top; i++) top_offer(top, &cnt, n_top, sanitize(l[i]), i);
    for (; i + 16 <= n; i += 16) { /* NaN fails the test, +inf passes and is sanitised */
        if (!any16_gt(l + i, v_splat(top[n_top - 1].logprob))) continue;
        for (size_t j = i; j < i + 16; j++) top_offer(top, &cnt, n_top, sanitize(l[j]), j);
    }
    for (; i < n; i++) top_offer(top, &cnt, n_top, sanitize(l[i]), i);
}

/* c[0..k) = the ids with p[i] >= cut, in id order; returns k and their mass in *mass */
static size_t collect(const float *p /* [n] */, size_t n, float cut, cand *c /* [n] */,
                      double *mass) {
    size_t k = 0, i = 0;
    v4f vc = v_splat(cut);
    for (; i + 16 <= n; i += 16) {
        if (!any16_ge(p + i, vc)) continue;
        for (size_t j = i; j < i + 16; j++) { /* branchless: k <= j, c[k] is in bounds */
            c[k].p = p[j];
            c[k].id = (int32_t)j;
            k += p[j] >= cut;
        }
    }
    for (; i < n; i++) {
        c[k].p = p[i];
        c[k].id = (int32_t)i;
        k += p[i] >= cut;
    }
    double s = 0.0;
    for (size_t j = 0; j < k; j++) s += c[j].p;
    *mass = s;
    return k;
}

/* ---- scratch and sampler lifecycle -------------------------------------------------------- */

int pgd_sampler_scratch_create(int32_t n_vocab, pgd_sampler_scratch **out) {
    *out = NULL;
    if (n_vocab <= 0) return pgd_error_set(PGD_EINVAL, "sampler: n_vocab %d", (int)n_vocab);
    size_t n = (size_t)n_vocab, nb = (n + BLOCK - 1) / BLOCK;
    pgd_sampler_scratch *sc = calloc(1, sizeof *sc);
    if (!sc) goto fail;
    sc->n_vocab = n_vocab;
    sc->work = malloc(n * sizeof *sc->work);
    sc->cand = malloc(n * sizeof *sc->cand);
    sc->sorted = malloc(n * sizeof *sc->sorted);
    sc->bsum = malloc(nb * sizeof *sc->bsum);
    if (!sc->work || !sc->cand || !sc->sorted || !sc->bsum) goto fail;
    *out = sc;
    return 0;
fail:
    pgd_sampler_scratch_destroy(sc);
    return pgd_error_set(PGD_ENOMEM, "sampler: scratch for %d tokens", (int)n_vocab);
}

void pgd_sampler_scratch_destroy(pgd_sampler_scratch *sc) {
    if (!sc) return;
    free(sc->work);
    free(sc->cand);
    free(sc->sorted);
    free(sc->bsum);
    free(sc);
}

int pgd_sampler_create(const pgd_sampling_params *p, int32_t n_vocab, pgd_sampler_scratch *scratch,
                       pgd_sampler **out) {
    *out = NULL;
    int rc = pgd_sampling_params_validate(p, n_vocab, NULL);
    if (rc) return rc;
    if (scratch && scratch->n_vocab < n_vocab)
        return pgd_error_set(PGD_EINVAL, "sampler: scratch for %d tokens, vocabulary of %d",
                             (int)scratch->n_vocab, (int)n_vocab);
    pgd_sampler *s = calloc(1, sizeof *s);
    if (!s) return pgd_error_set(PGD_ENOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    if (p->n_logit_bias) {
        s->bias = malloc(p->n_logit_bias * sizeof *s->bias);
        if (!s->bias) {
            rc = pgd_error_set(PGD_ENOMEM, "sampler: logit_bias copy");
            goto fail;
        }
        memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    s->greedy = p->temperature < PGD_SAMPLER_GREEDY_EPS;
    s->top_k = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : 0;
    s->use_top_p = p->top_p < 1.0f;
    s->use_min_p = p->min_p > 0.0f;
    s->rep = p->repetition_penalty != 1.0f;
    s->freq_pres = p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    if (scratch) {
        s->sc = scratch;
    } else {
        rc = pgd_sampler_scratch_create(n_vocab, &s->sc);
        if (rc) goto fail;
        s->own_sc = true;
    }
    *out = s;
    return 0;
fail:
    pgd_sampler_destroy(s);
    return rc;
}

void pgd_sampler_destroy(pgd_sampler *s) {
    if (!s) return;
    if (s->own_sc) pgd_sampler_scratch_destroy(s->sc);
    pgd_json_schema_unref(s->schema);
    free(s->bias);
    free(s->tab);
    free(s);
}

/* ---- seen-token table --------------------------------------------------------------------- */

static inline uint32_t tab_slot(int32_t id, uint32_t mask) {
    return ((uint32_t)id * 0x9E3779B1u) & mask;
}

static int tab_grow(pgd_sampler *s) {
    uint32_t cap = s->tab_cap ? s->tab_cap * 2 : 64;
    tok_entry *t = malloc((size_t)cap * sizeof *t);
    if (!t) return pgd_error_set(PGD_ENOMEM, "sampler: token table of %u", (unsigned)cap);
    for (uint32_t i = 0; i < cap; i++) t[i].id = -1;
    for (uint32_t i = 0; i < s->tab_cap; i++) {
        if (s->tab[i].id < 0) continue;
        uint32_t j = tab_slot(s->tab[i].id, cap - 1);
        while (t[j].id >= 0) j = (j + 1) & (cap - 1);
        t[j] = s->tab[i];
    }
    free(s->tab);
    s->tab = t;
    s->tab_cap = cap;
    return 0;
}

static int tab_get(pgd_sampler *s, int32_t id, tok_entry **e) {
    if ((s->tab_len + 1) * 2 > s->tab_cap) {
        int rc = tab_grow(s);
        if (rc) return rc;
    }
    uint32_t mask = s->tab_cap - 1, j = tab_slot(id, mask);
    while (s->tab[j].id >= 0 && s->tab[j].id != id) j = (j + 1) & mask;
    if (s->tab[j].id < 0) {
        s->tab[j].id = id;
        s->tab[j].count = 0;
        s->tab[j].in_prompt = 0;
        s->tab_len++;
    }
    *e = &s->tab[j];
    return 0;
}

int pgd_sampler_accept_prompt(pgd_sampler *s, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return pgd_error_set(PGD_EINVAL, "sampler: prompt token %d outside [0, %d)",
                                 (int)ids[i], (int)s->n_vocab);
    if (!s->rep) return 0; /* only the repetition penalty looks at the prompt */
    for (size_t i = 0; i < n; i++) {
        tok_entry *e;
        int rc = tab_get(s, ids[i], &e);
        if (rc) return rc;
        e->in_prompt = 1;
    }
    return 0;
}

void pgd_sampler_constrain_json(pgd_sampler *s, const pgd_vocab_bytes *v,
                                const pgd_json_schema *schema) {
    pgd_json_schema_unref(s->schema);
    s->schema = pgd_json_schema_ref(schema);
    s->json_v = v;
    pgd_json_fsm_init(&s->json, schema);
}

static bool is_eog(const pgd_vocab_bytes *v, int32_t t) {
    for (size_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t) return true;
    return false;
}

/* What the recognizer takes next, worked out once per step: each first byte's verdict (which
 * spares most tokens a copy of the state) and, in a string's text, its room in code points
 * (plain text tokens then need no trying at all). */
typedef struct json_next {
    bool first[256];
    bool in_string;
    uint32_t room;
} json_next;

/* Whether token t may follow the output so far (pgd_sampler_constrain_json): an ending token
 * once the document is whole, whatever its bytes (a user-defined end token has some); plain
 * string text while in a string with room for it; another token if it has bytes, its first is
 * taken, and they keep the output a prefix of a document. */
static bool json_allows(const pgd_sampler *s, const json_next *nx, int32_t t) {
    const pgd_vocab_bytes *v = s->json_v;
    if (is_eog(v, t)) return pgd_json_fsm_done(&s->json);
    if (nx->in_string && v->plain[t] != UINT32_MAX) return v->plain[t] <= nx->room;
    size_t n;
    const uint8_t *p = (const uint8_t *)v->piece(v->ctx, t, &n);
    if (!n || !nx->first[p[0]]) return false;
    return n == 1 || pgd_json_fsm_try(&s->json, p, n);
}

int pgd_sampler_accept(pgd_sampler *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab)
        return pgd_error_set(PGD_EINVAL, "sampler: token %d outside [0, %d)", (int)id,
                             (int)s->n_vocab);
    if (s->json_v && id < s->json_v->n_vocab && !is_eog(s->json_v, id)) {
        size_t n;
        const char *p = s->json_v->piece(s->json_v->ctx, id, &n);
        pgd_json_fsm_feed(&s->json, (const uint8_t *)p, n); /* sampled under the mask */
    }
    tok_entry *e;
    int rc = tab_get(s, id, &e);
    if (rc) return rc;
    e->count++;
    s->n_output++;
    return 0;
}

int64_t pgd_sampler_n_output(const pgd_sampler *s) {
    return s->n_output;
}

uint32_t pgd_sampler_output_count(const pgd_sampler *s, int32_t id) {
    if (!s->tab_cap || id < 0) return 0;
    uint32_t mask = s->tab_cap - 1, j = tab_slot(id, mask);
    while (s->tab[j].id >= 0) {
        if (s->tab[j].id == id) return s->tab[j].count;
        j = (j + 1) & mask;
    }
    return 0;
}

/* ---- sampling ----------------------------------------------------------------------------- */

void pgd_sampler_process_logits(const pgd_sampler *s, const float *logits, float *out) {
    memcpy(out, logits, (size_t)s->n_vocab * sizeof *out);
    if (s->json_v) {
        json_next nx;
        for (int c = 0; c < 256; c++)
            nx.first[c] = pgd_json_fsm_try(&s->json, &(uint8_t){(uint8_t)c}, 1);
        nx.in_string = s->json_v->plain && pgd_json_fsm_in_string(&s->json, &nx.room);
        bool closed = s->json_v->n_eog && pgd_json_fsm_done(&s->json); /* only space follows */
        for (int c = 0; closed && c < 256; c++)
            closed = !nx.first[c] || c == ' ' || c == '\t' || c == '\n' || c == '\r';
        for (int32_t t = 0; t < s->n_vocab; t++)
            if (t >= s->json_v->n_vocab ||
                (closed ? !is_eog(s->json_v, t) : !json_allows(s, &nx, t)))
                out[t] = -INFINITY;
    }
    for (size_t i = 0; i < s->p.n_logit_bias; i++) out[s->bias[i].token] += s->bias[i].bias;
    if (s->n_output < s->hold_until)
        for (int i = 0; i < s->n_held; i++) out[s->held[i]] = -INFINITY;
    if (!s->rep && !s->freq_pres) return;
    float r = s->p.repetition_penalty, fp = s->p.frequency_penalty, pp = s->p.presence_penalty;
    for (uint32_t i = 0; i < s->tab_cap; i++) {
        const tok_entry *e = &s->tab[i];
        if (e->id < 0) continue;
        float x = out[e->id];
        if (s->rep && (e->in_prompt || e->count)) x = x > 0.0f ? x / r : x * r;
        if (e->count) x -= fp * (float)e->count + pp;
        out[e->id] = x;
    }
}

/* first id of the candidates' cumulative mass passing u * total; never a zero-mass one */
static int32_t draw_cands(const cand *c, size_t n, double u) {
    double z = 0.0;
    for (size_t i = 0; i < n; i++) z += c[i].p;
    double target = u * z, acc = 0.0;
    size_t last = 0;
    for (size_t i = 0; i < n; i++) {
        if (c[i].p <= 0.0f) continue;
        acc += c[i].p;
        last = i;
        if (acc > target) return c[i].id;
    }
    return c[last].id; /* rounding: the total fell short of the target */
}

/* the same over the whole of p[n], through the block sums */
static int32_t draw_dense(const float *p /* [n] */, size_t n, const double *bsum, double z,
                          double u) {
    double target = u * z, acc = 0.0;
    size_t nb = (n + BLOCK - 1) / BLOCK, blk = 0;
    for (; blk + 1 < nb; blk++) {
        if (acc + bsum[blk] > target) break;
        acc += bsum[blk];
    }
    /* walk the chosen block; on rounding shortfall go on to later blocks */
    int32_t last = -1;
    for (size_t i = blk * BLOCK; i < n; i++) {
        if (p[i] <= 0.0f) continue;
        acc += p[i];
        last = (int32_t)i;
        if (acc > target) return last;
    }
    if (last >= 0) return last;
    for (size_t i = blk * BLOCK; i-- > 0;)
        if (p[i] > 0.0f) return (int32_t)i;
    return 0; /* unreachable: the max has p = 1 */
}

/* Logprobs from the raw row. When the processed row equals the sanitised raw one (no bias, no
 * penalty entries), its max `m` is the raw max; `z` > 0 is then also the raw sum of exp when the
 * caller computed it at temperature 1 with nothing zeroed. */
static void fill_logprobs(int32_t n_vocab, int32_t top_logprobs, const float *logits, bool same,
                          float m, double z, pgd_sample_result *out) {
    size_t n = (size_t)n_vocab;
    if (!same) {
        m = raw_max(logits, n);
        z = 0.0;
    }
    if (!(z > 0.0)) z = raw_sumexp(logits, n, m);
    double lz = (double)m + log(z);
    out->logprob = (float)((double)sanitize(logits[out->token]) - lz);
    int n_top = top_logprobs < n_vocab ? top_logprobs : n_vocab;
    if (n_top > 0) {
        top_raw(logits, n, n_top, out->top);
        for (int i = 0; i < n_top; i++)
            out->top[i].logprob = (float)((double)out->top[i].logprob - lz);
    }
    out->n_top = n_top;
}

void pgd_sample_token_logprobs(const float *logits, int32_t n_vocab, int32_t token,
                               int32_t top_logprobs, pgd_sample_result *out, int32_t *rank) {
    PGD_ASSERT(token >= 0 && token < n_vocab && top_logprobs >= 0 &&
               top_logprobs <= PGD_SAMPLER_MAX_TOP_LOGPROBS);
    out->token = token;
    fill_logprobs(n_vocab, top_logprobs, logits, false, 0.0f, 0.0, out);
    if (!rank) return;
    const float x = sanitize(logits[token]);
    int32_t above = 0;
    for (int32_t i = 0; i < n_vocab; i++) above += sanitize(logits[i]) > x;
    *rank = 1 + above;
}

/* qsort's comparison in the candidate order (better first) */
static int cand_cmp(const void *a, const void *b) {
    return better((const cand *)a, (const cand *)b) ? -1 : better((const cand *)b, (const cand *)a);
}

/* The candidate order as one ascending 64-bit key: p descending (p >= 0: its bits order it),
 * then id ascending. */
static inline uint64_t cand_key(const cand *c) {
    uint32_t bits;
    memcpy(&bits, &c->p, sizeof bits);
    return (uint64_t)~bits << 32 | (uint32_t)c->id;
}

/* Sorts c[n] into the candidate order; tmp[n] is scratch. A few hundred or more: an LSD radix
 * sort of cand_key, 8 bits a pass, skipping the passes whose digit is the same everywhere
 * (qsort's comparisons cost ten times more on a large nucleus); fewer: qsort. */
static void sort_cands(cand *c, size_t n, cand *tmp) {
    if (n < 256) {
        qsort(c, n, sizeof *c, cand_cmp);
        return;
    }
    cand *src = c, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        size_t count[256] = {0};
        for (size_t i = 0; i < n; i++) count[cand_key(&src[i]) >> shift & 255]++;
        if (count[cand_key(&src[0]) >> shift & 255] == n) continue; /* one digit: nothing moves */
        size_t at = 0;
        for (int d = 0; d < 256; d++) {
            const size_t k = count[d];
            count[d] = at;
            at += k;
        }
        for (size_t i = 0; i < n; i++) dst[count[cand_key(&src[i]) >> shift & 255]++] = src[i];
        cand *t = src;
        src = dst;
        dst = t;
    }
    if (src != c) memcpy(c, src, n * sizeof *c);
}

/* The smallest k with c[0..k) (in the candidate order) summing, in that order, to target or
 * more; n when none does. */
static size_t prefix_mass(const cand *c, size_t n, double target) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (acc >= target) return i + 1;
    }
    return n;
}

/* The top-p nucleus of candidates c[0..n) in the candidate order: c[0..k) sorted best first
 * with k = prefix_mass's over the sorted c[0..n), *reached telling whether the mass got to
 * target (else k = n). Sorts only what the walk reaches: the quickselect's nucleus, then the
 * best of the rest one at a time if its own sums (in another order) stopped an id short. */
static size_t sorted_nucleus(cand *c, size_t n, double target, cand *tmp, bool *reached) {
    const size_t k = nucleus(c, n, target);
    sort_cands(c, k, tmp);
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (i >= k) {
            size_t b = i;
            for (size_t j = i + 1; j < n; j++)
                if (better(&c[j], &c[b])) b = j;
            swap_cand(&c[i], &c[b]);
        }
        acc += c[i].p;
        if (acc >= target) {
            *reached = true;
            return i + 1;
        }
    }
    *reached = false;
    return n;
}

/* top-p without top-k: first thresholds tried before the always-safe one (p relative to max) */
static const float k_cut_guess[] = {0x1p-8f, 0x1p-16f};

/* What steps 1-8 leave to draw from. */
typedef struct filtered {
    enum { F_GREEDY, F_DENSE, F_CANDS } kind;
    int32_t token; /* F_GREEDY */
    double z;      /* F_DENSE: sum of work[] (also per block in bsum) */
    size_t nc;     /* F_CANDS: survivors cand[0..nc), unnormalised p, in the candidate order */
    float m;       /* max of the processed row */
    double z_raw;  /* sum of exp(raw - max) when a pass computed it as a by-product, else 0 */
} filtered;

/* Steps 4-8 over the processed row in sc->work[n_vocab]. */
static int filter(const pgd_sample_spec *sp, int32_t n_vocab, pgd_sampler_scratch *sc,
                  filtered *f) {
    size_t n = (size_t)n_vocab;
    float *w = sc->work; /* [n] */
    cand *c = sc->cand;  /* [n] */
    f->z_raw = 0.0;
    float m = f->m = sanitize_max(w, n);
    if (m == -INFINITY) return pgd_error_set(PGD_EINVAL, "sampler: every logit is -inf or NaN");

    if (sp->temperature < PGD_SAMPLER_GREEDY_EPS) {
        size_t i = 0;
        v4f vm = v_splat(m);
        while (i + 16 <= n && !v_any((v_load(w + i) == vm) | (v_load(w + i + 4) == vm) |
                                     (v_load(w + i + 8) == vm) | (v_load(w + i + 12) == vm)))
            i += 16;
        while (w[i] != m) i++;
        f->kind = F_GREEDY;
        f->token = (int32_t)i;
        return 0;
    }

    bool use_top_p = sp->top_p<1.0f, use_min_p = sp->min_p> 0.0f;
    float inv_t = 1.0f / sp->temperature;
    float min_p = use_min_p ? sp->min_p : 0.0f; /* p_max is exactly 1 */
    size_t nc;
    /* a top_k of n_vocab or more is off (pgd_sampler_spec passes it so; any spec may not) */
    if (sp->top_k > 0 && sp->top_k < n_vocab) {
        nc = (size_t)sp->top_k;
        top_k_select(w, n, nc, c);
        for (size_t i = 0; i < nc; i++) c[i].p = exp1((c[i].p - m) * inv_t);
        sort_cands(c, nc, sc->sorted); /* the candidate order */
        if (use_top_p) {
            double zk = 0.0;
            for (size_t i = 0; i < nc; i++) zk += c[i].p;
            nc = prefix_mass(c, nc, (double)sp->top_p * zk);
        }
    } else if (use_top_p) {
        double z = exp_pass(w, n, m, inv_t, 0.0f, sc->bsum), target = sp->top_p * z, mass;
        if (inv_t == 1.0f) f->z_raw = z;
        /* ids below `safe` weigh less than (1 - top_p) / 2 of the mass in all: the nucleus
         * lies above it. A higher guess is good when the ids above it carry the target. The
         * last level takes every id with p > 0. */
        float safe = (float)((1.0 - (double)sp->top_p) * z / (2.0 * (double)n));
        float cuts[PGD_ARRAY_LEN(k_cut_guess) + 2];
        size_t n_cuts = 0;
        for (size_t g = 0; g < PGD_ARRAY_LEN(k_cut_guess) && k_cut_guess[g] > safe; g++)
            cuts[n_cuts++] = k_cut_guess[g];
        if (safe > FLT_TRUE_MIN) cuts[n_cuts++] = safe;
        cuts[n_cuts++] = FLT_TRUE_MIN;
        for (size_t g = 0; g < n_cuts; g++) {
            const bool last = g + 1 == n_cuts;
            nc = collect(w, n, cuts[g], c, &mass);
            if (mass < target && !last) continue; /* the ids above this cut fall short */
            bool reached;
            nc = sorted_nucleus(c, nc, target, sc->sorted, &reached);
            if (reached || last) break;
        }
    } else {
        /* temperature and/or min-p: draw straight from the dense probabilities */
        f->kind = F_DENSE;
        f->z = exp_pass(w, n, m, inv_t, min_p, sc->bsum);
        if (inv_t == 1.0f && min_p == 0.0f) f->z_raw = f->z;
        return 0;
    }
    if (use_min_p) {
        size_t k = 0;
        for (size_t i = 0; i < nc; i++)
            if (c[i].p >= min_p) c[k++] = c[i];
        nc = k;
    }
    PGD_ASSERT(nc > 0); /* the best id has p = 1 and survives every filter */
    f->kind = F_CANDS;
    f->nc = nc;
    return 0;
}

/* Step 9 and the logprobs, after filter. `same`: the processed row is the sanitised raw one. */
static void pick(const pgd_sample_spec *sp, int32_t n_vocab, pgd_sampler_scratch *sc,
                 const filtered *f, const float *logits, bool same, uint64_t draw,
                 pgd_sample_result *out) {
    double u = (double)(draw >> 11) * 0x1.0p-53; /* uniform in [0, 1) */
    switch (f->kind) {
    case F_GREEDY:
        out->token = f->token;
        break;
    case F_DENSE:
        out->token = draw_dense(sc->work, (size_t)n_vocab, sc->bsum, f->z, u);
        break;
    case F_CANDS:
        out->token = draw_cands(sc->cand, f->nc, u);
        break;
    }
    if (sp->logprobs) fill_logprobs(n_vocab, sp->top_logprobs, logits, same, f->m, f->z_raw, out);
}

static void result_init(pgd_sample_result *out) {
    out->token = -1;
    out->logprob = 0.0f;
    out->n_top = 0;
}

void pgd_sampler_spec(const pgd_sampler *s, pgd_sample_spec *out) {
    *out = (pgd_sample_spec){.temperature = s->greedy ? 0.0f : s->p.temperature,
                             .top_k = s->top_k,
                             .top_p = s->p.top_p,
                             .min_p = s->p.min_p,
                             .logprobs = s->p.logprobs,
                             .top_logprobs = s->p.logprobs ? s->p.top_logprobs : 0};
}

bool pgd_sampler_on_device(const pgd_sampler *s) {
    return s->p.n_logit_bias == 0 && !s->rep && !s->freq_pres && !s->json_v &&
           s->n_output >= s->hold_until;
}

int pgd_sampler_hold_ends(pgd_sampler *s, const int32_t *ids, int n, int64_t min_output) {
    if (n < 0 || n > PGD_SAMPLER_MAX_HELD || (n && !ids))
        return pgd_error_set(PGD_EINVAL, "sampler: %d ids to hold (at most %d)", n,
                             PGD_SAMPLER_MAX_HELD);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return pgd_error_set(PGD_EINVAL, "sampler: id %d to hold is outside [0, %d)", ids[i],
                                 s->n_vocab);
    memcpy(s->held, ids, (size_t)n * sizeof *ids);
    s->n_held = n;
    s->hold_until = min_output;
    return 0;
}

uint64_t pgd_sampler_draw(pgd_sampler *s) {
    return s->greedy ? 0 : rng_next(s->rng);
}

int pgd_sample_logits(const float *logits, int32_t n_vocab, const pgd_sample_spec *spec,
                      uint64_t draw, pgd_sampler_scratch *sc, pgd_sample_result *out) {
    result_init(out);
    PGD_ASSERT(sc->n_vocab >= n_vocab);
    memcpy(sc->work, logits, (size_t)n_vocab * sizeof *sc->work);
    filtered f;
    int rc = filter(spec, n_vocab, sc, &f);
    if (rc) return rc;
    pick(spec, n_vocab, sc, &f, logits, true, draw, out);
    return 0;
}

/* The spec, the processed row (in the scratch) and what the filters keep of it. */
static int prepare(pgd_sampler *s, const float *logits, pgd_sample_spec *sp, filtered *f) {
    pgd_sampler_spec(s, sp);
    pgd_sampler_process_logits(s, logits, s->sc->work);
    return filter(sp, s->n_vocab, s->sc, f);
}

int pgd_sampler_sample(pgd_sampler *s, const float *logits, pgd_sample_result *out) {
    result_init(out);
    pgd_sample_spec sp;
    filtered f;
    int rc = prepare(s, logits, &sp, &f);
    if (rc) return rc;
    /* the processed row is the sanitised raw one unless a bias or penalty touched it */
    bool same = s->p.n_logit_bias == 0 && !s->json_v &&
                (!(s->rep || s->freq_pres) || s->tab_len == 0) &&
                (!s->n_held || s->n_output >= s->hold_until);
    pick(&sp, s->n_vocab, s->sc, &f, logits, same, pgd_sampler_draw(s), out);
    return 0;
}

int pgd_sampler_distribution(pgd_sampler *s, const float *logits, float *probs) {
    size_t n = (size_t)s->n_vocab;
    pgd_sample_spec sp;
    filtered f;
    int rc = prepare(s, logits, &sp, &f);
    if (rc) return rc;
    if (f.kind == F_DENSE) {
        for (size_t i = 0; i < n; i++) probs[i] = (float)((double)s->sc->work[i] / f.z);
        return 0;
    }
    memset(probs, 0, n * sizeof *probs);
    if (f.kind == F_GREEDY) {
        probs[f.token] = 1.0f;
        return 0;
    }
    const cand *c = s->sc->cand;
    double z = 0.0;
    for (size_t i = 0; i < f.nc; i++) z += c[i].p;
    for (size_t i = 0; i < f.nc; i++) probs[c[i].id] = (float)((double)c[i].p / z);
    return 0;
}
