/*
 * tests/unit/test_threadpool.c — kernels/cpu/threadpool: every task index runs exactly once
 * per run over many rounds (spinning and sleeping workers), thread indices in range, the
 * caller sees all writes, nested and concurrent runs are refused, create/destroy while idle;
 * several spans as one run.
 */
#include "kernels/cpu/threadpool.h"

#include "common/error.h"
#include "testutil.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define MAX_TASKS 300

typedef struct count_ctx {
    atomic_int hits[MAX_TASKS];
    int plain[MAX_TASKS]; /* non-atomic writes: the caller must see them after run */
    atomic_int bad_thread;
    int size;
    int round;
} count_ctx;

static void count_task(int task, int thread, void *arg) {
    count_ctx *c = arg;
    atomic_fetch_add_explicit(&c->hits[task], 1, memory_order_relaxed);
    c->plain[task] = c->round;
    if (thread < 0 || thread >= c->size) atomic_store(&c->bad_thread, 1);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Runs `rounds` runs of varied size on pool; returns the number of bad counts. */
static int run_rounds(pgd_threadpool *pool, int rounds, int sleep_every) {
    count_ctx *c = calloc(1, sizeof(*c));
    if (!c) return 1;
    c->size = pgd_threadpool_size(pool);
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        int n = (int)((r * 7919u) % MAX_TASKS);
        if (r % 5 == 0) n = r % 4; /* 0..3 tasks: the inline paths */
        c->round = r + 1;
        for (int i = 0; i < n; i++) atomic_store_explicit(&c->hits[i], 0, memory_order_relaxed);
        if (pgd_threadpool_run(pool, n, count_task, c) != 0) bad++;
        for (int i = 0; i < n; i++) {
            if (atomic_load_explicit(&c->hits[i], memory_order_relaxed) != 1) bad++;
            if (c->plain[i] != r + 1) bad++;
        }
        if (sleep_every && r % sleep_every == 0) sleep_us(300); /* let workers block */
    }
    if (atomic_load(&c->bad_thread)) bad++;
    free(c);
    return bad;
}

static void test_exactly_once(void) {
    static const int sizes[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < PGD_ARRAY_LEN(sizes); i++) {
        pgd_threadpool *pool = NULL;
        REQUIRE(pgd_threadpool_create(sizes[i], &pool) == 0);
        CHECK_EQ_INT(pgd_threadpool_size(pool), sizes[i]);
        int bad = run_rounds(pool, 5000, 0);
        bad += run_rounds(pool, 200, 7); /* with sleeps: the blocking wake-up path */
        if (bad) fprintf(stderr, "  pool of %d: %d bad counts\n", sizes[i], bad);
        CHECK_EQ_INT(bad, 0);
        pgd_threadpool_destroy(pool);
    }
    CHECK_EQ_INT(run_rounds(NULL, 100, 0), 0); /* NULL pool: inline */
    CHECK_EQ_INT(pgd_threadpool_size(NULL), 1);
}

/* Spans: every (span, index) exactly once, each span with its own function and context,
 * empty spans skipped; a negative span and an int overflow refused before anything runs. */
static void test_spans(void) {
    static const int n_tasks[] = {0, 5, 1, 0, 17, 2};
    count_ctx *c = calloc(PGD_ARRAY_LEN(n_tasks), sizeof *c);
    REQUIRE(c != NULL);
    pgd_task_span spans[PGD_ARRAY_LEN(n_tasks)];
    for (int threads = 1; threads <= 3; threads += 2) {
        pgd_threadpool *pool = NULL;
        REQUIRE(pgd_threadpool_create(threads, &pool) == 0);
        for (int round = 1; round <= 200; round++) {
            const int n = 1 + round % (int)PGD_ARRAY_LEN(n_tasks); /* 1 .. all spans */
            for (int j = 0; j < n; j++) {
                c[j].size = threads;
                c[j].round = round;
                for (int i = 0; i < MAX_TASKS; i++) atomic_store(&c[j].hits[i], 0);
                spans[j] = (pgd_task_span){count_task, &c[j], n_tasks[j]};
            }
            CHECK_EQ_INT(pgd_threadpool_run_spans(pool, spans, n), 0);
            int bad = 0;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < MAX_TASKS; i++) {
                    bad += atomic_load(&c[j].hits[i]) != (i < n_tasks[j]);
                    bad += i < n_tasks[j] && c[j].plain[i] != round;
                    bad += atomic_load(&c[j].bad_thread);
                }
            CHECK_EQ_INT(bad, 0);
        }
        spans[0] = (pgd_task_span){count_task, &c[0], 3};
        spans[1] = (pgd_task_span){count_task, &c[1], -1};
        for (int i = 0; i < MAX_TASKS; i++) atomic_store(&c[0].hits[i], 0);
        CHECK_EQ_INT(pgd_threadpool_run_spans(pool, spans, 2), PGD_EINVAL);
        spans[0].n_tasks = spans[1].n_tasks = INT_MAX / 2 + 1;
        CHECK_EQ_INT(pgd_threadpool_run_spans(pool, spans, 2), PGD_EINVAL);
        CHECK_EQ_INT(atomic_load(&c[0].hits[0]), 0);
        pgd_threadpool_destroy(pool);
    }
    free(c);
}

static void test_default_size(void) {
    pgd_threadpool *pool = NULL;
    REQUIRE(pgd_threadpool_create(0, &pool) == 0);
    CHECK_EQ_INT(pgd_threadpool_size(pool), pgd_cpu_count());
    CHECK(pgd_cpu_count() >= 1);
    CHECK_EQ_INT(run_rounds(pool, 100, 0), 0);
    pgd_threadpool_destroy(pool);
    CHECK_EQ_INT(pgd_threadpool_create(100000, &pool), PGD_EINVAL);
    CHECK(pool == NULL);
}

/* Threads really run tasks in parallel: a task waits until another thread has started one. */
typedef struct meet_ctx {
    atomic_int arrived;
    atomic_int timeout;
} meet_ctx;

static void meet_task(int task, int thread, void *arg) {
    meet_ctx *c = arg;
    atomic_fetch_add(&c->arrived, 1);
    for (int i = 0; i < 2000000 && atomic_load(&c->arrived) < 2; i++) sleep_us(1);
    if (atomic_load(&c->arrived) < 2) atomic_store(&c->timeout, 1);
}

static void test_parallel(void) {
    pgd_threadpool *pool = NULL;
    REQUIRE(pgd_threadpool_create(2, &pool) == 0);
    meet_ctx c = {0};
    CHECK_EQ_INT(pgd_threadpool_run(pool, 2, meet_task, &c), 0);
    CHECK_EQ_INT(atomic_load(&c.timeout), 0);
    CHECK_EQ_INT(atomic_load(&c.arrived), 2);
    pgd_threadpool_destroy(pool);
}

typedef struct nest_ctx {
    pgd_threadpool *pool;
    atomic_int nested_rc[8];
    atomic_int inner_ran;
} nest_ctx;

static void inner_task(int task, int thread, void *arg) {
    nest_ctx *c = arg;
    atomic_fetch_add(&c->inner_ran, 1);
}

static void nest_task(int task, int thread, void *arg) {
    nest_ctx *c = arg;
    atomic_store(&c->nested_rc[task], pgd_threadpool_run(c->pool, 4, inner_task, c));
}

static void test_nested_refused(void) {
    pgd_threadpool *pool = NULL;
    REQUIRE(pgd_threadpool_create(3, &pool) == 0);
    nest_ctx c = {.pool = pool};
    CHECK_EQ_INT(pgd_threadpool_run(pool, 8, nest_task, &c), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(atomic_load(&c.nested_rc[i]), PGD_EINVAL);
    CHECK_EQ_INT(atomic_load(&c.inner_ran), 0);
    /* the pool still works afterwards, and a single-task run (inline path) is refused too */
    CHECK_EQ_INT(run_rounds(pool, 50, 0), 0);
    nest_ctx c1 = {.pool = pool};
    CHECK_EQ_INT(pgd_threadpool_run(pool, 1, nest_task, &c1), 0);
    CHECK_EQ_INT(atomic_load(&c1.nested_rc[0]), PGD_EINVAL);
    CHECK_EQ_INT(pgd_threadpool_run(pool, -1, inner_task, &c1), PGD_EINVAL);
    pgd_threadpool_destroy(pool);
}

static void conc_inner(int task, int thread, void *arg) {
    (void)arg;
}

/* A second thread calling run while a run is in progress is refused: the helper thread is
 * started (and joined) from inside a task, so the pool is certainly busy when it calls run. */
typedef struct conc2_ctx {
    pgd_threadpool *pool;
    atomic_int rc;
    atomic_int done;
} conc2_ctx;

static void *other2(void *arg) {
    conc2_ctx *c = arg;
    atomic_store(&c->rc, pgd_threadpool_run(c->pool, 3, conc_inner, NULL));
    atomic_store(&c->done, 1);
    return NULL;
}

static void conc2_task(int task, int thread, void *arg) {
    conc2_ctx *c = arg;
    if (task != 0) return;
    pthread_t th;
    if (pthread_create(&th, NULL, other2, c) != 0) return;
    pthread_join(th, NULL);
}

static void test_concurrent_refused(void) {
    pgd_threadpool *pool = NULL;
    REQUIRE(pgd_threadpool_create(2, &pool) == 0);
    conc2_ctx c = {.pool = pool, .rc = 1};
    CHECK_EQ_INT(pgd_threadpool_run(pool, 5, conc2_task, &c), 0);
    CHECK_EQ_INT(atomic_load(&c.done), 1);
    CHECK_EQ_INT(atomic_load(&c.rc), PGD_EINVAL);
    CHECK_EQ_INT(run_rounds(pool, 20, 0), 0);
    pgd_threadpool_destroy(pool);
}

static void test_create_destroy_idle(void) {
    for (int i = 0; i < 20; i++) {
        pgd_threadpool *pool = NULL;
        REQUIRE(pgd_threadpool_create(1 + i % 4, &pool) == 0);
        if (i % 3 == 1) CHECK_EQ_INT(run_rounds(pool, 10, 0), 0);
        if (i % 3 == 2) sleep_us(1000); /* workers have gone to sleep */
        pgd_threadpool_destroy(pool);   /* destroy while spinning or while blocked */
    }
    pgd_threadpool_destroy(NULL);
}

int main(void) {
    RUN(test_exactly_once);
    RUN(test_spans);
    RUN(test_default_size);
    RUN(test_parallel);
    RUN(test_nested_refused);
    RUN(test_concurrent_refused);
    RUN(test_create_destroy_idle);
    return test_summary();
}
