/*
 * engine/text/stop.c — stop strings over the text stream and token-level finish rules (stop.h).
 *
 * Owns: the matcher's copies of the stop strings, their KMP failure tables and the held-back
 * text. Each stop string i carries a KMP state: how many of its bytes the end of the fed text
 * matches. The stream is consumed byte by byte; the first byte that completes some string is the
 * match (longest string on a tie). Otherwise the held tail is max_i state[i] bytes, since any
 * future match must start inside it; everything before it is emitted.
 * Cost: O(bytes fed * number of stop strings), amortised.
 *
 * Threading: none of its own; see stop.h.
 */
#include "engine/text/stop.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int pgd_stop_init(pgd_stop_matcher *m, const pgd_str *stops, int n, bool include_stop) {
    memset(m, 0, sizeof *m);
    m->matched = -1;
    m->include_stop = include_stop;
    if (n < 0 || n > PGD_STOP_MAX_STRINGS)
        return pgd_error_set(PGD_EINVAL, "stop: at most %d stop strings (got %d)",
                             PGD_STOP_MAX_STRINGS, n);
    int rc;
    for (int i = 0; i < n; i++) {
        if (stops[i].len == 0 || stops[i].len > PGD_STOP_MAX_LEN) {
            rc = pgd_error_set(PGD_EINVAL, "stop: string %d has %llu bytes (1..%d allowed)", i,
                               (unsigned long long)stops[i].len, PGD_STOP_MAX_LEN);
            goto fail;
        }
        uint32_t len = (uint32_t)stops[i].len;
        m->str[i] = malloc(len);
        m->fail[i] = malloc(len * sizeof *m->fail[i]);
        m->n = i + 1;
        if (!m->str[i] || !m->fail[i]) {
            rc = pgd_error_set(PGD_ENOMEM, "stop: out of memory");
            goto fail;
        }
        memcpy(m->str[i], stops[i].ptr, len);
        m->len[i] = len;
        /* fail[j] = length of the longest proper border of str[0..j] */
        const char *s = m->str[i];
        uint32_t *f = m->fail[i], k = 0;
        f[0] = 0;
        for (uint32_t j = 1; j < len; j++) {
            while (k > 0 && s[j] != s[k]) k = f[k - 1];
            if (s[j] == s[k]) k++;
            f[j] = k;
        }
    }
    return 0;
fail:
    pgd_stop_free(m);
    return rc;
}

void pgd_stop_free(pgd_stop_matcher *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->str[i]);
        free(m->fail[i]);
        m->str[i] = NULL;
        m->fail[i] = NULL;
    }
    m->n = 0;
    pgd_buf_free(&m->held);
}

size_t pgd_stop_held(const pgd_stop_matcher *m) {
    return m->held.len;
}

/* Advances string i's state by byte c; returns the new state. */
static inline uint32_t kmp_step(const pgd_stop_matcher *m, int i, uint32_t k, char c) {
    const char *s = m->str[i];
    if (k == m->len[i]) k = m->fail[i][k - 1]; /* never kept: a full match ends the stream */
    while (k > 0 && s[k] != c) k = m->fail[i][k - 1];
    if (s[k] == c) k++;
    return k;
}

int pgd_stop_feed(pgd_stop_matcher *m, const char *delta, size_t len, pgd_buf *emit, int *matched) {
    *matched = -1;
    if (m->done || len == 0) return 0;
    if (m->n == 0) return pgd_buf_append(emit, delta, len);
    size_t base = m->held.len; /* held[base + j] will be delta[j] */
    int rc = pgd_buf_append(&m->held, delta, len);
    if (rc) return rc;
    for (size_t j = 0; j < len; j++) {
        int hit = -1;
        for (int i = 0; i < m->n; i++) {
            m->state[i] = kmp_step(m, i, m->state[i], delta[j]);
            if (m->state[i] == m->len[i] && (hit < 0 || m->len[i] > m->len[hit])) hit = i;
        }
        if (hit >= 0) {
            size_t end = base + j + 1; /* one past the stop string's last byte in held */
            size_t keep = m->include_stop ? end : end - m->len[hit];
            rc = pgd_buf_append(emit, m->held.data, keep);
            m->done = true;
            m->matched = hit;
            *matched = hit;
            pgd_buf_reset(&m->held);
            return rc;
        }
    }
    uint32_t hold = 0;
    for (int i = 0; i < m->n; i++)
        if (m->state[i] > hold) hold = m->state[i];
    size_t out = m->held.len - hold;
    if (out == 0) return 0;
    rc = pgd_buf_append(emit, m->held.data, out);
    if (rc) return rc;
    memmove(m->held.data, m->held.data + out, hold);
    m->held.len = hold;
    m->held.data[hold] = '\0';
    return 0;
}

int pgd_stop_flush(pgd_stop_matcher *m, pgd_buf *emit) {
    if (m->done) return 0;
    m->done = true;
    int rc = m->held.len ? pgd_buf_append(emit, m->held.data, m->held.len) : 0;
    pgd_buf_reset(&m->held);
    return rc;
}

/* ---- token-level finish ------------------------------------------------------------------- */

const char *pgd_finish_str(pgd_finish f) {
    switch (f) {
    case PGD_FINISH_STOP:
        return "stop";
    case PGD_FINISH_LENGTH:
        return "length";
    case PGD_FINISH_TOOL_CALLS:
        return "tool_calls";
    default:
        return NULL;
    }
}

int pgd_finish_rule_init(pgd_finish_rule *r, const int32_t *eos, int n_eos, bool ignore_eos,
                         int64_t max_tokens, int64_t max_context) {
    memset(r, 0, sizeof *r);
    r->ignore_eos = ignore_eos;
    r->max_tokens = max_tokens;
    r->max_context = max_context;
    for (int i = 0; i < n_eos; i++) {
        int32_t id = eos[i];
        if (id < 0) return pgd_error_set(PGD_EINVAL, "finish: negative end id %d", (int)id);
        int j = r->n_eos;
        while (j > 0 && r->eos[j - 1] > id) j--;
        if (j > 0 && r->eos[j - 1] == id) continue;
        if (r->n_eos == PGD_FINISH_MAX_EOS)
            return pgd_error_set(PGD_EINVAL, "finish: more than %d end ids", PGD_FINISH_MAX_EOS);
        memmove(&r->eos[j + 1], &r->eos[j], (size_t)(r->n_eos - j) * sizeof r->eos[0]);
        r->eos[j] = id;
        r->n_eos++;
    }
    return 0;
}

bool pgd_finish_is_eos(const pgd_finish_rule *r, int32_t token) {
    int lo = 0, hi = r->n_eos;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r->eos[mid] < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_eos && r->eos[lo] == token;
}

pgd_finish pgd_finish_check(const pgd_finish_rule *r, int32_t token, int64_t n_prompt,
                            int64_t n_output) {
    if (!r->ignore_eos && pgd_finish_is_eos(r, token)) return PGD_FINISH_STOP;
    if (r->max_tokens > 0 && n_output >= r->max_tokens) return PGD_FINISH_LENGTH;
    if (r->max_context > 0 && n_prompt + n_output >= r->max_context) return PGD_FINISH_LENGTH;
    return PGD_FINISH_NONE;
}
