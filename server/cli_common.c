/*
 * server/cli_common.c — small helpers shared by the CLI subcommands.
 */
#include "server/cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int pgd_cli_flag_value(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "pagoda: %s needs a value\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

double pgd_cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
