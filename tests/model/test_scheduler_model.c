/*
 * tests/model/test_scheduler_model.c — the scheduler with the real model (PAGODA_MODEL, label
 * `model`, exit 77 = skipped when unset):
 *   - preemption: the same greedy requests through the threaded worker on a KV pool far too
 *     small for them (preemption by recompute happens) give exactly the outputs of a roomy run;
 *   - prefix cache: a second request sharing a 512-token system prompt computes only its
 *     suffix (pool and scheduler counters) and its greedy output equals a cache-off run;
 *   - chunked prefill: while a long prompt is prefilled in chunks, each running stream gets a
 *     token every step (the step log is printed), and every output equals its solo run.
 * Invariants are checked after every step (check_invariants).
 */
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "engine/load.h"
#include "scheduler/worker.h"
#include "scheduler/sched.h"
#include "test_scheduler_util.h"
#include "testutil.h"

static const char *g_path;

/* The model with a KV pool of kv_blocks blocks and steps of up to max_batch tokens. */
typedef struct model {
    pgd_model_info *info;
    pgd_runner *runner;
} model;

static int open_model(model *m, uint32_t kv_blocks, uint32_t max_batch) {
    pgd_load_options o;
    pgd_load_options_default(&o);
    o.model_path = g_path;
    o.runner.backend.kv_blocks = kv_blocks;
    o.runner.backend.block_size = 16;
    o.runner.backend.max_tokens = max_batch;
    if (pgd_load(&o, &m->info, &m->runner)) {
        fprintf(stderr, "cannot open %s: %s\n", g_path, pgd_error_detail());
        return -1;
    }
    return 0;
}

static void close_model(model *m) {
    pgd_runner_destroy(m->runner); /* NULL after a worker took it */
    pgd_model_info_close(m->info);
}

static pgd_sched *open_sched(model *m, uint32_t B, uint32_t S, bool caching, recorder *rec) {
    pgd_sched_config c;
    pgd_sched_config_default(&c);
    c.max_num_batched_tokens = B;
    c.max_num_seqs = S;
    c.prefix_caching = caching;
    c.check_invariants = true;
    pgd_sched *s = NULL;
    return pgd_sched_create(m->runner, &c, rec_event, rec, &s) ? NULL : s;
}

static void model_prompt(uint64_t seed, int32_t *out, uint32_t n) {
    make_tokens(seed, out, n, 17, 40000); /* skip control tokens 0..16 */
}

static int run_idle(pgd_sched *s, recorder *rec, int max_steps) {
    for (int i = 0; i < max_steps; i++) {
        if (!pgd_sched_has_work(s)) return i;
        rec->step++;
        if (pgd_sched_step(s, NULL)) {
            fprintf(stderr, "  step: %s\n", pgd_error_detail());
            return -1;
        }
    }
    return -1;
}

/* ---- preemption ---------------------------------------------------------------------------- */

enum { P_N = 6, P_GEN = 24 };

static uint32_t p_len(uint32_t i) {
    return 12 + 5 * i;
}

static void test_preemption_same_greedy_output(void) {
    int32_t p[P_N][64];
    for (uint32_t i = 0; i < P_N; i++) model_prompt(40 + i, p[i], p_len(i));
    /* roomy: the scheduler directly */
    model m;
    REQUIRE(open_model(&m, 256, 128) == 0);
    recorder roomy = {0};
    pgd_sched *s = open_sched(&m, 128, 8, true, &roomy);
    REQUIRE(s);
    for (uint32_t i = 0; i < P_N; i++) {
        pgd_request r = greedy_req(p[i], p_len(i), P_GEN);
        CHECK_EQ_INT(pgd_sched_submit(s, i + 1, &r), 0);
    }
    CHECK(run_idle(s, &roomy, 1000) > 0);
    pgd_sched_stats st;
    pgd_sched_get_stats(s, &st);
    CHECK_EQ_INT(st.n_preemptions, 0);
    pgd_sched_destroy(s);
    close_model(&m);

    /* tight: 7 usable blocks (112 slots) for six sequences of up to 61 tokens, through the
     * threaded worker */
    REQUIRE(open_model(&m, 8, 128) == 0);
    pgd_worker_config c;
    pgd_worker_config_default(&c);
    c.sched.max_num_batched_tokens = 128;
    c.sched.max_num_seqs = 8;
    c.sched.check_invariants = true;
    pgd_worker *e = NULL;
    REQUIRE(pgd_worker_create(m.runner, &c, &e) == 0);
    m.runner = NULL; /* the worker's now */
    uint64_t ids[P_N];
    for (uint32_t i = 0; i < P_N; i++) {
        pgd_request r = greedy_req(p[i], p_len(i), P_GEN);
        CHECK_EQ_INT(pgd_worker_submit(e, &r, &ids[i]), 0);
    }
    recorder tight = {0};
    uint64_t t0 = pgd_now_ns();
    while (tight.n_done < P_N && pgd_now_ns() - t0 < 120000000000ull) {
        pgd_worker_wait(e, 100);
        pgd_worker_drain(e, rec_event, &tight);
    }
    pgd_worker_shutdown(e, 0);
    pgd_worker_get_stats(e, &st);
    fprintf(stderr, "    tight pool: %llu preemptions, %llu tokens computed for %llu generated\n",
            (unsigned long long)st.n_preemptions, (unsigned long long)st.computed_tokens,
            (unsigned long long)st.generation_tokens);
    CHECK(st.n_preemptions > 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(tight.n_done, P_N);
    for (uint32_t i = 0; i < P_N; i++) {
        const rec_choice *a = &roomy.r[i + 1].ch[0], *b = &tight.r[ids[i]].ch[0];
        CHECK_EQ_INT(b->reason, PGD_REASON_LENGTH);
        CHECK_EQ_INT(b->n, P_GEN);
        CHECK(same_tokens(a->tok, a->n, b->tok, b->n));
        CHECK_EQ_STR(a->text.data ? a->text.data : "", b->text.data ? b->text.data : "");
    }
    CHECK_EQ_INT(roomy.violations + tight.violations, 0);
    pgd_worker_destroy(e); /* destroys the runner */
    close_model(&m);
    rec_free(&roomy);
    rec_free(&tight);
}

/* ---- prefix cache -------------------------------------------------------------------------- */

enum { SYS = 512, SUF = 24, X_GEN = 12 };

/* Runs A then B on a fresh model; returns B's output in rec (ids 1, 2) and the counters. */
static int run_prefix(bool caching, const int32_t *a, const int32_t *b, recorder *rec,
                      pgd_sched_stats *after_a, pgd_sched_stats *after_b) {
    model m;
    if (open_model(&m, 128, 256)) return -1;
    pgd_sched *s = open_sched(&m, 256, 8, caching, rec);
    int rc = -1;
    if (!s) goto out;
    pgd_request r = greedy_req(a, SYS + SUF, X_GEN);
    if (pgd_sched_submit(s, 1, &r) || run_idle(s, rec, 100) <= 0) goto out;
    pgd_sched_get_stats(s, after_a);
    r = greedy_req(b, SYS + SUF, X_GEN);
    if (pgd_sched_submit(s, 2, &r) || run_idle(s, rec, 100) <= 0) goto out;
    pgd_sched_get_stats(s, after_b);
    rc = 0;
out:
    pgd_sched_destroy(s);
    close_model(&m);
    return rc;
}

static void test_prefix_cache_prefills_suffix_only(void) {
    int32_t a[SYS + SUF], b[SYS + SUF];
    model_prompt(7, a, SYS);
    memcpy(b, a, sizeof a);
    model_prompt(8, a + SYS, SUF);
    model_prompt(9, b + SYS, SUF);
    recorder on = {0}, off = {0};
    pgd_sched_stats a1, b1, a0, b0;
    REQUIRE(run_prefix(true, a, b, &on, &a1, &b1) == 0);
    REQUIRE(run_prefix(false, a, b, &off, &a0, &b0) == 0);
    fprintf(stderr,
            "    cache on: B computed %llu prompt tokens, %llu/%llu hit; cache off: %llu "
            "computed\n",
            (unsigned long long)(b1.prompt_computed_tokens - a1.prompt_computed_tokens),
            (unsigned long long)(b1.prefix_hit_tokens - a1.prefix_hit_tokens),
            (unsigned long long)(b1.prefix_query_tokens - a1.prefix_query_tokens),
            (unsigned long long)(b0.prompt_computed_tokens - a0.prompt_computed_tokens));
    CHECK_EQ_INT(b1.prompt_computed_tokens - a1.prompt_computed_tokens, SUF);
    CHECK_EQ_INT(b1.prefix_hit_tokens - a1.prefix_hit_tokens, SYS);
    CHECK_EQ_INT(b1.prefix_query_tokens - a1.prefix_query_tokens, SYS + SUF);
    CHECK_EQ_INT(on.r[2].usage.cached_tokens, SYS);
    CHECK_EQ_INT(b0.prompt_computed_tokens - a0.prompt_computed_tokens, SYS + SUF);
    CHECK_EQ_INT(off.r[2].usage.cached_tokens, 0);
    for (uint64_t id = 1; id <= 2; id++) {
        const rec_choice *x = &on.r[id].ch[0], *y = &off.r[id].ch[0];
        CHECK_EQ_INT(x->n, X_GEN);
        CHECK(same_tokens(x->tok, x->n, y->tok, y->n));
    }
    rec_free(&on);
    rec_free(&off);
}

/* ---- chunked prefill ----------------------------------------------------------------------- */

enum { C_LONG = 1000, C_STREAMS = 2, C_GEN = 40 };

static void test_chunked_prefill_streams_keep_decoding(void) {
    int32_t *lp = malloc(C_LONG * sizeof *lp), sp[C_STREAMS][16];
    REQUIRE(lp);
    model_prompt(77, lp, C_LONG);
    for (uint32_t i = 0; i < C_STREAMS; i++) model_prompt(80 + i, sp[i], 16);
    model m;
    REQUIRE(open_model(&m, 160, 128) == 0);
    recorder rec = {0};
    pgd_sched *s = open_sched(&m, 128, 8, false, &rec);
    REQUIRE(s);
    /* solo runs: ids 101.. */
    for (uint32_t i = 0; i < C_STREAMS; i++) {
        pgd_request r = greedy_req(sp[i], 16, C_GEN);
        CHECK_EQ_INT(pgd_sched_submit(s, 101 + i, &r), 0);
        CHECK(run_idle(s, &rec, 1000) > 0);
    }
    pgd_request r = greedy_req(lp, C_LONG, 4);
    CHECK_EQ_INT(pgd_sched_submit(s, 110, &r), 0);
    CHECK(run_idle(s, &rec, 1000) > 0);
    /* mixed: streams first, then the long prompt */
    for (uint32_t i = 0; i < C_STREAMS; i++) {
        r = greedy_req(sp[i], 16, C_GEN);
        CHECK_EQ_INT(pgd_sched_submit(s, 1 + i, &r), 0);
    }
    rec.step++;
    REQUIRE(pgd_sched_step(s, NULL) == 0);
    r = greedy_req(lp, C_LONG, 4);
    CHECK_EQ_INT(pgd_sched_submit(s, 10, &r), 0);
    int prefill_steps = 0, missed = 0;
    for (int guard = 0; pgd_sched_has_work(s) && guard < 1000; guard++) {
        pgd_sched_step_info info;
        rec.step++;
        uint64_t t0 = pgd_now_ns();
        REQUIRE(pgd_sched_step(s, &info) == 0);
        double ms = (double)(pgd_now_ns() - t0) * 1e-6;
        const pgd_sched_item_info *lng = NULL;
        int decodes = 0;
        for (uint32_t k = 0; k < info.n_items; k++) {
            if (info.items[k].id == 10 && info.items[k].n_computed < C_LONG) lng = &info.items[k];
            if (info.items[k].id <= C_STREAMS && info.items[k].decode) decodes++;
        }
        if (!lng) continue;
        prefill_steps++;
        missed += decodes != C_STREAMS;
        fprintf(stderr, "    step %llu: %u tokens: prompt %u..%u + %d decodes (%.0f ms)\n",
                (unsigned long long)rec.step, info.n_tokens, lng->n_computed,
                lng->n_computed + lng->n_tokens, decodes, ms);
    }
    CHECK(prefill_steps >= C_LONG / 128);
    CHECK_EQ_INT(missed, 0);
    for (uint32_t i = 0; i < C_STREAMS; i++) {
        const rec_choice *solo = &rec.r[101 + i].ch[0], *mix = &rec.r[1 + i].ch[0];
        CHECK_EQ_INT(mix->n, C_GEN);
        CHECK(same_tokens(solo->tok, solo->n, mix->tok, mix->n));
    }
    CHECK(same_tokens(rec.r[110].ch[0].tok, rec.r[110].ch[0].n, rec.r[10].ch[0].tok,
                      rec.r[10].ch[0].n));
    CHECK_EQ_INT(rec.violations, 0);
    pgd_sched_destroy(s);
    close_model(&m);
    rec_free(&rec);
    free(lp);
}

int main(void) {
    g_path = getenv("PAGODA_MODEL");
    if (!g_path || !*g_path) {
        fprintf(stderr, "PAGODA_MODEL not set: skipped\n");
        return 77;
    }
    RUN(test_preemption_same_greedy_output);
    RUN(test_prefix_cache_prefills_suffix_only);
    RUN(test_chunked_prefill_streams_keep_decoding);
    return test_summary();
}
