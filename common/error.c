/*
 * common/error.c — error strings and the thread-local error detail.
 */
#include "common/error.h"

#include <stdarg.h>
#include <string.h>

static const char *const k_errstr[PGD_E__COUNT] = {
    [0] = "success",          [1] = "out of memory",
    [2] = "invalid argument", [3] = "I/O error",
    [4] = "malformed file",   [5] = "unsupported",
    [6] = "not found",        [7] = "value out of range",
    [8] = "not ready",        [9] = "out of KV cache blocks",
    [10] = "CUDA error",      [11] = "shutting down",
    [12] = "queue full",      [13] = "canceled",
    [14] = "device lost",
};

static _Thread_local char t_detail[512];
static _Thread_local const char *t_param;

const char *pgd_strerror(int code) {
    int i = -code;
    if (i < 0 || i >= PGD_E__COUNT || !k_errstr[i]) return "unknown error";
    return k_errstr[i];
}

int pgd_error_set(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_detail, sizeof t_detail, fmt, ap);
    va_end(ap);
    t_param = NULL;
    return code;
}

int pgd_error_set_param(int code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_detail, sizeof t_detail, fmt, ap);
    va_end(ap);
    t_param = param;
    return code;
}

const char *pgd_error_detail(void) {
    return t_detail;
}

const char *pgd_error_param(void) {
    return t_param;
}

void pgd_error_clear(void) {
    t_detail[0] = '\0';
    t_param = NULL;
}
