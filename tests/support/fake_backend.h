/*
 * tests/support/fake_backend.h — a deterministic stand-in for a model, for scheduler tests and
 * model-free benchmarks: a backend whose "KV cache" stores, per slot, the token, its position
 * and a running hash of the whole context, and whose logits are a function of that hash.
 *
 * Model. For a context t[0..p], h(-1) = H0 and h(p) = mix(h(p-1), t[p], p). The greedy next
 * token after position p is pgd_fake_next(h(p)): the EOS id when eos_every > 0 and
 * (h >> 33) % eos_every == 0, else a printable ASCII byte 32 + h % 95. Every logit row has a
 * small pseudo-random spread (0..2) with 6 at the greedy token, so sampling with temperature
 * gives varied but seeded output. pgd_fake_greedy_next computes the same from token ids alone:
 * tests use it as the independent expectation.
 *
 * Because each written slot's hash is chained from the slot of the previous position (read
 * through the block table), anything the scheduler or the KV pool gets wrong — a wrong prefix
 * attached, a block freed while used, a missing copy-on-write, a stale block after preemption —
 * changes the output or is reported: forward fails with PGD_EINVAL when a slot it reads does
 * not hold the expected position, when two tokens of one batch write one slot, when the batch
 * is malformed (slots not matching block tables, positions not consecutive), and, with
 * `verify`, when a row's whole context does not hash back to its stored value.
 *
 * The fake model: a model info over a config-only model (n_vocab 257, no weights) and a byte
 * tokenizer ("llama" kind: ids 0..255 are the bytes <0x00>..<0xFF>, 256 is the control token
 * </s> = EOS, no BOS), and a runner over this backend (pgd_runner_wrap).
 *
 * Sampling: rows the runner hands over to sample (backend.h) go through pgd_sample_logits on
 * the row's logits, as the CPU backend does.
 *
 * Hidden states (embeddings): the model has n_embd = PGD_FAKE_EMBD and takes hidden rows
 * (caps.max_hidden_rows = max_tokens; 0 with `no_hidden`). The hidden state of the token at
 * position p is pgd_fake_hidden(h(p), i) for i in [0, PGD_FAKE_EMBD): a pure function of that
 * position's context hash, so a test computes an expected embedding from token ids alone
 * (pgd_fake_hash, or pgd_fake_chain step by step). Hidden rows are checked like logit rows (in
 * range, whole context re-hashed with `verify`).
 *
 * Step log: with `record`, every forward call appends {n_tokens, n_seqs, n_logits, n_hidden}
 * (n_logits: full and sampled rows together).
 *
 * Threading: like any backend, one thread at a time.
 */
#ifndef PGD_TESTS_FAKE_BACKEND_H
#define PGD_TESTS_FAKE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backends/backend.h"
#include "engine/info.h"
#include "engine/runner.h"

#define PGD_FAKE_VOCAB 257
#define PGD_FAKE_EOS   256
#define PGD_FAKE_EMBD  8 /* the model's n_embd: floats per hidden state */

typedef struct pgd_fake_config {
    uint32_t n_blocks;   /* KV blocks including the null block */
    uint32_t block_size; /* tokens per block (0 = 16) */
    uint32_t max_tokens; /* largest forward (0 = 512) */
    uint32_t n_ctx;      /* the model's context (0 = 8192) */
    uint32_t eos_every;  /* greedy EOS at about one position in eos_every (0 = never) */
    bool verify;         /* re-hash every logits row's whole context */
    bool record;         /* keep the step log */
    uint32_t delay_us;   /* sleep per forward call (benchmarks, thread tests) */
    uint64_t fail_at;    /* forward call number fail_at (1 = the first) fails with PGD_EIO */
    bool lost;           /* ... with PGD_EDEVLOST instead, and so does every later one */
    bool no_hidden;      /* returns no hidden states (caps.max_hidden_rows 0: no embeddings) */
} pgd_fake_config;

typedef struct pgd_fake_batch {
    uint32_t n_tokens, n_seqs, n_logits, n_hidden;
} pgd_fake_batch;

/* The fake model (see above): its info and a runner over the fake backend. The caller destroys
 * the runner, then closes the info. 0 or PGD_E*. */
int pgd_fake_create(const pgd_fake_config *c, pgd_model_info **info, pgd_runner **runner);

/* Step log and counters of a fake backend (b = pgd_runner_backend of a fake runner). The log
 * pointer is valid until the next forward or clear. */
const pgd_fake_batch *pgd_fake_log(const pgd_backend *b, size_t *n);
void pgd_fake_log_clear(pgd_backend *b);
uint64_t pgd_fake_n_copies(const pgd_backend *b);   /* blocks copied (copy-on-write) */
uint64_t pgd_fake_n_forwards(const pgd_backend *b); /* forward calls */

/* The model's hash chain and greedy choice, from token ids alone. */
uint64_t pgd_fake_hash(const int32_t *tokens, uint32_t n); /* h(n - 1); H0 for n = 0 */
/* One link of the chain: h(pos) from h(pos - 1) (H0 = pgd_fake_hash(NULL, 0) for pos 0). */
uint64_t pgd_fake_chain(uint64_t prev, int32_t token, uint32_t pos);
/* Element i (< PGD_FAKE_EMBD) of the hidden state of a token whose context hash is h: a
 * multiple of 2^-23 in [-1, 1), a pure function of (h, i). */
float pgd_fake_hidden(uint64_t h, uint32_t i);
int32_t pgd_fake_next(uint64_t h, uint32_t eos_every);
/* The greedy continuation of prompt[0..n_prompt): at most max_tokens ids into out (stops after
 * an EOS unless ignore_eos). Returns how many. */
uint32_t pgd_fake_greedy(const int32_t *prompt, uint32_t n_prompt, uint32_t max_tokens,
                         uint32_t eos_every, bool ignore_eos, int32_t *out);
/* The model's log-probability of tokens[n - 1] after tokens[0..n - 1) (n >= 2), in double, the
 * n_top most probable ids there into top (higher logit first, then lower id) and the token's
 * rank (1 + the ids with a higher logit). */
double pgd_fake_logprob(const int32_t *tokens, uint32_t n, uint32_t eos_every, int32_t n_top,
                        int32_t *top, int32_t *rank);

#endif
