/*
 * engine/model/model.h — a llama-family model: hyper-parameters read from GGUF metadata and the
 * weight tensors bound by name, in the type the CPU kernels use.
 *
 * Supported: general.architecture "llama" (Llama 2/3, SmolLM2, Mistral, TinyLlama), "qwen2"
 * (Q/K/V bias, NEOX-style RoPE) and "qwen3" (NEOX-style RoPE, no bias, an RMSNorm over each
 * query and key head before RoPE: attn_q_norm / attn_k_norm, [head_dim] weights). RMSNorm, RoPE
 * (base; linear scaling; per-dimension frequency factors from rope_freqs.weight as Llama 3.1 GGUFs
 * carry them), GQA, SwiGLU, tied or untied output. YaRN scaling is refused as unsupported.
 * Mixture of experts: "qwen3moe" (Qwen3-30B-A3B, Qwen3-235B-A22B) and "llama" with
 * {arch}.expert_count (Mixtral): every layer's feed-forward is a router (ffn_gate_inp, logits
 * over the experts) choosing expert_used_count SwiGLU experts per token (ffn_gate_exps /
 * ffn_up_exps / ffn_down_exps, 3-D tensors of one matrix per expert), mixed with the softmax of
 * the chosen logits (the published models' renormalised top-k). Shared experts (Qwen2-MoE) and
 * gating other than softmax are refused.
 *
 * Weights: F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 tensors stay in their GGUF type and point into
 * the file mapping (zero copy). Other types are converted once at load into memory the model
 * owns: Q4_K and Q5_K re-blocked into Q4_1 and Q5_1 (each group of 32 keeps its 4/5-bit values,
 * only its scale and min are rounded to f16: pgd_reblock_row, kernels/cpu/quant.h), the other
 * K-quants dequantized and requantized to Q8_0, BF16 and F64 to F32. With PGD_MODEL_F32 every
 * weight is dequantized to F32 (the precise mode the reference tests use); with PGD_MODEL_RAW
 * matrices stay as they are in the file.
 *
 * Ownership: the model borrows the pgd_gguf (which must outlive it) and owns converted copies.
 * Threading: load on one thread; afterwards immutable and readable from any thread.
 */
#ifndef PGD_ENGINE_MODEL_H
#define PGD_ENGINE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model/gguf.h"

/* The most experts a token may go through (expert_used_count). */
#define PGD_MAX_EXPERTS_USED 64

typedef enum { PGD_ARCH_LLAMA, PGD_ARCH_QWEN2, PGD_ARCH_QWEN3, PGD_ARCH_QWEN3MOE } pgd_arch;
typedef enum { PGD_ROPE_NORM, PGD_ROPE_NEOX } pgd_rope_style; /* adjacent pairs / half split */

typedef struct pgd_model_config {
    pgd_arch arch;
    char arch_name[32];
    uint32_t n_layer;
    uint32_t n_embd;        /* d_model */
    uint32_t n_head;        /* query heads */
    uint32_t n_head_kv;     /* key/value heads (GQA) */
    uint32_t head_dim;      /* n_embd / n_head unless metadata says otherwise */
    uint32_t n_ff;          /* feed-forward hidden size (of the dense layers a MoE model lacks) */
    uint32_t n_expert;      /* experts per layer; 0 = a dense feed-forward */
    uint32_t n_expert_used; /* experts each token goes through (top-k), <= n_expert */
    uint32_t n_ff_exp;      /* one expert's feed-forward hidden size */
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t rope_dim; /* rotated dimensions per head (<= head_dim) */
    float rope_base;
    pgd_rope_style rope_style;
    float rope_linear_scale; /* positions are divided by it (1 = none; "linear" scaling) */
    bool rope_freq_factors;  /* rope_freqs.weight present (Llama 3.1 style scaling) */
    float rms_eps;
    bool tied_output; /* output.weight absent: logits use token_embd */
    bool qkv_bias;
    bool qk_norm; /* RMSNorm of every q and k head (weights [head_dim]) before RoPE (qwen3) */
    uint32_t pooling_type; /* GGUF {arch}.pooling_type, how an embedding model pools (0 none or
                              absent, 1 mean, 2 cls, 3 last, 4 rank) */
} pgd_model_config;

/* A 2-D weight W[rows][cols] (cols = the row length, GGUF ne[0]) or a 1-D vector (rows = 1). */
typedef struct pgd_weight {
    uint32_t type; /* pgd_type */
    uint64_t rows, cols;
    const void *data;   /* rows * row_bytes bytes */
    uint64_t row_bytes; /* bytes of one row */
} pgd_weight;

typedef struct pgd_layer_weights {
    pgd_weight attn_norm;  /* [n_embd] F32 */
    pgd_weight wq;         /* [n_head*head_dim][n_embd] */
    pgd_weight wk;         /* [n_head_kv*head_dim][n_embd] */
    pgd_weight wv;         /* [n_head_kv*head_dim][n_embd] */
    pgd_weight wo;         /* [n_embd][n_head*head_dim] */
    pgd_weight bq, bk, bv; /* qwen2 biases, F32; data NULL when absent */
    pgd_weight q_norm;     /* [head_dim] F32, qwen3: each q head's RMSNorm; data NULL when absent */
    pgd_weight k_norm;     /* [head_dim] F32, qwen3: each k head's RMSNorm; data NULL when absent */
    pgd_weight ffn_norm;   /* [n_embd] F32 */
    pgd_weight w_gate;     /* [n_ff][n_embd]; dense layers only (data NULL with experts) */
    pgd_weight w_up;       /* [n_ff][n_embd] */
    pgd_weight w_down;     /* [n_embd][n_ff] */
    /* mixture of experts (cfg.n_expert > 0), instead of w_gate / w_up / w_down: */
    pgd_weight router;    /* [n_expert][n_embd] F32 or the file's type (GGUF ffn_gate_inp) */
    pgd_weight *exp_gate; /* [n_expert] of [n_ff_exp][n_embd]: views into one 3-D tensor */
    pgd_weight *exp_up;   /* [n_expert] of [n_ff_exp][n_embd] */
    pgd_weight *exp_down; /* [n_expert] of [n_embd][n_ff_exp] */
} pgd_layer_weights;

typedef struct pgd_model {
    pgd_model_config cfg;
    const pgd_gguf *gguf;      /* borrowed */
    pgd_weight tok_embd;       /* [n_vocab][n_embd] */
    pgd_weight output_norm;    /* [n_embd] F32 */
    pgd_weight output;         /* [n_vocab][n_embd]; == tok_embd when tied */
    pgd_weight rope_freqs;     /* [rope_dim/2] F32 frequency divisors; data NULL when absent */
    pgd_layer_weights *layers; /* [n_layer] */
    pgd_weight *experts;       /* [n_layer][3][n_expert] the expert views (layers point here) */
    void **owned;              /* converted buffers, freed with the model */
    uint32_t n_owned;
    uint64_t weight_bytes; /* total bytes of all bound weights */
    /* dummy weights (engine/model/dummy.h): the hash seed; when `shapes_only`, no weight has
     * data and a device fills each from the hash (pgd_dummy_tensor_id names them) */
    bool dummy, shapes_only;
    uint64_t dummy_seed;
} pgd_model;

/* Load flags. F32: dequantize every weight to F32 (the precise CPU mode). QUIET: no progress
 * line. RAW: matrices stay in their GGUF type, whatever it is (a device that dequantizes them
 * itself, e.g. to bf16 on a GPU; 1-D weights are F32 as always). */
enum { PGD_MODEL_F32 = 1 << 0, PGD_MODEL_QUIET = 1 << 1, PGD_MODEL_RAW = 1 << 2 };

/* Read the hyper-parameters only (cheap; no tensor is touched). */
int pgd_model_config_read(const pgd_gguf *g, pgd_model_config *cfg);

/* Bind all weights and check every shape against the config. flags: PGD_MODEL_*. The caller
 * frees *out with pgd_model_free (before closing g). Errors name the offending tensor. */
int pgd_model_load(const pgd_gguf *g, unsigned flags, pgd_model **out);
void pgd_model_free(pgd_model *m);

/* True when the CPU kernels take this weight type directly. */
bool pgd_model_type_native(uint32_t type);

#endif
