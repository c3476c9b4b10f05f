/*
 * kernels/cuda/sample.h — sampling on the device, one CTA per row, for the rows whose spec it
 * supports (pgd_cuda_sample_supports; the others come back to the host as full logits). The
 * reference is pgd_sample_logits (engine/sampling/sampler.h): same rules (NaN as -inf, +inf as
 * FLT_MAX, ties to the lower id), the host-drawn uniform u = (draw >> 11) * 2^-53, logprobs of
 * the raw row. Asynchronous.
 */
#ifndef PGD_KERNELS_CUDA_SAMPLE_H
#define PGD_KERNELS_CUDA_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/sample_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most candidates a top-k / top-p row keeps on the device: top-k up to this; a top-p
 * nucleus beyond it is handed back (PGD_CUDA_SAMPLE_ON_HOST). */
#define PGD_CUDA_SAMPLE_MAX_CANDS 1024
/* A result's token when the row is the host's to sample: a top-p nucleus longer than
 * PGD_CUDA_SAMPLE_MAX_CANDS. The row's logits are left in place; pgd_sample_logits on them
 * with the same spec and draw gives the token the device would have. */
#define PGD_CUDA_SAMPLE_ON_HOST (-2)

/* Greedy, temperature, min-p, top-k up to PGD_CUDA_SAMPLE_MAX_CANDS and top-p rows, with any
 * logprobs. */
bool pgd_cuda_sample_supports(const pgd_sample_spec *spec);

/* results[i] for row i < N of logits (f32 [N][V]) with specs[i] and draws[i] (device arrays).
 * A row whose every logit is -inf or NaN (pgd_sample_logits' PGD_EINVAL), or whose spec
 * pgd_cuda_sample_supports rejects, gets token -1, logprob 0 and n_top 0; a row left to the
 * host, token PGD_CUDA_SAMPLE_ON_HOST (logprob 0, n_top 0). 0, PGD_EINVAL (V of 0 or over
 * INT32_MAX, or too large for the device's shared memory) or PGD_ECUDA. */
int pgd_cuda_sample(const float *logits, uint32_t N, uint32_t V, const pgd_sample_spec *specs,
                    const uint64_t *draws, pgd_sample_result *results, void *stream);

#ifdef __cplusplus
}
#endif

#endif
