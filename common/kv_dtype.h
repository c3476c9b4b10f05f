/*
 * common/kv_dtype.h — the element type of a KV cache, shared by every backend (the CPU
 * attention kernels, the engine's backend config, the command line).
 *
 * Threading: pure; any thread.
 */
#ifndef PGD_COMMON_KV_DTYPE_H
#define PGD_COMMON_KV_DTYPE_H

#include <stdint.h>

typedef enum pgd_kv_dtype {
    PGD_KV_F32 = 0,
    PGD_KV_F16 = 1,  /* IEEE binary16: half the memory and bandwidth, ~3 significant digits */
    PGD_KV_AUTO = 2, /* engine option only: f32 beside f32 weights, else f16 (engine/runner.h) */
} pgd_kv_dtype;

/* Bytes of one cache element: 4 or 2. */
static inline uint32_t pgd_kv_dtype_bytes(pgd_kv_dtype t) {
    return t == PGD_KV_F16 ? 2u : 4u;
}

/* "f32" / "f16" / "auto" ("?" otherwise); parse: 0, or PGD_EINVAL with a message naming the
 * accepted values. */
const char *pgd_kv_dtype_name(pgd_kv_dtype t);
int pgd_kv_dtype_parse(const char *name, pgd_kv_dtype *out);

#endif
