/* placeholder until this subcommand lands (replaced in this same change). */
#include <stdio.h>
#include "server/cli.h"
int pgd_cli_info(int argc, char **argv) { (void)argc; (void)argv; fputs("pagoda: 'info' is not built yet\n", stderr); return 1; }
