/*
 * kvpool/kvpool.c — the block pool: a fixed array of blocks, the intrusive free list in
 * eviction order, ref counts, and the prefix-cache hash map (see kvpool.h for the contract).
 *
 * Owns: the block array, the cached blocks' token ids, the hash map and the counters.
 * Hash map: open addressing with linear probing over block ids (0 = empty slot, since the null
 * block is never cached), capacity a power of two >= 2 * n_blocks so the load stays <= 1/2;
 * removal shifts the following entries back (no tombstones). Several blocks may share a key
 * (a collision): lookups walk the probe run and compare the full content.
 * Generations: a block's gen changes whenever it gains or loses a key, and a cached block
 * remembers its parent's gen, so a child can never be matched through a reused parent id.
 *
 * Threading: scheduler thread only; not thread-safe.
 */
#include "kvpool/kvpool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <xxhash.h>

#include "common/error.h"

/* Limits that keep every size computation below in range. */
#define KV_MAX_BLOCKS     (1u << 30)
#define KV_MAX_BLOCK_SIZE (1u << 16)
#define KV_HASH_HEADER    24 /* parent key (16 bytes) + salt (8 bytes) */

typedef struct kv_block {
    pgd_block_key key;   /* cached: its key; else zero */
    uint64_t salt;       /* cached: salt it was registered with */
    uint32_t ref;        /* owners (block tables); 0 iff on the free list */
    uint32_t gen;        /* changes whenever the block gains or loses a key */
    uint32_t parent_gen; /* cached: gen of the parent when registered */
    int32_t parent;      /* cached: parent block, 0 for the first block of a sequence */
    int32_t prev, next;  /* free-list links, 0 = none (block 0 is never on the list) */
    bool on_free;
    bool cached;
} kv_block;

struct pgd_kvpool {
    kv_block *blocks;       /* [n_blocks] */
    int32_t *tokens;        /* [n_blocks][block_size] token ids of cached blocks; NULL if off */
    int32_t *map;           /* [map_mask + 1] block ids, 0 = empty */
    uint8_t *hbuf;          /* [KV_HASH_HEADER + block_size * 4] hashing scratch */
    uint32_t n_blocks;      /* total, including the null block */
    uint32_t block_size;    /* tokens per block */
    uint32_t map_mask;      /* map capacity - 1 */
    int32_t head, tail;     /* free list; 0 = empty */
    uint32_t n_free;        /* blocks on the free list */
    uint32_t n_cached;      /* blocks with a key == entries in the map */
    uint32_t n_cached_free; /* cached blocks on the free list */
    bool caching;
    unsigned hash_bits; /* 128 unless a test forces collisions */
    uint64_t seed;
    uint64_t query_tokens, hit_tokens, query_blocks, hit_blocks;
    uint64_t registrations, evictions;
};

/* ---------------------------------------------------------------------------------------- */
/* hashing                                                                                  */

static pgd_block_key hash_block(uint64_t seed, unsigned bits, uint8_t *buf, uint32_t block_size,
                                pgd_block_key parent, uint64_t salt, const int32_t *tokens) {
    memcpy(buf, &parent.lo, 8);
    memcpy(buf + 8, &parent.hi, 8);
    memcpy(buf + 16, &salt, 8);
    memcpy(buf + KV_HASH_HEADER, tokens, (size_t)block_size * sizeof(int32_t));
    XXH128_hash_t h =
        XXH3_128bits_withSeed(buf, KV_HASH_HEADER + (size_t)block_size * sizeof(int32_t), seed);
    pgd_block_key k = {h.low64, h.high64};
    if (bits < 128) {
        if (bits >= 64) {
            k.hi &= bits == 64 ? 0 : (UINT64_MAX >> (128 - bits));
        } else {
            k.hi = 0;
            k.lo &= bits == 0 ? 0 : (UINT64_MAX >> (64 - bits));
        }
    }
    return k;
}

static bool key_eq(pgd_block_key a, pgd_block_key b) {
    return a.lo == b.lo && a.hi == b.hi;
}

static pgd_block_key parent_key(const pgd_kvpool *pool, int32_t parent) {
    pgd_block_key zero = {0, 0};
    if (parent == 0) return zero;
    return pool->blocks[parent].key;
}

static const int32_t *block_tokens(const pgd_kvpool *pool, int32_t id) {
    return pool->tokens + (size_t)id * pool->block_size;
}

static uint64_t random_seed(const pgd_kvpool *pool) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed = (uint64_t)(uintptr_t)pool ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec;
    }
    return seed;
}

/* ---------------------------------------------------------------------------------------- */
/* free list                                                                                */

static void fl_unlink(pgd_kvpool *pool, int32_t id) {
    kv_block *b = &pool->blocks[id];
    PGD_ASSERT(b->on_free);
    if (b->prev)
        pool->blocks[b->prev].next = b->next;
    else
        pool->head = b->next;
    if (b->next)
        pool->blocks[b->next].prev = b->prev;
    else
        pool->tail = b->prev;
    b->prev = b->next = 0;
    b->on_free = false;
    pool->n_free--;
}

static void fl_push_tail(pgd_kvpool *pool, int32_t id) {
    kv_block *b = &pool->blocks[id];
    PGD_ASSERT(!b->on_free && id != 0);
    b->prev = pool->tail;
    b->next = 0;
    if (pool->tail)
        pool->blocks[pool->tail].next = id;
    else
        pool->head = id;
    pool->tail = id;
    b->on_free = true;
    pool->n_free++;
}

static void fl_push_head(pgd_kvpool *pool, int32_t id) {
    kv_block *b = &pool->blocks[id];
    PGD_ASSERT(!b->on_free && id != 0);
    b->prev = 0;
    b->next = pool->head;
    if (pool->head)
        pool->blocks[pool->head].prev = id;
    else
        pool->tail = id;
    pool->head = id;
    b->on_free = true;
    pool->n_free++;
}

/* ---------------------------------------------------------------------------------------- */
/* hash map                                                                                 */

static uint32_t map_home(const pgd_kvpool *pool, pgd_block_key key) {
    return (uint32_t)key.lo & pool->map_mask;
}

static void map_insert(pgd_kvpool *pool, int32_t id) {
    uint32_t i = map_home(pool, pool->blocks[id].key);
    while (pool->map[i] != 0) i = (i + 1) & pool->map_mask;
    pool->map[i] = id;
}

static void map_remove(pgd_kvpool *pool, int32_t id) {
    uint32_t mask = pool->map_mask;
    uint32_t i = map_home(pool, pool->blocks[id].key);
    while (pool->map[i] != id) {
        PGD_ASSERT(pool->map[i] != 0); /* a cached block is always in the map */
        i = (i + 1) & mask;
    }
    /* Backward-shift deletion: move later entries of the run into the hole when their home
     * does not lie cyclically in (hole, j]. */
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & mask; pool->map[j] != 0; j = (j + 1) & mask) {
        uint32_t home = map_home(pool, pool->blocks[pool->map[j]].key);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            pool->map[hole] = pool->map[j];
            hole = j;
        }
    }
    pool->map[hole] = 0;
}

static bool block_matches(const pgd_kvpool *pool, int32_t id, pgd_block_key key, int32_t parent,
                          uint64_t salt, const int32_t *tokens) {
    const kv_block *b = &pool->blocks[id];
    if (!key_eq(b->key, key) || b->salt != salt || b->parent != parent) return false;
    if (parent != 0 && b->parent_gen != pool->blocks[parent].gen) return false;
    return memcmp(block_tokens(pool, id), tokens, (size_t)pool->block_size * sizeof(int32_t)) == 0;
}

static int32_t map_find(const pgd_kvpool *pool, pgd_block_key key, int32_t parent, uint64_t salt,
                        const int32_t *tokens) {
    for (uint32_t i = map_home(pool, key); pool->map[i] != 0; i = (i + 1) & pool->map_mask) {
        int32_t id = pool->map[i];
        if (block_matches(pool, id, key, parent, salt, tokens)) return id;
    }
    return 0;
}

/* Drop block id's key (it stays where it is on or off the free list). */
static void uncache(pgd_kvpool *pool, int32_t id) {
    kv_block *b = &pool->blocks[id];
    PGD_ASSERT(b->cached);
    map_remove(pool, id);
    b->cached = false;
    b->gen++;
    b->key.lo = b->key.hi = 0;
    b->salt = 0;
    b->parent = 0;
    b->parent_gen = 0;
    pool->n_cached--;
    if (b->ref == 0) pool->n_cached_free--;
    pool->evictions++;
}

/* ---------------------------------------------------------------------------------------- */
/* lifecycle and queries                                                                    */

int pgd_kvpool_create(uint32_t n_blocks, uint32_t block_size, bool prefix_caching,
                      pgd_kvpool **out) {
    *out = NULL;
    if (block_size == 0) return pgd_error_set(PGD_EINVAL, "kvpool: a block holds no tokens");
    if (n_blocks < 2)
        return pgd_error_set(PGD_EINVAL, "kvpool: need at least 2 blocks (got %u)", n_blocks);
    if (n_blocks > KV_MAX_BLOCKS || block_size > KV_MAX_BLOCK_SIZE)
        return pgd_error_set(PGD_ERANGE, "kvpool: %u blocks of %u tokens is too large", n_blocks,
                             block_size);

    pgd_kvpool *pool = calloc(1, sizeof *pool);
    if (!pool) return PGD_ENOMEM;
    pool->n_blocks = n_blocks;
    pool->block_size = block_size;
    pool->caching = prefix_caching;
    pool->hash_bits = 128;
    pool->seed = random_seed(pool);

    uint32_t cap = 8;
    while (cap < 2 * n_blocks) cap *= 2;
    pool->map_mask = cap - 1;

    pool->blocks = calloc(n_blocks, sizeof *pool->blocks);
    pool->hbuf = malloc(KV_HASH_HEADER + (size_t)block_size * sizeof(int32_t));
    if (!pool->blocks || !pool->hbuf) goto fail;
    if (prefix_caching) {
        pool->map = calloc(cap, sizeof *pool->map);
        pool->tokens = malloc((size_t)n_blocks * block_size * sizeof(int32_t));
        if (!pool->map || !pool->tokens) goto fail;
    }
    for (uint32_t i = 1; i < n_blocks; i++) fl_push_tail(pool, (int32_t)i);
    *out = pool;
    return 0;

fail:
    pgd_kvpool_destroy(pool);
    return pgd_error_set(PGD_ENOMEM, "kvpool: out of memory for %u blocks", n_blocks);
}

void pgd_kvpool_destroy(pgd_kvpool *pool) {
    if (!pool) return;
    free(pool->blocks);
    free(pool->tokens);
    free(pool->map);
    free(pool->hbuf);
    free(pool);
}

uint32_t pgd_kvpool_block_size(const pgd_kvpool *pool) {
    return pool->block_size;
}

uint32_t pgd_kvpool_num_blocks(const pgd_kvpool *pool) {
    return pool->n_blocks;
}

uint32_t pgd_kvpool_num_free(const pgd_kvpool *pool) {
    return pool->n_free;
}

bool pgd_kvpool_caching(const pgd_kvpool *pool) {
    return pool->caching;
}

void pgd_kvpool_get_stats(const pgd_kvpool *pool, pgd_kvpool_stats *out) {
    memset(out, 0, sizeof *out);
    out->n_blocks = pool->n_blocks - 1;
    out->block_size = pool->block_size;
    out->n_free = pool->n_free;
    out->n_used = pool->n_blocks - 1 - pool->n_free;
    out->n_cached = pool->n_cached;
    out->n_cached_free = pool->n_cached_free;
    out->query_tokens = pool->query_tokens;
    out->hit_tokens = pool->hit_tokens;
    out->query_blocks = pool->query_blocks;
    out->hit_blocks = pool->hit_blocks;
    out->registrations = pool->registrations;
    out->evictions = pool->evictions;
}

uint32_t pgd_kvpool_refcount(const pgd_kvpool *pool, int32_t id) {
    PGD_ASSERT(id >= 0 && (uint32_t)id < pool->n_blocks);
    return pool->blocks[id].ref;
}

int pgd_kvpool_block_info(const pgd_kvpool *pool, int32_t id, pgd_kvpool_block *out) {
    memset(out, 0, sizeof *out);
    if (id < 0 || (uint32_t)id >= pool->n_blocks)
        return pgd_error_set(PGD_EINVAL, "kvpool: no block %d", (int)id);
    const kv_block *b = &pool->blocks[id];
    out->ref = b->ref;
    out->on_free_list = b->on_free;
    out->cached = b->cached;
    out->parent = b->parent;
    out->salt = b->salt;
    out->key = b->key;
    return 0;
}

void pgd_kvpool_reset_prefix_cache(pgd_kvpool *pool) {
    int32_t next;
    for (int32_t id = pool->head; id != 0; id = next) {
        next = pool->blocks[id].next;
        if (!pool->blocks[id].cached) continue;
        uncache(pool, id);
        fl_unlink(pool, id); /* now worthless: reuse it before any cached block */
        fl_push_head(pool, id);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* block-level operations                                                                   */

int pgd_kvpool_alloc(pgd_kvpool *pool, uint32_t n, int32_t *ids) {
    if (n > pool->n_free) return PGD_ENOBLOCKS;
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = pool->head;
        PGD_ASSERT(id != 0);
        kv_block *b = &pool->blocks[id];
        PGD_ASSERT(b->ref == 0);
        fl_unlink(pool, id);
        if (b->cached) uncache(pool, id);
        b->ref = 1;
        ids[i] = id;
    }
    return 0;
}

void pgd_kvpool_incref(pgd_kvpool *pool, int32_t id) {
    PGD_ASSERT(id > 0 && (uint32_t)id < pool->n_blocks);
    kv_block *b = &pool->blocks[id];
    if (b->ref == 0) {
        PGD_ASSERT(b->cached); /* only a prefix hit revives a free block */
        fl_unlink(pool, id);
        pool->n_cached_free--;
    }
    b->ref++;
}

void pgd_kvpool_release(pgd_kvpool *pool, int32_t id) {
    PGD_ASSERT(id > 0 && (uint32_t)id < pool->n_blocks);
    kv_block *b = &pool->blocks[id];
    PGD_ASSERT(b->ref > 0);
    if (--b->ref > 0) return;
    if (b->cached) {
        fl_push_tail(pool, id);
        pool->n_cached_free++;
    } else {
        fl_push_head(pool, id);
    }
}

pgd_block_key pgd_kvpool_key(pgd_kvpool *pool, int32_t parent, uint64_t salt,
                             const int32_t *tokens) {
    PGD_ASSERT(parent >= 0 && (uint32_t)parent < pool->n_blocks);
    PGD_ASSERT(parent == 0 || pool->blocks[parent].cached);
    return hash_block(pool->seed, pool->hash_bits, pool->hbuf, pool->block_size,
                      parent_key(pool, parent), salt, tokens);
}

int32_t pgd_kvpool_lookup(pgd_kvpool *pool, int32_t parent, uint64_t salt, const int32_t *tokens) {
    if (!pool->caching || pool->n_cached == 0) return 0;
    PGD_ASSERT(parent >= 0 && (uint32_t)parent < pool->n_blocks);
    if (parent != 0 && !pool->blocks[parent].cached) return 0;
    pgd_block_key key = pgd_kvpool_key(pool, parent, salt, tokens);
    return map_find(pool, key, parent, salt, tokens);
}

int32_t pgd_kvpool_register(pgd_kvpool *pool, int32_t id, int32_t parent, uint64_t salt,
                            const int32_t *tokens) {
    PGD_ASSERT(id > 0 && (uint32_t)id < pool->n_blocks);
    if (!pool->caching) return id;
    kv_block *b = &pool->blocks[id];
    PGD_ASSERT(b->ref > 0);
    pgd_block_key key = pgd_kvpool_key(pool, parent, salt, tokens);
    if (b->cached) {
        if (block_matches(pool, id, key, parent, salt, tokens)) return id;
        return pgd_error_set(PGD_EINVAL, "kvpool: block %d is cached with other content", (int)id);
    }
    int32_t same = map_find(pool, key, parent, salt, tokens);
    if (same != 0) return same;

    b->key = key;
    b->salt = salt;
    b->parent = parent;
    b->parent_gen = parent ? pool->blocks[parent].gen : 0;
    b->gen++;
    b->cached = true;
    memcpy(pool->tokens + (size_t)id * pool->block_size, tokens,
           (size_t)pool->block_size * sizeof(int32_t));
    map_insert(pool, id);
    pool->n_cached++;
    pool->registrations++;
    return id;
}

void pgd__kvpool_count_query(pgd_kvpool *pool, uint32_t query_tokens, uint32_t query_blocks,
                             uint32_t hit_blocks) {
    PGD_ASSERT(hit_blocks <= query_blocks);
    pool->query_tokens += query_tokens;
    pool->query_blocks += query_blocks;
    pool->hit_blocks += hit_blocks;
    pool->hit_tokens += (uint64_t)hit_blocks * pool->block_size;
}

void pgd__kvpool_set_hash_bits(pgd_kvpool *pool, unsigned bits) {
    PGD_ASSERT(pool->n_cached == 0);
    pool->hash_bits = bits > 128 ? 128 : bits;
}

/* ---------------------------------------------------------------------------------------- */
/* invariant checker                                                                        */

#define CHECK_FAIL(...)                                                                            \
    do {                                                                                           \
        rc = pgd_error_set(PGD_EINVAL, "kvpool check: " __VA_ARGS__);                              \
        goto out;                                                                                  \
    } while (0)

int pgd_kvpool_check(const pgd_kvpool *pool) {
    int rc = 0;
    uint32_t n = pool->n_blocks, cap = pool->map_mask + 1;
    uint32_t *pos = calloc(n, sizeof *pos); /* 1-based place on the free list, 0 = off */
    uint8_t *in_map = calloc(n, 1);         /* times seen in the hash map */
    uint32_t *run = pool->caching ? calloc(cap, sizeof *run) : NULL; /* filled-run lengths */
    uint8_t *buf = malloc(KV_HASH_HEADER + (size_t)pool->block_size * sizeof(int32_t));
    if (!pos || !in_map || !buf || (pool->caching && !run)) {
        rc = pgd_error_set(PGD_ENOMEM, "kvpool check: out of memory");
        goto out;
    }

    /* The null block. */
    const kv_block *z = &pool->blocks[0];
    if (z->ref != 0 || z->on_free || z->cached || z->prev || z->next)
        CHECK_FAIL("null block 0 is in use, cached or linked");
    if (pool->head == 0 && pool->tail != 0) CHECK_FAIL("empty free list with a tail");

    /* Walk the free list: well-formed links, no repeats (hence acyclic), ref 0 everywhere. */
    uint32_t count = 0;
    int32_t prev = 0;
    for (int32_t id = pool->head; id != 0; id = pool->blocks[id].next) {
        if (id < 0 || (uint32_t)id >= n) CHECK_FAIL("free list holds bad id %d", (int)id);
        if (pos[id]) CHECK_FAIL("free list revisits block %d (cycle)", (int)id);
        const kv_block *b = &pool->blocks[id];
        if (b->prev != prev)
            CHECK_FAIL("block %d: prev link %d, expected %d", (int)id, (int)b->prev, (int)prev);
        if (!b->on_free) CHECK_FAIL("block %d on the free list but not flagged", (int)id);
        if (b->ref != 0) CHECK_FAIL("block %d on the free list with ref %u", (int)id, b->ref);
        pos[id] = ++count;
        prev = id;
    }
    if (pool->tail != prev) CHECK_FAIL("tail is %d, list ends at %d", (int)pool->tail, (int)prev);
    if (count != pool->n_free)
        CHECK_FAIL("free list has %u blocks, n_free %u", count, pool->n_free);

    /* Every usable block: on the list with ref 0, or off it with ref > 0. */
    uint32_t used = 0, cached = 0, cached_free = 0;
    for (uint32_t id = 1; id < n; id++) {
        const kv_block *b = &pool->blocks[id];
        if (b->on_free != (pos[id] != 0))
            CHECK_FAIL("block %u flagged %s but %s the list", id, b->on_free ? "free" : "used",
                       pos[id] ? "on" : "off");
        if ((b->ref == 0) != b->on_free)
            CHECK_FAIL("block %u: ref %u, free %d", id, b->ref, b->on_free);
        if (b->ref > 0) used++;
        if (b->cached) {
            cached++;
            if (b->ref == 0) cached_free++;
        }
    }
    if (count + used != n - 1) CHECK_FAIL("free %u + used %u != %u", count, used, n - 1);
    if (cached != pool->n_cached)
        CHECK_FAIL("%u cached blocks, n_cached %u", cached, pool->n_cached);
    if (cached_free != pool->n_cached_free)
        CHECK_FAIL("%u cached free blocks, n_cached_free %u", cached_free, pool->n_cached_free);
    if (pool->registrations - pool->evictions != pool->n_cached)
        CHECK_FAIL("registrations %llu - evictions %llu != cached %u",
                   (unsigned long long)pool->registrations, (unsigned long long)pool->evictions,
                   pool->n_cached);

    if (!pool->caching) {
        if (cached || pool->query_tokens || pool->query_blocks || pool->hit_blocks)
            CHECK_FAIL("caching is off but there are keys or queries");
    } else {
        /* Hash map: each entry a cached block, seen once, reachable from its home slot. Runs
         * of filled slots are measured from an empty slot (one exists: load <= 1/2). */
        uint32_t start = 0;
        while (start < cap && pool->map[start] != 0) start++;
        if (start == cap) CHECK_FAIL("hash map has no empty slot");
        uint32_t len = 0, entries = 0;
        for (uint32_t k = 1; k <= cap; k++) {
            uint32_t i = (start + k) & pool->map_mask;
            len = pool->map[i] ? len + 1 : 0;
            run[i] = len;
        }
        for (uint32_t i = 0; i < cap; i++) {
            int32_t id = pool->map[i];
            if (id == 0) continue;
            entries++;
            if (id < 0 || (uint32_t)id >= n) CHECK_FAIL("map slot %u holds bad id %d", i, (int)id);
            if (!pool->blocks[id].cached)
                CHECK_FAIL("map slot %u: block %d not cached", i, (int)id);
            if (in_map[id]++) CHECK_FAIL("block %d twice in the map", (int)id);
            uint32_t dist = (i - map_home(pool, pool->blocks[id].key)) & pool->map_mask;
            if (dist >= run[i]) CHECK_FAIL("block %d unreachable from its home slot", (int)id);
        }
        if (entries != pool->n_cached)
            CHECK_FAIL("map has %u entries, n_cached %u", entries, pool->n_cached);

        /* Each cached block: key matches its stored content, parent chain sound. */
        for (uint32_t id = 1; id < n; id++) {
            const kv_block *b = &pool->blocks[id];
            if (!b->cached) continue;
            if (b->parent < 0 || (uint32_t)b->parent >= n || b->parent == (int32_t)id)
                CHECK_FAIL("block %u: bad parent %d", id, (int)b->parent);
            if (b->parent != 0) {
                const kv_block *p = &pool->blocks[b->parent];
                if (!p->cached || p->gen != b->parent_gen)
                    CHECK_FAIL("block %u outlives its parent %d", id, (int)b->parent);
                if (p->salt != b->salt) CHECK_FAIL("block %u: salt differs from parent", id);
                if (b->ref > 0 && p->ref == 0)
                    CHECK_FAIL("block %u in use but its parent %d is free", id, (int)b->parent);
                if (b->ref == 0 && p->ref == 0 && pos[id] > pos[b->parent])
                    CHECK_FAIL("free block %u would be evicted after its parent %d", id,
                               (int)b->parent);
            }
            pgd_block_key k =
                hash_block(pool->seed, pool->hash_bits, buf, pool->block_size,
                           parent_key(pool, b->parent), b->salt, block_tokens(pool, (int32_t)id));
            if (!key_eq(k, b->key)) CHECK_FAIL("block %u: key does not match its tokens", id);
        }
    }

    /* Counters. */
    if (pool->hit_tokens > pool->query_tokens || pool->hit_blocks > pool->query_blocks)
        CHECK_FAIL("more hits than queries");
    if (pool->hit_tokens != pool->hit_blocks * pool->block_size)
        CHECK_FAIL("hit tokens %llu != hit blocks %llu * %u", (unsigned long long)pool->hit_tokens,
                   (unsigned long long)pool->hit_blocks, pool->block_size);

out:
    free(pos);
    free(in_map);
    free(run);
    free(buf);
    return rc;
}

#undef CHECK_FAIL
