/*
 * tests/unit/test_api_tools.c — api/tools: tool_choice read into modes, the schema that forces
 * a call walked by the engine's JSON recognizer (outputs it must allow and refuse), the output
 * parser on a table of model outputs (each fed whole, byte by byte and split at every offset
 * must give the same content and calls), and the response shapes of tool calls.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"
#include "api/response.h"
#include "api/tools.h"
#include "common/error.h"
#include "engine/sampling/json_fsm.h"
#include "testutil.h"

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define WEATHER                                                                                    \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather "     \
    "now\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"    \
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"]}}}"
#define ADD                                                                                        \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","   \
    "\"properties\":{\"xs\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/num\"}}},"           \
    "\"required\":[\"xs\"],\"$defs\":{\"num\":{\"type\":\"integer\"}}}}}"
#define NOARGS "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}"

static int parse(const char *body, pgd_api_request *r) {
    pgd_api_error e;
    int rc = pgd_api_request_parse(PGD_API_CHAT, body, strlen(body), r, &e);
    if (rc) fprintf(stderr, "  parse: %s (param %s)\n", e.message, e.param);
    return rc;
}

/* Whether the recognizer of `sc` takes `text` as one whole document. */
static bool allows(const pgd_json_schema *sc, const char *text) {
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, sc);
    return pgd_json_fsm_feed(&f, (const uint8_t *)text, strlen(text)) && pgd_json_fsm_done(&f);
}

static void test_choices(void) {
    pgd_api_request r;
    REQUIRE(parse("{" MSGS ",\"tools\":[" WEATHER "," NOARGS "]}", &r) == 0);
    CHECK_EQ_INT(r.tools.choice, PGD_TOOL_CHOICE_AUTO);
    CHECK_EQ_INT(r.tools.n, 2);
    CHECK(r.tools.parallel);
    CHECK(!r.json);
    /* definitions as a template's tojson writes them: ", " and ": ", order kept */
    CHECK(r.tools.defs[1].len == strlen("{\"type\": \"function\", \"function\": {\"name\": "
                                        "\"ping\"}}") &&
          !memcmp(r.tools.defs[1].ptr,
                  "{\"type\": \"function\", \"function\": {\"name\": \"ping\"}}",
                  r.tools.defs[1].len));
    CHECK(r.tools.names[0].len == 11 && !memcmp(r.tools.names[0].ptr, "get_weather", 11));
    pgd_api_request_free(&r);

    REQUIRE(parse("{" MSGS ",\"tools\":[" WEATHER "],\"tool_choice\":\"none\"}", &r) == 0);
    CHECK_EQ_INT(r.tools.choice, PGD_TOOL_CHOICE_NONE);
    CHECK_EQ_INT(r.tools.n, 1);
    pgd_api_request_free(&r);

    REQUIRE(parse("{" MSGS ",\"tool_choice\":\"auto\",\"tools\":[]}", &r) == 0);
    CHECK_EQ_INT(r.tools.choice, PGD_TOOL_CHOICE_NONE);
    pgd_api_request_free(&r);

    /* named: the output is the tool's arguments */
    REQUIRE(parse("{" MSGS ",\"tools\":[" NOARGS "," WEATHER "],\"tool_choice\":{\"type\":"
                  "\"function\",\"function\":{\"name\":\"get_weather\"}}}",
                  &r) == 0);
    CHECK_EQ_INT(r.tools.choice, PGD_TOOL_CHOICE_NAMED);
    CHECK_EQ_INT(r.tools.named, 1);
    REQUIRE(r.json != NULL);
    CHECK(allows(r.json, "{\"city\": \"Paris\", \"unit\": \"c\"}"));
    CHECK(!allows(r.json, "{\"city\": \"Paris\"}"));
    CHECK(!allows(r.json, "{\"city\": \"Paris\", \"unit\": \"k\"}"));
    CHECK(!allows(r.json, "[{\"name\": \"get_weather\"}]"));
    pgd_api_request_free(&r);

    /* a tool without parameters, named: {} only */
    REQUIRE(parse("{" MSGS ",\"tools\":[" NOARGS "],\"tool_choice\":{\"type\":\"function\","
                  "\"function\":{\"name\":\"ping\"}}}",
                  &r) == 0);
    CHECK(allows(r.json, "{}"));
    CHECK(!allows(r.json, "{\"a\": 1}"));
    pgd_api_request_free(&r);

    /* required, one tool: an array of its calls; local $refs of its parameters still resolve */
    REQUIRE(parse("{" MSGS ",\"tools\":[" ADD "],\"tool_choice\":\"required\"}", &r) == 0);
    CHECK_EQ_INT(r.tools.choice, PGD_TOOL_CHOICE_REQUIRED);
    REQUIRE(r.json != NULL);
    CHECK(allows(r.json, "[{\"name\": \"add\", \"arguments\": {\"xs\": [1, 2]}}]"));
    CHECK(allows(r.json, "[{\"name\":\"add\",\"arguments\":{\"xs\":[]}},{\"name\":\"add\","
                         "\"arguments\":{\"xs\":[3]}}]"));
    CHECK(!allows(r.json, "[]"));
    CHECK(!allows(r.json, "[{\"name\": \"add\", \"arguments\": {\"xs\": [1.5]}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"add\", \"arguments\": {\"city\": \"Oslo\"}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"nope\", \"arguments\": {}}]"));
    CHECK(!allows(r.json, "[{\"arguments\": {\"xs\": []}, \"name\": \"add\"}]"));
    pgd_api_request_free(&r);

    /* required, several tools: each call's arguments follow its own tool's parameters (the
     * name, read first, leaves one branch of the union) */
    REQUIRE(parse("{" MSGS ",\"tools\":[" WEATHER "," ADD "," NOARGS
                  "],\"tool_choice\":\"required\"}",
                  &r) == 0);
    REQUIRE(r.json != NULL);
    CHECK(allows(r.json, "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":"
                         "\"f\"}},{\"name\":\"ping\",\"arguments\":{}},{\"name\":\"add\","
                         "\"arguments\":{\"xs\":[2]}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"add\", \"arguments\": {\"xs\": [1.5]}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"add\", \"arguments\": {\"city\": \"Oslo\"}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"ping\", \"arguments\": {\"xs\": [1]}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]"));
    CHECK(!allows(r.json, "[]"));
    CHECK(!allows(r.json, "[{\"name\": \"nope\", \"arguments\": {}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"ping\"}]"));
    pgd_api_request_free(&r);

    /* more tools than a union holds: the names are constrained, the arguments are objects */
    {
        pgd_buf body = PGD_BUF_INIT;
        pgd_buf_puts(&body, "{" MSGS ",\"tool_choice\":\"required\",\"tools\":[");
        for (int i = 0; i < 17; i++)
            pgd_buf_printf(&body,
                           "%s{\"type\":\"function\",\"function\":{\"name\":\"t%d\","
                           "\"parameters\":{\"type\":\"object\",\"properties\":{\"v%d\":"
                           "{\"type\":\"integer\"}}}}}",
                           i ? "," : "", i, i);
        pgd_buf_puts(&body, "]}");
        REQUIRE(parse(body.data, &r) == 0);
        REQUIRE(r.json != NULL);
        CHECK(allows(r.json, "[{\"name\": \"t16\", \"arguments\": {\"v16\": 1}}]"));
        CHECK(allows(r.json, "[{\"name\": \"t3\", \"arguments\": {\"v16\": \"x\"}}]"));
        CHECK(!allows(r.json, "[{\"name\": \"t17\", \"arguments\": {}}]"));
        CHECK(!allows(r.json, "[{\"name\": \"t1\", \"arguments\": 1}]"));
        pgd_api_request_free(&r);
        pgd_buf_free(&body);
    }

    /* parallel_tool_calls false: one call at most */
    REQUIRE(parse("{" MSGS ",\"tools\":[" NOARGS "],\"tool_choice\":\"required\","
                  "\"parallel_tool_calls\":false}",
                  &r) == 0);
    CHECK(!r.tools.parallel);
    CHECK(allows(r.json, "[{\"name\": \"ping\", \"arguments\": {}}]"));
    CHECK(!allows(r.json, "[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", "
                          "\"arguments\": {}}]"));
    pgd_api_request_free(&r);
}

/* ---- the output parser --------------------------------------------------------------------- */

typedef struct {
    const char *out; /* the model's output */
    pgd_tool_choice choice;
    bool parallel;
    bool llama;              /* the Llama 3.x JSON format (else Hermes) */
    const char *content;     /* expected content */
    const char *calls[3][2]; /* expected (name, arguments), NULL-terminated */
} parse_case;

#define A PGD_TOOL_CHOICE_AUTO
static const parse_case k_cases[] = {
    {"Hello there.", A, true, false, "Hello there.", {{0}}},
    {"  lead and trail  \n", A, true, false, "  lead and trail  \n", {{0}}},
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     A,
     true,
     false,
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}}},
    {"Let me look.\n<tool_call>\n{\"name\":\"a\",\"arguments\":{\"x\":[1,2.5,\"\\u00e9\"]}}\n"
     "</tool_call>\n<tool_call>{\"name\": \"b\"}</tool_call>\n",
     A,
     true,
     false,
     "Let me look.",
     {{"a", "{\"x\":[1,2.5,\"\\u00e9\"]}"}, {"b", "{}"}}}, /* arguments as written */
    /* "parameters" for "arguments" */
    {"<tool_call>{\"name\": \"c\", \"parameters\": {\"k\": null}}</tool_call>",
     A,
     true,
     false,
     "",
     {{"c", "{\"k\": null}"}}},
    /* a block that is not a call stays content, tags included */
    {"x <tool_call>not json</tool_call> y",
     A,
     true,
     false,
     "x <tool_call>not json</tool_call> y",
     {{0}}},
    {"<tool_call>{\"arguments\": {}}</tool_call>",
     A,
     true,
     false,
     "<tool_call>{\"arguments\": {}}</tool_call>",
     {{0}}},
    {"<tool_call>{\"name\": \"d\", \"arguments\": [1]}</tool_call>",
     A,
     true,
     false,
     "<tool_call>{\"name\": \"d\", \"arguments\": [1]}</tool_call>",
     {{0}}},
    /* text after calls is content; whitespace next to calls is not */
    {"<tool_call>{\"name\": \"e\"}</tool_call>\n\nDone.",
     A,
     true,
     false,
     "\n\nDone.",
     {{"e", "{}"}}},
    /* an unterminated block: a call when it parses, else content */
    {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", A, true, false, "", {{"f", "{}"}}},
    {"Hi <tool_call>\n{\"name\": \"f\", \"argu",
     A,
     true,
     false,
     "Hi <tool_call>\n{\"name\": \"f\", \"argu",
     {{0}}},
    /* a call cut inside its arguments: the arguments written so far */
    {"Hm <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x",
     A,
     true,
     false,
     "Hm",
     {{"f", "{\"a\": \"x"}}},
    /* arguments that break off: the call ends there, the rest of its block is content */
    {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1 oops}}</tool_call> after",
     A,
     true,
     false,
     "oops}} after",
     {{"f", "{\"a\": 1 "}}},
    /* after whole arguments, the rest of the call's object is not content; other text is */
    {"<tool_call>{\"name\": \"f\", \"arguments\": {}, \"id\": 7}\n</tool_call>",
     A,
     true,
     false,
     "",
     {{"f", "{}"}}},
    {"<tool_call>{\"name\": \"f\", \"arguments\": {\"b\": [true]}} and</tool_call>",
     A,
     true,
     false,
     "} and",
     {{"f", "{\"b\": [true]}"}}},
    /* a closing tag inside the arguments' strings is theirs; inside the head's, it ends the block
     */
    {"<tool_call>{\"name\": \"w\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call>",
     A,
     true,
     false,
     "",
     {{"w", "{\"s\": \"</tool_call>\"}"}}},
    {"<tool_call>{\"name\": \"a</tool_call>\", \"arguments\": {}}</tool_call>",
     A,
     true,
     false,
     "<tool_call>{\"name\": \"a</tool_call>\", \"arguments\": {}}</tool_call>",
     {{0}}},
    /* a head of other key order is read whole */
    {"<tool_call>{\"arguments\": {\"q\":1}, \"name\": \"k\"}</tool_call>",
     A,
     true,
     false,
     "",
     {{"k", "{\"q\": 1}"}}},
    /* a prefix of the tag at the end is content */
    {"a <tool_c", A, true, false, "a <tool_c", {{0}}},
    {"<tool_callx>", A, true, false, "<tool_callx>", {{0}}},
    /* parallel_tool_calls false: the first call only */
    {"<tool_call>{\"name\": \"g\"}</tool_call><tool_call>{\"name\": \"h\"}</tool_call>",
     A,
     false,
     false,
     "",
     {{"g", "{}"}}},
    {"<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": "
     "\"h\", \"arguments\": {\"x\": 1}}</tool_call>",
     A,
     false,
     false,
     "",
     {{"g", "{}"}}},
    /* required: an array of calls */
    {"[{\"name\": \"g\", \"arguments\": {\"a\": 1}}, {\"name\": \"h\", \"arguments\": {}}]",
     PGD_TOOL_CHOICE_REQUIRED,
     true,
     false,
     "",
     {{"g", "{\"a\": 1}"}, {"h", "{}"}}},
    /* required, cut inside the second call's arguments */
    {"[{\"name\": \"g\", \"arguments\": {\"a\": 1}}, {\"name\": \"h\", \"arguments\": {\"b\": \"x",
     PGD_TOOL_CHOICE_REQUIRED,
     true,
     false,
     "",
     {{"g", "{\"a\": 1}"}, {"h", "{\"b\": \"x"}}},
    {"[{\"name\": \"g\", \"argum",
     PGD_TOOL_CHOICE_REQUIRED,
     true,
     false,
     "[{\"name\": \"g\", \"argum",
     {{0}}},
    /* named: the arguments */
    {"{\"city\":\"Rome\"}",
     PGD_TOOL_CHOICE_NAMED,
     true,
     false,
     "",
     {{"get_weather", "{\"city\":\"Rome\"}"}}},
    /* named, cut short: the call with the arguments written so far */
    {"{\"city\":\"Ro", PGD_TOOL_CHOICE_NAMED, true, false, "", {{"get_weather", "{\"city\":\"Ro"}}},
    {" \n", PGD_TOOL_CHOICE_NAMED, true, false, " \n", {{0}}},
    /* none: everything is content */
    {"<tool_call>{\"name\": \"e\"}</tool_call>",
     PGD_TOOL_CHOICE_NONE,
     true,
     false,
     "<tool_call>{\"name\": \"e\"}</tool_call>",
     {{0}}},
    /* Llama 3.x: the answer is calls when it begins with '{' or '[' (after a python tag) */
    {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     A,
     true,
     true,
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}}},
    {" \n<|python_tag|>{\"name\": \"a\", \"arguments\": {}}; {\"name\": \"b\", \"parameters\": "
     "{\"x\": 1.0}}",
     A,
     true,
     true,
     "",
     {{"a", "{}"}, {"b", "{\"x\": 1.0}"}}},
    {"[{\"name\": \"a\"}, {\"name\": \"b\"}]", A, false, true, "", {{"a", "{}"}}},
    {"Hello {\"name\": \"a\"}", A, true, true, "Hello {\"name\": \"a\"}", {{0}}},
    {"  <b>hi</b>", A, true, true, "  <b>hi</b>", {{0}}},
    {"{\"city\": \"Paris\"}", A, true, true, "{\"city\": \"Paris\"}", {{0}}},
    {"{\"name\": \"a\"} trailing", A, true, true, "{\"name\": \"a\"} trailing", {{0}}},
    {"{\"name\": \"a\", \"param", A, true, true, "{\"name\": \"a\", \"param", {{0}}},
    {"<|python", A, true, true, "<|python", {{0}}},
    /* ... calls from the first one's head on, their arguments as written */
    {"<|python_tag|>{\"name\":\"a\",\"parameters\":{\"q\":\"x y\"}}",
     A,
     true,
     true,
     "",
     {{"a", "{\"q\":\"x y\"}"}}},
    {"{\"name\": \"f\", \"parameters\": {\"a\": [1,", A, true, true, "", {{"f", "{\"a\": [1,"}}},
    {"{\"name\": \"f\", \"parameters\": {}} then text", A, true, true, "then text", {{"f", "{}"}}},
    {"[{\"name\": \"a\", \"parameters\": {\"x\": 1}}, {\"name\": \"b\", \"parameters\": {}}]",
     A,
     true,
     true,
     "",
     {{"a", "{\"x\": 1}"}, {"b", "{}"}}},
    /* a later object that is no head is read whole */
    {"{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\"} ",
     A,
     true,
     true,
     "",
     {{"a", "{}"}, {"b", "{}"}}},
    {"{\"name\": \"a\", \"parameters\": {}}; {\"nam", A, true, true, "{\"nam", {{"a", "{}"}}},
    {"  \n", A, true, true, "  \n", {{0}}},
};
#undef A

/* Feeds `out` cut at the offsets in cuts[0..n_cuts) (ascending) and checks the result. */
static void run_case(const parse_case *c, const size_t *cuts, size_t n_cuts) {
    pgd_str names[1] = {{"get_weather", 11}};
    pgd_api_tools t = {.n = 1,
                       .names = names,
                       .choice = c->choice,
                       .parallel = c->parallel,
                       .format = c->llama ? PGD_CHAT_TOOLS_LLAMA_JSON : PGD_CHAT_TOOLS_HERMES};
    pgd_tool_parser *p = NULL;
    REQUIRE(pgd_tool_parser_new(&t, &p) == 0);
    pgd_buf content = PGD_BUF_INIT;
    size_t len = strlen(c->out), at = 0;
    for (size_t k = 0; k <= n_cuts; k++) {
        size_t to = k < n_cuts ? cuts[k] : len;
        REQUIRE(pgd_tool_parser_feed(p, c->out + at, to - at, &content) == 0);
        at = to;
    }
    REQUIRE(pgd_tool_parser_end(p, &content) == 0);
    size_t want_content = strlen(c->content);
    if (!(content.len == want_content &&
          !memcmp(content.data ? content.data : "", c->content, want_content))) {
        fprintf(stderr, "  case '%s' (%zu cuts): content '%.*s', want '%s'\n", c->out, n_cuts,
                (int)content.len, content.data ? content.data : "", c->content);
        CHECK(false);
    }
    size_t n = 0, want_n = 0;
    while (want_n < 3 && c->calls[want_n][0]) want_n++;
    const pgd_api_tool_call *calls = pgd_tool_parser_calls(p, &n);
    CHECK_EQ_INT(n, want_n);
    for (size_t i = 0; i < n && i < want_n; i++) {
        CHECK(calls[i].name.len == strlen(c->calls[i][0]) &&
              !memcmp(calls[i].name.ptr, c->calls[i][0], calls[i].name.len));
        if (!(calls[i].arguments.len == strlen(c->calls[i][1]) &&
              !memcmp(calls[i].arguments.ptr, c->calls[i][1], calls[i].arguments.len))) {
            fprintf(stderr, "  case '%s': arguments '%.*s', want '%s'\n", c->out,
                    (int)calls[i].arguments.len, calls[i].arguments.ptr, c->calls[i][1]);
            CHECK(false);
        }
        /* cut: exactly when the arguments are not whole JSON (as jansson reads them) */
        json_t *args = json_loads(c->calls[i][1], 0, NULL);
        CHECK(!calls[i].open && calls[i].cut == (args == NULL));
        json_decref(args);
        CHECK(strlen(calls[i].id) == 29 && !strncmp(calls[i].id, "call_", 5));
        for (size_t j = 0; j < i; j++) CHECK(strcmp(calls[i].id, calls[j].id) != 0);
    }
    pgd_buf_free(&content);
    pgd_tool_parser_free(p);
}

static void test_parser(void) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_cases); i++) {
        const parse_case *c = &k_cases[i];
        size_t len = strlen(c->out);
        run_case(c, NULL, 0); /* whole */
        size_t *cuts = malloc((len + 1) * sizeof *cuts);
        REQUIRE(cuts != NULL);
        for (size_t k = 0; k < len; k++) cuts[k] = k + 1;
        run_case(c, cuts, len ? len - 1 : 0);                /* byte by byte */
        for (size_t k = 1; k < len; k++) run_case(c, &k, 1); /* two pieces, every offset */
        for (size_t a = 1; a + 1 < len && a < 40; a++) {     /* three pieces */
            size_t two[2] = {a, a + 1 + (len - a) / 2};
            if (two[1] < len) run_case(c, two, 2);
        }
        free(cuts);
    }
}

/* Content comes out as soon as it is known: a stream does not wait for the end. */
static void test_parser_streams(void) {
    pgd_str names[1] = {{"x", 1}};
    pgd_api_tools t = {.n = 1,
                       .names = names,
                       .choice = PGD_TOOL_CHOICE_AUTO,
                       .parallel = true,
                       .format = PGD_CHAT_TOOLS_HERMES};
    pgd_tool_parser *p = NULL;
    REQUIRE(pgd_tool_parser_new(&t, &p) == 0);
    pgd_buf out = PGD_BUF_INIT;
    REQUIRE(pgd_tool_parser_feed(p, "Sure, ", 6, &out) == 0);
    CHECK(out.len == 5 && !memcmp(out.data, "Sure,", 5)); /* the space waits */
    REQUIRE(pgd_tool_parser_feed(p, "one <tool", 9, &out) == 0);
    CHECK(out.len == 9 && !memcmp(out.data, "Sure, one", 9));
    size_t n;
    REQUIRE(pgd_tool_parser_feed(p, "_call>{\"name\": \"x\"}</tool_call>", 31, &out) == 0);
    pgd_tool_parser_calls(p, &n);
    CHECK_EQ_INT(n, 1); /* the call is known before the end */
    CHECK(out.len == 9);
    REQUIRE(pgd_tool_parser_end(p, &out) == 0);
    CHECK(out.len == 9);
    pgd_buf_free(&out);
    pgd_tool_parser_free(p);

    /* content and a call found in one feed: the call says where in the content it came */
    REQUIRE(pgd_tool_parser_new(&t, &p) == 0);
    const char *both = "Sure. <tool_call>{\"name\": \"x\", \"arguments\": {\"a\": 1}}</tool_call>"
                       " Done <tool_call>{\"name\": \"x\"}</tool_call>";
    REQUIRE(pgd_tool_parser_feed(p, both, strlen(both), &out) == 0);
    const pgd_api_tool_call *c = pgd_tool_parser_calls(p, &n);
    REQUIRE(n == 2);
    CHECK_EQ_INT(c[0].content_at, 5);  /* after "Sure." */
    CHECK_EQ_INT(c[1].content_at, 10); /* after "Sure. Done" */
    CHECK(out.len == 10 && !memcmp(out.data, "Sure. Done", 10));
    pgd_buf_free(&out);
    pgd_tool_parser_free(p);
}

/* A call opens at its head and its arguments grow byte by byte as they come, raw. */
static void test_parser_call_grows(void) {
    pgd_str names[1] = {{"x", 1}};
    for (int named = 0; named < 2; named++) {
        pgd_api_tools t = {.n = 1,
                           .names = names,
                           .choice = named ? PGD_TOOL_CHOICE_NAMED : PGD_TOOL_CHOICE_AUTO,
                           .parallel = true,
                           .format = PGD_CHAT_TOOLS_HERMES};
        pgd_tool_parser *p = NULL;
        REQUIRE(pgd_tool_parser_new(&t, &p) == 0);
        pgd_buf out = PGD_BUF_INIT;
        size_t n;
        const pgd_api_tool_call *c;
        if (!named) {
            const char *head = "<tool_call>\n{\"name\": \"x\", \"argum";
            REQUIRE(pgd_tool_parser_feed(p, head, strlen(head), &out) == 0);
            pgd_tool_parser_calls(p, &n);
            CHECK_EQ_INT(n, 0); /* not yet a head */
            REQUIRE(pgd_tool_parser_feed(p, "ents\": ", 7, &out) == 0);
            pgd_tool_parser_calls(p, &n);
            CHECK_EQ_INT(n, 0); /* the arguments' '{' makes it one */
        }
        REQUIRE(pgd_tool_parser_feed(p, "{\"s\": \"a", 8, &out) == 0);
        c = pgd_tool_parser_calls(p, &n);
        REQUIRE(n == 1);
        CHECK(c[0].open && c[0].cut && c[0].name.len == 1 && c[0].name.ptr[0] == 'x');
        CHECK(c[0].arguments.len == 8 && !memcmp(c[0].arguments.ptr, "{\"s\": \"a", 8));
        char id[PGD_API_TOOL_ID_CAP];
        memcpy(id, c[0].id, sizeof id);
        REQUIRE(pgd_tool_parser_feed(p, "b\", \"n\": [1", 11, &out) == 0);
        c = pgd_tool_parser_calls(p, &n);
        REQUIRE(n == 1);
        CHECK(c[0].open && !strcmp(c[0].id, id)); /* the same call */
        CHECK(c[0].arguments.len == 19 &&
              !memcmp(c[0].arguments.ptr, "{\"s\": \"ab\", \"n\": [1", 19));
        REQUIRE(pgd_tool_parser_feed(p, "]}}\n</tool_call>", named ? 2 : 16, &out) == 0);
        c = pgd_tool_parser_calls(p, &n);
        REQUIRE(n == 1);
        CHECK(!c[0].open && !c[0].cut); /* whole before the output's end */
        CHECK(c[0].arguments.len == 21 &&
              !memcmp(c[0].arguments.ptr, "{\"s\": \"ab\", \"n\": [1]}", 21));
        REQUIRE(pgd_tool_parser_end(p, &out) == 0);
        CHECK_EQ_INT(out.len, 0);
        pgd_buf_free(&out);
        pgd_tool_parser_free(p);
    }
}

/* ---- responses ----------------------------------------------------------------------------- */

static void test_responses(void) {
    pgd_api_tool_call calls[2] = {
        {"call_0123456789abcdef01234567",
         {"get_weather", 11},
         {"{\"city\": \"Paris\"}", 17},
         false,
         false,
         0},
        {"call_1", {"ping", 4}, {"{}", 2}, false, false, 0},
    };
    pgd_api_meta m = {"chatcmpl-t", 1, {"m", 1}, NULL};
    pgd_api_usage u = {3, 4, 0, 0};
    pgd_api_choice c = {
        .index = 0, .text = {"", 0}, .finish = PGD_FINISH_TOOL_CALLS, .calls = calls, .n_calls = 2};
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_api_chat_completion(&m, &c, 1, &u, &b) == 0);
    json_t *root = json_loadb(b.data, b.len, 0, NULL);
    REQUIRE(root != NULL);
    json_t *ch = json_array_get(json_object_get(root, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    CHECK(json_is_null(json_object_get(msg, "content")));
    CHECK_EQ_STR(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    json_t *tc = json_object_get(msg, "tool_calls");
    REQUIRE(json_array_size(tc) == 2);
    json_t *c0 = json_array_get(tc, 0), *f0 = json_object_get(c0, "function");
    CHECK_EQ_INT(json_object_size(c0), 3); /* no index in a whole answer */
    CHECK_EQ_STR(json_string_value(json_object_get(c0, "id")), "call_0123456789abcdef01234567");
    CHECK_EQ_STR(json_string_value(json_object_get(c0, "type")), "function");
    CHECK_EQ_STR(json_string_value(json_object_get(f0, "name")), "get_weather");
    CHECK_EQ_STR(json_string_value(json_object_get(f0, "arguments")), "{\"city\": \"Paris\"}");
    json_decref(root);

    /* with content, content stays; without calls there is no tool_calls key */
    c.text = (pgd_str){"Hm.", 3};
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_completion(&m, &c, 1, &u, &b) == 0);
    root = json_loadb(b.data, b.len, 0, NULL);
    msg = json_object_get(json_array_get(json_object_get(root, "choices"), 0), "message");
    CHECK_EQ_STR(json_string_value(json_object_get(msg, "content")), "Hm.");
    json_decref(root);
    c.n_calls = 0;
    c.finish = PGD_FINISH_STOP;
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_completion(&m, &c, 1, &u, &b) == 0);
    root = json_loadb(b.data, b.len, 0, NULL);
    msg = json_object_get(json_array_get(json_object_get(root, "choices"), 0), "message");
    CHECK(json_object_get(msg, "tool_calls") == NULL);
    json_decref(root);

    /* a stream chunk: indexes continue from `first` */
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_chunk_tool_calls(&m, 2, calls + 1, 1, 1, true, &b) == 0);
    root = json_loadb(b.data, b.len, 0, NULL);
    REQUIRE(root != NULL);
    CHECK(json_is_null(json_object_get(root, "usage")));
    ch = json_array_get(json_object_get(root, "choices"), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(ch, "index")), 2);
    CHECK(json_is_null(json_object_get(ch, "finish_reason")));
    tc = json_object_get(json_object_get(ch, "delta"), "tool_calls");
    REQUIRE(json_array_size(tc) == 1);
    c0 = json_array_get(tc, 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(c0, "index")), 1);
    CHECK_EQ_STR(json_string_value(json_object_get(c0, "id")), "call_1");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(c0, "function"), "name")),
                 "ping");
    json_decref(root);

    /* a continuation (empty id) then a new call: {index, function: {arguments}} for the first */
    pgd_api_tool_call more[2] = {calls[0], calls[1]};
    more[0].id[0] = '\0';
    more[0].arguments = (pgd_str){"is\"}", 4};
    pgd_buf_reset(&b);
    REQUIRE(pgd_api_chat_chunk_tool_calls(&m, 0, more, 2, 3, false, &b) == 0);
    root = json_loadb(b.data, b.len, 0, NULL);
    REQUIRE(root != NULL);
    tc = json_object_get(
        json_object_get(json_array_get(json_object_get(root, "choices"), 0), "delta"),
        "tool_calls");
    REQUIRE(json_array_size(tc) == 2);
    c0 = json_array_get(tc, 0);
    CHECK_EQ_INT(json_object_size(c0), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(c0, "index")), 3);
    f0 = json_object_get(c0, "function");
    CHECK_EQ_INT(json_object_size(f0), 1);
    CHECK_EQ_STR(json_string_value(json_object_get(f0, "arguments")), "is\"}");
    json_t *c1 = json_array_get(tc, 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(c1, "index")), 4);
    CHECK_EQ_STR(json_string_value(json_object_get(c1, "id")), "call_1");
    json_decref(root);
    pgd_buf_free(&b);
}

int main(void) {
    RUN(test_choices);
    RUN(test_parser);
    RUN(test_parser_streams);
    RUN(test_parser_call_grows);
    RUN(test_responses);
    return test_summary();
}
