/*
 * scheduler/request.c — request validation and deep copies (see request.h).
 *
 * Owns nothing shared; every function is pure and may run on any thread.
 */
#include "scheduler/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

void pgd_request_init(pgd_request *r) {
    memset(r, 0, sizeof *r);
    pgd_seq_params_default(&r->params);
    r->n = 1;
    r->weight = 1.0f;
    r->prompt_logprobs = -1;
}

const char *pgd_finish_reason_str(pgd_finish_reason r) {
    switch (r) {
    case PGD_REASON_STOP:
        return "stop";
    case PGD_REASON_LENGTH:
        return "length";
    case PGD_REASON_ABORT:
        return "abort";
    default:
        return "";
    }
}

/* Tokens the KV cache holds for one sequence, plus one: the last sampled token is never
 * computed, so a sequence of L tokens needs L - 1 slots. */
uint64_t pgd_req_token_cap(const pgd_req_limits *lim) {
    uint64_t pool = (uint64_t)lim->usable_blocks * lim->block_size + 1;
    return pool < lim->n_ctx ? pool : lim->n_ctx;
}

void pgd_req_limits_of(const pgd_model_info *info, const pgd_backend_caps *caps, uint32_t max_n,
                       pgd_req_limits *out) {
    const int32_t *eog;
    *out = (pgd_req_limits){.n_ctx = info->n_ctx,
                            .n_vocab = info->n_vocab,
                            .block_size = caps->block_size,
                            .usable_blocks = caps->n_blocks - 1,
                            .max_n = max_n < PGD_REQUEST_MAX_N ? max_n : PGD_REQUEST_MAX_N,
                            .n_eog = (uint32_t)pgd_tokenizer_eog_ids(info->tok, &eog),
                            .embeddings = caps->max_hidden_rows >= caps->max_tokens};
}

int pgd_request_check(const pgd_request *r, const pgd_req_limits *lim) {
    if (!r->prompt || r->n_prompt == 0)
        return r->pooling != PGD_POOL_NONE
                   ? pgd_error_set_param(PGD_EINVAL, "input", "the input is empty (no tokens)")
                   : pgd_error_set_param(PGD_EINVAL, "prompt", "the prompt is empty");
    if (r->pooling != PGD_POOL_NONE) {
        if (r->pooling != PGD_POOL_LAST && r->pooling != PGD_POOL_MEAN)
            return pgd_error_set_param(PGD_EINVAL, "input", "unknown pooling %d", (int)r->pooling);
        if (!lim->embeddings)
            return pgd_error_set_param(PGD_EINVAL, "input",
                                       "this backend does not compute embeddings");
        if ((r->n && r->n != 1) || r->prompt_logprobs >= 0 || r->prompt_only)
            return pgd_error_set_param(PGD_EINVAL, "input",
                                       "an embedding has one choice, no prompt logprobs and is "
                                       "not prompt_only");
        if (r->n_prompt >= lim->n_ctx)
            return pgd_error_set_param(PGD_EINVAL, "input",
                                       "This model's maximum context length is %u tokens. "
                                       "However, your input has %u tokens; an input may have at "
                                       "most %u.",
                                       lim->n_ctx, r->n_prompt, lim->n_ctx - 1);
    }
    if (r->n_prompt >= lim->n_ctx)
        return pgd_error_set_param(PGD_EINVAL, "prompt",
                                   "This model's maximum context length is %u tokens. However, "
                                   "your prompt has %u tokens, which leaves no room for a "
                                   "completion.",
                                   lim->n_ctx, r->n_prompt);
    for (uint32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || (uint32_t)r->prompt[i] >= lim->n_vocab)
            return pgd_error_set_param(PGD_EINVAL, "prompt",
                                       "token id %d (at %u) is out of range [0, %u)", r->prompt[i],
                                       i, lim->n_vocab);
    uint32_t n = r->n ? r->n : 1;
    if (n > lim->max_n)
        return pgd_error_set_param(PGD_EINVAL, "n", "n = %u choices; at most %u are allowed", n,
                                   lim->max_n);
    if (r->prompt_logprobs < -1 || r->prompt_logprobs > PGD_SAMPLER_MAX_TOP_LOGPROBS)
        return pgd_error_set_param(PGD_EINVAL, "logprobs",
                                   "prompt logprobs: %d alternatives; -1 (off) to %d are allowed",
                                   r->prompt_logprobs, PGD_SAMPLER_MAX_TOP_LOGPROBS);
    const char *param = NULL;
    int rc = pgd_sampling_params_validate(&r->params.sampling, (int32_t)lim->n_vocab, &param);
    if (rc) {
        char why[256];
        snprintf(why, sizeof why, "%s", pgd_error_detail());
        return pgd_error_set_param(rc, param, "%s", why);
    }
    if (r->params.n_stop < 0 || r->params.n_stop > PGD_STOP_MAX_STRINGS ||
        (r->params.n_stop > 0 && !r->params.stop))
        return pgd_error_set_param(PGD_EINVAL, "stop", "stop: at most %d strings",
                                   PGD_STOP_MAX_STRINGS);
    for (int i = 0; i < r->params.n_stop; i++)
        if (!r->params.stop[i].ptr || r->params.stop[i].len == 0 ||
            r->params.stop[i].len > PGD_STOP_MAX_LEN)
            return pgd_error_set_param(PGD_EINVAL, "stop", "stop string %d must have 1 to %d bytes",
                                       i, PGD_STOP_MAX_LEN);
    if (r->params.min_tokens < 0 ||
        (r->params.max_tokens > 0 && r->params.min_tokens > r->params.max_tokens))
        return pgd_error_set_param(
            PGD_EINVAL, "min_tokens", "min_tokens must be from 0 to max_tokens (%lld), got %lld",
            (long long)r->params.max_tokens, (long long)r->params.min_tokens);
    if (r->params.min_tokens > 0 && r->params.json)
        return pgd_error_set_param(PGD_EINVAL, "min_tokens",
                                   "min_tokens cannot go with output constrained to JSON (once the "
                                   "document closes, only the end may follow)");
    if (r->params.n_stop_ids < 0 ||
        (uint32_t)r->params.n_stop_ids + lim->n_eog > PGD_FINISH_MAX_EOS ||
        (r->params.n_stop_ids > 0 && !r->params.stop_ids))
        return pgd_error_set_param(PGD_EINVAL, "stop_token_ids", "stop_token_ids: at most %u ids",
                                   PGD_FINISH_MAX_EOS - lim->n_eog);
    for (int i = 0; i < r->params.n_stop_ids; i++)
        if (r->params.stop_ids[i] < 0 || (uint32_t)r->params.stop_ids[i] >= lim->n_vocab)
            return pgd_error_set_param(PGD_EINVAL, "stop_token_ids",
                                       "stop token id %d is out of range [0, %u)",
                                       r->params.stop_ids[i], lim->n_vocab);
    uint64_t total =
        (uint64_t)r->n_prompt + (uint64_t)(r->params.max_tokens > 0 ? r->params.max_tokens : 0);
    if (r->params.max_tokens > 0 && total > lim->n_ctx)
        return pgd_error_set_param(PGD_EINVAL, "max_tokens",
                                   "This model's maximum context length is %u tokens. However, "
                                   "you requested %llu tokens (%u in the prompt, %lld in the "
                                   "completion). Please reduce the prompt or max_tokens.",
                                   lim->n_ctx, (unsigned long long)total, r->n_prompt,
                                   (long long)r->params.max_tokens);
    /* One sequence must fit in the KV cache on its own, or it could never finish. */
    uint64_t cap = pgd_req_token_cap(lim);
    if (r->params.max_tokens > 0 && total > cap)
        return pgd_error_set_param(PGD_EINVAL, "max_tokens",
                                   "the prompt (%u tokens) and max_tokens (%lld) need %llu KV "
                                   "slots but the KV cache holds %llu (%u blocks of %u tokens); "
                                   "lower max_tokens or shorten the prompt",
                                   r->n_prompt, (long long)r->params.max_tokens,
                                   (unsigned long long)(total - 1), (unsigned long long)(cap - 1),
                                   lim->usable_blocks, lim->block_size);
    if (r->n_prompt + 1ull > cap)
        return pgd_error_set_param(PGD_EINVAL, "prompt",
                                   "the prompt (%u tokens) does not fit in the KV cache (%u "
                                   "blocks of %u tokens)",
                                   r->n_prompt, lim->usable_blocks, lim->block_size);
    return 0;
}

void pgd__request_free(pgd__req_spec *s) {
    if (!s) return;
    free(s->prompt);
    free(s->stops);
    free(s->stop_bytes);
    free(s->stop_ids);
    free(s->biases);
    pgd_json_schema_unref(s->params.json);
    free(s);
}

int pgd__request_dup(const pgd_request *r, const pgd_req_limits *lim, pgd__req_spec **out) {
    *out = NULL;
    pgd__req_spec *s = calloc(1, sizeof *s);
    if (!s) return PGD_ENOMEM;
    s->n_prompt = r->n_prompt;
    s->params = r->params;
    s->n = r->n ? r->n : 1;
    s->tenant = r->tenant;
    s->weight = r->weight > 0 ? r->weight : 1.0f;
    s->priority = r->priority;
    s->user = r->user;
    s->prompt_logprobs = r->prompt_logprobs;
    s->prompt_only = r->prompt_only;
    s->pooling = r->pooling;
    s->params.stop = NULL;
    s->params.stop_ids = NULL;
    s->params.sampling.logit_bias = NULL;
    s->params.json = pgd_json_schema_ref(r->params.json);
    if (!(s->prompt = malloc((size_t)r->n_prompt * sizeof *s->prompt))) goto fail;
    memcpy(s->prompt, r->prompt, (size_t)r->n_prompt * sizeof *s->prompt);
    if (r->params.n_stop > 0) {
        size_t total = 0;
        for (int i = 0; i < r->params.n_stop; i++) total += r->params.stop[i].len;
        s->stops = malloc((size_t)r->params.n_stop * sizeof *s->stops);
        s->stop_bytes = malloc(total ? total : 1);
        if (!s->stops || !s->stop_bytes) goto fail;
        size_t off = 0;
        for (int i = 0; i < r->params.n_stop; i++) {
            memcpy(s->stop_bytes + off, r->params.stop[i].ptr, r->params.stop[i].len);
            s->stops[i] = (pgd_str){s->stop_bytes + off, r->params.stop[i].len};
            off += r->params.stop[i].len;
        }
        s->params.stop = s->stops;
    }
    if (r->params.n_stop_ids > 0) {
        size_t bytes = (size_t)r->params.n_stop_ids * sizeof *s->stop_ids;
        if (!(s->stop_ids = malloc(bytes))) goto fail;
        memcpy(s->stop_ids, r->params.stop_ids, bytes);
        s->params.stop_ids = s->stop_ids;
    }
    if (r->params.sampling.n_logit_bias > 0) {
        size_t bytes = r->params.sampling.n_logit_bias * sizeof *s->biases;
        if (!(s->biases = malloc(bytes))) goto fail;
        memcpy(s->biases, r->params.sampling.logit_bias, bytes);
        s->params.sampling.logit_bias = s->biases;
    }
    /* "Up to the context" means up to what the context and the KV cache allow: a lone
     * sequence must always be able to finish. */
    uint64_t cap = pgd_req_token_cap(lim);
    if (s->params.max_tokens <= 0 || (uint64_t)r->n_prompt + (uint64_t)s->params.max_tokens > cap)
        s->params.max_tokens = (int64_t)(cap > r->n_prompt ? cap - r->n_prompt : 1);
    *out = s;
    return 0;
fail:
    pgd__request_free(s);
    return pgd_error_set(PGD_ENOMEM, "out of memory copying a request");
}
