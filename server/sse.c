/*
 * server/sse.c — Server-Sent Events framing; see server/sse.h.
 *
 * Threading: no shared state.
 */
#include "server/sse.h"

#include <string.h>

#include "common/error.h"

/* Appends `prefix` + line + "\n" for each line of data[0, len): n line breaks give n + 1 lines
 * (an empty payload gives one empty line). */
static int append_lines(pgd_buf *out, const char *prefix, const char *data, size_t len) {
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r') j++;
        if (pgd_buf_puts(out, prefix) || pgd_buf_append(out, data + i, j - i) ||
            pgd_buf_append(out, "\n", 1))
            return PGD_ENOMEM;
        if (j >= len) return 0;
        if (data[j] == '\r' && j + 1 < len && data[j + 1] == '\n') j++;
        i = j + 1;
    }
}

int pgd_sse_event(pgd_buf *out, const char *event, const char *data, size_t len) {
    size_t len0 = out->len;
    if (event && strpbrk(event, "\r\n"))
        return pgd_error_set(PGD_EINVAL, "sse: line break in event name");
    if (event &&
        (pgd_buf_puts(out, "event: ") || pgd_buf_puts(out, event) || pgd_buf_append(out, "\n", 1)))
        goto fail;
    if (append_lines(out, "data: ", data ? data : "", data ? len : 0) ||
        pgd_buf_append(out, "\n", 1))
        goto fail;
    return 0;
fail:
    out->len = len0;
    return PGD_ENOMEM;
}

int pgd_sse_comment(pgd_buf *out, const char *text) {
    size_t len0 = out->len;
    if (append_lines(out, ": ", text ? text : "", text ? strlen(text) : 0) ||
        pgd_buf_append(out, "\n", 1)) {
        out->len = len0;
        return PGD_ENOMEM;
    }
    return 0;
}
