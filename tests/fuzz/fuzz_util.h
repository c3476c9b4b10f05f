/*
 * tests/fuzz/fuzz_util.h — what the libFuzzer targets share: FUZZ_CHECK (abort with file:line,
 * which libFuzzer reports as a crash with the input saved), a byte reader over the fuzz input,
 * a reference UTF-8 repair (one U+FFFD per maximal invalid subpart, as Python's
 * errors="replace"), and synthetic tokenizers built in memory, so no target needs a model file:
 *
 *   byte-level BPE ("gpt2")   the 256 byte tokens in GPT-2's byte-unicode alphabet, merges
 *                             spelled out from a word list (each word's characters merged left
 *                             to right), control tokens <|im_start|> <|im_end|> <|endoftext|>,
 *                             a user-defined <tool>, a normal token that is a prefix of the
 *                             control tokens, an unused token; built with any pre-tokenizer
 *   SentencePiece ("llama")   <unk> <s> </s>, optionally the 256 <0xXX> byte tokens, scored
 *                             pieces with U+2581, a control and a user-defined token
 *
 * Header-only (static functions): each target is one translation unit.
 */
#ifndef PGD_TESTS_FUZZ_UTIL_H
#define PGD_TESTS_FUZZ_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "engine/text/tokenizer.h"

#define FUZZ_CHECK(c)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #c);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The bytes of b from offset off (b->data is NULL until the first append). */
static inline const char *fuzz_at(const pgd_buf *b, size_t off) {
    return b->data ? b->data + off : "";
}

/* ---- reading the input ------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} fuzz_in;

static inline uint8_t fuzz_u8(fuzz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fuzz_u16(fuzz_in *in) {
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

/* Up to max bytes: the next byte gives the length (mod max + 1), clipped to what is left. */
static inline fuzz_in fuzz_take(fuzz_in *in, size_t max) {
    size_t want = fuzz_u8(in) % (max + 1);
    if (want > in->n) want = in->n;
    fuzz_in out = {in->p, want};
    in->p += want;
    in->n -= want;
    return out;
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 character at s[0..n) (Unicode table 3-7), or 0 with *bad set
 * to the length of the maximal subpart (>= 1) to replace with one U+FFFD. */
static inline size_t fuzz_utf8_char(const uint8_t *s, size_t n, size_t *bad) {
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *bad = 1;
        return 0;
    }
    size_t k = 1;
    for (; k < need && k < n; k++) {
        uint8_t b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (k == need) return need;
    *bad = k;
    return 0;
}

static inline bool fuzz_utf8_valid(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t bad = 0, l = fuzz_utf8_char(u + i, n - i, &bad);
        if (!l) return false;
        i += l;
    }
    return true;
}

/* Appends s[0..n) to out with every maximal invalid subpart replaced by U+FFFD. */
static inline void fuzz_utf8_repair(const char *s, size_t n, pgd_buf *out) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t bad = 0, l = fuzz_utf8_char(u + i, n - i, &bad);
        if (l) {
            FUZZ_CHECK(pgd_buf_append(out, s + i, l) == 0);
            i += l;
        } else {
            FUZZ_CHECK(pgd_buf_append(out, "\xEF\xBF\xBD", 3) == 0);
            i += bad;
        }
    }
}

/* ---- synthetic tokenizers ---------------------------------------------------------------- */

static inline size_t fuzz_put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

#define FUZZ_VOCAB_MAX 1024

/* A vocabulary under construction: texts (owned), types, scores; merges for BPE. */
typedef struct {
    char *tok[FUZZ_VOCAB_MAX];
    int32_t type[FUZZ_VOCAB_MAX];
    float score[FUZZ_VOCAB_MAX];
    size_t n;
    char *merge[FUZZ_VOCAB_MAX];
    size_t n_merges;
} fuzz_vocab;

static inline int32_t fuzz_vocab_find(const fuzz_vocab *v, const char *t) {
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->tok[i], t)) return (int32_t)i;
    return -1;
}

static inline int32_t fuzz_vocab_add(fuzz_vocab *v, const char *t, int32_t type, float score) {
    int32_t id = fuzz_vocab_find(v, t);
    if (id >= 0) return id;
    FUZZ_CHECK(v->n < FUZZ_VOCAB_MAX);
    v->tok[v->n] = strdup(t);
    FUZZ_CHECK(v->tok[v->n]);
    v->type[v->n] = type;
    v->score[v->n] = score;
    return (int32_t)v->n++;
}

static inline void fuzz_vocab_free(fuzz_vocab *v) {
    for (size_t i = 0; i < v->n; i++) free(v->tok[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merge[i]);
    memset(v, 0, sizeof *v);
}

/* GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to 256 + n. */
static inline void fuzz_b2u(uint32_t b2u[256]) {
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        b2u[b] = keep ? (uint32_t)b : 256 + n++;
    }
}

/* The byte-unicode spelling of bytes s[0..n) into out (NUL-terminated; out holds 2n + 1). */
static inline void fuzz_b2u_str(const uint32_t b2u[256], const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += fuzz_put_utf8(b2u[(uint8_t)s[i]], out + o);
    out[o] = '\0';
}

/* Words whose characters become merges (left to right): spaces, English, digits, newlines,
 * contractions, two- and three-byte UTF-8, and the pieces of a chat template's markup. */
static const char *const fuzz_bpe_words[] = {
    " the", "the",  " a",   "ing",  " hello", "hello",  " world",       "ll",       "12",
    "123",  "  ",   "    ", "\n\n", " \n",    "'s",     "'t",           "\xC3\xA9", "caf\xC3\xA9",
    "中",   "中文", "<|",   "|>",   "im",     "_start", "assistant",    "user",     "system",
    " ab",  "aaaa", "\t",   ".\n",  ",",      "?!",     "\xE2\x96\x81",
};

static inline int fuzz_bpe_tokenizer(const char *pre, pgd_tokenizer **out) {
    fuzz_vocab *v = calloc(1, sizeof *v);
    FUZZ_CHECK(v);
    uint32_t b2u[256];
    fuzz_b2u(b2u);
    char buf[64];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        fuzz_b2u_str(b2u, &c, 1, buf);
        fuzz_vocab_add(v, buf, PGD_TOKEN_NORMAL, 0);
    }
    for (size_t w = 0; w < PGD_ARRAY_LEN(fuzz_bpe_words); w++) {
        const char *word = fuzz_bpe_words[w];
        size_t n = strlen(word);
        char left[64], right[16], merged[64], m[128];
        fuzz_b2u_str(b2u, word, 1, left);
        for (size_t i = 1; i < n; i++) {
            fuzz_b2u_str(b2u, word + i, 1, right);
            fuzz_b2u_str(b2u, word, i + 1, merged);
            if (fuzz_vocab_find(v, merged) < 0) {
                snprintf(m, sizeof m, "%s %s", left, right);
                FUZZ_CHECK(v->n_merges < FUZZ_VOCAB_MAX);
                v->merge[v->n_merges++] = strdup(m);
                fuzz_vocab_add(v, merged, PGD_TOKEN_NORMAL, 0);
            }
            memcpy(left, merged, strlen(merged) + 1);
        }
    }
    /* a merge naming no token, to be ignored */
    v->merge[v->n_merges++] = strdup("x y");
    int32_t im_start = fuzz_vocab_add(v, "<|im_start|>", PGD_TOKEN_CONTROL, 0);
    int32_t im_end = fuzz_vocab_add(v, "<|im_end|>", PGD_TOKEN_CONTROL, 0);
    int32_t eot = fuzz_vocab_add(v, "<|endoftext|>", PGD_TOKEN_CONTROL, 0);
    fuzz_vocab_add(v, "<tool>", PGD_TOKEN_USER_DEFINED, 0);
    fuzz_vocab_add(v, "<|im", PGD_TOKEN_NORMAL, 0);
    fuzz_vocab_add(v, "<unused0>", PGD_TOKEN_UNUSED, 0);
    pgd_tokenizer_desc d;
    pgd_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.pre = pre;
    d.n_vocab = v->n;
    d.tokens = (const char *const *)v->tok;
    d.types = v->type;
    d.merges = (const char *const *)v->merge;
    d.n_merges = v->n_merges;
    d.bos = im_start;
    d.eos = im_end;
    d.eot = eot;
    int rc = pgd_tokenizer_create(&d, out);
    fuzz_vocab_free(v);
    free(v);
    return rc;
}

/* SentencePiece: byte_tokens adds <0x00>..<0xFF>; space_prefix is add_space_prefix (1/0). */
static inline int fuzz_spm_tokenizer(bool byte_tokens, int space_prefix, pgd_tokenizer **out) {
    fuzz_vocab *v = calloc(1, sizeof *v);
    FUZZ_CHECK(v);
    int32_t unk = fuzz_vocab_add(v, "<unk>", PGD_TOKEN_UNKNOWN, 0);
    int32_t bos = fuzz_vocab_add(v, "<s>", PGD_TOKEN_CONTROL, 0);
    int32_t eos = fuzz_vocab_add(v, "</s>", PGD_TOKEN_CONTROL, 0);
    char buf[16];
    if (byte_tokens)
        for (int b = 0; b < 256; b++) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            fuzz_vocab_add(v, buf, PGD_TOKEN_BYTE, 0);
        }
    static const struct {
        const char *t;
        float s;
    } pieces[] = {
        {"▁", -10},     {"h", -10},      {"e", -10},  {"l", -10}, {"o", -10},   {"i", -10},
        {"t", -10},     {"a", -10},      {"hi", -8},  {"he", -3}, {"ll", -2},   {"lo", -1},
        {"hell", -4},   {"▁hell", -6},   {"▁hi", -5}, {"▁▁", -7}, {"▁t", -3},   {"▁the", -2},
        {"th", -4},     {"the", -3},     {"中", -9},  {"é", -9},  {"▁▁▁▁", -6}, {"\n", -9},
        {"<", -10},     {">", -10},      {"[", -10},  {"]", -10}, {"/", -10},   {"INST", -5},
        {"[INST]", -4}, {"[/INST]", -4},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(pieces); i++)
        fuzz_vocab_add(v, pieces[i].t, PGD_TOKEN_NORMAL, pieces[i].s);
    fuzz_vocab_add(v, "ab", PGD_TOKEN_CONTROL, 0);
    fuzz_vocab_add(v, "<tool>", PGD_TOKEN_USER_DEFINED, 0);
    fuzz_vocab_add(v, "<|im_end|>", PGD_TOKEN_CONTROL, 0);
    pgd_tokenizer_desc d;
    pgd_tokenizer_desc_init(&d);
    d.model = "llama";
    d.n_vocab = v->n;
    d.tokens = (const char *const *)v->tok;
    d.types = v->type;
    d.scores = v->score;
    d.bos = bos;
    d.eos = eos;
    d.unk = unk;
    d.add_space_prefix = space_prefix;
    int rc = pgd_tokenizer_create(&d, out);
    fuzz_vocab_free(v);
    free(v);
    return rc;
}

#endif
