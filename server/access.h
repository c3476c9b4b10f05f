/*
 * server/access.h — who is calling and what they may do: authentication of every request
 * (tenant keys, admin keys, open paths), each tenant's live quota state (requests in flight,
 * requests and tokens per minute), the x-ratelimit-* headers, usage totals and per-tenant
 * metrics, the admin view (GET /admin/tenants) and reloading the tenants file (SIGHUP).
 *
 * Three modes, fixed at start:
 *   open      no tenants file, no --api-key: every request is served, tenant 0, no limits;
 *   one key   --api-key KEY: one tenant "default" holding KEY, no limits, and the paths open
 *             before tenants existed (/health, /metrics, /) stay open;
 *   tenants   --tenants FILE (server/tenants.h): every path but the file's "unauthenticated"
 *             list wants a key.
 * A key comes as "Authorization: Bearer KEY" (scheme case-insensitive) or, so a browser can
 * open the web page when "/" is not open, as HTTP Basic with the key as the password (a 401
 * for a page offers both). Admin keys may read /metrics, /admin/tenants and what tenant keys
 * may read without running the model (/, /v1/models, /health); tenant keys may use every
 * route but /metrics and /admin/... routes. Authentication happens before the route table: a caller
 * without a valid key learns nothing about which routes exist.
 *
 * Live state is kept per tenant name for the server's life (pgd_tenant_live; never freed while
 * the server runs, so a request may keep a pointer): a reload (pgd_access_reload) swaps the key
 * table and the tenants' settings at once; a tenant left out of the new file keeps its state
 * but no key finds it any more, and a request already admitted keeps the tenant, weight,
 * priority and salt it started with.
 *
 * Quotas, in the order a completion request meets them (routes.c): max_tokens (400, naming the
 * cap); in flight >= max_concurrent (429 "concurrency"); the rpm bucket (429 "rpm"); after
 * tokenization, prompt + output tokens against max_context (400) and the tpm bucket: the
 * request reserves prompt + n × max_tokens (429 "tpm"; more than the bucket holds when full is
 * a 400: it could never run) and is refunded what it did not use when it ends. Buckets refill
 * continuously (capacity per 60 s). Every response to a tenant's completion request carries
 * x-ratelimit-{limit,remaining,reset}-{requests,tokens} for the limits it has; a 429 carries
 * Retry-After (whole seconds, rounded up).
 *
 * Threading: the loop thread, all of it.
 */
#ifndef PGD_SERVER_ACCESS_H
#define PGD_SERVER_ACCESS_H

#include <stdbool.h>
#include <stdint.h>

#include "api/error.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/tenants.h"

typedef enum pgd_limit_kind {
    PGD_LIMIT_CONCURRENCY = 0,
    PGD_LIMIT_RPM,
    PGD_LIMIT_TPM,
    PGD_LIMIT_KINDS
} pgd_limit_kind;

/* "concurrency", "rpm", "tpm" (the metrics' reason label). */
const char *pgd_limit_kind_str(pgd_limit_kind k);

typedef struct pgd_tenant_usage {
    uint64_t requests; /* finished (any way) */
    uint64_t prompt_tokens, completion_tokens, cached_tokens;
    uint64_t refused[PGD_LIMIT_KINDS]; /* 429s by limit */
} pgd_tenant_usage;

typedef struct pgd_tenant_live {
    char name[PGD_TENANT_NAME_MAX];
    uint64_t id;          /* the scheduler's tenant: index + 1, fixed for the server's life */
    bool present;         /* in the tenants file now */
    pgd_tenant_conf conf; /* settings from the latest file (keys not kept) */
    uint64_t salt;        /* prefix-cache salt: a hash of the name, or 0 when "shared" */
    uint32_t in_flight;   /* requests admitted and not ended */
    pgd_bucket rpm, tpm;  /* used when the limit is set */
    pgd_tenant_usage usage;
    /* metrics (NULL until pgd_access_attach_metrics) */
    pgd_metric_series *m_prompt, *m_generation, *m_ttft, *m_e2e, *m_running, *m_waiting, *m_vtime,
        *m_limited[PGD_LIMIT_KINDS];
    pgd_metric_series *m_finished[3]; /* stop, length, abort */
} pgd_tenant_live;

typedef enum pgd_caller_kind {
    PGD_CALLER_NONE = 0, /* no valid key (answer 401) */
    PGD_CALLER_ANON,     /* open mode, or an open path without a key */
    PGD_CALLER_TENANT,
    PGD_CALLER_ADMIN,
} pgd_caller_kind;

typedef struct pgd_caller {
    pgd_caller_kind kind;
    pgd_tenant_live *t; /* TENANT */
} pgd_caller;

typedef struct pgd_access pgd_access;

/* Open mode when both are NULL (or api_key empty). Loads the tenants file now: 0, or its
 * error (PGD_EIO / PGD_EFORMAT with a detail naming the field), PGD_ENOMEM. */
int pgd_access_create(const char *tenants_path, const char *api_key, pgd_access **out);
void pgd_access_destroy(pgd_access *a); /* NULL is fine */

/* Whether keys are checked (one-key or tenants mode), and whether a tenants file is in use. */
bool pgd_access_enabled(const pgd_access *a);
bool pgd_access_has_tenants(const pgd_access *a);

/* Reload the tenants file: 0 (swapped in), or the error and the old tenants stay (detail in
 * pgd_error_detail). PGD_EINVAL without a tenants file. */
int pgd_access_reload(pgd_access *a);

/* Who sent `req` (see the top for the rules); a NONE caller gets a 401. */
void pgd_access_identify(pgd_access *a, pgd_http_request *req, pgd_caller *out);

/* Whether the caller may use `path` (an existing route): admin-only and tenant-only paths as
 * at the top. false: answer 403 with *e filled. */
bool pgd_access_permits(const pgd_access *a, const pgd_caller *c, const char *path,
                        pgd_api_error *e);

/* What a request of tenant t (NULL: anonymous) holds between admission and its end. */
typedef struct pgd_grant {
    pgd_tenant_live *t;
    bool admitted;   /* counted in t->in_flight */
    double reserved; /* tpm tokens taken */
} pgd_grant;

/* Admission before tokenization: concurrency, then rpm. 0 (admitted; headers set on req), or
 * PGD_EFULL with *e a 429 and Retry-After set on req. Anonymous grants always pass. */
int pgd_access_admit(pgd_access *a, pgd_tenant_live *t, pgd_http_request *req, pgd_grant *g,
                     pgd_api_error *e);

/* After tokenization: reserve `tokens` of the tpm bucket. 0 (headers updated); PGD_EFULL
 * (429, Retry-After set); PGD_EINVAL (400: more than the bucket ever holds). */
int pgd_access_reserve(pgd_access *a, pgd_grant *g, pgd_http_request *req, double tokens,
                       pgd_api_error *e);

/* The request ended (any way; answered or not): refund the unused reservation (`used` tokens
 * were spent), leave the in-flight count, add to the usage totals and metrics. `reason`
 * ("stop", "length", "abort") or NULL when it never ran; ttft_s / e2e_s < 0 when unknown.
 * Idempotent per grant. */
void pgd_access_release(pgd_access *a, pgd_grant *g, const char *reason, uint64_t prompt_tokens,
                        uint64_t completion_tokens, uint64_t cached_tokens, double ttft_s,
                        double e2e_s);

/* The prefix-cache salt of a request: its tenant's (none for an anonymous caller or a "shared"
 * tenant) mixed with the request's own cache_salt (may be NULL). 0 = unsalted. */
uint64_t pgd_access_cache_salt(const pgd_tenant_live *t, const char *request_salt, size_t len);

/* Register the per-tenant metric families in `r` (model_name labels them like pagoda's own)
 * and create every configured tenant's series. 0 or PGD_EINVAL / PGD_ENOMEM. Tenants added by
 * a later reload get theirs then. */
int pgd_access_attach_metrics(pgd_access *a, pgd_metrics *r, const char *prefix,
                              const char *model_name, uint32_t max_model_len);

/* Copy the scheduler's per-tenant numbers (running, waiting, virtual counter) into the
 * gauges (at scrape time). */
void pgd_access_apply_stats(pgd_access *a, const pgd_sched_stats *st);

/* GET /admin/tenants: {"object":"list","data":[{"name","present","weight","priority",
 * "prefix_cache","limits":{...,null = unlimited},"live":{"in_flight","running","waiting",
 * "virtual_tokens","remaining_requests","remaining_tokens"},"usage":{"requests",
 * "prompt_tokens","completion_tokens","cached_tokens","rate_limited":{"concurrency","rpm",
 * "tpm"}}}]} (st may be NULL before the model is loaded). 0 or PGD_ENOMEM. */
int pgd_access_admin_json(pgd_access *a, const pgd_sched_stats *st, pgd_buf *out);

#endif
