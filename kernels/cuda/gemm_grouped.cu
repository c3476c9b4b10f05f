/*
 * kernels/cuda/gemm_grouped.cu — the experts' products of a mixture-of-experts layer on tensor
 * cores (pgd_cuda_gemm_grouped, gemm_grouped.h), and the same kernel over weights in 8 and in 4
 * bits (pgd_cuda_gemm_grouped_q8 and _q4, and pgd_cuda_gemm_q8 and _q4 over the rows of one
 * matrix). CPU twins: pgd_cuda_gemm_grouped_twin, _q8_twin and _q4_twin (gemm_grouped_twin.c,
 * double sums: the kernel agrees within a tolerance, not bit for bit).
 *
 * Grid (ceil(N / 64), max_tiles), 4 warps a CTA: CTA (x, y) takes tile y of the list (or leaves
 * at once when y >= *n_tiles, which only the device knows) and computes its rows (up to 64) x
 * columns [64x, 64x + 64) of Y. Warp w owns rows 32 (w / 2) .. + 31 and columns 32 (w % 2) .. +
 * 31: 2 x 4 accumulator tiles of 16 x 8 (mma_sync.cuh: m16n8k16, bf16 in, f32 accumulation),
 * 32 floats a lane. K is walked in chunks of 64 through a ring of 3 shared-memory stages filled
 * by cp.async: while a chunk is multiplied, the next two are in flight. Per chunk:
 *   1. wait for this thread's copies of the chunk, then a barrier (everyone's copies have landed,
 *      and everyone is done with the stage the next copy overwrites);
 *   2. issue the copies of chunk + 2 into that stage: A, the tile's rows of X through `gather`
 *      (rows past tile.rows zero-filled, their sources never read), and B, rows n0 .. n0 + 63 of
 *      W[tile.expert] (rows past N zero-filled), each row's 128 bytes of the chunk as 8 16-byte
 *      copies (K's tail past the last multiple of 64 zero-filled: K is a multiple of 8, so a
 *      16-byte part is wholly in or out);
 *   3. four k-steps of 16: B fragments by ldmatrix (W's rows are B's columns, k contiguous: the
 *      non-transposed read), then per 16-row A tile an ldmatrix and 4 products. A warp whose 32
 *      rows are all past tile.rows (or whose columns are all past N) skips the arithmetic, and a
 *      16-row A tile past tile.rows is skipped too: a decode step's one-row tiles do a quarter
 *      of a full tile's products.
 * The output is written from the accumulators: lane L's two neighbouring columns of rows L / 4
 * and L / 4 + 8 of each 16 x 8 tile, as one f32 pair (8 bytes) or one bf16 pair (4 bytes),
 * rows < tile.rows and columns < N only.
 *
 * Batch invariance: every accumulator starts at 0 and takes the chunks in increasing k, each
 * chunk's four k-steps in increasing k, whatever the tile's size or place in the list; a zero
 * row of A changes nothing in another row (the tensor cores compute each output element from its
 * own row and column). So a row's bits depend on its input row, the expert's weights and K only.
 *
 * Why these tiles: 64 x 64 with 4 warps is the smallest tile whose warps each get 8 products a
 * k-step from 2 + 2 ldmatrix (the fragments reused 4 and 2 times); the tile's 64 rows are the
 * routing's (PGD_GROUPED_TILE_ROWS). Chunks of 64 make every W row's read of a chunk one whole
 * 128-byte line (a warp's copy instruction: 4 rows' full lines), and 3 stages keep 2 chunks of
 * W, 16 KiB a CTA, in flight: in decode (one row a tile, 8 experts) the kernel only streams
 * weights. Shared rows are padded to 72 elements (144 bytes): ldmatrix's 8 row addresses and a
 * warp's 16-byte copies then fall in distinct banks. 54 KiB of dynamic shared memory a CTA.
 *
 * Weights in 8 bits (the kernel's q8 form, q8.h's THE FORM): the same grid, warps, tiles, chunks,
 * ring and fragments; what differs is how B reaches the tensor cores and the order of the sums.
 *   - A stage: A as above (9 KiB), B's values [64][64] int8 (4 KiB: each W row's 64 bytes of
 *     the chunk as 4 16-byte copies; K is a multiple of 32, so a part is wholly in or out) and
 *     the chunk's scales [2][64] (256 bytes: block 2 ch + b of column n0 + n at [b][n]). After
 *     the ring, one bf16 B tile [64][72] (9 KiB) as above. 48.75 KiB a CTA: 4 CTAs an SM (the
 *     kernel asks for at most 128 registers a thread); 2 chunks of W (8.5 KiB) in flight a CTA.
 *   - Per chunk, after step 2: every thread converts 32 of the chunk's values (row t / 2, k
 *     32 (t % 2) .. + 31: two 16-byte loads, four 16-byte stores) into the bf16 tile, exactly
 *     (|q| <= 128: 8 significant bits; q8_bf16 says how), then a second barrier; step 3 reads A
 *     and the bf16 tile by ldmatrix as above. Each value is converted once a CTA, by all four
 *     warps, whether they multiply or not (a decode tile's two idle warps share the work). The
 *     tile's previous chunk is done with: every warp passed this chunk's first barrier after it.
 *   - The scales: d's rows are K / 16 bytes apart and only 2-byte aligned, too small and too
 *     scattered for cp.async (4 bytes at least, aligned); thread t loads column t / 2's block
 *     t % 2 as one 2-byte load into a register a chunk ahead and stores it into its stage an
 *     iteration later (after that iteration's first barrier: the stage's previous chunk is done
 *     with), so the load's latency hides behind a chunk's products, as the copies' does. Columns
 *     past N and blocks past K store 0.
 *   - The sums: per block of 32 of K (the chunk's k-steps 0, 1 and 2, 3; the last chunk has only
 *     the first block when K % 64 == 32, and the second is skipped, not multiplied by zeros),
 *     the products go into block sums started at 0, two k-steps, and each element then joins its
 *     accumulator scaled, acc = fmaf(sum, f16(d[n][b]), acc), blocks in increasing k: the
 *     header's order, fixed by K alone, so batch invariance holds as above, and the dense form
 *     (pgd_cuda_gemm_q8: tile y is rows [64 y, 64 y + 64) of X, numbered by the kernel, no list)
 *     gives a row the same bits as the grouped form.
 *   - Banks: the values' rows are 64 bytes, unpadded; part p of row n is stored at part
 *     p ^ ((n >> 1) & 1), so the 8 threads of a 16-byte load's phase (rows n .. n + 3, one part
 *     each of two) read 8 distinct 16-byte slots of 128 bytes; the copies stay 512 contiguous
 *     bytes a warp. The bf16 tile's stores (rows 144 bytes apart) fall in distinct slots too.
 *
 * Weights in 4 bits (the kernel's q4 form, q4.h's THE FORM): the q8 form's grid, warps, tiles,
 * chunks, ring, bf16 B tile and block sums; what differs is the stage, the conversion, and the
 * block's offset term.
 *   - A stage: A (9 KiB), B's nibbles [64][32] (2 KiB: row n's block b of the chunk, 16 bytes, at
 *     32 n + 16 b; thread t copies row t / 2's block t % 2, so a warp's copies fill 512
 *     contiguous bytes; blocks past K zero-filled) and the chunk's d | m << 16 [2][64] (512
 *     bytes; thread t copies block t / 64 of column t % 64 by a 4-byte cp.async, zero past N and
 *     K: dm's rows are K / 8 bytes apart and 4-byte aligned, which cp.async takes, so they ride
 *     the ring with the values and need no registers a chunk ahead, unlike the q8 scales). After
 *     the ring, the bf16 B tile (9 KiB) and the row sums xs [64][2] f32 (512 bytes). 45,056
 *     bytes (44 KiB) a CTA; 128 registers a thread (sm_90a: the launch bound's cap for 4 CTAs,
 *     no spills): 4 CTAs an SM (176 KiB of shared memory); 2 chunks of W (5 KiB) in flight a CTA.
 *   - Per chunk, after step 2: thread t converts the 16 bytes it copied (row t / 2's block t % 2)
 *     into the bf16 tile's row t / 2, k 32 (t % 2) .. + 31 (one 16-byte load, four 16-byte
 *     stores; q4_bf16: exact), and sums the same 32 k of the tile's row t / 2 of X from the A
 *     stage into s = xs[t / 2][t % 2] (f32: each 16-byte part's 8 values in increasing k, then
 *     the parts (0 + 1) + (2 + 3): an order the row alone fixes; 0 past the tile's rows, A not
 *     read), then a second barrier: the tile and the sums are whole. A row's s is summed once a
 *     CTA, by all four warps (a decode tile's one row: 2 threads, the others store 0).
 *   - The sums: each block's p as the q8 form's block sums (two k-steps from 0); each element then
 *     joins its accumulator as acc = fmaf(p, f16(d), acc), acc = fmaf(s, f16(m), acc), blocks in
 *     increasing k: the header's order, fixed by K and the row alone, so batch invariance holds
 *     as above and the dense form gives a row the grouped form's bits. Lane L reads s of its rows
 *     g and g + 8 of each 16-row tile (xs[r][b]) and its columns 2c, 2c + 1's d | m << 16 (one
 *     8-byte load).
 *   - Banks: each thread's nibble load is its own copy's 16 bytes, a phase's 8 threads 128
 *     contiguous bytes; the bf16 stores are the q8 form's (distinct slots). The sums' loads of A:
 *     a phase's 8 threads read rows n .. n + 3 (n % 4 == 0), halves h = 0, 1, part i, at 16-byte
 *     slot (9 n + 4 h + i) mod 8 = (n + 4 h + i) mod 8: 8 distinct slots. xs's stores are 32
 *     consecutive words a warp; its loads, 8 distinct rows a warp (lanes of one g broadcast), 2
 *     words apart: distinct banks. The d | m loads: 4 distinct 8-byte words of 32 bytes (lanes of
 *     one c broadcast). The 4-byte copies into the stage fill 128 consecutive words.
 *
 * Invariants: N and K multiples of 8 (q8, q4: K of 32); X, W (q8, q4: W.q) and Y 16-byte aligned
 * (W.d 2-byte aligned, W.dm 4-byte aligned); max_tiles <= 65535 (dense: ceil(M / 64) <= 65535); the
 * tiles' rows <= 64 (a larger count is clamped, never overrun); element offsets in 64 bits (M N may
 * pass 2^31: a vocabulary's product). Threading: any host thread owning the stream; the launch is
 * graph-capturable (nothing is read back to the host).
 */
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/gemm_grouped.h"
#include "kernels/cuda/mma_sync.cuh"

namespace {

constexpr uint32_t kBM = PGD_GROUPED_TILE_ROWS; /* rows of a tile */
constexpr uint32_t kBN = 64;                    /* columns (rows of W) of a CTA */
constexpr uint32_t kBK = 64;                    /* k of a chunk */
constexpr uint32_t kStages = 3;                 /* chunks staged at once */
constexpr uint32_t kWarps = 4, kThreads = 32 * kWarps;
constexpr uint32_t kLd = kBK + 8;    /* elements of a staged row (144 bytes) */
constexpr uint32_t kParts = kBK / 8; /* 16-byte parts of a chunk's row */
/* rows one copy instruction of the CTA fills; a thread's copies of A (and of B) a chunk */
constexpr uint32_t kRowsPerPass = kThreads / kParts, kCopies = kBM / kRowsPerPass;
constexpr uint32_t kStageElems = (kBM + kBN) * kLd; /* A [kBM][kLd], then B [kBN][kLd] */
constexpr size_t kSmemBytes = (size_t)kStages * kStageElems * 2;
static_assert(kBM == 64 && kBN == 64 && kWarps == 4, "2 x 2 warps of 32 rows x 32 columns");
static_assert(kBK % 16 == 0 && kBM % kRowsPerPass == 0 && kBN == kBM, "whole copies a thread");
static_assert((kLd * 2) % 16 == 0 && (kStageElems * 2) % 16 == 0, "16-byte rows for ldmatrix");

/* The q8 form's stage, in bytes: A [kBM][kLd] bf16 (as above), B's values [kBN][kBK] int8
 * (swizzled), the chunk's scales [2][kBN] half bits; after the ring, the chunk's values as bf16
 * [kBN][kLd] (B as above). */
constexpr uint32_t kQBlock = PGD_Q8_BLOCK;                /* k of a scale's block */
constexpr uint32_t kQA = kBM * kLd * 2;                   /* A's bytes */
constexpr uint32_t kQB = kBN * kBK;                       /* B's values' bytes */
constexpr uint32_t kQStage = kQA + kQB + 2 * kBN * 2;     /* + the scales */
constexpr uint32_t kQBParts = kBK / 16;                   /* 16-byte parts of a B row */
constexpr uint32_t kQBCopies = kBN * kQBParts / kThreads; /* a thread's copies of B a chunk */
constexpr size_t kQSmemBytes = (size_t)kStages * kQStage + kBN * kLd * 2;
static_assert(kBK == 2 * kQBlock && kThreads == 2 * kBN, "2 blocks a chunk, a scale a thread");
static_assert(kQStage % 128 == 0 && kQBParts == 4 && kThreads % kQBParts == 0, "16-byte parts");

/* The q4 form's stage, in bytes: A as above, B's nibbles [kBN][kBK / 2] (a row's 2 blocks of
 * 16 bytes), the chunk's d | m << 16 [2][kBN]; after the ring, the bf16 B tile as the q8 form's,
 * then the tile rows' sums of X over the chunk's blocks [kBM][2] f32. */
constexpr uint32_t k4B = kBN * kBK / 2;               /* B's nibbles' bytes */
constexpr uint32_t k4Stage = kQA + k4B + 2 * kBN * 4; /* + d | m << 16 */
constexpr size_t k4SmemBytes = (size_t)kStages * k4Stage + kBN * kLd * 2 + kBM * 2 * 4;
static_assert(k4Stage % 128 == 0 && k4B / 16 == kThreads && 2 * kBN == kThreads, "a part a thread");

enum : int { kBf16, kQ8, kQ4 }; /* the kernel's forms of W */

struct gg_args {
    const uint16_t *X;      /* bf16 [*][K] */
    const uint32_t *gather; /* [rows of the sorted order] or NULL */
    const uint16_t *W;      /* bf16 [NE][N][K] (the bf16 form) */
    const int8_t *Wq;       /* int8 [NE][N][K] (the q8 form) */
    const uint16_t *Wd;     /* half bits [NE][N][K / 32] (the q8 form) */
    uint32_t N, K;
    const pgd_grouped_tile *tiles; /* [max_tiles], or NULL: the dense form (q8) */
    const uint32_t *n_tiles;       /* [1] */
    uint32_t M;                    /* the dense form's rows */
    bool out_bf16;
    void *Y;             /* f32 or bf16 [rows][ldy] */
    const uint8_t *W4;   /* nibbles [NE][N][K / 2] (the q4 form; after the others, whose
                          * offsets stay) */
    const uint32_t *Wdm; /* d | m << 16 [NE][N][K / 32] (the q4 form) */
    uint32_t ldy;        /* Y's row stride (elements; >= N, a multiple of 8) */
};

/* Four int8 values (w's bytes 0 .. 3) as bf16 pairs, exactly: lo (q0, q1), hi (q2, q3), the
 * lower-addressed value in the lower half. The f32 whose bits are 2^23's with q + 128 (the byte
 * with its top bit flipped) as its low byte is 2^23 + q + 128; less 2^23 + 128 it is q, exactly,
 * and an integer of at most 8 significant bits has the low 16 bits of its f32 zero: its upper
 * half is its bf16. A byte_perm (PRMT) a value and one a pair, and the subtraction. */
static __device__ __forceinline__ void q8_bf16(uint32_t w, uint32_t &lo, uint32_t &hi) {
    const uint32_t u = w ^ 0x80808080u;
    float f[4];
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) /* bytes: u's i-th, 0, 0, 0x4B */
        f[i] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650u + i)) - 8388736.0f;
    lo = __byte_perm(__float_as_uint(f[0]), __float_as_uint(f[1]), 0x7632u);
    hi = __byte_perm(__float_as_uint(f[2]), __float_as_uint(f[3]), 0x7632u);
}

/* A pair of bf16 v (bits) less 128 each: fma(v, 1, -128) on both halves, exact for the values
 * 128 .. 143 that q4_bf16 makes (the emulator, tests/cuda_emu: the same through f32). */
static __device__ __forceinline__ uint32_t bf16x2_less128(uint32_t v) {
#if defined(__CUDACC__)
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x3F803F80u), "r"(0xC300C300u));
    return r;
#else
    const float lo = __uint_as_float(v << 16) - 128.0f,
                hi = __uint_as_float(v & 0xFFFF0000u) - 128.0f;
    return __float_as_uint(lo) >> 16 | (__float_as_uint(hi) & 0xFFFF0000u);
#endif
}

/* Four bytes of nibbles (w: the low nibbles of bytes 0 .. 3 are q0 .. q3, the high ones q16 ..
 * q19, THE FORM's order) as bf16 pairs, exactly: lo0 (q0, q1), lo1 (q2, q3), hi0 (q16, q17),
 * hi1 (q18, q19), the lower-numbered value in the lower half. The bits 0x430q are the bf16
 * 2^7 (1 + q / 128) = 128 + q (q the low 4 bits of the 7-bit mantissa); one byte_perm (PRMT) a pair
 * puts the byte there, then one packed bf16 fma a pair takes 128 off. */
static __device__ __forceinline__ void q4_bf16(uint32_t w, uint32_t &lo0, uint32_t &lo1,
                                               uint32_t &hi0, uint32_t &hi1) {
    const uint32_t l = w & 0x0F0F0F0Fu, h = w >> 4 & 0x0F0F0F0Fu;
    lo0 = bf16x2_less128(__byte_perm(l, 0x43u, 0x4140u)); /* bytes l0, 0x43, l1, 0x43 */
    lo1 = bf16x2_less128(__byte_perm(l, 0x43u, 0x4342u));
    hi0 = bf16x2_less128(__byte_perm(h, 0x43u, 0x4140u));
    hi1 = bf16x2_less128(__byte_perm(h, 0x43u, 0x4342u));
}

/* One k-step of 16 into a warp's 2 x 4 accumulator tiles: B's fragments by ldmatrix from b (W's
 * rows, k contiguous: rows j 16 .. + 15 at b + j 16 kLd), then per 16-row A tile (the second
 * only when live1) its fragment from a + t 16 kLd and 4 products. */
static __device__ __forceinline__ void mma_kstep(float (&acc)[2][4][4], const __half *a,
                                                 const __half *b, bool live1) {
    uint32_t bf[2][4];
#pragma unroll
    for (uint32_t j = 0; j < 2; j++) pgd_ldmatrix_x4(bf[j], b + j * 16 * kLd);
#pragma unroll
    for (uint32_t t = 0; t < 2; t++) {
        if (t == 1 && !live1) break;
        uint32_t af[4];
        pgd_ldmatrix_x4(af, a + t * 16 * kLd);
#pragma unroll
        for (uint32_t j = 0; j < 2; j++) {
            pgd_mma_16816_bf16(acc[t][2 * j], af, bf[j][0], bf[j][1]);
            pgd_mma_16816_bf16(acc[t][2 * j + 1], af, bf[j][2], bf[j][3]);
        }
    }
}

/* F: the form of W: kBf16 (gg_args' W), kQ8 (q8.h's: Wq, Wd) or kQ4 (q4.h's: W4, Wdm). */
template <int F>
__global__ void __launch_bounds__(kThreads, F != kBf16 ? 4 : 1) gemm_grouped_kernel(gg_args a) {
    constexpr bool Q8 = F == kQ8, Q4 = F == kQ4, QF = Q8 || Q4;
    constexpr uint32_t kQS = Q4 ? k4Stage : kQStage; /* a stage's bytes, the 8- and 4-bit forms */
    /* [kStages][kStageElems] (q8: kQStage bytes, q4: k4Stage) */
    extern __shared__ __align__(128) uint16_t smem[];
    pgd_dev_pdl_enter(); /* the tiles, their count and X are the previous kernels' */
    pgd_grouped_tile tile;
    if (QF && !a.tiles) { /* the dense form: the grid's rows are X's, in tiles of 64 */
        tile.expert = 0, tile.row0 = blockIdx.y * kBM, tile.rows = min(a.M - tile.row0, kBM);
    } else {
        if (blockIdx.y >= *a.n_tiles) return;
        tile = a.tiles[blockIdx.y];
    }
    const uint32_t rows = min(tile.rows, kBM);
    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint32_t g = lane / 4, c = lane % 4, wm = warp / 2, wn = warp % 2;
    const uint32_t N = a.N, K = a.K, n0 = blockIdx.x * kBN;

    /* this thread's copies: part tid % 8 of rows tid / 8 + 16 q (a warp's copy instruction: 4
     * rows' 128 contiguous bytes), A's and B's; a row past the tile or past N has no source.
     * The q8 form's B: part tid % 4 of rows tid / 4 + 32 q (8 rows' 64 bytes); the q4 form's:
     * block tid % 2 of the chunk of row tid / 2 (16 rows' 32 bytes), and d | m << 16 of block
     * tid / 64 of the chunk of column n0 + tid % 64. */
    const uint32_t part = tid % kParts;
    const uint16_t *xsrc[kCopies], *wsrc[kCopies];
    const int8_t *qsrc[kQBCopies];
#pragma unroll
    for (uint32_t q = 0; q < kCopies; q++) {
        const uint32_t r = tid / kParts + kRowsPerPass * q;
        const uint32_t sr = tile.row0 + r; /* the row's place in the sorted order */
        xsrc[q] = r < rows ? a.X + (uint64_t)(a.gather ? a.gather[sr] : sr) * K : nullptr;
        if constexpr (!QF)
            wsrc[q] = n0 + r < N ? a.W + ((uint64_t)tile.expert * N + n0 + r) * K : nullptr;
    }
    const uint8_t *vsrc = nullptr;
    const uint32_t *dmsrc = nullptr;
    if constexpr (Q4) {
        const uint64_t e = (uint64_t)tile.expert * N;
        if (n0 + tid / 2 < N) vsrc = a.W4 + (e + n0 + tid / 2) * (K / 2) + tid % 2 * 16;
        if (n0 + tid % kBN < N) dmsrc = a.Wdm + (e + n0 + tid % kBN) * (K / kQBlock) + tid / kBN;
    }
    if constexpr (Q8) {
#pragma unroll
        for (uint32_t q = 0; q < kQBCopies; q++) {
            const uint32_t r = tid / kQBParts + kThreads / kQBParts * q;
            qsrc[q] = n0 + r < N ? a.Wq + ((uint64_t)tile.expert * N + n0 + r) * K : nullptr;
        }
    }
    /* chunk ch's A and B parts into stage s (zero-filled where there is no source: the copy's
     * source is then X or W itself, aligned and never read) */
    auto issue = [&](uint32_t ch, uint32_t s) {
        if constexpr (!QF) {
            uint16_t *as = smem + s * kStageElems, *bs = as + kBM * kLd;
            const uint32_t k = ch * kBK + part * 8;
            const bool kin = k < K;
#pragma unroll
            for (uint32_t q = 0; q < kCopies; q++) {
                const uint32_t r = tid / kParts + kRowsPerPass * q;
                const bool xin = kin && xsrc[q], win = kin && wsrc[q];
                __pipeline_memcpy_async(as + r * kLd + part * 8, xin ? xsrc[q] + k : a.X, 16,
                                        xin ? 0 : 16);
                __pipeline_memcpy_async(bs + r * kLd + part * 8, win ? wsrc[q] + k : a.W, 16,
                                        win ? 0 : 16);
            }
        } else {
            char *st = reinterpret_cast<char *>(smem) + s * kQS;
            uint16_t *as = reinterpret_cast<uint16_t *>(st);
            const uint32_t k = ch * kBK + part * 8;
            const bool kin = k < K;
#pragma unroll
            for (uint32_t q = 0; q < kCopies; q++) {
                const uint32_t r = tid / kParts + kRowsPerPass * q;
                const bool xin = kin && xsrc[q];
                __pipeline_memcpy_async(as + r * kLd + part * 8, xin ? xsrc[q] + k : a.X, 16,
                                        xin ? 0 : 16);
            }
            if constexpr (Q8) {
                int8_t *bs = reinterpret_cast<int8_t *>(st + kQA);
                const uint32_t bp = tid % kQBParts, kb = ch * kBK + bp * 16;
#pragma unroll
                for (uint32_t q = 0; q < kQBCopies; q++) {
                    const uint32_t r = tid / kQBParts + kThreads / kQBParts * q;
                    const bool win = kb < K && qsrc[q];
                    __pipeline_memcpy_async(bs + r * kBK + (bp ^ (r >> 1 & 1)) * 16,
                                            win ? qsrc[q] + kb : a.Wq, 16, win ? 0 : 16);
                }
            } else { /* row tid / 2's block tid % 2 at byte 16 tid; d | m << 16 at word tid */
                const bool win = vsrc && 2 * ch + tid % 2 < K / kQBlock;
                const bool din = dmsrc && 2 * ch + tid / kBN < K / kQBlock;
                __pipeline_memcpy_async(st + kQA + 16 * tid, win ? vsrc + ch * kBK / 2 : a.W4, 16,
                                        win ? 0 : 16);
                __pipeline_memcpy_async(st + kQA + k4B + 4 * tid, din ? dmsrc + 2 * ch : a.Wdm, 4,
                                        din ? 0 : 4);
            }
        }
    };
    /* the q8 form's scales: this thread's one, block 2 ch + tid % 2 of column n0 + tid / 2 (0
     * past N or K), loaded by scale_load and put into stage s by scale_store */
    const uint32_t blocks = K / kQBlock, sb = tid % 2, sn = tid / 2;
    const uint16_t *dsrc =
        Q8 && n0 + sn < N ? a.Wd + ((uint64_t)tile.expert * N + n0 + sn) * blocks + sb : nullptr;
    auto scale_load = [&](uint32_t ch) -> uint16_t {
        return dsrc && 2 * ch + sb < blocks ? __ldg(dsrc + 2 * ch) : (uint16_t)0;
    };
    auto scale_store = [&](uint32_t s, uint16_t v) {
        reinterpret_cast<uint16_t *>(reinterpret_cast<char *>(smem) + s * kQStage + kQA +
                                     kQB)[sb * kBN + sn] = v;
    };

    /* acc[t][j]: rows 32 wm + 16 t .. + 15 x columns n0 + 32 wn + 8 j .. + 7 */
    float acc[2][4][4];
#pragma unroll
    for (uint32_t t = 0; t < 2; t++)
#pragma unroll
        for (uint32_t j = 0; j < 4; j++)
            acc[t][j][0] = acc[t][j][1] = acc[t][j][2] = acc[t][j][3] = 0;
    /* warp-uniform: whether the warp has rows and columns to compute, and 16-row tiles */
    const bool busy = wm * 32 < rows && n0 + wn * 32 < N;
    const bool live1 = wm * 32 + 16 < rows;
    /* this lane's ldmatrix row offsets (mma_sync.cuh): A by matrices (rows 0-7, k 0-7), (8-15,
     * 0-7), (0-7, 8-15), (8-15, 8-15): a[0..3]; B (W's rows n, k contiguous) by (n 0-7, k 0-7),
     * (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): registers 0, 1 the first 8 columns' b, 2, 3 the
     * next 8's */
    const uint32_t a_off = (wm * 32 + lane % 8 + 8 * (lane / 8 % 2)) * kLd + 8 * (lane / 16);
    const uint32_t b_off =
        kBM * kLd + (wn * 32 + lane % 8 + 8 * (lane / 16)) * kLd + 8 * (lane / 8 % 2);
    const uint32_t b_row = b_off - kBM * kLd; /* q8, q4: in bq */
    /* q8, q4: the chunk's values as bf16 [kBN][kLd], after the ring; q4: then the row sums */
    uint16_t *const bq =
        reinterpret_cast<uint16_t *>(reinterpret_cast<char *>(smem) + (size_t)kStages * kQS);
    float *const xs = reinterpret_cast<float *>(bq + kBN * kLd); /* q4: [kBM][2] */

    const uint32_t n_chunks = (K + kBK - 1) / kBK;
    uint16_t scale_next = 0; /* q8: chunk ch + 2's scale, stored in iteration ch */
    if constexpr (Q8) {
        if (n_chunks > 0) scale_store(0, scale_load(0));
        if (n_chunks > 1) scale_store(1, scale_load(1));
        scale_next = scale_load(2);
    }
#pragma unroll
    for (uint32_t s = 0; s < kStages - 1; s++) {
        if (s < n_chunks) issue(s, s);
        __pipeline_commit(); /* one group a chunk, empty past the last: the waits count groups */
    }
    for (uint32_t ch = 0; ch < n_chunks; ch++) {
        __pipeline_wait_prior(kStages - 2); /* this thread's copies of chunk ch */
        __syncthreads(); /* everyone's; everyone is done with chunk ch - 1's stage */
        const uint32_t next = ch + kStages - 1;
        if (next < n_chunks) {
            issue(next, next % kStages);
            if constexpr (Q8) {
                scale_store(next % kStages, scale_next);
                scale_next = scale_load(next + 1);
            }
        }
        __pipeline_commit();
        if constexpr (Q8) {
            /* chunk ch's values into bf16, the B tile of the bf16 form: thread t converts row
             * t / 2's k 32 (t % 2) .. + 31 (everyone is done with the previous chunk's since the
             * barrier above) */
            const char *st = reinterpret_cast<const char *>(smem) + (ch % kStages) * kQStage;
            const int8_t *bs = reinterpret_cast<const int8_t *>(st + kQA);
            const uint32_t n = tid / 2, h = tid % 2;
            uint4 *out = reinterpret_cast<uint4 *>(bq + n * kLd + 32 * h);
#pragma unroll
            for (uint32_t i = 0; i < 2; i++) {
                const uint4 w = *reinterpret_cast<const uint4 *>(bs + n * kBK +
                                                                 ((2 * h + i) ^ (n >> 1 & 1)) * 16);
                uint4 lo, hi;
                q8_bf16(w.x, lo.x, lo.y);
                q8_bf16(w.y, lo.z, lo.w);
                q8_bf16(w.z, hi.x, hi.y);
                q8_bf16(w.w, hi.z, hi.w);
                out[2 * i] = lo, out[2 * i + 1] = hi;
            }
            __syncthreads(); /* the tile is whole */
        }
        if constexpr (Q4) {
            /* chunk ch's nibbles into bf16 as the q8 form's values: thread t converts row t / 2's
             * block t % 2 of the chunk (its own copy's 16 bytes), k 32 (t % 2) .. + 31; and sums
             * the same block of the tile's row t / 2 of X (0 past the tile's rows) into xs */
            const char *st = reinterpret_cast<const char *>(smem) + (ch % kStages) * k4Stage;
            const uint32_t n = tid / 2, h = tid % 2;
            const uint4 w = *reinterpret_cast<const uint4 *>(st + kQA + 16 * tid);
            uint4 o[4]; /* k 0-7, 8-15 (the low nibbles), 16-23, 24-31 (the high ones) */
            q4_bf16(w.x, o[0].x, o[0].y, o[2].x, o[2].y);
            q4_bf16(w.y, o[0].z, o[0].w, o[2].z, o[2].w);
            q4_bf16(w.z, o[1].x, o[1].y, o[3].x, o[3].y);
            q4_bf16(w.w, o[1].z, o[1].w, o[3].z, o[3].w);
            uint4 *out = reinterpret_cast<uint4 *>(bq + n * kLd + 32 * h);
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) out[i] = o[i];
            float sum = 0;
            if (n < rows) { /* each 8 in increasing k, then (0 + 1) + (2 + 3): the row's order */
                const uint4 *x = reinterpret_cast<const uint4 *>(st + (n * kLd + 32 * h) * 2);
                float p[4];
#pragma unroll
                for (uint32_t i = 0; i < 4; i++) {
                    const uint4 v = x[i];
                    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
                    p[i] = __uint_as_float(u[0] << 16);
                    p[i] += __uint_as_float(u[0] & 0xFFFF0000u);
#pragma unroll
                    for (uint32_t e = 1; e < 4; e++) {
                        p[i] += __uint_as_float(u[e] << 16);
                        p[i] += __uint_as_float(u[e] & 0xFFFF0000u);
                    }
                }
                sum = (p[0] + p[1]) + (p[2] + p[3]);
            }
            xs[tid] = sum;   /* [n][h] */
            __syncthreads(); /* the tile and the sums are whole */
        }
        if (!busy) continue;
        if constexpr (!QF) {
            const __half *st =
                reinterpret_cast<const __half *>(smem + (ch % kStages) * kStageElems);
#pragma unroll
            for (uint32_t kk = 0; kk < kBK / 16; kk++)
                mma_kstep(acc, st + a_off + kk * 16, st + b_off + kk * 16, live1);
        } else {
            const char *st = reinterpret_cast<const char *>(smem) + (ch % kStages) * kQS;
            const __half *as = reinterpret_cast<const __half *>(st);
            const __half *bh = reinterpret_cast<const __half *>(bq);
            const uint16_t *ss = reinterpret_cast<const uint16_t *>(st + kQA + kQB);
            const uint32_t *dms = reinterpret_cast<const uint32_t *>(st + kQA + k4B);
#pragma unroll
            for (uint32_t b = 0; b < kBK / kQBlock; b++) {
                if (2 * ch + b >= blocks) break; /* K % 64 == 32: the last chunk's one block */
                /* the block's sums: its two k-steps from 0 */
                float sum[2][4][4];
#pragma unroll
                for (uint32_t t = 0; t < 2; t++)
#pragma unroll
                    for (uint32_t j = 0; j < 4; j++)
                        sum[t][j][0] = sum[t][j][1] = sum[t][j][2] = sum[t][j][3] = 0;
#pragma unroll
                for (uint32_t kk = 2 * b; kk < 2 * b + 2; kk++)
                    mma_kstep(sum, as + a_off + kk * 16, bh + b_row + kk * 16, live1);
                if constexpr (Q4) {
                    /* p d, then s m into the accumulators: rows g, g + 8 of each 16 (s of row r
                     * and block b at xs[2 r + b]), columns 2c, 2c + 1 of each 8 (one 8-byte load
                     * of their d | m << 16) */
                    float sx[2][2];
#pragma unroll
                    for (uint32_t t = 0; t < 2; t++)
#pragma unroll
                        for (uint32_t h = 0; h < 2; h++)
                            sx[t][h] = xs[2 * (wm * 32 + 16 * t + g + 8 * h) + b];
#pragma unroll
                    for (uint32_t j = 0; j < 4; j++) {
                        const uint2 dm = *reinterpret_cast<const uint2 *>(dms + b * kBN + wn * 32 +
                                                                          8 * j + 2 * c);
                        const float d[2] = {
                            __half2float(__ushort_as_half((unsigned short)(dm.x & 0xFFFFu))),
                            __half2float(__ushort_as_half((unsigned short)(dm.y & 0xFFFFu)))};
                        const float m[2] = {
                            __half2float(__ushort_as_half((unsigned short)(dm.x >> 16))),
                            __half2float(__ushort_as_half((unsigned short)(dm.y >> 16)))};
#pragma unroll
                        for (uint32_t t = 0; t < 2; t++) {
                            if (t == 1 && !live1) break;
#pragma unroll
                            for (uint32_t e = 0; e < 4; e++) {
                                acc[t][j][e] = fmaf(sum[t][j][e], d[e % 2], acc[t][j][e]);
                                acc[t][j][e] = fmaf(sx[t][e / 2], m[e % 2], acc[t][j][e]);
                            }
                        }
                    }
                } else {
                    /* scaled into the accumulators: columns 2c, 2c + 1 of each 8 (a 4-byte load) */
#pragma unroll
                    for (uint32_t j = 0; j < 4; j++) {
                        const uint32_t d2 = *reinterpret_cast<const uint32_t *>(
                            ss + b * kBN + wn * 32 + 8 * j + 2 * c);
                        const float d0 =
                            __half2float(__ushort_as_half((unsigned short)(d2 & 0xFFFFu)));
                        const float d1 = __half2float(__ushort_as_half((unsigned short)(d2 >> 16)));
#pragma unroll
                        for (uint32_t t = 0; t < 2; t++) {
                            if (t == 1 && !live1) break;
#pragma unroll
                            for (uint32_t e = 0; e < 4; e++)
                                acc[t][j][e] = fmaf(sum[t][j][e], e % 2 ? d1 : d0, acc[t][j][e]);
                        }
                    }
                }
            }
        }
    }
    if (!busy) return;

#pragma unroll
    for (uint32_t t = 0; t < 2; t++)
#pragma unroll
        for (uint32_t h = 0; h < 2; h++) {
            const uint32_t r = wm * 32 + 16 * t + g + 8 * h;
            if (r >= rows) continue;
            const uint64_t y0 = (uint64_t)(tile.row0 + r) * a.ldy;
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) {
                const uint32_t col = n0 + wn * 32 + 8 * j + 2 * c;
                if (col >= N) continue; /* N % 8 == 0: an 8-column tile is wholly in or out */
                const float lo = acc[t][j][2 * h], hi = acc[t][j][2 * h + 1];
                if (a.out_bf16)
                    *reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(a.Y) + y0 + col) =
                        (uint32_t)pgd_dev_f32_to_bf16(lo) | (uint32_t)pgd_dev_f32_to_bf16(hi) << 16;
                else
                    *reinterpret_cast<float2 *>(static_cast<float *>(a.Y) + y0 + col) =
                        float2{lo, hi};
            }
        }
}

/* The q8 and q4 forms' launch: the checks, then grid (ceil(N / 64), tiles). */
template <int F>
int launch_quant(const char *what, const gg_args &a, uint32_t tiles, void *stream) {
    static_assert(F == kQ8 || F == kQ4, "a form in blocks of 32");
    const void *q = F == kQ8 ? (const void *)a.Wq : (const void *)a.W4;
    const void *d = F == kQ8 ? (const void *)a.Wd : (const void *)a.Wdm;
    const uintptr_t d_align = F == kQ8 ? 2 : 4;
    if (a.N % 8 || a.K % kQBlock || tiles > 65535 || a.ldy < a.N || a.ldy % 8)
        return pgd_error_set(PGD_EINVAL,
                             "%s: N %u must be a multiple of 8 and K %u of 32, the tiles at most "
                             "65535 (%u), Y's row stride %u a multiple of 8 and at least N",
                             what, a.N, a.K, tiles, a.ldy);
    if ((uintptr_t)a.X % 16 || (uintptr_t)q % 16 || (uintptr_t)d % d_align || (uintptr_t)a.Y % 16)
        return pgd_error_set(PGD_EINVAL,
                             "%s: X, W.q and Y must be 16-byte aligned, %s %u-byte aligned", what,
                             F == kQ8 ? "W.d" : "W.dm", (unsigned)d_align);
    if (tiles == 0 || a.N == 0) return 0;
    if (!a.X || !q || (!d && a.K) || (!a.tiles && !a.M) || (a.tiles && !a.n_tiles) || !a.Y)
        return pgd_error_set(PGD_EINVAL, "%s: a NULL operand", what);
    constexpr size_t smem = F == kQ8 ? kQSmemBytes : k4SmemBytes;
    static bool smem_done[PGD_CUDA_MAX_DEVICES];
    PGD_CUDA_TRY(pgd_cuda_smem_once(gemm_grouped_kernel<F>, smem, smem_done));
    PGD_CUDA_TRY(pgd_cuda_launch(gemm_grouped_kernel<F>,
                                 dim3((uint32_t)(((uint64_t)a.N + kBN - 1) / kBN), tiles), kThreads,
                                 smem, stream, a));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_gemm_grouped(const uint16_t *X, const uint32_t *gather, const uint16_t *W,
                                     uint32_t N, uint32_t K, const pgd_grouped_tile *tiles,
                                     const uint32_t *n_tiles, uint32_t max_tiles, bool out_bf16,
                                     void *Y, void *stream) {
    if (N % 8 || K % 8 || max_tiles > 65535)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA grouped GEMM: N %u and K %u must be multiples of 8, and the "
                             "tiles at most 65535 (%u)",
                             N, K, max_tiles);
    if ((uintptr_t)X % 16 || (uintptr_t)W % 16 || (uintptr_t)Y % 16)
        return pgd_error_set(PGD_EINVAL, "CUDA grouped GEMM: X, W and Y must be 16-byte aligned");
    if (max_tiles == 0 || N == 0) return 0;
    if (!X || !W || !tiles || !n_tiles || !Y)
        return pgd_error_set(PGD_EINVAL, "CUDA grouped GEMM: a NULL operand");
    const gg_args a = {X,       gather, W,        nullptr, nullptr, N,       K, tiles,
                       n_tiles, 0,      out_bf16, Y,       nullptr, nullptr, N};
    static bool smem_done[PGD_CUDA_MAX_DEVICES];
    PGD_CUDA_TRY(pgd_cuda_smem_once(gemm_grouped_kernel<kBf16>, kSmemBytes, smem_done));
    PGD_CUDA_TRY(pgd_cuda_launch(gemm_grouped_kernel<kBf16>, dim3((N + kBN - 1) / kBN, max_tiles),
                                 kThreads, kSmemBytes, stream, a));
    return 0;
}

extern "C" int pgd_cuda_gemm_grouped_q8(const uint16_t *X, const uint32_t *gather, pgd_q8_mat W,
                                        uint32_t N, uint32_t K, const pgd_grouped_tile *tiles,
                                        const uint32_t *n_tiles, uint32_t max_tiles, bool out_bf16,
                                        void *Y, void *stream) {
    const gg_args a = {X,       gather, nullptr,  W.q, W.d,     N,       K, tiles,
                       n_tiles, 0,      out_bf16, Y,   nullptr, nullptr, N};
    return launch_quant<kQ8>("CUDA grouped GEMM (q8)", a, max_tiles, stream);
}

extern "C" int pgd_cuda_gemm_q8_ld(const uint16_t *X, pgd_q8_mat W, uint32_t M, uint32_t N,
                                   uint32_t K, uint32_t ldy, bool out_bf16, void *Y, void *stream) {
    const uint64_t tiles = ((uint64_t)M + kBM - 1) / kBM;
    if (tiles > 65535)
        return pgd_error_set(PGD_EINVAL, "CUDA GEMM (q8): %u rows, at most %u", M, 65535u * kBM);
    const gg_args a = {X,       nullptr, nullptr,  W.q, W.d,     N,       K,  nullptr,
                       nullptr, M,       out_bf16, Y,   nullptr, nullptr, ldy};
    return launch_quant<kQ8>("CUDA GEMM (q8)", a, (uint32_t)tiles, stream);
}

extern "C" int pgd_cuda_gemm_q8(const uint16_t *X, pgd_q8_mat W, uint32_t M, uint32_t N, uint32_t K,
                                bool out_bf16, void *Y, void *stream) {
    return pgd_cuda_gemm_q8_ld(X, W, M, N, K, N, out_bf16, Y, stream);
}

extern "C" int pgd_cuda_gemm_grouped_q4(const uint16_t *X, const uint32_t *gather, pgd_q4_mat W,
                                        uint32_t N, uint32_t K, const pgd_grouped_tile *tiles,
                                        const uint32_t *n_tiles, uint32_t max_tiles, bool out_bf16,
                                        void *Y, void *stream) {
    const gg_args a = {X,       gather, nullptr,  nullptr, nullptr, N,    K, tiles,
                       n_tiles, 0,      out_bf16, Y,       W.q,     W.dm, N};
    return launch_quant<kQ4>("CUDA grouped GEMM (q4)", a, max_tiles, stream);
}

extern "C" int pgd_cuda_gemm_q4_ld(const uint16_t *X, pgd_q4_mat W, uint32_t M, uint32_t N,
                                   uint32_t K, uint32_t ldy, bool out_bf16, void *Y, void *stream) {
    const uint64_t tiles = ((uint64_t)M + kBM - 1) / kBM;
    if (tiles > 65535)
        return pgd_error_set(PGD_EINVAL, "CUDA GEMM (q4): %u rows, at most %u", M, 65535u * kBM);
    const gg_args a = {X,       nullptr, nullptr,  nullptr, nullptr, N,    K,  nullptr,
                       nullptr, M,       out_bf16, Y,       W.q,     W.dm, ldy};
    return launch_quant<kQ4>("CUDA GEMM (q4)", a, (uint32_t)tiles, stream);
}

extern "C" int pgd_cuda_gemm_q4(const uint16_t *X, pgd_q4_mat W, uint32_t M, uint32_t N, uint32_t K,
                                bool out_bf16, void *Y, void *stream) {
    return pgd_cuda_gemm_q4_ld(X, W, M, N, K, N, out_bf16, Y, stream);
}
