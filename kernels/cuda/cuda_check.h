/*
 * kernels/cuda/cuda_check.h — checking every CUDA runtime call: a failure becomes PGD_ECUDA with
 * the call, the place and CUDA's own words in pgd_error_detail(). Plain C and C++ (the .cu files
 * and the backend's host code both use it).
 *
 * Threading: any thread (the detail is the calling thread's).
 */
#ifndef PGD_KERNELS_CUDA_CHECK_H
#define PGD_KERNELS_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "common/error.h"

/* Return PGD_ECUDA from the enclosing function when `call` fails. The runtime also keeps a
 * failed call's error as its "last error"; it is cleared here (it is reported now), so that a
 * later PGD_CUDA_LAUNCHED does not blame an innocent launch for it (a sticky error, one that
 * leaves the context unusable, stays: cudaGetLastError cannot clear those). */
#define PGD_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t pgd_cuda_e_ = (call);                                                          \
        if (pgd_cuda_e_ != cudaSuccess) {                                                          \
            (void)cudaGetLastError();                                                              \
            return pgd_error_set(PGD_ECUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #call,            \
                                 cudaGetErrorString(pgd_cuda_e_));                                 \
        }                                                                                          \
    } while (0)

/* After a kernel launch: the launch's own error (asynchronous faults surface at the next
 * synchronising call, which is checked too). */
#define PGD_CUDA_LAUNCHED() PGD_CUDA_TRY(cudaGetLastError())

#endif
