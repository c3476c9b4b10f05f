/*
 * engine/backends/factory.c — the backend factory (see factory.h).
 */
#include "engine/backends/factory.h"

#include <string.h>

#include "common/error.h"

void pgd_device_options_default(pgd_device_options *o) {
    memset(o, 0, sizeof *o);
    o->device = PGD_DEVICE_AUTO;
}

int pgd_device_parse(const char *s, int *out) {
    if (!strcmp(s, "auto"))
        *out = PGD_DEVICE_AUTO;
    else if (!strcmp(s, "cpu"))
        *out = PGD_DEVICE_CPU;
    else if (!strcmp(s, "cuda"))
        *out = PGD_DEVICE_CUDA;
    else
        return pgd_error_set(PGD_EINVAL, "device '%s': use auto, cpu or cuda", s);
    return 0;
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

int pgd_backend_create(const pgd_model *m, const pgd_backend_config *cfg,
                       const pgd_device_options *d, pgd_backend **out) {
    *out = NULL;
    switch (d->device) {
    case PGD_DEVICE_AUTO: /* no CUDA backend in this build: the CPU */
    case PGD_DEVICE_CPU:
        return pgd_backend_cpu_create(m, cfg, &d->cpu, out);
    case PGD_DEVICE_CUDA:
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "--device cuda: this build has no CUDA backend (it is not written "
                             "yet); use --device cpu or auto");
    default:
        return pgd_error_set(PGD_EINVAL, "unknown device %d", d->device);
    }
}
