/*
 * scheduler/request.h — what goes into the scheduler and what comes out of it: a request
 * (prompt ids, sampling and stop parameters, n choices, tenant, weight, priority), the events
 * the scheduler posts for it (token deltas with text and logprobs, a finish with its reason and
 * usage, errors) and the scheduler's statistics.
 *
 * A request is checked once, where it enters (pgd_request_check, called by pgd_worker_submit
 * and pgd_sched_submit on the submitting thread), with the OpenAI names of the parameters in
 * its errors; the layers below assert what it checked. It is then deep-copied
 * (pgd__request_dup) so the scheduler thread only ever sees its own copy; a copy
 * (pgd__req_spec) is owned by whoever holds it last and freed with pgd__request_free.
 *
 * Event contract, per request: every choice i in [0, n) gets zero or more TOKEN events, in
 * order, then exactly one FINISH event (reason stop, length or abort) — or the whole request
 * ends with one ERROR event instead. The request's last event has `done` set and carries the
 * request's usage; nothing follows it. A request with prompt_logprobs >= 0 first gets
 * PROMPT_LOGPROBS events (index 0; they hold for every choice: the choices share the prompt)
 * covering prompt positions 1 .. n_prompt - 1 once each, in order, before any TOKEN event —
 * unless it is aborted or fails first.
 *
 * Threading: the functions here are pure (no shared state) and may run on any thread.
 */
#ifndef PGD_SCHEDULER_REQUEST_H
#define PGD_SCHEDULER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/runner.h"
#include "engine/sampling/sampler.h"
#include "engine/seq.h"

#define PGD_REQUEST_MAX_N 128 /* most choices one request may ask for */

typedef struct pgd_request {
    const int32_t *prompt; /* [n_prompt] token ids (copied at submit) */
    uint32_t n_prompt;
    pgd_seq_params params;   /* copied deep at submit (stop strings, stop ids, logit bias; the JSON
                                schema is referenced, pgd_json_schema_ref); the
                                sampling seed of choice i is params.sampling.seed + i */
    uint32_t n;              /* choices sharing the prompt's KV blocks; 0 means 1 */
    uint64_t tenant;         /* fair-share group (admission), e.g. the API key's tenant */
    float weight;            /* the tenant's share weight; <= 0 means 1 */
    int32_t priority;        /* higher is more important (admitted first, preempted last) */
    void *user;              /* opaque, returned in every event */
    int32_t prompt_logprobs; /* -1 (pgd_request_init): off; 0..20: report the logprob of every
                                prompt token after the first (PROMPT_LOGPROBS events) with that
                                many most probable alternatives. Such a prompt is computed
                                whole: the prefix cache serves none of it */
    bool prompt_only;        /* generate nothing: compute the prompt (only when its logprobs are
                                asked) and finish every choice (length, no output) */
    pgd_pooling pooling;     /* an embedding (not NONE): compute the whole prompt, generate
                                nothing, and finish (stop) with the prompt's final hidden states
                                pooled this way in the FINISH event; n 1, no prompt logprobs,
                                not prompt_only; the runner must be able to (limits.embeddings) */
} pgd_request;

/* Zero everything, default seq params (pgd_seq_params_default), n = 1, weight = 1, no prompt
 * logprobs. */
void pgd_request_init(pgd_request *r);

typedef enum pgd_event_kind {
    PGD_EVENT_TOKEN = 1,           /* one sampled token of one choice, with its text delta */
    PGD_EVENT_FINISH = 2,          /* one choice ended */
    PGD_EVENT_ERROR = 3,           /* the request failed; it is over (done is set) */
    PGD_EVENT_PROMPT_LOGPROBS = 4, /* logprobs of prompt tokens (prompt_logprobs >= 0) */
} pgd_event_kind;

typedef enum pgd_finish_reason {
    PGD_REASON_NONE = 0,
    PGD_REASON_STOP,   /* an end id or a stop string */
    PGD_REASON_LENGTH, /* max_tokens, the context or the KV cache's capacity */
    PGD_REASON_ABORT,  /* pgd_worker_abort / pgd_sched_abort, or shutdown */
} pgd_finish_reason;

/* "stop", "length", "abort" ("" for NONE). */
const char *pgd_finish_reason_str(pgd_finish_reason r);

typedef struct pgd_usage {
    uint32_t prompt_tokens;
    uint32_t completion_tokens; /* summed over the choices */
    uint32_t cached_tokens;     /* prompt tokens served by the prefix cache at admission */
    uint64_t queue_ns;          /* submit to first admission (0 if never admitted) */
} pgd_usage;

/* One event. Pointers inside are valid only during the callback that receives it. */
typedef struct pgd_event {
    pgd_event_kind kind;
    uint64_t id;    /* the request's id */
    void *user;     /* the request's user pointer */
    uint32_t index; /* choice (TOKEN, FINISH) */
    uint64_t t_ns;  /* CLOCK_MONOTONIC time the scheduler produced it */
    /* TOKEN */
    int32_t token;
    const char *text; /* NUL-terminated delta; may be empty (text held back: an incomplete UTF-8
                         character or a possible stop string; an end id has no text) */
    size_t text_len;
    const pgd_sample_result *logprobs; /* NULL unless params.sampling.logprobs */
    /* PROMPT_LOGPROBS: prompt tokens [lp_first, lp_first + n_lp) (lp_first >= 1: the first
     * token has none), each under the model given the tokens before it: prompt_lp[i].token is
     * prompt token lp_first + i, with its logprob and prompt_logprobs alternatives */
    uint32_t lp_first, n_lp;
    const pgd_sample_result *prompt_lp; /* [n_lp] */
    const int32_t *prompt_rank; /* [n_lp] each prompt token's rank (1 + the ids more probable) */
    /* FINISH */
    pgd_finish_reason reason;
    uint32_t n_output;      /* this choice's output tokens (an end id counts) */
    const float *embedding; /* an embedding's pooled vector ([n_embd], not normalized); NULL
                               unless the request pooled and was not aborted */
    uint32_t n_embd;
    /* FINISH, ERROR */
    bool done;       /* the request's last event */
    pgd_usage usage; /* the request's usage; complete when done */
    /* ERROR */
    int error;           /* PGD_E* */
    const char *message; /* why */
} pgd_event;

typedef void (*pgd_event_fn)(const pgd_event *ev, void *ud);

/* Tenants a stats snapshot describes at most. */
#define PGD_STATS_TENANTS_MAX 128

/* One tenant in a stats snapshot. Counts are since the scheduler started. */
typedef struct pgd_sched_tenant_stats {
    uint64_t id;                /* pgd_request.tenant */
    uint32_t n_running;         /* its sequences holding KV blocks */
    uint32_t n_waiting;         /* its sequences waiting: new and preempted */
    double vtime;               /* its fair-share counter: weighted service (scheduler/sched.h),
                                   raised when it becomes backlogged */
    uint64_t prompt_tokens;     /* prompt tokens of its admitted requests */
    uint64_t generation_tokens; /* tokens sampled for it */
    uint64_t computed_tokens;   /* tokens run through the forward pass for it (all kinds) */
} pgd_sched_tenant_stats;

/* A snapshot of the scheduler's state and counters (for metrics). */
typedef struct pgd_sched_stats {
    uint32_t n_requests;          /* requests not finished (waiting or running) */
    uint32_t n_running;           /* sequences (choices) holding KV blocks */
    uint32_t n_waiting;           /* sequences waiting: new and preempted */
    uint32_t n_preempted_waiting; /* of which preempted, waiting to resume */
    uint32_t kv_blocks;           /* usable KV blocks */
    uint32_t kv_blocks_used;      /* referenced by a running sequence */
    uint32_t kv_blocks_cached;    /* carrying a prefix-cache key (used or evictable) */
    double kv_usage;              /* kv_blocks_used / kv_blocks */
    uint64_t n_steps;             /* forward passes run */
    uint64_t n_submitted, n_finished, n_aborted, n_errors, n_refused;
    uint64_t n_preemptions;                          /* sequences preempted (recompute) */
    uint64_t prefix_query_tokens, prefix_hit_tokens; /* prefix cache, in tokens */
    uint64_t prompt_tokens;                          /* prompt tokens of admitted requests */
    uint64_t generation_tokens;                      /* tokens sampled */
    uint64_t computed_tokens;        /* tokens run through the forward pass (all kinds) */
    uint64_t prompt_computed_tokens; /* of which prompt positions (first time or recompute) */
    /* Every tenant the scheduler has seen (it forgets none), in the order first seen; those
     * after the first PGD_STATS_TENANTS_MAX are left out. */
    uint32_t n_tenants; /* entries of tenants[] filled */
    pgd_sched_tenant_stats tenants[PGD_STATS_TENANTS_MAX];
} pgd_sched_stats;

/* What a request is checked against (fixed once the scheduler exists). */
typedef struct pgd_req_limits {
    uint32_t n_ctx;         /* the model's context (prompt + output) */
    uint32_t n_vocab;       /* valid ids are [0, n_vocab) */
    uint32_t block_size;    /* KV block size */
    uint32_t usable_blocks; /* KV blocks one sequence may hold at most */
    uint32_t max_n;         /* most choices */
    uint32_t n_eog;         /* end-of-generation ids the tokenizer adds to every sequence */
    bool embeddings;        /* the runner returns hidden states for a whole step's tokens */
} pgd_req_limits;

/* The limits of a runner made from `info` with capabilities `caps`, allowing max_n choices. */
void pgd_req_limits_of(const pgd_model_info *info, const pgd_backend_caps *caps, uint32_t max_n,
                       pgd_req_limits *out);

/* 0, or PGD_EINVAL with a detail and the parameter's OpenAI name (pgd_error_set_param, the
 * caller's thread: "prompt", "max_tokens", "n", "stop", "stop_token_ids", "temperature", ...)
 * saying what is wrong: an empty prompt or one that leaves no room in the context, an id out
 * of range, bad sampling parameters, too many stop strings, n out of range, prompt + max_tokens
 * beyond the context, or a sequence that can never fit in the KV cache. */
int pgd_request_check(const pgd_request *r, const pgd_req_limits *lim);

/* Prompt + output tokens one sequence may reach: the context, or what the KV cache holds for a
 * sequence alone if that is less ("up to the context" means up to this). */
uint64_t pgd_req_token_cap(const pgd_req_limits *lim);

/* ---- internal: deep copies ---------------------------------------------------------------- */

/* A request's own copy. params' pointers point into this object. */
typedef struct pgd__req_spec {
    int32_t *prompt; /* [n_prompt] */
    uint32_t n_prompt;
    pgd_seq_params params; /* max_tokens > 0 always (see pgd__request_dup) */
    uint32_t n;
    uint64_t tenant;
    float weight; /* > 0 */
    int32_t priority;
    void *user;
    int32_t prompt_logprobs; /* as pgd_request */
    bool prompt_only;
    pgd_pooling pooling;
    pgd_str *stops;         /* [params.n_stop] views into stop_bytes */
    char *stop_bytes;       /* all stop strings back to back */
    int32_t *stop_ids;      /* [params.n_stop_ids] */
    pgd_logit_bias *biases; /* [params.sampling.n_logit_bias] */
} pgd__req_spec;

/* A deep copy of a checked request; max_tokens <= 0 ("up to the context") becomes the most
 * the context and the KV cache allow. 0 or PGD_ENOMEM. */
int pgd__request_dup(const pgd_request *r, const pgd_req_limits *lim, pgd__req_spec **out);
void pgd__request_free(pgd__req_spec *s); /* NULL is fine */

#endif
