/*
 * common/sample_types.h — what a sampler is asked and what it answers, as plain data: shared by
 * the host sampler (engine/sampling/sampler.h) and the backends' device samplers
 * (kernels/cuda/sample.h), which sit below engine/ and must not include it.
 *
 * Threading: plain data.
 */
#ifndef PGD_COMMON_SAMPLE_TYPES_H
#define PGD_COMMON_SAMPLE_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#define PGD_SAMPLER_MAX_TOP_LOGPROBS 20
/* temperature below this samples greedily (as vLLM does) */
#define PGD_SAMPLER_GREEDY_EPS 1e-5f

typedef struct pgd_token_logprob {
    int32_t token;
    float logprob;
} pgd_token_logprob;

typedef struct pgd_sample_result {
    int32_t token; /* the chosen id */
    float logprob; /* log_softmax(raw logits)[token]; 0 unless logprobs were asked */
    int32_t n_top; /* = top_logprobs when logprobs are on (n_vocab if smaller), else 0 */
    /* [n_top] the most probable ids under the same log_softmax, descending, ties by lower id */
    pgd_token_logprob top[PGD_SAMPLER_MAX_TOP_LOGPROBS];
} pgd_sample_result;

/* Steps 4-9 of a sample (engine/sampling/sampler.h's order): what a backend needs to know. */
typedef struct pgd_sample_spec {
    float temperature; /* < PGD_SAMPLER_GREEDY_EPS: greedy */
    int32_t top_k;     /* 0 = off (effective: < n_vocab) */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    bool logprobs;     /* report the chosen token's logprob */
    int32_t top_logprobs;
} pgd_sample_spec;

#endif
