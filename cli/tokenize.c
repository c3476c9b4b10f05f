/*
 * cli/tokenize.c — `pagoda tokenize` and `pagoda detokenize`.
 *
 *   pagoda tokenize --model PATH [--special] [--bos] TEXT|-
 *       prints the ids of TEXT as a JSON array and a newline. `-` reads stdin as raw bytes (no
 *       newline stripping). --special recognises control tokens anywhere in the text (one
 *       special span over all of it); --bos puts the model's bos id first.
 *   pagoda detokenize --model PATH [--special] ID...|-
 *       writes the bytes of the ids to stdout exactly, with no newline added. `-` reads the ids
 *       from stdin (any separators: a JSON array works). --special includes control tokens'
 *       text.
 * Exit status: 0 ok, 1 failure (bad model, bad id), 2 usage error.
 *
 * Threading: runs once on the main thread.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "engine/model/gguf.h"
#include "engine/text/tokenizer.h"
#include "cli/cli.h"

static void usage_tokenize(FILE *f) {
    fputs("usage: pagoda tokenize --model PATH [--special] [--bos] TEXT\n"
          "  prints the token ids of TEXT as a JSON array; TEXT '-' reads stdin as bytes\n"
          "  --special  recognise control tokens (e.g. <|im_start|>) in the text\n"
          "  --bos      put the model's bos token first\n"
          "  --         ends the options (for a TEXT that starts with --)\n",
          f);
}

static void usage_detokenize(FILE *f) {
    fputs("usage: pagoda detokenize --model PATH [--special] ID...\n"
          "  writes the text of the token ids to stdout, byte for byte, no newline added;\n"
          "  a single ID '-' reads the ids from stdin (e.g. a JSON array)\n"
          "  --special  include the text of control tokens\n",
          f);
}

static int read_stream(FILE *f, pgd_buf *b) {
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (pgd_buf_append(b, chunk, n)) return PGD_ENOMEM;
    return ferror(f) ? PGD_EIO : 0;
}

static int load_tokenizer(const char *path, pgd_tokenizer **tk) {
    pgd_gguf *g = NULL;
    int rc = pgd_gguf_open(path, &g);
    if (rc) {
        fprintf(stderr, "pagoda: cannot open model '%s': %s\n", path, pgd_error_detail());
        return rc;
    }
    rc = pgd_tokenizer_load(g, tk);
    if (rc)
        fprintf(stderr, "pagoda: cannot load the tokenizer of '%s': %s\n", path,
                pgd_error_detail());
    pgd_gguf_close(g);
    return rc;
}

/* Common flags; returns 0 to go on, or the exit status. Positional arguments are collected in
 * pos[] (argv order); "--" ends the flags. */
static int parse_args(int argc, char **argv, bool allow_bos, void (*usage)(FILE *),
                      const char **model, bool *special, bool *bos, char **pos, int *n_pos) {
    bool flags_done = false;
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!flags_done && a[0] == '-' && a[1] == '-') {
            int r;
            if (!strcmp(a, "--")) {
                flags_done = true;
            } else if (!strcmp(a, "--help")) {
                usage(stdout);
                return -1;
            } else if (!strcmp(a, "--special")) {
                *special = true;
            } else if (allow_bos && !strcmp(a, "--bos")) {
                *bos = true;
            } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--model", model)) != 0) {
                if (r < 0) return 2;
            } else {
                fprintf(stderr, "pagoda: unknown option '%s'\n", a);
                usage(stderr);
                return 2;
            }
            continue;
        }
        pos[(*n_pos)++] = argv[i];
    }
    if (!*model) {
        fprintf(stderr, "pagoda: --model PATH is required\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

int pgd_cli_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool special = false, bos = false;
    char **pos = calloc((size_t)argc + 1, sizeof *pos);
    int n_pos = 0, status = 1;
    pgd_tokenizer *tk = NULL;
    pgd_buf text = PGD_BUF_INIT, outb = PGD_BUF_INIT;
    pgd_tokens ids = PGD_TOKENS_INIT;
    if (!pos) {
        fputs("pagoda: out of memory\n", stderr);
        return 1;
    }
    int r = parse_args(argc, argv, true, usage_tokenize, &model, &special, &bos, pos, &n_pos);
    if (r) {
        status = r < 0 ? 0 : r;
        goto done;
    }
    if (n_pos != 1) {
        fprintf(stderr, "pagoda: tokenize takes exactly one TEXT (got %d)\n", n_pos);
        usage_tokenize(stderr);
        status = 2;
        goto done;
    }
    if (!strcmp(pos[0], "-")) {
        if (read_stream(stdin, &text)) {
            fprintf(stderr, "pagoda: cannot read stdin: %s\n", strerror(errno));
            goto done;
        }
    } else if (pgd_buf_puts(&text, pos[0])) {
        goto oom;
    }
    if (load_tokenizer(model, &tk)) goto done;
    if (bos) {
        int32_t b = pgd_tokenizer_bos(tk);
        if (b < 0) {
            fprintf(stderr, "pagoda: the model has no bos token\n");
            goto done;
        }
        if (pgd_tokens_push(&ids, b)) goto oom;
    }
    pgd_span all = {0, text.len};
    if (pgd_tokenize(tk, text.data ? text.data : "", text.len, special ? &all : NULL,
                     special ? 1 : 0, &ids)) {
        fprintf(stderr, "pagoda: tokenize failed: %s\n", pgd_error_detail());
        goto done;
    }
    if (pgd_buf_append(&outb, "[", 1)) goto oom;
    for (size_t i = 0; i < ids.n; i++)
        if (pgd_buf_printf(&outb, i ? ", %d" : "%d", (int)ids.ids[i])) goto oom;
    if (pgd_buf_puts(&outb, "]\n")) goto oom;
    if (fwrite(outb.data, 1, outb.len, stdout) != outb.len || fflush(stdout)) {
        fprintf(stderr, "pagoda: cannot write the output: %s\n", strerror(errno));
        goto done;
    }
    status = 0;
    goto done;
oom:
    fputs("pagoda: out of memory\n", stderr);
done:
    pgd_tokens_free(&ids);
    pgd_buf_free(&text);
    pgd_buf_free(&outb);
    pgd_tokenizer_free(tk);
    free(pos);
    return status;
}

/* Parse one decimal id (optionally signed, so that "-5" is reported as out of range). */
static int parse_id(const char *s, size_t n, int64_t *out) {
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    if (i == n) return -1;
    int64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static int push_id(pgd_tokens *ids, const char *s, size_t n) {
    int64_t v;
    if (parse_id(s, n, &v) || v < INT32_MIN || v > INT32_MAX) {
        fprintf(stderr, "pagoda: '%.*s' is not a token id\n", (int)(n > 40 ? 40 : n), s);
        return 1;
    }
    if (pgd_tokens_push(ids, (int32_t)v)) {
        fputs("pagoda: out of memory\n", stderr);
        return 1;
    }
    return 0;
}

/* Ids from stdin: every run of [-+0-9] is one id; anything else separates them. */
static int ids_from_text(const char *t, size_t n, pgd_tokens *ids) {
    size_t i = 0;
    while (i < n) {
        if (!(t[i] == '-' || t[i] == '+' || (t[i] >= '0' && t[i] <= '9'))) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && t[j] >= '0' && t[j] <= '9') j++;
        if (push_id(ids, t + i, j - i)) return 1;
        i = j;
    }
    return 0;
}

int pgd_cli_detokenize(int argc, char **argv) {
    const char *model = NULL;
    bool special = false, bos = false;
    char **pos = calloc((size_t)argc + 1, sizeof *pos);
    int n_pos = 0, status = 1;
    pgd_tokenizer *tk = NULL;
    pgd_buf in = PGD_BUF_INIT, outb = PGD_BUF_INIT;
    pgd_tokens ids = PGD_TOKENS_INIT;
    if (!pos) {
        fputs("pagoda: out of memory\n", stderr);
        return 1;
    }
    int r = parse_args(argc, argv, false, usage_detokenize, &model, &special, &bos, pos, &n_pos);
    if (r) {
        status = r < 0 ? 0 : r;
        goto done;
    }
    if (n_pos == 1 && !strcmp(pos[0], "-")) {
        if (read_stream(stdin, &in)) {
            fprintf(stderr, "pagoda: cannot read stdin: %s\n", strerror(errno));
            goto done;
        }
        if (ids_from_text(in.data ? in.data : "", in.len, &ids)) goto done;
    } else {
        for (int i = 0; i < n_pos; i++)
            if (push_id(&ids, pos[i], strlen(pos[i]))) goto done;
    }
    if (load_tokenizer(model, &tk)) goto done;
    if (pgd_detokenize(tk, ids.ids, ids.n, special, &outb)) {
        fprintf(stderr, "pagoda: detokenize failed: %s\n", pgd_error_detail());
        goto done;
    }
    if ((outb.len && fwrite(outb.data, 1, outb.len, stdout) != outb.len) || fflush(stdout)) {
        fprintf(stderr, "pagoda: cannot write the output: %s\n", strerror(errno));
        goto done;
    }
    status = 0;
done:
    pgd_tokens_free(&ids);
    pgd_buf_free(&in);
    pgd_buf_free(&outb);
    pgd_tokenizer_free(tk);
    free(pos);
    return status;
}
