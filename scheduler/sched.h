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
 *   2. every running sequence that decodes (one pending token) gets it, in rank order (priority,
 *      then arrival) — except, FAIR, that a tenant beyond its seat share holds its decodes back,
 *      all but the rank head's, in a step that admits a light request (see phase 4);
 *   3. running sequences with a pending prompt (or a recompute) get chunks of what is left —
 *      FAIR: the tenant with the lowest counter first (then rank), except that the rank head of
 *      the running list is sure of one token (see "Progress"); FCFS: in rank order;
 *   4. waiting sequences are admitted with their first chunk, attaching their cached prefix —
 *      FAIR: the backlogged tenant with the lowest counter first, then priority, then arrival
 *      within the tenant; FCFS: priority, then arrival, across all tenants. No admission in a
 *      step that preempted for memory, and admission stops at the first one that does not fit
 *      (so a large request is never overtaken forever) — except, FAIR, that a tenant beyond its
 *      share of the seats steps aside for the step, and a light tenant (the lowest counter,
 *      within its seat share with the request — half of it when it has more waiting) takes a
 *      seat from the tenant furthest above its share (which keeps at least its share and
 *      cannot take it back in that step; a sequence admitted in the step is not taken): a
 *      light tenant's first token does not wait for a busy tenant's sequences to finish. A
 *      tenant beyond its seat share computes at most max(16, budget / 32) prompt tokens per
 *      step in phases 3 and 4, all its sequences together, and none while a tenant within its
 *      share (and served no more) waits; nor is a tenant at its share admitted beyond it then.
 *      When that tenant has just one request waiting (a light request) and it can take a seat
 *      in the step, no tenant holding a seat computes prompt tokens in the step, and those
 *      beyond their share hold their decodes back. So a busy tenant's prompts do not fill the
 *      step a light request arrives in, and the step of its first chunk carries the light
 *      tenant's work, the decodes of tenants within their share and the head's token (on a
 *      device whose step time grows with its tokens, the CPU, that is the light tenant's first
 *      token sooner; the others' work waits one step). Should a step that made way admit none of
 *      the light tenant's (its blocks fell short), the next one makes no such way. Seat shares
 *      are max_num_seqs x weight / the weights of the tenants with work;
 *   5. the runner computes the plan (engine/runner.h); the full blocks it computed enter the
 *      prefix cache; then TOKEN / FINISH events, counters charged, finished sequences retired
 *      (their full blocks stay in the prefix cache, evictable).
 *
 * Embeddings (pgd_request.pooling): one sequence that computes its whole prompt like any other
 * (chunks, prefix hits — none for MEAN, which pools every row —, preemption) and samples
 * nothing: its items ask the runner for hidden rows (pgd_step_item.pool), which phase 5 pools
 * into the request (LAST: the last prompt row; MEAN: each position's row once, in position
 * order, in double — so a recompute after a preemption adds nothing twice and the vector is the
 * same bits whatever the chunks were); once the last prompt row is in, it finishes (stop) with
 * the vector in its FINISH event.
 *
 * Fair share (policy FAIR, the default: the Virtual Token Counter of Sheng et al., "Fairness in
 * Serving Large Language Models", OSDI 2024). Each tenant has a counter of the service it got:
 *   vtime += (prompt tokens computed x fair_prompt_factor + tokens sampled x fair_output_factor)
 *            / weight
 * charged for what each step computed (both policies charge; only FAIR reads the counters). A
 * request's prompt positions are charged once, the first time they are computed: prefix-cache
 * hits are not computed, so not charged, and a recompute after a preemption is the server's
 * doing, not the tenant's. Every sampled token is charged (n choices sample n times). Within a
 * step the work already planned counts too (an estimate of the same charge), so one tenant does
 * not take every free seat before its counter moves. A tenant whose waiting list becomes
 * non-empty on a submit (it becomes backlogged) has its counter raised to the lowest counter of
 * the other backlogged tenants; when there is none, of the tenants with running sequences; when
 * there is none either (the server was idle), to the highest counter of all: idle time is not
 * banked as credit, and nothing is reserved for an idle tenant (work-conserving). A requeue after
 * preemption lifts nothing. The weight is the request's (the tenant's, which the server passes
 * in every request).
 *
 * Preemption. When the pool cannot give a running sequence q the slots for even one token, a
 * victim is preempted right there (its blocks go back, planned or not) and planning goes on. The
 * victim is always a running sequence ranked after q in the fixed rank order (priority, then
 * arrival, then choice) — FAIR: the one whose tenant has the highest counter (the furthest above
 * its share), then the lowest priority, then the youngest; FCFS: the lowest ranked — and q
 * itself only when none ranks after it. A sequence ranked before q is never taken, even when its
 * tenant is further above its share: that is the price of the progress guarantee below.
 *
 * Progress. Every admitted sequence fits the pool alone (pgd_request_check). The rank head H of
 * the running list is therefore never preempted: nothing ranks before it, so no other sequence
 * may choose it, it would choose itself only as the last running sequence, which fits, and a
 * light tenant's admission never takes the head's seat. And
 * H gets at least one token every step: phase 2 plans it first when it decodes; when it has a
 * prompt pending instead, phase 2 planned at most S - 1 <= B - 1 one-token items, so a token
 * and a seat are left, and phase 3 plans H first (FCFS) or holds them back for H while it
 * serves the others by counter, then plans H (FAIR; preempting lower-ranked sequences if it
 * must). Between two finishes the head changes only to a newly admitted sequence of higher
 * rank, so at most once per live sequence, and a head finishes within as many steps as it has
 * tokens left: something finishes at least every (live sequences + 1) x (longest sequence)
 * steps, and with nothing running the first waiting sequence is admitted (it fits alone). No
 * deadlock, no livelock, under both policies; check_invariants verifies every step that H got
 * its token.
 *
 * Invariants (pgd_sched_check verifies them): a step holds at most B tokens and S sequences;
 * the running sequences (plus the choices a fork will add) are at most S; only running
 * sequences hold blocks, between steps exactly the positions they computed, and every block's
 * ref count equals the number of running block tables listing it; the pool's own invariants
 * hold (free + used == usable, cache consistent); lists are sorted and their counts match. With
 * check_invariants every plan is checked before it runs, too: the running head has an item
 * (see "Progress"), each item's table covers its positions, the blocks it writes are its own
 * (ref count 1, not cached) and no slot is written twice.
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

/* Logit rows one step gives evaluation items at most (prompt logprobs: a row per prompt token;
 * a row of logits is n_vocab floats on the host). */
#define PGD_SCHED_EVAL_ROWS 256

/* Requests that may wait for their first admission when not told (written once). */
#define PGD_DEFAULT_MAX_WAITING 4096 /* two /v1/embeddings requests of 2048 inputs */

/* How the running and waiting sequences share the steps (see "Fair share" above). */
typedef enum pgd_sched_policy {
    PGD_SCHED_FAIR = 0, /* weighted fair share across tenants (virtual token counters) */
    PGD_SCHED_FCFS,     /* first come first served across all tenants (priority, then arrival) */
} pgd_sched_policy;

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
    pgd_sched_policy policy;         /* default FAIR */
    float fair_prompt_factor;        /* service of one computed prompt token (default 1) */
    float fair_output_factor;        /* service of one sampled token (default 2); both finite,
                                        >= 0 and not both 0 */
} pgd_sched_config;

/* Defaults: FAIR, prompt factor 1, output factor 2, watermark 1%, prefix caching on. */
void pgd_sched_config_default(pgd_sched_config *c);

/* "fair" or "fcfs" into *out: 0, or PGD_EINVAL with a detail. */
int pgd_sched_policy_parse(const char *s, pgd_sched_policy *out);
/* "fair", "fcfs" ("?" for anything else). */
const char *pgd_sched_policy_str(pgd_sched_policy p);

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
 * emit(ev, ud), called on the scheduler's thread during submit, abort and step. 0, PGD_EINVAL
 * with a detail (an unknown policy, fair factors negative, not finite or both 0) or
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
/* Fail every live request in any state: one ERROR event each (code, msg), blocks back now
 * (when the device is lost, nothing queued can ever run). */
void pgd_sched_fail_all(pgd_sched *s, int code, const char *msg);

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
