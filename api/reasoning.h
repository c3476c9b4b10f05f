/*
 * api/reasoning.h — a reasoning model's thinking apart from its answer: the text between
 * "<think>" and "</think>" (Qwen3, QwQ, DeepSeek-R1 and their distillations write it so) goes to
 * the message's `reasoning_content` (the field vLLM's reasoning parsers fill), the rest to its
 * `content`, where tool calls are then looked for.
 *
 * Rules, the same streamed or not (a chunk boundary never changes the result):
 *   - the output is in its reasoning when the prompt ended inside an open block (`inside`: the
 *     template wrote "<think>" after the generation prompt, as DeepSeek-R1's does), or when the
 *     output begins — after whitespace — with "<think>"; otherwise it is all content, and a
 *     "<think>" later in it is content too;
 *   - the reasoning ends at the first "</think>"; the tags are dropped, the reasoning is stripped
 *     of the newlines at both its ends and the content of those at its start (Qwen3's template
 *     does the same when it renders the turn back: reasoning_content.strip('\n'),
 *     content.lstrip('\n'));
 *   - an output that ends inside its reasoning (cut by max_tokens) has no content.
 * A tag split across chunks is held until it is whole; so are newlines that may end the
 * reasoning.
 *
 * Ownership: the parser owns its held text; the caller owns the buffers it appends to.
 * Threading: no shared state; one thread at a time per parser.
 */
#ifndef PGD_API_REASONING_H
#define PGD_API_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "common/text.h"

#define PGD_REASONING_OPEN  "<think>"
#define PGD_REASONING_CLOSE "</think>"

typedef struct pgd_reasoning_parser pgd_reasoning_parser;

/* inside: the prompt ended inside an open reasoning block. 0 or PGD_ENOMEM. */
int pgd_reasoning_parser_new(bool inside, pgd_reasoning_parser **out);
void pgd_reasoning_parser_free(pgd_reasoning_parser *p); /* NULL is fine */

/* Feeds n bytes of output; appends what is decided to `reasoning` and `content`. 0 or
 * PGD_ENOMEM. */
int pgd_reasoning_parser_feed(pgd_reasoning_parser *p, const char *s, size_t n, pgd_buf *reasoning,
                              pgd_buf *content);
/* The output has ended: appends what was held. 0 or PGD_ENOMEM. */
int pgd_reasoning_parser_end(pgd_reasoning_parser *p, pgd_buf *reasoning, pgd_buf *content);

/* True once the output is known to have reasoning (a block was open at some point). */
bool pgd_reasoning_parser_seen(const pgd_reasoning_parser *p);
/* True while the output is in its reasoning (its block open; its closing tag not yet whole). A
 * token fed while this was true before or after it is one of the reasoning's (its tags too). */
bool pgd_reasoning_parser_thinking(const pgd_reasoning_parser *p);

/* True when `prompt` ends inside an open reasoning block: it holds a "<think>" after its last
 * "</think>" (the model's output goes on from there). */
bool pgd_reasoning_prompt_open(const char *prompt, size_t len);

#endif
