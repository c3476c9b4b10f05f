/*
 * tests/unit/test_quant.c — type traits, f16/bf16 conversion and row dequantization.
 *
 * Expected values are worked out by hand from the block formats (ggml's reference layout and
 * IEEE 754 binary16), never by running the code under test twice. Blocks are built byte by
 * byte here, following ggml's reference loops (not pagoda's), and dequantized from odd
 * addresses so misaligned reads show up under UBSan.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/q4.h"
#include "testutil.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* ---- traits ---------------------------------------------------------------------------- */

static void test_traits_table(void) {
    /* (id, name, block, bytes) as in gguf-py's GGML_QUANT_SIZES / ggml.h */
    static const struct {
        uint32_t id;
        const char *name;
        uint32_t bs, ts;
    } want[] = {
        {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},      {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
        {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
        {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
        {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
        {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
        {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
        {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
    };
    bool known[64] = {false};
    for (size_t i = 0; i < PGD_ARRAY_LEN(want); i++) {
        const pgd_type_traits *t = pgd_type_info(want[i].id);
        known[want[i].id] = true;
        CHECK(t != NULL);
        if (!t) continue;
        CHECK_EQ_STR(t->name, want[i].name);
        CHECK_EQ_INT(t->block_size, want[i].bs);
        CHECK_EQ_INT(t->type_size, want[i].ts);
    }
    for (uint32_t id = 0; id < 64; id++)
        if (!known[id]) CHECK(pgd_type_info(id) == NULL); /* retired 4,5,31-33,36-38 and >= 40 */
    CHECK(pgd_type_info(UINT32_MAX) == NULL);
    static const uint32_t dq[] = {0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30};
    for (size_t i = 0; i < PGD_ARRAY_LEN(dq); i++) CHECK(pgd_type_info(dq[i])->can_dequant);
}

static void test_row_bytes(void) {
    uint64_t n = 0;
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_Q4_1, 64, &n), 0);
    CHECK_EQ_INT(n, 40);
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_F32, 3, &n), 0);
    CHECK_EQ_INT(n, 12);
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_Q6_K, 512, &n), 0);
    CHECK_EQ_INT(n, 420);
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_Q8_0, 0, &n), 0);
    CHECK_EQ_INT(n, 0);
    pgd_error_clear();
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_Q4_0, 33, &n), PGD_EINVAL);
    CHECK(pgd_error_detail()[0] != '\0');
    CHECK_EQ_INT(pgd_row_bytes(4, 32, &n), PGD_EINVAL);  /* retired id */
    CHECK_EQ_INT(pgd_row_bytes(99, 32, &n), PGD_EINVAL); /* unknown id */
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_F64, (uint64_t)1 << 61, &n), PGD_ERANGE);
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_Q8_0, UINT64_MAX - 31, &n),
                 PGD_ERANGE);                                            /* (2^59 - 1) * 34 */
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_Q4_K, UINT64_MAX - 255, &n), 0); /* (2^56 - 1) * 144 fits */
    CHECK_EQ_INT(pgd_row_bytes(PGD_TYPE_F64, ((uint64_t)1 << 61) - 1, &n), 0);
    CHECK_EQ_INT(n, UINT64_MAX - 7);
}

/* ---- f16 / bf16 ------------------------------------------------------------------------- */

static void test_f16_to_f32(void) {
    CHECK(fbits(pgd_f16_to_f32(0x0000)) == 0x00000000u);
    CHECK(fbits(pgd_f16_to_f32(0x8000)) == 0x80000000u); /* -0 keeps its sign */
    CHECK(pgd_f16_to_f32(0x3c00) == 1.0f);
    CHECK(pgd_f16_to_f32(0xc000) == -2.0f);
    CHECK(pgd_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(pgd_f16_to_f32(0x7bff) == 65504.0f);          /* largest finite */
    CHECK(pgd_f16_to_f32(0x0400) == ldexpf(1.0f, -14)); /* smallest normal */
    CHECK(pgd_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    CHECK(pgd_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    CHECK(pgd_f16_to_f32(0x8201) == -ldexpf(513.0f, -24));
    CHECK(pgd_f16_to_f32(0x7c00) == INFINITY);
    CHECK(pgd_f16_to_f32(0xfc00) == -INFINITY);
    CHECK(isnan(pgd_f16_to_f32(0x7e00)));
    CHECK(isnan(pgd_f16_to_f32(0x7c01))); /* signalling nan stays a nan */
    CHECK(fbits(pgd_f16_to_f32(0xfe00)) == 0xffc00000u);
    CHECK(fbits(pgd_f16_to_f32(0x7c01)) == 0x7f802000u); /* payload moves up 13 bits */
}

static void test_f32_to_f16(void) {
    CHECK_EQ_INT(pgd_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(pgd_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(pgd_f32_to_f16(0.0f), 0x0000);
    CHECK_EQ_INT(pgd_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ_INT(pgd_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(pgd_f32_to_f16(65519.0f), 0x7bff); /* below the midpoint to 65536 */
    CHECK_EQ_INT(pgd_f32_to_f16(65520.0f), 0x7c00); /* the midpoint ties to even: inf */
    CHECK_EQ_INT(pgd_f32_to_f16(1e10f), 0x7c00);
    CHECK_EQ_INT(pgd_f32_to_f16(-1e10f), 0xfc00);
    CHECK_EQ_INT(pgd_f32_to_f16(INFINITY), 0x7c00);
    CHECK_EQ_INT(pgd_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = pgd_f32_to_f16(NAN);
    CHECK((n & 0x7c00) == 0x7c00 && (n & 0x03ff) != 0);
    /* ties to even among normals: 1 + 2^-11 is halfway between 0x3c00 and 0x3c01 */
    CHECK_EQ_INT(pgd_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    CHECK_EQ_INT(pgd_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    CHECK_EQ_INT(pgd_f32_to_f16(nextafterf(1.0f + ldexpf(1.0f, -11), 2.0f)), 0x3c01);
    CHECK_EQ_INT(pgd_f32_to_f16(0.333333343f), 0x3555);
    /* subnormals */
    CHECK_EQ_INT(pgd_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    CHECK_EQ_INT(pgd_f32_to_f16(ldexpf(1.0f, -25)), 0x0000); /* tie to even: 0 */
    CHECK_EQ_INT(pgd_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001);
    CHECK_EQ_INT(pgd_f32_to_f16(ldexpf(3.0f, -25)), 0x0002); /* 1.5 units: tie to even 2 */
    CHECK_EQ_INT(pgd_f32_to_f16(ldexpf(5.0f, -25)), 0x0002); /* 2.5 units: tie to even 2 */
    CHECK_EQ_INT(pgd_f32_to_f16(-ldexpf(1023.0f, -24)), 0x83ff);
    CHECK_EQ_INT(pgd_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* rounds up to a normal */
    CHECK_EQ_INT(pgd_f32_to_f16(ldexpf(1.0f, -30)), 0x0000);
    CHECK_EQ_INT(pgd_f32_to_f16(-FLT_MIN), 0x8000);
    /* every finite half survives f16 -> f32 -> f16 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        if (pgd_f32_to_f16(pgd_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_bf16(void) {
    CHECK(pgd_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(pgd_bf16_to_f32(0xc040) == -3.0f);
    CHECK(pgd_bf16_to_f32(0x7f80) == INFINITY);
    CHECK(isnan(pgd_bf16_to_f32(0x7fc1)));
    CHECK(pgd_bf16_to_f32(0x0001) == ldexpf(1.0f, -133)); /* subnormal */
    CHECK(fbits(pgd_bf16_to_f32(0x8000)) == 0x80000000u);
}

/* ---- dequantization --------------------------------------------------------------------- */

/* dst[n] from src copied to an odd address */
static int dq(uint32_t type, const uint8_t *src, size_t bytes, float *dst, int64_t n) {
    static uint8_t buf[1 + 4096];
    memcpy(buf + 1, src, bytes);
    return pgd_dequant_row(type, buf + 1, dst, n);
}

static void test_plain_types(void) {
    float y[8];
    float f[3] = {1.5f, -0.0f, 3e38f};
    CHECK_EQ_INT(dq(PGD_TYPE_F32, (const uint8_t *)f, sizeof f, y, 3), 0);
    CHECK(y[0] == 1.5f && fbits(y[1]) == 0x80000000u && y[2] == 3e38f);

    uint8_t h[8];
    put16(h, 0x3c00), put16(h + 2, 0xc000), put16(h + 4, 0x0001), put16(h + 6, 0xfc00);
    CHECK_EQ_INT(dq(PGD_TYPE_F16, h, 8, y, 4), 0);
    CHECK(y[0] == 1.0f && y[1] == -2.0f && y[2] == ldexpf(1.0f, -24) && y[3] == -INFINITY);

    put16(h, 0x3f80), put16(h + 2, 0xc040), put16(h + 4, 0x4049), put16(h + 6, 0x0000);
    CHECK_EQ_INT(dq(PGD_TYPE_BF16, h, 8, y, 4), 0);
    CHECK(y[0] == 1.0f && y[1] == -3.0f && y[2] == 3.140625f && y[3] == 0.0f);

    uint8_t i8[3] = {0x80, 0x7f, 0xff};
    CHECK_EQ_INT(dq(PGD_TYPE_I8, i8, 3, y, 3), 0);
    CHECK(y[0] == -128.0f && y[1] == 127.0f && y[2] == -1.0f);
    uint8_t i16[4] = {0x00, 0x80, 0x39, 0x30}; /* -32768, 12345 */
    CHECK_EQ_INT(dq(PGD_TYPE_I16, i16, 4, y, 2), 0);
    CHECK(y[0] == -32768.0f && y[1] == 12345.0f);
    uint8_t i32[4] = {0xfe, 0xff, 0xff, 0xff};
    CHECK_EQ_INT(dq(PGD_TYPE_I32, i32, 4, y, 1), 0);
    CHECK(y[0] == -2.0f);
    double d64 = -0.25;
    CHECK_EQ_INT(dq(PGD_TYPE_F64, (const uint8_t *)&d64, 8, y, 1), 0);
    CHECK(y[0] == -0.25f);
}

static void test_q8_0(void) {
    uint8_t b[68];
    put16(b, 0x3800); /* d = 0.5 */
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j - 16);
    put16(b + 34, 0xc000); /* d = -2 */
    b[36] = 0x80;          /* -128 */
    b[37] = 0x7f;          /* 127 */
    for (int j = 2; j < 32; j++) b[36 + j] = (uint8_t)j;
    float y[64];
    CHECK_EQ_INT(dq(PGD_TYPE_Q8_0, b, sizeof b, y, 64), 0);
    CHECK(y[0] == -8.0f && y[16] == 0.0f && y[31] == 7.5f && y[17] == 0.5f);
    CHECK(y[32] == 256.0f && y[33] == -254.0f && y[34] == -4.0f && y[63] == -62.0f);
}

static void test_q4_0(void) {
    uint8_t b[18];
    put16(b, 0x4000); /* d = 2 */
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    CHECK_EQ_INT(dq(PGD_TYPE_Q4_0, b, sizeof b, y, 32), 0);
    /* element j < 16: low nibble j -> 2 * (j - 8); element 16 + j: high nibble 15 - j */
    CHECK(y[0] == -16.0f && y[8] == 0.0f && y[15] == 14.0f);
    CHECK(y[16] == 14.0f && y[23] == 0.0f && y[31] == -16.0f);
}

static void test_q4_1(void) {
    uint8_t b[20];
    put16(b, 0x3400);     /* d = 0.25 */
    put16(b + 2, 0xb800); /* m = -0.5 */
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | 0xa0);
    float y[32];
    CHECK_EQ_INT(dq(PGD_TYPE_Q4_1, b, sizeof b, y, 32), 0);
    CHECK(y[0] == -0.5f && y[2] == 0.0f && y[15] == 3.25f);
    for (int j = 16; j < 32; j++) CHECK(y[j] == 2.0f); /* 0.25 * 10 - 0.5 */
}

static void test_q5_0_q5_1(void) {
    uint8_t b[22];
    put16(b, 0x3c00); /* d = 1 */
    /* qh = 0x80000001: fifth bit set for element 0 and element 31 */
    b[2] = 0x01, b[3] = 0x00, b[4] = 0x00, b[5] = 0x80;
    for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(0x30 | (j & 0x0f));
    float y[32];
    CHECK_EQ_INT(dq(PGD_TYPE_Q5_0, b, sizeof b, y, 32), 0);
    CHECK(y[0] == 0.0f);    /* 0 + 16 - 16 */
    CHECK(y[1] == -15.0f);  /* 1 - 16 */
    CHECK(y[15] == -1.0f);  /* 15 - 16 */
    CHECK(y[16] == -13.0f); /* high nibble 3, no fifth bit */
    CHECK(y[31] == 3.0f);   /* 3 + 16 - 16 */

    uint8_t c[24];
    put16(c, 0x3800);                                   /* d = 0.5 */
    put16(c + 2, 0x4200);                               /* m = 3 */
    c[4] = 0x00, c[5] = 0x00, c[6] = 0x01, c[7] = 0x00; /* bit 16: element 16 */
    for (int j = 0; j < 16; j++) c[8 + j] = 0xff;
    CHECK_EQ_INT(dq(PGD_TYPE_Q5_1, c, sizeof c, y, 32), 0);
    CHECK(y[0] == 10.5f);  /* 0.5 * 15 + 3 */
    CHECK(y[16] == 18.5f); /* 0.5 * 31 + 3 */
    CHECK(y[17] == 10.5f);
}

/* Q4_K / Q5_K 6-bit scale packing, written from ggml's quantize_row_q4_K_ref. */
static void pack_k4_scales(const int sc[8], const int mn[8], uint8_t out[12]) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = (uint8_t)sc[j];
            out[j + 4] = (uint8_t)mn[j];
        } else {
            out[j + 4] = (uint8_t)((sc[j] & 0x0f) | ((mn[j] & 0x0f) << 4));
            out[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            out[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

static void test_q4_k(void) {
    /* literal block: d = 1, dmin = 1 */
    uint8_t b[144] = {0};
    put16(b, 0x3c00), put16(b + 2, 0x3c00);
    uint8_t *s = b + 4, *qs = b + 16;
    s[0] = 0x43;   /* sc0 = 3, top bits 01 -> sc4 gets +16 */
    s[4] = 0x82;   /* m0 = 2, top bits 10 -> m4 gets +32 */
    s[1] = 0x01;   /* sc1 = 1, m1 = s[5] = 0 */
    s[8] = 0x52;   /* sc4 low 2, m4 low 5 */
    qs[0] = 0x75;  /* element 0: 5, element 32: 7 */
    qs[64] = 0x0a; /* element 128: 10 */
    float y[256];
    CHECK_EQ_INT(dq(PGD_TYPE_Q4_K, b, sizeof b, y, 256), 0);
    CHECK(y[0] == 13.0f);    /* 3 * 5 - 2 */
    CHECK(y[1] == -2.0f);    /* 3 * 0 - 2 */
    CHECK(y[32] == 7.0f);    /* 1 * 7 - 0 */
    CHECK(y[128] == 143.0f); /* (2 + 16) * 10 - (5 + 32) */
    CHECK(y[129] == -37.0f);
    CHECK(y[64] == 0.0f); /* sc2 = m2 = 0 */

    /* every sub-block: scales 1..8 and mins, encoded with the reference packing */
    int sc[8] = {1, 2, 3, 4, 5, 6, 7, 63}, mn[8] = {0, 1, 2, 3, 60, 33, 17, 63};
    memset(b, 0, sizeof b);
    put16(b, 0x3800), put16(b + 2, 0x3400); /* d = 0.5, dmin = 0.25 */
    pack_k4_scales(sc, mn, b + 4);
    /* ggml layout: 4 chunks of 64 elements; chunk c uses qs[32c..32c+31], low nibbles for
     * the first 32 elements, high nibbles for the next 32 */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b[16 + 32 * c + l] = (uint8_t)((l & 15) | ((15 - (l & 15)) << 4));
    CHECK_EQ_INT(dq(PGD_TYPE_Q4_K, b, sizeof b, y, 256), 0);
    int bad = 0;
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) {
            int q = (j % 2 == 0) ? (l & 15) : 15 - (l & 15);
            double want = 0.5 * sc[j] * q - 0.25 * mn[j];
            if (fabs(y[32 * j + l] - want) > 1e-6) bad++;
        }
    CHECK_EQ_INT(bad, 0);
}

static void test_q5_k(void) {
    int sc[8] = {2, 1, 1, 1, 1, 1, 1, 40}, mn[8] = {1, 0, 0, 0, 0, 0, 0, 50};
    uint8_t b[176] = {0};
    put16(b, 0x3c00), put16(b + 2, 0x3c00); /* d = dmin = 1 */
    pack_k4_scales(sc, mn, b + 4);
    uint8_t *qh = b + 16, *qs = b + 48;
    qh[0] = 0x81;  /* fifth bit of element 0 (sub-block 0) and element 224 (sub-block 7) */
    qh[3] = 0x02;  /* fifth bit of element 32 + 3 */
    qs[0] = 0x3f;  /* element 0: 15, element 32: 3 */
    qs[96] = 0x90; /* element 192: 0, element 224: 9 */
    qs[3] = 0x40;  /* element 3: 0, element 35: 4 */
    float y[256];
    CHECK_EQ_INT(dq(PGD_TYPE_Q5_K, b, sizeof b, y, 256), 0);
    CHECK(y[0] == 61.0f);    /* 2 * (15 + 16) - 1 */
    CHECK(y[1] == -1.0f);    /* 2 * 0 - 1 */
    CHECK(y[32] == 3.0f);    /* 1 * 3 */
    CHECK(y[35] == 20.0f);   /* 1 * (4 + 16) */
    CHECK(y[224] == 950.0f); /* 40 * (9 + 16) - 50 */
    CHECK(y[192] == 0.0f);
}

static void test_q6_k(void) {
    uint8_t b[210] = {0};
    uint8_t *ql = b, *qh = b + 128;
    int8_t *sc = (int8_t *)(b + 192);
    put16(b + 208, 0x3c00); /* d = 1 */
    for (int k = 0; k < 16; k++) sc[k] = (int8_t)(k < 8 ? k + 1 : -(k - 7));
    ql[0] = 0x21;  /* element 0: low 1; element 64: low 2 */
    qh[0] = 0xe4;  /* high bits: element 0: 0, 32: 1, 64: 2, 96: 3 */
    ql[32] = 0xff; /* element 32: 15, element 96: 15 */
    ql[64] = 0x05; /* element 128: 5 (second half) */
    qh[32] = 0x03; /* element 128: high 3 */
    float y[256];
    CHECK_EQ_INT(dq(PGD_TYPE_Q6_K, b, sizeof b, y, 256), 0);
    CHECK(y[0] == -31.0f);          /* sc0 = 1: 1 - 32 */
    CHECK(y[1] == -32.0f);          /* all zero: -32 */
    CHECK(y[32] == 3.0f * -1.0f);   /* sc2 = 3: (15 | 16) - 32 = -1 */
    CHECK(y[64] == 5.0f * 2.0f);    /* sc4 = 5: (2 | 32) - 32 = 2 */
    CHECK(y[96] == 7.0f * 31.0f);   /* sc6 = 7: (15 | 48) - 32 = 31 */
    CHECK(y[128] == -1.0f * 21.0f); /* sc8 = -1: (5 | 48) - 32 = 21 */
    CHECK(y[255] == 8.0f * 32.0f);  /* sc15 = -8: 0 - 32 */
}

static void test_q2_k_q3_k(void) {
    uint8_t b[84] = {0};
    uint8_t *sc = b, *qs = b + 16;
    put16(b + 80, 0x4000); /* d = 2 */
    put16(b + 82, 0x3800); /* dmin = 0.5 */
    sc[0] = 0x21;          /* scale 1, min 2 */
    sc[2] = 0x13;          /* scale 3, min 1 */
    sc[4] = 0x05;          /* scale 5, min 0 */
    sc[6] = 0xf0;          /* scale 0, min 15 */
    qs[0] = 0xe4;          /* elements 0, 32, 64, 96: 0, 1, 2, 3 */
    float y[256];
    CHECK_EQ_INT(dq(PGD_TYPE_Q2_K, b, sizeof b, y, 256), 0);
    CHECK(y[0] == -1.0f);  /* 2 * 1 * 0 - 0.5 * 2 */
    CHECK(y[32] == 5.5f);  /* 2 * 3 * 1 - 0.5 * 1 */
    CHECK(y[64] == 20.0f); /* 2 * 5 * 2 */
    CHECK(y[96] == -7.5f); /* 0 - 0.5 * 15 */
    CHECK(y[16] == 0.0f);  /* scales[1] = 0 */

    uint8_t c[110] = {0};
    uint8_t *hm = c, *q3 = c + 32, *s3 = c + 96;
    put16(c + 108, 0x3c00); /* d = 1 */
    s3[0] = 0x01;           /* scale 0 low 4 bits */
    s3[8] = 0x02;           /* scale 0 high 2 bits: 0x21 = 33 -> +1; scales 4, 8, 12 get 0 */
    hm[0] = 0x01;           /* element 0 keeps its value; element 32 (bit 1) loses 4 */
    hm[16] = 0x01;
    q3[0] = 0x03; /* element 0: 3 */
    q3[1] = 0x01; /* element 1: 1, hmask bit clear -> 1 - 4 */
    q3[16] = 0x02;
    CHECK_EQ_INT(dq(PGD_TYPE_Q3_K, c, sizeof c, y, 256), 0);
    CHECK(y[0] == 3.0f);
    CHECK(y[1] == -3.0f);
    CHECK(y[16] == -64.0f); /* scale 1 = 0 - 32, q = 2 */
    CHECK(y[32] == 128.0f); /* scale 2 = -32, q = 0 - 4 */
}

static void test_dequant_errors(void) {
    uint8_t b[64] = {0};
    float y[64];
    pgd_error_clear();
    CHECK_EQ_INT(pgd_dequant_row(PGD_TYPE_Q4_0, b, y, 31), PGD_EINVAL);
    CHECK(pgd_error_detail()[0] != '\0');
    CHECK_EQ_INT(pgd_dequant_row(PGD_TYPE_F32, b, y, -1), PGD_EINVAL);
    CHECK_EQ_INT(pgd_dequant_row(4, b, y, 32), PGD_EINVAL);
    CHECK_EQ_INT(pgd_dequant_row(200, b, y, 32), PGD_EINVAL);
    CHECK_EQ_INT(pgd_dequant_row(PGD_TYPE_IQ4_NL, b, y, 32), PGD_EUNSUPPORTED);
    CHECK_EQ_INT(pgd_dequant_row(PGD_TYPE_Q8_1, b, y, 32), PGD_EUNSUPPORTED);
    CHECK_EQ_INT(pgd_dequant_row(PGD_TYPE_Q8_0, b, y, 0), 0);
}

/* ---- Q4_1 quantization (the GPU's 4-bit weights) and pgd_q4_blocks --------------------------- */

static uint32_t nib(const pgd_block_q4_1 *b, int j) {
    return j < 16 ? b->qs[j] & 15u : (uint32_t)b->qs[j - 16] >> 4;
}

static void test_quantize_q4_1(void) {
    float x[64];
    pgd_block_q4_1 y[2];
    /* block 0: -1 + 0.5 k for k = 0..15 (twice, shuffled): lo -1, hi 6.5, d 0.5, q = k exactly */
    for (int j = 0; j < 32; j++) x[j] = -1.0f + 0.5f * (float)((j * 7) % 16);
    /* block 1: ties and one value: lo 0, hi 1.5 (d 0.1 is inexact in f32: the rule says which
     * way), x = 0.75 -> (0.75 * (1 / 0.1)) + 0.5 */
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;
    x[33] = 1.5f;
    x[34] = 0.75f;
    x[35] = -0.0f;
    pgd_quantize_row_q4_1(x, y, 64);
    CHECK_EQ_INT(y[0].d, 0x3800); /* 0.5 */
    CHECK_EQ_INT(y[0].m, 0xBC00); /* -1 */
    int exact = 1;
    for (int j = 0; j < 32; j++) exact &= nib(&y[0], j) == (uint32_t)((j * 7) % 16);
    CHECK(exact);
    const float d = 1.5f / 15.0f, id = 1.0f / d;
    const float v = 0.75f * id + 0.5f; /* each operation rounded once: ISO C, no contraction */
    CHECK_EQ_INT(y[1].m, 0x0000);
    CHECK_EQ_INT(y[1].d, pgd_f32_to_f16(d));
    CHECK_EQ_INT(nib(&y[1], 0), 0);
    CHECK_EQ_INT(nib(&y[1], 1), 15);
    CHECK_EQ_INT(nib(&y[1], 2), (uint32_t)v);
    CHECK_EQ_INT(nib(&y[1], 3), 0);
    /* one value only: d 0, every q 0, m the value */
    for (int j = 0; j < 32; j++) x[j] = -3.0f;
    pgd_quantize_row_q4_1(x, y, 32);
    CHECK_EQ_INT(y[0].d, 0);
    CHECK_EQ_INT(y[0].m, 0xC200); /* -3 */
    CHECK_EQ_INT(y[0].qs[0] | y[0].qs[7] | y[0].qs[15], 0);
    /* random blocks: every value within d / 2 (plus the halves' rounding) of its dequantization */
    uint64_t r = 88172645463325252ull;
    float worst = 0.0f;
    for (int t = 0; t < 200; t++) {
        const float scale = ldexpf(1.0f, t % 20 - 10);
        for (int j = 0; j < 32; j++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            x[j] = ((float)(r >> 40) / (float)(1 << 24) - 0.3f) * scale;
        }
        pgd_quantize_row_q4_1(x, y, 32);
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
        const float dd = pgd_f16_to_f32(y[0].d), mm = pgd_f16_to_f32(y[0].m);
        for (int j = 0; j < 32; j++) {
            const float e = fabsf(dd * (float)nib(&y[0], j) + mm - x[j]);
            const float bound =
                0.5f * (hi - lo) / 15.0f + 16.0f * ldexpf(fabsf(hi - lo) + fabsf(lo), -11);
            if (e / bound > worst) worst = e / bound;
        }
    }
    CHECK(worst <= 1.0f);
}

static void test_q4_blocks(void) {
    uint8_t src[2 * 144 + 1], dst[16 * 20 + 1], want[16 * 20];
    pgd_block_q4_0 b0[2] = {0};
    /* Q4_0: d = 0.25 and -2: m = -2 and 16, the values as they are */
    b0[0].d = 0x3400;
    b0[1].d = 0xC000;
    for (int j = 0; j < 16; j++) b0[0].qs[j] = (uint8_t)(j * 17), b0[1].qs[j] = (uint8_t)(255 - j);
    memcpy(src + 1, b0, sizeof b0);
    CHECK_EQ_INT(pgd_q4_blocks(PGD_TYPE_Q4_0, src + 1, dst + 1, 64), 0);
    pgd_block_q4_1 o[2];
    memcpy(o, dst + 1, sizeof o);
    CHECK_EQ_INT(o[0].d, 0x3400);
    CHECK_EQ_INT(o[0].m, 0xC000); /* -2 */
    CHECK_EQ_INT(o[1].d, 0xC000);
    CHECK_EQ_INT(o[1].m, 0x4C00); /* 16 */
    CHECK(!memcmp(o[0].qs, b0[0].qs, 16) && !memcmp(o[1].qs, b0[1].qs, 16));
    float a[64], bq[64];
    REQUIRE(pgd_dequant_row(PGD_TYPE_Q4_0, src + 1, a, 64) == 0);
    REQUIRE(pgd_dequant_row(PGD_TYPE_Q4_1, dst + 1, bq, 64) == 0);
    int same = 1; /* d (q - 8) = d q - 8 d exactly (as values: -0 and +0 alike) */
    for (int j = 0; j < 64; j++) same &= a[j] == bq[j];
    CHECK(same);
    /* Q4_0 whose -8 d passes f16: refused */
    b0[0].d = 0x7000; /* 8192: -65536 */
    memcpy(src + 1, b0, sizeof b0);
    CHECK_EQ_INT(pgd_q4_blocks(PGD_TYPE_Q4_0, src + 1, dst + 1, 64), PGD_ERANGE);
    /* Q4_1: as it is; Q4_K: pgd_reblock_row's blocks */
    for (int i = 0; i < (int)sizeof src; i++) src[i] = (uint8_t)(i * 37 + 11);
    put16(src + 1, 0x2C00), put16(src + 3, 0x2400); /* Q4_K d, dmin small and finite */
    put16(src + 145, 0x2A00), put16(src + 147, 0x2000);
    CHECK_EQ_INT(pgd_q4_blocks(PGD_TYPE_Q4_1, src + 1, dst + 1, 64), 0);
    CHECK(!memcmp(dst + 1, src + 1, 40));
    CHECK_EQ_INT(pgd_q4_blocks(PGD_TYPE_Q4_K, src + 1, dst + 1, 512), 0);
    REQUIRE(pgd_reblock_row(PGD_TYPE_Q4_K, src + 1, want, 512) == 0);
    CHECK(!memcmp(dst + 1, want, sizeof want));
    /* other types, bad counts */
    CHECK(pgd_q4_type_exact(PGD_TYPE_Q4_K) && !pgd_q4_type_exact(PGD_TYPE_Q5_K) &&
          !pgd_q4_type_exact(PGD_TYPE_Q8_0) && !pgd_q4_type_exact(PGD_TYPE_BF16));
    CHECK_EQ_INT(pgd_q4_blocks(PGD_TYPE_Q6_K, src, dst, 256), PGD_EINVAL);
    CHECK_EQ_INT(pgd_q4_blocks(PGD_TYPE_Q4_K, src, dst, 32), PGD_EINVAL);
    CHECK_EQ_INT(pgd_q4_blocks(PGD_TYPE_Q4_0, src, dst, 48), PGD_EINVAL);
}

int main(void) {
    RUN(test_traits_table);
    RUN(test_row_bytes);
    RUN(test_f16_to_f32);
    RUN(test_f32_to_f16);
    RUN(test_bf16);
    RUN(test_plain_types);
    RUN(test_q8_0);
    RUN(test_q4_0);
    RUN(test_q4_1);
    RUN(test_q5_0_q5_1);
    RUN(test_q4_k);
    RUN(test_q5_k);
    RUN(test_q6_k);
    RUN(test_q2_k_q3_k);
    RUN(test_dequant_errors);
    RUN(test_quantize_q4_1);
    RUN(test_q4_blocks);
    return test_summary();
}
