/*
 * kernels/cuda/env_switch.h — the CUDA backend's A/B switches in the environment (the rows of
 * scripts/gpu-check: PGD_CUDA_PDL, PGD_CUDA_GEMV_EARLY, PGD_CUDA_DECODE_TC, ...), one rule for
 * all: "1" turns a switch on, "0" off, anything else (or unset) leaves its default. Plain C and
 * C++ (the backend's host code and the .cu files). Callers on a hot path read it once.
 *
 * Threading: any thread.
 */
#ifndef PGD_KERNELS_CUDA_ENV_SWITCH_H
#define PGD_KERNELS_CUDA_ENV_SWITCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

static inline bool pgd_cuda_env_switch(const char *name, bool dflt) {
    const char *v = getenv(name);
    return v && v[0] == '1' ? true : v && v[0] == '0' ? false : dflt;
}

/* pgd_cuda_env_switch read once: *known is the caller's static (0: not read yet, 1: off, 2: on),
 * read and written atomically — for switches a hot path asks (the GEMVs' launches). */
static inline bool pgd_cuda_env_switch_once(int *known, const char *name, bool dflt) {
    int k = __atomic_load_n(known, __ATOMIC_RELAXED);
    if (!k) {
        k = pgd_cuda_env_switch(name, dflt) ? 2 : 1;
        __atomic_store_n(known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}

/* A count in the environment (PGD_CUDA_DEQ_ROWS): decimal digits only, below 2^32; anything else
 * (or unset) leaves the default. */
static inline uint32_t pgd_cuda_env_uint(const char *name, uint32_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    uint64_t n = 0;
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || (n = n * 10 + (uint64_t)(*c - '0')) > UINT32_MAX) return dflt;
    }
    return (uint32_t)n;
}

#endif
