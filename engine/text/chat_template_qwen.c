/*
 * engine/text/chat_template_qwen.c — Qwen's reasoning ChatML templates: detection and rendering
 * of families qwen3 (Qwen3's hybrid-thinking template and the Thinking-2507 one) and qwq
 * (QwQ-32B's). See chat_template.h for what each renders; the published texts are in
 * tests/reference/templates/ (qwen3.jinja, qwen3-thinking-2507.jinja, qwq-32b.jinja).
 *
 * Detection requires every marker of a published template (the Jinja source as it spells them;
 * \\n is the two characters of the escape inside a Jinja literal) and refuses what would render
 * differently, so an edited template is never rendered as a published one.
 *
 * Threading: pure functions of their arguments.
 */
#include <string.h>

#include "engine/text/chat_template_impl.h"

/* ---- detection --------------------------------------------------------------------------- */

/* The markers of Qwen3's templates (the hybrid one of April 2025 — also its later revision with
 * `is string` checks — and Thinking-2507's), but for the generation prompt: a ChatML source with
 * "last_query_index" must hold them all. */
static const char *const k_qwen3_markers[] = {
    "namespace(multi_step_tool=true, last_query_index=messages|length - 1)",
    ("message.content.startswith('<tool_response>') and "
     "message.content.endswith('</tool_response>')"),
    "(message.role == \"user\") or (message.role == \"system\" and not loop.first)",
    "'<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n'",
    "messages[0].content + '\\n\\n'",
    ("\"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
     "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\""),
    ("\"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
     "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "
     "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\""),
    "reasoning_content",
    "split('</think>')[-1].lstrip('\\n')",
    "split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n')",
    "loop.index0 > ns.last_query_index",
    "loop.last or (not loop.last and reasoning_content)",
    "'\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + "
    "content.lstrip('\\n')",
    "(loop.first and content) or (not loop.first)",
    "'<tool_call>\\n{\"name\": \"'",
    "'\", \"arguments\": '",
    "tool_call.arguments is string",
    "'}\\n</tool_call>'",
    "'\\n<tool_response>\\n'",
    "'\\n</tool_response>'",
};

/* The hybrid template's generation prompt (enable_thinking false closes an empty block). */
static const char *const k_qwen3_hybrid_markers[] = {
    "enable_thinking is defined and enable_thinking is false",
    "'<think>\\n\\n</think>\\n\\n'",
};

/* Thinking-2507's generation prompt, which always opens the block (no enable_thinking). */
static const char k_qwen3_think_always[] = "{%- if add_generation_prompt %}\n"
                                           "    {{- '<|im_start|>assistant\\n<think>\\n' }}\n"
                                           "{%- endif %}";

/* The markers of QwQ-32B's published template. */
static const char *const k_qwq_markers[] = {
    "{{- messages[0]['content'] }}",
    "{{- '' }}",
    ("\"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query."
     "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n"
     "<tools>\""),
    ("\"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
     "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "
     "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\""),
    "'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n'",
    "(message.role == \"user\") or (message.role == \"system\" and not loop.first)",
    "'<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n'",
    "message.role == \"assistant\" and not message.tool_calls",
    "'<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n'",
    "{%- if message.content %}\n            {{- '\\n' + content }}",
    "'\\n<tool_call>\\n{\"name\": \"'",
    "'\", \"arguments\": '",
    "{{- tool_call.arguments | tojson }}",
    "'}\\n</tool_call>'",
    "(loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\")",
    "'\\n<tool_response>\\n'",
    "'\\n</tool_response>'",
    "loop.last or (messages[loop.index0 + 1].role != \"tool\")",
    k_qwen3_think_always,
};

/* Both assistant branches of QwQ's template drop the reasoning of all but the last message. */
static const char k_qwq_split[] = "{%- if not loop.last %}\n"
                                  "            {%- set content = "
                                  "message.content.split('</think>')[-1].lstrip('\\n') %}";

static size_t count(const char *src, size_t len, const char *needle) {
    size_t k = 0, nl = strlen(needle);
    for (const char *at = src, *end = src + len; (at = memmem(at, (size_t)(end - at), needle, nl));
         at += nl)
        k++;
    return k;
}

static bool has_all(const char *src, size_t len, const char *const *m, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!has(src, len, m[i])) return false;
    return true;
}

int pgd_ct_classify_qwen(const char *src, size_t len, variant *v) {
    static const char what[] = "a reasoning (<think>) ChatML template other than the published "
                               "ones of Qwen3, Qwen3-Thinking-2507 and QwQ-32B (an edited one)";
    if (!has(src, len, "last_query_index")) { /* QwQ's, or none */
        v->family = PGD_CHAT_QWQ;
        if (!has_all(src, len, k_qwq_markers, PGD_ARRAY_LEN(k_qwq_markers)) ||
            count(src, len, k_qwq_split) != 2 || has(src, len, "raise_exception") ||
            has(src, len, "enable_thinking") || has(src, len, "reasoning_content"))
            return pgd_ct_unsupported_variant(what, v->family);
        return 0;
    }
    v->family = PGD_CHAT_QWEN3;
    if (!has_all(src, len, k_qwen3_markers, PGD_ARRAY_LEN(k_qwen3_markers)) ||
        has(src, len, "raise_exception"))
        return pgd_ct_unsupported_variant(what, v->family);
    if (has(src, len, k_qwen3_think_always)) {
        if (has(src, len, "enable_thinking")) return pgd_ct_unsupported_variant(what, v->family);
        v->think_always = true;
    } else if (!has_all(src, len, k_qwen3_hybrid_markers, PGD_ARRAY_LEN(k_qwen3_hybrid_markers)) ||
               has(src, len, "<|im_start|>assistant\\n<think>")) {
        return pgd_ct_unsupported_variant(what, v->family);
    }
    int rc = pgd_ct_find_default_system(src, len, v);
    if (!rc && v->default_system) rc = pgd_ct_unsupported_variant(what, v->family);
    return rc;
}

/* ---- rendering --------------------------------------------------------------------------- */

/* Qwen3: the last occurrence of needle in p, or NULL. */
static const char *last_of(piece p, const char *needle) {
    size_t nl = strlen(needle);
    const char *found = NULL, *at = p.p, *end = p.p + p.n;
    while (at < end && (at = memmem(at, (size_t)(end - at), needle, nl))) found = at++;
    return found;
}

/* Python's s.lstrip('\n') / s.rstrip('\n') on a piece. */
static piece lstrip_nl(piece p) {
    while (p.n && p.p[0] == '\n') p.p++, p.n--;
    return p;
}

static piece rstrip_nl(piece p) {
    while (p.n && p.p[p.n - 1] == '\n') p.n--;
    return p;
}

static bool starts_with(piece p, const char *s) {
    size_t n = strlen(s);
    return p.n >= n && !memcmp(p.p, s, n);
}

static bool ends_with(piece p, const char *s) {
    size_t n = strlen(s);
    return p.n >= n && !memcmp(p.p + p.n - n, s, n);
}

/* Qwen3's last_query_index: the last "user" message whose content is not a tool result the
 * client wrapped itself (startswith('<tool_response>') and endswith('</tool_response>')),
 * else the last message. */
static size_t qwen3_last_query(const render *r) {
    for (size_t i = r->n; i-- > 0;) {
        piece c = content_of(r, i);
        if (r->role[i] == ROLE_USER &&
            !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>")))
            return i;
    }
    return r->n - 1;
}

/* Qwen3's hybrid-thinking template, statement by statement:
 *   the system turn as chatml's (no default system prompt; single braces in the tools block);
 *   ns.last_query_index (qwen3_last_query); then each message:
 *   user, later system: a plain turn (pgd_ct_chatml_turn); tool: pgd_ct_chatml_tool_result;
 *   assistant: content = message.content; reasoning_content = message.reasoning_content when
 *     given, else if '</think>' in content: content = content.split('</think>')[-1].lstrip('\n'),
 *     reasoning = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1]
 *     .lstrip('\n'); else ''.
 *     {% if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
 *       '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' +
 *       content.lstrip('\n') {% else %} '<|im_start|>assistant\n' + content {% endif %};
 *     for each tool call: '\n' unless it is the first and content is empty, then the call
 *     (pgd_ct_hermes_call: the caller's text is the template's tojson branch; a string it would
 * print as given); then '<|im_end|>\n';
 *   {% if add_generation_prompt %} '<|im_start|>assistant\n' + ('<think>\n\n</think>\n\n' if
 *   enable_thinking is false); Thinking-2507's: '<|im_start|>assistant\n<think>\n' always.
 * The <think> markers the template writes are template text; the reasoning is content (and so
 * are the markers of a content it splits, which are dropped). */
int pgd_ct_render_qwen3(const pgd_chat_template *t, render *r, bool gen) {
    size_t first, last_query = qwen3_last_query(r);
    TRY(pgd_ct_chatml_system(t, r, &first));
    for (size_t i = first; i < r->n; i++) {
        const pgd_chat_msg *m = &r->msgs[i];
        if (r->role[i] == ROLE_TOOL) {
            TRY(pgd_ct_chatml_tool_result(r, i));
            continue;
        }
        if (r->role[i] != ROLE_ASSISTANT) {
            TRY(pgd_ct_chatml_turn(r, i));
            continue;
        }
        piece content = content_of(r, i), reasoning = {"", 0, false};
        const char *end_think;
        if (r->reasoning && r->reasoning[i].ptr) {
            reasoning = (piece){r->reasoning[i].ptr, (size_t)r->reasoning[i].len, false};
        } else if ((end_think = memmem(content.p, content.n, "</think>", 8))) {
            const char *after = last_of(content, "</think>") + 8;
            reasoning = rstrip_nl((piece){content.p, (size_t)(end_think - content.p), false});
            const char *open = last_of(reasoning, "<think>");
            if (open) {
                reasoning.n -= (size_t)(open + 7 - reasoning.p);
                reasoning.p = open + 7;
            }
            reasoning = lstrip_nl(reasoning);
            content = lstrip_nl((piece){after, (size_t)(content.p + content.n - after), false});
        }
        TRY(tmpl(r, "<|im_start|>assistant\n"));
        if (i > last_query && (i + 1 == r->n || reasoning.n)) {
            TRY(tmpl(r, "<think>\n"));
            TRY(put_content(r, rstrip_nl(lstrip_nl(reasoning))));
            TRY(tmpl(r, "\n</think>\n\n"));
            TRY(put_content(r, lstrip_nl(content)));
        } else {
            TRY(put_content(r, content));
        }
        for (size_t c = 0; c < m->n_calls; c++) {
            if (c || content.n) TRY(tmpl(r, "\n"));
            TRY(pgd_ct_hermes_call(r, &m->calls[c]));
        }
        TRY(tmpl(r, "<|im_end|>\n"));
    }
    if (gen)
        TRY(tmpl(r, t->think_always ? "<|im_start|>assistant\n<think>\n"
                    : r->thinking   ? "<|im_start|>assistant\n"
                                    : "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    return 0;
}

/* QwQ-32B's template, statement by statement:
 *   the system turn as chatml's, but with tools the block always starts with its "\n\n" (after
 *   messages[0]'s content, or after nothing);
 *   user, later system: a plain turn (pgd_ct_chatml_turn); tool: pgd_ct_chatml_tool_result;
 *   assistant: content = message.content, and for all but the last message
 *     content.split('</think>')[-1].lstrip('\n') (the text after the last "</think>", or the
 *     whole content, newlines trimmed at its start);
 *     without tool_calls: '<|im_start|>assistant\n' + content + '<|im_end|>\n';
 *     with them: '<|im_start|>assistant' + ('\n' + content if message.content, the unsplit one,
 *     is not empty) + for each call '\n' + the call (pgd_ct_hermes_call; the arguments' tojson is
 *     the caller's text) + '<|im_end|>\n';
 *   {% if add_generation_prompt %} '<|im_start|>assistant\n<think>\n'. */
int pgd_ct_render_qwq(const pgd_chat_template *t, render *r, bool gen) {
    size_t first;
    TRY(pgd_ct_chatml_system(t, r, &first));
    for (size_t i = first; i < r->n; i++) {
        const pgd_chat_msg *m = &r->msgs[i];
        if (r->role[i] == ROLE_TOOL) {
            TRY(pgd_ct_chatml_tool_result(r, i));
            continue;
        }
        if (r->role[i] != ROLE_ASSISTANT) {
            TRY(pgd_ct_chatml_turn(r, i));
            continue;
        }
        piece whole = content_of(r, i), content = whole;
        if (i + 1 < r->n) {
            const char *end_think = last_of(whole, "</think>");
            if (end_think) {
                content.p = end_think + 8;
                content.n = (size_t)(whole.p + whole.n - content.p);
            }
            content = lstrip_nl(content);
        }
        if (!m->n_calls) {
            TRY(tmpl(r, "<|im_start|>assistant\n"));
            TRY(put_content(r, content));
            TRY(tmpl(r, "<|im_end|>\n"));
            continue;
        }
        TRY(tmpl(r, "<|im_start|>assistant"));
        if (whole.n) {
            TRY(tmpl(r, "\n"));
            TRY(put_content(r, content));
        }
        for (size_t c = 0; c < m->n_calls; c++) {
            TRY(tmpl(r, "\n"));
            TRY(pgd_ct_hermes_call(r, &m->calls[c]));
        }
        TRY(tmpl(r, "<|im_end|>\n"));
    }
    if (gen) TRY(tmpl(r, "<|im_start|>assistant\n<think>\n"));
    return 0;
}
