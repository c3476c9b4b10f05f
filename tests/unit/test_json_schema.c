/*
 * tests/unit/test_json_schema.c — JSON Schemas compiled (api/json_schema.h) and followed byte by
 * byte (engine/sampling/json_fsm.h): documents a schema allows are accepted with every prefix
 * and whole at their end; documents it does not allow (or that this writes otherwise: keys out
 * of their declared order, undeclared keys) are refused at the first byte that rules them out;
 * every schema refused names the keyword and where it is. Random walks — each step a byte drawn
 * among those the recognizer takes — end in documents jansson parses, whatever the schema
 * (the walks' documents are checked against the schemas by an independent validator in
 * tests/reference/test_json_schema.py).
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_schema.h"
#include "api/jsonutil.h"
#include "common/error.h"
#include "common/text.h"
#include "engine/sampling/json_fsm.h"
#include "engine/sampling/sampler.h"
#include "support/json_walk.h"
#include "testutil.h"

static const pgd_json_schema *compile(const char *text, char *msg, size_t cap) {
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    if (!j) {
        fprintf(stderr, "    bad test schema %s: %s\n", text, je.text);
        return NULL;
    }
    const pgd_json_schema *s = NULL;
    int rc = pgd_api_json_schema_compile(j, &s, msg, cap);
    json_decref(j);
    return rc ? NULL : s;
}

enum { REFUSED = -1, PREFIX = 0, WHOLE = 1 };

/* -1 refused at some byte, 0 a prefix, 1 whole; every prefix accepted on the way. */
static int verdict(const pgd_json_schema *s, const char *doc) {
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, s);
    size_t n = strlen(doc);
    for (size_t i = 0; i < n; i++) {
        if (!pgd_json_fsm_try(&f, (const uint8_t *)doc + i, 1)) return REFUSED;
        if (!pgd_json_fsm_feed(&f, (const uint8_t *)doc + i, 1)) return REFUSED;
    }
    return pgd_json_fsm_done(&f) ? WHOLE : PREFIX;
}

typedef struct doc_case {
    const char *doc;
    int want;
} doc_case;

typedef struct schema_case {
    const char *schema;
    doc_case docs[16];
} schema_case;

static const schema_case k_cases[] = {
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
     {{"{\"name\":\"Ann\",\"age\":31}", WHOLE},
      {"{ \"name\" : \"\\u00e9\" ,\n \"age\" : -0 }", WHOLE},
      {"{\"name\":\"Ann\",\"age\":3.5}", REFUSED}, /* an integer */
      {"{\"name\":\"Ann\",\"age\":3e2}", REFUSED}, /* no exponent either */
      {"{\"age\":31,\"name\":\"Ann\"}", REFUSED},  /* declared order */
      {"{\"name\":\"Ann\"}", REFUSED},             /* age is required */
      {"{\"name\":\"Ann\",\"nick\":1}", REFUSED},  /* not declared */
      {"{\"name\":1}", REFUSED},                   /* a string */
      {"{\"nam\":", REFUSED},                      /* no such key */
      {"{\"name\":\"Ann\",\"age\":31", PREFIX},
      {"[]", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":"
     "\"null\"},\"c\":{\"type\":\"number\"}},\"required\":[\"b\"]}",
     {{"{\"b\":null}", WHOLE},
      {"{\"a\":true,\"b\":null,\"c\":1.5e-3}", WHOLE},
      {"{\"b\":null,\"c\":2}", WHOLE},
      {"{\"a\":false,\"c\":2}", REFUSED}, /* b before c */
      {"{\"c\":2}", REFUSED},
      {"{\"a\":true,\"a\":true,\"b\":null}", REFUSED}, /* a key once */
      {"{}", REFUSED},
      {"{\"a\":nul", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"re\",1,10,"
     "null]},\"k\":{\"const\":\"x\"}},\"required\":[\"color\",\"k\"]}",
     {{"{\"color\":\"red\",\"k\":\"x\"}", WHOLE},
      {"{\"color\":\"re\",\"k\":\"x\"}", WHOLE},
      {"{\"color\":10,\"k\":\"x\"}", WHOLE},
      {"{\"color\":1 ,\"k\":\"x\"}", WHOLE},
      {"{\"color\":null,\"k\":\"x\"}", WHOLE},
      {"{\"color\":\"r\"", REFUSED},
      {"{\"color\":\"blue\"", REFUSED},
      {"{\"color\":100", REFUSED},
      {"{\"color\":\"red\",\"k\":\"y\"", REFUSED},
      {"{\"color\":true", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"string\",\"minLength\":1,\"maxLength\":3},\"minItems\":1,\"maxItems\":2}},\"required\":["
     "\"tags\"]}",
     {{"{\"tags\":[\"a\"]}", WHOLE},
      {"{\"tags\":[\"abc\",\"\\u00e9\\ud83d\\ude00\xc3\xa9\"]}", WHOLE}, /* code points */
      {"{\"tags\":[]}", REFUSED},
      {"{\"tags\":[\"\"]}", REFUSED},
      {"{\"tags\":[\"abcd\"]}", REFUSED},
      {"{\"tags\":[\"a\",\"b\",\"c\"]}", REFUSED},
      {"{\"tags\":[\"a\",\"b\"", PREFIX},
      {NULL, 0}}},
    /* Optional[...] as pydantic writes it, $defs, recursion */
    {"{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/Node\"},{\"type\":\"null\"}],\"default\":null}},"
     "\"required\":[\"v\"],\"title\":\"Node\"}},\"$ref\":\"#/$defs/Node\"}",
     {{"{\"v\":1}", WHOLE},
      {"{\"v\":1,\"next\":null}", WHOLE},
      {"{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}", WHOLE},
      {"{\"v\":1,\"next\":{}}", REFUSED},
      {"{\"v\":1,\"next\":\"x\"", REFUSED},
      {NULL, 0}}},
    /* type lists; a map (additionalProperties as a schema); a free value; any root */
    {"{\"type\":\"object\",\"properties\":{\"m\":{\"type\":\"object\",\"additionalProperties\":{"
     "\"type\":[\"integer\",\"null\"]}},\"any\":{},\"s\":{\"type\":[\"string\",\"array\"],"
     "\"items\":{\"type\":\"boolean\"}}}}",
     {{"{\"m\":{\"x\":1,\"y\":null},\"any\":[{\"q\":[1,\"2\",null]}],\"s\":[true]}", WHOLE},
      {"{\"m\":{},\"s\":\"text\"}", WHOLE},
      {"{\"m\":{\"x\":1.5}", REFUSED},
      {"{\"s\":[1]", REFUSED},
      {"{\"any\":-", PREFIX},
      {NULL, 0}}},
    /* integer bounds: a digit only while some integer within them begins so */
    {"{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":18,"
     "\"maximum\":120},\"t\":{\"type\":\"integer\",\"exclusiveMinimum\":-5.5,"
     "\"exclusiveMaximum\":0}},\"required\":[\"age\"]}",
     {{"{\"age\":18}", WHOLE},
      {"{\"age\":120,\"t\":-5}", WHOLE},
      {"{\"age\":1", PREFIX},   /* 1x, 1xx */
      {"{\"age\":1}", REFUSED}, /* 1 itself is not */
      {"{\"age\":12", PREFIX},  /* 12x */
      {"{\"age\":121", REFUSED},
      {"{\"age\":0", REFUSED},
      {"{\"age\":-", REFUSED},
      {"{\"age\":9", PREFIX},
      {"{\"age\":99,\"t\":-0", REFUSED}, /* t < 0 */
      {"{\"age\":99,\"t\":-6", REFUSED},
      {"{\"age\":99,\"t\":-1}", WHOLE}}},
    /* bounded decimals: no exponent, at most 15 digits, a digit only while some number within
     * the bounds begins so */
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}",
     {{"0", WHOLE},
      {"1", WHOLE},
      {"0.5", WHOLE},
      {"1.0000", WHOLE},
      {"-0", WHOLE},
      {"1.00001", REFUSED},
      {"1.", PREFIX},
      {"-0.1", REFUSED},
      {"-", PREFIX},
      {"2", REFUSED},
      {"0.123456789012345", WHOLE},
      {"0.1234567890123456", REFUSED}}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-0.5,\"exclusiveMaximum\":2.5}",
     {{"-0.5", REFUSED},
      {"-0.4", WHOLE},
      {"-0.49999", WHOLE},
      {"2.4999", WHOLE},
      {"2.5", REFUSED},
      {"2", WHOLE},
      {"1e0", REFUSED},
      {"3", REFUSED},
      {NULL, 0}}},
    {"{\"type\":[\"integer\",\"number\"],\"minimum\":0.1,\"maximum\":0.3}",
     {{"0.3", WHOLE},
      {"0.1", WHOLE},
      {"0.2999999", WHOLE},
      {"0.30000000000001", REFUSED},
      {"0.0", REFUSED},
      {"0", PREFIX},
      {"0.", PREFIX},
      {"1", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"number\",\"maximum\":-123456.75}",
     {{"-123456.75", WHOLE},
      {"-123456.7", PREFIX},
      {"-123456.74", REFUSED},
      {"-1234567", WHOLE},
      {"-99999999999999", WHOLE},
      {"-1000000000000000", REFUSED},
      {"5", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"integer\",\"minimum\":-30,\"maximum\":0}",
     {{"-30", WHOLE},
      {"-0", WHOLE},
      {"0", WHOLE},
      {"-31", REFUSED},
      {"-3", WHOLE},
      {"-", PREFIX},
      {"1", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"integer\",\"minimum\":-9223372036854775807}",
     {{"9223372036854775807999", WHOLE},
      {"-9223372036854775807", WHOLE},
      {"-9223372036854775808", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"integer\"}",
     {{"12", WHOLE},
      {"-7 ", WHOLE},
      {"1.", REFUSED},
      {"-", PREFIX},
      {"\"1\"", REFUSED},
      {NULL, 0}}},
    {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"array\",\"items\":{\"enum\":"
     "[true]}}]}",
     {{"\"ab\"", WHOLE},
      {"\"abc\"", REFUSED},
      {"[true,true]", WHOLE},
      {"[false]", REFUSED},
      {"{}", REFUSED},
      {NULL, 0}}},
    /* unions of objects: keys keep the branches that have them, a discriminator the ones whose
     * enum holds it; shared keys with alike values; closing when a live branch may */
    {"{\"$defs\":{\"S\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"search\"},"
     "\"q\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"q\"]},"
     "\"A\":{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"answer\",\"final\"]},"
     "\"text\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"kind\"]}},"
     "\"type\":\"array\",\"items\":{\"anyOf\":[{\"$ref\":\"#/$defs/S\"},{\"$ref\":\"#/$defs/A\"},"
     "{\"type\":\"null\"}]}}",
     {{"[{\"kind\":\"search\",\"q\":\"x\",\"n\":1}]", WHOLE},
      {"[{\"kind\":\"answer\"},{\"kind\":\"final\",\"text\":\"t\"},null]", WHOLE},
      {"[{\"kind\":\"search\"}]", REFUSED},        /* q is required by S */
      {"[{\"kind\":\"search\",\"text\"", REFUSED}, /* text is A's */
      {"[{\"kind\":\"answer\",\"q\"", REFUSED},    /* q is S's */
      {"[{\"kind\":\"answer\",\"n\":2}]", WHOLE},
      {"[{\"kind\":\"s", PREFIX},
      {"[{\"kind\":\"x", REFUSED},
      {"[{}]", REFUSED},
      {"[{\"q\"", REFUSED}, /* kind comes first in both */
      {NULL, 0}}},
    /* a key the branches hold with different values, after a required discriminator that
     * leaves one branch live (tool calls: "name" then that tool's "arguments") */
    {"{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":"
     "{\"const\":\"a\"},\"arguments\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
     "\"integer\"}},\"required\":[\"x\"]}},\"required\":[\"name\",\"arguments\"]},{\"type\":"
     "\"object\",\"properties\":{\"name\":{\"enum\":[\"b\",\"c\"]},\"arguments\":{\"type\":"
     "\"string\",\"maxLength\":2}},\"required\":[\"name\"]}]}}",
     {{"[{\"name\":\"a\",\"arguments\":{\"x\":1}}]", WHOLE},
      {"[{\"name\":\"b\",\"arguments\":\"st\"},{\"name\":\"c\"}]", WHOLE},
      {"[{\"name\":\"a\",\"arguments\":{\"x\":1}},{\"name\":\"c\",\"arguments\":\"\"}]", WHOLE},
      {"[{\"name\":\"a\",\"arguments\":\"", REFUSED},
      {"[{\"name\":\"b\",\"arguments\":{", REFUSED},
      {"[{\"name\":\"b\",\"arguments\":\"abc", REFUSED},
      {"[{\"name\":\"a\"}]", REFUSED},
      {"[{\"name\":\"a\",\"arguments\":{}}]", REFUSED},
      {"[{\"arguments\"", REFUSED},
      {NULL, 0}}},
    /* no discriminator: the keys decide; Optional fields */
    {"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
     "\"meow\":{\"type\":\"boolean\"}},\"required\":[\"meow\"]},{\"type\":\"object\","
     "\"properties\":{\"name\":{\"type\":\"string\"},\"bark\":{\"type\":\"integer\"}},"
     "\"required\":[\"bark\"]}]}",
     {{"{\"name\":\"a\",\"meow\":true}", WHOLE},
      {"{\"name\":\"a\",\"bark\":3}", WHOLE},
      {"{\"bark\":3}", WHOLE},
      {"{\"name\":\"a\"}", REFUSED},
      {"{\"meow\":true,\"bark\"", REFUSED},
      {NULL, 0}}},
    /* tuples: prefixItems (pydantic's tuple[int, str]), then items or none; the older form */
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\","
     "\"maxLength\":1}],\"minItems\":2,\"maxItems\":2}",
     {{"[1,\"a\"]", WHOLE},
      {"[1]", REFUSED},
      {"[1,\"a\",", REFUSED},
      {"[\"a\"", REFUSED},
      {"[1,2", REFUSED},
      {"[ 1 , \"\" ]", WHOLE},
      {NULL, 0}}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"}}",
     {{"[]", WHOLE},
      {"[\"x\"]", WHOLE},
      {"[\"x\",true,false]", WHOLE},
      {"[true", REFUSED},
      {"[\"x\",\"x\"", REFUSED},
      {NULL, 0}}},
    {"{\"type\":\"array\",\"items\":false}", {{"[]", WHOLE}, {"[1", REFUSED}, {NULL, 0}}},
    {"{\"type\":\"array\",\"items\":[{\"type\":\"null\"}],\"additionalItems\":false}",
     {{"[null]", WHOLE}, {"[]", WHOLE}, {"[null,", REFUSED}, {NULL, 0}}},
    /* Union[int, float]: any number */
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\"},{\"type\":\"integer\"}]}",
     {{"1.5e3", WHOLE}, {"-2", WHOLE}, {"\"", REFUSED}, {NULL, 0}}},
    {"{\"type\":\"object\",\"additionalProperties\":false}",
     {{"{}", WHOLE}, {"{ }", WHOLE}, {"{\"a\"", REFUSED}, {NULL, 0}}},
    {"true", {{"[{\"a\":[]},1,\"x\",null]", WHOLE}, {"3.25", WHOLE}, {NULL, 0}}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"enum\":[\"a\","
     "2]}},\"required\":[\"k\"]}],\"description\":\"d\"}",
     {{"{\"k\":\"a\"}", WHOLE}, {"{\"k\":2", REFUSED}, {NULL, 0}}},
    /* a key that needs escaping: written as compact JSON writes it */
    {"{\"type\":\"object\",\"properties\":{\"a\\\"b/\xc3\xa9\":{\"type\":\"null\"}},"
     "\"required\":[\"a\\\"b/\xc3\xa9\"]}",
     {{"{\"a\\\"b/\xc3\xa9\":null}", WHOLE}, {"{\"a\\u0022", REFUSED}, {NULL, 0}}},
};

static void test_documents(void) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_cases); i++) {
        char msg[512];
        const pgd_json_schema *s = compile(k_cases[i].schema, msg, sizeof msg);
        if (!s) fprintf(stderr, "    schema %zu refused: %s\n", i, msg);
        REQUIRE(s);
        for (const doc_case *d = k_cases[i].docs; d->doc; d++) {
            int v = verdict(s, d->doc);
            if (v != d->want)
                fprintf(stderr, "    schema %zu, document %s: %d, want %d\n", i, d->doc, v,
                        d->want);
            CHECK_EQ_INT(v, d->want);
        }
        pgd_json_schema_unref(s);
    }
}

/* The free object (JSON mode) is node 1 of a compiled {"type": "object"} too. */
static void test_free_object(void) {
    char msg[256];
    const pgd_json_schema *s = compile("{\"type\":\"object\"}", msg, sizeof msg);
    REQUIRE(s);
    static const char *const docs[] = {"{}", "{\"a\":[1,{\"b\":\"c\"}]}", "[]", "{\"a\":}", "1"};
    for (size_t i = 0; i < PGD_ARRAY_LEN(docs); i++)
        CHECK_EQ_INT(verdict(s, docs[i]), verdict(pgd_json_schema_object(), docs[i]));
    CHECK_EQ_INT(verdict(s, "{\"x\":[true,null]}"), WHOLE);
    pgd_json_schema_unref(pgd_json_schema_ref(s)); /* references counted */
    pgd_json_schema_unref(s);
    pgd_json_schema_unref(NULL);
    pgd_json_schema_unref(pgd_json_schema_ref(pgd_json_schema_object())); /* static */
}

typedef struct refused_case {
    const char *schema;
    const char *words[2]; /* what the message must hold */
} refused_case;

static const refused_case k_refused[] = {
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"minimum\":1e300}}}",
     {"no number of at most 15 digits", "/properties/p"}},
    {"{\"type\":\"number\",\"minimum\":2,\"exclusiveMaximum\":2}", {"no number is within", ""}},
    {"{\"type\":\"integer\",\"minimum\":3,\"exclusiveMaximum\":3}", {"no integer is within", ""}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":9223372036854775807}",
     {"no integer is within", ""}},
    {"{\"type\":\"integer\",\"maximum\":-1e19}", {"no integer is within", ""}},
    {"{\"type\":\"integer\",\"minimum\":\"1\"}", {"'minimum' must be a number", ""}},
    {"{\"type\":\"integer\",\"multipleOf\":2}", {"'multipleOf' is not supported", ""}},
    {"{\"type\":\"integer\",\"minimum\":1e19}", {"no integer is within", ""}},
    {"{\"enum\":[1,2],\"minimum\":5}", {"no value of 'enum'", ""}},
    {"{\"type\":\"string\",\"pattern\":\"^a\"}", {"'pattern'", "root"}},
    {"{\"type\":\"array\",\"uniqueItems\":true}", {"'uniqueItems'", "root"}},
    {"{\"not\":{}}", {"'not'", "root"}},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"enum\":[\"a\"]}]}",
     {"branches 0 and 1 both accept a string", "root"}},
    {"{\"oneOf\":[{\"type\":\"integer\",\"minimum\":0},{\"type\":\"number\"}]}",
     {"both accept a number", ""}},
    {"{\"anyOf\":[]}", {"non-empty array", ""}},
    {"{\"type\":\"object\",\"anyOf\":[{\"type\":\"object\"}]}", {"'type' next to 'anyOf'", ""}},
    {"{\"$ref\":\"http://x/y.json\"}", {"only a reference into the schema", ""}},
    {"{\"$ref\":\"#/$defs/Missing\"}", {"points to nothing", ""}},
    {"{\"$ref\":\"#/$defs/A\",\"type\":\"string\",\"$defs\":{\"A\":{}}}",
     {"'type' next to '$ref'", ""}},
    {"{\"$ref\":\"#\"}", {"$ref loop", ""}},
    {"{\"allOf\":[{},{}]}", {"'allOf' of other than one", ""}},
    {"{\"type\":\"object\",\"required\":[\"a\"]}", {"required key 'a' is not among", ""}},
    {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", {"'minLength' is above", ""}},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", {"'minItems' is above", ""}},
    {"{\"type\":\"array\",\"maxItems\":-1}", {"'maxItems' must be a non-negative integer", ""}},
    {"{\"type\":\"string\",\"enum\":[1,2]}", {"no value of 'enum'", ""}},
    {"{\"enum\":[[1]]}", {"an 'enum' value that is an object or an array", ""}},
    {"{\"type\":\"array\",\"items\":[{}],\"prefixItems\":[{}]}",
     {"'items' as an array next to 'prefixItems'", ""}},
    {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}",
     {"'minItems' is above the items allowed", ""}},
    {"{\"type\":\"array\",\"prefixItems\":{}}", {"'prefixItems' must be an array", ""}},
    {"{\"type\":\"dict\"}", {"'type' must be one of", ""}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}",
     {"no finite JSON value", "root"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":false}}", {"'false' admits no value", "/a"}},
    {"{\"anyOf\":[{\"$ref\":\"#\"}]}", {"refers back to its own union", "/anyOf/0"}},
    {"[1]", {"must be an object or a boolean", ""}},
    {"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}}},"
     "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\"}}}]}",
     {"differ at key \"k\"", ""}},
    /* the discriminator is not required, or comes after the key, or does not tell them apart */
    {"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"d\":{\"const\":1},\"k\":{\"type\":"
     "\"string\"}}},{\"type\":\"object\",\"properties\":{\"d\":{\"const\":2},\"k\":{\"type\":"
     "\"integer\"}},\"required\":[\"d\"]}]}",
     {"differ at key \"k\"", ""}},
    {"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"},\"d\":"
     "{\"const\":1}},\"required\":[\"d\"]},{\"type\":\"object\",\"properties\":{\"k\":{\"type\":"
     "\"integer\"},\"d\":{\"const\":2}},\"required\":[\"d\"]}]}",
     {"differ at key \"k\"", ""}},
    {"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"d\":{\"enum\":[1,2]},\"k\":{\"type\":"
     "\"string\"}},\"required\":[\"d\"]},{\"type\":\"object\",\"properties\":{\"d\":{\"const\":2},"
     "\"k\":{\"type\":\"integer\"}},\"required\":[\"d\"]}]}",
     {"differ at key \"k\"", ""}},
    {"{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{}}]}",
     {"must declare its properties", "/anyOf/0"}},
    {"{\"type\":\"object\",\"properties\":{\"a~b/c\":{\"type\":\"string\",\"pattern\":\"x\"}}}",
     {"'pattern'", "/properties/a~0b~1c"}},
};

static void test_refused(void) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_refused); i++) {
        char msg[512];
        const pgd_json_schema *s = compile(k_refused[i].schema, msg, sizeof msg);
        CHECK(!s);
        pgd_json_schema_unref(s);
        for (int w = 0; w < 2; w++)
            if (!strstr(msg, k_refused[i].words[w])) {
                fprintf(stderr, "    %s: message \"%s\" lacks \"%s\"\n", k_refused[i].schema, msg,
                        k_refused[i].words[w]);
                CHECK(false);
            }
    }
    /* too many subschemas */
    pgd_buf b = PGD_BUF_INIT;
    pgd_buf_puts(&b, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < PGD_API_SCHEMA_MAX_NODES + 1; i++) {
        char k[48];
        snprintf(k, sizeof k, "%s\"k%d\":{\"type\":\"string\"}", i ? "," : "", i);
        pgd_buf_puts(&b, k);
    }
    pgd_buf_puts(&b, "}}");
    pgd_buf_append(&b, "", 1);
    char msg[512];
    CHECK(!compile(b.data, msg, sizeof msg));
    CHECK(strstr(msg, "more than") != NULL);
    pgd_buf_free(&b);
}

static void test_walks(void) {
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int ended = 0, cut = 0;
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_cases); i++) {
        char msg[512];
        const pgd_json_schema *s = compile(k_cases[i].schema, msg, sizeof msg);
        REQUIRE(s);
        for (int w = 0; w < 40; w++) {
            char doc[4096];
            long n = pgd_test_json_walk(s, &rng, doc, sizeof doc);
            CHECK(n != -1); /* never a dead end */
            if (n < 0) {
                cut++;
                continue;
            }
            ended++;
            json_error_t je;
            json_t *j = json_loadb(doc, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            if (!j && !strstr(je.text, "too big") && !strstr(je.text, "overflow")) {
                fprintf(stderr, "    schema %zu: jansson refuses %s: %s\n", i, doc, je.text);
                CHECK(false);
            }
            json_decref(j);
        }
        pgd_json_schema_unref(s);
    }
    fprintf(stderr, "    %d walks ended, %d cut at 4 KiB\n", ended, cut);
    CHECK(ended > 900);
}

/* Near the depth limit a container opens only if what must follow it fits: an object whose
 * required key holds an array of arrays needs three levels. */
static void test_depth(void) {
    char msg[256];
    const pgd_json_schema *s = compile(
        "{\"$defs\":{\"X\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/X\"}},"
        "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"minItems\":1,"
        "\"items\":{\"type\":\"array\"}},\"o\":{\"type\":\"array\",\"minItems\":1,\"items\":{"
        "\"type\":\"array\",\"minItems\":1,\"items\":{\"type\":\"array\"}}}},\"required\":[\"k\"]}]"
        "}},"
        "\"$ref\":\"#/$defs/X\"}",
        msg, sizeof msg);
    REQUIRE(s);
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, s);
    for (int d = 0; d < PGD_JSON_MAX_DEPTH; d++) {
        bool obj = pgd_json_fsm_try(&f, (const uint8_t *)"{", 1);
        CHECK(obj == (d + 3 <= PGD_JSON_MAX_DEPTH)); /* {"k":[[]]} */
        bool open = pgd_json_fsm_try(&f, (const uint8_t *)"[", 1);
        CHECK(open);
        if (d == PGD_JSON_MAX_DEPTH - 3) { /* the optional key "o" needs one level more */
            pgd_json_fsm g = f;
            CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)"{", 1));
            CHECK(!pgd_json_fsm_try(&g, (const uint8_t *)"\"o", 2));
            CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)"\"k\":[[]]}", 9));
        }
        if (d == PGD_JSON_MAX_DEPTH - 4) {
            pgd_json_fsm g = f;
            CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)"{\"k\":[[]],\"o\":[[[]]]}", 21));
        }
        REQUIRE(pgd_json_fsm_feed(&f, (const uint8_t *)"[", 1));
    }
    CHECK(!pgd_json_fsm_try(&f, (const uint8_t *)"[", 1));
    CHECK(pgd_json_fsm_try(&f, (const uint8_t *)"]", 1));
    pgd_json_schema_unref(s);
}

/* An enum of thousands of values: each one whole, what is no value refused. */
static void test_large_enum(void) {
    pgd_buf b = PGD_BUF_INIT;
    pgd_buf_puts(&b, "{\"enum\":[");
    for (int i = 0; i < 3000; i++) {
        char v[32];
        snprintf(v, sizeof v, i % 2 ? "%s\"v%d\"" : "%s%d", i ? "," : "", i);
        pgd_buf_puts(&b, v);
    }
    pgd_buf_puts(&b, "]}");
    pgd_buf_append(&b, "", 1);
    char msg[256];
    const pgd_json_schema *s = compile(b.data, msg, sizeof msg);
    REQUIRE(s);
    int bad = 0;
    for (int i = 0; i < 3000; i++) {
        char v[32], w[32];
        snprintf(v, sizeof v, i % 2 ? "\"v%d\"" : "%d", i);
        snprintf(w, sizeof w, i % 2 ? "%d " : "\"v%d\"", i); /* the other form, ended */
        bad += verdict(s, v) != WHOLE || verdict(s, w) != REFUSED;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(verdict(s, "\"v1"), PREFIX);
    CHECK_EQ_INT(verdict(s, "3000"), REFUSED);
    CHECK_EQ_INT(verdict(s, "29"), PREFIX); /* 29 is odd: a string; 290.. go on */
    CHECK_EQ_INT(verdict(s, "\"v"), PREFIX);
    CHECK_EQ_INT(verdict(s, "\"v0"), REFUSED);
    pgd_json_schema_unref(s);
    pgd_buf_free(&b);
}

/* ---- the sampler under a schema --------------------------------------------------------- */

static const char *const k_pieces[] = {
    "ab",        "abcd",   "\xc3\xa9", "\xc3",    "\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
    "\"name\":", "\": \"", "red",      "\"red\"", "true", "  ",
    "}\n",       "\",\"",  "\\n",
};
enum { N_ASCII = 128, N_PIECES = PGD_ARRAY_LEN(k_pieces), EOG = N_ASCII + N_PIECES, V };

static const char *piece(const void *ctx, int32_t t, size_t *len) {
    (void)ctx;
    static char ascii[N_ASCII];
    if (t < N_ASCII) {
        ascii[t] = (char)t;
        *len = 1;
        return &ascii[t];
    }
    if (t == EOG) {
        *len = 0;
        return "";
    }
    *len = strlen(k_pieces[t - N_ASCII]);
    return k_pieces[t - N_ASCII];
}

/* Sampling under a schema with string lengths, over a made vocabulary (ASCII bytes and longer
 * pieces: whole and split UTF-8, keys, an enum value, escapes): with each token's plain-text
 * code points (the sampler's fast path in a string) and without, the same masks at every
 * step; every walk that ends is a document jansson parses and whose values keep the schema's
 * bounds (checked on jansson's tree). */
static void test_sampler_schema(void) {
    const char *text =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,"
        "\"maxLength\":4},\"maxItems\":3},\"color\":{\"enum\":[\"red\",\"green\"]},\"n\":{"
        "\"type\":\"integer\"}},\"required\":[\"name\",\"color\"]}";
    char msg[256];
    const pgd_json_schema *sc = compile(text, msg, sizeof msg);
    REQUIRE(sc);
    uint32_t plain[V];
    for (int t = 0; t < V; t++) {
        size_t n;
        const char *p = piece(NULL, t, &n);
        plain[t] = pgd_json_plain_chars((const uint8_t *)p, n);
    }
    CHECK_EQ_INT((int)plain[N_ASCII + 5], 2); /* two CJK characters */
    int32_t eog = EOG;
    pgd_vocab_bytes fast = {piece, NULL, V, &eog, 1, plain}, slow = {piece, NULL, V, &eog, 1, NULL};
    pgd_sampling_params p;
    pgd_sampling_params_default(&p);
    uint64_t rng = 12345;
    int ended = 0, diff = 0;
    for (int w = 0; w < 60; w++) {
        p.seed = (uint64_t)w;
        pgd_sampler *a, *b;
        REQUIRE(pgd_sampler_create(&p, V, NULL, &a) == 0);
        REQUIRE(pgd_sampler_create(&p, V, NULL, &b) == 0);
        pgd_sampler_constrain_json(a, &fast, sc);
        pgd_sampler_constrain_json(b, &slow, sc);
        pgd_buf out = PGD_BUF_INIT;
        float logits[V], ma[V], mb[V];
        bool done = false;
        for (int step = 0; step < 400 && !done; step++) {
            for (int t = 0; t < V; t++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                logits[t] = (float)(rng % 1000) / 250.0f;
            }
            float push = (float)step / 20.0f;
            logits['"'] += push, logits['}'] += push, logits[']'] += push, logits[EOG] += push;
            pgd_sampler_process_logits(a, logits, ma);
            pgd_sampler_process_logits(b, logits, mb);
            for (int t = 0; t < V; t++) diff += isinf(ma[t]) != isinf(mb[t]);
            pgd_sample_result r;
            REQUIRE(pgd_sampler_sample(a, logits, &r) == 0);
            if (r.token == EOG) {
                done = true;
            } else {
                size_t n;
                const char *q = piece(NULL, r.token, &n);
                pgd_buf_append(&out, q, n);
            }
            REQUIRE(pgd_sampler_accept(a, r.token) == 0 && pgd_sampler_accept(b, r.token) == 0);
        }
        if (done) {
            ended++;
            json_error_t je;
            json_t *v = json_loadb(out.data, out.len, 0, &je);
            const char *name = json_string_value(json_object_get(v, "name"));
            const char *color = json_string_value(json_object_get(v, "color"));
            CHECK(v && name && color);
            CHECK(name && pgd_api_utf8_chars(name, strlen(name)) <= 3);
            CHECK(color && (!strcmp(color, "red") || !strcmp(color, "green")));
            json_t *tags = json_object_get(v, "tags"), *n = json_object_get(v, "n");
            CHECK(!tags || json_array_size(tags) <= 3);
            for (size_t i = 0; i < json_array_size(tags); i++) {
                const char *tg = json_string_value(json_array_get(tags, i));
                size_t c = tg ? pgd_api_utf8_chars(tg, strlen(tg)) : 0;
                CHECK(c >= 2 && c <= 4);
            }
            CHECK(!n || json_is_integer(n));
            if (!v) fprintf(stderr, "    walk %d: %s: %.*s\n", w, je.text, (int)out.len, out.data);
            json_decref(v);
        }
        pgd_buf_free(&out);
        pgd_sampler_destroy(a);
        pgd_sampler_destroy(b);
    }
    pgd_json_schema_unref(sc); /* the samplers held their own references */
    fprintf(stderr, "    %d of 60 sampled walks ended\n", ended);
    CHECK(ended >= 48);
    CHECK_EQ_INT(diff, 0);
}

int main(void) {
    RUN(test_documents);
    RUN(test_free_object);
    RUN(test_refused);
    RUN(test_walks);
    RUN(test_depth);
    RUN(test_large_enum);
    RUN(test_sampler_schema);
    return test_summary();
}
