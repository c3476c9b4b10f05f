/*
 * kernels/cuda/dummy.h — dummy weights filled on the device from the counter hash of
 * common/counter_hash.h (the CPU fills its f16 copies with the same function: the values are
 * exact in both types, so the two devices hold the same weights). Asynchronous.
 */
#ifndef PGD_KERNELS_CUDA_DUMMY_H
#define PGD_KERNELS_CUDA_DUMMY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = bf16(pgd_dummy_value(seed, tensor, i, shift)) for i < n. */
int pgd_cuda_dummy_bf16(uint64_t seed, uint32_t tensor, int shift, uint64_t n, uint16_t *dst,
                        void *stream);
/* dst[i] = bf16(pgd_dummy_value(seed, tensor, first + i, shift)) for i < n: a part of a tensor
 * (one expert's rows of a 3-D expert tensor, engine/model/dummy.h) placed where the backend
 * wants it. */
int pgd_cuda_dummy_bf16_at(uint64_t seed, uint32_t tensor, int shift, uint64_t first, uint64_t n,
                           uint16_t *dst, void *stream);
/* dst[i] = base + pgd_dummy_value(seed, tensor, i, 10) for i < n (norms: base 1; biases: 0). */
int pgd_cuda_dummy_f32(uint64_t seed, uint32_t tensor, float base, uint64_t n, float *dst,
                       void *stream);

#ifdef __cplusplus
}
#endif

#endif
