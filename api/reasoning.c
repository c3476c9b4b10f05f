/*
 * api/reasoning.c — the reasoning / content split of a model's output (api/reasoning.h).
 */
#include "api/reasoning.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define OPEN_LEN  (sizeof PGD_REASONING_OPEN - 1)
#define CLOSE_LEN (sizeof PGD_REASONING_CLOSE - 1)

enum {
    R_START, /* nothing but whitespace yet: a "<think>" may still open the output */
    R_IN,    /* in the reasoning */
    R_AFTER, /* just after "</think>": newlines are dropped */
    R_OUT,   /* content, to the end */
};

struct pgd_reasoning_parser {
    int state;
    bool lead; /* R_IN: nothing of the reasoning shown yet (its leading newlines go) */
    bool seen;
    pgd_buf hold; /* undecided text */
};

int pgd_reasoning_parser_new(bool inside, pgd_reasoning_parser **out) {
    pgd_reasoning_parser *p = calloc(1, sizeof *p);
    if (!p) return PGD_ENOMEM;
    p->state = inside ? R_IN : R_START;
    p->lead = p->seen = inside;
    *out = p;
    return 0;
}

void pgd_reasoning_parser_free(pgd_reasoning_parser *p) {
    if (!p) return;
    pgd_buf_free(&p->hold);
    free(p);
}

bool pgd_reasoning_parser_seen(const pgd_reasoning_parser *p) {
    return p->seen;
}

bool pgd_reasoning_parser_thinking(const pgd_reasoning_parser *p) {
    return p->state == R_IN;
}

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Drops the first k bytes of the held text. */
static void consume(pgd_reasoning_parser *p, size_t k) {
    memmove(p->hold.data, p->hold.data + k, p->hold.len - k);
    p->hold.len -= k;
}

/* The longest suffix of s[n] that is a proper prefix of the closing tag. */
static size_t partial_close(const char *s, size_t n) {
    for (size_t k = n < CLOSE_LEN - 1 ? n : CLOSE_LEN - 1; k > 0; k--)
        if (!memcmp(s + n - k, PGD_REASONING_CLOSE, k)) return k;
    return 0;
}

/* Decides as much of the held text as can be. */
static int scan(pgd_reasoning_parser *p, pgd_buf *reasoning, pgd_buf *content) {
    for (;;) {
        const char *h = p->hold.data;
        size_t n = p->hold.len, i = 0;
        if (!n) return 0;
        switch (p->state) {
        case R_START: {
            while (i < n && is_ws(h[i])) i++;
            size_t m = n - i;
            if (!m) return 0;
            if (m >= OPEN_LEN && !memcmp(h + i, PGD_REASONING_OPEN, OPEN_LEN)) {
                consume(p, i + OPEN_LEN);
                p->state = R_IN;
                p->lead = p->seen = true;
                continue;
            }
            if (m < OPEN_LEN && !memcmp(h + i, PGD_REASONING_OPEN, m)) return 0;
            p->state = R_OUT;
            continue;
        }
        case R_IN: {
            if (p->lead) {
                while (i < n && h[i] == '\n') i++;
                consume(p, i);
                if (!p->hold.len) return 0;
                p->lead = false;
                continue;
            }
            const char *at = memmem(h, n, PGD_REASONING_CLOSE, CLOSE_LEN);
            size_t end = at ? (size_t)(at - h) : n - partial_close(h, n);
            size_t text = end;
            while (text && h[text - 1] == '\n') text--; /* they may end the reasoning */
            if (pgd_buf_append(reasoning, h, text)) return PGD_ENOMEM;
            if (!at) {
                consume(p, text);
                return 0;
            }
            consume(p, end + CLOSE_LEN);
            p->state = R_AFTER;
            continue;
        }
        case R_AFTER:
            while (i < n && h[i] == '\n') i++;
            consume(p, i);
            if (!p->hold.len) return 0;
            p->state = R_OUT;
            continue;
        default: /* R_OUT */
            if (pgd_buf_append(content, h, n)) return PGD_ENOMEM;
            pgd_buf_reset(&p->hold);
            return 0;
        }
    }
}

int pgd_reasoning_parser_feed(pgd_reasoning_parser *p, const char *s, size_t n, pgd_buf *reasoning,
                              pgd_buf *content) {
    if (n && pgd_buf_append(&p->hold, s, n)) return PGD_ENOMEM;
    return scan(p, reasoning, content);
}

int pgd_reasoning_parser_end(pgd_reasoning_parser *p, pgd_buf *reasoning, pgd_buf *content) {
    int rc = scan(p, reasoning, content);
    if (rc || !p->hold.len) return rc;
    const char *h = p->hold.data;
    size_t n = p->hold.len;
    if (p->state == R_START) {
        rc = pgd_buf_append(content, h, n);
    } else if (p->state == R_IN) { /* cut inside the reasoning: a partial tag is text */
        while (n && h[n - 1] == '\n') n--;
        rc = pgd_buf_append(reasoning, h, n);
    }
    pgd_buf_reset(&p->hold);
    return rc;
}

bool pgd_reasoning_prompt_open(const char *prompt, size_t len) {
    size_t from = 0; /* just after the last "</think>" */
    for (const char *at; (at = memmem(prompt + from, len - from, PGD_REASONING_CLOSE, CLOSE_LEN));)
        from = (size_t)(at - prompt) + CLOSE_LEN;
    return memmem(prompt + from, len - from, PGD_REASONING_OPEN, OPEN_LEN) != NULL;
}
