/*
 * kernels/cuda/dequant.cu — GPU row dequantization. One thread per output element; blocks are
 * read with byte loads (GGUF rows are only byte-aligned). Same arithmetic as the CPU reference:
 * d * q (+ m) in float32, no contraction across the two operations (__fmul_rn / __fadd_rn).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/dequant.h"

namespace {

__device__ float load_f16(const uint8_t *p) {
    __half_raw r;
    r.x = (unsigned short)(p[0] | (p[1] << 8));
    return __half2float(__half(r));
}

__device__ float load_bf16(const uint8_t *p) {
    return __uint_as_float((uint32_t)(p[0] | (p[1] << 8)) << 16);
}

/* Element e of a row whose blocks start at `row` (bytes). */
__device__ float dequant_elem(uint32_t type, const uint8_t *row, int64_t e) {
    const int64_t b = e / PGD_QK, j = e % PGD_QK;
    switch (type) {
    case PGD_TYPE_F32: {
        const uint8_t *p = row + 4 * e;
        return __uint_as_float((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                               ((uint32_t)p[3] << 24));
    }
    case PGD_TYPE_F16:
        return load_f16(row + 2 * e);
    case PGD_TYPE_BF16:
        return load_bf16(row + 2 * e);
    case PGD_TYPE_Q8_0: {
        const uint8_t *blk = row + b * sizeof(pgd_block_q8_0);
        return __fmul_rn(load_f16(blk), (float)(int8_t)blk[2 + j]);
    }
    case PGD_TYPE_Q4_0: {
        const uint8_t *blk = row + b * sizeof(pgd_block_q4_0);
        int q = j < 16 ? (blk[2 + j] & 0x0F) : (blk[2 + j - 16] >> 4);
        return __fmul_rn(load_f16(blk), (float)(q - 8));
    }
    case PGD_TYPE_Q4_1: {
        const uint8_t *blk = row + b * sizeof(pgd_block_q4_1);
        int q = j < 16 ? (blk[4 + j] & 0x0F) : (blk[4 + j - 16] >> 4);
        return __fadd_rn(__fmul_rn(load_f16(blk), (float)q), load_f16(blk + 2));
    }
    case PGD_TYPE_Q5_0: {
        const uint8_t *blk = row + b * sizeof(pgd_block_q5_0);
        uint32_t qh = blk[2] | (blk[3] << 8) | (blk[4] << 16) | ((uint32_t)blk[5] << 24);
        int lo = j < 16 ? (blk[6 + j] & 0x0F) : (blk[6 + j - 16] >> 4);
        int q = lo | (int)(((qh >> j) & 1) << 4);
        return __fmul_rn(load_f16(blk), (float)(q - 16));
    }
    case PGD_TYPE_Q5_1: {
        const uint8_t *blk = row + b * sizeof(pgd_block_q5_1);
        uint32_t qh = blk[4] | (blk[5] << 8) | (blk[6] << 16) | ((uint32_t)blk[7] << 24);
        int lo = j < 16 ? (blk[8 + j] & 0x0F) : (blk[8 + j - 16] >> 4);
        int q = lo | (int)(((qh >> j) & 1) << 4);
        return __fadd_rn(__fmul_rn(load_f16(blk), (float)q), load_f16(blk + 2));
    }
    default:
        return 0.0f;
    }
}

/* grid: (ceil(n_cols / blockDim.x), n_rows); dst: [n_rows][n_cols]. */
__global__ void dequant_kernel(uint32_t type, const uint8_t *src, uint64_t row_bytes, float *dst,
                               int64_t n_cols) {
    const int64_t r = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cols) return;
    dst[r * n_cols + c] = dequant_elem(type, src + r * row_bytes, c);
}

} // namespace

extern "C" bool pgd_cuda_dequant_supported(uint32_t type) {
    switch (type) {
    case PGD_TYPE_F32:
    case PGD_TYPE_F16:
    case PGD_TYPE_BF16:
    case PGD_TYPE_Q8_0:
    case PGD_TYPE_Q4_0:
    case PGD_TYPE_Q4_1:
    case PGD_TYPE_Q5_0:
    case PGD_TYPE_Q5_1:
        return true;
    default:
        return false;
    }
}

extern "C" int pgd_cuda_dequant(uint32_t type, const void *src, float *dst, int64_t n_rows,
                                int64_t n_cols, void *stream) {
    if (!pgd_cuda_dequant_supported(type))
        return pgd_error_set(PGD_EUNSUPPORTED, "CUDA dequantization of type %u", type);
    uint64_t row_bytes;
    if (n_rows < 0 || n_rows > 65535 || pgd_row_bytes(type, (uint64_t)n_cols, &row_bytes))
        return pgd_error_set(PGD_EINVAL, "CUDA dequantization: bad shape %lld x %lld",
                             (long long)n_rows, (long long)n_cols);
    if (n_rows == 0 || n_cols == 0) return 0;
    const int threads = 256;
    dim3 grid((unsigned)((n_cols + threads - 1) / threads), (unsigned)n_rows);
    dequant_kernel<<<grid, threads, 0, (cudaStream_t)stream>>>(type, (const uint8_t *)src,
                                                               row_bytes, dst, n_cols);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return pgd_error_set(PGD_ECUDA, "dequant kernel launch: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int pgd_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}
