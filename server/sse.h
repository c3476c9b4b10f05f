/*
 * server/sse.h — Server-Sent Events framing (the text/event-stream format), pure functions.
 *
 * An event is an optional "event: NAME" line, one "data: LINE" line per line of the payload
 * (a payload's line breaks — \n, \r\n or \r — start new data lines, so a client rebuilds the
 * payload joined with \n), and an empty line that dispatches it. A comment line starts with
 * ':' and is ignored by clients; the HTTP transport uses ": ping" as a keepalive.
 *
 * Threading: no shared state.
 */
#ifndef PGD_SERVER_SSE_H
#define PGD_SERVER_SSE_H

#include <stddef.h>

#include "common/text.h"

/* The last event of an OpenAI stream. */
#define PGD_SSE_DONE "data: [DONE]\n\n"

/* Appends one event: `event` may be NULL (no event line; it must not contain a line break);
 * `data` holds `len` bytes. 0, PGD_EINVAL (line break in `event`) or PGD_ENOMEM; on failure
 * `out` is left as it was. */
int pgd_sse_event(pgd_buf *out, const char *event, const char *data, size_t len);

/* Appends a comment ": TEXT\n\n" (line breaks in `text` start new comment lines). */
int pgd_sse_comment(pgd_buf *out, const char *text);

#endif
