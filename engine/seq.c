/*
 * engine/seq.c — a generation's text state: creation and appending a sampled token (see
 * seq.h).
 *
 * Invariants: tokens[0, n_prompt) is the prompt; finish != NONE means no more tokens are
 * appended; delta holds text no stop string can still claim.
 */
#include "engine/seq.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/runner.h"

_Static_assert(PGD_SAMPLER_MAX_HELD >= PGD_FINISH_MAX_EOS, "min_tokens holds every end id");

void pgd_seq_params_default(pgd_seq_params *p) {
    memset(p, 0, sizeof *p);
    pgd_sampling_params_default(&p->sampling);
}

int pgd_seq_create(pgd_runner *r, const int32_t *prompt, uint32_t n_prompt, const pgd_seq_params *p,
                   pgd_seq **out) {
    *out = NULL;
    const pgd_model_info *info = pgd_runner_info(r);
    PGD_ASSERT(n_prompt > 0 && n_prompt < info->n_ctx);
    pgd_seq *s = calloc(1, sizeof *s);
    if (!s) return PGD_ENOMEM;
    int rc = 0;
    for (uint32_t i = 0; i < n_prompt && !rc; i++) {
        PGD_ASSERT(prompt[i] >= 0 && (uint32_t)prompt[i] < info->n_vocab);
        rc = pgd_tokens_push(&s->tokens, prompt[i]);
    }
    if (rc) goto fail;
    s->n_prompt = n_prompt;

    int32_t eos[PGD_FINISH_MAX_EOS];
    int n_eos = 0;
    const int32_t *eog;
    size_t n_eog = pgd_tokenizer_eog_ids(info->tok, &eog);
    PGD_ASSERT(n_eog + (size_t)p->n_stop_ids <= PGD_FINISH_MAX_EOS);
    for (size_t i = 0; i < n_eog; i++) eos[n_eos++] = eog[i];
    for (int i = 0; i < p->n_stop_ids; i++) eos[n_eos++] = p->stop_ids[i];
    if ((rc =
             pgd_finish_rule_init(&s->rule, eos, n_eos, p->ignore_eos, p->max_tokens, info->n_ctx)))
        goto fail;
    if ((rc = pgd_stop_init(&s->stop, p->stop, p->n_stop, p->include_stop))) goto fail;
    if ((rc = pgd_sampler_create(&p->sampling, (int32_t)info->n_vocab,
                                 pgd_runner_sampler_scratch(r), &s->sampler)) ||
        (rc = pgd_sampler_accept_prompt(s->sampler, prompt, n_prompt))) {
        pgd_stop_free(&s->stop);
        goto fail;
    }
    if (p->json) pgd_sampler_constrain_json(s->sampler, pgd_runner_vocab_bytes(r), p->json);
    s->min_tokens = p->min_tokens > 0 ? p->min_tokens : 0;
    if (s->min_tokens &&
        (rc = pgd_sampler_hold_ends(s->sampler, s->rule.eos, s->rule.n_eos, s->min_tokens))) {
        pgd_stop_free(&s->stop);
        goto fail;
    }
    pgd_detok_init(&s->detok, info->tok, false);
    *out = s;
    return 0;
fail:
    pgd_sampler_destroy(s->sampler);
    pgd_tokens_free(&s->tokens);
    free(s);
    return rc;
}

void pgd_seq_destroy(pgd_seq *s) {
    if (!s) return;
    pgd_sampler_destroy(s->sampler);
    pgd_stop_free(&s->stop);
    pgd_tokens_free(&s->tokens);
    pgd_buf_free(&s->delta);
    free(s);
}

int pgd_seq_append(pgd_seq *s, const pgd_sample_result *r) {
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
    if (!rc && piece.len)
        rc = n_out <= s->min_tokens /* before min_tokens: no stop string is looked for */
                 ? pgd_buf_append(&s->delta, piece.data, piece.len)
                 : pgd_stop_feed(&s->stop, piece.data, piece.len, &s->delta, &matched);
    if (!rc && matched >= 0) s->finish = PGD_FINISH_STOP;
    if (!rc && s->finish != PGD_FINISH_NONE) rc = pgd_stop_flush(&s->stop, &s->delta);
    pgd_buf_free(&piece);
    return rc;
}
