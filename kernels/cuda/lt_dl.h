/*
 * kernels/cuda/lt_dl.h — cuBLASLt loaded on first use instead of at program start.
 *
 * libcublasLt is ~540 MB; a program linked against it pays ~130 ms and ~210 MB of resident
 * memory at every start, before main, on every machine — `pagoda template`, the CPU backend's
 * server and every test included (measured: a bare `int main` linked with -lcublasLt takes 0.13 s
 * and 211 MB, without it 1.5 MB). So it is not linked: lt_dl.c defines the cuBLASLt functions
 * pagoda calls (gemm.c, bench/cuda_gemm_algos.c) with cublasLt.h's own prototypes, each
 * forwarding to the library's, which the first of them (or pgd_cuda_lt_load) opens with dlopen:
 * libcublasLt.so.<CUBLAS_VER_MAJOR> through the dynamic loader's search (LD_LIBRARY_PATH, the
 * loader's cache), then in the toolkit's library folder the build used (PGD_CUBLASLT_DIR). The
 * CUDA runtime itself stays linked (1.5 MB, nothing at start).
 *
 * The emulator (tests/cuda_emu/lt.cpp) defines the same functions and pgd_cuda_lt_load, so its
 * links never take lt_dl.c's.
 *
 * Threading: any thread; the library is opened once (pthread_once) and stays open.
 */
#ifndef PGD_KERNELS_CUDA_LT_DL_H
#define PGD_KERNELS_CUDA_LT_DL_H

#include <cublas_api.h> /* CUBLAS_VER_MAJOR */

/* The library's name, as the loader is asked for it. */
#define PGD_CUDA_LT_STR_(x) #x
#define PGD_CUDA_LT_STR(x)  PGD_CUDA_LT_STR_(x)
#define PGD_CUDA_LT_SONAME  "libcublasLt.so." PGD_CUDA_LT_STR(CUBLAS_VER_MAJOR)

#ifdef __cplusplus
extern "C" {
#endif

/* Open cuBLASLt now if it is not open yet: 0, or PGD_ECUDA with the library's name and the
 * loader's words (pgd_error_detail). Every later call gives the first call's answer. */
int pgd_cuda_lt_load(void);

#ifdef __cplusplus
}
#endif

#endif
