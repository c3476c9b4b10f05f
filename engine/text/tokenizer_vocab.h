/*
 * engine/text/tokenizer_vocab.h — the vocabulary every part of the tokenizer reads: token texts,
 * types and scores, the exact-text lookup, and the GPT-2 byte-unicode alphabet in which
 * byte-level vocabularies spell bytes.
 *
 * Owns: the arrays of a pgd__vocab (built by pgd__vocab_build, freed by pgd__vocab_free).
 * Invariants once built: text_off has n + 1 entries and types/scores n; every type is a
 * PGD_TOKEN_* value; the lookup table is at most half full and maps a text to the LAST id that
 * has it (as llama.cpp's token_to_id map does for duplicated texts). Nothing changes afterwards.
 *
 * Include: tokenizer.c (which embeds the pgd__vocab in pgd_tokenizer and builds it) and the
 * parts below it, tokenizer_bpe, tokenizer_spm and tokenizer_detok. It includes no other
 * tokenizer header, so nothing here can call upward.
 * Threading: build on one thread; afterwards any number of threads may read it at once.
 */
#ifndef PGD_ENGINE_TEXT_TOKENIZER_VOCAB_H
#define PGD_ENGINE_TEXT_TOKENIZER_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "common/text.h"

typedef struct {
    size_t n;           /* tokens */
    char *text;         /* token texts back to back: text + text_off[i], length text_off[i+1]-... */
    uint32_t *text_off; /* [n + 1] */
    uint8_t *types;     /* [n] PGD_TOKEN_* */
    float *scores;      /* [n] */
    int32_t *slots;     /* open addressing: token text -> id, -1 empty; [mask + 1] */
    size_t mask;
} pgd__vocab;

/* Copy n token texts, their types (NULL = all normal; out-of-range values become normal) and
 * scores (NULL = all 0) into v (zeroed beforehand) and build the lookup table. 0, PGD_EFORMAT
 * (texts of 4 GiB or more) or PGD_ENOMEM; on failure pgd__vocab_free(v) still frees what was
 * allocated. */
int pgd__vocab_build(pgd__vocab *v, size_t n, const pgd_str *tokens, const int32_t *types,
                     const float *scores);
void pgd__vocab_free(pgd__vocab *v);

/* The stored text of token id (< n) and its length. */
static inline const char *pgd__vocab_text(const pgd__vocab *v, int32_t id, size_t *len) {
    *len = v->text_off[id + 1] - v->text_off[id];
    return v->text + v->text_off[id];
}

/* The id whose text is exactly s[0..len), or -1. */
int32_t pgd__vocab_lookup(const pgd__vocab *v, const char *s, size_t len);

/* The GPT-2 byte-unicode alphabet: the code point that spells byte b in a byte-level
 * vocabulary, and back (-1 for a code point outside the alphabet). */
uint32_t pgd__vocab_byte_cp(uint8_t b);
int pgd__vocab_cp_byte(uint32_t cp);

#endif
