/*
 * engine/load.h — opening a model for serving in one call: its description (engine/info.h)
 * and its runner (engine/runner.h), from one set of options.
 *
 * Threading: any thread (the server loads on libuv's threadpool); the results are handed to
 * their owners afterwards (the runner to the scheduler thread).
 */
#ifndef PGD_ENGINE_LOAD_H
#define PGD_ENGINE_LOAD_H

#include <stdint.h>

#include "engine/info.h"
#include "engine/runner.h"

/* Where the weights come from. */
typedef enum pgd_load_format {
    PGD_LOAD_AUTO = 0, /* the GGUF file when model_path is given, else dummy weights */
    PGD_LOAD_GGUF,     /* model_path */
    PGD_LOAD_DUMMY,    /* model_preset's shapes, dummy weights (engine/model/dummy.h) */
} pgd_load_format;

/* "auto", "gguf" or "dummy" into *out. 0 or PGD_EINVAL with a detail. */
int pgd_load_format_parse(const char *s, pgd_load_format *out);

typedef struct pgd_load_options {
    pgd_load_format format;
    const char *model_path;    /* GGUF file (format gguf) */
    const char *model_preset;  /* preset name or config.json path (format dummy) */
    const char *chat_template; /* family name overriding the model's template, or NULL */
    uint32_t max_ctx;          /* context limit; 0 = the model's trained context */
    pgd_runner_options runner; /* weights, KV memory, step size, CPU settings */
} pgd_load_options;

void pgd_load_options_default(pgd_load_options *o);

/* Open the model info and create its runner: both or neither. Errors say why
 * (pgd_error_detail): no model given, a bad file or preset, a KV cache too small. The caller
 * destroys the runner before closing the info. */
int pgd_load(const pgd_load_options *o, pgd_model_info **info, pgd_runner **runner);

#endif
