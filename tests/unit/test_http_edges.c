/*
 * tests/unit/test_http_edges.c — the HTTP transport (server/http.c) with clients that do odd
 * but legal (or malformed) things, over real sockets on 127.0.0.1 (the test server of
 * http_harness.h):
 *   - a client that half-closes (shutdown(SHUT_WR), like `nc -N`) after its request still gets
 *     a deferred answer (after an interim 100 Continue on HTTP/1.1) and a whole SSE stream;
 *     one that closes instead is noticed at once (the probe draws a reset); a stream without
 *     pings treats a FIN as the client gone;
 *   - a malformed Content-Length gets one JSON 400 (a too large one a 413), not
 *     libmicrohttpd's HTML sent with its header block twice;
 *   - request targets and heads over the server's limits get JSON 414 / 431.
 */
#include "server/http.h"

#include "http_harness.h"

/* pings every 300 ms, watch on, limits: URL 1 KiB, head 2 KiB, body 64 KiB. */
static tserver g_srv;

static void half_close(client *c) {
    shutdown(c->fd, SHUT_WR);
}

static void test_half_closed_deferred_answer(void) {
    client c;
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /defer?ms=300&id=hc1 HTTP/1.1\r\nHost: x\r\n\r\n");
    half_close(&c);
    resp r;
    CHECK_EQ_INT(cl_response(&c, &r, 3000), 0); /* cl_headers skips the 100 */
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(body_str(&r), "deferred");
    resp_free(&r);
    CHECK(memmem(c.in.data, c.in.len, "HTTP/1.1 100 Continue\r\n\r\n", 25) == c.in.data);
    CHECK_EQ_INT(cl_wait_eof(&c, 2000), 0);
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_srv, "/defer?ms=300&id=hc1", 2000, NULL),
                 PGD_HTTP_CLOSE_COMPLETED);

    /* HTTP/1.0 gets no 1xx: the answer alone. */
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /defer?ms=300&id=hc2 HTTP/1.0\r\n\r\n");
    half_close(&c);
    CHECK_EQ_INT(cl_response(&c, &r, 3000), 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(body_str(&r), "deferred");
    resp_free(&r);
    CHECK(memmem(c.in.data, c.in.len, " 100 ", 5) == NULL);
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_srv, "/defer?ms=300&id=hc2", 2000, NULL),
                 PGD_HTTP_CLOSE_COMPLETED);
}

static void test_half_closed_stream(void) {
    client c;
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /stream?n=6&ms=150&id=hc3 HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&c, &r, mono_ms() + 2000) == 0);
    half_close(&c);
    CHECK_FIND(&c, "data: 5\n\n", 3000);
    CHECK_FIND(&c, "\r\n0\r\n\r\n", 2000); /* the last chunk: the whole stream */
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_srv, "/stream?n=6&ms=150&id=hc3", 2000, NULL),
                 PGD_HTTP_CLOSE_COMPLETED);
}

static void test_closed_client_noticed(void) {
    /* A deferred answer whose client closes (FIN, like a half-close): the 100 Continue probe
     * draws a reset. */
    client c;
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /defer-forever?id=gone1 HTTP/1.1\r\nHost: x\r\n\r\n");
    sleep_ms(100);
    int64_t tc = mono_ms(), t = 0;
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_srv, "/defer-forever?id=gone1", 3000, &t),
                 PGD_HTTP_CLOSE_CLIENT_GONE);
    fprintf(stderr, "    deferred answer, client closed: noticed after %lld ms\n",
            (long long)(t - tc));
    CHECK(t - tc < 400);

    /* An idle SSE stream: the probe is a ping, sent at once (not at the next interval). */
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /idle?id=gone2 HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&c, &r, mono_ms() + 2000) == 0);
    tc = mono_ms();
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_srv, "/idle?id=gone2", 3000, &t), PGD_HTTP_CLOSE_CLIENT_GONE);
    CHECK(t - tc < 250);

    /* A half-closed client that then closes without reading the 100 Continue resets. */
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /defer-forever?id=gone3 HTTP/1.1\r\nHost: x\r\n\r\n");
    half_close(&c);
    sleep_ms(200);
    CHECK_EQ_INT(ts_count_closes(&g_srv, "/defer-forever?id=gone3", PGD_HTTP_CLOSE_CLIENT_GONE), 0);
    tc = mono_ms();
    cl_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_srv, "/defer-forever?id=gone3", 3000, &t),
                 PGD_HTTP_CLOSE_CLIENT_GONE);
    CHECK(t - tc < 400);

    /* A stream without pings has nothing to probe with: its FIN is the client gone. */
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /idle-noping?id=gone4 HTTP/1.1\r\nHost: x\r\n\r\n");
    memset(&r, 0, sizeof r);
    REQUIRE(cl_headers(&c, &r, mono_ms() + 2000) == 0);
    half_close(&c);
    CHECK_EQ_INT(ts_wait_close(&g_srv, "/idle-noping?id=gone4", 3000, NULL),
                 PGD_HTTP_CLOSE_CLIENT_GONE);
    cl_close(&c);
}

/* One raw exchange: everything the server sends until it closes. */
static void exchange(const char *request, client *c) {
    REQUIRE(cl_open(c, g_srv.port) == 0);
    cl_sends(c, request);
    CHECK_EQ_INT(cl_wait_eof(c, 3000), 0);
}

static int count(const client *c, const char *needle) {
    int n = 0;
    size_t nl = strlen(needle);
    for (const char *p = c->in.data, *end = c->in.data + c->in.len;
         p && (p = memmem(p, (size_t)(end - p), needle, nl)); p += nl)
        n++;
    return n;
}

static void test_bad_content_length(void) {
    static const struct {
        const char *value;
        const char *status_line;
    } k_cases[] = {{"-5", "HTTP/1.1 400 "},
                   {"abc", "HTTP/1.1 400 "},
                   {"5, 5", "HTTP/1.1 400 "},
                   {"99999999999999999999999", "HTTP/1.1 413 "}};
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        char req[256];
        snprintf(req, sizeof req, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n",
                 k_cases[i].value);
        client c;
        exchange(req, &c);
        CHECK_EQ_INT(count(&c, "HTTP/1."), 1); /* one answer, one header block */
        CHECK(c.in.len > 13 && memcmp(c.in.data, k_cases[i].status_line, 13) == 0);
        CHECK(count(&c, "Content-Type: application/json") == 1);
        CHECK(count(&c, "\"type\":\"test\"") == 1); /* the config's error body */
        CHECK(count(&c, "<html>") == 0);
        if (k_cases[i].status_line[9] == '4' && k_cases[i].status_line[11] == '0')
            CHECK(count(&c, "Content-Length header") == 1);
        cl_close(&c);
    }
    /* Also on a keep-alive connection, after a good request. */
    client c;
    REQUIRE(cl_open(&c, g_srv.port) == 0);
    cl_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    cl_sends(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n");
    CHECK_EQ_INT(cl_response(&c, &r, 2000), 0);
    CHECK_EQ_INT(r.status, 400);
    CHECK(strstr(body_str(&r), "\"type\":\"test\"") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(cl_wait_eof(&c, 2000), 0);
    CHECK_EQ_INT(cl_avail(&c), 0);
    cl_close(&c);
}

static void test_head_limits(void) {
    size_t n = 1200;
    char *req = malloc(n + 4096);
    REQUIRE(req);
    /* A request target over 1 KiB: 414. */
    int len = snprintf(req, 64, "GET /hello?");
    memset(req + len, 'u', n);
    snprintf(req + len + n, 64, " HTTP/1.1\r\nHost: x\r\n\r\n");
    resp r;
    REQUIRE(fetch(g_srv.port, req, &r) == 0);
    CHECK_EQ_INT(r.status, 414);
    CHECK(strstr(body_str(&r), "\"code\":414") != NULL);
    char v[64];
    CHECK(head_get(r.head, "Content-Type", v, sizeof v) && strcmp(v, "application/json") == 0);
    resp_free(&r);
    /* A head over 2 KiB (the target is fine): 431. */
    len = snprintf(req, 64, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + len, 'h', 2 * n);
    snprintf(req + len + 2 * n, 64, "\r\n\r\n");
    REQUIRE(fetch(g_srv.port, req, &r) == 0);
    CHECK_EQ_INT(r.status, 431);
    CHECK(strstr(body_str(&r), "\"code\":431") != NULL);
    resp_free(&r);
    /* Just under both: served. */
    len = snprintf(req, 64, "GET /hello?");
    memset(req + len, 'u', 900);
    len += snprintf(req + len + 900, 64, " HTTP/1.1\r\nHost: x\r\nX-Big: ") + 900;
    memset(req + len, 'h', 900);
    snprintf(req + len + 900, 64, "\r\n\r\n");
    REQUIRE(fetch(g_srv.port, req, &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    free(req);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    pgd_http_config cfg;
    pgd_http_config_init(&cfg);
    cfg.ping_interval_ms = 300;
    cfg.max_body_bytes = 64u << 10;
    cfg.max_url_bytes = 1024;
    cfg.max_head_bytes = 2048;
    cfg.error_body = test_error_body;
    if (ts_start(&g_srv, &cfg) != 0) {
        fprintf(stderr, "cannot start the test server: %s\n", pgd_error_detail());
        return 1;
    }
    RUN(test_half_closed_deferred_answer);
    RUN(test_half_closed_stream);
    RUN(test_closed_client_noticed);
    RUN(test_bad_content_length);
    RUN(test_head_limits);
    ts_stop(&g_srv, NULL);
    return test_summary();
}
