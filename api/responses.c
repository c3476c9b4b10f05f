/*
 * api/responses.c — POST /v1/responses: the body read into the chat request it asks for, and
 * the response object and its stream of events.
 *
 * Reading: the Responses fields are checked here (their own names in errors); those a chat
 * request has too are written into a chat body under the chat names and read by the chat
 * parser (api/request.c), whose errors are renamed back (pgd_api_resp_param). So both
 * endpoints take the same values, with the same defaults and limits.
 *
 * Building: a pgd_api_resp keeps every output item (its text, logprobs and calls), so the
 * stream's last event and the whole answer hold the same object.
 */
#include "api/responses.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonutil.h"
#include "common/error.h"
#include "engine/sampling/sampler.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if (x) goto fail;                                                                          \
    } while (0)

#define MAX_METADATA       16
#define MAX_METADATA_KEY   64
#define MAX_METADATA_VALUE 512

/* ---- reading --------------------------------------------------------------------------------- */

static int bad(pgd_api_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(pgd_api_error *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pgd_api_error_vset(e, 400, param, NULL, fmt, ap);
    va_end(ap);
    return PGD_EINVAL;
}

static bool is_str(const json_t *v, const char *s) {
    return json_is_string(v) && !strcmp(json_string_value(v), s);
}

/* What the reader builds: the chat body and, per chat message, its input item. */
typedef struct reader {
    json_t *root, *chat, *msgs;
    pgd_api_resp_src *map; /* [cap] */
    size_t cap;
    bool last_assistant; /* the last chat message is an assistant's that calls may join */
    bool input_string;   /* input is a string (one user message) */
    bool instructions;   /* the first chat message is the instructions */
    pgd_api_resp_lookup lookup;
    void *ud;
    const json_t *prev; /* previous_response_id's conversation (borrowed) */
    json_t *reasoning;  /* a reasoning item's text, for the assistant message that follows */
    pgd_api_error *e;
} reader;

/* The assistant message m (a new one) takes the reasoning item before it, as the
 * reasoning_content a chat template reads (Qwen3's renders it after the last query). */
static int take_reasoning(reader *rd, json_t *m) {
    if (!rd->reasoning) return 0;
    int rc = pgd__api_set(m, "reasoning_content", rd->reasoning);
    rd->reasoning = NULL;
    return rc ? pgd__api_oom(rd->e) : 0;
}

static int add_msg(reader *rd, json_t *m, size_t item, size_t first_call) {
    size_t n = json_array_size(rd->msgs);
    if (n == rd->cap) {
        size_t cap = rd->cap ? rd->cap * 2 : 8;
        pgd_api_resp_src *p = realloc(rd->map, cap * sizeof *p);
        if (!p) {
            json_decref(m);
            return pgd__api_oom(rd->e);
        }
        rd->map = p;
        rd->cap = cap;
    }
    if (json_array_append_new(rd->msgs, m)) return pgd__api_oom(rd->e);
    rd->map[n] = (pgd_api_resp_src){item, first_call};
    return 0;
}

/* The text parts of a content array as chat parts [{"type": "text", "text"}] (into *out, a new
 * array). Images, files and audio are refused by name. */
static int text_parts(reader *rd, const json_t *arr, const char *param, bool assistant,
                      json_t **out) {
    char p[128];
    *out = json_array();
    if (!*out) return pgd__api_oom(rd->e);
    for (size_t j = 0; j < json_array_size(arr); j++) {
        const json_t *part = json_array_get(arr, j);
        snprintf(p, sizeof p, "%s[%zu]", param, j);
        if (!json_is_object(part)) return bad(rd->e, p, "'%s' must be an object", p);
        const json_t *type = json_object_get(part, "type");
        const char *t = json_is_string(type) ? json_string_value(type) : NULL;
        snprintf(p, sizeof p, "%s[%zu].type", param, j);
        if (!t) return bad(rd->e, p, "'%s' must be a string", p);
        const char *key = "text";
        if (!strcmp(t, "refusal") && assistant)
            key = "refusal";
        else if (strcmp(t, "input_text") && strcmp(t, "output_text")) {
            if (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio"))
                return bad(rd->e, p, "'%s' '%.32s' is not supported: this server reads text", p, t);
            return bad(rd->e, p, "'%s' must be \"input_text\" or \"output_text\"%s, got \"%.32s\"",
                       p, assistant ? " (or \"refusal\")" : "", t);
        }
        const json_t *text = json_object_get(part, key);
        snprintf(p, sizeof p, "%s[%zu].%s", param, j, key);
        if (!json_is_string(text)) return bad(rd->e, p, "'%s' must be a string", p);
        json_t *cp = json_pack("{s:s,s:O}", "type", "text", "text", text);
        if (!cp || json_array_append_new(*out, cp)) return pgd__api_oom(rd->e);
    }
    return 0;
}

/* Content: a string, or an array of parts (param names it). A new reference in *out. */
static int content_of(reader *rd, const json_t *c, const char *param, bool assistant,
                      json_t **out) {
    *out = NULL;
    if (json_is_string(c)) {
        *out = json_incref((json_t *)c);
        return 0;
    }
    if (!json_is_array(c)) return bad(rd->e, param, "'%s' must be a string or an array", param);
    return text_parts(rd, c, param, assistant, out);
}

static int message_item(reader *rd, const json_t *it, size_t i) {
    char p[64];
    snprintf(p, sizeof p, "input[%zu].role", i);
    const json_t *role = json_object_get(it, "role");
    const char *r = json_is_string(role) ? json_string_value(role) : NULL;
    if (!r || (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") &&
               strcmp(r, "assistant")))
        return bad(rd->e, p, "'%s' must be \"user\", \"system\", \"developer\" or \"assistant\"",
                   p);
    bool assistant = !strcmp(r, "assistant");
    snprintf(p, sizeof p, "input[%zu].content", i);
    const json_t *c = json_object_get(it, "content");
    if (!c) return bad(rd->e, p, "'%s' is required", p);
    json_t *content = NULL;
    int rc = content_of(rd, c, p, assistant, &content);
    if (rc) {
        json_decref(content);
        return rc;
    }
    json_t *m = json_pack("{s:s,s:o}", "role", r, "content", content);
    if (!m) return pgd__api_oom(rd->e);
    rd->last_assistant = assistant;
    if (assistant && take_reasoning(rd, m)) {
        json_decref(m);
        return PGD_ENOMEM;
    }
    return add_msg(rd, m, i, SIZE_MAX);
}

/* A function_call item joins the last chat message when that is an assistant's (a message or
 * calls of the same turn); else it starts an assistant message without content. */
static int call_item(reader *rd, const json_t *it, size_t i) {
    static const char *const keys[] = {"call_id", "name", "arguments"};
    char p[64];
    for (size_t k = 0; k < PGD_ARRAY_LEN(keys); k++) {
        snprintf(p, sizeof p, "input[%zu].%s", i, keys[k]);
        const json_t *v = json_object_get(it, keys[k]);
        if (!v) return bad(rd->e, p, "'%s' is required", p);
        if (!json_is_string(v)) return bad(rd->e, p, "'%s' must be a string", p);
    }
    json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(it, "call_id"), "type",
                             "function", "function", "name", json_object_get(it, "name"),
                             "arguments", json_object_get(it, "arguments"));
    if (!call) return pgd__api_oom(rd->e);
    size_t n = json_array_size(rd->msgs);
    if (rd->last_assistant && n) {
        json_t *m = json_array_get(rd->msgs, n - 1), *calls = json_object_get(m, "tool_calls");
        if (!calls) {
            calls = json_array();
            if (pgd__api_set(m, "tool_calls", calls)) {
                json_decref(call);
                return pgd__api_oom(rd->e);
            }
            rd->map[n - 1].first_call = i;
        }
        return json_array_append_new(calls, call) ? pgd__api_oom(rd->e) : 0;
    }
    json_t *m = json_pack("{s:s,s:n,s:[o]}", "role", "assistant", "content", "tool_calls", call);
    if (!m) return pgd__api_oom(rd->e);
    rd->last_assistant = true;
    if (take_reasoning(rd, m)) {
        json_decref(m);
        return PGD_ENOMEM;
    }
    return add_msg(rd, m, i, i);
}

static int call_output_item(reader *rd, const json_t *it, size_t i) {
    char p[64];
    snprintf(p, sizeof p, "input[%zu].call_id", i);
    const json_t *id = json_object_get(it, "call_id");
    if (!id) return bad(rd->e, p, "'%s' is required", p);
    if (!json_is_string(id)) return bad(rd->e, p, "'%s' must be a string", p);
    snprintf(p, sizeof p, "input[%zu].output", i);
    const json_t *o = json_object_get(it, "output");
    if (!o) return bad(rd->e, p, "'%s' is required", p);
    json_t *content = NULL;
    int rc = content_of(rd, o, p, false, &content);
    if (rc) {
        json_decref(content);
        return rc;
    }
    json_t *m = json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", content);
    if (!m) return pgd__api_oom(rd->e);
    rd->last_assistant = false;
    return add_msg(rd, m, i, SIZE_MAX);
}

/* A reasoning item (an earlier answer's, given back): its reasoning_text parts joined, for the
 * assistant message that follows (none follows: dropped; a call after it does not join the
 * message before it); its summary and encrypted_content are not read. */
static int reasoning_item(reader *rd, const json_t *it, size_t i) {
    char p[64];
    snprintf(p, sizeof p, "input[%zu].content", i);
    const json_t *c = pgd__api_field(it, "content");
    if (c && !json_is_array(c)) return bad(rd->e, p, "'%s' must be an array", p);
    pgd_buf text = PGD_BUF_INIT;
    for (size_t j = 0; j < json_array_size(c); j++) {
        const json_t *part = json_array_get(c, j), *t = json_object_get(part, "text");
        snprintf(p, sizeof p, "input[%zu].content[%zu]", i, j);
        if (!is_str(json_object_get(part, "type"), "reasoning_text") || !json_is_string(t)) {
            pgd_buf_free(&text);
            return bad(rd->e, p, "'%s' must be {\"type\": \"reasoning_text\", \"text\": string}",
                       p);
        }
        if (pgd_buf_append(&text, json_string_value(t), json_string_length(t))) {
            pgd_buf_free(&text);
            return pgd__api_oom(rd->e);
        }
    }
    json_decref(rd->reasoning);
    rd->reasoning = pgd__api_jstr(text.data ? text.data : "", text.len);
    rd->last_assistant = false; /* a call after it starts a step (a message) of its own */
    pgd_buf_free(&text);
    return rd->reasoning ? 0 : pgd__api_oom(rd->e);
}

static int read_input(reader *rd, size_t *n_input) {
    const json_t *ins = pgd__api_field(rd->root, "instructions");
    if (ins && !json_is_string(ins))
        return bad(rd->e, "instructions", "'instructions' must be a string");
    if (ins) {
        json_t *m = json_pack("{s:s,s:O}", "role", "system", "content", ins);
        if (!m) return pgd__api_oom(rd->e);
        int rc = add_msg(rd, m, SIZE_MAX, SIZE_MAX);
        if (rc) return rc;
        rd->instructions = true;
    }
    for (size_t i = 0; rd->prev && i < json_array_size(rd->prev); i++) {
        /* a copy: a call of this input may join an assistant message */
        json_t *m = json_deep_copy(json_array_get(rd->prev, i));
        int rc = m ? add_msg(rd, m, PGD_API_RESP_PREVIOUS, SIZE_MAX) : pgd__api_oom(rd->e);
        if (rc) return rc;
    }
    const json_t *in = pgd__api_field(rd->root, "input");
    if (!in) return bad(rd->e, "input", "'input' is required");
    if (json_is_string(in)) {
        *n_input = 1;
        rd->input_string = true;
        json_t *m = json_pack("{s:s,s:O}", "role", "user", "content", in);
        return m ? add_msg(rd, m, 0, SIZE_MAX) : pgd__api_oom(rd->e);
    }
    if (!json_is_array(in)) return bad(rd->e, "input", "'input' must be a string or an array");
    if (!json_array_size(in)) return bad(rd->e, "input", "'input' must not be empty");
    *n_input = json_array_size(in);
    for (size_t i = 0; i < json_array_size(in); i++) {
        const json_t *it = json_array_get(in, i);
        char p[64];
        snprintf(p, sizeof p, "input[%zu]", i);
        if (!json_is_object(it)) return bad(rd->e, p, "'%s' must be an object", p);
        const json_t *type = pgd__api_field(it, "type");
        snprintf(p, sizeof p, "input[%zu].type", i);
        if (type && !json_is_string(type)) return bad(rd->e, p, "'%s' must be a string", p);
        const char *t = type ? json_string_value(type) : "message";
        int rc;
        if (strcmp(t, "reasoning") && strcmp(t, "function_call") &&
            !(!strcmp(t, "message") && is_str(json_object_get(it, "role"), "assistant"))) {
            json_decref(rd->reasoning); /* no assistant message follows it */
            rd->reasoning = NULL;
        }
        if (!strcmp(t, "message"))
            rc = message_item(rd, it, i);
        else if (!strcmp(t, "function_call"))
            rc = call_item(rd, it, i);
        else if (!strcmp(t, "function_call_output"))
            rc = call_output_item(rd, it, i);
        else if (!strcmp(t, "reasoning"))
            rc = reasoning_item(rd, it, i);
        else
            rc = bad(rd->e, p,
                     "input items of type '%.48s' are not supported (\"message\", "
                     "\"function_call\", \"function_call_output\" and \"reasoning\" are; "
                     "an item_reference is not: give the item itself, or previous_response_id)",
                     t);
        if (rc) return rc;
    }
    return 0;
}

/* Copies root[key] into the chat body as chat_key, when present. */
static int copy(reader *rd, const char *key, const char *chat_key) {
    json_t *v = json_object_get(rd->root, key);
    if (!v) return 0;
    return pgd__api_set(rd->chat, chat_key ? chat_key : key, json_incref(v)) ? pgd__api_oom(rd->e)
                                                                             : 0;
}

static int read_tools(reader *rd) {
    const json_t *tools = pgd__api_field(rd->root, "tools");
    if (tools && !json_is_array(tools)) return bad(rd->e, "tools", "'tools' must be an array");
    json_t *out = json_array();
    if (!out || pgd__api_set(rd->chat, "tools", out)) return pgd__api_oom(rd->e);
    static const char *const keys[] = {"name", "description", "parameters", "strict"};
    for (size_t i = 0; tools && i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t)) return bad(rd->e, p, "'%s' must be an object", p);
        const json_t *type = json_object_get(t, "type");
        snprintf(p, sizeof p, "tools[%zu].type", i);
        if (!is_str(type, "function"))
            return bad(rd->e, p,
                       "tools of type '%.48s' are not supported: this server runs function "
                       "tools ({\"type\": \"function\", \"name\", \"parameters\"})",
                       json_is_string(type) ? json_string_value(type) : "(none)");
        json_t *fn = json_object(), *ct = json_pack("{s:s}", "type", "function");
        if (!fn || !ct || pgd__api_set(ct, "function", fn) || json_array_append_new(out, ct)) {
            if (!ct) json_decref(fn);
            return pgd__api_oom(rd->e);
        }
        for (size_t k = 0; k < PGD_ARRAY_LEN(keys); k++) {
            json_t *v = json_object_get(t, keys[k]);
            if (v && pgd__api_set(fn, keys[k], json_incref(v))) return pgd__api_oom(rd->e);
        }
    }
    const json_t *tc = pgd__api_field(rd->root, "tool_choice");
    if (!tc || json_is_string(tc)) return copy(rd, "tool_choice", NULL);
    if (!json_is_object(tc))
        return bad(rd->e, "tool_choice", "'tool_choice' must be a string or an object");
    const json_t *type = json_object_get(tc, "type");
    if (!is_str(type, "function"))
        return bad(rd->e, "tool_choice.type",
                   "'tool_choice.type' must be \"function\" (with a \"name\"): this server runs "
                   "function tools only");
    json_t *fn = json_object(), *c = json_pack("{s:s}", "type", "function");
    if (!fn || !c || pgd__api_set(c, "function", fn) || pgd__api_set(rd->chat, "tool_choice", c)) {
        if (!c) json_decref(fn);
        return pgd__api_oom(rd->e);
    }
    json_t *name = json_object_get(tc, "name");
    return name && pgd__api_set(fn, "name", json_incref(name)) ? pgd__api_oom(rd->e) : 0;
}

static int read_text(reader *rd) {
    const json_t *text = pgd__api_field(rd->root, "text");
    if (!text) return 0;
    if (!json_is_object(text)) return bad(rd->e, "text", "'text' must be an object");
    const json_t *verb = pgd__api_field(text, "verbosity");
    if (verb && !is_str(verb, "medium"))
        return bad(rd->e, "text.verbosity",
                   "'text.verbosity' other than \"medium\" is not supported: this server does "
                   "not steer the length of answers");
    const json_t *f = pgd__api_field(text, "format");
    if (!f) return 0;
    if (!json_is_object(f)) return bad(rd->e, "text.format", "'text.format' must be an object");
    const json_t *type = json_object_get(f, "type");
    if (!type) return bad(rd->e, "text.format.type", "'text.format.type' is required");
    json_t *rf = NULL;
    if (is_str(type, "text") || is_str(type, "json_object")) {
        rf = json_pack("{s:O}", "type", type);
    } else if (is_str(type, "json_schema")) {
        static const char *const keys[] = {"name", "schema", "strict", "description"};
        json_t *js = json_object();
        rf = json_pack("{s:s}", "type", "json_schema");
        if (!js || !rf || pgd__api_set(rf, "json_schema", js)) {
            if (!rf) json_decref(js);
            json_decref(rf);
            return pgd__api_oom(rd->e);
        }
        for (size_t k = 0; k < PGD_ARRAY_LEN(keys); k++) {
            json_t *v = json_object_get(f, keys[k]);
            if (v && pgd__api_set(js, keys[k], json_incref(v))) {
                json_decref(rf);
                return pgd__api_oom(rd->e);
            }
        }
    } else {
        return bad(rd->e, "text.format.type",
                   "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
    return !rf || pgd__api_set(rd->chat, "response_format", rf) ? pgd__api_oom(rd->e) : 0;
}

/* include, top_logprobs: whether logprobs come back, and how many alternatives. */
static int read_logprobs(reader *rd, bool *logprobs) {
    static const char *const known[] = {"message.output_text.logprobs",
                                        "reasoning.encrypted_content",
                                        "file_search_call.results",
                                        "web_search_call.results",
                                        "web_search_call.action.sources",
                                        "message.input_image.image_url",
                                        "computer_call_output.output.image_url",
                                        "code_interpreter_call.outputs"};
    const json_t *inc = pgd__api_field(rd->root, "include");
    if (inc && !json_is_array(inc)) return bad(rd->e, "include", "'include' must be an array");
    *logprobs = false;
    for (size_t i = 0; inc && i < json_array_size(inc); i++) {
        const json_t *v = json_array_get(inc, i);
        char p[48];
        snprintf(p, sizeof p, "include[%zu]", i);
        size_t k = 0;
        while (k < PGD_ARRAY_LEN(known) && !is_str(v, known[k])) k++;
        if (k == PGD_ARRAY_LEN(known))
            return bad(rd->e, p,
                       "'%s' is not a known include value (this server returns "
                       "\"message.output_text.logprobs\"; the others name outputs it never "
                       "makes)",
                       p);
        *logprobs |= k == 0;
    }
    const json_t *top = pgd__api_field(rd->root, "top_logprobs");
    if (top && !(json_is_integer(top) && json_integer_value(top) >= 0 &&
                 json_integer_value(top) <= PGD_API_MAX_LOGPROBS))
        return bad(rd->e, "top_logprobs", "'top_logprobs' must be an integer from 0 to 20");
    if (!*logprobs) return 0;
    if (pgd__api_set(rd->chat, "logprobs", json_true())) return pgd__api_oom(rd->e);
    return top ? copy(rd, "top_logprobs", NULL) : 0;
}

/* What the response repeats but the chat request does not read, and what is refused. */
static int read_rest(reader *rd) {
    const json_t *root = rd->root;
    if (pgd__api_field(root, "conversation"))
        return bad(rd->e, "conversation",
                   "'conversation' is not supported: continue a response with "
                   "'previous_response_id', or send the whole conversation in 'input'");
    const json_t *prev = pgd__api_field(root, "previous_response_id");
    if (prev && !json_is_string(prev))
        return bad(rd->e, "previous_response_id", "'previous_response_id' must be a string");
    if (prev && !rd->lookup)
        return bad(rd->e, "previous_response_id",
                   "'previous_response_id' is not supported: this server keeps no responses "
                   "(--responses-store-mb 0); send the whole conversation in 'input'");
    if (prev && !(rd->prev = rd->lookup(rd->ud, json_string_value(prev))))
        return pgd_api_error_set(rd->e, 400, "previous_response_id", "previous_response_not_found",
                                 "Previous response with id '%.64s' not found (responses are "
                                 "kept in memory, the least recently used dropped first)",
                                 json_string_value(prev));
    const json_t *bg = pgd__api_field(root, "background");
    if (bg && !json_is_boolean(bg))
        return bad(rd->e, "background", "'background' must be a boolean");
    if (json_is_true(bg))
        return bad(rd->e, "background",
                   "'background' responses are not supported: this server answers while the "
                   "request is open (stream it to see the output as it comes)");
    if (pgd__api_field(root, "prompt"))
        return bad(rd->e, "prompt", "'prompt' (a stored prompt template) is not supported");
    const json_t *tr = pgd__api_field(root, "truncation");
    if (tr && !is_str(tr, "disabled"))
        return bad(rd->e, "truncation",
                   "'truncation' must be \"disabled\": this server does not drop input to fit "
                   "the context (an input that does not fit is a 400)");
    const json_t *rs = pgd__api_field(root, "reasoning");
    if (rs && !json_is_object(rs)) return bad(rd->e, "reasoning", "'reasoning' must be an object");
    static const char *const rkeys[] = {"effort", "summary", "generate_summary"};
    for (size_t i = 0; rs && i < PGD_ARRAY_LEN(rkeys); i++)
        if (pgd__api_field(rs, rkeys[i])) {
            char p[40];
            snprintf(p, sizeof p, "reasoning.%s", rkeys[i]);
            return bad(rd->e, p,
                       "'%s' is not supported: this server does not steer reasoning (a thinking "
                       "model's reasoning comes back as a reasoning item; "
                       "chat_template_kwargs {\"enable_thinking\": false} turns Qwen3's off)",
                       p);
        }
    const json_t *store = pgd__api_field(root, "store");
    if (store && !json_is_boolean(store)) return bad(rd->e, "store", "'store' must be a boolean");
    static const char *const strs[] = {"safety_identifier", "prompt_cache_key", "service_tier"};
    for (size_t i = 0; i < PGD_ARRAY_LEN(strs); i++) {
        const json_t *v = pgd__api_field(root, strs[i]);
        if (v && !json_is_string(v)) return bad(rd->e, strs[i], "'%s' must be a string", strs[i]);
    }
    const json_t *mtc = pgd__api_field(root, "max_tool_calls");
    if (mtc && !(json_is_integer(mtc) && json_integer_value(mtc) >= 0))
        return bad(rd->e, "max_tool_calls", "'max_tool_calls' must be an integer >= 0");
    const json_t *md = pgd__api_field(root, "metadata");
    if (md && !json_is_object(md)) return bad(rd->e, "metadata", "'metadata' must be an object");
    if (md && json_object_size(md) > MAX_METADATA)
        return bad(rd->e, "metadata", "'metadata' holds at most %d keys", MAX_METADATA);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)md, k, v) {
        if (pgd_api_utf8_chars(k, strlen(k)) > MAX_METADATA_KEY)
            return bad(rd->e, "metadata", "'metadata' keys are at most %d characters",
                       MAX_METADATA_KEY);
        if (!json_is_string(v) ||
            pgd_api_utf8_chars(json_string_value(v), json_string_length(v)) > MAX_METADATA_VALUE)
            return bad(rd->e, "metadata",
                       "'metadata' values must be strings of at most %d characters",
                       MAX_METADATA_VALUE);
    }
    return 0;
}

/* The response's request fields, in output order (values as given, or their defaults). */
static json_t *make_echo(const json_t *root, const pgd_api_request *chat, bool store) {
    json_t *o = json_object();
    if (!o) return NULL;
    const json_t *v;
#define ECHO(key, dflt)                                                                            \
    TRY(pgd__api_set(o, key, (v = pgd__api_field(root, key)) ? json_incref((json_t *)v) : (dflt)))
    ECHO("instructions", json_null());
    ECHO("max_output_tokens", json_null());
    ECHO("max_tool_calls", json_null());
    ECHO("parallel_tool_calls", json_true());
    ECHO("previous_response_id", json_null());
    TRY(pgd__api_set(o, "reasoning", json_pack("{s:n,s:n}", "effort", "summary")));
    if ((v = pgd__api_field(root, "service_tier")))
        TRY(pgd__api_set(o, "service_tier", json_incref((json_t *)v)));
    TRY(pgd__api_set(o, "store", json_boolean(store)));
    TRY(pgd__api_set(o, "temperature", pgd__api_jfloat(chat->temperature, 0.0)));
    const json_t *text = pgd__api_field(root, "text");
    const json_t *fmt = text ? pgd__api_field(text, "format") : NULL;
    json_t *f = fmt ? json_incref((json_t *)fmt) : json_pack("{s:s}", "type", "text");
    TRY(pgd__api_set(o, "text",
                     f ? json_pack("{s:o,s:s}", "format", f, "verbosity", "medium") : NULL));
    ECHO("tool_choice", json_string("auto"));
    ECHO("tools", json_array());
    ECHO("top_logprobs", json_integer(0));
    TRY(pgd__api_set(o, "top_p", pgd__api_jfloat(chat->top_p, 0.0)));
    TRY(pgd__api_set(o, "truncation", json_string("disabled")));
    ECHO("user", json_null());
    ECHO("metadata", json_object());
    ECHO("safety_identifier", json_null());
    ECHO("prompt_cache_key", json_null());
#undef ECHO
    return o;
fail:
    json_decref(o);
    return NULL;
}

void pgd_api_resp_request_free(pgd_api_resp_request *r) {
    if (!r) return;
    pgd_api_request_free(&r->chat);
    json_decref(r->echo);
    json_decref(r->history);
    free(r->msg_src);
    memset(r, 0, sizeof *r);
}

int pgd_api_resp_request_parse(const char *body, size_t len, pgd_api_resp_request *out,
                               pgd_api_error *err) {
    return pgd_api_resp_request_parse_stored(body, len, NULL, NULL, out, err);
}

void pgd_api_resp_request_no_store(pgd_api_resp_request *r) {
    r->store = false;
    if (r->echo) json_object_set_new(r->echo, "store", json_false());
}

int pgd_api_resp_request_parse_stored(const char *body, size_t len, pgd_api_resp_lookup lookup,
                                      void *ud, pgd_api_resp_request *out, pgd_api_error *err) {
    memset(out, 0, sizeof *out);
    reader rd = {.e = err, .lookup = lookup, .ud = ud};
    int rc = pgd__api_load_object(body, len, &rd.root, err);
    if (rc) return rc;
    rd.chat = json_object();
    rd.msgs = json_array();
    if (!rd.chat || !rd.msgs || pgd__api_set(rd.chat, "messages", rd.msgs)) {
        if (!rd.chat) json_decref(rd.msgs); /* else the chat body took it */
        rc = pgd__api_oom(err);
        goto done;
    }
    static const char *const same[] = {"model",
                                       "temperature",
                                       "top_p",
                                       "stream",
                                       "user",
                                       "parallel_tool_calls",
                                       "seed",
                                       "top_k",
                                       "min_p",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "repetition_penalty",
                                       "stop",
                                       "stop_token_ids",
                                       "min_tokens",
                                       "include_stop_str_in_output",
                                       "logit_bias",
                                       "ignore_eos",
                                       "priority",
                                       "cache_salt",
                                       "chat_template_kwargs"};
    if ((rc = read_rest(&rd)) || (rc = read_input(&rd, &out->n_input))) goto done;
    for (size_t i = 0; i < PGD_ARRAY_LEN(same) && !rc; i++) rc = copy(&rd, same[i], NULL);
    if (!rc) rc = copy(&rd, "max_output_tokens", "max_completion_tokens");
    if (!rc) rc = read_tools(&rd);
    if (!rc) rc = read_text(&rd);
    if (!rc) rc = read_logprobs(&rd, &out->logprobs);
    if (rc) goto done;
    out->input_string = rd.input_string;
    out->msg_src = rd.map;
    out->n_msgs = json_array_size(rd.msgs);
    rd.map = NULL;
    rc = pgd_api_request_parse_json(PGD_API_CHAT, json_incref(rd.chat), &out->chat, err);
    if (rc) {
        pgd_api_resp_error(out, err);
        goto done;
    }
    const json_t *store = pgd__api_field(rd.root, "store");
    out->store = !json_is_false(store);
    out->history = json_array();
    for (size_t i = rd.instructions; out->history && i < json_array_size(rd.msgs); i++)
        if (json_array_append(out->history, json_array_get(rd.msgs, i))) {
            rc = pgd__api_oom(err);
            goto done;
        }
    out->echo = make_echo(rd.root, &out->chat, out->store);
    if (!out->history) rc = pgd__api_oom(err);
    if (!out->echo) rc = pgd__api_oom(err);
done:
    free(rd.map);
    json_decref(rd.chat);
    json_decref(rd.reasoning);
    json_decref(rd.root);
    if (rc) pgd_api_resp_request_free(out);
    return rc;
}

const char *pgd_api_resp_param(const pgd_api_resp_request *r, const char *param, char *out,
                               size_t cap) {
    if (!param) return NULL;
    static const struct {
        const char *chat, *resp;
    } prefixes[] = {
        {"max_completion_tokens", "max_output_tokens"},
        {"max_tokens", "max_output_tokens"},
        {"response_format.json_schema.", "text.format."},
        {"response_format.json_schema", "text.format"},
        {"response_format", "text.format"},
        {"tool_choice.function.", "tool_choice."},
        {"tool_choice.function", "tool_choice"},
        {"logprobs", "include"},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(prefixes); i++) {
        size_t n = strlen(prefixes[i].chat);
        if (!strncmp(param, prefixes[i].chat, n)) {
            snprintf(out, cap, "%s%s", prefixes[i].resp, param + n);
            return out;
        }
    }
    size_t k;
    int used = 0;
    if (sscanf(param, "tools[%zu]%n", &k, &used) == 1 && used > 0) {
        const char *rest = param + used;
        if (!strncmp(rest, ".function", 9)) rest += 9;
        snprintf(out, cap, "tools[%zu]%s", k, rest);
        return out;
    }
    if (!strncmp(param, "messages", 8)) {
        /* messages[k] is input item src.item (or the instructions); its tool_calls[j] is item
         * src.first_call + j (calls join a message only from the items that follow it) */
        size_t j;
        used = 0;
        int used2 = 0;
        snprintf(out, cap, "input");
        if (sscanf(param, "messages[%zu]%n", &k, &used) < 1 || !used || k >= r->n_msgs) return out;
        const pgd_api_resp_src *src = &r->msg_src[k];
        const char *rest = param + used;
        if (src->item == SIZE_MAX)
            snprintf(out, cap, "instructions");
        else if (src->item == PGD_API_RESP_PREVIOUS)
            snprintf(out, cap, "previous_response_id");
        else if (src->first_call != SIZE_MAX &&
                 sscanf(rest, ".tool_calls[%zu]%n", &j, &used2) == 1 && used2 > 0)
            snprintf(out, cap, "input[%zu]%s", src->first_call + j,
                     !strncmp(rest + used2, ".function", 9) ? rest + used2 + 9 : rest + used2);
        else if (!r->input_string)
            snprintf(out, cap, "input[%zu]%s", src->item,
                     !strncmp(rest, ".content", 8) ? ".content" : "");
        return out;
    }
    snprintf(out, cap, "%s", param);
    return out;
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '[' || c == ']';
}

/* Whether a chat parameter's name starts at s (s[-1] is not part of a name). */
static bool chat_name_at(const char *s) {
    static const char *const starts[] = {"messages[",       "max_completion_tokens", "max_tokens",
                                         "response_format", "tool_choice.function",  "tools["};
    for (size_t i = 0; i < PGD_ARRAY_LEN(starts); i++)
        if (!strncmp(s, starts[i], strlen(starts[i]))) return true;
    return false;
}

void pgd_api_resp_error(const pgd_api_resp_request *r, pgd_api_error *e) {
    char name[sizeof e->param], mapped[sizeof e->param], msg[sizeof e->message];
    if (e->param[0]) {
        pgd_api_resp_param(r, e->param, mapped, sizeof mapped);
        snprintf(e->param, sizeof e->param, "%s", mapped);
    }
    size_t o = 0;
    for (const char *s = e->message; *s && o + 1 < sizeof msg;) {
        size_t n = 0;
        if ((s == e->message || !name_char(s[-1])) && chat_name_at(s)) {
            while (name_char(s[n]) && n + 1 < sizeof name) n++;
            while (n && s[n - 1] == '.') n--; /* a sentence's full stop */
        }
        if (!n) {
            msg[o++] = *s++;
            continue;
        }
        memcpy(name, s, n);
        name[n] = '\0';
        pgd_api_resp_param(r, name, mapped, sizeof mapped);
        o += (size_t)snprintf(msg + o, sizeof msg - o, "%s", mapped);
        if (o >= sizeof msg) o = sizeof msg - 1;
        s += n;
    }
    msg[o] = '\0';
    snprintf(e->message, sizeof e->message, "%s", msg);
}

/* ---- building ----------------------------------------------------------------------------------
 */

typedef enum { ITEM_MESSAGE, ITEM_CALL, ITEM_REASONING } item_kind;

typedef struct item {
    item_kind kind;
    char id[PGD_API_ID_CAP];
    const char *status; /* "in_progress" until closed; then "completed" or "incomplete" */
    pgd_buf text;       /* message, reasoning: its text; call: its arguments */
    json_t *logprobs;   /* message: [entries] */
    char call_id[PGD_API_TOOL_ID_CAP];
    char *name; /* call */
} item;

struct pgd_api_resp {
    char id[PGD_API_ID_CAP];
    int64_t created;
    json_t *model;
    json_t *echo; /* a reference */
    bool stream, logprobs;
    item *items;
    size_t n, cap;
    bool open; /* the last item is a message or a reasoning item still written to */
    int64_t seq;
    const char *end_status; /* once ended: "completed" or "incomplete" */
    pgd_api_usage usage;    /* once ended */
};

static void new_id(char out[PGD_API_ID_CAP], const char *prefix) {
    pgd_api_format_id(out, prefix, pgd_sampler_random_seed(), pgd_sampler_random_seed());
}

int pgd_api_resp_new(const pgd_api_meta *m, const pgd_api_resp_request *req, bool stream,
                     pgd_api_resp **out) {
    pgd_api_resp *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r) return PGD_ENOMEM;
    snprintf(r->id, sizeof r->id, "%s", m->id ? m->id : "");
    r->created = m->created;
    r->model = pgd__api_jstr(m->model.ptr ? m->model.ptr : "", m->model.len);
    r->echo = json_incref(req->echo);
    r->stream = stream;
    r->logprobs = req->logprobs;
    if (!r->model || !r->echo) {
        pgd_api_resp_free(r);
        return PGD_ENOMEM;
    }
    *out = r;
    return 0;
}

void pgd_api_resp_free(pgd_api_resp *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        pgd_buf_free(&r->items[i].text);
        json_decref(r->items[i].logprobs);
        free(r->items[i].name);
    }
    free(r->items);
    json_decref(r->model);
    json_decref(r->echo);
    free(r);
}

static json_t *jbuf(const pgd_buf *b) {
    return pgd__api_jstr(b->data ? b->data : "", b->len);
}

/* {type: "output_text", text, annotations: [], logprobs} — empty text and logprobs when !full;
 * a reasoning item's {type: "reasoning_text", text} */
static json_t *part_obj(const item *it, bool full) {
    if (it->kind == ITEM_REASONING)
        return json_pack("{s:s,s:o}", "type", "reasoning_text", "text",
                         full ? jbuf(&it->text) : json_string(""));
    json_t *p = json_pack("{s:s}", "type", "output_text");
    if (!p) return NULL;
    TRY(pgd__api_set(p, "text", full ? jbuf(&it->text) : json_string("")));
    TRY(pgd__api_set(p, "annotations", json_array()));
    TRY(pgd__api_set(p, "logprobs", full ? json_copy(it->logprobs) : json_array()));
    return p;
fail:
    json_decref(p);
    return NULL;
}

/* An output item; `status` its status. A message's content is [] and a call's arguments ""
 * while in progress (as their "added" events show them). */
static json_t *item_obj(const item *it, const char *status) {
    bool done = strcmp(status, "in_progress") != 0;
    json_t *o = json_object();
    if (!o) return NULL;
    static const char *const types[] = {"message", "function_call", "reasoning"};
    TRY(pgd__api_set(o, "id", json_string(it->id)));
    TRY(pgd__api_set(o, "type", json_string(types[it->kind])));
    if (it->kind == ITEM_REASONING) { /* its text, as content; no summary is written */
        TRY(pgd__api_set(o, "summary", json_array()));
        json_t *content = json_array();
        TRY(pgd__api_set(o, "content", content));
        if (done) TRY(json_array_append_new(content, part_obj(it, true)));
        TRY(pgd__api_set(o, "status", json_string(status)));
        return o;
    }
    TRY(pgd__api_set(o, "status", json_string(status)));
    if (it->kind == ITEM_MESSAGE) {
        TRY(pgd__api_set(o, "role", json_string("assistant")));
        json_t *content = json_array();
        TRY(pgd__api_set(o, "content", content));
        if (done) TRY(json_array_append_new(content, part_obj(it, true)));
    } else {
        TRY(pgd__api_set(o, "arguments", done ? jbuf(&it->text) : json_string("")));
        TRY(pgd__api_set(o, "call_id", json_string(it->call_id)));
        TRY(pgd__api_set(o, "name", pgd__api_jstr(it->name, strlen(it->name))));
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

static json_t *usage_obj(const pgd_api_usage *u) {
    if (!u) return json_null();
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)u->prompt_tokens,
                     "input_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens,
                     "output_tokens", (json_int_t)u->completion_tokens, "output_tokens_details",
                     "reasoning_tokens", (json_int_t)u->reasoning_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

/* The response object. status: "in_progress", "completed", "incomplete" or "failed"; err: the
 * failure (failed only); u: NULL before the end. */
static json_t *response_obj(const pgd_api_resp *r, const char *status, const pgd_api_error *err,
                            const pgd_api_usage *u) {
    static const char *const first[] = {"instructions", "max_output_tokens", "max_tool_calls"};
    static const char *const last[] = {"parallel_tool_calls",
                                       "previous_response_id",
                                       "reasoning",
                                       "service_tier",
                                       "store",
                                       "temperature",
                                       "text",
                                       "tool_choice",
                                       "tools",
                                       "top_logprobs",
                                       "top_p",
                                       "truncation",
                                       "usage",
                                       "user",
                                       "metadata",
                                       "safety_identifier",
                                       "prompt_cache_key"};
    json_t *o = json_object(), *output = NULL;
    if (!o) return NULL;
    TRY(pgd__api_set(o, "id", json_string(r->id)));
    TRY(pgd__api_set(o, "object", json_string("response")));
    TRY(pgd__api_set(o, "created_at", json_integer(r->created)));
    TRY(pgd__api_set(o, "status", json_string(status)));
    TRY(pgd__api_set(o, "background", json_false()));
    TRY(pgd__api_set(o, "error",
                     err ? json_pack("{s:s,s:s}", "code", err->code[0] ? err->code : "server_error",
                                     "message", err->message)
                         : json_null()));
    TRY(pgd__api_set(o, "incomplete_details",
                     !strcmp(status, "incomplete")
                         ? json_pack("{s:s}", "reason", "max_output_tokens")
                         : json_null()));
    for (size_t i = 0; i < PGD_ARRAY_LEN(first); i++)
        TRY(pgd__api_set(o, first[i], json_incref(json_object_get(r->echo, first[i]))));
    TRY(pgd__api_set(o, "model", json_incref(r->model)));
    output = json_array();
    TRY(pgd__api_set(o, "output", output));
    for (size_t i = 0; i < r->n; i++)
        TRY(json_array_append_new(output, item_obj(&r->items[i], r->items[i].status)));
    for (size_t i = 0; i < PGD_ARRAY_LEN(last); i++) {
        json_t *v = !strcmp(last[i], "usage") ? usage_obj(u)
                                              : json_incref(json_object_get(r->echo, last[i]));
        if (!v && !strcmp(last[i], "service_tier")) continue; /* only when given */
        TRY(pgd__api_set(o, last[i], v));
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

/* Appends the event "event: <type>\ndata: <o + sequence_number>\n\n" (steals o). */
static int emit(pgd_api_resp *r, pgd_buf *sse, json_t *o) {
    if (!o) return PGD_ENOMEM;
    int rc = PGD_ENOMEM;
    pgd_buf b = PGD_BUF_INIT;
    size_t mark = sse->len;
    if (pgd__api_set(o, "sequence_number", json_integer(r->seq))) goto out;
    if (pgd__api_dump(o, &b)) goto out;
    if (pgd_buf_printf(sse, "event: %s\ndata: ", json_string_value(json_object_get(o, "type"))) ||
        pgd_buf_append(sse, b.data, b.len) || pgd_buf_append(sse, "\n\n", 2)) {
        sse->len = mark;
        goto out;
    }
    r->seq++;
    rc = 0;
out:
    pgd_buf_free(&b);
    json_decref(o);
    return rc;
}

/* {type, <key>: <value>} for the events below (steals value). */
static json_t *event(const char *type) {
    return json_pack("{s:s}", "type", type);
}

static json_t *with(json_t *o, const char *key, json_t *v) {
    if (o && pgd__api_set(o, key, v)) {
        json_decref(o);
        return NULL;
    }
    if (!o) json_decref(v);
    return o;
}

/* {type, item_id, output_index[, content_index]} */
static json_t *item_event(const char *type, const pgd_api_resp *r, size_t idx, bool content) {
    json_t *o = with(event(type), "item_id", json_string(r->items[idx].id));
    o = with(o, "output_index", json_integer((json_int_t)idx));
    return content ? with(o, "content_index", json_integer(0)) : o;
}

static item *add_item(pgd_api_resp *r, item_kind kind) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4;
        item *p = realloc(r->items, cap * sizeof *p);
        if (!p) return NULL;
        r->items = p;
        r->cap = cap;
    }
    item *it = &r->items[r->n];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    it->status = "in_progress";
    new_id(it->id, kind == ITEM_MESSAGE ? "msg_" : kind == ITEM_CALL ? "fc_" : "rs_");
    if (kind == ITEM_MESSAGE && !(it->logprobs = json_array())) return NULL;
    r->n++;
    return it;
}

static int close_message(pgd_api_resp *r, const char *status, pgd_buf *sse);

/* The open item of `kind` (a message or a reasoning item): the last one when it is still open,
 * else a new one (an open item of the other kind closed first). */
static int open_item(pgd_api_resp *r, item_kind kind, pgd_buf *sse) {
    if (r->open && r->items[r->n - 1].kind == kind) return 0;
    int rc = close_message(r, "completed", sse);
    if (rc) return rc;
    if (!add_item(r, kind)) return PGD_ENOMEM;
    r->open = true;
    if (!r->stream) return 0;
    size_t idx = r->n - 1;
    json_t *o =
        with(event("response.output_item.added"), "output_index", json_integer((json_int_t)idx));
    rc = emit(r, sse, with(o, "item", item_obj(&r->items[idx], "in_progress")));
    if (rc) return rc;
    return emit(r, sse,
                with(item_event("response.content_part.added", r, idx, true), "part",
                     part_obj(&r->items[idx], false)));
}

static int open_message(pgd_api_resp *r, pgd_buf *sse) {
    return open_item(r, ITEM_MESSAGE, sse);
}

/* The open item closed (a message, or a reasoning item, which always completes). */
static int close_message(pgd_api_resp *r, const char *status, pgd_buf *sse) {
    if (!r->open) return 0;
    size_t idx = r->n - 1;
    item *it = &r->items[idx];
    bool reasoning = it->kind == ITEM_REASONING;
    if (reasoning) status = "completed"; /* an answer cut short in its reasoning: the message */
    r->open = false;
    it->status = status;
    if (!r->stream) return 0;
    json_t *o =
        with(item_event(reasoning ? "response.reasoning_text.done" : "response.output_text.done", r,
                        idx, true),
             "text", jbuf(&it->text));
    int rc = emit(r, sse, reasoning ? o : with(o, "logprobs", json_copy(it->logprobs)));
    if (!rc)
        rc = emit(r, sse,
                  with(item_event("response.content_part.done", r, idx, true), "part",
                       part_obj(it, true)));
    if (!rc) {
        o = with(event("response.output_item.done"), "output_index", json_integer((json_int_t)idx));
        rc = emit(r, sse, with(o, "item", item_obj(it, status)));
    }
    return rc;
}

int pgd_api_resp_begin(pgd_api_resp *r, pgd_buf *sse) {
    int rc = emit(
        r, sse,
        with(event("response.created"), "response", response_obj(r, "in_progress", NULL, NULL)));
    if (!rc)
        rc = emit(r, sse,
                  with(event("response.in_progress"), "response",
                       response_obj(r, "in_progress", NULL, NULL)));
    return rc;
}

int pgd_api_resp_text(pgd_api_resp *r, pgd_str text, const pgd_api_token_logprob *lp, size_t n_lp,
                      pgd_buf *sse) {
    if (!r->logprobs) n_lp = 0;
    if (!text.len && !n_lp) return 0;
    int rc = open_message(r, sse);
    if (rc) return rc;
    size_t idx = r->n - 1;
    item *it = &r->items[idx];
    json_t *entries = pgd__api_logprob_entries(lp, n_lp);
    if (!entries || pgd_buf_append(&it->text, text.ptr, text.len) ||
        json_array_extend(it->logprobs, entries)) {
        json_decref(entries);
        return PGD_ENOMEM;
    }
    if (!r->stream) {
        json_decref(entries);
        return 0;
    }
    json_t *o = with(item_event("response.output_text.delta", r, idx, true), "delta",
                     pgd__api_jstr(text.ptr ? text.ptr : "", text.len));
    return emit(r, sse, with(o, "logprobs", entries));
}

int pgd_api_resp_reasoning(pgd_api_resp *r, pgd_str text, pgd_buf *sse) {
    if (!text.len) return 0;
    int rc = open_item(r, ITEM_REASONING, sse);
    if (rc) return rc;
    size_t idx = r->n - 1;
    if (pgd_buf_append(&r->items[idx].text, text.ptr, text.len)) return PGD_ENOMEM;
    if (!r->stream) return 0;
    return emit(r, sse,
                with(item_event("response.reasoning_text.delta", r, idx, true), "delta",
                     pgd__api_jstr(text.ptr, text.len)));
}

/* The last item when it is a call still open (its arguments may grow), else NULL. */
static item *open_call(pgd_api_resp *r) {
    item *it = r->n ? &r->items[r->n - 1] : NULL;
    return it && it->kind == ITEM_CALL && !strcmp(it->status, "in_progress") ? it : NULL;
}

int pgd_api_resp_call_begin(pgd_api_resp *r, const pgd_api_tool_call *call, pgd_buf *sse) {
    int rc = close_message(r, "completed", sse);
    if (rc) return rc;
    item *it = add_item(r, ITEM_CALL);
    if (!it) return PGD_ENOMEM;
    snprintf(it->call_id, sizeof it->call_id, "%s", call->id);
    it->name = strndup(call->name.ptr ? call->name.ptr : "", call->name.len);
    if (!it->name) return PGD_ENOMEM;
    if (r->stream) {
        json_t *o = with(event("response.output_item.added"), "output_index",
                         json_integer((json_int_t)(r->n - 1)));
        if ((rc = emit(r, sse, with(o, "item", item_obj(it, "in_progress"))))) return rc;
    }
    return pgd_api_resp_call_args(r, call->arguments, sse);
}

int pgd_api_resp_call_args(pgd_api_resp *r, pgd_str args, pgd_buf *sse) {
    item *it = open_call(r);
    if (!it) return PGD_EINVAL;
    if (!args.len) return 0;
    if (pgd_buf_append(&it->text, args.ptr, args.len)) return PGD_ENOMEM;
    if (!r->stream) return 0;
    return emit(r, sse,
                with(item_event("response.function_call_arguments.delta", r, r->n - 1, false),
                     "delta", pgd__api_jstr(args.ptr, args.len)));
}

int pgd_api_resp_call_done(pgd_api_resp *r, bool cut, pgd_buf *sse) {
    item *it = open_call(r);
    if (!it) return PGD_EINVAL;
    it->status = cut ? "incomplete" : "completed";
    if (!r->stream) return 0;
    size_t idx = r->n - 1;
    json_t *o = with(item_event("response.function_call_arguments.done", r, idx, false), "name",
                     pgd__api_jstr(it->name, strlen(it->name)));
    int rc = emit(r, sse, with(o, "arguments", jbuf(&it->text)));
    if (rc) return rc;
    o = with(event("response.output_item.done"), "output_index", json_integer((json_int_t)idx));
    return emit(r, sse, with(o, "item", item_obj(it, it->status)));
}

int pgd_api_resp_calls(pgd_api_resp *r, const pgd_api_tool_call *calls, size_t n, pgd_buf *sse) {
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        rc = pgd_api_resp_call_begin(r, &calls[k], sse);
        if (!rc) rc = pgd_api_resp_call_done(r, calls[k].cut, sse);
    }
    return rc;
}

int pgd_api_resp_end(pgd_api_resp *r, pgd_finish finish, const pgd_api_usage *u, pgd_buf *out) {
    const char *status = finish == PGD_FINISH_LENGTH ? "incomplete" : "completed";
    bool answer = false; /* a message or a call */
    for (size_t i = 0; i < r->n; i++) answer |= r->items[i].kind != ITEM_REASONING;
    int rc = 0;
    /* an answer cut short in its reasoning is that reasoning alone */
    if (!answer && (!r->n || finish != PGD_FINISH_LENGTH)) rc = open_message(r, out);
    if (!rc) rc = close_message(r, status, out);
    if (rc) return rc;
    r->end_status = status;
    r->usage = *u;
    json_t *resp = response_obj(r, status, NULL, u);
    if (!r->stream) {
        rc = resp ? pgd__api_dump(resp, out) : PGD_ENOMEM;
        json_decref(resp);
        return rc;
    }
    const char *type = finish == PGD_FINISH_LENGTH ? "response.incomplete" : "response.completed";
    return emit(r, out, with(event(type), "response", resp));
}

int pgd_api_resp_fail(pgd_api_resp *r, const pgd_api_error *e, pgd_buf *sse) {
    if (r->open || open_call(r)) { /* the failed response shows the text written so far */
        r->open = false;
        r->items[r->n - 1].status = "incomplete";
    }
    json_t *o = with(event("error"), "code", json_string(e->code[0] ? e->code : "server_error"));
    o = with(o, "message", pgd__api_jstr(e->message, strlen(e->message)));
    o = with(o, "param", e->param[0] ? json_string(e->param) : json_null());
    int rc = emit(r, sse, o);
    if (!rc)
        rc = emit(r, sse,
                  with(event("response.failed"), "response", response_obj(r, "failed", e, NULL)));
    return rc;
}

int pgd_api_resp_object(const pgd_api_resp *r, pgd_buf *out) {
    if (!r->end_status) return PGD_EINVAL;
    json_t *resp = response_obj(r, r->end_status, NULL, &r->usage);
    int rc = resp ? pgd__api_dump(resp, out) : PGD_ENOMEM;
    json_decref(resp);
    return rc;
}

int pgd_api_resp_conversation(const pgd_api_resp *r, const pgd_api_resp_request *req,
                              json_t **out) {
    json_t *conv = json_copy(req->history), *calls = json_array();
    pgd_buf text = PGD_BUF_INIT, thought = PGD_BUF_INIT;
    bool said = false, reasoned = false; /* a message / reasoning item, even an empty one */
    *out = NULL;
    if (!conv || !calls) goto fail;
    for (size_t i = 0; i < r->n; i++) {
        const item *it = &r->items[i];
        if (it->kind != ITEM_CALL) {
            bool msg = it->kind == ITEM_MESSAGE;
            said |= msg;
            reasoned |= !msg;
            if (pgd_buf_append(msg ? &text : &thought, it->text.data ? it->text.data : "",
                               it->text.len))
                goto fail;
            continue;
        }
        json_t *c = json_pack("{s:s,s:s,s:{s:o,s:o}}", "id", it->call_id, "type", "function",
                              "function", "name", pgd__api_jstr(it->name, strlen(it->name)),
                              "arguments", jbuf(&it->text));
        if (!c || json_array_append_new(calls, c)) goto fail;
    }
    /* as the chat request of these output items given back as input would hold them */
    json_t *m =
        json_pack("{s:s,s:o}", "role", "assistant", "content", said ? jbuf(&text) : json_null());
    if (!m || json_array_append_new(conv, m)) goto fail;
    if (json_array_size(calls) && pgd__api_set(m, "tool_calls", json_incref(calls))) goto fail;
    if (reasoned && pgd__api_set(m, "reasoning_content", jbuf(&thought))) goto fail;
    json_decref(calls);
    pgd_buf_free(&text);
    pgd_buf_free(&thought);
    *out = conv;
    return 0;
fail:
    json_decref(conv);
    json_decref(calls);
    pgd_buf_free(&text);
    pgd_buf_free(&thought);
    return PGD_ENOMEM;
}
