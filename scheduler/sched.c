/*
 * scheduler/sched.c — request lifecycle and the per-step plan (see sched.h for the step, the
 * states and the invariants; sched_impl.h for the data, sched_check.c for the checks).
 *
 * Planning is allocating: an item's table grows as the item is planned (pgd_plan_add), and
 * pgd_block_table_fit says beforehand how many tokens the free blocks can take, so a plan never
 * holds an item the pool could not serve and the runner never meets a full pool.
 *
 * Fair share: a tenant's counter (vtime) is charged in the step's last phase for what was
 * computed; while a step is planned, `pending` holds the estimated charge of the items planned
 * for the tenant so far (each choice keeps its own in `charge`, given back if it is unplanned),
 * and the ordering key is vtime + pending. A request's prompt_charged marks how far its prompt
 * was charged, so a prompt position is charged at most once.
 *
 * Threading: one thread (see sched.h).
 */
#include "scheduler/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "kvpool/block_table.h"
#include "scheduler/plan.h"
#include "scheduler/sched_impl.h"

void pgd_sched_config_default(pgd_sched_config *c) {
    memset(c, 0, sizeof *c);
    c->watermark_blocks = UINT32_MAX;
    c->prefix_caching = true;
    c->policy = PGD_SCHED_FAIR;
    c->fair_prompt_factor = 1.0f;
    c->fair_output_factor = 2.0f;
}

int pgd_sched_policy_parse(const char *s, pgd_sched_policy *out) {
    if (s && !strcmp(s, "fair")) {
        *out = PGD_SCHED_FAIR;
        return 0;
    }
    if (s && !strcmp(s, "fcfs")) {
        *out = PGD_SCHED_FCFS;
        return 0;
    }
    return pgd_error_set(PGD_EINVAL, "unknown scheduling policy '%s' (fair or fcfs)",
                         s ? s : "(null)");
}

const char *pgd_sched_policy_str(pgd_sched_policy p) {
    switch (p) {
    case PGD_SCHED_FAIR:
        return "fair";
    case PGD_SCHED_FCFS:
        return "fcfs";
    }
    return "?";
}

/* ---- lists ------------------------------------------------------------------------------- */

/* Insert in rank order; newcomers usually belong at the tail, so search from there. */
static void slist_insert(slist *l, sseq *q) {
    sseq *p = l->tail;
    while (p && before(q, p)) p = p->prev;
    q->prev = p;
    q->next = p ? p->next : l->head;
    if (q->next)
        q->next->prev = q;
    else
        l->tail = q;
    if (p)
        p->next = q;
    else
        l->head = q;
    l->n++;
}

static void slist_remove(slist *l, sseq *q) {
    if (q->prev)
        q->prev->next = q->next;
    else
        l->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        l->tail = q->prev;
    q->prev = q->next = NULL;
    l->n--;
}

static void run_insert(pgd_sched *S, sseq *q) {
    slist_insert(&S->run, q);
    S->n_seats += seats_of(q);
    q->req->t->n_seats += seats_of(q);
    q->state = PGD_SEQ_RUNNING;
}

static void run_remove(pgd_sched *S, sseq *q) {
    slist_remove(&S->run, q);
    S->n_seats -= seats_of(q);
    q->req->t->n_seats -= seats_of(q);
}

static void wait_insert(pgd_sched *S, sseq *q, pgd_seq_state st) {
    slist_insert(&q->req->t->wait, q);
    S->n_waiting++;
    S->wait_seats += seats_of(q);
    if (st == PGD_SEQ_PREEMPTED) S->n_preempted_waiting++;
    q->state = st;
}

static void wait_remove(pgd_sched *S, sseq *q) {
    slist_remove(&q->req->t->wait, q);
    S->n_waiting--;
    S->wait_seats -= seats_of(q);
    if (q->state == PGD_SEQ_PREEMPTED) S->n_preempted_waiting--;
}

/* ---- tenants ------------------------------------------------------------------------------ */

static tenant *tenant_get(pgd_sched *S, uint64_t id) {
    for (uint32_t i = 0; i < S->n_tenants; i++)
        if (S->tenants[i]->id == id) return S->tenants[i];
    if (S->n_tenants == S->cap_tenants) {
        uint32_t cap = S->cap_tenants ? S->cap_tenants * 2 : 8;
        tenant **p = realloc(S->tenants, cap * sizeof *p);
        if (!p) return NULL;
        S->tenants = p;
        S->cap_tenants = cap;
    }
    tenant *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->id = id;
    S->tenants[S->n_tenants++] = t;
    return t;
}

/* The ordering key of fair share: the counter plus what this step planned for the tenant. */
static double key(const tenant *t) {
    return t->vtime + t->pending;
}

/* t becomes backlogged (a submit finds its waiting list empty): its counter rises to the lowest
 * of the other backlogged tenants; when none, of the tenants running something; when none
 * either, to the highest counter (an idle server starts everyone level). Idle time is not
 * banked as credit. */
static void tenant_lift(pgd_sched *S, tenant *t) {
    bool any_wait = false, any_run = false;
    double lo_wait = 0, lo_run = 0, hi = 0;
    for (uint32_t i = 0; i < S->n_tenants; i++) {
        const tenant *o = S->tenants[i];
        if (o == t) continue;
        if (o->vtime > hi) hi = o->vtime;
        if (o->wait.n) {
            if (!any_wait || o->vtime < lo_wait) lo_wait = o->vtime;
            any_wait = true;
        } else if (o->n_active) {
            if (!any_run || o->vtime < lo_run) lo_run = o->vtime;
            any_run = true;
        }
    }
    double floor = any_wait ? lo_wait : any_run ? lo_run : hi;
    if (t->vtime < floor) t->vtime = floor;
}

/* The tenant whose waiting head is admitted next. FAIR: lowest key, then earliest head; FCFS:
 * earliest head (priority, then arrival) whatever its tenant. */
static tenant *pick_tenant(const pgd_sched *S) {
    bool fair = S->cfg.policy == PGD_SCHED_FAIR;
    tenant *best = NULL;
    for (uint32_t i = 0; i < S->n_tenants; i++) {
        tenant *t = S->tenants[i];
        if (!t->wait.n || t->yielded) continue;
        if (!best)
            best = t;
        else if (fair && key(t) != key(best)) {
            if (key(t) < key(best)) best = t;
        } else if (before(t->wait.head, best->wait.head))
            best = t;
    }
    return best;
}

static void clear_pending(pgd_sched *S) {
    for (uint32_t i = 0; i < S->n_tenants; i++) {
        S->tenants[i]->pending = 0;
        S->tenants[i]->chunked = 0;
        S->tenants[i]->yielded = false;
        S->tenants[i]->defer = false;
        S->tenants[i]->hold = false;
    }
}

/* Prompt positions of [start, start + n) that r was not charged for yet. */
static uint32_t fresh_prompt(const sreq *r, uint32_t start, uint32_t n) {
    uint32_t np = r->spec->n_prompt, end = start + n;
    uint32_t lo = start > r->prompt_charged ? start : r->prompt_charged;
    uint32_t hi = end < np ? end : np;
    return hi > lo ? hi - lo : 0;
}

/* The service of `prompt` fresh prompt positions and `sampled` tokens of r, weighted. */
static double service(const pgd_sched *S, const sreq *r, uint32_t prompt, uint32_t sampled) {
    return ((double)prompt * S->cfg.fair_prompt_factor +
            (double)sampled * S->cfg.fair_output_factor) /
           r->spec->weight;
}

/* ---- id map ------------------------------------------------------------------------------- */

static uint32_t hash_id(const pgd_sched *S, uint64_t id) {
    uint64_t x = id * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) & S->map_mask;
}

static sreq *map_find(const pgd_sched *S, uint64_t id) {
    for (sreq *r = S->map[hash_id(S, id)]; r; r = r->hnext)
        if (r->id == id) return r;
    return NULL;
}

static int map_insert(pgd_sched *S, sreq *r) {
    if (S->n_reqs + 1 > S->map_mask + 1) {
        uint32_t cap = (S->map_mask + 1) * 2;
        sreq **m = calloc(cap, sizeof *m);
        if (!m) return PGD_ENOMEM;
        sreq **old = S->map;
        uint32_t old_cap = S->map_mask + 1;
        S->map = m;
        S->map_mask = cap - 1;
        for (uint32_t i = 0; i < old_cap; i++)
            for (sreq *p = old[i], *next; p; p = next) {
                next = p->hnext;
                uint32_t h = hash_id(S, p->id);
                p->hnext = m[h];
                m[h] = p;
            }
        free(old);
    }
    uint32_t h = hash_id(S, r->id);
    r->hnext = S->map[h];
    S->map[h] = r;
    S->n_reqs++;
    return 0;
}

static void map_remove(pgd_sched *S, sreq *r) {
    for (sreq **pp = &S->map[hash_id(S, r->id)]; *pp; pp = &(*pp)->hnext)
        if (*pp == r) {
            *pp = r->hnext;
            S->n_reqs--;
            return;
        }
}

/* ---- create / destroy --------------------------------------------------------------------- */

static void resolve_config(const pgd_backend_caps *caps, const pgd_sched_config *in,
                           pgd_sched_config *c) {
    *c = *in;
    if (!c->max_num_batched_tokens || c->max_num_batched_tokens > caps->max_tokens)
        c->max_num_batched_tokens = caps->max_tokens;
    if (!c->max_num_seqs) c->max_num_seqs = caps->max_seqs;
    if (caps->seqs_limit && c->max_num_seqs > caps->seqs_limit) c->max_num_seqs = caps->seqs_limit;
    if (c->max_num_seqs > caps->max_logit_rows) c->max_num_seqs = caps->max_logit_rows;
    if (c->max_num_seqs > c->max_num_batched_tokens) c->max_num_seqs = c->max_num_batched_tokens;
    if (!c->max_waiting) c->max_waiting = PGD_DEFAULT_MAX_WAITING;
    if (c->watermark_blocks == UINT32_MAX) c->watermark_blocks = (caps->n_blocks - 1) / 100;
}

void pgd_sched_limits(const pgd_sched *S, pgd_req_limits *out) {
    *out = S->lim;
}

pgd_kvpool *pgd_sched_pool(const pgd_sched *S) {
    return S->pool;
}

/* The fair-share settings make sense. 0 or PGD_EINVAL with a detail. */
static int check_config(const pgd_sched_config *c) {
    if (c->policy != PGD_SCHED_FAIR && c->policy != PGD_SCHED_FCFS)
        return pgd_error_set(PGD_EINVAL, "unknown scheduling policy %d", (int)c->policy);
    float pf = c->fair_prompt_factor, of = c->fair_output_factor;
    if (!isfinite(pf) || !isfinite(of) || pf < 0 || of < 0 || (pf == 0 && of == 0))
        return pgd_error_set(PGD_EINVAL,
                             "fair share factors must be finite, >= 0 and not both 0 (prompt %g, "
                             "output %g)",
                             (double)pf, (double)of);
    return 0;
}

int pgd_sched_create(pgd_runner *runner, const pgd_sched_config *cfg, pgd_event_fn emit, void *ud,
                     pgd_sched **out) {
    *out = NULL;
    int rc = check_config(cfg);
    if (rc) return rc;
    pgd_sched *S = calloc(1, sizeof *S);
    if (!S) return PGD_ENOMEM;
    const pgd_backend_caps *caps = pgd_runner_caps(runner);
    const pgd_model_info *info = pgd_runner_info(runner);
    S->runner = runner;
    resolve_config(caps, cfg, &S->cfg);
    S->emit = emit;
    S->ud = ud;
    rc = pgd_kvpool_create(caps->n_blocks, caps->block_size, S->cfg.prefix_caching, &S->pool);
    if (rc) {
        free(S);
        return rc;
    }
    S->bs = caps->block_size;
    S->n_pool_blocks = caps->n_blocks;
    S->usable = S->n_pool_blocks - 1;
    pgd_req_limits_of(info, caps, S->cfg.max_num_seqs, &S->lim);
    S->map_mask = 63;
    S->map = calloc(S->map_mask + 1, sizeof *S->map);
    S->cap_info = S->cfg.max_num_seqs;
    S->info = calloc(S->cap_info, sizeof *S->info);
    S->failing = calloc(S->cap_info, sizeof *S->failing);
    S->refs = calloc(S->n_pool_blocks, sizeof *S->refs);
    S->written = calloc(S->n_pool_blocks, sizeof *S->written);
    S->plp = malloc(PGD_SCHED_EVAL_ROWS * sizeof *S->plp);
    S->prank = malloc(PGD_SCHED_EVAL_ROWS * sizeof *S->prank);
    S->max_rows = caps->max_logit_rows;
    S->next_arrival = 1;
    if (!S->map || !S->info || !S->failing || !S->refs || !S->written || !S->plp || !S->prank ||
        pgd_plan_create(S->cfg.max_num_batched_tokens, &S->plan)) {
        pgd_sched_destroy(S);
        return PGD_ENOMEM;
    }
    *out = S;
    return 0;
}

static void free_req(sreq *r) {
    for (uint32_t i = 0; i < r->n; i++) {
        pgd_seq_destroy(r->ch[i].seq);
        pgd_block_table_destroy(&r->ch[i].bt);
    }
    pgd__request_free(r->spec);
    free(r->pool_sum);
    free(r->embedding);
    free(r);
}

void pgd_sched_destroy(pgd_sched *S) {
    if (!S) return;
    for (uint32_t i = 0; S->map && i <= S->map_mask; i++)
        for (sreq *r = S->map[i], *next; r; r = next) {
            next = r->hnext;
            free_req(r);
        }
    for (uint32_t i = 0; i < S->n_tenants; i++) free(S->tenants[i]);
    free(S->tenants);
    free(S->map);
    pgd_plan_destroy(S->plan);
    free(S->info);
    free(S->failing);
    free(S->refs);
    free(S->written);
    free(S->plp);
    free(S->prank);
    pgd_kvpool_destroy(S->pool);
    free(S);
}

const pgd_sched_config *pgd_sched_get_config(const pgd_sched *S) {
    return &S->cfg;
}

/* ---- events and retirement ---------------------------------------------------------------- */

static void base_event(pgd_sched *S, pgd_event *ev, pgd_event_kind kind, const sreq *r) {
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->id = r->id;
    ev->user = r->spec->user;
    ev->t_ns = S->now_ns ? S->now_ns : pgd_now_ns();
    ev->usage.prompt_tokens = r->spec->n_prompt;
    ev->usage.completion_tokens = r->completion_tokens;
    ev->usage.cached_tokens = r->cached_tokens;
    ev->usage.queue_ns = r->queue_ns;
}

static void emit_token(pgd_sched *S, sseq *q) {
    pgd_seq *s = q->seq;
    pgd_event ev;
    base_event(S, &ev, PGD_EVENT_TOKEN, q->req);
    ev.index = q->index;
    ev.token = s->last.token;
    ev.text = s->delta.len ? s->delta.data : "";
    ev.text_len = s->delta.len;
    ev.logprobs = q->req->spec->params.sampling.logprobs ? &s->last : NULL;
    if (S->emit) S->emit(&ev, S->ud);
    pgd_buf_reset(&s->delta);
}

/* The request leaves the "waiting for its first admission" count (once). */
static void resolve(pgd_sched *S, sreq *r) {
    if (r->resolved) return;
    r->resolved = true;
    S->n_resolved++;
    S->n_new_waiting--;
}

static void unplan(pgd_sched *S, sseq *q);

/* Take choice q off its list (and out of the plan) and free its sequence; its blocks go back
 * to the pool. */
static void detach(pgd_sched *S, sseq *q) {
    unplan(S, q);
    switch (q->state) {
    case PGD_SEQ_RUNNING:
        run_remove(S, q);
        q->req->t->n_active--;
        break;
    case PGD_SEQ_WAITING:
    case PGD_SEQ_PREEMPTED:
        wait_remove(S, q);
        q->req->t->n_active--;
        break;
    default:
        break;
    }
    pgd_seq_destroy(q->seq);
    q->seq = NULL;
    pgd_block_table_free(&q->bt);
}

/* Choice q ends with `reason`: FINISH event (done on the request's last), memory freed. */
static void retire(pgd_sched *S, sseq *q, pgd_finish_reason reason) {
    sreq *r = q->req;
    uint32_t n_out = q->seq ? (uint32_t)(q->seq->tokens.n - q->seq->n_prompt) : 0;
    detach(S, q);
    q->state = reason == PGD_REASON_ABORT ? PGD_SEQ_ABORTED : PGD_SEQ_FINISHED;
    r->completion_tokens += n_out;
    r->n_live--;
    pgd_event ev;
    base_event(S, &ev, PGD_EVENT_FINISH, r);
    ev.index = q->index;
    ev.reason = reason;
    ev.n_output = n_out;
    ev.done = r->n_live == 0;
    if (reason != PGD_REASON_ABORT && r->embedding) {
        ev.embedding = r->embedding;
        ev.n_embd = pgd_runner_info(S->runner)->cfg.n_embd;
    }
    if (S->emit) S->emit(&ev, S->ud);
    if (r->n_live == 0) {
        resolve(S, r);
        map_remove(S, r);
        free_req(r);
    }
}

/* Every live choice of r ends with `reason`; the last retirement frees r. */
static void retire_all(pgd_sched *S, sreq *r, pgd_finish_reason reason) {
    uint32_t n = r->n;
    for (uint32_t i = 0; i < n; i++) {
        if (!live(&r->ch[i])) continue;
        bool last = r->n_live == 1;
        retire(S, &r->ch[i], reason);
        if (last) break;
    }
}

/* A prompt_only request is over once its prompt rows are computed (or needed none): its choices
 * finish (length) with no output. */
static void finish_prompt_only(pgd_sched *S, sreq *r) {
    S->st.n_finished++;
    retire_all(S, r, PGD_REASON_LENGTH);
}

/* After a step: the hidden rows of embedding item `it` of q into its request's pool_sum. Whether
 * every prompt row is in (the embedding is done). */
static bool pool_rows(pgd_sched *S, sseq *q, const pgd_step_item *it) {
    sreq *r = q->req;
    const uint32_t E = pgd_runner_info(S->runner)->cfg.n_embd, end = it->start + it->n_tokens;
    uint32_t n = pgd_step_item_hidden(it, (uint32_t)q->seq->tokens.n);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t p = end - n + j; /* its position */
        const float *h = pgd_runner_hidden(S->runner, it->hidden_row + j);
        if (r->spec->pooling == PGD_POOL_LAST) {
            for (uint32_t i = 0; i < E; i++) r->pool_sum[i] = h[i];
        } else if (p == r->pool_next) { /* each position once (a recompute repeats none) */
            for (uint32_t i = 0; i < E; i++) r->pool_sum[i] += h[i];
            r->pool_next++;
        }
    }
    return end >= r->spec->n_prompt;
}

static void fail_request(pgd_sched *S, sreq *r, int code, const char *msg);

/* An embedding's rows are all in: its vector, then its choice finishes (stop) with it. */
static void finish_embedding(pgd_sched *S, sreq *r) {
    const uint32_t E = pgd_runner_info(S->runner)->cfg.n_embd;
    double div = r->spec->pooling == PGD_POOL_MEAN ? (double)r->spec->n_prompt : 1.0;
    PGD_ASSERT(r->spec->pooling != PGD_POOL_MEAN || r->pool_next == r->spec->n_prompt);
    r->embedding = malloc(E * sizeof *r->embedding);
    if (!r->embedding) {
        fail_request(S, r, PGD_ENOMEM, "out of memory for an embedding");
        return;
    }
    for (uint32_t i = 0; i < E; i++) r->embedding[i] = (float)(r->pool_sum[i] / div);
    S->st.n_finished++;
    retire_all(S, r, PGD_REASON_STOP);
}

/* After a step: the prompt logprobs of evaluation item `it` of q not reported yet — position
 * p's row gives token p + 1's — as one PROMPT_LOGPROBS event. */
static void emit_prompt_logprobs(pgd_sched *S, sseq *q, const pgd_step_item *it) {
    sreq *r = q->req;
    uint32_t last = r->spec->n_prompt - 1, end = it->start + it->n_tokens;
    uint32_t lo = it->start > r->lp_next ? it->start : r->lp_next, hi = end < last ? end : last;
    if (hi <= lo) return;
    PGD_ASSERT(hi - lo <= PGD_SCHED_EVAL_ROWS);
    for (uint32_t p = lo; p < hi; p++)
        pgd_sample_token_logprobs(pgd_runner_logits(S->runner, it->logits_row + (p - it->start)),
                                  (int32_t)S->lim.n_vocab, r->spec->prompt[p + 1],
                                  r->spec->prompt_logprobs, &S->plp[p - lo], &S->prank[p - lo]);
    r->lp_next = hi;
    pgd_event ev;
    base_event(S, &ev, PGD_EVENT_PROMPT_LOGPROBS, r);
    ev.index = 0;
    ev.lp_first = lo + 1;
    ev.n_lp = hi - lo;
    ev.prompt_lp = S->plp;
    ev.prompt_rank = S->prank;
    if (S->emit) S->emit(&ev, S->ud);
}

/* The whole request fails: one ERROR event (done), everything freed. */
static void fail_request(pgd_sched *S, sreq *r, int code, const char *msg) {
    for (uint32_t i = 0; i < r->n; i++)
        if (live(&r->ch[i])) {
            sseq *q = &r->ch[i];
            r->completion_tokens += q->seq ? (uint32_t)(q->seq->tokens.n - q->seq->n_prompt) : 0;
            detach(S, q);
            q->state = PGD_SEQ_ABORTED;
        }
    r->n_live = 0;
    pgd_event ev;
    base_event(S, &ev, PGD_EVENT_ERROR, r);
    ev.done = true;
    ev.error = code;
    ev.message = msg && *msg ? msg : pgd_strerror(code);
    S->st.n_errors++;
    if (S->emit) S->emit(&ev, S->ud);
    resolve(S, r);
    map_remove(S, r);
    free_req(r);
}

/* ---- submit / abort ----------------------------------------------------------------------- */

int pgd_sched_submit_spec(pgd_sched *S, uint64_t id, pgd__req_spec *spec) {
    int rc;
    sreq *r = NULL;
    if (map_find(S, id)) {
        rc = pgd_error_set(PGD_EINVAL, "request id %llu is in use", (unsigned long long)id);
        goto refuse;
    }
    if (S->n_new_waiting >= S->cfg.max_waiting) {
        rc = pgd_error_set(PGD_EFULL, "too many requests waiting (%u); try again later",
                           S->n_new_waiting);
        goto refuse;
    }
    tenant *t = tenant_get(S, spec->tenant);
    r = calloc(1, sizeof *r + spec->n * sizeof(sseq));
    if (!t || !r) {
        rc = pgd_error_set(PGD_ENOMEM, "out of memory queueing a request");
        goto refuse;
    }
    r->id = id;
    r->spec = spec;
    r->t = t;
    r->arrival = S->next_arrival++;
    r->submit_ns = pgd_now_ns();
    r->n = r->n_live = spec->n;
    r->fork_pending = spec->n > 1 && !spec->prompt_only; /* prompt_only: the others never run */
    if (spec->pooling != PGD_POOL_NONE) {
        uint32_t E = pgd_runner_info(S->runner)->cfg.n_embd;
        r->pool_sum = calloc(E, sizeof *r->pool_sum);
        r->embedding = NULL;
        if (!r->pool_sum) {
            rc = pgd_error_set(PGD_ENOMEM, "out of memory queueing a request");
            goto refuse;
        }
    }
    for (uint32_t i = 0; i < r->n; i++) {
        r->ch[i] = (sseq){.req = r, .index = i, .item = -1};
        pgd_block_table_init(&r->ch[i].bt, S->pool, spec->params.cache_salt);
    }
    if ((rc = map_insert(S, r))) goto refuse;
    if (!t->wait.n) tenant_lift(S, t);
    t->n_active++;
    t->weight = spec->weight;
    wait_insert(S, &r->ch[0], PGD_SEQ_WAITING);
    S->n_new_waiting++;
    S->st.n_submitted++;
    return 0;
refuse:
    if (r) free(r->pool_sum);
    free(r);
    pgd__request_free(spec);
    S->n_resolved++;
    S->st.n_refused++;
    return rc;
}

int pgd_sched_submit(pgd_sched *S, uint64_t id, const pgd_request *req) {
    pgd__req_spec *spec;
    int rc = pgd_request_check(req, &S->lim);
    if (!rc) rc = pgd__request_dup(req, &S->lim, &spec);
    if (rc) {
        S->n_resolved++;
        S->st.n_refused++;
        return rc;
    }
    return pgd_sched_submit_spec(S, id, spec);
}

int pgd_sched_abort(pgd_sched *S, uint64_t id) {
    sreq *r = map_find(S, id);
    if (!r) return PGD_ENOTFOUND;
    S->st.n_aborted++;
    retire_all(S, r, PGD_REASON_ABORT);
    return 0;
}

void pgd_sched_abort_all(pgd_sched *S) {
    for (uint32_t i = 0; i <= S->map_mask; i++)
        while (S->map[i]) pgd_sched_abort(S, S->map[i]->id);
}

void pgd_sched_fail_all(pgd_sched *S, int code, const char *msg) {
    for (uint32_t i = 0; i <= S->map_mask; i++)
        while (S->map[i]) fail_request(S, S->map[i], code, msg);
}

bool pgd_sched_has_work(const pgd_sched *S) {
    return S->run.n > 0 || S->n_waiting > 0;
}

uint64_t pgd_sched_n_resolved(const pgd_sched *S) {
    return S->n_resolved;
}

pgd_seq_state pgd_sched_seq_state(const pgd_sched *S, uint64_t id, uint32_t index) {
    const sreq *r = map_find(S, id);
    if (!r || index >= r->n) return PGD_SEQ_FINISHED;
    return r->ch[index].state;
}

/* ---- planning ----------------------------------------------------------------------------- */

/* Whether choice 0 stops before the last prompt token: its request is still to be forked (each
 * choice computes that token itself) or generates nothing. */
static bool stops_before_last(const sseq *q) {
    return q->index == 0 && (q->req->fork_pending || q->req->spec->prompt_only);
}

/* Tokens q may compute now: all pending ones, except that choice 0 stops before the last prompt
 * token when stops_before_last. Its table holds exactly its computed positions (q is not planned
 * yet). */
static uint32_t pending_limit(const sseq *q) {
    const pgd_seq *s = q->seq;
    uint32_t done = q->bt.n_tokens;
    if (stops_before_last(q)) {
        uint32_t lim = s->n_prompt - 1;
        return lim > done ? lim - done : 0;
    }
    return (uint32_t)s->tokens.n - done;
}

/* Of n tokens of q planned from start, those that are not a decode (its one last token). */
static uint32_t chunk_part(const sseq *q, uint32_t start, uint32_t n) {
    return n == 1 && start + 1 == q->seq->tokens.n ? 0 : n;
}

/* Logit rows. Every item may need one (its sample), so each item that may still be planned in
 * this step keeps one in reserve: at most max_num_seqs (<= max_logit_rows) items in all, and no
 * more than the seats of the running and waiting sequences (a set that only shrinks during a
 * step). An evaluation item takes a row per token — its own reserved row and what the others
 * leave, at most PGD_SCHED_EVAL_ROWS evaluation rows per step in all, but always one (so the
 * running head progresses whatever it is). Of want tokens of an evaluation item about to be
 * planned, how many it may take. */
static uint32_t eval_cap(const pgd_sched *S, uint32_t want) {
    uint32_t seats = S->n_seats + S->wait_seats, items = pgd_plan_n_items(S->plan);
    uint32_t most = seats < S->cfg.max_num_seqs ? seats : S->cfg.max_num_seqs;
    PGD_ASSERT(most > items); /* the item being planned holds a seat */
    uint64_t reserved = (uint64_t)S->rows + most - items;
    uint64_t slack = S->max_rows > reserved ? S->max_rows - reserved : 0;
    uint32_t left = PGD_SCHED_EVAL_ROWS - S->eval_rows; /* eval_rows <= PGD_SCHED_EVAL_ROWS */
    uint64_t cap = 1 + slack < left ? 1 + slack : left;
    if (cap < 1) cap = 1;
    return want < cap ? want : (uint32_t)cap;
}

/* Plan n tokens of q: its table grows now. The caller made sure they fit (pgd_block_table_fit,
 * or an attach that reserved them), so only a lack of memory can fail; that fails q's request.
 * false then. */
static bool plan_item(pgd_sched *S, sseq *q, uint32_t start, uint32_t n) {
    PGD_ASSERT(q->item < 0 && n > 0 && n <= S->budget);
    uint32_t k;
    bool eval = eval_pending(q);
    PGD_ASSERT(!eval || n <= eval_cap(S, n));
    int rc = pgd_plan_add(S->plan, q->seq, &q->bt, start, n, eval, q, &k);
    if (rc) {
        PGD_ASSERT(rc != PGD_ENOBLOCKS); /* planning never promises what the pool lacks */
        fail_request(S, q->req, rc, pgd_error_detail());
        return false;
    }
    q->item = (int32_t)k;
    if (q->req->spec->pooling != PGD_POOL_NONE)
        pgd_plan_set_pool(S->plan, k, q->req->spec->pooling);
    S->budget -= n;
    S->rows += rows_of(q, pgd_plan_item(S->plan, k));
    S->eval_rows += eval ? n : 0;
    /* what phase 5 will charge, if it runs: fresh prompt positions, a token when all known
     * tokens are computed */
    q->charge = service(S, q->req, fresh_prompt(q->req, start, n), start + n == q->seq->tokens.n);
    q->req->t->pending += q->charge;
    q->req->t->chunked += chunk_part(q, start, n);
    return true;
}

static void unplan(pgd_sched *S, sseq *q) {
    if (q->item < 0) return;
    uint32_t k = (uint32_t)q->item;
    const pgd_step_item *it = pgd_plan_item(S->plan, k);
    S->budget += it->n_tokens;
    S->rows -= rows_of(q, it);
    S->eval_rows -= it->all_logits ? it->n_tokens : 0;
    q->req->t->chunked -= chunk_part(q, it->start, it->n_tokens);
    pgd_plan_drop(S->plan, k);
    q->item = -1;
    q->req->t->pending -= q->charge;
    q->charge = 0;
}

/* Preemption by recompute: its blocks go back now (also those planned this step), and it is
 * requeued (ahead of newer requests of its tenant) with its tokens, sampler and text state. */
static void preempt(pgd_sched *S, sseq *q) {
    unplan(S, q);
    run_remove(S, q);
    pgd_block_table_free(&q->bt);
    wait_insert(S, q, PGD_SEQ_PREEMPTED);
    S->st.n_preemptions++;
    S->n_preempted_step++;
    S->preempted = true;
}

/* Whom running q preempts when not even one of its tokens fits: a running sequence ranked
 * after q — FAIR: of the tenant with the highest key, then the lowest ranked; FCFS: the lowest
 * ranked — or q itself when none is (see "Progress" in sched.h). */
static sseq *pick_victim(const pgd_sched *S, sseq *q) {
    sseq *v = S->run.tail;
    if (S->cfg.policy == PGD_SCHED_FCFS || v == q) return v;
    for (sseq *p = v->prev; p != q; p = p->prev)
        if (key(p->req->t) > key(v->req->t)) v = p;
    return v;
}

/* Plan up to `want` tokens of running q (fewer if only fewer fit). When not even one token
 * fits, preempt a sequence ranked after q (pick_victim) and try again. false when q itself
 * was preempted (it was then the lowest ranked: every later sequence is gone too) or failed. */
static bool plan_running(pgd_sched *S, sseq *q, uint32_t want) {
    if (eval_pending(q)) want = eval_cap(S, want);
    for (;;) {
        uint32_t n = pgd_block_table_fit(&q->bt, want);
        if (n > 0) return plan_item(S, q, q->bt.n_tokens, n);
        sseq *victim = pick_victim(S, q);
        preempt(S, victim);
        if (victim == q) return false;
    }
}

/* The weights of the tenants with work, and t's share of the seats given that sum. */
static double active_weight(const pgd_sched *S) {
    double sum = 0;
    for (uint32_t i = 0; i < S->n_tenants; i++)
        if (S->tenants[i]->n_active) sum += S->tenants[i]->weight;
    return sum;
}

static double share_of(const pgd_sched *S, const tenant *t, double wsum) {
    return wsum > 0 ? (double)S->cfg.max_num_seqs * t->weight / wsum : 0;
}

static double seat_share(const pgd_sched *S, const tenant *t);

/* FAIR: prompt tokens a sequence of tenant t may compute in this step, out of want (seats: those
 * the sequence adds, when it is being admitted); 0 when none. A tenant holding more seats than
 * its share (so another tenant with work holds fewer than its own) computes at most max(16,
 * max_num_batched_tokens / 32) prompt tokens per step, all its sequences together: on a device
 * whose step time grows with its tokens (a CPU), a busy tenant's prompts would otherwise fill the
 * steps that the other tenant's next prompt has to wait for (the step running when it arrives)
 * and then share; the other's first token comes sooner. */
static uint32_t chunk_cap(const pgd_sched *S, const tenant *t, uint32_t seats, uint32_t want) {
    if (S->cfg.policy != PGD_SCHED_FAIR || (double)(t->n_seats + seats) <= seat_share(S, t) + 1e-9)
        return want;
    uint32_t cap = S->cfg.max_num_batched_tokens / 32;
    if (cap < 16) cap = 16;
    cap = cap > t->chunked ? cap - t->chunked : 0;
    return want < cap ? want : cap;
}

/* FAIR: the tenant make_room takes a seat from for waiting q of tenant t, or NULL (wsum: the
 * weights of the tenants with work). Only when t has the lowest counter of the backlogged
 * tenants and stays within its share of the seats with q (a light tenant: q is all it has
 * waiting; with more waiting, a backlog, within half its share); then the tenant furthest above
 * its seat share among those served at least as much as t that keeps its share without one
 * seat. */
static tenant *room_victim(const pgd_sched *S, const tenant *t, const sseq *q, double wsum) {
    double share = share_of(S, t, wsum), lim = t->wait.n > 1 ? ceil(share / 2) : share;
    if ((double)(t->n_seats + seats_of(q)) > lim + 1e-9) return NULL;
    /* only for the tenant furthest behind in service */
    for (uint32_t i = 0; i < S->n_tenants; i++)
        if (S->tenants[i]->wait.n && key(S->tenants[i]) < key(t) - 1e-9) return NULL;
    tenant *v = NULL;
    double v_over = 0;
    for (uint32_t i = 0; i < S->n_tenants; i++) {
        tenant *o = S->tenants[i];
        double o_share = share_of(S, o, wsum);
        if (o == t || !o->n_seats || (double)o->n_seats - 1 < o_share - 1e-9 ||
            key(o) < key(t) - 1e-9)
            continue;
        double over = (double)o->n_seats / (o_share > 0 ? o_share : 1e-9);
        if (!v || over > v_over) v = o, v_over = over;
    }
    return v;
}

/* FAIR, as a step begins (the counters as the last step left them): light_low, the lowest
 * counter among the tenants within their seat share that wait, L the tenant that has it, and
 * who makes way for L in this step, among the tenants served at least as much: a tenant beyond
 * its share defers its prompts (chunks, admissions). And when L has one request waiting (a
 * light request, not a backlog) that can take a seat now, unless the last step
 * made way and admitted none of L's (light_missed): every tenant being served (holding a seat)
 * defers its prompts, and a tenant beyond its share holds its decodes back too, all but the
 * running head's. So L's first chunk has its step to itself but for decodes within the shares:
 * on a CPU a step's time grows with its tokens, and L's first token would wait for all of them.
 * One pass each (one sum of the active weights). */
static void mark_light(pgd_sched *S) {
    if (S->cfg.policy != PGD_SCHED_FAIR) return;
    double wsum = active_weight(S), low = INFINITY;
    const tenant *lt = NULL;
    for (uint32_t i = 0; i < S->n_tenants; i++) {
        const tenant *u = S->tenants[i];
        if (!u->wait.n || (double)u->n_seats >= share_of(S, u, wsum) - 1e-9) continue;
        /* ties (a tenant that wakes up starts level with the lowest backlogged counter): the
         * one with the least waiting */
        if (!lt || key(u) < low - 1e-9 || (key(u) <= low + 1e-9 && u->wait.n < lt->wait.n))
            low = key(u), lt = u;
    }
    if (!lt) return;
    /* a light request that can take a seat now: one is free, or make_room takes one for it */
    const sseq *q = lt->wait.head;
    bool light = !S->light_missed && lt->wait.n == 1 &&
                 (S->n_seats + seats_of(q) <= S->cfg.max_num_seqs || room_victim(S, lt, q, wsum));
    for (uint32_t i = 0; i < S->n_tenants; i++) {
        tenant *t = S->tenants[i];
        if (t == lt || low > key(t) + 1e-9) continue;
        bool beyond = (double)t->n_seats > share_of(S, t, wsum) + 1e-9;
        if (beyond || (light && t->n_seats)) t->defer = true;
        if (beyond && light) t->hold = true;
        if (light && t->n_seats) S->made_way = true;
    }
    S->light_low = low;
}

/* Step phase 3: chunks of pending prompts (and recomputes). FCFS: in rank order. FAIR: by the
 * tenant's key, then rank; one token and one seat are held back for the running head (which
 * phase 2 did not plan: it has a prompt pending) and given to it at the end, so that it
 * progresses every step whatever its tenant's counter. */
static void plan_chunks(pgd_sched *S) {
    uint32_t S_max = S->cfg.max_num_seqs;
    if (S->cfg.policy == PGD_SCHED_FCFS) {
        for (sseq *q = S->run.head; q && S->budget > 0 && pgd_plan_n_items(S->plan) < S_max;
             q = q->next) {
            uint32_t lim = pending_limit(q);
            if (q->item >= 0 || lim < 2) continue;
            if (!plan_running(S, q, lim < S->budget ? lim : S->budget)) break;
        }
        return;
    }
    sseq *h = S->run.head;
    bool held = h && h->item < 0 && pending_limit(h) >= 2 && S->budget > 0 &&
                pgd_plan_n_items(S->plan) < S_max;
    if (held) {
        S->budget--;
        S_max--;
    }
    while (S->budget > 0 && pgd_plan_n_items(S->plan) < S_max) {
        sseq *best = NULL;
        for (sseq *q = S->run.head; q; q = q->next)
            if (q->item < 0 && pending_limit(q) >= 2 && !q->req->t->defer &&
                (!best || key(q->req->t) < key(best->req->t)))
                best = q;
        if (!best) break;
        uint32_t lim = chunk_cap(S, best->req->t, 0, pending_limit(best));
        if (!lim) { /* its tenant's allowance of this step is spent */
            best->req->t->defer = true;
            continue;
        }
        plan_running(S, best, lim < S->budget ? lim : S->budget); /* planned or gone */
    }
    if (!held) return;
    S->budget++;
    /* the head is the same unless its request failed (out of memory): then the new head */
    h = S->run.head;
    if (h && h->item < 0 && pending_limit(h) >= 2) {
        uint32_t lim = chunk_cap(S, h->req->t, 0, pending_limit(h));
        if (!lim) lim = 1; /* the head progresses every step, allowance or not */
        plan_running(S, h, lim < S->budget ? lim : S->budget);
    }
}

/* Choices 1..n-1 of r share choice 0's blocks (every prompt token but the last is computed). */
static int fork_choices(pgd_sched *S, sreq *r) {
    sseq *src = &r->ch[0];
    r->fork_pending = false;
    S->n_seats -= r->n - 1; /* choice 0 held the seats of the whole request */
    r->t->n_seats -= r->n - 1;
    for (uint32_t i = 1; i < r->n; i++) {
        sseq *c = &r->ch[i];
        pgd_seq_params p = r->spec->params;
        p.sampling.seed += i;
        int rc = pgd_seq_create(S->runner, r->spec->prompt, r->spec->n_prompt, &p, &c->seq);
        if (!rc) rc = pgd_block_table_fork(&c->bt, &src->bt);
        if (rc) {
            fail_request(S, r, rc, pgd_error_detail());
            return rc;
        }
        r->t->n_active++;
        run_insert(S, c);
    }
    S->n_forked_step++;
    return 0;
}

static bool fork_ready(const sseq *q) {
    return q->index == 0 && q->req->fork_pending && q->seq && q->item < 0 &&
           q->bt.n_tokens + 1 >= q->seq->n_prompt;
}

/* t's share of the seats: S x its weight / the weights of the tenants with work. */
static double seat_share(const pgd_sched *S, const tenant *t) {
    return share_of(S, t, active_weight(S));
}

/* FAIR, when waiting q of tenant t does not fit (seats or blocks): preempt the lowest-ranked
 * running sequence (never the head, nor one admitted in this step) of room_victim's tenant,
 * provided that tenant stays at or above its share without it. A light tenant then gets a
 * seat at once instead of waiting for one to come free, and neither side can take it back: the
 * one that preempted is within its share, the one that lost a sequence still holds at least its
 * share; tenants that are both busy settle by the counters alone (seats are not service: a seat
 * of long prompts serves more than a seat of decodes). true when something was preempted. */
static bool make_room(pgd_sched *S, const tenant *t, const sseq *q) {
    if (S->cfg.policy != PGD_SCHED_FAIR) return false;
    double wsum = active_weight(S);
    tenant *v = room_victim(S, t, q, wsum);
    if (!v) return false;
    double v_share = share_of(S, v, wsum);
    for (sseq *p = S->run.tail; p && p != S->run.head; p = p->prev) {
        if (p->req->t != v || p->admitted_in == S->st.n_steps + 1 ||
            (double)(v->n_seats - seats_of(p)) < v_share - 1e-9)
            continue;
        bool was = S->preempted; /* a deliberate preemption: admission goes on */
        preempt(S, p);
        S->preempted = was;
        v->yielded = true; /* it does not take the seat back in this step */
        return true;
    }
    return false;
}

/* FAIR, when waiting q of tenant t does not fit and no room can be made for it: a tenant that
 * would go beyond its share of the seats with q steps aside for this step, so the tenants
 * below their share are tried next; a tenant within its share keeps the head of the line
 * (admission stops: a large request is never overtaken forever). true when t stepped aside. */
static bool skip_over_share(pgd_sched *S, tenant *t, const sseq *q) {
    if (S->cfg.policy != PGD_SCHED_FAIR) return false;
    if ((double)(t->n_seats + seats_of(q)) <= seat_share(S, t) + 1e-9) return false;
    t->yielded = true;
    return true;
}

/* FAIR: waiting q of tenant t waits out this step: t defers its prompts (mark_light, or its
 * chunk allowance is spent), or t holds at least its seat share and q would take it beyond, in
 * a step where a tenant within its share, served no more than t, waits (and is admitted first:
 * the lowest counter goes first, and admission stops at a tenant that does not fit). So that
 * tenant's first chunk does not share its step with q's. */
static bool defer_admission(const pgd_sched *S, const tenant *t, const sseq *q) {
    if (t->defer) return true;
    if (S->cfg.policy != PGD_SCHED_FAIR || S->light_low > key(t) + 1e-9) return false;
    double share = seat_share(S, t);
    return (double)t->n_seats >= share - 1e-9 && (double)(t->n_seats + seats_of(q)) > share + 1e-9;
}

/* q of r was admitted (hit: its cached prefix): counters; the first admission's numbers. */
static void note_admitted(pgd_sched *S, sreq *r, uint32_t hit) {
    if (!r->admitted) {
        r->admitted = true;
        r->cached_tokens = hit;
        uint64_t now = S->now_ns ? S->now_ns : pgd_now_ns();
        r->queue_ns = now > r->submit_ns ? now - r->submit_ns : 0;
        S->st.prompt_tokens += r->spec->n_prompt;
        r->t->prompt_tokens += r->spec->n_prompt;
        resolve(S, r);
    }
    S->n_admitted_step++;
}

/* Step phase 4: admissions in tenant-fair order while budget, seats and blocks allow. */
static void admit(pgd_sched *S) {
    if (S->preempted) return;
    uint32_t S_max = S->cfg.max_num_seqs;
    /* (the seat check below implies a free item: items are running sequences) */
    while (S->budget > 0) {
        tenant *t = pick_tenant(S);
        if (!t) break;
        sseq *q = t->wait.head;
        sreq *r = q->req;
        if (defer_admission(S, t, q)) {
            t->yielded = true;
            continue;
        }
        if (S->n_seats + seats_of(q) > S_max) {
            if (make_room(S, t, q) || skip_over_share(S, t, q)) continue;
            break;
        }
        if (!q->seq) {
            int rc = pgd_seq_create(S->runner, r->spec->prompt, r->spec->n_prompt, &r->spec->params,
                                    &q->seq);
            if (rc) {
                fail_request(S, r, rc, pgd_error_detail());
                continue;
            }
        }
        pgd_seq *s = q->seq;
        uint32_t n_tok = (uint32_t)s->tokens.n;
        if (r->spec->prompt_only && !eval_pending(q)) { /* nothing to compute */
            note_admitted(S, r, 0);
            finish_prompt_only(S, r);
            continue;
        }
        /* The prefix cache may serve only positions whose prompt logprobs were reported (a
         * prefix of n_match tokens serves at most n_match - 1). */
        uint32_t n_match = eval_pending(q) && r->lp_next + 1 < n_tok ? r->lp_next + 1 : n_tok;
        if (r->spec->pooling == PGD_POOL_MEAN) n_match = 1; /* every row is pooled: no hit */
        uint32_t hit = pgd_block_table_find_prefix(&q->bt, s->tokens.ids, n_match);
        uint32_t limit = stops_before_last(q) ? s->n_prompt - 1 - hit : n_tok - hit;
        uint32_t take = chunk_cap(S, t, seats_of(q), limit < S->budget ? limit : S->budget);
        if (!take && limit) { /* over its share, its allowance of this step spent: next step */
            t->yielded = true;
            continue;
        }
        if (take && eval_pending(q)) take = eval_cap(S, take);
        uint32_t wm = S->run.n ? S->cfg.watermark_blocks : 0, attached;
        /* The cached prefix and the first chunk's blocks, all or nothing. */
        int rc = pgd_block_table_attach_prefix(&q->bt, s->tokens.ids, n_match, take, wm, &attached);
        if (rc == PGD_ENOBLOCKS) { /* head-of-line: wait for room (or make it, FAIR) */
            if (make_room(S, t, q) || skip_over_share(S, t, q)) continue;
            break;
        }
        if (rc) {
            fail_request(S, r, rc, pgd_error_detail());
            continue;
        }
        PGD_ASSERT(attached == hit);
        if ((double)t->n_seats < seat_share(S, t) - 1e-9) S->light_admitted = true;
        wait_remove(S, q);
        run_insert(S, q);
        q->admitted_in = S->st.n_steps + 1;
        note_admitted(S, r, hit);
        if (take && !plan_item(S, q, hit, take)) continue;
        if (fork_ready(q)) {
            if (fork_choices(S, r)) continue;
            for (uint32_t i = 0; i < r->n && S->budget > 0 && pgd_plan_n_items(S->plan) < S_max;
                 i++) {
                sseq *c = &r->ch[i];
                if (c->item >= 0 || c->state != PGD_SEQ_RUNNING) continue;
                if (pgd_block_table_fit(&c->bt, 1) == 1 && !plan_item(S, c, c->bt.n_tokens, 1))
                    break;
            }
        }
    }
}

/* With check_invariants: the running head progresses (sched.h, "Progress"), and the plan about
 * to run breaks no rule of allocation. Each item's table covers its positions, every block it
 * writes is its own (one reference, not in the prefix cache: copied on write if it was shared),
 * no block is written by two items, and the slots are those of the table. */
/* ---- the step ------------------------------------------------------------------------------ */

/* The step's forward pass (or its plan) failed: every request with a planned item fails (each
 * once: failing frees the request and its choices). */
static void fail_planned(pgd_sched *S, int rc, const char *what) {
    char msg[320];
    snprintf(msg, sizeof msg, "%s: %s", what, pgd_error_detail());
    uint32_t n = pgd_plan_n_items(S->plan), m = 0;
    for (uint32_t k = 0; k < n; k++) {
        sseq *q = pgd_plan_owner(S->plan, k);
        q->item = -1;
        uint32_t j = 0;
        while (j < m && S->failing[j] != q->req) j++;
        if (j == m) S->failing[m++] = q->req;
    }
    pgd_plan_reset(S->plan);
    for (uint32_t j = 0; j < m; j++) fail_request(S, S->failing[j], rc, msg);
}

int pgd_sched_step(pgd_sched *S, pgd_sched_step_info *info) {
    const uint32_t B = S->cfg.max_num_batched_tokens, S_max = S->cfg.max_num_seqs;
    S->budget = B;
    S->rows = S->eval_rows = 0;
    pgd_plan_reset(S->plan);
    S->preempted = false;
    S->n_admitted_step = S->n_preempted_step = S->n_forked_step = 0;
    S->n_info = S->last_tokens = S->last_items = 0;
    S->now_ns = 0;
    S->light_low = INFINITY;
    S->made_way = false;
    clear_pending(S);

    /* 1. forks whose shared prompt is ready */
    for (sseq *q = S->run.head, *next; q; q = next) {
        next = q->next;
        if (fork_ready(q)) fork_choices(S, q->req);
    }
    mark_light(S);
    /* 2. decodes, in rank order (a preemption only removes sequences after q, or q itself,
     * which ends the loop); FAIR: but those a tenant holds back for a light one (mark_light) */
    for (sseq *q = S->run.head; q && S->budget > 0 && pgd_plan_n_items(S->plan) < S_max;
         q = q->next) {
        if (q->item >= 0 || pending_limit(q) != 1) continue;
        if (q->req->t->hold && q != S->run.head) continue;
        if (!plan_running(S, q, 1)) break;
    }
    /* 3. chunks of pending prompts (and recomputes) */
    plan_chunks(S);
    S->head_planned = !S->run.head || S->run.head->item >= 0;
    /* 4. admissions */
    S->light_admitted = false;
    admit(S);
    S->light_missed = S->made_way && !S->light_admitted;

    /* 5. run: the plan is allocated, the runner only computes */
    int rc = 0;
    pgd_step_plan *sp = NULL;
    uint32_t n_items = pgd_plan_n_items(S->plan);
    if (n_items) {
        const char *what = "the step's plan";
        rc = pgd_plan_finish(S->plan, &sp);
        for (uint32_t k = 0; !rc && k < n_items; k++) /* indices after the squeeze */
            ((sseq *)pgd_plan_owner(S->plan, k))->item = (int32_t)k;
        if (!rc && S->cfg.check_invariants) rc = pgd__sched_check_plan(S, sp);
        if (!rc) {
            what = "the forward pass failed";
            rc = pgd_runner_step(S->runner, sp);
        }
        if (!rc) {
            what = "caching the computed blocks";
            rc = pgd_plan_commit(S->plan);
        }
        S->now_ns = pgd_now_ns();
        if (rc) {
            fail_planned(S, rc, what);
            clear_pending(S);
            S->now_ns = 0;
            return rc;
        }
        S->st.n_steps++;
    }

    /* 6. events, counters, retirement */
    S->last_items = n_items;
    for (uint32_t k = 0; k < n_items; k++) {
        sseq *q = pgd_plan_owner(S->plan, k);
        const pgd_step_item *it = pgd_plan_item(S->plan, k);
        pgd_seq *s = q->seq;
        uint32_t n = it->n_tokens, before_n = it->start;
        sreq *r = q->req;
        if (S->n_info < S->cap_info)
            S->info[S->n_info++] = (pgd_sched_item_info){.id = r->id,
                                                         .index = q->index,
                                                         .n_tokens = n,
                                                         .n_computed = before_n,
                                                         .n_prompt = s->n_prompt,
                                                         .decode = n == 1 && s->sampled,
                                                         .sampled = s->sampled};
        S->last_tokens += n;
        S->st.computed_tokens += n;
        if (before_n < s->n_prompt)
            S->st.prompt_computed_tokens += n < s->n_prompt - before_n ? n : s->n_prompt - before_n;
        /* fair share: fresh prompt positions (once per request) and the sampled token */
        tenant *t = r->t;
        uint32_t fresh = fresh_prompt(r, before_n, n), end = before_n + n;
        if (end > r->spec->n_prompt) end = r->spec->n_prompt;
        if (end > r->prompt_charged) r->prompt_charged = end;
        t->vtime += service(S, r, fresh, s->sampled);
        t->computed_tokens += n;
        t->generation_tokens += s->sampled;
        q->item = -1;
        q->charge = 0;
        if (it->all_logits) emit_prompt_logprobs(S, q, it);
        if (it->pool != PGD_POOL_NONE && pool_rows(S, q, it)) {
            finish_embedding(S, r); /* frees r */
            continue;
        }
        if (r->spec->prompt_only && q->bt.n_tokens + 1 >= s->n_prompt) {
            finish_prompt_only(S, r); /* frees r */
            continue;
        }
        if (s->sampled) {
            S->st.generation_tokens++;
            emit_token(S, q);
        }
        if (s->finish != PGD_FINISH_NONE) {
            S->st.n_finished += r->n_live == 1;
            retire(S, q, s->finish == PGD_FINISH_STOP ? PGD_REASON_STOP : PGD_REASON_LENGTH);
        }
    }
    pgd_plan_reset(S->plan);
    clear_pending(S);
    S->now_ns = 0;
    if (info) {
        info->n_items = S->last_items;
        info->n_tokens = S->last_tokens;
        info->n_admitted = S->n_admitted_step;
        info->n_preempted = S->n_preempted_step;
        info->n_forked = S->n_forked_step;
        info->budget_tokens = B;
        info->budget_seqs = S_max;
        info->items = S->info;
    }
    return S->cfg.check_invariants ? pgd_sched_check(S) : 0;
}

/* ---- stats and checks --------------------------------------------------------------------- */

void pgd_sched_get_stats(const pgd_sched *S, pgd_sched_stats *out) {
    *out = S->st;
    pgd_kvpool_stats ps;
    pgd_kvpool_get_stats(S->pool, &ps);
    out->n_requests = S->n_reqs;
    out->n_running = S->run.n;
    out->n_waiting = S->n_waiting;
    out->n_preempted_waiting = S->n_preempted_waiting;
    out->kv_blocks = ps.n_blocks;
    out->kv_blocks_used = ps.n_used;
    out->kv_blocks_cached = ps.n_cached;
    out->kv_usage = ps.n_blocks ? (double)ps.n_used / ps.n_blocks : 0;
    out->prefix_query_tokens = ps.query_tokens;
    out->prefix_hit_tokens = ps.hit_tokens;
    uint32_t n = S->n_tenants < PGD_STATS_TENANTS_MAX ? S->n_tenants : PGD_STATS_TENANTS_MAX;
    out->n_tenants = n;
    for (uint32_t i = 0; i < n; i++) {
        const tenant *t = S->tenants[i];
        out->tenants[i] = (pgd_sched_tenant_stats){.id = t->id,
                                                   .n_running = t->n_active - t->wait.n,
                                                   .n_waiting = t->wait.n,
                                                   .vtime = t->vtime,
                                                   .prompt_tokens = t->prompt_tokens,
                                                   .generation_tokens = t->generation_tokens,
                                                   .computed_tokens = t->computed_tokens};
    }
}
