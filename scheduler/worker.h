/*
 * scheduler/worker.h — the scheduler thread and the in-process API the server, the bench and
 * the tests use: submit requests, abort them, and receive their events.
 *
 * A worker owns a runner (backend, weights, KV memory) and one scheduler thread that runs
 * pgd_sched (scheduler/sched.h, which owns the KV pool and the sequences) in a loop: take the
 * inbox (submits, aborts), step, post events, and sleep on the inbox's condvar when there is
 * nothing to do (no busy polling). Nothing but that thread touches the runner or the scheduler.
 * What other threads need to know about them (limits, capabilities, the effective
 * configuration) is copied at create time; live numbers come from the stats snapshot.
 *
 * Events: the scheduler thread pushes them onto an MPSC outbox and then calls the `wake`
 * callback given at create time (once per batch of events, e.g. uv_async_send from the HTTP
 * loop); the consumer calls pgd_worker_drain to receive them. The event contract is in
 * scheduler/request.h: TOKEN events of each choice in order, one FINISH per choice (or one
 * ERROR), the last with `done`.
 *
 * Threading — which thread may call what:
 *   pgd_worker_create, pgd_worker_shutdown, pgd_worker_destroy: the owner (one thread, not the
 *       scheduler thread, not from inside an event callback or the wake callback);
 *   pgd_worker_submit, pgd_worker_abort, pgd_worker_get_stats, pgd_worker_lost,
 *       pgd_worker_limits, pgd_worker_caps, pgd_worker_config_of: any thread;
 *   pgd_worker_drain, pgd_worker_wait: the consumer thread (one at a time);
 *   the wake callback runs on the scheduler thread with no lock held: it must be quick and must
 *       not call back into the worker except pgd_worker_submit / pgd_worker_abort.
 * The model info the runner was made from (engine/info.h) is immutable: any thread may read it
 * (e.g. to tokenize on a thread pool); it must outlive the worker.
 * Lock order: the worker's locks are the inbox's mutex, the outbox's mutex (scheduler/queue.h)
 * and stats_mu; all three are leaves, never held together.
 */
#ifndef PGD_SCHEDULER_WORKER_H
#define PGD_SCHEDULER_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/runner.h"
#include "scheduler/request.h"
#include "scheduler/sched.h"

typedef struct pgd_worker_config {
    pgd_sched_config sched; /* budgets, max_waiting, debug checks */
    void (*wake)(void *ud); /* events are ready (scheduler thread); may be NULL */
    void *wake_ud;
} pgd_worker_config;

void pgd_worker_config_default(pgd_worker_config *c);

typedef struct pgd_worker pgd_worker;

/* Start the scheduler thread over `runner`. On success the worker owns the runner
 * (pgd_worker_destroy destroys it); on failure the caller still does. 0, PGD_EINVAL (a bad
 * scheduler configuration, see pgd_sched_create) or PGD_ENOMEM. */
int pgd_worker_create(pgd_runner *runner, const pgd_worker_config *c, pgd_worker **out);

/* Queue a request (copied; the caller may free its arrays at once). *id gets its id (> 0).
 * The request is checked here (pgd_request_check): 0; PGD_EINVAL with a detail and a param
 * (pgd_error_detail, pgd_error_param on the calling thread) for a bad request or one that can
 * never fit the KV cache; PGD_EFULL when max_waiting requests are already waiting
 * (the server answers 503); PGD_ESHUTDOWN after shutdown began; PGD_EDEVLOST once the device
 * is lost (pgd_worker_lost); PGD_ENOMEM. Any thread. */
int pgd_worker_submit(pgd_worker *e, const pgd_request *r, uint64_t *id);

/* Queue n requests as one unit (a legacy completion with several prompts), all or none:
 * either every one is queued (ids[i] for rs[i]) or none is and nothing needs aborting.
 * Errors as pgd_worker_submit, where PGD_EFULL means the n do not fit among the waiting
 * requests now, and PGD_EINVAL (param "prompt") also means n > max_waiting: such a group
 * could never be queued, whatever the load. Any thread. */
int pgd_worker_submit_n(pgd_worker *e, const pgd_request *rs, size_t n, uint64_t *ids);

/* Ask for the request's end (client gone, timeout): from any state; its blocks are freed at the
 * scheduler's next step boundary and each unfinished choice gets FINISH(abort). Unknown or
 * finished ids are ignored. 0, PGD_ESHUTDOWN or PGD_ENOMEM. Any thread. */
int pgd_worker_abort(pgd_worker *e, uint64_t id);

/* Consumer: call fn for every event posted so far, oldest first; each event is freed when fn
 * returns. Returns how many. */
size_t pgd_worker_drain(pgd_worker *e, pgd_event_fn fn, void *ud);

/* Consumer: wait until events may be ready (a notification since the last wait returned), at
 * most timeout_ms (< 0: no limit). true when notified. For consumers without an event loop
 * (the bench, tests); then drain. */
bool pgd_worker_wait(pgd_worker *e, int timeout_ms);

/* Whether the device failed for good (a step returned PGD_EDEVLOST): then every request it had
 * got an ERROR event, every later submit fails with PGD_EDEVLOST, and *why (if not NULL) says
 * what failed ("the device failed: ..."; the worker's storage, for its life). Any thread. */
bool pgd_worker_lost(const pgd_worker *e, const char **why);
/* A snapshot, refreshed by the scheduler thread after every step and inbox drain. Any thread. */
void pgd_worker_get_stats(pgd_worker *e, pgd_sched_stats *out);

/* The limits submit checks requests against (n_ctx, vocabulary, KV capacity, max n). */
void pgd_worker_limits(const pgd_worker *e, pgd_req_limits *out);
const pgd_sched_config *pgd_worker_config_of(const pgd_worker *e); /* defaults resolved */
/* The runner's capabilities (device kind, KV blocks and dtype, step size), copied at create. */
const pgd_backend_caps *pgd_worker_caps(const pgd_worker *e);

/* Stop accepting (submits fail with PGD_ESHUTDOWN), let in-flight and queued requests run for
 * up to drain_ms milliseconds (0: none; < 0: until all are done), abort what is left (FINISH
 * abort events), post the last events and join the thread. Idempotent. Events stay drainable
 * afterwards. Owner thread. */
void pgd_worker_shutdown(pgd_worker *e, int64_t drain_ms);

/* Shutdown(0) if still running, free undrained events, destroy the runner. NULL is fine. */
void pgd_worker_destroy(pgd_worker *e);

#endif
