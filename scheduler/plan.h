/*
 * scheduler/plan.h — one step's plan while it is built, allocated as it is planned.
 *
 * pgd_plan_add grows the sequence's block table right there (kvpool), so a planned item has its
 * KV slots: planning is allocating, and nothing later can refuse them. When the pool cannot
 * serve an item the caller learns it at once (PGD_ENOBLOCKS, nothing changed) and may preempt;
 * a preempted item is dropped (pgd_plan_drop) after its blocks went back. Once planning is over,
 * pgd_plan_finish lays the live items out for the runner (engine/runner.h): tokens' slots, a
 * flat [S][stride] block table, the copy-on-writes; after the runner's step, pgd_plan_commit
 * registers the full blocks the step computed in the prefix cache (their K/V are written only
 * then, so no other sequence can hit them before).
 *
 * Copy-on-writes run in the order they were planned: a block that an earlier item copies FROM
 * may, once its last holder was preempted, be handed out and be the destination of a later
 * copy, never the other way round. Backends must keep that order.
 *
 * Used by the scheduler (sched.c) and by the callers that drive a runner directly with their own
 * block tables (the CLI's eval and offline bench, model tests).
 *
 * Ownership: the plan owns its arrays; it borrows the sequences and block tables added to it,
 * which must stay alive until the next reset. Threading: the owner's thread (the scheduler
 * thread).
 */
#ifndef PGD_SCHEDULER_PLAN_H
#define PGD_SCHEDULER_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/runner.h"
#include "kvpool/block_table.h"

typedef struct pgd_plan pgd_plan;

/* A plan for steps of at most max_tokens tokens. 0 or PGD_ENOMEM. */
int pgd_plan_create(uint32_t max_tokens, pgd_plan **out);
void pgd_plan_destroy(pgd_plan *p); /* NULL is fine */

/* Empty the plan for the next step. */
void pgd_plan_reset(pgd_plan *p);

/* Plan n > 0 tokens of seq from position `start`: bt must hold exactly [0, start), or already
 * [0, start + n) (a table pgd_block_table_attach_prefix just set up). The table grows to
 * start + n positions (with a copy-on-write when its partial last block is shared). `owner` is
 * the caller's handle for the item. On success *index gets the item's index until the next
 * drop or finish. PGD_ENOBLOCKS or PGD_ENOMEM: nothing changed. */
int pgd_plan_add(pgd_plan *p, pgd_seq *seq, pgd_block_table *bt, uint32_t start, uint32_t n,
                 bool all_logits, void *owner, uint32_t *index);

/* Make item `index` (as pgd_plan_add gave it) an embedding's: see pgd_step_item.pool. */
void pgd_plan_set_pool(pgd_plan *p, uint32_t index, pgd_pooling pool);

/* Remove item `index` (its sequence was preempted: its table was freed). Its tokens and its
 * copy-on-write leave the plan. */
void pgd_plan_drop(pgd_plan *p, uint32_t index);

uint32_t pgd_plan_n_items(const pgd_plan *p);  /* live items */
uint32_t pgd_plan_n_tokens(const pgd_plan *p); /* their tokens */

/* Lay out the live items, in the order they were added (indices change: item k of the result
 * is pgd_plan_owner(p, k)). The view is valid until the next reset. 0 or PGD_ENOMEM. */
int pgd_plan_finish(pgd_plan *p, pgd_step_plan **out);

/* The owner handle and step item of item k: before pgd_plan_finish the index pgd_plan_add
 * gave, after it the position in the finished plan. */
void *pgd_plan_owner(const pgd_plan *p, uint32_t k);
const pgd_step_item *pgd_plan_item(const pgd_plan *p, uint32_t k);

/* After a successful step: register every full block the items computed in the prefix cache
 * (pgd_block_table_cache_blocks). 0, or PGD_EINVAL (a cached block holds other tokens: a bug). */
int pgd_plan_commit(pgd_plan *p);

#endif
