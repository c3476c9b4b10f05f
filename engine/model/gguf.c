/*
 * engine/model/gguf.c — GGUF v2/v3 reader: maps a file read-only and validates and indexes its
 * header, metadata and tensor infos.
 *
 * Owns: the mapping (or borrows the caller's memory for pgd_gguf_open_memory), the kv and
 * tensor arrays, a copy of every tensor name (NUL-terminated), the decoded children of string
 * arrays and arrays of arrays (in an arena), and two open-addressing hash tables (key -> kv,
 * name -> tensor).
 *
 * Layout (little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 vtype, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to the alignment, data section.
 *   string = u64 length + bytes; array = u32 element type, u64 count, elements.
 *
 * Invariants (all checked while parsing, before any allocation sized by the file):
 *   - every read is preceded by a bounds check against the bytes left (the cursor never passes
 *     the end); every count is refused when count * (smallest encoding of one element) exceeds
 *     the bytes left, so allocations are bounded by a small multiple of the file size;
 *   - every multiplication and addition of file-supplied numbers is overflow-checked;
 *   - keys and tensor names are unique; general.alignment, when present, is an unsigned integer,
 *     a non-zero power of two; each tensor has 1..4 dims >= 1, a known type, ne[0] a multiple of
 *     the block size, an aligned offset, and its bytes inside the file.
 *   Refusals return PGD_EFORMAT (PGD_EUNSUPPORTED for a version we do not read) with a detail
 *   naming the problem and its byte offset.
 *
 * Threading: open/close from one thread; an opened pgd_gguf is immutable and may be read from
 * any number of threads.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open(O_CLOEXEC), mmap; the build defines _GNU_SOURCE */
#endif
#include "engine/model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/error.h"

#define GGUF_HEADER_BYTES 24
/* Smallest encodings, used to refuse impossible counts before allocating. */
#define KV_MIN_BYTES    14 /* u64 key length + 1 key byte + u32 type + 1 value byte */
#define TI_MIN_BYTES    33 /* u64 name length + 1 name byte + u32 n_dims + u64 ne + u32 + u64 */
#define ARRAY_MIN_BYTES 12 /* u32 element type + u64 count */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
} arena_chunk;

struct pgd_gguf {
    const uint8_t *base; /* [size] the image */
    size_t size;
    void *map; /* mmap'd base (pgd_gguf_open) or NULL (borrowed memory) */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    size_t n_kv;
    pgd_gguf_kv *kvs; /* [n_kv] */
    size_t n_tensors;
    pgd_gguf_tensor *tensors; /* [n_tensors] */
    char *names;              /* all tensor names, each NUL-terminated */

    uint32_t *kv_slots; /* [kv_cap] index + 1 into kvs, 0 = empty */
    size_t kv_cap;      /* power of two >= 2 * n_kv */
    uint32_t *t_slots;  /* [t_cap] index + 1 into tensors */
    size_t t_cap;

    arena_chunk *arena; /* string-array indexes and array-of-array children */
};

/* ---- small helpers --------------------------------------------------------------------- */

/* A printable, bounded copy of file bytes for error messages. */
static const char *printable(pgd_str s, char buf[80]) {
    size_t n = s.len < 64 ? (size_t)s.len : 64, j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s.len > n) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = '\0';
    return buf;
}

static void *arena_alloc(pgd_gguf *g, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    arena_chunk *c = g->arena;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > (size_t)64 << 10 ? bytes : (size_t)64 << 10;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = g->arena;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    return p;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    return XXH3_64bits(p, n);
}

static size_t table_cap(size_t n) {
    size_t cap = 8;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* ---- cursor ------------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *base;
    size_t size, pos;
} cursor;

static size_t left(const cursor *c) {
    return c->size - c->pos;
}

static int need(const cursor *c, size_t n, const char *what) {
    if (n > left(c))
        return pgd_error_set(PGD_EFORMAT,
                             "truncated file: %s needs %zu bytes at byte %zu but only %zu are left",
                             what, n, c->pos, left(c));
    return 0;
}

static int rd_u32(cursor *c, const char *what, uint32_t *out) {
    int rc = need(c, 4, what);
    if (rc) return rc;
    *out = (uint32_t)rd_le(c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, const char *what, uint64_t *out) {
    int rc = need(c, 8, what);
    if (rc) return rc;
    *out = rd_le(c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, const char *what, pgd_str *out) {
    size_t at = c->pos;
    uint64_t len;
    int rc = rd_u64(c, what, &len);
    if (rc) return rc;
    if (len > left(c))
        return pgd_error_set(PGD_EFORMAT,
                             "%s at byte %zu has length %llu but only %zu bytes are left", what, at,
                             (unsigned long long)len, left(c));
    out->ptr = (const char *)c->base + c->pos;
    out->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* ---- metadata values --------------------------------------------------------------------- */

/* Bytes of one element of a fixed-size scalar type, 0 for STRING / ARRAY. */
static size_t scalar_size(uint32_t t) {
    switch (t) {
    case PGD_GGUF_UINT8:
    case PGD_GGUF_INT8:
    case PGD_GGUF_BOOL:
        return 1;
    case PGD_GGUF_UINT16:
    case PGD_GGUF_INT16:
        return 2;
    case PGD_GGUF_UINT32:
    case PGD_GGUF_INT32:
    case PGD_GGUF_FLOAT32:
        return 4;
    case PGD_GGUF_UINT64:
    case PGD_GGUF_INT64:
    case PGD_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static size_t min_elem_size(uint32_t t) {
    if (t == PGD_GGUF_STRING) return 8;
    if (t == PGD_GGUF_ARRAY) return ARRAY_MIN_BYTES;
    return scalar_size(t);
}

/* Decode a fixed-size scalar of type t at p into v (v->type set by the caller). */
static void decode_scalar(uint32_t t, const uint8_t *p, pgd_gguf_value *v) {
    uint64_t raw = rd_le(p, (int)scalar_size(t));
    switch (t) {
    case PGD_GGUF_UINT8:
    case PGD_GGUF_UINT16:
    case PGD_GGUF_UINT32:
    case PGD_GGUF_UINT64:
        v->v.u64 = raw;
        break;
    case PGD_GGUF_INT8:
        v->v.i64 = (int8_t)(uint8_t)raw;
        break;
    case PGD_GGUF_INT16:
        v->v.i64 = (int16_t)(uint16_t)raw;
        break;
    case PGD_GGUF_INT32:
        v->v.i64 = (int32_t)(uint32_t)raw;
        break;
    case PGD_GGUF_INT64:
        v->v.i64 = (int64_t)raw;
        break;
    case PGD_GGUF_FLOAT32: {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, sizeof f);
        v->v.f64 = f;
        break;
    }
    case PGD_GGUF_FLOAT64:
        memcpy(&v->v.f64, &raw, sizeof raw);
        break;
    case PGD_GGUF_BOOL:
        v->v.b = raw != 0;
        break;
    default:
        break;
    }
}

static int parse_value(pgd_gguf *g, cursor *c, uint32_t type, int depth, pgd_gguf_value *out);

static int parse_array(pgd_gguf *g, cursor *c, int depth, pgd_gguf_value *out) {
    size_t at = c->pos;
    uint32_t et;
    uint64_t n;
    int rc;
    if (depth >= PGD_GGUF_MAX_DEPTH)
        return pgd_error_set(PGD_EFORMAT, "array at byte %zu is nested deeper than %d levels", at,
                             PGD_GGUF_MAX_DEPTH);
    if ((rc = rd_u32(c, "array element type", &et))) return rc;
    if (et >= PGD_GGUF_VTYPE__COUNT)
        return pgd_error_set(PGD_EFORMAT, "unknown array element type %u at byte %zu", et, at);
    if ((rc = rd_u64(c, "array count", &n))) return rc;
    size_t esz = min_elem_size(et);
    if (n > left(c) / esz)
        return pgd_error_set(PGD_EFORMAT,
                             "array count %llu at byte %zu is impossible: %llu elements of type "
                             "%s need at least %zu bytes each and only %zu bytes are left",
                             (unsigned long long)n, at + 4, (unsigned long long)n,
                             pgd_gguf_vtype_name((pgd_gguf_vtype)et), esz, left(c));
    out->type = PGD_GGUF_ARRAY;
    out->v.arr.elem_type = (pgd_gguf_vtype)et;
    out->v.arr.n = n;
    out->v.arr.raw = NULL;
    out->v.arr.strs = NULL;
    out->v.arr.elems = NULL;
    if (et == PGD_GGUF_STRING) {
        if (n == 0) return 0;
        pgd_str *strs = arena_alloc(g, (size_t)n * sizeof *strs); /* n <= size / 8 */
        if (!strs) return pgd_error_set(PGD_ENOMEM, "out of memory for a string array");
        for (uint64_t i = 0; i < n; i++)
            if ((rc = rd_str(c, "array string", &strs[i]))) return rc;
        out->v.arr.strs = strs;
    } else if (et == PGD_GGUF_ARRAY) {
        if (n == 0) return 0;
        pgd_gguf_value *elems = arena_alloc(g, (size_t)n * sizeof *elems); /* n <= size / 12 */
        if (!elems) return pgd_error_set(PGD_ENOMEM, "out of memory for an array of arrays");
        for (uint64_t i = 0; i < n; i++)
            if ((rc = parse_array(g, c, depth + 1, &elems[i]))) return rc;
        out->v.arr.elems = elems;
    } else {
        /* n * esz <= left(c): checked above */
        const uint8_t *raw = c->base + c->pos;
        if (et == PGD_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (raw[i] > 1)
                    return pgd_error_set(PGD_EFORMAT, "bool value %u at byte %zu is not 0 or 1",
                                         raw[i], c->pos + (size_t)i);
        out->v.arr.raw = raw;
        c->pos += (size_t)n * esz;
    }
    return 0;
}

/* Parse one value of a type already read. `depth` counts the arrays around it. */
static int parse_value(pgd_gguf *g, cursor *c, uint32_t type, int depth, pgd_gguf_value *out) {
    int rc;
    if (type == PGD_GGUF_STRING) {
        out->type = PGD_GGUF_STRING;
        return rd_str(c, "string value", &out->v.str);
    }
    if (type == PGD_GGUF_ARRAY) return parse_array(g, c, depth, out);
    size_t sz = scalar_size(type);
    if ((rc = need(c, sz, pgd_gguf_vtype_name((pgd_gguf_vtype)type)))) return rc;
    if (type == PGD_GGUF_BOOL && c->base[c->pos] > 1)
        return pgd_error_set(PGD_EFORMAT, "bool value %u at byte %zu is not 0 or 1",
                             c->base[c->pos], c->pos);
    out->type = (pgd_gguf_vtype)type;
    decode_scalar(type, c->base + c->pos, out);
    c->pos += sz;
    return 0;
}

/* ---- hash tables ------------------------------------------------------------------------- */

static bool str_eq_bytes(pgd_str a, const char *p, size_t n) {
    return a.len == n && memcmp(a.ptr, p, n) == 0;
}

/* Insert kvs[i]; returns false if the key is already present. */
static bool kv_insert(pgd_gguf *g, size_t i) {
    pgd_str k = g->kvs[i].key;
    size_t mask = g->kv_cap - 1;
    for (size_t s = (size_t)hash_bytes(k.ptr, (size_t)k.len) & mask;; s = (s + 1) & mask) {
        uint32_t e = g->kv_slots[s];
        if (!e) {
            g->kv_slots[s] = (uint32_t)(i + 1);
            return true;
        }
        if (str_eq_bytes(g->kvs[e - 1].key, k.ptr, (size_t)k.len)) return false;
    }
}

/* Insert tensors[i] (named raw_names[i]); returns false if the name is already present. */
static bool t_insert(pgd_gguf *g, size_t i, pgd_str *raw_names) {
    pgd_str k = raw_names[i];
    size_t mask = g->t_cap - 1;
    for (size_t s = (size_t)hash_bytes(k.ptr, (size_t)k.len) & mask;; s = (s + 1) & mask) {
        uint32_t e = g->t_slots[s];
        if (!e) {
            g->t_slots[s] = (uint32_t)(i + 1);
            return true;
        }
        if (str_eq_bytes(raw_names[e - 1], k.ptr, (size_t)k.len)) return false;
    }
}

/* ---- parsing ----------------------------------------------------------------------------- */

static int check_version(uint32_t v) {
    if (v == 2 || v == 3) return 0;
    uint32_t sw = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
    if (v == 1)
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "GGUF version 1 (at byte 4) is not supported: only versions 2 and 3 "
                             "(re-convert the model with a current converter)");
    if (sw >= 1 && sw <= 3)
        return pgd_error_set(PGD_EUNSUPPORTED,
                             "big-endian GGUF is not supported: the version at byte 4 reads "
                             "0x%08x (version %u byte-swapped)",
                             v, sw);
    if (v == 0 || v > 0xffff)
        return pgd_error_set(PGD_EFORMAT, "implausible GGUF version %u (0x%08x) at byte 4", v, v);
    return pgd_error_set(PGD_EUNSUPPORTED,
                         "GGUF version %u (at byte 4) is not supported: only versions 2 and 3", v);
}

static int check_alignment(const pgd_gguf_value *v, size_t at, uint32_t *out) {
    uint64_t a;
    switch (v->type) {
    case PGD_GGUF_UINT8:
    case PGD_GGUF_UINT16:
    case PGD_GGUF_UINT32:
    case PGD_GGUF_UINT64:
        a = v->v.u64;
        break;
    default:
        return pgd_error_set(PGD_EFORMAT,
                             "general.alignment at byte %zu has type %s; it must be an unsigned "
                             "integer",
                             at, pgd_gguf_vtype_name(v->type));
    }
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
        return pgd_error_set(PGD_EFORMAT,
                             "general.alignment %llu at byte %zu is not a power of two in 1..2^30",
                             (unsigned long long)a, at);
    *out = (uint32_t)a;
    return 0;
}

static int parse_kvs(pgd_gguf *g, cursor *c) {
    char nb[80];
    int rc;
    for (size_t i = 0; i < g->n_kv; i++) {
        pgd_gguf_kv *kv = &g->kvs[i];
        size_t at = c->pos;
        if ((rc = rd_str(c, "metadata key", &kv->key))) return rc;
        if (kv->key.len == 0)
            return pgd_error_set(PGD_EFORMAT, "metadata key %zu at byte %zu is empty", i, at);
        if (kv->key.len > PGD_GGUF_MAX_KEY)
            return pgd_error_set(PGD_EFORMAT, "metadata key %zu at byte %zu is %llu bytes long", i,
                                 at, (unsigned long long)kv->key.len);
        if (!kv_insert(g, i))
            return pgd_error_set(PGD_EFORMAT, "duplicate metadata key '%s' at byte %zu",
                                 printable(kv->key, nb), at);
        size_t tat = c->pos;
        uint32_t type;
        if ((rc = rd_u32(c, "metadata value type", &type))) return rc;
        if (type >= PGD_GGUF_VTYPE__COUNT)
            return pgd_error_set(PGD_EFORMAT, "unknown value type %u for key '%s' at byte %zu",
                                 type, printable(kv->key, nb), tat);
        size_t vat = c->pos;
        if ((rc = parse_value(g, c, type, 0, &kv->value))) return rc;
        if (pgd_str_eq(kv->key, "general.alignment") &&
            (rc = check_alignment(&kv->value, vat, &g->alignment)))
            return rc;
    }
    return 0;
}

static int parse_tensor_infos(pgd_gguf *g, cursor *c, pgd_str *names, uint64_t *info_at) {
    char nb[80];
    int rc;
    for (size_t i = 0; i < g->n_tensors; i++) {
        pgd_gguf_tensor *t = &g->tensors[i];
        size_t at = c->pos;
        info_at[i] = at;
        if ((rc = rd_str(c, "tensor name", &names[i]))) return rc;
        pgd_str nm = names[i];
        if (nm.len == 0 || nm.len >= PGD_GGUF_MAX_NAME)
            return pgd_error_set(PGD_EFORMAT,
                                 "tensor %zu at byte %zu: name length %llu is not in 1..%d", i, at,
                                 (unsigned long long)nm.len, PGD_GGUF_MAX_NAME - 1);
        if (memchr(nm.ptr, '\0', (size_t)nm.len))
            return pgd_error_set(PGD_EFORMAT, "tensor %zu at byte %zu: name contains a NUL byte", i,
                                 at);
        if (!t_insert(g, i, names))
            return pgd_error_set(PGD_EFORMAT, "duplicate tensor name '%s' at byte %zu",
                                 printable(nm, nb), at);
        size_t dat = c->pos;
        if ((rc = rd_u32(c, "tensor n_dims", &t->n_dims))) return rc;
        if (t->n_dims < 1 || t->n_dims > PGD_GGUF_MAX_DIMS)
            return pgd_error_set(PGD_EFORMAT, "tensor '%s' at byte %zu: n_dims %u is not in 1..%d",
                                 printable(nm, nb), dat, t->n_dims, PGD_GGUF_MAX_DIMS);
        uint64_t nelem = 1;
        for (uint32_t d = 0; d < PGD_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d >= t->n_dims) continue;
            size_t eat = c->pos;
            if ((rc = rd_u64(c, "tensor dimension", &t->ne[d]))) return rc;
            if (t->ne[d] == 0)
                return pgd_error_set(PGD_EFORMAT, "tensor '%s': dimension %u at byte %zu is zero",
                                     printable(nm, nb), d, eat);
            if (__builtin_mul_overflow(nelem, t->ne[d], &nelem) || nelem > (uint64_t)INT64_MAX)
                return pgd_error_set(PGD_EFORMAT,
                                     "tensor '%s': element count overflows at dimension %u "
                                     "(byte %zu)",
                                     printable(nm, nb), d, eat);
        }
        t->nelem = nelem;
        size_t yat = c->pos;
        if ((rc = rd_u32(c, "tensor type", &t->type))) return rc;
        const pgd_type_traits *tt = pgd_type_info(t->type);
        if (!tt)
            return pgd_error_set(PGD_EFORMAT, "tensor '%s': unknown tensor type id %u at byte %zu",
                                 printable(nm, nb), t->type, yat);
        if (t->ne[0] % tt->block_size)
            return pgd_error_set(PGD_EFORMAT,
                                 "tensor '%s' at byte %zu: row length %llu is not a multiple of "
                                 "the %s block size %u",
                                 printable(nm, nb), at, (unsigned long long)t->ne[0], tt->name,
                                 tt->block_size);
        uint64_t row_bytes;
        if (pgd_row_bytes(t->type, t->ne[0], &row_bytes) ||
            __builtin_mul_overflow(row_bytes, nelem / t->ne[0], &t->nbytes))
            return pgd_error_set(PGD_EFORMAT, "tensor '%s' at byte %zu: byte size overflows",
                                 printable(nm, nb), at);
        size_t oat = c->pos;
        if ((rc = rd_u64(c, "tensor offset", &t->offset))) return rc;
        if (t->offset % g->alignment)
            return pgd_error_set(PGD_EFORMAT,
                                 "tensor '%s': offset %llu at byte %zu is not a multiple of the "
                                 "alignment %u",
                                 printable(nm, nb), (unsigned long long)t->offset, oat,
                                 g->alignment);
    }
    return 0;
}

static int parse(pgd_gguf *g) {
    cursor c = {g->base, g->size, 0};
    pgd_str *names = NULL;
    uint64_t *info_at = NULL;
    char nb[80];
    int rc;

    if (g->size < 4)
        return pgd_error_set(PGD_EFORMAT, "truncated file: %zu bytes, a GGUF header needs %d",
                             g->size, GGUF_HEADER_BYTES);
    if (memcmp(g->base, "GGUF", 4) != 0)
        return pgd_error_set(PGD_EFORMAT,
                             "bad magic %02x %02x %02x %02x at byte 0: not a GGUF file (expected "
                             "'GGUF')",
                             g->base[0], g->base[1], g->base[2], g->base[3]);
    c.pos = 4;
    if ((rc = rd_u32(&c, "GGUF version", &g->version))) return rc;
    if ((rc = check_version(g->version))) return rc;
    uint64_t n_tensors, n_kv;
    if ((rc = rd_u64(&c, "tensor count", &n_tensors))) return rc;
    if ((rc = rd_u64(&c, "metadata kv count", &n_kv))) return rc;
    if (n_kv > left(&c) / KV_MIN_BYTES || n_kv >= UINT32_MAX)
        return pgd_error_set(PGD_EFORMAT,
                             "metadata kv count %llu at byte 16 is impossible: only %zu bytes "
                             "follow the header (truncated file?)",
                             (unsigned long long)n_kv, left(&c));
    if (n_tensors > (left(&c) - n_kv * KV_MIN_BYTES) / TI_MIN_BYTES || n_tensors >= UINT32_MAX)
        return pgd_error_set(PGD_EFORMAT,
                             "tensor count %llu at byte 8 is impossible: only %zu bytes follow "
                             "the header for %llu kvs and the tensor infos (truncated file?)",
                             (unsigned long long)n_tensors, left(&c), (unsigned long long)n_kv);
    g->n_kv = (size_t)n_kv;
    g->n_tensors = (size_t)n_tensors;
    g->alignment = PGD_GGUF_DEFAULT_ALIGNMENT;

    /* metadata */
    g->kv_cap = table_cap(g->n_kv);
    g->kvs = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kvs);
    g->kv_slots = calloc(g->kv_cap, sizeof *g->kv_slots);
    if (!g->kvs || !g->kv_slots) return pgd_error_set(PGD_ENOMEM, "out of memory for metadata");
    if ((rc = parse_kvs(g, &c))) return rc;

    /* tensor infos */
    g->t_cap = table_cap(g->n_tensors);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    g->t_slots = calloc(g->t_cap, sizeof *g->t_slots);
    names = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *names);
    info_at = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *info_at);
    if (!g->tensors || !g->t_slots || !names || !info_at) {
        rc = pgd_error_set(PGD_ENOMEM, "out of memory for tensor infos");
        goto fail;
    }
    if ((rc = parse_tensor_infos(g, &c, names, info_at))) goto fail;

    /* data section: starts at the first aligned offset after the infos */
    uint64_t end = c.pos, pad = (g->alignment - end % g->alignment) % g->alignment;
    g->data_offset = end + pad; /* end < 2^64 - 2^30: no overflow */
    size_t total = 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        pgd_gguf_tensor *t = &g->tensors[i];
        uint64_t begin, stop;
        if (__builtin_add_overflow(g->data_offset, t->offset, &begin) ||
            __builtin_add_overflow(begin, t->nbytes, &stop) || stop > g->size) {
            rc = pgd_error_set(PGD_EFORMAT,
                               "tensor '%s' (info at byte %llu): data at offset %llu + %llu bytes "
                               "runs past the end of the file (%zu bytes, data section at %llu)",
                               printable(names[i], nb), (unsigned long long)info_at[i],
                               (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                               g->size, (unsigned long long)g->data_offset);
            goto fail;
        }
        t->data = g->base + begin;
        total += (size_t)names[i].len + 1; /* names lie inside the file: no overflow */
    }

    /* NUL-terminated copies of the names; the hash table already points at indexes */
    g->names = malloc(total ? total : 1);
    if (!g->names) {
        rc = pgd_error_set(PGD_ENOMEM, "out of memory for tensor names");
        goto fail;
    }
    char *p = g->names;
    for (size_t i = 0; i < g->n_tensors; i++) {
        memcpy(p, names[i].ptr, (size_t)names[i].len);
        p[names[i].len] = '\0';
        g->tensors[i].name = p;
        p += names[i].len + 1;
    }
    rc = 0;
fail:
    free(names);
    free(info_at);
    return rc;
}

/* ---- open / close ------------------------------------------------------------------------ */

static int open_image(const uint8_t *base, size_t size, void *map, pgd_gguf **out) {
    pgd_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (map) munmap(map, size);
        return pgd_error_set(PGD_ENOMEM, "out of memory");
    }
    g->base = base;
    g->size = size;
    g->map = map;
    int rc = parse(g);
    if (rc) {
        pgd_gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int pgd_gguf_open_memory(const void *data, size_t size, pgd_gguf **out) {
    if (!out) return pgd_error_set(PGD_EINVAL, "pgd_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return pgd_error_set(PGD_EINVAL, "pgd_gguf_open_memory: data is NULL");
    static const uint8_t empty[1];
    return open_image(data ? data : empty, size, NULL, out);
}

int pgd_gguf_open(const char *path, pgd_gguf **out) {
    if (!out) return pgd_error_set(PGD_EINVAL, "pgd_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return pgd_error_set(PGD_EINVAL, "pgd_gguf_open: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pgd_error_set(PGD_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return pgd_error_set(PGD_EIO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pgd_error_set(PGD_EIO, "%s is not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {
        close(fd);
        return pgd_gguf_open_memory(NULL, 0, out);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return pgd_error_set(PGD_EIO, "cannot mmap %s: %s", path, strerror(e));
    return open_image(map, size, map, out);
}

void pgd_gguf_close(pgd_gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    while (g->arena) {
        arena_chunk *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    free(g->kvs);
    free(g->kv_slots);
    free(g->tensors);
    free(g->t_slots);
    free(g->names);
    free(g);
}

uint32_t pgd_gguf_version(const pgd_gguf *g) {
    return g->version;
}
uint32_t pgd_gguf_alignment(const pgd_gguf *g) {
    return g->alignment;
}
uint64_t pgd_gguf_file_size(const pgd_gguf *g) {
    return g->size;
}
uint64_t pgd_gguf_data_offset(const pgd_gguf *g) {
    return g->data_offset;
}

/* ---- metadata lookups -------------------------------------------------------------------- */

size_t pgd_gguf_n_kv(const pgd_gguf *g) {
    return g->n_kv;
}

const pgd_gguf_kv *pgd_gguf_kv_at(const pgd_gguf *g, size_t i) {
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const pgd_gguf_value *pgd_gguf_find(const pgd_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    size_t n = strlen(key), mask = g->kv_cap - 1;
    for (size_t s = (size_t)hash_bytes(key, n) & mask;; s = (s + 1) & mask) {
        uint32_t e = g->kv_slots[s];
        if (!e) return NULL;
        if (str_eq_bytes(g->kvs[e - 1].key, key, n)) return &g->kvs[e - 1].value;
    }
}

static bool is_unsigned(pgd_gguf_vtype t) {
    return t == PGD_GGUF_UINT8 || t == PGD_GGUF_UINT16 || t == PGD_GGUF_UINT32 ||
           t == PGD_GGUF_UINT64;
}
static bool is_signed(pgd_gguf_vtype t) {
    return t == PGD_GGUF_INT8 || t == PGD_GGUF_INT16 || t == PGD_GGUF_INT32 || t == PGD_GGUF_INT64;
}

static int find_typed(const pgd_gguf *g, const char *key, const pgd_gguf_value **v) {
    *v = pgd_gguf_find(g, key);
    if (!*v) return pgd_error_set(PGD_ENOTFOUND, "metadata key '%s' not found", key ? key : "");
    return 0;
}

static int mismatch(const char *key, const pgd_gguf_value *v, const char *want) {
    return pgd_error_set(PGD_EINVAL, "metadata key '%s' has type %s, not convertible to %s", key,
                         pgd_gguf_vtype_name(v->type), want);
}

/* An integer value as (negative?, magnitude) for range checks. */
static int int_value(const pgd_gguf_value *v, bool *neg, uint64_t *mag) {
    if (is_unsigned(v->type)) {
        *neg = false;
        *mag = v->v.u64;
        return 0;
    }
    if (is_signed(v->type)) {
        *neg = v->v.i64 < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)v->v.i64 : (uint64_t)v->v.i64;
        return 0;
    }
    return -1;
}

int pgd_gguf_get_u32(const pgd_gguf *g, const char *key, uint32_t *out) {
    const pgd_gguf_value *v;
    int rc = find_typed(g, key, &v);
    if (rc) return rc;
    bool neg;
    uint64_t m;
    if (int_value(v, &neg, &m) || neg || m > UINT32_MAX) return mismatch(key, v, "uint32");
    *out = (uint32_t)m;
    return 0;
}

int pgd_gguf_get_u64(const pgd_gguf *g, const char *key, uint64_t *out) {
    const pgd_gguf_value *v;
    int rc = find_typed(g, key, &v);
    if (rc) return rc;
    bool neg;
    uint64_t m;
    if (int_value(v, &neg, &m) || neg) return mismatch(key, v, "uint64");
    *out = m;
    return 0;
}

static int to_i64(bool neg, uint64_t m, int64_t *out) {
    if (!neg && m > (uint64_t)INT64_MAX) return -1;
    if (neg && m > (uint64_t)INT64_MAX + 1) return -1;
    *out = neg ? (m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m) : (int64_t)m;
    return 0;
}

int pgd_gguf_get_i64(const pgd_gguf *g, const char *key, int64_t *out) {
    const pgd_gguf_value *v;
    int rc = find_typed(g, key, &v);
    if (rc) return rc;
    bool neg;
    uint64_t m;
    if (int_value(v, &neg, &m) || to_i64(neg, m, out)) return mismatch(key, v, "int64");
    return 0;
}

int pgd_gguf_get_f32(const pgd_gguf *g, const char *key, float *out) {
    const pgd_gguf_value *v;
    int rc = find_typed(g, key, &v);
    if (rc) return rc;
    if (v->type != PGD_GGUF_FLOAT32 && v->type != PGD_GGUF_FLOAT64)
        return mismatch(key, v, "float32");
    double d = v->v.f64;
    if (isfinite(d) && fabs(d) > FLT_MAX)
        return pgd_error_set(PGD_EINVAL, "metadata key '%s': %g does not fit a float32", key, d);
    *out = (float)d;
    return 0;
}

int pgd_gguf_get_bool(const pgd_gguf *g, const char *key, bool *out) {
    const pgd_gguf_value *v;
    int rc = find_typed(g, key, &v);
    if (rc) return rc;
    if (v->type != PGD_GGUF_BOOL) return mismatch(key, v, "bool");
    *out = v->v.b;
    return 0;
}

int pgd_gguf_get_str(const pgd_gguf *g, const char *key, pgd_str *out) {
    const pgd_gguf_value *v;
    int rc = find_typed(g, key, &v);
    if (rc) return rc;
    if (v->type != PGD_GGUF_STRING) return mismatch(key, v, "string");
    *out = v->v.str;
    return 0;
}

int pgd_gguf_get_arr(const pgd_gguf *g, const char *key, const pgd_gguf_value **out) {
    const pgd_gguf_value *v;
    int rc = find_typed(g, key, &v);
    if (rc) return rc;
    if (v->type != PGD_GGUF_ARRAY) return mismatch(key, v, "array");
    *out = v;
    return 0;
}

static int arr_check(const pgd_gguf_value *v, uint64_t i) {
    if (!v || v->type != PGD_GGUF_ARRAY)
        return pgd_error_set(PGD_EINVAL, "metadata value is not an array");
    if (i >= v->v.arr.n)
        return pgd_error_set(PGD_EINVAL, "array index %llu out of range (%llu elements)",
                             (unsigned long long)i, (unsigned long long)v->v.arr.n);
    return 0;
}

/* Element i of a fixed-size scalar array, decoded. */
static pgd_gguf_value arr_scalar(const pgd_gguf_value *v, uint64_t i) {
    pgd_gguf_value e;
    memset(&e, 0, sizeof e);
    e.type = v->v.arr.elem_type;
    decode_scalar(e.type, v->v.arr.raw + i * scalar_size(e.type), &e);
    return e;
}

int pgd_gguf_arr_i64(const pgd_gguf_value *v, uint64_t i, int64_t *out) {
    int rc = arr_check(v, i);
    if (rc) return rc;
    pgd_gguf_vtype et = v->v.arr.elem_type;
    if (!is_signed(et) && !is_unsigned(et))
        return pgd_error_set(PGD_EINVAL, "array of %s, not of integers", pgd_gguf_vtype_name(et));
    pgd_gguf_value e = arr_scalar(v, i);
    bool neg;
    uint64_t m;
    int_value(&e, &neg, &m);
    if (to_i64(neg, m, out))
        return pgd_error_set(PGD_EINVAL, "array element %llu does not fit an int64",
                             (unsigned long long)i);
    return 0;
}

int pgd_gguf_arr_f64(const pgd_gguf_value *v, uint64_t i, double *out) {
    int rc = arr_check(v, i);
    if (rc) return rc;
    pgd_gguf_vtype et = v->v.arr.elem_type;
    if (et != PGD_GGUF_FLOAT32 && et != PGD_GGUF_FLOAT64)
        return pgd_error_set(PGD_EINVAL, "array of %s, not of floats", pgd_gguf_vtype_name(et));
    *out = arr_scalar(v, i).v.f64;
    return 0;
}

int pgd_gguf_arr_str(const pgd_gguf_value *v, uint64_t i, pgd_str *out) {
    int rc = arr_check(v, i);
    if (rc) return rc;
    if (v->v.arr.elem_type != PGD_GGUF_STRING)
        return pgd_error_set(PGD_EINVAL, "array of %s, not of strings",
                             pgd_gguf_vtype_name(v->v.arr.elem_type));
    *out = v->v.arr.strs[i];
    return 0;
}

const char *pgd_gguf_vtype_name(pgd_gguf_vtype t) {
    static const char *const names[PGD_GGUF_VTYPE__COUNT] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64",
    };
    if ((unsigned)t >= PGD_GGUF_VTYPE__COUNT) return "?";
    return names[t];
}

/* ---- tensors ----------------------------------------------------------------------------- */

size_t pgd_gguf_n_tensors(const pgd_gguf *g) {
    return g->n_tensors;
}

const pgd_gguf_tensor *pgd_gguf_tensor_at(const pgd_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const pgd_gguf_tensor *pgd_gguf_find_tensor(const pgd_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    size_t n = strlen(name), mask = g->t_cap - 1;
    for (size_t s = (size_t)hash_bytes(name, n) & mask;; s = (s + 1) & mask) {
        uint32_t e = g->t_slots[s];
        if (!e) return NULL;
        const char *tn = g->tensors[e - 1].name;
        if (strlen(tn) == n && memcmp(tn, name, n) == 0) return &g->tensors[e - 1];
    }
}

int pgd_gguf_tensor_row_f32(const pgd_gguf_tensor *t, uint64_t row, float *dst) {
    if (!t || !dst || t->ne[0] == 0)
        return pgd_error_set(PGD_EINVAL, "pgd_gguf_tensor_row_f32: NULL argument or empty row");
    uint64_t rows = t->nelem / t->ne[0], rb;
    if (row >= rows)
        return pgd_error_set(PGD_EINVAL, "tensor '%s': row %llu out of range (%llu rows)", t->name,
                             (unsigned long long)row, (unsigned long long)rows);
    int rc = pgd_row_bytes(t->type, t->ne[0], &rb);
    if (rc) return rc;
    return pgd_dequant_row(t->type, (const uint8_t *)t->data + row * rb, dst, (int64_t)t->ne[0]);
}
