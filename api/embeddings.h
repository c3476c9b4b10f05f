/*
 * api/embeddings.h — POST /v1/embeddings: the vectors' final form and the answer.
 *
 * The request is parsed by pgd_api_request_parse(PGD_API_EMBEDDING, ...) (api/request.h):
 *   input            string | [string] | [int] | [[int]], like completions' prompt: each element
 *                    one input (at most PGD_API_MAX_INPUTS), text or token ids; required
 *   model            string (optional)
 *   encoding_format  "float" (default) or "base64": each vector's float32 values,
 *                    little-endian, base64-encoded (what the openai SDK asks for by default)
 *   dimensions       integer >= 1, at most the model's embedding size (checked by the caller):
 *                    the vector is cut to its first `dimensions` values, then normalized (how
 *                    OpenAI shortens its own embeddings; meaningful for models trained for it)
 *   user string; priority int32 (vLLM's)
 * Unknown fields are ignored, as for the other endpoints.
 *
 * The answer, for inputs 0..n-1 in order:
 *   {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] or
 *    "base64"}, ...], "model": "...", "usage": {"prompt_tokens": P, "total_tokens": P}}
 * Every vector has unit L2 norm (a zero vector stays zero), as OpenAI's do.
 *
 * Threading: pure functions, no shared state.
 */
#ifndef PGD_API_EMBEDDINGS_H
#define PGD_API_EMBEDDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"

/* The answer's vector of one input: the first `dim` values of the pooled vector in[], scaled to
 * unit length (computed in double), into out[dim]. 0 < dim. */
void pgd_api_embedding_normalize(const float *in, uint32_t dim, float *out);

/* The answer, built in parts: begin, one item per input in index order (its normalized vector
 * as numbers, or as base64 text the caller encoded), end. Each appends to out; 0 or
 * PGD_ENOMEM. */
int pgd_api_embeddings_begin(pgd_buf *out);
int pgd_api_embeddings_item(pgd_buf *out, size_t index, const float *v, uint32_t dim);
int pgd_api_embeddings_item_b64(pgd_buf *out, size_t index, const char *b64, size_t len);
int pgd_api_embeddings_end(pgd_buf *out, pgd_str model, int64_t prompt_tokens);

#endif
