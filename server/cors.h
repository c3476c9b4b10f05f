/*
 * server/cors.h — cross-origin requests (CORS): which browser pages on other origins may call
 * the API (`--allowed-origins`), and the headers that let them.
 *
 * A page served from another origin (an app on http://localhost:3000, a hosted chat UI) may
 * read the server's answers only when they say so: Access-Control-Allow-Origin on every
 * response, and for a request a browser "preflights" (any request with an Authorization header
 * or a JSON body) an answer to its OPTIONS request first. With no list — the default — no
 * response carries these headers and browsers keep other origins out; the server's own page
 * (GET /) is same-origin and needs none. The list is exact origins ("https://chat.example.com",
 * "http://localhost:3000") or "*" for any. CORS is not access control (a non-browser client
 * sends what Origin it likes): keys are checked as ever, on the request that follows the
 * preflight. Credentials (cookies, a browser's cached Basic login) are never allowed across
 * origins; a page sends its key in an Authorization header it sets itself.
 *
 * Threading: created before the server starts, read-only after; any thread may read it.
 */
#ifndef PGD_SERVER_CORS_H
#define PGD_SERVER_CORS_H

#include <stdbool.h>

typedef struct pgd_cors pgd_cors;

/* The allowed origins from `list`: comma-separated, spaces around entries ignored; each "*" or
 * an origin "http[s]://host[:port]" (no path, no trailing '/'; matched case-insensitively, as
 * scheme and host are). NULL or an empty list: *out = NULL (CORS off). 0, PGD_EINVAL (a bad
 * entry, named in pgd_error_detail()) or PGD_ENOMEM. */
int pgd_cors_create(const char *list, pgd_cors **out);
void pgd_cors_destroy(pgd_cors *c); /* NULL is a no-op */

/* Whether a page of `origin` (a request's Origin header) may read the answers; false for NULL
 * arguments. */
bool pgd_cors_allows(const pgd_cors *c, const char *origin);

/* Access-Control-Allow-Origin's value for an allowed origin: "*" when any origin is allowed
 * (then the answer does not vary with Origin), else `origin` itself. */
const char *pgd_cors_allow_origin(const pgd_cors *c, const char *origin);

/* Whether `s` (Access-Control-Request-Headers) is a list of header names (tokens, commas and
 * spaces; at most 1,024 bytes) that a preflight may echo back as Access-Control-Allow-Headers. */
bool pgd_cors_header_list_ok(const char *s);

#endif
