/*
 * api/request.h — OpenAI requests as plain C: POST /v1/chat/completions and /v1/completions
 * (pgd_api_request), vLLM's POST /tokenize and /detokenize; validation with OpenAI-shaped errors,
 * and the conversion of a request into the engine's per-sequence parameters.
 *
 * Parsing: the body (bytes + length) must be valid UTF-8 holding one JSON object; anything else
 * is a 400 with param null. Each known field is checked for its type and range; the first bad
 * one gives a 400 "invalid_request_error" whose param is the field's name ("temperature",
 * "stop", "messages[1].content", "prompt[0][3]", "stream_options", ...) and whose message names
 * the field and the allowed values. Unknown fields are ignored. A null value counts as absent
 * for every optional field. Integer fields accept JSON integers and integral reals (5.0).
 *
 * Fields (chat = C, completions = P):
 *   model                     string (optional)
 *   messages (C)              via pgd_messages_parse (param "messages[i]...")
 *   prompt (P)                string | [string] | [int] | [[int]]; each element is one prompt;
 *                             not empty; token ids >= 0 (checked against n_vocab by the caller)
 *   max_tokens, max_completion_tokens   >= 1; the latter wins when both are given; P:
 *                             max_tokens 0 with echo true asks for the prompt alone (scoring:
 *                             with logprobs, the prompt tokens' logprobs), generating nothing
 *   temperature [0, 2]  top_p (0, 1]  top_k >= -1 (0 and -1: off)  min_p [0, 1]
 *   presence_penalty, frequency_penalty [-2, 2]  repetition_penalty > 0
 *   seed                      any int64 (absent: the caller draws one)
 *   stop                      string or array of <= 16 strings, each 1..1024 bytes
 *   min_tokens                vLLM's: integer 0..max_tokens: output tokens before an end id
 *                             (EOS, stop_token_ids) may be drawn or a stop string end the
 *                             answer; not with a JSON response_format or a forced call
 *   include_stop_str_in_output  vLLM's: bool, a matched stop string ends the text (default
 *                             false: it is cut off)
 *   stop_token_ids            vLLM's: array of <= 32 token ids (with the model's own end ids
 *                             at most 32: the scheduler checks that and the vocabulary) that
 *                             end a choice as its EOS does, their text not emitted
 *   n                         1..16
 *   logprobs                  C: bool; P: integer 0..20 = number of top logprobs (legacy API);
 *                             P with echo: the prompt tokens' logprobs too (the first: null)
 *   top_logprobs (C)          0..20; needs logprobs true
 *   prompt_logprobs           vLLM's: 0..20 = the prompt tokens' logprobs, with that many
 *                             alternatives each, in the answer's prompt_logprobs; not with
 *                             stream
 *   logit_bias                object: canonical decimal token id -> number in [-100, 100]
 *   stream                    bool
 *   stream_options            object, only with stream true; include_usage: bool
 *   tools, tool_choice, parallel_tool_calls (C)   api/tools.h
 *   chat_template_kwargs (C)  vLLM's: an object of template variables; only "enable_thinking"
 *                             (boolean, default true: Qwen3's template) is read, other keys are
 *                             ignored (pgd_messages_template_kwargs)
 *   user string, ignore_eos bool, priority int32, echo (P) bool, cache_salt string (vLLM's:
 *   requests share prefix-cache hits only with requests of the same salt)
 *
 * Ownership: a parsed request owns its memory; strings (model, stop, prompts, messages) point
 * into the jansson tree it keeps (`root`). pgd_api_request_free releases everything.
 *
 * Threading: pure functions, no shared state.
 */
#ifndef PGD_API_REQUEST_H
#define PGD_API_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/error.h"
#include "api/messages.h"
#include "api/tools.h"
#include "common/text.h"
#include "engine/seq.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/json_schema.h"
#include "engine/text/stop.h"

#define PGD_API_MAX_N        16 /* choices per prompt */
#define PGD_API_MAX_LOGPROBS 20 /* top logprobs */
#define PGD_API_MAX_STOP     PGD_STOP_MAX_STRINGS
#define PGD_API_MAX_INPUTS   2048 /* embeddings' inputs per request (OpenAI's limit) */

typedef enum pgd_api_kind {
    PGD_API_CHAT = 0,       /* /v1/chat/completions */
    PGD_API_COMPLETION = 1, /* /v1/completions */
    PGD_API_EMBEDDING = 2,  /* /v1/embeddings (api/embeddings.h) */
} pgd_api_kind;

/* One completions prompt: either text or token ids. */
typedef struct pgd_api_prompt {
    bool is_tokens;
    pgd_str text;       /* text prompt (into the request's JSON); {NULL, 0} for token prompts */
    const int32_t *ids; /* [n_ids] token prompt (into the request's id storage); NULL for text */
    size_t n_ids;
} pgd_api_prompt;

typedef struct pgd_api_request {
    pgd_api_kind kind;
    json_t *root; /* the parsed body, owned: the strings below point into it */

    pgd_str model; /* ptr NULL when absent */

    /* chat */
    pgd_messages messages;
    pgd_api_tools tools;  /* tools, tool_choice, parallel_tool_calls (api/tools.h) */
    bool enable_thinking; /* chat_template_kwargs.enable_thinking, default true */

    /* completions; embeddings: the inputs */
    pgd_api_prompt *prompts; /* [n_prompts], owned */
    size_t n_prompts;
    int32_t *prompt_ids; /* storage of every token prompt, owned */
    bool echo;
    bool prompt_only; /* max_tokens 0 (with echo): the prompt alone, nothing generated */

    /* generation */
    int64_t max_tokens;                        /* 0 when absent (up to the context) */
    float temperature;                         /* default 1 */
    float top_p;                               /* default 1 */
    int32_t top_k;                             /* default 0 (off) */
    float min_p;                               /* default 0 */
    float presence_penalty, frequency_penalty; /* default 0 */
    float repetition_penalty;                  /* default 1 */
    bool has_seed;
    int64_t seed;
    pgd_str stop[PGD_API_MAX_STOP]; /* [n_stop] */
    int n_stop;
    int32_t stop_ids[PGD_FINISH_MAX_EOS]; /* [n_stop_ids] vLLM's stop_token_ids */
    int n_stop_ids;
    int n;                      /* choices per prompt, default 1 */
    bool logprobs;              /* report logprobs (chat: logprobs true; P: logprobs >= 0) */
    int top_logprobs;           /* 0..20 alternatives per token */
    int32_t prompt_logprobs;    /* vLLM's: -1 when absent, else 0..20 alternatives */
    pgd_logit_bias *logit_bias; /* [n_logit_bias], owned, in the body's order */
    size_t n_logit_bias;
    bool ignore_eos;
    int64_t min_tokens;          /* vLLM's: 0 when absent */
    bool include_stop;           /* vLLM's include_stop_str_in_output */
    const pgd_json_schema *json; /* response_format: json_object (pgd_json_schema_object()) or
                                    json_schema (compiled, a reference owned), or a tool_choice
                                    forcing a call: the output is one JSON document it allows;
                                    NULL: text */
    int32_t priority;            /* default 0 */

    /* output */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    pgd_str user;       /* ptr NULL when absent */
    pgd_str cache_salt; /* ptr NULL when absent */

    /* embeddings */
    bool base64;        /* encoding_format "base64" (default "float") */
    int64_t dimensions; /* 0 when absent, else >= 1 (checked against the model by the caller) */
} pgd_api_request;

/* Parses and validates a chat (PGD_API_CHAT), completions (PGD_API_COMPLETION) or embeddings
 * (PGD_API_EMBEDDING: fields in api/embeddings.h) body.
 * 0 and *out filled; or PGD_EINVAL with *err filled (status 400) and *out empty; or PGD_ENOMEM
 * with *err filled (status 500). Either way pgd_api_request_free(out) is safe. */
int pgd_api_request_parse(pgd_api_kind kind, const char *body, size_t len, pgd_api_request *out,
                          pgd_api_error *err);

/* The same from a JSON object already read (api/responses.c builds one): takes the reference
 * to `root` whatever it returns. */
int pgd_api_request_parse_json(pgd_api_kind kind, json_t *root, pgd_api_request *out,
                               pgd_api_error *err);

void pgd_api_request_free(pgd_api_request *r); /* back to empty; NULL is fine */

/* Internal to api/: body[len] read as one JSON object (*out, a new reference); PGD_EINVAL with
 * *e a 400 for anything else (not UTF-8, not JSON, not an object), PGD_ENOMEM with *e a 500. */
int pgd__api_load_object(const char *body, size_t len, json_t **out, pgd_api_error *e);

/* Choices in the response: n for chat, n_prompts * n for completions (choice index =
 * prompt_index * n + j). */
size_t pgd_api_request_n_choices(const pgd_api_request *r);

/* The engine parameters of one choice. `choice` is the choice's rank among the n choices of
 * its prompt (0..n-1). With a seed, the sampling seed is seed + choice (so n > 1 gives distinct
 * yet reproducible samples); without one it is `random_seed` (pass pgd_sampler_random_seed(),
 * a fresh one per choice). *out borrows the request's stop strings, logit_bias and JSON schema: the
 * request must outlive it (pgd_seq_create copies them). cache_salt is left 0 for the caller to
 * fill. Logit bias ids are not checked against the vocabulary here: validate *out
 * with pgd_sampling_params_validate(&out->sampling, n_vocab, &param) for that. */
void pgd_api_request_seq_params(const pgd_api_request *r, uint32_t choice, uint64_t random_seed,
                                pgd_seq_params *out);

/* ---- vLLM's POST /tokenize and /detokenize ------------------------------------------------ */

/* /tokenize: {"prompt": "..."} (+ "add_special_tokens", default true) or
 * {"messages": [...]} (+ "add_generation_prompt" default true, "add_special_tokens" default
 * false, "tools" / "tool_choice" and "chat_template_kwargs" as in a chat request), "model"
 * optional. Giving both prompt
 * and messages, or neither, is a 400. */
typedef struct pgd_api_tokenize_request {
    json_t *root; /* owned */
    pgd_str model;
    bool chat;
    pgd_str prompt;        /* !chat */
    pgd_messages messages; /* chat */
    pgd_api_tools tools;   /* chat: tools offered (as in a chat request) */
    bool add_generation_prompt;
    bool enable_thinking; /* chat: chat_template_kwargs.enable_thinking (as in a chat request) */
    bool add_special_tokens;
} pgd_api_tokenize_request;

int pgd_api_tokenize_parse(const char *body, size_t len, pgd_api_tokenize_request *out,
                           pgd_api_error *err);
void pgd_api_tokenize_free(pgd_api_tokenize_request *r); /* NULL is fine */

/* /detokenize: {"tokens": [int >= 0, ...]} (may be empty), "model" optional. */
typedef struct pgd_api_detokenize_request {
    json_t *root; /* owned */
    pgd_str model;
    int32_t *tokens; /* [n_tokens], owned */
    size_t n_tokens;
} pgd_api_detokenize_request;

int pgd_api_detokenize_parse(const char *body, size_t len, pgd_api_detokenize_request *out,
                             pgd_api_error *err);
void pgd_api_detokenize_free(pgd_api_detokenize_request *r); /* NULL is fine */

#endif
