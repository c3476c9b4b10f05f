/*
 * engine/text/merge_heap.h — the binary min-heap of candidate merges that both BPE encoders
 * (tokenizer_bpe.c, tokenizer_spm.c) drive.
 *
 * Owns: nothing but the ordering. The caller owns the array (in its pgd__tok_scratch) and sizes
 * it for every push it will make; the heap never allocates.
 * Order: lower `prio` pops first, ties by the lower `left` (the leftmost pair), so merging is
 * deterministic and matches llama.cpp's. Stale entries are the caller's to skip when popped.
 *
 * Include: tokenizer_bpe.c and tokenizer_spm.c. It includes nothing of the tokenizer.
 * Threading: plain functions on the caller's memory.
 */
#ifndef PGD_ENGINE_TEXT_MERGE_HEAP_H
#define PGD_ENGINE_TEXT_MERGE_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* A candidate merge of adjacent symbols `left` and `right`. BPE's prio is the merge rank, SPM's
 * the negated score. x, y: the encoder's own data (BPE: the pair's token ids; SPM: merged
 * size), checked against the symbols when popped to tell a stale entry. */
typedef struct pgd__merge_cand {
    double prio;
    int32_t left, right;
    int32_t x, y;
} pgd__merge_cand;

/* Add c to h[0..*n); h must have room for *n + 1 entries. */
void pgd__merge_heap_push(pgd__merge_cand *h, size_t *n, pgd__merge_cand c);
/* Remove and return the first candidate; *n > 0. */
pgd__merge_cand pgd__merge_heap_pop(pgd__merge_cand *h, size_t *n);

#endif
