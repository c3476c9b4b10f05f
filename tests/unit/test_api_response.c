/*
 * tests/unit/test_api_response.c — api/response and api/jsonutil: every builder's output is
 * parsed back with jansson and checked field by field against the OpenAI shapes (exact key
 * sets: nothing missing, nothing extra), UTF-8 repair against Python's
 * bytes.decode("utf-8", "replace") results, and the UTF-8 safety of logprob tokens.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonutil.h"
#include "api/response.h"
#include "common/error.h"
#include "testutil.h"

#define FFFD "\xef\xbf\xbd"

/* ---- helpers ------------------------------------------------------------------------------- */

/* The builder output must be one line of valid UTF-8 JSON. Returns the parsed tree or NULL. */
static json_t *load(const pgd_buf *b) {
    if (!b->data) return NULL;
    CHECK(strlen(b->data) == b->len);
    CHECK(memchr(b->data, '\n', b->len) == NULL);
    CHECK(pgd_api_utf8_valid(b->data, b->len));
    json_error_t je;
    json_t *j = json_loadb(b->data, b->len, JSON_ALLOW_NUL, &je); /* "\u0000" is valid JSON */
    if (!j) fprintf(stderr, "  invalid JSON (%s): %s\n", je.text, b->data);
    return j;
}

/* true when `o` is an object whose keys are exactly keys[] (NULL-terminated). */
static int keys_are(const json_t *o, const char *const *keys) {
    if (!json_is_object(o)) {
        fprintf(stderr, "  not an object\n");
        return 0;
    }
    size_t n = 0;
    int ok = 1;
    for (; keys[n]; n++) {
        if (!json_object_get(o, keys[n])) {
            fprintf(stderr, "  missing key '%s'\n", keys[n]);
            ok = 0;
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
        ok = 0;
    }
    return ok;
}
#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *sget(const json_t *o, const char *k) {
    return json_string_value(json_object_get(o, k));
}
static long long iget(const json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    CHECK(json_is_integer(v));
    return json_integer_value(v);
}
static double nget(const json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    CHECK(json_is_number(v));
    return json_number_value(v);
}

static pgd_str S(const char *s) {
    return (pgd_str){s, strlen(s)};
}

static void check_bytes(const json_t *arr, const char *want, size_t n) {
    REQUIRE(json_is_array(arr));
    REQUIRE(json_array_size(arr) == n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        CHECK(json_is_integer(v) && json_integer_value(v) == (unsigned char)want[i]);
    }
}

static void check_usage(const json_t *u, long long p, long long c, long long cached) {
    REQUIRE(keys_are(
        u, KEYS("prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details")));
    CHECK_EQ_INT(iget(u, "prompt_tokens"), p);
    CHECK_EQ_INT(iget(u, "completion_tokens"), c);
    CHECK_EQ_INT(iget(u, "total_tokens"), p + c);
    json_t *d = json_object_get(u, "prompt_tokens_details");
    REQUIRE(keys_are(d, KEYS("cached_tokens")));
    CHECK_EQ_INT(iget(d, "cached_tokens"), cached);
}

static void check_head(const json_t *j, const char *id, const char *object, long long created,
                       const char *model) {
    CHECK_EQ_STR(sget(j, "id"), id);
    CHECK_EQ_STR(sget(j, "object"), object);
    CHECK_EQ_INT(iget(j, "created"), created);
    CHECK_EQ_STR(sget(j, "model"), model);
}

/* ---- UTF-8 ---------------------------------------------------------------------------------- */

static void test_utf8(void) {
    /* expectations from Python 3: bytes.decode("utf-8", "replace").encode() */
    static const struct {
        const char *in;
        size_t n;
        const char *out;
        size_t chars;
    } cases[] = {
        {"", 0, "", 0},
        {"abc", 3, "abc", 3},
        {"\xe2\x82\xac", 3, "\xe2\x82\xac", 1},
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80", 1},
        {"a\0b", 3, "a\0b", 3},
        {"\xe2\x82", 2, FFFD, 1},
        {"\xf0\x9f\x98"
         "A",
         4, FFFD "A", 2},
        {"\xc0\xaf", 2, FFFD FFFD, 2},
        {"\xed\xa0\x80", 3, FFFD FFFD FFFD, 3},
        {"\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, 4},
        {"\xe0\x80\x80", 3, FFFD FFFD FFFD, 3},
        {"a\x80"
         "b",
         3, "a" FFFD "b", 3},
        {"\xff\xfe", 2, FFFD FFFD, 2},
        {"\xe2\x82\xe2\x82\xac", 5, FFFD "\xe2\x82\xac", 2},
        {"\xf1\x80\x80", 3, FFFD, 1},
        {"\xdf", 1, FFFD, 1},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        size_t out_n = strlen(cases[i].out);
        if (i == 4) out_n = 3; /* the NUL case */
        bool valid = out_n == cases[i].n && memcmp(cases[i].in, cases[i].out, out_n) == 0;
        CHECK_EQ_INT(pgd_api_utf8_valid(cases[i].in, cases[i].n), valid);
        pgd_buf b = PGD_BUF_INIT;
        pgd_buf_puts(&b, "<");
        CHECK_EQ_INT(pgd_api_utf8_sanitize(cases[i].in, cases[i].n, &b), 0);
        if (!(b.len == out_n + 1 && memcmp(b.data + 1, cases[i].out, out_n) == 0)) {
            fprintf(stderr, "  sanitize case %zu wrong\n", i);
            tu_failed_checks++;
        }
        CHECK(pgd_api_utf8_valid(b.data, b.len));
        CHECK_EQ_INT(pgd_api_utf8_chars(cases[i].in, cases[i].n), cases[i].chars);
        pgd_buf_free(&b);
    }
}

/* Every 1- and 2-byte string and random longer ones: the repaired string is valid, equals the
 * input when the input is valid, and becomes a JSON string jansson accepts. */
static void test_utf8_exhaustive(void) {
    unsigned char buf[8];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int trial = 0; trial < 65536 + 256 + 20000; trial++) {
        size_t n;
        if (trial < 256) {
            buf[0] = (unsigned char)trial;
            n = 1;
        } else if (trial < 256 + 65536) {
            buf[0] = (unsigned char)((trial - 256) >> 8);
            buf[1] = (unsigned char)(trial - 256);
            n = 2;
        } else {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            n = 3 + (size_t)(x % 6);
            for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(x >> (8 * i));
            if (x & 1) buf[0] = (unsigned char)(0xE0 + (x >> 60)); /* more multi-byte leads */
        }
        pgd_buf b = PGD_BUF_INIT;
        REQUIRE(pgd_api_utf8_sanitize((const char *)buf, n, &b) == 0);
        bool valid = pgd_api_utf8_valid((const char *)buf, n);
        bool ok = pgd_api_utf8_valid(b.data, b.len);
        if (valid) ok = ok && b.len == n && memcmp(b.data, buf, n) == 0;
        json_t *j = pgd__api_jstr((const char *)buf, n);
        ok = ok && j && json_string_length(j) == b.len &&
             memcmp(json_string_value(j), b.data, b.len) == 0;
        json_decref(j);
        if (!ok) {
            fprintf(stderr, "  utf8 repair failed for %zu bytes starting %02x\n", n, buf[0]);
            tu_failed_checks++;
            pgd_buf_free(&b);
            return;
        }
        pgd_buf_free(&b);
    }
}

/* ---- ids, SSE -------------------------------------------------------------------------------- */

static void test_ids_and_sse(void) {
    char id[PGD_API_ID_CAP];
    pgd_api_format_id(id, "chatcmpl-", 0x0123456789abcdefull, 0xfedcba9876543210ull);
    CHECK_EQ_STR(id, "chatcmpl-0123456789abcdeffedcba9876543210");
    char a[PGD_API_ID_CAP], b[PGD_API_ID_CAP];
    pgd_api_new_id(a, PGD_API_CHAT);
    pgd_api_new_id(b, PGD_API_COMPLETION);
    CHECK(strncmp(a, "chatcmpl-", 9) == 0 && strlen(a) == 9 + 32);
    CHECK(strncmp(b, "cmpl-", 5) == 0 && strlen(b) == 5 + 32);
    CHECK(strspn(a + 9, "0123456789abcdef") == 32);
    CHECK(strcmp(a + 9, b + 5) != 0);

    pgd_buf s = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_sse_data("{\"a\":1}", 7, &s), 0);
    CHECK_EQ_STR(s.data, "data: {\"a\":1}\n\n");
    CHECK_EQ_INT(pgd_api_sse_data("{\"a\":\n1}", 8, &s), PGD_EINVAL);
    CHECK_EQ_INT(pgd_api_sse_data("x\ry", 3, &s), PGD_EINVAL);
    CHECK_EQ_STR(s.data, "data: {\"a\":1}\n\n"); /* unchanged by the refusals */
    CHECK_EQ_INT(pgd_buf_puts(&s, PGD_API_SSE_DONE), 0);
    CHECK_EQ_STR(s.data, "data: {\"a\":1}\n\ndata: [DONE]\n\n");
    pgd_buf_free(&s);
}

/* ---- chat.completion ----------------------------------------------------------------------------
 */

static void check_chat_top(const json_t *o, const char *token, size_t nbytes, const char *bytes,
                           double logprob) {
    REQUIRE(keys_are(o, KEYS("token", "logprob", "bytes")));
    CHECK_EQ_STR(sget(o, "token"), token);
    CHECK_NEAR(nget(o, "logprob"), logprob, 1e-6);
    check_bytes(json_object_get(o, "bytes"), bytes, nbytes);
}

static void test_chat_completion(void) {
    /* a token split inside a character ("\xf0\x9f" + "\x98\x80" is U+1F600) */
    const pgd_api_top_logprob top0[] = {{S("Hi"), -0.25f}, {S("Hey"), -1.5f}};
    const pgd_api_top_logprob top1[] = {{{" \xf0\x9f", 3}, -0.1f}, {{"\xff", 1}, -INFINITY}};
    const pgd_api_token_logprob lps[] = {
        {S("Hi"), -0.25f, top0, 2},
        {{" \xf0\x9f", 3}, -0.1f, top1, 2},
        {{"\x98\x80", 2}, -INFINITY, NULL, 0},
    };
    const pgd_api_choice choices[] = {
        {0,
         S("Hello!"),
         PGD_FINISH_STOP,
         false,
         NULL,
         0,
         0,
         false,
         NULL,
         0,
         NULL,
         0,
         false,
         {NULL, 0}},
        {1,
         S("Hi \xf0\x9f\x98\x80"),
         PGD_FINISH_LENGTH,
         true,
         lps,
         3,
         0,
         false,
         NULL,
         0,
         NULL,
         0,
         false,
         {NULL, 0}},
        {2, S(""), PGD_FINISH_STOP, true, NULL, 0, 0, false, NULL, 0, NULL, 0, false, {NULL, 0}},
    };
    pgd_api_meta m = {"chatcmpl-abc", 1700000000, S("smol"), NULL};
    pgd_api_usage u = {12, 7, 8, 0};
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_api_chat_completion(&m, choices, 3, &u, &b) == 0);
    json_t *j = load(&b);
    REQUIRE(j != NULL);
    CHECK(keys_are(j, KEYS("id", "object", "created", "model", "choices", "usage")));
    check_head(j, "chatcmpl-abc", "chat.completion", 1700000000, "smol");
    check_usage(json_object_get(j, "usage"), 12, 7, 8);
    json_t *arr = json_object_get(j, "choices");
    REQUIRE(json_is_array(arr) && json_array_size(arr) == 3);
    static const char *const finish[] = {"stop", "length", "stop"};
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(arr, i);
        REQUIRE(keys_are(c, KEYS("index", "message", "logprobs", "finish_reason")));
        CHECK_EQ_INT(iget(c, "index"), i);
        CHECK_EQ_STR(sget(c, "finish_reason"), finish[i]);
        json_t *msg = json_object_get(c, "message");
        REQUIRE(keys_are(msg, KEYS("role", "content")));
        CHECK_EQ_STR(sget(msg, "role"), "assistant");
    }
    CHECK_EQ_STR(sget(json_object_get(json_array_get(arr, 0), "message"), "content"), "Hello!");
    CHECK(json_is_null(json_object_get(json_array_get(arr, 0), "logprobs")));
    CHECK_EQ_STR(sget(json_object_get(json_array_get(arr, 1), "message"), "content"),
                 "Hi \xf0\x9f\x98\x80");
    /* choice 2: logprobs asked, no tokens: {"content": []} */
    json_t *lp2 = json_object_get(json_array_get(arr, 2), "logprobs");
    CHECK(keys_are(lp2, KEYS("content")));
    CHECK(json_is_array(json_object_get(lp2, "content")) &&
          json_array_size(json_object_get(lp2, "content")) == 0);

    json_t *lp = json_object_get(json_array_get(arr, 1), "logprobs");
    REQUIRE(keys_are(lp, KEYS("content")));
    json_t *content = json_object_get(lp, "content");
    REQUIRE(json_is_array(content) && json_array_size(content) == 3);
    static const char *const want_token[] = {"Hi", " " FFFD, FFFD FFFD};
    static const char *const want_bytes[] = {"Hi", " \xf0\x9f", "\x98\x80"};
    static const size_t want_nbytes[] = {2, 3, 2};
    static const double want_lp[] = {-0.25, -0.1, -9999.0};
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(content, i);
        REQUIRE(keys_are(e, KEYS("token", "logprob", "bytes", "top_logprobs")));
        CHECK_EQ_STR(sget(e, "token"), want_token[i]);
        CHECK_NEAR(nget(e, "logprob"), want_lp[i], 1e-6);
        check_bytes(json_object_get(e, "bytes"), want_bytes[i], want_nbytes[i]);
        json_t *tops = json_object_get(e, "top_logprobs");
        REQUIRE(json_is_array(tops));
        CHECK_EQ_INT(json_array_size(tops), lps[i].n_top);
    }
    json_t *t0 = json_object_get(json_array_get(content, 0), "top_logprobs");
    check_chat_top(json_array_get(t0, 0), "Hi", 2, "Hi", -0.25);
    check_chat_top(json_array_get(t0, 1), "Hey", 3, "Hey", -1.5);
    json_t *t1 = json_object_get(json_array_get(content, 1), "top_logprobs");
    check_chat_top(json_array_get(t1, 0), " " FFFD, 3, " \xf0\x9f", -0.1);
    check_chat_top(json_array_get(t1, 1), FFFD, 1, "\xff", -9999.0);
    /* floats print in their shortest form; -inf as -9999.0 */
    CHECK(strstr(b.data, "\"logprob\":-0.1,") != NULL);
    CHECK(strstr(b.data, "\"logprob\":-9999.0,") != NULL);
    json_decref(j);

    /* with a system fingerprint; an unfinished choice prints finish_reason null */
    pgd_api_meta m2 = {"chatcmpl-x", 1, S("m\xff"), "fp_123"};
    pgd_api_choice c = {0,    S("x"), PGD_FINISH_NONE, false,    NULL, 0, 0, false, NULL, 0,
                        NULL, 0,      false,           {NULL, 0}};
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_completion(&m2, &c, 1, &u, &b) == 0);
    j = load(&b);
    REQUIRE(j != NULL);
    CHECK(keys_are(
        j, KEYS("id", "object", "created", "model", "system_fingerprint", "choices", "usage")));
    CHECK_EQ_STR(sget(j, "system_fingerprint"), "fp_123");
    CHECK_EQ_STR(sget(j, "model"), "m" FFFD);
    CHECK(json_is_null(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason")));
    json_decref(j);
    pgd_buf_free(&b);
}

/* ---- chat stream ---------------------------------------------------------------------------- */

/* Checks one chunk's common shape; returns its only choice (or NULL for the usage chunk). */
static json_t *check_chunk(json_t *j, const pgd_api_meta *m, bool include_usage, bool usage_chunk,
                           const char *object) {
    if (include_usage)
        CHECK(keys_are(j, KEYS("id", "object", "created", "model", "choices", "usage")));
    else
        CHECK(keys_are(j, KEYS("id", "object", "created", "model", "choices")));
    check_head(j, m->id, object, m->created, "smol");
    json_t *arr = json_object_get(j, "choices");
    CHECK(json_is_array(arr));
    if (usage_chunk) {
        CHECK_EQ_INT(json_array_size(arr), 0);
        return NULL;
    }
    if (include_usage) CHECK(json_is_null(json_object_get(j, "usage")));
    CHECK_EQ_INT(json_array_size(arr), 1);
    return json_array_get(arr, 0);
}

static void test_chat_stream(void) {
    pgd_api_meta m = {"chatcmpl-s1", 1712345678, S("smol"), NULL};
    /* two choices, include_usage on and off */
    for (int iu = 0; iu <= 1; iu++) {
        pgd_buf all = PGD_BUF_INIT, b = PGD_BUF_INIT;
        pgd_buf text[2] = {PGD_BUF_INIT, PGD_BUF_INIT};
        const char *pieces[2][3] = {{"Hel", "lo", " there"}, {"\xe4\xbd\xa0", "\xe5\xa5\xbd", "!"}};
        for (uint32_t k = 0; k < 2; k++) {
            pgd_buf_reset(&b);
            REQUIRE(pgd_api_chat_chunk_first(&m, k, iu, &b) == 0);
            json_t *j = load(&b);
            REQUIRE(j);
            json_t *c = check_chunk(j, &m, iu, false, "chat.completion.chunk");
            REQUIRE(keys_are(c, KEYS("index", "delta", "logprobs", "finish_reason")));
            CHECK_EQ_INT(iget(c, "index"), k);
            json_t *d = json_object_get(c, "delta");
            CHECK(keys_are(d, KEYS("role", "content")));
            CHECK_EQ_STR(sget(d, "role"), "assistant");
            CHECK_EQ_STR(sget(d, "content"), "");
            CHECK(json_is_null(json_object_get(c, "logprobs")));
            CHECK(json_is_null(json_object_get(c, "finish_reason")));
            json_decref(j);
        }
        for (int p = 0; p < 3; p++) {
            for (uint32_t k = 0; k < 2; k++) {
                pgd_api_choice ch = {
                    k, S(pieces[k][p]), PGD_FINISH_NONE, false, NULL, 0, 0, false, NULL, 0, NULL,
                    0, false,           {NULL, 0}};
                pgd_buf_reset(&b);
                REQUIRE(pgd_api_chat_chunk_content(&m, &ch, iu, &b) == 0);
                json_t *j = load(&b);
                REQUIRE(j);
                json_t *c = check_chunk(j, &m, iu, false, "chat.completion.chunk");
                REQUIRE(keys_are(c, KEYS("index", "delta", "logprobs", "finish_reason")));
                CHECK_EQ_INT(iget(c, "index"), k);
                json_t *d = json_object_get(c, "delta");
                CHECK(keys_are(d, KEYS("content")));
                pgd_buf_puts(&text[k], sget(d, "content"));
                CHECK(json_is_null(json_object_get(c, "logprobs")));
                CHECK(json_is_null(json_object_get(c, "finish_reason")));
                json_decref(j);
                pgd_api_sse_data(b.data, b.len, &all);
            }
        }
        CHECK_EQ_STR(text[0].data, "Hello there");
        CHECK_EQ_STR(text[1].data, "\xe4\xbd\xa0\xe5\xa5\xbd!");
        for (uint32_t k = 0; k < 2; k++) {
            pgd_buf_reset(&b);
            REQUIRE(pgd_api_chat_chunk_finish(&m, k, k ? PGD_FINISH_LENGTH : PGD_FINISH_STOP, iu,
                                              &b) == 0);
            json_t *j = load(&b);
            REQUIRE(j);
            json_t *c = check_chunk(j, &m, iu, false, "chat.completion.chunk");
            REQUIRE(keys_are(c, KEYS("index", "delta", "logprobs", "finish_reason")));
            CHECK(keys_are(json_object_get(c, "delta"), KEYS(NULL)));
            CHECK_EQ_STR(sget(c, "finish_reason"), k ? "length" : "stop");
            json_decref(j);
        }
        if (iu) {
            pgd_api_usage u = {5, 6, 0, 0};
            pgd_buf_reset(&b);
            REQUIRE(pgd_api_chunk_usage(&m, PGD_API_CHAT, &u, &b) == 0);
            json_t *j = load(&b);
            REQUIRE(j);
            check_chunk(j, &m, true, true, "chat.completion.chunk");
            check_usage(json_object_get(j, "usage"), 5, 6, 0);
            json_decref(j);
        }
        /* SSE framing of the content chunks: 6 events, each "data: {...}\n\n" */
        size_t events = 0;
        for (const char *s = all.data; s && (s = strstr(s, "data: {")); s++) events++;
        CHECK_EQ_INT(events, 6);
        CHECK(all.len > 2 && memcmp(all.data + all.len - 2, "\n\n", 2) == 0);
        pgd_buf_free(&all);
        pgd_buf_free(&b);
        pgd_buf_free(&text[0]);
        pgd_buf_free(&text[1]);
    }

    /* a content chunk with logprobs and a finish reason (the last delta of a choice) */
    const pgd_api_top_logprob top[] = {{S(" world"), -0.5f}};
    const pgd_api_token_logprob lp = {S(" world"), -0.5f, top, 1};
    pgd_api_choice ch = {0,    S(" world"), PGD_FINISH_STOP, true,     &lp, 1, 0, false, NULL, 0,
                         NULL, 0,           false,           {NULL, 0}};
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_api_chat_chunk_content(&m, &ch, false, &b) == 0);
    json_t *j = load(&b);
    REQUIRE(j);
    json_t *c = check_chunk(j, &m, false, false, "chat.completion.chunk");
    CHECK_EQ_STR(sget(c, "finish_reason"), "stop");
    json_t *l = json_object_get(c, "logprobs");
    REQUIRE(keys_are(l, KEYS("content")));
    json_t *e = json_array_get(json_object_get(l, "content"), 0);
    REQUIRE(keys_are(e, KEYS("token", "logprob", "bytes", "top_logprobs")));
    CHECK_EQ_STR(sget(e, "token"), " world");
    check_chat_top(json_array_get(json_object_get(e, "top_logprobs"), 0), " world", 6, " world",
                   -0.5);
    json_decref(j);
    pgd_buf_free(&b);
}

/* ---- completions ---------------------------------------------------------------------------- */

static void test_completion(void) {
    /* two prompts x n = 2: indices 0..3, one with legacy logprobs */
    const pgd_api_top_logprob top0[] = {{S("\xc3\xa9"), -0.2f}, {S("e"), -2.0f}};
    const pgd_api_top_logprob top2[] = {{{"\xff", 1}, -1.0f}, {{"\xfe", 1}, -3.0f}};
    const pgd_api_token_logprob lps[] = {
        {S("\xc3\xa9"), -0.2f, top0, 2},    /* 1 character */
        {S("ab"), -1.25f, NULL, 0},         /* chosen token only */
        {{"\xe2\x82", 2}, -0.75f, top2, 2}, /* partial: 1 character (U+FFFD) */
        {S("x"), NAN, NULL, 0},             /* unknown: null, null */
    };
    const pgd_api_choice choices[] = {
        {0,
         S("one"),
         PGD_FINISH_STOP,
         false,
         NULL,
         0,
         0,
         false,
         NULL,
         0,
         NULL,
         0,
         false,
         {NULL, 0}},
        {1,
         S("\xc3\xa9"
           "ab\xe2\x82x"),
         PGD_FINISH_LENGTH,
         true,
         lps,
         4,
         5,
         false,
         NULL,
         0,
         NULL,
         0,
         false,
         {NULL, 0}},
        {2,
         S("three"),
         PGD_FINISH_STOP,
         false,
         NULL,
         0,
         0,
         false,
         NULL,
         0,
         NULL,
         0,
         false,
         {NULL, 0}},
        {3, S(""), PGD_FINISH_STOP, false, NULL, 0, 0, false, NULL, 0, NULL, 0, false, {NULL, 0}},
    };
    pgd_api_meta m = {"cmpl-xyz", 42, S("smol"), NULL};
    pgd_api_usage u = {10, 20, 4, 0};
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_api_completion(&m, choices, 4, &u, &b) == 0);
    json_t *j = load(&b);
    REQUIRE(j);
    CHECK(keys_are(j, KEYS("id", "object", "created", "model", "choices", "usage")));
    check_head(j, "cmpl-xyz", "text_completion", 42, "smol");
    check_usage(json_object_get(j, "usage"), 10, 20, 4);
    json_t *arr = json_object_get(j, "choices");
    REQUIRE(json_array_size(arr) == 4);
    static const char *const texts[] = {"one",
                                        "\xc3\xa9"
                                        "ab" FFFD "x",
                                        "three", ""};
    for (size_t i = 0; i < 4; i++) {
        json_t *c = json_array_get(arr, i);
        REQUIRE(keys_are(c, KEYS("index", "text", "logprobs", "finish_reason")));
        CHECK_EQ_INT(iget(c, "index"), i);
        CHECK_EQ_STR(sget(c, "text"), texts[i]);
        CHECK_EQ_STR(sget(c, "finish_reason"), i == 1 ? "length" : "stop");
        if (i != 1) CHECK(json_is_null(json_object_get(c, "logprobs")));
    }
    json_t *lp = json_object_get(json_array_get(arr, 1), "logprobs");
    REQUIRE(keys_are(lp, KEYS("tokens", "token_logprobs", "top_logprobs", "text_offset")));
    json_t *toks = json_object_get(lp, "tokens"), *tlp = json_object_get(lp, "token_logprobs");
    json_t *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    REQUIRE(json_array_size(toks) == 4 && json_array_size(tlp) == 4);
    REQUIRE(json_array_size(tops) == 4 && json_array_size(offs) == 4);
    static const char *const want_tok[] = {"\xc3\xa9", "ab", FFFD, "x"};
    static const long long want_off[] = {5, 6, 8, 9};
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ_STR(json_string_value(json_array_get(toks, i)), want_tok[i]);
        CHECK_EQ_INT(json_integer_value(json_array_get(offs, i)), want_off[i]);
    }
    CHECK_NEAR(json_number_value(json_array_get(tlp, 0)), -0.2, 1e-6);
    CHECK_NEAR(json_number_value(json_array_get(tlp, 1)), -1.25, 1e-6);
    CHECK_NEAR(json_number_value(json_array_get(tlp, 2)), -0.75, 1e-6);
    CHECK(json_is_null(json_array_get(tlp, 3)));
    CHECK(json_is_null(json_array_get(tops, 3)));
    /* position 0: the alternatives (the chosen token is among them) */
    json_t *d0 = json_array_get(tops, 0);
    CHECK(keys_are(d0, KEYS("\xc3\xa9", "e")));
    CHECK_NEAR(nget(d0, "\xc3\xa9"), -0.2, 1e-6);
    CHECK_NEAR(nget(d0, "e"), -2.0, 1e-6);
    /* position 1: logprobs 0 still reports the chosen token */
    json_t *d1 = json_array_get(tops, 1);
    CHECK(keys_are(d1, KEYS("ab")));
    CHECK_NEAR(nget(d1, "ab"), -1.25, 1e-6);
    /* position 2: "\xff" and "\xfe" both read U+FFFD, as does the chosen "\xe2\x82": the first
     * (most probable) wins */
    json_t *d2 = json_array_get(tops, 2);
    CHECK(keys_are(d2, KEYS(FFFD)));
    CHECK_NEAR(nget(d2, FFFD), -1.0, 1e-6);
    json_decref(j);

    /* streamed chunks: a text piece with logprobs, the finish chunk, the usage chunk */
    for (int iu = 0; iu <= 1; iu++) {
        pgd_api_choice c = {3, S("ab"), PGD_FINISH_NONE, true, &lps[1], 1, 17, false, NULL, 0, NULL,
                            0, false,   {NULL, 0}};
        pgd_buf_reset(&b);
        REQUIRE(pgd_api_completion_chunk(&m, &c, iu, &b) == 0);
        j = load(&b);
        REQUIRE(j);
        json_t *ch = check_chunk(j, &m, iu, false, "text_completion");
        REQUIRE(keys_are(ch, KEYS("index", "text", "logprobs", "finish_reason")));
        CHECK_EQ_INT(iget(ch, "index"), 3);
        CHECK_EQ_STR(sget(ch, "text"), "ab");
        CHECK(json_is_null(json_object_get(ch, "finish_reason")));
        json_t *l = json_object_get(ch, "logprobs");
        CHECK(keys_are(l, KEYS("tokens", "token_logprobs", "top_logprobs", "text_offset")));
        CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 0)), 17);
        json_decref(j);

        pgd_api_choice f = {3, S(""), PGD_FINISH_LENGTH, false, NULL, 0, 0, false, NULL, 0, NULL,
                            0, false, {NULL, 0}};
        pgd_buf_reset(&b);
        REQUIRE(pgd_api_completion_chunk(&m, &f, iu, &b) == 0);
        j = load(&b);
        REQUIRE(j);
        ch = check_chunk(j, &m, iu, false, "text_completion");
        CHECK_EQ_STR(sget(ch, "text"), "");
        CHECK_EQ_STR(sget(ch, "finish_reason"), "length");
        CHECK(json_is_null(json_object_get(ch, "logprobs")));
        json_decref(j);
    }
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chunk_usage(&m, PGD_API_COMPLETION, &u, &b) == 0);
    j = load(&b);
    REQUIRE(j);
    check_chunk(j, &m, true, true, "text_completion");
    check_usage(json_object_get(j, "usage"), 10, 20, 4);
    json_decref(j);
    pgd_buf_free(&b);
}

/* ---- models, tokenize, detokenize ----------------------------------------------------------- */

static void test_models_tokenize(void) {
    pgd_api_model_info models[] = {{"smol", 1700000000, NULL, 8192}, {"other", 5, "me", 0}};
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_api_models_list(models, 2, &b) == 0);
    json_t *j = load(&b);
    REQUIRE(j);
    CHECK(keys_are(j, KEYS("object", "data")));
    CHECK_EQ_STR(sget(j, "object"), "list");
    json_t *data = json_object_get(j, "data");
    REQUIRE(json_array_size(data) == 2);
    json_t *m0 = json_array_get(data, 0), *m1 = json_array_get(data, 1);
    CHECK(keys_are(m0, KEYS("id", "object", "created", "owned_by", "max_model_len")));
    CHECK_EQ_STR(sget(m0, "id"), "smol");
    CHECK_EQ_STR(sget(m0, "object"), "model");
    CHECK_EQ_INT(iget(m0, "created"), 1700000000);
    CHECK_EQ_STR(sget(m0, "owned_by"), "pagoda");
    CHECK_EQ_INT(iget(m0, "max_model_len"), 8192);
    CHECK(keys_are(m1, KEYS("id", "object", "created", "owned_by")));
    CHECK_EQ_STR(sget(m1, "owned_by"), "me");
    json_decref(j);

    pgd_buf_reset(&b);
    REQUIRE(pgd_api_models_list(NULL, 0, &b) == 0);
    CHECK_EQ_STR(b.data, "{\"object\":\"list\",\"data\":[]}");
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_model_object(&models[1], &b) == 0);
    CHECK_EQ_STR(b.data,
                 "{\"id\":\"other\",\"object\":\"model\",\"created\":5,\"owned_by\":\"me\"}");

    const int32_t ids[] = {1, 0, 2147483647};
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_tokenize_response(ids, 3, 2048, &b) == 0);
    j = load(&b);
    REQUIRE(j);
    CHECK(keys_are(j, KEYS("count", "max_model_len", "tokens")));
    CHECK_EQ_INT(iget(j, "count"), 3);
    CHECK_EQ_INT(iget(j, "max_model_len"), 2048);
    json_t *t = json_object_get(j, "tokens");
    REQUIRE(json_array_size(t) == 3);
    for (size_t i = 0; i < 3; i++) CHECK_EQ_INT(json_integer_value(json_array_get(t, i)), ids[i]);
    json_decref(j);

    pgd_buf_reset(&b);
    REQUIRE(pgd_api_detokenize_response("caf\xc3\xa9 \xe2\x82", 8, &b) == 0);
    j = load(&b);
    REQUIRE(j);
    CHECK(keys_are(j, KEYS("prompt")));
    CHECK_EQ_STR(sget(j, "prompt"), "caf\xc3\xa9 " FFFD);
    json_decref(j);
    pgd_buf_free(&b);
}

/* Random byte tokens through the chat and legacy logprob builders: the output is always valid
 * UTF-8 JSON, "bytes" holds the exact bytes, "token" is valid and equals the bytes when they
 * are valid UTF-8, and any NaN/inf logprob still yields a number. */
static void test_logprob_utf8_fuzz(void) {
    uint64_t x = 12345;
    char store[16][6];
    pgd_api_top_logprob tops[16][3];
    pgd_api_token_logprob toks[16];
    static const float specials[] = {-0.5f, NAN, -INFINITY, INFINITY, -1e30f, 0.0f};
    memset(store, 0, sizeof store);
    for (int round = 0; round < 300; round++) {
        for (int i = 0; i < 16; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t n = x % 6;
            for (size_t k = 0; k < n; k++) store[i][k] = (char)(x >> (8 * k + 8));
            toks[i].text = (pgd_str){store[i], n};
            toks[i].logprob = specials[(x >> 56) % 6];
            toks[i].top = tops[i];
            toks[i].n_top = 3;
            for (int k = 0; k < 3; k++)
                tops[i][k] = (pgd_api_top_logprob){{store[(i + k) % 16], (x >> k) % 6},
                                                   specials[(x >> (k * 3)) % 6]};
        }
        pgd_api_choice c = {
            0, {store[0], 5}, PGD_FINISH_STOP, true, toks, 16, 0, false, NULL, 0, NULL,
            0, false,         {NULL, 0}};
        pgd_api_meta m = {"chatcmpl-f", 0, S("m"), NULL};
        pgd_api_usage u = {1, 16, 0, 0};
        pgd_buf b = PGD_BUF_INIT;
        REQUIRE(pgd_api_chat_completion(&m, &c, 1, &u, &b) == 0);
        json_t *j = load(&b);
        REQUIRE(j);
        json_t *content = json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"),
            "content");
        REQUIRE(json_array_size(content) == 16);
        for (size_t i = 0; i < 16; i++) {
            json_t *e = json_array_get(content, i);
            const pgd_str s = toks[i].text;
            check_bytes(json_object_get(e, "bytes"), s.ptr, s.len);
            json_t *tk = json_object_get(e, "token");
            CHECK(json_is_string(tk));
            if (pgd_api_utf8_valid(s.ptr, s.len))
                CHECK(json_string_length(tk) == s.len &&
                      memcmp(json_string_value(tk), s.ptr, s.len) == 0);
            double v = nget(e, "logprob");
            float want = toks[i].logprob;
            CHECK(isfinite(v));
            if (!isfinite(want) || want < -9999.0f)
                CHECK(v == -9999.0);
            else
                CHECK_NEAR(v, want, 0);
        }
        json_decref(j);
        pgd_buf_reset(&b);
        /* legacy logprobs: token texts become object keys, which jansson cannot read back
         * when they hold a NUL byte (valid JSON all the same, as "\u0000"); check that output
         * for UTF-8 and line breaks, then parse a variant with the NULs changed to 0x01 */
        bool has_nul = false;
        for (int i = 0; i < 16; i++)
            for (size_t k = 0; k < toks[i].text.len; k++) has_nul |= toks[i].text.ptr[k] == 0;
        REQUIRE(pgd_api_completion(&m, &c, 1, &u, &b) == 0);
        CHECK(pgd_api_utf8_valid(b.data, b.len) && !memchr(b.data, '\n', b.len));
        if (has_nul) CHECK(strstr(b.data, "\\u0000") != NULL);
        for (int i = 0; i < 16; i++)
            for (int k = 0; k < 6; k++)
                if (!store[i][k]) store[i][k] = 1;
        pgd_buf_reset(&b);
        REQUIRE(pgd_api_completion(&m, &c, 1, &u, &b) == 0);
        j = load(&b);
        REQUIRE(j);
        json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
        CHECK(keys_are(lp, KEYS("tokens", "token_logprobs", "top_logprobs", "text_offset")));
        json_t *tl = json_object_get(lp, "token_logprobs"),
               *tp = json_object_get(lp, "top_logprobs");
        int64_t off = 0;
        for (size_t i = 0; i < 16; i++) {
            json_t *tok = json_array_get(json_object_get(lp, "tokens"), i);
            CHECK(json_is_string(tok));
            CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), i)),
                         off);
            off += (int64_t)pgd_api_utf8_chars(json_string_value(tok), json_string_length(tok));
            if (isnan(toks[i].logprob)) {
                CHECK(json_is_null(json_array_get(tl, i)) && json_is_null(json_array_get(tp, i)));
            } else {
                CHECK(json_is_number(json_array_get(tl, i)));
                /* alternatives + the chosen token, fewer when repaired texts coincide */
                size_t nd = json_object_size(json_array_get(tp, i));
                CHECK(nd >= 1 && nd <= 4);
                CHECK(json_object_get(json_array_get(tp, i), json_string_value(tok)) != NULL);
            }
        }
        json_decref(j);
        pgd_buf_free(&b);
    }
}

static void test_float_format(void) {
    static const struct {
        float v;
        const char *text;
    } cases[] = {
        {-0.1f, "-0.1"},        {-0.25f, "-0.25"},
        {0.0f, "0.0"},          {-1e-7f, "-1e-7"},
        {-1234.5f, "-1234.5"},  {-9999.0f, "-9999.0"},
        {-10000.0f, "-9999.0"}, {-3.14159274f, "-3.1415927"},
        {NAN, "-9999.0"},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        json_t *v = pgd__api_jfloat(cases[i].v, -9999.0);
        REQUIRE(v);
        pgd_buf b = PGD_BUF_INIT;
        json_t *a = json_array();
        json_array_append_new(a, v);
        REQUIRE(pgd__api_dump(a, &b) == 0);
        char want[64];
        snprintf(want, sizeof want, "[%s]", cases[i].text);
        CHECK_EQ_STR(b.data, want);
        /* and it reads back as the same float */
        json_t *back = json_loadb(b.data, b.len, 0, NULL);
        if (isfinite(cases[i].v) && cases[i].v >= -9999.0f)
            CHECK((float)json_number_value(json_array_get(back, 0)) == cases[i].v);
        json_decref(back);
        json_decref(a);
        pgd_buf_free(&b);
    }
}

/* ---- allocation failures -------------------------------------------------------------------- */

/* jansson's allocator fails at its k-th call, for k = 0, 1, 2, ... until the builder succeeds:
 * each attempt must return PGD_ENOMEM (or 0) with the buffer untouched, leak nothing (ASan)
 * and, once it succeeds, produce the same text as without failures.
 * The request parsers are left out: their only jansson allocations are inside json_loadb, and
 * jansson 2.14 itself crashes there on some allocation failures (a standalone json_loadb of a
 * 200-byte object under the same injection reproduces it), which no caller can guard against. */
static long g_fail_at = -1, g_allocs;

static void *failing_malloc(size_t n) {
    if (g_fail_at >= 0 && g_allocs++ == g_fail_at) return NULL;
    return malloc(n);
}

static const pgd_api_top_logprob k_top[] = {{{"a\xff", 2}, -0.5f}, {{"b", 1}, -1.5f}};
static const pgd_api_token_logprob k_lps[] = {{{"a\xff", 2}, -0.5f, k_top, 2},
                                              {{"c", 1}, NAN, NULL, 0}};
/* vLLM's prompt_logprobs: token 5 (rank 2) with alternatives 7 and 5 (listed once), then token 9
 * (ranked 40, its bytes a broken character) without alternatives */
static const pgd_api_ranked_logprob k_alts[] = {{7, {"q", 1}, -0.25f, 1}, {5, {"p", 1}, -1.0f, 2}};
static const pgd_api_prompt_logprob k_plp[] = {{{5, {"p", 1}, -1.0f, 2}, k_alts, 2},
                                               {{9, {"\xe2\x82", 2}, -INFINITY, 40}, NULL, 0}};
static const pgd_api_choice k_choices[] = {
    {0,
     {"x\xff", 2},
     PGD_FINISH_STOP,
     true,
     k_lps,
     2,
     3,
     true,
     k_plp,
     2,
     NULL,
     0,
     false,
     {NULL, 0}},
    {1, {"y", 1}, PGD_FINISH_LENGTH, false, NULL, 0, 0, false, NULL, 0, NULL, 0, false, {NULL, 0}},
};
static const pgd_api_meta k_meta = {"id-1", 7, {"m", 1}, "fp"};
static const pgd_api_usage k_usage = {3, 4, 1, 0};

static int b_chat(pgd_buf *o) {
    return pgd_api_chat_completion(&k_meta, k_choices, 2, &k_usage, o);
}
static int b_first(pgd_buf *o) {
    return pgd_api_chat_chunk_first(&k_meta, 1, true, o);
}
static int b_content(pgd_buf *o) {
    return pgd_api_chat_chunk_content(&k_meta, &k_choices[0], true, o);
}
static int b_finish(pgd_buf *o) {
    return pgd_api_chat_chunk_finish(&k_meta, 0, PGD_FINISH_STOP, true, o);
}
static int b_usage(pgd_buf *o) {
    return pgd_api_chunk_usage(&k_meta, PGD_API_CHAT, &k_usage, o);
}
static int b_cmpl(pgd_buf *o) {
    return pgd_api_completion(&k_meta, k_choices, 2, &k_usage, o);
}
static int b_cmpl_chunk(pgd_buf *o) {
    return pgd_api_completion_chunk(&k_meta, &k_choices[0], true, o);
}
static int b_models(pgd_buf *o) {
    static const pgd_api_model_info mi[] = {{"a", 1, NULL, 5}, {"b", 2, "o", 0}};
    return pgd_api_models_list(mi, 2, o);
}
static int b_tok(pgd_buf *o) {
    static const int32_t ids[] = {1, 2, 3};
    return pgd_api_tokenize_response(ids, 3, 9, o);
}
static int b_detok(pgd_buf *o) {
    return pgd_api_detokenize_response("ab\xff", 3, o);
}
static int b_err(pgd_buf *o) {
    pgd_api_error e;
    pgd_api_error_set(&e, 400, "stop", NULL, "bad \xff stop");
    return pgd_api_error_sse(&e, o);
}
/* vLLM's prompt_logprobs: in each completion choice that has them, after finish_reason; in a
 * chat completion, after usage (choice 0's). [null, {"<id>": {logprob, rank, decoded_token}}]. */
static void test_prompt_logprobs(void) {
    for (int chat = 0; chat < 2; chat++) {
        pgd_buf b = PGD_BUF_INIT;
        REQUIRE((chat ? pgd_api_chat_completion : pgd_api_completion)(&k_meta, k_choices, 2,
                                                                      &k_usage, &b) == 0);
        json_t *j = load(&b);
        REQUIRE(j != NULL);
        json_t *arr = json_object_get(j, "choices"), *plp;
        if (chat) {
            CHECK(keys_are(j, KEYS("id", "object", "created", "model", "system_fingerprint",
                                   "choices", "usage", "prompt_logprobs")));
            CHECK(strstr(b.data, "\"usage\":{") < strstr(b.data, "\"prompt_logprobs\""));
            plp = json_object_get(j, "prompt_logprobs");
            CHECK(keys_are(json_array_get(arr, 0),
                           KEYS("index", "message", "logprobs", "finish_reason")));
        } else {
            CHECK(keys_are(json_array_get(arr, 0),
                           KEYS("index", "text", "logprobs", "finish_reason", "prompt_logprobs")));
            CHECK(keys_are(json_array_get(arr, 1),
                           KEYS("index", "text", "logprobs", "finish_reason")));
            plp = json_object_get(json_array_get(arr, 0), "prompt_logprobs");
        }
        REQUIRE(json_is_array(plp) && json_array_size(plp) == 3);
        CHECK(json_is_null(json_array_get(plp, 0)));
        json_t *e1 = json_array_get(plp, 1), *e2 = json_array_get(plp, 2);
        REQUIRE(keys_are(e1, KEYS("5", "7")));
        json_t *t5 = json_object_get(e1, "5"), *t7 = json_object_get(e1, "7");
        REQUIRE(keys_are(t5, KEYS("logprob", "rank", "decoded_token")));
        CHECK_NEAR(nget(t5, "logprob"), -1.0, 1e-9);
        CHECK_EQ_INT(iget(t5, "rank"), 2);
        CHECK_EQ_STR(sget(t5, "decoded_token"), "p");
        CHECK_NEAR(nget(t7, "logprob"), -0.25, 1e-9);
        CHECK_EQ_INT(iget(t7, "rank"), 1);
        CHECK_EQ_STR(sget(t7, "decoded_token"), "q");
        REQUIRE(keys_are(e2, KEYS("9")));
        json_t *t9 = json_object_get(e2, "9");
        CHECK_NEAR(nget(t9, "logprob"), -9999.0, 1e-9);
        CHECK_EQ_INT(iget(t9, "rank"), 40);
        CHECK_EQ_STR(sget(t9, "decoded_token"), FFFD); /* one maximal subpart */
        json_decref(j);
        pgd_buf_free(&b);
    }
}

static void test_alloc_failures(void) {
    int (*const fns[])(pgd_buf *) = {b_chat,       b_first,  b_content, b_finish, b_usage, b_cmpl,
                                     b_cmpl_chunk, b_models, b_tok,     b_detok,  b_err};
    json_set_alloc_funcs(failing_malloc, free);
    for (size_t f = 0; f < PGD_ARRAY_LEN(fns); f++) {
        g_fail_at = -1;
        pgd_buf ref = PGD_BUF_INIT, b = PGD_BUF_INIT;
        REQUIRE(fns[f](&ref) == 0);
        int failures = 0;
        for (long k = 0; k < 100000; k++) {
            g_fail_at = k;
            g_allocs = 0;
            pgd_buf_reset(&b);
            pgd_buf_puts(&b, "keep");
            int rc = fns[f](&b);
            if (rc == 0) {
                CHECK(b.len == 4 + ref.len && memcmp(b.data + 4, ref.data, ref.len) == 0);
                break;
            }
            failures++;
            if (rc != PGD_ENOMEM) fprintf(stderr, "  builder %zu, failing alloc %ld\n", f, k);
            CHECK_EQ_INT(rc, PGD_ENOMEM);
            CHECK(b.len == 4 && strcmp(b.data, "keep") == 0);
        }
        CHECK(failures > 0); /* the builder did allocate through jansson */
        pgd_buf_free(&ref);
        pgd_buf_free(&b);
    }
    g_fail_at = -1;
    json_set_alloc_funcs(malloc, free);
}

/* A thinking model's answer: reasoning_content beside the content (null when empty), and a
 * reasoning chunk's delta. */
static void test_chat_reasoning(void) {
    pgd_api_meta m = {"chatcmpl-r", 1, S("m"), NULL};
    pgd_api_usage u = {3, 4, 0, 0};
    const pgd_api_choice chs[] = {
        {.index = 0,
         .text = S("4"),
         .finish = PGD_FINISH_STOP,
         .has_reasoning = true,
         .reasoning = S("2 + 2")},
        {.index = 1,
         .text = S(""),
         .finish = PGD_FINISH_LENGTH,
         .has_reasoning = true,
         .reasoning = S("still \xe2\x80\x94")},
        {.index = 2, .text = S(""), .finish = PGD_FINISH_STOP},
    };
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_api_chat_completion(&m, chs, 3, &u, &b) == 0);
    json_t *j = load(&b);
    REQUIRE(j);
    json_t *arr = json_object_get(j, "choices");
    json_t *m0 = json_object_get(json_array_get(arr, 0), "message");
    json_t *m1 = json_object_get(json_array_get(arr, 1), "message");
    json_t *m2 = json_object_get(json_array_get(arr, 2), "message");
    CHECK(keys_are(m0, KEYS("role", "content", "reasoning_content")));
    CHECK_EQ_STR(sget(m0, "content"), "4");
    CHECK_EQ_STR(sget(m0, "reasoning_content"), "2 + 2");
    CHECK(json_is_null(json_object_get(m1, "content")));
    CHECK_EQ_STR(sget(m1, "reasoning_content"), "still \xe2\x80\x94");
    CHECK(keys_are(m2, KEYS("role", "content"))); /* no reasoning: no field, content "" */
    CHECK_EQ_STR(sget(m2, "content"), "");
    json_decref(j);

    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_chunk_reasoning(&m, &chs[0], false, &b) == 0);
    j = load(&b);
    REQUIRE(j);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *d = json_object_get(c, "delta");
    CHECK(keys_are(d, KEYS("reasoning_content")));
    CHECK_EQ_STR(sget(d, "reasoning_content"), "2 + 2");
    CHECK(json_is_null(json_object_get(c, "logprobs")));
    json_decref(j);
    /* the reasoning's tokens: completion_tokens_details, only when there are some */
    pgd_api_usage ur = {3, 9, 0, 5};
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_completion(&m, chs, 1, &ur, &b) == 0);
    j = load(&b);
    REQUIRE(j);
    json_t *us = json_object_get(j, "usage");
    CHECK(keys_are(us, KEYS("prompt_tokens", "completion_tokens", "total_tokens",
                            "prompt_tokens_details", "completion_tokens_details")));
    CHECK_EQ_INT(json_integer_value(json_object_get(
                     json_object_get(us, "completion_tokens_details"), "reasoning_tokens")),
                 5);
    json_decref(j);
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_completion(&m, chs, 1, &u, &b) == 0);
    j = load(&b);
    REQUIRE(j);
    CHECK(json_object_get(json_object_get(j, "usage"), "completion_tokens_details") == NULL);
    json_decref(j);
    pgd_buf_free(&b);
}

int main(void) {
    RUN(test_utf8);
    RUN(test_utf8_exhaustive);
    RUN(test_ids_and_sse);
    RUN(test_chat_completion);
    RUN(test_chat_stream);
    RUN(test_chat_reasoning);
    RUN(test_completion);
    RUN(test_models_tokenize);
    RUN(test_logprob_utf8_fuzz);
    RUN(test_float_format);
    RUN(test_prompt_logprobs);
    RUN(test_alloc_failures);
    return test_summary();
}
