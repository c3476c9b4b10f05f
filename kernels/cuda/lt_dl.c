/*
 * kernels/cuda/lt_dl.c — cuBLASLt opened on first use (see lt_dl.h): the functions pagoda calls,
 * each forwarding to the library's own once it is open.
 */
#include "kernels/cuda/lt_dl.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "common/error.h"

/* X(name, parameters, arguments): every cuBLASLt function pagoda calls (GetAttribute of a
 * layout: tests/unit/test_cuda_lt.c). */
#define PGD_LT_FUNCTIONS(X)                                                                        \
    X(cublasLtCreate, (cublasLtHandle_t * h), (h))                                                 \
    X(cublasLtDestroy, (cublasLtHandle_t h), (h))                                                  \
    X(cublasLtMatmul,                                                                              \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,              \
       cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,                  \
       const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,                     \
       cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,            \
       size_t workspace_bytes, cudaStream_t stream),                                               \
      (h, op, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,                \
       workspace_bytes, stream))                                                                   \
    X(cublasLtMatmulAlgoCheck,                                                                     \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t Adesc,                  \
       cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,   \
       const cublasLtMatmulAlgo_t *algo, cublasLtMatmulHeuristicResult_t *result),                 \
      (h, op, Adesc, Bdesc, Cdesc, Ddesc, algo, result))                                           \
    X(cublasLtMatmulAlgoConfigSetAttribute,                                                        \
      (cublasLtMatmulAlgo_t * algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void *buf,    \
       size_t n),                                                                                  \
      (algo, attr, buf, n))                                                                        \
    X(cublasLtMatmulAlgoConfigGetAttribute,                                                        \
      (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,     \
       size_t n, size_t *written),                                                                 \
      (algo, attr, buf, n, written))                                                               \
    X(cublasLtMatmulAlgoGetHeuristic,                                                              \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t Adesc,                  \
       cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,   \
       cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],  \
       int *returned),                                                                             \
      (h, op, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))                     \
    X(cublasLtMatmulDescCreate,                                                                    \
      (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),            \
      (desc, compute, scale))                                                                      \
    X(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))                              \
    X(cublasLtMatmulDescSetAttribute,                                                              \
      (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t n), \
      (desc, attr, buf, n))                                                                        \
    X(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))                 \
    X(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))                  \
    X(cublasLtMatmulPreferenceSetAttribute,                                                        \
      (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,                 \
       const void *buf, size_t n),                                                                 \
      (pref, attr, buf, n))                                                                        \
    X(cublasLtMatrixLayoutCreate,                                                                  \
      (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,           \
       int64_t ld),                                                                                \
      (layout, type, rows, cols, ld))                                                              \
    X(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))                      \
    X(cublasLtMatrixLayoutSetAttribute,                                                            \
      (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void *buf,       \
       size_t n),                                                                                  \
      (layout, attr, buf, n))                                                                      \
    X(cublasLtMatrixLayoutGetAttribute,                                                            \
      (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, void *buf, size_t n,   \
       size_t *written),                                                                           \
      (layout, attr, buf, n, written))

/* The library's functions, once open (written once under pthread_once, read after it). */
static struct {
#define PGD_LT_POINTER(name, params, args) __typeof__(&name) name;
    PGD_LT_FUNCTIONS(PGD_LT_POINTER)
#undef PGD_LT_POINTER
} lt;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static int lt_ok;
static char lt_why[512]; /* why it could not be opened */

/* The first library of `paths` that dlopen opens, or NULL with dlerror's words for each in
 * lt_why. */
static void *open_first(const char *const *paths, size_t n) {
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        const char *e = dlerror();
        int w = snprintf(lt_why + used, sizeof lt_why - used, "%s%s", used ? "; " : "",
                         e ? e : paths[i]);
        if (w > 0) used += (size_t)w < sizeof lt_why - used ? (size_t)w : sizeof lt_why - used - 1;
    }
    return NULL;
}

static void lt_open(void) {
    static const char *const paths[] = {
        PGD_CUDA_LT_SONAME,
#ifdef PGD_CUBLASLT_DIR
        PGD_CUBLASLT_DIR "/" PGD_CUDA_LT_SONAME,
#endif
    };
    void *h = open_first(paths, sizeof paths / sizeof paths[0]);
    if (!h) return;
#define PGD_LT_RESOLVE(name, params, args)                                                         \
    if (!(*(void **)&lt.name = dlsym(h, #name))) {                                                 \
        snprintf(lt_why, sizeof lt_why, "%s has no %s", PGD_CUDA_LT_SONAME, #name);                \
        return;                                                                                    \
    }
    PGD_LT_FUNCTIONS(PGD_LT_RESOLVE)
#undef PGD_LT_RESOLVE
    lt_ok = 1; /* the handle stays open for the program's life */
}

int pgd_cuda_lt_load(void) {
    pthread_once(&lt_once, lt_open);
    if (lt_ok) return 0;
    return pgd_error_set(PGD_ECUDA,
                         "cannot load cuBLASLt (%s), which the CUDA backend needs for its matrix "
                         "products: %s",
                         PGD_CUDA_LT_SONAME, lt_why);
}

/* The forwarding definitions: CUBLAS_STATUS_NOT_INITIALIZED while the library cannot be opened
 * (pgd_cuda_lt_load says why). */
#define PGD_LT_FORWARD(name, params, args)                                                         \
    cublasStatus_t CUBLASWINAPI name params {                                                      \
        pthread_once(&lt_once, lt_open);                                                           \
        return lt_ok ? lt.name args : CUBLAS_STATUS_NOT_INITIALIZED;                               \
    }
PGD_LT_FUNCTIONS(PGD_LT_FORWARD)
#undef PGD_LT_FORWARD
