/* Emulator: the asynchronous copies of <cuda_pipeline.h> (cp.async). A copy is only queued when
 * issued and happens when a __pipeline_wait_prior covers its commit group, so a kernel that
 * reads the destination before waiting (or another thread's copy before the barrier after that
 * wait) reads the poisoned shared memory and fails its test, as it could on a GPU. */
#pragma once
#include <cstdint>
#include <cstring>
#include "../emu.h"

inline void __pipeline_memcpy_async(void *dst, const void *src, size_t size, size_t zfill = 0) {
    if ((size != 4 && size != 8 && size != 16) || zfill > size)
        emu_error("__pipeline_memcpy_async of %zu bytes (zfill %zu): 4, 8 or 16", size, zfill);
    if ((uintptr_t)dst % size || (uintptr_t)src % size)
        emu_error("__pipeline_memcpy_async: %p <- %p not %zu-byte aligned", dst, src, size);
    emu_fiber *f = emu_cur;
    if (f->n_pipe == EMU_PIPE_MAX)
        emu_error("more than %d asynchronous copies pending in one thread", EMU_PIPE_MAX);
    f->pipe[f->n_pipe++] = {dst, src, (uint32_t)size, (uint32_t)zfill, f->pipe_groups};
}

inline void __pipeline_commit() {
    emu_cur->pipe_groups++;
}

/* Every copy of the commit groups before the newest `prior` ones is done. */
inline void __pipeline_wait_prior(size_t prior) {
    emu_fiber *f = emu_cur;
    const unsigned done_below = prior >= f->pipe_groups ? 0 : f->pipe_groups - (unsigned)prior;
    unsigned kept = 0;
    for (unsigned i = 0; i < f->n_pipe; i++) {
        const emu_pipe_op &op = f->pipe[i];
        if (op.group < done_below) {
            std::memcpy(op.dst, op.src, op.n - op.zfill);
            std::memset((char *)op.dst + (op.n - op.zfill), 0, op.zfill);
        } else {
            f->pipe[kept++] = op;
        }
    }
    f->n_pipe = kept;
}
