/*
 * engine/text/tokenizer_scratch.h — the per-call memory of pgd_tokenize: growable arrays that
 * the encoders reuse from one fragment to the next.
 *
 * Owns: the buffers of a pgd__tok_scratch, from its first grow to pgd__tok_scratch_free. The
 * same file (tokenizer_scratch.c) also defines pgd_tokens_push and pgd_tokens_free, the growable
 * output array declared in tokenizer.h, so that the encoders append ids without calling into
 * tokenizer.c.
 * Invariants: each pointer is NULL with capacity 0, or holds `cap` elements of its user's type;
 * growing keeps the contents.
 *
 * Include: tokenizer.c (which owns one scratch per pgd_tokenize call) and the encoders below
 * it, tokenizer_bpe and tokenizer_spm. It includes no other tokenizer header.
 * Threading: a scratch belongs to the one call (and thread) that created it.
 */
#ifndef PGD_ENGINE_TEXT_TOKENIZER_SCRATCH_H
#define PGD_ENGINE_TEXT_TOKENIZER_SCRATCH_H

#include <stddef.h>

/* Zero-initialise; free with pgd__tok_scratch_free. */
typedef struct {
    void *sym; /* symbols (encoder-specific type) */
    size_t sym_cap;
    void *heap; /* the merge heap's pgd__merge_cand entries */
    size_t heap_cap;
    char *str; /* byte string scratch */
    size_t str_cap;
} pgd__tok_scratch;

void pgd__tok_scratch_free(pgd__tok_scratch *s); /* back to zero */
/* Grow a scratch array to hold n elements of size elem (contents kept). 0 or PGD_ENOMEM. */
int pgd__tok_grow(void **p, size_t *cap, size_t n, size_t elem);

#endif
