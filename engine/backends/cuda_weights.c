/*
 * engine/backends/cuda_weights.c — the CUDA backend's weights on the device: each matrix's form
 * (bf16, or with --gpu-weights q8_0 / q4 8 bits, or 4 where the file's blocks are 4-bit:
 * mat_form; a fused QKV's parts each in their own: alloc_qkv), the upload of a file's tensors
 * through two pinned buffers in turn with the host's share of each chunk on every CPU
 * (staging), dummy weights made on the device from the shared
 * hash (kernels/cuda/dummy.h), and the sizing pass that counts the bytes of each form before
 * anything is allocated (pgd__cuda_weights_bytes). The state is engine/backends/cuda_internal.h's.
 *
 * Threading: the creating thread, inside pgd_backend_cuda_create.
 */
#include "engine/backends/cuda_internal.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/model/dummy.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dequant.h"
#include "kernels/cuda/dummy.h"
#include "kernels/cuda/q4.h"
#include "kernels/cuda/q8.h"

#define STAGING_BYTES (64u << 20) /* pinned staging for weight uploads */

/* Staging for the weights' uploads and conversions, freed once they are done: two pinned host
 * buffers for a file's rows, filled in turn — the next chunk's rows are read (and made Q4_1
 * blocks) on the host while the device copies and converts the last one; `sent` says when a
 * buffer's copy has left it — and device memory for them (or for dummy values in bf16 on their
 * way to 8 bits), and device memory for f32 values on their way to 8 bits (the device's buffers
 * are reused in stream order); STAGING_BYTES each. The host's work of a chunk is spread over the
 * CPUs (tp): reading a mapped file's pages and re-blocking Q4_K are the load's slow parts. */
typedef struct staging {
    uint8_t *host[2];
    cudaEvent_t sent[2];
    uint32_t next; /* the host buffer the next chunk fills */
    uint8_t *dev;
    float *f32;
    pgd_threadpool *tp; /* NULL: on the calling thread */
} staging;

#define FILL_TASKS 64 /* most tasks a chunk's host work is cut into */

/* One chunk's host work: n rows from src (src_row bytes each) into dst (dst_row bytes each),
 * copied, or (blocks) made GGUF Q4_1 blocks by pgd_q4_blocks; task t takes rows [t per, ...). */
typedef struct fill_job {
    const uint8_t *src;
    uint8_t *dst;
    uint64_t src_row, dst_row, cols, n, per;
    uint32_t type;
    bool blocks;
    int rc[FILL_TASKS];
} fill_job;

static void fill_task(int t, int thread, void *ctx) {
    (void)thread;
    fill_job *j = ctx;
    const uint64_t r0 = (uint64_t)t * j->per, n = j->n - r0 < j->per ? j->n - r0 : j->per;
    const uint8_t *src = j->src + r0 * j->src_row;
    uint8_t *dst = j->dst + r0 * j->dst_row;
    j->rc[t] = 0;
    if (j->blocks)
        j->rc[t] = pgd_q4_blocks(j->type, src, dst, (int64_t)(n * j->cols));
    else
        memcpy(dst, src, n * j->src_row);
}

/* Rows [0, n) of w from `rows` into the pinned buffer `host`: as GGUF Q4_1 blocks where *blocks
 * (left true when made; false where a block's scales pass f16's range: the rows copied as they
 * are instead), else copied. 0 or pgd_q4_blocks' error. */
static int fill_host(const staging *st, const pgd_weight *w, const uint8_t *rows, uint64_t n,
                     uint8_t *host, bool *blocks) {
    fill_job j = {.src = rows,
                  .dst = host,
                  .src_row = w->row_bytes,
                  .dst_row = *blocks ? w->cols / PGD_Q4_BLOCK * PGD_Q4_BLOCK_BYTES : w->row_bytes,
                  .cols = w->cols,
                  .n = n,
                  .type = w->type,
                  .blocks = *blocks};
    j.per = (n + FILL_TASKS - 1) / FILL_TASKS;
    const int tasks = (int)((n + j.per - 1) / j.per);
    int rc = pgd_threadpool_run(st->tp, tasks, fill_task, &j);
    for (int t = 0; t < tasks && !rc; t++) rc = j.rc[t];
    if (rc == PGD_ERANGE) { /* the values instead: the rows as they are */
        j.blocks = *blocks = false;
        j.dst_row = w->row_bytes;
        rc = pgd_threadpool_run(st->tp, tasks, fill_task, &j);
    }
    return rc;
}

/* m from row row0 on (its rows of cols); m itself while sizing (nothing allocated). */
static dmat mat_rows(const cuda_backend *b, dmat m, uint64_t row0, uint64_t cols) {
    if (b->sizing) return m;
    switch (m.form) {
    case FORM_Q8:
        m.q.q += row0 * cols;
        m.q.d += row0 * (cols / PGD_Q8_BLOCK);
        break;
    case FORM_Q4:
        m.q4.q += row0 * cols / 2;
        m.q4.dm += row0 * (cols / PGD_Q4_BLOCK);
        break;
    default:
        m.h += row0 * cols;
    }
    return m;
}

/* The form of a matrix made of n parts (a fused one: QKV, gate/up, an expert stack) of GGUF
 * types types[0 .. n): as the weights' mode says, but with --gpu-weights q4 4 bits only where
 * every part's blocks take THE FORM exactly (Q4_0, Q4_1, Q4_K: kernels/cuda/q4.h) or the
 * weights are dummy, and 8 bits elsewhere (a Q4_K_M file keeps its 6-bit V, down and output
 * matrices at 8 bits, not 4). */
static mform mat_form(const cuda_backend *b, const pgd_weight *const *parts, uint32_t n) {
    if (b->wmode == PGD_CUDA_WEIGHTS_BF16) return FORM_BF16;
    if (b->wmode == PGD_CUDA_WEIGHTS_Q8_0) return FORM_Q8;
    if (b->base.model->shapes_only) return FORM_Q4;
    for (uint32_t i = 0; i < n; i++)
        if (!pgd_q4_type_exact(parts[i]->type)) return FORM_Q8;
    return FORM_Q4;
}

static int alloc_mat(cuda_backend *b, uint64_t rows, uint64_t cols, mform form, dmat *m) {
    int rc;
    m->form = form;
    switch (form) {
    case FORM_Q8:
        if ((rc = DALLOC(b, m->q.q, rows * cols))) return rc;
        return DALLOC(b, m->q.d, rows * (cols / PGD_Q8_BLOCK) * 2);
    case FORM_Q4:
        if ((rc = DALLOC(b, m->q4.q, rows * cols / 2))) return rc;
        return DALLOC(b, m->q4.dm, rows * (cols / PGD_Q4_BLOCK) * 4);
    default:
        return DALLOC(b, m->h, rows * cols * 2);
    }
}

/* alloc_mat for the matrix fused of parts[0 .. n) in the form mat_form gives them. */
static int alloc_fused(cuda_backend *b, uint64_t rows, uint64_t cols,
                       const pgd_weight *const *parts, uint32_t n, dmat *m) {
    return alloc_mat(b, rows, cols, mat_form(b, parts, n), m);
}

/* Layer d's fused QKV (qkv: its Q, K and V parts): one matrix in the form mat_form gives the
 * three, or with --gpu-weights q4 where the parts' own forms differ (a Q4_K_M file's Q4_K Q and K
 * with a Q6_K V: 4 bits and 8) a matrix for each run of consecutive parts of one form, so the
 * 4-bit parts stay 4-bit — where every run's first column is a multiple of 64 (its f32 output
 * 256-byte aligned, as cuBLASLt's plans assume), else the one matrix as mat_form says. */
static int alloc_qkv(cuda_backend *b, const pgd_weight *const *qkv, layer *d) {
    const uint32_t rows[3] = {b->H * b->D, b->HKV * b->D, b->HKV * b->D};
    mform form[3], run_form[3];
    bool aligned = true;
    d->n_qkv = 0;
    for (uint32_t i = 0, row = 0; i < 3; row += rows[i++]) {
        form[i] = mat_form(b, &qkv[i], 1);
        if (i && form[i] == form[i - 1]) continue;
        run_form[d->n_qkv] = form[i];
        d->qkv_row[d->n_qkv++] = row;
        aligned = aligned && row % 64 == 0;
    }
    if (d->n_qkv > 1 && !aligned) {
        d->n_qkv = 1;
        run_form[0] = mat_form(b, qkv, 3);
    }
    d->qkv_row[d->n_qkv] = b->QKV;
    int rc = 0;
    for (uint32_t r = 0; r < d->n_qkv && !rc; r++)
        rc = alloc_mat(b, d->qkv_row[r + 1] - d->qkv_row[r], b->E, run_form[r], &d->wqkv[r]);
    return rc;
}

/* The fused QKV of layer d from its row `row` on (row: a part's first). */
static dmat qkv_rows(const cuda_backend *b, const layer *d, uint32_t row) {
    uint32_t r = d->n_qkv - 1;
    while (d->qkv_row[r] > row) r--;
    return mat_rows(b, d->wqkv[r], row - d->qkv_row[r], b->E);
}

/* Rows [0, w->rows) of a host weight (any GGUF type) into dst's first rows, through the pinned
 * staging and the device's, converted on the device into dst's form: dequantized to bf16; into
 * 8 bits, a Q8_0 tensor's blocks split as they are, any other type's values through f32,
 * requantized; into 4 bits, the rows made GGUF Q4_1 blocks on the host (pgd_q4_blocks: the
 * CPU's re-blocking) and split, or where a block's scales pass f16's range its values through
 * f32, quantized. */
static int upload_matrix(cuda_backend *b, const pgd_weight *w, dmat dst, staging *st) {
    if (b->sizing) return 0;
    const uint64_t q41_row = w->cols / PGD_Q4_BLOCK * PGD_Q4_BLOCK_BYTES;
    const uint64_t row_max = dst.form == FORM_Q4 && q41_row > w->row_bytes ? q41_row : w->row_bytes;
    uint64_t per = STAGING_BYTES / row_max;
    if (dst.form != FORM_BF16 && per > STAGING_BYTES / (w->cols * sizeof(float)))
        per = STAGING_BYTES / (w->cols * sizeof(float));
    if (per == 0)
        return pgd_error_set(PGD_EUNSUPPORTED, "a weight row of %llu bytes exceeds the staging",
                             (unsigned long long)w->row_bytes);
    for (uint64_t r0 = 0; r0 < w->rows; r0 += per) {
        const int64_t n = (int64_t)(w->rows - r0 < per ? w->rows - r0 : per), k = (int64_t)w->cols;
        const dmat at = mat_rows(b, dst, r0, w->cols);
        const uint8_t *rows = (const uint8_t *)w->data + r0 * w->row_bytes;
        uint8_t *host = st->host[st->next];
        /* the buffer's last copy has left it (the emulator faults a pinned page touched before) */
        PGD_CUDA_TRY(cudaEventSynchronize(st->sent[st->next]));
        bool blocks = dst.form == FORM_Q4;
        int rc = fill_host(st, w, rows, (uint64_t)n, host, &blocks);
        if (rc) return rc;
        const bool via_f32 =
            dst.form == FORM_Q4 ? !blocks : dst.form == FORM_Q8 && w->type != PGD_TYPE_Q8_0;
        const uint64_t bytes = blocks ? (uint64_t)n * q41_row : (uint64_t)n * w->row_bytes;
        PGD_CUDA_TRY(cudaMemcpyAsync(st->dev, host, bytes, cudaMemcpyHostToDevice, b->stream));
        PGD_CUDA_TRY(cudaEventRecord(st->sent[st->next], b->stream));
        st->next ^= 1;
        if (dst.form == FORM_BF16)
            rc = pgd_cuda_dequant_bf16(w->type, st->dev, at.h, n, k, b->stream);
        else if (via_f32 && !(rc = pgd_cuda_dequant(w->type, st->dev, st->f32, n, k, b->stream)))
            rc = dst.form == FORM_Q8 ? pgd_cuda_q8_quantize(st->f32, 0, n, k, at.q, b->stream)
                                     : pgd_cuda_q4_quantize(st->f32, 0, n, k, at.q4, b->stream);
        else if (!via_f32)
            rc = dst.form == FORM_Q8 ? pgd_cuda_q8_split(st->dev, n, k, at.q, b->stream)
                                     : pgd_cuda_q4_split(st->dev, n, k, at.q4, b->stream);
        if (rc) return rc; /* the device's staging is reused in stream order: no wait */
    }
    return 0;
}

/* The dummy hash's values of a weight's elements [first, first + rows cols) (dummy.h numbers a
 * weight's elements from 0; shift as pgd_dummy_matrix_shift) into dst's first rows: in bf16, or
 * from those bf16 values into 8 or 4 bits through the device staging. */
static int put_dummy(cuda_backend *b, uint32_t id, int shift, uint64_t first, uint64_t rows,
                     uint64_t cols, dmat dst, const staging *st) {
    const uint64_t seed = b->base.model->dummy_seed, per = STAGING_BYTES / (cols * 2);
    if (b->sizing) return 0;
    if (dst.form == FORM_BF16)
        return pgd_cuda_dummy_bf16_at(seed, id, shift, first, rows * cols, dst.h, b->stream);
    int rc = 0;
    for (uint64_t r0 = 0; r0 < rows && !rc; r0 += per) { /* stream order: no wait between */
        const uint64_t n = rows - r0 < per ? rows - r0 : per;
        const dmat at = mat_rows(b, dst, r0, cols);
        if (!(rc = pgd_cuda_dummy_bf16_at(seed, id, shift, first + r0 * cols, n * cols,
                                          (uint16_t *)st->dev, b->stream)))
            rc =
                dst.form == FORM_Q8
                    ? pgd_cuda_q8_quantize(st->dev, 1, (int64_t)n, (int64_t)cols, at.q, b->stream)
                    : pgd_cuda_q4_quantize(st->dev, 1, (int64_t)n, (int64_t)cols, at.q4, b->stream);
    }
    return rc;
}

/* One matrix part (a fused weight is several): from the file, or the dummy hash. */
static int put_matrix(cuda_backend *b, const pgd_weight *w, uint32_t id, dmat dst, staging *st) {
    if (b->base.model->shapes_only)
        return put_dummy(b, id, id == PGD_DUMMY_TOK_EMBD ? 7 : pgd_dummy_matrix_shift(w->cols), 0,
                         w->rows, w->cols, dst, st);
    return upload_matrix(b, w, dst, st);
}

/* An f32 vector: from the host, or the dummy hash (base + v/1024); NULL when absent. */
static int put_vector(cuda_backend *b, const pgd_model *m, const pgd_weight *w, uint32_t id,
                      float base, float *dst) {
    if (b->sizing) return 0;
    if (m->shapes_only) return pgd_cuda_dummy_f32(m->dummy_seed, id, base, w->cols, dst, b->stream);
    PGD_CUDA_TRY(
        cudaMemcpyAsync(dst, w->data, w->cols * sizeof(float), cudaMemcpyHostToDevice, b->stream));
    return 0;
}

/* Layer l's router and experts: from the file, one expert's matrix at a time (each a view of
 * the layer's 3-D tensor), or the dummy hash, which numbers a 3-D tensor's elements as one
 * [NE * rows][cols] matrix (engine/model/dummy.h): expert e's gate rows start at element
 * e * FX * E of the gate tensor. Expert e's gate rows are rows 2 e FX of exp_gu, its up rows
 * the FX after them, its down rows rows e E of exp_down. */
static int load_experts(cuda_backend *b, uint32_t l, staging *st) {
    const pgd_model *m = b->base.model;
    const pgd_layer_weights *L = &m->layers[l];
    layer *d = &b->layers[l];
    const uint64_t E = b->E, FX = b->FX, NE = b->NE, part = FX * E; /* one gate or up, one down */
    const pgd_weight *router = &L->router, *gu[] = {L->exp_gate, L->exp_up}, *down = L->exp_down;
    int rc;
    if ((rc = alloc_fused(b, NE, E, &router, 1, &d->router)) ||
        (rc = alloc_fused(b, NE * 2 * FX, E, gu, 2, &d->exp_gu)) ||
        (rc = alloc_fused(b, NE * E, FX, &down, 1, &d->exp_down)))
        return rc;
    if (m->shapes_only) {
        const uint32_t gate = pgd_dummy_moe_id(l, PGD_DUMMY_EXP_GATE),
                       up = pgd_dummy_moe_id(l, PGD_DUMMY_EXP_UP);
        const int sE = pgd_dummy_matrix_shift((uint32_t)E), sF = pgd_dummy_matrix_shift(b->FX);
        if ((rc = put_dummy(b, pgd_dummy_moe_id(l, PGD_DUMMY_ROUTER), sE, 0, NE, E, d->router,
                            st)) ||
            (rc = put_dummy(b, pgd_dummy_moe_id(l, PGD_DUMMY_EXP_DOWN), sF, 0, NE * E, FX,
                            d->exp_down, st)))
            return rc;
        for (uint64_t e = 0; e < NE; e++)
            if ((rc = put_dummy(b, gate, sE, e * part, FX, E, mat_rows(b, d->exp_gu, 2 * e * FX, E),
                                st)) ||
                (rc = put_dummy(b, up, sE, e * part, FX, E,
                                mat_rows(b, d->exp_gu, (2 * e + 1) * FX, E), st)))
                return rc;
        return 0;
    }
    if ((rc = upload_matrix(b, &L->router, d->router, st))) return rc;
    for (uint64_t e = 0; e < NE; e++)
        if ((rc = upload_matrix(b, &L->exp_gate[e], mat_rows(b, d->exp_gu, 2 * e * FX, E), st)) ||
            (rc = upload_matrix(b, &L->exp_up[e], mat_rows(b, d->exp_gu, (2 * e + 1) * FX, E),
                                st)) ||
            (rc = upload_matrix(b, &L->exp_down[e], mat_rows(b, d->exp_down, e * E, FX), st)))
            return rc;
    return 0;
}

int pgd__cuda_load_weights(cuda_backend *b) {
    const pgd_model *m = b->base.model;
    const pgd_model_config *c = &m->cfg;
    const uint64_t E = b->E, QD = (uint64_t)b->H * b->D, KVD = (uint64_t)b->HKV * b->D;
    staging st = {0};
    int rc = 0;
    const bool convert = b->wmode != PGD_CUDA_WEIGHTS_BF16; /* into 8 or 4 bits on the device */
    if (!m->shapes_only && !b->sizing) {
        for (int i = 0; i < 2; i++) {
            if (cudaMallocHost((void **)&st.host[i], STAGING_BYTES) != cudaSuccess ||
                cudaEventCreateWithFlags(&st.sent[i], cudaEventDisableTiming) != cudaSuccess) {
                rc = pgd_error_set(PGD_ECUDA, "the %u MiB pinned weight staging: %s",
                                   STAGING_BYTES >> 20, cudaGetErrorString(cudaGetLastError()));
                goto out;
            }
        }
        /* the host's share of the load on every CPU (a failed pool: on this thread alone) */
        const int cpus = pgd_cpu_count();
        if (pgd_threadpool_create(cpus < 32 ? cpus : 32, &st.tp)) pgd_error_clear();
    }
    if (!b->sizing && (!m->shapes_only || convert) &&
        cudaMalloc((void **)&st.dev, STAGING_BYTES) != cudaSuccess) {
        cudaGetLastError();
        rc = pgd_error_set(PGD_ECUDA, "out of GPU memory for the %u MiB weight staging",
                           STAGING_BYTES >> 20);
        goto out;
    }
    if (!b->sizing && !m->shapes_only && convert &&
        cudaMalloc((void **)&st.f32, STAGING_BYTES) != cudaSuccess) {
        cudaGetLastError();
        rc = pgd_error_set(PGD_ECUDA, "out of GPU memory for the %u MiB weight staging",
                           STAGING_BYTES >> 20);
        goto out;
    }
    /* the head in bf16 where cuda_plan.h's pgd_cuda_head_bf16 says (the embedding with it when
     * tied: one matrix), else in mat_form's form */
    const pgd_weight *tok = &m->tok_embd, *out = &m->output;
    const bool head_bf16 = pgd_cuda_head_bf16(c);
    if ((rc = alloc_mat(b, b->V, E, head_bf16 && c->tied_output ? FORM_BF16 : mat_form(b, &tok, 1),
                        &b->tok_embd)) ||
        (rc = put_matrix(b, &m->tok_embd, PGD_DUMMY_TOK_EMBD, b->tok_embd, &st)) ||
        (rc = DALLOC(b, b->output_norm, E * sizeof(float))) ||
        (rc = put_vector(b, m, &m->output_norm, PGD_DUMMY_OUTPUT_NORM, 1.0f, b->output_norm)))
        goto out;
    if (c->tied_output) {
        b->output = b->tok_embd;
    } else if ((rc = alloc_mat(b, b->V, E, head_bf16 ? FORM_BF16 : mat_form(b, &out, 1),
                               &b->output)) ||
               (rc = put_matrix(b, &m->output, PGD_DUMMY_OUTPUT, b->output, &st))) {
        goto out;
    }
    for (uint32_t l = 0; l < c->n_layer && !rc; l++) {
        const pgd_layer_weights *L = &m->layers[l];
        layer *d = &b->layers[l];
        const pgd_weight *qkv[] = {&L->wq, &L->wk, &L->wv}, *wo = &L->wo,
                         *gu[] = {&L->w_gate, &L->w_up}, *down = &L->w_down;
#define ID(which) pgd_dummy_tensor_id(l, PGD_DUMMY_##which)
        if ((rc = alloc_qkv(b, qkv, d)) ||
            (rc = put_matrix(b, &L->wq, ID(WQ), qkv_rows(b, d, 0), &st)) ||
            (rc = put_matrix(b, &L->wk, ID(WK), qkv_rows(b, d, QD), &st)) ||
            (rc = put_matrix(b, &L->wv, ID(WV), qkv_rows(b, d, QD + KVD), &st)) ||
            (rc = alloc_fused(b, E, QD, &wo, 1, &d->wo)) ||
            (rc = put_matrix(b, &L->wo, ID(WO), d->wo, &st)) ||
            (rc = DALLOC(b, d->attn_norm, E * sizeof(float))) ||
            (rc = put_vector(b, m, &L->attn_norm, ID(ATTN_NORM), 1.0f, d->attn_norm)) ||
            (rc = DALLOC(b, d->ffn_norm, E * sizeof(float))) ||
            (rc = put_vector(b, m, &L->ffn_norm, ID(FFN_NORM), 1.0f, d->ffn_norm)))
            break;
        if (b->NE) {
            if ((rc = load_experts(b, l, &st))) break;
        } else if ((rc = alloc_fused(b, 2ull * b->F, E, gu, 2, &d->wgu)) ||
                   (rc = put_matrix(b, &L->w_gate, ID(GATE), d->wgu, &st)) ||
                   (rc = put_matrix(b, &L->w_up, ID(UP), mat_rows(b, d->wgu, b->F, E), &st)) ||
                   (rc = alloc_fused(b, E, b->F, &down, 1, &d->wdown)) ||
                   (rc = put_matrix(b, &L->w_down, ID(DOWN), d->wdown, &st))) {
            break;
        }
        if (c->qkv_bias && ((rc = DALLOC(b, d->bqkv, b->QKV * sizeof(float))) ||
                            (rc = put_vector(b, m, &L->bq, ID(BQ), 0.0f, d->bqkv)) ||
                            (rc = put_vector(b, m, &L->bk, ID(BK), 0.0f, d->bqkv + QD)) ||
                            (rc = put_vector(b, m, &L->bv, ID(BV), 0.0f, d->bqkv + QD + KVD))))
            break;
        if (c->qk_norm && ((rc = DALLOC(b, d->q_norm, b->D * sizeof(float))) ||
                           (rc = put_vector(b, m, &L->q_norm, ID(Q_NORM), 1.0f, d->q_norm)) ||
                           (rc = DALLOC(b, d->k_norm, b->D * sizeof(float))) ||
                           (rc = put_vector(b, m, &L->k_norm, ID(K_NORM), 1.0f, d->k_norm))))
            break;
#undef ID
    }
    if (!rc && !b->sizing && cudaStreamSynchronize(b->stream) != cudaSuccess)
        rc = pgd_error_set(PGD_ECUDA, "uploading the weights: %s",
                           cudaGetErrorString(cudaGetLastError()));
out: /* cudaFree synchronises: no conversion still reads the staging, no copy its host buffers */
    if (st.f32) cudaFree(st.f32);
    if (st.dev) cudaFree(st.dev);
    for (int i = 0; i < 2; i++) {
        if (st.host[i]) cudaFreeHost(st.host[i]);
        if (st.sent[i]) cudaEventDestroy(st.sent[i]);
    }
    pgd_threadpool_destroy(st.tp);
    return rc;
}

uint64_t pgd__cuda_weights_bytes(cuda_backend *b, pgd_cuda_weights mode) {
    const pgd_cuda_weights keep = b->wmode;
    b->wmode = mode;
    b->sizing = true;
    b->sized = 0;
    int rc = pgd__cuda_load_weights(b);
    PGD_ASSERT(rc == 0); /* nothing but counting can fail, and counting does not */
    b->sizing = false;
    b->wmode = keep;
    return b->sized;
}

int pgd__cuda_check_weights_fit(cuda_backend *b) {
    size_t free_b = 0, total = 0;
    PGD_CUDA_TRY(cudaMemGetInfo(&free_b, &total));
    const uint64_t need = b->weight_bytes = pgd__cuda_weights_bytes(b, b->wmode);
    if (need <= free_b) return 0;
    const double G = 1024.0 * 1024.0 * 1024.0;
    char smaller[96] = "";
    if (b->wmode == PGD_CUDA_WEIGHTS_BF16)
        snprintf(smaller, sizeof smaller, "--gpu-weights q8_0 (%.2f GiB) or q4 (%.2f GiB), ",
                 pgd__cuda_weights_bytes(b, PGD_CUDA_WEIGHTS_Q8_0) / G,
                 pgd__cuda_weights_bytes(b, PGD_CUDA_WEIGHTS_Q4) / G);
    else if (b->wmode == PGD_CUDA_WEIGHTS_Q8_0)
        snprintf(smaller, sizeof smaller, "--gpu-weights q4 (%.2f GiB), ",
                 pgd__cuda_weights_bytes(b, PGD_CUDA_WEIGHTS_Q4) / G);
    return pgd_error_set(PGD_ECUDA,
                         "the model's weights need %.2f GiB of GPU memory in %s and %.2f GiB of "
                         "the GPU's %.2f GiB are free: %sa smaller model, or --device cpu",
                         need / G,
                         b->wmode == PGD_CUDA_WEIGHTS_BF16   ? "bf16"
                         : b->wmode == PGD_CUDA_WEIGHTS_Q8_0 ? "8 bits (q8_0)"
                                                             : "4 bits (q4)",
                         free_b / G, total / G, smaller);
}
