/*
 * tests/fuzz/fuzz_gguf.c — libFuzzer harness for the GGUF reader (pgd_gguf_open_memory).
 *
 * Every input must either parse or be refused with PGD_EFORMAT / PGD_EUNSUPPORTED and a
 * detail message; a parsed image is then walked completely (every key, string, array element,
 * nested array, tensor byte and dequantized row) so ASan sees any pointer that escapes the
 * input. Built by `make fuzz` (CMake option PGD_FUZZ, clang) into build-fuzz/fuzz_gguf:
 *
 *   make fuzz FUZZ_TARGETS=fuzz_gguf FUZZ_SECONDS=120
 *
 * Seeds: tests/fuzz/corpus/fuzz_gguf/ (small images written by tests/fuzz/seeds.py); any small
 * GGUF file will do too (`head -c 200000 model.gguf`: truncated files are refused, which is
 * fine for seeding the header paths). The harness also recognises a leading byte 0xA5 as
 * "build a valid header in front of the rest", which lets the fuzzer reach the kv and
 * tensor-info parsers quickly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/model/gguf.h"

static volatile unsigned g_sink;

static void walk_value(const pgd_gguf_value *v) {
    if (v->type == PGD_GGUF_STRING) {
        for (uint64_t i = 0; i < v->v.str.len; i++) g_sink += (unsigned char)v->v.str.ptr[i];
        return;
    }
    if (v->type != PGD_GGUF_ARRAY) return;
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        int64_t x;
        double f;
        pgd_str s;
        switch (v->v.arr.elem_type) {
        case PGD_GGUF_STRING:
            if (pgd_gguf_arr_str(v, i, &s) != 0) abort();
            for (uint64_t k = 0; k < s.len; k++) g_sink += (unsigned char)s.ptr[k];
            break;
        case PGD_GGUF_ARRAY:
            walk_value(&v->v.arr.elems[i]);
            break;
        case PGD_GGUF_FLOAT32:
        case PGD_GGUF_FLOAT64:
            if (pgd_gguf_arr_f64(v, i, &f) != 0) abort();
            g_sink += f == f;
            break;
        case PGD_GGUF_BOOL:
            g_sink += v->v.arr.raw[i];
            break;
        default:
            if (pgd_gguf_arr_i64(v, i, &x) == 0) g_sink += (unsigned)x;
            break;
        }
    }
}

static void walk(const pgd_gguf *g) {
    for (size_t i = 0; i < pgd_gguf_n_kv(g); i++) {
        const pgd_gguf_kv *kv = pgd_gguf_kv_at(g, i);
        for (uint64_t k = 0; k < kv->key.len; k++) g_sink += (unsigned char)kv->key.ptr[k];
        walk_value(&kv->value);
    }
    uint32_t u;
    (void)pgd_gguf_get_u32(g, "general.alignment", &u);
    for (size_t i = 0; i < pgd_gguf_n_tensors(g); i++) {
        const pgd_gguf_tensor *t = pgd_gguf_tensor_at(g, i);
        if (pgd_gguf_find_tensor(g, t->name) != t) abort();
        const uint8_t *d = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++) g_sink += d[k];
        if (t->ne[0] > (1u << 24)) continue;
        float *row = malloc(t->ne[0] * sizeof *row);
        if (!row) continue;
        uint64_t rows = t->nelem / t->ne[0];
        for (uint64_t r = 0; r < rows && r < 4096; r++)
            if (pgd_gguf_tensor_row_f32(t, r, row) == 0) g_sink += row[0] == row[0];
        free(row);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = NULL;
    const uint8_t *img = data;
    size_t len = size;
    if (size >= 17 && data[0] == 0xA5) {
        /* "GGUF" v3, counts from the next 16 bytes reduced to small numbers, then the rest */
        len = 24 + (size - 17);
        buf = malloc(len);
        if (!buf) return 0;
        memcpy(buf, "GGUF\x03\0\0\0", 8);
        uint64_t nt = data[1] % 8, nkv = data[9] % 16;
        for (int i = 0; i < 8; i++) buf[8 + i] = (uint8_t)(nt >> (8 * i));
        for (int i = 0; i < 8; i++) buf[16 + i] = (uint8_t)(nkv >> (8 * i));
        memcpy(buf + 24, data + 17, size - 17);
        img = buf;
    } else {
        /* an exact-size copy so over-reads past `size` are caught even for tiny inputs */
        buf = malloc(size ? size : 1);
        if (!buf) return 0;
        if (size) memcpy(buf, data, size);
        img = buf;
    }
    pgd_error_clear();
    pgd_gguf *g = NULL;
    int rc = pgd_gguf_open_memory(img, len, &g);
    if (rc == 0) {
        walk(g);
        pgd_gguf_close(g);
    } else {
        if (rc != PGD_EFORMAT && rc != PGD_EUNSUPPORTED && rc != PGD_ENOMEM) abort();
        if (g != NULL || pgd_error_detail()[0] == '\0') abort();
    }
    free(buf);
    return 0;
}
