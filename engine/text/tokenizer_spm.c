/*
 * engine/text/tokenizer_spm.c — SentencePiece-style BPE (tokenizer.ggml.model = "llama");
 * interface in tokenizer_spm.h.
 *
 * Owns: the byte-fallback table of a pgd__spm and the score-driven merge of one raw fragment.
 *
 * Algorithm (llama.cpp's llm_tokenizer_spm, itself SentencePiece's BPE): spaces become U+2581
 * ("▁"), one more is prefixed when the caller asks (add_space_prefix at the start of the text and
 * after a special token); the fragment starts as one symbol per UTF-8 character; the adjacent
 * pair whose concatenation is a vocabulary token with the highest score merges first (ties:
 * leftmost); a final symbol that is not a token becomes its bytes' <0xXX> tokens, or one unk
 * when the vocabulary has no byte tokens. Only normal, undefined and user-defined tokens take
 * part in merges, so typing "<0x41>" or a control token's text stays plain text.
 * Symbols sit in a doubly linked list, pairs in a binary heap (merge_heap.h): O(n log n) per
 * fragment.
 *
 * Threading: setup runs once while the tokenizer is built; encoding only reads the pgd__spm and
 * the vocabulary and writes the caller's scratch.
 */
#include "engine/text/tokenizer_spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/merge_heap.h"

void pgd__spm_init(pgd__spm *s, const pgd__vocab *v, int32_t unk) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        int32_t id = pgd__vocab_lookup(v, name, 6);
        if (id < 0) {
            char one = (char)b;
            id = pgd__vocab_lookup(v, &one, 1);
        }
        s->byte_id[b] = id;
    }
    s->unk = unk;
}

static bool mergeable(const pgd__vocab *v, int32_t id) {
    uint8_t t = v->types[id];
    return t == PGD_TOKEN_NORMAL || t == PGD_TOKEN_UNDEFINED || t == PGD_TOKEN_USER_DEFINED;
}

static int32_t lookup_mergeable(const pgd__vocab *v, const char *s, size_t n) {
    int32_t id = pgd__vocab_lookup(v, s, n);
    return (id >= 0 && mergeable(v, id)) ? id : -1;
}

typedef struct {
    uint32_t start, n; /* bytes of the escaped text; n == 0: merged away */
    int32_t prev, next;
} ssym;

static void try_pair(const pgd__vocab *v, const char *str, const ssym *sym, pgd__merge_cand *heap,
                     size_t *nh, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    uint32_t size = sym[l].n + sym[r].n;
    int32_t id = lookup_mergeable(v, str + sym[l].start, size);
    if (id < 0) return;
    pgd__merge_heap_push(heap, nh,
                         (pgd__merge_cand){-(double)v->scores[id], l, r, (int32_t)size, 0});
}

int pgd__spm_encode(const pgd__spm *sp, const pgd__vocab *v, const char *text, size_t len,
                    bool prefix_space, pgd__tok_scratch *s, pgd_tokens *out) {
    static const char k_space[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */
    int rc;
    if (len == 0 && !prefix_space) return 0;
    if (len >= UINT32_MAX / 4) return pgd_error_set(PGD_EINVAL, "tokenize: text too long");
    /* Escape: at most 3 bytes per input byte, plus the prefix. */
    if ((rc = pgd__tok_grow((void **)&s->str, &s->str_cap, 3 * len + 3, 1))) return rc;
    char *str = s->str;
    size_t m = 0;
    if (prefix_space) {
        memcpy(str, k_space, 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(str + m, k_space, 3);
            m += 3;
        } else {
            str[m++] = text[i];
        }
    }
    /* One symbol per UTF-8 character (a stray byte is a character of its own: a lead byte
     * whose continuation bytes are missing must not swallow the next character, e.g. the
     * first byte of an escaped space). */
    if ((rc = pgd__tok_grow(&s->sym, &s->sym_cap, m, sizeof(ssym)))) return rc;
    if ((rc = pgd__tok_grow(&s->heap, &s->heap_cap, 3 * m, sizeof(pgd__merge_cand)))) return rc;
    ssym *sym = s->sym;
    pgd__merge_cand *heap = s->heap;
    size_t n = 0, nh = 0;
    for (size_t off = 0; off < m;) {
        size_t cl = (size_t)pgd_utf8_seq_len((unsigned char)str[off]);
        if (cl == 0) cl = 1;
        if (cl > m - off) cl = m - off;
        for (size_t k = 1; k < cl; k++)
            if (((unsigned char)str[off + k] & 0xC0) != 0x80) {
                cl = 1;
                break;
            }
        sym[n] = (ssym){(uint32_t)off, (uint32_t)cl, (int32_t)n - 1, -1};
        if (n) sym[n - 1].next = (int32_t)n;
        n++;
        off += cl;
    }
    for (size_t i = 0; i + 1 < n; i++) try_pair(v, str, sym, heap, &nh, (int32_t)i, (int32_t)i + 1);
    while (nh) {
        pgd__merge_cand t = pgd__merge_heap_pop(heap, &nh);
        ssym *l = &sym[t.left], *r = &sym[t.right];
        if (l->n == 0 || r->n == 0 || l->next != t.right || l->n + r->n != (uint32_t)t.x) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = t.left;
        try_pair(v, str, sym, heap, &nh, l->prev, t.left);
        try_pair(v, str, sym, heap, &nh, t.left, l->next);
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = sym[i].next) {
        const char *p = str + sym[i].start;
        int32_t id = lookup_mergeable(v, p, sym[i].n);
        if (id >= 0) {
            if ((rc = pgd_tokens_push(out, id))) return rc;
            continue;
        }
        /* Byte fallback; without byte tokens the whole character is one unk. */
        bool all_bytes = true;
        for (uint32_t k = 0; k < sym[i].n; k++)
            if (sp->byte_id[(unsigned char)p[k]] < 0) all_bytes = false;
        if (all_bytes) {
            for (uint32_t k = 0; k < sym[i].n; k++)
                if ((rc = pgd_tokens_push(out, sp->byte_id[(unsigned char)p[k]]))) return rc;
        } else if (sp->unk >= 0) {
            if ((rc = pgd_tokens_push(out, sp->unk))) return rc;
        }
    }
    return 0;
}
