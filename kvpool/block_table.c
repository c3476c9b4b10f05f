/*
 * kvpool/block_table.c — per-sequence block tables on the block pool (see block_table.h).
 *
 * Owns: the table's array of block ids and one reference on each block in it.
 * Every operation that can fail checks capacity (memory, free blocks) before it changes
 * anything, so a failure leaves the table and the pool as they were.
 *
 * Threading: scheduler thread only; not thread-safe.
 */
#include "kvpool/block_table.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static uint64_t ceil_div(uint64_t a, uint32_t b) {
    return (a + b - 1) / b;
}

/* Make room for `need` block ids (contents kept). 0 or PGD_ENOMEM (unchanged). */
static int ensure_cap(pgd_block_table *bt, uint32_t need) {
    if (need <= bt->cap) return 0;
    uint64_t cap = bt->cap ? (uint64_t)bt->cap * 2 : 8;
    if (cap < need) cap = need;
    if (cap > UINT32_MAX) cap = UINT32_MAX;
    int32_t *p = realloc(bt->blocks, (size_t)cap * sizeof *p);
    if (!p) return pgd_error_set(PGD_ENOMEM, "block table: out of memory for %u blocks", need);
    bt->blocks = p;
    bt->cap = (uint32_t)cap;
    return 0;
}

/* Walk the cached prefix of tokens: returns the number of full blocks hit (at most
 * (n_tokens - 1) / block_size), storing their ids in out (if not NULL, room for that many) and
 * counting in *n_free_hits those that are on the free list now. */
static uint32_t match_prefix(const pgd_block_table *bt, const int32_t *tokens, uint32_t n_tokens,
                             int32_t *out, uint32_t *n_free_hits) {
    *n_free_hits = 0;
    if (!pgd_kvpool_caching(bt->pool) || n_tokens == 0) return 0;
    uint32_t bs = pgd_kvpool_block_size(bt->pool);
    uint32_t max = (n_tokens - 1) / bs, hits = 0;
    int32_t parent = 0;
    while (hits < max) {
        int32_t id = pgd_kvpool_lookup(bt->pool, parent, bt->salt, tokens + (size_t)hits * bs);
        if (id == 0) break;
        if (out) out[hits] = id;
        if (pgd_kvpool_refcount(bt->pool, id) == 0) (*n_free_hits)++;
        parent = id;
        hits++;
    }
    return hits;
}

/* Whether writing the next position would touch a partly filled block shared with others. */
static bool needs_cow(const pgd_block_table *bt) {
    uint32_t bs = pgd_kvpool_block_size(bt->pool);
    if (bt->n_blocks == 0 || bt->n_tokens % bs == 0) return false;
    return pgd_kvpool_refcount(bt->pool, bt->blocks[bt->n_blocks - 1]) > 1;
}

void pgd_block_table_init(pgd_block_table *bt, pgd_kvpool *pool, uint64_t salt) {
    memset(bt, 0, sizeof *bt);
    bt->pool = pool;
    bt->salt = salt;
}

void pgd_block_table_destroy(pgd_block_table *bt) {
    if (bt->pool) pgd_block_table_free(bt);
    free(bt->blocks);
    memset(bt, 0, sizeof *bt);
}

void pgd_block_table_free(pgd_block_table *bt) {
    for (uint32_t i = bt->n_blocks; i-- > 0;) pgd_kvpool_release(bt->pool, bt->blocks[i]);
    bt->n_blocks = 0;
    bt->n_tokens = 0;
    bt->n_cached = 0;
}

uint32_t pgd_block_table_find_prefix(const pgd_block_table *bt, const int32_t *tokens,
                                     uint32_t n_tokens) {
    uint32_t n_free_hits;
    return match_prefix(bt, tokens, n_tokens, NULL, &n_free_hits) * pgd_kvpool_block_size(bt->pool);
}

int pgd_block_table_attach_prefix(pgd_block_table *bt, const int32_t *tokens, uint32_t n_tokens,
                                  uint32_t n_new_tokens, uint32_t reserve,
                                  uint32_t *n_cached_tokens) {
    *n_cached_tokens = 0;
    if (bt->n_blocks != 0 || bt->n_tokens != 0)
        return pgd_error_set(PGD_EINVAL, "block table: attach_prefix on a non-empty table");
    pgd_kvpool *pool = bt->pool;
    bool caching = pgd_kvpool_caching(pool);
    uint32_t bs = pgd_kvpool_block_size(pool);
    uint32_t max = caching && n_tokens ? (n_tokens - 1) / bs : 0;
    int rc = ensure_cap(bt, max);
    if (rc) return rc;

    /* Hit ids land in bt->blocks beyond n_blocks (= 0): nothing is committed yet. */
    uint32_t n_free_hits;
    uint32_t hits = match_prefix(bt, tokens, n_tokens, bt->blocks, &n_free_hits);
    uint64_t total = (uint64_t)hits * bs + n_new_tokens;
    if (total > UINT32_MAX)
        return pgd_error_set(PGD_ERANGE, "block table: %llu tokens", (unsigned long long)total);
    uint32_t n_total_blocks = (uint32_t)ceil_div(total, bs), n_new_blocks = n_total_blocks - hits;
    if ((rc = ensure_cap(bt, n_total_blocks))) return rc;
    if ((uint64_t)n_new_blocks + n_free_hits + reserve > pgd_kvpool_num_free(pool))
        return PGD_ENOBLOCKS;

    for (uint32_t i = 0; i < hits; i++) pgd_kvpool_incref(pool, bt->blocks[i]);
    if (n_new_blocks) { /* bt->blocks may still be NULL when nothing is attached */
        rc = pgd_kvpool_alloc(pool, n_new_blocks, bt->blocks + hits);
        PGD_ASSERT(rc == 0); /* counted above */
    }
    bt->n_blocks = n_total_blocks;
    bt->n_tokens = (uint32_t)total;
    bt->n_cached = hits;
    if (caching) pgd__kvpool_count_query(pool, n_tokens, max, hits);
    *n_cached_tokens = hits * bs;
    return 0;
}

uint32_t pgd_block_table_blocks_needed(const pgd_block_table *bt, uint32_t n_new_tokens) {
    if (n_new_tokens == 0) return 0;
    uint32_t bs = pgd_kvpool_block_size(bt->pool);
    uint64_t blocks = ceil_div((uint64_t)bt->n_tokens + n_new_tokens, bs) - bt->n_blocks;
    blocks += needs_cow(bt) ? 1 : 0;
    return blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks;
}

uint32_t pgd_block_table_fit(const pgd_block_table *bt, uint32_t want) {
    if (want == 0) return 0;
    uint32_t bs = pgd_kvpool_block_size(bt->pool), n_free = pgd_kvpool_num_free(bt->pool);
    uint64_t slack = (uint64_t)bt->n_blocks * bs - bt->n_tokens; /* room in the last block */
    if (needs_cow(bt)) {
        if (n_free == 0) return 0;
        n_free--;
    }
    uint64_t room = slack + (uint64_t)n_free * bs;
    return room < want ? (uint32_t)room : want;
}

/* Replace the shared partial last block by a fresh one; the caller checked needs_cow and that
 * a block is free (or handles PGD_ENOBLOCKS). */
static int do_cow(pgd_block_table *bt, pgd_block_copy *cow) {
    int32_t fresh;
    int rc = pgd_kvpool_alloc(bt->pool, 1, &fresh);
    if (rc) return rc;
    int32_t old = bt->blocks[bt->n_blocks - 1];
    pgd_kvpool_release(bt->pool, old); /* still held by another table: ref was > 1 */
    bt->blocks[bt->n_blocks - 1] = fresh;
    cow->src = old;
    cow->dst = fresh;
    return 0;
}

int pgd_block_table_grow(pgd_block_table *bt, uint32_t n_new_tokens, pgd_block_copy *cow) {
    if (cow) cow->src = cow->dst = 0;
    if (n_new_tokens == 0) return 0;
    uint32_t bs = pgd_kvpool_block_size(bt->pool);
    uint64_t total = (uint64_t)bt->n_tokens + n_new_tokens;
    if (total > UINT32_MAX)
        return pgd_error_set(PGD_ERANGE, "block table: %llu tokens", (unsigned long long)total);
    bool copy = needs_cow(bt);
    if (copy && !cow)
        return pgd_error_set(PGD_EINVAL, "block table: last block is shared, copy-on-write needed");
    uint32_t n_total_blocks = (uint32_t)ceil_div(total, bs),
             n_new_blocks = n_total_blocks - bt->n_blocks;
    int rc = ensure_cap(bt, n_total_blocks);
    if (rc) return rc;
    if ((uint64_t)n_new_blocks + copy > pgd_kvpool_num_free(bt->pool)) return PGD_ENOBLOCKS;

    if (copy) {
        rc = do_cow(bt, cow);
        PGD_ASSERT(rc == 0);
    }
    rc = pgd_kvpool_alloc(bt->pool, n_new_blocks, bt->blocks + bt->n_blocks);
    PGD_ASSERT(rc == 0);
    bt->n_blocks = n_total_blocks;
    bt->n_tokens = (uint32_t)total;
    return 0;
}

int pgd_block_table_cow(pgd_block_table *bt, pgd_block_copy *cow) {
    cow->src = cow->dst = 0;
    if (!needs_cow(bt)) return 0;
    return do_cow(bt, cow);
}

int pgd_block_table_cache_blocks(pgd_block_table *bt, const int32_t *tokens, uint32_t n_computed) {
    pgd_kvpool *pool = bt->pool;
    if (!pgd_kvpool_caching(pool)) return 0;
    if (n_computed > bt->n_tokens)
        return pgd_error_set(PGD_EINVAL, "block table: %u computed tokens but %u slots", n_computed,
                             bt->n_tokens);
    uint32_t bs = pgd_kvpool_block_size(pool), full = n_computed / bs;
    for (uint32_t i = bt->n_cached; i < full; i++) {
        int32_t parent = i ? bt->blocks[i - 1] : 0;
        int32_t id =
            pgd_kvpool_register(pool, bt->blocks[i], parent, bt->salt, tokens + (size_t)i * bs);
        if (id < 0) return id;
        if (id != bt->blocks[i]) {
            /* An identical block is cached already: use it, give ours back. */
            pgd_kvpool_incref(pool, id);
            pgd_kvpool_release(pool, bt->blocks[i]);
            bt->blocks[i] = id;
        }
        bt->n_cached = i + 1;
    }
    return 0;
}

int pgd_block_table_slots(const pgd_block_table *bt, uint32_t start, uint32_t n, int64_t *slots) {
    if ((uint64_t)start + n > bt->n_tokens)
        return pgd_error_set(PGD_ERANGE, "block table: positions %u..%llu past %u tokens", start,
                             (unsigned long long)start + n, bt->n_tokens);
    uint32_t bs = pgd_kvpool_block_size(bt->pool);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p = start + i;
        slots[i] = (int64_t)bt->blocks[p / bs] * bs + p % bs;
    }
    return 0;
}

int pgd_block_table_fork(pgd_block_table *dst, const pgd_block_table *src) {
    if (dst->n_blocks != 0 || dst->n_tokens != 0)
        return pgd_error_set(PGD_EINVAL, "block table: fork into a non-empty table");
    if (dst->pool != src->pool) return pgd_error_set(PGD_EINVAL, "block table: fork across pools");
    int rc = ensure_cap(dst, src->n_blocks);
    if (rc) return rc;
    for (uint32_t i = 0; i < src->n_blocks; i++) pgd_kvpool_incref(src->pool, src->blocks[i]);
    if (src->n_blocks) memcpy(dst->blocks, src->blocks, (size_t)src->n_blocks * sizeof(int32_t));
    dst->salt = src->salt;
    dst->n_blocks = src->n_blocks;
    dst->n_tokens = src->n_tokens;
    dst->n_cached = src->n_cached;
    return 0;
}

int pgd_block_table_check(const pgd_block_table *bt) {
    const pgd_kvpool *pool = bt->pool;
    uint32_t bs = pgd_kvpool_block_size(pool), n_pool = pgd_kvpool_num_blocks(pool);
    if (bt->n_blocks != ceil_div(bt->n_tokens, bs))
        return pgd_error_set(PGD_EINVAL, "block table: %u blocks for %u tokens", bt->n_blocks,
                             bt->n_tokens);
    if (bt->n_blocks > bt->cap) return pgd_error_set(PGD_EINVAL, "block table: blocks > cap");
    if (bt->n_cached > bt->n_tokens / bs || (!pgd_kvpool_caching(pool) && bt->n_cached))
        return pgd_error_set(PGD_EINVAL, "block table: %u cached blocks for %u tokens",
                             bt->n_cached, bt->n_tokens);
    uint8_t *seen = calloc(n_pool, 1);
    if (!seen) return PGD_ENOMEM;
    int rc = 0;
    for (uint32_t i = 0; i < bt->n_blocks; i++) {
        int32_t id = bt->blocks[i];
        pgd_kvpool_block info;
        if (id <= 0 || (uint32_t)id >= n_pool) {
            rc = pgd_error_set(PGD_EINVAL, "block table: bad block id %d at %u", (int)id, i);
            break;
        }
        if (seen[id]++) {
            rc = pgd_error_set(PGD_EINVAL, "block table: block %d held twice", (int)id);
            break;
        }
        pgd_kvpool_block_info(pool, id, &info);
        if (info.ref == 0 || info.on_free_list) {
            rc = pgd_error_set(PGD_EINVAL, "block table: block %d at %u is free", (int)id, i);
            break;
        }
        if (i < bt->n_cached &&
            (!info.cached || info.salt != bt->salt || info.parent != (i ? bt->blocks[i - 1] : 0))) {
            rc = pgd_error_set(PGD_EINVAL, "block table: block %d at %u is not cached as ours",
                               (int)id, i);
            break;
        }
    }
    free(seen);
    return rc;
}
