/*
 * bench/cuda_ceiling.c — the ceilings of this GPU, measured: device memory bandwidth (a
 * device-to-device copy of a 1 GiB buffer, read and write counted) and the bf16 GEMM rate of
 * pagoda's own cuBLASLt plan (kernels/cuda/gemm.h) on an 8192 x 8192 x 8192 product of random
 * data (never zeros: zeros run faster). scripts/gpu-check divides pagoda's numbers by these.
 * Prints one JSON object. Buffers are larger than the L2 cache.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/counter_hash.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemm.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) != cudaSuccess) {                                                                  \
            fprintf(stderr, "cuda_ceiling: %s failed\n", #x);                                      \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || !n) {
        fprintf(stderr, "cuda_ceiling: no CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    TRY(cudaGetDeviceProperties(&prop, 0));
    cudaEvent_t a, b;
    TRY(cudaEventCreate(&a));
    TRY(cudaEventCreate(&b));
    /* bandwidth */
    const size_t bytes = 1ull << 30;
    void *src, *dst;
    TRY(cudaMalloc(&src, bytes));
    TRY(cudaMalloc(&dst, bytes));
    TRY(cudaMemset(src, 0x5a, bytes));
    TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice)); /* warm-up */
    const int reps = 20;
    TRY(cudaEventRecord(a, 0));
    for (int i = 0; i < reps; i++)
        TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
    TRY(cudaEventRecord(b, 0));
    TRY(cudaEventSynchronize(b));
    float ms = 0;
    TRY(cudaEventElapsedTime(&ms, a, b));
    double gbps = 2.0 * bytes * reps / (ms * 1e-3) / 1e9;
    cudaFree(src);
    cudaFree(dst);
    /* GEMM */
    const uint32_t M = 8192, N = 8192, K = 8192;
    uint16_t *h = malloc((size_t)N * K * 2), *dX, *dW;
    float *dY;
    if (!h) return 1;
    for (size_t i = 0; i < (size_t)N * K; i++) h[i] = pgd_f32_to_bf16(pgd_dummy_value(1, 0, i, 8));
    TRY(cudaMalloc((void **)&dX, (size_t)M * K * 2));
    TRY(cudaMalloc((void **)&dW, (size_t)N * K * 2));
    TRY(cudaMalloc((void **)&dY, (size_t)M * N * 4));
    TRY(cudaMemcpy(dX, h, (size_t)M * K * 2, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dW, h, (size_t)N * K * 2, cudaMemcpyHostToDevice));
    pgd_cuda_gemm *g;
    pgd_cuda_gemm_plan *p;
    if (pgd_cuda_gemm_create(32u << 20, &g) ||
        pgd_cuda_gemm_plan_create(g, N, K, M, PGD_CUDA_GEMM_INVARIANT, PGD_CUDA_GEMM_OUT_F32, &p)) {
        fprintf(stderr, "cuda_ceiling: no GEMM plan\n");
        return 1;
    }
    if (pgd_cuda_gemm_run(g, p, dX, dW, dY, M, NULL)) return 1; /* warm-up */
    const int greps = 10;
    TRY(cudaEventRecord(a, 0));
    for (int i = 0; i < greps; i++)
        if (pgd_cuda_gemm_run(g, p, dX, dW, dY, M, NULL)) return 1;
    TRY(cudaEventRecord(b, 0));
    TRY(cudaEventSynchronize(b));
    TRY(cudaEventElapsedTime(&ms, a, b));
    double tflops = 2.0 * M * N * K * greps / (ms * 1e-3) / 1e12;
    printf("{\"device\":\"%s\",\"memory_gib\":%.1f,\"copy_gb_per_s\":%.1f,"
           "\"gemm_bf16_tflops\":%.1f}\n",
           prop.name, prop.totalGlobalMem / 1073741824.0, gbps, tflops);
    pgd_cuda_gemm_plan_destroy(p);
    pgd_cuda_gemm_destroy(g);
    free(h);
    return 0;
}
