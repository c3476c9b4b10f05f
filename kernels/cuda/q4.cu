/*
 * kernels/cuda/q4.cu — weights in 4 bits (q4.h's THE FORM): made from GGUF Q4_1 blocks or from
 * f32 / bf16 values at load, and the embedding gather from them in a step. Owns nothing.
 * CPU twins: the split is a copy; the quantization is pgd_quantize_row_q4_1
 * (kernels/cpu/quant.h), bit for bit; the gather one fmaf (tests/gpu/test_cuda_q4.c).
 *
 * Grids: one thread per block of 32 values (split, quantize) or per element (embed), in
 * grid-stride loops with 64-bit indices. The split reads the 20-byte blocks with byte loads (a
 * GGUF row is only byte-aligned) and writes a block's 16 bytes of values as one 16-byte store.
 *
 * Invariants: the quantization computes what pgd_quantize_row_q4_1 does in the same order, each
 * operation rounded once (__fdiv_rn / __fmul_rn / __fadd_rn / __fsub_rn: nvcc cannot contract
 * them into an FMA), and rounds d and m to half by round-to-nearest-even as pgd_f32_to_f16 does.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/q4.h"

namespace {

constexpr uint32_t kBlock = PGD_Q4_BLOCK, kBlockBytes = PGD_Q4_BLOCK_BYTES;

/* A block's 16 bytes of values (byte j: element j low, j + 16 high) as one 16-byte store. */
__device__ __forceinline__ void store_block(uint8_t *dst, const uint8_t (&v)[kBlock / 2]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)v[4 * i] | (uint32_t)v[4 * i + 1] << 8 | (uint32_t)v[4 * i + 2] << 16 |
               (uint32_t)v[4 * i + 3] << 24;
    uint4 o;
    o.x = w[0], o.y = w[1], o.z = w[2], o.w = w[3];
    *reinterpret_cast<uint4 *>(dst) = o;
}

/* src: n_blocks GGUF Q4_1 blocks (20 bytes each, any alignment); q: [n_blocks][16]; dm:
 * [n_blocks]. Rows are contiguous in both, so block i is block i of both. */
__global__ void split_kernel(const uint8_t *src, uint64_t n_blocks, uint8_t *q, uint32_t *dm) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_blocks; i += step) {
        const uint8_t *b = src + i * kBlockBytes;
        uint8_t v[kBlock / 2];
#pragma unroll
        for (uint32_t j = 0; j < kBlock / 2; j++) v[j] = b[4 + j];
        dm[i] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        store_block(q + i * (kBlock / 2), v);
    }
}

/* src: In [n_blocks][32] (f32 or bf16 bits); q, dm as split_kernel's. pgd_quantize_row_q4_1's
 * arithmetic: lo, hi by comparisons, d = (hi - lo) / 15, id = 1 / d (0 when d is),
 * q = min(15, trunc((x - lo) * id + 0.5)), 0 where that is NaN. */
template <typename In>
__global__ void quantize_kernel(const In *src, uint64_t n_blocks, uint8_t *q, uint32_t *dm) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_blocks; i += step) {
        float x[kBlock];
#pragma unroll
        for (uint32_t j = 0; j < kBlock; j++) x[j] = pgd_dev_load_f32(src, i * kBlock + j);
        float lo = x[0], hi = x[0];
#pragma unroll
        for (uint32_t j = 1; j < kBlock; j++) {
            if (x[j] < lo) lo = x[j];
            if (x[j] > hi) hi = x[j];
        }
        const float dv = __fdiv_rn(__fsub_rn(hi, lo), 15.0f),
                    id = dv != 0.0f ? __fdiv_rn(1.0f, dv) : 0.0f;
        dm[i] = (uint32_t)__half_as_ushort(__float2half_rn(dv)) |
                (uint32_t)__half_as_ushort(__float2half_rn(lo)) << 16;
        uint8_t c[kBlock];
#pragma unroll
        for (uint32_t j = 0; j < kBlock; j++) {
            const float v = __fadd_rn(__fmul_rn(__fsub_rn(x[j], lo), id), 0.5f);
            c[j] = v >= 15.0f ? 15 : v > 0.0f ? (uint8_t)v : 0;
        }
        uint8_t v[kBlock / 2];
#pragma unroll
        for (uint32_t j = 0; j < kBlock / 2; j++) v[j] = (uint8_t)(c[j] | c[j + kBlock / 2] << 4);
        store_block(q + i * (kBlock / 2), v);
    }
}

/* x: f32 [T][E] = fmaf(f16(d), q, f16(m)) of table[tokens[t]][e]. */
__global__ void embed_kernel(const uint8_t *q, const uint32_t *dm, const int32_t *tokens,
                             uint32_t T, uint32_t E, float *x) {
    pgd_dev_pdl_enter();
    const uint64_t n = (uint64_t)T * E, step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t t = i / E, e = i % E, row = (uint64_t)tokens[t];
        const uint32_t s = dm[row * (E / kBlock) + e / kBlock], j = (uint32_t)(e % kBlock);
        const uint8_t byte = q[row * (E / 2) + e / kBlock * (kBlock / 2) + j % (kBlock / 2)];
        const uint32_t v = j < kBlock / 2 ? byte & 15u : byte >> 4;
        x[i] = __fmaf_rn(__half2float(__ushort_as_half((uint16_t)(s & 0xffff))), (float)v,
                         __half2float(__ushort_as_half((uint16_t)(s >> 16))));
    }
}

/* out: bf16 [rows][K] = bf16(fmaf(f16(d), q, f16(m))) of W's rows [row0, row0 + rows), 8
 * values a thread (one 8-byte load of values: elements 8c..8c + 7 of a block are the low (c 0, 1)
 * or high (c 2, 3) nibbles of its bytes 8 (c & 1) .. + 7; one 16-byte store). */
__global__ void rows_bf16_kernel(const uint8_t *q, const uint32_t *dm, uint64_t row0, uint32_t rows,
                                 uint32_t K, uint16_t *out) {
    pgd_dev_pdl_enter();
    const uint32_t per_row = K / 8;
    const uint64_t n = (uint64_t)rows * per_row, step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t row = row0 + i / per_row;
        const uint32_t k0 = (uint32_t)(i % per_row) * 8, c = k0 % kBlock / 8;
        const uint32_t s = dm[row * (K / kBlock) + k0 / kBlock];
        const float d = __half2float(__ushort_as_half((uint16_t)(s & 0xffff))),
                    m = __half2float(__ushort_as_half((uint16_t)(s >> 16)));
        const uint2 v =
            *reinterpret_cast<const uint2 *>(q + row * (K / 2) + k0 / kBlock * 16 + (c & 1) * 8);
        const uint32_t shift = c < 2 ? 0 : 4;
        float f[8];
#pragma unroll
        for (int e = 0; e < 8; e++)
            f[e] = __fmaf_rn(d, (float)((e < 4 ? v.x : v.y) >> (8 * (e % 4) + shift) & 15u), m);
        pgd_dev_store_bf16x8(out + i * 8, f);
    }
}

/* The shape checks every entry shares: rows >= 0, cols a multiple of 32 (>= 32 when rows > 0),
 * q 16-byte and dm 4-byte aligned. */
int check_form(const char *what, int64_t rows, int64_t cols, pgd_q4_mat m) {
    if (rows < 0 || cols <= 0 || cols % kBlock || (rows > 0 && cols > INT64_MAX / rows))
        return pgd_error_set(PGD_EINVAL, "%s: bad shape %lld x %lld (columns a multiple of %u)",
                             what, (long long)rows, (long long)cols, kBlock);
    if (((uintptr_t)m.q & 15) || ((uintptr_t)m.dm & 3))
        return pgd_error_set(PGD_EINVAL, "%s: values not 16-byte or scales not 4-byte aligned",
                             what);
    return 0;
}

} // namespace

extern "C" int pgd_cuda_q4_split(const void *src, int64_t rows, int64_t cols, pgd_q4_mat dst,
                                 void *stream) {
    int rc = check_form("4-bit weights from Q4_1", rows, cols, dst);
    if (rc || rows == 0) return rc;
    const uint64_t n_blocks = (uint64_t)rows * (uint64_t)cols / kBlock;
    split_kernel<<<pgd_cuda_grid(n_blocks, PGD_CUDA_THREADS), PGD_CUDA_THREADS, 0,
                   (cudaStream_t)stream>>>((const uint8_t *)src, n_blocks, dst.q, dst.dm);
    PGD_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pgd_cuda_q4_quantize(const void *src, int src_bf16, int64_t rows, int64_t cols,
                                    pgd_q4_mat dst, void *stream) {
    int rc = check_form("4-bit weights from f32 / bf16", rows, cols, dst);
    if (rc || rows == 0) return rc;
    if ((uintptr_t)src & (src_bf16 ? 1 : 3))
        return pgd_error_set(PGD_EINVAL, "4-bit weights: the source values are misaligned");
    const uint64_t n_blocks = (uint64_t)rows * (uint64_t)cols / kBlock;
    const unsigned grid = pgd_cuda_grid(n_blocks, PGD_CUDA_THREADS);
    if (src_bf16)
        quantize_kernel<uint16_t><<<grid, PGD_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            (const uint16_t *)src, n_blocks, dst.q, dst.dm);
    else
        quantize_kernel<float><<<grid, PGD_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            (const float *)src, n_blocks, dst.q, dst.dm);
    PGD_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pgd_cuda_q4_embed(pgd_q4_mat table, const int32_t *tokens, uint32_t T, uint32_t E,
                                 float *x, void *stream) {
    int rc = check_form("4-bit embedding", T, E, table);
    if (rc || T == 0) return rc;
    const uint64_t n = (uint64_t)T * E;
    PGD_CUDA_TRY(pgd_cuda_launch(embed_kernel, pgd_cuda_grid(n, PGD_CUDA_THREADS), PGD_CUDA_THREADS,
                                 0, stream, (const uint8_t *)table.q, (const uint32_t *)table.dm,
                                 tokens, T, E, x));
    return 0;
}

extern "C" int pgd_cuda_q4_rows_bf16(pgd_q4_mat W, uint64_t row0, uint32_t rows, uint32_t K,
                                     uint16_t *out, void *stream) {
    int rc = check_form("4-bit weights to bf16", rows, K, W);
    if (rc || rows == 0) return rc;
    if ((uintptr_t)out & 15)
        return pgd_error_set(PGD_EINVAL,
                             "4-bit weights to bf16: the output is not 16-byte aligned");
    const uint64_t n = (uint64_t)rows * (K / 8);
    PGD_CUDA_TRY(pgd_cuda_launch(rows_bf16_kernel, pgd_cuda_grid(n, PGD_CUDA_THREADS),
                                 PGD_CUDA_THREADS, 0, stream, (const uint8_t *)W.q,
                                 (const uint32_t *)W.dm, row0, rows, K, out));
    return 0;
}
