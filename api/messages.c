/*
 * api/messages.c — OpenAI messages array -> pgd_chat_msg[].
 */
#include "api/messages.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

void pgd_messages_free(pgd_messages *m) {
    if (!m) return;
    free(m->msgs);
    free(m->parts);
    memset(m, 0, sizeof *m);
}

static int bad(char *param, size_t cap, const char *fmt_param, size_t i, size_t p,
               const char *msg) {
    snprintf(param, cap, fmt_param, i, p);
    return pgd_error_set(PGD_EINVAL, "%s: %s", param, msg);
}

/* Whether v asks for calls: present, not null and not an empty list. */
static bool calls(const json_t *v) {
    return v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0);
}

/* 0, or PGD_EINVAL when message i (an object) is part of tool calling: a "tool" or "function"
 * message, or an assistant message with tool calls (an empty tool_calls list counts as none). */
static int tool_free(const json_t *m, size_t i, char *param, size_t cap) {
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!strcmp(role, "tool") || !strcmp(role, "function")) {
        char msg[96];
        snprintf(msg, sizeof msg, "'%s' messages are not supported: pagoda does not call tools",
                 role);
        return bad(param, cap, "messages[%zu].role", i, 0, msg);
    }
    static const char *const what = "tool calls are not supported: pagoda does not call tools";
    if (calls(json_object_get(m, "tool_calls")))
        return bad(param, cap, "messages[%zu].tool_calls", i, 0, what);
    if (calls(json_object_get(m, "function_call")))
        return bad(param, cap, "messages[%zu].function_call", i, 0, what);
    return 0;
}

int pgd_messages_parse(const json_t *arr, pgd_messages *out, char *param, size_t param_cap) {
    memset(out, 0, sizeof *out);
    if (!json_is_array(arr)) {
        snprintf(param, param_cap, "messages");
        return pgd_error_set(PGD_EINVAL, "messages must be an array of message objects");
    }
    size_t n = json_array_size(arr), n_parts = 0;
    if (n == 0) {
        snprintf(param, param_cap, "messages");
        return pgd_error_set(PGD_EINVAL, "messages must not be empty");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object_get(json_array_get(arr, i), "content");
        n_parts += json_is_array(c) ? json_array_size(c) : 1;
    }
    out->msgs = calloc(n, sizeof *out->msgs);
    out->parts = calloc(n_parts ? n_parts : 1, sizeof *out->parts);
    int rc = PGD_ENOMEM;
    if (!out->msgs || !out->parts) goto fail;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(arr, i);
        if (!json_is_object(m)) {
            rc = bad(param, param_cap, "messages[%zu]", i, 0, "must be an object");
            goto fail;
        }
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role) || strlen(json_string_value(role)) != json_string_length(role)) {
            rc = bad(param, param_cap, "messages[%zu].role", i, 0, "must be a string");
            goto fail;
        }
        out->msgs[i].role = json_string_value(role);
        if ((rc = tool_free(m, i, param, param_cap))) goto fail;
        if (!strcmp(out->msgs[i].role, "developer")) out->msgs[i].role = "system";
        out->msgs[i].parts = out->parts + k;
        if (json_is_string(content)) {
            out->parts[k].ptr = json_string_value(content);
            out->parts[k++].len = json_string_length(content);
        } else if ((!content || json_is_null(content)) && !strcmp(out->msgs[i].role, "assistant")) {
            out->parts[k].ptr = "";
            out->parts[k++].len = 0;
        } else if (json_is_array(content)) {
            for (size_t p = 0; p < json_array_size(content); p++) {
                json_t *part = json_array_get(content, p);
                json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(type)) {
                    rc = bad(param, param_cap, "messages[%zu].content[%zu].type", i, p,
                             "each content part needs a string \"type\"");
                    goto fail;
                }
                if (strcmp(json_string_value(type), "text") != 0) {
                    snprintf(param, param_cap, "messages[%zu].content[%zu].type", i, p);
                    rc = pgd_error_set(PGD_EINVAL,
                                       "%s: content parts of type '%.64s' are not supported "
                                       "(only \"text\")",
                                       param, json_string_value(type));
                    goto fail;
                }
                if (!json_is_string(text)) {
                    rc = bad(param, param_cap, "messages[%zu].content[%zu].text", i, p,
                             "must be a string");
                    goto fail;
                }
                out->parts[k].ptr = json_string_value(text);
                out->parts[k++].len = json_string_length(text);
            }
        } else {
            rc = bad(param, param_cap, "messages[%zu].content", i, 0,
                     "must be a string or a list of text parts");
            goto fail;
        }
        out->msgs[i].n_parts = (size_t)(out->parts + k - out->msgs[i].parts);
    }
    out->n = n;
    return 0;
fail:
    pgd_messages_free(out);
    return rc;
}
