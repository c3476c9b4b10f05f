/*
 * tests/fuzz/fuzz_json_schema.c — libFuzzer target: a JSON Schema (api/json_schema.h) and a
 * document for it (engine/sampling/json_fsm.h).
 *
 * Input: the schema's JSON text, a NUL byte, then the document's bytes (no NUL: the schema
 * alone). The compiler accepts the schema or refuses it with a message; an accepted one is
 * followed byte by byte, where trying a byte (pgd_json_fsm_try) must agree with feeding it, a
 * document the recognizer calls whole must be one jansson parses (a number past its limits
 * aside), and random walks from the start and from where the document stopped must never meet
 * a dead end (a state with no byte to take that is not whole).
 * Seeds: tests/fuzz/corpus/fuzz_json_schema/; dictionary: tests/fuzz/dict/fuzz_json_schema.dict.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_schema.h"
#include "common/error.h"
#include "engine/sampling/json_fsm.h"
#include "fuzz_util.h"
#include "support/json_walk.h"

/* No byte taken and not whole: the walk's dead end. */
static bool dead_end(const pgd_json_fsm *f) {
    if (pgd_json_fsm_done(f)) return false;
    for (int c = 0; c < 256; c++)
        if (pgd_json_fsm_try(f, &(uint8_t){(uint8_t)c}, 1)) return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_schema = nul ? (size_t)(nul - data) : size;
    json_error_t je;
    json_t *j = json_loadb((const char *)data, n_schema, JSON_DECODE_ANY, &je);
    if (!j) return 0;
    const pgd_json_schema *s = NULL;
    char msg[512];
    int rc = pgd_api_json_schema_compile(j, &s, msg, sizeof msg);
    json_decref(j);
    FUZZ_CHECK(rc == 0 || rc == PGD_EINVAL || rc == PGD_ENOMEM);
    if (rc) {
        FUZZ_CHECK(s == NULL && msg[0]);
        return 0;
    }
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, s);
    const uint8_t *doc = nul ? nul + 1 : data + size;
    size_t n_doc = nul ? size - n_schema - 1 : 0, i = 0;
    for (; i < n_doc; i++) {
        bool ok = pgd_json_fsm_try(&f, doc + i, 1);
        pgd_json_fsm g = f;
        FUZZ_CHECK(ok == pgd_json_fsm_feed(&g, doc + i, 1));
        if (!ok) break;
        f = g;
        FUZZ_CHECK(!dead_end(&f));
    }
    if (i == n_doc && pgd_json_fsm_done(&f)) {
        json_t *v = json_loadb((const char *)doc, n_doc, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        FUZZ_CHECK(v || strstr(je.text, "too big") || strstr(je.text, "overflow"));
        json_decref(v);
    }
    uint64_t rng = size * 0x9e3779b97f4a7c15ull + 7;
    char out[512];
    for (int w = 0; w < 2; w++) FUZZ_CHECK(pgd_test_json_walk(s, &rng, out, sizeof out) != -1);
    pgd_json_schema_unref(s);
    return 0;
}
