/*
 * tests/unit/test_cors.c — server/cors: the --allowed-origins list (what is an origin, what is
 * refused and how it is named), matching a request's Origin, the Allow-Origin value, and the
 * preflight's header lists. (The headers on real answers, and a real browser: e2e
 * test_server_cors.py.)
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/cors.h"
#include "testutil.h"

static void test_off(void) {
    pgd_cors *c = (pgd_cors *)1;
    CHECK_EQ_INT(pgd_cors_create(NULL, &c), 0);
    CHECK(c == NULL);
    c = (pgd_cors *)1;
    CHECK_EQ_INT(pgd_cors_create(" , ,", &c), 0); /* nothing listed: off */
    CHECK(c == NULL);
    CHECK(!pgd_cors_allows(NULL, "http://a"));
    pgd_cors_destroy(NULL);
}

static void test_list(void) {
    pgd_cors *c = NULL;
    REQUIRE(pgd_cors_create(" http://localhost:3000 ,https://Chat.Example.com,http://[::1]:8080,"
                            "http://10.0.0.7",
                            &c) == 0);
    REQUIRE(c != NULL);
    CHECK(pgd_cors_allows(c, "http://localhost:3000"));
    CHECK(pgd_cors_allows(c, "https://chat.example.com")); /* host and scheme: any case */
    CHECK(pgd_cors_allows(c, "HTTPS://CHAT.EXAMPLE.COM"));
    CHECK(pgd_cors_allows(c, "http://[::1]:8080"));
    CHECK(pgd_cors_allows(c, "http://10.0.0.7"));
    CHECK(!pgd_cors_allows(c, "http://localhost:3001"));  /* another port is another origin */
    CHECK(!pgd_cors_allows(c, "https://localhost:3000")); /* another scheme too */
    CHECK(!pgd_cors_allows(c, "http://localhost"));
    CHECK(!pgd_cors_allows(c, "http://chat.example.com"));
    CHECK(!pgd_cors_allows(c, "https://chat.example.com.evil.net"));
    CHECK(!pgd_cors_allows(c, "null")); /* a sandboxed or file: page */
    CHECK(!pgd_cors_allows(c, NULL));
    CHECK_EQ_STR(pgd_cors_allow_origin(c, "http://localhost:3000"), "http://localhost:3000");
    pgd_cors_destroy(c);
}

static void test_any(void) {
    pgd_cors *c = NULL;
    REQUIRE(pgd_cors_create("*", &c) == 0 && c != NULL);
    CHECK(pgd_cors_allows(c, "http://anything.example:1"));
    CHECK(pgd_cors_allows(c, "null"));
    CHECK(!pgd_cors_allows(c, NULL));
    CHECK_EQ_STR(pgd_cors_allow_origin(c, "http://x"), "*");
    CHECK_EQ_STR(pgd_cors_allow_origin(c, NULL), "*");
    pgd_cors_destroy(c);
    REQUIRE(pgd_cors_create("http://a, *", &c) == 0 && c != NULL); /* "*" wins */
    CHECK(pgd_cors_allows(c, "http://b"));
    CHECK_EQ_STR(pgd_cors_allow_origin(c, "http://a"), "*");
    pgd_cors_destroy(c);
}

static void test_bad_entries(void) {
    static const char *const bad[] = {
        "localhost:3000",          /* no scheme */
        "http://localhost:3000/",  /* a trailing '/' is a path */
        "http://example.com/app",  /* a path */
        "ftp://example.com",       /* not http(s) */
        "http://",                 /* no host */
        "http://:80",              /* no host */
        "http://a:",               /* empty port */
        "http://a:123456",         /* port too long */
        "http://a:8o",             /* not a port */
        "http://user@example.com", /* userinfo */
        "http://exa mple.com",     /* a space inside */
        "http://[::1",             /* unclosed bracket */
        "http://[]",               /* empty brackets */
        "http://example.com?x=1",  /* a query */
        "**",                      /* not the wildcard */
        "http://a,http://b/c",     /* the second is bad */
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(bad); i++) {
        pgd_cors *c = (pgd_cors *)1;
        int rc = pgd_cors_create(bad[i], &c);
        CHECK_EQ_INT(rc, PGD_EINVAL);
        CHECK(c == NULL);
        CHECK(strstr(pgd_error_detail(), "is not an origin") != NULL);
        if (rc != PGD_EINVAL) fprintf(stderr, "    accepted: %s\n", bad[i]);
    }
    pgd_cors *c = NULL;
    CHECK_EQ_INT(pgd_cors_create("http://ok.example, https://x/y", &c), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "'https://x/y'") != NULL); /* names the entry */
}

static void test_header_lists(void) {
    CHECK(pgd_cors_header_list_ok("authorization, content-type"));
    CHECK(pgd_cors_header_list_ok("authorization,content-type,x-stainless-os,openai-beta"));
    CHECK(pgd_cors_header_list_ok(""));
    CHECK(!pgd_cors_header_list_ok("content-type\r\nX-Evil: 1"));
    CHECK(!pgd_cors_header_list_ok("a:b"));
    CHECK(!pgd_cors_header_list_ok("caf\xc3\xa9"));
    char big[1100];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(!pgd_cors_header_list_ok(big));
    big[1024] = '\0';
    CHECK(pgd_cors_header_list_ok(big));
}

int main(void) {
    RUN(test_off);
    RUN(test_list);
    RUN(test_any);
    RUN(test_bad_entries);
    RUN(test_header_lists);
    return test_summary();
}
