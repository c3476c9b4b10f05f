/*
 * kernels/cpu/threadpool.c — the fixed worker pool behind pgd_threadpool_run.
 *
 * Owns: the worker threads, one mutex and two condition variables (used only on the slow,
 * blocking paths), and the job slot (fn, ctx, n_tasks) of the current run.
 *
 * Protocol (one run = one generation g):
 *   caller: ticket = (g << 32 | 0), done = 0, then the job slot (release stores), then
 *           gen = g;
 *           wakes blocked workers if n_sleeping > 0; claims tasks itself; waits for done ==
 *           n_tasks (spin, then block on done_cv).
 *   worker: waits for gen != last seen (spin, then block on wake_cv), reads the job slot,
 *           claims task indices with a CAS on `ticket` that succeeds only while the ticket's
 *           generation is still g, runs them, increments done (release); the one that
 *           completes the job signals done_cv if the caller is blocked.
 * Invariants: a task is claimed at most once (the CAS), and only under the generation whose
 * job slot the worker read: the ticket leaves generation g before any slot value of g+1 is
 * stored (and those stores are releases the worker's loads acquire), so a worker holding g
 * that read any newer slot value fails its CAS; and a slot is rewritten only after every task
 * of the previous job has completed, which happens after the reads of any worker that claimed
 * one. The caller returns only when done ==
 * n_tasks, so a late worker never touches the caller's ctx. Sleep/wake races use the
 * store-then-load (Dekker) pattern on seq_cst atomics: the sleeper publishes n_sleeping /
 * caller_sleeping before re-checking the condition under the mutex, the waker publishes the
 * condition before reading the sleeper count, so one of them always sees the other.
 * Threading: see threadpool.h. Lock order: only `mu`, never held while running tasks.
 */
#include "kernels/cpu/threadpool.h"

#include "common/clock.h"
#include "common/error.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TP_MAX_THREADS 1024
#define TP_SPIN_NS     100000 /* how long an idle thread spins before blocking */
#define TP_SPIN_CHECK  64     /* pause iterations between clock reads */

struct tp_worker {
    pgd_threadpool *pool;
    int index; /* 1 .. n_threads-1 */
    pthread_t thread;
    bool started;
};

struct pgd_threadpool {
    int n_threads;
    struct tp_worker *workers; /* [n_threads - 1] */

    /* job slot, written by the caller before publishing gen */
    _Atomic(pgd_task_fn) fn;
    _Atomic(void *) ctx;
    atomic_int n_tasks;

    alignas(64) atomic_uint gen;              /* generation of the published job */
    atomic_int stop;                          /* destroy requested */
    alignas(64) atomic_uint_least64_t ticket; /* (gen << 32) | next unclaimed task */
    alignas(64) atomic_int done;              /* tasks of the current job finished */
    alignas(64) atomic_int busy;              /* a run is in progress */
    atomic_int n_sleeping;                    /* workers blocked on wake_cv */
    atomic_int caller_sleeping;               /* the caller is blocked on done_cv */

    pthread_mutex_t mu;
    pthread_cond_t wake_cv; /* workers: a new generation or stop */
    pthread_cond_t done_cv; /* caller: done == n_tasks */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static int64_t now_ns(void) {
    return (int64_t)pgd_now_ns();
}

int pgd_cpu_count(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > TP_MAX_THREADS ? TP_MAX_THREADS : n) : 1;
}

int pgd_threadpool_size(const pgd_threadpool *pool) {
    return pool ? pool->n_threads : 1;
}

/* Claims and runs tasks of generation g until none is left. */
static void tp_work(pgd_threadpool *pool, uint32_t g, int thread) {
    pgd_task_fn fn = atomic_load_explicit(&pool->fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&pool->ctx, memory_order_acquire);
    uint32_t n = (uint32_t)atomic_load_explicit(&pool->n_tasks, memory_order_acquire);
    uint64_t t = atomic_load_explicit(&pool->ticket, memory_order_relaxed);
    for (;;) {
        if ((uint32_t)(t >> 32) != g || (uint32_t)t >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&pool->ticket, &t, t + 1, memory_order_acquire,
                                                   memory_order_relaxed))
            continue; /* t was reloaded */
        fn((int)(uint32_t)t, thread, ctx);
        /* seq_cst: Dekker with caller_sleeping */
        if (atomic_fetch_add(&pool->done, 1) + 1 == (int)n && thread != 0 &&
            atomic_load(&pool->caller_sleeping)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->mu);
        }
        t = atomic_load_explicit(&pool->ticket, memory_order_relaxed);
    }
}

/* Waits until gen != seen or stop; returns the generation seen. */
static uint32_t tp_wait_job(pgd_threadpool *pool, uint32_t seen) {
    int64_t deadline = 0;
    for (int i = 1;; i++) {
        uint32_t g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&pool->stop, memory_order_relaxed)) return g;
        cpu_relax();
        if (i % TP_SPIN_CHECK == 0) {
            int64_t t = now_ns();
            if (!deadline)
                deadline = t + TP_SPIN_NS;
            else if (t >= deadline)
                break;
        }
    }
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add(&pool->n_sleeping, 1);
    uint32_t g;
    while ((g = atomic_load(&pool->gen)) == seen && !atomic_load(&pool->stop))
        pthread_cond_wait(&pool->wake_cv, &pool->mu);
    atomic_fetch_sub(&pool->n_sleeping, 1);
    pthread_mutex_unlock(&pool->mu);
    return g;
}

static void *tp_worker_main(void *arg) {
    struct tp_worker *w = arg;
    pgd_threadpool *pool = w->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = tp_wait_job(pool, seen);
        if (atomic_load(&pool->stop)) break;
        seen = g;
        tp_work(pool, g, w->index);
    }
    return NULL;
}

static void tp_stop_and_join(pgd_threadpool *pool) {
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    atomic_fetch_add(&pool->gen, 1);
    pthread_cond_broadcast(&pool->wake_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads - 1; i++)
        if (pool->workers[i].started) pthread_join(pool->workers[i].thread, NULL);
}

int pgd_threadpool_create(int n_threads, pgd_threadpool **out) {
    *out = NULL;
    if (n_threads <= 0) n_threads = pgd_cpu_count();
    if (n_threads > TP_MAX_THREADS)
        return pgd_error_set(PGD_EINVAL, "threadpool: %d threads (max %d)", n_threads,
                             TP_MAX_THREADS);
    int rc = PGD_ENOMEM;
    pgd_threadpool *pool = calloc(1, sizeof(*pool));
    if (!pool) return PGD_ENOMEM;
    pool->n_threads = n_threads;
    bool have_mu = false, have_wake = false, have_done = false;
    if (pthread_mutex_init(&pool->mu, NULL) != 0) goto fail;
    have_mu = true;
    if (pthread_cond_init(&pool->wake_cv, NULL) != 0) goto fail;
    have_wake = true;
    if (pthread_cond_init(&pool->done_cv, NULL) != 0) goto fail;
    have_done = true;
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) goto fail;
    }
    for (int i = 0; i < n_threads - 1; i++) {
        struct tp_worker *w = &pool->workers[i];
        w->pool = pool;
        w->index = i + 1;
        if (pthread_create(&w->thread, NULL, tp_worker_main, w) != 0) {
            rc = pgd_error_set(PGD_EIO, "threadpool: cannot start worker %d of %d", i + 1,
                               n_threads - 1);
            goto fail;
        }
        w->started = true;
#ifdef __GLIBC__
        char name[16];
        snprintf(name, sizeof(name), "pgd-cpu-%d", w->index);
        pthread_setname_np(w->thread, name);
#endif
    }
    *out = pool;
    return 0;
fail:
    if (pool->workers) {
        tp_stop_and_join(pool);
        free(pool->workers);
    }
    if (have_done) pthread_cond_destroy(&pool->done_cv);
    if (have_wake) pthread_cond_destroy(&pool->wake_cv);
    if (have_mu) pthread_mutex_destroy(&pool->mu);
    free(pool);
    return rc;
}

void pgd_threadpool_destroy(pgd_threadpool *pool) {
    if (!pool) return;
    PGD_ASSERT(!atomic_load(&pool->busy));
    tp_stop_and_join(pool);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->wake_cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool->workers);
    free(pool);
}

int pgd_threadpool_run(pgd_threadpool *pool, int n_tasks, pgd_task_fn fn, void *ctx) {
    if (n_tasks < 0) return pgd_error_set(PGD_EINVAL, "threadpool: n_tasks %d < 0", n_tasks);
    if (!pool) {
        for (int i = 0; i < n_tasks; i++) fn(i, 0, ctx);
        return 0;
    }
    if (atomic_exchange(&pool->busy, 1))
        return pgd_error_set(PGD_EINVAL, "threadpool: nested or concurrent run");
    if (n_tasks <= 1 || pool->n_threads == 1) {
        for (int i = 0; i < n_tasks; i++) fn(i, 0, ctx);
        atomic_store(&pool->busy, 0);
        return 0;
    }

    /* publish the job */
    uint32_t g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
    /* the ticket moves to g first: a worker still holding an older generation that reads any
     * of the new slot values (release/acquire) then fails its claim */
    atomic_store_explicit(&pool->ticket, (uint64_t)g << 32, memory_order_relaxed);
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->fn, fn, memory_order_release);
    atomic_store_explicit(&pool->ctx, ctx, memory_order_release);
    atomic_store_explicit(&pool->n_tasks, n_tasks, memory_order_release);
    atomic_store(&pool->gen, g); /* seq_cst: release of the slot + Dekker with n_sleeping */
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->wake_cv);
        pthread_mutex_unlock(&pool->mu);
    }

    tp_work(pool, g, 0);

    /* wait for the tasks claimed by workers */
    int64_t deadline = 0;
    for (int i = 1; atomic_load_explicit(&pool->done, memory_order_acquire) < n_tasks; i++) {
        cpu_relax();
        if (i % TP_SPIN_CHECK == 0) {
            int64_t t = now_ns();
            if (!deadline) {
                deadline = t + TP_SPIN_NS;
            } else if (t >= deadline) {
                pthread_mutex_lock(&pool->mu);
                atomic_store(&pool->caller_sleeping, 1);
                while (atomic_load(&pool->done) < n_tasks)
                    pthread_cond_wait(&pool->done_cv, &pool->mu);
                atomic_store(&pool->caller_sleeping, 0);
                pthread_mutex_unlock(&pool->mu);
                break;
            }
        }
    }
    atomic_store(&pool->busy, 0);
    return 0;
}

/* Task `task` of the run over the spans at arg: the span it falls in, its index there. */
static void span_task(int task, int thread, void *arg) {
    const pgd_task_span *s = arg;
    while (task >= s->n_tasks) task -= s++->n_tasks;
    s->fn(task, thread, s->ctx);
}

int pgd_threadpool_run_spans(pgd_threadpool *pool, const pgd_task_span *spans, int n_spans) {
    int64_t total = 0;
    for (int j = 0; j < n_spans; j++) {
        if (spans[j].n_tasks < 0)
            return pgd_error_set(PGD_EINVAL, "threadpool: span %d has %d tasks", j,
                                 spans[j].n_tasks);
        total += spans[j].n_tasks;
    }
    if (total > INT_MAX) return pgd_error_set(PGD_EINVAL, "threadpool: too many tasks");
    if (n_spans == 1) return pgd_threadpool_run(pool, spans[0].n_tasks, spans[0].fn, spans[0].ctx);
    return pgd_threadpool_run(pool, (int)total, span_task, (void *)spans);
}
