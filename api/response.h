/*
 * api/response.h — OpenAI response bodies from plain C data: chat.completion, the
 * chat.completion.chunk stream, text_completion (whole and streamed), the model list, vLLM's
 * /tokenize and /detokenize answers, response ids, and SSE framing.
 *
 * Every builder appends compact JSON text (no newline) to a pgd_buf and returns 0 or
 * PGD_ENOMEM (the buffer is then left as it was). The server frames stream chunks with
 * pgd_api_sse_data and ends a stream with PGD_API_SSE_DONE.
 *
 * Shapes (keys in this order):
 *   chat.completion   {id, object, created, model, [system_fingerprint], choices: [{index,
 *                      message: {role, content, [tool_calls]}, logprobs, finish_reason}],
 *                      usage} — with tool calls, content is null when empty and tool_calls
 *                      [{id, type: "function", function: {name, arguments}}]
 *   chat.completion.chunk {id, object, created, model, [system_fingerprint], choices: [{index,
 *                      delta, logprobs, finish_reason}], [usage]}
 *   text_completion   {id, object, created, model, [system_fingerprint], choices: [{index,
 *                      text, logprobs, finish_reason}], usage (chunks: [usage])}
 *   ([x]: only when set; a chunk's usage is present iff include_usage)
 *   usage             {prompt_tokens, completion_tokens, total_tokens,
 *                      prompt_tokens_details: {cached_tokens}}
 *   chat logprobs     null | {"content": [{token, logprob, bytes, top_logprobs: [{token,
 *                      logprob, bytes}]}]}
 *   legacy logprobs   null | {tokens, token_logprobs, top_logprobs: [{token: logprob}],
 *                      text_offset}
 *   prompt_logprobs   vLLM's, when asked (text_completion: in each choice, after
 *                      finish_reason; chat.completion: after usage, choice 0's): [null,
 *                      {"<id>": {logprob, rank, decoded_token}, ...}, ...] — per prompt token
 *                      after the first, the token itself, then its alternatives
 * A stream with include_usage carries "usage": null in every chunk but the last, whose choices
 * are [] and whose usage is set.
 *
 * Text safety: every string is emitted as valid UTF-8. Token texts (which may be a fragment of
 * a character) appear in "token" with ill-formed bytes replaced by U+FFFD, and exactly in
 * "bytes". Logprobs that are not finite or below -9999 print as -9999.0 (OpenAI's value for
 * "very unlikely"); in legacy logprobs a NaN logprob prints as null (the first token of an
 * echoed prompt has no logprob).
 *
 * Threading: pure functions, no shared state (pgd_api_new_id reads the OS entropy source).
 */
#ifndef PGD_API_RESPONSE_H
#define PGD_API_RESPONSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/request.h"
#include "api/tools.h"
#include "common/text.h"
#include "engine/text/stop.h"

#define PGD_API_SSE_DONE "data: [DONE]\n\n"

/* ---- ids ------------------------------------------------------------------------------------ */

#define PGD_API_ID_CAP 48

/* prefix + 32 lowercase hex digits of (hi, lo): "chatcmpl-0123...". */
void pgd_api_format_id(char out[PGD_API_ID_CAP], const char *prefix, uint64_t hi, uint64_t lo);
/* Same with 128 random bits; prefix "chatcmpl-" for chat, "cmpl-" for completions. */
void pgd_api_new_id(char out[PGD_API_ID_CAP], pgd_api_kind kind);

/* ---- inputs --------------------------------------------------------------------------------- */

/* What every object of one response shares. */
typedef struct pgd_api_meta {
    const char *id;                 /* "chatcmpl-..." / "cmpl-..." */
    int64_t created;                /* unix seconds */
    pgd_str model;                  /* the served model's name */
    const char *system_fingerprint; /* NULL: the field is left out */
} pgd_api_meta;

typedef struct pgd_api_usage {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;    /* prompt tokens served from the prefix cache */
    int64_t reasoning_tokens; /* completion tokens of a thinking model's reasoning (api/
                                 reasoning.h); > 0 adds completion_tokens_details */
} pgd_api_usage;

/* One alternative at a position. `text` is the token's exact bytes (any bytes). */
typedef struct pgd_api_top_logprob {
    pgd_str text;
    float logprob;
} pgd_api_top_logprob;

/* One generated (or, for echo, prompt) token with its logprob and alternatives. */
typedef struct pgd_api_token_logprob {
    pgd_str text;                   /* exact bytes */
    float logprob;                  /* NaN: unknown (legacy: null) */
    const pgd_api_top_logprob *top; /* [n_top], most probable first */
    size_t n_top;
} pgd_api_token_logprob;

/* A token with its logprob and rank (vLLM's prompt_logprobs). `text`: exact bytes. */
typedef struct pgd_api_ranked_logprob {
    int32_t id;
    pgd_str text;
    float logprob;
    int32_t rank; /* 1 + the ids more probable */
} pgd_api_ranked_logprob;

/* One prompt token of vLLM's prompt_logprobs and its alternatives. */
typedef struct pgd_api_prompt_logprob {
    pgd_api_ranked_logprob token;
    const pgd_api_ranked_logprob *top; /* [n_top], most probable first */
    size_t n_top;
} pgd_api_prompt_logprob;

/* One choice of a whole response, or one choice's piece of a stream chunk. */
typedef struct pgd_api_choice {
    uint32_t index;
    pgd_str text;      /* content (chat) / text (completions); may be empty */
    pgd_finish finish; /* PGD_FINISH_NONE prints null */
    bool logprobs;     /* false: "logprobs": null; true: the object, from tokens below */
    const pgd_api_token_logprob *tokens; /* [n_tokens] */
    size_t n_tokens;
    int64_t text_offset;  /* legacy logprobs: text_offset of tokens[0] (characters) */
    bool prompt_logprobs; /* vLLM's prompt_logprobs from prompt_lp below (whole answers) */
    const pgd_api_prompt_logprob *prompt_lp; /* [n_prompt_lp]: prompt tokens 1, 2, ... */
    size_t n_prompt_lp;
    const pgd_api_tool_call *calls; /* [n_calls] chat: the message's tool_calls (api/tools.h) */
    size_t n_calls;
    bool has_reasoning; /* chat: the model reasoned (api/reasoning.h): the message's
                           reasoning_content is `reasoning`, and an empty content is null */
    pgd_str reasoning;
} pgd_api_choice;

/* ---- chat ----------------------------------------------------------------------------------- */

/* A whole chat.completion. */
int pgd_api_chat_completion(const pgd_api_meta *m, const pgd_api_choice *choices, size_t n,
                            const pgd_api_usage *u, pgd_buf *out);

/* Stream chunks of one choice, in order: first (delta {role: "assistant", content: ""}), any
 * number of content chunks (delta {content}, logprobs from c->tokens when c->logprobs; a
 * c->finish other than NONE sets finish_reason in the same chunk), then finish (delta {},
 * finish_reason). include_usage adds "usage": null. */
int pgd_api_chat_chunk_first(const pgd_api_meta *m, uint32_t index, bool include_usage,
                             pgd_buf *out);
int pgd_api_chat_chunk_content(const pgd_api_meta *m, const pgd_api_choice *c, bool include_usage,
                               pgd_buf *out);
/* A chunk of reasoning: delta {reasoning_content: c->reasoning}, logprobs as content chunks. */
int pgd_api_chat_chunk_reasoning(const pgd_api_meta *m, const pgd_api_choice *c, bool include_usage,
                                 pgd_buf *out);
int pgd_api_chat_chunk_finish(const pgd_api_meta *m, uint32_t index, pgd_finish finish,
                              bool include_usage, pgd_buf *out);
/* A chunk of tool calls: delta {tool_calls: [{index: first + k, id, type: "function",
 * function: {name, arguments}}]} for calls[0..n): a call's first entry, with the arguments
 * written so far; a call with an empty id is a continuation, {index, function: {arguments}}:
 * the next bytes of its arguments (the client concatenates them, as OpenAI's streams ask). */
int pgd_api_chat_chunk_tool_calls(const pgd_api_meta *m, uint32_t index,
                                  const pgd_api_tool_call *calls, size_t n, size_t first,
                                  bool include_usage, pgd_buf *out);

/* The last chunk when include_usage: choices [] and the usage (object chat.completion.chunk
 * for PGD_API_CHAT, text_completion for PGD_API_COMPLETION). */
int pgd_api_chunk_usage(const pgd_api_meta *m, pgd_api_kind kind, const pgd_api_usage *u,
                        pgd_buf *out);

/* ---- completions ---------------------------------------------------------------------------- */

/* A whole text_completion. For several prompts with n choices each, choice index is
 * prompt_index * n + j (the caller sets c->index). */
int pgd_api_completion(const pgd_api_meta *m, const pgd_api_choice *choices, size_t n,
                       const pgd_api_usage *u, pgd_buf *out);

/* One streamed text_completion chunk for one choice: {index, text, logprobs, finish_reason}.
 * The final chunk of a choice normally has empty text and its finish reason. */
int pgd_api_completion_chunk(const pgd_api_meta *m, const pgd_api_choice *c, bool include_usage,
                             pgd_buf *out);

/* ---- models, tokenize, detokenize ------------------------------------------------------------ */

typedef struct pgd_api_model_info {
    const char *id;
    int64_t created;
    const char *owned_by;  /* NULL: "pagoda" */
    int64_t max_model_len; /* > 0 adds vLLM's "max_model_len" field; <= 0 leaves it out */
} pgd_api_model_info;

/* {"object":"list","data":[model objects]} and one model object {id, object:"model", created,
 * owned_by[, max_model_len]}. */
int pgd_api_models_list(const pgd_api_model_info *models, size_t n, pgd_buf *out);
int pgd_api_model_object(const pgd_api_model_info *model, pgd_buf *out);

/* vLLM's {"count": n, "max_model_len": M, "tokens": [...]} and {"prompt": "..."}. */
int pgd_api_tokenize_response(const int32_t *ids, size_t n, int64_t max_model_len, pgd_buf *out);
int pgd_api_detokenize_response(const char *text, size_t len, pgd_buf *out);

/* ---- SSE ------------------------------------------------------------------------------------- */

/* Appends "data: " + json[len] + "\n\n". json must not contain a newline (the builders' output
 * never does); PGD_EINVAL if it does. */
int pgd_api_sse_data(const char *json, size_t len, pgd_buf *out);

/* Internal to api/: the chat logprobs' entries [{token, logprob, bytes, top_logprobs: [{token,
 * logprob, bytes}]}] of tokens[n]; NULL only when out of memory. */
json_t *pgd__api_logprob_entries(const pgd_api_token_logprob *tokens, size_t n);

#endif
