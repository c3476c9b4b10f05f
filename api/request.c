/*
 * api/request.c — JSON bodies -> pgd_api_request / tokenize / detokenize requests, validated.
 *
 * Every check names the OpenAI parameter (param) and the allowed values (message). Fields are
 * checked in a fixed order, so a body with one bad field always reports that field.
 */
#include "api/request.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_schema.h"
#include "api/jsonutil.h"
#include "common/error.h"

/* ---- small readers ------------------------------------------------------------------------ */

static const char *jtype(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

static int type_err(pgd_api_error *e, const char *param, const char *want, const json_t *v) {
    return pgd_api_error_set(e, 400, param, NULL, "'%s' must be %s, got %s", param, want, jtype(v));
}

static int bad(pgd_api_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(pgd_api_error *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = pgd_api_error_vset(e, 400, param, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

enum { INT_OK = 0, INT_TYPE = 1, INT_RANGE = 2 };

/* A JSON integer, or a real with no fraction, as int64. */
static int as_int(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return INT_OK;
    }
    if (!json_is_real(v)) return INT_TYPE;
    double d = json_real_value(v);
    if (d != floor(d)) return INT_TYPE;
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return INT_RANGE;
    *out = (int64_t)d;
    return INT_OK;
}

/* Optional integer in [lo, hi]. 0 with *present set (and *out) or not; PGD_EINVAL. */
static int get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, const char *allowed,
                   bool *present, int64_t *out, pgd_api_error *e) {
    *present = false;
    json_t *v = pgd__api_field(o, key);
    if (!v) return 0;
    int64_t x = 0;
    int k = as_int(v, &x);
    if (k == INT_TYPE) return type_err(e, key, "an integer", v);
    if (k == INT_RANGE || x < lo || x > hi) {
        if (k == INT_RANGE)
            return bad(e, key, "'%s' must be %s, got %.17g", key, allowed, json_real_value(v));
        return bad(e, key, "'%s' must be %s, got %" PRId64, key, allowed, x);
    }
    *present = true;
    *out = x;
    return 0;
}

/* Optional number (integer or real). 0 (with *present), or PGD_EINVAL for another type. */
static int get_num(const json_t *o, const char *key, bool *present, double *out, pgd_api_error *e) {
    *present = false;
    json_t *v = pgd__api_field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) return type_err(e, key, "a number", v);
    *present = true;
    *out = json_number_value(v);
    return 0;
}

/* Optional number within [lo, hi] (closed interval), stored as a float. */
static int get_float(const json_t *o, const char *key, double lo, double hi, const char *allowed,
                     float *out, pgd_api_error *e) {
    bool present;
    double d = 0;
    int rc = get_num(o, key, &present, &d, e);
    if (rc || !present) return rc;
    if (!(d >= lo && d <= hi)) return bad(e, key, "'%s' must be %s, got %.10g", key, allowed, d);
    *out = (float)d;
    return 0;
}

static int get_bool(const json_t *o, const char *key, bool *out, pgd_api_error *e) {
    json_t *v = pgd__api_field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return type_err(e, key, "a boolean (true or false)", v);
    *out = json_is_true(v);
    return 0;
}

static int get_str(const json_t *o, const char *key, pgd_str *out, pgd_api_error *e) {
    json_t *v = pgd__api_field(o, key);
    if (!v) return 0;
    if (!json_is_string(v)) return type_err(e, key, "a string", v);
    out->ptr = json_string_value(v);
    out->len = json_string_length(v);
    return 0;
}

int pgd__api_load_object(const char *body, size_t len, json_t **out, pgd_api_error *e) {
    *out = NULL;
    if (!body || len == 0) return bad(e, NULL, "The request body is empty; send a JSON object");
    if (!pgd_api_utf8_valid(body, len)) return bad(e, NULL, "The request body is not valid UTF-8");
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    /* jansson reports some allocation failures as such, some with no text, and some as
     * syntax errors (2.14): the last cannot be told apart and give a 400 */
    if (!root && (json_error_code(&je) == json_error_out_of_memory || je.text[0] == '\0'))
        return pgd__api_oom(e);
    if (!root)
        return bad(e, NULL, "The request body is not valid JSON: %s (line %d, column %d)", je.text,
                   je.line, je.column);
    if (!json_is_object(root)) {
        int rc = bad(e, NULL, "The request body must be a JSON object, got %s", jtype(root));
        json_decref(root);
        return rc;
    }
    *out = root;
    return 0;
}

/* Token id: an integer in [0, INT32_MAX]. */
static int token_id(const json_t *v, int32_t *out) {
    int64_t x;
    if (as_int(v, &x) != INT_OK || x < 0 || x > INT32_MAX) return -1;
    *out = (int32_t)x;
    return 0;
}

static int token_err(pgd_api_error *e, const char *param, const json_t *v) {
    if (json_is_number(v))
        return bad(e, param, "'%s' must be a token id (an integer from 0 to %d), got %.17g", param,
                   INT32_MAX, json_number_value(v));
    return type_err(e, param, "a token id (an integer)", v);
}

/* ---- prompt (completions) ----------------------------------------------------------------- */

/* "prompt" (completions) or "input" (embeddings): one or more prompts, text or token ids. */
static int parse_prompt(const json_t *root, const char *key, pgd_api_request *r, pgd_api_error *e) {
    char param[64];
    json_t *v = pgd__api_field(root, key);
    if (!v) return bad(e, key, "'%s' is required", key);
    if (json_is_string(v)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return pgd__api_oom(e);
        r->prompts[0].text.ptr = json_string_value(v);
        r->prompts[0].text.len = json_string_length(v);
        r->n_prompts = 1;
        return 0;
    }
    if (!json_is_array(v))
        return type_err(e, key,
                        "a string, an array of strings, an array of token ids or an array of "
                        "arrays of token ids",
                        v);
    size_t n = json_array_size(v);
    if (n == 0) return bad(e, key, "'%s' must not be an empty array", key);
    json_t *first = json_array_get(v, 0);
    size_t n_ids = 0, n_prompts = 0;
    enum { STRINGS, IDS, LISTS } shape;
    if (json_is_string(first)) {
        shape = STRINGS;
        n_prompts = n;
    } else if (json_is_number(first)) {
        shape = IDS;
        n_prompts = 1;
        n_ids = n;
    } else if (json_is_array(first)) {
        shape = LISTS;
        n_prompts = n;
    } else {
        {
            snprintf(param, sizeof param, "%s[0]", key);
            return type_err(e, param, "a string, a token id or an array of token ids", first);
        }
    }
    /* validate the shape and count ids */
    for (size_t i = 0; i < n; i++) {
        json_t *el = json_array_get(v, i);
        int32_t id;
        snprintf(param, sizeof param, "%s[%zu]", key, i);
        if (shape == STRINGS) {
            if (!json_is_string(el))
                return type_err(e, param, "a string (like the list's first element)", el);
        } else if (shape == IDS) {
            if (token_id(el, &id)) return token_err(e, param, el);
        } else {
            if (!json_is_array(el))
                return type_err(e, param, "an array of token ids (like the list's first element)",
                                el);
            size_t m = json_array_size(el);
            if (m == 0) return bad(e, param, "'%s' must not be an empty array of token ids", param);
            for (size_t j = 0; j < m; j++) {
                json_t *t = json_array_get(el, j);
                if (token_id(t, &id)) {
                    snprintf(param, sizeof param, "%s[%zu][%zu]", key, i, j);
                    return token_err(e, param, t);
                }
            }
            n_ids += m;
        }
    }
    r->prompts = calloc(n_prompts, sizeof *r->prompts);
    if (n_ids) r->prompt_ids = malloc(n_ids * sizeof *r->prompt_ids);
    if (!r->prompts || (n_ids && !r->prompt_ids)) return pgd__api_oom(e);
    r->n_prompts = n_prompts;
    size_t k = 0;
    if (shape == STRINGS) {
        for (size_t i = 0; i < n; i++) {
            json_t *el = json_array_get(v, i);
            r->prompts[i].text.ptr = json_string_value(el);
            r->prompts[i].text.len = json_string_length(el);
        }
    } else if (shape == IDS) {
        for (size_t i = 0; i < n; i++) token_id(json_array_get(v, i), &r->prompt_ids[k++]);
        r->prompts[0] = (pgd_api_prompt){true, {NULL, 0}, r->prompt_ids, n};
    } else {
        for (size_t i = 0; i < n; i++) {
            json_t *el = json_array_get(v, i);
            size_t m = json_array_size(el);
            r->prompts[i] = (pgd_api_prompt){true, {NULL, 0}, r->prompt_ids + k, m};
            for (size_t j = 0; j < m; j++) token_id(json_array_get(el, j), &r->prompt_ids[k++]);
        }
    }
    return 0;
}

/* ---- stop, logit_bias, stream_options ------------------------------------------------------ */

static int stop_one(const json_t *s, pgd_str *out, size_t i, pgd_api_error *e) {
    if (!json_is_string(s)) return type_err(e, "stop", "a string or an array of strings", s);
    size_t len = json_string_length(s);
    if (len == 0) return bad(e, "stop", "'stop' strings must not be empty (stop[%zu] is)", i);
    if (len > PGD_STOP_MAX_LEN)
        return bad(e, "stop", "'stop' strings must be at most %d bytes (stop[%zu] has %zu)",
                   PGD_STOP_MAX_LEN, i, len);
    out->ptr = json_string_value(s);
    out->len = len;
    return 0;
}

static int parse_stop(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    json_t *v = pgd__api_field(root, "stop");
    if (!v) return 0;
    if (json_is_string(v)) {
        int rc = stop_one(v, &r->stop[0], 0, e);
        if (!rc) r->n_stop = 1;
        return rc;
    }
    if (!json_is_array(v)) return type_err(e, "stop", "a string or an array of strings", v);
    size_t n = json_array_size(v);
    if (n > PGD_API_MAX_STOP)
        return bad(e, "stop", "'stop' may hold at most %d strings, got %zu", PGD_API_MAX_STOP, n);
    for (size_t i = 0; i < n; i++) {
        int rc = stop_one(json_array_get(v, i), &r->stop[i], i, e);
        if (rc) return rc;
    }
    r->n_stop = (int)n;
    return 0;
}

/* vLLM's stop_token_ids: token ids that end a choice as its EOS does (their text not emitted);
 * the vocabulary's bound is checked by the scheduler (scheduler/request.c). */
static int parse_stop_ids(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    json_t *v = pgd__api_field(root, "stop_token_ids");
    if (!v) return 0;
    if (!json_is_array(v)) return type_err(e, "stop_token_ids", "an array of token ids", v);
    size_t n = json_array_size(v);
    if (n > PGD_FINISH_MAX_EOS)
        return bad(e, "stop_token_ids", "'stop_token_ids' may hold at most %d ids, got %zu",
                   PGD_FINISH_MAX_EOS, n);
    for (size_t i = 0; i < n; i++) {
        int64_t x = 0;
        if (as_int(json_array_get(v, i), &x) != INT_OK || x < 0 || x > INT32_MAX)
            return bad(
                e, "stop_token_ids",
                "'stop_token_ids' must hold token ids (integers from 0), stop_token_ids[%zu] "
                "is not one",
                i);
        r->stop_ids[i] = (int32_t)x;
    }
    r->n_stop_ids = (int)n;
    return 0;
}

/* "0", "42", "128000": digits, no sign, no leading zero, fits int32. */
static int canonical_id(const char *key, int32_t *out) {
    size_t n = strlen(key);
    if (n == 0 || n > 10 || (n > 1 && key[0] == '0')) return -1;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (key[i] < '0' || key[i] > '9') return -1;
        x = x * 10 + (key[i] - '0');
    }
    if (x > INT32_MAX) return -1;
    *out = (int32_t)x;
    return 0;
}

static int parse_logit_bias(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    json_t *v = pgd__api_field(root, "logit_bias");
    if (!v) return 0;
    if (!json_is_object(v))
        return type_err(e, "logit_bias", "an object mapping token ids to numbers", v);
    size_t n = json_object_size(v);
    if (n == 0) return 0;
    r->logit_bias = calloc(n, sizeof *r->logit_bias);
    if (!r->logit_bias) return pgd__api_oom(e);
    const char *key;
    json_t *val;
    size_t k = 0;
    json_object_foreach(v, key, val) {
        int32_t id;
        if (canonical_id(key, &id))
            return bad(e, "logit_bias",
                       "'logit_bias' keys must be token ids (decimal integers from 0 to %d), got "
                       "'%.40s'",
                       INT32_MAX, key);
        if (!json_is_number(val))
            return bad(e, "logit_bias", "'logit_bias' values must be numbers, got %s for '%s'",
                       jtype(val), key);
        double d = json_number_value(val);
        if (!(d >= -100.0 && d <= 100.0))
            return bad(e, "logit_bias",
                       "'logit_bias' values must be between -100 and 100, got %.10g for '%s'", d,
                       key);
        r->logit_bias[k].token = id;
        r->logit_bias[k].bias = (float)d;
        k++;
    }
    r->n_logit_bias = k;
    return 0;
}

static int parse_stream(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    int rc = get_bool(root, "stream", &r->stream, e);
    if (rc) return rc;
    json_t *so = pgd__api_field(root, "stream_options");
    if (!so) return 0;
    if (!json_is_object(so)) return type_err(e, "stream_options", "an object", so);
    json_t *iu = pgd__api_field(so, "include_usage");
    if (iu && !json_is_boolean(iu))
        return type_err(e, "stream_options.include_usage", "a boolean (true or false)", iu);
    if (!r->stream)
        return bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    r->include_usage = iu && json_is_true(iu);
    return 0;
}

/* ---- the request --------------------------------------------------------------------------- */

static int parse_logprobs(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    bool present;
    int64_t x = 0;
    int rc;
    if (r->kind == PGD_API_COMPLETION) {
        /* legacy: logprobs is the number of top alternatives; 0 = the chosen token only */
        rc = get_int(root, "logprobs", 0, PGD_API_MAX_LOGPROBS, "an integer from 0 to 20", &present,
                     &x, e);
        if (rc) return rc;
        r->logprobs = present;
        r->top_logprobs = (int)x;
        return 0;
    }
    rc = get_bool(root, "logprobs", &r->logprobs, e);
    if (rc) return rc;
    rc = get_int(root, "top_logprobs", 0, PGD_API_MAX_LOGPROBS, "an integer from 0 to 20", &present,
                 &x, e);
    if (rc) return rc;
    if (present && !r->logprobs)
        return bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r->top_logprobs = (int)x;
    return 0;
}

/* vLLM's prompt_logprobs (both kinds), once stream is known. */
static int parse_prompt_logprobs(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    bool present;
    int64_t x = 0;
    int rc = get_int(root, "prompt_logprobs", 0, PGD_API_MAX_LOGPROBS, "an integer from 0 to 20",
                     &present, &x, e);
    if (rc) return rc;
    if (present && r->stream)
        return bad(e, "prompt_logprobs",
                   "'prompt_logprobs' is not available with 'stream' (the whole answer carries "
                   "them)");
    r->prompt_logprobs = present ? (int32_t)x : -1;
    return 0;
}

/* response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict",
 * "description"}}: the schema compiled (api/json_schema.h) into r->json. The output follows it
 * whether or not "strict" is set. */
static int response_schema(const json_t *rf, pgd_api_request *r, pgd_api_error *e) {
    const json_t *js = json_object_get(rf, "json_schema");
    if (!js)
        return bad(e, "response_format.json_schema", "'response_format.json_schema' is required");
    if (!json_is_object(js)) return type_err(e, "response_format.json_schema", "an object", js);
    const json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    if (name && !json_is_string(name))
        return type_err(e, "response_format.json_schema.name", "a string", name);
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return type_err(e, "response_format.json_schema.strict", "a boolean", strict);
    const json_t *schema = json_object_get(js, "schema");
    if (!schema)
        return bad(e, "response_format.json_schema.schema",
                   "'response_format.json_schema.schema' is required");
    char msg[448];
    int rc = pgd_api_json_schema_compile(schema, &r->json, msg, sizeof msg);
    if (rc == PGD_ENOMEM) return pgd_api_error_set(e, 500, NULL, NULL, "%s", msg);
    if (rc) return bad(e, "response_format.json_schema.schema", "response_format schema: %s", msg);
    return 0;
}

/* OpenAI fields asking for what this server does not do — insert before a suffix, return the
 * best of several completions, the legacy function calling, tools on completions — are refused
 * by name instead of ignored: ignoring them would answer a different question than the one
 * asked. Their "off" values pass (clients send them by default): no or an empty tools /
 * functions list, function_call "none" or "auto", response_format {"type": "text"}, an empty
 * suffix, best_of equal to n. Chat tools go to api/tools.h; response_format json_object (JSON
 * mode) and json_schema (structured output) set r->json, as does a tool_choice that forces a
 * call (the two cannot go together). Runs after n is parsed. */
static int refuse_unsupported(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    static const char *const lists[] = {"tools", "functions"};
    for (size_t i = 0; i < PGD_ARRAY_LEN(lists); i++) {
        json_t *v = pgd__api_field(root, lists[i]);
        if (v && !json_is_array(v)) return type_err(e, lists[i], "an array", v);
        if (i == 0 && r->kind == PGD_API_CHAT) continue; /* api/tools.h */
        if (v && json_array_size(v))
            return bad(e, lists[i],
                       i == 0 ? "'tools' are for chat completions (/v1/chat/completions)"
                              : "'functions' (the legacy function calling) is not supported: "
                                "send 'tools' instead");
    }
    json_t *fc = pgd__api_field(root, "function_call");
    if (fc && !json_is_string(fc) && !json_is_object(fc))
        return type_err(e, "function_call", "a string or an object", fc);
    const char *fs = json_is_string(fc) ? json_string_value(fc) : NULL;
    if (fc && !(fs && (!strcmp(fs, "none") || !strcmp(fs, "auto"))))
        return bad(e, "function_call",
                   "'function_call' (the legacy function calling) is not supported: send "
                   "'tools' and 'tool_choice' instead");
    const pgd_json_schema *forced = NULL;
    if (r->kind == PGD_API_CHAT) {
        int rc = pgd_api_tools_parse(root, &r->tools, &forced, e);
        if (rc) return rc;
    } else {
        json_t *tc = pgd__api_field(root, "tool_choice");
        if (tc && !(json_is_string(tc) && (!strcmp(json_string_value(tc), "none") ||
                                           !strcmp(json_string_value(tc), "auto"))))
            return bad(e, "tool_choice", "'tool_choice' is for chat completions");
    }
    r->json = forced;
    int rc = 0;
    json_t *rf = pgd__api_field(root, "response_format");
    if (rf) {
        if (!json_is_object(rf)) return type_err(e, "response_format", "an object", rf);
        json_t *t = json_object_get(rf, "type");
        if (!t) return bad(e, "response_format.type", "'response_format.type' is required");
        if (!json_is_string(t)) return type_err(e, "response_format.type", "a string", t);
        const char *type = json_string_value(t);
        if (forced && (!strcmp(type, "json_object") || !strcmp(type, "json_schema")))
            return bad(e, "response_format",
                       "a JSON response_format cannot go with a tool_choice that forces a tool "
                       "call (the call's arguments follow the tool's parameters)");
        if (!strcmp(type, "json_object"))
            r->json = pgd_json_schema_object();
        else if (!strcmp(type, "json_schema"))
            rc = response_schema(rf, r, e);
        else if (strcmp(type, "text") != 0)
            return bad(e, "response_format",
                       "response_format of type '%.64s' is not supported (\"text\", "
                       "\"json_object\" or \"json_schema\")",
                       type);
        if (rc) return rc;
    }
    pgd_str suffix = {0};
    if ((rc = get_str(root, "suffix", &suffix, e))) return rc;
    if (suffix.len)
        return bad(e, "suffix",
                   "'suffix' is not supported: this server does not insert text "
                   "(send none, or an empty string)");
    bool present;
    int64_t best_of = 0;
    if ((rc = get_int(root, "best_of", 1, PGD_API_MAX_N, "an integer from 1 to 16", &present,
                      &best_of, e)))
        return rc;
    if (present && best_of != r->n)
        return bad(e, "best_of",
                   "'best_of' %" PRId64 " is not supported: this server returns every completion "
                   "it generates (best_of must equal n, %d)",
                   best_of, r->n);
    return 0;
}

/* POST /v1/embeddings (api/embeddings.h). */
static int parse_embedding(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    int rc;
    bool present;
    int64_t x;
    if ((rc = parse_prompt(root, "input", r, e))) return rc;
    if (r->n_prompts > PGD_API_MAX_INPUTS)
        return bad(e, "input", "'input' holds %zu inputs; at most %d are allowed", r->n_prompts,
                   PGD_API_MAX_INPUTS);
    pgd_str fmt = {NULL, 0};
    if ((rc = get_str(root, "encoding_format", &fmt, e))) return rc;
    if (fmt.ptr && !pgd_str_eq(fmt, "float") && !pgd_str_eq(fmt, "base64"))
        return bad(e, "encoding_format",
                   "'encoding_format' must be 'float' or 'base64', got '%.*s'",
                   (int)(fmt.len > 64 ? 64 : fmt.len), fmt.ptr);
    r->base64 = fmt.ptr && pgd_str_eq(fmt, "base64");
    if ((rc = get_int(root, "dimensions", 1, INT32_MAX, "an integer >= 1", &present, &x, e)))
        return rc;
    r->dimensions = present ? x : 0;
    if ((rc = get_str(root, "user", &r->user, e))) return rc;
    if ((rc = get_int(root, "priority", INT32_MIN, INT32_MAX, "a 32-bit signed integer", &present,
                      &x, e)))
        return rc;
    if (present) r->priority = (int32_t)x;
    return 0;
}

static int parse_fields(const json_t *root, pgd_api_request *r, pgd_api_error *e) {
    int rc;
    bool present;
    int64_t x;

    if ((rc = get_str(root, "model", &r->model, e))) return rc;
    if (r->kind == PGD_API_EMBEDDING) return parse_embedding(root, r, e);

    if (r->kind == PGD_API_CHAT) {
        json_t *m = json_object_get(root, "messages");
        if (!m || json_is_null(m)) return bad(e, "messages", "'messages' is required");
        char param[128] = "messages";
        rc = pgd_messages_parse(m, &r->messages, param, sizeof param);
        if (rc == PGD_ENOMEM) return pgd__api_oom(e);
        if (rc) return bad(e, param, "%s", pgd_error_detail());
        pgd_chat_render_opts opts = PGD_CHAT_RENDER_OPTS_DEFAULT;
        if (pgd_messages_template_kwargs(pgd__api_field(root, "chat_template_kwargs"), &opts, param,
                                         sizeof param))
            return bad(e, param, "%s", pgd_error_detail());
        r->enable_thinking = opts.enable_thinking;
    } else {
        if ((rc = parse_prompt(root, "prompt", r, e))) return rc;
    }

    bool p_kind = r->kind == PGD_API_COMPLETION; /* 0 asks for the prompt alone (with echo) */
    if ((rc = get_int(root, "max_tokens", p_kind ? 0 : 1, INT64_MAX,
                      p_kind ? "an integer >= 0 (0 only with echo)" : "an integer >= 1", &present,
                      &x, e)))
        return rc;
    if (present) r->max_tokens = x;
    r->prompt_only = present && x == 0;
    if ((rc = get_int(root, "max_completion_tokens", 1, INT64_MAX, "an integer >= 1", &present, &x,
                      e)))
        return rc;
    if (present) {
        r->max_tokens = x;
        r->prompt_only = false;
    }

    if ((rc = get_float(root, "temperature", 0.0, 2.0, "a number between 0 and 2", &r->temperature,
                        e)))
        return rc;
    bool has_top_p;
    double top_p = 1.0;
    if ((rc = get_num(root, "top_p", &has_top_p, &top_p, e))) return rc;
    if (has_top_p && !(top_p > 0.0 && top_p <= 1.0))
        return bad(e, "top_p",
                   "'top_p' must be a number in (0, 1] (greater than 0, at most 1), "
                   "got %.10g",
                   top_p);
    r->top_p = (float)top_p;
    if (r->top_p <= 0.0f) r->top_p = FLT_MIN; /* below float's range: still only the top token */
    if ((rc = get_int(root, "top_k", -1, INT32_MAX, "an integer >= -1 (-1 or 0: no limit)",
                      &present, &x, e)))
        return rc;
    if (present) r->top_k = (int32_t)x;
    if ((rc = get_float(root, "min_p", 0.0, 1.0, "a number between 0 and 1", &r->min_p, e)))
        return rc;
    if ((rc = get_float(root, "presence_penalty", -2.0, 2.0, "a number between -2 and 2",
                        &r->presence_penalty, e)))
        return rc;
    if ((rc = get_float(root, "frequency_penalty", -2.0, 2.0, "a number between -2 and 2",
                        &r->frequency_penalty, e)))
        return rc;
    bool has_rep;
    double rep = 1.0;
    if ((rc = get_num(root, "repetition_penalty", &has_rep, &rep, e))) return rc;
    if (has_rep && !(rep >= FLT_MIN && rep <= 3.4e38)) /* what a float holds, 0 excluded */
        return bad(e, "repetition_penalty",
                   "'repetition_penalty' must be a number greater than 0 (1: off) and within "
                   "1.2e-38 .. 3.4e38, got %.10g",
                   rep);
    r->repetition_penalty = (float)rep;

    if ((rc = get_int(root, "seed", INT64_MIN, INT64_MAX, "a 64-bit signed integer", &present, &x,
                      e)))
        return rc;
    r->has_seed = present;
    r->seed = present ? x : 0;

    if ((rc = parse_stop(root, r, e))) return rc;
    if ((rc = parse_stop_ids(root, r, e))) return rc;
    if ((rc = get_bool(root, "include_stop_str_in_output", &r->include_stop, e))) return rc;

    if ((rc = get_int(root, "n", 1, PGD_API_MAX_N, "an integer from 1 to 16", &present, &x, e)))
        return rc;
    if (present) r->n = (int)x;

    if ((rc = refuse_unsupported(root, r, e))) return rc;

    if ((rc = parse_logprobs(root, r, e))) return rc;
    if ((rc = parse_logit_bias(root, r, e))) return rc;
    if ((rc = parse_stream(root, r, e))) return rc;
    if ((rc = parse_prompt_logprobs(root, r, e))) return rc;
    if ((rc = get_str(root, "user", &r->user, e))) return rc;
    if ((rc = get_str(root, "cache_salt", &r->cache_salt, e))) return rc;
    if (r->cache_salt.ptr && r->cache_salt.len == 0)
        return pgd_api_error_set(e, 400, "cache_salt", NULL, "cache_salt must not be empty");
    if ((rc = get_bool(root, "ignore_eos", &r->ignore_eos, e))) return rc;
    if ((rc = get_int(root, "min_tokens", 0, INT32_MAX, "an integer from 0", &present, &x, e)))
        return rc;
    r->min_tokens = present ? x : 0;
    if (r->min_tokens && r->max_tokens > 0 && r->min_tokens > r->max_tokens)
        return bad(e, "min_tokens",
                   "'min_tokens' (%" PRId64 ") must not exceed max_tokens (%" PRId64 ")",
                   r->min_tokens, r->max_tokens);
    if (r->min_tokens && r->json) /* once the document closes, only the end may follow */
        return bad(e, "min_tokens",
                   "'min_tokens' cannot go with a JSON response_format or a forced tool call");
    if (r->ignore_eos && r->json) /* once the document closes, only the end may follow */
        return bad(e, "ignore_eos", "'ignore_eos' cannot go with a JSON response_format");
    if ((rc = get_int(root, "priority", INT32_MIN, INT32_MAX, "a 32-bit signed integer", &present,
                      &x, e)))
        return rc;
    if (present) r->priority = (int32_t)x;
    if (r->kind == PGD_API_COMPLETION && (rc = get_bool(root, "echo", &r->echo, e))) return rc;
    if (r->prompt_only && !r->echo)
        return bad(e, "max_tokens",
                   "'max_tokens' is 0, which asks for no completion: only with 'echo' true (the "
                   "prompt alone, with its logprobs when 'logprobs' is given)");
    return 0;
}

void pgd_api_request_free(pgd_api_request *r) {
    if (!r) return;
    pgd_messages_free(&r->messages);
    pgd_api_tools_free(&r->tools);
    free(r->prompts);
    free(r->prompt_ids);
    free(r->logit_bias);
    pgd_json_schema_unref(r->json);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

static void request_defaults(pgd_api_request *r, pgd_api_kind kind) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->repetition_penalty = 1.0f;
    r->n = 1;
    r->prompt_logprobs = -1;
    r->enable_thinking = true;
}

int pgd_api_request_parse(pgd_api_kind kind, const char *body, size_t len, pgd_api_request *out,
                          pgd_api_error *err) {
    json_t *root;
    request_defaults(out, kind);
    int rc = pgd__api_load_object(body, len, &root, err);
    return rc ? rc : pgd_api_request_parse_json(kind, root, out, err);
}

int pgd_api_request_parse_json(pgd_api_kind kind, json_t *root, pgd_api_request *out,
                               pgd_api_error *err) {
    request_defaults(out, kind);
    out->root = root;
    int rc = parse_fields(out->root, out, err);
    if (rc) {
        pgd_api_request_free(out);
        request_defaults(out, kind);
    }
    return rc;
}

size_t pgd_api_request_n_choices(const pgd_api_request *r) {
    size_t per = r->n > 0 ? (size_t)r->n : 1;
    return r->kind == PGD_API_CHAT ? per : r->n_prompts * per;
}

void pgd_api_request_seq_params(const pgd_api_request *r, uint32_t choice, uint64_t random_seed,
                                pgd_seq_params *out) {
    pgd_seq_params_default(out);
    pgd_sampling_params *s = &out->sampling;
    s->temperature = r->temperature;
    s->top_k = r->top_k;
    s->top_p = r->top_p;
    s->min_p = r->min_p;
    s->repetition_penalty = r->repetition_penalty;
    s->presence_penalty = r->presence_penalty;
    s->frequency_penalty = r->frequency_penalty;
    s->logit_bias = r->logit_bias;
    s->n_logit_bias = r->n_logit_bias;
    s->seed = r->has_seed ? (uint64_t)r->seed + choice : random_seed;
    s->logprobs = r->logprobs;
    s->top_logprobs = r->logprobs ? r->top_logprobs : 0;
    out->max_tokens = r->max_tokens;
    out->ignore_eos = r->ignore_eos;
    out->json = r->json;
    out->stop = r->n_stop ? r->stop : NULL;
    out->n_stop = r->n_stop;
    out->stop_ids = r->n_stop_ids ? r->stop_ids : NULL;
    out->n_stop_ids = r->n_stop_ids;
    out->min_tokens = r->min_tokens;
    out->include_stop = r->include_stop;
}

/* ---- /tokenize, /detokenize ---------------------------------------------------------------- */

void pgd_api_tokenize_free(pgd_api_tokenize_request *r) {
    if (!r) return;
    pgd_messages_free(&r->messages);
    pgd_api_tools_free(&r->tools);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

static int tokenize_fields(const json_t *root, pgd_api_tokenize_request *r, pgd_api_error *e) {
    int rc;
    if ((rc = get_str(root, "model", &r->model, e))) return rc;
    json_t *prompt = pgd__api_field(root, "prompt"), *msgs = pgd__api_field(root, "messages");
    if (prompt && msgs) return bad(e, "messages", "Give either 'prompt' or 'messages', not both");
    if (!prompt && !msgs) return bad(e, "prompt", "'prompt' or 'messages' is required");
    if (prompt) {
        if ((rc = get_str(root, "prompt", &r->prompt, e))) return rc;
        r->add_special_tokens = true;
    } else {
        char param[128] = "messages";
        r->chat = true;
        r->add_generation_prompt = true;
        rc = pgd_messages_parse(msgs, &r->messages, param, sizeof param);
        if (rc == PGD_ENOMEM) return pgd__api_oom(e);
        if (rc) return bad(e, param, "%s", pgd_error_detail());
        if ((rc = get_bool(root, "add_generation_prompt", &r->add_generation_prompt, e))) return rc;
        pgd_chat_render_opts opts = PGD_CHAT_RENDER_OPTS_DEFAULT;
        if (pgd_messages_template_kwargs(pgd__api_field(root, "chat_template_kwargs"), &opts, param,
                                         sizeof param))
            return bad(e, param, "%s", pgd_error_detail());
        r->enable_thinking = opts.enable_thinking;
        const pgd_json_schema *forced = NULL; /* the prompt is all that counts here */
        rc = pgd_api_tools_parse(root, &r->tools, &forced, e);
        pgd_json_schema_unref(forced);
        if (rc) return rc;
    }
    return get_bool(root, "add_special_tokens", &r->add_special_tokens, e);
}

int pgd_api_tokenize_parse(const char *body, size_t len, pgd_api_tokenize_request *out,
                           pgd_api_error *err) {
    memset(out, 0, sizeof *out);
    int rc = pgd__api_load_object(body, len, &out->root, err);
    if (!rc) rc = tokenize_fields(out->root, out, err);
    if (rc) pgd_api_tokenize_free(out);
    return rc;
}

void pgd_api_detokenize_free(pgd_api_detokenize_request *r) {
    if (!r) return;
    free(r->tokens);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

static int detokenize_fields(const json_t *root, pgd_api_detokenize_request *r, pgd_api_error *e) {
    int rc;
    if ((rc = get_str(root, "model", &r->model, e))) return rc;
    json_t *v = pgd__api_field(root, "tokens");
    if (!v) return bad(e, "tokens", "'tokens' is required");
    if (!json_is_array(v)) return type_err(e, "tokens", "an array of token ids", v);
    size_t n = json_array_size(v);
    r->tokens = malloc((n ? n : 1) * sizeof *r->tokens);
    if (!r->tokens) return pgd__api_oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(v, i);
        if (token_id(t, &r->tokens[i])) {
            char param[48];
            snprintf(param, sizeof param, "tokens[%zu]", i);
            return token_err(e, param, t);
        }
    }
    r->n_tokens = n;
    return 0;
}

int pgd_api_detokenize_parse(const char *body, size_t len, pgd_api_detokenize_request *out,
                             pgd_api_error *err) {
    memset(out, 0, sizeof *out);
    int rc = pgd__api_load_object(body, len, &out->root, err);
    if (!rc) rc = detokenize_fields(out->root, out, err);
    if (rc) pgd_api_detokenize_free(out);
    return rc;
}
