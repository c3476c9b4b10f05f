/*
 * tests/gpu/test_cuda_forward.c — the whole CUDA forward pass against the CPU backend on the same
 * dummy weights (exact in f16 and bf16: engine/model/dummy.h), for a Llama shape with Llama 3
 * RoPE scaling (head_dim 64: prefill chunks' attention on tensor cores), a Qwen2 shape (biases,
 * NEOX RoPE; head_dim 32: every row's attention on CUDA cores), a Qwen3 shape (each q and k
 * head RMS-normed before NEOX RoPE; 4 heads of 32 over a hidden size of 64) and two mixtures of
 * experts (a Qwen3-MoE shape whose tokens take all its 8 experts; a one-layer Mixtral shape, 2
 * of 8: routing, grouped expert products and the mix on the device, kernels/cuda/moe.h):
 *   - chunked prefill of two sequences, then decode steps mixing them, then a third sequence that
 *     reuses the first one's full blocks (a prefix hit: only its suffix is computed) and a fourth
 *     that forks the first one's last, partial block (copy-on-write) — all in mixed batches;
 *   - every row's logits within a relative L2 error of 3e-2 of the CPU's (the GPU feeds its GEMMs
 *     bf16 activations, the CPU f32: about 2^-9 relative per element), and the greedy token
 *     sampled on the device equal to the CPU's argmax wherever the CPU's top two differ by more
 *     than 1e-2 of the range;
 *   - the weights the device fills from the hash itself (a shapes-only model) give bit-identical
 *     logits to the same weights uploaded from the host (f16 -> bf16 on the device);
 *   - a third CUDA backend with decode_gemv (one-row products on pagoda's GEMV kernel, the
 *     default; the others are opened without it, so cuBLASLt runs those) held to the same
 *     tolerance and greedy tokens;
 *   - a step with host rows and sampled rows together gives the sampled rows the tokens of the
 *     samples-only step and the host rows the bits of the full-logits step where the two
 *     steps' output-head products fall in one range of M of the fast cuBLASLt plans
 *     (kernels/cuda/gemm.h), else the same within 1e-4 (same_rows; an H200 showed the head of
 *     an 8-bit model with a vocabulary of 1501, kept in bf16, differ there); with the other
 *     rows asked as hidden states too (embeddings), those are the CPU's within the logits'
 *     relative L2 error (bf16 normed rows), and the logits and tokens keep theirs;
 *   - decode steps replayed as CUDA graphs (padded sizes 1, 2, 4, 8, each after one eager
 *     warm-up step; greedy, temperature, min-p, top-k + top-p rows with logprobs, and top-p
 *     rows whose nucleus outgrows the device's candidate list, which the backend samples on
 *     the host from the logits left on the device) sample exactly what the
 *     same steps give eagerly
 *     (--enforce-eager), leave the same KV cache behind (a full-logits step over every sequence
 *     afterwards: the same bits), and do replay graphs (the backend's graph counters); again
 *     with decode_gemv on both sides, and again on the Qwen3 and Qwen3-MoE shapes (a graph
 *     routes its padded rows too: a row's bits do not depend on the pairs beside it);
 *   - the GGUF files of every weight type (below), and a Qwen3 one;
 *   - with 8-bit weights (--gpu-weights q8_0) the Llama and Qwen3-MoE forwards against the CPU
 *     running the same 8-bit values (model_to_q8), decode graphs against eager steps, and GGUF
 *     files of Q8_0 and Q4_K loaded into 8 bits (test_llama_q8 and the tests after it);
 *   - likewise with 4-bit weights (--gpu-weights q4: model_to(PGD_TYPE_Q4_1)), and GGUF files of
 *     Q4_0, Q4_1 and Q4_K (4 bits as they are), F16 (8 bits) and a Q4_K_M mix (4 bits and 8 in one
 *     model: QKV fused of Q4_K and Q6_K parts goes to 8 bits) (test_llama_q4 and after it).
 * Exit 77 (skipped) without a GPU. Label `cuda`. Passes on an H200 (bench/results/gpu-h200.md,
 * every case on 2026-12-04) and on an H100 (as at bd7e959: before the Qwen3, mixture-of-experts,
 * 8- and 4-bit cases).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backends/cuda_plan.h" /* pgd_cuda_weight_bytes */
#include "engine/backends/factory.h"
#include "engine/model/dummy.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/preset.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gemm.h" /* pgd_cuda_gemm_bucket */
#include "support/preset_json.h"
#include "testutil.h"

enum { BS = 8, N_BLOCKS = 64, MAXT = 64 };
/* The vocabulary: the shapes' and the GGUF files' 1504, or (test_odd_vocab_*) 1501, not a
 * multiple of 8, whose head 8- and 4-bit weights keep in bf16 (cuda_plan.h). */
static uint32_t V = 1504;

typedef struct dev {
    pgd_backend *b;
    float *logits; /* [MAXT][V] */
    pgd_sample_result sampled[MAXT];
} dev;

/* The CUDA devices' weights: bf16, or 8 bits in the _q8 tests, 4 in the _q4 ones. */
static pgd_cuda_weights g_weights = PGD_CUDA_WEIGHTS_BF16;

/* What the printed lines say of g_weights (and of PGD_CUDA_DEQ_ROWS: forward_deq). */
static const char *weights_label(void) {
    static char label[64];
    const char *deq = getenv("PGD_CUDA_DEQ_ROWS");
    const char *w = g_weights == PGD_CUDA_WEIGHTS_Q8_0 ? "8" : "4";
    if (g_weights == PGD_CUDA_WEIGHTS_BF16) return "";
    if (deq)
        snprintf(label, sizeof label, " (%s-bit weights, dequantized from %s rows)", w, deq);
    else
        snprintf(label, sizeof label, " (%s-bit weights)", w);
    return label;
}

static int open_dev_opts(dev *d, const pgd_model *m, int device, bool eager, bool gemv) {
    pgd_backend_config bc = {
        .block_size = BS, .kv_dtype = PGD_KV_F16, .kv_blocks = N_BLOCKS, .max_tokens = MAXT};
    pgd_device_options o;
    pgd_device_options_default(&o);
    o.device = device;
    o.cuda.enforce_eager = eager;
    o.cuda.decode_gemv = gemv;
    o.cuda.weights = g_weights;
    d->logits = malloc((uint64_t)MAXT * V * sizeof(float));
    int rc = pgd_backend_create(m, &bc, &o, &d->b);
    if (rc) fprintf(stderr, "  backend: %s\n", pgd_error_detail());
    return rc;
}

static int open_dev_eager(dev *d, const pgd_model *m, int device, bool eager) {
    return open_dev_opts(d, m, device, eager, false);
}

static int open_dev(dev *d, const pgd_model *m, int device) {
    return open_dev_eager(d, m, device, false);
}

static void close_dev(dev *d) {
    pgd_backend_destroy(d->b);
    free(d->logits);
}

/* A batch under construction: sequences with explicit block tables. */
typedef struct batch {
    int32_t tokens[MAXT], pos[MAXT];
    int64_t slots[MAXT];
    uint32_t q_start[9], kv_len[8], rows[MAXT], n_tokens, n_seqs;
    int32_t tables[8][16];
    pgd_sample_row samples[8];
    uint32_t n_samples;
} batch;

/* Add positions [start, start + n) of a sequence whose tokens are tok[] and blocks table[]. */
static void add_seq(batch *b, const int32_t *tok, uint32_t start, uint32_t n, const int32_t *table,
                    bool sample) {
    uint32_t s = b->n_seqs++;
    b->q_start[s] = b->n_tokens;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = b->n_tokens++, p = start + i;
        b->tokens[t] = tok[p];
        b->pos[t] = (int32_t)p;
        b->slots[t] = (int64_t)table[p / BS] * BS + p % BS;
        b->rows[t] = t;
    }
    b->q_start[s + 1] = b->n_tokens;
    b->kv_len[s] = start + n;
    memcpy(b->tables[s], table, 16 * sizeof(int32_t));
    if (sample)
        b->samples[b->n_samples++] = (pgd_sample_row){
            .token = b->n_tokens - 1, .spec = {.temperature = 0.0f, .top_p = 1.0f}, .draw = 0};
}

static pgd_batch view(batch *b, bool samples) {
    return (pgd_batch){.n_tokens = b->n_tokens,
                       .tokens = b->tokens,
                       .positions = b->pos,
                       .slots = b->slots,
                       .n_seqs = b->n_seqs,
                       .q_start = b->q_start,
                       .kv_len = b->kv_len,
                       .block_tables = &b->tables[0][0],
                       .bt_stride = 16,
                       .n_logits = samples ? 0 : b->n_tokens,
                       .logit_rows = b->rows,
                       .n_samples = samples ? b->n_samples : 0,
                       .samples = b->samples};
}

static double g_worst;
static int g_sampled_checked, g_hidden_checked;
static double g_worst_hidden;

/* The mixed step's host rows (R of them; mrows: their tokens) against the full-logits step's
 * rows of those tokens. Only the output head's M differs between the two steps (every token
 * runs through the layers in both): the same bits where both M fall in one range of the fast
 * cuBLASLt plans (kernels/cuda/gemm.h fixes one algorithm a range of M, and promises no more),
 * else within 1e-4 relative L2 (another algorithm's f32 sums; any other row is O(1) away). A
 * head on cuBLASLt: every bf16 model's, and an 8- or 4-bit model's whose vocabulary is not of
 * 8s (kept in bf16: cuda_plan.h). */
static int g_rows_bits, g_rows_near;
static double g_worst_near;
static void same_rows(const float *mixed, const float *full, const uint32_t *mrows, uint32_t R,
                      uint32_t m_full, uint32_t m_mixed) {
    const bool bits = pgd_cuda_gemm_bucket(m_full) == pgd_cuda_gemm_bucket(m_mixed);
    for (uint32_t r = 0; r < R; r++) {
        const float *a = mixed + (uint64_t)r * V, *f = full + (uint64_t)mrows[r] * V;
        if (bits) {
            CHECK(memcmp(a, f, V * sizeof(float)) == 0);
            g_rows_bits++;
            continue;
        }
        double d2 = 0, r2 = 0;
        for (uint32_t v = 0; v < V; v++) {
            d2 += ((double)a[v] - f[v]) * ((double)a[v] - f[v]);
            r2 += (double)f[v] * f[v];
        }
        const double e = sqrt(d2 / r2);
        if (e > g_worst_near || e != e) g_worst_near = e;
        CHECK(e <= 1e-4);
        g_rows_near++;
    }
}

/* Run the batch on every device: full logits compared, then (same batch again: K/V rewritten
 * with the same values) the sampled rows against the CPU's argmax. devs: the CPU, then CUDA
 * ones; devs[1] and devs[2] must give the same bits (their weights differ only in how they
 * reached the device), devs[3] (decode_gemv: other products) is held to the CPU only. */
static void run(dev *devs, int n_dev, batch *b) {
    pgd_batch bt = view(b, false);
    for (int d = 0; d < n_dev; d++)
        CHECK_EQ_INT(pgd_backend_forward(devs[d].b, &bt, devs[d].logits, NULL), 0);
    for (uint32_t t = 0; t < b->n_tokens; t++) {
        const float *c = devs[0].logits + (uint64_t)t * V;
        for (int d = 1; d < n_dev; d += 2) { /* devs[2] is checked against devs[1] below */
            const float *g = devs[d].logits + (uint64_t)t * V;
            double d2 = 0, r2 = 0;
            for (uint32_t v = 0; v < V; v++) {
                d2 += ((double)g[v] - c[v]) * ((double)g[v] - c[v]);
                r2 += (double)c[v] * c[v];
            }
            double e = sqrt(d2 / r2);
            if (e > g_worst || e != e) g_worst = e; /* a NaN shows */
            CHECK(e <= 3e-2);
        }
        if (n_dev > 2) /* device-filled vs uploaded weights: the same bits */
            CHECK(memcmp(devs[1].logits + (uint64_t)t * V, devs[2].logits + (uint64_t)t * V,
                         V * sizeof(float)) == 0);
    }
    if (!b->n_samples) return;
    bt = view(b, true);
    for (int d = 1; d < n_dev; d++)
        CHECK_EQ_INT(pgd_backend_forward(devs[d].b, &bt, devs[d].logits, devs[d].sampled), 0);
    for (uint32_t i = 0; i < b->n_samples; i++) {
        const float *c = devs[0].logits + (uint64_t)b->samples[i].token * V;
        uint32_t best = 0, second = 1;
        if (c[1] > c[0]) best = 1, second = 0;
        float lo = c[0], hi = c[0];
        for (uint32_t v = 0; v < V; v++) {
            lo = c[v] < lo ? c[v] : lo;
            hi = c[v] > hi ? c[v] : hi;
            if (v < 2) continue;
            if (c[v] > c[best])
                second = best, best = v;
            else if (c[v] > c[second])
                second = v;
        }
        if (c[best] - c[second] <= 1e-2f * (hi - lo)) continue; /* too close to call */
        CHECK_EQ_INT(devs[1].sampled[i].token, (int32_t)best);
        if (n_dev > 3) CHECK_EQ_INT(devs[3].sampled[i].token, (int32_t)best);
        g_sampled_checked++;
    }
    /* a mixed step, as the runner makes them: host rows (every other unsampled token) and the
     * sampled rows in one call. The host rows get the bits of the full-logits pass, the sampled
     * rows the tokens of the samples-only pass (a row's bits do not depend on the batch). */
    bool sampled_row[MAXT] = {false};
    for (uint32_t i = 0; i < b->n_samples; i++) sampled_row[b->samples[i].token] = true;
    uint32_t mrows[MAXT], R = 0;
    for (uint32_t t = 0; t < b->n_tokens; t += 2)
        if (!sampled_row[t]) mrows[R++] = t;
    bt = view(b, true);
    bt.n_logits = R;
    bt.logit_rows = mrows;
    float *mixed = malloc((uint64_t)MAXT * V * sizeof(float));
    pgd_sample_result res[8];
    REQUIRE(mixed);
    for (int d = 1; d < n_dev && d < 3; d++) { /* devs[3]: its logits rows are another M */
        CHECK_EQ_INT(pgd_backend_forward(devs[d].b, &bt, mixed, res), 0);
        same_rows(mixed, devs[d].logits, mrows, R, b->n_tokens, R + b->n_samples);
        for (uint32_t i = 0; i < b->n_samples; i++)
            CHECK_EQ_INT(res[i].token, devs[d].sampled[i].token);
    }
    /* the same step asking the other rows' hidden states too: the CPU's values within bf16's
     * rounding, the logits and tokens unchanged */
    uint32_t hrows[MAXT], H = 0;
    for (uint32_t t = 1; t < b->n_tokens; t += 2)
        if (!sampled_row[t]) hrows[H++] = t;
    float *hid = malloc((uint64_t)MAXT * 256 * sizeof(float) * 2), *cpu_hid = hid + MAXT * 256;
    REQUIRE(hid);
    bt.n_hidden = H;
    bt.hidden_rows = hrows;
    bt.hidden = cpu_hid;
    CHECK_EQ_INT(pgd_backend_forward(devs[0].b, &bt, mixed, res), 0);
    bt.hidden = hid;
    for (int d = 1; d < n_dev && H; d++) {
        const uint32_t E = devs[0].b->model->cfg.n_embd;
        REQUIRE(E <= 256 && devs[d].b->caps.max_hidden_rows >= b->n_tokens);
        for (uint64_t i = 0; i < (uint64_t)H * E; i++) hid[i] = NAN;
        CHECK_EQ_INT(pgd_backend_forward(devs[d].b, &bt, mixed, res), 0);
        for (uint32_t h = 0; h < H; h++) {
            double d2 = 0, r2 = 0;
            for (uint32_t e = 0; e < E; e++) {
                double g = hid[(uint64_t)h * E + e], c = cpu_hid[(uint64_t)h * E + e];
                d2 += (g - c) * (g - c);
                r2 += c * c;
            }
            double err = r2 > 0 ? sqrt(d2 / r2) : INFINITY;
            if (err > g_worst_hidden || err != err) g_worst_hidden = err;
            CHECK(err <= 3e-2); /* as the logits; a NaN left fails too */
        }
        if (d < 3) {
            same_rows(mixed, devs[d].logits, mrows, R, b->n_tokens, R + b->n_samples);
            for (uint32_t i = 0; i < b->n_samples; i++)
                CHECK_EQ_INT(res[i].token, devs[d].sampled[i].token);
        }
        g_hidden_checked += H;
    }
    free(hid);
    free(mixed);
}

/* The test's model shapes. */
typedef enum {
    SHAPE_LLAMA3,
    SHAPE_QWEN2,
    SHAPE_QWEN3,
    SHAPE_QWEN3MOE,
    SHAPE_MIXTRAL,
    SHAPE_QWEN3MOE_96
} shape;
static const char *const k_shape_names[] = {"llama3",   "qwen2",   "qwen3",
                                            "qwen3moe", "mixtral", "qwen3moe-96"};

/* The test's Llama, Qwen2 or Qwen3 shape, through a config.json as a user would give it. Qwen3:
 * heads of 32 over a hidden size of 64 (four heads, 128 wide: wider than the hidden state, as
 * Qwen3-0.6B's), each q and k head RMS-normed before RoPE. */
static void load_preset(shape sh, pgd_model_preset *p) {
    static const char *const json[] = {
        [SHAPE_LLAMA3] =
            "{\"model_type\": \"llama\", \"hidden_size\": 256, \"intermediate_size\": 512, "
            "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
            "\"vocab_size\": 1504, \"max_position_embeddings\": 512, \"rope_theta\": 500000, "
            "\"tie_word_embeddings\": false, \"rope_scaling\": {\"rope_type\": \"llama3\", "
            "\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4, "
            "\"original_max_position_embeddings\": 64}}",
        [SHAPE_QWEN2] =
            "{\"model_type\": \"qwen2\", \"hidden_size\": 256, \"intermediate_size\": 640, "
            "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
            "\"vocab_size\": 1504, \"max_position_embeddings\": 512, \"rope_theta\": 1000000, "
            "\"tie_word_embeddings\": true}",
        [SHAPE_QWEN3] =
            "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 192, "
            "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
            "\"head_dim\": 32, \"vocab_size\": 1504, \"max_position_embeddings\": 512, "
            "\"rope_theta\": 1000000, \"rms_norm_eps\": 1e-6, \"attention_bias\": false, "
            "\"tie_word_embeddings\": true}",
        [SHAPE_QWEN3MOE] =
            "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 192, "
            "\"moe_intermediate_size\": 40, \"num_experts\": 8, \"num_experts_per_tok\": 8, "
            "\"norm_topk_prob\": true, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
            "\"num_key_value_heads\": 2, \"head_dim\": 32, \"vocab_size\": 1504, "
            "\"max_position_embeddings\": 512, \"rope_theta\": 1000000, \"rms_norm_eps\": 1e-6, "
            "\"tie_word_embeddings\": false}",
        /* the same with experts 96 wide: the 8-bit form's products take widths of 32s (the
         * down product's 96: a last K chunk of half the grouped kernel's 64) */
        [SHAPE_QWEN3MOE_96] =
            "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 192, "
            "\"moe_intermediate_size\": 96, \"num_experts\": 8, \"num_experts_per_tok\": 8, "
            "\"norm_topk_prob\": true, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
            "\"num_key_value_heads\": 2, \"head_dim\": 32, \"vocab_size\": 1504, "
            "\"max_position_embeddings\": 512, \"rope_theta\": 1000000, \"rms_norm_eps\": 1e-6, "
            "\"tie_word_embeddings\": false}",
        [SHAPE_MIXTRAL] =
            "{\"model_type\": \"mixtral\", \"hidden_size\": 128, \"intermediate_size\": 96, "
            "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 1, "
            "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 1504, "
            "\"max_position_embeddings\": 512, \"rope_theta\": 1000000, "
            "\"tie_word_embeddings\": false}",
    };
    /* the vocabulary V (the strings' 1504, or another) */
    char doc[1024];
    const char *at = strstr(json[sh], "\"vocab_size\": 1504");
    REQUIRE(at && strlen(json[sh]) < sizeof doc - 8);
    snprintf(doc, sizeof doc, "%.*s\"vocab_size\": %u%s", (int)(at - json[sh]), json[sh], V,
             at + strlen("\"vocab_size\": 1504"));
    REQUIRE(pgd_test_preset_json(doc, p) == 0 && p->cfg.n_vocab == V);
    if (sh == SHAPE_QWEN3) REQUIRE(p->cfg.qk_norm && p->cfg.head_dim == 32 && !p->cfg.qkv_bias);
    if (sh == SHAPE_QWEN3MOE)
        REQUIRE(p->cfg.n_expert == 8 && p->cfg.n_expert_used == 8 && p->cfg.n_ff_exp == 40);
    if (sh == SHAPE_MIXTRAL) REQUIRE(p->cfg.n_expert == 8 && p->cfg.n_ff_exp == 96);
}

/* One F16 matrix of a dummy model requantized into Q8_0 or Q4_1 blocks (`type`: the CPU's own
 * pgd_quantize_row_q8_0 / _q4_1) in memory added to *bufs. */
static void weight_to(pgd_weight *w, uint32_t type, void ***bufs, uint32_t *n_bufs) {
    if (!w->data || w->rows < 1 || w->cols % 32) return;
    REQUIRE(w->type == PGD_TYPE_F16);
    const bool q8 = type == PGD_TYPE_Q8_0;
    const uint64_t row_bytes =
        w->cols / 32 * (q8 ? sizeof(pgd_block_q8_0) : sizeof(pgd_block_q4_1));
    uint8_t *q = malloc(w->rows * row_bytes);
    float *row = malloc(w->cols * sizeof *row);
    void **more = realloc(*bufs, (*n_bufs + 1) * sizeof *more);
    REQUIRE(q && row && more);
    for (uint64_t r = 0; r < w->rows; r++) {
        REQUIRE(pgd_dequant_row(PGD_TYPE_F16, (const uint8_t *)w->data + r * w->row_bytes, row,
                                (int64_t)w->cols) == 0);
        if (q8)
            pgd_quantize_row_q8_0(row, q + r * row_bytes, (int64_t)w->cols);
        else
            pgd_quantize_row_q4_1(row, q + r * row_bytes, (int64_t)w->cols);
    }
    free(row);
    *bufs = more;
    (*bufs)[(*n_bufs)++] = q;
    w->type = type;
    w->data = q;
    w->row_bytes = row_bytes;
}

/* Every matrix of dummy model m (F16) in Q8_0 or Q4_1: the weights the CPU then runs are the
 * values the GPU's 8- or 4-bit form holds (the bf16 of a dummy value is the same number:
 * dummy.h), so the CPU stays the reference of an 8- or 4-bit GPU within the tolerance the bf16
 * one meets. */
static void model_to(pgd_model *m, uint32_t type, void ***bufs, uint32_t *n_bufs) {
    const bool tied = m->output.data == m->tok_embd.data;
    /* a head the GPU keeps in bf16 (a vocabulary not of 8s) stays F16 here too: the same values
     * (dummy.h) */
    const bool head_f16 = m->cfg.n_vocab % 8 != 0;
    if (!(tied && head_f16)) weight_to(&m->tok_embd, type, bufs, n_bufs);
    if (tied)
        m->output = m->tok_embd;
    else if (!head_f16)
        weight_to(&m->output, type, bufs, n_bufs);
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        pgd_layer_weights *L = &m->layers[l];
        pgd_weight *mats[] = {&L->wq,     &L->wk,   &L->wv,     &L->wo,
                              &L->w_gate, &L->w_up, &L->w_down, &L->router};
        for (size_t i = 0; i < PGD_ARRAY_LEN(mats); i++) weight_to(mats[i], type, bufs, n_bufs);
        for (uint32_t e = 0; e < m->cfg.n_expert; e++) {
            weight_to(&L->exp_gate[e], type, bufs, n_bufs);
            weight_to(&L->exp_up[e], type, bufs, n_bufs);
            weight_to(&L->exp_down[e], type, bufs, n_bufs);
        }
    }
}

/* The forward on every device: the CPU, the CUDA backend with weights the device fills from the
 * hash, the same with weights uploaded from the host (the same bits), the same with the decode
 * GEMV. With g_weights q8_0 (q4) the CPU's model holds the 8-bit (4-bit) values too
 * (model_to), the hash-filled device quantizes bf16 values and the uploading one splits Q8_0
 * (Q4_1) blocks. */
static void forward_matches(shape sh) {
    pgd_model_preset p;
    load_preset(sh, &p);
    pgd_model *data = NULL, *shapes = NULL;
    void **bufs = NULL;
    uint32_t n_bufs = 0;
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, false, &data) == 0);
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, true, &shapes) == 0);
    if (g_weights == PGD_CUDA_WEIGHTS_Q8_0) model_to(data, PGD_TYPE_Q8_0, &bufs, &n_bufs);
    if (g_weights == PGD_CUDA_WEIGHTS_Q4) model_to(data, PGD_TYPE_Q4_1, &bufs, &n_bufs);
    enum { N_DEV = 4 };
    dev devs[N_DEV] = {0};
    REQUIRE(open_dev(&devs[0], data, PGD_DEVICE_CPU) == 0);
    REQUIRE(open_dev(&devs[1], shapes, PGD_DEVICE_CUDA) == 0);
    REQUIRE(open_dev(&devs[2], data, PGD_DEVICE_CUDA) == 0);
    REQUIRE(open_dev_opts(&devs[3], data, PGD_DEVICE_CUDA, false, true) == 0);
    g_worst = 0;
    g_sampled_checked = g_hidden_checked = 0;
    g_worst_hidden = 0;
    g_rows_bits = g_rows_near = 0;
    g_worst_near = 0;

    int32_t a[64], c[64], f[64];
    for (int i = 0; i < 64; i++) {
        a[i] = (int32_t)((i * 131 + 7) % V);
        c[i] = i < 24 ? a[i] : (int32_t)((i * 17 + 3) % V); /* shares A's first 24 = 3 blocks */
        f[i] = i < 37 ? a[i] : (int32_t)((i * 29 + 1) % V); /* A's 37, then its own */
    }
    const int32_t ta[16] = {1, 2, 3, 4, 5, 6, 7, 8}, tb[16] = {9, 10, 11, 12, 13, 14, 15, 16};
    const int32_t tc[16] = {1, 2, 3, 20, 21, 22, 23, 24}; /* prefix hit on A's blocks 1-3 */
    const int32_t tf[16] = {1,  2,  3, 4, 30,
                            31, 32, 33}; /* fork: A's 4 full blocks, a copy of
                                             A's partial block 5 in 30 */
    int32_t bseq[64];
    for (int i = 0; i < 64; i++) bseq[i] = (int32_t)((i * 53 + 11) % V);
    /* chunked prefill: A in chunks of 13 and 11, B in one */
    batch b = {0};
    add_seq(&b, a, 0, 13, ta, false);
    add_seq(&b, bseq, 0, 30, tb, true);
    run(devs, N_DEV, &b);
    memset(&b, 0, sizeof b);
    add_seq(&b, a, 13, 24, ta, true); /* A holds 37 positions: blocks 1-4 full, 5 partial */
    run(devs, N_DEV, &b);
    /* decode A and B with C's suffix (prefix hit: positions 24..39 of C) */
    for (uint32_t step = 0; step < 3; step++) {
        memset(&b, 0, sizeof b);
        add_seq(&b, a, 37 + step, 1, ta, true);
        add_seq(&b, bseq, 30 + step, 1, tb, true);
        if (step == 0) add_seq(&b, c, 24, 16, tc, true);
        run(devs, N_DEV, &b);
    }
    /* fork: F shares A's first 37 positions; its partial block 5 is copied into 30 first */
    int32_t src = 5, dst = 30;
    for (int d = 0; d < N_DEV; d++)
        CHECK_EQ_INT(devs[d].b->ops->copy_blocks(devs[d].b, &src, &dst, 1), 0);
    memset(&b, 0, sizeof b);
    add_seq(&b, f, 37, 8, tf, true);
    add_seq(&b, a, 40, 1, ta, true);
    run(devs, N_DEV, &b);
    fprintf(stderr,
            "    %s%s: worst logits error %.2e, %d device greedy tokens checked; worst "
            "hidden-state error %.2e over %d rows; mixed steps' host rows: %d the same bits, "
            "%d of another range within %.2e\n",
            k_shape_names[sh], weights_label(), g_worst, g_sampled_checked, g_worst_hidden,
            g_hidden_checked, g_rows_bits, g_rows_near, g_worst_near);
    CHECK(g_sampled_checked >= 5);
    CHECK(g_hidden_checked >= 20);
    CHECK(g_rows_bits >= 20);
    for (int d = 0; d < N_DEV; d++) close_dev(&devs[d]);
    pgd_model_free(data);
    pgd_model_free(shapes);
    for (uint32_t i = 0; i < n_bufs; i++) free(bufs[i]);
    free(bufs);
}

static void test_llama(void) {
    forward_matches(SHAPE_LLAMA3);
}

static bool same_result(const pgd_sample_result *a, const pgd_sample_result *b) {
    if (a->token != b->token || memcmp(&a->logprob, &b->logprob, sizeof a->logprob) ||
        a->n_top != b->n_top)
        return false;
    for (int32_t i = 0; i < a->n_top; i++)
        if (a->top[i].token != b->top[i].token ||
            memcmp(&a->top[i].logprob, &b->top[i].logprob, sizeof(float)))
            return false;
    return true;
}

/* Decode steps as CUDA graphs vs the same steps run eagerly, on a Llama (or another) shape; with
 * gemv, both with decode_gemv (the GEMV kernel in the one-row graph, cuBLASLt in the others). */
static void graphs_match_eager(shape sh, bool gemv) {
    pgd_model_preset p;
    load_preset(sh, &p);
    pgd_model *shapes = NULL;
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, true, &shapes) == 0);
    dev g = {0}, e = {0}; /* graphs, eager */
    REQUIRE(open_dev_opts(&g, shapes, PGD_DEVICE_CUDA, false, gemv) == 0);
    REQUIRE(open_dev_opts(&e, shapes, PGD_DEVICE_CUDA, true, gemv) == 0);
    dev *both[2] = {&g, &e};

    /* 8 sequences: prompt of 3 + s tokens, then decode; sequence s owns blocks 1 + 7s .. 7 + 7s */
    enum { NS = 8 };
    int32_t tok[NS][56], table[NS][16] = {{0}};
    uint32_t len[NS];
    for (uint32_t s = 0; s < NS; s++) {
        for (uint32_t i = 0; i < 56; i++) tok[s][i] = (int32_t)((s * 97 + i * 31 + 5) % V);
        for (uint32_t k = 0; k < 7; k++) table[s][k] = (int32_t)(1 + 7 * s + k);
        len[s] = 3 + s; /* 52 prompt tokens in all: one step of at most MAXT */
    }
    batch b = {0};
    for (uint32_t s = 0; s < NS; s++) add_seq(&b, tok[s], 0, len[s], table[s], false);
    pgd_batch bt = view(&b, false);
    for (int d = 0; d < 2; d++)
        CHECK_EQ_INT(pgd_backend_forward(both[d]->b, &bt, both[d]->logits, NULL), 0);

    /* decode rounds over the first n sequences, padded to 8, 4, 1, 2 (each size's first step
     * runs eagerly, a warm-up), then 8 (captured), 8, 8, 8, 4 (captured), 1, 2, 4 */
    const uint32_t rounds[] = {8, 3, 1, 2, 5, 7, 8, 6, 3, 1, 2, 4};
    uint32_t steps = 0, checked = 0;
    for (uint32_t r = 0; r < PGD_ARRAY_LEN(rounds); r++) {
        memset(&b, 0, sizeof b);
        for (uint32_t s = 0; s < rounds[r]; s++) {
            add_seq(&b, tok[s], len[s], 1, table[s], true);
            len[s]++;
            pgd_sample_row *sr = &b.samples[s];
            switch ((s + r) % 5) { /* greedy, temperature, min-p, top-k + top-p, top-p */
            case 0:
                sr->spec = (pgd_sample_spec){.temperature = 0.0f, .top_p = 1.0f};
                break;
            case 1:
                sr->spec = (pgd_sample_spec){
                    .temperature = 0.8f, .top_p = 1.0f, .logprobs = true, .top_logprobs = 3};
                break;
            case 2:
                sr->spec = (pgd_sample_spec){.temperature = 1.2f, .top_p = 1.0f, .min_p = 0.05f};
                break;
            case 3:
                sr->spec = (pgd_sample_spec){
                    .temperature = 0.9f, .top_k = 30, .top_p = 0.9f, .logprobs = true};
                break;
            default: /* nearly flat logits, 1504 ids: a nucleus past the device's candidate
                        list, sampled by the host from the logits the device left */
                sr->spec = (pgd_sample_spec){.temperature = 2.0f, .top_p = 0.95f};
            }
            sr->draw = 0x9E3779B97F4A7C15ull * (r * NS + s + 1);
        }
        bt = view(&b, true);
        int32_t compact[NS * 7];
        if (r % 2) { /* tables of stride 7, as the scheduler packs them: the graph re-strides */
            for (uint32_t s = 0; s < b.n_seqs; s++)
                memcpy(compact + s * 7, b.tables[s], 7 * sizeof(int32_t));
            bt.block_tables = compact;
            bt.bt_stride = 7;
        }
        for (int d = 0; d < 2; d++)
            CHECK_EQ_INT(pgd_backend_forward(both[d]->b, &bt, both[d]->logits, both[d]->sampled),
                         0);
        steps++;
        for (uint32_t i = 0; i < b.n_samples; i++) {
            CHECK(same_result(&g.sampled[i], &e.sampled[i]));
            CHECK(g.sampled[i].token >= 0 && g.sampled[i].token < (int32_t)V);
            checked++;
        }
    }
    /* the KV cache the graphs wrote: a full-logits step over every sequence's next position */
    memset(&b, 0, sizeof b);
    for (uint32_t s = 0; s < NS; s++) add_seq(&b, tok[s], len[s], 1, table[s], false);
    bt = view(&b, false);
    for (int d = 0; d < 2; d++)
        CHECK_EQ_INT(pgd_backend_forward(both[d]->b, &bt, both[d]->logits, NULL), 0);
    CHECK(memcmp(g.logits, e.logits, (uint64_t)NS * V * sizeof(float)) == 0);

    pgd_cuda_graph_stats gs, es;
    pgd_backend_cuda_graph_stats(g.b, &gs);
    pgd_backend_cuda_graph_stats(e.b, &es);
    fprintf(stderr,
            "    graphs (%s%s%s): %u captured, %llu replays of %u decode steps, %u rows equal\n",
            k_shape_names[sh], gemv ? ", decode_gemv" : "", weights_label(), gs.captured,
            (unsigned long long)gs.replays, steps, checked);
    CHECK(!gs.off && gs.captured == 4 && gs.replays == steps - 4);
    CHECK(es.off && es.captured == 0 && es.replays == 0);
    close_dev(&g);
    close_dev(&e);
    pgd_model_free(shapes);
}

static void test_graphs_match_eager(void) {
    graphs_match_eager(SHAPE_LLAMA3, false);
}

static void test_graphs_match_eager_gemv(void) {
    graphs_match_eager(SHAPE_LLAMA3, true);
}

static void test_graphs_match_eager_qwen3(void) {
    graphs_match_eager(SHAPE_QWEN3, false);
}

static void test_qwen(void) {
    forward_matches(SHAPE_QWEN2);
}

static void test_qwen3(void) {
    forward_matches(SHAPE_QWEN3);
}

/* Mixtures of experts. Where a token's K-th and next router logits are nearly equal, the GPU
 * (bf16 activations) may choose another expert than the CPU (f32), and that token's logits then
 * differ by far more than the tolerance — as between any two engines: with 16 experts, 4 a token,
 * this test's tokens met gaps of 1e-3 in logits ranging over 2.6, and two tokens' logits were
 * 22% off. So the Qwen3-MoE shape routes every token to all its experts (8 of 8: no choice to
 * differ; experts 40 wide, partial tiles in the grouped products; 2 layers, each with experts of
 * its own), and the Mixtral shape (2 of 8, one layer: the emulator's time) chooses, on fixed tokens
 * and weights whose choices the CPU and the GPU were seen to agree on (its worst error, printed, is
 * of the dense shapes' size): a change of the dummy hash or of the tokens may meet a near tie
 * there, which is then no bug. The choice itself is compared bit for bit with its twin in
 * test_cuda_moe.c. */
static void test_qwen3moe(void) {
    forward_matches(SHAPE_QWEN3MOE);
}

static void test_mixtral(void) {
    forward_matches(SHAPE_MIXTRAL);
}

static void test_graphs_match_eager_moe(void) {
    graphs_match_eager(SHAPE_QWEN3MOE, false);
}

/* 8-bit weights (--gpu-weights q8_0): the dense products on the tensor-core kernel and the GEMV
 * (devs[3]), the embedding and the output head from the 8-bit form, on the Llama shape; the
 * experts' grouped products on the Qwen3-MoE one (every token through every expert, as above);
 * decode graphs with the 8-bit GEMV against eager steps. */
static void test_llama_q8(void) {
    g_weights = PGD_CUDA_WEIGHTS_Q8_0;
    forward_matches(SHAPE_LLAMA3);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

/* A vocabulary not of 8s (1501, as a tokenizer with tokens added has): with 8-bit weights on the
 * Llama shape, its head in bf16 (a cuBLASLt plan, the bf16 GEMV at few rows) beside the 8-bit
 * embedding, the device's weight bytes those cuda_plan.h's auto sizing counts; with 4-bit ones on
 * the tied Qwen2 shape, the one matrix in bf16 (the embedding read from bf16 too). */
static void odd_vocab(pgd_cuda_weights w, shape sh) {
    V = 1501;
    g_weights = w;
    pgd_model_preset p;
    load_preset(sh, &p);
    pgd_model *shapes = NULL;
    REQUIRE(pgd_model_dummy(&p, PGD_DUMMY_SEED, true, &shapes) == 0);
    dev d = {0};
    REQUIRE(open_dev(&d, shapes, PGD_DEVICE_CUDA) == 0);
    const uint64_t want = pgd_cuda_weight_bytes(&p.cfg, true);
    if (w == PGD_CUDA_WEIGHTS_Q8_0) CHECK_EQ_INT(d.b->caps.weight_bytes, want);
    fprintf(stderr, "    vocabulary 1501%s: %llu weight bytes on the device (8 bits: %llu)\n",
            weights_label(), (unsigned long long)d.b->caps.weight_bytes, (unsigned long long)want);
    close_dev(&d);
    pgd_model_free(shapes);
    forward_matches(sh);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
    V = 1504;
}

static void test_odd_vocab_q8(void) {
    odd_vocab(PGD_CUDA_WEIGHTS_Q8_0, SHAPE_LLAMA3);
}

static void test_odd_vocab_q4(void) {
    odd_vocab(PGD_CUDA_WEIGHTS_Q4, SHAPE_QWEN2);
}

static void test_qwen3moe_q8(void) {
    g_weights = PGD_CUDA_WEIGHTS_Q8_0;
    forward_matches(SHAPE_QWEN3MOE_96);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

static void test_graphs_match_eager_q8(void) {
    g_weights = PGD_CUDA_WEIGHTS_Q8_0;
    graphs_match_eager(SHAPE_LLAMA3, true);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

/* Decode graphs whose dense products run on cuBLASLt over the dequantized weights: with
 * PGD_CUDA_DEQ_ROWS=2 and no GEMV, the captured steps of 2, 4 and 8 rows take that path (the
 * defaults, 256 rows in 8 bits and 128 in 4, put decode steps of that many sequences there), the
 * one-row steps the 8- or 4-bit tensor-core kernel. */
static void graphs_match_eager_deq(pgd_cuda_weights w) {
    REQUIRE(setenv("PGD_CUDA_DEQ_ROWS", "2", 1) == 0);
    g_weights = w;
    graphs_match_eager(SHAPE_LLAMA3, false);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
    unsetenv("PGD_CUDA_DEQ_ROWS");
}

static void test_graphs_match_eager_q8_deq(void) {
    graphs_match_eager_deq(PGD_CUDA_WEIGHTS_Q8_0);
}

static void test_graphs_match_eager_q4_deq(void) {
    graphs_match_eager_deq(PGD_CUDA_WEIGHTS_Q4);
}

/* Every weight type the device dequantizes, from GGUF files the gguf package wrote
 * (tests/gpu/make_gguf.py: 1 layer, head_dim 64, vocabulary V), and a Qwen3 file (F16, head_dim
 * 128, attn_q_norm / attn_k_norm read from the file): the CUDA backend loads the raw
 * tensors (dequantized to bf16 on the device, fused there) and the CPU backend the same file
 * dequantized to f32 (PGD_MODEL_F32: the precise reference); a chunked prefill, then decode
 * steps, through run() (logits within its tolerance, greedy tokens where the CPU's top two are
 * clear). The folder is PGD_TEST_GGUF_DIR (make test-cuda-emu and scripts/gpu-check set it; unset:
 * said, not checked; set with a file missing: a failure). */
static void gguf_types(const char *const *types, size_t n_types, int ref_flags) {
    const char *dir = getenv("PGD_TEST_GGUF_DIR");
    if (!dir) {
        fprintf(stderr, "    PGD_TEST_GGUF_DIR unset: the GGUF weight types are not checked (run "
                        "tests/gpu/make_gguf.py DIR and set it)\n");
        return;
    }
    for (size_t k = 0; k < n_types; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tiny-%s.gguf", dir, types[k]);
        pgd_gguf *g = NULL;
        pgd_model *raw = NULL, *f32 = NULL;
        if (pgd_gguf_open(path, &g) || pgd_model_load(g, PGD_MODEL_RAW | PGD_MODEL_QUIET, &raw) ||
            pgd_model_load(g, ref_flags | PGD_MODEL_QUIET, &f32)) {
            fprintf(stderr, "    %s: %s\n", path, pgd_error_detail());
            CHECK(0);
            pgd_model_free(raw);
            pgd_gguf_close(g);
            continue;
        }
        REQUIRE(raw->cfg.n_vocab == V);
        dev devs[2] = {0};
        REQUIRE(open_dev(&devs[0], f32, PGD_DEVICE_CPU) == 0);
        REQUIRE(open_dev(&devs[1], raw, PGD_DEVICE_CUDA) == 0);
        g_worst = 0;
        g_sampled_checked = 0;
        int32_t tok[48];
        for (int i = 0; i < 48; i++) tok[i] = (int32_t)((i * 97 + 13) % 256); /* byte tokens */
        const int32_t table[16] = {1, 2, 3, 4, 5, 6, 7};
        batch b = {0};
        add_seq(&b, tok, 0, 20, table, false); /* a prefill in two chunks (tensor cores) */
        run(devs, 2, &b);
        memset(&b, 0, sizeof b);
        add_seq(&b, tok, 20, 17, table, true);
        run(devs, 2, &b);
        for (uint32_t step = 0; step < 3; step++) { /* decode rows */
            memset(&b, 0, sizeof b);
            add_seq(&b, tok, 37 + step, 1, table, true);
            run(devs, 2, &b);
        }
        fprintf(stderr, "    %s%s: worst logits error %.2e, %d device greedy tokens checked\n",
                types[k], weights_label(), g_worst, g_sampled_checked);
        close_dev(&devs[0]);
        close_dev(&devs[1]);
        pgd_model_free(raw);
        pgd_model_free(f32);
        pgd_gguf_close(g);
    }
}

static void test_gguf_types(void) {
    static const char *const types[] = {"F32",  "F16",  "BF16", "Q8_0",      "Q4_0",
                                        "Q4_1", "Q5_0", "Q5_1", "Q2_K",      "Q3_K",
                                        "Q4_K", "Q5_K", "Q6_K", "qwen3-F16", "qwen3moe-Q4_K"};
    gguf_types(types, PGD_ARRAY_LEN(types), PGD_MODEL_F32);
}

/* 8-bit weights from GGUF files: Q8_0's blocks split as they are (the CPU's f32 reference then
 * holds the very values), a K-quant's values requantized (the CPU's f32 holds the K-quant's:
 * the requantization's error shows in the printed worst error). */
static void test_gguf_types_q8(void) {
    static const char *const types[] = {"Q8_0", "Q4_K", "qwen3moe-Q4_K"};
    g_weights = PGD_CUDA_WEIGHTS_Q8_0;
    gguf_types(types, PGD_ARRAY_LEN(types), PGD_MODEL_F32);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

/* 4-bit weights (--gpu-weights q4), as the 8-bit tests above: every matrix of the dummy models
 * in 4 bits (the CPU's model in Q4_1, model_to) — the GEMV and the tensor-core kernel's 4-bit
 * forms, the embedding and the output head from the 4-bit form, the experts' grouped products. */
static void test_llama_q4(void) {
    g_weights = PGD_CUDA_WEIGHTS_Q4;
    forward_matches(SHAPE_LLAMA3);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

/* The 8- and 4-bit dense products of many rows on cuBLASLt over the weights dequantized to bf16
 * (kernels/cuda/gemm.h's pgd_cuda_gemm_deq): PGD_CUDA_DEQ_ROWS=16 sends this test's steps of 16
 * rows and more there (a prefill of 43 rows, one of 24, a decode step with a chunk: 18), the
 * others to the kernels above; the values are those of the 8 or 4 bits rounded once to bf16, as
 * --gpu-weights bf16 holds them, so the CPU's 8- or 4-bit model is matched within the bf16
 * tolerance. */
static void forward_deq(pgd_cuda_weights w) {
    REQUIRE(setenv("PGD_CUDA_DEQ_ROWS", "16", 1) == 0);
    g_weights = w;
    forward_matches(SHAPE_LLAMA3);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
    unsetenv("PGD_CUDA_DEQ_ROWS");
}

static void test_llama_q8_deq(void) {
    forward_deq(PGD_CUDA_WEIGHTS_Q8_0);
}

static void test_llama_q4_deq(void) {
    forward_deq(PGD_CUDA_WEIGHTS_Q4);
}

static void test_qwen3moe_q4(void) {
    g_weights = PGD_CUDA_WEIGHTS_Q4;
    forward_matches(SHAPE_QWEN3MOE_96);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

static void test_graphs_match_eager_q4(void) {
    g_weights = PGD_CUDA_WEIGHTS_Q4;
    graphs_match_eager(SHAPE_LLAMA3, true);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

/* 4-bit weights from GGUF files: Q4_0, Q4_1 and Q4_K blocks as they are (Q4_K re-blocked), F16
 * in 8 bits (requantized), a Q4_K_M mix: its Q4_K matrices in 4 bits, its Q6_K ones (V, down,
 * output) in 8, the fused QKV's parts each in theirs (test_gguf_q4_k_m_bytes), and Q4_K with a
 * Q8_0 V: a QKV of 4- and 8-bit parts, the values exact in both. The CPU's reference here is the
 * file as the CPU backend keeps it by default (Q4_0, Q4_1, Q8_0 and F16 as they are, Q4_K
 * re-blocked into Q4_1, Q6_K requantized into Q8_0: engine/model/model.h): the values the GPU
 * holds, but for F16 (the GPU's 8 bits: their error shows in the printed worst error). Against
 * the f32 reference a Q6_K matrix's requantization alone moves these small models' logits by
 * several 1e-2, on either device. The mix is the worst-conditioned file: its bf16 weights against
 * the f32 CPU differ by 2.2e-2 in the emulator, its 4-bit ones against this reference by 2.4e-2
 * (Q4_K alone: 2e-4; Q4_K with a Q8_0 V: 3.9e-4). */
static void test_gguf_types_q4(void) {
    static const char *const types[] = {"Q4_0",    "Q4_1", "Q4_K",         "Q4_K_M",
                                        "Q4_K_V8", "F16",  "qwen3moe-Q4_K"};
    g_weights = PGD_CUDA_WEIGHTS_Q4;
    gguf_types(types, PGD_ARRAY_LEN(types), 0);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
}

/* --gpu-weights q4 on the Q4_K_M mix keeps each of its Q4_K matrices in 4 bits — the Q and K
 * parts of its fused QKV too, beside the V part's 8 bits — and only its Q6_K matrices (V, down,
 * output) in 8: its weights take the bytes of the Q4_K file of the same shapes (every matrix in 4
 * bits) and, for each Q6_K matrix, 14 more a block of 32 (an 8-bit block of 32 weights is 34
 * bytes, a 4-bit one 20: q8.h, q4.h), counted here from the file's tensor types. A QKV moved
 * whole into 8 bits adds its Q and K parts' 14 a block too. */
static void test_gguf_q4_k_m_bytes(void) {
    const char *dir = getenv("PGD_TEST_GGUF_DIR");
    if (!dir) return; /* gguf_types says so */
    static const char *const types[] = {"Q4_K", "Q4_K_M"};
    uint64_t bytes[2] = {0}, more = 0;
    g_weights = PGD_CUDA_WEIGHTS_Q4;
    for (int k = 0; k < 2; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tiny-%s.gguf", dir, types[k]);
        pgd_gguf *g = NULL;
        pgd_model *raw = NULL;
        REQUIRE(pgd_gguf_open(path, &g) == 0);
        REQUIRE(pgd_model_load(g, PGD_MODEL_RAW | PGD_MODEL_QUIET, &raw) == 0);
        dev d = {0};
        REQUIRE(open_dev(&d, raw, PGD_DEVICE_CUDA) == 0);
        bytes[k] = d.b->caps.weight_bytes;
        const pgd_weight *mats[2 + 7 * 64] = {&raw->tok_embd, &raw->output};
        uint32_t n = 2;
        REQUIRE(raw->cfg.n_layer <= 64);
        for (uint32_t l = 0; l < raw->cfg.n_layer; l++) {
            const pgd_layer_weights *L = &raw->layers[l];
            const pgd_weight *lm[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                      &L->w_gate, &L->w_up, &L->w_down};
            for (size_t i = 0; i < PGD_ARRAY_LEN(lm); i++) mats[n++] = lm[i];
        }
        for (uint32_t i = 0; k == 1 && i < n; i++)
            if (mats[i]->type == PGD_TYPE_Q6_K) more += mats[i]->rows * mats[i]->cols / 32 * 14;
        close_dev(&d);
        pgd_model_free(raw);
        pgd_gguf_close(g);
    }
    g_weights = PGD_CUDA_WEIGHTS_BF16;
    fprintf(stderr,
            "    4-bit weights: Q4_K %llu bytes, Q4_K_M %llu (its Q6_K matrices: %llu more)\n",
            (unsigned long long)bytes[0], (unsigned long long)bytes[1], (unsigned long long)more);
    CHECK(more > 0);
    CHECK(bytes[1] == bytes[0] + more);
}

/* Q4_K files, dense, with experts and with a Q8_0 V (the fused QKV's parts in 4 and 8 bits, each
 * its own chunks' plans writing its columns), with their prefill chunks (20 and 17 rows) on
 * cuBLASLt over the dequantized weights (PGD_CUDA_DEQ_ROWS=16), against the reference above (the
 * emulator: 2.1e-4, 3.7e-4 and 3.9e-4, as in 4 bits). Not the Q4_K_M mix, whose bf16 rounding alone
 * moves its logits by 2.2e-2 (above): there 2.8e-2, too near the tolerance to tell anything. */
static void test_gguf_q4_deq(void) {
    static const char *const types[] = {"Q4_K", "qwen3moe-Q4_K", "Q4_K_V8"};
    REQUIRE(setenv("PGD_CUDA_DEQ_ROWS", "16", 1) == 0);
    g_weights = PGD_CUDA_WEIGHTS_Q4;
    gguf_types(types, PGD_ARRAY_LEN(types), 0);
    g_weights = PGD_CUDA_WEIGHTS_BF16;
    unsetenv("PGD_CUDA_DEQ_ROWS");
}

int main(void) {
    if (pgd_cuda_devices(NULL) == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    /* PGD_FORWARD_PART=1: the forwards against the CPU only; =2: the graphs and the GGUF files
     * only (CI runs the halves on the emulator on different days: .ci/run); =q8 / =q4: the 8- /
     * 4-bit weights' tests of both; unset: all */
    const char *part = getenv("PGD_FORWARD_PART");
    const bool only8 = part && !strcmp(part, "q8"), only4 = part && !strcmp(part, "q4");
    const bool bf = !only8 && !only4, r8 = !only4, r4 = !only8;
    const bool one = !part || strcmp(part, "2"), two = !part || strcmp(part, "1");
    if (one && bf) {
        RUN(test_llama);
        RUN(test_qwen);
        RUN(test_qwen3);
        RUN(test_qwen3moe);
        RUN(test_mixtral);
    }
    if (one && r8) {
        RUN(test_llama_q8);
        RUN(test_qwen3moe_q8);
        RUN(test_llama_q8_deq);
        RUN(test_odd_vocab_q8);
    }
    if (one && r4) {
        RUN(test_llama_q4);
        RUN(test_qwen3moe_q4);
        RUN(test_llama_q4_deq);
        RUN(test_odd_vocab_q4);
    }
    if (two && bf) {
        RUN(test_graphs_match_eager);
        RUN(test_graphs_match_eager_gemv);
        RUN(test_graphs_match_eager_qwen3);
        RUN(test_graphs_match_eager_moe);
        RUN(test_gguf_types);
    }
    if (two && r8) {
        RUN(test_graphs_match_eager_q8);
        RUN(test_graphs_match_eager_q8_deq);
        RUN(test_gguf_types_q8);
    }
    if (two && r4) {
        RUN(test_graphs_match_eager_q4);
        RUN(test_graphs_match_eager_q4_deq);
        RUN(test_gguf_types_q4);
        RUN(test_gguf_q4_k_m_bytes);
        RUN(test_gguf_q4_deq);
    }
    return test_summary();
}
