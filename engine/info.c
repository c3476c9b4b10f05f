/*
 * engine/info.c — opening a model's description (config, tokenizer, chat template) and the
 * prompt encoders (see info.h).
 *
 * Invariants: once returned, nothing in a pgd_model_info changes; tok->n_vocab <= n_vocab.
 */
#include "engine/info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* The parts every model info has once config and tokenizer exist. */
static int finish_init(pgd_model_info *info, uint32_t max_ctx) {
    const pgd_model_config *c = &info->cfg;
    info->n_vocab = c->n_vocab;
    if (pgd_tokenizer_n_vocab(info->tok) > c->n_vocab)
        return pgd_error_set(PGD_EFORMAT, "tokenizer has %zu tokens but the model's output has %u",
                             pgd_tokenizer_n_vocab(info->tok), c->n_vocab);
    info->n_ctx = max_ctx && max_ctx < c->n_ctx_train ? max_ctx : c->n_ctx_train;
    return 0;
}

int pgd_model_info_wrap(const pgd_model_config *cfg, pgd_tokenizer *tok, pgd_chat_template *tmpl,
                        uint32_t max_ctx, pgd_model_info **out) {
    *out = NULL;
    pgd_model_info *info = calloc(1, sizeof *info);
    if (!info) {
        pgd_chat_template_free(tmpl);
        pgd_tokenizer_free(tok);
        return PGD_ENOMEM;
    }
    info->cfg = *cfg;
    info->tok = tok;
    info->tmpl = tmpl;
    if (!tmpl) snprintf(info->tmpl_error, sizeof info->tmpl_error, "no chat template given");
    int rc = finish_init(info, max_ctx);
    if (rc) {
        pgd_model_info_close(info);
        return rc;
    }
    *out = info;
    return 0;
}

int pgd_model_info_open(const char *path, const char *chat_template, uint32_t max_ctx,
                        pgd_model_info **out) {
    *out = NULL;
    pgd_model_info *info = calloc(1, sizeof *info);
    if (!info) return PGD_ENOMEM;
    int rc;
    if ((rc = pgd_gguf_open(path, &info->gguf)) ||
        (rc = pgd_model_config_read(info->gguf, &info->cfg)) ||
        (rc = pgd_tokenizer_load(info->gguf, &info->tok)))
        goto fail;

    /* The chat template is optional: plain completions work without one. */
    pgd_str bos = pgd_tokenizer_token_text(info->tok, pgd_tokenizer_bos(info->tok));
    pgd_str eos = pgd_tokenizer_token_text(info->tok, pgd_tokenizer_eos(info->tok));
    char bos_c[128] = "", eos_c[128] = "";
    snprintf(bos_c, sizeof bos_c, "%.*s", (int)bos.len, bos.ptr ? bos.ptr : "");
    snprintf(eos_c, sizeof eos_c, "%.*s", (int)eos.len, eos.ptr ? eos.ptr : "");
    if (pgd_chat_template_from_gguf(info->gguf, chat_template, bos_c, eos_c, &info->tmpl)) {
        if (chat_template) {
            rc = PGD_EINVAL;
            goto fail;
        }
        snprintf(info->tmpl_error, sizeof info->tmpl_error, "%s", pgd_error_detail());
        info->tmpl = NULL;
    }
    if ((rc = finish_init(info, max_ctx))) goto fail;
    *out = info;
    return 0;
fail:
    pgd_model_info_close(info);
    return rc;
}

/* The dummy model's byte-level tokenizer over n_vocab ids (see info.h). */
static int byte_tokenizer(uint32_t n_vocab, pgd_tokenizer **out) {
    enum { BOS = 256, EOS, IM_START, IM_END, FIRST_PLAIN };
    if (n_vocab < FIRST_PLAIN)
        return pgd_error_set(PGD_EINVAL, "a vocabulary of %u is too small for bytes", n_vocab);
    const char **tokens = calloc(n_vocab, sizeof *tokens);
    int32_t *types = calloc(n_vocab, sizeof *types);
    char *names = malloc((size_t)n_vocab * 16);
    int rc = PGD_ENOMEM;
    if (!tokens || !types || !names) goto out;
    for (uint32_t i = 0; i < n_vocab; i++) {
        char *s = names + (size_t)i * 16;
        if (i < 256) {
            snprintf(s, 16, "<0x%02X>", i);
            types[i] = PGD_TOKEN_BYTE;
        } else if (i < FIRST_PLAIN) {
            static const char *const special[] = {"<s>", "</s>", "<|im_start|>", "<|im_end|>"};
            snprintf(s, 16, "%s", special[i - 256]);
            types[i] = PGD_TOKEN_CONTROL;
        } else {
            snprintf(s, 16, "<t%u>", i);
            types[i] = PGD_TOKEN_NORMAL;
        }
        tokens[i] = s;
    }
    pgd_tokenizer_desc d;
    pgd_tokenizer_desc_init(&d);
    d.model = "llama";
    d.n_vocab = n_vocab;
    d.tokens = tokens;
    d.types = types;
    d.bos = BOS;
    d.eos = EOS;
    d.eot = IM_END;
    d.add_bos = 0;
    d.add_space_prefix = 0;
    rc = pgd_tokenizer_create(&d, out);
out:
    free(tokens);
    free(types);
    free(names);
    return rc;
}

int pgd_model_info_dummy(const char *preset, const char *chat_template, uint32_t max_ctx,
                         pgd_model_info **out) {
    *out = NULL;
    pgd_model_info *info = calloc(1, sizeof *info);
    if (!info || !(info->preset = malloc(sizeof *info->preset))) {
        free(info);
        return PGD_ENOMEM;
    }
    int rc;
    if ((rc = pgd_model_preset_load(preset, info->preset))) goto fail;
    info->cfg = info->preset->cfg;
    if ((rc = byte_tokenizer(info->cfg.n_vocab, &info->tok)) ||
        (rc = pgd_chat_template_detect(NULL, 0, chat_template ? chat_template : "chatml", "<s>",
                                       "</s>", &info->tmpl)) ||
        (rc = finish_init(info, max_ctx)))
        goto fail;
    *out = info;
    return 0;
fail:
    pgd_model_info_close(info);
    return rc;
}

void pgd_model_info_close(pgd_model_info *info) {
    if (!info) return;
    free(info->preset);
    pgd_chat_template_free(info->tmpl);
    pgd_tokenizer_free(info->tok);
    pgd_gguf_close(info->gguf);
    free(info);
}

/* ---- prompts ------------------------------------------------------------------------------ */

static int with_bos(const pgd_model_info *info, pgd_tokens *out, size_t start) {
    int32_t bos = pgd_tokenizer_bos(info->tok);
    if (!pgd_tokenizer_add_bos(info->tok) || bos < 0) return 0;
    if (out->n > start && out->ids[start] == bos) return 0;
    int rc = pgd_tokens_push(out, bos);
    if (rc) return rc;
    memmove(out->ids + start + 1, out->ids + start, (out->n - start - 1) * sizeof(int32_t));
    out->ids[start] = bos;
    return 0;
}

int pgd_encode_text(const pgd_model_info *info, const char *text, size_t len, bool special,
                    pgd_tokens *out) {
    size_t start = out->n;
    pgd_span all = {0, len};
    int rc = pgd_tokenize(info->tok, text, len, special ? &all : NULL, special ? 1 : 0, out);
    return rc ? rc : with_bos(info, out, start);
}

int pgd_encode_chat(const pgd_model_info *info, const pgd_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, pgd_tokens *out) {
    return pgd_encode_chat_tools(info, msgs, n, NULL, add_generation_prompt, out);
}

int pgd_encode_chat_tools(const pgd_model_info *info, const pgd_chat_msg *msgs, size_t n,
                          const pgd_chat_tools *tools, bool add_generation_prompt,
                          pgd_tokens *out) {
    pgd_chat_render_opts opts = PGD_CHAT_RENDER_OPTS_DEFAULT;
    opts.add_generation_prompt = add_generation_prompt;
    return pgd_encode_chat_with(info, msgs, n, tools, &opts, out);
}

int pgd_encode_chat_with(const pgd_model_info *info, const pgd_chat_msg *msgs, size_t n,
                         const pgd_chat_tools *tools, const pgd_chat_render_opts *opts,
                         pgd_tokens *out) {
    if (!info->tmpl)
        return pgd_error_set(PGD_EINVAL,
                             "this model has no usable chat template (%s); use "
                             "--chat-template NAME or plain completions",
                             info->tmpl_error);
    pgd_chat_prompt p = {0};
    int rc = pgd_chat_render_with(info->tmpl, msgs, n, tools, opts, &p);
    size_t start = out->n;
    if (!rc) rc = pgd_tokenize(info->tok, p.text.data, p.text.len, p.special, p.n_special, out);
    if (!rc) rc = with_bos(info, out, start);
    pgd_chat_prompt_free(&p);
    return rc;
}
