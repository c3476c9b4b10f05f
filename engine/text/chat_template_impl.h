/*
 * engine/text/chat_template_impl.h — what chat_template.c and the Qwen renderers
 * (chat_template_qwen.c) share: the template object, detection's variant record, the render
 * state and the helpers that write into it. Internal to engine/text/chat_template*.c.
 *
 * Every byte of a prompt goes through put(): template text (tmpl) extends the `special` span
 * list, message content (put_content) does not.
 */
#ifndef PGD_ENGINE_CHAT_TEMPLATE_IMPL_H
#define PGD_ENGINE_CHAT_TEMPLATE_IMPL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/chat_template.h"

#define DATE_CAP 32 /* a date_string literal, NUL included */

struct pgd_chat_template {
    pgd_chat_family family;
    char *bos, *eos; /* NUL-terminated copies ("" when not given) */
    size_t bos_len, eos_len;
    char *default_system; /* ChatML: inserted when messages[0] is not system; NULL if none */
    size_t default_system_len;
    bool use_bos;           /* the template writes bos_token (families that place one) */
    bool refuse_system;     /* Gemma-1/2: raise_exception('System role not supported') */
    bool skip_empty_system; /* Phi-3.5: `message['role'] == 'system' and message['content']` */
    bool double_brace;      /* chatml: the tools block says {{"name": ...}} (Qwen2.5's GGUF) */
    bool dated;             /* llama3: Meta's Llama 3.1+ template (dated header, JSON tools) */
    bool date_today;        /* dated: date_string = strftime_now("%d %b %Y") */
    char date[DATE_CAP];    /* dated without strftime_now: the source's fixed date_string */
    bool think_always;      /* qwen3: the generation prompt opens <think> (Thinking-2507) */
};

/* What detection learned from a source: the family and its variant details. */
typedef struct {
    pgd_chat_family family;
    char *default_system; /* malloc'd, or NULL */
    size_t default_system_len;
    bool use_bos, refuse_system, skip_empty_system, double_brace, dated, date_today, think_always;
    char date[DATE_CAP];
} variant;

static inline bool has(const char *src, size_t len, const char *needle) {
    return memmem(src, len, needle, strlen(needle)) != NULL;
}

/* A run of text to emit: template text (special) or message content. */
typedef struct {
    const char *p;
    size_t n;
    bool tmpl;
} piece;

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

typedef struct {
    pgd_buf text;
    pgd_span *sp;
    size_t n_sp, cap_sp;
    const char *content; /* all contents, joined: message i is content[off[i] .. off[i+1]) */
    size_t *off;
    int *role;
    size_t n;
    const pgd_chat_msg *msgs;    /* the messages (for their tool calls) */
    const pgd_chat_tools *tools; /* offered tools, NULL when none (never n == 0) */
    const pgd_str *reasoning;    /* [n] reasoning_content (ptr NULL: none), or NULL */
    bool thinking;               /* enable_thinking */
} render;

static inline int put(render *r, const char *s, size_t n, bool tmpl) {
    if (n == 0) return 0;
    size_t at = r->text.len;
    int rc = pgd_buf_append(&r->text, s, n);
    if (rc) return rc;
    if (!tmpl) return 0;
    if (r->n_sp && r->sp[r->n_sp - 1].end == at) {
        r->sp[r->n_sp - 1].end = at + n;
        return 0;
    }
    if (r->n_sp == r->cap_sp) {
        size_t cap = r->cap_sp ? r->cap_sp * 2 : 16;
        pgd_span *p = realloc(r->sp, cap * sizeof *p);
        if (!p) return PGD_ENOMEM;
        r->sp = p;
        r->cap_sp = cap;
    }
    r->sp[r->n_sp].begin = at;
    r->sp[r->n_sp].end = at + n;
    r->n_sp++;
    return 0;
}

static inline int tmpl(render *r, const char *s) {
    return put(r, s, strlen(s), true);
}

static inline piece content_of(const render *r, size_t i) {
    piece p = {r->content + r->off[i], r->off[i + 1] - r->off[i], false};
    return p;
}

static inline int put_content(render *r, piece p) {
    return put(r, p.p, p.n, false);
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) return rc_;                                                                       \
    } while (0)

/* chat_template.c: detection helpers (see there). */
int pgd_ct_find_default_system(const char *src, size_t len, variant *v);
int pgd_ct_unsupported_variant(const char *what, pgd_chat_family f);

/* chat_template.c: the ChatML pieces Qwen's templates share with Qwen2.5's. */
int pgd_ct_chatml_system(const pgd_chat_template *t, render *r, size_t *first);
int pgd_ct_chatml_turn(render *r, size_t i);
int pgd_ct_chatml_tool_result(render *r, size_t i);
int pgd_ct_hermes_call(render *r, const pgd_chat_tool_call *c);

/* chat_template_qwen.c: a ChatML source with reasoning markers (<think>, last_query_index):
 * Qwen3's templates (family qwen3) or QwQ's (family qwq), else PGD_EUNSUPPORTED (PGD_ENOMEM). */
int pgd_ct_classify_qwen(const char *src, size_t len, variant *v);

/* chat_template_qwen.c: the renderers of families qwen3 and qwq. */
int pgd_ct_render_qwen3(const pgd_chat_template *t, render *r, bool gen);
int pgd_ct_render_qwq(const pgd_chat_template *t, render *r, bool gen);

#endif
