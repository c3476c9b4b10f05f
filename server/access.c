/*
 * server/access.c — authentication, quotas, usage and the admin view (see access.h).
 */
#include "server/access.h"

#include <jansson.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "common/clock.h"
#include "common/error.h"

typedef enum { MODE_OPEN, MODE_ONE_KEY, MODE_TENANTS } access_mode;

struct pgd_access {
    access_mode mode;
    char *path;             /* tenants file */
    pgd_tenants *file;      /* current key table (MODE_ONE_KEY: made from --api-key) */
    pgd_tenant_live **live; /* [n_live] every tenant ever configured, by first appearance */
    size_t n_live, cap_live;
    pgd_tenant_live **of_file; /* [file->n] the live entry of each of the file's tenants */
    pgd_metrics *registry;
    pgd_tenant_metrics tm;
    const char *model_name; /* the registry's copy (build_info) */
    bool metrics;
};

static const char *const k_limit_names[PGD_LIMIT_KINDS] = {"concurrency", "rpm", "tpm"};
static const char *const k_reasons[3] = {"stop", "length", "abort"};

const char *pgd_limit_kind_str(pgd_limit_kind k) {
    return (unsigned)k < PGD_LIMIT_KINDS ? k_limit_names[k] : "";
}

/* ---- live tenants -------------------------------------------------------------------------- */

static int tenant_series(pgd_access *a, pgd_tenant_live *t) {
    if (!a->metrics || t->m_prompt) return 0;
    const char *v2[] = {a->model_name, t->name};
    int rc = 0;
    pgd_metric_series **two[] = {&t->m_prompt,  &t->m_generation, &t->m_ttft, &t->m_e2e,
                                 &t->m_running, &t->m_waiting,    &t->m_vtime};
    pgd_metric *fam[] = {a->tm.prompt_tokens, a->tm.generation_tokens, a->tm.ttft, a->tm.e2e,
                         a->tm.running,       a->tm.waiting,           a->tm.vtime};
    for (size_t i = 0; i < PGD_ARRAY_LEN(two) && !rc; i++)
        rc = pgd_metric_series_get(fam[i], v2, two[i]);
    for (int k = 0; k < PGD_LIMIT_KINDS && !rc; k++) {
        const char *v[] = {a->model_name, t->name, k_limit_names[k]};
        rc = pgd_metric_series_get(a->tm.rate_limited, v, &t->m_limited[k]);
    }
    for (int k = 0; k < 3 && !rc; k++) {
        const char *v[] = {a->model_name, t->name, k_reasons[k]};
        rc = pgd_metric_series_get(a->tm.requests, v, &t->m_finished[k]);
    }
    return rc;
}

static void bucket_resize(pgd_bucket *b, int64_t old_limit, int64_t limit, uint64_t now) {
    if (limit == PGD_TENANT_UNLIMITED) return;
    if (old_limit == PGD_TENANT_UNLIMITED || !b->capacity) {
        pgd_bucket_init(b, (double)limit, now);
        return;
    }
    double level = pgd_bucket_level(b, now); /* what is left stays left, up to the new size */
    b->capacity = (double)limit;
    b->tokens = level < b->capacity ? level : b->capacity;
}

/* The live entry named like conf (made if new), updated to conf's settings. */
static pgd_tenant_live *live_update(pgd_access *a, const pgd_tenant_conf *conf, uint64_t now) {
    pgd_tenant_live *t = NULL;
    for (size_t i = 0; i < a->n_live && !t; i++)
        if (!strcmp(a->live[i]->name, conf->name)) t = a->live[i];
    if (!t) {
        if (a->n_live == a->cap_live) {
            size_t cap = a->cap_live ? 2 * a->cap_live : 8;
            pgd_tenant_live **p = realloc(a->live, cap * sizeof *p);
            if (!p) return NULL;
            a->live = p;
            a->cap_live = cap;
        }
        if (!(t = calloc(1, sizeof *t))) return NULL;
        snprintf(t->name, sizeof t->name, "%s", conf->name);
        t->id = a->n_live + 1;
        t->conf.limits.rpm = t->conf.limits.tpm = PGD_TENANT_UNLIMITED;
        a->live[a->n_live++] = t;
    }
    bucket_resize(&t->rpm, t->conf.limits.rpm, conf->limits.rpm, now);
    bucket_resize(&t->tpm, t->conf.limits.tpm, conf->limits.tpm, now);
    t->conf = *conf;
    t->conf.keys = NULL;
    t->conf.n_keys = 0;
    t->salt = conf->shared_cache ? 0 : XXH3_64bits(t->name, strlen(t->name)) | 1;
    t->present = true;
    return t;
}

/* Make `ts` the key table: every live tenant is updated or added; those not in it are marked
 * absent. On failure nothing changes but new live entries (harmless). */
static int install(pgd_access *a, pgd_tenants *ts) {
    pgd_tenant_live **of = calloc(ts->n ? ts->n : 1, sizeof *of);
    if (!of) return PGD_ENOMEM;
    uint64_t now = pgd_now_ns();
    /* first make sure every entry exists, so nothing is half-updated on ENOMEM */
    for (size_t i = 0; i < ts->n; i++) {
        bool known = false;
        for (size_t k = 0; k < a->n_live && !known; k++)
            known = !strcmp(a->live[k]->name, ts->t[i].name);
        if (!known) {
            pgd_tenant_conf blank = {0};
            snprintf(blank.name, sizeof blank.name, "%s", ts->t[i].name);
            blank.limits.rpm = blank.limits.tpm = PGD_TENANT_UNLIMITED;
            pgd_tenant_live *t = live_update(a, &blank, now);
            if (!t || tenant_series(a, t)) {
                free(of);
                return PGD_ENOMEM;
            }
            t->present = false;
        }
    }
    for (size_t k = 0; k < a->n_live; k++) a->live[k]->present = false;
    for (size_t i = 0; i < ts->n; i++) of[i] = live_update(a, &ts->t[i], now);
    pgd_tenants_free(a->file);
    free(a->of_file);
    a->file = ts;
    a->of_file = of;
    return 0;
}

/* The one-key table: tenant "default" holding `key`, the historical open paths. */
static int one_key_table(const char *key, pgd_tenants **out) {
    pgd_tenants *ts = calloc(1, sizeof *ts);
    if (!ts) return PGD_ENOMEM;
    static const char *const open[] = {"/health", "/metrics", "/"};
    ts->t = calloc(1, sizeof *ts->t);
    ts->open_paths = calloc(PGD_ARRAY_LEN(open), sizeof *ts->open_paths);
    if (ts->t) ts->t[0].keys = calloc(1, sizeof *ts->t[0].keys);
    if (!ts->t || !ts->open_paths || !ts->t[0].keys || sodium_init() < 0) goto fail;
    ts->n = 1;
    pgd_tenant_conf *t = &ts->t[0];
    snprintf(t->name, sizeof t->name, "default");
    t->n_keys = 1;
    crypto_hash_sha256(t->keys[0], (const unsigned char *)key, strlen(key));
    t->weight = 1;
    t->shared_cache = true; /* one tenant: nothing to isolate from */
    t->limits =
        (pgd_tenant_limits){PGD_TENANT_UNLIMITED, PGD_TENANT_UNLIMITED, PGD_TENANT_UNLIMITED,
                            PGD_TENANT_UNLIMITED, PGD_TENANT_UNLIMITED};
    for (size_t i = 0; i < PGD_ARRAY_LEN(open); i++, ts->n_open++)
        if (!(ts->open_paths[i] = strdup(open[i]))) goto fail;
    *out = ts;
    return 0;
fail:
    pgd_tenants_free(ts);
    return PGD_ENOMEM;
}

int pgd_access_create(const char *tenants_path, const char *api_key, pgd_access **out) {
    *out = NULL;
    pgd_access *a = calloc(1, sizeof *a);
    if (!a) return PGD_ENOMEM;
    pgd_tenants *ts = NULL;
    int rc = 0;
    if (tenants_path && *tenants_path) {
        a->mode = MODE_TENANTS;
        if (!(a->path = strdup(tenants_path))) rc = PGD_ENOMEM;
        if (!rc) rc = pgd_tenants_load(tenants_path, &ts);
    } else if (api_key && *api_key) {
        a->mode = MODE_ONE_KEY;
        rc = one_key_table(api_key, &ts);
    }
    if (!rc && ts) rc = install(a, ts);
    if (rc) {
        pgd_tenants_free(ts);
        pgd_access_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
}

void pgd_access_destroy(pgd_access *a) {
    if (!a) return;
    pgd_tenants_free(a->file);
    free(a->of_file);
    for (size_t i = 0; i < a->n_live; i++) free(a->live[i]);
    free(a->live);
    free(a->path);
    free(a);
}

bool pgd_access_enabled(const pgd_access *a) {
    return a->mode != MODE_OPEN;
}

bool pgd_access_has_tenants(const pgd_access *a) {
    return a->mode == MODE_TENANTS;
}

int pgd_access_reload(pgd_access *a) {
    if (a->mode != MODE_TENANTS)
        return pgd_error_set(PGD_EINVAL, "no tenants file to reload (start with --tenants FILE)");
    pgd_tenants *ts;
    int rc = pgd_tenants_load(a->path, &ts);
    if (rc) return rc;
    if ((rc = install(a, ts))) pgd_tenants_free(ts);
    return rc;
}

/* ---- who is calling ------------------------------------------------------------------------ */

/* The key of an Authorization header: Bearer KEY, or Basic base64(user:KEY). Into buf. */
static const char *presented_key(const char *h, char *buf, size_t cap, size_t *len) {
    const char *k = pgd_bearer_token(h, len);
    if (k || !h) return k;
    while (*h == ' ' || *h == '\t') h++;
    if (strncasecmp(h, "basic", 5) != 0 || (h[5] != ' ' && h[5] != '\t')) return NULL;
    h += 5;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strcspn(h, " \t"), got = 0;
    if (sodium_base642bin((unsigned char *)buf, cap - 1, h, n, NULL, &got, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0)
        return NULL;
    buf[got] = '\0';
    char *colon = memchr(buf, ':', got);
    if (!colon) return NULL;
    *len = got - (size_t)(colon + 1 - buf);
    return *len ? colon + 1 : NULL;
}

void pgd_access_identify(pgd_access *a, pgd_http_request *req, pgd_caller *out) {
    *out = (pgd_caller){PGD_CALLER_NONE, NULL};
    if (a->mode == MODE_OPEN) {
        out->kind = PGD_CALLER_ANON;
        return;
    }
    char buf[1024];
    size_t len = 0;
    const char *key =
        presented_key(pgd_http_request_header(req, "Authorization"), buf, sizeof buf, &len);
    bool admin = false;
    int i = key ? pgd_tenants_lookup(a->file, key, len, &admin) : -1;
    sodium_memzero(buf, sizeof buf);
    if (admin) {
        out->kind = PGD_CALLER_ADMIN;
    } else if (i >= 0) {
        out->kind = PGD_CALLER_TENANT;
        out->t = a->of_file[i];
    } else if (pgd_tenants_is_open(a->file, pgd_http_request_path(req))) {
        out->kind = PGD_CALLER_ANON; /* a wrong key on an open path is no key */
    }
}

static bool admin_path(const char *path) {
    return !strcmp(path, "/metrics") || !strncmp(path, "/admin/", 7);
}

bool pgd_access_permits(const pgd_access *a, const pgd_caller *c, const char *path,
                        pgd_api_error *e) {
    bool open = a->mode == MODE_OPEN || pgd_tenants_is_open(a->file, path);
    if (c->kind == PGD_CALLER_ANON) {
        if (open && strncmp(path, "/admin/", 7) != 0) return true;
        pgd_api_error_set(e, 403, NULL, NULL, "%s needs an admin key", path);
        return false;
    }
    if (c->kind == PGD_CALLER_ADMIN) {
        static const char *const reads[] = {"/", "/v1/models", "/health"};
        bool ok = admin_path(path) || open;
        for (size_t i = 0; i < PGD_ARRAY_LEN(reads) && !ok; i++) ok = !strcmp(path, reads[i]);
        if (!ok)
            pgd_api_error_set(e, 403, NULL, NULL,
                              "an admin key reads /metrics and /admin/tenants; %s needs a "
                              "tenant's key",
                              path);
        return ok;
    }
    if (c->kind == PGD_CALLER_TENANT && (!admin_path(path) || open)) return true;
    pgd_api_error_set(e, 403, NULL, NULL, "%s needs an admin key", path);
    return false;
}

/* ---- quotas -------------------------------------------------------------------------------- */

static void set_header(pgd_http_request *req, const char *name, const char *fmt, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, fmt, v);
    pgd_http_request_set_header(req, name, buf);
}

/* x-ratelimit-{limit,remaining,reset}-<what> for a bucket. */
static void bucket_headers(pgd_http_request *req, const char *what, pgd_bucket *b, uint64_t now) {
    char name[48], dur[32];
    double level = pgd_bucket_level(b, now);
    snprintf(name, sizeof name, "x-ratelimit-limit-%s", what);
    set_header(req, name, "%.0f", b->capacity);
    snprintf(name, sizeof name, "x-ratelimit-remaining-%s", what);
    set_header(req, name, "%.0f", floor(level));
    pgd_duration_str(pgd_bucket_reset_s(b), dur, sizeof dur);
    snprintf(name, sizeof name, "x-ratelimit-reset-%s", what);
    pgd_http_request_set_header(req, name, dur);
}

static void limit_headers(pgd_tenant_live *t, pgd_http_request *req, uint64_t now) {
    if (!req) return;
    if (t->conf.limits.rpm != PGD_TENANT_UNLIMITED) bucket_headers(req, "requests", &t->rpm, now);
    if (t->conf.limits.tpm != PGD_TENANT_UNLIMITED) bucket_headers(req, "tokens", &t->tpm, now);
}

static int refuse(pgd_tenant_live *t, pgd_limit_kind k, double retry_s, pgd_http_request *req,
                  uint64_t now, pgd_api_error *e, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static int refuse(pgd_tenant_live *t, pgd_limit_kind k, double retry_s, pgd_http_request *req,
                  uint64_t now, pgd_api_error *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pgd_api_error_vset(e, 429, NULL, "rate_limit_exceeded", fmt, ap);
    va_end(ap);
    t->usage.refused[k]++;
    if (t->m_limited[k]) pgd_series_add(t->m_limited[k], 1);
    limit_headers(t, req, now);
    set_header(req, "Retry-After", "%.0f", retry_s > 1 ? ceil(retry_s) : 1);
    return PGD_EFULL;
}

int pgd_access_admit(pgd_access *a, pgd_tenant_live *t, pgd_http_request *req, pgd_grant *g,
                     pgd_api_error *e) {
    (void)a;
    *g = (pgd_grant){t, false, 0};
    if (!t) return 0;
    uint64_t now = pgd_now_ns();
    const pgd_tenant_limits *l = &t->conf.limits;
    if (l->max_concurrent != PGD_TENANT_UNLIMITED && t->in_flight >= l->max_concurrent)
        return refuse(t, PGD_LIMIT_CONCURRENCY, 1, req, now, e,
                      "tenant '%s' has %u requests in flight, its limit (max_concurrent); "
                      "retry when one ends",
                      t->name, t->in_flight);
    double retry;
    if (l->rpm != PGD_TENANT_UNLIMITED && !pgd_bucket_take(&t->rpm, 1, now, &retry))
        return refuse(t, PGD_LIMIT_RPM, retry < 0 ? 60 : retry, req, now, e,
                      "tenant '%s' is over its limit of %lld requests per minute", t->name,
                      (long long)l->rpm);
    t->in_flight++;
    g->admitted = true;
    limit_headers(t, req, now);
    return 0;
}

int pgd_access_reserve(pgd_access *a, pgd_grant *g, pgd_http_request *req, double tokens,
                       pgd_api_error *e) {
    (void)a;
    pgd_tenant_live *t = g->t;
    if (!t || t->conf.limits.tpm == PGD_TENANT_UNLIMITED) return 0;
    uint64_t now = pgd_now_ns();
    double retry;
    if (!pgd_bucket_take(&t->tpm, tokens, now, &retry)) {
        if (retry < 0)
            return pgd_api_error_set(e, 400, "max_tokens", NULL,
                                     "the prompt and max_tokens (%.0f tokens) exceed tenant "
                                     "'%s''s limit of %lld tokens per minute",
                                     tokens, t->name, (long long)t->conf.limits.tpm);
        return refuse(t, PGD_LIMIT_TPM, retry, req, now, e,
                      "tenant '%s' is over its limit of %lld tokens per minute (this request "
                      "reserves %.0f)",
                      t->name, (long long)t->conf.limits.tpm, tokens);
    }
    g->reserved = tokens;
    limit_headers(t, req, now);
    return 0;
}

void pgd_access_release(pgd_access *a, pgd_grant *g, const char *reason, uint64_t prompt_tokens,
                        uint64_t completion_tokens, uint64_t cached_tokens, double ttft_s,
                        double e2e_s) {
    (void)a;
    pgd_tenant_live *t = g->t;
    if (!t || !g->admitted) return;
    g->admitted = false;
    t->in_flight--;
    uint64_t now = pgd_now_ns();
    double used = (double)(prompt_tokens + completion_tokens);
    if (g->reserved > used) pgd_bucket_refund(&t->tpm, g->reserved - used, now);
    g->reserved = 0;
    t->usage.requests++;
    t->usage.prompt_tokens += prompt_tokens;
    t->usage.completion_tokens += completion_tokens;
    t->usage.cached_tokens += cached_tokens;
    if (!t->m_prompt) return;
    pgd_series_add(t->m_prompt, (double)prompt_tokens);
    pgd_series_add(t->m_generation, (double)completion_tokens);
    for (int k = 0; reason && k < 3; k++)
        if (!strcmp(reason, k_reasons[k])) pgd_series_add(t->m_finished[k], 1);
    if (ttft_s >= 0) pgd_series_observe(t->m_ttft, ttft_s);
    if (e2e_s >= 0) pgd_series_observe(t->m_e2e, e2e_s);
}

uint64_t pgd_access_cache_salt(const pgd_tenant_live *t, const char *request_salt, size_t len) {
    uint64_t salt = t ? t->salt : 0;
    if (request_salt) salt = XXH3_64bits_withSeed(request_salt, len, salt) | 1;
    return salt;
}

/* ---- metrics and the admin view ------------------------------------------------------------ */

int pgd_access_attach_metrics(pgd_access *a, pgd_metrics *r, const char *prefix,
                              const char *model_name, uint32_t max_model_len) {
    (void)max_model_len;
    if (a->mode == MODE_OPEN) return 0;
    int rc = pgd_tenant_metrics_register(r, prefix, &a->tm);
    if (rc) return rc;
    a->registry = r;
    a->model_name = model_name;
    a->metrics = true;
    for (size_t i = 0; i < a->n_live && !rc; i++) rc = tenant_series(a, a->live[i]);
    return rc;
}

static const pgd_sched_tenant_stats *stats_of(const pgd_sched_stats *st, uint64_t id) {
    for (uint32_t i = 0; st && i < st->n_tenants; i++)
        if (st->tenants[i].id == id) return &st->tenants[i];
    return NULL;
}

void pgd_access_apply_stats(pgd_access *a, const pgd_sched_stats *st) {
    for (size_t i = 0; i < a->n_live; i++) {
        pgd_tenant_live *t = a->live[i];
        if (!t->m_running) continue;
        const pgd_sched_tenant_stats *s = stats_of(st, t->id);
        pgd_series_set(t->m_running, s ? s->n_running : 0);
        pgd_series_set(t->m_waiting, s ? s->n_waiting : 0);
        if (s) pgd_series_set(t->m_vtime, s->vtime);
    }
}

static json_t *limit_json(int64_t v) {
    return v == PGD_TENANT_UNLIMITED ? json_null() : json_integer(v);
}

static json_t *tenant_json(pgd_tenant_live *t, const pgd_sched_stats *st, uint64_t now) {
    const pgd_tenant_limits *l = &t->conf.limits;
    const pgd_sched_tenant_stats *s = stats_of(st, t->id);
    json_t *rem_req = l->rpm == PGD_TENANT_UNLIMITED
                          ? json_null()
                          : json_integer((json_int_t)floor(pgd_bucket_level(&t->rpm, now)));
    json_t *rem_tok = l->tpm == PGD_TENANT_UNLIMITED
                          ? json_null()
                          : json_integer((json_int_t)floor(pgd_bucket_level(&t->tpm, now)));
    return json_pack(
        "{s:s, s:b, s:f, s:i, s:s, s:{s:o, s:o, s:o, s:o, s:o}, s:{s:i, s:i, s:i, s:f, s:o, s:o},"
        " s:{s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I}}}",
        "name", t->name, "present", t->present, "weight", t->conf.weight, "priority",
        (int)t->conf.priority, "prefix_cache", t->conf.shared_cache ? "shared" : "isolated",
        "limits", "max_concurrent", limit_json(l->max_concurrent), "rpm", limit_json(l->rpm), "tpm",
        limit_json(l->tpm), "max_tokens", limit_json(l->max_tokens), "max_context",
        limit_json(l->max_context), "live", "in_flight", (int)t->in_flight, "running",
        s ? (int)s->n_running : 0, "waiting", s ? (int)s->n_waiting : 0, "virtual_tokens",
        s ? s->vtime : 0.0, "remaining_requests", rem_req, "remaining_tokens", rem_tok, "usage",
        "requests", (json_int_t)t->usage.requests, "prompt_tokens",
        (json_int_t)t->usage.prompt_tokens, "completion_tokens",
        (json_int_t)t->usage.completion_tokens, "cached_tokens", (json_int_t)t->usage.cached_tokens,
        "rate_limited", "concurrency", (json_int_t)t->usage.refused[PGD_LIMIT_CONCURRENCY], "rpm",
        (json_int_t)t->usage.refused[PGD_LIMIT_RPM], "tpm",
        (json_int_t)t->usage.refused[PGD_LIMIT_TPM]);
}

int pgd_access_admin_json(pgd_access *a, const pgd_sched_stats *st, pgd_buf *out) {
    json_t *data = json_array();
    uint64_t now = pgd_now_ns();
    int rc = data ? 0 : PGD_ENOMEM;
    for (size_t i = 0; i < a->n_live && !rc; i++) {
        json_t *t = tenant_json(a->live[i], st, now);
        if (!t || json_array_append_new(data, t)) rc = PGD_ENOMEM;
    }
    json_t *root = rc ? NULL : json_pack("{s:s, s:O}", "object", "list", "data", data);
    json_decref(data);
    if (!root) return PGD_ENOMEM;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s) return PGD_ENOMEM;
    rc = pgd_buf_puts(out, s);
    free(s);
    return rc;
}
