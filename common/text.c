/*
 * common/text.c — pgd_buf and small string helpers.
 */
#include "common/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int pgd_buf_reserve(pgd_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1) return PGD_ENOMEM;
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) return PGD_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int pgd_buf_append(pgd_buf *b, const void *data, size_t len) {
    int rc = pgd_buf_reserve(b, len);
    if (rc) return rc;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int pgd_buf_puts(pgd_buf *b, const char *s) {
    return pgd_buf_append(b, s, strlen(s));
}

int pgd_buf_vprintf(pgd_buf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return PGD_EINVAL;
    int rc = pgd_buf_reserve(b, (size_t)n);
    if (rc) return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int pgd_buf_printf(pgd_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = pgd_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void pgd_buf_reset(pgd_buf *b) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

void pgd_buf_free(pgd_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *pgd_buf_steal(pgd_buf *b, size_t *len) {
    if (!b->data && pgd_buf_reserve(b, 0)) return NULL;
    char *p = b->data;
    if (len) *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

int pgd_str_eq(pgd_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

int pgd_utf8_seq_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead < 0xC2) return 0; /* continuation byte or overlong lead */
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    if (lead < 0xF5) return 4;
    return 0;
}

int pgd_json_quote_py(const char *s, size_t n, pgd_buf *out) {
    static const char hex[] = "0123456789abcdef";
    if (pgd_buf_append(out, "\"", 1)) return PGD_ENOMEM;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        size_t k = 2;
        esc[0] = '\\';
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            if (c >= 0x20) continue;
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        }
        if (pgd_buf_append(out, s + run, i - run) || pgd_buf_append(out, esc, k)) return PGD_ENOMEM;
        run = i + 1;
    }
    if (pgd_buf_append(out, s + run, n - run) || pgd_buf_append(out, "\"", 1)) return PGD_ENOMEM;
    return 0;
}
