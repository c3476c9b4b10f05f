/*
 * engine/llm.h — a loaded model ready to run: the GGUF mapping, weights, tokenizer, chat
 * template, compute backend (with its KV memory), the KV block pool, and the step runner that
 * turns a list of (sequence, tokens to compute) into one forward pass plus sampling.
 *
 * A pgd_seq is one generation: its tokens (prompt then output), its block table, sampler,
 * incremental detokenizer, stop-string matcher and finish state. pgd_llm_step is the single
 * place where a batch is built: the scheduler decides how many tokens of which sequences run in
 * a step; the step allocates their KV slots, runs the backend once, samples every sequence whose
 * known tokens are all computed, appends the token, and produces its text delta.
 *
 * Ownership: pgd_llm owns everything it loads; a pgd_seq borrows the llm and owns the rest.
 * Threading: everything here runs on one thread (the scheduler thread, or the CLI's main one).
 */
#ifndef PGD_ENGINE_LLM_H
#define PGD_ENGINE_LLM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/text.h"
#include "engine/backend.h"
#include "engine/chat_template.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "engine/tokenizer.h"
#include "kvpool/block_table.h"
#include "kvpool/kvpool.h"

typedef struct pgd_llm_options {
    const char *model_path;
    unsigned model_flags;      /* PGD_MODEL_* (PGD_MODEL_F32: dequantize every weight) */
    const char *chat_template; /* family name overriding the model's template, or NULL */
    uint64_t kv_cache_bytes;   /* KV memory; 0 = default (1 GiB, capped by the context) */
    uint32_t kv_blocks;        /* overrides kv_cache_bytes when > 0 (including the null block) */
    uint32_t block_size;       /* tokens per KV block; 0 = 16 */
    uint32_t max_batch_tokens; /* most tokens in one forward; 0 = 512 */
    uint32_t max_ctx;          /* context limit; 0 = the model's trained context */
    uint32_t n_threads;        /* 0 = one per core */
    bool act_q8;               /* int8 activations in the CPU matmuls (see backend.h) */
    pgd_kv_dtype kv_dtype;     /* KV cache elements; default PGD_KV_AUTO: f32 with PGD_MODEL_F32
                                  weights (the precise mode), else f16 */
    bool prefix_caching;
} pgd_llm_options;

void pgd_llm_options_default(pgd_llm_options *o);

typedef struct pgd_llm {
    pgd_llm_options opt;
    pgd_gguf *gguf;
    pgd_model *model;
    pgd_tokenizer *tok;
    pgd_chat_template *tmpl; /* NULL when the model has none / it is not recognised */
    char tmpl_error[256];    /* why tmpl is NULL */
    pgd_backend *backend;
    pgd_kvpool *pool;
    pgd_sampler_scratch *sscratch;
    uint32_t n_vocab, n_ctx;
    /* step scratch (T = max_batch_tokens) */
    int32_t *b_tokens, *b_pos; /* [T] */
    int64_t *b_slots;          /* [T] */
    uint32_t *b_qstart;        /* [T+1] */
    uint32_t *b_kvlen;         /* [T] */
    const int32_t **b_tables;  /* [T] */
    uint32_t *b_rows;          /* [T] */
    float *logits;             /* [logits_rows][n_vocab] */
    uint32_t logits_rows;
    uint64_t n_forward_tokens; /* counters */
} pgd_llm;

int pgd_llm_open(const pgd_llm_options *o, pgd_llm **out);

/* Assemble an llm from parts the caller made (tests: a fake backend over a config-only model
 * and a synthetic tokenizer). Takes ownership of every part, also on failure; tmpl may be NULL.
 * The KV pool gets backend->cfg.n_blocks blocks of backend->cfg.block_size tokens, and
 * max_batch_tokens is backend->cfg.max_tokens. model->cfg must give n_vocab and n_ctx_train;
 * model may have no weights (the backend is the only user of those). */
int pgd_llm_wrap(pgd_model *model, pgd_tokenizer *tok, pgd_chat_template *tmpl,
                 pgd_backend *backend, const pgd_llm_options *o, pgd_llm **out);

void pgd_llm_close(pgd_llm *llm); /* NULL is fine */

/* Prompt encoding. Plain text: control tokens are NOT recognised unless `special`; a BOS is
 * prepended when the model asks for one. Chat: rendered with the template; control tokens are
 * recognised only in template text; BOS prepended when asked and not already there. */
int pgd_llm_encode_text(const pgd_llm *llm, const char *text, size_t len, bool special,
                        pgd_tokens *out);
int pgd_llm_encode_chat(const pgd_llm *llm, const pgd_chat_msg *msgs, size_t n,
                        bool add_generation_prompt, pgd_tokens *out);

typedef struct pgd_seq_params {
    pgd_sampling_params sampling;
    int64_t max_tokens; /* output tokens; <= 0 = up to the context */
    bool ignore_eos;
    const pgd_str *stop; /* stop strings [n_stop] (copied) */
    int n_stop;
    const int32_t *stop_ids; /* extra end ids [n_stop_ids] */
    int n_stop_ids;
    uint64_t cache_salt; /* prefix-cache salt (e.g. the tenant) */
} pgd_seq_params;

void pgd_seq_params_default(pgd_seq_params *p);

typedef struct pgd_seq {
    pgd_llm *llm;      /* borrowed */
    pgd_tokens tokens; /* prompt followed by output */
    uint32_t n_prompt;
    uint32_t n_computed;      /* tokens whose K/V are in the cache */
    uint32_t n_cached_prompt; /* prompt tokens found in the prefix cache */
    pgd_block_table bt;
    pgd_sampler *sampler;
    pgd_finish_rule rule;
    pgd_detok detok;
    pgd_stop_matcher stop;
    pgd_finish finish;      /* PGD_FINISH_NONE while running */
    pgd_buf delta;          /* text produced since the caller last reset it */
    pgd_sample_result last; /* the latest sampled token (logprobs) */
    bool sampled;           /* a token was sampled in the latest step */
} pgd_seq;

/* Create a sequence for `prompt` (copied). Fails with PGD_EINVAL and a message when the prompt
 * is empty or leaves no room in the context. */
int pgd_seq_create(pgd_llm *llm, const int32_t *prompt, uint32_t n_prompt, const pgd_seq_params *p,
                   pgd_seq **out);
/* Frees the sequence and returns its KV blocks to the pool. */
void pgd_seq_destroy(pgd_seq *s);
/* Reuse cached KV blocks for the prompt's leading full blocks (no-op when caching is off). */
int pgd_seq_attach_prefix(pgd_seq *s);
/* Give all KV blocks back and start over from token 0 (preemption by recompute). */
void pgd_seq_reset_kv(pgd_seq *s);
static inline uint32_t pgd_seq_pending(const pgd_seq *s) {
    return (uint32_t)s->tokens.n - s->n_computed;
}

typedef struct pgd_step_item {
    pgd_seq *seq;
    uint32_t n_tokens;   /* compute tokens[n_computed .. n_computed + n_tokens) */
    bool all_logits;     /* keep the logits of every one of these tokens (evaluation) */
    uint32_t logits_row; /* out: first row in llm->logits for this item (if any) */
} pgd_step_item;

/* Run one step. Every sequence whose tokens are then all computed (and that is not finished)
 * samples its next token, appends it, updates finish and delta. PGD_ENOBLOCKS when the pool
 * cannot hold the new tokens (nothing is changed then). */
int pgd_llm_step(pgd_llm *llm, pgd_step_item *items, uint32_t n_items);

#endif
