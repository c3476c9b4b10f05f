/*
 * tests/support/json_walk.h — random walks through what a JSON schema allows
 * (engine/sampling/json_fsm.h): each step a byte drawn among those the recognizer takes, closing
 * bytes ('"', '}', ']') and structural ones favoured more as the walk grows, so that walks end.
 * What a constrained sampler does with random logits, without a model.
 *
 * Threading: any thread; the RNG state is the caller's.
 */
#ifndef PGD_TESTS_SUPPORT_JSON_WALK_H
#define PGD_TESTS_SUPPORT_JSON_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/sampling/json_schema.h"

/* One walk into out[cap] (NUL-terminated): its length once the document is whole (it stops
 * there at random, or past cap / 2); -1 at a dead end (no byte taken, not whole: a bug); -2 if
 * cut at cap before a whole document. `rng` is an xorshift state (not 0). */
long pgd_test_json_walk(const pgd_json_schema *s, uint64_t *rng, char *out, size_t cap);

#endif
