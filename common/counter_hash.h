/*
 * common/counter_hash.h — the counter-based hash behind dummy weights, shared by the CPU and the
 * CUDA code (plain C, also compiled as __host__ __device__ by nvcc), so both fill a tensor with
 * the same values without a file and without a random state: value i of tensor t is a pure
 * function of (seed, t, i).
 *
 * A dummy value is an odd integer in [-127, 127] times a power of two: never zero (zeros run
 * faster on GPUs and hide bugs), and exactly representable in f32, f16 and bf16, so the CPU
 * (f16 weights) and the GPU (bf16 weights) compute with identical weights.
 *
 * Threading: pure functions.
 */
#ifndef PGD_COMMON_COUNTER_HASH_H
#define PGD_COMMON_COUNTER_HASH_H

#include <stdint.h>

#ifdef __CUDACC__
#define PGD_HD __host__ __device__
#else
#define PGD_HD
#endif

/* A 64-bit mix with full avalanche (splitmix64's finalizer). */
static inline PGD_HD uint64_t pgd_hash64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

/* The odd integer in [-127, 127] at index i of tensor `tensor` under `seed`. */
static inline PGD_HD int32_t pgd_dummy_int(uint64_t seed, uint32_t tensor, uint64_t i) {
    uint64_t h = pgd_hash64(seed ^ pgd_hash64(((uint64_t)tensor << 40) ^ i));
    return 2 * (int32_t)(h >> 57) - 127; /* h >> 57 in [0, 127] */
}

/* pgd_dummy_int(seed, tensor, i) * 2^-shift (exact: at most 7 significant bits). */
static inline PGD_HD float pgd_dummy_value(uint64_t seed, uint32_t tensor, uint64_t i, int shift) {
    float v = (float)pgd_dummy_int(seed, tensor, i);
    while (shift >= 30) {
        v *= 1.0f / 1073741824.0f; /* 2^-30 */
        shift -= 30;
    }
    return v / (float)(1u << shift);
}

#endif
