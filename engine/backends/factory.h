/*
 * engine/backends/factory.h — choosing and creating a backend: `--device auto|cpu|cuda`.
 *
 * auto takes the GPU when the build has a CUDA backend and the machine a CUDA device, else the
 * CPU. This build's CUDA backend is not written yet: cuda is refused with a clear error and auto
 * is the CPU. The chosen backend says what it is in its capabilities (caps.kind, caps.name).
 *
 * Threading: the owner's thread (create), as backend.h.
 */
#ifndef PGD_ENGINE_BACKENDS_FACTORY_H
#define PGD_ENGINE_BACKENDS_FACTORY_H

#include "engine/backends/backend.h"
#include "engine/backends/cpu.h"

/* A device request: a pgd_device_kind, or PGD_DEVICE_AUTO. */
#define PGD_DEVICE_AUTO (-1)

typedef struct pgd_device_options {
    int device;          /* PGD_DEVICE_AUTO (0-initialised options mean the CPU: set it) */
    pgd_cpu_options cpu; /* the CPU backend's settings */
} pgd_device_options;

void pgd_device_options_default(pgd_device_options *o); /* auto, CPU defaults */

/* "auto", "cpu" or "cuda" into *out. 0 or PGD_EINVAL with a detail. */
int pgd_device_parse(const char *s, int *out);
const char *pgd_device_name(int device); /* "auto", "cpu", "cuda" */

/* Create the backend the options ask for over model m (see backend.h for cfg). 0; PGD_EUNSUPPORTED
 * with a detail when the device is not available; the backend's own errors. */
int pgd_backend_create(const pgd_model *m, const pgd_backend_config *cfg,
                       const pgd_device_options *d, pgd_backend **out);

#endif
