/*
 * cli/main.c — the `pagoda` binary: dispatches to a subcommand (one file each in cli/).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} subcommand;

#ifndef PGD_HAVE_SERVER
/* Built without the HTTP front end (-DPGD_SERVER=OFF). */
int pgd_cli_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "pagoda: this build has no HTTP server (configured with -DPGD_SERVER=OFF)\n");
    return 1;
}
int pgd_cli_hash_key(int argc, char **argv) {
    return pgd_cli_serve(argc, argv);
}
#endif

static const subcommand k_cmds[] = {
    {"serve", pgd_cli_serve, "serve the OpenAI-compatible HTTP API and the web page"},
    {"hash-key", pgd_cli_hash_key, "print the sha256 of an API key read from stdin (tenants file)"},
    {"info", pgd_cli_info, "describe a model file: architecture, shapes, tensors, tokenizer"},
    {"tokenize", pgd_cli_tokenize, "print the token ids of a text as a JSON array"},
    {"detokenize", pgd_cli_detokenize, "print the text of token ids"},
    {"template", pgd_cli_template,
     "render a chat (OpenAI messages JSON) with the model's template"},
    {"generate", pgd_cli_generate, "generate text from a prompt or a chat, streamed"},
    {"eval", pgd_cli_eval, "write the logits of every prompt position (for reference checks)"},
    {"bench", pgd_cli_bench, "offline throughput: prefill and decode tokens/s per batch size"},
    {"dequant", pgd_cli_dequant, "write tensors dequantized to f32 (for reference checks)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: pagoda COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", k_cmds[i].name, k_cmds[i].help);
    fprintf(f, "\n`pagoda COMMAND --help` describes each command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("pagoda %s\n", PGD_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pagoda: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
