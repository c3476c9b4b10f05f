/*
 * kernels/cuda/attention.cu — paged attention over the f16 KV slab for a mixed batch
 * (attention.h), on plain CUDA cores: the reference-shaped first version (tensor cores later).
 * Its CPU twin is attention_twin.c; both follow the arithmetic and order of attention_math.h
 * through its shared __host__ __device__ functions (the exponential, the fold, single rounded
 * operations that nvcc may not contract), so kernel and twin agree bit for bit.
 *
 * Grid: (T, n_kv_head * n_tiles), n_tiles = ceil(group / PGD_ATTN_HEAD_TILE): one CTA per
 * (token, KV head, tile of up to 8 query heads of its GQA group), which reads each K and V row
 * once for the tile. 256 threads = PGD_ATTN_CHUNK. The CTA walks its row's chunks in
 * increasing order; per chunk (chunk_partial):
 *   1. thread j takes position c0 + j: its slab index from the block table; its V row copied to
 *      shared memory asynchronously (cp.async, 16 bytes a copy: in flight during steps 1-2),
 *      its K row in 16-byte loads, one FMA chain over d ascending per head of the tile, the
 *      score times `scale` (slots past the end: -inf);
 *   2. per head the max, then the weights e^(x - max), then their sum, each by the fixed tree
 *      of attention_math.h: a warp's shuffle-down (strides 16..1), then the 8 warp results
 *      (strides 4, 2, 1) — every thread computes that last level itself from shared memory,
 *      so all hold the same (m_c, s_c);
 *   3. the tile's (head, dimension pair) units are dealt to the threads (unit u = head
 *      u / (D / 2), dimensions 2 (u % (D / 2)) and + 1 to thread u % 256, so each (head, d) has
 *      exactly one owner): per unit, o_c = two FMA chains over the chunk's positions ascending of
 *      w_j * V_j[d], each V pair one 4-byte shared-memory read (a warp: 128 contiguous bytes of
 *      a row, no bank conflict).
 * Then fold_chunk folds (m_c, s_c, o_c) into the row's running (m, s, o), chunk 0's partial
 * being the start; at the end out = bf16(o / s). Nothing depends on T, on the row's place in
 * the batch or on the grid: each reduction's shape is fixed by the chunk, not by the launch.
 *
 * The split version (pgd_cuda_attention_split) keeps the bits: the grid gains a z axis of
 * n_split CTAs per (row, KV head, tile); CTA z takes chunks z, z + n_split, ... and writes each
 * chunk's partial (m_c, s_c, o_c[D]) — the same chunk_partial of the same positions, so the same
 * bits — unfolded to the scratch; the last of a row's CTAs to finish (an atomic counter per
 * (row, KV head, tile), after a fence: the others' partials are then visible) folds, per
 * (head, d), the stored partials with the same formula in increasing chunk order from chunk 0's
 * partial itself, writes bf16(o / s) and sets the counter back to 0 for the next launch (a
 * second merge kernel cost ~4 us a layer in a decode step on an H200). The fold is not
 * associative, so partials are never pre-folded.
 *
 * Latency and issue: a thread keeps 8 of its K loads (16 bytes each) in flight before the FMAs
 * that use them, in the same order; the chunk's V (64 KiB at head_dim 128, dynamic shared
 * memory) arrives while the scores and the softmax are computed; 2 CTAs an SM at head_dim <= 128
 * (__launch_bounds__: 128 registers). On an H200, one V load waited for at a time made a decode
 * chunk take 60 us; with 32 V loads in flight it still took 37 us, when step 3 gave each thread
 * one dimension of up to 8 heads (a 2-byte global load, a shared index and 8 guarded FMA slots a
 * position: ~35 instructions for 2 FMAs at Llama-3-8B's group of 4) and waited for its V loads
 * 8 times a chunk. The unit layout over shared memory takes ~6 instructions for 2 FMAs and no
 * wait: 20 us a 1k-context launch on the H200 since, bound by its chain of dependent latencies
 * (the row's position, the block table, two rounds of K loads, the trees, the fence and the
 * counter, the merge's loads) on 32 busy CTAs; giving idle CTAs parts of a chunk's heads made it
 * slower (bench/results/gpu-h200.md).
 *
 * Invariants: head_dim a multiple of 8 and at most 256 (16-byte K loads; one pair set per
 * thread at most 8 heads); the slab 16-byte aligned; positions beyond pos[t] are never read;
 * a row with pos < 0 (padding) writes zeros. Threading: any host thread owning the stream.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_util.cuh"

namespace {

constexpr uint32_t kThreads = PGD_ATTN_CHUNK; /* one thread per position of a chunk */
constexpr uint32_t kTile = PGD_ATTN_HEAD_TILE;
constexpr uint32_t kWarps = kThreads / PGD_ATTN_TREE_RUN;
static_assert(PGD_ATTN_TREE_RUN == 32 && kWarps == 8, "the tree is a warp, then 8 warp results");

struct attn_args {
    const float *q; /* row t at q + t * q_stride */
    uint32_t q_stride;
    const uint16_t *kv; /* the slab */
    pgd_kv_geom geom;
    uint32_t layer, n_head, group, n_tiles;
    const int32_t *block_tables; /* [S][bt_stride] */
    uint32_t bt_stride;
    const uint32_t *seq_of; /* [T] */
    const int32_t *pos;     /* [T] */
    float scale;
    uint16_t *out;        /* bf16 [T][n_head][head_dim] */
    const uint32_t *rows; /* [grid.x]: the row of each CTA column, NULL: row blockIdx.x */
};

/* The row of CTA column i. */
__device__ __forceinline__ uint32_t row_at(const attn_args &a, uint32_t i) {
    return a.rows ? a.rows[i] : i;
}

/* What one CTA keeps in shared memory. */
struct attn_smem {
    float q[kTile * PGD_ATTN_MAX_HEAD_DIM];               /* the tile's queries [g][d] */
    float w[kTile][kThreads];                             /* the chunk's weights [g][j] */
    float red_max[kTile][kWarps], red_sum[kTile][kWarps]; /* the tree's warp results */
};

/* The per-CTA constants of a (row, KV head, tile). */
struct tile_ctx {
    const uint16_t *kv;
    const int32_t *bt; /* the row's block table */
    pgd_kv_geom geom;
    uint32_t layer, kvh, D, n_heads; /* n_heads: heads in this tile, 1..kTile */
    uint64_t v_off;                  /* a V row's index minus its K row's */
    uint16_t *vs;                    /* the chunk's V rows in shared memory [kThreads][D] */
    float scale;
    uint32_t n_units; /* step 3: the units this thread owns (unit_of), 0..kUnits */
    /* the block of position first_c0 + threadIdx.x (the CTA's first chunk), loaded by
     * tile_setup while the queries load, so the first chunk's K loads wait for one load less */
    uint32_t first_c0;
    int32_t first_block;
};

/* Step 3's units: (head, dimension pair) of the tile, unit u = head g, dimensions 2 (u % (D / 2))
 * and the next one; thread t owns the units t, t + kThreads, ... (each exactly one thread). */
constexpr uint32_t kUnits = kTile * PGD_ATTN_MAX_HEAD_DIM / 2 / kThreads;
static_assert(kUnits * kThreads * 2 == kTile * PGD_ATTN_MAX_HEAD_DIM, "units cover the tile");

/* Unit k of this thread: its head (*g) and first dimension (*d). */
__device__ __forceinline__ void unit_of(const tile_ctx &c, uint32_t k, uint32_t *g, uint32_t *d) {
    const uint32_t u = threadIdx.x + k * kThreads, half = c.D / 2;
    *g = u / half;
    *d = 2 * (u % half);
}

__device__ __forceinline__ float h2f(uint16_t bits) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
}

/* v[g] for a g known only at run time, without indexing a register array (which would put it
 * in local memory). */
__device__ __forceinline__ float pick(const float (&v)[kTile], uint32_t g) {
    float r = 0.0f;
#pragma unroll
    for (uint32_t k = 0; k < kTile; k++) r = k == g ? v[k] : r;
    return r;
}

/* The tree's first level over one warp: lane 0 gets op over the warp's 32 slots. */
template <bool Max> __device__ __forceinline__ float warp_tree(float v) {
#pragma unroll
    for (int s = PGD_ATTN_TREE_RUN / 2; s > 0; s /= 2) {
        const float o = __shfl_down_sync(0xffffffffu, v, s);
        v = Max ? pgd_attn_max(v, o) : pgd_rn_add(v, o);
    }
    return v;
}

/* The tree's last level, over the 8 warp results of one head (every thread computes it). */
template <bool Max> __device__ __forceinline__ float block_tree(const float (&red)[kWarps]) {
    float y[kWarps];
#pragma unroll
    for (uint32_t i = 0; i < kWarps; i++) y[i] = red[i];
#pragma unroll
    for (uint32_t s = kWarps / 2; s > 0; s /= 2)
#pragma unroll
        for (uint32_t i = 0; i < s; i++)
            y[i] = Max ? pgd_attn_max(y[i], y[i + s]) : pgd_rn_add(y[i], y[i + s]);
    return y[0];
}

/* Step 1 for this thread's position c0 + j (j < nc): the scores of the tile's heads. */
__device__ __forceinline__ void scores(const tile_ctx &c, attn_smem &sm, uint32_t c0, uint32_t j,
                                       float (&x)[kTile]) {
    const uint32_t p = c0 + j, bs = c.geom.block_size;
    const int32_t block = c0 == c.first_c0 ? c.first_block : c.bt[p / bs];
    const uint64_t k_at = pgd_kv_index(c.geom, (uint32_t)block, c.layer, 0, c.kvh, p % bs);
    /* step 3's V row, copied to shared memory asynchronously while the scores are computed */
    const uint16_t *vrow = c.kv + k_at + c.v_off;
    uint16_t *vdst = c.vs + (uint64_t)j * c.D;
    for (uint32_t d0 = 0; d0 < c.D; d0 += 8) __pipeline_memcpy_async(vdst + d0, vrow + d0, 16);
    __pipeline_commit();
    float acc[kTile];
#pragma unroll
    for (uint32_t g = 0; g < kTile; g++) acc[g] = 0.0f;
    const uint4 *krow = reinterpret_cast<const uint4 *>(c.kv + k_at);
    /* kLoads 16-byte loads in flight before their FMAs (the order of the FMAs is unchanged) */
    constexpr uint32_t kLoads = 8;
    for (uint32_t d1 = 0; d1 < c.D; d1 += 8 * kLoads) {
        uint4 raws[kLoads]; /* unconditional loads (past the row: its first 16 bytes again) */
#pragma unroll
        for (uint32_t u = 0; u < kLoads; u++) raws[u] = krow[d1 + 8 * u < c.D ? d1 / 8 + u : 0];
#pragma unroll
        for (uint32_t u = 0; u < kLoads; u++) {
            const uint32_t d0 = d1 + 8 * u;
            if (d0 >= c.D) break;
            const uint32_t words[4] = {raws[u].x, raws[u].y, raws[u].z, raws[u].w};
            float k[8];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                k[2 * e] = h2f((uint16_t)(words[e] & 0xFFFFu));
                k[2 * e + 1] = h2f((uint16_t)(words[e] >> 16));
            }
#pragma unroll
            for (uint32_t g = 0; g < kTile; g++) {
                if (g >= c.n_heads) break;
                const float4 qa = *reinterpret_cast<const float4 *>(&sm.q[g * c.D + d0]);
                const float4 qb = *reinterpret_cast<const float4 *>(&sm.q[g * c.D + d0 + 4]);
                const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g] = pgd_rn_fma(qv[e], k[e], acc[g]);
            }
        }
    }
#pragma unroll
    for (uint32_t g = 0; g < kTile; g++) x[g] = pgd_rn_mul(acc[g], c.scale);
}

/* One chunk's partial: positions c0 .. c0 + nc - 1 (1 <= nc <= kThreads). Every thread gets
 * (mc[g], sc[g]) for the tile's heads, and oc[k][0..1] for its unit k (unit_of). Ends with the
 * CTA synchronised and shared memory free for reuse. */
__device__ void chunk_partial(const tile_ctx &c, attn_smem &sm, uint32_t c0, uint32_t nc,
                              float (&mc)[kTile], float (&sc)[kTile], float (&oc)[kUnits][2]) {
    const uint32_t j = threadIdx.x, lane = j % PGD_ATTN_TREE_RUN, warp = j / PGD_ATTN_TREE_RUN;
    float x[kTile];
#pragma unroll
    for (uint32_t g = 0; g < kTile; g++) x[g] = -INFINITY;
    if (j < nc) scores(c, sm, c0, j, x);
#pragma unroll
    for (uint32_t g = 0; g < kTile; g++) {
        const float v = warp_tree<true>(x[g]);
        if (lane == 0) sm.red_max[g][warp] = v;
    }
    __syncthreads();
#pragma unroll
    for (uint32_t g = 0; g < kTile; g++) {
        mc[g] = block_tree<true>(sm.red_max[g]);
        const float w = j < nc ? pgd_attn_exp(pgd_rn_sub(x[g], mc[g])) : 0.0f;
        sm.w[g][j] = w;
        const float v = warp_tree<false>(w);
        if (lane == 0) sm.red_sum[g][warp] = v;
    }
    __pipeline_wait_prior(0); /* this thread's V row is in shared memory */
    __syncthreads();          /* publishes red_sum, w and every V row */
#pragma unroll
    for (uint32_t g = 0; g < kTile; g++) sc[g] = block_tree<false>(sm.red_sum[g]);
#pragma unroll
    for (uint32_t k = 0; k < kUnits; k++) {
        oc[k][0] = 0.0f;
        oc[k][1] = 0.0f;
        if (k >= c.n_units) continue;
        uint32_t g, d;
        unit_of(c, k, &g, &d);
        const uint16_t *vcol = c.vs + d; /* position p's pair at vcol + p * D */
        const float *w = sm.w[g];
        float o0 = 0.0f, o1 = 0.0f;
        /* kRun positions' pairs read before their FMAs (the order of the FMAs is unchanged) */
        constexpr uint32_t kRun = 16;
        for (uint32_t p0 = 0; p0 < nc; p0 += kRun) {
            uint32_t raw[kRun];
#pragma unroll
            for (uint32_t u = 0; u < kRun; u++) /* rows past the chunk: read, never used */
                raw[u] = *reinterpret_cast<const uint32_t *>(vcol + (uint64_t)(p0 + u) * c.D);
#pragma unroll
            for (uint32_t u = 0; u < kRun; u += 4) {
                if (p0 + u >= nc) break;
                const float4 w4 = *reinterpret_cast<const float4 *>(&w[p0 + u]);
                const float wj[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
                for (uint32_t e = 0; e < 4; e++) {
                    if (p0 + u + e >= nc) break;
                    o0 = pgd_rn_fma(wj[e], h2f((uint16_t)(raw[u + e] & 0xFFFFu)), o0);
                    o1 = pgd_rn_fma(wj[e], h2f((uint16_t)(raw[u + e] >> 16)), o1);
                }
            }
        }
        oc[k][0] = o0;
        oc[k][1] = o1;
    }
    __syncthreads(); /* w, the V rows and red_* are free again */
}

/* Fold a chunk's partial into the running (m, s, o) (attention_math.h's formula). */
__device__ __forceinline__ void fold_chunk(const tile_ctx &c, float (&m)[kTile], float (&s)[kTile],
                                           float (&o)[kUnits][2], const float (&mc)[kTile],
                                           const float (&sc)[kTile], const float (&oc)[kUnits][2]) {
    float a[kTile], b[kTile];
#pragma unroll
    for (uint32_t g = 0; g < kTile; g++) {
        m[g] = pgd_attn_fold_coef(m[g], mc[g], &a[g], &b[g]);
        s[g] = pgd_attn_fold(s[g], a[g], sc[g], b[g]);
    }
#pragma unroll
    for (uint32_t k = 0; k < kUnits; k++) {
        if (k >= c.n_units) break;
        uint32_t g, d;
        unit_of(c, k, &g, &d);
        const float ag = pick(a, g), bg = pick(b, g);
        o[k][0] = pgd_attn_fold(o[k][0], ag, oc[k][0], bg);
        o[k][1] = pgd_attn_fold(o[k][1], ag, oc[k][1], bg);
    }
}

/* The positions row attends to: 0 .. pos[row], none for a padding row (pos < 0). */
__device__ __forceinline__ uint32_t ctx_of(const attn_args &a, uint32_t row) {
    const int32_t last = a.pos[row];
    return last < 0 ? 0 : (uint32_t)last + 1;
}

/* The constants of CTA (row, blockIdx.y = KV head * n_tiles + tile) into c — row of sequence
 * seq (seq_of[row], loaded by the caller with the row's position) and n_ctx positions, its
 * first chunk at first_c0 — and its tile's queries into shared memory (the CTA synchronised
 * after). Returns the tile's first query head. */
__device__ uint32_t tile_setup(const attn_args &a, attn_smem &sm, uint16_t *vs, uint32_t row,
                               uint32_t seq, uint32_t n_ctx, uint32_t first_c0, tile_ctx &c) {
    const uint32_t kvh = blockIdx.y / a.n_tiles, tile = blockIdx.y % a.n_tiles;
    const uint32_t D = a.geom.head_dim, t = threadIdx.x;
    const uint32_t h0 = kvh * a.group + tile * kTile;
    c.kv = a.kv;
    c.bt = a.block_tables + (uint64_t)seq * a.bt_stride;
    c.first_c0 = first_c0;
    c.first_block = first_c0 + t < n_ctx ? c.bt[(first_c0 + t) / a.geom.block_size] : 0;
    c.geom = a.geom;
    c.layer = a.layer;
    c.kvh = kvh;
    c.D = D;
    c.n_heads = min(kTile, a.group - tile * kTile);
    c.v_off = (uint64_t)a.geom.n_kv_head * a.geom.block_size * D;
    c.vs = vs;
    c.scale = a.scale;
    const uint32_t units = c.n_heads * (D / 2);
    c.n_units = t < units ? (units - t + kThreads - 1) / kThreads : 0;
    const float *qrow = a.q + (uint64_t)row * a.q_stride + (uint64_t)h0 * D;
    for (uint32_t i = t; i < c.n_heads * D; i += kThreads) sm.q[i] = qrow[i];
    __syncthreads();
    return h0;
}

/* Write this thread's units of the tile's output row: bf16(o / s[k]) for unit k, or `fill`
 * (bf16 bits) where s is NULL. */
__device__ __forceinline__ void write_units(const tile_ctx &c, uint16_t *orow,
                                            const float (&o)[kUnits][2], const float *s,
                                            uint16_t fill) {
#pragma unroll
    for (uint32_t k = 0; k < kUnits; k++) {
        if (k >= c.n_units) break;
        uint32_t g, d;
        unit_of(c, k, &g, &d);
        uint32_t pair = (uint32_t)fill * 0x10001u;
        if (s) {
            const float sg = s[k];
            pair = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(pgd_rn_div(o[k][0], sg))) |
                   (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(pgd_rn_div(o[k][1], sg)))
                       << 16;
        }
        *reinterpret_cast<uint32_t *>(orow + (uint64_t)g * c.D + d) = pair;
    }
}

/* A per-head value (of the tile's heads) for each of this thread's units. */
__device__ __forceinline__ void per_unit(const tile_ctx &c, const float (&by_head)[kTile],
                                         float (&by_unit)[kUnits]) {
#pragma unroll
    for (uint32_t k = 0; k < kUnits; k++) {
        uint32_t g, d;
        unit_of(c, k, &g, &d);
        by_unit[k] = pick(by_head, g);
    }
}

__global__ void __launch_bounds__(kThreads, 2) attention_kernel(attn_args a) {
    __shared__ __align__(16) attn_smem sm;
    extern __shared__ __align__(16) uint16_t attn_vs[]; /* [kThreads][D]: vs_bytes(D) */
    /* the row, its sequence and position: the step's metadata, constant during the step, so
     * loaded before the wait for the previous kernel (cuda_util.cuh) */
    const uint32_t row = row_at(a, blockIdx.x), D = a.geom.head_dim;
    tile_ctx c;
    const uint32_t seq = a.seq_of[row], n_ctx = ctx_of(a, row);
    pgd_dev_pdl_enter();
    const uint32_t h0 = tile_setup(a, sm, attn_vs, row, seq, n_ctx, 0, c); /* its first head */
    float m[kTile] = {}, s[kTile] = {}, o[kUnits][2] = {};
    for (uint32_t c0 = 0; c0 < n_ctx; c0 += kThreads) {
        float mc[kTile], sc[kTile], oc[kUnits][2];
        chunk_partial(c, sm, c0, min(kThreads, n_ctx - c0), mc, sc, oc);
        if (c0 == 0) {
#pragma unroll
            for (uint32_t g = 0; g < kTile; g++) {
                m[g] = mc[g];
                s[g] = sc[g];
            }
#pragma unroll
            for (uint32_t k = 0; k < kUnits; k++) {
                o[k][0] = oc[k][0];
                o[k][1] = oc[k][1];
            }
        } else {
            fold_chunk(c, m, s, o, mc, sc, oc);
        }
    }
    uint16_t *orow = a.out + ((uint64_t)row * a.n_head + h0) * D;
    float su[kUnits];
    per_unit(c, s, su);
    if (n_ctx)
        write_units(c, orow, o, su, 0);
    else
        write_units(c, orow, o, NULL, 0); /* zeros for a padding row */
}

/* The split kernel's extra arguments: where chunk partials go, and who merges them. */
struct split_args {
    float *scratch;      /* f32 [n][n_head][max_chunks][2 + D]: (m_c, s_c, o_c[D]) per chunk */
    uint32_t max_chunks; /* partials a (row, head) has room for */
    uint32_t *arrived;   /* [n][gridDim.y]: CTAs of (entry, KV head * tile) done; 0 between */
};

/* Where the partial of chunk `chunk` of list entry i, query head h, goes. */
__device__ __forceinline__ float *partial_at(const attn_args &a, const split_args &sp, uint32_t i,
                                             uint32_t h, uint32_t chunk) {
    const uint32_t D = a.geom.head_dim;
    return sp.scratch + (((uint64_t)i * a.n_head + h) * sp.max_chunks + chunk) * (2 + D);
}

/* The merge, by the CTA that finished last: per unit, the row's chunk partials folded in
 * increasing order from chunk 0's (fold_chunk's operations), read through L2 (other SMs wrote
 * them). */
__device__ void merge_units(const attn_args &a, const split_args &sp, const tile_ctx &c, uint32_t i,
                            uint32_t h0, uint32_t n_chunks, uint16_t *orow) {
    float o[kUnits][2] = {}, s[kUnits] = {};
#pragma unroll
    for (uint32_t k = 0; k < kUnits; k++) {
        if (k >= c.n_units) break;
        uint32_t g, d;
        unit_of(c, k, &g, &d);
        float m = 0, sum = 0, o0 = 0, o1 = 0;
        /* kBatch chunks' partials loaded before they are folded (in order): one wait each */
        constexpr uint32_t kBatch = 8;
        for (uint32_t c1 = 0; c1 < n_chunks; c1 += kBatch) {
            float qm[kBatch], qs[kBatch], q0[kBatch], q1[kBatch];
#pragma unroll
            for (uint32_t u = 0; u < kBatch; u++) { /* past the last chunk: the last again */
                const float *q = partial_at(a, sp, i, h0 + g, min(c1 + u, n_chunks - 1));
                qm[u] = __ldcg(q);
                qs[u] = __ldcg(q + 1);
                q0[u] = __ldcg(q + 2 + d);
                q1[u] = __ldcg(q + 3 + d);
            }
#pragma unroll
            for (uint32_t u = 0; u < kBatch; u++) {
                if (c1 + u >= n_chunks) break;
                if (c1 + u == 0) { /* chunk 0's partial is the start */
                    m = qm[0], sum = qs[0], o0 = q0[0], o1 = q1[0];
                    continue;
                }
                float ca, cb;
                m = pgd_attn_fold_coef(m, qm[u], &ca, &cb);
                sum = pgd_attn_fold(sum, ca, qs[u], cb);
                o0 = pgd_attn_fold(o0, ca, q0[u], cb);
                o1 = pgd_attn_fold(o1, ca, q1[u], cb);
            }
        }
        o[k][0] = o0;
        o[k][1] = o1;
        s[k] = sum;
    }
    write_units(c, orow, o, s, 0);
}

/* CTA (list entry i, KV head * tile, z): the partials of chunks z, z + gridDim.z, ... of its
 * row; the last of the row's CTAs to finish (a counter in `arrived`, which it sets back to 0)
 * merges them and writes the output. A row of one chunk is written at once (the merge of one
 * partial is the division alone); a padding row gets zeros, a row with more chunks than the
 * scratch holds NaN, both from CTA z = 0. */
__global__ void __launch_bounds__(kThreads, 2) attention_split_kernel(attn_args a, split_args sp) {
    __shared__ __align__(16) attn_smem sm;
    extern __shared__ __align__(16) uint16_t attn_vs[]; /* [kThreads][D]: vs_bytes(D) */
    __shared__ bool last;
    /* the row, its sequence and position: metadata, loaded before the wait (as above) */
    const uint32_t i = blockIdx.x, row = row_at(a, i), t = threadIdx.x;
    const uint32_t seq = a.seq_of[row], n_ctx = ctx_of(a, row); /* both loads at once */
    const uint32_t n_chunks = (n_ctx + kThreads - 1) / kThreads;
    const bool fits = n_chunks >= 1 && n_chunks <= sp.max_chunks;
    if (blockIdx.z >= (fits ? n_chunks : 1)) return; /* uniform over the CTA; writes nothing */
    pgd_dev_pdl_enter();
    tile_ctx c;
    const uint32_t h0 = tile_setup(a, sm, attn_vs, row, seq, n_ctx, blockIdx.z * kThreads, c);
    uint16_t *orow = a.out + ((uint64_t)row * a.n_head + h0) * c.D;
    float oc[kUnits][2] = {};
    if (!fits) { /* zeros for a padding row, a bf16 NaN for one the scratch cannot hold */
        write_units(c, orow, oc, NULL, n_chunks == 0 ? 0 : 0x7FC0u);
        return;
    }
    for (uint32_t ci = blockIdx.z; ci < n_chunks; ci += gridDim.z) {
        const uint32_t c0 = ci * kThreads;
        float mc[kTile], sc[kTile];
        chunk_partial(c, sm, c0, min(kThreads, n_ctx - c0), mc, sc, oc);
        if (n_chunks == 1) {
            float su[kUnits];
            per_unit(c, sc, su);
            write_units(c, orow, oc, su, 0);
            return;
        }
        if (t < c.n_heads) {
            float *p = partial_at(a, sp, i, h0 + t, ci);
            p[0] = pick(mc, t);
            p[1] = pick(sc, t);
        }
#pragma unroll
        for (uint32_t k = 0; k < kUnits; k++) {
            if (k >= c.n_units) break;
            uint32_t g, d;
            unit_of(c, k, &g, &d);
            float *p = partial_at(a, sp, i, h0 + g, ci) + 2 + d;
            p[0] = oc[k][0];
            p[1] = oc[k][1];
        }
    }
    /* the partials visible to the whole GPU before this CTA counts itself in */
    __threadfence();
    __syncthreads();
    if (t == 0) {
        uint32_t *n_done = sp.arrived + (uint64_t)i * gridDim.y + blockIdx.y;
        const uint32_t ctas = min(gridDim.z, n_chunks);
        last = atomicAdd(n_done, 1u) + 1 == ctas;
        if (last) *n_done = 0; /* every CTA of the row has counted: ready for the next launch */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    merge_units(a, sp, c, i, h0, n_chunks, orow);
}

/* The dynamic shared memory of both kernels: the chunk's V rows. */
size_t vs_bytes(uint32_t D) {
    return (size_t)kThreads * D * sizeof(uint16_t);
}

/* Allow it beyond the default 48 KiB (64 KiB at head_dim 128: two CTAs an SM still fit), once
 * per device and head_dim: the first launch of a shape runs eagerly, so a CUDA graph capture
 * (engine/backends/cuda.c) never meets the attribute call. */
int vs_opt_in(uint32_t D) {
    static uint32_t
        opted[PGD_CUDA_MAX_DEVICES]; /* the largest head_dim allowed so far, per device */
    int dev = 0;
    PGD_CUDA_TRY(cudaGetDevice(&dev));
    if (dev >= 0 && dev < PGD_CUDA_MAX_DEVICES && opted[dev] >= D) return 0;
    PGD_CUDA_TRY(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)vs_bytes(D)));
    PGD_CUDA_TRY(cudaFuncSetAttribute(
        attention_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)vs_bytes(D)));
    if (dev >= 0 && dev < PGD_CUDA_MAX_DEVICES) opted[dev] = D;
    return 0;
}

/* The argument checks both entry points share; fills *a (every row: no row list). 0, or
 * PGD_EINVAL (said). */
int attn_prepare(const float *q, uint32_t q_stride, const uint16_t *kv, pgd_kv_geom geom,
                 uint32_t layer, uint32_t n_head, const int32_t *block_tables, uint32_t bt_stride,
                 const uint32_t *seq_of, const int32_t *pos, float scale, uint16_t *out,
                 attn_args *a) {
    const uint32_t D = geom.head_dim;
    if (geom.n_kv_head == 0 || n_head == 0 || n_head % geom.n_kv_head || D == 0 || D % 8 ||
        D > PGD_ATTN_MAX_HEAD_DIM || geom.block_size == 0 || layer >= geom.n_layer)
        return pgd_error_set(PGD_EINVAL,
                             "CUDA attention: %u heads over %u KV heads, head_dim %u (a multiple "
                             "of 8, at most %u), block size %u, layer %u of %u",
                             n_head, geom.n_kv_head, D, PGD_ATTN_MAX_HEAD_DIM, geom.block_size,
                             layer, geom.n_layer);
    if ((uintptr_t)kv % 16)
        return pgd_error_set(PGD_EINVAL, "CUDA attention: the KV slab is not 16-byte aligned");
    const uint32_t group = n_head / geom.n_kv_head, n_tiles = (group + kTile - 1) / kTile;
    *a = {q,         q_stride, kv,  geom,  layer, n_head, group, n_tiles, block_tables,
          bt_stride, seq_of,   pos, scale, out,   NULL};
    if ((uint64_t)geom.n_kv_head * a->n_tiles > 65535)
        return pgd_error_set(PGD_EINVAL, "CUDA attention: %u KV heads x %u head tiles",
                             geom.n_kv_head, a->n_tiles);
    return 0;
}

} // namespace

extern "C" size_t pgd_cuda_attention_split_bytes(uint32_t T, uint32_t n_head, uint32_t head_dim,
                                                 uint32_t max_ctx) {
    const uint64_t chunks = ((uint64_t)max_ctx + PGD_ATTN_CHUNK - 1) / PGD_ATTN_CHUNK;
    return (size_t)((uint64_t)T * n_head * chunks * (2 + head_dim) * sizeof(float));
}

extern "C" size_t pgd_cuda_attention_split_counters(uint32_t T, uint32_t n_head) {
    return (size_t)T * n_head; /* >= T x n_kv_head x head tiles: a tile has >= 1 head */
}

extern "C" int pgd_cuda_attention_split(const float *q, uint32_t q_stride, const uint16_t *kv,
                                        pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                        const int32_t *block_tables, uint32_t bt_stride,
                                        const uint32_t *seq_of, const int32_t *pos,
                                        const uint32_t *rows, uint32_t T, float scale,
                                        uint32_t n_split, uint32_t max_ctx, float *scratch,
                                        uint32_t *arrived, uint16_t *out, void *stream) {
    attn_args a;
    int rc = attn_prepare(q, q_stride, kv, geom, layer, n_head, block_tables, bt_stride, seq_of,
                          pos, scale, out, &a);
    if (rc) return rc;
    a.rows = rows;
    if (n_split <= 1) {
        if (T == 0) return 0;
        if ((rc = vs_opt_in(geom.head_dim))) return rc;
        PGD_CUDA_TRY(pgd_cuda_launch(attention_kernel, dim3(T, geom.n_kv_head * a.n_tiles),
                                     kThreads, vs_bytes(geom.head_dim), stream, a));
        return 0;
    }
    const uint32_t max_chunks = (max_ctx + PGD_ATTN_CHUNK - 1) / PGD_ATTN_CHUNK;
    if (n_split > 65535 || max_chunks == 0 || !scratch || !arrived)
        return pgd_error_set(
            PGD_EINVAL, "CUDA attention: split %u ways over contexts of %u positions%s", n_split,
            max_ctx, scratch && arrived ? "" : " without scratch or counters");
    if (T == 0) return 0;
    const split_args sp = {scratch, max_chunks, arrived};
    const dim3 grid(T, geom.n_kv_head * a.n_tiles, n_split < max_chunks ? n_split : max_chunks);
    if ((rc = vs_opt_in(geom.head_dim))) return rc;
    PGD_CUDA_TRY(pgd_cuda_launch(attention_split_kernel, grid, kThreads, vs_bytes(geom.head_dim),
                                 stream, a, sp));
    return 0;
}

extern "C" int pgd_cuda_attention(const float *q, uint32_t q_stride, const uint16_t *kv,
                                  pgd_kv_geom geom, uint32_t layer, uint32_t n_head,
                                  const int32_t *block_tables, uint32_t bt_stride,
                                  const uint32_t *seq_of, const int32_t *pos, uint32_t T,
                                  float scale, uint16_t *out, void *stream) {
    attn_args a;
    int rc = attn_prepare(q, q_stride, kv, geom, layer, n_head, block_tables, bt_stride, seq_of,
                          pos, scale, out, &a);
    if (rc) return rc;
    if (T == 0) return 0;
    const dim3 grid(T, geom.n_kv_head * a.n_tiles);
    if ((rc = vs_opt_in(geom.head_dim))) return rc;
    PGD_CUDA_TRY(
        pgd_cuda_launch(attention_kernel, grid, kThreads, vs_bytes(geom.head_dim), stream, a));
    return 0;
}
