/*
 * kernels/cuda/q4_twin.c — the host's side of weights in 4 bits (q4.h): which GGUF types take
 * THE FORM exactly, and their rows as GGUF Q4_1 blocks, the blocks pgd_cuda_q4_split pulls
 * apart on the device. Plain C, compiled with or without CUDA (CI tests it: test_quant.c).
 */
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/q4.h"

bool pgd_q4_type_exact(uint32_t type) {
    return type == PGD_TYPE_Q4_0 || type == PGD_TYPE_Q4_1 || type == PGD_TYPE_Q4_K;
}

/* A Q4_0 block (d, 16 bytes of values; y = d (q - 8)) as a Q4_1 block: m = -8 d, exact in f16
 * (a power of two) unless |8 d| passes f16's largest finite value. */
static int q4_0_blocks(const uint8_t *src, uint8_t *dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks;
         i++, src += sizeof(pgd_block_q4_0), dst += PGD_Q4_BLOCK_BYTES) {
        uint16_t d;
        memcpy(&d, src, 2);
        const float m = -8.0f * pgd_f16_to_f32(d);
        const uint16_t hm = pgd_f32_to_f16(m);
        if (pgd_f16_to_f32(hm) != m && m == m)
            return pgd_error_set(PGD_ERANGE, "a Q4_0 block's offset %g is beyond the f16 range",
                                 (double)m);
        memcpy(dst, &d, 2);
        memcpy(dst + 2, &hm, 2);
        memcpy(dst + 4, src + 2, PGD_Q4_BLOCK / 2);
    }
    return 0;
}

int pgd_q4_blocks(uint32_t type, const void *src, void *dst, int64_t n) {
    if (!pgd_q4_type_exact(type))
        return pgd_error_set(PGD_EINVAL, "tensor type %u has no exact 4-bit form", type);
    const int64_t unit = type == PGD_TYPE_Q4_K ? PGD_QK_K : PGD_Q4_BLOCK;
    if (n < 0 || n % unit)
        return pgd_error_set(PGD_EINVAL, "%lld elements is not a multiple of %lld", (long long)n,
                             (long long)unit);
    switch (type) {
    case PGD_TYPE_Q4_1:
        memcpy(dst, src, (size_t)(n / PGD_Q4_BLOCK) * PGD_Q4_BLOCK_BYTES);
        return 0;
    case PGD_TYPE_Q4_0:
        return q4_0_blocks(src, dst, n / PGD_Q4_BLOCK);
    default: /* Q4_K: the CPU backend's own re-blocking */
        return pgd_reblock_row(type, src, dst, n);
    }
}
