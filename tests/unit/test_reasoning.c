/*
 * tests/unit/test_reasoning.c — the reasoning / content split (api/reasoning.h): the expected
 * split of outputs written as Qwen3 and DeepSeek-R1 write them, the same whatever the chunks
 * (every cut into two and three pieces, and byte by byte), and the prompt check.
 */
#include <stdio.h>
#include <string.h>

#include "api/reasoning.h"
#include "common/error.h"
#include "testutil.h"

/* Splits `out` fed in pieces cut at c1 <= c2 (bytes [0, c1), [c1, c2), [c2, n)); or byte by
 * byte when c1 is SIZE_MAX. Writes "reasoning|content" (seen: a leading '+') into buf. */
static void split(bool inside, const char *out, size_t c1, size_t c2, char *buf, size_t cap) {
    pgd_reasoning_parser *p;
    REQUIRE(pgd_reasoning_parser_new(inside, &p) == 0);
    pgd_buf r = PGD_BUF_INIT, c = PGD_BUF_INIT;
    size_t n = strlen(out);
    if (c1 == SIZE_MAX) {
        for (size_t i = 0; i < n; i++)
            REQUIRE(pgd_reasoning_parser_feed(p, out + i, 1, &r, &c) == 0);
    } else {
        REQUIRE(pgd_reasoning_parser_feed(p, out, c1, &r, &c) == 0);
        REQUIRE(pgd_reasoning_parser_feed(p, out + c1, c2 - c1, &r, &c) == 0);
        REQUIRE(pgd_reasoning_parser_feed(p, out + c2, n - c2, &r, &c) == 0);
    }
    REQUIRE(pgd_reasoning_parser_end(p, &r, &c) == 0);
    snprintf(buf, cap, "%s%.*s|%.*s", pgd_reasoning_parser_seen(p) ? "+" : "", (int)r.len,
             r.data ? r.data : "", (int)c.len, c.data ? c.data : "");
    pgd_reasoning_parser_free(p);
    pgd_buf_free(&r);
    pgd_buf_free(&c);
}

static void expect(bool inside, const char *out, const char *want) {
    char whole[512], part[512];
    split(inside, out, strlen(out), strlen(out), whole, sizeof whole);
    CHECK_EQ_STR(whole, want);
    split(inside, out, SIZE_MAX, 0, part, sizeof part);
    CHECK_EQ_STR(part, want);
    size_t n = strlen(out);
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            split(inside, out, a, b, part, sizeof part);
            if (strcmp(part, want)) {
                fprintf(stderr, "    cut at %zu, %zu of \"%s\": \"%s\", want \"%s\"\n", a, b, out,
                        part, want);
                CHECK_EQ_STR(part, want);
                return;
            }
        }
}

static void test_qwen3_outputs(void) {
    /* Qwen3 thinking: <think>\n...\n</think>\n\nanswer */
    expect(false, "<think>\nLet me add: 2 + 2 = 4.\n</think>\n\nThe answer is 4.",
           "+Let me add: 2 + 2 = 4.|The answer is 4.");
    /* enable_thinking false: the template closed the block in the prompt; plain content */
    expect(false, "The answer is 4.", "|The answer is 4.");
    /* an empty block, as Qwen3 writes it when it decides not to think */
    expect(false, "<think>\n\n</think>\n\nHi!", "+|Hi!");
    /* whitespace before the tag; newlines inside the reasoning and content kept */
    expect(false, "\n <think>a\n\nb\n\n</think>\n\nx\n\ny\n", "+a\n\nb|x\n\ny\n");
    /* cut by max_tokens inside the reasoning: no content; a partial tag is reasoning text */
    expect(false, "<think>\nstill thinking\n\n", "+still thinking|");
    expect(false, "<think>\nhmm </thi", "+hmm </thi|");
    /* a tool call after the reasoning stays in the content (the tool parser reads it) */
    expect(false, "<think>\ncall it\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
           "+call it|<tool_call>\n{\"name\": \"f\"}\n</tool_call>");
    /* only the first block is reasoning; a later tag, or one after text, is content */
    expect(false, "<think>a</think>b<think>c</think>d", "+a|b<think>c</think>d");
    expect(false, "Sure. <think>no</think>", "|Sure. <think>no</think>");
    /* text that only starts like the tag */
    expect(false, "<thin>k", "|<thin>k");
    expect(false, "<", "|<");
    expect(false, "  ", "|  ");
    expect(false, "", "|");
}

static void test_open_in_prompt(void) {
    /* DeepSeek-R1: the template wrote "<think>\n"; the output has only the closing tag */
    expect(true, "Two and two.\n</think>\n\n4", "+Two and two.|4");
    expect(true, "cut short", "+cut short|");
    expect(true, "", "+|");
    /* a "<think>" inside an open block is reasoning text */
    expect(true, "<think>x</think>y", "+<think>x|y");
}

static void test_prompt_open(void) {
    const char *open = "<|im_start|>assistant\n<think>\n";
    const char *closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    const char *none = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    const char *reopened = "<think>a</think>b<think>\n";
    CHECK(pgd_reasoning_prompt_open(open, strlen(open)));
    CHECK(!pgd_reasoning_prompt_open(closed, strlen(closed)));
    CHECK(!pgd_reasoning_prompt_open(none, strlen(none)));
    CHECK(pgd_reasoning_prompt_open(reopened, strlen(reopened)));
    CHECK(!pgd_reasoning_prompt_open("", 0));
}

int main(void) {
    RUN(test_qwen3_outputs);
    RUN(test_open_in_prompt);
    RUN(test_prompt_open);
    return test_summary();
}
