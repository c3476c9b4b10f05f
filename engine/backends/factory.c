/*
 * engine/backends/factory.c — the backend factory (see factory.h).
 */
#include "engine/backends/factory.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"

void pgd_device_options_default(pgd_device_options *o) {
    memset(o, 0, sizeof *o);
    o->device = PGD_DEVICE_AUTO;
    o->cuda.decode_gemv = true;
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

int pgd_device_resolve(int device, int *out, const char **why) {
    if (why) *why = NULL;
    *out = PGD_DEVICE_CPU;
    if (device == PGD_DEVICE_CPU) return 0;
#ifdef PGD_HAVE_CUDA
    const char *cuda_why = NULL;
    if (pgd_cuda_devices(&cuda_why) > 0) {
        *out = PGD_DEVICE_CUDA;
        return 0;
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
    int dev, rc = pgd_device_resolve(d->device, &dev, NULL);
    if (rc) return rc;
#ifdef PGD_HAVE_CUDA
    if (dev == PGD_DEVICE_CUDA) return pgd_backend_cuda_create(m, cfg, &d->cuda, out);
#endif
    return pgd_backend_cpu_create(m, cfg, &d->cpu, out);
}
