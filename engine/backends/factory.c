/*
 * engine/backends/factory.c — the backend factory (see factory.h).
 */
#include "engine/backends/factory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

void pgd_device_options_default(pgd_device_options *o) {
    memset(o, 0, sizeof *o);
    o->device = PGD_DEVICE_AUTO;
    o->cuda.decode_gemv = true;
}

int pgd_device_parse(const char *s, pgd_device_options *d) {
    int device, index = 0;
    if (!strcmp(s, "auto")) {
        device = PGD_DEVICE_AUTO;
    } else if (!strcmp(s, "cpu")) {
        device = PGD_DEVICE_CPU;
    } else if (!strcmp(s, "cuda")) {
        device = PGD_DEVICE_CUDA;
    } else if (!strncmp(s, "cuda:", 5)) {
        const char *n = s + 5;
        size_t len = strspn(n, "0123456789");
        if (len == 0 || len > 2 || n[len] || (index = atoi(n)) > 63)
            return pgd_error_set(PGD_EINVAL, "device '%s': cuda:N wants a device index 0 to 63", s);
        device = PGD_DEVICE_CUDA;
    } else {
        return pgd_error_set(PGD_EINVAL, "device '%s': use auto, cpu, cuda or cuda:N", s);
    }
    d->device = device;
    d->cuda.device_index = index;
    return 0;
}

static const char *const k_weights[] = {"auto", "bf16", "q8_0", "q4"};

int pgd_cuda_weights_parse(const char *s, pgd_cuda_weights *out) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_weights); i++)
        if (!strcmp(s, k_weights[i])) {
            *out = (pgd_cuda_weights)i;
            return 0;
        }
    return pgd_error_set(PGD_EINVAL, "GPU weights '%s': use auto, bf16, q8_0 or q4", s);
}

const char *pgd_cuda_weights_name(pgd_cuda_weights w) {
    return (unsigned)w < PGD_ARRAY_LEN(k_weights) ? k_weights[w] : "?";
}

const char *pgd_device_name(int device) {
    switch (device) {
    case PGD_DEVICE_AUTO:
        return "auto";
    case PGD_DEVICE_CPU:
        return "cpu";
    case PGD_DEVICE_CUDA:
        return "cuda";
    default:
        return "?";
    }
}

int pgd_device_resolve(const pgd_device_options *d, int *out, const char **why) {
    const int device = d->device;
    if (why) *why = NULL;
    *out = PGD_DEVICE_CPU;
    if (device == PGD_DEVICE_CPU) return 0;
#ifdef PGD_HAVE_CUDA
    const int index = d->cuda.device_index;
    const char *cuda_why = NULL;
    const int n = pgd_cuda_devices(&cuda_why);
    if (n > 0 && index < n) {
        *out = PGD_DEVICE_CUDA;
        return 0;
    }
    if (n > 0) {
        char range[32] = "cuda:0";
        if (n > 1) snprintf(range, sizeof range, "cuda:0 to cuda:%d", n - 1);
        return pgd_error_set(PGD_EUNSUPPORTED, "--device cuda:%d: %d CUDA device%s visible (%s)",
                             index, n, n == 1 ? " is" : "s are", range);
    }
    if (device == PGD_DEVICE_CUDA)
        return pgd_error_set(PGD_EUNSUPPORTED, "--device cuda: no CUDA device is visible: %s",
                             cuda_why);
    if (why) {
        static _Thread_local char said[192];
        snprintf(said, sizeof said, "no CUDA device is visible: %s", cuda_why);
        *why = said;
    }
#else
    if (device == PGD_DEVICE_CUDA)
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "--device cuda: this build has no CUDA backend (build with the CUDA "
                             "toolkit: PGD_CUDA=ON)");
    if (why) *why = "this build has no CUDA backend";
#endif
    return 0;
}

int pgd_backend_create(const pgd_model *m, const pgd_backend_config *cfg,
                       const pgd_device_options *d, pgd_backend **out) {
    *out = NULL;
    int dev, rc = pgd_device_resolve(d, &dev, NULL);
    if (rc) return rc;
#ifdef PGD_HAVE_CUDA
    if (dev == PGD_DEVICE_CUDA) return pgd_backend_cuda_create(m, cfg, &d->cuda, out);
#endif
    return pgd_backend_cpu_create(m, cfg, &d->cpu, out);
}
