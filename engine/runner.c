/*
 * engine/runner.c — weights and backend of a loaded model, and the step that computes a
 * finished plan (see runner.h).
 *
 * Owns: the bound weights (pgd_model) when it loaded them, the backend, the sampler scratch,
 * the flat batch arrays and the logits rows, all sized once for caps.max_tokens tokens except
 * the logits, which grow to the most rows a step has asked for.
 */
#include "engine/runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/model/dummy.h"
#include "engine/sampling/json_fsm.h"

struct pgd_runner {
    const pgd_model_info *info; /* borrowed */
    pgd_model *model;           /* owned when the runner loaded it; NULL when wrapped */
    pgd_backend *backend;
    pgd_sampler_scratch *sscratch;
    pgd_vocab_bytes vocab; /* the tokenizer's pieces, for JSON output (pgd_runner_vocab_bytes) */
    uint32_t n_vocab, max_tokens;
    char device_note[192]; /* why --device auto chose the CPU ("": it did not) */
    /* the flat batch (T = max_tokens) */
    int32_t *b_tokens, *b_pos;    /* [T] */
    uint32_t *b_qstart;           /* [T+1] */
    uint32_t *b_kvlen;            /* [T] */
    uint32_t *b_rows;             /* [T] tokens whose full logits come back */
    pgd_sample_row *b_samples;    /* [T] rows the backend samples */
    pgd_sample_result *b_sampled; /* [T] what it sampled */
    int32_t *b_sample_of;         /* [T] item -> its entry in b_samples, or -1 (host sampling) */
    float *logits;                /* [logits_rows][n_vocab] */
    uint32_t logits_rows;
    uint32_t *b_hidden_rows; /* [T] tokens whose hidden states come back */
    float *hidden;           /* [hidden_rows][n_embd] */
    uint32_t hidden_rows;
    uint64_t n_forward_tokens;
    uint64_t n_steps, lost_at; /* steps run; PGD_FAULT_DEVICE_LOST (0: none) */
};

void pgd_runner_options_default(pgd_runner_options *o) {
    memset(o, 0, sizeof *o);
    pgd_device_options_default(&o->device);
    o->backend.kv_dtype = PGD_KV_AUTO;
}

/* The parts every runner has once its backend exists. */
static int finish_init(pgd_runner *r) {
    const pgd_backend_caps *caps = &r->backend->caps;
    const char *lost = getenv("PGD_FAULT_DEVICE_LOST");
    if (lost) r->lost_at = strtoull(lost, NULL, 10);
    r->n_vocab = r->info->n_vocab;
    r->max_tokens = caps->max_tokens;
    uint32_t T = r->max_tokens;
    PGD_ASSERT(T > 0 && caps->n_blocks >= 2 && caps->block_size > 0);
    r->b_tokens = malloc(T * sizeof *r->b_tokens);
    r->b_pos = malloc(T * sizeof *r->b_pos);
    r->b_qstart = malloc((T + 1) * sizeof *r->b_qstart);
    r->b_kvlen = malloc(T * sizeof *r->b_kvlen);
    r->b_rows = malloc(T * sizeof *r->b_rows);
    r->b_samples = malloc(T * sizeof *r->b_samples);
    r->b_sampled = malloc(T * sizeof *r->b_sampled);
    r->b_sample_of = malloc(T * sizeof *r->b_sample_of);
    r->b_hidden_rows = malloc(T * sizeof *r->b_hidden_rows);
    if (!r->b_hidden_rows || !r->b_tokens || !r->b_pos || !r->b_qstart || !r->b_kvlen ||
        !r->b_rows || !r->b_samples || !r->b_sampled || !r->b_sample_of)
        return PGD_ENOMEM;
    return pgd_sampler_scratch_create((int32_t)r->n_vocab, &r->sscratch);
}

int pgd_runner_wrap(const pgd_model_info *info, pgd_backend *backend, pgd_runner **out) {
    *out = NULL;
    pgd_runner *r = calloc(1, sizeof *r);
    if (!r) {
        pgd_backend_destroy(backend);
        return PGD_ENOMEM;
    }
    r->info = info;
    r->backend = backend;
    int rc = finish_init(r);
    if (rc) {
        pgd_runner_destroy(r);
        return rc;
    }
    *out = r;
    return 0;
}

int pgd_runner_create(const pgd_model_info *info, const pgd_runner_options *o, pgd_runner **out) {
    *out = NULL;
    if (!info->gguf && !info->preset)
        return pgd_error_set(PGD_EINVAL, "this model description has no weights");
    pgd_runner *r = calloc(1, sizeof *r);
    if (!r) return PGD_ENOMEM;
    r->info = info;
    /* The device first: a GPU takes the weights in their file type (it dequantizes them
     * itself) and fills dummy weights itself. */
    int device;
    const char *why = NULL;
    int rc = pgd_device_resolve(&o->device, &device, &why);
    if (rc) goto fail;
    if (why) snprintf(r->device_note, sizeof r->device_note, "%s", why);
    bool gpu = device == PGD_DEVICE_CUDA;
    rc = info->gguf
             ? pgd_model_load(info->gguf, o->model_flags | (gpu ? PGD_MODEL_RAW : 0), &r->model)
             : pgd_model_dummy(info->preset, PGD_DUMMY_SEED, gpu, &r->model);
    if (rc) goto fail;
    pgd_backend_config bc = o->backend;
    if (!bc.block_size) bc.block_size = PGD_DEFAULT_BLOCK_SIZE;
    if (bc.kv_dtype == PGD_KV_AUTO)
        bc.kv_dtype = (o->model_flags & PGD_MODEL_F32) ? PGD_KV_F32 : PGD_KV_F16;
    pgd_device_options dev = o->device;
    dev.device = device;
    if ((rc = pgd_backend_create(r->model, &bc, &dev, &r->backend)) || (rc = finish_init(r)))
        goto fail;
    *out = r;
    return 0;
fail:
    pgd_runner_destroy(r);
    return rc;
}

void pgd_runner_destroy(pgd_runner *r) {
    if (!r) return;
    pgd_backend_destroy(r->backend);
    pgd_model_free(r->model);
    pgd_sampler_scratch_destroy(r->sscratch);
    free(r->b_tokens);
    free(r->b_pos);
    free(r->b_qstart);
    free(r->b_kvlen);
    free(r->b_rows);
    free(r->b_samples);
    free(r->b_sampled);
    free(r->b_sample_of);
    free(r->logits);
    free(r->b_hidden_rows);
    free(r->hidden);
    free((void *)r->vocab.plain);
    free(r);
}

const pgd_model_info *pgd_runner_info(const pgd_runner *r) {
    return r->info;
}

const pgd_backend_caps *pgd_runner_caps(const pgd_runner *r) {
    return &r->backend->caps;
}

const char *pgd_runner_device_note(const pgd_runner *r) {
    return r->device_note[0] ? r->device_note : NULL;
}

pgd_backend *pgd_runner_backend(pgd_runner *r) {
    return r->backend;
}

pgd_sampler_scratch *pgd_runner_sampler_scratch(pgd_runner *r) {
    return r->sscratch;
}

static const char *text_piece(const void *tk, int32_t t, size_t *len) {
    return pgd_token_piece_view(tk, t, false, len);
}

const pgd_vocab_bytes *pgd_runner_vocab_bytes(pgd_runner *r) {
    if (!r->vocab.piece) {
        const int32_t *eog;
        size_t n_eog = pgd_tokenizer_eog_ids(r->info->tok, &eog);
        /* each token's code points as plain string text: without the table (no memory),
         * every token is tried */
        uint32_t *plain = malloc((size_t)r->n_vocab * sizeof *plain);
        for (uint32_t t = 0; plain && t < r->n_vocab; t++) {
            size_t n;
            const char *p = text_piece(r->info->tok, (int32_t)t, &n);
            plain[t] = pgd_json_plain_chars((const uint8_t *)p, n);
        }
        r->vocab = (pgd_vocab_bytes){.piece = text_piece,
                                     .ctx = r->info->tok,
                                     .n_vocab = (int32_t)r->n_vocab,
                                     .eog = eog,
                                     .n_eog = n_eog,
                                     .plain = plain};
    }
    return &r->vocab;
}

const float *pgd_runner_logits(const pgd_runner *r, uint32_t row) {
    PGD_ASSERT(row < r->logits_rows);
    return r->logits + (uint64_t)row * r->n_vocab;
}

const float *pgd_runner_hidden(const pgd_runner *r, uint32_t row) {
    PGD_ASSERT(row < r->hidden_rows);
    return r->hidden + (uint64_t)row * r->info->cfg.n_embd;
}

const char *pgd_pooling_str(pgd_pooling p) {
    return p == PGD_POOL_LAST ? "last" : p == PGD_POOL_MEAN ? "mean" : "none";
}

int pgd_pooling_parse(const char *s, pgd_pooling *out) {
    if (!strcmp(s, "auto"))
        *out = PGD_POOL_NONE;
    else if (!strcmp(s, "last"))
        *out = PGD_POOL_LAST;
    else if (!strcmp(s, "mean"))
        *out = PGD_POOL_MEAN;
    else
        return pgd_error_set(PGD_EINVAL, "pooling '%s': use auto, last or mean", s);
    return 0;
}

uint64_t pgd_runner_n_forward_tokens(const pgd_runner *r) {
    return r->n_forward_tokens;
}

/* ---- the step ----------------------------------------------------------------------------- */

static int ensure_rows(float **buf, uint32_t *have, uint32_t rows, uint32_t width,
                       const char *what) {
    if (rows <= *have) return 0;
    float *p = realloc(*buf, (uint64_t)rows * width * sizeof(float));
    if (!p) return pgd_error_set(PGD_ENOMEM, "out of memory for %u %s rows", rows, what);
    *buf = p;
    *have = rows;
    return 0;
}

int pgd_runner_step(pgd_runner *r, pgd_step_plan *plan) {
    PGD_ASSERT(plan->n_items > 0 && plan->n_tokens > 0 && plan->n_tokens <= r->max_tokens);
    int rc;
    if (r->lost_at && ++r->n_steps >= r->lost_at) /* the test hook (runner.h) */
        return pgd_error_set(PGD_EDEVLOST,
                             "the device is lost (injected at step %llu: PGD_FAULT_DEVICE_LOST)",
                             (unsigned long long)r->lost_at);
    if (plan->n_copies && (rc = r->backend->ops->copy_blocks(r->backend, plan->copy_src,
                                                             plan->copy_dst, plan->n_copies)))
        return rc;

    /* The flat batch: each item's tokens, in item order. A sequence whose known tokens are all
     * computed by its item samples its next one: on the backend when its sampler allows it (no
     * bias, no penalty; the host draws its random bits now), else on the host from full
     * logits, as does every token of an evaluation item. */
    uint32_t t = 0, rows = 0, n_samples = 0, n_hidden = 0;
    for (uint32_t i = 0; i < plan->n_items; i++) {
        pgd_step_item *it = &plan->items[i];
        pgd_seq *s = it->seq;
        uint32_t n = it->n_tokens, c0 = it->start;
        PGD_ASSERT(n > 0 && c0 + n <= s->tokens.n);
        s->sampled = false;
        r->b_qstart[i] = t;
        r->b_kvlen[i] = c0 + n;
        it->logits_row = rows;
        it->hidden_row = n_hidden;
        r->b_sample_of[i] = -1;
        uint32_t hid = pgd_step_item_hidden(it, (uint32_t)s->tokens.n);
        for (uint32_t j = n - hid; j < n; j++) r->b_hidden_rows[n_hidden++] = t + j;
        bool sample =
            c0 + n == s->tokens.n && s->finish == PGD_FINISH_NONE && it->pool == PGD_POOL_NONE;
        bool on_device = sample && !it->all_logits && pgd_sampler_on_device(s->sampler);
        pgd_sample_spec spec;
        if (on_device) {
            pgd_sampler_spec(s->sampler, &spec);
            on_device =
                !r->backend->ops->can_sample || r->backend->ops->can_sample(r->backend, &spec);
        }
        for (uint32_t j = 0; j < n; j++, t++) {
            r->b_tokens[t] = s->tokens.ids[c0 + j];
            r->b_pos[t] = (int32_t)(c0 + j);
            if (it->all_logits || (sample && !on_device && j + 1 == n)) r->b_rows[rows++] = t;
        }
        if (on_device) {
            pgd_sample_row *sr = &r->b_samples[n_samples];
            sr->token = t - 1;
            sr->spec = spec;
            sr->draw = pgd_sampler_draw(s->sampler);
            r->b_sample_of[i] = (int32_t)n_samples++;
        }
    }
    PGD_ASSERT(t == plan->n_tokens && rows + n_samples <= r->backend->caps.max_logit_rows &&
               n_hidden <= r->backend->caps.max_hidden_rows);
    r->b_qstart[plan->n_items] = t;
    if ((rc = ensure_rows(&r->logits, &r->logits_rows, rows, r->n_vocab, "logit")) ||
        (rc = ensure_rows(&r->hidden, &r->hidden_rows, n_hidden, r->info->cfg.n_embd, "hidden")))
        return rc;
    pgd_batch batch = {.n_tokens = t,
                       .tokens = r->b_tokens,
                       .positions = r->b_pos,
                       .slots = plan->slots,
                       .n_seqs = plan->n_items,
                       .q_start = r->b_qstart,
                       .kv_len = r->b_kvlen,
                       .block_tables = plan->block_tables,
                       .bt_stride = plan->bt_stride,
                       .n_logits = rows,
                       .logit_rows = r->b_rows,
                       .n_samples = n_samples,
                       .samples = r->b_samples,
                       .n_hidden = n_hidden,
                       .hidden_rows = r->b_hidden_rows,
                       .hidden = r->hidden};
    if ((rc = pgd_backend_forward(r->backend, &batch, r->logits, r->b_sampled))) return rc;
    r->n_forward_tokens += t;

    /* Append what was sampled; sample the host rows. */
    for (uint32_t i = 0; i < plan->n_items; i++) {
        pgd_step_item *it = &plan->items[i];
        pgd_seq *s = it->seq;
        uint32_t n = it->n_tokens;
        if (it->start + n != s->tokens.n || s->finish != PGD_FINISH_NONE ||
            it->pool != PGD_POOL_NONE)
            continue;
        pgd_sample_result res;
        if (r->b_sample_of[i] >= 0) {
            res = r->b_sampled[r->b_sample_of[i]];
        } else {
            uint32_t row = it->logits_row + (it->all_logits ? n - 1 : 0);
            if ((rc = pgd_sampler_sample(s->sampler, r->logits + (uint64_t)row * r->n_vocab, &res)))
                return rc;
        }
        if ((rc = pgd_seq_append(s, &res))) return rc;
    }
    return 0;
}
