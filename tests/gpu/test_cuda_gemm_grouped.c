/*
 * tests/gpu/test_cuda_gemm_grouped.c — the grouped (mixture-of-experts) GEMM,
 * pgd_cuda_gemm_grouped (kernels/cuda/gemm_grouped.h), against its CPU twin:
 *   - shapes with N and K multiples of 8 but not of the kernel's 64 (N = 72, K = 40, ...), a
 *     Qwen3-30B-A3B-like gate/up and down (N 1536, K 2048; N 2048, K 768) off the emulator;
 *     experts with 0, 1, 63, 64 and 65 rows; random gather indices (repeats allowed), and no
 *     gather; tiles made as the header says (pairs sorted by expert, each expert's rows in tiles
 *     of 64) and a decode step (one token, 8 experts of 16: tiles of one row);
 *   - every covered row within a relative L2 error of max(1e-5, K * 2^-27) of the twin's f32
 *     (test_cuda_gemm.c explains the bound: the tensor cores' f32 accumulation), and with bf16
 *     output each element exactly the f32 run's element rounded to bf16 (nearest even), the row
 *     within that tolerance plus bf16's rounding (2^-8) of the twin, no element far off;
 *   - no stray writes: Y poisoned with NaN (all bits set) before every run; rows no tile covers
 *     (rows between the tiles, and the rows of tiles past *n_tiles) stay all-ones; grids of more
 *     tiles than *n_tiles whose extra tiles hold garbage (an expert and rows far out of range:
 *     a CTA that read one would fault), *n_tiles 0;
 *   - batch invariance: every (input row, expert) pair's output bits are the same in the
 *     header's tiles of 64, in tiles of random sizes (a third of them one row) with the experts
 *     and rows in another order and rows between the tiles, and with every pair alone in its
 *     tile in reverse order;
 *   - bad arguments refused (N or K not a multiple of 8, X, W or Y not 16-byte aligned, more
 *     than 65535 tiles); max_tiles 0 and N 0 do nothing; K 0 writes zeros.
 * Random data (never zeros); the seed is printed (PGD_SEED repeats it). On the CPU emulation of
 * the runtime (tests/cuda_emu, PGD_CUDA_EMU set) the shapes are small. Exit 77 (skipped) without
 * a GPU. Label `cuda`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemm_grouped.h"
#include "testutil.h"
#include "gpu_testutil.h"

/* The operands: X bf16 [NX][K], W bf16 [NE][N][K], on the host and the device. */
typedef struct {
    uint32_t N, K, NE, NX;
    uint16_t *X, *W, *dX, *dW;
} problem;

/* The sorted order of P (input row, expert) pairs: R rows (gather [R]), pair p at row pos[p];
 * rows no tile covers (gaps) get a random input row too. tiles [n_tiles]. */
typedef struct {
    uint32_t R, n_tiles;
    uint32_t *gather, *pos;
    pgd_grouped_tile *tiles;
} layout;

enum { SORTED, SHUFFLED, ALONE }; /* how make_layout orders and tiles the pairs */

static bool emu(void) {
    return getenv("PGD_CUDA_EMU") != NULL;
}

static uint16_t rand_bf16(double scale) {
    return pgd_f32_to_bf16((float)(gt_frand() * scale));
}

static bool problem_make(problem *p, uint32_t N, uint32_t K, uint32_t NE, uint32_t NX) {
    const uint64_t nx = (uint64_t)NX * K, nw = (uint64_t)NE * N * K;
    *p = (problem){N, K, NE, NX, malloc(nx * 2 + 2), malloc(nw * 2 + 2), NULL, NULL};
    if (!p->X || !p->W) return false;
    for (uint64_t i = 0; i < nx; i++) p->X[i] = rand_bf16(1.0);
    for (uint64_t i = 0; i < nw; i++) p->W[i] = rand_bf16(1.0 / sqrt((double)K + 1));
    p->dX = gt_upload(p->X, nx * 2);
    p->dW = gt_upload(p->W, nw * 2);
    return p->dX && p->dW;
}

static void problem_free(problem *p) {
    free(p->X), free(p->W), cudaFree(p->dX), cudaFree(p->dW);
}

static void layout_free(layout *L) {
    free(L->gather), free(L->pos), free(L->tiles);
}

static void shuffle(uint32_t *a, uint32_t n) {
    for (uint32_t i = n; i > 1; i--) {
        const uint32_t j = gt_urand(i), t = a[i - 1];
        a[i - 1] = a[j], a[j] = t;
    }
}

/* Lays out P pairs (xrow[p], expert[p]) of NE experts. SORTED: the header's order (by expert,
 * each expert's pairs in their order, tiles of 64, the last partial); SHUFFLED: the experts and
 * each expert's pairs in random order, tiles of random sizes (a third of them one row); ALONE:
 * every pair its own tile, the pairs in reverse order. gaps: a row no tile covers before every
 * tile and after the last. */
static bool make_layout(layout *L, const uint32_t *xrow, const uint32_t *expert, uint32_t P,
                        uint32_t NE, int how, bool gaps, uint32_t NX) {
    const uint32_t cap = 2 * P + NE + 2;
    *L = (layout){0, 0, malloc(cap * 4), malloc((P + 1) * 4),
                  malloc(cap * sizeof(pgd_grouped_tile))};
    uint32_t *order = malloc((P + 1) * 4), *eo = malloc((NE + 1) * 4);
    if (!L->gather || !L->pos || !L->tiles || !order || !eo) {
        free(order), free(eo);
        return false;
    }
    uint32_t n = 0; /* the pairs in their sorted order */
    if (how == ALONE) {
        for (uint32_t p = P; p-- > 0;) order[n++] = p;
    } else {
        for (uint32_t e = 0; e < NE; e++) eo[e] = e;
        if (how == SHUFFLED) shuffle(eo, NE);
        for (uint32_t i = 0; i < NE; i++) {
            const uint32_t first = n;
            for (uint32_t p = 0; p < P; p++)
                if (expert[p] == eo[i]) order[n++] = p;
            if (how == SHUFFLED) shuffle(order + first, n - first);
        }
    }
    for (uint32_t i = 0; i < n;) { /* i: the next pair; one tile of one expert a pass */
        const uint32_t e = expert[order[i]];
        uint32_t rows = 1;
        while (i + rows < n && expert[order[i + rows]] == e && rows < PGD_GROUPED_TILE_ROWS) rows++;
        if (how == SHUFFLED && gt_urand(3))
            rows = 1 + gt_urand(rows); /* else one row */
        else if (how == SHUFFLED || how == ALONE)
            rows = 1;
        if (gaps) L->gather[L->R++] = gt_urand(NX);
        L->tiles[L->n_tiles++] = (pgd_grouped_tile){e, L->R, rows};
        for (uint32_t r = 0; r < rows; r++, i++) {
            L->pos[order[i]] = L->R;
            L->gather[L->R++] = xrow[order[i]];
        }
    }
    if (gaps) L->gather[L->R++] = gt_urand(NX);
    free(order), free(eo);
    return true;
}

/* Y (R rows) of one launch of the first n_run tiles in a grid of max_tiles (the device's tiles
 * past n_run garbage), Y poisoned first; gather used or not. 0, or -1 (reported). */
static int launch(const problem *p, const layout *L, uint32_t n_run, uint32_t max_tiles,
                  bool use_gather, bool out_bf16, void *Yh) {
    const size_t ybytes = (size_t)L->R * p->N * (out_bf16 ? 2 : 4);
    pgd_grouped_tile *t = malloc((max_tiles + 1) * sizeof *t);
    if (!t) return -1;
    for (uint32_t i = 0; i < max_tiles; i++)
        t[i] = i < n_run ? L->tiles[i] : (pgd_grouped_tile){0xFFFFFF00u - i, 0x7FFFFFF0u, 64};
    uint32_t *dgather = gt_upload(L->gather, (size_t)L->R * 4), *dn = gt_upload(&n_run, 4);
    pgd_grouped_tile *dtiles = gt_upload(t, (size_t)max_tiles * sizeof *t);
    void *dY = gt_poisoned(ybytes);
    int rc = -1;
    if (dgather && dn && dtiles && dY) {
        rc = pgd_cuda_gemm_grouped(p->dX, use_gather ? dgather : NULL, p->dW, p->N, p->K, dtiles,
                                   dn, max_tiles, out_bf16, dY, NULL);
        if (rc) fprintf(stderr, "  launch: %d %s\n", rc, pgd_error_detail());
        if (!rc) rc = gt_download(Yh, dY, ybytes);
    }
    cudaFree(dgather), cudaFree(dn), cudaFree(dtiles), cudaFree(dY), free(t);
    return rc;
}

static double rel_l2(const float *a, const float *b, uint32_t n) {
    double d = 0, r = 0;
    for (uint32_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d); /* NaN stays NaN: a failed comparison */
}

static bool all_ones(const void *p, size_t bytes) {
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != 0xFF) return false;
    return true;
}

/* One layout's f32 and bf16 runs (the first n_run tiles in a grid of max_tiles) checked against
 * the twin and for stray writes; the outputs returned in *yf and *yb (the caller frees them), or
 * NULL when a run failed. */
static void check_layout(const char *what, const problem *p, const layout *L, uint32_t n_run,
                         uint32_t max_tiles, bool use_gather, float **yf, uint16_t **yb) {
    const uint32_t N = p->N, K = p->K, R = L->R;
    const uint64_t ny = (uint64_t)R * N;
    float *got = malloc(ny * 4 + 4), *ref = malloc(ny * 4 + 4), *row = malloc((uint64_t)N * 4 + 4);
    uint16_t *gotb = malloc(ny * 2 + 2), *refb = malloc(ny * 2 + 2);
    bool *covered = calloc(R + 1, 1);
    *yf = NULL, *yb = NULL;
    REQUIRE(got && ref && row && gotb && refb && covered);
    for (uint32_t i = 0; i < n_run; i++)
        for (uint32_t r = 0; r < L->tiles[i].rows; r++) covered[L->tiles[i].row0 + r] = true;
    const uint32_t *g = use_gather ? L->gather : NULL;
    pgd_cuda_gemm_grouped_twin(p->X, g, p->W, N, K, L->tiles, n_run, false, ref);
    pgd_cuda_gemm_grouped_twin(p->X, g, p->W, N, K, L->tiles, n_run, true, refb);
    /* bf16: |bf16(y) - y| <= 2^-8 |y| for every y, so a row within tol of the twin in f32 is
     * within tol + 2^-8 (1 + tol) of it once rounded */
    const double tol = fmax(1e-5, K * 0x1p-27), tolb = tol + 0x1p-8 * (1 + tol);
    const int rf = launch(p, L, n_run, max_tiles, use_gather, false, got);
    const int rb = launch(p, L, n_run, max_tiles, use_gather, true, gotb);
    CHECK_EQ_INT(rf, 0);
    CHECK_EQ_INT(rb, 0);
    if (rf || rb) goto out;
    double worst = 0, worstb = 0;
    uint64_t bad = 0, badb = 0, stray = 0, unrounded = 0, far = 0, twin_bf16 = 0, flips = 0;
    for (uint32_t r = 0; r < R; r++) {
        const float *gf = got + (uint64_t)r * N, *rr = ref + (uint64_t)r * N;
        const uint16_t *gb = gotb + (uint64_t)r * N, *rb16 = refb + (uint64_t)r * N;
        if (!covered[r]) {
            stray += !all_ones(gf, (size_t)N * 4) + !all_ones(gb, (size_t)N * 2);
            continue;
        }
        const double e = rel_l2(gf, rr, N);
        worst = e > worst ? e : worst;
        bad += !(e <= tol);
        double r2 = 0;
        for (uint32_t n = 0; n < N; n++) {
            r2 += (double)rr[n] * rr[n];
            unrounded += gb[n] != pgd_f32_to_bf16(gf[n]);
            twin_bf16 += rb16[n] != pgd_f32_to_bf16(rr[n]);
            flips += gb[n] != rb16[n];
        }
        const double rms = sqrt(r2 / (N ? N : 1));
        for (uint32_t n = 0; n < N; n++) {
            const double d = (double)pgd_bf16_to_f32(gb[n]) - rr[n];
            far += !(fabs(d) <= 0x1p-8 * (fabs(rr[n]) + rms)); /* NaN counts */
            row[n] = pgd_bf16_to_f32(gb[n]);
        }
        const double eb = rel_l2(row, rr, N);
        worstb = eb > worstb ? eb : worstb;
        badb += !(eb <= tolb);
    }
    fprintf(stderr,
            "    %s: %u x %u, %u rows, %u of %u tiles: worst row error %.2e (f32), %.2e (bf16; "
            "%llu elements not the twin's bf16)\n",
            what, N, K, R, n_run, max_tiles, worst, worstb, (unsigned long long)flips);
    if (bad || badb || stray || unrounded || far || twin_bf16)
        fprintf(stderr,
                "    %s: %llu rows past %.1e, %llu bf16 rows past %.1e, %llu stray writes (rows), "
                "%llu bf16 elements not the f32 rounded, %llu far, %llu of the twin's bf16 not its "
                "f32 rounded\n",
                what, (unsigned long long)bad, tol, (unsigned long long)badb, tolb,
                (unsigned long long)stray, (unsigned long long)unrounded, (unsigned long long)far,
                (unsigned long long)twin_bf16);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(badb, 0);
    CHECK_EQ_INT(stray, 0);
    CHECK_EQ_INT(unrounded, 0);
    CHECK_EQ_INT(far, 0);
    CHECK_EQ_INT(twin_bf16, 0);
    *yf = got, *yb = gotb, got = NULL, gotb = NULL;
out:
    free(got), free(ref), free(row), free(gotb), free(refb), free(covered);
}

/* P pairs: expert e gets counts[e] of them (in a random interleaving), each a random input row. */
static uint32_t make_pairs(const uint32_t *counts, uint32_t NE, uint32_t NX, uint32_t *xrow,
                           uint32_t *expert) {
    uint32_t P = 0;
    for (uint32_t e = 0; e < NE; e++)
        for (uint32_t i = 0; i < counts[e]; i++) expert[P++] = e;
    shuffle(expert, P);
    for (uint32_t p = 0; p < P; p++) xrow[p] = gt_urand(NX);
    return P;
}

/* One shape: the header's layout with rows between the tiles (gather), then without gaps and
 * without gather (row r's input is X's row r), then a grid of more tiles than the list, the
 * last two tiles and then all of them left out. */
static void check_shape(uint32_t N, uint32_t K, const uint32_t *counts, uint32_t NE) {
    uint32_t P = 0;
    for (uint32_t e = 0; e < NE; e++) P += counts[e];
    problem pb;
    uint32_t *xrow = malloc((P + 1) * 4), *expert = malloc((P + 1) * 4);
    REQUIRE(xrow && expert);
    REQUIRE(problem_make(&pb, N, K, NE, 2 * P + NE + 2));
    make_pairs(counts, NE, pb.NX, xrow, expert);
    layout L;
    REQUIRE(make_layout(&L, xrow, expert, P, NE, SORTED, true, pb.NX));
    const uint32_t max = pgd_grouped_max_tiles(P, NE);
    CHECK(L.n_tiles <= max);
    float *yf;
    uint16_t *yb;
    check_layout("sorted, gaps", &pb, &L, L.n_tiles, max, true, &yf, &yb);
    free(yf), free(yb);
    layout_free(&L);
    REQUIRE(make_layout(&L, xrow, expert, P, NE, SORTED, false, pb.NX));
    check_layout("sorted, no gather", &pb, &L, L.n_tiles, max, false, &yf, &yb);
    free(yf), free(yb);
    if (L.n_tiles >= 2) {
        check_layout("partial list", &pb, &L, L.n_tiles - 2, L.n_tiles + 3, true, &yf, &yb);
        free(yf), free(yb);
    }
    check_layout("no tiles", &pb, &L, 0, L.n_tiles + 1, true, &yf, &yb);
    free(yf), free(yb);
    layout_free(&L);
    problem_free(&pb);
    free(xrow), free(expert);
}

static void test_shapes(void) {
    /* 0, 1, 63, 64, 65 rows, and a few more */
    static const uint32_t counts[] = {64, 0, 1, 65, 63, 3, 0, 130};
    static const uint32_t shapes[][2] = {{72, 40},     {8, 8},      {136, 264},  {64, 64},
                                         {1536, 2048}, {2048, 768}, {4096, 520}, {200, 136}};
    static const uint32_t emu_shapes[][2] = {{72, 40}, {8, 8}, {136, 264}, {64, 64}, {200, 136}};
    const bool e = emu();
    const size_t n = e ? PGD_ARRAY_LEN(emu_shapes) : PGD_ARRAY_LEN(shapes);
    for (size_t i = 0; i < n; i++)
        check_shape(e ? emu_shapes[i][0] : shapes[i][0], e ? emu_shapes[i][1] : shapes[i][1],
                    counts, PGD_ARRAY_LEN(counts));
}

/* A decode step: one token routed to 8 of 16 experts, every tile one row, the grid sized for 8
 * pairs over 16 experts. */
static void test_decode(void) {
    const uint32_t N = emu() ? 136 : 1536, K = emu() ? 264 : 2048, NE = 16, P = 8;
    problem pb;
    REQUIRE(problem_make(&pb, N, K, NE, 4));
    uint32_t ex[NE], xrow[P];
    for (uint32_t e = 0; e < NE; e++) ex[e] = e;
    shuffle(ex, NE);
    const uint32_t tok = gt_urand(4);
    for (uint32_t p = 0; p < P; p++) xrow[p] = tok;
    layout L;
    REQUIRE(make_layout(&L, xrow, ex, P, NE, SORTED, false, pb.NX));
    CHECK_EQ_INT(L.n_tiles, P);
    float *yf;
    uint16_t *yb;
    check_layout("decode", &pb, &L, L.n_tiles, pgd_grouped_max_tiles(P, NE), true, &yf, &yb);
    free(yf), free(yb);
    layout_free(&L);
    problem_free(&pb);
}

/* The same pairs in three layouts (SORTED; SHUFFLED with gaps; ALONE): each pair's output bits
 * the same in all of them, f32 and bf16. */
static void test_invariance(void) {
    const uint32_t N = emu() ? 72 : 1024, K = emu() ? 136 : 1032, NE = 5;
    static const uint32_t counts[] = {64, 1, 70, 20, 0};
    uint32_t xrow[160], expert[160];
    problem pb;
    REQUIRE(problem_make(&pb, N, K, NE, 50));
    const uint32_t P = make_pairs(counts, NE, pb.NX, xrow, expert);
    float *yf[3] = {0};
    uint16_t *yb[3] = {0};
    layout L[3];
    static const char *names[] = {"sorted", "shuffled, gaps", "alone, reversed"};
    for (int h = 0; h < 3; h++) {
        REQUIRE(make_layout(&L[h], xrow, expert, P, NE, h, h == SHUFFLED, pb.NX));
        check_layout(names[h], &pb, &L[h], L[h].n_tiles, L[h].n_tiles + 1, true, &yf[h], &yb[h]);
        REQUIRE(yf[h] && yb[h]);
    }
    for (int h = 1; h < 3; h++) {
        uint64_t differ = 0;
        for (uint32_t p = 0; p < P; p++) {
            const uint64_t a = (uint64_t)L[0].pos[p] * N, b = (uint64_t)L[h].pos[p] * N;
            differ += memcmp(yf[0] + a, yf[h] + b, (size_t)N * 4) != 0;
            differ += memcmp(yb[0] + a, yb[h] + b, (size_t)N * 2) != 0;
        }
        if (differ)
            fprintf(stderr, "    %s: %llu rows' bits differ from the sorted layout's\n", names[h],
                    (unsigned long long)differ);
        CHECK_EQ_INT(differ, 0);
    }
    for (int h = 0; h < 3; h++) free(yf[h]), free(yb[h]), layout_free(&L[h]);
    problem_free(&pb);
}

static void test_refuses(void) {
    uint16_t *d = gt_poisoned(1 << 16);
    uint32_t *dn = gt_upload(&(uint32_t){1}, 4), h[64];
    pgd_grouped_tile t = {0, 0, 1};
    pgd_grouped_tile *dt = gt_upload(&t, sizeof t);
    REQUIRE(d && dn && dt);
    void *Y = d + 8192; /* 16 KiB in */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d, 60, 64, dt, dn, 1, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d, 64, 36, dt, dn, 1, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d + 1, NULL, d, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d + 4, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d, 64, 64, dt, dn, 1, true, d + 8193, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d, 64, 64, dt, dn, 65536, false, Y, NULL),
                 PGD_EINVAL);
    /* nothing to do: no launch, Y untouched */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d, 64, 64, dt, dn, 0, false, Y, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d, 0, 64, dt, dn, 1, false, Y, NULL), 0);
    REQUIRE(gt_download(h, Y, sizeof h) == 0);
    CHECK(all_ones(h, sizeof h));
    /* K 0: empty sums, row 0 zeros (64 f32), row 1 untouched */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped(d, NULL, d, 64, 0, dt, dn, 1, false, Y, NULL), 0);
    float z[128];
    REQUIRE(gt_download(z, Y, sizeof z) == 0);
    uint64_t nonzero = 0;
    for (int i = 0; i < 64; i++) nonzero += z[i] != 0.0f;
    CHECK_EQ_INT(nonzero, 0);
    CHECK(all_ones(z + 64, 64 * 4));
    cudaFree(d), cudaFree(dn), cudaFree(dt);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_refuses);
    RUN(test_shapes);
    RUN(test_decode);
    RUN(test_invariance);
    return test_summary();
}
