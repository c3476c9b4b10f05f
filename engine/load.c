/*
 * engine/load.c — a model's info and runner from one set of options (see load.h).
 */
#include "engine/load.h"

#include <string.h>

#include "common/error.h"

void pgd_load_options_default(pgd_load_options *o) {
    memset(o, 0, sizeof *o);
    pgd_runner_options_default(&o->runner);
}

int pgd_load_format_parse(const char *s, pgd_load_format *out) {
    static const char *const names[] = {"auto", "gguf", "dummy"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (pgd_load_format)i;
            return 0;
        }
    return pgd_error_set(PGD_EINVAL, "load format '%s': use auto, gguf or dummy", s);
}

int pgd_load(const pgd_load_options *o, pgd_model_info **info, pgd_runner **runner) {
    *info = NULL;
    *runner = NULL;
    pgd_load_format f = o->format;
    if (f == PGD_LOAD_AUTO) f = o->model_path ? PGD_LOAD_GGUF : PGD_LOAD_DUMMY;
    int rc;
    if (f == PGD_LOAD_GGUF) {
        if (!o->model_path) return pgd_error_set(PGD_EINVAL, "no model file given");
        rc = pgd_model_info_open(o->model_path, o->chat_template, o->max_ctx, info);
    } else {
        if (!o->model_preset)
            return pgd_error_set(PGD_EINVAL, "dummy weights need a model preset (%s)",
                                 pgd_model_preset_names());
        rc = pgd_model_info_dummy(o->model_preset, o->chat_template, o->max_ctx, info);
    }
    if (!rc && (rc = pgd_runner_create(*info, &o->runner, runner))) {
        pgd_model_info_close(*info);
        *info = NULL;
    }
    return rc;
}
