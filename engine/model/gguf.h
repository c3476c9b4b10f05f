/*
 * engine/model/gguf.h — GGUF v2/v3 reader.
 *
 * Owns: the file mapping (mmap, read-only) and the parsed header, metadata and tensor infos.
 * Strings and tensor data point into the mapping and live as long as the pgd_gguf. Every
 * count, length, offset and size is validated against the file before it is used, so a
 * hostile file is refused with PGD_EFORMAT (or PGD_EUNSUPPORTED) and a detail message in
 * pgd_error_detail() — never a crash or an out-of-bounds read.
 *
 * Threading: open/close from any one thread; a successfully opened pgd_gguf is immutable and
 * may be read from any number of threads.
 */
#ifndef PGD_ENGINE_GGUF_H
#define PGD_ENGINE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"
#include "kernels/cpu/quant.h"

#define PGD_GGUF_MAX_DIMS          4
#define PGD_GGUF_DEFAULT_ALIGNMENT 32
#define PGD_GGUF_MAX_DEPTH         8   /* arrays nested deeper than this are refused */
#define PGD_GGUF_MAX_NAME          256 /* tensor names: 1 .. PGD_GGUF_MAX_NAME - 1 bytes, no NUL */
#define PGD_GGUF_MAX_KEY           65535 /* metadata keys: 1 .. PGD_GGUF_MAX_KEY bytes */

typedef enum pgd_gguf_vtype {
    PGD_GGUF_UINT8 = 0,
    PGD_GGUF_INT8 = 1,
    PGD_GGUF_UINT16 = 2,
    PGD_GGUF_INT16 = 3,
    PGD_GGUF_UINT32 = 4,
    PGD_GGUF_INT32 = 5,
    PGD_GGUF_FLOAT32 = 6,
    PGD_GGUF_BOOL = 7,
    PGD_GGUF_STRING = 8,
    PGD_GGUF_ARRAY = 9,
    PGD_GGUF_UINT64 = 10,
    PGD_GGUF_INT64 = 11,
    PGD_GGUF_FLOAT64 = 12,
    PGD_GGUF_VTYPE__COUNT = 13
} pgd_gguf_vtype;

/* Strings (pgd_str, from common/text.h) point into the mapping: not NUL-terminated. */

typedef struct pgd_gguf_value pgd_gguf_value;

/* A metadata value. Scalars are decoded; arrays keep their element type and count:
 *   - arrays of fixed-size scalars point at the raw little-endian elements in the mapping;
 *   - arrays of strings carry an index `strs[n]`;
 *   - arrays of arrays carry decoded children `elems[n]` (nesting depth is bounded). */
struct pgd_gguf_value {
    pgd_gguf_vtype type;
    union {
        uint64_t u64; /* UINT8/16/32/64 */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        bool b;       /* BOOL */
        pgd_str str;  /* STRING */
        struct {
            pgd_gguf_vtype elem_type;
            uint64_t n;
            const uint8_t *raw;          /* fixed-size scalar elements, else NULL */
            const pgd_str *strs;         /* STRING elements, else NULL */
            const pgd_gguf_value *elems; /* ARRAY elements, else NULL */
        } arr;
    } v;
};

typedef struct pgd_gguf_kv {
    pgd_str key;
    pgd_gguf_value value;
} pgd_gguf_kv;

typedef struct pgd_gguf_tensor {
    const char *name;               /* NUL-terminated copy, owned by the pgd_gguf */
    uint32_t n_dims;                /* 1..4 */
    uint64_t ne[PGD_GGUF_MAX_DIMS]; /* ne[0] is the innermost (row) dimension; unused dims = 1 */
    uint32_t type;                  /* pgd_type id */
    uint64_t offset;                /* relative to the data section */
    uint64_t nelem;                 /* product of ne */
    uint64_t nbytes;                /* validated: data .. data+nbytes lies inside the file */
    const void *data;               /* into the mapping */
} pgd_gguf_tensor;

typedef struct pgd_gguf pgd_gguf;

/* Map and parse a file. On success *out owns the mapping; the caller frees it with
 * pgd_gguf_close. On failure returns a negative code, *out is NULL, and pgd_error_detail()
 * says what was wrong and where (byte offset). */
int pgd_gguf_open(const char *path, pgd_gguf **out);

/* Parse a GGUF image already in memory; the caller keeps `data` alive and unchanged until
 * pgd_gguf_close. Same validation as pgd_gguf_open (used by tests and the fuzzer). */
int pgd_gguf_open_memory(const void *data, size_t size, pgd_gguf **out);

void pgd_gguf_close(pgd_gguf *g); /* NULL is fine */

uint32_t pgd_gguf_version(const pgd_gguf *g);
uint32_t pgd_gguf_alignment(const pgd_gguf *g);
uint64_t pgd_gguf_file_size(const pgd_gguf *g);
/* Byte offset of the data section (tensor offsets are relative to it). Tensor data is aligned
 * only to pgd_gguf_alignment() within the file (which may be as small as 1): read it with memcpy
 * or pgd_dequant_row, not through a cast pointer, unless you checked the alignment. */
uint64_t pgd_gguf_data_offset(const pgd_gguf *g);

/* ---- metadata ---- */
size_t pgd_gguf_n_kv(const pgd_gguf *g);
const pgd_gguf_kv *pgd_gguf_kv_at(const pgd_gguf *g, size_t i);
const pgd_gguf_value *pgd_gguf_find(const pgd_gguf *g, const char *key); /* NULL if absent */

/* Typed getters: 0 on success, PGD_ENOTFOUND if the key is absent, PGD_EINVAL if its type
 * does not convert (integers convert between widths when the value fits; FLOAT32/64 convert
 * to each other; a string is returned as it is stored). */
int pgd_gguf_get_u32(const pgd_gguf *g, const char *key, uint32_t *out);
int pgd_gguf_get_u64(const pgd_gguf *g, const char *key, uint64_t *out);
int pgd_gguf_get_i64(const pgd_gguf *g, const char *key, int64_t *out);
int pgd_gguf_get_f32(const pgd_gguf *g, const char *key, float *out);
int pgd_gguf_get_bool(const pgd_gguf *g, const char *key, bool *out);
int pgd_gguf_get_str(const pgd_gguf *g, const char *key, pgd_str *out);
/* An array value (any element type); *out points into g. */
int pgd_gguf_get_arr(const pgd_gguf *g, const char *key, const pgd_gguf_value **out);

/* Array element access (v must be an ARRAY; i < v->v.arr.n). Integer and float getters
 * convert like the typed getters above; they return PGD_EINVAL on a type mismatch. */
int pgd_gguf_arr_i64(const pgd_gguf_value *v, uint64_t i, int64_t *out);
int pgd_gguf_arr_f64(const pgd_gguf_value *v, uint64_t i, double *out);
int pgd_gguf_arr_str(const pgd_gguf_value *v, uint64_t i, pgd_str *out);

const char *pgd_gguf_vtype_name(pgd_gguf_vtype t); /* "uint32", "array", ...; "?" if unknown */

/* ---- tensors ---- */
size_t pgd_gguf_n_tensors(const pgd_gguf *g);
const pgd_gguf_tensor *pgd_gguf_tensor_at(const pgd_gguf *g, size_t i);
const pgd_gguf_tensor *pgd_gguf_find_tensor(const pgd_gguf *g, const char *name); /* or NULL */

/* Dequantize row `row` (of nelem/ne[0] rows) of a tensor into dst[ne[0]]. */
int pgd_gguf_tensor_row_f32(const pgd_gguf_tensor *t, uint64_t row, float *dst);

#endif
