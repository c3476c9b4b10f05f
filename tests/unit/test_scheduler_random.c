/*
 * tests/unit/test_scheduler_random.c — a random walk of more than 10,000 submit / abort /
 * complete events over the scheduler with the fake backend, on a pool small enough that
 * preemption, prefix-cache hits and evictions, n > 1 forks and chunked prompts all happen.
 *
 * After every step the scheduler's invariant checker runs (budgets, block ref counts against
 * the running tables, pool invariants, list order and counts). At the end: every block is back
 * in the pool, every accepted request got exactly one `done` event, the event contract held,
 * and every greedy request that was not aborted produced exactly pgd_fake_greedy's tokens; some
 * requests ask for their prompt's logprobs (reported once each, in order, with the fake model's
 * values), some for the prompt alone (no output).
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "support/fake_backend.h"
#include "scheduler/sched.h"
#include "test_scheduler_util.h"
#include "testutil.h"

#define MAX_REQS  8192
#define EOS_EVERY 9

typedef struct spec {
    int32_t prompt[160];
    uint32_t n_prompt, n, max_tokens;
    int32_t prompt_logprobs;
    bool greedy, ignore_eos, accepted, aborted, prompt_only;
} spec;

static uint64_t g_x = 0x1234567;

static uint32_t rnd(uint32_t n) {
    g_x ^= g_x << 13, g_x ^= g_x >> 7, g_x ^= g_x << 17;
    return (uint32_t)(g_x % n);
}

static void test_random_walk(void) {
    pgd_fake_config fc = {.n_blocks = 32,
                          .block_size = 16,
                          .max_tokens = 48,
                          .eos_every = EOS_EVERY,
                          .verify = true,
                          .record = false};
    pgd_model_info *minfo = NULL;
    pgd_runner *runner = NULL;
    REQUIRE(pgd_fake_create(&fc, &minfo, &runner) == 0);
    recorder rec = {0};
    pgd_sched_config c = checked_config(48, 8, 24);
    pgd_sched *S = NULL;
    REQUIRE(pgd_sched_create(runner, &c, rec_event, &rec, &S) == 0);

    static spec specs[MAX_REQS];
    int32_t sys[3][64];
    for (int k = 0; k < 3; k++) make_tokens(9000 + k, sys[k], 64, 0, 256);
    uint64_t n_ids = 0, n_submit = 0, n_abort = 0, n_steps = 0, n_full = 0;
    int step_errors = 0;
    pgd_sched_step_info info;
    while (n_submit + n_abort + rec.n_finish < 10000 && n_ids + 1 < MAX_REQS) {
        uint32_t op = rnd(100);
        if (op < 30) {
            spec *sp = &specs[++n_ids];
            uint32_t pre = rnd(3) ? 0 : 32 + 16 * rnd(3); /* shared system prompt */
            uint32_t k = rnd(3);
            sp->n_prompt = pre + 1 + rnd(96);
            memcpy(sp->prompt, sys[k], pre * sizeof(int32_t));
            make_tokens(n_ids, sp->prompt + pre, sp->n_prompt - pre, 0, 256);
            sp->n = rnd(10) < 7 ? 1 : 2 + rnd(2);
            sp->max_tokens = 1 + rnd(64);
            sp->greedy = rnd(10) < 6;
            sp->ignore_eos = rnd(2);
            sp->prompt_logprobs = rnd(5) ? -1 : (int32_t)rnd(4);
            sp->prompt_only = rnd(12) == 0;
            pgd_request r;
            pgd_request_init(&r);
            r.prompt = sp->prompt;
            r.n_prompt = sp->n_prompt;
            r.n = sp->n;
            r.params.max_tokens = sp->max_tokens;
            r.params.ignore_eos = sp->ignore_eos;
            r.params.sampling.temperature = sp->greedy ? 0.0f : 0.9f;
            r.params.sampling.seed = n_ids;
            r.params.cache_salt = k % 2;
            r.tenant = rnd(4);
            r.weight = 1.0f + (float)(r.tenant % 3);
            r.priority = (int32_t)rnd(3) - 1;
            r.prompt_logprobs = sp->prompt_logprobs;
            r.prompt_only = sp->prompt_only;
            int rc = pgd_sched_submit(S, n_ids, &r);
            n_submit++;
            if (rc == PGD_EFULL) {
                n_full++;
                continue;
            }
            CHECK_EQ_INT(rc, 0);
            sp->accepted = rc == 0;
        } else if (op < 38 && n_ids) {
            uint64_t id = 1 + rnd((uint32_t)n_ids);
            int rc = pgd_sched_abort(S, id);
            n_abort++;
            CHECK(rc == 0 || rc == PGD_ENOTFOUND);
            if (rc == 0) specs[id].aborted = true;
        } else if (pgd_sched_has_work(S)) {
            rec.step++;
            n_steps++;
            if (pgd_sched_step(S, &info)) {
                if (!step_errors++) fprintf(stderr, "  step: %s\n", pgd_error_detail());
            }
        }
    }
    for (int guard = 0; pgd_sched_has_work(S) && guard < 100000; guard++) {
        rec.step++;
        n_steps++;
        if (pgd_sched_step(S, &info) && !step_errors++)
            fprintf(stderr, "  step: %s\n", pgd_error_detail());
    }
    CHECK(!pgd_sched_has_work(S));
    CHECK_EQ_INT(step_errors, 0);
    pgd_sched_stats st;
    pgd_sched_get_stats(S, &st);
    fprintf(stderr,
            "    %llu submits (%llu refused: queue full), %llu aborts, %llu finishes, %llu "
            "steps, %llu preemptions, prefix cache %llu/%llu tokens hit\n",
            (unsigned long long)n_submit, (unsigned long long)n_full, (unsigned long long)n_abort,
            (unsigned long long)rec.n_finish, (unsigned long long)n_steps,
            (unsigned long long)st.n_preemptions, (unsigned long long)st.prefix_hit_tokens,
            (unsigned long long)st.prefix_query_tokens);
    CHECK(n_submit + n_abort + rec.n_finish >= 10000);
    CHECK(st.n_preemptions > 0);
    CHECK(st.prefix_hit_tokens > 0);
    CHECK(n_full > 0);
    /* every block back, nothing left */
    const pgd_kvpool *pool = pgd_sched_pool(S);
    CHECK_EQ_INT(pgd_kvpool_num_free(pool), pgd_kvpool_num_blocks(pool) - 1);
    CHECK_EQ_INT(pgd_kvpool_check(pool), 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.n_requests + st.n_running + st.n_waiting, 0);
    if (rec.violations) fprintf(stderr, "  event contract: %s\n", rec.why);
    CHECK_EQ_INT(rec.violations, 0);
    /* one done per accepted request; greedy outputs exact */
    int32_t want[64];
    uint64_t n_checked = 0, bad_done = 0, bad_out = 0, n_lp = 0, bad_lp = 0;
    for (uint64_t id = 1; id <= n_ids; id++) {
        const spec *sp = &specs[id];
        if (!sp->accepted) continue;
        const rec_req *q = rec_get(&rec, id);
        bad_done += q->n_done != 1 || q->n_error != 0;
        if (sp->aborted) continue;
        if (sp->prompt_logprobs >= 0) {
            bad_lp += prompt_lp_mismatches(q, sp->prompt, sp->n_prompt, EOS_EVERY,
                                           sp->prompt_logprobs) != 0;
            n_lp++;
        } else {
            bad_lp += q->n_plp != 0;
        }
        if (sp->prompt_only) {
            for (uint32_t ch = 0; ch < sp->n; ch++)
                bad_out += q->ch[ch].n != 0 || q->ch[ch].reason != PGD_REASON_LENGTH;
            continue;
        }
        if (!sp->greedy) continue;
        uint32_t n = pgd_fake_greedy(sp->prompt, sp->n_prompt, sp->max_tokens, EOS_EVERY,
                                     sp->ignore_eos, want);
        for (uint32_t ch = 0; ch < sp->n; ch++) {
            bad_out += !same_tokens(q->ch[ch].tok, q->ch[ch].n, want, n);
            n_checked++;
        }
    }
    fprintf(stderr, "    %llu greedy outputs checked, %llu prompts' logprobs\n",
            (unsigned long long)n_checked, (unsigned long long)n_lp);
    CHECK(n_checked > 500);
    CHECK(n_lp > 100);
    CHECK_EQ_INT(bad_lp, 0);
    CHECK_EQ_INT(bad_done, 0);
    CHECK_EQ_INT(bad_out, 0);
    pgd_sched_destroy(S);
    pgd_runner_destroy(runner);
    pgd_model_info_close(minfo);
    rec_free(&rec);
}

/* Planning is allocating, and it never promises a block the allocator then refuses: over many
 * pool shapes (block sizes 1 to 16, pools of 3 blocks up, forks whose choices share a partial
 * block, shared prefixes), with the plan checker on (every planned item's table covers its
 * tokens, every block it writes is its own, no slot is written twice) no step fails, and every
 * forward the fake backend runs holds exactly the tokens and sequences that were planned. */
static void test_plans_are_allocated(void) {
    uint64_t n_steps = 0, n_preempt = 0, n_forked = 0, n_done = 0;
    int step_errors = 0, mismatches = 0;
    for (int shape = 0; shape < 24; shape++) {
        uint32_t bs = (uint32_t[]){1, 2, 3, 16}[shape % 4];
        uint32_t max_prompt = 40, max_gen = 24;
        /* at least one full-length sequence must fit: (40 + 24) tokens */
        uint32_t need = (max_prompt + max_gen + bs - 1) / bs + 1;
        uint32_t n_blocks = need + 1 + (uint32_t)(shape / 4) * need / 3;
        pgd_fake_config fc = {.n_blocks = n_blocks,
                              .block_size = bs,
                              .max_tokens = 32,
                              .eos_every = 0,
                              .verify = true,
                              .record = true};
        pgd_model_info *minfo = NULL;
        pgd_runner *runner = NULL;
        REQUIRE(pgd_fake_create(&fc, &minfo, &runner) == 0);
        pgd_backend *fake = pgd_runner_backend(runner);
        recorder rec = {0};
        pgd_sched_config c = checked_config(32, 6, 64);
        pgd_sched *S = NULL;
        REQUIRE(pgd_sched_create(runner, &c, rec_event, &rec, &S) == 0);
        int32_t sys[32], prompt[64];
        make_tokens(500 + shape, sys, 32, 0, 256);
        for (uint64_t id = 1; id <= 60; id++) {
            uint32_t n = 1 + rnd(max_prompt), pre = rnd(2) ? (n < 32 ? n : 32) : 0;
            memcpy(prompt, sys, pre * sizeof *prompt);
            make_tokens(id * 977 + shape, prompt + pre, n - pre, 0, 256);
            pgd_request r = greedy_req(prompt, n, 1 + rnd(max_gen));
            r.n = rnd(3) ? 1 : 2 + rnd(2);
            r.priority = (int32_t)rnd(3);
            r.prompt_logprobs = rnd(4) ? -1 : 1;
            r.prompt_only = rnd(10) == 0;
            CHECK_EQ_INT(pgd_sched_submit(S, id, &r), 0);
            for (int k = rnd(4); k > 0 && pgd_sched_has_work(S); k--) {
                pgd_sched_step_info info;
                pgd_fake_log_clear(fake);
                rec.step++;
                n_steps++;
                if (pgd_sched_step(S, &info)) {
                    if (!step_errors++) fprintf(stderr, "  step: %s\n", pgd_error_detail());
                    continue;
                }
                size_t n_log;
                const pgd_fake_batch *log = pgd_fake_log(fake, &n_log);
                bool ran =
                    n_log == 1 && log[0].n_tokens == info.n_tokens && log[0].n_seqs == info.n_items;
                mismatches += info.n_items ? !ran : n_log != 0;
                n_preempt += info.n_preempted;
                n_forked += info.n_forked;
            }
        }
        for (int guard = 0; pgd_sched_has_work(S) && guard < 100000; guard++) {
            rec.step++;
            n_steps++;
            if (pgd_sched_step(S, NULL) && !step_errors++)
                fprintf(stderr, "  step: %s\n", pgd_error_detail());
        }
        const pgd_kvpool *pool = pgd_sched_pool(S);
        CHECK_EQ_INT(pgd_kvpool_num_free(pool), pgd_kvpool_num_blocks(pool) - 1);
        CHECK_EQ_INT(rec.violations, 0);
        n_done += rec.n_done;
        pgd_sched_destroy(S);
        pgd_runner_destroy(runner);
        pgd_model_info_close(minfo);
        rec_free(&rec);
    }
    fprintf(stderr, "    %llu steps, %llu requests done, %llu preemptions, %llu forks\n",
            (unsigned long long)n_steps, (unsigned long long)n_done, (unsigned long long)n_preempt,
            (unsigned long long)n_forked);
    CHECK_EQ_INT(step_errors, 0);
    CHECK_EQ_INT(mismatches, 0);
    CHECK_EQ_INT(n_done, 24 * 60);
    CHECK(n_preempt > 0 && n_forked > 0);
}

int main(void) {
    RUN(test_random_walk);
    RUN(test_plans_are_allocated);
    return test_summary();
}
