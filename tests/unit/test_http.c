/*
 * tests/unit/test_http.c — the HTTP transport (server/http.c),
 * over real sockets on 127.0.0.1, no model.
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
 *
 * `test_http --serve PORT` runs the routes until killed (for curl -N by hand).
 */
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

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
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
    int ready;
    ts_fn call_fn;
    void *call_arg;
    uint64_t call_seq, call_done;
    close_rec closes[MAX_CLOSES];
    int n_closes;
    treq *live; /* loop thread only */
};

static void treq_free_cb(uv_handle_t *h) {
    free(h->data);
}

static void treq_release(treq *t) {
    if (t->timer_inited) {
        uv_timer_stop(&t->timer);
        t->timer.data = t;
        uv_close((uv_handle_t *)&t->timer, treq_free_cb);
    } else {
        free(t);
    }
}

static void on_req_close(pgd_http_request *req, pgd_http_close_reason why, void *arg) {
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

static void live_add(tserver *ts, treq *t) {
    t->prev = NULL;
    t->next = ts->live;
    if (ts->live) ts->live->prev = t;
    ts->live = t;
}

static void stream_timer_cb(uv_timer_t *tm) {
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

static void defer_timer_cb(uv_timer_t *tm) {
    treq *t = tm->data;
    if (!t->req) return;
    pgd_http_respond(t->req, 200, "text/plain", "deferred", 8, NULL, 0);
}

static void flood_timer_cb(uv_timer_t *tm) {
    treq *t = tm->data;
    if (!t->s) return;
    static char block[65536];
    memset(block, 'f', sizeof block);
    if (pgd_http_stream_write(t->s, block, sizeof block) != 0) uv_timer_stop(tm);
}

static int qint(pgd_http_request *req, const char *key, int dflt) {
    const char *v = pgd_http_request_query_arg(req, key);
    return v ? atoi(v) : dflt;
}

static void test_handler(void *arg, pgd_http_request *req) {
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
static int test_error_body(void *arg, int status, const char *message, pgd_buf *out) {
    (void)arg;
    return pgd_buf_printf(out, "{\"error\":{\"message\":\"%s\",\"type\":\"test\",\"code\":%d}}",
                          message, status);
}

static void async_cb(uv_async_t *a) {
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

static void *loop_thread(void *arg) {
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

static int ts_start(tserver *ts, const pgd_http_config *cfg) {
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
static void ts_call(tserver *ts, ts_fn fn, void *arg) {
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

static void fn_counts(tserver *ts, void *arg) {
    counts *c = arg;
    c->conns = pgd_http_server_connection_count(ts->srv);
    c->reqs = pgd_http_server_request_count(ts->srv);
    c->live = 0;
    for (treq *t = ts->live; t; t = t->next) c->live++;
}

static counts ts_counts(tserver *ts) {
    counts c;
    ts_call(ts, fn_counts, &c);
    return c;
}

static void fn_stop_accepting(tserver *ts, void *arg) {
    (void)arg;
    pgd_http_server_stop_accepting(ts->srv);
}

static void fn_end_streams(tserver *ts, void *arg) {
    (void)arg;
    for (treq *t = ts->live; t; t = t->next) {
        if (!t->s) continue;
        pgd_http_stream_write(t->s, "data: bye\n\n", 11);
        pgd_http_stream_end(t->s);
    }
}

static void fn_destroy(tserver *ts, void *arg) {
    int64_t *took = arg;
    int64_t t0 = mono_ms();
    pgd_http_server_destroy(ts->srv);
    ts->srv = NULL;
    if (took) *took = mono_ms() - t0;
    uv_close((uv_handle_t *)&ts->async, NULL);
}

static void ts_stop(tserver *ts, int64_t *took) {
    ts_call(ts, fn_destroy, took);
    pthread_join(ts->thread, NULL);
    pthread_mutex_destroy(&ts->mu);
    pthread_cond_destroy(&ts->cv);
}

/* Waits for the close record of `target`; returns its reason (-1 on timeout), *t its time. */
static int ts_wait_close(tserver *ts, const char *target, int timeout_ms, int64_t *t) {
    int64_t deadline = mono_ms() + timeout_ms;
    int reason = -1;
    pthread_mutex_lock(&ts->mu);
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
        if (left <= 0) break;
        struct timespec ts_abs;
        clock_gettime(CLOCK_REALTIME, &ts_abs);
        int64_t ns = ts_abs.tv_nsec + (left < 50 ? left : 50) * 1000000;
        ts_abs.tv_sec += ns / 1000000000;
        ts_abs.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&ts->cv, &ts->mu, &ts_abs);
    }
out:
    pthread_mutex_unlock(&ts->mu);
    return reason;
}

static int ts_count_closes(tserver *ts, const char *prefix, int reason) {
    int n = 0;
    pthread_mutex_lock(&ts->mu);
    for (int i = 0; i < ts->n_closes; i++)
        if (strncmp(ts->closes[i].target, prefix, strlen(prefix)) == 0 &&
            ts->closes[i].reason == reason)
            n++;
    pthread_mutex_unlock(&ts->mu);
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

static int cl_open(client *c, uint16_t port) {
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

static void cl_close(client *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    pgd_buf_free(&c->in);
    c->off = 0;
}

static int cl_send(client *c, const void *data, size_t len) {
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

static int cl_sends(client *c, const char *s) {
    return cl_send(c, s, strlen(s));
}

/* Reads what is available within timeout_ms: >0 bytes, 0 EOF (or reset), -1 timeout. */
static int cl_fill(client *c, int timeout_ms) {
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms);
    if (r <= 0) return -1;
    char buf[65536];
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n <= 0) return 0;
    pgd_buf_append(&c->in, buf, (size_t)n);
    return (int)n;
}

static size_t cl_avail(const client *c) {
    return c->in.len - c->off;
}

/* Prints the unread bytes (for a failed expectation). */
static void cl_dump(const client *c, const char *what) {
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
static long cl_find(client *c, const char *needle, int64_t deadline) {
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
static int cl_need(client *c, size_t n, int64_t deadline) {
    while (cl_avail(c) < n) {
        int r = cl_fill(c, (int)(deadline - mono_ms()));
        if (r == 0) return -2;
        if (r < 0) return -1;
    }
    return 0;
}

/* Waits for EOF: 0 when the server closed, -1 on timeout. Discards data. */
static int cl_wait_eof(client *c, int timeout_ms) {
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

static void resp_free(resp *r) {
    pgd_buf_free(&r->body);
    pgd_buf_free(&r->raw);
}

/* Header value (trimmed) into out; 1 if found. */
static int head_get(const char *head, const char *name, char *out, size_t cap) {
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

static int cl_headers(client *c, resp *r, int64_t deadline) {
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
static int cl_response(client *c, resp *r, int timeout_ms) {
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

static const char *body_str(resp *r) {
    return r->body.data ? r->body.data : "";
}

/* One request on a fresh connection. */
static int fetch(uint16_t port, const char *request, resp *r) {
    client c;
    if (cl_open(&c, port) != 0) return -3;
    int rc = cl_sends(&c, request);
    if (rc == 0) rc = cl_response(&c, r, 5000);
    cl_close(&c);
    return rc;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* ========================================================================================= */
/* Tests                                                                                      */
/* ========================================================================================= */

/* g_main: pings every 500 ms, idle timeout 2 s, request deadline 1.5 s, body and stream buffer
 * 1 MiB, disconnect watch, the test's error body. g_lim: 4 connections, no disconnect watch
 * (pings only), response time limit 1.5 s, defaults otherwise. */
static tserver g_main;
static tserver g_lim;

static void test_get(void) {
    resp r;
    REQUIRE(fetch(g_main.port, "GET /hello?id=get HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(body_str(&r), "hello\n");
    char v[128];
    CHECK(head_get(r.head, "Content-Type", v, sizeof v) && strcmp(v, "text/plain") == 0);
    CHECK(head_get(r.head, "Content-Length", v, sizeof v) && strcmp(v, "6") == 0);
    resp_free(&r);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/hello?id=get", 2000, NULL), PGD_HTTP_CLOSE_COMPLETED);
}

static void test_post_echo(void) {
    resp r;
    REQUIRE(fetch(g_main.port,
                  "POST /echo?a=1&b=x%20y HTTP/1.1\r\nHost: x\r\nX-Test: abc\r\n"
                  "Content-Length: 11\r\nContent-Type: text/plain\r\n\r\nhello world",
                  &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(body_str(&r), "hello world");
    char v[128];
    CHECK(head_get(r.head, "X-Method", v, sizeof v) && strcmp(v, "POST") == 0);
    CHECK(head_get(r.head, "X-Query", v, sizeof v) && strcmp(v, "a=1&b=x%20y") == 0);
    CHECK(head_get(r.head, "X-Arg-b", v, sizeof v) && strcmp(v, "x y") == 0);
    CHECK(head_get(r.head, "X-Echo", v, sizeof v) && strcmp(v, "abc") == 0);
    CHECK(head_get(r.head, "X-Remote", v, sizeof v) && strncmp(v, "127.0.0.1:", 10) == 0);
    resp_free(&r);

    /* Expect: 100-continue: MHD sends the interim response, then we send the body. */
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c,
             "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    long pos = cl_find(&c, "100 Continue\r\n\r\n", mono_ms() + 2000);
    CHECK(pos >= 0);
    if (pos >= 0) c.off += (size_t)pos + 16;
    cl_sends(&c, "abcd");
    CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(body_str(&r), "abcd");
    resp_free(&r);
    cl_close(&c);
}

static void test_chunked_upload(void) {
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    cl_sends(&c, "5\r\nhello\r\n");
    sleep_ms(50);
    cl_sends(&c, "1\r\n \r\n");
    sleep_ms(50);
    cl_sends(&c, "5\r\nworld\r\n0\r\n\r\n");
    resp r;
    CHECK_EQ_INT(cl_response(&c, &r, 3000), 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(body_str(&r), "hello world");
    resp_free(&r);
    cl_close(&c);
}

static void test_not_found_and_retry(void) {
    resp r;
    REQUIRE(fetch(g_main.port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 0);
    CHECK_EQ_INT(r.status, 404);
    CHECK_EQ_STR(
        body_str(&r),
        "{\"error\":{\"message\":\"no route for GET /nope\",\"type\":\"test\",\"code\":404}}");
    char v[128];
    CHECK(head_get(r.head, "Content-Type", v, sizeof v) && strcmp(v, "application/json") == 0);
    resp_free(&r);

    REQUIRE(fetch(g_main.port, "GET /retry HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 0);
    CHECK_EQ_INT(r.status, 503);
    CHECK(head_get(r.head, "Retry-After", v, sizeof v) && strcmp(v, "2") == 0);
    CHECK(strstr(body_str(&r), "overloaded") != NULL);
    resp_free(&r);
}

static void test_too_large(void) {
    /* Content-Length over the limit: 413 before the body is read, then the server closes. */
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "POST /echo?id=big HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 "Content-Length: 2000000\r\n\r\n");
    resp r;
    CHECK_EQ_INT(cl_response(&c, &r, 3000), 0);
    CHECK_EQ_INT(r.status, 413);
    CHECK(strstr(body_str(&r), "\"code\":413") != NULL);
    CHECK(strstr(body_str(&r), "too large") != NULL);
    char v[64];
    CHECK(head_get(r.head, "Connection", v, sizeof v) && strcasecmp(v, "close") == 0);
    CHECK_EQ_INT(cl_wait_eof(&c, 2000), 0);
    resp_free(&r);
    cl_close(&c);

    /* Chunked body over the limit: read and dropped, 413 at its end, connection kept. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    char *chunk = malloc(65536 + 16);
    REQUIRE(chunk);
    int hl = snprintf(chunk, 16, "10000\r\n");
    memset(chunk + hl, 'a', 65536);
    memcpy(chunk + hl + 65536, "\r\n", 2);
    for (int i = 0; i < 24; i++) cl_send(&c, chunk, (size_t)hl + 65536 + 2); /* 1.5 MiB */
    cl_sends(&c, "0\r\n\r\n");
    CHECK_EQ_INT(cl_response(&c, &r, 5000), 0);
    CHECK_EQ_INT(r.status, 413);
    resp_free(&r);
    cl_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ_INT(cl_response(&c, &r, 3000), 0);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    cl_close(&c);

    /* Past twice the limit the server stops reading and closes. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    int sent = 0;
    for (int i = 0; i < 64; i++) { /* 4 MiB */
        if (cl_send(&c, chunk, (size_t)hl + 65536 + 2) != 0) break;
        sent++;
    }
    CHECK_EQ_INT(cl_wait_eof(&c, 3000), 0);
    CHECK_EQ_INT(cl_avail(&c), 0);
    fprintf(stderr, "    chunked body past twice the limit: closed after %d of 64 KiB chunks\n",
            sent);
    cl_close(&c);
    free(chunk);

    /* A body exactly at the limit is fine. */
    size_t n = 1u << 20;
    char *big = malloc(n);
    REQUIRE(big);
    memset(big, 'b', n);
    REQUIRE(cl_open(&c, g_main.port) == 0);
    char head[128];
    snprintf(head, sizeof head, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", n);
    cl_sends(&c, head);
    cl_send(&c, big, n);
    CHECK_EQ_INT(cl_response(&c, &r, 5000), 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.body.len == n && memcmp(r.body.data, big, n) == 0);
    resp_free(&r);
    cl_close(&c);
    free(big);
}

static void test_keep_alive(void) {
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    resp r;
    for (int i = 0; i < 3; i++) {
        cl_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
        CHECK_EQ_INT(r.status, 200);
        resp_free(&r);
        cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
        CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
        CHECK_EQ_STR(body_str(&r), "abc");
        resp_free(&r);
    }
    /* Pipelined: two requests in one write. */
    cl_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
    CHECK_EQ_INT(r.status, 404);
    resp_free(&r);
    counts k = ts_counts(&g_main);
    CHECK_EQ_INT(k.conns, 1);
    cl_close(&c);
}

static void test_deferred(void) {
    resp r;
    int64_t t0 = mono_ms();
    REQUIRE(fetch(g_main.port, "GET /defer?ms=200&id=d1 HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 0);
    int64_t dt = mono_ms() - t0;
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(body_str(&r), "deferred");
    CHECK(dt >= 180 && dt < 2000);
    resp_free(&r);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/defer?ms=200&id=d1", 2000, NULL),
                 PGD_HTTP_CLOSE_COMPLETED);

    /* Deferred answers and suspended streams one after another on a keep-alive connection
     * (each one suspends the connection and watches it again). */
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    for (int i = 0; i < 3; i++) {
        cl_sends(&c, "GET /defer?ms=30 HTTP/1.1\r\nHost: x\r\n\r\n");
        CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
        CHECK_EQ_STR(body_str(&r), "deferred");
        resp_free(&r);
        cl_sends(&c, "GET /stream?n=2&ms=30 HTTP/1.1\r\nHost: x\r\n\r\n");
        CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
        CHECK_EQ_STR(body_str(&r), "data: 0\n\ndata: 1\n\n");
        resp_free(&r);
    }
    cl_close(&c);
}

static void test_stream_sse(void) {
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    int64_t t0 = mono_ms();
    cl_sends(&c, "GET /stream?n=3&ms=300&id=s1 HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    memset(&r, 0, sizeof r);
    /* The headers come at once, before the first event. */
    CHECK_EQ_INT(cl_headers(&c, &r, mono_ms() + 2000), 0);
    CHECK(mono_ms() - t0 < 250);
    CHECK_EQ_INT(r.status, 200);
    char v[128];
    CHECK(head_get(r.head, "Content-Type", v, sizeof v) && strcmp(v, "text/event-stream") == 0);
    CHECK(head_get(r.head, "Cache-Control", v, sizeof v) && strcmp(v, "no-cache") == 0);
    CHECK(head_get(r.head, "Transfer-Encoding", v, sizeof v) && strcmp(v, "chunked") == 0);
    CHECK(!head_get(r.head, "Content-Length", v, sizeof v));
    /* The exact bytes: one chunk per write, then the last chunk (MHD writes sizes in upper-case
     * hex). */
    const char *want = "9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n";
    CHECK_EQ_INT(cl_need(&c, strlen(want), mono_ms() + 3000), 0);
    int64_t dt = mono_ms() - t0;
    CHECK(dt >= 850 && dt < 2500);
    if (cl_avail(&c) >= strlen(want)) {
        char *got = strndup(c.in.data + c.off, cl_avail(&c));
        CHECK_EQ_STR(got, want);
        free(got);
    }
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/stream?n=3&ms=300&id=s1", 2000, NULL),
                 PGD_HTTP_CLOSE_COMPLETED);

    /* Non-SSE stream written and ended inside the handler. */
    REQUIRE(fetch(g_main.port, "GET /stream?n=2&ms=0&sse=0 HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(head_get(r.head, "Content-Type", v, sizeof v) &&
          strcmp(v, "application/octet-stream") == 0);
    CHECK(!head_get(r.head, "Cache-Control", v, sizeof v));
    CHECK_EQ_STR(r.raw.data, "10\r\nchunk-0\nchunk-1\n\r\n0\r\n\r\n");
    resp_free(&r);

    /* HTTP/1.0: no chunking, the end of the body is the end of the connection. */
    REQUIRE(fetch(g_main.port, "GET /stream?n=2&ms=20 HTTP/1.0\r\n\r\n", &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(!r.chunked);
    CHECK_EQ_STR(body_str(&r), "data: 0\n\ndata: 1\n\n");
    resp_free(&r);
}

static void test_stream_abort(void) {
    /* The route aborts its stream right after writing the third event (which may be dropped):
     * the client sees the connection end without the last chunk; the close callback says
     * ERROR. */
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "GET /stream?n=10&ms=30&abort_at=2&id=ab HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ_INT(cl_wait_eof(&c, 3000), 0);
    CHECK(memmem(c.in.data, c.in.len, "data: 1\n\n", 9) != NULL);
    CHECK(memmem(c.in.data, c.in.len, "data: 3\n\n", 9) == NULL);
    CHECK(memmem(c.in.data, c.in.len, "\r\n0\r\n\r\n", 7) == NULL);
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/stream?n=10&ms=30&abort_at=2&id=ab", 2000, NULL),
                 PGD_HTTP_CLOSE_ERROR);
}

static void test_big_stream(void) {
    resp r;
    REQUIRE(fetch(g_main.port, "GET /big?kb=700 HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_INT(r.body.len, 700 * 1024);
    int ok = r.body.len == 700 * 1024;
    for (size_t i = 0; ok && i < r.body.len; i++) ok = r.body.data[i] == (char)('a' + i % 23);
    CHECK(ok);
    resp_free(&r);
}

static void test_client_not_reading(void) {
    /* g_main: max_stream_buffer 1 MiB. The client never reads: the socket buffers fill, then
     * the stream's pending bytes, and the write that would pass the limit aborts it. */
    client c;
    memset(&c, 0, sizeof c);
    c.fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(c.fd >= 0);
    int small = 4096;
    setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(g_main.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(c.fd, (struct sockaddr *)&a, sizeof a) == 0);
    cl_sends(&c, "GET /flood?id=fl HTTP/1.1\r\nHost: x\r\n\r\n");
    int64_t t = 0, t0 = mono_ms();
    CHECK_EQ_INT(ts_wait_close(&g_main, "/flood?id=fl", 8000, &t), PGD_HTTP_CLOSE_CLIENT_GONE);
    fprintf(stderr, "    client not reading: stream aborted after %lld ms\n", (long long)(t - t0));
    cl_close(&c);
}

static void test_pings_and_abort(void) {
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    int64_t t0 = mono_ms();
    cl_sends(&c, "GET /idle?id=p1 HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&c, &r, mono_ms() + 2000) == 0);
    /* ": ping\n\n" is 8 bytes: a chunk "8\r\n: ping\n\n\r\n" every 500 ms. */
    const char *ping = "8\r\n: ping\n\n\r\n";
    long pos = cl_find(&c, ping, mono_ms() + 2000);
    int64_t t1 = mono_ms() - t0;
    CHECK(pos == 0);
    CHECK(t1 >= 350 && t1 < 1200);
    if (pos >= 0) c.off += (size_t)pos + strlen(ping);
    pos = cl_find(&c, ping, mono_ms() + 2000);
    int64_t t2 = mono_ms() - t0;
    CHECK(pos == 0);
    CHECK(t2 - t1 >= 350 && t2 - t1 < 1200);
    /* The client leaves: the disconnect watch reports it at once. */
    int64_t tc = mono_ms();
    cl_close(&c);
    int64_t tclosed = 0;
    CHECK_EQ_INT(ts_wait_close(&g_main, "/idle?id=p1", 3000, &tclosed), PGD_HTTP_CLOSE_CLIENT_GONE);
    fprintf(stderr, "    idle SSE stream: client close noticed after %lld ms (watch)\n",
            (long long)(tclosed - tc));
    CHECK(tclosed - tc < 400);

    /* A client that leaves in the middle of a stream that is writing. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "GET /stream?n=1000&ms=50&id=ms1 HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(cl_find(&c, "data: 3\n\n", mono_ms() + 3000) >= 0);
    tc = mono_ms();
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/stream?n=1000&ms=50&id=ms1", 3000, &tclosed),
                 PGD_HTTP_CLOSE_CLIENT_GONE);
    CHECK(tclosed - tc < 400);

    /* A deferred request whose client leaves. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "GET /defer-forever?id=df1 HTTP/1.1\r\nHost: x\r\n\r\n");
    sleep_ms(100);
    tc = mono_ms();
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/defer-forever?id=df1", 3000, &tclosed),
                 PGD_HTTP_CLOSE_CLIENT_GONE);
    CHECK(tclosed - tc < 400);

    /* Without the watch (g_lim), pings find the vanished client. */
    REQUIRE(cl_open(&c, g_lim.port) == 0);
    cl_sends(&c, "GET /idle?id=p2 HTTP/1.1\r\nHost: x\r\n\r\n");
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&c, &r, mono_ms() + 2000) == 0);
    tc = mono_ms();
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_lim, "/idle?id=p2", 3000, &tclosed), PGD_HTTP_CLOSE_CLIENT_GONE);
    fprintf(stderr,
            "    idle SSE stream: client close noticed after %lld ms (pings every 500 ms, "
            "no watch)\n",
            (long long)(tclosed - tc));
    CHECK(tclosed - tc < 2000);

    /* Without the watch, a writing stream notices at its next writes. */
    REQUIRE(cl_open(&c, g_lim.port) == 0);
    cl_sends(&c, "GET /stream?n=1000&ms=50&id=ms2 HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(cl_find(&c, "data: 3\n\n", mono_ms() + 3000) >= 0);
    tc = mono_ms();
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_lim, "/stream?n=1000&ms=50&id=ms2", 3000, &tclosed),
                 PGD_HTTP_CLOSE_CLIENT_GONE);
    fprintf(stderr, "    writing stream: client close noticed after %lld ms (no watch)\n",
            (long long)(tclosed - tc));
    CHECK(tclosed - tc < 1000);
}

static void test_resume_from_callback(void) {
    /* Two idle streams; a third request's handler writes to both (inside MHD_run). */
    client a, b;
    REQUIRE(cl_open(&a, g_main.port) == 0);
    REQUIRE(cl_open(&b, g_main.port) == 0);
    cl_sends(&a, "GET /idle-noping?id=ra HTTP/1.1\r\nHost: x\r\n\r\n");
    cl_sends(&b, "GET /idle?id=rb HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&a, &r, mono_ms() + 2000) == 0);
    REQUIRE(cl_headers(&b, &r, mono_ms() + 2000) == 0);
    resp p;
    REQUIRE(fetch(g_main.port, "GET /poke HTTP/1.1\r\nHost: x\r\n\r\n", &p) == 0);
    CHECK_EQ_STR(body_str(&p), "2");
    resp_free(&p);
    CHECK_FIND(&a, "C\r\ndata: poke\n\n\r\n", 1000);
    CHECK_FIND(&b, "C\r\ndata: poke\n\n\r\n", 1000);
    cl_close(&a);
    cl_close(&b);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/idle-noping?id=ra", 3000, NULL),
                 PGD_HTTP_CLOSE_CLIENT_GONE);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/idle?id=rb", 3000, NULL), PGD_HTTP_CLOSE_CLIENT_GONE);
}

static void test_slow_client(void) {
    /* Trickles header lines, one byte per 100 ms: each byte resets MHD's 2 s idle timeout, the
     * 1.5 s request deadline cuts it off. */
    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    int64_t t0 = mono_ms(), closed = -1;
    const char *text = "GET /hello HTTP/1.1\r\nHost: x\r\n";
    size_t i = 0, tl = strlen(text);
    while (mono_ms() - t0 < 5000) {
        char ch = i < tl ? text[i] : "X-Pad: a\r\n"[(i - tl) % 10];
        i++;
        if (send(c.fd, &ch, 1, MSG_NOSIGNAL) != 1) {
            closed = mono_ms() - t0;
            break;
        }
        if (cl_fill(&c, 100) == 0) {
            closed = mono_ms() - t0;
            break;
        }
    }
    fprintf(stderr, "    header trickle: disconnected after %lld ms (%zu bytes sent)\n",
            (long long)closed, i);
    CHECK(closed >= 1300 && closed < 2600);
    CHECK_EQ_INT(cl_avail(&c), 0); /* no response, just closed */
    cl_close(&c);

    /* Same with the body. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    t0 = mono_ms();
    closed = -1;
    cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
    while (mono_ms() - t0 < 5000) {
        if (send(c.fd, "z", 1, MSG_NOSIGNAL) != 1 || cl_fill(&c, 100) == 0) {
            closed = mono_ms() - t0;
            break;
        }
    }
    fprintf(stderr, "    body trickle: disconnected after %lld ms\n", (long long)closed);
    CHECK(closed >= 1300 && closed < 2600);
    cl_close(&c);

    /* A silent connection goes too. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    t0 = mono_ms();
    CHECK_EQ_INT(cl_wait_eof(&c, 4000), 0);
    closed = mono_ms() - t0;
    CHECK(closed >= 1300 && closed < 2600);
    cl_close(&c);
}

static void test_connection_limit(void) {
    client c[5];
    resp r;
    for (int i = 0; i < 4; i++) {
        REQUIRE(cl_open(&c[i], g_lim.port) == 0);
        cl_sends(&c[i], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        CHECK_EQ_INT(cl_response(&c[i], &r, 2000), 0);
        CHECK_EQ_INT(r.status, 200);
        resp_free(&r);
    }
    counts k = ts_counts(&g_lim);
    CHECK_EQ_INT(k.conns, 4);
    /* The fifth is not served while four are open (it waits in the backlog or is closed). */
    int fifth_open = cl_open(&c[4], g_lim.port) == 0;
    int got = -1;
    if (fifth_open) {
        cl_sends(&c[4], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        got = cl_fill(&c[4], 500);
        CHECK(got <= 0); /* timeout (-1) or closed (0), never a response */
    }
    fprintf(stderr, "    connection limit: fifth connection %s\n",
            !fifth_open ? "refused"
            : got < 0   ? "waits unaccepted"
                        : "closed");
    /* At the limit, with four idle keep-alive connections and one waiting: no busy loop. */
    double c0 = cpu_seconds();
    sleep_ms(1000);
    double cpu_ms = (cpu_seconds() - c0) * 1000.0;
    fprintf(stderr, "    CPU over 1 s at the connection limit: %.2f ms\n", cpu_ms);
    CHECK(cpu_ms < 20.0);
    k = ts_counts(&g_lim);
    CHECK_EQ_INT(k.conns, 4);
    /* Free a slot: a waiting fifth is served now; else a new one is. */
    cl_close(&c[0]);
    if (fifth_open && got < 0) {
        CHECK_EQ_INT(cl_response(&c[4], &r, 3000), 0);
        CHECK_EQ_INT(r.status, 200);
        resp_free(&r);
        cl_close(&c[4]);
    } else {
        if (fifth_open) cl_close(&c[4]);
        sleep_ms(100);
        REQUIRE(fetch(g_lim.port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 0);
        CHECK_EQ_INT(r.status, 200);
        resp_free(&r);
    }
    for (int i = 1; i < 4; i++) cl_close(&c[i]);
}

static void test_many_streams(void) {
    enum { N = 100 };
    static client c[N];
    int before = ts_count_closes(&g_main, "/stream?n=5&ms=20&id=m", PGD_HTTP_CLOSE_COMPLETED);
    for (int i = 0; i < N; i++) {
        REQUIRE(cl_open(&c[i], g_main.port) == 0);
        char req[128];
        snprintf(req, sizeof req, "GET /stream?n=5&ms=20&id=m%d HTTP/1.1\r\nHost: x\r\n\r\n", i);
        cl_sends(&c[i], req);
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        resp r;
        if (cl_response(&c[i], &r, 5000) == 0 && r.status == 200 &&
            strcmp(body_str(&r), "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n") == 0)
            ok++;
        resp_free(&r);
        cl_close(&c[i]);
    }
    CHECK_EQ_INT(ok, N);
    int64_t deadline = mono_ms() + 3000;
    int done = 0;
    while (mono_ms() < deadline) {
        done =
            ts_count_closes(&g_main, "/stream?n=5&ms=20&id=m", PGD_HTTP_CLOSE_COMPLETED) - before;
        if (done >= N) break;
        sleep_ms(20);
    }
    CHECK_EQ_INT(done, N);
}

static void test_response_timeout(void) {
    /* g_lim has response_timeout_ms = 1500: a deferred answer that never comes. */
    client c;
    REQUIRE(cl_open(&c, g_lim.port) == 0);
    int64_t t0 = mono_ms();
    cl_sends(&c, "GET /defer-forever?id=rt HTTP/1.1\r\nHost: x\r\n\r\n");
    int64_t t = 0;
    CHECK_EQ_INT(ts_wait_close(&g_lim, "/defer-forever?id=rt", 4000, &t), PGD_HTTP_CLOSE_TIMEOUT);
    CHECK(t - t0 >= 1400 && t - t0 < 3000);
    CHECK_EQ_INT(cl_wait_eof(&c, 2000), 0);
    cl_close(&c);
}

/* CPU time of the whole process (both servers' loop threads; this thread sleeps) over 2 s. */
static double idle_cpu_ms(const char *what) {
    double c0 = cpu_seconds();
    sleep_ms(2000);
    double ms = (cpu_seconds() - c0) * 1000.0;
    fprintf(stderr, "    CPU over 2 s, %s: %.2f ms\n", what, ms);
    return ms;
}

static void test_cpu_idle(void) {
    sleep_ms(300); /* let earlier connections finish closing */
    counts k = ts_counts(&g_main);
    CHECK_EQ_INT(k.conns, 0);
    CHECK(idle_cpu_ms("idle servers, no connection") < 20.0);

    client c;
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "GET /idle-noping?id=cpu1 HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&c, &r, mono_ms() + 2000) == 0);
    CHECK(idle_cpu_ms("one suspended stream without pings") < 20.0);
    CHECK_EQ_INT(cl_avail(&c), 0);
    cl_close(&c);

    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "GET /idle?id=cpu2 HTTP/1.1\r\nHost: x\r\n\r\n");
    REQUIRE(cl_headers(&c, &r, mono_ms() + 2000) == 0);
    CHECK(idle_cpu_ms("one SSE stream pinging every 500 ms") < 30.0);
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/idle?id=cpu2", 3000, NULL), PGD_HTTP_CLOSE_CLIENT_GONE);
}

static void test_create(void) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    pgd_http_config cfg;
    pgd_http_config_init(&cfg);
    cfg.port = g_main.port;
    cfg.handler = test_handler;
    pgd_http_server *srv = NULL;
    CHECK_EQ_INT(pgd_http_server_create(&loop, &cfg, &srv), PGD_EIO);
    CHECK(srv == NULL);
    cfg.handler = NULL;
    CHECK_EQ_INT(pgd_http_server_create(&loop, &cfg, &srv), PGD_EINVAL);
    cfg.handler = test_handler;
    cfg.port = 0;
    cfg.host = "no.such.host.invalid";
    CHECK_EQ_INT(pgd_http_server_create(&loop, &cfg, &srv), PGD_EINVAL);
    /* A name and an IPv6 address (where the host has IPv6), created and destroyed unused. */
    cfg.host = "localhost";
    CHECK_EQ_INT(pgd_http_server_create(&loop, &cfg, &srv), 0);
    if (srv) CHECK(pgd_http_server_port(srv) != 0);
    pgd_http_server_destroy(srv);
    cfg.host = "::1";
    srv = NULL;
    int rc6 = pgd_http_server_create(&loop, &cfg, &srv);
    if (rc6 == 0) {
        resp r;
        client c;
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons(pgd_http_server_port(srv));
        a6.sin6_addr = in6addr_loopback;
        CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a6, sizeof a6) == 0);
        pgd_http_server_destroy(srv);
        uv_run(&loop, UV_RUN_DEFAULT);
        memset(&c, 0, sizeof c);
        c.fd = fd;
        CHECK(cl_response(&c, &r, 1000) == -2); /* closed at destroy without an answer */
        resp_free(&r);
        cl_close(&c);
    } else {
        fprintf(stderr, "    no IPv6 here (%s)\n", pgd_error_detail());
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

static void test_graceful_stop(void) {
    /* Two streams, a deferred request, an idle keep-alive connection. */
    client s1, s2, d, ka;
    resp r;
    REQUIRE(cl_open(&s1, g_main.port) == 0);
    REQUIRE(cl_open(&s2, g_main.port) == 0);
    REQUIRE(cl_open(&d, g_main.port) == 0);
    REQUIRE(cl_open(&ka, g_main.port) == 0);
    cl_sends(&s1, "GET /idle?id=g1 HTTP/1.1\r\nHost: x\r\n\r\n");
    cl_sends(&s2, "GET /idle-noping?id=g2 HTTP/1.1\r\nHost: x\r\n\r\n");
    cl_sends(&d, "GET /defer-forever?id=g3 HTTP/1.1\r\nHost: x\r\n\r\n");
    cl_sends(&ka, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    REQUIRE(cl_response(&ka, &r, 2000) == 0);
    resp_free(&r);
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&s1, &r, mono_ms() + 2000) == 0);
    REQUIRE(cl_headers(&s2, &r, mono_ms() + 2000) == 0);

    ts_call(&g_main, fn_stop_accepting, NULL);
    client x;
    CHECK(cl_open(&x, g_main.port) != 0 && errno == ECONNREFUSED);
    /* Existing connections still work, now with Connection: close. */
    cl_sends(&ka, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ_INT(cl_response(&ka, &r, 2000), 0);
    CHECK_EQ_INT(r.status, 200);
    char v[64];
    CHECK(head_get(r.head, "Connection", v, sizeof v) && strcasecmp(v, "close") == 0);
    resp_free(&r);
    CHECK_EQ_INT(cl_wait_eof(&ka, 2000), 0);
    cl_close(&ka);

    /* The routes end their streams. */
    ts_call(&g_main, fn_end_streams, NULL);
    CHECK_FIND(&s1, "B\r\ndata: bye\n\n\r\n0\r\n\r\n", 2000);
    CHECK_FIND(&s2, "B\r\ndata: bye\n\n\r\n0\r\n\r\n", 2000);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/idle?id=g1", 2000, NULL), PGD_HTTP_CLOSE_COMPLETED);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/idle-noping?id=g2", 2000, NULL),
                 PGD_HTTP_CLOSE_COMPLETED);
    cl_close(&s1);
    cl_close(&s2);

    /* Destroy: the deferred request gets 503, the loop thread returns. */
    int64_t took = -1;
    ts_stop(&g_main, &took);
    fprintf(stderr, "    destroy took %lld ms\n", (long long)took);
    CHECK(took >= 0 && took < 1000);
    CHECK_EQ_INT(cl_response(&d, &r, 2000), 0);
    CHECK_EQ_INT(r.status, 503);
    CHECK(strstr(body_str(&r), "shutting down") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(cl_wait_eof(&d, 2000), 0);
    cl_close(&d);
    CHECK_EQ_INT(ts_wait_close(&g_main, "/defer-forever?id=g3", 100, NULL),
                 PGD_HTTP_CLOSE_COMPLETED);
}

static void test_destroy_with_streams(void) {
    /* g_lim: destroy with a stream the routes never ended. */
    client s;
    REQUIRE(cl_open(&s, g_lim.port) == 0);
    cl_sends(&s, "GET /stream?n=1000&ms=50&id=x1 HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(cl_find(&s, "data: 2\n\n", mono_ms() + 3000) >= 0);
    int64_t took = -1;
    ts_stop(&g_lim, &took);
    CHECK(took >= 0 && took < 1000);
    CHECK_EQ_INT(cl_wait_eof(&s, 2000), 0);
    /* No terminating chunk: the client sees a truncated stream. */
    CHECK(memmem(s.in.data, s.in.len, "\r\n0\r\n\r\n", 7) == NULL);
    cl_close(&s);
    CHECK_EQ_INT(ts_wait_close(&g_lim, "/stream?n=1000&ms=50&id=x1", 100, NULL),
                 PGD_HTTP_CLOSE_SHUTDOWN);
}

static void serve_forever(int port) {
    pgd_http_config cfg;
    pgd_http_config_init(&cfg);
    cfg.port = (uint16_t)port;
    cfg.log_errors = 1;
    static tserver ts;
    if (ts_start(&ts, &cfg) != 0) {
        fprintf(stderr, "cannot start: %s\n", pgd_error_detail());
        exit(1);
    }
    printf(
        "serving on http://127.0.0.1:%u (try: curl -N 'http://127.0.0.1:%u/stream?n=5&ms=500')\n",
        ts.port, ts.port);
    fflush(stdout);
    pthread_join(ts.thread, NULL);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "--serve") == 0) {
        serve_forever(atoi(argv[2]));
        return 0;
    }
    pgd_http_config cfg;
    pgd_http_config_init(&cfg);
    cfg.ping_interval_ms = 500;
    cfg.idle_timeout_s = 2;
    cfg.request_timeout_ms = 1500;
    cfg.max_body_bytes = 1u << 20;
    cfg.max_stream_buffer = 1u << 20;
    cfg.error_body = test_error_body;
    if (ts_start(&g_main, &cfg) != 0) {
        fprintf(stderr, "cannot start the test server: %s\n", pgd_error_detail());
        return 1;
    }
    pgd_http_config_init(&cfg);
    cfg.max_connections = 4;
    cfg.watch_disconnect = 0;
    cfg.ping_interval_ms = 500;
    cfg.idle_timeout_s = 10;
    cfg.request_timeout_ms = 10000;
    cfg.response_timeout_ms = 1500;
    if (ts_start(&g_lim, &cfg) != 0) {
        fprintf(stderr, "cannot start the second test server: %s\n", pgd_error_detail());
        return 1;
    }
    CHECK(g_main.port != 0 && g_lim.port != 0 && g_main.port != g_lim.port);

    RUN(test_get);
    RUN(test_post_echo);
    RUN(test_chunked_upload);
    RUN(test_not_found_and_retry);
    RUN(test_too_large);
    RUN(test_keep_alive);
    RUN(test_deferred);
    RUN(test_stream_sse);
    RUN(test_stream_abort);
    RUN(test_big_stream);
    RUN(test_client_not_reading);
    RUN(test_pings_and_abort);
    RUN(test_resume_from_callback);
    RUN(test_slow_client);
    RUN(test_connection_limit);
    RUN(test_many_streams);
    RUN(test_response_timeout);
    RUN(test_cpu_idle);
    RUN(test_create);
    RUN(test_graceful_stop);
    RUN(test_destroy_with_streams);
    return test_summary();
}
