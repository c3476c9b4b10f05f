/*
 * kvpool/block_table.h — one sequence's block table: the ids of the KV blocks that hold its
 * tokens, in position order, on top of the block pool (kvpool/kvpool.h).
 *
 * Position p of the sequence lives in block blocks[p / block_size] at offset p % block_size,
 * in slot blocks[p / block_size] * block_size + p % block_size of the backend's KV memory.
 *
 * Invariants (pgd_block_table_check verifies them):
 *   - n_blocks == ceil(n_tokens / block_size): only the last block may be partly filled;
 *   - the table holds one reference on each of its blocks;
 *   - blocks[0 .. n_cached-1] are full blocks in the prefix cache, each registered under the
 *     table's salt with the previous one as its parent (blocks[0] with parent 0). With prefix
 *     caching off, n_cached stays 0.
 * Blocks may be shared with other tables: cached full blocks (prefix hits) and, after a fork,
 * everything. A shared block is never written: the one partial block a table writes into is
 * copied first (copy-on-write), which pgd_block_table_grow does when asked to.
 *
 * The token ids themselves belong to the sequence (the scheduler); calls that need them take
 * them as arguments. The keys chain lives in the pool: the key of block i is derived from
 * block i-1's key, the salt and block i's tokens.
 *
 * Lifetime: the struct is embedded by its owner (e.g. in a sequence) and set up with
 * pgd_block_table_init; pgd_block_table_destroy returns its blocks and frees its memory. The
 * pool must outlive it.
 * Threading: scheduler thread only, like the pool; not thread-safe.
 */
#ifndef PGD_KVPOOL_BLOCK_TABLE_H
#define PGD_KVPOOL_BLOCK_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool/kvpool.h"

typedef struct pgd_block_table {
    pgd_kvpool *pool; /* borrowed */
    uint64_t salt;    /* prefix-cache salt (e.g. the tenant id) */
    int32_t *blocks;  /* [cap] block ids; [0, n_blocks) are held */
    uint32_t n_blocks;
    uint32_t cap;
    uint32_t n_tokens; /* positions that have a slot */
    uint32_t n_cached; /* leading full blocks that are in the prefix cache */
} pgd_block_table;

/* A copy-on-write the backend must perform before writing: copy the KV rows of block src into
 * block dst. src == dst == 0 when no copy is needed. */
typedef struct pgd_block_copy {
    int32_t src, dst;
} pgd_block_copy;

/* An empty table on `pool` with prefix-cache salt `salt`. Allocates nothing. */
void pgd_block_table_init(pgd_block_table *bt, pgd_kvpool *pool, uint64_t salt);

/* Free the blocks (see pgd_block_table_free) and the table's memory; init makes it usable
 * again. */
void pgd_block_table_destroy(pgd_block_table *bt);

/* Return every block to the pool, last block first (so that on the free list a prefix is
 * evicted after its suffixes). The table is empty afterwards and keeps its memory and salt. */
void pgd_block_table_free(pgd_block_table *bt);

/* The longest cached prefix of prompt tokens[0..n_tokens-1] for this table's salt, in tokens:
 * a multiple of block_size, at most ((n_tokens - 1) / block_size) blocks so that the last
 * prompt token is always computed. Changes nothing (no counters either). */
uint32_t pgd_block_table_find_prefix(const pgd_block_table *bt, const int32_t *tokens,
                                     uint32_t n_tokens);

/* Admission of an EMPTY table: attach the longest cached prefix of the prompt (as
 * pgd_block_table_find_prefix), taking a reference on each hit, then reserve slots for
 * n_new_tokens more tokens after it (usually the first prefill chunk). *n_cached_tokens gets
 * the prefix length; the table then holds *n_cached_tokens + n_new_tokens positions. All or
 * nothing: on PGD_ENOBLOCKS (hits taken off the free list + new blocks would leave fewer than
 * `reserve` blocks free) or PGD_ENOMEM nothing changes. Counts one query in the pool's
 * counters on success. PGD_EINVAL if the table is not empty. */
int pgd_block_table_attach_prefix(pgd_block_table *bt, const int32_t *tokens, uint32_t n_tokens,
                                  uint32_t n_new_tokens, uint32_t reserve,
                                  uint32_t *n_cached_tokens);

/* Free blocks that pgd_block_table_grow(bt, n_new_tokens) would take from the pool (new
 * blocks plus one if the partial last block is shared and must be copied). */
uint32_t pgd_block_table_blocks_needed(const pgd_block_table *bt, uint32_t n_new_tokens);

/* The most tokens, at most `want`, that pgd_block_table_grow can add now with the pool's free
 * blocks (the room left in the last block, one block for its copy-on-write if it is shared,
 * then whole blocks). 0 when not even one fits. Changes nothing. */
uint32_t pgd_block_table_fit(const pgd_block_table *bt, uint32_t want);

/* Reserve slots for n_new_tokens more positions, allocating blocks as needed. If the partial
 * last block is shared (after a fork) it is first replaced by a private copy: *cow tells the
 * backend which KV rows to copy (src == dst == 0 when none); cow may be NULL only when the
 * caller knows no copy can be needed (PGD_EINVAL otherwise). All or nothing: on PGD_ENOBLOCKS,
 * PGD_ENOMEM or PGD_ERANGE nothing changes. */
int pgd_block_table_grow(pgd_block_table *bt, uint32_t n_new_tokens, pgd_block_copy *cow);

/* Copy-on-write of the last block on its own: if it is partly filled and shared, replace it by
 * a fresh block and report {old, new} in *cow (else {0, 0}). 0 or PGD_ENOBLOCKS (no change). */
int pgd_block_table_cow(pgd_block_table *bt, pgd_block_copy *cow);

/* Register in the prefix cache every full block among the first n_computed positions (whose KV
 * the backend has written; n_computed <= n_tokens) that is not registered yet; tokens[0 ..
 * n_computed-1] are the sequence's token ids. If an identical block (same tokens, salt and
 * parent) is already cached, the table switches to it and releases its own copy, so block ids
 * in [0, n_cached) may change: rebuild the backend's view of the table after this call. No-op
 * with caching off. 0, or PGD_EINVAL (n_computed too large, or a shared block registered with
 * other tokens: the tokens do not match what was computed). */
int pgd_block_table_cache_blocks(pgd_block_table *bt, const int32_t *tokens, uint32_t n_computed);

/* slots[i] = slot of position start + i, for i < n: block * block_size + position % block_size.
 * PGD_ERANGE if start + n > n_tokens. */
int pgd_block_table_slots(const pgd_block_table *bt, uint32_t start, uint32_t n, int64_t *slots);

/* Make the EMPTY table dst (initialised on the same pool) a copy of src sharing every block
 * (each block's ref count + 1), with src's salt: for n > 1 choices. 0, PGD_EINVAL (dst not
 * empty or on another pool) or PGD_ENOMEM (dst unchanged). */
int pgd_block_table_fork(pgd_block_table *dst, const pgd_block_table *src);

/* Block ids in position order ([*n_blocks]); valid until the next call that changes bt. */
static inline const int32_t *pgd_block_table_blocks(const pgd_block_table *bt, uint32_t *n_blocks) {
    if (n_blocks) *n_blocks = bt->n_blocks;
    return bt->blocks;
}

/* Verify the table's invariants against its pool. 0 or PGD_EINVAL with a detail. */
int pgd_block_table_check(const pgd_block_table *bt);

#endif
