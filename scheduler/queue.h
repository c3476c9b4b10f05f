/*
 * scheduler/queue.h — the scheduler thread's inbox and outbox.
 *
 * Inbox (pgd__inbox): a mutex + condvar FIFO of messages {submit, abort} from any thread to
 * the scheduler thread. It assigns request ids under its lock, so an id is always in the queue
 * before anyone can know it (an abort can never overtake its submit), bounds the number of
 * requests that were submitted but not yet admitted (PGD_EFULL beyond max_waiting), and is
 * closed at shutdown (pushes then fail with PGD_ESHUTDOWN). The scheduler thread sleeps on its
 * condvar when it has nothing to do: no busy polling.
 *
 * Outbox (pgd__outbox): an intrusive multi-producer single-consumer queue (Vyukov's MPSC:
 * producers push with one atomic exchange and never block; the one consumer pops) of event
 * nodes, plus a notification: after posting a batch of events the producer calls
 * pgd__outbox_notify, which runs the wake-up callback (e.g. uv_async_send) and wakes a thread
 * blocked in pgd__outbox_wait. A pop may see the queue empty while a push is half done; that
 * push's producer notifies afterwards, so the consumer always gets another wake-up.
 *
 * Threading: inbox push/close from any thread, take from the scheduler thread only. Outbox push
 * and notify from any thread (the scheduler thread in practice), pop and wait from one consumer
 * thread at a time.
 * Lock order: inbox.mu and outbox.mu are leaves — no other lock is ever taken while holding
 * either, and they are never held together. The wake callback runs with no lock held.
 */
#ifndef PGD_SCHEDULER_QUEUE_H
#define PGD_SCHEDULER_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "scheduler/request.h"

/* ---- MPSC queue ---------------------------------------------------------------------------- */

typedef struct pgd_mpsc_node {
    _Atomic(struct pgd_mpsc_node *) next;
} pgd_mpsc_node;

typedef struct pgd_mpsc {
    _Atomic(pgd_mpsc_node *) head; /* producers push here */
    pgd_mpsc_node *tail;           /* the consumer pops here */
    pgd_mpsc_node stub;
} pgd_mpsc;

void pgd_mpsc_init(pgd_mpsc *q);
/* Any thread; never blocks. The node belongs to the queue until popped. */
void pgd_mpsc_push(pgd_mpsc *q, pgd_mpsc_node *n);
/* The consumer only. The oldest node, or NULL when empty (or a push is in progress). */
pgd_mpsc_node *pgd_mpsc_pop(pgd_mpsc *q);

/* ---- inbox --------------------------------------------------------------------------------- */

typedef enum { PGD__MSG_SUBMIT = 1, PGD__MSG_ABORT } pgd__msg_kind;

typedef struct pgd__msg {
    struct pgd__msg *next;
    pgd__msg_kind kind;
    uint64_t id;         /* SUBMIT: assigned by pgd__inbox_submit; ABORT: the request */
    pgd__req_spec *spec; /* SUBMIT: owned by the message until taken */
} pgd__msg;

typedef struct pgd__inbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pgd__msg *head, *tail;
    bool closed;
    uint64_t next_id;
    uint64_t n_submitted;        /* submits accepted (under mu) */
    _Atomic uint64_t n_admitted; /* of those, no longer waiting for first admission (published
                                    by the scheduler thread) */
    uint32_t max_waiting;
} pgd__inbox;

int pgd__inbox_init(pgd__inbox *q, uint32_t max_waiting);
void pgd__inbox_destroy(pgd__inbox *q); /* frees messages still queued */

/* Queue n submits at once, all or none: assigns ids[i] to msgs[i] (ids start at 1, in
 * order). PGD_EFULL when the n would take more than max_waiting requests waiting for
 * admission, PGD_ESHUTDOWN when closed; the messages stay the caller's on failure. Any
 * thread. */
int pgd__inbox_submit_n(pgd__inbox *q, pgd__msg *const *msgs, size_t n, uint64_t *ids);
/* pgd__inbox_submit_n of one message. */
int pgd__inbox_submit(pgd__inbox *q, pgd__msg *m, uint64_t *id);
/* Queue an abort. PGD_ESHUTDOWN when closed (the message stays the caller's). Any thread. */
int pgd__inbox_push(pgd__inbox *q, pgd__msg *m);
/* Close: later pushes fail; wakes the scheduler thread. Any thread. */
void pgd__inbox_close(pgd__inbox *q);
/* Scheduler thread: take every queued message (FIFO list, NULL if none). When `block` and
 * nothing is queued and the inbox is open, sleep until a push, a close or `deadline_ns`
 * (CLOCK_MONOTONIC; 0 = none). *closed reports whether the inbox is closed. */
pgd__msg *pgd__inbox_take(pgd__inbox *q, bool block, uint64_t deadline_ns, bool *closed);

/* ---- outbox -------------------------------------------------------------------------------- */

typedef struct pgd__outbox {
    pgd_mpsc q;
    pthread_mutex_t mu; /* guards n_notify / n_seen for pgd__outbox_wait */
    pthread_cond_t cv;
    uint64_t n_notify, n_seen;
    void (*wake)(void *ud);
    void *wake_ud;
} pgd__outbox;

int pgd__outbox_init(pgd__outbox *o, void (*wake)(void *), void *wake_ud);
/* Frees the nodes still queued with free_node (may be NULL when they are freed otherwise). */
void pgd__outbox_destroy(pgd__outbox *o, void (*free_node)(pgd_mpsc_node *));
void pgd__outbox_notify(pgd__outbox *o);
/* Consumer: true when notified since the last wait returned, waiting at most timeout_ms
 * (< 0: forever). */
bool pgd__outbox_wait(pgd__outbox *o, int timeout_ms);

#endif
