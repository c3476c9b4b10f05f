/*
 * engine/model/dummy.c — models with dummy weights (see dummy.h).
 */
#include "engine/model/dummy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/counter_hash.h"
#include "common/error.h"
#include "kernels/cpu/quant.h"

int pgd_dummy_matrix_shift(uint64_t cols) {
    /* the odd integers of [-127, 127] have a standard deviation of about 73.6 */
    return (int)lrint(log2(73.6 * sqrt((double)cols)));
}

/* A buffer the model frees. */
static void *owned(pgd_model *m, size_t bytes) {
    void **o = realloc(m->owned, (m->n_owned + 1) * sizeof *o);
    if (!o) return NULL;
    m->owned = o;
    void *p = malloc(bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

/* rows x cols F16 matrix of tensor `id`, values v * 2^-shift. */
static int matrix(pgd_model *m, uint64_t seed, uint32_t id, uint64_t rows, uint64_t cols, int shift,
                  pgd_weight *w) {
    if (m->shapes_only) {
        *w = (pgd_weight){.type = PGD_TYPE_F16,
                          .rows = rows,
                          .cols = cols,
                          .data = NULL,
                          .row_bytes = cols * sizeof(uint16_t)};
        m->weight_bytes += rows * cols * sizeof(uint16_t);
        return 0;
    }
    uint16_t *d = owned(m, rows * cols * sizeof *d);
    if (!d)
        return pgd_error_set(PGD_ENOMEM, "out of memory for a %llu x %llu dummy weight",
                             (unsigned long long)rows, (unsigned long long)cols);
    for (uint64_t i = 0; i < rows * cols; i++)
        d[i] = pgd_f32_to_f16(pgd_dummy_value(seed, id, i, shift));
    *w = (pgd_weight){
        .type = PGD_TYPE_F16, .rows = rows, .cols = cols, .data = d, .row_bytes = cols * sizeof *d};
    m->weight_bytes += rows * cols * sizeof *d;
    return 0;
}

/* An F32 vector: base + v/1024. */
static int vector(pgd_model *m, uint64_t seed, uint32_t id, uint64_t n, float base, pgd_weight *w) {
    if (m->shapes_only) {
        *w = (pgd_weight){.type = PGD_TYPE_F32,
                          .rows = 1,
                          .cols = n,
                          .data = NULL,
                          .row_bytes = n * sizeof(float)};
        return 0;
    }
    float *d = owned(m, n * sizeof *d);
    if (!d) return pgd_error_set(PGD_ENOMEM, "out of memory for a dummy vector");
    for (uint64_t i = 0; i < n; i++) d[i] = base + pgd_dummy_value(seed, id, i, 10);
    *w = (pgd_weight){
        .type = PGD_TYPE_F32, .rows = 1, .cols = n, .data = d, .row_bytes = n * sizeof *d};
    m->weight_bytes += n * sizeof *d;
    return 0;
}

/* Layer l's router and experts; *views: the layer's [3][n_expert] views in m->experts. */
static int experts(pgd_model *m, uint64_t seed, uint32_t l, pgd_weight *router,
                   pgd_weight **views) {
    const pgd_model_config *c = &m->cfg;
    const uint64_t E = c->n_embd, F = c->n_ff_exp, NE = c->n_expert;
    pgd_weight *v = m->experts + (uint64_t)l * 3 * NE;
    const uint64_t rows[3] = {F, F, E}, cols[3] = {E, E, F};
    int rc = matrix(m, seed, pgd_dummy_moe_id(l, PGD_DUMMY_ROUTER), NE, E,
                    pgd_dummy_matrix_shift(E), router);
    for (int i = 0; i < 3 && !rc; i++) {
        pgd_weight all;
        rc = matrix(m, seed, pgd_dummy_moe_id(l, PGD_DUMMY_EXP_GATE + (uint32_t)i), NE * rows[i],
                    cols[i], pgd_dummy_matrix_shift(cols[i]), &all);
        for (uint64_t e = 0; e < NE && !rc; e++) {
            v[i * NE + e] = all;
            v[i * NE + e].rows = rows[i];
            if (all.data) v[i * NE + e].data = (const char *)all.data + e * rows[i] * all.row_bytes;
        }
    }
    *views = v;
    return rc;
}

int pgd_model_dummy(const pgd_model_preset *p, uint64_t seed, bool shapes_only, pgd_model **out) {
    *out = NULL;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!shapes_only && pages > 0 && page > 0) { /* a clear error, not the OOM killer */
        pgd_model *shape;
        int rc = pgd_model_dummy(p, seed, true, &shape);
        if (rc) return rc;
        const uint64_t need = shape->weight_bytes, have = (uint64_t)pages * (uint64_t)page;
        pgd_model_free(shape);
        if (need > have)
            return pgd_error_set(PGD_ENOMEM,
                                 "the dummy weights of preset '%s' take %.1f GiB (f16), more than "
                                 "this machine's %.1f GiB of memory",
                                 p->name, need / 1073741824.0, have / 1073741824.0);
    }
    pgd_model *m = calloc(1, sizeof *m);
    if (!m) return PGD_ENOMEM;
    m->cfg = p->cfg;
    m->dummy = true;
    m->shapes_only = shapes_only;
    m->dummy_seed = seed;
    const pgd_model_config *c = &m->cfg;
    int rc = PGD_ENOMEM;
    if (!(m->layers = calloc(c->n_layer, sizeof *m->layers))) goto fail;
    if (c->n_expert &&
        !(m->experts = calloc((uint64_t)c->n_layer * 3 * c->n_expert, sizeof *m->experts)))
        goto fail;
    uint64_t E = c->n_embd, Q = (uint64_t)c->n_head * c->head_dim,
             KV = (uint64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    int sE = pgd_dummy_matrix_shift(E), sQ = pgd_dummy_matrix_shift(Q),
        sF = pgd_dummy_matrix_shift(F);
    if ((rc = matrix(m, seed, PGD_DUMMY_TOK_EMBD, c->n_vocab, E, 7, &m->tok_embd)) ||
        (rc = vector(m, seed, PGD_DUMMY_OUTPUT_NORM, E, 1.0f, &m->output_norm)))
        goto fail;
    if (c->tied_output)
        m->output = m->tok_embd;
    else if ((rc = matrix(m, seed, PGD_DUMMY_OUTPUT, c->n_vocab, E, sE, &m->output)))
        goto fail;
    if (c->rope_freq_factors) {
        float *f = owned(m, c->rope_dim / 2 * sizeof *f);
        if (!f) goto fail;
        memcpy(f, p->rope_factors, c->rope_dim / 2 * sizeof *f);
        m->rope_freqs = (pgd_weight){.type = PGD_TYPE_F32,
                                     .rows = 1,
                                     .cols = c->rope_dim / 2,
                                     .data = f,
                                     .row_bytes = c->rope_dim / 2 * sizeof *f};
    }
    for (uint32_t l = 0; l < c->n_layer; l++) {
        pgd_layer_weights *L = &m->layers[l];
#define ID(which) pgd_dummy_tensor_id(l, PGD_DUMMY_##which)
        if ((rc = vector(m, seed, ID(ATTN_NORM), E, 1.0f, &L->attn_norm)) ||
            (rc = matrix(m, seed, ID(WQ), Q, E, sE, &L->wq)) ||
            (rc = matrix(m, seed, ID(WK), KV, E, sE, &L->wk)) ||
            (rc = matrix(m, seed, ID(WV), KV, E, sE, &L->wv)) ||
            (rc = matrix(m, seed, ID(WO), E, Q, sQ, &L->wo)) ||
            (rc = vector(m, seed, ID(FFN_NORM), E, 1.0f, &L->ffn_norm)))
            goto fail;
        if (c->n_expert) {
            if ((rc = experts(m, seed, l, &L->router, &L->exp_gate))) goto fail;
            L->exp_up = L->exp_gate + c->n_expert;
            L->exp_down = L->exp_gate + 2 * c->n_expert;
        } else if ((rc = matrix(m, seed, ID(GATE), F, E, sE, &L->w_gate)) ||
                   (rc = matrix(m, seed, ID(UP), F, E, sE, &L->w_up)) ||
                   (rc = matrix(m, seed, ID(DOWN), E, F, sF, &L->w_down))) {
            goto fail;
        }
        if (c->qkv_bias && ((rc = vector(m, seed, ID(BQ), Q, 0.0f, &L->bq)) ||
                            (rc = vector(m, seed, ID(BK), KV, 0.0f, &L->bk)) ||
                            (rc = vector(m, seed, ID(BV), KV, 0.0f, &L->bv))))
            goto fail;
        if (c->qk_norm && ((rc = vector(m, seed, ID(Q_NORM), c->head_dim, 1.0f, &L->q_norm)) ||
                           (rc = vector(m, seed, ID(K_NORM), c->head_dim, 1.0f, &L->k_norm))))
            goto fail;
#undef ID
    }
    *out = m;
    return 0;
fail:
    pgd_model_free(m);
    return rc;
}
