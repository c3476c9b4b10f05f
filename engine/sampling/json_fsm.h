/*
 * engine/sampling/json_fsm.h — a byte-level recognizer of one JSON document that a schema
 * allows (json_schema.h), for constrained output (`response_format` json_object and
 * json_schema).
 *
 * pgd_json_fsm reads bytes one at a time and refuses the first byte after which no completion
 * could be JSON the schema allows: a state it accepts is always the prefix of such a document.
 * JSON as RFC 8259 has it: strings valid UTF-8 (no overlong forms, no surrogates, no code point
 * past U+10FFFF) without raw control characters, \u escapes pairing their surrogates; numbers
 * as the grammar has them (no leading zeros, no lone '.'). The schema then picks, at the first
 * byte of each value, the node that reads it, and that node constrains it (json_schema.h: enum
 * literals, string lengths, integers, item counts, declared keys in their order, required
 * keys). Beyond both, to keep a model from running on in whitespace, at most PGD_JSON_MAX_WS
 * whitespace bytes may come in a row, and objects and arrays nest at most PGD_JSON_MAX_DEPTH
 * deep. After the document only whitespace is accepted; pgd_json_fsm_done tells that the
 * document is whole.
 *
 * The state is plain data: pgd_json_fsm_try reads a token's bytes on a copy of its live part,
 * which is how the sampler masks every vocabulary entry that would be refused.
 *
 * Threading: no shared state; the schema is read-only and borrowed (it outlives the state).
 */
#ifndef PGD_ENGINE_JSON_FSM_H
#define PGD_ENGINE_JSON_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampling/json_schema.h"

#define PGD_JSON_MAX_DEPTH 64
#define PGD_JSON_MAX_WS    64

typedef struct pgd_json_frame {
    uint16_t node;  /* the container's node */
    uint16_t vnode; /* object: the node of the value after the key just read */
    bool object;    /* else an array */
    uint32_t prop;  /* object with properties: the first that may still come */
    uint32_t count; /* array: items begun */
    uint16_t live;  /* union of objects: the branches still possible (bit b: branch b) */
    uint16_t bprop[PGD_JSON_MAX_BRANCHES]; /* ... each one's first property still to come */
} pgd_json_frame;

typedef struct pgd_json_fsm {
    const pgd_json_schema *sc;
    uint16_t depth; /* open containers */
    uint8_t st;     /* the state (json_fsm.c) */
    uint8_t n;      /* hex digits left or UTF-8 continuation bytes left */
    uint8_t lo, hi; /* the range the next UTF-8 continuation byte must be in */
    uint8_t ws;     /* whitespace bytes in a row */
    bool key;       /* the string or literal being read is an object's key */
    bool disc;      /* the literal being read tells a union's branches apart (json_schema.h) */
    uint16_t code;  /* a \u escape's code unit so far */
    uint16_t node;  /* the value expected, or the string / number being read: its node */
    uint32_t len;   /* the string's code points so far */
    bool neg;       /* the number being read has a '-' */
    uint64_t mag;   /* ... its integer digits' value so far (saturating) */
    int8_t frac;    /* ... its fraction digits so far (-1: no '.' yet) */
    uint8_t ndig;   /* ... its digits but a lone leading 0 */
    uint64_t fval;  /* ... its fraction digits' value (a bounded decimal's) */
    uint32_t lit_lo, lit_hi, lit_pos;     /* a literal: the candidates sharing the bytes read */
    uint32_t win_lo, win_hi;              /* ... and the tags allowed among them (keys) */
    pgd_json_frame f[PGD_JSON_MAX_DEPTH]; /* [depth] the open containers, outermost first */
} pgd_json_fsm;

/* The start: nothing read, the schema's root value expected (pgd_json_schema_object(): one
 * JSON object). */
void pgd_json_fsm_init(pgd_json_fsm *f, const pgd_json_schema *sc);

/* Read bytes b[0..n): true if every one keeps the state a valid prefix; false at the first that
 * does not (the state is then unspecified: use pgd_json_fsm_try to try). */
bool pgd_json_fsm_feed(pgd_json_fsm *f, const uint8_t *b, size_t n);

/* Whether f would accept b[0..n), leaving f as it is. */
bool pgd_json_fsm_try(const pgd_json_fsm *f, const uint8_t *b, size_t n);

/* Whether the state is in a string's text (not in an escape, a UTF-8 sequence or a key matched
 * as a literal), and then in *room how many more code points the string may take. */
bool pgd_json_fsm_in_string(const pgd_json_fsm *f, uint32_t *room);

/* The code points of b[0..n) if it is plain string text — whole UTF-8 characters (no overlong
 * form, no surrogate, none past U+10FFFF), no '"', '\\' or control byte — else UINT32_MAX
 * (and for n = 0). In a string with room for them, such bytes are always taken, and leave it
 * in its text: what lets a caller skip trying them. */
uint32_t pgd_json_plain_chars(const uint8_t *b, size_t n);

/* Whether what was read is a whole document (whitespace may follow; a number or literal at the
 * top could still go on). */
bool pgd_json_fsm_done(const pgd_json_fsm *f);

#endif
