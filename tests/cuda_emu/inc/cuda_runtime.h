/* Emulator: what a kernel translation unit sees instead of nvcc's cuda_runtime.h. */
#pragma once
#include <cuda_runtime_api.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include "../emu.h"

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __align__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__    __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif

#define threadIdx (emu_cur->tid)
#define blockIdx  emu_blockIdx
#define blockDim  emu_blockDim
#define gridDim   emu_gridDim
#define warpSize  32

inline void __syncthreads() {
    emu_syncthreads();
}

/* atomics: a CTA's threads run one at a time between synchronisations, and CTAs one after
 * another, so a plain read-modify-write is atomic here */
inline unsigned atomicAdd(unsigned *p, unsigned v) {
    const unsigned old = *p;
    *p = old + v;
    return old;
}
inline int atomicAdd(int *p, int v) {
    const int old = *p;
    *p = old + v;
    return old;
}

/* cache-hinted loads: plain loads here (the hints only steer the GPU's caches) */
template <class T> inline T __ldg(const T *p) {
    return *p;
}
template <class T> inline T __ldcs(const T *p) {
    return *p;
}
template <class T> inline T __ldcg(const T *p) {
    return *p;
}

/* a memory fence: CTAs run one after another here, so every write is already visible */
inline void __threadfence() {}

/* a warp's barrier: every lane of the warp meets here (full masks only, as the shuffles) */
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    emu_shfl(0, -1, mask);
}

/* Single rounded operations: values pass through an empty asm so the host compiler (run with
 * -ffp-contract=fast, as nvcc's -fmad=true) can never fuse them with a neighbour, as nvcc never
 * fuses the _rn intrinsics. Plain expressions in kernels may still be contracted, as by nvcc. */
template <class T> static inline T emu_opq(T x) {
    asm volatile("" : "+x"(x));
    return x;
}
inline float __fadd_rn(float a, float b) {
    return emu_opq(emu_opq(a) + emu_opq(b));
}
inline float __fsub_rn(float a, float b) {
    return emu_opq(emu_opq(a) - emu_opq(b));
}
inline float __fmul_rn(float a, float b) {
    return emu_opq(emu_opq(a) * emu_opq(b));
}
inline float __fdiv_rn(float a, float b) {
    return emu_opq(emu_opq(a) / emu_opq(b));
}
inline float __fmaf_rn(float a, float b, float c) {
    return emu_opq(std::fma(emu_opq(a), emu_opq(b), emu_opq(c)));
}
inline double __dadd_rn(double a, double b) {
    return emu_opq(emu_opq(a) + emu_opq(b));
}
inline double __dsub_rn(double a, double b) {
    return emu_opq(emu_opq(a) - emu_opq(b));
}
inline double __dmul_rn(double a, double b) {
    return emu_opq(emu_opq(a) * emu_opq(b));
}
inline double __ddiv_rn(double a, double b) {
    return emu_opq(emu_opq(a) / emu_opq(b));
}
inline double __dsqrt_rn(double a) {
    return emu_opq(std::sqrt(emu_opq(a)));
}
inline float __double2float_rn(double a) {
    return emu_opq((float)emu_opq(a));
}
inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float __uint_as_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline int __float_as_int(float f) {
    int u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float __int_as_float(int u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/* PRMT's default mode: byte i of the result is byte (s >> 4 i) & 7 of the 8 bytes y:x (x's the
 * lower four) */
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (unsigned i = 0; i < 4; i++) r |= (unsigned)(v >> 8 * (s >> 4 * i & 7) & 0xFFu) << 8 * i;
    return r;
}

/* CUDA's integer/float min and max overloads */
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b) {
    static_assert(std::is_integral<A>::value == std::is_integral<B>::value, "min of mixed kinds");
    return a < b ? (std::common_type_t<A, B>)a : (std::common_type_t<A, B>)b;
}
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b) {
    static_assert(std::is_integral<A>::value == std::is_integral<B>::value, "max of mixed kinds");
    return a > b ? (std::common_type_t<A, B>)a : (std::common_type_t<A, B>)b;
}

/* warp shuffles (full warps only, width 32) */
template <class T> inline uint64_t emu_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffle of a wide type");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> inline T emu_unbits(uint64_t u) {
    T v;
    std::memcpy(&v, &u, sizeof v);
    return v;
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    if (width != 32) emu_error("__shfl_sync width %d not emulated", width);
    return emu_unbits<T>(emu_shfl(emu_bits(v), src & 31, mask));
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    if (width != 32) emu_error("__shfl_down_sync width %d not emulated", width);
    const int src = (int)(emu_cur->lane + delta);
    return emu_unbits<T>(emu_shfl(emu_bits(v), src < 32 ? src : -1, mask));
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    if (width != 32) emu_error("__shfl_up_sync width %d not emulated", width);
    const int src = (int)emu_cur->lane - (int)delta;
    return emu_unbits<T>(emu_shfl(emu_bits(v), src >= 0 ? src : -1, mask));
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    if (width != 32) emu_error("__shfl_xor_sync width %d not emulated", width);
    return emu_unbits<T>(
        emu_shfl(emu_bits(v), (int)((emu_cur->lane ^ (unsigned)lane_mask) & 31), mask));
}

/* warp votes (full warps only), by a butterfly of shuffles */
inline int __any_sync(unsigned mask, int pred) {
    unsigned v = pred ? 1u : 0u;
    for (int s = 16; s > 0; s /= 2) v |= __shfl_xor_sync(mask, v, s);
    return v != 0;
}
inline int __all_sync(unsigned mask, int pred) {
    unsigned v = pred ? 1u : 0u;
    for (int s = 16; s > 0; s /= 2) v &= __shfl_xor_sync(mask, v, s);
    return v != 0;
}

/* cuda_runtime.h's templated conveniences over kernel functions */
template <class T> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, T *f) {
    return ::cudaFuncGetAttributes(a, (const void *)f);
}
template <class T> inline cudaError_t cudaFuncSetAttribute(T *f, cudaFuncAttribute attr, int v) {
    return ::cudaFuncSetAttribute((const void *)f, attr, v);
}

/* the launch: K<<<grid, block, smem, stream>>>(args) becomes emu_launch(emu_cfg(...), K, "K", args)
 */
struct emu_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    emu_cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0)
        : grid(g), block(b), smem(s), stream(st) {}
};
template <class T> inline void emu_arg_check(const T &, int, const char *) {}
template <class T> inline void emu_arg_check(T *const &p, int i, const char *k) {
    emu_check_kernel_ptr((const void *)p, i, k);
}
template <class K, class... A>
inline cudaError_t emu_launch_as(emu_cfg c, bool pdl, K *k, const char *name, A... a) {
    int i = 0;
    (emu_arg_check(a, i++, name), ...);
    return emu_submit_kernel(
        c.grid, c.block, c.smem, c.stream, (const void *)k, name, [=]() { k(a...); }, pdl);
}
template <class K, class... A> inline void emu_launch(emu_cfg c, K *k, const char *name, A... a) {
    (void)emu_launch_as(c, false, k, name, a...);
}

/* cudaLaunchKernelEx (cuda_runtime.h's template): the arguments converted to the kernel's
 * parameter types, as the real one does; the programmatic-serialization attribute is recorded
 * so the kernel is checked to wait (rt.cpp). The kernel's name is not known here. */
#pragma push_macro("gridDim")
#pragma push_macro("blockDim")
#undef gridDim
#undef blockDim
template <class... P, class... A>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *c, void (*k)(P...), A &&...a) {
    bool pdl = false;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == cudaLaunchAttributeProgrammaticStreamSerialization &&
            c->attrs[i].val.programmaticStreamSerializationAllowed)
            pdl = true;
    return emu_launch_as(emu_cfg(c->gridDim, c->blockDim, c->dynamicSmemBytes, c->stream), pdl, k,
                         "a kernel launched by cudaLaunchKernelEx", ((P)a)...);
}
#pragma pop_macro("blockDim")
#pragma pop_macro("gridDim")

/* programmatic dependent launch inside a kernel: CTAs run one after another and kernels in
 * stream order here, so the wait has nothing to wait for; it is counted (rt.cpp) */
inline void cudaGridDependencySynchronize() {
    emu_pdl_wait();
}
inline void cudaTriggerProgrammaticLaunchCompletion() {}
