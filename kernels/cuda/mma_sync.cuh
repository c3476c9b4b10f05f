/*
 * kernels/cuda/mma_sync.cuh — the warp-level tensor-core instructions the kernels use with their
 * register layouts spelled out (PTX's mma.sync.m16n8k16 with f16 or bf16 inputs and f32
 * accumulators, and ldmatrix, compute capability 8.0 and later), unlike nvcuda::wmma, whose
 * fragments are opaque: a kernel can then work on a product's elements in registers
 * (attention_tc.cu's softmax) and hand them to the next product without a trip through shared
 * memory.
 *
 * The layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane L of the warp, g = L / 4
 * and c = L % 4 (bf16 operands the same, two bf16 a register in place of two f16):
 *   A (16 x 16, row major), 4 registers of two f16 each, the lower half first:
 *     a[0] = A[g][2c, 2c+1]   a[1] = A[g+8][2c, 2c+1]
 *     a[2] = A[g][2c+8, +9]   a[3] = A[g+8][2c+8, +9]
 *   B (16 x 8, "col": element (k, n)), 2 registers:
 *     b[0] = B[2c, 2c+1][g]   b[1] = B[2c+8, 2c+9][g]
 *   C and D (16 x 8, f32):
 *     d[0], d[1] = D[g][2c, 2c+1]   d[2], d[3] = D[g+8][2c, 2c+1]
 * So the accumulators of two neighbouring 16 x 8 products (columns 0-7, then 8-15) rounded to
 * f16 and paired are exactly the A registers of a 16 x 16 operand (pgd_mma_pack).
 *   ldmatrix .x4: four 8 x 8 matrices of 16-bit elements, matrix i's row r at the address lane
 *     8i + r gives (16-byte aligned, shared memory). Register i of lane L = matrix i's row g,
 *     elements 2c and 2c + 1; with .trans, matrix i's elements (2c, g) and (2c + 1, g).
 *
 * On a machine without a GPU the emulator (tests/cuda_emu) compiles the kernels with its own
 * versions of these functions (same names, same layouts, computed by the 32 emulated lanes
 * together), which is how the layouts above are tested without hardware.
 *
 * Threading: warp-collective: all 32 lanes of the warp call each function together.
 */
#ifndef PGD_KERNELS_CUDA_MMA_SYNC_CUH
#define PGD_KERNELS_CUDA_MMA_SYNC_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#if defined(__CUDACC__)

/* r[0..3] <- four 8 x 8 matrices from shared memory; p: this lane's row (see above). */
static __device__ __forceinline__ void pgd_ldmatrix_x4(uint32_t r[4], const __half *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* The same, each matrix transposed. */
static __device__ __forceinline__ void pgd_ldmatrix_x4_trans(uint32_t r[4], const __half *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* d[4] += A (a[4]) x B (b0, b1): one 16 x 8 x 16 product, f16 in, f32 accumulation. */
static __device__ __forceinline__ void pgd_mma_16816(float d[4], const uint32_t a[4], uint32_t b0,
                                                     uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The same with bf16 inputs (f32 accumulation; the grouped GEMM, gemm_grouped.cu). ldmatrix
 * moves 16-bit elements whatever their type: bf16 rows are read through an __half pointer. */
static __device__ __forceinline__ void pgd_mma_16816_bf16(float d[4], const uint32_t a[4],
                                                          uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#else
#include "mma_sync_emu.h" /* tests/cuda_emu/inc: the emulator's versions */
#endif

/* Two f32 rounded to f16 (nearest even) in one register, lo in the lower half. */
static __device__ __forceinline__ uint32_t pgd_mma_pack(float lo, float hi) {
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) |
           (uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16;
}

#endif
