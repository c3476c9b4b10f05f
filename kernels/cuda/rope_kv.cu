/*
 * kernels/cuda/rope_kv.cu — bias + RoPE + the KV write of one layer, fused: grid.x strides over
 * the tokens, and a token's work is spread over the grid.y CTAs of its column (up to 64: one
 * element or pair a thread; one CTA a token took 10 us on an H200). Owns nothing. CPU twin:
 * rope_kv_twin.c.
 *
 * Work of a token, each element read and written by one thread (q is updated in place, so no
 * thread may read what another writes): (1) the rotated pairs of every q and k head, one pair a
 * thread; (2) the dimensions >= rope_dim of every q and k head; (3) v. When head_dim and
 * rope_dim are multiples of 8 and the buffers 16-byte aligned (every model pagoda serves), the
 * vector form takes 4 pairs, dimensions or elements a thread in 16-byte loads and stores: the
 * scalar form kept ~6 loads of 4 bytes a thread in flight and moved a 1k-token prefill's rows at
 * ~46% of the H200's bandwidth (25 us a layer).
 *
 * Invariants (bit-exact with the twin, NaN payloads aside):
 *   - bias added first (one f32 add, __fadd_rn), then pgd_rope_apply's rotation
 *     a' = a*c - b*s, b' = a*s + b*c with every product rounded (__fmul_rn, no FMA);
 *   - q goes back into qkv; k and v go to the f16 slab with round to nearest even
 *     (__float2half_rn; pgd_f32_to_f16 on the CPU), at pgd_kv_slot_index(geom, slots[t], ...);
 *     the k and v parts of qkv are left as they were;
 *   - a token with slots[t] < 0 (a padding row) writes q but nothing to the slab.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/rope_math.cuh"

namespace {

/* Four f32 from 16 aligned bytes, and back. */
__device__ __forceinline__ void ld4(const float *p, float *v) {
    const float4 x = *reinterpret_cast<const float4 *>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
__device__ __forceinline__ void st4(float *p, const float *v) {
    float4 x;
    x.x = v[0], x.y = v[1], x.z = v[2], x.w = v[3];
    *reinterpret_cast<float4 *>(p) = x;
}
/* The four elements of row at idx, plus the bias's (one rounded add each) when there is one. */
__device__ __forceinline__ void ld4_biased(const float *row, const float *bias, uint32_t idx,
                                           float *v) {
    ld4(row + idx, v);
    if (bias) {
        float bz[4];
        ld4(bias + idx, bz);
#pragma unroll
        for (int e = 0; e < 4; e++) v[e] = __fadd_rn(v[e], bz[e]);
    }
}
/* Four f32 as f16 (pgd_dev_kv_f16) into 8 aligned bytes. */
__device__ __forceinline__ void st4_f16(uint16_t *p, const float *v) {
    uint2 w;
    w.x = (uint32_t)pgd_dev_kv_f16(v[0]) | (uint32_t)pgd_dev_kv_f16(v[1]) << 16;
    w.y = (uint32_t)pgd_dev_kv_f16(v[2]) | (uint32_t)pgd_dev_kv_f16(v[3]) << 16;
    *reinterpret_cast<uint2 *>(p) = w;
}

/* The vector form (rope_kv's vec): a thread's unit is 4 rotated pairs, 4 unrotated dimensions or 4
 * elements of v — 16-byte loads and stores instead of 4-byte ones, each element's arithmetic
 * the scalar form's. Pairs i .. i + 3 (i a multiple of 4) lie in two aligned spans of 4 floats:
 * at 2i and 2i + 4 (interleaved: a_k, b_k = span[2k], span[2k + 1]) or at i and half + i (neox:
 * a_k = first[k], b_k = second[k]). */
__device__ void rope_kv_row4(float *row, const float *bias, const float *cs, int64_t slot,
                             uint32_t n_head, uint32_t n_kv_head, uint32_t D, uint32_t rope_dim,
                             bool neox, uint16_t *kv, const pgd_kv_geom &geom, uint32_t layer,
                             uint32_t u0, uint32_t du) {
    const uint32_t half = rope_dim / 2, rest = D - rope_dim, n_qk = n_head + n_kv_head;
    /* (1) pairs 4j .. 4j + 3 of head h (q heads, then k heads) */
    for (uint32_t u = u0; u < n_qk * (half / 4); u += du) {
        const uint32_t h = u / (half / 4), i = 4 * (u % (half / 4));
        const uint32_t off0 = h * D + (neox ? i : 2 * i),
                       off1 = h * D + (neox ? half + i : 2 * i + 4);
        float v[8], c[8];
        ld4_biased(row, bias, off0, v), ld4_biased(row, bias, off1, v + 4);
        ld4(cs + 2 * i, c), ld4(cs + 2 * i + 4, c + 4); /* (cos, sin) of pairs i .. i + 3 */
        if (neox) /* (indices known at compile time: v stays in registers) */
#pragma unroll
            for (int k = 0; k < 4; k++) pgd_dev_rope_rotate(v[k], v[4 + k], c[2 * k], c[2 * k + 1]);
        else
#pragma unroll
            for (int k = 0; k < 4; k++)
                pgd_dev_rope_rotate(v[2 * k], v[2 * k + 1], c[2 * k], c[2 * k + 1]);
        if (h < n_head) {
            st4(row + off0, v), st4(row + off1, v + 4);
        } else if (slot >= 0) {
            uint16_t *k = kv + pgd_kv_slot_index(geom, slot, layer, 0, h - n_head);
            st4_f16(k + (off0 - h * D), v), st4_f16(k + (off1 - h * D), v + 4);
        }
    }
    /* (2) dimensions rope_dim + 4j .. + 3 of head h, unrotated */
    for (uint32_t u = u0; u < n_qk * (rest / 4); u += du) {
        const uint32_t h = u / (rest / 4), d = rope_dim + 4 * (u % (rest / 4)), idx = h * D + d;
        float v[4];
        ld4_biased(row, bias, idx, v);
        if (h < n_head) {
            if (bias) st4(row + idx, v);
        } else if (slot >= 0) {
            st4_f16(kv + pgd_kv_slot_index(geom, slot, layer, 0, h - n_head) + d, v);
        }
    }
    /* (3) elements 4j .. 4j + 3 of v head h */
    if (slot >= 0)
        for (uint32_t u = u0; u < n_kv_head * D / 4; u += du) {
            const uint32_t h = 4 * u / D, d = 4 * u % D, idx = n_qk * D + 4 * u;
            float v[4];
            ld4_biased(row, bias, idx, v);
            st4_f16(kv + pgd_kv_slot_index(geom, slot, layer, 1, h) + d, v);
        }
}

/* qkv: f32 [T][(n_head + 2 * n_kv_head) * D]; bias: f32 [(n_head + 2 * n_kv_head) * D] or NULL;
 * cos_sin: f32 [n_pos][rope_dim]; pos, slots: [T]; kv: the f16 slab (kv_layout.h). vec: the
 * vector form (rope_kv_row4). */
__global__ void rope_kv_kernel(float *qkv, const float *bias, const float *cos_sin,
                               const int32_t *pos, const int64_t *slots, uint32_t T,
                               uint32_t n_head, uint32_t n_kv_head, uint32_t D, uint32_t rope_dim,
                               bool neox, uint16_t *kv, pgd_kv_geom geom, uint32_t layer,
                               bool vec) {
    /* the first row's position and slot: the step's metadata, constant during the step, so
     * loaded before the wait for the previous kernel (cuda_util.cuh) — the cos/sin loads that
     * depend on the position then go out with the row's own */
    const uint32_t t0 = blockIdx.x;
    const int32_t pos0 = t0 < T ? pos[t0] : -1;
    const int64_t slot0 = t0 < T ? slots[t0] : -1;
    pgd_dev_pdl_enter();
    const uint32_t half = rope_dim / 2, rest = D - rope_dim, n_qk = n_head + n_kv_head;
    const uint64_t width = (uint64_t)(n_qk + n_kv_head) * D;
    /* a row's work is spread over the CTAs of grid.y (a row's threads wait for few loads each) */
    const uint32_t u0 = blockIdx.y * blockDim.x + threadIdx.x, du = gridDim.y * blockDim.x;
    for (uint32_t t = t0; t < T; t += gridDim.x) {
        const int32_t p = t == t0 ? pos0 : pos[t];
        if (p < 0) continue; /* padding row (uniform in the block) */
        float *row = qkv + t * width;
        const float *cs = cos_sin + (uint64_t)p * rope_dim;
        const int64_t slot = t == t0 ? slot0 : slots[t];
        if (vec) {
            rope_kv_row4(row, bias, cs, slot, n_head, n_kv_head, D, rope_dim, neox, kv, geom, layer,
                         u0, du);
            continue;
        }
        /* (1) pair i of head h (q heads, then k heads) */
        for (uint32_t u = u0; u < n_qk * half; u += du) {
            const uint32_t h = u / half, i = u % half;
            uint32_t i0, i1;
            pgd_rope_pair(i, half, neox, &i0, &i1);
            i0 += h * D, i1 += h * D;
            float a = row[i0], b = row[i1];
            if (bias) a = __fadd_rn(a, bias[i0]), b = __fadd_rn(b, bias[i1]);
            pgd_dev_rope_rotate(a, b, cs[2 * i], cs[2 * i + 1]);
            if (h < n_head) {
                row[i0] = a;
                row[i1] = b;
            } else if (slot >= 0) {
                uint16_t *k = kv + pgd_kv_slot_index(geom, slot, layer, 0, h - n_head);
                k[i0 - h * D] = pgd_dev_kv_f16(a);
                k[i1 - h * D] = pgd_dev_kv_f16(b);
            }
        }
        /* (2) dimension rope_dim + d of head h, unrotated */
        for (uint32_t u = u0; u < n_qk * rest; u += du) {
            const uint32_t h = u / rest, d = rope_dim + u % rest, idx = h * D + d;
            const float v = bias ? __fadd_rn(row[idx], bias[idx]) : row[idx];
            if (h < n_head) {
                if (bias) row[idx] = v;
            } else if (slot >= 0)
                kv[pgd_kv_slot_index(geom, slot, layer, 0, h - n_head) + d] = pgd_dev_kv_f16(v);
        }
        /* (3) element d of v head h */
        if (slot >= 0)
            for (uint32_t u = u0; u < n_kv_head * D; u += du) {
                const uint32_t h = u / D, d = u % D, idx = n_qk * D + u;
                const float v = bias ? __fadd_rn(row[idx], bias[idx]) : row[idx];
                kv[pgd_kv_slot_index(geom, slot, layer, 1, h) + d] = pgd_dev_kv_f16(v);
            }
    }
}

} // namespace

extern "C" int pgd_cuda_rope_kv(float *qkv, const float *bias, const float *cos_sin,
                                const int32_t *pos, const int64_t *slots, uint32_t T,
                                uint32_t n_head, uint32_t n_kv_head, uint32_t head_dim,
                                uint32_t rope_dim, bool neox, uint16_t *kv, pgd_kv_geom geom,
                                uint32_t layer, void *stream) {
    if (rope_dim > head_dim || rope_dim % 2 || geom.head_dim != head_dim ||
        geom.n_kv_head != n_kv_head || geom.block_size == 0 || layer >= geom.n_layer)
        return pgd_error_set(PGD_EINVAL,
                             "rope_kv: head_dim %u, rope_dim %u, %u KV heads against a slab of "
                             "head_dim %u, %u KV heads, block size %u, %u layers (layer %u)",
                             head_dim, rope_dim, n_kv_head, geom.head_dim, geom.n_kv_head,
                             geom.block_size, geom.n_layer, layer);
    if (T == 0) return 0;
    /* the vector form: every span of 4 floats (and 4 halves of the slab) aligned */
    const bool vec = head_dim % 8 == 0 && rope_dim % 8 == 0 && (uintptr_t)qkv % 16 == 0 &&
                     (uintptr_t)bias % 16 == 0 && (uintptr_t)cos_sin % 16 == 0 &&
                     (uintptr_t)kv % 16 == 0;
    /* the CTAs a token's largest part needs (pairs, unrotated dims or v), at most 64 */
    const uint32_t n_qk = n_head + n_kv_head;
    const uint32_t most =
        max(max(n_qk * (rope_dim / 2), n_qk * (head_dim - rope_dim)), n_kv_head * head_dim) /
        (vec ? 4 : 1);
    const dim3 grid(pgd_cuda_grid(T, 1), min(pgd_cuda_grid(most, PGD_CUDA_THREADS), 64u));
    PGD_CUDA_TRY(pgd_cuda_launch(rope_kv_kernel, grid, PGD_CUDA_THREADS, 0, stream, qkv, bias,
                                 cos_sin, pos, slots, T, n_head, n_kv_head, head_dim, rope_dim,
                                 neox, kv, geom, layer, vec));
    return 0;
}
