/*
 * engine/model/preset.h — model presets: the shapes of published models (the JSON files of
 * configs/models, Hugging Face config.json fields, compiled into the binary), for dummy weights
 * (engine/model/dummy.h). This is how GPU benchmarks run without a model hub, and how the CPU
 * and the GPU are compared on identical weights.
 *
 * A preset is named (`llama-3-8b`, `llama-3.2-1b`, `qwen2.5-0.5b`, `smollm2-135m`, `qwen3-0.6b`,
 * `qwen3-8b`, and the mixtures of experts `qwen3-30b-a3b`, `mixtral-8x7b`) or given as
 * the path of a config.json-shaped file (a name with a '/' or ending in ".json"). Read: model_type
 * (llama, mixtral, qwen2, qwen3, qwen3_moe), hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, vocab_size, max_position_embeddings,
 * rope_theta, rms_norm_eps, tie_word_embeddings, rope_scaling (null, "linear", or "llama3" with
 * its frequency factors); for the mixtures of experts num_local_experts (mixtral) or num_experts
 * and moe_intermediate_size (qwen3_moe), num_experts_per_tok, and, refused unless they describe
 * a model pagoda runs, norm_topk_prob, decoder_sparse_step, mlp_only_layers.
 *
 * Threading: pure functions (a loaded preset is plain data).
 */
#ifndef PGD_ENGINE_MODEL_PRESET_H
#define PGD_ENGINE_MODEL_PRESET_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model/model.h"

#define PGD_PRESET_MAX_ROPE_PAIRS 512

typedef struct pgd_model_preset {
    char name[64];
    pgd_model_config cfg;
    /* rope_freq_factors (cfg): the divisor of each rotated pair's frequency [rope_dim / 2], as
     * a GGUF's rope_freqs.weight holds it (Llama 3.1+ "llama3" scaling) */
    float rope_factors[PGD_PRESET_MAX_ROPE_PAIRS];
} pgd_model_preset;

/* Load a preset by name or path. 0; PGD_ENOTFOUND (the detail lists the names);
 * PGD_EFORMAT / PGD_EUNSUPPORTED with a detail for a file pagoda cannot use; PGD_EUNSUPPORTED
 * in a build without JSON support (jansson). */
int pgd_model_preset_load(const char *name_or_path, pgd_model_preset *out);

/* "llama-3-8b, llama-3.2-1b, qwen2.5-0.5b, smollm2-135m" (static string, for messages). */
const char *pgd_model_preset_names(void);

/* Llama 3.1+ ("llama3") RoPE frequency factors for pair i of rope_dim: 1 for high frequencies,
 * `factor` for low ones, smoothly between (Meta's reference formula). out[rope_dim / 2]. */
void pgd_rope_llama3_factors(uint32_t rope_dim, float base, float factor, float low_freq_factor,
                             float high_freq_factor, uint32_t original_ctx, float *out);

#endif
