/*
 * engine/backends/cpu.h — the CPU backend (engine/backends/cpu.c): what only it takes.
 *
 * Threading: create and destroy on the owner's thread; the backend itself is used by one thread
 * at a time (backend.h).
 */
#ifndef PGD_ENGINE_BACKENDS_CPU_H
#define PGD_ENGINE_BACKENDS_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backends/backend.h"

typedef struct pgd_cpu_options {
    uint32_t n_threads; /* compute threads; 0 = one per core */
    bool act_q8;        /* quantize activations to int8 blocks (faster, less exact; the weights
                           are packed once for the int8 kernel where the CPU has it; default:
                           f32 activations against the GGUF-typed weights) */
} pgd_cpu_options;

/* The CPU backend over model m. KV memory: cfg->kv_blocks, else cfg->kv_cache_bytes, else
 * PGD_DEFAULT_KV_CACHE_MB; at least 2 blocks (the detail gives the arithmetic otherwise). */
int pgd_backend_cpu_create(const pgd_model *m, const pgd_backend_config *cfg,
                           const pgd_cpu_options *o, pgd_backend **out);

#endif
