/*
 * server/metrics.h — a registry of Prometheus counters, gauges and histograms, its text
 * exposition (format 0.0.4, served at GET /metrics), and the set of metrics pagoda exports
 * under vLLM's names.
 *
 * Model. A registry holds metric families in registration order. A family has a type, a name, a
 * help text and a fixed list of label names (0..PGD_METRIC_MAX_LABELS). A series is one tuple of
 * label values of a family; it is created on first use (pgd_metric_series_get or any of the
 * pgd_metric_* shortcuts) and lives until the registry is destroyed, so a caller may keep a
 * series pointer and update it without any lookup (the hot path: one series per model). A
 * family without labels has its one series from registration on, exposed as 0.
 *
 * Semantics. Counters only go up: pgd_series_add takes v >= 0; pgd_series_set_total takes an
 * absolute total from a monotonic source (a scheduler snapshot read at scrape time) and never
 * moves the counter backwards (a smaller total is ignored). Gauges are set or added to. A
 * histogram has fixed finite upper bounds, strictly increasing; +Inf is implicit; an
 * observation lands in the first bucket whose bound is >= the value (Prometheus' `le`).
 *
 * Exposition (pgd_metrics_render): families in registration order, each as
 *   # HELP <name> <help, with \ and newline escaped>
 *   # TYPE <name> counter|gauge|histogram
 * then its series sorted by label values (byte order, label by label); labels in declaration
 * order; label values escaped (\\, \", \n). A histogram series gives cumulative
 * <name>_bucket{...,le="<bound>"} lines ending with le="+Inf", then <name>_sum and <name>_count.
 * Numbers: integers as integers, others in the shortest form that reads back exactly, and
 * +Inf / -Inf / NaN. A labelled family with no series yet gives its HELP and TYPE lines only.
 * Counter names must end in "_total" (the name is exposed as given).
 *
 * Threading: every function is safe from any thread. One mutex per registry guards the family
 * list, the series and all values; it is a leaf lock (nothing else is locked or called while
 * it is held). Updates are a lock + a few stores; rendering holds the lock while it formats.
 *
 * Lifetimes: pgd_metrics_destroy frees the families and series; no pointer obtained from the
 * registry may be used afterwards. Strings passed in are copied.
 */
#ifndef PGD_SERVER_METRICS_H
#define PGD_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "common/text.h"
#include "scheduler/request.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PGD_METRIC_MAX_LABELS  8
#define PGD_METRIC_MAX_BUCKETS 64 /* finite bounds of one histogram */

/* The Content-Type of the exposition. */
#define PGD_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum pgd_metric_type {
    PGD_METRIC_COUNTER = 1,
    PGD_METRIC_GAUGE = 2,
    PGD_METRIC_HISTOGRAM = 3,
} pgd_metric_type;

typedef struct pgd_metrics pgd_metrics;             /* a registry */
typedef struct pgd_metric pgd_metric;               /* one family */
typedef struct pgd_metric_series pgd_metric_series; /* one label-value tuple of a family */

/* 0 or PGD_ENOMEM. */
int pgd_metrics_create(pgd_metrics **out);
/* NULL is fine. */
void pgd_metrics_destroy(pgd_metrics *r);

/* Register a family. `name` matches [a-zA-Z_:][a-zA-Z0-9_:]* (a counter's ends in "_total"),
 * is unique in the registry; label names match [a-zA-Z_][a-zA-Z0-9_]*, do not start with "__",
 * are distinct, and a histogram's are not "le". `help` is any text (NULL means empty).
 * `label_names` may be NULL when n_labels is 0. Histogram bounds: 1..PGD_METRIC_MAX_BUCKETS
 * finite values, strictly increasing (+Inf is added). *out (may be NULL) gets the family, owned
 * by the registry. 0, PGD_EINVAL (with a detail) or PGD_ENOMEM. */
int pgd_metrics_add_counter(pgd_metrics *r, const char *name, const char *help,
                            const char *const *label_names, size_t n_labels, pgd_metric **out);
int pgd_metrics_add_gauge(pgd_metrics *r, const char *name, const char *help,
                          const char *const *label_names, size_t n_labels, pgd_metric **out);
int pgd_metrics_add_histogram(pgd_metrics *r, const char *name, const char *help,
                              const char *const *label_names, size_t n_labels, const double *bounds,
                              size_t n_bounds, pgd_metric **out);

/* The family registered under `name`, or NULL. */
pgd_metric *pgd_metrics_find(pgd_metrics *r, const char *name);

/* The series of `m` for label values values[0..n_labels) (NULL when the family has no labels),
 * created at zero if new. Values are UTF-8 text (any, including empty). *out stays valid until
 * the registry is destroyed. 0, PGD_EINVAL (a NULL value, invalid UTF-8) or PGD_ENOMEM. */
int pgd_metric_series_get(pgd_metric *m, const char *const *values, pgd_metric_series **out);

/* Updates of one series. 0, or PGD_EINVAL when the operation does not fit the type or the
 * value: add — counter (v >= 0, not NaN) or gauge; set — gauge; set_total — counter, v >= 0,
 * a value below the current one is ignored (returns 0); observe — histogram, v not NaN. */
int pgd_series_add(pgd_metric_series *s, double v);
int pgd_series_set(pgd_metric_series *s, double v);
int pgd_series_set_total(pgd_metric_series *s, double total);
int pgd_series_observe(pgd_metric_series *s, double v);

/* Shortcuts: pgd_metric_series_get then the update. Same results. */
int pgd_metric_add(pgd_metric *m, const char *const *values, double v);
int pgd_metric_set(pgd_metric *m, const char *const *values, double v);
int pgd_metric_set_total(pgd_metric *m, const char *const *values, double total);
int pgd_metric_observe(pgd_metric *m, const char *const *values, double v);

/* Read back: a counter's or gauge's value, a histogram's sum (value) and count. */
double pgd_series_value(pgd_metric_series *s);
uint64_t pgd_series_count(pgd_metric_series *s);

/* Append the exposition of the whole registry to `out` (an empty registry appends nothing).
 * 0 or PGD_ENOMEM (out may then hold part of it). */
int pgd_metrics_render(pgd_metrics *r, pgd_buf *out);

/* ---- pagoda's metrics ----------------------------------------------------------------------
 *
 * pgd_pagoda_metrics_register adds, under `prefix` (NULL: "pagoda_"; vLLM uses "vllm:"),
 * every series labelled model_name:
 *   histograms  time_to_first_token_seconds, inter_token_latency_seconds,
 *               e2e_request_latency_seconds, request_queue_time_seconds (seconds),
 *               request_prompt_tokens, request_generation_tokens (tokens; 1-2-5 buckets up to
 *               max_model_len)
 *   counters    prompt_tokens_total, generation_tokens_total,
 *               request_success_total{finished_reason} (stop, length, abort pre-created),
 *               num_preemptions_total, prefix_cache_queries_total, prefix_cache_hits_total
 *               (in tokens), requests_aborted_total
 *   gauges      num_requests_running, num_requests_waiting, kv_cache_usage_perc (0..1),
 *               build_info{version,model_name} = 1, responses_stored and
 *               responses_store_bytes (the stored /v1/responses answers and the bytes they
 *               count against --responses-store-mb; 0 without a store)
 * Who feeds what: the HTTP loop observes TTFT, inter-token latency and, per finished request,
 * pgd_pagoda_metrics_request_done (which also counts requests_aborted_total: API requests,
 * not the engine requests of their prompts); at each scrape, pgd_pagoda_metrics_apply_stats
 * copies a scheduler snapshot (pgd_worker_get_stats) into the gauges and the counters the
 * scheduler counts (tokens, preemptions, prefix cache) — with set_total, never backwards.
 * A request refused before it was queued (400, 429, 503) finishes nothing and counts in
 * none of these.
 *
 * Note: Prometheus' own linter (promtool check metrics) flags ':' in metric names because it
 * reserves colons for recording rules; vLLM uses them anyway and so does the default prefix.
 * A prefix such as "pagoda_" gives lint-clean names. */
typedef struct pgd_pagoda_metrics {
    pgd_metrics *registry;
    /* histograms */
    pgd_metric_series *ttft, *itl, *e2e, *queue_time, *prompt_tokens_hist, *generation_tokens_hist;
    /* counters */
    pgd_metric_series *prompt_tokens, *generation_tokens, *preemptions, *prefix_queries,
        *prefix_hits, *aborted;
    pgd_metric *success; /* labels: model_name, finished_reason */
    /* gauges */
    pgd_metric_series *running, *waiting, *kv_usage, *build_info, *stored, *stored_bytes;
    const char *model_name; /* as registered (the registry's copy) */
} pgd_pagoda_metrics;

/* Register pagoda's metrics in `r` and fill *pm with its series (pm is the caller's; the series
 * belong to r). `model_name` labels every series; `max_model_len` bounds the token histograms'
 * buckets (0: 131072). 0, PGD_EINVAL (a family already registered, a bad prefix) or
 * PGD_ENOMEM. */
int pgd_pagoda_metrics_register(pgd_metrics *r, const char *prefix, const char *model_name,
                                uint32_t max_model_len, pgd_pagoda_metrics *pm);

/* Copy a scheduler snapshot: gauges running / waiting / KV usage set; prompt and generation
 * tokens, preemptions, prefix-cache queries and hits set as totals (a total below what was
 * exposed before is ignored, so a counter never goes backwards). The scheduler's n_aborted
 * counts engine requests and is not used. */
void pgd_pagoda_metrics_apply_stats(pgd_pagoda_metrics *pm, const pgd_sched_stats *st);

/* One finished request: request_success_total{finished_reason} += 1 (reason as given, e.g.
 * pgd_finish_reason_str; NULL or "" counts nothing; "abort" also counts in
 * requests_aborted_total), and the histograms queue time, end-to-end
 * latency (seconds; a negative time is unknown and not observed), prompt and generation tokens.
 * 0 or PGD_ENOMEM / PGD_EINVAL (a new reason label). */
int pgd_pagoda_metrics_request_done(pgd_pagoda_metrics *pm, const char *finished_reason,
                                    double queue_s, double e2e_s, uint32_t prompt_tokens,
                                    uint32_t generation_tokens);

/* ---- per-tenant metrics ---------------------------------------------------------------------
 *
 * pgd_tenant_metrics_register adds, under `prefix`, families labelled model_name and tenant
 * (configured tenant names only, so the cardinality is bounded by the tenants file):
 *   counters    tenant_requests_total{finished_reason}, tenant_prompt_tokens_total,
 *               tenant_generation_tokens_total, tenant_rate_limited_total{reason}
 *               (reason: concurrency, rpm, tpm)
 *   histograms  tenant_time_to_first_token_seconds, tenant_e2e_request_latency_seconds (the
 *               same buckets as the server-wide ones)
 *   gauges      tenant_num_requests_running, tenant_num_requests_waiting (sequences),
 *               tenant_virtual_tokens (the scheduler's fair-share counter: weighted tokens
 *               served, caught up when the tenant becomes active)
 * The families only; the series are made per tenant by whoever knows the tenants
 * (server/access.h). */
typedef struct pgd_tenant_metrics {
    pgd_metric *requests, *prompt_tokens, *generation_tokens, *rate_limited;
    pgd_metric *ttft, *e2e;
    pgd_metric *running, *waiting, *vtime;
} pgd_tenant_metrics;

/* 0, PGD_EINVAL (already registered, a bad prefix) or PGD_ENOMEM. */
int pgd_tenant_metrics_register(pgd_metrics *r, const char *prefix, pgd_tenant_metrics *tm);

#ifdef __cplusplus
}
#endif

#endif
