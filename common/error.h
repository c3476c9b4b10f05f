/*
 * common/error.h — the one error table, assertions and the per-thread error detail.
 *
 * Every fallible function returns int: 0 on success, a negative PGD_E* code on failure.
 * "Not ready" (PGD_EAGAIN) and "out of KV blocks" (PGD_ENOBLOCKS) are ordinary results.
 * A failing function may also leave a human-readable detail for the calling thread with
 * pgd_error_set(); pgd_error_detail() returns it (thread-local, overwritten by the next set).
 *
 * Threading: everything here is safe from any thread.
 */
#ifndef PGD_COMMON_ERROR_H
#define PGD_COMMON_ERROR_H

#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PGD_OK = 0,
    PGD_ENOMEM = -1,       /* allocation failed */
    PGD_EINVAL = -2,       /* invalid argument or request */
    PGD_EIO = -3,          /* read/write/mmap failure */
    PGD_EFORMAT = -4,      /* malformed or hostile file */
    PGD_EUNSUPPORTED = -5, /* valid but not supported (tensor type, architecture, ...) */
    PGD_ENOTFOUND = -6,    /* key, tensor, token, template not found */
    PGD_ERANGE = -7,       /* value out of range / overflow */
    PGD_EAGAIN = -8,       /* not ready yet; try again */
    PGD_ENOBLOCKS = -9,    /* KV block pool exhausted */
    PGD_ECUDA = -10,       /* CUDA / cuBLAS failure */
    PGD_ESHUTDOWN = -11,   /* component is shutting down */
    PGD_EFULL = -12,       /* queue full */
    PGD_ECANCELED = -13,   /* request aborted */
    PGD_EDEVLOST = -14,    /* the device failed for good: nothing more can run on it */
    PGD_E__COUNT = 15
};

/* Static description of a PGD_E* code (never NULL). */
const char *pgd_strerror(int code);

/* Record a printf-style detail for the calling thread and return `code` (for `return
 * pgd_error_set(PGD_EFORMAT, "...")`). */
int pgd_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* As pgd_error_set, naming the request parameter at fault with its OpenAI name ("max_tokens",
 * "temperature", ...; a static string) for the error body's "param" field. */
int pgd_error_set_param(int code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The calling thread's last detail, or pgd_strerror of the last code if none ("" if nothing
 * was ever set). Valid until the thread's next pgd_error_set. */
const char *pgd_error_detail(void);

/* The parameter named by the calling thread's last pgd_error_set_param; NULL after a plain
 * pgd_error_set (or none). */
const char *pgd_error_param(void);

/* Clear the calling thread's detail. */
void pgd_error_clear(void);

/* Bugs abort with file:line; bad input never reaches an assertion. */
#define PGD_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define PGD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* A macro's value as a string literal (for help texts that quote a default). */
#define PGD_STR_(x) #x
#define PGD_STR(x)  PGD_STR_(x)

#ifdef __cplusplus
}
#endif

#endif
