/*
 * scheduler/queue.c — inbox (mutex + condvar FIFO) and outbox (Vyukov MPSC queue plus a
 * notification) of the scheduler thread. See queue.h for the contracts and the lock order.
 */
#include "scheduler/queue.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"

/* ---- MPSC ---------------------------------------------------------------------------------- */

void pgd_mpsc_init(pgd_mpsc *q) {
    atomic_store_explicit(&q->stub.next, NULL, memory_order_relaxed);
    atomic_store_explicit(&q->head, &q->stub, memory_order_relaxed);
    q->tail = &q->stub;
}

void pgd_mpsc_push(pgd_mpsc *q, pgd_mpsc_node *n) {
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    pgd_mpsc_node *prev = atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
    /* Between the exchange and this store the list is cut at prev: pop sees it as empty. */
    atomic_store_explicit(&prev->next, n, memory_order_release);
}

pgd_mpsc_node *pgd_mpsc_pop(pgd_mpsc *q) {
    pgd_mpsc_node *tail = q->tail;
    pgd_mpsc_node *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (!next) return NULL;
        q->tail = next;
        tail = next;
        next = atomic_load_explicit(&next->next, memory_order_acquire);
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    if (tail != atomic_load_explicit(&q->head, memory_order_acquire)) return NULL; /* mid-push */
    pgd_mpsc_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static int init_cond_monotonic(pthread_cond_t *cv) {
    pthread_condattr_t a;
    if (pthread_condattr_init(&a)) return PGD_ENOMEM;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc ? PGD_ENOMEM : 0;
}

static struct timespec ns_to_ts(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    return ts;
}

/* ---- inbox --------------------------------------------------------------------------------- */

int pgd__inbox_init(pgd__inbox *q, uint32_t max_waiting) {
    q->head = q->tail = NULL;
    q->closed = false;
    q->next_id = 1;
    q->n_submitted = 0;
    atomic_init(&q->n_admitted, 0);
    q->max_waiting = max_waiting;
    if (pthread_mutex_init(&q->mu, NULL)) return PGD_ENOMEM;
    if (init_cond_monotonic(&q->cv)) {
        pthread_mutex_destroy(&q->mu);
        return PGD_ENOMEM;
    }
    return 0;
}

void pgd__inbox_destroy(pgd__inbox *q) {
    for (pgd__msg *m = q->head, *next; m; m = next) {
        next = m->next;
        pgd__request_free(m->spec);
        free(m);
    }
    q->head = q->tail = NULL;
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

static void append_locked(pgd__inbox *q, pgd__msg *m) {
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    pthread_cond_signal(&q->cv);
}

int pgd__inbox_submit_n(pgd__inbox *q, pgd__msg *const *msgs, size_t n, uint64_t *ids) {
    int rc = 0;
    pthread_mutex_lock(&q->mu);
    uint64_t waiting = q->n_submitted - atomic_load_explicit(&q->n_admitted, memory_order_acquire);
    if (q->closed) {
        rc = pgd_error_set(PGD_ESHUTDOWN, "the engine is shutting down");
    } else if (q->max_waiting && waiting + n > q->max_waiting) {
        rc = pgd_error_set(PGD_EFULL, "too many requests waiting (%llu); try again later",
                           (unsigned long long)waiting);
    } else {
        for (size_t i = 0; i < n; i++) {
            msgs[i]->id = ids[i] = q->next_id++;
            q->n_submitted++;
            append_locked(q, msgs[i]);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int pgd__inbox_submit(pgd__inbox *q, pgd__msg *m, uint64_t *id) {
    return pgd__inbox_submit_n(q, &m, 1, id);
}

int pgd__inbox_push(pgd__inbox *q, pgd__msg *m) {
    int rc = 0;
    pthread_mutex_lock(&q->mu);
    if (q->closed)
        rc = pgd_error_set(PGD_ESHUTDOWN, "the engine is shutting down");
    else
        append_locked(q, m);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void pgd__inbox_close(pgd__inbox *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

pgd__msg *pgd__inbox_take(pgd__inbox *q, bool block, uint64_t deadline_ns, bool *closed) {
    pthread_mutex_lock(&q->mu);
    if (block) {
        struct timespec ts = ns_to_ts(deadline_ns);
        while (!q->head && !q->closed) {
            if (!deadline_ns) {
                pthread_cond_wait(&q->cv, &q->mu);
            } else if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT) {
                break;
            }
        }
    }
    pgd__msg *m = q->head;
    q->head = q->tail = NULL;
    *closed = q->closed;
    pthread_mutex_unlock(&q->mu);
    return m;
}

/* ---- outbox -------------------------------------------------------------------------------- */

int pgd__outbox_init(pgd__outbox *o, void (*wake)(void *), void *wake_ud) {
    pgd_mpsc_init(&o->q);
    o->n_notify = o->n_seen = 0;
    o->wake = wake;
    o->wake_ud = wake_ud;
    if (pthread_mutex_init(&o->mu, NULL)) return PGD_ENOMEM;
    if (init_cond_monotonic(&o->cv)) {
        pthread_mutex_destroy(&o->mu);
        return PGD_ENOMEM;
    }
    return 0;
}

void pgd__outbox_destroy(pgd__outbox *o, void (*free_node)(pgd_mpsc_node *)) {
    pgd_mpsc_node *n;
    while ((n = pgd_mpsc_pop(&o->q)))
        if (free_node) free_node(n);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
}

void pgd__outbox_notify(pgd__outbox *o) {
    pthread_mutex_lock(&o->mu);
    o->n_notify++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (o->wake) o->wake(o->wake_ud);
}

bool pgd__outbox_wait(pgd__outbox *o, int timeout_ms) {
    pthread_mutex_lock(&o->mu);
    if (o->n_seen == o->n_notify) {
        if (timeout_ms < 0) {
            while (o->n_seen == o->n_notify) pthread_cond_wait(&o->cv, &o->mu);
        } else {
            uint64_t dl = pgd_now_ns() + (uint64_t)timeout_ms * 1000000ull;
            struct timespec ts = ns_to_ts(dl);
            while (o->n_seen == o->n_notify)
                if (pthread_cond_timedwait(&o->cv, &o->mu, &ts) == ETIMEDOUT) break;
        }
    }
    bool got = o->n_seen != o->n_notify;
    o->n_seen = o->n_notify;
    pthread_mutex_unlock(&o->mu);
    return got;
}
