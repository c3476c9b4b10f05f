/*
 * engine/sampling/sampler.h — per-request sampling: logit bias, penalties, temperature, top-k,
 * top-p, min-p and a seeded draw, plus the logprobs OpenAI-compatible servers report.
 *
 * Owns: the sampling parameters of one request (pgd_sampling_params, plain data validated by
 * pgd_sampling_params_validate), the per-sequence sampler state (pgd_sampler: its own RNG,
 * the counts of seen tokens for the penalties, a copy of the logit bias) and the scratch
 * buffers one sample call works in (pgd_sampler_scratch, [n_vocab]-sized, allocated once).
 *
 * Order of operations in pgd_sampler_sample, over one row of raw logits l[n_vocab]:
 *   0. JSON constraint:     l[id] = -inf for every id that cannot continue JSON the schema
 *                           allows (only with pgd_sampler_constrain_json)
 *   1. logit_bias:          l[id] += bias                 (raw logits, each listed id)
 *      held ends:           l[id] = -inf for the ids pgd_sampler_hold_ends holds, while the
 *                           output is shorter than its minimum (vLLM's min_tokens)
 *   2. repetition_penalty:  over ids seen in prompt + output (CTRL / HF / vLLM):
 *                           l > 0 ? l / r : l * r
 *   3. frequency/presence:  over OUTPUT ids only (OpenAI): l -= freq * count + pres * (count>0)
 *   4. temperature < 1e-5 (0 included): greedy, argmax of l, ties -> lowest id; stop here.
 *   5. temperature:         p ~ exp((l - max l) / T)
 *   6. top-k:               keep the k most probable ids (ties -> lower id first)
 *   7. top-p:               keep the smallest set of most probable ids whose mass is
 *                           >= top_p of the (top-k renormalised) distribution; at least one
 *   8. min-p:               drop ids with p < min_p * p_max
 *   9. draw one id from the renormalised survivors with the sequence's RNG.
 * Candidate order (steps 6-9 with top-k or top-p): the survivors are ranked best first — more
 * probable, then lower id — and every sum over them (the top-k mass, the top-p prefix's running
 * mass, the draw's total and its running sum) runs in that order, in double. The result is then
 * a function of the row and the draw alone, which the device sampler (kernels/cuda/sample.cu)
 * reproduces bit for bit.
 * NaN logits count as -inf (never chosen); +inf counts as FLT_MAX. A row whose every logit is
 * -inf/NaN is an error (PGD_EINVAL).
 * Logprobs are those of the model's distribution: log_softmax of the RAW logits (before steps
 * 1-8), which is what OpenAI-compatible servers report by default. A logprob may be -INFINITY
 * (a token the model masked); the API layer decides how to print it.
 *
 * Invariants: the RNG advances by exactly one 64-bit draw per non-greedy sample and by none per
 * greedy one, so the same seed and the same logits give the same tokens whatever else shares the
 * batch. A sample call never allocates.
 *
 * Threading: a sampler and a scratch belong to one thread (the scheduler thread); a scratch may
 * be shared by many samplers of that thread (it holds nothing between calls).
 */
#ifndef PGD_ENGINE_SAMPLER_H
#define PGD_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sample_types.h" /* pgd_sample_result, pgd_sample_spec and their limits */
#include "engine/sampling/json_schema.h"

/* the most ids pgd_sampler_hold_ends holds */
#define PGD_SAMPLER_MAX_HELD 32

/* the largest temperature pgd_sampling_params_validate accepts */
#define PGD_SAMPLER_MAX_TEMPERATURE 100.0f

typedef struct pgd_logit_bias {
    int32_t token;
    float bias; /* added to the raw logit; finite, within [-100, 100] as OpenAI documents */
} pgd_logit_bias;

typedef struct pgd_sampling_params {
    float temperature;                /* 0 = greedy; [0, 100] */
    int32_t top_k;                    /* 0 or -1 = off; >= n_vocab is off too */
    float top_p;                      /* (0, 1]; 1 = off */
    float min_p;                      /* [0, 1]; 0 = off */
    float repetition_penalty;         /* > 0; 1 = off */
    float presence_penalty;           /* [-2, 2]; 0 = off */
    float frequency_penalty;          /* [-2, 2]; 0 = off */
    const pgd_logit_bias *logit_bias; /* [n_logit_bias], borrowed: pgd_sampler_create copies it */
    size_t n_logit_bias;
    uint64_t seed;        /* the caller passes a random one (pgd_sampler_random_seed) if absent */
    bool logprobs;        /* report the chosen token's logprob */
    int32_t top_logprobs; /* 0..20 alternatives; > 0 needs logprobs */
} pgd_sampling_params;

/* Defaults: temperature 1, every filter and penalty off, no logprobs, seed 0. */
void pgd_sampling_params_default(pgd_sampling_params *p);

/* 0, or PGD_EINVAL with a detail (pgd_error_set) naming the bad parameter; *param (if not NULL)
 * is then set to the parameter's OpenAI name ("temperature", "top_p", "logit_bias", ...), a
 * static string, for the error body's "param" field. */
int pgd_sampling_params_validate(const pgd_sampling_params *p, int32_t n_vocab, const char **param);

/* A seed from the operating system's entropy (for requests that give none). */
uint64_t pgd_sampler_random_seed(void);

/* Scratch for sample calls: one per thread is enough. Created for n_vocab; usable by samplers
 * of any n_vocab up to that. */
typedef struct pgd_sampler_scratch pgd_sampler_scratch;

int pgd_sampler_scratch_create(int32_t n_vocab, pgd_sampler_scratch **out);
void pgd_sampler_scratch_destroy(pgd_sampler_scratch *sc); /* NULL is fine */

typedef struct pgd_sampler pgd_sampler;

/* Creates a sampler for one sequence. The params are validated (PGD_EINVAL as above) and
 * copied (logit_bias included). `scratch` is borrowed and must outlive the sampler; NULL makes
 * the sampler allocate its own (about 12 * n_vocab bytes). */
int pgd_sampler_create(const pgd_sampling_params *p, int32_t n_vocab, pgd_sampler_scratch *scratch,
                       pgd_sampler **out);
void pgd_sampler_destroy(pgd_sampler *s); /* NULL is fine */

/* Records prompt tokens for the repetition penalty (may be called once per prefill chunk).
 * PGD_EINVAL for an id outside [0, n_vocab); PGD_ENOMEM. */
int pgd_sampler_accept_prompt(pgd_sampler *s, const int32_t *ids /* [n] */, size_t n);

/* Chooses the next token from one row of raw logits (see the order above) and fills *out.
 * Does not record the token: call pgd_sampler_accept once the sequence keeps it.
 * PGD_EINVAL if every logit is -inf or NaN (after bias and penalties). */
int pgd_sampler_sample(pgd_sampler *s, const float *logits /* [n_vocab] */, pgd_sample_result *out);

/* The logprobs of a given token under one row of raw logits: out->token = token,
 * out->logprob its log_softmax and out->top the top_logprobs (0..20) most probable ids — the same
 * numbers a sample reports (a prompt token's logprob, for echo) — and, when rank is not NULL,
 * *rank = 1 + the ids whose logit is above the token's (ties share a rank). Never allocates. */
void pgd_sample_token_logprobs(const float *logits /* [n_vocab] */, int32_t n_vocab, int32_t token,
                               int32_t top_logprobs, pgd_sample_result *out, int32_t *rank);

/* Records an output token (penalties). PGD_EINVAL out of range; PGD_ENOMEM. */
int pgd_sampler_accept(pgd_sampler *s, int32_t id);

/* ---- output constrained to JSON a schema allows ---------------------------------------------
 * (response_format json_object and json_schema) The vocabulary as bytes: piece(ctx, t, &len) gives
 * token t's (none for a control token), valid as long as the vocabulary. A token that ends
 * generation (eog) is allowed only once the object is whole, whatever its bytes; any other token
 * without bytes never. */
typedef struct pgd_vocab_bytes {
    const char *(*piece)(const void *ctx, int32_t t, size_t *len);
    const void *ctx;
    int32_t n_vocab;
    const int32_t *eog; /* [n_eog] end-of-generation ids */
    size_t n_eog;
    const uint32_t *plain; /* [n_vocab] pgd_json_plain_chars of each token's bytes (a token
                              taken whole inside a string's text), or NULL */
} pgd_vocab_bytes;

/* From now on, before step 1, every token whose bytes would make the output so far no prefix of
 * a JSON document `schema` allows (engine/sampling/json_fsm.h; pgd_json_schema_object(): one
 * object) gets -inf, an ending token too until the document is whole, and every other token
 * once it is closed (whole, with nothing but whitespace able to follow: the answer ends there
 * rather than running on in whitespace); pgd_sampler_accept
 * advances the recognizer by the token's bytes. Such a sampler runs on the host
 * (pgd_sampler_on_device is false). `v` is borrowed: it must outlive s; the sampler holds a
 * reference to `schema` (pgd_json_schema_ref). */
void pgd_sampler_constrain_json(pgd_sampler *s, const pgd_vocab_bytes *v,
                                const pgd_json_schema *schema);

/* ---- sampling on the device ---------------------------------------------------------------
 * A sequence whose sampler needs no logit bias and no penalty (pgd_sampler_on_device) can be
 * sampled where its logits are, by the backend: the host hands it the row's spec and the row's
 * 64 random bits, drawn from the sequence's own RNG (pgd_sampler_draw), and the backend runs
 * steps 4-9 and the logprobs (pgd_sample_logits on the CPU; a CUDA kernel on the GPU). The same
 * seed then gives the same tokens on every backend, and the logits never leave the device. */

/* The sampler's spec (effective values). */
void pgd_sampler_spec(const pgd_sampler *s, pgd_sample_spec *out);

/* Whether the backend may sample this sequence: no logit bias, no penalty, no JSON constraint
 * and no end ids held (it can change from one step to the next). */
bool pgd_sampler_on_device(const pgd_sampler *s);

/* Until min_output tokens have been accepted, ids[0..n) (a sequence's end ids: vLLM's
 * min_tokens) cannot be drawn: their logits are -inf after the logit bias (step 1), and the
 * sampler is not on the device (pgd_sampler_on_device) while they are held. Copies the ids;
 * replaces an earlier hold. PGD_EINVAL for more than PGD_SAMPLER_MAX_HELD ids or one outside
 * [0, n_vocab). */
int pgd_sampler_hold_ends(pgd_sampler *s, const int32_t *ids /* [n] */, int n, int64_t min_output);

/* The random bits of the sequence's next sample: one 64-bit RNG draw, or 0 without drawing
 * when greedy. pgd_sampler_sample draws them itself; call this only for a device row. */
uint64_t pgd_sampler_draw(pgd_sampler *s);

/* Steps 4-9 of the order above over raw logits (no bias, no penalty) with the uniform number
 * (draw >> 11) * 2^-53, and the logprobs the spec asks for: the reference every device sampler
 * matches. pgd_sampler_sample(s, logits) equals pgd_sample_logits(logits, spec of s,
 * pgd_sampler_draw(s)) bit for bit for a sequence pgd_sampler_on_device allows. Uses sc (of at
 * least n_vocab) as scratch; never allocates. PGD_EINVAL if every logit is -inf or NaN. */
int pgd_sample_logits(const float *logits /* [n_vocab] */, int32_t n_vocab,
                      const pgd_sample_spec *spec, uint64_t draw, pgd_sampler_scratch *sc,
                      pgd_sample_result *out);

/* For tests and debugging: writes the logits after steps 1-3 (bias and penalties, before
 * temperature and sanitising) into out[n_vocab]. */
void pgd_sampler_process_logits(const pgd_sampler *s, const float *logits /* [n_vocab] */,
                                float *out /* [n_vocab] */);

/* For tests and debugging: the distribution step 9 would draw from, as probs[n_vocab] (0 for
 * every filtered-out id, the survivors renormalised to sum 1; one-hot when greedy). Does not
 * advance the RNG. PGD_EINVAL as pgd_sampler_sample. */
int pgd_sampler_distribution(pgd_sampler *s, const float *logits /* [n_vocab] */,
                             float *probs /* [n_vocab] */);

/* Output tokens accepted so far, and how many times `id` was among them. */
int64_t pgd_sampler_n_output(const pgd_sampler *s);
uint32_t pgd_sampler_output_count(const pgd_sampler *s, int32_t id);

#endif
