/*
 * tests/unit/test_backend.c — the backend factory and the device-neutral contract on the CPU
 * backend, over a tiny dummy model (no file needed):
 *   - --device parsing; cuda refused with a clear error in a build without a CUDA backend; auto
 *     and cpu give the CPU backend, whose capabilities are data (kind, KV blocks sized from the
 *     memory asked, max context, preferred step, device memory);
 *   - a row the backend samples gets exactly the token (and logprobs) that the host sampler
 *     reference (pgd_sample_logits) gives on that row's full logits, fetched in another forward
 *     of the same batch; rows asked as full logits and rows sampled mix in one forward.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backends/factory.h"
#include "engine/model/dummy.h"
#include "engine/model/preset.h"
#include "support/preset_json.h"
#include "testutil.h"

static pgd_model *g_model;

static int tiny_model(void) {
    pgd_model_preset p;
    int rc = pgd_test_preset_json(
        "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 96, "
        "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
        "\"vocab_size\": 512, \"max_position_embeddings\": 256, \"rope_theta\": 10000}",
        &p);
    return rc ? rc : pgd_model_dummy(&p, PGD_DUMMY_SEED, false, &g_model);
}

/* "cuda:N" and the rest: what pgd_device_parse accepts sets device and index, what it refuses
 * leaves both as they were */
static void test_device_names(void) {
    pgd_device_options d;
    pgd_device_options_default(&d);
    CHECK(pgd_device_parse("cpu", &d) == 0 && d.device == PGD_DEVICE_CPU);
    CHECK(pgd_device_parse("cuda:3", &d) == 0 && d.device == PGD_DEVICE_CUDA &&
          d.cuda.device_index == 3);
    CHECK(pgd_device_parse("cuda", &d) == 0 && d.device == PGD_DEVICE_CUDA &&
          d.cuda.device_index == 0);
    CHECK(pgd_device_parse("cuda:63", &d) == 0 && d.cuda.device_index == 63);
    CHECK(pgd_device_parse("auto", &d) == 0 && d.device == PGD_DEVICE_AUTO &&
          d.cuda.device_index == 0);
    CHECK(d.cuda.decode_gemv); /* the rest of the options untouched */
    const char *bad[] = {"tpu",      "cuda:",   "cuda:x", "cuda:-1", "cuda:64", "cuda:1x",
                         "cuda:001", "cuda: 1", "CUDA",   "cuda1",   ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pgd_device_options_default(&d);
        CHECK_EQ_INT(pgd_device_parse(bad[i], &d), PGD_EINVAL);
        CHECK(d.device == PGD_DEVICE_AUTO && d.cuda.device_index == 0);
    }
    CHECK(strstr(pgd_error_detail(), "cuda:N") != NULL);
    /* an index past the devices present is refused, saying how many there are (none here, or
     * those of a GPU machine: 64 is more than any has) */
    pgd_device_parse("cuda:63", &d);
    int resolved = -2;
    CHECK_EQ_INT(pgd_device_resolve(&d, &resolved, NULL), PGD_EUNSUPPORTED);
    CHECK(resolved == PGD_DEVICE_CPU);
#ifdef PGD_HAVE_CUDA
    CHECK(strstr(pgd_error_detail(), "--device cuda") != NULL);
#endif
}

/* --gpu-weights: auto (the default), bf16, q8_0, q4; anything else refused, the value kept */
static void test_gpu_weights_names(void) {
    pgd_device_options d;
    pgd_device_options_default(&d);
    CHECK(d.cuda.weights == PGD_CUDA_WEIGHTS_AUTO);
    pgd_cuda_weights w = PGD_CUDA_WEIGHTS_AUTO;
    CHECK(pgd_cuda_weights_parse("q8_0", &w) == 0 && w == PGD_CUDA_WEIGHTS_Q8_0);
    CHECK(pgd_cuda_weights_parse("bf16", &w) == 0 && w == PGD_CUDA_WEIGHTS_BF16);
    CHECK(pgd_cuda_weights_parse("auto", &w) == 0 && w == PGD_CUDA_WEIGHTS_AUTO);
    CHECK(pgd_cuda_weights_parse("q4", &w) == 0 && w == PGD_CUDA_WEIGHTS_Q4);
    const char *bad[] = {"q8", "Q8_0", "fp8", "bf16 ", "", "q4_0", "Q4", "q4 "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        w = PGD_CUDA_WEIGHTS_BF16;
        CHECK_EQ_INT(pgd_cuda_weights_parse(bad[i], &w), PGD_EINVAL);
        CHECK(w == PGD_CUDA_WEIGHTS_BF16);
    }
    CHECK(strstr(pgd_error_detail(), "auto, bf16, q8_0 or q4") != NULL);
    CHECK(!strcmp(pgd_cuda_weights_name(PGD_CUDA_WEIGHTS_Q4), "q4"));
    CHECK(!strcmp(pgd_cuda_weights_name((pgd_cuda_weights)4), "?"));
    CHECK(!strcmp(pgd_cuda_weights_name(PGD_CUDA_WEIGHTS_Q8_0), "q8_0"));
    CHECK(!strcmp(pgd_cuda_weights_name(PGD_CUDA_WEIGHTS_AUTO), "auto"));
}

static void test_devices(void) {
    pgd_backend_config bc = {.block_size = 16, .kv_dtype = PGD_KV_F16, .kv_blocks = 9};
    pgd_device_options o;
    pgd_device_options_default(&o);
    CHECK_EQ_INT(o.device, PGD_DEVICE_AUTO);
    pgd_backend *b = NULL;
    /* where this build has the CUDA backend and the machine a GPU, cuda and auto take it (the
     * CUDA tests, label `cuda`, check that backend); else cuda is refused, auto is the CPU */
    int resolved = -2;
    pgd_device_options ask = o;
    ask.device = PGD_DEVICE_CUDA;
    const bool have_cuda = pgd_device_resolve(&ask, &resolved, NULL) == 0;
    const char *why = "unset";
    CHECK_EQ_INT(pgd_device_resolve(&o, &resolved, &why), 0);
    CHECK_EQ_INT(resolved, have_cuda ? PGD_DEVICE_CUDA : PGD_DEVICE_CPU);
    /* auto says why it took the CPU (the log line of serve and bench), and only then */
    if (have_cuda) {
        CHECK(why == NULL);
    } else {
#ifdef PGD_HAVE_CUDA
        REQUIRE(why != NULL);
        CHECK(strncmp(why, "no CUDA device is visible: ", 27) == 0 && strlen(why) > 30);
#else
        CHECK(why != NULL && strcmp(why, "this build has no CUDA backend") == 0);
#endif
    }
    why = "unset";
    ask.device = PGD_DEVICE_CPU;
    CHECK_EQ_INT(pgd_device_resolve(&ask, &resolved, &why), 0);
    CHECK(resolved == PGD_DEVICE_CPU && why == NULL); /* asked for: nothing to say */
    if (!have_cuda) {
        o.device = PGD_DEVICE_CUDA;
        CHECK_EQ_INT(pgd_backend_create(g_model, &bc, &o, &b), PGD_EUNSUPPORTED);
        CHECK(b == NULL && strstr(pgd_error_detail(), "CUDA") != NULL);
#ifdef PGD_HAVE_CUDA /* and the reason the runtime gave */
        CHECK(strstr(pgd_error_detail(), "no CUDA device is visible: ") != NULL);
#endif
    }
    for (int dev = PGD_DEVICE_AUTO; dev <= PGD_DEVICE_CPU; dev++) {
        if (dev == PGD_DEVICE_AUTO && have_cuda) continue;
        o.device = dev;
        REQUIRE(pgd_backend_create(g_model, &bc, &o, &b) == 0);
        const pgd_backend_caps *c = &b->caps;
        CHECK_EQ_INT(c->kind, PGD_DEVICE_CPU);
        CHECK_EQ_STR(c->name, "cpu");
        CHECK_EQ_INT(c->n_blocks, 9);
        CHECK_EQ_INT(c->max_context, 9 * 16);
        CHECK_EQ_INT(c->max_tokens, PGD_CPU_STEP_TOKENS);
        CHECK_EQ_INT(c->max_seqs, PGD_CPU_STEP_SEQS);
        CHECK(c->device_memory > (64ull << 20));
        /* 2 layers x K and V x 2 KV heads x 16 tokens x 16 dims x 2 bytes per block */
        CHECK_EQ_INT(c->kv_bytes, 9ull * 2 * 2 * 2 * 16 * 16 * 2);
        pgd_backend_destroy(b);
    }
    /* KV sized from memory: 1 MiB of f32 cache, 8 KiB a block */
    bc = (pgd_backend_config){.block_size = 16, .kv_dtype = PGD_KV_F32, .kv_cache_bytes = 1 << 20};
    o.device = PGD_DEVICE_CPU;
    REQUIRE(pgd_backend_create(g_model, &bc, &o, &b) == 0);
    CHECK_EQ_INT(b->caps.n_blocks, (1 << 20) / (2 * 2 * 2 * 16 * 16 * 4));
    pgd_backend_destroy(b);
    bc.kv_cache_bytes = 1000; /* not one block */
    CHECK_EQ_INT(pgd_backend_create(g_model, &bc, &o, &b), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "KV cache too small") != NULL);
}

/* One sequence of n tokens in blocks 1.. (a fresh batch; K/V written again every call). */
typedef struct one_seq {
    int32_t tokens[40], pos[40];
    int64_t slots[40];
    uint32_t q_start[2], kv_len[1];
    int32_t table[8];
} one_seq;

static pgd_batch batch_of(one_seq *s, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        s->tokens[i] = (int32_t)((i * 37 + 11) % 512);
        s->pos[i] = (int32_t)i;
        s->slots[i] = 16 + i; /* block 1 on */
    }
    for (int i = 0; i < 8; i++) s->table[i] = 1 + i;
    s->q_start[0] = 0;
    s->q_start[1] = n;
    s->kv_len[0] = n;
    return (pgd_batch){.n_tokens = n,
                       .tokens = s->tokens,
                       .positions = s->pos,
                       .slots = s->slots,
                       .n_seqs = 1,
                       .q_start = s->q_start,
                       .kv_len = s->kv_len,
                       .block_tables = s->table,
                       .bt_stride = 8};
}

static void test_sampled_rows_match_reference(void) {
    pgd_backend_config bc = {.block_size = 16, .kv_dtype = PGD_KV_F32, .kv_blocks = 9};
    pgd_device_options o;
    pgd_device_options_default(&o);
    o.device = PGD_DEVICE_CPU; /* the CUDA backend's rows: tests/gpu/test_cuda_forward.c */
    pgd_backend *b = NULL;
    REQUIRE(pgd_backend_create(g_model, &bc, &o, &b) == 0);
    const uint32_t V = g_model->cfg.n_vocab, n = 30;
    float *full = malloc((uint64_t)n * V * sizeof *full), *mixed = malloc(2ull * V * sizeof *mixed);
    pgd_sampler_scratch *sc = NULL;
    REQUIRE(full && mixed && pgd_sampler_scratch_create((int32_t)V, &sc) == 0);
    one_seq s;
    /* every row's full logits */
    pgd_batch bt = batch_of(&s, n);
    uint32_t all[30];
    for (uint32_t i = 0; i < n; i++) all[i] = i;
    bt.n_logits = n;
    bt.logit_rows = all;
    REQUIRE(pgd_backend_forward(b, &bt, full, NULL) == 0);
    /* rows 3 and 29 as full logits, rows 5, 17, 28 sampled, in one forward */
    static const pgd_sample_spec specs[3] = {
        {.temperature = 0.0f, .top_p = 1.0f, .logprobs = true, .top_logprobs = 3},
        {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f},
        {.temperature = 1.3f, .top_p = 1.0f, .min_p = 0.02f, .logprobs = true}};
    pgd_sample_row rows[3] = {{5, specs[0], 0},
                              {17, specs[1], 0x9E3779B97F4A7C15ull},
                              {28, specs[2], 0x123456789ABCDEFull}};
    uint32_t lrows[2] = {3, 29};
    bt = batch_of(&s, n);
    bt.n_logits = 2;
    bt.logit_rows = lrows;
    bt.n_samples = 3;
    bt.samples = rows;
    pgd_sample_result got[3];
    REQUIRE(pgd_backend_forward(b, &bt, mixed, got) == 0);
    CHECK(memcmp(mixed, full + 3ull * V, V * sizeof(float)) == 0);
    CHECK(memcmp(mixed + V, full + 29ull * V, V * sizeof(float)) == 0);
    for (int i = 0; i < 3; i++) {
        pgd_sample_result want;
        REQUIRE(pgd_sample_logits(full + (uint64_t)rows[i].token * V, (int32_t)V, &rows[i].spec,
                                  rows[i].draw, sc, &want) == 0);
        CHECK_EQ_INT(got[i].token, want.token);
        CHECK(got[i].logprob == want.logprob && got[i].n_top == want.n_top);
    }
    CHECK_EQ_INT(got[0].n_top, 3);
    pgd_sampler_scratch_destroy(sc);
    free(full);
    free(mixed);
    pgd_backend_destroy(b);
}

int main(void) {
    if (tiny_model()) {
        fprintf(stderr, "tiny model: %s\n", pgd_error_detail());
        return 1;
    }
    RUN(test_device_names);
    RUN(test_gpu_weights_names);
    RUN(test_devices);
    RUN(test_sampled_rows_match_reference);
    pgd_model_free(g_model);
    return test_summary();
}
