/*
 * api/messages.c — OpenAI messages array -> pgd_chat_msg[] (see messages.h).
 *
 * Owns the pgd_messages arrays: msgs, parts, calls, reasoning (each sized by a first pass over
 * the array, never reallocated) and args, the tool calls' re-dumped arguments back to back.
 * args grows while parsing, so the calls' argument views are set from their lengths once it is
 * complete.
 */
#include "api/messages.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonutil.h"
#include "common/error.h"

void pgd_messages_free(pgd_messages *m) {
    if (!m) return;
    free(m->msgs);
    free(m->parts);
    free(m->calls);
    free(m->args);
    free(m->reasoning);
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

/* Present and not null. */
static bool given(const json_t *v) {
    return v && !json_is_null(v);
}

static const char k_args_msg[] = "must be a string holding a JSON object";

/* The arguments of call c of message i, checked and appended to *args as Python's json.dumps
 * writes them; *len gets the length appended. */
static int parse_arguments(const json_t *a, size_t i, size_t c, pgd_buf *args, size_t *len,
                           char *param, size_t cap) {
    static const char fmt[] = "messages[%zu].tool_calls[%zu].function.arguments";
    if (!json_is_string(a)) return bad(param, cap, fmt, i, c, k_args_msg);
    size_t before = args->len;
    if (json_string_length(a) == 0) { /* "" counts as {} */
        if (pgd_buf_append(args, "{}", 2)) goto nomem;
        *len = 2;
        return 0;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(json_string_value(a), json_string_length(a),
                             JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!json_is_object(obj)) {
        snprintf(param, cap, fmt, i, c);
        int rc = obj ? pgd_error_set(PGD_EINVAL, "%s: %s, not %s", param, k_args_msg,
                                     json_is_array(obj)     ? "an array"
                                     : json_is_string(obj)  ? "a string"
                                     : json_is_null(obj)    ? "null"
                                     : json_is_boolean(obj) ? "a boolean"
                                                            : "a number")
                     : pgd_error_set(PGD_EINVAL, "%s: %s (line %d column %d: %s)", param,
                                     k_args_msg, jerr.line, jerr.column, jerr.text);
        json_decref(obj);
        return rc;
    }
    int rc = pgd_api_json_dump_py(obj, args);
    json_decref(obj);
    if (rc) goto nomem;
    *len = args->len - before;
    return 0;
nomem:
    return pgd_error_set(PGD_ENOMEM, "out of memory reading tool calls");
}

/* The tool calls of assistant message i (`tc`, a non-empty array) into out[0..n), their
 * arguments appended to *args (the views' pointers are set by the caller, lengths here). */
static int parse_calls(const json_t *tc, size_t i, pgd_chat_tool_call *out, pgd_buf *args,
                       char *param, size_t cap) {
    for (size_t c = 0; c < json_array_size(tc); c++) {
        const json_t *call = json_array_get(tc, c);
        if (!json_is_object(call))
            return bad(param, cap, "messages[%zu].tool_calls[%zu]", i, c,
                       "each tool call must be an object");
        const json_t *id = json_object_get(call, "id"), *type = json_object_get(call, "type");
        const json_t *fn = json_object_get(call, "function");
        if (given(id) && !json_is_string(id))
            return bad(param, cap, "messages[%zu].tool_calls[%zu].id", i, c, "must be a string");
        if (given(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
            return bad(param, cap, "messages[%zu].tool_calls[%zu].type", i, c,
                       "must be \"function\" (the only type of tool call)");
        if (!json_is_object(fn))
            return bad(param, cap, "messages[%zu].tool_calls[%zu].function", i, c,
                       "must be an object with the function's \"name\" and \"arguments\"");
        const json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name) || json_string_length(name) == 0)
            return bad(param, cap, "messages[%zu].tool_calls[%zu].function.name", i, c,
                       "must be a non-empty string");
        out[c].name.ptr = json_string_value(name);
        out[c].name.len = json_string_length(name);
        size_t len = 0;
        int rc = parse_arguments(json_object_get(fn, "arguments"), i, c, args, &len, param, cap);
        if (rc) return rc;
        out[c].arguments.ptr = NULL; /* set once args is complete */
        out[c].arguments.len = len;
    }
    return 0;
}

/* The protocol's rules for message i (an object with a string role) beyond its content: the
 * legacy function calling is refused; tool_calls only on assistant messages, a tool_call_id a
 * string. Parses the calls into out->calls + *k. */
static int tools_of(const json_t *m, size_t i, pgd_messages *out, size_t *k, pgd_buf *args,
                    char *param, size_t cap) {
    const char *role = out->msgs[i].role;
    if (!strcmp(role, "function"))
        return bad(param, cap, "messages[%zu].role", i, 0,
                   "'function' messages (the legacy function calling) are not supported: give "
                   "a function's result as a \"tool\" message");
    if (calls(json_object_get(m, "function_call")))
        return bad(param, cap, "messages[%zu].function_call", i, 0,
                   "function_call (the legacy function calling) is not supported: give an "
                   "assistant's calls as \"tool_calls\"");
    const json_t *id = json_object_get(m, "tool_call_id");
    if (!strcmp(role, "tool") && given(id) && !json_is_string(id))
        return bad(param, cap, "messages[%zu].tool_call_id", i, 0, "must be a string");
    const json_t *tc = json_object_get(m, "tool_calls");
    if (!calls(tc)) return 0;
    if (!json_is_array(tc))
        return bad(param, cap, "messages[%zu].tool_calls", i, 0, "must be a list of tool calls");
    if (strcmp(role, "assistant") != 0)
        return bad(param, cap, "messages[%zu].tool_calls", i, 0,
                   "only assistant messages carry tool calls");
    int rc = parse_calls(tc, i, out->calls + *k, args, param, cap);
    if (rc) return rc;
    out->msgs[i].calls = out->calls + *k;
    out->msgs[i].n_calls = json_array_size(tc);
    *k += json_array_size(tc);
    return 0;
}

int pgd_messages_parse(const json_t *arr, pgd_messages *out, char *param, size_t param_cap) {
    memset(out, 0, sizeof *out);
    pgd_buf args = PGD_BUF_INIT;
    if (!json_is_array(arr)) {
        snprintf(param, param_cap, "messages");
        return pgd_error_set(PGD_EINVAL, "messages must be an array of message objects");
    }
    size_t n = json_array_size(arr), n_parts = 0, n_calls = 0;
    bool any_reasoning = false;
    if (n == 0) {
        snprintf(param, param_cap, "messages");
        return pgd_error_set(PGD_EINVAL, "messages must not be empty");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object_get(json_array_get(arr, i), "content");
        json_t *tc = json_object_get(json_array_get(arr, i), "tool_calls");
        n_parts += json_is_array(c) ? json_array_size(c) : 1;
        n_calls += json_is_array(tc) ? json_array_size(tc) : 0;
        any_reasoning |= given(json_object_get(json_array_get(arr, i), "reasoning_content"));
    }
    out->msgs = calloc(n, sizeof *out->msgs);
    out->parts = calloc(n_parts ? n_parts : 1, sizeof *out->parts);
    out->calls = n_calls ? calloc(n_calls, sizeof *out->calls) : NULL;
    out->reasoning = any_reasoning ? calloc(n, sizeof *out->reasoning) : NULL;
    int rc = PGD_ENOMEM;
    if (!out->msgs || !out->parts || (n_calls && !out->calls) ||
        (any_reasoning && !out->reasoning)) {
        snprintf(param, param_cap, "messages");
        rc = pgd_error_set(PGD_ENOMEM, "out of memory reading messages");
        goto fail;
    }
    size_t k = 0, kc = 0;
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
        if ((rc = tools_of(m, i, out, &kc, &args, param, param_cap))) goto fail;
        if (!strcmp(out->msgs[i].role, "developer")) out->msgs[i].role = "system";
        json_t *rs = json_object_get(m, "reasoning_content");
        if (given(rs) && !strcmp(out->msgs[i].role, "assistant")) {
            if (!json_is_string(rs)) {
                rc = bad(param, param_cap, "messages[%zu].reasoning_content", i, 0,
                         "must be a string (an assistant's reasoning)");
                goto fail;
            }
            out->reasoning[i].ptr = json_string_value(rs);
            out->reasoning[i].len = json_string_length(rs);
        }
        bool may_be_null =
            !strcmp(out->msgs[i].role, "assistant") || !strcmp(out->msgs[i].role, "tool");
        out->msgs[i].parts = out->parts + k;
        if (json_is_string(content)) {
            out->parts[k].ptr = json_string_value(content);
            out->parts[k++].len = json_string_length(content);
        } else if (!given(content) && may_be_null) {
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
    /* args is complete: point the calls' arguments into it */
    out->args = args.data;
    for (size_t c = 0, off = 0; c < kc; c++) {
        out->calls[c].arguments.ptr = out->args + off;
        off += (size_t)out->calls[c].arguments.len;
    }
    out->n = n;
    return 0;
fail:
    pgd_buf_free(&args);
    pgd_messages_free(out);
    return rc;
}

int pgd_messages_template_kwargs(const json_t *v, pgd_chat_render_opts *opts, char *param,
                                 size_t param_cap) {
    if (!given(v)) return 0;
    if (!json_is_object(v)) {
        snprintf(param, param_cap, "chat_template_kwargs");
        return pgd_error_set(PGD_EINVAL,
                             "'chat_template_kwargs' must be an object (the chat template's "
                             "variables, e.g. {\"enable_thinking\": false})");
    }
    const json_t *et = json_object_get(v, "enable_thinking");
    if (!given(et)) return 0;
    if (!json_is_boolean(et)) {
        snprintf(param, param_cap, "chat_template_kwargs.enable_thinking");
        return pgd_error_set(PGD_EINVAL,
                             "'chat_template_kwargs.enable_thinking' must be a boolean (true or "
                             "false)");
    }
    opts->enable_thinking = json_is_true(et);
    return 0;
}
