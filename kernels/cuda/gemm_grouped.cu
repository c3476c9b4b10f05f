/*
 * kernels/cuda/gemm_grouped.cu — the experts' products of a mixture-of-experts layer on tensor
 * cores (pgd_cuda_gemm_grouped, gemm_grouped.h). CPU twin: pgd_cuda_gemm_grouped_twin
 * (gemm_grouped_twin.c, double sums: the kernel agrees within a tolerance, not bit for bit).
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
 * Invariants: N and K multiples of 8; X, W and Y 16-byte aligned; max_tiles <= 65535; the tiles'
 * rows <= 64 (a larger count is clamped, never overrun). Threading: any host thread owning the
 * stream; the launch is graph-capturable (nothing is read back to the host).
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

struct gg_args {
    const uint16_t *X;      /* bf16 [*][K] */
    const uint32_t *gather; /* [rows of the sorted order] or NULL */
    const uint16_t *W;      /* bf16 [NE][N][K] */
    uint32_t N, K;
    const pgd_grouped_tile *tiles; /* [max_tiles] */
    const uint32_t *n_tiles;       /* [1] */
    bool out_bf16;
    void *Y; /* f32 or bf16 [rows][N] */
};

__global__ void __launch_bounds__(kThreads) gemm_grouped_kernel(gg_args a) {
    extern __shared__ __align__(128) uint16_t smem[]; /* [kStages][kStageElems] */
    pgd_dev_pdl_enter(); /* the tiles, their count and X are the previous kernels' */
    if (blockIdx.y >= *a.n_tiles) return;
    const pgd_grouped_tile tile = a.tiles[blockIdx.y];
    const uint32_t rows = min(tile.rows, kBM);
    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint32_t g = lane / 4, c = lane % 4, wm = warp / 2, wn = warp % 2;
    const uint32_t N = a.N, K = a.K, n0 = blockIdx.x * kBN;

    /* this thread's copies: part tid % 8 of rows tid / 8 + 16 q (a warp's copy instruction: 4
     * rows' 128 contiguous bytes), A's and B's; a row past the tile or past N has no source */
    const uint32_t part = tid % kParts;
    const uint16_t *xsrc[kCopies], *wsrc[kCopies];
#pragma unroll
    for (uint32_t q = 0; q < kCopies; q++) {
        const uint32_t r = tid / kParts + kRowsPerPass * q;
        const uint32_t sr = tile.row0 + r; /* the row's place in the sorted order */
        xsrc[q] = r < rows ? a.X + (uint64_t)(a.gather ? a.gather[sr] : sr) * K : nullptr;
        wsrc[q] = n0 + r < N ? a.W + ((uint64_t)tile.expert * N + n0 + r) * K : nullptr;
    }
    /* chunk ch's A and B parts into stage s (zero-filled where there is no source: the copy's
     * source is then X or W itself, aligned and never read) */
    auto issue = [&](uint32_t ch, uint32_t s) {
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

    const uint32_t n_chunks = (K + kBK - 1) / kBK;
#pragma unroll
    for (uint32_t s = 0; s < kStages - 1; s++) {
        if (s < n_chunks) issue(s, s);
        __pipeline_commit(); /* one group a chunk, empty past the last: the waits count groups */
    }
    for (uint32_t ch = 0; ch < n_chunks; ch++) {
        __pipeline_wait_prior(kStages - 2); /* this thread's copies of chunk ch */
        __syncthreads(); /* everyone's; everyone is done with chunk ch - 1's stage */
        const uint32_t next = ch + kStages - 1;
        if (next < n_chunks) issue(next, next % kStages);
        __pipeline_commit();
        if (!busy) continue;
        const __half *st = reinterpret_cast<const __half *>(smem + (ch % kStages) * kStageElems);
#pragma unroll
        for (uint32_t kk = 0; kk < kBK / 16; kk++) {
            uint32_t bf[2][4];
#pragma unroll
            for (uint32_t j = 0; j < 2; j++)
                pgd_ldmatrix_x4(bf[j], st + b_off + j * 16 * kLd + kk * 16);
#pragma unroll
            for (uint32_t t = 0; t < 2; t++) {
                if (t == 1 && !live1) break;
                uint32_t af[4];
                pgd_ldmatrix_x4(af, st + a_off + t * 16 * kLd + kk * 16);
#pragma unroll
                for (uint32_t j = 0; j < 2; j++) {
                    pgd_mma_16816_bf16(acc[t][2 * j], af, bf[j][0], bf[j][1]);
                    pgd_mma_16816_bf16(acc[t][2 * j + 1], af, bf[j][2], bf[j][3]);
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
            const uint64_t y0 = (uint64_t)(tile.row0 + r) * N;
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
    const gg_args a = {X, gather, W, N, K, tiles, n_tiles, out_bf16, Y};
    static bool smem_done[PGD_CUDA_MAX_DEVICES];
    PGD_CUDA_TRY(pgd_cuda_smem_once(gemm_grouped_kernel, kSmemBytes, smem_done));
    PGD_CUDA_TRY(pgd_cuda_launch(gemm_grouped_kernel, dim3((N + kBN - 1) / kBN, max_tiles),
                                 kThreads, kSmemBytes, stream, a));
    return 0;
}
