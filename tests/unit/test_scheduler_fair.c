/*
 * tests/unit/test_scheduler_fair.c — weighted fair share across tenants (scheduler/sched.h,
 * "Fair share": virtual token counters) and its FCFS alternative, driven step by step over the
 * fake backend (tests/support/fake_backend.h): deterministic, no timing.
 *
 * A simulation keeps chosen tenants backlogged for the whole run (it tops up each tenant's
 * waiting list before every step, so it is never empty) and counts from the step log what each
 * tenant was served: prompt positions the first time they are computed (cache hits and
 * recomputes are free) x the prompt factor + sampled tokens x the output factor — the
 * scheduler's own definition, counted independently. Service is compared over a window after a
 * warm-up. Every step runs the invariant checker (check_invariants: budgets, block ref counts,
 * list order, and that the running head got a token), the fake backend checks every batch and
 * the recorder checks the event contract; at the end the per-tenant stats must equal what the
 * test counted.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "support/fake_backend.h"
#include "scheduler/sched.h"
#include "test_scheduler_util.h"
#include "testutil.h"

#define MAX_T   4
#define MAX_IDS (1u << 16)

typedef struct tcfg {
    uint64_t id;
    float weight;
    int32_t priority;
    uint32_t depth;  /* keep at least this many waiting (0: only follows) */
    int leader;      /* submit `follow` requests whenever tenant `leader` submits one */
    uint32_t follow; /* (leader < 0: none) */
    uint32_t prompt_lo, prompt_hi, out_lo, out_hi;
    bool on; /* tops up (a tenant may join late) */
} tcfg;

typedef struct sim {
    pgd_model_info *info;
    pgd_runner *runner;
    pgd_sched *S;
    recorder rec;
    pgd_sched_config cfg;
    uint32_t n_t;
    tcfg tc[MAX_T];
    uint64_t next_id, x;
    uint8_t *t_of;         /* [MAX_IDS] tenant index of a request */
    uint32_t *np;          /* [MAX_IDS] its prompt length */
    uint32_t *hw;          /* [MAX_IDS] prompt positions counted */
    uint8_t *seen;         /* [MAX_IDS] appeared in the step log (admitted) */
    double service[MAX_T]; /* unweighted service */
    uint64_t computed[MAX_T], generated[MAX_T], prompt_adm[MAX_T], submitted[MAX_T];
    uint64_t n_steps, n_preempted;
    int step_errors;
    uint32_t empty_submits; /* submits (after the first step) that found the tenant not
                               backlogged */
    uint32_t chunk[MAX_T];  /* prompt positions computed in the last step, per tenant */
    uint32_t items[MAX_T];  /* items (sequences) of the last step, per tenant */
} sim;

static uint32_t sim_rnd(sim *m, uint32_t lo, uint32_t hi) {
    m->x ^= m->x << 13, m->x ^= m->x >> 7, m->x ^= m->x << 17;
    return lo + (uint32_t)(m->x % (hi - lo + 1));
}

static int sim_open(sim *m, pgd_sched_policy policy, uint32_t n_blocks, uint32_t B, uint32_t S_max,
                    bool caching) {
    memset(m, 0, sizeof *m);
    m->x = 0x9E3779B97F4A7C15ull;
    pgd_fake_config fc = {.n_blocks = n_blocks, .block_size = 16, .max_tokens = B, .verify = true};
    if (pgd_fake_create(&fc, &m->info, &m->runner)) return -1;
    m->cfg = checked_config(B, S_max, 1u << 20);
    m->cfg.policy = policy;
    m->cfg.prefix_caching = caching;
    m->t_of = calloc(MAX_IDS, 1);
    m->np = calloc(MAX_IDS, sizeof *m->np);
    m->hw = calloc(MAX_IDS, sizeof *m->hw);
    m->seen = calloc(MAX_IDS, 1);
    if (!m->t_of || !m->np || !m->hw || !m->seen) return -1;
    return pgd_sched_create(m->runner, &m->cfg, rec_event, &m->rec, &m->S);
}

static void sim_close(sim *m) {
    if (m->rec.violations) fprintf(stderr, "  event contract: %s\n", m->rec.why);
    CHECK_EQ_INT(m->rec.violations, 0);
    CHECK_EQ_INT(m->step_errors, 0);
    pgd_sched_destroy(m->S);
    pgd_runner_destroy(m->runner);
    pgd_model_info_close(m->info);
    rec_free(&m->rec);
    free(m->t_of);
    free(m->np);
    free(m->hw);
    free(m->seen);
}

static const pgd_sched_tenant_stats *tenant_stats(const pgd_sched_stats *st, uint64_t id) {
    for (uint32_t i = 0; i < st->n_tenants; i++)
        if (st->tenants[i].id == id) return &st->tenants[i];
    return NULL;
}

/* Submit one request of tenant ti (sizes from its config). */
static void sim_submit(sim *m, uint32_t ti, const pgd_sched_stats *st) {
    const tcfg *c = &m->tc[ti];
    uint64_t id = ++m->next_id;
    REQUIRE(id < MAX_IDS);
    const pgd_sched_tenant_stats *ts = st ? tenant_stats(st, c->id) : NULL;
    if (m->n_steps > 0 && (!ts || ts->n_waiting == 0)) m->empty_submits++;
    int32_t prompt[256];
    uint32_t n = sim_rnd(m, c->prompt_lo, c->prompt_hi);
    make_tokens(id * 7919 + ti, prompt, n, 0, 256);
    pgd_request r = greedy_req(prompt, n, sim_rnd(m, c->out_lo, c->out_hi));
    r.tenant = c->id;
    r.weight = c->weight;
    r.priority = c->priority;
    CHECK_EQ_INT(pgd_sched_submit(m->S, id, &r), 0);
    m->t_of[id] = (uint8_t)ti;
    m->np[id] = n;
    m->submitted[ti]++;
}

/* Keep every active tenant's waiting list at its depth (and the followers following). */
static void sim_topup(sim *m) {
    pgd_sched_stats st;
    pgd_sched_get_stats(m->S, &st);
    for (uint32_t ti = 0; ti < m->n_t; ti++) {
        const tcfg *c = &m->tc[ti];
        if (!c->on || !c->depth) continue;
        const pgd_sched_tenant_stats *ts = tenant_stats(&st, c->id);
        uint32_t waiting = ts ? ts->n_waiting : 0;
        for (; waiting < c->depth; waiting++) {
            sim_submit(m, ti, &st);
            pgd_sched_get_stats(m->S, &st);
            for (uint32_t f = 0; f < m->n_t; f++)
                if (m->tc[f].on && m->tc[f].leader == (int)ti)
                    for (uint32_t k = 0; k < m->tc[f].follow; k++) sim_submit(m, f, &st);
        }
    }
}

/* One step; count what each tenant was served from the step log. */
static void sim_step(sim *m) {
    pgd_sched_step_info info;
    m->rec.step++;
    m->n_steps++;
    if (pgd_sched_step(m->S, &info)) {
        if (!m->step_errors++) fprintf(stderr, "  step: %s\n", pgd_error_detail());
        return;
    }
    m->n_preempted += info.n_preempted;
    memset(m->chunk, 0, sizeof m->chunk);
    memset(m->items, 0, sizeof m->items);
    for (uint32_t k = 0; k < info.n_items; k++) {
        const pgd_sched_item_info *it = &info.items[k];
        uint64_t id = it->id;
        uint32_t ti = m->t_of[id], end = it->n_computed + it->n_tokens;
        m->items[ti]++;
        if (it->n_computed < it->n_prompt) {
            m->chunk[ti] += (end < it->n_prompt ? end : it->n_prompt) - it->n_computed;
        }
        uint32_t lo = it->n_computed > m->hw[id] ? it->n_computed : m->hw[id];
        uint32_t hi = end < it->n_prompt ? end : it->n_prompt;
        uint32_t fresh = hi > lo ? hi - lo : 0;
        if (hi > m->hw[id]) m->hw[id] = hi;
        m->service[ti] +=
            fresh * m->cfg.fair_prompt_factor + (it->sampled ? m->cfg.fair_output_factor : 0.0);
        m->computed[ti] += it->n_tokens;
        m->generated[ti] += it->sampled;
        if (!m->seen[id]) {
            m->seen[id] = 1;
            m->prompt_adm[ti] += m->np[id];
        }
    }
}

static void sim_run(sim *m, uint32_t steps) {
    for (uint32_t i = 0; i < steps; i++) {
        sim_topup(m);
        sim_step(m);
    }
}

static void sim_drain(sim *m) {
    for (int guard = 0; pgd_sched_has_work(m->S) && guard < 200000; guard++) sim_step(m);
    CHECK(!pgd_sched_has_work(m->S));
}

/* The per-tenant stats equal what the test counted (and the live states it sees); with
 * exact_vtime (no tenant was lifted), each counter equals its weighted service. */
static void check_stats(sim *m, bool exact_vtime) {
    pgd_sched_stats st;
    pgd_sched_get_stats(m->S, &st);
    uint64_t sum_computed = 0, sum_generated = 0;
    for (uint32_t ti = 0; ti < m->n_t; ti++) {
        const pgd_sched_tenant_stats *ts = tenant_stats(&st, m->tc[ti].id);
        if (!m->submitted[ti]) continue;
        REQUIRE(ts != NULL);
        CHECK_EQ_INT(ts->computed_tokens, m->computed[ti]);
        CHECK_EQ_INT(ts->generation_tokens, m->generated[ti]);
        CHECK_EQ_INT(ts->prompt_tokens, m->prompt_adm[ti]);
        uint32_t run = 0, wait = 0;
        for (uint64_t id = 1; id <= m->next_id; id++) {
            if (m->t_of[id] != ti) continue;
            pgd_seq_state s = pgd_sched_seq_state(m->S, id, 0);
            run += s == PGD_SEQ_RUNNING;
            wait += s == PGD_SEQ_WAITING || s == PGD_SEQ_PREEMPTED;
        }
        CHECK_EQ_INT(ts->n_running, run);
        CHECK_EQ_INT(ts->n_waiting, wait);
        if (exact_vtime)
            CHECK_NEAR(ts->vtime, m->service[ti] / m->tc[ti].weight, 1e-9 * (1 + ts->vtime));
        sum_computed += ts->computed_tokens;
        sum_generated += ts->generation_tokens;
    }
    CHECK_EQ_INT(sum_computed, st.computed_tokens);
    CHECK_EQ_INT(sum_generated, st.generation_tokens);
}

static tcfg tenant(uint64_t id, float weight, uint32_t depth, uint32_t plo, uint32_t phi,
                   uint32_t olo, uint32_t ohi) {
    return (tcfg){.id = id,
                  .weight = weight,
                  .depth = depth,
                  .leader = -1,
                  .prompt_lo = plo,
                  .prompt_hi = phi,
                  .out_lo = olo,
                  .out_hi = ohi,
                  .on = true};
}

/* Warm up, then serve a window: each tenant's unweighted service in the window into out[]. */
static void measure(sim *m, uint32_t warmup, uint32_t window, double *out) {
    sim_run(m, warmup);
    double s0[MAX_T];
    memcpy(s0, m->service, sizeof s0);
    sim_run(m, window);
    for (uint32_t ti = 0; ti < m->n_t; ti++) out[ti] = m->service[ti] - s0[ti];
}

/* ---- shares ---------------------------------------------------------------------------- */

/* Equal weights; A submits ten requests for each of B's (a deep queue), B keeps a shallow one
 * that never empties. FAIR serves both alike; FCFS serves them in arrival order, A far more. */
static void run_demand_10x(pgd_sched_policy policy, double out[2], uint64_t sub[2]) {
    sim m;
    REQUIRE(sim_open(&m, policy, 256, 64, 8, true) == 0);
    m.n_t = 2;
    m.tc[0] = tenant(1, 1, 0, 16, 48, 8, 24); /* A: follows B x10 */
    m.tc[0].leader = 1;
    m.tc[0].follow = 10;
    m.tc[1] = tenant(2, 1, 4, 16, 48, 8, 24); /* B */
    measure(&m, 300, 1500, out);
    sub[0] = m.submitted[0];
    sub[1] = m.submitted[1];
    /* the pool is large: a preemption could only be make_room's, and with both backlogged the
     * seats settle at the shares instead of changing hands every step */
    fprintf(stderr, "    %s: %llu preemptions in %llu steps\n",
            policy == PGD_SCHED_FAIR ? "FAIR" : "FCFS", (unsigned long long)m.n_preempted,
            (unsigned long long)m.n_steps);
    CHECK(m.n_preempted <= m.n_steps / 50);
    CHECK_EQ_INT(m.empty_submits, 0);
    check_stats(&m, true);
    sim_close(&m);
}

static void test_fair_equal_weights_10x_demand(void) {
    double fair[2], fcfs[2];
    uint64_t sf[2], sc[2];
    run_demand_10x(PGD_SCHED_FAIR, fair, sf);
    run_demand_10x(PGD_SCHED_FCFS, fcfs, sc);
    fprintf(stderr,
            "    FAIR: A %.0f, B %.0f (A/B %.3f; submitted %llu / %llu); FCFS: A %.0f, B %.0f "
            "(A/B %.2f; submitted %llu / %llu)\n",
            fair[0], fair[1], fair[0] / fair[1], (unsigned long long)sf[0],
            (unsigned long long)sf[1], fcfs[0], fcfs[1], fcfs[0] / fcfs[1],
            (unsigned long long)sc[0], (unsigned long long)sc[1]);
    CHECK(sf[0] == 10 * sf[1] && sc[0] == 10 * sc[1]);
    CHECK(fair[1] > 0 && fabs(fair[0] / fair[1] - 1) <= 0.10);
    CHECK(fcfs[0] > 3 * fcfs[1]);
}

/* Weights 3:1, both backlogged: service 3:1. */
static void test_fair_weights_3_to_1(void) {
    sim m;
    REQUIRE(sim_open(&m, PGD_SCHED_FAIR, 256, 64, 8, true) == 0);
    m.n_t = 2;
    m.tc[0] = tenant(7, 3, 12, 16, 48, 8, 24);
    m.tc[1] = tenant(9, 1, 4, 16, 48, 8, 24);
    double s[2];
    measure(&m, 300, 1500, s);
    fprintf(stderr, "    A (weight 3) %.0f, B (weight 1) %.0f: ratio %.3f\n", s[0], s[1],
            s[0] / s[1]);
    CHECK(s[1] > 0 && fabs(s[0] / s[1] - 3) <= 0.3);
    CHECK_EQ_INT(m.empty_submits, 0);
    check_stats(&m, true);
    sim_close(&m);
}

/* A: long prompts, short outputs; B: short prompts, long outputs. With the factors 1 (prompt)
 * and 2 (output) their service stays level. */
static void test_fair_prompt_output_mix(void) {
    sim m;
    REQUIRE(sim_open(&m, PGD_SCHED_FAIR, 256, 64, 8, true) == 0);
    m.n_t = 2;
    m.tc[0] = tenant(1, 1, 4, 96, 128, 2, 4);
    m.tc[1] = tenant(2, 1, 9, 4, 8, 48, 64); /* deeper than the seats: never emptied */
    double s[2];
    measure(&m, 300, 1500, s);
    fprintf(stderr,
            "    A (prompts 96-128, outputs 2-4) %.0f, B (prompts 4-8, outputs 48-64) %.0f: "
            "A/B %.3f; computed tokens A %llu, B %llu\n",
            s[0], s[1], s[0] / s[1], (unsigned long long)m.computed[0],
            (unsigned long long)m.computed[1]);
    CHECK(s[1] > 0 && fabs(s[0] / s[1] - 1) <= 0.10);
    CHECK_EQ_INT(m.empty_submits, 0);
    check_stats(&m, true);
    sim_close(&m);
}

/* A tenant that joins late starts at the lowest counter of the backlogged ones: it gets its
 * share from then on, not a burst paid by the credit it would have banked while away. */
/* A light tenant beside a backlogged one that holds every seat with long generations: FAIR
 * gives the light tenant's request a seat in the step it arrives (taking one from the tenant
 * over its share, which cannot take it back), so its first token comes at once; FCFS makes it
 * wait until a seat comes free. Then, both staying put, nothing is preempted again. */
static uint32_t light_first_token_steps(pgd_sched_policy policy, uint64_t *preempt_after) {
    sim m;
    uint32_t waited = UINT32_MAX;
    if (sim_open(&m, policy, 256, 64, 4, true) != 0) return waited;
    m.n_t = 2;
    m.tc[0] = tenant(1, 1, 6, 8, 16, 150, 200); /* A: backlogged, long outputs */
    m.tc[1] = tenant(2, 1, 0, 8, 16, 4, 4);     /* B: one request, by hand */
    sim_run(&m, 40);
    uint64_t pre0 = m.n_preempted;
    pgd_sched_stats st;
    pgd_sched_get_stats(m.S, &st);
    sim_submit(&m, 1, &st);
    for (uint32_t k = 1; k <= 400 && waited == UINT32_MAX; k++) {
        sim_topup(&m);
        sim_step(&m);
        if (m.generated[1]) waited = k;
    }
    uint64_t pre1 = m.n_preempted;
    sim_run(&m, 100); /* B's request is done in 4 steps; A alone again */
    *preempt_after = m.n_preempted - pre1;
    fprintf(stderr, "    %s: first token after %u steps, %llu preempted for it\n",
            policy == PGD_SCHED_FAIR ? "FAIR" : "FCFS", waited, (unsigned long long)(pre1 - pre0));
    check_stats(&m, false);
    sim_close(&m);
    return waited;
}

static void test_fair_light_tenant_gets_a_seat_at_once(void) {
    uint64_t after_fair, after_fcfs;
    uint32_t fair = light_first_token_steps(PGD_SCHED_FAIR, &after_fair);
    uint32_t fcfs = light_first_token_steps(PGD_SCHED_FCFS, &after_fcfs);
    CHECK_EQ_INT(fair, 1);
    CHECK(fcfs > 50 && fcfs != UINT32_MAX);
    CHECK_EQ_INT(after_fair, 0);
    CHECK_EQ_INT(after_fcfs, 0);
}

/* A busy tenant's long prompts beside a light tenant's requests, one at a time, arriving at
 * varied moments of the busy tenant's work: the step that carries a light request's first chunk
 * carries none of the busy tenant's prompt tokens, neither chunks nor admissions (on a CPU, a
 * step's time grows with its tokens: the light tenant's first token would wait for them); and
 * when it leaves the busy tenant beyond its seat share (2 of the 4 seats), none of its decodes
 * but the running head's. FCFS, for contrast, fills those steps with the busy tenant's prompts.
 * Out: the most of the busy tenant's prompt tokens in such a step over 24 light requests, the
 * most of its items in one that left it beyond its share (*items), *n of those. */
static uint32_t busy_tokens_beside_light(pgd_sched_policy policy, uint32_t *items, uint32_t *n) {
    sim m;
    uint32_t most = UINT32_MAX;
    *items = *n = 0;
    if (sim_open(&m, policy, 1024, 512, 4, false) != 0) return most;
    m.n_t = 2;
    m.tc[0] = tenant(1, 1, 8, 200, 256, 4, 8); /* A: backlogged, long prompts, short outputs */
    m.tc[1] = tenant(2, 1, 0, 64, 64, 4, 4);   /* B: one request at a time, by hand */
    sim_run(&m, 20);
    most = 0;
    for (uint32_t trial = 0; trial < 24; trial++) {
        sim_run(&m, 1 + trial % 7);
        pgd_sched_stats st;
        pgd_sched_get_stats(m.S, &st);
        sim_submit(&m, 1, &st);
        uint64_t b = m.next_id, done = m.generated[1] + 4;
        bool first = true;
        for (uint32_t k = 1; k <= 400 && m.generated[1] < done; k++) {
            sim_topup(&m);
            sim_step(&m);
            if (!m.chunk[1] || !first) continue;
            first = false;
            if (m.chunk[0] > most) most = m.chunk[0];
            pgd_sched_get_stats(m.S, &st);
            const pgd_sched_tenant_stats *a = tenant_stats(&st, 1);
            if (!a || a->n_running <= 2) continue; /* A within its share: its decodes run */
            ++*n;
            if (m.items[0] > *items) *items = m.items[0];
        }
        CHECK(m.seen[b] && m.generated[1] == done);
    }
    fprintf(stderr,
            "    %s: the busy tenant's prompt tokens in a light request's first step: at most %u, "
            "its items at most %u (%u steps)\n",
            policy == PGD_SCHED_FAIR ? "FAIR" : "FCFS", most, *items, *n);
    check_stats(&m, false);
    sim_close(&m);
    return most;
}

static void test_fair_busy_chunks_make_way(void) {
    uint32_t fair_items, fair_n, fcfs_items, fcfs_n;
    uint32_t fair = busy_tokens_beside_light(PGD_SCHED_FAIR, &fair_items, &fair_n);
    uint32_t fcfs = busy_tokens_beside_light(PGD_SCHED_FCFS, &fcfs_items, &fcfs_n);
    CHECK(fair_n >= 8 && fcfs_n >= 8);
    CHECK_EQ_INT(fair, 0);
    CHECK_EQ_INT(fair_items, 1); /* the running head's token */
    CHECK(fcfs > 64 && fcfs != UINT32_MAX);
    CHECK(fcfs_items >= 2);
}

/* While a light tenant has a request running, a busy tenant holding more than its seat share
 * computes at most max(16, budget / 32) prompt tokens per step, all its sequences together: the
 * step running when the light tenant's next request arrives is then short, and that request does
 * not wait for a step full of the busy tenant's prompts. FCFS, for contrast, fills such steps
 * with the busy tenant's prompts. Out: the most of the busy tenant's prompt tokens in one step
 * that left it beyond its share (2 of the 4 seats), *n such steps of the 60 the light tenant's
 * request runs, *total the busy tenant's prompt tokens in those 60 steps. */
static uint32_t busy_tokens_while_light_runs(pgd_sched_policy policy, uint32_t *n,
                                             uint64_t *total) {
    sim m;
    uint32_t most = UINT32_MAX;
    *n = 0;
    *total = 0;
    if (sim_open(&m, policy, 1024, 512, 4, false) != 0) return most;
    m.n_t = 2;
    m.tc[0] = tenant(1, 1, 8, 200, 256, 30, 60); /* A: backlogged, long prompts */
    m.tc[1] = tenant(2, 1, 0, 16, 16, 60, 60);   /* B: one long-running request, by hand */
    sim_run(&m, 20);
    pgd_sched_stats st;
    pgd_sched_get_stats(m.S, &st);
    sim_submit(&m, 1, &st);
    most = 0;
    for (uint32_t k = 1; k <= 400 && m.generated[1] < 60; k++) {
        sim_topup(&m);
        uint64_t b_before = m.generated[1];
        sim_step(&m);
        if (b_before == 0) continue; /* from B's first token on: B is running */
        *total += m.chunk[0];
        pgd_sched_get_stats(m.S, &st);
        const pgd_sched_tenant_stats *a = tenant_stats(&st, 1);
        if (!a || a->n_running <= 2) continue;
        ++*n;
        if (m.chunk[0] > most) most = m.chunk[0];
    }
    CHECK_EQ_INT(m.generated[1], 60);
    fprintf(stderr,
            "    %s: the busy tenant's prompt tokens in a step that left it beyond its share "
            "while the light one runs: at most %u (%u steps); %llu in all\n",
            policy == PGD_SCHED_FAIR ? "FAIR" : "FCFS", most, *n, (unsigned long long)*total);
    check_stats(&m, false);
    sim_close(&m);
    return most;
}

static void test_fair_busy_prompts_short_beside_light(void) {
    uint32_t fair_n, fcfs_n;
    uint64_t fair_total, fcfs_total;
    uint32_t fair = busy_tokens_while_light_runs(PGD_SCHED_FAIR, &fair_n, &fair_total);
    uint32_t fcfs = busy_tokens_while_light_runs(PGD_SCHED_FCFS, &fcfs_n, &fcfs_total);
    CHECK(fair_n >= 20 && fcfs_n >= 20); /* the busy tenant was beyond its share often */
    CHECK(fair <= 16);
    CHECK(fair_total >= 16 * 59 / 2); /* and it still progressed */
    CHECK(fcfs > 64 && fcfs != UINT32_MAX);
}

static void test_fair_late_joiner_no_burst(void) {
    sim m;
    REQUIRE(sim_open(&m, PGD_SCHED_FAIR, 256, 64, 8, true) == 0);
    m.n_t = 3;
    m.tc[0] = tenant(1, 1, 4, 16, 48, 8, 24);
    m.tc[1] = tenant(2, 1, 4, 16, 48, 8, 24);
    m.tc[2] = tenant(3, 1, 4, 16, 48, 8, 24);
    m.tc[2].on = false;
    sim_run(&m, 600);
    pgd_sched_stats st;
    pgd_sched_get_stats(m.S, &st);
    double va = tenant_stats(&st, 1)->vtime, vb = tenant_stats(&st, 2)->vtime;
    m.tc[2].on = true; /* C joins: its first submit finds it idle */
    sim_topup(&m);
    pgd_sched_get_stats(m.S, &st);
    double vc = tenant_stats(&st, 3)->vtime;
    fprintf(stderr, "    counters at the join: A %.0f, B %.0f; C starts at %.0f\n", va, vb, vc);
    CHECK_EQ_INT(m.empty_submits, 1);
    CHECK_NEAR(vc, va < vb ? va : vb, 1e-9);
    /* the first window after the join, where a burst would show, and a longer one */
    double s0[MAX_T], s1[MAX_T];
    memcpy(s0, m.service, sizeof s0);
    sim_run(&m, 100);
    memcpy(s1, m.service, sizeof s1);
    sim_run(&m, 900);
    double max_req = 48 + 2 * 24; /* one request's service at most */
    for (int w = 0; w < 2; w++) {
        const double *a = w ? s1 : s0, *b = w ? m.service : s1;
        double c = b[2] - a[2], total = 0;
        for (int t = 0; t < 3; t++) total += b[t] - a[t];
        fprintf(stderr, "    %s: C %.0f of %.0f (share %.0f)\n",
                w ? "next 900 steps" : "first 100 steps", c, total, total / 3);
        CHECK(c <= total / 3 + 2 * max_req);
        if (w) CHECK(fabs(c / (total / 3) - 1) <= 0.10);
    }
    check_stats(&m, false);
    sim_close(&m);
}

/* ---- order ----------------------------------------------------------------------------- */

/* Within a tenant, priority then arrival; across tenants, the lower counter (FAIR) or the
 * arrival (FCFS). One seat, so requests run one at a time and admission order is visible. */
static void run_order(pgd_sched_policy policy, uint64_t order[5]) {
    sim m;
    REQUIRE(sim_open(&m, policy, 64, 32, 1, true) == 0);
    m.n_t = 2;
    m.tc[0] = tenant(1, 1, 0, 8, 8, 4, 4);
    m.tc[1] = tenant(2, 1, 0, 8, 8, 4, 4);
    sim_submit(&m, 0, NULL); /* 1: A, priority 0 */
    sim_submit(&m, 0, NULL); /* 2: A, priority 0 */
    m.tc[0].priority = 5;
    sim_submit(&m, 0, NULL); /* 3: A, priority 5 */
    sim_submit(&m, 1, NULL); /* 4: B */
    sim_submit(&m, 1, NULL); /* 5: B */
    uint32_t n = 0;
    for (int guard = 0; pgd_sched_has_work(m.S) && guard < 1000; guard++) {
        sim_step(&m);
        for (uint64_t id = 1; id <= 5; id++)
            if (m.seen[id] == 1) {
                m.seen[id] = 2;
                if (n < 5) order[n++] = id;
            }
    }
    CHECK_EQ_INT(n, 5);
    check_stats(&m, true);
    sim_close(&m);
}

static void test_fair_priority_within_tenant(void) {
    uint64_t fair[5] = {0}, fcfs[5] = {0};
    run_order(PGD_SCHED_FAIR, fair);
    run_order(PGD_SCHED_FCFS, fcfs);
    fprintf(stderr, "    FAIR admits %llu %llu %llu %llu %llu, FCFS %llu %llu %llu %llu %llu\n",
            (unsigned long long)fair[0], (unsigned long long)fair[1], (unsigned long long)fair[2],
            (unsigned long long)fair[3], (unsigned long long)fair[4], (unsigned long long)fcfs[0],
            (unsigned long long)fcfs[1], (unsigned long long)fcfs[2], (unsigned long long)fcfs[3],
            (unsigned long long)fcfs[4]);
    /* A's 3 (priority 5) first; then the tenants alternate, each in its own order */
    static const uint64_t want_fair[5] = {3, 4, 1, 5, 2}, want_fcfs[5] = {3, 1, 2, 4, 5};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(fair[i], want_fair[i]);
        CHECK_EQ_INT(fcfs[i], want_fcfs[i]);
    }
}

/* A tiny pool and three sequences growing in lockstep: B1 (oldest), A1, B2 (youngest); A's
 * weight is 1, B's 10, so A is far above its share. When the pool runs out, B1 asks first:
 * FAIR preempts A1 (the over-share tenant's), FCFS the youngest, B2. Outputs stay exact. */
static void run_preempt(pgd_sched_policy policy, int preempted[3]) {
    sim m;
    REQUIRE(sim_open(&m, policy, 16, 64, 8, true) == 0); /* 15 usable blocks = 240 slots */
    m.n_t = 2;
    m.tc[0] = tenant(1, 1, 0, 16, 16, 100, 100);
    m.tc[1] = tenant(2, 10, 0, 16, 16, 100, 100);
    sim_submit(&m, 1, NULL); /* 1: B1 */
    sim_submit(&m, 0, NULL); /* 2: A1 */
    sim_submit(&m, 1, NULL); /* 3: B2 */
    bool first = true;
    for (int guard = 0; pgd_sched_has_work(m.S) && guard < 5000; guard++) {
        uint64_t before = m.n_preempted;
        sim_step(&m);
        if (m.n_preempted == before || !first) continue;
        first = false;
        for (uint64_t id = 1; id <= 3; id++)
            preempted[id - 1] = pgd_sched_seq_state(m.S, id, 0) == PGD_SEQ_PREEMPTED;
    }
    CHECK(!first);
    int32_t prompt[16], want[128];
    for (uint64_t id = 1; id <= 3; id++) {
        make_tokens(id * 7919 + m.t_of[id], prompt, 16, 0, 256);
        uint32_t n = pgd_fake_greedy(prompt, 16, 100, 0, true, want);
        const rec_choice *c = &m.rec.r[id].ch[0];
        CHECK(same_tokens(c->tok, c->n, want, n));
    }
    check_stats(&m, true);
    sim_close(&m);
}

static void test_fair_preemption_picks_over_share_tenant(void) {
    int fair[3] = {0}, fcfs[3] = {0};
    run_preempt(PGD_SCHED_FAIR, fair);
    run_preempt(PGD_SCHED_FCFS, fcfs);
    fprintf(stderr, "    first preemption: FAIR B1 %d A1 %d B2 %d, FCFS B1 %d A1 %d B2 %d\n",
            fair[0], fair[1], fair[2], fcfs[0], fcfs[1], fcfs[2]);
    CHECK(!fair[0] && fair[1] && !fair[2]);
    CHECK(!fcfs[0] && !fcfs[1] && fcfs[2]);
}

/* ---- stats and progress ------------------------------------------------------------------ */

/* Prompt positions are charged once per request: shared system prompts (prefix-cache hits are
 * not computed, so not charged) and a tiny pool (recomputes after preemption are not charged
 * again). Every request submitted up front, so no counter is lifted: each counter equals the
 * weighted service the test counted. */
static void test_fair_stats_match(void) {
    sim m;
    REQUIRE(sim_open(&m, PGD_SCHED_FAIR, 24, 48, 6, true) == 0);
    m.n_t = 3;
    m.tc[0] = tenant(1, 1, 0, 0, 0, 8, 40);
    m.tc[1] = tenant(2, 2, 0, 0, 0, 8, 40);
    m.tc[2] = tenant(3, 0.5f, 0, 0, 0, 8, 40);
    int32_t sys[64], prompt[128];
    make_tokens(4242, sys, 64, 0, 256);
    for (uint64_t id = 1; id <= 90; id++) {
        uint32_t ti = (uint32_t)(id % 3), pre = sim_rnd(&m, 0, 2) * 32;
        uint32_t n = pre + sim_rnd(&m, 1, 60);
        memcpy(prompt, sys, pre * sizeof *prompt);
        make_tokens(id, prompt + pre, n - pre, 0, 256);
        pgd_request r = greedy_req(prompt, n, sim_rnd(&m, 8, 40));
        r.tenant = m.tc[ti].id;
        r.weight = m.tc[ti].weight;
        CHECK_EQ_INT(pgd_sched_submit(m.S, id, &r), 0);
        m.t_of[id] = (uint8_t)ti;
        m.np[id] = n;
        m.submitted[ti]++;
        m.next_id = id;
    }
    for (int k = 0; k < 40; k++) sim_step(&m);
    check_stats(&m, true); /* mid-run: running and waiting counts too */
    sim_drain(&m);
    pgd_sched_stats st;
    pgd_sched_get_stats(m.S, &st);
    uint64_t fresh = 0;
    for (uint32_t ti = 0; ti < 3; ti++) fresh += m.prompt_adm[ti];
    fprintf(stderr,
            "    %llu preemptions, %llu prefix-cache hit tokens, %llu prompt tokens computed "
            "(of %llu)\n",
            (unsigned long long)st.n_preemptions, (unsigned long long)st.prefix_hit_tokens,
            (unsigned long long)st.prompt_computed_tokens, (unsigned long long)fresh);
    CHECK(st.n_preemptions > 0);
    CHECK(st.prefix_hit_tokens > 0);
    CHECK_EQ_INT(st.n_tenants, 3);
    check_stats(&m, true);
    sim_close(&m);
}

/* A random walk mixing tenants, weights, priorities, n > 1 and aborts over a tiny pool, under
 * both policies: no step fails, every request finishes (exact greedy outputs unless aborted),
 * and the checker confirms every step that the running head progressed. */
static void run_random_walk(pgd_sched_policy policy) {
    sim m;
    REQUIRE(sim_open(&m, policy, 10, 40, 6, true) == 0); /* 9 usable blocks, 144 slots */
    m.x = 0x51ED2701u + (uint64_t)policy;
    enum { N = 1500 };
    static int32_t prompts[N + 1][96];
    static uint32_t lens[N + 1], outs[N + 1], ns[N + 1];
    static bool aborted[N + 1];
    memset(aborted, 0, sizeof aborted);
    int32_t sys[2][32];
    for (int k = 0; k < 2; k++) make_tokens(777 + k, sys[k], 32, 0, 256);
    uint64_t n_abort = 0, events = 0;
    while (m.next_id < N) {
        uint32_t op = sim_rnd(&m, 0, 99);
        if (op < 35) {
            uint64_t id = ++m.next_id;
            uint32_t pre = sim_rnd(&m, 0, 2) ? 0 : 32, k = sim_rnd(&m, 0, 1);
            lens[id] = pre + sim_rnd(&m, 1, 60);
            memcpy(prompts[id], sys[k], pre * sizeof(int32_t));
            make_tokens(id * 31, prompts[id] + pre, lens[id] - pre, 0, 256);
            outs[id] = sim_rnd(&m, 1, 40);
            ns[id] = sim_rnd(&m, 0, 9) < 8 ? 1 : 2;
            pgd_request r = greedy_req(prompts[id], lens[id], outs[id]);
            r.n = ns[id];
            uint32_t t = sim_rnd(&m, 0, 3);
            r.tenant = 100 + t;
            r.weight = (float)(1 + t % 3);
            r.priority = (int32_t)sim_rnd(&m, 0, 2) - 1;
            int rc = pgd_sched_submit(m.S, id, &r);
            CHECK(rc == 0);
            m.t_of[id] = (uint8_t)t;
        } else if (op < 40 && m.next_id) {
            uint64_t id = 1 + sim_rnd(&m, 0, (uint32_t)m.next_id - 1);
            if (pgd_sched_abort(m.S, id) == 0) {
                aborted[id] = true;
                n_abort++;
            }
        } else if (pgd_sched_has_work(m.S)) {
            sim_step(&m);
        }
        events++;
    }
    sim_drain(&m);
    pgd_sched_stats st;
    pgd_sched_get_stats(m.S, &st);
    const pgd_kvpool *pool = pgd_sched_pool(m.S);
    CHECK_EQ_INT(pgd_kvpool_num_free(pool), pgd_kvpool_num_blocks(pool) - 1);
    CHECK_EQ_INT(st.n_requests + st.n_running + st.n_waiting, 0);
    int32_t want[64];
    uint64_t bad = 0, checked = 0;
    for (uint64_t id = 1; id <= m.next_id; id++) {
        const rec_req *q = rec_get(&m.rec, id);
        bad += q->n_done != 1 || q->n_error != 0;
        if (aborted[id]) continue;
        uint32_t n = pgd_fake_greedy(prompts[id], lens[id], outs[id], 0, true, want);
        for (uint32_t c = 0; c < ns[id]; c++, checked++)
            bad += !same_tokens(q->ch[c].tok, q->ch[c].n, want, n);
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < st.n_tenants; i++) sum += st.tenants[i].computed_tokens;
    fprintf(stderr,
            "    %s: %llu requests (%llu aborted), %llu steps, %llu preemptions, %llu outputs "
            "checked\n",
            pgd_sched_policy_str(policy), (unsigned long long)m.next_id,
            (unsigned long long)n_abort, (unsigned long long)m.n_steps,
            (unsigned long long)st.n_preemptions, (unsigned long long)checked);
    CHECK_EQ_INT(bad, 0);
    CHECK(st.n_preemptions > 0);
    CHECK_EQ_INT(sum, st.computed_tokens);
    CHECK_EQ_INT(st.n_tenants, 4);
    sim_close(&m);
}

static void test_fair_random_walk_both_policies(void) {
    run_random_walk(PGD_SCHED_FAIR);
    run_random_walk(PGD_SCHED_FCFS);
}

/* ---- configuration ------------------------------------------------------------------------ */

static void test_fair_config(void) {
    pgd_sched_config c;
    pgd_sched_config_default(&c);
    CHECK_EQ_INT(c.policy, PGD_SCHED_FAIR);
    CHECK_NEAR(c.fair_prompt_factor, 1, 0);
    CHECK_NEAR(c.fair_output_factor, 2, 0);
    pgd_sched_policy p = PGD_SCHED_FAIR;
    CHECK_EQ_INT(pgd_sched_policy_parse("fcfs", &p), 0);
    CHECK_EQ_INT(p, PGD_SCHED_FCFS);
    CHECK_EQ_INT(pgd_sched_policy_parse("fair", &p), 0);
    CHECK_EQ_INT(p, PGD_SCHED_FAIR);
    CHECK_EQ_INT(pgd_sched_policy_parse("lottery", &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "lottery") != NULL);
    CHECK_EQ_STR(pgd_sched_policy_str(PGD_SCHED_FAIR), "fair");
    CHECK_EQ_STR(pgd_sched_policy_str(PGD_SCHED_FCFS), "fcfs");
    /* bad factors are refused at create */
    pgd_fake_config fc = {.n_blocks = 16, .block_size = 16};
    pgd_model_info *info;
    pgd_runner *runner;
    REQUIRE(pgd_fake_create(&fc, &info, &runner) == 0);
    pgd_sched *S = NULL;
    float bad[][2] = {{0, 0}, {-1, 2}, {1, NAN}, {INFINITY, 1}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(bad); i++) {
        c.fair_prompt_factor = bad[i][0];
        c.fair_output_factor = bad[i][1];
        CHECK_EQ_INT(pgd_sched_create(runner, &c, NULL, NULL, &S), PGD_EINVAL);
        CHECK(S == NULL);
    }
    c.fair_prompt_factor = 0; /* output only */
    c.fair_output_factor = 1;
    CHECK_EQ_INT(pgd_sched_create(runner, &c, NULL, NULL, &S), 0);
    pgd_sched_destroy(S);
    pgd_runner_destroy(runner);
    pgd_model_info_close(info);
}

int main(void) {
    RUN(test_fair_config);
    RUN(test_fair_equal_weights_10x_demand);
    RUN(test_fair_weights_3_to_1);
    RUN(test_fair_prompt_output_mix);
    RUN(test_fair_late_joiner_no_burst);
    RUN(test_fair_light_tenant_gets_a_seat_at_once);
    RUN(test_fair_busy_chunks_make_way);
    RUN(test_fair_busy_prompts_short_beside_light);
    RUN(test_fair_priority_within_tenant);
    RUN(test_fair_preemption_picks_over_share_tenant);
    RUN(test_fair_stats_match);
    RUN(test_fair_random_walk_both_policies);
    return test_summary();
}
