/*
 * tests/unit/test_gguf.c — the GGUF reader against images built here, byte by byte.
 *
 * A small in-test writer builds valid v2/v3 images (every metadata type, nested and empty
 * arrays, default and custom alignment, tensors of several types with values worked out by
 * hand) and checks what the parser reports. Then crafted corrupt images, each refused with a
 * negative code and a detail naming the problem; every truncation of a valid image; and
 * thousands of random byte flips (parse or refuse, never crash — run under ASan+UBSan too).
 * Every image is parsed from a heap buffer of exactly its size so over-reads are caught.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* mkstemp; the build defines _GNU_SOURCE */
#endif
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/model/gguf.h"
#include "kernels/cpu/quant.h"
#include "testutil.h"

/* ---- writer ------------------------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static void wput(wbuf *b, const void *d, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        PGD_ASSERT(b->p);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void wle(wbuf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    wput(b, t, (size_t)n);
}
static void w8(wbuf *b, uint8_t v) {
    wle(b, v, 1);
}
static void w16(wbuf *b, uint16_t v) {
    wle(b, v, 2);
}
static void w32(wbuf *b, uint32_t v) {
    wle(b, v, 4);
}
static void w64(wbuf *b, uint64_t v) {
    wle(b, v, 8);
}
static void wf32(wbuf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    w32(b, u);
}
static void wf64(wbuf *b, double f) {
    uint64_t u;
    memcpy(&u, &f, 8);
    w64(b, u);
}
static void wstrn(wbuf *b, const char *s, size_t n) {
    w64(b, n);
    wput(b, s, n);
}
static void wstr(wbuf *b, const char *s) {
    wstrn(b, s, strlen(s));
}
static void wkey(wbuf *b, const char *key, uint32_t type) {
    wstr(b, key);
    w32(b, type);
}
static void wpad(wbuf *b, size_t align) {
    while (b->len % align) w8(b, 0);
}
static void whdr(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    wput(b, "GGUF", 4);
    w32(b, version);
    w64(b, n_tensors);
    w64(b, n_kv);
}
static void wtinfo(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                   uint64_t offset) {
    wstr(b, name);
    w32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) w64(b, ne[i]);
    w32(b, type);
    w64(b, offset);
}
static void wfree(wbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* Parse a copy of exactly `len` bytes (so ASan sees any over-read). *copy is the caller's. */
static int parse_copy(const uint8_t *img, size_t len, pgd_gguf **g, uint8_t **copy) {
    *copy = malloc(len ? len : 1);
    PGD_ASSERT(*copy);
    if (len) memcpy(*copy, img, len);
    return pgd_gguf_open_memory(*copy, len, g);
}

/* ---- the valid image ----------------------------------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint8_t data[160];
    size_t nbytes;
} tdef;

enum { N_TDEFS = 8 };

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void putf(uint8_t *p, float f) {
    memcpy(p, &f, 4);
}

/* Tensors with hand-worked contents; the last one ends the file. */
static void make_tensors(tdef t[N_TDEFS]) {
    memset(t, 0, sizeof(tdef) * N_TDEFS);
    t[0] = (tdef){.name = "w.f32", .n_dims = 2, .ne = {3, 2}, .type = PGD_TYPE_F32, .nbytes = 24};
    for (int i = 0; i < 6; i++) putf(t[0].data + 4 * i, 0.5f * (float)i);

    t[1] = (tdef){.name = "w.f16", .n_dims = 1, .ne = {4}, .type = PGD_TYPE_F16, .nbytes = 8};
    put16(t[1].data, 0x3c00), put16(t[1].data + 2, 0xc000);
    put16(t[1].data + 4, 0x3800), put16(t[1].data + 6, 0x7bff); /* 1, -2, 0.5, 65504 */

    /* Q8_0 [32, 2]: row 0 d = 0.5, q = j - 16; row 1 d = 2, q = -j */
    t[2] =
        (tdef){.name = "w.q8_0", .n_dims = 2, .ne = {32, 2}, .type = PGD_TYPE_Q8_0, .nbytes = 68};
    put16(t[2].data, 0x3800);
    put16(t[2].data + 34, 0x4000);
    for (int j = 0; j < 32; j++) {
        t[2].data[2 + j] = (uint8_t)(int8_t)(j - 16);
        t[2].data[36 + j] = (uint8_t)(int8_t)(-j);
    }

    /* Q4_1 [64]: block 0 d = 1, m = -2, nibbles j | (15 - j) << 4; block 1 d = .25, m = .5,
     * every byte 0x5a (low 10, high 5) */
    t[3] = (tdef){.name = "w.q4_1", .n_dims = 1, .ne = {64}, .type = PGD_TYPE_Q4_1, .nbytes = 40};
    put16(t[3].data, 0x3c00), put16(t[3].data + 2, 0xc000);
    for (int j = 0; j < 16; j++) t[3].data[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    put16(t[3].data + 20, 0x3400), put16(t[3].data + 22, 0x3800);
    memset(t[3].data + 24, 0x5a, 16);

    /* Q4_K [256]: d = dmin = 1; scales sc_j = j + 1, mins 0 for j < 4 and 1 for j >= 4;
     * every qs byte 0x21 (low nibble 1 -> even sub-blocks, high nibble 2 -> odd ones) */
    t[4] = (tdef){.name = "w.q4_k", .n_dims = 1, .ne = {256}, .type = PGD_TYPE_Q4_K, .nbytes = 144};
    put16(t[4].data, 0x3c00), put16(t[4].data + 2, 0x3c00);
    for (int j = 0; j < 4; j++) {
        t[4].data[4 + j] = (uint8_t)(j + 1);
        t[4].data[4 + 8 + j] = (uint8_t)((j + 5) | (1 << 4));
    }
    memset(t[4].data + 16, 0x21, 128);

    t[5] =
        (tdef){.name = "w.4d", .n_dims = 4, .ne = {2, 1, 3, 1}, .type = PGD_TYPE_F32, .nbytes = 24};
    for (int i = 0; i < 6; i++) putf(t[5].data + 4 * i, -1.0f - (float)i);

    t[6] =
        (tdef){.name = "w.iq4_nl", .n_dims = 1, .ne = {32}, .type = PGD_TYPE_IQ4_NL, .nbytes = 18};
    memset(t[6].data, 0x11, 18);

    t[7] = (tdef){.name = "w.bf16", .n_dims = 1, .ne = {2}, .type = PGD_TYPE_BF16, .nbytes = 4};
    put16(t[7].data, 0x3f80), put16(t[7].data + 2, 0xc040); /* 1, -3 */
}

/* Metadata with every value type. Returns the kv count. */
static uint64_t write_kvs(wbuf *b, uint32_t alignment) {
    uint64_t n = 0;
    wkey(b, "general.architecture", PGD_GGUF_STRING), wstr(b, "llama"), n++;
    wkey(b, "t.u8", PGD_GGUF_UINT8), w8(b, 200), n++;
    wkey(b, "t.i8", PGD_GGUF_INT8), w8(b, (uint8_t)(int8_t)-100), n++;
    wkey(b, "t.u16", PGD_GGUF_UINT16), w16(b, 60000), n++;
    wkey(b, "t.i16", PGD_GGUF_INT16), w16(b, (uint16_t)(int16_t)-30000), n++;
    wkey(b, "t.u32", PGD_GGUF_UINT32), w32(b, 4000000000u), n++;
    wkey(b, "t.i32", PGD_GGUF_INT32), w32(b, (uint32_t)INT32_C(-2000000000)), n++;
    wkey(b, "t.i32pos", PGD_GGUF_INT32), w32(b, 12345), n++;
    wkey(b, "t.f32", PGD_GGUF_FLOAT32), wf32(b, 1.5f), n++;
    wkey(b, "t.bool", PGD_GGUF_BOOL), w8(b, 1), n++;
    wkey(b, "t.false", PGD_GGUF_BOOL), w8(b, 0), n++;
    wkey(b, "t.str", PGD_GGUF_STRING), wstr(b, "h\xc3\xa9llo"), n++;
    wkey(b, "t.empty_str", PGD_GGUF_STRING), wstr(b, ""), n++;
    if (alignment) wkey(b, "general.alignment", PGD_GGUF_UINT32), w32(b, alignment), n++;
    wkey(b, "t.u64", PGD_GGUF_UINT64), w64(b, (UINT64_C(1) << 63) + 5), n++;
    wkey(b, "t.i64", PGD_GGUF_INT64), w64(b, (uint64_t)(-(INT64_C(1) << 62) - 3)), n++;
    wkey(b, "t.f64", PGD_GGUF_FLOAT64), wf64(b, 0.1), n++;
    wkey(b, "t.f64big", PGD_GGUF_FLOAT64), wf64(b, 1e300), n++;

    wkey(b, "t.arr_i32", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_INT32), w64(b, 3);
    w32(b, 1), w32(b, (uint32_t)-2), w32(b, 3), n++;
    wkey(b, "t.arr_str", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_STRING), w64(b, 3);
    wstr(b, "a"), wstr(b, ""), wstr(b, "ccc"), n++;
    wkey(b, "t.arr_empty", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_UINT32), w64(b, 0), n++;
    wkey(b, "t.arr_empty_str", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_STRING), w64(b, 0), n++;
    wkey(b, "t.arr_f32", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_FLOAT32), w64(b, 2);
    wf32(b, 0.5f), wf32(b, -2.0f), n++;
    wkey(b, "t.arr_f64", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_FLOAT64), w64(b, 1), wf64(b, 1e-300);
    n++;
    wkey(b, "t.arr_u64", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_UINT64), w64(b, 2);
    w64(b, UINT64_MAX), w64(b, 7), n++;
    wkey(b, "t.arr_i8", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_INT8), w64(b, 2);
    w8(b, 0xff), w8(b, 127), n++;
    wkey(b, "t.arr_u16", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_UINT16), w64(b, 1), w16(b, 65535), n++;
    wkey(b, "t.arr_bool", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_BOOL), w64(b, 2), w8(b, 1), w8(b, 0);
    n++;
    /* [[1, 2] (int16), [] (int16), ["x"]] */
    wkey(b, "t.arr_nested", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_ARRAY), w64(b, 3);
    w32(b, PGD_GGUF_INT16), w64(b, 2), w16(b, 1), w16(b, 2);
    w32(b, PGD_GGUF_INT16), w64(b, 0);
    w32(b, PGD_GGUF_STRING), w64(b, 1), wstr(b, "x"), n++;
    /* an array of 2 empty arrays of float64 */
    wkey(b, "t.arr_of_empty", PGD_GGUF_ARRAY), w32(b, PGD_GGUF_ARRAY), w64(b, 2);
    w32(b, PGD_GGUF_FLOAT64), w64(b, 0), w32(b, PGD_GGUF_FLOAT64), w64(b, 0), n++;
    /* the deepest nesting allowed: 8 arrays, the innermost holds uint8 42 */
    wkey(b, "t.arr_deep", PGD_GGUF_ARRAY);
    for (int d = 0; d < PGD_GGUF_MAX_DEPTH - 1; d++) w32(b, PGD_GGUF_ARRAY), w64(b, 1);
    w32(b, PGD_GGUF_UINT8), w64(b, 1), w8(b, 42), n++;
    return n;
}

/* A valid image: alignment 0 means "no general.alignment key" (the default, 32). The last
 * tensor's data ends the file. Returns the offset where the data section starts. */
static size_t build_valid(wbuf *b, uint32_t version, uint32_t alignment) {
    tdef t[N_TDEFS];
    make_tensors(t);
    uint32_t a = alignment ? alignment : PGD_GGUF_DEFAULT_ALIGNMENT;
    wbuf kv = {0};
    uint64_t n_kv = write_kvs(&kv, alignment);
    whdr(b, version, N_TDEFS, n_kv);
    wput(b, kv.p, kv.len);
    wfree(&kv);
    uint64_t off = 0;
    for (int i = 0; i < N_TDEFS; i++) {
        wtinfo(b, t[i].name, t[i].n_dims, t[i].ne, t[i].type, off);
        off = (off + t[i].nbytes + a - 1) / a * a;
    }
    wpad(b, a);
    size_t data = b->len;
    for (int i = 0; i < N_TDEFS; i++) {
        wput(b, t[i].data, t[i].nbytes);
        if (i + 1 < N_TDEFS) wpad(b, a);
    }
    return data;
}

/* ---- checks on a valid image ----------------------------------------------------------- */

static void check_metadata(const pgd_gguf *g) {
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool bl;
    pgd_str s;
    const pgd_gguf_value *a;

    CHECK_EQ_INT(pgd_gguf_get_str(g, "general.architecture", &s), 0);
    CHECK(pgd_str_eq(s, "llama"));
    /* integers convert between widths when the value fits */
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.u8", &u32), 0);
    CHECK_EQ_INT(u32, 200);
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.u16", &u32), 0);
    CHECK_EQ_INT(u32, 60000);
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.u32", &u32), 0);
    CHECK_EQ_INT(u32, 4000000000u);
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.i32pos", &u32), 0);
    CHECK_EQ_INT(u32, 12345);
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.i8", &u32), PGD_EINVAL);  /* negative */
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.u64", &u32), PGD_EINVAL); /* too big */
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.f32", &u32), PGD_EINVAL);
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.bool", &u32), PGD_EINVAL);
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.str", &u32), PGD_EINVAL);
    CHECK_EQ_INT(pgd_gguf_get_u64(g, "t.u64", &u64), 0);
    CHECK(u64 == (UINT64_C(1) << 63) + 5);
    CHECK_EQ_INT(pgd_gguf_get_u64(g, "t.i16", &u64), PGD_EINVAL);
    CHECK_EQ_INT(pgd_gguf_get_u64(g, "t.i32pos", &u64), 0);
    CHECK(u64 == 12345);
    CHECK_EQ_INT(pgd_gguf_get_i64(g, "t.i8", &i64), 0);
    CHECK_EQ_INT(i64, -100);
    CHECK_EQ_INT(pgd_gguf_get_i64(g, "t.i16", &i64), 0);
    CHECK_EQ_INT(i64, -30000);
    CHECK_EQ_INT(pgd_gguf_get_i64(g, "t.i32", &i64), 0);
    CHECK_EQ_INT(i64, -2000000000);
    CHECK_EQ_INT(pgd_gguf_get_i64(g, "t.i64", &i64), 0);
    CHECK(i64 == -(INT64_C(1) << 62) - 3);
    CHECK_EQ_INT(pgd_gguf_get_i64(g, "t.u32", &i64), 0);
    CHECK_EQ_INT(i64, 4000000000LL);
    CHECK_EQ_INT(pgd_gguf_get_i64(g, "t.u64", &i64), PGD_EINVAL); /* > INT64_MAX */
    /* floats */
    CHECK_EQ_INT(pgd_gguf_get_f32(g, "t.f32", &f), 0);
    CHECK(f == 1.5f);
    CHECK_EQ_INT(pgd_gguf_get_f32(g, "t.f64", &f), 0);
    CHECK(f == 0.1f);
    CHECK_EQ_INT(pgd_gguf_get_f32(g, "t.f64big", &f), PGD_EINVAL);
    CHECK_EQ_INT(pgd_gguf_get_f32(g, "t.u32", &f), PGD_EINVAL);
    CHECK(pgd_gguf_find(g, "t.f64")->v.f64 == 0.1);
    /* bool, string */
    CHECK_EQ_INT(pgd_gguf_get_bool(g, "t.bool", &bl), 0);
    CHECK(bl == true);
    CHECK_EQ_INT(pgd_gguf_get_bool(g, "t.false", &bl), 0);
    CHECK(bl == false);
    CHECK_EQ_INT(pgd_gguf_get_bool(g, "t.u8", &bl), PGD_EINVAL);
    CHECK_EQ_INT(pgd_gguf_get_str(g, "t.str", &s), 0);
    CHECK(s.len == 6 && memcmp(s.ptr, "h\xc3\xa9llo", 6) == 0);
    CHECK_EQ_INT(pgd_gguf_get_str(g, "t.empty_str", &s), 0);
    CHECK_EQ_INT(s.len, 0);
    CHECK_EQ_INT(pgd_gguf_get_str(g, "t.u8", &s), PGD_EINVAL);
    /* absent keys, including prefixes and extensions of present ones */
    pgd_error_clear();
    CHECK_EQ_INT(pgd_gguf_get_u32(g, "t.nope", &u32), PGD_ENOTFOUND);
    CHECK(pgd_error_detail()[0] != '\0');
    CHECK_EQ_INT(pgd_gguf_get_u64(g, "t.u", &u64), PGD_ENOTFOUND);
    CHECK_EQ_INT(pgd_gguf_get_i64(g, "t.u88", &i64), PGD_ENOTFOUND);
    CHECK_EQ_INT(pgd_gguf_get_f32(g, "", &f), PGD_ENOTFOUND);
    CHECK_EQ_INT(pgd_gguf_get_bool(g, "T.BOOL", &bl), PGD_ENOTFOUND);
    CHECK_EQ_INT(pgd_gguf_get_str(g, "general", &s), PGD_ENOTFOUND);
    CHECK_EQ_INT(pgd_gguf_get_arr(g, "t.arr", &a), PGD_ENOTFOUND);
    CHECK(pgd_gguf_find(g, "t.arr_i3") == NULL);

    /* arrays */
    CHECK_EQ_INT(pgd_gguf_get_arr(g, "t.str", &a), PGD_EINVAL);
    REQUIRE(pgd_gguf_get_arr(g, "t.arr_i32", &a) == 0);
    CHECK_EQ_INT(a->v.arr.elem_type, PGD_GGUF_INT32);
    CHECK_EQ_INT(a->v.arr.n, 3);
    CHECK(a->v.arr.raw != NULL && a->v.arr.strs == NULL && a->v.arr.elems == NULL);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 1, &i64), 0);
    CHECK_EQ_INT(i64, -2);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 2, &i64), 0);
    CHECK_EQ_INT(i64, 3);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 3, &i64), PGD_EINVAL); /* out of range */
    double d;
    CHECK_EQ_INT(pgd_gguf_arr_f64(a, 0, &d), PGD_EINVAL);
    CHECK_EQ_INT(pgd_gguf_arr_str(a, 0, &s), PGD_EINVAL);

    REQUIRE(pgd_gguf_get_arr(g, "t.arr_str", &a) == 0);
    CHECK_EQ_INT(a->v.arr.n, 3);
    CHECK_EQ_INT(pgd_gguf_arr_str(a, 0, &s), 0);
    CHECK(pgd_str_eq(s, "a"));
    CHECK_EQ_INT(pgd_gguf_arr_str(a, 1, &s), 0);
    CHECK_EQ_INT(s.len, 0);
    CHECK_EQ_INT(pgd_gguf_arr_str(a, 2, &s), 0);
    CHECK(pgd_str_eq(s, "ccc"));
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), PGD_EINVAL);

    REQUIRE(pgd_gguf_get_arr(g, "t.arr_empty", &a) == 0);
    CHECK_EQ_INT(a->v.arr.n, 0);
    CHECK_EQ_INT(a->v.arr.elem_type, PGD_GGUF_UINT32);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), PGD_EINVAL);
    REQUIRE(pgd_gguf_get_arr(g, "t.arr_empty_str", &a) == 0);
    CHECK_EQ_INT(a->v.arr.n, 0);
    CHECK_EQ_INT(pgd_gguf_arr_str(a, 0, &s), PGD_EINVAL);

    REQUIRE(pgd_gguf_get_arr(g, "t.arr_f32", &a) == 0);
    CHECK_EQ_INT(pgd_gguf_arr_f64(a, 0, &d), 0);
    CHECK(d == 0.5);
    CHECK_EQ_INT(pgd_gguf_arr_f64(a, 1, &d), 0);
    CHECK(d == -2.0);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), PGD_EINVAL);
    REQUIRE(pgd_gguf_get_arr(g, "t.arr_f64", &a) == 0);
    CHECK_EQ_INT(pgd_gguf_arr_f64(a, 0, &d), 0);
    CHECK(d == 1e-300);
    REQUIRE(pgd_gguf_get_arr(g, "t.arr_u64", &a) == 0);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), PGD_EINVAL); /* UINT64_MAX does not fit */
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 1, &i64), 0);
    CHECK_EQ_INT(i64, 7);
    CHECK(a->v.arr.raw[0] == 0xff && a->v.arr.raw[15] == 0); /* raw little-endian elements */
    REQUIRE(pgd_gguf_get_arr(g, "t.arr_i8", &a) == 0);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), 0);
    CHECK_EQ_INT(i64, -1);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 1, &i64), 0);
    CHECK_EQ_INT(i64, 127);
    REQUIRE(pgd_gguf_get_arr(g, "t.arr_u16", &a) == 0);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), 0);
    CHECK_EQ_INT(i64, 65535);
    REQUIRE(pgd_gguf_get_arr(g, "t.arr_bool", &a) == 0);
    CHECK_EQ_INT(a->v.arr.elem_type, PGD_GGUF_BOOL);
    CHECK(a->v.arr.raw[0] == 1 && a->v.arr.raw[1] == 0);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), PGD_EINVAL);

    REQUIRE(pgd_gguf_get_arr(g, "t.arr_nested", &a) == 0);
    CHECK_EQ_INT(a->v.arr.elem_type, PGD_GGUF_ARRAY);
    REQUIRE(a->v.arr.n == 3 && a->v.arr.elems != NULL);
    const pgd_gguf_value *e = a->v.arr.elems;
    CHECK_EQ_INT(e[0].type, PGD_GGUF_ARRAY);
    CHECK_EQ_INT(e[0].v.arr.elem_type, PGD_GGUF_INT16);
    CHECK_EQ_INT(e[0].v.arr.n, 2);
    CHECK_EQ_INT(pgd_gguf_arr_i64(&e[0], 1, &i64), 0);
    CHECK_EQ_INT(i64, 2);
    CHECK_EQ_INT(e[1].v.arr.n, 0);
    CHECK_EQ_INT(e[2].v.arr.elem_type, PGD_GGUF_STRING);
    CHECK_EQ_INT(pgd_gguf_arr_str(&e[2], 0, &s), 0);
    CHECK(pgd_str_eq(s, "x"));
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), PGD_EINVAL); /* elements are arrays */

    REQUIRE(pgd_gguf_get_arr(g, "t.arr_of_empty", &a) == 0);
    REQUIRE(a->v.arr.n == 2 && a->v.arr.elems);
    CHECK(a->v.arr.elems[0].v.arr.n == 0 && a->v.arr.elems[1].v.arr.n == 0);
    CHECK_EQ_INT(a->v.arr.elems[1].v.arr.elem_type, PGD_GGUF_FLOAT64);

    REQUIRE(pgd_gguf_get_arr(g, "t.arr_deep", &a) == 0);
    for (int lvl = 0; lvl < PGD_GGUF_MAX_DEPTH - 1; lvl++) {
        REQUIRE(a->v.arr.elem_type == PGD_GGUF_ARRAY && a->v.arr.n == 1 && a->v.arr.elems);
        a = &a->v.arr.elems[0];
    }
    CHECK_EQ_INT(a->v.arr.elem_type, PGD_GGUF_UINT8);
    CHECK_EQ_INT(pgd_gguf_arr_i64(a, 0, &i64), 0);
    CHECK_EQ_INT(i64, 42);
    CHECK_EQ_INT(pgd_gguf_arr_i64(pgd_gguf_find(g, "t.u8"), 0, &i64), PGD_EINVAL); /* scalar */
    CHECK_EQ_INT(pgd_gguf_arr_i64(NULL, 0, &i64), PGD_EINVAL);

    /* kv order is file order */
    const pgd_gguf_kv *kv0 = pgd_gguf_kv_at(g, 0), *kv1 = pgd_gguf_kv_at(g, 1);
    REQUIRE(kv0 && kv1);
    CHECK(pgd_str_eq(kv0->key, "general.architecture"));
    CHECK(pgd_str_eq(kv1->key, "t.u8"));
    CHECK_EQ_INT(kv1->value.type, PGD_GGUF_UINT8);
    CHECK_EQ_INT(kv1->value.v.u64, 200);
    CHECK(pgd_gguf_kv_at(g, pgd_gguf_n_kv(g)) == NULL);
    for (size_t i = 0; i < pgd_gguf_n_kv(g); i++) { /* every key finds its own kv */
        const pgd_gguf_kv *kv = pgd_gguf_kv_at(g, i);
        char key[128];
        REQUIRE(kv->key.len < sizeof key);
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = '\0';
        CHECK(pgd_gguf_find(g, key) == &kv->value);
    }
    CHECK_EQ_STR(pgd_gguf_vtype_name(PGD_GGUF_UINT32), "uint32");
    CHECK_EQ_STR(pgd_gguf_vtype_name(PGD_GGUF_ARRAY), "array");
    CHECK_EQ_STR(pgd_gguf_vtype_name((pgd_gguf_vtype)77), "?");
}

static void check_tensors(const pgd_gguf *g, const uint8_t *img, size_t data_off) {
    tdef t[N_TDEFS];
    make_tensors(t);
    REQUIRE(pgd_gguf_n_tensors(g) == N_TDEFS);
    CHECK_EQ_INT(pgd_gguf_data_offset(g), data_off);
    uint32_t a = pgd_gguf_alignment(g);
    for (int i = 0; i < N_TDEFS; i++) {
        const pgd_gguf_tensor *x = pgd_gguf_tensor_at(g, (size_t)i);
        REQUIRE(x != NULL);
        CHECK_EQ_STR(x->name, t[i].name);
        CHECK(pgd_gguf_find_tensor(g, t[i].name) == x);
        CHECK_EQ_INT(x->n_dims, t[i].n_dims);
        uint64_t nelem = 1;
        for (int d = 0; d < 4; d++) {
            uint64_t want = d < (int)t[i].n_dims ? t[i].ne[d] : 1;
            CHECK_EQ_INT(x->ne[d], want);
            nelem *= want;
        }
        CHECK_EQ_INT(x->nelem, nelem);
        CHECK_EQ_INT(x->type, t[i].type);
        CHECK_EQ_INT(x->nbytes, t[i].nbytes);
        CHECK_EQ_INT(x->offset % a, 0);
        CHECK(x->data == img + data_off + x->offset);
        CHECK(memcmp(x->data, t[i].data, t[i].nbytes) == 0);
    }
    CHECK(pgd_gguf_tensor_at(g, N_TDEFS) == NULL);
    CHECK(pgd_gguf_find_tensor(g, "w.f3") == NULL);
    CHECK(pgd_gguf_find_tensor(g, "w.f32.") == NULL);
    CHECK(pgd_gguf_find_tensor(g, "") == NULL);
    /* the last tensor ends the file */
    const pgd_gguf_tensor *last = pgd_gguf_tensor_at(g, N_TDEFS - 1);
    CHECK((const uint8_t *)last->data + last->nbytes == img + pgd_gguf_file_size(g));

    float y[256];
    const pgd_gguf_tensor *x = pgd_gguf_find_tensor(g, "w.f32");
    REQUIRE(x);
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 1, y), 0);
    CHECK(y[0] == 1.5f && y[1] == 2.0f && y[2] == 2.5f);
    pgd_error_clear();
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 2, y), PGD_EINVAL); /* 2 rows only */
    CHECK(pgd_error_detail()[0] != '\0');

    REQUIRE((x = pgd_gguf_find_tensor(g, "w.f16")));
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 0, y), 0);
    CHECK(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0.5f && y[3] == 65504.0f);

    REQUIRE((x = pgd_gguf_find_tensor(g, "w.q8_0")));
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 0, y), 0);
    CHECK(y[0] == -8.0f && y[16] == 0.0f && y[31] == 7.5f);
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 1, y), 0);
    CHECK(y[0] == 0.0f && y[1] == -2.0f && y[31] == -62.0f);

    REQUIRE((x = pgd_gguf_find_tensor(g, "w.q4_1")));
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 0, y), 0);
    CHECK(y[0] == -2.0f && y[15] == 13.0f && y[16] == 13.0f && y[31] == -2.0f);
    CHECK(y[32] == 3.0f && y[47] == 3.0f && y[48] == 1.75f && y[63] == 1.75f);

    REQUIRE((x = pgd_gguf_find_tensor(g, "w.q4_k")));
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 0, y), 0);
    static const float sub[8] = {1, 4, 3, 8, 4, 11, 6, 15}; /* sc_j * q - m_j */
    int bad = 0;
    for (int j = 0; j < 256; j++) bad += y[j] != sub[j / 32];
    CHECK_EQ_INT(bad, 0);

    REQUIRE((x = pgd_gguf_find_tensor(g, "w.4d")));
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 2, y), 0); /* 3 rows of 2 */
    CHECK(y[0] == -5.0f && y[1] == -6.0f);
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 3, y), PGD_EINVAL);

    REQUIRE((x = pgd_gguf_find_tensor(g, "w.iq4_nl")));
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 0, y), PGD_EUNSUPPORTED); /* known, no dequant */

    REQUIRE((x = pgd_gguf_find_tensor(g, "w.bf16")));
    CHECK_EQ_INT(pgd_gguf_tensor_row_f32(x, 0, y), 0);
    CHECK(y[0] == 1.0f && y[1] == -3.0f);
}

static void check_valid(uint32_t version, uint32_t alignment) {
    wbuf b = {0};
    size_t data_off = build_valid(&b, version, alignment);
    uint32_t a = alignment ? alignment : 32;
    CHECK_EQ_INT(data_off % a, 0);
    pgd_gguf *g = NULL;
    uint8_t *copy;
    int rc = parse_copy(b.p, b.len, &g, &copy);
    if (rc) fprintf(stderr, "  v%u align %u: %s\n", version, alignment, pgd_error_detail());
    CHECK_EQ_INT(rc, 0);
    if (g) {
        CHECK_EQ_INT(pgd_gguf_version(g), version);
        CHECK_EQ_INT(pgd_gguf_alignment(g), a);
        CHECK_EQ_INT(pgd_gguf_file_size(g), b.len);
        CHECK_EQ_INT(pgd_gguf_n_kv(g), alignment ? 31 : 30);
        check_metadata(g);
        check_tensors(g, copy, data_off);
    }
    pgd_gguf_close(g);
    free(copy);
    wfree(&b);
}

static void test_valid_v2_default_alignment(void) {
    check_valid(2, 0);
}
static void test_valid_v3_alignment_64(void) {
    check_valid(3, 64);
}
static void test_valid_v3_alignment_8(void) {
    check_valid(3, 8);
}
static void test_valid_v3_alignment_1(void) {
    check_valid(3, 1);
}

static void test_empty_model(void) {
    wbuf b = {0};
    whdr(&b, 3, 0, 0);
    pgd_gguf *g = NULL;
    uint8_t *copy;
    CHECK_EQ_INT(parse_copy(b.p, b.len, &g, &copy), 0);
    if (g) {
        CHECK_EQ_INT(pgd_gguf_n_kv(g), 0);
        CHECK_EQ_INT(pgd_gguf_n_tensors(g), 0);
        CHECK(pgd_gguf_find(g, "x") == NULL);
        CHECK(pgd_gguf_find_tensor(g, "x") == NULL);
        CHECK(pgd_gguf_kv_at(g, 0) == NULL);
        CHECK_EQ_INT(pgd_gguf_data_offset(g), 32);
    }
    pgd_gguf_close(g);
    pgd_gguf_close(NULL);
    free(copy);
    wfree(&b);
    pgd_gguf *h = (pgd_gguf *)&b;
    CHECK_EQ_INT(pgd_gguf_open_memory(NULL, 10, &h), PGD_EINVAL);
    CHECK(h == NULL);
    CHECK_EQ_INT(pgd_gguf_open_memory("GGUF", 4, NULL), PGD_EINVAL);
}

/* Many keys and tensors: every one is found, absent ones are not (exercises the hash probing). */
static void test_many_entries(void) {
    enum { NKV = 3000, NT = 1500 };
    wbuf b = {0};
    char name[64];
    whdr(&b, 3, NT, NKV);
    for (int i = 0; i < NKV; i++) {
        snprintf(name, sizeof name, "k.%d", i);
        wkey(&b, name, PGD_GGUF_UINT32), w32(&b, (uint32_t)i * 7u);
    }
    for (int i = 0; i < NT; i++) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        uint64_t ne[1] = {1};
        wtinfo(&b, name, 1, ne, PGD_TYPE_F32, (uint64_t)i * 32);
    }
    wpad(&b, 32);
    for (int i = 0; i < NT; i++) {
        wf32(&b, (float)i);
        if (i + 1 < NT) wpad(&b, 32);
    }
    pgd_gguf *g = NULL;
    uint8_t *copy;
    CHECK_EQ_INT(parse_copy(b.p, b.len, &g, &copy), 0);
    if (g) {
        int bad = 0;
        for (int i = 0; i < NKV; i++) {
            uint32_t v = 0;
            snprintf(name, sizeof name, "k.%d", i);
            bad += pgd_gguf_get_u32(g, name, &v) != 0 || v != (uint32_t)i * 7u;
            snprintf(name, sizeof name, "k.%d.", i);
            bad += pgd_gguf_find(g, name) != NULL;
        }
        for (int i = 0; i < NT; i++) {
            float y = -1;
            snprintf(name, sizeof name, "blk.%d.w", i);
            const pgd_gguf_tensor *t = pgd_gguf_find_tensor(g, name);
            bad += t != pgd_gguf_tensor_at(g, (size_t)i);
            bad += !t || pgd_gguf_tensor_row_f32(t, 0, &y) != 0 || y != (float)i;
            snprintf(name, sizeof name, "blk.%d.x", i);
            bad += pgd_gguf_find_tensor(g, name) != NULL;
        }
        CHECK_EQ_INT(bad, 0);
    }
    pgd_gguf_close(g);
    free(copy);
    wfree(&b);
}

/* ---- corrupt images -------------------------------------------------------------------- */

/* A small valid file: one u32 kv and tensor "t" F32 [4] at offset 0. */
static void mini(wbuf *b, uint32_t version) {
    whdr(b, version, 1, 1);
    wkey(b, "general.x", PGD_GGUF_UINT32), w32(b, 1);
    uint64_t ne[1] = {4};
    wtinfo(b, "t", 1, ne, PGD_TYPE_F32, 0);
    wpad(b, 32);
    for (int i = 0; i < 4; i++) wf32(b, (float)i);
}

/* header with one tensor and no kv, then its data (data_bytes of zeros) */
static void one_tensor(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes) {
    whdr(b, 3, 1, 0);
    wtinfo(b, name, n_dims, ne, type, offset);
    wpad(b, 32);
    for (size_t i = 0; i < data_bytes; i++) w8(b, 0);
}

/* header + one kv of the given type whose value bytes the caller writes next */
static void one_kv(wbuf *b, const char *key, uint32_t type) {
    whdr(b, 3, 0, 1);
    wkey(b, key, type);
}

static void pad_bytes(wbuf *b, size_t n) {
    for (size_t i = 0; i < n; i++) w8(b, 0);
}

static void c_bad_magic(wbuf *b) {
    mini(b, 3);
    b->p[3] = 'X';
}
static void c_version1(wbuf *b) {
    mini(b, 1);
}
static void c_version4(wbuf *b) {
    mini(b, 4);
}
static void c_version0(wbuf *b) {
    mini(b, 0);
}
static void c_big_endian(wbuf *b) {
    mini(b, 3);
    b->p[4] = 0, b->p[5] = 0, b->p[6] = 0, b->p[7] = 3;
}
static void c_truncated_header(wbuf *b) {
    wput(b, "GGUF", 4);
    w32(b, 3);
    w32(b, 0);
}
static void c_empty_file(wbuf *b) {
    (void)b;
}
static void c_three_bytes(wbuf *b) {
    wput(b, "GGU", 3);
}
static void c_absurd_kv_count(wbuf *b) {
    whdr(b, 3, 0, UINT64_C(1) << 60);
    pad_bytes(b, 64);
}
static void c_absurd_tensor_count(wbuf *b) {
    whdr(b, 3, UINT64_C(1) << 60, 0);
    pad_bytes(b, 64);
}
static void c_max_counts(wbuf *b) {
    whdr(b, 3, UINT64_MAX, UINT64_MAX);
    pad_bytes(b, 64);
}
static void c_kv_count_one_too_many(wbuf *b) {
    whdr(b, 3, 0, 2);
    wkey(b, "a.rather.long.key.name.to.pass.the.count.check", PGD_GGUF_UINT32), w32(b, 1);
}
static void c_absurd_key_length(wbuf *b) {
    whdr(b, 3, 0, 1);
    w64(b, UINT64_C(1) << 63);
    pad_bytes(b, 32);
}
static void c_key_length_max(wbuf *b) {
    whdr(b, 3, 0, 1);
    w64(b, UINT64_MAX);
    pad_bytes(b, 32);
}
static void c_empty_key(wbuf *b) {
    one_kv(b, "", PGD_GGUF_UINT32);
    w32(b, 5);
}
static void c_key_too_long(wbuf *b) {
    static char key[PGD_GGUF_MAX_KEY + 2];
    memset(key, 'k', PGD_GGUF_MAX_KEY + 1);
    one_kv(b, key, PGD_GGUF_UINT8);
    w8(b, 1);
}
static void c_string_value_past_end(wbuf *b) {
    one_kv(b, "general.name", PGD_GGUF_STRING);
    w64(b, 100);
    wput(b, "short", 5);
}
static void c_absurd_array_count(wbuf *b) {
    one_kv(b, "a.arr", PGD_GGUF_ARRAY);
    w32(b, PGD_GGUF_INT32), w64(b, UINT64_C(1) << 61);
    pad_bytes(b, 16);
}
static void c_array_count_one_too_many(wbuf *b) {
    one_kv(b, "a.arr", PGD_GGUF_ARRAY);
    w32(b, PGD_GGUF_UINT64), w64(b, 3);
    w64(b, 1), w64(b, 2), w32(b, 0); /* 2.5 elements */
}
static void c_string_array_count(wbuf *b) {
    one_kv(b, "a.arr", PGD_GGUF_ARRAY);
    w32(b, PGD_GGUF_STRING), w64(b, 1000);
    wstr(b, "a"), wstr(b, "b"), wstr(b, "c");
}
static void c_string_in_array_past_end(wbuf *b) {
    one_kv(b, "a.arr", PGD_GGUF_ARRAY);
    w32(b, PGD_GGUF_STRING), w64(b, 2);
    wstr(b, "a"), w64(b, 1000), wput(b, "xyzxyzxyz", 9);
}
static void c_array_of_arrays_count(wbuf *b) {
    one_kv(b, "a.arr", PGD_GGUF_ARRAY);
    w32(b, PGD_GGUF_ARRAY), w64(b, UINT64_C(1) << 40);
    pad_bytes(b, 24);
}
static void c_nesting_too_deep(wbuf *b) {
    one_kv(b, "a.deep", PGD_GGUF_ARRAY);
    for (int d = 0; d < PGD_GGUF_MAX_DEPTH; d++) w32(b, PGD_GGUF_ARRAY), w64(b, 1);
    w32(b, PGD_GGUF_UINT8), w64(b, 1), w8(b, 42); /* the ninth array */
}
static void c_unknown_value_type(wbuf *b) {
    one_kv(b, "a.b", 13);
    w32(b, 0);
}
static void c_unknown_value_type_huge(wbuf *b) {
    one_kv(b, "a.b", 0xffffffffu);
    w32(b, 0);
}
static void c_unknown_array_elem_type(wbuf *b) {
    one_kv(b, "a.arr", PGD_GGUF_ARRAY);
    w32(b, 13), w64(b, 1), w32(b, 0);
}
static void c_unknown_nested_elem_type(wbuf *b) {
    one_kv(b, "a.arr", PGD_GGUF_ARRAY);
    w32(b, PGD_GGUF_ARRAY), w64(b, 1), w32(b, 99), w64(b, 0);
}
static void c_bool_value_2(wbuf *b) {
    one_kv(b, "a.flag", PGD_GGUF_BOOL);
    w8(b, 2);
}
static void c_bool_array_value(wbuf *b) {
    one_kv(b, "a.flags", PGD_GGUF_ARRAY);
    w32(b, PGD_GGUF_BOOL), w64(b, 3), w8(b, 1), w8(b, 0), w8(b, 0x80);
}
static void c_truncated_scalar(wbuf *b) {
    one_kv(b, "a.big", PGD_GGUF_UINT64);
    w32(b, 7); /* 4 of 8 bytes */
}
static void c_duplicate_key(wbuf *b) {
    whdr(b, 3, 0, 3);
    wkey(b, "general.name", PGD_GGUF_STRING), wstr(b, "a");
    wkey(b, "general.other", PGD_GGUF_UINT8), w8(b, 1);
    wkey(b, "general.name", PGD_GGUF_STRING), wstr(b, "b");
}
static void alignment_kv(wbuf *b, uint32_t type, uint64_t v) {
    whdr(b, 3, 1, 1);
    wkey(b, "general.alignment", type);
    if (type == PGD_GGUF_STRING)
        wstr(b, "32");
    else if (type == PGD_GGUF_FLOAT32)
        wf32(b, 32.0f);
    else if (type == PGD_GGUF_UINT64)
        w64(b, v);
    else
        w32(b, (uint32_t)v);
    uint64_t ne[1] = {4};
    wtinfo(b, "t", 1, ne, PGD_TYPE_F32, 0);
    wpad(b, 32);
    pad_bytes(b, 16);
}
static void c_alignment_zero(wbuf *b) {
    alignment_kv(b, PGD_GGUF_UINT32, 0);
}
static void c_alignment_48(wbuf *b) {
    alignment_kv(b, PGD_GGUF_UINT32, 48);
}
static void c_alignment_2_pow_31(wbuf *b) {
    alignment_kv(b, PGD_GGUF_UINT32, 1u << 31);
}
static void c_alignment_2_pow_40(wbuf *b) {
    alignment_kv(b, PGD_GGUF_UINT64, UINT64_C(1) << 40);
}
static void c_alignment_int32(wbuf *b) {
    alignment_kv(b, PGD_GGUF_INT32, 32);
}
static void c_alignment_string(wbuf *b) {
    alignment_kv(b, PGD_GGUF_STRING, 0);
}
static void c_alignment_float(wbuf *b) {
    alignment_kv(b, PGD_GGUF_FLOAT32, 0);
}
static void c_unknown_tensor_type(wbuf *b) {
    uint64_t ne[1] = {4};
    one_tensor(b, "t", 1, ne, 99, 0, 16);
}
static void c_retired_tensor_type(wbuf *b) {
    uint64_t ne[1] = {32};
    one_tensor(b, "t", 1, ne, 4, 0, 64);
}
static void c_n_dims_0(wbuf *b) {
    uint64_t ne[1] = {4};
    one_tensor(b, "t", 0, ne, PGD_TYPE_F32, 0, 64);
}
static void c_n_dims_5(wbuf *b) {
    uint64_t ne[5] = {1, 1, 1, 1, 1};
    one_tensor(b, "t", 5, ne, PGD_TYPE_F32, 0, 16);
}
static void c_n_dims_huge(wbuf *b) {
    whdr(b, 3, 1, 0);
    wstr(b, "t");
    w32(b, 0x80000001u), w64(b, 4), w32(b, PGD_TYPE_F32), w64(b, 0);
    wpad(b, 32);
    pad_bytes(b, 64);
}
static void c_zero_dim(wbuf *b) {
    uint64_t ne[2] = {4, 0};
    one_tensor(b, "t", 2, ne, PGD_TYPE_F32, 0, 16);
}
static void c_dims_product_overflow(wbuf *b) {
    uint64_t ne[2] = {UINT64_C(1) << 32, UINT64_C(1) << 32};
    one_tensor(b, "t", 2, ne, PGD_TYPE_F32, 0, 16);
}
static void c_nelem_over_int64(wbuf *b) {
    uint64_t ne[3] = {UINT64_C(1) << 32, UINT64_C(1) << 30, 2};
    one_tensor(b, "t", 3, ne, PGD_TYPE_I8, 0, 16);
}
static void c_row_bytes_overflow(wbuf *b) {
    uint64_t ne[1] = {UINT64_C(1) << 62}; /* 2^62 F32 = 2^64 bytes */
    one_tensor(b, "t", 1, ne, PGD_TYPE_F32, 0, 16);
}
static void c_size_overflow(wbuf *b) {
    uint64_t ne[2] = {1, UINT64_C(1) << 61}; /* 2^61 F64 rows of 8 bytes */
    one_tensor(b, "t", 2, ne, PGD_TYPE_F64, 0, 16);
}
static void c_ne0_not_block_multiple(wbuf *b) {
    uint64_t ne[2] = {33, 2};
    one_tensor(b, "t", 2, ne, PGD_TYPE_Q4_0, 0, 128);
}
static void c_misaligned_offset(wbuf *b) {
    uint64_t ne[1] = {4};
    one_tensor(b, "t", 1, ne, PGD_TYPE_F32, 8, 64);
}
static void c_misaligned_custom_alignment(wbuf *b) {
    whdr(b, 3, 1, 1);
    wkey(b, "general.alignment", PGD_GGUF_UINT32), w32(b, 64);
    uint64_t ne[1] = {4};
    wtinfo(b, "t", 1, ne, PGD_TYPE_F32, 32); /* aligned to 32, not 64 */
    wpad(b, 64);
    pad_bytes(b, 128);
}
static void c_offset_past_eof(wbuf *b) {
    uint64_t ne[1] = {4};
    one_tensor(b, "t", 1, ne, PGD_TYPE_F32, UINT64_C(1) << 40, 16);
}
static void c_tensor_runs_past_eof(wbuf *b) {
    uint64_t ne[2] = {32, 2};
    one_tensor(b, "t", 2, ne, PGD_TYPE_Q8_0, 0, 67); /* needs 68 */
}
static void c_offset_plus_size_overflow(wbuf *b) {
    uint64_t ne[1] = {8};
    one_tensor(b, "t", 1, ne, PGD_TYPE_F32, UINT64_MAX - 31, 32);
}
static void c_data_section_past_eof(wbuf *b) {
    whdr(b, 3, 1, 1);
    wkey(b, "general.alignment", PGD_GGUF_UINT32), w32(b, 1u << 20);
    uint64_t ne[1] = {4};
    wtinfo(b, "t", 1, ne, PGD_TYPE_F32, 0);
    pad_bytes(b, 64);
}
static void c_second_tensor_past_eof(wbuf *b) {
    whdr(b, 3, 2, 0);
    uint64_t ne[1] = {8};
    wtinfo(b, "a", 1, ne, PGD_TYPE_F32, 0);
    wtinfo(b, "b", 1, ne, PGD_TYPE_F32, 32);
    wpad(b, 32);
    pad_bytes(b, 32 + 31);
}
static void c_duplicate_tensor_name(wbuf *b) {
    whdr(b, 3, 2, 0);
    uint64_t ne[1] = {8};
    wtinfo(b, "blk.0.w", 1, ne, PGD_TYPE_F32, 0);
    wtinfo(b, "blk.0.w", 1, ne, PGD_TYPE_F32, 32);
    wpad(b, 32);
    pad_bytes(b, 64);
}
static void c_empty_tensor_name(wbuf *b) {
    uint64_t ne[1] = {4};
    one_tensor(b, "", 1, ne, PGD_TYPE_F32, 0, 16);
}
static void c_long_tensor_name(wbuf *b) {
    char name[PGD_GGUF_MAX_NAME + 1];
    memset(name, 'n', PGD_GGUF_MAX_NAME);
    name[PGD_GGUF_MAX_NAME] = '\0';
    uint64_t ne[1] = {4};
    one_tensor(b, name, 1, ne, PGD_TYPE_F32, 0, 16);
}
static void c_tensor_name_with_nul(wbuf *b) {
    whdr(b, 3, 1, 0);
    wstrn(b, "ab\0cd", 5);
    w32(b, 1), w64(b, 4), w32(b, PGD_TYPE_F32), w64(b, 0);
    wpad(b, 32);
    pad_bytes(b, 16);
}
static void c_tensor_name_past_end(wbuf *b) {
    whdr(b, 3, 1, 0);
    w64(b, 1000);
    pad_bytes(b, 40);
}
static void c_truncated_tensor_info(wbuf *b) {
    whdr(b, 3, 1, 0);
    wstr(b, "a.tensor.with.a.long.enough.name.to.pass");
    w32(b, 4), w64(b, 16); /* then the other three dims are missing */
}

typedef struct {
    const char *name;
    void (*build)(wbuf *);
    int code;
    const char *detail; /* a substring the detail must contain */
} corrupt_case;

#define FMT PGD_EFORMAT
#define UNS PGD_EUNSUPPORTED
static const corrupt_case k_cases[] = {
    {"bad magic", c_bad_magic, FMT, "magic"},
    {"version 1", c_version1, UNS, "version 1"},
    {"version 4", c_version4, UNS, "version 4"},
    {"version 0", c_version0, FMT, "version"},
    {"big-endian", c_big_endian, UNS, "big-endian"},
    {"truncated header", c_truncated_header, FMT, "truncated"},
    {"empty file", c_empty_file, FMT, "truncated"},
    {"three bytes", c_three_bytes, FMT, "truncated"},
    {"absurd kv count", c_absurd_kv_count, FMT, "kv count"},
    {"absurd tensor count", c_absurd_tensor_count, FMT, "tensor count"},
    {"max counts", c_max_counts, FMT, "count"},
    {"kv count one too many", c_kv_count_one_too_many, FMT, "truncated"},
    {"absurd key length", c_absurd_key_length, FMT, "length"},
    {"key length UINT64_MAX", c_key_length_max, FMT, "length"},
    {"empty key", c_empty_key, FMT, "empty"},
    {"key too long", c_key_too_long, FMT, "bytes long"},
    {"string value past end", c_string_value_past_end, FMT, "length 100"},
    {"absurd array count", c_absurd_array_count, FMT, "array count"},
    {"array count one too many", c_array_count_one_too_many, FMT, "array count"},
    {"absurd string array count", c_string_array_count, FMT, "array count 1000"},
    {"string in array past end", c_string_in_array_past_end, FMT, "length 1000"},
    {"absurd array-of-arrays count", c_array_of_arrays_count, FMT, "array count"},
    {"array nesting too deep", c_nesting_too_deep, FMT, "nested deeper"},
    {"unknown value type", c_unknown_value_type, FMT, "unknown value type 13"},
    {"unknown value type 0xffffffff", c_unknown_value_type_huge, FMT, "unknown value type"},
    {"unknown array element type", c_unknown_array_elem_type, FMT, "element type 13"},
    {"unknown nested element type", c_unknown_nested_elem_type, FMT, "element type 99"},
    {"bool value 2", c_bool_value_2, FMT, "bool"},
    {"bool array value 0x80", c_bool_array_value, FMT, "bool"},
    {"truncated scalar", c_truncated_scalar, FMT, "truncated"},
    {"duplicate key", c_duplicate_key, FMT, "duplicate metadata key 'general.name'"},
    {"alignment 0", c_alignment_zero, FMT, "general.alignment 0"},
    {"alignment 48", c_alignment_48, FMT, "power of two"},
    {"alignment 2^31", c_alignment_2_pow_31, FMT, "power of two"},
    {"alignment 2^40 (uint64)", c_alignment_2_pow_40, FMT, "power of two"},
    {"alignment int32", c_alignment_int32, FMT, "unsigned integer"},
    {"alignment string", c_alignment_string, FMT, "unsigned integer"},
    {"alignment float32", c_alignment_float, FMT, "unsigned integer"},
    {"unknown tensor type", c_unknown_tensor_type, FMT, "unknown tensor type id 99"},
    {"retired tensor type", c_retired_tensor_type, FMT, "unknown tensor type id 4"},
    {"n_dims 0", c_n_dims_0, FMT, "n_dims 0"},
    {"n_dims 5", c_n_dims_5, FMT, "n_dims 5"},
    {"n_dims 2^31+1", c_n_dims_huge, FMT, "n_dims"},
    {"zero dim", c_zero_dim, FMT, "dimension 1"},
    {"dims product overflow", c_dims_product_overflow, FMT, "overflows"},
    {"element count over INT64_MAX", c_nelem_over_int64, FMT, "overflows"},
    {"row byte size overflow", c_row_bytes_overflow, FMT, "byte size overflows"},
    {"tensor byte size overflow", c_size_overflow, FMT, "byte size overflows"},
    {"ne0 not a block multiple", c_ne0_not_block_multiple, FMT, "block size 32"},
    {"misaligned offset", c_misaligned_offset, FMT, "alignment 32"},
    {"misaligned for custom alignment", c_misaligned_custom_alignment, FMT, "alignment 64"},
    {"offset past EOF", c_offset_past_eof, FMT, "past the end"},
    {"tensor runs past EOF", c_tensor_runs_past_eof, FMT, "past the end"},
    {"offset + size overflow", c_offset_plus_size_overflow, FMT, "past the end"},
    {"data section past EOF", c_data_section_past_eof, FMT, "past the end"},
    {"second tensor past EOF", c_second_tensor_past_eof, FMT, "'b'"},
    {"duplicate tensor name", c_duplicate_tensor_name, FMT, "duplicate tensor name 'blk.0.w'"},
    {"empty tensor name", c_empty_tensor_name, FMT, "name length 0"},
    {"tensor name too long", c_long_tensor_name, FMT, "name length 256"},
    {"tensor name with NUL", c_tensor_name_with_nul, FMT, "NUL"},
    {"tensor name past end", c_tensor_name_past_end, FMT, "length 1000"},
    {"truncated tensor info", c_truncated_tensor_info, FMT, "truncated"},
};
#undef FMT
#undef UNS

static void test_corrupt_files(void) {
    CHECK(PGD_ARRAY_LEN(k_cases) >= 25);
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_cases); i++) {
        const corrupt_case *c = &k_cases[i];
        wbuf b = {0};
        c->build(&b);
        pgd_error_clear();
        pgd_gguf *g = (pgd_gguf *)&b; /* must be reset to NULL */
        uint8_t *copy;
        int rc = parse_copy(b.p, b.len, &g, &copy);
        const char *d = pgd_error_detail();
        bool ok = rc == c->code && g == NULL && d[0] != '\0' && strstr(d, c->detail) != NULL;
        if (!ok) {
            fprintf(stderr, "  case '%s': rc %d (want %d), detail \"%s\" (want \"%s\")\n", c->name,
                    rc, c->code, d, c->detail);
            tu_failed_checks++;
        }
        if (rc == 0) pgd_gguf_close(g);
        free(copy);
        wfree(&b);
    }
    /* the mini image the header cases start from is itself valid */
    wbuf b = {0};
    mini(&b, 3);
    pgd_gguf *g = NULL;
    uint8_t *copy;
    CHECK_EQ_INT(parse_copy(b.p, b.len, &g, &copy), 0);
    pgd_gguf_close(g);
    free(copy);
    wfree(&b);
}

/* ---- truncation and random damage ------------------------------------------------------- */

/* Touch everything a parsed image exposes, so ASan sees any out-of-range pointer. */
static unsigned walk_value(const pgd_gguf_value *v, int depth) {
    unsigned h = (unsigned)v->type;
    if (v->type == PGD_GGUF_STRING) {
        for (uint64_t i = 0; i < v->v.str.len; i++) h += (unsigned char)v->v.str.ptr[i];
        return h;
    }
    if (v->type != PGD_GGUF_ARRAY) return h;
    PGD_ASSERT(depth < PGD_GGUF_MAX_DEPTH);
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        int64_t x;
        double f;
        pgd_str s;
        switch (v->v.arr.elem_type) {
        case PGD_GGUF_STRING:
            PGD_ASSERT(pgd_gguf_arr_str(v, i, &s) == 0);
            for (uint64_t k = 0; k < s.len; k++) h += (unsigned char)s.ptr[k];
            break;
        case PGD_GGUF_ARRAY:
            h += walk_value(&v->v.arr.elems[i], depth + 1);
            break;
        case PGD_GGUF_FLOAT32:
        case PGD_GGUF_FLOAT64:
            PGD_ASSERT(pgd_gguf_arr_f64(v, i, &f) == 0);
            h += f == f;
            break;
        case PGD_GGUF_BOOL:
            h += v->v.arr.raw[i];
            break;
        default:
            if (pgd_gguf_arr_i64(v, i, &x) == 0) h += (unsigned)x;
            break;
        }
    }
    return h;
}

static unsigned walk(const pgd_gguf *g) {
    unsigned h = 0;
    for (size_t i = 0; i < pgd_gguf_n_kv(g); i++) {
        const pgd_gguf_kv *kv = pgd_gguf_kv_at(g, i);
        for (uint64_t k = 0; k < kv->key.len; k++) h += (unsigned char)kv->key.ptr[k];
        h += walk_value(&kv->value, 0);
    }
    for (size_t i = 0; i < pgd_gguf_n_tensors(g); i++) {
        const pgd_gguf_tensor *t = pgd_gguf_tensor_at(g, i);
        PGD_ASSERT(pgd_gguf_find_tensor(g, t->name) == t);
        const uint8_t *d = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++) h += d[k];
        float *row = malloc(t->ne[0] * sizeof *row);
        PGD_ASSERT(row);
        for (uint64_t r = 0; r < t->nelem / t->ne[0]; r++)
            if (pgd_gguf_tensor_row_f32(t, r, row) == 0) h += row[0] == row[0];
        free(row);
    }
    return h;
}

static void test_every_truncation(void) {
    wbuf b = {0};
    build_valid(&b, 3, 8);
    int bad = 0;
    for (size_t len = 0; len < b.len; len++) {
        pgd_error_clear();
        pgd_gguf *g = NULL;
        uint8_t *copy;
        int rc = parse_copy(b.p, len, &g, &copy);
        if (rc != PGD_EFORMAT || g != NULL || pgd_error_detail()[0] == '\0') {
            if (bad++ < 5) fprintf(stderr, "  truncated at %zu: rc %d\n", len, rc);
        }
        pgd_gguf_close(g);
        free(copy);
    }
    CHECK_EQ_INT(bad, 0);
    wfree(&b);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng(void) {
    uint64_t x = rng_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return rng_state = x;
}

static void test_random_flips(void) {
    wbuf b = {0};
    size_t meta_end = build_valid(&b, 3, 8); /* half the flips land before the data section */
    int parsed = 0, refused = 0, bad = 0;
    unsigned sink = 0;
    for (int it = 0; it < 6000; it++) {
        uint8_t *copy = malloc(b.len);
        PGD_ASSERT(copy);
        memcpy(copy, b.p, b.len);
        int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; k++) {
            size_t pos = (size_t)(rng() % (it % 2 ? b.len : meta_end));
            uint8_t x = (uint8_t)(1 + rng() % 255);
            if (rng() % 4 == 0) x = (uint8_t)(1u << (rng() % 8)); /* single-bit flips too */
            copy[pos] ^= x;
        }
        pgd_error_clear();
        pgd_gguf *g = NULL;
        int rc = pgd_gguf_open_memory(copy, b.len, &g);
        if (rc == 0) {
            parsed++;
            sink += walk(g);
            pgd_gguf_close(g);
        } else {
            refused++;
            if ((rc != PGD_EFORMAT && rc != PGD_EUNSUPPORTED) || g != NULL ||
                pgd_error_detail()[0] == '\0')
                bad++;
        }
        free(copy);
    }
    fprintf(stderr, "  random flips: %d parsed, %d refused (sink %u)\n", parsed, refused, sink & 1);
    CHECK_EQ_INT(bad, 0);
    CHECK(parsed > 0 && refused > 0);
    wfree(&b);
}

/* ---- files ------------------------------------------------------------------------------- */

static void test_open_file(void) {
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/pgd_test_gguf_XXXXXX", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    wbuf b = {0};
    size_t data_off = build_valid(&b, 3, 64);
    CHECK(write(fd, b.p, b.len) == (ssize_t)b.len);
    close(fd);

    pgd_gguf *g = NULL;
    CHECK_EQ_INT(pgd_gguf_open(path, &g), 0);
    if (g) {
        CHECK_EQ_INT(pgd_gguf_file_size(g), b.len);
        CHECK_EQ_INT(pgd_gguf_alignment(g), 64);
        CHECK_EQ_INT(pgd_gguf_data_offset(g), data_off);
        check_metadata(g);
        const pgd_gguf_tensor *t = pgd_gguf_find_tensor(g, "w.q8_0");
        float y[32];
        CHECK(t && pgd_gguf_tensor_row_f32(t, 1, y) == 0 && y[31] == -62.0f);
        pgd_gguf_close(g);
    }

    /* a corrupt file on disk */
    fd = open(path, O_WRONLY | O_TRUNC);
    REQUIRE(fd >= 0);
    CHECK(write(fd, b.p, 30) == 30);
    close(fd);
    pgd_error_clear();
    g = (pgd_gguf *)&b;
    CHECK_EQ_INT(pgd_gguf_open(path, &g), PGD_EFORMAT);
    CHECK(g == NULL);
    CHECK(pgd_error_detail()[0] != '\0');

    /* empty file */
    fd = open(path, O_WRONLY | O_TRUNC);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK_EQ_INT(pgd_gguf_open(path, &g), PGD_EFORMAT);
    CHECK(strstr(pgd_error_detail(), "truncated") != NULL);
    unlink(path);

    /* missing file, a directory */
    CHECK_EQ_INT(pgd_gguf_open(path, &g), PGD_EIO);
    CHECK(strstr(pgd_error_detail(), path) != NULL);
    CHECK(g == NULL);
    CHECK_EQ_INT(pgd_gguf_open(dir && dir[0] ? dir : "/tmp", &g), PGD_EIO);
    CHECK_EQ_INT(pgd_gguf_open(NULL, &g), PGD_EINVAL);
    wfree(&b);
}

int main(void) {
    RUN(test_valid_v2_default_alignment);
    RUN(test_valid_v3_alignment_64);
    RUN(test_valid_v3_alignment_8);
    RUN(test_valid_v3_alignment_1);
    RUN(test_empty_model);
    RUN(test_many_entries);
    RUN(test_corrupt_files);
    RUN(test_every_truncation);
    RUN(test_random_flips);
    RUN(test_open_file);
    return test_summary();
}
