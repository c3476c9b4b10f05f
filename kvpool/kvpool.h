/*
 * kvpool/kvpool.h — the paged KV-cache block pool: block ids, ref counts, the free list in
 * eviction order and the prefix-cache hash map (vLLM v1's block pool, in C).
 *
 * The KV memory itself belongs to the backend; the pool only hands out block ids. A pool is a
 * fixed array of n_blocks blocks. Block 0 is the null block: it is never handed out, never on
 * the free list and never cached, so n_blocks - 1 blocks are usable.
 *
 * Free list. Every usable block with ref count 0 is on one doubly linked free list kept in
 * eviction order; allocation pops from its head. A block whose ref count drops to 0 is appended
 * at the tail when it carries a prefix-cache key (least recently freed is evicted first) and
 * pushed at the head when it carries none (an uncached free block holds nothing worth keeping,
 * so it is reused before any cached one). Block tables free their blocks tail first, so that a
 * prefix outlives its suffixes.
 *
 * Prefix cache. A FULL block can be registered under a 128-bit key
 *     key = XXH3_128(parent key | salt | block's token ids)   (seeded per pool)
 * where the parent is the cached block holding the previous block_size tokens of the same
 * sequence (the first block of a sequence has parent 0 and an all-zero parent key) and the salt
 * separates tenants. The pool stores each cached block's tokens, salt, parent id and parent
 * generation and compares all of them on a lookup, so a hit is exact: two blocks whose keys
 * collide never answer for each other, and a hit's parent is the very block the caller holds
 * (not merely one with the same key). Cached blocks whose ref count drops to 0 stay findable on
 * the free list until the allocator reuses them; reusing one drops its key (an eviction).
 *
 * Invariants (pgd_kvpool_check verifies all of them):
 *   - a usable block is on the free list iff its ref count is 0; free + used == n_blocks - 1;
 *   - the hash map holds exactly the cached blocks, each once, reachable from its home slot;
 *   - a cached block's parent is 0 or a cached block of the same generation; if the block is
 *     in use its parent is in use; if both are free the child is nearer the head (evicted
 *     first) — so a child's key never outlives its parent's;
 *   - a cached block's key is the hash of its stored parent key, salt and tokens;
 *   - counters: hits <= queries (tokens and blocks), hit tokens == hit blocks * block_size,
 *     registrations - evictions == cached blocks.
 *
 * Cost: every operation is O(1) per block (open-addressing hash map at load <= 1/2, intrusive
 * free list); only pgd_kvpool_check and pgd_kvpool_reset_prefix_cache scan the pool.
 *
 * Threading: a pool and its block tables are owned by the scheduler thread. Nothing here is
 * thread-safe; call only from that thread.
 *
 * Most callers use block tables (kvpool/block_table.h); the block-level calls below are what
 * block tables are made of, exposed for tests and tools.
 */
#ifndef PGD_KVPOOL_KVPOOL_H
#define PGD_KVPOOL_KVPOOL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pgd_kvpool pgd_kvpool;

/* A 128-bit prefix-cache key. */
typedef struct pgd_block_key {
    uint64_t lo, hi;
} pgd_block_key;

typedef struct pgd_kvpool_stats {
    uint32_t n_blocks;      /* usable blocks: total minus the null block */
    uint32_t block_size;    /* tokens per block */
    uint32_t n_free;        /* ref 0, on the free list (includes n_cached_free) */
    uint32_t n_used;        /* ref > 0; n_free + n_used == n_blocks */
    uint32_t n_cached;      /* blocks carrying a key (used or free) */
    uint32_t n_cached_free; /* cached and free: evictable, still findable */
    /* Monotonic counters (prefix caching only). A query is one prompt looked up by
     * pgd_block_table_attach_prefix: query_tokens counts its tokens, query_blocks the full
     * blocks it could have hit ((len-1)/block_size); hits count what the cache served. */
    uint64_t query_tokens, hit_tokens;
    uint64_t query_blocks, hit_blocks;
    uint64_t registrations; /* blocks that gained a key */
    uint64_t evictions;     /* keys dropped: a cached free block reused, or a reset */
} pgd_kvpool_stats;

/* What the pool knows of one block (for tests, the checker and debugging). */
typedef struct pgd_kvpool_block {
    uint32_t ref;
    bool on_free_list;
    bool cached;
    int32_t parent; /* cached: parent block (0 = first block of its sequence) */
    uint64_t salt;  /* cached: salt it was registered with */
    pgd_block_key key;
} pgd_kvpool_block;

/* Create a pool of n_blocks blocks (2 <= n_blocks <= INT32_MAX; block 0 is the null block) of
 * block_size >= 1 tokens each (the backend decides it). prefix_caching off makes
 * every lookup miss and every registration a no-op. 0, PGD_EINVAL, PGD_ERANGE or PGD_ENOMEM.
 * The caller destroys the pool with pgd_kvpool_destroy after every block table using it. */
int pgd_kvpool_create(uint32_t n_blocks, uint32_t block_size, bool prefix_caching,
                      pgd_kvpool **out);
void pgd_kvpool_destroy(pgd_kvpool *pool); /* NULL is fine */

uint32_t pgd_kvpool_block_size(const pgd_kvpool *pool);
uint32_t pgd_kvpool_num_blocks(const pgd_kvpool *pool); /* total, including the null block */
uint32_t pgd_kvpool_num_free(const pgd_kvpool *pool);
bool pgd_kvpool_caching(const pgd_kvpool *pool);
void pgd_kvpool_get_stats(const pgd_kvpool *pool, pgd_kvpool_stats *out);
/* Ref count of block id (0 for the null block). */
uint32_t pgd_kvpool_refcount(const pgd_kvpool *pool, int32_t id);
/* 0, or PGD_EINVAL when id is not a block of this pool. */
int pgd_kvpool_block_info(const pgd_kvpool *pool, int32_t id, pgd_kvpool_block *out);

/* Verify every invariant listed above by scanning the whole pool (O(n_blocks + map size)).
 * 0, or PGD_EINVAL with a detail (pgd_error_set) naming the first violation; PGD_ENOMEM if
 * its scratch memory cannot be allocated. For tests and the scheduler's debug mode. */
int pgd_kvpool_check(const pgd_kvpool *pool);

/* Drop the keys of all cached free blocks (they stay free, moved to the head of the list). Keys
 * of blocks in use are kept. O(free blocks). Counted as evictions. */
void pgd_kvpool_reset_prefix_cache(pgd_kvpool *pool);

/* --- block-level calls (used by block_table.c) ------------------------------------------ */

/* Take n blocks from the head of the free list into ids[0..n-1], each with ref 1, evicting
 * the keys they carry. All or nothing: PGD_ENOBLOCKS (nothing changes) when fewer than n are
 * free. */
int pgd_kvpool_alloc(pgd_kvpool *pool, uint32_t n, int32_t *ids);

/* Add a reference to block id. A block with ref 0 must be cached (a prefix hit): it leaves the
 * free list. */
void pgd_kvpool_incref(pgd_kvpool *pool, int32_t id);

/* Drop a reference; at 0 the block joins the free list (tail when cached, head otherwise). */
void pgd_kvpool_release(pgd_kvpool *pool, int32_t id);

/* The key a full block of tokens [block_size] would get under `parent` (0 or a cached block)
 * and `salt`. */
pgd_block_key pgd_kvpool_key(pgd_kvpool *pool, int32_t parent, uint64_t salt,
                             const int32_t *tokens);

/* The cached block holding exactly `tokens` [block_size] under parent `parent` (0 or a cached
 * block) and `salt`, or 0 on a miss (or with caching off). Takes no reference and changes
 * nothing. */
int32_t pgd_kvpool_lookup(pgd_kvpool *pool, int32_t parent, uint64_t salt, const int32_t *tokens);

/* Register full block id (ref > 0, KV already written) as holding `tokens` [block_size] after
 * parent `parent` (0 or a cached block) under `salt`. Returns the block that now answers for
 * this content: id itself (newly registered, or already registered with this content), or
 * another block already cached with identical content (id then stays uncached; the caller may
 * switch to the returned block). PGD_EINVAL when id is already cached with other content. With
 * caching off it returns id and does nothing. */
int32_t pgd_kvpool_register(pgd_kvpool *pool, int32_t id, int32_t parent, uint64_t salt,
                            const int32_t *tokens);

/* Record one prefix query for the counters (block tables call it). */
void pgd__kvpool_count_query(pgd_kvpool *pool, uint32_t query_tokens, uint32_t query_blocks,
                             uint32_t hit_blocks);

/* Test hook: keep only the low `bits` bits of every key (0..128; 0 makes all keys equal), to
 * force hash collisions. Only on a pool with no cached block. */
void pgd__kvpool_set_hash_bits(pgd_kvpool *pool, unsigned bits);

#endif
