/*
 * tests/unit/test_stop.c — engine/stop: stop strings over text deltas and token-level finish.
 *
 * Expectations come from the definitions, computed here by brute force: the stop that wins is
 * the one whose end comes first in the text (the longest on a tie); the text before it is the
 * output; while nothing matched, the held-back tail is the longest suffix of the text fed so far
 * that is a proper prefix of some stop string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "engine/text/stop.h"
#include "testutil.h"

/* ---- reference ---------------------------------------------------------------------------- */

/* index of the winning stop string in text[len] and its start, or -1 */
static int ref_match(const char *text, size_t len, const char *const *stops, int n, size_t *start) {
    for (size_t e = 1; e <= len; e++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            size_t l = strlen(stops[i]);
            if (l <= e && memcmp(text + e - l, stops[i], l) == 0 &&
                (best < 0 || l > strlen(stops[best])))
                best = i;
        }
        if (best >= 0) {
            *start = e - strlen(stops[best]);
            return best;
        }
    }
    return -1;
}

/* longest suffix of text[len] that is a proper prefix of some stop string */
static size_t ref_held(const char *text, size_t len, const char *const *stops, int n) {
    size_t best = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(stops[i]);
        for (size_t k = 1; k < l && k <= len; k++)
            if (memcmp(text + len - k, stops[i], k) == 0 && k > best) best = k;
    }
    return best;
}

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int l = pgd_utf8_seq_len((unsigned char)s[i]);
        if (l == 0 || i + (size_t)l > n) return 0;
        for (int k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
        i += (size_t)l;
    }
    return 1;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static int init(pgd_stop_matcher *m, const char *const *stops, int n, bool include) {
    pgd_str s[PGD_STOP_MAX_STRINGS + 4];
    for (int i = 0; i < n; i++) {
        s[i].ptr = stops[i];
        s[i].len = strlen(stops[i]);
    }
    return pgd_stop_init(m, s, n, include);
}

/* Feeds the NULL-terminated deltas; returns the stop index (-1 none) and the whole output
 * (flushed when nothing matched) in out. per_step (if not NULL) gets "|"-separated emissions. */
static int run(const char *const *stops, int n, const char *const *deltas, pgd_buf *out,
               pgd_buf *per_step) {
    pgd_stop_matcher m;
    if (init(&m, stops, n, false)) return -2;
    int matched = -1;
    for (int i = 0; deltas[i]; i++) {
        size_t before = out->len;
        int mi;
        if (pgd_stop_feed(&m, deltas[i], strlen(deltas[i]), out, &mi)) return -3;
        if (per_step) {
            pgd_buf_append(per_step, out->data ? out->data + before : "", out->len - before);
            pgd_buf_puts(per_step, "|");
        }
        if (mi >= 0) {
            if (matched >= 0) return -4; /* reported twice */
            matched = mi;
        }
    }
    if (matched < 0) pgd_stop_flush(&m, out);
    if (!out->data) pgd_buf_reserve(out, 0);
    pgd_stop_free(&m);
    return matched;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_spanning_deltas(void) {
    const char *stops[] = {"</s>"};
    const char *d[] = {"Hello <", "/", "s>", " world", NULL};
    pgd_buf out = PGD_BUF_INIT, steps = PGD_BUF_INIT;
    CHECK_EQ_INT(run(stops, 1, d, &out, &steps), 0);
    CHECK_EQ_STR(out.data, "Hello ");
    CHECK_EQ_STR(steps.data, "Hello ||||"); /* nothing after the match */
    pgd_buf_free(&out);
    pgd_buf_free(&steps);

    /* one byte at a time */
    const char *d2[] = {"x", "<", "/", "s", ">", "y", NULL};
    CHECK_EQ_INT(run(stops, 1, d2, &out, &steps), 0);
    CHECK_EQ_STR(out.data, "x");
    CHECK_EQ_STR(steps.data, "x||||||");
    pgd_buf_free(&out);
    pgd_buf_free(&steps);
}

static void test_prefix_released(void) {
    const char *stops[] = {"STOP"};
    const char *d[] = {"ab ST", "OX", " and S", "T", "OPPED", NULL};
    pgd_buf out = PGD_BUF_INIT, steps = PGD_BUF_INIT;
    CHECK_EQ_INT(run(stops, 1, d, &out, &steps), 0);
    CHECK_EQ_STR(steps.data, "ab |STOX| and |||");
    CHECK_EQ_STR(out.data, "ab STOX and ");
    pgd_buf_free(&out);
    pgd_buf_free(&steps);

    /* a held prefix released by flush when generation ends by length */
    const char *d2[] = {"the end is ST", "O", NULL};
    CHECK_EQ_INT(run(stops, 1, d2, &out, &steps), -1);
    CHECK_EQ_STR(steps.data, "the end is ||");
    CHECK_EQ_STR(out.data, "the end is STO");
    pgd_buf_free(&out);
    pgd_buf_free(&steps);
}

static void test_overlapping_prefixes(void) {
    const char *stops[] = {"abcd", "bcx", "cy"};
    const char *d1[] = {"zab", "cy", NULL};
    const char *d2[] = {"zab", "cx", NULL};
    const char *d3[] = {"zab", "cd", NULL};
    const char *d4[] = {"zab", "ce", NULL};
    pgd_buf out = PGD_BUF_INIT, steps = PGD_BUF_INIT;
    CHECK_EQ_INT(run(stops, 3, d1, &out, &steps), 2);
    CHECK_EQ_STR(steps.data, "z|ab|"); /* "ab" held for "abcd", then released before "cy" */
    CHECK_EQ_STR(out.data, "zab");
    pgd_buf_reset(&out);
    pgd_buf_reset(&steps);
    CHECK_EQ_INT(run(stops, 3, d2, &out, &steps), 1);
    CHECK_EQ_STR(out.data, "za");
    pgd_buf_reset(&out);
    CHECK_EQ_INT(run(stops, 3, d3, &out, &steps), 0);
    CHECK_EQ_STR(out.data, "z");
    pgd_buf_reset(&out);
    pgd_buf_reset(&steps);
    CHECK_EQ_INT(run(stops, 3, d4, &out, &steps), -1);
    CHECK_EQ_STR(steps.data, "z|abce|");
    pgd_buf_reset(&out);

    /* the first stop to complete wins, even if another began earlier */
    const char *s2[] = {"xabcd", "bc"};
    const char *d5[] = {"1xabcd", NULL};
    CHECK_EQ_INT(run(s2, 2, d5, &out, NULL), 1);
    CHECK_EQ_STR(out.data, "1xa");
    pgd_buf_reset(&out);
    /* completing at the same byte: the longer one (it starts earlier) */
    const char *s3[] = {"b", "ab"};
    const char *d6[] = {"xa", "b", NULL};
    CHECK_EQ_INT(run(s3, 2, d6, &out, NULL), 1);
    CHECK_EQ_STR(out.data, "x");
    pgd_buf_reset(&out);
    /* self-overlapping stop string (KMP fallback) */
    const char *s4[] = {"aab"};
    const char *d7[] = {"a", "a", "a", "b", "c", NULL};
    CHECK_EQ_INT(run(s4, 1, d7, &out, NULL), 0);
    CHECK_EQ_STR(out.data, "a");
    pgd_buf_free(&out);
    pgd_buf_free(&steps);
}

static void test_stop_at_start(void) {
    const char *stops[] = {"###", "\n\n"};
    const char *d1[] = {"###", "more", NULL};
    const char *d2[] = {"#", "##tail", NULL};
    const char *d3[] = {"\n\nUser:", NULL};
    pgd_buf out = PGD_BUF_INIT;
    CHECK_EQ_INT(run(stops, 2, d1, &out, NULL), 0);
    CHECK_EQ_INT(out.len, 0);
    CHECK_EQ_INT(run(stops, 2, d2, &out, NULL), 0);
    CHECK_EQ_INT(out.len, 0);
    CHECK_EQ_INT(run(stops, 2, d3, &out, NULL), 1);
    CHECK_EQ_INT(out.len, 0);
    pgd_buf_free(&out);
}

static void test_utf8(void) {
    /* "→end" and "日本": multi-byte stop strings split across deltas */
    const char *stops[] = {"\xE2\x86\x92"
                           "end",
                           "\xE6\x97\xA5\xE6\x9C\xAC"};
    const char *d1[] = {"\xE4\xBE\xA1\xE6\xA0\xBC\xE2\x86\x92"
                        "en",
                        "d!", NULL};                                       /* "価格→en", "d!" */
    const char *d2[] = {"\xE6\x97\xA5", "\xE6\x9C\xAC\xE8\xAA\x9E", NULL}; /* "日", "本語" */
    const char *d3[] = {"\xE6\x97\xA5", "\xE6\x9B\x9C", NULL};             /* "日", "曜" */
    pgd_buf out = PGD_BUF_INIT, steps = PGD_BUF_INIT;
    CHECK_EQ_INT(run(stops, 2, d1, &out, &steps), 0);
    CHECK_EQ_STR(out.data, "\xE4\xBE\xA1\xE6\xA0\xBC");
    CHECK_EQ_STR(steps.data, "\xE4\xBE\xA1\xE6\xA0\xBC||");
    pgd_buf_reset(&out);
    pgd_buf_reset(&steps);
    CHECK_EQ_INT(run(stops, 2, d2, &out, &steps), 1);
    CHECK_EQ_INT(out.len, 0);
    pgd_buf_reset(&out);
    pgd_buf_reset(&steps);
    CHECK_EQ_INT(run(stops, 2, d3, &out, &steps), -1);
    CHECK_EQ_STR(steps.data, "|\xE6\x97\xA5\xE6\x9B\x9C|"); /* "日" held, then released */
    pgd_buf_reset(&out);
    /* "é!" shares its lead byte with "è": held then released whole */
    const char *s2[] = {"\xC3\xA9!"};
    const char *d4[] = {"caf\xC3\xA9", "?", "\xC3\xA8", "\xC3\xA9", "!", NULL};
    CHECK_EQ_INT(run(s2, 1, d4, &out, NULL), 0);
    CHECK_EQ_STR(out.data, "caf\xC3\xA9?\xC3\xA8");
    CHECK(valid_utf8(out.data, out.len));
    pgd_buf_free(&out);
    pgd_buf_free(&steps);
}

static void test_flush_and_done(void) {
    const char *stops[] = {"END"};
    pgd_stop_matcher m;
    REQUIRE(init(&m, stops, 1, false) == 0);
    pgd_buf out = PGD_BUF_INIT;
    int mi;
    CHECK(pgd_stop_feed(&m, "abcE", 4, &out, &mi) == 0 && mi == -1);
    CHECK_EQ_INT(pgd_stop_held(&m), 1);
    CHECK(pgd_stop_feed(&m, "N", 1, &out, &mi) == 0 && mi == -1);
    CHECK_EQ_INT(pgd_stop_held(&m), 2);
    CHECK(pgd_stop_flush(&m, &out) == 0);
    CHECK_EQ_STR(out.data, "abcEN");
    CHECK_EQ_INT(pgd_stop_held(&m), 0);
    CHECK(pgd_stop_feed(&m, "D more", 6, &out, &mi) == 0 && mi == -1); /* done: ignored */
    CHECK(pgd_stop_flush(&m, &out) == 0);
    CHECK_EQ_STR(out.data, "abcEN");
    pgd_stop_free(&m);

    /* after a match, flush adds nothing and feeds are ignored */
    REQUIRE(init(&m, stops, 1, false) == 0);
    pgd_buf_reset(&out);
    CHECK(pgd_stop_feed(&m, "xENDy", 5, &out, &mi) == 0 && mi == 0);
    CHECK(m.matched == 0 && m.done);
    CHECK(pgd_stop_feed(&m, "z", 1, &out, &mi) == 0 && mi == -1);
    CHECK(pgd_stop_flush(&m, &out) == 0);
    CHECK_EQ_STR(out.data, "x");
    pgd_stop_free(&m);

    /* include_stop keeps the stop string */
    REQUIRE(init(&m, stops, 1, true) == 0);
    pgd_buf_reset(&out);
    CHECK(pgd_stop_feed(&m, "xE", 2, &out, &mi) == 0 && mi == -1);
    CHECK(pgd_stop_feed(&m, "NDy", 3, &out, &mi) == 0 && mi == 0);
    CHECK_EQ_STR(out.data, "xEND");
    pgd_stop_free(&m);

    /* no stop strings: everything passes through at once */
    REQUIRE(pgd_stop_init(&m, NULL, 0, false) == 0);
    pgd_buf_reset(&out);
    CHECK(pgd_stop_feed(&m, "ab", 2, &out, &mi) == 0 && mi == -1);
    CHECK_EQ_STR(out.data, "ab");
    CHECK_EQ_INT(pgd_stop_held(&m), 0);
    pgd_stop_free(&m);
    pgd_buf_free(&out);
}

static void test_init_errors(void) {
    pgd_stop_matcher m;
    const char *empty[] = {"ok", ""};
    CHECK_EQ_INT(init(&m, empty, 2, false), PGD_EINVAL);
    const char *many[PGD_STOP_MAX_STRINGS + 1];
    for (int i = 0; i <= PGD_STOP_MAX_STRINGS; i++) many[i] = "x";
    CHECK_EQ_INT(init(&m, many, PGD_STOP_MAX_STRINGS + 1, false), PGD_EINVAL);
    CHECK_EQ_INT(init(&m, many, PGD_STOP_MAX_STRINGS, false), 0);
    pgd_stop_free(&m);
    char *big = malloc(PGD_STOP_MAX_LEN + 2);
    memset(big, 'a', PGD_STOP_MAX_LEN + 1);
    big[PGD_STOP_MAX_LEN + 1] = '\0';
    const char *longs[] = {big};
    CHECK_EQ_INT(init(&m, longs, 1, false), PGD_EINVAL);
    big[PGD_STOP_MAX_LEN] = '\0';
    CHECK_EQ_INT(init(&m, longs, 1, false), 0);
    pgd_stop_free(&m);
    free(big);
}

/* random texts over a small alphabet cut into random deltas, against the brute-force
 * definitions, checking the held-back tail after every delta */
static void test_random_against_reference(void) {
    static const char *const sets[][4] = {
        {"abc", "bca", "aab", "cc"}, {"aaab", "ab", "ba", "cab"}, {"abab", "bb", "acca", "c"}};
    uint64_t rng = 88172645463325252ull;
    int runs = 0;
    for (int set = 0; set < 3; set++) {
        const char *const *stops = sets[set];
        for (int t = 0; t < 3000; t++) {
            char text[40];
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t len = 1 + rng % 39;
            for (size_t i = 0; i < len; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                text[i] = (char)('a' + rng % 3);
            }
            size_t start = 0;
            int want = ref_match(text, len, stops, 4, &start);
            pgd_stop_matcher m;
            REQUIRE(init(&m, stops, 4, false) == 0);
            pgd_buf out = PGD_BUF_INIT;
            int got = -1;
            size_t fed = 0;
            while (fed < len && got < 0) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                size_t k = 1 + rng % 5;
                if (k > len - fed) k = len - fed;
                REQUIRE(pgd_stop_feed(&m, text + fed, k, &out, &got) == 0);
                fed += k;
                if (got < 0) {
                    /* nothing matched yet: held = reference tail, emitted + held = fed */
                    size_t held = ref_held(text, fed, stops, 4);
                    CHECK_EQ_INT(pgd_stop_held(&m), held);
                    CHECK_EQ_INT(out.len, fed - held);
                }
                /* never emitted beyond where the final output ends */
                if (want >= 0) CHECK(out.len <= start);
                CHECK(out.len == 0 || memcmp(out.data, text, out.len) == 0);
            }
            if (got < 0) pgd_stop_flush(&m, &out);
            CHECK_EQ_INT(got, want);
            CHECK_EQ_INT(out.len, want >= 0 ? start : len);
            CHECK(out.len == 0 || memcmp(out.data, text, out.len) == 0);
            pgd_buf_free(&out);
            pgd_stop_free(&m);
            runs++;
        }
    }
    CHECK_EQ_INT(runs, 9000);
}

static void test_finish(void) {
    pgd_finish_rule r;
    int32_t eos[4] = {128009, 2, 128001, 2};
    REQUIRE(pgd_finish_rule_init(&r, eos, 4, false, 5, 10) == 0);
    CHECK_EQ_INT(r.n_eos, 3);
    CHECK(pgd_finish_is_eos(&r, 2) && pgd_finish_is_eos(&r, 128001) &&
          pgd_finish_is_eos(&r, 128009));
    CHECK(!pgd_finish_is_eos(&r, 3) && !pgd_finish_is_eos(&r, 0) && !pgd_finish_is_eos(&r, 128002));
    CHECK_EQ_INT(pgd_finish_check(&r, 7, 3, 1), PGD_FINISH_NONE);
    CHECK_EQ_INT(pgd_finish_check(&r, 128009, 3, 1), PGD_FINISH_STOP);
    CHECK_EQ_INT(pgd_finish_check(&r, 7, 3, 4), PGD_FINISH_NONE);
    CHECK_EQ_INT(pgd_finish_check(&r, 7, 3, 5), PGD_FINISH_LENGTH); /* max_tokens */
    CHECK_EQ_INT(pgd_finish_check(&r, 2, 3, 5), PGD_FINISH_STOP);   /* EOS wins on the last */
    CHECK_EQ_INT(pgd_finish_check(&r, 7, 8, 1), PGD_FINISH_NONE);
    CHECK_EQ_INT(pgd_finish_check(&r, 7, 8, 2), PGD_FINISH_LENGTH); /* context: 8 + 2 = 10 */
    CHECK_EQ_STR(pgd_finish_str(PGD_FINISH_STOP), "stop");
    CHECK_EQ_STR(pgd_finish_str(PGD_FINISH_LENGTH), "length");
    CHECK(pgd_finish_str(PGD_FINISH_NONE) == NULL);

    /* ignore_eos; no limits */
    REQUIRE(pgd_finish_rule_init(&r, eos, 4, true, 0, 0) == 0);
    CHECK_EQ_INT(pgd_finish_check(&r, 2, 100000, 100000), PGD_FINISH_NONE);
    REQUIRE(pgd_finish_rule_init(&r, NULL, 0, false, 0, 4096) == 0);
    CHECK_EQ_INT(pgd_finish_check(&r, 0, 4000, 95), PGD_FINISH_NONE);
    CHECK_EQ_INT(pgd_finish_check(&r, 0, 4000, 96), PGD_FINISH_LENGTH);

    /* bad end ids */
    int32_t neg = -1;
    CHECK_EQ_INT(pgd_finish_rule_init(&r, &neg, 1, false, 0, 0), PGD_EINVAL);
    int32_t lots[PGD_FINISH_MAX_EOS + 1];
    for (int i = 0; i <= PGD_FINISH_MAX_EOS; i++) lots[i] = 1000 - i;
    CHECK_EQ_INT(pgd_finish_rule_init(&r, lots, PGD_FINISH_MAX_EOS + 1, false, 0, 0), PGD_EINVAL);
    REQUIRE(pgd_finish_rule_init(&r, lots, PGD_FINISH_MAX_EOS, false, 0, 0) == 0);
    for (int i = 0; i < PGD_FINISH_MAX_EOS; i++) CHECK(pgd_finish_is_eos(&r, lots[i]));
    CHECK(!pgd_finish_is_eos(&r, lots[PGD_FINISH_MAX_EOS]));
}

int main(void) {
    RUN(test_spanning_deltas);
    RUN(test_prefix_released);
    RUN(test_overlapping_prefixes);
    RUN(test_stop_at_start);
    RUN(test_utf8);
    RUN(test_flush_and_done);
    RUN(test_init_errors);
    RUN(test_random_against_reference);
    RUN(test_finish);
    return test_summary();
}
