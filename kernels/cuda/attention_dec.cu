/*
 * kernels/cuda/attention_dec.cu — paged attention for rows of one query token each (decode
 * rows) on tensor cores, split over KV chunks (pgd_cuda_attention_dec, attention.h). CPU twin:
 * pgd_cuda_attention_dec_twin (attention_twin.c); the arithmetic is attention.h's.
 *
 * Grid (n rows, n_kv_head, n_split): CTA (i, kvh, z) takes chunks z, z + n_split, ... of
 * PGD_ATTN_CHUNK keys of list entry i's row, for the query heads of KV head kvh (its GQA group, at
 * most 16: the M rows of one mma.sync tile, the rows past the group zero). Per chunk, warp w of 4
 * takes block w (64 keys): its K and V rows by cp.async into its own shared memory, S = Q K^T in
 * registers (mma_sync.cuh), the block's max per head over a row's four lanes, the weights
 * 2^(x - m_b), their sum l_b and o_b = P V; each warp's (m_b, l_b, o_b) goes to shared memory
 * (o_b over its K buffer, read by then), and the CTA folds the chunk's blocks in order into the
 * chunk's partial, to the scratch (a row of one chunk writes its output at once). The last CTA
 * of an (entry, KV head) to finish — a counter after a fence, reset by that CTA for the next
 * launch — folds the chunk partials in order and writes bf16(o / l). The split changes no bit:
 * every partial is a chunk's, at absolute positions, folded in the same order.
 *
 * Why: a decode row's attention on CUDA cores (attention.cu, the bit-exact twin of the CPU
 * arithmetic) took ~20 us a layer at a 1k context on an H200, a chain of dependent latencies
 * through ~5,200 instructions a warp; here a warp's work for 64 keys is ~64 tensor-core
 * products and a few hundred instructions. Untested on hardware.
 *
 * Shared memory (dynamic, 143 KiB at head_dim 128): the queries f16 [16][D + 8]; per warp its
 * block's K and V f16 [64][D + 8] each (o_b f32 [16][D + 8] reuses the K part) and its keys' slab
 * offsets u64 [64]; the warps' m_b, l_b f32 [4][16].
 *
 * Before the wait for the previous kernel (cuda_util.cuh) a CTA issues its first chunk's block
 * table loads and the cp.async copies of its K and V rows, all but the row's own position's
 * (written by the RoPE + KV write just before): a decode row is its sequence's only row in the
 * launch (attention.h), so its earlier positions' KV is constant during the step. The chain
 * after the wait is then the queries and one key's rows, not the table and every key's rows.
 * Untested on hardware.
 *
 * Invariants: head_dim 64 or 128, group <= 16, the slab 16-byte aligned; keys past a row's
 * position are never read (their rows are zero-filled); a padding row (pos < 0) gets zeros, a
 * row with more chunks than the scratch holds NaN. Threading: any host thread owning the stream.
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

constexpr uint32_t kKeys = PGD_ATTN_TC_KEYS;        /* a warp's block */
constexpr uint32_t kWarps = PGD_ATTN_CHUNK / kKeys; /* blocks of a chunk */
constexpr uint32_t kThreads = 32 * kWarps;
constexpr uint32_t kHeads = PGD_ATTN_DEC_GROUP; /* the M rows of a tile */
static_assert(kKeys == 64 && kWarps == 4 && kHeads == 16, "4 warps of 64 keys, 16 heads");

struct dec_args {
    const float *q;
    uint32_t q_stride;
    const uint16_t *kv;
    pgd_kv_geom geom;
    uint32_t layer, n_head, group;
    const int32_t *block_tables;
    uint32_t bt_stride;
    const uint32_t *seq_of;
    const int32_t *pos;
    const uint32_t *rows; /* NULL: entry i is row i */
    float scale;
    uint16_t *out;
    float *scratch;      /* f32 [n][n_head][max_chunks][2 + D]: (m, l, o[D]) of each chunk */
    uint32_t max_chunks; /* chunks a (row, head) has room for */
    uint32_t *arrived;   /* [n][n_kv_head]: CTAs done; 0 between launches */
};

template <uint32_t D> struct dec_layout {
    static constexpr uint32_t kLd = D + 8; /* f16 elements of a staged row */
    static constexpr uint32_t kOb = D + 8; /* f32 elements of an o_b row (8-byte stores of a
                                            * half-warp in distinct banks) */
    static constexpr size_t q = 0;
    static constexpr size_t warp0 = q + (size_t)kHeads * kLd * 2;
    static constexpr size_t k = 0; /* within a warp's part: K (then o_b), V, offsets */
    static constexpr size_t v = k + (size_t)kKeys * kLd * 2;
    static constexpr size_t offs = v + (size_t)kKeys * kLd * 2;
    static constexpr size_t warp_bytes = offs + (size_t)kKeys * 8;
    static constexpr size_t stats = warp0 + kWarps * warp_bytes; /* m_b, l_b [kWarps][kHeads] */
    static constexpr size_t bytes = stats + (size_t)2 * kWarps * kHeads * 4;
    static_assert(warp0 % 16 == 0 && v % 16 == 0 && warp_bytes % 16 == 0, "16-byte rows");
    static_assert((size_t)kHeads * kOb * 4 <= v, "o_b fits over the K rows");
};

/* The fold of a partial (mb, lb, ob) into the running (m, l, o): the larger max wins, each
 * side scaled by 2^(its max - the larger). */
__device__ __forceinline__ void fold(float &m, float &l, float &o, float mb, float lb, float ob) {
    const float M = fmaxf(m, mb);
    const float a = exp2f(pgd_rn_sub(m, M)), b = exp2f(pgd_rn_sub(mb, M));
    l = pgd_rn_add(pgd_rn_mul(l, a), pgd_rn_mul(lb, b));
    o = pgd_rn_add(pgd_rn_mul(o, a), pgd_rn_mul(ob, b));
    m = M;
}

template <uint32_t D> __global__ void __launch_bounds__(kThreads) attention_dec_kernel(dec_args a) {
    extern __shared__ __align__(128) uint8_t smem[];
    typedef dec_layout<D> L;
    constexpr uint32_t kLd = L::kLd, kPieces = kKeys * D / 8 / 32; /* a lane's, K or V */
    __shared__ bool last;
    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint32_t g = lane / 4, c = lane % 4;
    const uint32_t i = blockIdx.x, row = a.rows ? a.rows[i] : i, kvh = blockIdx.y;
    const uint32_t group = a.group, h0 = kvh * group;
    const uint32_t seq = a.seq_of[row];
    const int32_t last_pos = a.pos[row];
    const uint32_t n_ctx = last_pos < 0 ? 0 : (uint32_t)last_pos + 1;
    const uint32_t n_chunks = (n_ctx + PGD_ATTN_CHUNK - 1) / PGD_ATTN_CHUNK;
    const bool fits = n_chunks >= 1 && n_chunks <= a.max_chunks;
    if (blockIdx.z >= (fits ? n_chunks : 1)) return; /* uniform over the CTA; writes nothing */
    __half *qs = reinterpret_cast<__half *>(smem + L::q);
    uint8_t *mine = smem + L::warp0 + warp * L::warp_bytes;
    __half *ks = reinterpret_cast<__half *>(mine + L::k);
    __half *vs = reinterpret_cast<__half *>(mine + L::v);
    uint64_t *offs = reinterpret_cast<uint64_t *>(mine + L::offs);
    float *ob = reinterpret_cast<float *>(mine + L::k); /* [kHeads][kOb], after S */
    float *mb = reinterpret_cast<float *>(smem + L::stats), *lb = mb + kWarps * kHeads;
    const int32_t *bt = a.block_tables + (uint64_t)seq * a.bt_stride;
    const uint32_t bs = a.geom.block_size;
    const uint64_t block_elems = pgd_kv_block_elems(a.geom);
    const uint64_t base_k = pgd_kv_index(a.geom, 0, a.layer, 0, kvh, 0);
    const uint64_t base_v = pgd_kv_index(a.geom, 0, a.layer, 1, kvh, 0);
    const float scale_log2 = pgd_rn_mul(a.scale, 1.44269504088896340736f);
    /* this warp's block of chunk ci: its first key and its keys below the row's end */
    auto block_of = [&](uint32_t ci, uint32_t &k0) {
        k0 = ci * PGD_ATTN_CHUNK + warp * kKeys;
        return k0 < n_ctx ? min(kKeys, n_ctx - k0) : 0u;
    };
    /* the block's keys' slab offsets (from the block table); then its K and V rows by cp.async
     * as one commit group: every key's (kAll), all but the row's own position's (kOld: keys past
     * nk zero-filled with them) or that one's alone (kNew) */
    auto offsets = [&](uint32_t k0, uint32_t nk) {
#pragma unroll
        for (uint32_t k = lane; k < kKeys; k += 32) {
            const uint32_t p = k0 + k;
            offs[k] = k < nk ? (uint64_t)(uint32_t)bt[p / bs] * block_elems + (uint64_t)(p % bs) * D
                             : ~0ull;
        }
        __syncwarp();
    };
    enum { kAll, kOld, kNew };
    auto copy = [&](uint32_t k0, int which) {
#pragma unroll 4
        for (uint32_t u = 0; u < kPieces; u++) {
            const uint32_t piece = lane + 32 * u, key = piece / (D / 8), part = piece % (D / 8);
            if (which != kAll && (k0 + key == (uint32_t)last_pos) != (which == kNew)) continue;
            const uint64_t off = offs[key];
            const bool none = off == ~0ull;
            __pipeline_memcpy_async(ks + key * kLd + part * 8,
                                    none ? a.kv : a.kv + base_k + off + part * 8, 16,
                                    none ? 16 : 0);
            __pipeline_memcpy_async(vs + key * kLd + part * 8,
                                    none ? a.kv : a.kv + base_v + off + part * 8, 16,
                                    none ? 16 : 0);
        }
        __pipeline_commit();
    };
    /* Before the wait: the first chunk's block table entries (the step's metadata) and the K and
     * V rows of every key but the row's own position. A decode row is its sequence's only row in
     * the step (attention.h), so the KV of its earlier positions was written by earlier steps and
     * does not change during this one (cuda_util.cuh's contract); its own position's K and V come
     * from the RoPE + KV write just before, so they are copied after the wait. */
    uint32_t k0_first = 0;
    const uint32_t nk_first = fits ? block_of(blockIdx.z, k0_first) : 0;
    if (nk_first) {
        offsets(k0_first, nk_first);
        copy(k0_first, kOld);
    }
    pgd_dev_pdl_enter();
    uint16_t *orow = a.out + ((uint64_t)row * a.n_head + h0) * D;
    if (!fits) { /* zeros for a padding row, a bf16 NaN for one the scratch cannot hold */
        for (uint32_t e = tid; e < group * D; e += kThreads) orow[e] = n_chunks ? 0x7FC0u : 0;
        return;
    }

    /* the group's queries as f16 (rows past the group zero) */
    for (uint32_t e = tid; e < kHeads * D; e += kThreads) {
        const uint32_t h = e / D, d = e % D;
        const float x =
            h < group ? a.q[(uint64_t)row * a.q_stride + (uint64_t)(h0 + h) * D + d] : 0.0f;
        qs[h * kLd + d] = __float2half_rn(pgd_attn_f16_clamp(x));
    }
    /* this lane's ldmatrix row addresses (attention_mma.cuh) */
    const __half *qa = pgd_attn_ldm_a(qs, kLd, lane);
    const __half *ka = pgd_attn_ldm_k(ks, kLd, lane), *va = pgd_attn_ldm_a(vs, kLd, lane);

    for (uint32_t ci = blockIdx.z; ci < n_chunks; ci += gridDim.z) {
        uint32_t k0;
        const uint32_t nk = block_of(ci, k0);
        if (nk && ci == blockIdx.z) {
            copy(k0, kNew); /* the first chunk's last key, if this block has it */
        } else if (nk) {
            offsets(k0, nk);
            copy(k0, kAll);
        }
        __pipeline_wait_prior(0);
        __syncthreads(); /* the queries (first chunk); every warp's rows */
        if (nk) {
            float s[kKeys / 8][4];
            pgd_attn_mma_scores<D>(s, qa, ka, kLd);
            /* the block's softmax per head (rows g and g + 8): the scores scaled, keys past the
             * row's end (in its last block) -inf, then the weights */
#pragma unroll
            for (uint32_t n = 0; n < kKeys / 8; n++)
#pragma unroll
                for (uint32_t e = 0; e < 4; e++) s[n][e] = pgd_rn_mul(s[n][e], scale_log2);
            if (nk < kKeys) {
#pragma unroll
                for (uint32_t n = 0; n < kKeys / 8; n++)
#pragma unroll
                    for (uint32_t e = 0; e < 4; e++)
                        if (8 * n + 2 * c + e % 2 >= nk) s[n][e] = -INFINITY;
            }
            float m[2], l[2];
#pragma unroll
            for (uint32_t r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (uint32_t n = 0; n < kKeys / 8; n++)
                    mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                /* mx is a key's (the block has one): a past key's -inf weighs 0 */
                float sum = 0.0f;
#pragma unroll
                for (uint32_t n = 0; n < kKeys / 8; n++)
#pragma unroll
                    for (uint32_t e = 0; e < 2; e++) {
                        float &x = s[n][2 * r + e];
                        x = pgd_attn_exp2(pgd_rn_sub(x, mx));
                        sum = pgd_rn_add(sum, x);
                    }
                sum = pgd_rn_add(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
                sum = pgd_rn_add(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
                m[r] = mx;
                l[r] = sum;
            }
            float o[D / 8][4];
#pragma unroll
            for (uint32_t f = 0; f < D / 8; f++) o[f][0] = o[f][1] = o[f][2] = o[f][3] = 0.0f;
            uint32_t pf[kKeys / 16][4];
            pgd_attn_mma_pack_p(pf, s);
            pgd_attn_mma_pv<D>(o, pf, va, kLd);
            __syncwarp(); /* every lane is done with the K rows: o_b goes over them */
#pragma unroll
            for (uint32_t r = 0; r < 2; r++) {
                const uint32_t h = g + 8 * r;
#pragma unroll
                for (uint32_t f = 0; f < D / 8; f++) {
                    *reinterpret_cast<float2 *>(ob + h * L::kOb + 8 * f + 2 * c) =
                        float2{o[f][2 * r], o[f][2 * r + 1]};
                }
                if (c == 0) {
                    mb[warp * kHeads + h] = m[r];
                    lb[warp * kHeads + h] = l[r];
                }
            }
        }
        __syncthreads(); /* every warp's (m_b, l_b, o_b) */
        /* the chunk's partial: its blocks folded in order, per (head, dimension) */
        for (uint32_t e = tid; e < group * D; e += kThreads) {
            const uint32_t h = e / D, d = e % D;
            const uint32_t at = h * L::kOb + d; /* in a warp's o_b */
            float m = mb[h], l = lb[h], o = reinterpret_cast<const float *>(smem + L::warp0)[at];
            for (uint32_t w = 1; w < kWarps; w++) {
                if (ci * PGD_ATTN_CHUNK + w * kKeys >= n_ctx) break;
                const float *obw =
                    reinterpret_cast<const float *>(smem + L::warp0 + w * L::warp_bytes);
                fold(m, l, o, mb[w * kHeads + h], lb[w * kHeads + h], obw[at]);
            }
            if (n_chunks == 1) {
                orow[e] = pgd_dev_f32_to_bf16(pgd_rn_div(o, l));
            } else {
                float *p =
                    a.scratch + (((uint64_t)i * a.n_head + h0 + h) * a.max_chunks + ci) * (2 + D);
                if (d == 0) p[0] = m, p[1] = l;
                p[2 + d] = o;
            }
        }
        __syncthreads(); /* the buffers are free for the next chunk */
    }
    if (n_chunks == 1) return;
    /* the partials visible to the whole GPU before this CTA counts itself in */
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        uint32_t *n_done = a.arrived + (uint64_t)i * gridDim.y + kvh;
        const uint32_t ctas = min(gridDim.z, n_chunks);
        last = atomicAdd(n_done, 1u) + 1 == ctas;
        if (last) *n_done = 0; /* every CTA has counted: ready for the next launch */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (uint32_t e = tid; e < group * D; e += kThreads) {
        const uint32_t h = e / D, d = e % D;
        const float *p = a.scratch + (((uint64_t)i * a.n_head + h0 + h) * a.max_chunks) * (2 + D);
        float m = __ldcg(p), l = __ldcg(p + 1), o = __ldcg(p + 2 + d);
        for (uint32_t ci = 1; ci < n_chunks; ci++) {
            const float *q = p + (uint64_t)ci * (2 + D);
            fold(m, l, o, __ldcg(q), __ldcg(q + 1), __ldcg(q + 2 + d));
        }
        orow[e] = pgd_dev_f32_to_bf16(pgd_rn_div(o, l));
    }
}

template <uint32_t D> int launch(const dec_args &a, dim3 grid, cudaStream_t stream) {
    static bool smem_done[PGD_CUDA_MAX_DEVICES];
    PGD_CUDA_TRY(pgd_cuda_smem_once(attention_dec_kernel<D>, dec_layout<D>::bytes, smem_done));
    PGD_CUDA_TRY(
        pgd_cuda_launch(attention_dec_kernel<D>, grid, kThreads, dec_layout<D>::bytes, stream, a));
    return 0;
}

} // namespace

extern "C" int pgd_cuda_attention_dec(const float *q, uint32_t q_stride, const uint16_t *kv,
                                      pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                      const int32_t *block_tables, uint32_t bt_stride,
                                      const uint32_t *seq_of, const int32_t *pos,
                                      const uint32_t *rows, uint32_t n, float scale,
                                      uint32_t n_split, uint32_t max_ctx, float *scratch,
                                      uint32_t *arrived, uint16_t *out, void *stream) {
    const uint32_t D = geom.head_dim;
    const uint32_t max_chunks = (max_ctx + PGD_ATTN_CHUNK - 1) / PGD_ATTN_CHUNK;
    if (geom.n_kv_head == 0 || n_head % geom.n_kv_head || n_head == 0 ||
        !pgd_attn_dec_takes(n_head / geom.n_kv_head, D) || geom.block_size == 0 ||
        layer >= geom.n_layer || geom.n_kv_head > 65535 || max_chunks == 0 || !scratch || !arrived)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA decode attention: %u heads over %u KV heads, head_dim %u (64 or "
                             "128, groups of at most %u), block size %u, layer %u of %u, contexts "
                             "of %u positions%s",
                             n_head, geom.n_kv_head, D, PGD_ATTN_DEC_GROUP, geom.block_size, layer,
                             geom.n_layer, max_ctx,
                             scratch && arrived ? "" : ", without scratch or counters");
    if ((uintptr_t)kv % 16)
        return pgd_error_set(PGD_EINVAL, "CUDA attention: the KV slab is not 16-byte aligned");
    if (n == 0) return 0;
    if (n_split < 1) n_split = 1;
    if (n_split > max_chunks) n_split = max_chunks;
    if (n_split > 65535) n_split = 65535;
    const dec_args a = {q,
                        q_stride,
                        kv,
                        geom,
                        layer,
                        n_head,
                        n_head / geom.n_kv_head,
                        block_tables,
                        bt_stride,
                        seq_of,
                        pos,
                        rows,
                        scale,
                        out,
                        scratch,
                        max_chunks,
                        arrived};
    const dim3 grid(n, geom.n_kv_head, n_split);
    return D == 64 ? launch<64>(a, grid, (cudaStream_t)stream)
                   : launch<128>(a, grid, (cudaStream_t)stream);
}
