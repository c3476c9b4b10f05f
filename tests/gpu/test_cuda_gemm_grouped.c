/*
 * tests/gpu/test_cuda_gemm_grouped.c — the grouped (mixture-of-experts) GEMM,
 * pgd_cuda_gemm_grouped (kernels/cuda/gemm_grouped.h), and its forms over 8-bit and 4-bit
 * weights, against their CPU twins:
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
 * The 8-bit forms (pgd_cuda_gemm_grouped_q8 and the dense pgd_cuda_gemm_q8) the same way against
 * their twin, within the same tolerance (check_layout argues it): shapes with K 32 and 96 (a last
 * chunk of one block), 768 and 2048 (Qwen3-30B-A3B's), N not a multiple of 64; values over all of
 * int8 (every row holding -128 and 127), f16 scales of either sign over 2^-3 .. 2^3 of their
 * size and some subnormal, d's base only 2-byte aligned; the decode step; the three layouts'
 * rows bit-identical to each other and to the dense form's rows of every expert; the dense form
 * at M = 1, 7, 64, 65, 128, 300 (rows bit-identical across M, no row past M written), with Y's
 * rows N + 24 apart (pgd_cuda_gemm_q8_ld: the same bits, the gaps untouched) and, off
 * the emulator, over more than 2^31 elements of Y; a block that cancels exactly, so that the
 * scale applied other than once a block of 32 shows far beyond rounding; bad arguments (K not a
 * multiple of 32, W.d odd, ...) refused; K 0 writes zeros. Every launch's Y has a row more than
 * it should write, which must stay all-ones. (A barrier missing between the kernel's conversion
 * of the values in shared memory and the other warps' reads of them shows only when warps run out
 * of step: tests/cuda_emu's EMU_ORDER=warp.)
 * The 4-bit forms (pgd_cuda_gemm_grouped_q4 and the dense pgd_cuda_gemm_q4) as the 8-bit ones,
 * within the same tolerance (check_layout argues it): the same shapes, layouts, decode step,
 * dense M's and bit-identities; nibbles over 0 .. 15 (every row holding 0 and 15 in a byte's
 * either half), d and m of either sign and some subnormal, dm's base only 4-byte aligned; bad
 * arguments (K not a multiple of 32, W.q not 16-byte or W.dm not 4-byte aligned, ...) refused; K 0
 * writes zeros; and test_q4_block_order: integer inputs that make every block's p and s exact,
 * so that each output's bits are the header's order's, computed on the host (p joined before s,
 * each a block at a time, blocks ascending), with a block whose k-steps' terms cancel only
 * across the block (an offset or scale applied per k-step lands far off).
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

enum { BF16, Q8, Q4 }; /* the forms of W */

/* The operands: X bf16 [NX][K], and W bf16 [NE][N][K], or (Q8) in q8.h's form, q [NE][N][K] and
 * d [NE][N][K / 32], or (Q4) in q4.h's, q [NE][N][K / 2] and dm [NE][N][K / 32], on the host and
 * the device. The device's d starts 2 bytes into its buffer (dWd = dWd0 + 1): only 2-byte
 * aligned, as the header allows; its dm 4 bytes in (dWdm = dWdm0 + 1): 4-byte aligned only. */
typedef struct {
    uint32_t N, K, NE, NX;
    int form;
    uint16_t *X, *W, *dX, *dW;
    int8_t *Wq, *dWq;
    uint16_t *Wd, *dWd0, *dWd;
    uint8_t *W4, *dW4;
    uint32_t *Wdm, *dWdm0, *dWdm;
} problem;

/* The sorted order of P (input row, expert) pairs: R rows (gather [R]), pair p at row pos[p];
 * rows no tile covers (gaps) get a random input row too. tiles [n_tiles]. dense: the dense form's
 * rows [0, R) of X times expert tiles[0].expert (one tile {expert, 0, R}, for the twin). */
typedef struct {
    uint32_t R, n_tiles;
    uint32_t *gather, *pos;
    pgd_grouped_tile *tiles;
    bool dense;
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
    *p = (problem){
        .N = N, .K = K, .NE = NE, .NX = NX, .X = malloc(nx * 2 + 2), .W = malloc(nw * 2 + 2)};
    if (!p->X || !p->W) return false;
    for (uint64_t i = 0; i < nx; i++) p->X[i] = rand_bf16(1.0);
    for (uint64_t i = 0; i < nw; i++) p->W[i] = rand_bf16(1.0 / sqrt((double)K + 1));
    p->dX = gt_upload(p->X, nx * 2);
    p->dW = gt_upload(p->W, nw * 2);
    return p->dX && p->dW;
}

/* A random f16 scale: either sign, magnitudes over 2^-3 .. 2^3 of 1 / (64 sqrt(K)) (a Q8_0
 * block's max|w| / 127 for weights of that size), and one in 32 a subnormal. Never 0. */
static uint16_t rand_scale(uint32_t K) {
    const uint16_t sign = gt_urand(2) ? 0x8000 : 0;
    if (gt_urand(32) == 0) return sign | (uint16_t)(1 + gt_urand(0x3FF));
    const double m = (1.0 + 0.999 * fabs(gt_frand())) * ldexp(1.0, (int)gt_urand(7) - 3);
    return sign | pgd_f32_to_f16((float)(m / (64.0 * sqrt((double)K + 1))));
}

/* The q8 form's problem: values uniform over all 256 int8 (each row holds -128 and 127 at random
 * places), scales by rand_scale. */
static bool problem_make_q8(problem *p, uint32_t N, uint32_t K, uint32_t NE, uint32_t NX) {
    const uint64_t nx = (uint64_t)NX * K, nw = (uint64_t)NE * N * K, nd = nw / PGD_Q8_BLOCK;
    *p = (problem){.N = N, .K = K, .NE = NE, .NX = NX, .form = Q8, .X = malloc(nx * 2 + 2)};
    p->Wq = malloc(nw + 1), p->Wd = malloc(nd * 2 + 2);
    if (!p->X || !p->Wq || !p->Wd) return false;
    for (uint64_t i = 0; i < nx; i++) p->X[i] = rand_bf16(1.0);
    for (uint64_t i = 0; i < nw; i++) p->Wq[i] = (int8_t)(gt_next() >> 56);
    for (uint64_t r = 0; K >= 2 && r < (uint64_t)NE * N; r++) {
        const uint32_t a = gt_urand(K), b = (a + 1 + gt_urand(K - 1)) % K;
        p->Wq[r * K + a] = -128, p->Wq[r * K + b] = 127;
    }
    for (uint64_t i = 0; i < nd; i++) p->Wd[i] = rand_scale(K);
    p->dX = gt_upload(p->X, nx * 2);
    p->dWq = gt_upload(p->Wq, nw);
    p->dWd0 = gt_poisoned(nd * 2 + 2);
    if (!p->dX || !p->dWq || !p->dWd0) return false;
    p->dWd = p->dWd0 + 1;
    return cudaMemcpy(p->dWd, p->Wd, nd * 2, cudaMemcpyHostToDevice) == cudaSuccess;
}

/* The q4 form's problem: values uniform over the nibbles (each row holds the bytes 0x0F and
 * 0xF0 at random places: 0 and 15 in both halves of a byte), d and m by rand_scale (m 8 times
 * larger, as a Q4_1 block's offset is some 8 steps: a row's terms p d and s m of like size). */
static bool problem_make_q4(problem *p, uint32_t N, uint32_t K, uint32_t NE, uint32_t NX) {
    const uint64_t nx = (uint64_t)NX * K, nq = (uint64_t)NE * N * K / 2, nd = nq * 2 / PGD_Q4_BLOCK;
    *p = (problem){.N = N, .K = K, .NE = NE, .NX = NX, .form = Q4, .X = malloc(nx * 2 + 2)};
    p->W4 = malloc(nq + 1), p->Wdm = malloc(nd * 4 + 4);
    if (!p->X || !p->W4 || !p->Wdm) return false;
    for (uint64_t i = 0; i < nx; i++) p->X[i] = rand_bf16(1.0);
    for (uint64_t i = 0; i < nq; i++) p->W4[i] = (uint8_t)(gt_next() >> 56);
    for (uint64_t r = 0; K >= 4 && r < (uint64_t)NE * N; r++) {
        const uint32_t a = gt_urand(K / 2), b = (a + 1 + gt_urand(K / 2 - 1)) % (K / 2);
        p->W4[r * K / 2 + a] = 0x0F, p->W4[r * K / 2 + b] = 0xF0;
    }
    for (uint64_t i = 0; i < nd; i++) {
        const float m = pgd_f16_to_f32(rand_scale(K)) * 8.0f;
        p->Wdm[i] = rand_scale(K) | (uint32_t)pgd_f32_to_f16(m) << 16;
    }
    p->dX = gt_upload(p->X, nx * 2);
    p->dW4 = gt_upload(p->W4, nq);
    p->dWdm0 = gt_poisoned(nd * 4 + 4);
    if (!p->dX || !p->dW4 || !p->dWdm0) return false;
    p->dWdm = p->dWdm0 + 1;
    return cudaMemcpy(p->dWdm, p->Wdm, nd * 4, cudaMemcpyHostToDevice) == cudaSuccess;
}

static bool problem_make_form(problem *p, int form, uint32_t N, uint32_t K, uint32_t NE,
                              uint32_t NX) {
    return form == Q4   ? problem_make_q4(p, N, K, NE, NX)
           : form == Q8 ? problem_make_q8(p, N, K, NE, NX)
                        : problem_make(p, N, K, NE, NX);
}

/* p's host planes onto the device again (after a test changed them) */
static bool problem_upload(problem *p) {
    const uint64_t nx = (uint64_t)p->NX * p->K, nw = (uint64_t)p->NE * p->N * p->K;
    bool ok = cudaMemcpy(p->dX, p->X, nx * 2, cudaMemcpyHostToDevice) == cudaSuccess;
    if (p->form == Q8)
        ok = ok && cudaMemcpy(p->dWq, p->Wq, nw, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(p->dWd, p->Wd, nw / 16, cudaMemcpyHostToDevice) == cudaSuccess;
    if (p->form == Q4)
        ok = ok && cudaMemcpy(p->dW4, p->W4, nw / 2, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(p->dWdm, p->Wdm, nw / 8, cudaMemcpyHostToDevice) == cudaSuccess;
    return ok;
}

static void problem_free(problem *p) {
    free(p->X), free(p->W), cudaFree(p->dX), cudaFree(p->dW);
    free(p->Wq), free(p->Wd), cudaFree(p->dWq), cudaFree(p->dWd0);
    free(p->W4), free(p->Wdm), cudaFree(p->dW4), cudaFree(p->dWdm0);
}

/* The twin of p's form. */
static void twin(const problem *p, const uint32_t *gather, const pgd_grouped_tile *tiles,
                 uint32_t n_tiles, bool out_bf16, void *Y) {
    if (p->form == Q4)
        pgd_cuda_gemm_grouped_q4_twin(p->X, gather, p->W4, p->Wdm, p->N, p->K, tiles, n_tiles,
                                      out_bf16, Y);
    else if (p->form == Q8)
        pgd_cuda_gemm_grouped_q8_twin(p->X, gather, p->Wq, p->Wd, p->N, p->K, tiles, n_tiles,
                                      out_bf16, Y);
    else
        pgd_cuda_gemm_grouped_twin(p->X, gather, p->W, p->N, p->K, tiles, n_tiles, out_bf16, Y);
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
    *L = (layout){
        0, 0, malloc(cap * 4), malloc((P + 1) * 4), malloc(cap * sizeof(pgd_grouped_tile)), false};
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

static bool all_ones(const void *p, size_t bytes) {
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != 0xFF) return false;
    return true;
}

/* The dense form's layout: rows [0, M) of X times expert e. */
static bool make_dense(layout *L, uint32_t e, uint32_t M) {
    *L = (layout){M, 1, NULL, NULL, malloc(sizeof(pgd_grouped_tile)), true};
    if (!L->tiles) return false;
    L->tiles[0] = (pgd_grouped_tile){e, 0, M};
    return true;
}

/* Y (R rows) of one launch of the first n_run tiles in a grid of max_tiles (the device's tiles
 * past n_run garbage), Y poisoned first, with a row more that must stay so; gather used or not.
 * A dense layout: the dense form. 0, or -1 (reported). */
static int launch(const problem *p, const layout *L, uint32_t n_run, uint32_t max_tiles,
                  bool use_gather, bool out_bf16, void *Yh) {
    const size_t rowb = (size_t)p->N * (out_bf16 ? 2 : 4), ybytes = L->R * rowb;
    pgd_grouped_tile *t = malloc((max_tiles + 1) * sizeof *t);
    if (!t) return -1;
    for (uint32_t i = 0; i < max_tiles; i++)
        t[i] = i < n_run ? L->tiles[i] : (pgd_grouped_tile){0xFFFFFF00u - i, 0x7FFFFFF0u, 64};
    uint32_t *dgather = L->dense ? NULL : gt_upload(L->gather, (size_t)L->R * 4);
    uint32_t *dn = gt_upload(&n_run, 4);
    pgd_grouped_tile *dtiles = gt_upload(t, (size_t)max_tiles * sizeof *t);
    char *dY = gt_poisoned(ybytes + rowb), *past = malloc(rowb + 1);
    int rc = -1;
    if ((dgather || L->dense) && dn && dtiles && dY && past) {
        const uint32_t *g = use_gather ? dgather : NULL;
        const uint64_t e = L->tiles[0].expert, nw = (uint64_t)p->N * p->K;
        if (L->dense && p->form == Q4)
            rc = pgd_cuda_gemm_q4(p->dX, (pgd_q4_mat){p->dW4 + e * nw / 2, p->dWdm + e * nw / 32},
                                  L->R, p->N, p->K, out_bf16, dY, NULL);
        else if (L->dense)
            rc = pgd_cuda_gemm_q8(p->dX, (pgd_q8_mat){p->dWq + e * nw, p->dWd + e * nw / 32}, L->R,
                                  p->N, p->K, out_bf16, dY, NULL);
        else if (p->form == Q4)
            rc = pgd_cuda_gemm_grouped_q4(p->dX, g, (pgd_q4_mat){p->dW4, p->dWdm}, p->N, p->K,
                                          dtiles, dn, max_tiles, out_bf16, dY, NULL);
        else if (p->form == Q8)
            rc = pgd_cuda_gemm_grouped_q8(p->dX, g, (pgd_q8_mat){p->dWq, p->dWd}, p->N, p->K,
                                          dtiles, dn, max_tiles, out_bf16, dY, NULL);
        else
            rc = pgd_cuda_gemm_grouped(p->dX, g, p->dW, p->N, p->K, dtiles, dn, max_tiles, out_bf16,
                                       dY, NULL);
        if (rc) fprintf(stderr, "  launch: %d %s\n", rc, pgd_error_detail());
        if (!rc) rc = gt_download(Yh, dY, ybytes);
        if (!rc) rc = gt_download(past, dY + ybytes, rowb);
        if (!rc && !all_ones(past, rowb)) {
            fprintf(stderr, "  launch: the row past the last written\n");
            rc = -1;
        }
    }
    cudaFree(dgather), cudaFree(dn), cudaFree(dtiles), cudaFree(dY), free(t), free(past);
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
    twin(p, g, L->tiles, n_run, false, ref);
    twin(p, g, L->tiles, n_run, true, refb);
    /* bf16: |bf16(y) - y| <= 2^-8 |y| for every y, so a row within tol of the twin in f32 is
     * within tol + 2^-8 (1 + tol) of it once rounded. q8: the same tol. Each product x * q is
     * exact in f32 (8 + 8 significant bits), as a bf16 product is; a block's sum is the tensor
     * cores' f32 sum of 32 of them, as any 32 consecutive products of the bf16 form are summed,
     * and it joins the accumulator by one fmaf with the exact scale: one f32 rounding a block on
     * top, at most K / 32 more roundings of the size the K additions already make (and there are
     * no more additions of products than the bf16 form's K). So the bound's growth with K, the
     * tensor cores' (test_cuda_gemm.c), stands, with room to spare; a wrong scale, block or
     * value errs by 1e-3 or more. q4: the same tol. p is summed as q8's block sums (x q exact:
     * q < 16), s is 32 f32 additions of the row's x (relative error below 32 u of sum |x|, u =
     * 2^-24), and each joins the accumulator by one fmaf: two roundings a block where q8 has one.
     * Each of these errs by at most a few u of its term, |p d| or |s m|; the planes' m is drawn
     * 8 times d (problem_make_q4) and X is zero-mean, so |s m| and |p d| are of the size of the
     * row's own sum (no cancellation but chance's: x f16(m) and x f16(d) q are independent
     * terms), and the error stays some u sqrt(K / 32) of the row's size: below 1e-6, under the
     * tolerance by 10 and more; a nibble, block, scale or offset taken wrongly errs by 1e-2 and
     * more. */
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
static void check_shape(int form, uint32_t N, uint32_t K, const uint32_t *counts, uint32_t NE) {
    uint32_t P = 0;
    for (uint32_t e = 0; e < NE; e++) P += counts[e];
    problem pb;
    uint32_t *xrow = malloc((P + 1) * 4), *expert = malloc((P + 1) * 4);
    REQUIRE(xrow && expert);
    REQUIRE(problem_make_form(&pb, form, N, K, NE, 2 * P + NE + 2));
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
        check_shape(BF16, e ? emu_shapes[i][0] : shapes[i][0], e ? emu_shapes[i][1] : shapes[i][1],
                    counts, PGD_ARRAY_LEN(counts));
}

/* A decode step: one token routed to 8 of 16 experts, every tile one row, the grid sized for 8
 * pairs over 16 experts. */
static void decode(int form, uint32_t N, uint32_t K) {
    const uint32_t NE = 16, P = 8;
    problem pb;
    REQUIRE(problem_make_form(&pb, form, N, K, NE, 4));
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

static void test_decode(void) {
    decode(BF16, emu() ? 136 : 1536, emu() ? 264 : 2048);
}

/* The same pairs in three layouts (SORTED; SHUFFLED with gaps; ALONE): each pair's output bits
 * the same in all of them, f32 and bf16; q8: and the same as the dense form's row of its input
 * row and expert (each expert's product over all of X's rows). */
static void invariance(int form, uint32_t N, uint32_t K) {
    const uint32_t NE = 5;
    static const uint32_t counts[] = {64, 1, 70, 20, 0};
    uint32_t xrow[160], expert[160];
    problem pb;
    REQUIRE(problem_make_form(&pb, form, N, K, NE, 50));
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
    for (uint32_t e = 0; form != BF16 && e < NE; e++) {
        layout D;
        float *df;
        uint16_t *db;
        REQUIRE(make_dense(&D, e, pb.NX));
        check_layout("dense, every row", &pb, &D, 1, 1, false, &df, &db);
        layout_free(&D);
        REQUIRE(df && db);
        uint64_t differ = 0;
        for (uint32_t p = 0; p < P; p++) {
            if (expert[p] != e) continue;
            const uint64_t a = (uint64_t)L[0].pos[p] * N, b = (uint64_t)xrow[p] * N;
            differ += memcmp(yf[0] + a, df + b, (size_t)N * 4) != 0;
            differ += memcmp(yb[0] + a, db + b, (size_t)N * 2) != 0;
        }
        if (differ)
            fprintf(stderr, "    expert %u: %llu grouped rows' bits differ from the dense form's\n",
                    e, (unsigned long long)differ);
        CHECK_EQ_INT(differ, 0);
        free(df), free(db);
    }
    for (int h = 0; h < 3; h++) free(yf[h]), free(yb[h]), layout_free(&L[h]);
    problem_free(&pb);
}

static void test_invariance(void) {
    invariance(BF16, emu() ? 72 : 1024, emu() ? 136 : 1032);
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

/* ---- weights in 8 bits: pgd_cuda_gemm_grouped_q8 and the dense pgd_cuda_gemm_q8 ---- */

static void test_q8_shapes(void) {
    static const uint32_t counts[] = {64, 0, 1, 65, 63, 3, 0, 130};
    /* K 32 and 96: a last chunk of one block (32 alone: only that); 768 and 2048: Qwen3-30B-A3B's
     * expert FFN and hidden sizes; N not a multiple of 64 */
    static const uint32_t shapes[][2] = {{72, 32},   {8, 96},      {136, 96},  {64, 64},
                                         {200, 768}, {1536, 2048}, {2048, 768}};
    static const uint32_t emu_shapes[][2] = {{72, 32}, {8, 96}, {136, 96}, {200, 768}, {72, 2048}};
    const bool e = emu();
    const size_t n = e ? PGD_ARRAY_LEN(emu_shapes) : PGD_ARRAY_LEN(shapes);
    for (size_t i = 0; i < n; i++)
        check_shape(Q8, e ? emu_shapes[i][0] : shapes[i][0], e ? emu_shapes[i][1] : shapes[i][1],
                    counts, PGD_ARRAY_LEN(counts));
}

static void test_q8_decode(void) {
    decode(Q8, emu() ? 136 : 1536, emu() ? 768 : 2048);
}

/* K 288 (emulator): 5 chunks, the last of one block, the ring and the scales' registers wrapping */
static void test_q8_invariance(void) {
    invariance(Q8, emu() ? 72 : 1024, emu() ? 288 : 1056);
}

/* The dense form at M = 300, 1, 7, 64, 65, 128 (expert 1 of 2: its matrix at an offset): each
 * against the twin, no row past M written, and every row's bits those of the same row at M = 300.
 */
static void dense(int form) {
    const uint32_t N = emu() ? 136 : 2048, K = emu() ? 96 : 768, Ms[] = {300, 1, 7, 64, 65, 128};
    problem pb;
    REQUIRE(problem_make_form(&pb, form, N, K, 2, 300));
    float *f300 = NULL;
    uint16_t *b300 = NULL;
    for (size_t i = 0; i < PGD_ARRAY_LEN(Ms); i++) {
        layout D;
        float *yf;
        uint16_t *yb;
        char what[32];
        snprintf(what, sizeof what, "dense, M %u", Ms[i]);
        REQUIRE(make_dense(&D, 1, Ms[i]));
        check_layout(what, &pb, &D, 1, 1, false, &yf, &yb);
        layout_free(&D);
        if (i == 0) {
            f300 = yf, b300 = yb;
            REQUIRE(f300 && b300);
            continue;
        }
        CHECK(yf && yb);
        const bool same = yf && yb && memcmp(yf, f300, (size_t)Ms[i] * N * 4) == 0 &&
                          memcmp(yb, b300, (size_t)Ms[i] * N * 2) == 0;
        if (!same) fprintf(stderr, "    %s: rows' bits differ from M 300's\n", what);
        CHECK(same);
        free(yf), free(yb);
    }
    /* Y's rows ldy apart (the _ld forms: a fused product's part), M 65, f32 and bf16 out: each
     * row's N columns M 300's bits, the rest of its row untouched */
    const uint32_t M = 65, ldy = N + 24;
    const uint64_t nw = (uint64_t)N * K; /* expert 1's matrix, as above */
    for (int ob = 0; ob < 2; ob++) {
        const size_t elem = ob ? 2 : 4, bytes = (size_t)M * ldy * elem;
        void *dY = gt_poisoned(bytes), *h = malloc(bytes);
        REQUIRE(dY && h);
        const pgd_q4_mat W4 = {pb.dW4 + nw / 2, pb.dWdm + nw / 32};
        const pgd_q8_mat W8 = {pb.dWq + nw, pb.dWd + nw / 32};
        CHECK_EQ_INT(form == Q4 ? pgd_cuda_gemm_q4_ld(pb.dX, W4, M, N, K, ldy, ob, dY, NULL)
                                : pgd_cuda_gemm_q8_ld(pb.dX, W8, M, N, K, ldy, ob, dY, NULL),
                     0);
        REQUIRE(gt_download(h, dY, bytes) == 0);
        CHECK_EQ_INT(gt_count_strided(ob ? "dense, rows N + 24 apart, bf16 out"
                                         : "dense, rows N + 24 apart, f32 out",
                                      h, ob ? (const void *)b300 : (const void *)f300, M, N, ldy,
                                      elem),
                     0);
        cudaFree(dY);
        free(h);
    }
    free(f300), free(b300);
    problem_free(&pb);
}

static void test_q8_dense(void) {
    dense(Q8);
}

/* The order of the sums, beyond rounding: K 96, block 1 of every weight row q = 127 for its first
 * 16 k and -127 for its last 16, scale 2^14, and of every input row x = 128: its two k-steps'
 * sums are +-16 * 128 * 127 = +-260096, exact in f32 in any order, and the block's sum is 0; at
 * 2^14 they are +-2^32 or so. Blocks 0 and 2 random. Summed a block at a time, as the header
 * says, block 1 adds exactly 0 to the accumulator; scaled a k-step at a time, acc + 2^32 loses
 * acc (its ulp is 512) and the row is far off the twin; a block's scale taken from another
 * block is off as far. Dense and grouped (one tile a row). */
static void test_q8_block_order(void) {
    const uint32_t N = 72, K = 96, M = 5, B = K / 32;
    problem pb;
    REQUIRE(problem_make_q8(&pb, N, K, 1, M));
    for (uint32_t r = 0; r < M; r++)
        for (uint32_t k = 32; k < 64; k++) pb.X[r * K + k] = pgd_f32_to_bf16(128.0f);
    for (uint32_t n = 0; n < N; n++) {
        for (uint32_t k = 32; k < 64; k++) pb.Wq[n * K + k] = k < 48 ? 127 : -127;
        pb.Wd[n * B + 1] = 0x7400; /* 2^14 */
    }
    REQUIRE(cudaMemcpy(pb.dX, pb.X, (size_t)M * K * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(pb.dWq, pb.Wq, (size_t)N * K, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(pb.dWd, pb.Wd, (size_t)N * B * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    layout L;
    float *yf;
    uint16_t *yb;
    REQUIRE(make_dense(&L, 0, M));
    check_layout("block order, dense", &pb, &L, 1, 1, false, &yf, &yb);
    free(yf), free(yb);
    layout_free(&L);
    const uint32_t xrow[] = {0, 1, 2, 3, 4}, expert[] = {0, 0, 0, 0, 0};
    REQUIRE(make_layout(&L, xrow, expert, M, 1, ALONE, false, M));
    check_layout("block order, grouped", &pb, &L, L.n_tiles, L.n_tiles, true, &yf, &yb);
    free(yf), free(yb);
    layout_free(&L);
    problem_free(&pb);
}

/* The dense form over more than 2^31 elements of Y (a vocabulary's product over a long prefill,
 * bf16 out): rows 0, 8191, 16743 (across element 2^31) and the last against the twin, and
 * bit for bit against the same row alone (M 1, X from that row). Off the emulator only; not run
 * (a note) where the device lacks the 4.3 GB. */
static void test_q8_dense_large(void) {
    if (emu()) return;
    const uint32_t N = 128256, K = 64, M = 16768, rows[] = {0, 8191, 16743, M - 1};
    problem pb;
    REQUIRE(problem_make_q8(&pb, N, K, 1, M));
    const pgd_q8_mat W = {pb.dWq, pb.dWd};
    const size_t ybytes = (size_t)M * N * 2;
    uint16_t *dY = NULL, *dOne = gt_poisoned((size_t)N * 2);
    if (cudaMalloc((void **)&dY, ybytes) != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "    not run: %zu bytes not available on the device\n", ybytes);
        cudaFree(dOne), problem_free(&pb);
        return;
    }
    uint16_t *got = malloc((size_t)N * 2), *one = malloc((size_t)N * 2);
    float *ref = malloc((size_t)N * 4), *row = malloc((size_t)N * 4);
    REQUIRE(dOne && got && one && ref && row);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(pb.dX, W, M, N, K, true, dY, NULL), 0);
    const double tol = fmax(1e-5, K * 0x1p-27), tolb = tol + 0x1p-8 * (1 + tol);
    const pgd_grouped_tile t = {0, 0, 1};
    for (size_t i = 0; i < PGD_ARRAY_LEN(rows); i++) {
        const uint32_t r = rows[i];
        REQUIRE(gt_download(got, dY + (size_t)r * N, (size_t)N * 2) == 0);
        CHECK_EQ_INT(pgd_cuda_gemm_q8(pb.dX + (size_t)r * K, W, 1, N, K, true, dOne, NULL), 0);
        REQUIRE(gt_download(one, dOne, (size_t)N * 2) == 0);
        CHECK(memcmp(got, one, (size_t)N * 2) == 0);
        pgd_cuda_gemm_grouped_q8_twin(pb.X + (size_t)r * K, NULL, pb.Wq, pb.Wd, N, K, &t, 1, false,
                                      ref);
        for (uint32_t n = 0; n < N; n++) row[n] = pgd_bf16_to_f32(got[n]);
        const double e = rel_l2(row, ref, N);
        fprintf(stderr, "    dense %u x %u, M %u: row %u's error %.2e (bf16)\n", N, K, M, r, e);
        CHECK(e <= tolb);
    }
    free(got), free(one), free(ref), free(row);
    cudaFree(dY), cudaFree(dOne);
    problem_free(&pb);
}

static void test_q8_refuses(void) {
    uint16_t *d = gt_poisoned(1 << 16);
    uint32_t *dn = gt_upload(&(uint32_t){1}, 4), h[64];
    pgd_grouped_tile t = {0, 0, 1};
    pgd_grouped_tile *dt = gt_upload(&t, sizeof t);
    REQUIRE(d && dn && dt);
    /* q at 0, d 8 KiB + 2 bytes in (2-byte aligned only: allowed), Y 16 KiB in */
    const pgd_q8_mat W = {(int8_t *)d, d + 4097};
    void *Y = d + 8192;
    const pgd_q8_mat Wq_odd = {(int8_t *)d + 8, W.d}, Wd_odd = {W.q, (uint16_t *)((char *)W.d + 1)};
    /* K a multiple of 8 but not of 32; N not of 8 */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 64, 48, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, W, 1, 64, 48, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 60, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, W, 1, 60, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8_ld(d, W, 1, 64, 64, 56, false, Y, NULL), PGD_EINVAL); /* < N */
    CHECK_EQ_INT(pgd_cuda_gemm_q8_ld(d, W, 1, 64, 64, 68, false, Y, NULL), PGD_EINVAL); /* % 8 */
    /* alignment: X, W.q and Y 16 bytes, W.d 2 */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d + 1, NULL, W, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d + 1, W, 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, Wq_odd, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, Wq_odd, 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, Wd_odd, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, Wd_odd, 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 64, 64, dt, dn, 1, true, d + 8193, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, W, 1, 64, 64, true, d + 8193, NULL), PGD_EINVAL);
    /* more tiles than a grid takes; NULL operands */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 64, 64, dt, dn, 65536, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, W, 65535u * 64 + 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 64, 64, NULL, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 64, 64, dt, NULL, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, (pgd_q8_mat){W.q, NULL}, 1, 64, 64, false, Y, NULL),
                 PGD_EINVAL);
    /* nothing to do: no launch, Y untouched */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 64, 64, dt, dn, 0, false, Y, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q8(d, NULL, W, 0, 64, dt, dn, 1, false, Y, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, W, 0, 64, 64, false, Y, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_gemm_q8(d, W, 1, 0, 64, false, Y, NULL), 0);
    REQUIRE(gt_download(h, Y, sizeof h) == 0);
    CHECK(all_ones(h, sizeof h));
    /* K 0: empty sums, row 0 zeros (64 f32), row 1 untouched; both forms */
    float z[128];
    for (int dense = 0; dense < 2; dense++) {
        CHECK_EQ_INT(dense ? pgd_cuda_gemm_q8(d, W, 1, 64, 0, false, Y, NULL)
                           : pgd_cuda_gemm_grouped_q8(d, NULL, W, 64, 0, dt, dn, 1, false, Y, NULL),
                     0);
        REQUIRE(gt_download(z, Y, sizeof z) == 0);
        uint64_t nonzero = 0;
        for (int i = 0; i < 64; i++) nonzero += z[i] != 0.0f;
        CHECK_EQ_INT(nonzero, 0);
        CHECK(all_ones(z + 64, 64 * 4));
        REQUIRE(cudaMemset(Y, 0xFF, sizeof z) == cudaSuccess);
    }
    cudaFree(d), cudaFree(dn), cudaFree(dt);
}

/* ---- weights in 4 bits: pgd_cuda_gemm_grouped_q4 and the dense pgd_cuda_gemm_q4 ---- */

static void test_q4_shapes(void) {
    static const uint32_t counts[] = {64, 0, 1, 65, 63, 3, 0, 130};
    /* as the q8 form's: K 32 and 96 a last chunk of one block, N not a multiple of 64 */
    static const uint32_t shapes[][2] = {{72, 32},   {8, 96},      {136, 96},  {64, 64},
                                         {200, 768}, {1536, 2048}, {2048, 768}};
    static const uint32_t emu_shapes[][2] = {{72, 32}, {8, 96}, {136, 96}, {200, 768}, {72, 2048}};
    const bool e = emu();
    const size_t n = e ? PGD_ARRAY_LEN(emu_shapes) : PGD_ARRAY_LEN(shapes);
    for (size_t i = 0; i < n; i++)
        check_shape(Q4, e ? emu_shapes[i][0] : shapes[i][0], e ? emu_shapes[i][1] : shapes[i][1],
                    counts, PGD_ARRAY_LEN(counts));
}

static void test_q4_decode(void) {
    decode(Q4, emu() ? 136 : 1536, emu() ? 768 : 2048);
}

/* K 288 (emulator): 5 chunks, the last of one block, the ring wrapping */
static void test_q4_invariance(void) {
    invariance(Q4, emu() ? 72 : 1024, emu() ? 288 : 1056);
}

static void test_q4_dense(void) {
    dense(Q4);
}

/* The order of the sums, bit for bit and beyond rounding. K 288 (9 blocks), X integers in
 * -255 .. 255 but for block 1 of every input row, x = 128 for its first 16 k and -128 for its
 * last 16; block 1 of every weight row all q = 15, d = 2^14, m = -2^14; the other blocks as
 * problem_make_q4 draws them. Every block's p = sum x q and s = sum x is then an integer below
 * 2^24, exact in f32 in any order (the tensor cores' and the kernel's), so the header's order
 * fixes each output's bits: acc = 0, then per block acc = fmaf(p, f16(d), acc), acc = fmaf(s,
 * f16(m), acc); the test computes them on the host and wants them exactly (f32, and bf16 rounded
 * from them). A p or an s joined per k-step of 16, the two fmaf in the other order, or blocks in
 * another order round differently (p d has up to 28 significant bits: most fmaf round); block 1's
 * p and s are 0 (exactly: its terms cancel), but its k-steps' are +-30720 and +-2048, so joined
 * per k-step at 2^14 they are +-2^29 and +-2^25, which take the accumulator's bits with them: far
 * off the twin too; an s or a d | m of another block, a nibble out of THE FORM's order, errs far
 * beyond rounding. Dense, and grouped (one tile a row). */
static void test_q4_block_order(void) {
    const uint32_t N = 72, K = 288, M = 5, B = K / 32;
    problem pb;
    REQUIRE(problem_make_q4(&pb, N, K, 1, M));
    for (uint32_t r = 0; r < M; r++)
        for (uint32_t k = 0; k < K; k++) {
            const int x = k / 32 == 1 ? (k < 48 ? 128 : -128) : (int)gt_urand(511) - 255;
            pb.X[r * K + k] = pgd_f32_to_bf16((float)x);
        }
    for (uint32_t n = 0; n < N; n++) {
        memset(pb.W4 + n * K / 2 + 16, 0xFF, 16);
        pb.Wdm[n * B + 1] = 0x7400u | 0xF400u << 16; /* d 2^14, m -2^14 */
    }
    REQUIRE(problem_upload(&pb));
    /* the header's order on the host */
    float *want = malloc((size_t)M * N * 4);
    REQUIRE(want);
    for (uint32_t r = 0; r < M; r++)
        for (uint32_t n = 0; n < N; n++) {
            float acc = 0;
            for (uint32_t b = 0; b < B; b++) {
                int32_t ps = 0, ss = 0;
                for (uint32_t j = 0; j < 32; j++) {
                    const uint8_t byte = pb.W4[n * K / 2 + b * 16 + j % 16];
                    const int32_t x = (int32_t)pgd_bf16_to_f32(pb.X[r * K + b * 32 + j]);
                    ps += x * (j < 16 ? byte & 0xF : byte >> 4), ss += x;
                }
                const uint32_t dm = pb.Wdm[n * B + b];
                acc = fmaf((float)ps, pgd_f16_to_f32((uint16_t)(dm & 0xFFFF)), acc);
                acc = fmaf((float)ss, pgd_f16_to_f32((uint16_t)(dm >> 16)), acc);
            }
            want[r * N + n] = acc;
        }
    static const char *what[] = {"block order, dense", "block order, grouped"};
    for (int grouped = 0; grouped < 2; grouped++) {
        layout L;
        const uint32_t xrow[] = {0, 1, 2, 3, 4}, expert[] = {0, 0, 0, 0, 0};
        if (grouped)
            REQUIRE(make_layout(&L, xrow, expert, M, 1, ALONE, false, M));
        else
            REQUIRE(make_dense(&L, 0, M));
        float *yf;
        uint16_t *yb;
        check_layout(what[grouped], &pb, &L, L.n_tiles, L.n_tiles, !L.dense, &yf, &yb);
        CHECK(yf && yb);
        uint64_t differ = 0;
        for (uint32_t p = 0; yf && yb && p < M; p++) {
            const uint32_t row = grouped ? L.pos[p] : p; /* pair p is input row p */
            for (uint32_t n = 0; n < N; n++) {
                const float w = want[p * N + n];
                differ += memcmp(&yf[row * N + n], &w, 4) != 0;
                differ += yb[row * N + n] != pgd_f32_to_bf16(w);
            }
        }
        if (differ)
            fprintf(stderr, "    %s: %llu elements not the header's order's bits\n", what[grouped],
                    (unsigned long long)differ);
        CHECK_EQ_INT(differ, 0);
        free(yf), free(yb);
        layout_free(&L);
    }
    free(want);
    problem_free(&pb);
}

static void test_q4_refuses(void) {
    uint16_t *d = gt_poisoned(1 << 16);
    uint32_t *dn = gt_upload(&(uint32_t){1}, 4), h[64];
    pgd_grouped_tile t = {0, 0, 1};
    pgd_grouped_tile *dt = gt_upload(&t, sizeof t);
    REQUIRE(d && dn && dt);
    /* q at 0, dm 8 KiB + 4 bytes in (4-byte aligned only: allowed), Y 16 KiB in */
    const pgd_q4_mat W = {(uint8_t *)d, (uint32_t *)(d + 4098)};
    void *Y = d + 8192;
    const pgd_q4_mat Wq_odd = {(uint8_t *)d + 8, W.dm};
    const pgd_q4_mat Wdm_odd = {W.q, (uint32_t *)((char *)W.dm + 2)};
    /* K a multiple of 8 but not of 32; N not of 8 */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 64, 48, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, W, 1, 64, 48, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 60, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, W, 1, 60, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4_ld(d, W, 1, 64, 64, 56, false, Y, NULL), PGD_EINVAL); /* < N */
    CHECK_EQ_INT(pgd_cuda_gemm_q4_ld(d, W, 1, 64, 64, 68, false, Y, NULL), PGD_EINVAL); /* % 8 */
    /* alignment: X, W.q and Y 16 bytes, W.dm 4 */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d + 1, NULL, W, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d + 1, W, 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, Wq_odd, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, Wq_odd, 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, Wdm_odd, 64, 64, dt, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, Wdm_odd, 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 64, 64, dt, dn, 1, true, d + 8193, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, W, 1, 64, 64, true, d + 8193, NULL), PGD_EINVAL);
    /* more tiles than a grid takes; NULL operands */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 64, 64, dt, dn, 65536, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, W, 65535u * 64 + 1, 64, 64, false, Y, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 64, 64, NULL, dn, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 64, 64, dt, NULL, 1, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, (pgd_q4_mat){W.q, NULL}, 1, 64, 64, false, Y, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, (pgd_q4_mat){NULL, W.dm}, 1, 64, 64, false, Y, NULL),
                 PGD_EINVAL);
    /* nothing to do: no launch, Y untouched */
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 64, 64, dt, dn, 0, false, Y, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_gemm_grouped_q4(d, NULL, W, 0, 64, dt, dn, 1, false, Y, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, W, 0, 64, 64, false, Y, NULL), 0);
    CHECK_EQ_INT(pgd_cuda_gemm_q4(d, W, 1, 0, 64, false, Y, NULL), 0);
    REQUIRE(gt_download(h, Y, sizeof h) == 0);
    CHECK(all_ones(h, sizeof h));
    /* K 0: empty sums, row 0 zeros (64 f32), row 1 untouched; both forms */
    float z[128];
    for (int dense = 0; dense < 2; dense++) {
        CHECK_EQ_INT(dense ? pgd_cuda_gemm_q4(d, W, 1, 64, 0, false, Y, NULL)
                           : pgd_cuda_gemm_grouped_q4(d, NULL, W, 64, 0, dt, dn, 1, false, Y, NULL),
                     0);
        REQUIRE(gt_download(z, Y, sizeof z) == 0);
        uint64_t nonzero = 0;
        for (int i = 0; i < 64; i++) nonzero += z[i] != 0.0f;
        CHECK_EQ_INT(nonzero, 0);
        CHECK(all_ones(z + 64, 64 * 4));
        REQUIRE(cudaMemset(Y, 0xFF, sizeof z) == cudaSuccess);
    }
    cudaFree(d), cudaFree(dn), cudaFree(dt);
}

int main(void) {
    if (!gt_start()) return 77;
    RUN(test_refuses);
    RUN(test_shapes);
    RUN(test_decode);
    RUN(test_invariance);
    RUN(test_q8_refuses);
    RUN(test_q8_shapes);
    RUN(test_q8_decode);
    RUN(test_q8_invariance);
    RUN(test_q8_dense);
    RUN(test_q8_block_order);
    RUN(test_q8_dense_large);
    RUN(test_q4_refuses);
    RUN(test_q4_shapes);
    RUN(test_q4_decode);
    RUN(test_q4_invariance);
    RUN(test_q4_dense);
    RUN(test_q4_block_order);
    return test_summary();
}
