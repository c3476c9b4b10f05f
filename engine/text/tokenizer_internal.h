/*
 * engine/text/tokenizer_internal.h — the pgd_tokenizer layout shared by engine/text/tokenizer*.c.
 *
 * Not a public header: only engine/text/tokenizer.c (construction, special tokens, dispatch),
 * engine/text/tokenizer_bpe.c (byte-level BPE), engine/text/tokenizer_spm.c (SentencePiece-style
 * BPE) and engine/text/tokenizer_detok.c (decoding) include it.
 *
 * Invariants once built: every id stored in the struct is -1 or < n_vocab; text_off/piece_off
 * have n_vocab + 1 entries; the hash tables are at most half full; nothing changes afterwards,
 * so every reader is thread-safe.
 */
#ifndef PGD_ENGINE_TOKENIZER_INTERNAL_H
#define PGD_ENGINE_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/text/tokenizer.h"

#define PGD__PRETOK_MAX_REGEX 4

/* One entry of the merge table: (left, right) -> (rank, merged id). key = left << 32 | right;
 * an empty slot has rank -1. */
typedef struct {
    uint64_t key;
    int32_t rank;
    int32_t merged;
} pgd__merge_slot;

struct pgd_tokenizer {
    pgd_tokenizer_kind kind;
    char *model_name, *pre_name; /* owned, NUL-terminated */

    size_t n_vocab;
    char *text;         /* token texts back to back: text + text_off[i], length text_off[i+1]-... */
    uint32_t *text_off; /* [n_vocab + 1] */
    uint8_t *types;     /* [n_vocab] PGD_TOKEN_* */
    float *scores;      /* [n_vocab] */
    char *piece;        /* decoded bytes of each token (see tokenizer_detok.c) */
    uint32_t *piece_off; /* [n_vocab + 1] */

    int32_t *vocab_slots; /* open addressing: token text -> id, -1 empty; [vocab_mask + 1] */
    size_t vocab_mask;

    pgd__merge_slot *merge_slots; /* BPE only; [merge_mask + 1] */
    size_t merge_mask;
    size_t n_merges; /* merges actually usable */

    int32_t byte_id[256]; /* BPE: token of each byte's byte-unicode char; SPM: <0xXX>; or -1 */

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    int32_t *eog; /* sorted */
    size_t n_eog;

    int32_t *special_ids; /* control + user-defined tokens with text, longest text first */
    size_t n_special_ids;

    /* BPE pre-tokenizer: regexes applied in sequence; each splits the pieces of the previous
     * one, text no match covers is kept as its own piece. */
    pcre2_code *re[PGD__PRETOK_MAX_REGEX];
    size_t n_re;
    bool ignore_merges;
};

static inline const char *pgd__tok_text(const pgd_tokenizer *tk, int32_t id, size_t *len) {
    *len = tk->text_off[id + 1] - tk->text_off[id];
    return tk->text + tk->text_off[id];
}

/* Vocabulary lookup by exact text; -1 when absent (tokenizer.c). */
int32_t pgd__tok_lookup(const pgd_tokenizer *tk, const char *s, size_t len);

/* Per-call scratch memory shared by the model encoders. */
typedef struct {
    void *sym; /* symbols (encoder-specific type) */
    size_t sym_cap;
    void *heap; /* pair heap (encoder-specific type) */
    size_t heap_cap;
    char *str; /* byte string scratch */
    size_t str_cap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
} pgd__tok_scratch;

void pgd__tok_scratch_free(pgd__tok_scratch *s);
/* Grow a scratch array to hold n elements of size elem (contents kept). 0 or PGD_ENOMEM. */
int pgd__tok_grow(void **p, size_t *cap, size_t n, size_t elem);

/* A candidate merge of adjacent symbols `left` and `right` (both tokenizers merge with a binary
 * heap). Lower `prio` pops first, ties by the lower `left`: BPE uses the merge rank, SPM the
 * negated score. x, y: the tokenizer's own data (BPE: the pair's token ids; SPM: merged size). */
typedef struct pgd__merge_cand {
    double prio;
    int32_t left, right;
    int32_t x, y;
} pgd__merge_cand;

void pgd__merge_heap_push(pgd__merge_cand *h, size_t *n, pgd__merge_cand c);
pgd__merge_cand pgd__merge_heap_pop(pgd__merge_cand *h, size_t *n); /* *n > 0 */

/* ---- byte-level BPE (tokenizer_bpe.c) ---- */

/* The GPT-2 byte-unicode alphabet: code point of each byte. */
uint32_t pgd__bpe_byte_cp(uint8_t b);
/* The byte of a code point of that alphabet, or -1. */
int pgd__bpe_cp_byte(uint32_t cp);
/* Compile the pre-tokenizer regexes named by tk->pre_name (falls back to GPT-2 with a warning
 * on stderr); sets re, n_re, ignore_merges. 0, PGD_ENOMEM or PGD_EINVAL (regex failure). */
int pgd__bpe_setup_pretok(pgd_tokenizer *tk);
/* Build byte_id and the merge table from merge strings (lowest rank first). */
int pgd__bpe_setup(pgd_tokenizer *tk, const pgd_str *merges, size_t n_merges);
/* Tokenize one raw fragment (no special tokens in it). */
int pgd__bpe_encode(const pgd_tokenizer *tk, const char *text, size_t len, pgd__tok_scratch *s,
                    pgd_tokens *out);

/* ---- SentencePiece-style BPE (tokenizer_spm.c) ---- */

int pgd__spm_setup(pgd_tokenizer *tk);
/* Tokenize one raw fragment; prefix_space adds the add_space_prefix space in front. */
int pgd__spm_encode(const pgd_tokenizer *tk, const char *text, size_t len, bool prefix_space,
                    pgd__tok_scratch *s, pgd_tokens *out);

/* ---- decoding (tokenizer_detok.c) ---- */

/* Fill piece/piece_off from the token texts and types. */
int pgd__detok_build_pieces(pgd_tokenizer *tk);

#endif
