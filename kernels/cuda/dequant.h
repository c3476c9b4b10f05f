/*
 * kernels/cuda/dequant.h — row dequantization on the GPU, to f32 and to bf16 (the weights' type on
 * the device). The CPU twin is pgd_dequant_row (kernels/cpu/quant.h), then pgd_f32_to_bf16 for
 * bf16; tests/gpu checks them equal bit for bit.
 *
 * Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, with the
 * CPU's arithmetic (each product and sum rounded, no fused multiply-add). Any number of rows.
 * Pointers are device pointers; the call is asynchronous on `stream` (NULL = the default stream)
 * and checks the launch.
 *
 * Threading: any host thread that owns the stream.
 */
#ifndef PGD_KERNELS_CUDA_DEQUANT_H
#define PGD_KERNELS_CUDA_DEQUANT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether pgd_cuda_dequant supports `type`. */
bool pgd_cuda_dequant_supported(uint32_t type);

/* dst[n_rows][n_cols] = dequant(src), src holding n_rows rows of n_cols elements of `type`
 * (n_cols a multiple of the block size). 0, PGD_EUNSUPPORTED, PGD_EINVAL or PGD_ECUDA (with
 * the CUDA error in pgd_error_detail()). */
int pgd_cuda_dequant(uint32_t type, const void *src, float *dst, int64_t n_rows, int64_t n_cols,
                     void *stream);

/* The same into bf16 (round to nearest even): dst[n_rows][n_cols]. */
int pgd_cuda_dequant_bf16(uint32_t type, const void *src, uint16_t *dst, int64_t n_rows,
                          int64_t n_cols, void *stream);

/* Number of CUDA devices (0 when there is no driver or no device). */
int pgd_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
