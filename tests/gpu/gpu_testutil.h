/*
 * tests/gpu/gpu_testutil.h — what the `cuda` tests share: the skip without a GPU (exit 77), a
 * seeded random source (the seed is printed; PGD_SEED=N repeats a run), device buffers uploaded
 * or poisoned with NaN (all bits set: a NaN in f32, f16 and bf16 alike) before each run,
 * counting differing elements, and the order of bf16 values for ulp distances. Include after
 * testutil.h.
 */
#ifndef PGD_TESTS_GPU_TESTUTIL_H
#define PGD_TESTS_GPU_TESTUTIL_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/counter_hash.h"
#include "kernels/cuda/dequant.h" /* pgd_cuda_device_count */

static uint64_t gt_rng = 1;

/* Seed the random source from PGD_SEED or the clock, and print the seed. */
static inline void gt_seed(void) {
    const char *env = getenv("PGD_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    fprintf(stderr, "seed %llu (PGD_SEED=%llu repeats this run)\n", (unsigned long long)seed,
            (unsigned long long)seed);
    gt_rng = pgd_hash64(seed) | 1;
}

/* Whether a CUDA device is present (else "skipped" is printed: main returns 77, ctest's skip
 * code); seeds the random source when it is. */
static inline bool gt_start(void) {
    if (pgd_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return false;
    }
    gt_seed();
    return true;
}

static inline uint64_t gt_next(void) {
    gt_rng ^= gt_rng << 13, gt_rng ^= gt_rng >> 7, gt_rng ^= gt_rng << 17;
    return gt_rng;
}
static inline float gt_frand(void) { /* uniform in [-1, 1) */
    return (float)((double)(gt_next() >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}
static inline uint32_t gt_urand(uint32_t n) {
    return (uint32_t)(gt_next() % n);
}

/* A device copy of host bytes (NULL on failure). */
static inline void *gt_upload(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* A device buffer with every byte 0xFF (NULL on failure). */
static inline void *gt_poisoned(size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (cudaMemset(d, 0xFF, bytes ? bytes : 1) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* Wait for the device, then copy back: 0, or -1 with CUDA's words on stderr (a kernel's
 * asynchronous fault surfaces here). */
static inline int gt_download(void *h, const void *d, size_t bytes) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "  CUDA: %s\n", cudaGetErrorString(e));
    return -1;
}

/* Elements of `elem` bytes that differ between a and b (n of them); the first one is named. */
static inline uint64_t gt_count_diff(const char *what, const void *a, const void *b, uint64_t n,
                                     size_t elem) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem)) continue;
        if (!bad++) fprintf(stderr, "  %s: element %llu differs\n", what, (unsigned long long)i);
    }
    if (bad)
        fprintf(stderr, "  %s: %llu of %llu differ\n", what, (unsigned long long)bad,
                (unsigned long long)n);
    return bad;
}

/* got [rows][ldy] (elements of `elem` bytes) against want [rows][n]: each row's first n elements
 * equal want's row, its elements n .. ldy - 1 all 0xFF (the poison, untouched). The elements
 * that fail; the first one is named. */
static inline uint64_t gt_count_strided(const char *what, const void *got, const void *want,
                                        uint64_t rows, uint64_t n, uint64_t ldy, size_t elem) {
    uint64_t bad = 0;
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *g = (const uint8_t *)got + r * ldy * elem;
        bad += gt_count_diff(what, g, (const uint8_t *)want + r * n * elem, n, elem);
        for (uint64_t i = n * elem; i < ldy * elem; i++)
            if (g[i] != 0xFF && !bad++)
                fprintf(stderr, "  %s: row %llu written past its %llu columns\n", what,
                        (unsigned long long)r, (unsigned long long)n);
    }
    return bad;
}

/* An _ld form's launch into dY with rows ldy apart at M rows (0, or an error code). */
typedef int (*gt_ld_run)(const void *ctx, float *dY, uint32_t ldy, uint32_t M);

/* The _ld form of a product of up to max_m rows (a fused product's part) at M = 1, 4, 7, ... with
 * Y's rows N + 5 apart, against want [max_m][N] (the plain form's bits): the failures — elements
 * of a row's N columns not want's, elements of the rest of its row or of the rows past M not the
 * poison (untouched), a failed launch or copy. */
static inline uint64_t gt_rows_apart(const char *what, gt_ld_run run, const void *ctx,
                                     const float *want, uint32_t N, uint32_t max_m) {
    const uint32_t ldy = N + 5;
    const uint64_t nl = (uint64_t)max_m * ldy;
    float *dY = gt_poisoned(nl * 4), *h = malloc(nl * 4);
    uint64_t bad = !dY || !h;
    for (uint32_t M = 1; !bad && M <= max_m; M += 3) {
        char w[128];
        snprintf(w, sizeof w, "%s, rows %u apart, M = %u", what, ldy, M);
        if (cudaMemset(dY, 0xFF, nl * 4) != cudaSuccess || run(ctx, dY, ldy, M) ||
            gt_download(h, dY, nl * 4)) {
            fprintf(stderr, "  %s: the launch failed\n", w);
            bad++;
            break;
        }
        bad += gt_count_strided(w, h, want, M, N, ldy, 4);
        for (uint64_t i = (uint64_t)M * ldy * 4; i < nl * 4; i++)
            bad += ((const uint8_t *)h)[i] != 0xFF;
    }
    cudaFree(dY);
    free(h);
    return bad;
}

/* A bf16 value's place on the number line (+0 and -0 at 0): adjacent values differ by 1. */
static inline int64_t gt_bf16_ord(uint16_t h) {
    return (h & 0x8000u) ? -(int64_t)(h & 0x7fffu) : (int64_t)h;
}

#endif
