/*
 * kernels/cuda/moe_twin.c — CPU twins of the mixture-of-experts routing kernels (moe.cu): the
 * experts of each token as engine/backends/cpu.c's route_token chooses them, written in
 * ascending id; the pairs grouped by expert into the grouped products' tiles; the experts'
 * outputs mixed back by fused multiply-adds in expert order. Host pointers; the kernels'
 * results bit for bit (the route's weights up to the device's double exp, which may differ from
 * the C library's by an ulp in double: moe.h). Plain C; no FMA contraction (ISO C mode for GCC,
 * the pragma for clang): the one fused operation is fmaf, spelt out.
 */
#include "kernels/cuda/moe.h"

#include <math.h>
#include <stdbool.h>

#include "common/error.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* logits: f32 [T][NE]; pick, pick_w: [T][K]. */
void pgd_cuda_moe_route_twin(const float *logits, uint32_t T, uint32_t NE, uint32_t K,
                             uint32_t *pick, float *pick_w) {
    PGD_ASSERT(NE >= 1 && NE <= PGD_MOE_MAX_EXPERTS && K >= 1 && K <= NE && K <= PGD_MOE_MAX_USED);
    for (uint64_t t = 0; t < T; t++) {
        const float *r = logits + t * NE;
        uint32_t idx[PGD_MOE_MAX_USED];
        bool taken[PGD_MOE_MAX_EXPERTS] = {false};
        for (uint32_t j = 0; j < K; j++) { /* pass j: the first untaken, then strictly greater */
            uint32_t best = UINT32_MAX;
            for (uint32_t e = 0; e < NE; e++)
                if (!taken[e] && (best == UINT32_MAX || r[e] > r[best])) best = e;
            idx[j] = best;
            taken[best] = true;
        }
        double wd[PGD_MOE_MAX_USED], sum = 0.0;
        for (uint32_t j = 0; j < K; j++) sum += wd[j] = exp((double)r[idx[j]] - (double)r[idx[0]]);
        for (uint32_t j = 0; j < K; j++) { /* at its rank among the K ids */
            uint32_t rank = 0;
            for (uint32_t i = 0; i < K; i++) rank += idx[i] < idx[j];
            pick[t * K + rank] = idx[j];
            pick_w[t * K + rank] = (float)(wd[j] / sum);
        }
    }
}

/* pick: [T][K]; sorted_tok, row_of: [T * K]; tiles: [pgd_grouped_max_tiles(T * K, NE)]. Ids >= NE
 * are ignored (their pairs get no row), as on the device. */
void pgd_cuda_moe_group_twin(const uint32_t *pick, uint32_t T, uint32_t NE, uint32_t K,
                             uint32_t *sorted_tok, uint32_t *row_of, pgd_grouped_tile *tiles,
                             uint32_t *n_tiles) {
    PGD_ASSERT(NE >= 1 && NE <= PGD_MOE_MAX_EXPERTS && K >= 1 && K <= NE && K <= PGD_MOE_MAX_USED);
    const uint64_t P = (uint64_t)T * K;
    uint32_t first[PGD_MOE_MAX_EXPERTS + 1] = {0}; /* expert e's rows: [first[e], first[e + 1]) */
    for (uint64_t p = 0; p < P; p++)
        if (pick[p] < NE) first[pick[p] + 1]++;
    uint32_t nt = 0;
    for (uint32_t e = 0; e < NE; e++) {
        const uint32_t c = first[e + 1];
        first[e + 1] += first[e];
        for (uint32_t at = 0; at < c; at += PGD_GROUPED_TILE_ROWS)
            tiles[nt++] = (pgd_grouped_tile){
                .expert = e,
                .row0 = first[e] + at,
                .rows = c - at < PGD_GROUPED_TILE_ROWS ? c - at : PGD_GROUPED_TILE_ROWS};
    }
    for (uint64_t p = 0; p < P; p++) { /* pairs in order: tokens ascending within an expert */
        const uint32_t e = pick[p];
        if (e >= NE) continue;
        const uint32_t row = first[e]++;
        sorted_tok[row] = (uint32_t)(p / K);
        row_of[p] = row;
    }
    *n_tiles = nt;
}

/* Y: f32 [T * K][E]; row_of, pick_w: [T][K]; out: f32 [T][E]. */
void pgd_cuda_moe_combine_twin(const float *Y, const uint32_t *row_of, const float *pick_w,
                               uint32_t T, uint32_t K, uint32_t E, float *out) {
    for (uint64_t t = 0; t < T; t++)
        for (uint32_t c = 0; c < E; c++) {
            float acc = 0.0f;
            for (uint32_t j = 0; j < K; j++)
                acc = fmaf(pick_w[t * K + j], Y[(uint64_t)row_of[t * K + j] * E + c], acc);
            out[t * E + c] = acc;
        }
}
