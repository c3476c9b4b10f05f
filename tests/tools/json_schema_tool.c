/*
 * tests/tools/json_schema_tool.c — JSON schemas compiled and walked, for checks against an
 * independent validator (tests/reference/test_json_schema.py runs the `jsonschema` package on
 * what this prints).
 *
 *   json_schema_tool walk SCHEMA_FILE SEED N   N random walks (tests/support/json_walk.h), one
 *                                              line each: the document as a JSON string, or
 *                                              null for a walk cut before its end
 *   json_schema_tool check SCHEMA_FILE         for each line of stdin (a JSON string): whole,
 *                                              prefix or refused, as the recognizer reads it
 *
 * A schema the compiler refuses: its message on stderr, exit status 2.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_schema.h"
#include "engine/sampling/json_fsm.h"
#include "support/json_walk.h"

static int usage(void) {
    fprintf(stderr, "usage: json_schema_tool walk SCHEMA_FILE SEED N | check SCHEMA_FILE\n");
    return 1;
}

static void print_string(const char *p, size_t n) {
    json_t *s = json_stringn_nocheck(p, n);
    char *t = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    printf("%s\n", t ? t : "null");
    free(t);
    json_decref(s);
}

static int walk(const pgd_json_schema *s, unsigned long long seed, long n) {
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    static char doc[8192];
    for (long i = 0; i < n; i++) {
        long len = pgd_test_json_walk(s, &rng, doc, sizeof doc);
        if (len == -1) {
            fprintf(stderr, "dead end after: %s\n", doc);
            return 3;
        }
        if (len < 0)
            printf("null\n");
        else
            print_string(doc, (size_t)len);
    }
    return 0;
}

static int check(const pgd_json_schema *s) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        json_error_t je;
        json_t *v = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(v)) {
            fprintf(stderr, "not a JSON string: %s", line);
            json_decref(v);
            free(line);
            return 1;
        }
        pgd_json_fsm f;
        pgd_json_fsm_init(&f, s);
        bool ok =
            pgd_json_fsm_feed(&f, (const uint8_t *)json_string_value(v), json_string_length(v));
        printf("%s\n", !ok ? "refused" : pgd_json_fsm_done(&f) ? "whole" : "prefix");
        json_decref(v);
    }
    free(line);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    bool is_walk = !strcmp(argv[1], "walk");
    if ((is_walk && argc != 5) || (!is_walk && (strcmp(argv[1], "check") || argc != 3)))
        return usage();
    json_error_t je;
    json_t *j = json_load_file(argv[2], JSON_DECODE_ANY, &je);
    if (!j) {
        fprintf(stderr, "%s: %s\n", argv[2], je.text);
        return 1;
    }
    const pgd_json_schema *s;
    char msg[512];
    int rc = pgd_api_json_schema_compile(j, &s, msg, sizeof msg);
    json_decref(j);
    if (rc) {
        fprintf(stderr, "refused: %s\n", msg);
        return 2;
    }
    rc = is_walk ? walk(s, strtoull(argv[3], NULL, 10), strtol(argv[4], NULL, 10)) : check(s);
    pgd_json_schema_unref(s);
    return rc;
}
