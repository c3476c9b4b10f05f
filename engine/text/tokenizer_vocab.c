/*
 * engine/text/tokenizer_vocab.c — building and reading a pgd__vocab (tokenizer_vocab.h): the
 * token texts packed back to back, the open-addressing text -> id table (XXH3), and the GPT-2
 * byte-unicode alphabet.
 *
 * Invariants: see tokenizer_vocab.h. Threading: build once; reads share nothing writable.
 */
#include "engine/text/tokenizer_vocab.h"

#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include <xxhash.h>

#include "common/error.h"
#include "engine/text/tokenizer.h"

static uint64_t hash_bytes(const char *s, size_t len) {
    return XXH3_64bits(s, len);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

int32_t pgd__vocab_lookup(const pgd__vocab *v, const char *s, size_t len) {
    size_t i = (size_t)hash_bytes(s, len) & v->mask;
    for (;;) {
        int32_t id = v->slots[i];
        if (id < 0) return -1;
        size_t n;
        const char *t = pgd__vocab_text(v, id, &n);
        if (n == len && (len == 0 || memcmp(t, s, len) == 0)) return id;
        i = (i + 1) & v->mask;
    }
}

int pgd__vocab_build(pgd__vocab *v, size_t n, const pgd_str *tokens, const int32_t *types,
                     const float *scores) {
    v->n = n;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += tokens[i].len;
    if (total >= UINT32_MAX)
        return pgd_error_set(PGD_EFORMAT, "tokenizer: token texts too large (%llu bytes)",
                             (unsigned long long)total);
    v->text = malloc((size_t)total + 1);
    v->text_off = malloc((n + 1) * sizeof *v->text_off);
    v->types = malloc(n);
    v->scores = malloc(n * sizeof *v->scores);
    if (!v->text || !v->text_off || !v->types || !v->scores) return PGD_ENOMEM;
    uint32_t off = 0;
    for (size_t i = 0; i < n; i++) {
        v->text_off[i] = off;
        if (tokens[i].len) memcpy(v->text + off, tokens[i].ptr, tokens[i].len);
        off += (uint32_t)tokens[i].len;
        int32_t t = types ? types[i] : PGD_TOKEN_NORMAL;
        v->types[i] = (uint8_t)((t >= 0 && t <= PGD_TOKEN_BYTE) ? t : PGD_TOKEN_NORMAL);
        v->scores[i] = scores ? scores[i] : 0.0f;
    }
    v->text_off[n] = off;
    v->text[off] = '\0';

    size_t cap = pow2_at_least(2 * n);
    v->slots = malloc(cap * sizeof *v->slots);
    if (!v->slots) return PGD_ENOMEM;
    memset(v->slots, 0xff, cap * sizeof *v->slots);
    v->mask = cap - 1;
    for (size_t id = 0; id < n; id++) {
        size_t len;
        const char *s = pgd__vocab_text(v, (int32_t)id, &len);
        size_t i = (size_t)hash_bytes(s, len) & v->mask;
        for (;;) {
            int32_t cur = v->slots[i];
            if (cur < 0) {
                v->slots[i] = (int32_t)id;
                break;
            }
            size_t cl;
            const char *cs = pgd__vocab_text(v, cur, &cl);
            if (cl == len && (len == 0 || memcmp(cs, s, len) == 0)) {
                v->slots[i] = (int32_t)id; /* duplicate text: the last id wins */
                break;
            }
            i = (i + 1) & v->mask;
        }
    }
    return 0;
}

void pgd__vocab_free(pgd__vocab *v) {
    free(v->text);
    free(v->text_off);
    free(v->types);
    free(v->scores);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

/* ---------------------------------------------------------------------------------------- */
/* The byte-unicode alphabet: printable bytes map to themselves, the other 68 bytes to 256+k. */

static bool printable(uint32_t b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

/* The other bytes, in order: 0..32 -> 256..288, 127..160 -> 289..322, 173 -> 323. */
uint32_t pgd__vocab_byte_cp(uint8_t b) {
    if (printable(b)) return b;
    if (b <= 32) return 256u + b;
    if (b <= 160) return 256u + 33u + (b - 127u);
    return 256u + 67u; /* 173 */
}

int pgd__vocab_cp_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    uint32_t k = cp - 256;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(127 + (k - 33));
    if (k == 67) return 173;
    return -1;
}
