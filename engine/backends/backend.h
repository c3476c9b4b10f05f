/*
 * engine/backends/backend.h — the interface between the scheduler and a compute backend (CPU,
 * CUDA).
 *
 * A backend takes a loaded model once (create), reports its capabilities as data (caps: KV
 * blocks, block size, the step size it prefers, its device kind), and then answers
 * forward(batch): for a flat
 * batch of tokens from many sequences, each with its own positions and block table, it writes
 * every token's K/V into its paged slot, attends over the sequence's pages (causally), samples
 * the rows whose sequences need no host sampler (greedy, temperature, top-k/p, min-p, logprobs:
 * engine/sampling/sampler.h, with the random bits the host drew from each request's RNG), and
 * returns full logits only for the rows that need them (logit bias, penalties, evaluation): a
 * row's logits never leave the device by default. It also returns the final hidden states
 * (after the output norm) of the rows asked (embeddings), when its caps allow any. KV memory
 * belongs to the backend; kvpool hands out block ids. The backend owns its layer loop so each
 * implementation can fuse and keep activations where it likes.
 *
 * Batch conventions (shape comments: T tokens, S sequences, R logit rows, V vocabulary):
 *   - tokens of sequence s are the contiguous range q_start[s] .. q_start[s+1]-1, in position
 *     order, and are the LAST tokens of that sequence: their positions are
 *     kv_len[s] - (q_start[s+1]-q_start[s]) ... kv_len[s]-1;
 *   - the K/V of positions below those were written by earlier forward calls into the blocks
 *     that row s of block_tables lists (position p lives in block
 *     block_tables[s * bt_stride + p / block_size] at offset p % block_size);
 *   - slots[t] = block * block_size + offset is where token t's K/V go.
 * Determinism: a row's results never depend on what else is in the batch.
 *
 * Threading: a backend is used by one thread (the scheduler thread) at a time.
 */
#ifndef PGD_ENGINE_BACKEND_H
#define PGD_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "common/kv_dtype.h"
#include "engine/model/model.h"
#include "engine/sampling/sampler.h"

/* A row the backend samples: its token's logits go through pgd_sample_logits (or the device's
 * twin of it) with the spec and the random bits given. */
typedef struct pgd_sample_row {
    uint32_t token;       /* the batch token whose logits are sampled */
    pgd_sample_spec spec; /* temperature, top-k, top-p, min-p, logprobs */
    uint64_t draw;        /* the row's random bits, from the request's RNG (0 when greedy) */
} pgd_sample_row;

typedef struct pgd_batch {
    uint32_t n_tokens;             /* T */
    const int32_t *tokens;         /* [T] */
    const int32_t *positions;      /* [T] */
    const int64_t *slots;          /* [T] */
    uint32_t n_seqs;               /* S */
    const uint32_t *q_start;       /* [S+1] */
    const uint32_t *kv_len;        /* [S] context length after this step */
    const int32_t *block_tables;   /* [S][bt_stride]: row s lists ceil(kv_len[s] / block_size)
                                      block ids, the rest of the row is unspecified */
    uint32_t bt_stride;            /* entries per row (>= the longest row) */
    uint32_t n_logits;             /* R */
    const uint32_t *logit_rows;    /* [R] token indices whose full logits are wanted */
    uint32_t n_samples;            /* N */
    const pgd_sample_row *samples; /* [N] rows the backend samples */
    uint32_t n_hidden;             /* H (<= caps.max_hidden_rows) */
    const uint32_t *hidden_rows;   /* [H] tokens whose final hidden states come back */
    float *hidden;                 /* out: [H][n_embd] f32, row h token hidden_rows[h]'s state
                                      after the output norm (what its logits are made from) */
} pgd_batch;

/* Where a backend computes. */
typedef enum pgd_device_kind { PGD_DEVICE_CPU = 0, PGD_DEVICE_CUDA = 1 } pgd_device_kind;

/* Defaults, each written once: tokens per KV block; the CPU backend's preferred step (512
 * tokens: chunked prefill keeps a step's weights in cache without starving decodes; 64
 * sequences); the GPU's (8192 tokens, 256 sequences); the share of a GPU's memory pagoda
 * takes (weights, scratch, then the KV cache from what is left). */
#define PGD_DEFAULT_BLOCK_SIZE             16
#define PGD_CPU_STEP_TOKENS                512
#define PGD_CPU_STEP_SEQS                  64
#define PGD_GPU_STEP_TOKENS                8192
#define PGD_GPU_STEP_SEQS                  256
#define PGD_DEFAULT_GPU_MEMORY_UTILIZATION 0.90

/* What any backend is asked for; device-specific settings travel apart (e.g. backends/cpu.h).
 * The backend places the weights first and sizes its KV memory after. */
typedef struct pgd_backend_config {
    uint32_t block_size;           /* tokens per KV block (> 0) */
    uint32_t max_tokens;           /* largest T a forward call will get; 0 = the backend's
                                      preferred step size */
    pgd_kv_dtype kv_dtype;         /* KV cache elements, F32 or F16 (common/kv_dtype.h) */
    uint64_t kv_cache_bytes;       /* KV memory; 0 = the backend's default (CPU:
                                      PGD_DEFAULT_KV_CACHE_MB of engine/runner.h; GPU: what
                                      gpu_memory_utilization leaves after weights and scratch) */
    uint32_t kv_blocks;            /* exact KV blocks including the null block (tests, tools);
                                      wins over kv_cache_bytes when > 0 */
    double gpu_memory_utilization; /* GPU: share of device memory to use; 0 = the default */
} pgd_backend_config;

/* What a backend reports about itself once created: the scheduler plans with these numbers
 * and never looks at the backend's name. */
typedef struct pgd_backend_caps {
    pgd_device_kind kind;
    const char *name;         /* for logs: "cpu", ... */
    const char *device;       /* for logs: which device, e.g. "cuda:0, NVIDIA H100 80GB HBM3"
                                 (NULL: nothing to add to the name); the backend's storage */
    uint32_t n_blocks;        /* KV blocks, including the null block */
    uint32_t block_size;      /* tokens per block */
    uint32_t max_tokens;      /* largest T of one forward (the scheduler's default token budget) */
    uint32_t max_seqs;        /* preferred sequences per step (the scheduler's default) */
    uint32_t seqs_limit;      /* most sequences one step may hold (0: no limit of its own) */
    uint32_t max_logit_rows;  /* most rows one step may ask logits of, full or sampled */
    uint32_t max_context;     /* longest context one sequence can attend over (its KV memory) */
    pgd_kv_dtype kv_dtype;    /* KV cache elements */
    uint64_t kv_bytes;        /* KV memory the backend holds */
    uint64_t device_memory;   /* the device's memory in bytes (CPU: the machine's RAM) */
    uint32_t max_hidden_rows; /* most hidden rows one step may ask (embeddings); 0: none */
    uint64_t weight_bytes;    /* device memory the weights take (0: not said; the CPU's) */
} pgd_backend_caps;

typedef struct pgd_backend pgd_backend;

typedef struct pgd_backend_ops {
    /* logits: [R][V] f32, row r for token logit_rows[r]; sampled: [N], entry i for samples[i].
     * The batch is well formed (the caller builds it; a malformed one is a bug, asserted). */
    int (*forward)(pgd_backend *b, const pgd_batch *batch, float *logits,
                   pgd_sample_result *sampled);
    /* Copy the KV contents of blocks src[i] to dst[i] (copy-on-write of shared blocks). */
    int (*copy_blocks)(pgd_backend *b, const int32_t *src, const int32_t *dst, uint32_t n);
    void (*destroy)(pgd_backend *b);
    /* Whether forward can sample a row with this spec (NULL: every spec). Rows it cannot come
     * back as full logits and the host samples them. */
    bool (*can_sample)(const pgd_backend *b, const pgd_sample_spec *spec);
} pgd_backend_ops;

struct pgd_backend {
    const pgd_backend_ops *ops;
    const pgd_model *model; /* borrowed; outlives the backend */
    pgd_backend_caps caps;  /* filled by create */
};

static inline int pgd_backend_forward(pgd_backend *b, const pgd_batch *batch, float *logits,
                                      pgd_sample_result *sampled) {
    return b->ops->forward(b, batch, logits, sampled);
}
static inline void pgd_backend_destroy(pgd_backend *b) {
    if (b) b->ops->destroy(b);
}

#endif
