/*
 * engine/text/tokenizer_detok.h — token ids back to bytes: the piece table and the operations
 * behind pgd_token_piece, pgd_detokenize and the pgd_detok stream (tokenizer.h).
 *
 * Owns: the arrays of a pgd__detok_table (built once at load) and the UTF-8 state of a
 * pgd_detok (pend, n_pend, need, strip_leading_space). tokenizer.c embeds the table in
 * pgd_tokenizer and forwards the public calls here with the table and the vocabulary;
 * pgd_detok_flush and pgd_detok_pending, which need neither, are defined in tokenizer_detok.c
 * directly.
 * Invariants: off has n + 1 entries for a vocabulary of n tokens, and a piece is never longer
 * than its token's text; a pgd_detok holds at most 3 bytes, always a valid proper prefix of a
 * UTF-8 character.
 *
 * Include: tokenizer.c only. It includes the vocabulary, nothing that calls back into
 * tokenizer.c.
 * Threading: the table is immutable after load; a pgd_detok belongs to one thread.
 */
#ifndef PGD_ENGINE_TEXT_TOKENIZER_DETOK_H
#define PGD_ENGINE_TEXT_TOKENIZER_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_vocab.h"

typedef struct {
    char *piece;            /* decoded bytes of every token back to back */
    uint32_t *piece_off;    /* [n + 1] */
    bool strip_first_space; /* SPM with add_space_prefix: drop one leading space when decoding */
} pgd__detok_table;

/* Fill t (zeroed beforehand) from v's texts and types; spm selects SentencePiece spelling
 * (U+2581) over the byte-unicode alphabet. 0 or PGD_ENOMEM; on failure pgd__detok_free(t)
 * still frees what was allocated. */
int pgd__detok_build(pgd__detok_table *t, const pgd__vocab *v, bool spm, bool strip_first_space);
void pgd__detok_free(pgd__detok_table *t);

/* pgd_token_piece, pgd_detokenize, pgd_detok_init (all but d->tk) and pgd_detok_push, with
 * the table and vocabulary of the tokenizer they were called with. */
int pgd__detok_piece(const pgd__detok_table *t, const pgd__vocab *v, int32_t id, bool special,
                     pgd_buf *out);
const char *pgd__detok_view(const pgd__detok_table *t, const pgd__vocab *v, int32_t id,
                            bool special, size_t *len);
int pgd__detok_ids(const pgd__detok_table *t, const pgd__vocab *v, const int32_t *ids, size_t n,
                   bool special, pgd_buf *out);
void pgd__detok_init(pgd_detok *d, const pgd__detok_table *t, bool special);
int pgd__detok_push(pgd_detok *d, const pgd__detok_table *t, const pgd__vocab *v, int32_t id,
                    pgd_buf *out);

#endif
