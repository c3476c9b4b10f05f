/*
 * tests/unit/http_harness.h — the test server and the raw-socket client the HTTP transport's
 * tests share (test_http.c, test_http_edges.c): included by each, everything static inline.
 *
 * Each test server runs a uv loop on its own thread with the routes below (the "test handler");
 * the test thread talks to it with plain blocking sockets and reads the close callbacks' log.
 * Commands for the loop thread (stop accepting, end streams, destroy) travel by uv_async.
 *
 * Routes (query "id=..." tags a request in the close log):
 *   /hello               200 text/plain "hello\n"
 *   /echo                200, the body echoed; X-Method, X-Query, X-Arg-b, X-Echo headers
 *   /retry               503 JSON error with Retry-After: 2
 *   /defer?ms=N          answers 200 "deferred" N ms later (from a uv timer)
 *   /defer-forever       never answers
 *   /stream?n=N&ms=M&sse=0|1
 *                        N events ("data: i\n\n", or "chunk-i\n" when sse=0) M ms apart, then end
 *                        (M = 0: all written inside the handler); abort_at=K: after event K,
 *                        pgd_http_request_abort
 *   /idle, /idle-noping  an SSE stream (pings) / an octet stream (no pings) that never writes
 *   /poke                writes "data: poke\n\n" to every live idle stream (from inside MHD_run)
 *   /big?kb=N            an octet stream of N KiB (byte i is 'a' + i % 23), written in the handler
 *   /flood               64 KiB every 5 ms until a write fails (for a client that does not read)
 *   anything else        404 through pgd_http_respond_error
 */
#ifndef PGD_TESTS_HTTP_HARNESS_H
#define PGD_TESTS_HTTP_HARNESS_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "common/error.h"
#include "server/http.h"
#include "testutil.h"

static inline int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ========================================================================================= */
/* The test server (loop thread)                                                              */
/* ========================================================================================= */

#define MAX_CLOSES 4096

typedef struct close_rec {
    char target[160];
    int reason;
    int64_t t;
    int consumed;
} close_rec;

typedef struct tserver tserver;
typedef void (*ts_fn)(tserver *ts, void *arg);

typedef struct treq {
    struct treq *prev, *next; /* ts->live (streams and deferred requests) */
    tserver *ts;
    pgd_http_request *req;
    pgd_http_stream *s;
    uv_timer_t timer;
    int timer_inited;
    int i, n, ms, sse, idle, abort_at;
    char target[160];
} treq;

struct tserver {
    uv_loop_t loop;
    uv_async_t async;
    pthread_t thread;
    pgd_http_config cfg;
    pgd_http_server *srv;
    uint16_t port;
    int create_rc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopped; /* ts_stop joined the loop thread and destroyed mu and cv: the records are read
                    without them */
    int ready;
    ts_fn call_fn;
    void *call_arg;
    uint64_t call_seq, call_done;
    close_rec closes[MAX_CLOSES];
    int n_closes;
    treq *live; /* loop thread only */
};

static inline void treq_free_cb(uv_handle_t *h) {
    free(h->data);
}

static inline void treq_release(treq *t) {
    if (t->timer_inited) {
        uv_timer_stop(&t->timer);
        t->timer.data = t;
        uv_close((uv_handle_t *)&t->timer, treq_free_cb);
    } else {
        free(t);
    }
}

static inline void on_req_close(pgd_http_request *req, pgd_http_close_reason why, void *arg) {
    treq *t = arg;
    tserver *ts = t->ts;
    /* The method and path are still readable here. */
    const char *path = pgd_http_request_path(req);
    if (strncmp(t->target, path, strlen(path)) != 0 || !pgd_http_request_method(req)[0])
        fprintf(stderr, "  close callback: path \"%s\" for \"%s\"\n", path, t->target);
    pthread_mutex_lock(&ts->mu);
    if (ts->n_closes < MAX_CLOSES) {
        close_rec *c = &ts->closes[ts->n_closes++];
        snprintf(c->target, sizeof c->target, "%s", t->target);
        c->reason = (int)why;
        c->t = mono_ms();
        c->consumed = 0;
    }
    pthread_cond_broadcast(&ts->cv);
    pthread_mutex_unlock(&ts->mu);
    if (t->prev || t->next || ts->live == t) {
        if (t->prev)
            t->prev->next = t->next;
        else
            ts->live = t->next;
        if (t->next) t->next->prev = t->prev;
    }
    t->s = NULL;
    t->req = NULL;
    treq_release(t);
}

static inline void live_add(tserver *ts, treq *t) {
    t->prev = NULL;
    t->next = ts->live;
    if (ts->live) ts->live->prev = t;
    ts->live = t;
}

static inline void stream_timer_cb(uv_timer_t *tm) {
    treq *t = tm->data;
    if (!t->s) return;
    char ev[64];
    int len = t->sse ? snprintf(ev, sizeof ev, "data: %d\n\n", t->i)
                     : snprintf(ev, sizeof ev, "chunk-%d\n", t->i);
    pgd_http_stream_write(t->s, ev, (size_t)len);
    if (t->i == t->abort_at) {
        uv_timer_stop(tm);
        pgd_http_request_abort(t->req);
        return;
    }
    if (++t->i >= t->n) {
        uv_timer_stop(tm);
        pgd_http_stream_end(t->s);
    }
}

static inline void defer_timer_cb(uv_timer_t *tm) {
    treq *t = tm->data;
    if (!t->req) return;
    pgd_http_respond(t->req, 200, "text/plain", "deferred", 8, NULL, 0);
}

static inline void flood_timer_cb(uv_timer_t *tm) {
    treq *t = tm->data;
    if (!t->s) return;
    static char block[65536];
    memset(block, 'f', sizeof block);
    if (pgd_http_stream_write(t->s, block, sizeof block) != 0) uv_timer_stop(tm);
}

static inline int qint(pgd_http_request *req, const char *key, int dflt) {
    const char *v = pgd_http_request_query_arg(req, key);
    return v ? atoi(v) : dflt;
}

static inline void test_handler(void *arg, pgd_http_request *req) {
    tserver *ts = arg;
    treq *t = calloc(1, sizeof *t);
    if (!t) {
        pgd_http_request_abort(req);
        return;
    }
    t->ts = ts;
    t->req = req;
    const char *path = pgd_http_request_path(req);
    const char *query = pgd_http_request_query(req);
    snprintf(t->target, sizeof t->target, "%s%s%s", path, query[0] ? "?" : "", query);
    pgd_http_request_set_on_close(req, on_req_close, t);

    if (strcmp(path, "/hello") == 0) {
        pgd_http_respond(req, 200, "text/plain", "hello\n", 6, NULL, 0);
    } else if (strcmp(path, "/echo") == 0) {
        pgd_str body = pgd_http_request_body(req);
        const char *b = pgd_http_request_query_arg(req, "b");
        const char *x = pgd_http_request_header(req, "x-test");
        pgd_http_header h[5] = {{"X-Method", pgd_http_request_method(req)},
                                {"X-Query", query[0] ? query : "-"},
                                {"X-Arg-b", b ? b : "-"},
                                {"X-Echo", x ? x : "-"},
                                {"X-Remote", pgd_http_request_remote(req)}};
        pgd_http_respond(req, 200, "application/octet-stream", body.ptr, body.len, h, 5);
    } else if (strcmp(path, "/retry") == 0) {
        pgd_http_header h = {"Retry-After", "2"};
        pgd_http_respond_error(req, 503, "overloaded, retry later", &h, 1);
    } else if (strcmp(path, "/defer") == 0) {
        uv_timer_init(&ts->loop, &t->timer);
        t->timer_inited = 1;
        t->timer.data = t;
        uv_timer_start(&t->timer, defer_timer_cb, (uint64_t)qint(req, "ms", 100), 0);
        live_add(ts, t);
    } else if (strcmp(path, "/defer-forever") == 0) {
        live_add(ts, t);
    } else if (strcmp(path, "/stream") == 0) {
        t->n = qint(req, "n", 3);
        t->ms = qint(req, "ms", 50);
        t->sse = qint(req, "sse", 1);
        t->abort_at = qint(req, "abort_at", -1);
        unsigned flags = t->sse ? PGD_HTTP_STREAM_SSE : 0;
        if (pgd_http_stream_start(req, 200, t->sse ? NULL : "application/octet-stream", NULL, 0,
                                  flags, &t->s) != 0) {
            pgd_http_request_abort(req);
            return;
        }
        live_add(ts, t);
        if (t->ms == 0) {
            while (t->i < t->n) {
                char ev[64];
                int len = t->sse ? snprintf(ev, sizeof ev, "data: %d\n\n", t->i)
                                 : snprintf(ev, sizeof ev, "chunk-%d\n", t->i);
                pgd_http_stream_write(t->s, ev, (size_t)len);
                t->i++;
            }
            pgd_http_stream_end(t->s);
        } else {
            uv_timer_init(&ts->loop, &t->timer);
            t->timer_inited = 1;
            t->timer.data = t;
            uv_timer_start(&t->timer, stream_timer_cb, (uint64_t)t->ms, (uint64_t)t->ms);
        }
    } else if (strcmp(path, "/idle") == 0 || strcmp(path, "/idle-noping") == 0) {
        int sse = strcmp(path, "/idle") == 0;
        t->idle = 1;
        t->sse = sse;
        if (pgd_http_stream_start(req, 200, sse ? NULL : "application/octet-stream", NULL, 0,
                                  sse ? PGD_HTTP_STREAM_SSE : 0, &t->s) != 0) {
            pgd_http_request_abort(req);
            return;
        }
        live_add(ts, t);
    } else if (strcmp(path, "/big") == 0) {
        size_t n = (size_t)qint(req, "kb", 64) * 1024, done = 0;
        if (pgd_http_stream_start(req, 200, "application/octet-stream", NULL, 0, 0, &t->s) != 0) {
            pgd_http_request_abort(req);
            return;
        }
        live_add(ts, t);
        char piece[10007];
        while (done < n) {
            size_t k = n - done < sizeof piece ? n - done : sizeof piece;
            for (size_t i = 0; i < k; i++) piece[i] = (char)('a' + (done + i) % 23);
            pgd_http_stream_write(t->s, piece, k);
            done += k;
        }
        pgd_http_stream_end(t->s);
    } else if (strcmp(path, "/flood") == 0) {
        if (pgd_http_stream_start(req, 200, "application/octet-stream", NULL, 0, 0, &t->s) != 0) {
            pgd_http_request_abort(req);
            return;
        }
        live_add(ts, t);
        uv_timer_init(&ts->loop, &t->timer);
        t->timer_inited = 1;
        t->timer.data = t;
        uv_timer_start(&t->timer, flood_timer_cb, 5, 5);
    } else if (strcmp(path, "/poke") == 0) {
        int n = 0;
        for (treq *o = ts->live; o; o = o->next)
            if (o->idle && o->s && pgd_http_stream_write(o->s, "data: poke\n\n", 12) == 0) n++;
        char body[32];
        int len = snprintf(body, sizeof body, "%d", n);
        pgd_http_respond(req, 200, "text/plain", body, (size_t)len, NULL, 0);
    } else {
        char msg[256];
        snprintf(msg, sizeof msg, "no route for %s %s", pgd_http_request_method(req), path);
        pgd_http_respond_error(req, 404, msg, NULL, 0);
    }
}

/* The test's error body: shows that the transport used the callback. */
static inline int test_error_body(void *arg, int status, const char *message, pgd_buf *out) {
    (void)arg;
    return pgd_buf_printf(out, "{\"error\":{\"message\":\"%s\",\"type\":\"test\",\"code\":%d}}",
                          message, status);
}

static inline void async_cb(uv_async_t *a) {
    tserver *ts = a->data;
    pthread_mutex_lock(&ts->mu);
    ts_fn fn = ts->call_fn;
    void *arg = ts->call_arg;
    uint64_t seq = ts->call_seq;
    pthread_mutex_unlock(&ts->mu);
    if (fn) fn(ts, arg);
    pthread_mutex_lock(&ts->mu);
    ts->call_fn = NULL;
    ts->call_done = seq;
    pthread_cond_broadcast(&ts->cv);
    pthread_mutex_unlock(&ts->mu);
}

static inline void *loop_thread(void *arg) {
    tserver *ts = arg;
    uv_loop_init(&ts->loop);
    uv_async_init(&ts->loop, &ts->async, async_cb);
    ts->async.data = ts;
    ts->cfg.handler = test_handler;
    ts->cfg.handler_arg = ts;
    int rc = pgd_http_server_create(&ts->loop, &ts->cfg, &ts->srv);
    pthread_mutex_lock(&ts->mu);
    ts->create_rc = rc;
    ts->port = rc == 0 ? pgd_http_server_port(ts->srv) : 0;
    ts->ready = 1;
    pthread_cond_broadcast(&ts->cv);
    pthread_mutex_unlock(&ts->mu);
    if (rc != 0) uv_close((uv_handle_t *)&ts->async, NULL);
    uv_run(&ts->loop, UV_RUN_DEFAULT);
    int lc = uv_loop_close(&ts->loop);
    if (lc != 0) fprintf(stderr, "  uv_loop_close: %s\n", uv_strerror(lc));
    return NULL;
}

static inline int ts_start(tserver *ts, const pgd_http_config *cfg) {
    memset(ts, 0, sizeof *ts);
    ts->cfg = *cfg;
    pthread_mutex_init(&ts->mu, NULL);
    pthread_cond_init(&ts->cv, NULL);
    if (pthread_create(&ts->thread, NULL, loop_thread, ts) != 0) return -1;
    pthread_mutex_lock(&ts->mu);
    while (!ts->ready) pthread_cond_wait(&ts->cv, &ts->mu);
    pthread_mutex_unlock(&ts->mu);
    return ts->create_rc;
}

/* Runs fn(ts, arg) on the loop thread and waits for it. */
static inline void ts_call(tserver *ts, ts_fn fn, void *arg) {
    pthread_mutex_lock(&ts->mu);
    while (ts->call_fn) pthread_cond_wait(&ts->cv, &ts->mu);
    ts->call_fn = fn;
    ts->call_arg = arg;
    uint64_t seq = ++ts->call_seq;
    pthread_mutex_unlock(&ts->mu);
    uv_async_send(&ts->async);
    pthread_mutex_lock(&ts->mu);
    while (ts->call_done < seq) pthread_cond_wait(&ts->cv, &ts->mu);
    pthread_mutex_unlock(&ts->mu);
}

typedef struct counts {
    unsigned conns, reqs, live;
} counts;

static inline void fn_counts(tserver *ts, void *arg) {
    counts *c = arg;
    c->conns = pgd_http_server_connection_count(ts->srv);
    c->reqs = pgd_http_server_request_count(ts->srv);
    c->live = 0;
    for (treq *t = ts->live; t; t = t->next) c->live++;
}

static inline counts ts_counts(tserver *ts) {
    counts c;
    ts_call(ts, fn_counts, &c);
    return c;
}

static inline void fn_stop_accepting(tserver *ts, void *arg) {
    (void)arg;
    pgd_http_server_stop_accepting(ts->srv);
}

static inline void fn_end_streams(tserver *ts, void *arg) {
    (void)arg;
    for (treq *t = ts->live; t; t = t->next) {
        if (!t->s) continue;
        pgd_http_stream_write(t->s, "data: bye\n\n", 11);
        pgd_http_stream_end(t->s);
    }
}

static inline void fn_destroy(tserver *ts, void *arg) {
    int64_t *took = arg;
    int64_t t0 = mono_ms();
    pgd_http_server_destroy(ts->srv);
    ts->srv = NULL;
    if (took) *took = mono_ms() - t0;
    uv_close((uv_handle_t *)&ts->async, NULL);
}

static inline void ts_stop(tserver *ts, int64_t *took) {
    ts_call(ts, fn_destroy, took);
    pthread_join(ts->thread, NULL);
    pthread_mutex_destroy(&ts->mu);
    pthread_cond_destroy(&ts->cv);
    ts->stopped = 1;
}

static inline void ts_lock(tserver *ts) {
    if (!ts->stopped) pthread_mutex_lock(&ts->mu);
}

static inline void ts_unlock(tserver *ts) {
    if (!ts->stopped) pthread_mutex_unlock(&ts->mu);
}

/* Waits for the close record of `target`; returns its reason (-1 on timeout), *t its time. */
static inline int ts_wait_close(tserver *ts, const char *target, int timeout_ms, int64_t *t) {
    int64_t deadline = mono_ms() + timeout_ms;
    int reason = -1;
    ts_lock(ts);
    for (;;) {
        for (int i = 0; i < ts->n_closes; i++) {
            close_rec *c = &ts->closes[i];
            if (!c->consumed && strcmp(c->target, target) == 0) {
                c->consumed = 1;
                reason = c->reason;
                if (t) *t = c->t;
                goto out;
            }
        }
        int64_t left = deadline - mono_ms();
        if (left <= 0 || ts->stopped) break;
        struct timespec ts_abs;
        clock_gettime(CLOCK_REALTIME, &ts_abs);
        int64_t ns = ts_abs.tv_nsec + (left < 50 ? left : 50) * 1000000;
        ts_abs.tv_sec += ns / 1000000000;
        ts_abs.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&ts->cv, &ts->mu, &ts_abs);
    }
out:
    ts_unlock(ts);
    return reason;
}

static inline int ts_count_closes(tserver *ts, const char *prefix, int reason) {
    int n = 0;
    ts_lock(ts);
    for (int i = 0; i < ts->n_closes; i++)
        if (strncmp(ts->closes[i].target, prefix, strlen(prefix)) == 0 &&
            ts->closes[i].reason == reason)
            n++;
    ts_unlock(ts);
    return n;
}

/* ========================================================================================= */
/* The client (test thread)                                                                   */
/* ========================================================================================= */

typedef struct client {
    int fd;
    pgd_buf in;
    size_t off; /* bytes of `in` already consumed */
} client;

static inline int cl_open(client *c, uint16_t port) {
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(c->fd);
        c->fd = -1;
        errno = e;
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

static inline void cl_close(client *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    pgd_buf_free(&c->in);
    c->off = 0;
}

static inline int cl_send(client *c, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline int cl_sends(client *c, const char *s) {
    return cl_send(c, s, strlen(s));
}

/* Reads what is available within timeout_ms: >0 bytes, 0 EOF (or reset), -1 timeout. */
static inline int cl_fill(client *c, int timeout_ms) {
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms);
    if (r <= 0) return -1;
    char buf[65536];
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n <= 0) return 0;
    pgd_buf_append(&c->in, buf, (size_t)n);
    return (int)n;
}

static inline size_t cl_avail(const client *c) {
    return c->in.len - c->off;
}

/* Prints the unread bytes (for a failed expectation). */
static inline void cl_dump(const client *c, const char *what) {
    fprintf(stderr, "    %s: %zu unread bytes: \"", what, cl_avail(c));
    for (size_t i = c->off; i < c->in.len && i < c->off + 400; i++) {
        unsigned char ch = (unsigned char)c->in.data[i];
        if (ch == '\n')
            fputs("\\n", stderr);
        else if (ch == '\r')
            fputs("\\r", stderr);
        else if (ch < 32 || ch > 126)
            fprintf(stderr, "\\x%02x", ch);
        else
            fputc(ch, stderr);
    }
    fputs("\"\n", stderr);
}

#define CHECK_FIND(c, needle, ms)                                                                  \
    do {                                                                                           \
        long tu_pos = cl_find((c), (needle), mono_ms() + (ms));                                    \
        if (tu_pos < 0) cl_dump((c), #c);                                                          \
        CHECK(tu_pos >= 0);                                                                        \
        if (tu_pos >= 0) (c)->off += (size_t)tu_pos + strlen(needle);                              \
    } while (0)

/* Waits until `needle` is in the unread bytes: its offset from c->off, -1 timeout, -2 EOF. */
static inline long cl_find(client *c, const char *needle, int64_t deadline) {
    size_t nl = strlen(needle);
    for (;;) {
        if (cl_avail(c) >= nl) {
            const char *hit = memmem(c->in.data + c->off, cl_avail(c), needle, nl);
            if (hit) return (long)(hit - (c->in.data + c->off));
        }
        int r = cl_fill(c, (int)(deadline - mono_ms()));
        if (r == 0) return -2;
        if (r < 0) return -1;
    }
}

/* Waits until n unread bytes are there: 0, -1 timeout, -2 EOF. */
static inline int cl_need(client *c, size_t n, int64_t deadline) {
    while (cl_avail(c) < n) {
        int r = cl_fill(c, (int)(deadline - mono_ms()));
        if (r == 0) return -2;
        if (r < 0) return -1;
    }
    return 0;
}

/* Waits for EOF: 0 when the server closed, -1 on timeout. Discards data. */
static inline int cl_wait_eof(client *c, int timeout_ms) {
    int64_t deadline = mono_ms() + timeout_ms;
    for (;;) {
        int r = cl_fill(c, (int)(deadline - mono_ms()));
        if (r == 0) return 0;
        if (r < 0) return -1;
    }
}

typedef struct resp {
    int status;
    char head[8192];
    pgd_buf body; /* decoded */
    pgd_buf raw;  /* the body bytes as sent (with chunk framing) */
    int chunked;
} resp;

static inline void resp_free(resp *r) {
    pgd_buf_free(&r->body);
    pgd_buf_free(&r->raw);
}

/* Header value (trimmed) into out; 1 if found. */
static inline int head_get(const char *head, const char *name, char *out, size_t cap) {
    size_t nl = strlen(name);
    const char *p = strstr(head, "\r\n");
    while (p && p[2]) {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            size_t len = e ? (size_t)(e - v) : strlen(v);
            if (len >= cap) len = cap - 1;
            memcpy(out, v, len);
            out[len] = 0;
            return 1;
        }
        p = strstr(p, "\r\n");
    }
    return 0;
}

static inline int cl_headers(client *c, resp *r, int64_t deadline) {
    for (;;) {
        long pos = cl_find(c, "\r\n\r\n", deadline);
        if (pos < 0) return (int)pos;
        size_t hl = (size_t)pos + 4 < sizeof r->head ? (size_t)pos + 4 : sizeof r->head - 1;
        memcpy(r->head, c->in.data + c->off, hl);
        r->head[hl] = 0;
        c->off += (size_t)pos + 4;
        r->status = 0;
        sscanf(r->head, "HTTP/1.%*d %d", &r->status);
        if (r->status != 100) return 0;
    }
}

/* Reads one whole response: 0, -1 timeout, -2 EOF before the end. */
static inline int cl_response(client *c, resp *r, int timeout_ms) {
    memset(r, 0, sizeof *r);
    int64_t deadline = mono_ms() + timeout_ms;
    int rc = cl_headers(c, r, deadline);
    if (rc) return rc;
    char v[64];
    if (head_get(r->head, "Transfer-Encoding", v, sizeof v) && strcasestr(v, "chunked")) {
        r->chunked = 1;
        for (;;) {
            long pos = cl_find(c, "\r\n", deadline);
            if (pos < 0) return (int)pos;
            size_t size = strtoul(c->in.data + c->off, NULL, 16);
            size_t frame = (size_t)pos + 2 + size + 2;
            if ((rc = cl_need(c, frame, deadline)) != 0) return rc;
            pgd_buf_append(&r->raw, c->in.data + c->off, frame);
            pgd_buf_append(&r->body, c->in.data + c->off + pos + 2, size);
            c->off += frame;
            if (size == 0) return 0;
        }
    }
    if (head_get(r->head, "Content-Length", v, sizeof v)) {
        size_t n = strtoul(v, NULL, 10);
        if ((rc = cl_need(c, n, deadline)) != 0) return rc;
        pgd_buf_append(&r->body, c->in.data + c->off, n);
        pgd_buf_append(&r->raw, c->in.data + c->off, n);
        c->off += n;
        return 0;
    }
    for (;;) { /* until EOF */
        int f = cl_fill(c, (int)(deadline - mono_ms()));
        if (f < 0) return -1;
        if (f == 0) break;
    }
    pgd_buf_append(&r->body, c->in.data + c->off, cl_avail(c));
    c->off = c->in.len;
    return 0;
}

static inline const char *body_str(resp *r) {
    return r->body.data ? r->body.data : "";
}

/* One request on a fresh connection. */
static inline int fetch(uint16_t port, const char *request, resp *r) {
    client c;
    if (cl_open(&c, port) != 0) return -3;
    int rc = cl_sends(&c, request);
    if (rc == 0) rc = cl_response(&c, r, 5000);
    cl_close(&c);
    return rc;
}

static inline double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

#endif
