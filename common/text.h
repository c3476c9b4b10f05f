/*
 * common/text.h — byte strings, byte spans and a growable byte buffer.
 *
 * pgd_str is a borrowed view (not NUL-terminated, may hold any bytes). pgd_span marks a byte
 * range [begin, end) of some text, e.g. the parts of a rendered chat prompt that came from the
 * template (where control tokens may be recognised) rather than from user content.
 * pgd_buf owns its bytes; it is always NUL-terminated after a successful append so `data` can
 * be used as a C string when the content has no NUL.
 *
 * Threading: no shared state; a pgd_buf belongs to one thread at a time.
 */
#ifndef PGD_COMMON_TEXT_H
#define PGD_COMMON_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pgd_str {
    const char *ptr;
    uint64_t len;
} pgd_str;

typedef struct pgd_span {
    size_t begin, end; /* byte offsets, begin <= end */
} pgd_span;

typedef struct pgd_buf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;
} pgd_buf;

#define PGD_BUF_INIT                                                                               \
    { NULL, 0, 0 }

/* Appends; 0 or PGD_ENOMEM (the buffer is unchanged on failure). */
int pgd_buf_append(pgd_buf *b, const void *data, size_t len);
int pgd_buf_puts(pgd_buf *b, const char *s);
int pgd_buf_printf(pgd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pgd_buf_vprintf(pgd_buf *b, const char *fmt, va_list ap);
int pgd_buf_reserve(pgd_buf *b, size_t extra);
void pgd_buf_reset(pgd_buf *b); /* len = 0, keeps memory */
void pgd_buf_free(pgd_buf *b);  /* frees memory, back to PGD_BUF_INIT */
/* Hands the bytes to the caller (who frees them with free()); the buffer is emptied. */
char *pgd_buf_steal(pgd_buf *b, size_t *len);

/* Compare a view with a C string. */
int pgd_str_eq(pgd_str s, const char *cstr);

/* Number of bytes of a UTF-8 sequence announced by its lead byte (1..4), or 0 if `lead` is a
 * continuation byte or invalid. */
int pgd_utf8_seq_len(unsigned char lead);

/* Appends s[n] as a JSON string the way Python's json.dumps(s, ensure_ascii=False) writes it
 * (what a chat template's tojson filter prints under Hugging Face's settings): quoted; \" \\
 * \n \r \t \b \f escaped, other bytes below 0x20 as \u00xx (lowercase hex), everything else
 * as it is. 0 or PGD_ENOMEM (the buffer may then hold part of it). */
int pgd_json_quote_py(const char *s, size_t n, pgd_buf *out);

#endif
