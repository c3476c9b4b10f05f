/*
 * tests/unit/test_moe_twin.c — the CPU twins of the mixture-of-experts routing kernels
 * (kernels/cuda/moe_twin.c) against references written here independently:
 *   - route against engine/backends/cpu.c's route_token transcribed as it is (the taken
 *     experts found by scanning the ids chosen so far, the weights in pass order), then its K
 *     pairs sorted by id: ids and weight bits equal, on uniform logits, logits of four values
 *     (ties, +0 against -0) and logits with NaN and +-inf;
 *   - group against the plain triple loop (each expert in order, each token, each of its K
 *     picks) and tiles cut by hand: every output equal, on random K-subsets, on experts of 0, 1,
 *     63, 64, 65 and 129 pairs, and all tokens on the same experts;
 *   - combine against the same sum in double: within the error bound of K fused multiply-adds
 *     in f32 (K u sum |w y|, u = 2^-24, plus a margin), and bit for bit where every term is
 *     exact (small integers).
 * No GPU needed (label unit); tests/gpu/test_cuda_moe.c holds the kernels to these twins.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cuda/moe.h"
#include "testutil.h"

#define TWIN_RNG_SEED 0x2545F4914F6CDD1Dull
#include "twin_rng.h"
static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- route ------------------------------------------------------------------------------ */

/* cpu.c's route_token, as it is written there. */
static void route_token_ref(const float *r, uint32_t n, uint32_t k, uint32_t *idx, float *w) {
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t e = 0; e < n; e++) {
            bool taken = false;
            for (uint32_t i = 0; i < j && !taken; i++) taken = idx[i] == e;
            if (!taken && (best == UINT32_MAX || r[e] > r[best])) best = e;
        }
        idx[j] = best;
    }
    double sum = 0.0, wd[64];
    for (uint32_t j = 0; j < k; j++) sum += wd[j] = exp((double)r[idx[j]] - (double)r[idx[0]]);
    for (uint32_t j = 0; j < k; j++) w[j] = (float)(wd[j] / sum);
}

static void route_case(uint32_t T, uint32_t NE, uint32_t K, int mode) {
    float *l = calloc((size_t)T * NE, sizeof(float)), *w = malloc(sizeof(float) * T * K);
    uint32_t *p = malloc(sizeof(uint32_t) * T * K);
    REQUIRE(l && w && p);
    for (uint32_t i = 0; i < T * NE; i++) {
        l[i] = mode == 1 ? (float)urand(4) - 2.0f : frand() * 8.0f;
        if (mode == 1 && l[i] == 0.0f && urand(2)) l[i] = -0.0f;
        if (mode == 2 && urand(6) == 0) {
            const uint32_t k = urand(3);
            l[i] = k == 0 ? NAN : k == 1 ? INFINITY : -INFINITY;
        }
    }
    pgd_cuda_moe_route_twin(l, T, NE, K, p, w);
    int bad = 0;
    for (uint32_t t = 0; t < T; t++) {
        uint32_t idx[64];
        float wr[64];
        route_token_ref(l + t * NE, NE, K, idx, wr);
        for (uint32_t j = 1; j < K; j++) /* sort the pairs by id */
            for (uint32_t i = j; i > 0 && idx[i - 1] > idx[i]; i--) {
                const uint32_t ti = idx[i];
                const float tw = wr[i];
                idx[i] = idx[i - 1], wr[i] = wr[i - 1];
                idx[i - 1] = ti, wr[i - 1] = tw;
            }
        for (uint32_t j = 0; j < K; j++) {
            const bool same_w =
                f2u(wr[j]) == f2u(w[t * K + j]) || (isnan(wr[j]) && isnan(w[t * K + j]));
            if ((idx[j] != p[t * K + j] || !same_w) && !bad++)
                fprintf(stderr, "  route T %u NE %u K %u mode %d token %u: %u %.9g, want %u %.9g\n",
                        T, NE, K, mode, t, p[t * K + j], w[t * K + j], idx[j], wr[j]);
        }
    }
    CHECK_EQ_INT(bad, 0);
    free(l), free(w), free(p);
}

static void test_route(void) {
    static const uint32_t NEs[] = {1, 8, 60, 128, 512}, Ks[] = {1, 2, 8, 64};
    for (size_t ie = 0; ie < PGD_ARRAY_LEN(NEs); ie++)
        for (size_t ik = 0; ik < PGD_ARRAY_LEN(Ks); ik++)
            for (int mode = 0; mode < 3; mode++)
                if (Ks[ik] <= NEs[ie]) route_case(NEs[ie] > 128 ? 8 : 30, NEs[ie], Ks[ik], mode);
    route_case(4, 8, 8, 1); /* K = NE */
}

/* ---- group ------------------------------------------------------------------------------ */

static void group_case(const uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K) {
    const uint32_t P = T * K, mt = pgd_grouped_max_tiles(P, NE);
    uint32_t *st = malloc(sizeof(uint32_t) * P), *ro = malloc(sizeof(uint32_t) * P);
    uint32_t *st_r = malloc(sizeof(uint32_t) * P), *ro_r = malloc(sizeof(uint32_t) * P);
    pgd_grouped_tile *tl = calloc(mt, sizeof *tl), *tl_r = calloc(mt, sizeof *tl_r);
    REQUIRE(st && ro && st_r && ro_r && tl && tl_r);
    uint32_t nt = UINT32_MAX, nt_r = 0, row = 0;
    pgd_cuda_moe_group_twin(pick, T, NE, K, st, ro, tl, &nt);
    for (uint32_t e = 0; e < NE; e++) {
        const uint32_t row0 = row;
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t j = 0; j < K; j++)
                if (pick[t * K + j] == e) st_r[row] = t, ro_r[t * K + j] = row++;
        for (uint32_t r = row0; r < row; r += 64) {
            PGD_ASSERT(nt_r < mt);
            tl_r[nt_r++] = (pgd_grouped_tile){e, r, row - r < 64 ? row - r : 64};
        }
    }
    PGD_ASSERT(row == P);
    CHECK_EQ_INT(nt, nt_r);
    CHECK(!memcmp(st, st_r, sizeof(uint32_t) * P));
    CHECK(!memcmp(ro, ro_r, sizeof(uint32_t) * P));
    CHECK(nt == nt_r && !memcmp(tl, tl_r, sizeof *tl * nt_r));
    free(st), free(ro), free(st_r), free(ro_r), free(tl), free(tl_r);
}

static void test_group(void) {
    enum { TMAX = 300, KMAX = 8 };
    static uint32_t pick[TMAX * KMAX];
    static const uint32_t Ts[] = {1, 3, 17, 300}, NEs[] = {8, 60, 512}, Ks[] = {1, 2, 8};
    for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++)
        for (size_t ie = 0; ie < PGD_ARRAY_LEN(NEs); ie++)
            for (size_t ik = 0; ik < PGD_ARRAY_LEN(Ks); ik++) {
                const uint32_t T = Ts[it], NE = NEs[ie], K = Ks[ik];
                for (uint32_t t = 0; t < T; t++) { /* K distinct ids, ascending: a bitmap */
                    bool in[512] = {false};
                    for (uint32_t n = 0; n < K;) {
                        const uint32_t e = urand(NE);
                        if (!in[e]) in[e] = true, n++;
                    }
                    for (uint32_t e = 0, j = 0; e < NE; e++)
                        if (in[e]) pick[t * K + j++] = e;
                }
                group_case(pick, T, NE, K);
            }
    /* experts of 0, 65, 1, 129, 0, 63, 64, 0 pairs: token t's j-th the (j * T + t)-th of the
     * experts repeated by their counts (T = 161, K = 2) */
    static const uint32_t cnt[8] = {0, 65, 1, 129, 0, 63, 64, 0};
    uint32_t seq[322], n = 0;
    for (uint32_t e = 0; e < 8; e++)
        for (uint32_t i = 0; i < cnt[e]; i++) seq[n++] = e;
    for (uint32_t t = 0; t < 161; t++)
        for (uint32_t j = 0; j < 2; j++) pick[t * 2 + j] = seq[j * 161 + t];
    group_case(pick, 161, 8, 2);
    uint32_t nt = 0, st[322], ro[322];
    pgd_grouped_tile tl[16];
    pgd_cuda_moe_group_twin(pick, 161, 8, 2, st, ro, tl, &nt);
    CHECK_EQ_INT(nt, 2 + 1 + 3 + 1 + 1); /* 65, 1, 129, 63, 64 */
    CHECK(tl[0].expert == 1 && tl[0].row0 == 0 && tl[0].rows == 64);
    CHECK(tl[1].expert == 1 && tl[1].row0 == 64 && tl[1].rows == 1);
    CHECK(tl[5].expert == 3 && tl[5].row0 == 194 && tl[5].rows == 1);
    CHECK(tl[7].expert == 6 && tl[7].row0 == 258 && tl[7].rows == 64);
    for (uint32_t t = 0; t < TMAX; t++)
        for (uint32_t j = 0; j < KMAX; j++) pick[t * KMAX + j] = 100 + j;
    group_case(pick, TMAX, 128, KMAX);
}

/* ---- combine ---------------------------------------------------------------------------- */

static void test_combine(void) {
    enum { T = 37, K = 8, E = 19 };
    static float Y[T * K * E], w[T * K], out[T * E];
    static uint32_t row_of[T * K];
    for (int exact = 0; exact < 2; exact++) {
        for (uint32_t i = 0; i < T * K * E; i++)
            Y[i] = exact ? (float)((int)urand(200) - 100) : frand() * 4.0f;
        for (uint32_t p = 0; p < T * K; p++) {
            w[p] = exact ? (float)urand(8) * 0.25f : frand();
            row_of[p] = (p * 7919u) % (T * K); /* a permutation: 7919 is prime */
        }
        pgd_cuda_moe_combine_twin(Y, row_of, w, T, K, E, out);
        int bad = 0;
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t c = 0; c < E; c++) {
                double sum = 0.0, mag = 0.0;
                for (uint32_t j = 0; j < K; j++) {
                    const double y = Y[(uint64_t)row_of[t * K + j] * E + c], x = w[t * K + j] * y;
                    sum += x, mag += fabs(x);
                }
                const double tol = exact ? 0.0 : K * ldexp(mag, -24) * 1.01 + 1e-30;
                if (!(fabs(out[t * E + c] - sum) <= tol) && !bad++)
                    fprintf(stderr, "  combine exact %d t %u c %u: %.9g, want %.9g\n", exact, t, c,
                            out[t * E + c], sum);
            }
        CHECK_EQ_INT(bad, 0);
    }
}

int main(void) {
    RUN(test_route);
    RUN(test_group);
    RUN(test_combine);
    return test_summary();
}
