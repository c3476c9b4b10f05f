/*
 * tests/unit/test_preset.c — model presets and dummy weights (engine/model/preset.h, dummy.h,
 * common/counter_hash.h).
 *
 * The built-in presets carry the published shapes; bad names and files give clear errors; the
 * counter hash never yields zero and its values are exact in f16 and bf16 (the promise that lets
 * the CPU and the GPU compute with the same weights); a dummy model binds every weight with the
 * preset's shapes. The values themselves are checked against an independent re-implementation
 * in tests/reference/test_dummy_weights.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/counter_hash.h"
#include "common/error.h"
#include "engine/model/dummy.h"
#include "engine/model/preset.h"
#include "kernels/cpu/quant.h"
#include "testutil.h"

static void test_builtin_shapes(void) {
    static const struct {
        const char *name;
        uint32_t embd, ff, layers, heads, kv, vocab, ctx, head_dim;
        bool tied, factors;
        pgd_arch arch;
    } want[] = {
        {"smollm2-135m", 576, 1536, 30, 9, 3, 49152, 8192, 64, true, false, PGD_ARCH_LLAMA},
        {"qwen2.5-0.5b", 896, 4864, 24, 14, 2, 151936, 32768, 64, true, false, PGD_ARCH_QWEN2},
        {"llama-3.2-1b", 2048, 8192, 16, 32, 8, 128256, 131072, 64, true, true, PGD_ARCH_LLAMA},
        {"llama-3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 128, false, false, PGD_ARCH_LLAMA},
        {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 151936, 40960, 128, true, false, PGD_ARCH_QWEN3},
        {"qwen3-8b", 4096, 12288, 36, 32, 8, 151936, 40960, 128, false, false, PGD_ARCH_QWEN3},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(want); i++) {
        pgd_model_preset p;
        REQUIRE(pgd_model_preset_load(want[i].name, &p) == 0);
        const pgd_model_config *c = &p.cfg;
        CHECK_EQ_STR(p.name, want[i].name);
        CHECK_EQ_INT(c->n_embd, want[i].embd);
        CHECK_EQ_INT(c->n_ff, want[i].ff);
        CHECK_EQ_INT(c->n_layer, want[i].layers);
        CHECK_EQ_INT(c->n_head, want[i].heads);
        CHECK_EQ_INT(c->n_head_kv, want[i].kv);
        CHECK_EQ_INT(c->n_vocab, want[i].vocab);
        CHECK_EQ_INT(c->n_ctx_train, want[i].ctx);
        CHECK_EQ_INT(c->head_dim, want[i].head_dim);
        CHECK_EQ_INT(c->tied_output, want[i].tied);
        CHECK_EQ_INT(c->rope_freq_factors, want[i].factors);
        CHECK_EQ_INT(c->arch, want[i].arch);
        CHECK_EQ_INT(c->qkv_bias, want[i].arch == PGD_ARCH_QWEN2);
        CHECK_EQ_INT(c->qk_norm, want[i].arch == PGD_ARCH_QWEN3);
        CHECK_EQ_INT(c->n_expert, 0);
        CHECK_EQ_INT(c->rope_style, want[i].arch == PGD_ARCH_LLAMA ? PGD_ROPE_NORM : PGD_ROPE_NEOX);
    }
    /* Llama 3.2's factors: 1 for the fastest pairs, 32 for the slowest, increasing between */
    pgd_model_preset p;
    REQUIRE(pgd_model_preset_load("llama-3.2-1b", &p) == 0);
    uint32_t n = p.cfg.rope_dim / 2;
    CHECK_EQ_INT(n, 32);
    CHECK(p.rope_factors[0] == 1.0f && p.rope_factors[n - 1] == 32.0f);
    for (uint32_t i = 1; i < n; i++) CHECK(p.rope_factors[i] >= p.rope_factors[i - 1]);
    fprintf(stderr, "    presets: %s\n", pgd_model_preset_names());
}

/* The mixtures of experts: Qwen3-30B-A3B's and Mixtral-8x7B's published shapes. */
static void test_builtin_moe_shapes(void) {
    pgd_model_preset p;
    REQUIRE(pgd_model_preset_load("qwen3-30b-a3b", &p) == 0);
    const pgd_model_config *c = &p.cfg;
    CHECK_EQ_INT(c->arch, PGD_ARCH_QWEN3MOE);
    CHECK_EQ_STR(c->arch_name, "qwen3moe");
    CHECK(c->qk_norm && !c->qkv_bias && c->rope_style == PGD_ROPE_NEOX && !c->tied_output);
    CHECK(c->n_embd == 2048 && c->n_layer == 48 && c->n_head == 32 && c->n_head_kv == 4 &&
          c->head_dim == 128 && c->n_vocab == 151936);
    CHECK(c->n_expert == 128 && c->n_expert_used == 8 && c->n_ff_exp == 768 && c->n_ff == 6144);
    /* shapes only (a device would fill them): the views of every expert, about 30.5 G
     * parameters in all (3.3 G of them active per token) */
    pgd_model *m = NULL;
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, true, &m) == 0);
    const pgd_layer_weights *L = &m->layers[47];
    CHECK(L->router.rows == 128 && L->router.cols == 2048 && !L->w_gate.rows);
    CHECK(L->exp_gate[127].rows == 768 && L->exp_gate[127].cols == 2048);
    CHECK(L->exp_up[0].rows == 768 && L->exp_down[5].rows == 2048 && L->exp_down[5].cols == 768);
    CHECK(m->weight_bytes > 2 * 30000000000ull && m->weight_bytes < 2 * 31000000000ull);
    pgd_model_free(m);

    REQUIRE(pgd_model_preset_load("mixtral-8x7b", &p) == 0);
    CHECK_EQ_INT(c->arch, PGD_ARCH_LLAMA);
    CHECK_EQ_STR(c->arch_name, "llama");
    CHECK(c->n_expert == 8 && c->n_expert_used == 2 && c->n_ff_exp == 14336 && !c->qk_norm);
    CHECK(c->n_embd == 4096 && c->n_layer == 32 && c->head_dim == 128 && c->n_vocab == 32000);

    /* a small one built for real: each expert a view of its slice of one hashed tensor */
    char path[] = "/tmp/pgd_preset_XXXXXX.json";
    int fd = mkstemps(path, 5);
    REQUIRE(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"moe_intermediate_size\": 32, \"num_experts\": 5, \"num_experts_per_tok\": 2, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300}",
          f);
    fclose(f);
    REQUIRE(pgd_model_preset_load(path, &p) == 0);
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, false, &m) == 0);
    L = &m->layers[1];
    const uint16_t *g3 = L->exp_gate[3].data, *d4 = L->exp_down[4].data;
    const uint32_t gid = pgd_dummy_moe_id(1, PGD_DUMMY_EXP_GATE);
    const uint32_t did = pgd_dummy_moe_id(1, PGD_DUMMY_EXP_DOWN);
    CHECK(pgd_f16_to_f32(g3[7]) ==
          pgd_dummy_value(PGD_DUMMY_SEED, gid, 3 * 32 * 64 + 7, pgd_dummy_matrix_shift(64)));
    CHECK(pgd_f16_to_f32(d4[70]) ==
          pgd_dummy_value(PGD_DUMMY_SEED, did, 4 * 64 * 32 + 70, pgd_dummy_matrix_shift(32)));
    /* the router's id does not alias a dense tensor's (the hash keeps 24 bits of an id) */
    int same = 0;
    for (uint64_t i = 0; i < 200; i++)
        same += pgd_dummy_int(PGD_DUMMY_SEED, pgd_dummy_moe_id(0, PGD_DUMMY_ROUTER), i) ==
                pgd_dummy_int(PGD_DUMMY_SEED, PGD_DUMMY_TOK_EMBD, i);
    CHECK(same < 20);
    pgd_model_free(m);

    f = fopen(path, "w"); /* Qwen2-MoE-style unnormalised top-k is another model */
    fputs("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"moe_intermediate_size\": 32, \"num_experts\": 5, \"num_experts_per_tok\": 2, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, "
          "\"norm_topk_prob\": false}",
          f);
    fclose(f);
    CHECK_EQ_INT(pgd_model_preset_load(path, &p), PGD_EUNSUPPORTED);
    CHECK(strstr(pgd_error_detail(), "norm_topk_prob") != NULL);
    remove(path);
}

static void test_errors(void) {
    pgd_model_preset p;
    CHECK_EQ_INT(pgd_model_preset_load("gpt-5", &p), PGD_ENOTFOUND);
    CHECK(strstr(pgd_error_detail(), "smollm2-135m") != NULL);
    char path[] = "/tmp/pgd_preset_XXXXXX.json";
    int fd = mkstemps(path, 5);
    REQUIRE(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"model_type\": \"gpt2\", \"hidden_size\": 64}", f);
    fclose(f);
    CHECK_EQ_INT(pgd_model_preset_load(path, &p), PGD_EUNSUPPORTED);
    CHECK(strstr(pgd_error_detail(), "gpt2") != NULL);
    f = fopen(path, "w");
    fputs("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 0}", f);
    fclose(f);
    CHECK_EQ_INT(pgd_model_preset_load(path, &p), PGD_EFORMAT);
    CHECK(strstr(pgd_error_detail(), "intermediate_size") != NULL);
    f = fopen(path, "w"); /* a Qwen3 with attention biases is not the published architecture */
    fputs("{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 64, "
          "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 300, "
          "\"attention_bias\": true}",
          f);
    fclose(f);
    CHECK_EQ_INT(pgd_model_preset_load(path, &p), PGD_EUNSUPPORTED);
    CHECK(strstr(pgd_error_detail(), "attention_bias") != NULL);
    remove(path);
}

/* bf16 keeps 8 significant bits: a float is exact in it when its low 16 bits are zero. */
static bool exact_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0xFFFF) == 0;
}

static void test_counter_hash_values(void) {
    uint64_t n_neg = 0;
    for (uint32_t t = 0; t < 40; t++)
        for (uint64_t i = 0; i < 5000; i++) {
            int32_t v = pgd_dummy_int(PGD_DUMMY_SEED, t, i);
            CHECK(v != 0 && v % 2 != 0 && v >= -127 && v <= 127);
            n_neg += v < 0;
            float f = pgd_dummy_value(PGD_DUMMY_SEED, t, i, pgd_dummy_matrix_shift(14336));
            CHECK(f != 0.0f && exact_bf16(f) && pgd_f16_to_f32(pgd_f32_to_f16(f)) == f);
        }
    /* balanced signs, and different tensors / seeds give different values */
    CHECK(n_neg > 90000 && n_neg < 110000);
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        same += pgd_dummy_int(PGD_DUMMY_SEED, 3, i) == pgd_dummy_int(PGD_DUMMY_SEED, 4, i);
        same += pgd_dummy_int(PGD_DUMMY_SEED, 3, i) == pgd_dummy_int(PGD_DUMMY_SEED + 1, 3, i);
    }
    CHECK(same < 60);
    CHECK_EQ_INT(pgd_dummy_matrix_shift(576), 11);
}

static void test_dummy_model_binds_every_weight(void) {
    pgd_model_preset p;
    REQUIRE(pgd_model_preset_load("smollm2-135m", &p) == 0);
    pgd_model *m = NULL;
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, false, &m) == 0);
    const pgd_model_config *c = &m->cfg;
    CHECK(m->tok_embd.type == PGD_TYPE_F16 && m->tok_embd.rows == c->n_vocab &&
          m->tok_embd.cols == c->n_embd);
    CHECK(m->output.data == m->tok_embd.data); /* tied */
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const pgd_layer_weights *L = &m->layers[l];
        CHECK(L->wq.data && L->wk.data && L->wv.data && L->wo.data && L->w_gate.data &&
              L->w_up.data && L->w_down.data && L->attn_norm.data && L->ffn_norm.data);
        CHECK(L->wk.rows == (uint64_t)c->n_head_kv * c->head_dim && L->w_down.cols == c->n_ff);
        CHECK(!L->bq.data); /* llama: no biases */
    }
    /* about 135 M parameters, two bytes each for the matrices */
    CHECK(m->weight_bytes > 250000000ull && m->weight_bytes < 290000000ull);
    const uint16_t *e = m->tok_embd.data;
    CHECK(pgd_f16_to_f32(e[0]) == pgd_dummy_value(PGD_DUMMY_SEED, PGD_DUMMY_TOK_EMBD, 0, 7));
    pgd_model_free(m);

    /* qwen3: the q and k head norms, [head_dim] each, from their own hash ids; no biases */
    REQUIRE(pgd_model_preset_load("qwen3-0.6b", &p) == 0);
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, false, &m) == 0);
    c = &m->cfg;
    CHECK(c->head_dim == 128 && (uint64_t)c->n_head * c->head_dim == 2 * c->n_embd);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const pgd_layer_weights *L = &m->layers[l];
        CHECK(L->q_norm.data && L->k_norm.data && L->q_norm.cols == c->head_dim &&
              L->k_norm.cols == c->head_dim && !L->bq.data);
        CHECK(L->wq.rows == 2048 && L->wo.cols == 2048);
    }
    const float *qn = m->layers[3].q_norm.data, *kn = m->layers[3].k_norm.data;
    CHECK(qn[5] ==
          1.0f + pgd_dummy_value(PGD_DUMMY_SEED, pgd_dummy_tensor_id(3, PGD_DUMMY_Q_NORM), 5, 10));
    CHECK(kn[5] ==
          1.0f + pgd_dummy_value(PGD_DUMMY_SEED, pgd_dummy_tensor_id(3, PGD_DUMMY_K_NORM), 5, 10));
    pgd_model_free(m);
}

int main(void) {
    RUN(test_builtin_shapes);
    RUN(test_builtin_moe_shapes);
    RUN(test_errors);
    RUN(test_counter_hash_values);
    RUN(test_dummy_model_binds_every_weight);
    return test_summary();
}
