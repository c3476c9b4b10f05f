/*
 * api/error.c — OpenAI error bodies and the status/type tables.
 */
#include "api/error.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "api/jsonutil.h"
#include "common/error.h"

const char *pgd_api_error_type(int status) {
    /* As OpenAI answers: a bad key (401, code invalid_api_key) and an unknown model (404, code
     * model_not_found) are invalid_request_error too; the code tells them apart. */
    switch (status) {
    case 403:
        return "permission_error";
    case 429:
        return "rate_limit_error";
    default:
        break;
    }
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

int pgd_api_status_for_code(int pgd_code) {
    switch (pgd_code) {
    case PGD_EINVAL:
    case PGD_ERANGE:
    case PGD_EUNSUPPORTED:
    case PGD_EFORMAT:
        return 400;
    case PGD_ENOTFOUND:
        return 404;
    case PGD_EFULL:
    case PGD_EAGAIN:
    case PGD_ESHUTDOWN:
    case PGD_ENOBLOCKS:
    case PGD_EDEVLOST:
        return 503;
    default:
        return 500;
    }
}

static void copy_field(char *dst, size_t cap, const char *src) {
    if (!src) src = "";
    snprintf(dst, cap, "%s", src);
}

int pgd_api_error_vset(pgd_api_error *e, int status, const char *param, const char *code,
                       const char *fmt, va_list ap) {
    e->status = status;
    e->type[0] = '\0';
    copy_field(e->param, sizeof e->param, param);
    copy_field(e->code, sizeof e->code, code);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return status >= 500 ? PGD_EIO : PGD_EINVAL;
}

int pgd_api_error_set(pgd_api_error *e, int status, const char *param, const char *code,
                      const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = pgd_api_error_vset(e, status, param, code, fmt, ap);
    va_end(ap);
    return rc;
}

int pgd_api_error_unauthorized(pgd_api_error *e) {
    return pgd_api_error_set(e, 401, NULL, "invalid_api_key",
                             "Incorrect or missing API key: send it as 'Authorization: Bearer "
                             "<key>'");
}

int pgd_api_error_model_not_found(pgd_api_error *e, const char *model, size_t model_len) {
    /* the message goes through jansson later, which needs UTF-8: repair the name now */
    pgd_buf b = PGD_BUF_INIT;
    size_t shown = model_len > 200 ? 200 : model_len;
    while (shown > 0 && shown < model_len && ((unsigned char)model[shown] & 0xC0) == 0x80) shown--;
    int rc = pgd_api_utf8_sanitize(model ? model : "", model ? shown : 0, &b);
    rc = pgd_api_error_set(e, 404, "model", "model_not_found", "The model '%.*s%s' does not exist",
                           rc ? 0 : (int)b.len, b.data ? b.data : "",
                           shown < model_len ? "..." : "");
    pgd_buf_free(&b);
    return rc;
}

int pgd_api_error_route_not_found(pgd_api_error *e, const char *method, const char *path) {
    return pgd_api_error_set(e, 404, NULL, NULL, "Unknown route: %.16s %.200s", method, path);
}

int pgd_api_error_method_not_allowed(pgd_api_error *e, const char *method, const char *path) {
    return pgd_api_error_set(e, 405, NULL, NULL, "Method %.16s is not allowed for %.200s", method,
                             path);
}

static json_t *opt_str(const char *s) {
    return s[0] ? pgd__api_jstr(s, strlen(s)) : json_null();
}

int pgd_api_error_body(const pgd_api_error *e, pgd_buf *out) {
    int rc = PGD_ENOMEM;
    json_t *root = json_object(), *err = json_object();
    if (!root || !err) {
        json_decref(err);
        goto fail;
    }
    if (pgd__api_set(root, "error", err)) goto fail;
    const char *type = e->type[0] ? e->type : pgd_api_error_type(e->status);
    /* the message may have been cut inside a character by the fixed buffer: jstr repairs it */
    if (pgd__api_set(err, "message",
                     pgd__api_jstr(e->message, strnlen(e->message, sizeof e->message))) ||
        pgd__api_set(err, "type", pgd__api_jstr(type, strlen(type))) ||
        pgd__api_set(err, "param", opt_str(e->param)) ||
        pgd__api_set(err, "code", opt_str(e->code)))
        goto fail;
    rc = pgd__api_dump(root, out);
fail:
    json_decref(root);
    return rc;
}

int pgd_api_error_sse(const pgd_api_error *e, pgd_buf *out) {
    size_t before = out->len;
    int rc = pgd_buf_puts(out, "data: ");
    if (!rc) rc = pgd_api_error_body(e, out);
    if (!rc) rc = pgd_buf_puts(out, "\n\n");
    if (rc) {
        out->len = before;
        if (out->data) out->data[before] = '\0';
    }
    return rc;
}

int pgd__api_oom(pgd_api_error *e) {
    pgd_api_error_set(e, 500, NULL, NULL, "Out of memory while parsing the request");
    return PGD_ENOMEM;
}
