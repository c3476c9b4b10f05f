/*
 * tests/unit/chat_template_test_util.h — shared helpers of the chat template tests
 * (test_chat_template*.c): a conversation builder, detection and render-and-compare helpers,
 * span checks, text replacement, and the Qwen2.5 texts both files use (its non-tool branch and
 * tools block, by hand, with the tool definitions and calls rendered into it). Header-only
 * (static inline functions and static constants).
 */
#ifndef PGD_TESTS_CHAT_TEMPLATE_TEST_UTIL_H
#define PGD_TESTS_CHAT_TEMPLATE_TEST_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/chat_template.h"
#include "testutil.h"

/* Qwen2.5's non-tool branch; \\n is a backslash-n escape inside the Jinja literal */
static const char QWEN25_SNIPPET[] =
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- "
    "'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n "
    "       {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}";

/* A conversation of up to 8 messages, each one part unless built otherwise. */
typedef struct {
    pgd_chat_msg m[8];
    pgd_str s[8];
    size_t n;
} conv;

static inline void add(conv *c, const char *role, const char *text) {
    c->s[c->n].ptr = text;
    c->s[c->n].len = strlen(text);
    c->m[c->n].role = role;
    c->m[c->n].parts = &c->s[c->n];
    c->m[c->n].n_parts = 1;
    c->n++;
}

static inline pgd_chat_template *make(const char *src, const char *override, const char *bos,
                                      const char *eos) {
    pgd_chat_template *t = NULL;
    int rc = pgd_chat_template_detect(src, src ? strlen(src) : 0, override, bos, eos, &t);
    if (rc) fprintf(stderr, "  detect failed: %s\n", pgd_error_detail());
    return t;
}

/* Spans are sorted, non-empty, non-touching and inside the text. */
static inline int spans_well_formed(const pgd_chat_prompt *p) {
    for (size_t i = 0; i < p->n_special; i++) {
        if (p->special[i].begin >= p->special[i].end) return 0;
        if (p->special[i].end > p->text.len) return 0;
        if (i && p->special[i].begin <= p->special[i - 1].end) return 0;
    }
    return 1;
}

static inline int in_span(const pgd_chat_prompt *p, size_t pos) {
    for (size_t i = 0; i < p->n_special; i++)
        if (pos >= p->special[i].begin && pos < p->special[i].end) return 1;
    return 0;
}

/* Two renders of one conversation whose contents differ in every byte (pa, pb): the bytes that
 * differ are content and must lie outside pa's spans (the template's own text), every other byte
 * inside one. Returns how many are content (0 after the first misplaced byte, reported with
 * `what`). */
static inline size_t content_bytes_in_spans(const pgd_chat_prompt *pa, const pgd_chat_prompt *pb,
                                            const char *what) {
    size_t content = 0;
    for (size_t i = 0; i < pa->text.len && i < pb->text.len; i++) {
        int is_content = pa->text.data[i] != pb->text.data[i];
        content += (size_t)is_content;
        if (in_span(pa, i) == is_content) {
            fprintf(stderr, "  %s: byte %zu ('%c') %s\n", what, i, pa->text.data[i],
                    is_content ? "is content inside a span" : "is template text outside spans");
            CHECK(0);
            return 0;
        }
    }
    return content;
}

/* Render (offering `tools`, NULL: none) and compare with the expected text; 1 on match. */
static inline int renders_tools_as(const pgd_chat_template *t, const conv *c,
                                   const pgd_chat_tools *tools, bool gen, const char *want) {
    pgd_chat_prompt p;
    int rc = pgd_chat_render_tools(t, c->m, c->n, tools, gen, &p);
    if (rc) {
        fprintf(stderr, "  render failed: %s\n", pgd_error_detail());
        return 0;
    }
    int ok = p.text.len == strlen(want) && !memcmp(p.text.data, want, p.text.len) &&
             spans_well_formed(&p) && p.text.data[p.text.len] == '\0';
    if (!ok) fprintf(stderr, "  got:  \"%s\"\n  want: \"%s\"\n", p.text.data, want);
    pgd_chat_prompt_free(&p);
    return ok;
}

static inline int renders_as(const pgd_chat_template *t, const conv *c, bool gen,
                             const char *want) {
    return renders_tools_as(t, c, NULL, gen, want);
}

/* Tool calls for the last message added. */
static inline void with_calls(conv *c, const pgd_chat_tool_call *calls, size_t n) {
    c->m[c->n - 1].calls = calls;
    c->m[c->n - 1].n_calls = n;
}

/* Render with options and compare with the expected text; 1 on match. */
static inline int renders_opts_as(const pgd_chat_template *t, const conv *c,
                                  const pgd_chat_tools *tools, const pgd_chat_render_opts *o,
                                  const char *want) {
    pgd_chat_prompt p;
    int rc = pgd_chat_render_with(t, c->m, c->n, tools, o, &p);
    if (rc) {
        fprintf(stderr, "  render failed: %s\n", pgd_error_detail());
        return 0;
    }
    int ok = p.text.len == strlen(want) && !memcmp(p.text.data, want, p.text.len) &&
             spans_well_formed(&p) && p.text.data[p.text.len] == '\0';
    if (!ok) fprintf(stderr, "  got:  \"%s\"\n  want: \"%s\"\n", p.text.data, want);
    pgd_chat_prompt_free(&p);
    return ok;
}

/* src with the first `from` replaced by `to` (malloc'd; NULL when `from` is not there). */
static inline char *replaced(const char *src, const char *from, const char *to) {
    const char *at = strstr(src, from);
    if (!at) return NULL;
    size_t a = (size_t)(at - src), f = strlen(from), t = strlen(to), n = strlen(src);
    char *out = malloc(n - f + t + 1);
    if (!out) return NULL;
    memcpy(out, src, a);
    memcpy(out + a, to, t);
    memcpy(out + a + t, at + f, n - a - f + 1);
    return out;
}

/* A pgd_str of a string literal. */
#define S(lit)                                                                                     \
    { lit, sizeof(lit) - 1 }

/* Qwen2.5-Instruct's tools block (tests/reference/templates/qwen2.5-instruct.jinja), by hand */
#define TOOLS_HEAD                                                                                 \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "     \
    "provided with function signatures within <tools></tools> XML tags:\n<tools>"
#define TOOLS_TAIL_START                                                                           \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments " \
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
/* single braces (other Qwen2.5 revisions; every ChatML template without that text) */
#define TOOLS_TAIL                                                                                 \
    TOOLS_TAIL_START "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"            \
                     "</tool_call><|im_end|>\n"
/* double braces, printed as written (Qwen2.5's GGUF copy, tests/reference/templates/) */
#define TOOLS_TAIL2                                                                                \
    TOOLS_TAIL_START "{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n"          \
                     "</tool_call><|im_end|>\n"

static const pgd_str k_defs[2] = {
    S("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}"),
    S("{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"a\\nb\"}}"),
};
static const pgd_chat_tools k_tools = {k_defs, NULL, 2};
static const pgd_chat_tool_call k_calls[2] = {
    {S("get_weather"), S("{\"city\": \"Paris\"}")},
    {S("now"), S("{}")},
};

#define TOOL_DEFS                                                                                  \
    "\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}"                        \
    "\n{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"a\\nb\"}}"

#endif
