/*
 * api/messages.h — the OpenAI chat `messages` array as plain C: one pgd_chat_msg per message,
 * content given either as a string or as a list of {"type":"text","text":...} parts.
 *
 * Shared by the HTTP API (chat completions) and the CLI (`pagoda template`, `pagoda
 * generate --chat`). Pure function over a jansson tree; strings point into that tree, so the
 * json_t must outlive the parsed messages.
 *
 * Threading: no shared state.
 */
#ifndef PGD_API_MESSAGES_H
#define PGD_API_MESSAGES_H

#include <jansson.h>
#include <stddef.h>

#include "engine/text/chat_template.h"

typedef struct pgd_messages {
    pgd_chat_msg *msgs; /* [n] */
    pgd_str *parts;     /* all messages' parts, in order */
    size_t n;
} pgd_messages;

/* Parse `arr` (the value of "messages"). On failure returns PGD_EINVAL, leaves a message in
 * pgd_error_detail() and writes the offending parameter into param[param_cap] (e.g.
 * "messages[2].content"); *out is then empty. Roles are not checked here (the template knows
 * which it accepts) but for two rules of the protocol: "developer" (OpenAI's name for system
 * messages since its o1 models) is given as "system", and tool calling is refused by name — a
 * "tool" or "function" message (messages[i].role), an assistant's non-empty tool_calls or its
 * function_call (messages[i].tool_calls, .function_call) — as this server calls no tools. A
 * role must be a string without NUL bytes. An assistant message may have a null or missing
 * content (counted as ""), as OpenAI allows. */
int pgd_messages_parse(const json_t *arr, pgd_messages *out, char *param, size_t param_cap);

void pgd_messages_free(pgd_messages *m); /* back to empty; NULL is fine */

#endif
