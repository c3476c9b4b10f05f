/*
 * scheduler/sched.h — the scheduler's core: request lifecycle and the per-step plan, driven
 * synchronously (the scheduler thread in scheduler/worker.h calls it in a loop; tests and the
 * CLI's generate call it directly, step by step).
 *
 * Owns: every request it accepted, their sequences (pgd_seq, one per choice) and block tables,
 * the KV block pool (kvpool/, sized from the runner's capabilities), the waiting queues (one
 * per tenant), the running list and the plan. It drives the runner it is given (borrowed).
 *
 * States of a sequence (one choice of a request):
 *   WAITING   queued for its first admission (choices 1..n-1 of an n > 1 request are DORMANT
 *             until the prompt is computed, then forked)
 *   RUNNING   holds KV blocks; gets tokens every step (decode) or prompt chunks (prefill)
 *   PREEMPTED gave its blocks back (recompute); queued again with its generated tokens, ahead
 *             of the newer requests of its tenant
 *   FINISHED / ABORTED: gone (its final event is posted, its memory freed)
 *
 * One step (pgd_sched_step), with budget B tokens and S sequences. Planning is allocating: each
 * item's block table grows through kvpool as it is planned (scheduler/plan.h), so what is
 * planned has its KV slots and the runner only computes.
 *   1. fork n > 1 requests whose prompt (all but its last token) is computed: the choices share
 *      every block; each computes the last prompt token itself, so the shared partial block is
 *      copied on write when that token is planned and each samples from its own logits and seed;
 *   2. running sequences that decode (one pending token) get it, oldest / highest priority first;
 *   3. running sequences with a pending prompt (or a recompute) get chunks of what is left;
 *   4. waiting sequences are admitted — the tenant with the lowest weighted virtual counter first,
 *      then priority, then arrival — with their first chunk, attaching their cached prefix;
 *      no admission in a step that preempted, and admission stops at the first one that does
 *      not fit (so a large request is never overtaken forever);
 *   5. the runner computes the plan (engine/runner.h); the full blocks it computed enter the
 *      prefix cache; then TOKEN / FINISH events, virtual counters charged, finished sequences
 *      retired (their full blocks stay in the prefix cache, evictable).
 * When the pool cannot give a running sequence the slots for even one token, the lowest-priority,
 * then youngest, running sequence is preempted right there (its blocks go back, planned or not;
 * it may be the one asking) and planning goes on. Every admitted sequence fits the pool alone
 * (pgd_request_check), so the oldest running sequence always makes progress: no deadlock, no
 * livelock.
 *
 * Invariants (pgd_sched_check verifies them): a step holds at most B tokens and S sequences;
 * the running sequences (plus the choices a fork will add) are at most S; only running
 * sequences hold blocks, between steps exactly the positions they computed, and every block's
 * ref count equals the number of running block tables listing it; the pool's own invariants
 * hold (free + used == usable, cache consistent); lists are sorted and their counts match. With
 * check_invariants every plan is checked before it runs, too: each item's table covers its
 * positions, the blocks it writes are its own (ref count 1, not cached) and no slot is written
 * twice.
 *
 * Threading: none — a pgd_sched belongs to one thread (the scheduler thread), like the runner.
 */
#ifndef PGD_SCHEDULER_SCHED_H
#define PGD_SCHEDULER_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/runner.h"
#include "kvpool/kvpool.h"
#include "scheduler/request.h"

/* Requests that may wait for their first admission when not told (written once). */
#define PGD_DEFAULT_MAX_WAITING 1024

typedef struct pgd_sched_config {
    uint32_t max_num_batched_tokens; /* B; 0 = the runner's step size (caps.max_tokens: 512 on
                                        the CPU); capped by it */
    uint32_t max_num_seqs;           /* S; 0 = the runner's preferred count (caps.max_seqs: 64
                                        on the CPU); capped by B */
    uint32_t max_waiting;            /* requests waiting for their first admission; 0 =
                                        PGD_DEFAULT_MAX_WAITING */
    uint32_t watermark_blocks;       /* blocks kept free when admitting while others run;
                                        UINT32_MAX = 1% of the pool (the default) */
    bool prefix_caching;             /* reuse the KV of cached prompt prefixes (default on) */
    bool check_invariants;           /* check every plan and run pgd_sched_check after every
                                        step (tests, debug) */
} pgd_sched_config;

void pgd_sched_config_default(pgd_sched_config *c);

typedef enum pgd_seq_state {
    PGD_SEQ_DORMANT = 0, /* choice i > 0 before the fork */
    PGD_SEQ_WAITING,
    PGD_SEQ_RUNNING,
    PGD_SEQ_PREEMPTED,
    PGD_SEQ_FINISHED,
    PGD_SEQ_ABORTED,
} pgd_seq_state;

/* One planned item of the latest step (the step log). */
typedef struct pgd_sched_item_info {
    uint64_t id;         /* request */
    uint32_t index;      /* choice */
    uint32_t n_tokens;   /* computed this step */
    uint32_t n_computed; /* before the step */
    uint32_t n_prompt;
    bool decode;  /* one token computed and one sampled (a decode step of this sequence) */
    bool sampled; /* a token was sampled (and a TOKEN event posted) */
} pgd_sched_item_info;

typedef struct pgd_sched_step_info {
    uint32_t n_items;  /* sequences in the step */
    uint32_t n_tokens; /* tokens in the step */
    uint32_t n_admitted, n_preempted, n_forked;
    uint32_t budget_tokens, budget_seqs; /* B and S */
    const pgd_sched_item_info *items;    /* [n_items]; valid until the next step */
} pgd_sched_step_info;

typedef struct pgd_sched pgd_sched;

/* A scheduler over `runner` (borrowed: it must outlive the scheduler, and nothing else may use
 * it meanwhile); it makes the KV block pool from the runner's capabilities. Events go to
 * emit(ev, ud), called on the scheduler's thread during submit, abort and step. 0 or
 * PGD_ENOMEM. */
int pgd_sched_create(pgd_runner *runner, const pgd_sched_config *cfg, pgd_event_fn emit, void *ud,
                     pgd_sched **out);
/* Frees every request without posting events. NULL is fine. */
void pgd_sched_destroy(pgd_sched *s);

/* The effective configuration (defaults resolved) and the limits requests are checked with. */
const pgd_sched_config *pgd_sched_get_config(const pgd_sched *s);
void pgd_sched_limits(const pgd_sched *s, pgd_req_limits *out);

/* The KV block pool (tests, debugging; the scheduler thread). */
pgd_kvpool *pgd_sched_pool(const pgd_sched *s);

/* Queue a request under `id` (unique among live requests). Takes `spec` (checked with
 * pgd_request_check) in every case. 0; PGD_EFULL (max_waiting reached); PGD_EINVAL (id in
 * use). */
int pgd_sched_submit_spec(pgd_sched *s, uint64_t id, pgd__req_spec *spec);
/* Check, copy and queue: PGD_EINVAL with a detail and a param for a bad request
 * (pgd_request_check); as above otherwise. */
int pgd_sched_submit(pgd_sched *s, uint64_t id, const pgd_request *r);

/* Abort a live request in any state: its blocks go back now, every unfinished choice gets a
 * FINISH(abort) event. PGD_ENOTFOUND when no live request has this id (finished already). */
int pgd_sched_abort(pgd_sched *s, uint64_t id);
void pgd_sched_abort_all(pgd_sched *s);

/* Whether a step would do anything (something running or waiting). */
bool pgd_sched_has_work(const pgd_sched *s);

/* Plan and run one step (see the top of this file), then post its events. info (may be NULL)
 * describes the step. 0; or the error of the forward pass (the requests in that step got ERROR
 * events and are gone); or, with check_invariants, the checkers' PGD_EINVAL (a plan that
 * breaks the rules fails its requests the same way). */
int pgd_sched_step(pgd_sched *s, pgd_sched_step_info *info);

/* Verify every invariant listed at the top (O(pool + requests)). 0 or PGD_EINVAL with a
 * detail; PGD_ENOMEM. */
int pgd_sched_check(const pgd_sched *s);

void pgd_sched_get_stats(const pgd_sched *s, pgd_sched_stats *out);

/* Requests that left the "waiting for first admission" state so far (admitted, aborted,
 * failed or refused at submit): the worker publishes it for its max_waiting check. */
uint64_t pgd_sched_n_resolved(const pgd_sched *s);

/* State of choice `index` of request `id`: PGD_SEQ_FINISHED when no live request has the id. */
pgd_seq_state pgd_sched_seq_state(const pgd_sched *s, uint64_t id, uint32_t index);

#endif
