/*
 * engine/text/tokenizer_detok.c — token ids back to bytes: per-token pieces, whole sequences and
 * the incremental (streaming) detokenizer; interface in tokenizer_detok.h.
 *
 * Owns: the piece table (decoded bytes of every token, built once at load) and the pgd_detok
 * UTF-8 state machine.
 * Pieces: byte-level BPE maps each character of the byte-unicode alphabet back to its byte (a
 * character outside the alphabet keeps its UTF-8 bytes); SPM maps U+2581 to a space and a
 * <0xXX> byte token to its byte. Control and unknown tokens keep their text, which is emitted
 * only when the caller asks for special text; unused tokens have no piece.
 * Incremental invariant: a pgd_detok holds at most 3 bytes, always a valid proper prefix of a
 * UTF-8 character; everything it appended to the output is valid UTF-8.
 *
 * Threading: the piece table is immutable after load; a pgd_detok belongs to one thread.
 */
#include "engine/text/tokenizer_detok.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xXX>" -> the byte, else -1. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int h = hexval(s[3]), l = hexval(s[4]);
    return (h < 0 || l < 0) ? -1 : h * 16 + l;
}

/* Decode one code point starting at s (n bytes available); returns its length (1 on an invalid
 * sequence, with *cp = 0xFFFFFFFF). */
static size_t utf8_get(const unsigned char *s, size_t n, uint32_t *cp) {
    int len = pgd_utf8_seq_len(s[0]);
    *cp = 0xFFFFFFFFu;
    if (len == 0 || (size_t)len > n) return 1;
    if (len == 1) {
        *cp = s[0];
        return 1;
    }
    uint32_t c = s[0] & (0xFF >> (len + 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 1;
        c = c << 6 | (s[i] & 0x3F);
    }
    *cp = c;
    return (size_t)len;
}

/* Write the piece of token id into dst (which has room for 3 * its text length + 1 bytes)
 * and return its length. */
static size_t build_piece(const pgd__vocab *v, bool spm, int32_t id, char *dst) {
    size_t n;
    const char *t = pgd__vocab_text(v, id, &n);
    uint8_t type = v->types[id];
    if (type == PGD_TOKEN_UNUSED) return 0;
    if (type == PGD_TOKEN_BYTE) {
        int b = byte_token(t, n);
        if (b >= 0) {
            dst[0] = (char)b;
            return 1;
        }
    }
    if (type == PGD_TOKEN_CONTROL || type == PGD_TOKEN_UNKNOWN) {
        memcpy(dst, t, n);
        return n;
    }
    size_t m = 0;
    if (spm) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(t + i, "\xE2\x96\x81", 3)) {
                dst[m++] = ' ';
                i += 3;
            } else {
                dst[m++] = t[i++];
            }
        }
        return m;
    }
    if (type == PGD_TOKEN_USER_DEFINED) { /* stored as plain text in byte-level vocabularies */
        memcpy(dst, t, n);
        return n;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = utf8_get((const unsigned char *)t + i, n - i, &cp);
        int b = cp == 0xFFFFFFFFu ? -1 : pgd__vocab_cp_byte(cp);
        if (b >= 0) {
            dst[m++] = (char)b;
        } else {
            memcpy(dst + m, t + i, cl);
            m += cl;
        }
        i += cl;
    }
    return m;
}

int pgd__detok_build(pgd__detok_table *t, const pgd__vocab *v, bool spm, bool strip_first_space) {
    t->strip_first_space = strip_first_space;
    size_t total = v->text_off[v->n]; /* a piece is never longer than its text */
    t->piece = malloc(total + 1);
    t->piece_off = malloc((v->n + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off) return PGD_ENOMEM;
    uint32_t off = 0;
    for (size_t i = 0; i < v->n; i++) {
        t->piece_off[i] = off;
        off += (uint32_t)build_piece(v, spm, (int32_t)i, t->piece + off);
    }
    t->piece_off[v->n] = off;
    return 0;
}

void pgd__detok_free(pgd__detok_table *t) {
    free(t->piece);
    free(t->piece_off);
    memset(t, 0, sizeof *t);
}

/* The bytes of a token's piece as the caller wants them ({NULL,0} for hidden control text). */
static const char *piece_of(const pgd__detok_table *t, const pgd__vocab *v, int32_t id,
                            bool special, size_t *len) {
    uint8_t type = v->types[id];
    if (!special && (type == PGD_TOKEN_CONTROL || type == PGD_TOKEN_UNKNOWN)) {
        *len = 0;
        return "";
    }
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece + t->piece_off[id];
}

static int bad_id(const pgd__vocab *v, int32_t id) {
    return pgd_error_set(PGD_EINVAL, "token id %d out of range [0, %zu)", (int)id, v->n);
}

const char *pgd__detok_view(const pgd__detok_table *t, const pgd__vocab *v, int32_t id,
                            bool special, size_t *len) {
    if (id < 0 || (size_t)id >= v->n) {
        *len = 0;
        return NULL;
    }
    return piece_of(t, v, id, special, len);
}

int pgd__detok_piece(const pgd__detok_table *t, const pgd__vocab *v, int32_t id, bool special,
                     pgd_buf *out) {
    if (id < 0 || (size_t)id >= v->n) return bad_id(v, id);
    size_t n;
    const char *p = piece_of(t, v, id, special, &n);
    return pgd_buf_append(out, p, n);
}

int pgd__detok_ids(const pgd__detok_table *t, const pgd__vocab *v, const int32_t *ids, size_t n,
                   bool special, pgd_buf *out) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= v->n) return bad_id(v, ids[i]);
    size_t len0 = out->len;
    bool strip = t->strip_first_space;
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = piece_of(t, v, ids[i], special, &pl);
        if (pl == 0) continue;
        if (strip && p[0] == ' ') {
            p++;
            pl--;
        }
        strip = false;
        if (pgd_buf_append(out, p, pl)) {
            out->len = len0;
            if (out->data) out->data[len0] = '\0';
            return pgd_error_set(PGD_ENOMEM, "detokenize: out of memory");
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Incremental detokenizer.                                                                  */

void pgd__detok_init(pgd_detok *d, const pgd__detok_table *t, bool special) {
    memset(d, 0, sizeof *d);
    d->special = special;
    d->strip_leading_space = t->strip_first_space;
}

size_t pgd_detok_pending(const pgd_detok *d) {
    return d->n_pend;
}

static const char k_fffd[3] = {'\xEF', '\xBF', '\xBD'};

/* Feed bytes p[0..n) through the UTF-8 state machine, writing at w (room for 3 n + 3 bytes);
 * returns the new write position. */
static char *feed(pgd_detok *d, const unsigned char *p, size_t n, char *w) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (d->n_pend) {
            unsigned char lo = 0x80, hi = 0xBF;
            if (d->n_pend == 1) {
                switch (d->pend[0]) {
                case 0xE0:
                    lo = 0xA0;
                    break;
                case 0xED:
                    hi = 0x9F;
                    break;
                case 0xF0:
                    lo = 0x90;
                    break;
                case 0xF4:
                    hi = 0x8F;
                    break;
                default:
                    break;
                }
            }
            if (c >= lo && c <= hi) {
                d->pend[d->n_pend++] = c;
                if (d->n_pend == d->need) {
                    memcpy(w, d->pend, d->need);
                    w += d->need;
                    d->n_pend = 0;
                }
                continue;
            }
            /* The held bytes can never complete: one U+FFFD, then c starts afresh. */
            memcpy(w, k_fffd, 3);
            w += 3;
            d->n_pend = 0;
        }
        if (c < 0x80) {
            *w++ = (char)c;
        } else if (c >= 0xC2 && c <= 0xF4) {
            d->pend[0] = c;
            d->n_pend = 1;
            d->need = c <= 0xDF ? 2 : c <= 0xEF ? 3 : 4;
        } else {
            memcpy(w, k_fffd, 3);
            w += 3;
        }
    }
    return w;
}

int pgd__detok_push(pgd_detok *d, const pgd__detok_table *t, const pgd__vocab *v, int32_t id,
                    pgd_buf *out) {
    if (id < 0 || (size_t)id >= v->n) return bad_id(v, id);
    size_t n;
    const char *p = piece_of(t, v, id, d->special, &n);
    if (n == 0) return 0;
    if (n > (SIZE_MAX - 8) / 3 || pgd_buf_reserve(out, 3 * n + 3))
        return pgd_error_set(PGD_ENOMEM, "detokenize: out of memory");
    if (d->strip_leading_space) {
        d->strip_leading_space = false;
        if (p[0] == ' ') {
            p++;
            n--;
        }
    }
    char *w = feed(d, (const unsigned char *)p, n, out->data + out->len);
    out->len = (size_t)(w - out->data);
    out->data[out->len] = '\0';
    return 0;
}

int pgd_detok_flush(pgd_detok *d, pgd_buf *out) {
    if (!d->n_pend) return 0;
    d->n_pend = 0;
    return pgd_buf_append(out, k_fffd, 3);
}
