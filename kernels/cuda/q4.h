/*
 * kernels/cuda/q4.h — weights in 4 bits on the GPU (--gpu-weights q4): the device form of a
 * matrix, the host's conversion of a file's 4-bit blocks into GGUF Q4_1 blocks, and the kernels
 * that make the form and read it outside the products (the products: gemv_q4.h for few rows,
 * gemm_grouped.h's _q4 forms for more rows and for experts).
 *
 * THE FORM: a matrix W [N][K] (K a multiple of PGD_Q4_BLOCK) in two planes, the parts of GGUF's
 * Q4_1 blocks pulled apart so that a row's values are one contiguous, 16-byte-loadable run:
 *   q:  uint8  [N][K / 2]     the values, 4 bits each, in GGUF's order within a block of 32:
 *                             byte j (0..15) of block b holds element 32b + j in its low nibble
 *                             and element 32b + j + 16 in its high nibble
 *   dm: uint32 [N][K / 32]    each block's scale d (low 16 bits) and offset m (high 16 bits),
 *                             IEEE half bits: a Q4_1 block's first 4 bytes as they are
 *   W[n][k] = f16(d) * q + f16(m)      (q in 0..15; d, m of block k / 32 of row n)
 * A stack of NE such matrices (experts) is q [NE][N][K / 2] and dm [NE][N][K / 32], each
 * contiguous. q's base is 16-byte aligned (so is every row: K % 32 == 0), dm's 4-byte aligned.
 * 0.625 bytes a weight: 5/16 of bf16's.
 *
 * Where the values come from: GGUF Q4_1 blocks as they are (pgd_cuda_q4_split); Q4_0 and Q4_K
 * through pgd_q4_blocks (on the host) first — a Q4_0 block is y = d (q - 8), so m = -8 d,
 * exact; a Q4_K super-block's eight groups of 32 re-block as the CPU backend re-blocks them
 * (pgd_reblock_row, kernels/cpu/quant.h), so the GPU's 4-bit weights of a Q4_K file are the CPU
 * backend's, bit for bit; dummy weights (and any matrix pgd_q4_blocks refuses) from their
 * values by pgd_quantize_row_q4_1 (kernels/cpu/quant.h), bit for bit (pgd_cuda_q4_quantize).
 *
 * Device pointers unless said; asynchronous on `stream`; 0, PGD_EINVAL (shape, alignment) or
 * PGD_ECUDA. Threading: the thread that owns the stream (pgd_q4_blocks: any thread).
 */
#ifndef PGD_KERNELS_CUDA_Q4_H
#define PGD_KERNELS_CUDA_Q4_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_Q4_BLOCK       32
#define PGD_Q4_BLOCK_BYTES 20 /* a GGUF Q4_1 block: d, m (half bits), 16 bytes of values */

/* A matrix (or a stack of experts) in THE FORM. */
typedef struct pgd_q4_mat {
    uint8_t *q;   /* [N][K / 2] (experts: [NE][N][K / 2]) */
    uint32_t *dm; /* [N][K / 32]: d | m << 16, half bits */
} pgd_q4_mat;

/* The bytes of THE FORM of a [rows][cols] matrix: rows * cols * 5 / 8. */
static inline uint64_t pgd_q4_bytes(uint64_t rows, uint64_t cols) {
    return rows * cols / 2 + rows * (cols / PGD_Q4_BLOCK) * 4;
}

/* Whether a GGUF tensor of `type` (kernels/cpu/quant.h's PGD_TYPE_*) takes THE FORM with no
 * requantization: Q4_0, Q4_1, Q4_K. */
bool pgd_q4_type_exact(uint32_t type);

/* Host: n elements (a multiple of 32; of 256 for Q4_K) of a Q4_0, Q4_1 or Q4_K row at src into
 * n / 32 GGUF Q4_1 blocks at dst (any alignment; no overlap). 0; PGD_EINVAL (another type, bad
 * n); PGD_ERANGE where a scale or offset is beyond f16's range (dst undefined: requantize the
 * values instead). */
int pgd_q4_blocks(uint32_t type, const void *src, void *dst, int64_t n);

/* Rows [0, rows) of GGUF Q4_1 blocks (src: [rows][cols / 32] blocks of 20 bytes, any alignment)
 * into THE FORM's rows [0, rows) of dst. */
int pgd_cuda_q4_split(const void *src, int64_t rows, int64_t cols, pgd_q4_mat dst, void *stream);

/* Rows of f32 (src_bf16 0) or bf16 (1) values [rows][cols] quantized into dst's rows [0, rows):
 * pgd_quantize_row_q4_1's bits. */
int pgd_cuda_q4_quantize(const void *src, int src_bf16, int64_t rows, int64_t cols, pgd_q4_mat dst,
                         void *stream);

/* The embedding of T tokens from a table in THE FORM [V][E]: x[t][e] = fmaf(f16(d), q, f16(m))
 * of W[tokens[t]][e] (f32, one rounding). */
int pgd_cuda_q4_embed(pgd_q4_mat table, const int32_t *tokens, uint32_t T, uint32_t E, float *x,
                      void *stream);

/* Rows [row0, row0 + rows) of W [N][K] in THE FORM into bf16 out [rows][K] (16-byte aligned):
 * each value fmaf(f16(d), q, f16(m)) in f32, rounded once to bf16 (to nearest even, as
 * pgd_f32_to_bf16): the values --gpu-weights bf16 holds of the same blocks. gemm.h's products of
 * many rows read them. */
int pgd_cuda_q4_rows_bf16(pgd_q4_mat W, uint64_t row0, uint32_t rows, uint32_t K, uint16_t *out,
                          void *stream);

#ifdef __cplusplus
}
#endif

#endif
