/*
 * tests/gpu/test_cuda_moe.c — the mixture-of-experts routing kernels (kernels/cuda/moe.h)
 * against their CPU twins (moe_twin.c) and against what must hold whatever the twins say:
 *   - route, on random logits (T in {1, 3, 17, 300}, NE in {8, 60, 128, 512}, K in {1, 2, 8}, K
 *     = NE for NE = 8), on logits of four values (many ties), and with NaN and +-inf sprinkled
 *     in: the ids equal the twin's, the weights within 1 f32 ulp (the device's double exp may
 *     differ from glibc's by an ulp in double; after the division and the rounding to f32 that
 *     almost never shows, but a weight next to a rounding boundary of f32 can move by one; NaN
 *     weights where the twin has NaN); ids strictly ascending and below NE; finite weights
 *     summing to 1 within K f32 ulps. All logits equal: experts 0 .. K-1, weights 1 / K; a
 *     NaN at the first untaken expert is taken (route_token's rule);
 *   - group, on picks of random K-subsets and on picks built to give experts 0, 1, 63, 64, 65
 *     and 129 pairs (P = 322 over 8 experts), all tokens on the same K experts, and P = 2400
 *     (several of the scatter's chunks): sorted_tok, row_of, the tiles and n_tiles equal the
 *     twin's bit for bit; every row covered once, rows of a tile all of its expert, tiles in
 *     expert order with every tile but an expert's last full, tokens ascending within an
 *     expert, n_tiles <= pgd_grouped_max_tiles;
 *   - combine, E in {1, 7, 8, 256, 1000} (the 4-column and the 1-column forms, and a Y one float
 *     off 16-byte alignment), against the twin bit for bit;
 *   - the chain route -> group -> combine, with Y's row r built from its token's logits and
 *     its expert alone: out equals the sum over the token's picks done on the host without the
 *     grouping, bit for bit; and a token alone (T = 1) has its bits in the batch (pick, pick_w,
 *     out);
 *   - bad arguments refused (PGD_EINVAL); T = 0 does nothing.
 * Outputs are poisoned with NaN (all bits set) before each run; the seed is printed (PGD_SEED
 * repeats it). Under the emulator (PGD_CUDA_EMU set) the sizes are smaller. Exit 77 (skipped)
 * when no GPU is present. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/counter_hash.h"
#include "common/error.h"
#include "kernels/cuda/moe.h"
#include "testutil.h"
#include "gpu_testutil.h"

static bool g_emu; /* under the emulator: smaller sizes */

/* ---- helpers ---------------------------------------------------------------------------- */

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* f32 values within one ulp of each other (+0 and -0 alike), or both NaN. */
static bool within_ulp(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    const uint32_t ua = f2u(a), ub = f2u(b);
    const int64_t oa = (ua & 0x80000000u) ? -(int64_t)(ua & 0x7fffffffu) : (int64_t)ua;
    const int64_t ob = (ub & 0x80000000u) ? -(int64_t)(ub & 0x7fffffffu) : (int64_t)ub;
    return llabs(oa - ob) <= 1;
}

/* A random float of a hash: in [-1, 1). */
static float hash_float(uint64_t h) {
    return (float)((double)(pgd_hash64(h) >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Token t's picks: a random K-subset of NE experts, ascending. pick: [T][K]. */
static void random_picks(uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K) {
    uint32_t all[PGD_MOE_MAX_EXPERTS];
    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t e = 0; e < NE; e++) all[e] = e;
        for (uint32_t j = 0; j < K; j++) { /* partial shuffle */
            const uint32_t i = j + gt_urand(NE - j), tmp = all[j];
            all[j] = all[i], all[i] = tmp;
        }
        for (uint32_t j = 1; j < K; j++) /* insertion sort of the K */
            for (uint32_t i = j; i > 0 && all[i - 1] > all[i]; i--) {
                const uint32_t tmp = all[i];
                all[i] = all[i - 1], all[i - 1] = tmp;
            }
        memcpy(pick + (uint64_t)t * K, all, K * sizeof *pick);
    }
}

/* Picks giving expert e exactly cnt[e] pairs (each <= T, their sum T * K): the experts repeated
 * cnt[e] times in order, token t's j-th the element j * T + t (a run is at most T long, so a
 * token's K are distinct and ascending), then the tokens shuffled. */
static void counted_picks(uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K,
                          const uint32_t *cnt) {
    uint32_t *seq = malloc(sizeof(uint32_t) * T * K), n = 0;
    PGD_ASSERT(seq);
    for (uint32_t e = 0; e < NE; e++)
        for (uint32_t i = 0; i < cnt[e]; i++) seq[n++] = e;
    PGD_ASSERT(n == T * K);
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t j = 0; j < K; j++) pick[t * K + j] = seq[j * T + t];
    for (uint32_t t = T - 1; t > 0; t--) { /* tokens in random order */
        const uint32_t s = gt_urand(t + 1);
        for (uint32_t j = 0; j < K; j++) {
            const uint32_t tmp = pick[t * K + j];
            pick[t * K + j] = pick[s * K + j], pick[s * K + j] = tmp;
        }
    }
    free(seq);
}

/* ---- route ------------------------------------------------------------------------------ */

/* The device's and the twin's picks of logits [T][NE] into got_* and want_* ([T][K]); 0 or -1. */
static int route_both(const float *logits, uint32_t T, uint32_t NE, uint32_t K, uint32_t *got_p,
                      float *got_w, uint32_t *want_p, float *want_w) {
    const uint64_t n = (uint64_t)T * K;
    float *d_l = gt_upload(logits, sizeof(float) * T * NE);
    uint32_t *d_p = gt_poisoned(sizeof(uint32_t) * n);
    float *d_w = gt_poisoned(sizeof(float) * n);
    int rc = -1;
    if (d_l && d_p && d_w && pgd_cuda_moe_route(d_l, T, NE, K, d_p, d_w, NULL) == 0 &&
        gt_download(got_p, d_p, sizeof(uint32_t) * n) == 0 &&
        gt_download(got_w, d_w, sizeof(float) * n) == 0)
        rc = 0;
    cudaFree(d_l), cudaFree(d_p), cudaFree(d_w);
    if (want_p) pgd_cuda_moe_route_twin(logits, T, NE, K, want_p, want_w);
    return rc;
}

/* mode 0: uniform logits; 1: four values (ties); 2: NaN and +-inf sprinkled in. */
static void route_case(uint32_t T, uint32_t NE, uint32_t K, int mode) {
    const uint64_t n = (uint64_t)T * K;
    float *l = malloc(sizeof(float) * T * NE), *gw = malloc(sizeof(float) * n);
    float *ww = malloc(sizeof(float) * n);
    uint32_t *gp = malloc(sizeof(uint32_t) * n), *wp = malloc(sizeof(uint32_t) * n);
    REQUIRE(l && gw && ww && gp && wp);
    for (uint64_t i = 0; i < (uint64_t)T * NE; i++) {
        l[i] = mode == 1 ? (float)gt_urand(4) - 2.0f : gt_frand() * 8.0f;
        if (mode == 2 && gt_urand(8) == 0) {
            const uint32_t k = gt_urand(4);
            l[i] = k == 0 ? NAN : k == 1 ? -NAN : k == 2 ? INFINITY : -INFINITY;
        }
        if (mode == 1 && l[i] == 0.0f && gt_urand(2)) l[i] = -0.0f; /* -0 ties with +0 */
    }
    REQUIRE(route_both(l, T, NE, K, gp, gw, wp, ww) == 0);
    uint64_t bad_id = 0, bad_w = 0, bad_order = 0, bad_sum = 0;
    for (uint32_t t = 0; t < T; t++) {
        double sum = 0.0;
        bool finite = true;
        for (uint32_t j = 0; j < K; j++) {
            const uint64_t i = (uint64_t)t * K + j;
            if (gp[i] != wp[i] && !bad_id++)
                fprintf(stderr, "  route T %u NE %u K %u mode %d: token %u pick %u: %u, want %u\n",
                        T, NE, K, mode, t, j, gp[i], wp[i]);
            if (!within_ulp(gw[i], ww[i]) && !bad_w++)
                fprintf(stderr, "  route: token %u weight %u: %.9g, want %.9g\n", t, j, gw[i],
                        ww[i]);
            if (gp[i] >= NE || (j && gp[i] <= gp[i - 1])) bad_order++;
            finite = finite && isfinite(gw[i]);
            sum += gw[i];
        }
        if (finite && fabs(sum - 1.0) > K * 1.2e-7 && !bad_sum++)
            fprintf(stderr, "  route: token %u weights sum to %.9g\n", t, sum);
    }
    CHECK_EQ_INT(bad_id, 0);
    CHECK_EQ_INT(bad_w, 0);
    CHECK_EQ_INT(bad_order, 0);
    CHECK_EQ_INT(bad_sum, 0);
    free(l), free(gw), free(ww), free(gp), free(wp);
}

static void test_route(void) {
    static const uint32_t Ts[] = {1, 3, 17, 300}, NEs[] = {8, 60, 128, 512}, Ks[] = {1, 2, 8};
    for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++)
        for (size_t ie = 0; ie < PGD_ARRAY_LEN(NEs); ie++)
            for (size_t ik = 0; ik < PGD_ARRAY_LEN(Ks); ik++)
                for (int mode = 0; mode < 3; mode++) {
                    if (g_emu && Ts[it] > 17 && (mode || NEs[ie] > 128)) continue;
                    route_case(Ts[it], NEs[ie], Ks[ik], mode);
                }
    for (int mode = 0; mode < 3; mode++) route_case(5, 8, 8, mode); /* K = NE */
    route_case(3, 100, 64, 0);                                      /* passes at both lanes */
    route_case(3, 64, 64, 1);
    route_case(3, 1, 1, 0); /* one expert */
}

/* Deliberate ties and NaNs, with the answers known. */
static void test_route_rules(void) {
    enum { NE = 40, K = 8 };
    float l[3 * NE], w[3 * K];
    uint32_t p[3 * K];
    for (uint32_t e = 0; e < NE; e++) {
        l[e] = 0.5f;                                    /* token 0: all equal */
        l[NE + e] = e % 10 == 3 ? 2.0f : (float)e / NE; /* token 1: 3, 13, 23, 33 tie on top */
        l[2 * NE + e] = (float)e;                       /* token 2: a NaN at 0, 39 the largest */
    }
    l[2 * NE] = NAN;
    l[NE + 5] = -0.0f, l[NE + 0] = 0.0f; /* +-0: equal */
    REQUIRE(route_both(l, 3, NE, K, p, w, NULL, NULL) == 0);
    for (uint32_t j = 0; j < K; j++) {
        CHECK_EQ_INT(p[j], j); /* lowest ids win */
        CHECK(w[j] == 0.125f);
    }
    /* token 1: 3, 13, 23, 33 (2.0), then 39, 38, 37, 36 */
    static const uint32_t want1[K] = {3, 13, 23, 33, 36, 37, 38, 39};
    for (uint32_t j = 0; j < K; j++) CHECK_EQ_INT(p[K + j], want1[j]);
    /* token 2: the NaN at 0 is the first untaken in pass 0 (nothing is greater), then 39 .. 33;
     * every weight NaN (l_0 is NaN) */
    static const uint32_t want2[K] = {0, 33, 34, 35, 36, 37, 38, 39};
    for (uint32_t j = 0; j < K; j++) {
        CHECK_EQ_INT(p[2 * K + j], want2[j]);
        CHECK(isnan(w[2 * K + j]));
    }
    /* a NaN later in the row is never taken while a number is left */
    l[2 * NE] = 1.0f, l[2 * NE + 39] = NAN;
    REQUIRE(route_both(l + 2 * NE, 1, NE, K, p, w, NULL, NULL) == 0);
    static const uint32_t want3[K] = {31, 32, 33, 34, 35, 36, 37, 38};
    for (uint32_t j = 0; j < K; j++) CHECK_EQ_INT(p[j], want3[j]);
}

/* ---- group ------------------------------------------------------------------------------ */

typedef struct {
    uint32_t *sorted_tok, *row_of, n_tiles; /* [P], [P] */
    pgd_grouped_tile *tiles;                /* [pgd_grouped_max_tiles(P, NE)] */
} grouping;

static void grouping_free(grouping *g) {
    free(g->sorted_tok), free(g->row_of), free(g->tiles);
}

static bool grouping_alloc(grouping *g, uint64_t P, uint32_t mt) {
    g->sorted_tok = malloc(sizeof(uint32_t) * (P ? P : 1));
    g->row_of = malloc(sizeof(uint32_t) * (P ? P : 1));
    g->tiles = malloc(sizeof(pgd_grouped_tile) * (mt ? mt : 1));
    return g->sorted_tok && g->row_of && g->tiles;
}

/* The device's grouping of pick [T][K] (uploaded) into g: 0 or -1. */
static int group_dev(const uint32_t *d_pick, uint32_t T, uint32_t NE, uint32_t K, grouping *g) {
    const uint64_t P = (uint64_t)T * K;
    const uint32_t mt = pgd_grouped_max_tiles((uint32_t)P, NE);
    uint32_t *d_counts = gt_poisoned(sizeof(uint32_t) * (NE + 1));
    uint32_t *d_st = gt_poisoned(sizeof(uint32_t) * P), *d_ro = gt_poisoned(sizeof(uint32_t) * P);
    pgd_grouped_tile *d_tiles = gt_poisoned(sizeof(pgd_grouped_tile) * mt);
    uint32_t *d_nt = gt_poisoned(sizeof(uint32_t));
    int rc = -1;
    if (d_counts && d_st && d_ro && d_tiles && d_nt &&
        pgd_cuda_moe_group(d_pick, T, NE, K, d_counts, d_st, d_ro, d_tiles, d_nt, NULL) == 0 &&
        gt_download(g->sorted_tok, d_st, sizeof(uint32_t) * P) == 0 &&
        gt_download(g->row_of, d_ro, sizeof(uint32_t) * P) == 0 &&
        gt_download(g->tiles, d_tiles, sizeof(pgd_grouped_tile) * mt) == 0 &&
        gt_download(&g->n_tiles, d_nt, sizeof(uint32_t)) == 0)
        rc = 0;
    cudaFree(d_counts), cudaFree(d_st), cudaFree(d_ro), cudaFree(d_tiles), cudaFree(d_nt);
    return rc;
}

/* What must hold of a grouping of pick [T][K] whatever the twin says; the failures. */
static uint64_t grouping_invariants(const uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K,
                                    const grouping *g) {
    const uint64_t P = (uint64_t)T * K;
    uint64_t bad = 0;
#define INV(cond, ...)                                                                             \
    do {                                                                                           \
        if (!(cond) && !bad++)                                                                     \
            fprintf(stderr, "  group T %u NE %u K %u: ", T, NE, K), fprintf(stderr, __VA_ARGS__);  \
    } while (0)
    INV(g->n_tiles <= pgd_grouped_max_tiles((uint32_t)P, NE), "%u tiles\n", g->n_tiles);
    if (bad) return bad;
    uint32_t *tile_of = malloc(sizeof(uint32_t) * P), *cnt = calloc(NE, sizeof(uint32_t));
    uint8_t *seen = calloc(P, 1);
    PGD_ASSERT(tile_of && cnt && seen);
    /* the tiles: consecutive rows from 0, experts ascending, 1 .. 64 rows, full but the last */
    uint32_t row = 0;
    for (uint32_t i = 0; i < g->n_tiles; i++) {
        const pgd_grouped_tile *tl = &g->tiles[i];
        INV(tl->row0 == row && tl->rows >= 1 && tl->rows <= PGD_GROUPED_TILE_ROWS &&
                tl->expert < NE && (uint64_t)tl->row0 + tl->rows <= P,
            "tile %u: expert %u rows %u + %u\n", i, tl->expert, tl->row0, tl->rows);
        if (i) {
            const pgd_grouped_tile *pr = &g->tiles[i - 1];
            INV(pr->expert < tl->expert ||
                    (pr->expert == tl->expert && pr->rows == PGD_GROUPED_TILE_ROWS),
                "tile %u after expert %u's tile of %u rows\n", i, pr->expert, pr->rows);
        }
        for (uint32_t r = tl->row0; r < tl->row0 + tl->rows && r < P; r++) tile_of[r] = i;
        row += tl->rows;
    }
    INV(row == P, "the tiles cover %u rows of %llu\n", row, (unsigned long long)P);
    /* the pairs: row_of a permutation, each row's token and tile's expert its pair's */
    for (uint64_t p = 0; p < P && row == P; p++) {
        const uint32_t r = g->row_of[p];
        INV(r < P && !seen[r], "pair %llu: row %u\n", (unsigned long long)p, r);
        if (r >= P || seen[r]) continue;
        seen[r] = 1;
        cnt[pick[p]]++;
        INV(g->sorted_tok[r] == p / K, "row %u: token %u, pair %llu's\n", r, g->sorted_tok[r],
            (unsigned long long)p);
        INV(g->tiles[tile_of[r]].expert == pick[p], "row %u in expert %u's tile, pair of %u\n", r,
            g->tiles[tile_of[r]].expert, pick[p]);
        if (r && tile_of[r - 1] != tile_of[r]) continue;
        INV(!r || g->sorted_tok[r - 1] < g->sorted_tok[r], "rows %u, %u: tokens %u, %u\n", r - 1, r,
            g->sorted_tok[r - 1], g->sorted_tok[r]);
    }
    /* tokens ascending across an expert's tiles too; each expert's tile count */
    for (uint32_t i = 1; i < g->n_tiles && row == P; i++) {
        const pgd_grouped_tile *tl = &g->tiles[i];
        if (tl->expert == g->tiles[i - 1].expert)
            INV(g->sorted_tok[tl->row0 - 1] < g->sorted_tok[tl->row0], "tile %u: token order\n", i);
    }
    uint32_t tiles = 0;
    for (uint32_t e = 0; e < NE; e++)
        tiles += (cnt[e] + PGD_GROUPED_TILE_ROWS - 1) / PGD_GROUPED_TILE_ROWS;
    INV(tiles == g->n_tiles, "%u tiles, the counts make %u\n", g->n_tiles, tiles);
#undef INV
    free(tile_of), free(cnt), free(seen);
    return bad;
}

/* One grouping of pick [T][K]: device against twin and the invariants. */
static void group_case(const uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K) {
    const uint64_t P = (uint64_t)T * K;
    const uint32_t mt = pgd_grouped_max_tiles((uint32_t)P, NE);
    grouping got = {0}, want = {0};
    uint32_t *d_pick = gt_upload(pick, sizeof(uint32_t) * P);
    REQUIRE(d_pick && grouping_alloc(&got, P, mt) && grouping_alloc(&want, P, mt));
    REQUIRE(group_dev(d_pick, T, NE, K, &got) == 0);
    pgd_cuda_moe_group_twin(pick, T, NE, K, want.sorted_tok, want.row_of, want.tiles,
                            &want.n_tiles);
    CHECK_EQ_INT(got.n_tiles, want.n_tiles);
    CHECK_EQ_INT(gt_count_diff("sorted_tok", got.sorted_tok, want.sorted_tok, P, 4), 0);
    CHECK_EQ_INT(gt_count_diff("row_of", got.row_of, want.row_of, P, 4), 0);
    if (got.n_tiles == want.n_tiles)
        CHECK_EQ_INT(
            gt_count_diff("tiles", got.tiles, want.tiles, want.n_tiles, sizeof(pgd_grouped_tile)),
            0);
    CHECK_EQ_INT(grouping_invariants(pick, T, NE, K, &got), 0);
    CHECK_EQ_INT(grouping_invariants(pick, T, NE, K, &want), 0);
    cudaFree(d_pick);
    grouping_free(&got), grouping_free(&want);
}

static void test_group(void) {
    static const uint32_t Ts[] = {1, 3, 17, 300}, NEs[] = {8, 60, 128, 512}, Ks[] = {1, 2, 8};
    uint32_t *pick = malloc(sizeof(uint32_t) * 8192 * 8);
    REQUIRE(pick);
    for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++)
        for (size_t ie = 0; ie < PGD_ARRAY_LEN(NEs); ie++)
            for (size_t ik = 0; ik < PGD_ARRAY_LEN(Ks); ik++) {
                const uint32_t T = Ts[it], NE = NEs[ie], K = Ks[ik];
                random_picks(pick, T, NE, K);
                group_case(pick, T, NE, K);
            }
    /* experts of 0, 1, 63, 64, 65 and 129 pairs (and two more of 0): T = 161, K = 2 */
    static const uint32_t cnt[8] = {0, 65, 1, 129, 0, 63, 64, 0};
    counted_picks(pick, 161, 8, 2, cnt);
    group_case(pick, 161, 8, 2);
    /* every token on experts 0 .. K-1 (T rows each: several tiles), of many experts */
    for (uint32_t t = 0; t < 300; t++)
        for (uint32_t j = 0; j < 8; j++) pick[t * 8 + j] = j;
    group_case(pick, 300, 512, 8);
    for (uint32_t t = 0; t < 300; t++)
        for (uint32_t j = 0; j < 8; j++) pick[t * 8 + j] = 504 + j;
    group_case(pick, 300, 512, 8);
    for (uint32_t t = 0; t < 100; t++) pick[t] = 0; /* one expert */
    group_case(pick, 100, 1, 1);
    if (!g_emu) { /* the largest prefill: P = 65536 */
        random_picks(pick, 8192, 512, 8);
        group_case(pick, 8192, 512, 8);
        random_picks(pick, 8192, 128, 8);
        group_case(pick, 8192, 128, 8);
    }
    free(pick);
}

/* ---- combine ---------------------------------------------------------------------------- */

/* out [T][E] from Y [P][E] (at Y + off floats: off 1 misaligns it) and a random row_of. */
static void combine_case(uint32_t T, uint32_t K, uint32_t E, uint32_t off) {
    const uint64_t P = (uint64_t)T * K, ny = P * E + off, no = (uint64_t)T * E;
    float *Y = malloc(sizeof(float) * ny), *w = malloc(sizeof(float) * P);
    float *got = malloc(sizeof(float) * no), *want = malloc(sizeof(float) * no);
    uint32_t *row_of = malloc(sizeof(uint32_t) * P);
    REQUIRE(Y && w && got && want && row_of);
    for (uint64_t i = 0; i < ny; i++) Y[i] = gt_frand() * 4.0f;
    for (uint64_t p = 0; p < P; p++) w[p] = gt_frand() * 0.5f + 0.5f, row_of[p] = (uint32_t)p;
    for (uint64_t p = P - 1; p > 0 && P > 1; p--) { /* rows in random order */
        const uint32_t s = gt_urand((uint32_t)p + 1), tmp = row_of[p];
        row_of[p] = row_of[s], row_of[s] = tmp;
    }
    float *d_y = gt_upload(Y, sizeof(float) * ny), *d_w = gt_upload(w, sizeof(float) * P);
    uint32_t *d_r = gt_upload(row_of, sizeof(uint32_t) * P);
    float *d_o = gt_poisoned(sizeof(float) * no);
    REQUIRE(d_y && d_w && d_r && d_o);
    CHECK_EQ_INT(pgd_cuda_moe_combine(d_y + off, d_r, d_w, T, K, E, d_o, NULL), 0);
    pgd_cuda_moe_combine_twin(Y + off, row_of, w, T, K, E, want);
    REQUIRE(gt_download(got, d_o, sizeof(float) * no) == 0);
    if (gt_count_diff("combine", got, want, no, sizeof(float)))
        CHECK(!fprintf(stderr, "  combine T %u K %u E %u off %u\n", T, K, E, off));
    cudaFree(d_y), cudaFree(d_w), cudaFree(d_r), cudaFree(d_o);
    free(Y), free(w), free(got), free(want), free(row_of);
}

static void test_combine(void) {
    static const uint32_t Ts[] = {1, 3, 17, 300}, Ks[] = {1, 2, 8}, Es[] = {1, 7, 8, 256, 1000};
    for (size_t it = 0; it < PGD_ARRAY_LEN(Ts); it++)
        for (size_t ik = 0; ik < PGD_ARRAY_LEN(Ks); ik++)
            for (size_t ie = 0; ie < PGD_ARRAY_LEN(Es); ie++) {
                if (g_emu && Ts[it] * Ks[ik] * Es[ie] > 100000) continue;
                combine_case(Ts[it], Ks[ik], Es[ie], 0);
                if (Es[ie] % 4 == 0) combine_case(Ts[it], Ks[ik], Es[ie], 1);
            }
    combine_case(2, 64, 16, 0);
}

/* ---- the chain -------------------------------------------------------------------------- */

/* A token's identity from its logits alone (the same alone and in a batch). */
static uint64_t token_key(const float *l, uint32_t NE) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t e = 0; e < NE; e++) h = pgd_hash64(h ^ f2u(l[e]));
    return h;
}

/* The expert's output of a token (its key), column c: what the grouped products would make. */
static float expert_out(uint64_t key, uint32_t e, uint32_t c) {
    return hash_float(key ^ ((uint64_t)e << 40) ^ c) * 3.0f;
}

/* route -> group -> (Y by row, from the rows' tokens and experts) -> combine, all of logits
 * [T][NE] on the device: pick, pick_w [T][K] and out [T][E] on the host. 0 or -1. */
static int chain(const float *logits, uint32_t T, uint32_t NE, uint32_t K, uint32_t E,
                 uint32_t *pick, float *pick_w, float *out) {
    const uint64_t P = (uint64_t)T * K;
    const uint32_t mt = pgd_grouped_max_tiles((uint32_t)P, NE);
    float *d_l = gt_upload(logits, sizeof(float) * T * NE);
    uint32_t *d_p = gt_poisoned(sizeof(uint32_t) * P), *d_c = gt_poisoned(4 * (NE + 1));
    uint32_t *d_st = gt_poisoned(sizeof(uint32_t) * P), *d_ro = gt_poisoned(sizeof(uint32_t) * P);
    uint32_t *d_nt = gt_poisoned(sizeof(uint32_t));
    float *d_w = gt_poisoned(sizeof(float) * P), *d_o = gt_poisoned(sizeof(float) * T * E);
    pgd_grouped_tile *d_tiles = gt_poisoned(sizeof(pgd_grouped_tile) * mt);
    uint32_t *st = malloc(sizeof(uint32_t) * P), *ro = malloc(sizeof(uint32_t) * P);
    float *Y = malloc(sizeof(float) * P * E), *d_y = NULL;
    int rc = -1;
    if (!(d_l && d_p && d_c && d_st && d_ro && d_nt && d_w && d_o && d_tiles && st && ro && Y))
        goto out;
    if (pgd_cuda_moe_route(d_l, T, NE, K, d_p, d_w, NULL) ||
        pgd_cuda_moe_group(d_p, T, NE, K, d_c, d_st, d_ro, d_tiles, d_nt, NULL) ||
        gt_download(pick, d_p, sizeof(uint32_t) * P) || gt_download(pick_w, d_w, 4 * P) ||
        gt_download(st, d_st, sizeof(uint32_t) * P) || gt_download(ro, d_ro, sizeof(uint32_t) * P))
        goto out;
    /* the gather: row r = row_of[p] holds pair p's expert's output of its token */
    for (uint64_t p = 0; p < P; p++) {
        if (ro[p] >= P || st[ro[p]] != p / K) goto out;
        const uint64_t key = token_key(logits + (p / K) * NE, NE);
        for (uint32_t c = 0; c < E; c++) Y[(uint64_t)ro[p] * E + c] = expert_out(key, pick[p], c);
    }
    if (!(d_y = gt_upload(Y, sizeof(float) * P * E))) goto out;
    if (pgd_cuda_moe_combine(d_y, d_ro, d_w, T, K, E, d_o, NULL) ||
        gt_download(out, d_o, sizeof(float) * T * E))
        goto out;
    rc = 0;
out:
    cudaFree(d_l), cudaFree(d_p), cudaFree(d_c), cudaFree(d_st), cudaFree(d_ro), cudaFree(d_nt);
    cudaFree(d_w), cudaFree(d_o), cudaFree(d_tiles), cudaFree(d_y);
    free(st), free(ro), free(Y);
    return rc;
}

static void chain_case(uint32_t T, uint32_t NE, uint32_t K, uint32_t E) {
    const uint64_t P = (uint64_t)T * K;
    float *l = malloc(sizeof(float) * T * NE), *w = malloc(sizeof(float) * P);
    float *out = malloc(sizeof(float) * T * E), *o1 = malloc(sizeof(float) * E);
    uint32_t *pick = malloc(sizeof(uint32_t) * P), p1[PGD_MOE_MAX_USED];
    float w1[PGD_MOE_MAX_USED];
    REQUIRE(l && w && out && o1 && pick);
    for (uint64_t i = 0; i < (uint64_t)T * NE; i++) l[i] = gt_frand() * 6.0f;
    REQUIRE(chain(l, T, NE, K, E, pick, w, out) == 0);
    /* out: the token's picks' outputs mixed on the host, without the grouping */
    uint64_t bad = 0;
    for (uint32_t t = 0; t < T; t++) {
        const uint64_t key = token_key(l + (uint64_t)t * NE, NE);
        for (uint32_t c = 0; c < E; c++) {
            float acc = 0.0f;
            for (uint32_t j = 0; j < K; j++)
                acc = fmaf(w[t * K + j], expert_out(key, pick[t * K + j], c), acc);
            if (f2u(acc) != f2u(out[(uint64_t)t * E + c]) && !bad++)
                fprintf(stderr, "  chain T %u: token %u column %u: %.9g, want %.9g\n", T, t, c,
                        out[(uint64_t)t * E + c], acc);
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* tokens alone: their bits in the batch */
    const uint32_t alone[] = {0, T / 2, T - 1};
    for (size_t i = 0; i < PGD_ARRAY_LEN(alone); i++) {
        const uint32_t t = alone[i];
        REQUIRE(chain(l + (uint64_t)t * NE, 1, NE, K, E, p1, w1, o1) == 0);
        CHECK_EQ_INT(gt_count_diff("chain pick alone", p1, pick + t * K, K, 4), 0);
        CHECK_EQ_INT(gt_count_diff("chain pick_w alone", w1, w + t * K, K, 4), 0);
        CHECK_EQ_INT(gt_count_diff("chain out alone", o1, out + (uint64_t)t * E, E, 4), 0);
    }
    free(l), free(w), free(out), free(o1), free(pick);
}

static void test_chain(void) {
    chain_case(g_emu ? 40 : 300, 128, 8, 64);
    chain_case(g_emu ? 40 : 300, 60, 2, 7);
    chain_case(17, 512, 8, 32);
}

/* ---- arguments -------------------------------------------------------------------------- */

static void test_errors(void) {
    /* NE 0 or above 512; K 0, above NE or above 64 */
    static const uint32_t bad[][2] = {{0, 1}, {513, 8}, {8, 0}, {8, 9}, {128, 65}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(bad); i++) {
        const uint32_t NE = bad[i][0], K = bad[i][1];
        CHECK_EQ_INT(pgd_cuda_moe_route(NULL, 1, NE, K, NULL, NULL, NULL), PGD_EINVAL);
        CHECK_EQ_INT(pgd_cuda_moe_group(NULL, 1, NE, K, NULL, NULL, NULL, NULL, NULL, NULL),
                     PGD_EINVAL);
    }
    CHECK_EQ_INT(pgd_cuda_moe_combine(NULL, NULL, NULL, 1, 0, 8, NULL, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_moe_combine(NULL, NULL, NULL, 1, 65, 8, NULL, NULL), PGD_EINVAL);
    /* nothing to do: no launch, no fault */
    CHECK_EQ_INT(pgd_cuda_moe_route(NULL, 0, 128, 8, NULL, NULL, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_moe_group(NULL, 0, 128, 8, NULL, NULL, NULL, NULL, NULL, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_moe_combine(NULL, NULL, NULL, 0, 8, 64, NULL, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_moe_combine(NULL, NULL, NULL, 4, 8, 0, NULL, NULL), 0);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

int main(void) {
    if (!gt_start()) return 77;
    g_emu = getenv("PGD_CUDA_EMU") != NULL;
    RUN(test_route);
    RUN(test_route_rules);
    RUN(test_group);
    RUN(test_combine);
    RUN(test_chain);
    RUN(test_errors);
    return test_summary();
}
