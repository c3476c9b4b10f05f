/*
 * engine/sampling/json_fsm.c — the byte-level recognizer of JSON a schema allows (json_fsm.h).
 */
#include "engine/sampling/json_fsm.h"

#include <string.h>

enum {
    ST_VALUE,     /* a value of node `node` (the document's, an item, after ':') */
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
    ST_LIT,       /* in a literal: an enum's value, a declared key, true / false / null */
    ST_DONE,      /* the document is whole */
};

void pgd_json_fsm_init(pgd_json_fsm *f, const pgd_json_schema *sc) {
    memset(f, 0, offsetof(pgd_json_fsm, f));
    f->sc = sc;
    f->st = ST_VALUE;
    f->node = sc->root;
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

static const pgd_jnode *node_of(const pgd_json_fsm *f, uint16_t i) {
    return &f->sc->nodes[i];
}

static pgd_json_frame *top(pgd_json_fsm *f) {
    return &f->f[f->depth - 1];
}

/* ---- literals: enum values, declared keys, the words ------------------------------------- */

/* Whether a value of node n fits under the depth limit from where the recognizer is. */
static bool fits(const pgd_json_fsm *f, uint16_t n) {
    return f->depth + f->sc->nodes[n].need <= PGD_JSON_MAX_DEPTH;
}

/* The property of key tag `tag` of the open object. */
static const pgd_jprop *prop_of(const pgd_json_fsm *f, uint32_t tag) {
    return &f->sc->props[f->sc->nodes[f->f[f->depth - 1].node].prop0 + tag];
}

/* The last property that may come next in object node n from property p on: the first
 * required one, or the last. */
static uint32_t window_end(const pgd_json_fsm *f, const pgd_jnode *n, uint32_t p) {
    uint32_t last = f->sc->props[n->prop0 + p].next_req;
    return last < n->n_props ? last : n->n_props - 1;
}

/* Union of objects: whether key entry l (tag branch << 16 | property) may come next in the
 * open object — its branch live, the property within that branch's window, its value fitting. */
static bool ukey_allowed(const pgd_json_fsm *f, const pgd_jlit *l) {
    const pgd_json_frame *fr = &f->f[f->depth - 1];
    const pgd_jnode *u = node_of(f, fr->node);
    uint32_t b = l->tag >> 16, p = l->tag & 0xFFFF;
    if (!(fr->live >> b & 1)) return false;
    const pgd_jnode *n = node_of(f, f->sc->props[u->br0 + b].node);
    if (p < fr->bprop[b] || fr->bprop[b] >= n->n_props || p > window_end(f, n, fr->bprop[b]))
        return false;
    return fits(f, f->sc->props[u->prop0 + (uint32_t)(l - f->sc->lits) - u->key0].node);
}

/* A candidate allowed: its tag in the window and, for a key, its value fits; in a union of
 * objects, a key or a discriminating value of a live branch. */
static bool lit_allowed(const pgd_json_fsm *f, const pgd_jlit *l) {
    if (f->disc) return f->f[f->depth - 1].live >> l->tag & 1;
    if (f->key && f->depth && node_of(f, f->f[f->depth - 1].node)->uobj) return ukey_allowed(f, l);
    if (l->tag < f->win_lo || l->tag > f->win_hi) return false;
    return !f->key || fits(f, prop_of(f, l->tag)->node);
}

/* The byte at pos of literal l, or -1 where it ends. */
static int lit_byte(const pgd_jlit *l, uint32_t pos) {
    return pos < l->len ? (uint8_t)l->text[pos] : -1;
}

/* Narrows the candidates to those going on with c; false if none allowed does. The candidates
 * share their first lit_pos bytes and are sorted: those going on with c are one range, found by
 * bisection (an enum of thousands of values costs a token a few steps). */
static bool lit_advance(pgd_json_fsm *f, uint8_t c) {
    const pgd_jlit *lits = f->sc->lits;
    uint32_t pos = f->lit_pos, lo = f->lit_lo, hi = f->lit_hi;
    while (lo < hi) { /* first with byte >= c */
        uint32_t mid = lo + (hi - lo) / 2;
        if (lit_byte(&lits[mid], pos) < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint32_t first = lo;
    hi = f->lit_hi;
    while (lo < hi) { /* first with byte > c */
        uint32_t mid = lo + (hi - lo) / 2;
        if (lit_byte(&lits[mid], pos) <= c)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint32_t end = lo;
    uint32_t i = first;
    while (i < end && !lit_allowed(f, &lits[i])) i++;
    if (i == end) return false;
    f->lit_lo = first, f->lit_hi = end, f->lit_pos = pos + 1;
    return true;
}

/* The allowed candidate read whole, or NULL: the first of those read whole, which sort before
 * those that go on (several, of one text, in a union's keys and values). */
static const pgd_jlit *lit_whole(const pgd_json_fsm *f) {
    for (uint32_t i = f->lit_lo; i < f->lit_hi; i++) {
        const pgd_jlit *l = &f->sc->lits[i];
        if (l->len != f->lit_pos) break;
        if (lit_allowed(f, l)) return l;
    }
    return NULL;
}

/* Starts matching literals [lo, hi) with tags in [win_lo, win_hi] (a key's, or a value telling
 * a union's branches apart: `disc`) at their first byte c. */
static bool lit_begin(pgd_json_fsm *f, uint32_t lo, uint32_t hi, uint32_t win_lo, uint32_t win_hi,
                      bool key, bool disc, uint8_t c) {
    f->lit_lo = lo, f->lit_hi = hi, f->lit_pos = 0;
    f->win_lo = win_lo, f->win_hi = win_hi;
    f->disc = disc;
    f->key = key;
    f->st = ST_LIT;
    return lit_advance(f, c);
}

/* ---- bounded numbers ------------------------------------------------------------------------ */

#define BIG   ((__int128)1 << 100)           /* past any magnitude or bound here */
#define UNITS ((__int128)1000000000000000LL) /* a decimal's units: 10^-15 */

static __int128 pow10_128(int e) {
    __int128 p = 1;
    while (e-- > 0) p *= 10;
    return p;
}

/* Whether the integer read so far (f->neg, f->mag; `digits`: any digit yet) can still become,
 * or is (`whole`), one within [lo, hi]. The magnitudes digits m can still become are m and
 * [m * 10^k, (m + 1) * 10^k - 1] for every k >= 1 (none past a lone 0). */
static bool int_ok(const pgd_json_fsm *f, __int128 lo, __int128 hi, bool digits, bool whole) {
    if (!digits) return lo <= -1 || (lo <= 0 && 0 <= hi); /* a '-': negative, or -0 */
    __int128 m = f->mag;
    if (whole || m == 0) {
        __int128 x = f->neg ? -m : m;
        return lo <= x && x <= hi;
    }
    __int128 ylo = f->neg ? -hi : lo, yhi = f->neg ? -lo : hi; /* bounds on the magnitude */
    for (__int128 a = m, b = m; a <= yhi; a *= 10, b = b * 10 + 9)
        if (b >= ylo) return true;
    return false;
}

/* Whether [lo, hi] holds one of s, s + g, ..., e (units). */
static bool grid_meets(__int128 s, __int128 e, __int128 g, __int128 lo, __int128 hi) {
    __int128 a = lo > s ? lo : s;
    __int128 x = s + (a - s + g - 1) / g * g;
    return x <= e && x <= hi;
}

/* The same for a bounded decimal (at most PGD_JSON_DEC_DIGITS digits, no exponent; in units of
 * 10^-15): the digits still to come extend the integer part (j more digits: [m * 10^j,
 * (m + 1) * 10^j) on the grid the digits left for the fraction allow) or, after the '.', the
 * fraction ([x, x + 10^-k) on such a grid). */
typedef struct dec_read { /* the digits of a decimal read so far (pgd_json_fsm's) */
    bool neg;
    int8_t frac;
    uint8_t ndig;
    uint64_t mag, fval;
} dec_read;

static bool dec_ok(const dec_read *f, __int128 lo, __int128 hi, bool whole) {
    if (f->neg) {
        __int128 t = lo;
        lo = -hi, hi = -t;
    }
    int k = f->frac, left = PGD_JSON_DEC_DIGITS - f->ndig;
    __int128 x = (__int128)f->mag * UNITS + (k > 0 ? f->fval * pow10_128(15 - k) : 0);
    if (whole) return lo <= x && x <= hi;
    if (k >= 0 || f->mag == 0) { /* the fraction: after the '.', or after a lone 0 */
        int kk = k > 0 ? k : 0, r = left < 15 - kk ? left : 15 - kk;
        if (k >= 0 && r == 0 && k == 0) return false; /* a '.' with no digit left */
        __int128 g = pow10_128(15 - kk - r);
        return grid_meets(x, x + pow10_128(15 - kk) - g, g, lo, hi);
    }
    for (int j = 0; j <= left; j++) {
        int r = left - j < 15 ? left - j : 15;
        __int128 g = pow10_128(15 - r), s = (__int128)f->mag * pow10_128(j) * UNITS;
        if (grid_meets(s, s + pow10_128(j) * UNITS - g, g, lo, hi)) return true;
    }
    return false;
}

/* Whether the number read so far can still become, or is (`whole`), one its node allows:
 * always when unbounded. `digits`: any digit read yet (a lone '-' has none). */
static bool num_ok(const pgd_json_fsm *f, bool digits, bool whole) {
    const pgd_jnode *n = node_of(f, f->node);
    if (!n->has_lo && !n->has_hi) return true;
    if (!n->dec) {
        __int128 lo = n->has_lo ? n->lo : -BIG, hi = n->has_hi ? n->hi : BIG;
        return int_ok(f, lo, hi, digits, whole);
    }
    __int128 lo = n->has_lo ? (__int128)n->lo * UNITS + n->lo_frac : -BIG;
    __int128 hi = n->has_hi ? (__int128)n->hi * UNITS + n->hi_frac : BIG;
    dec_read r = {f->neg, f->frac, f->ndig, f->mag, f->fval};
    if (digits) return dec_ok(&r, lo, hi, whole);
    for (uint64_t d = 0; d < 10; d++) { /* a '-': some first digit goes on */
        r.mag = d, r.ndig = d != 0;
        if (dec_ok(&r, lo, hi, false)) return true;
    }
    return false;
}

/* A digit of the integer part: its value so far, saturating past every bound. */
static void add_digit(pgd_json_fsm *f, uint8_t c) {
    uint64_t d = (uint64_t)(c - '0');
    if (f->mag || d) f->ndig++;
    f->mag = f->mag > (UINT64_MAX - 9) / 10 ? UINT64_MAX : f->mag * 10 + d;
}

/* A fraction digit (counted: a bounded decimal's value kept). */
static void add_frac(pgd_json_fsm *f, uint8_t c) {
    f->ndig++;
    if (f->frac < 18) f->fval = f->fval * 10 + (uint64_t)(c - '0');
    if (f->frac < INT8_MAX) f->frac++;
}

/* Whether a bounded decimal has room for another digit. */
static bool digit_room(const pgd_json_fsm *f) {
    const pgd_jnode *n = node_of(f, f->node);
    return !n->dec || f->ndig < PGD_JSON_DEC_DIGITS;
}

/* ---- containers and values ----------------------------------------------------------------- */

/* A value just ended. */
static void end_value(pgd_json_fsm *f) {
    f->st = f->depth ? ST_AFTER : ST_DONE;
}

static bool push(pgd_json_fsm *f, uint16_t node, bool object) {
    const pgd_jnode *n = node_of(f, node);
    if (f->depth + (object ? n->need_obj : n->need_arr) > PGD_JSON_MAX_DEPTH) return false;
    pgd_json_frame *fr = &f->f[f->depth++];
    fr->node = node, fr->object = object, fr->prop = fr->count = 0;
    if (n->uobj) {
        fr->live = (uint16_t)((1u << n->n_br) - 1);
        memset(fr->bprop, 0, n->n_br * sizeof fr->bprop[0]);
    }
    f->st = object ? ST_OBJ_FIRST : ST_ARR_FIRST;
    return true;
}

static int class_of(uint8_t c) {
    switch (c) {
    case '{':
        return PGD_JC_OBJECT;
    case '[':
        return PGD_JC_ARRAY;
    case '"':
        return PGD_JC_STRING;
    case 't':
        return PGD_JC_TRUE;
    case 'f':
        return PGD_JC_FALSE;
    case 'n':
        return PGD_JC_NULL;
    default:
        return c == '-' || (c >= '0' && c <= '9') ? PGD_JC_NUMBER : -1;
    }
}

/* The first byte of a value of node f->node. */
static bool begin_value(pgd_json_fsm *f, uint8_t c) {
    int cls = class_of(c);
    if (cls < 0) return false;
    uint16_t h = node_of(f, f->node)->cls[cls];
    if (h == PGD_JNODE_NONE) return false;
    const pgd_jnode *n = node_of(f, h);
    if (n->n_lits) return lit_begin(f, n->lit0, n->lit0 + n->n_lits, 0, 0, false, n->disc, c);
    f->node = h;
    switch (cls) {
    case PGD_JC_OBJECT:
        return push(f, h, true);
    case PGD_JC_ARRAY:
        return push(f, h, false);
    case PGD_JC_STRING:
        f->key = false;
        f->len = 0;
        f->st = ST_STR;
        return true;
    case PGD_JC_NUMBER:
        f->st = c == '-' ? ST_N_MINUS : c == '0' ? ST_N_ZERO : ST_N_INT;
        f->neg = c == '-';
        f->mag = f->fval = 0;
        f->frac = -1;
        f->ndig = 0;
        if (c == '-') return num_ok(f, false, false);
        add_digit(f, c);
        return num_ok(f, true, false);
    default:
        return lit_begin(f, 0, PGD_JLIT_WORDS, 0, 0, false, false, c);
    }
}

/* The first byte of a key (after '{' or an object's ','). */
static bool begin_key(pgd_json_fsm *f, uint8_t c) {
    pgd_json_frame *fr = top(f);
    const pgd_jnode *n = node_of(f, fr->node);
    if (!n->props) {
        if (c != '"' || !fits(f, n->extra)) return false;
        f->key = true;
        f->node = PGD_JNODE_ANY;
        f->len = 0;
        f->st = ST_STR;
        return true;
    }
    if (n->uobj) return lit_begin(f, n->key0, n->key0 + n->n_props, 0, 0, true, false, c);
    if (fr->prop >= n->n_props) return false;
    return lit_begin(f, n->key0, n->key0 + n->n_props, fr->prop, window_end(f, n, fr->prop), true,
                     false, c);
}

/* Whether object node n, from property p on, may take a key next whose value fits. */
static bool props_may_follow(const pgd_json_fsm *f, const pgd_jnode *n, uint32_t p) {
    if (p >= n->n_props) return false;
    for (uint32_t t = p, last = window_end(f, n, p); t <= last; t++)
        if (fits(f, f->sc->props[n->prop0 + t].node)) return true;
    return false;
}

/* Whether object node n, from property p on, may close: no required property left. */
static bool props_may_close(const pgd_json_fsm *f, const pgd_jnode *n, uint32_t p) {
    return p >= n->n_props || f->sc->props[n->prop0 + p].next_req >= n->n_props;
}

/* Union of objects: whether some live branch of the open object says yes. */
static bool some_branch(const pgd_json_fsm *f, const pgd_json_frame *fr,
                        bool (*say)(const pgd_json_fsm *, const pgd_jnode *, uint32_t)) {
    const pgd_jnode *u = node_of(f, fr->node);
    for (uint32_t b = 0; b < u->n_br; b++)
        if (fr->live >> b & 1 && say(f, node_of(f, f->sc->props[u->br0 + b].node), fr->bprop[b]))
            return true;
    return false;
}

/* The branches whose literals of the text just read whole are allowed (a union's key or
 * discriminating value), each one's entry handed to `each` (may be NULL). */
static uint16_t branches_read(pgd_json_fsm *f, void (*each)(pgd_json_fsm *, const pgd_jlit *)) {
    uint16_t bits = 0;
    for (uint32_t i = f->lit_lo; i < f->lit_hi; i++) {
        const pgd_jlit *l = &f->sc->lits[i];
        if (l->len != f->lit_pos) break;
        if (!lit_allowed(f, l)) continue;
        bits |= (uint16_t)(1u << (f->disc ? l->tag : l->tag >> 16));
        if (each) each(f, l);
    }
    return bits;
}

static void ukey_take(pgd_json_fsm *f, const pgd_jlit *l) {
    f->f[f->depth - 1].bprop[l->tag >> 16] = (uint16_t)((l->tag & 0xFFFF) + 1);
}

/* Whether a key may come next in the open object (after its ','): a declared one not yet
 * passed whose value fits, or any key of a map whose values fit. */
static bool key_may_follow(const pgd_json_fsm *f) {
    const pgd_json_frame *fr = &f->f[f->depth - 1];
    const pgd_jnode *n = node_of(f, fr->node);
    if (n->uobj) return some_branch(f, fr, props_may_follow);
    if (!n->props) return fits(f, n->extra);
    return props_may_follow(f, n, fr->prop);
}

/* A key was read whole: the value's node follows ':'. */
static void key_read(pgd_json_fsm *f, const pgd_jlit *l) {
    pgd_json_frame *fr = top(f);
    const pgd_jnode *n = node_of(f, fr->node);
    if (l && n->uobj) { /* the branches that have this key, each past it */
        fr->vnode = f->sc->props[n->prop0 + (uint32_t)(l - f->sc->lits) - n->key0].node;
        fr->live = branches_read(f, ukey_take);
    } else if (l) {
        fr->vnode = f->sc->props[n->prop0 + l->tag].node;
        fr->prop = l->tag + 1;
    } else {
        fr->vnode = n->extra;
    }
    f->st = ST_COLON;
}

/* Whether the open object may close: no required property left. */
static bool may_close_object(const pgd_json_fsm *f, const pgd_json_frame *fr) {
    const pgd_jnode *n = node_of(f, fr->node);
    if (n->uobj) return some_branch(f, fr, props_may_close);
    return !n->props || props_may_close(f, n, fr->prop);
}

/* A closing bracket in ST_OBJ_FIRST / ST_ARR_FIRST / ST_AFTER. */
static bool close(pgd_json_fsm *f, uint8_t c) {
    pgd_json_frame *fr = top(f);
    if ((c == '}') != fr->object) return false;
    if (fr->object ? !may_close_object(f, fr) : fr->count < node_of(f, fr->node)->min_items)
        return false;
    f->depth--;
    end_value(f);
    return true;
}

/* The next item of the open array: false past max_items. */
static bool next_item(pgd_json_fsm *f) {
    pgd_json_frame *fr = top(f);
    const pgd_jnode *n = node_of(f, fr->node);
    uint16_t item = fr->count < n->n_tup ? f->sc->props[n->tup0 + fr->count].node : n->items;
    if (fr->count >= n->max_items || !fits(f, item)) return false;
    fr->count++;
    f->node = item;
    return true;
}

/* ---- strings -------------------------------------------------------------------------------- */

/* A string's byte (not inside an escape or a UTF-8 sequence). */
static bool str_byte(pgd_json_fsm *f, uint8_t c) {
    const pgd_jnode *n = node_of(f, f->node);
    if (c == '"') {
        if (f->len < n->min_len) return false;
        if (f->key)
            key_read(f, NULL);
        else
            end_value(f);
        return true;
    }
    if (c < 0x20) return false;
    if (f->len >= n->max_len) return false; /* a code point more */
    f->len++;
    if (c == '\\') {
        f->st = ST_ESC;
        return true;
    }
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

/* Inside a string past its first byte: escapes, \u digits, UTF-8 continuations. -1: not such a
 * state. */
static int str_inner(pgd_json_fsm *f, uint8_t c) {
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
    default:
        return -1;
    }
}

/* ---- numbers ------------------------------------------------------------------------------ */

/* A number's state that may end it: the byte after is then read as the next structural one. */
static bool number_ends(uint8_t st) {
    return st == ST_N_ZERO || st == ST_N_INT || st == ST_N_FRAC || st == ST_N_EXP;
}

/* In a number: 1 taken, 0 refused, -1 the number ended before c (or not a number state). */
static int number_byte(pgd_json_fsm *f, uint8_t c) {
    bool digit = c >= '0' && c <= '9';
    bool dec = node_of(f, f->node)->dec;
    switch (f->st) {
    case ST_N_MINUS:
        if (!digit) return 0;
        f->st = c == '0' ? ST_N_ZERO : ST_N_INT;
        add_digit(f, c);
        return num_ok(f, true, false);
    case ST_N_DOT:
        if (!digit) return 0;
        f->st = ST_N_FRAC;
        add_frac(f, c);
        return num_ok(f, true, false);
    case ST_N_E:
        if (c == '+' || c == '-') {
            f->st = ST_N_ESIGN;
            return 1;
        }
        /* fall through */
    case ST_N_ESIGN:
        if (!digit) return 0;
        f->st = ST_N_EXP;
        return 1;
    default:
        break;
    }
    if (!number_ends(f->st)) return -1;
    if (digit) {
        if (f->st == ST_N_ZERO || !digit_room(f)) return 0; /* no leading zero */
        if (f->st == ST_N_EXP) return 1;
        if (f->st == ST_N_INT)
            add_digit(f, c);
        else
            add_frac(f, c);
        return num_ok(f, true, false);
    }
    bool frac = !node_of(f, f->node)->int_only;
    if (c == '.' && frac && (f->st == ST_N_ZERO || f->st == ST_N_INT)) {
        f->st = ST_N_DOT;
        f->frac = 0;
        return num_ok(f, true, false);
    }
    if ((c == 'e' || c == 'E') && frac && !dec && f->st != ST_N_EXP) {
        f->st = ST_N_E;
        return 1;
    }
    if (!num_ok(f, true, true)) return 0; /* out of the bounds: the number may not end */
    end_value(f);
    return -1;
}

/* ---- one byte ------------------------------------------------------------------------------- */

static bool step(pgd_json_fsm *f, uint8_t c) {
    int r = str_inner(f, c);
    if (r >= 0) return r;
    if ((r = number_byte(f, c)) >= 0) return r;
    if (f->st == ST_LIT) {
        if (lit_advance(f, c)) return true;
        const pgd_jlit *l = lit_whole(f);
        if (!l) return false;
        if (f->key) {
            key_read(f, l);
        } else {
            if (f->disc) f->f[f->depth - 1].live = branches_read(f, NULL);
            end_value(f);
        }
        /* then c as the next structural byte */
    }
    if (is_ws(c)) return ++f->ws <= PGD_JSON_MAX_WS;
    f->ws = 0;
    switch (f->st) {
    case ST_VALUE:
        return begin_value(f, c);
    case ST_ARR_FIRST:
        if (c == ']') return close(f, c);
        return next_item(f) && begin_value(f, c);
    case ST_OBJ_FIRST:
        if (c == '}') return close(f, c);
        /* fall through */
    case ST_OBJ_KEY:
        return begin_key(f, c);
    case ST_COLON:
        if (c != ':') return false;
        f->node = top(f)->vnode;
        f->st = ST_VALUE;
        return true;
    case ST_AFTER:
        if (c == ',') {
            if (!top(f)->object) {
                f->st = ST_VALUE;
                return next_item(f);
            }
            if (!key_may_follow(f)) return false;
            f->st = ST_OBJ_KEY;
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

bool pgd_json_fsm_try(const pgd_json_fsm *f, const uint8_t *b, size_t n) {
    pgd_json_fsm t;
    memcpy(&t, f, offsetof(pgd_json_fsm, f) + f->depth * sizeof f->f[0]);
    return pgd_json_fsm_feed(&t, b, n);
}

bool pgd_json_fsm_done(const pgd_json_fsm *f) {
    if (f->st == ST_DONE) return true;
    if (f->depth) return false;
    if (number_ends(f->st)) return num_ok(f, true, true);
    return f->st == ST_LIT && !f->key && lit_whole(f);
}

bool pgd_json_fsm_in_string(const pgd_json_fsm *f, uint32_t *room) {
    if (f->st != ST_STR) return false;
    *room = node_of(f, f->node)->max_len - f->len;
    return true;
}

uint32_t pgd_json_plain_chars(const uint8_t *b, size_t n) {
    if (!n) return UINT32_MAX;
    pgd_json_fsm f = {.st = ST_STR, .sc = pgd_json_schema_object(), .node = PGD_JNODE_ANY};
    for (size_t i = 0; i < n; i++)
        if (b[i] == '"' || b[i] == '\\' || !step(&f, b[i])) return UINT32_MAX;
    return f.st == ST_STR ? f.len : UINT32_MAX;
}
