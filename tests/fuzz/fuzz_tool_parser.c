/*
 * tests/fuzz/fuzz_tool_parser.c — libFuzzer target: a model's output through the tool-call
 * parser (api/tools.h), whole and in pieces, as a stream feeds it.
 *
 * Input: byte 0: bits 0-1 the tool choice (auto, required, named; 3 = none), bit 2
 * parallel_tool_calls false, bit 3 the Llama 3.x JSON format (else Hermes), bit 4 a reasoning
 * model's output (api/reasoning.h: its reasoning split off first, as the server does; bit 5:
 * the prompt left the block open); byte 1: the length of each piece when streamed (0 = one
 * byte); the rest is the output text.
 *
 * Checks: fed whole and fed in pieces, the content and the calls are the same (names, arguments;
 * ids are random); every call has a name and arguments that jansson reads back as an object, or
 * (cut) do not read at all; at most one call when parallel_tool_calls is false; "none" gives the
 * text as it is; the content held back while streaming is never given twice (what feed returns
 * is a prefix of the final content at every step), and the calls seen while streaming only grow
 * into the final ones (names, arguments), only the last one open; each call's place in the
 * content (content_at) is the same however the output is cut. The reasoning split is the same
 * whole, in pieces and byte by byte; its reasoning never begins or ends with a newline; without
 * reasoning the content is the text.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/reasoning.h"
#include "api/tools.h"
#include "common/error.h"
#include "fuzz_util.h"

typedef struct {
    pgd_buf content;
    pgd_tool_parser *p;
} run_out;

static void run(const pgd_api_tools *t, const char *s, size_t n, size_t piece, run_out *o) {
    memset(o, 0, sizeof *o);
    FUZZ_CHECK(pgd_tool_parser_new(t, &o->p) == 0);
    for (size_t at = 0; at < n;) {
        size_t k = piece && piece < n - at ? piece : n - at;
        FUZZ_CHECK(pgd_tool_parser_feed(o->p, s + at, k, &o->content) == 0);
        at += k;
    }
    FUZZ_CHECK(pgd_tool_parser_end(o->p, &o->content) == 0);
}

typedef struct {
    pgd_buf reasoning, content;
    bool seen;
} split_out;

static void split(bool inside, const char *s, size_t n, size_t piece, split_out *o) {
    memset(o, 0, sizeof *o);
    pgd_reasoning_parser *p;
    FUZZ_CHECK(pgd_reasoning_parser_new(inside, &p) == 0);
    for (size_t at = 0; at < n;) {
        size_t k = piece && piece < n - at ? piece : n - at;
        FUZZ_CHECK(pgd_reasoning_parser_feed(p, s + at, k, &o->reasoning, &o->content) == 0);
        at += k;
    }
    FUZZ_CHECK(pgd_reasoning_parser_end(p, &o->reasoning, &o->content) == 0);
    o->seen = pgd_reasoning_parser_seen(p);
    pgd_reasoning_parser_free(p);
}

static bool same(const pgd_buf *a, const pgd_buf *b) {
    return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len));
}

/* The output's reasoning split off (checked); returns its content (exactly its size, so that
 * ASan sees a read past it), in place of the text. */
static char *reasoning_stage(bool inside, char *s, size_t *n, size_t piece) {
    split_out whole, parts, bytes;
    split(inside, s, *n, 0, &whole);
    split(inside, s, *n, piece, &parts);
    split(inside, s, *n, 1, &bytes);
    FUZZ_CHECK(same(&whole.reasoning, &parts.reasoning) && same(&whole.content, &parts.content));
    FUZZ_CHECK(same(&whole.reasoning, &bytes.reasoning) && same(&whole.content, &bytes.content));
    FUZZ_CHECK(whole.seen == parts.seen && whole.seen == bytes.seen);
    const pgd_buf *r = &whole.reasoning;
    FUZZ_CHECK(!r->len || (r->data[0] != '\n' && r->data[r->len - 1] != '\n'));
    FUZZ_CHECK(r->len + whole.content.len <= *n);
    if (!whole.seen) FUZZ_CHECK(!r->len && whole.content.len == *n);
    if (!whole.seen) FUZZ_CHECK(!*n || !memcmp(whole.content.data, s, *n));
    char *c = malloc(whole.content.len ? whole.content.len : 1);
    FUZZ_CHECK(c != NULL);
    if (whole.content.len) memcpy(c, whole.content.data, whole.content.len);
    *n = whole.content.len;
    for (int i = 0; i < 3; i++) {
        split_out *o = i == 0 ? &whole : i == 1 ? &parts : &bytes;
        pgd_buf_free(&o->reasoning);
        pgd_buf_free(&o->content);
    }
    free(s);
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const pgd_tool_choice modes[4] = {PGD_TOOL_CHOICE_AUTO, PGD_TOOL_CHOICE_REQUIRED,
                                             PGD_TOOL_CHOICE_NAMED, PGD_TOOL_CHOICE_NONE};
    pgd_str names[1] = {{"get_weather", 11}};
    pgd_api_tools t = {.n = 1,
                       .names = names,
                       .choice = modes[data[0] & 3],
                       .parallel = !(data[0] & 4),
                       .format = data[0] & 8 ? PGD_CHAT_TOOLS_LLAMA_JSON : PGD_CHAT_TOOLS_HERMES};
    size_t piece = data[1] ? data[1] % 17 : 1;
    size_t n = size - 2;
    char *s = malloc(n ? n : 1); /* exactly the text: ASan sees a read past it */
    FUZZ_CHECK(s != NULL);
    memcpy(s, data + 2, n);
    if (data[0] & 16) s = reasoning_stage(data[0] & 32, s, &n, piece ? piece : 1);

    run_out whole, parts;
    run(&t, s, n, 0, &whole);
    run(&t, s, n, piece ? piece : 1, &parts);
    FUZZ_CHECK(whole.content.len == parts.content.len);
    FUZZ_CHECK(!whole.content.len ||
               !memcmp(whole.content.data, parts.content.data, whole.content.len));
    size_t nw, np;
    const pgd_api_tool_call *cw = pgd_tool_parser_calls(whole.p, &nw);
    const pgd_api_tool_call *cp = pgd_tool_parser_calls(parts.p, &np);
    FUZZ_CHECK(nw == np);
    FUZZ_CHECK(t.parallel || nw <= 1);
    if (t.choice == PGD_TOOL_CHOICE_NONE) {
        FUZZ_CHECK(nw == 0 && whole.content.len == n && (!n || !memcmp(whole.content.data, s, n)));
    }
    for (size_t i = 0; i < nw; i++) {
        FUZZ_CHECK(cw[i].name.len && cw[i].name.len == cp[i].name.len &&
                   !memcmp(cw[i].name.ptr, cp[i].name.ptr, cw[i].name.len));
        FUZZ_CHECK(cw[i].arguments.len == cp[i].arguments.len &&
                   !memcmp(cw[i].arguments.ptr, cp[i].arguments.ptr, cw[i].arguments.len));
        /* whole arguments are an object (jansson reads it, but for numbers past its range:
         * JSON has none); cut ones (the output ended or broke off inside them) are not JSON */
        json_error_t err;
        json_t *a = json_loadb(cw[i].arguments.ptr, cw[i].arguments.len, 0, &err);
        FUZZ_CHECK(cw[i].cut ? a == NULL
                             : json_is_object(a) ||
                                   (!a && json_error_code(&err) == json_error_numeric_overflow));
        json_decref(a);
        FUZZ_CHECK(!cw[i].open && cw[i].cut == cp[i].cut);
        /* each call sits at the same place in the content, however the output is cut */
        FUZZ_CHECK(cw[i].content_at == cp[i].content_at && cw[i].content_at <= whole.content.len);
        FUZZ_CHECK(!i || cw[i - 1].content_at <= cw[i].content_at);
        FUZZ_CHECK(!strncmp(cw[i].id, "call_", 5) && strlen(cw[i].id) == 29);
    }

    /* streamed byte by byte, what is given at each step is a prefix of the final content, and
     * of the calls: their number, names and arguments only grow into the final ones (a stream
     * sends them as they come); only the last may be open */
    pgd_tool_parser *p = NULL;
    pgd_buf c = PGD_BUF_INIT;
    FUZZ_CHECK(pgd_tool_parser_new(&t, &p) == 0);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(pgd_tool_parser_feed(p, s + i, 1, &c) == 0);
        FUZZ_CHECK(c.len <= whole.content.len &&
                   (!c.len || !memcmp(c.data, whole.content.data, c.len)));
        size_t ns;
        const pgd_api_tool_call *cs = pgd_tool_parser_calls(p, &ns);
        FUZZ_CHECK(ns <= nw);
        for (size_t k = 0; k < ns; k++) {
            FUZZ_CHECK(cs[k].name.len == cw[k].name.len &&
                       !memcmp(cs[k].name.ptr, cw[k].name.ptr, cw[k].name.len));
            FUZZ_CHECK(cs[k].arguments.len <= cw[k].arguments.len &&
                       (!cs[k].arguments.len ||
                        !memcmp(cs[k].arguments.ptr, cw[k].arguments.ptr, cs[k].arguments.len)));
            FUZZ_CHECK(!cs[k].open || k == ns - 1);
            if (!cs[k].open) FUZZ_CHECK(cs[k].arguments.len == cw[k].arguments.len);
        }
    }
    FUZZ_CHECK(pgd_tool_parser_end(p, &c) == 0);
    FUZZ_CHECK(c.len == whole.content.len);
    pgd_buf_free(&c);
    pgd_tool_parser_free(p);

    pgd_buf_free(&whole.content);
    pgd_buf_free(&parts.content);
    pgd_tool_parser_free(whole.p);
    pgd_tool_parser_free(parts.p);
    free(s);
    return 0;
}
