/*
 * engine/backends/cuda.c — the CUDA backend: a llama-family forward pass on one GPU over the paged
 * KV slab, with the rows it can sample sampled on the device. Ran on an H200 and an H100
 * (scripts/gpu-check: bench/results/gpu-h200.md, gpu-h100.md), every CUDA test passing.
 *
 * Owns (device memory): the weights in bf16, or every matrix in 8 bits (--gpu-weights q8_0, or
 * auto's choice where bf16 leaves too little room: kernels/cuda/q8.h's form, made on the device
 * at load; its products on gemv_q8.h and gemm_grouped.h's _q8 forms, and the dense layers'
 * products of DEQ_ROWS rows and more on cuBLASLt over the weights dequantized chunk by chunk,
 * gemm.h's pgd_cuda_gemm_deq; first run on an H200 on 2026-12-04), or (q4, auto's where 8
 * bits leave too little) each matrix whose file blocks are 4-bit in 4 bits (kernels/cuda/q4.h:
 * Q4_1 blocks made on the host, split on the device; gemv_q4.h, the _q4 forms, the same
 * dequantized products) and the others in 8 (cuda_weights.c's mat_form; a
 * fused QKV's parts each in their own: alloc_qkv) — per layer the fused QKV [(H + 2 Hkv) D][E] and
 * gate/up [2F][E] matrices, wo [E][H D], down [E][F]; norms (qwen3's q and k head norms too,
 * [D] each) and biases in f32; with experts, per layer the router and each expert's fused gate/up
 * and down instead of the dense FFN's — the RoPE cos/sin table [n_ctx_train][rope_dim] computed
 * on the host by the CPU's own function (bit-identical angles), the KV slab (kv_layout.h),
 * activations for max_tokens tokens, the logits of the rows a step computes, the step's
 * metadata; on the host a pinned mirror of the metadata and of the sampled results. One stream;
 * one event per step.
 *
 * A step: one host-to-device copy of the packed metadata (tokens, positions, slots, sequence of
 * each token, the block table rows, the rows whose logits are computed, the sampled rows' specs
 * and random bits); then embedding; per layer: residual add + RMSNorm (the previous layer's
 * output added in the same kernel), QKV GEMM, the RMSNorm of every q and k head (qwen3's
 * qk_norm: kernels/cuda/head_norm.h), bias + RoPE + KV write, paged
 * attention — the prefill chunks' query tiles on tensor cores, the other rows on CUDA cores
 * (split over the KV chunks for launches of few rows: pgd_cuda_attn_splits; those launches on
 * the tensor-core decode kernel, the default since an H200 measured it 6.4% faster a batch-1
 * decode token; PGD_CUDA_DECODE_TC=0 keeps them on CUDA cores), as the metadata's attention work
 * says (pgd_cuda_attn_plan; all on CUDA cores with --batch-invariant) — wo GEMM, add + RMSNorm,
 * gate/up GEMM (bf16 out), SiLU*up, down GEMM (a mixture of experts instead: the router GEMM, each
 * token's experts chosen, the step's token-expert pairs grouped by expert and multiplied by their
 * experts' matrices in grouped products, SiLU*up between them, each token's experts mixed into its
 * row — kernels/cuda/moe.h, gemm_grouped.h: moe_ffn);
 * the final add + norm for the asked rows only, the output GEMM, device sampling; the results
 * (and any full-logit rows) back, and the normed rows an embedding asks for (bf16, widened to f32
 * on the host); one wait on the step's event.
 * Nothing is allocated inside a step. After it, a sampled row the device handed back (a top-p
 * nucleus past its candidate list) is sampled on the host from its logits, still on the device
 * (one copy and one wait more, for that row only).
 *
 * CUDA graphs: a decode-only step whose rows are all sampled on the device
 * (pgd_cuda_graph_fits) runs as a graph captured for its padded size and block-table stride
 * (cuda_plan.h) at their second use (the first runs eagerly, a warm-up): the metadata goes up
 * padded (padding rows attend to nothing and write no KV), then one cudaGraphLaunch replays the
 * whole step, the copy of the results included. A graph's kernels read everything else from the
 * metadata buffer, whose address is fixed. Other steps run eagerly, as does every step with
 * enforce_eager. A failed capture turns graphs off for good, with a line on stderr, and the step
 * runs eagerly.
 *
 * The weights' forms, upload and sizing are engine/backends/cuda_weights.c's (the state shared
 * with it: cuda_internal.h): a file's tensors go up in chunks through two pinned buffers in turn,
 * the host reading (and for 4 bits re-blocking) the next chunk on every CPU while the device
 * copies and converts the last.
 *
 * All of the above ran on an H200 (bench/results/gpu-h200.md, 2026-12-04); the H100 ran it as at
 * bd7e959, before the mixtures of experts, 8 and 4 bits, qk_norm and the hidden rows.
 *
 * Memory plan at create: weights first, then activations, GEMM workspace and metadata, then the
 * KV cache from what remains under gpu_memory_utilization of the device's memory (or exactly
 * kv_cache_bytes / kv_blocks when given).
 *
 * Threading: one caller at a time (the scheduler thread), like every backend.
 */
#include "engine/backends/cuda.h"
#include "engine/backends/cuda_internal.h"
#include "engine/backends/cuda_plan.h"

#include <dlfcn.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/sampling/sampler.h" /* pgd_sample_logits: rows left to the host */
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_math.h" /* PGD_ATTN_HEAD_TILE */
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_grouped.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_q4.h"
#include "kernels/cuda/gemv_q8.h"
#include "kernels/cuda/head_norm.h"
#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/sample.h"
#include "kernels/cuda/silu_mul.h"

#define WORKSPACE_BYTES (32u << 20)       /* cuBLASLt workspace */
#define SEQS_LIMIT      PGD_GPU_STEP_SEQS /* most sequences, and logit rows, in one step */
/* 8-bit (4-bit) products of this many rows and more go through cuBLASLt on their weights
 * dequantized to bf16 (gemm.h's pgd_cuda_gemm_deq; PGD_CUDA_DEQ_ROWS=N sets both, 0 turns it
 * off; --batch-invariant: off). Measured on an H200 (bench_cuda_decode_kernels' 8- and 4-bit
 * tables, bench/results/gpu-h200-kernels.md, 2026-12-04), Llama-3-8B's gate/up, the
 * dequantized product against the tensor-core kernel: 8 bits 178 against 117 us at 64 rows, 203
 * against 200 at 128, 205 against 383 at 256; 4 bits 190 against 143 at 64, 216 against 250 at
 * 128, 217 against 487 at 256 (the dequantization's own pass over the weights is most of the
 * first figure). So from 256 rows in 8 bits and 128 in 4: decode steps of that many sequences
 * too. */
#define DEQ_ROWS_DEFAULT    256
#define DEQ_ROWS_Q4_DEFAULT 128
/* MiB for their bf16 chunks of weights (gemm.h; PGD_CUDA_DEQ_SCRATCH_MB=N, 0 as
 * PGD_CUDA_DEQ_ROWS=0: smaller chunks may stay in the L2 for cuBLASLt to read;
 * bench_cuda_decode_kernels times 32) */
#define DEQ_SCRATCH_MB 256

int pgd_cuda_devices(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* no driver / no device: not an error for the caller */
        n = 0;
    } else if (n == 0) {
        e = cudaErrorNoDevice;
    }
    if (why) *why = n > 0 ? NULL : cudaGetErrorString(e);
    if (why && e == cudaErrorInsufficientDriver) { /* also what the runtime says with no driver */
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (drv)
            dlclose(drv);
        else
            *why = "the CUDA driver, libcuda.so.1, is not installed";
    }
    return n;
}

/* ---- allocation ------------------------------------------------------------------------- */

int pgd__cuda_dalloc(cuda_backend *b, size_t bytes, void **out) {
    *out = NULL;
    if (b->sizing) { /* pgd__cuda_weights_bytes: counted, not allocated */
        b->sized += bytes;
        return 0;
    }
    if (b->n_allocs == b->cap_allocs) {
        uint32_t cap = b->cap_allocs ? b->cap_allocs * 2 : 64;
        void **p = realloc(b->allocs, cap * sizeof *p);
        if (!p) return PGD_ENOMEM;
        b->allocs = p;
        b->cap_allocs = cap;
    }
    if (cudaMalloc(out, bytes ? bytes : 16) != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        return pgd_error_set(PGD_ECUDA, "out of GPU memory: %zu MiB asked, %zu MiB free of %zu MiB",
                             bytes >> 20, free_b >> 20, total >> 20);
    }
    b->allocs[b->n_allocs++] = *out;
    return 0;
}

/* The cos/sin of every position the model can reach, by the CPU's own functions. The copy goes
 * on the backend's stream and is waited for: a plain cudaMemcpy from pageable memory runs on the
 * legacy default stream and may return before its DMA lands, and the non-blocking stream's
 * kernels are not ordered after the legacy stream. */
static int load_rope(cuda_backend *b) {
    const pgd_model_config *c = &b->base.model->cfg;
    const pgd_model *m = b->base.model;
    double *inv = malloc(b->rope_dim / 2 * sizeof *inv);
    float *cs = malloc((uint64_t)b->n_pos * b->rope_dim * sizeof *cs);
    int rc = PGD_ENOMEM;
    if (inv && cs) {
        pgd_rope_inv_freq(inv, b->rope_dim, c->rope_base,
                          m->rope_freqs.data ? (const float *)m->rope_freqs.data : NULL);
        for (uint32_t p = 0; p < b->n_pos; p++)
            pgd_rope_cos_sin(cs + (uint64_t)p * b->rope_dim, inv, b->rope_dim,
                             (double)p / c->rope_linear_scale);
        rc = DALLOC(b, b->cos_sin, (uint64_t)b->n_pos * b->rope_dim * sizeof *cs);
        if (!rc && (cudaMemcpyAsync(b->cos_sin, cs, (uint64_t)b->n_pos * b->rope_dim * sizeof *cs,
                                    cudaMemcpyHostToDevice, b->stream) != cudaSuccess ||
                    cudaStreamSynchronize(b->stream) != cudaSuccess))
            rc = pgd_error_set(PGD_ECUDA, "cannot upload the RoPE table: %s",
                               cudaGetErrorString(cudaGetLastError()));
    }
    free(inv);
    free(cs);
    return rc;
}

/* ---- step buffers ----------------------------------------------------------------------- */

/* The most rows an attention launch splits (cuda_plan.h). */
static uint32_t split_rows(const cuda_backend *b) {
    return b->max_tokens < PGD_CUDA_SPLIT_ROWS ? b->max_tokens : PGD_CUDA_SPLIT_ROWS;
}

static int alloc_step(cuda_backend *b) {
    const uint64_t T = b->max_tokens, E = b->E, QD = (uint64_t)b->H * b->D;
    uint64_t xb_cols = E > QD ? E : QD;
    if (b->F > xb_cols) xb_cols = b->F;
    b->ml = pgd_cuda_meta_layout_of(b->max_tokens, SEQS_LIMIT, SEQS_LIMIT, b->stride_max);
    const size_t arrived_bytes =
        pgd_cuda_attention_split_counters(split_rows(b), b->H) * sizeof(uint32_t);
    int rc;
    if ((rc = DALLOC(b, b->x, T * E * sizeof(float))) || (rc = DALLOC(b, b->xb, T * xb_cols * 2)) ||
        (rc = DALLOC(b, b->qkv, T * b->QKV * sizeof(float))) ||
        (rc = DALLOC(b, b->proj, T * E * sizeof(float))) ||
        (rc = DALLOC(b, b->gu, T * 2 * b->F * sizeof(uint16_t))) ||
        (rc = DALLOC(b, b->logits, (uint64_t)SEQS_LIMIT * b->V * sizeof(float))) ||
        (rc = DALLOC(b, b->d_results, SEQS_LIMIT * sizeof(pgd_sample_result))) ||
        (rc = DALLOC(b, b->attn_scratch,
                     pgd_cuda_attention_split_bytes(split_rows(b), b->H, b->D, b->n_pos))) ||
        (rc = DALLOC(b, b->attn_arrived, arrived_bytes)) ||
        (rc = DALLOC(b, b->d_meta, b->ml.total)))
        return rc;
    if (b->NE) { /* the experts' step buffers, for T K pairs */
        const uint64_t P = T * b->K, gu = P * 2 * b->FX * 2, down = P * E * sizeof(float);
        if ((rc = DALLOC(b, b->rlogit, T * b->NE * sizeof(float))) ||
            (rc = DALLOC(b, b->pick, P * sizeof(uint32_t))) ||
            (rc = DALLOC(b, b->pick_w, P * sizeof(float))) ||
            (rc = DALLOC(b, b->ex_counts, (b->NE + 1) * sizeof(uint32_t))) ||
            (rc = DALLOC(b, b->sorted_tok, P * sizeof(uint32_t))) ||
            (rc = DALLOC(b, b->row_of, P * sizeof(uint32_t))) ||
            (rc = DALLOC(b, b->ex_tiles,
                         pgd_grouped_max_tiles((uint32_t)P, b->NE) * sizeof(pgd_grouped_tile))) ||
            (rc = DALLOC(b, b->ex_n_tiles, sizeof(uint32_t))) ||
            (rc = DALLOC(b, b->ex_act, P * b->FX * 2)) ||
            (rc = DALLOC(b, b->ex_out, gu > down ? gu : down)))
            return rc;
    }
    PGD_CUDA_TRY(cudaMemset(b->attn_arrived, 0, arrived_bytes));
    PGD_CUDA_TRY(cudaMallocHost((void **)&b->h_meta, b->ml.total));
    PGD_CUDA_TRY(cudaMallocHost((void **)&b->h_results, SEQS_LIMIT * sizeof(pgd_sample_result)));
    PGD_CUDA_TRY(cudaMallocHost((void **)&b->h_hidden, T * E * sizeof(uint16_t)));
    if (!(b->host_row = malloc((size_t)b->V * sizeof *b->host_row))) return PGD_ENOMEM;
    return pgd_sampler_scratch_create((int32_t)b->V, &b->host_sc);
}

/* The dense layers' products over 8- or 4-bit weights for deq_rows rows and more: their plans
 * (each layer's matrices point at their shape's), one scratch for the largest chunk. */
static int make_deq_plans(cuda_backend *b) {
    const uint32_t fewest = b->deq_rows_q4 < b->deq_rows ? b->deq_rows_q4 : b->deq_rows;
    if (!fewest || b->max_tokens < fewest) return 0;
    const uint32_t T = b->max_tokens, E = b->E, QD = b->H * b->D;
    const pgd_cuda_gemm_mode fast = PGD_CUDA_GEMM_FAST;
    const pgd_cuda_gemm_out F32 = PGD_CUDA_GEMM_OUT_F32, BF16 = PGD_CUDA_GEMM_OUT_BF16;
    int rc;
    if ((!b->gemm && (rc = pgd_cuda_gemm_create(WORKSPACE_BYTES, &b->gemm))) ||
        (rc = pgd_cuda_gemm_deq_create(b->gemm, E, QD, T, b->deq_bytes, fast, F32, &b->d_o)))
        return rc;
    if (!b->NE &&
        ((rc = pgd_cuda_gemm_deq_create(b->gemm, 2 * b->F, E, T, b->deq_bytes, fast, BF16,
                                        &b->d_gu)) ||
         (rc = pgd_cuda_gemm_deq_create(b->gemm, E, b->F, T, b->deq_bytes, fast, F32, &b->d_down))))
        return rc;
    for (uint32_t li = 0; li < b->geom.n_layer; li++) {
        layer *L = &b->layers[li];
        L->wo.deq = b->d_o, L->wgu.deq = b->d_gu, L->wdown.deq = b->d_down;
        for (uint32_t r = 0; r < L->n_qkv; r++) { /* a QKV run's plans (the whole), by its rows */
            const uint32_t n = L->qkv_row[r + 1] - L->qkv_row[r];
            uint32_t i = 0;
            while (i < b->n_d_run && b->d_run_n[i] != n) i++;
            PGD_ASSERT(i < PGD_ARRAY_LEN(b->d_run));
            if (i == b->n_d_run &&
                (rc = pgd_cuda_gemm_deq_create_ld(b->gemm, n, E, b->QKV, T, b->deq_bytes, fast, F32,
                                                  &b->d_run[b->n_d_run])))
                return rc;
            if (i == b->n_d_run) b->d_run_n[b->n_d_run++] = n;
            L->wqkv[r].deq = b->d_run[i];
        }
    }
    uint64_t scratch = 0;
    pgd_cuda_gemm_deq *all[] = {b->d_o, b->d_gu, b->d_down};
    for (size_t i = 0; i < PGD_ARRAY_LEN(all); i++)
        if (all[i] && pgd_cuda_gemm_deq_scratch(all[i]) > scratch)
            scratch = pgd_cuda_gemm_deq_scratch(all[i]);
    for (uint32_t i = 0; i < b->n_d_run; i++)
        if (pgd_cuda_gemm_deq_scratch(b->d_run[i]) > scratch)
            scratch = pgd_cuda_gemm_deq_scratch(b->d_run[i]);
    return DALLOC(b, b->deq_scratch, scratch);
}

/* The cuBLASLt plans of the bf16 matrices' shapes: all with bf16 weights; with 8- or 4-bit ones
 * the output head's where it stays bf16 (cuda_plan.h's pgd_cuda_head_bf16), then
 * make_deq_plans. */
static int make_plans(cuda_backend *b) {
    const uint32_t T = b->max_tokens, E = b->E, QD = b->H * b->D;
    const pgd_cuda_gemm_mode fast = b->opt.batch_invariant ? PGD_CUDA_GEMM_INVARIANT
                                    : b->opt.decode_gemv   ? PGD_CUDA_GEMM_FAST_GEMV
                                                           : PGD_CUDA_GEMM_FAST;
    const pgd_cuda_gemm_out F32 = PGD_CUDA_GEMM_OUT_F32, BF16 = PGD_CUDA_GEMM_OUT_BF16;
    int rc;
    if (b->wmode != PGD_CUDA_WEIGHTS_BF16) {
        if (b->output.form == FORM_BF16 &&
            ((rc = pgd_cuda_gemm_create(WORKSPACE_BYTES, &b->gemm)) ||
             (rc = pgd_cuda_gemm_plan_create(b->gemm, b->V, E, SEQS_LIMIT, fast, F32, &b->p_out))))
            return rc;
        return make_deq_plans(b);
    }
    if ((rc = pgd_cuda_gemm_create(WORKSPACE_BYTES, &b->gemm)) ||
        (rc = pgd_cuda_gemm_plan_create(b->gemm, b->QKV, E, T, fast, F32, &b->p_qkv)) ||
        (rc = pgd_cuda_gemm_plan_create(b->gemm, E, QD, T, fast, F32, &b->p_o)) ||
        (rc = pgd_cuda_gemm_plan_create(b->gemm, b->V, E, SEQS_LIMIT, fast, F32, &b->p_out)))
        return rc;
    if (b->NE) /* the router; the experts' products are grouped (gemm_grouped.h) */
        return pgd_cuda_gemm_plan_create(b->gemm, b->NE, E, T, fast, F32, &b->p_router);
    /* gate/up in bf16: SiLU * up reads it once (gemm.h) */
    if ((rc = pgd_cuda_gemm_plan_create(b->gemm, 2 * b->F, E, T, fast, BF16, &b->p_gu)) ||
        (rc = pgd_cuda_gemm_plan_create(b->gemm, E, b->F, T, fast, F32, &b->p_down)))
        return rc;
    return 0;
}

/* The KV cache from what is left (or what was asked). */
static int alloc_kv(cuda_backend *b, const pgd_backend_config *cfg, uint64_t *device_total) {
    size_t free_b = 0, total = 0;
    PGD_CUDA_TRY(cudaMemGetInfo(&free_b, &total));
    *device_total = total;
    const uint64_t block_bytes = pgd_kv_block_elems(b->geom) * 2;
    double util = cfg->gpu_memory_utilization > 0 ? cfg->gpu_memory_utilization
                                                  : PGD_DEFAULT_GPU_MEMORY_UTILIZATION;
    uint64_t n = pgd_cuda_kv_blocks(total, free_b, util, 256u << 20, block_bytes,
                                    cfg->kv_cache_bytes, cfg->kv_blocks);
    if (!n)
        return pgd_error_set(PGD_EINVAL,
                             "KV cache: not even 2 blocks of %u tokens (%llu KiB each) fit: %zu "
                             "MiB free of %zu MiB on the GPU after the weights, share %.2f",
                             b->geom.block_size, (unsigned long long)(block_bytes >> 10),
                             free_b >> 20, total >> 20, util);
    b->n_blocks = (uint32_t)n;
    int rc = DALLOC(b, b->kv, n * block_bytes);
    if (rc) return rc;
    PGD_CUDA_TRY(cudaMemsetAsync(b->kv, 0, n * block_bytes, b->stream));
    return 0;
}

/* ---- the step --------------------------------------------------------------------------- */

static bool cuda_can_sample(const pgd_backend *base, const pgd_sample_spec *spec) {
    (void)base;
    return pgd_cuda_sample_supports(spec);
}

/* Pack the batch's metadata (host mirror) and upload it in one copy; b->work gets its
 * attention work. */
static int upload_meta(cuda_backend *b, const pgd_batch *bt) {
    PGD_ASSERT(bt->n_tokens <= b->max_tokens && bt->n_seqs <= SEQS_LIMIT &&
               bt->bt_stride <= b->stride_max && bt->n_logits + bt->n_samples <= SEQS_LIMIT);
    size_t bytes = pgd_cuda_meta_pack(&b->ml, bt, b->tc_rows, &b->work, b->h_meta);
    PGD_CUDA_TRY(cudaMemcpyAsync(b->d_meta, b->h_meta, bytes, cudaMemcpyHostToDevice, b->stream));
    return 0;
}

/* Whether the products of M rows over 8- or 4-bit weights run on the GEMV (gemv_q8.h,
 * gemv_q4.h), else on the tensor-core kernel (gemm_grouped.h's pgd_cuda_gemm_q8 / _q4) — the
 * latter alone with --batch-invariant (its bits do not depend on M) or --no-decode-gemv. */
static bool q_gemv(const cuda_backend *b, uint32_t M) {
    return !b->opt.batch_invariant && b->opt.decode_gemv && M <= PGD_CUDA_GEMV_MAX_M;
}

/* Y = X · Wᵀ for M rows: X bf16 [M][K], W [N][K], Y f32 (out_bf16: bf16) [M][ldy] (columns
 * [0, N)) by W's form — on bf16 the plan's (gemm.h: its GEMV range included; ldy N), on 8 or 4
 * bits the GEMV (f32 out only: the caller's q_gemv said no for bf16 out), cuBLASLt on the
 * weights dequantized (deq_rows rows and more, where W has those plans: their output type and
 * ldy are the caller's) or the tensor-core kernel. */
static int mm_out(cuda_backend *b, pgd_cuda_gemm_plan *plan, const uint16_t *X, const dmat *W,
                  void *Y, uint32_t ldy, bool out_bf16, uint32_t M, uint32_t N, uint32_t K,
                  void *s) {
    const bool gemv = !out_bf16 && q_gemv(b, M),
               deq = W->deq && M >= (W->form == FORM_Q4 ? b->deq_rows_q4 : b->deq_rows);
    switch (W->form) {
    case FORM_Q8:
        return gemv  ? pgd_cuda_gemv_q8_ld(X, W->q, Y, ldy, M, N, K, s)
               : deq ? pgd_cuda_gemm_deq_q8(b->gemm, W->deq, X, W->q, b->deq_scratch, Y, M, s)
                     : pgd_cuda_gemm_q8_ld(X, W->q, M, N, K, ldy, out_bf16, Y, s);
    case FORM_Q4:
        return gemv  ? pgd_cuda_gemv_q4_ld(X, W->q4, Y, ldy, M, N, K, s)
               : deq ? pgd_cuda_gemm_deq_q4(b->gemm, W->deq, X, W->q4, b->deq_scratch, Y, M, s)
                     : pgd_cuda_gemm_q4_ld(X, W->q4, M, N, K, ldy, out_bf16, Y, s);
    default:
        PGD_ASSERT(ldy == N);
        return pgd_cuda_gemm_run(b->gemm, plan, X, W->h, Y, M, s);
    }
}

static int mm(cuda_backend *b, pgd_cuda_gemm_plan *plan, const uint16_t *X, const dmat *W, float *Y,
              uint32_t M, uint32_t N, uint32_t K, void *s) {
    return mm_out(b, plan, X, W, Y, N, false, M, N, K, s);
}

/* Layer L's QKV product of T rows (xb) into qkv [T][QKV]: each run its columns. */
static int mm_qkv(cuda_backend *b, const layer *L, uint32_t T, void *s) {
    int rc = 0;
    for (uint32_t r = 0; r < L->n_qkv && !rc; r++)
        rc = mm_out(b, b->p_qkv, b->xb, &L->wqkv[r], b->qkv + L->qkv_row[r], b->QKV, false, T,
                    L->qkv_row[r + 1] - L->qkv_row[r], b->E, s);
    return rc;
}

/* The experts' products over the step's tiles (gemm_grouped.h), in the weights' form. */
static int grouped(cuda_backend *b, const uint16_t *X, const uint32_t *gather, const dmat *W,
                   uint32_t N, uint32_t K, uint32_t max_tiles, bool out_bf16, void *Y, void *s) {
    switch (W->form) {
    case FORM_Q8:
        return pgd_cuda_gemm_grouped_q8(X, gather, W->q, N, K, b->ex_tiles, b->ex_n_tiles,
                                        max_tiles, out_bf16, Y, s);
    case FORM_Q4:
        return pgd_cuda_gemm_grouped_q4(X, gather, W->q4, N, K, b->ex_tiles, b->ex_n_tiles,
                                        max_tiles, out_bf16, Y, s);
    default:
        return pgd_cuda_gemm_grouped(X, gather, W->h, N, K, b->ex_tiles, b->ex_n_tiles, max_tiles,
                                     out_bf16, Y, s);
    }
}

/* A mixture of experts' FFN after its norm (in xb [T][E]), into proj [T][E]: the router's
 * logits, each token's K experts and weights, the T K pairs grouped by expert into tiles, the
 * grouped gate/up product over xb's rows (gathered), SiLU * up, the grouped down product, each
 * token's K outputs mixed into its row of proj (kernels/cuda/moe.h). Every size the kernels
 * take from the routing stays on the device: a decode graph captures it as it is. */
static int moe_ffn(cuda_backend *b, const layer *L, uint32_t T, void *s) {
    const uint32_t P = T * b->K, max_tiles = pgd_grouped_max_tiles(P, b->NE);
    int rc;
    if ((rc = mm(b, b->p_router, b->xb, &L->router, b->rlogit, T, b->NE, b->E, s)) ||
        (rc = pgd_cuda_moe_route(b->rlogit, T, b->NE, b->K, b->pick, b->pick_w, s)) ||
        (rc = pgd_cuda_moe_group(b->pick, T, b->NE, b->K, b->ex_counts, b->sorted_tok, b->row_of,
                                 b->ex_tiles, b->ex_n_tiles, s)) ||
        (rc = grouped(b, b->xb, b->sorted_tok, &L->exp_gu, 2 * b->FX, b->E, max_tiles, true,
                      b->ex_out, s)) ||
        (rc = pgd_cuda_silu_mul_bf16(b->ex_out, P, b->FX, b->ex_act, s)) ||
        (rc = grouped(b, b->ex_act, NULL, &L->exp_down, b->E, b->FX, max_tiles, false, b->ex_out,
                      s)))
        return rc;
    return pgd_cuda_moe_combine(b->ex_out, b->row_of, b->pick_w, T, b->K, b->E, b->proj, s);
}

/* The gate/up product of T rows ending in SiLU * up on a GEMV kernel (the bf16 [T][F] into gu),
 * where T rows run on one (bf16: where the plan says, one row by default; 8 and 4 bits: q_gemv).
 * 1 when it ran, 0 when T rows do not take it, or a negative code. */
static int gemv_silu(cuda_backend *b, const dmat *W, uint32_t T, void *s) {
    if (W->form == FORM_BF16 ? !pgd_cuda_gemm_plan_gemv(b->p_gu, T) : !q_gemv(b, T)) return 0;
    int rc = W->form == FORM_Q8   ? pgd_cuda_gemv_q8_silu(b->xb, W->q, b->gu, T, b->F, b->E, s)
             : W->form == FORM_Q4 ? pgd_cuda_gemv_q4_silu(b->xb, W->q4, b->gu, T, b->F, b->E, s)
                                  : pgd_cuda_gemv_silu(b->xb, W->h, b->gu, T, b->F, b->E, s);
    return rc ? rc : 1;
}

/* The FFN after its norm (in xb): gate/up (bf16 [T][2F] into gu), SiLU * up (into xb), down into
 * proj — or on a GEMV kernel (gemv_silu) the gate/up product ending in SiLU * up itself, its
 * bf16 [T][F] written over gu's memory (xb is its input). */
static int ffn(cuda_backend *b, const layer *L, uint32_t T, void *s) {
    int rc;
    if (b->NE) return moe_ffn(b, L, T, s);
    const uint16_t *act = b->xb;
    if ((rc = gemv_silu(b, &L->wgu, T, s)) < 0) return rc;
    if (rc) {
        act = b->gu;
    } else if ((rc = mm_out(b, b->p_gu, b->xb, &L->wgu, b->gu, 2 * b->F, true, T, 2 * b->F, b->E,
                            s)) ||
               (rc = pgd_cuda_silu_mul_bf16(b->gu, T, b->F, b->xb, s))) {
        return rc;
    }
    return mm(b, b->p_down, act, &L->wdown, b->proj, T, b->E, b->F, s);
}

/* The attention of layer li: the tensor-core kernel over the work's tiles and the CUDA-core one
 * over its rows; work NULL: every one of the T rows on CUDA cores (a decode graph). */
static int attention(cuda_backend *b, uint32_t li, uint32_t T, uint32_t stride,
                     const pgd_cuda_attn_work *work) {
    const pgd_cuda_meta_layout *l = &b->ml;
    const int32_t *d_pos = (const int32_t *)(b->d_meta + l->pos);
    const uint32_t *d_seq_of = (const uint32_t *)(b->d_meta + l->seq_of);
    const int32_t *d_tables = (const int32_t *)(b->d_meta + l->tables);
    const float scale = 1.0f / sqrtf((float)b->D);
    const uint32_t n = work ? work->n_rows : T;
    const uint32_t *rows = work ? (const uint32_t *)(b->d_meta + l->attn_rows) : NULL;
    /* 1 for more rows than PGD_CUDA_SPLIT_ROWS (>= split_rows(b), what the scratch holds) */
    /* the decode kernel's CTAs of a row: one per KV head (the scratch holds split_rows(b) rows) */
    const bool dec = b->dec_tc && n && n <= split_rows(b);
    /* the decode kernel's rows must be their sequences' only rows (attention.h): a graph's are
     * decode rows, and the plan puts every longer chunk in tiles when tiles are on */
    PGD_ASSERT(!dec || !work || b->tc_rows > 0);
    const uint32_t n_split =
        pgd_cuda_attn_splits(n, dec ? b->HKV : b->attn_ctas, b->n_sm, b->max_chunks);
    int rc;
    if (work && work->n_tiles &&
        (rc = pgd_cuda_attention_tc(b->qkv, b->QKV, b->kv, b->geom, li, b->H, d_tables, stride,
                                    d_seq_of, d_pos, (const pgd_attn_tile *)(b->d_meta + l->tiles),
                                    work->n_tiles, b->tc_rows, scale, b->xb, b->stream)))
        return rc;
    if (dec)
        return pgd_cuda_attention_dec(b->qkv, b->QKV, b->kv, b->geom, li, b->H, d_tables, stride,
                                      d_seq_of, d_pos, rows, n, scale, n_split, b->n_pos,
                                      b->attn_scratch, b->attn_arrived, b->xb, b->stream);
    if (n && (rc = pgd_cuda_attention_split(
                  b->qkv, b->QKV, b->kv, b->geom, li, b->H, d_tables, stride, d_seq_of, d_pos, rows,
                  n, scale, n_split, b->n_pos, b->attn_scratch, b->attn_arrived, b->xb, b->stream)))
        return rc;
    return 0;
}

/* Enqueue a step's work after its metadata upload, for T tokens of which R rows get full logits
 * (copied into `logits`), the N after them are sampled (results into b->h_results) and the H
 * after those come back as hidden states (bf16, into b->h_hidden); table rows of `stride`
 * entries; attention as `work` says (attention()). Only kernel launches and copies between
 * fixed buffers: what a decode graph captures (H 0 there). */
static int enqueue_compute(cuda_backend *b, uint32_t T, uint32_t R, uint32_t N, uint32_t H,
                           uint32_t stride, const pgd_cuda_attn_work *work, float *logits) {
    const pgd_model_config *c = &b->base.model->cfg;
    const uint32_t E = b->E;
    const pgd_cuda_meta_layout *l = &b->ml;
    const int32_t *d_tokens = (const int32_t *)(b->d_meta + l->tokens);
    const int32_t *d_pos = (const int32_t *)(b->d_meta + l->pos);
    const int64_t *d_slots = (const int64_t *)(b->d_meta + l->slots);
    const uint32_t *d_rows = (const uint32_t *)(b->d_meta + l->rows);
    const pgd_sample_spec *d_specs = (const pgd_sample_spec *)(b->d_meta + l->specs);
    const uint64_t *d_draws = (const uint64_t *)(b->d_meta + l->draws);
    void *s = b->stream;
    const bool neox = c->rope_style == PGD_ROPE_NEOX;
    int rc;

    if ((rc = b->tok_embd.form == FORM_Q8
                  ? pgd_cuda_q8_embed(b->tok_embd.q, d_tokens, T, E, b->x, s)
              : b->tok_embd.form == FORM_Q4
                  ? pgd_cuda_q4_embed(b->tok_embd.q4, d_tokens, T, E, b->x, s)
                  : pgd_cuda_embed(b->tok_embd.h, d_tokens, T, E, b->x, s)))
        return rc;
    for (uint32_t li = 0; li < c->n_layer; li++) {
        const layer *L = &b->layers[li];
        /* the previous layer's FFN output joins the residual here */
        if ((rc = pgd_cuda_add_rmsnorm(b->x, li ? b->proj : NULL, L->attn_norm, c->rms_eps, NULL, T,
                                       E, b->xb, s)) ||
            (rc = mm_qkv(b, L, T, s)) ||
            (c->qk_norm && (rc = pgd_cuda_head_rmsnorm(b->qkv, L->q_norm, L->k_norm, c->rms_eps,
                                                       d_pos, T, b->H, b->HKV, b->D, s))) ||
            (rc = pgd_cuda_rope_kv(b->qkv, L->bqkv, b->cos_sin, d_pos, d_slots, T, b->H, b->HKV,
                                   b->D, b->rope_dim, neox, b->kv, b->geom, li, s)) ||
            (rc = attention(b, li, T, stride, work)) ||
            (rc = mm(b, b->p_o, b->xb, &L->wo, b->proj, T, E, b->H * b->D, s)) ||
            (rc = pgd_cuda_add_rmsnorm(b->x, b->proj, L->ffn_norm, c->rms_eps, NULL, T, E, b->xb,
                                       s)) ||
            (rc = ffn(b, L, T, s)))
            return rc;
    }
    /* the last layer's output joins the residual of the asked rows only (distinct rows: a
     * sequence's tokens are logit rows, a sampled row or an embedding's hidden rows) */
    if (R + N + H && (rc = pgd_cuda_add_rmsnorm(b->x, b->proj, b->output_norm, c->rms_eps, d_rows,
                                                R + N + H, E, b->xb, s)))
        return rc;
    if (H) /* the normed rows after the R + N the output GEMM reads */
        PGD_CUDA_TRY(cudaMemcpyAsync(b->h_hidden, b->xb + (uint64_t)(R + N) * E,
                                     (uint64_t)H * E * sizeof(uint16_t), cudaMemcpyDeviceToHost,
                                     s));
    if (R + N) {
        if ((rc = mm(b, b->p_out, b->xb, &b->output, b->logits, R + N, b->V, E, s))) return rc;
        if (N && (rc = pgd_cuda_sample(b->logits + (uint64_t)R * b->V, N, b->V, d_specs, d_draws,
                                       b->d_results, s)))
            return rc;
        if (N)
            PGD_CUDA_TRY(cudaMemcpyAsync(b->h_results, b->d_results, N * sizeof(pgd_sample_result),
                                         cudaMemcpyDeviceToHost, s));
        if (R)
            PGD_CUDA_TRY(cudaMemcpyAsync(logits, b->logits, (uint64_t)R * b->V * sizeof(float),
                                         cudaMemcpyDeviceToHost, s));
    }
    return 0;
}

/* Enqueue a step eagerly: the metadata upload, then its work. */
static int enqueue_step(cuda_backend *b, const pgd_batch *bt, float *logits) {
    PGD_ASSERT(bt->n_logits + bt->n_samples + bt->n_hidden <= bt->n_tokens);
    int rc = upload_meta(b, bt);
    if (rc) return rc;
    return enqueue_compute(b, bt->n_tokens, bt->n_logits, bt->n_samples, bt->n_hidden,
                           bt->bt_stride, &b->work, logits);
}

static void graphs_off(cuda_backend *b, const char *what) {
    fprintf(stderr, "pagoda: CUDA graphs off, decode steps run eagerly: %s\n", what);
    b->graphs_off = true;
}

/* The decode graph of padded size n and table stride `stride`; NULL when the step runs eagerly:
 * graphs are (or have just been turned) off, or this size and stride are new — their first step
 * runs eagerly, as a warm-up (every kernel and cuBLASLt path it uses is then loaded), and the
 * next one captures the graph. Capture runs nothing: the step is recorded from the stream into
 * a graph, which is then instantiated. */
static cudaGraphExec_t decode_graph_for(cuda_backend *b, uint32_t n, uint32_t stride) {
    decode_graph *seen = NULL;
    for (uint32_t i = 0; i < b->n_graphs && !seen; i++)
        if (b->graphs[i].n == n && b->graphs[i].stride == stride) seen = &b->graphs[i];
    if (seen && seen->exec) return seen->exec;
    if (!seen) { /* the warm-up (with every slot taken, this size and stride stay eager) */
        if (b->n_graphs < GRAPHS_MAX) b->graphs[b->n_graphs++] = (decode_graph){n, stride, NULL};
        return NULL;
    }
    char why[320];
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        snprintf(why, sizeof why, "cudaStreamBeginCapture: %s",
                 cudaGetErrorString(cudaGetLastError()));
        graphs_off(b, why);
        return NULL;
    }
    int rc = enqueue_compute(b, n, 0, n, 0, stride, NULL, NULL);
    snprintf(why, sizeof why, "capturing a decode step of %u rows: %s", n,
             rc ? pgd_error_detail() : "");
    cudaError_t e = cudaStreamEndCapture(b->stream, &graph); /* ends it even after a failure */
    if (!rc && e != cudaSuccess)
        snprintf(why, sizeof why, "cudaStreamEndCapture (%u rows): %s", n, cudaGetErrorString(e));
    if (!rc && e == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
        snprintf(why, sizeof why, "cudaGraphInstantiate (%u rows): %s", n,
                 cudaGetErrorString(cudaGetLastError()));
        exec = NULL;
    }
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError(); /* a failed capture's error is reported here, not by the next call */
    if (!exec) {
        graphs_off(b, why);
        return NULL;
    }
    seen->exec = exec;
    b->n_captured++;
    return exec;
}

/* Enqueue a decode step as a graph replay: 1 when done, 0 when it must run eagerly (graphs off,
 * or this batch does not fit one), or an error. */
static int enqueue_graph_step(cuda_backend *b, const pgd_batch *bt) {
    if (b->graphs_off || !pgd_cuda_graph_fits(bt)) return 0;
    const uint32_t limit = b->max_tokens < SEQS_LIMIT ? b->max_tokens : SEQS_LIMIT;
    const uint32_t n = pgd_cuda_graph_size(bt->n_seqs, limit);
    const uint32_t stride = pgd_cuda_graph_stride(bt->bt_stride, b->stride_max);
    if (!n || !stride) return 0;
    cudaGraphExec_t exec = decode_graph_for(b, n, stride);
    if (!exec) return 0;
    size_t bytes = pgd_cuda_meta_pack_padded(&b->ml, bt, n, stride, b->h_meta);
    PGD_CUDA_TRY(cudaMemcpyAsync(b->d_meta, b->h_meta, bytes, cudaMemcpyHostToDevice, b->stream));
    PGD_CUDA_TRY(cudaGraphLaunch(exec, b->stream));
    b->graph_replays++;
    return 1;
}

void pgd_backend_cuda_graph_stats(const pgd_backend *base, pgd_cuda_graph_stats *out) {
    const cuda_backend *b = (const cuda_backend *)base;
    *out = (pgd_cuda_graph_stats){b->n_captured, b->graph_replays, b->graphs_off};
}

/* Sampled row i of a finished step that the device left to the host (a top-p nucleus longer
 * than its candidate list): its logits, still on the device, sampled by pgd_sample_logits with
 * the row's spec and draw — the token the device would have given. */
static int sample_on_host(cuda_backend *b, const pgd_batch *bt, uint32_t i,
                          pgd_sample_result *out) {
    const float *row = b->logits + (uint64_t)(bt->n_logits + i) * b->V;
    PGD_CUDA_TRY(cudaMemcpyAsync(b->host_row, row, (size_t)b->V * sizeof *b->host_row,
                                 cudaMemcpyDeviceToHost, b->stream));
    PGD_CUDA_TRY(cudaStreamSynchronize(b->stream));
    return pgd_sample_logits(b->host_row, (int32_t)b->V, &bt->samples[i].spec, bt->samples[i].draw,
                             b->host_sc, out);
}

/* The backend's GPU made the calling thread's current device: the runtime keeps one a host
 * thread, and the thread that steps the backend (the scheduler's) is not the one that created it
 * (the loading thread); with --device cuda:N, N > 0, it would otherwise launch into device 0. */
static int on_device(const cuda_backend *b) {
    if (b->lost[0])
        return pgd_error_set(PGD_EDEVLOST, "the GPU (%s) failed for good: %s", b->device, b->lost);
    PGD_CUDA_TRY(cudaSetDevice(b->opt.device_index));
    return 0;
}

/* After a failed step: an error that leaves the CUDA context poisoned (an illegal address, a
 * device-side trap, a lost GPU — "sticky": every later call returns it, until the process
 * ends) turns rc into PGD_EDEVLOST, for this and every later call; any other (a failed launch,
 * an out-of-memory) leaves the backend usable. What the step enqueued is drained first, its
 * error cleared; a synchronisation that still fails is sticky. */
static int after_failure(cuda_backend *b, int rc) {
    cudaStreamSynchronize(b->stream);
    cudaGetLastError();
    const cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return rc; /* with the step's own detail */
    char was[256];                   /* (the detail is the buffer pgd_error_set writes) */
    snprintf(was, sizeof was, "%s", pgd_error_detail());
    snprintf(b->lost, sizeof b->lost, "%s", cudaGetErrorString(e));
    return pgd_error_set(PGD_EDEVLOST, "the GPU (%s) failed for good (%s) in a step: %s", b->device,
                         b->lost, was);
}

static int cuda_forward(pgd_backend *base, const pgd_batch *bt, float *logits,
                        pgd_sample_result *sampled) {
    cuda_backend *b = (cuda_backend *)base;
    int rc = on_device(b);
    if (rc) return rc;
    rc = enqueue_graph_step(b, bt);
    if (rc == 0)
        rc = enqueue_step(b, bt, logits);
    else if (rc == 1)
        rc = 0;
    if (!rc && cudaEventRecord(b->done, b->stream) != cudaSuccess)
        rc = pgd_error_set(PGD_ECUDA, "CUDA step: cudaEventRecord: %s",
                           cudaGetErrorString(cudaGetLastError()));
    if (!rc && cudaEventSynchronize(b->done) != cudaSuccess)
        rc = pgd_error_set(PGD_ECUDA, "CUDA step: %s", cudaGetErrorString(cudaGetLastError()));
    if (rc) /* What was enqueued before the failure may still read the pinned metadata mirror
             * (or write the results and the caller's logits): after_failure drains the stream
             * before the next step rewrites them. Its own error is not the one reported. */
        return after_failure(b, rc);
    if (bt->n_samples) memcpy(sampled, b->h_results, bt->n_samples * sizeof *sampled);
    for (uint64_t i = 0; i < (uint64_t)bt->n_hidden * b->E; i++) { /* bf16 -> f32: exact */
        uint32_t bits = (uint32_t)b->h_hidden[i] << 16;
        memcpy(&bt->hidden[i], &bits, sizeof bits);
    }
    for (uint32_t i = 0; i < bt->n_samples; i++)
        if (sampled[i].token == PGD_CUDA_SAMPLE_ON_HOST &&
            (rc = sample_on_host(b, bt, i, &sampled[i])))
            return after_failure(b, rc);
    return 0;
}

static int cuda_copy_blocks(pgd_backend *base, const int32_t *src, const int32_t *dst, uint32_t n) {
    cuda_backend *b = (cuda_backend *)base;
    int rc = on_device(b);
    if (rc) return rc;
    const uint64_t elems = pgd_kv_block_elems(b->geom);
    for (uint32_t i = 0; i < n; i++) { /* in order: see scheduler/plan.h */
        PGD_ASSERT(src[i] > 0 && dst[i] > 0 && (uint32_t)src[i] < b->n_blocks &&
                   (uint32_t)dst[i] < b->n_blocks);
        if (cudaMemcpyAsync(b->kv + (uint64_t)dst[i] * elems, b->kv + (uint64_t)src[i] * elems,
                            elems * 2, cudaMemcpyDeviceToDevice, b->stream) != cudaSuccess)
            return after_failure(b,
                                 pgd_error_set(PGD_ECUDA, "copying KV block %d to %d: %s", src[i],
                                               dst[i], cudaGetErrorString(cudaGetLastError())));
    }
    return 0;
}

static void cuda_destroy(pgd_backend *base) {
    cuda_backend *b = (cuda_backend *)base;
    if (!b) return;
    if (cudaSetDevice(b->opt.device_index) != cudaSuccess) cudaGetLastError();
    if (b->stream) cudaStreamSynchronize(b->stream);
    pgd_cuda_gemm_plan_destroy(b->p_qkv);
    pgd_cuda_gemm_plan_destroy(b->p_o);
    pgd_cuda_gemm_plan_destroy(b->p_gu);
    pgd_cuda_gemm_plan_destroy(b->p_down);
    pgd_cuda_gemm_plan_destroy(b->p_out);
    pgd_cuda_gemm_plan_destroy(b->p_router);
    pgd_cuda_gemm_deq_destroy(b->d_o);
    pgd_cuda_gemm_deq_destroy(b->d_gu);
    pgd_cuda_gemm_deq_destroy(b->d_down);
    for (uint32_t i = 0; i < b->n_d_run; i++) pgd_cuda_gemm_deq_destroy(b->d_run[i]);
    pgd_cuda_gemm_destroy(b->gemm);
    free(b->host_row);
    pgd_sampler_scratch_destroy(b->host_sc);
    for (uint32_t i = 0; i < b->n_graphs; i++)
        if (b->graphs[i].exec) cudaGraphExecDestroy(b->graphs[i].exec);
    for (uint32_t i = 0; i < b->n_allocs; i++) cudaFree(b->allocs[i]);
    free(b->allocs);
    if (b->h_meta) cudaFreeHost(b->h_meta);
    if (b->h_results) cudaFreeHost(b->h_results);
    if (b->h_hidden) cudaFreeHost(b->h_hidden);
    if (b->done) cudaEventDestroy(b->done);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b->layers);
    free(b);
}

static const pgd_backend_ops k_cuda_ops = {.forward = cuda_forward,
                                           .copy_blocks = cuda_copy_blocks,
                                           .destroy = cuda_destroy,
                                           .can_sample = cuda_can_sample};

int pgd_backend_cuda_create(const pgd_model *m, const pgd_backend_config *cfg,
                            const pgd_cuda_options *o, pgd_backend **out) {
    *out = NULL;
    const pgd_model_config *c = &m->cfg;
    if (cfg->block_size == 0) return pgd_error_set(PGD_EINVAL, "a KV block holds no tokens");
    if (cfg->kv_dtype != PGD_KV_F16)
        return pgd_error_set(PGD_EUNSUPPORTED, "the CUDA backend keeps its KV cache in f16");
    /* the head norm runs before rope_kv, which adds the bias: a model with both would have its
     * heads normed unbiased (no model pagoda knows has both: qwen3 has no bias) */
    if (c->qk_norm && (c->qkv_bias || c->head_dim > PGD_HEAD_NORM_MAX_DIM))
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "the CUDA backend norms query and key heads (qk_norm) only without "
                             "Q/K/V biases and for heads of at most %u (head_dim %u)",
                             PGD_HEAD_NORM_MAX_DIM, c->head_dim);
    if (c->n_expert > PGD_MOE_MAX_EXPERTS || c->n_expert_used > PGD_MOE_MAX_USED)
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "the CUDA backend routes among at most %u experts, %u a token (this "
                             "model: %u, %u a token): use --device cpu",
                             PGD_MOE_MAX_EXPERTS, PGD_MOE_MAX_USED, c->n_expert, c->n_expert_used);
    if (c->n_expert && (c->n_embd % 8 || c->n_ff_exp % 8)) /* gemm_grouped.h's rows */
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "the CUDA backend's expert products take widths that are multiples "
                             "of 8 (hidden %u, expert FFN %u): use --device cpu",
                             c->n_embd, c->n_ff_exp);
    const int n_dev = pgd_cuda_devices(NULL);
    if (o->device_index < 0 || o->device_index >= n_dev)
        return pgd_error_set(PGD_EUNSUPPORTED, "no CUDA device %d (%d visible)", o->device_index,
                             n_dev);
    PGD_CUDA_TRY(cudaSetDevice(o->device_index));
    int n_sm = 0;
    PGD_CUDA_TRY(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, o->device_index));
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return PGD_ENOMEM;
    b->base.ops = &k_cuda_ops;
    b->base.model = m;
    b->opt = *o;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, o->device_index) == cudaSuccess)
        snprintf(b->device, sizeof b->device, "cuda:%d, %.256s", o->device_index, prop.name);
    else {
        cudaGetLastError();
        snprintf(b->device, sizeof b->device, "cuda:%d", o->device_index);
    }
    b->graphs_off = o->enforce_eager;
    b->E = c->n_embd;
    b->H = c->n_head;
    b->HKV = c->n_head_kv;
    b->D = c->head_dim;
    b->QKV = (b->H + 2 * b->HKV) * b->D;
    b->NE = c->n_expert;
    b->K = c->n_expert ? c->n_expert_used : 0;
    b->FX = c->n_expert ? c->n_ff_exp : 0;
    b->F = c->n_expert ? 0 : c->n_ff;
    b->V = c->n_vocab;
    b->rope_dim = c->rope_dim;
    b->n_pos = c->n_ctx_train;
    b->n_sm = (uint32_t)n_sm;
    b->attn_ctas = b->HKV * ((b->H / b->HKV + PGD_ATTN_HEAD_TILE - 1) / PGD_ATTN_HEAD_TILE);
    b->max_chunks = (b->n_pos + PGD_ATTN_CHUNK - 1) / PGD_ATTN_CHUNK;
    b->tc_rows = o->batch_invariant ? 0
                 : pgd_cuda_env_switch("PGD_CUDA_ATTN_TC_WIDE", true)
                     ? pgd_attn_tc_rows_wide(b->H / b->HKV, b->D)
                     : pgd_attn_tc_rows(b->H / b->HKV, b->D);
    b->dec_tc = !o->batch_invariant && pgd_attn_dec_takes(b->H / b->HKV, b->D) &&
                pgd_cuda_env_switch("PGD_CUDA_DECODE_TC", true);
    b->max_tokens = cfg->max_tokens ? cfg->max_tokens : PGD_GPU_STEP_TOKENS;
    b->deq_rows = o->batch_invariant ? 0 : pgd_cuda_env_uint("PGD_CUDA_DEQ_ROWS", DEQ_ROWS_DEFAULT);
    b->deq_rows_q4 =
        o->batch_invariant ? 0 : pgd_cuda_env_uint("PGD_CUDA_DEQ_ROWS", DEQ_ROWS_Q4_DEFAULT);
    b->deq_bytes = (uint64_t)pgd_cuda_env_uint("PGD_CUDA_DEQ_SCRATCH_MB", DEQ_SCRATCH_MB) << 20;
    if (!b->deq_bytes) b->deq_rows = b->deq_rows_q4 = 0; /* no scratch: no dequantized products */
    b->geom = (pgd_kv_geom){.n_layer = c->n_layer,
                            .n_kv_head = c->n_head_kv,
                            .block_size = cfg->block_size,
                            .head_dim = c->head_dim};
    b->stride_max = (c->n_ctx_train + cfg->block_size - 1) / cfg->block_size;
    int rc = PGD_ENOMEM;
    uint64_t device_total = 0;
    if (!(b->layers = calloc(c->n_layer, sizeof *b->layers))) goto fail;
    if (cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming) != cudaSuccess) {
        rc = pgd_error_set(PGD_ECUDA, "cannot create a CUDA stream or event: %s",
                           cudaGetErrorString(cudaGetLastError()));
        goto fail;
    }
    /* the weights' form: as asked, or (auto) bf16 while it leaves room enough, then 8 bits,
     * then 4 (cuda_plan.h) */
    b->wmode = o->weights;
    if (o->weights == PGD_CUDA_WEIGHTS_AUTO) {
        size_t free_b = 0, total = 0;
        if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
            rc = pgd_error_set(PGD_ECUDA, "cudaMemGetInfo: %s",
                               cudaGetErrorString(cudaGetLastError()));
            goto fail;
        }
        const double util = cfg->gpu_memory_utilization > 0 ? cfg->gpu_memory_utilization
                                                            : PGD_DEFAULT_GPU_MEMORY_UTILIZATION;
        const double share = util * (double)total - (double)(total - free_b);
        b->wmode = pgd_cuda_weights_choose(c, share > 0 ? (uint64_t)share : 0);
        const double G = 1024.0 * 1024.0 * 1024.0;
        if (b->wmode != PGD_CUDA_WEIGHTS_BF16)
            fprintf(stderr,
                    "pagoda: the weights go to the GPU in %s (--gpu-weights %s: %.2f GiB): in "
                    "bf16 (%.2f GiB)%s they would leave too little of its %.2f GiB share "
                    "(--gpu-weights bf16 insists)\n",
                    b->wmode == PGD_CUDA_WEIGHTS_Q8_0 ? "8 bits" : "4 bits",
                    pgd_cuda_weights_name(b->wmode), pgd__cuda_weights_bytes(b, b->wmode) / G,
                    pgd__cuda_weights_bytes(b, PGD_CUDA_WEIGHTS_BF16) / G,
                    b->wmode == PGD_CUDA_WEIGHTS_Q4 ? " or 8 bits" : "", share / G);
    }
    if (b->wmode != PGD_CUDA_WEIGHTS_BF16 && !pgd_cuda_q8_fits(c)) {
        rc = pgd_error_set(PGD_EUNSUPPORTED,
                           "--gpu-weights %s takes products whose inner width is a multiple "
                           "of %u and an expert count of 8s (this model: hidden %u, heads x dim "
                           "%u, FFN %u, experts %u): use bf16",
                           pgd_cuda_weights_name(b->wmode), PGD_Q8_BLOCK, c->n_embd,
                           c->n_head * c->head_dim, c->n_expert ? c->n_ff_exp : c->n_ff,
                           c->n_expert);
        goto fail;
    }
    /* weights first, then everything a step needs, then the KV cache from what is left; weights
     * that cannot fit are said before any is uploaded */
    if ((rc = pgd__cuda_check_weights_fit(b))) goto fail;
    if ((rc = pgd__cuda_load_weights(b)) || (rc = load_rope(b)) || (rc = alloc_step(b)) ||
        (rc = make_plans(b)) || (rc = alloc_kv(b, cfg, &device_total)))
        goto fail;
    if (cudaStreamSynchronize(b->stream) != cudaSuccess) {
        rc = pgd_error_set(PGD_ECUDA, "setting up the CUDA backend: %s",
                           cudaGetErrorString(cudaGetLastError()));
        goto fail;
    }
    uint64_t pool_tokens = (uint64_t)b->n_blocks * cfg->block_size;
    b->base.caps = (pgd_backend_caps){
        .kind = PGD_DEVICE_CUDA,
        .name = "cuda",
        .device = b->device,
        .n_blocks = b->n_blocks,
        .block_size = cfg->block_size,
        .max_tokens = b->max_tokens,
        .max_seqs = PGD_GPU_STEP_SEQS,
        .max_logit_rows = SEQS_LIMIT,
        .max_hidden_rows = b->max_tokens,
        .max_context = (uint32_t)(pool_tokens < c->n_ctx_train ? pool_tokens : c->n_ctx_train),
        .kv_dtype = PGD_KV_F16,
        .kv_bytes = (uint64_t)b->n_blocks * pgd_kv_block_elems(b->geom) * 2,
        .device_memory = device_total,
        .weight_bytes = b->weight_bytes,
        .seqs_limit = SEQS_LIMIT};
    *out = &b->base;
    return 0;
fail:
    cuda_destroy(&b->base);
    return rc;
}
