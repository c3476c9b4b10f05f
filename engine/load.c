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

int pgd_load(const pgd_load_options *o, pgd_model_info **info, pgd_runner **runner) {
    *info = NULL;
    *runner = NULL;
    if (!o->model_path) return pgd_error_set(PGD_EINVAL, "no model file given");
    int rc = pgd_model_info_open(o->model_path, o->chat_template, o->max_ctx, info);
    if (!rc && (rc = pgd_runner_create(*info, &o->runner, runner))) {
        pgd_model_info_close(*info);
        *info = NULL;
    }
    return rc;
}
