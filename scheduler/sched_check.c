/*
 * scheduler/sched_check.c — the scheduler's invariant checks: the plan of a step
 * (pgd__sched_check_plan, run before the forward pass when check_invariants is set) and the
 * state between steps (pgd_sched_check). They read the scheduler and the pool; they change
 * nothing but their scratch (refs, written).
 *
 * Threading: the scheduler's thread (see sched.h).
 */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "scheduler/sched_impl.h"

int pgd__sched_check_plan(pgd_sched *S, const pgd_step_plan *sp) {
    uint64_t stamp = ++S->n_checked_plans;
    if (!S->head_planned)
        return pgd_error_set(PGD_EINVAL, "plan: the running head got no token (no progress)");
    uint32_t t = 0, rows = 0;
    for (uint32_t k = 0; k < sp->n_items; k++) {
        const pgd_step_item *it = &sp->items[k];
        const sseq *q = pgd_plan_owner(S->plan, k);
        const pgd_block_table *bt = &q->bt;
        if (q->item != (int32_t)k || q->seq != it->seq || q->state != PGD_SEQ_RUNNING)
            return pgd_error_set(PGD_EINVAL, "plan: item %u is not its running sequence", k);
        if (it->all_logits != eval_pending(q))
            return pgd_error_set(PGD_EINVAL, "plan: item %u %s all its logits", k,
                                 it->all_logits ? "keeps" : "does not keep");
        rows += rows_of(q, it);
        if (bt->n_tokens != it->start + it->n_tokens)
            return pgd_error_set(PGD_EINVAL, "plan: item %u covers %u of %u positions", k,
                                 bt->n_tokens, it->start + it->n_tokens);
        const int32_t *row = sp->block_tables + (uint64_t)k * sp->bt_stride;
        if (bt->n_blocks > sp->bt_stride || memcmp(row, bt->blocks, bt->n_blocks * sizeof *row))
            return pgd_error_set(PGD_EINVAL, "plan: item %u's block table row differs", k);
        for (uint32_t p = it->start; p < it->start + it->n_tokens; p++, t++) {
            int32_t b = bt->blocks[p / S->bs];
            pgd_kvpool_block bi;
            if (pgd_kvpool_block_info(S->pool, b, &bi) || bi.ref != 1 || bi.cached)
                return pgd_error_set(PGD_EINVAL,
                                     "plan: item %u writes position %u into block %d, which it "
                                     "does not own alone",
                                     k, p, (int)b);
            if (S->written[b] == stamp && (p == it->start || p % S->bs == 0))
                return pgd_error_set(PGD_EINVAL, "plan: block %d is written by two items", (int)b);
            S->written[b] = stamp;
            if (sp->slots[t] != (int64_t)b * S->bs + p % S->bs)
                return pgd_error_set(PGD_EINVAL, "plan: token %u's slot is not its table's", t);
        }
    }
    if (t != sp->n_tokens)
        return pgd_error_set(PGD_EINVAL, "plan: %u tokens, items hold %u", sp->n_tokens, t);
    if (rows != S->rows || rows > S->max_rows)
        return pgd_error_set(PGD_EINVAL, "plan: %u logit rows (counted %u), the runner takes %u",
                             rows, S->rows, S->max_rows);
    return 0;
}

#define CHECK_OR_FAIL(cond, ...)                                                                   \
    do {                                                                                           \
        if (!(cond)) return pgd_error_set(PGD_EINVAL, __VA_ARGS__);                                \
    } while (0)

static int check_list(const slist *l, pgd_seq_state a, pgd_seq_state b, uint32_t *n_preempted) {
    uint32_t n = 0;
    for (const sseq *q = l->head; q; q = q->next) {
        n++;
        CHECK_OR_FAIL(q->state == a || q->state == b,
                      "sched: request %llu choice %u in state %d "
                      "on the wrong list",
                      (unsigned long long)q->req->id, q->index, q->state);
        CHECK_OR_FAIL(q->next ? q->next->prev == q : l->tail == q, "sched: broken list links");
        CHECK_OR_FAIL(!q->next || before(q, q->next), "sched: list out of rank order");
        if (n_preempted && q->state == PGD_SEQ_PREEMPTED) (*n_preempted)++;
    }
    CHECK_OR_FAIL(n == l->n, "sched: list holds %u, counted %u", n, l->n);
    return 0;
}

int pgd_sched_check(const pgd_sched *S) {
    int rc = pgd_kvpool_check(S->pool);
    if (rc) return rc;
    CHECK_OR_FAIL(S->last_tokens <= S->cfg.max_num_batched_tokens,
                  "sched: step of %u tokens over the budget %u", S->last_tokens,
                  S->cfg.max_num_batched_tokens);
    CHECK_OR_FAIL(S->last_items <= S->cfg.max_num_seqs, "sched: step of %u sequences over %u",
                  S->last_items, S->cfg.max_num_seqs);
    /* running: sorted, each holds its blocks; count references */
    if ((rc = check_list(&S->run, PGD_SEQ_RUNNING, PGD_SEQ_RUNNING, NULL))) return rc;
    memset(S->refs, 0, S->n_pool_blocks * sizeof *S->refs);
    uint32_t seats = 0;
    for (const sseq *q = S->run.head; q; q = q->next) {
        const pgd_seq *s = q->seq;
        CHECK_OR_FAIL(s, "sched: running choice without a sequence");
        if ((rc = pgd_block_table_check(&q->bt))) return rc;
        CHECK_OR_FAIL(q->bt.n_tokens < s->tokens.n,
                      "sched: request %llu: %u computed of %zu tokens",
                      (unsigned long long)q->req->id, q->bt.n_tokens, s->tokens.n);
        CHECK_OR_FAIL(q->item < 0, "sched: a plan outlived its step");
        CHECK_OR_FAIL(s->finish == PGD_FINISH_NONE, "sched: a finished sequence is running");
        for (uint32_t i = 0; i < q->bt.n_blocks; i++) S->refs[q->bt.blocks[i]]++;
        seats += seats_of(q);
    }
    CHECK_OR_FAIL(seats == S->n_seats && seats <= S->cfg.max_num_seqs,
                  "sched: %u seats (counted %u, limit %u)", S->n_seats, seats, S->cfg.max_num_seqs);
    for (uint32_t b = 1; b < S->n_pool_blocks; b++)
        CHECK_OR_FAIL(S->refs[b] == pgd_kvpool_refcount(S->pool, (int32_t)b),
                      "sched: block %u has ref count %u but %u running tables hold it", b,
                      pgd_kvpool_refcount(S->pool, (int32_t)b), S->refs[b]);
    /* waiting: sorted per tenant, no blocks held; tenants' active counts */
    uint32_t n_wait = 0, n_pre = 0;
    for (uint32_t i = 0; i < S->n_tenants; i++) {
        const tenant *t = S->tenants[i];
        if ((rc = check_list(&t->wait, PGD_SEQ_WAITING, PGD_SEQ_PREEMPTED, &n_pre))) return rc;
        n_wait += t->wait.n;
        uint32_t n_run = 0;
        for (const sseq *q = t->wait.head; q; q = q->next)
            CHECK_OR_FAIL(q->bt.n_blocks == 0 && q->bt.n_tokens == 0,
                          "sched: a waiting sequence holds KV blocks");
        for (const sseq *q = S->run.head; q; q = q->next) n_run += q->req->t == t;
        uint32_t t_seats = 0;
        for (const sseq *q = S->run.head; q; q = q->next)
            if (q->req->t == t) t_seats += seats_of(q);
        CHECK_OR_FAIL(t->n_seats == t_seats, "sched: tenant %llu: %u seats, counted %u",
                      (unsigned long long)t->id, t->n_seats, t_seats);
        CHECK_OR_FAIL(t->n_active == n_run + t->wait.n, "sched: tenant %llu: %u active, counted %u",
                      (unsigned long long)t->id, t->n_active, n_run + t->wait.n);
        CHECK_OR_FAIL(isfinite(t->vtime) && t->vtime >= 0 && t->pending == 0,
                      "sched: tenant %llu: counter %g, pending %g between steps",
                      (unsigned long long)t->id, t->vtime, t->pending);
    }
    uint32_t wait_seats = 0;
    for (uint32_t i = 0; i < S->n_tenants; i++)
        for (const sseq *q = S->tenants[i]->wait.head; q; q = q->next) wait_seats += seats_of(q);
    CHECK_OR_FAIL(wait_seats == S->wait_seats, "sched: %u waiting seats, counted %u", S->wait_seats,
                  wait_seats);
    CHECK_OR_FAIL(n_wait == S->n_waiting && n_pre == S->n_preempted_waiting,
                  "sched: %u waiting (%u preempted), counted %u (%u)", S->n_waiting,
                  S->n_preempted_waiting, n_wait, n_pre);
    /* requests: live counts, every live choice on the list its state names */
    uint32_t n_reqs = 0, n_new = 0;
    for (uint32_t i = 0; i <= S->map_mask; i++)
        for (const sreq *r = S->map[i]; r; r = r->hnext) {
            n_reqs++;
            n_new += !r->resolved;
            uint32_t n_live = 0;
            for (uint32_t c = 0; c < r->n; c++) {
                const sseq *q = &r->ch[c];
                n_live += live(q);
                CHECK_OR_FAIL(q->state != PGD_SEQ_DORMANT ||
                                  (c > 0 && (r->fork_pending || r->spec->prompt_only)),
                              "sched: request %llu choice %u dormant after the fork",
                              (unsigned long long)r->id, c);
            }
            CHECK_OR_FAIL(n_live == r->n_live && n_live > 0, "sched: request %llu live %u/%u",
                          (unsigned long long)r->id, r->n_live, n_live);
        }
    CHECK_OR_FAIL(n_reqs == S->n_reqs && n_new == S->n_new_waiting,
                  "sched: %u requests (%u new), counted %u (%u)", S->n_reqs, S->n_new_waiting,
                  n_reqs, n_new);
    return 0;
}
