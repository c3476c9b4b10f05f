/*
 * scheduler/sched_impl.h — the scheduler's private data, shared by sched.c (the lifecycle and
 * the step) and sched_check.c (the invariant checks). Nothing outside scheduler/sched*.c includes
 * it.
 *
 * Data: every live request (sreq) is in an id hash map and owns an array of choices (sseq).
 * A choice is on at most one intrusive list: its tenant's waiting list or the running list,
 * both kept sorted by rank = (priority descending, arrival ascending, choice index ascending).
 * The head of a list is the most important; preemption victims are taken after the asker (FCFS:
 * the tail). A choice's pgd_seq exists from its first admission (choice 0) or fork (the others)
 * until it finishes; its block table lists the KV blocks of its computed positions — between
 * steps exactly bt.n_tokens of them, none while it waits or is preempted.
 *
 * Threading: as pgd_sched (one thread, see sched.h).
 */
#ifndef PGD_SCHEDULER_SCHED_IMPL_H
#define PGD_SCHEDULER_SCHED_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool/block_table.h"
#include "scheduler/plan.h"
#include "scheduler/sched.h"

typedef struct sreq sreq;
typedef struct sseq sseq;

struct sseq {
    sreq *req;
    uint32_t index;
    pgd_seq_state state;
    pgd_seq *seq;       /* NULL until first admitted (choice 0) or forked */
    pgd_block_table bt; /* its KV blocks; empty unless running */
    sseq *prev, *next;
    int32_t item;         /* index in the current plan, -1 when not planned */
    double charge;        /* estimated service of its planned item (0 when not planned) */
    uint64_t admitted_in; /* the step (pgd_sched_stats.n_steps + 1 while planned) that last
                             admitted it: make_room leaves it be in that step */
};

typedef struct slist {
    sseq *head, *tail;
    uint32_t n;
} slist;

typedef struct tenant {
    uint64_t id;
    double vtime;      /* service charged / weight, raised when it becomes backlogged */
    double pending;    /* estimated service of its items planned in this step (0 between) */
    uint32_t chunked;  /* prompt tokens (every planned token but decodes) of its items planned in
                          this step (0 between): chunk_cap's allowance is per step */
    uint32_t n_active; /* its sequences waiting or running */
    uint32_t n_seats;  /* seats its running sequences hold (as pgd_sched.n_seats counts) */
    float weight;      /* of its latest request (> 0) */
    bool yielded;      /* not admitted again in this step: it gave a seat to another tenant
                          (make_room), stood aside over its share (skip_over_share), made way
                          for a light tenant (defer_admission) or spent its chunk allowance */
    bool defer;        /* FAIR, this step: its prompts wait (chunks and admissions): it makes
                          way for a light tenant (mark_light) or spent its chunk allowance */
    bool hold;         /* FAIR, this step: its decodes wait too, all but the running head's */
    slist wait;
    uint64_t prompt_tokens, generation_tokens, computed_tokens; /* as pgd_sched_stats */
} tenant;

struct sreq {
    uint64_t id;
    pgd__req_spec *spec;
    tenant *t;
    uint64_t arrival;
    uint32_t n, n_live; /* choices; those not finished */
    bool fork_pending;  /* n > 1 and the other choices are not forked yet */
    bool admitted;      /* choice 0 was admitted once */
    bool resolved;      /* left the "waiting for first admission" count */
    uint32_t cached_tokens, completion_tokens;
    uint32_t prompt_charged;      /* prompt positions [0, prompt_charged) charged (or cache hits) */
    uint32_t lp_next;             /* prompt_logprobs: positions [0, lp_next) had their rows
                                     reported (row p gives token p + 1's logprob) */
    uint64_t submit_ns, queue_ns; /* submit time; submit to first admission */
    double *pool_sum;             /* an embedding: [n_embd] its rows' hidden states summed in
                                     position order (MEAN) or the last one's (LAST) */
    float *embedding;             /* [n_embd] the pooled vector, once every row is in */
    uint32_t pool_next;           /* MEAN: positions [0, pool_next) are in pool_sum */
    sreq *hnext;
    sseq ch[]; /* [n] */
};

struct pgd_sched {
    pgd_runner *runner;
    pgd_kvpool *pool;
    pgd_req_limits lim;
    pgd_sched_config cfg;
    pgd_event_fn emit;
    void *ud;
    uint32_t bs, usable, n_pool_blocks;
    tenant **tenants;
    uint32_t n_tenants, cap_tenants;
    slist run;
    uint32_t n_seats;    /* running sequences + choices their pending forks will add */
    uint32_t wait_seats; /* the same of the waiting sequences */
    uint32_t n_waiting, n_preempted_waiting, n_new_waiting;
    sreq **map; /* [map_mask + 1] chains */
    uint32_t map_mask, n_reqs;
    uint64_t next_arrival, n_resolved;
    pgd_plan *plan;
    uint32_t budget;
    uint32_t rows, eval_rows; /* logit rows the step's items take; of which evaluation rows */
    uint32_t max_rows;        /* the runner's caps.max_logit_rows */
    pgd_sample_result *plp;   /* [PGD_SCHED_EVAL_ROWS] one item's prompt logprobs */
    int32_t *prank;           /* [PGD_SCHED_EVAL_ROWS] their ranks */
    bool preempted;
    bool head_planned; /* the running head got tokens in phases 2-3 (see "Progress") */
    /* FAIR, this step (see mark_light): the lowest counter of the tenants within their seat
     * share that wait (INFINITY: none); whether another tenant's prompt or decode waits for one
     * of them beyond what their shares ask (made_way); whether one of them had a sequence
     * admitted. light_missed: the last step made way and admitted none (this one makes no such
     * way) */
    double light_low;
    bool made_way, light_admitted, light_missed;
    uint32_t n_admitted_step, n_preempted_step, n_forked_step;
    uint64_t now_ns;
    pgd_sched_item_info *info; /* [cap_info] the latest step's log */
    uint32_t n_info, cap_info, last_tokens, last_items;
    sreq **failing;    /* [cap_info] requests of a failed step */
    uint32_t *refs;    /* [n_pool_blocks] checker scratch */
    uint64_t *written; /* [n_pool_blocks] plan checker: step stamp of the last write */
    uint64_t n_checked_plans;
    pgd_sched_stats st;
};

/* Rank: whether a comes before b (more important). */
static inline bool before(const sseq *a, const sseq *b) {
    int32_t pa = a->req->spec->priority, pb = b->req->spec->priority;
    if (pa != pb) return pa > pb;
    if (a->req->arrival != b->req->arrival) return a->req->arrival < b->req->arrival;
    return a->index < b->index;
}

static inline uint32_t seats_of(const sseq *q) {
    return q->index == 0 && q->req->fork_pending ? q->req->n : 1;
}

static inline bool live(const sseq *q) {
    return q->state != PGD_SEQ_FINISHED && q->state != PGD_SEQ_ABORTED;
}

/* Whether q still has prompt rows to compute whose logits report prompt logprobs (choice 0 of
 * a request that asks for them, until every prompt token but the first is reported): an
 * evaluation item, all of whose rows come back (pgd_step_item.all_logits). */
static inline bool eval_pending(const sseq *q) {
    const sreq *r = q->req;
    return q->index == 0 && r->spec->prompt_logprobs >= 0 && r->lp_next + 1 < r->spec->n_prompt;
}

/* The logit rows of a planned item: each token's for an evaluation item, none for an
 * embedding's, else one when it samples (all known tokens computed). */
static inline uint32_t rows_of(const sseq *q, const pgd_step_item *it) {
    if (it->all_logits) return it->n_tokens;
    if (it->pool != PGD_POOL_NONE) return 0; /* an embedding samples nothing */
    return it->start + it->n_tokens == q->seq->tokens.n;
}

/* The plan of the step being run agrees with the scheduler's own state: each item its running
 * sequence's, its positions written into blocks it owns alone, its slots and block table row its
 * table's, the step's logit rows within the runner's. 0, else PGD_EINVAL with the first
 * difference. */
int pgd__sched_check_plan(pgd_sched *S, const pgd_step_plan *sp);

#endif
