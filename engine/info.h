/*
 * engine/info.h — what a loaded model is to the outside world: its hyper-parameters, context
 * limit, vocabulary and tokenizer, chat template, and the prompt encoders built on them.
 *
 * The model-info handle is immutable once opened: any thread may read it and call the
 * encoders (the server tokenizes on libuv's threadpool while the scheduler thread runs). The
 * mutable half of a model — weights on a device, KV memory, scratch — is the runner
 * (engine/runner.h), which only the scheduler thread touches.
 *
 * Ownership: pgd_model_info owns the GGUF mapping, the tokenizer and the chat template. It must
 * outlive every runner, sequence and scheduler made from it.
 */
#ifndef PGD_ENGINE_INFO_H
#define PGD_ENGINE_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/preset.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

typedef struct pgd_model_info {
    pgd_model_config cfg;     /* hyper-parameters */
    pgd_gguf *gguf;           /* the mapped file the weights are read from; NULL for dummy
                                 weights or a model assembled by pgd_model_info_wrap */
    pgd_model_preset *preset; /* dummy weights: the preset whose shapes they take; else NULL */
    pgd_tokenizer *tok;       /* vocabulary and tokenizer */
    pgd_chat_template *tmpl;  /* NULL when the model has none or it is not recognised */
    char tmpl_error[256];     /* why tmpl is NULL */
    uint32_t n_vocab;         /* the model's output size: valid ids are [0, n_vocab) */
    uint32_t n_ctx;           /* context limit: the trained context, or less if asked */
} pgd_model_info;

/* Open a GGUF file: hyper-parameters, tokenizer and chat template (no weight is touched; the
 * runner binds them). chat_template: a family name overriding the model's own, or NULL.
 * max_ctx: context limit, 0 = the model's trained context. Errors say what is wrong with the
 * file (pgd_error_detail). */
int pgd_model_info_open(const char *path, const char *chat_template, uint32_t max_ctx,
                        pgd_model_info **out);

/* A model without a file: the shapes of a preset (engine/model/preset.h: a name or a path),
 * dummy weights (engine/model/dummy.h, made by the runner), a byte-level tokenizer over the
 * preset's vocabulary (ids 0..255 are the bytes, then <s>, </s>, <|im_start|>, <|im_end|>, then
 * plain tokens "<tN>") and the chatml template unless chat_template names another family. */
int pgd_model_info_dummy(const char *preset, const char *chat_template, uint32_t max_ctx,
                         pgd_model_info **out);

/* Assemble a model info from parts (tests: a config-only model and a synthetic tokenizer).
 * Takes ownership of tok and tmpl (may be NULL), also on failure. */
int pgd_model_info_wrap(const pgd_model_config *cfg, pgd_tokenizer *tok, pgd_chat_template *tmpl,
                        uint32_t max_ctx, pgd_model_info **out);

void pgd_model_info_close(pgd_model_info *info); /* NULL is fine */

/* Prompt encoding. Plain text: control tokens are NOT recognised unless `special`; a BOS is
 * prepended when the model asks for one. Chat: rendered with the template; control tokens are
 * recognised only in template text; BOS prepended when asked and not already there. Ids are
 * appended to out. Any thread. */
int pgd_encode_text(const pgd_model_info *info, const char *text, size_t len, bool special,
                    pgd_tokens *out);
int pgd_encode_chat(const pgd_model_info *info, const pgd_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, pgd_tokens *out);
/* Same, offering tools (pgd_chat_render_tools; NULL: none). */
int pgd_encode_chat_tools(const pgd_model_info *info, const pgd_chat_msg *msgs, size_t n,
                          const pgd_chat_tools *tools, bool add_generation_prompt, pgd_tokens *out);
/* Same, with render options (pgd_chat_render_with; NULL: the defaults): a request's
 * chat_template_kwargs and reasoning_content. */
int pgd_encode_chat_with(const pgd_model_info *info, const pgd_chat_msg *msgs, size_t n,
                         const pgd_chat_tools *tools, const pgd_chat_render_opts *opts,
                         pgd_tokens *out);

#endif
