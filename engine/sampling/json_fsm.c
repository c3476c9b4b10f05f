/*
 * engine/sampling/json_fsm.c — the byte-level JSON object recognizer (json_fsm.h).
 */
#include "engine/sampling/json_fsm.h"

enum {
    ST_START,     /* nothing yet: '{' */
    ST_VALUE,     /* a value (after ':' or an array's ',') */
    ST_OBJ_FIRST, /* after '{': a key or '}' */
    ST_OBJ_KEY,   /* after an object's ',': a key */
    ST_COLON,     /* after a key: ':' */
    ST_AFTER,     /* after a value in a container: ',' or its closing bracket */
    ST_ARR_FIRST, /* after '[': a value or ']' */
    ST_STR,       /* in a string */
    ST_ESC,       /* after '\' */
    ST_HEX,       /* in \uXXXX (n digits left) */
    ST_UTF8,      /* in a UTF-8 sequence (n continuation bytes left, the next in [lo, hi]) */
    ST_LOW_BS,    /* after a high surrogate's escape: '\' of the low one */
    ST_LOW_U,     /* its 'u' */
    ST_LOW_HEX,   /* its digits: DC00..DFFF */
    ST_N_MINUS,   /* '-' */
    ST_N_ZERO,    /* a leading 0 */
    ST_N_INT,     /* integer digits */
    ST_N_DOT,     /* '.' */
    ST_N_FRAC,    /* fraction digits */
    ST_N_E,       /* 'e' */
    ST_N_ESIGN,   /* the exponent's sign */
    ST_N_EXP,     /* exponent digits */
    ST_LIT,       /* in true / false / null */
    ST_DONE,      /* the object closed */
};

static const char *const k_lits[3] = {"true", "false", "null"};
static const uint8_t k_lit_len[3] = {4, 5, 4};

void pgd_json_fsm_init(pgd_json_fsm *f) {
    *f = (pgd_json_fsm){.st = ST_START};
}

bool pgd_json_fsm_done(const pgd_json_fsm *f) {
    return f->st == ST_DONE;
}

static bool is_ws(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int hex(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool top_is_object(const pgd_json_fsm *f) {
    return f->depth && (f->objects >> (f->depth - 1) & 1);
}

/* A value just ended. */
static void end_value(pgd_json_fsm *f) {
    f->st = f->depth ? ST_AFTER : ST_DONE;
}

static bool push(pgd_json_fsm *f, bool object) {
    if (f->depth >= PGD_JSON_MAX_DEPTH) return false;
    uint64_t bit = 1ull << f->depth;
    f->objects = object ? f->objects | bit : f->objects & ~bit;
    f->depth++;
    f->st = object ? ST_OBJ_FIRST : ST_ARR_FIRST;
    return true;
}

/* The first byte of a value. */
static bool begin_value(pgd_json_fsm *f, uint8_t c) {
    switch (c) {
    case '{':
        return push(f, true);
    case '[':
        return push(f, false);
    case '"':
        f->key = false;
        f->st = ST_STR;
        return true;
    case '-':
        f->st = ST_N_MINUS;
        return true;
    case '0':
        f->st = ST_N_ZERO;
        return true;
    case 't':
    case 'f':
    case 'n':
        f->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        f->n = 1;
        f->st = ST_LIT;
        return true;
    default:
        if (c >= '1' && c <= '9') {
            f->st = ST_N_INT;
            return true;
        }
        return false;
    }
}

/* A closing bracket in ST_OBJ_FIRST / ST_ARR_FIRST / ST_AFTER: it must match the open
 * container. */
static bool close(pgd_json_fsm *f, uint8_t c) {
    if (!f->depth || (c == '}') != top_is_object(f)) return false;
    f->depth--;
    end_value(f);
    return true;
}

/* A string's byte (not inside an escape or a UTF-8 sequence). */
static bool str_byte(pgd_json_fsm *f, uint8_t c) {
    if (c == '"') {
        if (f->key)
            f->st = ST_COLON;
        else
            end_value(f);
        return true;
    }
    if (c == '\\') {
        f->st = ST_ESC;
        return true;
    }
    if (c < 0x20) return false;
    if (c < 0x80) return true;
    f->lo = 0x80, f->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        f->n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        f->n = 2;
        if (c == 0xE0) f->lo = 0xA0; /* no overlong form */
        if (c == 0xED) f->hi = 0x9F; /* no surrogate */
    } else if (c >= 0xF0 && c <= 0xF4) {
        f->n = 3;
        if (c == 0xF0) f->lo = 0x90;
        if (c == 0xF4) f->hi = 0x8F; /* at most U+10FFFF */
    } else {
        return false;
    }
    f->st = ST_UTF8;
    return true;
}

/* A number's state when c is no part of it: the number ended, c is read after it. */
static bool number_ends(uint8_t st) {
    return st == ST_N_ZERO || st == ST_N_INT || st == ST_N_FRAC || st == ST_N_EXP;
}

static bool step(pgd_json_fsm *f, uint8_t c) {
    bool digit = c >= '0' && c <= '9';
    switch (f->st) {
    case ST_STR:
        return str_byte(f, c);
    case ST_UTF8:
        if (c < f->lo || c > f->hi) return false;
        f->lo = 0x80, f->hi = 0xBF;
        if (--f->n == 0) f->st = ST_STR;
        return true;
    case ST_ESC:
        if (c == 'u') {
            f->st = ST_HEX, f->n = 4, f->code = 0;
            return true;
        }
        if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' &&
            c != 't')
            return false;
        f->st = ST_STR;
        return true;
    case ST_HEX:
    case ST_LOW_HEX: {
        int v = hex(c);
        if (v < 0) return false;
        if (f->st == ST_LOW_HEX && ((f->n == 4 && v != 0xD) || (f->n == 3 && v < 0xC)))
            return false; /* a low surrogate: DC00..DFFF */
        if (f->st == ST_HEX && f->n == 3 && f->code == 0xD && v >= 0xC)
            return false; /* DCxx..DFxx would be a low surrogate alone: no way on */
        f->code = (uint16_t)(f->code << 4 | v);
        if (--f->n) return true;
        if (f->st == ST_HEX && f->code >= 0xD800 && f->code <= 0xDBFF)
            f->st = ST_LOW_BS;
        else
            f->st = ST_STR;
        return true;
    }
    case ST_LOW_BS:
        if (c != '\\') return false;
        f->st = ST_LOW_U;
        return true;
    case ST_LOW_U:
        if (c != 'u') return false;
        f->st = ST_LOW_HEX, f->n = 4, f->code = 0;
        return true;
    case ST_LIT:
        if (c != (uint8_t)k_lits[f->lit][f->n]) return false;
        if (++f->n == k_lit_len[f->lit]) end_value(f);
        return true;
    case ST_N_MINUS:
        if (!digit) return false;
        f->st = c == '0' ? ST_N_ZERO : ST_N_INT;
        return true;
    case ST_N_DOT:
        if (!digit) return false;
        f->st = ST_N_FRAC;
        return true;
    case ST_N_E:
        if (c == '+' || c == '-') {
            f->st = ST_N_ESIGN;
            return true;
        }
        /* fall through */
    case ST_N_ESIGN:
        if (!digit) return false;
        f->st = ST_N_EXP;
        return true;
    default:
        break;
    }
    if (number_ends(f->st)) {
        if (digit && f->st != ST_N_ZERO) return true;
        if (c == '.' && (f->st == ST_N_ZERO || f->st == ST_N_INT)) {
            f->st = ST_N_DOT;
            return true;
        }
        if ((c == 'e' || c == 'E') && f->st != ST_N_EXP) {
            f->st = ST_N_E;
            return true;
        }
        if (digit) return false; /* a leading zero */
        end_value(f);            /* then c as the next structural byte */
    }
    /* structural states */
    if (is_ws(c)) {
        if (++f->ws > PGD_JSON_MAX_WS) return false;
        return true;
    }
    f->ws = 0;
    switch (f->st) {
    case ST_START:
        return c == '{' && push(f, true);
    case ST_VALUE:
        return begin_value(f, c);
    case ST_ARR_FIRST:
        return c == ']' ? close(f, c) : begin_value(f, c);
    case ST_OBJ_FIRST:
        if (c == '}') return close(f, c);
        /* fall through */
    case ST_OBJ_KEY:
        if (c != '"') return false;
        f->key = true;
        f->st = ST_STR;
        return true;
    case ST_COLON:
        if (c != ':') return false;
        f->st = ST_VALUE;
        return true;
    case ST_AFTER:
        if (c == ',') {
            f->st = top_is_object(f) ? ST_OBJ_KEY : ST_VALUE;
            return true;
        }
        return (c == '}' || c == ']') && close(f, c);
    default: /* ST_DONE: whitespace only */
        return false;
    }
}

bool pgd_json_fsm_feed(pgd_json_fsm *f, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!step(f, b[i])) return false;
    return true;
}
