/*
 * kernels/cuda/q8.cu — weights in 8 bits (q8.h's THE FORM): made from GGUF Q8_0 blocks or from
 * f32 / bf16 values at load, and the embedding gather from them in a step. Owns nothing.
 * CPU twins: the split and the gather are copies and a product exact in f32; the quantization
 * is pgd_quantize_row_q8_0 (kernels/cpu/quant.h), bit for bit (tests/gpu/test_cuda_q8.c).
 *
 * Grids: one thread per block of 32 values (split, quantize) or per element (embed), in
 * grid-stride loops with 64-bit indices. The split reads the 34-byte blocks with byte loads (a
 * GGUF row is only byte-aligned) and writes a block's 32 values as two 16-byte stores.
 *
 * Invariants: the quantization computes what pgd_quantize_row_q8_0 does in the same order, each
 * operation rounded once (__fdiv_rn / __fmul_rn / __fadd_rn / __fsub_rn: nvcc cannot contract
 * them into an FMA), and rounds d to half by round-to-nearest-even as pgd_f32_to_f16 does.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/q8.h"

namespace {

constexpr uint32_t kBlock = PGD_Q8_BLOCK, kBlockBytes = 2 + kBlock; /* a GGUF Q8_0 block */

/* 32 int8 values (a block) as two 16-byte stores; dst 16-byte aligned. */
__device__ __forceinline__ void store_block(int8_t *dst, const int8_t (&v)[kBlock]) {
    uint32_t w[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        w[i] = (uint32_t)(uint8_t)v[4 * i] | (uint32_t)(uint8_t)v[4 * i + 1] << 8 |
               (uint32_t)(uint8_t)v[4 * i + 2] << 16 | (uint32_t)(uint8_t)v[4 * i + 3] << 24;
    uint4 *o = reinterpret_cast<uint4 *>(dst), lo, hi;
    lo.x = w[0], lo.y = w[1], lo.z = w[2], lo.w = w[3];
    hi.x = w[4], hi.y = w[5], hi.z = w[6], hi.w = w[7];
    o[0] = lo;
    o[1] = hi;
}

/* src: n_blocks GGUF Q8_0 blocks (34 bytes each, any alignment); q: int8 [n_blocks][32];
 * d: half bits [n_blocks]. Rows are contiguous in both, so block i is block i of both. */
__global__ void split_kernel(const uint8_t *src, uint64_t n_blocks, int8_t *q, uint16_t *d) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_blocks; i += step) {
        const uint8_t *b = src + i * kBlockBytes;
        int8_t v[kBlock];
#pragma unroll
        for (uint32_t j = 0; j < kBlock; j++) v[j] = (int8_t)b[2 + j];
        d[i] = (uint16_t)(b[0] | b[1] << 8);
        store_block(q + i * kBlock, v);
    }
}

/* src: In [n_blocks][32] (f32 or bf16 bits); q, d as split_kernel's. pgd_quantize_row_q8_0's
 * arithmetic: d = max|x| / 127, id = 1 / d (0 when d is), q = trunc(x * id -+ 0.5). */
template <typename In>
__global__ void quantize_kernel(const In *src, uint64_t n_blocks, int8_t *q, uint16_t *d) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_blocks; i += step) {
        float x[kBlock], amax = 0.0f;
#pragma unroll
        for (uint32_t j = 0; j < kBlock; j++) {
            x[j] = pgd_dev_load_f32(src, i * kBlock + j);
            const float a = x[j] < 0 ? -x[j] : x[j];
            if (a > amax) amax = a;
        }
        const float dv = __fdiv_rn(amax, 127.0f), id = dv != 0.0f ? __fdiv_rn(1.0f, dv) : 0.0f;
        d[i] = __half_as_ushort(__float2half_rn(dv));
        int8_t v[kBlock];
#pragma unroll
        for (uint32_t j = 0; j < kBlock; j++) {
            const float s = __fmul_rn(x[j], id);
            v[j] = (int8_t)(int)(s < 0 ? __fsub_rn(s, 0.5f) : __fadd_rn(s, 0.5f));
        }
        store_block(q + i * kBlock, v);
    }
}

/* x: f32 [T][E] = table[tokens[t]][e] = f16(d) * q, exact. */
__global__ void embed_kernel(const int8_t *q, const uint16_t *d, const int32_t *tokens, uint32_t T,
                             uint32_t E, float *x) {
    pgd_dev_pdl_enter();
    const uint64_t n = (uint64_t)T * E, step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t t = i / E, e = i % E, row = (uint64_t)tokens[t];
        const float s = __half2float(__ushort_as_half(d[row * (E / kBlock) + e / kBlock]));
        x[i] = __fmul_rn(s, (float)q[row * E + e]);
    }
}

/* out: bf16 [rows][K] = bf16(f16(d) * q) of W's rows [row0, row0 + rows), 8 values a thread
 * (one 8-byte load of values, one 16-byte store; lanes on consecutive runs of a row). */
__global__ void rows_bf16_kernel(const int8_t *q, const uint16_t *d, uint64_t row0, uint32_t rows,
                                 uint32_t K, uint16_t *out) {
    pgd_dev_pdl_enter();
    const uint32_t per_row = K / 8;
    const uint64_t n = (uint64_t)rows * per_row, step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t row = row0 + i / per_row;
        const uint32_t k0 = (uint32_t)(i % per_row) * 8;
        const float s = __half2float(__ushort_as_half(d[row * (K / kBlock) + k0 / kBlock]));
        const uint2 v = *reinterpret_cast<const uint2 *>(q + row * K + k0);
        float f[8];
#pragma unroll
        for (int e = 0; e < 8; e++)
            f[e] = __fmul_rn(s, (float)(int8_t)((e < 4 ? v.x : v.y) >> 8 * (e % 4)));
        pgd_dev_store_bf16x8(out + i * 8, f);
    }
}

/* The shape checks every entry shares: rows >= 0, cols a multiple of 32 (>= 32 when rows > 0),
 * q 16-byte and d 2-byte aligned. */
int check_form(const char *what, int64_t rows, int64_t cols, pgd_q8_mat m) {
    if (rows < 0 || cols <= 0 || cols % kBlock || (rows > 0 && cols > INT64_MAX / rows))
        return pgd_error_set(PGD_EINVAL, "%s: bad shape %lld x %lld (columns a multiple of %u)",
                             what, (long long)rows, (long long)cols, kBlock);
    if (((uintptr_t)m.q & 15) || ((uintptr_t)m.d & 1))
        return pgd_error_set(PGD_EINVAL, "%s: values not 16-byte or scales not 2-byte aligned",
                             what);
    return 0;
}

} // namespace

extern "C" int pgd_cuda_q8_split(const void *src, int64_t rows, int64_t cols, pgd_q8_mat dst,
                                 void *stream) {
    int rc = check_form("8-bit weights from Q8_0", rows, cols, dst);
    if (rc || rows == 0) return rc;
    const uint64_t n_blocks = (uint64_t)rows * (uint64_t)cols / kBlock;
    split_kernel<<<pgd_cuda_grid(n_blocks, PGD_CUDA_THREADS), PGD_CUDA_THREADS, 0,
                   (cudaStream_t)stream>>>((const uint8_t *)src, n_blocks, dst.q, dst.d);
    PGD_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pgd_cuda_q8_quantize(const void *src, int src_bf16, int64_t rows, int64_t cols,
                                    pgd_q8_mat dst, void *stream) {
    int rc = check_form("8-bit weights from f32 / bf16", rows, cols, dst);
    if (rc || rows == 0) return rc;
    if ((uintptr_t)src & (src_bf16 ? 1 : 3))
        return pgd_error_set(PGD_EINVAL, "8-bit weights: the source values are misaligned");
    const uint64_t n_blocks = (uint64_t)rows * (uint64_t)cols / kBlock;
    const unsigned grid = pgd_cuda_grid(n_blocks, PGD_CUDA_THREADS);
    if (src_bf16)
        quantize_kernel<uint16_t><<<grid, PGD_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            (const uint16_t *)src, n_blocks, dst.q, dst.d);
    else
        quantize_kernel<float><<<grid, PGD_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            (const float *)src, n_blocks, dst.q, dst.d);
    PGD_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pgd_cuda_q8_embed(pgd_q8_mat table, const int32_t *tokens, uint32_t T, uint32_t E,
                                 float *x, void *stream) {
    int rc = check_form("8-bit embedding", T, E, table);
    if (rc || T == 0) return rc;
    const uint64_t n = (uint64_t)T * E;
    PGD_CUDA_TRY(pgd_cuda_launch(embed_kernel, pgd_cuda_grid(n, PGD_CUDA_THREADS), PGD_CUDA_THREADS,
                                 0, stream, (const int8_t *)table.q, (const uint16_t *)table.d,
                                 tokens, T, E, x));
    return 0;
}

extern "C" int pgd_cuda_q8_rows_bf16(pgd_q8_mat W, uint64_t row0, uint32_t rows, uint32_t K,
                                     uint16_t *out, void *stream) {
    int rc = check_form("8-bit weights to bf16", rows, K, W);
    if (rc || rows == 0) return rc;
    if ((uintptr_t)out & 15)
        return pgd_error_set(PGD_EINVAL,
                             "8-bit weights to bf16: the output is not 16-byte aligned");
    const uint64_t n = (uint64_t)rows * (K / 8);
    PGD_CUDA_TRY(pgd_cuda_launch(rows_bf16_kernel, pgd_cuda_grid(n, PGD_CUDA_THREADS),
                                 PGD_CUDA_THREADS, 0, stream, (const int8_t *)W.q,
                                 (const uint16_t *)W.d, row0, rows, K, out));
    return 0;
}
