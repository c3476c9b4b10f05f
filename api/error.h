/*
 * api/error.h — OpenAI-shaped error responses: {"error":{"message","type","param","code"}}.
 *
 * Owns: pgd_api_error (plain data: HTTP status, message, param, code, optional type override),
 * the HTTP status -> error "type" table, the mapping from PGD_E* codes to HTTP statuses, and
 * the error body both as a response body and as an SSE event for errors after a stream began.
 *
 * Status -> type (one table, pgd_api_error_type): 400/405/413/422 and other 4xx
 * "invalid_request_error" (including 401 with code "invalid_api_key" and 404 with code
 * "model_not_found", as OpenAI answers them), 403 "permission_error", 429 "rate_limit_error",
 * 5xx "server_error".
 * "param" and "code" are JSON null when empty.
 *
 * Threading: pure functions, no shared state.
 */
#ifndef PGD_API_ERROR_H
#define PGD_API_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "common/text.h"

typedef struct pgd_api_error {
    int status;        /* HTTP status (400, 401, 404, ...) */
    char type[48];     /* "" = by status (pgd_api_error_type) */
    char param[128];   /* "" = null; e.g. "temperature", "messages[1].content" */
    char code[64];     /* "" = null; e.g. "invalid_api_key", "model_not_found" */
    char message[512]; /* human readable, names the parameter and the allowed values */
} pgd_api_error;

/* The OpenAI error type for an HTTP status (never NULL; see the table above). */
const char *pgd_api_error_type(int status);

/* The HTTP status for a PGD_E* code: EINVAL/ERANGE/EUNSUPPORTED/EFORMAT 400, ENOTFOUND 404,
 * EFULL/EAGAIN/ESHUTDOWN/ENOBLOCKS 503, everything else (ENOMEM, EIO, ECUDA, ...) 500. */
int pgd_api_status_for_code(int pgd_code);

/* Fills *e (param and code may be NULL; type by status) and returns PGD_EINVAL for statuses
 * below 500, PGD_EIO otherwise, so parsers can `return pgd_api_error_set(...)`. The message is
 * truncated to fit. */
int pgd_api_error_set(pgd_api_error *e, int status, const char *param, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int pgd_api_error_vset(pgd_api_error *e, int status, const char *param, const char *code,
                       const char *fmt, va_list ap);

/* Common errors: 401 "invalid_api_key"; 404 "model_not_found" (param "model"); 404 for a
 * route (code null); 405 for a method. The model name may be any bytes (it is sanitized). */
int pgd_api_error_unauthorized(pgd_api_error *e);
int pgd_api_error_model_not_found(pgd_api_error *e, const char *model, size_t model_len);
int pgd_api_error_route_not_found(pgd_api_error *e, const char *method, const char *path);
int pgd_api_error_method_not_allowed(pgd_api_error *e, const char *method, const char *path);

/* Internal to api/: *e a 500 "out of memory" while reading a request; PGD_ENOMEM. */
int pgd__api_oom(pgd_api_error *e);

/* Appends the error body {"error":{"message","type","param","code"}} (JSON text, no newline).
 * 0 or PGD_ENOMEM. */
int pgd_api_error_body(const pgd_api_error *e, pgd_buf *out);

/* Appends the SSE event for an error after a stream started: "data: <error body>\n\n". (The
 * OpenAI SDKs raise an APIError for a data event whose JSON has an "error" member.) The server
 * then ends the stream, normally with "data: [DONE]\n\n". */
int pgd_api_error_sse(const pgd_api_error *e, pgd_buf *out);

#endif
