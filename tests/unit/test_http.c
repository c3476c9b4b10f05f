/*
 * tests/unit/test_http.c — the HTTP transport (server/http.c),
 * over real sockets on 127.0.0.1, no model. The test server, its routes and the client are in
 * http_harness.h; test_http_edges.c has the transport's answers to odd clients (half-closes,
 * malformed heads).
 *
 * `test_http --serve PORT` runs the routes until killed (for curl -N by hand).
 */
#include "server/http.h"

#include "http_harness.h"

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

    /* Chunked body over the limit: the same 413 as with a Content-Length, sent as soon as the
     * limit is passed (Connection: close); the rest of the body is read, then the server
     * closes. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    char *chunk = malloc(65536 + 16);
    REQUIRE(chunk);
    int hl = snprintf(chunk, 16, "10000\r\n");
    memset(chunk + hl, 'a', 65536);
    memcpy(chunk + hl + 65536, "\r\n", 2);
    for (int i = 0; i < 17; i++) cl_send(&c, chunk, (size_t)hl + 65536 + 2); /* just over */
    CHECK_EQ_INT(cl_response(&c, &r, 5000), 0); /* before the body ends */
    CHECK_EQ_INT(r.status, 413);
    CHECK(strstr(body_str(&r), "\"code\":413") != NULL);
    CHECK(head_get(r.head, "Connection", v, sizeof v) && strcasecmp(v, "close") == 0);
    resp_free(&r);
    for (int i = 0; i < 7; i++) cl_send(&c, chunk, (size_t)hl + 65536 + 2); /* 1.5 MiB */
    cl_sends(&c, "0\r\n\r\n");
    CHECK_EQ_INT(cl_wait_eof(&c, 3000), 0);
    CHECK_EQ_INT(cl_avail(&c), 0);
    cl_close(&c);

    /* Past twice the limit the server stops reading and closes, its 413 sent before. */
    REQUIRE(cl_open(&c, g_main.port) == 0);
    cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    int sent = 0;
    for (int i = 0; i < 64; i++) { /* 4 MiB */
        if (cl_send(&c, chunk, (size_t)hl + 65536 + 2) != 0) break;
        sent++;
    }
    CHECK_EQ_INT(cl_response(&c, &r, 3000), 0);
    CHECK_EQ_INT(r.status, 413);
    resp_free(&r);
    CHECK_EQ_INT(cl_wait_eof(&c, 3000), 0);
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
