/*
 * tests/fuzz/fuzz_stop_detok.c — libFuzzer target: the incremental detokenizer feeding the
 * stop-string matcher, token by token, as a sequence does (engine/seq.c): push a token, feed its
 * piece to the matcher, stop at a match; at the end flush the detokenizer, feed, flush the
 * matcher.
 *
 * Input: byte 0: bit 0 include_stop, bit 1 the tokenizer (synthetic byte-level BPE or
 * SentencePiece with byte tokens, fuzz_util.h); byte 1: the number of stop strings (0..16,
 * mostly small), each a length byte and up to 12 bytes (an empty one must be refused); then the
 * tokens: a byte below 0xF0 is that byte's token, a byte from 0xF0 takes the next byte as an
 * index into the rest of the vocabulary (merged, control and user-defined tokens).
 *
 * Checks against a reference computed from the whole text at once (the reference UTF-8 repair of
 * pgd_detokenize's bytes): what is emitted is the text up to the first stop string to complete
 * (the longest among those completing at the same byte), plus that string with include_stop, or
 * the whole text when none matches; the matched index names a string equal to the match. After
 * every feed: the held text is shorter than the longest stop string, emitted + held is a prefix
 * of the text fed so far, and every emitted delta is valid UTF-8 when the stop strings are.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/stop.h"
#include "engine/text/tokenizer.h"
#include "fuzz_util.h"

static pgd_tokenizer *g_tk[2];
static int32_t g_byte0[2]; /* id of byte 0's token */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    FUZZ_CHECK(fuzz_bpe_tokenizer("gpt2", &g_tk[0]) == 0);
    FUZZ_CHECK(fuzz_spm_tokenizer(true, 1, &g_tk[1]) == 0);
    g_byte0[0] = 0;
    g_byte0[1] = pgd_tokenizer_find(g_tk[1], "<0x00>", 6);
    FUZZ_CHECK(g_byte0[1] >= 0);
    return 0;
}

/* The expected output over the whole text: *matched_len is the length of the matching stop
 * string (0 when none matches); returns the number of bytes emitted before it. */
static size_t reference(const char *t, size_t n, const pgd_str *stops, int n_stop,
                        size_t *matched_len, int *which) {
    *matched_len = 0;
    *which = -1;
    for (size_t e = 1; e <= n; e++) {
        size_t best = 0;
        for (int i = 0; i < n_stop; i++) {
            size_t l = stops[i].len;
            if (l <= e && l > best && !memcmp(t + e - l, stops[i].ptr, l)) {
                best = l;
                *which = i;
            }
        }
        if (best) {
            *matched_len = best;
            return e - best;
        }
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    fuzz_in in = {data, size};
    uint8_t flags = fuzz_u8(&in);
    bool include = flags & 1;
    int tki = (flags >> 1) & 1;
    const pgd_tokenizer *tk = g_tk[tki];
    uint8_t ns = fuzz_u8(&in);
    int n_stop = ns < 0xF0 ? ns % 5 : ns % 17;
    pgd_str stops[16];
    char *owned[16];
    bool stops_utf8 = true, any_empty = false;
    size_t longest = 0;
    for (int i = 0; i < n_stop; i++) {
        fuzz_in s = fuzz_take(&in, 12);
        owned[i] = malloc(s.n ? s.n : 1);
        FUZZ_CHECK(owned[i]);
        if (s.n) memcpy(owned[i], s.p, s.n);
        stops[i] = (pgd_str){owned[i], s.n};
        if (!s.n) any_empty = true;
        if (!fuzz_utf8_valid(owned[i], s.n)) stops_utf8 = false;
        if (s.n > longest) longest = s.n;
    }
    pgd_stop_matcher m;
    pgd_error_clear();
    int rc = pgd_stop_init(&m, stops, n_stop, include);
    if (any_empty) {
        FUZZ_CHECK(rc == PGD_EINVAL);
        goto out_stops;
    }
    FUZZ_CHECK(rc == 0);

    /* tokens */
    size_t nv = pgd_tokenizer_n_vocab(tk);
    size_t cap = in.n ? in.n : 1, n_ids = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    FUZZ_CHECK(ids);
    while (in.n) {
        uint8_t b = fuzz_u8(&in);
        if (b < 0xF0)
            ids[n_ids++] = g_byte0[tki] + b;
        else
            ids[n_ids++] = (int32_t)(fuzz_u8(&in) % nv);
    }

    pgd_detok d;
    pgd_detok_init(&d, tk, false);
    pgd_buf piece = PGD_BUF_INIT, emitted = PGD_BUF_INIT, fed = PGD_BUF_INIT;
    int matched = -1;
    size_t used = 0; /* tokens consumed */
    for (; used < n_ids && matched < 0; used++) {
        pgd_buf_reset(&piece);
        FUZZ_CHECK(pgd_detok_push(&d, ids[used], &piece) == 0);
        if (!piece.len) continue;
        FUZZ_CHECK(pgd_buf_append(&fed, piece.data, piece.len) == 0);
        size_t e0 = emitted.len;
        FUZZ_CHECK(pgd_stop_feed(&m, piece.data, piece.len, &emitted, &matched) == 0);
        if (stops_utf8) FUZZ_CHECK(fuzz_utf8_valid(fuzz_at(&emitted, e0), emitted.len - e0));
        if (matched < 0) {
            size_t held = pgd_stop_held(&m);
            FUZZ_CHECK(n_stop == 0 ? held == 0 : held < longest);
            FUZZ_CHECK(emitted.len + held == fed.len); /* nothing lost, nothing invented */
            FUZZ_CHECK(!emitted.len || !memcmp(emitted.data, fed.data, emitted.len));
        } else {
            FUZZ_CHECK(matched < n_stop);
        }
    }
    if (matched < 0) {
        pgd_buf_reset(&piece);
        FUZZ_CHECK(pgd_detok_flush(&d, &piece) == 0);
        if (piece.len) {
            FUZZ_CHECK(pgd_buf_append(&fed, piece.data, piece.len) == 0);
            FUZZ_CHECK(pgd_stop_feed(&m, piece.data, piece.len, &emitted, &matched) == 0);
        }
        if (matched < 0) FUZZ_CHECK(pgd_stop_flush(&m, &emitted) == 0);
    }
    /* done: further feeds emit nothing */
    size_t e1 = emitted.len;
    int again = -1;
    FUZZ_CHECK(pgd_stop_feed(&m, "abc", 3, &emitted, &again) == 0);
    FUZZ_CHECK(emitted.len == e1 && again == -1);

    /* the reference over the whole text */
    pgd_buf raw = PGD_BUF_INIT, text = PGD_BUF_INIT;
    FUZZ_CHECK(pgd_detokenize(tk, ids, n_ids, false, &raw) == 0);
    fuzz_utf8_repair(raw.data, raw.len, &text);
    size_t mlen = 0;
    int which = -1;
    size_t before = reference(text.data, text.len, stops, n_stop, &mlen, &which);
    size_t want_len = before + (include ? mlen : 0);
    if ((mlen == 0) != (matched < 0) || emitted.len != want_len ||
        (want_len && memcmp(emitted.data, text.data, want_len))) {
        fprintf(stderr, "stop: emitted %zu bytes (matched %d), reference %zu (+%zu, stop %d)\n",
                emitted.len, matched, before, mlen, which);
        abort();
    }
    if (matched >= 0)
        FUZZ_CHECK(stops[matched].len == mlen &&
                   !memcmp(stops[matched].ptr, text.data + before, mlen));
    /* the streamed text is the whole text's prefix (all of it without a match) */
    FUZZ_CHECK(fed.len <= text.len && (!fed.len || !memcmp(fed.data, text.data, fed.len)));
    if (matched < 0) FUZZ_CHECK(fed.len == text.len);

    pgd_buf_free(&raw);
    pgd_buf_free(&text);
    pgd_buf_free(&piece);
    pgd_buf_free(&emitted);
    pgd_buf_free(&fed);
    free(ids);
    pgd_stop_free(&m);
out_stops:
    for (int i = 0; i < n_stop; i++) free(owned[i]);
    return 0;
}
