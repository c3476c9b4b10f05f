/*
 * engine/model/model.c — hyper-parameters and weight binding for llama-family GGUF models.
 *
 * Invariant after pgd_model_load: every pgd_weight has a type the CPU kernels accept
 * (pgd_model_type_native) and the shape the config implies; 1-D weights are F32.
 */
#include "engine/model/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

bool pgd_model_type_native(uint32_t type) {
    switch (type) {
    case PGD_TYPE_F32:
    case PGD_TYPE_F16:
    case PGD_TYPE_Q8_0:
    case PGD_TYPE_Q4_0:
    case PGD_TYPE_Q4_1:
    case PGD_TYPE_Q5_0:
    case PGD_TYPE_Q5_1:
        return true;
    default:
        return false;
    }
}

/* `{arch}.suffix` lookups. */
static int get_u32(const pgd_gguf *g, const char *arch, const char *suffix, uint32_t *out,
                   bool required) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = pgd_gguf_get_u32(g, key, out);
    if (rc == PGD_ENOTFOUND && !required) return 0;
    if (rc == PGD_ENOTFOUND) return pgd_error_set(PGD_EFORMAT, "model metadata lacks %s", key);
    if (rc) return pgd_error_set(PGD_EFORMAT, "model metadata %s is not an unsigned integer", key);
    return 0;
}

static int get_f32(const pgd_gguf *g, const char *arch, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = pgd_gguf_get_f32(g, key, out);
    if (rc == PGD_ENOTFOUND) return 0;
    if (rc) return pgd_error_set(PGD_EFORMAT, "model metadata %s is not a number", key);
    return 0;
}

/* The mixture-of-experts keys: none for a dense model (n_expert 0). */
static int read_experts(const pgd_gguf *g, pgd_model_config *cfg) {
    const char *a = cfg->arch_name;
    int rc;
    uint32_t shared = 0, gating = 1, dense_lead = 0;
    if ((rc = get_u32(g, a, "expert_count", &cfg->n_expert, cfg->arch == PGD_ARCH_QWEN3MOE)) ||
        (rc = get_u32(g, a, "expert_used_count", &cfg->n_expert_used, cfg->n_expert > 0)) ||
        (rc = get_u32(g, a, "expert_shared_count", &shared, false)) ||
        (rc = get_u32(g, a, "expert_gating_func", &gating, false)) ||
        (rc = get_u32(g, a, "leading_dense_block_count", &dense_lead, false)))
        return rc;
    if (!cfg->n_expert) return 0;
    cfg->n_ff_exp = cfg->n_ff; /* Mixtral's GGUFs give the experts' size as feed_forward_length */
    if ((rc = get_u32(g, a, "expert_feed_forward_length", &cfg->n_ff_exp, false))) return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", a);
    bool norm = true;
    if ((rc = pgd_gguf_get_bool(g, key, &norm)) && rc != PGD_ENOTFOUND)
        return pgd_error_set(PGD_EFORMAT, "model metadata %s is not a boolean", key);
    if (cfg->n_expert > 1024 || cfg->n_expert_used == 0 || cfg->n_expert_used > cfg->n_expert ||
        cfg->n_expert_used > PGD_MAX_EXPERTS_USED || cfg->n_ff_exp == 0 || cfg->n_ff_exp > 1 << 20)
        return pgd_error_set(PGD_EFORMAT,
                             "implausible experts: %u experts, %u used per token, feed-forward %u",
                             cfg->n_expert, cfg->n_expert_used, cfg->n_ff_exp);
    if (shared || dense_lead || gating != 1 || !norm)
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "this mixture of experts is not supported (%u shared experts, %u "
                             "leading dense layers, gating function %u, weights %snormalised): "
                             "pagoda runs routed experts mixed by the softmax of the chosen "
                             "logits (Mixtral, Qwen3-MoE)",
                             shared, dense_lead, gating, norm ? "" : "not ");
    return 0;
}

int pgd_model_config_read(const pgd_gguf *g, pgd_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    pgd_str arch;
    int rc = pgd_gguf_get_str(g, "general.architecture", &arch);
    if (rc) return pgd_error_set(PGD_EFORMAT, "model metadata lacks general.architecture");
    if (arch.len >= sizeof cfg->arch_name)
        return pgd_error_set(PGD_EUNSUPPORTED, "architecture name too long");
    memcpy(cfg->arch_name, arch.ptr, arch.len);
    cfg->arch_name[arch.len] = '\0';
    if (!strcmp(cfg->arch_name, "llama")) {
        cfg->arch = PGD_ARCH_LLAMA;
        cfg->rope_style = PGD_ROPE_NORM;
    } else if (!strcmp(cfg->arch_name, "qwen2")) {
        cfg->arch = PGD_ARCH_QWEN2;
        cfg->rope_style = PGD_ROPE_NEOX;
        cfg->qkv_bias = true;
    } else if (!strcmp(cfg->arch_name, "qwen3") || !strcmp(cfg->arch_name, "qwen3moe")) {
        cfg->arch = cfg->arch_name[5] ? PGD_ARCH_QWEN3MOE : PGD_ARCH_QWEN3;
        cfg->rope_style = PGD_ROPE_NEOX;
        cfg->qk_norm = true;
    } else {
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "architecture '%s' is not supported (supported: llama, qwen2, qwen3, "
                             "qwen3moe)",
                             cfg->arch_name);
    }
    const char *a = cfg->arch_name;
    if ((rc = get_u32(g, a, "block_count", &cfg->n_layer, true)) ||
        (rc = get_u32(g, a, "embedding_length", &cfg->n_embd, true)) ||
        (rc = get_u32(g, a, "feed_forward_length", &cfg->n_ff, true)) ||
        (rc = get_u32(g, a, "attention.head_count", &cfg->n_head, true)))
        return rc;
    cfg->n_head_kv = cfg->n_head;
    cfg->n_ctx_train = 2048;
    if ((rc = get_u32(g, a, "attention.head_count_kv", &cfg->n_head_kv, false)) ||
        (rc = get_u32(g, a, "context_length", &cfg->n_ctx_train, false)) ||
        (rc = get_u32(g, a, "pooling_type", &cfg->pooling_type, false)))
        return rc;
    if (cfg->n_layer == 0 || cfg->n_layer > 1024 || cfg->n_embd == 0 || cfg->n_embd > 65536 ||
        cfg->n_head == 0 || cfg->n_head > 1024 || cfg->n_head_kv == 0 ||
        cfg->n_head % cfg->n_head_kv != 0 || cfg->n_ff == 0 || cfg->n_ff > 1 << 20)
        return pgd_error_set(PGD_EFORMAT,
                             "implausible hyper-parameters: layers %u, embedding %u, heads %u/%u "
                             "(query/kv), feed-forward %u",
                             cfg->n_layer, cfg->n_embd, cfg->n_head, cfg->n_head_kv, cfg->n_ff);
    if ((rc = read_experts(g, cfg))) return rc;
    cfg->head_dim = cfg->n_embd / cfg->n_head;
    if ((rc = get_u32(g, a, "attention.key_length", &cfg->head_dim, false))) return rc;
    uint32_t vlen = cfg->head_dim;
    if ((rc = get_u32(g, a, "attention.value_length", &vlen, false))) return rc;
    if (cfg->head_dim == 0 || cfg->head_dim % 2 || vlen != cfg->head_dim || cfg->head_dim > 1024)
        return pgd_error_set(PGD_EUNSUPPORTED, "head size %u (value %u) is not supported",
                             cfg->head_dim, vlen);
    cfg->rope_dim = cfg->head_dim;
    if ((rc = get_u32(g, a, "rope.dimension_count", &cfg->rope_dim, false))) return rc;
    if (cfg->rope_dim == 0 || cfg->rope_dim > cfg->head_dim || cfg->rope_dim % 2)
        return pgd_error_set(PGD_EFORMAT, "rope.dimension_count %u does not fit head size %u",
                             cfg->rope_dim, cfg->head_dim);
    cfg->rope_base = 10000.0f;
    cfg->rms_eps = 1e-5f;
    cfg->rope_linear_scale = 1.0f;
    if ((rc = get_f32(g, a, "rope.freq_base", &cfg->rope_base)) ||
        (rc = get_f32(g, a, "attention.layer_norm_rms_epsilon", &cfg->rms_eps)))
        return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    pgd_str st;
    if (pgd_gguf_get_str(g, key, &st) == 0 && !pgd_str_eq(st, "none")) {
        if (!pgd_str_eq(st, "linear"))
            return pgd_error_set(PGD_EUNSUPPORTED, "rope scaling '%.*s' is not supported",
                                 (int)st.len, st.ptr);
        if ((rc = get_f32(g, a, "rope.scaling.factor", &cfg->rope_linear_scale))) return rc;
    } else {
        float f = 1.0f;
        if ((rc = get_f32(g, a, "rope.scale_linear", &f))) return rc;
        cfg->rope_linear_scale = f;
    }
    if (!(cfg->rope_linear_scale > 0.0f) || !(cfg->rope_base > 0.0f) || !(cfg->rms_eps > 0.0f))
        return pgd_error_set(PGD_EFORMAT, "rope base, rope scale and RMS epsilon must be > 0");

    /* Vocabulary size: metadata, else the token list, else the embedding's rows. */
    const pgd_gguf_value *toks;
    if (get_u32(g, a, "vocab_size", &cfg->n_vocab, false)) return PGD_EFORMAT;
    if (!cfg->n_vocab && pgd_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) == 0)
        cfg->n_vocab = (uint32_t)toks->v.arr.n;
    const pgd_gguf_tensor *emb = pgd_gguf_find_tensor(g, "token_embd.weight");
    if (!cfg->n_vocab && emb && emb->n_dims == 2) cfg->n_vocab = (uint32_t)emb->ne[1];
    if (!cfg->n_vocab) return pgd_error_set(PGD_EFORMAT, "cannot tell the vocabulary size");
    cfg->tied_output = pgd_gguf_find_tensor(g, "output.weight") == NULL;
    cfg->rope_freq_factors = pgd_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    return 0;
}

/* ---- weight binding ------------------------------------------------------------------- */

static int own(pgd_model *m, void *p) {
    void **o = realloc(m->owned, (m->n_owned + 1) * sizeof *o);
    if (!o) return PGD_ENOMEM;
    m->owned = o;
    m->owned[m->n_owned++] = p;
    return 0;
}

/* Convert a tensor to `to` into owned memory: to F32 or Q8_0 through f32 rows, or to the type
 * pgd_reblock_type names for it (Q4_K -> Q4_1, Q5_K -> Q5_1) block by block, the 4/5-bit values
 * kept as they are; where the latter's f16 scales would overflow (no real model's do), to Q8_0. */
static int convert(pgd_model *m, const pgd_gguf_tensor *t, uint32_t to, pgd_weight *w) {
    uint64_t cols = t->ne[0], rows = t->nelem / cols, row_bytes;
    int rc = pgd_row_bytes(to, cols, &row_bytes);
    if (rc)
        return pgd_error_set(rc, "tensor %s: cannot convert rows of %llu", t->name,
                             (unsigned long long)cols);
    const bool reblock = to != PGD_TYPE_F32 && to != PGD_TYPE_Q8_0;
    void *dst = malloc(rows * row_bytes);                       /* [rows][row_bytes] */
    float *tmp = reblock ? NULL : malloc(cols * sizeof(float)); /* [cols] */
    if (!dst || (!reblock && !tmp)) {
        free(dst);
        free(tmp);
        return pgd_error_set(PGD_ENOMEM, "out of memory converting %s", t->name);
    }
    if (reblock && (rc = pgd_reblock_row(t->type, t->data, dst, (int64_t)t->nelem))) {
        free(dst);
        if (rc == PGD_ERANGE) return convert(m, t, PGD_TYPE_Q8_0, w);
        return pgd_error_set(rc, "tensor %s: cannot re-block it", t->name);
    }
    for (uint64_t r = 0; !reblock && r < rows; r++) {
        if ((rc = pgd_gguf_tensor_row_f32(
                 t, r, to == PGD_TYPE_F32 ? (float *)((char *)dst + r * row_bytes) : tmp))) {
            free(dst);
            free(tmp);
            return pgd_error_set(rc, "tensor %s: cannot dequantize type %s", t->name,
                                 pgd_type_info(t->type) ? pgd_type_info(t->type)->name : "?");
        }
        if (to == PGD_TYPE_Q8_0)
            pgd_quantize_row_q8_0(tmp, (pgd_block_q8_0 *)((char *)dst + r * row_bytes),
                                  (int64_t)cols);
    }
    free(tmp);
    if ((rc = own(m, dst))) {
        free(dst);
        return rc;
    }
    w->type = to;
    w->data = dst;
    w->row_bytes = row_bytes;
    m->weight_bytes += rows * row_bytes;
    return 0;
}

typedef struct {
    unsigned flags;
    uint32_t n_convert, n_done;
    bool tty;
} load_ctx;

/* Bind tensor `name` as a [rows][cols] weight (rows 0 = 1-D of cols); n_mat > 1: a 3-D tensor
 * [n_mat][rows][cols] bound as one [n_mat * rows][cols] weight. */
static int bind_n(pgd_model *m, load_ctx *lc, const char *name, uint32_t n_mat, uint64_t rows,
                  uint64_t cols, bool optional, pgd_weight *w) {
    memset(w, 0, sizeof *w);
    const pgd_gguf_tensor *t = pgd_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (optional) return 0;
        return pgd_error_set(PGD_EFORMAT, "model lacks tensor %s", name);
    }
    bool one_d = rows == 0;
    if (one_d ? (t->nelem != cols || t->ne[0] != cols)
              : (t->n_dims != (n_mat > 1 ? 3u : 2u) || t->ne[0] != cols || t->ne[1] != rows ||
                 t->ne[2] != n_mat))
        return pgd_error_set(
            PGD_EFORMAT, "tensor %s has shape [%llu, %llu, %llu], expected [%llu, %llu, %u]", name,
            (unsigned long long)t->ne[0], (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1),
            (unsigned long long)(t->n_dims > 2 ? t->ne[2] : 1), (unsigned long long)cols,
            (unsigned long long)(one_d ? 1 : rows), n_mat);
    rows *= n_mat;
    w->rows = one_d ? 1 : rows;
    w->cols = cols;
    w->type = t->type;
    w->data = t->data;
    w->row_bytes = t->nbytes / w->rows;
    bool want_f32 = one_d || (lc->flags & PGD_MODEL_F32);
    if ((lc->flags & PGD_MODEL_RAW) && !one_d) { /* the device dequantizes it */
        m->weight_bytes += t->nbytes;
        return 0;
    }
    /* With general.alignment < 4 an F32 tensor may sit at an odd address: copy it then. */
    bool aligned = ((uintptr_t)t->data & 3) == 0;
    if (want_f32 && t->type == PGD_TYPE_F32 && aligned) {
        m->weight_bytes += t->nbytes;
        return 0;
    }
    if (!want_f32 && pgd_model_type_native(t->type) && (t->type != PGD_TYPE_F32 || aligned)) {
        m->weight_bytes += t->nbytes;
        return 0;
    }
    uint32_t to = (want_f32 || t->type == PGD_TYPE_BF16 || t->type == PGD_TYPE_F64) ? PGD_TYPE_F32
                                                                                    : PGD_TYPE_Q8_0;
    if (to == PGD_TYPE_Q8_0 && cols % PGD_QK) to = PGD_TYPE_F32;
    if (!want_f32) pgd_reblock_type(t->type, &to); /* Q4_K -> Q4_1, Q5_K -> Q5_1 */
    int rc = convert(m, t, to, w);
    lc->n_done++;
    if (lc->tty && !(lc->flags & PGD_MODEL_QUIET)) {
        fprintf(stderr, "\rconverting weights: %u/%u tensors", lc->n_done, lc->n_convert);
        if (lc->n_done == lc->n_convert) fputc('\n', stderr);
    }
    return rc;
}

static int bind(pgd_model *m, load_ctx *lc, const char *name, uint64_t rows, uint64_t cols,
                bool optional, pgd_weight *w) {
    return bind_n(m, lc, name, 1, rows, cols, optional, w);
}

/* Bind a 3-D expert tensor [n_expert][rows][cols] as n_expert [rows][cols] views. */
static int bind_experts(pgd_model *m, load_ctx *lc, const char *name, uint64_t rows, uint64_t cols,
                        pgd_weight *views /* [n_expert] */) {
    const uint32_t n = m->cfg.n_expert;
    pgd_weight all;
    int rc = bind_n(m, lc, name, n, rows, cols, false, &all);
    if (rc) return rc;
    for (uint32_t e = 0; e < n; e++) {
        views[e] = all;
        views[e].rows = rows;
        views[e].data = (const char *)all.data + e * rows * all.row_bytes;
    }
    return 0;
}

int pgd_model_load(const pgd_gguf *g, unsigned flags, pgd_model **out) {
    *out = NULL;
    pgd_model *m = calloc(1, sizeof *m);
    if (!m) return PGD_ENOMEM;
    m->gguf = g;
    int rc = pgd_model_config_read(g, &m->cfg);
    if (rc) goto fail;
    const pgd_model_config *c = &m->cfg;
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    if (c->n_expert)
        m->experts = calloc((uint64_t)c->n_layer * 3 * c->n_expert, sizeof *m->experts);
    if (!m->layers || (c->n_expert && !m->experts)) {
        rc = PGD_ENOMEM;
        goto fail;
    }
    load_ctx lc = {.flags = flags, .tty = isatty(2)};
    for (size_t i = 0; i < pgd_gguf_n_tensors(g); i++) {
        const pgd_gguf_tensor *t = pgd_gguf_tensor_at(g, i);
        bool vec = t->n_dims == 1;
        if ((vec || (flags & PGD_MODEL_F32))
                ? t->type != PGD_TYPE_F32
                : !(flags & PGD_MODEL_RAW) && !pgd_model_type_native(t->type))
            lc.n_convert++;
    }
    uint64_t E = c->n_embd, Q = (uint64_t)c->n_head * c->head_dim,
             KV = (uint64_t)c->n_head_kv * c->head_dim;
    if ((rc = bind(m, &lc, "token_embd.weight", c->n_vocab, E, false, &m->tok_embd)) ||
        (rc = bind(m, &lc, "output_norm.weight", 0, E, false, &m->output_norm)))
        goto fail;
    if (c->tied_output) {
        m->output = m->tok_embd;
    } else if ((rc = bind(m, &lc, "output.weight", c->n_vocab, E, false, &m->output))) {
        goto fail;
    }
    if ((rc = bind(m, &lc, "rope_freqs.weight", 0, c->rope_dim / 2, true, &m->rope_freqs)))
        goto fail;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        pgd_layer_weights *L = &m->layers[l];
        char n[96];
#define BIND(field, suffix, rows, cols, opt)                                                       \
    snprintf(n, sizeof n, "blk.%u." suffix, l);                                                    \
    if ((rc = bind(m, &lc, n, rows, cols, opt, &L->field))) goto fail;
        BIND(attn_norm, "attn_norm.weight", 0, E, false)
        BIND(wq, "attn_q.weight", Q, E, false)
        BIND(wk, "attn_k.weight", KV, E, false)
        BIND(wv, "attn_v.weight", KV, E, false)
        BIND(wo, "attn_output.weight", E, Q, false)
        BIND(bq, "attn_q.bias", 0, Q, !c->qkv_bias)
        BIND(bk, "attn_k.bias", 0, KV, !c->qkv_bias)
        BIND(bv, "attn_v.bias", 0, KV, !c->qkv_bias)
        BIND(q_norm, "attn_q_norm.weight", 0, c->head_dim, !c->qk_norm)
        BIND(k_norm, "attn_k_norm.weight", 0, c->head_dim, !c->qk_norm)
        BIND(ffn_norm, "ffn_norm.weight", 0, E, false)
        if (c->n_expert) {
            BIND(router, "ffn_gate_inp.weight", c->n_expert, E, false)
            pgd_weight *x = m->experts + (uint64_t)l * 3 * c->n_expert;
            L->exp_gate = x;
            L->exp_up = x + c->n_expert;
            L->exp_down = x + 2 * c->n_expert;
#define EXPERTS(views, suffix, rows, cols)                                                         \
    snprintf(n, sizeof n, "blk.%u." suffix, l);                                                    \
    if ((rc = bind_experts(m, &lc, n, rows, cols, views))) goto fail;
            EXPERTS(L->exp_gate, "ffn_gate_exps.weight", c->n_ff_exp, E)
            EXPERTS(L->exp_up, "ffn_up_exps.weight", c->n_ff_exp, E)
            EXPERTS(L->exp_down, "ffn_down_exps.weight", E, c->n_ff_exp)
#undef EXPERTS
        } else {
            BIND(w_gate, "ffn_gate.weight", c->n_ff, E, false)
            BIND(w_up, "ffn_up.weight", c->n_ff, E, false)
            BIND(w_down, "ffn_down.weight", E, c->n_ff, false)
        }
#undef BIND
    }
    *out = m;
    return 0;
fail:
    pgd_model_free(m);
    return rc;
}

void pgd_model_free(pgd_model *m) {
    if (!m) return;
    for (uint32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->experts);
    free(m);
}
