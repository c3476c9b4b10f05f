/*
 * engine/text/tokenizer_bpe.h — the byte-level BPE encoder (tokenizer.ggml.model = "gpt2"):
 * pre-tokenizer regexes, merge table, and the encoding of one raw fragment.
 *
 * Owns: everything in a pgd__bpe (the compiled PCRE2 regexes, the merge table, the byte ids)
 * and, per call, the PCRE2 match state in a pgd__bpe_match. Only tokenizer_bpe.c reads or
 * writes their fields; tokenizer.c embeds them and calls the functions below.
 * Invariants once set up: the merge table is at most half full; every id in it and in byte_id
 * is -1 or a token of the vocabulary it was built from, which every later call must pass.
 *
 * Include: tokenizer.c only. It includes the vocabulary and the scratch, nothing that calls
 * back into tokenizer.c.
 * Threading: set up once while the tokenizer is built; encoding only reads the pgd__bpe and the
 * vocabulary and writes the caller's scratch and match state.
 */
#ifndef PGD_ENGINE_TEXT_TOKENIZER_BPE_H
#define PGD_ENGINE_TEXT_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/text.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_scratch.h"
#include "engine/text/tokenizer_vocab.h"

#define PGD__BPE_MAX_REGEX 4

/* One entry of the merge table: (left, right) -> (rank, merged id). key = left << 32 | right;
 * an empty slot has rank -1. */
typedef struct {
    uint64_t key;
    int32_t rank;
    int32_t merged;
} pgd__bpe_merge;

typedef struct {
    /* Pre-tokenizer: regexes applied in sequence; each splits the pieces of the previous one,
     * text no match covers is kept as its own piece. */
    pcre2_code *re[PGD__BPE_MAX_REGEX];
    size_t n_re;
    bool ignore_merges; /* a whole piece that is a token is taken as is (Llama-3) */

    pgd__bpe_merge *merge_slots; /* [merge_mask + 1] */
    size_t merge_mask;
    size_t n_merges; /* merges actually usable */

    int32_t byte_id[256]; /* token of each byte's byte-unicode character, or -1 */
} pgd__bpe;

/* PCRE2 match state of one pgd_tokenize call; zero-initialise, free with pgd__bpe_match_free. */
typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
} pgd__bpe_match;

/* Set up b (zeroed beforehand) for vocabulary v: compile the pre-tokenizer regexes named by
 * pre_name (an unknown name falls back to GPT-2's with a warning on stderr), then build
 * byte_id and the merge table from merge strings "left right", lowest rank first. 0,
 * PGD_EINVAL (regex failure), PGD_EFORMAT (too many merges) or PGD_ENOMEM; on failure
 * pgd__bpe_free(b) still frees what was built. */
int pgd__bpe_init(pgd__bpe *b, const pgd__vocab *v, const char *pre_name, const pgd_str *merges,
                  size_t n_merges);
void pgd__bpe_free(pgd__bpe *b); /* a zeroed pgd__bpe is fine */

/* Tokenize one raw fragment (no special tokens in it) and append its ids to *out. */
int pgd__bpe_encode(const pgd__bpe *b, const pgd__vocab *v, const char *text, size_t len,
                    pgd__tok_scratch *s, pgd__bpe_match *m, pgd_tokens *out);
void pgd__bpe_match_free(pgd__bpe_match *m); /* back to zero */

#endif
