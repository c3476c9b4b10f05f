/*
 * kernels/cuda/attention_tc.cu — paged attention for query tiles on tensor cores
 * (pgd_cuda_attention_tc, attention.h): the prefill rows of a step. CPU twin:
 * pgd_cuda_attention_tc_twin (attention_twin.c); the arithmetic is attention.h's.
 *
 * One CTA of 4 warps per (KV head, tile): grid (n_kv_head, n_tiles), so the KV heads of a tile
 * start together and the tiles in the host's order (longest first). The tile's (row, query
 * head) pairs are its 64 "slots", slot i = row i / group, head i % group of the KV head's group
 * (slots past rows x group are padding: a zero query, never written). Warp w owns slots 16w to
 * 16w + 15: the M dimension of its mma.sync products (mma_sync.cuh: 16 x 8 x 16, f16 in, f32
 * accumulation), lane L the two slots 16w + L / 4 and 16w + L / 4 + 8. The keys from 0 to the
 * tile's last position are walked in blocks of PGD_ATTN_TC_KEYS (64); per block:
 *   1. the block's K rows arrive in shared memory (cp.async, issued during the previous
 *      block's P V), its V rows start arriving;
 *   2. S = Q K^T in registers: 8 accumulator tiles of 16 x 8 a warp, the queries and keys
 *      read from shared memory by ldmatrix;
 *   3. the online softmax, on the accumulators where they are: x = S * scale * log2(e) (keys
 *      past a slot's position: -inf), the block's max per slot (the lane's 16, then the four
 *      lanes of the slot's row by two shuffles), m' = max(m, that), alpha = 2^(m - m'),
 *      p = 2^(x - m'); l <- l * alpha + the lane's sum of p; o <- o * alpha;
 *   4. O += P V: p rounded to f16 and paired are already the A registers of the product (the
 *      accumulator layout of two 16 x 8 tiles is the A layout of one 16 x 16 operand), V read by
 *      ldmatrix .trans; meanwhile the next block's K rows arrive.
 * At the end l is summed over the slot's four lanes and out = bf16(o * (1 / l)). Nothing of a
 * slot's arithmetic depends on its place in the tile, the tile's size or the batch: a block
 * past a slot's position (in a tile with later rows) leaves its m, l and o exactly as they were
 * (alpha 1, p 0).
 *
 * The wide form (MT = 2; the backend's default since an H200 measured it on 2026-12-04: a
 * 2k-token prompt's attention in 134 us against 168, the prefill's median 41.6k tokens/s
 * against 39.9k; PGD_CUDA_ATTN_TC_WIDE=0 the narrow form): 128 slots a CTA, warp w the two 16-slot
 * tiles 32w .. 32w + 31, so every K and V fragment a warp reads by ldmatrix feeds two products, and
 * each block of keys is copied to shared memory once for twice the queries (half the L2 reads of K
 * and V a FLOP: a 2k prompt's tiles of 64 slots read ~0.5 GB of K and V a layer). Its block loop
 * issues 4.95 instructions a product at head_dim 128 on sm_90a (6.21 in the narrow form); 255
 * registers, no spills, 2 CTAs an SM (8 warps, against 12). A slot's arithmetic is the same in both
 * forms: the same bits.
 *
 * Shared memory (dynamic, 52 KiB at head_dim 128, 69 KiB in the wide form): the queries f16
 * [64 MT][D + 8], one block of K and one of V f16 [64][D + 8] (rows padded by 16 bytes:
 * ldmatrix's eight row addresses then fall in distinct banks), and two blocks' keys' slab
 * offsets u64 [2][64] (one block-table lookup and division per key, not per 16-byte load; the
 * entry loaded a block ahead, so its latency is not on the way to the block's barrier).
 *
 * Invariants: head_dim 64 or 128; group <= 64; a tile's rows consecutive positions of one
 * sequence, n <= 64 MT / group; the queries 16-byte aligned rows; keys past the tile's last
 * position are never read (their rows are zero-filled). Threading: any host thread owning the
 * stream.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"

namespace {

constexpr uint32_t kWarps = 4, kThreads = 32 * kWarps;
constexpr uint32_t kKeys = PGD_ATTN_TC_KEYS; /* keys of a block */
constexpr uint64_t kNoKey = ~0ull;           /* a key past the tile's last position */
static_assert(PGD_ATTN_TC_SLOTS == 16 * kWarps && kKeys == 64,
              "4 warps of 16 slots (MT tiles of 16 with the wide form), blocks of 64 keys");

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

/* The dynamic shared memory's parts for head_dim D and MT tiles of 16 slots a warp (byte
 * offsets). */
template <uint32_t D, uint32_t MT> struct tc_layout {
    static constexpr uint32_t kSlots = PGD_ATTN_TC_SLOTS * MT; /* slots of a CTA */
    static constexpr uint32_t kLd = D + 8;                     /* f16 elements of a staged row */
    static constexpr size_t q = 0;
    static constexpr size_t k = q + (size_t)kSlots * kLd * 2;
    static constexpr size_t v = k + (size_t)kKeys * kLd * 2;
    static constexpr size_t offs = v + (size_t)kKeys * kLd * 2;
    static constexpr size_t bytes = offs + (size_t)2 * kKeys * 8;
    static_assert(k % 16 == 0 && v % 16 == 0 && (kLd * 2) % 16 == 0, "ldmatrix rows: 16 bytes");
};

/* MT tiles of 16 slots a warp: 1 (64 slots a CTA, 3 CTAs an SM) or 2 (the wide form: 128 slots,
 * each K and V fragment read once for two tiles, each key block copied once for twice the
 * queries; 2 CTAs an SM) */
template <uint32_t D, uint32_t MT>
__global__ void __launch_bounds__(kThreads, MT == 1 ? 3 : 2) attention_tc_kernel(tc_args a) {
    extern __shared__ __align__(128) uint8_t smem[];
    typedef tc_layout<D, MT> L;
    constexpr uint32_t kLd = L::kLd, kSlots = L::kSlots;
    static_assert(D % 64 == 0 && kKeys % (kThreads / 8) == 0, "8 threads a 128-byte line");
    __half *qs = reinterpret_cast<__half *>(smem + L::q);
    __half *ks = reinterpret_cast<__half *>(smem + L::k);
    __half *vs = reinterpret_cast<__half *>(smem + L::v);
    uint64_t *offs = reinterpret_cast<uint64_t *>(smem + L::offs); /* [2][kKeys] */
    pgd_dev_pdl_enter();
    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint32_t g = lane / 4, c = lane % 4;
    const pgd_attn_tile tile = a.tiles[blockIdx.y];
    const uint32_t kvh = blockIdx.x, group = a.group, n_slots = tile.n * group;
    const int32_t *bt = a.block_tables + (uint64_t)a.seq_of[tile.t0] * a.bt_stride;
    const uint32_t n_keys = (uint32_t)a.pos[tile.t0 + tile.n - 1] + 1;
    const uint32_t n_blocks = (n_keys + kKeys - 1) / kKeys;
    const uint32_t bs = a.geom.block_size;
    const uint64_t block_elems = pgd_kv_block_elems(a.geom);
    const uint64_t base_k = pgd_kv_index(a.geom, 0, a.layer, 0, kvh, 0);
    const uint64_t base_v = pgd_kv_index(a.geom, 0, a.layer, 1, kvh, 0);

    /* key block b's slab offsets into offs[b % 2] (threads 0 .. 63; read after a barrier),
     * from the block-table entry of the thread's key, loaded one block ahead (next_block) so its
     * latency is not on the path to the barrier */
    auto block_of = [&](uint32_t b) -> int32_t {
        const uint32_t p = b * kKeys + tid;
        return tid < kKeys && p < n_keys ? bt[p / bs] : 0;
    };
    auto fill_offsets = [&](uint32_t b, int32_t block) {
        if (tid < kKeys) {
            const uint32_t p = b * kKeys + tid;
            offs[(b % 2) * kKeys + tid] =
                p < n_keys ? (uint64_t)(uint32_t)block * block_elems + (uint64_t)(p % bs) * D
                           : kNoKey;
        }
    };
    /* key block b's K or V rows (base) into dst [kKeys][kLd], as one commit group: thread t
     * copies the 16-byte part t % 8 (and + 8 at head_dim 128) of keys t / 8 + 16 q: a warp's
     * instruction reads 4 keys' whole 128-byte lines, and a thread looks up 4 keys' offsets,
     * not one for each part */
    auto issue = [&](__half *dst, uint64_t base, uint32_t b) {
        const uint64_t *ko = offs + (b % 2) * kKeys;
        const uint32_t part = tid % 8;
#pragma unroll
        for (uint32_t q = 0; q < kKeys / (kThreads / 8); q++) {
            const uint32_t key = tid / 8 + kThreads / 8 * q;
            const uint64_t off = ko[key];
            const bool none = off == kNoKey; /* zero-filled; the source (block 0's) not read */
            const uint16_t *src = a.kv + base + (none ? 0 : off) + part * 8;
            __half *to = dst + key * kLd + part * 8;
#pragma unroll
            for (uint32_t h = 0; h < D / 64; h++)
                __pipeline_memcpy_async(to + 64 * h, src + 64 * h, 16, none ? 16 : 0);
        }
        __pipeline_commit();
    };

    fill_offsets(0, block_of(0));
    int32_t next_block = block_of(1);
    __syncthreads();
    issue(ks, base_k, 0);

    /* the queries as f16, zero for padding slots: a thread's parts (8 dimensions of a slot, two
     * 16-byte loads) all loaded first, in flight together, then rounded and stored (loaded one
     * part after another, this prologue was ~12% of the kernel's stall samples over a 1k prompt
     * on an H200, every conversion waiting for its own 4-byte load) */
    constexpr uint32_t kParts = kSlots * D / 8 / kThreads;
    static_assert(kSlots * D / 8 % kThreads == 0, "whole parts a thread");
    float4 qv[kParts][2];
#pragma unroll
    for (uint32_t j = 0; j < kParts; j++) {
        const uint32_t i = tid + j * kThreads, slot = i / (D / 8), part = i % (D / 8);
        qv[j][0] = qv[j][1] = float4{0.0f, 0.0f, 0.0f, 0.0f};
        if (slot < n_slots) {
            const float4 *src = reinterpret_cast<const float4 *>(
                a.q + (uint64_t)(tile.t0 + slot / group) * a.q_stride +
                (uint64_t)(kvh * group + slot % group) * D + part * 8);
            qv[j][0] = src[0];
            qv[j][1] = src[1];
        }
    }
#pragma unroll
    for (uint32_t j = 0; j < kParts; j++) {
        const uint32_t i = tid + j * kThreads, slot = i / (D / 8), part = i % (D / 8);
        const float x[8] = {qv[j][0].x, qv[j][0].y, qv[j][0].z, qv[j][0].w,
                            qv[j][1].x, qv[j][1].y, qv[j][1].z, qv[j][1].w};
        uint32_t w[4];
#pragma unroll
        for (uint32_t e = 0; e < 4; e++)
            w[e] = pgd_mma_pack(pgd_attn_f16_clamp(x[2 * e]), pgd_attn_f16_clamp(x[2 * e + 1]));
        *reinterpret_cast<uint4 *>(qs + slot * kLd + part * 8) = uint4{w[0], w[1], w[2], w[3]};
    }

    /* this lane's two slots of each of its warp's tiles (tile t, r = 0: 16 (MT warp + t) + g,
     * r = 1: + 8): keys, running max and sum */
    uint32_t n_ctx[MT][2], ctx_min = n_keys;
    float m[MT][2], l[MT][2];
#pragma unroll
    for (uint32_t t = 0; t < MT; t++)
#pragma unroll
        for (uint32_t r = 0; r < 2; r++) {
            const uint32_t slot = (MT * warp + t) * 16 + g + 8 * r;
            n_ctx[t][r] = slot < n_slots ? (uint32_t)a.pos[tile.t0 + slot / group] + 1 : n_keys;
            ctx_min = min(ctx_min, n_ctx[t][r]);
            m[t][r] = -INFINITY;
            l[t][r] = 0.0f;
        }
    const float scale_log2 = pgd_rn_mul(a.scale, 1.44269504088896340736f);
    float o[MT][D / 8][4]; /* O tiles of 16 slots x 8 dimensions */
#pragma unroll
    for (uint32_t t = 0; t < MT; t++)
#pragma unroll
        for (uint32_t f = 0; f < D / 8; f++)
            o[t][f][0] = o[t][f][1] = o[t][f][2] = o[t][f][3] = 0.0f;
    /* this lane's ldmatrix row addresses (attention_mma.cuh) */
    const __half *qa = pgd_attn_ldm_a(qs + MT * warp * 16 * kLd, kLd, lane);
    const __half *ka = pgd_attn_ldm_k(ks, kLd, lane), *va = pgd_attn_ldm_a(vs, kLd, lane);

    for (uint32_t b = 0; b < n_blocks; b++) {
        const uint32_t k0 = b * kKeys;
        issue(vs, base_v, b);
        if (b + 1 < n_blocks) {
            fill_offsets(b + 1, next_block);
            next_block = block_of(b + 2);
        }
        __pipeline_wait_prior(1); /* this thread's K rows of block b */
        __syncthreads();          /* everyone's; the queries; offs[(b + 1) % 2] */

        /* S = Q K^T: s[t][n] = tile t's slots x keys k0 + 8n .. + 7 */
        float s[MT][kKeys / 8][4];
        pgd_attn_mma_scores_mt<D, MT>(s, qa, 16 * kLd, ka, kLd);

        /* the online softmax over the block, in base 2: the scores scaled, then (only in a block
         * past one of the lane's slots' positions) those keys' -inf */
        uint32_t pf[MT][kKeys / 16][4]; /* P as the A operand of P V, keys 16j .. 16j + 15 */
#pragma unroll
        for (uint32_t t = 0; t < MT; t++)
#pragma unroll
            for (uint32_t n = 0; n < kKeys / 8; n++)
#pragma unroll
                for (uint32_t e = 0; e < 4; e++) s[t][n][e] = pgd_rn_mul(s[t][n][e], scale_log2);
        if (k0 + kKeys > ctx_min) {
#pragma unroll
            for (uint32_t t = 0; t < MT; t++)
#pragma unroll
                for (uint32_t n = 0; n < kKeys / 8; n++)
#pragma unroll
                    for (uint32_t e = 0; e < 4; e++)
                        if (k0 + 8 * n + 2 * c + e % 2 >= n_ctx[t][e / 2]) s[t][n][e] = -INFINITY;
        }
#pragma unroll
        for (uint32_t t = 0; t < MT; t++)
#pragma unroll
            for (uint32_t r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (uint32_t n = 0; n < kKeys / 8; n++)
                    mx = fmaxf(mx, fmaxf(s[t][n][2 * r], s[t][n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mn = fmaxf(m[t][r], mx);
                /* a block without keys for the slot, or none above its max: exactly as before */
                const float alpha = mn == m[t][r] ? 1.0f : pgd_attn_exp2(m[t][r] - mn);
                /* a slot with no key yet (mn -inf) subtracts 0: its -inf scores then weigh 0 */
                const float mref = mn == -INFINITY ? 0.0f : mn;
                float sum = 0.0f;
#pragma unroll
                for (uint32_t n = 0; n < kKeys / 8; n++)
#pragma unroll
                    for (uint32_t e = 0; e < 2; e++) {
                        float &x = s[t][n][2 * r + e];
                        x = pgd_attn_exp2(x - mref);
                        sum += x;
                    }
                l[t][r] = l[t][r] * alpha + sum;
                m[t][r] = mn;
                /* o *= alpha, skipped by a warp none of whose slots' max moved (alpha 1: the
                 * same bits; once the max has settled, most blocks) */
                if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
                    for (uint32_t f = 0; f < D / 8; f++) {
                        o[t][f][2 * r] *= alpha;
                        o[t][f][2 * r + 1] *= alpha;
                    }
                }
            }
#pragma unroll
        for (uint32_t t = 0; t < MT; t++) pgd_attn_mma_pack_p(pf[t], s[t]);
        __syncthreads(); /* every warp is done with ks */
        if (b + 1 < n_blocks) {
            issue(ks, base_k, b + 1);
            __pipeline_wait_prior(1); /* V of block b */
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();

        /* O += P V: o[t][f] = tile t's slots x dimensions 8f .. 8f + 7 */
        pgd_attn_mma_pv_mt<D, MT>(o, pf, va, kLd);
        __syncthreads(); /* every warp is done with vs (and offs[b % 2]) */
    }

#pragma unroll
    for (uint32_t t = 0; t < MT; t++)
#pragma unroll
        for (uint32_t r = 0; r < 2; r++) {
            float sum = l[t][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const uint32_t slot = (MT * warp + t) * 16 + g + 8 * r;
            if (slot >= n_slots) continue;
            const float inv = 1.0f / sum;
            uint16_t *orow =
                a.out +
                ((uint64_t)(tile.t0 + slot / group) * a.n_head + kvh * group + slot % group) * D +
                2 * c;
#pragma unroll
            for (uint32_t f = 0; f < D / 8; f++) {
                const uint32_t w = (uint32_t)pgd_dev_f32_to_bf16(o[t][f][2 * r] * inv) |
                                   (uint32_t)pgd_dev_f32_to_bf16(o[t][f][2 * r + 1] * inv) << 16;
                *reinterpret_cast<uint32_t *>(orow + 8 * f) = w;
            }
        }
}

template <uint32_t D, uint32_t MT>
int launch(const tc_args &a, uint32_t n_tiles, cudaStream_t stream) {
    const size_t bytes = tc_layout<D, MT>::bytes;
    static bool smem_done[PGD_CUDA_MAX_DEVICES];
    PGD_CUDA_TRY(pgd_cuda_smem_once(attention_tc_kernel<D, MT>, bytes, smem_done));
    /* (KV head, tile): the KV heads of a tile start together, and the tiles in their order (the
     * host lists them longest first) */
    PGD_CUDA_TRY(pgd_cuda_launch(attention_tc_kernel<D, MT>, dim3(a.geom.n_kv_head, n_tiles),
                                 kThreads, bytes, stream, a));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_attention_tc(const float *q, uint32_t q_stride, const uint16_t *kv,
                                     pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                     const int32_t *block_tables, uint32_t bt_stride,
                                     const uint32_t *seq_of, const int32_t *pos,
                                     const pgd_attn_tile *tiles, uint32_t n_tiles,
                                     uint32_t tile_rows, float scale, uint16_t *out, void *stream) {
    const uint32_t D = geom.head_dim;
    const uint32_t group = n_head && geom.n_kv_head ? n_head / geom.n_kv_head : 0;
    const uint32_t narrow = pgd_attn_tc_rows(group, D);
    if (geom.n_kv_head == 0 || n_head % geom.n_kv_head || n_head == 0 || !narrow ||
        geom.block_size == 0 || layer >= geom.n_layer || n_tiles > 65535)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA tensor-core attention: %u heads over %u KV heads, head_dim %u "
                             "(64 or 128, groups of at most %u), block size %u, layer %u of %u, "
                             "%u tiles (at most 65535)",
                             n_head, geom.n_kv_head, D, PGD_ATTN_TC_SLOTS, geom.block_size, layer,
                             geom.n_layer, n_tiles);
    const bool wide = tile_rows == pgd_attn_tc_rows_wide(group, D);
    if (tile_rows != narrow && !wide)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA tensor-core attention: tiles of %u rows (%u or %u for a group "
                             "of %u)",
                             tile_rows, narrow, pgd_attn_tc_rows_wide(group, D), group);
    if ((uintptr_t)kv % 16 || (uintptr_t)q % 16 || q_stride % 4)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA tensor-core attention: the KV slab, the queries "
                             "and their row stride (%u) must be 16-byte aligned",
                             q_stride);
    if (n_tiles == 0) return 0;
    const tc_args a = {q,         q_stride, kv,  geom,  layer, n_head, group, block_tables,
                       bt_stride, seq_of,   pos, tiles, scale, out};
    const cudaStream_t st = (cudaStream_t)stream;
    if (wide) return D == 64 ? launch<64, 2>(a, n_tiles, st) : launch<128, 2>(a, n_tiles, st);
    return D == 64 ? launch<64, 1>(a, n_tiles, st) : launch<128, 1>(a, n_tiles, st);
}
