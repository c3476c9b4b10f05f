/*
 * engine/model/dummy.h — a model with the shapes of a preset (engine/model/preset.h) and
 * deterministic dummy weights instead of a file: `--load-format dummy --model-preset NAME`.
 *
 * Every weight comes from the counter hash of common/counter_hash.h, tensor by tensor: matrices
 * are odd integers in [-127, 127] scaled by a power of two near 1/(73 sqrt(cols)) (a standard
 * deviation near 1/sqrt(cols), so activations stay in range layer after layer), stored as F16;
 * the token embedding is scaled to a standard deviation near 0.6; norm weights are
 * 1 + v/1024 and biases v/1024, in F32. No value is zero, and every value is exact in f16 and
 * bf16, so the CUDA backend, which fills its bf16 weights on the device from the same hash,
 * computes with the very same weights (pgd_dummy_tensor_id names the tensors for both).
 *
 * Ownership: the model owns its buffers (pgd_model_free). Threading: build on one thread;
 * afterwards immutable.
 */
#ifndef PGD_ENGINE_MODEL_DUMMY_H
#define PGD_ENGINE_MODEL_DUMMY_H

#include <stdint.h>

#include "engine/model/model.h"
#include "engine/model/preset.h"

/* The seed of every dummy model (the weights depend on it and on the shapes only). */
#define PGD_DUMMY_SEED 0x70a60da5eedull

/* Tensor ids of the hash: the model's own, then 16 per layer. */
enum {
    PGD_DUMMY_TOK_EMBD = 0,
    PGD_DUMMY_OUTPUT_NORM = 1,
    PGD_DUMMY_OUTPUT = 2,
    PGD_DUMMY_LAYER0 = 16
};
enum {
    PGD_DUMMY_ATTN_NORM,
    PGD_DUMMY_WQ,
    PGD_DUMMY_WK,
    PGD_DUMMY_WV,
    PGD_DUMMY_WO,
    PGD_DUMMY_BQ,
    PGD_DUMMY_BK,
    PGD_DUMMY_BV,
    PGD_DUMMY_FFN_NORM,
    PGD_DUMMY_GATE,
    PGD_DUMMY_UP,
    PGD_DUMMY_DOWN,
    PGD_DUMMY_Q_NORM,
    PGD_DUMMY_K_NORM
};

static inline uint32_t pgd_dummy_tensor_id(uint32_t layer, uint32_t which) {
    return PGD_DUMMY_LAYER0 + layer * 16 + which;
}

/* A mixture-of-experts layer's tensors, in a range of their own (from 2^23: the hash keeps 24
 * bits of a tensor id): the router [n_expert][n_embd] and the three expert tensors, each hashed
 * as one matrix [n_expert * rows][cols] (expert e's rows follow expert e - 1's, as in a GGUF's
 * 3-D tensor). */
enum { PGD_DUMMY_ROUTER, PGD_DUMMY_EXP_GATE, PGD_DUMMY_EXP_UP, PGD_DUMMY_EXP_DOWN };

static inline uint32_t pgd_dummy_moe_id(uint32_t layer, uint32_t which) {
    return 0x800000u + layer * 4 + which;
}

/* The power-of-two shift of a matrix with `cols` inputs (see above). */
int pgd_dummy_matrix_shift(uint64_t cols);

/* Build the model. shapes_only: bind every weight's type and shape without data (a device fills
 * them from the hash itself; pgd_model.shapes_only). 0, PGD_ENOMEM (with the size in the
 * detail). */
int pgd_model_dummy(const pgd_model_preset *p, uint64_t seed, bool shapes_only, pgd_model **out);

#endif
