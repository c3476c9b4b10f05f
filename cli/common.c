/*
 * cli/common.c — small helpers shared by the CLI subcommands.
 */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
