/*
 * kernels/cuda/q8.h — weights in 8 bits on the GPU (--gpu-weights q8_0): the device form of a
 * matrix, and the kernels that make it and read it outside the products (the products:
 * gemv_q8.h for few rows, gemm_grouped.h's _q8 forms for more rows and for experts).
 *
 * THE FORM: a matrix W [N][K] (K a multiple of PGD_Q8_BLOCK) in two planes, the values of GGUF's
 * Q8_0 blocks pulled apart so that a row of values is one contiguous, 16-byte-loadable run:
 *   q: int8  [N][K]          the values
 *   d: uint16 [N][K / 32]    each block's scale, IEEE half bits
 *   W[n][k] = f16(d[n][k / 32]) * q[n][k]      (exact in f32: 11 x 8 significant bits)
 * A stack of NE such matrices (experts) is q [NE][N][K] and d [NE][N][K / 32], each contiguous.
 * q's base is 16-byte aligned (so is every row: K % 32 == 0); d's rows are K / 16 bytes apart,
 * 2-byte aligned only in general (K = 896: 56 bytes).
 *
 * Where the values come from (pgd_cuda_q8_split / _quantize): a Q8_0 tensor's blocks as they are;
 * every other type through f32 (pgd_cuda_dequant) and the CPU backend's own requantization,
 * pgd_quantize_row_q8_0 (kernels/cpu/quant.h) bit for bit — per block of 32, d = f16(max|x| /
 * 127), q = x * (1 / d) rounded half away from zero — so a K-quant model's 8-bit weights on the
 * GPU are the ones the CPU backend would make of it.
 *
 * Device pointers; asynchronous on `stream`; 0, PGD_EINVAL (shape, alignment) or PGD_ECUDA.
 * Threading: the thread that owns the stream.
 */
#ifndef PGD_KERNELS_CUDA_Q8_H
#define PGD_KERNELS_CUDA_Q8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_Q8_BLOCK 32

/* A matrix (or a stack of experts) in THE FORM. */
typedef struct pgd_q8_mat {
    int8_t *q;   /* [N][K] (experts: [NE][N][K]) */
    uint16_t *d; /* [N][K / 32] half bits */
} pgd_q8_mat;

/* The bytes of THE FORM of a [rows][cols] matrix: rows * cols * 17 / 16. */
static inline uint64_t pgd_q8_bytes(uint64_t rows, uint64_t cols) {
    return rows * cols + rows * (cols / PGD_Q8_BLOCK) * 2;
}

/* Rows [0, rows) of GGUF Q8_0 blocks (src: [rows][cols / 32] blocks of 34 bytes: d, then 32
 * values) into THE FORM's rows [0, rows) of dst. */
int pgd_cuda_q8_split(const void *src, int64_t rows, int64_t cols, pgd_q8_mat dst, void *stream);

/* Rows of f32 (src_bf16 0) or bf16 (1) values [rows][cols] requantized into dst's rows [0,
 * rows): pgd_quantize_row_q8_0's bits. */
int pgd_cuda_q8_quantize(const void *src, int src_bf16, int64_t rows, int64_t cols, pgd_q8_mat dst,
                         void *stream);

/* The embedding of T tokens from a table in THE FORM [V][E]: x[t][e] = W[tokens[t]][e] (f32,
 * exact), the bits pgd_cuda_embed gives from the same values in bf16 where they are bf16. */
int pgd_cuda_q8_embed(pgd_q8_mat table, const int32_t *tokens, uint32_t T, uint32_t E, float *x,
                      void *stream);

/* Rows [row0, row0 + rows) of W [N][K] in THE FORM into bf16 out [rows][K] (16-byte aligned):
 * each value f16(d) * q in f32, rounded once to bf16 (to nearest even, as pgd_f32_to_bf16): the
 * values --gpu-weights bf16 holds of the same blocks. gemm.h's products of many rows read them. */
int pgd_cuda_q8_rows_bf16(pgd_q8_mat W, uint64_t row0, uint32_t rows, uint32_t K, uint16_t *out,
                          void *stream);

#ifdef __cplusplus
}
#endif

#endif
