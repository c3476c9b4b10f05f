/*
 * tests/unit/test_json_fsm.c — engine/sampling/json_fsm against jansson, an independent JSON
 * parser: documents written by hand and by a random generator (objects nested in arrays,
 * strings with escapes, surrogate pairs and every UTF-8 length, numbers in every form,
 * literals, whitespace) are accepted with every prefix and whole only at their end, as jansson
 * parses them; random one-byte mutations of them are whole objects exactly when jansson parses
 * an object. Then the limits of json_fsm.h (depth, whitespace in a row).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "engine/sampling/json_fsm.h"
#include "testutil.h"

/* The recognizer's verdict on a whole text: -1 refused at a byte, 0 a valid prefix only, 1 a
 * whole document. Every prefix accepted is checked too. */
static int verdict(const char *s, size_t n) {
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, pgd_json_schema_object());
    for (size_t i = 0; i < n; i++)
        if (!pgd_json_fsm_feed(&f, (const uint8_t *)s + i, 1)) return -1;
    return pgd_json_fsm_done(&f) ? 1 : 0;
}

/* jansson's: 1 an object (and nothing after it but whitespace), 0 anything else; -2 when it
 * refuses for its own limits (a number too large), which the grammar allows. */
static int reference(const char *s, size_t n) {
    json_error_t e;
    json_t *v = json_loadb(s, n, JSON_ALLOW_NUL, &e);
    if (!v) return strstr(e.text, "too big") || strstr(e.text, "overflow") ? -2 : 0;
    int obj = json_is_object(v);
    json_decref(v);
    return obj;
}

static void test_hand_written(void) {
    static const char *const whole[] = {
        "{}",
        " {\"a\":1} ",
        "{\"a\":[1,2.5,-0.25e+3,1E-2,0,-0],\"b\":{\"c\":null,\"d\":true,\"e\":false}}",
        "{\"s\":\"esc \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\ud83d\\ude00\"}",
        "{\"u\":\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xef\xbf\xbf\"}",
        "{\n  \"deep\": [[[[{\"x\": []}]]]]\n}\n",
        "{\"\":\"\",\"k\":[]}",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(whole); i++) {
        CHECK_EQ_INT(verdict(whole[i], strlen(whole[i])), 1);
        CHECK_EQ_INT(reference(whole[i], strlen(whole[i])), 1);
    }
    static const char *const refused[] = {
        "[1]",                          /* not an object */
        "{\"a\":01}",                   /* leading zero */
        "{\"a\":1.}",                   /* no fraction digits */
        "{\"a\":.5}",                   /* no integer part */
        "{\"a\":+1}",                   /* a plus sign */
        "{\"a\":1e}",                   /* no exponent digits */
        "{\"a\":tru}",                  /* a broken literal */
        "{\"a\":1,}",                   /* a trailing comma */
        "{\"a\" 1}",                    /* no colon */
        "{a:1}",                        /* an unquoted key */
        "{\"a\":\"\x01\"}",             /* a raw control character */
        "{\"a\":\"\\x\"}",              /* a bad escape */
        "{\"a\":\"\\ud83d\"}",          /* a high surrogate alone */
        "{\"a\":\"\\ude00\"}",          /* a low surrogate alone */
        "{\"a\":\"\\uDD",               /* refused here already: no escape goes on from it */
        "{\"a\":\"\xc0\xaf\"}",         /* an overlong form */
        "{\"a\":\"\xed\xa0\x80\"}",     /* an encoded surrogate */
        "{\"a\":\"\xf4\x90\x80\x80\"}", /* past U+10FFFF */
        "{\"a\":\"\x80\"}",             /* a lone continuation byte */
        "{\"a\":[}",                    /* mismatched brackets */
        "{\"a\":1}}",                   /* more after the end */
        "{\"a\":1} x",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(refused); i++) {
        int v = verdict(refused[i], strlen(refused[i]));
        CHECK(v < 1);
        CHECK_EQ_INT(reference(refused[i], strlen(refused[i])), 0);
        if (v == 1) fprintf(stderr, "    accepted: %s\n", refused[i]);
    }
    /* unfinished: valid prefixes, not whole */
    static const char *const prefixes[] = {
        "",         "{",       "{\"a\"", "{\"a\":[1,", "{\"a\":\"\\u00", "{\"a\":\"\xf0\x9f",
        "{\"a\":-", "{\"a\":1"};
    for (size_t i = 0; i < PGD_ARRAY_LEN(prefixes); i++)
        CHECK_EQ_INT(verdict(prefixes[i], strlen(prefixes[i])), 0);
}

/* ---- a random document generator ---------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

static void ws(pgd_buf *b) {
    static const char *const w[] = {"", "", " ", "\n", "  ", "\t", "\r\n"};
    pgd_buf_puts(b, w[rnd(PGD_ARRAY_LEN(w))]);
}

static void gen_string(pgd_buf *b) {
    pgd_buf_puts(b, "\"");
    uint32_t n = rnd(8);
    for (uint32_t i = 0; i < n; i++) {
        switch (rnd(8)) {
        case 0:
            pgd_buf_printf(b, "\\%c", "\"\\/bfnrt"[rnd(8)]);
            break;
        case 1:
            pgd_buf_printf(b, "\\u%04x", rnd(0xD800));
            break;
        case 2: /* a surrogate pair */
            pgd_buf_printf(b, "\\u%04X\\u%04x", 0xD800 + rnd(0x400), 0xDC00 + rnd(0x400));
            break;
        case 3: /* two, three and four byte UTF-8 */
            pgd_buf_puts(b, (const char *[]){"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                             "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf"}[rnd(5)]);
            break;
        default:
            pgd_buf_printf(b, "%c", "abc xyz:,{}[]019"[rnd(16)]);
        }
    }
    pgd_buf_puts(b, "\"");
}

static void gen_value(pgd_buf *b, int depth);

static void gen_object(pgd_buf *b, int depth) {
    pgd_buf_puts(b, "{");
    uint32_t n = depth > 4 ? 0 : rnd(4);
    for (uint32_t i = 0; i < n; i++) {
        if (i) pgd_buf_puts(b, ",");
        ws(b);
        gen_string(b);
        ws(b);
        pgd_buf_puts(b, ":");
        ws(b);
        gen_value(b, depth + 1);
        ws(b);
    }
    pgd_buf_puts(b, "}");
}

static void gen_value(pgd_buf *b, int depth) {
    switch (rnd(depth > 4 ? 4 : 7)) {
    case 0:
        gen_string(b);
        break;
    case 1: {
        static const char *const nums[] = {"0",     "-0",    "7",     "-12",     "3.25",
                                           "0.5e3", "-1E-2", "42e+1", "1000000", "9.75E09"};
        pgd_buf_puts(b, nums[rnd(PGD_ARRAY_LEN(nums))]);
        break;
    }
    case 2:
        pgd_buf_puts(b, (const char *[]){"true", "false", "null"}[rnd(3)]);
        break;
    case 3:
    case 4:
        gen_object(b, depth);
        break;
    default: {
        pgd_buf_puts(b, "[");
        uint32_t n = rnd(4);
        for (uint32_t i = 0; i < n; i++) {
            if (i) pgd_buf_puts(b, ",");
            ws(b);
            gen_value(b, depth + 1);
            ws(b);
        }
        pgd_buf_puts(b, "]");
    }
    }
}

static void test_random_documents(void) {
    int docs = 0, mutated = 0, whole = 0, skipped = 0;
    for (int d = 0; d < 2000; d++) {
        pgd_buf b = PGD_BUF_INIT;
        ws(&b);
        gen_object(&b, 0);
        ws(&b);
        REQUIRE(b.data != NULL);
        /* the document: whole at its end, a valid prefix before its closing brace */
        int ref = reference(b.data, b.len);
        CHECK_EQ_INT(ref, 1);
        CHECK_EQ_INT(verdict(b.data, b.len), 1);
        size_t close = b.len;
        while (close > 0 && b.data[close - 1] != '}') close--;
        for (size_t n = 0; n + 1 < close; n += 1 + rnd(7)) CHECK_EQ_INT(verdict(b.data, n), 0);
        if (ref != 1) fprintf(stderr, "    document: %.*s\n", (int)b.len, b.data);
        docs++;
        /* one-byte mutations: a whole object exactly when jansson parses one */
        static const char alphabet[] = "{}[]\",:. -+0123456789eEtrufalsn\\u\x01\x80\xc3\xa9\xff";
        for (int m = 0; m < 10; m++) {
            pgd_buf t = PGD_BUF_INIT;
            size_t at = rnd((uint32_t)b.len), kind = rnd(3);
            char c = alphabet[rnd(sizeof alphabet - 1)];
            pgd_buf_append(&t, b.data, at);
            if (kind != 2) pgd_buf_append(&t, &c, 1); /* 0: replace, 1: insert */
            size_t from = kind == 1 ? at : at + 1;    /* 2: delete */
            pgd_buf_append(&t, b.data + from, b.len - from);
            int r = reference(t.data ? t.data : "", t.len),
                v = verdict(t.data ? t.data : "", t.len);
            if (r == -2) {
                skipped++;
            } else {
                CHECK_EQ_INT(v == 1, r == 1);
                if ((v == 1) != (r == 1))
                    fprintf(stderr, "    mutation (fsm %d, jansson %d): %.*s\n", v, r, (int)t.len,
                            t.data);
                whole += r == 1;
                mutated++;
            }
            pgd_buf_free(&t);
        }
        pgd_buf_free(&b);
    }
    fprintf(stderr,
            "    %d documents, %d mutations (%d still whole objects), %d left to jansson's "
            "own limits\n",
            docs, mutated, whole, skipped);
    CHECK(whole > 100 && mutated - whole > 1000);
}

static void test_limits(void) {
    pgd_buf b = PGD_BUF_INIT;
    pgd_buf_puts(&b, "{\"a\":");
    for (int i = 1; i < PGD_JSON_MAX_DEPTH; i++) pgd_buf_puts(&b, "[");
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, pgd_json_schema_object());
    CHECK(pgd_json_fsm_feed(&f, (const uint8_t *)b.data, b.len)); /* 64 deep */
    pgd_json_fsm g = f;
    CHECK(!pgd_json_fsm_feed(&g, (const uint8_t *)"[", 1)); /* 65 */
    g = f;
    CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)"1", 1));
    pgd_buf_free(&b);
    char spaces[PGD_JSON_MAX_WS + 1];
    memset(spaces, ' ', sizeof spaces);
    pgd_json_fsm_init(&f, pgd_json_schema_object());
    CHECK(pgd_json_fsm_feed(&f, (const uint8_t *)"{", 1));
    g = f;
    CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)spaces, PGD_JSON_MAX_WS));
    CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)"}", 1)); /* a brace starts the count again */
    CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)spaces, PGD_JSON_MAX_WS));
    CHECK(pgd_json_fsm_done(&g));
    g = f;
    CHECK(!pgd_json_fsm_feed(&g, (const uint8_t *)spaces, PGD_JSON_MAX_WS + 1));
    g = f; /* spaces inside a string are its text */
    CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)"\"", 1));
    CHECK(pgd_json_fsm_feed(&g, (const uint8_t *)spaces, PGD_JSON_MAX_WS + 1));
}

int main(void) {
    RUN(test_hand_written);
    RUN(test_random_documents);
    RUN(test_limits);
    return test_summary();
}
