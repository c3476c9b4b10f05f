/*
 * engine/text/tokenizer.h — text to token ids and back.
 *
 * Two vocabularies, chosen by tokenizer.ggml.model:
 *   "gpt2"   byte-level BPE. The text is split by a PCRE2 pre-tokenizer chosen by
 *            tokenizer.ggml.pre (GPT-2, Llama-3, Qwen2, SmolLM/StarCoder), each piece's bytes are
 *            mapped to the GPT-2 byte-unicode alphabet and merged by rank (merges looked up by
 *            (left id, right id)). Llama-3 also takes a whole piece that is in the vocabulary
 *            directly (ignore_merges).
 *   "llama"  SentencePiece-style BPE: spaces become U+2581, a space is prefixed when
 *            add_space_prefix is on, adjacent symbols merge by the highest score of the merged
 *            token, characters left unknown become <0xXX> byte tokens (or unk without them).
 *
 * Special tokens: control and user-defined tokens (types 3 and 4) are recognised only where
 * their bytes lie entirely inside one of the caller's `special` spans; elsewhere the same bytes
 * are ordinary text. Where several could match, longer tokens win (as in llama.cpp).
 *
 * Lifetimes: a pgd_tokenizer copies everything it needs from its source (the pgd_gguf or the
 * arrays of a pgd_tokenizer_desc) and is freed with pgd_tokenizer_free.
 *
 * Threading: a pgd_tokenizer is immutable after creation; any number of threads may tokenize and
 * detokenize with it at once (each call uses its own scratch memory). A pgd_detok and a
 * pgd_tokens belong to one thread at a time. Errors leave a detail in the calling thread's
 * pgd_error_detail().
 *
 * Implementation (engine/text/), dependencies one way only: tokenizer.c builds the tokenizer,
 * finds special tokens and dispatches; it calls tokenizer_bpe.c and tokenizer_spm.c (encoding)
 * and tokenizer_detok.c (decoding), which call only tokenizer_vocab.c (token texts, types,
 * scores, lookup), tokenizer_scratch.c (per-call arrays, pgd_tokens) and merge_heap.c. Only
 * tokenizer.c sees the pgd_tokenizer layout.
 */
#ifndef PGD_ENGINE_TOKENIZER_H
#define PGD_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"
#include "engine/model/gguf.h"

/* Token types, as stored in tokenizer.ggml.token_type (llama.cpp's numbering). */
enum {
    PGD_TOKEN_UNDEFINED = 0,
    PGD_TOKEN_NORMAL = 1,
    PGD_TOKEN_UNKNOWN = 2,
    PGD_TOKEN_CONTROL = 3,
    PGD_TOKEN_USER_DEFINED = 4,
    PGD_TOKEN_UNUSED = 5,
    PGD_TOKEN_BYTE = 6
};

typedef enum { PGD_TOKENIZER_BPE, PGD_TOKENIZER_SPM } pgd_tokenizer_kind;

typedef struct pgd_tokenizer pgd_tokenizer;

/* ---- creation ---- */

/* Build the tokenizer of a GGUF model (tokenizer.ggml.* metadata). Errors: PGD_ENOTFOUND (no
 * tokenizer.ggml.model / tokens), PGD_EUNSUPPORTED (a model other than "gpt2" or "llama"),
 * PGD_EFORMAT (array lengths or types that do not fit), PGD_ENOMEM. An unknown pre-tokenizer
 * name falls back to GPT-2's with one warning on stderr. On success the caller frees *out with
 * pgd_tokenizer_free; nothing points into g afterwards. On failure *out is NULL. */
int pgd_tokenizer_load(const pgd_gguf *g, pgd_tokenizer **out);

/* The same from plain arrays (tests, tools). Fill it with pgd_tokenizer_desc_init first: every
 * id defaults to -1 (absent) and every flag to -1 (the model's default). */
typedef struct pgd_tokenizer_desc {
    const char *model;         /* "gpt2" or "llama" */
    const char *pre;           /* pre-tokenizer name (gpt2 only); NULL = "default" */
    size_t n_vocab;            /* > 0 */
    const char *const *tokens; /* [n_vocab] token texts (NUL-terminated unless token_lens) */
    const size_t *token_lens;  /* [n_vocab] byte lengths, or NULL for strlen */
    const int32_t *types;      /* [n_vocab] PGD_TOKEN_*, or NULL = all normal */
    const float *scores;       /* [n_vocab] SPM merge scores, or NULL = all 0 */
    size_t n_merges;           /* gpt2: merges[n_merges], "left right", lowest rank first */
    const char *const *merges; /* NUL-terminated */
    int32_t bos, eos, eot, eom, unk, pad;
    int add_bos, add_eos, add_space_prefix; /* 1, 0, or -1 for the model's default */
} pgd_tokenizer_desc;

void pgd_tokenizer_desc_init(pgd_tokenizer_desc *d);

/* Errors: PGD_EINVAL (missing arrays, unknown model, id out of range), PGD_ENOMEM. Ownership as
 * for pgd_tokenizer_load; the desc's arrays are copied. */
int pgd_tokenizer_create(const pgd_tokenizer_desc *d, pgd_tokenizer **out);

void pgd_tokenizer_free(pgd_tokenizer *tk); /* NULL is fine */

/* ---- properties ---- */

pgd_tokenizer_kind pgd_tokenizer_kind_of(const pgd_tokenizer *tk);
const char *pgd_tokenizer_model(const pgd_tokenizer *tk); /* "gpt2", "llama" */
const char *pgd_tokenizer_pre(const pgd_tokenizer *tk);   /* as stored ("default" if none) */
size_t pgd_tokenizer_n_vocab(const pgd_tokenizer *tk);

/* Special ids; -1 when the model has none. */
int32_t pgd_tokenizer_bos(const pgd_tokenizer *tk);
int32_t pgd_tokenizer_eos(const pgd_tokenizer *tk);
int32_t pgd_tokenizer_eot(const pgd_tokenizer *tk); /* end of turn (<|im_end|>, <|eot_id|>...) */
int32_t pgd_tokenizer_eom(const pgd_tokenizer *tk);
int32_t pgd_tokenizer_unk(const pgd_tokenizer *tk);
int32_t pgd_tokenizer_pad(const pgd_tokenizer *tk);

/* Whether a prompt should start with bos / end with eos (tokenizer.ggml.add_bos_token /
 * add_eos_token; defaults: SPM adds bos, BPE does not). pgd_tokenize itself never adds them. */
bool pgd_tokenizer_add_bos(const pgd_tokenizer *tk);
bool pgd_tokenizer_add_eos(const pgd_tokenizer *tk);
bool pgd_tokenizer_add_space_prefix(const pgd_tokenizer *tk);

/* End-of-generation ids: eos, eot, eom and every control token named like an end of turn
 * (<|im_end|>, <|eot_id|>, <|eom_id|>, <end_of_turn>, <|end|>, <|endoftext|>, ...), sorted and
 * without duplicates. *ids points into tk. */
size_t pgd_tokenizer_eog_ids(const pgd_tokenizer *tk, const int32_t **ids);
bool pgd_tokenizer_is_eog(const pgd_tokenizer *tk, int32_t id);

/* The stored text of a token (byte-level BPE tokens in the byte-unicode alphabet, SPM tokens
 * with U+2581), a view valid while tk lives; {NULL, 0} when out of range. */
pgd_str pgd_tokenizer_token_text(const pgd_tokenizer *tk, int32_t id);
/* PGD_TOKEN_* of a token, or PGD_EINVAL when out of range. */
int pgd_tokenizer_token_type(const pgd_tokenizer *tk, int32_t id);
float pgd_tokenizer_token_score(const pgd_tokenizer *tk, int32_t id); /* 0 when out of range */
/* The id whose stored text is exactly text[0..len), or -1. */
int32_t pgd_tokenizer_find(const pgd_tokenizer *tk, const char *text, size_t len);

/* ---- encoding ---- */

/* A growable id array; {NULL, 0, 0} is empty. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} pgd_tokens;

#define PGD_TOKENS_INIT                                                                            \
    { NULL, 0, 0 }

int pgd_tokens_push(pgd_tokens *t, int32_t id); /* 0 or PGD_ENOMEM */
void pgd_tokens_free(pgd_tokens *t);            /* back to empty */

/* Tokenize text[0..len) (any bytes; invalid UTF-8 is encoded byte by byte, and a byte whose
 * byte-level token the vocabulary lacks is dropped, as in llama.cpp) and append the ids
 * to *out. special[0..n_special) are byte ranges of text (any order, may be NULL when
 * n_special is 0) where control and user-defined tokens are recognised; a single span over the
 * whole text means "parse special". The text between recognised special tokens is tokenized as
 * whole fragments: a span boundary alone never splits it. No bos/eos is added.
 * Errors: PGD_EINVAL (a span outside the text), PGD_ENOMEM. On failure out->n is what it was. */
int pgd_tokenize(const pgd_tokenizer *tk, const char *text, size_t len, const pgd_span *special,
                 size_t n_special, pgd_tokens *out);

/* ---- decoding ---- */

/* Append the bytes of one token: byte-level BPE maps the byte-unicode alphabet back to bytes,
 * SPM maps U+2581 to a space and <0xXX> byte tokens to their byte. Control and unknown tokens
 * give their text only when `special` is true (nothing otherwise); user-defined tokens always
 * give their text. The bytes may be part of a UTF-8 character. PGD_EINVAL for an id out of
 * range; PGD_ENOMEM. */
int pgd_token_piece(const pgd_tokenizer *tk, int32_t id, bool special, pgd_buf *out);
/* The same bytes without a copy: a pointer into the tokenizer's piece table (valid while tk
 * lives) and their count in *len; NULL (and 0) for an id out of range. */
const char *pgd_token_piece_view(const pgd_tokenizer *tk, int32_t id, bool special, size_t *len);

/* Append the raw bytes of ids[0..n) (no UTF-8 repair). For SPM with add_space_prefix, one
 * leading space of the first piece that yields any bytes is dropped (what encoding prefixed).
 * PGD_EINVAL for an id out of range (out is left as it was); PGD_ENOMEM. */
int pgd_detokenize(const pgd_tokenizer *tk, const int32_t *ids, size_t n, bool special,
                   pgd_buf *out);

/* Incremental detokenizer for streaming. push() appends only complete, valid UTF-8 characters
 * and holds back an incomplete tail (at most 3 bytes); a byte sequence becomes U+FFFD as soon
 * as it is known to be invalid (one U+FFFD per maximal invalid subpart, as Python's
 * errors="replace" does); flush() turns a held-back tail into U+FFFD. The SPM leading space is
 * dropped like pgd_detokenize does while strip_leading_space is true (init sets it to
 * add_space_prefix; clear it to keep the space, e.g. when continuing a text). */
typedef struct pgd_detok {
    const pgd_tokenizer *tk;
    bool special;             /* control tokens' text is emitted */
    bool strip_leading_space; /* drop one space at the start of the first non-empty piece */
    uint8_t pend[4];          /* held-back bytes of an incomplete character */
    uint8_t n_pend;           /* bytes in pend */
    uint8_t need;             /* total length of the character being assembled */
} pgd_detok;

void pgd_detok_init(pgd_detok *d, const pgd_tokenizer *tk, bool special);
/* PGD_EINVAL for an id out of range (state and out unchanged); PGD_ENOMEM. */
int pgd_detok_push(pgd_detok *d, int32_t id, pgd_buf *out);
/* Append U+FFFD for a held-back incomplete character (if any) and reset the held bytes. */
int pgd_detok_flush(pgd_detok *d, pgd_buf *out);
/* Bytes currently held back (0..3). */
size_t pgd_detok_pending(const pgd_detok *d);

#endif
