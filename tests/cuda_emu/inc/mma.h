/* Emulator: nvcuda::wmma's 16 x 16 x 16 products (f16 in, f32 accumulation), what the kernels
 * use of it. A fragment here holds its whole tile in every thread (on a GPU each lane holds a
 * part of it, in an unspecified layout), so a kernel must treat fragments as opaque: load,
 * fill, multiply, store (elementwise access to .x is not emulated). A load or store by the 32
 * lanes reads or writes the whole tile 32 times over, the same values; pointers must be 32-byte
 * aligned and ldm a multiple of 16 bytes, as on a GPU (an emulator error otherwise). Products of
 * f16 values are exact in f32; the sums are f32 in increasing k (a GPU's tensor cores sum in
 * their own order and precision: tests compare within a tolerance). */
#pragma once
#include <cstdint>

#include "cuda_fp16.h"
#include "cuda_runtime.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16 x 16 x 16 fragments only");
    T v[16][16]; /* [row][column] of the tile (matrix_a: m x k, matrix_b: k x n, accumulator:
                    m x n) */
};

inline void emu_wmma_check(const void *p, unsigned ldm, size_t elem, const char *what) {
    if ((uintptr_t)p % 32) emu_error("wmma::%s: pointer %p is not 32-byte aligned", what, p);
    if ((ldm * elem) % 16) emu_error("wmma::%s: ldm %u is not a multiple of 16 bytes", what, ldm);
}

/* element (r, c) of a tile stored with leading dimension ldm */
template <class T> inline T &emu_wmma_at(T *p, unsigned ldm, bool row, int r, int c) {
    return row ? p[(size_t)r * ldm + c] : p[r + (size_t)c * ldm];
}

template <class Use, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __half, L> &f, const __half *p,
                             unsigned ldm) {
    emu_wmma_check(p, ldm, sizeof *p, "load_matrix_sync");
    const bool row = std::is_same<L, row_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r][c] = emu_wmma_at(p, ldm, row, r, c);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t l) {
    emu_wmma_check(p, ldm, sizeof *p, "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r][c] = emu_wmma_at(p, ldm, l == mem_row_major, r, c);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t l) {
    emu_wmma_check(p, ldm, sizeof *p, "store_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) emu_wmma_at(p, ldm, l == mem_row_major, r, c) = f.v[r][c];
}

template <class Use, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, T x) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r][c] = x;
}

template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __half, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __half, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    float av[16][16], bv[16][16], out[16][16];
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) {
            av[r][k] = __half2float(a.v[r][k]);
            bv[r][k] = __half2float(b.v[r][k]);
        }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float acc = c.v[i][j];
            for (int k = 0; k < 16; k++) acc = __fadd_rn(acc, __fmul_rn(av[i][k], bv[k][j]));
            out[i][j] = acc;
        }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) d.v[i][j] = out[i][j];
}

} // namespace wmma
} // namespace nvcuda
