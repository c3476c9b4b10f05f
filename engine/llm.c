/*
 * engine/llm.c — loading a model for serving, prompt encoding, sequences and the step runner.
 *
 * Invariants of a pgd_seq: n_computed <= bt.n_tokens <= tokens.n + (slots reserved this step);
 * tokens[0, n_computed) have their K/V in the blocks bt lists; finish != NONE means no more
 * tokens are sampled.
 */
#include "engine/llm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define DEFAULT_KV_BYTES (1ull << 30)

void pgd_llm_options_default(pgd_llm_options *o) {
    memset(o, 0, sizeof *o);
    o->block_size = 16;
    o->max_batch_tokens = 512;
    o->prefix_caching = true;
    o->kv_dtype = PGD_KV_AUTO;
}

static int alloc_step_scratch(pgd_llm *llm) {
    uint32_t T = llm->opt.max_batch_tokens;
    llm->b_tokens = malloc(T * sizeof *llm->b_tokens);
    llm->b_pos = malloc(T * sizeof *llm->b_pos);
    llm->b_slots = malloc(T * sizeof *llm->b_slots);
    llm->b_qstart = malloc((T + 1) * sizeof *llm->b_qstart);
    llm->b_kvlen = malloc(T * sizeof *llm->b_kvlen);
    llm->b_tables = malloc(T * sizeof *llm->b_tables);
    llm->b_rows = malloc(T * sizeof *llm->b_rows);
    if (!llm->b_tokens || !llm->b_pos || !llm->b_slots || !llm->b_qstart || !llm->b_kvlen ||
        !llm->b_tables || !llm->b_rows)
        return PGD_ENOMEM;
    return 0;
}

/* The parts every llm has once model, tokenizer and backend exist. */
static int finish_init(pgd_llm *llm) {
    const pgd_model_config *c = &llm->model->cfg;
    llm->n_vocab = c->n_vocab;
    if (pgd_tokenizer_n_vocab(llm->tok) > c->n_vocab)
        return pgd_error_set(PGD_EFORMAT, "tokenizer has %zu tokens but the model's output has %u",
                             pgd_tokenizer_n_vocab(llm->tok), c->n_vocab);
    uint32_t max_ctx = llm->opt.max_ctx;
    llm->n_ctx = max_ctx && max_ctx < c->n_ctx_train ? max_ctx : c->n_ctx_train;
    const pgd_backend_config *bc = &llm->backend->cfg;
    llm->opt.block_size = bc->block_size;
    llm->opt.max_batch_tokens = bc->max_tokens;
    int rc;
    if ((rc = pgd_kvpool_create(bc->n_blocks, bc->block_size, llm->opt.prefix_caching,
                                &llm->pool)) ||
        (rc = pgd_sampler_scratch_create((int32_t)llm->n_vocab, &llm->sscratch)))
        return rc;
    return alloc_step_scratch(llm);
}

int pgd_llm_wrap(pgd_model *model, pgd_tokenizer *tok, pgd_chat_template *tmpl,
                 pgd_backend *backend, const pgd_llm_options *o, pgd_llm **out) {
    *out = NULL;
    pgd_llm *llm = calloc(1, sizeof *llm);
    if (!llm) {
        pgd_backend_destroy(backend);
        pgd_chat_template_free(tmpl);
        pgd_tokenizer_free(tok);
        pgd_model_free(model);
        return PGD_ENOMEM;
    }
    llm->opt = *o;
    llm->model = model;
    llm->tok = tok;
    llm->tmpl = tmpl;
    llm->backend = backend;
    if (!tmpl) snprintf(llm->tmpl_error, sizeof llm->tmpl_error, "no chat template given");
    int rc = finish_init(llm);
    if (rc) {
        pgd_llm_close(llm);
        return rc;
    }
    *out = llm;
    return 0;
}

int pgd_llm_open(const pgd_llm_options *o, pgd_llm **out) {
    *out = NULL;
    pgd_llm *llm = calloc(1, sizeof *llm);
    if (!llm) return PGD_ENOMEM;
    llm->opt = *o;
    if (!llm->opt.block_size) llm->opt.block_size = 16;
    if (!llm->opt.max_batch_tokens) llm->opt.max_batch_tokens = 512;
    int rc;
    if ((rc = pgd_gguf_open(o->model_path, &llm->gguf)) ||
        (rc = pgd_model_load(llm->gguf, o->model_flags, &llm->model)) ||
        (rc = pgd_tokenizer_load(llm->gguf, &llm->tok)))
        goto fail;
    const pgd_model_config *c = &llm->model->cfg;

    /* The chat template is optional: plain completions work without one. */
    pgd_str bos = pgd_tokenizer_token_text(llm->tok, pgd_tokenizer_bos(llm->tok));
    pgd_str eos = pgd_tokenizer_token_text(llm->tok, pgd_tokenizer_eos(llm->tok));
    char bos_c[128] = "", eos_c[128] = "";
    snprintf(bos_c, sizeof bos_c, "%.*s", (int)bos.len, bos.ptr ? bos.ptr : "");
    snprintf(eos_c, sizeof eos_c, "%.*s", (int)eos.len, eos.ptr ? eos.ptr : "");
    if (pgd_chat_template_from_gguf(llm->gguf, o->chat_template, bos_c, eos_c, &llm->tmpl)) {
        if (o->chat_template) {
            rc = PGD_EINVAL;
            goto fail;
        }
        snprintf(llm->tmpl_error, sizeof llm->tmpl_error, "%s", pgd_error_detail());
        llm->tmpl = NULL;
    }

    uint32_t bs = llm->opt.block_size;
    pgd_kv_dtype kv = o->kv_dtype;
    if (kv == PGD_KV_AUTO) kv = (o->model_flags & PGD_MODEL_F32) ? PGD_KV_F32 : PGD_KV_F16;
    uint64_t block_bytes = pgd_cpu_kv_block_bytes(c, bs, kv);
    uint64_t n_blocks = o->kv_blocks;
    if (!n_blocks) {
        uint64_t bytes = o->kv_cache_bytes ? o->kv_cache_bytes : DEFAULT_KV_BYTES;
        n_blocks = bytes / block_bytes;
    }
    if (n_blocks > UINT32_MAX / bs) n_blocks = UINT32_MAX / bs;
    if (n_blocks < 2) {
        rc = pgd_error_set(PGD_EINVAL, "KV cache too small: %llu blocks of %u tokens",
                           (unsigned long long)n_blocks, bs);
        goto fail;
    }
    pgd_backend_config bc = {.n_blocks = (uint32_t)n_blocks,
                             .block_size = bs,
                             .max_tokens = llm->opt.max_batch_tokens,
                             .n_threads = o->n_threads,
                             .act_q8 = o->act_q8,
                             .kv_dtype = kv};
    if ((rc = pgd_backend_cpu_create(llm->model, &bc, &llm->backend)) || (rc = finish_init(llm)))
        goto fail;
    *out = llm;
    return 0;
fail:
    pgd_llm_close(llm);
    return rc;
}

void pgd_llm_close(pgd_llm *llm) {
    if (!llm) return;
    pgd_backend_destroy(llm->backend);
    pgd_kvpool_destroy(llm->pool);
    pgd_sampler_scratch_destroy(llm->sscratch);
    pgd_chat_template_free(llm->tmpl);
    pgd_tokenizer_free(llm->tok);
    pgd_model_free(llm->model);
    pgd_gguf_close(llm->gguf);
    free(llm->b_tokens);
    free(llm->b_pos);
    free(llm->b_slots);
    free(llm->b_qstart);
    free(llm->b_kvlen);
    free(llm->b_tables);
    free(llm->b_rows);
    free(llm->logits);
    free(llm);
}

/* ---- prompts ------------------------------------------------------------------------------ */

static int with_bos(const pgd_llm *llm, pgd_tokens *out, size_t start) {
    int32_t bos = pgd_tokenizer_bos(llm->tok);
    if (!pgd_tokenizer_add_bos(llm->tok) || bos < 0) return 0;
    if (out->n > start && out->ids[start] == bos) return 0;
    int rc = pgd_tokens_push(out, bos);
    if (rc) return rc;
    memmove(out->ids + start + 1, out->ids + start, (out->n - start - 1) * sizeof(int32_t));
    out->ids[start] = bos;
    return 0;
}

int pgd_llm_encode_text(const pgd_llm *llm, const char *text, size_t len, bool special,
                        pgd_tokens *out) {
    size_t start = out->n;
    pgd_span all = {0, len};
    int rc = pgd_tokenize(llm->tok, text, len, special ? &all : NULL, special ? 1 : 0, out);
    return rc ? rc : with_bos(llm, out, start);
}

int pgd_llm_encode_chat(const pgd_llm *llm, const pgd_chat_msg *msgs, size_t n,
                        bool add_generation_prompt, pgd_tokens *out) {
    if (!llm->tmpl)
        return pgd_error_set(PGD_EINVAL,
                             "this model has no usable chat template (%s); use "
                             "--chat-template NAME or plain completions",
                             llm->tmpl_error);
    pgd_chat_prompt p = {0};
    int rc = pgd_chat_render(llm->tmpl, msgs, n, add_generation_prompt, &p);
    size_t start = out->n;
    if (!rc) rc = pgd_tokenize(llm->tok, p.text.data, p.text.len, p.special, p.n_special, out);
    if (!rc) rc = with_bos(llm, out, start);
    pgd_chat_prompt_free(&p);
    return rc;
}

/* ---- sequences ----------------------------------------------------------------------------- */

void pgd_seq_params_default(pgd_seq_params *p) {
    memset(p, 0, sizeof *p);
    pgd_sampling_params_default(&p->sampling);
}

int pgd_seq_create(pgd_llm *llm, const int32_t *prompt, uint32_t n_prompt, const pgd_seq_params *p,
                   pgd_seq **out) {
    *out = NULL;
    if (n_prompt == 0) return pgd_error_set(PGD_EINVAL, "the prompt is empty");
    if (n_prompt >= llm->n_ctx)
        return pgd_error_set(PGD_EINVAL,
                             "the prompt has %u tokens; this model's context holds %u (prompt "
                             "and output together)",
                             n_prompt, llm->n_ctx);
    for (uint32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= llm->n_vocab)
            return pgd_error_set(PGD_EINVAL, "prompt token %d is out of range [0, %u)", prompt[i],
                                 llm->n_vocab);
    const char *param = NULL;
    int rc = pgd_sampling_params_validate(&p->sampling, (int32_t)llm->n_vocab, &param);
    if (rc) return rc;
    pgd_seq *s = calloc(1, sizeof *s);
    if (!s) return PGD_ENOMEM;
    s->llm = llm;
    pgd_block_table_init(&s->bt, llm->pool, p->cache_salt);
    for (uint32_t i = 0; i < n_prompt && !rc; i++) rc = pgd_tokens_push(&s->tokens, prompt[i]);
    if (rc) goto fail;
    s->n_prompt = n_prompt;

    int32_t eos[PGD_FINISH_MAX_EOS];
    int n_eos = 0;
    const int32_t *eog;
    size_t n_eog = pgd_tokenizer_eog_ids(llm->tok, &eog);
    for (size_t i = 0; i < n_eog && n_eos < PGD_FINISH_MAX_EOS; i++) eos[n_eos++] = eog[i];
    for (int i = 0; i < p->n_stop_ids; i++) {
        if (n_eos == PGD_FINISH_MAX_EOS) {
            rc = pgd_error_set(PGD_EINVAL, "too many stop token ids");
            goto fail;
        }
        eos[n_eos++] = p->stop_ids[i];
    }
    if ((rc = pgd_finish_rule_init(&s->rule, eos, n_eos, p->ignore_eos, p->max_tokens, llm->n_ctx)))
        goto fail;
    if ((rc = pgd_stop_init(&s->stop, p->stop, p->n_stop, false))) goto fail;
    if ((rc =
             pgd_sampler_create(&p->sampling, (int32_t)llm->n_vocab, llm->sscratch, &s->sampler)) ||
        (rc = pgd_sampler_accept_prompt(s->sampler, prompt, n_prompt))) {
        pgd_stop_free(&s->stop);
        goto fail;
    }
    pgd_detok_init(&s->detok, llm->tok, false);
    *out = s;
    return 0;
fail:
    pgd_sampler_destroy(s->sampler);
    pgd_tokens_free(&s->tokens);
    pgd_block_table_destroy(&s->bt);
    free(s);
    return rc;
}

void pgd_seq_destroy(pgd_seq *s) {
    if (!s) return;
    pgd_block_table_destroy(&s->bt);
    pgd_sampler_destroy(s->sampler);
    pgd_stop_free(&s->stop);
    pgd_tokens_free(&s->tokens);
    pgd_buf_free(&s->delta);
    free(s);
}

int pgd_seq_attach_prefix(pgd_seq *s) {
    if (s->bt.n_tokens || s->n_computed) return 0;
    uint32_t n_cached = 0;
    int rc =
        pgd_block_table_attach_prefix(&s->bt, s->tokens.ids, (uint32_t)s->tokens.n, 0, &n_cached);
    if (rc) return rc;
    s->n_computed = n_cached;
    if (s->n_computed <= s->n_prompt) s->n_cached_prompt = n_cached;
    return 0;
}

void pgd_seq_reset_kv(pgd_seq *s) {
    pgd_block_table_free(&s->bt);
    s->n_computed = 0;
}

/* ---- the step ----------------------------------------------------------------------------- */

static int ensure_logits(pgd_llm *llm, uint32_t rows) {
    if (rows <= llm->logits_rows) return 0;
    float *p = realloc(llm->logits, (uint64_t)rows * llm->n_vocab * sizeof(float));
    if (!p) return pgd_error_set(PGD_ENOMEM, "out of memory for %u logit rows", rows);
    llm->logits = p;
    llm->logits_rows = rows;
    return 0;
}

/* After sampling `tok`: finish state and text. */
static int seq_append(pgd_seq *s, const pgd_sample_result *r) {
    int rc = pgd_tokens_push(&s->tokens, r->token);
    if (rc) return rc;
    pgd_sampler_accept(s->sampler, r->token);
    s->last = *r;
    s->sampled = true;
    int64_t n_out = (int64_t)s->tokens.n - s->n_prompt;
    s->finish = pgd_finish_check(&s->rule, r->token, s->n_prompt, n_out);
    bool eos = s->finish == PGD_FINISH_STOP && pgd_finish_is_eos(&s->rule, r->token);
    pgd_buf piece = PGD_BUF_INIT;
    int matched = -1;
    if (!eos) rc = pgd_detok_push(&s->detok, r->token, &piece);
    if (!rc && s->finish != PGD_FINISH_NONE) rc = pgd_detok_flush(&s->detok, &piece);
    if (!rc && piece.len) rc = pgd_stop_feed(&s->stop, piece.data, piece.len, &s->delta, &matched);
    if (!rc && matched >= 0) s->finish = PGD_FINISH_STOP;
    if (!rc && s->finish != PGD_FINISH_NONE) rc = pgd_stop_flush(&s->stop, &s->delta);
    pgd_buf_free(&piece);
    return rc;
}

int pgd_llm_step(pgd_llm *llm, pgd_step_item *items, uint32_t n_items) {
    uint32_t T = 0, need = 0, rows = 0;
    for (uint32_t i = 0; i < n_items; i++) {
        pgd_seq *s = items[i].seq;
        s->sampled = false;
        if (items[i].n_tokens == 0 || items[i].n_tokens > pgd_seq_pending(s))
            return pgd_error_set(PGD_EINVAL, "step item %u: %u tokens, %u pending", i,
                                 items[i].n_tokens, pgd_seq_pending(s));
        T += items[i].n_tokens;
        uint32_t end = s->n_computed + items[i].n_tokens;
        if (end > s->bt.n_tokens)
            need += pgd_block_table_blocks_needed(&s->bt, end - s->bt.n_tokens);
    }
    if (T == 0 || T > llm->opt.max_batch_tokens)
        return pgd_error_set(PGD_EINVAL, "step of %u tokens (limit %u)", T,
                             llm->opt.max_batch_tokens);
    if (need > pgd_kvpool_num_free(llm->pool)) return PGD_ENOBLOCKS;

    /* Reserve slots (cannot fail for lack of blocks now) and copy shared partial blocks. */
    int rc;
    for (uint32_t i = 0; i < n_items; i++) {
        pgd_seq *s = items[i].seq;
        uint32_t end = s->n_computed + items[i].n_tokens;
        if (end <= s->bt.n_tokens) continue;
        pgd_block_copy cow = {0, 0};
        if ((rc = pgd_block_table_grow(&s->bt, end - s->bt.n_tokens, &cow))) return rc;
        if (cow.src && (rc = llm->backend->ops->copy_blocks(llm->backend, &cow.src, &cow.dst, 1)))
            return rc;
    }

    /* Build the flat batch. */
    uint32_t t = 0;
    for (uint32_t i = 0; i < n_items; i++) {
        pgd_seq *s = items[i].seq;
        uint32_t n = items[i].n_tokens, c0 = s->n_computed;
        llm->b_qstart[i] = t;
        llm->b_kvlen[i] = c0 + n;
        llm->b_tables[i] = s->bt.blocks;
        if ((rc = pgd_block_table_slots(&s->bt, c0, n, llm->b_slots + t))) return rc;
        items[i].logits_row = rows;
        for (uint32_t j = 0; j < n; j++, t++) {
            llm->b_tokens[t] = s->tokens.ids[c0 + j];
            llm->b_pos[t] = (int32_t)(c0 + j);
            bool last = j + 1 == n;
            bool sample = last && c0 + n == s->tokens.n && s->finish == PGD_FINISH_NONE;
            if (items[i].all_logits || sample) llm->b_rows[rows++] = t;
        }
    }
    llm->b_qstart[n_items] = t;
    if ((rc = ensure_logits(llm, rows))) return rc;
    pgd_batch batch = {.n_tokens = T,
                       .tokens = llm->b_tokens,
                       .positions = llm->b_pos,
                       .slots = llm->b_slots,
                       .n_seqs = n_items,
                       .q_start = llm->b_qstart,
                       .kv_len = llm->b_kvlen,
                       .block_tables = llm->b_tables,
                       .n_logits = rows,
                       .logit_rows = llm->b_rows};
    if ((rc = pgd_backend_forward(llm->backend, &batch, llm->logits))) return rc;
    llm->n_forward_tokens += T;

    /* Advance, cache full blocks, sample. */
    for (uint32_t i = 0; i < n_items; i++) {
        pgd_seq *s = items[i].seq;
        uint32_t n = items[i].n_tokens;
        s->n_computed += n;
        if ((rc = pgd_block_table_cache_blocks(&s->bt, s->tokens.ids, s->n_computed))) return rc;
        if (s->n_computed != s->tokens.n || s->finish != PGD_FINISH_NONE) continue;
        uint32_t row = items[i].logits_row + (items[i].all_logits ? n - 1 : 0);
        pgd_sample_result r;
        if ((rc = pgd_sampler_sample(s->sampler, llm->logits + (uint64_t)row * llm->n_vocab, &r)) ||
            (rc = seq_append(s, &r)))
            return rc;
    }
    return 0;
}
