/*
 * common/kv_dtype.c — names of the KV cache element types (common/kv_dtype.h).
 */
#include "common/kv_dtype.h"

#include "common/error.h"

#include <string.h>

static const char *const k_kv_dtype_names[] = {"f32", "f16", "auto"};

const char *pgd_kv_dtype_name(pgd_kv_dtype t) {
    return (unsigned)t < 3 ? k_kv_dtype_names[t] : "?";
}

int pgd_kv_dtype_parse(const char *name, pgd_kv_dtype *out) {
    for (unsigned t = 0; name && t < 3; t++)
        if (!strcmp(name, k_kv_dtype_names[t])) {
            *out = (pgd_kv_dtype)t;
            return 0;
        }
    return pgd_error_set(PGD_EINVAL, "KV cache dtype '%s': use auto, f16 or f32",
                         name ? name : "(null)");
}
