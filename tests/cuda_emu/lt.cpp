/*
 * tests/cuda_emu/lt.cpp — a CPU emulation of the cuBLASLt calls pagoda makes (a testing tool,
 * never linked into pagoda). Semantics from
 * NVIDIA's documentation (cublasLt.h's comments, the cuBLAS guide, the LtSgemm sample):
 *   - D = alpha * op(A) * op(B) + beta * C; op(X) = X for CUBLAS_OP_N, X^T for CUBLAS_OP_T
 *     (and OP_C on real types);
 *   - a matrix layout describes the matrix AS STORED (before op): for transa = T, Adesc is
 *     k x m with ld >= k (LtSgemm: rows = transa == N ? m : k);
 *   - CUBLASLT_ORDER_COL (default): element (r, c) at r + c * ld; ORDER_ROW: r * ld + c;
 *     ld >= rows (COL) or >= cols (ROW);
 *   - attribute sizes must match the documented types exactly (else INVALID_VALUE);
 *   - compute type CUBLAS_COMPUTE_32F, scale type CUDA_R_32F; alpha/beta host pointers by
 *     default (read at the call); C not read when beta == 0;
 *   - descriptors may be changed or destroyed after cublasLtMatmul returns (work is enqueued
 *     with its values);
 *   - the heuristic assumes 256-byte aligned buffers unless the preference says less;
 *     workspace 0 unless the preference allows more; REDUCTION_SCHEME_MASK filters split-K
 *     configurations (an algo without split-K always passes: EMU_LT_IGNORE_MASK=1 offers a
 *     split-K one anyway, to test callers that force SPLITK_NUM = 1).
 * Algorithms: 1 = one fp32 FMA chain over k per element; 2 = four interleaved chains summed at
 * the end (different bits); 0 = split-K over SPLITK_NUM contiguous k ranges (workspace).
 */
#include <cublasLt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <set>
#include <vector>

#include "emu.h"

bool emu_dev_range_ok(const void *p, size_t bytes);
bool emu_stream_enqueue(cudaStream_t s, const char *what, std::function<void()> fn);

namespace {

struct Desc {
    cublasComputeType_t compute;
    int32_t scale, pointer_mode, transa, transb, transc;
    uint32_t epilogue;
};
struct Layout {
    int32_t type, order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};
struct Pref {
    uint32_t search;
    uint64_t max_ws;
    uint32_t red_mask;
    uint32_t align[4];
    uint64_t impl_mask;
};
std::set<void *> g_handles, g_descs, g_layouts, g_prefs;
const uint64_t k_magic = 0x454d554c54414c47ull;

cublasStatus_t bad(const char *what) {
    emu_error("cuBLASLt: %s", what);
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* A new descriptor (matmul, layout, preference) into its live set, and out. */
template <class T, class H> cublasStatus_t track(std::set<void *> &live, T *obj, H *out) {
    live.insert(obj);
    *out = (H)obj;
    return CUBLAS_STATUS_SUCCESS;
}
/* Its destruction; an unknown or already destroyed one is an error. */
template <class T> cublasStatus_t untrack(std::set<void *> &live, void *h, const char *what) {
    if (!live.erase(h)) return bad(what);
    delete (T *)h;
    return CUBLAS_STATUS_SUCCESS;
}

template <class T> cublasStatus_t set_field(T &f, const void *buf, size_t n, const char *name) {
    if (!buf || n != sizeof(T)) {
        emu_error("cuBLASLt: attribute %s takes %zu bytes, got %zu", name, sizeof(T), n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(&f, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

size_t type_size(int32_t t) {
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
    }
}

float load(const void *p, int32_t t, uint64_t i) {
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_16F: return _cvtsh_ss(((const uint16_t *)p)[i]);
    case CUDA_R_16BF: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    }
    abort();
}

void store(void *p, int32_t t, uint64_t i, float v) {
    switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = v; return;
    case CUDA_R_16F: ((uint16_t *)p)[i] = (uint16_t)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); return;
    case CUDA_R_16BF: {
        uint32_t u;
        memcpy(&u, &v, 4);
        uint16_t h = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fff : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
        ((uint16_t *)p)[i] = h;
        return;
    }
    }
    abort();
}

uint64_t index_of(const Layout &l, uint64_t r, uint64_t c) {
    return l.order == CUBLASLT_ORDER_ROW ? r * (uint64_t)l.ld + c : r + c * (uint64_t)l.ld;
}

/* elements spanned by a layout (0 for an empty matrix) */
uint64_t extent(const Layout &l) {
    if (!l.rows || !l.cols) return 0;
    return index_of(l, l.rows - 1, l.cols - 1) + 1;
}

struct Problem {
    uint64_t m, n, k;
};

cublasStatus_t check_problem(const Desc *d, const Layout *a, const Layout *b, const Layout *c,
                             const Layout *dd, Problem *p) {
    if (!g_descs.count((void *)d) || !g_layouts.count((void *)a) || !g_layouts.count((void *)b) ||
        !g_layouts.count((void *)c) || !g_layouts.count((void *)dd))
        return bad("an invalid descriptor handle");
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) {
        emu_error("cuBLASLt: compute type %d / scale type %d not emulated", (int)d->compute, d->scale);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT || d->transc != CUBLAS_OP_N ||
        d->pointer_mode != CUBLASLT_POINTER_MODE_HOST) {
        emu_error("cuBLASLt: epilogue/transc/pointer mode not emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const Layout *ls[4] = {a, b, c, dd};
    for (const Layout *l : ls) {
        if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW) {
            emu_error("cuBLASLt: memory order %d not emulated", l->order);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (l->batch != 1) {
            emu_error("cuBLASLt: batched layouts not emulated");
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (!type_size(l->type)) {
            emu_error("cuBLASLt: data type %d not emulated", l->type);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        uint64_t need = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
        if (l->ld < 0 || (uint64_t)l->ld < need) {
            emu_error("cuBLASLt: ld %lld < %s %llu", (long long)l->ld,
                      l->order == CUBLASLT_ORDER_COL ? "rows" : "cols", (unsigned long long)need);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (a->type != b->type) return bad("A and B types differ");
    if (c->type != dd->type) return bad("C and D types differ");
    if (a->type == CUDA_R_32F && c->type != CUDA_R_32F) return bad("f32 inputs need f32 outputs");
    if (a->type != CUDA_R_32F && c->type != CUDA_R_32F && c->type != a->type)
        return bad("16-bit inputs give C/D of their own type or f32");
    const bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
    uint64_t m = ta ? a->cols : a->rows, k = ta ? a->rows : a->cols;
    uint64_t kb = tb ? b->cols : b->rows, n = tb ? b->rows : b->cols;
    if (kb != k) {
        emu_error("cuBLASLt: op(A) is %llu x %llu but op(B) is %llu x %llu", (unsigned long long)m,
                  (unsigned long long)k, (unsigned long long)kb, (unsigned long long)n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (c->rows != m || c->cols != n || dd->rows != m || dd->cols != n) {
        emu_error("cuBLASLt: C/D are %llu x %llu / %llu x %llu, op(A) op(B) is %llu x %llu",
                  (unsigned long long)c->rows, (unsigned long long)c->cols,
                  (unsigned long long)dd->rows, (unsigned long long)dd->cols,
                  (unsigned long long)m, (unsigned long long)n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    p->m = m, p->n = n, p->k = k;
    return CUBLAS_STATUS_SUCCESS;
}

/* the algo's fields in its data[8] */
enum { AL_MAGIC, AL_ID, AL_SPLITK, AL_SCHEME, AL_ALIGN, AL_TILE };

size_t workspace_of(const cublasLtMatmulAlgo_t &al, const Problem &p) {
    int32_t splitk = (int32_t)al.data[AL_SPLITK];
    if (splitk <= 1) return 0;
    return (size_t)splitk * p.m * p.n * sizeof(float) + 4096;
}

bool algo_ok(const cublasLtMatmulAlgo_t *al) {
    return al && al->data[AL_MAGIC] == k_magic && al->data[AL_ID] <= 2;
}

} // namespace

extern "C" {

/* kernels/cuda/lt_dl.h: the emulated library is linked in, never opened */
int pgd_cuda_lt_load(void) {
    return 0;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    void *p = malloc(16);
    g_handles.insert(p);
    *h = (cublasLtHandle_t)p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!g_handles.erase((void *)h)) return bad("cublasLtDestroy of an invalid handle");
    cudaDeviceSynchronize();
    free((void *)h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    return track(g_descs,
                 new Desc{compute, (int32_t)scale, CUBLASLT_POINTER_MODE_HOST, CUBLAS_OP_N,
                          CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT},
                 out);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t h) {
    return untrack<Desc>(g_descs, (void *)h, "destroy of an invalid matmul descriptor");
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t h, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t n) {
    if (!g_descs.count((void *)h)) return bad("an invalid matmul descriptor");
    Desc *d = (Desc *)h;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: {
        int32_t v;
        cublasStatus_t s = set_field(v, buf, n, "COMPUTE_TYPE");
        if (!s) d->compute = (cublasComputeType_t)v;
        return s;
    }
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set_field(d->scale, buf, n, "SCALE_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set_field(d->pointer_mode, buf, n, "POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_field(d->transa, buf, n, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_field(d->transb, buf, n, "TRANSB");
    case CUBLASLT_MATMUL_DESC_TRANSC: return set_field(d->transc, buf, n, "TRANSC");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_field(d->epilogue, buf, n, "EPILOGUE");
    default: emu_error("cuBLASLt: matmul attribute %d not emulated", (int)attr); return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    return track(g_layouts, new Layout{(int32_t)type, CUBLASLT_ORDER_COL, rows, cols, ld, 1, 0},
                 out);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t h) {
    return untrack<Layout>(g_layouts, (void *)h, "destroy of an invalid layout");
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t h, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t n) {
    if (!g_layouts.count((void *)h)) return bad("an invalid layout");
    Layout *l = (Layout *)h;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
        uint32_t v;
        cublasStatus_t s = set_field(v, buf, n, "LAYOUT_TYPE");
        if (!s) l->type = (int32_t)v;
        return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set_field(l->order, buf, n, "LAYOUT_ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set_field(l->rows, buf, n, "LAYOUT_ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set_field(l->cols, buf, n, "LAYOUT_COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return set_field(l->ld, buf, n, "LAYOUT_LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set_field(l->batch, buf, n, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set_field(l->stride, buf, n, "BATCH_OFFSET");
    default: emu_error("cuBLASLt: layout attribute %d not emulated", (int)attr); return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    return track(g_prefs, new Pref{0, 0, CUBLASLT_REDUCTION_SCHEME_MASK, {256, 256, 256, 256}, ~0ull},
                 out);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t h) {
    return untrack<Pref>(g_prefs, (void *)h, "destroy of an invalid preference");
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t h,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t n) {
    if (!g_prefs.count((void *)h)) return bad("an invalid preference");
    Pref *p = (Pref *)h;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return set_field(p->search, buf, n, "SEARCH_MODE");
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_field(p->max_ws, buf, n, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return set_field(p->red_mask, buf, n, "REDUCTION_SCHEME_MASK");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set_field(p->align[0], buf, n, "MIN_ALIGNMENT_A");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set_field(p->align[1], buf, n, "MIN_ALIGNMENT_B");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set_field(p->align[2], buf, n, "MIN_ALIGNMENT_C");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set_field(p->align[3], buf, n, "MIN_ALIGNMENT_D");
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return set_field(p->impl_mask, buf, n, "IMPL_MASK");
    default: emu_error("cuBLASLt: preference attribute %d not emulated", (int)attr); return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *returned) {
    if (!g_handles.count((void *)h) || !g_prefs.count((void *)pref)) return bad("heuristic: invalid handle");
    if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    Problem p;
    cublasStatus_t s = check_problem((Desc *)desc, (Layout *)A, (Layout *)B, (Layout *)C, (Layout *)D, &p);
    if (s) return s;
    const Pref *pr = (const Pref *)pref;
    uint32_t align = 256;
    for (uint32_t a : pr->align) align = a < align ? a : align;
    std::vector<cublasLtMatmulAlgo_t> cands;
    auto mk = [&](uint64_t id, int32_t splitk, uint32_t scheme) {
        cublasLtMatmulAlgo_t al;
        memset(&al, 0, sizeof al);
        al.data[AL_MAGIC] = k_magic;
        al.data[AL_ID] = id;
        al.data[AL_SPLITK] = (uint64_t)splitk;
        al.data[AL_SCHEME] = scheme;
        al.data[AL_ALIGN] = align;
        return al;
    };
    const bool ignore_mask = getenv("EMU_LT_IGNORE_MASK") && strcmp(getenv("EMU_LT_IGNORE_MASK"), "0");
    if (p.k >= 64 && ((pr->red_mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) || ignore_mask)) {
        cublasLtMatmulAlgo_t al = mk(0, 4, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
        if (workspace_of(al, p) <= pr->max_ws) cands.push_back(al);
    }
    cands.push_back(mk(1, 1, CUBLASLT_REDUCTION_SCHEME_NONE));
    cands.push_back(mk(2, 1, CUBLASLT_REDUCTION_SCHEME_NONE));
    int n = 0;
    for (auto &al : cands) {
        if (n == requested) break;
        memset(&res[n], 0, sizeof res[n]);
        res[n].algo = al;
        res[n].workspaceSize = workspace_of(al, p);
        res[n].state = CUBLAS_STATUS_SUCCESS;
        res[n].wavesCount = 1.0f;
        n++;
    }
    *returned = n;
    return n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t *al, cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    const void *buf, size_t n) {
    if (!algo_ok(al)) return bad("AlgoConfigSetAttribute on an uninitialised algo");
    switch (attr) {
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: {
        int32_t v;
        cublasStatus_t s = set_field(v, buf, n, "SPLITK_NUM");
        if (s) return s;
        if (v < 1) return CUBLAS_STATUS_INVALID_VALUE;
        al->data[AL_SPLITK] = (uint64_t)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME: {
        uint32_t v;
        cublasStatus_t s = set_field(v, buf, n, "REDUCTION_SCHEME");
        if (!s) al->data[AL_SCHEME] = v;
        return s;
    }
    case CUBLASLT_ALGO_CONFIG_TILE_ID: {
        uint32_t v;
        cublasStatus_t s = set_field(v, buf, n, "TILE_ID");
        if (!s) al->data[AL_TILE] = v;
        return s;
    }
    default: emu_error("cuBLASLt: algo config attribute %d not emulated", (int)attr); return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                       cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                       cublasLtMatrixLayout_t D, const cublasLtMatmulAlgo_t *al,
                                       cublasLtMatmulHeuristicResult_t *res) {
    if (!g_handles.count((void *)h)) return bad("AlgoCheck: invalid handle");
    if (!algo_ok(al)) return bad("AlgoCheck: invalid algo");
    Problem p;
    cublasStatus_t s = check_problem((Desc *)desc, (Layout *)A, (Layout *)B, (Layout *)C, (Layout *)D, &p);
    if (s) return s;
    if ((int32_t)al->data[AL_SPLITK] > 1 && al->data[AL_SCHEME] == CUBLASLT_REDUCTION_SCHEME_NONE)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(res, 0, sizeof *res);
    res->algo = *al;
    res->workspaceSize = workspace_of(*al, p);
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *Ap,
                              cublasLtMatrixLayout_t A, const void *Bp, cublasLtMatrixLayout_t B, const void *beta,
                              const void *Cp, cublasLtMatrixLayout_t C, void *Dp, cublasLtMatrixLayout_t D,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream) {
    if (!g_handles.count((void *)h)) return bad("Matmul: invalid handle");
    Problem p;
    cublasStatus_t s = check_problem((Desc *)desc, (Layout *)A, (Layout *)B, (Layout *)C, (Layout *)D, &p);
    if (s) return s;
    cublasLtMatmulAlgo_t al;
    if (algo) {
        if (!algo_ok(algo)) return bad("Matmul: invalid algo");
        al = *algo;
    } else {
        memset(&al, 0, sizeof al);
        al.data[AL_MAGIC] = k_magic, al.data[AL_ID] = 1, al.data[AL_SPLITK] = 1, al.data[AL_ALIGN] = 256;
    }
    const Desc d = *(const Desc *)desc;
    const Layout la = *(const Layout *)A, lb = *(const Layout *)B, lc = *(const Layout *)C, ld = *(const Layout *)D;
    size_t need = workspace_of(al, p);
    if (need > ws_bytes) {
        emu_error("cuBLASLt: the algo needs %zu bytes of workspace, %zu given", need, ws_bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (need && !emu_dev_range_ok(ws, need)) return bad("the workspace is not device memory");
    const float a = *(const float *)alpha, b = *(const float *)beta;
    const void *ptrs[4] = {Ap, Bp, Cp, Dp};
    const Layout *lays[4] = {&la, &lb, &lc, &ld};
    for (int i = 0; i < 4; i++) {
        if (i == 2 && b == 0.0f) continue; /* C is not read */
        uint64_t bytes = extent(*lays[i]) * type_size(lays[i]->type);
        if (bytes && !emu_dev_range_ok(ptrs[i], bytes)) {
            emu_error("cuBLASLt: matrix %c [%p, +%llu bytes) is not inside one live device allocation",
                      "ABCD"[i], ptrs[i], (unsigned long long)bytes);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if ((uintptr_t)ptrs[i] % al.data[AL_ALIGN]) {
            emu_error("cuBLASLt: matrix %c at %p is not %llu-byte aligned as the heuristic assumed",
                      "ABCD"[i], ptrs[i], (unsigned long long)al.data[AL_ALIGN]);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    if (Cp == Dp && b != 0.0f && memcmp(&lc, &ld, sizeof lc))
        return bad("in-place (C == D) needs the same C and D layouts");
    const Problem P = p;
    const uint64_t id = al.data[AL_ID];
    const int32_t splitk = (int32_t)al.data[AL_SPLITK];
    bool ok = emu_stream_enqueue(stream, "cublasLtMatmul", [=]() {
        const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
        std::vector<float> opA(P.m * P.k), opB(P.n * P.k); /* rows of op(A), columns of op(B) */
        for (uint64_t i = 0; i < P.m; i++)
            for (uint64_t kk = 0; kk < P.k; kk++)
                opA[i * P.k + kk] = load(Ap, la.type, ta ? index_of(la, kk, i) : index_of(la, i, kk));
        for (uint64_t j = 0; j < P.n; j++)
            for (uint64_t kk = 0; kk < P.k; kk++)
                opB[j * P.k + kk] = load(Bp, lb.type, tb ? index_of(lb, j, kk) : index_of(lb, kk, j));
        for (uint64_t j = 0; j < P.n; j++)
            for (uint64_t i = 0; i < P.m; i++) {
                const float *x = &opA[i * P.k], *y = &opB[j * P.k];
                float acc = 0.0f;
                if (splitk > 1) {
                    uint64_t chunk = (P.k + splitk - 1) / splitk;
                    for (uint64_t k0 = 0; k0 < P.k; k0 += chunk) {
                        float part = 0.0f;
                        for (uint64_t kk = k0; kk < P.k && kk < k0 + chunk; kk++) part = std::fma(x[kk], y[kk], part);
                        acc += part;
                    }
                } else if (id == 2) {
                    float lane[4] = {0, 0, 0, 0};
                    for (uint64_t kk = 0; kk < P.k; kk++) lane[kk % 4] = std::fma(x[kk], y[kk], lane[kk % 4]);
                    acc = (lane[0] + lane[1]) + (lane[2] + lane[3]);
                } else {
                    for (uint64_t kk = 0; kk < P.k; kk++) acc = std::fma(x[kk], y[kk], acc);
                }
                float v = a * acc;
                if (b != 0.0f) v += b * load(Cp, lc.type, index_of(lc, i, j));
                store(Dp, ld.type, index_of(ld, i, j), v);
            }
    });
    if (!ok) return bad("Matmul: invalid stream");
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
