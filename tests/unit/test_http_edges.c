/*
 * tests/unit/test_http_edges.c — the HTTP transport (server/http.c) with clients that do odd
 * but legal (or malformed) things, over real sockets on 127.0.0.1 (the test server of
 * http_harness.h):
 *   - a malformed Content-Length gets one JSON 400 (a too large one a 413), not
 *     libmicrohttpd's HTML sent with its header block twice;
 *   - request targets and heads over the server's limits get JSON 414 / 431.
 */
#include "server/http.h"

#include "http_harness.h"

/* pings every 300 ms, watch on, limits: URL 1 KiB, head 2 KiB, body 64 KiB. */
static tserver g_srv;

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
    RUN(test_bad_content_length);
    RUN(test_head_limits);
    ts_stop(&g_srv, NULL);
    return test_summary();
}
