/*
 * engine/text/tokenizer_scratch.c — growable arrays of the tokenizer: the encoders' per-call
 * scratch (tokenizer_scratch.h) and the pgd_tokens output array (tokenizer.h).
 *
 * Invariants: capacities only grow (doubling from 64); a failed grow leaves the array as it
 * was. Threading: every array belongs to its caller's thread.
 */
#include "engine/text/tokenizer_scratch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/tokenizer.h"

int pgd_tokens_push(pgd_tokens *t, int32_t id) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        int32_t *p = realloc(t->ids, cap * sizeof *p);
        if (!p) return PGD_ENOMEM;
        t->ids = p;
        t->cap = cap;
    }
    t->ids[t->n++] = id;
    return 0;
}

void pgd_tokens_free(pgd_tokens *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

int pgd__tok_grow(void **p, size_t *cap, size_t n, size_t elem) {
    if (n <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    if (c > SIZE_MAX / elem) return PGD_ENOMEM;
    void *q = realloc(*p, c * elem);
    if (!q) return PGD_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

void pgd__tok_scratch_free(pgd__tok_scratch *s) {
    free(s->sym);
    free(s->heap);
    free(s->str);
    memset(s, 0, sizeof *s);
}
