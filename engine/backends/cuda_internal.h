/*
 * engine/backends/cuda_internal.h — the CUDA backend's state, shared by its two files and no
 * other: engine/backends/cuda.c (create, the step, graphs, destroy) and cuda_weights.c (the
 * weights' forms on the device, their upload and their sizing). Not a public header.
 *
 * Threading: as the backend's (one caller at a time).
 */
#ifndef PGD_ENGINE_BACKENDS_CUDA_INTERNAL_H
#define PGD_ENGINE_BACKENDS_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backends/cuda.h"
#include "engine/backends/cuda_plan.h"
#include "engine/sampling/sampler.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_grouped.h"
#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/q4.h"
#include "kernels/cuda/q8.h"

#define GRAPHS_MAX 256 /* decode graph sizes x strides kept (17 x at most ~10 in practice) */

/* A matrix's form on the device (cuda_weights.c's mat_form says which). */
typedef enum mform { FORM_BF16, FORM_Q8, FORM_Q4 } mform;

/* A matrix [rows][cols] on the device: bf16 (h), in 8 bits (q, kernels/cuda/q8.h) or in 4 bits
 * (q4, kernels/cuda/q4.h), as `form` says; a stack of experts alike. */
typedef struct dmat {
    uint16_t *h;
    pgd_q8_mat q;
    pgd_q4_mat q4;
    mform form;
    pgd_cuda_gemm_deq *deq; /* 8 and 4 bits: the plans of its shape's products of deq_rows rows
                               and more (the backend's, shared by the layers; NULL: none) */
} dmat;

typedef struct layer {
    /* the fused QKV [(H + 2 Hkv) D][E] in n_qkv runs of its parts, run r its rows [qkv_row[r],
     * qkv_row[r + 1]) in one form writing those columns of the step's qkv: one run, but with
     * --gpu-weights q4 where the parts take different forms (alloc_qkv) */
    dmat wqkv[3];
    uint32_t n_qkv, qkv_row[4];
    dmat wo, wgu, wdown; /* wgu and wdown empty with experts */
    float *attn_norm, *ffn_norm, *bqkv;
    float *q_norm, *k_norm; /* f32 [D] each: qwen3's head norms (NULL without qk_norm) */
    /* a mixture of experts: the router [NE][E], each expert's gate/up [NE][2 FX][E] (gate rows,
     * then up rows) and down [NE][E][FX] */
    dmat router, exp_gu, exp_down;
} layer;

/* One captured decode graph: its padded size and block-table stride. */
typedef struct decode_graph {
    uint32_t n, stride;
    cudaGraphExec_t exec;
} decode_graph;

typedef struct cuda_backend {
    pgd_backend base;
    pgd_cuda_options opt;
    cudaStream_t stream;
    cudaEvent_t done;
    pgd_cuda_gemm *gemm;
    pgd_cuda_gemm_plan *p_qkv, *p_o, *p_gu, *p_down, *p_out, *p_router; /* bf16 weights' */
    /* 8 and 4 bits: products of deq_rows rows and more over 8-bit weights, of deq_rows_q4 over
     * 4-bit ones (0: none) on cuBLASLt, the weights dequantized chunk by chunk into deq_scratch
     * (gemm.h) by these plans */
    uint32_t deq_rows, deq_rows_q4;
    uint64_t deq_bytes; /* the chunks' most bytes */
    pgd_cuda_gemm_deq *d_o, *d_gu, *d_down;
    /* the QKV's: a run of d_run_n[i] rows (the whole QKV, or a part of it: alloc_qkv), its
     * output rows QKV apart — at most the whole and four part heights (Q, K or V, Q + K, K + V) */
    pgd_cuda_gemm_deq *d_run[5];
    uint32_t d_run_n[5], n_d_run;
    uint16_t *deq_scratch;
    uint32_t E, H, HKV, D, QKV, F, V, rope_dim, n_pos;
    uint32_t NE, K, FX; /* experts, experts a token uses, an expert's FFN width (NE 0: dense; F
                           is then 0) */
    uint32_t max_tokens, stride_max;
    pgd_kv_geom geom;
    uint32_t n_blocks;
    /* device weights */
    pgd_cuda_weights wmode; /* the weights' form (--gpu-weights, auto resolved): bf16, every
                               matrix in 8 bits, or (q4) in 4 bits where mat_form says */
    bool sizing;            /* pgd__cuda_load_weights only counts its device bytes into `sized` */
    uint64_t sized;
    uint64_t weight_bytes; /* theirs in wmode (check_weights_fit) */
    dmat tok_embd, output; /* output == tok_embd when tied */
    float *output_norm;
    layer *layers;  /* [n_layer] */
    float *cos_sin; /* [n_pos][rope_dim] */
    void **allocs;  /* every cudaMalloc, freed at destroy */
    uint32_t n_allocs, cap_allocs;
    uint16_t *kv; /* the slab */
    /* activations */
    float *x;      /* [T][E] residual stream */
    uint16_t *xb;  /* [T][max(E, H D, F)] bf16 GEMM inputs */
    float *qkv;    /* [T][QKV] */
    float *proj;   /* [T][E] */
    uint16_t *gu;  /* bf16 [T][2F]: the gate/up product (a bf16 plan) */
    float *logits; /* [SEQS_LIMIT][V] the rows a step asks logits of */
    /* a mixture of experts' step (kernels/cuda/moe.h), P = T K pairs */
    float *rlogit;              /* [T][NE] router logits */
    uint32_t *pick;             /* [T][K] each token's experts, ascending */
    float *pick_w;              /* [T][K] their weights */
    uint32_t *ex_counts;        /* [NE + 1] grouping scratch */
    uint32_t *sorted_tok;       /* [P] the token of each row of the sorted order */
    uint32_t *row_of;           /* [P] the sorted row of each pair */
    pgd_grouped_tile *ex_tiles; /* [pgd_grouped_max_tiles(P, NE)] */
    uint32_t *ex_n_tiles;       /* [1] */
    uint16_t *ex_act;           /* bf16 [P][FX] SiLU * up */
    void *ex_out;               /* bf16 [P][2 FX] gate/up, then (the same memory) f32 [P][E] down */
    pgd_sample_result *d_results; /* [SEQS_LIMIT] */
    float *attn_scratch;          /* split-KV partials (kernels/cuda/attention.h) */
    uint32_t *attn_arrived;       /* its merge counters: zeroed once, left zero by every step */
    uint32_t n_sm, attn_ctas;     /* the GPU's SMs; attention CTAs of one row, unsplit */
    uint32_t max_chunks;          /* attention chunks of the longest context */
    uint32_t tc_rows;             /* rows of a tensor-core attention tile; 0: that kernel off
                                     (--batch-invariant, or a shape it does not take); the
                                     wide form's (128 slots a CTA: the default since an H200
                                     measured it faster; PGD_CUDA_ATTN_TC_WIDE=0 the narrow) */
    bool dec_tc; /* the CUDA-core rows of launches of few rows on the tensor-core decode kernel
                    (the default; PGD_CUDA_DECODE_TC=0: off) */
    pgd_cuda_attn_work work; /* the eager step's attention work (upload_meta) */
    /* metadata */
    pgd_cuda_meta_layout ml; /* the step's metadata, host (pinned) and device alike */
    uint8_t *h_meta, *d_meta;
    pgd_sample_result *h_results; /* [SEQS_LIMIT] pinned */
    uint16_t *h_hidden;           /* bf16 [T][E] pinned: a step's hidden rows (embeddings) */
    /* rows the device leaves to the host sampler (PGD_CUDA_SAMPLE_ON_HOST) */
    float *host_row; /* [V] */
    pgd_sampler_scratch *host_sc;
    /* CUDA graphs of decode steps */
    decode_graph graphs[GRAPHS_MAX]; /* [n_graphs] sizes and strides seen; exec NULL until
                                        captured */
    uint32_t n_graphs, n_captured;
    uint64_t graph_replays;
    bool graphs_off;
    char device[320]; /* caps.device: "cuda:N, <the GPU's name>" */
    char lost[128];   /* the sticky error that poisoned the context ("": none) */
} cuda_backend;

/* b->sizing: *out NULL, the bytes counted into b->sized; else cudaMalloc'd (bytes 0: 16) and
 * kept for destroy. 0, PGD_ENOMEM, PGD_ECUDA (said, with the device's free memory). */
int pgd__cuda_dalloc(cuda_backend *b, size_t bytes, void **out);
#define DALLOC(b, ptr, bytes) pgd__cuda_dalloc((b), (bytes), (void **)&(ptr))

/* ---- cuda_weights.c ---- */

/* Every weight of the model onto the device in b->wmode's forms (b->sizing: counted, nothing
 * allocated or uploaded), waited for. 0, PGD_ENOMEM, PGD_ECUDA. */
int pgd__cuda_load_weights(cuda_backend *b);
/* The device bytes of the weights in form `mode`: pgd__cuda_load_weights counting, not
 * allocating (before it runs for real: the counting pass sets the matrices' pointers NULL). */
uint64_t pgd__cuda_weights_bytes(cuda_backend *b, pgd_cuda_weights mode);
/* 0, or PGD_ECUDA saying so (with the sizes of the smaller forms) when the weights alone exceed
 * the device's free memory; sets b->weight_bytes. */
int pgd__cuda_check_weights_fit(cuda_backend *b);

#endif
