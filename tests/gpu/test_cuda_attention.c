/*
 * tests/gpu/test_cuda_attention.c — pgd_cuda_attention against its CPU twin, bit for bit: both
 * run attention_math.h's operations in the same order (the exponential included), so any
 * differing bit is a bug, not rounding. Random mixed batches (tests/unit's attn_batch: random
 * f16 K/V, non-contiguous block tables, slots past each context NaN and unused table entries
 * -1): query lengths 1, 3, 17, 64, 300 over contexts across chunk edges (1 .. 2049), GQA
 * groups 1 to 12 (one and two head tiles), head_dim 64, 80, 96, 128, 256, block sizes 16 and 32.
 * One row is a padding row (pos -1: zeros). Outputs are poisoned with NaN first. Then batch
 * invariance on the device (a row's bits alone, in a prefix of the batch and in the reversed batch
 * equal its bits in the full batch); the split version (pgd_cuda_attention_split: 2, 3, 5 and 64
 * CTAs per row and head) equal to the one-kernel bits, and NaN for rows beyond its max_ctx, and
 * over a list of rows (the others left alone); and the argument checks.
 *
 * The tensor-core kernel (pgd_cuda_attention_tc) on the same batches (head_dim 64 and 128,
 * groups 1 to 8), its tiles planned by pgd_cuda_attn_plan: against its twin within a tolerance
 * (their sums run in different orders and the tensor cores' own precision, and 2^x is the GPU's
 * against the host's exp2f, a few f32 ulps apart: every element within
 * 2 bf16 ulps + 2^-11 of the twin's; the bound's reasoning at tc_close), rows outside the tiles
 * untouched, and the same bits again when the sequences are cut into tiles of random sizes (a
 * pair's arithmetic does not depend on its place in a tile), and in the wide form (128 slots a
 * CTA: the plan's wide tiles and random ones). The tensor-core decode kernel
 * (pgd_cuda_attention_dec) on every row of such batches: against its twin within the same
 * tolerance, the same bits for every split and row list, padding rows zeros, rows beyond the
 * scratch NaN, its counters left at zero. PGD_ATTN_TEST_TC_ONLY=1 runs only the tensor-core
 * kernels' parts and the argument checks. Exit 77 (skipped) without a GPU.
 * Label
 * `cuda`. Seed: PGD_TEST_SEED, else the time (printed).
 */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <time.h>

#define PGD_ATTN_TWIN_TEST_NO_MAIN
#include "test_cuda_attention_twin.c" /* attn_batch, batch_make, twin_rows, rows_select, ... */

#include "engine/backends/cuda_plan.h" /* pgd_cuda_attn_plan */
#include "kernels/cuda/dequant.h"      /* pgd_cuda_device_count */

/* The batch on the device. */
typedef struct dev_batch {
    uint16_t *slab, *out;
    int32_t *bt, *pos;
    float *q;
    uint32_t *seq_of;
} dev_batch;

static void *to_dev(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static size_t out_bytes(const attn_batch *b, uint32_t T) {
    return (size_t)T * b->n_head * b->geom.head_dim * sizeof(uint16_t);
}

static int dev_make(const attn_batch *b, dev_batch *d) {
    memset(d, 0, sizeof *d);
    d->slab = to_dev(b->slab, b->n_slab * sizeof *b->slab);
    d->bt = to_dev(b->bt, (size_t)b->S * b->bt_stride * sizeof *b->bt);
    d->q = to_dev(b->q, (size_t)b->T * b->q_stride * sizeof *b->q);
    d->seq_of = to_dev(b->seq_of, b->T * sizeof *b->seq_of);
    d->pos = to_dev(b->pos, b->T * sizeof *b->pos);
    if (cudaMalloc((void **)&d->out, out_bytes(b, b->T)) != cudaSuccess) d->out = NULL;
    return d->slab && d->bt && d->q && d->seq_of && d->pos && d->out ? 0 : -1;
}

static void dev_free(dev_batch *d) {
    void *p[] = {d->slab, d->out, d->bt, d->pos, d->q, d->seq_of};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cudaFree(p[i]);
}

/* The kernel over T rows given by q, seq_of and pos (device arrays of T rows) with the device
 * batch's slab and block tables; the output, poisoned with NaN first, into host out[T]. */
static int run_kernel(const attn_batch *b, const dev_batch *d, const float *q,
                      const uint32_t *seq_of, const int32_t *pos, uint32_t T, uint16_t *out) {
    if (cudaMemset(d->out, 0xFF, out_bytes(b, T)) != cudaSuccess) return -1;
    int rc = pgd_cuda_attention(q, b->q_stride, d->slab, b->geom, b->layer, b->n_head, d->bt,
                                b->bt_stride, seq_of, pos, T, b->scale, d->out, NULL);
    if (rc) {
        fprintf(stderr, "  pgd_cuda_attention: %s\n", pgd_error_detail());
        return rc;
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    return cudaMemcpy(out, d->out, out_bytes(b, T), cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

/* The split kernel (dec: the tensor-core decode kernel, pgd_cuda_attention_dec) over the rows
 * d_rows[0 .. n) (NULL: the first n) with n_split CTAs per row and head and scratch for
 * contexts below max_ctx; the output, poisoned first, into host out[T]. */
static int run_split_as(bool dec, const attn_batch *b, const dev_batch *d, const uint32_t *d_rows,
                        uint32_t n, uint32_t n_split, uint32_t max_ctx, uint16_t *out) {
    const size_t bytes = pgd_cuda_attention_split_bytes(b->T, b->n_head, b->geom.head_dim, max_ctx);
    const size_t n_arrived = pgd_cuda_attention_split_counters(b->T, b->n_head);
    float *scratch = NULL;
    uint32_t *arrived = NULL, *left = malloc(n_arrived * sizeof *left);
    if (!left || cudaMalloc((void **)&scratch, bytes) != cudaSuccess ||
        cudaMalloc((void **)&arrived, n_arrived * sizeof *arrived) != cudaSuccess ||
        cudaMemset(scratch, 0xFF, bytes) != cudaSuccess ||
        cudaMemset(arrived, 0, n_arrived * sizeof *arrived) != cudaSuccess ||
        cudaMemset(d->out, 0xFF, out_bytes(b, b->T)) != cudaSuccess)
        return -1;
    /* twice: the second launch must find the counters the first left at zero (the output is
     * poisoned again in between) */
    int rc = 0;
    for (int run = 0; run < 2 && !rc; run++) {
        if (run && cudaMemset(d->out, 0xFF, out_bytes(b, b->T)) != cudaSuccess) rc = -1;
        if (!rc)
            rc = (dec ? pgd_cuda_attention_dec : pgd_cuda_attention_split)(
                d->q, b->q_stride, d->slab, b->geom, b->layer, b->n_head, d->bt, b->bt_stride,
                d->seq_of, d->pos, d_rows, n, b->scale, n_split, max_ctx, scratch, arrived, d->out,
                NULL);
        if (rc)
            fprintf(stderr, "  pgd_cuda_attention_%s: %s\n", dec ? "dec" : "split",
                    pgd_error_detail());
        if (!rc && (cudaDeviceSynchronize() != cudaSuccess ||
                    cudaMemcpy(left, arrived, n_arrived * sizeof *left, cudaMemcpyDeviceToHost) !=
                        cudaSuccess))
            rc = -1;
        for (size_t i = 0; !rc && i < n_arrived; i++)
            if (left[i]) {
                fprintf(stderr, "  split launch %d left counter %zu at %u\n", run, i, left[i]);
                rc = -1;
            }
    }
    if (!rc && cudaMemcpy(out, d->out, out_bytes(b, b->T), cudaMemcpyDeviceToHost) != cudaSuccess)
        rc = -1;
    cudaFree(scratch);
    cudaFree(arrived);
    free(left);
    return rc;
}

/* FNV-1a over n bf16 values: printed beside a kernel's comparison, so two builds run with the same
 * PGD_TEST_SEED on the same machine show whether a change kept every output bit (a change meant
 * to keep the arithmetic), without keeping the outputs. */
static uint64_t digest(const uint16_t *v, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++) {
        h = (h ^ (v[i] & 0xFF)) * 0x100000001b3ull;
        h = (h ^ (v[i] >> 8)) * 0x100000001b3ull;
    }
    return h;
}

/* Elements of a[n] and b[n] (bf16) that differ, NaN matching NaN. */
static uint64_t count_differ(const uint16_t *a, const uint16_t *b, uint64_t n) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        const int na = (a[i] & 0x7FFF) > 0x7F80, nb = (b[i] & 0x7FFF) > 0x7F80;
        bad += na != nb || (!na && a[i] != b[i]);
    }
    return bad;
}

static int run_split(const attn_batch *b, const dev_batch *d, const uint32_t *d_rows, uint32_t n,
                     uint32_t n_split, uint32_t max_ctx, uint16_t *out) {
    return run_split_as(false, b, d, d_rows, n, n_split, max_ctx, out);
}

/* Elements of part (a run with scratch for positions below `limit`) that are wrong: rows at or
 * beyond it must be NaN, the others the bits of full; *n_beyond gets how many rows are beyond. */
static uint64_t beyond_scratch_bad(const attn_batch *b, const uint16_t *part, const uint16_t *full,
                                   int32_t limit, uint64_t *n_beyond) {
    const uint64_t row_elems = (uint64_t)b->n_head * b->geom.head_dim;
    uint64_t bad = 0;
    *n_beyond = 0;
    for (uint32_t t = 0; t < b->T; t++) {
        const bool beyond = b->pos[t] >= limit;
        *n_beyond += beyond;
        for (uint64_t e = 0; e < row_elems; e++) {
            const uint16_t v = part[t * row_elems + e];
            bad += beyond ? (v & 0x7FFF) <= 0x7F80 : count_differ(&v, full + t * row_elems + e, 1);
        }
    }
    return bad;
}

/* The odd rows of b, last first, on the device (*n gets how many); NULL on failure. */
static uint32_t *odd_rows(const attn_batch *b, uint32_t *n) {
    uint32_t *rows = malloc(b->T * sizeof *rows);
    if (!rows) return NULL;
    *n = 0;
    for (uint32_t t = b->T; t-- > 0;)
        if (t % 2) rows[(*n)++] = t;
    uint32_t *d = to_dev(rows, *n * sizeof *rows);
    free(rows);
    return d;
}

/* Elements of part (a run over odd_rows' list) that are wrong: the odd rows must have the bits
 * of full, the others be left poisoned. */
static uint64_t odd_rows_bad(const attn_batch *b, const uint16_t *part, const uint16_t *full) {
    const uint64_t row_elems = (uint64_t)b->n_head * b->geom.head_dim;
    uint64_t bad = 0;
    for (uint32_t t = 0; t < b->T; t++)
        for (uint64_t e = 0; e < row_elems; e++) {
            const uint16_t v = part[t * row_elems + e];
            bad += t % 2 ? count_differ(&v, full + t * row_elems + e, 1) : v != 0xFFFFu;
        }
    return bad;
}

typedef struct attn_case {
    uint32_t n_kv_head, group, head_dim, block_size;
} attn_case;

static void check_case(const attn_case *c) {
    static const uint32_t ctx[] = {1, 3, 255, 256, 257, 300, 513, 1100, 2049, 700};
    static const uint32_t qlen[] = {1, 3, 17, 1, 64, 300, 17, 3, 1, 1};
    const uint32_t S = sizeof ctx / sizeof ctx[0];
    attn_batch b;
    batch_make(&b, c->n_kv_head, c->group, c->head_dim, c->block_size, S, ctx, qlen);
    b.pos[b.T - 1] = -1; /* the last sequence's row: a padding row (zeros) */
    const uint64_t row_elems = (uint64_t)b.n_head * b.geom.head_dim, n = b.T * row_elems;
    uint16_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    uint32_t *rows = malloc(b.T * sizeof *rows);
    for (uint32_t t = 0; t < b.T; t++) rows[t] = t;
    twin_rows(&b, rows, b.T, want);
    dev_batch d;
    REQUIRE(dev_make(&b, &d) == 0);
    REQUIRE(run_kernel(&b, &d, d.q, d.seq_of, d.pos, b.T, got) == 0);
    uint64_t bad = count_differ(got, want, n);
    fprintf(stderr,
            "  %u KV heads x group %u, head_dim %u, block %u: %u rows, %llu of %llu "
            "elements differ from the twin\n",
            c->n_kv_head, c->group, c->head_dim, c->block_size, b.T, (unsigned long long)bad,
            (unsigned long long)n);
    for (uint64_t i = 0, shown = 0; i < n && shown < 5; i++)
        if (count_differ(got + i, want + i, 1)) {
            fprintf(stderr, "    row %llu head %llu d %llu: kernel %#06x twin %#06x\n",
                    (unsigned long long)(i / row_elems),
                    (unsigned long long)(i % row_elems / b.geom.head_dim),
                    (unsigned long long)(i % b.geom.head_dim), got[i], want[i]);
            shown++;
        }
    CHECK_EQ_INT(bad, 0);

    /* batch invariance: rows alone (every decode row, every 7th prefill row), the first half
     * of the batch, the batch reversed */
    uint16_t *part = malloc(n * sizeof *part);
    uint64_t differ = 0;
    for (uint32_t t = 0; t < b.T; t++) {
        const int last_of_seq = t + 1 == b.T || b.seq_of[t + 1] != b.seq_of[t];
        if (t % 7 && !last_of_seq) continue;
        REQUIRE(run_kernel(&b, &d, d.q + (uint64_t)t * b.q_stride, d.seq_of + t, d.pos + t, 1,
                           part) == 0);
        differ += memcmp(part, got + t * row_elems, row_elems * sizeof *part) != 0;
    }
    REQUIRE(run_kernel(&b, &d, d.q, d.seq_of, d.pos, b.T / 2, part) == 0);
    differ += memcmp(part, got, (b.T / 2) * row_elems * sizeof *part) != 0;
    for (uint32_t t = 0; t < b.T; t++) rows[t] = b.T - 1 - t;
    attn_rows rev;
    rows_select(&b, rows, b.T, &rev);
    float *d_rq = to_dev(rev.q, (size_t)b.T * b.q_stride * sizeof *rev.q);
    uint32_t *d_rseq = to_dev(rev.seq_of, b.T * sizeof *rev.seq_of);
    int32_t *d_rpos = to_dev(rev.pos, b.T * sizeof *rev.pos);
    REQUIRE(d_rq && d_rseq && d_rpos);
    REQUIRE(run_kernel(&b, &d, d_rq, d_rseq, d_rpos, b.T, part) == 0);
    differ += reversed_differ(part, got, b.T, row_elems);
    CHECK_EQ_INT(differ, 0);

    /* split over the chunks: the same bits */
    uint32_t max_ctx = 0;
    for (uint32_t t = 0; t < b.T; t++)
        if (b.pos[t] + 1 > (int32_t)max_ctx) max_ctx = (uint32_t)b.pos[t] + 1;
    static const uint32_t splits[] = {2, 3, 5, 64};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        REQUIRE(run_split(&b, &d, NULL, b.T, splits[i], max_ctx + 100, part) == 0);
        uint64_t sd = count_differ(part, got, n);
        if (sd)
            fprintf(stderr, "    split %u: %llu elements differ\n", splits[i],
                    (unsigned long long)sd);
        CHECK_EQ_INT(sd, 0);
    }
    /* scratch for 512 positions: longer rows NaN, the others exact */
    REQUIRE(run_split(&b, &d, NULL, b.T, 3, 512, part) == 0);
    uint64_t nan_rows = 0;
    CHECK_EQ_INT(beyond_scratch_bad(&b, part, got, 512, &nan_rows), 0);
    CHECK(nan_rows > 0);
    /* a list of rows (the odd ones, last first), split and not: theirs exact, the others left
     * poisoned */
    uint32_t n_odd = 0, *d_list = odd_rows(&b, &n_odd);
    REQUIRE(d_list);
    for (uint32_t split = 1; split <= 3; split += 2) {
        REQUIRE(run_split(&b, &d, d_list, n_odd, split, max_ctx, part) == 0);
        CHECK_EQ_INT(odd_rows_bad(&b, part, got), 0);
    }
    cudaFree(d_list);

    cudaFree(d_rq);
    cudaFree(d_rseq);
    cudaFree(d_rpos);
    rows_free(&rev);
    free(part);
    dev_free(&d);
    free(rows);
    free(want);
    free(got);
    batch_free(&b);
}

static void test_kernel_vs_twin(void) {
    static const attn_case cases[] = {
        {1, 12, 96, 32}, {2, 2, 256, 16}, {4, 3, 80, 16},  {2, 1, 64, 16},
        {2, 4, 128, 16}, {2, 8, 128, 16}, {8, 1, 128, 32},
    };
    /* the CPU emulation of the runtime (tests/cuda_emu) takes the first three: two head tiles,
     * head_dim 256 and 80, block sizes 32 and 16 */
    const size_t n = getenv("PGD_CUDA_EMU") ? 3 : sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++) check_case(&cases[i]);
}

/* ---- the tensor-core kernel ---- */

/* Whether bf16 values a (kernel) and b (twin) agree within the tensor-core kernel's tolerance:
 * |a - b| <= 2 ulps of bf16 at max(|a|, |b|) + 2^-11. The twin rounds the query and the weights
 * to f16 at the kernel's points, so what differs is the order (and, on a GPU, the precision) of
 * f32 sums and 2^x (within 2 f32 ulps on a GPU): scores and weights a few f32 ulps apart,
 * which may move a weight's f16 rounding by one f16 ulp (2^-11 relative); all of them moving shifts
 * the output by at most 2^-11 max|V| (|V| <= 1 here); then each side rounds to bf16 (one ulp apart
 * at most across a rounding boundary). */
static int tc_close(uint16_t a, uint16_t b) {
    const float x = pgd_bf16_to_f32(a), y = pgd_bf16_to_f32(b);
    if (isnan(x) || isnan(y)) return 0;
    const float big = fabsf(x) > fabsf(y) ? fabsf(x) : fabsf(y);
    int e;
    frexpf(big, &e); /* big = f * 2^e, f in [0.5, 1): a bf16 ulp there is 2^(e - 8) */
    return fabsf(x - y) <= 2.0f * ldexpf(1.0f, e - 8) + 0x1p-11f;
}

/* The tensor-core kernel over host tiles[n] (uploaded here); the output, poisoned first, into
 * host out[T]. */
static int run_tc(const attn_batch *b, const dev_batch *d, const pgd_attn_tile *tiles, uint32_t n,
                  uint32_t tile_rows, uint16_t *out) {
    pgd_attn_tile *d_tiles = to_dev(tiles, n * sizeof *tiles);
    if (!d_tiles || cudaMemset(d->out, 0xFF, out_bytes(b, b->T)) != cudaSuccess) return -1;
    int rc = pgd_cuda_attention_tc(d->q, b->q_stride, d->slab, b->geom, b->layer, b->n_head, d->bt,
                                   b->bt_stride, d->seq_of, d->pos, d_tiles, n, tile_rows, b->scale,
                                   d->out, NULL);
    if (rc) fprintf(stderr, "  pgd_cuda_attention_tc: %s\n", pgd_error_detail());
    if (!rc && (cudaDeviceSynchronize() != cudaSuccess ||
                cudaMemcpy(out, d->out, out_bytes(b, b->T), cudaMemcpyDeviceToHost) != cudaSuccess))
        rc = -1;
    cudaFree(d_tiles);
    return rc;
}

/* The rows of every sequence of more than one query row (sequence s: rows q_start[s] ..
 * q_start[s + 1] - 1) cut into tiles of random sizes up to max_rows, into tiles; their count. */
static uint32_t random_tiles(const uint32_t *q_start, const uint32_t *qlen, uint32_t S,
                             uint32_t max_rows, pgd_attn_tile *tiles) {
    uint32_t n = 0;
    for (uint32_t s = 0; s < S; s++)
        for (uint32_t t = q_start[s]; qlen[s] >= 2 && t < q_start[s + 1];) {
            uint32_t k = 1 + (uint32_t)(rnd() % max_rows);
            if (k > q_start[s + 1] - t) k = q_start[s + 1] - t;
            tiles[n++] = (pgd_attn_tile){t, k};
            t += k;
        }
    return n;
}

static void check_tc_case(const attn_case *c) {
    static const uint32_t ctx[] = {3, 255, 256, 300, 513, 1100, 700, 40};
    static const uint32_t qlen[] = {3, 17, 1, 64, 300, 17, 1, 2};
    const uint32_t S = sizeof ctx / sizeof ctx[0];
    attn_batch b;
    batch_make(&b, c->n_kv_head, c->group, c->head_dim, c->block_size, S, ctx, qlen);
    const uint32_t tile_rows = pgd_attn_tc_rows(c->group, c->head_dim);
    REQUIRE(tile_rows > 0);
    const uint64_t row_elems = (uint64_t)b.n_head * b.geom.head_dim, n = b.T * row_elems;
    uint16_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    uint16_t *again = malloc(n * sizeof *again);
    uint32_t *q_start = malloc((S + 1) * sizeof *q_start), *rows = malloc(b.T * sizeof *rows);
    pgd_attn_tile *tiles = malloc(b.T * sizeof *tiles);
    REQUIRE(want && got && again && q_start && rows && tiles);
    for (uint32_t s = 0, t = 0; s <= S; t += s < S ? qlen[s] : 0, s++) q_start[s] = t;
    const pgd_batch bt = {.n_tokens = b.T, .n_seqs = S, .q_start = q_start, .positions = b.pos};
    const pgd_cuda_attn_work w = pgd_cuda_attn_plan(&bt, tile_rows, tiles, rows);
    pgd_cuda_attention_tc_twin(b.q, b.q_stride, b.slab, b.geom, b.layer, b.n_head, b.bt,
                               b.bt_stride, b.seq_of, b.pos, b.T, b.scale, want);
    dev_batch d;
    REQUIRE(dev_make(&b, &d) == 0);
    REQUIRE(run_tc(&b, &d, tiles, w.n_tiles, tile_rows, got) == 0);
    /* rows of the CUDA-core kernel untouched; the tiles' rows close to the twin */
    uint8_t *in_tile = calloc(b.T, 1);
    REQUIRE(in_tile);
    for (uint32_t i = 0; i < w.n_tiles; i++)
        for (uint32_t t = tiles[i].t0; t < tiles[i].t0 + tiles[i].n; t++) in_tile[t] = 1;
    uint64_t far = 0, exact = 0, untouched_bad = 0, checked = 0;
    for (uint32_t t = 0; t < b.T; t++)
        for (uint64_t e = t * row_elems; e < (t + 1) * row_elems; e++) {
            if (!in_tile[t]) {
                untouched_bad += got[e] != 0xFFFFu;
                continue;
            }
            checked++;
            exact += got[e] == want[e];
            if (!tc_close(got[e], want[e]) && far++ < 5)
                fprintf(stderr, "    row %u head %llu d %llu: kernel %g twin %g\n", t,
                        (unsigned long long)(e % row_elems / b.geom.head_dim),
                        (unsigned long long)(e % b.geom.head_dim), (double)pgd_bf16_to_f32(got[e]),
                        (double)pgd_bf16_to_f32(want[e]));
        }
    fprintf(stderr,
            "  tensor cores: %u KV heads x group %u, head_dim %u, block %u: %u tiles of <= %u "
            "rows; %llu of %llu elements beyond the tolerance, %.4f exactly the twin's; digest "
            "%016llx\n",
            c->n_kv_head, c->group, c->head_dim, c->block_size, w.n_tiles, tile_rows,
            (unsigned long long)far, (unsigned long long)checked,
            checked ? (double)exact / (double)checked : 0.0, (unsigned long long)digest(got, n));
    CHECK(w.n_tiles > 0 && w.n_rows == 2); /* two decode sequences */
    CHECK_EQ_INT(far, 0);
    CHECK_EQ_INT(untouched_bad, 0);

    /* tiles of random sizes: the same bits */
    const uint32_t n_tiles = random_tiles(q_start, qlen, S, tile_rows, tiles);
    REQUIRE(run_tc(&b, &d, tiles, n_tiles, tile_rows, again) == 0);
    uint64_t moved = count_differ(again, got, n);
    if (moved)
        fprintf(stderr, "    %llu elements changed with the tiling\n", (unsigned long long)moved);
    CHECK_EQ_INT(moved, 0);

    /* the wide form (128 slots a CTA, two 16-slot tiles a warp): the same bits, over the plan's
     * wide tiles and over tiles of random sizes up to its rows (a tile of the narrow form's
     * size or less included) */
    const uint32_t wide_rows = pgd_attn_tc_rows_wide(c->group, c->head_dim);
    CHECK(wide_rows >= 2 * tile_rows && wide_rows * c->group <= 2 * PGD_ATTN_TC_SLOTS);
    for (int random = 0; random < 2; random++) {
        const uint32_t nw = random ? random_tiles(q_start, qlen, S, wide_rows, tiles)
                                   : pgd_cuda_attn_plan(&bt, wide_rows, tiles, rows).n_tiles;
        REQUIRE(run_tc(&b, &d, tiles, nw, wide_rows, again) == 0);
        moved = count_differ(again, got, n);
        if (moved)
            fprintf(stderr, "    %llu elements differ in the wide form (%s tiles of <= %u rows)\n",
                    (unsigned long long)moved, random ? "random" : "planned", wide_rows);
        CHECK_EQ_INT(moved, 0);
    }

    free(in_tile);
    dev_free(&d);
    free(tiles);
    free(rows);
    free(q_start);
    free(again);
    free(want);
    free(got);
    batch_free(&b);
}

static void test_tc_vs_twin(void) {
    static const attn_case cases[] = {
        {2, 3, 64, 16}, {2, 4, 128, 32}, {4, 1, 64, 16}, {2, 8, 128, 16}, {8, 4, 128, 16},
    };
    /* the CPU emulation of the runtime (tests/cuda_emu) takes the first two */
    const size_t n = getenv("PGD_CUDA_EMU") ? 2 : sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++) check_tc_case(&cases[i]);
}

/* ---- the tensor-core decode kernel ---- */

/* pgd_cuda_attention_dec on every row of a random batch (each row attends to its positions,
 * whether it is a decode row or not): against its twin within tc_close's tolerance (the same
 * reasoning: f16 roundings at the same points, f32 sums and exp2f apart); the same bits for
 * every n_split and for a list of rows (the others left poisoned); a padding row zeros; rows
 * beyond the scratch NaN; the counters left at zero (run_split_as). */
static void check_dec_case(const attn_case *c) {
    static const uint32_t ctx[] = {1, 3, 255, 256, 257, 300, 513, 1100, 64, 700};
    static const uint32_t qlen[] = {1, 3, 17, 1, 4, 2, 17, 3, 1, 1};
    const uint32_t S = sizeof ctx / sizeof ctx[0];
    attn_batch b;
    batch_make(&b, c->n_kv_head, c->group, c->head_dim, c->block_size, S, ctx, qlen);
    b.pos[b.T - 1] = -1; /* a padding row */
    const uint64_t row_elems = (uint64_t)b.n_head * b.geom.head_dim, n = b.T * row_elems;
    uint16_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    uint16_t *part = malloc(n * sizeof *part);
    REQUIRE(want && got && part);
    pgd_cuda_attention_dec_twin(b.q, b.q_stride, b.slab, b.geom, b.layer, b.n_head, b.bt,
                                b.bt_stride, b.seq_of, b.pos, b.T, b.scale, want);
    dev_batch d;
    REQUIRE(dev_make(&b, &d) == 0);
    uint32_t max_ctx = 0;
    for (uint32_t t = 0; t < b.T; t++)
        if (b.pos[t] + 1 > (int32_t)max_ctx) max_ctx = (uint32_t)b.pos[t] + 1;
    REQUIRE(run_split_as(true, &b, &d, NULL, b.T, 1, max_ctx, got) == 0);
    uint64_t far = 0, exact = 0;
    for (uint64_t e = 0; e < n; e++) {
        exact += got[e] == want[e];
        if (!tc_close(got[e], want[e]) && far++ < 5)
            fprintf(stderr, "    row %llu head %llu d %llu: kernel %g twin %g\n",
                    (unsigned long long)(e / row_elems),
                    (unsigned long long)(e % row_elems / b.geom.head_dim),
                    (unsigned long long)(e % b.geom.head_dim), (double)pgd_bf16_to_f32(got[e]),
                    (double)pgd_bf16_to_f32(want[e]));
    }
    fprintf(stderr,
            "  decode kernel: %u KV heads x group %u, head_dim %u, block %u: %u rows; %llu of "
            "%llu elements beyond the tolerance, %.4f exactly the twin's; digest %016llx\n",
            c->n_kv_head, c->group, c->head_dim, c->block_size, b.T, (unsigned long long)far,
            (unsigned long long)n, (double)exact / (double)n, (unsigned long long)digest(got, n));
    CHECK_EQ_INT(far, 0);
    uint64_t pad_bad = 0;
    for (uint64_t e = (b.T - 1) * row_elems; e < n; e++) pad_bad += got[e] != 0;
    CHECK_EQ_INT(pad_bad, 0);
    static const uint32_t splits[] = {2, 3, 64};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        REQUIRE(run_split_as(true, &b, &d, NULL, b.T, splits[i], max_ctx + 300, part) == 0);
        const uint64_t sd = count_differ(part, got, n);
        if (sd)
            fprintf(stderr, "    split %u: %llu elements differ\n", splits[i],
                    (unsigned long long)sd);
        CHECK_EQ_INT(sd, 0);
    }
    /* scratch for 512 positions: longer rows NaN, the others exact */
    REQUIRE(run_split_as(true, &b, &d, NULL, b.T, 3, 512, part) == 0);
    uint64_t nan_rows = 0;
    CHECK_EQ_INT(beyond_scratch_bad(&b, part, got, 512, &nan_rows), 0);
    CHECK(nan_rows > 0);
    /* the odd rows, last first: theirs exact, the others left poisoned */
    uint32_t n_odd = 0, *d_list = odd_rows(&b, &n_odd);
    REQUIRE(d_list);
    REQUIRE(run_split_as(true, &b, &d, d_list, n_odd, 2, max_ctx, part) == 0);
    CHECK_EQ_INT(odd_rows_bad(&b, part, got), 0);
    cudaFree(d_list);
    dev_free(&d);
    free(part);
    free(want);
    free(got);
    batch_free(&b);
}

static void test_dec_vs_twin(void) {
    static const attn_case cases[] = {
        {2, 4, 128, 16}, {2, 3, 64, 32}, {1, 16, 64, 16}, {4, 1, 128, 16}, {8, 4, 128, 32},
    };
    /* the CPU emulation of the runtime (tests/cuda_emu) takes the first two */
    const size_t n = getenv("PGD_CUDA_EMU") ? 2 : sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++) check_dec_case(&cases[i]);
}

static void test_errors(void) {
    pgd_kv_geom g = {.n_layer = 1, .n_kv_head = 2, .block_size = 16, .head_dim = 64};
    uint16_t *kv = NULL;
    REQUIRE(cudaMalloc((void **)&kv, 4096) == cudaSuccess);
    CHECK_EQ_INT(pgd_cuda_attention(NULL, 0, kv, g, 0, 3, NULL, 0, NULL, NULL, 1, 1.0f, NULL, NULL),
                 PGD_EINVAL); /* 3 heads over 2 KV heads */
    CHECK_EQ_INT(pgd_cuda_attention(NULL, 0, kv, g, 1, 4, NULL, 0, NULL, NULL, 1, 1.0f, NULL, NULL),
                 PGD_EINVAL); /* layer 1 of 1 */
    CHECK_EQ_INT(
        pgd_cuda_attention(NULL, 0, kv + 1, g, 0, 4, NULL, 0, NULL, NULL, 1, 1.0f, NULL, NULL),
        PGD_EINVAL); /* misaligned slab */
    g.head_dim = 20;
    CHECK_EQ_INT(pgd_cuda_attention(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, 1, 1.0f, NULL, NULL),
                 PGD_EINVAL);
    g.head_dim = 264;
    CHECK_EQ_INT(pgd_cuda_attention(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, 1, 1.0f, NULL, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_cuda_attention_tc(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, NULL, 1, 32, 1.0f,
                                       NULL, NULL),
                 PGD_EINVAL); /* the tensor-core kernel: head_dim 64 or 128 */
    g.head_dim = 64;
    CHECK_EQ_INT(pgd_cuda_attention(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, 0, 1.0f, NULL, NULL),
                 0); /* T = 0: nothing to do */
    CHECK_EQ_INT(pgd_cuda_attention_tc(NULL, 0, kv, g, 0, 130, NULL, 0, NULL, NULL, NULL, 1, 1,
                                       1.0f, NULL, NULL),
                 PGD_EINVAL); /* a group of 65 query heads */
    CHECK_EQ_INT(pgd_cuda_attention_tc(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, NULL, 0, 32, 1.0f,
                                       NULL, NULL),
                 0); /* no tile: nothing to do (group 2: 32 rows a tile) */
    CHECK_EQ_INT(pgd_cuda_attention_tc(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, NULL, 0, 64, 1.0f,
                                       NULL, NULL),
                 0); /* the wide form's 64 */
    CHECK_EQ_INT(pgd_cuda_attention_tc((const float *)kv + 1, 0, kv, g, 0, 4, NULL, 0, NULL, NULL,
                                       NULL, 0, 32, 1.0f, NULL, NULL),
                 PGD_EINVAL); /* queries not 16-byte aligned */
    CHECK_EQ_INT(pgd_cuda_attention_tc(NULL, 6, kv, g, 0, 4, NULL, 0, NULL, NULL, NULL, 0, 32, 1.0f,
                                       NULL, NULL),
                 PGD_EINVAL);                       /* nor their rows */
    for (uint32_t rows = 31; rows <= 65; rows += 2) /* neither 32 nor 64 */
        CHECK_EQ_INT(pgd_cuda_attention_tc(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, NULL, 0, rows,
                                           1.0f, NULL, NULL),
                     PGD_EINVAL);
    float *scratch = NULL;
    uint32_t *arrived = NULL;
    REQUIRE(cudaMalloc((void **)&scratch, 4096) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&arrived, 64) == cudaSuccess);
    CHECK_EQ_INT(pgd_cuda_attention_dec(NULL, 0, kv, g, 0, 34, NULL, 0, NULL, NULL, NULL, 1, 1.0f,
                                        1, 256, scratch, arrived, NULL, NULL),
                 PGD_EINVAL); /* the decode kernel: a group of 17 query heads */
    CHECK_EQ_INT(pgd_cuda_attention_dec(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, NULL, 1, 1.0f, 1,
                                        256, NULL, arrived, NULL, NULL),
                 PGD_EINVAL); /* no scratch */
    CHECK_EQ_INT(pgd_cuda_attention_dec(NULL, 0, kv, g, 0, 4, NULL, 0, NULL, NULL, NULL, 0, 1.0f, 1,
                                        256, scratch, arrived, NULL, NULL),
                 0); /* no row: nothing to do */
    cudaFree(scratch);
    cudaFree(arrived);
    cudaFree(kv);
}

int main(void) {
    if (pgd_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    seed_rng((uint64_t)time(NULL));
    if (!getenv("PGD_ATTN_TEST_TC_ONLY")) RUN(test_kernel_vs_twin); /* racecheck's short run */
    RUN(test_tc_vs_twin);
    RUN(test_dec_vs_twin);
    RUN(test_errors);
    return test_summary();
}
