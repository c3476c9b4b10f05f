/*
 * tests/unit/test_offline.c — fixed sequences run outside the scheduler and the server's
 * warm-up (scheduler/offline.h) over the fake backend (tests/support/fake_backend.h), which
 * re-hashes every row's context (`verify`: a wrong slot, block table or position fails the
 * forward) and logs every step's shape.
 *
 * Checked against independent expectations: the greedy tokens against pgd_fake_greedy (the
 * model from token ids alone), the step shapes against the documented plan (prefill chunks of
 * the step budget, then one decode step a token), the warm-up's steps against its documented
 * runs and their shrinking to a small cache, context or step; a failing forward and a cache too
 * small reported, nothing leaked (ASan runs this test); a scheduler on the same runner after the
 * warm-up serving a request bit for bit as the model says.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "scheduler/offline.h"
#include "support/fake_backend.h"
#include "test_scheduler_util.h"
#include "testutil.h"

typedef struct env {
    pgd_model_info *info;
    pgd_runner *runner;
} env;

static int env_open(env *e, uint32_t n_blocks, uint32_t max_tokens, uint32_t n_ctx,
                    uint64_t fail_at) {
    memset(e, 0, sizeof *e);
    pgd_fake_config fc = {.n_blocks = n_blocks,
                          .block_size = 16,
                          .max_tokens = max_tokens,
                          .n_ctx = n_ctx,
                          .verify = true,
                          .record = true,
                          .fail_at = fail_at};
    return pgd_fake_create(&fc, &e->info, &e->runner);
}

static void env_close(env *e) {
    pgd_runner_destroy(e->runner);
    pgd_model_info_close(e->info);
}

static const pgd_fake_batch *steps(env *e, size_t *n) {
    return pgd_fake_log(pgd_runner_backend(e->runner), n);
}

static void check_step(const pgd_fake_batch *b, uint32_t n_tokens, uint32_t n_seqs,
                       uint32_t n_logits) {
    CHECK_EQ_INT(b->n_tokens, n_tokens);
    CHECK_EQ_INT(b->n_seqs, n_seqs);
    CHECK_EQ_INT(b->n_logits, n_logits);
}

static void fill(int32_t *p, uint32_t n, uint32_t salt) {
    for (uint32_t i = 0; i < n; i++) p[i] = (int32_t)(32 + (i * 7 + salt * 13) % 90);
}

/* Three prompts (40, 7, 25 tokens) greedy, 6 tokens out each, steps of 32 tokens: the prefill
 * in chunks of the budget in prompt order (32 | 8 + 7 + 17 | 8), then 5 decode steps of 3 rows;
 * every sequence's tokens those of the model. */
static void test_run_greedy(void) {
    env e;
    REQUIRE(env_open(&e, 64, 32, 0, 0) == 0);
    const uint32_t len[3] = {40, 7, 25}, G = 6;
    int32_t prompt[3][40], out[3][6], want[6];
    uint32_t n_out[3] = {0};
    pgd_offline_seq s[3];
    for (int i = 0; i < 3; i++) {
        fill(prompt[i], len[i], (uint32_t)i);
        s[i] = (pgd_offline_seq){
            .prompt = prompt[i], .n_prompt = len[i], .out = out[i], .n_out = &n_out[i]};
        pgd_seq_params_default(&s[i].params);
        s[i].params.sampling.temperature = 0;
        s[i].params.max_tokens = G;
        s[i].params.ignore_eos = true;
    }
    pgd_offline_stats st;
    REQUIRE(pgd_offline_run(e.runner, s, 3, &st) == 0);
    CHECK_EQ_INT(st.prefill_tokens, 72);
    CHECK_EQ_INT(st.prefill_steps, 3);
    CHECK_EQ_INT(st.decode_tokens, 15);
    CHECK_EQ_INT(st.decode_steps, 5);
    CHECK(st.prefill_s >= 0 && st.decode_s >= 0);
    size_t n;
    const pgd_fake_batch *log = steps(&e, &n);
    REQUIRE(n == 8);
    check_step(&log[0], 32, 1, 0);
    check_step(&log[1], 32, 3, 2); /* the first prompt's last 8 (sampled), the second's 7
                                      (sampled), 17 of the third */
    check_step(&log[2], 8, 1, 1);
    for (int i = 3; i < 8; i++) check_step(&log[i], 3, 3, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(n_out[i], G);
        CHECK_EQ_INT(pgd_fake_greedy(prompt[i], len[i], G, 0, true, want), G);
        CHECK(memcmp(out[i], want, sizeof want) == 0);
    }
    env_close(&e);
}

/* A cache that cannot hold the sequences together: PGD_ENOBLOCKS, no step run, nothing
 * leaked; a forward that fails: its error, the sequences and blocks freed. */
static void test_run_errors(void) {
    env e;
    REQUIRE(env_open(&e, 3, 64, 0, 0) == 0); /* 2 usable blocks: 32 positions */
    int32_t prompt[40];
    fill(prompt, 40, 1);
    pgd_offline_seq s = {.prompt = prompt, .n_prompt = 40};
    pgd_seq_params_default(&s.params);
    s.params.max_tokens = 2;
    pgd_offline_stats st;
    CHECK_EQ_INT(pgd_offline_run(e.runner, &s, 1, &st), PGD_ENOBLOCKS);
    size_t n;
    steps(&e, &n);
    CHECK_EQ_INT(n, 0);
    env_close(&e);

    REQUIRE(env_open(&e, 64, 64, 0, 2) == 0); /* the second forward fails */
    CHECK_EQ_INT(pgd_offline_run(e.runner, &s, 1, &st), PGD_EIO);
    env_close(&e);
}

/* The warm-up as documented: run 1, 32 tokens then two decode steps of one row; run 2, three
 * 16-token prompts in one step then two decode steps of three rows. Then a scheduler on the
 * same runner serves a request exactly as the model says: the warm-up's blocks were its own
 * pool's, and what it left in them is written over before it is read. */
static void test_warmup(void) {
    env e;
    REQUIRE(env_open(&e, 64, 512, 0, 0) == 0);
    pgd_warmup_stats st;
    REQUIRE(pgd_warmup(e.runner, &st) == 0);
    CHECK_EQ_INT(st.runs, 2);
    CHECK_EQ_INT(st.steps, 6);
    CHECK_EQ_INT(st.tokens, 32 + 2 + 48 + 6);
    size_t n;
    const pgd_fake_batch *log = steps(&e, &n);
    REQUIRE(n == 6);
    check_step(&log[0], 32, 1, 1);
    check_step(&log[1], 1, 1, 1);
    check_step(&log[2], 1, 1, 1);
    check_step(&log[3], 48, 3, 3);
    check_step(&log[4], 3, 3, 3);
    check_step(&log[5], 3, 3, 3);

    pgd_sched *S = NULL;
    recorder rec = {0};
    pgd_sched_config c = checked_config(512, 8, 0);
    REQUIRE(pgd_sched_create(e.runner, &c, rec_event, &rec, &S) == 0);
    int32_t prompt[48], want[8];
    for (uint32_t i = 0; i < 48; i++) prompt[i] = (int32_t)(i % 95 + 32);
    pgd_request q = greedy_req(prompt, 48, 8);
    CHECK_EQ_INT(pgd_sched_submit(S, 1, &q), 0);
    pgd_sched_step_info info;
    for (int i = 0; i < 100 && !rec_get(&rec, 1)->n_done; i++)
        CHECK_EQ_INT(pgd_sched_step(S, &info), 0);
    CHECK_EQ_INT(pgd_fake_greedy(prompt, 48, 8, 0, true, want), 8);
    rec_req *r = rec_get(&rec, 1);
    CHECK_EQ_INT(r->n_done, 1);
    CHECK_EQ_INT(r->ch[0].n, 8);
    CHECK(r->ch[0].n == 8 && memcmp(r->ch[0].tok, want, sizeof want) == 0);
    CHECK_EQ_INT(rec.violations, 0);
    pgd_sched_destroy(S);
    rec_free(&rec);
    env_close(&e);
}

/* Shrunk to fit: 3 blocks (32 positions) hold run 1 with a 30-token prompt and not run 2;
 * 2 blocks (one and the null block) a 14-token prompt; a context of 4 tokens nothing; one of
 * 20 tokens a 17-token prompt and run 2's 16; steps of 2 tokens run 1 in 2-token chunks and not run
 * 2; a failing forward fails the warm-up. */
static void test_warmup_fits(void) {
    static const struct {
        uint32_t blocks, max_tokens, n_ctx, runs, p1, p2;
    } cases[] = {
        {3, 512, 0, 1, 30, 0},    {2, 512, 0, 1, 14, 0}, {64, 512, 4, 0, 0, 0},
        {64, 512, 20, 2, 17, 16}, {64, 2, 0, 1, 32, 0},
    };
    for (size_t k = 0; k < PGD_ARRAY_LEN(cases); k++) {
        env e;
        REQUIRE(env_open(&e, cases[k].blocks, cases[k].max_tokens, cases[k].n_ctx, 0) == 0);
        pgd_warmup_stats st;
        CHECK_EQ_INT(pgd_warmup(e.runner, &st), 0);
        CHECK_EQ_INT(st.runs, cases[k].runs);
        const uint64_t want =
            cases[k].runs ? cases[k].p1 + 2 + 3 * (cases[k].p2 + 2) * (cases[k].runs > 1) : 0;
        CHECK_EQ_INT(st.tokens, want);
        size_t n;
        const pgd_fake_batch *log = steps(&e, &n);
        if (cases[k].runs) {
            REQUIRE(n > 0);
            CHECK_EQ_INT(log[0].n_tokens,
                         cases[k].p1 < cases[k].max_tokens ? cases[k].p1 : cases[k].max_tokens);
        } else {
            CHECK_EQ_INT(n, 0);
        }
        env_close(&e);
    }
    env e;
    REQUIRE(env_open(&e, 64, 512, 0, 5) == 0); /* run 2's prefill fails */
    pgd_warmup_stats st;
    CHECK_EQ_INT(pgd_warmup(e.runner, &st), PGD_EIO);
    env_close(&e);
}

int main(void) {
    RUN(test_run_greedy);
    RUN(test_run_errors);
    RUN(test_warmup);
    RUN(test_warmup_fits);
    return test_summary();
}
