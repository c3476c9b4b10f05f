/*
 * tests/fuzz/fuzz_api_responses.c — libFuzzer target: POST /v1/responses bodies through
 * pgd_api_resp_request_parse, and every accepted request's answer built from the body's own
 * bytes (api/responses.h).
 *
 * Input: a request body (previous_response_id "resp_prev" finds a stored turn). A refusal must be a
 * 400 (PGD_EINVAL) or 500 (PGD_ENOMEM) with a valid JSON error body, and a param that
 * pgd_api_resp_param leaves as it is (already a Responses name). An accepted request must hold a
 * chat request with at least one message and its own echo of the request fields; then its answer is
 * built twice, whole and streamed, from pieces of the body taken as output text (and, when it
 * offers tools, as calls; for one body length in three, its first piece as a reasoning item's text
 * too, which whole and streamed must hold alike): the whole answer must be one JSON object whose
 * output text is the pieces
 * joined, and the stream a run of "event: T\ndata: {...}\n\n" events whose type is T, whose
 * sequence numbers count up from 0, whose deltas join to the same text and whose last event holds
 * the same output. The body is copied into a buffer of exactly its size so ASan catches a read past
 * it.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/error.h"
#include "api/jsonutil.h"
#include "api/responses.h"
#include "common/error.h"
#include "fuzz_util.h"

static json_t *load(const char *s, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_ALLOW_NUL, &je);
    FUZZ_CHECK(j != NULL);
    return j;
}

static void check_error(const pgd_api_resp_request *r, int rc, const pgd_api_error *e) {
    FUZZ_CHECK(rc == PGD_EINVAL || rc == PGD_ENOMEM);
    FUZZ_CHECK(rc == PGD_ENOMEM ? e->status == 500 : e->status == 400);
    FUZZ_CHECK(e->message[0] != '\0');
    char p[sizeof e->param];
    if (e->param[0]) FUZZ_CHECK(!strcmp(pgd_api_resp_param(r, e->param, p, sizeof p), e->param));
    pgd_buf b = PGD_BUF_INIT;
    FUZZ_CHECK(pgd_api_error_body(e, &b) == 0);
    json_decref(load(b.data, b.len));
    pgd_buf_free(&b);
}

/* The output text of a response object: its messages' output_text joined. */
static void output_text(const json_t *resp, pgd_buf *out) {
    const json_t *output = json_object_get(resp, "output");
    FUZZ_CHECK(json_is_array(output) && json_array_size(output) >= 1);
    for (size_t i = 0; i < json_array_size(output); i++) {
        const json_t *it = json_array_get(output, i);
        const char *type = json_string_value(json_object_get(it, "type"));
        FUZZ_CHECK(type);
        if (strcmp(type, "message")) continue;
        const json_t *part = json_array_get(json_object_get(it, "content"), 0);
        const json_t *t = json_object_get(part, "text");
        FUZZ_CHECK(json_is_string(t));
        pgd_buf_append(out, json_string_value(t), json_string_length(t));
    }
}

/* The reasoning items' text of a response object. */
static void reasoning_text(const json_t *resp, pgd_buf *out) {
    const json_t *output = json_object_get(resp, "output");
    for (size_t i = 0; i < json_array_size(output); i++) {
        const json_t *it = json_array_get(output, i);
        if (strcmp(json_string_value(json_object_get(it, "type")), "reasoning")) continue;
        FUZZ_CHECK(i == 0); /* before the answer */
        const json_t *t =
            json_object_get(json_array_get(json_object_get(it, "content"), 0), "text");
        FUZZ_CHECK(json_is_string(t));
        pgd_buf_append(out, json_string_value(t), json_string_length(t));
    }
}

/* Feeds the answer: `text` cut into pieces of `step` bytes, and a call after the first piece
 * when calls is true; the first piece as reasoning first when reason is true. Whether every
 * piece is valid UTF-8 (each delta is made valid alone). */
static bool feed(pgd_api_resp *r, const char *text, size_t n, size_t step, bool calls, bool reason,
                 pgd_buf *sse) {
    bool valid = true;
    if (reason)
        FUZZ_CHECK(pgd_api_resp_reasoning(r, (pgd_str){text, n < step ? n : step}, sse) == 0);
    static const pgd_api_tool_call call = {
        .id = "call_0123456789abcdef01234567", .name = {"f", 1}, .arguments = {"{}", 2}};
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        valid = valid && pgd_api_utf8_valid(text + i, k);
        FUZZ_CHECK(pgd_api_resp_text(r, (pgd_str){text + i, k}, NULL, 0, sse) == 0);
        if (calls && i == 0) FUZZ_CHECK(pgd_api_resp_calls(r, &call, 1, sse) == 0);
    }
    return valid;
}

static void check_answer(const pgd_api_resp_request *q, const char *text, size_t n) {
    pgd_api_meta m = {.id = "resp_0", .created = 1, .model = {"m", 1}};
    pgd_api_usage u = {3, 4, 1, 0};
    size_t step = n % 7 + 1;
    bool calls = q->chat.tools.n > 0, reason = n % 3 == 0;
    pgd_finish fin = n % 2 ? PGD_FINISH_LENGTH : PGD_FINISH_STOP;
    /* whole */
    pgd_api_resp *r = NULL;
    pgd_buf whole = PGD_BUF_INIT, want = PGD_BUF_INIT, got = PGD_BUF_INIT;
    FUZZ_CHECK(pgd_api_resp_new(&m, q, false, &r) == 0);
    feed(r, text, n, step, calls, reason, NULL);
    FUZZ_CHECK(pgd_api_resp_end(r, fin, &u, &whole) == 0);
    pgd_api_resp_free(r);
    json_t *wj = load(whole.data, whole.len);
    output_text(wj, &want);
    /* streamed */
    pgd_buf sse = PGD_BUF_INIT;
    FUZZ_CHECK(pgd_api_resp_new(&m, q, true, &r) == 0);
    FUZZ_CHECK(pgd_api_resp_begin(r, &sse) == 0);
    bool valid = feed(r, text, n, step, calls, reason, &sse);
    FUZZ_CHECK(pgd_api_resp_end(r, fin, &u, &sse) == 0);
    pgd_api_resp_free(r);
    int64_t seq = 0;
    json_t *last = NULL;
    for (size_t at = 0; at < sse.len;) {
        const char *ev = sse.data + at, *nl = memchr(ev, '\n', sse.len - at);
        FUZZ_CHECK(nl && !strncmp(ev, "event: ", 7));
        const char *data = nl + 1, *end = memchr(data, '\n', sse.len - (size_t)(data - sse.data));
        FUZZ_CHECK(end && !strncmp(data, "data: ", 6) && end + 1 < sse.data + sse.len &&
                   end[1] == '\n');
        json_t *o = load(data + 6, (size_t)(end - data - 6));
        const char *type = json_string_value(json_object_get(o, "type"));
        FUZZ_CHECK(type && strlen(type) == (size_t)(nl - ev - 7) &&
                   !memcmp(type, ev + 7, strlen(type)));
        FUZZ_CHECK(json_integer_value(json_object_get(o, "sequence_number")) == seq++);
        if (!strcmp(type, "response.output_text.delta")) {
            const json_t *d = json_object_get(o, "delta");
            pgd_buf_append(&got, json_string_value(d), json_string_length(d));
        }
        json_decref(last);
        last = o;
        at = (size_t)(end + 2 - sse.data);
    }
    const char *lt = json_string_value(json_object_get(last, "type"));
    FUZZ_CHECK(
        lt && !strcmp(lt, fin == PGD_FINISH_LENGTH ? "response.incomplete" : "response.completed"));
    pgd_buf final = PGD_BUF_INIT, rw = PGD_BUF_INIT, rf = PGD_BUF_INIT;
    output_text(json_object_get(last, "response"), &final);
    FUZZ_CHECK(final.len == want.len && !memcmp(final.data, want.data, want.len));
    reasoning_text(wj, &rw);
    reasoning_text(json_object_get(last, "response"), &rf);
    FUZZ_CHECK(rw.len == rf.len && (!rw.len || !memcmp(rw.data, rf.data, rw.len)));
    FUZZ_CHECK((rw.len > 0) == (reason && n > 0)); /* a reasoning item when one was fed */
    pgd_buf_free(&rw);
    pgd_buf_free(&rf);
    if (valid) /* the deltas join to the text */
        FUZZ_CHECK(got.len == want.len && (!want.len || !memcmp(got.data, want.data, want.len)));
    json_decref(last);
    json_decref(wj);
    pgd_buf_free(&final);
    pgd_buf_free(&sse);
    pgd_buf_free(&whole);
    pgd_buf_free(&want);
    pgd_buf_free(&got);
}

/* previous_response_id "resp_prev": a stored turn (a question and a call); others: none. */
static const json_t *lookup(void *ud, const char *id) {
    static json_t *conv;
    (void)ud;
    if (!conv)
        conv = json_pack("[{s:s,s:s},{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}}]}]", "role", "user",
                         "content", "weather?", "role", "assistant", "content", "tool_calls", "id",
                         "c1", "type", "function", "function", "name", "f", "arguments", "{}");
    return strcmp(id, "resp_prev") ? NULL : conv;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *body = malloc(size ? size : 1);
    if (!body) return 0;
    if (size) memcpy(body, data, size);
    pgd_error_clear();
    pgd_api_resp_request q;
    pgd_api_error e;
    memset(&e, 0, sizeof e);
    int rc = pgd_api_resp_request_parse_stored(body, size, lookup, NULL, &q, &e);
    if (rc == 0) {
        FUZZ_CHECK(q.chat.kind == PGD_API_CHAT && q.chat.messages.n >= 1 && q.echo);
        FUZZ_CHECK(q.n_msgs == q.chat.messages.n && q.msg_src && q.history);
        FUZZ_CHECK(json_array_size(q.history) <= q.n_msgs);
        check_answer(&q, body, size);
    } else {
        check_error(&q, rc, &e);
    }
    pgd_api_resp_request_free(&q);
    pgd_api_resp_request_free(&q); /* back to empty: a second free is harmless */
    free(body);
    return 0;
}
