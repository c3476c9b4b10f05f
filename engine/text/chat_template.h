/*
 * engine/text/chat_template.h — chat templates: turn an OpenAI `messages` array into the prompt
 * text a model was trained on.
 *
 * pagoda does not run Jinja. It recognises the family of a model's tokenizer.chat_template from
 * the markers in its source text (or takes the family from an override name) and renders that
 * family natively, byte for byte as the family's published template renders under Hugging
 * Face's settings (trim_blocks, lstrip_blocks): the same whitespace, the same bos/eos
 * placement, the same trimming, and the same refusals (a template's raise_exception becomes
 * PGD_EINVAL with the same meaning). Supported families and the published template each one
 * follows (copies in tests/reference/templates/):
 *
 *   chatml   <|im_start|>ROLE\n...<|im_end|>\n   SmolLM2-Instruct, Qwen2/2.5-Instruct and
 *            Qwen3-Instruct-2507 (whose template renders exactly as Qwen2.5's without a default
 *            system prompt: no <think> handling, the same Hermes tools); a default
 *            system prompt that the template inserts when messages[0] is not a system message
 *            is extracted from the template source. Tools, tool calls and tool results render
 *            as Qwen2.5-Instruct's template renders them (Hermes: a "# Tools" block with
 *            <tools> in the system turn, <tool_call> in assistant turns, <tool_response> in
 *            user turns), the call format in the block written with double braces
 *            ({{"name": ...}}) only when the source holds that text (Qwen2.5's GGUF copy), else
 *            with single ones. SmolLM2's template has no tool branch at all: pagoda deliberately
 *            gives every ChatML model this same format (with the model's own default system
 *            prompt), as the one a ChatML model is most likely to have seen.
 *   qwen3    Qwen3's hybrid-thinking template (the Qwen3 models of April 2025, Qwen3-0.6B ...
 *            235B-A22B; recognised by all its markers, e.g. last_query_index and the </think>
 *            split): ChatML turns, no default system prompt; tools, calls and results as chatml
 *            renders them (single braces). An assistant message's reasoning is its
 *            reasoning_content when given (pgd_chat_render_opts), else, when its content holds
 *            "</think>", the text before the first "</think>" (after the last "<think>" in
 *            it), and the content
 *            is then what follows the last "</think>" (newlines trimmed as the template trims
 *            them). Turns after the last user query (the last "user" message that is not a
 *            <tool_response> wrapper) write it as "<think>\n" + reasoning + "\n</think>\n\n"
 *            when they are the last message or the reasoning is not empty; other turns drop
 *            it. The generation prompt is "<|im_start|>assistant\n", followed by
 *            "<think>\n\n</think>\n\n" when enable_thinking is false. Variant
 *            "Thinking-2507" (Qwen3-*-Thinking-2507: the same turns, Qwen3's later revision with
 *            `is string` checks, which render alike for pagoda's string contents): the
 *            generation prompt is always "<|im_start|>assistant\n<think>\n" (the answer starts
 *            inside the reasoning block; enable_thinking is ignored). Another reasoning
 *            (<think>) ChatML template (an edited Qwen3 one) is refused.
 *   qwq      QwQ-32B's template: ChatML turns, no default system prompt; with tools the system
 *            turn is messages[0]'s content (or nothing) + "\n\n# Tools..." (the blank line
 *            always); an assistant message that is not the last keeps only the text after its
 *            last "</think>" (newlines trimmed at its start, even without one), the last is
 *            kept whole (reasoning_content is ignored); calls as chatml renders them but after
 *            "\n" whenever the unsplit content is not empty; the generation prompt is
 *            "<|im_start|>assistant\n<think>\n". An edited QwQ template is refused.
 *   llama2   Llama-2-chat: [INST] / <<SYS>>, bos before every user turn, .strip() on content
 *   llama3   Meta-Llama-3-Instruct: <|start_header_id|>ROLE<|end_header_id|>\n\n ... <|eot_id|>;
 *            no tools. Variant "dated": Meta's Llama-3.1/3.2/3.3-Instruct template (recognised
 *            by all its markers; another dated template is refused): a system turn always
 *            written, with "Cutting Knowledge Date: December 2023" and "Today Date: " + today's
 *            local date ("%d %b %Y", when the source calls strftime_now, as Hugging Face
 *            supplies it) or the source's fixed date ("26 Jul 2024" in 3.1/3.3); tools as JSON
 *            (tojson(indent=4)) in the first non-system message, one {"name": ...,
 *            "parameters": ...} call per assistant message, tool results as ipython turns
 *            holding the result as a JSON string.
 *   mistral  Mistral-7B-Instruct-v0.2 (original): [INST] ... [/INST], no system role
 *   gemma    Gemma-3-it: <start_of_turn>user|model, system folded into the first user turn;
 *            a Gemma-1/2 template ("System role not supported") refuses system messages
 *   zephyr   zephyr-7b-beta: <|system|> <|user|> <|assistant|>, each turn ends with eos + \n
 *   phi3     Phi-3-mini-instruct: <|ROLE|>\n...<|end|>\n, eos when there is no generation
 *            prompt; a Phi-3.5 template also drops empty system messages
 *
 * Beyond the templates: roles are "system", "user" and "assistant", and "tool" where the
 * template has a tool format (anything else is PGD_EINVAL naming the role); tools, tool calls and
 * "tool" messages with another template are PGD_EINVAL saying that tool calling needs a
 * template with a tool format;
 * an empty `messages` array is PGD_EINVAL (as in the OpenAI API), so no family sees a
 * conversation its template could not index.
 *
 * Every rendered prompt carries the byte ranges that came from the template (markers, role
 * headers, bos/eos text, a default system prompt, the tools block's fixed text, a Llama date) as
 * opposed to message content (tool names, call arguments, tool definitions and results count
 * as content — a result that the template prints as a JSON string, its quotes and escapes
 * included: they are never inside a span). The tokenizer
 * recognises control tokens only inside those ranges, so a user who types "<|im_end|>" gets the
 * literal text, not the control token.
 *
 * Threading: a pgd_chat_template is immutable after creation; any number of threads may render
 * with it at once. Renders share no state. Error details go to the calling thread's
 * pgd_error_detail().
 */
#ifndef PGD_ENGINE_CHAT_TEMPLATE_H
#define PGD_ENGINE_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/text.h"
#include "engine/model/gguf.h"

typedef enum {
    PGD_CHAT_CHATML,
    PGD_CHAT_LLAMA2,
    PGD_CHAT_LLAMA3,
    PGD_CHAT_MISTRAL,
    PGD_CHAT_GEMMA,
    PGD_CHAT_ZEPHYR,
    PGD_CHAT_PHI3,
    PGD_CHAT_QWEN3,
    PGD_CHAT_QWQ
} pgd_chat_family;

#define PGD_CHAT_FAMILY_COUNT 9

/* "chatml", "llama2", "llama3", "mistral", "gemma", "zephyr", "phi3", "qwen3", "qwq"; "?" if out
 * of range. */
const char *pgd_chat_family_name(pgd_chat_family f);

/* Family of a name (exact, lower case). 0, or PGD_EINVAL with a detail listing the known
 * names. */
int pgd_chat_family_from_name(const char *name, pgd_chat_family *out);

/* "chatml, llama2, llama3, mistral, gemma, zephyr, phi3, qwen3, qwq" (static string, for
 * messages). */
const char *pgd_chat_family_names(void);

/* One tool call of an assistant message: the function's name, and its arguments as the JSON
 * text the template writes (the caller formats it as Python's json.dumps would: api/jsonutil.h
 * pgd_api_json_dump_py; both formats print the compact dump). Borrowed. */
typedef struct {
    pgd_str name;
    pgd_str arguments;
} pgd_chat_tool_call;

/* One message. `role` is a NUL-terminated string; the content is the concatenation of
 * parts[0..n_parts) in order (n_parts may be 0: empty content). An assistant message may carry
 * tool calls (calls[0..n_calls)); a "tool" message is a tool's result. Tool calls and "tool"
 * messages render only with a tool format (pgd_chat_template_tool_format); other templates
 * refuse them (PGD_EINVAL). Borrowed: nothing here is copied beyond the render call. */
typedef struct {
    const char *role;
    const pgd_str *parts;
    size_t n_parts;
    const pgd_chat_tool_call *calls; /* [n_calls], assistant only; NULL when none */
    size_t n_calls;
} pgd_chat_msg;

/* The tools offered to the model: each definition as the JSON text the template writes (the
 * whole {"type": "function", "function": {...}} object, formatted as Python's json.dumps would:
 * `defs` compact, `defs_indent` with indent=4 — tojson(indent=4), what Llama 3.x templates
 * print). Borrowed. A format reads only its own: chatml `defs`, Llama 3.1+ `defs_indent` (the
 * other may be NULL). */
typedef struct {
    const pgd_str *defs;        /* [n] */
    const pgd_str *defs_indent; /* [n] */
    size_t n;
} pgd_chat_tools;

/* How a family's template offers tools, and so how the model writes its calls. */
typedef enum {
    PGD_CHAT_TOOLS_NONE = 0,   /* no tool format: tools are refused */
    PGD_CHAT_TOOLS_HERMES,     /* chatml, qwen3, qwq: <tool_call>{"name": ..., "arguments": ...}
                                  </tool_call> */
    PGD_CHAT_TOOLS_LLAMA_JSON, /* Llama 3.1+: {"name": ..., "parameters": ...} as the answer */
} pgd_chat_tool_format;

typedef struct pgd_chat_template pgd_chat_template;

/* Recognise a template and build a renderer.
 *   jinja_src, len   the template source (tokenizer.chat_template); may be NULL (len 0) when
 *                    override_name is given.
 *   override_name    a family name that overrides detection, or NULL. When the source is also
 *                    given and is recognised as that same family, its variant details (default
 *                    system prompt, tools block braces, Gemma/Phi-3.5 system handling, Llama
 *                    3.1+) are still taken from it.
 *   bos_text/eos_text the text of the model's bos/eos tokens as the template's bos_token and
 *                    eos_token variables; NULL means "" (copied).
 * Errors (with a detail): PGD_EINVAL for an unknown override name; PGD_ENOTFOUND when there is
 * neither a template (NULL or only whitespace) nor an override; PGD_EUNSUPPORTED when the
 * template matches no family (the detail quotes its first ~80 characters and lists the known
 * names) or is a recognised family's variant whose rendering differs from the supported one
 * (the detail names it and suggests the override); PGD_ENOMEM.
 * On success the caller frees *out with pgd_chat_template_free; on failure *out is NULL. */
int pgd_chat_template_detect(const char *jinja_src, size_t len, const char *override_name,
                             const char *bos_text, const char *eos_text, pgd_chat_template **out);

/* Same, with the source read from the model's tokenizer.chat_template metadata (absent is fine
 * when override_name is given; otherwise PGD_ENOTFOUND saying the model has no chat template).
 * The template keeps no reference to g. */
int pgd_chat_template_from_gguf(const pgd_gguf *g, const char *override_name, const char *bos_text,
                                const char *eos_text, pgd_chat_template **out);

void pgd_chat_template_free(pgd_chat_template *t); /* NULL is fine */

pgd_chat_family pgd_chat_template_family(const pgd_chat_template *t);

/* The default system prompt a ChatML template inserts when messages[0] is not a system message
 * (e.g. SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face"), as a
 * view valid while t lives; {NULL, 0} when there is none. */
pgd_str pgd_chat_template_default_system(const pgd_chat_template *t);

/* A rendered prompt. text.data is NUL-terminated (text.len excludes the NUL). special[] lists
 * the byte ranges of text written by the template, sorted, non-empty, non-overlapping and
 * non-adjacent (touching ranges are merged); no range ever covers a byte of message content.
 * Role names written into headers count as template text (only known roles are accepted). */
typedef struct {
    pgd_buf text;
    pgd_span *special;
    size_t n_special;
} pgd_chat_prompt;

/* Render msgs[0..n) with the template, followed by the assistant header when
 * add_generation_prompt is true and the family has one (Llama-2 and Mistral have none: their
 * templates ignore the flag). *out is overwritten (its previous contents are not freed); on
 * success the caller frees it with pgd_chat_prompt_free, on failure it is left empty.
 * Errors: PGD_EINVAL (empty messages, NULL role, unknown role, roles that the family's template
 * refuses — e.g. not alternating user/assistant for llama2/mistral/gemma, a system message for
 * mistral — with the template's own wording in the detail), PGD_ENOMEM. */
int pgd_chat_render(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, pgd_chat_prompt *out);

/* Same, offering tools (NULL or n == 0: none, exactly pgd_chat_render). Only a template that
 * renders tools accepts them, tool calls and "tool" messages (pgd_chat_template_renders_tools);
 * others give PGD_EINVAL naming the family. Also PGD_EINVAL: tool calls on a message that is not
 * an assistant's. With chatml and tools, the system turn holds messages[0]'s content when it is
 * a system message, else the template's default system prompt, then the tools block; a
 * template without a default system prompt (plain ChatML) then writes the block alone, without
 * the blank line that would separate it from the system text. With Llama 3.1+ (the template's
 * raise_exception wording in the detail): tools with no message after a leading system one,
 * and an assistant message with more than one tool call, are PGD_EINVAL. */
int pgd_chat_render_tools(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                          const pgd_chat_tools *tools, bool add_generation_prompt,
                          pgd_chat_prompt *out);

/* What a render takes beyond the messages and the tools. Every family reads
 * add_generation_prompt; only qwen3 reads the others (its template's variables; Thinking-2507's
 * ignores enable_thinking), the rest ignore them. */
typedef struct {
    bool add_generation_prompt; /* end with the assistant header (as pgd_chat_render) */
    bool enable_thinking;       /* qwen3: false adds "<think>\n\n</think>\n\n" to the
                                   generation prompt (the template's enable_thinking, which
                                   clients pass in vLLM's chat_template_kwargs); default true */
    const pgd_str *reasoning;   /* NULL, or [n] parallel to the messages: an assistant
                                   message's reasoning_content (ptr NULL: it has none, and qwen3
                                   splits its content at </think> instead; ptr set, even with
                                   len 0: the reasoning, the content left whole). Borrowed. */
} pgd_chat_render_opts;

/* The defaults: a generation prompt, thinking enabled, no reasoning_content. */
#define PGD_CHAT_RENDER_OPTS_DEFAULT                                                               \
    ((pgd_chat_render_opts){                                                                       \
        .add_generation_prompt = true, .enable_thinking = true, .reasoning = NULL})

/* pgd_chat_render_tools with options (NULL: PGD_CHAT_RENDER_OPTS_DEFAULT); pgd_chat_render and
 * pgd_chat_render_tools are this with the defaults but add_generation_prompt. Same errors, and
 * PGD_EINVAL for a reasoning entry with a length but no text. */
int pgd_chat_render_with(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                         const pgd_chat_tools *tools, const pgd_chat_render_opts *opts,
                         pgd_chat_prompt *out);

/* Whether the template renders tools, tool calls and tool results, and in which format. */
pgd_chat_tool_format pgd_chat_template_tool_format(const pgd_chat_template *t);
bool pgd_chat_template_renders_tools(const pgd_chat_template *t); /* format != NONE */

void pgd_chat_prompt_free(pgd_chat_prompt *p); /* back to empty; NULL is fine */

#endif
