/* Emulator: kernels/cuda/mma_sync.cuh's warp-level tensor-core functions (ldmatrix .x4 and
 * mma.sync.m16n8k16, f16 or bf16 in, f32 accumulation) computed by the 32 emulated lanes together,
 * in the register layouts of the PTX ISA that mma_sync.cuh writes down. Each call is a warp
 * collective: every lane posts its operands (registers, or its row's address) in the warp's slots,
 * the warp meets (a __syncwarp), each lane builds its own results from the others' posts, and the
 * warp meets again before the slots can be reused. So a kernel that reads a product's elements at
 * the wrong lane or register, or builds an operand in the wrong layout, gets wrong numbers here as
 * on a GPU. Products of f16 values, and of bf16 ones, are exact in f32; the sums are f32 in
 * increasing k, then the accumulator (a GPU's tensor cores sum in their own order and precision:
 * tests compare within a tolerance). */
#pragma once
#include <cstdint>
#include <cstring>

#include "cuda_fp16.h"
#include "cuda_runtime.h"

struct emu_mma_post {
    uint32_t a[4], b[2];
    const __half *p;
};

/* This warp's 32 slots (CTAs run one at a time on a thread, so one set per warp index). */
inline emu_mma_post *emu_mma_posts() {
    static thread_local emu_mma_post posts[32][32];
    return posts[emu_cur->warp % 32];
}

inline float emu_mma_half(uint32_t r, int hi) {
    return _cvtsh_ss((unsigned short)(hi ? r >> 16 : r & 0xffffu));
}

template <bool Trans> inline void emu_ldmatrix_x4(uint32_t r[4], const __half *p) {
    if ((uintptr_t)p % 16) emu_error("ldmatrix: row address %p is not 16-byte aligned", p);
    emu_mma_post *w = emu_mma_posts();
    const unsigned lane = emu_cur->lane, g = lane / 4, c = lane % 4;
    w[lane].p = p;
    __syncwarp();
    for (unsigned i = 0; i < 4; i++) {
        unsigned short lo, hi;
        if (!Trans) { /* row g, elements 2c, 2c + 1 */
            std::memcpy(&lo, w[8 * i + g].p + 2 * c, 2);
            std::memcpy(&hi, w[8 * i + g].p + 2 * c + 1, 2);
        } else { /* elements (2c, g), (2c + 1, g) */
            std::memcpy(&lo, w[8 * i + 2 * c].p + g, 2);
            std::memcpy(&hi, w[8 * i + 2 * c + 1].p + g, 2);
        }
        r[i] = (uint32_t)lo | (uint32_t)hi << 16;
    }
    __syncwarp();
}

inline void pgd_ldmatrix_x4(uint32_t r[4], const __half *p) {
    emu_ldmatrix_x4<false>(r, p);
}

inline void pgd_ldmatrix_x4_trans(uint32_t r[4], const __half *p) {
    emu_ldmatrix_x4<true>(r, p);
}

/* The bf16 half of a register as f32 (exact: the bits shifted up). */
inline float emu_mma_bf16(uint32_t r, int hi) {
    const uint32_t u = (hi ? r >> 16 : r & 0xffffu) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/* d += A x B, the 16-bit inputs read by Cvt (emu_mma_half or emu_mma_bf16). */
template <float (*Cvt)(uint32_t, int)>
inline void emu_mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    emu_mma_post *w = emu_mma_posts();
    const unsigned lane = emu_cur->lane, g = lane / 4, c = lane % 4;
    std::memcpy(w[lane].a, a, sizeof w[lane].a);
    w[lane].b[0] = b0;
    w[lane].b[1] = b1;
    __syncwarp();
    /* A[row][k] and B[k][n] from the lanes that hold them */
    auto A = [&](unsigned row, unsigned k) {
        const unsigned src = 4 * (row % 8) + (k % 8) / 2;
        return Cvt(w[src].a[(row >= 8) + 2 * (k >= 8)], k % 2);
    };
    auto B = [&](unsigned k, unsigned n) {
        const unsigned src = 4 * n + (k % 8) / 2;
        return Cvt(w[src].b[k >= 8], k % 2);
    };
    float out[4];
    for (unsigned e = 0; e < 4; e++) {
        const unsigned row = g + 8 * (e / 2), col = 2 * c + e % 2;
        float acc = 0.0f;
        for (unsigned k = 0; k < 16; k++) acc += A(row, k) * B(k, col);
        out[e] = acc + d[e];
    }
    __syncwarp();
    std::memcpy(d, out, sizeof out);
}

inline void pgd_mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    emu_mma_16816<emu_mma_half>(d, a, b0, b1);
}

inline void pgd_mma_16816_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    emu_mma_16816<emu_mma_bf16>(d, a, b0, b1);
}
