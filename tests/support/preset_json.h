/*
 * tests/support/preset_json.h — model presets from config.json text, as a user would give the
 * file (`--model-preset PATH`), for tests that need small model shapes: the text written to a
 * temporary file, which is then loaded (pgd_model_preset_load) or handed to a loader by path.
 *
 * Threading: any thread.
 */
#ifndef PGD_TESTS_SUPPORT_PRESET_JSON_H
#define PGD_TESTS_SUPPORT_PRESET_JSON_H

#include <stddef.h>

#include "engine/model/preset.h"

/* json written to a new temporary file "/tmp/pgd_preset_XXXXXX.json" whose name goes into
 * path[n] (n >= 32); the caller removes it. 0 or PGD_EIO (said). */
int pgd_test_preset_file(const char *json, char *path, size_t n);

/* The preset json describes (the temporary file removed again). 0, PGD_EIO or the loader's
 * error. */
int pgd_test_preset_json(const char *json, pgd_model_preset *out);

#endif
