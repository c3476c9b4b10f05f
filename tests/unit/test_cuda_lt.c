/*
 * tests/unit/test_cuda_lt.c — cuBLASLt is opened on first use, not at program start
 * (kernels/cuda/lt_dl.h): this program, linked like pagoda with the CUDA backend, starts without
 * the library in its address space (dlopen's RTLD_NOLOAD asks the loader without loading);
 * pgd_cuda_lt_load opens it (the CUDA toolkit that built the program provides it), the same
 * answer every call; a cuBLASLt call needing no GPU (a matrix layout created, read back through
 * the library, destroyed) runs through the forwarding functions. Needs no GPU; in a build
 * without PGD_CUDA there is nothing to test and it says so.
 */
#include <stdio.h>

#ifdef PGD_HAVE_CUDA
#include <cublasLt.h>
#include <dlfcn.h>

#include "common/error.h"
#include "kernels/cuda/lt_dl.h"
#include "testutil.h"

/* Whether the library is in the address space (without loading it). */
static int loaded(void) {
    void *h = dlopen(PGD_CUDA_LT_SONAME, RTLD_NOW | RTLD_NOLOAD);
    if (h) dlclose(h); /* drops the reference RTLD_NOLOAD took */
    return h != NULL;
}

static void test_opened_on_first_use(void) {
    CHECK(!loaded());
    int rc = pgd_cuda_lt_load();
    if (rc) fprintf(stderr, "  %s\n", pgd_error_detail());
    REQUIRE(rc == 0);
    CHECK(loaded());
    CHECK_EQ_INT(pgd_cuda_lt_load(), 0);
}

static void test_calls_forwarded(void) {
    cublasLtMatrixLayout_t l = NULL;
    REQUIRE(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 4096, 7, 4096) == CUBLAS_STATUS_SUCCESS);
    uint64_t cols = 0;
    size_t written = 0;
    CHECK(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols,
                                           &written) == CUBLAS_STATUS_SUCCESS);
    CHECK_EQ_INT(cols, 7);
    cols = 64;
    CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols) ==
          CUBLAS_STATUS_SUCCESS);
    cols = 0;
    CHECK(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols,
                                           &written) == CUBLAS_STATUS_SUCCESS);
    CHECK_EQ_INT(cols, 64);
    CHECK(cublasLtMatrixLayoutDestroy(l) == CUBLAS_STATUS_SUCCESS);
}
#endif

int main(void) {
#ifdef PGD_HAVE_CUDA
    RUN(test_opened_on_first_use);
    RUN(test_calls_forwarded);
    return test_summary();
#else
    printf("test_cuda_lt: a build without PGD_CUDA has no cuBLASLt to open\n");
    return 0;
#endif
}
