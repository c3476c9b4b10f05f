/*
 * kernels/cuda/cuda_util.cuh — small helpers shared by the .cu files (CUDA C++ only; the twins
 * never include it): the f32 -> bf16 rounding of pgd_f32_to_bf16 (kernels/cpu/quant.c) on the
 * device, and the grid size of a grid-stride launch.
 *
 * Invariants: pgd_dev_f32_to_bf16 gives pgd_f32_to_bf16's bits for every input, NaN included
 * (its payload's top bits kept, made quiet), so "bf16 of the same f32" is bit-exact across the
 * two. Grid-stride kernels take any element count: the grid is capped, the loop covers the rest
 * with 64-bit indices. And the launch of a step's kernels with programmatic dependent launch
 * (pgd_cuda_launch, pgd_dev_pdl_enter: the contract is written there).
 *
 * Threading: pure functions; pgd_cuda_launch from the thread that owns the stream.
 */
#ifndef PGD_KERNELS_CUDA_UTIL_CUH
#define PGD_KERNELS_CUDA_UTIL_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <utility>

#include "kernels/cuda/env_switch.h"

/* The devices whose once-per-device decisions the helpers below remember (more are served, just
 * without the memory). */
#define PGD_CUDA_MAX_DEVICES 64

/* Threads per CTA of the elementwise (grid-stride) kernels. */
#define PGD_CUDA_THREADS 256
/* At most this many CTAs in a grid-stride launch (far more than fill any current GPU). The
 * emulator sets it to 3 before this header (tests/cuda_emu/conv.py --small-grid), so the
 * grid-stride loops do loop there. */
#ifndef PGD_CUDA_MAX_CTAS
#define PGD_CUDA_MAX_CTAS 65535u
#endif

/* Element i of f32 values, or of bf16 bits widened to f32 (exact): the weight converters read
 * either through one template. */
static __device__ __forceinline__ float pgd_dev_load_f32(const float *src, uint64_t i) {
    return src[i];
}
static __device__ __forceinline__ float pgd_dev_load_f32(const uint16_t *src, uint64_t i) {
    return __uint_as_float((uint32_t)src[i] << 16);
}

/* Round to nearest even; a NaN stays a quiet NaN with the top bits of its payload. */
static __device__ __forceinline__ uint16_t pgd_dev_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* 8 f32 values as bf16 (pgd_dev_f32_to_bf16 each) in one 16-byte store at dst (16-byte
 * aligned): element e at dst[e]. */
static __device__ __forceinline__ void pgd_dev_store_bf16x8(uint16_t *dst, const float (&v)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)pgd_dev_f32_to_bf16(v[2 * i]) | (uint32_t)pgd_dev_f32_to_bf16(v[2 * i + 1])
                                                             << 16;
    uint4 o;
    o.x = w[0], o.y = w[1], o.z = w[2], o.w = w[3];
    *reinterpret_cast<uint4 *>(dst) = o;
}

/* CTAs for n work items of `threads` each (threads 1: a CTA per item, e.g. per row), at least 1
 * and at most PGD_CUDA_MAX_CTAS; grid-stride loops cover the rest. */
static inline unsigned pgd_cuda_grid(uint64_t n, unsigned threads) {
    uint64_t ctas = (n + threads - 1) / threads;
    if (ctas < 1) ctas = 1;
    return ctas > PGD_CUDA_MAX_CTAS ? PGD_CUDA_MAX_CTAS : (unsigned)ctas;
}

/* The current device's streaming multiprocessors (at least 1), asked once per device. Any host
 * thread. */
static inline uint32_t pgd_cuda_sm_count() {
    static int known[PGD_CUDA_MAX_DEVICES]; /* 0: not asked yet (atomic) */
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    const bool keep = dev >= 0 && dev < PGD_CUDA_MAX_DEVICES;
    if (keep && (n = __atomic_load_n(&known[dev], __ATOMIC_RELAXED))) return (uint32_t)n;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) {
        (void)cudaGetLastError(); /* this call's own error only: asked again next time */
        return 1;
    }
    if (keep) __atomic_store_n(&known[dev], n, __ATOMIC_RELAXED);
    return (uint32_t)n;
}

/* Allow `kernel` `bytes` of dynamic shared memory (beyond the default 48 KiB) on the current
 * device, once: done[] is the caller's flags for this kernel (a static per kernel instance), so
 * the attribute call stays off every later launch — and off a CUDA graph capture, whose kernels
 * have all run eagerly first. 0 or the runtime's error. Any host thread. */
template <typename... P>
static inline cudaError_t pgd_cuda_smem_once(void (*kernel)(P...), size_t bytes,
                                             bool (&done)[PGD_CUDA_MAX_DEVICES]) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const bool known = dev >= 0 && dev < PGD_CUDA_MAX_DEVICES;
    if (known && __atomic_load_n(&done[dev], __ATOMIC_RELAXED)) return cudaSuccess;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && known) __atomic_store_n(&done[dev], true, __ATOMIC_RELAXED);
    return e;
}

/* ---- programmatic dependent launch (PDL, compute capability 9.0 and later) ----------------
 * A step's kernels are launched with cudaLaunchAttributeProgrammaticStreamSerialization (in a
 * CUDA graph too: capture keeps it as a programmatic edge), so the next kernel's CTAs may be
 * scheduled while the current one's last CTAs still run, instead of after its last CTA has
 * retired and its memory has been flushed — on a decode step of ~260 kernels, each boundary's
 * drain and launch (a few us) is time the weights do not stream. The contract, in every kernel
 * launched by pgd_cuda_launch, pgd_dev_pdl_enter() — griddepcontrol.wait (the previous grid
 * has completed and its writes are visible), then griddepcontrol.launch_dependents (the next
 * kernel may be scheduled early; it waits in turn, so it sees this kernel's writes) — comes
 * before the kernel reads anything an earlier kernel or copy of the stream wrote and before it
 * writes anything; only data constant during a step (weights, norms, biases, and the step's
 * metadata: it is uploaded before the step's first kernel, which waits for that copy in full, and
 * each later kernel starts only after the one before the previous has completed) may be read
 * before it — and the KV cache of a sequence's positions before its first one in the step (a
 * step writes the KV of its own tokens' positions only, and copy-on-write copies run before the
 * step: the tensor-core decode attention reads its rows' earlier keys before the wait). A kernel
 * launched without the attribute (older GPUs, cuBLASLt's kernels, PGD_CUDA_PDL=0) meets a wait that
 * returns at once: the stream order is then the plain one. */
static __device__ __forceinline__ void pgd_dev_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

/* Whether launches on the current device use PDL: compute capability 9.0 or later, unless the
 * environment says PGD_CUDA_PDL=0 (the A/B switch of scripts/gpu-check). Decided once per
 * device; any host thread. */
static inline bool pgd_cuda_pdl_on() {
    static int known[PGD_CUDA_MAX_DEVICES]; /* 0: not asked yet, 1: off, 2: on (atomic) */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= PGD_CUDA_MAX_DEVICES) {
        (void)cudaGetLastError();
        return false;
    }
    int k = __atomic_load_n(&known[dev], __ATOMIC_RELAXED);
    if (!k) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            (void)cudaGetLastError(); /* this call's own error only: none other is pending */
            major = 0;
        }
        k = pgd_cuda_env_switch("PGD_CUDA_PDL", true) && major >= 9 ? 2 : 1;
        __atomic_store_n(&known[dev], k, __ATOMIC_RELAXED);
    }
    return k == 2;
}

/* kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute where pgd_cuda_pdl_on
 * (the kernel must keep the contract above). Returns the launch's error. */
template <typename... P, typename... A>
static inline cudaError_t pgd_cuda_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                          void *stream, A &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    /* grid, block, dynamic shared memory, stream, attributes (positional: the emulator's
     * gridDim and blockDim are macros) */
    const cudaLaunchConfig_t cfg = {
        grid, block, smem, (cudaStream_t)stream, attr, pgd_cuda_pdl_on() ? 1u : 0u};
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

#endif
