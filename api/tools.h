/*
 * api/tools.h — OpenAI tool calling on chat completions: the request's `tools`, `tool_choice`
 * and `parallel_tool_calls` validated, the constraint that forces a call, and the parser that
 * turns a model's output into `tool_calls`.
 *
 * Request (chat only):
 *   tools                array of at most PGD_API_MAX_TOOLS {"type": "function", "function":
 *                        {"name": 1..64 of [A-Za-z0-9_-], "description": string,
 *                        "parameters": JSON Schema object, "strict": bool}}; names unique
 *   tool_choice          "none" | "auto" (the default with tools) | "required" |
 *                        {"type": "function", "function": {"name": one of the tools}}
 *   parallel_tool_calls  bool, default true; false: at most one call
 * Each definition is given to the chat template as the JSON text its tojson filter writes
 * (api/jsonutil.h pgd_api_json_dump_py). With "none" the tools are checked but not shown to the
 * model, and its output is plain content.
 *
 * How calls come out:
 *   auto      the template's format (pgd_api_tools.format). HERMES (chatml, as Qwen2.5's
 *             template asks): the model writes <tool_call>\n{"name": ..., "arguments": {...}}
 *             \n</tool_call> blocks. A block whose body begins with a call's head —
 *             {"name": "<name>", "arguments": { ("parameters" is taken too), in that order,
 *             within 256 bytes and before the closing tag — is a call from its head on: the
 *             call opens there and its arguments are taken byte by byte as the model writes
 *             them (raw, as long as they continue a JSON object: the sampler's JSON recognizer,
 *             engine/sampling/json_fsm.h, tells — with its bounds: 64 whitespace bytes in a
 *             row, 64 levels of nesting), so a stream sends them as they come. The call
 *             ends when they are whole; the rest of the call's object ("}", or more keys) is
 *             dropped, other text in the block is content. If the output ends inside the
 *             arguments, or goes on with a byte that cannot continue them, the call keeps what
 *             was written (`cut`: not yet JSON, as OpenAI's calls cut by max_tokens are) and
 *             the block's rest is content. Any other block is read whole at its closing tag
 *             (or the output's end): a call if it holds such an object (its arguments then
 *             written by pgd_api_json_dump_py), else content, tags included. Whitespace around
 *             calls is dropped. LLAMA_JSON (Llama 3.1+): an answer that begins (after
 *             whitespace, and a <|python_tag|> if its text shows) with '{' or '[' is calls
 *             {"name": ..., "parameters": ...} — one object, several separated by ';' or ',',
 *             or a list — else content. As a list (below) when its first object begins with a
 *             call's head; otherwise it is held to its end and read whole: calls if it all
 *             reads so, else content (arguments as pgd_api_json_dump_py writes them).
 *   required  the output is constrained to a JSON array of {"name": <one of the tools>,
 *             "arguments": <that tool's parameters>} (one at most when parallel_tool_calls is
 *             false), each element a call; the name, written first, picks the branch whose
 *             arguments follow. With more tools than a union holds (PGD_JSON_MAX_BRANCHES), or
 *             parameters a union cannot read, the names are constrained and the arguments are
 *             any JSON object. Read as a list.
 *   A list of calls is taken from its first call's head on: each call opens at its head and
 *   takes its arguments as they come (as a Hermes block's), then its object's '}'; between
 *   calls, whitespace, ';', ',' and the list's brackets. A later object that begins otherwise
 *   is read whole when it ends (a call if it is one); anything else ends the list, and the
 *   rest of the answer is content. Cut short inside a call, the call keeps what was written
 *   (`cut`); cut before the first head, the answer is content.
 *   named     the output is constrained to the named tool's parameters: one call of it, open
 *             from the output's first byte past whitespace, its arguments taken as they come;
 *             cut short, the call keeps what was written (`cut`).
 *
 * Ownership: pgd_api_tools owns its arrays and text (names point into the request's JSON);
 * a parser owns everything it returns. Threading: no shared state; a parser is used by one
 * thread at a time.
 */
#ifndef PGD_API_TOOLS_H
#define PGD_API_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/error.h"
#include "common/text.h"
#include "engine/sampling/json_schema.h"
#include "engine/text/chat_template.h"

#define PGD_API_MAX_TOOLS     128
#define PGD_API_TOOL_NAME_MAX 64
#define PGD_API_TOOL_ID_CAP   32 /* "call_" + 24 hex digits + NUL */

typedef enum pgd_tool_choice {
    PGD_TOOL_CHOICE_NONE = 0, /* no tools, or "none": plain content */
    PGD_TOOL_CHOICE_AUTO,
    PGD_TOOL_CHOICE_REQUIRED,
    PGD_TOOL_CHOICE_NAMED,
} pgd_tool_choice;

typedef struct pgd_api_tools {
    size_t n;                    /* tools given */
    pgd_str *names;              /* [n] into the request's JSON */
    pgd_str *defs;               /* [n] each definition as a template's tojson writes it */
    pgd_str *defs_indent;        /* [n] ... and as its tojson(indent=4) does (both into text) */
    pgd_buf text;                /* storage of defs and defs_indent */
    pgd_tool_choice choice;      /* NONE when n == 0 */
    size_t named;                /* NAMED: the tool's index */
    bool parallel;               /* parallel_tool_calls */
    pgd_chat_tool_format format; /* how the model writes calls (the caller sets it from the
                                    chat template; HERMES by default) */
} pgd_api_tools;

/* Reads tools / tool_choice / parallel_tool_calls from a chat body. When the choice forces a
 * call, *constraint receives the compiled schema of the output (one reference). 0; PGD_EINVAL
 * with *e a 400 naming the parameter; PGD_ENOMEM with *e a 500. *out may be freed either way. */
int pgd_api_tools_parse(const json_t *root, pgd_api_tools *out, const pgd_json_schema **constraint,
                        pgd_api_error *e);

void pgd_api_tools_free(pgd_api_tools *t); /* back to empty; NULL is fine */

/* ---- output ---------------------------------------------------------------------------------- */

typedef struct pgd_api_tool_call {
    char id[PGD_API_TOOL_ID_CAP]; /* "call_" + 24 random hex digits */
    pgd_str name;
    pgd_str arguments; /* JSON text of an object (while open or cut: its beginning) */
    bool open;         /* the last call, its arguments still coming (the output goes on) */
    bool cut;          /* its arguments stop before their JSON ends (the output ended, or went
                          on with what could not continue them) */
    size_t content_at; /* the length the content buffer of the feed / end that found it had
                          then: what was appended before that offset came before the call */
} pgd_api_tool_call;

typedef struct pgd_tool_parser pgd_tool_parser;

/* A parser for one choice's output under `t` (which it copies what it needs from: `t` may go
 * away). 0 or PGD_ENOMEM. */
int pgd_tool_parser_new(const pgd_api_tools *t, pgd_tool_parser **out);
void pgd_tool_parser_free(pgd_tool_parser *p); /* NULL is fine */

/* Feeds the next piece of output. Appends to `content` the text known to be content by now
 * (text that may still turn out to be part of a call is held back). Splitting an output into
 * pieces anywhere gives the same content and calls as feeding it whole. 0 or PGD_ENOMEM. */
int pgd_tool_parser_feed(pgd_tool_parser *p, const char *s, size_t n, pgd_buf *content);

/* The output has ended: decides what is held (appending to `content`). Feed no more after it.
 * 0 or PGD_ENOMEM. */
int pgd_tool_parser_end(pgd_tool_parser *p, pgd_buf *content);

/* How many calls were found so far (cheap: no views built). */
size_t pgd_tool_parser_n_calls(const pgd_tool_parser *p);

/* The calls found so far, in order: *n of them — the last one may be open, its arguments still
 * growing (what a later call returns only adds to what this one did: a stream sends the
 * difference). The array and its texts stay valid until the next feed / end / free. */
const pgd_api_tool_call *pgd_tool_parser_calls(pgd_tool_parser *p, size_t *n);

#endif
