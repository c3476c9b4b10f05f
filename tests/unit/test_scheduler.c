/*
 * tests/unit/test_scheduler.c — the scheduler core (scheduler/sched.h) driven step by step over
 * the fake backend (tests/support/fake_backend.h): no model, deterministic.
 *
 * Every step runs the invariant checker (check_invariants: budgets, block ref counts against
 * the running tables, pool invariants, list order and counts), the fake backend checks every
 * batch it gets (slots against block tables, no slot written twice, stale KV, whole-context
 * hashes) and records it, and the recorder checks the event contract. Outputs are compared with
 * pgd_fake_greedy, which computes the model from token ids alone (no KV, no scheduler).
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "support/fake_backend.h"
#include "scheduler/sched.h"
#include "test_scheduler_util.h"
#include "testutil.h"

typedef struct env {
    pgd_model_info *info;
    pgd_runner *runner;
    pgd_sched *S;
    recorder rec;
    uint32_t B, S_max;
} env;

static int env_open(env *e, uint32_t n_blocks, uint32_t B, uint32_t S_max, uint32_t eos_every,
                    bool caching) {
    memset(e, 0, sizeof *e);
    pgd_fake_config fc = {.n_blocks = n_blocks,
                          .block_size = 16,
                          .max_tokens = B,
                          .eos_every = eos_every,
                          .verify = true,
                          .record = true};
    if (pgd_fake_create(&fc, &e->info, &e->runner)) return -1;
    pgd_sched_config c = checked_config(B, S_max, 0);
    c.prefix_caching = caching;
    e->B = B;
    e->S_max = S_max;
    return pgd_sched_create(e->runner, &c, rec_event, &e->rec, &e->S);
}

/* The fake backend's own log: no forward exceeded the budgets. */
static int log_violations(const env *e) {
    size_t n;
    const pgd_fake_batch *log = pgd_fake_log(pgd_runner_backend(e->runner), &n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += log[i].n_tokens > e->B || log[i].n_seqs > e->S_max;
    return bad;
}

static void env_close(env *e) {
    CHECK_EQ_INT(log_violations(e), 0);
    if (e->rec.violations) fprintf(stderr, "  event contract: %s\n", e->rec.why);
    CHECK_EQ_INT(e->rec.violations, 0);
    pgd_sched_destroy(e->S);
    pgd_runner_destroy(e->runner);
    pgd_model_info_close(e->info);
    rec_free(&e->rec);
}

static int step(env *e, pgd_sched_step_info *info) {
    return sched_step(e->S, &e->rec, info);
}

static int run_idle(env *e, int max_steps) {
    return sched_run_idle(e->S, &e->rec, max_steps);
}

static bool output_is(const recorder *rc, uint64_t id, uint32_t choice, const int32_t *want,
                      uint32_t n) {
    if (id >= rc->cap) return false;
    const rec_choice *c = &rc->r[id].ch[choice];
    return same_tokens(c->tok, c->n, want, n);
}

/* ---- basic ----------------------------------------------------------------------------- */

static void test_greedy_matches_reference(void) {
    env e;
    REQUIRE(env_open(&e, 128, 64, 8, 0, true) == 0);
    int32_t prompts[10][128], want[64];
    for (uint32_t i = 0; i < 10; i++) {
        make_tokens(i, prompts[i], 1 + 13 * i, 0, 256);
        pgd_request r = greedy_req(prompts[i], 1 + 13 * i, 5 + 3 * i);
        CHECK_EQ_INT(pgd_sched_submit(e.S, i + 1, &r), 0);
    }
    CHECK(run_idle(&e, 1000) > 0);
    uint64_t total = 0;
    for (uint32_t i = 0; i < 10; i++) {
        uint32_t M = 5 + 3 * i, n = pgd_fake_greedy(prompts[i], 1 + 13 * i, M, 0, true, want);
        const rec_req *q = &e.rec.r[i + 1];
        CHECK(output_is(&e.rec, i + 1, 0, want, n));
        CHECK_EQ_INT(q->ch[0].reason, PGD_REASON_LENGTH);
        CHECK_EQ_INT(q->n_done, 1);
        CHECK_EQ_INT(q->usage.prompt_tokens, 1 + 13 * i);
        CHECK_EQ_INT(q->usage.completion_tokens, M);
        /* printable ASCII tokens: the text is exactly their bytes */
        char text[64];
        for (uint32_t k = 0; k < n; k++) text[k] = (char)want[k];
        text[n] = '\0';
        CHECK_EQ_STR(q->ch[0].text.data, text);
        total += M;
    }
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    CHECK_EQ_INT(st.n_finished, 10);
    CHECK_EQ_INT(st.generation_tokens, total);
    CHECK_EQ_INT(st.n_running + st.n_waiting + st.n_requests, 0);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

static void test_eos_and_stop_strings(void) {
    env e;
    REQUIRE(env_open(&e, 128, 64, 8, 5, true) == 0);
    int32_t p[6][40], want[200];
    /* EOS ends a sequence with "stop"; it has no text and counts as an output token */
    for (uint32_t i = 0; i < 5; i++) {
        make_tokens(100 + i, p[i], 30, 0, 256);
        pgd_request r = greedy_req(p[i], 30, 100);
        r.params.ignore_eos = false;
        CHECK_EQ_INT(pgd_sched_submit(e.S, i + 1, &r), 0);
    }
    /* a stop string taken from the middle of the expected text */
    make_tokens(200, p[5], 30, 0, 256);
    uint32_t n_full = pgd_fake_greedy(p[5], 30, 60, 5, true, want);
    char full[256];
    size_t len = 0;
    for (uint32_t k = 0; k < n_full; k++)
        if (want[k] != PGD_FAKE_EOS) full[len++] = (char)want[k];
    full[len] = '\0';
    REQUIRE(len > 20);
    char stop[4];
    memcpy(stop, full + 12, 3);
    stop[3] = '\0';
    char expect[256];
    size_t cut = (size_t)(strstr(full, stop) - full);
    memcpy(expect, full, cut);
    expect[cut] = '\0';
    pgd_request r = greedy_req(p[5], 30, 60);
    pgd_str s = {stop, 3};
    r.params.stop = &s;
    r.params.n_stop = 1;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 6, &r), 0);
    CHECK(run_idle(&e, 1000) > 0);
    for (uint32_t i = 0; i < 5; i++) {
        uint32_t n = pgd_fake_greedy(p[i], 30, 100, 5, false, want);
        CHECK(output_is(&e.rec, i + 1, 0, want, n));
        CHECK_EQ_INT(e.rec.r[i + 1].ch[0].reason,
                     want[n - 1] == PGD_FAKE_EOS ? PGD_REASON_STOP : PGD_REASON_LENGTH);
        CHECK(want[n - 1] == PGD_FAKE_EOS); /* eos_every 5: always well before 100 */
    }
    CHECK_EQ_INT(e.rec.r[6].ch[0].reason, PGD_REASON_STOP);
    CHECK_EQ_STR(e.rec.r[6].ch[0].text.data ? e.rec.r[6].ch[0].text.data : "", expect);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- chunked prefill ---------------------------------------------------------------------- */

static void test_chunked_prefill_keeps_streams_going(void) {
    env e;
    REQUIRE(env_open(&e, 400, 64, 8, 0, true) == 0);
    enum { N_STREAMS = 3, LONG = 4000 };
    int32_t sp[N_STREAMS][20], want[128];
    int32_t *lp = malloc(LONG * sizeof *lp);
    REQUIRE(lp);
    for (uint32_t i = 0; i < N_STREAMS; i++) {
        make_tokens(300 + i, sp[i], 20, 0, 256);
        pgd_request r = greedy_req(sp[i], 20, 100);
        CHECK_EQ_INT(pgd_sched_submit(e.S, i + 1, &r), 0);
    }
    CHECK_EQ_INT(step(&e, NULL), 0); /* the streams' prompts */
    CHECK_EQ_INT(step(&e, NULL), 0); /* a decode step */
    make_tokens(999, lp, LONG, 0, 256);
    pgd_request r = greedy_req(lp, LONG, 5);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 10, &r), 0);
    /* The step log: while the long prompt is prefilled, every stream decodes each step. */
    int prefill_steps = 0, missed = 0, over = 0;
    uint32_t prefilled = 0;
    for (int guard = 0; pgd_sched_has_work(e.S) && guard < 1000; guard++) {
        pgd_sched_step_info info;
        REQUIRE(step(&e, &info) == 0);
        over += info.n_tokens > 64 || info.n_items > 8;
        const pgd_sched_item_info *lng = NULL;
        int decodes = 0;
        for (uint32_t k = 0; k < info.n_items; k++) {
            const pgd_sched_item_info *it = &info.items[k];
            if (it->id == 10 && it->n_computed < LONG) lng = it;
            if (it->id <= N_STREAMS && it->decode && it->sampled) decodes++;
        }
        if (lng) {
            prefill_steps++;
            prefilled += lng->n_tokens;
            if (decodes != N_STREAMS) missed++;
            if (prefill_steps <= 3 || lng->n_computed + lng->n_tokens == LONG)
                fprintf(stderr, "    step %llu: prompt chunk %u..%u, %d streams decoded\n",
                        (unsigned long long)e.rec.step, lng->n_computed,
                        lng->n_computed + lng->n_tokens, decodes);
        }
    }
    fprintf(stderr, "    the 4000-token prompt took %d steps\n", prefill_steps);
    CHECK_EQ_INT(prefilled, LONG);
    CHECK(prefill_steps >= LONG / 64);
    CHECK_EQ_INT(missed, 0);
    CHECK_EQ_INT(over, 0);
    for (uint32_t i = 0; i < N_STREAMS; i++) {
        uint32_t n = pgd_fake_greedy(sp[i], 20, 100, 0, true, want);
        CHECK(output_is(&e.rec, i + 1, 0, want, n));
    }
    uint32_t n = pgd_fake_greedy(lp, LONG, 5, 0, true, want);
    CHECK(output_is(&e.rec, 10, 0, want, n));
    CHECK(sched_pool_all_free(e.S));
    free(lp);
    env_close(&e);
}

/* ---- prefix cache ------------------------------------------------------------------------- */

static void run_prefix_case(bool caching) {
    env e;
    REQUIRE(env_open(&e, 200, 512, 8, 0, caching) == 0);
    enum { SYS = 512, SUF = 40 };
    int32_t a[SYS + SUF], b[SYS + SUF], want[32];
    make_tokens(4242, a, SYS, 0, 256);
    memcpy(b, a, SYS * sizeof *a);
    make_tokens(1, a + SYS, SUF, 0, 256);
    make_tokens(2, b + SYS, SUF, 0, 256);
    pgd_request r = greedy_req(a, SYS + SUF, 16);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    pgd_sched_stats s0, s1, s2;
    pgd_sched_get_stats(e.S, &s0);
    CHECK_EQ_INT(s0.kv_blocks_used, 0);
    if (caching) CHECK(s0.kv_blocks_cached >= SYS / 16); /* ref 0, still cached */
    r = greedy_req(b, SYS + SUF, 16);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    pgd_sched_get_stats(e.S, &s1);
    uint32_t n = pgd_fake_greedy(b, SYS + SUF, 16, 0, true, want);
    CHECK(output_is(&e.rec, 2, 0, want, n));
    CHECK_EQ_INT(e.rec.r[1].usage.cached_tokens, 0);
    if (caching) {
        CHECK_EQ_INT(s1.prefix_hit_tokens - s0.prefix_hit_tokens, SYS);
        CHECK_EQ_INT(s1.prefix_query_tokens - s0.prefix_query_tokens, SYS + SUF);
        CHECK_EQ_INT(s1.prompt_computed_tokens - s0.prompt_computed_tokens, SUF);
        CHECK_EQ_INT(e.rec.r[2].usage.cached_tokens, SYS);
    } else {
        CHECK_EQ_INT(s1.prefix_hit_tokens, 0);
        CHECK_EQ_INT(s1.prompt_computed_tokens - s0.prompt_computed_tokens, SYS + SUF);
        CHECK_EQ_INT(e.rec.r[2].usage.cached_tokens, 0);
    }
    /* another salt (tenant) shares nothing */
    r = greedy_req(b, SYS + SUF, 16);
    r.params.cache_salt = 99;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    pgd_sched_get_stats(e.S, &s2);
    CHECK(output_is(&e.rec, 3, 0, want, n));
    CHECK_EQ_INT(s2.prefix_hit_tokens, s1.prefix_hit_tokens);
    CHECK_EQ_INT(s2.prompt_computed_tokens - s1.prompt_computed_tokens, SYS + SUF);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

static void test_prefix_cache_prefills_only_suffix(void) {
    run_prefix_case(true);
}

static void test_prefix_cache_off(void) {
    run_prefix_case(false);
}

/* ---- preemption --------------------------------------------------------------------------- */

enum { LOAD_N = 8 };

/* Run the same 8 requests on a pool of n_blocks; outputs into out[i] (n in n_out[i]). */
static void run_load(uint32_t n_blocks, float temperature, int32_t out[LOAD_N][128],
                     uint32_t n_out[LOAD_N], uint64_t *n_preempt) {
    env e;
    REQUIRE(env_open(&e, n_blocks, 32, 8, 0, true) == 0);
    int32_t p[LOAD_N][64];
    for (uint32_t i = 0; i < LOAD_N; i++) {
        make_tokens(500 + i, p[i], 10 + 7 * i, 0, 256);
        pgd_request r = greedy_req(p[i], 10 + 7 * i, 40 + 3 * i);
        r.params.sampling.temperature = temperature;
        r.params.sampling.seed = 77 + i;
        CHECK_EQ_INT(pgd_sched_submit(e.S, i + 1, &r), 0);
    }
    CHECK(run_idle(&e, 5000) > 0);
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    *n_preempt = st.n_preemptions;
    for (uint32_t i = 0; i < LOAD_N; i++) {
        const rec_choice *c = &e.rec.r[i + 1].ch[0];
        CHECK_EQ_INT(c->reason, PGD_REASON_LENGTH);
        n_out[i] = c->n;
        memcpy(out[i], c->tok, c->n * sizeof(int32_t));
    }
    CHECK_EQ_INT(st.n_finished, LOAD_N);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

static void check_preemption(float temperature) {
    static int32_t tight[LOAD_N][128], roomy[LOAD_N][128];
    uint32_t n_tight[LOAD_N], n_roomy[LOAD_N];
    uint64_t pre_tight = 0, pre_roomy = 0;
    run_load(24, temperature, tight, n_tight, &pre_tight);
    run_load(256, temperature, roomy, n_roomy, &pre_roomy);
    fprintf(stderr, "    temperature %.1f: %llu preemptions with 24 blocks, %llu with 256\n",
            temperature, (unsigned long long)pre_tight, (unsigned long long)pre_roomy);
    CHECK(pre_tight > 0);
    CHECK_EQ_INT(pre_roomy, 0);
    int32_t p[64], want[128];
    for (uint32_t i = 0; i < LOAD_N; i++) {
        CHECK(same_tokens(tight[i], n_tight[i], roomy[i], n_roomy[i]));
        if (temperature == 0) {
            make_tokens(500 + i, p, 10 + 7 * i, 0, 256);
            uint32_t n = pgd_fake_greedy(p, 10 + 7 * i, 40 + 3 * i, 0, true, want);
            CHECK(same_tokens(tight[i], n_tight[i], want, n));
        }
    }
}

static void test_preemption_same_output_greedy(void) {
    check_preemption(0.0f);
}

static void test_preemption_same_output_sampled(void) {
    check_preemption(1.0f);
}

/* The lowest priority is preempted, even when it is the oldest. */
static void test_preemption_victim_is_lowest_priority(void) {
    env e;
    REQUIRE(env_open(&e, 12, 32, 8, 0, true) == 0); /* 11 usable blocks */
    int32_t lo[40], hi[40], want[128];
    make_tokens(61, lo, 40, 0, 256);
    make_tokens(62, hi, 40, 0, 256);
    pgd_request r = greedy_req(lo, 40, 120);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    CHECK_EQ_INT(step(&e, NULL), 0);
    r = greedy_req(hi, 40, 120);
    r.priority = 5;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    int lo_preempted = 0, hi_preempted = 0;
    for (int guard = 0; pgd_sched_has_work(e.S) && guard < 2000; guard++) {
        REQUIRE(step(&e, NULL) == 0);
        lo_preempted += pgd_sched_seq_state(e.S, 1, 0) == PGD_SEQ_PREEMPTED;
        hi_preempted += pgd_sched_seq_state(e.S, 2, 0) == PGD_SEQ_PREEMPTED;
    }
    CHECK(lo_preempted > 0);
    CHECK_EQ_INT(hi_preempted, 0);
    /* the high-priority one finished first */
    CHECK(e.rec.r[2].ch[0].last_ns <= e.rec.r[1].ch[0].last_ns);
    uint32_t n = pgd_fake_greedy(lo, 40, 120, 0, true, want);
    CHECK(output_is(&e.rec, 1, 0, want, n));
    n = pgd_fake_greedy(hi, 40, 120, 0, true, want);
    CHECK(output_is(&e.rec, 2, 0, want, n));
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- admission errors --------------------------------------------------------------------- */

static void test_refuse_what_can_never_fit(void) {
    env e;
    REQUIRE(env_open(&e, 10, 64, 8, 0, true) == 0); /* 9 usable blocks = 144 slots */
    int32_t p[200], want[64];
    make_tokens(7, p, 200, 0, 256);
    pgd_request r = greedy_req(p, 100, 46); /* 145 slots */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "KV cache") != NULL);
    fprintf(stderr, "    refused: %s\n", pgd_error_detail());
    r = greedy_req(p, 100, 45); /* exactly 144 slots */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    r = greedy_req(p + 50, 100, 0); /* up to what fits */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    r = greedy_req(p, 145, 0);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 4, &r), PGD_EINVAL);
    r = greedy_req(p, 144, 0); /* one token of output fits */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 5, &r), 0);
    r = greedy_req(p, 0, 4);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 6, &r), PGD_EINVAL);
    p[150] = 300;
    r = greedy_req(p + 150, 3, 4);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 7, &r), PGD_EINVAL);
    p[150] = 1;
    r = greedy_req(p, 10, 4);
    r.n = 9; /* more choices than max_num_seqs */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 8, &r), PGD_EINVAL);
    r.n = 1;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), PGD_EINVAL); /* id in use */
    CHECK(run_idle(&e, 1000) > 0);
    uint32_t n = pgd_fake_greedy(p, 100, 45, 0, true, want);
    CHECK(output_is(&e.rec, 2, 0, want, n));
    CHECK_EQ_INT(e.rec.r[3].ch[0].n, 45);
    CHECK_EQ_INT(e.rec.r[3].ch[0].reason, PGD_REASON_LENGTH);
    CHECK_EQ_INT(e.rec.r[5].ch[0].n, 1);
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    CHECK_EQ_INT(st.n_refused, 6);
    CHECK_EQ_INT(st.n_finished, 3);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

static void test_max_waiting(void) {
    env e;
    REQUIRE(env_open(&e, 64, 64, 2, 0, true) == 0);
    pgd_sched_destroy(e.S);
    pgd_sched_config c = checked_config(64, 2, 3);
    REQUIRE(pgd_sched_create(e.runner, &c, rec_event, &e.rec, &e.S) == 0);
    int32_t p[8];
    make_tokens(3, p, 8, 0, 256);
    pgd_request r = greedy_req(p, 8, 30);
    for (uint64_t id = 1; id <= 3; id++) CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 4, &r), PGD_EFULL);
    CHECK_EQ_INT(step(&e, NULL), 0); /* admits 2 (max_num_seqs) */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 5, &r), 0);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 6, &r), 0);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 7, &r), PGD_EFULL);
    CHECK(run_idle(&e, 1000) > 0);
    CHECK_EQ_INT(e.rec.n_done, 5);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- n > 1 --------------------------------------------------------------------------------- */

static void test_n_choices_share_prompt(void) {
    env e;
    REQUIRE(env_open(&e, 128, 64, 16, 0, true) == 0);
    int32_t p[80], want[64];
    /* greedy n = 4, prompt 69: 4 full blocks shared, the partial one copied on write 3 times */
    make_tokens(11, p, 69, 0, 256);
    pgd_request r = greedy_req(p, 69, 12);
    r.n = 4;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    uint64_t copies0 = pgd_fake_n_copies(pgd_runner_backend(e.runner));
    uint32_t used_at_fork = 0;
    for (int guard = 0; pgd_sched_has_work(e.S) && guard < 100; guard++) {
        REQUIRE(step(&e, NULL) == 0);
        if (!used_at_fork && e.rec.cap > 1 && e.rec.r[1].ch[3].n == 1) {
            pgd_sched_stats st;
            pgd_sched_get_stats(e.S, &st);
            used_at_fork = st.kv_blocks_used;
        }
    }
    CHECK_EQ_INT(used_at_fork, 4 + 4); /* not 4 * 5 */
    CHECK_EQ_INT(pgd_fake_n_copies(pgd_runner_backend(e.runner)) - copies0, 3);
    uint32_t n = pgd_fake_greedy(p, 69, 12, 0, true, want);
    for (uint32_t c = 0; c < 4; c++) CHECK(output_is(&e.rec, 1, c, want, n));
    CHECK_EQ_INT(e.rec.r[1].usage.completion_tokens, 48);
    CHECK_EQ_INT(e.rec.r[1].n_done, 1);

    /* sampled n = 3, prompt 33 (the last token opens a new block: no copy); choice i equals an
     * n = 1 request with seed + i */
    make_tokens(12, p, 33, 0, 256);
    r = greedy_req(p, 33, 20);
    r.params.sampling.temperature = 1.0f;
    r.params.sampling.seed = 42;
    r.n = 3;
    copies0 = pgd_fake_n_copies(pgd_runner_backend(e.runner));
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    CHECK(run_idle(&e, 200) > 0);
    CHECK_EQ_INT(pgd_fake_n_copies(pgd_runner_backend(e.runner)), copies0);
    r.n = 1;
    for (uint32_t c = 0; c < 3; c++) {
        r.params.sampling.seed = 42 + c;
        CHECK_EQ_INT(pgd_sched_submit(e.S, 3 + c, &r), 0);
    }
    CHECK(run_idle(&e, 200) > 0);
    int differ = 0;
    for (uint32_t c = 0; c < 3; c++) {
        const rec_choice *solo = &e.rec.r[3 + c].ch[0], *ch = &e.rec.r[2].ch[c];
        CHECK(same_tokens(ch->tok, ch->n, solo->tok, solo->n));
        differ += c > 0 && !same_tokens(ch->tok, ch->n, e.rec.r[2].ch[0].tok, e.rec.r[2].ch[0].n);
    }
    CHECK(differ > 0);
    /* a one-token prompt */
    make_tokens(13, p, 1, 0, 256);
    r = greedy_req(p, 1, 7);
    r.n = 3;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 10, &r), 0);
    CHECK(run_idle(&e, 200) > 0);
    n = pgd_fake_greedy(p, 1, 7, 0, true, want);
    for (uint32_t c = 0; c < 3; c++) CHECK(output_is(&e.rec, 10, c, want, n));
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- abort --------------------------------------------------------------------------------- */

static void test_abort_from_every_state(void) {
    env e;
    REQUIRE(env_open(&e, 24, 32, 4, 0, true) == 0);
    int32_t p[16][120];
    for (uint32_t i = 0; i < 16; i++) {
        make_tokens(700 + i, p[i], 20 + 13 * (i % 7), 0, 256);
        pgd_request r = greedy_req(p[i], 20 + 13 * (i % 7), 60 + (i % 3) * 10);
        r.n = 1 + i % 2;
        CHECK_EQ_INT(pgd_sched_submit(e.S, i + 1, &r), 0);
    }
    /* kinds: 0 waiting, 1 running mid-prompt, 2 running decode, 3 preempted, 4 dormant choice */
    int covered[5] = {0};
    uint64_t aborted[16];
    int n_aborted = 0;
    pgd_sched_step_info info;
    for (int guard = 0; pgd_sched_has_work(e.S) && guard < 3000; guard++) {
        REQUIRE(step(&e, &info) == 0);
        for (uint64_t id = 1; id <= 16; id++) {
            pgd_seq_state s0 = pgd_sched_seq_state(e.S, id, 0);
            if (s0 == PGD_SEQ_FINISHED) continue;
            int kind = -1;
            bool dormant = (id % 2 == 0) && pgd_sched_seq_state(e.S, id, 1) == PGD_SEQ_DORMANT;
            if (s0 == PGD_SEQ_WAITING) kind = 0;
            if (s0 == PGD_SEQ_PREEMPTED) kind = 3;
            if (s0 == PGD_SEQ_RUNNING) {
                kind = 2;
                for (uint32_t k = 0; k < info.n_items; k++)
                    if (info.items[k].id == id &&
                        info.items[k].n_computed + info.items[k].n_tokens < info.items[k].n_prompt)
                        kind = 1;
            }
            if (dormant && s0 == PGD_SEQ_RUNNING && !covered[4]) kind = 4;
            if (kind < 0 || covered[kind]) continue;
            pgd_sched_stats before, after;
            pgd_sched_get_stats(e.S, &before);
            CHECK_EQ_INT(pgd_sched_abort(e.S, id), 0);
            pgd_sched_get_stats(e.S, &after);
            CHECK(pgd_sched_check(e.S) == 0);
            if (kind == 1 || kind == 2 || kind == 4)
                CHECK(after.kv_blocks_used < before.kv_blocks_used);
            const rec_req *q = &e.rec.r[id];
            uint32_t n_choices = 1 + (uint32_t)((id - 1) % 2);
            CHECK_EQ_INT(q->n_done, 1);
            for (uint32_t c = 0; c < n_choices; c++) {
                CHECK_EQ_INT(q->ch[c].n_finish, 1);
                CHECK_EQ_INT(q->ch[c].reason, PGD_REASON_ABORT);
            }
            covered[kind] = 1;
            aborted[n_aborted++] = id;
        }
    }
    for (int k = 0; k < 5; k++) {
        if (!covered[k]) fprintf(stderr, "    state kind %d never seen\n", k);
        CHECK(covered[k]);
    }
    CHECK_EQ_INT(pgd_sched_abort(e.S, aborted[0]), PGD_ENOTFOUND);
    CHECK_EQ_INT(pgd_sched_abort(e.S, 12345), PGD_ENOTFOUND);
    CHECK_EQ_INT(e.rec.n_done, 16);
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    CHECK_EQ_INT(st.n_aborted, n_aborted);
    CHECK(st.n_preemptions > 0);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- fairness ------------------------------------------------------------------------------ */

static void test_tenant_fairness_no_starvation(void) {
    env e;
    REQUIRE(env_open(&e, 200, 32, 4, 0, false) == 0);
    int32_t p[8];
    uint64_t id = 0, submit_step[4096] = {0};
    uint32_t tenant_of[4096] = {0};
    int refused = 0;
    for (int s = 0; s < 600; s++) {
        /* Capacity is about 0.5 requests per step (4 seats, 8 steps each). Tenant 1 floods
         * (2 per step, far over any share); tenants 2 (weight 1) and 3 (weight 3) send one per
         * 12 steps, under their fair shares (1/5 and 3/5 of the capacity), so they must not
         * wait behind the flood. */
        int arrivals[3] = {2, s % 12 == 0, s % 12 == 6};
        for (int t = 0; t < 3; t++)
            for (int k = 0; k < arrivals[t]; k++) {
                make_tokens(id, p, 8, 0, 256);
                pgd_request r = greedy_req(p, 8, 8);
                r.tenant = (uint64_t)t + 1;
                r.weight = t == 2 ? 3.0f : 1.0f;
                int rc = pgd_sched_submit(e.S, ++id, &r);
                if (rc == PGD_EFULL) {
                    refused++;
                    continue;
                }
                CHECK_EQ_INT(rc, 0);
                submit_step[id] = e.rec.step;
                tenant_of[id] = (uint32_t)t + 1;
            }
        REQUIRE(step(&e, NULL) == 0);
    }
    CHECK(run_idle(&e, 20000) >= 0);
    uint64_t max_wait[4] = {0}, last_first[4] = {0};
    int fifo_breaks = 0, n_done = 0;
    for (uint64_t i = 1; i <= id; i++) {
        if (!tenant_of[i]) continue;
        const rec_req *q = &e.rec.r[i];
        n_done += q->n_done == 1 && q->ch[0].reason == PGD_REASON_LENGTH;
        uint64_t w = q->first_token_step - submit_step[i];
        uint32_t t = tenant_of[i];
        if (w > max_wait[t]) max_wait[t] = w;
        fifo_breaks += q->first_token_step < last_first[t];
        last_first[t] = q->first_token_step;
    }
    fprintf(stderr,
            "    max wait in steps: flooding tenant %llu, tenant 2 %llu, tenant 3 %llu (%d "
            "refused)\n",
            (unsigned long long)max_wait[1], (unsigned long long)max_wait[2],
            (unsigned long long)max_wait[3], refused);
    CHECK(max_wait[2] <= 20);
    CHECK(max_wait[3] <= 20);
    CHECK_EQ_INT(fifo_breaks, 0);
    CHECK_EQ_INT((uint64_t)n_done, id - (uint64_t)refused);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

static void test_priority_within_tenant(void) {
    env e;
    REQUIRE(env_open(&e, 64, 32, 1, 0, true) == 0);
    int32_t p[8];
    make_tokens(5, p, 8, 0, 256);
    pgd_request r = greedy_req(p, 8, 4);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    r.priority = 3;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    CHECK(e.rec.r[3].first_token_step < e.rec.r[1].first_token_step);
    CHECK(e.rec.r[1].first_token_step < e.rec.r[2].first_token_step);
    env_close(&e);
}

/* A forward pass that fails fails the requests in its step (every choice of an n > 1 request
 * once, one ERROR event each, done), gives their blocks back, and leaves the others running. */
static void test_forward_failure_fails_its_step(void) {
    env e;
    REQUIRE(env_open(&e, 64, 64, 8, 0, true) == 0);
    /* a new scheduler over a fake backend whose third forward fails */
    pgd_sched_destroy(e.S);
    pgd_runner_destroy(e.runner);
    pgd_model_info_close(e.info);
    pgd_fake_config fc = {.n_blocks = 64,
                          .block_size = 16,
                          .max_tokens = 64,
                          .verify = true,
                          .record = true,
                          .fail_at = 3};
    REQUIRE(pgd_fake_create(&fc, &e.info, &e.runner) == 0);
    pgd_sched_config c = checked_config(64, 8, 0);
    REQUIRE(pgd_sched_create(e.runner, &c, rec_event, &e.rec, &e.S) == 0);
    int32_t p[3][24];
    for (int i = 0; i < 3; i++) make_tokens(70 + i, p[i], 24, 0, 256);
    pgd_request r = greedy_req(p[0], 24, 8);
    r.n = 3;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    r = greedy_req(p[1], 24, 8);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    CHECK_EQ_INT(step(&e, NULL), 0);
    CHECK_EQ_INT(step(&e, NULL), 0);
    /* the third forward fails: both requests were in it */
    e.rec.step++;
    CHECK_EQ_INT(pgd_sched_step(e.S, NULL), PGD_EIO);
    CHECK_EQ_INT(e.rec.r[1].n_error, 1);
    CHECK_EQ_INT(e.rec.r[1].n_done, 1);
    CHECK_EQ_INT(e.rec.r[2].n_error, 1);
    CHECK_EQ_INT(e.rec.r[1].error, PGD_EIO);
    CHECK(strstr(e.rec.r[1].message, "forward") != NULL);
    CHECK_EQ_INT(pgd_sched_check(e.S), 0);
    CHECK(sched_pool_all_free(e.S));
    /* the scheduler goes on: a new request runs to its end */
    r = greedy_req(p[2], 24, 8);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    CHECK_EQ_INT(e.rec.r[3].n_error, 0);
    CHECK_EQ_INT(e.rec.r[3].ch[0].n, 8);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* The checker is not vacuous: a block taken behind the scheduler's back is reported. */
static void test_checker_detects_leak(void) {
    env e;
    REQUIRE(env_open(&e, 32, 32, 4, 0, true) == 0);
    CHECK_EQ_INT(pgd_sched_check(e.S), 0);
    int32_t id;
    REQUIRE(pgd_kvpool_alloc(pgd_sched_pool(e.S), 1, &id) == 0);
    CHECK_EQ_INT(pgd_sched_check(e.S), PGD_EINVAL);
    fprintf(stderr, "    checker: %s\n", pgd_error_detail());
    pgd_kvpool_release(pgd_sched_pool(e.S), id);
    CHECK_EQ_INT(pgd_sched_check(e.S), 0);
    env_close(&e);
}

/* ---- prompt logprobs (echo + logprobs) ---------------------------------------------------- */

/* Every prompt token after the first gets its logprob and top alternatives, once, in order,
 * before any token (the recorder checks the order), over chunked prefill beside another
 * request; the n choices then sample as without them. */
static void test_prompt_logprobs_chunked(void) {
    env e;
    REQUIRE(env_open(&e, 64, 32, 8, 0, true) == 0);
    int32_t p[150], q[40], want[20];
    make_tokens(21, p, 150, 0, 256);
    make_tokens(22, q, 40, 0, 256);
    pgd_request r = greedy_req(p, 150, 6);
    r.n = 3;
    r.prompt_logprobs = 4;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    pgd_request o = greedy_req(q, 40, 20);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &o), 0);
    CHECK(run_idle(&e, 400) > 0);
    CHECK_EQ_INT(prompt_lp_mismatches(rec_get(&e.rec, 1), p, 150, 0, 4), 0);
    uint32_t n = pgd_fake_greedy(p, 150, 6, 0, true, want);
    for (uint32_t c = 0; c < 3; c++) CHECK(output_is(&e.rec, 1, c, want, n));
    CHECK_EQ_INT(rec_get(&e.rec, 2)->n_plp, 0);
    n = pgd_fake_greedy(q, 40, 20, 0, true, want);
    CHECK(output_is(&e.rec, 2, 0, want, n));
    env_close(&e);
}

/* A prompt whose logprobs are asked is computed whole: the prefix cache serves none of it (its
 * rows' logits are needed), but its blocks enter the cache for the others. */
static void test_prompt_logprobs_skip_prefix_cache(void) {
    env e;
    REQUIRE(env_open(&e, 64, 64, 8, 0, true) == 0);
    int32_t p[100];
    make_tokens(23, p, 100, 0, 256);
    for (uint64_t id = 1; id <= 3; id++) {
        pgd_request r = greedy_req(p, 100, 3);
        r.prompt_logprobs = id == 2 ? -1 : 0;
        CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
        CHECK(run_idle(&e, 100) > 0);
    }
    CHECK_EQ_INT(rec_get(&e.rec, 1)->usage.cached_tokens, 0);
    CHECK_EQ_INT(rec_get(&e.rec, 2)->usage.cached_tokens, 96); /* request 1's blocks */
    CHECK_EQ_INT(rec_get(&e.rec, 3)->usage.cached_tokens, 0);
    CHECK_EQ_INT(prompt_lp_mismatches(rec_get(&e.rec, 1), p, 100, 0, 0), 0);
    CHECK_EQ_INT(prompt_lp_mismatches(rec_get(&e.rec, 3), p, 100, 0, 0), 0);
    env_close(&e);
}

/* prompt_only (max_tokens 0 with echo): with logprobs the prompt is computed for them and every
 * choice finishes (length) with no token; without, nothing is computed at all; a prompt of one
 * token has no logprob to report. */
static void test_prompt_only(void) {
    env e;
    REQUIRE(env_open(&e, 64, 16, 8, 0, true) == 0);
    int32_t p[40];
    make_tokens(24, p, 40, 0, 256);
    pgd_request r = greedy_req(p, 40, 0);
    r.n = 2;
    r.prompt_only = true;
    r.prompt_logprobs = 2;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    const rec_req *q = rec_get(&e.rec, 1);
    CHECK_EQ_INT(prompt_lp_mismatches(q, p, 40, 0, 2), 0);
    for (int c = 0; c < 2; c++) {
        CHECK_EQ_INT(q->ch[c].n, 0);
        CHECK_EQ_INT(q->ch[c].n_finish, 1);
        CHECK_EQ_INT(q->ch[c].reason, PGD_REASON_LENGTH);
    }
    CHECK_EQ_INT(q->n_done, 1);
    CHECK_EQ_INT(q->usage.completion_tokens, 0);
    CHECK_EQ_INT(q->usage.prompt_tokens, 40);

    pgd_sched_stats st0, st1;
    pgd_sched_get_stats(e.S, &st0);
    r.prompt_logprobs = -1;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    r.n_prompt = 1;
    r.prompt_logprobs = 3;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    CHECK(run_idle(&e, 10) >= 1);
    pgd_sched_get_stats(e.S, &st1);
    CHECK_EQ_INT(st1.computed_tokens, st0.computed_tokens);
    CHECK_EQ_INT(st1.n_finished, st0.n_finished + 2);
    for (uint64_t id = 2; id <= 3; id++) {
        q = rec_get(&e.rec, id);
        CHECK_EQ_INT(q->n_done, 1);
        CHECK_EQ_INT(q->n_plp, 0);
        CHECK_EQ_INT(q->ch[0].n_finish, 1);
        CHECK_EQ_INT(q->ch[0].reason, PGD_REASON_LENGTH);
        CHECK_EQ_INT(q->ch[0].n, 0);
    }
    CHECK_EQ_INT(rec_get(&e.rec, 2)->ch[1].n_finish, 1);
    env_close(&e);
}

/* Logit rows are the runner's to give (max_logit_rows: here the step size, 64, and as many
 * seats, as on a GPU): alone, a prompt with logprobs takes whole steps; with every seat but a
 * few decoding, it gets the rows the others leave — one per step at least — and no step asks
 * for more rows than the runner takes. */
static void test_prompt_logprobs_row_budget(void) {
    env e;
    REQUIRE(env_open(&e, 1024, 64, 64, 0, true) == 0);
    int32_t p[60][4], big[120];
    make_tokens(200, big, 120, 0, 256);
    pgd_request alone = greedy_req(big, 120, 2);
    alone.prompt_logprobs = 1;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 99, &alone), 0);
    CHECK_EQ_INT(run_idle(&e, 10), 3); /* 64 + 56 prompt tokens, one decode */
    CHECK_EQ_INT(prompt_lp_mismatches(rec_get(&e.rec, 99), big, 120, 0, 1), 0);
    for (uint64_t i = 0; i < 60; i++) {
        make_tokens(100 + i, p[i], 4, 0, 256);
        pgd_request r = greedy_req(p[i], 4, 200);
        CHECK_EQ_INT(pgd_sched_submit(e.S, 1 + i, &r), 0);
    }
    for (int i = 0; i < 3; i++) REQUIRE(step(&e, NULL) == 0);
    pgd_request r = greedy_req(big, 120, 2);
    r.prompt_logprobs = 1;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 100, &r), 0);
    pgd_fake_log_clear(pgd_runner_backend(e.runner));
    int steps = run_idle(&e, 400);
    fprintf(stderr, "    beside 60 decodes: %d steps\n", steps);
    CHECK(steps > 0);
    size_t n_log;
    const pgd_fake_batch *log = pgd_fake_log(pgd_runner_backend(e.runner), &n_log);
    uint32_t most = 0;
    for (size_t i = 0; i < n_log; i++) most = log[i].n_logits > most ? log[i].n_logits : most;
    CHECK(most <= 64);
    CHECK(most >= 61); /* the rows were used */
    CHECK_EQ_INT(prompt_lp_mismatches(rec_get(&e.rec, 100), big, 120, 0, 1), 0);
    int32_t want[2];
    uint32_t n = pgd_fake_greedy(big, 120, 2, 0, true, want);
    CHECK(output_is(&e.rec, 100, 0, want, n));
    env_close(&e);
}

/* A prompt preempted while its logprobs are computed resumes where its reports stopped: none
 * twice, none lost (the recorder checks the order), the values those of the model. */
static void test_prompt_logprobs_preempted(void) {
    env e;
    REQUIRE(env_open(&e, 14, 16, 4, 0, true) == 0); /* 13 blocks of 16: 208 slots */
    int32_t h[100], p[150], want[100];
    make_tokens(31, h, 100, 0, 256);
    make_tokens(32, p, 150, 0, 256);
    pgd_request rh = greedy_req(h, 100, 100);
    rh.priority = 1;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &rh), 0);
    pgd_request re = greedy_req(p, 150, 5);
    re.prompt_logprobs = 2;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &re), 0);
    uint32_t reported_at_preemption = 0;
    for (int guard = 0; pgd_sched_has_work(e.S) && guard < 2000; guard++) {
        pgd_sched_step_info info;
        REQUIRE(step(&e, &info) == 0);
        if (info.n_preempted && !reported_at_preemption)
            reported_at_preemption = rec_get(&e.rec, 2)->n_plp;
    }
    fprintf(stderr, "    preempted with %u of 149 prompt logprobs reported\n",
            reported_at_preemption);
    CHECK(reported_at_preemption > 0 && reported_at_preemption < 149);
    CHECK_EQ_INT(prompt_lp_mismatches(rec_get(&e.rec, 2), p, 150, 0, 2), 0);
    uint32_t n = pgd_fake_greedy(p, 150, 5, 0, true, want);
    CHECK(output_is(&e.rec, 2, 0, want, n));
    n = pgd_fake_greedy(h, 100, 100, 0, true, want);
    CHECK(output_is(&e.rec, 1, 0, want, n));
    env_close(&e);
}

int main(void) {
    RUN(test_greedy_matches_reference);
    RUN(test_eos_and_stop_strings);
    RUN(test_chunked_prefill_keeps_streams_going);
    RUN(test_prefix_cache_prefills_only_suffix);
    RUN(test_prefix_cache_off);
    RUN(test_preemption_same_output_greedy);
    RUN(test_preemption_same_output_sampled);
    RUN(test_preemption_victim_is_lowest_priority);
    RUN(test_refuse_what_can_never_fit);
    RUN(test_max_waiting);
    RUN(test_n_choices_share_prompt);
    RUN(test_prompt_logprobs_chunked);
    RUN(test_prompt_logprobs_skip_prefix_cache);
    RUN(test_prompt_only);
    RUN(test_prompt_logprobs_row_budget);
    RUN(test_prompt_logprobs_preempted);
    RUN(test_abort_from_every_state);
    RUN(test_tenant_fairness_no_starvation);
    RUN(test_priority_within_tenant);
    RUN(test_forward_failure_fails_its_step);
    RUN(test_checker_detects_leak);
    return test_summary();
}
