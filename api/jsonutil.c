/*
 * api/jsonutil.c — UTF-8 repair, safe JSON strings and floats, dumping into a pgd_buf (compact,
 * or as Python's json.dumps writes it).
 */
#include "api/jsonutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* Length of the well-formed UTF-8 sequence at p[0..n), or 0 when it is ill-formed; *bad is then
 * the length of the maximal subpart to replace with one U+FFFD (>= 1). */
static size_t utf8_seq(const unsigned char *p, size_t n, size_t *bad) {
    unsigned char c = p[0];
    if (c < 0x80) return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0; /* no overlongs */
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90; /* no overlongs */
        if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        *bad = 1; /* continuation byte, C0/C1, F5..FF */
        return 0;
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n) break;
        unsigned char b = p[i];
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) break;
    }
    if (i == need) return need;
    *bad = i; /* the lead and the continuation bytes that were still possible */
    return 0;
}

bool pgd_api_utf8_valid(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0, bad;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, n - i, &bad);
        if (!k) return false;
        i += k;
    }
    return true;
}

int pgd_api_utf8_sanitize(const char *p, size_t n, pgd_buf *out) {
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0, run = 0, bad = 0; /* run: start of the pending valid bytes */
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i, &bad);
        if (k) {
            i += k;
            continue;
        }
        if (pgd_buf_append(out, p + run, i - run) || pgd_buf_append(out, "\xEF\xBF\xBD", 3))
            return PGD_ENOMEM;
        i += bad;
        run = i;
    }
    return pgd_buf_append(out, p + run, n - run);
}

size_t pgd_api_utf8_chars(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0, chars = 0, bad = 0;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i, &bad);
        i += k ? k : bad;
        chars++;
    }
    return chars;
}

json_t *pgd__api_jstr(const char *p, size_t n) {
    if (!p) p = "";
    if (pgd_api_utf8_valid(p, n)) return json_stringn_nocheck(p, n);
    pgd_buf b = PGD_BUF_INIT;
    json_t *j = NULL;
    if (pgd_api_utf8_sanitize(p, n, &b) == 0) j = json_stringn_nocheck(b.data ? b.data : "", b.len);
    pgd_buf_free(&b);
    return j;
}

json_t *pgd__api_jfloat(float v, double floor_value) {
    if (!isfinite(v) || (double)v < floor_value) return json_real(floor_value);
    char buf[48];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    return json_real(strtod(buf, NULL));
}

static int dump_cb(const char *buffer, size_t size, void *data) {
    return pgd_buf_append(data, buffer, size) ? -1 : 0;
}

int pgd__api_dump(const json_t *j, pgd_buf *out) {
    size_t before = out->len;
    if (json_dump_callback(j, dump_cb, out, JSON_COMPACT | JSON_REAL_PRECISION(9))) {
        out->len = before;
        if (out->data) out->data[before] = '\0';
        return PGD_ENOMEM;
    }
    return pgd_buf_append(out, "", 0); /* NUL-terminated even for an empty dump */
}

int pgd__api_set(json_t *obj, const char *key, json_t *value) {
    return json_object_set_new_nocheck(obj, key, value) ? PGD_ENOMEM : 0;
}

/* ---- Python's json.dumps ------------------------------------------------------------------ */

/* A decimal: value = digits (no leading or trailing zeros; "0" only for zero) x 10^(exp + 1 -
 * strlen(digits)), i.e. exp is the exponent of the first digit as %e writes it. */
typedef struct {
    char digits[24];
    int exp;
} decimal;

/* The digits of v (finite, > 0) rounded to p significant digits (1..17), as %.{p-1}e gives them
 * (correctly rounded by the C library); trailing zeros removed. */
static void round_digits(double v, int p, decimal *d) {
    char buf[48];
    snprintf(buf, sizeof buf, "%.*e", p - 1, v);
    size_t o = 0;
    const char *s = buf;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') d->digits[o++] = *s;
    d->digits[o] = '\0';
    d->exp = atoi(s + 1);
}

static double decimal_value(const decimal *d) {
    char buf[48];
    snprintf(buf, sizeof buf, "%se%d", d->digits, d->exp + 1 - (int)strlen(d->digits));
    return strtod(buf, NULL);
}

static void trim_zeros(decimal *d) {
    size_t n = strlen(d->digits);
    while (n > 1 && d->digits[n - 1] == '0') d->digits[--n] = '\0';
}

/* The other p-digit neighbour of v: the decimal one unit in the last place beyond d, on the
 * other side of v (d is v correctly rounded to p digits, untrimmed). */
static void other_neighbour(const decimal *d, double v, decimal *o) {
    unsigned long long m = strtoull(d->digits, NULL, 10);
    int p = (int)strlen(d->digits), e = d->exp;
    m = decimal_value(d) < v ? m + 1 : m - 1;
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%llu", m);
    snprintf(o->digits, sizeof o->digits, "%s", buf);
    o->exp = e + (n - p); /* 999 + 1 = 1000 gains a digit; 100 - 1 = 99 loses one */
}

/* Shortest digits that read back as v (v finite, > 0), and among those the nearest to v: what
 * Python's repr (David Gay's dtoa, mode 0) gives. The correctly rounded p-digit decimal is the
 * nearest one; when it does not read back, the neighbour on the other side of v may (next to a
 * power of two, where the interval that rounds to v is lopsided). */
static void shortest(double v, decimal *d) {
    for (int p = 1; p <= 17; p++) {
        round_digits(v, p, d);
        if (decimal_value(d) == v) break;
        decimal o;
        other_neighbour(d, v, &o);
        if (decimal_value(&o) == v) {
            *d = o;
            break;
        }
    }
    trim_zeros(d);
}

/* repr(float): shortest round-trip digits; scientific (1e-05, 1.5e+20, two exponent digits at
 * least) when the exponent is < -4 or >= 16, else fixed with at least one digit after the point
 * (1.0, 0.0001, 123.456). Non-finite values as Python writes them (NaN, Infinity). */
static int put_py_real(double v, pgd_buf *out) {
    if (isnan(v)) return pgd_buf_puts(out, "NaN");
    if (isinf(v)) return pgd_buf_puts(out, v < 0 ? "-Infinity" : "Infinity");
    if (v == 0) return pgd_buf_puts(out, signbit(v) ? "-0.0" : "0.0");
    char buf[64];
    size_t o = 0;
    if (v < 0) {
        buf[o++] = '-';
        v = -v;
    }
    decimal d;
    shortest(v, &d);
    int n = (int)strlen(d.digits), e = d.exp;
    if (e < -4 || e >= 16) {
        buf[o++] = d.digits[0];
        if (n > 1) {
            buf[o++] = '.';
            memcpy(buf + o, d.digits + 1, (size_t)n - 1);
            o += (size_t)n - 1;
        }
        o += (size_t)snprintf(buf + o, sizeof buf - o, "e%c%02d", e < 0 ? '-' : '+', abs(e));
    } else if (e < 0) { /* 0.000ddd */
        memcpy(buf + o, "0.", 2);
        o += 2;
        for (int i = 0; i < -e - 1; i++) buf[o++] = '0';
        memcpy(buf + o, d.digits, (size_t)n);
        o += (size_t)n;
    } else { /* ddd.ddd or ddd000.0 */
        for (int i = 0; i <= e; i++) buf[o++] = i < n ? d.digits[i] : '0';
        buf[o++] = '.';
        if (n > e + 1) {
            memcpy(buf + o, d.digits + e + 1, (size_t)(n - e - 1));
            o += (size_t)(n - e - 1);
        } else {
            buf[o++] = '0';
        }
    }
    return pgd_buf_append(out, buf, o);
}

/* Between items: ", " compact; with an indent, "," then a new line indented to `depth`
 * levels (`first`: no comma). */
static int py_sep(pgd_buf *out, int indent, int depth, bool first) {
    if (!indent) return first ? 0 : pgd_buf_append(out, ", ", 2);
    if (!first && pgd_buf_append(out, ",", 1)) return PGD_ENOMEM;
    if (pgd_buf_append(out, "\n", 1)) return PGD_ENOMEM;
    for (int i = 0; i < indent * depth; i++)
        if (pgd_buf_append(out, " ", 1)) return PGD_ENOMEM;
    return 0;
}

static int put_py(const json_t *j, pgd_buf *out, int indent, int depth) {
    char num[32];
    if (depth > 2048) return PGD_ENOMEM; /* a cycle; jansson's parser stops at 2048 */
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *key;
        size_t key_len;
        json_t *v;
        bool first = true;
        if (pgd_buf_append(out, "{", 1)) return PGD_ENOMEM;
        /* json_object_keylen_foreach takes a non-const object; it does not change it */
        json_object_keylen_foreach((json_t *)j, key, key_len, v) {
            if (py_sep(out, indent, depth + 1, first) || pgd_json_quote_py(key, key_len, out) ||
                pgd_buf_append(out, ": ", 2) || put_py(v, out, indent, depth + 1))
                return PGD_ENOMEM;
            first = false;
        }
        if (!first && indent && py_sep(out, indent, depth, true)) return PGD_ENOMEM;
        return pgd_buf_append(out, "}", 1) ? PGD_ENOMEM : 0;
    }
    case JSON_ARRAY:
        if (pgd_buf_append(out, "[", 1)) return PGD_ENOMEM;
        for (size_t i = 0; i < json_array_size(j); i++) {
            if (py_sep(out, indent, depth + 1, i == 0) ||
                put_py(json_array_get(j, i), out, indent, depth + 1))
                return PGD_ENOMEM;
        }
        if (json_array_size(j) && indent && py_sep(out, indent, depth, true)) return PGD_ENOMEM;
        return pgd_buf_append(out, "]", 1) ? PGD_ENOMEM : 0;
    case JSON_STRING:
        return pgd_json_quote_py(json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(j));
        return pgd_buf_puts(out, num) ? PGD_ENOMEM : 0;
    case JSON_REAL:
        return put_py_real(json_real_value(j), out) ? PGD_ENOMEM : 0;
    case JSON_TRUE:
        return pgd_buf_puts(out, "true") ? PGD_ENOMEM : 0;
    case JSON_FALSE:
        return pgd_buf_puts(out, "false") ? PGD_ENOMEM : 0;
    default:
        return pgd_buf_puts(out, "null") ? PGD_ENOMEM : 0;
    }
}

int pgd_api_json_dump_py_indent(const json_t *j, int indent, pgd_buf *out) {
    size_t before = out->len;
    if (put_py(j, out, indent > 0 ? indent : 0, 0) || pgd_buf_append(out, "", 0)) {
        out->len = before;
        if (out->data) out->data[before] = '\0';
        return PGD_ENOMEM;
    }
    return 0;
}

int pgd_api_json_dump_py(const json_t *j, pgd_buf *out) {
    return pgd_api_json_dump_py_indent(j, 0, out);
}

json_t *pgd__api_field(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}
