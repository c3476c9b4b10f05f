/*
 * tests/unit/test_metrics.c — the metrics registry (server/metrics.h): exposition text checked
 * line by line against hand-written expectations (escaping, ordering, cumulative buckets, +Inf,
 * _sum/_count, number spellings, empty registries, many label values), argument validation,
 * set_total never going backwards, concurrent updates from several threads, pagoda's metric set,
 * and — when promtool is on the PATH — Prometheus' own parser and linter over a full exposition.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/text.h"
#include "server/metrics.h"
#include "testutil.h"

/* Render `r` and compare with `want` line by line (each entry one line, no newline); reports
 * the first difference. */
static void check_lines_at(pgd_metrics *r, const char *const *want, size_t n_want, const char *file,
                           int line) {
    pgd_buf b = PGD_BUF_INIT;
    int rc = pgd_metrics_render(r, &b);
    if (rc != 0) {
        fprintf(stderr, "  %s:%d: render failed: %d\n", file, line, rc);
        tu_failed_checks++;
        pgd_buf_free(&b);
        return;
    }
    const char *p = b.data ? b.data : "";
    size_t i = 0;
    while (*p) {
        const char *nl = strchr(p, '\n');
        if (!nl) {
            fprintf(stderr, "  %s:%d: output does not end in a newline: \"%s\"\n", file, line, p);
            tu_failed_checks++;
            break;
        }
        size_t len = (size_t)(nl - p);
        if (i >= n_want) {
            fprintf(stderr, "  %s:%d: extra line %zu: \"%.*s\"\n", file, line, i + 1, (int)len, p);
            tu_failed_checks++;
            break;
        }
        if (strlen(want[i]) != len || memcmp(want[i], p, len) != 0) {
            fprintf(stderr, "  %s:%d: line %zu:\n    got:  \"%.*s\"\n    want: \"%s\"\n", file,
                    line, i + 1, (int)len, p, want[i]);
            tu_failed_checks++;
            break;
        }
        i++;
        p = nl + 1;
    }
    if (!*p && i < n_want) {
        fprintf(stderr, "  %s:%d: missing line %zu: \"%s\"\n", file, line, i + 1, want[i]);
        tu_failed_checks++;
    }
    pgd_buf_free(&b);
}
#define CHECK_LINES(r, want) check_lines_at(r, want, PGD_ARRAY_LEN(want), __FILE__, __LINE__)

static char *render(pgd_metrics *r) {
    pgd_buf b = PGD_BUF_INIT;
    if (pgd_metrics_render(r, &b) != 0) {
        pgd_buf_free(&b);
        return NULL;
    }
    return pgd_buf_steal(&b, NULL);
}

static int has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len == n && memcmp(p, line, n) == 0) return 1;
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

/* ---- exposition ------------------------------------------------------------------------------*/

static void test_empty_registry(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_buf b = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_metrics_render(r, &b), 0);
    CHECK_EQ_INT(b.len, 0);
    pgd_buf_free(&b);

    /* Labelled families with no series: HELP and TYPE only. A label-less one shows 0. */
    static const char *const lab[] = {"model_name"};
    CHECK_EQ_INT(pgd_metrics_add_counter(r, "req_total", "Requests.", lab, 1, NULL), 0);
    CHECK_EQ_INT(
        pgd_metrics_add_histogram(r, "lat_seconds", "", lab, 1, (const double[]){0.5, 1}, 2, NULL),
        0);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "up", "Up.", NULL, 0, NULL), 0);
    CHECK_EQ_INT(pgd_metrics_add_histogram(r, "size_bytes", "Sizes.", NULL, 0, (const double[]){10},
                                           1, NULL),
                 0);
    static const char *const want[] = {
        "# HELP req_total Requests.",
        "# TYPE req_total counter",
        "# HELP lat_seconds ",
        "# TYPE lat_seconds histogram",
        "# HELP up Up.",
        "# TYPE up gauge",
        "up 0",
        "# HELP size_bytes Sizes.",
        "# TYPE size_bytes histogram",
        "size_bytes_bucket{le=\"10\"} 0",
        "size_bytes_bucket{le=\"+Inf\"} 0",
        "size_bytes_sum 0",
        "size_bytes_count 0",
    };
    CHECK_LINES(r, want);
    pgd_metrics_destroy(r);
    pgd_metrics_destroy(NULL);
}

static void test_counter_and_gauge(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *c, *g, *plain;
    static const char *const lab[] = {"model_name", "reason"};
    REQUIRE(pgd_metrics_add_counter(r, "x:done_total", "Finished.", lab, 2, &c) == 0);
    REQUIRE(pgd_metrics_add_gauge(r, "x:queue", "Queue length.", lab, 1, &g) == 0);
    REQUIRE(pgd_metrics_add_counter(r, "plain_total", "No labels.", NULL, 0, &plain) == 0);

    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"m", "stop"}, 1), 0);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"m", "stop"}, 2), 0);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"m", "length"}, 0.5), 0);
    CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){"m"}, 7), 0);
    CHECK_EQ_INT(pgd_metric_add(g, (const char *[]){"m"}, -9), 0); /* gauges go down */
    CHECK_EQ_INT(pgd_metric_add(plain, NULL, 41), 0);
    pgd_metric_series *s;
    REQUIRE(pgd_metric_series_get(plain, NULL, &s) == 0);
    CHECK_EQ_INT(pgd_series_add(s, 1), 0);
    CHECK_NEAR(pgd_series_value(s), 42, 0);

    static const char *const want[] = {
        "# HELP x:done_total Finished.",
        "# TYPE x:done_total counter",
        "x:done_total{model_name=\"m\",reason=\"length\"} 0.5",
        "x:done_total{model_name=\"m\",reason=\"stop\"} 3",
        "# HELP x:queue Queue length.",
        "# TYPE x:queue gauge",
        "x:queue{model_name=\"m\"} -2",
        "# HELP plain_total No labels.",
        "# TYPE plain_total counter",
        "plain_total 42",
    };
    CHECK_LINES(r, want);
    pgd_metrics_destroy(r);
}

static void test_escaping(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *g;
    static const char *const lab[] = {"v"};
    REQUIRE(pgd_metrics_add_gauge(r, "esc", "Back\\slash, \"quotes\" and\na newline.", lab, 1,
                                  &g) == 0);
    CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){"a\\b"}, 1), 0);
    CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){"say \"hi\""}, 2), 0);
    CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){"two\nlines"}, 3), 0);
    CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){"\\\"\n"}, 4), 0);
    CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){""}, 5), 0);
    CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){"caf\xc3\xa9 {x=1}, ok"}, 6), 0);
    /* Sorted by bytes: "" < "\\..." (0x5c) < "a..." < "caf..." < "say..." < "two...". */
    static const char *const want[] = {
        "# HELP esc Back\\\\slash, \"quotes\" and\\na newline.",
        "# TYPE esc gauge",
        "esc{v=\"\"} 5",
        "esc{v=\"\\\\\\\"\\n\"} 4",
        "esc{v=\"a\\\\b\"} 1",
        "esc{v=\"caf\xc3\xa9 {x=1}, ok\"} 6",
        "esc{v=\"say \\\"hi\\\"\"} 2",
        "esc{v=\"two\\nlines\"} 3",
    };
    CHECK_LINES(r, want);
    pgd_metrics_destroy(r);
}

static void test_histogram(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *h;
    static const char *const lab[] = {"model_name"};
    static const double bounds[] = {0.1, 0.5, 1, 2.5};
    REQUIRE(pgd_metrics_add_histogram(r, "lat_seconds", "Latency.", lab, 1, bounds, 4, &h) == 0);
    const char *m[] = {"m"};
    /* 0.05 and 0.1 (on the bound: le is inclusive) -> 0.1; 0.3 -> 0.5; 1 -> 1; 3 and 100 ->
     * +Inf only; a bucket (2.5) stays empty but still shows the cumulative count. */
    static const double obs[] = {0.05, 0.1, 0.3, 1, 3, 100};
    for (size_t i = 0; i < PGD_ARRAY_LEN(obs); i++)
        CHECK_EQ_INT(pgd_metric_observe(h, m, obs[i]), 0);
    pgd_metric_series *s;
    REQUIRE(pgd_metric_series_get(h, m, &s) == 0);
    CHECK_EQ_INT(pgd_series_count(s), 6);
    CHECK_NEAR(pgd_series_value(s), 104.45, 1e-9);
    /* A second series, created later, sorting first. */
    CHECK_EQ_INT(pgd_metric_observe(h, (const char *[]){"a"}, 0.7), 0);
    static const char *const want[] = {
        "# HELP lat_seconds Latency.",
        "# TYPE lat_seconds histogram",
        "lat_seconds_bucket{model_name=\"a\",le=\"0.1\"} 0",
        "lat_seconds_bucket{model_name=\"a\",le=\"0.5\"} 0",
        "lat_seconds_bucket{model_name=\"a\",le=\"1\"} 1",
        "lat_seconds_bucket{model_name=\"a\",le=\"2.5\"} 1",
        "lat_seconds_bucket{model_name=\"a\",le=\"+Inf\"} 1",
        "lat_seconds_sum{model_name=\"a\"} 0.7",
        "lat_seconds_count{model_name=\"a\"} 1",
        "lat_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2",
        "lat_seconds_bucket{model_name=\"m\",le=\"0.5\"} 3",
        "lat_seconds_bucket{model_name=\"m\",le=\"1\"} 4",
        "lat_seconds_bucket{model_name=\"m\",le=\"2.5\"} 4",
        "lat_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 6",
        "lat_seconds_sum{model_name=\"m\"} 104.45",
        "lat_seconds_count{model_name=\"m\"} 6",
    };
    CHECK_LINES(r, want);

    /* Infinite observations count in +Inf and make the sum infinite. */
    pgd_metric *h2;
    REQUIRE(pgd_metrics_add_histogram(r, "h2", "", NULL, 0, (const double[]){-1, 0}, 2, &h2) == 0);
    CHECK_EQ_INT(pgd_metric_observe(h2, NULL, -2), 0);
    CHECK_EQ_INT(pgd_metric_observe(h2, NULL, 0), 0);
    CHECK_EQ_INT(pgd_metric_observe(h2, NULL, 1.0 / 0.0), 0);
    char *text = render(r);
    REQUIRE(text);
    CHECK(has_line(text, "h2_bucket{le=\"-1\"} 1"));
    CHECK(has_line(text, "h2_bucket{le=\"0\"} 2"));
    CHECK(has_line(text, "h2_bucket{le=\"+Inf\"} 3"));
    CHECK(has_line(text, "h2_sum +Inf"));
    CHECK(has_line(text, "h2_count 3"));
    free(text);
    pgd_metrics_destroy(r);
}

static void test_numbers(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *g;
    static const char *const lab[] = {"k"};
    REQUIRE(pgd_metrics_add_gauge(r, "num", "", lab, 1, &g) == 0);
    struct {
        const char *k;
        double v;
    } cases[] = {
        {"a", 0.1},  {"b", 1e-9},           {"c", 1e20},       {"d", 3},
        {"e", -2.5}, {"f", 0.0 / 0.0},      {"g", -1.0 / 0.0}, {"h", 1.0 / 3.0},
        {"i", -0.0}, {"j", 123456789012.0}, {"k", 0.1 + 0.2},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++)
        CHECK_EQ_INT(pgd_metric_set(g, (const char *[]){cases[i].k}, cases[i].v), 0);
    static const char *const want[] = {
        "# HELP num ",
        "# TYPE num gauge",
        "num{k=\"a\"} 0.1",
        "num{k=\"b\"} 1e-09",
        "num{k=\"c\"} 1e+20",
        "num{k=\"d\"} 3",
        "num{k=\"e\"} -2.5",
        "num{k=\"f\"} NaN",
        "num{k=\"g\"} -Inf",
        "num{k=\"h\"} 0.3333333333333333",
        "num{k=\"i\"} 0",
        "num{k=\"j\"} 123456789012",
        "num{k=\"k\"} 0.30000000000000004",
    };
    CHECK_LINES(r, want);
    pgd_metrics_destroy(r);
}

static void test_ordering(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *z, *a;
    static const char *const lab[] = {"x", "y"};
    /* Families keep registration order (z before a); series sort by x, then y. */
    REQUIRE(pgd_metrics_add_counter(r, "z_total", "Z.", lab, 2, &z) == 0);
    REQUIRE(pgd_metrics_add_gauge(r, "a", "A.", lab, 1, &a) == 0);
    CHECK_EQ_INT(pgd_metric_add(z, (const char *[]){"b", "1"}, 1), 0);
    CHECK_EQ_INT(pgd_metric_add(z, (const char *[]){"a", "2"}, 2), 0);
    CHECK_EQ_INT(pgd_metric_add(z, (const char *[]){"b", "0"}, 3), 0);
    CHECK_EQ_INT(pgd_metric_add(z, (const char *[]){"a", "10"}, 4), 0);
    CHECK_EQ_INT(pgd_metric_add(z, (const char *[]){"B", "9"}, 5), 0);
    CHECK_EQ_INT(pgd_metric_add(z, (const char *[]){"ab", ""}, 6), 0);
    CHECK_EQ_INT(pgd_metric_set(a, (const char *[]){"q"}, 1), 0);
    CHECK_EQ_INT(pgd_metric_set(a, (const char *[]){"p"}, 2), 0);
    static const char *const want[] = {
        "# HELP z_total Z.",
        "# TYPE z_total counter",
        "z_total{x=\"B\",y=\"9\"} 5",
        "z_total{x=\"a\",y=\"10\"} 4",
        "z_total{x=\"a\",y=\"2\"} 2",
        "z_total{x=\"ab\",y=\"\"} 6",
        "z_total{x=\"b\",y=\"0\"} 3",
        "z_total{x=\"b\",y=\"1\"} 1",
        "# HELP a A.",
        "# TYPE a gauge",
        "a{x=\"p\"} 2",
        "a{x=\"q\"} 1",
    };
    CHECK_LINES(r, want);
    CHECK(pgd_metrics_find(r, "a") == a);
    CHECK(pgd_metrics_find(r, "z_total") == z);
    CHECK(pgd_metrics_find(r, "nope") == NULL);
    pgd_metrics_destroy(r);
}

static void test_many_label_values(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *c;
    static const char *const lab[] = {"tenant"};
    REQUIRE(pgd_metrics_add_counter(r, "t_total", "Per tenant.", lab, 1, &c) == 0);
    enum { N = 1000 };
    /* Create in a scrambled order (7 is coprime with N); tenant i gets i + 1, added in steps. */
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < N; k++) {
            int i = (k * 7) % N;
            char v[16];
            snprintf(v, sizeof(v), "t%04d", i);
            double amount = pass == 0 ? 1 : i;
            CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){v}, amount), 0);
        }
    }
    pgd_metric_series *s1, *s2;
    REQUIRE(pgd_metric_series_get(c, (const char *[]){"t0500"}, &s1) == 0);
    REQUIRE(pgd_metric_series_get(c, (const char *[]){"t0500"}, &s2) == 0);
    CHECK(s1 == s2);
    CHECK_NEAR(pgd_series_value(s1), 501, 0);

    static char lines[N + 2][64];
    static const char *want[N + 2];
    snprintf(lines[0], sizeof(lines[0]), "# HELP t_total Per tenant.");
    snprintf(lines[1], sizeof(lines[1]), "# TYPE t_total counter");
    for (int i = 0; i < N; i++)
        snprintf(lines[i + 2], sizeof(lines[i + 2]), "t_total{tenant=\"t%04d\"} %d", i, i + 1);
    for (int i = 0; i < N + 2; i++) want[i] = lines[i];
    check_lines_at(r, want, N + 2, __FILE__, __LINE__);
    pgd_metrics_destroy(r);
}

/* ---- contracts -------------------------------------------------------------------------------*/

static void test_validation(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    static const char *const ok[] = {"model_name"};
    static const double b[] = {1, 2};
    CHECK_EQ_INT(pgd_metrics_add_counter(r, "requests", "", NULL, 0, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "9lives", "", NULL, 0, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "has-dash", "", NULL, 0, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "", "", NULL, 0, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "g", "", (const char *[]){"a:b"}, 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "g", "", (const char *[]){"__x"}, 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "g", "", (const char *[]){"a", "a"}, 2, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "g", "", NULL, 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "g", "", ok, PGD_METRIC_MAX_LABELS + 1, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_histogram(r, "h", "", (const char *[]){"le"}, 1, b, 2, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_histogram(r, "h", "", NULL, 0, (const double[]){2, 1}, 2, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_histogram(r, "h", "", NULL, 0, (const double[]){1, 1}, 2, NULL),
                 PGD_EINVAL);
    CHECK_EQ_INT(
        pgd_metrics_add_histogram(r, "h", "", NULL, 0, (const double[]){1, 1.0 / 0.0}, 2, NULL),
        PGD_EINVAL);
    CHECK_EQ_INT(pgd_metrics_add_histogram(r, "h", "", NULL, 0, b, 0, NULL), PGD_EINVAL);
    /* Nothing of the above was registered. */
    pgd_buf buf = PGD_BUF_INIT;
    CHECK_EQ_INT(pgd_metrics_render(r, &buf), 0);
    CHECK_EQ_INT(buf.len, 0);
    pgd_buf_free(&buf);

    pgd_metric *c, *g, *h;
    REQUIRE(pgd_metrics_add_counter(r, "c_total", "", ok, 1, &c) == 0);
    REQUIRE(pgd_metrics_add_gauge(r, "g", "", ok, 1, &g) == 0);
    REQUIRE(pgd_metrics_add_histogram(r, "h", "", ok, 1, b, 2, &h) == 0);
    CHECK_EQ_INT(pgd_metrics_add_gauge(r, "g", "", NULL, 0, NULL), PGD_EINVAL); /* twice */
    CHECK_EQ_INT(pgd_metrics_add_counter(r, "c_total", "", ok, 1, NULL), PGD_EINVAL);

    const char *m[] = {"m"};
    CHECK_EQ_INT(pgd_metric_add(c, m, -1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, m, 0.0 / 0.0), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_set(c, m, 5), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_observe(c, m, 5), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_set_total(g, m, 5), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_observe(g, m, 5), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(h, m, 5), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_set(h, m, 5), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_observe(h, m, 0.0 / 0.0), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, NULL, 1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){NULL}, 1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"bad \xff utf8"}, 1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"overlong \xc0\xaf"}, 1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"cut \xe2\x82"}, 1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"surrogate \xed\xa0\x80"}, 1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_metric_add(c, (const char *[]){"euro \xe2\x82\xac \xf0\x9f\x8f\xaf"}, 1), 0);
    /* The failed updates changed nothing: only the UTF-8 series exists, at 1; g, h are empty. */
    static const char *const want[] = {
        "# HELP c_total ",
        "# TYPE c_total counter",
        "c_total{model_name=\"euro \xe2\x82\xac \xf0\x9f\x8f\xaf\"} 1",
        "c_total{model_name=\"m\"} 0",
        "# HELP g ",
        "# TYPE g gauge",
        "g{model_name=\"m\"} 0",
        "# HELP h ",
        "# TYPE h histogram",
        "h_bucket{model_name=\"m\",le=\"1\"} 0",
        "h_bucket{model_name=\"m\",le=\"2\"} 0",
        "h_bucket{model_name=\"m\",le=\"+Inf\"} 0",
        "h_sum{model_name=\"m\"} 0",
        "h_count{model_name=\"m\"} 0",
    };
    CHECK_LINES(r, want);
    pgd_metrics_destroy(r);
}

static void test_set_total_monotonic(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *c;
    REQUIRE(pgd_metrics_add_counter(r, "snap_total", "", NULL, 0, &c) == 0);
    pgd_metric_series *s;
    REQUIRE(pgd_metric_series_get(c, NULL, &s) == 0);
    CHECK_EQ_INT(pgd_series_set_total(s, 10), 0);
    CHECK_NEAR(pgd_series_value(s), 10, 0);
    CHECK_EQ_INT(pgd_series_set_total(s, 7), 0); /* a stale snapshot: ignored */
    CHECK_NEAR(pgd_series_value(s), 10, 0);
    CHECK_EQ_INT(pgd_series_set_total(s, 25), 0);
    CHECK_NEAR(pgd_series_value(s), 25, 0);
    CHECK_EQ_INT(pgd_series_set_total(s, -1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_series_set_total(s, 0.0 / 0.0), PGD_EINVAL);
    CHECK_EQ_INT(pgd_series_add(s, 5), 0); /* adds mix with totals */
    CHECK_NEAR(pgd_series_value(s), 30, 0);
    CHECK_EQ_INT(pgd_series_set_total(s, 29), 0);
    CHECK_NEAR(pgd_series_value(s), 30, 0);
    static const char *const want[] = {"# HELP snap_total ", "# TYPE snap_total counter",
                                       "snap_total 30"};
    CHECK_LINES(r, want);
    pgd_metrics_destroy(r);
}

/* ---- threads ---------------------------------------------------------------------------------*/

enum { N_THREADS = 8, N_ITERS = 20000 };

typedef struct worker {
    pgd_metric *c, *g, *h;
    pgd_metric_series *shared;
    pgd_metrics *r;
    int id;
    int errors;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    char mine[16], pair[16];
    snprintf(mine, sizeof(mine), "t%d", w->id);
    snprintf(pair, sizeof(pair), "p%d", w->id % 2); /* two threads race to create each */
    for (int i = 0; i < N_ITERS; i++) {
        w->errors += pgd_series_add(w->shared, 1) != 0;
        w->errors += pgd_metric_add(w->c, (const char *[]){mine}, 1) != 0;
        w->errors += pgd_metric_add(w->c, (const char *[]){pair}, 2) != 0;
        w->errors += pgd_metric_add(w->g, (const char *[]){"x"}, (i & 1) ? -1 : 1) != 0;
        w->errors += pgd_metric_observe(w->h, (const char *[]){"x"}, (double)(i % 4)) != 0;
        if (i % 1000 == 0) { /* scrapes interleave with updates */
            pgd_buf b = PGD_BUF_INIT;
            w->errors += pgd_metrics_render(w->r, &b) != 0;
            pgd_buf_free(&b);
        }
    }
    return NULL;
}

static void test_concurrent_updates(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_metric *c, *g, *h, *total;
    static const char *const lab[] = {"k"};
    REQUIRE(pgd_metrics_add_counter(r, "ops_total", "", lab, 1, &c) == 0);
    REQUIRE(pgd_metrics_add_gauge(r, "level", "", lab, 1, &g) == 0);
    REQUIRE(pgd_metrics_add_histogram(r, "vals", "", lab, 1, (const double[]){0, 1, 2}, 3, &h) ==
            0);
    REQUIRE(pgd_metrics_add_counter(r, "all_total", "", NULL, 0, &total) == 0);
    pgd_metric_series *shared;
    REQUIRE(pgd_metric_series_get(total, NULL, &shared) == 0);

    pthread_t th[N_THREADS];
    worker w[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){.c = c, .g = g, .h = h, .shared = shared, .r = r, .id = i};
        REQUIRE(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    int errors = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        errors += w[i].errors;
    }
    CHECK_EQ_INT(errors, 0);
    CHECK_NEAR(pgd_series_value(shared), (double)N_THREADS * N_ITERS, 0);
    pgd_metric_series *s;
    for (int i = 0; i < N_THREADS; i++) {
        char v[16];
        snprintf(v, sizeof(v), "t%d", i);
        REQUIRE(pgd_metric_series_get(c, (const char *[]){v}, &s) == 0);
        CHECK_NEAR(pgd_series_value(s), N_ITERS, 0);
    }
    for (int i = 0; i < 2; i++) {
        char v[16];
        snprintf(v, sizeof(v), "p%d", i);
        REQUIRE(pgd_metric_series_get(c, (const char *[]){v}, &s) == 0);
        CHECK_NEAR(pgd_series_value(s), 2.0 * N_ITERS * (N_THREADS / 2), 0);
    }
    REQUIRE(pgd_metric_series_get(g, (const char *[]){"x"}, &s) == 0);
    CHECK_NEAR(pgd_series_value(s), 0, 0);
    REQUIRE(pgd_metric_series_get(h, (const char *[]){"x"}, &s) == 0);
    CHECK_EQ_INT(pgd_series_count(s), (uint64_t)N_THREADS * N_ITERS);
    CHECK_NEAR(pgd_series_value(s), (double)N_THREADS * N_ITERS / 4 * (0 + 1 + 2 + 3), 0);

    /* Exactly 8 + 2 counter series exist (no duplicates from racing creators). */
    char *text = render(r);
    REQUIRE(text);
    int n_ops = 0;
    for (const char *p = text; (p = strstr(p, "\nops_total{")); p++) n_ops++;
    CHECK_EQ_INT(n_ops, N_THREADS + 2);
    char line[128];
    snprintf(line, sizeof(line), "vals_bucket{k=\"x\",le=\"0\"} %d", N_THREADS * N_ITERS / 4);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "vals_bucket{k=\"x\",le=\"2\"} %d", N_THREADS * N_ITERS / 4 * 3);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "vals_bucket{k=\"x\",le=\"+Inf\"} %d", N_THREADS * N_ITERS);
    CHECK(has_line(text, line));
    free(text);
    pgd_metrics_destroy(r);
}

/* ---- pagoda's set ----------------------------------------------------------------------------*/

static void pagoda_updates(pgd_pagoda_metrics *pm) {
    pgd_sched_stats st;
    memset(&st, 0, sizeof(st));
    st.n_running = 3;
    st.n_waiting = 2;
    st.kv_usage = 0.375;
    st.prompt_tokens = 120;
    st.generation_tokens = 45;
    st.n_preemptions = 1;
    st.prefix_query_tokens = 120;
    st.prefix_hit_tokens = 64;
    st.n_aborted = 1;
    pgd_pagoda_metrics_apply_stats(pm, &st);
    pgd_series_observe(pm->ttft, 0.042);
    for (int i = 0; i < 10; i++) pgd_series_observe(pm->itl, 0.0045 + 0.001 * i);
    pgd_pagoda_metrics_request_done(pm, "stop", 0.002, 1.25, 40, 15);
    pgd_pagoda_metrics_request_done(pm, "length", -1, 0.5, 80, 30);
    pgd_pagoda_metrics_request_done(pm, "abort", 0.01, -1, 7, 0);
}

static void test_pagoda_metrics(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_pagoda_metrics pm;
    REQUIRE(pgd_pagoda_metrics_register(r, NULL, "SmolLM2 \"135M\"", 2048, &pm) == 0);
    CHECK_EQ_STR(pm.model_name, "SmolLM2 \"135M\"");
    /* Registering twice in one registry fails (the names are taken). */
    pgd_pagoda_metrics pm2;
    CHECK_EQ_INT(pgd_pagoda_metrics_register(r, NULL, "x", 0, &pm2), PGD_EINVAL);
    pagoda_updates(&pm);

    char *text = render(r);
    REQUIRE(text);
#define M      "{model_name=\"SmolLM2 \\\"135M\\\"\"}"
#define ML(le) "{model_name=\"SmolLM2 \\\"135M\\\"\",le=\"" le "\"}"
    static const char *const expect[] = {
        "# TYPE pagoda_build_info gauge",
        "pagoda_build_info{version=\"" PGD_VERSION "\",model_name=\"SmolLM2 \\\"135M\\\"\"} 1",
        "# TYPE pagoda_num_requests_running gauge",
        "pagoda_num_requests_running" M " 3",
        "pagoda_num_requests_waiting" M " 2",
        "pagoda_kv_cache_usage_perc" M " 0.375",
        "# TYPE pagoda_num_preemptions_total counter",
        "pagoda_num_preemptions_total" M " 1",
        "pagoda_prefix_cache_queries_total" M " 120",
        "pagoda_prefix_cache_hits_total" M " 64",
        "pagoda_prompt_tokens_total" M " 120",
        "pagoda_generation_tokens_total" M " 45",
        "pagoda_requests_aborted_total" M " 1",
        "# TYPE pagoda_request_success_total counter",
        "pagoda_request_success_total{model_name=\"SmolLM2 "
        "\\\"135M\\\"\",finished_reason=\"abort\"} 1",
        "pagoda_request_success_total{model_name=\"SmolLM2 "
        "\\\"135M\\\"\",finished_reason=\"length\"} 1",
        "pagoda_request_success_total{model_name=\"SmolLM2 "
        "\\\"135M\\\"\",finished_reason=\"stop\"} 1",
        "# TYPE pagoda_request_prompt_tokens histogram",
        "pagoda_request_prompt_tokens_bucket" ML("1") " 0",
        "pagoda_request_prompt_tokens_bucket" ML("10") " 1",
        "pagoda_request_prompt_tokens_bucket" ML("50") " 2",
        "pagoda_request_prompt_tokens_bucket" ML("100") " 3",
        "pagoda_request_prompt_tokens_bucket" ML("1000") " 3",
        "pagoda_request_prompt_tokens_bucket" ML("2000") " 3",
        "pagoda_request_prompt_tokens_bucket" ML("+Inf") " 3",
        "pagoda_request_prompt_tokens_sum" M " 127",
        "pagoda_request_prompt_tokens_count" M " 3",
        "pagoda_request_generation_tokens_sum" M " 45",
        "# TYPE pagoda_time_to_first_token_seconds histogram",
        "pagoda_time_to_first_token_seconds_bucket" ML("0.04") " 0",
        "pagoda_time_to_first_token_seconds_bucket" ML("0.06") " 1",
        "pagoda_time_to_first_token_seconds_bucket" ML("2560") " 1",
        "pagoda_time_to_first_token_seconds_count" M " 1",
        "pagoda_inter_token_latency_seconds_bucket" ML("0.0025") " 0",
        "pagoda_inter_token_latency_seconds_bucket" ML("0.005") " 1",
        "pagoda_inter_token_latency_seconds_bucket" ML("0.01") " 6",
        "pagoda_inter_token_latency_seconds_bucket" ML("0.025") " 10",
        "pagoda_inter_token_latency_seconds_count" M " 10",
        "pagoda_e2e_request_latency_seconds_bucket" ML("0.5") " 1",
        "pagoda_e2e_request_latency_seconds_bucket" ML("1.5") " 2",
        "pagoda_e2e_request_latency_seconds_sum" M " 1.75",
        "pagoda_e2e_request_latency_seconds_count" M " 2",
        "pagoda_request_queue_time_seconds_bucket" ML("0.001") " 0",
        "pagoda_request_queue_time_seconds_bucket" ML("0.005") " 1",
        "pagoda_request_queue_time_seconds_bucket" ML("0.01") " 2",
        "pagoda_request_queue_time_seconds_sum" M " 0.012",
        "pagoda_request_queue_time_seconds_count" M " 2",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(expect); i++) {
        if (!has_line(text, expect[i])) {
            fprintf(stderr, "  missing line: %s\n", expect[i]);
            tu_failed_checks++;
        }
    }
    /* The token histograms' buckets stop at max_model_len (2048): 2000 is the last finite. */
    CHECK(strstr(text, "le=\"5000\"") == NULL);
    /* Every sample line carries model_name. */
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        REQUIRE(nl);
        if (*p != '#' &&
            !(strncmp(p, "pagoda_", 7) == 0 && memmem(p, (size_t)(nl - p), "model_name=\"", 12))) {
            fprintf(stderr, "  line without model_name: %.*s\n", (int)(nl - p), p);
            tu_failed_checks++;
        }
        p = nl + 1;
    }
    free(text);

    /* An older snapshot never moves the counters back; gauges follow it. */
    pgd_sched_stats old;
    memset(&old, 0, sizeof(old));
    old.n_running = 1;
    old.prompt_tokens = 5;
    old.n_preemptions = 0;
    pgd_pagoda_metrics_apply_stats(&pm, &old);
    text = render(r);
    REQUIRE(text);
    CHECK(has_line(text, "pagoda_prompt_tokens_total" M " 120"));
    CHECK(has_line(text, "pagoda_num_preemptions_total" M " 1"));
    CHECK(has_line(text, "pagoda_num_requests_running" M " 1"));
    CHECK(has_line(text, "pagoda_kv_cache_usage_perc" M " 0"));
    free(text);
#undef M
#undef ML

    /* Another prefix for lint-clean names. */
    pgd_metrics *r2;
    REQUIRE(pgd_metrics_create(&r2) == 0);
    CHECK_EQ_INT(pgd_pagoda_metrics_register(r2, "pagoda_", "m", 0, &pm2), 0);
    text = render(r2);
    REQUIRE(text);
    CHECK(has_line(text, "pagoda_num_requests_waiting{model_name=\"m\"} 0"));
    CHECK(has_line(text, "pagoda_request_prompt_tokens_bucket{model_name=\"m\",le=\"100000\"} 0"));
    CHECK(strstr(text, "le=\"200000\"") == NULL);
    free(text);
    pgd_metrics_destroy(r2);
    CHECK_EQ_INT(pgd_metrics_create(&r2), 0);
    CHECK_EQ_INT(pgd_pagoda_metrics_register(r2, "bad prefix ", "m", 0, &pm2), PGD_EINVAL);
    pgd_metrics_destroy(r2);
    pgd_metrics_destroy(r);
}

/* requests_aborted_total counts API requests that ended in "abort" (request_done), not the
 * scheduler's engine requests: a completion with several prompts is one request, and one
 * refused before it was queued is none. */
static void test_pagoda_aborted_counts_requests(void) {
    pgd_metrics *r;
    REQUIRE(pgd_metrics_create(&r) == 0);
    pgd_pagoda_metrics pm;
    REQUIRE(pgd_pagoda_metrics_register(r, "pagoda_", "m", 0, &pm) == 0);
    pgd_sched_stats st;
    memset(&st, 0, sizeof(st));
    st.n_aborted = 5; /* e.g. one request of 3 prompts and one of 2, both aborted */
    pgd_pagoda_metrics_apply_stats(&pm, &st);
    pgd_pagoda_metrics_request_done(&pm, "abort", 0.1, 0.2, 10, 1);
    pgd_pagoda_metrics_request_done(&pm, "abort", 0.1, 0.2, 10, 1);
    pgd_pagoda_metrics_request_done(&pm, "stop", 0.1, 0.2, 10, 1);
    pgd_pagoda_metrics_apply_stats(&pm, &st);
    char *text = render(r);
    REQUIRE(text);
    CHECK(has_line(text, "pagoda_requests_aborted_total{model_name=\"m\"} 2"));
    CHECK(has_line(text,
                   "pagoda_request_success_total{model_name=\"m\",finished_reason=\"abort\"} 2"));
    free(text);
    pgd_metrics_destroy(r);
}

/* ---- promtool --------------------------------------------------------------------------------*/

/* Run `promtool check metrics < path`; *out gets its output (stdout + stderr). Exit status, or
 * -1 when it could not run. */
static int run_promtool(const char *path, pgd_buf *out) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' 2>&1", path);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0) pgd_buf_append(out, chunk, n);
    int st = pclose(p);
    return st == -1 ? -1 : WEXITSTATUS(st);
}

static int write_exposition(const char *prefix, const char *model, char path[64]) {
    pgd_metrics *r;
    if (pgd_metrics_create(&r)) return -1;
    pgd_pagoda_metrics pm;
    int rc = pgd_pagoda_metrics_register(r, prefix, model, 4096, &pm);
    /* Plus a family of ours with awkward label values and help text. */
    pgd_metric *odd = NULL;
    static const char *const lab[] = {"path", "tenant"};
    if (!rc)
        rc = pgd_metrics_add_counter(r, "pagoda_http_requests_total",
                                     "HTTP requests \\ by path and tenant\nsecond line.", lab, 2,
                                     &odd);
    if (!rc) {
        pagoda_updates(&pm);
        pgd_metric_add(odd, (const char *[]){"/v1/chat/completions", "t\"1\\\n"}, 3);
        pgd_metric_add(odd, (const char *[]){"/metrics", "caf\xc3\xa9"}, 1);
        pgd_metric_add(odd, (const char *[]){"/", ""}, 1e300);
    }
    pgd_buf b = PGD_BUF_INIT;
    if (!rc) rc = pgd_metrics_render(r, &b);
    pgd_metrics_destroy(r);
    if (rc) {
        pgd_buf_free(&b);
        return rc;
    }
    strcpy(path, "/tmp/pgd_metrics_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        pgd_buf_free(&b);
        return -1;
    }
    ssize_t w = write(fd, b.data, b.len);
    close(fd);
    rc = w == (ssize_t)b.len ? 0 : -1;
    pgd_buf_free(&b);
    return rc;
}

static void test_promtool(void) {
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        fprintf(stderr, "  promtool not on PATH: skipping the promtool check "
                        "(apt-get install prometheus)\n");
        return;
    }
    /* The default prefix "pagoda_": promtool must parse and accept everything, silently. */
    char path[64];
    REQUIRE(write_exposition(NULL, "SmolLM2-135M \"instruct\" \\ q4_1\nx", path) == 0);
    pgd_buf out = PGD_BUF_INIT;
    int st = run_promtool(path, &out);
    CHECK_EQ_INT(st, 0);
    CHECK_EQ_INT(out.len, 0);
    if (st != 0 || out.len)
        fprintf(stderr, "  promtool (%s) said:\n%s\n", path, out.data);
    else
        unlink(path);
    pgd_buf_free(&out);

    /* vLLM's style, --metrics-prefix "pagoda:": the text parses (no "error while linting"), and
     * the only lint findings are promtool's rule against ':' in names — one per pagoda family. */
    REQUIRE(write_exposition("pagoda:", "SmolLM2-135M", path) == 0);
    st = run_promtool(path, &out);
    CHECK_EQ_INT(st, 3); /* promtool's exit status for lint findings */
    int n_lines = 0, n_other = 0;
    for (const char *p = out.data ? out.data : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        static const char colon_rule[] = " metric names should not contain ':'";
        size_t rl = sizeof(colon_rule) - 1;
        n_lines++;
        if (!(strncmp(p, "pagoda:", 7) == 0 && len > rl &&
              memcmp(p + len - rl, colon_rule, rl) == 0)) {
            fprintf(stderr, "  unexpected promtool line: %.*s\n", (int)len, p);
            n_other++;
        }
        p = nl ? nl + 1 : p + len;
    }
    CHECK_EQ_INT(n_other, 0);
    CHECK_EQ_INT(n_lines, 19); /* build_info + the 18 families of pagoda_families */
    if (n_other == 0)
        unlink(path);
    else
        fprintf(stderr, "  exposition kept in %s\n", path);
    pgd_buf_free(&out);
}

int main(void) {
    RUN(test_empty_registry);
    RUN(test_counter_and_gauge);
    RUN(test_escaping);
    RUN(test_histogram);
    RUN(test_numbers);
    RUN(test_ordering);
    RUN(test_many_label_values);
    RUN(test_validation);
    RUN(test_set_total_monotonic);
    RUN(test_concurrent_updates);
    RUN(test_pagoda_metrics);
    RUN(test_pagoda_aborted_counts_requests);
    RUN(test_promtool);
    return test_summary();
}
