/*
 * tests/unit/test_resp_store.c — server/resp_store: entries found only by their owner, deleted
 * once, the least recently used dropped first when the bytes pass the bound (a lookup counts as
 * a use), an entry larger than the store not kept, and the bytes counted going back to 0. The
 * eviction order is checked against a plain list model of the same operations, run on a random
 * walk.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/resp_store.h"
#include "testutil.h"

static json_t *conv_of(const char *text) {
    return json_pack("[{s:s,s:s}]", "role", "user", "content", text);
}

static void test_owner_get_delete(void) {
    pgd_resp_store *s;
    REQUIRE(pgd_resp_store_new(1 << 20, &s) == 0);
    CHECK_EQ_INT(pgd_resp_store_put(s, "resp_a", 1, "{\"id\":\"resp_a\"}", 15, conv_of("a")), 0);
    CHECK_EQ_INT(pgd_resp_store_put(s, "resp_b", 2, "{}", 2, conv_of("b")), 0);
    CHECK_EQ_INT((int)pgd_resp_store_count(s), 2);
    pgd_str o;
    CHECK_EQ_INT(pgd_resp_store_object(s, "resp_a", 1, &o), 0);
    CHECK(o.len == 15 && !memcmp(o.ptr, "{\"id\":\"resp_a\"}", 15));
    CHECK_EQ_INT(pgd_resp_store_object(s, "resp_a", 2, &o), PGD_ENOTFOUND); /* another owner */
    CHECK_EQ_INT(pgd_resp_store_object(s, "resp_x", 1, &o), PGD_ENOTFOUND);
    const json_t *c = pgd_resp_store_conversation(s, "resp_b", 2);
    CHECK(c && !strcmp(json_string_value(json_object_get(json_array_get(c, 0), "content")), "b"));
    CHECK(pgd_resp_store_conversation(s, "resp_b", 1) == NULL);
    CHECK_EQ_INT(pgd_resp_store_delete(s, "resp_b", 1), PGD_ENOTFOUND); /* not its owner */
    CHECK_EQ_INT(pgd_resp_store_delete(s, "resp_b", 2), 0);
    CHECK_EQ_INT(pgd_resp_store_delete(s, "resp_b", 2), PGD_ENOTFOUND);
    CHECK(pgd_resp_store_conversation(s, "resp_b", 2) == NULL);
    CHECK_EQ_INT(pgd_resp_store_delete(s, "resp_a", 1), 0);
    CHECK_EQ_INT((int)pgd_resp_store_count(s), 0);
    CHECK_EQ_INT((int)pgd_resp_store_bytes(s), 0);
    pgd_resp_store_free(s);
}

static void test_too_large(void) {
    pgd_resp_store *s;
    REQUIRE(pgd_resp_store_new(256, &s) == 0);
    char big[300];
    memset(big, 'x', sizeof big);
    CHECK_EQ_INT(pgd_resp_store_put(s, "resp_big", 0, big, sizeof big, conv_of("c")), PGD_EFULL);
    CHECK(strstr(pgd_error_detail(), "more than the whole store") != NULL);
    CHECK_EQ_INT((int)pgd_resp_store_count(s), 0); /* not kept, nothing else dropped */
    CHECK(pgd_resp_store_conversation(s, "resp_big", 0) == NULL);
    pgd_resp_store_free(s);
}

/* The model: ids in use order (most recent first) with their sizes. */
typedef struct model {
    int ids[64], bytes[64], n;
} model;

static void model_touch(model *m, int k) {
    int i = 0;
    while (i < m->n && m->ids[i] != k) i++;
    if (i == m->n) return;
    int id = m->ids[i], b = m->bytes[i];
    memmove(m->ids + 1, m->ids, (size_t)i * sizeof *m->ids);
    memmove(m->bytes + 1, m->bytes, (size_t)i * sizeof *m->bytes);
    m->ids[0] = id;
    m->bytes[0] = b;
}

static void test_lru_walk(void) {
    /* entries of known sizes: measure one, then the bound holds about five */
    pgd_resp_store *probe;
    REQUIRE(pgd_resp_store_new(1 << 20, &probe) == 0);
    char text[200];
    memset(text, 't', sizeof text);
    REQUIRE(pgd_resp_store_put(probe, "resp_00", 0, text, 100, conv_of("x")) == 0);
    size_t one = pgd_resp_store_bytes(probe); /* every entry below has the same size */
    pgd_resp_store_free(probe);
    const size_t bound = 5 * one + one / 2;
    pgd_resp_store *s;
    REQUIRE(pgd_resp_store_new(bound, &s) == 0);
    model m = {.n = 0};
    unsigned seed = 12345;
    int next = 0;
    for (int step = 0; step < 400; step++) {
        seed = seed * 1103515245u + 12345u;
        unsigned op = (seed >> 16) % 4;
        char id[16];
        if (op < 2 || m.n == 0) { /* put a new one */
            int k = next++ % 100;
            snprintf(id, sizeof id, "resp_%02d", k);
            /* ids come back only after they left (the store replaces a repeated id) */
            bool live = false;
            for (int i = 0; i < m.n; i++) live |= m.ids[i] == k;
            if (live) continue;
            REQUIRE(pgd_resp_store_put(s, id, 0, text, 100, conv_of("x")) == 0);
            memmove(m.ids + 1, m.ids, (size_t)m.n * sizeof *m.ids);
            memmove(m.bytes + 1, m.bytes, (size_t)m.n * sizeof *m.bytes);
            m.ids[0] = k;
            m.bytes[0] = (int)one;
            m.n++;
            size_t total = 0;
            for (int i = 0; i < m.n; i++) total += (size_t)m.bytes[i];
            while (total > bound) total -= (size_t)m.bytes[--m.n];
        } else if (op == 2) { /* use one (a lookup) */
            int k = m.ids[(seed >> 8) % (unsigned)m.n];
            snprintf(id, sizeof id, "resp_%02d", k);
            CHECK(pgd_resp_store_conversation(s, id, 0) != NULL);
            model_touch(&m, k);
        } else { /* delete one */
            int i = (int)((seed >> 8) % (unsigned)m.n);
            snprintf(id, sizeof id, "resp_%02d", m.ids[i]);
            CHECK_EQ_INT(pgd_resp_store_delete(s, id, 0), 0);
            memmove(m.ids + i, m.ids + i + 1, (size_t)(m.n - i - 1) * sizeof *m.ids);
            memmove(m.bytes + i, m.bytes + i + 1, (size_t)(m.n - i - 1) * sizeof *m.bytes);
            m.n--;
        }
        CHECK_EQ_INT((int)pgd_resp_store_count(s), m.n);
        CHECK(pgd_resp_store_bytes(s) == (size_t)m.n * one && pgd_resp_store_bytes(s) <= bound);
    }
    /* exactly the model's ids are there (found without changing the order that matters now) */
    for (int k = 0; k < 100; k++) {
        char id[16];
        snprintf(id, sizeof id, "resp_%02d", k);
        bool want = false;
        for (int i = 0; i < m.n; i++) want |= m.ids[i] == k;
        pgd_str o;
        CHECK_EQ_INT(pgd_resp_store_object(s, id, 0, &o) == 0, want);
    }
    pgd_resp_store_free(s);
}

int main(void) {
    RUN(test_owner_get_delete);
    RUN(test_too_large);
    RUN(test_lru_walk);
    return test_summary();
}
