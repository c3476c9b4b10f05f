/*
 * api/jsonutil.c — UTF-8 repair, safe JSON strings and floats, dumping into a pgd_buf.
 */
#include "api/jsonutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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
