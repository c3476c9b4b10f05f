/*
 * tests/model/test_batching.c — paging and batching are right: one batch holding several
 * sequences of different lengths, some mid-prompt and some decoding, gives the same logits for
 * every position as each sequence run alone (the issue allows relative 1e-5; the design promises
 * bit-identical rows, which is what this checks first). Both activation modes (f32, int8) and
 * both KV cache dtypes (f32, f16).
 *
 * The batches are planned and allocated with the scheduler's plan (scheduler/plan.h) over block
 * tables of the test's own, and computed by the runner.
 *
 * Needs the default model: PAGODA_MODEL=path (exit 77 = skipped when unset). Label `model`.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/load.h"
#include "kvpool/block_table.h"
#include "kvpool/kvpool.h"
#include "scheduler/plan.h"
#include "testutil.h"

#define N_SEQ 4
#define N_GEN 6
static const uint32_t k_prompt_len[N_SEQ] = {5, 23, 41, 70};

static pgd_model_info *g_info;
static pgd_runner *g_runner;
static pgd_kvpool *g_pool;
static pgd_plan *g_plan;

/* A sequence and the block table of its computed positions. */
typedef struct tseq {
    pgd_seq *s;
    pgd_block_table bt;
} tseq;

typedef struct {
    float *logits; /* [len][V] logits of every position */
    int32_t *tokens;
    uint32_t len;
} record;

static void make_prompt(uint32_t seq, int32_t *out, uint32_t n) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (seq + 1);
    for (uint32_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[i] = (int32_t)(17 + x % 40000); /* skip control tokens 0..16 */
    }
}

static int new_seq(uint32_t i, tseq *t) {
    int32_t prompt[128];
    make_prompt(i, prompt, k_prompt_len[i]);
    pgd_seq_params p;
    pgd_seq_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = N_GEN;
    p.ignore_eos = true;
    pgd_block_table_init(&t->bt, g_pool, 0);
    return pgd_seq_create(g_runner, prompt, k_prompt_len[i], &p, &t->s);
}

static void free_seq(tseq *t) {
    pgd_seq_destroy(t->s);
    pgd_block_table_destroy(&t->bt);
    t->s = NULL;
}

static uint32_t pending(const tseq *t) {
    return (uint32_t)t->s->tokens.n - t->bt.n_tokens;
}

/* Plan (allocate), run and commit the items added to g_plan. */
static int run_plan(void) {
    pgd_step_plan *view;
    int rc = pgd_plan_finish(g_plan, &view);
    if (!rc) rc = pgd_runner_step(g_runner, view);
    if (!rc) rc = pgd_plan_commit(g_plan);
    return rc;
}

static void save_rows(record *r, const pgd_step_item *it) {
    uint32_t V = g_info->n_vocab;
    for (uint32_t j = 0; j < it->n_tokens; j++)
        memcpy(r->logits + (uint64_t)(it->start + j) * V,
               pgd_runner_logits(g_runner, it->logits_row + j), V * sizeof(float));
    r->len = it->start + it->n_tokens;
}

/* Run sequence i alone, prompt in chunks of `chunk`, then decode to the end. */
static int run_alone(uint32_t i, uint32_t chunk, record *r) {
    tseq t;
    if (new_seq(i, &t)) return -1;
    while (t.s->finish == PGD_FINISH_NONE) {
        uint32_t n = pending(&t) < chunk ? pending(&t) : chunk, k;
        pgd_plan_reset(g_plan);
        if (pgd_plan_add(g_plan, t.s, &t.bt, t.bt.n_tokens, n, true, NULL, &k) || run_plan())
            return -1;
        save_rows(r, pgd_plan_item(g_plan, 0));
    }
    r->tokens = malloc(t.s->tokens.n * sizeof(int32_t));
    memcpy(r->tokens, t.s->tokens.ids, t.s->tokens.n * sizeof(int32_t));
    free_seq(&t);
    return 0;
}

static void test_mixed_batch_equals_alone(void) {
    uint32_t V = g_info->n_vocab, cap = 128 + N_GEN;
    record alone[N_SEQ], mixed[N_SEQ];
    for (uint32_t i = 0; i < N_SEQ; i++) {
        alone[i] = (record){calloc((uint64_t)cap * V, sizeof(float)), NULL, 0};
        mixed[i] = (record){calloc((uint64_t)cap * V, sizeof(float)), NULL, 0};
        REQUIRE(run_alone(i, 64, &alone[i]) == 0);
    }
    /* Mixed: staggered admissions and different chunk sizes, so every step holds a mix of
     * prompt chunks and single decode tokens. Sequence i joins at step i. */
    tseq t[N_SEQ] = {0};
    static const uint32_t chunk[N_SEQ] = {3, 8, 13, 9};
    int steps = 0, saw_mix = 0;
    for (;;) {
        uint32_t n = 0, n_decode = 0, n_prefill = 0, k;
        pgd_plan_reset(g_plan);
        for (uint32_t i = 0; i < N_SEQ; i++) {
            if (!t[i].s && (uint32_t)steps >= i) REQUIRE(new_seq(i, &t[i]) == 0);
            if (!t[i].s || t[i].s->finish != PGD_FINISH_NONE) continue;
            uint32_t p = pending(&t[i]);
            uint32_t take = p < chunk[i] ? p : chunk[i];
            if (t[i].bt.n_tokens >= t[i].s->n_prompt)
                n_decode++;
            else
                n_prefill++;
            REQUIRE(pgd_plan_add(g_plan, t[i].s, &t[i].bt, t[i].bt.n_tokens, take, true, &t[i],
                                 &k) == 0);
            n++;
        }
        if (!n) break;
        saw_mix += n_decode > 0 && n_prefill > 0;
        REQUIRE(run_plan() == 0);
        for (k = 0; k < n; k++) {
            const tseq *owner = pgd_plan_owner(g_plan, k);
            save_rows(&mixed[owner - t], pgd_plan_item(g_plan, k));
        }
        steps++;
    }
    CHECK(saw_mix > 0);
    for (uint32_t i = 0; i < N_SEQ; i++) {
        CHECK_EQ_INT(mixed[i].len, alone[i].len);
        CHECK_EQ_INT(t[i].s->tokens.n, k_prompt_len[i] + N_GEN);
        CHECK(memcmp(t[i].s->tokens.ids, alone[i].tokens, t[i].s->tokens.n * sizeof(int32_t)) == 0);
        double worst = 0;
        uint64_t n_diff = 0;
        for (uint32_t p = 0; p < alone[i].len; p++) {
            const float *a = alone[i].logits + (uint64_t)p * V,
                        *b = mixed[i].logits + (uint64_t)p * V;
            double d2 = 0, r2 = 0;
            for (uint32_t v = 0; v < V; v++) {
                d2 += ((double)a[v] - b[v]) * ((double)a[v] - b[v]);
                r2 += (double)a[v] * a[v];
                n_diff += a[v] != b[v];
            }
            if (sqrt(d2 / r2) > worst) worst = sqrt(d2 / r2);
        }
        fprintf(stderr,
                "  seq %u (%u prompt tokens): %u positions, worst relative L2 %.3g, %llu "
                "differing floats\n",
                i, k_prompt_len[i], alone[i].len, worst, (unsigned long long)n_diff);
        CHECK(worst <= 1e-5);
        CHECK_EQ_INT(n_diff, 0);
        free_seq(&t[i]);
        free(alone[i].logits);
        free(mixed[i].logits);
        free(alone[i].tokens);
        free(mixed[i].tokens);
    }
    /* Every block is back (prefix-cached blocks count as free: evictable). */
    CHECK_EQ_INT(pgd_kvpool_num_free(g_pool), pgd_kvpool_num_blocks(g_pool) - 1);
    CHECK(pgd_kvpool_check(g_pool) == 0);
}

int main(void) {
    const char *path = getenv("PAGODA_MODEL");
    if (!path || !*path) {
        fprintf(stderr, "PAGODA_MODEL not set: skipped\n");
        return 77;
    }
    pgd_load_options o;
    pgd_load_options_default(&o);
    o.model_path = path;
    o.runner.backend.kv_blocks = 64;
    o.runner.backend.block_size = 16;
    o.runner.backend.max_tokens = 64;
    /* both activation modes (int8 runs on packed weights where the CPU has them, one kernel
     * for 1 token and for many) and both KV cache dtypes */
    static const struct {
        bool q8;
        pgd_kv_dtype kv;
    } modes[] = {{false, PGD_KV_F32}, {false, PGD_KV_F16}, {true, PGD_KV_F16}};
    for (size_t mi = 0; mi < PGD_ARRAY_LEN(modes); mi++) {
        o.runner.device.cpu.act_q8 = modes[mi].q8;
        o.runner.backend.kv_dtype = modes[mi].kv;
        /* caching off: the alone runs must not feed the mixed run's prefixes */
        if (pgd_load(&o, &g_info, &g_runner) ||
            pgd_kvpool_create(pgd_runner_caps(g_runner)->n_blocks, 16, false, &g_pool) ||
            pgd_plan_create(64, &g_plan)) {
            fprintf(stderr, "cannot open %s: %s\n", path, pgd_error_detail());
            return 1;
        }
        fprintf(stderr, "activations: %s, KV cache: %s\n", modes[mi].q8 ? "int8" : "f32",
                pgd_kv_dtype_name(modes[mi].kv));
        RUN(test_mixed_batch_equals_alone);
        pgd_plan_destroy(g_plan);
        pgd_kvpool_destroy(g_pool);
        pgd_runner_destroy(g_runner);
        pgd_model_info_close(g_info);
    }
    return test_summary();
}
