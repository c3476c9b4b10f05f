/*
 * api/responses.h — OpenAI's Responses API (POST /v1/responses) as plain C: the request read
 * into the chat request it asks for (api/request.h), and the response object — whole, or as
 * its stream of typed events — built as the answer comes.
 *
 * Request (unknown fields are ignored; null counts as absent):
 *   input                 required: a string (one user message) or a non-empty array of items:
 *                         - a message {"type": "message" (optional), "role": "user" | "system"
 *                           | "developer" | "assistant", "content": string | [parts]}; parts
 *                           are {"type": "input_text" | "output_text", "text"} (and
 *                           {"type": "refusal", "refusal"} in an assistant's); images, files
 *                           and audio are refused (400 naming the part's type)
 *                         - {"type": "function_call", "call_id", "name", "arguments" (JSON
 *                           text of an object), "id", "status"}: an earlier call of the model;
 *                           calls that follow an assistant message (or each other) join it
 *                         - {"type": "function_call_output", "call_id", "output": string |
 *                           [input_text parts]}: a tool's result (a "tool" message)
 *                         - {"type": "reasoning", "content": [{"type": "reasoning_text",
 *                           "text"}], "summary", "encrypted_content"}: an earlier answer's
 *                           reasoning, the reasoning_content of the assistant message or call
 *                           that follows it (a call then starts an assistant message of its
 *                           own; dropped when none follows; summary and encrypted_content are
 *                           not read)
 *                         any other item type (item_reference, built-in tool calls) is a 400
 *                         naming input[i].type
 *   instructions          string: a system message before the input (not carried over)
 *   max_output_tokens     >= 1 (chat's max_completion_tokens)
 *   temperature, top_p    as chat
 *   tools                 [{"type": "function", "name", "description", "parameters",
 *                         "strict"}] (chat's tools, flattened); another type (web_search,
 *                         file_search, mcp, ...) is a 400 naming tools[i].type
 *   tool_choice           "none" | "auto" | "required" | {"type": "function", "name"}
 *   parallel_tool_calls   bool
 *   text                  {"format": {"type": "text"} | {"type": "json_object"} |
 *                         {"type": "json_schema", "name", "schema", "strict", "description"},
 *                         "verbosity": "medium" (other values are refused: this server does not
 *                         steer length)}
 *   include               array of strings; "message.output_text.logprobs" asks for the output
 *                         tokens' logprobs (top_logprobs alternatives each, 0..20); the other
 *                         values OpenAI defines name outputs this server never makes and are
 *                         accepted; anything else is a 400
 *   top_logprobs          0..20
 *   stream                bool; stream_options is accepted and ignored
 *   metadata              object of at most 16 string values (keys <= 64 characters, values
 *                         <= 512), echoed
 *   user, safety_identifier, prompt_cache_key   strings, echoed (user is also chat's user)
 *   store                 bool, default true: the server keeps the answer (server/resp_store.h:
 *                         GET/DELETE /v1/responses/{id}); "store" in the response says whether
 *                         it was kept
 *   previous_response_id  a kept response of the same caller: its conversation (its input, its
 *                         own previous ones', its output; not its instructions) comes before
 *                         this input; echoed. conversation is a 400
 *   reasoning             {"effort": null, "summary": null} passes; an effort or summary is a
 *                         400 (reasoning is not steered)
 *   chat_template_kwargs  as chat (vLLM's): {"enable_thinking": false} for Qwen3
 *   truncation            "disabled" (the default); "auto" is a 400
 *   max_tool_calls        >= 0, echoed (it limits built-in tools, which there are none of)
 *   service_tier          string, echoed
 *   background true, prompt (a stored prompt template): 400
 *   pagoda's and vLLM's sampling extras, as on chat: seed, top_k, min_p, presence_penalty,
 *   frequency_penalty, repetition_penalty, stop, logit_bias, ignore_eos, priority, cache_salt.
 * An error in what the chat request checks is reported under the Responses name of the field
 * (max_output_tokens, text.format..., tools[i].parameters, tool_choice.name, input[i]).
 *
 * Response object (keys in this order): {id "resp_...", object "response", created_at, status
 * ("completed"; "incomplete" with incomplete_details {"reason": "max_output_tokens"}; in a
 * stream's first events "in_progress"; "failed" with error {code, message}), background false,
 * error, incomplete_details, instructions, max_output_tokens, max_tool_calls, model, output,
 * parallel_tool_calls, previous_response_id, reasoning {effort, summary} (null),
 * service_tier (when given), store, temperature, text {format, verbosity}, tool_choice,
 * tools, top_logprobs, top_p, truncation, usage, user, metadata, safety_identifier,
 * prompt_cache_key}; usage {input_tokens, input_tokens_details {cached_tokens}, output_tokens,
 * output_tokens_details {reasoning_tokens: the thinking's tokens, 0 without}, total_tokens} (null
 * until the end).
 * Output items, in the order the model wrote them:
 *   {"id": "msg_...", "type": "message", "status", "role": "assistant", "content":
 *    [{"type": "output_text", "text", "annotations": [], "logprobs": [{token, logprob, bytes,
 *    top_logprobs: [{token, logprob, bytes}]}]}]} — logprobs [] unless asked
 *   {"id": "fc_...", "type": "function_call", "status": "completed", "arguments", "call_id",
 *    "name"}
 *   {"id": "rs_...", "type": "reasoning", "summary": [], "content": [{"type":
 *    "reasoning_text", "text"}], "status"} — a thinking model's reasoning (pgd_api_resp_reasoning:
 *    the server splits it off, api/reasoning.h), before the message or calls
 * An answer with no text and no call still has one (empty) message, unless it was cut short
 * (max_output_tokens) in its reasoning: then that reasoning is its only item.
 *
 * Stream: server-sent events "event: <type>\ndata: <json>\n\n", each object with "type" and
 * "sequence_number" (0, 1, ...), and no [DONE]:
 *   response.created, response.in_progress                     {response}
 *   per message: response.output_item.added {output_index, item}, response.content_part.added
 *   {item_id, output_index, content_index 0, part}, response.output_text.delta {item_id,
 *   output_index, content_index, delta, logprobs} ..., response.output_text.done {..., text,
 *   logprobs}, response.content_part.done {..., part}, response.output_item.done {output_index,
 *   item}
 *   per reasoning item: response.output_item.added (content []), response.content_part.added
 *   {item_id, output_index, content_index 0, part {type "reasoning_text", text ""}},
 *   response.reasoning_text.delta {item_id, output_index, content_index, delta} ...,
 *   response.reasoning_text.done {..., text}, response.content_part.done {..., part},
 *   response.output_item.done
 *   per call: response.output_item.added (arguments ""), response.function_call_arguments.delta
 *   {item_id, output_index, delta}, response.function_call_arguments.done {item_id,
 *   output_index, name, arguments}, response.output_item.done
 *   response.completed | response.incomplete {response} — or, when the answer fails, "error"
 *   {code, message, param} and response.failed {response} (a message being written then shows
 *   its text so far, status "incomplete").
 *
 * Ownership: pgd_api_resp_request owns its JSON; a pgd_api_resp copies what it is given.
 * Threading: no shared state; one pgd_api_resp is used by one thread at a time.
 */
#ifndef PGD_API_RESPONSES_H
#define PGD_API_RESPONSES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/error.h"
#include "api/request.h"
#include "api/response.h"
#include "api/tools.h"

/* Where a chat message of the translated request came from. */
#define PGD_API_RESP_PREVIOUS (SIZE_MAX - 1) /* the previous response's conversation */
typedef struct pgd_api_resp_src {
    size_t item;       /* its input item; SIZE_MAX: the instructions; PGD_API_RESP_PREVIOUS */
    size_t first_call; /* the input item of its first tool call (SIZE_MAX: none) */
} pgd_api_resp_src;

/* A Responses request: the chat request it asks for, and the fields the response repeats. */
typedef struct pgd_api_resp_request {
    pgd_api_request chat;      /* kind PGD_API_CHAT; its root is the translated chat body */
    json_t *echo;              /* owned: the response object's request fields (instructions,
                                  max_output_tokens, ..., tools as given), in output order */
    bool logprobs;             /* include asks for the output's logprobs */
    size_t n_input;            /* input items (an input string counts as one) */
    bool input_string;         /* input is a string */
    pgd_api_resp_src *msg_src; /* [n_msgs] where each chat message came from */
    size_t n_msgs;
    bool store;      /* `store` (default true): the server keeps the answer */
    json_t *history; /* owned: the conversation so far as chat messages — the previous
                        response's, then this input's — without the instructions */
} pgd_api_resp_request;

/* The conversation of stored response `id` (a JSON array of chat messages, borrowed for the
 * parse), or NULL when the caller has no such response. */
typedef const json_t *(*pgd_api_resp_lookup)(void *ud, const char *id);

/* Parses a /v1/responses body. 0 and *out filled; PGD_EINVAL with *err a 400 naming the field
 * (its Responses name); PGD_ENOMEM with *err a 500. pgd_api_resp_request_free is safe after
 * either. previous_response_id is looked up with lookup(ud, id): its conversation comes after
 * the instructions and before the input (an id it does not find is a 400, code
 * "previous_response_not_found"); without a lookup (pgd_api_resp_request_parse) it is a 400
 * saying that no responses are kept. */
int pgd_api_resp_request_parse_stored(const char *body, size_t len, pgd_api_resp_lookup lookup,
                                      void *ud, pgd_api_resp_request *out, pgd_api_error *err);
int pgd_api_resp_request_parse(const char *body, size_t len, pgd_api_resp_request *out,
                               pgd_api_error *err);

/* The answer will not be kept: "store": false in it. */
void pgd_api_resp_request_no_store(pgd_api_resp_request *r);
void pgd_api_resp_request_free(pgd_api_resp_request *r); /* back to empty; NULL is fine */

/* The Responses name of a chat request's parameter: "max_completion_tokens" is
 * "max_output_tokens", "response_format[.json_schema].x" "text.format.x", "tools[i].function.x"
 * "tools[i].x", "tool_choice.function.name" "tool_choice.name", "logprobs" "include"; a chat
 * message's "messages[k]..." is the input item it came from ("input[i]", "input[i].content", a
 * call's "input[i].arguments"), "instructions", or "input" for an input string; any other name
 * is the same. Writes into out[cap] and returns out (NULL for a NULL param). */
const char *pgd_api_resp_param(const pgd_api_resp_request *r, const char *param, char *out,
                               size_t cap);

/* An error about the translated chat request told in Responses terms: its param renamed as
 * above, and so is every chat parameter name its message quotes. */
void pgd_api_resp_error(const pgd_api_resp_request *r, pgd_api_error *e);

/* ---- the response, as it is built --------------------------------------------------------- */

typedef struct pgd_api_resp pgd_api_resp;

/* A response to `req` with meta m (id "resp_...", created, model). stream: its pieces come as
 * events into the `sse` buffers below; else only pgd_api_resp_end writes (the whole object).
 * 0 or PGD_ENOMEM. */
int pgd_api_resp_new(const pgd_api_meta *m, const pgd_api_resp_request *req, bool stream,
                     pgd_api_resp **out);
void pgd_api_resp_free(pgd_api_resp *r); /* NULL is fine */

/* Stream: response.created and response.in_progress. */
int pgd_api_resp_begin(pgd_api_resp *r, pgd_buf *sse);

/* Output text with its tokens' logprobs (n_lp of them, may be 0; used only when the request
 * asked for logprobs): added to the open message, which is opened first when there is none (a
 * piece with neither text nor logprobs opens nothing; an open reasoning item is closed then).
 * Stream: the events into sse. */
int pgd_api_resp_text(pgd_api_resp *r, pgd_str text, const pgd_api_token_logprob *lp, size_t n_lp,
                      pgd_buf *sse);

/* A thinking model's reasoning: added to the open reasoning item, which is opened first when
 * there is none (an open message is closed then; empty text opens nothing). It comes before
 * the answer's text and calls. Stream: the events into sse. */
int pgd_api_resp_reasoning(pgd_api_resp *r, pgd_str text, pgd_buf *sse);

/* A tool call begins: a function_call item (in progress) after the open message (which is
 * closed first), with the arguments written so far (call->arguments). Stream: its "added"
 * event and an arguments delta. 0 or PGD_ENOMEM. */
int pgd_api_resp_call_begin(pgd_api_resp *r, const pgd_api_tool_call *call, pgd_buf *sse);
/* The begun call's arguments grow by `args` (a delta event; nothing when empty). PGD_EINVAL
 * when no call is in progress. */
int pgd_api_resp_call_args(pgd_api_resp *r, pgd_str args, pgd_buf *sse);
/* The begun call ends: status completed, or incomplete when `cut` (its arguments stop before
 * their JSON ends). Stream: its arguments' "done" and the item's "done". PGD_EINVAL when no
 * call is in progress. */
int pgd_api_resp_call_done(pgd_api_resp *r, bool cut, pgd_buf *sse);
/* Whole tool calls: each begun and ended at once. */
int pgd_api_resp_calls(pgd_api_resp *r, const pgd_api_tool_call *calls, size_t n, pgd_buf *sse);

/* The end: the open message closed (an empty one added when there is no item), status
 * completed, or incomplete when finish is PGD_FINISH_LENGTH. Stream: the closing events and
 * response.completed / response.incomplete into out; whole: the response object into out. */
int pgd_api_resp_end(pgd_api_resp *r, pgd_finish finish, const pgd_api_usage *u, pgd_buf *out);

/* Once ended: the response object (as pgd_api_resp_end wrote it, or the stream's last event
 * held it) into out. 0, PGD_EINVAL before the end, PGD_ENOMEM. */
int pgd_api_resp_object(const pgd_api_resp *r, pgd_buf *out);

/* The conversation to keep: req's history and the output as one assistant message (its text,
 * null when there is no message item, its calls as tool_calls, its reasoning as
 * reasoning_content) — what a request that gave this output back as input items would hold.
 * *out a new reference. 0 or PGD_ENOMEM. */
int pgd_api_resp_conversation(const pgd_api_resp *r, const pgd_api_resp_request *req, json_t **out);

/* Stream: the answer failed (e, a 5xx): "error" and response.failed into sse. */
int pgd_api_resp_fail(pgd_api_resp *r, const pgd_api_error *e, pgd_buf *sse);

#endif
