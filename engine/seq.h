/*
 * engine/seq.h — one generation's text state: its tokens (prompt then output), sampler, end
 * rule, incremental detokenizer and stop-string matcher, and the text produced since it was
 * last taken.
 *
 * A sequence knows nothing of KV memory: which of its positions are in the cache and where is
 * the scheduler's business (scheduler/sched.c holds each sequence's block table). The runner's
 * step (engine/runner.h) computes positions the plan names and, when a step computes a
 * sequence's last known token, samples and appends the next one (pgd_seq_append).
 *
 * Requests are checked where they enter (scheduler/request.h); pgd_seq_create asserts what was
 * checked there.
 *
 * Ownership: a sequence owns its memory and borrows its runner's model info and sampler
 * scratch. Threading: the thread that owns the runner (the scheduler thread, or a CLI's main
 * thread).
 */
#ifndef PGD_ENGINE_SEQ_H
#define PGD_ENGINE_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "common/text.h"
#include "engine/sampling/sampler.h"
#include "engine/text/stop.h"
#include "engine/text/tokenizer.h"

typedef struct pgd_runner pgd_runner;

typedef struct pgd_seq_params {
    pgd_sampling_params sampling;
    int64_t max_tokens; /* output tokens; <= 0 = up to the context */
    bool ignore_eos;
    const pgd_str *stop; /* stop strings [n_stop] (copied) */
    int n_stop;
    /* a matched stop string is emitted too (vLLM's include_stop_str_in_output) */
    bool include_stop;
    const int32_t *stop_ids; /* extra end ids [n_stop_ids] */
    int n_stop_ids;
    int64_t min_tokens;  /* vLLM's: output tokens before an end id may be drawn or a stop string
                            end the sequence (stop strings are looked for in the text of the
                            tokens after them); 0: none */
    uint64_t cache_salt; /* prefix-cache salt (e.g. the tenant) */
    const pgd_json_schema *json; /* output constrained to JSON this schema allows
                                    (pgd_sampler_constrain_json); NULL: free text */
} pgd_seq_params;

void pgd_seq_params_default(pgd_seq_params *p);

typedef struct pgd_seq {
    pgd_tokens tokens; /* prompt followed by output */
    uint32_t n_prompt;
    pgd_sampler *sampler;
    pgd_finish_rule rule;
    pgd_detok detok;
    pgd_stop_matcher stop;
    int64_t min_tokens;     /* pgd_seq_params.min_tokens */
    pgd_finish finish;      /* PGD_FINISH_NONE while running */
    pgd_buf delta;          /* text produced since the caller last reset it */
    pgd_sample_result last; /* the latest sampled token (logprobs) */
    bool sampled;           /* a token was sampled in the latest step */
} pgd_seq;

/* A sequence for `prompt` (copied) with parameters p (checked by the caller: a non-empty prompt
 * that leaves room in the context, ids in the vocabulary, valid sampling parameters, stop ids
 * that fit). 0 or PGD_ENOMEM. */
int pgd_seq_create(pgd_runner *r, const int32_t *prompt, uint32_t n_prompt, const pgd_seq_params *p,
                   pgd_seq **out);
void pgd_seq_destroy(pgd_seq *s); /* NULL is fine */

/* Append a sampled token: record it for the penalties, update the finish state, and add its
 * text (after stop-string matching) to delta. 0 or PGD_ENOMEM. */
int pgd_seq_append(pgd_seq *s, const pgd_sample_result *r);

#endif
