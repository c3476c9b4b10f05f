/*
 * cli/flags.c — option tables and the shared engine flags (see flags.h).
 */
#include "cli/flags.h"

#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/error.h"

const pgd_opt *pgd_opt_find(const pgd_opt_table *tables, size_t n_tables, const char *name,
                            size_t len, const pgd_opt_table **table) {
    for (size_t t = 0; t < n_tables; t++)
        for (size_t i = 0; i < tables[t].n; i++) {
            const char *o = tables[t].opts[i].name;
            if (strlen(o) != len) continue;
            size_t j = 0;
            while (j < len && (o[j] == name[j] || (o[j] == '-' && name[j] == '_'))) j++;
            if (j < len) continue;
            if (table) *table = &tables[t];
            return &tables[t].opts[i];
        }
    return NULL;
}

static void mark_seen(const pgd_opt_table *t, const pgd_opt *o) {
    size_t i = (size_t)(o - t->opts);
    if (t->seen && i < 64) *t->seen |= 1ull << i;
}

int pgd_opt_set(const pgd_opt_table *t, const pgd_opt *o, const char *v, const char *cmd,
                const char *src) {
    char *p = (char *)t->base + o->off;
    mark_seen(t, o);
    switch (o->type) {
    case PGD_OPT_STR:
        *(const char **)p = v;
        return 0;
    case PGD_OPT_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"))
            *(bool *)p = true;
        else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no"))
            *(bool *)p = false;
        else {
            fprintf(stderr, "pagoda %s: %s: %s wants true or false, got '%s'\n", cmd, src, o->name,
                    v);
            return -1;
        }
        return 0;
    case PGD_OPT_U64: {
        char flag[80];
        snprintf(flag, sizeof flag, "%s: %s", src, o->name);
        return pgd_cli_parse_u64(cmd, flag, v, (uint64_t *)p);
    }
    }
    return -1;
}

int pgd_opt_parse_arg(const pgd_opt_table *tables, size_t n_tables, int argc, char **argv, int *i,
                      const char *cmd) {
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0) return 0;
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    const pgd_opt_table *t;
    const pgd_opt *o = pgd_opt_find(tables, n_tables, a + 2, len, &t);
    if (!o) return 0;
    if (o->type == PGD_OPT_BOOL && !eq) {
        *(bool *)((char *)t->base + o->off) = true;
        mark_seen(t, o);
        return 1;
    }
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", o->name);
    const char *v;
    if (pgd_cli_flag_value(argc, argv, i, flag, &v) <= 0) return -1;
    return pgd_opt_set(t, o, v, cmd, "command line") ? -1 : 1;
}

int pgd_opt_load_env(const pgd_opt_table *tables, size_t n_tables, const char *cmd) {
    for (size_t t = 0; t < n_tables; t++)
        for (size_t i = 0; i < tables[t].n; i++) {
            char name[64] = "PAGODA_";
            size_t n = strlen(name);
            for (const char *p = tables[t].opts[i].name; *p && n < sizeof name - 1; p++)
                name[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
            name[n] = '\0';
            const char *v = getenv(name);
            if (v && *v && pgd_opt_set(&tables[t], &tables[t].opts[i], v, cmd, name)) return -1;
        }
    return 0;
}

void pgd_opt_usage_line(FILE *f, const char *left, const char *help) {
    /* A flag too long for its column gets its help on the next line; the help wraps at
     * PGD_OPT_USAGE_WIDTH, every line starting at the column. */
    const int col = PGD_OPT_USAGE_COL, room = PGD_OPT_USAGE_WIDTH - 3 - PGD_OPT_USAGE_COL;
    if ((int)strlen(left) > col)
        fprintf(f, "  %s\n  %-*s ", left, col, "");
    else
        fprintf(f, "  %-*s ", col, left);
    const char *p = help;
    while (*p) {
        int n = (int)strlen(p);
        if (n > room) { /* break at the last space that fits (or the first one after) */
            int cut = room;
            while (cut > 0 && p[cut] != ' ') cut--;
            if (cut == 0)
                while (p[cut] && p[cut] != ' ') cut++;
            n = cut;
        }
        fprintf(f, "%.*s\n", n, p);
        p += n;
        while (*p == ' ') p++;
        if (*p) fprintf(f, "  %-*s ", col, "");
    }
    if (!*help) fputc('\n', f);
}

void pgd_opt_usage(FILE *f, const pgd_opt_table *t) {
    for (size_t i = 0; i < t->n; i++) {
        const pgd_opt *o = &t->opts[i];
        char left[96];
        snprintf(left, sizeof left, "--%s%s", o->name,
                 o->type == PGD_OPT_BOOL  ? ""
                 : o->type == PGD_OPT_U64 ? " N"
                                          : " VALUE");
        pgd_opt_usage_line(f, left, o->help);
    }
}

/* ---- the engine flags ----------------------------------------------------------------------- */

#define E(field) offsetof(pgd_engine_flags, field)
static const pgd_opt k_engine_opts[] = {
    {"model", PGD_OPT_STR, E(model_path), "GGUF model file"},
    {"load-format", PGD_OPT_STR, E(load_format),
     "auto (the --model file, else dummy weights), gguf or dummy"},
    {"model-preset", PGD_OPT_STR, E(model_preset),
     "shapes for dummy weights: a configs/models name or a config.json path"},
    {"chat-template", PGD_OPT_STR, E(chat_template), "override the model's chat template family"},
    {"device", PGD_OPT_STR, E(device),
     "auto (a GPU when there is one and a CUDA backend, else the CPU), cpu, cuda or cuda:N "
     "(the N-th visible GPU; cuda: the first)"},
    {"gpu-memory-utilization", PGD_OPT_STR, E(gpu_memory_utilization),
     "GPU: share of its memory for weights, scratch and KV cache (default 0.90)"},
    {"gpu-weights", PGD_OPT_STR, E(gpu_weights),
     "GPU: the weights' form: auto (bf16 when they leave room for the KV cache, else q8_0, "
     "else q4), bf16, q8_0 (8 bits and a scale per 32: half the memory and the bytes a decode "
     "step reads), or q4 (4 bits, a scale and an offset per 32, for the matrices a file holds "
     "in Q4_0, Q4_1 or Q4_K, as they are, and for dummy weights; 8 bits for the rest)"},
    {"enforce-eager", PGD_OPT_BOOL, E(enforce_eager),
     "GPU: no CUDA graphs, decode steps run eagerly too (slower; for comparison)"},
    {"batch-invariant", PGD_OPT_BOOL, E(batch_invariant),
     "GPU: one GEMM algorithm per weight shape and attention on CUDA cores for every row, so "
     "a request's tokens do not depend on what shares its batch (batch-1 decode 2.2x slower "
     "on an H200; the CPU backend always is)"},
    {"no-decode-gemv", PGD_OPT_BOOL, E(no_decode_gemv),
     "GPU: one-row products (batch-1 decode) on cuBLASLt instead of pagoda's own GEMV kernel "
     "(slower on an H200; for comparison)"},
    {"ctx-size", PGD_OPT_U64, E(ctx_size),
     "context limit (default or 0: the model's; more than the model's is lowered to it, "
     "with a note)"},
    {"kv-cache-mb", PGD_OPT_U64, E(kv_cache_mb),
     "KV cache memory in MiB, >= 1 (default " PGD_STR(
         PGD_DEFAULT_KV_CACHE_MB) "); serve refuses to start when it cannot hold one request "
                                  "of the whole context"},
    {"kv-cache-dtype", PGD_OPT_STR, E(kv_cache_dtype),
     "KV cache elements: auto (f16; f32 with --f32), f16 or f32"},
    {"block-size", PGD_OPT_U64, E(block_size),
     "tokens per KV block, >= 1 (default " PGD_STR(PGD_DEFAULT_BLOCK_SIZE) ")"},
    {"max-num-batched-tokens", PGD_OPT_U64, E(max_num_batched_tokens),
     "tokens per step, >= 1 (default: the device's, " PGD_STR(
         PGD_CPU_STEP_TOKENS) " on the CPU; more than the device takes is lowered, with a note)"},
    {"max-num-seqs", PGD_OPT_U64, E(max_num_seqs),
     "sequences per step, >= 1 (default: the device's, " PGD_STR(
         PGD_CPU_STEP_SEQS) " on the CPU; more than the device or the step takes is lowered, "
                            "with a note)"},
    {"max-waiting", PGD_OPT_U64, E(max_waiting),
     "requests waiting for admission, >= 1, before the server answers 503 (default " PGD_STR(
         PGD_DEFAULT_MAX_WAITING) "); a request of more prompts than this is a 400"},
    {"threads", PGD_OPT_U64, E(threads), "compute threads (default or 0: one per core)"},
    {"f32", PGD_OPT_BOOL, E(f32), "dequantize every weight to f32 (precise, slower)"},
    {"int8-activations", PGD_OPT_BOOL, E(act_q8),
     "int8 activation blocks in the matmuls (faster, less exact)"},
    {"no-prefix-caching", PGD_OPT_BOOL, E(no_prefix_caching), "disable the prefix cache"},
    {"sched-policy", PGD_OPT_STR, E(sched_policy),
     "fair (weighted fair share across tenants; default) or fcfs"},
    {"fair-prompt-factor", PGD_OPT_STR, E(fair_prompt_factor),
     "fair share: service of one computed prompt token (default 1)"},
    {"fair-output-factor", PGD_OPT_STR, E(fair_output_factor),
     "fair share: service of one generated token (default 2)"},
};
#undef E

_Static_assert(PGD_ARRAY_LEN(k_engine_opts) <= 64, "pgd_engine_flags.seen has 64 bits");

pgd_opt_table pgd_engine_flags_table(pgd_engine_flags *f) {
    return (pgd_opt_table){k_engine_opts, PGD_ARRAY_LEN(k_engine_opts), f, &f->seen};
}

/* Whether the engine flag `name` was given (command line, environment or config file). */
static bool flag_seen(const pgd_engine_flags *f, const char *name) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_engine_opts); i++)
        if (!strcmp(k_engine_opts[i].name, name)) return (f->seen >> i) & 1;
    return false;
}

void pgd_engine_flags_usage(FILE *f) {
    pgd_opt_table t = {k_engine_opts, PGD_ARRAY_LEN(k_engine_opts), NULL, NULL};
    pgd_opt_usage(f, &t);
}

/* *out = v when it fits in 32 bits (and is >= min when set). 0 or -1 (printed). */
static int to_u32(const char *cmd, const char *flag, uint64_t v, uint64_t max, uint32_t *out) {
    if (v > max) {
        fprintf(stderr, "pagoda %s: --%s %llu is too large (at most %llu)\n", cmd, flag,
                (unsigned long long)v, (unsigned long long)max);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* A fair-share factor: *out = v when set (a number >= 0). 0 or -1 (printed). */
static int parse_factor(const char *cmd, const char *flag, const char *v, float *out) {
    if (!v) return 0;
    float x;
    if (pgd_cli_parse_f32(cmd, flag, v, &x)) return -1;
    if (x < 0) {
        fprintf(stderr, "pagoda %s: %s wants a number >= 0, got '%s'\n", cmd, flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

int pgd_engine_flags_resolve(const pgd_engine_flags *f, const char *cmd, pgd_load_options *load,
                             pgd_sched_config *sched) {
    pgd_load_options_default(load);
    pgd_sched_config_default(sched);
    if (f->load_format && pgd_load_format_parse(f->load_format, &load->format)) {
        fprintf(stderr, "pagoda %s: --load-format: %s\n", cmd, pgd_error_detail());
        return -1;
    }
    bool dummy =
        load->format == PGD_LOAD_DUMMY || (load->format == PGD_LOAD_AUTO && !f->model_path);
    if (!dummy && !f->model_path) {
        fprintf(stderr,
                "pagoda %s: --model PATH is required (or --model-preset NAME for dummy "
                "weights)\n",
                cmd);
        return -1;
    }
    if (dummy && !f->model_preset) {
        fprintf(stderr,
                "pagoda %s: --model PATH or --model-preset NAME is required (presets: %s)\n", cmd,
                pgd_model_preset_names());
        return -1;
    }
    load->model_path = f->model_path;
    load->model_preset = f->model_preset;
    load->chat_template = f->chat_template;
    pgd_runner_options *r = &load->runner;
    pgd_backend_config *bc = &r->backend;
    r->model_flags = f->f32 ? PGD_MODEL_F32 : 0;
    r->device.cpu.act_q8 = f->act_q8;
    r->device.cuda.enforce_eager = f->enforce_eager;
    r->device.cuda.batch_invariant = f->batch_invariant;
    r->device.cuda.decode_gemv = !f->no_decode_gemv;
    if (f->device && pgd_device_parse(f->device, &r->device)) {
        fprintf(stderr, "pagoda %s: --device: %s\n", cmd, pgd_error_detail());
        return -1;
    }
    if (f->gpu_weights && pgd_cuda_weights_parse(f->gpu_weights, &r->device.cuda.weights)) {
        fprintf(stderr, "pagoda %s: --gpu-weights: %s\n", cmd, pgd_error_detail());
        return -1;
    }
    if (f->kv_cache_dtype && pgd_kv_dtype_parse(f->kv_cache_dtype, &bc->kv_dtype)) {
        fprintf(stderr, "pagoda %s: --kv-cache-dtype: %s\n", cmd, pgd_error_detail());
        return -1;
    }
    if (f->gpu_memory_utilization) {
        float u;
        if (pgd_cli_parse_f32(cmd, "--gpu-memory-utilization", f->gpu_memory_utilization, &u))
            return -1;
        if (!(u > 0.0f && u <= 1.0f)) {
            fprintf(stderr, "pagoda %s: --gpu-memory-utilization wants a share in (0, 1]\n", cmd);
            return -1;
        }
        bc->gpu_memory_utilization = u;
    }
    if (f->sched_policy && pgd_sched_policy_parse(f->sched_policy, &sched->policy)) {
        fprintf(stderr, "pagoda %s: --sched-policy: %s\n", cmd, pgd_error_detail());
        return -1;
    }
    if (parse_factor(cmd, "--fair-prompt-factor", f->fair_prompt_factor,
                     &sched->fair_prompt_factor) ||
        parse_factor(cmd, "--fair-output-factor", f->fair_output_factor,
                     &sched->fair_output_factor))
        return -1;
    if (sched->fair_prompt_factor == 0 && sched->fair_output_factor == 0) {
        fprintf(stderr, "pagoda %s: --fair-prompt-factor and --fair-output-factor are both 0\n",
                cmd);
        return -1;
    }
    /* 0 would silently mean the default for these: a user who writes 0 means something else. */
    static const struct {
        const char *name;
        size_t off;
    } k_positive[] = {
        {"kv-cache-mb", offsetof(pgd_engine_flags, kv_cache_mb)},
        {"block-size", offsetof(pgd_engine_flags, block_size)},
        {"max-num-batched-tokens", offsetof(pgd_engine_flags, max_num_batched_tokens)},
        {"max-num-seqs", offsetof(pgd_engine_flags, max_num_seqs)},
        {"max-waiting", offsetof(pgd_engine_flags, max_waiting)}};
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_positive); i++)
        if (flag_seen(f, k_positive[i].name) &&
            *(const uint64_t *)((const char *)f + k_positive[i].off) == 0) {
            fprintf(stderr, "pagoda %s: --%s must be at least 1 (leave it out for the default)\n",
                    cmd, k_positive[i].name);
            return -1;
        }
    if (f->kv_cache_mb > (UINT64_MAX >> 20)) {
        fprintf(stderr, "pagoda %s: --kv-cache-mb is too large\n", cmd);
        return -1;
    }
    bc->kv_cache_bytes = f->kv_cache_mb << 20;
    if (to_u32(cmd, "ctx-size", f->ctx_size, UINT32_MAX, &load->max_ctx) ||
        to_u32(cmd, "block-size", f->block_size, 1u << 16, &bc->block_size) ||
        to_u32(cmd, "max-num-batched-tokens", f->max_num_batched_tokens, 1u << 20,
               &bc->max_tokens) ||
        to_u32(cmd, "max-num-seqs", f->max_num_seqs, 1u << 20, &sched->max_num_seqs) ||
        to_u32(cmd, "max-waiting", f->max_waiting, 1u << 30, &sched->max_waiting) ||
        to_u32(cmd, "threads", f->threads, 4096, &r->device.cpu.n_threads))
        return -1;
    /* one budget: the runner is sized for the steps the scheduler plans */
    sched->max_num_batched_tokens = bc->max_tokens;
    sched->prefix_caching = !f->no_prefix_caching;
    return 0;
}

int pgd_cli_load(const char *cmd, const pgd_load_options *load, pgd_model_info **info,
                 pgd_runner **runner) {
    int rc = pgd_load(load, info, runner);
    if (rc) {
        fprintf(stderr, "pagoda %s: %s: %s\n", cmd,
                load->model_path ? load->model_path : load->model_preset,
                pgd_error_detail()[0] ? pgd_error_detail() : pgd_strerror(rc));
        return 1;
    }
    if (load->max_ctx > (*info)->n_ctx)
        fprintf(stderr,
                "pagoda %s: note: --ctx-size %u is more than the model's context; using %u\n", cmd,
                load->max_ctx, (*info)->n_ctx);
    return 0;
}
