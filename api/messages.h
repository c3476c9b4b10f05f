/*
 * api/messages.h — the OpenAI chat `messages` array as plain C: one pgd_chat_msg per message,
 * content given either as a string or as a list of {"type":"text","text":...} parts, with an
 * assistant's tool calls and "tool" messages (a tool's result).
 *
 * Shared by the HTTP API (chat completions) and the CLI (`pagoda template`, `pagoda
 * generate --chat`). Pure function over a jansson tree. Contents, roles and tool names point into
 * that tree, so the json_t must outlive the parsed messages; tool call arguments are re-written
 * (see below) into memory the pgd_messages owns.
 *
 * Threading: no shared state.
 */
#ifndef PGD_API_MESSAGES_H
#define PGD_API_MESSAGES_H

#include <jansson.h>
#include <stddef.h>

#include "engine/text/chat_template.h"

typedef struct pgd_messages {
    pgd_chat_msg *msgs;        /* [n] */
    pgd_str *parts;            /* all messages' parts, in order */
    pgd_chat_tool_call *calls; /* all messages' tool calls, in order (NULL when none) */
    char *args;                /* the calls' arguments text, back to back (NULL when none) */
    pgd_str *reasoning;        /* [n] the assistant messages' reasoning_content (ptr NULL where
                                  none is given), or NULL when no message has one: what
                                  pgd_chat_render_opts.reasoning takes */
    size_t n;
} pgd_messages;

/* Parse `arr` (the value of "messages"). On failure returns PGD_EINVAL (or PGD_ENOMEM), leaves
 * a message in pgd_error_detail() and writes the offending parameter into param[param_cap]
 * (e.g. "messages[2].content", "messages[1].tool_calls[0].function.arguments"); *out is then
 * empty.
 *
 * Roles are not checked here (the template knows which it accepts) but for the protocol's rules:
 *   - "developer" (OpenAI's name for system messages since its o1 models) is given as "system";
 *   - the legacy "function" role and an assistant's "function_call" are refused, pointing to
 *     "tool" messages and "tool_calls";
 *   - a role must be a string without NUL bytes.
 * Content is a string or a list of text parts; an assistant's or a tool's may also be null or
 * missing (counted as ""), as OpenAI allows.
 *
 * A "tool" message may carry a string "tool_call_id" (checked, not used: templates do not
 * print it). An assistant message's "tool_calls" (null or [] count as none; on another role
 * they are refused) is an array of {"id": optional string, "type": "function" (optional),
 * "function": {"name": non-empty string, "arguments": string}}. The arguments are JSON text
 * as OpenAI sends them; they must hold an object ("" counts as {}), which is parsed and written
 * again as Python's json.dumps would (pgd_api_json_dump_py) — what vLLM renders: it json.loads
 * the arguments and the template's tojson dumps them. msgs[i].calls / n_calls point into
 * out->calls, whose arguments point into out->args; both live until pgd_messages_free.
 *
 * An assistant message may carry "reasoning_content" (vLLM's: its reasoning, which Qwen3's
 * template renders in a <think> block): a string, or null / missing for none (on other roles it
 * is ignored, as templates read it from assistant messages only); out->reasoning[i] points into
 * the tree. */
int pgd_messages_parse(const json_t *arr, pgd_messages *out, char *param, size_t param_cap);

/* vLLM's "chat_template_kwargs" of a chat request: the template variables a client sets. `v`
 * (NULL or null: absent, nothing changes) must be an object; of its keys only
 * "enable_thinking" is read (a boolean, or null for absent: opts->enable_thinking, which only
 * Qwen3's template reads); others are ignored, as a template ignores variables it does not use.
 * 0, or PGD_EINVAL with a detail and param[param_cap] ("chat_template_kwargs" or
 * "chat_template_kwargs.enable_thinking"). */
int pgd_messages_template_kwargs(const json_t *v, pgd_chat_render_opts *opts, char *param,
                                 size_t param_cap);

void pgd_messages_free(pgd_messages *m); /* back to empty; NULL is fine */

#endif
