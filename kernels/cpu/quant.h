/*
 * kernels/cpu/quant.h — tensor element types (GGUF/ggml numbering), their block layouts, and
 * row dequantization to f32 (the CPU reference that CUDA dequantization is checked against).
 *
 * Type ids are the on-disk GGUF ids. A "block" packs `block_size` elements into `type_size`
 * bytes; a row of n elements (n % block_size == 0) takes n / block_size * type_size bytes.
 * All block structs below are little-endian, packed exactly as on disk.
 *
 * Threading: pure functions, safe from any thread.
 */
#ifndef PGD_KERNELS_CPU_QUANT_H
#define PGD_KERNELS_CPU_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pgd_type {
    PGD_TYPE_F32 = 0,
    PGD_TYPE_F16 = 1,
    PGD_TYPE_Q4_0 = 2,
    PGD_TYPE_Q4_1 = 3,
    PGD_TYPE_Q5_0 = 6,
    PGD_TYPE_Q5_1 = 7,
    PGD_TYPE_Q8_0 = 8,
    PGD_TYPE_Q8_1 = 9,
    PGD_TYPE_Q2_K = 10,
    PGD_TYPE_Q3_K = 11,
    PGD_TYPE_Q4_K = 12,
    PGD_TYPE_Q5_K = 13,
    PGD_TYPE_Q6_K = 14,
    PGD_TYPE_Q8_K = 15,
    PGD_TYPE_IQ2_XXS = 16,
    PGD_TYPE_IQ2_XS = 17,
    PGD_TYPE_IQ3_XXS = 18,
    PGD_TYPE_IQ1_S = 19,
    PGD_TYPE_IQ4_NL = 20,
    PGD_TYPE_IQ3_S = 21,
    PGD_TYPE_IQ2_S = 22,
    PGD_TYPE_IQ4_XS = 23,
    PGD_TYPE_I8 = 24,
    PGD_TYPE_I16 = 25,
    PGD_TYPE_I32 = 26,
    PGD_TYPE_I64 = 27,
    PGD_TYPE_F64 = 28,
    PGD_TYPE_IQ1_M = 29,
    PGD_TYPE_BF16 = 30,
    PGD_TYPE_TQ1_0 = 34,
    PGD_TYPE_TQ2_0 = 35,
    PGD_TYPE_MXFP4 = 39,
    PGD_TYPE__MAX = 40 /* ids >= this are unknown */
} pgd_type;

typedef struct pgd_type_traits {
    const char *name;    /* "Q4_1" */
    uint32_t block_size; /* elements per block */
    uint32_t type_size;  /* bytes per block */
    bool can_dequant;    /* pgd_dequant_row supports it */
} pgd_type_traits;

/* Traits of a type id, or NULL when the id is not a known type (including retired ids). */
const pgd_type_traits *pgd_type_info(uint32_t type);

/* Bytes taken by a row of n elements of `type` into *out. PGD_EINVAL if the type is unknown or
 * n is not a multiple of the block size; PGD_ERANGE on overflow. */
int pgd_row_bytes(uint32_t type, uint64_t n, uint64_t *out);

/* Dequantize n elements (a multiple of the block size) starting at `src` into dst[n].
 * Returns PGD_EUNSUPPORTED for known types without a dequantizer (traits.can_dequant false),
 * PGD_EINVAL for an unknown type id or a bad n. `src` may have any alignment. */
int pgd_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* IEEE half <-> float and bfloat16 -> float, exact. */
float pgd_f16_to_f32(uint16_t h);
uint16_t pgd_f32_to_f16(float f); /* round to nearest even */
float pgd_bf16_to_f32(uint16_t h);
uint16_t pgd_f32_to_bf16(float f); /* round to nearest even; NaN stays a (quiet) NaN */

/* Requantize n elements of f32 (a multiple of 32) into n / 32 Q8_0 blocks at dst (any
 * 2-byte alignment): per block, d = f16(max|x| / 127), q = x * (1 / d) rounded half away from zero
 * (0 where d is 0) — in f32, each operation rounded once. The model loader's conversion of the
 * types the CPU does not keep, and the GPU's 8-bit weights (kernels/cuda/q8.h), bit for bit. */
void pgd_quantize_row_q8_0(const float *x, void *dst, int64_t n);

/* Quantize n elements of f32 (a multiple of 32) into n / 32 Q4_1 blocks at dst (any 2-byte
 * alignment): per block, lo = min x and hi = max x (the first of equal values; comparisons
 * only), d = (hi - lo) / 15, id = 1 / d (0 where d is 0), q = min(15, trunc((x - lo) * id +
 * 0.5)) (0 where that is NaN), stored d = f16(d), m = f16(lo) — in f32, each operation rounded
 * once. The GPU's 4-bit form of dummy weights and of matrices with no exact 4-bit blocks
 * (kernels/cuda/q4.h), bit for bit. */
void pgd_quantize_row_q4_1(const float *x, void *dst, int64_t n);

/* ---- re-blocking K-quants into 32-blocks (no requantization) ----
 * A Q4_K (Q5_K) super-block of 256 is eight groups of 32 values, group j holding
 *   y = (d·sc_j)·q − (dmin·m_j),  d, dmin f16, sc_j, m_j 6-bit, q 4-bit (5-bit);
 * a Q4_1 (Q5_1) block is y = d'·q + m'. So group j becomes one block with the same q's and
 *   d' = f16(d·sc_j),  m' = f16(−(dmin·m_j)).
 * d·sc_j and dmin·m_j are exact in f32 (11 + 6 significant bits), so each of d', m' is rounded
 * once: |d' − d·sc_j| ≤ max(2^-11·|d·sc_j|, 2^-25) (half an f16 ulp, normal or subnormal range),
 * likewise m'. Per element then |y' − y| ≤ q·|d' − d·sc_j| + |m' − dmin·m_j|, plus the f32
 * rounding of the two dequantizers (one each). */

/* The 32-block type `from` re-blocks to into *to: Q4_1 for Q4_K, Q5_1 for Q5_K. False (and *to
 * untouched) for every other type. */
bool pgd_reblock_type(uint32_t from, uint32_t *to);

/* Re-blocks n elements (a multiple of 256) of Q4_K / Q5_K at src into dst (n / 32 blocks of
 * pgd_reblock_type's type). src and dst may have any alignment and must not overlap. Returns 0,
 * PGD_EINVAL (type without re-blocking, bad n), or PGD_ERANGE when a finite d·sc_j or dmin·m_j
 * is beyond the f16 range (dst then holds infinities there: convert some other way). */
int pgd_reblock_row(uint32_t from, const void *src, void *dst, int64_t n);

/* ---- block layouts (on-disk) ---- */
#define PGD_QK           32  /* elements per block of the 32-blocks */
#define PGD_QK_K         256 /* elements per super-block of the K-quants */
#define PGD_K_SCALE_SIZE 12

typedef struct {
    uint16_t d;
    uint8_t qs[PGD_QK / 2];
} pgd_block_q4_0; /* 18 B */
typedef struct {
    uint16_t d, m;
    uint8_t qs[PGD_QK / 2];
} pgd_block_q4_1; /* 20 B */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[PGD_QK / 2];
} pgd_block_q5_0; /* 22 B */
typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[PGD_QK / 2];
} pgd_block_q5_1; /* 24 */
typedef struct {
    uint16_t d;
    int8_t qs[PGD_QK];
} pgd_block_q8_0; /* 34 B */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[PGD_K_SCALE_SIZE];
    uint8_t qs[PGD_QK_K / 2];
} pgd_block_q4_K; /* 144 B */
typedef struct {
    uint8_t ql[PGD_QK_K / 2];
    uint8_t qh[PGD_QK_K / 4];
    int8_t scales[PGD_QK_K / 16];
    uint16_t d;
} pgd_block_q6_K; /* 210 B */
typedef struct {
    uint8_t scales[PGD_QK_K / 16]; /* low nibble: scale, high nibble: min */
    uint8_t qs[PGD_QK_K / 4];
    uint16_t d, dmin;
} pgd_block_q2_K; /* 84 B */
typedef struct {
    uint8_t hmask[PGD_QK_K / 8];
    uint8_t qs[PGD_QK_K / 4];
    uint8_t scales[PGD_K_SCALE_SIZE];
    uint16_t d;
} pgd_block_q3_K; /* 110 B */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[PGD_K_SCALE_SIZE];
    uint8_t qh[PGD_QK_K / 8];
    uint8_t qs[PGD_QK_K / 2];
} pgd_block_q5_K; /* 176 B */

#ifdef __cplusplus
}
#endif

#endif
