/*
 * engine/backends/cpu.c — the CPU backend: llama-family forward pass over a paged KV cache.
 *
 * Owns: the KV cache (per layer K [n_blocks][n_kv_head][head_dim][block_size] and
 * V [n_blocks][n_kv_head][block_size][head_dim], f32 or f16 elements as configured; see
 * kernels/cpu/attention.h), the thread pool, scratch activations sized for cfg.max_tokens
 * tokens, and with int8 activations a packed copy of the matmul weights (pgd_q8_pack; about
 * the model's size).
 * Every op is row-independent and reduces in a fixed order, so a token's logits do not depend
 * on what else shares its batch (see kernels/cpu/matmul.h for the matmul guarantee).
 *
 * Threading: one caller at a time (the scheduler thread); work fans out on the pool.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/backends/cpu.h"
#include "engine/runner.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/threadpool.h"

/* A layer's matmul weights, in the order pack_weights walks them. */
enum { PK_Q, PK_K, PK_V, PK_O, PK_GATE, PK_UP, PK_DOWN, PK_COUNT };

static const pgd_weight *layer_weight(const pgd_layer_weights *L, int i) {
    const pgd_weight *w[PK_COUNT] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                     &L->w_gate, &L->w_up, &L->w_down};
    return w[i];
}

typedef struct cpu_backend {
    pgd_backend base;
    pgd_cpu_options opt;
    uint32_t n_blocks, block_size, max_tokens;
    pgd_kv_dtype kv_dtype;
    pgd_threadpool *tp;
    uint32_t n_threads;
    void *k_cache, *v_cache; /* [n_layer][layer_bytes], layouts in kernels/cpu/attention.h */
    uint64_t layer_bytes;    /* n_blocks * n_kv_head * block_size * head_dim * element size */
    pgd_attn_shape shape;    /* of one layer's cache */
    uint32_t max_ctx;        /* longest context a query can attend to */
    double *inv_freq;        /* [rope_dim/2] */
    /* scratch, T = cfg.max_tokens */
    float *x;     /* [T][n_embd] residual stream */
    float *xb;    /* [T][n_embd] normed input / projection output */
    float *q;     /* [T][n_head*head_dim] */
    float *k, *v; /* [T][n_kv_head*head_dim] */
    float *att;   /* [T][n_head*head_dim] attention output */
    float *gate;  /* [T][F], F = n_ff, or n_ff_exp with experts */
    float *up;    /* [T][F] */
    /* mixture of experts (cfg.n_expert > 0), K = n_expert_used */
    float *rlogit;      /* [T][n_expert] router logits */
    uint32_t *ex_first; /* [n_expert + 1] where each expert's tokens start in ex_tok */
    uint32_t *ex_tok;   /* [T * K] the tokens routed to each expert, expert by expert */
    float *ex_w;        /* [T * K] their mixing weights, same order */
    uint32_t *pick;     /* [T][K] chosen experts per token; with pick_w [T][K] their weights */
    float *pick_w;
    float *xg;        /* [T][n_embd] one expert's gathered input rows */
    float *yg;        /* [T][n_embd] its output rows */
    float *moe;       /* [T][n_embd] the mixed output */
    float *cs;        /* [T][rope_dim] cos/sin per token */
    float *scores;    /* [n_threads][n_group][max_ctx] */
    uint32_t *seq_of; /* [T] sequence index of each token */
    uint32_t *rows;   /* [T] the tokens whose logits are computed */
    float *lbuf;      /* [lbuf_rows][n_vocab] logits of a step that samples here */
    uint32_t lbuf_rows;
    pgd_sampler_scratch *sscratch;
    void *mm; /* matmul scratch (Q8 activations) */
    size_t mm_size;
    /* int8 activations: the matmul weights packed for the batch kernel (pgd_q8_pack), in one
     * buffer; NULL entries use the model's own */
    void *packed_buf;
    const void *(*packed)[PK_COUNT]; /* [n_layer] */
    const void *packed_out;
} cpu_backend;

/* Bytes of one block's K (or V) in one layer. */
static uint64_t block_layer_bytes(const pgd_model_config *c, uint32_t block_size,
                                  pgd_kv_dtype dtype) {
    return (uint64_t)c->n_head_kv * block_size * c->head_dim * pgd_kv_dtype_bytes(dtype);
}

/* Bytes of KV memory one block takes (all layers, K and V). */
static uint64_t kv_block_bytes(const pgd_model_config *c, uint32_t block_size, pgd_kv_dtype dtype) {
    return 2ull * c->n_layer * block_layer_bytes(c, block_size, dtype);
}

static void *layer_k(const cpu_backend *b, uint32_t l) {
    return (char *)b->k_cache + l * b->layer_bytes;
}
static void *layer_v(const cpu_backend *b, uint32_t l) {
    return (char *)b->v_cache + l * b->layer_bytes;
}

/* ---- parallel helpers ------------------------------------------------------------------ */

typedef struct {
    cpu_backend *b;
    const pgd_batch *batch;
    uint32_t layer;
} step_ctx;

/* y_i = x · W_i^T for weights sharing x, in one pool run (see pgd_matmul_group); packed[i]:
 * W_i's packed copy or NULL. */
static int matmul_group(cpu_backend *b, const pgd_weight *const *w, const void *const *packed,
                        float *const *y, int n, const float *x /* [m][cols] */, uint32_t m) {
    pgd_matmul_part parts[4];
    for (int i = 0; i < n; i++)
        parts[i] = (pgd_matmul_part){w[i]->type, w[i]->data, (int64_t)w[i]->rows, y[i],
                                     packed ? packed[i] : NULL};
    return pgd_matmul_group(b->tp, b->opt.act_q8 ? PGD_ACT_Q8 : PGD_ACT_F32, parts, n,
                            (int64_t)w[0]->cols, x, m, b->mm, b->mm_size);
}

static int matmul(cpu_backend *b, const pgd_weight *w, const void *packed,
                  const float *x /* [m][cols] */, uint32_t m, float *y /* [m][rows] */) {
    return matmul_group(b, &w, &packed, &y, 1, x, m);
}

/* With int8 activations, a packed copy of every matmul weight that has a packed layout on this
 * CPU (pgd_q8_pack_bytes), all in b->packed_buf. Without, nothing. */
static int pack_weights(cpu_backend *b) {
    const pgd_model *m = b->base.model;
    const uint32_t nl = m->cfg.n_layer;
    if (!b->opt.act_q8) return 0;
    if (!(b->packed = calloc(nl, sizeof *b->packed))) return PGD_ENOMEM;
    for (int pass = 0; pass < 2; pass++) { /* sizes, then the packing */
        size_t off = 0;
        for (uint32_t i = 0; i <= nl * PK_COUNT; i++) {
            const pgd_weight *w = i < nl * PK_COUNT
                                      ? layer_weight(&m->layers[i / PK_COUNT], (int)(i % PK_COUNT))
                                      : &m->output;
            size_t need = w->data ? pgd_q8_pack_bytes(PGD_ISA_AUTO, w->type, (int64_t)w->rows,
                                                      (int64_t)w->cols)
                                  : 0; /* the dense feed-forward of a MoE model is absent */
            if (!need) continue;
            if (pass == 1) {
                uint8_t *dst = (uint8_t *)b->packed_buf + off;
                int rc = pgd_q8_pack(PGD_ISA_AUTO, w->type, w->data, (int64_t)w->rows,
                                     (int64_t)w->cols, dst, need);
                if (rc) return rc;
                if (i < nl * PK_COUNT)
                    b->packed[i / PK_COUNT][i % PK_COUNT] = dst;
                else
                    b->packed_out = dst;
            }
            off += (need + 63) / 64 * 64;
        }
        if (pass == 0 && off && !(b->packed_buf = aligned_alloc(64, off)))
            return pgd_error_set(PGD_ENOMEM, "out of memory for packed weights (%zu MiB)",
                                 off >> 20);
        if (!off) break;
    }
    return 0;
}

static void add_bias(float *y, const pgd_weight *bias, uint32_t m, uint64_t n) {
    if (!bias->data) return;
    const float *bv = bias->data;
    for (uint32_t t = 0; t < m; t++)
        for (uint64_t i = 0; i < n; i++) y[t * n + i] += bv[i];
}

/* Task per token: the q and k heads' RMSNorm (qwen3), RoPE on q and k, then store k and v in
 * the token's KV slot. */
static void rope_store_task(int t_, int thread, void *arg) {
    uint32_t t = (uint32_t)t_;
    step_ctx *c = arg;
    cpu_backend *b = c->b;
    const pgd_model_config *cfg = &b->base.model->cfg;
    const uint32_t D = cfg->head_dim, H = cfg->n_head, HK = cfg->n_head_kv;
    const uint32_t BS = b->block_size;
    bool neox = cfg->rope_style == PGD_ROPE_NEOX;
    float *q = b->q + (uint64_t)t * H * D, *k = b->k + (uint64_t)t * HK * D;
    if (cfg->qk_norm) {
        const pgd_layer_weights *L = &b->base.model->layers[c->layer];
        for (uint32_t h = 0; h < H; h++)
            pgd_rmsnorm_f32(q + (uint64_t)h * D, L->q_norm.data, q + (uint64_t)h * D, D,
                            cfg->rms_eps);
        for (uint32_t h = 0; h < HK; h++)
            pgd_rmsnorm_f32(k + (uint64_t)h * D, L->k_norm.data, k + (uint64_t)h * D, D,
                            cfg->rms_eps);
    }
    const float *cs = b->cs + (uint64_t)t * cfg->rope_dim;
    pgd_rope_apply(q, cs, H, D, cfg->rope_dim, neox);
    pgd_rope_apply(k, cs, HK, D, cfg->rope_dim, neox);
    uint64_t slot = (uint64_t)c->batch->slots[t];
    pgd_attn_store(&b->shape, layer_k(b, c->layer), layer_v(b, c->layer), slot / BS,
                   (uint32_t)(slot % BS), k, b->v + (uint64_t)t * HK * D);
}

/* Task per (token, kv head). */
static void attention_task(int task_, int thread, void *arg) {
    uint32_t task = (uint32_t)task_;
    step_ctx *c = arg;
    cpu_backend *b = c->b;
    const pgd_model_config *cfg = &b->base.model->cfg;
    const uint32_t HK = cfg->n_head_kv, G = cfg->n_head / HK, D = cfg->head_dim;
    uint32_t t = task / HK, kvh = task % HK;
    uint32_t s = b->seq_of[t];
    uint32_t n_ctx = (uint32_t)c->batch->positions[t] + 1;
    float *scores = b->scores + (uint64_t)thread * G * b->max_ctx;
    uint64_t qoff = (uint64_t)t * cfg->n_head * D + (uint64_t)kvh * G * D;
    pgd_attn_paged(&b->shape, kvh, b->q + qoff, layer_k(b, c->layer), layer_v(b, c->layer),
                   c->batch->block_tables + (uint64_t)s * c->batch->bt_stride, n_ctx, scores,
                   b->att + qoff);
}

typedef struct {
    cpu_backend *b;
    const float *src;     /* [rows][n] */
    const uint32_t *rows; /* row index map or NULL */
    const float *g;
    float *dst; /* [rows][n] */
    uint32_t n;
} norm_ctx;

static void norm_task(int t_, int thread, void *arg) {
    uint32_t t = (uint32_t)t_;
    norm_ctx *c = arg;
    uint32_t r = c->rows ? c->rows[t] : t;
    pgd_rmsnorm_f32(c->src + (uint64_t)r * c->n, c->g, c->dst + (uint64_t)t * c->n, c->n,
                    c->b->base.model->cfg.rms_eps);
}

static void rmsnorm_rows(cpu_backend *b, const float *src, const uint32_t *rows, uint32_t m,
                         const pgd_weight *g, float *dst) {
    norm_ctx c = {b, src, rows, g->data, dst, (uint32_t)g->cols};
    pgd_threadpool_run(b->tp, (int)m, norm_task, &c);
}

typedef struct {
    float *gate;
    const float *up;
    uint64_t n;
} swiglu_ctx;

static void swiglu_task(int t_, int thread, void *arg) {
    uint64_t t = (uint64_t)t_;
    swiglu_ctx *c = arg;
    pgd_swiglu_f32(c->gate + t * c->n, c->up + t * c->n, c->gate + t * c->n, c->n);
}

/* ---- mixture of experts -------------------------------------------------------------- */

/* The k largest of r[n] (ties: the lower index first) into idx[k], and their softmax into w[k]:
 * the renormalised top-k of the published models (softmax over all, the top k kept and scaled
 * to sum 1, is the softmax of the chosen logits). */
static void route_token(const float *r /* [n] */, uint32_t n, uint32_t k, uint32_t *idx, float *w) {
    for (uint32_t j = 0; j < k; j++) { /* k is small (2..8): selection in k passes */
        uint32_t best = UINT32_MAX;
        for (uint32_t e = 0; e < n; e++) {
            bool taken = false;
            for (uint32_t i = 0; i < j && !taken; i++) taken = idx[i] == e;
            if (!taken && (best == UINT32_MAX || r[e] > r[best])) best = e;
        }
        idx[j] = best;
    }
    double sum = 0.0, wd[64];
    for (uint32_t j = 0; j < k; j++) sum += wd[j] = exp((double)r[idx[j]] - (double)r[idx[0]]);
    for (uint32_t j = 0; j < k; j++) w[j] = (float)(wd[j] / sum);
}

/* b->xb [T][n_embd] (the normed residual) -> b->moe [T][n_embd]: each token through its K
 * experts, the outputs summed in expert order (so a token's bits do not depend on its batch). */
static int moe_ffn(cpu_backend *b, const pgd_layer_weights *L, uint32_t T) {
    const pgd_model_config *cfg = &b->base.model->cfg;
    const uint32_t NE = cfg->n_expert, K = cfg->n_expert_used, E = cfg->n_embd;
    const uint64_t rowb = (uint64_t)E * sizeof(float);
    int rc = matmul(b, &L->router, NULL, b->xb, T, b->rlogit);
    if (rc) return rc;
    memset(b->ex_first, 0, (NE + 1) * sizeof *b->ex_first);
    for (uint32_t t = 0; t < T; t++) {
        route_token(b->rlogit + (uint64_t)t * NE, NE, K, b->pick + (uint64_t)t * K,
                    b->pick_w + (uint64_t)t * K);
        for (uint32_t j = 0; j < K; j++) b->ex_first[b->pick[(uint64_t)t * K + j] + 1]++;
    }
    for (uint32_t e = 0; e < NE; e++) b->ex_first[e + 1] += b->ex_first[e];
    for (uint32_t t = 0; t < T; t++) /* tokens in order within each expert */
        for (uint32_t j = 0; j < K; j++) {
            uint32_t e = b->pick[(uint64_t)t * K + j], at = b->ex_first[e]++;
            b->ex_tok[at] = t;
            b->ex_w[at] = b->pick_w[(uint64_t)t * K + j];
        }
    for (uint32_t e = NE; e > 0; e--) b->ex_first[e] = b->ex_first[e - 1]; /* undo the bumps */
    b->ex_first[0] = 0;
    memset(b->moe, 0, (uint64_t)T * rowb);
    for (uint32_t e = 0; e < NE; e++) {
        const uint32_t a = b->ex_first[e], m = b->ex_first[e + 1] - a;
        if (!m) continue;
        for (uint32_t i = 0; i < m; i++)
            memcpy(b->xg + (uint64_t)i * E, b->xb + (uint64_t)b->ex_tok[a + i] * E, rowb);
        const pgd_weight *gu_w[] = {&L->exp_gate[e], &L->exp_up[e]};
        float *const gu_y[] = {b->gate, b->up};
        if ((rc = matmul_group(b, gu_w, NULL, gu_y, 2, b->xg, m))) return rc;
        swiglu_ctx gc = {b->gate, b->up, cfg->n_ff_exp};
        pgd_threadpool_run(b->tp, (int)m, swiglu_task, &gc);
        if ((rc = matmul(b, &L->exp_down[e], NULL, b->gate, m, b->yg))) return rc;
        for (uint32_t i = 0; i < m; i++) {
            float *o = b->moe + (uint64_t)b->ex_tok[a + i] * E;
            const float *y = b->yg + (uint64_t)i * E, w = b->ex_w[a + i];
            for (uint32_t j = 0; j < E; j++) o[j] += w * y[j];
        }
    }
    return 0;
}

/* ---- forward ---------------------------------------------------------------------------- */

/* The batch contract of backend.h; the scheduler builds every batch, so a breach is a bug. */
static void assert_batch(const cpu_backend *b, const pgd_batch *bt) {
    const pgd_model_config *cfg = &b->base.model->cfg;
    const uint32_t bs = b->block_size;
    PGD_ASSERT(bt->n_tokens > 0 && bt->n_tokens <= b->max_tokens && bt->n_seqs > 0 &&
               bt->q_start[0] == 0 && bt->q_start[bt->n_seqs] == bt->n_tokens);
    for (uint32_t s = 0; s < bt->n_seqs; s++) {
        uint32_t a = bt->q_start[s], e = bt->q_start[s + 1];
        PGD_ASSERT(e >= a && e - a <= bt->kv_len[s] && bt->kv_len[s] <= b->max_ctx);
        PGD_ASSERT((bt->kv_len[s] + bs - 1) / bs <= bt->bt_stride);
        for (uint32_t t = a; t < e; t++) {
            PGD_ASSERT(bt->positions[t] == (int32_t)(bt->kv_len[s] - (e - t)));
            PGD_ASSERT(bt->tokens[t] >= 0 && (uint32_t)bt->tokens[t] < cfg->n_vocab);
            PGD_ASSERT(bt->slots[t] >= (int64_t)bs && bt->slots[t] < (int64_t)b->n_blocks * bs);
        }
    }
    for (uint32_t r = 0; r < bt->n_logits; r++) PGD_ASSERT(bt->logit_rows[r] < bt->n_tokens);
    for (uint32_t i = 0; i < bt->n_samples; i++) PGD_ASSERT(bt->samples[i].token < bt->n_tokens);
    PGD_ASSERT(bt->n_logits + bt->n_samples <= bt->n_tokens && bt->n_hidden <= bt->n_tokens);
    for (uint32_t h = 0; h < bt->n_hidden; h++) PGD_ASSERT(bt->hidden_rows[h] < bt->n_tokens);
}

/* Room for `rows` rows of logits in b->lbuf. */
static int ensure_lbuf(cpu_backend *b, uint32_t rows) {
    if (rows <= b->lbuf_rows) return 0;
    float *p = realloc(b->lbuf, (uint64_t)rows * b->base.model->cfg.n_vocab * sizeof *p);
    if (!p) return pgd_error_set(PGD_ENOMEM, "out of memory for %u logit rows", rows);
    b->lbuf = p;
    b->lbuf_rows = rows;
    return 0;
}

/* The logits of the rows asked (R full rows out, N rows sampled here: see backend.h). */
static int cpu_logits(cpu_backend *b, const pgd_batch *bt, float *logits,
                      pgd_sample_result *sampled) {
    const pgd_model *m = b->base.model;
    const uint32_t R = bt->n_logits, N = bt->n_samples, V = m->cfg.n_vocab;
    if (R + N == 0) return 0;
    if (N == 0) { /* full logits only: straight into the caller's rows */
        rmsnorm_rows(b, b->x, bt->logit_rows, R, &m->output_norm, b->xb);
        return matmul(b, &m->output, b->packed_out, b->xb, R, logits);
    }
    /* one pass over the output weights for every row: [R logit rows][N sampled rows] */
    int rc = ensure_lbuf(b, R + N);
    if (rc) return rc;
    if (R) memcpy(b->rows, bt->logit_rows, R * sizeof *b->rows); /* NULL when R == 0 */
    for (uint32_t i = 0; i < N; i++) b->rows[R + i] = bt->samples[i].token;
    rmsnorm_rows(b, b->x, b->rows, R + N, &m->output_norm, b->xb);
    if ((rc = matmul(b, &m->output, b->packed_out, b->xb, R + N, b->lbuf))) return rc;
    if (R) memcpy(logits, b->lbuf, (uint64_t)R * V * sizeof *logits); /* logits may be NULL */
    for (uint32_t i = 0; i < N; i++)
        if ((rc = pgd_sample_logits(b->lbuf + (uint64_t)(R + i) * V, (int32_t)V,
                                    &bt->samples[i].spec, bt->samples[i].draw, b->sscratch,
                                    &sampled[i])))
            return rc;
    return 0;
}

static int cpu_forward(pgd_backend *base, const pgd_batch *bt, float *logits,
                       pgd_sample_result *sampled) {
    cpu_backend *b = (cpu_backend *)base;
    const pgd_model *m = base->model;
    const pgd_model_config *cfg = &m->cfg;
    const uint32_t T = bt->n_tokens, E = cfg->n_embd, D = cfg->head_dim;
    const uint64_t QD = (uint64_t)cfg->n_head * D, KVD = (uint64_t)cfg->n_head_kv * D;
    int rc = 0;
    assert_batch(b, bt);

    for (uint32_t s = 0; s < bt->n_seqs; s++)
        for (uint32_t t = bt->q_start[s]; t < bt->q_start[s + 1]; t++) b->seq_of[t] = s;
    for (uint32_t t = 0; t < T; t++) {
        if ((rc = pgd_dequant_row(m->tok_embd.type,
                                  (const char *)m->tok_embd.data +
                                      (uint64_t)bt->tokens[t] * m->tok_embd.row_bytes,
                                  b->x + (uint64_t)t * E, E)))
            return rc;
        pgd_rope_cos_sin(b->cs + (uint64_t)t * cfg->rope_dim, b->inv_freq, cfg->rope_dim,
                         (double)bt->positions[t] / cfg->rope_linear_scale);
    }

    step_ctx sc = {b, bt, 0};
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        const pgd_layer_weights *L = &m->layers[l];
        sc.layer = l;
        rmsnorm_rows(b, b->x, NULL, T, &L->attn_norm, b->xb);
        const void *const *pk = b->packed ? b->packed[l] : NULL;
        const pgd_weight *qkv_w[] = {&L->wq, &L->wk, &L->wv};
        float *const qkv_y[] = {b->q, b->k, b->v};
        if ((rc = matmul_group(b, qkv_w, pk ? pk + PK_Q : NULL, qkv_y, 3, b->xb, T))) return rc;
        add_bias(b->q, &L->bq, T, QD);
        add_bias(b->k, &L->bk, T, KVD);
        add_bias(b->v, &L->bv, T, KVD);
        pgd_threadpool_run(b->tp, (int)T, rope_store_task, &sc);
        pgd_threadpool_run(b->tp, (int)(T * cfg->n_head_kv), attention_task, &sc);
        if ((rc = matmul(b, &L->wo, pk ? pk[PK_O] : NULL, b->att, T, b->xb))) return rc;
        for (uint64_t i = 0; i < (uint64_t)T * E; i++) b->x[i] += b->xb[i];

        rmsnorm_rows(b, b->x, NULL, T, &L->ffn_norm, b->xb);
        if (cfg->n_expert) {
            if ((rc = moe_ffn(b, L, T))) return rc;
            for (uint64_t i = 0; i < (uint64_t)T * E; i++) b->x[i] += b->moe[i];
            continue;
        }
        const pgd_weight *gu_w[] = {&L->w_gate, &L->w_up};
        float *const gu_y[] = {b->gate, b->up};
        if ((rc = matmul_group(b, gu_w, pk ? pk + PK_GATE : NULL, gu_y, 2, b->xb, T))) return rc;
        swiglu_ctx gc = {b->gate, b->up, cfg->n_ff};
        pgd_threadpool_run(b->tp, (int)T, swiglu_task, &gc);
        if ((rc = matmul(b, &L->w_down, pk ? pk[PK_DOWN] : NULL, b->gate, T, b->xb))) return rc;
        for (uint64_t i = 0; i < (uint64_t)T * E; i++) b->x[i] += b->xb[i];
    }
    if (bt->n_hidden) /* the final hidden states asked, before the logits reuse xb */
        rmsnorm_rows(b, b->x, bt->hidden_rows, bt->n_hidden, &m->output_norm, bt->hidden);
    return cpu_logits(b, bt, logits, sampled);
}

static int cpu_copy_blocks(pgd_backend *base, const int32_t *src, const int32_t *dst, uint32_t n) {
    cpu_backend *b = (cpu_backend *)base;
    const pgd_model_config *cfg = &base->model->cfg;
    const uint64_t blk = block_layer_bytes(cfg, b->block_size, b->kv_dtype);
    for (uint32_t i = 0; i < n; i++) {
        PGD_ASSERT(src[i] > 0 && dst[i] > 0 && (uint32_t)src[i] < b->n_blocks &&
                   (uint32_t)dst[i] < b->n_blocks);
        for (uint32_t l = 0; l < cfg->n_layer; l++) {
            char *k = layer_k(b, l), *v = layer_v(b, l);
            memcpy(k + dst[i] * blk, k + src[i] * blk, blk);
            memcpy(v + dst[i] * blk, v + src[i] * blk, blk);
        }
    }
    return 0;
}

static void cpu_destroy(pgd_backend *base) {
    cpu_backend *b = (cpu_backend *)base;
    if (!b) return;
    pgd_threadpool_destroy(b->tp);
    free(b->mm);
    free(b->packed_buf);
    free(b->packed);
    free(b->k_cache);
    free(b->v_cache);
    free(b->inv_freq);
    free(b->x);
    free(b->xb);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->att);
    free(b->gate);
    free(b->up);
    free(b->rlogit);
    free(b->ex_first);
    free(b->ex_tok);
    free(b->ex_w);
    free(b->pick);
    free(b->pick_w);
    free(b->xg);
    free(b->yg);
    free(b->moe);
    free(b->cs);
    free(b->scores);
    free(b->seq_of);
    free(b->rows);
    free(b->lbuf);
    pgd_sampler_scratch_destroy(b->sscratch);
    free(b);
}

static const pgd_backend_ops k_cpu_ops = {
    .forward = cpu_forward, .copy_blocks = cpu_copy_blocks, .destroy = cpu_destroy};

int pgd_backend_cpu_create(const pgd_model *m, const pgd_backend_config *cfg,
                           const pgd_cpu_options *o, pgd_backend **out) {
    *out = NULL;
    const pgd_model_config *c = &m->cfg;
    if (cfg->block_size == 0) return pgd_error_set(PGD_EINVAL, "a KV block holds no tokens");
    if (cfg->kv_dtype != PGD_KV_F32 && cfg->kv_dtype != PGD_KV_F16)
        return pgd_error_set(PGD_EINVAL, "KV cache dtype %d: use f32 or f16", (int)cfg->kv_dtype);
    /* The weights are in place (mapped or converted): the KV memory is what was asked. */
    const uint32_t bs = cfg->block_size;
    uint64_t block_bytes = kv_block_bytes(c, bs, cfg->kv_dtype), n_blocks = cfg->kv_blocks;
    uint64_t bytes =
        cfg->kv_cache_bytes ? cfg->kv_cache_bytes : (uint64_t)PGD_DEFAULT_KV_CACHE_MB << 20;
    if (!n_blocks) n_blocks = bytes / block_bytes;
    if (n_blocks > UINT32_MAX / bs) n_blocks = UINT32_MAX / bs;
    if (n_blocks < 2)
        return pgd_error_set(PGD_EINVAL,
                             "KV cache too small: %llu bytes hold %llu blocks of %u tokens "
                             "(%llu bytes each); at least 2 are needed",
                             (unsigned long long)bytes, (unsigned long long)n_blocks, bs,
                             (unsigned long long)block_bytes);
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return PGD_ENOMEM;
    b->base.ops = &k_cpu_ops;
    b->base.model = m;
    b->opt = *o;
    b->n_blocks = (uint32_t)n_blocks;
    b->block_size = bs;
    b->max_tokens = cfg->max_tokens ? cfg->max_tokens : PGD_CPU_STEP_TOKENS;
    b->kv_dtype = cfg->kv_dtype;
    int rc = pgd_threadpool_create((int)o->n_threads, &b->tp);
    if (rc) goto fail;
    b->n_threads = (uint32_t)pgd_threadpool_size(b->tp);
    const uint64_t T = b->max_tokens, E = c->n_embd, D = c->head_dim;
    const uint64_t QD = (uint64_t)c->n_head * D, KVD = (uint64_t)c->n_head_kv * D;
    b->shape = (pgd_attn_shape){.n_kv_head = c->n_head_kv,
                                .n_group = c->n_head / c->n_head_kv,
                                .head_dim = (uint32_t)D,
                                .block_size = bs,
                                .scale = 1.0f / sqrtf((float)D),
                                .dtype = b->kv_dtype};
    b->layer_bytes = n_blocks * block_layer_bytes(c, bs, b->kv_dtype);
    uint64_t pool_tokens = n_blocks * bs;
    b->max_ctx = (uint32_t)(pool_tokens < UINT32_MAX ? pool_tokens : UINT32_MAX);
    uint32_t G = c->n_head / c->n_head_kv;
    b->k_cache = calloc(c->n_layer, b->layer_bytes);
    b->v_cache = calloc(c->n_layer, b->layer_bytes);
    b->inv_freq = malloc(c->rope_dim / 2 * sizeof(double));
    b->x = malloc(T * E * sizeof(float));
    b->xb = malloc(T * (E > QD ? E : QD) * sizeof(float));
    b->q = malloc(T * QD * sizeof(float));
    b->k = malloc(T * KVD * sizeof(float));
    b->v = malloc(T * KVD * sizeof(float));
    b->att = malloc(T * QD * sizeof(float));
    const uint64_t F = c->n_expert ? c->n_ff_exp : c->n_ff, NE = c->n_expert, K = c->n_expert_used;
    b->gate = malloc(T * F * sizeof(float));
    b->up = malloc(T * F * sizeof(float));
    if (NE &&
        (!(b->rlogit = malloc(T * NE * sizeof(float))) ||
         !(b->ex_first = malloc((NE + 1) * sizeof(uint32_t))) ||
         !(b->ex_tok = malloc(T * K * sizeof(uint32_t))) ||
         !(b->ex_w = malloc(T * K * sizeof(float))) ||
         !(b->pick = malloc(T * K * sizeof(uint32_t))) ||
         !(b->pick_w = malloc(T * K * sizeof(float))) || !(b->xg = malloc(T * E * sizeof(float))) ||
         !(b->yg = malloc(T * E * sizeof(float))) || !(b->moe = malloc(T * E * sizeof(float))))) {
        rc = pgd_error_set(PGD_ENOMEM, "out of memory for the experts' scratch");
        goto fail;
    }
    b->cs = malloc(T * c->rope_dim * sizeof(float));
    /* max_ctx is a whole number of blocks, as the attention kernel's score rows need. */
    b->scores = malloc((uint64_t)b->n_threads * G * b->max_ctx * sizeof(float));
    b->seq_of = malloc(T * sizeof(uint32_t));
    b->rows = malloc(T * sizeof(uint32_t));
    if ((rc = pgd_sampler_scratch_create((int32_t)c->n_vocab, &b->sscratch))) goto fail;
    if (!b->k_cache || !b->v_cache || !b->inv_freq || !b->x || !b->xb || !b->q || !b->k || !b->v ||
        !b->att || !b->gate || !b->up || !b->cs || !b->scores || !b->seq_of || !b->rows) {
        rc = pgd_error_set(PGD_ENOMEM, "out of memory for the KV cache (%llu MiB) or scratch",
                           (unsigned long long)(2 * c->n_layer * b->layer_bytes >> 20));
        goto fail;
    }
    uint32_t max_k = F > E ? (uint32_t)F : (uint32_t)E;
    if (QD > max_k) max_k = (uint32_t)QD;
    static const uint32_t qtypes[] = {PGD_TYPE_Q8_0, PGD_TYPE_Q4_0, PGD_TYPE_Q4_1, PGD_TYPE_Q5_0,
                                      PGD_TYPE_Q5_1};
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; i++) {
        size_t need = pgd_matmul_scratch_bytes_mode(o->act_q8 ? PGD_ACT_Q8 : PGD_ACT_F32, qtypes[i],
                                                    b->max_tokens, max_k);
        if (need != SIZE_MAX && need > b->mm_size) b->mm_size = need;
    }
    if (!(b->mm = malloc(b->mm_size ? b->mm_size : 1))) {
        rc = PGD_ENOMEM;
        goto fail;
    }
    if ((rc = pack_weights(b))) goto fail;
    pgd_rope_inv_freq(b->inv_freq, c->rope_dim, c->rope_base,
                      m->rope_freqs.data ? (const float *)m->rope_freqs.data : NULL);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    b->base.caps = (pgd_backend_caps){
        .kind = PGD_DEVICE_CPU,
        .name = "cpu",
        .n_blocks = b->n_blocks,
        .block_size = bs,
        .max_tokens = b->max_tokens,
        .max_seqs = PGD_CPU_STEP_SEQS,
        .max_logit_rows = b->max_tokens,
        .max_hidden_rows = b->max_tokens,
        .max_context = b->max_ctx,
        .kv_dtype = b->kv_dtype,
        .kv_bytes = 2 * c->n_layer * b->layer_bytes,
        .device_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0};
    *out = &b->base;
    return 0;
fail:
    cpu_destroy(&b->base);
    return rc;
}
