/* tests/cuda_emu/emu.h — interface between the emulated kernels (kernels/cuda/*.cu rewritten by
 * conv.py and compiled as C++) and the emulator runtime (rt.cpp). A testing tool, never linked into
 * pagoda. */
#pragma once
#include <cuda_runtime_api.h> /* the real CUDA runtime API header: real types and enums */
#include <cstddef>
#include <cstdint>
#include <functional>

/* One asynchronous copy into shared memory (__pipeline_memcpy_async), pending until a
 * __pipeline_wait_prior covers its commit group. */
struct emu_pipe_op {
    void *dst;
    const void *src;
    uint32_t n, zfill, group;
};
enum { EMU_PIPE_MAX = 64 }; /* copies a thread may have pending */

struct emu_fiber {
    void *sp;    /* saved stack pointer while switched out */
    char *stack; /* lowest usable byte */
    size_t stack_size;
    int state; /* EMU_READY, EMU_BAR, EMU_SHFL, EMU_DONE */
    uint3 tid;
    unsigned lin, lane, warp;
    unsigned nbar; /* __syncthreads passed */
    uint64_t shfl_val, shfl_out;
    int shfl_src; /* lane to read from, -1: own value */
    unsigned shfl_mask;
    void *asan_fake;
    emu_pipe_op pipe[EMU_PIPE_MAX]; /* pending asynchronous copies, in issue order */
    unsigned n_pipe, pipe_groups;   /* how many; commit groups closed so far */
};
enum { EMU_READY = 0, EMU_BAR = 1, EMU_SHFL = 2, EMU_DONE = 3 };

extern emu_fiber *emu_cur;
extern uint3 emu_blockIdx;
extern dim3 emu_blockDim, emu_gridDim;

void emu_syncthreads();
uint64_t emu_shfl(uint64_t v, int src_lane, unsigned mask);
void *emu_smem_get(int id, size_t size, size_t align);
void *emu_dyn_smem();
void emu_check_bounds(unsigned max_threads);
void emu_check_kernel_ptr(const void *p, int idx, const char *kname);
cudaError_t emu_submit_kernel(dim3 grid, dim3 block, size_t smem, cudaStream_t s, const void *func,
                              const char *name, std::function<void()> body, bool pdl = false);
void emu_pdl_wait(); /* a thread's cudaGridDependencySynchronize */
void emu_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
