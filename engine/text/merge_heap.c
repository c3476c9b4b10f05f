/*
 * engine/text/merge_heap.c — the candidate-merge heap shared by the BPE and SPM encoders
 * (interface and ordering in merge_heap.h).
 *
 * Invariant: h[0..n) is a binary min-heap under cand_before (prio, then left).
 * Threading: no state of its own; the caller's array belongs to the caller's thread.
 */
#include "engine/text/merge_heap.h"

#include <stdbool.h>

static bool cand_before(const pgd__merge_cand *a, const pgd__merge_cand *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

void pgd__merge_heap_push(pgd__merge_cand *h, size_t *n, pgd__merge_cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
}

pgd__merge_cand pgd__merge_heap_pop(pgd__merge_cand *h, size_t *n) {
    pgd__merge_cand top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}
