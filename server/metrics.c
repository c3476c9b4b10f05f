/*
 * server/metrics.c — the metrics registry, its Prometheus text exposition and pagoda's metric
 * set (contract in server/metrics.h).
 *
 * Owns: families (registration order) and their series. Each family keeps its series in an
 * array sorted by label values (byte order, label by label): lookups are a binary search,
 * creation an insertion (rare), and rendering walks the array in exposition order. A series is
 * one allocation: the struct, its label-value pointers, its bucket counts, then the strings.
 *
 * Invariants: a series' buckets[] are per-bucket (not cumulative) counts, buckets[n_bounds]
 * counting values above every finite bound; count == sum of buckets; counters never decrease.
 *
 * Threading: the registry's mutex (a leaf) guards everything below it; every public function
 * takes it. Functions named *_locked expect it held.
 */
#include "server/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#ifndef PGD_VERSION
#define PGD_VERSION "0.0.0"
#endif

struct pgd_metric_series {
    pgd_metric *family;
    char **values;     /* [family->n_labels] NUL-terminated, in this allocation */
    uint64_t *buckets; /* [family->n_bounds + 1] histograms only, else NULL */
    double value;      /* counter / gauge value; a histogram's sum */
    uint64_t count;    /* histogram observations */
};

struct pgd_metric {
    pgd_metrics *reg;
    pgd_metric_type type;
    char *name;
    char *help;
    size_t n_labels;
    char *label_names[PGD_METRIC_MAX_LABELS];
    double *bounds; /* [n_bounds] strictly increasing, finite (histograms) */
    size_t n_bounds;
    pgd_metric_series **series; /* [n_series] sorted by label values */
    size_t n_series, cap_series;
};

struct pgd_metrics {
    pthread_mutex_t mu;
    pgd_metric **families; /* [n_families] registration order */
    size_t n_families, cap_families;
};

/* ---- helpers --------------------------------------------------------------------------------*/

static bool name_ok(const char *s, bool allow_colon) {
    if (!s || !*s) return false;
    for (size_t i = 0; s[i]; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
static bool utf8_ok(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            n = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return false;
        if (s[1] < lo || s[1] > hi) return false;
        for (size_t i = 2; i < n; i++)
            if (s[i] < 0x80 || s[i] > 0xBF) return false;
        s += n;
    }
    return true;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* The shortest text that reads back as v; Prometheus' spellings of the special values. */
static void fmt_num(char out[40], double v) {
    if (isnan(v)) {
        strcpy(out, "NaN");
    } else if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
    } else if (v == 0) {
        strcpy(out, "0"); /* also -0 */
    } else if (fabs(v) < 1e15 && v == floor(v)) {
        snprintf(out, 40, "%.0f", v);
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(out, 40, "%.*g", prec, v);
            if (strtod(out, NULL) == v) break;
        }
    }
}

static int cmp_values(char *const *a, const char *const *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int c = strcmp(a[i], b[i]);
        if (c) return c;
    }
    return 0;
}

static void family_free(pgd_metric *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_series; i++) free(m->series[i]);
    free(m->series);
    for (size_t i = 0; i < m->n_labels; i++) free(m->label_names[i]);
    free(m->bounds);
    free(m->name);
    free(m->help);
    free(m);
}

/* ---- registry -------------------------------------------------------------------------------*/

int pgd_metrics_create(pgd_metrics **out) {
    *out = NULL;
    pgd_metrics *r = calloc(1, sizeof(*r));
    if (!r) return PGD_ENOMEM;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return PGD_ENOMEM;
    }
    *out = r;
    return 0;
}

void pgd_metrics_destroy(pgd_metrics *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_families; i++) family_free(r->families[i]);
    free(r->families);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static pgd_metric *find_locked(pgd_metrics *r, const char *name) {
    for (size_t i = 0; i < r->n_families; i++)
        if (strcmp(r->families[i]->name, name) == 0) return r->families[i];
    return NULL;
}

pgd_metric *pgd_metrics_find(pgd_metrics *r, const char *name) {
    pthread_mutex_lock(&r->mu);
    pgd_metric *m = find_locked(r, name);
    pthread_mutex_unlock(&r->mu);
    return m;
}

static int series_get_locked(pgd_metric *m, const char *const *values, pgd_metric_series **out);

static int add_family(pgd_metrics *r, pgd_metric_type type, const char *name, const char *help,
                      const char *const *label_names, size_t n_labels, const double *bounds,
                      size_t n_bounds, pgd_metric **out) {
    if (out) *out = NULL;
    if (!name_ok(name, true)) return pgd_error_set(PGD_EINVAL, "bad metric name '%s'", name);
    if (type == PGD_METRIC_COUNTER && !ends_with(name, "_total"))
        return pgd_error_set(PGD_EINVAL, "counter '%s' must end in _total", name);
    if (n_labels > PGD_METRIC_MAX_LABELS || (n_labels && !label_names))
        return pgd_error_set(PGD_EINVAL, "metric '%s': bad label list", name);
    for (size_t i = 0; i < n_labels; i++) {
        const char *l = label_names[i];
        if (!name_ok(l, false) || strncmp(l, "__", 2) == 0 ||
            (type == PGD_METRIC_HISTOGRAM && strcmp(l, "le") == 0))
            return pgd_error_set(PGD_EINVAL, "metric '%s': bad label name '%s'", name,
                                 l ? l : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(l, label_names[j]) == 0)
                return pgd_error_set(PGD_EINVAL, "metric '%s': label '%s' twice", name, l);
    }
    if (type == PGD_METRIC_HISTOGRAM) {
        if (n_bounds < 1 || n_bounds > PGD_METRIC_MAX_BUCKETS || !bounds)
            return pgd_error_set(PGD_EINVAL, "histogram '%s': 1..%d bounds", name,
                                 PGD_METRIC_MAX_BUCKETS);
        for (size_t i = 0; i < n_bounds; i++)
            if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
                return pgd_error_set(PGD_EINVAL,
                                     "histogram '%s': bounds must be finite, increasing", name);
    }

    pgd_metric *m = calloc(1, sizeof(*m));
    if (!m) return PGD_ENOMEM;
    m->reg = r;
    m->type = type;
    m->name = dup_str(name);
    m->help = dup_str(help ? help : "");
    if (!m->name || !m->help) goto nomem;
    for (size_t i = 0; i < n_labels; i++) {
        m->label_names[i] = dup_str(label_names[i]);
        if (!m->label_names[i]) goto nomem;
        m->n_labels = i + 1;
    }
    m->n_labels = n_labels;
    if (type == PGD_METRIC_HISTOGRAM) {
        m->bounds = malloc(n_bounds * sizeof(double));
        if (!m->bounds) goto nomem;
        memcpy(m->bounds, bounds, n_bounds * sizeof(double));
        m->n_bounds = n_bounds;
    }

    pthread_mutex_lock(&r->mu);
    int rc = 0;
    if (find_locked(r, name)) {
        rc = pgd_error_set(PGD_EINVAL, "metric '%s' registered twice", name);
    } else if (r->n_families == r->cap_families) {
        size_t cap = r->cap_families ? 2 * r->cap_families : 16;
        pgd_metric **f = realloc(r->families, cap * sizeof(*f));
        if (!f)
            rc = PGD_ENOMEM;
        else {
            r->families = f;
            r->cap_families = cap;
        }
    }
    /* A family without labels has its one series from the start (exposed as 0). */
    pgd_metric_series *only = NULL;
    if (rc == 0 && n_labels == 0) rc = series_get_locked(m, NULL, &only);
    if (rc == 0) r->families[r->n_families++] = m;
    pthread_mutex_unlock(&r->mu);
    if (rc) {
        family_free(m);
        return rc;
    }
    if (out) *out = m;
    return 0;

nomem:
    family_free(m);
    return PGD_ENOMEM;
}

int pgd_metrics_add_counter(pgd_metrics *r, const char *name, const char *help,
                            const char *const *label_names, size_t n_labels, pgd_metric **out) {
    return add_family(r, PGD_METRIC_COUNTER, name, help, label_names, n_labels, NULL, 0, out);
}

int pgd_metrics_add_gauge(pgd_metrics *r, const char *name, const char *help,
                          const char *const *label_names, size_t n_labels, pgd_metric **out) {
    return add_family(r, PGD_METRIC_GAUGE, name, help, label_names, n_labels, NULL, 0, out);
}

int pgd_metrics_add_histogram(pgd_metrics *r, const char *name, const char *help,
                              const char *const *label_names, size_t n_labels, const double *bounds,
                              size_t n_bounds, pgd_metric **out) {
    return add_family(r, PGD_METRIC_HISTOGRAM, name, help, label_names, n_labels, bounds, n_bounds,
                      out);
}

/* ---- series ---------------------------------------------------------------------------------*/

static int series_get_locked(pgd_metric *m, const char *const *values, pgd_metric_series **out) {
    *out = NULL;
    for (size_t i = 0; i < m->n_labels; i++) {
        if (!values || !values[i])
            return pgd_error_set(PGD_EINVAL, "metric '%s': label '%s' has no value", m->name,
                                 m->label_names[i]);
        if (!utf8_ok(values[i]))
            return pgd_error_set(PGD_EINVAL, "metric '%s': label '%s' is not UTF-8", m->name,
                                 m->label_names[i]);
    }
    /* Binary search for the first series whose values are >= `values`. */
    size_t lo = 0, hi = m->n_series;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_values(m->series[mid]->values, values, m->n_labels) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < m->n_series && cmp_values(m->series[lo]->values, values, m->n_labels) == 0) {
        *out = m->series[lo];
        return 0;
    }

    if (m->n_series == m->cap_series) {
        size_t cap = m->cap_series ? 2 * m->cap_series : 4;
        pgd_metric_series **s = realloc(m->series, cap * sizeof(*s));
        if (!s) return PGD_ENOMEM;
        m->series = s;
        m->cap_series = cap;
    }
    size_t n_buckets = m->type == PGD_METRIC_HISTOGRAM ? m->n_bounds + 1 : 0;
    size_t size =
        sizeof(pgd_metric_series) + m->n_labels * sizeof(char *) + n_buckets * sizeof(uint64_t);
    size_t strings = 0;
    for (size_t i = 0; i < m->n_labels; i++) strings += strlen(values[i]) + 1;
    char *mem = calloc(1, size + strings);
    if (!mem) return PGD_ENOMEM;
    pgd_metric_series *s = (pgd_metric_series *)mem;
    s->family = m;
    s->values = (char **)(mem + sizeof(*s));
    s->buckets = n_buckets ? (uint64_t *)(mem + sizeof(*s) + m->n_labels * sizeof(char *)) : NULL;
    char *p = mem + size;
    for (size_t i = 0; i < m->n_labels; i++) {
        size_t n = strlen(values[i]) + 1;
        memcpy(p, values[i], n);
        s->values[i] = p;
        p += n;
    }
    memmove(m->series + lo + 1, m->series + lo, (m->n_series - lo) * sizeof(*m->series));
    m->series[lo] = s;
    m->n_series++;
    *out = s;
    return 0;
}

int pgd_metric_series_get(pgd_metric *m, const char *const *values, pgd_metric_series **out) {
    pthread_mutex_lock(&m->reg->mu);
    int rc = series_get_locked(m, values, out);
    pthread_mutex_unlock(&m->reg->mu);
    return rc;
}

enum op { OP_ADD, OP_SET, OP_SET_TOTAL, OP_OBSERVE };

static int update_locked(pgd_metric_series *s, enum op op, double v) {
    pgd_metric *m = s->family;
    switch (op) {
    case OP_ADD:
        if (m->type == PGD_METRIC_COUNTER && (isnan(v) || v < 0))
            return pgd_error_set(PGD_EINVAL, "counter '%s': add %g", m->name, v);
        if (m->type == PGD_METRIC_HISTOGRAM) break;
        s->value += v;
        return 0;
    case OP_SET:
        if (m->type != PGD_METRIC_GAUGE) break;
        s->value = v;
        return 0;
    case OP_SET_TOTAL:
        if (m->type != PGD_METRIC_COUNTER) break;
        if (isnan(v) || v < 0)
            return pgd_error_set(PGD_EINVAL, "counter '%s': total %g", m->name, v);
        if (v > s->value) s->value = v;
        return 0;
    case OP_OBSERVE: {
        if (m->type != PGD_METRIC_HISTOGRAM) break;
        if (isnan(v)) return pgd_error_set(PGD_EINVAL, "histogram '%s': observe NaN", m->name);
        size_t lo = 0, hi = m->n_bounds; /* first bound >= v, or n_bounds */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (m->bounds[mid] < v)
                lo = mid + 1;
            else
                hi = mid;
        }
        s->buckets[lo]++;
        s->count++;
        s->value += v;
        return 0;
    }
    }
    return pgd_error_set(PGD_EINVAL, "metric '%s': operation does not fit its type", m->name);
}

static int update(pgd_metric_series *s, enum op op, double v) {
    if (!s) return pgd_error_set(PGD_EINVAL, "no series");
    pgd_metrics *r = s->family->reg;
    pthread_mutex_lock(&r->mu);
    int rc = update_locked(s, op, v);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int pgd_series_add(pgd_metric_series *s, double v) {
    return update(s, OP_ADD, v);
}
int pgd_series_set(pgd_metric_series *s, double v) {
    return update(s, OP_SET, v);
}
int pgd_series_set_total(pgd_metric_series *s, double v) {
    return update(s, OP_SET_TOTAL, v);
}
int pgd_series_observe(pgd_metric_series *s, double v) {
    return update(s, OP_OBSERVE, v);
}

static int metric_update(pgd_metric *m, const char *const *values, enum op op, double v) {
    if (!m) return pgd_error_set(PGD_EINVAL, "no metric");
    pthread_mutex_lock(&m->reg->mu);
    pgd_metric_series *s;
    int rc = series_get_locked(m, values, &s);
    if (rc == 0) rc = update_locked(s, op, v);
    pthread_mutex_unlock(&m->reg->mu);
    return rc;
}

int pgd_metric_add(pgd_metric *m, const char *const *values, double v) {
    return metric_update(m, values, OP_ADD, v);
}
int pgd_metric_set(pgd_metric *m, const char *const *values, double v) {
    return metric_update(m, values, OP_SET, v);
}
int pgd_metric_set_total(pgd_metric *m, const char *const *values, double total) {
    return metric_update(m, values, OP_SET_TOTAL, total);
}
int pgd_metric_observe(pgd_metric *m, const char *const *values, double v) {
    return metric_update(m, values, OP_OBSERVE, v);
}

double pgd_series_value(pgd_metric_series *s) {
    pthread_mutex_lock(&s->family->reg->mu);
    double v = s->value;
    pthread_mutex_unlock(&s->family->reg->mu);
    return v;
}

uint64_t pgd_series_count(pgd_metric_series *s) {
    pthread_mutex_lock(&s->family->reg->mu);
    uint64_t n = s->count;
    pthread_mutex_unlock(&s->family->reg->mu);
    return n;
}

/* ---- exposition -----------------------------------------------------------------------------*/

/* Escape for HELP (label_value false: \ and newline) or a label value (also "). */
static int put_escaped(pgd_buf *b, const char *s, bool label_value) {
    const char *run = s;
    for (; *s; s++) {
        const char *esc = NULL;
        if (*s == '\\')
            esc = "\\\\";
        else if (*s == '\n')
            esc = "\\n";
        else if (*s == '"' && label_value)
            esc = "\\\"";
        if (!esc) continue;
        if (pgd_buf_append(b, run, (size_t)(s - run)) || pgd_buf_puts(b, esc)) return PGD_ENOMEM;
        run = s + 1;
    }
    return pgd_buf_append(b, run, (size_t)(s - run));
}

/* <name><suffix>{labels[,le="..."]} <value>\n */
static int put_sample(pgd_buf *b, const pgd_metric *m, const char *suffix,
                      const pgd_metric_series *s, const char *le, const char *value) {
    int rc = pgd_buf_puts(b, m->name);
    if (!rc) rc = pgd_buf_puts(b, suffix);
    if (!rc && (m->n_labels || le)) {
        rc = pgd_buf_puts(b, "{");
        for (size_t i = 0; !rc && i < m->n_labels; i++) {
            rc = pgd_buf_printf(b, "%s%s=\"", i ? "," : "", m->label_names[i]);
            if (!rc) rc = put_escaped(b, s->values[i], true);
            if (!rc) rc = pgd_buf_puts(b, "\"");
        }
        if (!rc && le) rc = pgd_buf_printf(b, "%sle=\"%s\"", m->n_labels ? "," : "", le);
        if (!rc) rc = pgd_buf_puts(b, "}");
    }
    if (!rc) rc = pgd_buf_printf(b, " %s\n", value);
    return rc;
}

static int render_family(pgd_buf *b, const pgd_metric *m) {
    static const char *const type_names[] = {"", "counter", "gauge", "histogram"};
    int rc = pgd_buf_printf(b, "# HELP %s ", m->name);
    if (!rc) rc = put_escaped(b, m->help, false);
    if (!rc) rc = pgd_buf_printf(b, "\n# TYPE %s %s\n", m->name, type_names[m->type]);
    char num[40], le[40];
    for (size_t i = 0; !rc && i < m->n_series; i++) {
        const pgd_metric_series *s = m->series[i];
        if (m->type != PGD_METRIC_HISTOGRAM) {
            fmt_num(num, s->value);
            rc = put_sample(b, m, "", s, NULL, num);
            continue;
        }
        uint64_t cum = 0;
        for (size_t k = 0; !rc && k <= m->n_bounds; k++) {
            cum += s->buckets[k];
            if (k < m->n_bounds)
                fmt_num(le, m->bounds[k]);
            else
                strcpy(le, "+Inf");
            snprintf(num, sizeof(num), "%llu", (unsigned long long)cum);
            rc = put_sample(b, m, "_bucket", s, le, num);
        }
        fmt_num(num, s->value);
        if (!rc) rc = put_sample(b, m, "_sum", s, NULL, num);
        snprintf(num, sizeof(num), "%llu", (unsigned long long)s->count);
        if (!rc) rc = put_sample(b, m, "_count", s, NULL, num);
    }
    return rc;
}

int pgd_metrics_render(pgd_metrics *r, pgd_buf *out) {
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    for (size_t i = 0; !rc && i < r->n_families; i++) rc = render_family(out, r->families[i]);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ---- pagoda's metrics -----------------------------------------------------------------------*/

/* vLLM's bucket choices, with a few finer ones below where a small model on a CPU lands. */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                    0.15,  0.2,    0.3,   0.4,  0.5,   0.75, 1.0,   2.5,
                                    5.0,   7.5,    10.0,  20.0, 40.0,  80.0};
static const double e2e_bounds[] = {0.05, 0.1,  0.2,   0.3,   0.5,   0.8,   1.0,    1.5,
                                    2.0,  2.5,  5.0,   10.0,  15.0,  20.0,  30.0,   40.0,
                                    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double queue_bounds[] = {0.001, 0.005, 0.01,  0.025, 0.05,  0.1,    0.25,
                                      0.5,   1.0,   2.5,   5.0,   10.0,  20.0,   30.0,
                                      60.0,  120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

/* 1, 2, 5, 10, 20, 50, ... up to max (vLLM's build_1_2_5_buckets). Returns the count. */
static size_t bounds_1_2_5(double *out, size_t cap, uint32_t max) {
    size_t n = 0;
    for (double scale = 1;; scale *= 10) {
        static const double mant[] = {1, 2, 5};
        for (size_t i = 0; i < 3; i++) {
            double v = mant[i] * scale;
            if (v > max || n == cap) return n;
            out[n++] = v;
        }
    }
}

typedef struct family_spec {
    pgd_metric_type type;
    const char *name; /* without the prefix */
    const char *help;
    const double *bounds; /* NULL: the token buckets */
    size_t n_bounds;
    size_t offset; /* of the pgd_metric_series * in pgd_pagoda_metrics; SIZE_MAX: none */
} family_spec;

#define PM_FIELD(f)  offsetof(pgd_pagoda_metrics, f)
#define PM_BOUNDS(a) a, PGD_ARRAY_LEN(a)

static const family_spec pagoda_families[] = {
    {PGD_METRIC_GAUGE, "num_requests_running",
     "Number of sequences (choices) running, holding KV-cache blocks.", NULL, 0, PM_FIELD(running)},
    {PGD_METRIC_GAUGE, "num_requests_waiting",
     "Number of sequences waiting to be scheduled (new and preempted).", NULL, 0,
     PM_FIELD(waiting)},
    {PGD_METRIC_GAUGE, "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", NULL, 0,
     PM_FIELD(kv_usage)},
    {PGD_METRIC_GAUGE, "responses_stored", "Stored /v1/responses answers.", NULL, 0,
     PM_FIELD(stored)},
    {PGD_METRIC_GAUGE, "responses_store_bytes",
     "Bytes the stored /v1/responses answers count against --responses-store-mb.", NULL, 0,
     PM_FIELD(stored_bytes)},
    {PGD_METRIC_COUNTER, "num_preemptions_total", "Cumulative number of preemptions.", NULL, 0,
     PM_FIELD(preemptions)},
    {PGD_METRIC_COUNTER, "prefix_cache_queries_total",
     "Prefix cache queries, in terms of number of queried tokens.", NULL, 0,
     PM_FIELD(prefix_queries)},
    {PGD_METRIC_COUNTER, "prefix_cache_hits_total",
     "Prefix cache hits, in terms of number of cached tokens.", NULL, 0, PM_FIELD(prefix_hits)},
    {PGD_METRIC_COUNTER, "prompt_tokens_total", "Number of prefill tokens processed.", NULL, 0,
     PM_FIELD(prompt_tokens)},
    {PGD_METRIC_COUNTER, "generation_tokens_total", "Number of generation tokens processed.", NULL,
     0, PM_FIELD(generation_tokens)},
    {PGD_METRIC_COUNTER, "requests_aborted_total",
     "Number of requests aborted (client gone, timeout, shutdown); one per API request, "
     "however many prompts and choices it has.",
     NULL, 0, PM_FIELD(aborted)},
    {PGD_METRIC_COUNTER, "request_success_total", "Count of finished requests, by reason.", NULL, 0,
     SIZE_MAX},
    {PGD_METRIC_HISTOGRAM, "request_prompt_tokens", "Number of prefill tokens processed.", NULL, 0,
     PM_FIELD(prompt_tokens_hist)},
    {PGD_METRIC_HISTOGRAM, "request_generation_tokens", "Number of generation tokens processed.",
     NULL, 0, PM_FIELD(generation_tokens_hist)},
    {PGD_METRIC_HISTOGRAM, "time_to_first_token_seconds",
     "Histogram of time to first token in seconds.", PM_BOUNDS(ttft_bounds), PM_FIELD(ttft)},
    {PGD_METRIC_HISTOGRAM, "inter_token_latency_seconds",
     "Histogram of inter-token latency in seconds.", PM_BOUNDS(itl_bounds), PM_FIELD(itl)},
    {PGD_METRIC_HISTOGRAM, "e2e_request_latency_seconds",
     "Histogram of e2e request latency in seconds.", PM_BOUNDS(e2e_bounds), PM_FIELD(e2e)},
    {PGD_METRIC_HISTOGRAM, "request_queue_time_seconds",
     "Histogram of time spent in WAITING phase for request.", PM_BOUNDS(queue_bounds),
     PM_FIELD(queue_time)},
};

static const char *const finish_reasons[] = {"stop", "length", "abort"};

int pgd_pagoda_metrics_register(pgd_metrics *r, const char *prefix, const char *model_name,
                                uint32_t max_model_len, pgd_pagoda_metrics *pm) {
    memset(pm, 0, sizeof(*pm));
    pm->registry = r;
    if (!prefix) prefix = "pagoda_";
    if (!model_name) return pgd_error_set(PGD_EINVAL, "metrics: no model name");
    double token_bounds[PGD_METRIC_MAX_BUCKETS];
    size_t n_token_bounds =
        bounds_1_2_5(token_bounds, PGD_METRIC_MAX_BUCKETS, max_model_len ? max_model_len : 131072);
    char name[256];
    int rc;

    /* build_info first: its series holds the registry's copy of the model name. */
    if ((size_t)snprintf(name, sizeof(name), "%sbuild_info", prefix) >= sizeof(name))
        return pgd_error_set(PGD_EINVAL, "metrics: prefix too long");
    static const char *const info_labels[] = {"version", "model_name"};
    pgd_metric *info;
    rc = pgd_metrics_add_gauge(r, name, "Build information of the pagoda server.", info_labels, 2,
                               &info);
    if (rc) return rc;
    const char *info_values[] = {PGD_VERSION, model_name};
    rc = pgd_metric_series_get(info, info_values, &pm->build_info);
    if (rc) return rc;
    pgd_series_set(pm->build_info, 1);
    pm->model_name = pm->build_info->values[1];

    static const char *const model_label[] = {"model_name"};
    static const char *const success_labels[] = {"model_name", "finished_reason"};
    const char *model_value[] = {pm->model_name};
    for (size_t i = 0; i < PGD_ARRAY_LEN(pagoda_families); i++) {
        const family_spec *f = &pagoda_families[i];
        if ((size_t)snprintf(name, sizeof(name), "%s%s", prefix, f->name) >= sizeof(name))
            return pgd_error_set(PGD_EINVAL, "metrics: prefix too long");
        pgd_metric *m;
        if (f->type == PGD_METRIC_GAUGE)
            rc = pgd_metrics_add_gauge(r, name, f->help, model_label, 1, &m);
        else if (f->type == PGD_METRIC_COUNTER && f->offset == SIZE_MAX)
            rc = pgd_metrics_add_counter(r, name, f->help, success_labels, 2, &m);
        else if (f->type == PGD_METRIC_COUNTER)
            rc = pgd_metrics_add_counter(r, name, f->help, model_label, 1, &m);
        else if (f->bounds)
            rc = pgd_metrics_add_histogram(r, name, f->help, model_label, 1, f->bounds, f->n_bounds,
                                           &m);
        else
            rc = pgd_metrics_add_histogram(r, name, f->help, model_label, 1, token_bounds,
                                           n_token_bounds, &m);
        if (rc) return rc;
        if (f->offset == SIZE_MAX) {
            pm->success = m;
            for (size_t k = 0; k < PGD_ARRAY_LEN(finish_reasons); k++) {
                const char *v[] = {pm->model_name, finish_reasons[k]};
                pgd_metric_series *s;
                if ((rc = pgd_metric_series_get(m, v, &s))) return rc;
            }
            continue;
        }
        pgd_metric_series **slot = (pgd_metric_series **)((char *)pm + f->offset);
        if ((rc = pgd_metric_series_get(m, model_value, slot))) return rc;
    }
    return 0;
}

void pgd_pagoda_metrics_apply_stats(pgd_pagoda_metrics *pm, const pgd_sched_stats *st) {
    pgd_series_set(pm->running, (double)st->n_running);
    pgd_series_set(pm->waiting, (double)st->n_waiting);
    pgd_series_set(pm->kv_usage, st->kv_usage);
    pgd_series_set_total(pm->prompt_tokens, (double)st->prompt_tokens);
    pgd_series_set_total(pm->generation_tokens, (double)st->generation_tokens);
    pgd_series_set_total(pm->preemptions, (double)st->n_preemptions);
    pgd_series_set_total(pm->prefix_queries, (double)st->prefix_query_tokens);
    pgd_series_set_total(pm->prefix_hits, (double)st->prefix_hit_tokens);
}

int pgd_pagoda_metrics_request_done(pgd_pagoda_metrics *pm, const char *finished_reason,
                                    double queue_s, double e2e_s, uint32_t prompt_tokens,
                                    uint32_t generation_tokens) {
    if (finished_reason && *finished_reason) {
        const char *v[] = {pm->model_name, finished_reason};
        int rc = pgd_metric_add(pm->success, v, 1);
        if (rc) return rc;
        /* Requests, not the engine requests (prompts) or choices behind them. */
        if (!strcmp(finished_reason, "abort")) pgd_series_add(pm->aborted, 1);
    }
    if (queue_s >= 0) pgd_series_observe(pm->queue_time, queue_s);
    if (e2e_s >= 0) pgd_series_observe(pm->e2e, e2e_s);
    pgd_series_observe(pm->prompt_tokens_hist, (double)prompt_tokens);
    pgd_series_observe(pm->generation_tokens_hist, (double)generation_tokens);
    return 0;
}

int pgd_tenant_metrics_register(pgd_metrics *r, const char *prefix, pgd_tenant_metrics *tm) {
    memset(tm, 0, sizeof *tm);
    if (!prefix) prefix = "pagoda_";
    static const char *const l2[] = {"model_name", "tenant"};
    static const char *const l_reason[] = {"model_name", "tenant", "finished_reason"};
    static const char *const l_limit[] = {"model_name", "tenant", "reason"};
    static const struct {
        pgd_metric_type type;
        const char *name, *help;
        const char *const *labels;
        size_t n_labels;
        const double *bounds;
        size_t n_bounds;
        size_t offset;
    } fams[] = {
#define TM(f) offsetof(pgd_tenant_metrics, f)
        {PGD_METRIC_COUNTER, "tenant_requests_total",
         "Finished requests of each tenant, by reason.", l_reason, 3, NULL, 0, TM(requests)},
        {PGD_METRIC_COUNTER, "tenant_prompt_tokens_total",
         "Prompt tokens of each tenant's requests.", l2, 2, NULL, 0, TM(prompt_tokens)},
        {PGD_METRIC_COUNTER, "tenant_generation_tokens_total", "Tokens generated for each tenant.",
         l2, 2, NULL, 0, TM(generation_tokens)},
        {PGD_METRIC_COUNTER, "tenant_rate_limited_total",
         "Requests of each tenant refused with 429, by the limit that refused them.", l_limit, 3,
         NULL, 0, TM(rate_limited)},
        {PGD_METRIC_HISTOGRAM, "tenant_time_to_first_token_seconds",
         "Time to first token of each tenant's requests, in seconds.", l2, 2,
         PM_BOUNDS(ttft_bounds), TM(ttft)},
        {PGD_METRIC_HISTOGRAM, "tenant_e2e_request_latency_seconds",
         "End-to-end latency of each tenant's requests, in seconds.", l2, 2, PM_BOUNDS(e2e_bounds),
         TM(e2e)},
        {PGD_METRIC_GAUGE, "tenant_num_requests_running",
         "Sequences of each tenant running, holding KV-cache blocks.", l2, 2, NULL, 0, TM(running)},
        {PGD_METRIC_GAUGE, "tenant_num_requests_waiting",
         "Sequences of each tenant waiting to be scheduled.", l2, 2, NULL, 0, TM(waiting)},
        {PGD_METRIC_GAUGE, "tenant_virtual_tokens",
         "The scheduler's fair-share counter of each tenant: weighted tokens served.", l2, 2, NULL,
         0, TM(vtime)},
#undef TM
    };
    char name[256];
    for (size_t i = 0; i < PGD_ARRAY_LEN(fams); i++) {
        if ((size_t)snprintf(name, sizeof name, "%s%s", prefix, fams[i].name) >= sizeof name)
            return pgd_error_set(PGD_EINVAL, "metrics: prefix too long");
        pgd_metric **slot = (pgd_metric **)((char *)tm + fams[i].offset);
        int rc =
            fams[i].type == PGD_METRIC_COUNTER
                ? pgd_metrics_add_counter(r, name, fams[i].help, fams[i].labels, fams[i].n_labels,
                                          slot)
            : fams[i].type == PGD_METRIC_GAUGE
                ? pgd_metrics_add_gauge(r, name, fams[i].help, fams[i].labels, fams[i].n_labels,
                                        slot)
                : pgd_metrics_add_histogram(r, name, fams[i].help, fams[i].labels, fams[i].n_labels,
                                            fams[i].bounds, fams[i].n_bounds, slot);
        if (rc) return rc;
    }
    return 0;
}
