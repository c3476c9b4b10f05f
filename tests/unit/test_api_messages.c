/*
 * tests/unit/test_api_messages.c — the messages parser (api/messages.h: content, tool calls,
 * tool results, the protocol's refusals with their params) and the Python-compatible JSON
 * dumpers (api/jsonutil.h pgd_api_json_dump_py, pgd_api_json_dump_py_indent; common/text.h
 * pgd_json_quote_py) whose text the templates print.
 *
 * Expected dumps are Python's own output, json.dumps(x, ensure_ascii=False) (and indent=4) run
 * by hand and pasted here as literals; never produced by the code under test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonutil.h"
#include "api/messages.h"
#include "common/error.h"
#include "testutil.h"

/* ---- pgd_api_json_dump_py ---- */

/* The dump of j (NULL when it failed), in a static buffer. */
static const char *dump(const json_t *j) {
    static pgd_buf b = PGD_BUF_INIT;
    pgd_buf_free(&b);
    if (!j || pgd_api_json_dump_py(j, &b)) return NULL;
    return b.data;
}

static const char *dump_text(const char *json) {
    json_error_t err;
    json_t *j = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!j) {
        fprintf(stderr, "  bad test JSON: %s\n", err.text);
        return NULL;
    }
    const char *s = dump(j);
    json_decref(j);
    return s;
}

static void test_dump_py_reals(void) {
    /* repr(float) for each: python3 -c 'import json; print(json.dumps(v))' */
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {0.1, "0.1"},
        {1e-05, "1e-05"},
        {1e16, "1e+16"},
        {1.0, "1.0"},
        {2.5e-07, "2.5e-07"},
        {123456789.125, "123456789.125"},
        {-0.0, "-0.0"},
        {0.0, "0.0"},
        {1.5e20, "1.5e+20"},
        {1e15, "1000000000000000.0"},
        {0.0001, "0.0001"},
        {5e-05, "5e-05"},
        {123.456, "123.456"},
        {5e-324, "5e-324"},
        {1.5e-323, "1.5e-323"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {9007199254740993.0, "9007199254740992.0"},
        {9.999999999999999e15, "1e+16"},
        {1e22, "1e+22"},
        {1e23, "1e+23"},
        {8.41e21, "8.41e+21"},
        {0.3, "0.3"},
        {2.0 / 3.0, "0.6666666666666666"},
        {1.0 / 3.0, "0.3333333333333333"},
        {100.0, "100.0"},
        {1e100, "1e+100"},
        {-1e-07, "-1e-07"},
        {0.00015000000000000001, "0.00015000000000000001"},
        {1152921504606846976.0, "1.152921504606847e+18"},
        {-273.15, "-273.15"},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        json_t *j = json_real(cases[i].v);
        CHECK_EQ_STR(dump(j), cases[i].want);
        json_decref(j);
    }
    /* next to a power of two the correctly rounded 16 digits do not read back but the
     * neighbour above does: Python prints 16 digits, not 17 */
    json_t *j = json_real(ldexp(1.0, 89));
    CHECK_EQ_STR(dump(j), "6.189700196426902e+26");
    json_decref(j);
    j = json_real(ldexp(1.0, -1017));
    CHECK_EQ_STR(dump(j), "7.120236347223045e-307");
    json_decref(j);
    /* reals read from text keep their value, whatever the spelling */
    CHECK_EQ_STR(dump_text("[1E+2, 0.10, 1e-5, 2.50e-7, -0.0, 1.0e16, 12345678901234567890.0]"),
                 "[100.0, 0.1, 1e-05, 2.5e-07, -0.0, 1e+16, 1.2345678901234567e+19]");
}

static void test_dump_py_values(void) {
    CHECK_EQ_STR(
        dump_text("{\"z\": \"x\\u0000\\u001f\\u007f\\u00e9\\u2028\\\"\\\\\\n\\r\\t\\b\\f/<>&'\", "
                  "\"a\": [1, -2, 2.5, true, false, null, {}, []], \"nested\": {\"k\": {\"deep\": "
                  "[[], {\"e\": \"\"}]}}, \"big\": 9223372036854775807, \"neg\": "
                  "-9223372036854775808, \"emoji\": \"\\ud83c\\udf89 caf\\u00e9\", \"ctl\": "
                  "\"\\u0001\\u000b\\u000e\\u001b\"}"),
        "{\"z\": \"x\\u0000\\u001f\x7f"
        "\xc3\xa9"
        "\xe2\x80\xa8"
        "\\\"\\\\\\n\\r\\t\\b\\f/<>&'\", \"a\": [1, -2, 2.5, true, false, null, {}, []], "
        "\"nested\": {\"k\": {\"deep\": [[], {\"e\": \"\"}]}}, \"big\": 9223372036854775807, "
        "\"neg\": -9223372036854775808, \"emoji\": \"\xf0\x9f\x8e\x89"
        " caf\xc3\xa9"
        "\", \"ctl\": \"\\u0001\\u000b\\u000e\\u001b\"}");
    /* keys in insertion order, escaped like values; compact input gains Python's separators */
    CHECK_EQ_STR(dump_text("{\"b\":1,\"a\":{\"y\":[1,2],\"x\":null},\"k\\ney\":\"v\"}"),
                 "{\"b\": 1, \"a\": {\"y\": [1, 2], \"x\": null}, \"k\\ney\": \"v\"}");
    CHECK_EQ_STR(dump_text("\"</tool_call><|im_end|>\""), "\"</tool_call><|im_end|>\"");
    CHECK_EQ_STR(dump_text("{}"), "{}");
    CHECK_EQ_STR(dump_text("[]"), "[]");
    CHECK_EQ_STR(dump_text("[[{}]]"), "[[{}]]");
    CHECK_EQ_STR(dump_text("\"\""), "\"\"");
    CHECK_EQ_STR(dump_text("0"), "0");
    CHECK_EQ_STR(dump_text("-17"), "-17");
    CHECK_EQ_STR(dump_text("true"), "true");
    CHECK_EQ_STR(dump_text("null"), "null");

    /* appends; the buffer's earlier text stays */
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_buf_puts(&b, "x=") == 0);
    json_t *j = json_pack("{s:[i,f]}", "k", 1, 0.5);
    REQUIRE(j);
    CHECK_EQ_INT(pgd_api_json_dump_py(j, &b), 0);
    CHECK_EQ_STR(b.data, "x={\"k\": [1, 0.5]}");
    CHECK_EQ_INT(b.len, strlen("x={\"k\": [1, 0.5]}"));
    json_decref(j);
    /* an empty string's dump is still NUL-terminated text */
    pgd_buf_free(&b);
    j = json_string("");
    CHECK_EQ_INT(pgd_api_json_dump_py(j, &b), 0);
    CHECK_EQ_STR(b.data, "\"\"");
    json_decref(j);
    pgd_buf_free(&b);
}

/* json.dumps(x, indent=4, ensure_ascii=False): what a template's tojson(indent=4) prints (Llama
 * 3.1+ tool definitions). Each pair: the input, then Python's output pasted. */
static void test_dump_py_indent(void) {
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
         "\"Wetter in Z\\u00fcrich \\u2014 \\\"heute\\\"\\n\", \"parameters\": {\"type\": "
         "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": "
         "\"integer\", \"minimum\": 1}}, \"required\": [\"city\"]}}}",
         "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": "
         "\"get_weather\",\n        \"description\": \"Wetter in Z\xc3\xbcrich \xe2\x80\x94 "
         "\\\"heute\\\"\\n\",\n        \"parameters\": {\n            \"type\": \"object\",\n      "
         "      \"properties\": {\n                \"city\": {\n                    \"type\": "
         "\"string\"\n                },\n                \"days\": {\n                    "
         "\"type\": \"integer\",\n                    \"minimum\": 1\n                }\n          "
         "  },\n            \"required\": [\n                \"city\"\n            ]\n        }\n  "
         "  }\n}"},
        {"{}", "{}"},
        {"[]", "[]"},
        {"{\"a\": {}, \"b\": [], \"c\": [{}], \"d\": [[]]}",
         "{\n    \"a\": {},\n    \"b\": [],\n    \"c\": [\n        {}\n    ],\n    \"d\": [\n      "
         "  []\n    ]\n}"},
        {"[1, 2.5, -0.0, 1e+16, 1e-05, true, false, null, \"\\u65e5\\u672c \\ud83c\\udf89\"]",
         "[\n    1,\n    2.5,\n    -0.0,\n    1e+16,\n    1e-05,\n    true,\n    false,\n    "
         "null,\n    \"\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89\"\n]"},
        {"\"x\\u0001\\t\"", "\"x\\u0001\\t\""},
        {"{\"nested\": {\"deep\": [[], {\"e\": \"\"}, [1, [2, {\"f\": 0.1}]]]}}",
         "{\n    \"nested\": {\n        \"deep\": [\n            [],\n            {\n              "
         "  \"e\": \"\"\n            },\n            [\n                1,\n                [\n    "
         "                2,\n                    {\n                        \"f\": 0.1\n          "
         "          }\n                ]\n            ]\n        ]\n    }\n}"},
        {"0", "0"},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        json_error_t err;
        json_t *j = json_loads(cases[i].json, JSON_DECODE_ANY, &err);
        if (!j) fprintf(stderr, "  bad test JSON %zu: %s\n", i, err.text);
        REQUIRE(j);
        pgd_buf b = PGD_BUF_INIT;
        CHECK_EQ_INT(pgd_api_json_dump_py_indent(j, 4, &b), 0);
        CHECK_EQ_STR(b.data, cases[i].want);
        /* indent 0 is the compact dump */
        pgd_buf c = PGD_BUF_INIT;
        CHECK_EQ_INT(pgd_api_json_dump_py_indent(j, 0, &c), 0);
        CHECK_EQ_STR(c.data, dump(j));
        pgd_buf_free(&b);
        pgd_buf_free(&c);
        json_decref(j);
    }
    /* another width: json.dumps({"k": [1, {}]}, indent=2) */
    json_t *j = json_pack("{s:[i,{}]}", "k", 1);
    REQUIRE(j);
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_buf_puts(&b, "x=") == 0);
    CHECK_EQ_INT(pgd_api_json_dump_py_indent(j, 2, &b), 0); /* appends */
    CHECK_EQ_STR(b.data, "x={\n  \"k\": [\n    1,\n    {}\n  ]\n}");
    pgd_buf_free(&b);
    json_decref(j);
}

/* pgd_json_quote_py (common/text.h): json.dumps(s, ensure_ascii=False) of a string, the way a
 * template's `content | tojson` prints a tool result. */
static void test_json_quote_py(void) {
    static const struct {
        const char *s;
        size_t n;
        const char *want;
    } cases[] = {
        {"", 0, "\"\""},
        {"plain", 5, "\"plain\""},
        {"q\"b\\s/\n\x0d\t\x08\x0c", 11, "\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\""},
        {"\x00\x1f\x7f \xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x8e\x89", 15,
         "\"\\u0000\\u001f\x7f \xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x8e\x89\""},
        {"<|eot_id|>", 10, "\"<|eot_id|>\""},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        pgd_buf b = PGD_BUF_INIT;
        REQUIRE(pgd_buf_puts(&b, "<") == 0);
        CHECK_EQ_INT(pgd_json_quote_py(cases[i].s, cases[i].n, &b), 0);
        CHECK_EQ_INT(b.len, 1 + strlen(cases[i].want));
        CHECK(b.len > 0 && !memcmp(b.data + 1, cases[i].want, b.len - 1));
        pgd_buf_free(&b);
    }
}

/* ---- pgd_messages_parse ---- */

static json_t *load(const char *json) {
    json_error_t err;
    json_t *j = json_loads(json, JSON_ALLOW_NUL, &err);
    if (!j) fprintf(stderr, "  bad test JSON: %s (%s)\n", err.text, json);
    return j;
}

static int str_is(pgd_str s, const char *want) {
    int ok = s.len == strlen(want) && (s.len == 0 || !memcmp(s.ptr, want, s.len));
    if (!ok) fprintf(stderr, "  got \"%.*s\", want \"%s\"\n", (int)s.len, s.ptr, want);
    return ok;
}

/* The content of a message, joined. */
static int content_is(const pgd_chat_msg *m, const char *want) {
    char buf[512];
    size_t o = 0;
    for (size_t p = 0; p < m->n_parts; p++) {
        if (o + m->parts[p].len >= sizeof buf) return 0;
        memcpy(buf + o, m->parts[p].ptr, m->parts[p].len);
        o += m->parts[p].len;
    }
    buf[o] = '\0';
    int ok = o == strlen(want) && !memcmp(buf, want, o);
    if (!ok) fprintf(stderr, "  content \"%s\", want \"%s\"\n", buf, want);
    return ok;
}

static void test_tool_conversation(void) {
    json_t *j = load(
        "[{\"role\":\"developer\",\"content\":\"sys\"},"
        "{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{ \\\"city\\\" :\\\"Z\\u00fcrich\\\",\\\"days\\\":[1.0,1e-5],"
        "\\\"q\\\":\\\"a\\\\\\\"b\\\\n\\\"}\"}},"
        "{\"function\":{\"name\":\"now\",\"arguments\":\"\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"22C\"},"
        "{\"role\":\"tool\",\"content\":null},"
        "{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":\"done\",\"tool_calls\":[],\"function_call\":null},"
        "{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":null},"
        "{\"role\":\"assistant\",\"tool_calls\":[{\"type\":null,\"id\":null,\"function\":"
        "{\"name\":\"f\",\"arguments\":\"{\\\"n\\\": {\\\"m\\\": [true, null, -0.0]}}\"}}]}]");
    REQUIRE(j);
    pgd_messages m;
    char param[96] = "";
    int rc = pgd_messages_parse(j, &m, param, sizeof param);
    if (rc) fprintf(stderr, "  %s\n", pgd_error_detail());
    REQUIRE(rc == 0);
    REQUIRE(m.n == 9);
    CHECK_EQ_STR(m.msgs[0].role, "system");
    CHECK_EQ_STR(m.msgs[2].role, "assistant");
    CHECK(content_is(&m.msgs[2], ""));
    REQUIRE(m.msgs[2].n_calls == 2);
    CHECK(str_is(m.msgs[2].calls[0].name, "get_weather"));
    /* re-dumped as Python's json.dumps of json.loads(arguments) */
    CHECK(str_is(m.msgs[2].calls[0].arguments,
                 "{\"city\": \"Z\xc3\xbcrich\", \"days\": [1.0, 1e-05], \"q\": \"a\\\"b\\n\"}"));
    CHECK(str_is(m.msgs[2].calls[1].name, "now"));
    CHECK(str_is(m.msgs[2].calls[1].arguments, "{}")); /* "" counts as {} */
    CHECK_EQ_STR(m.msgs[3].role, "tool");
    CHECK(content_is(&m.msgs[3], "22C"));
    CHECK_EQ_INT(m.msgs[3].n_calls, 0);
    CHECK(m.msgs[3].calls == NULL);
    CHECK(content_is(&m.msgs[4], "")); /* null tool content */
    CHECK(content_is(&m.msgs[5], "ab"));
    CHECK_EQ_INT(m.msgs[5].n_parts, 2);
    CHECK_EQ_INT(m.msgs[6].n_calls, 0); /* [] is none */
    CHECK(content_is(&m.msgs[6], "done"));
    CHECK_EQ_INT(m.msgs[7].n_calls, 0); /* null is none */
    REQUIRE(m.msgs[8].n_calls == 1);
    CHECK(content_is(&m.msgs[8], "")); /* missing content */
    CHECK(str_is(m.msgs[8].calls[0].arguments, "{\"n\": {\"m\": [true, null, -0.0]}}"));
    pgd_messages_free(&m);
    CHECK(m.msgs == NULL && m.parts == NULL && m.calls == NULL && m.args == NULL && m.n == 0);
    pgd_messages_free(&m);
    pgd_messages_free(NULL);
    json_decref(j);
}

/* Many calls with long arguments: the argument storage grows many times while parsing, and
 * every call's view must still point at its own text afterwards. */
static void test_many_calls(void) {
    enum { MSGS = 20, CALLS = 5 };
    json_t *arr = json_array();
    REQUIRE(arr);
    char args[256], name[32];
    for (int i = 0; i < MSGS; i++) {
        json_t *calls = json_array();
        for (int c = 0; c < CALLS; c++) {
            snprintf(name, sizeof name, "fn_%d_%d", i, c);
            snprintf(args, sizeof args, "{\"i\":%d,\"c\":%d,\"pad\":\"%0200d\"}", i, c,
                     i * CALLS + c);
            json_array_append_new(
                calls, json_pack("{s:{s:s,s:s}}", "function", "name", name, "arguments", args));
        }
        json_array_append_new(arr, json_pack("{s:s,s:s}", "role", "user", "content", "go"));
        json_array_append_new(
            arr, json_pack("{s:s,s:n,s:o}", "role", "assistant", "content", "tool_calls", calls));
    }
    pgd_messages m;
    char param[96];
    REQUIRE(pgd_messages_parse(arr, &m, param, sizeof param) == 0);
    REQUIRE(m.n == 2 * MSGS);
    int bad = 0;
    for (int i = 0; i < MSGS; i++) {
        const pgd_chat_msg *msg = &m.msgs[2 * i + 1];
        if (msg->n_calls != CALLS) {
            bad++;
            continue;
        }
        for (int c = 0; c < CALLS; c++) {
            snprintf(name, sizeof name, "fn_%d_%d", i, c);
            snprintf(args, sizeof args, "{\"i\": %d, \"c\": %d, \"pad\": \"%0200d\"}", i, c,
                     i * CALLS + c);
            if (!str_is(msg->calls[c].name, name) || !str_is(msg->calls[c].arguments, args)) bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    pgd_messages_free(&m);
    json_decref(arr);
}

static void test_errors(void) {
    static const struct {
        const char *json, *param, *msg;
    } cases[] = {
        {"[{\"role\":\"function\",\"name\":\"f\",\"content\":\"1\"}]", "messages[0].role",
         "\"tool\" message"},
        {"[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":null,"
         "\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}}]",
         "messages[1].function_call", "\"tool_calls\""},
        {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":{}}]", "messages[0].tool_calls",
         "must be a list of tool calls"},
        {"[{\"role\":\"user\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
         "\"arguments\":\"{}\"}}]}]",
         "messages[0].tool_calls", "only assistant messages carry tool calls"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
         "\"{}\"}},3]}]",
         "messages[0].tool_calls[1]", "must be an object"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":7,\"function\":{\"name\":\"f\","
         "\"arguments\":\"{}\"}}]}]",
         "messages[0].tool_calls[0].id", "must be a string"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"code\",\"function\":{\"name\":"
         "\"f\",\"arguments\":\"{}\"}}]}]",
         "messages[0].tool_calls[0].type", "\"function\""},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\"}]}]",
         "messages[0].tool_calls[0].function", "\"name\""},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}]",
         "messages[0].tool_calls[0].function.name", "non-empty string"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"\",\"arguments\":"
         "\"{}\"}}]}]",
         "messages[0].tool_calls[0].function.name", "non-empty string"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]",
         "messages[0].tool_calls[0].function.arguments", "must be a string holding a JSON object"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
         "{\"a\":1}}}]}]",
         "messages[0].tool_calls[0].function.arguments", "must be a string holding a JSON object"},
        {"[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{"
         "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"function\":{\"name\":\"g\","
         "\"arguments\":\"[1]\"}}]}]",
         "messages[1].tool_calls[1].function.arguments", "not an array"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
         "\"\\\"x\\\"\"}}]}]",
         "messages[0].tool_calls[0].function.arguments", "not a string"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
         "\"null\"}}]}]",
         "messages[0].tool_calls[0].function.arguments", "not null"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
         "\"12\"}}]}]",
         "messages[0].tool_calls[0].function.arguments", "not a number"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
         "\"{\\\"a\\\":\"}}]}]",
         "messages[0].tool_calls[0].function.arguments", "line 1"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
         "\" \"}}]}]",
         "messages[0].tool_calls[0].function.arguments", "JSON object"},
        {"[{\"role\":\"tool\",\"tool_call_id\":5,\"content\":\"x\"}]", "messages[0].tool_call_id",
         "must be a string"},
        {"[{\"role\":\"tool\",\"content\":5}]", "messages[0].content", "string or a list"},
        {"[{\"role\":\"tool\",\"content\":[{\"type\":\"image_url\"}]}]",
         "messages[0].content[0].type", "image_url"},
        {"[{\"role\":\"user\",\"content\":null}]", "messages[0].content", "string or a list"},
        {"[{\"role\":\"user\"}]", "messages[0].content", "string or a list"},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        json_t *j = load(cases[i].json);
        CHECK(j != NULL);
        if (!j) continue;
        pgd_messages m;
        char param[96] = "";
        int rc = pgd_messages_parse(j, &m, param, sizeof param);
        CHECK_EQ_INT(rc, PGD_EINVAL);
        CHECK_EQ_STR(param, cases[i].param);
        if (!strstr(pgd_error_detail(), cases[i].msg) ||
            !strstr(pgd_error_detail(), cases[i].param)) {
            fprintf(stderr, "  case %zu: detail \"%s\" lacks \"%s\"\n", i, pgd_error_detail(),
                    cases[i].msg);
            CHECK(0);
        }
        CHECK(m.msgs == NULL && m.parts == NULL && m.calls == NULL && m.args == NULL && m.n == 0);
        json_decref(j);
    }
}

int main(void) {
    RUN(test_dump_py_reals);
    RUN(test_dump_py_values);
    RUN(test_dump_py_indent);
    RUN(test_json_quote_py);
    RUN(test_tool_conversation);
    RUN(test_many_calls);
    RUN(test_errors);
    return test_summary();
}
