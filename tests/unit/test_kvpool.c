/*
 * tests/unit/test_kvpool.c — the KV block pool and block tables (kvpool/).
 *
 * Unit tests pin down the contract (null block, exhaustion, eviction order, prefix hits and
 * misses, collisions, copy-on-write, slot mapping); the property test drives random workloads
 * against a shadow model kept here: which table owns which block (hence every ref count and
 * the free count) and a shadow KV memory (each slot holds a hash of the context it was computed
 * for), so a wrong prefix hit, a missing copy-on-write or a write into a shared block shows up.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kvpool/block_table.h"
#include "kvpool/kvpool.h"
#include "testutil.h"

/* ---------------------------------------------------------------------------------------- */
/* helpers                                                                                  */

static uint64_t rng_next(uint64_t *s) {
    /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t rng_below(uint64_t *s, uint32_t n) {
    return n ? (uint32_t)(rng_next(s) % n) : 0;
}

static void fill_seq(int32_t *t, uint32_t n, int32_t base) {
    for (uint32_t i = 0; i < n; i++) t[i] = base + (int32_t)i;
}

static bool stats_eq(const pgd_kvpool_stats *a, const pgd_kvpool_stats *b) {
    return a->n_free == b->n_free && a->n_used == b->n_used && a->n_cached == b->n_cached &&
           a->n_cached_free == b->n_cached_free && a->query_tokens == b->query_tokens &&
           a->hit_tokens == b->hit_tokens && a->query_blocks == b->query_blocks &&
           a->hit_blocks == b->hit_blocks && a->registrations == b->registrations &&
           a->evictions == b->evictions;
}

static uint32_t ref_of(pgd_kvpool *p, int32_t id) {
    return pgd_kvpool_refcount(p, id);
}

static bool is_cached(pgd_kvpool *p, int32_t id) {
    pgd_kvpool_block b;
    return pgd_kvpool_block_info(p, id, &b) == 0 && b.cached;
}

/* A table admitted with `n` prompt tokens, all computed and registered. */
static int admit_all(pgd_block_table *bt, const int32_t *tokens, uint32_t n, uint32_t *cached) {
    uint32_t c = 0;
    uint32_t hit = pgd_block_table_find_prefix(bt, tokens, n);
    int rc = pgd_block_table_attach_prefix(bt, tokens, n, n - hit, 0, &c);
    if (rc) return rc;
    if (cached) *cached = c;
    return pgd_block_table_cache_blocks(bt, tokens, n);
}

/* ---------------------------------------------------------------------------------------- */
/* unit tests                                                                               */

static void test_create(void) {
    pgd_kvpool *p = NULL;
    CHECK_EQ_INT(pgd_kvpool_create(1, 16, true, &p), PGD_EINVAL);
    CHECK(p == NULL);
    CHECK_EQ_INT(pgd_kvpool_create(0, 16, true, &p), PGD_EINVAL);
    CHECK_EQ_INT(pgd_kvpool_create(10, 0, true, &p), PGD_EINVAL);
    CHECK(p == NULL);
    REQUIRE(pgd_kvpool_create(10, 16, true, &p) == 0);
    CHECK_EQ_INT(pgd_kvpool_block_size(p), 16);
    CHECK_EQ_INT(pgd_kvpool_num_blocks(p), 10);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 9);
    pgd_kvpool_stats st;
    pgd_kvpool_get_stats(p, &st);
    CHECK_EQ_INT(st.n_blocks, 9);
    CHECK_EQ_INT(st.n_used, 0);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_kvpool_destroy(p);
    pgd_kvpool_destroy(NULL);
}

static void test_null_block_never_handed_out(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(9, 4, true, &p) == 0);
    int32_t ids[8];
    REQUIRE(pgd_kvpool_alloc(p, 8, ids) == 0);
    bool seen[9] = {false};
    for (int i = 0; i < 8; i++) {
        CHECK(ids[i] >= 1 && ids[i] <= 8);
        if (ids[i] >= 1 && ids[i] <= 8) {
            CHECK(!seen[ids[i]]);
            seen[ids[i]] = true;
        }
    }
    int32_t extra = -1;
    CHECK_EQ_INT(pgd_kvpool_alloc(p, 1, &extra), PGD_ENOBLOCKS);
    CHECK_EQ_INT(extra, -1);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    for (int i = 0; i < 8; i++) pgd_kvpool_release(p, ids[i]);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 8);

    /* Through block tables, repeatedly, until exhaustion. */
    pgd_block_table t[3];
    for (int k = 0; k < 3; k++) pgd_block_table_init(&t[k], p, 0);
    for (int round = 0; round < 20; round++) {
        for (int k = 0; k < 3; k++) {
            pgd_block_copy cow;
            int rc = pgd_block_table_grow(&t[k], 1 + (uint32_t)(round * 3 + k) % 7, &cow);
            CHECK(rc == 0 || rc == PGD_ENOBLOCKS);
            if (rc == PGD_ENOBLOCKS) pgd_block_table_free(&t[(k + 1) % 3]);
            for (uint32_t b = 0; b < t[k].n_blocks; b++) CHECK(t[k].blocks[b] != 0);
        }
        CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    }
    pgd_kvpool_block z;
    CHECK_EQ_INT(pgd_kvpool_block_info(p, 0, &z), 0);
    CHECK(z.ref == 0 && !z.on_free_list && !z.cached);
    for (int k = 0; k < 3; k++) pgd_block_table_destroy(&t[k]);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 8);
    pgd_kvpool_destroy(p);
}

static void test_exhaustion_changes_nothing(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(5, 4, true, &p) == 0); /* 4 usable blocks */
    pgd_block_table a, b;
    pgd_block_table_init(&a, p, 7);
    pgd_block_table_init(&b, p, 7);
    pgd_block_copy cow;
    REQUIRE(pgd_block_table_grow(&a, 10, &cow) == 0); /* 3 blocks */
    int32_t before[3];
    memcpy(before, a.blocks, sizeof before);
    pgd_kvpool_stats s0, s1;
    pgd_kvpool_get_stats(p, &s0);

    CHECK_EQ_INT(pgd_block_table_blocks_needed(&b, 8), 2);
    CHECK_EQ_INT(pgd_block_table_grow(&b, 8, &cow), PGD_ENOBLOCKS);
    CHECK_EQ_INT(b.n_blocks, 0);
    CHECK_EQ_INT(b.n_tokens, 0);
    CHECK_EQ_INT(pgd_block_table_grow(&a, 7, &cow), PGD_ENOBLOCKS); /* 17 tokens: 5 blocks */
    CHECK_EQ_INT(a.n_tokens, 10);
    CHECK_EQ_INT(a.n_blocks, 3);
    CHECK(memcmp(before, a.blocks, sizeof before) == 0);
    int32_t prompt[9];
    fill_seq(prompt, 9, 100);
    uint32_t c = 99;
    CHECK_EQ_INT(pgd_block_table_attach_prefix(&b, prompt, 9, 9, 0, &c), PGD_ENOBLOCKS);
    CHECK_EQ_INT(c, 0);
    CHECK_EQ_INT(b.n_blocks, 0);
    pgd_kvpool_get_stats(p, &s1);
    CHECK(stats_eq(&s0, &s1));
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    CHECK_EQ_INT(pgd_block_table_grow(&a, 6, &cow), 0); /* exactly the last block */
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 0);
    pgd_block_table_destroy(&a);
    pgd_block_table_destroy(&b);

    /* Cached free blocks that a hit would take off the free list count against the budget. */
    pgd_block_table x, y, z;
    pgd_block_table_init(&x, p, 1);
    pgd_block_table_init(&y, p, 1);
    pgd_block_table_init(&z, p, 1);
    REQUIRE(admit_all(&x, prompt, 9, NULL) == 0); /* 2 full blocks cached + 1 partial */
    pgd_block_table_free(&x);
    REQUIRE(pgd_block_table_grow(&y, 8, &cow) == 0); /* takes the 2 uncached free blocks */
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 2);
    pgd_kvpool_get_stats(p, &s0);
    CHECK_EQ_INT(s0.n_cached_free, 2);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&z, prompt, 9), 8);
    CHECK_EQ_INT(pgd_block_table_attach_prefix(&z, prompt, 9, 1, 0, &c), PGD_ENOBLOCKS);
    pgd_kvpool_get_stats(p, &s1);
    CHECK(stats_eq(&s0, &s1));
    CHECK_EQ_INT(z.n_blocks, 0);
    CHECK_EQ_INT(pgd_block_table_attach_prefix(&z, prompt, 9, 0, 0, &c), 0); /* hits only: fits */
    CHECK_EQ_INT(c, 8);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 0);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_table_destroy(&x);
    pgd_block_table_destroy(&y);
    pgd_block_table_destroy(&z);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 4);
    pgd_kvpool_destroy(p);
}

static void test_eviction_order(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(7, 2, true, &p) == 0); /* 6 usable blocks: 1..6 */
    int32_t ta[9];
    fill_seq(ta, 9, 10);
    pgd_block_table a, x;
    pgd_block_table_init(&a, p, 0);
    pgd_block_table_init(&x, p, 0);
    pgd_block_copy cow;
    uint32_t c;
    REQUIRE(pgd_block_table_attach_prefix(&a, ta, 9, 8, 0, &c) == 0); /* 4 full blocks */
    REQUIRE(pgd_block_table_cache_blocks(&a, ta, 8) == 0);
    CHECK_EQ_INT(a.n_cached, 4);
    int32_t ab[4];
    memcpy(ab, a.blocks, sizeof ab);
    pgd_block_table_free(&a); /* tail first: a3, a2, a1, a0 join the tail in that order */
    CHECK_EQ_INT(pgd_block_table_find_prefix(&a, ta, 9), 8);

    /* The two never-used blocks go first, then the suffix a3, then a2 ... */
    REQUIRE(pgd_block_table_grow(&x, 4, &cow) == 0);
    pgd_kvpool_stats st;
    pgd_kvpool_get_stats(p, &st);
    CHECK_EQ_INT(st.evictions, 0);
    CHECK_EQ_INT(st.n_cached_free, 4);
    REQUIRE(pgd_block_table_grow(&x, 2, &cow) == 0);
    CHECK_EQ_INT(x.blocks[2], ab[3]);
    CHECK(!is_cached(p, ab[3]));
    CHECK_EQ_INT(pgd_block_table_find_prefix(&a, ta, 9), 6);
    REQUIRE(pgd_block_table_grow(&x, 2, &cow) == 0);
    CHECK_EQ_INT(x.blocks[3], ab[2]);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&a, ta, 9), 4);
    pgd_kvpool_get_stats(p, &st);
    CHECK_EQ_INT(st.evictions, 2);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_table_free(&x);

    /* Least recently freed first: a hit refreshes a prefix; an uncached block goes to the head. */
    pgd_kvpool_reset_prefix_cache(p);
    int32_t tb[5], tc[5];
    fill_seq(tb, 5, 200);
    fill_seq(tc, 5, 300);
    pgd_block_table b, cc, y;
    pgd_block_table_init(&b, p, 0);
    pgd_block_table_init(&cc, p, 0);
    pgd_block_table_init(&y, p, 0);
    REQUIRE(admit_all(&b, tb, 5, NULL) == 0); /* b0 b1 cached, b2 partial */
    REQUIRE(admit_all(&cc, tc, 5, NULL) == 0);
    int32_t bb[3], cb[3];
    memcpy(bb, b.blocks, sizeof bb);
    memcpy(cb, cc.blocks, sizeof cb);
    pgd_block_table_free(&b);  /* list: b2 (head) ... b1 b0 */
    pgd_block_table_free(&cc); /* list: c2 b2 ... b1 b0 c1 c0 */
    REQUIRE(pgd_block_table_grow(&y, 1, &cow) == 0);
    CHECK_EQ_INT(y.blocks[0], cb[2]); /* the uncached partial block is reused first */
    REQUIRE(pgd_block_table_grow(&y, 2, &cow) == 0);
    CHECK_EQ_INT(y.blocks[1], bb[2]);
    /* Hit b's prefix again: b0 leaves the list, then comes back at the tail. */
    pgd_block_table z;
    pgd_block_table_init(&z, p, 0);
    REQUIRE(pgd_block_table_attach_prefix(&z, tb, 3, 0, 0, &c) == 0);
    CHECK_EQ_INT(c, 2);
    CHECK_EQ_INT(z.blocks[0], bb[0]);
    pgd_block_table_free(&z); /* list: b1 c1 c0 b0 */
    REQUIRE(pgd_block_table_grow(&y, 2, &cow) == 0);
    CHECK_EQ_INT(y.blocks[2], bb[1]);
    REQUIRE(pgd_block_table_grow(&y, 2, &cow) == 0);
    CHECK_EQ_INT(y.blocks[3], cb[1]);
    REQUIRE(pgd_block_table_grow(&y, 2, &cow) == 0);
    CHECK_EQ_INT(y.blocks[4], cb[0]);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&z, tb, 5), 2); /* b0 survived longest */
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_table_destroy(&y);
    pgd_block_table_destroy(&b);
    pgd_block_table_destroy(&cc);
    pgd_block_table_destroy(&z);
    pgd_block_table_destroy(&a);
    pgd_block_table_destroy(&x);
    pgd_kvpool_destroy(p);
}

static void test_prefix_hit_after_free(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(33, 4, true, &p) == 0);
    int32_t t[14];
    fill_seq(t, 14, 1000);
    pgd_block_table a, b;
    pgd_block_table_init(&a, p, 5);
    pgd_block_table_init(&b, p, 5);
    uint32_t c = 99;
    REQUIRE(admit_all(&a, t, 14, &c) == 0);
    CHECK_EQ_INT(c, 0);
    CHECK_EQ_INT(a.n_cached, 3);
    int32_t ab[4];
    memcpy(ab, a.blocks, sizeof ab);
    pgd_block_table_free(&a);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 32);

    REQUIRE(pgd_block_table_attach_prefix(&b, t, 14, 2, 0, &c) == 0);
    CHECK_EQ_INT(c, 12);
    CHECK_EQ_INT(b.n_tokens, 14);
    CHECK_EQ_INT(b.n_cached, 3);
    CHECK(memcmp(b.blocks, ab, 3 * sizeof(int32_t)) == 0);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(ref_of(p, ab[i]), 1);
    pgd_kvpool_stats st;
    pgd_kvpool_get_stats(p, &st);
    CHECK_EQ_INT(st.query_tokens, 28);
    CHECK_EQ_INT(st.hit_tokens, 12);
    CHECK_EQ_INT(st.query_blocks, 6);
    CHECK_EQ_INT(st.hit_blocks, 3);
    CHECK_EQ_INT(st.n_cached_free, 0);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    CHECK_EQ_INT(pgd_block_table_check(&b), 0);

    /* Never the whole prompt: a 12-token prompt can hit at most 2 blocks. */
    pgd_block_table d;
    pgd_block_table_init(&d, p, 5);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&d, t, 12), 8);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&d, t, 13), 12);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&d, t, 4), 0);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&d, t, 0), 0);
    REQUIRE(pgd_block_table_attach_prefix(&d, t, 3, 0, 0, &c) == 0); /* nothing at all */
    CHECK_EQ_INT(c, 0);
    CHECK_EQ_INT(d.n_blocks, 0);
    CHECK_EQ_INT(pgd_block_table_check(&d), 0);
    /* Shared while b still holds them. */
    REQUIRE(pgd_block_table_attach_prefix(&d, t, 12, 4, 0, &c) == 0);
    CHECK_EQ_INT(c, 8);
    CHECK_EQ_INT(ref_of(p, ab[0]), 2);
    CHECK_EQ_INT(ref_of(p, ab[1]), 2);
    CHECK_EQ_INT(ref_of(p, ab[2]), 1);
    CHECK(d.blocks[2] != ab[2]);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_table_destroy(&b);
    pgd_block_table_destroy(&d);
    pgd_block_table_destroy(&a);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 32);
    pgd_kvpool_destroy(p);
}

static void test_hit_needs_chain_tokens_salt(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(65, 4, true, &p) == 0);
    int32_t t[13], u[13];
    fill_seq(t, 13, 1);
    pgd_block_table a, q;
    pgd_block_table_init(&a, p, 1);
    REQUIRE(admit_all(&a, t, 13, NULL) == 0);
    CHECK_EQ_INT(a.n_cached, 3);
    pgd_block_table_free(&a);

    pgd_block_table_init(&q, p, 1);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&q, t, 13), 12);
    q.salt = 2; /* another tenant */
    CHECK_EQ_INT(pgd_block_table_find_prefix(&q, t, 13), 0);
    q.salt = 1;
    memcpy(u, t, sizeof u);
    u[1] = 77; /* first block differs: blocks 1 and 2 have the same tokens but another parent */
    CHECK_EQ_INT(pgd_block_table_find_prefix(&q, u, 13), 0);
    memcpy(u, t, sizeof u);
    u[6] = 77; /* second block differs */
    CHECK_EQ_INT(pgd_block_table_find_prefix(&q, u, 13), 4);
    memcpy(u, t, sizeof u);
    u[11] = 77; /* third block differs */
    CHECK_EQ_INT(pgd_block_table_find_prefix(&q, u, 13), 8);
    memcpy(u, t, sizeof u);
    u[12] = 77; /* only the uncached tail differs */
    CHECK_EQ_INT(pgd_block_table_find_prefix(&q, u, 13), 12);

    /* The same block content under another parent is a separate cache entry. */
    int32_t v[9];
    fill_seq(v, 9, 1);
    v[0] = 500;
    memcpy(v + 4, t + 4, 4 * sizeof(int32_t));
    pgd_block_table b;
    pgd_block_table_init(&b, p, 1);
    REQUIRE(admit_all(&b, v, 9, NULL) == 0);
    CHECK_EQ_INT(b.n_cached, 2);
    int32_t parent_t = pgd_kvpool_lookup(p, 0, 1, t);
    int32_t second_t = pgd_kvpool_lookup(p, parent_t, 1, t + 4);
    CHECK(parent_t != 0 && second_t != 0);
    CHECK(second_t != b.blocks[1]);
    CHECK_EQ_INT(pgd_kvpool_lookup(p, b.blocks[0], 1, t + 4), b.blocks[1]);
    CHECK_EQ_INT(pgd_kvpool_lookup(p, b.blocks[0], 2, t + 4), 0);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_table_destroy(&a);
    pgd_block_table_destroy(&b);
    pgd_block_table_destroy(&q);
    pgd_kvpool_destroy(p);
}

static void test_cache_off_never_hits(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(17, 4, false, &p) == 0);
    CHECK(!pgd_kvpool_caching(p));
    int32_t t[9];
    fill_seq(t, 9, 3);
    pgd_block_table a;
    pgd_block_table_init(&a, p, 0);
    uint32_t c = 99;
    for (int round = 0; round < 3; round++) {
        REQUIRE(admit_all(&a, t, 9, &c) == 0);
        CHECK_EQ_INT(c, 0);
        CHECK_EQ_INT(a.n_cached, 0);
        CHECK_EQ_INT(pgd_kvpool_lookup(p, 0, 0, t), 0);
        CHECK_EQ_INT(pgd_kvpool_register(p, a.blocks[0], 0, 0, t), a.blocks[0]);
        CHECK(!is_cached(p, a.blocks[0]));
        pgd_block_table_free(&a);
        CHECK_EQ_INT(pgd_block_table_find_prefix(&a, t, 9), 0);
    }
    pgd_kvpool_stats st;
    pgd_kvpool_get_stats(p, &st);
    CHECK_EQ_INT(st.n_cached, 0);
    CHECK_EQ_INT(st.query_tokens, 0);
    CHECK_EQ_INT(st.hit_tokens, 0);
    CHECK_EQ_INT(st.evictions, 0);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_table_destroy(&a);
    pgd_kvpool_destroy(p);
}

static void test_hash_collisions(void) {
    for (unsigned bits = 0; bits <= 2; bits++) {
        pgd_kvpool *p;
        REQUIRE(pgd_kvpool_create(41, 2, true, &p) == 0);
        pgd__kvpool_set_hash_bits(p, bits);
        enum { NS = 6, LEN = 9 };
        int32_t toks[NS][LEN];
        pgd_block_table t[NS];
        for (int s = 0; s < NS; s++) {
            for (int i = 0; i < LEN; i++) toks[s][i] = (int32_t)((i * 7 + s * (i % 3)) % 5);
            toks[s][0] = s; /* every sequence differs from its first block on */
            pgd_block_table_init(&t[s], p, (uint64_t)(s % 2));
            REQUIRE(admit_all(&t[s], toks[s], LEN, NULL) == 0);
            CHECK_EQ_INT(t[s].n_cached, 4);
        }
        /* All keys collide (bits 0) or nearly; lookups still return the exact block. */
        pgd_kvpool_block b0, b1;
        pgd_kvpool_block_info(p, t[0].blocks[0], &b0);
        pgd_kvpool_block_info(p, t[1].blocks[1], &b1);
        if (bits == 0) CHECK(b0.key.lo == b1.key.lo && b0.key.hi == b1.key.hi);
        for (int s = 0; s < NS; s++) {
            int32_t parent = 0;
            for (int k = 0; k < 4; k++) {
                int32_t id = pgd_kvpool_lookup(p, parent, (uint64_t)(s % 2), toks[s] + 2 * k);
                CHECK_EQ_INT(id, t[s].blocks[k]);
                parent = id;
            }
            CHECK_EQ_INT(pgd_kvpool_lookup(p, 0, (uint64_t)(1 - s % 2), toks[s]), 0);
        }
        for (int s = 0; s < NS; s++) pgd_block_table_free(&t[s]);
        CHECK_EQ_INT(pgd_kvpool_check(p), 0);
        for (int s = 0; s < NS; s++) {
            uint32_t c;
            REQUIRE(pgd_block_table_attach_prefix(&t[s], toks[s], LEN, 1, 0, &c) == 0);
            CHECK_EQ_INT(c, 8);
        }
        /* Evict through allocation (collision runs shift on removal), then look up again. */
        pgd_block_table big;
        pgd_block_table_init(&big, p, 9);
        for (int s = 0; s < NS; s += 2) pgd_block_table_free(&t[s]);
        pgd_block_copy cow;
        REQUIRE(pgd_block_table_grow(&big, 2 * pgd_kvpool_num_free(p) - 20, &cow) == 0);
        CHECK_EQ_INT(pgd_kvpool_check(p), 0);
        for (int s = 1; s < NS; s += 2) {
            pgd_block_table_free(&t[s]);
            CHECK_EQ_INT(pgd_block_table_find_prefix(&t[s], toks[s], LEN), 8);
        }
        for (int s = 0; s < NS; s += 2) {
            uint32_t hit = pgd_block_table_find_prefix(&t[s], toks[s], LEN);
            CHECK(hit % 2 == 0 && hit <= 8);
            uint32_t c;
            REQUIRE(pgd_block_table_attach_prefix(&t[s], toks[s], LEN, LEN - hit, 0, &c) == 0);
            CHECK_EQ_INT(c, hit);
            REQUIRE(pgd_block_table_cache_blocks(&t[s], toks[s], LEN) == 0);
        }
        CHECK_EQ_INT(pgd_kvpool_check(p), 0);
        for (int s = 0; s < NS; s++) pgd_block_table_destroy(&t[s]);
        pgd_block_table_destroy(&big);
        CHECK_EQ_INT(pgd_kvpool_num_free(p), 40);
        CHECK_EQ_INT(pgd_kvpool_check(p), 0);
        pgd_kvpool_destroy(p);
    }
}

static void test_copy_on_write(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(9, 4, true, &p) == 0);
    pgd_block_table a, b;
    pgd_block_table_init(&a, p, 3);
    pgd_block_table_init(&b, p, 99);
    pgd_block_copy cow = {-1, -1};
    REQUIRE(pgd_block_table_grow(&a, 6, &cow) == 0); /* a0 full, a1 holds 2 of 4 */
    CHECK(cow.src == 0 && cow.dst == 0);
    int32_t a0 = a.blocks[0], a1 = a.blocks[1];
    REQUIRE(pgd_block_table_fork(&b, &a) == 0);
    CHECK_EQ_INT(b.salt, 3);
    CHECK_EQ_INT(b.n_tokens, 6);
    CHECK_EQ_INT(ref_of(p, a0), 2);
    CHECK_EQ_INT(ref_of(p, a1), 2);
    CHECK_EQ_INT(pgd_block_table_fork(&b, &a), PGD_EINVAL); /* b is not empty */
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);

    /* Writing into the shared partial block needs a copy; NULL cow refuses. */
    CHECK_EQ_INT(pgd_block_table_blocks_needed(&b, 1), 1);
    CHECK_EQ_INT(pgd_block_table_blocks_needed(&b, 3), 2);
    CHECK_EQ_INT(pgd_block_table_grow(&b, 1, NULL), PGD_EINVAL);
    CHECK_EQ_INT(b.n_tokens, 6);
    REQUIRE(pgd_block_table_grow(&b, 1, &cow) == 0);
    CHECK_EQ_INT(cow.src, a1);
    CHECK(cow.dst != 0 && cow.dst != a1 && cow.dst != a0);
    CHECK_EQ_INT(b.blocks[1], cow.dst);
    CHECK_EQ_INT(b.blocks[0], a0);
    CHECK_EQ_INT(ref_of(p, a1), 1);
    CHECK_EQ_INT(ref_of(p, cow.dst), 1);
    CHECK_EQ_INT(ref_of(p, a0), 2);
    /* a is now the only owner of a1: no copy. */
    REQUIRE(pgd_block_table_grow(&a, 1, &cow) == 0);
    CHECK(cow.src == 0 && cow.dst == 0);
    CHECK_EQ_INT(a.blocks[1], a1);

    /* Explicit cow: nothing to do on a full or unshared last block. */
    pgd_block_table c;
    pgd_block_table_init(&c, p, 0);
    REQUIRE(pgd_block_table_fork(&c, &a) == 0); /* a: 7 tokens, a1 shared partial */
    REQUIRE(pgd_block_table_cow(&a, &cow) == 0);
    CHECK_EQ_INT(cow.src, a1);
    int32_t a1b = cow.dst;
    CHECK_EQ_INT(a.blocks[1], a1b);
    REQUIRE(pgd_block_table_cow(&a, &cow) == 0);
    CHECK(cow.src == 0 && cow.dst == 0);
    REQUIRE(pgd_block_table_cow(&c, &cow) == 0);
    CHECK(cow.src == 0 && cow.dst == 0);
    REQUIRE(pgd_block_table_grow(&a, 1, &cow) == 0); /* 8 tokens: full, still private */
    pgd_block_table d;
    pgd_block_table_init(&d, p, 0);
    REQUIRE(pgd_block_table_fork(&d, &a) == 0);
    REQUIRE(pgd_block_table_cow(&d, &cow) == 0); /* full shared block is never written */
    CHECK(cow.src == 0 && cow.dst == 0);
    CHECK_EQ_INT(pgd_block_table_blocks_needed(&d, 1), 1);

    /* COW without a free block: PGD_ENOBLOCKS, nothing changes. Pool: a0 a1 b1 a1b + 4 free. */
    pgd_block_table e;
    pgd_block_table_init(&e, p, 0);
    REQUIRE(pgd_block_table_grow(&e, 4 * pgd_kvpool_num_free(p), &cow) == 0);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 0);
    int32_t c1 = c.blocks[1];
    CHECK_EQ_INT(pgd_block_table_grow(&c, 1, &cow), 0); /* c is a1's only owner now */
    pgd_block_table f;
    pgd_block_table_init(&f, p, 0);
    REQUIRE(pgd_block_table_fork(&f, &b) == 0); /* b: 7 tokens, shared partial */
    CHECK_EQ_INT(pgd_block_table_cow(&f, &cow), PGD_ENOBLOCKS);
    CHECK_EQ_INT(pgd_block_table_grow(&f, 1, &cow), PGD_ENOBLOCKS);
    CHECK(cow.src == 0 && cow.dst == 0);
    CHECK_EQ_INT(f.blocks[1], b.blocks[1]);
    CHECK_EQ_INT(f.n_tokens, 7);
    CHECK_EQ_INT(c.blocks[1], c1);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_table *all[] = {&a, &b, &c, &d, &e, &f};
    for (size_t i = 0; i < PGD_ARRAY_LEN(all); i++) {
        CHECK_EQ_INT(pgd_block_table_check(all[i]), 0);
        pgd_block_table_destroy(all[i]);
    }
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 8);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_kvpool_destroy(p);
}

static void test_slot_mapping(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(12, 4, true, &p) == 0);
    pgd_block_table junk, t;
    pgd_block_table_init(&junk, p, 0);
    pgd_block_table_init(&t, p, 0);
    pgd_block_copy cow;
    REQUIRE(pgd_block_table_grow(&junk, 5, &cow) ==
            0); /* so that t's block ids differ from its block indexes */
    REQUIRE(pgd_block_table_grow(&t, 3, &cow) == 0);
    REQUIRE(pgd_block_table_grow(&t, 7, &cow) == 0); /* 10 tokens, 3 blocks */
    CHECK_EQ_INT(t.n_blocks, 3);
    int32_t x = t.blocks[0], y = t.blocks[1], z = t.blocks[2];
    int64_t s[10];
    REQUIRE(pgd_block_table_slots(&t, 0, 10, s) == 0);
    int64_t want[10] = {x * 4 + 0, x * 4 + 1, x * 4 + 2, x * 4 + 3, y * 4 + 0,
                        y * 4 + 1, y * 4 + 2, y * 4 + 3, z * 4 + 0, z * 4 + 1};
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(s[i], want[i]);
    REQUIRE(pgd_block_table_slots(&t, 3, 4, s) == 0);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(s[i], want[3 + i]);
    REQUIRE(pgd_block_table_slots(&t, 9, 1, s) == 0);
    CHECK_EQ_INT(s[0], (int64_t)z * 4 + 1);
    CHECK_EQ_INT(pgd_block_table_slots(&t, 8, 3, s), PGD_ERANGE);
    CHECK_EQ_INT(pgd_block_table_slots(&t, 10, 0, s), 0);
    uint32_t n;
    const int32_t *ids = pgd_block_table_blocks(&t, &n);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[2], z);
    pgd_block_table_destroy(&t);
    pgd_block_table_destroy(&junk);
    pgd_kvpool_destroy(p);
}

static void test_duplicate_switches_to_cached(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(17, 4, true, &p) == 0);
    int32_t t[10];
    fill_seq(t, 10, 40);
    pgd_block_table a, b;
    pgd_block_table_init(&a, p, 1);
    pgd_block_table_init(&b, p, 1);
    uint32_t c;
    /* Both admitted before either registered: no hits, separate blocks. */
    REQUIRE(pgd_block_table_attach_prefix(&a, t, 10, 10, 0, &c) == 0);
    REQUIRE(pgd_block_table_attach_prefix(&b, t, 10, 10, 0, &c) == 0);
    CHECK_EQ_INT(c, 0);
    int32_t bb[3];
    memcpy(bb, b.blocks, sizeof bb);
    REQUIRE(pgd_block_table_cache_blocks(&a, t, 10) == 0);
    REQUIRE(pgd_block_table_cache_blocks(&b, t, 10) == 0);
    CHECK_EQ_INT(b.n_cached, 2);
    CHECK_EQ_INT(b.blocks[0], a.blocks[0]);
    CHECK_EQ_INT(b.blocks[1], a.blocks[1]);
    CHECK_EQ_INT(b.blocks[2], bb[2]); /* the partial block stays */
    CHECK_EQ_INT(ref_of(p, a.blocks[0]), 2);
    CHECK_EQ_INT(ref_of(p, bb[0]), 0);
    CHECK_EQ_INT(ref_of(p, bb[1]), 0);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 12);
    CHECK_EQ_INT(pgd_block_table_check(&b), 0);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    /* Registering again is a no-op; wrong tokens for a registered block are refused. */
    REQUIRE(pgd_block_table_cache_blocks(&b, t, 10) == 0);
    pgd_block_table f;
    pgd_block_table_init(&f, p, 0);
    REQUIRE(pgd_block_table_fork(&f, &a) == 0);
    f.n_cached = 0;
    int32_t u[10];
    memcpy(u, t, sizeof u);
    u[5] = -1;
    CHECK_EQ_INT(pgd_block_table_cache_blocks(&f, u, 10), PGD_EINVAL);
    CHECK_EQ_INT(pgd_block_table_cache_blocks(&f, t, 11), PGD_EINVAL);
    CHECK_EQ_INT(pgd_block_table_cache_blocks(&f, t, 10), 0);
    CHECK_EQ_INT(f.n_cached, 2);
    pgd_block_table_destroy(&f);
    pgd_block_table_destroy(&a);
    pgd_block_table_destroy(&b);
    CHECK_EQ_INT(pgd_kvpool_num_free(p), 16);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_kvpool_destroy(p);
}

static void test_reset_prefix_cache(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(17, 4, true, &p) == 0);
    int32_t t[9], u[9];
    fill_seq(t, 9, 0);
    fill_seq(u, 9, 50);
    pgd_block_table a, b;
    pgd_block_table_init(&a, p, 0);
    pgd_block_table_init(&b, p, 0);
    REQUIRE(admit_all(&a, t, 9, NULL) == 0);
    REQUIRE(admit_all(&b, u, 9, NULL) == 0);
    int32_t a0 = a.blocks[0];
    pgd_block_table_free(&a);
    pgd_kvpool_reset_prefix_cache(p);
    pgd_kvpool_stats st;
    pgd_kvpool_get_stats(p, &st);
    CHECK_EQ_INT(st.n_cached, 2);
    CHECK_EQ_INT(st.n_cached_free, 0);
    CHECK_EQ_INT(st.evictions, 2);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&a, t, 9), 0);
    CHECK_EQ_INT(pgd_block_table_find_prefix(&a, u, 9), 8);
    CHECK_EQ_INT(pgd_kvpool_check(p), 0);
    pgd_block_copy cow;
    REQUIRE(pgd_block_table_grow(&a, 1, &cow) == 0); /* dropped blocks are reused first */
    CHECK_EQ_INT(a.blocks[0], a0);
    pgd_block_table_destroy(&a);
    pgd_block_table_destroy(&b);
    pgd_kvpool_destroy(p);
}

static void test_table_check_catches_corruption(void) {
    pgd_kvpool *p;
    REQUIRE(pgd_kvpool_create(9, 4, true, &p) == 0);
    pgd_block_table t;
    pgd_block_table_init(&t, p, 0);
    pgd_block_copy cow;
    REQUIRE(pgd_block_table_grow(&t, 9, &cow) == 0);
    CHECK_EQ_INT(pgd_block_table_check(&t), 0);
    t.n_tokens = 13;
    CHECK_EQ_INT(pgd_block_table_check(&t), PGD_EINVAL);
    t.n_tokens = 9;
    int32_t keep = t.blocks[2];
    t.blocks[2] = t.blocks[0];
    CHECK_EQ_INT(pgd_block_table_check(&t), PGD_EINVAL);
    t.blocks[2] = 0;
    CHECK_EQ_INT(pgd_block_table_check(&t), PGD_EINVAL);
    t.blocks[2] = keep;
    t.n_cached = 1; /* block 0 is not in the cache */
    CHECK_EQ_INT(pgd_block_table_check(&t), PGD_EINVAL);
    t.n_cached = 0;
    CHECK_EQ_INT(pgd_block_table_check(&t), 0);
    pgd_block_table_destroy(&t);
    pgd_kvpool_destroy(p);
}

/* ---------------------------------------------------------------------------------------- */
/* property test against a shadow model                                                    */

enum { P_MAXSEQ = 12, P_NDOCS = 4 };

typedef struct pseq {
    bool live;
    pgd_block_table bt;
    uint64_t salt;
    int32_t *toks;     /* [max_tok] the sequence's tokens (prompt, then generated) */
    uint64_t *ctx;     /* [max_tok] ctx[p]: hash of salt and toks[0..p] — what slot p holds */
    uint32_t n_toks;   /* tokens known */
    uint32_t prompt;   /* prompt length */
    uint32_t computed; /* positions whose KV is written == bt.n_tokens */
    uint32_t doc;      /* tokens follow docs[doc] ... */
    uint32_t diverge;  /* ... up to this position, then random */
    int32_t *owned;    /* [max_tok] the test's record of the table's blocks */
    uint32_t n_owned;
} pseq;

typedef struct pmodel {
    pgd_kvpool *pool;
    uint32_t n_blocks, bs, max_tok, vocab;
    bool caching;
    uint64_t rng;
    uint64_t *kv;  /* [n_blocks * bs] shadow KV memory */
    uint32_t *ref; /* [n_blocks] owners per block, recomputed from the records */
    int32_t *docs; /* [P_NDOCS][max_tok] */
    pseq seq[P_MAXSEQ];
    /* what happened, to prove the test exercised it */
    uint64_t n_hits, n_cows, n_noblocks, n_switches, n_forks, n_frees;
    bool failed;
} pmodel;

static uint64_t ctx_mix(uint64_t h, int32_t tok) {
    uint64_t s = h ^ ((uint64_t)(uint32_t)tok * 0x9E3779B97F4A7C15ull);
    return rng_next(&s);
}

/* Make sure toks/ctx are known up to position n (exclusive). */
static void pseq_extend(pmodel *m, pseq *s, uint32_t n) {
    PGD_ASSERT(n <= m->max_tok);
    for (uint32_t p = s->n_toks; p < n; p++) {
        int32_t tok;
        if (p < s->diverge)
            tok = m->docs[s->doc * m->max_tok + p];
        else
            tok = (int32_t)rng_below(&m->rng, m->vocab);
        s->toks[p] = tok;
        s->ctx[p] = ctx_mix(p ? s->ctx[p - 1] : s->salt * 0xD1B54A32D192ED03ull + 1, tok);
    }
    if (n > s->n_toks) s->n_toks = n;
}

static uint64_t *kv_at(pmodel *m, int32_t block, uint32_t pos) {
    return &m->kv[(size_t)block * m->bs + pos % m->bs];
}

static void shadow_refs(pmodel *m) {
    memset(m->ref, 0, m->n_blocks * sizeof *m->ref);
    for (int i = 0; i < P_MAXSEQ; i++) {
        pseq *s = &m->seq[i];
        if (!s->live) continue;
        for (uint32_t b = 0; b < s->n_owned; b++) m->ref[s->owned[b]]++;
    }
}

#define PCHECK(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: property failed at op %lu: %s\n", __FILE__, __LINE__, op,    \
                    #cond);                                                                        \
            tu_failed_checks++;                                                                    \
            m->failed = true;                                                                      \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* The backend "computes" positions [from, to) of s: writes ctx into their slots. Every block
 * written must be owned by this table alone. */
static void pcompute(pmodel *m, pseq *s, uint32_t from, uint32_t to, unsigned long op) {
    for (uint32_t p = from; p < to; p++) {
        int32_t b = s->bt.blocks[p / m->bs];
        PCHECK(pgd_kvpool_refcount(m->pool, b) == 1);
        *kv_at(m, b, p) = s->ctx[p];
    }
    s->computed = to;
}

/* Register the full computed blocks; accept switches to identical cached blocks after
 * checking their content; then the record follows the table. */
static void pregister(pmodel *m, pseq *s, unsigned long op) {
    PCHECK(pgd_block_table_cache_blocks(&s->bt, s->toks, s->computed) == 0);
    PCHECK(s->bt.n_blocks == s->n_owned);
    for (uint32_t i = 0; i < s->n_owned; i++) {
        int32_t b = s->bt.blocks[i];
        if (b == s->owned[i]) continue;
        PCHECK(i < s->bt.n_cached);
        for (uint32_t p = i * m->bs; p < (i + 1) * m->bs; p++) PCHECK(*kv_at(m, b, p) == s->ctx[p]);
        s->owned[i] = b;
        m->n_switches++;
    }
}

/* New blocks handed to a table must have been owned by no table. */
static void pcheck_fresh(pmodel *m, const int32_t *ids, uint32_t n, unsigned long op) {
    for (uint32_t i = 0; i < n; i++) {
        PCHECK(ids[i] > 0 && (uint32_t)ids[i] < m->n_blocks);
        PCHECK(m->ref[ids[i]] == 0);
    }
}

static void pverify(pmodel *m, unsigned long op) {
    shadow_refs(m);
    PCHECK(m->ref[0] == 0);
    uint32_t free_blocks = 0;
    for (uint32_t b = 1; b < m->n_blocks; b++) {
        if (pgd_kvpool_refcount(m->pool, (int32_t)b) != m->ref[b]) {
            fprintf(stderr, "  block %u: pool ref %u, shadow %u\n", b,
                    pgd_kvpool_refcount(m->pool, (int32_t)b), m->ref[b]);
            PCHECK(!"ref count matches the owners");
        }
        if (m->ref[b] == 0) free_blocks++;
    }
    pgd_kvpool_stats st;
    pgd_kvpool_get_stats(m->pool, &st);
    PCHECK(st.n_free + st.n_used == m->n_blocks - 1);
    PCHECK(st.n_free == free_blocks);
    for (int i = 0; i < P_MAXSEQ; i++) {
        pseq *s = &m->seq[i];
        if (!s->live) continue;
        PCHECK(s->bt.n_blocks == s->n_owned);
        PCHECK(memcmp(s->bt.blocks, s->owned, s->n_owned * sizeof(int32_t)) == 0);
        PCHECK(s->bt.n_tokens == s->computed);
        if (pgd_block_table_check(&s->bt) != 0) {
            fprintf(stderr, "  %s\n", pgd_error_detail());
            PCHECK(!"block table check");
        }
    }
    if (pgd_kvpool_check(m->pool) != 0) {
        fprintf(stderr, "  %s\n", pgd_error_detail());
        PCHECK(!"pool check");
    }
}

static void pfree(pmodel *m, pseq *s) {
    pgd_block_table_free(&s->bt);
    s->live = false;
    s->n_owned = 0;
    m->n_frees++;
}

static int pick_live(pmodel *m, int avoid) {
    int n = 0, live[P_MAXSEQ];
    for (int i = 0; i < P_MAXSEQ; i++)
        if (m->seq[i].live && i != avoid) live[n++] = i;
    return n ? live[rng_below(&m->rng, (uint32_t)n)] : -1;
}

static int pick_dead(pmodel *m) {
    for (int i = 0; i < P_MAXSEQ; i++)
        if (!m->seq[i].live) return i;
    return -1;
}

static void op_new(pmodel *m, unsigned long op) {
    int i = pick_dead(m);
    if (i < 0) return;
    pseq *s = &m->seq[i];
    s->salt = 1 + rng_below(&m->rng, 3);
    s->doc = rng_below(&m->rng, P_NDOCS);
    s->prompt = 1 + rng_below(&m->rng, 12 * m->bs);
    s->diverge = rng_below(&m->rng, 2) ? rng_below(&m->rng, s->prompt + 1) : m->max_tok;
    s->n_toks = 0;
    s->computed = 0;
    s->n_owned = 0;
    pgd_block_table_destroy(&s->bt); /* a freed table keeps its memory until destroyed */
    pgd_block_table_init(&s->bt, m->pool, s->salt);
    pseq_extend(m, s, s->prompt);

    uint32_t hit = pgd_block_table_find_prefix(&s->bt, s->toks, s->prompt);
    PCHECK(hit % m->bs == 0 && (hit == 0 || hit < s->prompt));
    uint32_t chunk = 1 + rng_below(&m->rng, 4 * m->bs);
    if (chunk > s->prompt - hit) chunk = s->prompt - hit;
    pgd_kvpool_stats before, after;
    pgd_kvpool_get_stats(m->pool, &before);
    uint32_t c = 0;
    int rc = pgd_block_table_attach_prefix(&s->bt, s->toks, s->prompt, chunk, 0, &c);
    if (rc == PGD_ENOBLOCKS) {
        m->n_noblocks++;
        pgd_kvpool_get_stats(m->pool, &after);
        PCHECK(stats_eq(&before, &after));
        PCHECK(s->bt.n_blocks == 0 && s->bt.n_tokens == 0);
        pgd_block_table_destroy(&s->bt);
        return;
    }
    PCHECK(rc == 0);
    PCHECK(c == hit);
    /* Every hit position holds exactly the KV of this context (tokens, chain and salt). */
    for (uint32_t p = 0; p < c; p++) PCHECK(*kv_at(m, s->bt.blocks[p / m->bs], p) == s->ctx[p]);
    uint32_t hb = c / m->bs;
    pcheck_fresh(m, s->bt.blocks + hb, s->bt.n_blocks - hb, op);
    if (m->failed) return;
    if (hb) m->n_hits += hb;
    s->live = true;
    s->n_owned = s->bt.n_blocks;
    memcpy(s->owned, s->bt.blocks, s->n_owned * sizeof(int32_t));
    s->computed = c;
    pcompute(m, s, c, c + chunk, op);
    if (m->failed) return;
    pregister(m, s, op);
}

static void op_step(pmodel *m, unsigned long op) {
    int i = pick_live(m, -1);
    if (i < 0) return;
    pseq *s = &m->seq[i];
    uint32_t n;
    if (s->computed < s->prompt) { /* prefill chunk */
        n = 1 + rng_below(&m->rng, 4 * m->bs);
        if (n > s->prompt - s->computed) n = s->prompt - s->computed;
    } else { /* decode (sometimes a few tokens at once) */
        n = rng_below(&m->rng, 4) == 0 ? 1 + rng_below(&m->rng, 2 * m->bs) : 1;
    }
    if (s->computed + n > m->max_tok) { /* finished */
        pfree(m, s);
        return;
    }
    pseq_extend(m, s, s->computed + n);
    uint32_t need = pgd_block_table_blocks_needed(&s->bt, n);
    uint32_t free_before = pgd_kvpool_num_free(m->pool);
    pgd_block_copy cow = {-1, -1};
    int rc = pgd_block_table_grow(&s->bt, n, &cow);
    if (rc == PGD_ENOBLOCKS) {
        m->n_noblocks++;
        PCHECK(need > free_before);
        PCHECK(pgd_kvpool_num_free(m->pool) == free_before);
        PCHECK(cow.src == 0 && cow.dst == 0);
        /* The scheduler would preempt someone: sometimes this one, sometimes another. */
        int victim = rng_below(&m->rng, 2) ? i : pick_live(m, i);
        if (victim >= 0) pfree(m, &m->seq[victim]);
        return;
    }
    PCHECK(rc == 0);
    PCHECK(need <= free_before && pgd_kvpool_num_free(m->pool) == free_before - need);
    if (cow.dst != 0) {
        m->n_cows++;
        PCHECK(s->n_owned > 0 && cow.src == s->owned[s->n_owned - 1]);
        PCHECK(m->ref[cow.src] > 1);
        pcheck_fresh(m, &cow.dst, 1, op);
        if (m->failed) return;
        memcpy(kv_at(m, cow.dst, 0), kv_at(m, cow.src, 0), m->bs * sizeof(uint64_t));
        s->owned[s->n_owned - 1] = cow.dst;
    } else {
        PCHECK(cow.src == 0);
    }
    PCHECK(s->bt.n_blocks >= s->n_owned);
    PCHECK(memcmp(s->bt.blocks, s->owned, s->n_owned * sizeof(int32_t)) == 0);
    pcheck_fresh(m, s->bt.blocks + s->n_owned, s->bt.n_blocks - s->n_owned, op);
    if (m->failed) return;
    memcpy(s->owned + s->n_owned, s->bt.blocks + s->n_owned,
           (s->bt.n_blocks - s->n_owned) * sizeof(int32_t));
    s->n_owned = s->bt.n_blocks;
    /* Slot mapping of the new positions. */
    int64_t slots[64];
    uint32_t from = s->computed;
    PCHECK(n <= 64 && pgd_block_table_slots(&s->bt, from, n, slots) == 0);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t p = from + k;
        PCHECK(slots[k] == (int64_t)s->owned[p / m->bs] * m->bs + p % m->bs);
    }
    pcompute(m, s, from, from + n, op);
    if (m->failed) return;
    pregister(m, s, op);
}

static void op_fork(pmodel *m, unsigned long op) {
    int i = pick_live(m, -1), j = pick_dead(m);
    if (i < 0 || j < 0) return;
    pseq *s = &m->seq[i], *d = &m->seq[j];
    pgd_block_table_destroy(&d->bt);
    pgd_block_table_init(&d->bt, m->pool, 12345);
    PCHECK(pgd_block_table_fork(&d->bt, &s->bt) == 0);
    m->n_forks++;
    d->live = true;
    d->salt = s->salt;
    PCHECK(d->bt.salt == s->salt);
    d->doc = s->doc;
    d->prompt = s->prompt;
    d->diverge =
        rng_below(&m->rng, 2) ? s->diverge : (s->n_toks > s->prompt ? s->n_toks : s->prompt);
    d->n_toks = s->n_toks;
    d->computed = s->computed;
    memcpy(d->toks, s->toks, s->n_toks * sizeof(int32_t));
    memcpy(d->ctx, s->ctx, s->n_toks * sizeof(uint64_t));
    d->n_owned = s->n_owned;
    memcpy(d->owned, s->owned, s->n_owned * sizeof(int32_t));
}

static void op_cow(pmodel *m, unsigned long op) {
    int i = pick_live(m, -1);
    if (i < 0) return;
    pseq *s = &m->seq[i];
    uint32_t free_before = pgd_kvpool_num_free(m->pool);
    pgd_block_copy cow = {-1, -1};
    int rc = pgd_block_table_cow(&s->bt, &cow);
    if (rc == PGD_ENOBLOCKS) {
        m->n_noblocks++;
        PCHECK(free_before == 0 && cow.src == 0 && cow.dst == 0);
        return;
    }
    PCHECK(rc == 0);
    bool shared_partial = s->n_owned && s->computed % m->bs && m->ref[s->owned[s->n_owned - 1]] > 1;
    PCHECK(shared_partial == (cow.dst != 0));
    if (cow.dst == 0) return;
    m->n_cows++;
    PCHECK(cow.src == s->owned[s->n_owned - 1]);
    pcheck_fresh(m, &cow.dst, 1, op);
    if (m->failed) return;
    memcpy(kv_at(m, cow.dst, 0), kv_at(m, cow.src, 0), m->bs * sizeof(uint64_t));
    s->owned[s->n_owned - 1] = cow.dst;
}

static void run_property(uint32_t n_blocks, uint32_t bs, bool caching, unsigned hash_bits,
                         uint32_t vocab, unsigned long n_ops, uint64_t seed) {
    pmodel *m = calloc(1, sizeof *m);
    REQUIRE(m);
    REQUIRE(pgd_kvpool_create(n_blocks, bs, caching, &m->pool) == 0);
    if (hash_bits < 128) pgd__kvpool_set_hash_bits(m->pool, hash_bits);
    m->n_blocks = n_blocks;
    m->bs = bs;
    m->caching = caching;
    m->max_tok = 32 * bs;
    m->vocab = vocab;
    m->rng = seed;
    m->kv = calloc((size_t)n_blocks * bs, sizeof *m->kv);
    m->ref = calloc(n_blocks, sizeof *m->ref);
    m->docs = malloc((size_t)P_NDOCS * m->max_tok * sizeof *m->docs);
    REQUIRE(m->kv && m->ref && m->docs);
    for (uint32_t k = 0; k < P_NDOCS * m->max_tok; k++)
        m->docs[k] = (int32_t)rng_below(&m->rng, vocab);
    for (int i = 0; i < P_MAXSEQ; i++) {
        m->seq[i].toks = malloc(m->max_tok * sizeof(int32_t));
        m->seq[i].ctx = malloc(m->max_tok * sizeof(uint64_t));
        m->seq[i].owned = malloc(m->max_tok * sizeof(int32_t));
        REQUIRE(m->seq[i].toks && m->seq[i].ctx && m->seq[i].owned);
    }

    for (unsigned long op = 0; op < n_ops && !m->failed; op++) {
        shadow_refs(m);
        uint32_t r = rng_below(&m->rng, 1000);
        if (r < 200)
            op_new(m, op);
        else if (r < 700)
            op_step(m, op);
        else if (r < 770)
            op_fork(m, op);
        else if (r < 820)
            op_cow(m, op);
        else if (r < 998) {
            int i = pick_live(m, -1);
            if (i >= 0) pfree(m, &m->seq[i]);
        } else {
            pgd_kvpool_reset_prefix_cache(m->pool);
        }
        if (!m->failed) pverify(m, op);
    }

    pgd_kvpool_stats st;
    pgd_kvpool_get_stats(m->pool, &st);
    fprintf(stderr,
            "     %lu ops, %u blocks of %u, caching %d, hash bits %u: %llu hit blocks, %llu "
            "evictions, %llu cows, %llu switches, %llu forks, %llu no-blocks\n",
            n_ops, n_blocks, bs, caching, hash_bits, (unsigned long long)st.hit_blocks,
            (unsigned long long)st.evictions, (unsigned long long)m->n_cows,
            (unsigned long long)m->n_switches, (unsigned long long)m->n_forks,
            (unsigned long long)m->n_noblocks);
    /* The workload must have reached the interesting paths. */
    CHECK(m->n_cows > 0 || bs == 1); /* one-token blocks are never partly filled */
    CHECK(m->n_forks > 0);
    CHECK(m->n_noblocks > 0);
    if (caching) {
        CHECK(st.hit_blocks > 0 && m->n_hits == st.hit_blocks);
        CHECK(st.evictions > 0);
        CHECK(m->n_switches > 0);
    } else {
        CHECK(st.hit_blocks == 0 && st.n_cached == 0);
    }

    /* Freeing everything returns every block. */
    for (int i = 0; i < P_MAXSEQ; i++) {
        if (m->seq[i].live) pfree(m, &m->seq[i]);
        pgd_block_table_destroy(&m->seq[i].bt);
        free(m->seq[i].toks);
        free(m->seq[i].ctx);
        free(m->seq[i].owned);
    }
    pgd_kvpool_get_stats(m->pool, &st);
    CHECK_EQ_INT(st.n_free, n_blocks - 1);
    CHECK_EQ_INT(st.n_used, 0);
    CHECK_EQ_INT(st.n_cached, st.n_cached_free);
    CHECK_EQ_INT(pgd_kvpool_check(m->pool), 0);
    pgd_kvpool_destroy(m->pool);
    free(m->kv);
    free(m->ref);
    free(m->docs);
    free(m);
}

/* pgd_block_table_fit promises exactly what pgd_block_table_grow then delivers: on random
 * tables (private, forked with a shared partial last block, full) over random free counts,
 * growing by fit(want) always succeeds, and when fit < want, growing by one token more is
 * refused (the promise is tight). This is what lets the scheduler plan and allocate in one go. */
static void test_fit_is_what_grow_gives(void) {
    uint64_t rng = 0xF17;
    uint64_t n_checked = 0, n_tight = 0, n_cow = 0;
    for (int round = 0; round < 3000; round++) {
        uint32_t bs = 1 + rng_below(&rng, 8), n_blocks = 3 + rng_below(&rng, 12);
        pgd_kvpool *pool;
        REQUIRE(pgd_kvpool_create(n_blocks, bs, false, &pool) == 0);
        pgd_block_table a, b, hog;
        pgd_block_table_init(&a, pool, 0);
        pgd_block_table_init(&b, pool, 0);
        pgd_block_table_init(&hog, pool, 0);
        pgd_block_copy cow;
        /* a: some tokens; maybe b forks it (shares a partial last block) */
        uint32_t usable = n_blocks - 1, first = 1 + rng_below(&rng, usable * bs);
        REQUIRE(pgd_block_table_grow(&a, first, &cow) == 0);
        bool forked = rng_below(&rng, 2);
        if (forked) REQUIRE(pgd_block_table_fork(&b, &a) == 0);
        /* hog takes a random share of what is left */
        uint32_t left = pgd_kvpool_num_free(pool);
        if (left) REQUIRE(pgd_block_table_grow(&hog, 1 + rng_below(&rng, left * bs), &cow) == 0);
        pgd_block_table *t = forked && rng_below(&rng, 2) ? &b : &a;
        uint32_t want = 1 + rng_below(&rng, 3 * bs + 2);
        uint32_t fit = pgd_block_table_fit(t, want);
        CHECK(fit <= want);
        uint32_t before = t->n_tokens;
        if (fit < want) {
            /* one more than promised must not fit (all or nothing: nothing changes) */
            CHECK_EQ_INT(pgd_block_table_grow(t, fit + 1, &cow), PGD_ENOBLOCKS);
            CHECK_EQ_INT(t->n_tokens, before);
            n_tight++;
        }
        if (fit) {
            CHECK_EQ_INT(pgd_block_table_grow(t, fit, &cow), 0);
            CHECK_EQ_INT(t->n_tokens, before + fit);
            n_cow += cow.src != 0;
        }
        CHECK_EQ_INT(pgd_block_table_check(t), 0);
        n_checked++;
        pgd_block_table_destroy(&hog);
        pgd_block_table_destroy(&b);
        pgd_block_table_destroy(&a);
        CHECK_EQ_INT(pgd_kvpool_check(pool), 0);
        pgd_kvpool_destroy(pool);
    }
    fprintf(stderr, "    %llu tables: %llu refused one token past the promise, %llu copies\n",
            (unsigned long long)n_checked, (unsigned long long)n_tight, (unsigned long long)n_cow);
    CHECK(n_tight > 100 && n_cow > 100);
}

/* attach_prefix keeps `reserve` blocks free or attaches nothing. */
static void test_attach_keeps_the_reserve(void) {
    pgd_kvpool *pool;
    REQUIRE(pgd_kvpool_create(9, 4, true, &pool) == 0); /* 8 usable */
    int32_t t[16];
    fill_seq(t, 16, 100);
    pgd_block_table a;
    pgd_block_table_init(&a, pool, 0);
    uint32_t c;
    /* 16 tokens = 4 blocks; with 5 to keep free, 4 + 5 > 8 */
    CHECK_EQ_INT(pgd_block_table_attach_prefix(&a, t, 16, 16, 5, &c), PGD_ENOBLOCKS);
    CHECK_EQ_INT(a.n_tokens, 0);
    CHECK_EQ_INT(pgd_kvpool_num_free(pool), 8);
    CHECK_EQ_INT(pgd_block_table_attach_prefix(&a, t, 16, 16, 4, &c), 0);
    CHECK_EQ_INT(pgd_kvpool_num_free(pool), 4);
    pgd_block_table_destroy(&a);
    pgd_kvpool_destroy(pool);
}

static void test_property_main(void) {
    run_property(49, 4, true, 128, 16, 100000, 1);
}

static void test_property_cache_off(void) {
    run_property(65, 16, false, 128, 16, 20000, 2);
}

static void test_property_collisions(void) {
    run_property(49, 2, true, 0, 4, 20000, 3); /* every key equal */
    run_property(61, 1, true, 3, 3, 20000, 4); /* 8 distinct keys, one-token blocks */
}

int main(void) {
    RUN(test_create);
    RUN(test_null_block_never_handed_out);
    RUN(test_exhaustion_changes_nothing);
    RUN(test_eviction_order);
    RUN(test_prefix_hit_after_free);
    RUN(test_hit_needs_chain_tokens_salt);
    RUN(test_cache_off_never_hits);
    RUN(test_hash_collisions);
    RUN(test_copy_on_write);
    RUN(test_slot_mapping);
    RUN(test_duplicate_switches_to_cached);
    RUN(test_reset_prefix_cache);
    RUN(test_table_check_catches_corruption);
    RUN(test_fit_is_what_grow_gives);
    RUN(test_attach_keeps_the_reserve);
    RUN(test_property_main);
    RUN(test_property_cache_off);
    RUN(test_property_collisions);
    return test_summary();
}
