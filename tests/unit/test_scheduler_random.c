/*
 * tests/unit/test_scheduler_random.c — a random walk of more than 10,000 submit / abort /
 * complete events over the scheduler with the fake backend, on a pool small enough that
 * preemption, prefix-cache hits and evictions, n > 1 forks and chunked prompts all happen.
 *
 * After every step the scheduler's invariant checker runs (budgets, block ref counts against
 * the running tables, pool invariants, list order and counts). At the end: every block is back
 * in the pool, every accepted request got exactly one `done` event, the event contract held,
 * and every greedy request that was not aborted produced exactly pgd_fake_greedy's tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "scheduler/fake_backend.h"
#include "scheduler/sched.h"
#include "test_scheduler_util.h"
#include "testutil.h"

#define MAX_REQS  8192
#define EOS_EVERY 9

typedef struct spec {
    int32_t prompt[160];
    uint32_t n_prompt, n, max_tokens;
    bool greedy, ignore_eos, accepted, aborted;
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
    pgd_llm *llm = NULL;
    REQUIRE(pgd_fake_llm_create(&fc, true, &llm) == 0);
    recorder rec = {0};
    pgd_sched_config c;
    pgd_sched_config_default(&c);
    c.max_num_batched_tokens = 48;
    c.max_num_seqs = 8;
    c.max_waiting = 24;
    c.check_invariants = true;
    pgd_sched *S = NULL;
    REQUIRE(pgd_sched_create(llm, &c, rec_event, &rec, &S) == 0);

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
    pgd_engine_stats st;
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
    CHECK_EQ_INT(pgd_kvpool_num_free(llm->pool), pgd_kvpool_num_blocks(llm->pool) - 1);
    CHECK_EQ_INT(pgd_kvpool_check(llm->pool), 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.n_requests + st.n_running + st.n_waiting, 0);
    if (rec.violations) fprintf(stderr, "  event contract: %s\n", rec.why);
    CHECK_EQ_INT(rec.violations, 0);
    /* one done per accepted request; greedy outputs exact */
    int32_t want[64];
    uint64_t n_checked = 0, bad_done = 0, bad_out = 0;
    for (uint64_t id = 1; id <= n_ids; id++) {
        const spec *sp = &specs[id];
        if (!sp->accepted) continue;
        const rec_req *q = rec_get(&rec, id);
        bad_done += q->n_done != 1 || q->n_error != 0;
        if (sp->aborted || !sp->greedy) continue;
        uint32_t n = pgd_fake_greedy(sp->prompt, sp->n_prompt, sp->max_tokens, EOS_EVERY,
                                     sp->ignore_eos, want);
        for (uint32_t ch = 0; ch < sp->n; ch++) {
            bad_out += !same_tokens(q->ch[ch].tok, q->ch[ch].n, want, n);
            n_checked++;
        }
    }
    fprintf(stderr, "    %llu greedy outputs checked\n", (unsigned long long)n_checked);
    CHECK(n_checked > 500);
    CHECK_EQ_INT(bad_done, 0);
    CHECK_EQ_INT(bad_out, 0);
    pgd_sched_destroy(S);
    pgd_llm_close(llm);
    rec_free(&rec);
}

int main(void) {
    RUN(test_random_walk);
    return test_summary();
}
