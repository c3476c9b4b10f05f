/*
 * kernels/cuda/gemm.c — matrix products through cuBLASLt (see gemm.h).
 *
 * Row-major Y[M][N] = X[M][K] · W[N][K]ᵀ is, in cuBLAS's column-major terms, C (N x M, ld N) =
 * op(A) · B with A = W seen as K x N (ld K) transposed and B = X seen as K x M (ld K). A plan
 * keeps the operation and the four layouts; a run sets the layouts' column count to M.
 */
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/lt_dl.h"

#define LT_TRY(call)                                                                               \
    do {                                                                                           \
        cublasStatus_t pgd_lt_s_ = (call);                                                         \
        if (pgd_lt_s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return pgd_error_set(PGD_ECUDA, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__,     \
                                 #call, (int)pgd_lt_s_);                                           \
    } while (0)

struct pgd_cuda_gemm {
    cublasLtHandle_t lt;
    void *workspace; /* device */
    size_t workspace_bytes;
};

#define N_BUCKETS PGD_CUDA_GEMM_BUCKETS

struct pgd_cuda_gemm_plan {
    uint32_t N, K, max_m;
    bool fast;
    pgd_cuda_gemm_out type;
    uint32_t gemv_max_m; /* M up to this runs on pgd_cuda_gemv (0: never) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c; /* W, X, Y (Y is also D) */
    cublasLtMatmulAlgo_t algo[N_BUCKETS];
};

int pgd_cuda_gemm_create(size_t workspace_bytes, pgd_cuda_gemm **out) {
    *out = NULL;
    pgd_cuda_gemm *g = calloc(1, sizeof *g);
    if (!g) return PGD_ENOMEM;
    int rc = pgd_cuda_lt_load(); /* opened on first use (lt_dl.h) */
    if (rc) {
        free(g);
        return rc;
    }
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return pgd_error_set(PGD_ECUDA, "cannot create a cuBLASLt handle: cuBLAS status %d",
                             (int)s);
    }
    if (workspace_bytes && cudaMalloc(&g->workspace, workspace_bytes) != cudaSuccess) {
        rc = pgd_error_set(PGD_ECUDA, "cannot allocate a %zu-byte cuBLASLt workspace: %s",
                           workspace_bytes, cudaGetErrorString(cudaGetLastError()));
        pgd_cuda_gemm_destroy(g);
        return rc;
    }
    g->workspace_bytes = workspace_bytes;
    *out = g;
    return 0;
}

void pgd_cuda_gemm_destroy(pgd_cuda_gemm *g) {
    if (!g) return;
    if (g->workspace) cudaFree(g->workspace);
    if (g->lt) cublasLtDestroy(g->lt);
    free(g);
}

static int set_m(pgd_cuda_gemm_plan *p, uint32_t M) {
    uint64_t cols = M;
    LT_TRY(cublasLtMatrixLayoutSetAttribute(p->b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(p->c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols));
    return 0;
}

/* The heuristic's first algorithm for M rows, checked for every M it will serve (lo and hi):
 * without split-K for a deterministic plan; for a fast one split-K is allowed with its partial
 * sums reduced by a separate pass (schemes COMPUTE_TYPE and OUTPUT_TYPE: the same bits run after
 * run; INPLACE is left out). */
static int pick(pgd_cuda_gemm *g, pgd_cuda_gemm_plan *p, uint32_t M, uint32_t lo, uint32_t hi,
                bool split, cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = g->workspace_bytes;
    /* partial sums reduced in the output type only when that is f32 */
    uint32_t scheme = !split                             ? CUBLASLT_REDUCTION_SCHEME_NONE
                      : p->type == PGD_CUDA_GEMM_OUT_F32 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                                               CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE
                                                         : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulHeuristicResult_t res[8];
    int n = 0, rc = set_m(p, M);
    if (!rc &&
        (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws) != CUBLAS_STATUS_SUCCESS ||
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &scheme, sizeof scheme) != CUBLAS_STATUS_SUCCESS ||
         cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->a, p->b, p->c, p->c, pref, 8, res, &n) !=
             CUBLAS_STATUS_SUCCESS))
        rc = pgd_error_set(PGD_ECUDA, "cuBLASLt: no heuristic for %u x %u x %u", M, p->N, p->K);
    cublasLtMatmulPreferenceDestroy(pref);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        cublasLtMatmulAlgo_t a = res[i].algo;
        int32_t one = 1;
        if (!split &&
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
                                                 sizeof one) != CUBLAS_STATUS_SUCCESS)
            continue;
        bool ok = true;
        uint32_t ms[2] = {lo, hi};
        for (int j = 0; j < 2 && ok; j++) {
            cublasLtMatmulHeuristicResult_t chk;
            ok = !set_m(p, ms[j]) &&
                 cublasLtMatmulAlgoCheck(g->lt, p->op, p->a, p->b, p->c, p->c, &a, &chk) ==
                     CUBLAS_STATUS_SUCCESS &&
                 chk.workspaceSize <= g->workspace_bytes;
        }
        if (ok) {
            *algo = a;
            return 0;
        }
    }
    return pgd_error_set(PGD_ECUDA, "cuBLASLt: no %salgorithm for M %u..%u, N %u, K %u",
                         split ? "" : "split-free ", lo, hi, p->N, p->K);
}

void pgd_cuda_gemm_plan_destroy(pgd_cuda_gemm_plan *p) {
    if (!p) return;
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    free(p);
}

int pgd_cuda_gemm_plan_create(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t max_m,
                              pgd_cuda_gemm_mode mode, pgd_cuda_gemm_out type,
                              pgd_cuda_gemm_plan **out) {
    return pgd_cuda_gemm_plan_create_ld(g, N, K, N, max_m, mode, type, out);
}

int pgd_cuda_gemm_plan_create_ld(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t ldy,
                                 uint32_t max_m, pgd_cuda_gemm_mode mode, pgd_cuda_gemm_out type,
                                 pgd_cuda_gemm_plan **out) {
    *out = NULL;
    if (!N || !K || !max_m) return pgd_error_set(PGD_EINVAL, "gemm plan: empty shape");
    if (ldy < N || (ldy > N && mode == PGD_CUDA_GEMM_FAST_GEMV))
        return pgd_error_set(PGD_EINVAL, "gemm plan: Y's rows %u apart for %u columns%s", ldy, N,
                             ldy > N ? " on the GEMV" : "");
    pgd_cuda_gemm_plan *p = calloc(1, sizeof *p);
    if (!p) return PGD_ENOMEM;
    p->N = N;
    p->K = K;
    p->max_m = max_m;
    const bool fast = mode != PGD_CUDA_GEMM_INVARIANT;
    p->fast = fast;
    p->type = type;
    /* the kernel's rows are exactly the first range, so its bits stay within one range */
    PGD_ASSERT(pgd_cuda_gemm_bucket_max[0] <= PGD_CUDA_GEMV_MAX_M);
    if (mode == PGD_CUDA_GEMM_FAST_GEMV && K % 8 == 0) p->gemv_max_m = pgd_cuda_gemm_bucket_max[0];
    int rc = 0;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, K, N, K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, K, max_m, K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->c, type == PGD_CUDA_GEMM_OUT_BF16 ? CUDA_R_16BF : CUDA_R_32F,
                                   N, max_m, ldy) != CUBLAS_STATUS_SUCCESS) {
        rc = pgd_error_set(PGD_ECUDA, "cuBLASLt: cannot describe a %u x %u product", N, K);
        goto fail;
    }
    /* deterministic: one split-free algorithm, chosen for the largest M, checked down to M = 1;
     * fast: one per range of M, chosen for the range's largest M, split-K allowed (falling
     * back to the deterministic one where no other serves the whole range) */
    if ((rc = pick(g, p, max_m, 1, max_m, false, &p->algo[N_BUCKETS - 1]))) goto fail;
    for (int b = 0; b < N_BUCKETS - 1; b++) p->algo[b] = p->algo[N_BUCKETS - 1];
    for (int b = 0; fast && b < N_BUCKETS; b++) {
        uint32_t lo = b ? pgd_cuda_gemm_bucket_max[b - 1] + 1 : 1,
                 hi = pgd_cuda_gemm_bucket_max[b] < max_m ? pgd_cuda_gemm_bucket_max[b] : max_m;
        if (lo > max_m) break;
        if (pick(g, p, hi, lo, hi, true, &p->algo[b])) pgd_error_clear();
    }
    *out = p;
    return 0;
fail:
    pgd_cuda_gemm_plan_destroy(p);
    return rc;
}

int pgd_cuda_gemm_run(pgd_cuda_gemm *g, pgd_cuda_gemm_plan *p, const uint16_t *X, const uint16_t *W,
                      void *Y, uint32_t M, void *stream) {
    PGD_ASSERT(M >= 1 && M <= p->max_m);
    if (M <= p->gemv_max_m) {
        if (p->type != PGD_CUDA_GEMM_OUT_F32)
            return pgd_error_set(PGD_EINVAL,
                                 "gemm: %u rows of a bf16-output plan are the GEMV's: the caller "
                                 "runs them",
                                 M);
        return pgd_cuda_gemv(X, W, (float *)Y, M, p->N, p->K, stream);
    }
    int b = N_BUCKETS - 1;
    if (p->fast) b = pgd_cuda_gemm_bucket(M);
    int rc = set_m(p, M);
    if (rc) return rc;
    const float alpha = 1.0f, beta = 0.0f;
    LT_TRY(cublasLtMatmul(g->lt, p->op, &alpha, W, p->a, X, p->b, &beta, Y, p->c, Y, p->c,
                          &p->algo[b], g->workspace, g->workspace_bytes, (cudaStream_t)stream));
    return 0;
}

bool pgd_cuda_gemm_plan_gemv(const pgd_cuda_gemm_plan *p, uint32_t M) {
    return M >= 1 && M <= p->gemv_max_m;
}

/* ---- products over 8- and 4-bit weights (gemm.h) ---------------------------------------- */

struct pgd_cuda_gemm_deq {
    uint32_t N, K, rows, last;  /* chunks of `rows` rows of W, the last of `last` */
    pgd_cuda_gemm_plan *p, *pl; /* their plans (pl NULL when last == rows) */
};

void pgd_cuda_gemm_deq_destroy(pgd_cuda_gemm_deq *d) {
    if (!d) return;
    pgd_cuda_gemm_plan_destroy(d->p);
    pgd_cuda_gemm_plan_destroy(d->pl);
    free(d);
}

int pgd_cuda_gemm_deq_create_ld(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t ldy,
                                uint32_t max_m, uint64_t scratch_bytes, pgd_cuda_gemm_mode mode,
                                pgd_cuda_gemm_out type, pgd_cuda_gemm_deq **out) {
    *out = NULL;
    if (!N || !K || K % 32 || ldy < N || !max_m || mode == PGD_CUDA_GEMM_FAST_GEMV)
        return pgd_error_set(PGD_EINVAL,
                             "dequantized product: bad shape %u x %u, output row stride %u or mode",
                             N, K, ldy);
    const uint32_t rows = pgd_gemm_deq_rows(N, K, scratch_bytes);
    if (!rows)
        return pgd_error_set(PGD_EINVAL,
                             "dequantized product: a %llu-byte scratch holds no 128 rows of %u",
                             (unsigned long long)scratch_bytes, K);
    pgd_cuda_gemm_deq *d = calloc(1, sizeof *d);
    if (!d) return PGD_ENOMEM;
    *d = (pgd_cuda_gemm_deq){.N = N, .K = K, .rows = rows, .last = pgd_gemm_deq_last(N, rows)};
    int rc = pgd_cuda_gemm_plan_create_ld(g, rows, K, ldy, max_m, mode, type, &d->p);
    if (!rc && d->last != rows)
        rc = pgd_cuda_gemm_plan_create_ld(g, d->last, K, ldy, max_m, mode, type, &d->pl);
    if (rc) {
        pgd_cuda_gemm_deq_destroy(d);
        return rc;
    }
    *out = d;
    return 0;
}

int pgd_cuda_gemm_deq_create(pgd_cuda_gemm *g, uint32_t N, uint32_t K, uint32_t max_m,
                             uint64_t scratch_bytes, pgd_cuda_gemm_mode mode,
                             pgd_cuda_gemm_out type, pgd_cuda_gemm_deq **out) {
    return pgd_cuda_gemm_deq_create_ld(g, N, K, N, max_m, scratch_bytes, mode, type, out);
}

uint64_t pgd_cuda_gemm_deq_scratch(const pgd_cuda_gemm_deq *d) {
    return (uint64_t)d->rows * d->K * 2;
}

/* Each chunk: its rows of W into the scratch (q8 or q4 set), then its columns of Y. */
static int deq_run(pgd_cuda_gemm *g, pgd_cuda_gemm_deq *d, const uint16_t *X, const pgd_q8_mat *q8,
                   const pgd_q4_mat *q4, uint16_t *scratch, void *Y, uint32_t M, void *stream) {
    const size_t y_elem = d->p->type == PGD_CUDA_GEMM_OUT_BF16 ? 2 : 4;
    for (uint32_t n0 = 0; n0 < d->N; n0 += d->rows) {
        const bool last = n0 + d->rows >= d->N;
        const uint32_t rows = last ? d->last : d->rows;
        int rc = q8 ? pgd_cuda_q8_rows_bf16(*q8, n0, rows, d->K, scratch, stream)
                    : pgd_cuda_q4_rows_bf16(*q4, n0, rows, d->K, scratch, stream);
        if (!rc)
            rc = pgd_cuda_gemm_run(g, last && d->pl ? d->pl : d->p, X, scratch,
                                   (uint8_t *)Y + n0 * y_elem, M, stream);
        if (rc) return rc;
    }
    return 0;
}

int pgd_cuda_gemm_deq_q8(pgd_cuda_gemm *g, pgd_cuda_gemm_deq *d, const uint16_t *X, pgd_q8_mat W,
                         uint16_t *scratch, void *Y, uint32_t M, void *stream) {
    return deq_run(g, d, X, &W, NULL, scratch, Y, M, stream);
}

int pgd_cuda_gemm_deq_q4(pgd_cuda_gemm *g, pgd_cuda_gemm_deq *d, const uint16_t *X, pgd_q4_mat W,
                         uint16_t *scratch, void *Y, uint32_t M, void *stream) {
    return deq_run(g, d, X, NULL, &W, scratch, Y, M, stream);
}
