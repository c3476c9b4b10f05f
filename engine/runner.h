/*
 * engine/runner.h — the mutable half of a loaded model: the compute backend (weights placed,
 * KV memory), the step's scratch and logits, the sampler scratch; and the step itself: a
 * finished plan in, tokens out.
 *
 * The scheduler plans a step and allocates its KV blocks (scheduler/sched.c); it hands the
 * runner a pgd_step_plan that says which tokens of which sequences run, where their K/V go
 * (slots), which blocks each sequence attends over (a flat [S][stride] block table) and which
 * blocks to copy first (copy-on-write). The runner only computes: copy, one forward pass,
 * sample every sequence whose known tokens are then all computed (but an embedding's), append,
 * detokenize; and keeps the hidden states an embedding's items ask for. It never
 * allocates KV memory and never fails for lack of it.
 *
 * Ownership: a runner owns its backend and (when it loaded them) the weights; it borrows the
 * model info, which must outlive it. Threading: one thread (the scheduler thread, or a CLI's
 * main thread) — nothing here is thread-safe.
 */
#ifndef PGD_ENGINE_RUNNER_H
#define PGD_ENGINE_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/kv_dtype.h"
#include "engine/backends/backend.h"
#include "engine/backends/factory.h"
#include "engine/info.h"
#include "engine/seq.h"

/* The KV memory a runner takes when not told (the one place this default is written). */
#define PGD_DEFAULT_KV_CACHE_MB 1024

typedef struct pgd_runner_options {
    unsigned model_flags;       /* PGD_MODEL_* (PGD_MODEL_F32: dequantize every weight) */
    pgd_device_options device;  /* --device and the device's own settings (backends/factory.h) */
    pgd_backend_config backend; /* KV memory, block size (0 = PGD_DEFAULT_BLOCK_SIZE), step size;
                                   kv_dtype PGD_KV_AUTO: f32 beside PGD_MODEL_F32 weights (the
                                   precise mode), else f16 */
} pgd_runner_options;

void pgd_runner_options_default(pgd_runner_options *o);

typedef struct pgd_runner pgd_runner;

/* Bind the model's weights (from info's GGUF file, or dummy weights for a preset), create the
 * backend the options ask for, which places them and then sizes its KV memory. Errors say why
 * (pgd_error_detail): bad tensors, an unavailable device, a KV cache too small. */
int pgd_runner_create(const pgd_model_info *info, const pgd_runner_options *o, pgd_runner **out);

/* A runner over a backend the caller made (tests: the fake backend). Takes ownership of the
 * backend, also on failure. */
int pgd_runner_wrap(const pgd_model_info *info, pgd_backend *backend, pgd_runner **out);

void pgd_runner_destroy(pgd_runner *r); /* NULL is fine */

const pgd_model_info *pgd_runner_info(const pgd_runner *r);
/* The backend's capabilities (KV blocks, block size, step size, device kind). */
const pgd_backend_caps *pgd_runner_caps(const pgd_runner *r);
/* Why `--device auto` took the CPU ("no CUDA device is visible: ...", "this build has no CUDA
 * backend"), or NULL when the device is the one asked for or auto found a GPU. */
const char *pgd_runner_device_note(const pgd_runner *r);
pgd_backend *pgd_runner_backend(pgd_runner *r); /* tests */
pgd_sampler_scratch *pgd_runner_sampler_scratch(pgd_runner *r);
/* The vocabulary as bytes (a token's bytes as decoding gives them, read in the tokenizer's own
 * piece table; none for control tokens), for JSON-constrained sampling; owned by the runner,
 * filled on the first call (scheduler thread). */
const pgd_vocab_bytes *pgd_runner_vocab_bytes(pgd_runner *r);

/* How an embedding pools its prompt's final hidden states (after the output norm). */
typedef enum pgd_pooling {
    PGD_POOL_NONE = 0, /* not an embedding */
    PGD_POOL_LAST,     /* the last prompt token's state */
    PGD_POOL_MEAN,     /* the mean of every prompt token's state */
} pgd_pooling;

/* "last", "mean" ("none" for NONE). */
const char *pgd_pooling_str(pgd_pooling p);
/* "last", "mean", or "auto" (NONE: the model's own) into *out: 0, or PGD_EINVAL with a
 * detail. */
int pgd_pooling_parse(const char *s, pgd_pooling *out);

/* One item of a plan: compute tokens [start, start + n_tokens) of seq. */
typedef struct pgd_step_item {
    pgd_seq *seq;
    uint32_t start;      /* first position computed; the KV cache holds [0, start) */
    uint32_t n_tokens;   /* > 0; start + n_tokens <= seq->tokens.n */
    bool all_logits;     /* keep the logits of every one of these tokens (evaluation) */
    pgd_pooling pool;    /* an embedding's item: it samples nothing, and the hidden states of
                            its tokens come back — MEAN: every one; LAST: its last token's when
                            that is the sequence's last known token; NONE: none */
    uint32_t logits_row; /* out: first row of pgd_runner_logits for this item (if any) */
    uint32_t hidden_row; /* out: first row of pgd_runner_hidden for this item (if any) */
} pgd_step_item;

/* The hidden rows an item asks for (see pgd_step_item.pool). */
static inline uint32_t pgd_step_item_hidden(const pgd_step_item *it, uint32_t n_known) {
    if (it->pool == PGD_POOL_MEAN) return it->n_tokens;
    return it->pool == PGD_POOL_LAST && it->start + it->n_tokens == n_known;
}

/* A finished plan (S items, T tokens in item order). */
typedef struct pgd_step_plan {
    pgd_step_item *items;        /* [S] */
    uint32_t n_items;            /* S */
    uint32_t n_tokens;           /* T: the sum of the items' n_tokens, <= caps.max_tokens */
    const int64_t *slots;        /* [T] KV slot of each token: block * block_size + offset */
    const int32_t *block_tables; /* [S][bt_stride] blocks of item i's positions [0, start + n) */
    uint32_t bt_stride;
    const int32_t *copy_src; /* [n_copies] blocks to copy into copy_dst before the forward */
    const int32_t *copy_dst; /* [n_copies] */
    uint32_t n_copies;
} pgd_step_plan;

/* Run one step: the copies, one forward pass, then every item whose sequence has all its known
 * tokens computed and is not finished samples its next token and appends it (seq->sampled,
 * seq->delta, seq->finish). Items set logits_row. 0, or the backend's error (nothing appended
 * then is undone; the caller fails the step's sequences); PGD_EDEVLOST when the device failed
 * for good (a GPU's sticky error), and from then on.
 * A test hook: with PGD_FAULT_DEVICE_LOST=N in the environment when the runner is made, its
 * N-th step (1 = the first) and every later one fail with PGD_EDEVLOST, as a lost GPU would —
 * so that what the server does then is tested without one (tests/e2e). */
int pgd_runner_step(pgd_runner *r, pgd_step_plan *plan);

/* Row `row` of the latest step's logits ([n_vocab] floats), valid until the next step. */
const float *pgd_runner_logits(const pgd_runner *r, uint32_t row);

/* Row `row` of the latest step's hidden states ([n_embd] floats, after the output norm), valid
 * until the next step. */
const float *pgd_runner_hidden(const pgd_runner *r, uint32_t row);

/* Tokens run through the forward pass so far. */
uint64_t pgd_runner_n_forward_tokens(const pgd_runner *r);

#endif
