/*
 * kernels/cuda/attention_tc.cu — paged attention for query tiles on tensor cores
 * (pgd_cuda_attention_tc, attention.h): the prefill rows of a step. CPU twin:
 * pgd_cuda_attention_tc_twin (attention_twin.c); its arithmetic is attention.h's.
 *
 * One CTA of 4 warps per (KV head, tile): grid (n_kv_head, n_tiles), so the KV heads of a tile
 * start together and the tiles in the host's order (longest first). The tile's (row, query
 * head) pairs are its 64 "slots", slot i = row i / group, head i % group of the KV head's group
 * (slots past rows x group are padding: a zero query, never written). Warp w owns slots 16w to
 * 16w + 15, the M dimension of its WMMA products (16 x 16 x 16, f16 in, f32 accumulation). The
 * keys from 0 to the tile's last position are walked in chunks of PGD_ATTN_CHUNK; per chunk:
 *   1. K sub-tiles of 64 keys are staged in shared memory (f16, rows padded by 8 elements);
 *      each warp multiplies its queries (kept in registers as fragments for the whole kernel)
 *      by them: S[slot][key] in f32 into the score buffer;
 *   2. lanes 2s and 2s + 1 of a warp own its slot s: scale, mask (keys past the slot's
 *      position), the chunk's max (m_c, both lanes' halves, then one exchange), the weights
 *      e^(x - m_c) with attention_math.h's exponential rounded to f16 and written over the
 *      scores in place (row by row, read before written; see write_weights), s_c the f32 sum
 *      of the rounded weights;
 *   3. V sub-tiles are staged the same way; each warp accumulates o_c = P V into fragments
 *      started at zero for the chunk;
 *   4. o_c goes to the warp's part of the score buffer, and the two lanes of a slot fold it
 *      (with m_c, s_c) into their running (m, s, o[D / 2]) in registers by attention_math.h's
 *      fold, chunk 0's partial being the start; a slot without keys in the chunk (possible
 *      only in the tile's last chunk) skips it.
 * At the end out = bf16(o / s). A slot's arithmetic is the same in any slot, tile or batch.
 * The next sub-tile's global loads are issued before the current one's products (registers),
 * so they overlap the tensor cores and the softmax.
 *
 * Shared memory (dynamic, 103 KiB at head_dim 128: two CTAs an SM): the queries
 * f16 [64][D + 8], one K/V sub-tile f16 [64][D + 8], the scores f32 [64][260] (the weights,
 * then o_c, reuse it), the chunk's keys' slab offsets u64 [256] (filled at the chunk's start:
 * on an H200 the per-load block-table lookup and index arithmetic — a division by the block
 * size and 64-bit products for every 16 bytes — were 37% of the kernel's instructions).
 *
 * Invariants: head_dim 64 or 128; group <= 64; a tile's rows consecutive positions of one
 * sequence, n <= 64 / group; keys past the tile's last position are never read (their staged
 * rows are zeros). Threading: any host thread owning the stream.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "common/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"

namespace {

using namespace nvcuda;

constexpr uint32_t kSlots = PGD_ATTN_TC_SLOTS;
constexpr uint32_t kWarps = kSlots / 16, kThreads = 32 * kWarps;
constexpr uint32_t kChunk = PGD_ATTN_CHUNK;
constexpr uint32_t kSub = 64;                 /* keys of a staged sub-tile */
constexpr uint32_t kSStride = kChunk + 4;     /* floats of a score row */
constexpr uint32_t kPStride = 2 * kSStride;   /* f16 weights of a row (in place) */
constexpr uint32_t kHalfPerLane = kChunk / 2; /* scores a lane takes: j = 2k + parity */
static_assert(kChunk % kSub == 0 && kSlots == 64, "4 warps of 16 slots, 64-key sub-tiles");

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> frag_kt;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> frag_v;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

struct tc_args {
    const float *q;
    uint32_t q_stride;
    const uint16_t *kv;
    pgd_kv_geom geom;
    uint32_t layer, n_head, group;
    const int32_t *block_tables;
    uint32_t bt_stride;
    const uint32_t *seq_of;
    const int32_t *pos;
    const pgd_attn_tile *tiles;
    float scale;
    uint16_t *out;
};

/* The dynamic shared memory's parts for head_dim D (byte offsets, each 32-byte aligned as
 * WMMA's pointers must be). */
template <uint32_t D> struct tc_layout {
    static constexpr uint32_t kLd = D + 8; /* f16 elements of a staged row */
    static constexpr size_t q = 0;
    static constexpr size_t kv = q + (size_t)kSlots * kLd * 2;
    static constexpr size_t s = kv + (size_t)kSub * kLd * 2;
    static constexpr size_t rows = s + (size_t)kSlots * kSStride * 4;
    static constexpr size_t bytes = rows + (size_t)kChunk * 8;
    static_assert(kv % 32 == 0 && s % 32 == 0 && (16 * kLd * 2) % 32 == 0, "WMMA alignment");
    static_assert(rows % 8 == 0, "the chunk's key offsets are 8-byte words");
};

/* A staged sub-tile's loads: keys key0 .. key0 + 63 (the chunk's keys k0 .. k0 + 63) of K or V
 * of the CTA's KV head, whose page starts at `base` in every block (pgd_kv_index of block 0,
 * offset 0); rows[k]: key k of the chunk's slab offset (its block's and its row's, from the
 * table the chunk starts by filling); D / 16 pieces of 16 bytes per thread; keys at or past
 * n_keys give zeros and are not read. */
template <uint32_t D> struct sub_tile {
    static constexpr uint32_t kPieces = kSub * D / 8 / kThreads;
    uint4 raw[kPieces];

    __device__ __forceinline__ void load(const tc_args &a, const uint64_t *rows, uint64_t base,
                                         uint32_t k0, uint32_t key0, uint32_t n_keys) {
#pragma unroll
        for (uint32_t u = 0; u < kPieces; u++) {
            const uint32_t piece = threadIdx.x + u * kThreads;
            const uint32_t key = piece / (D / 8), part = piece % (D / 8);
            raw[u] = uint4{0, 0, 0, 0};
            if (key0 + key < n_keys)
                raw[u] = reinterpret_cast<const uint4 *>(a.kv + base + rows[k0 + key])[part];
        }
    }

    __device__ __forceinline__ void store(__half *stage) const {
#pragma unroll
        for (uint32_t u = 0; u < kPieces; u++) {
            const uint32_t piece = threadIdx.x + u * kThreads;
            const uint32_t key = piece / (D / 8), part = piece % (D / 8);
            *reinterpret_cast<uint4 *>(stage + key * tc_layout<D>::kLd + part * 8) = raw[u];
        }
    }
};

/* Step 2 for the lane pair of slot s (this lane's parity p): the chunk's weights over the
 * scores row `srow`, nc of whose keys count (the rest weigh 0). Returns s_c (both lanes), m_c
 * in *mc. The rounded weights overwrite the row in place as f16: weight j at f16 index j, which
 * lies in score j / 2's bytes; in round r the lanes read scores 64r .. 64r + 63 and write f16
 * weights 64r .. 64r + 63 (scores 32r .. 32r + 31), all read in earlier rounds except in round 0,
 * where a __syncwarp between the reads and the writes keeps them apart. */
__device__ __forceinline__ float write_weights(float *srow, uint32_t nc, uint32_t p, float scale,
                                               float *mc) {
    float m = -INFINITY;
    for (uint32_t k = 0; k < kHalfPerLane; k++) {
        const uint32_t j = 2 * k + p;
        if (j < nc) m = pgd_attn_max(m, pgd_rn_mul(srow[j], scale));
    }
    m = pgd_attn_max(m, __shfl_xor_sync(0xffffffffu, m, 1));
    float sum = 0.0f;
    __half *prow = reinterpret_cast<__half *>(srow);
    constexpr uint32_t kRound = 32; /* k per round */
    for (uint32_t r = 0; r < kHalfPerLane / kRound; r++) {
        __half w[kRound];
#pragma unroll
        for (uint32_t i = 0; i < kRound; i++) {
            const uint32_t j = 2 * (r * kRound + i) + p;
            const float x = j < nc ? pgd_rn_mul(srow[j], scale) : 0.0f;
            w[i] = __float2half_rn(j < nc ? pgd_attn_exp(pgd_rn_sub(x, m)) : 0.0f);
            sum = pgd_rn_add(sum, __half2float(w[i]));
        }
        __syncwarp();
#pragma unroll
        for (uint32_t i = 0; i < kRound; i++) prow[2 * (r * kRound + i) + p] = w[i];
        __syncwarp();
    }
    *mc = m;
    return pgd_rn_add(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
}

template <uint32_t D> __global__ void __launch_bounds__(kThreads) attention_tc_kernel(tc_args a) {
    extern __shared__ __align__(128) uint8_t smem[];
    typedef tc_layout<D> L;
    __half *qs = reinterpret_cast<__half *>(smem + L::q);
    __half *stage = reinterpret_cast<__half *>(smem + L::kv);
    float *sbuf = reinterpret_cast<float *>(smem + L::s);
    uint64_t *rows = reinterpret_cast<uint64_t *>(smem + L::rows); /* [kChunk] */
    pgd_dev_pdl_enter();
    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const pgd_attn_tile tile = a.tiles[blockIdx.y];
    const uint32_t kvh = blockIdx.x, group = a.group, n_slots = tile.n * group;
    const int32_t *bt = a.block_tables + (uint64_t)a.seq_of[tile.t0] * a.bt_stride;
    const uint32_t n_keys = (uint32_t)a.pos[tile.t0 + tile.n - 1] + 1;
    const uint32_t bs = a.geom.block_size;
    const uint64_t block_elems = pgd_kv_block_elems(a.geom);
    const uint64_t base_k = pgd_kv_index(a.geom, 0, a.layer, 0, kvh, 0);
    const uint64_t base_v = pgd_kv_index(a.geom, 0, a.layer, 1, kvh, 0);

    /* the queries as f16, zero for padding slots */
    for (uint32_t i = tid; i < kSlots * D / 8; i += kThreads) {
        const uint32_t slot = i / (D / 8), part = i % (D / 8);
        const float *src = a.q + (uint64_t)(tile.t0 + slot / group) * a.q_stride +
                           (uint64_t)(kvh * group + slot % group) * D + part * 8;
        uint32_t w[4];
#pragma unroll
        for (uint32_t e = 0; e < 4; e++) {
            const float x0 = slot < n_slots ? src[2 * e] : 0.0f;
            const float x1 = slot < n_slots ? src[2 * e + 1] : 0.0f;
            w[e] = (uint32_t)__half_as_ushort(__float2half_rn(pgd_attn_f16_clamp(x0))) |
                   (uint32_t)__half_as_ushort(__float2half_rn(pgd_attn_f16_clamp(x1))) << 16;
        }
        *reinterpret_cast<uint4 *>(qs + slot * L::kLd + part * 8) = uint4{w[0], w[1], w[2], w[3]};
    }

    /* this lane's slot (softmax, fold, output) */
    const uint32_t slot = warp * 16 + lane / 2, par = lane % 2;
    const bool real = slot < n_slots;
    const uint32_t n_ctx = real ? (uint32_t)a.pos[tile.t0 + slot / group] + 1 : n_keys;
    float m = 0.0f, l = 0.0f, o[D / 2];
    float *srow = sbuf + slot * kSStride;
    float *swarp = sbuf + warp * 16 * kSStride;

    __syncthreads(); /* the queries staged */
    frag_a qf[D / 16];
#pragma unroll
    for (uint32_t k = 0; k < D / 16; k++)
        wmma::load_matrix_sync(qf[k], qs + warp * 16 * L::kLd + k * 16, L::kLd);

    sub_tile<D> next;
    for (uint32_t c0 = 0; c0 < n_keys; c0 += kChunk) {
        const uint32_t n_sub = (min(kChunk, n_keys - c0) + kSub - 1) / kSub;
        frag_acc oc[D / 16];
#pragma unroll
        for (uint32_t f = 0; f < D / 16; f++) wmma::fill_fragment(oc[f], 0.0f);
        const uint32_t nc = n_ctx > c0 ? min(kChunk, n_ctx - c0) : 0; /* the slot's keys here */
        float ca = 1.0f, cb = 1.0f; /* the fold's coefficients for o */
        /* the chunk's keys' slab offsets, once for its sub-tiles' loads (the previous chunk's
         * last read of the table was before its last __syncthreads) */
        for (uint32_t k = tid; k < kChunk; k += kThreads) {
            const uint32_t p = c0 + k;
            rows[k] = p < n_keys
                          ? (uint64_t)(uint32_t)bt[p / bs] * block_elems + (uint64_t)(p % bs) * D
                          : 0;
        }
        __syncthreads();
        next.load(a, rows, base_k, 0, c0, n_keys);
        for (uint32_t e = 0; e < 2 * n_sub; e++) {
            const uint32_t u = e % n_sub; /* e < n_sub: K sub-tile u, else V sub-tile u */
            __syncthreads();              /* the previous sub-tile's products are done */
            next.store(stage);
            __syncthreads();
            if (e + 1 < 2 * n_sub) {
                const uint32_t un = (e + 1) % n_sub;
                next.load(a, rows, e + 1 < n_sub ? base_k : base_v, un * kSub, c0 + un * kSub,
                          n_keys);
            }
            if (e < n_sub) { /* scores of keys c0 + 64u .. + 63 */
#pragma unroll
                for (uint32_t f = 0; f < kSub / 16; f++) {
                    frag_acc acc;
                    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
                    for (uint32_t k = 0; k < D / 16; k++) {
                        frag_kt kf;
                        wmma::load_matrix_sync(kf, stage + f * 16 * L::kLd + k * 16, L::kLd);
                        wmma::mma_sync(acc, qf[k], kf, acc);
                    }
                    wmma::store_matrix_sync(swarp + u * kSub + f * 16, acc, kSStride,
                                            wmma::mem_row_major);
                }
                if (e + 1 == n_sub) { /* the chunk's scores are in: its weights */
                    __syncwarp();
                    float mc;
                    const float sc = write_weights(srow, nc, par, a.scale, &mc);
                    if (nc && c0 == 0) {
                        m = mc;
                        l = sc;
                    } else if (nc) { /* o's fold waits for o_c */
                        m = pgd_attn_fold_coef(m, mc, &ca, &cb);
                        l = pgd_attn_fold(l, ca, sc, cb);
                    }
                }
            } else { /* o_c += P V over keys c0 + 64u .. + 63 */
                const __half *pw = reinterpret_cast<const __half *>(swarp) + u * kSub;
#pragma unroll
                for (uint32_t k = 0; k < kSub / 16; k++) {
                    frag_a pf;
                    wmma::load_matrix_sync(pf, pw + k * 16, kPStride);
#pragma unroll
                    for (uint32_t f = 0; f < D / 16; f++) {
                        frag_v vf;
                        wmma::load_matrix_sync(vf, stage + k * 16 * L::kLd + f * 16, L::kLd);
                        wmma::mma_sync(oc[f], pf, vf, oc[f]);
                    }
                }
            }
        }
        /* o_c to the warp's rows, then the fold by the slot's two lanes */
        __syncwarp(); /* every lane has read the weights */
#pragma unroll
        for (uint32_t f = 0; f < D / 16; f++)
            wmma::store_matrix_sync(swarp + f * 16, oc[f], kSStride, wmma::mem_row_major);
        __syncwarp();
        if (nc) {
            const float *ocrow = srow + par * (D / 2);
#pragma unroll
            for (uint32_t d = 0; d < D / 2; d++)
                o[d] = c0 == 0 ? ocrow[d] : pgd_attn_fold(o[d], ca, ocrow[d], cb);
        }
    }
    if (!real) return;
    uint16_t *orow =
        a.out + ((uint64_t)(tile.t0 + slot / group) * a.n_head + kvh * group + slot % group) * D +
        par * (D / 2);
#pragma unroll
    for (uint32_t d = 0; d < D / 2; d++)
        orow[d] = __bfloat16_as_ushort(__float2bfloat16_rn(pgd_rn_div(o[d], l)));
}

template <uint32_t D> int launch(const tc_args &a, uint32_t n_tiles, cudaStream_t stream) {
    const size_t bytes = tc_layout<D>::bytes;
    PGD_CUDA_TRY(cudaFuncSetAttribute(attention_tc_kernel<D>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    /* (KV head, tile): the KV heads of a tile start together, and the tiles in their order (the
     * host lists them longest first) */
    PGD_CUDA_TRY(pgd_cuda_launch(attention_tc_kernel<D>, dim3(a.geom.n_kv_head, n_tiles), kThreads,
                                 bytes, stream, a));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_attention_tc(const float *q, uint32_t q_stride, const uint16_t *kv,
                                     pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                     const int32_t *block_tables, uint32_t bt_stride,
                                     const uint32_t *seq_of, const int32_t *pos,
                                     const pgd_attn_tile *tiles, uint32_t n_tiles, float scale,
                                     uint16_t *out, void *stream) {
    const uint32_t D = geom.head_dim;
    if (geom.n_kv_head == 0 || n_head % geom.n_kv_head || n_head == 0 ||
        !pgd_attn_tc_rows(n_head / geom.n_kv_head, D) || geom.block_size == 0 ||
        layer >= geom.n_layer || n_tiles > 65535)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA tensor-core attention: %u heads over %u KV heads, head_dim %u "
                             "(64 or 128, groups of at most %u), block size %u, layer %u of %u, "
                             "%u tiles (at most 65535)",
                             n_head, geom.n_kv_head, D, PGD_ATTN_TC_SLOTS, geom.block_size, layer,
                             geom.n_layer, n_tiles);
    if ((uintptr_t)kv % 16)
        return pgd_error_set(PGD_EINVAL, "CUDA attention: the KV slab is not 16-byte aligned");
    if (n_tiles == 0) return 0;
    const tc_args a = {
        q,         q_stride, kv,  geom,  layer, n_head, n_head / geom.n_kv_head, block_tables,
        bt_stride, seq_of,   pos, tiles, scale, out};
    return D == 64 ? launch<64>(a, n_tiles, (cudaStream_t)stream)
                   : launch<128>(a, n_tiles, (cudaStream_t)stream);
}
