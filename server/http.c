/*
 * server/http.c — libmicrohttpd driven by the libuv loop; requests, deferred answers, streams,
 * pings, deadlines and shutdown. The contract is in server/http.h.
 *
 * Owns: the MHD daemon (epoll mode, no thread of its own, suspend/resume allowed), three uv
 * handles (a uv_poll_t on MHD's epoll fd, a uv_timer_t following MHD_get_timeout, and the
 * housekeeping timer `tick` for pings and the server's own deadlines), one http_conn per open
 * connection (from MHD_OPTION_NOTIFY_CONNECTION) and one pgd_http_request per request (created by
 * MHD_OPTION_URI_LOG_CALLBACK when the request line is parsed, freed after
 * MHD_OPTION_NOTIFY_COMPLETED), plus one malloc'd uv_poll_t per request whose connection was
 * suspended at least once (the disconnect watch; freed by its close callback).
 *
 * Invariants:
 *   - MHD_run is only called from the uv callbacks of this file and from the drain loop of
 *     pgd_http_server_destroy (never from another API function), so API functions may be called
 *     from inside MHD callbacks without re-entering MHD. Every MHD_resume_connection and every
 *     closed connection is followed by an MHD_run soon (mhd_kick).
 *   - req->suspended is true exactly when this file called MHD_suspend_connection and not yet
 *     MHD_resume_connection. Suspension happens only inside MHD's callbacks (the access handler
 *     when the route has not answered yet; the content reader when a stream has no pending
 *     bytes), as MHD requires; resumption anywhere on the loop thread.
 *   - A response is queued only from the access handler: an answer given later is kept in
 *     req->resp and the connection resumed, and MHD calls the access handler again.
 *   - An aborted request (abort_reason >= 0) never gets data again: the access handler returns
 *     MHD_NO and the content reader MHD_CONTENT_READER_END_WITH_ERROR, so MHD closes it.
 *   - Bytes are written on a connection's socket behind MHD's back only where MHD writes
 *     nothing for the request and the connection then closes (raw_answer: 413 in the middle of
 *     a body, a JSON answer in place of MHD's to a malformed Content-Length), or as an interim
 *     1xx before any answer (probe_peer, on a suspended connection).
 *   - The housekeeping timer is armed whenever some connection is receiving a request (deadline)
 *     or some handled request has a ping or response deadline; it never runs otherwise (an idle
 *     server or a stream without pings costs no wake-ups at all).
 *   - Before MHD_stop_daemon no connection is suspended (MHD forbids it).
 *
 * Threading: the loop thread only (see server/http.h).
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/error.h"

#define PING_TEXT     ": ping\n\n"
#define PING_EARLY_MS 50 /* a ping due this soon is sent now (coalesces wake-ups) */
#define STREAM_BLOCK  (16 * 1024)
#define MAX_TIMER_MS  (3600u * 1000u)
#define DRAIN_POLL_MS 50
/* While a request's body is being received (or read on past the limit, its 413 sent): how often
 * the server looks for the client's end of file, which libmicrohttpd may not see (tick_cb). */
#define EOF_POLL_MS 200

enum { ANS_NONE, ANS_PENDING, ANS_QUEUED };

typedef struct http_conn http_conn;

struct pgd_http_stream {
    pgd_http_request *req;
};

struct pgd_http_request {
    pgd_http_request *prev, *next; /* srv->reqs */
    pgd_http_server *srv;
    http_conn *conn; /* NULL if the connection's context could not be allocated */
    struct MHD_Connection *mc;
    char *uri;           /* raw request target (copy) */
    char *method, *path; /* copies (one allocation, method first) */
    const char *query;   /* into uri, after '?'; or "" */
    pgd_buf body;
    bool headers_seen; /* access handler saw the headers */
    bool http11;       /* an HTTP/1.1 request (1xx interim responses allowed) */
    bool handled;      /* route handler called */
    bool too_big;      /* body over the limit: 413 sent (raw_answered), the rest dropped */
    size_t dropped;    /* too_big: body bytes past the limit so far */
    bool raw_answered; /* answered on the socket behind MHD's back (raw_answer): MHD must
                          send nothing more; the connection closes */
    bool peer_eof;     /* the client finished sending (FIN): see the disconnect watch */
    bool oom;          /* body could not be stored: 500 at the end */
    bool in_handler;   /* inside the route handler */
    bool suspended;    /* see the invariants */
    bool streaming, ended, ping;
    int answer;                /* ANS_* */
    struct MHD_Response *resp; /* ANS_PENDING: response to queue */
    unsigned status;
    int abort_reason; /* -1, or the pgd_http_close_reason to report */
    pgd_buf out;      /* stream: bytes written, [out_off, out.len) not yet given to MHD */
    size_t out_off;
    uint64_t t_start, t_handled, t_last_write; /* uv_now ms */
    char *note;                                /* pgd_http_request_set_note, or NULL */
    pgd_http_close_fn on_close;
    void *on_close_arg;
    uv_poll_t *watch; /* disconnect watch, or NULL */
    pgd_buf extra;    /* headers every answer carries: "name\0value\0" pairs */
    char remote[64];
    pgd_http_stream stream;
};

struct http_conn {
    http_conn *prev, *next; /* srv->conns */
    int fd;
    bool receiving; /* waiting for (the rest of) a request: the deadline applies */
    bool killed;    /* shut down by the server (deadline, shutdown) */
    uint64_t wait_since;
    pgd_http_request *req; /* request being served, or NULL */
};

struct pgd_http_server {
    uv_loop_t *loop;
    pgd_http_config cfg;
    char *host;
    struct MHD_Daemon *mhd;
    int epoll_fd;
    uint16_t port;
    uv_poll_t poll;
    uv_timer_t mhd_timer, tick;
    int handles_open; /* uv handles not yet closed; srv is freed when it drops to 0 */
    bool poll_inited;
    bool accepting, closing, in_mhd;
    bool kick; /* a connection was resumed: MHD_run must run again soon */
    bool tick_armed;
    uint64_t tick_due;
    http_conn *conns;
    unsigned n_conns;
    pgd_http_request *reqs;
    unsigned n_active; /* handled, not completed */
};

#define LIST_PUSH(head, node)                                                                      \
    do {                                                                                           \
        (node)->prev = NULL;                                                                       \
        (node)->next = (head);                                                                     \
        if (head) (head)->prev = (node);                                                           \
        (head) = (node);                                                                           \
    } while (0)

#define LIST_REMOVE(head, node)                                                                    \
    do {                                                                                           \
        if ((node)->prev)                                                                          \
            (node)->prev->next = (node)->next;                                                     \
        else                                                                                       \
            (head) = (node)->next;                                                                 \
        if ((node)->next) (node)->next->prev = (node)->prev;                                       \
        (node)->prev = (node)->next = NULL;                                                        \
    } while (0)

const char *pgd_http_close_reason_name(pgd_http_close_reason reason) {
    switch (reason) {
    case PGD_HTTP_CLOSE_COMPLETED:
        return "completed";
    case PGD_HTTP_CLOSE_CLIENT_GONE:
        return "client_gone";
    case PGD_HTTP_CLOSE_TIMEOUT:
        return "timeout";
    case PGD_HTTP_CLOSE_SHUTDOWN:
        return "shutdown";
    case PGD_HTTP_CLOSE_ERROR:
        return "error";
    }
    return "unknown";
}

void pgd_http_config_init(pgd_http_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->max_body_bytes = 4u << 20;
    cfg->max_connections = 1024;
    cfg->idle_timeout_s = 30;
    cfg->request_timeout_ms = 60000;
    cfg->ping_interval_ms = 1000;
    cfg->max_stream_buffer = 16u << 20;
    cfg->connection_memory = 128u << 10;
    cfg->max_url_bytes = 16u << 10;
    cfg->max_head_bytes = 32u << 10;
    cfg->listen_backlog = 511;
    cfg->drain_timeout_ms = 3000;
    cfg->watch_disconnect = 1;
}

static uint64_t now_ms(pgd_http_server *srv) {
    return uv_now(srv->loop);
}

static void tick_cb(uv_timer_t *t);

/* Make sure the housekeeping timer fires no later than `due` (uv_now ms). */
static void tick_schedule(pgd_http_server *srv, uint64_t due) {
    if (srv->closing) return;
    if (srv->tick_armed && srv->tick_due <= due) return;
    uint64_t now = now_ms(srv);
    uint64_t delay = due > now ? due - now : 0;
    if (delay > MAX_TIMER_MS) delay = MAX_TIMER_MS;
    srv->tick_armed = true;
    srv->tick_due = now + delay;
    uv_timer_start(&srv->tick, tick_cb, delay, 0);
}

static http_conn *conn_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (http_conn *)ci->socket_context : NULL;
}

/* --- the disconnect watch --- */

static void req_abort(pgd_http_request *req, int reason);
static void req_resume(pgd_http_request *req);
static int stream_append(pgd_http_request *req, const void *data, size_t len);

#define PROBE_TEXT "HTTP/1.1 100 Continue\r\n\r\n"

static void watch_free_cb(uv_handle_t *h) {
    free(h);
}

/* The client finished sending (FIN): a half-close (shutdown(SHUT_WR), `nc -N`) or a close,
 * which look the same until something is written — a closed socket answers data with a reset.
 * So write something harmless now: a request still waiting for its answer gets an interim
 * "100 Continue" (HTTP/1.1 allows unsolicited 1xx responses before the final one); an SSE
 * stream gets a ping at once. A reset then ends the request through the watch; a half-closed
 * client reads on. Other answers (HTTP/1.0, a response being sent, a stream without pings) find
 * out at their next write. */
static void probe_peer(pgd_http_request *req) {
    if (req->answer == ANS_NONE && req->http11 && !req->raw_answered) {
        ssize_t n =
            send(req->conn->fd, PROBE_TEXT, sizeof PROBE_TEXT - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n != (ssize_t)(sizeof PROBE_TEXT - 1)) req_abort(req, PGD_HTTP_CLOSE_CLIENT_GONE);
    } else if (req->streaming && req->ping && !req->ended && req->out.len == req->out_off) {
        if (stream_append(req, PING_TEXT, sizeof PING_TEXT - 1) == 0) {
            req->t_last_write = now_ms(req->srv);
            req_resume(req);
        }
    }
}

/* Phase 1 (UV_DISCONNECT: FIN, reset or error): a reset or an error is a client gone; a FIN
 * is only the end of its sending (see probe_peer): from then on the watch looks for errors
 * only (UV_PRIORITIZED, under which epoll still reports errors and hang-ups), and phase 2
 * takes any event as the client gone. */
static void watch_cb(uv_poll_t *h, int status, int events) {
    pgd_http_request *req = h->data;
    (void)events;
    if (!req || !req->conn || req->conn->fd < 0) {
        uv_poll_stop(h);
        return;
    }
    if (status < 0 || req->peer_eof) {
        uv_poll_stop(h);
        req_abort(req, PGD_HTTP_CLOSE_CLIENT_GONE);
        return;
    }
    char b;
    ssize_t n = recv(req->conn->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        uv_poll_stop(h);
        req_abort(req, PGD_HTTP_CLOSE_CLIENT_GONE); /* reset */
        return;
    }
    /* n == 0: end of file; n > 0: bytes (a pipelined request) before the FIN. A stream
     * without pings has nothing to probe with and might never write again: for it a FIN is
     * the client gone, as before. */
    if (req->streaming && !req->ping && !req->ended) {
        uv_poll_stop(h);
        req_abort(req, PGD_HTTP_CLOSE_CLIENT_GONE);
        return;
    }
    req->peer_eof = true;
    if (uv_poll_start(h, UV_PRIORITIZED, watch_cb) != 0) uv_poll_stop(h);
    probe_peer(req);
}

static void watch_start(pgd_http_request *req) {
    pgd_http_server *srv = req->srv;
    if (!srv->cfg.watch_disconnect || req->watch || !req->conn || req->conn->fd < 0) return;
    uv_poll_t *w = malloc(sizeof *w);
    if (!w) return; /* the pings still notice a vanished client */
    if (uv_poll_init(srv->loop, w, req->conn->fd) != 0) {
        free(w);
        return;
    }
    w->data = req;
    req->watch = w;
    if (uv_poll_start(w, UV_DISCONNECT, watch_cb) != 0) uv_poll_stop(w);
}

/* Before the connection's fd can be closed: stop and release the watch. */
static void watch_close(pgd_http_request *req) {
    if (!req->watch) return;
    uv_poll_stop(req->watch);
    req->watch->data = NULL;
    uv_close((uv_handle_t *)req->watch, watch_free_cb);
    req->watch = NULL;
}

/* --- suspend / resume / abort --- */

/* Only from MHD's access handler or content reader for this request. */
static void req_suspend(pgd_http_request *req) {
    MHD_suspend_connection(req->mc);
    req->suspended = true;
    watch_start(req);
}

static void mhd_timer_cb(uv_timer_t *t);

/* In external-polling mode a resumed connection is only processed by a later MHD_run, and
 * nothing wakes the loop for it (libmicrohttpd 0.9.75 keeps its inter-thread channel out of the
 * epoll set we poll; its docs ask for MHD_run after MHD_resume_connection): run it soon. Also
 * used when a connection closed, since MHD re-arms a listening socket paused at the connection
 * limit only in its next run. */
static void mhd_kick(pgd_http_server *srv) {
    srv->kick = true;
    if (!srv->in_mhd && !srv->closing) uv_timer_start(&srv->mhd_timer, mhd_timer_cb, 0, 0);
}

static void req_resume(pgd_http_request *req) {
    if (!req->suspended) return;
    req->suspended = false;
    MHD_resume_connection(req->mc);
    mhd_kick(req->srv);
}

static void req_abort(pgd_http_request *req, int reason) {
    if (req->abort_reason >= 0) return;
    req->abort_reason = reason;
    if (req->in_handler || !req->handled) return; /* the access handler sees the flag */
    if (req->suspended) {
        req_resume(req); /* the access handler or the reader sees the flag */
    } else if (req->conn && req->conn->fd >= 0) {
        /* MHD is sending (or waiting to send) to this client: cut it off; MHD notices at its
         * next read or write and closes the connection. */
        shutdown(req->conn->fd, SHUT_RDWR);
    }
}

void pgd_http_request_abort(pgd_http_request *req) {
    req_abort(req, PGD_HTTP_CLOSE_ERROR);
}

/* --- responses --- */

static void json_escape(pgd_buf *out, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            pgd_buf_append(out, e, 2);
        } else if (c < 0x20) {
            pgd_buf_printf(out, "\\u%04x", c);
        } else {
            pgd_buf_append(out, s, 1);
        }
    }
}

static int error_body(pgd_http_server *srv, int status, const char *message, pgd_buf *out) {
    if (srv->cfg.error_body) {
        size_t len0 = out->len;
        if (srv->cfg.error_body(srv->cfg.error_body_arg, status, message, out) == 0 && out->data)
            return 0;
        out->len = len0;
    }
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    if (pgd_buf_puts(out, "{\"error\":{\"message\":\"") != 0) return PGD_ENOMEM;
    json_escape(out, message ? message : "");
    return pgd_buf_printf(out, "\",\"type\":\"%s\",\"param\":null,\"code\":null}}", type);
}

/* Adds Content-Type, the request's own headers (pgd_http_request_set_header; req may be NULL),
 * the caller's headers and, once the server stops accepting, "Connection: close". */
static int add_headers(pgd_http_server *srv, pgd_http_request *req, struct MHD_Response *r,
                       const char *content_type, const pgd_http_header *headers, size_t n_headers,
                       bool force_close) {
    for (size_t off = 0; req && off < req->extra.len;) {
        const char *name = req->extra.data + off, *value = name + strlen(name) + 1;
        off = (size_t)(value - req->extra.data) + strlen(value) + 1;
        if (MHD_add_response_header(r, name, value) != MHD_YES)
            return pgd_error_set(PGD_EINVAL, "http: bad response header \"%s\"", name);
    }
    if (content_type &&
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) != MHD_YES)
        return pgd_error_set(PGD_EINVAL, "http: bad Content-Type \"%s\"", content_type);
    for (size_t i = 0; i < n_headers; i++) {
        if (!headers[i].name || !headers[i].value ||
            MHD_add_response_header(r, headers[i].name, headers[i].value) != MHD_YES)
            return pgd_error_set(PGD_EINVAL, "http: bad response header \"%s\"",
                                 headers[i].name ? headers[i].name : "(null)");
    }
    if ((force_close || !srv->accepting) &&
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)
        return PGD_ENOMEM;
    return 0;
}

static struct MHD_Response *make_buffer_response(pgd_http_server *srv, pgd_http_request *req,
                                                 const char *content_type, const void *body,
                                                 size_t len, const pgd_http_header *headers,
                                                 size_t n_headers, bool force_close, int *err) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(len ? body : ""), MHD_RESPMEM_MUST_COPY);
    if (!r) {
        *err = PGD_ENOMEM;
        return NULL;
    }
    *err = add_headers(srv, req, r, content_type, headers, n_headers, force_close);
    if (*err) {
        MHD_destroy_response(r);
        return NULL;
    }
    return r;
}

static struct MHD_Response *make_error_response(pgd_http_server *srv, pgd_http_request *req,
                                                int status, const char *message,
                                                const pgd_http_header *headers, size_t n_headers,
                                                bool force_close, int *err) {
    pgd_buf b = PGD_BUF_INIT;
    if (error_body(srv, status, message, &b) != 0) {
        pgd_buf_free(&b);
        *err = PGD_ENOMEM;
        return NULL;
    }
    struct MHD_Response *r = make_buffer_response(srv, req, "application/json", b.data, b.len,
                                                  headers, n_headers, force_close, err);
    pgd_buf_free(&b);
    return r;
}

static int check_answerable(pgd_http_request *req, int status) {
    if (!req->handled || req->answer != ANS_NONE)
        return pgd_error_set(PGD_EINVAL, "http: request already answered");
    if (status < 100 || status > 999)
        return pgd_error_set(PGD_EINVAL, "http: bad status %d", status);
    if (req->abort_reason >= 0) return PGD_ECANCELED;
    return 0;
}

/* Keep `r` for the access handler (now if inside the handler, else after the resume). */
static void set_answer(pgd_http_request *req, struct MHD_Response *r, int status) {
    req->resp = r;
    req->status = (unsigned)status;
    req->answer = ANS_PENDING;
    if (!req->in_handler) req_resume(req);
}

int pgd_http_request_set_header(pgd_http_request *req, const char *name, const char *value) {
    if (!name || !*name || !value || strpbrk(name, ":\r\n") || strpbrk(value, "\r\n"))
        return pgd_error_set(PGD_EINVAL, "http: bad response header \"%s\"", name ? name : "");
    /* drop an earlier value of the same name, then append */
    pgd_buf kept = PGD_BUF_INIT;
    int rc = 0;
    for (size_t off = 0; off < req->extra.len && !rc;) {
        const char *n = req->extra.data + off, *v = n + strlen(n) + 1;
        size_t len = (size_t)(v - n) + strlen(v) + 1;
        if (strcasecmp(n, name)) rc = pgd_buf_append(&kept, n, len);
        off += len;
    }
    if (!rc) rc = pgd_buf_append(&kept, name, strlen(name) + 1);
    if (!rc) rc = pgd_buf_append(&kept, value, strlen(value) + 1);
    if (rc) {
        pgd_buf_free(&kept);
        return PGD_ENOMEM;
    }
    pgd_buf_free(&req->extra);
    req->extra = kept;
    return 0;
}

int pgd_http_respond(pgd_http_request *req, int status, const char *content_type, const void *body,
                     size_t len, const pgd_http_header *headers, size_t n_headers) {
    int rc = check_answerable(req, status);
    if (rc) return rc;
    struct MHD_Response *r = make_buffer_response(req->srv, req, content_type, body, len, headers,
                                                  n_headers, false, &rc);
    if (!r) return rc;
    set_answer(req, r, status);
    return 0;
}

int pgd_http_respond_error(pgd_http_request *req, int status, const char *message,
                           const pgd_http_header *headers, size_t n_headers) {
    int rc = check_answerable(req, status);
    if (rc) return rc;
    struct MHD_Response *r =
        make_error_response(req->srv, req, status, message, headers, n_headers, false, &rc);
    if (!r) return rc;
    set_answer(req, r, status);
    return 0;
}

/* --- streams --- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    pgd_http_request *req = cls;
    (void)pos;
    if (req->abort_reason >= 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t avail = req->out.len - req->out_off;
    if (avail > 0) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, req->out.data + req->out_off, n);
        req->out_off += n;
        if (req->out_off == req->out.len) {
            pgd_buf_reset(&req->out);
            req->out_off = 0;
        }
        return (ssize_t)n;
    }
    if (req->ended) return MHD_CONTENT_READER_END_OF_STREAM;
    req_suspend(req); /* MHD's documented pattern: suspend and return 0 */
    return 0;
}

int pgd_http_stream_start(pgd_http_request *req, int status, const char *content_type,
                          const pgd_http_header *headers, size_t n_headers, unsigned flags,
                          pgd_http_stream **out) {
    *out = NULL;
    int rc = check_answerable(req, status);
    if (rc) return rc;
    pgd_http_server *srv = req->srv;
    bool sse = (flags & PGD_HTTP_STREAM_SSE) != 0;
    if (!content_type && sse) content_type = "text/event-stream";
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_reader, req, NULL);
    if (!r) return PGD_ENOMEM;
    rc = add_headers(srv, req, r, content_type, headers, n_headers, false);
    if (!rc && sse &&
        (MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") != MHD_YES ||
         MHD_add_response_header(r, "X-Accel-Buffering", "no") != MHD_YES))
        rc = PGD_ENOMEM;
    if (rc) {
        MHD_destroy_response(r);
        return rc;
    }
    req->streaming = true;
    req->ping = sse && !(flags & PGD_HTTP_STREAM_NO_PING) && srv->cfg.ping_interval_ms > 0;
    req->t_last_write = now_ms(srv);
    req->stream.req = req;
    set_answer(req, r, status);
    if (req->ping) tick_schedule(srv, req->t_last_write + srv->cfg.ping_interval_ms);
    *out = &req->stream;
    return 0;
}

/* Appends to the pending bytes, compacting the consumed prefix first when it is large. */
static int stream_append(pgd_http_request *req, const void *data, size_t len) {
    if (req->out_off > 0 && req->out_off >= req->out.len / 2) {
        memmove(req->out.data, req->out.data + req->out_off, req->out.len - req->out_off);
        req->out.len -= req->out_off;
        req->out_off = 0;
    }
    return pgd_buf_append(&req->out, data, len);
}

int pgd_http_stream_write(pgd_http_stream *s, const void *data, size_t len) {
    pgd_http_request *req = s->req;
    if (req->abort_reason >= 0) return PGD_ECANCELED;
    if (req->ended) return pgd_error_set(PGD_EINVAL, "http: write after end of stream");
    if (len == 0) return 0;
    size_t pending = req->out.len - req->out_off;
    if (pending + len > req->srv->cfg.max_stream_buffer) {
        req_abort(req, PGD_HTTP_CLOSE_CLIENT_GONE);
        return pgd_error_set(PGD_EFULL, "http: client is not reading (%zu bytes pending)", pending);
    }
    if (stream_append(req, data, len) != 0) return PGD_ENOMEM;
    req->t_last_write = now_ms(req->srv);
    req_resume(req);
    return 0;
}

int pgd_http_stream_end(pgd_http_stream *s) {
    pgd_http_request *req = s->req;
    if (req->abort_reason >= 0) return PGD_ECANCELED;
    if (req->ended) return pgd_error_set(PGD_EINVAL, "http: stream already ended");
    req->ended = true;
    req_resume(req);
    return 0;
}

/* --- request accessors --- */

const char *pgd_http_request_method(const pgd_http_request *req) {
    return req->method ? req->method : "";
}

const char *pgd_http_request_path(const pgd_http_request *req) {
    return req->path ? req->path : "";
}

const char *pgd_http_request_query(const pgd_http_request *req) {
    return req->query;
}

const char *pgd_http_request_query_arg(const pgd_http_request *req, const char *key) {
    return MHD_lookup_connection_value(req->mc, MHD_GET_ARGUMENT_KIND, key);
}

const char *pgd_http_request_header(const pgd_http_request *req, const char *name) {
    return MHD_lookup_connection_value(req->mc, MHD_HEADER_KIND, name);
}

pgd_str pgd_http_request_body(const pgd_http_request *req) {
    pgd_str s = {req->body.data ? req->body.data : "", req->body.len};
    return s;
}

const char *pgd_http_request_remote(pgd_http_request *req) {
    if (req->remote[0]) return req->remote;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return "";
    const struct sockaddr *sa = ci->client_addr;
    char ip[INET6_ADDRSTRLEN] = "";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(req->remote, sizeof req->remote, "%s:%u", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(req->remote, sizeof req->remote, "[%s]:%u", ip, ntohs(in6->sin6_port));
    }
    return req->remote;
}

int pgd_http_request_set_note(pgd_http_request *req, const char *note) {
    char *copy = strdup(note ? note : "");
    if (!copy) return PGD_ENOMEM;
    free(req->note);
    req->note = copy;
    return 0;
}

const char *pgd_http_request_note(const pgd_http_request *req) {
    return req->note ? req->note : "";
}

pgd_http_server *pgd_http_request_server(const pgd_http_request *req) {
    return req->srv;
}

void pgd_http_request_set_on_close(pgd_http_request *req, pgd_http_close_fn fn, void *arg) {
    req->on_close = fn;
    req->on_close_arg = arg;
}

/* --- MHD callbacks --- */

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    pgd_http_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        http_conn *c = calloc(1, sizeof *c);
        *socket_context = c;
        if (!c) return; /* served without the request deadline */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        c->receiving = true;
        c->wait_since = now_ms(srv);
        LIST_PUSH(srv->conns, c);
        srv->n_conns++;
        if (srv->cfg.request_timeout_ms)
            tick_schedule(srv, c->wait_since + srv->cfg.request_timeout_ms);
    } else {
        http_conn *c = *socket_context;
        *socket_context = NULL;
        if (!c) return;
        if (c->req) {
            if (c->req->watch) watch_close(c->req); /* the fd is about to close */
            c->req->conn = NULL;
        }
        LIST_REMOVE(srv->conns, c);
        srv->n_conns--;
        free(c);
        mhd_kick(srv); /* a slot is free: see mhd_kick */
    }
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc) {
    pgd_http_server *srv = cls;
    pgd_http_request *req = calloc(1, sizeof *req);
    if (!req) return NULL;
    req->uri = strdup(uri ? uri : "");
    if (!req->uri) {
        free(req);
        return NULL;
    }
    char *q = strchr(req->uri, '?');
    req->query = q ? q + 1 : "";
    req->srv = srv;
    req->mc = mc;
    req->abort_reason = -1;
    req->conn = conn_of(mc);
    if (req->conn) req->conn->req = req;
    req->t_start = now_ms(srv);
    if (srv->cfg.on_done) pgd_http_request_remote(req); /* kept for the access log */
    LIST_PUSH(srv->reqs, req);
    return req;
}

static void req_free(pgd_http_request *req) {
    if (req->resp) MHD_destroy_response(req->resp);
    pgd_buf_free(&req->body);
    pgd_buf_free(&req->out);
    pgd_buf_free(&req->extra);
    free(req->method);
    free(req->uri);
    free(req->note);
    free(req);
}

/* The request is over: report it once and free it. */
static void req_finish(pgd_http_server *srv, pgd_http_request *req, pgd_http_close_reason why) {
    watch_close(req);
    if (req->conn && req->conn->req == req) req->conn->req = NULL;
    LIST_REMOVE(srv->reqs, req);
    if (req->handled) srv->n_active--;
    req->suspended = false;
    if (req->abort_reason < 0) req->abort_reason = (int)why; /* writes now fail: ECANCELED */
    if (req->on_close) req->on_close(req, why, req->on_close_arg);
    if (srv->cfg.on_done) {
        pgd_http_done d = {.method = req->method ? req->method : "",
                           .path = req->path ? req->path : "",
                           .remote = req->remote,
                           .status =
                               req->answer == ANS_QUEUED || req->raw_answered ? req->status : 0,
                           .reason = why,
                           .ms = now_ms(srv) - req->t_start,
                           .note = req->note ? req->note : ""};
        srv->cfg.on_done(srv->cfg.on_done_arg, &d);
    }
    req_free(req);
}

static pgd_http_close_reason map_termination(enum MHD_RequestTerminationCode toe) {
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return PGD_HTTP_CLOSE_COMPLETED;
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return PGD_HTTP_CLOSE_TIMEOUT;
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return PGD_HTTP_CLOSE_SHUTDOWN;
    case MHD_REQUEST_TERMINATED_WITH_ERROR:
    case MHD_REQUEST_TERMINATED_READ_ERROR:
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
    default:
        return PGD_HTTP_CLOSE_CLIENT_GONE;
    }
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    pgd_http_server *srv = cls;
    pgd_http_request *req = *con_cls;
    *con_cls = NULL;
    http_conn *c = conn_of(mc);
    if (c) {
        /* A keep-alive connection now waits for its next request. */
        c->receiving = !c->killed;
        c->wait_since = now_ms(srv);
        if (c->receiving && srv->cfg.request_timeout_ms)
            tick_schedule(srv, c->wait_since + srv->cfg.request_timeout_ms);
    }
    if (!req) return;
    pgd_http_close_reason why = map_termination(toe);
    if (why != PGD_HTTP_CLOSE_COMPLETED) {
        if (req->abort_reason >= 0)
            why = (pgd_http_close_reason)req->abort_reason;
        else if (c && c->killed)
            why = srv->closing ? PGD_HTTP_CLOSE_SHUTDOWN : PGD_HTTP_CLOSE_TIMEOUT;
    }
    req_finish(srv, req, why);
}

static enum MHD_Result queue_pending(pgd_http_request *req) {
    struct MHD_Response *r = req->resp;
    req->resp = NULL;
    enum MHD_Result ret = MHD_queue_response(req->mc, req->status, r);
    MHD_destroy_response(r);
    if (ret == MHD_YES) req->answer = ANS_QUEUED;
    return ret;
}

/* Answer from the transport itself (413, 500, 503). */
static enum MHD_Result queue_error(pgd_http_request *req, int status, const char *message,
                                   bool force_close) {
    int err;
    struct MHD_Response *r =
        make_error_response(req->srv, req, status, message, NULL, 0, force_close, &err);
    if (!r) return MHD_NO;
    req->resp = r;
    req->status = (unsigned)status;
    return queue_pending(req);
}

/* Answer an error on the socket itself, behind MHD's back, for the cases where MHD cannot
 * queue a response (in the middle of a request body) or would answer first with its own HTML
 * (a malformed Content-Length): a complete response with the error body, "Connection: close".
 * Nothing has been written on the connection for this request, and the answer is small enough
 * for the empty socket buffer. The caller makes sure MHD sends nothing after it (it closes the
 * connection). 0, or -1 when it could not be written whole (then close without an answer). */
static int raw_answer(pgd_http_request *req, int status, const char *message) {
    if (req->raw_answered || !req->conn || req->conn->fd < 0) return -1;
    req->raw_answered = true;
    req->status = (unsigned)status;
    pgd_buf body = PGD_BUF_INIT, out = PGD_BUF_INIT;
    const char *reason = MHD_get_reason_phrase_for((unsigned)status);
    int rc = error_body(req->srv, status, message, &body);
    if (!rc)
        rc = pgd_buf_printf(&out,
                            "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: "
                            "application/json\r\nContent-Length: %zu\r\n",
                            status, reason && *reason ? reason : "Error", body.len);
    for (size_t off = 0; !rc && off < req->extra.len;) {
        const char *name = req->extra.data + off, *value = name + strlen(name) + 1;
        off = (size_t)(value - req->extra.data) + strlen(value) + 1;
        rc = pgd_buf_printf(&out, "%s: %s\r\n", name, value);
    }
    if (!rc) rc = pgd_buf_puts(&out, "\r\n");
    if (!rc) rc = pgd_buf_append(&out, body.data, body.len);
    ssize_t n = rc ? -1 : send(req->conn->fd, out.data, out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    bool whole = n >= 0 && (size_t)n == out.len;
    pgd_buf_free(&body);
    pgd_buf_free(&out);
    return whole ? 0 : -1;
}

/* libmicrohttpd checks Content-Length before the access handler sees the request, and answers
 * a malformed one itself — with its own HTML, and (0.9.75) with the header block sent twice.
 * Its only call in between is to the error logger, made just before it answers; this runs
 * there. The request it is rejecting is the one past its headers (MHD's REQUEST_HEADER_SIZE is
 * known) that the access handler has not seen: answer it with JSON on the socket and shut our
 * sending side, so MHD's own answer fails to go out and MHD closes the connection. */
static void preempt_mhd_error(pgd_http_server *srv) {
    for (pgd_http_request *req = srv->reqs; req; req = req->next) {
        if (req->headers_seen || req->raw_answered || !req->conn || req->conn->fd < 0) continue;
        if (!MHD_get_connection_info(req->mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE)) continue;
        const char *cl =
            MHD_lookup_connection_value(req->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        char msg[160];
        int status = 400;
        if (cl && *cl && strspn(cl, "0123456789") == strlen(cl)) {
            status = 413; /* all digits, too large for 64 bits */
            snprintf(msg, sizeof msg, "request body too large (limit %zu bytes)",
                     srv->cfg.max_body_bytes);
        } else if (cl) {
            snprintf(msg, sizeof msg,
                     "invalid Content-Length header: \"%.40s\" (want a number of bytes)", cl);
        } else {
            snprintf(msg, sizeof msg, "malformed request");
        }
        if (raw_answer(req, status, msg) == 0) shutdown(req->conn->fd, SHUT_WR);
    }
}

static unsigned long long parse_ull(const char *s, bool *ok) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    *ok = (end != s && *end == '\0' && errno == 0 && s[0] != '-');
    return v;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *mc, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_size, void **con_cls) {
    pgd_http_server *srv = cls;
    pgd_http_request *req = *con_cls;
    if (!req) return MHD_NO; /* out of memory in on_uri */

    if (!req->headers_seen) {
        req->headers_seen = true;
        size_t ml = strlen(method), ul = strlen(url);
        req->method = malloc(ml + ul + 2);
        if (!req->method) return MHD_NO;
        memcpy(req->method, method, ml + 1);
        req->path = req->method + ml + 1;
        memcpy(req->path, url, ul + 1);
        req->http11 = version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0;
        if (srv->cfg.on_head) srv->cfg.on_head(srv->cfg.on_head_arg, req);
        /* Our own head limits, below what fits in MHD's connection memory, so that the answer
         * is JSON (MHD's own, past its memory, is HTML). */
        if (srv->cfg.max_url_bytes && strlen(req->uri) > srv->cfg.max_url_bytes) {
            if (req->conn) req->conn->receiving = false;
            char msg[128];
            snprintf(msg, sizeof msg, "request URL too long (limit %zu bytes)",
                     srv->cfg.max_url_bytes);
            return queue_error(req, 414, msg, true);
        }
        const union MHD_ConnectionInfo *hs =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        if (srv->cfg.max_head_bytes && hs && hs->header_size > srv->cfg.max_head_bytes) {
            if (req->conn) req->conn->receiving = false;
            char msg[128];
            snprintf(msg, sizeof msg, "request header fields too large (limit %zu bytes)",
                     srv->cfg.max_head_bytes);
            return queue_error(req, 431, msg, true);
        }
        if (req->http11 &&
            !MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST)) {
            /* RFC 9112 3.2: an HTTP/1.1 request without Host is answered 400 */
            if (req->conn) req->conn->receiving = false;
            return queue_error(req, 400, "HTTP/1.1 request without a Host header", true);
        }
        const char *cl =
            MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        bool ok = true;
        unsigned long long body = cl ? parse_ull(cl, &ok) : 0;
        if (cl && body > srv->cfg.max_body_bytes && ok) {
            /* Early answer: MHD does not read the body and closes after the response. */
            if (req->conn) req->conn->receiving = false;
            char msg[128];
            snprintf(msg, sizeof msg, "request body too large (limit %zu bytes)",
                     srv->cfg.max_body_bytes);
            return queue_error(req, 413, msg, true);
        }
        if (body ||
            MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
            tick_schedule(srv, now_ms(srv) + EOF_POLL_MS); /* a body follows: see tick_cb */
        return MHD_YES;
    }

    if (*upload_size > 0) {
        if (req->too_big) {
            /* The 413 is out; read on (so that closing does not reset the connection under
             * an unread answer) up to the limit again, then close. */
            req->dropped += *upload_size;
            if (req->dropped > srv->cfg.max_body_bytes) return MHD_NO;
        } else if (!req->oom) {
            if (req->body.len + *upload_size > srv->cfg.max_body_bytes) {
                /* A body without Content-Length (chunked) past the limit. MHD cannot queue a
                 * response before the body ends, so the 413 goes out on the socket now, as
                 * early as with a Content-Length (same body, Connection: close). */
                req->too_big = true;
                req->dropped = req->body.len + *upload_size - srv->cfg.max_body_bytes;
                pgd_buf_free(&req->body);
                char msg[128];
                snprintf(msg, sizeof msg, "request body too large (limit %zu bytes)",
                         srv->cfg.max_body_bytes);
                if (raw_answer(req, 413, msg) != 0) return MHD_NO;
            } else if (pgd_buf_append(&req->body, upload_data, *upload_size) != 0) {
                req->oom = true;
                pgd_buf_free(&req->body);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }

    /* The whole request is here (first time), or the connection was resumed. */
    if (req->raw_answered) return MHD_NO; /* answered already (413): close */
    if (!req->handled) {
        req->handled = true;
        srv->n_active++;
        req->t_handled = now_ms(srv);
        if (req->conn) req->conn->receiving = false;
        if (req->oom) return queue_error(req, 500, "out of memory", true);
        if (srv->closing) return queue_error(req, 503, "server is shutting down", true);
        if (srv->cfg.response_timeout_ms)
            tick_schedule(srv, req->t_handled + srv->cfg.response_timeout_ms);
        req->in_handler = true;
        srv->cfg.handler(srv->cfg.handler_arg, req);
        req->in_handler = false;
    }
    if (req->abort_reason >= 0) return MHD_NO;
    if (req->answer == ANS_PENDING) return queue_pending(req);
    if (req->answer == ANS_NONE && !req->suspended) req_suspend(req); /* deferred answer */
    return MHD_YES;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    pgd_http_server *srv = cls;
    preempt_mhd_error(srv);
    if (!srv->cfg.log_errors) return;
    fputs("pagoda http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* --- driving MHD from the loop --- */

static void mhd_drive(pgd_http_server *srv) {
    if (srv->closing) return;
    srv->kick = false;
    srv->in_mhd = true;
    MHD_run(srv->mhd);
    srv->in_mhd = false;
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (srv->kick) {
        uv_timer_start(&srv->mhd_timer, mhd_timer_cb, 0, 0); /* resumed inside MHD_run */
    } else if (MHD_get_timeout(srv->mhd, &to) == MHD_YES) {
        if (to > MAX_TIMER_MS) to = MAX_TIMER_MS;
        uv_timer_start(&srv->mhd_timer, mhd_timer_cb, (uint64_t)to, 0);
    } else {
        uv_timer_stop(&srv->mhd_timer);
    }
}

static void mhd_timer_cb(uv_timer_t *t) {
    mhd_drive(t->data);
}

static void poll_cb(uv_poll_t *p, int status, int events) {
    (void)status;
    (void)events;
    mhd_drive(p->data);
}

/* Closes a connection that is not being answered (deadline, shutdown). */
static void conn_kill(http_conn *c) {
    c->killed = true;
    c->receiving = false;
    if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
}

static void tick_cb(uv_timer_t *t) {
    pgd_http_server *srv = t->data;
    srv->tick_armed = false;
    uint64_t now = now_ms(srv), next = UINT64_MAX;
    const pgd_http_config *cfg = &srv->cfg;

    if (cfg->request_timeout_ms) {
        for (http_conn *c = srv->conns; c; c = c->next) {
            if (!c->receiving) continue;
            uint64_t due = c->wait_since + cfg->request_timeout_ms;
            if (due <= now)
                conn_kill(c);
            else if (due < next)
                next = due;
        }
    }
    for (pgd_http_request *req = srv->reqs; req; req = req->next) {
        if (req->headers_seen && (!req->handled || req->too_big) && req->conn &&
            !req->conn->killed && req->conn->fd >= 0) {
            /* A body is being received, or read on past the limit (its 413 out). A client
             * that sent its last bytes and then its FIN before libmicrohttpd read them all is
             * never noticed: the read that empties the socket comes back short,
             * libmicrohttpd waits for the next edge of its edge-triggered epoll, and the end
             * of file makes none. Seen here, with nothing unread before it, the client is
             * gone (its request can never be whole) or done (the 413 went out before). */
            char b;
            ssize_t n = recv(req->conn->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                req->abort_reason = PGD_HTTP_CLOSE_CLIENT_GONE;
                conn_kill(req->conn);
            } else if (now + EOF_POLL_MS < next) {
                next = now + EOF_POLL_MS;
            }
            continue;
        }
        if (!req->handled || req->abort_reason >= 0) continue;
        if (cfg->response_timeout_ms) {
            uint64_t due = req->t_handled + cfg->response_timeout_ms;
            if (due <= now) {
                req_abort(req, PGD_HTTP_CLOSE_TIMEOUT);
                continue;
            }
            if (due < next) next = due;
        }
        if (req->streaming && req->ping && !req->ended) {
            uint64_t due = req->t_last_write + cfg->ping_interval_ms;
            if (due <= now + PING_EARLY_MS) {
                if (req->out.len == req->out_off &&
                    stream_append(req, PING_TEXT, sizeof PING_TEXT - 1) == 0)
                    req_resume(req);
                req->t_last_write = now; /* with bytes pending, no ping is needed */
                due = now + cfg->ping_interval_ms;
            }
            if (due < next) next = due;
        }
    }
    if (next != UINT64_MAX) tick_schedule(srv, next);
}

/* --- create / stop / destroy --- */

static void handle_closed_cb(uv_handle_t *h) {
    pgd_http_server *srv = h->data;
    if (--srv->handles_open == 0) {
        free(srv->host);
        free(srv);
    }
}

static void close_handles(pgd_http_server *srv) {
    if (srv->poll_inited) uv_close((uv_handle_t *)&srv->poll, handle_closed_cb);
    uv_close((uv_handle_t *)&srv->mhd_timer, handle_closed_cb);
    uv_close((uv_handle_t *)&srv->tick, handle_closed_cb);
}

static int resolve(const pgd_http_config *cfg, struct sockaddr_storage *ss, socklen_t *len) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)cfg->port);
    const char *host = cfg->host && cfg->host[0] ? cfg->host : NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0 || !res)
        return pgd_error_set(PGD_EINVAL, "http: cannot resolve \"%s\": %s", host ? host : "(any)",
                             gai_strerror(gai));
    /* Prefer IPv4 when a name resolves to both (e.g. "localhost"). */
    struct addrinfo *pick = res;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int pgd_http_server_create(uv_loop_t *loop, const pgd_http_config *cfg, pgd_http_server **out) {
    *out = NULL;
    if (!loop || !cfg || !cfg->handler || cfg->max_connections == 0 || cfg->max_stream_buffer == 0)
        return pgd_error_set(PGD_EINVAL, "http: missing handler or zero limit in config");
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    int rc = resolve(cfg, &ss, &sslen);
    if (rc) return rc;

    pgd_http_server *srv = calloc(1, sizeof *srv);
    if (!srv) return PGD_ENOMEM;
    srv->loop = loop;
    srv->cfg = *cfg;
    srv->host = strdup(cfg->host ? cfg->host : "");
    if (!srv->host) {
        free(srv);
        return PGD_ENOMEM;
    }
    srv->cfg.host = srv->host;
    srv->accepting = true;
    uv_timer_init(loop, &srv->mhd_timer);
    uv_timer_init(loop, &srv->tick);
    srv->mhd_timer.data = srv->tick.data = srv->poll.data = srv;
    srv->handles_open = 2;

    /* The error log is always on: on_mhd_log needs its calls (see preempt_mhd_error), and
     * prints only with log_errors. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    size_t memory = cfg->connection_memory ? cfg->connection_memory : 128u << 10;
    unsigned backlog = cfg->listen_backlog ? cfg->listen_backlog : 511;
    /* clang-format off */
    srv->mhd = MHD_start_daemon(flags, cfg->port, NULL, NULL, on_access, srv,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv, /* first, so that it applies to the rest */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)cfg->max_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)backlog,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
        MHD_OPTION_END);
    /* clang-format on */
    if (!srv->mhd) {
        rc = pgd_error_set(PGD_EIO, "http: cannot listen on %s:%u (%s)", srv->host,
                           (unsigned)cfg->port, strerror(errno));
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    srv->epoll_fd = di ? di->epoll_fd : -1;
    di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : cfg->port;
    if (srv->epoll_fd < 0) {
        rc = pgd_error_set(PGD_EIO, "http: libmicrohttpd has no epoll fd");
        goto fail;
    }
    if (uv_poll_init(loop, &srv->poll, srv->epoll_fd) != 0) {
        rc = pgd_error_set(PGD_EIO, "http: cannot poll libmicrohttpd's epoll fd");
        goto fail;
    }
    srv->poll_inited = true;
    srv->handles_open++;
    srv->poll.data = srv;
    if (uv_poll_start(&srv->poll, UV_READABLE, poll_cb) != 0) {
        rc = pgd_error_set(PGD_EIO, "http: cannot poll libmicrohttpd's epoll fd");
        goto fail;
    }
    /* Arm the MHD timer for anything MHD wants to do right away. */
    uv_timer_start(&srv->mhd_timer, mhd_timer_cb, 0, 0);
    *out = srv;
    return 0;

fail:
    if (srv->poll_inited) uv_poll_stop(&srv->poll);
    if (srv->mhd) MHD_stop_daemon(srv->mhd);
    srv->mhd = NULL;
    close_handles(srv);
    return rc;
}

uint16_t pgd_http_server_port(const pgd_http_server *srv) {
    return srv->port;
}

unsigned pgd_http_server_connection_count(const pgd_http_server *srv) {
    return srv->n_conns;
}

unsigned pgd_http_server_request_count(const pgd_http_server *srv) {
    return srv->n_active;
}

int pgd_http_server_stop_accepting(pgd_http_server *srv) {
    if (!srv->accepting) return 0;
    srv->accepting = false;
    MHD_socket fd = MHD_quiesce_daemon(srv->mhd);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    return 0;
}

/* Prepares every live request for the end: answers deferred ones with 503, aborts unfinished
 * streams, resumes what is suspended; closes connections that carry no answer. */
static void drain_prepare(pgd_http_server *srv) {
    for (pgd_http_request *req = srv->reqs; req; req = req->next) {
        if (!req->handled || req->abort_reason >= 0) continue;
        if (req->answer == ANS_NONE) {
            int err;
            struct MHD_Response *r =
                make_error_response(srv, NULL, 503, "server is shutting down", NULL, 0, true, &err);
            if (r)
                set_answer(req, r, 503);
            else
                req_abort(req, PGD_HTTP_CLOSE_SHUTDOWN);
        } else if (req->streaming && !req->ended) {
            req_abort(req, PGD_HTTP_CLOSE_SHUTDOWN);
        }
        req_resume(req);
    }
    for (http_conn *c = srv->conns; c; c = c->next)
        if (!c->killed && (!c->req || !c->req->handled)) conn_kill(c);
}

void pgd_http_server_destroy(pgd_http_server *srv) {
    if (!srv) return;
    PGD_ASSERT(!srv->in_mhd); /* not from inside one of this server's callbacks */
    pgd_http_server_stop_accepting(srv);
    uv_poll_stop(&srv->poll);
    uv_timer_stop(&srv->mhd_timer);
    uv_timer_stop(&srv->tick);
    srv->tick_armed = false;

    srv->closing = true;
    drain_prepare(srv);
    uint64_t deadline = uv_hrtime() / 1000000 + srv->cfg.drain_timeout_ms;
    for (;;) {
        srv->kick = false;
        MHD_run(srv->mhd);
        drain_prepare(srv); /* keep-alive connections whose response just ended */
        if (srv->n_conns == 0) break;
        uint64_t now = uv_hrtime() / 1000000;
        if (now >= deadline) break;
        MHD_UNSIGNED_LONG_LONG to = DRAIN_POLL_MS;
        if (srv->kick)
            to = 0;
        else if (MHD_get_timeout(srv->mhd, &to) != MHD_YES || to > DRAIN_POLL_MS)
            to = DRAIN_POLL_MS;
        if (to > deadline - now) to = deadline - now;
        struct pollfd pfd = {.fd = srv->epoll_fd, .events = POLLIN};
        poll(&pfd, 1, (int)to);
    }
    /* Past the deadline: abort what is left; MHD must see nothing suspended when it stops. */
    for (pgd_http_request *req = srv->reqs; req; req = req->next) {
        if (req->handled && req->abort_reason < 0) req->abort_reason = PGD_HTTP_CLOSE_SHUTDOWN;
        req_resume(req);
    }
    MHD_run(srv->mhd);
    MHD_stop_daemon(srv->mhd); /* completes the rest with MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN */
    srv->mhd = NULL;
    if (srv->reqs) /* MHD completes every request it told us about; this is a safety net */
        fprintf(stderr, "pagoda http: requests left after libmicrohttpd stopped\n");
    while (srv->reqs) req_finish(srv, srv->reqs, PGD_HTTP_CLOSE_SHUTDOWN);
    while (srv->conns) {
        http_conn *c = srv->conns;
        LIST_REMOVE(srv->conns, c);
        free(c);
    }
    close_handles(srv);
}
