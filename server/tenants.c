/*
 * server/tenants.c — tenants file, key lookup and quota buckets (see tenants.h).
 *
 * Keys: libsodium's crypto_hash_sha256 of the presented key, then sodium_memcmp (constant time)
 * against every stored hash, without stopping at a match, so the time taken says nothing about
 * which key matched or how much of it.
 */
#include "server/tenants.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* ---- parsing ------------------------------------------------------------------------------- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An array of 64-hex-digit strings into *out [*n]. */
static int hashes(json_t *arr, const char *src, const char *what, uint8_t (**out)[32], size_t *n) {
    *out = NULL;
    *n = 0;
    if (!arr) return 0;
    if (!json_is_array(arr))
        return pgd_error_set(PGD_EFORMAT, "%s: %s must be an array of sha256 hex strings", src,
                             what);
    size_t m = json_array_size(arr);
    if (m && !(*out = calloc(m, sizeof **out))) return PGD_ENOMEM;
    for (size_t i = 0; i < m; i++) {
        const char *h = json_string_value(json_array_get(arr, i));
        if (!h || strlen(h) != 64)
            return pgd_error_set(PGD_EFORMAT,
                                 "%s: %s[%zu] is not 64 hex digits (pagoda hash-key "
                                 "prints the sha256 of a key)",
                                 src, what, i);
        for (int j = 0; j < 32; j++) {
            int hi = hex_digit(h[2 * j]), lo = hex_digit(h[2 * j + 1]);
            if (hi < 0 || lo < 0)
                return pgd_error_set(PGD_EFORMAT, "%s: %s[%zu] is not hexadecimal", src, what, i);
            (*out)[i][j] = (uint8_t)(hi << 4 | lo);
        }
    }
    *n = m;
    return 0;
}

/* A limit: a non-negative integer, or absent/null for unlimited. */
static int limit(json_t *obj, const char *key, const char *src, const char *name, int64_t *out) {
    *out = PGD_TENANT_UNLIMITED;
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return pgd_error_set(PGD_EFORMAT,
                             "%s: tenant '%s': limits.%s must be a non-negative "
                             "integer",
                             src, name, key);
    *out = json_integer_value(v);
    return 0;
}

/* Refuse keys not in `allowed` (NULL-terminated): a typo must not lift a limit. */
static int only(json_t *obj, const char *const *allowed, const char *src, const char *where) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        (void)v;
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, key);
        if (!ok) return pgd_error_set(PGD_EFORMAT, "%s: unknown field '%s' in %s", src, key, where);
    }
    return 0;
}

static int parse_tenant(json_t *o, const char *src, size_t i, pgd_tenant_conf *t) {
    static const char *const fields[] = {"name",   "keys_sha256",  "weight", "priority",
                                         "limits", "prefix_cache", NULL};
    static const char *const limit_fields[] = {"max_concurrent", "rpm",         "tpm",
                                               "max_tokens",     "max_context", NULL};
    if (!json_is_object(o))
        return pgd_error_set(PGD_EFORMAT, "%s: tenants[%zu] is not an object", src, i);
    int rc = only(o, fields, src, "a tenant");
    if (rc) return rc;
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || !*name || strlen(name) >= PGD_TENANT_NAME_MAX)
        return pgd_error_set(PGD_EFORMAT, "%s: tenants[%zu] needs a name (1 to %d bytes)", src, i,
                             PGD_TENANT_NAME_MAX - 1);
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return pgd_error_set(PGD_EFORMAT, "%s: tenant name '%s': use letters, digits, - _ .",
                                 src, name);
    snprintf(t->name, sizeof t->name, "%s", name);
    if ((rc = hashes(json_object_get(o, "keys_sha256"), src, "keys_sha256", &t->keys, &t->n_keys)))
        return rc;
    t->weight = 1.0;
    json_t *w = json_object_get(o, "weight");
    if (w && !(json_is_number(w) && json_number_value(w) > 0 && json_number_value(w) <= 1e6))
        return pgd_error_set(PGD_EFORMAT, "%s: tenant '%s': weight must be a positive number", src,
                             name);
    if (w) t->weight = json_number_value(w);
    json_t *p = json_object_get(o, "priority");
    if (p && !(json_is_integer(p) && llabs(json_integer_value(p)) <= 1000000))
        return pgd_error_set(PGD_EFORMAT, "%s: tenant '%s': priority must be an integer", src,
                             name);
    t->priority = p ? (int32_t)json_integer_value(p) : 0;
    json_t *l = json_object_get(o, "limits");
    if (l && !json_is_object(l))
        return pgd_error_set(PGD_EFORMAT, "%s: tenant '%s': limits must be an object", src, name);
    if (l && (rc = only(l, limit_fields, src, "limits"))) return rc;
    if ((rc = limit(l, "max_concurrent", src, name, &t->limits.max_concurrent)) ||
        (rc = limit(l, "rpm", src, name, &t->limits.rpm)) ||
        (rc = limit(l, "tpm", src, name, &t->limits.tpm)) ||
        (rc = limit(l, "max_tokens", src, name, &t->limits.max_tokens)) ||
        (rc = limit(l, "max_context", src, name, &t->limits.max_context)))
        return rc;
    const char *pc = json_string_value(json_object_get(o, "prefix_cache"));
    if (json_object_get(o, "prefix_cache") &&
        (!pc || (strcmp(pc, "isolated") && strcmp(pc, "shared"))))
        return pgd_error_set(PGD_EFORMAT,
                             "%s: tenant '%s': prefix_cache is \"isolated\" or "
                             "\"shared\"",
                             src, name);
    t->shared_cache = pc && !strcmp(pc, "shared");
    return 0;
}

static int parse_root(json_t *root, const char *src, pgd_tenants *ts) {
    static const char *const fields[] = {"tenants", "admin_keys_sha256", "unauthenticated", NULL};
    if (!json_is_object(root)) return pgd_error_set(PGD_EFORMAT, "%s: not a JSON object", src);
    int rc = only(root, fields, src, "the file");
    if (rc) return rc;
    json_t *arr = json_object_get(root, "tenants");
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return pgd_error_set(PGD_EFORMAT, "%s: \"tenants\" must be a non-empty array", src);
    ts->n = json_array_size(arr);
    if (!(ts->t = calloc(ts->n, sizeof *ts->t))) return PGD_ENOMEM;
    for (size_t i = 0; i < ts->n; i++) {
        if ((rc = parse_tenant(json_array_get(arr, i), src, i, &ts->t[i]))) return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(ts->t[j].name, ts->t[i].name))
                return pgd_error_set(PGD_EFORMAT, "%s: two tenants are named '%s'", src,
                                     ts->t[i].name);
    }
    if ((rc = hashes(json_object_get(root, "admin_keys_sha256"), src, "admin_keys_sha256",
                     &ts->admin, &ts->n_admin)))
        return rc;
    /* every key belongs to one holder */
    for (size_t a = 0; a < ts->n; a++)
        for (size_t ka = 0; ka < ts->t[a].n_keys; ka++) {
            for (size_t b = 0; b < ts->n; b++)
                for (size_t kb = 0; kb < ts->t[b].n_keys; kb++)
                    if ((a != b || ka != kb) && !memcmp(ts->t[a].keys[ka], ts->t[b].keys[kb], 32))
                        return pgd_error_set(PGD_EFORMAT,
                                             "%s: a key is listed twice (tenants '%s' "
                                             "and '%s')",
                                             src, ts->t[a].name, ts->t[b].name);
            for (size_t k = 0; k < ts->n_admin; k++)
                if (!memcmp(ts->t[a].keys[ka], ts->admin[k], 32))
                    return pgd_error_set(PGD_EFORMAT, "%s: tenant '%s' holds an admin key", src,
                                         ts->t[a].name);
        }
    json_t *open = json_object_get(root, "unauthenticated");
    if (open && !json_is_array(open))
        return pgd_error_set(PGD_EFORMAT, "%s: \"unauthenticated\" must be an array of paths", src);
    size_t n_open = open ? json_array_size(open) : 1;
    if (!(ts->open_paths = calloc(n_open ? n_open : 1, sizeof *ts->open_paths))) return PGD_ENOMEM;
    for (size_t i = 0; i < n_open; i++) {
        const char *p = open ? json_string_value(json_array_get(open, i)) : "/health";
        if (!p || p[0] != '/')
            return pgd_error_set(PGD_EFORMAT, "%s: unauthenticated[%zu] must be a path", src, i);
        if (!(ts->open_paths[i] = strdup(p))) return PGD_ENOMEM;
        ts->n_open++;
    }
    return 0;
}

int pgd_tenants_parse(const char *json, size_t len, const char *src, pgd_tenants **out) {
    *out = NULL;
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) return pgd_error_set(PGD_EFORMAT, "%s: line %d: %s", src, err.line, err.text);
    pgd_tenants *ts = calloc(1, sizeof *ts);
    int rc = ts ? parse_root(root, src, ts) : PGD_ENOMEM;
    json_decref(root);
    if (rc) {
        pgd_tenants_free(ts);
        return rc;
    }
    *out = ts;
    return 0;
}

int pgd_tenants_load(const char *path, pgd_tenants **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return pgd_error_set(PGD_EIO, "tenants file %s: cannot open it", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 16384;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return PGD_ENOMEM;
            }
            buf = p;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    bool bad = ferror(f);
    fclose(f);
    int rc = bad ? pgd_error_set(PGD_EIO, "tenants file %s: read error", path)
                 : pgd_tenants_parse(buf, len, path, out);
    free(buf);
    return rc;
}

void pgd_tenants_free(pgd_tenants *ts) {
    if (!ts) return;
    for (size_t i = 0; ts->t && i < ts->n; i++) free(ts->t[i].keys);
    free(ts->t);
    free(ts->admin);
    for (size_t i = 0; i < ts->n_open; i++) free(ts->open_paths[i]);
    free(ts->open_paths);
    free(ts);
}

bool pgd_tenants_is_open(const pgd_tenants *ts, const char *path) {
    for (size_t i = 0; i < ts->n_open; i++)
        if (!strcmp(ts->open_paths[i], path)) return true;
    return false;
}

/* ---- keys ---------------------------------------------------------------------------------- */

static bool sodium_ready(void) {
    static int state; /* 0 untried, 1 ok, -1 failed; loop thread and CLI only */
    if (!state) state = sodium_init() >= 0 ? 1 : -1;
    return state > 0;
}

int pgd_tenants_lookup(const pgd_tenants *ts, const char *key, size_t len, bool *admin) {
    *admin = false;
    uint8_t h[32];
    if (!sodium_ready() || crypto_hash_sha256(h, (const unsigned char *)key, len) != 0) return -1;
    int found = -1, is_admin = 0;
    /* every stored hash, no early exit */
    for (size_t i = 0; i < ts->n; i++)
        for (size_t k = 0; k < ts->t[i].n_keys; k++) {
            int eq = sodium_memcmp(h, ts->t[i].keys[k], 32) == 0;
            found = eq ? (int)i : found;
        }
    for (size_t k = 0; k < ts->n_admin; k++) is_admin |= sodium_memcmp(h, ts->admin[k], 32) == 0;
    sodium_memzero(h, sizeof h);
    *admin = is_admin;
    return found;
}

int pgd_key_sha256_hex(const char *key, size_t len, char out[65]) {
    uint8_t h[32];
    if (!sodium_ready()) return pgd_error_set(PGD_EIO, "libsodium did not start");
    crypto_hash_sha256(h, (const unsigned char *)key, len);
    sodium_bin2hex(out, 65, h, sizeof h);
    return 0;
}

const char *pgd_bearer_token(const char *h, size_t *len) {
    *len = 0;
    if (!h) return NULL;
    while (*h == ' ' || *h == '\t') h++;
    if (strncasecmp(h, "bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return NULL;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    if (!n) return NULL;
    *len = n;
    return h;
}

/* ---- buckets ------------------------------------------------------------------------------- */

static void refill(pgd_bucket *b, uint64_t now_ns) {
    if (now_ns > b->last_ns) {
        b->tokens += b->capacity * (double)(now_ns - b->last_ns) * 1e-9 / 60.0;
        if (b->tokens > b->capacity) b->tokens = b->capacity;
    }
    b->last_ns = now_ns;
}

void pgd_bucket_init(pgd_bucket *b, double capacity, uint64_t now_ns) {
    b->capacity = b->tokens = capacity;
    b->last_ns = now_ns;
}

bool pgd_bucket_take(pgd_bucket *b, double amount, uint64_t now_ns, double *retry_s) {
    refill(b, now_ns);
    *retry_s = 0;
    if (amount > b->capacity) {
        *retry_s = -1;
        return false;
    }
    if (b->tokens >= amount) {
        b->tokens -= amount;
        return true;
    }
    *retry_s = (amount - b->tokens) * 60.0 / b->capacity;
    return false;
}

void pgd_bucket_refund(pgd_bucket *b, double amount, uint64_t now_ns) {
    refill(b, now_ns);
    b->tokens += amount;
    if (b->tokens > b->capacity) b->tokens = b->capacity;
}

double pgd_bucket_level(pgd_bucket *b, uint64_t now_ns) {
    refill(b, now_ns);
    return b->tokens;
}

double pgd_bucket_reset_s(const pgd_bucket *b) {
    return b->capacity > 0 ? (b->capacity - b->tokens) * 60.0 / b->capacity : 0;
}

void pgd_duration_str(double s, char *out, size_t cap) {
    if (!(s > 0)) {
        snprintf(out, cap, "0s");
    } else if (s < 1.0) {
        snprintf(out, cap, "%dms", (int)ceil(s * 1000.0));
    } else {
        long t = (long)ceil(s);
        if (t >= 3600)
            snprintf(out, cap, "%ldh%ldm%lds", t / 3600, t / 60 % 60, t % 60);
        else if (t >= 60)
            snprintf(out, cap, "%ldm%lds", t / 60, t % 60);
        else
            snprintf(out, cap, "%lds", t);
    }
}
