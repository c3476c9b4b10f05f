/*
 * server/cli_run.c — engine flags and opening for the model-running CLI commands.
 */
#include "server/cli_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/cli.h"

int pgd_cli_parse_u64(const char *cmd, const char *flag, const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') {
        fprintf(stderr, "pagoda %s: %s wants a non-negative integer, got '%s'\n", cmd, flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

int pgd_cli_parse_f32(const char *cmd, const char *flag, const char *v, float *out) {
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "pagoda %s: %s wants a number, got '%s'\n", cmd, flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

int pgd_cli_run_flag(int argc, char **argv, int *i, pgd_llm_options *o) {
    const char *v = NULL;
    uint64_t u;
    int r;
    if ((r = pgd_cli_flag_value(argc, argv, i, "--model", &o->model_path))) return r;
    if ((r = pgd_cli_flag_value(argc, argv, i, "--chat-template", &o->chat_template))) return r;
    if ((r = pgd_cli_flag_value(argc, argv, i, "--kv-cache-dtype", &v))) {
        if (r > 0 && pgd_kv_dtype_parse(v, &o->kv_dtype)) {
            fprintf(stderr, "pagoda: --kv-cache-dtype: %s\n", pgd_error_detail());
            return -1;
        }
        return r;
    }
    if (!strcmp(argv[*i], "--f32")) {
        o->model_flags |= PGD_MODEL_F32;
        return 1;
    }
    if (!strcmp(argv[*i], "--int8-activations")) {
        o->act_q8 = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--no-prefix-caching")) {
        o->prefix_caching = false;
        return 1;
    }
    static const char *const k_uint_flags[] = {"--threads", "--kv-cache-mb", "--block-size",
                                               "--max-batch-tokens", "--ctx-size"};
    for (size_t f = 0; f < PGD_ARRAY_LEN(k_uint_flags); f++) {
        if (!(r = pgd_cli_flag_value(argc, argv, i, k_uint_flags[f], &v))) continue;
        if (r < 0 || pgd_cli_parse_u64("", k_uint_flags[f], v, &u)) return -1;
        if (u > UINT32_MAX && f != 1) {
            fprintf(stderr, "pagoda: %s is too large\n", k_uint_flags[f]);
            return -1;
        }
        switch (f) {
        case 0:
            o->n_threads = (uint32_t)u;
            break;
        case 1:
            o->kv_cache_bytes = u << 20;
            break;
        case 2:
            o->block_size = (uint32_t)u;
            break;
        case 3:
            o->max_batch_tokens = (uint32_t)u;
            break;
        case 4:
            o->max_ctx = (uint32_t)u;
            break;
        }
        return 1;
    }
    return 0;
}

int pgd_cli_run_open(const char *cmd, const pgd_llm_options *o, pgd_llm **out) {
    if (!o->model_path) {
        fprintf(stderr, "pagoda %s: --model PATH is required\n", cmd);
        return 1;
    }
    int rc = pgd_llm_open(o, out);
    if (rc) {
        fprintf(stderr, "pagoda %s: %s: %s\n", cmd, o->model_path,
                pgd_error_detail()[0] ? pgd_error_detail() : pgd_strerror(rc));
        return 1;
    }
    return 0;
}
