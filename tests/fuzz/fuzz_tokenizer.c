/*
 * tests/fuzz/fuzz_tokenizer.c — libFuzzer target: tokenizer encode and decode on arbitrary bytes.
 *
 * Tokenizers (fuzz_util.h, built once at start-up, no model file): byte-level BPE with each
 * pre-tokenizer (GPT-2, Llama-3, Qwen2, SmolLM), SentencePiece with and without byte tokens and
 * without the space prefix. With PAGODA_FUZZ_MODEL=FILE.gguf the model's own tokenizer is added
 * (optional; CI runs without it).
 *
 * Input: byte 0 picks the tokenizer, byte 1 the mode:
 *   bit 7 clear: encode. Bits 0-1: special spans (none / the whole text / up to 4 spans read
 *     from the input / the first half); the rest of the input is the text. Checks: every id is
 *     in the vocabulary; without spans, a lossless tokenizer (byte-level BPE, SentencePiece with
 *     byte tokens on text without U+2581) decodes back to the text; with spans, decoding with
 *     special text on gives the text back for BPE; the streaming detokenizer gives the reference
 *     UTF-8 repair of pgd_detokenize's bytes.
 *   bit 7 set: decode. The rest is 16-bit ids modulo n_vocab + 2 (so some are out of range).
 *     pgd_detokenize refuses a list with a bad id and leaves its output alone; the streaming
 *     detokenizer refuses the bad ids one by one, unchanged, and emits valid UTF-8 equal to the
 *     reference repair of pgd_detokenize's bytes for the good ids; every piece is within its
 *     token's text length.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/model/gguf.h"
#include "engine/text/tokenizer.h"
#include "fuzz_util.h"

#define MAX_TK 8

static pgd_tokenizer *g_tk[MAX_TK];
static bool g_lossless[MAX_TK];
static int g_n_tk;

static void add(pgd_tokenizer *tk, bool lossless) {
    FUZZ_CHECK(tk != NULL && g_n_tk < MAX_TK);
    g_lossless[g_n_tk] = lossless;
    g_tk[g_n_tk++] = tk;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const char *const pres[] = {"gpt2", "llama3", "qwen2", "smollm"};
    for (size_t i = 0; i < PGD_ARRAY_LEN(pres); i++) {
        pgd_tokenizer *tk = NULL;
        FUZZ_CHECK(fuzz_bpe_tokenizer(pres[i], &tk) == 0);
        add(tk, true);
    }
    pgd_tokenizer *tk = NULL;
    FUZZ_CHECK(fuzz_spm_tokenizer(true, 1, &tk) == 0);
    add(tk, true);
    FUZZ_CHECK(fuzz_spm_tokenizer(false, 1, &tk) == 0);
    add(tk, false);
    FUZZ_CHECK(fuzz_spm_tokenizer(true, 0, &tk) == 0);
    add(tk, true);
    const char *model = getenv("PAGODA_FUZZ_MODEL");
    if (model && *model) {
        pgd_gguf *g = NULL;
        if (pgd_gguf_open(model, &g) || pgd_tokenizer_load(g, &tk)) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", model, pgd_error_detail());
            abort();
        }
        pgd_gguf_close(g);
        add(tk, pgd_tokenizer_kind_of(tk) == PGD_TOKENIZER_BPE);
        fprintf(stderr, "fuzz_tokenizer: with the tokenizer of %s\n", model);
    }
    return 0;
}

/* The streaming detokenizer over ids (the bad ones refused) against the reference repair of
 * pgd_detokenize over the good ones. */
static void check_stream(const pgd_tokenizer *tk, const int32_t *ids, size_t n, bool special) {
    size_t nv = pgd_tokenizer_n_vocab(tk);
    int32_t *good = malloc((n ? n : 1) * sizeof *good);
    FUZZ_CHECK(good);
    size_t ng = 0;
    pgd_detok d;
    pgd_detok_init(&d, tk, special);
    pgd_buf stream = PGD_BUF_INIT;
    for (size_t i = 0; i < n; i++) {
        bool ok = ids[i] >= 0 && (size_t)ids[i] < nv;
        pgd_detok before = d;
        size_t len0 = stream.len;
        int rc = pgd_detok_push(&d, ids[i], &stream);
        if (!ok) {
            FUZZ_CHECK(rc == PGD_EINVAL && stream.len == len0);
            FUZZ_CHECK(!memcmp(&before, &d, sizeof d));
            continue;
        }
        FUZZ_CHECK(rc == 0);
        FUZZ_CHECK(pgd_detok_pending(&d) <= 3);
        /* what was emitted so far is whole characters */
        FUZZ_CHECK(fuzz_utf8_valid(fuzz_at(&stream, len0), stream.len - len0));
        good[ng++] = ids[i];
    }
    FUZZ_CHECK(pgd_detok_flush(&d, &stream) == 0);
    FUZZ_CHECK(pgd_detok_pending(&d) == 0);
    pgd_buf raw = PGD_BUF_INIT, want = PGD_BUF_INIT;
    FUZZ_CHECK(pgd_detokenize(tk, good, ng, special, &raw) == 0);
    fuzz_utf8_repair(raw.data, raw.len, &want);
    if (stream.len != want.len || (want.len && memcmp(stream.data, want.data, want.len))) {
        fprintf(stderr, "stream detok: %zu bytes, reference %zu bytes\n", stream.len, want.len);
        abort();
    }
    pgd_buf_free(&raw);
    pgd_buf_free(&want);
    pgd_buf_free(&stream);
    free(good);
}

static void fuzz_decode(const pgd_tokenizer *tk, fuzz_in *in, bool special) {
    size_t nv = pgd_tokenizer_n_vocab(tk);
    size_t n = in->n / 2;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    FUZZ_CHECK(ids);
    bool any_bad = false;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = fuzz_u16(in);
        if (nv > 60000) x |= (uint32_t)fuzz_u8(in) << 16; /* reach a large vocabulary's tail */
        ids[i] = (int32_t)(x % (nv + 2));
        if ((size_t)ids[i] >= nv) any_bad = true;
    }
    pgd_buf out = PGD_BUF_INIT;
    FUZZ_CHECK(pgd_buf_append(&out, "x", 1) == 0);
    int rc = pgd_detokenize(tk, ids, n, special, &out);
    if (any_bad) {
        FUZZ_CHECK(rc == PGD_EINVAL && out.len == 1);
    } else {
        FUZZ_CHECK(rc == 0);
    }
    for (size_t i = 0; i < n && i < 64; i++) {
        pgd_buf p = PGD_BUF_INIT;
        rc = pgd_token_piece(tk, ids[i], special, &p);
        if ((size_t)ids[i] >= nv) {
            FUZZ_CHECK(rc == PGD_EINVAL);
        } else {
            FUZZ_CHECK(rc == 0);
            FUZZ_CHECK(p.len <= pgd_tokenizer_token_text(tk, ids[i]).len);
        }
        pgd_buf_free(&p);
    }
    check_stream(tk, ids, n, special);
    pgd_buf_free(&out);
    free(ids);
}

static void fuzz_encode(const pgd_tokenizer *tk, bool lossless, fuzz_in *in, int span_mode) {
    pgd_span spans[4];
    size_t n_spans = 0;
    uint8_t raw_spans[8];
    if (span_mode == 2) {
        n_spans = fuzz_u8(in) % 5;
        for (size_t i = 0; i < 2 * n_spans; i++) raw_spans[i] = fuzz_u8(in);
    }
    size_t len = in->n;
    char *text = malloc(len ? len : 1); /* exact size: ASan sees any over-read */
    FUZZ_CHECK(text);
    if (len) memcpy(text, in->p, len);
    if (span_mode == 1) {
        spans[0] = (pgd_span){0, len};
        n_spans = 1;
    } else if (span_mode == 2) {
        for (size_t i = 0; i < n_spans; i++) {
            size_t a = len ? raw_spans[2 * i] % (len + 1) : 0;
            size_t b = len ? raw_spans[2 * i + 1] % (len + 1) : 0;
            spans[i] = a <= b ? (pgd_span){a, b} : (pgd_span){b, a};
        }
    } else if (span_mode == 3) {
        spans[0] = (pgd_span){0, len / 2};
        n_spans = 1;
    }
    pgd_tokens t = PGD_TOKENS_INIT;
    FUZZ_CHECK(pgd_tokens_push(&t, 7) == 0); /* tokenize appends: this one stays */
    int rc = pgd_tokenize(tk, text, len, n_spans ? spans : NULL, n_spans, &t);
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(t.n >= 1 && t.ids[0] == 7);
    size_t nv = pgd_tokenizer_n_vocab(tk);
    for (size_t i = 1; i < t.n; i++) FUZZ_CHECK(t.ids[i] >= 0 && (size_t)t.ids[i] < nv);
    if (len) FUZZ_CHECK(t.n > 1);

    bool spm = pgd_tokenizer_kind_of(tk) == PGD_TOKENIZER_SPM;
    bool has_meta = memmem(text, len, "\xE2\x96\x81", 3) != NULL; /* U+2581 decodes to ' ' */
    bool check_roundtrip = lossless && !(spm && has_meta) && (n_spans == 0 || !spm);
    if (check_roundtrip) {
        pgd_buf back = PGD_BUF_INIT;
        FUZZ_CHECK(pgd_detokenize(tk, t.ids + 1, t.n - 1, n_spans > 0, &back) == 0);
        if (back.len != len || (len && memcmp(back.data, text, len))) {
            fprintf(stderr, "round trip: %zu bytes in, %zu bytes back (%zu ids)\n", len, back.len,
                    t.n - 1);
            abort();
        }
        pgd_buf_free(&back);
    }
    check_stream(tk, t.ids + 1, t.n - 1, n_spans > 0);
    pgd_tokens_free(&t);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    fuzz_in in = {data, size};
    int which = fuzz_u8(&in) % g_n_tk;
    uint8_t mode = fuzz_u8(&in);
    pgd_error_clear();
    if (mode & 0x80)
        fuzz_decode(g_tk[which], &in, (mode & 0x08) != 0);
    else
        fuzz_encode(g_tk[which], g_lossless[which], &in, mode & 3);
    return 0;
}
