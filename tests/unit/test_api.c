/*
 * tests/unit/test_api.c — api/request and api/error: the bad-input matrix (each case must give
 * HTTP 400 and exactly the expected `param`), valid requests checked field by field, the
 * conversion to engine parameters, /tokenize and /detokenize requests, and the error bodies
 * parsed back with jansson. (Response builders and UTF-8 repair: test_api_response.c.)
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/error.h"
#include "api/request.h"
#include "common/error.h"
#include "engine/seq.h"
#include "engine/sampling/sampler.h"
#include "testutil.h"

#define TOOL_F    "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"
#define CHAT_MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

/* ---- helpers ------------------------------------------------------------------------------- */

/* Parses an error body and checks it is exactly {"error":{message,type,param,code}} with the
 * given values (param/code NULL means JSON null). */
static void check_error_json(const char *text, size_t len, const char *type, const char *param,
                             const char *code) {
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    REQUIRE(root != NULL);
    CHECK_EQ_INT(json_object_size(root), 1);
    json_t *e = json_object_get(root, "error");
    CHECK(json_is_object(e));
    CHECK_EQ_INT(json_object_size(e), 4);
    json_t *m = json_object_get(e, "message");
    CHECK(json_is_string(m) && json_string_length(m) > 0);
    CHECK_EQ_STR(json_string_value(json_object_get(e, "type")), type);
    json_t *p = json_object_get(e, "param"), *c = json_object_get(e, "code");
    if (param)
        CHECK_EQ_STR(json_string_value(p), param);
    else
        CHECK(json_is_null(p));
    if (code)
        CHECK_EQ_STR(json_string_value(c), code);
    else
        CHECK(json_is_null(c));
    json_decref(root);
}

typedef struct bad_case {
    pgd_api_kind kind;
    const char *body;
    const char *param; /* NULL: the error's param must be null */
} bad_case;

static int check_bad(pgd_api_kind kind, const char *body, size_t len, const char *param) {
    pgd_api_request r;
    pgd_api_error e;
    memset(&e, 0x5a, sizeof e);
    int before = tu_failed_checks;
    int rc = pgd_api_request_parse(kind, body, len, &r, &e);
    CHECK_EQ_INT(rc, PGD_EINVAL);
    CHECK_EQ_INT(e.status, 400);
    CHECK_EQ_STR(e.param, param ? param : "");
    CHECK_EQ_STR(e.code, "");
    CHECK(strlen(e.message) > 0);
    /* the request is left empty and freeing it is safe */
    CHECK(r.root == NULL && r.prompts == NULL && r.logit_bias == NULL && r.messages.n == 0);
    pgd_api_request_free(&r);
    pgd_buf b = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_error_body(&e, &b), 0);
    check_error_json(b.data, b.len, "invalid_request_error", param, NULL);
    pgd_buf_free(&b);
    if (tu_failed_checks != before)
        fprintf(stderr, "    body: %.200s\n    message: %s\n", body, e.message);
    return rc;
}

/* ---- the bad-input matrix ------------------------------------------------------------------ */

#define C PGD_API_CHAT
#define P PGD_API_COMPLETION

static const bad_case k_bad[] = {
    /* body */
    {C, "{", NULL},
    {C, "{\"model\":\"x\",}", NULL},
    {C, "[1,2]", NULL},
    {C, "\"just a string\"", NULL},
    {C, "42", NULL},
    {C, "null", NULL},
    {C, "{} trailing", NULL},
    {C, "{\"model\":\"a\xc3(\"," CHAT_MSGS "}", NULL},          /* invalid UTF-8 */
    {C, "{\"seed\":99999999999999999999," CHAT_MSGS "}", NULL}, /* beyond jansson's integers */
    {C, "{\"temperature\":1e400," CHAT_MSGS "}", NULL},
    /* messages (chat) */
    {C, "{}", "messages"},
    {C, "{\"messages\":null}", "messages"},
    {C, "{\"messages\":\"hi\"}", "messages"},
    {C, "{\"messages\":[]}", "messages"},
    {C, "{\"messages\":[1]}", "messages[0]"},
    {C, "{\"messages\":[{\"role\":1,\"content\":\"x\"}]}", "messages[0].role"},
    {C, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role"},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":5}]}",
     "messages[1].content"},
    {C, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
    {C,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
     "messages[0].content[0].type"},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]}",
     "messages[0].content[0].text"},
    /* model, user */
    {C, "{\"model\":5," CHAT_MSGS "}", "model"},
    {C, "{\"model\":[\"a\"]," CHAT_MSGS "}", "model"},
    {C, "{\"user\":5," CHAT_MSGS "}", "user"},
    /* max tokens */
    {C, "{\"max_tokens\":0," CHAT_MSGS "}", "max_tokens"},
    {C, "{\"max_tokens\":-5," CHAT_MSGS "}", "max_tokens"},
    {C, "{\"max_tokens\":\"10\"," CHAT_MSGS "}", "max_tokens"},
    {C, "{\"max_tokens\":1.5," CHAT_MSGS "}", "max_tokens"},
    {C, "{\"max_completion_tokens\":-3," CHAT_MSGS "}", "max_completion_tokens"},
    {C, "{\"max_completion_tokens\":true," CHAT_MSGS "}", "max_completion_tokens"},
    {C, "{\"max_completion_tokens\":10,\"max_tokens\":0," CHAT_MSGS "}", "max_tokens"},
    /* sampling */
    {C, "{\"temperature\":2.5," CHAT_MSGS "}", "temperature"},
    {C, "{\"temperature\":-0.1," CHAT_MSGS "}", "temperature"},
    {C, "{\"temperature\":\"hot\"," CHAT_MSGS "}", "temperature"},
    {C, "{\"top_p\":0," CHAT_MSGS "}", "top_p"},
    {C, "{\"top_p\":1.01," CHAT_MSGS "}", "top_p"},
    {C, "{\"top_p\":[0.5]," CHAT_MSGS "}", "top_p"},
    {C, "{\"top_k\":-2," CHAT_MSGS "}", "top_k"},
    {C, "{\"top_k\":1.5," CHAT_MSGS "}", "top_k"},
    {C, "{\"top_k\":3000000000," CHAT_MSGS "}", "top_k"},
    {C, "{\"min_p\":1.5," CHAT_MSGS "}", "min_p"},
    {C, "{\"min_p\":-0.5," CHAT_MSGS "}", "min_p"},
    {C, "{\"presence_penalty\":2.01," CHAT_MSGS "}", "presence_penalty"},
    {C, "{\"presence_penalty\":{}," CHAT_MSGS "}", "presence_penalty"},
    {C, "{\"frequency_penalty\":-3," CHAT_MSGS "}", "frequency_penalty"},
    {C, "{\"frequency_penalty\":true," CHAT_MSGS "}", "frequency_penalty"},
    {C, "{\"repetition_penalty\":0," CHAT_MSGS "}", "repetition_penalty"},
    {C, "{\"repetition_penalty\":-1," CHAT_MSGS "}", "repetition_penalty"},
    {C, "{\"repetition_penalty\":1e300," CHAT_MSGS "}", "repetition_penalty"},
    {C, "{\"repetition_penalty\":1e-60," CHAT_MSGS "}", "repetition_penalty"}, /* float 0 */
    {C, "{\"seed\":\"42\"," CHAT_MSGS "}", "seed"},
    {C, "{\"seed\":1.5," CHAT_MSGS "}", "seed"},
    {C, "{\"seed\":1e19," CHAT_MSGS "}", "seed"},
    /* stop */
    {C, "{\"stop\":5," CHAT_MSGS "}", "stop"},
    {C, "{\"min_tokens\":-1," CHAT_MSGS "}", "min_tokens"},
    {C, "{\"include_stop_str_in_output\":1," CHAT_MSGS "}", "include_stop_str_in_output"},
    {C, "{\"min_tokens\":\"3\"," CHAT_MSGS "}", "min_tokens"},
    {C, "{\"min_tokens\":9,\"max_tokens\":8," CHAT_MSGS "}", "min_tokens"},
    {C, "{\"min_tokens\":2,\"response_format\":{\"type\":\"json_object\"}," CHAT_MSGS "}",
     "min_tokens"},
    {C, "{\"stop_token_ids\":5," CHAT_MSGS "}", "stop_token_ids"},
    {C, "{\"stop_token_ids\":[1,-1]," CHAT_MSGS "}", "stop_token_ids"},
    {C, "{\"stop_token_ids\":[1.5]," CHAT_MSGS "}", "stop_token_ids"},
    {C, "{\"stop_token_ids\":[\"1\"]," CHAT_MSGS "}", "stop_token_ids"},
    {P, "{\"stop_token_ids\":[2147483648],\"prompt\":\"x\"}", "stop_token_ids"},
    {P,
     "{\"stop_token_ids\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,"
     "26,27,28,29,30,31,32,33],\"prompt\":\"x\"}",
     "stop_token_ids"},
    {C, "{\"stop\":\"\"," CHAT_MSGS "}", "stop"},
    {C, "{\"stop\":[\"\"]," CHAT_MSGS "}", "stop"},
    {C, "{\"stop\":[\"a\",3]," CHAT_MSGS "}", "stop"},
    {C, "{\"stop\":{\"a\":1}," CHAT_MSGS "}", "stop"},
    {C,
     "{\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\","
     "\"13\",\"14\",\"15\",\"16\",\"17\"]," CHAT_MSGS "}",
     "stop"},
    /* n */
    {C, "{\"n\":0," CHAT_MSGS "}", "n"},
    {C, "{\"n\":17," CHAT_MSGS "}", "n"},
    {C, "{\"n\":\"2\"," CHAT_MSGS "}", "n"},
    /* logprobs (chat) */
    {C, "{\"logprobs\":1," CHAT_MSGS "}", "logprobs"},
    {C, "{\"logprobs\":\"true\"," CHAT_MSGS "}", "logprobs"},
    {C, "{\"top_logprobs\":3," CHAT_MSGS "}", "top_logprobs"},
    {C, "{\"top_logprobs\":0," CHAT_MSGS "}", "top_logprobs"},
    {C, "{\"logprobs\":false,\"top_logprobs\":3," CHAT_MSGS "}", "top_logprobs"},
    {C, "{\"logprobs\":true,\"top_logprobs\":21," CHAT_MSGS "}", "top_logprobs"},
    {C, "{\"logprobs\":true,\"top_logprobs\":-1," CHAT_MSGS "}", "top_logprobs"},
    {C, "{\"logprobs\":true,\"top_logprobs\":\"5\"," CHAT_MSGS "}", "top_logprobs"},
    /* logit_bias */
    {C, "{\"logit_bias\":[]," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"abc\":1}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"-5\":1}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"007\":1}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"1.5\":1}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"\":1}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"99999999999\":1}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"5\":101}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"5\":-100.5}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"5\":\"1\"}," CHAT_MSGS "}", "logit_bias"},
    {C, "{\"logit_bias\":{\"5\":null}," CHAT_MSGS "}", "logit_bias"},
    /* stream */
    {C, "{\"stream\":\"yes\"," CHAT_MSGS "}", "stream"},
    {C, "{\"stream\":1," CHAT_MSGS "}", "stream"},
    {C, "{\"stream_options\":{\"include_usage\":true}," CHAT_MSGS "}", "stream_options"},
    {C, "{\"stream\":false,\"stream_options\":{}," CHAT_MSGS "}", "stream_options"},
    {C, "{\"stream\":true,\"stream_options\":1," CHAT_MSGS "}", "stream_options"},
    {C, "{\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}," CHAT_MSGS "}",
     "stream_options.include_usage"},
    /* misc */
    {C, "{\"ignore_eos\":1," CHAT_MSGS "}", "ignore_eos"},
    {C, "{\"priority\":1.5," CHAT_MSGS "}", "priority"},
    {C, "{\"priority\":3000000000," CHAT_MSGS "}", "priority"},
    /* tools (api/tools.h), and what the server does not do: the legacy function calling,
     * suffix, best_of (not ignored) */
    {C, "{\"tools\":{}," CHAT_MSGS "}", "tools"},
    {C, "{\"tools\":[1]," CHAT_MSGS "}", "tools[0]"},
    {C, "{\"tools\":[{\"type\":\"retrieval\"}]," CHAT_MSGS "}", "tools[0].type"},
    {C, "{\"tools\":[{\"type\":\"function\"}]," CHAT_MSGS "}", "tools[0].function"},
    {C, "{\"tools\":[{\"type\":\"function\",\"function\":{}}]," CHAT_MSGS "}",
     "tools[0].function.name"},
    {C, "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]," CHAT_MSGS "}",
     "tools[0].function.name"},
    {C,
     "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
     "\"ab123456789012345678901234567890123456789012345678901234567890123\"}}]," CHAT_MSGS "}",
     "tools[0].function.name"},
    {C, "{\"tools\":[" TOOL_F "," TOOL_F "]," CHAT_MSGS "}", "tools[1].function.name"},
    {C,
     "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":1}}]"
     "," CHAT_MSGS "}",
     "tools[0].function.description"},
    {C,
     "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]"
     "," CHAT_MSGS "}",
     "tools[0].function.parameters"},
    {C,
     "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":\"y\"}}]"
     "," CHAT_MSGS "}",
     "tools[0].function.strict"},
    {C, "{\"tools\":[" TOOL_F "],\"parallel_tool_calls\":1," CHAT_MSGS "}", "parallel_tool_calls"},
    {C, "{\"functions\":[{\"name\":\"f\"}]," CHAT_MSGS "}", "functions"},
    {C, "{\"tool_choice\":\"required\"," CHAT_MSGS "}", "tool_choice"},
    {C, "{\"tools\":[" TOOL_F "],\"tool_choice\":\"any\"," CHAT_MSGS "}", "tool_choice"},
    {C, "{\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}," CHAT_MSGS "}",
     "tool_choice.function.name"},
    {C,
     "{\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
     "\"g\"}}," CHAT_MSGS "}",
     "tool_choice.function.name"},
    {C, "{\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"x\"}," CHAT_MSGS "}",
     "tool_choice.type"},
    {C, "{\"tool_choice\":3," CHAT_MSGS "}", "tool_choice"},
    {C,
     "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
     "{\"type\":\"string\",\"pattern\":\"a+\"}}}],\"tool_choice\":\"required\"," CHAT_MSGS "}",
     "tools[0].function.parameters"},
    {C,
     "{\"tools\":[" TOOL_F "],\"tool_choice\":\"required\",\"response_format\":{\"type\":"
     "\"json_object\"}," CHAT_MSGS "}",
     "response_format"},
    {P, "{\"prompt\":\"x\",\"tools\":[" TOOL_F "]}", "tools"},
    {P, "{\"prompt\":\"x\",\"tool_choice\":\"required\"}", "tool_choice"},
    {C, "{\"function_call\":{\"name\":\"f\"}," CHAT_MSGS "}", "function_call"},
    {C, "{\"response_format\":{\"type\":\"xml\"}," CHAT_MSGS "}", "response_format"},
    {C, "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}," CHAT_MSGS "}",
     "response_format.json_schema.schema"},
    {C, "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":[]}," CHAT_MSGS "}",
     "response_format.json_schema"},
    {C,
     "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":1,"
     "\"schema\":{}}}," CHAT_MSGS "}",
     "response_format.json_schema.name"},
    {C,
     "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":\"y\","
     "\"schema\":{}}}," CHAT_MSGS "}",
     "response_format.json_schema.strict"},
    {C,
     "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
     "{\"type\":\"integer\",\"multipleOf\":2}}}," CHAT_MSGS "}",
     "response_format.json_schema.schema"},
    {C,
     "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
     "{\"type\":\"object\"}}},\"ignore_eos\":true," CHAT_MSGS "}",
     "ignore_eos"},
    {C, "{\"response_format\":\"json\"," CHAT_MSGS "}", "response_format"},
    {C, "{\"response_format\":{}," CHAT_MSGS "}", "response_format.type"},
    {C, "{\"response_format\":{\"type\":1}," CHAT_MSGS "}", "response_format.type"},
    {C,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"function\","
     "\"name\":\"f\",\"content\":\"4\"}]}",
     "messages[1].role"},
    {C,
     "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
     "\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{x\"}}]},"
     "{\"role\":\"user\",\"content\":\"x\"}]}",
     "messages[0].tool_calls[0].function.arguments"},
    {C,
     "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"function_call\":{\"name\":"
     "\"f\"}},{\"role\":\"user\",\"content\":\"x\"}]}",
     "messages[0].function_call"},
    {C, "{\"response_format\":{\"type\":\"json_object\"},\"ignore_eos\":true," CHAT_MSGS "}",
     "ignore_eos"},
    {P, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix"},
    {P, "{\"prompt\":\"x\",\"suffix\":5}", "suffix"},
    {P, "{\"prompt\":\"x\",\"best_of\":2}", "best_of"},
    {P, "{\"prompt\":\"x\",\"n\":2,\"best_of\":3}", "best_of"},
    {P, "{\"prompt\":\"x\",\"best_of\":0}", "best_of"},
    {P, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\"}}",
     "response_format.json_schema"},
    /* completions: prompt */
    {P, "{}", "prompt"},
    {P, "{\"prompt\":null}", "prompt"},
    {P, "{\"prompt\":5}", "prompt"},
    {P, "{\"prompt\":{\"text\":\"x\"}}", "prompt"},
    {P, "{\"prompt\":[]}", "prompt"},
    {P, "{\"prompt\":[[]]}", "prompt[0]"},
    {P, "{\"prompt\":[1,-2]}", "prompt[1]"},
    {P, "{\"prompt\":[[1,2],[3,-1]]}", "prompt[1][1]"},
    {P, "{\"prompt\":[[1,2],[]]}", "prompt[1]"},
    {P, "{\"prompt\":[\"a\",1]}", "prompt[1]"},
    {P, "{\"prompt\":[1,\"a\"]}", "prompt[1]"},
    {P, "{\"prompt\":[true]}", "prompt[0]"},
    {P, "{\"prompt\":[null]}", "prompt[0]"},
    {P, "{\"prompt\":[{\"a\":1}]}", "prompt[0]"},
    {P, "{\"prompt\":[[1],2]}", "prompt[1]"},
    {P, "{\"prompt\":[[1],[\"a\"]]}", "prompt[1][0]"},
    {P, "{\"prompt\":[1.5]}", "prompt[0]"},
    {P, "{\"prompt\":[3000000000]}", "prompt[0]"},
    /* completions: other fields */
    {P, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs"},
    {P, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs"},
    {P, "{\"prompt\":\"x\",\"logprobs\":-1}", "logprobs"},
    {P, "{\"prompt\":\"x\",\"echo\":\"no\"}", "echo"},
    {P, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens"}, /* 0: only with echo */
    {P, "{\"prompt\":\"x\",\"max_tokens\":0,\"echo\":false}", "max_tokens"},
    {P, "{\"prompt\":\"x\",\"max_tokens\":-1,\"echo\":true}", "max_tokens"},
    {P, "{\"prompt\":\"x\",\"max_completion_tokens\":0,\"echo\":true}", "max_completion_tokens"},
    {C, "{" CHAT_MSGS ",\"max_tokens\":0}", "max_tokens"},
    {P, "{\"prompt\":\"x\",\"prompt_logprobs\":21}", "prompt_logprobs"},
    {C, "{" CHAT_MSGS ",\"prompt_logprobs\":-1}", "prompt_logprobs"},
    {C, "{" CHAT_MSGS ",\"prompt_logprobs\":true}", "prompt_logprobs"},
    {C, "{" CHAT_MSGS ",\"prompt_logprobs\":1,\"stream\":true}", "prompt_logprobs"},
    {P, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "stream_options"},
    {P, "{\"prompt\":\"x\",\"n\":100}", "n"},
    {P, "{\"prompt\":\"x\",\"temperature\":3}", "temperature"},
    {P, "{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop"},
};

static void test_bad_matrix(void) {
    CHECK(PGD_ARRAY_LEN(k_bad) >= 40);
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_bad); i++)
        check_bad(k_bad[i].kind, k_bad[i].body, strlen(k_bad[i].body), k_bad[i].param);
}

static void test_bad_special(void) {
    /* empty body, NULL body, a NUL byte outside a string, invalid UTF-8 outside strings */
    check_bad(C, "", 0, NULL);
    check_bad(C, NULL, 0, NULL);
    check_bad(C, "{\"messages\":[]}\0", 16, NULL);
    check_bad(C, "\xff{}", 3, NULL);
    /* a 1025-byte stop string (1024 is fine) */
    pgd_buf b = PGD_BUF_INIT;
    for (int len = 1024; len <= 1025; len++) {
        pgd_buf_reset(&b);
        pgd_buf_puts(&b, "{" CHAT_MSGS ",\"stop\":[\"a\",\"");
        for (int i = 0; i < len; i++) pgd_buf_puts(&b, "x");
        pgd_buf_puts(&b, "\"]}");
        if (len == 1025) {
            check_bad(C, b.data, b.len, "stop");
        } else {
            pgd_api_request r;
            pgd_api_error e;
            CHECK_EQ_INT(pgd_api_request_parse(C, b.data, b.len, &r, &e), 0);
            CHECK_EQ_INT(r.n_stop, 2);
            CHECK_EQ_INT(r.stop[1].len, 1024);
            pgd_api_request_free(&r);
        }
    }
    pgd_buf_free(&b);
    /* the first bad field in the fixed order wins, whatever the order of the keys */
    const char *two = "{\"n\":0,\"temperature\":9," CHAT_MSGS "}";
    check_bad(C, two, strlen(two), "temperature");
}

/* ---- valid requests ------------------------------------------------------------------------ */

static int parse_ok(pgd_api_kind kind, const char *body, pgd_api_request *r) {
    pgd_api_error e;
    int rc = pgd_api_request_parse(kind, body, strlen(body), r, &e);
    if (rc) fprintf(stderr, "  unexpected error: param=%s message=%s\n", e.param, e.message);
    return rc;
}

static int str_is(pgd_str s, const char *want) {
    return s.ptr && pgd_str_eq(s, want);
}

static void test_chat_all_fields(void) {
    const char *body =
        "{\"model\":\"smol\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
        "\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null}],"
        "\"max_tokens\":100,\"max_completion_tokens\":50,\"temperature\":0.7,\"top_p\":0.9,"
        "\"top_k\":40,\"min_p\":0.05,\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,"
        "\"repetition_penalty\":1.1,\"seed\":-9223372036854775808,\"stop\":[\"\\n\\n\",\"END\"],"
        "\"n\":3,\"logprobs\":true,\"top_logprobs\":5,\"logit_bias\":{\"50256\":-100,\"7\":2.5,"
        "\"0\":100},\"stream\":true,\"stream_options\":{\"include_usage\":true},\"user\":\"u-1\","
        "\"ignore_eos\":true,\"priority\":-7,\"echo\":\"ignored for chat\",\"tools\":[],"
        "\"stop_token_ids\":[7,0,128001.0],\"min_tokens\":20,\"include_stop_str_in_output\":true,"
        "\"unknown\":{\"deep\":[1,2]}}";
    pgd_api_request r;
    REQUIRE(parse_ok(C, body, &r) == 0);
    CHECK_EQ_INT(r.kind, PGD_API_CHAT);
    CHECK(r.root != NULL);
    CHECK(str_is(r.model, "smol"));
    REQUIRE(r.messages.n == 3);
    CHECK_EQ_STR(r.messages.msgs[0].role, "system");
    CHECK_EQ_INT(r.messages.msgs[0].n_parts, 1);
    CHECK(str_is(r.messages.msgs[0].parts[0], "be brief"));
    CHECK_EQ_STR(r.messages.msgs[1].role, "user");
    CHECK_EQ_INT(r.messages.msgs[1].n_parts, 2);
    CHECK(str_is(r.messages.msgs[1].parts[1], "b"));
    CHECK_EQ_STR(r.messages.msgs[2].role, "assistant");
    CHECK(r.messages.msgs[2].parts[0].len == 0);
    CHECK_EQ_INT(r.max_tokens, 50); /* max_completion_tokens wins */
    CHECK(r.temperature == 0.7f);
    CHECK(r.top_p == 0.9f);
    CHECK_EQ_INT(r.top_k, 40);
    CHECK(r.min_p == 0.05f);
    CHECK(r.presence_penalty == 0.5f);
    CHECK(r.frequency_penalty == -0.5f);
    CHECK(r.repetition_penalty == 1.1f);
    CHECK(r.has_seed);
    CHECK(r.seed == INT64_MIN);
    REQUIRE(r.n_stop == 2);
    CHECK(str_is(r.stop[0], "\n\n"));
    CHECK(str_is(r.stop[1], "END"));
    CHECK_EQ_INT(r.n, 3);
    CHECK(r.logprobs);
    CHECK_EQ_INT(r.top_logprobs, 5);
    REQUIRE(r.n_logit_bias == 3);
    CHECK_EQ_INT(r.logit_bias[0].token, 50256);
    CHECK(r.logit_bias[0].bias == -100.0f);
    CHECK_EQ_INT(r.logit_bias[1].token, 7);
    CHECK(r.logit_bias[1].bias == 2.5f);
    CHECK_EQ_INT(r.logit_bias[2].token, 0);
    CHECK(r.logit_bias[2].bias == 100.0f);
    CHECK(r.stream);
    CHECK(r.include_usage);
    CHECK(str_is(r.user, "u-1"));
    CHECK(r.ignore_eos);
    CHECK_EQ_INT(r.priority, -7);
    CHECK(!r.echo);
    CHECK(r.prompts == NULL && r.n_prompts == 0);
    CHECK_EQ_INT(pgd_api_request_n_choices(&r), 3);

    /* the engine parameters of choice 2 */
    pgd_seq_params sp;
    memset(&sp, 0x77, sizeof sp);
    pgd_api_request_seq_params(&r, 2, 12345, &sp);
    CHECK(sp.sampling.temperature == 0.7f);
    CHECK(sp.sampling.top_p == 0.9f);
    CHECK_EQ_INT(sp.sampling.top_k, 40);
    CHECK(sp.sampling.min_p == 0.05f);
    CHECK(sp.sampling.presence_penalty == 0.5f);
    CHECK(sp.sampling.frequency_penalty == -0.5f);
    CHECK(sp.sampling.repetition_penalty == 1.1f);
    CHECK(sp.sampling.seed == (uint64_t)INT64_MIN + 2); /* seed + choice, not the random one */
    CHECK(sp.sampling.logprobs);
    CHECK_EQ_INT(sp.sampling.top_logprobs, 5);
    CHECK(sp.sampling.logit_bias == r.logit_bias);
    CHECK_EQ_INT(sp.sampling.n_logit_bias, 3);
    CHECK_EQ_INT(sp.max_tokens, 50);
    CHECK(sp.ignore_eos);
    CHECK(sp.stop == r.stop);
    CHECK_EQ_INT(sp.n_stop, 2);
    REQUIRE(sp.n_stop_ids == 3 && sp.stop_ids == r.stop_ids);
    CHECK(sp.stop_ids[0] == 7 && sp.stop_ids[1] == 0 && sp.stop_ids[2] == 128001);
    CHECK_EQ_INT(sp.min_tokens, 20);
    CHECK(sp.include_stop);
    CHECK(sp.cache_salt == 0);
    const char *param = NULL;
    CHECK_EQ_INT(pgd_sampling_params_validate(&sp.sampling, 50257, &param), 0);
    /* the caller checks ids against the vocabulary: 50256 is outside a 50000-token one */
    CHECK_EQ_INT(pgd_sampling_params_validate(&sp.sampling, 50000, &param), PGD_EINVAL);
    CHECK_EQ_STR(param, "logit_bias");
    pgd_api_request_free(&r);
    CHECK(r.root == NULL && r.logit_bias == NULL && r.messages.msgs == NULL);
    pgd_api_request_free(&r); /* twice is fine */
    pgd_api_request_free(NULL);
}

static void test_chat_defaults_and_nulls(void) {
    const char *bodies[] = {
        "{" CHAT_MSGS "}",
        "{" CHAT_MSGS ",\"model\":null,\"max_tokens\":null,\"max_completion_tokens\":null,"
        "\"temperature\":null,\"top_p\":null,\"top_k\":null,\"min_p\":null,"
        "\"presence_penalty\":null,\"frequency_penalty\":null,\"repetition_penalty\":null,"
        "\"seed\":null,\"stop\":null,\"n\":null,\"logprobs\":null,\"top_logprobs\":null,"
        "\"logit_bias\":null,\"stream\":null,\"stream_options\":null,\"user\":null,"
        "\"ignore_eos\":null,\"priority\":null}",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(bodies); i++) {
        pgd_api_request r;
        REQUIRE(parse_ok(C, bodies[i], &r) == 0);
        CHECK(r.model.ptr == NULL);
        CHECK_EQ_INT(r.messages.n, 1);
        CHECK_EQ_INT(r.max_tokens, 0);
        CHECK(r.temperature == 1.0f && r.top_p == 1.0f && r.top_k == 0 && r.min_p == 0.0f);
        CHECK(r.presence_penalty == 0.0f && r.frequency_penalty == 0.0f);
        CHECK(r.repetition_penalty == 1.0f);
        CHECK(!r.has_seed);
        CHECK_EQ_INT(r.n_stop, 0);
        CHECK_EQ_INT(r.n, 1);
        CHECK(!r.logprobs);
        CHECK_EQ_INT(r.top_logprobs, 0);
        CHECK(r.logit_bias == NULL && r.n_logit_bias == 0);
        CHECK(!r.stream && !r.include_usage);
        CHECK(r.user.ptr == NULL);
        CHECK(!r.ignore_eos);
        CHECK_EQ_INT(r.priority, 0);
        CHECK_EQ_INT(pgd_api_request_n_choices(&r), 1);
        pgd_seq_params sp;
        pgd_api_request_seq_params(&r, 0, 0xfeedULL, &sp);
        CHECK(sp.sampling.seed == 0xfeedULL); /* no seed: the caller's random one */
        CHECK(sp.sampling.temperature == 1.0f && sp.sampling.top_p == 1.0f);
        CHECK(!sp.sampling.logprobs && sp.sampling.top_logprobs == 0);
        CHECK(sp.sampling.logit_bias == NULL && sp.sampling.n_logit_bias == 0);
        CHECK(sp.stop == NULL && sp.n_stop == 0);
        CHECK_EQ_INT(sp.max_tokens, 0);
        CHECK_EQ_INT(pgd_sampling_params_validate(&sp.sampling, 100, NULL), 0);
        pgd_api_request_free(&r);
    }
}

/* The "off" values of the fields the server refuses (refuse_unsupported): accepted, as clients
 * send them by default; "developer" messages are system messages. */
static void test_unsupported_fields_off(void) {
    const char *bodies[] = {
        "{" CHAT_MSGS ",\"tools\":[],\"functions\":[],\"tool_choice\":\"none\","
        "\"function_call\":\"none\",\"response_format\":{\"type\":\"text\"},"
        "\"parallel_tool_calls\":false}",
        "{" CHAT_MSGS ",\"tools\":null,\"tool_choice\":\"auto\",\"function_call\":\"auto\","
        "\"response_format\":null}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
        "\"content\":\"b\",\"tool_calls\":[],\"function_call\":null},{\"role\":\"user\","
        "\"content\":\"c\"}]}",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(bodies); i++) {
        pgd_api_request r;
        REQUIRE(parse_ok(C, bodies[i], &r) == 0);
        CHECK(r.messages.n >= 1);
        CHECK(!r.json);
        pgd_api_request_free(&r);
    }
    /* JSON mode: the request and the sequence say so */
    pgd_api_request r;
    REQUIRE(parse_ok(C, "{" CHAT_MSGS ",\"response_format\":{\"type\":\"json_object\"}}", &r) == 0);
    CHECK(r.json == pgd_json_schema_object());
    pgd_seq_params sp;
    pgd_api_request_seq_params(&r, 0, 1, &sp);
    CHECK(sp.json == pgd_json_schema_object());
    pgd_api_request_free(&r);
    /* structured output: the request holds the compiled schema, its sequences borrow it */
    REQUIRE(
        parse_ok(C,
                 "{" CHAT_MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                 "{\"name\":\"w\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
                 "{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}}",
                 &r) == 0);
    REQUIRE(r.json && r.json != pgd_json_schema_object());
    CHECK(r.json->nodes[r.json->root].props && r.json->nodes[r.json->root].n_props == 1);
    pgd_api_request_seq_params(&r, 0, 1, &sp);
    CHECK(sp.json == r.json);
    pgd_api_request_free(&r);
    const char *comp[] = {
        "{\"prompt\":\"x\",\"suffix\":\"\",\"best_of\":1}",
        "{\"prompt\":\"x\",\"suffix\":null,\"n\":3,\"best_of\":3}",
        "{\"prompt\":\"x\",\"best_of\":null}",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(comp); i++) {
        pgd_api_request r;
        REQUIRE(parse_ok(P, comp[i], &r) == 0);
        pgd_api_request_free(&r);
    }
    REQUIRE(parse_ok(C,
                     "{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                     "{\"role\":\"user\",\"content\":\"hi\"}]}",
                     &r) == 0);
    REQUIRE(r.messages.n == 2);
    CHECK_EQ_STR(r.messages.msgs[0].role, "system");
    CHECK_EQ_STR(r.messages.msgs[1].role, "user");
    CHECK_EQ_INT(r.messages.msgs[0].n_parts, 1);
    CHECK(r.messages.msgs[0].parts[0].len == 8 &&
          !memcmp(r.messages.msgs[0].parts[0].ptr, "be brief", 8));
    pgd_api_request_free(&r);
}

static void test_chat_edge_values(void) {
    pgd_api_request r;
    /* integral reals for integers; boundaries inclusive; max_completion_tokens wins whatever
     * the key order; stop as one string; top_logprobs with logprobs true at 0 and 20 */
    REQUIRE(parse_ok(C,
                     "{\"max_completion_tokens\":7,\"max_tokens\":5.0,\"temperature\":2,"
                     "\"top_p\":1,\"top_k\":-1,\"min_p\":1,\"presence_penalty\":-2,"
                     "\"frequency_penalty\":2,\"seed\":9223372036854775807,\"n\":16.0,"
                     "\"stop\":\"\xe2\x82\xac\",\"logprobs\":true,\"top_logprobs\":20,"
                     "\"stream\":false,\"priority\":2147483647," CHAT_MSGS "}",
                     &r) == 0);
    CHECK_EQ_INT(r.max_tokens, 7);
    CHECK(r.temperature == 2.0f && r.top_p == 1.0f && r.top_k == -1 && r.min_p == 1.0f);
    CHECK(r.presence_penalty == -2.0f && r.frequency_penalty == 2.0f);
    CHECK(r.has_seed && r.seed == INT64_MAX);
    CHECK_EQ_INT(r.n, 16);
    CHECK_EQ_INT(r.n_stop, 1);
    CHECK(str_is(r.stop[0], "\xe2\x82\xac"));
    CHECK(r.logprobs && r.top_logprobs == 20);
    CHECK_EQ_INT(r.priority, INT32_MAX);
    pgd_seq_params sp;
    pgd_api_request_seq_params(&r, 15, 1, &sp);
    CHECK(sp.sampling.seed == (uint64_t)INT64_MAX + 15); /* wraps as uint64, no UB */
    pgd_api_request_free(&r);

    /* temperature 0, logprobs false with no top_logprobs, stream_options with stream true but
     * include_usage absent, empty stop list, top_logprobs 0 with logprobs */
    REQUIRE(parse_ok(C,
                     "{\"temperature\":0,\"stop\":[],\"logprobs\":true,\"top_logprobs\":0,"
                     "\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":true},"
                     "\"seed\":0," CHAT_MSGS "}",
                     &r) == 0);
    CHECK(r.temperature == 0.0f);
    CHECK_EQ_INT(r.n_stop, 0);
    CHECK(r.logprobs && r.top_logprobs == 0);
    CHECK(r.stream && !r.include_usage);
    CHECK(r.has_seed && r.seed == 0);
    pgd_api_request_free(&r);

    /* a NUL inside a string is kept (lengths, not C strings) */
    REQUIRE(parse_ok(C, "{\"user\":\"a\\u0000b\",\"stop\":\"x\\u0000\"," CHAT_MSGS "}", &r) == 0);
    CHECK(r.user.len == 3 && memcmp(r.user.ptr, "a\0b", 3) == 0);
    CHECK(r.stop[0].len == 2 && memcmp(r.stop[0].ptr, "x\0", 2) == 0);
    pgd_api_request_free(&r);

    /* a top_p below float's range (found by tests/fuzz/fuzz_api_chat) stays greater than 0, so
     * the engine's own check accepts what the API accepted */
    REQUIRE(parse_ok(C, "{\"top_p\":1e-50," CHAT_MSGS "}", &r) == 0);
    CHECK(r.top_p > 0.0f);
    pgd_api_request_seq_params(&r, 0, 1, &sp);
    CHECK_EQ_INT(pgd_sampling_params_validate(&sp.sampling, 100, NULL), 0);
    pgd_api_request_free(&r);
}

static void test_completion_prompts(void) {
    pgd_api_request r;
    /* one string, with echo, legacy logprobs 0 (chosen token only) */
    REQUIRE(parse_ok(P,
                     "{\"model\":\"m\",\"prompt\":\"Once upon\",\"echo\":true,\"logprobs\":0,"
                     "\"n\":2,\"messages\":\"ignored\",\"top_logprobs\":99}",
                     &r) == 0);
    CHECK_EQ_INT(r.kind, PGD_API_COMPLETION);
    REQUIRE(r.n_prompts == 1);
    CHECK(!r.prompts[0].is_tokens);
    CHECK(str_is(r.prompts[0].text, "Once upon"));
    CHECK(r.prompts[0].ids == NULL);
    CHECK(r.echo);
    CHECK(r.logprobs && r.top_logprobs == 0);
    CHECK(!r.prompt_only);
    CHECK_EQ_INT(r.messages.n, 0);
    CHECK_EQ_INT(pgd_api_request_n_choices(&r), 2);
    pgd_api_request_free(&r);

    /* max_tokens 0 with echo: the prompt alone (max_completion_tokens, when given, wins) */
    REQUIRE(parse_ok(P, "{\"prompt\":\"x\",\"max_tokens\":0,\"echo\":true,\"logprobs\":1}", &r) ==
            0);
    CHECK(r.prompt_only && r.echo && r.logprobs && r.top_logprobs == 1);
    CHECK_EQ_INT(r.prompt_logprobs, -1);
    pgd_api_request_free(&r);
    /* vLLM's prompt_logprobs (null: absent) */
    REQUIRE(parse_ok(P, "{\"prompt\":\"x\",\"prompt_logprobs\":20}", &r) == 0);
    CHECK_EQ_INT(r.prompt_logprobs, 20);
    pgd_api_request_free(&r);
    REQUIRE(parse_ok(C, "{" CHAT_MSGS ",\"prompt_logprobs\":null,\"stream\":true}", &r) == 0);
    CHECK_EQ_INT(r.prompt_logprobs, -1);
    pgd_api_request_free(&r);
    REQUIRE(
        parse_ok(P, "{\"prompt\":\"x\",\"max_tokens\":0,\"max_completion_tokens\":3,\"echo\":true}",
                 &r) == 0);
    CHECK(!r.prompt_only);
    CHECK_EQ_INT(r.max_tokens, 3);
    pgd_api_request_free(&r);

    /* list of strings (an empty prompt is allowed), logprobs 5 */
    REQUIRE(parse_ok(P, "{\"prompt\":[\"a\",\"\",\"c c\"],\"logprobs\":5,\"n\":3}", &r) == 0);
    REQUIRE(r.n_prompts == 3);
    CHECK(str_is(r.prompts[0].text, "a"));
    CHECK(r.prompts[1].text.ptr != NULL && r.prompts[1].text.len == 0);
    CHECK(str_is(r.prompts[2].text, "c c"));
    CHECK(r.logprobs && r.top_logprobs == 5);
    CHECK_EQ_INT(pgd_api_request_n_choices(&r), 9);
    pgd_seq_params sp;
    pgd_api_request_seq_params(&r, 1, 99, &sp);
    CHECK(sp.sampling.logprobs && sp.sampling.top_logprobs == 5);
    pgd_api_request_free(&r);

    /* one list of token ids (0 and INT32_MAX are fine; the vocabulary is checked later) */
    REQUIRE(parse_ok(P, "{\"prompt\":[0,15,2147483647,7.0],\"logprobs\":null}", &r) == 0);
    REQUIRE(r.n_prompts == 1);
    CHECK(r.prompts[0].is_tokens);
    CHECK(r.prompts[0].text.ptr == NULL);
    REQUIRE(r.prompts[0].n_ids == 4);
    CHECK(r.prompts[0].ids[0] == 0 && r.prompts[0].ids[1] == 15);
    CHECK(r.prompts[0].ids[2] == INT32_MAX && r.prompts[0].ids[3] == 7);
    CHECK(!r.logprobs);
    pgd_api_request_free(&r);

    /* list of lists */
    REQUIRE(parse_ok(P, "{\"prompt\":[[1,2,3],[4],[5,6]],\"echo\":false}", &r) == 0);
    REQUIRE(r.n_prompts == 3);
    const int32_t want[3][3] = {{1, 2, 3}, {4}, {5, 6}};
    const size_t want_n[3] = {3, 1, 2};
    for (int i = 0; i < 3; i++) {
        CHECK(r.prompts[i].is_tokens);
        REQUIRE(r.prompts[i].n_ids == want_n[i]);
        for (size_t j = 0; j < want_n[i]; j++) CHECK_EQ_INT(r.prompts[i].ids[j], want[i][j]);
    }
    CHECK(!r.echo);
    pgd_api_request_free(&r);
}

/* ---- tokenize / detokenize ----------------------------------------------------------------- */

static void tok_bad(const char *body, const char *param) {
    pgd_api_tokenize_request r;
    pgd_api_error e;
    CHECK_EQ_INT(pgd_api_tokenize_parse(body, strlen(body), &r, &e), PGD_EINVAL);
    CHECK_EQ_INT(e.status, 400);
    CHECK_EQ_STR(e.param, param ? param : "");
    CHECK(r.root == NULL);
    pgd_api_tokenize_free(&r);
}

static void detok_bad(const char *body, const char *param) {
    pgd_api_detokenize_request r;
    pgd_api_error e;
    CHECK_EQ_INT(pgd_api_detokenize_parse(body, strlen(body), &r, &e), PGD_EINVAL);
    CHECK_EQ_INT(e.status, 400);
    CHECK_EQ_STR(e.param, param ? param : "");
    CHECK(r.root == NULL && r.tokens == NULL);
    pgd_api_detokenize_free(&r);
}

static void test_tokenize_requests(void) {
    pgd_api_tokenize_request t;
    pgd_api_error e;
    const char *b1 = "{\"model\":\"m\",\"prompt\":\"Hello world\"}";
    REQUIRE(pgd_api_tokenize_parse(b1, strlen(b1), &t, &e) == 0);
    CHECK(!t.chat);
    CHECK(str_is(t.model, "m"));
    CHECK(str_is(t.prompt, "Hello world"));
    CHECK(t.add_special_tokens); /* vLLM: true for a prompt */
    pgd_api_tokenize_free(&t);

    const char *b2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                     "\"add_generation_prompt\":false,\"add_special_tokens\":true}";
    REQUIRE(pgd_api_tokenize_parse(b2, strlen(b2), &t, &e) == 0);
    CHECK(t.chat);
    CHECK(t.model.ptr == NULL);
    REQUIRE(t.messages.n == 1);
    CHECK(str_is(t.messages.msgs[0].parts[0], "hi"));
    CHECK(!t.add_generation_prompt);
    CHECK(t.add_special_tokens);
    pgd_api_tokenize_free(&t);

    const char *b3 = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    REQUIRE(pgd_api_tokenize_parse(b3, strlen(b3), &t, &e) == 0);
    CHECK(t.add_generation_prompt); /* default true */
    CHECK(!t.add_special_tokens);   /* vLLM: false for chat */
    pgd_api_tokenize_free(&t);
    pgd_api_tokenize_free(NULL);

    tok_bad("{}", "prompt");
    tok_bad("[]", NULL);
    tok_bad("{\"prompt\":1}", "prompt");
    tok_bad("{\"prompt\":[1,2]}", "prompt");
    tok_bad("{\"prompt\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "messages");
    tok_bad("{\"messages\":[]}", "messages");
    tok_bad("{\"messages\":[{\"role\":\"user\",\"content\":1}]}", "messages[0].content");
    tok_bad(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":\"x\"}",
        "add_generation_prompt");
    tok_bad("{\"prompt\":\"a\",\"add_special_tokens\":1}", "add_special_tokens");
    tok_bad("{\"prompt\":\"a\",\"model\":2}", "model");

    pgd_api_detokenize_request d;
    const char *b4 = "{\"model\":\"m\",\"tokens\":[1,0,2147483647]}";
    REQUIRE(pgd_api_detokenize_parse(b4, strlen(b4), &d, &e) == 0);
    CHECK(str_is(d.model, "m"));
    REQUIRE(d.n_tokens == 3);
    CHECK(d.tokens[0] == 1 && d.tokens[1] == 0 && d.tokens[2] == INT32_MAX);
    pgd_api_detokenize_free(&d);
    const char *b5 = "{\"tokens\":[]}";
    REQUIRE(pgd_api_detokenize_parse(b5, strlen(b5), &d, &e) == 0);
    CHECK_EQ_INT(d.n_tokens, 0);
    pgd_api_detokenize_free(&d);
    pgd_api_detokenize_free(NULL);

    detok_bad("{}", "tokens");
    detok_bad("{\"tokens\":\"1 2\"}", "tokens");
    detok_bad("{\"tokens\":[1,-1]}", "tokens[1]");
    detok_bad("{\"tokens\":[1.5]}", "tokens[0]");
    detok_bad("{\"tokens\":[[1]]}", "tokens[0]");
    detok_bad("{\"tokens\":[1],\"model\":false}", "model");
    detok_bad("nope", NULL);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_error_types(void) {
    static const struct {
        int status;
        const char *type;
    } want[] = {
        {400, "invalid_request_error"}, {401, "invalid_request_error"},
        {403, "permission_error"},      {404, "invalid_request_error"},
        {405, "invalid_request_error"}, {413, "invalid_request_error"},
        {422, "invalid_request_error"}, {429, "rate_limit_error"},
        {500, "server_error"},          {503, "server_error"},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(want); i++)
        CHECK_EQ_STR(pgd_api_error_type(want[i].status), want[i].type);

    CHECK_EQ_INT(pgd_api_status_for_code(PGD_EINVAL), 400);
    CHECK_EQ_INT(pgd_api_status_for_code(PGD_ERANGE), 400);
    CHECK_EQ_INT(pgd_api_status_for_code(PGD_ENOTFOUND), 404);
    CHECK_EQ_INT(pgd_api_status_for_code(PGD_EFULL), 503);
    CHECK_EQ_INT(pgd_api_status_for_code(PGD_ESHUTDOWN), 503);
    CHECK_EQ_INT(pgd_api_status_for_code(PGD_ENOMEM), 500);
    CHECK_EQ_INT(pgd_api_status_for_code(PGD_ECUDA), 500);
    CHECK_EQ_INT(pgd_api_status_for_code(PGD_EDEVLOST),
                 503); /* the server stops: not the caller's */
}

static void body_of(const pgd_api_error *e, const char *type, const char *param, const char *code) {
    pgd_buf b = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_api_error_body(e, &b), 0);
    CHECK(b.data && strchr(b.data, '\n') == NULL);
    check_error_json(b.data, b.len, type, param, code);
    pgd_buf_free(&b);
}

static void test_error_bodies(void) {
    pgd_api_error e;
    CHECK_EQ_INT(pgd_api_error_set(&e, 400, "temperature", NULL, "'%s' must be %s", "temperature",
                                   "between 0 and 2"),
                 PGD_EINVAL);
    body_of(&e, "invalid_request_error", "temperature", NULL);
    /* exact text of a simple body */
    pgd_buf b = PGD_BUF_INIT;
    pgd_api_error_set(&e, 429, NULL, "rate_limit_exceeded", "slow down");
    CHECK_EQ_INT(pgd_api_error_body(&e, &b), 0);
    CHECK_EQ_STR(b.data, "{\"error\":{\"message\":\"slow down\",\"type\":\"rate_limit_error\","
                         "\"param\":null,\"code\":\"rate_limit_exceeded\"}}");
    /* SSE event: data: <body>\n\n, appended after what the buffer holds */
    pgd_buf s = PGD_BUF_INIT;
    pgd_buf_puts(&s, "x");
    CHECK_EQ_INT(pgd_api_error_sse(&e, &s), 0);
    CHECK(s.len == 1 + 6 + b.len + 2);
    CHECK(memcmp(s.data, "xdata: ", 7) == 0);
    CHECK(memcmp(s.data + 7, b.data, b.len) == 0);
    CHECK(memcmp(s.data + 7 + b.len, "\n\n", 2) == 0);
    pgd_buf_free(&s);
    pgd_buf_free(&b);

    CHECK_EQ_INT(pgd_api_error_unauthorized(&e), PGD_EINVAL);
    CHECK_EQ_INT(e.status, 401);
    body_of(&e, "invalid_request_error", NULL, "invalid_api_key");

    /* a model name with invalid UTF-8 and quotes still gives valid JSON */
    pgd_api_error_model_not_found(&e, "gpt-\xff\"x", 7);
    CHECK_EQ_INT(e.status, 404);
    body_of(&e, "invalid_request_error", "model", "model_not_found");
    CHECK(strstr(e.message, "gpt-\xef\xbf\xbd\"x") != NULL);

    pgd_api_error_route_not_found(&e, "GET", "/v2/nothing");
    CHECK_EQ_INT(e.status, 404);
    body_of(&e, "invalid_request_error", NULL, NULL);
    CHECK(strstr(e.message, "/v2/nothing") != NULL);
    pgd_api_error_method_not_allowed(&e, "DELETE", "/v1/models");
    CHECK_EQ_INT(e.status, 405);
    body_of(&e, "invalid_request_error", NULL, NULL);
    CHECK_EQ_INT(pgd_api_error_set(&e, 413, NULL, NULL, "too large"), PGD_EINVAL);
    body_of(&e, "invalid_request_error", NULL, NULL);
    CHECK_EQ_INT(pgd_api_error_set(&e, 500, NULL, NULL, "boom"), PGD_EIO);
    body_of(&e, "server_error", NULL, NULL);
    pgd_api_error_set(&e, 503, NULL, NULL, "the server is shutting down");
    body_of(&e, "server_error", NULL, NULL);
    /* an explicit type overrides the table */
    pgd_api_error_set(&e, 500, NULL, NULL, "boom");
    snprintf(e.type, sizeof e.type, "internal_server_error");
    body_of(&e, "internal_server_error", NULL, NULL);

    /* a message cut by the fixed buffer inside a character is repaired, not invalid JSON */
    char longmsg[600];
    memset(longmsg, 'a', sizeof longmsg);
    for (size_t i = 500; i + 3 < sizeof longmsg; i += 3) memcpy(longmsg + i, "\xe2\x82\xac", 3);
    longmsg[sizeof longmsg - 1] = '\0';
    pgd_api_error_set(&e, 400, "p", NULL, "%s", longmsg);
    body_of(&e, "invalid_request_error", "p", NULL);
}

int main(void) {
    RUN(test_bad_matrix);
    RUN(test_bad_special);
    RUN(test_chat_all_fields);
    RUN(test_chat_defaults_and_nulls);
    RUN(test_unsupported_fields_off);
    RUN(test_chat_edge_values);
    RUN(test_completion_prompts);
    RUN(test_tokenize_requests);
    RUN(test_error_types);
    RUN(test_error_bodies);
    return test_summary();
}
