/*
 * tests/unit/test_scheduler_embed.c — embedding requests (pgd_request.pooling) through the
 * scheduler core (scheduler/sched.h) step by step over the fake backend, and once through the
 * worker thread (scheduler/worker.h).
 *
 * The fake model's hidden state at position p is pgd_fake_hidden(h(p), i), h the context hash
 * (tests/support/fake_backend.h), so every expected embedding is computed here from the prompt
 * ids alone: LAST is the last position's state; MEAN sums every position's state in position
 * order in double, divides by n_prompt and casts to float. Vectors are compared bit for bit.
 * Every step runs the scheduler's invariant checker and the fake backend's batch checks
 * (verify: whole-context hashes of every logit and hidden row); the recorder checks the event
 * contract; generation requests run alongside and must still match pgd_fake_greedy.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "scheduler/sched.h"
#include "scheduler/worker.h"
#include "support/fake_backend.h"
#include "test_scheduler_util.h"
#include "testutil.h"

/* What the events of one request carried about embeddings. */
typedef struct emb_got {
    int n_finish;           /* FINISH events */
    int n_with;             /* ... carrying an embedding */
    int n_stray;            /* other events carrying one */
    uint32_t n_embd;        /* of the last one carrying it */
    float v[PGD_FAKE_EMBD]; /* its first PGD_FAKE_EMBD floats (copied: the event owns them) */
} emb_got;

typedef struct emb_log {
    emb_got *g; /* indexed by request id */
    size_t cap;
} emb_log;

static emb_got *got_of(emb_log *l, uint64_t id) {
    if (id >= l->cap) {
        size_t cap = l->cap ? l->cap : 64;
        while (cap <= id) cap *= 2;
        emb_got *p = realloc(l->g, cap * sizeof *p);
        if (!p) abort();
        memset(p + l->cap, 0, (cap - l->cap) * sizeof *p);
        l->g = p;
        l->cap = cap;
    }
    return &l->g[id];
}

static void emb_note(emb_log *l, const pgd_event *ev) {
    emb_got *g = got_of(l, ev->id);
    if (ev->kind != PGD_EVENT_FINISH) {
        g->n_stray += ev->embedding != NULL;
        return;
    }
    g->n_finish++;
    if (!ev->embedding) return;
    g->n_with++;
    g->n_embd = ev->n_embd;
    uint32_t n = ev->n_embd < PGD_FAKE_EMBD ? ev->n_embd : PGD_FAKE_EMBD;
    memcpy(g->v, ev->embedding, n * sizeof *g->v);
}

typedef struct env {
    pgd_model_info *info;
    pgd_runner *runner;
    pgd_sched *S;
    recorder rec;
    emb_log emb;
    uint32_t B, S_max;
} env;

static void on_event(const pgd_event *ev, void *ud) {
    env *e = ud;
    rec_event(ev, &e->rec);
    emb_note(&e->emb, ev);
}

static int env_open_policy(env *e, const pgd_fake_config *fc, uint32_t S_max, bool caching,
                           pgd_sched_policy policy) {
    memset(e, 0, sizeof *e);
    if (pgd_fake_create(fc, &e->info, &e->runner)) return -1;
    pgd_sched_config c = checked_config(fc->max_tokens, S_max, 0);
    c.prefix_caching = caching;
    c.policy = policy;
    e->B = fc->max_tokens;
    e->S_max = S_max;
    return pgd_sched_create(e->runner, &c, on_event, e, &e->S);
}

static int env_open_cfg(env *e, const pgd_fake_config *fc, uint32_t S_max, bool caching) {
    return env_open_policy(e, fc, S_max, caching, PGD_SCHED_FAIR);
}

static int env_open(env *e, uint32_t n_blocks, uint32_t B, uint32_t S_max, bool caching) {
    pgd_fake_config fc = {
        .n_blocks = n_blocks, .block_size = 16, .max_tokens = B, .verify = true, .record = true};
    return env_open_cfg(e, &fc, S_max, caching);
}

/* The fake backend's own log: no forward exceeded the budgets or asked more hidden rows than
 * it has tokens. */
static int log_violations(const env *e) {
    size_t n;
    const pgd_fake_batch *log = pgd_fake_log(pgd_runner_backend(e->runner), &n);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad +=
            log[i].n_tokens > e->B || log[i].n_seqs > e->S_max || log[i].n_hidden > log[i].n_tokens;
    return bad;
}

/* Hidden rows asked over the whole log. */
static uint64_t log_hidden_rows(const env *e) {
    size_t n;
    const pgd_fake_batch *log = pgd_fake_log(pgd_runner_backend(e->runner), &n);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += log[i].n_hidden;
    return sum;
}

static void env_close(env *e) {
    CHECK_EQ_INT(log_violations(e), 0);
    if (e->rec.violations) fprintf(stderr, "  event contract: %s\n", e->rec.why);
    CHECK_EQ_INT(e->rec.violations, 0);
    pgd_sched_destroy(e->S);
    pgd_runner_destroy(e->runner);
    pgd_model_info_close(e->info);
    rec_free(&e->rec);
    free(e->emb.g);
}

static int step(env *e, pgd_sched_step_info *info) {
    return sched_step(e->S, &e->rec, info);
}

static int run_idle(env *e, int max_steps) {
    return sched_run_idle(e->S, &e->rec, max_steps);
}

/* The expected embedding of prompt[0..n), from token ids alone (see the file comment). */
static void expect_embedding(const int32_t *prompt, uint32_t n, pgd_pooling pool,
                             float out[PGD_FAKE_EMBD]) {
    double sum[PGD_FAKE_EMBD] = {0};
    uint64_t h = pgd_fake_hash(NULL, 0);
    for (uint32_t p = 0; p < n; p++) {
        h = pgd_fake_chain(h, prompt[p], p);
        for (uint32_t i = 0; i < PGD_FAKE_EMBD; i++) sum[i] += pgd_fake_hidden(h, i);
    }
    for (uint32_t i = 0; i < PGD_FAKE_EMBD; i++)
        out[i] = pool == PGD_POOL_LAST ? pgd_fake_hidden(h, i) : (float)(sum[i] / n);
}

/* An embedding request over prompt[0..n). */
static pgd_request embed_req(const int32_t *prompt, uint32_t n, pgd_pooling pool) {
    pgd_request r;
    pgd_request_init(&r);
    r.prompt = prompt;
    r.n_prompt = n;
    r.pooling = pool;
    return r;
}

/* The event contract of embedding request id over prompt[0..n): exactly one event, a FINISH
 * (stop, done, choice 0, n_output 0, no tokens, usage prompt n / completion 0) carrying
 * PGD_FAKE_EMBD floats equal bit for bit to the expectation. Mismatches, described. */
static int embedding_mismatches(const recorder *rc, emb_log *l, uint64_t id, const int32_t *prompt,
                                uint32_t n, pgd_pooling pool) {
    if (id >= rc->cap) {
        fprintf(stderr, "  request %llu: no event\n", (unsigned long long)id);
        return 1;
    }
    const rec_req *q = &rc->r[id];
    const emb_got *g = got_of(l, id);
    float want[PGD_FAKE_EMBD];
    expect_embedding(prompt, n, pool, want);
    int bad = 0;
#define EMB_EXPECT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  request %llu (%s, %u tokens): %s\n", (unsigned long long)id,        \
                    pgd_pooling_str(pool), n, #cond);                                              \
            bad++;                                                                                 \
        }                                                                                          \
    } while (0)
    EMB_EXPECT(q->n_events == 1);
    EMB_EXPECT(q->n_done == 1 && q->n_error == 0);
    EMB_EXPECT(q->ch[0].n_finish == 1 && q->ch[0].reason == PGD_REASON_STOP);
    EMB_EXPECT(q->ch[0].n_output == 0 && q->ch[0].n == 0); /* no TOKEN event */
    EMB_EXPECT(q->ch[1].n_finish == 0 && q->n_plp == 0);
    EMB_EXPECT(q->usage.prompt_tokens == n && q->usage.completion_tokens == 0);
    EMB_EXPECT(g->n_finish == 1 && g->n_with == 1 && g->n_stray == 0);
    EMB_EXPECT(g->n_embd == PGD_FAKE_EMBD);
    EMB_EXPECT(memcmp(g->v, want, sizeof want) == 0);
#undef EMB_EXPECT
    return bad;
}

/* Whether generation request id produced exactly the greedy continuation. */
static bool greedy_output_ok(const recorder *rc, uint64_t id, const int32_t *prompt, uint32_t n,
                             uint32_t max_tokens) {
    int32_t want[256];
    if (id >= rc->cap || max_tokens > 256) return false;
    uint32_t m = pgd_fake_greedy(prompt, n, max_tokens, 0, true, want);
    const rec_req *q = &rc->r[id];
    return same_tokens(q->ch[0].tok, q->ch[0].n, want, m) && q->ch[0].n_finish == 1 &&
           q->ch[0].reason == PGD_REASON_LENGTH && q->n_done == 1;
}

/* ---- the fake model's hidden states ------------------------------------------------------- */

/* The expectation itself discriminates: LAST differs from MEAN and from the first row's state,
 * one token more changes both, and the values lie in [-1, 1). */
static void test_fake_hidden_states(void) {
    int32_t p[40];
    make_tokens(1, p, 40, 0, 256);
    float last[PGD_FAKE_EMBD], mean[PGD_FAKE_EMBD], last39[PGD_FAKE_EMBD], mean39[PGD_FAKE_EMBD];
    float first[PGD_FAKE_EMBD];
    expect_embedding(p, 40, PGD_POOL_LAST, last);
    expect_embedding(p, 40, PGD_POOL_MEAN, mean);
    expect_embedding(p, 39, PGD_POOL_LAST, last39);
    expect_embedding(p, 39, PGD_POOL_MEAN, mean39);
    expect_embedding(p, 1, PGD_POOL_LAST, first);
    CHECK(memcmp(last, mean, sizeof last) != 0);
    CHECK(memcmp(last, first, sizeof last) != 0);
    CHECK(memcmp(last, last39, sizeof last) != 0);
    CHECK(memcmp(mean, mean39, sizeof mean) != 0);
    uint64_t h = pgd_fake_hash(p, 40);
    for (uint32_t i = 0; i < PGD_FAKE_EMBD; i++) {
        CHECK(last[i] == pgd_fake_hidden(h, i));
        CHECK(last[i] >= -1.0f && last[i] < 1.0f);
        CHECK(pgd_fake_hidden(h, i) == pgd_fake_hidden(h, i));
    }
    CHECK(pgd_fake_hidden(h, 0) != pgd_fake_hidden(h, 1));
    /* one prompt of one token: LAST == MEAN */
    float m1[PGD_FAKE_EMBD];
    expect_embedding(p, 1, PGD_POOL_MEAN, m1);
    CHECK(memcmp(m1, first, sizeof m1) == 0);
}

/* ---- basic -------------------------------------------------------------------------------- */

/* Short prompts (one step each), both poolings, one at a time and all together; the fake log
 * shows how many hidden rows were asked: one for LAST, every position for MEAN. */
static void test_embed_short_prompts(void) {
    static const uint32_t lens[] = {1, 2, 5, 15, 16, 17, 40};
    enum { NL = sizeof lens / sizeof lens[0] };
    env e;
    REQUIRE(env_open(&e, 64, 64, 8, false) == 0);
    int32_t p[NL][40];
    uint64_t id = 1;
    for (uint32_t k = 0; k < NL; k++) {
        make_tokens(10 + k, p[k], lens[k], 0, 256);
        for (int pool = PGD_POOL_LAST; pool <= PGD_POOL_MEAN; pool++, id++) {
            pgd_fake_log_clear(pgd_runner_backend(e.runner));
            pgd_request r = embed_req(p[k], lens[k], (pgd_pooling)pool);
            CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
            CHECK_EQ_INT(run_idle(&e, 10), 1);
            CHECK_EQ_INT(log_hidden_rows(&e), pool == PGD_POOL_LAST ? 1 : lens[k]);
            CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, id, p[k], lens[k], (pgd_pooling)pool),
                         0);
            CHECK(sched_pool_all_free(e.S));
        }
    }
    /* all of them in one step */
    pgd_fake_log_clear(pgd_runner_backend(e.runner));
    uint64_t first = id;
    for (uint32_t k = 0; k < NL && k < 4; k++)
        for (int pool = PGD_POOL_LAST; pool <= PGD_POOL_MEAN; pool++, id++) {
            pgd_request r = embed_req(p[k], lens[k], (pgd_pooling)pool);
            CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
        }
    CHECK_EQ_INT(run_idle(&e, 10), 1);
    for (uint64_t i = first; i < id; i++) {
        uint32_t k = (uint32_t)(i - first) / 2;
        pgd_pooling pool = (i - first) % 2 ? PGD_POOL_MEAN : PGD_POOL_LAST;
        CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, i, p[k], lens[k], pool), 0);
    }
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    CHECK_EQ_INT(st.n_finished, id - 1);
    CHECK_EQ_INT(st.generation_tokens, 0);
    CHECK_EQ_INT(st.n_running + st.n_waiting + st.n_requests, 0);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* Prompts longer than the step (16 tokens): computed over many steps, the chunks' rows pooled
 * in order; LAST still asks one hidden row in all. */
static void test_embed_chunked_prompts(void) {
    env e;
    REQUIRE(env_open(&e, 64, 16, 4, false) == 0);
    static const uint32_t lens[] = {17, 32, 100, 203};
    int32_t p[4][203];
    uint64_t id = 1;
    for (uint32_t k = 0; k < 4; k++) {
        make_tokens(20 + k, p[k], lens[k], 0, 256);
        for (int pool = PGD_POOL_LAST; pool <= PGD_POOL_MEAN; pool++, id++) {
            pgd_fake_log_clear(pgd_runner_backend(e.runner));
            pgd_request r = embed_req(p[k], lens[k], (pgd_pooling)pool);
            CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
            int steps = run_idle(&e, 100);
            /* chunked: several forwards of at most 16 tokens that add up to the prompt */
            size_t n_log;
            const pgd_fake_batch *log = pgd_fake_log(pgd_runner_backend(e.runner), &n_log);
            uint32_t sum = 0;
            for (size_t z = 0; z < n_log; z++) sum += log[z].n_tokens;
            CHECK_EQ_INT(n_log, steps);
            CHECK(steps >= (int)(lens[k] + 15) / 16 && steps > 1);
            CHECK_EQ_INT(sum, lens[k]);
            CHECK_EQ_INT(log_hidden_rows(&e), pool == PGD_POOL_LAST ? 1 : lens[k]);
            CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, id, p[k], lens[k], (pgd_pooling)pool),
                         0);
        }
    }
    /* the eight together, chunks of several prompts sharing steps */
    uint64_t first = id;
    for (uint32_t k = 0; k < 4; k++)
        for (int pool = PGD_POOL_LAST; pool <= PGD_POOL_MEAN; pool++, id++) {
            pgd_request r = embed_req(p[k], lens[k], (pgd_pooling)pool);
            CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
        }
    CHECK(run_idle(&e, 1000) > 0);
    for (uint64_t i = first; i < id; i++) {
        uint32_t k = (uint32_t)(i - first) / 2;
        pgd_pooling pool = (i - first) % 2 ? PGD_POOL_MEAN : PGD_POOL_LAST;
        CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, i, p[k], lens[k], pool), 0);
    }
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* Many embeddings of both kinds mixed with generations of two tenants (submitted interleaved,
 * and more while they run): every vector and every generated token as expected. */
static void test_embed_mixed_with_generation(void) {
    enum { N = 48, MAXLEN = 150 };
    env e;
    REQUIRE(env_open(&e, 512, 48, 8, true) == 0);
    static int32_t p[N][MAXLEN];
    uint32_t len[N];
    for (uint32_t i = 0; i < N; i++) {
        len[i] = 1 + (i * 37) % MAXLEN;
        make_tokens(100 + i, p[i], len[i], 0, 256);
    }
    /* i % 3: 0 generation, 1 LAST, 2 MEAN; the second half arrives after a few steps */
    for (uint32_t i = 0; i < N; i++) {
        if (i == N / 2)
            for (int s = 0; s < 5; s++) CHECK_EQ_INT(step(&e, NULL), 0);
        pgd_request r = i % 3 == 0
                            ? greedy_req(p[i], len[i], 20 + i % 17)
                            : embed_req(p[i], len[i], i % 3 == 1 ? PGD_POOL_LAST : PGD_POOL_MEAN);
        r.tenant = (i / 2) % 2; /* two tenants, each with both kinds */
        CHECK_EQ_INT(pgd_sched_submit(e.S, i + 1, &r), 0);
    }
    CHECK(run_idle(&e, 5000) > 0);
    /* steps that pooled rows and sampled tokens together */
    size_t n_log;
    const pgd_fake_batch *log = pgd_fake_log(pgd_runner_backend(e.runner), &n_log);
    int both = 0;
    for (size_t z = 0; z < n_log; z++) both += log[z].n_hidden > 0 && log[z].n_logits > 0;
    CHECK(both > 5);
    for (uint32_t i = 0; i < N; i++) {
        if (i % 3 == 0) {
            CHECK(greedy_output_ok(&e.rec, i + 1, p[i], len[i], 20 + i % 17));
            CHECK(got_of(&e.emb, i + 1)->n_with == 0);
        } else {
            pgd_pooling pool = i % 3 == 1 ? PGD_POOL_LAST : PGD_POOL_MEAN;
            CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, i + 1, p[i], len[i], pool), 0);
        }
    }
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    CHECK_EQ_INT(st.n_finished, N);
    CHECK_EQ_INT(e.rec.n_done, N);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- prefix cache ------------------------------------------------------------------------- */

/* LAST may take a prefix-cache hit (the same vector, cached_tokens > 0); MEAN never does (every
 * row is pooled), though its own blocks enter the cache for the others. */
static void test_embed_prefix_cache(void) {
    env e;
    REQUIRE(env_open(&e, 64, 64, 8, true) == 0);
    int32_t p[100], q[120];
    make_tokens(31, p, 100, 0, 256);
    memcpy(q, p, sizeof p);
    make_tokens(32, q + 100, 20, 0, 256);
    pgd_sched_stats s0, s1, s2, s3;
    pgd_request r = embed_req(p, 100, PGD_POOL_LAST);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    pgd_sched_get_stats(e.S, &s0);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0); /* the same again */
    CHECK(run_idle(&e, 100) > 0);
    pgd_sched_get_stats(e.S, &s1);
    CHECK_EQ_INT(rec_get(&e.rec, 1)->usage.cached_tokens, 0);
    CHECK_EQ_INT(rec_get(&e.rec, 2)->usage.cached_tokens, 96);
    CHECK_EQ_INT(s1.prompt_computed_tokens - s0.prompt_computed_tokens, 4);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 1, p, 100, PGD_POOL_LAST), 0);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 2, p, 100, PGD_POOL_LAST), 0);
    CHECK(memcmp(got_of(&e.emb, 1)->v, got_of(&e.emb, 2)->v, sizeof got_of(&e.emb, 1)->v) == 0);
    /* MEAN over the cached prompt and over a longer one sharing it: computed whole */
    r = embed_req(p, 100, PGD_POOL_MEAN);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    r = embed_req(q, 120, PGD_POOL_MEAN);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 4, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    pgd_sched_get_stats(e.S, &s2);
    CHECK_EQ_INT(rec_get(&e.rec, 3)->usage.cached_tokens, 0);
    CHECK_EQ_INT(rec_get(&e.rec, 4)->usage.cached_tokens, 0);
    CHECK_EQ_INT(s2.prompt_computed_tokens - s1.prompt_computed_tokens, 220);
    CHECK_EQ_INT(s2.prefix_hit_tokens, s1.prefix_hit_tokens);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 3, p, 100, PGD_POOL_MEAN), 0);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 4, q, 120, PGD_POOL_MEAN), 0);
    /* a LAST and a generation over the longer prompt hit what MEAN left in the cache */
    r = embed_req(q, 120, PGD_POOL_LAST);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 5, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    r = greedy_req(q, 120, 10);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 6, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    pgd_sched_get_stats(e.S, &s3);
    CHECK_EQ_INT(rec_get(&e.rec, 5)->usage.cached_tokens, 112);
    CHECK_EQ_INT(rec_get(&e.rec, 6)->usage.cached_tokens, 112);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 5, q, 120, PGD_POOL_LAST), 0);
    CHECK(greedy_output_ok(&e.rec, 6, q, 120, 10));
    CHECK_EQ_INT(s3.prefix_hit_tokens - s2.prefix_hit_tokens, 224);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* A prompt the length of whole blocks: its last block is recomputed (the last position's row
 * is needed), and a one-token prompt after a cached one. */
static void test_embed_prefix_cache_block_edges(void) {
    env e;
    REQUIRE(env_open(&e, 64, 64, 8, true) == 0);
    int32_t p[64];
    make_tokens(41, p, 64, 0, 256);
    for (uint64_t id = 1; id <= 3; id++) {
        pgd_request r = embed_req(p, 64, PGD_POOL_LAST);
        CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
        CHECK(run_idle(&e, 100) > 0);
        CHECK_EQ_INT(rec_get(&e.rec, id)->usage.cached_tokens, id == 1 ? 0 : 48);
        CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, id, p, 64, PGD_POOL_LAST), 0);
    }
    for (uint64_t id = 4; id <= 5; id++) {
        pgd_request r = embed_req(p, 1, id == 4 ? PGD_POOL_LAST : PGD_POOL_MEAN);
        CHECK_EQ_INT(pgd_sched_submit(e.S, id, &r), 0);
        CHECK(run_idle(&e, 100) > 0);
        CHECK_EQ_INT(rec_get(&e.rec, id)->usage.cached_tokens, 0);
        CHECK_EQ_INT(
            embedding_mismatches(&e.rec, &e.emb, id, p, 1, id == 4 ? PGD_POOL_LAST : PGD_POOL_MEAN),
            0);
    }
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- preemption --------------------------------------------------------------------------- */

/* A pool of 23 usable blocks for long generations and long embeddings submitted interleaved:
 * they preempt each other (MEAN ones after some of their rows were pooled, so a recompute
 * repeats rows already summed), and every vector and every output is still as expected. */
static void check_preemption(pgd_sched_policy policy) {
    enum { N = 12, LEN = 150 };
    env e;
    pgd_fake_config fc = {
        .n_blocks = 24, .block_size = 16, .max_tokens = 32, .verify = true, .record = true};
    REQUIRE(env_open_policy(&e, &fc, 8, true, policy) == 0);
    CHECK_EQ_INT(pgd_sched_get_config(e.S)->policy, policy);
    static int32_t p[N][LEN];
    uint32_t len[N];
    int emb_preempted = 0, gen_preempted = 0, mean_preempted_midway = 0;
    uint32_t computed[N + 1] = {0}; /* request id: tokens computed while last running */
    for (uint32_t i = 0; i < N; i++) {
        len[i] = i % 2 ? 90 + 5 * i : 20 + i;
        make_tokens(200 + i, p[i], len[i], 0, 256);
        pgd_request r = i % 2 ? embed_req(p[i], len[i], i % 4 == 1 ? PGD_POOL_MEAN : PGD_POOL_LAST)
                              : greedy_req(p[i], len[i], 120);
        CHECK_EQ_INT(pgd_sched_submit(e.S, i + 1, &r), 0);
    }
    bool was_preempted[N + 1] = {false};
    pgd_sched_step_info info;
    for (int guard = 0; pgd_sched_has_work(e.S) && guard < 5000; guard++) {
        REQUIRE(step(&e, &info) == 0);
        for (uint32_t k = 0; k < info.n_items; k++)
            if (info.items[k].id <= N)
                computed[info.items[k].id] = info.items[k].n_computed + info.items[k].n_tokens;
        for (uint64_t id = 1; id <= N; id++) {
            bool pre = pgd_sched_seq_state(e.S, id, 0) == PGD_SEQ_PREEMPTED;
            if (pre && !was_preempted[id]) {
                bool emb = (id - 1) % 2;
                emb_preempted += emb;
                gen_preempted += !emb;
                mean_preempted_midway += emb && (id - 1) % 4 == 1 && computed[id] > 0;
            }
            was_preempted[id] = pre;
        }
    }
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    fprintf(stderr,
            "    %s: %llu preemptions: %d of embeddings (%d MEAN midway), %d of generations\n",
            pgd_sched_policy_str(policy), (unsigned long long)st.n_preemptions, emb_preempted,
            mean_preempted_midway, gen_preempted);
    CHECK(st.n_preemptions > 0);
    CHECK(emb_preempted > 0);
    CHECK(gen_preempted > 0);
    CHECK(mean_preempted_midway > 0);
    for (uint32_t i = 0; i < N; i++) {
        if (i % 2 == 0) {
            CHECK(greedy_output_ok(&e.rec, i + 1, p[i], len[i], 120));
            continue;
        }
        pgd_pooling pool = i % 4 == 1 ? PGD_POOL_MEAN : PGD_POOL_LAST;
        CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, i + 1, p[i], len[i], pool), 0);
    }
    CHECK_EQ_INT(st.n_finished, N);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

static void test_embed_preemption_fair(void) {
    check_preemption(PGD_SCHED_FAIR);
}

static void test_embed_preemption_fcfs(void) {
    check_preemption(PGD_SCHED_FCFS);
}

/* ---- abort -------------------------------------------------------------------------------- */

/* An embedding aborted mid-prefill (and one still waiting) ends with one FINISH(abort), done,
 * no vector; its blocks come back at once; the others finish as expected and the pool is all
 * free at the end. */
static void test_embed_abort_mid_prefill(void) {
    env e;
    REQUIRE(env_open(&e, 64, 16, 2, true) == 0);
    int32_t p[4][300];
    for (uint32_t i = 0; i < 4; i++) make_tokens(300 + i, p[i], 300, 0, 256);
    pgd_request r = embed_req(p[0], 300, PGD_POOL_MEAN);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    r = embed_req(p[1], 200, PGD_POOL_LAST);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    r = embed_req(p[2], 100, PGD_POOL_MEAN); /* waits: two seats */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    r = greedy_req(p[3], 30, 20);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 4, &r), 0);
    for (int s = 0; s < 4; s++) CHECK_EQ_INT(step(&e, NULL), 0);
    CHECK_EQ_INT(pgd_sched_seq_state(e.S, 1, 0), PGD_SEQ_RUNNING);
    CHECK_EQ_INT(pgd_sched_seq_state(e.S, 2, 0), PGD_SEQ_RUNNING);
    CHECK_EQ_INT(pgd_sched_seq_state(e.S, 3, 0), PGD_SEQ_WAITING);
    pgd_sched_stats before, after;
    for (uint64_t id = 1; id <= 3; id += 2) { /* 1 mid-prefill, 3 waiting */
        pgd_sched_get_stats(e.S, &before);
        CHECK_EQ_INT(pgd_sched_abort(e.S, id), 0);
        pgd_sched_get_stats(e.S, &after);
        CHECK(pgd_sched_check(e.S) == 0);
        if (id == 1) CHECK(after.kv_blocks_used < before.kv_blocks_used);
        const rec_req *q = rec_get(&e.rec, id);
        const emb_got *g = got_of(&e.emb, id);
        CHECK_EQ_INT(q->n_events, 1);
        CHECK_EQ_INT(q->n_done, 1);
        CHECK_EQ_INT(q->ch[0].n_finish, 1);
        CHECK_EQ_INT(q->ch[0].reason, PGD_REASON_ABORT);
        CHECK_EQ_INT(q->ch[0].n_output, 0);
        CHECK_EQ_INT(q->usage.prompt_tokens, id == 1 ? 300 : 100);
        CHECK_EQ_INT(g->n_finish, 1);
        CHECK_EQ_INT(g->n_with, 0); /* no vector */
    }
    CHECK_EQ_INT(pgd_sched_abort(e.S, 1), PGD_ENOTFOUND);
    CHECK(run_idle(&e, 1000) > 0);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 2, p[1], 200, PGD_POOL_LAST), 0);
    CHECK(greedy_output_ok(&e.rec, 4, p[3], 30, 20));
    CHECK_EQ_INT(rec_get(&e.rec, 1)->n_events, 1); /* nothing after the abort */
    CHECK_EQ_INT(rec_get(&e.rec, 3)->n_events, 1);
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    CHECK_EQ_INT(st.n_aborted, 2);
    CHECK_EQ_INT(st.n_finished, 2);
    CHECK_EQ_INT(st.n_running + st.n_waiting + st.n_requests, 0);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- a failing forward -------------------------------------------------------------------- */

/* The forward of the third step fails: the embeddings in it get one ERROR event each (done, no
 * FINISH, no vector), their blocks come back, and the scheduler goes on. */
static void test_embed_forward_failure(void) {
    env e;
    pgd_fake_config fc = {.n_blocks = 64,
                          .block_size = 16,
                          .max_tokens = 64,
                          .verify = true,
                          .record = true,
                          .fail_at = 3};
    REQUIRE(env_open_cfg(&e, &fc, 8, true) == 0);
    int32_t p[4][200];
    for (uint32_t i = 0; i < 4; i++) make_tokens(600 + i, p[i], 200, 0, 256);
    pgd_request r = embed_req(p[0], 200, PGD_POOL_MEAN); /* the head: in every step */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 1, &r), 0);
    r = embed_req(p[1], 100, PGD_POOL_LAST);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    r = greedy_req(p[2], 30, 10);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    CHECK_EQ_INT(step(&e, NULL), 0);
    CHECK_EQ_INT(step(&e, NULL), 0);
    e.rec.step++;
    CHECK_EQ_INT(pgd_sched_step(e.S, NULL), PGD_EIO);
    const rec_req *q = rec_get(&e.rec, 1);
    CHECK_EQ_INT(q->n_error, 1);
    CHECK_EQ_INT(q->error, PGD_EIO);
    CHECK_EQ_INT(q->n_events, 1);
    CHECK_EQ_INT(got_of(&e.emb, 1)->n_finish, 0);
    CHECK_EQ_INT(got_of(&e.emb, 1)->n_stray, 0);
    CHECK_EQ_INT(pgd_sched_check(e.S), 0);
    CHECK(run_idle(&e, 100) >= 0);
    /* the others: failed the same way, or finished as expected */
    if (rec_get(&e.rec, 2)->n_error) {
        CHECK_EQ_INT(rec_get(&e.rec, 2)->n_events, 1);
        CHECK_EQ_INT(got_of(&e.emb, 2)->n_finish + got_of(&e.emb, 2)->n_stray, 0);
    } else {
        CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 2, p[1], 100, PGD_POOL_LAST), 0);
    }
    if (!rec_get(&e.rec, 3)->n_error) CHECK(greedy_output_ok(&e.rec, 3, p[2], 30, 10));
    CHECK(sched_pool_all_free(e.S));
    /* it goes on */
    r = embed_req(p[3], 150, PGD_POOL_MEAN);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 4, &r), 0);
    CHECK(run_idle(&e, 100) > 0);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 4, p[3], 150, PGD_POOL_MEAN), 0);
    CHECK(sched_pool_all_free(e.S));
    env_close(&e);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void check_refused(env *e, uint64_t id, const pgd_request *r) {
    CHECK_EQ_INT(pgd_sched_submit(e->S, id, r), PGD_EINVAL);
    const char *param = pgd_error_param();
    CHECK_EQ_STR(param ? param : "(none)", "input");
    CHECK(id >= e->rec.cap || !e->rec.r[id].seen);
}

/* An embedding has one choice, no prompt logprobs, is not prompt_only, pools LAST or MEAN, and
 * needs a backend that returns hidden states: else PGD_EINVAL with param "input", no event. */
static void test_embed_refusals(void) {
    env e;
    REQUIRE(env_open(&e, 64, 64, 8, true) == 0);
    pgd_req_limits lim;
    pgd_sched_limits(e.S, &lim);
    CHECK(lim.embeddings);
    int32_t p[20];
    make_tokens(51, p, 20, 0, 256);
    pgd_request r = embed_req(p, 20, PGD_POOL_MEAN);
    r.n = 2;
    check_refused(&e, 1, &r);
    r = embed_req(p, 20, PGD_POOL_LAST);
    r.prompt_logprobs = 0;
    check_refused(&e, 2, &r);
    r = embed_req(p, 20, PGD_POOL_MEAN);
    r.prompt_only = true;
    check_refused(&e, 3, &r);
    r = embed_req(p, 20, (pgd_pooling)7);
    check_refused(&e, 4, &r);
    r = embed_req(p, 20, (pgd_pooling)-1);
    check_refused(&e, 5, &r);
    /* the ones allowed: n 0 (means 1) and n 1 */
    r = embed_req(p, 20, PGD_POOL_MEAN);
    r.n = 0;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 6, &r), 0);
    r.n = 1;
    CHECK_EQ_INT(pgd_sched_submit(e.S, 7, &r), 0);
    CHECK(run_idle(&e, 10) > 0);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 6, p, 20, PGD_POOL_MEAN), 0);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 7, p, 20, PGD_POOL_MEAN), 0);
    pgd_sched_stats st;
    pgd_sched_get_stats(e.S, &st);
    CHECK_EQ_INT(st.n_refused, 5);
    CHECK_EQ_INT(e.rec.n_done, 2);
    env_close(&e);

    /* a backend without hidden states */
    pgd_fake_config fc = {.n_blocks = 64,
                          .block_size = 16,
                          .max_tokens = 64,
                          .verify = true,
                          .record = true,
                          .no_hidden = true};
    REQUIRE(env_open_cfg(&e, &fc, 8, true) == 0);
    CHECK_EQ_INT(pgd_runner_backend(e.runner)->caps.max_hidden_rows, 0);
    pgd_sched_limits(e.S, &lim);
    CHECK(!lim.embeddings);
    r = embed_req(p, 20, PGD_POOL_LAST);
    check_refused(&e, 1, &r);
    r = embed_req(p, 20, PGD_POOL_MEAN);
    check_refused(&e, 2, &r);
    r = greedy_req(p, 20, 5); /* generation still works */
    CHECK_EQ_INT(pgd_sched_submit(e.S, 3, &r), 0);
    CHECK(run_idle(&e, 10) > 0);
    CHECK(greedy_output_ok(&e.rec, 3, p, 20, 5));
    CHECK_EQ_INT(log_hidden_rows(&e), 0);
    env_close(&e);

    /* an input that fills the model's context (64 tokens) */
    pgd_fake_config fc2 = {
        .n_blocks = 64, .block_size = 16, .max_tokens = 64, .n_ctx = 64, .verify = true};
    REQUIRE(env_open_cfg(&e, &fc2, 8, true) == 0);
    int32_t big[64];
    make_tokens(52, big, 64, 0, 256);
    r = embed_req(big, 64, PGD_POOL_MEAN);
    check_refused(&e, 1, &r);
    r = embed_req(big, 63, PGD_POOL_MEAN);
    CHECK_EQ_INT(pgd_sched_submit(e.S, 2, &r), 0);
    CHECK(run_idle(&e, 10) > 0);
    CHECK_EQ_INT(embedding_mismatches(&e.rec, &e.emb, 2, big, 63, PGD_POOL_MEAN), 0);
    env_close(&e);
}

/* ---- through the worker thread ------------------------------------------------------------ */

typedef struct worker_sink {
    recorder rec;
    emb_log emb;
} worker_sink;

static void worker_event(const pgd_event *ev, void *ud) {
    worker_sink *w = ud;
    rec_event(ev, &w->rec);
    emb_note(&w->emb, ev); /* copies the vector before the node is freed */
}

/* The FINISH event's vector survives the copy across threads (scheduler/worker.c): one of each
 * pooling, chunked, with a generation alongside. */
static void test_embed_through_worker(void) {
    pgd_fake_config fc = {.n_blocks = 64, .block_size = 16, .max_tokens = 32, .verify = true};
    pgd_model_info *info = NULL;
    pgd_runner *runner = NULL;
    REQUIRE(pgd_fake_create(&fc, &info, &runner) == 0);
    pgd_worker_config c;
    pgd_worker_config_default(&c);
    c.sched.max_num_batched_tokens = 32;
    c.sched.max_num_seqs = 4;
    c.sched.check_invariants = true;
    pgd_worker *w = NULL;
    if (pgd_worker_create(runner, &c, &w)) {
        pgd_runner_destroy(runner);
        pgd_model_info_close(info);
        REQUIRE(false);
    }
    int32_t p[3][150];
    for (uint32_t i = 0; i < 3; i++) make_tokens(400 + i, p[i], 150, 0, 256);
    uint64_t ids[3];
    pgd_request r = embed_req(p[0], 150, PGD_POOL_MEAN);
    CHECK_EQ_INT(pgd_worker_submit(w, &r, &ids[0]), 0);
    r = embed_req(p[1], 77, PGD_POOL_LAST);
    CHECK_EQ_INT(pgd_worker_submit(w, &r, &ids[1]), 0);
    r = greedy_req(p[2], 40, 30);
    CHECK_EQ_INT(pgd_worker_submit(w, &r, &ids[2]), 0);
    r = embed_req(p[1], 77, PGD_POOL_LAST);
    r.n = 2;
    uint64_t bad_id = 0;
    CHECK_EQ_INT(pgd_worker_submit(w, &r, &bad_id), PGD_EINVAL);
    CHECK_EQ_STR(pgd_error_param() ? pgd_error_param() : "(none)", "input");
    pgd_worker_shutdown(w, -1); /* finish everything */
    worker_sink sink = {0};
    pgd_worker_drain(w, worker_event, &sink);
    CHECK_EQ_INT(sink.rec.n_done, 3);
    if (sink.rec.violations) fprintf(stderr, "  event contract: %s\n", sink.rec.why);
    CHECK_EQ_INT(sink.rec.violations, 0);
    CHECK_EQ_INT(embedding_mismatches(&sink.rec, &sink.emb, ids[0], p[0], 150, PGD_POOL_MEAN), 0);
    CHECK_EQ_INT(embedding_mismatches(&sink.rec, &sink.emb, ids[1], p[1], 77, PGD_POOL_LAST), 0);
    CHECK(greedy_output_ok(&sink.rec, ids[2], p[2], 40, 30));
    pgd_worker_destroy(w);
    pgd_model_info_close(info);
    rec_free(&sink.rec);
    free(sink.emb.g);
}

int main(void) {
    RUN(test_fake_hidden_states);
    RUN(test_embed_short_prompts);
    RUN(test_embed_chunked_prompts);
    RUN(test_embed_mixed_with_generation);
    RUN(test_embed_prefix_cache);
    RUN(test_embed_prefix_cache_block_edges);
    RUN(test_embed_preemption_fair);
    RUN(test_embed_preemption_fcfs);
    RUN(test_embed_abort_mid_prefill);
    RUN(test_embed_forward_failure);
    RUN(test_embed_refusals);
    RUN(test_embed_through_worker);
    return test_summary();
}
