/* placeholder until this subcommand lands (replaced in this same change). */
#include <stdio.h>
#include "server/cli.h"
int pgd_cli_dequant(int argc, char **argv) { (void)argc; (void)argv; fputs("pagoda: 'dequant' is not built yet\n", stderr); return 1; }
