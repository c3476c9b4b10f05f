/*
 * tests/unit/test_worker.c — the scheduler thread and its in-process API
 * (scheduler/worker.h) over the fake backend, plus the outbox's MPSC queue on its own:
 * concurrent submitters and a concurrent consumer, aborts from another thread (running and
 * waiting requests), the waiting-queue bound (PGD_EFULL), shutdown that drains or aborts, no
 * busy polling when idle, errors reported on the submitting thread, and a device lost for good.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "scheduler/worker.h"
#include "support/fake_backend.h"
#include "scheduler/queue.h"
#include "test_scheduler_util.h"
#include "testutil.h"

static _Atomic int g_wakes;

static void on_wake(void *ud) {
    (void)ud;
    atomic_fetch_add(&g_wakes, 1);
}

/* The model info of the open worker (it must outlive the worker; close_worker closes it). */
static pgd_model_info *g_info;

static pgd_worker *open_worker_lost(uint32_t n_blocks, uint32_t B, uint32_t S, uint32_t max_waiting,
                                    uint32_t delay_us, uint64_t lost_at) {
    pgd_fake_config fc = {.n_blocks = n_blocks,
                          .block_size = 16,
                          .max_tokens = B,
                          .verify = true,
                          .delay_us = delay_us,
                          .fail_at = lost_at,
                          .lost = lost_at > 0};
    pgd_runner *runner = NULL;
    if (pgd_fake_create(&fc, &g_info, &runner)) return NULL;
    pgd_worker_config c;
    pgd_worker_config_default(&c);
    c.sched.max_num_batched_tokens = B;
    c.sched.max_num_seqs = S;
    c.sched.max_waiting = max_waiting;
    c.sched.check_invariants = true;
    c.wake = on_wake;
    pgd_worker *e = NULL;
    if (pgd_worker_create(runner, &c, &e)) {
        pgd_runner_destroy(runner);
        pgd_model_info_close(g_info);
        return NULL;
    }
    return e;
}

static pgd_worker *open_worker(uint32_t n_blocks, uint32_t B, uint32_t S, uint32_t max_waiting,
                               uint32_t delay_us) {
    return open_worker_lost(n_blocks, B, S, max_waiting, delay_us, 0);
}

static void close_worker(pgd_worker *e) {
    pgd_worker_destroy(e);
    pgd_model_info_close(g_info);
    g_info = NULL;
}

static double now_s(void) {
    return (double)pgd_now_ns() * 1e-9;
}

/* Drain into rec until it saw `target` done events or timeout_s passed. */
static bool drain_until(pgd_worker *e, recorder *rec, uint64_t target, double timeout_s) {
    double end = now_s() + timeout_s;
    for (;;) {
        pgd_worker_drain(e, rec_event, rec);
        if (rec->n_done >= target) return true;
        if (now_s() > end) return false;
        pgd_worker_wait(e, 50);
    }
}

/* ---- concurrent submitters ---------------------------------------------------------------- */

#define N_THREADS  4
#define PER_THREAD 50

typedef struct submitter {
    pgd_worker *e;
    int t;
    uint64_t ids[PER_THREAD];
    int failures;
} submitter;

static uint32_t prompt_len(uint64_t seed) {
    return 1 + (uint32_t)(seed * 7 % 60);
}

static void *submit_main(void *arg) {
    submitter *s = arg;
    int32_t p[64];
    for (int i = 0; i < PER_THREAD; i++) {
        uint64_t seed = (uint64_t)s->t * 1000 + (uint64_t)i;
        make_tokens(seed, p, prompt_len(seed), 0, 256);
        pgd_request r = greedy_req(p, prompt_len(seed), 4 + seed % 13);
        r.user = (void *)(uintptr_t)(seed + 1);
        r.tenant = (uint64_t)s->t;
        if (pgd_worker_submit(s->e, &r, &s->ids[i])) s->failures++;
    }
    return NULL;
}

typedef struct user_check {
    recorder rec;
    uint64_t seed_of[512];
    int bad_user;
} user_check;

static void user_event(const pgd_event *ev, void *ud) {
    user_check *u = ud;
    if (ev->id < 512) {
        uint64_t seed = (uint64_t)(uintptr_t)ev->user - 1;
        if (u->seed_of[ev->id] && u->seed_of[ev->id] != seed + 1) u->bad_user++;
        u->seed_of[ev->id] = seed + 1;
    }
    rec_event(ev, &u->rec);
}

static void test_worker_concurrent_submitters(void) {
    pgd_worker *e = open_worker(256, 64, 16, 1024, 0);
    REQUIRE(e);
    int wakes0 = atomic_load(&g_wakes);
    submitter subs[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        subs[t] = (submitter){.e = e, .t = t};
        REQUIRE(pthread_create(&th[t], NULL, submit_main, &subs[t]) == 0);
    }
    static user_check u;
    memset(&u, 0, sizeof u);
    /* the consumer drains while the submitters submit */
    double end = now_s() + 60;
    while (u.rec.n_done < N_THREADS * PER_THREAD && now_s() < end) {
        pgd_worker_drain(e, user_event, &u);
        pgd_worker_wait(e, 50);
    }
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    pgd_worker_drain(e, user_event, &u);
    CHECK_EQ_INT(u.rec.n_done, N_THREADS * PER_THREAD);
    CHECK_EQ_INT(u.bad_user, 0);
    if (u.rec.violations) fprintf(stderr, "  event contract: %s\n", u.rec.why);
    CHECK_EQ_INT(u.rec.violations, 0);
    int32_t p[64], want[32];
    int bad = 0;
    uint8_t seen[512] = {0};
    for (int t = 0; t < N_THREADS; t++) {
        CHECK_EQ_INT(subs[t].failures, 0);
        for (int i = 0; i < PER_THREAD; i++) {
            uint64_t id = subs[t].ids[i], seed = (uint64_t)t * 1000 + (uint64_t)i;
            REQUIRE(id > 0 && id < 512);
            CHECK(!seen[id]++);
            make_tokens(seed, p, prompt_len(seed), 0, 256);
            uint32_t n = pgd_fake_greedy(p, prompt_len(seed), 4 + seed % 13, 0, true, want);
            const rec_choice *c = &u.rec.r[id].ch[0];
            bad += !same_tokens(c->tok, c->n, want, n) || u.seed_of[id] != seed + 1;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(atomic_load(&g_wakes) > wakes0);
    pgd_sched_stats st;
    for (int i = 0; i < 100; i++) { /* the snapshot follows the last step */
        pgd_worker_get_stats(e, &st);
        if (st.n_finished == N_THREADS * PER_THREAD) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ_INT(st.n_finished, N_THREADS * PER_THREAD);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.n_requests, 0);
    close_worker(e);
    rec_free(&u.rec);
}

/* ---- abort from another thread ------------------------------------------------------------ */

typedef struct aborter {
    pgd_worker *e;
    uint64_t ids[3];
    int n;
    int rc;
} aborter;

static void *abort_main(void *arg) {
    aborter *a = arg;
    pgd_sched_stats st;
    double end = now_s() + 30;
    do { /* let both running requests produce some tokens */
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        pgd_worker_get_stats(a->e, &st);
    } while (st.generation_tokens < 10 && now_s() < end);
    for (int i = 0; i < a->n; i++) a->rc |= pgd_worker_abort(a->e, a->ids[i]);
    return NULL;
}

static void test_worker_abort_from_another_thread(void) {
    pgd_worker *e = open_worker(200, 64, 2, 16, 1000); /* 1 ms per step */
    REQUIRE(e);
    int32_t p[16];
    make_tokens(1, p, 16, 0, 256);
    aborter a = {.e = e, .n = 3};
    pgd_request r = greedy_req(p, 16, 1000);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(pgd_worker_submit(e, &r, &a.ids[i]), 0);
    /* two run (max_num_seqs 2), the third waits; all three are aborted */
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, abort_main, &a) == 0);
    recorder rec = {0};
    CHECK(drain_until(e, &rec, 3, 30));
    pthread_join(th, NULL);
    CHECK_EQ_INT(a.rc, 0);
    for (int i = 0; i < 3; i++) {
        const rec_req *q = &rec.r[a.ids[i]];
        CHECK_EQ_INT(q->ch[0].reason, PGD_REASON_ABORT);
        CHECK(q->ch[0].n < 1000);
        CHECK_EQ_INT(q->n_done, 1);
    }
    CHECK(rec.r[a.ids[0]].ch[0].n > 0);
    CHECK_EQ_INT(rec.r[a.ids[2]].ch[0].n, 0); /* never admitted */
    pgd_sched_stats st;
    for (int i = 0; i < 100; i++) {
        pgd_worker_get_stats(e, &st);
        if (st.n_requests == 0 && st.kv_blocks_used == 0) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.n_aborted, 3);
    CHECK_EQ_INT(pgd_worker_abort(e, 999), 0); /* unknown: ignored */
    CHECK_EQ_INT(rec.violations, 0);
    close_worker(e);
    rec_free(&rec);
}

/* ---- bounded waiting queue and shutdown --------------------------------------------------- */

static void test_worker_full_queue_and_shutdown_abort(void) {
    pgd_worker *e = open_worker(200, 64, 1, 2, 1000);
    REQUIRE(e);
    int32_t p[16];
    make_tokens(2, p, 16, 0, 256);
    pgd_request r = greedy_req(p, 16, 2000);
    uint64_t ids[4] = {0};
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &ids[0]), 0);
    recorder rec = {0};
    double end = now_s() + 30;
    while (!(rec.cap > ids[0] && rec.r[ids[0]].ch[0].n > 0) && now_s() < end) {
        pgd_worker_wait(e, 50);
        pgd_worker_drain(e, rec_event, &rec);
    }
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &ids[1]), 0);
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &ids[2]), 0);
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &ids[3]), PGD_EFULL); /* 2 already waiting */
    fprintf(stderr, "    full: %s\n", pgd_error_detail());
    pgd_worker_shutdown(e, 0); /* abort everything now */
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &ids[3]), PGD_ESHUTDOWN);
    CHECK_EQ_INT(pgd_worker_abort(e, ids[0]), PGD_ESHUTDOWN);
    CHECK(drain_until(e, &rec, 3, 5));
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(rec.r[ids[i]].ch[0].reason, PGD_REASON_ABORT);
    pgd_sched_stats st;
    pgd_worker_get_stats(e, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.n_refused, 2);
    CHECK_EQ_INT(rec.violations, 0);
    close_worker(e);
    rec_free(&rec);
}

/* A group of requests (a completion's prompts) is queued all or none: with one waiting
 * already and max_waiting 2, a group of 2 is refused whole (PGD_EFULL: nothing to abort, no
 * event), a group of 1 fits; a group larger than max_waiting can never be queued (PGD_EINVAL,
 * param "prompt"), even on an idle worker. */
static void test_worker_submit_group(void) {
    pgd_worker *e = open_worker(200, 64, 1, 2, 1000);
    REQUIRE(e);
    int32_t p[16];
    make_tokens(3, p, 16, 0, 256);
    pgd_request rs[3];
    for (int i = 0; i < 3; i++) rs[i] = greedy_req(p, 16, 2000);
    uint64_t ids[3] = {0}, id0 = 0, id1 = 0;
    CHECK_EQ_INT(pgd_worker_submit_n(e, rs, 3, ids), PGD_EINVAL);
    CHECK(pgd_error_param() && strcmp(pgd_error_param(), "prompt") == 0);
    CHECK(strstr(pgd_error_detail(), "never") != NULL);
    CHECK(ids[0] == 0 && ids[1] == 0 && ids[2] == 0);
    CHECK_EQ_INT(pgd_worker_submit(e, &rs[0], &id0), 0); /* runs */
    recorder rec = {0};
    double end = now_s() + 30;
    while (!(rec.cap > id0 && rec.r[id0].ch[0].n > 0) && now_s() < end) {
        pgd_worker_wait(e, 50);
        pgd_worker_drain(e, rec_event, &rec);
    }
    CHECK_EQ_INT(pgd_worker_submit(e, &rs[1], &id1), 0); /* waits */
    CHECK_EQ_INT(pgd_worker_submit_n(e, rs, 2, ids), PGD_EFULL);
    CHECK(ids[0] == 0 && ids[1] == 0);
    CHECK_EQ_INT(pgd_worker_submit_n(e, rs, 1, ids), 0);
    pgd_worker_shutdown(e, 0);
    CHECK(drain_until(e, &rec, 3, 5));
    pgd_sched_stats st;
    pgd_worker_get_stats(e, &st);
    CHECK_EQ_INT(st.n_submitted, 3);
    CHECK_EQ_INT(st.n_aborted, 3); /* the three queued ones, at shutdown; none of the refused */
    CHECK_EQ_INT(st.n_refused, 5);
    CHECK_EQ_INT(rec.violations, 0);
    close_worker(e);
    rec_free(&rec);
}

/* Shutdown with -1 lets every queued request finish; half of them ask for their prompts'
 * logprobs, which cross to the draining thread whole. */
static void test_worker_shutdown_drains(void) {
    pgd_worker *e = open_worker(200, 64, 4, 64, 0);
    REQUIRE(e);
    int32_t p[16][20], want[32];
    uint64_t ids[16];
    for (int i = 0; i < 16; i++) {
        make_tokens(50 + i, p[i], 20, 0, 256);
        pgd_request r = greedy_req(p[i], 20, 10 + i);
        r.prompt_logprobs = i % 2 ? i % 5 : -1; /* events that carry arrays across threads */
        CHECK_EQ_INT(pgd_worker_submit(e, &r, &ids[i]), 0);
    }
    pgd_worker_shutdown(e, -1); /* finish all, however long */
    recorder rec = {0};
    pgd_worker_drain(e, rec_event, &rec);
    CHECK_EQ_INT(rec.n_done, 16);
    for (int i = 0; i < 16; i++) {
        if (i % 2) CHECK_EQ_INT(prompt_lp_mismatches(&rec.r[ids[i]], p[i], 20, 0, i % 5), 0);
        uint32_t n = pgd_fake_greedy(p[i], 20, 10 + i, 0, true, want);
        CHECK(same_tokens(rec.r[ids[i]].ch[0].tok, rec.r[ids[i]].ch[0].n, want, n));
        CHECK_EQ_INT(rec.r[ids[i]].ch[0].reason, PGD_REASON_LENGTH);
    }
    close_worker(e);
    rec_free(&rec);
}

/* ---- a device lost for good ----------------------------------------------------------------- */

/* The fake device is lost at its 4th forward (and stays lost): the requests of that step and
 * those still waiting (2 seats for 6) each get one ERROR event with the
 * reason, every KV block comes back, later submits are refused with PGD_EDEVLOST and that
 * reason on the caller's thread, and the worker says it is lost. */
static void test_worker_device_lost(void) {
    pgd_worker *e = open_worker_lost(200, 64, 2, 64, 0, 4);
    REQUIRE(e);
    const char *why = "unset";
    CHECK(!pgd_worker_lost(e, &why) && why == NULL);
    int32_t p[6][20];
    uint64_t ids[6];
    pgd_request rs[6];
    for (int i = 0; i < 6; i++) {
        make_tokens(70 + i, p[i], 20, 0, 256);
        rs[i] = greedy_req(p[i], 20, 50);
    }
    /* one group, queued at once: the loss (4th step) comes after all six are in, however fast
     * the scheduler thread is (one at a time, a slow submitter met it first under TSan) */
    CHECK_EQ_INT(pgd_worker_submit_n(e, rs, 6, ids), 0);
    recorder rec = {0};
    CHECK(drain_until(e, &rec, 6, 10));
    CHECK_EQ_INT(rec.n_error, 6);
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(rec.r[ids[i]].error, PGD_EDEVLOST);
        CHECK_EQ_INT(rec.r[ids[i]].n_error, 1);
    }
    CHECK(rec.r[ids[0]].ch[0].n > 0); /* the first ran a few steps before */
    CHECK(pgd_worker_lost(e, &why));
    CHECK(why && strstr(why, "the device failed: fake backend: the device is lost"));
    int32_t q[4] = {1, 2, 3, 4};
    pgd_request r = greedy_req(q, 4, 4);
    uint64_t id = 0;
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &id), PGD_EDEVLOST);
    CHECK(id == 0 && strstr(pgd_error_detail(), "the device is lost"));
    pgd_sched_stats st;
    double end = now_s() + 5;
    do pgd_worker_get_stats(e, &st);
    while (st.kv_blocks_used && now_s() < end);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.n_errors, 6);
    CHECK_EQ_INT(rec.violations, 0);
    pgd_worker_shutdown(e, 0);
    close_worker(e);
    rec_free(&rec);
}

/* ---- idle costs nothing; errors on the caller's thread ------------------------------------ */

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_worker_idle_no_busy_poll(void) {
    pgd_worker *e = open_worker(64, 64, 4, 64, 0);
    REQUIRE(e);
    int32_t p[8];
    make_tokens(3, p, 8, 0, 256);
    pgd_request r = greedy_req(p, 8, 5);
    uint64_t id;
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &id), 0);
    recorder rec = {0};
    CHECK(drain_until(e, &rec, 1, 10));
    double c0 = cpu_s();
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    double used = cpu_s() - c0;
    fprintf(stderr, "    idle for 300 ms: %.1f ms of CPU\n", used * 1e3);
    CHECK(used < 0.03);
    /* bad requests fail on the caller's thread with a detail */
    r = greedy_req(p, 0, 5);
    CHECK_EQ_INT(pgd_worker_submit(e, &r, &id), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "empty") != NULL);
    CHECK_EQ_INT(id, 0);
    close_worker(e);
    rec_free(&rec);
}

/* ---- MPSC queue ----------------------------------------------------------------------------- */

#define MPSC_PRODUCERS 4
#define MPSC_PER       50000

typedef struct mnode {
    pgd_mpsc_node link;
    int producer, seq;
} mnode;

typedef struct mprod {
    pgd_mpsc *q;
    mnode *nodes;
    int p;
} mprod;

static void *mpsc_producer(void *arg) {
    mprod *m = arg;
    for (int i = 0; i < MPSC_PER; i++) {
        m->nodes[i].producer = m->p;
        m->nodes[i].seq = i;
        pgd_mpsc_push(m->q, &m->nodes[i].link);
    }
    return NULL;
}

static void test_mpsc_many_producers(void) {
    pgd_mpsc q;
    pgd_mpsc_init(&q);
    mprod prods[MPSC_PRODUCERS];
    pthread_t th[MPSC_PRODUCERS];
    for (int p = 0; p < MPSC_PRODUCERS; p++) {
        prods[p] = (mprod){&q, calloc(MPSC_PER, sizeof(mnode)), p};
        REQUIRE(prods[p].nodes);
        REQUIRE(pthread_create(&th[p], NULL, mpsc_producer, &prods[p]) == 0);
    }
    int next[MPSC_PRODUCERS] = {0}, out_of_order = 0, total = 0;
    while (total < MPSC_PRODUCERS * MPSC_PER) {
        pgd_mpsc_node *n = pgd_mpsc_pop(&q);
        if (!n) continue; /* empty or a push half done: spin (test only) */
        mnode *m = (mnode *)n;
        out_of_order += m->seq != next[m->producer];
        next[m->producer] = m->seq + 1;
        total++;
    }
    for (int p = 0; p < MPSC_PRODUCERS; p++) pthread_join(th[p], NULL);
    CHECK(pgd_mpsc_pop(&q) == NULL);
    CHECK_EQ_INT(out_of_order, 0);
    for (int p = 0; p < MPSC_PRODUCERS; p++) {
        CHECK_EQ_INT(next[p], MPSC_PER);
        free(prods[p].nodes);
    }
}

int main(void) {
    RUN(test_mpsc_many_producers);
    RUN(test_worker_concurrent_submitters);
    RUN(test_worker_abort_from_another_thread);
    RUN(test_worker_full_queue_and_shutdown_abort);
    RUN(test_worker_submit_group);
    RUN(test_worker_shutdown_drains);
    RUN(test_worker_device_lost);
    RUN(test_worker_idle_no_busy_poll);
    return test_summary();
}
