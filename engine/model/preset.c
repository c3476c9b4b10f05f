/*
 * engine/model/preset.c — model presets from config.json-shaped files (see preset.h). The
 * built-in ones are the JSON files of configs/models, embedded at build time
 * (cmake/embed_dir.cmake).
 */
#include "engine/model/preset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#ifdef PGD_HAVE_JANSSON
#include <jansson.h>
#endif

typedef struct {
    const char *name;
    const unsigned char *data;
    unsigned long len;
} pgd_embedded_file;

extern const pgd_embedded_file pgd__model_presets[];
extern const unsigned pgd__model_presets_count;

const char *pgd_model_preset_names(void) {
    static char names[512];
    if (!names[0]) {
        size_t n = 0;
        for (unsigned i = 0; i < pgd__model_presets_count && n < sizeof names; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "",
                                  pgd__model_presets[i].name);
    }
    return names;
}

void pgd_rope_llama3_factors(uint32_t rope_dim, float base, float factor, float low_freq_factor,
                             float high_freq_factor, uint32_t original_ctx, float *out) {
    const double low_wavelen = original_ctx / (double)low_freq_factor;
    const double high_wavelen = original_ctx / (double)high_freq_factor;
    for (uint32_t i = 0; i < rope_dim / 2; i++) {
        double freq = pow((double)base, -2.0 * i / rope_dim);
        double wavelen = 2.0 * M_PI / freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = factor;
        } else {
            double smooth = (original_ctx / wavelen - low_freq_factor) /
                            (double)(high_freq_factor - low_freq_factor);
            out[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

#ifdef PGD_HAVE_JANSSON

/* The number at `key` (NULL when absent or JSON null); PGD_EFORMAT if not a number. */
static int num(json_t *root, const char *key, bool required, double *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) return pgd_error_set(PGD_EFORMAT, "preset: '%s' is missing", key);
        return PGD_ENOTFOUND;
    }
    if (!json_is_number(v)) return pgd_error_set(PGD_EFORMAT, "preset: '%s' is not a number", key);
    *out = json_number_value(v);
    return 0;
}

/* An integer in [1, max] at key (required), or *out unchanged when absent and optional. */
static int count(json_t *root, const char *key, bool required, uint32_t max, uint32_t *out) {
    double d;
    int rc = num(root, key, required, &d);
    if (rc == PGD_ENOTFOUND) return 0;
    if (rc) return rc;
    if (!(d >= 1 && d <= max) || d != floor(d))
        return pgd_error_set(PGD_EFORMAT, "preset: '%s' = %g is not an integer in [1, %u]", key, d,
                             max);
    *out = (uint32_t)d;
    return 0;
}

/* Mixtral's and Qwen3-MoE's expert fields (none for the dense types). */
static int experts(json_t *root, const char *type, pgd_model_config *c) {
    bool mixtral = !strcmp(type, "mixtral");
    if (!mixtral && strcmp(type, "qwen3_moe")) return 0;
    int rc;
    c->n_ff_exp = c->n_ff;
    if ((rc = count(root, mixtral ? "num_local_experts" : "num_experts", true, 1024,
                    &c->n_expert)) ||
        (rc = count(root, "num_experts_per_tok", true, PGD_MAX_EXPERTS_USED, &c->n_expert_used)) ||
        (!mixtral && (rc = count(root, "moe_intermediate_size", true, 1u << 20, &c->n_ff_exp))))
        return rc;
    if (c->n_expert_used > c->n_expert)
        return pgd_error_set(PGD_EFORMAT, "preset: %u experts per token of %u", c->n_expert_used,
                             c->n_expert);
    json_t *norm = json_object_get(root, "norm_topk_prob");
    json_t *mlp_only = json_object_get(root, "mlp_only_layers");
    double step = 1;
    if ((rc = num(root, "decoder_sparse_step", false, &step)) && rc != PGD_ENOTFOUND) return rc;
    if ((norm && json_is_false(norm)) || step != 1 || (mlp_only && json_array_size(mlp_only) > 0))
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "preset: experts without norm_topk_prob, or with dense layers "
                             "(decoder_sparse_step, mlp_only_layers), are not supported");
    return 0;
}

static int parse(json_t *root, pgd_model_preset *p) {
    pgd_model_config *c = &p->cfg;
    if (!json_is_object(root)) return pgd_error_set(PGD_EFORMAT, "preset: not a JSON object");
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (!type) return pgd_error_set(PGD_EFORMAT, "preset: 'model_type' is missing");
    if (!strcmp(type, "llama")) {
        c->arch = PGD_ARCH_LLAMA;
        c->rope_style = PGD_ROPE_NORM;
    } else if (!strcmp(type, "qwen2")) {
        c->arch = PGD_ARCH_QWEN2;
        c->rope_style = PGD_ROPE_NEOX;
        c->qkv_bias = true;
    } else if (!strcmp(type, "qwen3") || !strcmp(type, "qwen3_moe")) {
        c->arch = type[5] ? PGD_ARCH_QWEN3MOE : PGD_ARCH_QWEN3;
        c->rope_style = PGD_ROPE_NEOX;
        c->qk_norm = true;
    } else if (!strcmp(type, "mixtral")) { /* a llama with experts, as its GGUFs say */
        c->arch = PGD_ARCH_LLAMA;
        c->rope_style = PGD_ROPE_NORM;
    } else {
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "preset: model_type '%s' is not supported (llama, mixtral, qwen2, "
                             "qwen3, qwen3_moe)",
                             type);
    }
    /* attention_bias (Qwen3's config.json: false; a model with it true is not one pagoda knows) */
    json_t *ab = json_object_get(root, "attention_bias");
    if (ab && json_is_true(ab) && !c->qkv_bias)
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "preset: attention_bias true is not supported for model_type '%s'",
                             type);
    /* the GGUF architecture name */
    snprintf(c->arch_name, sizeof c->arch_name, "%s",
             c->arch == PGD_ARCH_LLAMA      ? "llama"
             : c->arch == PGD_ARCH_QWEN3MOE ? "qwen3moe"
                                            : type);
    int rc;
    c->n_ctx_train = 2048;
    if ((rc = count(root, "hidden_size", true, 65536, &c->n_embd)) ||
        (rc = count(root, "intermediate_size", true, 1u << 20, &c->n_ff)) ||
        (rc = count(root, "num_hidden_layers", true, 1024, &c->n_layer)) ||
        (rc = count(root, "num_attention_heads", true, 1024, &c->n_head)) ||
        (rc = count(root, "vocab_size", true, 1u << 22, &c->n_vocab)) ||
        (rc = count(root, "max_position_embeddings", false, 1u << 24, &c->n_ctx_train)))
        return rc;
    c->n_head_kv = c->n_head;
    c->head_dim = c->n_embd / c->n_head;
    if ((rc = count(root, "num_key_value_heads", false, 1024, &c->n_head_kv)) ||
        (rc = count(root, "head_dim", false, 1024, &c->head_dim)))
        return rc;
    if (c->n_head % c->n_head_kv || c->head_dim % 2)
        return pgd_error_set(PGD_EFORMAT, "preset: %u heads, %u KV heads, head size %u", c->n_head,
                             c->n_head_kv, c->head_dim);
    if ((rc = experts(root, type, c))) return rc;
    c->rope_dim = c->head_dim;
    double d = 10000.0;
    if ((rc = num(root, "rope_theta", false, &d)) && rc != PGD_ENOTFOUND) return rc;
    c->rope_base = (float)d;
    d = 1e-6;
    if ((rc = num(root, "rms_norm_eps", false, &d)) && rc != PGD_ENOTFOUND) return rc;
    c->rms_eps = (float)d;
    c->rope_linear_scale = 1.0f;
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    c->tied_output = tie ? json_is_true(tie) : false;
    json_t *rs = json_object_get(root, "rope_scaling");
    if (rs && !json_is_null(rs)) {
        const char *rt = json_string_value(json_object_get(rs, "rope_type"));
        if (!rt) rt = json_string_value(json_object_get(rs, "type"));
        double factor = 1, low = 1, high = 4, orig = 8192;
        if ((rc = num(rs, "factor", true, &factor))) return rc;
        if (rt && !strcmp(rt, "linear")) {
            c->rope_linear_scale = (float)factor;
        } else if (rt && !strcmp(rt, "llama3")) {
            if ((rc = num(rs, "low_freq_factor", true, &low)) ||
                (rc = num(rs, "high_freq_factor", true, &high)) ||
                (rc = num(rs, "original_max_position_embeddings", true, &orig)))
                return rc;
            if (c->rope_dim / 2 > PGD_PRESET_MAX_ROPE_PAIRS || !(high > low) || !(orig >= 1))
                return pgd_error_set(PGD_EFORMAT, "preset: llama3 rope scaling out of range");
            c->rope_freq_factors = true;
            pgd_rope_llama3_factors(c->rope_dim, c->rope_base, (float)factor, (float)low,
                                    (float)high, (uint32_t)orig, p->rope_factors);
        } else {
            return pgd_error_set(PGD_EUNSUPPORTED, "preset: rope scaling '%s' is not supported",
                                 rt ? rt : "?");
        }
    }
    if (!(c->rope_base > 0) || !(c->rms_eps > 0) || !(c->rope_linear_scale > 0))
        return pgd_error_set(PGD_EFORMAT,
                             "preset: rope_theta, rms_norm_eps and factors must be > 0");
    return 0;
}

int pgd_model_preset_load(const char *name_or_path, pgd_model_preset *out) {
    memset(out, 0, sizeof *out);
    size_t n = strlen(name_or_path);
    bool path = strchr(name_or_path, '/') || (n > 5 && !strcmp(name_or_path + n - 5, ".json"));
    json_error_t err;
    json_t *root = NULL;
    if (path) {
        root = json_load_file(name_or_path, JSON_REJECT_DUPLICATES, &err);
        if (!root)
            return pgd_error_set(PGD_EFORMAT, "preset %s: line %d: %s", name_or_path, err.line,
                                 err.text);
    } else {
        for (unsigned i = 0; i < pgd__model_presets_count && !root; i++)
            if (!strcmp(pgd__model_presets[i].name, name_or_path))
                root = json_loadb((const char *)pgd__model_presets[i].data,
                                  pgd__model_presets[i].len, JSON_REJECT_DUPLICATES, &err);
        if (!root)
            return pgd_error_set(PGD_ENOTFOUND, "no model preset '%s' (presets: %s)", name_or_path,
                                 pgd_model_preset_names());
    }
    const char *base = strrchr(name_or_path, '/');
    snprintf(out->name, sizeof out->name, "%s", base ? base + 1 : name_or_path);
    int rc = parse(root, out);
    json_decref(root);
    return rc;
}

#else

int pgd_model_preset_load(const char *name_or_path, pgd_model_preset *out) {
    memset(out, 0, sizeof *out);
    return pgd_error_set(PGD_EUNSUPPORTED,
                         "model preset '%s': this build has no JSON support (jansson)",
                         name_or_path);
}

#endif
