/*
 * tests/unit/test_tenants.c — the tenants file (server/tenants.h): a full file read back field
 * by field, every refusal naming what is wrong, sha256 against the FIPS 180-2 test vectors, key
 * lookup (tenant, admin, unknown), the Authorization header's bearer token, the token buckets
 * (take, refill, Retry-After, refund, never-fits) with a driven clock, and the duration strings
 * of the x-ratelimit-reset-* headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/tenants.h"
#include "testutil.h"

#define SHA_ABC   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") */
#define SHA_LONG "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"

static pgd_tenants *parse(const char *json) {
    pgd_tenants *t = NULL;
    int rc = pgd_tenants_parse(json, strlen(json), "t.json", &t);
    if (rc) fprintf(stderr, "    parse: %s\n", pgd_error_detail());
    return t;
}

static void test_sha256_vectors(void) {
    char hex[65];
    CHECK_EQ_INT(pgd_key_sha256_hex("abc", 3, hex), 0);
    CHECK_EQ_STR(hex, SHA_ABC);
    CHECK_EQ_INT(pgd_key_sha256_hex("", 0, hex), 0);
    CHECK_EQ_STR(hex, SHA_EMPTY);
    const char *l = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK_EQ_INT(pgd_key_sha256_hex(l, strlen(l), hex), 0);
    CHECK_EQ_STR(hex, SHA_LONG);
}

static void test_full_file(void) {
    pgd_tenants *t =
        parse("{\"tenants\": ["
              " {\"name\": \"acme\", \"keys_sha256\": [\"" SHA_ABC "\", \"" SHA_LONG "\"],"
              "  \"weight\": 2, \"priority\": 5,"
              "  \"limits\": {\"max_concurrent\": 16, \"rpm\": 600, \"tpm\": 200000,"
              "             \"max_tokens\": 4096, \"max_context\": 8192},"
              "  \"prefix_cache\": \"isolated\"},"
              " {\"name\": \"beta-2.x_y\", \"keys_sha256\": [], \"weight\": 0.5,"
              "  \"prefix_cache\": \"shared\"}],"
              " \"admin_keys_sha256\": [\"" SHA_EMPTY "\"],"
              " \"unauthenticated\": [\"/health\", \"/\"]}");
    REQUIRE(t);
    CHECK_EQ_INT(t->n, 2);
    CHECK_EQ_STR(t->t[0].name, "acme");
    CHECK_EQ_INT(t->t[0].n_keys, 2);
    CHECK_NEAR(t->t[0].weight, 2.0, 0);
    CHECK_EQ_INT(t->t[0].priority, 5);
    CHECK_EQ_INT(t->t[0].limits.max_concurrent, 16);
    CHECK_EQ_INT(t->t[0].limits.rpm, 600);
    CHECK_EQ_INT(t->t[0].limits.tpm, 200000);
    CHECK_EQ_INT(t->t[0].limits.max_tokens, 4096);
    CHECK_EQ_INT(t->t[0].limits.max_context, 8192);
    CHECK(!t->t[0].shared_cache);
    CHECK_EQ_INT(t->t[0].keys[0][0], 0xba);
    CHECK_EQ_INT(t->t[0].keys[0][31], 0xad);
    CHECK_EQ_STR(t->t[1].name, "beta-2.x_y");
    CHECK_NEAR(t->t[1].weight, 0.5, 0);
    CHECK_EQ_INT(t->t[1].priority, 0);
    CHECK(t->t[1].shared_cache);
    /* limits left out are unlimited */
    CHECK_EQ_INT(t->t[1].limits.rpm, PGD_TENANT_UNLIMITED);
    CHECK_EQ_INT(t->t[1].limits.max_context, PGD_TENANT_UNLIMITED);
    CHECK_EQ_INT(t->n_admin, 1);
    CHECK(pgd_tenants_is_open(t, "/health"));
    CHECK(pgd_tenants_is_open(t, "/"));
    CHECK(!pgd_tenants_is_open(t, "/metrics"));
    CHECK(!pgd_tenants_is_open(t, "/health/"));

    bool admin;
    CHECK_EQ_INT(pgd_tenants_lookup(t, "abc", 3, &admin), 0);
    CHECK(!admin);
    const char *l = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK_EQ_INT(pgd_tenants_lookup(t, l, strlen(l), &admin), 0);
    CHECK_EQ_INT(pgd_tenants_lookup(t, "", 0, &admin), -1);
    CHECK(admin);
    CHECK_EQ_INT(pgd_tenants_lookup(t, "abd", 3, &admin), -1);
    CHECK(!admin);
    CHECK_EQ_INT(pgd_tenants_lookup(t, "ab", 2, &admin), -1);
    CHECK_EQ_INT(pgd_tenants_lookup(t, "abcabc", 6, &admin), -1);
    pgd_tenants_free(t);
}

static void test_defaults(void) {
    pgd_tenants *t = parse("{\"tenants\": [{\"name\": \"a\"}]}");
    REQUIRE(t);
    CHECK_NEAR(t->t[0].weight, 1.0, 0);
    CHECK(!t->t[0].shared_cache); /* isolated unless asked */
    CHECK_EQ_INT(t->t[0].limits.max_concurrent, PGD_TENANT_UNLIMITED);
    CHECK_EQ_INT(t->n_open, 1);
    CHECK(pgd_tenants_is_open(t, "/health"));
    CHECK(!pgd_tenants_is_open(t, "/"));
    pgd_tenants_free(t);
    /* an explicit empty list opens nothing, not even /health */
    t = parse("{\"tenants\": [{\"name\": \"a\"}], \"unauthenticated\": []}");
    REQUIRE(t);
    CHECK(!pgd_tenants_is_open(t, "/health"));
    pgd_tenants_free(t);
}

/* Each bad file is refused with a detail containing `want`. */
static void refused(const char *json, const char *want) {
    pgd_tenants *t = NULL;
    int rc = pgd_tenants_parse(json, strlen(json), "t.json", &t);
    if (rc == 0 || t || !strstr(pgd_error_detail(), want) ||
        !strstr(pgd_error_detail(), "t.json")) {
        fprintf(stderr, "    %s\n    -> rc %d, detail \"%s\" (wanted \"%s\")\n", json, rc,
                pgd_error_detail(), want);
        tu_failed_checks++;
    }
    pgd_tenants_free(t);
}

static void test_refusals(void) {
    refused("{\"tenants\": [{\"name\": \"a\"}", "line");
    refused("[]", "not a JSON object");
    refused("{}", "non-empty array");
    refused("{\"tenants\": []}", "non-empty array");
    refused("{\"tenants\": [{\"name\": \"a\"}], \"admins\": []}", "unknown field 'admins'");
    refused("{\"tenants\": [{\"name\": \"a\", \"wieght\": 2}]}", "unknown field 'wieght'");
    refused("{\"tenants\": [{\"name\": \"a\", \"limits\": {\"rmp\": 1}}]}", "unknown field 'rmp'");
    refused("{\"tenants\": [{\"name\": \"a\", \"limits\": {\"rpm\": -1}}]}", "limits.rpm");
    refused("{\"tenants\": [{\"name\": \"a\", \"limits\": {\"tpm\": 1.5}}]}", "limits.tpm");
    refused("{\"tenants\": [{\"name\": \"a\", \"limits\": 3}]}", "limits must be an object");
    refused("{\"tenants\": [{}]}", "needs a name");
    refused("{\"tenants\": [{\"name\": \"a b\"}]}", "tenant name 'a b'");
    refused("{\"tenants\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}", "two tenants are named 'a'");
    refused("{\"tenants\": [{\"name\": \"a\", \"weight\": 0}]}", "weight");
    refused("{\"tenants\": [{\"name\": \"a\", \"weight\": \"2\"}]}", "weight");
    refused("{\"tenants\": [{\"name\": \"a\", \"priority\": 1.5}]}", "priority");
    refused("{\"tenants\": [{\"name\": \"a\", \"prefix_cache\": \"none\"}]}", "prefix_cache");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys_sha256\": \"" SHA_ABC "\"}]}",
            "must be an array");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys_sha256\": [\"abc\"]}]}", "keys_sha256[0]");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys_sha256\": [\"" SHA_ABC "\", \"zz" SHA_ABC
            "\"]}]}",
            "keys_sha256[1]");
    char bad[256];
    snprintf(bad, sizeof bad, "{\"tenants\": [{\"name\": \"a\", \"keys_sha256\": [\"%.63sg\"]}]}",
             SHA_ABC);
    refused(bad, "not hexadecimal");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys_sha256\": [\"" SHA_ABC "\"]},"
            " {\"name\": \"b\", \"keys_sha256\": [\"" SHA_ABC "\"]}]}",
            "listed twice");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys_sha256\": [\"" SHA_ABC "\"]}],"
            " \"admin_keys_sha256\": [\"" SHA_ABC "\"]}",
            "holds an admin key");
    refused("{\"tenants\": [{\"name\": \"a\"}], \"unauthenticated\": [\"health\"]}",
            "unauthenticated[0]");
    refused("{\"tenants\": [{\"name\": \"a\"}], \"tenants\": []}", "duplicate");
    /* a missing file */
    pgd_tenants *t = NULL;
    CHECK_EQ_INT(pgd_tenants_load("/nonexistent/tenants.json", &t), PGD_EIO);
    CHECK(t == NULL);
    CHECK(strstr(pgd_error_detail(), "/nonexistent/tenants.json") != NULL);
}

static void test_bearer(void) {
    size_t n;
    const char *k = pgd_bearer_token("Bearer sk-123", &n);
    REQUIRE(k);
    CHECK(n == 6 && !memcmp(k, "sk-123", 6));
    k = pgd_bearer_token("bearer sk-123", &n);
    CHECK(k && n == 6);
    k = pgd_bearer_token("BEARER  \t sk-123  ", &n);
    CHECK(k && n == 6 && !memcmp(k, "sk-123", 6));
    CHECK(pgd_bearer_token("Bearer", &n) == NULL);
    CHECK(pgd_bearer_token("Bearer   ", &n) == NULL);
    CHECK(pgd_bearer_token("Bearersk-123", &n) == NULL);
    CHECK(pgd_bearer_token("Basic c2stMTIz", &n) == NULL);
    CHECK(pgd_bearer_token("sk-123", &n) == NULL);
    CHECK(pgd_bearer_token(NULL, &n) == NULL);
}

#define SEC 1000000000ull

static void test_bucket(void) {
    pgd_bucket b;
    double retry;
    uint64_t t0 = 1000 * SEC;
    pgd_bucket_init(&b, 60, t0); /* 60 per minute: one per second */
    for (int i = 0; i < 60; i++) CHECK(pgd_bucket_take(&b, 1, t0, &retry));
    CHECK(!pgd_bucket_take(&b, 1, t0, &retry));
    CHECK_NEAR(retry, 1.0, 1e-9);
    CHECK_NEAR(pgd_bucket_reset_s(&b), 60.0, 1e-9);
    /* half a second later: half a token, not enough */
    CHECK(!pgd_bucket_take(&b, 1, t0 + SEC / 2, &retry));
    CHECK_NEAR(retry, 0.5, 1e-9);
    CHECK(pgd_bucket_take(&b, 1, t0 + SEC, &retry));
    /* a refund shows at once, capped at the capacity */
    pgd_bucket_refund(&b, 10, t0 + SEC);
    CHECK_NEAR(pgd_bucket_level(&b, t0 + SEC), 10.0, 1e-9);
    pgd_bucket_refund(&b, 1000, t0 + SEC);
    CHECK_NEAR(pgd_bucket_level(&b, t0 + SEC), 60.0, 1e-9);
    CHECK_NEAR(pgd_bucket_reset_s(&b), 0.0, 1e-9);
    /* more than the capacity never fits */
    CHECK(!pgd_bucket_take(&b, 61, t0 + SEC, &retry));
    CHECK(retry < 0);
    CHECK_NEAR(pgd_bucket_level(&b, t0 + SEC), 60.0, 1e-9);
    /* a large amount waits for the refill it needs */
    pgd_bucket tb;
    pgd_bucket_init(&tb, 1200, t0);
    CHECK(pgd_bucket_take(&tb, 1000, t0, &retry));
    CHECK(!pgd_bucket_take(&tb, 800, t0, &retry));
    CHECK_NEAR(retry, 30.0, 1e-9); /* 600 missing at 20 per second */
    CHECK(pgd_bucket_take(&tb, 800, t0 + 30 * SEC, &retry));
    /* the clock going backwards refills nothing */
    CHECK(!pgd_bucket_take(&tb, 1, t0, &retry));
}

static void test_durations(void) {
    char s[32];
    static const struct {
        double v;
        const char *want;
    } cases[] = {{0, "0s"},     {-1, "0s"},    {0.02, "20ms"},   {0.0201, "21ms"},
                 {1, "1s"},     {1.2, "2s"},   {59.5, "1m0s"},   {60, "1m0s"},
                 {360, "6m0s"}, {361, "6m1s"}, {3600, "1h0m0s"}, {3725, "1h2m5s"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pgd_duration_str(cases[i].v, s, sizeof s);
        CHECK_EQ_STR(s, cases[i].want);
    }
}

int main(void) {
    RUN(test_sha256_vectors);
    RUN(test_full_file);
    RUN(test_defaults);
    RUN(test_refusals);
    RUN(test_bearer);
    RUN(test_bucket);
    RUN(test_durations);
    return test_summary();
}
