/*
 * engine/text/tokenizer_bpe.c — byte-level BPE (tokenizer.ggml.model = "gpt2"); interface in
 * tokenizer_bpe.h.
 *
 * Owns: the pre-tokenizer regexes (PCRE2, UTF + UCP, JIT when available), the merge table and
 * the byte ids of a pgd__bpe, and the PCRE2 match state of a pgd__bpe_match.
 *
 * Pre-tokenizer: the regexes of tokenizer.ggml.pre are applied in sequence; each one splits
 * every piece the previous one produced, and text that no match covers stays a piece of its
 * own (llama.cpp's unicode_regex_split). A regex only sees its own piece, so a lookahead never
 * looks past the piece's end. Invalid UTF-8 is matched by nothing (PCRE2_MATCH_INVALID_UTF), so
 * such bytes end up in unmatched pieces and are still encoded byte by byte.
 *
 * Merging: every byte of a piece starts as the token of its byte-unicode character; the
 * adjacent pair with the lowest merge rank (ties: leftmost) is merged until no pair has a
 * merge. Symbols sit in a doubly linked list and candidate pairs in a binary heap
 * (merge_heap.h), so a piece of n bytes costs O(n log n); stale heap entries are skipped when
 * popped. A byte whose character is not in the vocabulary (SmolLM2 lacks 0x04, 0x06, 0xC0, 0xFF,
 * ...) produces no id, as in llama.cpp and HF tokenizers, so such bytes do not survive a round
 * trip.
 *
 * Threading: setup runs once while the tokenizer is built; encoding only reads the pgd__bpe and
 * the vocabulary and writes the caller's scratch and match state.
 */
#include "engine/text/tokenizer_bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/merge_heap.h"

/* UTF-8 of a code point of the byte-unicode alphabet (below U+0800); returns its length. */
static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12)); /* the alphabet stays below U+0800 */
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* ---------------------------------------------------------------------------------------- */
/* Pre-tokenizers.                                                                           */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* (?i:'s|...) written with explicit classes: PCRE2's caseless matching would also fold
 * U+017F and U+212A into s and k, which the reference implementations do not. */
#define RE_CONTRACTIONS_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                  \
    RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
                       "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"      \
                       "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *re[PGD__BPE_MAX_REGEX];
    bool ignore_merges;
} pretok_def;

static const pretok_def k_pretoks[] = {
    {"default|gpt2|gpt-2", {RE_GPT2}, false},
    {"llama3|llama-v3|llama-bpe", {RE_LLAMA3}, true},
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2", {RE_QWEN2}, false},
    {"smollm|starcoder|refact|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}, false},
};

static bool name_in(const char *names, const char *name) {
    size_t n = strlen(name);
    const char *p = names;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && !memcmp(p, name, n)) return true;
        if (!bar) return false;
        p = bar + 1;
    }
}

static int setup_pretok(pgd__bpe *b, const char *pre_name) {
    const pretok_def *def = NULL;
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_pretoks); i++)
        if (name_in(k_pretoks[i].names, pre_name)) def = &k_pretoks[i];
    if (!def) {
        fprintf(stderr,
                "pagoda: warning: unknown pre-tokenizer '%s'; using GPT-2's (ids may differ "
                "from the model's own tokenizer)\n",
                pre_name);
        def = &k_pretoks[0];
    }
    b->ignore_merges = def->ignore_merges;
    for (size_t i = 0; i < PGD__BPE_MAX_REGEX && def->re[i]; i++) {
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            return pgd_error_set(PGD_EINVAL, "tokenizer: pre-tokenizer regex: %s at %zu",
                                 (const char *)msg, (size_t)erroff);
        }
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
        b->re[b->n_re++] = re;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Merge table.                                                                              */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static int32_t merge_find(const pgd__bpe *b, int32_t l, int32_t r, int32_t *merged) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t i = (size_t)mix64(key) & b->merge_mask;
    for (;;) {
        const pgd__bpe_merge *s = &b->merge_slots[i];
        if (s->rank < 0) return -1;
        if (s->key == key) {
            *merged = s->merged;
            return s->rank;
        }
        i = (i + 1) & b->merge_mask;
    }
}

static int setup_merges(pgd__bpe *b, const pgd__vocab *v, const pgd_str *merges, size_t n_merges) {
    char utf8[4];
    for (int c = 0; c < 256; c++) {
        size_t n = utf8_put(pgd__vocab_byte_cp((uint8_t)c), utf8);
        b->byte_id[c] = pgd__vocab_lookup(v, utf8, n);
    }
    if (n_merges >= INT32_MAX)
        return pgd_error_set(PGD_EFORMAT, "tokenizer: too many merges (%zu)", n_merges);
    size_t cap = 16;
    while (cap < 2 * n_merges) cap <<= 1;
    b->merge_slots = malloc(cap * sizeof *b->merge_slots);
    if (!b->merge_slots) return PGD_ENOMEM;
    for (size_t i = 0; i < cap; i++) b->merge_slots[i].rank = -1;
    b->merge_mask = cap - 1;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (size_t r = 0; r < n_merges; r++) {
        const char *m = merges[r].ptr;
        size_t len = (size_t)merges[r].len;
        /* "left right": the first space after the first byte separates them (llama.cpp). */
        const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        size_t ll = (size_t)(sp - m), rl = len - ll - 1;
        int32_t l = pgd__vocab_lookup(v, m, ll), rr = pgd__vocab_lookup(v, sp + 1, rl);
        if (l < 0 || rr < 0) continue;
        if (pgd__tok_grow((void **)&cat, &cat_cap, ll + rl, 1)) {
            free(cat);
            return PGD_ENOMEM;
        }
        memcpy(cat, m, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t merged = pgd__vocab_lookup(v, cat, ll + rl);
        if (merged < 0) continue;
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)rr;
        size_t i = (size_t)mix64(key) & b->merge_mask;
        while (b->merge_slots[i].rank >= 0 && b->merge_slots[i].key != key)
            i = (i + 1) & b->merge_mask;
        if (b->merge_slots[i].rank >= 0) continue; /* a duplicate: the first rank stands */
        b->merge_slots[i] = (pgd__bpe_merge){key, (int32_t)r, merged};
        b->n_merges++;
    }
    free(cat);
    return 0;
}

int pgd__bpe_init(pgd__bpe *b, const pgd__vocab *v, const char *pre_name, const pgd_str *merges,
                  size_t n_merges) {
    int rc = setup_pretok(b, pre_name);
    return rc ? rc : setup_merges(b, v, merges, n_merges);
}

void pgd__bpe_free(pgd__bpe *b) {
    for (size_t i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    free(b->merge_slots);
    memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------------------------------- */
/* Merging one piece.                                                                        */

typedef struct {
    int32_t id; /* -1: a byte with no token; -2: merged away */
    int32_t prev, next;
} bsym;

static void try_pair(const pgd__bpe *b, const bsym *sym, pgd__merge_cand *heap, size_t *nh,
                     int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    int32_t lid = sym[l].id, rid = sym[r].id, merged;
    if (lid < 0 || rid < 0) return;
    int32_t rank = merge_find(b, lid, rid, &merged);
    if (rank < 0) return;
    pgd__merge_heap_push(heap, nh, (pgd__merge_cand){(double)rank, l, r, lid, rid});
}

static int encode_piece(const pgd__bpe *b, const pgd__vocab *v, const unsigned char *p, size_t n,
                        pgd__tok_scratch *s, pgd_tokens *out) {
    int rc;
    if (n == 0) return 0;
    if (n >= INT32_MAX / 2) return pgd_error_set(PGD_EINVAL, "tokenize: piece too long");
    if (b->ignore_merges && n > 1) {
        if ((rc = pgd__tok_grow((void **)&s->str, &s->str_cap, 2 * n, 1))) return rc;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += utf8_put(pgd__vocab_byte_cp(p[i]), s->str + m);
        int32_t id = pgd__vocab_lookup(v, s->str, m);
        if (id >= 0) return pgd_tokens_push(out, id);
    }
    if ((rc = pgd__tok_grow(&s->sym, &s->sym_cap, n, sizeof(bsym)))) return rc;
    /* n - 1 initial pairs, at most two more per merge: fewer than 3n entries ever. */
    if ((rc = pgd__tok_grow(&s->heap, &s->heap_cap, 3 * n, sizeof(pgd__merge_cand)))) return rc;
    bsym *sym = s->sym;
    pgd__merge_cand *heap = s->heap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++)
        sym[i] = (bsym){b->byte_id[p[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
    for (size_t i = 0; i + 1 < n; i++) try_pair(b, sym, heap, &nh, (int32_t)i, (int32_t)i + 1);
    while (nh) {
        pgd__merge_cand t = pgd__merge_heap_pop(heap, &nh);
        if (sym[t.left].id != t.x || sym[t.left].next != t.right || sym[t.right].id != t.y)
            continue; /* stale */
        int32_t merged;
        (void)merge_find(b, t.x, t.y, &merged);
        int32_t r = t.right, rn = sym[r].next;
        sym[t.left].id = merged;
        sym[t.left].next = rn;
        if (rn >= 0) sym[rn].prev = t.left;
        sym[r].id = -2;
        try_pair(b, sym, heap, &nh, sym[t.left].prev, t.left);
        try_pair(b, sym, heap, &nh, t.left, rn);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        /* A byte whose character the vocabulary lacks is dropped, as llama.cpp and HF
         * tokenizers (without unk) do: no id stands for it. */
        if (sym[i].id >= 0 && (rc = pgd_tokens_push(out, sym[i].id))) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Pre-tokenizing.                                                                           */

static int match(const pgd__bpe *b, size_t level, const char *subj, size_t len, size_t start,
                 pgd__bpe_match *m, size_t *ms, size_t *me) {
    int rc = pcre2_match(b->re[level], (PCRE2_SPTR)subj, len, start, 0, m->md, m->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !m->jit_stack) {
        m->mctx = pcre2_match_context_create(NULL);
        m->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (!m->mctx || !m->jit_stack) return PGD_ENOMEM;
        pcre2_jit_stack_assign(m->mctx, NULL, m->jit_stack);
        rc = pcre2_match(b->re[level], (PCRE2_SPTR)subj, len, start, 0, m->md, m->mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 1;
    if (rc < 0) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return pgd_error_set(PGD_EINVAL, "tokenize: pre-tokenizer match failed: %s",
                             (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    *ms = ov[0];
    *me = ov[1];
    return 0;
}

/* Split text[0..len) with regex `level` and recurse into each piece; the last level's pieces
 * are merged. */
static int pretok(const pgd__bpe *b, const pgd__vocab *v, size_t level, const char *text,
                  size_t len, pgd__tok_scratch *s, pgd__bpe_match *m, pgd_tokens *out) {
    if (level == b->n_re) return encode_piece(b, v, (const unsigned char *)text, len, s, out);
    size_t pos = 0;
    int rc;
    while (pos < len) {
        size_t ms = 0, me = 0;
        rc = match(b, level, text, len, pos, m, &ms, &me);
        if (rc == 1) break;
        if (rc) return rc;
        if (me <= ms) { /* an empty match (none of ours can): the next byte becomes a piece */
            if (ms >= len) break;
            me = ms + 1;
        }
        if (ms > pos && (rc = pretok(b, v, level + 1, text + pos, ms - pos, s, m, out))) return rc;
        if ((rc = pretok(b, v, level + 1, text + ms, me - ms, s, m, out))) return rc;
        pos = me;
    }
    if (pos < len) return pretok(b, v, level + 1, text + pos, len - pos, s, m, out);
    return 0;
}

int pgd__bpe_encode(const pgd__bpe *b, const pgd__vocab *v, const char *text, size_t len,
                    pgd__tok_scratch *s, pgd__bpe_match *m, pgd_tokens *out) {
    if (!m->md) {
        m->md = pcre2_match_data_create(4, NULL);
        if (!m->md) return PGD_ENOMEM;
    }
    return pretok(b, v, 0, text, len, s, m, out);
}

void pgd__bpe_match_free(pgd__bpe_match *m) {
    if (m->md) pcre2_match_data_free(m->md);
    if (m->mctx) pcre2_match_context_free(m->mctx);
    if (m->jit_stack) pcre2_jit_stack_free(m->jit_stack);
    memset(m, 0, sizeof *m);
}
