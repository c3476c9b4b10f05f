/* placeholder until this subcommand lands (replaced in this same change). */
#include <stdio.h>
#include "server/cli.h"
int pgd_cli_tokenize(int argc, char **argv) { (void)argc; (void)argv; fputs("pagoda: 'tokenize' is not built yet\n", stderr); return 1; }
int pgd_cli_detokenize(int argc, char **argv) { (void)argc; (void)argv; fputs("pagoda: 'detokenize' is not built yet\n", stderr); return 1; }
