/*
 * scheduler/offline.c — fixed sequences run to their end outside the scheduler, and the
 * server's warm-up (see offline.h).
 */
#include "scheduler/offline.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "kvpool/block_table.h"
#include "kvpool/kvpool.h"
#include "scheduler/plan.h"

/* One step of the plan as built: finish (lay out), run, commit. */
static int run_step(pgd_runner *r, pgd_plan *plan) {
    pgd_step_plan *view;
    int rc = pgd_plan_finish(plan, &view);
    if (!rc) rc = pgd_runner_step(r, view);
    if (!rc) rc = pgd_plan_commit(plan);
    return rc;
}

int pgd_offline_run(pgd_runner *r, const pgd_offline_seq *in, uint32_t n, pgd_offline_stats *st) {
    memset(st, 0, sizeof *st);
    const pgd_backend_caps *caps = pgd_runner_caps(r);
    const uint32_t budget = caps->max_tokens;
    pgd_seq **seqs = calloc(n ? n : 1, sizeof *seqs);
    pgd_block_table *bts = calloc(n ? n : 1, sizeof *bts);
    pgd_kvpool *pool = NULL;
    pgd_plan *plan = NULL;
    int rc = PGD_ENOMEM;
    if (!seqs || !bts) goto out;
    if ((rc = pgd_kvpool_create(caps->n_blocks, caps->block_size, false, &pool)) ||
        (rc = pgd_plan_create(budget, &plan)))
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        pgd_block_table_init(&bts[i], pool, 0);
        if ((rc = pgd_seq_create(r, in[i].prompt, in[i].n_prompt, &in[i].params, &seqs[i])))
            goto out;
    }
    /* Prefill: the prompts in order, each step filled up to the budget. */
    double t0 = pgd_now_s();
    for (;;) {
        uint32_t used = 0, k;
        pgd_plan_reset(plan);
        for (uint32_t i = 0; i < n && used < budget; i++) {
            uint32_t done = bts[i].n_tokens, n_prompt = seqs[i]->n_prompt;
            if (done >= n_prompt) continue;
            uint32_t take = n_prompt - done < budget - used ? n_prompt - done : budget - used;
            if ((rc = pgd_plan_add(plan, seqs[i], &bts[i], done, take, false, NULL, &k))) goto out;
            used += take;
        }
        if (!used) break;
        if ((rc = run_step(r, plan))) goto out;
        st->prefill_steps++;
        st->prefill_tokens += used;
    }
    double t1 = pgd_now_s();
    /* Decode: each unfinished sequence one token a step (its first came with its prefill). */
    for (;;) {
        uint32_t used = 0, k;
        pgd_plan_reset(plan);
        for (uint32_t i = 0; i < n && used < budget; i++) {
            if (seqs[i]->finish != PGD_FINISH_NONE) continue;
            if ((rc = pgd_plan_add(plan, seqs[i], &bts[i], bts[i].n_tokens, 1, false, NULL, &k)))
                goto out;
            used++;
        }
        if (!used) break;
        if ((rc = run_step(r, plan))) goto out;
        st->decode_steps++;
        st->decode_tokens += used;
    }
    st->prefill_s = t1 - t0;
    st->decode_s = pgd_now_s() - t1;
    for (uint32_t i = 0; i < n; i++) {
        const pgd_seq *s = seqs[i];
        const uint32_t n_gen = (uint32_t)s->tokens.n - s->n_prompt;
        if (in[i].out) memcpy(in[i].out, s->tokens.ids + s->n_prompt, n_gen * sizeof *in[i].out);
        if (in[i].n_out) *in[i].n_out = n_gen;
    }
    rc = 0;
out:
    if (rc == PGD_ENOBLOCKS)
        pgd_error_set(rc, "the KV cache is too small for these %u sequences at once", n);
    for (uint32_t i = 0; seqs && bts && i < n; i++) {
        pgd_seq_destroy(seqs[i]);
        if (bts[i].pool) pgd_block_table_destroy(&bts[i]);
    }
    free(seqs);
    free(bts);
    pgd_plan_destroy(plan);
    pgd_kvpool_destroy(pool);
    return rc;
}

/* ---- warm-up ------------------------------------------------------------------------------- */

#define WARM_PROMPT 32 /* run 1's prompt: two 16-row query tiles */
#define WARM_SHORT  16 /* run 2's prompts */
#define WARM_OUT    3  /* tokens out: the prefill's, an eager decode step's, a graph capture's */
#define WARM_SEQS   3  /* run 2's sequences */

/* The longest prompt up to `want` tokens of which `n_seqs` sequences, each WARM_OUT tokens out,
 * fit one step, the context and the KV cache together; 0 when not even 2 tokens do. */
static uint32_t fit_prompt(const pgd_backend_caps *caps, uint32_t n_ctx, uint32_t want,
                           uint32_t n_seqs) {
    uint32_t ctx = n_ctx < caps->max_context ? n_ctx : caps->max_context;
    if (caps->max_tokens < n_seqs || (caps->seqs_limit && caps->seqs_limit < n_seqs) ||
        caps->max_logit_rows < n_seqs || ctx < 2 + WARM_OUT || caps->n_blocks < 2)
        return 0;
    uint32_t p = want;
    if (p > ctx - WARM_OUT) p = ctx - WARM_OUT;
    /* the blocks a sequence holds at its end (positions up to prompt + WARM_OUT - 1; the last
     * token sampled is never written), n_seqs of them, from the usable blocks (no null block) */
    const uint64_t bs = caps->block_size, per_seq = (caps->n_blocks - 1) / n_seqs;
    if ((uint64_t)p + WARM_OUT - 1 > per_seq * bs) {
        if (per_seq * bs < 1 + WARM_OUT) return 0;
        p = (uint32_t)(per_seq * bs - (WARM_OUT - 1));
    }
    return p >= 2 ? p : 0;
}

/* count ids drawn from the middle of the vocabulary (away from the control tokens a small
 * vocabulary puts at its ends), one deterministic stream. */
static void fill_prompts(int32_t *ids, uint32_t count, int32_t n_vocab) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    const uint32_t lo = (uint32_t)n_vocab / 8, span = n_vocab >= 2 ? (uint32_t)n_vocab / 2 : 1;
    for (uint32_t i = 0; i < count; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(lo + x % span);
    }
}

static void add_stats(pgd_warmup_stats *st, const pgd_offline_stats *o) {
    st->runs++;
    st->steps += o->prefill_steps + o->decode_steps;
    st->tokens += o->prefill_tokens + o->decode_tokens;
}

int pgd_warmup(pgd_runner *r, pgd_warmup_stats *st) {
    memset(st, 0, sizeof *st);
    const pgd_backend_caps *caps = pgd_runner_caps(r);
    const pgd_model_info *info = pgd_runner_info(r);
    const double t0 = pgd_now_s();
    const uint32_t p1 = fit_prompt(caps, info->n_ctx, WARM_PROMPT, 1),
                   p2 = fit_prompt(caps, info->n_ctx, WARM_SHORT, WARM_SEQS);
    if (!p1) return 0;
    int32_t ids[WARM_PROMPT + WARM_SEQS * WARM_SHORT];
    fill_prompts(ids, PGD_ARRAY_LEN(ids), info->n_vocab);
    pgd_offline_seq s[WARM_SEQS] = {0};
    for (int i = 0; i < WARM_SEQS; i++) {
        pgd_seq_params_default(&s[i].params);
        s[i].params.max_tokens = WARM_OUT;
        s[i].params.ignore_eos = true;
        s[i].params.sampling.temperature = 0;
        s[i].params.sampling.seed = 1 + (uint64_t)i;
    }
    pgd_offline_stats o;
    s[0].prompt = ids;
    s[0].n_prompt = p1;
    int rc = pgd_offline_run(r, s, 1, &o);
    if (rc) return rc;
    add_stats(st, &o);
    if (p2) {
        for (int i = 0; i < WARM_SEQS; i++) {
            s[i].prompt = ids + WARM_PROMPT + i * WARM_SHORT;
            s[i].n_prompt = p2;
        }
        pgd_sampling_params *sp = &s[0].params.sampling;
        sp->temperature = 1.0f, sp->top_k = 50, sp->top_p = 0.9f, sp->min_p = 0.05f;
        s[1].params.sampling.logprobs = true;
        s[1].params.sampling.top_logprobs = 5;
        s[2].params.sampling.repetition_penalty = 1.1f;
        if ((rc = pgd_offline_run(r, s, WARM_SEQS, &o))) return rc;
        add_stats(st, &o);
    }
    st->seconds = pgd_now_s() - t0;
    return 0;
}
