/*
 * scheduler/offline.h — a fixed set of sequences run to their end outside the scheduler, and the
 * server's warm-up built on it.
 *
 * pgd_offline_run takes n prompts, each with its own parameters, and runs them through the
 * runner with a KV pool of its own over the backend's blocks (no prefix cache): every prompt
 * prefilled first, in steps of up to the backend's token budget, then one decode step after
 * another over the unfinished sequences (at most a budget of them a step, the first ones
 * first). Nothing of it outlives the call: its sequences are destroyed and its blocks returned,
 * also on failure. `pagoda bench`'s offline rows and pgd_warmup run through it.
 *
 * pgd_warmup runs the few short sequences a server runs before it says it is ready, so that
 * the first request pays no first-use cost (on a GPU: loading each kernel and cuBLASLt's,
 * capturing the first decode graphs) and a device that cannot run the model fails the start,
 * not a user's request.
 *
 * Threading: the runner's owner (a server's loading thread before the scheduler takes the
 * runner, a CLI's main thread). No scheduler may be running steps on the runner meanwhile: the
 * warm-up writes K/V into blocks that a running scheduler may have handed out.
 */
#ifndef PGD_SCHEDULER_OFFLINE_H
#define PGD_SCHEDULER_OFFLINE_H

#include <stdint.h>

#include "engine/runner.h"
#include "engine/seq.h"

typedef struct pgd_offline_seq {
    const int32_t *prompt; /* [n_prompt] ids in the vocabulary (borrowed) */
    uint32_t n_prompt;     /* > 0; prompt + max_tokens fit the context */
    pgd_seq_params params; /* sampling (validated), max_tokens > 0, ignore_eos, ... */
    int32_t *out;          /* optional [params.max_tokens]: the tokens it generated */
    uint32_t *n_out;       /* optional: how many (set when the run succeeds) */
} pgd_offline_seq;

typedef struct pgd_offline_stats {
    double prefill_s, decode_s;             /* wall time of the prefill steps, the decode steps */
    uint64_t prefill_tokens, decode_tokens; /* tokens those steps ran */
    uint32_t prefill_steps, decode_steps;
} pgd_offline_stats;

/* Run seqs[0..n) to their end (see above); *st (zeroed first) says what ran. 0, PGD_ENOBLOCKS
 * when the KV cache cannot hold them all at once, PGD_ENOMEM, or the runner's error; each with
 * its detail (pgd_error_detail). */
int pgd_offline_run(pgd_runner *r, const pgd_offline_seq *seqs, uint32_t n, pgd_offline_stats *st);

typedef struct pgd_warmup_stats {
    uint32_t runs;   /* pgd_offline_run calls made (0: skipped, the KV cache too small) */
    uint32_t steps;  /* forward steps */
    uint64_t tokens; /* tokens those steps ran */
    double seconds;
} pgd_warmup_stats;

/* The warm-up: run 1, one prompt of 32 tokens, 3 tokens out, greedy (a prefill of two 16-row
 * query tiles, an eager decode step, the step that captures a 1-row decode graph); run 2, three
 * prompts of 16 tokens, 3 tokens out each: sampled at temperature 1 with top-k, top-p and min-p;
 * greedy with logprobs and 5 alternatives; greedy with a repetition penalty (its logits come
 * back to the host sampler). Prompts shrink to what the step, the context and the KV cache
 * hold; run 2 is left out when the step or the cache cannot hold its three sequences, and the
 * whole warm-up when not even a 2-token prompt fits (runs 0). 0 or the run's error. */
int pgd_warmup(pgd_runner *r, pgd_warmup_stats *st);

#endif
