/*
 * tests/unit/test_scheduler_util.h — shared helpers of the scheduler tests: an event recorder
 * that also checks the event contract (TOKEN events of a choice, then exactly one FINISH per
 * choice or one ERROR per request; nothing after `done`; n_output matching the tokens seen;
 * PROMPT_LOGPROBS events of choice 0 in prompt order, before any token, recorded),
 * prompt generators and a greedy request. Header-only (static functions), included by
 * test_scheduler*.c and tests/model/test_scheduler_model.c.
 *
 * Threading: a recorder is filled by one thread at a time (the thread that drains events).
 */
#ifndef PGD_TESTS_SCHEDULER_UTIL_H
#define PGD_TESTS_SCHEDULER_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "scheduler/request.h"
#include "scheduler/sched.h"
#include "support/fake_backend.h"

#define REC_MAX_N 8

typedef struct rec_choice {
    int32_t *tok;
    uint32_t n, cap;
    pgd_buf text;
    int n_finish;
    pgd_finish_reason reason;
    uint32_t n_output;
    uint64_t first_ns, last_ns;
} rec_choice;

typedef struct rec_req {
    bool seen;
    uint32_t n_done, n_error;
    int error;
    char message[256];
    pgd_usage usage;
    uint64_t first_token_step; /* recorder step when its first token arrived (UINT64_MAX: none) */
    uint64_t n_events;
    pgd_sample_result *plp; /* [n_plp] prompt logprobs: entry i is prompt token i + 1's */
    int32_t *prank;         /* [n_plp] their ranks */
    uint32_t n_plp;
    rec_choice ch[REC_MAX_N];
} rec_req;

typedef struct recorder {
    rec_req *r; /* indexed by request id */
    size_t cap;
    uint64_t step; /* set by the test before each step */
    uint64_t n_events, n_tokens, n_finish, n_done, n_error;
    int violations;
    char why[256];
} recorder;

static void rec_violation(recorder *rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!rc->violations) vsnprintf(rc->why, sizeof rc->why, fmt, ap);
    va_end(ap);
    rc->violations++;
}

static rec_req *rec_get(recorder *rc, uint64_t id) {
    if (id >= rc->cap) {
        size_t cap = rc->cap ? rc->cap : 64;
        while (cap <= id) cap *= 2;
        rec_req *p = realloc(rc->r, cap * sizeof *p);
        if (!p) abort();
        memset(p + rc->cap, 0, (cap - rc->cap) * sizeof *p);
        for (size_t i = rc->cap; i < cap; i++) p[i].first_token_step = UINT64_MAX;
        rc->r = p;
        rc->cap = cap;
    }
    return &rc->r[id];
}

static void rec_event(const pgd_event *ev, void *ud) {
    recorder *rc = ud;
    rec_req *q = rec_get(rc, ev->id);
    rc->n_events++;
    q->n_events++;
    q->seen = true;
    if (q->n_done) rec_violation(rc, "request %llu: event after done", (unsigned long long)ev->id);
    if (ev->kind != PGD_EVENT_ERROR && ev->index >= REC_MAX_N) {
        rec_violation(rc, "request %llu: choice %u", (unsigned long long)ev->id, ev->index);
        return;
    }
    rec_choice *c = &q->ch[ev->index < REC_MAX_N ? ev->index : 0];
    switch (ev->kind) {
    case PGD_EVENT_TOKEN:
        rc->n_tokens++;
        if (c->n_finish)
            rec_violation(rc, "request %llu choice %u: token after finish",
                          (unsigned long long)ev->id, ev->index);
        if (c->n == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 16;
            c->tok = realloc(c->tok, c->cap * sizeof *c->tok);
            if (!c->tok) abort();
        }
        c->tok[c->n++] = ev->token;
        if (ev->text_len) pgd_buf_append(&c->text, ev->text, ev->text_len);
        if (ev->text[ev->text_len] != '\0')
            rec_violation(rc, "request %llu: text not NUL-terminated", (unsigned long long)ev->id);
        if (!c->first_ns) c->first_ns = ev->t_ns;
        c->last_ns = ev->t_ns;
        if (q->first_token_step == UINT64_MAX) q->first_token_step = rc->step;
        break;
    case PGD_EVENT_FINISH:
        rc->n_finish++;
        if (c->n_finish++)
            rec_violation(rc, "request %llu choice %u: two finishes", (unsigned long long)ev->id,
                          ev->index);
        c->reason = ev->reason;
        c->n_output = ev->n_output;
        if (ev->n_output != c->n)
            rec_violation(rc, "request %llu choice %u: n_output %u but %u tokens seen",
                          (unsigned long long)ev->id, ev->index, ev->n_output, c->n);
        break;
    case PGD_EVENT_PROMPT_LOGPROBS:
        if (ev->index != 0 || ev->lp_first != q->n_plp + 1 || !ev->n_lp || !ev->prompt_lp)
            rec_violation(rc, "request %llu: prompt logprobs [%u, +%u) of choice %u after %u",
                          (unsigned long long)ev->id, ev->lp_first, ev->n_lp, ev->index, q->n_plp);
        for (int k = 0; k < REC_MAX_N; k++)
            if (q->ch[k].n)
                rec_violation(rc, "request %llu: prompt logprobs after a token",
                              (unsigned long long)ev->id);
        q->plp = realloc(q->plp, (q->n_plp + ev->n_lp) * sizeof *q->plp);
        q->prank = realloc(q->prank, (q->n_plp + ev->n_lp) * sizeof *q->prank);
        if (!q->plp || !q->prank || !ev->prompt_rank) abort();
        memcpy(q->plp + q->n_plp, ev->prompt_lp, ev->n_lp * sizeof *q->plp);
        memcpy(q->prank + q->n_plp, ev->prompt_rank, ev->n_lp * sizeof *q->prank);
        q->n_plp += ev->n_lp;
        break;
    case PGD_EVENT_ERROR:
        rc->n_error++;
        q->n_error++;
        q->error = ev->error;
        snprintf(q->message, sizeof q->message, "%s", ev->message ? ev->message : "");
        if (!ev->done)
            rec_violation(rc, "request %llu: error without done", (unsigned long long)ev->id);
        break;
    }
    if (ev->done) {
        rc->n_done++;
        q->n_done++;
        q->usage = ev->usage;
    }
}

static void rec_free(recorder *rc) {
    for (size_t i = 0; i < rc->cap; i++) {
        free(rc->r[i].plp);
        free(rc->r[i].prank);
    }
    for (size_t i = 0; i < rc->cap; i++)
        for (int c = 0; c < REC_MAX_N; c++) {
            free(rc->r[i].ch[c].tok);
            pgd_buf_free(&rc->r[i].ch[c].text);
        }
    free(rc->r);
    memset(rc, 0, sizeof *rc);
}

/* Mismatches of request q's prompt logprobs against the fake model's own (pgd_fake_logprob, from
 * token ids alone, in double): one per prompt token after the first, with n_top alternatives and
 * the token's rank. */
static inline int prompt_lp_mismatches(const rec_req *q, const int32_t *prompt, uint32_t n_prompt,
                                       uint32_t eos_every, int32_t n_top) {
    if (q->n_plp != n_prompt - 1) {
        fprintf(stderr, "  %u prompt logprobs for a prompt of %u tokens\n", q->n_plp, n_prompt);
        return 1;
    }
    int bad = 0;
    int32_t top[PGD_SAMPLER_MAX_TOP_LOGPROBS], rank;
    for (uint32_t i = 0; i < q->n_plp; i++) {
        const pgd_sample_result *r = &q->plp[i];
        double want = pgd_fake_logprob(prompt, i + 2, eos_every, n_top, top, &rank);
        bad += r->token != prompt[i + 1] || fabs(r->logprob - want) > 1e-4 || r->n_top != n_top ||
               q->prank[i] != rank;
        for (int32_t k = 0; k < n_top && k < r->n_top; k++) bad += r->top[k].token != top[k];
    }
    return bad;
}

/* Random token ids in [lo, lo + span), from a seed. */
static inline void make_tokens(uint64_t seed, int32_t *out, uint32_t n, int32_t lo, uint32_t span) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (uint32_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[i] = lo + (int32_t)(x % span);
    }
}

static inline bool same_tokens(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* A scheduler configuration for tests: budgets B tokens and S sequences, max_waiting (0 = the
 * default), every plan and step checked. */
static inline pgd_sched_config checked_config(uint32_t B, uint32_t S, uint32_t max_waiting) {
    pgd_sched_config c;
    pgd_sched_config_default(&c);
    c.max_num_batched_tokens = B;
    c.max_num_seqs = S;
    c.max_waiting = max_waiting;
    c.check_invariants = true;
    return c;
}

/* A greedy request (temperature 0) for max_tokens tokens, EOS ignored. */
static inline pgd_request greedy_req(const int32_t *prompt, uint32_t n, int64_t max_tokens) {
    pgd_request r;
    pgd_request_init(&r);
    r.prompt = prompt;
    r.n_prompt = n;
    r.params.sampling.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
}

/* One step of S, counted in rec->step (the recorder's step number); its error said. */
static inline int sched_step(pgd_sched *S, recorder *rec, pgd_sched_step_info *info) {
    pgd_sched_step_info tmp;
    rec->step++;
    int rc = pgd_sched_step(S, info ? info : &tmp);
    if (rc) fprintf(stderr, "  step %llu: %s\n", (unsigned long long)rec->step, pgd_error_detail());
    return rc;
}

/* Steps until idle: how many; -1 on a step error or when max_steps is not enough. */
static inline int sched_run_idle(pgd_sched *S, recorder *rec, int max_steps) {
    for (int i = 0; i < max_steps; i++) {
        if (!pgd_sched_has_work(S)) return i;
        if (sched_step(S, rec, NULL)) return -1;
    }
    return -1;
}

/* Every usable KV block free again, and the pool consistent. */
static inline bool sched_pool_all_free(const pgd_sched *S) {
    const pgd_kvpool *pool = pgd_sched_pool(S);
    return pgd_kvpool_num_free(pool) == pgd_kvpool_num_blocks(pool) - 1 &&
           pgd_kvpool_check(pool) == 0;
}

#endif
