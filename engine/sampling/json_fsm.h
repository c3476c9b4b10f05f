/*
 * engine/sampling/json_fsm.h — a byte-level recognizer of one JSON object (RFC 8259), for
 * output constrained to JSON (`response_format: {"type": "json_object"}`).
 *
 * pgd_json_fsm reads bytes one at a time and refuses the first byte after which no completion
 * could be JSON: a state it accepts is always the prefix of some valid document. The top-level
 * value must be an object; strings must be valid UTF-8 (no overlong forms, no surrogates, no
 * code point past U+10FFFF) without raw control characters, and \u escapes must pair their
 * surrogates; numbers follow the grammar (no leading zeros, no lone '.'). Beyond the grammar,
 * to keep a model from running on in whitespace, at most PGD_JSON_MAX_WS whitespace bytes may
 * come in a row, and objects and arrays nest at most PGD_JSON_MAX_DEPTH deep. After the
 * closing brace only whitespace is accepted, and pgd_json_fsm_done tells that the document is
 * whole.
 *
 * The state is small plain data: copying it is how a caller tries a token's bytes without
 * committing (the sampler masks every vocabulary entry whose bytes a copy refuses).
 *
 * Threading: no shared state.
 */
#ifndef PGD_ENGINE_JSON_FSM_H
#define PGD_ENGINE_JSON_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PGD_JSON_MAX_DEPTH 64
#define PGD_JSON_MAX_WS    64

typedef struct pgd_json_fsm {
    uint64_t objects; /* bit d: the container at depth d + 1 is an object (else an array) */
    uint16_t depth;   /* open containers */
    uint8_t st;       /* the state (json_fsm.c) */
    uint8_t n;        /* literal position, hex digits left or UTF-8 continuation bytes left */
    uint8_t lo, hi;   /* the range the next UTF-8 continuation byte must be in */
    uint8_t ws;       /* whitespace bytes in a row */
    uint8_t lit;      /* which literal: 0 true, 1 false, 2 null */
    bool key;         /* the string being read is an object's key */
    uint16_t code;    /* a \u escape's code unit so far */
} pgd_json_fsm;

/* The start: nothing read, an object expected. */
void pgd_json_fsm_init(pgd_json_fsm *f);

/* Read bytes b[0..n): true if every one keeps the state a valid prefix; false at the first that
 * does not (the state is then unspecified: feed a copy to try). */
bool pgd_json_fsm_feed(pgd_json_fsm *f, const uint8_t *b, size_t n);

/* Whether what was read is a whole document (the object closed; whitespace may follow). */
bool pgd_json_fsm_done(const pgd_json_fsm *f);

#endif
