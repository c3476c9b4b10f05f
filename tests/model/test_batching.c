/*
 * tests/model/test_batching.c — paging and batching are right: one batch holding several
 * sequences of different lengths, some mid-prompt and some decoding, gives the same logits for
 * every position as each sequence run alone (the issue allows relative 1e-5; the design promises
 * bit-identical rows, which is what this checks first). Both activation modes (f32, int8) and
 * both KV cache dtypes (f32, f16).
 *
 * Needs the default model: PAGODA_MODEL=path (exit 77 = skipped when unset). Label `model`.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/llm.h"
#include "testutil.h"

#define N_SEQ 4
#define N_GEN 6
static const uint32_t k_prompt_len[N_SEQ] = {5, 23, 41, 70};

static pgd_llm *g_llm;

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

static pgd_seq *new_seq(uint32_t i) {
    int32_t prompt[128];
    make_prompt(i, prompt, k_prompt_len[i]);
    pgd_seq_params p;
    pgd_seq_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = N_GEN;
    p.ignore_eos = true;
    pgd_seq *s = NULL;
    if (pgd_seq_create(g_llm, prompt, k_prompt_len[i], &p, &s)) return NULL;
    return s;
}

static void save_rows(record *r, const pgd_seq *s, const pgd_step_item *it) {
    uint32_t V = g_llm->n_vocab, first = s->n_computed - it->n_tokens;
    for (uint32_t j = 0; j < it->n_tokens; j++)
        memcpy(r->logits + (uint64_t)(first + j) * V,
               g_llm->logits + (uint64_t)(it->logits_row + j) * V, V * sizeof(float));
    r->len = s->n_computed;
}

/* Run sequence i alone, prompt in chunks of `chunk`, then decode to the end. */
static int run_alone(uint32_t i, uint32_t chunk, record *r) {
    pgd_seq *s = new_seq(i);
    if (!s) return -1;
    while (s->finish == PGD_FINISH_NONE) {
        uint32_t n = pgd_seq_pending(s) < chunk ? pgd_seq_pending(s) : chunk;
        pgd_step_item it = {.seq = s, .n_tokens = n, .all_logits = true};
        if (pgd_llm_step(g_llm, &it, 1)) return -1;
        save_rows(r, s, &it);
    }
    r->tokens = malloc(s->tokens.n * sizeof(int32_t));
    memcpy(r->tokens, s->tokens.ids, s->tokens.n * sizeof(int32_t));
    pgd_seq_destroy(s);
    return 0;
}

static void test_mixed_batch_equals_alone(void) {
    uint32_t V = g_llm->n_vocab, cap = 128 + N_GEN;
    record alone[N_SEQ], mixed[N_SEQ];
    for (uint32_t i = 0; i < N_SEQ; i++) {
        alone[i] = (record){calloc((uint64_t)cap * V, sizeof(float)), NULL, 0};
        mixed[i] = (record){calloc((uint64_t)cap * V, sizeof(float)), NULL, 0};
        REQUIRE(run_alone(i, 64, &alone[i]) == 0);
    }
    /* Mixed: staggered admissions and different chunk sizes, so every step holds a mix of
     * prompt chunks and single decode tokens. Sequence i joins at step i. */
    pgd_seq *s[N_SEQ] = {0};
    static const uint32_t chunk[N_SEQ] = {3, 8, 13, 9};
    int steps = 0, saw_mix = 0;
    for (;;) {
        pgd_step_item items[N_SEQ];
        uint32_t n = 0, n_decode = 0, n_prefill = 0;
        for (uint32_t i = 0; i < N_SEQ; i++) {
            if (!s[i] && (uint32_t)steps >= i) REQUIRE((s[i] = new_seq(i)) != NULL);
            if (!s[i] || s[i]->finish != PGD_FINISH_NONE) continue;
            uint32_t p = pgd_seq_pending(s[i]);
            uint32_t take = p < chunk[i] ? p : chunk[i];
            items[n++] = (pgd_step_item){.seq = s[i], .n_tokens = take, .all_logits = true};
            if (s[i]->n_computed >= s[i]->n_prompt)
                n_decode++;
            else
                n_prefill++;
        }
        if (!n) break;
        saw_mix += n_decode > 0 && n_prefill > 0;
        REQUIRE(pgd_llm_step(g_llm, items, n) == 0);
        for (uint32_t k = 0; k < n; k++) {
            uint32_t i = 0;
            while (s[i] != items[k].seq) i++;
            save_rows(&mixed[i], s[i], &items[k]);
        }
        steps++;
    }
    CHECK(saw_mix > 0);
    for (uint32_t i = 0; i < N_SEQ; i++) {
        CHECK_EQ_INT(mixed[i].len, alone[i].len);
        CHECK_EQ_INT(s[i]->tokens.n, k_prompt_len[i] + N_GEN);
        CHECK(memcmp(s[i]->tokens.ids, alone[i].tokens, s[i]->tokens.n * sizeof(int32_t)) == 0);
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
        pgd_seq_destroy(s[i]);
        free(alone[i].logits);
        free(mixed[i].logits);
        free(alone[i].tokens);
        free(mixed[i].tokens);
    }
    /* Every block is back (prefix-cached blocks count as free: evictable). */
    CHECK_EQ_INT(pgd_kvpool_num_free(g_llm->pool), pgd_kvpool_num_blocks(g_llm->pool) - 1);
    CHECK(pgd_kvpool_check(g_llm->pool) == 0);
}

int main(void) {
    const char *path = getenv("PAGODA_MODEL");
    if (!path || !*path) {
        fprintf(stderr, "PAGODA_MODEL not set: skipped\n");
        return 77;
    }
    pgd_llm_options o;
    pgd_llm_options_default(&o);
    o.model_path = path;
    o.kv_blocks = 64;
    o.block_size = 16;
    o.max_batch_tokens = 64;
    o.prefix_caching = false; /* the alone runs must not feed the mixed run's prefixes */
    /* both activation modes (int8 runs on packed weights where the CPU has them, one kernel
     * for 1 token and for many) and both KV cache dtypes */
    static const struct {
        bool q8;
        pgd_kv_dtype kv;
    } modes[] = {{false, PGD_KV_F32}, {false, PGD_KV_F16}, {true, PGD_KV_F16}};
    for (size_t mi = 0; mi < PGD_ARRAY_LEN(modes); mi++) {
        o.act_q8 = modes[mi].q8;
        o.kv_dtype = modes[mi].kv;
        if (pgd_llm_open(&o, &g_llm)) {
            fprintf(stderr, "cannot open %s: %s\n", path, pgd_error_detail());
            return 1;
        }
        fprintf(stderr, "activations: %s, KV cache: %s\n", modes[mi].q8 ? "int8" : "f32",
                pgd_kv_dtype_name(modes[mi].kv));
        RUN(test_mixed_batch_equals_alone);
        pgd_llm_close(g_llm);
    }
    return test_summary();
}
