/*
 * cli/dequant.c — `pagoda dequant`: list a GGUF file's tensors, or write tensors
 * dequantized to raw float32 so reference tests can compare them with gguf-py's numpy
 * dequantization.
 *
 *   pagoda dequant --model PATH --list
 *       one line per tensor: NAME <tab> TYPE <tab> ne0,ne1,... (ne0 innermost)
 *   pagoda dequant --model PATH --out DIR [--tensor NAME]...
 *       writes DIR/<NAME>.f32 (little-endian float32, ne0 fastest) for the named tensors, or
 *       for every tensor when none is named. DIR is created if missing. A '/' in a tensor name
 *       becomes '_' in the file name, so a hostile name cannot escape DIR.
 *
 * Exit status: 0 ok, 1 bad file / unknown tensor / write failure, 2 usage error.
 * Threading: main thread only.
 */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "engine/model/gguf.h"

static void usage(FILE *f) {
    fputs("usage: pagoda dequant --model PATH --list\n"
          "       pagoda dequant --model PATH --out DIR [--tensor NAME]...\n"
          "\n"
          "  --model PATH   GGUF file\n"
          "  --list         print NAME TYPE DIMS (tab-separated) for every tensor\n"
          "  --out DIR      write DIR/<NAME>.f32: raw little-endian float32, ne0 fastest\n"
          "  --tensor NAME  only this tensor (repeatable; default: all tensors)\n",
          f);
}

static void list_tensors(const pgd_gguf *g) {
    for (size_t i = 0; i < pgd_gguf_n_tensors(g); i++) {
        const pgd_gguf_tensor *t = pgd_gguf_tensor_at(g, i);
        const pgd_type_traits *tt = pgd_type_info(t->type);
        printf("%s\t%s\t", t->name, tt ? tt->name : "?");
        for (uint32_t d = 0; d < t->n_dims; d++)
            printf("%s%llu", d ? "," : "", (unsigned long long)t->ne[d]);
        putchar('\n');
    }
}

/* Write one tensor to DIR/<name>.f32; prints its own error. 0 or -1. */
static int write_tensor(const pgd_gguf_tensor *t, const char *dir) {
    size_t n = strlen(dir) + strlen(t->name) + 8;
    char *path = malloc(n);
    float *row = malloc((size_t)t->ne[0] * sizeof *row); /* [ne0] */
    FILE *f = NULL;
    bool created = false;
    int rc = -1;
    if (!path || !row) {
        fprintf(stderr, "pagoda: out of memory for tensor '%s'\n", t->name);
        goto fail;
    }
    snprintf(path, n, "%s/%s.f32", dir, t->name);
    for (char *p = path + strlen(dir) + 1; *p; p++)
        if (*p == '/') *p = '_';
    f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "pagoda: cannot create %s: %s\n", path, strerror(errno));
        goto fail;
    }
    created = true;
    uint64_t rows = t->nelem / t->ne[0];
    for (uint64_t r = 0; r < rows; r++) {
        int e = pgd_gguf_tensor_row_f32(t, r, row);
        if (e) {
            fprintf(stderr, "pagoda: cannot dequantize tensor '%s': %s\n", t->name,
                    pgd_error_detail());
            goto fail;
        }
        if (fwrite(row, sizeof *row, (size_t)t->ne[0], f) != (size_t)t->ne[0]) {
            fprintf(stderr, "pagoda: write error on %s: %s\n", path, strerror(errno));
            goto fail;
        }
    }
    if (fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "pagoda: write error on %s: %s\n", path, strerror(errno));
        goto fail;
    }
    f = NULL;
    rc = 0;
fail:
    if (f) fclose(f);
    if (rc && created) remove(path);
    free(path);
    free(row);
    return rc;
}

int pgd_cli_dequant(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    const char **names = calloc((size_t)argc + 1, sizeof *names); /* [argc] --tensor values */
    size_t n_names = 0;
    bool list = false;
    pgd_gguf *g = NULL;
    int status = 2;
    if (!names) {
        fputs("pagoda: out of memory\n", stderr);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            status = 0;
            goto done;
        }
        if (!strcmp(argv[i], "--list")) {
            list = true;
            continue;
        }
        if ((m = pgd_cli_flag_value(argc, argv, &i, "--model", &v)) != 0) {
            if (m < 0) goto usage_error;
            model = v;
        } else if ((m = pgd_cli_flag_value(argc, argv, &i, "--out", &v)) != 0) {
            if (m < 0) goto usage_error;
            out = v;
        } else if ((m = pgd_cli_flag_value(argc, argv, &i, "--tensor", &v)) != 0) {
            if (m < 0) goto usage_error;
            names[n_names++] = v;
        } else {
            fprintf(stderr, "pagoda dequant: unknown argument '%s'\n", argv[i]);
            goto usage_error;
        }
    }
    if (!model || (list == (out != NULL))) {
        fputs("pagoda dequant: need --model and exactly one of --list / --out\n", stderr);
        goto usage_error;
    }
    if (list && n_names) {
        fputs("pagoda dequant: --tensor goes with --out\n", stderr);
        goto usage_error;
    }

    status = 1;
    if (pgd_gguf_open(model, &g) != 0) {
        fprintf(stderr, "pagoda: cannot load %s: %s\n", model, pgd_error_detail());
        goto done;
    }
    if (list) {
        list_tensors(g);
        status = fflush(stdout) == 0 ? 0 : 1;
        goto done;
    }
    for (size_t i = 0; i < n_names; i++)
        if (!pgd_gguf_find_tensor(g, names[i])) {
            fprintf(stderr, "pagoda: %s has no tensor named '%s'\n", model, names[i]);
            goto done;
        }
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "pagoda: cannot create %s: %s\n", out, strerror(errno));
        goto done;
    }
    size_t count = n_names ? n_names : pgd_gguf_n_tensors(g);
    for (size_t i = 0; i < count; i++) {
        const pgd_gguf_tensor *t =
            n_names ? pgd_gguf_find_tensor(g, names[i]) : pgd_gguf_tensor_at(g, i);
        if (write_tensor(t, out) != 0) goto done;
    }
    status = 0;
    goto done;

usage_error:
    usage(stderr);
    status = 2;
done:
    pgd_gguf_close(g);
    free(names);
    return status;
}
