/*
 * tests/unit/test_reblock.c — re-blocking Q4_K / Q5_K rows into Q4_1 / Q5_1 (pgd_reblock_row),
 * checked through the project's dequantizers: the Q4_1 / Q5_1 dequantization of the result
 * against the Q4_K / Q5_K dequantization of the source.
 *
 * Blocks are random: the 4/5-bit values and the sixteen 6-bit scales and mins are random bits
 * (packed here byte by byte from ggml's reference layout; the 12 scale bytes are a bijection of
 * the 16 six-bit values, so random values are random bytes), d and dmin random finite f16 of
 * either sign, f16 subnormals included.
 *
 * The bound (quant.h): with d1 = d·sc_j and m1 = dmin·m_j (exact in f32), the source dequantizes
 * to y = fl(d1·q − m1) and the result to y' = fl(d'·q + m') (d1·q and d'·q are exact in f32:
 * at most 11 + 6 + 5 and 11 + 5 significant bits), d' = f16(d1), m' = f16(−m1), each rounded
 * to nearest: |d' − d1| ≤ e(d1) = max(2^-11·|d1|, 2^-25), |m' + m1| ≤ e(m1). So
 *   |y' − y| ≤ q·e(d1) + e(m1) + 2^-24·(|y| + |y'|)
 * (the last term: one f32 rounding in each dequantizer). A value landing in the wrong place
 * (nibble order, fifth bit, scale index) breaks it by about d1 per unit of q.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "testutil.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* A random finite f16 of either sign whose exponent field is at most max_exp (0: subnormal or
 * zero), so that d·63 stays inside the f16 range when max_exp <= 24. */
static uint16_t rand_f16(int max_exp) {
    uint16_t e = (uint16_t)(rng_u64() % (uint64_t)(max_exp + 1));
    return (uint16_t)((rng_u64() & 0x8000u) | (e << 10) | (rng_u64() & 0x3ffu));
}

/* ggml's packing of the eight 6-bit scales and mins of a Q4_K / Q5_K super-block. */
static void pack_scales(const int sc[8], const int mn[8], uint8_t out[12]) {
    memset(out, 0, 12);
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)sc[j];
        out[j + 4] = (uint8_t)mn[j];
    }
    for (int j = 4; j < 8; j++) {
        out[j + 4] = (uint8_t)((sc[j] & 15) | ((mn[j] & 15) << 4));
        out[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        out[j] |= (uint8_t)((mn[j] >> 4) << 6);
    }
}

/* One random super-block at b (144 or 176 bytes); sc, mn and q [256] (the 4/5-bit values in
 * element order) are returned for the bound. Element e = 32 j + l sits in nibble j & 1 of
 * qs[32 (j / 2) + l]; its fifth bit (Q5_K) is bit j of qh[l]. */
static void rand_block(bool five, uint16_t d, uint16_t dmin, uint8_t *b, int sc[8], int mn[8],
                       int q[256]) {
    put16(b, d);
    put16(b + 2, dmin);
    for (int j = 0; j < 8; j++) {
        sc[j] = (int)(rng_u64() & 63);
        mn[j] = (int)(rng_u64() & 63);
    }
    pack_scales(sc, mn, b + 4);
    uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
    if (five) memset(qh, 0, 32);
    memset(qs, 0, 128);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, l = e % 32;
        q[e] = (int)(rng_u64() & (five ? 31 : 15));
        qs[32 * (j / 2) + l] |= (uint8_t)((q[e] & 15) << (4 * (j & 1)));
        if (five) qh[l] |= (uint8_t)((q[e] >> 4) << j);
    }
}

static double f16_err(double x) { /* half an f16 ulp at x: the round-to-nearest error bound */
    double rel = ldexp(fabs(x), -11), sub = ldexp(1.0, -25);
    return rel > sub ? rel : sub;
}

enum { NBLK = 64 }; /* super-blocks per row */

/* max_exp: the largest f16 exponent field of d and dmin; exact_scales: d and dmin powers of two
 * (then d' and m' are exact and the results must be equal bit for bit). */
static void check_reblock(bool five, int max_exp, bool exact_scales) {
    const uint32_t from = five ? PGD_TYPE_Q5_K : PGD_TYPE_Q4_K;
    const size_t in_size = five ? 176 : 144, out_size = five ? 24 : 20;
    uint32_t to = 0;
    REQUIRE(pgd_reblock_type(from, &to));
    CHECK_EQ_INT(to, five ? PGD_TYPE_Q5_1 : PGD_TYPE_Q4_1);
    static uint8_t src[NBLK * 176 + 1], dst[NBLK * 8 * 24 + 1];
    static float y[NBLK * 256], y2[NBLK * 256];
    static int sc[NBLK][8], mn[NBLK][8], q[NBLK][256];
    static double d1[NBLK][8], m1[NBLK][8];
    for (int i = 0; i < NBLK; i++) {
        uint16_t d = rand_f16(max_exp), dmin = rand_f16(max_exp);
        if (exact_scales) { /* 2^k, k in -14..9, either sign */
            d = (uint16_t)((d & 0x8000u) | ((1 + rng_u64() % 24) << 10));
            dmin = (uint16_t)((dmin & 0x8000u) | ((1 + rng_u64() % 24) << 10));
        }
        rand_block(five, d, dmin, src + 1 + i * in_size, sc[i], mn[i], q[i]);
        for (int j = 0; j < 8; j++) {
            d1[i][j] = (double)pgd_f16_to_f32(d) * sc[i][j];
            m1[i][j] = (double)pgd_f16_to_f32(dmin) * mn[i][j];
        }
    }
    /* odd addresses on both sides: reads and writes must not assume alignment */
    REQUIRE(pgd_reblock_row(from, src + 1, dst + 1, NBLK * 256) == 0);
    REQUIRE(pgd_dequant_row(from, src + 1, y, NBLK * 256) == 0);
    REQUIRE(pgd_dequant_row(to, dst + 1, y2, NBLK * 256) == 0);
    int bad = 0;
    double worst = 0.0; /* the largest |y' - y| / bound seen */
    for (int i = 0; i < NBLK; i++)
        for (int e = 0; e < 256; e++) {
            int j = e / 32;
            double a = y[i * 256 + e], b = y2[i * 256 + e];
            double bound =
                q[i][e] * f16_err(d1[i][j]) + f16_err(m1[i][j]) + ldexp(fabs(a) + fabs(b), -24);
            if (exact_scales) bound = 0.0;
            double err = fabs(a - b);
            if (!(err <= bound)) {
                if (bad++ < 5)
                    fprintf(stderr, "    block %d element %d: %.9g vs %.9g (bound %.3g)\n", i, e, a,
                            b, bound);
            } else if (bound > 0.0 && err / bound > worst) {
                worst = err / bound;
            }
        }
    CHECK_EQ_INT(bad, 0);
    /* the bound is not vacuous: with random d the f16 rounding shows up in the results */
    if (!exact_scales) CHECK(worst > 0.05);
    /* the layout itself: a block of the result holds d', m' and the values of its group */
    const uint8_t *o = dst + 1 + out_size * 9; /* super-block 1, group 1 */
    CHECK_EQ_INT(o[0] | (o[1] << 8), pgd_f32_to_f16((float)d1[1][1]));
    CHECK_EQ_INT(o[2] | (o[3] << 8), pgd_f32_to_f16((float)-m1[1][1]));
    const uint8_t *oq = o + (five ? 8 : 4);
    CHECK_EQ_INT(oq[0] & 15, q[1][32] & 15);
    CHECK_EQ_INT(oq[0] >> 4, q[1][48] & 15);
    if (five) CHECK_EQ_INT((o[4 + 2] >> 1) & 1, q[1][32 + 17] >> 4);
}

static void test_q4_k_random(void) {
    check_reblock(false, 24, false); /* |d| < 1024: d·63 < 65504 */
    check_reblock(false, 12, false); /* small scales, subnormal d' and m' among them */
}

static void test_q4_k_exact(void) {
    check_reblock(false, 24, true);
}

static void test_q5_k_random(void) {
    check_reblock(true, 24, false);
    check_reblock(true, 12, false);
}

static void test_q5_k_exact(void) {
    check_reblock(true, 24, true);
}

static void test_overflow_and_errors(void) {
    uint8_t b[176] = {0}, o[8 * 24];
    int sc[8] = {63, 1, 1, 1, 1, 1, 1, 1}, mn[8] = {0};
    put16(b, 0x7bff); /* d = 65504: d·63 is beyond f16 */
    pack_scales(sc, mn, b + 4);
    pgd_error_clear();
    CHECK_EQ_INT(pgd_reblock_row(PGD_TYPE_Q4_K, b, o, 256), PGD_ERANGE);
    CHECK(pgd_error_detail()[0] != '\0');
    CHECK_EQ_INT(pgd_reblock_row(PGD_TYPE_Q5_K, b, o, 256), PGD_ERANGE);
    sc[0] = 1; /* d·1 fits */
    pack_scales(sc, mn, b + 4);
    CHECK_EQ_INT(pgd_reblock_row(PGD_TYPE_Q4_K, b, o, 256), 0);
    put16(b, 0x7c00); /* d = inf is not an overflow: it dequantizes to inf / nan either way */
    CHECK_EQ_INT(pgd_reblock_row(PGD_TYPE_Q4_K, b, o, 256), 0);
    CHECK_EQ_INT(pgd_reblock_row(PGD_TYPE_Q4_K, b, o, 255), PGD_EINVAL);
    CHECK_EQ_INT(pgd_reblock_row(PGD_TYPE_Q4_K, b, o, 0), 0);
    uint32_t to = 12345;
    static const uint32_t none[] = {PGD_TYPE_Q6_K, PGD_TYPE_Q2_K, PGD_TYPE_Q3_K,
                                    PGD_TYPE_Q4_1, PGD_TYPE_Q8_0, PGD_TYPE_F32};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        CHECK(!pgd_reblock_type(none[i], &to));
        CHECK_EQ_INT(pgd_reblock_row(none[i], b, o, 256), PGD_EINVAL);
    }
    CHECK_EQ_INT(to, 12345);
}

int main(void) {
    RUN(test_q4_k_random);
    RUN(test_q4_k_exact);
    RUN(test_q5_k_random);
    RUN(test_q5_k_exact);
    RUN(test_overflow_and_errors);
    return test_summary();
}
