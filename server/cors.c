/*
 * server/cors.c — the allowed origins (server/cors.h).
 */
#include "server/cors.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

struct pgd_cors {
    bool any;      /* "*" was listed */
    char **origin; /* [n] */
    size_t n;
};

void pgd_cors_destroy(pgd_cors *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) free(c->origin[i]);
    free(c->origin);
    free(c);
}

/* Whether s[0..n) is an origin as a browser serializes it: "http" or "https", "://", a host
 * (a name or IPv4 address: letters, digits, '.', '-'; or an IPv6 address in brackets) and an
 * optional ":port" (1 to 5 digits), nothing else. */
static bool origin_ok(const char *s, size_t n) {
    size_t i;
    if (n > 7 && !strncasecmp(s, "http://", 7))
        i = 7;
    else if (n > 8 && !strncasecmp(s, "https://", 8))
        i = 8;
    else
        return false;
    size_t host = i;
    if (s[i] == '[') {
        while (++i < n && (isxdigit((unsigned char)s[i]) || s[i] == ':' || s[i] == '.')) {
        }
        if (i >= n || s[i] != ']' || i == host + 1) return false;
        i++;
    } else {
        while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '-')) i++;
        if (i == host) return false;
    }
    if (i == n) return true;
    if (s[i++] != ':') return false;
    size_t digits = n - i;
    if (digits < 1 || digits > 5) return false;
    for (; i < n; i++)
        if (!isdigit((unsigned char)s[i])) return false;
    return true;
}

int pgd_cors_create(const char *list, pgd_cors **out) {
    *out = NULL;
    if (!list) return 0;
    pgd_cors *c = calloc(1, sizeof *c);
    size_t cap = 1;
    for (const char *p = list; *p; p++) cap += *p == ',';
    if (!c || !(c->origin = calloc(cap, sizeof *c->origin))) goto nomem;
    int rc;
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) b--;
        size_t n = (size_t)(b - a);
        if (n == 1 && *a == '*') {
            c->any = true;
        } else if (n) {
            if (!origin_ok(a, n)) {
                rc = pgd_error_set(PGD_EINVAL,
                                   "allowed origins: '%.*s' is not an origin "
                                   "(http[s]://host[:port], no path) or *",
                                   (int)(n > 200 ? 200 : n), a);
                goto fail;
            }
            if (!(c->origin[c->n] = strndup(a, n))) goto nomem;
            c->n++;
        }
        if (!*end) break;
        p = end + 1;
    }
    if (!c->any && !c->n) {
        pgd_cors_destroy(c);
        return 0;
    }
    *out = c;
    return 0;
nomem:
    rc = pgd_error_set(PGD_ENOMEM, "out of memory");
fail:
    pgd_cors_destroy(c);
    return rc;
}

bool pgd_cors_allows(const pgd_cors *c, const char *origin) {
    if (!c || !origin) return false;
    if (c->any) return true;
    for (size_t i = 0; i < c->n; i++)
        if (!strcasecmp(c->origin[i], origin)) return true;
    return false;
}

const char *pgd_cors_allow_origin(const pgd_cors *c, const char *origin) {
    return c && c->any ? "*" : origin;
}

bool pgd_cors_header_list_ok(const char *s) {
    /* RFC 9110 token characters, plus the list's commas and spaces */
    static const char extra[] = "!#$%&'*+-.^_`|~, ";
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= 1024 || (!isalnum((unsigned char)s[n]) && !strchr(extra, s[n]))) return false;
    return true;
}
