/*
 * scheduler/engine.h — the scheduler thread and the in-process API the server, the bench and
 * the tests use: submit requests, abort them, and receive their events.
 *
 * An engine owns an llm (model, tokenizer, backend, KV pool) and one scheduler thread that runs
 * pgd_sched (scheduler/sched.h) in a loop: take the inbox (submits, aborts), step, post events,
 * and sleep on the inbox's condvar when there is nothing to do (no busy polling). Nothing but
 * that thread touches the llm's mutable state (backend, pool, sequences).
 *
 * Events: the scheduler thread pushes them onto an MPSC outbox and then calls the `wake`
 * callback given at create time (once per batch of events, e.g. uv_async_send from the HTTP
 * loop); the consumer calls pgd_engine_drain to receive them. The event contract is in
 * scheduler/request.h: TOKEN events of each choice in order, one FINISH per choice (or one
 * ERROR), the last with `done`.
 *
 * Threading — which thread may call what:
 *   pgd_engine_create, pgd_engine_shutdown, pgd_engine_destroy: the owner (one thread, not the
 *       scheduler thread, not from inside an event callback or the wake callback);
 *   pgd_engine_submit, pgd_engine_abort, pgd_engine_get_stats, pgd_engine_limits: any thread;
 *   pgd_engine_drain, pgd_engine_wait: the consumer thread (one at a time);
 *   pgd_engine_llm: any thread, for the llm's immutable parts only (tokenizer, chat template,
 *       n_ctx, n_vocab) — e.g. to tokenize on a thread pool;
 *   the wake callback runs on the scheduler thread with no lock held: it must be quick and must
 *       not call back into the engine except pgd_engine_submit / pgd_engine_abort.
 * Lock order: the engine's locks are the inbox's mutex, the outbox's mutex (scheduler/queue.h)
 * and stats_mu; all three are leaves, never held together.
 */
#ifndef PGD_SCHEDULER_ENGINE_H
#define PGD_SCHEDULER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/llm.h"
#include "scheduler/request.h"
#include "scheduler/sched.h"

typedef struct pgd_engine_config {
    pgd_sched_config sched; /* budgets, max_waiting, debug checks */
    void (*wake)(void *ud); /* events are ready (scheduler thread); may be NULL */
    void *wake_ud;
} pgd_engine_config;

void pgd_engine_config_default(pgd_engine_config *c);

typedef struct pgd_engine pgd_engine;

/* Start the scheduler thread over `llm`. On success the engine owns llm (pgd_engine_destroy
 * closes it); on failure the caller still does. 0 or PGD_ENOMEM. */
int pgd_engine_create(pgd_llm *llm, const pgd_engine_config *c, pgd_engine **out);

/* Queue a request (copied; the caller may free its arrays at once). *id gets its id (> 0).
 * 0; PGD_EINVAL with a detail (pgd_error_detail on the calling thread) for a bad request or one
 * that can never fit the KV cache; PGD_EFULL when max_waiting requests are already waiting
 * (answer 429); PGD_ESHUTDOWN after shutdown began; PGD_ENOMEM. Any thread. */
int pgd_engine_submit(pgd_engine *e, const pgd_request *r, uint64_t *id);

/* Ask for the request's end (client gone, timeout): from any state; its blocks are freed at the
 * scheduler's next step boundary and each unfinished choice gets FINISH(abort). Unknown or
 * finished ids are ignored. 0, PGD_ESHUTDOWN or PGD_ENOMEM. Any thread. */
int pgd_engine_abort(pgd_engine *e, uint64_t id);

/* Consumer: call fn for every event posted so far, oldest first; each event is freed when fn
 * returns. Returns how many. */
size_t pgd_engine_drain(pgd_engine *e, pgd_event_fn fn, void *ud);

/* Consumer: wait until events may be ready (a notification since the last wait returned), at
 * most timeout_ms (< 0: no limit). true when notified. For consumers without an event loop
 * (the bench, tests); then drain. */
bool pgd_engine_wait(pgd_engine *e, int timeout_ms);

/* A snapshot, refreshed by the scheduler thread after every step and inbox drain. Any thread. */
void pgd_engine_get_stats(pgd_engine *e, pgd_engine_stats *out);

/* The limits submit checks requests against (n_ctx, vocabulary, KV capacity, max n). */
void pgd_engine_limits(const pgd_engine *e, pgd__req_limits *out);
const pgd_sched_config *pgd_engine_config_of(const pgd_engine *e); /* defaults resolved */

const pgd_llm *pgd_engine_llm(const pgd_engine *e);

/* Stop accepting (submits fail with PGD_ESHUTDOWN), let in-flight and queued requests run for
 * up to drain_ms milliseconds (0: none; < 0: until all are done), abort what is left (FINISH
 * abort events), post the last events and join the thread. Idempotent. Events stay drainable
 * afterwards. Owner thread. */
void pgd_engine_shutdown(pgd_engine *e, int64_t drain_ms);

/* Shutdown(0) if still running, free undrained events, close the llm. NULL is fine. */
void pgd_engine_destroy(pgd_engine *e);

#endif
