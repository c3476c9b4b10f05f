/*
 * engine/backends/factory.h — choosing and creating a backend: `--device auto|cpu|cuda|cuda:N`.
 *
 * auto takes the GPU when the build has the CUDA backend (PGD_HAVE_CUDA) and the machine a CUDA
 * device, else the CPU (pgd_device_resolve says why). cuda without either is a clear error.
 * cuda:N takes the N-th visible CUDA device (auto and cuda: the first); an N past the devices
 * present is an error that says how many there are. The
 * chosen backend says what it is in its capabilities (caps.kind, caps.name).
 *
 * Threading: the owner's thread (create), as backend.h.
 */
#ifndef PGD_ENGINE_BACKENDS_FACTORY_H
#define PGD_ENGINE_BACKENDS_FACTORY_H

#include "engine/backends/backend.h"
#include "engine/backends/cpu.h"
#include "engine/backends/cuda.h"

/* A device request: a pgd_device_kind, or PGD_DEVICE_AUTO. */
#define PGD_DEVICE_AUTO (-1)

typedef struct pgd_device_options {
    int device;            /* PGD_DEVICE_AUTO (0-initialised options mean the CPU: set it) */
    pgd_cpu_options cpu;   /* the CPU backend's settings */
    pgd_cuda_options cuda; /* the CUDA backend's */
} pgd_device_options;

void pgd_device_options_default(pgd_device_options *o); /* auto, CPU defaults */

/* "auto", "cpu", "cuda" or "cuda:N" (N a decimal index, 0 to 63) into d->device and
 * d->cuda.device_index (0 but for cuda:N); d's other fields are left as they are. 0 or PGD_EINVAL
 * with a detail (d unchanged). */
int pgd_device_parse(const char *s, pgd_device_options *d);
const char *pgd_device_name(int device); /* "auto", "cpu", "cuda" */

/* The device d asks for resolves to: auto is CUDA when this build has the CUDA backend and a
 * device is present, else the CPU (*why, if not NULL, gets a string saying why auto chose the
 * CPU — static, or the calling thread's until its next call — or NULL). 0, or PGD_EUNSUPPORTED with
 * a detail for cuda without a backend or a device, or cuda:N with N devices or fewer. */
int pgd_device_resolve(const pgd_device_options *d, int *out, const char **why);

/* Create the backend the options ask for over model m (see backend.h for cfg). 0; PGD_EUNSUPPORTED
 * with a detail when the device is not available; the backend's own errors. */
int pgd_backend_create(const pgd_model *m, const pgd_backend_config *cfg,
                       const pgd_device_options *d, pgd_backend **out);

#endif
