/*
 * bench/cuda_gemm_algos.c — which cuBLASLt algorithm to fix per weight shape: for Llama-3-8B's
 * shapes (QKV, O, gate/up, down, the output head), the heuristic's first algorithm for a
 * "source" batch size s (with split-K allowed or not) is run at every "target" batch size t, and
 * timed (mean of 20 runs after 3 warm-ups, CUDA events). A row's bits at t are compared with the
 * same row computed alone (t = 1) by the same algorithm: "inv" when every t gives them back, i.e.
 * the algorithm alone would keep the batch invariance that DESIGN's determinism rule asks.
 * Weight bandwidth (N x K x 2 bytes / time) is printed beside each time.
 *
 *   bench_cuda_gemm_algos            # all shapes; one line a (shape, s, split) combination
 *
 * Random data (never zeros). Exit 77 without a GPU.
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dummy.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) != 0) {                                                                            \
            fprintf(stderr, "gemm_algos: %s failed (line %d)\n", #x, __LINE__);                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { N_T = 7, MAX_T = 4096 };
static const uint32_t k_targets[N_T] = {1, 8, 32, 64, 256, 1024, 4096};

static cublasLtHandle_t g_lt;
static void *g_ws;
static const size_t g_ws_bytes = 64u << 20;

typedef struct shape {
    const char *name;
    uint32_t N, K;
} shape;

static void set_m(cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, uint32_t M) {
    uint64_t cols = M;
    TRY(cublasLtMatrixLayoutSetAttribute(b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols));
    TRY(cublasLtMatrixLayoutSetAttribute(c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols));
}

static int cfg(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = -1;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof v, &w);
    return v;
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || !n) {
        fprintf(stderr, "gemm_algos: no CUDA device\n");
        return 77;
    }
    static const shape shapes[] = {{"qkv", 6144, 4096},
                                   {"o", 4096, 4096},
                                   {"gate_up", 28672, 4096},
                                   {"down", 4096, 14336},
                                   {"head", 128256, 4096}};
    static const uint32_t sources[] = {1, 8, 64, 256, 4096};
    TRY(cublasLtCreate(&g_lt));
    TRY(cudaMalloc(&g_ws, g_ws_bytes));
    cudaEvent_t e0, e1;
    TRY(cudaEventCreate(&e0));
    TRY(cudaEventCreate(&e1));
    printf("shape N K | source s, split-K allowed | algo id tile stages splitK scheme | per target "
           "t: ms (weight GB/s) | invariant\n");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *S = &shapes[si];
        uint32_t N = S->N, K = S->K;
        size_t wn = (size_t)N * K, xn = (size_t)MAX_T * K;
        float *y1 = malloc((size_t)N * 4), *yt = malloc((size_t)N * 4);
        uint16_t *dX, *dW;
        float *dY;
        TRY(cudaMalloc((void **)&dW, wn * 2));
        TRY(cudaMalloc((void **)&dX, xn * 2));
        TRY(cudaMalloc((void **)&dY, (size_t)MAX_T * N * 4));
        TRY(pgd_cuda_dummy_bf16(2, (uint32_t)si, 6, wn, dW, NULL));
        TRY(pgd_cuda_dummy_bf16(3, (uint32_t)si, 1, xn, dX, NULL));
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        TRY(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));
        TRY(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, MAX_T, K));
        TRY(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, MAX_T, N));
        for (size_t so = 0; so < sizeof sources / sizeof sources[0]; so++)
            for (int split = 0; split < 2; split++) {
                uint32_t s = sources[so];
                cublasLtMatmulPreference_t pref;
                TRY(cublasLtMatmulPreferenceCreate(&pref));
                uint64_t ws = g_ws_bytes;
                uint32_t scheme =
                    split ? CUBLASLT_REDUCTION_SCHEME_MASK : CUBLASLT_REDUCTION_SCHEME_NONE;
                TRY(cublasLtMatmulPreferenceSetAttribute(
                    pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
                TRY(cublasLtMatmulPreferenceSetAttribute(
                    pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof scheme));
                set_m(lb, lc, s);
                cublasLtMatmulHeuristicResult_t res[1];
                int got = 0;
                if (cublasLtMatmulAlgoGetHeuristic(g_lt, op, la, lb, lc, lc, pref, 1, res, &got) ||
                    !got) {
                    printf("%s %u %u | s=%u split=%d | no algorithm\n", S->name, N, K, s, split);
                    cublasLtMatmulPreferenceDestroy(pref);
                    continue;
                }
                cublasLtMatmulPreferenceDestroy(pref);
                cublasLtMatmulAlgo_t a = res[0].algo;
                int id = cfg(&a, CUBLASLT_ALGO_CONFIG_ID),
                    tile = cfg(&a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                    stages = cfg(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                    sk = cfg(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                    red = cfg(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
                printf("%s %u %u | s=%u split=%d | algo %d tile %d stages %d splitK %d scheme %d |",
                       S->name, N, K, s, split, id, tile, stages, sk, red);
                bool inv = true;
                const float alpha = 1, beta = 0;
                for (int ti = 0; ti < N_T; ti++) {
                    uint32_t t = k_targets[ti];
                    set_m(lb, lc, t);
                    cublasLtMatmulHeuristicResult_t chk;
                    if (cublasLtMatmulAlgoCheck(g_lt, op, la, lb, lc, lc, &a, &chk) ||
                        chk.workspaceSize > g_ws_bytes) {
                        printf(" t=%u: n/a", t);
                        continue;
                    }
                    for (int r = 0; r < 3; r++)
                        TRY(cublasLtMatmul(g_lt, op, &alpha, dW, la, dX, lb, &beta, dY, lc, dY, lc,
                                           &a, g_ws, g_ws_bytes, 0));
                    TRY(cudaEventRecord(e0, 0));
                    for (int r = 0; r < 20; r++)
                        TRY(cublasLtMatmul(g_lt, op, &alpha, dW, la, dX, lb, &beta, dY, lc, dY, lc,
                                           &a, g_ws, g_ws_bytes, 0));
                    TRY(cudaEventRecord(e1, 0));
                    TRY(cudaEventSynchronize(e1));
                    float ms = 0;
                    TRY(cudaEventElapsedTime(&ms, e0, e1));
                    ms /= 20;
                    TRY(cudaMemcpy(t == 1 ? y1 : yt, dY, (size_t)N * 4, cudaMemcpyDeviceToHost));
                    if (t > 1 && memcmp(y1, yt, (size_t)N * 4)) inv = false;
                    printf(" t=%u: %.3f (%.0f)", t, ms, (double)N * K * 2 / (ms * 1e-3) / 1e9);
                }
                printf(" | %s\n", inv ? "inv" : "VARIES");
                fflush(stdout);
            }
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
        cudaFree(dW);
        cudaFree(dX);
        cudaFree(dY);
        free(y1);
        free(yt);
    }
    return 0;
}
