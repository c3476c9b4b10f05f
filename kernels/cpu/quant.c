/*
 * kernels/cpu/quant.c — the type traits table (GGUF/ggml type ids), f16/bf16 conversion, the
 * scalar row dequantizers (the CPU reference every other dequantization is checked against) and
 * the re-blocking of Q4_K / Q5_K rows into Q4_1 / Q5_1.
 *
 * Owns: nothing mutable; the traits table is a constant.
 *
 * Invariants:
 *   - block_size / type_size equal gguf-py's GGML_QUANT_SIZES (checked by tests/reference).
 *   - Each dequantizer mirrors the float32 arithmetic of gguf-py's numpy dequantization
 *     (gguf.quants): the same products and sums in the same order, one rounding per operation.
 *     ISO C11 mode (CMAKE_C_EXTENSIONS OFF) keeps GCC from contracting a*b+c into an FMA
 *     (-ffp-contract=off is its ISO default); clang gets the STDC FP_CONTRACT pragma below.
 *     Keep it that way or results drift by an ulp from the reference.
 *   - Source blocks are read byte by byte (memcpy / shifts), never through a cast pointer, so
 *     rows may sit at any address (GGUF data is only aligned to the file's alignment).
 *
 * Threading: pure functions, safe from any thread.
 */
#include "kernels/cpu/quant.h"

#include <string.h>

#include "common/error.h"

#if defined(__clang__)
/* clang contracts within expressions by default; GCC in ISO mode does not */
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant.c assumes a little-endian host (GGUF data is little-endian)"
#endif

_Static_assert(sizeof(pgd_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(pgd_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(pgd_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(pgd_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(pgd_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(pgd_block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(pgd_block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(pgd_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(pgd_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(pgd_block_q6_K) == 210, "q6_K layout");

/* ---- traits ---------------------------------------------------------------------------- */

#define T(id, nm, bs, ts, dq) [id] = {nm, bs, ts, dq}

/* Indexed by type id; retired ids (4, 5, 31, 32, 33, 36, 37, 38) stay zeroed (name NULL). */
static const pgd_type_traits k_traits[PGD_TYPE__MAX] = {
    T(PGD_TYPE_F32, "F32", 1, 4, true),
    T(PGD_TYPE_F16, "F16", 1, 2, true),
    T(PGD_TYPE_Q4_0, "Q4_0", 32, 18, true),
    T(PGD_TYPE_Q4_1, "Q4_1", 32, 20, true),
    T(PGD_TYPE_Q5_0, "Q5_0", 32, 22, true),
    T(PGD_TYPE_Q5_1, "Q5_1", 32, 24, true),
    T(PGD_TYPE_Q8_0, "Q8_0", 32, 34, true),
    T(PGD_TYPE_Q8_1, "Q8_1", 32, 40, false),
    T(PGD_TYPE_Q2_K, "Q2_K", 256, 84, true),
    T(PGD_TYPE_Q3_K, "Q3_K", 256, 110, true),
    T(PGD_TYPE_Q4_K, "Q4_K", 256, 144, true),
    T(PGD_TYPE_Q5_K, "Q5_K", 256, 176, true),
    T(PGD_TYPE_Q6_K, "Q6_K", 256, 210, true),
    T(PGD_TYPE_Q8_K, "Q8_K", 256, 292, false),
    T(PGD_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, false),
    T(PGD_TYPE_IQ2_XS, "IQ2_XS", 256, 74, false),
    T(PGD_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98, false),
    T(PGD_TYPE_IQ1_S, "IQ1_S", 256, 50, false),
    T(PGD_TYPE_IQ4_NL, "IQ4_NL", 32, 18, false),
    T(PGD_TYPE_IQ3_S, "IQ3_S", 256, 110, false),
    T(PGD_TYPE_IQ2_S, "IQ2_S", 256, 82, false),
    T(PGD_TYPE_IQ4_XS, "IQ4_XS", 256, 136, false),
    T(PGD_TYPE_I8, "I8", 1, 1, true),
    T(PGD_TYPE_I16, "I16", 1, 2, true),
    T(PGD_TYPE_I32, "I32", 1, 4, true),
    T(PGD_TYPE_I64, "I64", 1, 8, true),
    T(PGD_TYPE_F64, "F64", 1, 8, true),
    T(PGD_TYPE_IQ1_M, "IQ1_M", 256, 56, false),
    T(PGD_TYPE_BF16, "BF16", 1, 2, true),
    T(PGD_TYPE_TQ1_0, "TQ1_0", 256, 54, false),
    T(PGD_TYPE_TQ2_0, "TQ2_0", 256, 66, false),
    T(PGD_TYPE_MXFP4, "MXFP4", 32, 17, false), /* e8m0 scale + 16 B of 4-bit values */
};

#undef T

const pgd_type_traits *pgd_type_info(uint32_t type) {
    if (type >= PGD_TYPE__MAX || !k_traits[type].name) return NULL;
    return &k_traits[type];
}

int pgd_row_bytes(uint32_t type, uint64_t n, uint64_t *out) {
    const pgd_type_traits *tt = pgd_type_info(type);
    if (!tt) return pgd_error_set(PGD_EINVAL, "unknown tensor type id %u", type);
    if (n % tt->block_size)
        return pgd_error_set(PGD_EINVAL, "%llu elements is not a multiple of the %s block size %u",
                             (unsigned long long)n, tt->name, tt->block_size);
    uint64_t blocks = n / tt->block_size;
    if (blocks > UINT64_MAX / tt->type_size)
        return pgd_error_set(PGD_ERANGE, "row of %llu %s elements overflows a byte count",
                             (unsigned long long)n, tt->name);
    *out = blocks * tt->type_size;
    return 0;
}

/* ---- scalar conversions ---------------------------------------------------------------- */

static inline float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float pgd_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        if (man == 0) return bits_to_f32(sign); /* +-0 */
        /* subnormal: man * 2^-24; normalise so the leading 1 becomes implicit */
        int e = 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        man &= 0x3ffu;
        return bits_to_f32(sign | ((uint32_t)(e + 112) << 23) | (man << 13));
    }
    return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t pgd_f32_to_f16(float f) {
    uint32_t x = f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) { /* inf or nan: keep a quiet nan with the top payload bits */
        if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (x < 0x38800000u) {                                   /* below 2^-14: half subnormal */
        if (x < 0x33000000u) return sign;                    /* <= 2^-25 (a tie) -> 0 */
        uint32_t e = x >> 23;                                /* 102 .. 112 */
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* value = m * 2^(e-150) = (m >> shift) units of 2^-24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++; /* may become the smallest normal */
        return (uint16_t)(sign | r);
    }
    uint32_t r = (x - 0x38000000u) >> 13; /* rebias 127 -> 15, drop 13 mantissa bits */
    uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++; /* carry may reach inf: fine */
    return (uint16_t)(sign | r);
}

uint16_t pgd_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1);                                           /* nearest even */
    return (uint16_t)(u >> 16);
}

float pgd_bf16_to_f32(uint16_t h) {
    return bits_to_f32((uint32_t)h << 16);
}

/* ---- row dequantizers -------------------------------------------------------------------
 * Each takes nb blocks at src and writes nb * block_size floats. Comments give the numpy
 * expression of gguf.quants that the loop reproduces. */

static inline uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline float rdf16(const uint8_t *p) {
    return pgd_f16_to_f32(rd16(p));
}

/* Q4_0: y = d * (q - 8); q = low nibbles for elements 0..15, high nibbles for 16..31. */
static void dq_q4_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        float d = rdf16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((qs[j] & 0x0f) - 8);
            y[j + 16] = d * (float)((qs[j] >> 4) - 8);
        }
    }
}

/* Q4_1: y = (d * q) + m. */
static void dq_q4_1(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
        float d = rdf16(b), m = rdf16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(qs[j] & 0x0f) + m;
            y[j + 16] = d * (float)(qs[j] >> 4) + m;
        }
    }
}

/* Q5_0: y = d * (q - 16); bit j of the 32-bit qh is the fifth bit of element j. */
static void dq_q5_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
        float d = rdf16(b);
        uint32_t qh = rd32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            int q0 = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = d * (float)(q0 - 16);
            y[j + 16] = d * (float)(q1 - 16);
        }
    }
}

/* Q5_1: y = (d * q) + m. */
static void dq_q5_1(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
        float d = rdf16(b), m = rdf16(b + 2);
        uint32_t qh = rd32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < 16; j++) {
            int q0 = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = d * (float)q0 + m;
            y[j + 16] = d * (float)q1 + m;
        }
    }
}

/* Q8_0: y = x * d. */
static void dq_q8_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
        float d = rdf16(b);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
 * Element e = h*128 + s*32 + l (h 0..1, s 0..3, l 0..31): q = (qs[h*32+l] >> 2s) & 3,
 * sub-block e/16: y = (d * sc) * q - (dmin * mn). */
static void dq_q2_K(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 84, y += 256) {
        const uint8_t *sc = b, *qs = b + 16;
        float d = rdf16(b + 80), dmin = rdf16(b + 82);
        for (int e = 0; e < 256; e++) {
            int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
            int q = (qs[h * 32 + l] >> (2 * s)) & 3;
            float dl = d * (float)(sc[e >> 4] & 0x0f);
            float ml = dmin * (float)(sc[e >> 4] >> 4);
            y[e] = dl * (float)q - ml;
        }
    }
}

/* Q3_K: hmask[32], qs[64], scales[12] (16 six-bit scales, biased by 32), d.
 * Scale k: low 4 bits from scales[k % 8] (nibble k / 8), high 2 bits from
 * scales[8 + k % 4] >> 2*(k / 4). Element e = h*128 + s*32 + l: low bits
 * (qs[h*32+l] >> 2s) & 3; it loses 4 when bit e/32 of hmask[l] is clear.
 * y = (d * scale[e/16]) * q. */
static void dq_q3_K(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 110, y += 256) {
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        float d = rdf16(b + 108);
        float dl[16];
        for (int k = 0; k < 16; k++) {
            int lo = (sc[k % 8] >> (4 * (k / 8))) & 0x0f;
            int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 0x03;
            dl[k] = d * (float)((int8_t)(uint8_t)(lo | (hi << 4)) - 32);
        }
        for (int e = 0; e < 256; e++) {
            int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
            int lo = (qs[h * 32 + l] >> (2 * s)) & 3;
            int hbit = (hm[l] >> (e >> 5)) & 1;
            y[e] = dl[e >> 4] * (float)(lo - ((hbit ^ 1) << 2));
        }
    }
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block. */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K: d, dmin, scales[12], qs[128]. Element e = c*64 + s*32 + l: q = (qs[c*32+l] >> 4s) & 15,
 * sub-block j = e/32: y = (d * sc_j) * q - (dmin * m_j). */
static void dq_q4_K(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 144, y += 256) {
        float d = rdf16(b), dmin = rdf16(b + 2);
        const uint8_t *scales = b + 4, *qs = b + 16;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            scale_min_k4(j, scales, &sc, &mn);
            float d1 = d * (float)sc, m1 = dmin * (float)mn;
            const uint8_t *q = qs + (j / 2) * 32;
            int shift = 4 * (j & 1);
            for (int l = 0; l < 32; l++) y[j * 32 + l] = d1 * (float)((q[l] >> shift) & 0x0f) - m1;
        }
    }
}

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]. Like Q4_K plus a fifth bit: bit j of qh[l] for
 * element j*32 + l. */
static void dq_q5_K(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 176, y += 256) {
        float d = rdf16(b), dmin = rdf16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            scale_min_k4(j, scales, &sc, &mn);
            float d1 = d * (float)sc, m1 = dmin * (float)mn;
            const uint8_t *q = qs + (j / 2) * 32;
            int shift = 4 * (j & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0f) | (((qh[l] >> j) & 1) << 4);
                y[j * 32 + l] = d1 * (float)v - m1;
            }
        }
    }
}

/* Q6_K: ql[128], qh[64], scales[16] (int8), d. Element e = h*128 + s*32 + l (h 0..1, s 0..3):
 * low 4 bits from ql[h*64 + (s&1)*32 + l] >> 4*(s>>1), high 2 bits (qh[h*32+l] >> 2s) & 3,
 * q - 32; y = (d * scales[e/16]) * q. */
static void dq_q6_K(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 210, y += 256) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = rdf16(b + 208);
        float ds[16];
        for (int k = 0; k < 16; k++) ds[k] = d * (float)sc[k];
        for (int e = 0; e < 256; e++) {
            int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
            int lo = (ql[h * 64 + (s & 1) * 32 + l] >> (4 * (s >> 1))) & 0x0f;
            int hi = (qh[h * 32 + l] >> (2 * s)) & 3;
            y[e] = ds[e >> 4] * (float)((lo | (hi << 4)) - 32);
        }
    }
}

/* ---- re-blocking Q4_K / Q5_K into Q4_1 / Q5_1 (quant.h) --------------------------------- */

static inline void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* f16 of an f32 that is finite but rounds to an f16 infinity. */
static inline bool f16_overflows(float f, uint16_t h) {
    return (f32_to_bits(f) & 0x7f800000u) != 0x7f800000u && (h & 0x7c00u) == 0x7c00u;
}

bool pgd_reblock_type(uint32_t from, uint32_t *to) {
    switch (from) {
    case PGD_TYPE_Q4_K:
        *to = PGD_TYPE_Q4_1;
        return true;
    case PGD_TYPE_Q5_K:
        *to = PGD_TYPE_Q5_1;
        return true;
    default:
        return false;
    }
}

int pgd_reblock_row(uint32_t from, const void *src, void *dst, int64_t n) {
    uint32_t to;
    if (!pgd_reblock_type(from, &to))
        return pgd_error_set(PGD_EINVAL, "tensor type %u has no re-blocking", from);
    if (n < 0 || n % PGD_QK_K)
        return pgd_error_set(PGD_EINVAL, "%lld elements is not a multiple of %d", (long long)n,
                             PGD_QK_K);
    const bool five = from == PGD_TYPE_Q5_K;
    const size_t in_size = five ? sizeof(pgd_block_q5_K) : sizeof(pgd_block_q4_K);
    const size_t out_size = five ? sizeof(pgd_block_q5_1) : sizeof(pgd_block_q4_1);
    const uint8_t *b = src;
    uint8_t *o = dst;
    bool overflow = false;
    for (int64_t i = 0; i < n / PGD_QK_K; i++, b += in_size) {
        /* in: d, dmin, scales[12], (Q5_K: qh[32]), qs[128] — see dq_q4_K / dq_q5_K */
        float d = rdf16(b), dmin = rdf16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int j = 0; j < 8; j++, o += out_size) {
            /* out: d', m', (Q5_1: qh, bit l = fifth bit of element l), qs[16]: element l in the
             * low nibble of qs[l], element l + 16 in its high nibble */
            int sc, mn;
            scale_min_k4(j, scales, &sc, &mn);
            float d1 = d * (float)sc, m1 = -(dmin * (float)mn); /* both exact */
            uint16_t hd = pgd_f32_to_f16(d1), hm = pgd_f32_to_f16(m1);
            overflow |= f16_overflows(d1, hd) || f16_overflows(m1, hm);
            wr16(o, hd);
            wr16(o + 2, hm);
            const uint8_t *q = qs + (j / 2) * 32; /* [32], group j in nibble j & 1 */
            const int shift = 4 * (j & 1);
            uint8_t *oq = o + (five ? 8 : 4);
            for (int l = 0; l < 16; l++)
                oq[l] = (uint8_t)(((q[l] >> shift) & 0x0f) | (((q[l + 16] >> shift) & 0x0f) << 4));
            if (five) {
                uint32_t h = 0;
                for (int l = 0; l < 32; l++) h |= (uint32_t)((qh[l] >> j) & 1u) << l;
                for (int k = 0; k < 4; k++) o[4 + k] = (uint8_t)(h >> (8 * k));
            }
        }
    }
    if (overflow)
        return pgd_error_set(PGD_ERANGE, "%s block scales beyond the f16 range",
                             five ? "Q5_K" : "Q4_K");
    return 0;
}

int pgd_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const pgd_type_traits *tt = pgd_type_info(type);
    if (!tt) return pgd_error_set(PGD_EINVAL, "unknown tensor type id %u", type);
    if (n < 0 || n % tt->block_size)
        return pgd_error_set(PGD_EINVAL, "%lld elements is not a multiple of the %s block size %u",
                             (long long)n, tt->name, tt->block_size);
    if (!tt->can_dequant)
        return pgd_error_set(PGD_EUNSUPPORTED, "no dequantizer for tensor type %s", tt->name);
    const uint8_t *s = src;
    int64_t nb = n / tt->block_size;
    switch ((pgd_type)type) {
    case PGD_TYPE_F32:
        memcpy(dst, s, (size_t)n * sizeof(float));
        break;
    case PGD_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = pgd_f16_to_f32(rd16(s + 2 * i));
        break;
    case PGD_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = pgd_bf16_to_f32(rd16(s + 2 * i));
        break;
    case PGD_TYPE_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, s + 8 * i, sizeof v);
            dst[i] = (float)v;
        }
        break;
    case PGD_TYPE_I8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)s[i];
        break;
    case PGD_TYPE_I16:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int16_t)rd16(s + 2 * i);
        break;
    case PGD_TYPE_I32:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int32_t)rd32(s + 4 * i);
        break;
    case PGD_TYPE_I64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, s + 8 * i, sizeof v);
            dst[i] = (float)v;
        }
        break;
    case PGD_TYPE_Q4_0:
        dq_q4_0(s, dst, nb);
        break;
    case PGD_TYPE_Q4_1:
        dq_q4_1(s, dst, nb);
        break;
    case PGD_TYPE_Q5_0:
        dq_q5_0(s, dst, nb);
        break;
    case PGD_TYPE_Q5_1:
        dq_q5_1(s, dst, nb);
        break;
    case PGD_TYPE_Q8_0:
        dq_q8_0(s, dst, nb);
        break;
    case PGD_TYPE_Q2_K:
        dq_q2_K(s, dst, nb);
        break;
    case PGD_TYPE_Q3_K:
        dq_q3_K(s, dst, nb);
        break;
    case PGD_TYPE_Q4_K:
        dq_q4_K(s, dst, nb);
        break;
    case PGD_TYPE_Q5_K:
        dq_q5_K(s, dst, nb);
        break;
    case PGD_TYPE_Q6_K:
        dq_q6_K(s, dst, nb);
        break;
    default:
        return pgd_error_set(PGD_EUNSUPPORTED, "no dequantizer for tensor type %s", tt->name);
    }
    return 0;
}

void pgd_quantize_row_q8_0(const float *x /* [n] */, void *dst, int64_t n) {
    pgd_block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / PGD_QK; b++) {
        const float *xb = x + b * PGD_QK;
        float amax = 0.0f;
        for (int j = 0; j < PGD_QK; j++) {
            float v = xb[j] < 0 ? -xb[j] : xb[j];
            if (v > amax) amax = v;
        }
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = pgd_f32_to_f16(d);
        for (int j = 0; j < PGD_QK; j++) {
            float v = xb[j] * id;
            y[b].qs[j] = (int8_t)(v < 0 ? v - 0.5f : v + 0.5f);
        }
    }
}

void pgd_quantize_row_q4_1(const float *x /* [n] */, void *dst, int64_t n) {
    pgd_block_q4_1 *y = dst;
    for (int64_t b = 0; b < n / PGD_QK; b++) {
        const float *xb = x + b * PGD_QK;
        float lo = xb[0], hi = xb[0];
        for (int j = 1; j < PGD_QK; j++) {
            if (xb[j] < lo) lo = xb[j];
            if (xb[j] > hi) hi = xb[j];
        }
        float d = (hi - lo) / 15.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = pgd_f32_to_f16(d);
        y[b].m = pgd_f32_to_f16(lo);
        uint8_t q[PGD_QK];
        for (int j = 0; j < PGD_QK; j++) {
            float v = (xb[j] - lo) * id + 0.5f;                 /* >= 0.5: trunc rounds half up */
            q[j] = v >= 15.0f ? 15 : v > 0.0f ? (uint8_t)v : 0; /* NaN (id infinite): 0 */
        }
        for (int j = 0; j < PGD_QK / 2; j++) y[b].qs[j] = (uint8_t)(q[j] | q[j + PGD_QK / 2] << 4);
    }
}
