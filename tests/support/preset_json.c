/*
 * tests/support/preset_json.c — model presets from config.json text (see preset_json.h).
 */
#include "support/preset_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/error.h"

int pgd_test_preset_file(const char *json, char *path, size_t n) {
    if (snprintf(path, n, "/tmp/pgd_preset_XXXXXX.json") >= (int)n)
        return pgd_error_set(PGD_EIO, "the preset file's name does not fit");
    int fd = mkstemps(path, 5);
    if (fd < 0) return pgd_error_set(PGD_EIO, "cannot create a temporary preset file");
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        remove(path);
        return pgd_error_set(PGD_EIO, "cannot open the temporary preset file");
    }
    const int bad = fputs(json, f) < 0;
    if (fclose(f) || bad) {
        remove(path);
        return pgd_error_set(PGD_EIO, "cannot write the temporary preset file");
    }
    return 0;
}

int pgd_test_preset_json(const char *json, pgd_model_preset *out) {
    char path[64];
    int rc = pgd_test_preset_file(json, path, sizeof path);
    if (rc) return rc;
    rc = pgd_model_preset_load(path, out);
    remove(path);
    return rc;
}
