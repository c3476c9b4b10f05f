/*
 * kernels/cuda/dequant.cu — GPU row dequantization to f32 and bf16. Owns nothing; pure kernels.
 *
 * One thread per output element in a grid-stride loop over n_rows * n_cols with 64-bit indices
 * (any number of rows: Llama-3's embedding has 128,256). Blocks are read with byte loads (GGUF
 * rows are only byte-aligned).
 *
 * Invariants: each element is computed with kernels/cpu/quant.c's arithmetic — the same
 * products and sums in the same order, each rounded once (__fmul_rn / __fadd_rn / __fsub_rn, so
 * nvcc cannot contract them into an FMA) — so the f32 result equals pgd_dequant_row bit for bit,
 * and the bf16 result equals pgd_f32_to_bf16 of it (pgd_dev_f32_to_bf16).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
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

/* (d * sc) * q - (m * mn): the K-quants' affine step, every operation rounded. */
__device__ float affine_k(float d, int sc, int q, float m, int mn) {
    return __fsub_rn(__fmul_rn(__fmul_rn(d, (float)sc), (float)q), __fmul_rn(m, (float)mn));
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block (scale_min_k4). */
__device__ void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element e (0..255) of a K-quant super-block at blk; quant.c's dq_q*_K per element. */
__device__ float dequant_k(uint32_t type, const uint8_t *blk, int e) {
    const int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
    switch (type) {
    case PGD_TYPE_Q2_K: { /* scales[16], qs[64], d, dmin */
        const int q = (blk[16 + h * 32 + l] >> (2 * s)) & 3, sc = blk[e >> 4];
        return affine_k(load_f16(blk + 80), sc & 0x0f, q, load_f16(blk + 82), sc >> 4);
    }
    case PGD_TYPE_Q3_K: { /* hmask[32], qs[64], scales[12], d */
        const uint8_t *sc = blk + 96;
        const int k = e >> 4;
        const int lo6 = (sc[k % 8] >> (4 * (k / 8))) & 0x0f;
        const int hi6 = (sc[8 + k % 4] >> (2 * (k / 4))) & 0x03;
        const float dl = __fmul_rn(load_f16(blk + 108), (float)((lo6 | (hi6 << 4)) - 32));
        const int lo = (blk[32 + h * 32 + l] >> (2 * s)) & 3;
        const int hbit = (blk[l] >> (e >> 5)) & 1;
        return __fmul_rn(dl, (float)(lo - ((hbit ^ 1) << 2)));
    }
    case PGD_TYPE_Q4_K:   /* d, dmin, scales[12], qs[128] */
    case PGD_TYPE_Q5_K: { /* d, dmin, scales[12], qh[32], qs[128] */
        const int j = e >> 5;
        int sc, mn;
        scale_min_k4(j, blk + 4, &sc, &mn);
        const uint8_t *qs = blk + (type == PGD_TYPE_Q4_K ? 16 : 48);
        int q = (qs[(j / 2) * 32 + l] >> (4 * (j & 1))) & 0x0f;
        if (type == PGD_TYPE_Q5_K) q |= ((blk[16 + l] >> j) & 1) << 4;
        return affine_k(load_f16(blk), sc, q, load_f16(blk + 2), mn);
    }
    case PGD_TYPE_Q6_K: { /* ql[128], qh[64], scales[16] (int8), d */
        const float ds = __fmul_rn(load_f16(blk + 208), (float)(int8_t)blk[192 + (e >> 4)]);
        const int lo = (blk[h * 64 + (s & 1) * 32 + l] >> (4 * (s >> 1))) & 0x0f;
        const int hi = (blk[128 + h * 32 + l] >> (2 * s)) & 3;
        return __fmul_rn(ds, (float)((lo | (hi << 4)) - 32));
    }
    default:
        return 0.0f;
    }
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
        return __fmul_rn((float)(int8_t)blk[2 + j], load_f16(blk));
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
    case PGD_TYPE_Q2_K:
    case PGD_TYPE_Q3_K:
    case PGD_TYPE_Q4_K:
    case PGD_TYPE_Q5_K:
    case PGD_TYPE_Q6_K: {
        const uint32_t type_size = type == PGD_TYPE_Q2_K   ? sizeof(pgd_block_q2_K)
                                   : type == PGD_TYPE_Q3_K ? sizeof(pgd_block_q3_K)
                                   : type == PGD_TYPE_Q4_K ? sizeof(pgd_block_q4_K)
                                   : type == PGD_TYPE_Q5_K ? sizeof(pgd_block_q5_K)
                                                           : sizeof(pgd_block_q6_K);
        return dequant_k(type, row + (e / PGD_QK_K) * type_size, (int)(e % PGD_QK_K));
    }
    default:
        return 0.0f;
    }
}

__device__ void store(float *dst, uint64_t i, float v) {
    dst[i] = v;
}
__device__ void store(uint16_t *dst, uint64_t i, float v) {
    dst[i] = pgd_dev_f32_to_bf16(v);
}

/* dst: Out [n_rows][n_cols] (float or bf16 bits); src: n_rows rows of row_bytes. Grid-stride
 * over the n_rows * n_cols elements. */
template <typename Out>
__global__ void dequant_kernel(uint32_t type, const uint8_t *src, uint64_t row_bytes, Out *dst,
                               uint64_t n_rows, uint64_t n_cols) {
    const uint64_t n = n_rows * n_cols, step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint64_t r = i / n_cols, c = i % n_cols;
        store(dst, i, dequant_elem(type, src + r * row_bytes, (int64_t)c));
    }
}

template <typename Out>
int dequant_launch(uint32_t type, const void *src, Out *dst, int64_t n_rows, int64_t n_cols,
                   void *stream) {
    if (!pgd_cuda_dequant_supported(type))
        return pgd_error_set(PGD_EUNSUPPORTED, "CUDA dequantization of type %u", type);
    uint64_t row_bytes;
    if (n_rows < 0 || n_cols < 0 || (n_rows > 0 && n_cols > INT64_MAX / n_rows) ||
        pgd_row_bytes(type, (uint64_t)n_cols, &row_bytes))
        return pgd_error_set(PGD_EINVAL, "CUDA dequantization: bad shape %lld x %lld",
                             (long long)n_rows, (long long)n_cols);
    if (n_rows == 0 || n_cols == 0) return 0;
    const uint64_t n = (uint64_t)n_rows * (uint64_t)n_cols;
    dequant_kernel<Out>
        <<<pgd_cuda_grid(n, PGD_CUDA_THREADS), PGD_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            type, (const uint8_t *)src, row_bytes, dst, (uint64_t)n_rows, (uint64_t)n_cols);
    PGD_CUDA_LAUNCHED();
    return 0;
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
    case PGD_TYPE_Q2_K:
    case PGD_TYPE_Q3_K:
    case PGD_TYPE_Q4_K:
    case PGD_TYPE_Q5_K:
    case PGD_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

extern "C" int pgd_cuda_dequant(uint32_t type, const void *src, float *dst, int64_t n_rows,
                                int64_t n_cols, void *stream) {
    return dequant_launch(type, src, dst, n_rows, n_cols, stream);
}

extern "C" int pgd_cuda_dequant_bf16(uint32_t type, const void *src, uint16_t *dst, int64_t n_rows,
                                     int64_t n_cols, void *stream) {
    return dequant_launch(type, src, dst, n_rows, n_cols, stream);
}

extern "C" int pgd_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}
