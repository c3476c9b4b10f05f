/*
 * engine/text/tokenizer_spm.h — the SentencePiece-style BPE encoder (tokenizer.ggml.model =
 * "llama"): its byte fallback and the encoding of one raw fragment.
 *
 * Owns: the fallback of a pgd__spm (the <0xXX> token of each byte, and unk for text without
 * byte tokens). Only tokenizer_spm.c reads or writes its fields; tokenizer.c embeds it and
 * calls the functions below.
 * Invariants once set up: every id in it is -1 or a token of the vocabulary it was built from,
 * which every later call must pass.
 *
 * Include: tokenizer.c only. It includes the vocabulary and the scratch, nothing that calls
 * back into tokenizer.c.
 * Threading: set up once while the tokenizer is built; encoding only reads the pgd__spm and the
 * vocabulary and writes the caller's scratch.
 */
#ifndef PGD_ENGINE_TEXT_TOKENIZER_SPM_H
#define PGD_ENGINE_TEXT_TOKENIZER_SPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_scratch.h"
#include "engine/text/tokenizer_vocab.h"

typedef struct {
    int32_t byte_id[256]; /* the <0xXX> token of each byte (else the one-byte token), or -1 */
    int32_t unk;          /* a character with no byte tokens becomes this, or nothing when -1 */
} pgd__spm;

/* Set up s for vocabulary v; unk is the tokenizer's unknown id (or -1). Cannot fail. */
void pgd__spm_init(pgd__spm *s, const pgd__vocab *v, int32_t unk);

/* Tokenize one raw fragment and append its ids to *out; prefix_space adds the add_space_prefix
 * space in front. */
int pgd__spm_encode(const pgd__spm *sp, const pgd__vocab *v, const char *text, size_t len,
                    bool prefix_space, pgd__tok_scratch *s, pgd_tokens *out);

#endif
