/*
 * tests/unit/test_cpu_ops.c — the CPU ops beside the matmul (paged attention, RMSNorm, RoPE,
 * SwiGLU) against straightforward double-precision references written here from the math.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/vexp.h"
#include "testutil.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Attention of the query heads of kv head kvh over positions 0..n_ctx-1, in double. */
static void attn_ref(const pgd_attn_shape *s, uint32_t kvh, const float *q, const float *kc,
                     const float *vc, const int32_t *table, uint32_t n_ctx, double *out) {
    uint32_t D = s->head_dim, BS = s->block_size;
    double *w = malloc(n_ctx * sizeof *w);
    for (uint32_t g = 0; g < s->n_group; g++) {
        double mx = -INFINITY, sum = 0;
        for (uint32_t p = 0; p < n_ctx; p++) {
            double dot = 0;
            for (uint32_t d = 0; d < D; d++)
                dot += (double)q[g * D + d] *
                       kc[pgd_attn_k_index(s, (uint64_t)table[p / BS], kvh, d, p % BS)];
            w[p] = dot * s->scale;
            if (w[p] > mx) mx = w[p];
        }
        for (uint32_t p = 0; p < n_ctx; p++) sum += (w[p] = exp(w[p] - mx));
        for (uint32_t d = 0; d < D; d++) {
            double acc = 0;
            for (uint32_t p = 0; p < n_ctx; p++) {
                uint64_t b = (uint64_t)table[p / BS];
                acc += w[p] / sum * vc[((b * s->n_kv_head + kvh) * BS + p % BS) * D + d];
            }
            out[g * D + d] = acc;
        }
    }
    free(w);
}

static void test_attention_paged(void) {
    static const uint32_t ctxs[] = {1, 15, 16, 17, 100, 257};
    pgd_attn_shape s = {.n_kv_head = 3, .n_group = 3, .head_dim = 64, .block_size = 16};
    s.scale = 1.0f / sqrtf((float)s.head_dim);
    const uint32_t n_blocks = 40, D = s.head_dim, G = s.n_group;
    uint64_t floats = (uint64_t)n_blocks * s.n_kv_head * s.block_size * D;
    float *kc = malloc(floats * 4), *vc = malloc(floats * 4);
    for (uint64_t i = 0; i < floats; i++) kc[i] = frand() * 2, vc[i] = frand();
    int32_t table[40];
    for (uint32_t i = 0; i < n_blocks - 1; i++)
        table[i] = (int32_t)(n_blocks - 1 - i); /* scattered */
    float q[3 * 64], out[3 * 64], out2[3 * 64], *scores = malloc(G * 512 * 4);
    double ref[3 * 64];
    for (size_t c = 0; c < PGD_ARRAY_LEN(ctxs); c++) {
        for (uint32_t i = 0; i < G * D; i++) q[i] = frand() * 3;
        for (uint32_t kvh = 0; kvh < s.n_kv_head; kvh++) {
            pgd_attn_paged(&s, kvh, q, kc, vc, table, ctxs[c], scores, out);
            attn_ref(&s, kvh, q, kc, vc, table, ctxs[c], ref);
            double e2 = 0, r2 = 0;
            for (uint32_t i = 0; i < G * D; i++) {
                e2 += (out[i] - ref[i]) * (out[i] - ref[i]);
                r2 += ref[i] * ref[i];
            }
            if (!(sqrt(e2 / r2) <= 1e-5))
                fprintf(stderr, "  n_ctx %u kvh %u: relative error %g\n", ctxs[c], kvh,
                        sqrt(e2 / r2));
            CHECK(sqrt(e2 / r2) <= 1e-5);
            /* The same query again with garbage left in the scratch: same bits. */
            for (uint32_t i = 0; i < G * 512; i++) scores[i] = frand() * 1e6f;
            pgd_attn_paged(&s, kvh, q, kc, vc, table, ctxs[c], scores, out2);
            CHECK(memcmp(out, out2, sizeof out) == 0);
        }
    }
    free(kc);
    free(vc);
    free(scores);
}

/* Every instruction-set path gives the scalar reference's bits, on shapes beyond the default
 * model's (heads per group 1..9, head_dim 16..128, partial and scattered blocks, block sizes the
 * SIMD paths do not take), for f32 and f16 caches, and stays within 1e-5 of the double
 * reference. An f16 cache gives the bits of the f32 path over the same values rounded to f16
 * (attention.h). */
static void test_attention_paths(void) {
    static const pgd_cpu_isa isas[] = {PGD_ISA_AVX2, PGD_ISA_AVX512};
    static const struct {
        uint32_t n_kv_head, n_group, head_dim, block_size;
    } shapes[] = {{3, 3, 64, 16}, {1, 1, 64, 16}, {2, 4, 128, 16}, {2, 7, 64, 16}, {1, 9, 32, 16},
                  {4, 2, 16, 16}, {2, 2, 80, 16}, {2, 3, 64, 8},   {1, 2, 24, 16}};
    static const uint32_t ctxs[] = {1, 2, 15, 16, 17, 31, 33, 100, 300};
    int compared = 0, compared_f16 = 0;
    for (size_t si = 0; si < PGD_ARRAY_LEN(shapes); si++) {
        pgd_attn_shape s = {shapes[si].n_kv_head,
                            shapes[si].n_group,
                            shapes[si].head_dim,
                            shapes[si].block_size,
                            0,
                            PGD_KV_F32};
        s.scale = 1.0f / sqrtf((float)s.head_dim);
        const uint32_t D = s.head_dim, G = s.n_group, BS = s.block_size;
        const uint32_t n_blocks = 320 / BS + 2;
        uint64_t floats = (uint64_t)n_blocks * s.n_kv_head * BS * D;
        float *kc = malloc(floats * 4), *vc = malloc(floats * 4);
        float *kr = malloc(floats * 4), *vr = malloc(floats * 4); /* kc, vc rounded to f16 */
        uint16_t *kh = malloc(floats * 2), *vh = malloc(floats * 2);
        float *q = malloc(G * D * 4), *ref = malloc(G * D * 4), *got = malloc(G * D * 4);
        float *scores = malloc((size_t)G * (320 + BS) * 4);
        double *exact = malloc(G * D * sizeof(double));
        int32_t *table = malloc(n_blocks * sizeof(int32_t));
        for (uint64_t i = 0; i < floats; i++) {
            kc[i] = frand() * 2, vc[i] = frand();
            kh[i] = pgd_f32_to_f16(kc[i]), vh[i] = pgd_f32_to_f16(vc[i]);
            kr[i] = pgd_f16_to_f32(kh[i]), vr[i] = pgd_f16_to_f32(vh[i]);
        }
        for (uint32_t i = 0; i < n_blocks; i++) table[i] = (int32_t)((i * 7 + 3) % n_blocks);
        for (size_t c = 0; c < 2 * PGD_ARRAY_LEN(ctxs); c++) {
            const bool f16 = c >= PGD_ARRAY_LEN(ctxs);
            const uint32_t n_ctx = ctxs[c % PGD_ARRAY_LEN(ctxs)];
            const void *K = f16 ? (const void *)kh : kc, *V = f16 ? (const void *)vh : vc;
            s.dtype = f16 ? PGD_KV_F16 : PGD_KV_F32;
            for (uint32_t i = 0; i < G * D; i++) q[i] = frand() * 3;
            const uint32_t kvh = (uint32_t)c % s.n_kv_head;
            REQUIRE(pgd_attn_paged_isa(PGD_ISA_SCALAR, &s, kvh, q, K, V, table, n_ctx, scores,
                                       ref) == 0);
            attn_ref(&s, kvh, q, f16 ? kr : kc, f16 ? vr : vc, table, n_ctx, exact);
            double e2 = 0, r2 = 0;
            for (uint32_t i = 0; i < G * D; i++) {
                e2 += (ref[i] - exact[i]) * (ref[i] - exact[i]);
                r2 += exact[i] * exact[i];
            }
            CHECK(sqrt(e2 / r2) <= 1e-5);
            if (f16) { /* the f32 path over the rounded values: the same bits */
                pgd_attn_shape s32 = s;
                s32.dtype = PGD_KV_F32;
                REQUIRE(pgd_attn_paged_isa(PGD_ISA_SCALAR, &s32, kvh, q, kr, vr, table, n_ctx,
                                           scores, got) == 0);
                CHECK(memcmp(got, ref, G * D * 4) == 0);
            }
            for (size_t k = 0; k < PGD_ARRAY_LEN(isas); k++) {
                if (!pgd_cpu_isa_supported(isas[k])) continue;
                for (uint32_t i = 0; i < G * (320 + BS); i++) scores[i] = frand() * 1e6f;
                memset(got, 0xff, G * D * 4);
                REQUIRE(pgd_attn_paged_isa(isas[k], &s, kvh, q, K, V, table, n_ctx, scores, got) ==
                        0);
                if (memcmp(got, ref, G * D * 4) != 0) {
                    fprintf(stderr, "  %s: %s shape %zu n_ctx %u differs from the scalar path\n",
                            pgd_cpu_isa_name(isas[k]), pgd_kv_dtype_name(s.dtype), si, n_ctx);
                    tu_failed_checks++;
                }
                compared++, compared_f16 += f16;
            }
        }
        free(kc), free(vc), free(kr), free(vr), free(kh), free(vh);
        free(q), free(ref), free(got), free(scores), free(exact), free(table);
    }
    if (!pgd_cpu_isa_supported(PGD_ISA_AVX2))
        fprintf(stderr, "  no AVX2 on this CPU: only the scalar path was checked\n");
    else
        CHECK(compared > 0 && compared_f16 > 0);
}

/* pgd_attn_store puts a token's K and V where the layout of attention.h says, and nowhere
 * else; in an f16 cache each value is pgd_f32_to_f16 of it (ties, subnormals, overflow to
 * infinity, NaN), on every path. */
static void test_attention_store(void) {
    static const pgd_cpu_isa isas[] = {PGD_ISA_SCALAR, PGD_ISA_AVX2, PGD_ISA_AVX512};
    static const float special[] = {0.0f,       -0.0f,    1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
                                    65504.0f,   65520.0f, -1e9f,           0x1p-25f,
                                    0x1.8p-25f, 0x1p-24f, 0x1.7fp-15f,     INFINITY,
                                    -INFINITY,  NAN,      1e-30f,          0x1.ffcp-15f};
    static const struct {
        uint32_t n_kv_head, head_dim, block_size;
    } shapes[] = {{3, 64, 16}, {2, 24, 8}, {1, 512, 16}};
    int stored = 0;
    for (size_t si = 0; si < PGD_ARRAY_LEN(shapes); si++) {
        const uint32_t HK = shapes[si].n_kv_head, D = shapes[si].head_dim;
        const uint32_t BS = shapes[si].block_size, n_blocks = 3;
        const uint64_t n = (uint64_t)n_blocks * HK * BS * D;
        float *k = malloc(HK * D * 4), *v = malloc(HK * D * 4);
        for (uint32_t i = 0; i < HK * D; i++) {
            k[i] = i % 5 == 0 ? special[(i / 5) % PGD_ARRAY_LEN(special)] : frand() * 100;
            v[i] = i % 3 == 0 ? special[(i / 3 + 7) % PGD_ARRAY_LEN(special)] : frand() * 1e-4f;
        }
        for (int f16 = 0; f16 < 2; f16++) {
            pgd_attn_shape s = {HK, 1, D, BS, 1.0f, f16 ? PGD_KV_F16 : PGD_KV_F32};
            const uint32_t eb = pgd_kv_dtype_bytes(s.dtype);
            uint8_t *kc = malloc(n * eb), *vc = malloc(n * eb);
            for (size_t ii = 0; ii < PGD_ARRAY_LEN(isas); ii++) {
                if (!pgd_cpu_isa_supported(isas[ii])) continue;
                memset(kc, 0x5a, n * eb);
                memset(vc, 0x5a, n * eb);
                const uint64_t b = 1;
                const uint32_t j = BS - 3;
                REQUIRE(pgd_attn_store_isa(isas[ii], &s, kc, vc, b, j, k, v) == 0);
                uint64_t bad = 0;
                for (uint64_t e = 0; e < n; e++) { /* which value belongs at element e */
                    const uint64_t blk = e / ((uint64_t)HK * BS * D),
                                   r = e % ((uint64_t)HK * BS * D);
                    const uint32_t h = (uint32_t)(r / ((uint64_t)BS * D));
                    const uint32_t kd = (uint32_t)(r % ((uint64_t)BS * D) / BS), kj = r % BS;
                    const uint32_t vj = (uint32_t)(r % ((uint64_t)BS * D) / D), vd = r % D;
                    const bool kin = blk == b && kj == j, vin = blk == b && vj == j;
                    for (int which = 0; which < 2; which++) {
                        const uint8_t *c = (which ? vc : kc) + e * eb;
                        const bool in = which ? vin : kin;
                        const float x = which ? v[h * D + vd] : k[h * D + kd];
                        uint8_t want[4];
                        if (!in)
                            memset(want, 0x5a, 4);
                        else if (f16) {
                            uint16_t hv = pgd_f32_to_f16(x);
                            memcpy(want, &hv, 2);
                        } else
                            memcpy(want, &x, 4);
                        bad += memcmp(c, want, eb) != 0;
                    }
                }
                if (bad)
                    fprintf(stderr, "  store %s %s shape %zu: %llu elements wrong\n",
                            pgd_cpu_isa_name(isas[ii]), pgd_kv_dtype_name(s.dtype), si,
                            (unsigned long long)bad);
                CHECK(bad == 0);
                stored++;
            }
            free(kc), free(vc);
        }
        free(k), free(v);
    }
    CHECK(stored >= 6);
}

static void test_kv_dtype_names(void) {
    pgd_kv_dtype t = PGD_KV_F32;
    CHECK(pgd_kv_dtype_parse("f16", &t) == 0 && t == PGD_KV_F16);
    CHECK(pgd_kv_dtype_parse("f32", &t) == 0 && t == PGD_KV_F32);
    CHECK(pgd_kv_dtype_parse("fp8", &t) == PGD_EINVAL && t == PGD_KV_F32);
    CHECK(strstr(pgd_error_detail(), "auto, f16 or f32") != NULL);
    CHECK(pgd_kv_dtype_parse("auto", &t) == 0 && t == PGD_KV_AUTO);
    CHECK(pgd_kv_dtype_parse(NULL, &t) == PGD_EINVAL);
    CHECK(!strcmp(pgd_kv_dtype_name(PGD_KV_F16), "f16") && pgd_kv_dtype_bytes(PGD_KV_F16) == 2);
    CHECK(!strcmp(pgd_kv_dtype_name(PGD_KV_F32), "f32") && pgd_kv_dtype_bytes(PGD_KV_F32) == 4);
}

/* pgd__expf: within 3 ulp of exp over the range softmax and SiLU use; the clamps hold. */
static void test_expf(void) {
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.01171875f) {
        double e = exp((double)x), got = pgd__expf(x);
        double ulp = ldexp(1.0, ilogb(e) - 23);
        double err = fabs(got - e) / ulp;
        if (err > worst) worst = err;
    }
    CHECK(worst <= 3.0);
    if (worst > 3.0) fprintf(stderr, "  worst error %.2f ulp\n", worst);
    CHECK(pgd__expf(0.0f) == 1.0f);
    CHECK(pgd__expf(-1000.0f) > 0 && pgd__expf(-1000.0f) < 1e-37f);
    CHECK(isfinite(pgd__expf(1000.0f)));
}

static void test_rmsnorm(void) {
    float x[576], g[576], y[576];
    for (int i = 0; i < 576; i++) x[i] = frand() * 10, g[i] = frand();
    double ss = 0;
    for (int i = 0; i < 576; i++) ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / 576 + 1e-5);
    pgd_rmsnorm_f32(x, g, y, 576, 1e-5f);
    for (int i = 0; i < 576; i++)
        CHECK_NEAR(y[i], x[i] * inv * g[i], 1e-5 * (1 + fabs(x[i] * inv * g[i])));
    pgd_rmsnorm_f32(x, g, x, 576, 1e-5f); /* in place */
    CHECK(memcmp(x, y, sizeof y) == 0);
}

static void test_rope(void) {
    const uint32_t H = 2, D = 64, R = 64;
    double inv[32];
    float cs[64], x[2 * 64], orig[2 * 64];
    pgd_rope_inv_freq(inv, R, 10000.0f, NULL);
    CHECK_NEAR(inv[1], pow(10000.0, -2.0 / 64), 1e-15);
    for (int neox = 0; neox <= 1; neox++) {
        double pos = 1234;
        pgd_rope_cos_sin(cs, inv, R, pos);
        for (uint32_t i = 0; i < H * D; i++) orig[i] = x[i] = frand();
        pgd_rope_apply(x, cs, H, D, R, neox);
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = 0; i < R / 2; i++) {
                uint32_t a = neox ? i : 2 * i, b = neox ? i + R / 2 : 2 * i + 1;
                double th = pos * pow(10000.0, -2.0 * i / R);
                double xa = orig[h * D + a], xb = orig[h * D + b];
                CHECK_NEAR(x[h * D + a], xa * cos(th) - xb * sin(th), 1e-5);
                CHECK_NEAR(x[h * D + b], xa * sin(th) + xb * cos(th), 1e-5);
            }
    }
    /* Frequency factors divide the frequencies. */
    float ff[32];
    for (int i = 0; i < 32; i++) ff[i] = 1.0f + (float)i;
    double inv2[32];
    pgd_rope_inv_freq(inv2, R, 10000.0f, ff);
    CHECK_NEAR(inv2[5], inv[5] / 6.0, 1e-18);
}

static void test_swiglu(void) {
    float gt[100], up[100], out[100];
    for (int i = 0; i < 100; i++) gt[i] = frand() * 8, up[i] = frand();
    pgd_swiglu_f32(gt, up, out, 100);
    for (int i = 0; i < 100; i++) {
        double g = gt[i];
        CHECK_NEAR(out[i], g / (1 + exp(-g)) * up[i], 1e-5);
    }
    /* Every path gives the scalar bits, tails included (n = 0 .. 70), extremes too. */
    float g2[70], u2[70], ref[70], got[70];
    for (int i = 0; i < 70; i++) g2[i] = frand() * 30, u2[i] = frand() * 4;
    g2[0] = 0.0f, g2[1] = -0.0f, g2[2] = 200.0f, g2[3] = -200.0f, g2[4] = 1e-30f;
    static const pgd_cpu_isa isas[] = {PGD_ISA_AVX2, PGD_ISA_AVX512};
    for (size_t k = 0; k < PGD_ARRAY_LEN(isas); k++) {
        if (!pgd_cpu_isa_supported(isas[k])) continue;
        for (uint64_t n = 0; n <= 70; n++) {
            REQUIRE(pgd_swiglu_f32_isa(PGD_ISA_SCALAR, g2, u2, ref, n) == 0);
            REQUIRE(pgd_swiglu_f32_isa(isas[k], g2, u2, got, n) == 0);
            CHECK(memcmp(ref, got, n * sizeof(float)) == 0);
        }
    }
    REQUIRE(pgd_swiglu_f32_isa(PGD_ISA_SCALAR, g2, u2, ref, 5) == 0);
    CHECK(ref[2] == 200.0f * u2[2]);
    CHECK(fabsf(ref[3]) < 1e-30f);
}

int main(void) {
    RUN(test_attention_paged);
    RUN(test_attention_paths);
    RUN(test_attention_store);
    RUN(test_kv_dtype_names);
    RUN(test_expf);
    RUN(test_rmsnorm);
    RUN(test_rope);
    RUN(test_swiglu);
    return test_summary();
}
