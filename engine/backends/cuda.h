/*
 * engine/backends/cuda.h — the CUDA backend (engine/backends/cuda.c): what only it takes. Built
 * when the CUDA toolkit is (PGD_HAVE_CUDA); scripts/gpu-check has passed on an H200 and an H100
 * (bench/results/gpu-h200.md, gpu-h100.md).
 *
 * Threading: create and destroy on the owner's thread; the backend is used by one thread at a
 * time (backend.h).
 */
#ifndef PGD_ENGINE_BACKENDS_CUDA_H
#define PGD_ENGINE_BACKENDS_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backends/backend.h"

/* The weights' form on the GPU (--gpu-weights). */
typedef enum pgd_cuda_weights {
    PGD_CUDA_WEIGHTS_AUTO = 0, /* bf16 when they leave room enough (pgd_cuda_weights_choose),
                                  else 8 bits, else 4 */
    PGD_CUDA_WEIGHTS_BF16 = 1, /* every matrix in bf16 (dequantized on the GPU) */
    PGD_CUDA_WEIGHTS_Q8_0 = 2, /* every matrix in 8 bits with a scale per 32 (kernels/cuda/q8.h):
                                  1.06 bytes a weight instead of 2 */
    PGD_CUDA_WEIGHTS_Q4 = 3,   /* 4 bits with a scale and an offset per 32 (kernels/cuda/q4.h:
                                  0.625 bytes a weight) for every matrix whose file blocks are
                                  4-bit (Q4_0, Q4_1, Q4_K: as they are, no requantization) and
                                  for dummy weights; 8 bits for the rest */
} pgd_cuda_weights;

/* "auto", "bf16", "q8_0" or "q4" into *out. 0 or PGD_EINVAL with a detail. */
int pgd_cuda_weights_parse(const char *s, pgd_cuda_weights *out);
const char *pgd_cuda_weights_name(pgd_cuda_weights w); /* "auto", "bf16", "q8_0", "q4" */

typedef struct pgd_cuda_options {
    int device_index;         /* which GPU (default 0) */
    bool batch_invariant;     /* one GEMM algorithm per weight shape, without split-K, and every
                                 row's attention on CUDA cores, so a row's bits do not depend on the
                                 batch (slower: the default takes a GEMM algorithm per range of
                                 batch sizes, kernels/cuda/gemm.h, and prefill chunks' attention on
                                 tensor cores, whose bits depend on how a prompt is chunked;
                                 --batch-invariant) */
    bool enforce_eager;       /* no CUDA graphs: decode steps run eagerly too (--enforce-eager) */
    bool decode_gemv;         /* products of one row (batch-1 decode) on pagoda's own kernel, not
                                 cuBLASLt (kernels/cuda/gemv.h, gemm.h; the default,
                                 pgd_device_options_default; ignored with batch_invariant;
                                 --no-decode-gemv turns it off) */
    pgd_cuda_weights weights; /* the weights' form (default auto) */
} pgd_cuda_options;

/* The number of CUDA devices this process can use (0 without a driver or a device; then *why, if
 * not NULL, gets a static string saying which: "the CUDA driver, libcuda.so.1, is not
 * installed", or the CUDA runtime's, e.g. "no CUDA-capable device is detected"). The runtime is
 * linked statically and the driver opened by it, so a build with the CUDA backend starts on a
 * machine with neither. */
int pgd_cuda_devices(const char **why);

/* The CUDA backend over model m (loaded with PGD_MODEL_RAW, or dummy with shapes only): the
 * weights go to the device in bf16 (dequantized there), 8 or 4 bits as o->weights says (auto: the
 * log says which and why), the activations, GEMM plans and
 * metadata buffers are allocated for cfg->max_tokens tokens (default PGD_GPU_STEP_TOKENS), and
 * the KV cache takes cfg->kv_blocks, cfg->kv_cache_bytes, or what gpu_memory_utilization leaves.
 * Errors say what failed (out of device memory: with the numbers). */
int pgd_backend_cuda_create(const pgd_model *m, const pgd_backend_config *cfg,
                            const pgd_cuda_options *o, pgd_backend **out);

/* What a CUDA backend did with graphs: graphs captured, and steps that replayed one (a padded
 * size and stride's first decode step runs eagerly, the second captures its graph). A
 * capture that fails turns graphs off for the backend's life (the log says why); `off` is then
 * true, as it is with enforce_eager. For tests and the benchmark. */
typedef struct pgd_cuda_graph_stats {
    uint32_t captured;
    uint64_t replays;
    bool off;
} pgd_cuda_graph_stats;
void pgd_backend_cuda_graph_stats(const pgd_backend *b, pgd_cuda_graph_stats *out);

#endif
