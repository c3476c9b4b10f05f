/*
 * api/embeddings.c — the /v1/embeddings answer (see embeddings.h). Written directly into the
 * buffer rather than through a jansson tree: an answer may hold 2048 vectors of 4096 numbers.
 * Numbers are printed with 9 significant digits, enough for a float32 to read back exactly.
 */
#include "api/embeddings.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonutil.h"
#include "common/error.h"

void pgd_api_embedding_normalize(const float *in, uint32_t dim, float *out) {
    PGD_ASSERT(dim > 0);
    double ss = 0;
    for (uint32_t i = 0; i < dim; i++) ss += (double)in[i] * in[i];
    double scale = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (uint32_t i = 0; i < dim; i++) out[i] = (float)(in[i] * scale);
}

int pgd_api_embeddings_begin(pgd_buf *out) {
    return pgd_buf_puts(out, "{\"object\":\"list\",\"data\":[");
}

static int item_head(pgd_buf *out, size_t index) {
    return pgd_buf_printf(
        out, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", index ? "," : "", index);
}

int pgd_api_embeddings_item(pgd_buf *out, size_t index, const float *v, uint32_t dim) {
    int rc = item_head(out, index);
    if (!rc) rc = pgd_buf_reserve(out, (size_t)dim * 17 + 4);
    for (uint32_t i = 0; i < dim && !rc; i++) {
        double x = isfinite(v[i]) ? v[i] : 0.0; /* a unit vector's values are finite */
        char num[32];
        int n = snprintf(num, sizeof num, "%.9g", x);
        /* always a JSON number with a fraction or exponent (-1.0, not -1): a float to any
         * client that types what it reads */
        bool whole = !strpbrk(num, ".e");
        rc = pgd_buf_printf(out, "%s%.*s%s", i ? "," : "[", n, num, whole ? ".0" : "");
    }
    if (!rc) rc = pgd_buf_puts(out, "]}");
    return rc;
}

int pgd_api_embeddings_item_b64(pgd_buf *out, size_t index, const char *b64, size_t len) {
    int rc = item_head(out, index);
    if (!rc) rc = pgd_buf_puts(out, "\"");
    if (!rc) rc = pgd_buf_append(out, b64, len); /* base64's alphabet needs no escaping */
    if (!rc) rc = pgd_buf_puts(out, "\"}");
    return rc;
}

int pgd_api_embeddings_end(pgd_buf *out, pgd_str model, int64_t prompt_tokens) {
    json_t *m = pgd__api_jstr(model.ptr ? model.ptr : "", model.ptr ? model.len : 0);
    char *name = m ? json_dumps(m, JSON_ENCODE_ANY) : NULL;
    json_decref(m);
    if (!name) return PGD_ENOMEM;
    int rc = pgd_buf_printf(out,
                            "],\"model\":%s,\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":"
                            "%lld}}",
                            name, (long long)prompt_tokens, (long long)prompt_tokens);
    free(name);
    return rc;
}
