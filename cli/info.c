/*
 * cli/info.c — `pagoda info --model PATH [--json]`: what a model file holds.
 *
 * Reports the architecture and hyper-parameters (as the engine reads them), tensor types and
 * counts, the tokenizer (model, pre-tokenizer, vocabulary, special tokens) and the chat
 * template family. Text by default; --json (needs jansson) for machines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PGD_HAVE_JANSSON
#include <jansson.h>
#endif

#include "common/error.h"
#include "engine/text/chat_template.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "cli/cli.h"

static const char *const k_special_keys[][2] = {
    {"bos", "tokenizer.ggml.bos_token_id"},       {"eos", "tokenizer.ggml.eos_token_id"},
    {"eot", "tokenizer.ggml.eot_token_id"},       {"eom", "tokenizer.ggml.eom_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"},   {"pad", "tokenizer.ggml.padding_token_id"},
    {"sep", "tokenizer.ggml.seperator_token_id"},
};

typedef struct {
    uint64_t count[PGD_TYPE__MAX];
    uint64_t n_params;
} tensor_stats;

static void usage(FILE *f) {
    fprintf(f, "usage: pagoda info --model PATH [--json]\n"
               "Describe a GGUF model: architecture, hyper-parameters, tensors, tokenizer,\n"
               "chat template.\n");
}

/* Token text by id from tokenizer.ggml.tokens (empty view if absent). */
static pgd_str token_text(const pgd_gguf *g, uint32_t id) {
    const pgd_gguf_value *toks;
    pgd_str s = {"", 0};
    if (pgd_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) == 0 && id < toks->v.arr.n)
        pgd_gguf_arr_str(toks, id, &s);
    return s;
}

static uint64_t count_control_tokens(const pgd_gguf *g) {
    const pgd_gguf_value *types;
    uint64_t n = 0;
    if (pgd_gguf_get_arr(g, "tokenizer.ggml.token_type", &types)) return 0;
    for (uint64_t i = 0; i < types->v.arr.n; i++) {
        int64_t t;
        if (pgd_gguf_arr_i64(types, i, &t) == 0 && t == 3) n++;
    }
    return n;
}

static pgd_str meta_str(const pgd_gguf *g, const char *key) {
    pgd_str s = {"", 0};
    pgd_gguf_get_str(g, key, &s);
    return s;
}

static uint64_t arr_len(const pgd_gguf *g, const char *key) {
    const pgd_gguf_value *v;
    return pgd_gguf_get_arr(g, key, &v) ? 0 : v->v.arr.n;
}

/* Template family name, or a message saying why there is none (written to buf). */
static const char *template_family(const pgd_gguf *g, char *buf, size_t cap, int *ok) {
    pgd_chat_template *t = NULL;
    *ok = 0;
    if (pgd_gguf_find(g, "tokenizer.chat_template") == NULL) {
        snprintf(buf, cap, "none in the model");
        return buf;
    }
    if (pgd_chat_template_from_gguf(g, NULL, "", "", &t)) {
        snprintf(buf, cap, "unrecognised (%s)", pgd_error_detail());
        return buf;
    }
    *ok = 1;
    snprintf(buf, cap, "%s", pgd_chat_family_name(pgd_chat_template_family(t)));
    pgd_chat_template_free(t);
    return buf;
}

static void print_text(const char *path, const pgd_gguf *g, const pgd_model_config *c,
                       const tensor_stats *ts) {
    pgd_str name = meta_str(g, "general.name");
    printf("model: %s\n", path);
    if (name.len) printf("  name: %.*s\n", (int)name.len, name.ptr);
    printf("  file: GGUF v%u, %.1f MiB, %zu tensors, %zu metadata keys\n", pgd_gguf_version(g),
           pgd_gguf_file_size(g) / 1048576.0, pgd_gguf_n_tensors(g), pgd_gguf_n_kv(g));
    printf("architecture: %s\n", c->arch_name);
    printf("  layers: %u\n  embedding: %u\n  heads: %u\n  kv heads: %u\n  head dim: %u\n",
           c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->head_dim);
    printf("  feed-forward: %u\n  context (trained): %u\n  vocabulary: %u\n", c->n_ff,
           c->n_ctx_train, c->n_vocab);
    if (c->n_expert)
        printf("  experts: %u, %u per token, feed-forward %u each\n", c->n_expert, c->n_expert_used,
               c->n_ff_exp);
    printf("  rope: base %g, %u dims, %s style%s", c->rope_base, c->rope_dim,
           c->rope_style == PGD_ROPE_NEOX ? "neox" : "normal",
           c->rope_freq_factors ? ", frequency factors" : "");
    if (c->rope_linear_scale != 1.0f) printf(", linear scale %g", c->rope_linear_scale);
    printf("\n  rms epsilon: %g\n  output: %s\n  qkv bias: %s\n  q/k head norms: %s\n", c->rms_eps,
           c->tied_output ? "tied to the token embedding" : "separate", c->qkv_bias ? "yes" : "no",
           c->qk_norm ? "yes" : "no");
    printf("tensors: %zu, %.1f M parameters (", pgd_gguf_n_tensors(g), ts->n_params / 1e6);
    int first = 1;
    for (int t = 0; t < PGD_TYPE__MAX; t++)
        if (ts->count[t]) {
            printf("%s%s %llu", first ? "" : ", ", pgd_type_info(t)->name,
                   (unsigned long long)ts->count[t]);
            first = 0;
        }
    printf(")\n");
    pgd_str tm = meta_str(g, "tokenizer.ggml.model"), pre = meta_str(g, "tokenizer.ggml.pre");
    printf("tokenizer: %.*s", (int)tm.len, tm.ptr);
    if (pre.len) printf(" (pre-tokenizer %.*s)", (int)pre.len, pre.ptr);
    printf(", %llu tokens, %llu merges, %llu control tokens\n",
           (unsigned long long)arr_len(g, "tokenizer.ggml.tokens"),
           (unsigned long long)arr_len(g, "tokenizer.ggml.merges"),
           (unsigned long long)count_control_tokens(g));
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_special_keys); i++) {
        uint32_t id;
        if (pgd_gguf_get_u32(g, k_special_keys[i][1], &id)) continue;
        pgd_str s = token_text(g, id);
        printf("  %s: %u %.*s\n", k_special_keys[i][0], id, (int)s.len, s.ptr);
    }
    bool add_bos = false;
    pgd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    printf("  add bos: %s\n", add_bos ? "yes" : "no");
    char buf[512];
    int ok;
    printf("chat template: %s\n", template_family(g, buf, sizeof buf, &ok));
}

#ifdef PGD_HAVE_JANSSON
static json_t *jstr(pgd_str s) {
    return json_stringn_nocheck(s.ptr, s.len);
}

static int print_json(const char *path, const pgd_gguf *g, const pgd_model_config *c,
                      const tensor_stats *ts) {
    json_t *o = json_object(), *types = json_object(), *special = json_object();
    json_object_set_new(o, "path", json_string(path));
    json_object_set_new(o, "name", jstr(meta_str(g, "general.name")));
    json_object_set_new(o, "gguf_version", json_integer(pgd_gguf_version(g)));
    json_object_set_new(o, "file_bytes", json_integer((json_int_t)pgd_gguf_file_size(g)));
    json_object_set_new(o, "architecture", json_string(c->arch_name));
    json_object_set_new(o, "n_layer", json_integer(c->n_layer));
    json_object_set_new(o, "n_embd", json_integer(c->n_embd));
    json_object_set_new(o, "n_head", json_integer(c->n_head));
    json_object_set_new(o, "n_head_kv", json_integer(c->n_head_kv));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "n_ff", json_integer(c->n_ff));
    json_object_set_new(o, "n_expert", json_integer(c->n_expert));
    json_object_set_new(o, "n_expert_used", json_integer(c->n_expert_used));
    json_object_set_new(o, "n_ff_exp", json_integer(c->n_ff_exp));
    json_object_set_new(o, "n_ctx_train", json_integer(c->n_ctx_train));
    json_object_set_new(o, "n_vocab", json_integer(c->n_vocab));
    json_object_set_new(o, "rope_base", json_real(c->rope_base));
    json_object_set_new(o, "rope_dim", json_integer(c->rope_dim));
    json_object_set_new(o, "rope_style",
                        json_string(c->rope_style == PGD_ROPE_NEOX ? "neox" : "normal"));
    json_object_set_new(o, "rms_eps", json_real(c->rms_eps));
    json_object_set_new(o, "tied_output", json_boolean(c->tied_output));
    json_object_set_new(o, "qkv_bias", json_boolean(c->qkv_bias));
    json_object_set_new(o, "qk_norm", json_boolean(c->qk_norm));
    json_object_set_new(o, "n_tensors", json_integer((json_int_t)pgd_gguf_n_tensors(g)));
    json_object_set_new(o, "n_params", json_integer((json_int_t)ts->n_params));
    for (int t = 0; t < PGD_TYPE__MAX; t++)
        if (ts->count[t])
            json_object_set_new(types, pgd_type_info(t)->name,
                                json_integer((json_int_t)ts->count[t]));
    json_object_set_new(o, "tensor_types", types);
    json_object_set_new(o, "tokenizer_model", jstr(meta_str(g, "tokenizer.ggml.model")));
    json_object_set_new(o, "tokenizer_pre", jstr(meta_str(g, "tokenizer.ggml.pre")));
    json_object_set_new(o, "n_tokens",
                        json_integer((json_int_t)arr_len(g, "tokenizer.ggml.tokens")));
    json_object_set_new(o, "n_merges",
                        json_integer((json_int_t)arr_len(g, "tokenizer.ggml.merges")));
    json_object_set_new(o, "n_control_tokens", json_integer((json_int_t)count_control_tokens(g)));
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_special_keys); i++) {
        uint32_t id;
        if (pgd_gguf_get_u32(g, k_special_keys[i][1], &id)) continue;
        json_t *t = json_object();
        json_object_set_new(t, "id", json_integer(id));
        json_object_set_new(t, "text", jstr(token_text(g, id)));
        json_object_set_new(special, k_special_keys[i][0], t);
    }
    json_object_set_new(o, "special_tokens", special);
    bool add_bos = false;
    pgd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    json_object_set_new(o, "add_bos_token", json_boolean(add_bos));
    char buf[512];
    int ok;
    const char *fam = template_family(g, buf, sizeof buf, &ok);
    json_object_set_new(o, "chat_template", ok ? json_string(fam) : json_null());
    if (!ok) json_object_set_new(o, "chat_template_note", json_string(fam));
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!s) return 1;
    printf("%s\n", s);
    free(s);
    return 0;
}
#endif

int pgd_cli_info(int argc, char **argv) {
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = pgd_cli_flag_value(argc, argv, &i, "--model", &path))) {
            if (r < 0) return 2;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "pagoda info: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
#ifndef PGD_HAVE_JANSSON
    if (json) {
        fprintf(stderr, "pagoda info: built without JSON support (jansson)\n");
        return 1;
    }
#endif
    pgd_gguf *g = NULL;
    int rc = pgd_gguf_open(path, &g);
    if (rc) {
        fprintf(stderr, "pagoda info: %s: %s\n", path, pgd_error_detail());
        return 1;
    }
    pgd_model_config cfg;
    if ((rc = pgd_model_config_read(g, &cfg))) {
        fprintf(stderr, "pagoda info: %s: %s\n", path, pgd_error_detail());
        pgd_gguf_close(g);
        return 1;
    }
    tensor_stats ts = {0};
    for (size_t i = 0; i < pgd_gguf_n_tensors(g); i++) {
        const pgd_gguf_tensor *t = pgd_gguf_tensor_at(g, i);
        ts.count[t->type]++;
        ts.n_params += t->nelem;
    }
    int status = 0;
#ifdef PGD_HAVE_JANSSON
    if (json)
        status = print_json(path, g, &cfg, &ts);
    else
#endif
        print_text(path, g, &cfg, &ts);
    pgd_gguf_close(g);
    return status;
}
