/*
 * server/cli_run.h — engine flags shared by the CLI commands that run the model (generate,
 * eval, bench): --model, --f32, --int8-activations, --threads, --kv-cache-mb,
 * --kv-cache-dtype, --block-size, --max-batch-tokens, --ctx-size, --chat-template,
 * --no-prefix-caching.
 */
#ifndef PGD_SERVER_CLI_RUN_H
#define PGD_SERVER_CLI_RUN_H

#include "engine/llm.h"

#define PGD_CLI_RUN_FLAGS_HELP                                                                     \
    "engine flags:\n"                                                                              \
    "  --model PATH            GGUF model file (required)\n"                                       \
    "  --f32                   dequantize every weight to f32 (precise, slower)\n"                 \
    "  --int8-activations      int8 activation blocks in the matmuls (faster, less exact)\n"       \
    "  --threads N             compute threads (default: one per core)\n"                          \
    "  --kv-cache-mb N         KV cache memory (default 1024)\n"                                   \
    "  --kv-cache-dtype T      KV cache elements: auto (f16; f32 with --f32), f16, f32\n"          \
    "  --block-size N          tokens per KV block (default 16)\n"                                 \
    "  --max-batch-tokens N    tokens per forward pass (default 512)\n"                            \
    "  --ctx-size N            context limit (default: the model's)\n"                             \
    "  --chat-template NAME    override the model's chat template\n"                               \
    "  --no-prefix-caching     disable the prefix cache\n"

/* If argv[*i] is an engine flag, consume it (and its value) into o and return 1; 0 if not an
 * engine flag; -1 after printing an error. */
int pgd_cli_run_flag(int argc, char **argv, int *i, pgd_llm_options *o);

/* Open the engine or print why not (prefix: command name). 0 or 1. */
int pgd_cli_run_open(const char *cmd, const pgd_llm_options *o, pgd_llm **out);

/* Parse an unsigned integer / float flag value; -1 (printed) on garbage. */
int pgd_cli_parse_u64(const char *cmd, const char *flag, const char *v, uint64_t *out);
int pgd_cli_parse_f32(const char *cmd, const char *flag, const char *v, float *out);

#endif
