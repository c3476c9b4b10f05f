/*
 * scheduler/worker.c — the scheduler thread around pgd_sched, and the thread-safe API (see
 * worker.h for who may call what and the lock order).
 *
 * Owns: the runner (destroyed last), the pgd_sched, the inbox, the outbox and its undrained
 * event nodes, the stats snapshot, and copies of the limits, capabilities and configuration.
 * Invariants: only the scheduler thread calls into the runner and the sched while it runs;
 * after the join, only the owner does (destroy).
 */
#include "scheduler/worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "scheduler/queue.h"

typedef struct ev_node {
    pgd_mpsc_node link;
    pgd_event ev;
    pgd_sample_result lp;
    _Alignas(pgd_sample_result) char data[]; /* prompt logprobs [n_lp], their ranks [n_lp], an
                                                embedding [n_embd], text, NUL, message, NUL */
} ev_node;

struct pgd_worker {
    pgd_runner *runner;
    pgd_sched *sched;
    pgd_worker_config cfg; /* sched part resolved */
    pgd_req_limits lim;
    pgd_backend_caps caps;
    pgd__inbox inbox;
    pgd__outbox outbox;
    pthread_t thread;
    bool started, joined;
    uint64_t drain_deadline_ns; /* written before the inbox closes; 0 = abort at once */
    bool posted;                /* scheduler thread: events pushed since the last notify */
    pthread_mutex_t stats_mu;
    pgd_sched_stats stats;      /* guarded by stats_mu */
    _Atomic uint64_t n_refused; /* submits refused on the calling thread */
    char lost_msg[400];         /* why the device is lost: written once, before `lost` */
    _Atomic bool lost;          /* the device failed for good (PGD_EDEVLOST) */
};

void pgd_worker_config_default(pgd_worker_config *c) {
    memset(c, 0, sizeof *c);
    pgd_sched_config_default(&c->sched);
}

/* ---- scheduler thread ------------------------------------------------------------------- */

/* pgd_sched's emit callback: copy the event into a node and push it to the outbox. */
static void sink(const pgd_event *ev, void *ud) {
    pgd_worker *e = ud;
    size_t tl = ev->text ? ev->text_len : 0, ml = ev->message ? strlen(ev->message) : 0;
    size_t pl = ev->prompt_lp ? ev->n_lp * sizeof *ev->prompt_lp : 0;
    size_t rl = ev->prompt_rank ? ev->n_lp * sizeof *ev->prompt_rank : 0;
    size_t el = ev->embedding ? ev->n_embd * sizeof *ev->embedding : 0; /* 4-byte aligned */
    ev_node *n = malloc(sizeof *n + pl + rl + el + tl + ml + 2);
    PGD_ASSERT(n); /* an event cannot be dropped without breaking the stream's contract */
    n->ev = *ev;
    if (pl) {
        memcpy(n->data, ev->prompt_lp, pl);
        n->ev.prompt_lp = (const pgd_sample_result *)(void *)n->data;
    }
    if (rl) {
        memcpy(n->data + pl, ev->prompt_rank, rl);
        n->ev.prompt_rank = (const int32_t *)(void *)(n->data + pl);
    }
    if (el) {
        memcpy(n->data + pl + rl, ev->embedding, el);
        n->ev.embedding = (const float *)(void *)(n->data + pl + rl);
    }
    char *text = n->data + pl + rl + el;
    memcpy(text, tl ? ev->text : "", tl);
    text[tl] = '\0';
    n->ev.text = text;
    n->ev.text_len = tl;
    if (ev->message) {
        memcpy(text + tl + 1, ev->message, ml + 1);
        n->ev.message = text + tl + 1;
    }
    if (ev->logprobs) {
        n->lp = *ev->logprobs;
        n->ev.logprobs = &n->lp;
    }
    pgd_mpsc_push(&e->outbox.q, &n->link);
    e->posted = true;
}

static void flush_events(pgd_worker *e) {
    if (!e->posted) return;
    e->posted = false;
    pgd__outbox_notify(&e->outbox);
}

static void publish(pgd_worker *e) {
    atomic_store_explicit(&e->inbox.n_admitted, pgd_sched_n_resolved(e->sched),
                          memory_order_release);
    pgd_sched_stats st;
    pgd_sched_get_stats(e->sched, &st);
    pthread_mutex_lock(&e->stats_mu);
    e->stats = st;
    pthread_mutex_unlock(&e->stats_mu);
}

static void handle_messages(pgd_worker *e, pgd__msg *m) {
    for (pgd__msg *next; m; m = next) {
        next = m->next;
        if (m->kind == PGD__MSG_SUBMIT) {
            void *user = m->spec->user;
            uint32_t n_prompt = m->spec->n_prompt;
            int rc = pgd_sched_submit_spec(e->sched, m->id, m->spec); /* takes spec */
            if (rc) {
                /* Checked at submit, so only a lack of memory gets here: the caller was told
                 * 0, so the answer is an ERROR event. */
                pgd_event ev = {.kind = PGD_EVENT_ERROR,
                                .id = m->id,
                                .user = user,
                                .t_ns = pgd_now_ns(),
                                .done = true,
                                .usage = {.prompt_tokens = n_prompt},
                                .error = rc,
                                .message = pgd_error_detail()};
                sink(&ev, e);
            }
        } else {
            pgd_sched_abort(e->sched, m->id); /* unknown ids: finished already */
        }
        free(m);
    }
}

static void *worker_main(void *arg) {
    pgd_worker *e = arg;
    bool closed = false, stalled = false;
    for (;;) {
        bool work = pgd_sched_has_work(e->sched);
        /* Sleep when idle; when the last step could not run anything (cannot happen with
         * admission checks in place, but never spin), nap until a message or 10 ms. */
        bool block = !closed && (!work || stalled);
        uint64_t deadline = stalled ? pgd_now_ns() + 10000000ull : 0;
        pgd__msg *m = pgd__inbox_take(&e->inbox, block, deadline, &closed);
        handle_messages(e, m);
        work = pgd_sched_has_work(e->sched);
        if (closed && (!work || pgd_now_ns() >= e->drain_deadline_ns)) {
            pgd_sched_abort_all(e->sched);
            publish(e);
            flush_events(e);
            break;
        }
        if (closed && stalled) { /* draining, but nothing could run: do not spin */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        stalled = false;
        if (atomic_load_explicit(&e->lost, memory_order_relaxed)) {
            /* submits that were in the inbox when the device was lost: nothing can run them */
            pgd_sched_fail_all(e->sched, PGD_EDEVLOST, e->lost_msg);
        } else if (work) {
            pgd_sched_step_info info = {0};
            int rc = pgd_sched_step(e->sched, &info);
            if (rc) /* the step's requests got ERROR events; the log says why */
                fprintf(stderr, "pagoda: scheduler step failed (%s): %s\n", pgd_strerror(rc),
                        pgd_error_detail());
            if (rc == PGD_EDEVLOST) { /* nothing more can run: every request fails now */
                snprintf(e->lost_msg, sizeof e->lost_msg, "the device failed: %s",
                         pgd_error_detail());
                atomic_store_explicit(&e->lost, true, memory_order_release);
                pgd_sched_fail_all(e->sched, PGD_EDEVLOST, e->lost_msg);
            }
            stalled = !rc && info.n_items == 0;
        }
        publish(e);
        flush_events(e);
    }
    return NULL;
}

/* ---- API ------------------------------------------------------------------------------------ */

static void free_node(pgd_mpsc_node *n) {
    free(n); /* link is the first member */
}

int pgd_worker_create(pgd_runner *runner, const pgd_worker_config *c, pgd_worker **out) {
    *out = NULL;
    pgd_worker *e = calloc(1, sizeof *e);
    if (!e) return PGD_ENOMEM;
    e->runner = runner;
    e->cfg = *c;
    e->caps = *pgd_runner_caps(runner);
    atomic_init(&e->n_refused, 0);
    int rc = pgd_sched_create(runner, &c->sched, sink, e, &e->sched);
    if (rc) {
        free(e);
        return rc;
    }
    e->cfg.sched = *pgd_sched_get_config(e->sched);
    pgd_sched_limits(e->sched, &e->lim);
    bool inbox = false, outbox = false, mu = false;
    if ((rc = pgd__inbox_init(&e->inbox, e->cfg.sched.max_waiting))) goto fail;
    inbox = true;
    if ((rc = pgd__outbox_init(&e->outbox, c->wake, c->wake_ud))) goto fail;
    outbox = true;
    if (pthread_mutex_init(&e->stats_mu, NULL)) {
        rc = PGD_ENOMEM;
        goto fail;
    }
    mu = true;
    pgd_sched_get_stats(e->sched, &e->stats);
    if (pthread_create(&e->thread, NULL, worker_main, e)) {
        rc = pgd_error_set(PGD_ENOMEM, "cannot start the scheduler thread");
        goto fail;
    }
    e->started = true;
    *out = e;
    return 0;
fail:
    if (mu) pthread_mutex_destroy(&e->stats_mu);
    if (outbox) pgd__outbox_destroy(&e->outbox, free_node);
    if (inbox) pgd__inbox_destroy(&e->inbox);
    pgd_sched_destroy(e->sched);
    free(e);
    return rc;
}

int pgd_worker_submit_n(pgd_worker *e, const pgd_request *rs, size_t n, uint64_t *ids) {
    uint32_t max_waiting = e->cfg.sched.max_waiting;
    pgd__msg **msgs = NULL;
    size_t made = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) ids[i] = 0;
    if (n == 0) {
        rc = pgd_error_set(PGD_EINVAL, "no request to submit");
        goto fail;
    }
    const char *lost;
    if (pgd_worker_lost(e, &lost)) {
        rc = pgd_error_set(PGD_EDEVLOST, "%s", lost);
        goto fail;
    }
    if (max_waiting && n > max_waiting) {
        bool embed = rs[0].pooling != PGD_POOL_NONE;
        rc = pgd_error_set_param(PGD_EINVAL, embed ? "input" : "prompt",
                                 "this request has %zu %s but at most %u requests may wait for "
                                 "admission (max_waiting), so it could never be admitted; send "
                                 "at most %u per request",
                                 n, embed ? "inputs" : "prompts", max_waiting, max_waiting);
        goto fail;
    }
    if (!(msgs = calloc(n, sizeof *msgs))) {
        rc = PGD_ENOMEM;
        goto fail;
    }
    for (; made < n; made++) {
        pgd__req_spec *spec = NULL;
        if ((rc = pgd_request_check(&rs[made], &e->lim))) goto fail;
        if ((rc = pgd__request_dup(&rs[made], &e->lim, &spec))) goto fail;
        if (!(msgs[made] = calloc(1, sizeof **msgs))) {
            pgd__request_free(spec);
            rc = PGD_ENOMEM;
            goto fail;
        }
        msgs[made]->kind = PGD__MSG_SUBMIT;
        msgs[made]->spec = spec;
    }
    if ((rc = pgd__inbox_submit_n(&e->inbox, msgs, n, ids))) goto fail;
    free(msgs);
    return 0;
fail:
    for (size_t i = 0; i < made; i++) {
        pgd__request_free(msgs[i]->spec);
        free(msgs[i]);
    }
    free(msgs);
    atomic_fetch_add(&e->n_refused, n ? n : 1);
    return rc;
}

int pgd_worker_submit(pgd_worker *e, const pgd_request *r, uint64_t *id) {
    return pgd_worker_submit_n(e, r, 1, id);
}

int pgd_worker_abort(pgd_worker *e, uint64_t id) {
    pgd__msg *m = calloc(1, sizeof *m);
    if (!m) return PGD_ENOMEM;
    m->kind = PGD__MSG_ABORT;
    m->id = id;
    int rc = pgd__inbox_push(&e->inbox, m);
    if (rc) free(m);
    return rc;
}

size_t pgd_worker_drain(pgd_worker *e, pgd_event_fn fn, void *ud) {
    size_t n = 0;
    pgd_mpsc_node *node;
    while ((node = pgd_mpsc_pop(&e->outbox.q))) {
        ev_node *en = (ev_node *)node;
        if (fn) fn(&en->ev, ud);
        free(en);
        n++;
    }
    return n;
}

bool pgd_worker_wait(pgd_worker *e, int timeout_ms) {
    return pgd__outbox_wait(&e->outbox, timeout_ms);
}

bool pgd_worker_lost(const pgd_worker *e, const char **why) {
    bool lost = atomic_load_explicit(&((pgd_worker *)e)->lost, memory_order_acquire);
    if (why) *why = lost ? e->lost_msg : NULL;
    return lost;
}

void pgd_worker_get_stats(pgd_worker *e, pgd_sched_stats *out) {
    pthread_mutex_lock(&e->stats_mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->stats_mu);
    out->n_refused += atomic_load(&e->n_refused);
}

void pgd_worker_limits(const pgd_worker *e, pgd_req_limits *out) {
    *out = e->lim;
}

const pgd_backend_caps *pgd_worker_caps(const pgd_worker *e) {
    return &e->caps;
}

const pgd_sched_config *pgd_worker_config_of(const pgd_worker *e) {
    return &e->cfg.sched;
}

void pgd_worker_shutdown(pgd_worker *e, int64_t drain_ms) {
    if (!e || e->joined) return;
    e->drain_deadline_ns = drain_ms < 0    ? UINT64_MAX
                           : drain_ms == 0 ? 0
                                           : pgd_now_ns() + (uint64_t)drain_ms * 1000000ull;
    pgd__inbox_close(&e->inbox); /* publishes drain_deadline_ns to the thread (mutex) */
    if (e->started) pthread_join(e->thread, NULL);
    e->joined = true;
}

void pgd_worker_destroy(pgd_worker *e) {
    if (!e) return;
    pgd_worker_shutdown(e, 0);
    pgd__outbox_destroy(&e->outbox, free_node);
    pgd__inbox_destroy(&e->inbox);
    pgd_sched_destroy(e->sched);
    pthread_mutex_destroy(&e->stats_mu);
    pgd_runner_destroy(e->runner);
    free(e);
}
