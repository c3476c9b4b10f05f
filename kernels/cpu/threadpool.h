/*
 * kernels/cpu/threadpool.h — a fixed pool of worker threads running one parallel-for at a time.
 *
 * The CPU forward pass calls pgd_threadpool_run() a few hundred times per step, so dispatch is
 * cheap: idle workers spin on an atomic generation counter for a short while (~100 µs), then
 * block on a condition variable; a run wakes the sleepers only when there are any. The calling
 * thread takes part in the work as thread 0.
 *
 * Work split: tasks are claimed dynamically (an atomic ticket), so which thread runs a task is
 * not deterministic; what a task computes must depend only on its task index (each output
 * element written by exactly one task, reductions inside a task in a fixed order). Then results
 * are identical for every pool size and every interleaving.
 *
 * Threading: one pgd_threadpool_run at a time per pool. Calling it again while a run is in
 * progress (from a task of that run, or from another thread) is a bug that is detected and
 * answered with PGD_EINVAL, not a deadlock. create/destroy from the owning thread only, and
 * destroy only while no run is in progress.
 */
#ifndef PGD_KERNELS_CPU_THREADPOOL_H
#define PGD_KERNELS_CPU_THREADPOOL_H

#include <stdint.h>

typedef struct pgd_threadpool pgd_threadpool;

/* A task: `task` in [0, n_tasks), `thread` in [0, pgd_threadpool_size(pool)) names the thread
 * running it (0 = the caller of pgd_threadpool_run), e.g. to index per-thread scratch. */
typedef void (*pgd_task_fn)(int task, int thread, void *ctx);

/* Number of CPUs this process may run on (affinity mask, else online CPUs); at least 1. */
int pgd_cpu_count(void);

/* Creates a pool of n_threads threads in total (the caller of run counts as one, so n_threads-1
 * workers are started); n_threads <= 0 means pgd_cpu_count(). *out is set on success; the
 * caller destroys it with pgd_threadpool_destroy. PGD_ENOMEM / PGD_EINVAL (n_threads > 1024) /
 * PGD_EIO (thread creation failed). */
int pgd_threadpool_create(int n_threads, pgd_threadpool **out);

/* Stops and joins the workers and frees the pool. NULL is a no-op. Not during a run. */
void pgd_threadpool_destroy(pgd_threadpool *pool);

/* Threads in the pool, counting the caller; 1 for NULL. */
int pgd_threadpool_size(const pgd_threadpool *pool);

/* Runs fn(i, thread, ctx) exactly once for every i in [0, n_tasks) and returns when all have
 * finished (their writes are then visible to the caller). pool == NULL runs the tasks in order
 * on the calling thread. Returns 0, or PGD_EINVAL for n_tasks < 0 or a nested/concurrent run
 * (nothing is run then). */
int pgd_threadpool_run(pgd_threadpool *pool, int n_tasks, pgd_task_fn fn, void *ctx);

/* One parallel-for of a pgd_threadpool_run_spans call. */
typedef struct pgd_task_span {
    pgd_task_fn fn;
    void *ctx;
    int n_tasks;
} pgd_task_span;

/* Several parallel-fors as one run (one fork/join): fn_j(i, thread, ctx_j) exactly once for
 * every span j < n_spans and i in [0, n_tasks_j), spans side by side in the task order. Returns
 * as pgd_threadpool_run, and PGD_EINVAL for a negative n_tasks or more than INT_MAX in all. */
int pgd_threadpool_run_spans(pgd_threadpool *pool, const pgd_task_span *spans, int n_spans);

#endif
