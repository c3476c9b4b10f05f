/*
 * tests/unit/testutil.h — a minimal assertion kit for the C unit tests.
 *
 * Each test executable runs its TEST functions from main via RUN(fn) and ends with
 * `return test_summary();`, which prints "N passed, M failed" and returns non-zero on failure.
 * CHECK records a failure and continues; REQUIRE records it and returns from the test.
 */
#ifndef PGD_TESTS_TESTUTIL_H
#define PGD_TESTS_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int tu_failed_checks;
static int tu_tests_passed, tu_tests_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
            tu_failed_checks++;                                                                    \
        }                                                                                          \
    } while (0)

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);           \
            tu_failed_checks++;                                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long tu_a = (long long)(a), tu_b = (long long)(b);                                    \
        if (tu_a != tu_b) {                                                                        \
            fprintf(stderr, "  %s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a,    \
                    #b, tu_a, tu_b);                                                               \
            tu_failed_checks++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *tu_a = (a), *tu_b = (b);                                                       \
        if (!tu_a || !tu_b || strcmp(tu_a, tu_b) != 0) {                                           \
            fprintf(stderr, "  %s:%d: %s == %s failed:\n    got:  \"%s\"\n    want: \"%s\"\n",     \
                    __FILE__, __LINE__, #a, #b, tu_a ? tu_a : "(null)", tu_b ? tu_b : "(null)");   \
            tu_failed_checks++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double tu_a = (double)(a), tu_b = (double)(b);                                             \
        if (!(fabs(tu_a - tu_b) <= (tol))) {                                                       \
            fprintf(stderr, "  %s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, \
                    #a, #b, (double)(tol), tu_a, tu_b);                                            \
            tu_failed_checks++;                                                                    \
        }                                                                                          \
    } while (0)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        int tu_before = tu_failed_checks;                                                          \
        fn();                                                                                      \
        if (tu_failed_checks == tu_before) {                                                       \
            tu_tests_passed++;                                                                     \
            fprintf(stderr, "ok   %s\n", #fn);                                                     \
        } else {                                                                                   \
            tu_tests_failed++;                                                                     \
            fprintf(stderr, "FAIL %s\n", #fn);                                                     \
        }                                                                                          \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", tu_tests_passed, tu_tests_failed);
    return tu_tests_failed ? 1 : 0;
}

#endif
