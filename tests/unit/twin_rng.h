/*
 * tests/unit/twin_rng.h — the xorshift source the CPU tests of the CUDA twins draw from
 * (test_cuda_twins.c, test_moe_twin.c): a fixed seed per file (define TWIN_RNG_SEED before the
 * include), so a failure repeats. Include after testutil.h.
 */
#ifndef PGD_TESTS_UNIT_TWIN_RNG_H
#define PGD_TESTS_UNIT_TWIN_RNG_H

#include <stdint.h>

static uint64_t rng = TWIN_RNG_SEED;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float frand(void) { /* uniform in [-1, 1) */
    return (float)((double)(next() >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}
static uint32_t urand(uint32_t n) {
    return (uint32_t)(next() % n);
}

#endif
