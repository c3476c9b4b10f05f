/*
 * server/http.h — the HTTP transport: libmicrohttpd (MHD) driven by a libuv loop, the handler
 * interface the routes implement, streaming responses (SSE) with suspend/resume, and the
 * server's own limits and shutdown.
 *
 * Model. One pgd_http_server per listening address. MHD runs without a thread of its own (epoll
 * mode, external event loop): the loop polls MHD's epoll fd with a uv_poll_t and calls MHD_run;
 * a uv_timer follows MHD_get_timeout. Every complete request (headers and body read) is handed
 * to the handler as a pgd_http_request. The handler answers it — at once or later — with
 * exactly one of:
 *   pgd_http_respond / pgd_http_respond_error: a complete response (status, type, body, headers);
 *   pgd_http_stream_start: response headers now, body bytes as they come (chunked transfer
 *       encoding for HTTP/1.1): pgd_http_stream_write appends bytes, pgd_http_stream_end ends.
 * A handler that returns without answering defers the answer: the connection is suspended (no
 * CPU, no timeout) until the route answers from a later loop callback (e.g. when a scheduler
 * event arrives). A stream whose pending bytes are all sent suspends its connection too, and a
 * write resumes it: an idle stream or a pending answer costs nothing.
 *
 * Lifetime. A request lives from the handler call until it completes: its response was fully
 * sent, the client went away, a timeout fired or the server shut down. Then the close callback
 * (pgd_http_request_set_on_close) runs once with the reason, and the request is freed when it
 * returns: the route must drop every pointer to the request and its stream there. A request
 * without a close callback is freed silently. The route never frees a request.
 *
 * Noticing a client that left. A suspended connection is not polled by MHD. The server watches
 * every suspended connection (a uv_poll_t, from its first suspension; config
 * `watch_disconnect`). A reset or a socket error aborts the request at once (reason
 * CLIENT_GONE). A FIN only says that the client finished sending: a client that half-closes
 * (shutdown(SHUT_WR) after its request, like `nc -N`) still gets its whole answer, streamed or
 * not. A FIN from a client that closed its socket looks the same until the server writes (a
 * closed socket answers data with a reset), so on a FIN the server writes a probe: a request
 * still waiting for its answer gets an interim "HTTP/1.1 100 Continue" (HTTP/1.1 clients must
 * accept unsolicited 1xx responses before the final one; none for HTTP/1.0), an SSE stream gets
 * a ping at once; from then on the watch looks for the reset only. A closed client is thus
 * noticed within a round trip; a half-closed one reads on (what it has not read when it closes
 * makes its close a reset, noticed too). Where no probe can be written — an HTTP/1.0 request
 * waiting for its answer, a response being sent — the next write finds out; a stream without
 * pings cannot probe and might never write again, so for it a FIN still means the client left.
 * Independently, an SSE stream that wrote nothing for `ping_interval_ms` gets the SSE comment
 * ": ping\n\n", which keeps proxies from closing an idle stream and turns a vanished client into
 * a failed write. Pings are only inserted between writes, so with pings on a write must hold
 * whole SSE events.
 *
 * Errors the transport answers itself carry the config's error body (JSON), also where
 * libmicrohttpd would answer with its own HTML: a request target over `max_url_bytes` (414) or
 * a head over `max_head_bytes` (431) — limits below what fits in `connection_memory`, so the
 * head is parsed and answered here; only a head larger than the connection memory itself still
 * gets libmicrohttpd's HTML 414/431 — and a Content-Length that is not a number (400; a number
 * too large for 64 bits: 413), which libmicrohttpd rejects before any handler: the server
 * answers it from libmicrohttpd's error-log callback, the one call made in between, on the
 * socket, and closes the connection (libmicrohttpd's own answer then fails to go out).
 *
 * Limits (pgd_http_config): request body size (413 before the body is read when Content-Length
 * says so; a body without one (chunked) gets the same 413, with "Connection: close", as soon as
 * it passes the limit — written on the socket, since libmicrohttpd cannot queue an answer in
 * the middle of a body — then the server reads on up to the limit again, so that closing does
 * not reset the connection under the unread answer, and closes, or closes as soon as the client
 * has ended its side), concurrent connections
 * (MHD_OPTION_CONNECTION_LIMIT: beyond it new connections wait unaccepted in the listen backlog
 * or are closed), idle timeout of non-suspended connections (MHD_OPTION_CONNECTION_TIMEOUT),
 * a deadline for receiving a whole request (a client trickling its header or body byte by byte
 * is cut off; counted from the moment the connection began waiting for the request: accept, or
 * the end of the previous response on a keep-alive connection), a time limit from the handler
 * call to the end of the response (off by default), and the bytes a stream may have pending.
 *
 * Shutdown: pgd_http_server_stop_accepting closes the listening socket (new clients are refused;
 * later responses carry "Connection: close"); the routes end their streams; then
 * pgd_http_server_destroy answers what is still pending with 503, aborts unfinished streams,
 * resumes every suspended connection, lets MHD flush for at most `drain_timeout_ms`, stops MHD
 * (remaining requests close with reason SHUTDOWN) and closes its uv handles so uv_run can
 * return.
 *
 * Threading: everything in this header runs on the loop thread (the thread running uv_run on the
 * server's loop), including every callback. Nothing here is thread-safe: work done on other
 * threads (the scheduler's token deltas, tokenization on the threadpool) reaches the loop with
 * uv_async_send / uv_queue_work's after-callback, and only there calls pgd_http_stream_write and
 * friends. Callbacks run inside MHD_run: they must not block, must not call
 * pgd_http_server_destroy (defer it, e.g. with a 0 ms uv_timer), and may call every other
 * function here, on any request.
 */
#ifndef PGD_SERVER_HTTP_H
#define PGD_SERVER_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/text.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pgd_http_server pgd_http_server;
typedef struct pgd_http_request pgd_http_request;
typedef struct pgd_http_stream pgd_http_stream;

typedef struct pgd_http_header {
    const char *name;
    const char *value;
} pgd_http_header;

typedef enum pgd_http_close_reason {
    PGD_HTTP_CLOSE_COMPLETED = 0, /* the whole response was handed to the kernel */
    PGD_HTTP_CLOSE_CLIENT_GONE,   /* client closed or reset the connection, a read or write
                                     failed, or it stopped reading (max_stream_buffer) */
    PGD_HTTP_CLOSE_TIMEOUT,       /* idle timeout, request deadline or response time limit */
    PGD_HTTP_CLOSE_SHUTDOWN,      /* pgd_http_server_destroy */
    PGD_HTTP_CLOSE_ERROR,         /* pgd_http_request_abort, out of memory, MHD refused */
} pgd_http_close_reason;

/* Static name of a reason ("completed", "client_gone", ...). */
const char *pgd_http_close_reason_name(pgd_http_close_reason reason);

/* Called once per complete request, inside MHD_run. See the top of the file. */
typedef void (*pgd_http_handler_fn)(void *arg, pgd_http_request *req);

/* Called once when a request completes (see Lifetime); `req` is freed when it returns. */
typedef void (*pgd_http_close_fn)(pgd_http_request *req, pgd_http_close_reason reason, void *arg);

/* Builds the JSON body of an error the transport answers itself (400, 413, 414, 431, 503 at
 * shutdown) and of
 * pgd_http_respond_error: appends it to `out` and returns 0, or a negative code to fall back to
 * the default body {"error":{"message","type","param","code"}}. */
typedef int (*pgd_http_error_body_fn)(void *arg, int status, const char *message, pgd_buf *out);

/* What an ended request asked and got, for an access log (pgd_http_config.on_done). Strings
 * live until the callback returns. */
typedef struct pgd_http_done {
    const char *method, *path; /* "" when the request's head never arrived; path decoded */
    const char *remote;        /* "ip:port" ("[ip6]:port"), "" if unknown */
    unsigned status;           /* the status of the answer sent (or begun); 0: none */
    pgd_http_close_reason reason;
    uint64_t ms;      /* from the request's line arriving to its end */
    const char *note; /* pgd_http_request_set_note's text, or "" */
} pgd_http_done;

/* Called once per request as it ends, after its close callback (which may still set the note),
 * whatever ended it: answered by a route or by the transport, the client gone, shutdown. */
typedef void (*pgd_http_done_fn)(void *arg, const pgd_http_done *done);

typedef struct pgd_http_config {
    const char *host;             /* numeric address or name; "127.0.0.1" by default */
    uint16_t port;                /* 0: any free port (see pgd_http_server_port) */
    size_t max_body_bytes;        /* request body limit (413 beyond); 4 MiB */
    unsigned max_connections;     /* concurrent connections; 1024 */
    unsigned max_per_ip;          /* concurrent connections per client address; 0 = no limit */
    unsigned idle_timeout_s;      /* MHD's inactivity timeout of non-suspended connections; 30 */
    unsigned request_timeout_ms;  /* deadline to receive a whole request (see Limits); 60000 */
    unsigned response_timeout_ms; /* handler call to end of response; 0 = none (default) */
    unsigned ping_interval_ms;    /* SSE ": ping" after this long without a write; 1000; 0 off */
    size_t max_stream_buffer;     /* bytes a stream may have unsent; 16 MiB; beyond: abort */
    size_t connection_memory;     /* MHD_OPTION_CONNECTION_MEMORY_LIMIT; 128 KiB */
    size_t max_url_bytes;         /* request target longer than this: 414; 16 KiB; 0 = none */
    size_t max_head_bytes;        /* request line + headers larger than this: 431; 32 KiB;
                                     0 = none */
    unsigned listen_backlog;      /* listen(2) backlog; 511 */
    unsigned drain_timeout_ms;    /* destroy: longest wait for responses to flush; 3000 */
    int watch_disconnect;         /* watch suspended connections for a client that left (see
                                     Noticing a client that left); 1 */
    int log_errors;               /* print MHD's own messages on stderr; 0 */
    pgd_http_handler_fn handler;  /* required */
    void *handler_arg;
    pgd_http_error_body_fn error_body; /* NULL: the default body */
    void *error_body_arg;
    /* Called once when a request's head (line and headers) has arrived, before the transport's
     * own checks of it and before its body: it may read the request's headers and set response
     * headers (pgd_http_request_set_header) that every answer then carries, the transport's own
     * errors (413, 414, 431, ...) included; it must not answer. NULL: none. */
    pgd_http_handler_fn on_head;
    void *on_head_arg;
    pgd_http_done_fn on_done; /* NULL: none */
    void *on_done_arg;
} pgd_http_config;

/* The defaults above; handler stays NULL. */
void pgd_http_config_init(pgd_http_config *cfg);

/* Binds host:port and starts serving on `loop` (handles are added to it; nothing runs until
 * uv_run). 0, PGD_EINVAL (bad config or address), PGD_EIO (bind/listen failed: port in use,
 * ...; detail in pgd_error_detail) or PGD_ENOMEM. Call on the loop thread or before uv_run. */
int pgd_http_server_create(uv_loop_t *loop, const pgd_http_config *cfg, pgd_http_server **out);

/* The bound port (the real one when the config said 0). */
uint16_t pgd_http_server_port(const pgd_http_server *srv);

/* Open connections / requests in flight (handler called, not yet completed: deferred answers,
 * streams, responses still being sent). */
unsigned pgd_http_server_connection_count(const pgd_http_server *srv);
unsigned pgd_http_server_request_count(const pgd_http_server *srv);

/* Stops accepting: closes the listening socket (new connections are refused), and later
 * responses carry "Connection: close". Existing connections, requests and streams go on.
 * Idempotent; 0. */
int pgd_http_server_stop_accepting(pgd_http_server *srv);

/* Shuts down (see the top of the file): may block the loop thread for up to drain_timeout_ms
 * while responses flush; close callbacks run from inside it. Then the server's uv handles are
 * closed and its memory is freed by their close callbacks: the loop must run once more (uv_run
 * returns when nothing else keeps it alive). Not from inside a callback of this server.
 * NULL is a no-op. */
void pgd_http_server_destroy(pgd_http_server *srv);

/* --- requests ----------------------------------------------------------------------------- */

/* Valid from the handler call until the close callback returns (strings owned by the request). */
const char *pgd_http_request_method(const pgd_http_request *req); /* "GET", "POST", ... */
const char *pgd_http_request_path(const pgd_http_request *req);   /* decoded, no query */
const char *pgd_http_request_query(const pgd_http_request *req);  /* raw, after '?'; "" */

/* Looked up in libmicrohttpd's copy of the request: from the handler call until the request
 * completes, but not inside the close callback. A query argument, percent-decoded (NULL if
 * absent; "" for "?flag"); a request header by name, case-insensitive (the first if repeated;
 * NULL if absent). */
const char *pgd_http_request_query_arg(const pgd_http_request *req, const char *key);
const char *pgd_http_request_header(const pgd_http_request *req, const char *name);
/* The body (NUL-terminated; ptr is "" when empty). */
pgd_str pgd_http_request_body(const pgd_http_request *req);
/* The client's address as "ip:port" ("[ip6]:port"); "" if unknown. Not inside the close
 * callback unless called before (the result is kept). */
const char *pgd_http_request_remote(pgd_http_request *req);
/* A line of text about the request for pgd_http_config.on_done (copied; replaces an earlier
 * one); may be called up to and inside the close callback. 0 or PGD_ENOMEM. */
int pgd_http_request_set_note(pgd_http_request *req, const char *note);
/* The note set so far, or "". */
const char *pgd_http_request_note(const pgd_http_request *req);
pgd_http_server *pgd_http_request_server(const pgd_http_request *req);

/* Register the close callback (replaces any earlier one). */
void pgd_http_request_set_on_close(pgd_http_request *req, pgd_http_close_fn fn, void *arg);

/* A header every answer of this request carries (its response, its stream, or an error the
 * transport answers for it), e.g. rate-limit headers decided before the answer is. A second
 * call with the same name (case-insensitive) replaces the value. 0, PGD_EINVAL (a name with
 * ':' or a line break, a value with a line break) or PGD_ENOMEM. */
int pgd_http_request_set_header(pgd_http_request *req, const char *name, const char *value);

/* Answer with a complete response. `content_type` may be NULL (no Content-Type); `body` is
 * copied; `headers` (n_headers entries, may be NULL) are added as given (e.g. Retry-After).
 * 0; PGD_EINVAL if the request was already answered or the status is not 100..999;
 * PGD_ECANCELED if it is being aborted (its close callback is coming); PGD_ENOMEM. */
int pgd_http_respond(pgd_http_request *req, int status, const char *content_type, const void *body,
                     size_t len, const pgd_http_header *headers, size_t n_headers);

/* pgd_http_respond with an application/json error body from the config's error_body callback
 * (or the default body). */
int pgd_http_respond_error(pgd_http_request *req, int status, const char *message,
                           const pgd_http_header *headers, size_t n_headers);

/* Abort the request: its connection is closed without (the rest of) a response — stream bytes
 * not yet sent are dropped, the client sees no last chunk — and the close callback follows with
 * PGD_HTTP_CLOSE_ERROR (from a later MHD_run, never from inside this call). For a failure in the
 * middle of a stream that the client should see, write an error event and end the stream
 * instead. No-op once aborted or completed. */
void pgd_http_request_abort(pgd_http_request *req);

/* --- streams ------------------------------------------------------------------------------ */

enum {
    PGD_HTTP_STREAM_SSE = 1u << 0,     /* Server-Sent Events: Content-Type text/event-stream
                                          (when content_type is NULL), Cache-Control: no-cache,
                                          X-Accel-Buffering: no, and pings */
    PGD_HTTP_STREAM_NO_PING = 1u << 1, /* no pings on this SSE stream */
};

/* Answer with a streaming response: status, type and headers are sent now, the body follows
 * through pgd_http_stream_write (chunked transfer encoding for HTTP/1.1; for HTTP/1.0 the
 * connection closes at the end). `*out` stays valid until the request's close callback
 * returns. Same errors as pgd_http_respond. */
int pgd_http_stream_start(pgd_http_request *req, int status, const char *content_type,
                          const pgd_http_header *headers, size_t n_headers, unsigned flags,
                          pgd_http_stream **out);

/* Append `len` bytes to the stream (copied) and resume its connection if it waits. 0;
 * PGD_EINVAL after pgd_http_stream_end; PGD_ECANCELED when the request is being aborted (the
 * client left, a timeout...; its close callback is coming); PGD_EFULL when more than
 * max_stream_buffer bytes would be unsent (the stream is then aborted: CLIENT_GONE);
 * PGD_ENOMEM. A write of 0 bytes is a no-op. */
int pgd_http_stream_write(pgd_http_stream *s, const void *data, size_t len);

/* No more bytes: the response ends once the pending ones are sent (then the close callback
 * runs with COMPLETED). 0; PGD_EINVAL if already ended; PGD_ECANCELED when being aborted. */
int pgd_http_stream_end(pgd_http_stream *s);

#ifdef __cplusplus
}
#endif

#endif
