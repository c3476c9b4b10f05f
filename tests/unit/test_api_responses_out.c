/*
 * tests/unit/test_api_responses_out.c — api/responses, the answer side: the response object
 * built whole (every key, in order, with the echoed request fields, items, usage, logprobs) and
 * as a stream of typed SSE events (framing, sequence numbers, event order, item ids, deltas
 * adding up, and the final response equal to the whole one); and the failed stream. The request
 * side is tests/unit/test_api_responses.c.
 *
 * Request bodies are written with ' for " (turned back by dq()) to keep them readable.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonutil.h"
#include "api/request.h"
#include "api/response.h"
#include "api/responses.h"
#include "api/tools.h"
#include "common/error.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static pgd_str S(const char *s) {
    return (pgd_str){s, strlen(s)};
}

/* The text with every ' turned into "; the caller frees it. */
static char *dq(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n + 1);
    if (!o) abort();
    for (size_t i = 0; i <= n; i++) o[i] = s[i] == '\'' ? '"' : s[i];
    return o;
}

static int rparse(const char *body_q, pgd_api_resp_request *r) {
    char *b = dq(body_q);
    pgd_api_error e;
    memset(&e, 0, sizeof e);
    int rc = pgd_api_resp_request_parse(b, strlen(b), r, &e);
    if (rc) fprintf(stderr, "  responses parse of %s: %s (param '%s')\n", b, e.message, e.param);
    free(b);
    return rc;
}

/* Tools in the Responses shape (flat). */
#define WEATHER_R                                                                                  \
    "{'type':'function','name':'get_weather','description':'Weather now','parameters':{'type':"    \
    "'object','properties':{'city':{'type':'string'},'unit':{'enum':['c','f']}},'required':["      \
    "'city','unit']},'strict':true}"
#define PING_R "{'type':'function','name':'ping','parameters':{'type':'object','properties':{}}}"

/* ---- the response object ------------------------------------------------------------------- */

static json_t *load(const char *s, size_t n) {
    if (!s) return NULL;
    CHECK(pgd_api_utf8_valid(s, n));
    CHECK(memchr(s, '\n', n) == NULL);
    json_error_t je;
    json_t *j = json_loadb(s, n, 0, &je);
    if (!j) fprintf(stderr, "  invalid JSON (%s): %.*s\n", je.text, (int)n, s);
    return j;
}

static const char *sget(const json_t *o, const char *k) {
    return json_string_value(json_object_get(o, k));
}
static const char *sget0(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}
static long long iget(const json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    CHECK(json_is_integer(v));
    return json_integer_value(v);
}

/* `o` is an object whose keys are keys[] (NULL-terminated), in that order. */
static bool keys_in_order(const json_t *o, const char *const *keys) {
    if (!json_is_object(o)) {
        fprintf(stderr, "  not an object\n");
        return false;
    }
    size_t i = 0;
    const char *k;
    json_t *v;
    bool ok = true;
    json_object_foreach((json_t *)o, k, v) {
        if (!keys[i] || strcmp(keys[i], k) != 0) {
            fprintf(stderr, "  key %zu is '%s', want '%s'\n", i, k, keys[i] ? keys[i] : "(end)");
            ok = false;
            break;
        }
        i++;
    }
    if (ok && keys[i]) {
        fprintf(stderr, "  missing key '%s' (and after)\n", keys[i]);
        ok = false;
    }
    return ok;
}

/* `o` has exactly keys[] (any order). */
static bool keys_are(const json_t *o, const char *const *keys) {
    if (!json_is_object(o)) {
        fprintf(stderr, "  not an object\n");
        return false;
    }
    size_t n = 0;
    bool ok = true;
    for (; keys[n]; n++) {
        if (!json_object_get(o, keys[n])) {
            fprintf(stderr, "  missing key '%s'\n", keys[n]);
            ok = false;
        }
    }
    if (json_object_size(o) != n) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)o, k, v) {
            size_t i = 0;
            while (keys[i] && strcmp(keys[i], k) != 0) i++;
            if (!keys[i]) fprintf(stderr, "  extra key '%s'\n", k);
        }
        ok = false;
    }
    return ok;
}
#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *const k_resp_keys[] = {"id",
                                          "object",
                                          "created_at",
                                          "status",
                                          "background",
                                          "error",
                                          "incomplete_details",
                                          "instructions",
                                          "max_output_tokens",
                                          "max_tool_calls",
                                          "model",
                                          "output",
                                          "parallel_tool_calls",
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
                                          "prompt_cache_key",
                                          NULL};

/* The response object's keys in the spec's order (service_tier only when given). */
static bool response_keys(const json_t *resp, bool service_tier) {
    const char *keys[PGD_ARRAY_LEN(k_resp_keys)];
    size_t n = 0;
    for (size_t i = 0; k_resp_keys[i]; i++)
        if (service_tier || strcmp(k_resp_keys[i], "service_tier") != 0) keys[n++] = k_resp_keys[i];
    keys[n] = NULL;
    return keys_in_order(resp, keys);
}

/* The fields every response object has whatever its state; the request's echo repeated. */
static void check_response_head(const json_t *resp, const pgd_api_meta *m,
                                const pgd_api_resp_request *req, const char *status,
                                bool service_tier) {
    CHECK(response_keys(resp, service_tier));
    CHECK_EQ_STR(sget(resp, "id"), m->id);
    CHECK_EQ_STR(sget(resp, "object"), "response");
    CHECK_EQ_INT(iget(resp, "created_at"), m->created);
    CHECK_EQ_STR(sget(resp, "status"), status);
    CHECK(json_is_false(json_object_get(resp, "background")));
    CHECK(json_is_null(json_object_get(resp, "previous_response_id")));
    CHECK(json_is_boolean(json_object_get(resp, "store")) &&
          json_boolean_value(json_object_get(resp, "store")) == req->store);
    json_t *rs = json_object_get(resp, "reasoning");
    CHECK(keys_are(rs, KEYS("effort", "summary")));
    CHECK(json_is_null(json_object_get(rs, "effort")) &&
          json_is_null(json_object_get(rs, "summary")));
    char model[64];
    snprintf(model, sizeof model, "%.*s", (int)m->model.len, m->model.ptr);
    CHECK_EQ_STR(sget(resp, "model"), model);
    CHECK(json_is_array(json_object_get(resp, "output")));
    /* the echo: what the request's echo holds, the response says */
    const char *k;
    json_t *v;
    if (req && req->echo) {
        json_object_foreach(req->echo, k, v) {
            json_t *got = json_object_get(resp, k);
            if (!got || !json_equal(got, v)) {
                char *a = got ? json_dumps(got, JSON_ENCODE_ANY) : NULL;
                char *b = json_dumps(v, JSON_ENCODE_ANY);
                fprintf(stderr, "  echoed '%s' is %s, the request's echo %s\n", k,
                        a ? a : "(absent)", b ? b : "?");
                free(a);
                free(b);
                CHECK(false);
            }
        }
    }
    json_t *text = json_object_get(resp, "text");
    CHECK(json_is_object(text) && json_object_get(text, "format") != NULL);
    CHECK_EQ_STR(sget(text, "verbosity"), "medium");
}

/* usage {input_tokens, input_tokens_details {cached_tokens}, output_tokens,
 * output_tokens_details {reasoning_tokens 0}, total_tokens} */
static void check_usage(const json_t *u, const pgd_api_usage *want) {
    REQUIRE(keys_in_order(u, KEYS("input_tokens", "input_tokens_details", "output_tokens",
                                  "output_tokens_details", "total_tokens")));
    CHECK_EQ_INT(iget(u, "input_tokens"), want->prompt_tokens);
    CHECK_EQ_INT(iget(u, "output_tokens"), want->completion_tokens);
    CHECK_EQ_INT(iget(u, "total_tokens"), want->prompt_tokens + want->completion_tokens);
    json_t *d = json_object_get(u, "input_tokens_details");
    CHECK(keys_are(d, KEYS("cached_tokens")));
    CHECK_EQ_INT(iget(d, "cached_tokens"), want->cached_tokens);
    d = json_object_get(u, "output_tokens_details");
    CHECK(keys_are(d, KEYS("reasoning_tokens")));
    CHECK_EQ_INT(iget(d, "reasoning_tokens"), 0);
}

/* One logprobs entry {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}. */
static void check_bytes(const json_t *arr, pgd_str want) {
    REQUIRE(json_is_array(arr) && json_array_size(arr) == want.len);
    for (size_t i = 0; i < want.len; i++)
        CHECK(json_integer_value(json_array_get(arr, i)) == (unsigned char)want.ptr[i]);
}
static void check_lp(const json_t *e, const pgd_api_token_logprob *w) {
    REQUIRE(keys_in_order(e, KEYS("token", "logprob", "bytes", "top_logprobs")));
    char tok[64];
    snprintf(tok, sizeof tok, "%.*s", (int)w->text.len, w->text.ptr);
    CHECK_EQ_STR(sget(e, "token"), tok);
    CHECK_NEAR(json_number_value(json_object_get(e, "logprob")), w->logprob, 1e-6);
    check_bytes(json_object_get(e, "bytes"), w->text);
    json_t *tops = json_object_get(e, "top_logprobs");
    REQUIRE(json_is_array(tops) && json_array_size(tops) == w->n_top);
    for (size_t i = 0; i < w->n_top; i++) {
        json_t *t = json_array_get(tops, i);
        REQUIRE(keys_in_order(t, KEYS("token", "logprob", "bytes")));
        snprintf(tok, sizeof tok, "%.*s", (int)w->top[i].text.len, w->top[i].text.ptr);
        CHECK_EQ_STR(sget(t, "token"), tok);
        CHECK_NEAR(json_number_value(json_object_get(t, "logprob")), w->top[i].logprob, 1e-6);
        check_bytes(json_object_get(t, "bytes"), w->top[i].text);
    }
}

/* A finished message item with one output_text part of `text`; its logprobs entries lp[n]. */
static void check_message_item(const json_t *it, const char *text, const pgd_api_token_logprob *lp,
                               size_t n_lp, const char *status) {
    REQUIRE(keys_in_order(it, KEYS("id", "type", "status", "role", "content")));
    CHECK(sget(it, "id") && !strncmp(sget(it, "id"), "msg_", 4) && strlen(sget(it, "id")) > 4);
    CHECK_EQ_STR(sget(it, "type"), "message");
    if (status) CHECK_EQ_STR(sget(it, "status"), status);
    CHECK(json_is_string(json_object_get(it, "status")));
    CHECK_EQ_STR(sget(it, "role"), "assistant");
    json_t *content = json_object_get(it, "content");
    REQUIRE(json_is_array(content) && json_array_size(content) == 1);
    json_t *part = json_array_get(content, 0);
    REQUIRE(keys_in_order(part, KEYS("type", "text", "annotations", "logprobs")));
    CHECK_EQ_STR(sget(part, "type"), "output_text");
    CHECK_EQ_STR(sget(part, "text"), text);
    json_t *ann = json_object_get(part, "annotations");
    CHECK(json_is_array(ann) && json_array_size(ann) == 0);
    json_t *lps = json_object_get(part, "logprobs");
    REQUIRE(json_is_array(lps) && json_array_size(lps) == n_lp);
    for (size_t i = 0; i < n_lp; i++) check_lp(json_array_get(lps, i), &lp[i]);
}

static void check_call_item(const json_t *it, const pgd_api_tool_call *c) {
    REQUIRE(keys_in_order(it, KEYS("id", "type", "status", "arguments", "call_id", "name")));
    CHECK(sget(it, "id") && !strncmp(sget(it, "id"), "fc_", 3) && strlen(sget(it, "id")) > 3);
    CHECK_EQ_STR(sget(it, "type"), "function_call");
    CHECK_EQ_STR(sget(it, "status"), "completed");
    char buf[128];
    snprintf(buf, sizeof buf, "%.*s", (int)c->arguments.len, c->arguments.ptr);
    CHECK_EQ_STR(sget(it, "arguments"), buf);
    CHECK_EQ_STR(sget(it, "call_id"), c->id);
    snprintf(buf, sizeof buf, "%.*s", (int)c->name.len, c->name.ptr);
    CHECK_EQ_STR(sget(it, "name"), buf);
}

/* The answer the builder tests play: "Hel" "lo", two calls, " ok". */
static const pgd_api_top_logprob k_top_hel[] = {{{"Hel", 3}, -0.5f}, {{"He", 2}, -1.25f}};
static const pgd_api_top_logprob k_top_lo[] = {{{"lo", 2}, -0.25f}, {{"p", 1}, -2.0f}};
static const pgd_api_token_logprob k_lp_hello[] = {{{"Hel", 3}, -0.5f, k_top_hel, 2},
                                                   {{"lo", 2}, -0.25f, k_top_lo, 2}};
static const pgd_api_token_logprob k_lp_ok[] = {{{" ok", 3}, -0.125f, NULL, 0}};
static const pgd_api_tool_call k_calls[2] = {
    {"call_aaaaaaaaaaaaaaaaaaaaaaaa",
     {"get_weather", 11},
     {"{\"city\": \"Paris\"}", 17},
     false,
     false,
     0},
    {"call_bbbbbbbbbbbbbbbbbbbbbbbb", {"ping", 4}, {"{}", 2}, false, false, 0},
};
static const pgd_api_usage k_usage = {12, 7, 4, 0};

#define BUILDER_REQ                                                                                \
    "{'model':'smol','input':'hi','instructions':'Be terse.','max_output_tokens':50,"              \
    "'max_tool_calls':2,'temperature':0.5,'top_p':0.875,'tools':[" WEATHER_R "," PING_R "],"       \
    "'tool_choice':'auto','parallel_tool_calls':false,'include':["                                 \
    "'message.output_text.logprobs'],'top_logprobs':2,'user':'u1','metadata':{'a':'b','c':'d'},"   \
    "'safety_identifier':'sid','prompt_cache_key':'pck','service_tier':'flex','truncation':"       \
    "'disabled','store':true,'reasoning':{'effort':null,'summary':null},'text':{'format':{"        \
    "'type':'text'},'verbosity':'medium'}}"

/* Feeds the answer to r; each call's sse output is appended to `all`. */
static int play(pgd_api_resp *r, pgd_buf *all, pgd_finish finish) {
    pgd_buf b = PGD_BUF_INIT;
    int rc = 0;
#define STEP(call)                                                                                 \
    do {                                                                                           \
        pgd_buf_reset(&b);                                                                         \
        if ((rc = (call)) != 0) goto done;                                                         \
        if (b.len) pgd_buf_append(all, b.data, b.len);                                             \
    } while (0)
    STEP(pgd_api_resp_text(r, S("Hel"), k_lp_hello, 1, &b));
    STEP(pgd_api_resp_text(r, S("lo"), k_lp_hello + 1, 1, &b));
    STEP(pgd_api_resp_calls(r, k_calls, 2, &b));
    STEP(pgd_api_resp_text(r, S(" ok"), k_lp_ok, 1, &b));
    STEP(pgd_api_resp_end(r, finish, &k_usage, &b));
#undef STEP
done:
    pgd_buf_free(&b);
    return rc;
}

static void test_response_whole(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse(BUILDER_REQ, &req) == 0);
    CHECK(req.logprobs);
    REQUIRE(req.echo != NULL);
    /* echo: in output order, the request's fields */
    {
        size_t j = 0;
        const char *k;
        json_t *v;
        json_object_foreach(req.echo, k, v) {
            while (k_resp_keys[j] && strcmp(k_resp_keys[j], k) != 0) j++;
            if (!k_resp_keys[j]) {
                fprintf(stderr, "  echo key '%s' out of the response's order (or not in it)\n", k);
                CHECK(false);
                break;
            }
        }
    }

    char id[PGD_API_ID_CAP] = "resp_0123456789abcdef0123456789abcdef";
    pgd_api_meta m = {id, 1700000000, S("served-model"), NULL};
    pgd_api_resp *r = NULL;
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    REQUIRE(r != NULL);
    pgd_buf all = PGD_BUF_INIT, out = PGD_BUF_INIT;
    /* only pgd_api_resp_end writes */
    pgd_buf b = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_resp_text(r, S("Hel"), k_lp_hello, 1, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S("lo"), k_lp_hello + 1, 1, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_calls(r, k_calls, 2, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S(" ok"), k_lp_ok, 1, &b), 0);
    CHECK_EQ_INT(b.len, 0);
    REQUIRE(pgd_api_resp_end(r, PGD_FINISH_TOOL_CALLS, &k_usage, &out) == 0);
    pgd_api_resp_free(r);
    json_t *resp = load(out.data, out.len);
    REQUIRE(resp != NULL);
    check_response_head(resp, &m, &req, "completed", true);
    CHECK(json_is_null(json_object_get(resp, "error")));
    CHECK(json_is_null(json_object_get(resp, "incomplete_details")));
    /* the request's values */
    CHECK_EQ_STR(sget(resp, "instructions"), "Be terse.");
    CHECK_EQ_INT(iget(resp, "max_output_tokens"), 50);
    CHECK_EQ_INT(iget(resp, "max_tool_calls"), 2);
    CHECK(json_is_false(json_object_get(resp, "parallel_tool_calls")));
    CHECK_NEAR(json_number_value(json_object_get(resp, "temperature")), 0.5, 1e-9);
    CHECK_NEAR(json_number_value(json_object_get(resp, "top_p")), 0.875, 1e-9);
    CHECK_EQ_STR(sget(resp, "tool_choice"), "auto");
    {
        char *tools_q = dq("[" WEATHER_R "," PING_R "]");
        json_t *want = json_loads(tools_q, 0, NULL);
        CHECK(want && json_equal(json_object_get(resp, "tools"), want));
        json_decref(want);
        free(tools_q);
    }
    CHECK_EQ_INT(iget(resp, "top_logprobs"), 2);
    CHECK_EQ_STR(sget(resp, "truncation"), "disabled");
    CHECK_EQ_STR(sget(resp, "user"), "u1");
    CHECK_EQ_STR(sget(resp, "safety_identifier"), "sid");
    CHECK_EQ_STR(sget(resp, "prompt_cache_key"), "pck");
    CHECK_EQ_STR(sget(resp, "service_tier"), "flex");
    json_t *md = json_object_get(resp, "metadata");
    CHECK(keys_in_order(md, KEYS("a", "c")));
    CHECK_EQ_STR(sget(md, "a"), "b");
    CHECK_EQ_STR(sget(md, "c"), "d");
    CHECK_EQ_STR(sget(json_object_get(json_object_get(resp, "text"), "format"), "type"), "text");
    check_usage(json_object_get(resp, "usage"), &k_usage);
    /* the output, in the order written */
    json_t *output = json_object_get(resp, "output");
    REQUIRE(json_array_size(output) == 4);
    check_message_item(json_array_get(output, 0), "Hello", k_lp_hello, 2, "completed");
    check_call_item(json_array_get(output, 1), &k_calls[0]);
    check_call_item(json_array_get(output, 2), &k_calls[1]);
    check_message_item(json_array_get(output, 3), " ok", k_lp_ok, 1, "completed");
    /* ids differ */
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(sget0(json_array_get(output, i), "id"),
                         sget0(json_array_get(output, j), "id")) != 0);
    json_decref(resp);

    /* the same through play (the helper the stream test uses) */
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    pgd_buf_reset(&all);
    CHECK_EQ_INT(play(r, &all, PGD_FINISH_STOP), 0);
    pgd_api_resp_free(r);
    resp = load(all.data, all.len);
    REQUIRE(resp != NULL);
    CHECK_EQ_STR(sget(resp, "status"), "completed");
    CHECK_EQ_INT(json_array_size(json_object_get(resp, "output")), 4);
    json_decref(resp);

    pgd_buf_free(&all);
    pgd_buf_free(&out);
    pgd_buf_free(&b);
    pgd_api_resp_request_free(&req);
}

/* The defaults echoed by a minimal request; and the response copies what it is given. */
static void test_response_defaults_and_copies(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse("{'input':'hi'}", &req) == 0);
    char id[PGD_API_ID_CAP] = "resp_minimal";
    char model[16] = "m1";
    pgd_api_meta m = {id, 42, {model, 2}, NULL};
    pgd_api_resp *r = NULL;
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    json_t *echo = json_deep_copy(req.echo);
    /* everything given may go away */
    pgd_api_resp_request_free(&req);
    memset(id, 'x', sizeof id - 1);
    memset(model, 'y', sizeof model - 1);
    char text[8] = "abc", args[8] = "{}", name[8] = "f";
    pgd_api_token_logprob lp = {{text, 3}, -1.0f, NULL, 0};
    pgd_api_tool_call call = {
        "call_cccccccccccccccccccccccc", {name, 1}, {args, 2}, false, false, 0};
    pgd_buf b = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_resp_text(r, (pgd_str){text, 3}, &lp, 1, &b), 0);
    memset(text, 'z', 3);
    CHECK_EQ_INT(pgd_api_resp_calls(r, &call, 1, &b), 0);
    memset(args, 'z', 2);
    memset(name, 'z', 1);
    memset(call.id, 'z', 8);
    pgd_api_usage u = {1, 2, 0, 0};
    REQUIRE(pgd_api_resp_end(r, PGD_FINISH_STOP, &u, &b) == 0);
    pgd_api_resp_free(r);
    json_t *resp = load(b.data, b.len);
    REQUIRE(resp != NULL);
    pgd_api_meta m0 = {"resp_minimal", 42, S("m1"), NULL};
    pgd_api_resp_request view;
    memset(&view, 0, sizeof view);
    view.echo = echo;
    view.store = true; /* the default */
    check_response_head(resp, &m0, &view, "completed", false);
    CHECK(json_is_null(json_object_get(resp, "instructions")));
    CHECK(json_is_null(json_object_get(resp, "max_output_tokens")));
    CHECK(json_is_null(json_object_get(resp, "max_tool_calls")));
    CHECK(json_is_true(json_object_get(resp, "parallel_tool_calls")));
    json_t *tools = json_object_get(resp, "tools");
    CHECK(json_is_array(tools) && json_array_size(tools) == 0);
    CHECK_EQ_STR(sget(resp, "truncation"), "disabled");
    CHECK(json_is_null(json_object_get(resp, "user")));
    CHECK(json_is_null(json_object_get(resp, "safety_identifier")));
    CHECK(json_is_null(json_object_get(resp, "prompt_cache_key")));
    json_t *md = json_object_get(resp, "metadata");
    CHECK(json_is_null(md) || (json_is_object(md) && json_object_size(md) == 0));
    json_t *t = json_object_get(resp, "temperature");
    CHECK(json_is_null(t) || json_number_value(t) == 1.0);
    t = json_object_get(resp, "top_p");
    CHECK(json_is_null(t) || json_number_value(t) == 1.0);
    CHECK_EQ_STR(sget(json_object_get(json_object_get(resp, "text"), "format"), "type"), "text");
    json_t *output = json_object_get(resp, "output");
    REQUIRE(json_array_size(output) == 2);
    /* logprobs were not asked: [] though given */
    check_message_item(json_array_get(output, 0), "abc", NULL, 0, "completed");
    pgd_api_tool_call want = {"call_cccccccccccccccccccccccc", S("f"), S("{}"), false, false, 0};
    check_call_item(json_array_get(output, 1), &want);
    json_decref(resp);
    json_decref(echo);
    pgd_buf_free(&b);
}

/* The response object (whole, text "t") of a body; *given the body's JSON. */
static json_t *respond(const char *body_q, json_t **given) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    *given = NULL;
    if (rparse(body_q, &req) != 0) return NULL;
    char *b_dq = dq(body_q);
    *given = json_loads(b_dq, 0, NULL);
    free(b_dq);
    pgd_api_meta m = {"resp_echo", 9, S("m"), NULL};
    pgd_api_resp *r = NULL;
    json_t *resp = NULL;
    pgd_buf b = PGD_BUF_INIT;
    pgd_api_usage u = {1, 1, 0, 0};
    if (pgd_api_resp_new(&m, &req, false, &r) == 0 &&
        pgd_api_resp_text(r, S("t"), NULL, 0, &b) == 0 &&
        pgd_api_resp_end(r, PGD_FINISH_STOP, &u, &b) == 0) {
        resp = load(b.data, b.len);
        if (resp) check_response_head(resp, &m, &req, "completed", false);
    }
    pgd_api_resp_free(r);
    pgd_buf_free(&b);
    pgd_api_resp_request_free(&req);
    return resp;
}

/* The echo of a named tool_choice, a json_schema format, 16 metadata keys. */
static void test_response_echo_objects(void) {
    pgd_buf body = PGD_BUF_INIT;
    pgd_buf_puts(&body, "{'input':'hi','tools':[" PING_R "],'tool_choice':{'type':'function',"
                        "'name':'ping'},'metadata':{");
    for (int i = 0; i < 16; i++) pgd_buf_printf(&body, "%s'k%02d':'v%d'", i ? "," : "", i, i);
    pgd_buf_puts(&body, "}}");
    json_t *given = NULL, *resp = respond(body.data, &given);
    CHECK(resp != NULL && given != NULL);
    if (resp && given) {
        CHECK(json_equal(json_object_get(resp, "tool_choice"),
                         json_object_get(given, "tool_choice")));
        CHECK(json_equal(json_object_get(resp, "tools"), json_object_get(given, "tools")));
        CHECK(json_equal(json_object_get(resp, "metadata"), json_object_get(given, "metadata")));
    }
    json_decref(resp);
    json_decref(given);
    pgd_buf_free(&body);

    resp = respond("{'input':'hi','tool_choice':'required','tools':[" PING_R "]}", &given);
    CHECK(resp != NULL);
    CHECK_EQ_STR(sget(resp, "tool_choice"), "required");
    json_decref(resp);
    json_decref(given);

    resp = respond("{'input':'hi','text':{'format':{'type':'json_schema','name':'pt','schema':{"
                   "'type':'object','properties':{'x':{'type':'integer'}}},'strict':true}}}",
                   &given);
    CHECK(resp != NULL && given != NULL);
    if (resp && given) {
        json_t *fmt = json_object_get(json_object_get(resp, "text"), "format");
        json_t *want = json_object_get(json_object_get(given, "text"), "format");
        CHECK_EQ_STR(sget(fmt, "type"), "json_schema");
        CHECK_EQ_STR(sget(fmt, "name"), "pt");
        CHECK(json_equal(json_object_get(fmt, "schema"), json_object_get(want, "schema")));
        CHECK_EQ_STR(sget(json_object_get(resp, "text"), "verbosity"), "medium");
    }
    json_decref(resp);
    json_decref(given);

    resp = respond("{'input':'hi','text':{'format':{'type':'json_object'}}}", &given);
    CHECK(resp != NULL);
    CHECK_EQ_STR(sget(json_object_get(json_object_get(resp, "text"), "format"), "type"),
                 "json_object");
    json_decref(resp);
    json_decref(given);
}

/* Nothing output: one empty message; finish length: incomplete; empty pieces open nothing. */
static void test_response_edges(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse("{'input':'hi','max_output_tokens':3}", &req) == 0);
    pgd_api_meta m = {"resp_e", 7, S("m"), NULL};
    pgd_api_usage u = {5, 3, 2, 0};
    pgd_buf b = PGD_BUF_INIT;

    /* nothing: one empty message */
    pgd_api_resp *r = NULL;
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    REQUIRE(pgd_api_resp_end(r, PGD_FINISH_LENGTH, &u, &b) == 0);
    pgd_api_resp_free(r);
    json_t *resp = load(b.data, b.len);
    REQUIRE(resp != NULL);
    check_response_head(resp, &m, &req, "incomplete", false);
    json_t *inc = json_object_get(resp, "incomplete_details");
    CHECK(keys_are(inc, KEYS("reason")));
    CHECK_EQ_STR(sget(inc, "reason"), "max_output_tokens");
    CHECK(json_is_null(json_object_get(resp, "error")));
    CHECK_EQ_INT(iget(resp, "max_output_tokens"), 3);
    check_usage(json_object_get(resp, "usage"), &u);
    json_t *output = json_object_get(resp, "output");
    REQUIRE(json_array_size(output) == 1);
    check_message_item(json_array_get(output, 0), "", NULL, 0, NULL);
    json_decref(resp);

    /* an empty piece opens nothing: a call alone is the whole output */
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    pgd_buf_reset(&b);
    CHECK_EQ_INT(pgd_api_resp_text(r, S(""), NULL, 0, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_calls(r, k_calls + 1, 1, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S(""), NULL, 0, &b), 0);
    CHECK_EQ_INT(b.len, 0);
    REQUIRE(pgd_api_resp_end(r, PGD_FINISH_TOOL_CALLS, &u, &b) == 0);
    pgd_api_resp_free(r);
    resp = load(b.data, b.len);
    REQUIRE(resp != NULL);
    CHECK_EQ_STR(sget(resp, "status"), "completed");
    CHECK(json_is_null(json_object_get(resp, "incomplete_details")));
    output = json_object_get(resp, "output");
    REQUIRE(json_array_size(output) == 1);
    check_call_item(json_array_get(output, 0), &k_calls[1]);
    json_decref(resp);

    /* calls in separate batches: items in order */
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    pgd_buf_reset(&b);
    CHECK_EQ_INT(pgd_api_resp_calls(r, k_calls, 1, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S("mid"), NULL, 0, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_calls(r, k_calls + 1, 1, &b), 0);
    REQUIRE(pgd_api_resp_end(r, PGD_FINISH_STOP, &u, &b) == 0);
    pgd_api_resp_free(r);
    resp = load(b.data, b.len);
    REQUIRE(resp != NULL);
    output = json_object_get(resp, "output");
    REQUIRE(json_array_size(output) == 3);
    check_call_item(json_array_get(output, 0), &k_calls[0]);
    check_message_item(json_array_get(output, 1), "mid", NULL, 0, "completed");
    check_call_item(json_array_get(output, 2), &k_calls[1]);
    json_decref(resp);

    /* a piece with logprobs and no text (a token that prints nothing yet) opens a message */
    pgd_api_resp_request_free(&req);
    REQUIRE(rparse("{'input':'hi','include':['message.output_text.logprobs']}", &req) == 0);
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    pgd_buf_reset(&b);
    const pgd_api_token_logprob half[] = {{{"\xf0\x9f", 2}, -0.5f, NULL, 0},
                                          {{"\x98\x80", 2}, -0.25f, NULL, 0}};
    CHECK_EQ_INT(pgd_api_resp_text(r, S(""), half, 1, &b), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S("\xf0\x9f\x98\x80"), half + 1, 1, &b), 0);
    REQUIRE(pgd_api_resp_end(r, PGD_FINISH_STOP, &u, &b) == 0);
    pgd_api_resp_free(r);
    resp = load(b.data, b.len);
    REQUIRE(resp != NULL);
    output = json_object_get(resp, "output");
    REQUIRE(json_array_size(output) == 1);
    {
        json_t *part = json_array_get(json_object_get(json_array_get(output, 0), "content"), 0);
        CHECK_EQ_STR(sget(part, "text"), "\xf0\x9f\x98\x80");
        json_t *lps = json_object_get(part, "logprobs");
        REQUIRE(json_array_size(lps) == 2);
        check_bytes(json_object_get(json_array_get(lps, 0), "bytes"), half[0].text);
        check_bytes(json_object_get(json_array_get(lps, 1), "bytes"), half[1].text);
    }
    json_decref(resp);

    /* freed unfinished, and NULL */
    REQUIRE(pgd_api_resp_new(&m, &req, false, &r) == 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S("x"), NULL, 0, &b), 0);
    pgd_api_resp_free(r);
    pgd_api_resp_free(NULL);

    pgd_buf_free(&b);
    pgd_api_resp_request_free(&req);
}

/* ---- the stream ---------------------------------------------------------------------------- */

typedef struct {
    char type[96];
    json_t *j;
} sse_event;

typedef struct {
    sse_event ev[64];
    size_t n;
} sse_events;

static void events_free(sse_events *e) {
    for (size_t i = 0; i < e->n; i++) json_decref(e->ev[i].j);
    e->n = 0;
}

/* Splits s[len] into "event: <type>\ndata: <json>\n\n" events; false on bad framing. */
static bool split_events(const char *s, size_t len, sse_events *out) {
    out->n = 0;
    size_t at = 0;
    while (at < len) {
        if (out->n == PGD_ARRAY_LEN(out->ev)) return false;
        if (len - at < 7 || memcmp(s + at, "event: ", 7) != 0) {
            fprintf(stderr, "  event %zu: no 'event: ' at byte %zu: %.40s\n", out->n, at, s + at);
            return false;
        }
        at += 7;
        const char *nl = memchr(s + at, '\n', len - at);
        if (!nl || (size_t)(nl - (s + at)) >= sizeof out->ev[0].type) return false;
        sse_event *e = &out->ev[out->n];
        memcpy(e->type, s + at, (size_t)(nl - (s + at)));
        e->type[nl - (s + at)] = 0;
        at = (size_t)(nl - s) + 1;
        if (len - at < 6 || memcmp(s + at, "data: ", 6) != 0) {
            fprintf(stderr, "  event %zu (%s): no 'data: '\n", out->n, e->type);
            return false;
        }
        at += 6;
        nl = memchr(s + at, '\n', len - at);
        if (!nl) return false;
        size_t dl = (size_t)(nl - (s + at));
        if (memchr(s + at, '\r', dl)) return false;
        e->j = load(s + at, dl);
        if (!e->j || !json_is_object(e->j)) {
            json_decref(e->j);
            return false;
        }
        out->n++;
        at = (size_t)(nl - s) + 1;
        if (at >= len || s[at] != '\n') {
            fprintf(stderr, "  event %zu (%s): no blank line after the data\n", out->n - 1,
                    e->type);
            return false;
        }
        at++;
    }
    return true;
}

/* The events' types are want[] (NULL-terminated), in order. */
static bool types_are(const sse_events *e, const char *const *want) {
    size_t n = 0;
    while (want[n]) n++;
    bool ok = n == e->n;
    for (size_t i = 0; i < e->n && i < n; i++) ok = ok && !strcmp(e->ev[i].type, want[i]);
    if (!ok) {
        fprintf(stderr, "  events:\n");
        for (size_t i = 0; i < e->n || i < n; i++)
            fprintf(stderr, "    %-42s want %s\n", i < e->n ? e->ev[i].type : "-",
                    i < n ? want[i] : "-");
    }
    return ok;
}

/* Per event: framing type = "type", sequence numbers 0..n-1, the keys each type has, item ids
 * and output indexes consistent, deltas adding up to the done texts and to the items that are
 * done, which the final response holds. Returns the final response (a reference), or NULL. */
static json_t *check_stream(const sse_events *e, const pgd_api_meta *m,
                            const pgd_api_resp_request *req) {
    json_t *items_done = json_array(); /* output_item.done items by output_index */
    json_t *final = NULL;
    char ids[16][64];
    size_t n_items = 0;
    long long open_index = -1; /* the output item being written */
    pgd_buf text = PGD_BUF_INIT, args = PGD_BUF_INIT;
    json_t *lps = json_array();
    for (size_t i = 0; i < e->n; i++) {
        json_t *j = e->ev[i].j;
        const char *type = e->ev[i].type;
        CHECK_EQ_STR(sget(j, "type"), type);
        if (!json_is_integer(json_object_get(j, "sequence_number")) ||
            json_integer_value(json_object_get(j, "sequence_number")) != (json_int_t)i) {
            fprintf(stderr, "  event %zu (%s): sequence_number wrong\n", i, type);
            CHECK(false);
        }
        if (!strcmp(type, "response.created") || !strcmp(type, "response.in_progress") ||
            !strcmp(type, "response.completed") || !strcmp(type, "response.incomplete") ||
            !strcmp(type, "response.failed")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "response")));
            json_t *resp = json_object_get(j, "response");
            const char *st = !strcmp(type, "response.completed")    ? "completed"
                             : !strcmp(type, "response.incomplete") ? "incomplete"
                             : !strcmp(type, "response.failed")     ? "failed"
                                                                    : "in_progress";
            check_response_head(resp, m, req, st, false);
            if (!strcmp(st, "in_progress")) {
                CHECK(json_is_null(json_object_get(resp, "usage")));
                CHECK_EQ_INT(json_array_size(json_object_get(resp, "output")), 0);
                CHECK(json_is_null(json_object_get(resp, "error")));
            } else {
                final = resp;
            }
        } else if (!strcmp(type, "response.output_item.added")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "output_index", "item")));
            CHECK_EQ_INT(iget(j, "output_index"), n_items);
            CHECK_EQ_INT(open_index, -1);
            json_t *it = json_object_get(j, "item");
            const char *id = sget(it, "id");
            if (!id || n_items >= 16) {
                CHECK(false);
                break;
            }
            snprintf(ids[n_items], sizeof ids[0], "%s", id);
            CHECK_EQ_STR(sget(it, "status"), "in_progress");
            if (!strcmp(sget0(it, "type"), "message")) {
                CHECK(!strncmp(id, "msg_", 4));
                CHECK_EQ_STR(sget(it, "role"), "assistant");
                CHECK(json_is_array(json_object_get(it, "content")));
            } else if (!strcmp(sget0(it, "type"), "reasoning")) {
                CHECK(!strncmp(id, "rs_", 3));
                CHECK(keys_are(it, KEYS("id", "type", "summary", "content", "status")));
                CHECK_EQ_INT(json_array_size(json_object_get(it, "content")), 0);
                CHECK_EQ_INT(json_array_size(json_object_get(it, "summary")), 0);
            } else {
                CHECK_EQ_STR(sget(it, "type"), "function_call");
                CHECK(!strncmp(id, "fc_", 3));
                CHECK_EQ_STR(sget(it, "arguments"), "");
                CHECK(json_is_string(json_object_get(it, "call_id")));
                CHECK(json_is_string(json_object_get(it, "name")));
            }
            open_index = (long long)n_items++;
            pgd_buf_reset(&text);
            pgd_buf_puts(&text, "");
            pgd_buf_reset(&args);
            pgd_buf_puts(&args, "");
            json_array_clear(lps);
        } else if (!strcmp(type, "response.content_part.added") ||
                   !strcmp(type, "response.content_part.done")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "item_id", "output_index",
                                   "content_index", "part")));
            CHECK_EQ_INT(iget(j, "output_index"), open_index);
            CHECK_EQ_INT(iget(j, "content_index"), 0);
            if (open_index >= 0) CHECK_EQ_STR(sget(j, "item_id"), ids[open_index]);
            json_t *part = json_object_get(j, "part");
            bool rs = !strcmp(sget0(part, "type"), "reasoning_text");
            if (rs)
                CHECK(keys_are(part, KEYS("type", "text")));
            else
                CHECK_EQ_STR(sget(part, "type"), "output_text");
            if (!strcmp(type, "response.content_part.added")) {
                CHECK_EQ_STR(sget(part, "text"), "");
            } else {
                CHECK_EQ_STR(sget(part, "text"), text.data);
                if (!rs) CHECK(json_equal(json_object_get(part, "logprobs"), lps));
            }
        } else if (!strcmp(type, "response.output_text.delta")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "item_id", "output_index",
                                   "content_index", "delta", "logprobs")));
            CHECK_EQ_INT(iget(j, "output_index"), open_index);
            CHECK_EQ_INT(iget(j, "content_index"), 0);
            if (open_index >= 0) CHECK_EQ_STR(sget(j, "item_id"), ids[open_index]);
            CHECK(json_is_string(json_object_get(j, "delta")));
            pgd_buf_puts(&text, sget0(j, "delta"));
            json_t *l = json_object_get(j, "logprobs");
            CHECK(json_is_array(l));
            json_array_extend(lps, l);
        } else if (!strcmp(type, "response.reasoning_text.delta") ||
                   !strcmp(type, "response.reasoning_text.done")) {
            bool delta = !strcmp(type, "response.reasoning_text.delta");
            CHECK(keys_are(j, KEYS("type", "sequence_number", "item_id", "output_index",
                                   "content_index", delta ? "delta" : "text")));
            CHECK_EQ_INT(iget(j, "output_index"), open_index);
            CHECK_EQ_INT(iget(j, "content_index"), 0);
            if (open_index >= 0) CHECK_EQ_STR(sget(j, "item_id"), ids[open_index]);
            if (delta)
                pgd_buf_puts(&text, sget0(j, "delta"));
            else
                CHECK_EQ_STR(sget(j, "text"), text.data);
        } else if (!strcmp(type, "response.output_text.done")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "item_id", "output_index",
                                   "content_index", "text", "logprobs")));
            CHECK_EQ_INT(iget(j, "output_index"), open_index);
            CHECK_EQ_INT(iget(j, "content_index"), 0);
            if (open_index >= 0) CHECK_EQ_STR(sget(j, "item_id"), ids[open_index]);
            CHECK_EQ_STR(sget(j, "text"), text.data);
            CHECK(json_equal(json_object_get(j, "logprobs"), lps));
        } else if (!strcmp(type, "response.function_call_arguments.delta")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "item_id", "output_index", "delta")));
            CHECK_EQ_INT(iget(j, "output_index"), open_index);
            if (open_index >= 0) CHECK_EQ_STR(sget(j, "item_id"), ids[open_index]);
            pgd_buf_puts(&args, sget0(j, "delta"));
        } else if (!strcmp(type, "response.function_call_arguments.done")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "item_id", "output_index", "name",
                                   "arguments")));
            CHECK_EQ_INT(iget(j, "output_index"), open_index);
            if (open_index >= 0) CHECK_EQ_STR(sget(j, "item_id"), ids[open_index]);
            CHECK_EQ_STR(sget(j, "arguments"), args.data);
            CHECK(json_is_string(json_object_get(j, "name")));
        } else if (!strcmp(type, "response.output_item.done")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "output_index", "item")));
            CHECK_EQ_INT(iget(j, "output_index"), open_index);
            json_t *it = json_object_get(j, "item");
            if (open_index >= 0) CHECK_EQ_STR(sget(it, "id"), ids[open_index]);
            if (!strcmp(sget0(it, "type"), "function_call")) {
                CHECK_EQ_STR(sget(it, "arguments"), args.data);
                /* incomplete exactly when the arguments are not whole JSON */
                json_t *whole = json_loads(args.data ? args.data : "", 0, NULL);
                CHECK_EQ_STR(sget(it, "status"), whole ? "completed" : "incomplete");
                json_decref(whole);
            } else {
                bool rs = !strcmp(sget0(it, "type"), "reasoning");
                json_t *part = json_array_get(json_object_get(it, "content"), 0);
                CHECK_EQ_STR(sget(part, "text"), text.data);
                if (rs) CHECK_EQ_STR(sget(it, "status"), "completed");
                if (!rs) CHECK(json_equal(json_object_get(part, "logprobs"), lps));
            }
            json_array_append(items_done, it);
            open_index = -1;
        } else if (!strcmp(type, "error")) {
            CHECK(keys_are(j, KEYS("type", "sequence_number", "code", "message", "param")));
        } else {
            fprintf(stderr, "  unknown event type '%s'\n", type);
            CHECK(false);
        }
    }
    if (final && strcmp(sget0(final, "status"), "failed") != 0) {
        json_t *output = json_object_get(final, "output");
        if (!json_equal(output, items_done)) {
            fprintf(stderr, "  the final output is not the items done\n");
            CHECK(false);
        }
    }
    json_decref(items_done);
    json_decref(lps);
    pgd_buf_free(&text);
    pgd_buf_free(&args);
    return final;
}

/* Deletes every output item's "id" (they are drawn anew by each response). */
static void strip_item_ids(json_t *resp) {
    json_t *output = json_object_get(resp, "output");
    size_t i;
    json_t *it;
    json_array_foreach(output, i, it) json_object_del(it, "id");
}

#define DELTA "response.output_text.delta"
#define MSG_EVENTS(...)                                                                            \
    "response.output_item.added", "response.content_part.added", __VA_ARGS__,                      \
        "response.output_text.done", "response.content_part.done", "response.output_item.done"
#define CALL_EVENTS                                                                                \
    "response.output_item.added", "response.function_call_arguments.delta",                        \
        "response.function_call_arguments.done", "response.output_item.done"

static void test_stream(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    /* BUILDER_REQ with stream (no service_tier, to check it is left out) */
    REQUIRE(rparse("{'stream':true,'model':'smol','input':'hi','instructions':'Be terse.',"
                   "'max_output_tokens':50,'temperature':0.5,'tools':[" WEATHER_R "," PING_R "],"
                   "'include':['message.output_text.logprobs'],'top_logprobs':2,'metadata':{"
                   "'a':'b'}}",
                   &req) == 0);
    CHECK(req.chat.stream);
    pgd_api_meta m = {"resp_stream", 1712345678, S("served"), NULL};

    for (int finish = 0; finish < 2; finish++) {
        pgd_finish f = finish ? PGD_FINISH_LENGTH : PGD_FINISH_STOP;
        pgd_api_resp *r = NULL;
        REQUIRE(pgd_api_resp_new(&m, &req, true, &r) == 0);
        pgd_buf all = PGD_BUF_INIT;
        CHECK_EQ_INT(pgd_api_resp_begin(r, &all), 0);
        CHECK_EQ_INT(play(r, &all, f), 0);
        pgd_api_resp_free(r);
        CHECK(all.len > 0 && strstr(all.data, "[DONE]") == NULL);
        sse_events ev;
        bool framed = split_events(all.data, all.len, &ev);
        CHECK(framed);
        if (framed) {
            CHECK(types_are(&ev, KEYS("response.created", "response.in_progress",
                                      MSG_EVENTS(DELTA, DELTA), CALL_EVENTS, CALL_EVENTS,
                                      MSG_EVENTS(DELTA),
                                      finish ? "response.incomplete" : "response.completed")));
            json_t *final = check_stream(&ev, &m, &req);
            CHECK(final != NULL);
            if (final) {
                /* the items */
                json_t *output = json_object_get(final, "output");
                CHECK_EQ_INT(json_array_size(output), 4);
                check_message_item(json_array_get(output, 0), "Hello", k_lp_hello, 2,
                                   finish ? NULL : "completed");
                check_call_item(json_array_get(output, 1), &k_calls[0]);
                check_call_item(json_array_get(output, 2), &k_calls[1]);
                check_message_item(json_array_get(output, 3), " ok", k_lp_ok, 1,
                                   finish ? NULL : "completed");
                check_usage(json_object_get(final, "usage"), &k_usage);
                if (finish)
                    CHECK_EQ_STR(sget(json_object_get(final, "incomplete_details"), "reason"),
                                 "max_output_tokens");
                else
                    CHECK(json_is_null(json_object_get(final, "incomplete_details")));
                /* the deltas of message 0: one per piece, with its logprobs */
                json_t *d0 = ev.ev[4].j, *d1 = ev.ev[5].j;
                CHECK_EQ_STR(sget(d0, "delta"), "Hel");
                CHECK_EQ_STR(sget(d1, "delta"), "lo");
                CHECK_EQ_INT(json_array_size(json_object_get(d0, "logprobs")), 1);
                /* the calls' arguments and names */
                CHECK_EQ_STR(sget(ev.ev[10].j, "delta"), "{\"city\": \"Paris\"}");
                CHECK_EQ_STR(sget(ev.ev[11].j, "name"), "get_weather");
                CHECK_EQ_STR(sget(ev.ev[15].j, "name"), "ping");
                CHECK_EQ_STR(sget(json_object_get(ev.ev[13].j, "item"), "call_id"), k_calls[1].id);
                /* the created response: no output, no usage, the echo */
                json_t *created = json_object_get(ev.ev[0].j, "response");
                CHECK_EQ_STR(sget(created, "instructions"), "Be terse.");
                CHECK(json_object_get(created, "service_tier") == NULL);

                /* the final response is what the whole builder gives for the same pieces */
                pgd_api_resp *w = NULL;
                REQUIRE(pgd_api_resp_new(&m, &req, false, &w) == 0);
                pgd_buf whole = PGD_BUF_INIT;
                CHECK_EQ_INT(play(w, &whole, f), 0);
                pgd_api_resp_free(w);
                json_t *wj = load(whole.data, whole.len);
                json_t *fj = json_deep_copy(final);
                if (wj && fj) {
                    strip_item_ids(wj);
                    strip_item_ids(fj);
                    if (!json_equal(wj, fj)) {
                        char *a = json_dumps(fj, 0), *b = json_dumps(wj, 0);
                        fprintf(stderr, "  streamed final:\n    %s\n  whole:\n    %s\n", a, b);
                        free(a);
                        free(b);
                        CHECK(false);
                    }
                } else {
                    CHECK(false);
                }
                json_decref(wj);
                json_decref(fj);
                pgd_buf_free(&whole);
            }
        }
        events_free(&ev);
        pgd_buf_free(&all);
    }
    pgd_api_resp_request_free(&req);
}

/* A call streamed as it grows: its arguments' deltas as given (an empty one sends nothing), the
 * done events with the whole; a cut one ends "incomplete". The final response is the whole
 * builder's for the same calls. */
static void test_stream_call_grows(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse("{'stream':true,'input':'hi','tools':[" WEATHER_R "," PING_R "]}", &req) == 0);
    pgd_api_meta m = {"resp_grow", 1712345678, S("served"), NULL};
    pgd_api_tool_call calls[2] = {
        {"call_dddddddddddddddddddddddd", S("get_weather"), S("{\"ci"), true, true, 0},
        {"call_eeeeeeeeeeeeeeeeeeeeeeee", S("ping"), S("{\"x\": 1"), false, true, 0},
    };
    pgd_api_resp *r = NULL;
    REQUIRE(pgd_api_resp_new(&m, &req, true, &r) == 0);
    pgd_buf all = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_resp_call_args(r, S("x"), &all), PGD_EINVAL); /* no call begun */
    CHECK_EQ_INT(pgd_api_resp_begin(r, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_call_begin(r, &calls[0], &all), 0);
    CHECK_EQ_INT(pgd_api_resp_call_args(r, S("ty\": \"Pa"), &all), 0);
    CHECK_EQ_INT(pgd_api_resp_call_args(r, S(""), &all), 0);
    CHECK_EQ_INT(pgd_api_resp_call_args(r, S("ris\"}"), &all), 0);
    CHECK_EQ_INT(pgd_api_resp_call_done(r, false, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_call_done(r, false, &all), PGD_EINVAL); /* none in progress */
    CHECK_EQ_INT(pgd_api_resp_calls(r, &calls[1], 1, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_end(r, PGD_FINISH_LENGTH, &k_usage, &all), 0);
    pgd_api_resp_free(r);
    sse_events ev;
    bool framed = split_events(all.data, all.len, &ev);
    CHECK(framed);
    if (framed) {
        CHECK(types_are(
            &ev,
            KEYS("response.created", "response.in_progress", "response.output_item.added",
                 "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                 "response.function_call_arguments.delta", "response.function_call_arguments.done",
                 "response.output_item.done", CALL_EVENTS, "response.incomplete")));
        CHECK_EQ_STR(sget(json_object_get(ev.ev[2].j, "item"), "arguments"), "");
        CHECK_EQ_STR(sget(ev.ev[3].j, "delta"), "{\"ci");
        CHECK_EQ_STR(sget(ev.ev[4].j, "delta"), "ty\": \"Pa");
        CHECK_EQ_STR(sget(ev.ev[5].j, "delta"), "ris\"}");
        CHECK_EQ_STR(sget(ev.ev[6].j, "arguments"), "{\"city\": \"Paris\"}");
        CHECK_EQ_STR(sget(json_object_get(ev.ev[7].j, "item"), "status"), "completed");
        CHECK_EQ_STR(sget(json_object_get(ev.ev[11].j, "item"), "status"), "incomplete");
        json_t *final = check_stream(&ev, &m, &req);
        CHECK(final != NULL);
        /* the same calls whole */
        calls[0].arguments = S("{\"city\": \"Paris\"}");
        calls[0].open = calls[0].cut = false;
        pgd_api_resp *w = NULL;
        REQUIRE(pgd_api_resp_new(&m, &req, false, &w) == 0);
        pgd_buf whole = PGD_BUF_INIT;
        CHECK_EQ_INT(pgd_api_resp_calls(w, calls, 2, &whole), 0);
        CHECK_EQ_INT(pgd_api_resp_end(w, PGD_FINISH_LENGTH, &k_usage, &whole), 0);
        pgd_api_resp_free(w);
        json_t *wj = load(whole.data, whole.len), *fj = final ? json_deep_copy(final) : NULL;
        REQUIRE(wj != NULL && fj != NULL);
        strip_item_ids(wj);
        strip_item_ids(fj);
        CHECK(json_equal(wj, fj));
        json_decref(wj);
        json_t *out = json_object_get(final, "output");
        CHECK_EQ_INT(json_array_size(out), 2); /* the calls: an answer, no empty message */
        check_call_item(json_array_get(out, 0), &calls[0]);
        CHECK_EQ_STR(sget(json_array_get(out, 1), "status"), "incomplete");
        CHECK_EQ_STR(sget(json_array_get(out, 1), "arguments"), "{\"x\": 1");
        json_decref(fj);
        pgd_buf_free(&whole);
    }
    events_free(&ev);
    pgd_buf_free(&all);
    pgd_api_resp_request_free(&req);
}

/* A stream without logprobs asked: every logprobs is []; an empty answer: one empty message. */
static void test_stream_plain_and_empty(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse("{'stream':true,'input':'hi','service_tier':'default'}", &req) == 0);
    pgd_api_meta m = {"resp_plain", 1, S("m"), NULL};
    pgd_api_resp *r = NULL;
    REQUIRE(pgd_api_resp_new(&m, &req, true, &r) == 0);
    pgd_buf all = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_resp_begin(r, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S("a"), k_lp_hello, 1, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S("b"), NULL, 0, &all), 0);
    pgd_api_usage u = {2, 2, 0, 0};
    CHECK_EQ_INT(pgd_api_resp_end(r, PGD_FINISH_STOP, &u, &all), 0);
    pgd_api_resp_free(r);
    sse_events ev;
    bool framed = split_events(all.data, all.len, &ev);
    CHECK(framed);
    if (framed) {
        CHECK(types_are(&ev, KEYS("response.created", "response.in_progress",
                                  MSG_EVENTS(DELTA, DELTA), "response.completed")));
        for (size_t i = 0; i < ev.n; i++) {
            json_t *l = json_object_get(ev.ev[i].j, "logprobs");
            if (l) CHECK(json_is_array(l) && json_array_size(l) == 0);
        }
        /* check_stream with the service tier given: check the head separately */
        json_t *fin = json_object_get(ev.ev[ev.n - 1].j, "response");
        CHECK(response_keys(fin, true));
        CHECK_EQ_STR(sget(fin, "service_tier"), "default");
        json_t *output = json_object_get(fin, "output");
        REQUIRE(json_array_size(output) == 1);
        check_message_item(json_array_get(output, 0), "ab", NULL, 0, "completed");
    }
    events_free(&ev);

    /* nothing at all */
    pgd_api_resp_request_free(&req);
    REQUIRE(rparse("{'stream':true,'input':'hi'}", &req) == 0);
    REQUIRE(pgd_api_resp_new(&m, &req, true, &r) == 0);
    pgd_buf_reset(&all);
    CHECK_EQ_INT(pgd_api_resp_begin(r, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_end(r, PGD_FINISH_STOP, &u, &all), 0);
    pgd_api_resp_free(r);
    framed = split_events(all.data, all.len, &ev);
    CHECK(framed);
    if (framed) {
        CHECK(ev.n >= 3);
        CHECK_EQ_STR(ev.ev[0].type, "response.created");
        CHECK_EQ_STR(ev.ev[1].type, "response.in_progress");
        CHECK_EQ_STR(ev.ev[ev.n - 1].type, "response.completed");
        json_t *fin = check_stream(&ev, &m, &req);
        if (fin) {
            json_t *output = json_object_get(fin, "output");
            REQUIRE(json_array_size(output) == 1);
            check_message_item(json_array_get(output, 0), "", NULL, 0, "completed");
        }
    }
    events_free(&ev);

    /* a call alone */
    REQUIRE(pgd_api_resp_new(&m, &req, true, &r) == 0);
    pgd_buf_reset(&all);
    CHECK_EQ_INT(pgd_api_resp_begin(r, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_calls(r, k_calls, 1, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_end(r, PGD_FINISH_TOOL_CALLS, &u, &all), 0);
    pgd_api_resp_free(r);
    framed = split_events(all.data, all.len, &ev);
    CHECK(framed);
    if (framed) {
        CHECK(types_are(&ev, KEYS("response.created", "response.in_progress", CALL_EVENTS,
                                  "response.completed")));
        json_t *fin = check_stream(&ev, &m, &req);
        if (fin) {
            json_t *output = json_object_get(fin, "output");
            REQUIRE(json_array_size(output) == 1);
            check_call_item(json_array_get(output, 0), &k_calls[0]);
        }
    }
    events_free(&ev);
    pgd_buf_free(&all);
    pgd_api_resp_request_free(&req);
}

static void check_fail_tail(const sse_events *ev, const char *message) {
    REQUIRE(ev->n >= 4);
    const json_t *err = ev->ev[ev->n - 2].j, *failed = ev->ev[ev->n - 1].j;
    CHECK_EQ_STR(ev->ev[ev->n - 2].type, "error");
    CHECK_EQ_STR(ev->ev[ev->n - 1].type, "response.failed");
    CHECK_EQ_STR(sget(err, "message"), message);
    CHECK_EQ_STR(sget(err, "code"), "server_error");
    CHECK(json_is_null(json_object_get(err, "param")));
    json_t *resp = json_object_get(failed, "response");
    CHECK_EQ_STR(sget(resp, "status"), "failed");
    json_t *e = json_object_get(resp, "error");
    CHECK(keys_are(e, KEYS("code", "message")));
    CHECK_EQ_STR(sget(e, "code"), "server_error");
    CHECK_EQ_STR(sget(e, "message"), message);
}

static void test_stream_fail(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse("{'stream':true,'input':'hi'}", &req) == 0);
    pgd_api_meta m = {"resp_fail", 3, S("m"), NULL};
    pgd_api_error e;
    memset(&e, 0, sizeof e);
    (void)pgd_api_error_set(&e, 500, NULL, "server_error", "the engine failed");

    /* after some text */
    pgd_api_resp *r = NULL;
    REQUIRE(pgd_api_resp_new(&m, &req, true, &r) == 0);
    pgd_buf all = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_resp_begin(r, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_text(r, S("Hi"), NULL, 0, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_fail(r, &e, &all), 0);
    pgd_api_resp_free(r);
    sse_events ev;
    bool framed = split_events(all.data, all.len, &ev);
    CHECK(framed);
    if (framed) {
        check_stream(&ev, &m, &req);
        check_fail_tail(&ev, "the engine failed");
        CHECK_EQ_STR(ev.ev[2].type, "response.output_item.added");
        /* the failed response shows the message written so far */
        const json_t *it = json_array_get(
            json_object_get(json_object_get(ev.ev[ev.n - 1].j, "response"), "output"), 0);
        CHECK_EQ_STR(sget0(it, "status"), "incomplete");
        CHECK_EQ_STR(sget0(json_array_get(json_object_get(it, "content"), 0), "text"), "Hi");
    }
    events_free(&ev);

    /* before anything */
    REQUIRE(pgd_api_resp_new(&m, &req, true, &r) == 0);
    pgd_buf_reset(&all);
    CHECK_EQ_INT(pgd_api_resp_begin(r, &all), 0);
    CHECK_EQ_INT(pgd_api_resp_fail(r, &e, &all), 0);
    pgd_api_resp_free(r);
    framed = split_events(all.data, all.len, &ev);
    CHECK(framed);
    if (framed) {
        CHECK(types_are(
            &ev, KEYS("response.created", "response.in_progress", "error", "response.failed")));
        check_stream(&ev, &m, &req);
        check_fail_tail(&ev, "the engine failed");
    }
    events_free(&ev);
    pgd_buf_free(&all);
    pgd_api_resp_request_free(&req);
}

/* ---- what a stored response keeps ---------------------------------------------------------- */

static void test_conversation_and_object(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse("{'instructions':'Be brief.','input':[{'role':'user','content':'hi'}]}", &req) ==
            0);
    pgd_api_meta m = {"resp_conv", 5, S("m"), NULL};
    for (int calls_only = 0; calls_only < 2; calls_only++) {
        for (int stream = 0; stream < 2; stream++) {
            pgd_api_resp *r = NULL;
            REQUIRE(pgd_api_resp_new(&m, &req, stream, &r) == 0);
            pgd_buf out = PGD_BUF_INIT, obj = PGD_BUF_INIT;
            CHECK_EQ_INT(pgd_api_resp_object(r, &obj), PGD_EINVAL); /* not ended */
            if (!calls_only) CHECK_EQ_INT(pgd_api_resp_text(r, S("Sure."), NULL, 0, &out), 0);
            CHECK_EQ_INT(pgd_api_resp_calls(r, k_calls, 2, &out), 0);
            CHECK_EQ_INT(pgd_api_resp_end(r, PGD_FINISH_STOP, &k_usage, &out), 0);
            CHECK_EQ_INT(pgd_api_resp_object(r, &obj), 0);
            json_t *o = load(obj.data, obj.len);
            if (!stream) { /* the whole answer is that object */
                json_t *w = load(out.data, out.len);
                CHECK(w && o && json_equal(w, o));
                json_decref(w);
            } else { /* the stream's last event holds it */
                sse_events ev;
                if (split_events(out.data, out.len, &ev)) {
                    CHECK(json_equal(json_object_get(ev.ev[ev.n - 1].j, "response"), o));
                    events_free(&ev);
                } else {
                    CHECK(false);
                }
            }
            json_decref(o);
            /* the conversation: the input (not the instructions), then the answer as one
             * assistant message with its calls */
            json_t *conv = NULL;
            REQUIRE(pgd_api_resp_conversation(r, &req, &conv) == 0);
            char *want_q =
                dq(calls_only
                       ? "[{'role':'user','content':'hi'},{'role':'assistant','content':null,"
                         "'tool_calls':[{'id':'call_aaaaaaaaaaaaaaaaaaaaaaaa','type':'function',"
                         "'function':{'name':'get_weather','arguments':'{\\'city\\': "
                         "\\'Paris\\'}'}},{'id':'call_bbbbbbbbbbbbbbbbbbbbbbbb','type':'function',"
                         "'function':{'name':'ping','arguments':'{}'}}]}]"
                       : "[{'role':'user','content':'hi'},{'role':'assistant','content':'Sure.',"
                         "'tool_calls':[{'id':'call_aaaaaaaaaaaaaaaaaaaaaaaa','type':'function',"
                         "'function':{'name':'get_weather','arguments':'{\\'city\\': "
                         "\\'Paris\\'}'}},{'id':'call_bbbbbbbbbbbbbbbbbbbbbbbb','type':'function',"
                         "'function':{'name':'ping','arguments':'{}'}}]}]");
            json_t *want = json_loads(want_q, 0, NULL);
            free(want_q);
            CHECK(want && json_equal(conv, want));
            if (!json_equal(conv, want)) {
                char *got = json_dumps(conv, JSON_COMPACT);
                fprintf(stderr, "  conversation: %s\n", got ? got : "?");
                free(got);
            }
            json_decref(want);
            json_decref(conv);
            pgd_buf_free(&out);
            pgd_buf_free(&obj);
            pgd_api_resp_free(r);
        }
    }
    pgd_api_resp_request_free(&req);
}

#define RS_EVENTS(...)                                                                             \
    "response.output_item.added", "response.content_part.added", __VA_ARGS__,                      \
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done"
#define RS_DELTA "response.reasoning_text.delta"

/* A thinking model's answer: a reasoning item before the message (streamed: its own events),
 * the same object whole; cut short in its reasoning, the reasoning alone; its reasoning kept in
 * the conversation as the assistant message's reasoning_content. */
static void test_reasoning_items(void) {
    pgd_api_resp_request req;
    memset(&req, 0, sizeof req);
    REQUIRE(rparse("{'input':'hi','tools':[" WEATHER_R "]}", &req) == 0);
    pgd_api_meta m = {"resp_rs", 9, S("m"), NULL};
    for (int kase = 0; kase < 3; kase++) { /* text; calls; cut in the reasoning */
        json_t *objs[2] = {NULL, NULL};
        for (int stream = 0; stream < 2; stream++) {
            pgd_api_resp *r = NULL;
            REQUIRE(pgd_api_resp_new(&m, &req, stream, &r) == 0);
            pgd_buf out = PGD_BUF_INIT;
            if (stream) CHECK_EQ_INT(pgd_api_resp_begin(r, &out), 0);
            CHECK_EQ_INT(pgd_api_resp_reasoning(r, S("Let me "), &out), 0);
            CHECK_EQ_INT(pgd_api_resp_reasoning(r, S(""), &out), 0); /* nothing */
            CHECK_EQ_INT(pgd_api_resp_reasoning(r, S("see."), &out), 0);
            if (kase == 0) CHECK_EQ_INT(pgd_api_resp_text(r, S("Hi!"), NULL, 0, &out), 0);
            if (kase == 1) CHECK_EQ_INT(pgd_api_resp_calls(r, k_calls, 1, &out), 0);
            pgd_finish f = kase == 2 ? PGD_FINISH_LENGTH : PGD_FINISH_STOP;
            CHECK_EQ_INT(pgd_api_resp_end(r, f, &k_usage, &out), 0);
            if (stream) {
                sse_events ev;
                REQUIRE(split_events(out.data, out.len, &ev));
                const char *end = kase == 2 ? "response.incomplete" : "response.completed";
                if (kase == 0)
                    CHECK(types_are(&ev,
                                    KEYS("response.created", "response.in_progress",
                                         RS_EVENTS(RS_DELTA, RS_DELTA), MSG_EVENTS(DELTA), end)));
                else if (kase == 1)
                    CHECK(types_are(&ev, KEYS("response.created", "response.in_progress",
                                              RS_EVENTS(RS_DELTA, RS_DELTA), CALL_EVENTS, end)));
                else
                    CHECK(types_are(&ev, KEYS("response.created", "response.in_progress",
                                              RS_EVENTS(RS_DELTA, RS_DELTA), end)));
                json_t *final = check_stream(&ev, &m, &req);
                CHECK(final != NULL);
                objs[1] = final ? json_deep_copy(final) : NULL;
                events_free(&ev);
            } else {
                objs[0] = load(out.data, out.len);
            }
            if (stream) { /* the conversation keeps the reasoning */
                json_t *conv = NULL;
                REQUIRE(pgd_api_resp_conversation(r, &req, &conv) == 0);
                json_t *last = json_array_get(conv, json_array_size(conv) - 1);
                CHECK_EQ_STR(sget(last, "reasoning_content"), "Let me see.");
                if (kase == 2) CHECK(json_is_null(json_object_get(last, "content")));
                json_decref(conv);
            }
            pgd_buf_free(&out);
            pgd_api_resp_free(r);
        }
        REQUIRE(objs[0] && objs[1]);
        json_t *output = json_object_get(objs[0], "output");
        CHECK_EQ_INT(json_array_size(output), kase == 2 ? 1 : 2);
        json_t *rs = json_array_get(output, 0);
        CHECK(keys_are(rs, KEYS("id", "type", "summary", "content", "status")));
        CHECK_EQ_STR(sget(rs, "type"), "reasoning");
        CHECK_EQ_STR(sget(rs, "status"), "completed");
        json_t *part = json_array_get(json_object_get(rs, "content"), 0);
        CHECK(keys_are(part, KEYS("type", "text")));
        CHECK_EQ_STR(sget(part, "type"), "reasoning_text");
        CHECK_EQ_STR(sget(part, "text"), "Let me see.");
        if (kase < 2)
            CHECK_EQ_STR(sget(json_array_get(output, 1), "type"),
                         kase == 0 ? "message" : "function_call");
        CHECK_EQ_STR(sget(objs[0], "status"), kase == 2 ? "incomplete" : "completed");
        strip_item_ids(objs[0]);
        strip_item_ids(objs[1]);
        CHECK(json_equal(objs[0], objs[1])); /* streamed = whole */
        json_decref(objs[0]);
        json_decref(objs[1]);
    }
    pgd_api_resp_request_free(&req);
}

int main(void) {
    RUN(test_response_whole);
    RUN(test_reasoning_items);
    RUN(test_response_defaults_and_copies);
    RUN(test_response_echo_objects);
    RUN(test_response_edges);
    RUN(test_stream);
    RUN(test_stream_call_grows);
    RUN(test_stream_plain_and_empty);
    RUN(test_stream_fail);
    RUN(test_conversation_and_object);
    return test_summary();
}
